/* test_engine.c — the async engine (runtime/engine, runtime/trellis.h).
 *
 * Two configurations:
 *
 *  - A fake model (engine_compute with a forward pass of a few
 *    microseconds) and the default model's real tokenizer. The fake stores
 *    each token it is fed in its KV "page" slot, and computes the logits
 *    of a row from the sequence's whole history READ BACK THROUGH THE PAGE
 *    TABLE (checking every slot holds the position it should). So a page
 *    shared by mistake, a wrong page table after preemption, or a cached
 *    prefix whose pages hold other tokens changes the output, and the
 *    tests compare outputs across configurations that must not change it:
 *    alone vs in a crowd, big pool vs tiny pool (preemption), radix on vs
 *    off, chunk sizes, overlap on vs off.
 *  - The real default model, for the properties that need its kernels:
 *    batch invariance (a request's tokens with a fixed seed are identical
 *    alone and among 31 others), preemption under a tiny pool with the
 *    same tokens as alone, n > 1 sharing its prompt pages.
 *
 * A differential test runs a random request mix under 24 random engine
 * configurations and compares every sample's tokens with a roomy
 * reference configuration.
 *
 * Jump-forward: on the fake model (chunks cut at max_tokens, stop strings
 * inside forced text, logprobs and counters of forced tokens, the same
 * tokens when chunks are split and sequences preempted, half a
 * jump-forward refused at submit) and on the real model (a JSON-shaped
 * regex: valid output in fewer steps than with no_jump_forward; n = 3).
 *
 * Checks: every accepted request ends with exactly one DONE event per
 * sample; concatenated DELTA + DONE text equals the detokenized tokens;
 * stop strings spanning token boundaries are never emitted (not even
 * partly, in any delta); stop tokens; max_tokens; logprobs; regex
 * constraints; impossible requests are rejected at submit with the right
 * code and a message; 10,000 requests (500 with TRELLIS_TEST_SCALE=small,
 * for AddressSanitizer runs) with random cancellations under a pool small
 * enough to preempt end with every page free and every invariant
 * (tr_engine_debug_check: tree, pool, per-sequence pages) holding.
 *
 * An event-loop test drains the engine from a libuv loop woken by the
 * engine's wake callback (uv_async_send), with cancellations from a timer.
 *
 * TRELLIS_TEST_FILTER=<glob> runs only the matching tests, and
 * TRELLIS_TEST_SKIP=<glob> skips some (e.g. '*_real');
 * TRELLIS_TEST_CONFIGS=N sets the differential test's configurations.
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
#include <unistd.h>

#include <cmocka.h>
#include <pthread.h>
#include <uv.h>
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "grammar/grammar.h"
#include "base/paths.h"
#include "base/util.h"
#include "runtime/engine/engine.h"
#include "runtime/gguf/gguf.h"
#include "runtime/tokenizer/tokenizer.h"
#include "runtime/trellis.h"
#include "tests/unit/test_env.h"

/* ------------------------------------------------------------------ */
/* The fake model                                                      */
/* ------------------------------------------------------------------ */

typedef struct fake {
    int32_t n_pages, ps, n_vocab;
    int32_t *slot_tok; /* [n_pages * ps] */
    int32_t *slot_pos; /* [n_pages * ps], -1 = never written */
    int bad;           /* a page check failed */
    uint64_t forwards, rows;
    int32_t max_batch_seen;
    int delay_us;      /* per forward, to make requests take a while */
} fake;

static uint64_t mix(uint64_t z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static tr_status fake_forward(void *ctx, const tr_batch *b, const int32_t *tokens,
                              const int32_t *rows, int32_t n_rows, float *logits) {
    fake *f = ctx;
    f->forwards++;
    if (f->delay_us) usleep((useconds_t)f->delay_us);
    f->rows += (uint64_t)n_rows;
    if (b->n_tokens > f->max_batch_seen) f->max_batch_seen = b->n_tokens;
    for (int32_t t = 0; t < b->n_tokens; t++) {
        int32_t s = b->seq[t], p = b->pos[t];
        if (p / f->ps >= b->n_pages[s]) {
            f->bad = 1;
            return TR_ERR_INVALID_ARG;
        }
        int32_t page = b->page_table[s][p / f->ps];
        if (page < 0 || page >= f->n_pages) {
            f->bad = 2;
            return TR_ERR_INVALID_ARG;
        }
        size_t slot = (size_t)page * (size_t)f->ps + (size_t)(p % f->ps);
        f->slot_tok[slot] = tokens[t];
        f->slot_pos[slot] = p;
    }
    for (int32_t r = 0; r < n_rows; r++) {
        int32_t t = rows[r], s = b->seq[t], p = b->pos[t];
        uint64_t h = 0x12345;
        for (int32_t i = 0; i <= p; i++) {
            int32_t page = b->page_table[s][i / f->ps];
            size_t slot = (size_t)page * (size_t)f->ps + (size_t)(i % f->ps);
            if (f->slot_pos[slot] != i) {
                f->bad = 3;
                return TR_ERR_INTERNAL;
            }
            h = mix(h ^ (uint64_t)f->slot_tok[slot]);
        }
        float *l = logits + (size_t)r * (size_t)f->n_vocab;
        memset(l, 0, (size_t)f->n_vocab * sizeof *l);
        /* 8 likely tokens chosen by the history; ids >= 100 (no specials) */
        for (int k = 0; k < 8; k++) {
            int32_t id = 100 + (int32_t)(mix(h + (uint64_t)k) % (uint64_t)(f->n_vocab - 200));
            l[id] = 12.0f + 0.5f * (float)k;
        }
    }
    return TR_OK;
}

static void fake_destroy(void *ctx) {
    fake *f = ctx;
    free(f->slot_tok);
    free(f->slot_pos);
    free(f);
}

static const engine_compute_ops k_fake_ops = {fake_forward, fake_destroy};

typedef struct fake_cfg {
    int32_t n_pages, page_size, max_batch, max_running, chunk;
    bool no_radix, no_overlap;
    int32_t ctx;
    int32_t lpm;
    trellis_wake_fn wake;
    void *wake_user;
} fake_cfg;

static fake_cfg fake_default(void) {
    return (fake_cfg){.n_pages = 4096, .page_size = 16, .max_batch = 256,
                      .max_running = 32, .chunk = 64, .ctx = 2048, .lpm = 128};
}

/* Builds an engine on the fake; *fp gets the fake (owned by the engine). */
static trellis_engine *fake_engine(const fake_cfg *c, fake **fp) {
    char path[4096];
    tr_default_model_path(path, sizeof path);
    gguf_file *file = NULL;
    tokenizer *tok = NULL;
    tr_diag d = {0};
    assert_int_equal(tr_gguf_open(path, &file, &d), TR_OK);
    assert_int_equal(tr_tokenizer_from_gguf(file, &tok, &d), TR_OK);
    fake *f = calloc(1, sizeof *f);
    assert_non_null(f);
    f->n_pages = c->n_pages;
    f->ps = c->page_size;
    f->n_vocab = tr_tokenizer_n_vocab(tok);
    size_t slots = (size_t)c->n_pages * (size_t)c->page_size;
    f->slot_tok = malloc(slots * sizeof(int32_t));
    f->slot_pos = malloc(slots * sizeof(int32_t));
    assert_non_null(f->slot_tok);
    for (size_t i = 0; i < slots; i++) f->slot_pos[i] = -1;
    engine_compute comp = {.ops = &k_fake_ops, .ctx = f, .n_vocab = f->n_vocab,
                           .n_ctx = 8192, .max_batch = c->max_batch,
                           .n_pages = c->n_pages, .page_size = c->page_size,
                           .threads = 1};
    trellis_engine_options o;
    trellis_engine_options_default(&o);
    o.max_batch_tokens = c->max_batch;
    o.max_running = c->max_running;
    o.chunk_size = c->chunk;
    o.no_radix = c->no_radix;
    o.no_overlap = c->no_overlap;
    o.ctx = c->ctx;
    o.lpm_max_waiting = c->lpm;
    o.wake = c->wake;
    o.wake_user = c->wake_user;
    trellis_engine *e = NULL;
    char err[256];
    tr_status s = tr_engine_new_custom(&o, file, tok, &comp, &e, err, sizeof err);
    if (s != TR_OK) fprintf(stderr, "engine_new_custom: %s\n", err);
    assert_int_equal(s, TR_OK);
    if (fp) *fp = f;
    return e;
}

/* ------------------------------------------------------------------ */
/* Running requests and collecting their output                        */
/* ------------------------------------------------------------------ */

typedef struct result {
    uint64_t id;
    int32_t n;          /* samples */
    int32_t done;       /* DONE events seen */
    bool request_done;
    struct {
        int32_t *tokens;
        int32_t n_tokens;
        char *text;
        size_t text_len;
        trellis_logprob *lp;
        trellis_finish finish;
        int status;
        char error[256];
        int32_t stop_index, stop_token;
        trellis_metrics m;
        int32_t n_deltas;
        bool done;
    } s[TRELLIS_MAX_N];
} result;

static void result_free(result *r) {
    for (int i = 0; i < TRELLIS_MAX_N; i++) {
        free(r->s[i].tokens);
        free(r->s[i].text);
        free(r->s[i].lp);
    }
}

static void collect(result *r, const trellis_event *ev) {
    assert_true(ev->index >= 0 && ev->index < r->n);
    __typeof__(r->s[0]) *s = &r->s[ev->index];
    assert_false(s->done); /* nothing after DONE */
    if (ev->n_tokens) {
        s->tokens = realloc(s->tokens, (size_t)(s->n_tokens + ev->n_tokens) * sizeof(int32_t));
        memcpy(s->tokens + s->n_tokens, ev->tokens, (size_t)ev->n_tokens * sizeof(int32_t));
        if (ev->logprobs) {
            s->lp = realloc(s->lp, (size_t)(s->n_tokens + ev->n_tokens) * sizeof(trellis_logprob));
            memcpy(s->lp + s->n_tokens, ev->logprobs,
                   (size_t)ev->n_tokens * sizeof(trellis_logprob));
        }
        s->n_tokens += ev->n_tokens;
    }
    assert_int_equal(ev->text[ev->text_len], 0); /* (NUL bytes may occur inside) */
    s->text = realloc(s->text, s->text_len + ev->text_len + 1);
    memcpy(s->text + s->text_len, ev->text, ev->text_len);
    s->text_len += ev->text_len;
    s->text[s->text_len] = 0;
    if (ev->kind == TRELLIS_EVENT_DELTA) {
        s->n_deltas++;
        return;
    }
    assert_int_equal(ev->kind, TRELLIS_EVENT_DONE);
    s->done = true;
    s->finish = ev->finish;
    s->status = ev->status;
    snprintf(s->error, sizeof s->error, "%s", ev->error);
    s->stop_index = ev->stop_index;
    s->stop_token = ev->stop_token;
    s->m = ev->metrics;
    r->done++;
    if (ev->request_done) {
        assert_false(r->request_done);
        assert_int_equal(r->done, r->n);
        r->request_done = true;
    }
}

/* Waits until every request in rs[0..n) is done. Requests are found by
 * id (ids are assigned in submit order from first_id). */
static void drain(trellis_engine *e, result *rs, int n) {
    int left = 0;
    for (int i = 0; i < n; i++) left += !rs[i].request_done;
    while (left > 0) {
        trellis_event *ev;
        int got = trellis_wait(e, 900000, &ev);
        assert_int_equal(got, 1); /* 15 minutes without an event: stuck */
        int k = -1;
        for (int i = 0; i < n; i++)
            if (rs[i].id == ev->request_id) k = i;
        assert_true(k >= 0);
        bool was = rs[k].request_done;
        collect(&rs[k], ev);
        if (!was && rs[k].request_done) left--;
        trellis_event_free(ev);
    }
}

static void submit_ok(trellis_engine *e, const trellis_request *q, result *r) {
    char err[512];
    memset(r, 0, sizeof *r);
    r->n = q->n;
    int s = trellis_submit(e, q, &r->id, err, sizeof err);
    if (s != 0) fprintf(stderr, "submit: %s\n", err);
    assert_int_equal(s, 0);
    assert_true(r->id != 0);
}

static void run1(trellis_engine *e, const trellis_request *q, result *r) {
    submit_ok(e, q, r);
    drain(e, r, 1);
}

/* Deterministic pseudo-random prompt of n token ids (no specials). */
static void rand_tokens(uint64_t seed, int32_t *out, int n) {
    for (int i = 0; i < n; i++) out[i] = 100 + (int32_t)(mix(seed * 1000003u + (uint64_t)i) % 40000);
}

static void same_tokens(const result *a, const result *b, int idx) {
    assert_int_equal(a->s[idx].n_tokens, b->s[idx].n_tokens);
    assert_memory_equal(a->s[idx].tokens, b->s[idx].tokens,
                        (size_t)a->s[idx].n_tokens * sizeof(int32_t));
    assert_int_equal(a->s[idx].finish, b->s[idx].finish);
}

/* PCRE2 (the regex oracle of DESIGN.md): does rx fully match s? Anchored
 * at both ends, UTF, `$` at the very end only (the grammar dialect). */
static bool pcre_full_match(const char *rx, const char *s, size_t len) {
    int ec;
    PCRE2_SIZE eo;
    pcre2_code *c = pcre2_compile((PCRE2_SPTR)rx, PCRE2_ZERO_TERMINATED,
                                  PCRE2_UTF | PCRE2_ANCHORED | PCRE2_ENDANCHORED |
                                      PCRE2_DOLLAR_ENDONLY,
                                  &ec, &eo, NULL);
    assert_non_null(c);
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(c, NULL);
    int rc = pcre2_match(c, (PCRE2_SPTR)s, len, 0, 0, md, NULL);
    pcre2_match_data_free(md);
    pcre2_code_free(c);
    return rc >= 0;
}

/* Is s[0..len) a prefix of some full match of rx (itself one included)?
 * PCRE2's hard partial matching says so. */
static bool pcre_live_prefix(const char *rx, const char *s, size_t len) {
    char pat[1024];
    snprintf(pat, sizeof pat, "(?:%s)$", rx);
    int ec;
    PCRE2_SIZE eo;
    pcre2_code *c = pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED,
                                  PCRE2_UTF | PCRE2_ANCHORED | PCRE2_DOLLAR_ENDONLY,
                                  &ec, &eo, NULL);
    assert_non_null(c);
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(c, NULL);
    int rc = pcre2_match(c, (PCRE2_SPTR)s, len, 0, PCRE2_PARTIAL_HARD, md, NULL);
    pcre2_match_data_free(md);
    pcre2_code_free(c);
    return rc >= 0 || rc == PCRE2_ERROR_PARTIAL;
}

/* Stats as of now: the check is a round trip through the engine thread,
 * which publishes its snapshot after every step, before taking messages. */
static void stats_now(trellis_engine *e, trellis_stats *st) {
    assert_int_equal(tr_engine_debug_check(e), TR_OK);
    trellis_get_stats(e, st);
}

static void expect_clean(trellis_engine *e) {
    assert_int_equal(tr_engine_debug_check(e), TR_OK);
    trellis_stats st;
    /* the snapshot lags by a step; the check above ran between steps */
    trellis_get_stats(e, &st);
    assert_int_equal(st.running, 0);
    assert_int_equal(st.waiting, 0);
    assert_int_equal(trellis_flush_cache(e), 0);
    assert_int_equal(tr_engine_debug_check(e), TR_OK);
}

/* Every page free after a flush (stats are published after each step,
 * so take them once the engine went idle after the flush). */
static void expect_all_free(trellis_engine *e) {
    assert_int_equal(trellis_flush_cache(e), 0);
    assert_int_equal(tr_engine_debug_check(e), TR_OK);
    /* a flush is processed between steps; publish happens after; poll */
    for (int i = 0; i < 200; i++) {
        trellis_stats st;
        trellis_get_stats(e, &st);
        if (st.pages_free == st.pages_total && st.pages_used == 0 &&
            st.pages_cached == 0)
            return;
        usleep(10000);
        trellis_flush_cache(e);
    }
    trellis_stats st;
    trellis_get_stats(e, &st);
    fprintf(stderr, "pages: free %d used %d cached %d of %d\n", st.pages_free,
            st.pages_used, st.pages_cached, st.pages_total);
    fail();
}

/* ------------------------------------------------------------------ */
/* Fake-model tests                                                    */
/* ------------------------------------------------------------------ */

static void test_basic_and_stream(void **state) {
    (void)state;
    if (!model_present()) skip();
    fake *f;
    fake_cfg c = fake_default();
    trellis_engine *e = fake_engine(&c, &f);
    int32_t prompt[40];
    rand_tokens(1, prompt, 40);
    trellis_request q;
    trellis_request_default(&q);
    q.tokens = prompt;
    q.n_tokens = 40;
    q.max_tokens = 30;
    q.seed = 7;
    q.stream = true;
    result r;
    run1(e, &q, &r);
    assert_int_equal(f->bad, 0);
    assert_int_equal(r.s[0].finish, TRELLIS_FINISH_LENGTH);
    assert_int_equal(r.s[0].n_tokens, 30);
    assert_int_equal(r.s[0].m.completion_tokens, 30);
    assert_int_equal(r.s[0].m.prompt_tokens, 40);
    assert_true(r.s[0].n_deltas >= 10); /* streamed as it went */
    assert_true(r.s[0].m.ttft_ms >= r.s[0].m.queue_ms);
    assert_true(r.s[0].m.e2e_ms >= r.s[0].m.ttft_ms);
    /* concatenated deltas == detokenized tokens */
    char *dec = NULL;
    size_t dlen = 0;
    trellis_engine_info info;
    trellis_engine_get_info(e, &info);
    assert_int_equal(info.n_vocab, 49152);
    {
        /* decode through a private tokenizer (the engine's is internal) */
        char path[4096];
        gguf_file *gf;
        tokenizer *tok;
        tr_diag d;
        tr_default_model_path(path, sizeof path);
        assert_int_equal(tr_gguf_open(path, &gf, &d), TR_OK);
        assert_int_equal(tr_tokenizer_from_gguf(gf, &tok, &d), TR_OK);
        assert_int_equal(tr_tokenizer_decode(tok, r.s[0].tokens, (size_t)r.s[0].n_tokens,
                                          false, &dec, &dlen), TR_OK);
        tr_tokenizer_free(tok);
        tr_gguf_close(gf);
    }
    /* the stream replaces invalid UTF-8 with U+FFFD where decode keeps raw
     * bytes; compare only when the decode is valid UTF-8 */
    bool valid = true;
    for (size_t i = 0; i < dlen; i++)
        if ((unsigned char)dec[i] >= 0x80) valid = false;
    if (valid) {
        assert_int_equal(r.s[0].text_len, dlen);
        assert_memory_equal(r.s[0].text, dec, dlen);
    }
    free(dec);

    /* same request, not streamed: one DONE event with everything */
    q.stream = false;
    result r2;
    run1(e, &q, &r2);
    assert_int_equal(r2.s[0].n_deltas, 0);
    same_tokens(&r, &r2, 0);
    assert_string_equal(r.s[0].text, r2.s[0].text);
    /* the second one found the first's pages in the cache */
    assert_true(r2.s[0].m.cached_tokens >= 32);
    expect_clean(e);
    result_free(&r);
    result_free(&r2);
    trellis_engine_free(e);
}

/* Runs k requests (index 0 is the probe) together; returns the probe. */
static void run_crowd(const fake_cfg *c, int k, const trellis_request *probe,
                      result *out, int32_t *max_batch_seen) {
    fake *f;
    trellis_engine *e = fake_engine(c, &f);
    result *rs = calloc((size_t)k, sizeof *rs);
    int32_t prompts[64][80];
    for (int i = 0; i < k; i++) {
        trellis_request q;
        if (i == 0) {
            q = *probe;
        } else {
            trellis_request_default(&q);
            int n = 10 + (int)(mix((uint64_t)i) % 70);
            rand_tokens(1000 + (uint64_t)i, prompts[i % 64], n);
            q.tokens = prompts[i % 64];
            q.n_tokens = n;
            q.max_tokens = 5 + (int)(mix((uint64_t)i * 7) % 40);
            q.seed = (uint64_t)i;
            q.temperature = 0.9f;
        }
        submit_ok(e, &q, &rs[i]);
    }
    drain(e, rs, k);
    assert_int_equal(f->bad, 0);
    *max_batch_seen = f->max_batch_seen;
    expect_clean(e);
    *out = rs[0];
    for (int i = 1; i < k; i++) result_free(&rs[i]);
    free(rs);
    trellis_engine_free(e);
}

static void test_invariance_fake(void **state) {
    (void)state;
    if (!model_present()) skip();
    int32_t prompt[300];
    rand_tokens(99, prompt, 300);
    trellis_request q;
    trellis_request_default(&q);
    q.tokens = prompt;
    q.n_tokens = 300;
    q.max_tokens = 40;
    q.seed = 1234;
    q.temperature = 0.8f;
    q.top_p = 0.95f;
    int32_t mb;
    fake_cfg c = fake_default();
    result alone, crowd, tiny, noradix, nooverlap;
    run_crowd(&c, 1, &q, &alone, &mb);
    run_crowd(&c, 32, &q, &crowd, &mb);
    assert_true(mb > 32); /* really batched with others */
    same_tokens(&alone, &crowd, 0);
    /* tiny pool (preemption), small chunks and batches */
    fake_cfg t = c;
    t.n_pages = 60;
    t.page_size = 8;
    t.chunk = 24;
    t.max_batch = 48;
    run_crowd(&t, 32, &q, &tiny, &mb);
    same_tokens(&alone, &tiny, 0);
    fake_cfg nr = c;
    nr.no_radix = true;
    run_crowd(&nr, 32, &q, &noradix, &mb);
    same_tokens(&alone, &noradix, 0);
    fake_cfg no = c;
    no.no_overlap = true;
    run_crowd(&no, 8, &q, &nooverlap, &mb);
    same_tokens(&alone, &nooverlap, 0);
    /* page size 1 under a tight pool; one sequence at a time, FCFS; one
     * token per step (max_batch 1: no prefill chunk beyond one token) */
    fake_cfg p1 = c;
    p1.page_size = 1;
    p1.n_pages = 700;
    p1.chunk = 50;
    p1.lpm = 0;
    result r1, r2, r3;
    run_crowd(&p1, 16, &q, &r1, &mb);
    same_tokens(&alone, &r1, 0);
    fake_cfg one = c;
    one.max_running = 1;
    run_crowd(&one, 6, &q, &r2, &mb);
    same_tokens(&alone, &r2, 0);
    fake_cfg tok1 = c;
    tok1.max_batch = 1;
    tok1.max_running = 1;
    run_crowd(&tok1, 3, &q, &r3, &mb);
    assert_int_equal(mb, 1);
    same_tokens(&alone, &r3, 0);
    result_free(&r1);
    result_free(&r2);
    result_free(&r3);
    result_free(&alone);
    result_free(&crowd);
    result_free(&tiny);
    result_free(&noradix);
    result_free(&nooverlap);
}

/* Differential test of the scheduler: random engine configurations (page
 * size, pool size down to what one request needs, chunk, batch budget,
 * max_running, LPM on/off, radix on/off, overlap on/off) run the same
 * random request mix (shared prefixes, n > 1, temperatures) as a roomy
 * reference configuration; every sample's tokens must be identical. */
static void test_random_configs(void **state) {
    (void)state;
    if (!model_present()) skip();
    enum { NR = 14 };
    int n_cfg = small_scale() ? 4 : 24;
    if (getenv("TRELLIS_TEST_CONFIGS")) n_cfg = atoi(getenv("TRELLIS_TEST_CONFIGS"));
    int32_t prompts[NR][160];
    trellis_request qs[NR];
    uint64_t rng = 2024;
    int32_t need_max = 0;
    int32_t base[120];
    rand_tokens(31337, base, 120);
    for (int i = 0; i < NR; i++) {
        rng = mix(rng);
        int shared = (int)(rng % 120), tail = 1 + (int)((rng >> 8) % 40);
        memcpy(prompts[i], base, (size_t)shared * sizeof(int32_t));
        rand_tokens(rng, prompts[i] + shared, tail);
        trellis_request_default(&qs[i]);
        qs[i].tokens = prompts[i];
        qs[i].n_tokens = shared + tail;
        qs[i].max_tokens = 1 + (int)((rng >> 16) % 30);
        qs[i].n = 1 + (int)((rng >> 24) % 3);
        qs[i].seed = rng;
        qs[i].temperature = (float)((rng >> 32) % 4) * 0.4f;
        qs[i].stream = (rng >> 40) & 1;
        qs[i].ignore_eos = true;
        int32_t need = qs[i].n_tokens + qs[i].max_tokens;
        if (need > need_max) need_max = need;
    }
    result ref[NR];
    fake_cfg rc = fake_default();
    fake *f;
    trellis_engine *e = fake_engine(&rc, &f);
    for (int i = 0; i < NR; i++) run1(e, &qs[i], &ref[i]);
    trellis_engine_free(e);
    for (int k = 0; k < n_cfg; k++) {
        rng = mix(rng + (uint64_t)k);
        fake_cfg c = fake_default();
        static const int32_t sizes[] = {1, 2, 4, 8, 16};
        c.page_size = sizes[rng % 5];
        int32_t min_pages = (need_max + c.page_size - 1) / c.page_size;
        c.n_pages = min_pages + (int32_t)((rng >> 8) % (uint64_t)(3 * min_pages));
        c.chunk = 1 + (int32_t)((rng >> 20) % 64);
        c.max_batch = c.chunk + (int32_t)((rng >> 28) % 200);
        c.max_running = 1 + (int32_t)((rng >> 36) % 32);
        c.lpm = (rng >> 42) & 1 ? 128 : 0;
        c.no_radix = ((rng >> 44) & 3) == 0;
        c.no_overlap = (rng >> 46) & 1;
        e = fake_engine(&c, &f);
        result got[NR];
        for (int i = 0; i < NR; i++) submit_ok(e, &qs[i], &got[i]);
        drain(e, got, NR);
        if (f->bad) fprintf(stderr, "config %d: fake page check %d\n", k, f->bad);
        assert_int_equal(f->bad, 0);
        for (int i = 0; i < NR; i++) {
            for (int j = 0; j < qs[i].n; j++) {
                if (got[i].s[j].n_tokens != ref[i].s[j].n_tokens ||
                    memcmp(got[i].s[j].tokens, ref[i].s[j].tokens,
                           (size_t)ref[i].s[j].n_tokens * sizeof(int32_t)))
                    fprintf(stderr, "config %d (ps %d pages %d chunk %d batch %d "
                                    "running %d lpm %d noradix %d): request %d "
                                    "sample %d differs\n",
                            k, c.page_size, c.n_pages, c.chunk, c.max_batch,
                            c.max_running, c.lpm, c.no_radix, i, j);
                same_tokens(&ref[i], &got[i], j);
            }
            result_free(&got[i]);
        }
        expect_clean(e);
        expect_all_free(e);
        trellis_engine_free(e);
    }
    for (int i = 0; i < NR; i++) result_free(&ref[i]);
}

static void test_preemption_fake(void **state) {
    (void)state;
    if (!model_present()) skip();
    /* 12 requests of up to 200 prompt + 60 tokens on a pool of 48 pages of
     * 8 tokens (384 tokens): at most one or two fit at once */
    fake_cfg big = fake_default();
    fake_cfg tiny = big;
    tiny.n_pages = 48;
    tiny.page_size = 8;
    int32_t prompts[12][200];
    trellis_request qs[12];
    for (int i = 0; i < 12; i++) {
        int n = 100 + 8 * i;
        rand_tokens(500 + (uint64_t)i, prompts[i], n);
        /* half share a 64-token prefix */
        if (i % 2) memcpy(prompts[i], prompts[1], 64 * sizeof(int32_t));
        trellis_request_default(&qs[i]);
        qs[i].tokens = prompts[i];
        qs[i].n_tokens = n;
        qs[i].max_tokens = 60;
        qs[i].ignore_eos = true;
        qs[i].seed = (uint64_t)i;
        qs[i].temperature = 0.7f;
    }
    result ref[12], got[12];
    fake *f;
    trellis_engine *e = fake_engine(&big, &f);
    for (int i = 0; i < 12; i++) run1(e, &qs[i], &ref[i]);
    trellis_engine_free(e);
    e = fake_engine(&tiny, &f);
    for (int i = 0; i < 12; i++) submit_ok(e, &qs[i], &got[i]);
    drain(e, got, 12);
    assert_int_equal(f->bad, 0);
    trellis_stats st;
    stats_now(e, &st);
    assert_true(st.preemptions > 0);
    int32_t preempted = 0;
    for (int i = 0; i < 12; i++) {
        same_tokens(&ref[i], &got[i], 0);
        assert_int_equal(got[i].s[0].n_tokens, 60);
        preempted += got[i].s[0].m.preemptions;
    }
    assert_true(preempted > 0);
    expect_clean(e);
    expect_all_free(e);
    for (int i = 0; i < 12; i++) {
        result_free(&ref[i]);
        result_free(&got[i]);
    }
    trellis_engine_free(e);
}

static void test_prefix_sharing(void **state) {
    (void)state;
    if (!model_present()) skip();
    fake *f;
    fake_cfg c = fake_default();
    trellis_engine *e = fake_engine(&c, &f);
    /* 16 requests sharing a 400-token prefix, submitted at once: the prefix
     * is computed once (in-flight dedup), not 16 times */
    enum { N = 16, P = 400 };
    int32_t prompts[N][P + 20];
    result rs[N];
    for (int i = 0; i < N; i++) {
        rand_tokens(7, prompts[i], P);
        rand_tokens(100 + (uint64_t)i, prompts[i] + P, 20);
        trellis_request q;
        trellis_request_default(&q);
        q.tokens = prompts[i];
        q.n_tokens = P + 20;
        q.max_tokens = 8;
        q.seed = (uint64_t)i;
        submit_ok(e, &q, &rs[i]);
    }
    drain(e, rs, N);
    assert_int_equal(f->bad, 0);
    trellis_stats st;
    stats_now(e, &st);
    /* without sharing: 16 * 420 = 6720 prefill tokens */
    assert_true(st.prefill_tokens < P + N * (20 + 16 + 1));
    int cached = 0;
    for (int i = 0; i < N; i++) cached += rs[i].s[0].m.cached_tokens >= 384;
    assert_true(cached >= N - 1);
    assert_true(st.cache_hit_rate > 0.8);
    for (int i = 0; i < N; i++) result_free(&rs[i]);
    trellis_engine_free(e);

    /* --no-radix: nothing shared across requests */
    c.no_radix = true;
    e = fake_engine(&c, &f);
    for (int i = 0; i < 4; i++) {
        trellis_request q;
        trellis_request_default(&q);
        q.tokens = prompts[i];
        q.n_tokens = P + 20;
        q.max_tokens = 4;
        submit_ok(e, &q, &rs[i]);
    }
    drain(e, rs, 4);
    stats_now(e, &st);
    assert_int_equal(st.prefill_tokens, 4 * (P + 20));
    assert_int_equal(st.cached_prompt_tokens, 0);
    for (int i = 0; i < 4; i++) result_free(&rs[i]);
    expect_all_free(e);
    trellis_engine_free(e);
}

static void test_fork_n(void **state) {
    (void)state;
    if (!model_present()) skip();
    for (int radix = 0; radix < 2; radix++) {
        fake *f;
        fake_cfg c = fake_default();
        c.no_radix = !radix;
        trellis_engine *e = fake_engine(&c, &f);
        int32_t prompt[203];
        rand_tokens(3, prompt, 203);
        trellis_request q;
        trellis_request_default(&q);
        q.tokens = prompt;
        q.n_tokens = 203;
        q.max_tokens = 12;
        q.n = 6;
        q.seed = 50;
        q.stream = true;
        result r;
        run1(e, &q, &r);
        assert_int_equal(f->bad, 0);
        trellis_stats st;
        stats_now(e, &st);
        /* the prompt's 12 full pages once; each fork recomputes only its
         * partial last page (203 - 192 = 11 tokens) */
        assert_int_equal(st.prefill_tokens, 203 + 5 * 11);
        int distinct = 0;
        for (int i = 0; i < 6; i++) {
            assert_true(r.s[i].done);
            assert_int_equal(r.s[i].n_tokens, 12);
            if (i > 0 && memcmp(r.s[i].tokens, r.s[0].tokens, 12 * sizeof(int32_t)))
                distinct++;
            if (i > 0) assert_int_equal(r.s[i].m.cached_tokens, 192);
        }
        assert_true(distinct >= 4); /* seeds differ per sample */
        /* sample i == a single request with seed + i */
        q.n = 1;
        q.seed = 53;
        result one;
        run1(e, &q, &one);
        assert_int_equal(one.s[0].n_tokens, 12);
        assert_memory_equal(one.s[0].tokens, r.s[3].tokens, 12 * sizeof(int32_t));
        result_free(&r);
        result_free(&one);
        expect_all_free(e);
        trellis_engine_free(e);
    }
}

/* Stop strings: take a reference output, pick a substring spanning a
 * token boundary, and run again with it as a stop string. */
static void test_stops(void **state) {
    (void)state;
    if (!model_present()) skip();
    fake *f;
    fake_cfg c = fake_default();
    trellis_engine *e = fake_engine(&c, &f);
    int32_t prompt[30];
    int tested = 0;
    for (uint64_t seed = 1; seed < 40 && tested < 8; seed++) {
        rand_tokens(seed, prompt, 30);
        trellis_request q;
        trellis_request_default(&q);
        q.tokens = prompt;
        q.n_tokens = 30;
        q.max_tokens = 24;
        q.seed = seed;
        q.stream = true;
        result ref;
        run1(e, &q, &ref);
        const char *t = ref.s[0].text;
        size_t n = ref.s[0].text_len;
        /* per-token text lengths */
        size_t off[32] = {0}, at = 0;
        bool ascii = true;
        for (int i = 0; i < ref.s[0].n_tokens; i++) {
            size_t l;
            const char *b = trellis_token_text(e, ref.s[0].tokens[i], &l);
            for (size_t k = 0; k < l; k++)
                if ((unsigned char)b[k] >= 0x80 || b[k] == 0) ascii = false;
            at += l;
            off[i + 1] = at;
        }
        if (!ascii || at != n || ref.s[0].n_tokens < 12) {
            result_free(&ref);
            continue;
        }
        /* a stop string from the last 2 bytes of token 5 to the first 2 of
         * token 7 (so it spans 2 boundaries) */
        size_t a = off[6] >= 2 ? off[6] - 2 : 0, b2 = TR_MIN(off[7] + 2, n);
        if (off[6] - off[5] < 2 || off[8] - off[7] < 2 || b2 <= a) {
            result_free(&ref);
            continue;
        }
        char stop[64];
        size_t sl = TR_MIN(b2 - a, sizeof stop - 1);
        memcpy(stop, t + a, sl);
        stop[sl] = 0;
        const char *first = strstr(t, stop);
        size_t expect_len = (size_t)(first - t);
        const char *stops[2] = {"\x01never", stop};
        q.stop = stops;
        q.n_stop = 2;
        result got;
        run1(e, &q, &got);
        assert_int_equal(got.s[0].finish, TRELLIS_FINISH_STOP);
        assert_int_equal(got.s[0].stop_index, 1);
        assert_int_equal(got.s[0].text_len, expect_len);
        assert_memory_equal(got.s[0].text, t, expect_len);
        assert_null(strstr(got.s[0].text, stop));
        /* the tokens up to the one that completed the stop string */
        assert_true(got.s[0].n_tokens <= 8);
        result_free(&got);

        /* stop token: the 6th generated token ends the sample before it
         * (unless it appeared earlier) */
        int32_t stok = ref.s[0].tokens[5];
        int first_at = 5;
        for (int i = 0; i < 5; i++)
            if (ref.s[0].tokens[i] == stok) {
                first_at = i;
                break;
            }
        q.stop = NULL;
        q.n_stop = 0;
        q.stop_tokens = &stok;
        q.n_stop_tokens = 1;
        run1(e, &q, &got);
        assert_int_equal(got.s[0].finish, TRELLIS_FINISH_STOP);
        assert_int_equal(got.s[0].stop_token, stok);
        assert_int_equal(got.s[0].n_tokens, first_at);
        assert_int_equal(got.s[0].m.completion_tokens, first_at + 1);
        result_free(&got);
        result_free(&ref);
        tested++;
    }
    assert_true(tested >= 3);
    expect_clean(e);
    trellis_engine_free(e);
}

static void test_logprobs_and_greedy(void **state) {
    (void)state;
    if (!model_present()) skip();
    fake *f;
    fake_cfg c = fake_default();
    trellis_engine *e = fake_engine(&c, &f);
    int32_t prompt[20];
    rand_tokens(11, prompt, 20);
    trellis_request q;
    trellis_request_default(&q);
    q.tokens = prompt;
    q.n_tokens = 20;
    q.max_tokens = 10;
    q.temperature = 0;
    q.logprobs = true;
    q.top_logprobs = 5;
    q.stream = true;
    result r;
    run1(e, &q, &r);
    assert_non_null(r.s[0].lp);
    for (int i = 0; i < r.s[0].n_tokens; i++) {
        const trellis_logprob *l = &r.s[0].lp[i];
        assert_int_equal(l->token, r.s[0].tokens[i]);
        assert_int_equal(l->n_top, 5);
        assert_true(l->logprob <= 0.0f);
        /* greedy: the chosen token is the most likely one */
        assert_int_equal(l->top[0].token, l->token);
        assert_true(fabsf(l->top[0].logprob - l->logprob) < 1e-6f);
        for (int k = 1; k < 5; k++) assert_true(l->top[k].logprob <= l->top[k - 1].logprob);
    }
    result_free(&r);
    trellis_engine_free(e);
}

static void test_regex_constraint(void **state) {
    (void)state;
    if (!model_present()) skip();
    fake *f;
    fake_cfg c = fake_default();
    trellis_engine *e = fake_engine(&c, &f);
    int32_t prompt[10];
    rand_tokens(5, prompt, 10);
    const char *rx = "[0-9]{3}-[a-z]{2,4}";
    trellis_request q;
    trellis_request_default(&q);
    q.tokens = prompt;
    q.n_tokens = 10;
    q.max_tokens = 40;
    q.regex = rx;
    q.n = 3;
    q.temperature = 1.0f;
    q.seed = 9;
    result r;
    run1(e, &q, &r);
    grammar *g;
    assert_int_equal(tr_grammar_compile_regex(rx, strlen(rx), NULL, &g, NULL), TR_OK);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(r.s[i].finish, TRELLIS_FINISH_STOP);
        assert_true(tr_grammar_matches(g, r.s[i].text, r.s[i].text_len));
    }
    tr_grammar_free(g);
    result_free(&r);
    /* a bad regex is rejected at submit */
    q.regex = "(ab";
    char err[256];
    assert_int_equal(trellis_submit(e, &q, NULL, err, sizeof err), TRELLIS_ERR_FORMAT);
    assert_true(strstr(err, "regex") != NULL);
    trellis_engine_free(e);
}

/* A constraint with forced_bytes but no rollback: half a jump-forward. */
static int half_fill(void *st, uint64_t *m, size_t n) {
    (void)st;
    memset(m, 0xff, n * sizeof *m);
    return 0;
}
static int half_accept(void *st, int32_t t) { (void)st, (void)t; return 0; }
static void half_free(void *st) { (void)st; }
static int half_forced(void *st, uint8_t *b, size_t cap, size_t *len) {
    (void)st, (void)b, (void)cap;
    *len = 0;
    return 0;
}

/* Jump-forward through the scheduler, on the fake model: a regex whose
 * long literal is forced after one sampled digit. Checks that the chunk
 * is cut at max_tokens (finish "length", the text a live prefix of the
 * language), that a stop string inside the forced text ends the sample
 * there, that forced tokens report logprob 0 and are counted, that the
 * forward passes drop, and that chunks split by a tiny chunk size and by
 * preemption under a tiny pool give the same tokens as a roomy engine. */
static void test_jump_forward_fake(void **state) {
    (void)state;
    if (!model_present()) skip();
    const char *rx = "[0-9]: the quick brown fox jumps over the lazy dog, "
                     "and then [a-z]{2,6} again[.!]";
    grammar *g;
    assert_int_equal(tr_grammar_compile_regex(rx, strlen(rx), NULL, &g, NULL), TR_OK);
    fake *f;
    fake_cfg c = fake_default();
    trellis_engine *e = fake_engine(&c, &f);
    int32_t prompt[12];
    rand_tokens(77, prompt, 12);
    trellis_request q;
    trellis_request_default(&q);
    q.tokens = prompt;
    q.n_tokens = 12;
    q.regex = rx;
    q.temperature = 0.8f;
    q.seed = 3;
    q.logprobs = true;
    q.top_logprobs = 2;
    q.max_tokens = 64;
    trellis_stats s0, s1;
    stats_now(e, &s0);
    uint64_t fw0 = f->forwards;
    result full;
    run1(e, &q, &full);
    stats_now(e, &s1);
    uint64_t fw_jf = f->forwards - fw0;
    assert_int_equal(full.s[0].finish, TRELLIS_FINISH_STOP);
    assert_true(pcre_full_match(rx, full.s[0].text, full.s[0].text_len));
    int32_t forced = full.s[0].m.forced_tokens;
    assert_true(forced >= 8); /* the literal is ~10 tokens */
    assert_int_equal(s1.forced_tokens - s0.forced_tokens, (uint64_t)forced);
    assert_true(s1.jump_forwards > s0.jump_forwards);
    assert_true(s1.forward_passes_saved - s0.forward_passes_saved >= (uint64_t)forced - 1);
    assert_int_equal(full.s[0].m.completion_tokens, full.s[0].n_tokens);
    int zero_lp = 0;
    for (int i = 0; i < full.s[0].n_tokens; i++) {
        const trellis_logprob *l = &full.s[0].lp[i];
        assert_int_equal(l->token, full.s[0].tokens[i]);
        if (l->n_top == 0) {
            assert_true(l->logprob == 0.0f);
            zero_lp++;
        } else {
            /* sampled: alternatives among the allowed tokens (one when
             * the mask allows one) */
            assert_true(l->n_top >= 1 && l->n_top <= 2);
        }
    }
    assert_true(zero_lp >= forced);
    fprintf(stderr, "fake jump-forward: %d tokens (%d forced), %llu forwards\n",
            full.s[0].n_tokens, forced, (unsigned long long)fw_jf);

    /* without jump-forward: every token sampled, one forward each */
    q.no_jump_forward = true;
    fw0 = f->forwards;
    result nojf;
    run1(e, &q, &nojf);
    assert_true(pcre_full_match(rx, nojf.s[0].text, nojf.s[0].text_len));
    assert_int_equal(nojf.s[0].m.forced_tokens, 0);
    assert_true(f->forwards - fw0 >= fw_jf + (uint64_t)forced / 2);
    for (int i = 0; i < nojf.s[0].n_tokens; i++) assert_true(nojf.s[0].lp[i].n_top >= 1);
    result_free(&nojf);
    q.no_jump_forward = false;

    /* max_tokens in the middle of the forced run: cut there */
    for (int mt = 1; mt <= 6; mt++) {
        q.max_tokens = mt;
        result r;
        run1(e, &q, &r);
        assert_int_equal(r.s[0].finish, TRELLIS_FINISH_LENGTH);
        assert_int_equal(r.s[0].n_tokens, mt);
        assert_int_equal(r.s[0].m.completion_tokens, mt);
        /* the cut text can still be completed */
        assert_true(pcre_live_prefix(rx, r.s[0].text, r.s[0].text_len));
        /* one sampled digit, the rest forced */
        assert_int_equal(r.s[0].m.forced_tokens, mt - 1);
        result_free(&r);
    }
    q.max_tokens = 64;

    /* a stop string inside the forced text */
    const char *stop[] = {"brown"};
    q.stop = stop;
    q.n_stop = 1;
    result st;
    run1(e, &q, &st);
    assert_int_equal(st.s[0].finish, TRELLIS_FINISH_STOP);
    assert_int_equal(st.s[0].stop_index, 0);
    assert_int_equal(st.s[0].text_len, 13); /* "D: the quick " */
    assert_memory_equal(st.s[0].text + 1, ": the quick ", 12);
    assert_null(strstr(st.s[0].text, "brown"));
    assert_null(strstr(st.s[0].text, "bro"));
    result_free(&st);
    q.stop = NULL;
    q.n_stop = 0;
    expect_clean(e);
    trellis_engine_free(e);

    /* the same tokens when chunks are split and sequences preempted */
    enum { NJ = 10 };
    trellis_request qs[NJ];
    result ref[NJ], got[NJ];
    int32_t jprompts[NJ][12];
    for (int i = 0; i < NJ; i++) {
        qs[i] = q;
        rand_tokens(500 + (uint64_t)i, jprompts[i], 12);
        qs[i].tokens = jprompts[i];
        qs[i].logprobs = false;
        qs[i].top_logprobs = 0;
        qs[i].seed = 100 + (uint64_t)i;
        qs[i].n = 1 + i % 3;
    }
    e = fake_engine(&c, &f);
    for (int i = 0; i < NJ; i++) run1(e, &qs[i], &ref[i]);
    trellis_engine_free(e);
    fake_cfg tiny = c;
    tiny.page_size = 4;
    tiny.n_pages = (12 + 64 + 3) / 4; /* what one request needs */
    tiny.chunk = 3;
    tiny.max_batch = 16;
    e = fake_engine(&tiny, &f);
    for (int i = 0; i < NJ; i++) submit_ok(e, &qs[i], &got[i]);
    drain(e, got, NJ);
    assert_int_equal(f->bad, 0);
    trellis_stats ts;
    stats_now(e, &ts);
    fprintf(stderr, "fake jump-forward, tiny pool: %llu preemptions\n",
            (unsigned long long)ts.preemptions);
    assert_true(ts.preemptions > 0);
    for (int i = 0; i < NJ; i++) {
        for (int j = 0; j < qs[i].n; j++) {
            same_tokens(&ref[i], &got[i], j);
            assert_true(pcre_full_match(rx, got[i].s[j].text, got[i].s[j].text_len));
        }
        result_free(&ref[i]);
        result_free(&got[i]);
    }
    expect_clean(e);
    expect_all_free(e);

    /* half a jump-forward is refused at submit */
    static const trellis_constraint_ops half = {
        .fill_mask = half_fill, .accept = half_accept, .free = half_free,
        .forced_bytes = half_forced};
    trellis_request hq;
    trellis_request_default(&hq);
    hq.tokens = prompt;
    hq.n_tokens = 12;
    hq.constraint = &half;
    char err[256];
    assert_int_equal(trellis_submit(e, &hq, NULL, err, sizeof err),
                     TRELLIS_ERR_INVALID_ARG);
    assert_non_null(strstr(err, "rollback"));
    trellis_engine_free(e);
    result_free(&full);
    tr_grammar_free(g);
}

static void test_rejections(void **state) {
    (void)state;
    if (!model_present()) skip();
    fake *f;
    fake_cfg c = fake_default();
    c.n_pages = 20; /* 320 tokens */
    trellis_engine *e = fake_engine(&c, &f);
    char err[512];
    int32_t prompt[400];
    rand_tokens(1, prompt, 400);
    trellis_request q;
#define REJECT(code, frag)                                                  \
    do {                                                                    \
        err[0] = 0;                                                         \
        assert_int_equal(trellis_submit(e, &q, NULL, err, sizeof err), code); \
        if (!strstr(err, frag)) fprintf(stderr, "message: %s\n", err);      \
        assert_non_null(strstr(err, frag));                                 \
    } while (0)
    trellis_request_default(&q);
    q.prompt = "";
    REJECT(TRELLIS_ERR_INVALID_ARG, "empty");
    q.prompt = NULL;
    q.tokens = prompt;
    q.n_tokens = 0;
    REJECT(TRELLIS_ERR_INVALID_ARG, "empty");
    q.n_tokens = -3;
    REJECT(TRELLIS_ERR_INVALID_ARG, "token array");
    q.n_tokens = 10;
    q.max_tokens = 0;
    REJECT(TRELLIS_ERR_INVALID_ARG, "max_tokens is 0");
    q.max_tokens = 5000; /* above the context (2048) */
    REJECT(TRELLIS_ERR_TOO_LONG, "context");
    q.max_tokens = 400;  /* fits the context, not the pool of 320 tokens */
    REJECT(TRELLIS_ERR_LIMIT, "KV pages");
    q.n_tokens = 330;
    q.max_tokens = -1;   /* as many as fit: none */
    REJECT(TRELLIS_ERR_TOO_LONG, "no room");
    q.n_tokens = 10;
    q.max_tokens = 10;
    q.n = 0;
    REJECT(TRELLIS_ERR_INVALID_ARG, "n is 0");
    q.n = 1;
    q.temperature = -1;
    REJECT(TRELLIS_ERR_INVALID_ARG, "temperature");
    q.temperature = 1;
    const char *bad_stop[1] = {""};
    q.stop = bad_stop;
    q.n_stop = 1;
    REJECT(TRELLIS_ERR_INVALID_ARG, "empty");
    const char *bad_utf8[1] = {"\xff"};
    q.stop = bad_utf8;
    REJECT(TRELLIS_ERR_INVALID_ARG, "UTF-8");
    q.stop = NULL;
    q.n_stop = 0;
    int32_t bad_tok = 49152;
    q.stop_tokens = &bad_tok;
    q.n_stop_tokens = 1;
    REJECT(TRELLIS_ERR_INVALID_ARG, "vocabulary");
    q.stop_tokens = NULL;
    q.n_stop_tokens = 0;
    prompt[3] = -5;
    REJECT(TRELLIS_ERR_INVALID_ARG, "vocabulary");
    prompt[3] = 100;
    q.prompt = "hello";
    REJECT(TRELLIS_ERR_INVALID_ARG, "exactly one");
    q.tokens = NULL;
    q.n_tokens = 0;
    q.prompt = "\xc3\x28";
    REJECT(TRELLIS_ERR_INVALID_ARG, "UTF-8");
    q.prompt = "hello";
    q.top_logprobs = 3;
    REJECT(TRELLIS_ERR_INVALID_ARG, "logprobs");
#undef REJECT
    /* the engine still works after all that */
    q.top_logprobs = 0;
    q.max_tokens = 5;
    result r;
    run1(e, &q, &r);
    assert_int_equal(r.s[0].n_tokens + (r.s[0].finish == TRELLIS_FINISH_STOP), 5);
    result_free(&r);
    /* a request using the whole pool exactly is fine */
    trellis_request_default(&q);
    q.tokens = prompt;
    q.n_tokens = 300;
    q.max_tokens = 20;
    q.ignore_eos = true;
    run1(e, &q, &r);
    assert_int_equal(r.s[0].n_tokens, 20);
    result_free(&r);
    expect_all_free(e);
    trellis_engine_free(e);
}

/* Cancellation storm: many requests, random cancellations at random
 * times, a pool small enough to preempt; afterwards everything is free. */
static void test_cancel_storm(void **state) {
    (void)state;
    if (!model_present()) skip();
    const int N = small_scale() ? 500 : 10000;
    fake *f;
    fake_cfg c = fake_default();
    c.n_pages = 64; /* 512 tokens: a handful of sequences at a time */
    c.page_size = 8;
    c.max_running = 24;
    c.max_batch = 128;
    c.chunk = 32;
    trellis_engine *e = fake_engine(&c, &f);
    result *rs = calloc((size_t)N, sizeof *rs);
    int32_t prefixes[4][96];
    for (int p = 0; p < 4; p++) rand_tokens(77 + (uint64_t)p, prefixes[p], 96);
    uint64_t rng = 42;
    int finished = 0, cancelled_events = 0, submitted = 0;
    int64_t outstanding = 0;
    for (int i = 0; i < N; i++) {
        rng = mix(rng);
        int32_t prompt[160];
        int pre = (int)(rng % 4), plen = 8 + (int)((rng >> 8) % 88);
        memcpy(prompt, prefixes[pre], (size_t)plen * sizeof(int32_t));
        int tail = 1 + (int)((rng >> 20) % 40);
        rand_tokens(rng, prompt + plen, tail);
        trellis_request q;
        trellis_request_default(&q);
        q.tokens = prompt;
        q.n_tokens = plen + tail;
        q.max_tokens = 1 + (int)((rng >> 30) % 40);
        q.n = (rng >> 40) % 10 == 0 ? 3 : 1;
        q.stream = (rng >> 44) & 1;
        q.seed = rng;
        if ((rng >> 50) % 5 == 0) {
            static const char *stops[1] = {"e"};
            q.stop = stops;
            q.n_stop = 1;
        }
        submit_ok(e, &q, &rs[i]);
        submitted++;
        outstanding++;
        /* cancel a random recent request 30% of the time */
        rng = mix(rng);
        if (rng % 10 < 3) {
            int k = i - (int)((rng >> 10) % 50);
            if (k >= 0) trellis_cancel(e, rs[k].id);
        }
        if (rng % 97 == 0) trellis_cancel(e, 987654321ull); /* unknown id */
        /* keep the backlog bounded: drain what is there */
        for (;;) {
            trellis_event *ev;
            int got = outstanding > 200 ? trellis_wait(e, 60000, &ev)
                                        : trellis_poll(e, &ev);
            if (!got) {
                assert_true(outstanding <= 200); /* else: stuck */
                break;
            }
            uint64_t id = ev->request_id;
            int k = (int)(id - rs[0].id);
            assert_true(k >= 0 && k <= i && rs[k].id == id);
            if (ev->kind == TRELLIS_EVENT_DONE && ev->finish == TRELLIS_FINISH_CANCELLED)
                cancelled_events++;
            bool was = rs[k].request_done;
            collect(&rs[k], ev);
            if (!was && rs[k].request_done) {
                finished++;
                outstanding--;
            }
            trellis_event_free(ev);
        }
    }
    /* the rest */
    while (finished < submitted) {
        trellis_event *ev;
        assert_int_equal(trellis_wait(e, 120000, &ev), 1);
        int k = (int)(ev->request_id - rs[0].id);
        assert_true(k >= 0 && k < N);
        if (ev->kind == TRELLIS_EVENT_DONE && ev->finish == TRELLIS_FINISH_CANCELLED)
            cancelled_events++;
        bool was = rs[k].request_done;
        collect(&rs[k], ev);
        if (!was && rs[k].request_done) finished++;
        trellis_event_free(ev);
    }
    assert_int_equal(f->bad, 0);
    for (int i = 0; i < N; i++) {
        assert_true(rs[i].request_done);
        for (int j = 0; j < rs[i].n; j++) {
            assert_true(rs[i].s[j].done);
            assert_true(rs[i].s[j].finish == TRELLIS_FINISH_STOP ||
                        rs[i].s[j].finish == TRELLIS_FINISH_LENGTH ||
                        rs[i].s[j].finish == TRELLIS_FINISH_CANCELLED);
        }
        result_free(&rs[i]);
    }
    free(rs);
    assert_true(cancelled_events > N / 20);
    trellis_stats st;
    stats_now(e, &st);
    fprintf(stderr, "storm: %d requests, %d cancelled samples, %llu preemptions, "
                    "%llu steps, %llu admitted during a forward pass\n",
            N, cancelled_events, (unsigned long long)st.preemptions,
            (unsigned long long)st.steps, (unsigned long long)st.admitted_ahead);
    assert_true(st.preemptions > 0);
    /* with a queue this long, most admissions happen a step early, while
     * the previous forward pass runs (tr_sched_admit_ahead) */
    assert_true(st.admitted_ahead > 0);
    expect_clean(e);
    expect_all_free(e);
    trellis_engine_free(e);
}

/* Cancelling a long request frees its pages at the next step, and
 * trellis_engine_free with requests in flight leaks nothing. */
/* The event-loop contract of trellis.h: wake runs on the engine thread
 * (never the loop's) and only pokes a libuv loop (uv_async_send); the loop
 * thread drains with trellis_poll, only in the async callback, and cancels
 * from a timer. Every sample still gets exactly one DONE (collect checks
 * the order), only cancelled requests end CANCELLED, the loop ran no more
 * callbacks than there were sends, and the engine, freed from inside a
 * loop callback before the async handle closes, leaves every page free. */
typedef struct uv_run_ctx {
    uv_async_t async;
    uv_timer_t timer;
    trellis_engine *e;
    result *rs;
    bool *cancelled;
    int n, left;
    uint64_t rng;
    pthread_t loop_thread;
    uint64_t wakes, drains;   /* wakes: engine thread, atomically */
    int wake_on_loop_thread;  /* must stay 0 */
    int cancels;
} uv_run_ctx;

static void uvt_wake(void *user) {
    uv_run_ctx *c = user;
    if (pthread_equal(pthread_self(), c->loop_thread))
        __atomic_store_n(&c->wake_on_loop_thread, 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&c->wakes, 1, __ATOMIC_RELAXED);
    uv_async_send(&c->async);
}

static void uvt_on_async(uv_async_t *h) {
    uv_run_ctx *c = h->data;
    c->drains++;
    trellis_event *ev;
    while (c->e && trellis_poll(c->e, &ev) == 1) {
        int k = (int)(ev->request_id - c->rs[0].id);
        assert_true(k >= 0 && k < c->n && c->rs[k].id == ev->request_id);
        if (ev->kind == TRELLIS_EVENT_DONE && ev->finish == TRELLIS_FINISH_CANCELLED)
            assert_true(c->cancelled[k]);
        bool was = c->rs[k].request_done;
        collect(&c->rs[k], ev);
        if (!was && c->rs[k].request_done) c->left--;
        trellis_event_free(ev);
    }
    if (c->e && c->left == 0) {
        expect_all_free(c->e);
        trellis_engine_free(c->e); /* joins the engine thread: no wake after */
        c->e = NULL;
        uv_close((uv_handle_t *)&c->async, NULL);
        uv_close((uv_handle_t *)&c->timer, NULL);
    }
}

static void uvt_on_timer(uv_timer_t *t) {
    uv_run_ctx *c = t->data;
    if (!c->e) return;
    c->rng = mix(c->rng);
    int k = (int)(c->rng % (uint64_t)c->n);
    if ((c->rng >> 32) % 3 == 0 && !c->rs[k].request_done) {
        c->cancelled[k] = true;
        c->cancels++;
        assert_int_equal(trellis_cancel(c->e, c->rs[k].id), 0);
    }
    if ((c->rng >> 40) % 16 == 0) trellis_cancel(c->e, 987654321ull); /* unknown: ignored */
}

static void test_uv_loop_fake(void **state) {
    (void)state;
    if (!model_present()) skip();
    const int N = small_scale() ? 60 : 300;
    uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);
    uv_run_ctx c = {.n = N, .left = N, .rng = 99, .loop_thread = pthread_self()};
    c.rs = calloc((size_t)N, sizeof *c.rs);
    c.cancelled = calloc((size_t)N, sizeof *c.cancelled);
    assert_non_null(c.rs);
    assert_non_null(c.cancelled);
    assert_int_equal(uv_async_init(&loop, &c.async, uvt_on_async), 0);
    assert_int_equal(uv_timer_init(&loop, &c.timer), 0);
    c.async.data = c.timer.data = &c;
    fake *f;
    fake_cfg cfg = fake_default();
    cfg.max_running = 16;
    cfg.wake = uvt_wake;
    cfg.wake_user = &c;
    c.e = fake_engine(&cfg, &f);
    f->delay_us = 300; /* requests last long enough to be cancelled */
    uint64_t rng = 5;
    for (int i = 0; i < N; i++) {
        rng = mix(rng);
        int32_t prompt[64];
        int plen = 4 + (int)(rng % 56);
        rand_tokens(rng, prompt, plen);
        trellis_request q;
        trellis_request_default(&q);
        q.tokens = prompt;
        q.n_tokens = plen;
        q.max_tokens = 1 + (int)((rng >> 16) % 48);
        q.n = (rng >> 24) % 8 == 0 ? 3 : 1;
        q.stream = (rng >> 32) & 1;
        q.seed = rng;
        submit_ok(c.e, &q, &c.rs[i]);
        assert_int_equal(c.rs[i].id, c.rs[0].id + (uint64_t)i);
    }
    assert_int_equal(uv_timer_start(&c.timer, uvt_on_timer, 1, 1), 0);
    assert_int_equal(uv_run(&loop, UV_RUN_DEFAULT), 0); /* ends: handles closed */
    assert_null(c.e);
    assert_int_equal(c.left, 0);
    for (int i = 0; i < N; i++) {
        assert_true(c.rs[i].request_done);
        assert_int_equal(c.rs[i].done, c.rs[i].n);
    }
    assert_int_equal(c.wake_on_loop_thread, 0);
    assert_true(c.drains >= 1);
    assert_true(c.drains <= c.wakes); /* a callback only after a send */
    assert_true(c.cancels > 0);
    fprintf(stderr, "uv: %d requests, %d cancels, %llu wakes, %llu drains\n", N, c.cancels,
            (unsigned long long)c.wakes, (unsigned long long)c.drains);
    assert_int_equal(uv_loop_close(&loop), 0);
    for (int i = 0; i < N; i++) result_free(&c.rs[i]);
    free(c.rs);
    free(c.cancelled);
}

static void test_cancel_running_and_shutdown(void **state) {
    (void)state;
    if (!model_present()) skip();
    fake *f;
    fake_cfg c = fake_default();
    c.chunk = 8;
    c.max_batch = 16; /* a 1,000-token prompt takes many steps */
    trellis_engine *e = fake_engine(&c, &f);
    f->delay_us = 1000; /* ~600 steps: still running when cancelled */
    int32_t prompt[1000];
    rand_tokens(8, prompt, 1000);
    trellis_request q;
    trellis_request_default(&q);
    q.tokens = prompt;
    q.n_tokens = 1000;
    q.max_tokens = 500;
    q.ignore_eos = true;
    result r;
    submit_ok(e, &q, &r);
    for (int i = 0; i < 200; i++) {
        trellis_stats st;
        trellis_get_stats(e, &st);
        if (st.pages_used > 0) break;
        usleep(1000);
    }
    assert_int_equal(trellis_cancel(e, r.id), 0);
    drain(e, &r, 1);
    assert_int_equal(r.s[0].finish, TRELLIS_FINISH_CANCELLED);
    assert_int_equal(tr_engine_debug_check(e), TR_OK);
    result_free(&r);
    /* leave requests running and free the engine: ASan sees no leak */
    for (int i = 0; i < 5; i++) submit_ok(e, &q, &r);
    trellis_engine_free(e);
}

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
    if (!model_present()) skip();
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
    if (!model_present()) skip();
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
    trellis_engine_free(e);
}

static void test_batch_invariance_real(void **state) {
    (void)state;
    if (!model_present()) skip();
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
    if (!model_present()) skip();
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
    if (!model_present()) skip();
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

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_basic_and_stream),
        cmocka_unit_test(test_invariance_fake),
        cmocka_unit_test(test_random_configs),
        cmocka_unit_test(test_preemption_fake),
        cmocka_unit_test(test_prefix_sharing),
        cmocka_unit_test(test_fork_n),
        cmocka_unit_test(test_stops),
        cmocka_unit_test(test_logprobs_and_greedy),
        cmocka_unit_test(test_regex_constraint),
        cmocka_unit_test(test_jump_forward_fake),
        cmocka_unit_test(test_rejections),
        cmocka_unit_test(test_cancel_storm),
        cmocka_unit_test(test_cancel_running_and_shutdown),
        cmocka_unit_test(test_uv_loop_fake),
        cmocka_unit_test(test_load_modes_real),
        cmocka_unit_test(test_device_option),
        cmocka_unit_test(test_batch_invariance_real),
        cmocka_unit_test(test_preemption_and_fork_real),
        cmocka_unit_test(test_jump_forward_real),
    };
    /* TRELLIS_TEST_FILTER=test_cancel_* runs a subset (cmocka's glob) */
    const char *filter = getenv("TRELLIS_TEST_FILTER");
    if (filter) cmocka_set_test_filter(filter);
    /* TRELLIS_TEST_SKIP='*_real' skips the real-model tests (slow under
     * sanitizers at -O0) */
    const char *skipf = getenv("TRELLIS_TEST_SKIP");
    if (skipf) cmocka_set_skip_filter(skipf);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
