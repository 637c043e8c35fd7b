/* test_end_span.c — the end-of-span rule (include/trellis.h,
 * trellis_request.end_span).
 *
 * On test_engine's fake model (engine_fake.h, synthetic vocabulary: no
 * model file needed), whose logits are a known
 * function of the history (8 likely ids, the 8th the argmax), greedy
 * outputs are replayed step by step against a matcher: where the mask
 * allows end-of-generation, the sample must end (finish stop, stop_token
 * -1) exactly when the unmasked argmax is forbidden, and otherwise take
 * that argmax; elsewhere it takes the masked argmax, as plain masking
 * does. The rule off must replay as plain masking. AUTO is on for regexes
 * and off for custom constraints; ON works on a custom constraint. With
 * temperature, n = 3, jump-forward and logprobs, every finished output
 * matches and every reported alternative is a token the grammar allowed
 * at that point (log-probs of the masked distribution).
 *
 * On the real model, the measurement of the issue: 40 regexes with
 * unbounded quantifiers (tests/data/grammar/end_span_regexes.txt), greedy
 * and 2 seeds, max_tokens 64, rule on and off: every finished output
 * full-matches (PCRE2), every cut one is a prefix of a match, and the rule
 * finishes strictly more generations (the figures are printed;
 * tests/bench/bench_end_span.c runs the same with more seeds).
 * TRELLIS_TEST_SCALE=small: 8 regexes, greedy only, max_tokens 32.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/unit/harness.h"

#include "runtime/engine/constraint_internal.h"
#include "runtime/vocab/vocab.h"
#include "tests/unit/end_span_run.h"
#include "tests/unit/engine_fake.h"
#include "tests/unit/test_env.h"

/* The fake model's likely ids after history toks[0..n) (fake_forward):
 * ids[k] has logit 12 + k/2 (a later k wins a collision), the rest 0. */
static void fake_likely(const int32_t *toks, int n, int32_t n_vocab, int32_t ids[8]) {
    uint64_t h = 0x12345;
    for (int i = 0; i < n; i++) h = mix(h ^ (uint64_t)toks[i]);
    for (int k = 0; k < 8; k++)
        ids[k] = 100 + (int32_t)(mix(h + (uint64_t)k) % (uint64_t)(n_vocab - 200));
}

static bool allowed(const uint64_t *m, int32_t t) { return m[t >> 6] >> (t & 63) & 1; }

/* The fake engine's vocabulary (tiny_vocab.h), for replaying. */
static grammar_vocab *fake_vocab(void) {
    tokenizer *tok = tv_tokenizer();
    grammar_vocab *v;
    assert_non_null(tok);
    assert_int_equal(tr_vocab_from_tokenizer(tok, &v, NULL), TR_OK);
    tr_tokenizer_free(tok);
    return v;
}

/* Replays a greedy sample (no jump-forward) of rx after prompt; rule: the
 * end-of-span rule on. Returns the number of steps where the rule
 * applied. */
static int replay_greedy(grammar_vocab *v, const char *rx, const int32_t *prompt,
                         int n_prompt, const result *r, int32_t max_tokens, bool rule) {
    grammar *g;
    grammar_matcher *m;
    assert_int_equal(tr_grammar_compile_regex(rx, strlen(rx), NULL, &g, NULL), TR_OK);
    assert_int_equal(tr_grammar_matcher_new(g, v, 0, &m), TR_OK);
    int32_t nv = tr_grammar_vocab_n_vocab(v);
    size_t nw = tr_grammar_vocab_mask_words(v);
    uint64_t *mask = malloc(nw * sizeof *mask);
    int32_t hist[512];
    memcpy(hist, prompt, (size_t)n_prompt * sizeof *hist);
    int n = n_prompt, rule_steps = 0;
    const int32_t *out = r->s[0].tokens;
    int32_t n_out = r->s[0].n_tokens;
    for (int t = 0;; t++) {
        if (tr_grammar_matcher_is_accepting(m) && !tr_grammar_matcher_can_continue(m)) {
            /* complete: ends without sampling */
            assert_int_equal(n_out, t);
            assert_int_equal(r->s[0].finish, TRELLIS_FINISH_STOP);
            assert_int_equal(r->s[0].stop_token, -1);
            break;
        }
        if (t == max_tokens) {
            assert_int_equal(n_out, t);
            assert_int_equal(r->s[0].finish, TRELLIS_FINISH_LENGTH);
            break;
        }
        assert_int_equal(tr_grammar_matcher_fill_mask(m, mask, nw), TR_OK);
        int32_t ids[8], want = -1;
        fake_likely(hist, n, nv, ids);
        if (rule && tr_grammar_matcher_is_accepting(m)) {
            rule_steps++;
            if (!allowed(mask, ids[7])) { /* the rule ends the span */
                assert_int_equal(n_out, t);
                assert_int_equal(r->s[0].finish, TRELLIS_FINISH_STOP);
                assert_int_equal(r->s[0].stop_token, -1);
                break;
            }
            want = ids[7];
        } else {
            for (int k = 7; k >= 0 && want < 0; k--)
                if (allowed(mask, ids[k])) want = ids[k];
            if (want < 0) want = tr_grammar_mask_nth(mask, nw, 0); /* all at 0 */
        }
        if (tr_grammar_vocab_is_eog(v, want)) { /* EOS: not output */
            assert_int_equal(n_out, t);
            assert_int_equal(r->s[0].finish, TRELLIS_FINISH_STOP);
            assert_int_equal(r->s[0].stop_token, want);
            break;
        }
        assert_true(t < n_out);
        assert_int_equal(out[t], want);
        assert_int_equal(tr_grammar_matcher_accept_token(m, want), TR_OK);
        hist[n++] = want;
    }
    free(mask);
    tr_grammar_matcher_free(m);
    tr_grammar_free(g);
    return rule_steps;
}

static const char *const k_rx[] = {"[a-z]+( [a-z]+)*", "[0-9]+(\\.[0-9]+)?",
                                   "[A-Za-z]+", "(ab|c)+", "[ -~]+", "x[a-z]*y?"};
enum { N_RX = sizeof k_rx / sizeof *k_rx };

static void test_greedy_replay_fake(void **state) {
    (void)state;
    grammar_vocab *v = fake_vocab();
    fake_cfg c = fake_default();
    trellis_engine *e = fake_engine(&c, NULL);
    int rule_steps = 0, rule_ends = 0, off_lengths = 0;
    for (int i = 0; i < N_RX; i++) {
        for (int p = 0; p < 8; p++) {
            int32_t prompt[12];
            rand_tokens(100 * (uint64_t)i + (uint64_t)p, prompt, 12);
            trellis_request q;
            trellis_request_default(&q);
            q.tokens = prompt;
            q.n_tokens = 12;
            q.regex = k_rx[i];
            q.temperature = 0;
            q.max_tokens = 24;
            q.no_jump_forward = true;
            result on, off, aut;
            q.end_span = TRELLIS_END_SPAN_ON;
            run1(e, &q, &on);
            q.end_span = TRELLIS_END_SPAN_OFF;
            run1(e, &q, &off);
            q.end_span = TRELLIS_END_SPAN_AUTO; /* a regex: on */
            run1(e, &q, &aut);
            rule_steps += replay_greedy(v, k_rx[i], prompt, 12, &on, 24, true);
            replay_greedy(v, k_rx[i], prompt, 12, &off, 24, false);
            same_tokens(&on, &aut, 0);
            rule_ends += on.s[0].finish == TRELLIS_FINISH_STOP && on.s[0].stop_token == -1;
            off_lengths += off.s[0].finish == TRELLIS_FINISH_LENGTH;
            result_free(&on);
            result_free(&off);
            result_free(&aut);
        }
    }
    fprintf(stderr, "fake greedy: rule applied on %d steps, ended %d of %d samples; "
                    "%d ran to max_tokens without it\n",
            rule_steps, rule_ends, N_RX * 8, off_lengths);
    assert_true(rule_ends > N_RX * 8 / 2);
    assert_true(off_lengths > 0);
    expect_all_free(e);
    trellis_engine_free(e);
    tr_grammar_vocab_free(v);
}

/* A custom constraint over a caller-owned matcher (ops' free is a no-op):
 * AUTO leaves the rule off for it, ON turns it on. */
static void test_custom_constraint_fake(void **state) {
    (void)state;
    grammar_vocab *v = fake_vocab();
    fake_cfg c = fake_default();
    trellis_engine *e = fake_engine(&c, NULL);
    const char *rx = k_rx[0];
    grammar *g;
    assert_int_equal(tr_grammar_compile_regex(rx, strlen(rx), NULL, &g, NULL), TR_OK);
    int differ = 0;
    for (int p = 0; p < 8; p++) {
        int32_t prompt[12];
        rand_tokens(7000 + (uint64_t)p, prompt, 12);
        result r[3];
        const int32_t modes[3] = {TRELLIS_END_SPAN_AUTO, TRELLIS_END_SPAN_ON,
                                  TRELLIS_END_SPAN_OFF};
        for (int k = 0; k < 3; k++) {
            grammar_matcher *m;
            assert_int_equal(tr_grammar_matcher_new(g, v, 0, &m), TR_OK);
            trellis_request q;
            trellis_request_default(&q);
            q.tokens = prompt;
            q.n_tokens = 12;
            q.temperature = 0;
            q.max_tokens = 24;
            q.no_jump_forward = true;
            q.constraint = &tr_constraint_matcher_ops;
            q.constraint_state = m;
            q.end_span = modes[k];
            run1(e, &q, &r[k]);
            tr_grammar_matcher_free(m);
        }
        replay_greedy(v, rx, prompt, 12, &r[0], 24, false); /* AUTO: off */
        replay_greedy(v, rx, prompt, 12, &r[1], 24, true);
        replay_greedy(v, rx, prompt, 12, &r[2], 24, false);
        differ += r[0].s[0].n_tokens != r[1].s[0].n_tokens;
        for (int k = 0; k < 3; k++) result_free(&r[k]);
    }
    assert_true(differ > 0);
    /* a value outside the enum */
    int32_t prompt[4] = {100, 200, 300, 400};
    trellis_request q;
    trellis_request_default(&q);
    q.tokens = prompt;
    q.n_tokens = 4;
    q.regex = rx;
    q.end_span = 5;
    char err[256];
    assert_int_equal(trellis_submit(e, &q, NULL, err, sizeof err), TRELLIS_ERR_INVALID_ARG);
    assert_non_null(strstr(err, "end_span is 5"));
    tr_grammar_free(g);
    trellis_engine_free(e);
    tr_grammar_vocab_free(v);
}

/* Temperature 1, n = 3, jump-forward, logprobs with 5 alternatives, rule
 * on: finished outputs match; sampled tokens report alternatives the
 * grammar allowed at that step (the masked distribution), forced ones
 * none. */
static void test_sampled_logprobs_fake(void **state) {
    (void)state;
    grammar_vocab *v = fake_vocab();
    fake_cfg c = fake_default();
    trellis_engine *e = fake_engine(&c, NULL);
    size_t nw = tr_grammar_vocab_mask_words(v);
    uint64_t *mask = malloc(nw * sizeof *mask);
    const char *rxs[] = {"[a-z]+( [a-z]+)*", "id: [0-9]+(, id: [0-9]+)*",
                         "[ -~]+", "(ab|c)+"};
    int stops = 0, samples = 0, checked = 0;
    for (int i = 0; i < 4; i++) {
        for (int p = 0; p < 6; p++) {
            int32_t prompt[10];
            rand_tokens(555 + 10 * (uint64_t)i + (uint64_t)p, prompt, 10);
            trellis_request q;
            trellis_request_default(&q);
            q.tokens = prompt;
            q.n_tokens = 10;
            q.regex = rxs[i];
            q.max_tokens = 32;
            q.n = 3;
            q.seed = (uint64_t)(i * 100 + p);
            q.logprobs = true;
            q.top_logprobs = 5;
            result r;
            run1(e, &q, &r);
            grammar *g;
            assert_int_equal(tr_grammar_compile_regex(rxs[i], strlen(rxs[i]), NULL, &g,
                                                      NULL), TR_OK);
            for (int j = 0; j < 3; j++) {
                samples++;
                if (r.s[j].finish == TRELLIS_FINISH_STOP) {
                    stops++;
                    assert_true(pcre_full_match(rxs[i], r.s[j].text, r.s[j].text_len));
                } else {
                    assert_int_equal(r.s[j].finish, TRELLIS_FINISH_LENGTH);
                    assert_true(pcre_live_prefix(rxs[i], r.s[j].text, r.s[j].text_len));
                }
                grammar_matcher *m;
                assert_int_equal(tr_grammar_matcher_new(g, v, 0, &m), TR_OK);
                for (int t = 0; t < r.s[j].n_tokens; t++) {
                    const trellis_logprob *l = &r.s[j].lp[t];
                    assert_int_equal(l->token, r.s[j].tokens[t]);
                    assert_true(l->logprob <= 0.0f);
                    assert_int_equal(tr_grammar_matcher_fill_mask(m, mask, nw), TR_OK);
                    for (int k = 0; k < l->n_top; k++) {
                        assert_true(allowed(mask, l->top[k].token));
                        checked++;
                    }
                    assert_int_equal(tr_grammar_matcher_accept_token(m, r.s[j].tokens[t]),
                                     TR_OK);
                }
                tr_grammar_matcher_free(m);
            }
            tr_grammar_free(g);
            result_free(&r);
        }
    }
    fprintf(stderr, "fake sampled: %d of %d samples finished, %d alternatives checked\n",
            stops, samples, checked);
    assert_true(stops > samples / 2);
    assert_true(checked > 100);
    free(mask);
    expect_all_free(e);
    trellis_engine_free(e);
    tr_grammar_vocab_free(v);
}

/* The measurement on the real model (see the top of the file). */
static void test_measure_real(void **state) {
    (void)state;
    assert_true(model_present());
    static es_case cs[ES_MAX_CASES];
    int n = es_load(TRELLIS_SOURCE_DIR "/tests/data/grammar/end_span_regexes.txt", cs,
                    ES_MAX_CASES);
    assert_int_equal(n, 40);
    int use = n, seeds = 2, max_tokens = 64;
    if (small_scale()) { /* sanitizer builds: every 5th regex, greedy, 32 */
        for (int i = 0; i < n / 5; i++) {
            es_case t = cs[i];
            cs[i] = cs[5 * i];
            cs[5 * i] = t;
        }
        use = n / 5;
        seeds = 0;
        max_tokens = 32;
    }
    trellis_engine_options o;
    trellis_engine_options_default(&o);
    o.threads = 2;
    o.max_batch_tokens = 256;
    trellis_engine *e = NULL;
    char err[512];
    assert_int_equal(trellis_engine_new(NULL, &o, &e, err, sizeof err), 0);
    es_result on, off;
    assert_true(es_run(e, cs, use, seeds, 1, max_tokens, TRELLIS_END_SPAN_ON, &on));
    assert_true(es_run(e, cs, use, seeds, 1, max_tokens, TRELLIS_END_SPAN_OFF, &off));
    for (int i = 0; i < use; i++) {
        for (int j = 0; j < on.n_per_case; j++) {
            es_sample *a = &on.s[i][j], *b = &off.s[i][j];
            if (!a->matches || !b->matches || j == 0)
                fprintf(stderr, "%-40s %s on: %-8s %s\n%-40s %s off: %-8s %s\n",
                        cs[i].regex, j ? "seed" : "greedy", trellis_finish_name(a->finish),
                        a->text, "", j ? "seed" : "greedy", trellis_finish_name(b->finish),
                        b->text);
        }
    }
    fprintf(stderr, "end-of-span rule, %d regexes x (greedy + %d seeds), max_tokens %d:\n"
                    "  on:  %d of %d finished (%.1f%%), mean %.1f tokens, %d broke the regex\n"
                    "  off: %d of %d finished (%.1f%%), mean %.1f tokens, %d broke the regex\n",
            use, seeds, max_tokens, on.finished, on.total, 100.0 * on.finished / on.total,
            on.mean_tokens, on.bad, off.finished, off.total,
            100.0 * off.finished / off.total, off.mean_tokens, off.bad);
    assert_int_equal(on.bad, 0);
    assert_int_equal(off.bad, 0);
    assert_true(on.finished > off.finished);
    es_result_free(&on);
    es_result_free(&off);
    es_cases_free(cs, n);
    trellis_engine_free(e);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy_replay_fake),
        cmocka_unit_test(test_custom_constraint_fake),
        cmocka_unit_test(test_sampled_logprobs_fake),
        cmocka_unit_test(test_measure_real),
    };
    tr_test_filter_from_env();
    return cmocka_run_group_tests(tests, NULL, NULL);
}
