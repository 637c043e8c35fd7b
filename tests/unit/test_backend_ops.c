/* test_backend_ops.c — every op of every backend in the registry, in every
 * kernel set it has, against the reference: the CPU backend's portable
 * kernels on one thread (as llama.cpp's test-backend-ops checks every
 * backend against its CPU backend).
 *
 * Written against kernels/backend.h alone, so that a new backend (CUDA)
 * runs it unchanged: inputs go up with upload, ops run on a stream of
 * their own that waits for the upload stream's event, results come back
 * with download on the upload stream after an event of the op stream
 * (rule 1 and 2 of backend.h), and the reference runs through the very
 * same path. A backend or kernel set this machine cannot run is reported
 * as SKIPPED (cmocka), never passed silently.
 *
 * For each variant (backend, kernel set):
 *   - ops vs the reference on random inputs over a grid of shapes: sizes
 *     around block and tile boundaries, odd counts, GQA ratios, page
 *     sizes, F16 and F32 KV, every weight type the reference computes
 *     with, accumulate on and off, ragged batches of several sequences;
 *     each op within its own normalized error bound (ERR_* below, the why
 *     beside each);
 *   - the determinism contract of backend.h: a row's result is
 *     bit-identical alone or in any batch, on 1 or 3 threads, on any
 *     stream;
 *   - memory and copies: upload/copy/download round trips at offsets,
 *     events and streams of another backend refused.
 * And the registry: every entry creatable where available, unknown names
 * listed in the error.
 *
 * TRELLIS_TEST_SCALE=small (the sanitizer run) takes fewer shapes.
 */
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/unit/harness.h"

#include "base/util.h"
#include "kernels/backend.h"
#include "kernels/cpu/quant_math_internal.h" /* fp16/bf16 conversions for making inputs */
#include "tests/unit/test_env.h"

/* ---- error bounds ----
 * NMSE = sum (got - ref)^2 / sum ref^2 over an op's whole output (as
 * llama.cpp's test-backend-ops). The reference is exact float code, so
 * each bound is what a correct backend may legitimately differ by, far
 * below what a wrong index, block or scale gives (NMSE ~ 1e-2 .. 1).
 *
 * ERR_EXACT: conversions and moves with one right answer (kv_store's F16
 *   rounding is IEEE round-to-nearest-even, add is one IEEE addition,
 *   get_rows and copies move bits): bit-identical.
 * ERR_EMBED 1e-12: dequantization is d*q (+ m): at most one rounding
 *   apart (a fused vs separate multiply-add), relative 6e-8 per element.
 * ERR_ROW 1e-10: rmsnorm, rope, rope_neox, swiglu, geglu, softcap are a
 *   few float operations per element plus a row sum; summation order and
 *   exp/tanh/sin/cos/rsqrt implementations of 1-4 ulp give NMSE ~1e-13
 *   (measured on avx2 vs portable: below 1e-13). rope must follow
 *   backend.h's angle recipe: a theta computed another way differs by
 *   ~1e-2 rad at position 10^5. (add_bias and scale are one IEEE add or
 *   multiply per element: ERR_EXACT.)
 * ERR_ATTN 1e-9: softmax over up to ~1000 positions: exp differs by ulps,
 *   sums in another order; ~1e-12 measured.
 * ERR_MATMUL_FLOAT 1e-6: float weights times float activations; a GPU
 *   may round activations to TF32/FP16 with F32 accumulation (per-element
 *   rounding 2^-11 -> NMSE ~1e-7).
 * ERR_MATMUL_QUANT 2e-4: quantized weights; the reference rounds
 *   activations to 8 bits per block (noise (amax/127)^2/12 per element:
 *   NMSE ~1.6e-5 for uniform inputs over 32-blocks, ~4e-5 over 256-blocks
 *   of Gaussian-like data), and a backend may round them differently or
 *   not at all. One wrong block of a 576-wide row costs ~3e-3. */
#define ERR_EXACT 0.0
#define ERR_EMBED 1e-12
#define ERR_ROW 1e-10
#define ERR_ATTN 1e-9
/* Quantized KV against F32 KV (the same inputs, uniform in [-1, 1]): each
 * stored element is off by at most half a step, d/2 with d = amax / 127
 * (Q8, amax over a head): noise variance d^2/12 against the signal's 1/3,
 * NMSE ~ 3 / (12 * 127^2) = 1.6e-5 per element. Q4's 16 uneven levels
 * (backend.h) have gaps of 12 to 26 hundred-and-twenty-sevenths of amax,
 * 1/8 of it on average, so ~3 / (12 * 8^2) = 3.9e-3, more on uniform
 * inputs (the levels are spaced for Gaussian-like rotated rows, sparse
 * towards the extremes where uniform inputs have as many elements). V's
 * error passes to the output about as is (a weighted mean of noisy rows
 * shrinks it); K's moves the scores by scale * sum q_i e_i and the
 * softmax weights with them, of the same order. Measured over the grid
 * (largest, K and V quantized together, 2026-12-05): Q8 1.9e-5, Q4
 * 1.1e-2 (7.4e-3 with even steps). The bounds allow a few times the
 * estimate per side; a scale or nibble read wrongly, or a V row left
 * rotated, gives NMSE ~0.1 .. 1. */
#define ERR_KV_Q8 1e-4
#define ERR_KV_Q4 3e-2
#define ERR_MATMUL_FLOAT 1e-6
#define ERR_MATMUL_QUANT 2e-4

/* ---- random inputs ---- */

static uint64_t g_rng = 0x243f6a8885a308d3ull;

static uint64_t rng_next(void) {
    uint64_t z = (g_rng += 0x9e3779b97f4a7c15ull); /* splitmix64 */
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static float rnd(float lo, float hi) {
    return lo + (hi - lo) * (float)((rng_next() >> 40) * (1.0 / 16777216.0));
}
static int rnd_int(int n) { return (int)(rng_next() % (uint64_t)n); }
static float *rnd_floats(size_t n, float lo, float hi) {
    float *x = malloc(sizeof(float) * (n ? n : 1));
    assert_non_null(x);
    for (size_t i = 0; i < n; i++) x[i] = rnd(lo, hi);
    return x;
}
static void put_f16(uint8_t *p, float v) {
    uint16_t h = cpu_fp32_to_fp16(v);
    memcpy(p, &h, 2);
}

static size_t row_bytes(tr_dtype t, int64_t cols) {
    uint64_t n = 0;
    assert_true(tr_dtype_row_bytes(t, (uint64_t)cols, &n));
    return (size_t)n;
}

/* A random weight row of any computable type: random quants, sane scales
 * (a dot product with a [-1, 1] activation row stays O(1)). */
static void random_row(tr_dtype t, uint8_t *row, int64_t cols) {
    size_t bytes = row_bytes(t, cols);
    for (size_t i = 0; i < bytes; i++) row[i] = (uint8_t)rng_next();
    if (t == TR_DTYPE_F32 || t == TR_DTYPE_F16 || t == TR_DTYPE_BF16) {
        for (int64_t i = 0; i < cols; i++) {
            float v = rnd(-1, 1) / sqrtf((float)cols) * 4;
            if (t == TR_DTYPE_F32) memcpy(row + 4 * i, &v, 4);
            else if (t == TR_DTYPE_F16) put_f16(row + 2 * i, v);
            else {
                uint16_t h = cpu_fp32_to_bf16(v);
                memcpy(row + 2 * i, &h, 2);
            }
        }
        return;
    }
    int64_t bs = tr_dtype_block_size(t), ts = tr_dtype_type_size(t);
    const float sc = 2.0f / sqrtf((float)cols);
    for (int64_t b = 0; b < cols / bs; b++) {
        uint8_t *blk = row + b * ts;
        switch (t) {
        case TR_DTYPE_Q4_0:
        case TR_DTYPE_Q5_0:
        case TR_DTYPE_Q8_0:
            put_f16(blk, rnd(0.2f, 1.0f) * sc / (t == TR_DTYPE_Q8_0 ? 16 : 1));
            break;
        case TR_DTYPE_Q4_1:
        case TR_DTYPE_Q5_1:
            put_f16(blk, rnd(0.1f, 0.5f) * sc);
            put_f16(blk + 2, rnd(-4, 4) * sc);
            break;
        case TR_DTYPE_Q4_K:
        case TR_DTYPE_Q5_K:
            put_f16(blk, rnd(0.005f, 0.03f) * sc);
            put_f16(blk + 2, rnd(0.005f, 0.03f) * sc);
            break;
        case TR_DTYPE_Q6_K:
            put_f16(blk + 208, rnd(0.0005f, 0.003f) * sc);
            break;
        default:
            fail_msg("random_row: no generator for %s", tr_dtype_name(t));
        }
    }
}

/* ---- a backend under test (and the reference, through the same path) */

typedef struct tb {
    tr_backend *be;
    tr_stream *io, *run; /* copies on io, ops on run */
    tr_event *up, *done; /* io -> run, run -> io */
    char label[64];
} tb;

static bool tb_open(tb *t, const char *name, const char *kernels,
                    int threads) {
    memset(t, 0, sizeof *t);
    tr_diag d = {0};
    tr_backend_config cfg = {.threads = threads, .kernels = kernels};
    tr_status s = tr_backend_new(name, &cfg, &t->be, &d);
    if (s) fail_msg("%s/%s: %s", name, kernels, d.message);
    const tr_backend_ops *o = t->be->ops;
    assert_int_equal(o->stream_new(t->be, &t->io), TR_OK);
    assert_int_equal(o->stream_new(t->be, &t->run), TR_OK);
    assert_int_equal(o->event_new(t->be, &t->up), TR_OK);
    assert_int_equal(o->event_new(t->be, &t->done), TR_OK);
    snprintf(t->label, sizeof t->label, "%s/%s/%dt", name, kernels, threads);
    return true;
}

static void tb_close(tb *t) {
    const tr_backend_ops *o = t->be->ops;
    assert_int_equal(o->synchronize(t->be), TR_OK);
    o->event_free(t->up);
    o->event_free(t->done);
    o->stream_free(t->io);
    o->stream_free(t->run);
    tr_backend_free(t->be);
}

/* Device copy of host bytes: uploaded on io; run waits for it. */
static void *tb_put(tb *t, const void *host, size_t bytes) {
    const tr_backend_ops *o = t->be->ops;
    void *p = NULL;
    assert_int_equal(o->alloc(t->be, bytes ? bytes : 1, &p), TR_OK);
    assert_int_equal(o->upload(t->io, p, host, bytes), TR_OK);
    assert_int_equal(o->event_record(t->up, t->io), TR_OK);
    assert_int_equal(o->stream_wait(t->run, t->up), TR_OK);
    return p;
}

/* Device buffer filled with 0xff bytes (NaN as F32 and F16): an element
 * an op should have written and did not shows. */
static void *tb_nan(tb *t, size_t bytes) {
    uint8_t *h = malloc(bytes ? bytes : 1);
    memset(h, 0xff, bytes);
    void *p = tb_put(t, h, bytes);
    free(h);
    return p;
}

/* Host copy of device bytes written on run: io waits for run, downloads,
 * and the host waits for io. */
static void tb_get(tb *t, void *host, const void *dev, size_t bytes) {
    const tr_backend_ops *o = t->be->ops;
    assert_int_equal(o->event_record(t->done, t->run), TR_OK);
    assert_int_equal(o->stream_wait(t->io, t->done), TR_OK);
    assert_int_equal(o->download(t->io, host, dev, bytes), TR_OK);
    assert_int_equal(o->stream_synchronize(t->io), TR_OK);
}

static float *tb_get_floats(tb *t, const float *dev, size_t n) {
    float *h = malloc(sizeof(float) * (n ? n : 1));
    tb_get(t, h, dev, sizeof(float) * n);
    return h;
}

/* Frees device buffers once every stream is idle (rule 4). */
static void tb_free(tb *t, int n, ...) {
    assert_int_equal(t->be->ops->synchronize(t->be), TR_OK);
    va_list ap;
    va_start(ap, n);
    for (int i = 0; i < n; i++) t->be->ops->free(t->be, va_arg(ap, void *));
    va_end(ap);
}

/* A weight the backend reads: imported (a device backend copies it). */
typedef struct tb_weight {
    tr_weight w;
    void *owned;
} tb_weight;

static tb_weight tb_import(tb *t, const void *host, tr_dtype type,
                           int64_t rows, int64_t cols) {
    tb_weight r = {{NULL, type, rows, cols, 0}, NULL};
    assert_int_equal(t->be->ops->import_weights(t->be, host,
                                                row_bytes(type, cols) * (size_t)rows,
                                                &r.w.data, &r.owned),
                     TR_OK);
    return r;
}

static void tb_unimport(tb *t, tb_weight *w) {
    if (w->owned) tb_free(t, 1, w->owned);
}

/* ---- comparison ---- */

typedef struct worst {
    double nmse[24]; /* per op kind, the largest seen (printed at the end) */
} worst;

enum { K_EMBED, K_RMSNORM, K_MATMUL_F, K_MATMUL_Q, K_ROPE, K_KV, K_ATTN,
       K_SWIGLU, K_ADD, K_ROWS, K_NEOX, K_GEGLU, K_BIAS, K_SCALE, K_SOFTCAP,
       K_ATTN_Q8, K_ATTN_Q4, K_N };
static const char *const k_kind[K_N] = {"embed", "rmsnorm", "matmul(float)",
                                        "matmul(quant)", "rope", "kv_store",
                                        "attention", "swiglu", "add",
                                        "get_rows", "rope_neox", "geglu",
                                        "add_bias", "scale", "softcap",
                                        "attention(q8 KV vs f32)",
                                        "attention(q4 KV vs f32)"};

static double nmse(const float *got, const float *ref, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)got[i] - (double)ref[i];
        num += d * d;
        den += (double)ref[i] * ref[i];
    }
    return den > 0 ? num / den : num;
}

/* got within bound of ref (bound 0: the same bits); NaN fails. */
static void expect_close(worst *w, int kind, const float *got,
                         const float *ref, size_t n, double bound,
                         const char *label, const char *fmt, ...) {
    char what[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    if (bound == ERR_EXACT) {
        for (size_t i = 0; i < n; i++)
            if (memcmp(&got[i], &ref[i], 4) != 0)
                fail_msg("%s %s %s: element %zu is %.9g, reference %.9g (exact op)",
                         label, k_kind[kind], what, i, (double)got[i],
                         (double)ref[i]);
        return;
    }
    double e = nmse(got, ref, n);
    if (!(e <= bound))
        fail_msg("%s %s %s: NMSE %.3g over %zu values exceeds %.1g", label,
                 k_kind[kind], what, e, n, bound);
    if (e > w->nmse[kind]) w->nmse[kind] = e;
}

/* ---- the per-op checks: run on the backend under test and on the
 * reference with the same inputs, compare ---- */

typedef struct pair {
    tb *t, *ref;
    worst *w;
} pair;

static void check_embed(pair *p, tr_dtype type, int64_t dim, int32_t n) {
    const int64_t vocab = 37;
    size_t rb = row_bytes(type, dim);
    uint8_t *table = malloc(rb * vocab);
    for (int64_t r = 0; r < vocab; r++) random_row(type, table + r * rb, dim);
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)n);
    for (int32_t i = 0; i < n; i++) ids[i] = rnd_int((int)vocab);
    if (n > 3) ids[1] = -1, ids[3] = (int32_t)vocab; /* outside: zeros */
    float *out[2];
    tb *side[2] = {p->t, p->ref};
    for (int s = 0; s < 2; s++) {
        tb_weight w = tb_import(side[s], table, type, vocab, dim);
        float *o = tb_nan(side[s], sizeof(float) * (size_t)(n * dim));
        side[s]->be->ops->embed(side[s]->run, o, &w.w, ids, n);
        out[s] = tb_get_floats(side[s], o, (size_t)(n * dim));
        tb_free(side[s], 1, o);
        tb_unimport(side[s], &w);
    }
    expect_close(p->w, K_EMBED, out[0], out[1], (size_t)(n * dim), ERR_EMBED,
                 p->t->label, "%s dim %lld n %d", tr_dtype_name(type),
                 (long long)dim, n);
    if (n > 3)
        for (int64_t j = 0; j < dim; j++)
            assert_true(out[0][dim + j] == 0.0f && out[0][3 * dim + j] == 0.0f);
    free(out[0]);
    free(out[1]);
    free(table);
    free(ids);
}

/* rmsnorm (and in place), rope, swiglu (and in place), add, get_rows. */
static void check_rows(pair *p, int32_t n, int32_t dim) {
    tb *side[2] = {p->t, p->ref};
    const size_t sz = (size_t)n * (size_t)dim;
    float *x = rnd_floats(sz, -3, 3), *wn = rnd_floats((size_t)dim, -2, 2);
    float *g = rnd_floats(sz, -20, 20), *u = rnd_floats(sz, -3, 3);
    const float ext[] = {-100.0f, 100.0f, 0.0f, -87.5f, 88.5f, -1e-30f, 30.0f};
    for (size_t e = 0; e < TR_ARRAY_LEN(ext) && e < sz; e++) g[e] = ext[e];
    int32_t *rows = malloc(sizeof(int32_t) * (size_t)(n + 2));
    for (int32_t i = 0; i < n + 2; i++) rows[i] = rnd_int(n);
    rows[0] = n - 1;
    float *res[2][6];
    for (int s = 0; s < 2; s++) {
        const tr_backend_ops *o = side[s]->be->ops;
        tr_stream *st = side[s]->run;
        float *dx = tb_put(side[s], x, sz * 4), *dw = tb_put(side[s], wn, (size_t)dim * 4);
        float *dg = tb_put(side[s], g, sz * 4), *du = tb_put(side[s], u, sz * 4);
        float *out = tb_nan(side[s], sz * 4);
        o->rmsnorm(st, out, dx, dw, n, dim, 1e-5f);
        res[s][0] = tb_get_floats(side[s], out, sz);
        o->rmsnorm(st, dx, dx, dw, n, dim, 1e-6f); /* in place */
        res[s][1] = tb_get_floats(side[s], dx, sz);
        o->swiglu(st, out, dg, du, (int64_t)sz);
        res[s][2] = tb_get_floats(side[s], out, sz);
        o->swiglu(st, dg, dg, du, (int64_t)sz); /* in place */
        res[s][3] = tb_get_floats(side[s], dg, sz);
        o->add(st, out, du, (int64_t)sz);
        res[s][4] = tb_get_floats(side[s], out, sz);
        res[s][5] = NULL;
        if (o->get_rows) { /* optional: checked where present */
            float *gr = tb_nan(side[s], (size_t)(n + 2) * dim * 4);
            o->get_rows(st, gr, out, dim, rows, n + 2);
            res[s][5] = tb_get_floats(side[s], gr, (size_t)(n + 2) * dim);
            tb_free(side[s], 1, gr);
        }
        tb_free(side[s], 5, dx, dw, dg, du, out);
    }
    const char *l = p->t->label;
    expect_close(p->w, K_RMSNORM, res[0][0], res[1][0], sz, ERR_ROW, l, "n %d dim %d", n, dim);
    expect_close(p->w, K_RMSNORM, res[0][1], res[1][1], sz, ERR_ROW, l, "in place n %d dim %d", n, dim);
    expect_close(p->w, K_SWIGLU, res[0][2], res[1][2], sz, ERR_ROW, l, "n %zu", sz);
    expect_close(p->w, K_SWIGLU, res[0][3], res[1][3], sz, ERR_ROW, l, "in place n %zu", sz);
    /* add's inputs are swiglu's outputs: compare add on the same input */
    for (size_t i = 0; i < sz; i++) {
        float want = res[0][2][i] + u[i];
        if (memcmp(&want, &res[0][4][i], 4) != 0)
            fail_msg("%s add: element %zu is %.9g, want %.9g", l, i,
                     (double)res[0][4][i], (double)want);
    }
    if (res[0][5]) {
        for (int32_t i = 0; i < n + 2; i++)
            expect_close(p->w, K_ROWS, res[0][5] + (size_t)i * dim,
                         res[0][4] + (size_t)rows[i] * dim, (size_t)dim,
                         ERR_EXACT, l, "row %d <- %d", i, rows[i]);
    } else {
        print_message("%s: no get_rows (optional): not checked\n", l);
    }
    for (int s = 0; s < 2; s++)
        for (int k = 0; k < 6; k++) free(res[s][k]);
    free(x);
    free(wn);
    free(g);
    free(u);
    free(rows);
}

/* rope, or with fscale > 0 rope_neox with that freq_scale */
static void check_rope(pair *p, int32_t n, int32_t n_heads, int32_t hd,
                       float base, int32_t max_pos, float fscale) {
    tb *side[2] = {p->t, p->ref};
    size_t sz = (size_t)n * n_heads * hd;
    float *x = rnd_floats(sz, -2, 2);
    int32_t *pos = malloc(sizeof(int32_t) * (size_t)n);
    for (int32_t i = 0; i < n; i++) pos[i] = i == 0 ? 0 : rnd_int(max_pos);
    float *res[2];
    for (int s = 0; s < 2; s++) {
        float *dx = tb_put(side[s], x, sz * 4);
        if (fscale > 0)
            side[s]->be->ops->rope_neox(side[s]->run, dx, n, n_heads, hd, pos, base, fscale);
        else
            side[s]->be->ops->rope(side[s]->run, dx, n, n_heads, hd, pos, base);
        res[s] = tb_get_floats(side[s], dx, sz);
        tb_free(side[s], 1, dx);
    }
    expect_close(p->w, fscale > 0 ? K_NEOX : K_ROPE, res[0], res[1], sz, ERR_ROW,
                 p->t->label, "n %d heads %d hd %d base %g scale %g", n, n_heads, hd,
                 (double)base, (double)fscale);
    /* position 0 is the identity */
    assert_memory_equal(res[0], x, sizeof(float) * (size_t)n_heads * hd);
    free(res[0]);
    free(res[1]);
    free(x);
    free(pos);
}

/* n_mats matrices of the given types sharing cols, n tokens. */
static void check_matmul(pair *p, int n_mats, const tr_dtype *types,
                         const int64_t *rows, int64_t cols, int32_t n,
                         bool accumulate) {
    tb *side[2] = {p->t, p->ref};
    uint8_t *wh[3];
    float *init[3];
    for (int m = 0; m < n_mats; m++) {
        size_t rb = row_bytes(types[m], cols);
        wh[m] = malloc(rb * (size_t)rows[m]);
        for (int64_t r = 0; r < rows[m]; r++) random_row(types[m], wh[m] + r * rb, cols);
        init[m] = rnd_floats((size_t)n * rows[m], -1, 1);
    }
    float *x = rnd_floats((size_t)n * cols, -1, 1);
    float *res[2][3];
    for (int s = 0; s < 2; s++) {
        tb_weight w[3];
        const tr_weight *wp[3];
        float *out[3];
        for (int m = 0; m < n_mats; m++) {
            w[m] = tb_import(side[s], wh[m], types[m], rows[m], cols);
            wp[m] = &w[m].w;
            out[m] = tb_put(side[s], init[m], sizeof(float) * (size_t)n * rows[m]);
        }
        float *dx = tb_put(side[s], x, sizeof(float) * (size_t)n * cols);
        side[s]->be->ops->matmul(side[s]->run, n_mats, out, wp, dx, n, accumulate);
        for (int m = 0; m < n_mats; m++) {
            res[s][m] = tb_get_floats(side[s], out[m], (size_t)n * rows[m]);
            tb_free(side[s], 1, out[m]);
            tb_unimport(side[s], &w[m]);
        }
        tb_free(side[s], 1, dx);
    }
    for (int m = 0; m < n_mats; m++) {
        bool fl = types[m] == TR_DTYPE_F32 || types[m] == TR_DTYPE_F16 ||
                  types[m] == TR_DTYPE_BF16;
        if (accumulate) /* compare the products, not the added init */
            for (size_t i = 0; i < (size_t)n * rows[m]; i++) {
                res[0][m][i] -= init[m][i];
                res[1][m][i] -= init[m][i];
            }
        expect_close(p->w, fl ? K_MATMUL_F : K_MATMUL_Q, res[0][m], res[1][m],
                     (size_t)n * rows[m], fl ? ERR_MATMUL_FLOAT : ERR_MATMUL_QUANT,
                     p->t->label, "%s [%lld x %lld] x %d tokens (mat %d of %d, acc %d)",
                     tr_dtype_name(types[m]), (long long)rows[m], (long long)cols, n, m,
                     n_mats, accumulate);
        free(res[0][m]);
        free(res[1][m]);
        free(wh[m]);
        free(init[m]);
    }
    free(x);
}

/* ---- paged KV worlds: kv_store + attention ---- */

/* The bound one quantized side (K or V) adds (0: exact types). */
static double kv_quant_err(tr_kv_type t) {
    return t == TR_KV_Q8 ? ERR_KV_Q8 : t == TR_KV_Q4 ? ERR_KV_Q4 : 0.0;
}

enum { MAX_SEQ = 5, MAX_TOK = 1024 };

/* Sequences with their K/V, page tables into a shared paged memory (a
 * random permutation of pages, spares included), and a ragged batch: the
 * tokens [from, len) of each sequence, shuffled. Positions before `from`
 * are stored by a first kv_store (a cached prefix). */
typedef struct world {
    int n_seqs, len[MAX_SEQ], from[MAX_SEQ];
    int n_heads, n_kv, hd, n_layers, layer, page_size;
    tr_kv_type tk, tv; /* K and V formats */
    float scale;
    float *k, *v;   /* [n_all][kv_dim]: every position of every sequence */
    int32_t all_pos[MAX_TOK * MAX_SEQ], all_seq[MAX_TOK * MAX_SEQ], n_all;
    int32_t pre_pos[MAX_TOK * MAX_SEQ], pre_seq[MAX_TOK * MAX_SEQ], n_pre;
    int32_t bat_pos[MAX_TOK], bat_seq[MAX_TOK], n_bat;
    float *q;       /* [n_bat][n_heads * hd] */
    int32_t *pt[MAX_SEQ], npages[MAX_SEQ], total_pages;
    int window;          /* layer `layer`'s sliding window, 0: none */
    int32_t windows[2];  /* per layer (n_layers <= 2), for the layout */
    bool in_order;       /* batch not shuffled: each sequence's tokens
                            adjacent, as the engine lays out a prefill
                            chunk (the CPU attention's tiles) */
} world;

/* What tr_kv_layout.window points at (NULL without a window). */
static const int32_t *world_windows(const world *w) {
    return w->window ? w->windows : NULL;
}

static size_t w_kvd(const world *w) { return (size_t)w->n_kv * w->hd; }
static tr_kv_layout world_layout(const world *w, void *mem) {
    return (tr_kv_layout){mem, w->total_pages, w->n_layers, w->page_size, w->n_kv,
                          w->hd, w->tk, w->tv, world_windows(w), 0, NULL};
}
static size_t w_mem(const world *w) {
    tr_kv_layout kv = world_layout(w, NULL);
    return (size_t)w->total_pages * tr_kv_page_bytes(&kv);
}

static void world_build(world *w) {
    assert_true(w->n_layers <= 2 && w->layer < w->n_layers);
    w->windows[0] = w->windows[1] = 0;
    w->windows[w->layer] = w->window;
    w->n_all = w->n_pre = w->n_bat = 0;
    w->total_pages = 3; /* spares nobody uses */
    for (int s = 0; s < w->n_seqs; s++) {
        assert_true(w->len[s] <= MAX_TOK && w->from[s] < w->len[s]);
        for (int p = 0; p < w->len[s]; p++) {
            w->all_pos[w->n_all] = p;
            w->all_seq[w->n_all++] = s;
            if (p < w->from[s]) {
                w->pre_pos[w->n_pre] = p;
                w->pre_seq[w->n_pre++] = s;
            } else {
                assert_true(w->n_bat < MAX_TOK);
                w->bat_pos[w->n_bat] = p;
                w->bat_seq[w->n_bat++] = s;
            }
        }
        w->npages[s] = (w->len[s] + w->page_size - 1) / w->page_size;
        w->total_pages += w->npages[s];
    }
    for (int i = w->in_order ? 0 : w->n_bat - 1; i > 0; i--) { /* shuffle the batch */
        int j = rnd_int(i + 1);
        int32_t a = w->bat_pos[i], b = w->bat_seq[i];
        w->bat_pos[i] = w->bat_pos[j], w->bat_seq[i] = w->bat_seq[j];
        w->bat_pos[j] = a, w->bat_seq[j] = b;
    }
    w->k = rnd_floats((size_t)w->n_all * w_kvd(w), -1, 1);
    w->v = rnd_floats((size_t)w->n_all * w_kvd(w), -1, 1);
    w->q = rnd_floats((size_t)w->n_bat * w->n_heads * w->hd, -1, 1);
    int32_t *perm = malloc(sizeof(int32_t) * (size_t)w->total_pages);
    for (int i = 0; i < w->total_pages; i++) perm[i] = i;
    for (int i = w->total_pages - 1; i > 0; i--) {
        int j = rnd_int(i + 1);
        int32_t t = perm[i];
        perm[i] = perm[j], perm[j] = t;
    }
    int next = 0;
    for (int s = 0; s < w->n_seqs; s++) {
        w->pt[s] = malloc(sizeof(int32_t) * (size_t)(w->npages[s] + 1));
        for (int i = 0; i < w->npages[s]; i++) w->pt[s][i] = perm[next++];
    }
    free(perm);
}

static void world_free(world *w) {
    free(w->k);
    free(w->v);
    free(w->q);
    for (int s = 0; s < w->n_seqs; s++) free(w->pt[s]);
}

static tr_batch world_batch(const world *w, int n, const int32_t *pos,
                            const int32_t *seq) {
    return (tr_batch){n, pos, seq, w->n_seqs, (const int32_t *const *)w->pt,
                      w->npages};
}

/* Rows idx[0..n) of src[.][dim], gathered. */
static float *gather(const float *src, const int32_t *idx, int n, size_t dim) {
    float *o = malloc(sizeof(float) * (size_t)n * dim + 4);
    for (int i = 0; i < n; i++) memcpy(o + i * dim, src + idx[i] * dim, dim * 4);
    return o;
}

/* Stores the prefix, then (as the model does) the batch's own K/V, then
 * runs attention; returns the KV memory and the attention output. */
static void world_run(const world *w, tb *t, uint8_t **kv_out, float **att_out,
                      const int32_t *bat_pos, const int32_t *bat_seq,
                      const float *q, int n_bat, void *mem) {
    const tr_backend_ops *o = t->be->ops;
    size_t kvd = w_kvd(w);
    tr_kv_layout kv = world_layout(w, mem);
    if (w->n_pre) {
        int32_t *idx = malloc(sizeof(int32_t) * (size_t)w->n_pre);
        for (int i = 0, a = 0; a < w->n_all; a++)
            if (w->all_pos[a] < w->from[w->all_seq[a]]) idx[i++] = a;
        float *pk = gather(w->k, idx, w->n_pre, kvd), *pv = gather(w->v, idx, w->n_pre, kvd);
        float *dk = tb_put(t, pk, (size_t)w->n_pre * kvd * 4);
        float *dv = tb_put(t, pv, (size_t)w->n_pre * kvd * 4);
        tr_batch pre = world_batch(w, w->n_pre, w->pre_pos, w->pre_seq);
        o->kv_store(t->run, &kv, w->layer, dk, dv, &pre);
        tb_free(t, 2, dk, dv);
        free(pk);
        free(pv);
        free(idx);
    }
    tr_batch b = world_batch(w, n_bat, bat_pos, bat_seq);
    int32_t *idx = malloc(sizeof(int32_t) * (size_t)n_bat);
    for (int i = 0; i < n_bat; i++) {
        idx[i] = -1;
        for (int a = 0; a < w->n_all; a++)
            if (w->all_seq[a] == bat_seq[i] && w->all_pos[a] == bat_pos[i]) idx[i] = a;
    }
    float *bk = gather(w->k, idx, n_bat, kvd), *bv = gather(w->v, idx, n_bat, kvd);
    float *dk = tb_put(t, bk, (size_t)n_bat * kvd * 4);
    float *dv = tb_put(t, bv, (size_t)n_bat * kvd * 4);
    size_t row = (size_t)w->n_heads * w->hd;
    float *dq = tb_put(t, q, (size_t)n_bat * row * 4);
    float *dout = tb_nan(t, (size_t)n_bat * row * 4);
    o->kv_store(t->run, &kv, w->layer, dk, dv, &b);
    o->attention(t->run, dout, dq, &kv, w->layer, &b, w->n_heads, w->scale);
    if (att_out) *att_out = tb_get_floats(t, dout, (size_t)n_bat * row);
    if (kv_out) {
        *kv_out = malloc(w_mem(w));
        tb_get(t, *kv_out, mem, w_mem(w));
    }
    tb_free(t, 4, dk, dv, dq, dout);
    free(bk);
    free(bv);
    free(idx);
}

/* The quantization's own error, against the same world on F32 KV (the
 * reference), within the type's bound (ERR_KV_*). */
static void check_attention_vs_f32(pair *p, const world *w, const float *att,
                                   double bound, const char *shape) {
    world f = *w;
    f.tk = f.tv = TR_KV_F32;
    void *mem = tb_nan(p->ref, w_mem(&f));
    float *exact;
    world_run(&f, p->ref, NULL, &exact, f.bat_pos, f.bat_seq, f.q, f.n_bat, mem);
    tb_free(p->ref, 1, mem);
    int kind = w->tk == TR_KV_Q4 || w->tv == TR_KV_Q4 ? K_ATTN_Q4 : K_ATTN_Q8;
    expect_close(p->w, kind, att, exact, (size_t)w->n_bat * w->n_heads * w->hd, bound,
                 p->t->label, "%s against F32 KV", shape);
    free(exact);
}

static void check_attention(pair *p, world *w) {
    world_build(w);
    tb *side[2] = {p->t, p->ref};
    uint8_t *kv[2];
    float *att[2];
    for (int s = 0; s < 2; s++) {
        void *mem = tb_nan(side[s], w_mem(w));
        world_run(w, side[s], &kv[s], &att[s], w->bat_pos, w->bat_seq, w->q, w->n_bat, mem);
        tb_free(side[s], 1, mem);
    }
    const char *l = p->t->label;
    char shape[128];
    snprintf(shape, sizeof shape,
             "%d/%d heads hd %d page %d K %s V %s, %d seqs, %d tokens, window %d", w->n_heads,
             w->n_kv, w->hd, w->page_size, tr_kv_type_name(w->tk), tr_kv_type_name(w->tv),
             w->n_seqs, w->n_bat, w->window);
    /* every byte of the KV memory, untouched rows (0xff) included */
    if (memcmp(kv[0], kv[1], w_mem(w)) != 0)
        fail_msg("%s kv_store %s: KV memory differs from the reference (exact op)", l,
                 shape);
    expect_close(p->w, K_ATTN, att[0], att[1], (size_t)w->n_bat * w->n_heads * w->hd,
                 ERR_ATTN, l, "%s", shape);
    double qerr = kv_quant_err(w->tk) + kv_quant_err(w->tv);
    if (qerr > 0) check_attention_vs_f32(p, w, att[0], qerr, shape);
    for (int s = 0; s < 2; s++) {
        free(kv[s]);
        free(att[s]);
    }
}

/* ---- the grids ---- */

static const tr_dtype k_types[] = {
    TR_DTYPE_F32,  TR_DTYPE_F16,  TR_DTYPE_BF16, TR_DTYPE_Q4_0,
    TR_DTYPE_Q4_1, TR_DTYPE_Q5_0, TR_DTYPE_Q5_1, TR_DTYPE_Q8_0,
    TR_DTYPE_Q4_K, TR_DTYPE_Q5_K, TR_DTYPE_Q6_K,
};

/* Weight types the reference computes with that the backend lacks are
 * reported, not silently dropped. */
static bool type_checked(pair *p, tr_dtype t) {
    if (!p->ref->be->ops->supports(p->ref->be, TR_BACKEND_CAP_WEIGHT, t))
        fail_msg("the reference lacks %s: add it to the grid's list only "
                 "if the CPU computes it", tr_dtype_name(t));
    if (p->t->be->ops->supports(p->t->be, TR_BACKEND_CAP_WEIGHT, t)) return true;
    print_message("%s: weight type %s not supported: not checked\n", p->t->label,
                  tr_dtype_name(t));
    return false;
}

static void grid_embed(pair *p) {
    for (size_t ti = 0; ti < TR_ARRAY_LEN(k_types); ti++) {
        tr_dtype t = k_types[ti];
        if (!type_checked(p, t)) continue;
        bool k = tr_dtype_block_size(t) == 256;
        check_embed(p, t, k ? 256 : 96, 1);
        check_embed(p, t, k ? 768 : 576, 9);
    }
}

/* geglu (and in place), add_bias, mul_cols, scale, softcap. */
static void check_rows_ext(pair *p, int32_t n, int32_t dim) {
    tb *side[2] = {p->t, p->ref};
    const size_t sz = (size_t)n * (size_t)dim;
    float *g = rnd_floats(sz, -12, 12), *u = rnd_floats(sz, -3, 3);
    float *b = rnd_floats((size_t)dim, -2, 2), *x = rnd_floats(sz, -60, 60);
    const float ext[] = {-100.0f, 100.0f, 0.0f, -30.0f, 30.0f, -1e-30f, 5.0f};
    for (size_t e = 0; e < TR_ARRAY_LEN(ext) && e < sz; e++) g[e] = ext[e];
    float *res[2][6];
    for (int s = 0; s < 2; s++) {
        const tr_backend_ops *o = side[s]->be->ops;
        tr_stream *st = side[s]->run;
        float *dg = tb_put(side[s], g, sz * 4), *du = tb_put(side[s], u, sz * 4);
        float *db = tb_put(side[s], b, (size_t)dim * 4), *dx = tb_put(side[s], x, sz * 4);
        float *out = tb_nan(side[s], sz * 4);
        o->geglu(st, out, dg, du, (int64_t)sz);
        res[s][0] = tb_get_floats(side[s], out, sz);
        o->geglu(st, dg, dg, du, (int64_t)sz); /* in place */
        res[s][1] = tb_get_floats(side[s], dg, sz);
        o->add_bias(st, out, db, n, dim);
        res[s][2] = tb_get_floats(side[s], out, sz);
        o->scale(st, dx, 25.298221f, (int64_t)sz);
        res[s][3] = tb_get_floats(side[s], dx, sz);
        o->softcap(st, dx, 30.0f, (int64_t)sz);
        res[s][4] = tb_get_floats(side[s], dx, sz);
        o->mul_cols(st, out, db, n, dim);
        res[s][5] = tb_get_floats(side[s], out, sz);
        tb_free(side[s], 5, dg, du, db, dx, out);
    }
    const char *l = p->t->label;
    expect_close(p->w, K_GEGLU, res[0][0], res[1][0], sz, ERR_ROW, l, "n %zu", sz);
    expect_close(p->w, K_GEGLU, res[0][1], res[1][1], sz, ERR_ROW, l, "in place n %zu", sz);
    /* add_bias, scale and mul_cols on the backend's own inputs: one IEEE
     * op each */
    for (size_t i = 0; i < sz; i++) {
        float want = res[0][0][i] + b[i % (size_t)dim], sc = x[i] * 25.298221f;
        float mul = res[0][2][i] * b[i % (size_t)dim];
        if (memcmp(&want, &res[0][2][i], 4) != 0 || memcmp(&sc, &res[0][3][i], 4) != 0 ||
            memcmp(&mul, &res[0][5][i], 4) != 0)
            fail_msg("%s add_bias/scale/mul_cols: element %zu differs (exact ops)", l, i);
    }
    expect_close(p->w, K_SOFTCAP, res[0][4], res[1][4], sz, ERR_ROW, l, "n %zu", sz);
    for (int s = 0; s < 2; s++)
        for (int k = 0; k < 6; k++) free(res[s][k]);
    free(g);
    free(u);
    free(b);
    free(x);
}

static void grid_rows(pair *p) {
    const int32_t dims[] = {1, 7, 8, 64, 576, 1000};
    const int32_t ns[] = {1, 5, 33};
    for (size_t d = 0; d < TR_ARRAY_LEN(dims); d++)
        for (size_t i = 0; i < TR_ARRAY_LEN(ns); i++) {
            if (small_scale() && (d + i) % 3) continue;
            check_rows(p, ns[i], dims[d]);
            check_rows_ext(p, ns[i], dims[d]);
        }
}

static void grid_rope(pair *p) {
    for (int neox = 0; neox < 2; neox++) {
        float fs = neox ? 1.0f : 0.0f;
        check_rope(p, 1, 9, 64, 100000.0f, 100000, fs);
        check_rope(p, 7, 3, 64, 10000.0f, 5000, fs);
        check_rope(p, 40, 2, 6, 10000.0f, 100000, fs);
        check_rope(p, 3, 1, 2, 500000.0f, 4096, fs);
        check_rope(p, 5, 4, 256, 1000000.0f, 32768, fs);
        if (!small_scale()) check_rope(p, 65, 9, 128, 10000.0f, 100000, fs);
    }
    check_rope(p, 9, 2, 128, 1000000.0f, 32768, 0.125f); /* linear scaling x8 */
}


static void grid_matmul(pair *p) {
    /* rows around the row tiles (16; 8 for K-quants), tokens around the
     * token tile (64), cols over 1 and several blocks */
    typedef struct { int64_t rows; int32_t n; int cols_mul; } shp;
    const shp shapes[] = {{1, 1, 1},  {16, 1, 3},  {17, 2, 2},  {15, 63, 1},
                          {33, 64, 2}, {8, 65, 1},  {100, 7, 6}, {37, 21, 24}};
    for (size_t ti = 0; ti < TR_ARRAY_LEN(k_types); ti++) {
        tr_dtype t = k_types[ti];
        if (!type_checked(p, t)) continue;
        int64_t bs = tr_dtype_block_size(t) == 256 ? 256 : 32;
        for (size_t si = 0; si < TR_ARRAY_LEN(shapes); si++) {
            if (small_scale() && si % 2) continue;
            int64_t cols = bs * shapes[si].cols_mul * (bs == 32 ? 3 : 1);
            check_matmul(p, 1, &t, &shapes[si].rows, cols, shapes[si].n, si % 2);
        }
    }
    /* fused: several matrices of mixed types on one activation */
    const tr_dtype mixes[][3] = {
        {TR_DTYPE_Q4_1, TR_DTYPE_Q4_1, TR_DTYPE_Q4_1},
        {TR_DTYPE_Q4_0, TR_DTYPE_Q8_0, TR_DTYPE_F16},
        {TR_DTYPE_Q4_K, TR_DTYPE_Q6_K, TR_DTYPE_BF16},
        {TR_DTYPE_Q5_0, TR_DTYPE_Q5_K, TR_DTYPE_F32},
    };
    const int64_t rows[3] = {40, 24, 17};
    for (size_t mi = 0; mi < TR_ARRAY_LEN(mixes); mi++) {
        bool ok = true;
        for (int m = 0; m < 3; m++) ok = ok && type_checked(p, mixes[mi][m]);
        if (!ok) continue;
        for (int acc = 0; acc < 2; acc++) {
            check_matmul(p, 3, mixes[mi], rows, 512, 5, acc);
            check_matmul(p, 2, mixes[mi], rows, 256, 70, acc);
        }
    }
}

/* The KV formats the grid runs: K and V alike, then mixed. */
static const tr_kv_type k_kv_types[][2] = {
    {TR_KV_F32, TR_KV_F32}, {TR_KV_F16, TR_KV_F16}, {TR_KV_Q8, TR_KV_Q8},
    {TR_KV_Q4, TR_KV_Q4},   {TR_KV_Q8, TR_KV_F16},  {TR_KV_F16, TR_KV_Q4},
};

/* Whether p's backend takes the world's KV types (a note when not), and
 * whether the types can hold its heads (Q4: head_dim % 32). */
static bool kv_types_ok(pair *p, const world *w) {
    if (!tr_kv_head_bytes(w->tk, w->hd) || !tr_kv_head_bytes(w->tv, w->hd)) return false;
    if (p->t->be->ops->supports_kv(p->t->be, w->tk, w->tv)) return true;
    print_message("%s: KV types K %s V %s not supported: not checked\n", p->t->label,
                  tr_kv_type_name(w->tk), tr_kv_type_name(w->tv));
    return false;
}

static void grid_attention(pair *p) {
    typedef struct { int nh, nkv, hd; } hs;
    const hs heads[] = {{9, 3, 64}, {4, 4, 20}, {8, 2, 128}, {6, 1, 32}};
    const int pages[] = {1, 7, 16};
    const int n_types = (int)TR_ARRAY_LEN(k_kv_types);
    int c = 0;
    for (size_t hi = 0; hi < TR_ARRAY_LEN(heads); hi++)
        for (size_t pi = 0; pi < TR_ARRAY_LEN(pages); pi++)
            for (int ti = 0; ti < n_types; ti++, c++) {
                if (small_scale() && c % 3) continue;
                /* the quantized types on half the shapes: their kernels
                 * are the F16 ones' with another load */
                if (ti >= 2 && (c + (int)hi) % 2) continue;
                tr_kv_type tk = k_kv_types[ti][0], tv = k_kv_types[ti][1];
                /* (a decode step of three sequences: the split
                 * schedule over several tokens) */
                if (c % 4 == 1) {
                    world d = {.n_seqs = 3, .len = {400, 130, 65}, .from = {399, 129, 64},
                               .n_heads = heads[hi].nh, .n_kv = heads[hi].nkv,
                               .hd = heads[hi].hd, .n_layers = 2, .layer = 1,
                               .page_size = pages[pi], .tk = tk, .tv = tv,
                               .scale = 1.0f / sqrtf((float)heads[hi].hd)};
                    if (kv_types_ok(p, &d)) {
                        check_attention(p, &d);
                        world_free(&d);
                    }
                }
                /* a one-token prompt; a decode at 399 (past several 64-
                 * position blocks); a prefill chunk 100..149 after a
                 * cached prefix; decodes at exactly 64 and 129; a second
                 * fresh prompt */
                world w = {.n_seqs = 5, .len = {1, 400, 150, 65, 37},
                           .from = {0, 399, 100, 64, 0},
                           .n_heads = heads[hi].nh, .n_kv = heads[hi].nkv,
                           .hd = heads[hi].hd, .n_layers = 2, .layer = 1,
                           .page_size = pages[pi], .tk = tk, .tv = tv};
                if (c % 2) w.len[3] = 130, w.from[3] = 129;
                w.in_order = c % 4 >= 2;
                w.scale = 1.0f / sqrtf((float)w.hd) * (ti % 2 ? 3.0f : 1.0f);
                if (!kv_types_ok(p, &w)) continue;
                check_attention(p, &w);
                world_free(&w);
            }
    /* sliding-window layers (Gemma 3's local layers: 4 heads over one KV
     * head of 256): windows of one position, one block, across blocks */
    const int windows[] = {1, 64, 100};
    for (size_t wi = 0; wi < TR_ARRAY_LEN(windows); wi++)
        for (int pi = 0; pi < 2; pi++) {
            if (small_scale() && (wi + (size_t)pi) % 2) continue;
            world w = {.n_seqs = 3, .len = {400, 150, 301}, .from = {399, 100, 0},
                       .n_heads = 4, .n_kv = 1, .hd = 256, .n_layers = 2, .layer = 1,
                       .page_size = pi ? 16 : 7, .tk = TR_KV_F16, .tv = TR_KV_F16,
                       .window = windows[wi]};
            if (wi == 1) w.tk = w.tv = pi ? TR_KV_Q8 : TR_KV_Q4;
            w.scale = 0.0625f;
            if (!kv_types_ok(p, &w)) continue;
            check_attention(p, &w);
            world_free(&w);
        }
}

/* ---- determinism: bit-identical alone, in a batch, on 1 or 3 threads,
 * on another stream ---- */

/* Three matrices of `types` on one activation (mixed activation forms:
 * the CUDA backend rounds x into two layouts in one call); 70 tokens
 * against 1 (the CUDA backend's tensor-core and warp-per-row kernels). */
static void determinism_matmul_types(tb *a, tb *b, const tr_dtype types[3], int64_t cols) {
    const int64_t rows[3] = {48, 33, 16};
    const int32_t n = 70;
    uint8_t *wh[3];
    for (int m = 0; m < 3; m++) {
        size_t rb = row_bytes(types[m], cols);
        wh[m] = malloc(rb * (size_t)rows[m]);
        for (int64_t r = 0; r < rows[m]; r++) random_row(types[m], wh[m] + r * rb, cols);
    }
    float *x = rnd_floats((size_t)n * cols, -1, 1);
    float *first[3] = {NULL, NULL, NULL};
    tb *side[2] = {a, b};
    for (int s = 0; s < 2; s++) {
        tb *t = side[s];
        tb_weight w[3];
        const tr_weight *wp[3];
        float *out[3];
        for (int m = 0; m < 3; m++) {
            w[m] = tb_import(t, wh[m], types[m], rows[m], cols);
            wp[m] = &w[m].w;
            out[m] = tb_nan(t, sizeof(float) * (size_t)n * rows[m]);
        }
        float *dx = tb_put(t, x, sizeof(float) * (size_t)n * cols);
        t->be->ops->matmul(t->run, 3, out, wp, dx, n, false);
        float *all[3];
        for (int m = 0; m < 3; m++) all[m] = tb_get_floats(t, out[m], (size_t)n * rows[m]);
        /* every 7th token alone, on the default stream */
        for (int32_t tok = 0; tok < n; tok += 7) {
            float *one[3];
            for (int m = 0; m < 3; m++) one[m] = tb_nan(t, sizeof(float) * rows[m]);
            assert_int_equal(t->be->ops->synchronize(t->be), TR_OK);
            t->be->ops->matmul(t->be->stream, 3, one, wp, dx + (size_t)tok * cols, 1, false);
            assert_int_equal(t->be->ops->stream_synchronize(t->be->stream), TR_OK);
            for (int m = 0; m < 3; m++) {
                float *h = tb_get_floats(t, one[m], (size_t)rows[m]);
                if (memcmp(h, all[m] + (size_t)tok * rows[m], sizeof(float) * rows[m]))
                    fail_msg("%s matmul: token %d alone differs from the batch", t->label, tok);
                free(h);
                tb_free(t, 1, one[m]);
            }
        }
        for (int m = 0; m < 3; m++) {
            if (s == 0) first[m] = all[m];
            else {
                if (memcmp(all[m], first[m], sizeof(float) * (size_t)n * rows[m]))
                    fail_msg("matmul: %s and %s differ (threads)", a->label, b->label);
                free(all[m]);
            }
            tb_free(t, 1, out[m]);
            tb_unimport(t, &w[m]);
        }
        tb_free(t, 1, dx);
    }
    for (int m = 0; m < 3; m++) {
        free(first[m]);
        free(wh[m]);
    }
    free(x);
}

static void determinism_matmul(tb *a, tb *b) {
    const tr_dtype sets[][3] = {{TR_DTYPE_Q4_1, TR_DTYPE_Q6_K, TR_DTYPE_F16},
                                {TR_DTYPE_Q4_K, TR_DTYPE_Q5_K, TR_DTYPE_Q8_0}};
    for (size_t i = 0; i < TR_ARRAY_LEN(sets); i++) determinism_matmul_types(a, b, sets[i], 256);
    /* rows of more than 32 32-blocks (72): the CUDA kernels' sums per
     * lane or warp take several blocks each */
    const tr_dtype wide[][3] = {{TR_DTYPE_Q5_0, TR_DTYPE_Q4_0, TR_DTYPE_Q5_1},
                                {TR_DTYPE_Q4_1, TR_DTYPE_Q8_0, TR_DTYPE_Q6_K}};
    for (size_t i = 0; i < TR_ARRAY_LEN(wide); i++) determinism_matmul_types(a, b, wide[i], 2304);
}

/* matmul_rows (OPTIONAL) stores bitwise what matmul stores for the listed
 * rows, in any order, and writes no other element. */
static void check_matmul_rows_case(tb *t, tr_dtype type, int64_t rows,
                                   int64_t cols, int32_t n, const int32_t *ids,
                                   int32_t n_ids) {
    const tr_backend_ops *o = t->be->ops;
    size_t rb = row_bytes(type, cols), nout = (size_t)n * (size_t)rows;
    uint8_t *wh = malloc(rb * (size_t)rows);
    for (int64_t r = 0; r < rows; r++) random_row(type, wh + r * rb, cols);
    float *x = rnd_floats((size_t)n * cols, -1, 1);
    tb_weight w = tb_import(t, wh, type, rows, cols);
    const tr_weight *wp[1] = {&w.w};
    float *dx = tb_put(t, x, sizeof(float) * (size_t)n * cols);
    float *full[1] = {tb_nan(t, sizeof(float) * nout)};
    float *part = tb_nan(t, sizeof(float) * nout);
    o->matmul(t->run, 1, full, wp, dx, n, false);
    o->matmul_rows(t->run, part, &w.w, dx, n, ids, n_ids);
    float *hf = tb_get_floats(t, full[0], nout), *hp = tb_get_floats(t, part, nout);
    bool *listed = calloc((size_t)rows, sizeof *listed);
    for (int32_t j = 0; j < n_ids; j++) listed[ids[j]] = true;
    for (int32_t tok = 0; tok < n; tok++)
        for (int64_t r = 0; r < rows; r++) {
            size_t i = (size_t)tok * (size_t)rows + (size_t)r;
            uint32_t bits;
            memcpy(&bits, &hp[i], sizeof bits);
            if (listed[r] && memcmp(&hp[i], &hf[i], sizeof(float)))
                fail_msg("%s matmul_rows %s: token %d row %lld: %g, matmul %g",
                         t->label, tr_dtype_name(type), tok, (long long)r,
                         (double)hp[i], (double)hf[i]);
            if (!listed[r] && bits != 0xffffffffu)
                fail_msg("%s matmul_rows %s: wrote unlisted row %lld", t->label,
                         tr_dtype_name(type), (long long)r);
        }
    free(listed);
    free(hf);
    free(hp);
    tb_free(t, 3, dx, full[0], part);
    tb_unimport(t, &w);
    free(wh);
    free(x);
}

static void determinism_matmul_rows(tb *t) {
    if (!t->be->ops->matmul_rows) return; /* OPTIONAL */
    const tr_dtype types[] = {TR_DTYPE_Q8_0, TR_DTYPE_Q4_1, TR_DTYPE_Q6_K,
                              TR_DTYPE_Q4_K, TR_DTYPE_Q5_K, TR_DTYPE_F16, TR_DTYPE_F32};
    const int64_t rows = 301, cols = 256;
    int32_t ids[301];
    for (size_t k = 0; k < TR_ARRAY_LEN(types); k++) {
        /* a few scattered rows (the first and last among them), unsorted */
        int32_t few[] = {300, 0, 17, 18, 19, 133, 64, 250, 5};
        check_matmul_rows_case(t, types[k], rows, cols, 1, few, 9);
        check_matmul_rows_case(t, types[k], rows, cols, 3, few, 9);
        /* every third row for 40 tokens: enough work for every thread */
        int32_t n_ids = 0;
        for (int32_t r = 2; r < rows; r += 3) ids[n_ids++] = r;
        check_matmul_rows_case(t, types[k], rows, cols, 40, ids, n_ids);
        /* every row, and none */
        for (int32_t r = 0; r < rows; r++) ids[r] = (int32_t)(rows - 1 - r);
        check_matmul_rows_case(t, types[k], rows, cols, 2, ids, (int32_t)rows);
        check_matmul_rows_case(t, types[k], rows, cols, 2, ids, 0);
    }
}

/* prepare_matmul_weights (OPTIONAL): matmul, matmul_rows and embed over
 * the prepared copies store bitwise what they store over the row-major
 * matrices; matrices in one call get distinct copies; a matrix the
 * backend keeps (a type or a row count it does not repack) comes back as
 * it was. */
static void count_copied(void *ctx, int32_t i) { ((int32_t *)ctx)[i]++; }

static void determinism_prepared(tb *t) {
    const tr_backend_ops *o = t->be->ops;
    if (!o->prepare_matmul_weights) return;
    enum { NM = 7 };
    const tr_dtype types[NM] = {TR_DTYPE_Q4_1, TR_DTYPE_Q8_0, TR_DTYPE_Q4_0, TR_DTYPE_Q4_K,
                                TR_DTYPE_Q8_0, TR_DTYPE_Q5_0, TR_DTYPE_Q5_1};
    const int64_t rows[NM] = {320, 48, 64, 64, 301, 48, 32}, cols = 256;
    uint8_t *wh[NM];
    tb_weight w[NM];
    const tr_weight *in[NM];
    tr_weight prep[NM];
    for (int m = 0; m < NM; m++) {
        size_t rb = row_bytes(types[m], cols);
        wh[m] = malloc(rb * (size_t)rows[m]);
        for (int64_t r = 0; r < rows[m]; r++) random_row(types[m], wh[m] + r * rb, cols);
        w[m] = tb_import(t, wh[m], types[m], rows[m], cols);
        in[m] = &w[m].w;
    }
    void *owned = NULL;
    int32_t copied[NM] = {0};
    assert_int_equal(o->prepare_matmul_weights(t->be, NM, in, prep, &owned, count_copied, copied),
                     TR_OK);
    for (int m = 0; m < NM; m++) assert_int_equal(copied[m], prep[m].layout != 0); /* once each */
    assert_true(prep[3].layout == 0 && prep[3].data == w[3].w.data); /* Q4_K: kept */
    assert_true(prep[4].layout == 0 && prep[4].data == w[4].w.data); /* 301 rows: kept */
    for (int m = 0; m < NM; m++) {
        assert_int_equal(prep[m].type, types[m]);
        assert_true(prep[m].rows == rows[m] && prep[m].cols == cols);
        if (prep[m].layout) assert_ptr_not_equal(prep[m].data, w[m].w.data);
        if (prep[m].layout) assert_non_null(owned);
        const int ns[] = {1, 3, 70};
        for (size_t k = 0; k < TR_ARRAY_LEN(ns); k++) {
            const int n = ns[k];
            size_t nout = (size_t)n * (size_t)rows[m];
            float *x = rnd_floats((size_t)n * cols, -1, 1);
            float *dx = tb_put(t, x, sizeof(float) * (size_t)n * cols);
            float *a[1] = {tb_nan(t, sizeof(float) * nout)}, *b[1] = {tb_nan(t, sizeof(float) * nout)};
            const tr_weight *wa[1] = {&w[m].w}, *wb[1] = {&prep[m]};
            o->matmul(t->run, 1, a, wa, dx, n, false);
            o->matmul(t->run, 1, b, wb, dx, n, false);
            float *ha = tb_get_floats(t, a[0], nout), *hb = tb_get_floats(t, b[0], nout);
            if (memcmp(ha, hb, sizeof(float) * nout))
                fail_msg("%s prepared %s x%lld: matmul of %d tokens differs", t->label,
                         tr_dtype_name(types[m]), (long long)rows[m], n);
            if (o->matmul_rows) {
                int32_t ids[] = {(int32_t)rows[m] - 1, 0, 17, 18, 31, 5};
                float *c = tb_nan(t, sizeof(float) * nout);
                o->matmul_rows(t->run, c, &prep[m], dx, n, ids, 6);
                float *hc = tb_get_floats(t, c, nout);
                for (int tok = 0; tok < n; tok++)
                    for (int j = 0; j < 6; j++) {
                        size_t i = (size_t)tok * (size_t)rows[m] + (size_t)ids[j];
                        if (memcmp(&hc[i], &ha[i], sizeof(float)))
                            fail_msg("%s prepared %s: matmul_rows row %d differs", t->label,
                                     tr_dtype_name(types[m]), ids[j]);
                    }
                free(hc);
                tb_free(t, 1, c);
            }
            free(ha);
            free(hb);
            free(x);
            tb_free(t, 3, dx, a[0], b[0]);
        }
        int32_t ids[] = {0, (int32_t)rows[m] - 1, 17, -1, (int32_t)rows[m], 40};
        const size_t ne = 6 * (size_t)cols;
        float *ea = tb_nan(t, sizeof(float) * ne), *eb = tb_nan(t, sizeof(float) * ne);
        o->embed(t->run, ea, &w[m].w, ids, 6);
        o->embed(t->run, eb, &prep[m], ids, 6);
        float *hea = tb_get_floats(t, ea, ne), *heb = tb_get_floats(t, eb, ne);
        if (memcmp(hea, heb, sizeof(float) * ne))
            fail_msg("%s prepared %s: embed differs", t->label, tr_dtype_name(types[m]));
        free(hea);
        free(heb);
        tb_free(t, 2, ea, eb);
    }
    if (owned) tb_free(t, 1, owned);
    for (int m = 0; m < NM; m++) {
        tb_unimport(t, &w[m]);
        free(wh[m]);
    }
}

static void determinism_rows(tb *a, tb *b) {
    const int32_t n = 33, dim = 576, nh = 9, hd = 64;
    float *x = rnd_floats((size_t)n * dim, -2, 2), *wn = rnd_floats(dim, -1, 1);
    float *g = rnd_floats((size_t)n * dim, -8, 8), *u = rnd_floats((size_t)n * dim, -2, 2);
    int32_t pos[33];
    for (int i = 0; i < n; i++) pos[i] = rnd_int(30000);
    float *first[3] = {NULL, NULL, NULL};
    tb *side[2] = {a, b};
    size_t sz = (size_t)n * dim;
    for (int s = 0; s < 2; s++) {
        tb *t = side[s];
        const tr_backend_ops *o = t->be->ops;
        float *dx = tb_put(t, x, sz * 4), *dw = tb_put(t, wn, dim * 4);
        float *dg = tb_put(t, g, sz * 4), *du = tb_put(t, u, sz * 4);
        float *d0 = tb_nan(t, sz * 4), *d1 = tb_put(t, x, sz * 4), *d2 = tb_nan(t, sz * 4);
        o->rmsnorm(t->run, d0, dx, dw, n, dim, 1e-5f);
        o->rope(t->run, d1, n, nh, hd, pos, 10000.0f);
        o->swiglu(t->run, d2, dg, du, (int64_t)sz);
        float *all[3] = {tb_get_floats(t, d0, sz), tb_get_floats(t, d1, sz),
                         tb_get_floats(t, d2, sz)};
        for (int32_t tok = 0; tok < n; tok += 4) {
            size_t off = (size_t)tok * dim;
            float *e0 = tb_nan(t, dim * 4), *e1 = tb_put(t, x + off, dim * 4),
                  *e2 = tb_nan(t, dim * 4);
            o->rmsnorm(t->run, e0, dx + off, dw, 1, dim, 1e-5f);
            o->rope(t->run, e1, 1, nh, hd, &pos[tok], 10000.0f);
            o->swiglu(t->run, e2, dg + off + 3, du + off + 3, 13); /* an odd slice */
            float *h0 = tb_get_floats(t, e0, dim), *h1 = tb_get_floats(t, e1, dim),
                  *h2 = tb_get_floats(t, e2, 13);
            if (memcmp(h0, all[0] + off, dim * 4) || memcmp(h1, all[1] + off, dim * 4) ||
                memcmp(h2, all[2] + off + 3, 13 * 4))
                fail_msg("%s: token %d alone differs from the batch (rmsnorm, rope "
                         "or swiglu)", t->label, tok);
            free(h0);
            free(h1);
            free(h2);
            tb_free(t, 3, e0, e1, e2);
        }
        for (int k = 0; k < 3; k++) {
            if (s == 0) first[k] = all[k];
            else {
                if (memcmp(all[k], first[k], sz * 4))
                    fail_msg("row op %d: %s and %s differ (threads)", k, a->label, b->label);
                free(all[k]);
            }
        }
        tb_free(t, 7, dx, dw, dg, du, d0, d1, d2);
    }
    for (int k = 0; k < 3; k++) free(first[k]);
    free(x);
    free(wn);
    free(g);
    free(u);
}

/* Attention: the whole ragged batch on a and on b (threads), each token
 * alone, and the batch in reverse order: the same bits. */
static void determinism_attention(tb *a, tb *b) {
    for (int ti = 0; ti < 6; ti++) {
        /* (the F16 round with a sliding window of 100). Alone, the
         * decodes at 699 and 799 take the split schedule; the third round
         * is a decode step of three sequences, and the fourth a 14-token
         * question after a cached prompt of 690, which take it whole (the
         * question as one staged tile). Rounds 4 and 5 are the first and
         * the fourth again on Q8 and Q4 K/V: staged rows (dequantized)
         * and rows read from the pages give the same bits. */
        tr_kv_type kt = ti == 0 ? TR_KV_F32 : ti == 4 ? TR_KV_Q8 : ti == 5 ? TR_KV_Q4 : TR_KV_F16;
        world w = {.n_seqs = 4, .len = {700, 90, 130, 800}, .from = {699, 0, 125, 799},
                   .n_heads = 9, .n_kv = 3, .hd = 64, .n_layers = 1, .layer = 0,
                   .page_size = 16, .tk = kt, .tv = kt,
                   .scale = 0.125f, .window = ti == 1 ? 100 : 0, .in_order = !ti || ti == 4};
        if (!a->be->ops->supports_kv(a->be, kt, kt)) continue;
        if (ti == 2) {
            w.n_seqs = 3;
            w.len[1] = 300, w.from[1] = 299, w.from[2] = 129;
        }
        if (ti == 3 || ti == 5) {
            w.n_seqs = 1;
            w.len[0] = 704, w.from[0] = 690, w.in_order = true;
        }
        world_build(&w);
        size_t row = (size_t)w.n_heads * w.hd;
        float *base = NULL;
        tb *side[2] = {a, b};
        for (int s = 0; s < 2; s++) {
            tb *t = side[s];
            void *mem = tb_nan(t, w_mem(&w));
            float *att;
            world_run(&w, t, NULL, &att, w.bat_pos, w.bat_seq, w.q, w.n_bat, mem);
            if (!base) base = att;
            else {
                if (memcmp(att, base, sizeof(float) * w.n_bat * row))
                    fail_msg("attention: %s and %s differ (threads)", a->label, b->label);
                free(att);
            }
            /* each token alone (its K/V are in place from the batch) */
            tr_kv_layout kv = world_layout(&w, mem);
            for (int i = 0; i < w.n_bat; i++) {
                if (s && i % 9 && w.bat_pos[i] < 699) continue; /* the decodes always */
                float *dq = tb_put(t, w.q + (size_t)i * row, row * 4), *dout = tb_nan(t, row * 4);
                tr_batch one = world_batch(&w, 1, &w.bat_pos[i], &w.bat_seq[i]);
                t->be->ops->attention(t->run, dout, dq, &kv, w.layer, &one, w.n_heads, w.scale);
                float *h = tb_get_floats(t, dout, row);
                if (memcmp(h, base + (size_t)i * row, row * 4))
                    fail_msg("%s attention: token %d alone differs from the batch", t->label, i);
                free(h);
                tb_free(t, 2, dq, dout);
            }
            tb_free(t, 1, mem);
        }
        free(base);
        world_free(&w);
    }
}

/* ---- memory, copies, streams, events ---- */

static void check_memory(tb *t, tb *other) {
    const tr_backend_ops *o = t->be->ops;
    enum { N = 4099 };
    uint8_t src[N], dst[N];
    for (int i = 0; i < N; i++) src[i] = (uint8_t)(i * 7 + 3);
    uint8_t *a = tb_put(t, src, N), *b = tb_nan(t, N);
    assert_int_equal(((uintptr_t)a & 63), 0); /* 64-byte aligned */
    /* device -> device at odd offsets, then back */
    assert_int_equal(o->copy(t->run, b + 5, a + 17, 1001), TR_OK);
    assert_int_equal(o->copy(t->run, b, a, 0), TR_OK);
    tb_get(t, dst, b, N);
    assert_memory_equal(dst + 5, src + 17, 1001);
    for (int i = 0; i < 5; i++) assert_int_equal(dst[i], 0xff);
    for (int i = 1006; i < N; i++) assert_int_equal(dst[i], 0xff);
    /* host (pinned) memory as the source and destination of copies */
    uint8_t *h = NULL;
    assert_int_equal(o->host_alloc(t->be, N, (void **)&h), TR_OK);
    assert_int_equal(((uintptr_t)h & 63), 0);
    memcpy(h, src, N);
    assert_int_equal(o->upload(t->io, b, h, N), TR_OK);
    assert_int_equal(o->stream_synchronize(t->io), TR_OK);
    memset(h, 0, N); /* the upload has passed: h may change */
    assert_int_equal(o->download(t->io, h + 1, b + 2, N - 2), TR_OK);
    assert_int_equal(o->stream_synchronize(t->io), TR_OK);
    assert_memory_equal(h + 1, src + 2, N - 2);
    o->host_free(t->be, h);
    o->host_free(t->be, NULL);
    tb_free(t, 2, a, b);
    o->free(t->be, NULL);
    /* events and streams of another backend are refused */
    tr_event *e = NULL;
    assert_int_equal(o->event_new(t->be, &e), TR_OK);
    assert_int_equal(o->event_record(e, other->run), TR_ERR_INVALID_ARG);
    assert_int_equal(o->stream_wait(other->run, e), TR_ERR_INVALID_ARG);
    /* an event never recorded is complete */
    assert_int_equal(o->event_synchronize(e), TR_OK);
    assert_int_equal(o->stream_wait(t->run, e), TR_OK);
    o->event_free(e);
    tr_backend_info info = tr_backend_get_info(t->be);
    assert_non_null(info.name);
    assert_non_null(info.kernels);
    assert_true(info.device[0] != 0);
}

/* ---- the variants ---- */

typedef struct variant {
    const tr_backend_reg *reg;
    const char *kernels;
    char name[160];
} variant;

/* SKIPPED (with why) when this machine cannot run the variant. */
static void require(const variant *v) {
    char why[128] = "";
    if (!v->reg->available(why, sizeof why) ||
        !v->reg->kernels_available(v->kernels, why, sizeof why)) {
        print_message("%s/%s: skipped: %s\n", v->reg->name, v->kernels, why);
        skip();
    }
}

/* A backend still being written may lack ops (backend.h): its op tests
 * are SKIPPED naming the op, not run on what is there. */
static void require_ops(tb *t) {
    const char *missing = tr_backend_missing_op(t->be);
    if (!missing) return;
    print_message("%s: skipped: the '%s' op is not implemented\n", t->label, missing);
    tb_close(t);
    skip();
}

static void test_ops_vs_reference(void **state) {
    const variant *v = *state;
    require(v);
    g_rng = 0x243f6a8885a308d3ull;
    tb ref, t;
    tb_open(&t, v->reg->name, v->kernels, 2);
    require_ops(&t);
    tb_open(&ref, "cpu", "portable", 1);
    worst w;
    memset(&w, 0, sizeof w);
    pair p = {&t, &ref, &w};
    grid_embed(&p);
    grid_rows(&p);
    grid_rope(&p);
    grid_matmul(&p);
    grid_attention(&p);
    print_message("%s: largest NMSE vs %s:", t.label, ref.label);
    for (int k = 0; k < K_N; k++) print_message(" %s %.2g", k_kind[k], w.nmse[k]);
    print_message("\n");
    tb_close(&t);
    tb_close(&ref);
}

static void test_determinism(void **state) {
    const variant *v = *state;
    require(v);
    g_rng = 0x13198a2e03707344ull;
    tb a, b;
    tb_open(&a, v->reg->name, v->kernels, 1);
    require_ops(&a);
    tb_open(&b, v->reg->name, v->kernels, 3);
    determinism_matmul(&a, &b);
    determinism_matmul_rows(&a);
    determinism_matmul_rows(&b);
    determinism_prepared(&a);
    determinism_prepared(&b);
    determinism_rows(&a, &b);
    determinism_attention(&a, &b);
    tb_close(&a);
    tb_close(&b);
}

static void test_memory(void **state) {
    const variant *v = *state;
    require(v);
    tb t, other;
    tb_open(&t, v->reg->name, v->kernels, 1);
    tb_open(&other, "cpu", "portable", 1);
    check_memory(&t, &other);
    tb_close(&t);
    tb_close(&other);
}

/* The registry: names unique, every entry lists kernel sets, the
 * available ones create, unknown names list what exists. */
static void test_registry(void **state) {
    (void)state;
    int n = tr_backend_reg_count();
    assert_true(n >= 1);
    assert_non_null(tr_backend_reg_find("cpu"));
    assert_null(tr_backend_reg_find("tpu"));
    assert_null(tr_backend_reg_find(NULL));
    assert_null(tr_backend_reg_get(n));
    assert_null(tr_backend_reg_get(-1));
    for (int i = 0; i < n; i++) {
        const tr_backend_reg *r = tr_backend_reg_get(i);
        assert_ptr_equal(tr_backend_reg_find(r->name), r);
        assert_non_null(r->kernel_sets[0]);
        char why[128] = "";
        tr_backend *be = NULL;
        tr_diag d = {0};
        tr_status s = tr_backend_new(r->name, NULL, &be, &d);
        if (r->available(why, sizeof why)) {
            assert_int_equal(s, TR_OK);
            assert_string_equal(tr_backend_get_info(be).name, r->name);
            assert_non_null(be->stream);
            assert_ptr_equal(be->stream->be, be);
            tr_backend_free(be);
        } else {
            assert_int_equal(s, TR_ERR_UNSUPPORTED);
            assert_null(be);
            assert_non_null(strstr(d.message, "not available"));
            print_message("%s: not available here: %s\n", r->name, why);
        }
        /* an unknown kernel set is an error naming it */
        tr_backend_config cfg = {.kernels = "no-such-set"};
        s = tr_backend_new(r->name, &cfg, &be, &d);
        assert_true(s == TR_ERR_NOT_FOUND || s == TR_ERR_UNSUPPORTED);
    }
    tr_backend *be = NULL;
    tr_diag d = {0};
    assert_int_equal(tr_backend_new("tpu", NULL, &be, &d), TR_ERR_NOT_FOUND);
    assert_null(be);
    assert_non_null(strstr(d.message, "unknown backend 'tpu'"));
    assert_non_null(strstr(d.message, "cpu"));
    assert_int_equal(tr_backend_new("cpu", NULL, NULL, &d), TR_ERR_INVALID_ARG);
    assert_int_equal(tr_backend_new(NULL, NULL, &be, &d), TR_OK); /* NULL: cpu */
    assert_string_equal(tr_backend_get_info(be).name, "cpu");
    tr_backend_free(be);
}

/* A kernel set runs here when some registered backend offers it and it
 * is available on this machine. */
static int set_runs_here(const char *set) {
    for (int i = 0; i < tr_backend_reg_count(); i++) {
        const tr_backend_reg *r = tr_backend_reg_get(i);
        char why[256];
        for (int k = 0; r->kernel_sets[k]; k++) {
            if (strcmp(r->kernel_sets[k], set) != 0) continue;
            if (r->available(why, sizeof why) && r->kernels_available(set, why, sizeof why))
                return 1;
            printf("%s/%s: %s\n", r->name, set, why); /* why it will be SKIPPED */
        }
    }
    return 0;
}

int main(void) {
    tr_test_kernels_require(set_runs_here);
    /* one group of tests per (backend, kernel set) the registry lists */
    enum { MAX_V = 32 };
    static variant vs[MAX_V];
    static struct CMUnitTest tests[1 + 3 * MAX_V];
    static char names[3 * MAX_V][200];
    int nv = 0, nt = 0;
    tests[nt++] = (struct CMUnitTest){.name = "registry", .test_func = test_registry};
    for (int i = 0; i < tr_backend_reg_count(); i++) {
        const tr_backend_reg *r = tr_backend_reg_get(i);
        for (int k = 0; r->kernel_sets[k] && nv < MAX_V; k++) {
            if (!tr_test_kernels_wanted(r->kernel_sets[k])) continue;
            variant *v = &vs[nv++];
            v->reg = r;
            v->kernels = r->kernel_sets[k];
            snprintf(v->name, sizeof v->name, "%s/%s", r->name, v->kernels);
            const struct {
                const char *what;
                void (*fn)(void **state);
            } kinds[3] = {{"memory", test_memory},
                          {"ops vs reference", test_ops_vs_reference},
                          {"determinism", test_determinism}};
            for (int j = 0; j < 3; j++) {
                snprintf(names[nt - 1], sizeof names[0], "%s: %s", v->name, kinds[j].what);
                tests[nt] = (struct CMUnitTest){
                    .name = names[nt - 1], .test_func = kinds[j].fn, .initial_state = v};
                nt++;
            }
        }
    }
    return tr_test_run_tests("backend_ops", tests, (size_t)nt);
}
