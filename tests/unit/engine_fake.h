/* engine_fake.h — the engine on a fake model, and the helpers that run
 * requests and collect their events, shared by the engine's unit tests
 * (test_engine.c, test_grammar_cache.c).
 *
 * The fake model is an engine_compute whose forward pass takes a few
 * microseconds. It stores each token it is fed in its KV "page" slot and
 * computes the logits of a row from the sequence's whole history READ
 * BACK THROUGH THE PAGE TABLE (checking every slot holds the position it
 * should), so a page shared by mistake, a wrong page table after
 * preemption, or a cached prefix whose pages hold other tokens changes
 * the output. With units (fake_cfg.units > 1: unit 0 without a window,
 * the others reading the last unit_window positions), every token is
 * stored in each unit's page and each windowed unit's window is read back
 * and checked too, so a windowed page let go too early (or reused while
 * a window still reads it) fails the check. Each row has 8 likely tokens
 * (ids >= 100, no specials)
 * picked by a hash of the history. The tokenizer is tiny_vocab.h's
 * synthetic one (49,152 tokens, SmolLM2's control ids), so the fake-model
 * tests need no model file. The request helpers serve the real-model
 * tests too (test_engine_model.c).
 *
 * Everything is static inline: each test file uses what it needs.
 */
#ifndef TR_TESTS_UNIT_ENGINE_FAKE_H
#define TR_TESTS_UNIT_ENGINE_FAKE_H

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
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

#include "base/util.h"
#include "runtime/engine/engine_compute_internal.h"
#include "runtime/gguf/gguf.h"
#include "runtime/tokenizer/tokenizer.h"
#include "trellis.h"
#include "tests/unit/tiny_vocab.h"

/* ------------------------------------------------------------------ */
/* The fake model                                                      */
/* ------------------------------------------------------------------ */

typedef struct fake {
    int32_t n_pages, ps, n_vocab;
    int32_t W;          /* ids per page slot */
    int32_t win[8];     /* each unit's window, 0 = none */
    int32_t *slot_tok; /* [n_pages * ps] */
    int32_t *slot_pos; /* [n_pages * ps], -1 = never written */
    int bad;           /* a page check failed */
    uint64_t forwards, rows;
    int32_t max_batch_seen;
    int delay_us;      /* per forward, to make requests take a while */
    uint64_t masked_rows; /* rows the engine said it reads through a mask */
    uint64_t kv_reads, kv_writes; /* pages the disk tier copied out / in */
    bool copy;         /* a copying model: the likeliest next token is the
                          one that followed the latest earlier occurrence
                          of the current token (n-gram drafts then match) */
    uint64_t salt;     /* mixed into the history hash: a draft fake of
                          another salt agrees with the target only where
                          both copy (copy mode) */
    bool fail;         /* every forward pass fails (TR_ERR_INTERNAL) */
    atomic_bool hold;  /* forward passes wait while set: a test that
                          submits a set of requests holds the first pass
                          until all are in, so that the steps (and their
                          count) do not depend on how the submissions
                          interleave with the engine thread */
} fake;

/* copy mode: the token after the latest earlier occurrence of hist[p]
 * in hist[0..p), or -1 */
static inline int32_t fake_copy_next(const int32_t *hist, int32_t p) {
    for (int32_t j = p - 1; j >= 0; j--)
        if (hist[j] == hist[p]) return hist[j + 1];
    return -1;
}

static inline uint64_t mix(uint64_t z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* The logits the engine says it will not read (outside a row's mask) get
 * a huge value: a sampler that read one would pick it, so a wrong
 * tr_logit_masks changes outputs the tests check. */
static inline void fake_poison_unread(fake *f, const tr_logit_masks *lm,
                                      int32_t n_rows, float *logits) {
    if (lm->await) lm->await(lm->ctx);
    for (int32_t r = 0; r < n_rows; r++) {
        const uint64_t *m = lm->row_mask[r];
        if (!m) continue;
        f->masked_rows++;
        float *l = logits + (size_t)r * (size_t)f->n_vocab;
        for (int32_t t = 0; t < f->n_vocab; t++)
            if (!(m[t >> 6] >> (t & 63) & 1)) l[t] = 1e30f;
    }
}

static inline tr_status fake_forward(void *ctx, const tr_batch *b, const int32_t *tokens,
                              const int32_t *rows, int32_t n_rows, float *logits,
                              const tr_logit_masks *masks) {
    fake *f = ctx;
    while (atomic_load_explicit(&f->hold, memory_order_acquire)) usleep(100);
    f->forwards++;
    if (f->fail) return TR_ERR_INTERNAL;
    if (f->delay_us) usleep((useconds_t)f->delay_us);
    f->rows += (uint64_t)n_rows;
    if (b->n_tokens > f->max_batch_seen) f->max_batch_seen = b->n_tokens;
    for (int32_t t = 0; t < b->n_tokens; t++) {
        int32_t s = b->seq[t], p = b->pos[t];
        if (p / f->ps >= b->n_pages[s]) {
            f->bad = 1;
            return TR_ERR_INVALID_ARG;
        }
        for (int32_t u = 0; u < f->W; u++) {
            int32_t page = b->page_table[s][(p / f->ps) * f->W + u];
            if (page < 0 || page >= f->n_pages) {
                f->bad = 2;
                return TR_ERR_INVALID_ARG;
            }
            size_t slot = (size_t)page * (size_t)f->ps + (size_t)(p % f->ps);
            f->slot_tok[slot] = tokens[t];
            f->slot_pos[slot] = p;
        }
    }
    for (int32_t r = 0; r < n_rows; r++) {
        int32_t t = rows[r], s = b->seq[t], p = b->pos[t];
        uint64_t h = 0x12345 ^ f->salt;
        int32_t *hist = malloc((size_t)(p + 1) * sizeof *hist);
        if (!hist) return TR_ERR_NOMEM;
        for (int32_t i = 0; i <= p; i++) {
            int32_t page = b->page_table[s][(i / f->ps) * f->W];
            size_t slot = (size_t)page * (size_t)f->ps + (size_t)(i % f->ps);
            if (f->slot_pos[slot] != i) {
                f->bad = 3;
                free(hist);
                return TR_ERR_INTERNAL;
            }
            h = mix(h ^ (uint64_t)f->slot_tok[slot]);
            hist[i] = f->slot_tok[slot];
        }
        /* each windowed unit holds the same tokens over its window */
        for (int32_t u = 1; u < f->W; u++) {
            for (int32_t i = p - f->win[u] + 1 > 0 ? p - f->win[u] + 1 : 0; i <= p; i++) {
                int32_t page = b->page_table[s][(i / f->ps) * f->W + u];
                size_t slot = (size_t)page * (size_t)f->ps + (size_t)(i % f->ps);
                if (page < 0 || page >= f->n_pages || f->slot_pos[slot] != i ||
                    f->slot_tok[slot] != hist[i]) {
                    f->bad = 4;
                    free(hist);
                    return TR_ERR_INTERNAL;
                }
            }
        }
        if (!f->copy) {
            free(hist);
            hist = NULL;
        }
        float *l = logits + (size_t)r * (size_t)f->n_vocab;
        memset(l, 0, (size_t)f->n_vocab * sizeof *l);
        /* 8 likely tokens chosen by the history; ids >= 100 (no specials) */
        for (int k = 0; k < 8; k++) {
            int32_t id = 100 + (int32_t)(mix(h + (uint64_t)k) % (uint64_t)(f->n_vocab - 200));
            l[id] = 12.0f + 0.5f * (float)k;
        }
        int32_t next = hist ? fake_copy_next(hist, p) : -1;
        if (next >= 100) l[next] = 17.0f; /* likeliest, not certain */
        free(hist);
    }
    fake_poison_unread(f, masks, n_rows, logits);
    return TR_OK;
}

static inline void fake_destroy(void *ctx) {
    fake *f = ctx;
    free(f->slot_tok);
    free(f->slot_pos);
    free(f);
}

/* A page's "K/V" as the disk tier moves it: its slots' tokens and
 * positions, so a restored page that holds the wrong prefix changes the
 * output (or fails the position check) like a wrongly shared one. */
static inline tr_status fake_kv_read(void *ctx, int32_t page, void *dst) {
    fake *f = ctx;
    if (page < 0 || page >= f->n_pages) return TR_ERR_INVALID_ARG;
    size_t at = (size_t)page * (size_t)f->ps, n = (size_t)f->ps * sizeof(int32_t);
    memcpy(dst, f->slot_tok + at, n);
    memcpy((char *)dst + n, f->slot_pos + at, n);
    f->kv_reads++;
    return TR_OK;
}

static inline tr_status fake_kv_write(void *ctx, int32_t page, const void *src) {
    fake *f = ctx;
    if (page < 0 || page >= f->n_pages) return TR_ERR_INVALID_ARG;
    size_t at = (size_t)page * (size_t)f->ps, n = (size_t)f->ps * sizeof(int32_t);
    memcpy(f->slot_tok + at, src, n);
    memcpy(f->slot_pos + at, (const char *)src + n, n);
    f->kv_writes++;
    return TR_OK;
}

static const engine_compute_ops k_fake_ops = {fake_forward, fake_destroy, NULL,
                                              fake_kv_read, fake_kv_write};

typedef struct fake_cfg {
    int32_t n_pages, page_size, max_batch, max_running, chunk;
    bool no_radix, no_overlap;
    int32_t ctx;
    int32_t lpm;
    int32_t grammar_cache_mb; /* 0: the default */
    int32_t spec_ngram;       /* options.spec_ngram */
    bool copy;                /* fake.copy */
    trellis_wake_fn wake;
    void *wake_user;
    const char *kv_cache_dir; /* options.kv_cache_dir (NULL: none) */
    int32_t kv_cache_disk_mb; /* 0: the default */
    int32_t units;            /* 0, 1: one page per slot; 2..8: unit 0
                                 without a window, the others windowed */
    int32_t unit_window;      /* their window (positions) */
    int32_t draft;            /* a fake draft model: 0 none, 1 the
                                 target's twin (always agrees), 2 another
                                 salt (agrees where both copy) */
    int32_t draft_pages;      /* its pool (0: as many as the target's) */
    int32_t spec_draft;       /* options.spec_draft (0: the default) */
    bool draft_fail;          /* its forward passes fail */
    bool draft_sampling;      /* options.draft_sampling */
} fake_cfg;

static inline fake_cfg fake_default(void) {
    return (fake_cfg){.n_pages = 4096, .page_size = 16, .max_batch = 256,
                      .max_running = 32, .chunk = 64, .ctx = 2048, .lpm = 128};
}

/* A fake of n_pages pages of ps positions, one unit, for the vocabulary
 * of tok, as an engine_compute (the fake owned by it). */
static inline engine_compute fake_compute(int32_t n_pages, int32_t ps, int32_t max_batch,
                                          int32_t n_vocab, fake **fp) {
    fake *f = calloc(1, sizeof *f);
    assert_non_null(f);
    atomic_init(&f->hold, false);
    f->n_pages = n_pages;
    f->ps = ps;
    f->W = 1;
    f->n_vocab = n_vocab;
    size_t slots = (size_t)n_pages * (size_t)ps;
    f->slot_tok = malloc(slots * sizeof(int32_t));
    f->slot_pos = malloc(slots * sizeof(int32_t));
    assert_non_null(f->slot_tok);
    for (size_t i = 0; i < slots; i++) f->slot_pos[i] = -1;
    *fp = f;
    return (engine_compute){.ops = &k_fake_ops, .ctx = f, .n_vocab = n_vocab,
                            .n_ctx = 8192, .max_batch = max_batch, .n_pages = n_pages,
                            .page_size = ps, .threads = 1, .arch = "fake-draft",
                            .kv_page_bytes = (uint64_t)ps * 8u, .kv_units = 1};
}

/* Builds an engine on the fake; *fp gets the fake (owned by the engine),
 * *dp (may be NULL) the draft fake when c->draft. */
static inline trellis_engine *fake_engine_draft(const fake_cfg *c, fake **fp, fake **dp) {
    /* the synthetic vocabulary's GGUF (metadata only) stands in for the
     * model file: the engine reads the chat template from it */
    gguf_file *file = tv_open();
    tokenizer *tok = tv_tokenizer();
    assert_non_null(file);
    assert_non_null(tok);
    fake *f = calloc(1, sizeof *f);
    assert_non_null(f);
    atomic_init(&f->hold, false);
    f->n_pages = c->n_pages;
    f->ps = c->page_size;
    f->W = c->units > 1 ? c->units : 1;
    assert_true(f->W <= 8);
    for (int32_t u = 1; u < f->W; u++) f->win[u] = c->unit_window;
    f->n_vocab = tr_tokenizer_n_vocab(tok);
    size_t slots = (size_t)c->n_pages * (size_t)c->page_size;
    f->slot_tok = malloc(slots * sizeof(int32_t));
    f->slot_pos = malloc(slots * sizeof(int32_t));
    assert_non_null(f->slot_tok);
    for (size_t i = 0; i < slots; i++) f->slot_pos[i] = -1;
    engine_compute comp = {.ops = &k_fake_ops, .ctx = f, .n_vocab = f->n_vocab,
                           .n_ctx = 8192, .max_batch = c->max_batch,
                           .n_pages = c->n_pages, .page_size = c->page_size,
                           .threads = 1,
                           .kv_page_bytes = (uint64_t)c->page_size * 8u,
                           .kv_fingerprint = 0xfa4e0000u + (uint64_t)c->page_size,
                           .kv_units = f->W};
    for (int32_t u = 0; u < f->W; u++) comp.kv_unit_window[u] = f->win[u];
    trellis_engine_options o;
    trellis_engine_options_default(&o);
    o.max_batch_tokens = c->max_batch;
    o.max_running = c->max_running;
    o.chunk_size = c->chunk;
    o.no_radix = c->no_radix;
    o.no_overlap = c->no_overlap;
    o.ctx = c->ctx;
    o.lpm_max_waiting = c->lpm;
    if (c->grammar_cache_mb) o.grammar_cache_mb = c->grammar_cache_mb;
    o.spec_ngram = c->spec_ngram;
    f->copy = c->copy;
    o.wake = c->wake;
    o.wake_user = c->wake_user;
    o.kv_cache_dir = c->kv_cache_dir;
    if (c->kv_cache_disk_mb) o.kv_cache_disk_mb = c->kv_cache_disk_mb;
    if (c->spec_draft) o.spec_draft = c->spec_draft;
    o.draft_sampling = c->draft_sampling;
    trellis_engine *e = NULL;
    char err[256];
    engine_compute dcomp;
    fake *df = NULL;
    if (c->draft) {
        dcomp = fake_compute(c->draft_pages ? c->draft_pages : c->n_pages, c->page_size,
                             c->max_batch, f->n_vocab, &df);
        df->copy = c->copy;
        df->salt = c->draft == 2 ? 0x5a17u : 0;
        df->fail = c->draft_fail;
    }
    if (dp) *dp = df;
    tr_status s = tr_engine_new_custom_draft(&o, file, tok, &comp, c->draft ? &dcomp : NULL,
                                             NULL, &e, err, sizeof err);
    if (s != TR_OK) fprintf(stderr, "engine_new_custom: %s\n", err);
    assert_int_equal(s, TR_OK);
    if (fp) *fp = f;
    return e;
}

static inline trellis_engine *fake_engine(const fake_cfg *c, fake **fp) {
    return fake_engine_draft(c, fp, NULL);
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

static inline void result_free(result *r) {
    for (int i = 0; i < TRELLIS_MAX_N; i++) {
        free(r->s[i].tokens);
        free(r->s[i].text);
        free(r->s[i].lp);
    }
}

static inline void collect(result *r, const trellis_event *ev) {
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
/* drain, with every invariant checked (tr_engine_debug_check) between
 * steps after every `every` events (0: never). */
static inline void drain_checked(trellis_engine *e, result *rs, int n, int every) {
    int left = 0, events = 0;
    for (int i = 0; i < n; i++) left += !rs[i].request_done;
    while (left > 0) {
        if (every && ++events % every == 0)
            assert_int_equal(tr_engine_debug_check(e), TR_OK);
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

static inline void drain(trellis_engine *e, result *rs, int n) { drain_checked(e, rs, n, 0); }

static inline void submit_ok(trellis_engine *e, const trellis_request *q, result *r) {
    char err[512];
    memset(r, 0, sizeof *r);
    r->n = q->n;
    int s = trellis_submit(e, q, &r->id, err, sizeof err);
    if (s != 0) fprintf(stderr, "submit: %s\n", err);
    assert_int_equal(s, 0);
    assert_true(r->id != 0);
}

static inline void run1(trellis_engine *e, const trellis_request *q, result *r) {
    submit_ok(e, q, r);
    drain(e, r, 1);
}

/* Deterministic pseudo-random prompt of n token ids (no specials). */
static inline void rand_tokens(uint64_t seed, int32_t *out, int n) {
    for (int i = 0; i < n; i++) out[i] = 100 + (int32_t)(mix(seed * 1000003u + (uint64_t)i) % 40000);
}

static inline void same_tokens(const result *a, const result *b, int idx) {
    assert_int_equal(a->s[idx].n_tokens, b->s[idx].n_tokens);
    assert_memory_equal(a->s[idx].tokens, b->s[idx].tokens,
                        (size_t)a->s[idx].n_tokens * sizeof(int32_t));
    assert_int_equal(a->s[idx].finish, b->s[idx].finish);
}

/* PCRE2 (the regex oracle, docs/design.md): does rx fully match s? Anchored
 * at both ends, UTF, `$` at the very end only (the grammar dialect). */
static inline bool pcre_full_match(const char *rx, const char *s, size_t len) {
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
static inline bool pcre_live_prefix(const char *rx, const char *s, size_t len) {
    size_t n = strlen(rx) + 8;
    char *pat = malloc(n);
    assert_non_null(pat);
    snprintf(pat, n, "(?:%s)$", rx);
    int ec;
    PCRE2_SIZE eo;
    pcre2_code *c = pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED,
                                  PCRE2_UTF | PCRE2_ANCHORED | PCRE2_DOLLAR_ENDONLY,
                                  &ec, &eo, NULL);
    free(pat);
    assert_non_null(c);
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(c, NULL);
    int rc = pcre2_match(c, (PCRE2_SPTR)s, len, 0, PCRE2_PARTIAL_HARD, md, NULL);
    pcre2_match_data_free(md);
    pcre2_code_free(c);
    return rc >= 0 || rc == PCRE2_ERROR_PARTIAL;
}

/* Stats as of now: the check is a round trip through the engine thread,
 * which publishes its snapshot after every step, before taking messages. */
static inline void stats_now(trellis_engine *e, trellis_stats *st) {
    assert_int_equal(tr_engine_debug_check(e), TR_OK);
    trellis_get_stats(e, st);
}

static inline void expect_clean(trellis_engine *e) {
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
static inline void expect_all_free(trellis_engine *e) {
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
/* A token-level constraint of the tests' own: every id >= 100 but the
 * multiples of 7, done after `limit` tokens; rolls back. Masks that bite,
 * drafts it refuses, and a constraint that completes inside drafts. */
typedef struct ban7 {
    int32_t n, limit, n_vocab;
} ban7;

static inline int ban7_fill(void *st, uint64_t *m, size_t n_words) {
    ban7 *b = st;
    memset(m, 0, n_words * sizeof *m);
    for (int32_t t = 100; t < b->n_vocab; t++)
        if (t % 7) m[t >> 6] |= UINT64_C(1) << (t & 63);
    return 0;
}

static inline int ban7_accept(void *st, int32_t t) {
    ban7 *b = st;
    if (t < 100 || t % 7 == 0 || b->n >= b->limit) return -1;
    b->n++;
    return 0;
}

static inline bool ban7_done(void *st) { return ((ban7 *)st)->n >= ((ban7 *)st)->limit; }

static inline void *ban7_clone(void *st) {
    ban7 *c = malloc(sizeof *c);
    if (c) *c = *(ban7 *)st;
    return c;
}

static inline int ban7_rollback(void *st, int32_t n) {
    ban7 *b = st;
    if (n > b->n) return -1;
    b->n -= n;
    return 0;
}

static inline int ban7_forced(void *st, uint8_t *buf, size_t cap, size_t *len) {
    (void)st, (void)buf, (void)cap;
    *len = 0; /* never a single continuation */
    return 0;
}

static const trellis_constraint_ops k_ban7 = {ban7_fill, ban7_accept, ban7_done, ban7_clone,
                                              free, ban7_forced, ban7_rollback};

#endif
