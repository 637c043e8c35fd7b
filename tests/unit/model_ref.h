/* model_ref.h — parity with llama.cpp for a model family, shared by
 * test_model_gemma.c and test_model_synth.c: the reference JSON of
 * scripts/ref/make_family_ref.py, running prompts through the model, and
 * the checks:
 *
 *  - first-step logits vs llama.cpp's (worst element and RMS, over every
 *    `stride`-th token id, plus llama.cpp's top 64), and each engine's
 *    distance from float64 arithmetic (numpy_forward.py): Trellis must be
 *    no further from it than llama.cpp is (with slack);
 *  - teacher-forced greedy: at each of the reference's steps Trellis
 *    predicts from llama.cpp's own prefix; a differing pick is allowed
 *    only where llama.cpp's top-2 gap was a near-tie, and the picks agree
 *    on at least (100 - max_mismatch_pct)% of the steps;
 *  - chunked prefill and token-by-token decoding give the bits of one
 *    batch; a sequence alone gives the bits it gets beside another;
 *  - windowed layers in pages of their own, dropped when out of every
 *    window, give the bits of full pages (mref_units).
 *
 * Header-only, for the model-core tests (harness.h asserts, json_lite.h:
 * no library but libc, as on a GPU test machine).
 */
#ifndef TR_TESTS_UNIT_MODEL_REF_H
#define TR_TESTS_UNIT_MODEL_REF_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "kernels/backend.h"
#include "runtime/model/model.h"
#include "tests/unit/json_lite.h"
#include "tests/unit/test_env.h"

#define MREF_DIR TRELLIS_SOURCE_DIR "/tests/data/model/"
#define MREF_TOP 64
#define MREF_PAGE 16

typedef struct mref_case {
    int32_t *prompt, n_prompt;
    int32_t *gen, n_gen; /* llama.cpp's greedy continuation */
    double *gap;         /* [n_gen] its top-2 logit gap at each step */
    float *logits;       /* [n_sub] first step, every stride-th id */
    float *exact;        /* [n_sub] the same in float64 arithmetic */
    int32_t top_id[MREF_TOP];
    float top_val[MREF_TOP];
} mref_case;

typedef struct mref {
    jl_value *root;
    int32_t n_vocab, stride, n_sub, n_gen;
    size_t n_cases;
    mref_case *c;
} mref;

typedef struct mref_limits {
    double max_abs;     /* worst |Trellis - llama.cpp| first-step logit */
    double rms;         /* RMS of that difference */
    double near_tie;    /* a greedy pick may differ where the gap is below */
    double exact_slack; /* Trellis's RMS from float64 <= slack x llama.cpp's */
    int max_mismatch_pct;
} mref_limits;

static int32_t *mref_ids(const jl_value *a, int32_t *n) {
    *n = (int32_t)jl_len(a);
    int32_t *v = malloc(sizeof(int32_t) * (size_t)(*n + 1));
    for (int32_t i = 0; i < *n; i++) v[i] = (int32_t)jl_num(jl_at(a, (size_t)i));
    return v;
}

static float *mref_floats(const char *file, int32_t n) {
    char path[4096];
    snprintf(path, sizeof path, "%s%s", MREF_DIR, file);
    FILE *fp = fopen(path, "rb");
    if (!fp) fail_msg("cannot open %s", path);
    float *v = malloc(sizeof(float) * (size_t)n);
    size_t got = fread(v, sizeof(float), (size_t)n, fp);
    fclose(fp);
    if (got != (size_t)n) fail_msg("%s: %zu of %d floats", path, got, n);
    return v;
}

static void mref_load(mref *r, const char *json_file) {
    memset(r, 0, sizeof *r);
    char path[4096];
    snprintf(path, sizeof path, "%s%s", MREF_DIR, json_file);
    r->root = jl_load_file(path);
    if (!r->root) fail_msg("%s: missing or not JSON", path);
    r->n_vocab = (int32_t)jl_num(jl_get(r->root, "n_vocab"));
    r->stride = (int32_t)jl_num(jl_get(r->root, "logits_stride"));
    r->n_gen = (int32_t)jl_num(jl_get(r->root, "n_gen"));
    assert_true(r->n_vocab > 0 && r->stride > 0);
    r->n_sub = (r->n_vocab + r->stride - 1) / r->stride;
    const jl_value *cases = jl_get(r->root, "cases");
    r->n_cases = jl_len(cases);
    assert_true(r->n_cases > 0);
    r->c = calloc(r->n_cases, sizeof *r->c);
    for (size_t i = 0; i < r->n_cases; i++) {
        const jl_value *cs = jl_at(cases, i);
        mref_case *c = &r->c[i];
        c->prompt = mref_ids(jl_get(cs, "prompt_ids"), &c->n_prompt);
        c->gen = mref_ids(jl_get(cs, "generated"), &c->n_gen);
        const jl_value *gaps = jl_get(cs, "top2_gap");
        c->gap = malloc(sizeof(double) * (size_t)(c->n_gen + 1));
        for (int32_t k = 0; k < c->n_gen; k++) c->gap[k] = jl_num(jl_at(gaps, (size_t)k));
        const char *lf = jl_str(jl_get(cs, "logits_file")), *ef = jl_str(jl_get(cs, "exact_file"));
        if (!lf || !ef) fail_msg("%s: case %zu names no logits files", path, i);
        c->logits = mref_floats(lf, r->n_sub);
        c->exact = mref_floats(ef, r->n_sub);
        const jl_value *top = jl_get(cs, "top");
        for (int k = 0; k < MREF_TOP; k++) {
            const jl_value *e = jl_at(top, (size_t)k);
            c->top_id[k] = (int32_t)jl_num(jl_at(e, 0));
            c->top_val[k] = (float)jl_num(jl_at(e, 1));
        }
    }
}

static void mref_free(mref *r) {
    for (size_t i = 0; i < r->n_cases; i++) {
        free(r->c[i].prompt);
        free(r->c[i].gen);
        free(r->c[i].gap);
        free(r->c[i].logits);
        free(r->c[i].exact);
    }
    free(r->c);
    jl_free(r->root);
}

/* One sequence's KV: pages of its own layout, in scrambled order. */
typedef struct mseq {
    tr_kv_layout kv;
    int32_t *table, n_pages;
} mseq;

static void mseq_init_typed(model *m, mseq *s, int32_t max_tokens, tr_kv_type k, tr_kv_type v) {
    s->n_pages = (max_tokens + MREF_PAGE - 1) / MREF_PAGE;
    assert_int_equal(tr_model_kv_alloc(m, s->n_pages, MREF_PAGE, k, v, &s->kv, NULL), TR_OK);
    s->table = malloc(sizeof(int32_t) * (size_t)s->n_pages);
    for (int32_t i = 0; i < s->n_pages; i++) s->table[i] = s->n_pages - 1 - i;
}

static void mseq_init(model *m, mseq *s, int32_t max_tokens) {
    mseq_init_typed(m, s, max_tokens, TR_KV_F16, TR_KV_F16);
}

static void mseq_free(model *m, mseq *s) {
    tr_model_kv_free(m, &s->kv);
    free(s->table);
}

/* tokens[0..n) at positions start.. in chunks; the last one's logits. */
static void mrun(model *m, mseq *s, const int32_t *tok, int32_t n, int32_t start,
                 int32_t chunk, float *out) {
    int32_t max = tr_model_max_batch_tokens(m);
    int32_t *pos = malloc(sizeof(int32_t) * (size_t)max);
    int32_t *seq = calloc((size_t)max, sizeof(int32_t));
    const int32_t *tables[1] = {s->table};
    for (int32_t at = 0; at < n; at += chunk) {
        int32_t c = TR_MIN(chunk, n - at);
        assert_true(c <= max);
        for (int32_t i = 0; i < c; i++) pos[i] = start + at + i;
        tr_batch b = {.n_tokens = c, .pos = pos, .seq = seq, .n_seqs = 1,
                      .page_table = tables, .n_pages = &s->n_pages};
        int32_t row = c - 1;
        bool last = at + c >= n;
        assert_int_equal(tr_model_forward(m, &s->kv, &b, tok + at, &row, last ? 1 : 0, out),
                         TR_OK);
    }
    free(pos);
    free(seq);
}

/* c's prompt in KV pages cut into units (model.h, tr_kv_units), chunk by
 * chunk, each windowed page dropped (its id -1, its bytes 0xff: NaN in
 * F16) as soon as no later position reads it, must give the last logits
 * of full pages (of the same K and V types) bit for bit; a token that would still read a dropped page
 * is refused. Returns the pages dropped (> 0 asserted). On any backend:
 * pages are filled through tr_model_kv_page_copy. */
static inline int32_t mref_units(model *m, const mref_case *c, int32_t chunk,
                                 tr_kv_type tk, tr_kv_type tv) {
    tr_kv_units u;
    tr_model_kv_units(m, true, &u);
    assert_true(u.n > 1);
    const int32_t n = c->n_prompt, V = tr_model_get_hparams(m)->n_vocab, W = u.n;
    float *full = malloc(sizeof(float) * (size_t)V), *split = malloc(sizeof(float) * (size_t)V);
    mseq ref;
    mseq_init_typed(m, &ref, n + 1, tk, tv);
    mrun(m, &ref, c->prompt, n, 0, chunk, full);

    const int32_t slots = ref.n_pages, n_ids = slots * W;
    tr_kv_layout kv;
    assert_int_equal(tr_model_kv_alloc_units(m, n_ids, MREF_PAGE, tk, tv, true, &kv, NULL),
                     TR_OK);
    assert_int_equal(kv.unit_layers, u.layers);
    size_t pb = tr_kv_page_bytes(&kv);
    char *nan = malloc(pb);
    memset(nan, 0xff, pb);
    int32_t *table = malloc(sizeof(int32_t) * (size_t)n_ids);
    for (int32_t i = 0; i < n_ids; i++) table[i] = (int32_t)(((int64_t)i * 7919) % n_ids);
    mseq s = {.kv = kv, .table = table, .n_pages = slots};
    int32_t dropped = 0;
    for (int32_t at = 0; at < n; at += chunk) {
        int32_t k = TR_MIN(chunk, n - at);
        mrun(m, &s, c->prompt + at, k, at, k, split);
        /* the next position is at + k: drop what it no longer reads */
        for (int32_t i = 0; i < W; i++) {
            int32_t first = at + k - u.window[i] + 1;
            for (int32_t slot = 0; u.window[i] && (slot + 1) * MREF_PAGE <= first; slot++) {
                int32_t *id = &table[slot * W + i];
                if (*id < 0) continue;
                assert_int_equal(tr_model_kv_page_copy(m, &kv, *id, nan, true), TR_OK);
                *id = -1;
                dropped++;
            }
        }
    }
    assert_true(dropped > 0);
    assert_memory_equal(full, split, sizeof(float) * (size_t)V);

    /* a token whose window starts in slot 1, which was dropped */
    int32_t win = 0, seq = 0, tok = c->prompt[0], row = 0;
    for (int32_t i = 0; i < W; i++) win = TR_MAX(win, u.window[i]);
    int32_t pos = win + MREF_PAGE - 1;
    assert_true(2 * MREF_PAGE <= n - win + 1 && pos < n);
    const int32_t *tables[1] = {table};
    tr_batch b = {.n_tokens = 1, .pos = &pos, .seq = &seq, .n_seqs = 1,
                  .page_table = tables, .n_pages = &s.n_pages};
    assert_int_equal(tr_model_forward(m, &kv, &b, &tok, &row, 1, split), TR_ERR_INVALID_ARG);
    tr_model_kv_free(m, &kv);
    free(table);
    free(nan);
    mseq_free(m, &ref);
    free(full);
    free(split);
    return dropped;
}

static int32_t mref_argmax(const float *x, int32_t n) {
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

/* The parity checks of the header comment on the first n_cases cases and
 * n_gen steps (fewer under TRELLIS_TEST_SCALE=small). */
static void mref_parity(model *m, const mref *r, const mref_limits *lim, size_t n_cases,
                        int32_t n_gen) {
    const int32_t V = r->n_vocab;
    assert_int_equal(tr_model_get_hparams(m)->n_vocab, V);
    float *lg = malloc(sizeof(float) * (size_t)V);
    int steps = 0, mismatched = 0, diverged = 0;
    double worst_abs = 0, worst_rms = 0, sum_te = 0, sum_le = 0;
    for (size_t ci = 0; ci < n_cases && ci < r->n_cases; ci++) {
        const mref_case *c = &r->c[ci];
        mseq s;
        mseq_init(m, &s, c->n_prompt + n_gen + 1);
        mrun(m, &s, c->prompt, c->n_prompt, 0, tr_model_max_batch_tokens(m), lg);
        double max_abs = 0, sq = 0, sq_te = 0, sq_le = 0;
        for (int32_t k = 0; k < r->n_sub; k++) {
            double t = lg[(size_t)k * r->stride], l = c->logits[k], e = c->exact[k];
            max_abs = fmax(max_abs, fabs(t - l));
            sq += (t - l) * (t - l);
            sq_te += (t - e) * (t - e);
            sq_le += (l - e) * (l - e);
        }
        for (int k = 0; k < MREF_TOP; k++) /* the region sampling reads */
            max_abs = fmax(max_abs, fabs((double)lg[c->top_id[k]] - c->top_val[k]));
        double rms = sqrt(sq / r->n_sub), rms_te = sqrt(sq_te / r->n_sub),
               rms_le = sqrt(sq_le / r->n_sub);
        printf("case %zu: %d tokens, first-step logits vs llama.cpp max|d| %.4f rms %.4f; "
               "vs float64: trellis %.4f, llama.cpp %.4f\n",
               ci, c->n_prompt, max_abs, rms, rms_te, rms_le);
        worst_abs = fmax(worst_abs, max_abs);
        worst_rms = fmax(worst_rms, rms);
        sum_te += rms_te;
        sum_le += rms_le;
        assert_true(max_abs <= lim->max_abs);
        assert_true(rms <= lim->rms);
        /* teacher-forced: each step from llama.cpp's own prefix */
        int32_t p = c->n_prompt, first = -1;
        for (int32_t k = 0; k < n_gen && k < c->n_gen; k++) {
            int32_t tok = mref_argmax(lg, V);
            if (tok != c->gen[k]) {
                printf("  step %d: trellis %d, llama.cpp %d (reference top-2 gap %.4f)\n", k,
                       tok, c->gen[k], c->gap[k]);
                assert_true(c->gap[k] < lim->near_tie);
                mismatched++;
                if (first < 0) first = k;
            }
            steps++;
            mrun(m, &s, &c->gen[k], 1, p++, 1, lg);
        }
        diverged += first >= 0;
        mseq_free(m, &s);
    }
    printf("%zu cases: %d diverge (all at near-ties); teacher-forced steps %d, mismatched %d "
           "(%.1f%%); first-step logits worst max|d| %.4f, worst rms %.4f; mean rms vs "
           "float64: trellis %.4f, llama.cpp %.4f\n",
           TR_MIN(n_cases, r->n_cases), diverged, steps, mismatched,
           100.0 * mismatched / steps, worst_abs, worst_rms, sum_te / (double)n_cases,
           sum_le / (double)n_cases);
    /* aggregates over the whole reference: on the one case and few steps
     * of the small (sanitizer) run they mean nothing */
    if (!small_scale()) {
        assert_true(sum_te <= lim->exact_slack * sum_le);
        assert_true(mismatched * 100 <= lim->max_mismatch_pct * steps);
    }
    free(lg);
}

/* Chunks of each size, and one thread instead of the model's: the bits of
 * one batch. be1: a 1-thread backend's model of the same file. */
static void mref_chunking(model *m, model *m1, const mref_case *c, const int32_t *chunks,
                          size_t n_chunks) {
    const int32_t V = tr_model_get_hparams(m)->n_vocab;
    float *a = malloc(sizeof(float) * (size_t)V), *b = malloc(sizeof(float) * (size_t)V);
    mseq s;
    mseq_init(m, &s, c->n_prompt + 1);
    mrun(m, &s, c->prompt, c->n_prompt, 0, tr_model_max_batch_tokens(m), a);
    for (size_t i = 0; i < n_chunks; i++) {
        mrun(m, &s, c->prompt, c->n_prompt, 0, chunks[i], b);
        if (memcmp(a, b, sizeof(float) * (size_t)V) != 0)
            fail_msg("chunks of %d: logits differ from one batch", chunks[i]);
    }
    mseq_free(m, &s);
    if (m1) {
        mseq_init(m1, &s, c->n_prompt + 1);
        mrun(m1, &s, c->prompt, c->n_prompt, 0, tr_model_max_batch_tokens(m1), b);
        assert_memory_equal(a, b, sizeof(float) * (size_t)V);
        mseq_free(m1, &s);
    }
    free(a);
    free(b);
}

/* Case cb's prompt alone, and as the second sequence of a two-sequence
 * batch beside case ca's (pages interleaved): the same bits. */
static void mref_batch_invariance(model *m, const mref_case *ca, const mref_case *cb) {
    const int32_t V = tr_model_get_hparams(m)->n_vocab, na = ca->n_prompt, nb = cb->n_prompt;
    assert_true(na + nb <= tr_model_max_batch_tokens(m));
    float *alone = malloc(sizeof(float) * (size_t)V);
    float *mixed = malloc(sizeof(float) * 2 * (size_t)V);
    mseq s;
    mseq_init(m, &s, nb);
    mrun(m, &s, cb->prompt, nb, 0, nb, alone);
    mseq_free(m, &s);
    int32_t pa = (na + MREF_PAGE - 1) / MREF_PAGE, pb = (nb + MREF_PAGE - 1) / MREF_PAGE;
    tr_kv_layout kv;
    assert_int_equal(tr_model_kv_alloc(m, pa + pb, MREF_PAGE, TR_KV_F16, TR_KV_F16, &kv, NULL), TR_OK);
    int32_t *ta = malloc(sizeof(int32_t) * (size_t)pa), *tb = malloc(sizeof(int32_t) * (size_t)pb);
    int32_t next = 0;
    for (int32_t i = 0; i < TR_MAX(pa, pb); i++) {
        if (i < pa) ta[i] = next++;
        if (i < pb) tb[i] = next++;
    }
    int32_t n = na + nb;
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)n), *pos = malloc(sizeof(int32_t) * (size_t)n),
            *seq = malloc(sizeof(int32_t) * (size_t)n);
    for (int32_t i = 0; i < na; i++) {
        tok[i] = ca->prompt[i];
        pos[i] = i;
        seq[i] = 0;
    }
    for (int32_t i = 0; i < nb; i++) {
        tok[na + i] = cb->prompt[i];
        pos[na + i] = i;
        seq[na + i] = 1;
    }
    const int32_t *tables[2] = {ta, tb};
    int32_t np[2] = {pa, pb};
    tr_batch b = {.n_tokens = n, .pos = pos, .seq = seq, .n_seqs = 2, .page_table = tables,
                  .n_pages = np};
    int32_t rows[2] = {na - 1, n - 1};
    assert_int_equal(tr_model_forward(m, &kv, &b, tok, rows, 2, mixed), TR_OK);
    assert_memory_equal(alone, mixed + V, sizeof(float) * (size_t)V);
    tr_model_kv_free(m, &kv);
    free(ta);
    free(tb);
    free(tok);
    free(pos);
    free(seq);
    free(alone);
    free(mixed);
}

#endif
