/* test_model_arch.c — the architecture table and the llama family on tiny
 * random models built in memory (tiny_gguf.h), no model file needed:
 *
 *  - the forward pass against a float64 llama written out here (F32
 *    weights, F32 KV: only float rounding separates the two), with and
 *    without a tied output;
 *  - chunking on such a model (bit-identical), and a backend without the
 *    optional get_rows op (the model's fallback, same bits);
 *  - load errors: an unsupported architecture names itself and the
 *    supported ones; a missing or mistyped key, a missing or misshapen
 *    tensor and an unsupported head size each name what is wrong, and
 *    nothing leaks (ASan run).
 *
 * The real weights are test_model.c's job.
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
#include "runtime/model/model.h"
#include "tests/unit/tiny_gguf.h"

enum { L = 2, DIM = 64, NH = 4, NKV = 2, HD = DIM / NH, FFN = 96, VOCAB = 40,
       PAGE = 4, MAXT = 24 };
static const float EPS = 1e-5f, BASE = 10000.0f;

static uint64_t g_rng = 12345;
static float rnd(float lo, float hi) {
    g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
    return lo + (hi - lo) * (float)((g_rng >> 40) * (1.0 / 16777216.0));
}

/* The tiny model's weights, kept for the reference. */
typedef struct tiny {
    float *embd, *out_norm, *output; /* output NULL: tied */
    float *attn_norm[L], *wq[L], *wk[L], *wv[L], *wo[L];
    float *ffn_norm[L], *wg[L], *wu[L], *wd[L];
} tiny;

static float *add(tg_builder *b, const char *name, uint64_t cols,
                  uint64_t rows, float lo, float hi) {
    float *tmp = malloc(sizeof(float) * cols * rows);
    for (uint64_t i = 0; i < cols * rows; i++) tmp[i] = rnd(lo, hi);
    float *kept = tg_tensor(b, name, cols, rows, tmp);
    free(tmp);
    return kept;
}

static void build_llama(tg_builder *b, tiny *w, bool untied) {
    tg_init(b);
    tg_str(b, "general.architecture", "llama");
    tg_u32(b, "llama.block_count", L);
    tg_u32(b, "llama.embedding_length", DIM);
    tg_u32(b, "llama.attention.head_count", NH);
    tg_u32(b, "llama.attention.head_count_kv", NKV);
    tg_u32(b, "llama.feed_forward_length", FFN);
    tg_u32(b, "llama.context_length", 128);
    tg_f32(b, "llama.attention.layer_norm_rms_epsilon", EPS);
    tg_f32(b, "llama.rope.freq_base", BASE);
    w->embd = add(b, "token_embd.weight", DIM, VOCAB, -1, 1);
    w->out_norm = add(b, "output_norm.weight", DIM, 1, 0.5f, 1.5f);
    w->output = untied ? add(b, "output.weight", DIM, VOCAB, -0.3f, 0.3f) : NULL;
    char n[64];
    for (int l = 0; l < L; l++) {
#define T(field, suffix, cols, rows, lo, hi)                          \
    snprintf(n, sizeof n, "blk.%d.%s.weight", l, suffix);             \
    w->field[l] = add(b, n, cols, rows, lo, hi);
        T(attn_norm, "attn_norm", DIM, 1, 0.5f, 1.5f);
        T(wq, "attn_q", DIM, DIM, -0.25f, 0.25f);
        T(wk, "attn_k", DIM, NKV * HD, -0.25f, 0.25f);
        T(wv, "attn_v", DIM, NKV * HD, -0.25f, 0.25f);
        T(wo, "attn_output", DIM, DIM, -0.2f, 0.2f);
        T(ffn_norm, "ffn_norm", DIM, 1, 0.5f, 1.5f);
        T(wg, "ffn_gate", DIM, FFN, -0.25f, 0.25f);
        T(wu, "ffn_up", DIM, FFN, -0.25f, 0.25f);
        T(wd, "ffn_down", FFN, DIM, -0.2f, 0.2f);
#undef T
    }
}

/* ---- the float64 reference ---- */

static void ref_rms(double *out, const double *x, const float *w) {
    double ss = 0;
    for (int i = 0; i < DIM; i++) ss += x[i] * x[i];
    double sc = 1.0 / sqrt(ss / DIM + EPS);
    for (int i = 0; i < DIM; i++) out[i] = x[i] * sc * w[i];
}

static void ref_mv(double *out, const float *w, const double *x, int rows,
                   int cols) {
    for (int r = 0; r < rows; r++) {
        double a = 0;
        for (int c = 0; c < cols; c++) a += (double)w[r * cols + c] * x[c];
        out[r] = a;
    }
}

static void ref_rope(double *x, int n_heads, int pos) {
    for (int h = 0; h < n_heads; h++)
        for (int i = 0; i < HD / 2; i++) {
            double th = pos * pow(BASE, -2.0 * i / HD);
            double *p = x + h * HD + 2 * i, a = p[0], b = p[1];
            p[0] = a * cos(th) - b * sin(th);
            p[1] = a * sin(th) + b * cos(th);
        }
}

/* Logits of the last token of tokens[0..n) at positions 0..n-1. */
static void ref_forward(const tiny *w, const int32_t *tok, int n,
                        double *logits) {
    static double x[MAXT][DIM], k[MAXT][NKV * HD], v[MAXT][NKV * HD];
    double xb[DIM], q[DIM], att[DIM], o[DIM], g[FFN], u[FFN];
    for (int t = 0; t < n; t++)
        for (int i = 0; i < DIM; i++) x[t][i] = w->embd[tok[t] * DIM + i];
    for (int l = 0; l < L; l++) {
        for (int t = 0; t < n; t++) { /* causal: t sees k, v of 0..t */
            ref_rms(xb, x[t], w->attn_norm[l]);
            ref_mv(q, w->wq[l], xb, DIM, DIM);
            ref_mv(k[t], w->wk[l], xb, NKV * HD, DIM);
            ref_mv(v[t], w->wv[l], xb, NKV * HD, DIM);
            ref_rope(q, NH, t);
            ref_rope(k[t], NKV, t);
            for (int h = 0; h < NH; h++) {
                int kh = h / (NH / NKV);
                double s[MAXT], mx = -INFINITY, sum = 0;
                for (int j = 0; j <= t; j++) {
                    double d = 0;
                    for (int e = 0; e < HD; e++) d += q[h * HD + e] * k[j][kh * HD + e];
                    s[j] = d / sqrt((double)HD);
                    mx = fmax(mx, s[j]);
                }
                for (int j = 0; j <= t; j++) sum += (s[j] = exp(s[j] - mx));
                for (int e = 0; e < HD; e++) {
                    double a = 0;
                    for (int j = 0; j <= t; j++) a += s[j] * v[j][kh * HD + e];
                    att[h * HD + e] = a / sum;
                }
            }
            ref_mv(o, w->wo[l], att, DIM, DIM);
            /* later tokens read only k[t], v[t] (made above from the
             * layer's input), so x[t] may take its residual now */
            for (int i = 0; i < DIM; i++) x[t][i] += o[i];
        }
        for (int t = 0; t < n; t++) {
            ref_rms(xb, x[t], w->ffn_norm[l]);
            ref_mv(g, w->wg[l], xb, FFN, DIM);
            ref_mv(u, w->wu[l], xb, FFN, DIM);
            for (int i = 0; i < FFN; i++) g[i] = g[i] / (1 + exp(-g[i])) * u[i];
            ref_mv(o, w->wd[l], g, DIM, FFN);
            for (int i = 0; i < DIM; i++) x[t][i] += o[i];
        }
    }
    ref_rms(xb, x[n - 1], w->out_norm);
    ref_mv(logits, w->output ? w->output : w->embd, xb, VOCAB, DIM);
}

/* ---- running the model ---- */

typedef struct run_ctx {
    model *m;
    tr_kv_layout kv;
    int32_t table[MAXT / PAGE + 1];
    int32_t n_pages;
} run_ctx;

static void ctx_init(run_ctx *c, model *m) {
    c->m = m;
    c->n_pages = MAXT / PAGE;
    assert_int_equal(tr_model_kv_alloc(m, c->n_pages, PAGE, TR_KV_F32, TR_KV_F32, &c->kv, NULL), TR_OK);
    for (int i = 0; i < c->n_pages; i++) c->table[i] = c->n_pages - 1 - i;
}

/* tokens[0..n) at positions 0.. in chunks; logits of the last one. */
static void run_chunks(run_ctx *c, const int32_t *tok, int n, int chunk,
                       float *logits) {
    int32_t pos[MAXT], seq[MAXT] = {0};
    const int32_t *tables[1] = {c->table};
    for (int at = 0; at < n; at += chunk) {
        int cn = TR_MIN(chunk, n - at);
        for (int i = 0; i < cn; i++) pos[i] = at + i;
        tr_batch b = {cn, pos, seq, 1, tables, &c->n_pages};
        int32_t row = cn - 1;
        bool last = at + cn >= n;
        assert_int_equal(tr_model_forward(c->m, &c->kv, &b, tok + at, &row,
                                          last ? 1 : 0, logits),
                         TR_OK);
    }
}

static void test_llama_matches_float64(void **state) {
    (void)state;
    for (int untied = 0; untied < 2; untied++) {
        tg_builder *b = calloc(1, sizeof *b);
        tiny w;
        build_llama(b, &w, untied);
        gguf_file *f = NULL;
        tr_diag d = {0};
        assert_int_equal(tg_open(b, &f, &d), TR_OK);
        tr_backend *be = NULL;
        model *m = NULL;
        assert_int_equal(tr_backend_new("cpu", &(tr_backend_config){.threads = 2}, &be, NULL), TR_OK);
        assert_int_equal(tr_model_load(f, be, MAXT, &m, &d), TR_OK);
        const model_hparams *hp = tr_model_get_hparams(m);
        assert_string_equal(hp->arch, "llama");
        assert_int_equal(hp->n_vocab, VOCAB);
        assert_int_equal(hp->head_dim, HD);
        assert_int_equal(hp->tied_output, !untied);

        int32_t tok[MAXT];
        for (int i = 0; i < MAXT; i++) tok[i] = (int32_t)(rnd(0, VOCAB)) % VOCAB;
        run_ctx c;
        ctx_init(&c, m);
        float got[VOCAB], again[VOCAB];
        double want[VOCAB];
        const int lens[] = {1, 5, MAXT};
        for (size_t li = 0; li < TR_ARRAY_LEN(lens); li++) {
            int n = lens[li];
            run_chunks(&c, tok, n, n, got);
            ref_forward(&w, tok, n, want);
            double mx = 0, worst = 0;
            for (int i = 0; i < VOCAB; i++) mx = fmax(mx, fabs(want[i]));
            for (int i = 0; i < VOCAB; i++)
                worst = fmax(worst, fabs(got[i] - want[i]));
            /* F32 weights and KV: float rounding through 2 layers, ~1e-6
             * relative; a wrong index or sub-layer is O(1) */
            if (!(worst <= 2e-5 * fmax(1.0, mx)))
                fail_msg("%d tokens (untied %d): worst |d| %.3g (max |logit| %.3g)",
                         n, untied, worst, mx);
            /* chunked and token by token: the same bits */
            run_chunks(&c, tok, n, 3, again);
            assert_memory_equal(got, again, sizeof got);
            run_chunks(&c, tok, n, 1, again);
            assert_memory_equal(got, again, sizeof got);
        }
        tr_model_kv_free(m, &c.kv);
        tr_model_free(m);
        tr_backend_free(be);
        tr_gguf_close(f);
        tg_free(b);
        free(b);
    }
}

/* A backend without the optional get_rows op: the model gathers the
 * logit rows with one copy each, and the logits keep their bits. Without
 * a required op it does not load. */
static void test_optional_get_rows_fallback(void **state) {
    (void)state;
    tg_builder *b = calloc(1, sizeof *b);
    tiny w;
    build_llama(b, &w, true);
    gguf_file *f = NULL;
    assert_int_equal(tg_open(b, &f, NULL), TR_OK);
    tr_backend *be = NULL;
    model *m = NULL;
    assert_int_equal(tr_backend_new("cpu", &(tr_backend_config){.threads = 2}, &be, NULL), TR_OK);
    assert_int_equal(tr_model_load(f, be, MAXT, &m, NULL), TR_OK);
    run_ctx c;
    ctx_init(&c, m);
    int32_t tok[MAXT], pos[MAXT], seq[MAXT] = {0};
    for (int i = 0; i < MAXT; i++) {
        tok[i] = i * 7 % VOCAB;
        pos[i] = i;
    }
    const int32_t *tables[1] = {c.table};
    tr_batch bt = {MAXT, pos, seq, 1, tables, &c.n_pages};
    const int32_t rows[3] = {MAXT - 1, 0, 9};
    float with[3 * VOCAB], without[3 * VOCAB];
    assert_int_equal(tr_model_forward(m, &c.kv, &bt, tok, rows, 3, with), TR_OK);
    const tr_backend_ops *orig = be->ops;
    tr_backend_ops masked = *orig;
    masked.get_rows = NULL;
    be->ops = &masked;
    assert_int_equal(tr_model_forward(m, &c.kv, &bt, tok, rows, 3, without), TR_OK);
    /* a required op missing: the model refuses to load, naming it */
    masked.matmul = NULL;
    model *m2 = NULL;
    tr_diag d = {0};
    assert_int_equal(tr_model_load(f, be, MAXT, &m2, &d), TR_ERR_UNSUPPORTED);
    assert_null(m2);
    assert_non_null(strstr(d.message, "lacks the 'matmul' op"));
    be->ops = orig;
    assert_memory_equal(with, without, sizeof with);
    /* and the rows are the asked ones (row 0 differs from row MAXT - 1) */
    assert_memory_not_equal(with, with + VOCAB, sizeof(float) * VOCAB);
    tr_model_kv_free(m, &c.kv);
    tr_model_free(m);
    tr_backend_free(be);
    tr_gguf_close(f);
    tg_free(b);
    free(b);
}

/* ---- load errors ---- */

/* Loads b's file expecting `code` and a message containing every given
 * substring (NULL-terminated). */
static void expect_load_fail(tg_builder *b, tr_status code, ...) {
    gguf_file *f = NULL;
    tr_diag d = {0};
    assert_int_equal(tg_open(b, &f, &d), TR_OK);
    tr_backend *be = NULL;
    assert_int_equal(tr_backend_new("cpu", &(tr_backend_config){.threads = 1}, &be, NULL), TR_OK);
    model *sentinel = (model *)(uintptr_t)0x1234, *m = sentinel;
    tr_status s = tr_model_load(f, be, 8, &m, &d);
    if (s != code) fail_msg("got %s (%s), want %s", tr_status_name(s), d.message,
                            tr_status_name(code));
    assert_ptr_equal(m, sentinel); /* *out untouched */
    va_list ap;
    va_start(ap, code);
    for (const char *sub; (sub = va_arg(ap, const char *));)
        if (!strstr(d.message, sub)) fail_msg("'%s' not in '%s'", sub, d.message);
    va_end(ap);
    tr_backend_free(be);
    tr_gguf_close(f);
}

static void test_load_errors(void **state) {
    (void)state;
    tg_builder *b = calloc(1, sizeof *b);
    tiny w;

    build_llama(b, &w, false);
    tg_drop_kv(b, "general.architecture");
    tg_str(b, "general.architecture", "gpt-j");
    expect_load_fail(b, TR_ERR_UNSUPPORTED, "'gpt-j'", "supported: llama", NULL);
    tg_free(b);

    build_llama(b, &w, false);
    tg_drop_kv(b, "general.architecture");
    expect_load_fail(b, TR_ERR_NOT_FOUND, "general.architecture", NULL);
    tg_free(b);

    build_llama(b, &w, false);
    tg_drop_kv(b, "llama.block_count");
    expect_load_fail(b, TR_ERR_NOT_FOUND, "'llama.block_count'", "missing", NULL);
    tg_free(b);

    build_llama(b, &w, false);
    tg_drop_kv(b, "llama.feed_forward_length");
    tg_str(b, "llama.feed_forward_length", "96");
    expect_load_fail(b, TR_ERR_FORMAT, "'llama.feed_forward_length'",
                     "not a 32-bit count", NULL);
    tg_free(b);

    build_llama(b, &w, false);
    tg_drop_kv(b, "llama.rope.freq_base");
    tg_u32(b, "llama.rope.freq_base", 10000);
    expect_load_fail(b, TR_ERR_FORMAT, "'llama.rope.freq_base'", "not a float",
                     NULL);
    tg_free(b);

    build_llama(b, &w, false);
    tg_drop_kv(b, "llama.attention.head_count_kv");
    tg_u32(b, "llama.attention.head_count_kv", 3); /* 4 heads over 3 */
    expect_load_fail(b, TR_ERR_FORMAT, "implausible", "heads 4/3", NULL);
    tg_free(b);

    build_llama(b, &w, false);
    tg_drop_kv(b, "llama.attention.head_count");
    tg_u32(b, "llama.attention.head_count", 0);
    expect_load_fail(b, TR_ERR_FORMAT, "implausible", "heads 0/", NULL);
    tg_free(b);

    build_llama(b, &w, false);
    tg_drop_kv(b, "llama.attention.head_count");
    tg_u32(b, "llama.attention.head_count", 5); /* 64 = 5 x 12.8 */
    expect_load_fail(b, TR_ERR_FORMAT, "dim 64 is not a multiple of 5 heads", NULL);
    tg_free(b);

    build_llama(b, &w, false);
    tg_drop_kv(b, "llama.attention.head_count");
    tg_u32(b, "llama.attention.head_count", 1); /* head_dim 64, rope 64 */
    tg_drop_kv(b, "llama.attention.head_count_kv");
    tg_u32(b, "llama.attention.head_count_kv", 1);
    tg_u32(b, "llama.rope.dimension_count", 32);
    expect_load_fail(b, TR_ERR_UNSUPPORTED, "partial rotary", NULL);
    tg_free(b);

    build_llama(b, &w, false);
    tg_drop_kv(b, "llama.embedding_length");
    tg_u32(b, "llama.embedding_length", 8192); /* head_dim 2048 */
    expect_load_fail(b, TR_ERR_UNSUPPORTED, "head dimension 2048", NULL);
    tg_free(b);

    build_llama(b, &w, false);
    strcpy(b->t[b->n_t - 2].name, "blk.1.ffn_upp.weight");
    expect_load_fail(b, TR_ERR_NOT_FOUND, "'blk.1.ffn_up.weight' missing", NULL);
    tg_free(b);

    build_llama(b, &w, false);
    for (int i = 0; i < b->n_t; i++)
        if (strcmp(b->t[i].name, "blk.0.attn_k.weight") == 0) b->t[i].ne[1] = DIM / 4;
    expect_load_fail(b, TR_ERR_FORMAT, "'blk.0.attn_k.weight'", "shape", NULL);
    tg_free(b);

    free(b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_llama_matches_float64),
        cmocka_unit_test(test_optional_get_rows_fallback),
        cmocka_unit_test(test_load_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
