/* test_model_families.c — the gemma3, qwen2 and qwen3 families on tiny
 * random F32 models built in memory (tiny_gguf.h), no model file needed:
 *
 *  - the forward pass against a float64 transformer written out here that
 *    has every family's parts as switches (biases, per-head Q/K norms,
 *    post-norms, GELU or SiLU, NEOX rope with per-layer bases, sliding
 *    windows, embedding scale, soft-capping, head_dim != dim / n_heads):
 *    F32 weights and KV, so only float rounding separates the two;
 *  - local layers read only their window: a prompt 4x the window, and the
 *    local layers' K/V of positions outside every window overwritten with
 *    NaN, give the same bits;
 *  - a cached prefix (its pages shared, the rest prefilled on top) gives
 *    the bits of the whole prompt prefilled at once, in chunks, or token by
 *    token (prompts longer than the window);
 *  - load errors name the key or tensor at fault.
 *
 * Real weights: test_model_gemma.c (Gemma 3 270M), test_model_synth.c
 * (random-weight qwen2/qwen3 GGUFs against llama.cpp).
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
#include "kernels/cpu/quant_math_internal.h"
#include "runtime/model/model.h"
#include "runtime/model/model_internal.h"
#include "tests/unit/tiny_gguf.h"

enum { L = 3, DIM = 64, NH = 4, NKV = 2, FFN = 96, VOCAB = 40, PAGE = 4, MAXT = 40,
       WIN = 7 };
static const float EPS = 1e-6f, BASE = 1000000.0f, BASE_LOCAL = 10000.0f;

typedef enum fam { FAM_QWEN2, FAM_QWEN3, FAM_GEMMA3 } fam;
static const char *const k_fam_name[] = {"qwen2", "qwen3", "gemma3"};

static uint64_t g_rng = 777;
static float rnd(float lo, float hi) {
    g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
    return lo + (hi - lo) * (float)((g_rng >> 40) * (1.0 / 16777216.0));
}

/* A tiny model: its family's switches and its weights (kept for the
 * reference). */
typedef struct tiny {
    fam f;
    int hd;                  /* head_dim: qwen2 DIM / NH, else 32 (q_dim 128) */
    bool bias, qk_norm, post, gelu;
    int window[L];           /* gemma3: layers 0 and 2 local */
    float embd_scale, softcap;
    float *embd, *out_norm, *output;
    float *attn_norm[L], *wq[L], *wk[L], *wv[L], *wo[L], *bq[L], *bk[L], *bv[L];
    float *qn[L], *kn[L], *post_attn[L];
    float *ffn_norm[L], *wg[L], *wu[L], *wd[L], *post_ffn[L];
} tiny;

static float *add(tg_builder *b, const char *name, uint64_t cols, uint64_t rows,
                  float lo, float hi) {
    float *tmp = malloc(sizeof(float) * cols * rows);
    for (uint64_t i = 0; i < cols * rows; i++) tmp[i] = rnd(lo, hi);
    float *kept = tg_tensor(b, name, cols, rows, tmp);
    free(tmp);
    return kept;
}

static void build(tg_builder *b, tiny *w, fam f) {
    memset(w, 0, sizeof *w);
    w->f = f;
    w->hd = f == FAM_QWEN2 ? DIM / NH : 32;
    w->bias = f == FAM_QWEN2;
    w->qk_norm = f != FAM_QWEN2;
    w->post = w->gelu = f == FAM_GEMMA3;
    w->embd_scale = f == FAM_GEMMA3 ? sqrtf((float)DIM) : 1.0f;
    w->softcap = f == FAM_GEMMA3 ? 4.0f : 0.0f;
    if (f == FAM_GEMMA3) w->window[0] = w->window[2] = WIN;
    const char *a = k_fam_name[f];
    const int qd = NH * w->hd, kvd = NKV * w->hd;
    char k[96];
    tg_init(b);
    tg_str(b, "general.architecture", a);
#define KU(suffix, v) (snprintf(k, sizeof k, "%s.%s", a, suffix), tg_u32(b, k, v))
#define KF(suffix, v) (snprintf(k, sizeof k, "%s.%s", a, suffix), tg_f32(b, k, v))
    KU("block_count", L);
    KU("embedding_length", DIM);
    KU("attention.head_count", NH);
    KU("attention.head_count_kv", NKV);
    KU("feed_forward_length", FFN);
    KU("context_length", 128);
    KF("attention.layer_norm_rms_epsilon", EPS);
    KF("rope.freq_base", BASE);
    if (f != FAM_QWEN2) {
        KU("attention.key_length", (uint32_t)w->hd);
        KU("attention.value_length", (uint32_t)w->hd);
    }
    if (f == FAM_GEMMA3) {
        KU("attention.sliding_window", WIN);
        KU("attention.sliding_window_pattern", 2); /* L G L */
        KF("rope.freq_base_swa", BASE_LOCAL);
        KF("final_logit_softcapping", w->softcap);
    }
#undef KU
#undef KF
    w->embd = add(b, "token_embd.weight", DIM, VOCAB, -1, 1);
    w->out_norm = add(b, "output_norm.weight", DIM, 1, 0.5f, 1.5f);
    if (f == FAM_QWEN2) w->output = add(b, "output.weight", DIM, VOCAB, -0.3f, 0.3f);
    char n[64];
    for (int l = 0; l < L; l++) {
#define T(field, suffix, cols, rows, lo, hi)                   \
    do {                                                       \
        snprintf(n, sizeof n, "blk.%d.%s", l, suffix);         \
        w->field[l] = add(b, n, cols, rows, lo, hi);           \
    } while (0)
        T(attn_norm, "attn_norm.weight", DIM, 1, 0.5f, 1.5f);
        T(wq, "attn_q.weight", DIM, qd, -0.25f, 0.25f);
        T(wk, "attn_k.weight", DIM, kvd, -0.25f, 0.25f);
        T(wv, "attn_v.weight", DIM, kvd, -0.25f, 0.25f);
        if (w->bias) {
            T(bq, "attn_q.bias", qd, 1, -0.5f, 0.5f);
            T(bk, "attn_k.bias", kvd, 1, -0.5f, 0.5f);
            T(bv, "attn_v.bias", kvd, 1, -0.5f, 0.5f);
        }
        if (w->qk_norm) {
            T(qn, "attn_q_norm.weight", w->hd, 1, 0.5f, 1.5f);
            T(kn, "attn_k_norm.weight", w->hd, 1, 0.5f, 1.5f);
        }
        T(wo, "attn_output.weight", qd, DIM, -0.2f, 0.2f);
        if (w->post) T(post_attn, "post_attention_norm.weight", DIM, 1, 0.5f, 1.5f);
        T(ffn_norm, "ffn_norm.weight", DIM, 1, 0.5f, 1.5f);
        T(wg, "ffn_gate.weight", DIM, FFN, -0.25f, 0.25f);
        T(wu, "ffn_up.weight", DIM, FFN, -0.25f, 0.25f);
        T(wd, "ffn_down.weight", FFN, DIM, -0.2f, 0.2f);
        if (w->post) T(post_ffn, "post_ffw_norm.weight", DIM, 1, 0.5f, 1.5f);
#undef T
    }
}

/* ---- the float64 reference ---- */

static void ref_rms(double *out, const double *x, const float *w, int n) {
    double ss = 0;
    for (int i = 0; i < n; i++) ss += x[i] * x[i];
    double sc = 1.0 / sqrt(ss / n + EPS);
    for (int i = 0; i < n; i++) out[i] = x[i] * sc * w[i];
}

static void ref_mv(double *out, const float *w, const double *x, int rows, int cols,
                   const float *bias) {
    for (int r = 0; r < rows; r++) {
        double a = bias ? bias[r] : 0;
        for (int c = 0; c < cols; c++) a += (double)w[r * cols + c] * x[c];
        out[r] = a;
    }
}

/* NEOX: element i pairs with i + hd / 2. */
static void ref_rope(double *x, int n_heads, int hd, int pos, double base) {
    for (int h = 0; h < n_heads; h++)
        for (int i = 0; i < hd / 2; i++) {
            double th = pos * pow(base, -2.0 * i / hd);
            double *p = x + h * hd, a = p[i], b = p[i + hd / 2];
            p[i] = a * cos(th) - b * sin(th);
            p[i + hd / 2] = a * sin(th) + b * cos(th);
        }
}

static double gelu(double x) {
    return x / (1.0 + exp(-2.0 * sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

/* Logits of the last token of tokens[0..n) at positions 0..n-1. */
static void ref_forward(const tiny *w, const int32_t *tok, int n, double *logits) {
    static double x[MAXT][DIM], k[MAXT][DIM * 2], v[MAXT][DIM * 2];
    const int hd = w->hd, qd = NH * hd, kvd = NKV * hd;
    double xb[DIM], q[DIM * 2], att[DIM * 2], o[DIM], g[FFN], u[FFN];
    for (int t = 0; t < n; t++)
        for (int i = 0; i < DIM; i++)
            x[t][i] = (double)(w->embd[tok[t] * DIM + i] * w->embd_scale);
    for (int l = 0; l < L; l++) {
        double base = w->window[l] ? BASE_LOCAL : BASE;
        for (int t = 0; t < n; t++) {
            ref_rms(xb, x[t], w->attn_norm[l], DIM);
            ref_mv(q, w->wq[l], xb, qd, DIM, w->bq[l]);
            ref_mv(k[t], w->wk[l], xb, kvd, DIM, w->bk[l]);
            ref_mv(v[t], w->wv[l], xb, kvd, DIM, w->bv[l]);
            if (w->qk_norm) {
                for (int h = 0; h < NH; h++) ref_rms(q + h * hd, q + h * hd, w->qn[l], hd);
                for (int h = 0; h < NKV; h++)
                    ref_rms(k[t] + h * hd, k[t] + h * hd, w->kn[l], hd);
            }
            ref_rope(q, NH, hd, t, base);
            ref_rope(k[t], NKV, hd, t, base);
            int lo = w->window[l] && t >= w->window[l] ? t - w->window[l] + 1 : 0;
            for (int h = 0; h < NH; h++) {
                int kh = h / (NH / NKV);
                double s[MAXT], mx = -INFINITY, sum = 0;
                for (int j = lo; j <= t; j++) {
                    double d = 0;
                    for (int e = 0; e < hd; e++) d += q[h * hd + e] * k[j][kh * hd + e];
                    s[j] = d / sqrt((double)hd);
                    mx = fmax(mx, s[j]);
                }
                for (int j = lo; j <= t; j++) sum += (s[j] = exp(s[j] - mx));
                for (int e = 0; e < hd; e++) {
                    double a = 0;
                    for (int j = lo; j <= t; j++) a += s[j] * v[j][kh * hd + e];
                    att[h * hd + e] = a / sum;
                }
            }
            ref_mv(o, w->wo[l], att, DIM, qd, NULL);
            if (w->post) ref_rms(o, o, w->post_attn[l], DIM);
            /* later tokens read only k[t], v[t] (made from the layer's
             * input above), so x[t] may take its residual now */
            for (int i = 0; i < DIM; i++) x[t][i] += o[i];
        }
        for (int t = 0; t < n; t++) {
            ref_rms(xb, x[t], w->ffn_norm[l], DIM);
            ref_mv(g, w->wg[l], xb, FFN, DIM, NULL);
            ref_mv(u, w->wu[l], xb, FFN, DIM, NULL);
            for (int i = 0; i < FFN; i++)
                g[i] = (w->gelu ? gelu(g[i]) : g[i] / (1 + exp(-g[i]))) * u[i];
            ref_mv(o, w->wd[l], g, DIM, FFN, NULL);
            if (w->post) ref_rms(o, o, w->post_ffn[l], DIM);
            for (int i = 0; i < DIM; i++) x[t][i] += o[i];
        }
    }
    ref_rms(xb, x[n - 1], w->out_norm, DIM);
    ref_mv(logits, w->output ? w->output : w->embd, xb, VOCAB, DIM, NULL);
    if (w->softcap > 0)
        for (int i = 0; i < VOCAB; i++) logits[i] = w->softcap * tanh(logits[i] / w->softcap);
}

/* ---- running the model ---- */

typedef struct run_ctx {
    model *m;
    tr_kv_layout kv;
    int32_t table[2][MAXT / PAGE + 1]; /* two sequences' page tables */
    int32_t n_pages;
} run_ctx;

static void ctx_init(run_ctx *c, model *m) {
    c->m = m;
    c->n_pages = MAXT / PAGE;
    assert_int_equal(tr_model_kv_alloc(m, 2 * c->n_pages, PAGE, TR_KV_F32, TR_KV_F32, &c->kv, NULL),
                     TR_OK);
    for (int i = 0; i < c->n_pages; i++) {
        c->table[0][i] = c->n_pages - 1 - i;  /* scrambled */
        c->table[1][i] = c->n_pages + i;       /* other pages */
    }
}

/* tokens[from..n) of sequence `s` (one sequence per batch) at positions
 * from.. in chunks; logits of the last one. */
static void run_chunks(run_ctx *c, int s, const int32_t *tok, int from, int n, int chunk,
                       float *logits) {
    int32_t pos[MAXT], seq[MAXT] = {0};
    const int32_t *tables[1] = {c->table[s]};
    for (int at = from; at < n; at += chunk) {
        int cn = TR_MIN(chunk, n - at);
        for (int i = 0; i < cn; i++) pos[i] = at + i;
        tr_batch b = {cn, pos, seq, 1, tables, &c->n_pages};
        int32_t row = cn - 1;
        bool last = at + cn >= n;
        assert_int_equal(tr_model_forward(c->m, &c->kv, &b, tok + at, &row, last ? 1 : 0,
                                          logits),
                         TR_OK);
    }
}

static void open_model(tg_builder *b, gguf_file **f, tr_backend **be, model **m) {
    tr_diag d = {0};
    assert_int_equal(tg_open(b, f, &d), TR_OK);
    assert_int_equal(tr_backend_new("cpu", &(tr_backend_config){.threads = 2}, be, NULL), TR_OK);
    if (tr_model_load(*f, *be, MAXT, m, &d) != TR_OK) fail_msg("load: %s", d.message);
}

/* Q4 keys balanced against the queries (runtime/model/kv_balance.c):
 * families with per-head Q/K norms carry balanced copies of them whose
 * per-channel product w_q * w_k is the file's (q.k unchanged) and whose
 * key factor is one per RoPE pair (c, c + hd / 2), within [1/8, 8]; qwen2
 * (no such norms) has none. The CPU backend reads them in place. */
static void check_q4_key_balance(const model *m, fam fi, int hd) {
    for (int l = 0; l < L; l++) {
        const tr_attn_weights *a = &m->layers[l].attn;
        if (fi == FAM_QWEN2) {
            assert_null(a->q_norm_q4k);
            continue;
        }
        assert_non_null(a->q_norm_q4k);
        assert_non_null(a->k_norm_q4k);
        for (int c = 0; c < hd; c++) {
            double prod = (double)a->q_norm[c] * a->k_norm[c];
            double bal = (double)a->q_norm_q4k[c] * a->k_norm_q4k[c];
            assert_true(fabs(bal - prod) <= 1e-6 * fabs(prod));
            double f = (double)a->k_norm_q4k[c] / a->k_norm[c];
            double fp = (double)a->k_norm_q4k[(c + hd / 2) % hd] / a->k_norm[(c + hd / 2) % hd];
            assert_true(f >= 0.125 * (1 - 1e-6) && f <= 8 * (1 + 1e-6));
            assert_true(fabs(f - fp) <= 1e-6 * f);
        }
    }
}

static void test_families_match_float64(void **state) {
    (void)state;
    for (int fi = 0; fi < 3; fi++) {
        tg_builder *b = calloc(1, sizeof *b);
        tiny w;
        build(b, &w, (fam)fi);
        gguf_file *f;
        tr_backend *be;
        model *m;
        open_model(b, &f, &be, &m);
        const model_hparams *hp = tr_model_get_hparams(m);
        assert_string_equal(hp->arch, k_fam_name[fi]);
        assert_int_equal(hp->head_dim, w.hd);
        assert_int_equal(hp->n_local_layers, fi == FAM_GEMMA3 ? 2 : 0);
        for (int l = 0; l < L; l++) assert_int_equal(tr_model_layer_window(m, l), w.window[l]);
        check_q4_key_balance(m, (fam)fi, w.hd);

        int32_t tok[MAXT];
        for (int i = 0; i < MAXT; i++) tok[i] = (int32_t)rnd(0, VOCAB) % VOCAB;
        run_ctx c;
        ctx_init(&c, m);
        float got[VOCAB], again[VOCAB];
        double want[VOCAB];
        const int lens[] = {1, 5, WIN + 1, MAXT};
        for (size_t li = 0; li < TR_ARRAY_LEN(lens); li++) {
            int n = lens[li];
            run_chunks(&c, 0, tok, 0, n, n, got);
            ref_forward(&w, tok, n, want);
            double mx = 0, worst = 0;
            for (int i = 0; i < VOCAB; i++) mx = fmax(mx, fabs(want[i]));
            for (int i = 0; i < VOCAB; i++) worst = fmax(worst, fabs(got[i] - want[i]));
            /* F32 weights and KV: float rounding through 3 layers, ~1e-6
             * relative; a wrong sub-layer, window or rope mode is O(1) */
            if (!(worst <= 3e-5 * fmax(1.0, mx)))
                fail_msg("%s, %d tokens: worst |d| %.3g (max |logit| %.3g)", k_fam_name[fi],
                         n, worst, mx);
            /* chunked and token by token: the same bits */
            run_chunks(&c, 0, tok, 0, n, 3, again);
            assert_memory_equal(got, again, sizeof got);
            run_chunks(&c, 0, tok, 0, n, 1, again);
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

/* The mean of layer l's keys over positions [0, n) of sequence 0, each
 * turned back by its rope angle (NEOX pairs (i, i + hd/2), base BASE):
 * mean[NKV * hd]. */
static void unroped_key_mean(const run_ctx *c, int l, int n, int hd, double *mean) {
    for (int i = 0; i < NKV * hd; i++) mean[i] = 0;
    for (int p = 0; p < n; p++) {
        const float *k = (const float *)((const char *)c->kv.base +
                                         tr_kv_offset(&c->kv, l, c->table[0][p / PAGE], 0,
                                                      p % PAGE));
        for (int h = 0; h < NKV; h++)
            for (int i = 0; i < hd / 2; i++) {
                double t = p * pow(BASE, -2.0 * i / hd), x = k[h * hd + i],
                       y = k[h * hd + i + hd / 2];
                mean[h * hd + i] += (x * cos(t) + y * sin(t)) / n;
                mean[h * hd + i + hd / 2] += (y * cos(t) - x * sin(t)) / n;
            }
    }
}

/* Q4 keys calibrated (runtime/model/kv_center.c) for the family without
 * per-head norms (qwen2): the center is minus the keys' mean (before the
 * rope) in the pairs the rope turns little, 0 in the others; the K and
 * Q factors multiply to 1, one per rope pair, in [1/8, 8]; F32 KV gives
 * the same bits as before; another load calibrates to the same bytes;
 * bad tokens are refused and change nothing; families with norms are left
 * alone. */
static void test_q4_keys_calibrated(void **state) {
    (void)state;
    for (int fi = 0; fi < 3; fi++) {
        tg_builder *b = calloc(1, sizeof *b);
        tiny w;
        build(b, &w, (fam)fi);
        gguf_file *f;
        tr_backend *be;
        model *m;
        open_model(b, &f, &be, &m);
        int32_t tok[MAXT];
        for (int i = 0; i < MAXT; i++) tok[i] = (int32_t)rnd(0, VOCAB) % VOCAB;
        run_ctx c;
        ctx_init(&c, m);
        float before[VOCAB], after[VOCAB];
        run_chunks(&c, 0, tok, 0, MAXT, MAXT, before);
        int32_t bad[2] = {1, VOCAB};
        tr_diag d = {0};
        assert_int_equal(tr_model_calibrate_q4_keys(m, bad, 2, &d), TR_ERR_INVALID_ARG);
        assert_non_null(strstr(d.message, "token 1 (id 40)"));
        assert_int_equal(tr_model_calibrate_q4_keys(m, tok, 0, &d), TR_ERR_INVALID_ARG);
        assert_int_equal(tr_model_kv_fingerprint(m), 0);
        assert_int_equal(tr_model_calibrate_q4_keys(m, tok, MAXT, &d), TR_OK);
        run_chunks(&c, 0, tok, 0, MAXT, MAXT, after);
        assert_memory_equal(before, after, sizeof before);
        if (fi != FAM_QWEN2) {
            assert_int_equal(tr_model_kv_fingerprint(m), 0);
            for (int l = 0; l < L; l++) assert_null(m->layers[l].attn.k_center_neg);
        } else {
            uint64_t fp = tr_model_kv_fingerprint(m);
            assert_true(fp != 0);
            assert_int_equal(tr_model_calibrate_q4_keys(m, tok, 3, &d), TR_OK);
            assert_true(tr_model_kv_fingerprint(m) == fp);
            /* another load, calibrated on a backend of one thread: the same
             * bytes (the disk tier finds its pages again after a restart) */
            tr_backend *be1;
            model *m1;
            assert_int_equal(tr_backend_new("cpu", &(tr_backend_config){.threads = 1}, &be1, NULL),
                             TR_OK);
            assert_int_equal(tr_model_load(f, be1, MAXT, &m1, &d), TR_OK);
            assert_int_equal(tr_model_calibrate_q4_keys(m1, tok, MAXT, &d), TR_OK);
            assert_true(tr_model_kv_fingerprint(m1) == fp);
            tr_model_free(m1);
            tr_backend_free(be1);
            const int hd = w.hd;
            for (int l = 0; l < L; l++) {
                const tr_attn_weights *a = &m->layers[l].attn;
                double mean[NKV * 32];
                unroped_key_mean(&c, l, MAXT, hd, mean);
                for (int h = 0; h < NKV; h++) {
                    /* minus the mean where RoPE turns the pair by at most a
                     * radian over 2,048 positions (pairs 5-7 here), 0 where it
                     * turns further (0-4: 1 rad a position down to 2 rad
                     * over 2,048) */
                    for (int i = 0; i < hd / 2; i++) {
                        int ca = h * hd + i, cb = ca + hd / 2;
                        bool kept = 2048 * pow(BASE, -2.0 * i / hd) <= 1.0;
                        assert_int_equal(kept, i >= 5);
                        double size = hypot(mean[ca], mean[cb]);
                        double ga = a->k_center_neg[ca], gb = a->k_center_neg[cb];
                        double wa = kept ? -mean[ca] : 0, wb = kept ? -mean[cb] : 0;
                        if (!(hypot(ga - wa, gb - wb) <= 1e-5 * size + 1e-7))
                            fail_msg("layer %d head %d pair %d: center (%g, %g), want (%g, %g)",
                                     l, h, i, ga, gb, wa, wb);
                    }
                }
                for (int ch = 0; ch < hd; ch++) {
                    double k = a->k_scale_q4k[ch], q = a->q_scale_q4k[ch];
                    assert_true(fabs(k * q - 1) <= 1e-6);
                    assert_true(k >= 0.125 && k <= 8);
                    assert_true(k == a->k_scale_q4k[(ch + hd / 2) % hd]);
                }
            }
        }
        tr_model_kv_free(m, &c.kv);
        tr_model_free(m);
        tr_backend_free(be);
        tr_gguf_close(f);
        tg_free(b);
        free(b);
    }
}

/* Overwrites layer l's K and V rows of positions [0, n) of sequence s with
 * NaN. */
static void poison(run_ctx *c, int s, int l, int n) {
    const tr_kv_layout *kv = &c->kv;
    size_t row = (size_t)kv->n_kv_heads * kv->head_dim;
    float nan = NAN;
    for (int p = 0; p < n; p++)
        for (int kind = 0; kind < 2; kind++) {
            size_t page = (size_t)c->table[s][p / kv->page_size];
            float *r = (float *)kv->base +
                       (((page * (size_t)kv->n_layers + (size_t)l) * 2 + (size_t)kind) *
                            (size_t)kv->page_size +
                        (size_t)(p % kv->page_size)) *
                           row;
            for (size_t i = 0; i < row; i++) r[i] = nan;
        }
}

/* Gemma 3's local layers and the KV pages: the window is honoured (rows
 * before it never read), and a cached prefix gives the bits of a full
 * prefill, for prompts several windows long. */
static void test_sliding_window_pages(void **state) {
    (void)state;
    tg_builder *b = calloc(1, sizeof *b);
    tiny w;
    build(b, &w, FAM_GEMMA3);
    gguf_file *f;
    tr_backend *be;
    model *m;
    open_model(b, &f, &be, &m);
    int32_t tok[MAXT];
    for (int i = 0; i < MAXT; i++) tok[i] = (int32_t)rnd(0, VOCAB) % VOCAB;
    run_ctx c;
    ctx_init(&c, m);
    const int n = MAXT - 1; /* the prompt; token n is decoded after it */
    float full[VOCAB], other[VOCAB], next[VOCAB];

    /* the whole prompt at once, then one decode step */
    run_chunks(&c, 0, tok, 0, n, n, full);
    run_chunks(&c, 0, tok, n, n + 1, 1, next);

    /* a cached prefix: sequence 1 shares sequence 0's first pages (as the
     * radix cache hands them out) and prefills only the rest, in pieces
     * that straddle the window */
    for (int cached = PAGE; cached < n; cached += 3 * PAGE) {
        int pages = cached / PAGE;
        for (int i = 0; i < c.n_pages; i++)
            c.table[1][i] = i < pages ? c.table[0][i] : c.n_pages + i;
        for (int chunk = 1; chunk <= n; chunk += 5) {
            run_chunks(&c, 1, tok, cached, n, chunk, other);
            assert_memory_equal(full, other, sizeof full);
        }
    }

    /* local layers (0 and 2) never read past their window: NaN in their
     * rows of positions n - WIN and before (the decode step at n reads
     * n - WIN + 1 .. n) leaves the decode step's bits unchanged */
    for (int l = 0; l < L; l++)
        if (tr_model_layer_window(m, l)) poison(&c, 0, l, n - WIN + 1);
    run_chunks(&c, 0, tok, n, n + 1, 1, other);
    assert_memory_equal(next, other, sizeof next);
    /* the same poison in the global layer shows */
    poison(&c, 0, 1, 1);
    run_chunks(&c, 0, tok, n, n + 1, 1, other);
    assert_true(isnan(other[0]));

    tr_model_kv_free(m, &c.kv);
    tr_model_free(m);
    tr_backend_free(be);
    tr_gguf_close(f);
    tg_free(b);
    free(b);
}

/* ---- load errors ---- */

static void expect_load_fail(tg_builder *b, tr_status code, ...) {
    gguf_file *f = NULL;
    tr_diag d = {0};
    assert_int_equal(tg_open(b, &f, &d), TR_OK);
    tr_backend *be = NULL;
    assert_int_equal(tr_backend_new("cpu", &(tr_backend_config){.threads = 1}, &be, NULL), TR_OK);
    model *sentinel = (model *)(uintptr_t)0x1234, *m = sentinel;
    tr_status s = tr_model_load(f, be, 8, &m, &d);
    if (s != code)
        fail_msg("got %s (%s), want %s", tr_status_name(s), d.message, tr_status_name(code));
    assert_ptr_equal(m, sentinel);
    va_list ap;
    va_start(ap, code);
    for (const char *sub; (sub = va_arg(ap, const char *));)
        if (!strstr(d.message, sub)) fail_msg("'%s' not in '%s'", sub, d.message);
    va_end(ap);
    tr_backend_free(be);
    tr_gguf_close(f);
}

static void drop_tensor(tg_builder *b, const char *name) {
    for (int i = 0; i < b->n_t; i++)
        if (strcmp(b->t[i].name, name) == 0) {
            free(b->t[i].data);
            b->t[i] = b->t[--b->n_t];
            return;
        }
    fail_msg("no tensor %s", name);
}

static void test_load_errors(void **state) {
    (void)state;
    tg_builder *b = calloc(1, sizeof *b);
    tiny w;

    build(b, &w, FAM_GEMMA3); /* the unsupported-architecture list */
    tg_drop_kv(b, "general.architecture");
    tg_str(b, "general.architecture", "gemma9");
    expect_load_fail(b, TR_ERR_UNSUPPORTED, "'gemma9'", "llama, qwen2, qwen3, gemma3", NULL);
    tg_free(b);

    build(b, &w, FAM_GEMMA3);
    tg_drop_kv(b, "gemma3.attention.layer_norm_rms_epsilon");
    expect_load_fail(b, TR_ERR_NOT_FOUND, "'gemma3.attention.layer_norm_rms_epsilon'",
                     "missing", NULL);
    tg_free(b);

    build(b, &w, FAM_GEMMA3); /* dim 64 is not 4 heads of 32 */
    tg_drop_kv(b, "gemma3.attention.key_length");
    tg_drop_kv(b, "gemma3.attention.value_length");
    expect_load_fail(b, TR_ERR_FORMAT, "'blk.0.attn_q.weight'", "shape", NULL);
    tg_free(b);

    build(b, &w, FAM_QWEN3);
    tg_drop_kv(b, "qwen3.attention.value_length");
    tg_u32(b, "qwen3.attention.value_length", 16);
    expect_load_fail(b, TR_ERR_UNSUPPORTED, "'qwen3.attention.key_length' (32)",
                     "'qwen3.attention.value_length' (16)", NULL);
    tg_free(b);

    build(b, &w, FAM_GEMMA3);
    tg_drop_kv(b, "gemma3.attention.sliding_window");
    tg_str(b, "gemma3.attention.sliding_window", "512");
    expect_load_fail(b, TR_ERR_FORMAT, "'gemma3.attention.sliding_window'", NULL);
    tg_free(b);

    build(b, &w, FAM_GEMMA3);
    tg_str(b, "gemma3.rope.scaling.type", "yarn");
    expect_load_fail(b, TR_ERR_UNSUPPORTED, "'gemma3.rope.scaling.type'", "'yarn'", NULL);
    tg_free(b);

    build(b, &w, FAM_GEMMA3);
    tg_drop_kv(b, "gemma3.final_logit_softcapping");
    tg_f32(b, "gemma3.final_logit_softcapping", -1.0f);
    expect_load_fail(b, TR_ERR_FORMAT, "'gemma3.final_logit_softcapping'", NULL);
    tg_free(b);

    build(b, &w, FAM_GEMMA3);
    drop_tensor(b, "blk.2.post_ffw_norm.weight");
    expect_load_fail(b, TR_ERR_NOT_FOUND, "'blk.2.post_ffw_norm.weight' missing", NULL);
    tg_free(b);

    build(b, &w, FAM_QWEN3);
    drop_tensor(b, "blk.1.attn_k_norm.weight");
    expect_load_fail(b, TR_ERR_NOT_FOUND, "'blk.1.attn_k_norm.weight' missing", NULL);
    tg_free(b);

    build(b, &w, FAM_QWEN2); /* biases: all three or none */
    drop_tensor(b, "blk.0.attn_v.bias");
    expect_load_fail(b, TR_ERR_FORMAT, "layer 0", "attn_v.bias", NULL);
    tg_free(b);

    build(b, &w, FAM_QWEN2);
    for (int i = 0; i < b->n_t; i++)
        if (strcmp(b->t[i].name, "blk.1.attn_k.bias") == 0) b->t[i].ne[0] = 7;
    expect_load_fail(b, TR_ERR_FORMAT, "'blk.1.attn_k.bias'", "shape", NULL);
    tg_free(b);

    build(b, &w, FAM_QWEN2);
    tg_u32(b, "qwen2.rope.dimension_count", 8);
    expect_load_fail(b, TR_ERR_UNSUPPORTED, "'qwen2.rope.dimension_count'", "partial", NULL);
    tg_free(b);

    free(b);
}

/* qwen2 without biases (allowed, as in llama.cpp) and gemma3 without a
 * window (every layer global), with a bool-per-layer pattern, with linear
 * rope scaling: each loads and its hyper-parameters say so. */
static void test_variants(void **state) {
    (void)state;
    tg_builder *b = calloc(1, sizeof *b);
    tiny w;
    gguf_file *f;
    tr_backend *be;
    model *m;

    build(b, &w, FAM_QWEN2);
    for (int l = 0; l < L; l++) {
        char n[64];
        const char *s[] = {"attn_q.bias", "attn_k.bias", "attn_v.bias"};
        for (int i = 0; i < 3; i++) {
            snprintf(n, sizeof n, "blk.%d.%s", l, s[i]);
            drop_tensor(b, n);
        }
    }
    open_model(b, &f, &be, &m);
    tr_model_free(m);
    tr_backend_free(be);
    tr_gguf_close(f);
    tg_free(b);

    build(b, &w, FAM_GEMMA3);
    tg_drop_kv(b, "gemma3.attention.sliding_window");
    tg_str(b, "gemma3.rope.scaling.type", "linear");
    tg_f32(b, "gemma3.rope.scaling.factor", 8.0f);
    open_model(b, &f, &be, &m);
    assert_int_equal(tr_model_get_hparams(m)->n_local_layers, 0);
    assert_true(tr_model_get_hparams(m)->rope_freq_scale == 0.125f);
    tr_kv_layout kv;
    assert_int_equal(tr_model_kv_alloc(m, 2, PAGE, TR_KV_F16, TR_KV_F16, &kv, NULL), TR_OK);
    assert_null(kv.window); /* no windows: the layout says none */
    tr_model_kv_free(m, &kv);
    tr_model_free(m);
    tr_backend_free(be);
    tr_gguf_close(f);
    tg_free(b);

    build(b, &w, FAM_GEMMA3);
    tg_drop_kv(b, "gemma3.attention.sliding_window_pattern");
    tg_u32(b, "gemma3.attention.sliding_window_pattern", 0); /* all local */
    open_model(b, &f, &be, &m);
    assert_int_equal(tr_model_get_hparams(m)->n_local_layers, L);
    tr_model_free(m);
    tr_backend_free(be);
    tr_gguf_close(f);
    tg_free(b);
    free(b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_families_match_float64),
        cmocka_unit_test(test_q4_keys_calibrated),
        cmocka_unit_test(test_sliding_window_pages),
        cmocka_unit_test(test_load_errors),
        cmocka_unit_test(test_variants),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
