/* test_engine_model.c — the async engine on the real default model, for
 * the properties that need its kernels (the scheduler's logic is
 * test_engine.c's, on a fake model): batch invariance (a request's tokens
 * with a fixed seed are identical alone and among 31 others), preemption
 * under a tiny pool with the same tokens as alone, n > 1 sharing its
 * prompt pages, the model file mapped or read in giving the same tokens,
 * the backend chosen by name (options.device), and jump-forward with a JSON-shaped regex (valid output in fewer steps
 * than with no_jump_forward; n = 3).
 *
 * Needs the default model: without it every test fails (ctest label
 * `model`). TRELLIS_TEST_SCALE=small (sanitizer builds, where the model
 * runs ~100x slower) runs fewer and shorter requests;
 * TRELLIS_TEST_FILTER=<glob> runs only the matching tests.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/unit/harness.h"

#include "tests/unit/engine_fake.h"
#include "tests/unit/test_env.h"

/* ------------------------------------------------------------------ */
/* Real-model tests                                                    */
/* ------------------------------------------------------------------ */

static trellis_engine *real_engine(int32_t kv_pages, int32_t max_running) {
    trellis_engine_options o;
    trellis_engine_options_default(&o);
    o.threads = 2;
    o.max_batch_tokens = 256;
    o.chunk_size = 128;
    o.max_running = max_running;
    o.kv_pages = kv_pages;
    trellis_engine *e = NULL;
    char err[512];
    int s = trellis_engine_new(NULL, &o, &e, err, sizeof err);
    if (s) fprintf(stderr, "trellis_engine_new: %s\n", err);
    assert_int_equal(s, 0);
    return e;
}

static const char *k_prompts[] = {
    "The capital of France is",
    "Write a haiku about the sea.",
    "def fibonacci(n):",
    "Once upon a time, in a small village,",
    "The three primary colors are",
    "Explain why the sky is blue in one sentence.",
    "1, 2, 3, 5, 8, 13,",
    "A radix tree is a data structure that",
};

/* The model file mapped or read into huge pages: the same bytes, so the
 * same tokens; info says which; a mode outside TRELLIS_LOAD_* is refused
 * with a message naming the option. */
static void test_load_modes_real(void **state) {
    (void)state;
    assert_true(model_present());
    trellis_engine_options o;
    trellis_engine_options_default(&o);
    o.threads = 2;
    o.load = 3;
    trellis_engine *e = NULL;
    char err[512];
    assert_int_equal(trellis_engine_new(NULL, &o, &e, err, sizeof err), TRELLIS_ERR_INVALID_ARG);
    assert_null(e);
    assert_non_null(strstr(err, "options.load"));
    result r[2];
    const int32_t modes[2] = {TRELLIS_LOAD_MMAP, TRELLIS_LOAD_READ};
    for (int i = 0; i < 2; i++) {
        o.load = modes[i];
        assert_int_equal(trellis_engine_new(NULL, &o, &e, err, sizeof err), 0);
        trellis_engine_info info;
        trellis_engine_get_info(e, &info);
        assert_int_equal(info.load, modes[i]);
        trellis_request q;
        trellis_request_default(&q);
        q.prompt = k_prompts[0];
        q.max_tokens = 6;
        q.ignore_eos = true;
        run1(e, &q, &r[i]);
        assert_int_equal(r[i].s[0].n_tokens, 6);
        expect_all_free(e);
        trellis_engine_free(e);
    }
    same_tokens(&r[0], &r[1], 0);
    result_free(&r[0]);
    result_free(&r[1]);
}

/* options.device picks the backend through the registry: "cpu" (and
 * NULL) run, an unknown name fails listing the backends built in. */
static void test_device_option(void **state) {
    (void)state;
    assert_true(model_present());
    trellis_engine_options o;
    trellis_engine_options_default(&o);
    o.threads = 1;
    o.device = "tpu";
    trellis_engine *e = NULL;
    char err[512];
    assert_int_equal(trellis_engine_new(NULL, &o, &e, err, sizeof err), TRELLIS_ERR_NOT_FOUND);
    assert_null(e);
    assert_non_null(strstr(err, "unknown backend 'tpu'"));
    assert_non_null(strstr(err, "cpu"));
    o.device = "cpu";
    assert_int_equal(trellis_engine_new(NULL, &o, &e, err, sizeof err), 0);
    trellis_engine_info info;
    trellis_engine_get_info(e, &info);
    assert_string_equal(info.device, "cpu");
    assert_int_equal(info.threads, 1);
    /* the GGUF's template text, as the file has it (SmolLM2: ChatML) */
    assert_non_null(info.chat_template);
    assert_non_null(strstr(info.chat_template, "<|im_start|>"));
    trellis_engine_free(e);
}

static void test_batch_invariance_real(void **state) {
    (void)state;
    assert_true(model_present());
    const int others = small_scale() ? 3 : 31;
    const int ntok = small_scale() ? 3 : 16;
    trellis_engine *e = real_engine(0, 64);
    trellis_request probe;
    trellis_request_default(&probe);
    probe.prompt = "In a distant galaxy, the crew of the starship";
    probe.max_tokens = ntok;
    probe.temperature = 0.8f;
    probe.top_k = 40;
    probe.seed = 4242;
    probe.ignore_eos = true;
    result alone;
    run1(e, &probe, &alone);
    assert_int_equal(alone.s[0].n_tokens, ntok);
    assert_int_equal(trellis_flush_cache(e), 0); /* no cache help either */
    trellis_stats st0;
    stats_now(e, &st0);
    result *rs = calloc((size_t)others + 1, sizeof *rs);
    for (int i = 0; i <= others; i++) {
        if (i == others / 2) {
            submit_ok(e, &probe, &rs[i]); /* in the middle of the crowd */
            continue;
        }
        trellis_request q;
        trellis_request_default(&q);
        q.prompt = k_prompts[i % 8];
        q.max_tokens = ntok + (i % 5);
        q.temperature = 0.7f;
        q.seed = (uint64_t)i;
        q.ignore_eos = true;
        submit_ok(e, &q, &rs[i]);
    }
    drain(e, rs, others + 1);
    same_tokens(&alone, &rs[others / 2], 0);
    assert_string_equal(alone.s[0].text, rs[others / 2].s[0].text);
    trellis_stats st;
    stats_now(e, &st);
    /* they really ran together: mean batch well above one row */
    double per_step = (double)(st.batch_tokens - st0.batch_tokens) /
                      (double)(st.steps - st0.steps);
    assert_true(per_step > (others + 1) / 4.0);
    fprintf(stderr, "invariance: \"%s\" (%llu steps, %.1f tokens/step)\n",
            alone.s[0].text, (unsigned long long)(st.steps - st0.steps), per_step);
    for (int i = 0; i <= others; i++) result_free(&rs[i]);
    free(rs);
    result_free(&alone);
    expect_all_free(e);
    trellis_engine_free(e);
}

static void test_preemption_and_fork_real(void **state) {
    (void)state;
    assert_true(model_present());
    /* small scale (sanitizer builds, where the model runs ~100x slower):
     * the fake-model tests cover preemption; only the fork part runs */
    const bool small = small_scale();
    const int n = 6, ntok = 24;
    trellis_request qs[6];
    for (int i = 0; i < n; i++) {
        trellis_request_default(&qs[i]);
        qs[i].prompt = k_prompts[i];
        qs[i].max_tokens = ntok;
        qs[i].seed = (uint64_t)(10 + i);
        qs[i].temperature = 0.6f;
        qs[i].ignore_eos = true;
    }
    result ref[6], got[6];
    trellis_engine *e;
    if (small) goto fork;
    e = real_engine(0, 64);
    for (int i = 0; i < n; i++) run1(e, &qs[i], &ref[i]);
    trellis_engine_free(e);
    /* a pool of 3 pages of 16 tokens: one or two sequences at a time */
    e = real_engine(3, 64);
    for (int i = 0; i < n; i++) submit_ok(e, &qs[i], &got[i]);
    drain(e, got, n);
    trellis_stats st;
    stats_now(e, &st);
    fprintf(stderr, "real preemption: %llu preemptions\n",
            (unsigned long long)st.preemptions);
    assert_true(st.preemptions > 0);
    for (int i = 0; i < n; i++) {
        same_tokens(&ref[i], &got[i], 0);
        result_free(&ref[i]);
        result_free(&got[i]);
    }
    expect_all_free(e);
    trellis_engine_free(e);

fork:
    /* n > 1 forks share the prompt's pages */
    e = real_engine(0, 64);
    trellis_request q;
    trellis_request_default(&q);
    q.prompt = "Here is a list of ten fruits, one per line, starting with apples "
               "and ending with the most exotic fruit you know:";
    q.n = 4;
    q.max_tokens = small ? 2 : 10;
    q.seed = 1;
    result r;
    run1(e, &q, &r);
    trellis_stats fs;
    stats_now(e, &fs);
    int32_t np = r.s[0].m.prompt_tokens, full = np / 16 * 16;
    assert_true(full >= 16);
    assert_int_equal(fs.prefill_tokens, (uint64_t)(np + 3 * (np - full)));
    for (int i = 1; i < 4; i++) assert_int_equal(r.s[i].m.cached_tokens, full);
    result_free(&r);
    trellis_engine_free(e);
}

/* Jump-forward on the real model with a JSON-shaped regex: the output
 * full-matches the regex (PCRE2), with fewer engine steps (forward passes)
 * than the same request with no_jump_forward. Both greedy outputs must be
 * valid, but they need not be equal: jump-forward feeds the model the
 * forced text's canonical tokens (`"` + `name` re-encoded as one token
 * `"name`, say), where token-by-token sampling may have spelt it with
 * other tokens, so the model conditions on different ids afterwards.
 * Then n = 3 samples at temperature 1 from one request. */
static void test_jump_forward_real(void **state) {
    (void)state;
    assert_true(model_present());
    const char *rx = "\\{\"name\": \"[A-Z][a-z]{1,12}\", \"age\": [1-9][0-9]?, "
                     "\"city\": \"[A-Z][a-z]{2,15}\", \"likes\": \\[\"[a-z]{2,12}\"(, "
                     "\"[a-z]{2,12}\"){0,2}\\]\\}";
    trellis_engine *e = real_engine(0, 64);
    trellis_message msg = {"user", "Describe a fictional person as a JSON object "
                                   "with their name, age, city and likes."};
    trellis_request q;
    trellis_request_default(&q);
    q.messages = &msg;
    q.n_messages = 1;
    q.regex = rx;
    q.temperature = 0;
    q.max_tokens = 96;
    trellis_stats s0, s1, s2;
    result jf, nojf;
    stats_now(e, &s0);
    run1(e, &q, &jf);
    stats_now(e, &s1);
    q.no_jump_forward = true;
    run1(e, &q, &nojf);
    stats_now(e, &s2);
    uint64_t steps_jf = s1.steps - s0.steps, steps_nojf = s2.steps - s1.steps;
    fprintf(stderr, "jump-forward: %s\n  %d tokens (%d forced) in %llu steps\n"
                    "no jump-forward: %s\n  %d tokens in %llu steps\n",
            jf.s[0].text, jf.s[0].n_tokens, jf.s[0].m.forced_tokens,
            (unsigned long long)steps_jf, nojf.s[0].text, nojf.s[0].n_tokens,
            (unsigned long long)steps_nojf);
    assert_int_equal(jf.s[0].finish, TRELLIS_FINISH_STOP);
    assert_int_equal(nojf.s[0].finish, TRELLIS_FINISH_STOP);
    assert_true(pcre_full_match(rx, jf.s[0].text, jf.s[0].text_len));
    assert_true(pcre_full_match(rx, nojf.s[0].text, nojf.s[0].text_len));
    assert_true(jf.s[0].m.forced_tokens > 0);
    assert_int_equal(nojf.s[0].m.forced_tokens, 0);
    assert_int_equal(s1.forced_tokens - s0.forced_tokens,
                     (uint64_t)jf.s[0].m.forced_tokens);
    assert_true(s1.forward_passes_saved > s0.forward_passes_saved);
    assert_int_equal(s2.forward_passes_saved, s1.forward_passes_saved);
    /* the skeleton alone (`{"name": "`, `", "age": `, ...) is ~20 tokens */
    assert_true(steps_jf + 8 <= steps_nojf);
    result_free(&jf);
    result_free(&nojf);
    if (!small_scale()) {
        q.no_jump_forward = false;
        q.temperature = 1.0f;
        q.n = 3;
        q.seed = 5;
        result r;
        run1(e, &q, &r);
        for (int i = 0; i < 3; i++) {
            fprintf(stderr, "n=3 sample %d (%s): %s\n", i,
                    trellis_finish_name(r.s[i].finish), r.s[i].text);
            if (r.s[i].finish == TRELLIS_FINISH_LENGTH)
                assert_true(pcre_live_prefix(rx, r.s[i].text, r.s[i].text_len));
            else
                assert_true(pcre_full_match(rx, r.s[i].text, r.s[i].text_len));
        }
        result_free(&r);
    }
    expect_all_free(e);
    trellis_engine_free(e);
}

/* Prompt log-probs against teacher forcing: greedy generation's own
 * log-probs of its tokens equal the prompt log-probs those tokens get
 * when the prompt is the original prompt followed by them (prefill rows
 * vs decode rows of the same positions; within 2e-3, printed). The
 * greedy token is the top alternative of its position. A second run,
 * with the prompt cached by the first, gives the same numbers (the cached
 * positions are recomputed). Chunking and the cache's limits are
 * test_engine_plp.c's, on the fake model. */
static void test_prompt_logprobs_real(void **state) {
    (void)state;
    assert_true(model_present());
    trellis_engine *e = real_engine(0, 8);
    const int ngen = small_scale() ? 6 : 24;
    const char *text = "A radix tree is a data structure that";
    int32_t *ids = NULL;
    size_t n_ids = 0;
    assert_int_equal(trellis_tokenize(e, text, strlen(text), false, &ids, &n_ids), 0);
    trellis_request q;
    trellis_request_default(&q);
    q.tokens = ids;
    q.n_tokens = (int32_t)n_ids;
    q.temperature = 0;
    q.max_tokens = ngen;
    q.ignore_eos = true;
    q.logprobs = true;
    result gen;
    run1(e, &q, &gen);
    assert_int_equal(gen.s[0].n_tokens, ngen);
    /* the prompt: the text's tokens, then the generated ones */
    int32_t n_full = (int32_t)n_ids + ngen;
    int32_t *full = malloc((size_t)n_full * sizeof *full);
    assert_non_null(full);
    memcpy(full, ids, n_ids * sizeof *full);
    memcpy(full + n_ids, gen.s[0].tokens, (size_t)ngen * sizeof *full);
    trellis_logprob first[64];
    for (int run = 0; run < 2; run++) {
        trellis_request p;
        trellis_request_default(&p);
        p.tokens = full;
        p.n_tokens = n_full;
        p.max_tokens = 0;
        p.prompt_logprobs = true;
        p.prompt_logprobs_start = (int32_t)n_ids;
        p.prompt_top_logprobs = 3;
        result r;
        submit_ok(e, &p, &r);
        int got_plp = 0;
        while (!r.request_done) {
            trellis_event *ev;
            assert_int_equal(trellis_wait(e, 900000, &ev), 1);
            if (ev->prompt_logprobs) {
                got_plp++;
                assert_int_equal(ev->n_prompt_logprobs, ngen);
                assert_int_equal(ev->prompt_logprobs_start, (int32_t)n_ids);
                double worst = 0;
                for (int i = 0; i < ngen; i++) {
                    const trellis_logprob *a = &ev->prompt_logprobs[i];
                    assert_int_equal(a->token, gen.s[0].tokens[i]);
                    double d = fabs((double)a->logprob - (double)gen.s[0].lp[i].logprob);
                    worst = d > worst ? d : worst;
                    assert_int_equal(a->n_top, 3);
                    assert_int_equal(a->top[0].token, a->token); /* greedy: argmax */
                    if (run == 0) first[i] = *a;
                    else assert_true(fabs((double)a->logprob - (double)first[i].logprob) < 1e-5);
                }
                fprintf(stderr, "prompt logprobs vs generation (run %d): max |diff| %.2e\n",
                        run, worst);
                assert_true(worst < 2e-3);
            }
            collect(&r, ev);
            trellis_event_free(ev);
        }
        assert_int_equal(got_plp, 1);
        assert_int_equal(r.s[0].finish, TRELLIS_FINISH_LENGTH);
        result_free(&r);
    }
    free(full);
    free(ids);
    result_free(&gen);
    expect_all_free(e);
    trellis_engine_free(e);
}

/* Speculative decoding on the real model: batch invariance makes a
 * draft's logits those of a one-token step, so the tokens are the same
 * with and without it, greedy and sampled; on a copying prompt drafts
 * are kept. */
static void test_spec_ngram_real(void **state) {
    (void)state;
    assert_true(model_present());
    trellis_engine *plain = real_engine(0, 8);
    trellis_engine_options o;
    trellis_engine_options_default(&o);
    o.threads = 2;
    o.max_batch_tokens = 256;
    o.chunk_size = 128;
    o.max_running = 8;
    o.spec_ngram = 8;
    trellis_engine *spec = NULL;
    char err[512];
    assert_int_equal(trellis_engine_new(NULL, &o, &spec, err, sizeof err), 0);
    const float temps[] = {0.0f, 0.9f};
    int32_t kept = 0;
    for (int k = 0; k < 2; k++) {
        trellis_request q;
        trellis_request_default(&q);
        q.prompt = "Copy the text.\nText: the red fox ran over the green hill, and the red "
                   "fox ran back over the green hill.\nCopy: the red fox";
        q.max_tokens = small_scale() ? 16 : 40;
        q.temperature = temps[k];
        q.seed = 11;
        q.n = 2;
        result a, b;
        run1(plain, &q, &a);
        run1(spec, &q, &b);
        for (int i = 0; i < 2; i++) {
            same_tokens(&a, &b, i);
            assert_string_equal(a.s[i].text, b.s[i].text);
            kept += b.s[i].m.spec_accepted_tokens;
        }
        result_free(&a);
        result_free(&b);
    }
    assert_true(kept > 0);
    trellis_engine_free(plain);
    trellis_engine_free(spec);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_load_modes_real),
        cmocka_unit_test(test_device_option),
        cmocka_unit_test(test_batch_invariance_real),
        cmocka_unit_test(test_preemption_and_fork_real),
        cmocka_unit_test(test_jump_forward_real),
        cmocka_unit_test(test_prompt_logprobs_real),
        cmocka_unit_test(test_spec_ngram_real),
    };
    tr_test_filter_from_env();
    return cmocka_run_group_tests(tests, NULL, NULL);
}
