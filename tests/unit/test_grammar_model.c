/* test_grammar_model.c — constrained generation with the real model,
 * end to end through the engine's C API (include/trellis.h): 100 regexes
 * (tests/data/grammar/model_regexes.txt: dates, times, phone numbers,
 * IPv4/IPv6, emails, identifiers, colours, versions, UUIDs, numbers,
 * choices, JSON-like records, code shapes), each with a user message that
 * suits it, sent through the model's chat template.
 *
 * Every regex runs greedy and at temperature 1 with 3 seeds (one request
 * with n = 3: seeds s, s+1, s+2), jump-forward on, max_tokens 48, all
 * requests submitted at once so that the engine batches them. Every
 * sample must either end with finish "stop" and full-match its regex by
 * PCRE2 (anchored at both ends, UTF, `$` at the end only: the grammar
 * dialect), or end with finish "length" with its text still a prefix of
 * some match (PCRE2 hard partial matching: the matcher was in a live
 * state). PCRE2 is the independent oracle; grammar/ has its own
 * differential tests against it.
 *
 * TRELLIS_TEST_SCALE=small (the sanitizer pass): 12 regexes spread over
 * the file, greedy + one seed. Skips when the model file is absent.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "base/paths.h"
#include "base/util.h"
#include "trellis.h"
#include "tests/unit/test_env.h"

#define MAX_CASES 128
#define N_SEEDS 3

typedef struct gcase {
    char *regex, *prompt;
    int line;
    pcre2_code *full, *partial; /* whole match; prefix of a match */
} gcase;

/* One sample's output, gathered from its DONE event (no streaming). */
typedef struct gout {
    char *text;
    size_t len;
    trellis_finish finish;
    int32_t n_tokens, forced;
    char error[256];
    bool done;
} gout;

typedef struct greq {
    uint64_t id;
    int c;        /* case index */
    int n;        /* samples */
    bool greedy;
    gout s[N_SEEDS];
} greq;

static pcre2_code *compile_or_die(const char *rx, bool partial, int line) {
    char pat[2048];
    snprintf(pat, sizeof pat, partial ? "(?:%s)$" : "%s", rx);
    int ec;
    PCRE2_SIZE eo;
    uint32_t opt = PCRE2_UTF | PCRE2_ANCHORED | PCRE2_DOLLAR_ENDONLY;
    if (!partial) opt |= PCRE2_ENDANCHORED;
    pcre2_code *c = pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED, opt,
                                  &ec, &eo, NULL);
    if (!c) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(ec, msg, sizeof msg);
        fprintf(stderr, "line %d: PCRE2 rejects /%s/: %s\n", line, rx, (char *)msg);
    }
    assert_non_null(c);
    return c;
}

static int match(pcre2_code *c, const char *s, size_t n, uint32_t opts) {
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(c, NULL);
    assert_non_null(md);
    int rc = pcre2_match(c, (PCRE2_SPTR)s, n, 0, opts, md, NULL);
    pcre2_match_data_free(md);
    return rc;
}

/* Reads the data file: pattern TAB prompt per line. */
static int load_cases(gcase *cs, char **buf_out) {
    const char *path = TRELLIS_SOURCE_DIR "/tests/data/grammar/model_regexes.txt";
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)sz + 1);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)sz, f), (size_t)sz);
    buf[sz] = 0;
    fclose(f);
    int n = 0, line = 0;
    for (char *p = buf; p && *p;) {
        char *nl = strchr(p, '\n');
        if (nl) *nl = 0;
        line++;
        if (p[0] && p[0] != '#') {
            char *tab = strchr(p, '\t');
            if (!tab) fprintf(stderr, "%s:%d: no TAB\n", path, line);
            assert_non_null(tab);
            *tab = 0;
            assert_true(n < MAX_CASES);
            cs[n] = (gcase){.regex = p, .prompt = tab + 1, .line = line};
            n++;
        }
        p = nl ? nl + 1 : NULL;
    }
    *buf_out = buf;
    return n;
}

static void collect(greq *rs, int n_req, const trellis_event *ev) {
    greq *q = NULL;
    for (int i = 0; i < n_req; i++)
        if (rs[i].id == ev->request_id) q = &rs[i];
    assert_non_null(q);
    assert_true(ev->index >= 0 && ev->index < q->n);
    assert_int_equal(ev->kind, TRELLIS_EVENT_DONE); /* not streamed */
    gout *o = &q->s[ev->index];
    assert_false(o->done);
    o->done = true;
    o->text = malloc(ev->text_len + 1);
    assert_non_null(o->text);
    memcpy(o->text, ev->text, ev->text_len);
    o->text[ev->text_len] = 0;
    o->len = ev->text_len;
    o->finish = ev->finish;
    o->n_tokens = ev->n_tokens;
    o->forced = ev->metrics.forced_tokens;
    snprintf(o->error, sizeof o->error, "%s", ev->error);
}

static void test_regexes_real_model(void **state) {
    (void)state;
    if (!model_present()) skip();
    static gcase cs[MAX_CASES];
    char *buf = NULL;
    int n_cases = load_cases(cs, &buf);
    assert_int_equal(n_cases, 100);
    const bool small = small_scale();
    /* small: 12 regexes spread over the file (every kind of shape) */
    int pick[MAX_CASES], n_pick = 0;
    for (int i = 0; i < n_cases; i++)
        if (!small || (i % 8 == 3 && n_pick < 12)) pick[n_pick++] = i;
    const int n_seeds = small ? 1 : N_SEEDS;
    for (int k = 0; k < n_pick; k++) {
        gcase *c = &cs[pick[k]];
        c->full = compile_or_die(c->regex, false, c->line);
        c->partial = compile_or_die(c->regex, true, c->line);
    }

    trellis_engine_options o;
    trellis_engine_options_default(&o);
    o.threads = 2;
    o.max_running = 256;
    o.max_batch_tokens = 512;
    trellis_engine *e = NULL;
    char err[512];
    int rc = trellis_engine_new(NULL, &o, &e, err, sizeof err);
    if (rc) fprintf(stderr, "trellis_engine_new: %s\n", err);
    assert_int_equal(rc, 0);

    uint64_t t0 = tr_now_ns();
    int n_req = 2 * n_pick;
    greq *rs = calloc((size_t)n_req, sizeof *rs);
    assert_non_null(rs);
    for (int k = 0; k < n_pick; k++) {
        for (int v = 0; v < 2; v++) {
            greq *g = &rs[2 * k + v];
            gcase *c = &cs[pick[k]];
            trellis_message msg = {"user", c->prompt};
            trellis_request q;
            trellis_request_default(&q);
            q.messages = &msg;
            q.n_messages = 1;
            q.regex = c->regex;
            q.max_tokens = 48;
            g->c = pick[k];
            g->greedy = v == 0;
            g->n = v == 0 ? 1 : n_seeds;
            q.n = g->n;
            q.temperature = v == 0 ? 0.0f : 1.0f;
            q.seed = 1000 + (uint64_t)pick[k] * 16;
            rc = trellis_submit(e, &q, &g->id, err, sizeof err);
            if (rc) fprintf(stderr, "line %d /%s/: submit: %s\n", c->line, c->regex, err);
            assert_int_equal(rc, 0);
        }
    }
    int left = 0;
    for (int i = 0; i < n_req; i++) left += rs[i].n;
    while (left > 0) {
        trellis_event *ev;
        assert_int_equal(trellis_wait(e, 600000, &ev), 1); /* 10 min: stuck */
        collect(rs, n_req, ev);
        trellis_event_free(ev);
        left--;
    }
    double secs = (double)(tr_now_ns() - t0) / 1e9;
    trellis_stats st;
    trellis_get_stats(e, &st);

    int n_stop = 0, n_len = 0, bad = 0, samples = 0;
    long tokens = 0, forced = 0;
    for (int i = 0; i < n_req; i++) {
        greq *g = &rs[i];
        gcase *c = &cs[g->c];
        for (int j = 0; j < g->n; j++) {
            gout *x = &g->s[j];
            samples++;
            tokens += x->n_tokens;
            forced += x->forced;
            bool ok;
            if (x->finish == TRELLIS_FINISH_STOP) {
                n_stop++;
                ok = match(c->full, x->text, x->len, 0) >= 0;
            } else if (x->finish == TRELLIS_FINISH_LENGTH) {
                n_len++;
                int m = match(c->partial, x->text, x->len, PCRE2_PARTIAL_HARD);
                ok = m >= 0 || m == PCRE2_ERROR_PARTIAL;
            } else {
                ok = false;
            }
            if (!ok) {
                bad++;
                fprintf(stderr, "line %d /%s/ %s sample %d: %s \"%s\" %s\n", c->line,
                        c->regex, g->greedy ? "greedy" : "t=1", j,
                        trellis_finish_name(x->finish), x->text, x->error);
            }
            if (getenv("TRELLIS_TEST_VERBOSE"))
                fprintf(stderr, "%-40.40s %-6s %s: %s\n", c->regex,
                        g->greedy ? "greedy" : "t=1", trellis_finish_name(x->finish),
                        x->text);
            free(x->text);
        }
    }
    fprintf(stderr,
            "%d regexes, %d samples in %.1f s: %d stop (full match), %d length "
            "(live prefix), %d bad; %ld tokens (%ld forced by jump-forward), "
            "%llu steps, %llu forward passes saved\n",
            n_pick, samples, secs, n_stop, n_len, bad, tokens, forced,
            (unsigned long long)st.steps,
            (unsigned long long)st.forward_passes_saved);
    assert_int_equal(bad, 0);
    /* the file's prompts suit their regexes: most samples complete */
    assert_true(n_stop * 4 >= samples * 3);
    assert_true(forced > 0);
    free(rs);
    trellis_engine_free(e);
    for (int k = 0; k < n_pick; k++) {
        pcre2_code_free(cs[pick[k]].full);
        pcre2_code_free(cs[pick[k]].partial);
    }
    free(buf);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_regexes_real_model),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
