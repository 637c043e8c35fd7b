/* test_quant.c — the CPU backend's quantized math (kernels/cpu/quant_math_internal.h).
 *
 * What is checked, for every weight type (F32 F16 BF16 Q4_0 Q4_1 Q5_0 Q5_1
 * Q8_0 Q4_K Q5_K Q6_K) and every kernel set this CPU runs (portable, avx2,
 * avx512vnni):
 *  - fp16/bf16 conversions: every fp16 value against its exact value, and
 *    float->fp16/bf16 rounding against a nearest-neighbour search;
 *  - dequantize_row on hand-built blocks whose values were worked out by
 *    hand, on pseudo-random blocks against checksums computed by the gguf
 *    Python package (an independent decoder), and against this file's own
 *    double-precision decoder (exact equality: a dequantized value is
 *    rounded once);
 *  - quantize_act_row against this file's own statement of the activation
 *    format (bitwise), and identical in every set;
 *  - matmul_tile against a double-precision dot of the dequantized weights
 *    with (a) the activations as quantized (only float rounding may differ:
 *    catches any indexing bug) and (b) the original float activations
 *    within the activation-quantization bound of quant_math_internal.h;
 *  - determinism: bitwise equal outputs across kernel sets, n_tok in
 *    {1,2,3,5,8,17,70}, token positions in the batch, row splits, odd row
 *    counts, accumulate mode; nothing outside the output tile is written;
 *  - the real default model (if present): rows of blk.0.attn_q.weight,
 *    blk.0.ffn_down.weight and token_embd.weight against gguf-package
 *    checksums, and matmuls with them.
 */
#include <float.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/unit/harness.h"

#include "kernels/cpu/quant_math_internal.h"
#include "kernels/cpu/quant_internal.h"
#include "kernels/dtype.h"
#include "base/paths.h"
#include "base/util.h"
#include "runtime/gguf/gguf.h"

static const tr_dtype k_types[] = {
    TR_DTYPE_F32,  TR_DTYPE_F16,  TR_DTYPE_BF16, TR_DTYPE_Q4_0,
    TR_DTYPE_Q4_1, TR_DTYPE_Q5_0, TR_DTYPE_Q5_1, TR_DTYPE_Q8_0,
    TR_DTYPE_Q4_K, TR_DTYPE_Q5_K, TR_DTYPE_Q6_K,
};
#define N_TYPES ((int)(sizeof k_types / sizeof k_types[0]))

/* ---- kernel sets available here ---- */

/* The sets under test: portable first (every other set is checked against
 * it), then the set TRELLIS_TEST_KERNELS names, or every set this CPU runs
 * (harness.h, "Kernel-set variants"). */
static int kernel_sets(const cpu_quant_kernels *out[3]) {
    static const char *names[] = {"portable", "avx2", "avx512vnni"};
    int n = 0;
    for (int i = 0; i < 3; i++) {
        const cpu_quant_kernels *k = tr_cpu_quant_get(names[i]);
        if (k && (i == 0 || tr_test_kernels_wanted(names[i]))) out[n++] = k;
    }
    return n;
}

static int quant_set_runs_here(const char *set) { return tr_cpu_quant_get(set) != NULL; }

/* ---- random numbers ---- */

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static uint64_t rnd_u64(void) {
    uint64_t z = (g_rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static double rnd_uniform(void) { return (double)(rnd_u64() >> 11) * 0x1p-53; }
static float rnd_gauss(void) {
    double u = rnd_uniform() + 1e-300, v = rnd_uniform();
    return (float)(sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v));
}

static void put16(uint8_t *p, uint16_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}
static uint16_t get16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }

static size_t row_bytes(tr_dtype t, int64_t cols) {
    uint64_t n = 0;
    assert_true(tr_dtype_row_bytes(t, (uint64_t)cols, &n));
    return (size_t)n;
}

/* ---- an independent double-precision decoder (reference) ---- */

static double exact_fp16(uint16_t h) {
    int e = (h >> 10) & 31, m = h & 1023;
    double s = (h & 0x8000) ? -1.0 : 1.0;
    if (e == 31) return m ? NAN : s * INFINITY;
    if (e == 0) return s * ldexp(m, -24);
    return s * ldexp(1024 + m, e - 25);
}

/* Decodes n values of type t into y (exactly, in double). If mt is not
 * NULL, mt[i] = |the offset term| of element i for the types whose kernels
 * add it separately (Q4_1/Q5_1 m; Q4_K/Q5_K dmin*m), else 0: the partial
 * sums can then be larger than |w| and so can their rounding. */
static void ref_dequant_mt(tr_dtype t, const uint8_t *src, double *y, double *mt,
                           int64_t n);
static void ref_dequant(tr_dtype t, const uint8_t *src, double *y, int64_t n) {
    ref_dequant_mt(t, src, y, NULL, n);
}

static void ref_dequant_mt(tr_dtype t, const uint8_t *src, double *y, double *mt,
                           int64_t n) {
    if (mt)
        for (int64_t i = 0; i < n; i++) mt[i] = 0;
    switch (t) {
    case TR_DTYPE_F32:
        for (int64_t i = 0; i < n; i++) {
            float f;
            memcpy(&f, src + 4 * i, 4);
            y[i] = f;
        }
        return;
    case TR_DTYPE_F16:
        for (int64_t i = 0; i < n; i++) y[i] = exact_fp16(get16(src + 2 * i));
        return;
    case TR_DTYPE_BF16:
        for (int64_t i = 0; i < n; i++) {
            uint32_t b = (uint32_t)get16(src + 2 * i) << 16;
            float f;
            memcpy(&f, &b, 4);
            y[i] = f;
        }
        return;
    default:
        break;
    }
    const int64_t bs = tr_dtype_block_size(t), tsz = tr_dtype_type_size(t);
    for (int64_t blk = 0; blk < n / bs; blk++) {
        const uint8_t *b = src + blk * tsz;
        double *o = y + blk * bs;
        switch (t) {
        case TR_DTYPE_Q4_0:
        case TR_DTYPE_Q4_1:
        case TR_DTYPE_Q5_0:
        case TR_DTYPE_Q5_1: {
            const bool one = t == TR_DTYPE_Q4_1 || t == TR_DTYPE_Q5_1;
            const bool five = t == TR_DTYPE_Q5_0 || t == TR_DTYPE_Q5_1;
            double d = exact_fp16(get16(b)), m = one ? exact_fp16(get16(b + 2)) : 0;
            const uint8_t *p = b + (one ? 4 : 2);
            uint32_t qh = 0;
            if (five) {
                qh = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                     (uint32_t)p[3] << 24;
                p += 4;
            }
            for (int e = 0; e < 32; e++) {
                int q = e < 16 ? p[e] & 15 : p[e - 16] >> 4;
                if (five) q += (int)((qh >> e) & 1) * 16;
                int off = one ? 0 : five ? 16 : 8;
                o[e] = d * (q - off) + m;
                if (mt) mt[blk * bs + e] = fabs(m);
            }
            break;
        }
        case TR_DTYPE_Q8_0: {
            double d = exact_fp16(get16(b));
            for (int e = 0; e < 32; e++) o[e] = d * (int8_t)b[2 + e];
            break;
        }
        case TR_DTYPE_Q4_K:
        case TR_DTYPE_Q5_K: {
            const bool five = t == TR_DTYPE_Q5_K;
            double d = exact_fp16(get16(b)), dmin = exact_fp16(get16(b + 2));
            const uint8_t *s = b + 4, *qh = b + 16, *qs = b + (five ? 48 : 16);
            for (int e = 0; e < 256; e++) {
                int sub = e / 32, c = e / 64, l = e % 32, hi = (e / 32) & 1;
                int sc, m;
                if (sub < 4) {
                    sc = s[sub] & 63;
                    m = s[sub + 4] & 63;
                } else {
                    sc = (s[sub + 4] & 15) | ((s[sub - 4] >> 6) << 4);
                    m = (s[sub + 4] >> 4) | ((s[sub] >> 6) << 4);
                }
                int q = hi ? qs[32 * c + l] >> 4 : qs[32 * c + l] & 15;
                if (five) q += ((qh[l] >> (2 * c + hi)) & 1) * 16;
                o[e] = d * sc * q - dmin * m;
                if (mt) mt[blk * bs + e] = fabs(dmin * m);
            }
            break;
        }
        default: { /* Q6_K */
            double d = exact_fp16(get16(b + 208));
            const uint8_t *ql = b, *qh = b + 128;
            const int8_t *sc = (const int8_t *)(b + 192);
            for (int e = 0; e < 256; e++) {
                int n = e / 128, r = e % 128, k = r / 32, l = r % 32;
                int lo = k & 1 ? ql[64 * n + l + 32] : ql[64 * n + l];
                lo = k >= 2 ? lo >> 4 : lo & 15;
                int h = (qh[32 * n + l] >> (2 * k)) & 3;
                o[e] = d * sc[e / 16] * ((lo | h << 4) - 32);
            }
            break;
        }
        }
    }
}

/* ---- simple reference quantizers (for test data, not optimal) ---- */

static float clampf(float v, float lo, float hi) { return v < lo ? lo : v > hi ? hi : v; }

static void quant_row(tr_dtype t, const float *x, uint8_t *dst, int64_t n) {
    switch (t) {
    case TR_DTYPE_F32:
        memcpy(dst, x, (size_t)n * 4);
        return;
    case TR_DTYPE_F16:
        for (int64_t i = 0; i < n; i++) put16(dst + 2 * i, cpu_fp32_to_fp16(x[i]));
        return;
    case TR_DTYPE_BF16:
        for (int64_t i = 0; i < n; i++) put16(dst + 2 * i, cpu_fp32_to_bf16(x[i]));
        return;
    default:
        break;
    }
    const int64_t bs = tr_dtype_block_size(t), tsz = tr_dtype_type_size(t);
    for (int64_t blk = 0; blk < n / bs; blk++) {
        const float *v = x + blk * bs;
        uint8_t *b = dst + blk * tsz;
        memset(b, 0, (size_t)tsz);
        if (bs == 32) {
            float amax = 0, mn = v[0], mx = v[0];
            for (int i = 0; i < 32; i++) {
                amax = fmaxf(amax, fabsf(v[i]));
                mn = fminf(mn, v[i]);
                mx = fmaxf(mx, v[i]);
            }
            int q[32];
            const bool one = t == TR_DTYPE_Q4_1 || t == TR_DTYPE_Q5_1;
            const int nmax = t == TR_DTYPE_Q4_0 || t == TR_DTYPE_Q4_1 ? 15
                           : t == TR_DTYPE_Q8_0 ? 127 : 31;
            float d;
            if (one) {
                d = (mx - mn) / (float)nmax;
                put16(b, cpu_fp32_to_fp16(d));
                put16(b + 2, cpu_fp32_to_fp16(mn));
                float df = cpu_fp16_to_fp32(get16(b)), mf = cpu_fp16_to_fp32(get16(b + 2));
                for (int i = 0; i < 32; i++)
                    q[i] = df > 0 ? (int)clampf(roundf((v[i] - mf) / df), 0, (float)nmax) : 0;
            } else {
                const int off = t == TR_DTYPE_Q4_0 ? 8 : t == TR_DTYPE_Q5_0 ? 16 : 0;
                d = amax / (float)(t == TR_DTYPE_Q8_0 ? 127 : off - 1);
                put16(b, cpu_fp32_to_fp16(d));
                float df = cpu_fp16_to_fp32(get16(b));
                for (int i = 0; i < 32; i++) {
                    float r = df > 0 ? roundf(v[i] / df) : 0;
                    q[i] = t == TR_DTYPE_Q8_0 ? (int)clampf(r, -127, 127)
                                              : (int)clampf(r + (float)off, 0, (float)(2 * off - 1));
                }
            }
            if (t == TR_DTYPE_Q8_0) {
                for (int i = 0; i < 32; i++) b[2 + i] = (uint8_t)(int8_t)q[i];
                continue;
            }
            uint8_t *p = b + (one ? 4 : 2);
            if (t == TR_DTYPE_Q5_0 || t == TR_DTYPE_Q5_1) {
                uint32_t qh = 0;
                for (int i = 0; i < 32; i++) qh |= (uint32_t)((q[i] >> 4) & 1) << i;
                for (int k = 0; k < 4; k++) p[k] = (uint8_t)(qh >> (8 * k));
                p += 4;
            }
            for (int j = 0; j < 16; j++) p[j] = (uint8_t)((q[j] & 15) | (q[j + 16] & 15) << 4);
            continue;
        }
        int q[256];
        if (t == TR_DTYPE_Q6_K) {
            float scale[16], smax = 0;
            for (int s = 0; s < 16; s++) {
                float a = 0;
                for (int i = 0; i < 16; i++) a = fmaxf(a, fabsf(v[16 * s + i]));
                scale[s] = (s & 1 ? -a : a) / 31.0f; /* odd sub-blocks: negative scales */
                smax = fmaxf(smax, fabsf(scale[s]));
            }
            float d = smax / 127.0f;
            put16(b + 208, cpu_fp32_to_fp16(d));
            float df = cpu_fp16_to_fp32(get16(b + 208));
            for (int s = 0; s < 16; s++) {
                int sc = df > 0 ? (int)clampf(roundf(scale[s] / df), -127, 127) : 0;
                b[192 + s] = (uint8_t)(int8_t)sc;
                float step = df * (float)sc;
                for (int i = 0; i < 16; i++)
                    q[16 * s + i] = step != 0 ? (int)clampf(roundf(v[16 * s + i] / step) + 32, 0, 63) : 32;
            }
            for (int n2 = 0; n2 < 2; n2++)
                for (int l = 0; l < 32; l++) {
                    const int *e = q + 128 * n2 + l;
                    b[64 * n2 + l] = (uint8_t)((e[0] & 15) | (e[64] & 15) << 4);
                    b[64 * n2 + l + 32] = (uint8_t)((e[32] & 15) | (e[96] & 15) << 4);
                    b[128 + 32 * n2 + l] = (uint8_t)((e[0] >> 4) | (e[32] >> 4) << 2 |
                                                     (e[64] >> 4) << 4 | (e[96] >> 4) << 6);
                }
            continue;
        }
        /* Q4_K / Q5_K */
        const bool five = t == TR_DTYPE_Q5_K;
        const int nmax = five ? 31 : 15;
        float scale[8], msub[8], smax = 0, mmax = 0;
        for (int s = 0; s < 8; s++) {
            float mn = 0, mx = 0;
            for (int i = 0; i < 32; i++) {
                mn = fminf(mn, v[32 * s + i]);
                mx = fmaxf(mx, v[32 * s + i]);
            }
            scale[s] = (mx - mn) / (float)nmax;
            msub[s] = -mn;
            smax = fmaxf(smax, scale[s]);
            mmax = fmaxf(mmax, msub[s]);
        }
        put16(b, cpu_fp32_to_fp16(smax / 63.0f));
        put16(b + 2, cpu_fp32_to_fp16(mmax / 63.0f));
        float df = cpu_fp16_to_fp32(get16(b)), dmf = cpu_fp16_to_fp32(get16(b + 2));
        int sc[8], m[8];
        for (int s = 0; s < 8; s++) {
            sc[s] = df > 0 ? (int)clampf(roundf(scale[s] / df), 0, 63) : 0;
            m[s] = dmf > 0 ? (int)clampf(roundf(msub[s] / dmf), 0, 63) : 0;
            float step = df * (float)sc[s], off = dmf * (float)m[s];
            for (int i = 0; i < 32; i++)
                q[32 * s + i] = step > 0 ? (int)clampf(roundf((v[32 * s + i] + off) / step), 0, (float)nmax) : 0;
        }
        uint8_t *s6 = b + 4;
        for (int j = 0; j < 4; j++) {
            s6[j] = (uint8_t)(sc[j] | (sc[j + 4] >> 4) << 6);
            s6[j + 4] = (uint8_t)(m[j] | (m[j + 4] >> 4) << 6);
            s6[j + 8] = (uint8_t)((sc[j + 4] & 15) | (m[j + 4] & 15) << 4);
        }
        uint8_t *qh = b + 16, *qs = b + (five ? 48 : 16);
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++) {
                int lo = q[64 * c + l], hi = q[64 * c + 32 + l];
                qs[32 * c + l] = (uint8_t)((lo & 15) | (hi & 15) << 4);
                if (five) qh[l] |= (uint8_t)(((lo >> 4) & 1) << (2 * c) | ((hi >> 4) & 1) << (2 * c + 1));
            }
    }
}

/* Random bytes in every block, with fp16 scale fields of moderate size
 * (either sign): exercises every quant pattern (Q8_0's -128, Q6_K's
 * negative scales, the 6-bit scales' top bits). */
static void random_row(tr_dtype t, uint8_t *dst, int64_t n) {
    if (t == TR_DTYPE_F32 || t == TR_DTYPE_F16 || t == TR_DTYPE_BF16) {
        float *tmp = malloc((size_t)n * sizeof(float));
        assert_non_null(tmp);
        for (int64_t i = 0; i < n; i++) tmp[i] = rnd_gauss();
        quant_row(t, tmp, dst, n);
        free(tmp);
        return;
    }
    const int64_t bs = tr_dtype_block_size(t), tsz = tr_dtype_type_size(t);
    for (int64_t i = 0; i < n / bs * tsz; i++) dst[i] = (uint8_t)(rnd_u64() >> 56);
    for (int64_t blk = 0; blk < n / bs; blk++) {
        uint8_t *b = dst + blk * tsz;
        int offs[2] = {0, -1};
        if (t == TR_DTYPE_Q4_1 || t == TR_DTYPE_Q5_1 || t == TR_DTYPE_Q4_K || t == TR_DTYPE_Q5_K)
            offs[1] = 2;
        if (t == TR_DTYPE_Q6_K) offs[0] = 208;
        for (int k = 0; k < 2; k++) {
            if (offs[k] < 0) continue;
            uint16_t v = (uint16_t)rnd_u64();
            put16(b + offs[k], (uint16_t)(0x1c00 | (v & 0x0fff) | (v & 0x8000)));
        }
    }
}

/* ---- fp16 / bf16 ---- */

static void test_fp16_all_values(void **state) {
    (void)state;
    for (uint32_t h = 0; h < 65536; h++) {
        double e = exact_fp16((uint16_t)h);
        float f = cpu_fp16_to_fp32((uint16_t)h);
        if (isnan(e)) {
            assert_true(isnan(f));
            assert_true(isnan(cpu_fp16_to_fp32(cpu_fp32_to_fp16(f))));
            continue;
        }
        assert_true((double)f == e);
        assert_int_equal(cpu_fp32_to_fp16(f), h); /* round trip */
    }
    /* rounding: nearest, ties to even, overflow to inf */
    assert_int_equal(cpu_fp32_to_fp16(1.0f + 0x1p-11f), 0x3c00);     /* tie -> even */
    assert_int_equal(cpu_fp32_to_fp16(1.0f + 3 * 0x1p-11f), 0x3c02); /* tie -> even */
    assert_int_equal(cpu_fp32_to_fp16(65504.0f), 0x7bff);
    assert_int_equal(cpu_fp32_to_fp16(65519.0f), 0x7bff);
    assert_int_equal(cpu_fp32_to_fp16(65520.0f), 0x7c00);
    assert_int_equal(cpu_fp32_to_fp16(-1e9f), 0xfc00);
    assert_int_equal(cpu_fp32_to_fp16(0x1p-25f), 0x0000);          /* tie -> even (0) */
    assert_int_equal(cpu_fp32_to_fp16(0x1.8p-25f), 0x0001);
    assert_int_equal(cpu_fp32_to_fp16(3 * 0x1p-25f), 0x0002);      /* 1.5 ulp -> 2 */
    assert_int_equal(cpu_fp32_to_fp16(0x1.ff8p-15f), 0x03ff);      /* largest subnormal */
    assert_int_equal(cpu_fp32_to_fp16(0x1.ffcp-15f), 0x0400);      /* tie -> smallest normal */
    /* random floats: the result is a nearest fp16 */
    for (int i = 0; i < 200000; i++) {
        uint32_t bits = (uint32_t)rnd_u64();
        bits = (bits & 0x807fffffu) | ((uint32_t)(96 + rnd_u64() % 50) << 23);
        float f;
        memcpy(&f, &bits, 4);
        uint16_t h = cpu_fp32_to_fp16(f);
        double e = fabs(exact_fp16(h) - f);
        if ((h & 0x7fff) == 0x7c00) {
            assert_true(fabs(f) >= 65520.0);
            continue;
        }
        double up = fabs(exact_fp16((uint16_t)(h + 1)) - f);
        double dn = (h & 0x7fff) ? fabs(exact_fp16((uint16_t)(h - 1)) - f) : INFINITY;
        assert_true(e <= up && e <= dn);
    }
    /* bf16 */
    assert_true(cpu_bf16_to_fp32(0x3f80) == 1.0f);
    assert_true(cpu_bf16_to_fp32(0xc040) == -3.0f);
    assert_int_equal(cpu_fp32_to_bf16(1.0f), 0x3f80);
    assert_int_equal(cpu_fp32_to_bf16(1.0f + 0x1p-8f), 0x3f80);     /* tie -> even */
    assert_int_equal(cpu_fp32_to_bf16(1.0f + 3 * 0x1p-8f), 0x3f82); /* tie -> even */
    assert_true(isnan(cpu_bf16_to_fp32(cpu_fp32_to_bf16(NAN))));
    uint16_t src[3] = {0x3c00, 0xc000, 0x0001};
    float dst[3];
    tr_cpu_fp16_to_fp32_row(src, dst, 3);
    assert_true(dst[0] == 1.0f && dst[1] == -2.0f && dst[2] == 0x1p-24f);
    uint16_t back[3];
    tr_cpu_fp32_to_fp16_row(dst, back, 3);
    assert_memory_equal(back, src, sizeof src);
}

/* ---- sizes ---- */

static void test_sizes(void **state) {
    (void)state;
    for (int i = 0; i < N_TYPES; i++) {
        tr_dtype t = k_types[i];
        int64_t bs = tr_dtype_block_size(t);
        assert_true(tr_cpu_quant_supported(t, 256));
        assert_true(tr_cpu_quant_supported(t, 1536));
        size_t n = tr_cpu_quant_act_row_bytes(t, 1536);
        assert_true(n > 0 && n % 64 == 0);
        if (bs > 1) {
            assert_false(tr_cpu_quant_supported(t, bs + 1));
            assert_int_equal(tr_cpu_quant_act_row_bytes(t, bs / 2), 0);
        }
        assert_false(tr_cpu_quant_supported(t, 0));
        assert_false(tr_cpu_quant_supported(t, -256));
        assert_false(tr_cpu_quant_supported(t, ((int64_t)1 << 24) + 256));
    }
    assert_true(tr_cpu_quant_supported(TR_DTYPE_F32, 7));
    assert_int_equal(tr_cpu_quant_act_row_bytes(TR_DTYPE_F32, 7), 64);
    assert_int_equal(tr_cpu_quant_act_row_bytes(TR_DTYPE_Q4_1, 576), 832); /* 18 * 44 -> 64 */
    assert_int_equal(tr_cpu_quant_act_row_bytes(TR_DTYPE_Q4_K, 512), 640);
    assert_false(tr_cpu_quant_supported(TR_DTYPE_Q2_K, 256));
    assert_false(tr_cpu_quant_supported(TR_DTYPE_Q8_1, 256));
    assert_false(tr_cpu_quant_supported((tr_dtype)4, 256));
    assert_int_equal(tr_cpu_quant_act_row_bytes(TR_DTYPE_IQ2_XS, 256), 0);
    /* selection */
    assert_string_equal(tr_cpu_quant_select(true)->name, "portable");
    assert_non_null(tr_cpu_quant_select(false));
    assert_null(tr_cpu_quant_get("nope"));
    assert_null(tr_cpu_quant_get(NULL));
}

/* ---- dequantization ---- */

static void dequant_all_sets(tr_dtype t, const uint8_t *src, int64_t n, float *out) {
    const cpu_quant_kernels *ks[3];
    int nk = kernel_sets(ks);
    ks[0]->dequantize_row(t, src, out, n);
    float *tmp = malloc((size_t)n * sizeof(float));
    assert_non_null(tmp);
    for (int k = 1; k < nk; k++) {
        ks[k]->dequantize_row(t, src, tmp, n);
        assert_memory_equal(tmp, out, (size_t)n * sizeof(float));
    }
    free(tmp);
}

static void test_dequant_known_blocks(void **state) {
    (void)state;
    uint8_t b[210];
    float y[256];

    memset(b, 0x88, sizeof b); /* Q4_0: d = 0.5, every other quant 8 -> 0 */
    put16(b, 0x3800);
    b[2 + 0] = 0x3a;
    dequant_all_sets(TR_DTYPE_Q4_0, b, 32, y);
    assert_true(y[0] == 1.0f && y[16] == -2.5f && y[1] == 0.0f && y[31] == 0.0f);

    memset(b, 0, sizeof b); /* Q4_1: d = 1, m = -2 */
    put16(b, 0x3c00);
    put16(b + 2, 0xc000);
    b[4 + 1] = 0xf0;
    dequant_all_sets(TR_DTYPE_Q4_1, b, 32, y);
    assert_true(y[1] == -2.0f && y[17] == 13.0f && y[0] == -2.0f);

    memset(b, 0, sizeof b); /* Q5_0: d = 2, qh bits 0 and 20 */
    put16(b, 0x4000);
    b[2] = 0x01;
    b[4] = 0x10;
    b[6 + 0] = 0x21;
    b[6 + 4] = 0x05;
    dequant_all_sets(TR_DTYPE_Q5_0, b, 32, y);
    assert_true(y[0] == 2.0f && y[16] == -28.0f && y[4] == -22.0f && y[20] == 0.0f);
    assert_true(y[1] == -32.0f);

    memset(b, 0, sizeof b); /* Q5_1: d = 0.5, m = 1, qh bit 31 */
    put16(b, 0x3800);
    put16(b + 2, 0x3c00);
    b[7] = 0x80;
    b[8 + 15] = 0xf3;
    dequant_all_sets(TR_DTYPE_Q5_1, b, 32, y);
    assert_true(y[15] == 2.5f && y[31] == 16.5f && y[0] == 1.0f);

    memset(b, 0, sizeof b); /* Q8_0: d = 0.25 */
    put16(b, 0x3400);
    b[2] = 0x80;
    b[2 + 31] = 127;
    dequant_all_sets(TR_DTYPE_Q8_0, b, 32, y);
    assert_true(y[0] == -32.0f && y[31] == 31.75f && y[5] == 0.0f);

    /* Q4_K: d = 1, dmin = 0.5; sub-block 0: sc 1, m 2; sub-block 5: sc 33,
     * m 17 (6-bit values split across the packed bytes) */
    static const uint8_t ks[12] = {0x01, 0x80, 0, 0, 0x02, 0x40, 0, 0, 0, 0x11, 0, 0};
    for (int five = 0; five < 2; five++) {
        tr_dtype t = five ? TR_DTYPE_Q5_K : TR_DTYPE_Q4_K;
        memset(b, 0, sizeof b);
        put16(b, 0x3c00);
        put16(b + 2, 0x3800);
        memcpy(b + 4, ks, 12);
        uint8_t *qs = b + (five ? 48 : 16);
        qs[0] = 0x07;       /* element 0: q 7 */
        qs[64 + 3] = 0x90;  /* element 163 (chunk 2, high nibble): q 9 */
        if (five) {
            b[16 + 0] = 0x01; /* element 0: +16 */
            b[16 + 3] = 0x20; /* element 163: bit 5 -> +16 */
        }
        dequant_all_sets(t, b, 256, y);
        assert_true(y[0] == (five ? 22.0f : 6.0f));
        assert_true(y[163] == (five ? 816.5f : 288.5f));
        assert_true(y[1] == -1.0f);   /* sub-block 0, q 0: -dmin*m */
        assert_true(y[40] == 0.0f);   /* sub-block 1: sc 0, m 0 */
        assert_true(y[170] == -8.5f); /* sub-block 5, q 0 */
    }

    memset(b, 0, sizeof b); /* Q6_K: d = 0.5, scales[0] = -3, scales[15] = 5 */
    put16(b + 208, 0x3800);
    b[192] = (uint8_t)(int8_t)-3;
    b[192 + 15] = 5;
    b[0] = 0x0f;     /* element 0: low 4 bits 15 */
    b[128] = 0x03;   /* element 0: high 2 bits 3 -> q 63 */
    b[127] = 0x20;   /* element 255: ql[64+63] high nibble 2 */
    b[128 + 63] = 0x40; /* element 255: qh[32+31] bits 6-7 = 1 -> q 18 */
    dequant_all_sets(TR_DTYPE_Q6_K, b, 256, y);
    assert_true(y[0] == -46.5f);
    assert_true(y[255] == -35.0f);
    assert_true(y[1] == 48.0f); /* q 0 -> 0.5 * -3 * -32 */
    assert_true(y[100] == 0.0f);

    /* float types */
    uint8_t f[16];
    put16(f, 0x3c00);
    put16(f + 2, 0xc000);
    put16(f + 4, 0x0001);
    put16(f + 6, 0x7c00);
    dequant_all_sets(TR_DTYPE_F16, f, 4, y);
    assert_true(y[0] == 1.0f && y[1] == -2.0f && y[2] == 0x1p-24f && isinf(y[3]));
    put16(f, 0x3f80);
    put16(f + 2, 0xc040);
    dequant_all_sets(TR_DTYPE_BF16, f, 2, y);
    assert_true(y[0] == 1.0f && y[1] == -3.0f);
    float g[2] = {1.5f, -0.25f};
    dequant_all_sets(TR_DTYPE_F32, (const uint8_t *)g, 2, y);
    assert_true(y[0] == 1.5f && y[1] == -0.25f);
}

/* Pseudo-random blocks (a 64-bit LCG's top bytes, fp16 scale fields forced
 * into 2^-7..2^-4) against checksums computed with the `gguf` Python
 * package's dequantize(), an independent decoder. */
typedef struct golden {
    tr_dtype t;
    double s1, s2, x5, xlast;
} golden;

static const golden k_golden[] = {
    {TR_DTYPE_Q4_0, 1.861083984375, 67.1634521484375, 0.01861572265625, 0.0369873046875},
    {TR_DTYPE_Q4_1, 0.757080078125, 731.3418273925781, -0.10577392578125, 1.1556396484375},
    {TR_DTYPE_Q5_0, -0.0645294189453125, 234.4065704345703, 0.0301666259765625, 0.274658203125},
    {TR_DTYPE_Q5_1, -54.163330078125, -2282.4678802490234, -0.062042236328125, -0.182525634765625},
    {TR_DTYPE_Q8_0, -44.493797302246094, -3569.794677734375, 1.6021728515625, 0.1900634765625},
    {TR_DTYPE_Q4_K, -4294.737991333008, -180793.77013397217, 0.811767578125, 13.24267578125},
    {TR_DTYPE_Q5_K, 12581.162986755371, 685315.1598129272, 18.6842041015625, 10.650741577148438},
    {TR_DTYPE_Q6_K, -735.3355407714844, -74039.70918273926, 183.570556640625, -46.904754638671875},
};

static void lcg_blocks(tr_dtype t, uint8_t *b, int nblk) {
    const int tsz = (int)tr_dtype_type_size(t);
    uint64_t x = 1000 + (uint64_t)t;
    for (int i = 0; i < tsz * nblk; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        b[i] = (uint8_t)(x >> 56);
    }
    int offs[2] = {0, -1};
    if (t == TR_DTYPE_Q4_1 || t == TR_DTYPE_Q5_1 || t == TR_DTYPE_Q4_K || t == TR_DTYPE_Q5_K)
        offs[1] = 2;
    if (t == TR_DTYPE_Q6_K) offs[0] = 208;
    for (int k = 0; k < nblk; k++)
        for (int i = 0; i < 2; i++) {
            if (offs[i] < 0) continue;
            uint16_t v = get16(b + k * tsz + offs[i]);
            put16(b + k * tsz + offs[i], (uint16_t)(0x2000 | (v & 0x0fff) | (v & 0x8000)));
        }
}

static void test_dequant_golden(void **state) {
    (void)state;
    for (size_t g = 0; g < sizeof k_golden / sizeof k_golden[0]; g++) {
        const golden *e = &k_golden[g];
        const int bs = (int)tr_dtype_block_size(e->t), n = 3 * bs;
        uint8_t b[3 * 210];
        float y[768];
        double r[768];
        lcg_blocks(e->t, b, 3);
        dequant_all_sets(e->t, b, n, y);
        ref_dequant(e->t, b, r, n);
        double s1 = 0, s2 = 0;
        for (int i = 0; i < n; i++) {
            assert_true(y[i] == (float)r[i]); /* rounded once from the exact value */
            s1 += y[i];
            s2 += y[i] * ((i % 97) + 1);
        }
        double sc = fabs(e->s2) + 1.0;
        if (fabs(s1 - e->s1) > 1e-6 * sc || fabs(s2 - e->s2) > 1e-6 * sc ||
            fabs(y[5] - e->x5) > 1e-6 * fabs(e->x5) || fabs(y[n - 1] - e->xlast) > 1e-6 * fabs(e->xlast))
            fail_msg("%s: got %.17g %.17g %.9g %.9g", tr_dtype_name(e->t), s1, s2, y[5], y[n - 1]);
    }
}

/* ---- activation quantization ---- */

/* This file's own statement of the activation format (quant_internal.h):
 * writes what quantize_act_row must produce, into a zeroed buffer. */
static void my_act_row(tr_dtype t, const float *x, int64_t cols, uint8_t *row) {
    cpu_act_kind k = cpu_q_act_kind(t);
    if (k == CPU_ACT_FLOAT) {
        memcpy(row, x, (size_t)cols * 4);
        return;
    }
    const int bs = k == CPU_ACT_A32 ? 32 : 256;
    const int64_t nb = cols / bs;
    for (int64_t b = 0; b < nb; b++) {
        const float *v = x + b * bs;
        int8_t *q = (int8_t *)row + b * bs;
        float amax = 0;
        bool finite = true;
        for (int i = 0; i < bs; i++) {
            if (!isfinite(v[i])) finite = false;
            amax = fmaxf(amax, fabsf(v[i]));
        }
        float d;
        int sum = 0;
        if (!finite) {
            d = NAN;
        } else if (amax < 1e-30f) {
            d = 0;
        } else {
            d = amax / 127.0f;
            float id = 127.0f / amax;
            for (int i = 0; i < bs; i++) {
                q[i] = (int8_t)lrintf(v[i] * id);
                sum += q[i];
            }
        }
        if (bs == 32) {
            float s = d * (float)sum;
            memcpy(row + nb * 32 + 4 * b, &d, 4);
            memcpy(row + nb * 36 + 4 * b, &s, 4);
            int32_t si = sum;
            memcpy(row + nb * 40 + 4 * b, &si, 4);
        } else {
            memcpy(row + nb * 256 + 4 * b, &d, 4);
            for (int s = 0; s < 16; s++) {
                int16_t a = 0;
                for (int i = 0; i < 16; i++) a = (int16_t)(a + q[16 * s + i]);
                memcpy(row + nb * 260 + 2 * (16 * b + s), &a, 2);
            }
            for (int s = 0; s < 8; s++) {
                int16_t a = 0;
                for (int i = 0; i < 32; i++) a = (int16_t)(a + q[32 * s + i]);
                memcpy(row + nb * 292 + 2 * (8 * b + s), &a, 2);
            }
        }
    }
}

/* The used bytes of an activation row (not the trailing padding). */
static size_t act_used(tr_dtype t, int64_t cols) {
    switch (cpu_q_act_kind(t)) {
    case CPU_ACT_A32: return (size_t)cols / 32 * 44;
    case CPU_ACT_A256: return (size_t)cols / 256 * 308;
    default: return (size_t)((cols + 7) / 8 * 8) * 4;
    }
}

static void test_act_quant(void **state) {
    (void)state;
    const cpu_quant_kernels *ks[3];
    int nk = kernel_sets(ks);
    const int64_t cols = 1280;
    float *x = malloc(cols * sizeof(float));
    assert_non_null(x);
    for (int i = 0; i < N_TYPES; i++) {
        tr_dtype t = k_types[i];
        size_t nbytes = tr_cpu_quant_act_row_bytes(t, cols);
        uint8_t *mine = calloc(1, nbytes), *got = malloc(nbytes);
        assert_non_null(mine);
        assert_non_null(got);
        for (int trial = 0; trial < 4; trial++) {
            for (int64_t c = 0; c < cols; c++)
                x[c] = rnd_gauss() * (trial == 1 ? 1e-3f : trial == 2 ? 300.0f : 1.0f);
            if (trial == 3) { /* special blocks: zero, tiny, exact ties, inf, NaN */
                for (int c = 0; c < 256; c++) x[c] = 0.0f;
                for (int c = 256; c < 512; c++) x[c] = 1e-35f * (float)(c & 7);
                for (int c = 512; c < 544; c++) x[c] = (float)(c - 528) * 0.5f;
                x[600] = INFINITY;
                x[900] = NAN;
            }
            memset(mine, 0, nbytes);
            my_act_row(t, x, cols, mine);
            for (int k = 0; k < nk; k++) {
                memset(got, 0xa5, nbytes);
                ks[k]->quantize_act_row(t, x, got, cols);
                if (memcmp(got, mine, act_used(t, cols)) != 0)
                    fail_msg("%s act row differs (set %s, trial %d)", tr_dtype_name(t),
                             ks[k]->name, trial);
            }
        }
        free(mine);
        free(got);
    }
    free(x);
}

/* ---- matmul ---- */

typedef struct mm_case {
    tr_dtype t;
    int64_t rows, cols;
    int n_tok;
    size_t wrb;       /* weight row stride (>= row bytes: padding tested) */
    uint8_t *w;       /* rows * wrb */
    float *x;         /* n_tok * cols */
    uint8_t *xq;      /* n_tok * xs, from the portable set */
    size_t xs;
    double *wd;       /* rows * cols, dequantized (exact) */
    double *wm;       /* rows * cols, |offset term| (see ref_dequant_mt) */
} mm_case;

static void mm_case_init(mm_case *c, tr_dtype t, int64_t rows, int64_t cols, int n_tok,
                         bool raw) {
    memset(c, 0, sizeof *c);
    c->t = t;
    c->rows = rows;
    c->cols = cols;
    c->n_tok = n_tok;
    c->wrb = row_bytes(t, cols) + 6; /* an odd pad: rows start unaligned */
    c->w = calloc((size_t)rows, c->wrb);
    c->x = malloc((size_t)n_tok * cols * sizeof(float));
    c->xs = tr_cpu_quant_act_row_bytes(t, cols) + 64;
    c->xq = tr_aligned_alloc((size_t)n_tok * c->xs, 64);
    c->wd = malloc((size_t)rows * cols * sizeof(double));
    c->wm = malloc((size_t)rows * cols * sizeof(double));
    assert_true(c->w && c->x && c->xq && c->wd && c->wm);
    float *tmp = malloc((size_t)cols * sizeof(float));
    assert_non_null(tmp);
    for (int64_t r = 0; r < rows; r++) {
        if (raw) {
            random_row(t, c->w + r * c->wrb, cols);
        } else {
            for (int64_t k = 0; k < cols; k++) tmp[k] = rnd_gauss() * 0.05f;
            quant_row(t, tmp, c->w + r * c->wrb, cols);
        }
        ref_dequant_mt(t, c->w + r * c->wrb, c->wd + r * cols, c->wm + r * cols, cols);
    }
    free(tmp);
    for (int64_t i = 0; i < (int64_t)n_tok * cols; i++) c->x[i] = rnd_gauss();
    for (int i = 0; i < n_tok; i++)
        tr_cpu_quant_select(true)->quantize_act_row(t, c->x + (size_t)i * cols, c->xq + (size_t)i * c->xs,
                                                 cols);
}

static void mm_case_free(mm_case *c) {
    free(c->w);
    free(c->x);
    tr_aligned_free(c->xq);
    free(c->wd);
    free(c->wm);
}

/* out[t * os + r] for the tokens [t0, t0+n) of the case, rows [r0, r1). */
static void mm_run(const cpu_quant_kernels *k, const mm_case *c, int t0, int n, float *out,
                   size_t os, int64_t r0, int64_t r1, bool accumulate) {
    k->matmul_tile(c->t, c->w, c->wrb, c->cols, c->xq + (size_t)t0 * c->xs, c->xs, n, out, os,
                   r0, r1, accumulate);
}

/* Checks out[rows x n_tok] against the two double references of the file
 * comment. */
static void mm_check_accuracy(const mm_case *c, const float *out, size_t os, const char *set) {
    const cpu_act_kind kind = cpu_q_act_kind(c->t);
    const int bs = kind == CPU_ACT_A32 ? 32 : kind == CPU_ACT_A256 ? 256 : 8;
    const int64_t nb = (c->cols + bs - 1) / bs;
    const int64_t n_chain = kind == CPU_ACT_FLOAT ? (c->cols + 7) / 8 : nb;
    double *xq = malloc((size_t)c->cols * sizeof(double)), *dh = malloc((size_t)nb * sizeof(double));
    assert_true(xq && dh);
    for (int t = 0; t < c->n_tok; t++) {
        const float *x = c->x + (size_t)t * c->cols;
        const uint8_t *a = c->xq + (size_t)t * c->xs;
        /* the activations as the kernels see them, and each block's d/2 */
        for (int64_t b = 0; b < nb; b++) {
            if (kind == CPU_ACT_FLOAT) {
                dh[b] = 0;
                continue;
            }
            float d;
            memcpy(&d, a + nb * bs + 4 * b, 4);
            dh[b] = d * 0.5 * (1 + 1e-6);
            for (int i = 0; i < bs; i++) xq[b * bs + i] = (double)d * ((const int8_t *)a)[b * bs + i];
        }
        if (kind == CPU_ACT_FLOAT)
            for (int64_t k = 0; k < c->cols; k++) xq[k] = x[k];
        for (int64_t r = 0; r < c->rows; r++) {
            const double *w = c->wd + r * c->cols, *wm = c->wm + r * c->cols;
            double ref = 0, refq = 0, absq = 0, bound = 0;
            for (int64_t b = 0; b < nb; b++) {
                double aw = 0;
                for (int i = 0; i < bs && b * bs + i < c->cols; i++) {
                    int64_t k = b * bs + i;
                    ref += w[k] * x[k];
                    refq += w[k] * xq[k];
                    absq += (fabs(w[k]) + 2 * wm[k]) * fabs(xq[k]);
                    aw += fabs(w[k]);
                }
                bound += dh[b] * aw;
            }
            /* float rounding: ~3 roundings of magnitude <= absq per chain step */
            double tol_f = 3.0 * 0x1p-24 * (double)(n_chain + 8) * absq + 1e-30;
            double got = out[(size_t)t * os + r];
            if (!(fabs(got - refq) <= tol_f))
                fail_msg("%s/%s r%lld t%d: got %.9g, quantized-x ref %.9g (tol %.3g)",
                         tr_dtype_name(c->t), set, (long long)r, t, got, refq, tol_f);
            if (!(fabs(got - ref) <= bound + tol_f))
                fail_msg("%s/%s r%lld t%d: got %.9g, ref %.9g (bound %.3g)", tr_dtype_name(c->t),
                         set, (long long)r, t, got, ref, bound + tol_f);
        }
    }
    free(xq);
    free(dh);
}

static void test_matmul_accuracy(void **state) {
    (void)state;
    const cpu_quant_kernels *ks[3];
    int nk = kernel_sets(ks);
    for (int i = 0; i < N_TYPES; i++) {
        tr_dtype t = k_types[i];
        const bool kq = tr_dtype_block_size(t) == 256;
        for (int raw = 0; raw < 2; raw++) {
            /* sizes cross the kernels' chunks: 1088 = 34 32-blocks (> 32),
             * 1280 = 5 256-blocks (> 4); float types get a ragged 1085 */
            int64_t cols = kq ? 1280 : t == TR_DTYPE_F32 || t == TR_DTYPE_F16 || t == TR_DTYPE_BF16
                                           ? 1085 : 1088;
            mm_case c;
            mm_case_init(&c, t, 21, cols, 6, raw != 0);
            float *out = malloc((size_t)c.n_tok * c.rows * sizeof(float));
            float *first = malloc((size_t)c.n_tok * c.rows * sizeof(float));
            assert_true(out && first);
            for (int k = 0; k < nk; k++) {
                mm_run(ks[k], &c, 0, c.n_tok, out, (size_t)c.rows, 0, c.rows, false);
                mm_check_accuracy(&c, out, (size_t)c.rows, ks[k]->name);
                if (k == 0)
                    memcpy(first, out, (size_t)c.n_tok * c.rows * sizeof(float));
                else if (memcmp(first, out, (size_t)c.n_tok * c.rows * sizeof(float)) != 0)
                    fail_msg("%s: set %s differs from portable", tr_dtype_name(t), ks[k]->name);
            }
            free(out);
            free(first);
            mm_case_free(&c);
        }
    }
}

#define CANARY 0x7fc0dead

static bool is_canary(float f) {
    uint32_t b;
    memcpy(&b, &f, 4);
    return b == CANARY;
}

static void fill_canary(float *p, size_t n) {
    uint32_t b = CANARY;
    for (size_t i = 0; i < n; i++) memcpy(&p[i], &b, 4);
}

static void test_matmul_determinism(void **state) {
    (void)state;
    const cpu_quant_kernels *ks[3];
    int nk = kernel_sets(ks);
    static const int ntoks[] = {1, 2, 3, 5, 8, 17, 70};
    const int T = 70;
    const int64_t R = 37;           /* odd: groups of 8 plus a ragged one */
    const size_t os = (size_t)R + 3; /* the 3 extra columns must stay untouched */
    float *full = malloc((size_t)T * os * sizeof(float));
    float *ref = malloc((size_t)T * os * sizeof(float));
    float *out = malloc((size_t)T * os * sizeof(float));
    float *base = malloc((size_t)T * os * sizeof(float));
    assert_true(full && ref && out && base);
    for (int i = 0; i < N_TYPES; i++) {
        tr_dtype t = k_types[i];
        int64_t cols = tr_dtype_block_size(t) == 256 ? 512 : t == TR_DTYPE_Q8_0 ? 96 : 160;
        if (t == TR_DTYPE_F16) cols = 77;
        mm_case c;
        mm_case_init(&c, t, R, cols, T, true);
        for (int k = 0; k < nk; k++) {
            const char *set = ks[k]->name;
            fill_canary(full, (size_t)T * os);
            mm_run(ks[k], &c, 0, T, full, os, 0, R, false);
            for (int tt = 0; tt < T; tt++)
                for (size_t r = 0; r < os; r++)
                    assert_true(is_canary(full[tt * os + r]) == (r >= (size_t)R));
            if (k == 0)
                memcpy(ref, full, (size_t)T * os * sizeof(float));
            else if (memcmp(ref, full, (size_t)T * os * sizeof(float)) != 0)
                fail_msg("%s: set %s differs from portable", tr_dtype_name(t), set);
            /* any batch size, any position of the token in the batch */
            for (size_t j = 0; j < sizeof ntoks / sizeof ntoks[0]; j++) {
                const int n = ntoks[j];
                for (int start = 0; start + n <= T; start += (n == T ? T : T - n)) {
                    fill_canary(out, (size_t)T * os);
                    mm_run(ks[k], &c, start, n, out, os, 0, R, false);
                    for (int tt = 0; tt < T; tt++)
                        for (int64_t r = 0; r < R; r++) {
                            float v = out[tt * os + r];
                            if (tt >= n) {
                                assert_true(is_canary(v));
                            } else if (memcmp(&v, &full[(start + tt) * os + r], 4) != 0) {
                                fail_msg("%s/%s: n_tok %d start %d t%d r%lld differs",
                                         tr_dtype_name(t), set, n, start, tt, (long long)r);
                            }
                        }
                    if (start + n == T) break;
                }
            }
            /* row splits: every row range computes the same values */
            static const int64_t cuts[][4] = {{0, 5, 13, 37}, {0, 1, 36, 37}, {0, 8, 16, 37},
                                              {0, 3, 4, 37}};
            for (size_t s = 0; s < sizeof cuts / sizeof cuts[0]; s++) {
                fill_canary(out, (size_t)T * os);
                for (int p = 0; p < 3; p++)
                    mm_run(ks[k], &c, 0, 17, out, os, cuts[s][p], cuts[s][p + 1], false);
                for (int tt = 0; tt < 17; tt++)
                    if (memcmp(&out[tt * os], &full[tt * os], (size_t)R * 4) != 0)
                        fail_msg("%s/%s: row split %zu differs at t%d", tr_dtype_name(t), set, s, tt);
                /* a sub-range writes only its rows */
                fill_canary(out, (size_t)T * os);
                mm_run(ks[k], &c, 0, 3, out, os, cuts[s][1], cuts[s][2], false);
                for (int tt = 0; tt < T; tt++)
                    for (int64_t r = 0; r < R; r++) {
                        bool in = tt < 3 && r >= cuts[s][1] && r < cuts[s][2];
                        assert_true(is_canary(out[tt * os + r]) == !in);
                        if (in) assert_memory_equal(&out[tt * os + r], &full[tt * os + r], 4);
                    }
            }
            /* accumulate: out = base + result, the same float add */
            for (size_t e = 0; e < (size_t)T * os; e++) base[e] = rnd_gauss();
            memcpy(out, base, (size_t)T * os * sizeof(float));
            mm_run(ks[k], &c, 0, T, out, os, 0, R, true);
            for (int tt = 0; tt < T; tt++)
                for (size_t r = 0; r < os; r++) {
                    float want = r < (size_t)R ? base[tt * os + r] + full[tt * os + r] : base[tt * os + r];
                    assert_memory_equal(&out[tt * os + r], &want, 4);
                }
            /* empty ranges write nothing */
            fill_canary(out, (size_t)T * os);
            mm_run(ks[k], &c, 0, 0, out, os, 0, R, false);
            mm_run(ks[k], &c, 0, 5, out, os, 7, 7, false);
            for (size_t e = 0; e < (size_t)T * os; e++) assert_true(is_canary(out[e]));
        }
        mm_case_free(&c);
    }
    free(full);
    free(ref);
    free(out);
    free(base);
}

/* The 16-row interleaved layout: tr_cpu_repack16 writes exactly the
 * matrix's bytes, and every SIMD set's matmul_tile_r16 over the repacked
 * copy gives bitwise the portable set's matmul_tile over the rows, for any
 * token count (decode GEMV, the few-token GEMV of up to QX_GEMV_TOK tokens
 * in fours, token tiles of 64 and beyond), any row range
 * of whole groups, and with accumulate. */
static void test_matmul_r16(void **state) {
    (void)state;
    const cpu_quant_kernels *ks[3];
    int nk = kernel_sets(ks);
    assert_null(ks[0]->matmul_tile_r16); /* portable: row-major only */
    assert_false(tr_cpu_repack16_supported(TR_DTYPE_Q4_1, 40, 64));
    assert_false(tr_cpu_repack16_supported(TR_DTYPE_Q4_1, 0, 64));
    assert_false(tr_cpu_repack16_supported(TR_DTYPE_Q6_K, 32, 256));
    assert_false(tr_cpu_repack16_supported(TR_DTYPE_Q4_K, 32, 256));
    assert_false(tr_cpu_repack16_supported(TR_DTYPE_Q8_0, 32, 48));
    static const tr_dtype types[] = {TR_DTYPE_Q4_0, TR_DTYPE_Q4_1, TR_DTYPE_Q5_0, TR_DTYPE_Q5_1,
                                     TR_DTYPE_Q8_0};
    static const int ntoks[] = {1, 2, 3, 4, 5, 6, 9, 11, 12, 17, 64, 70, 130};
    const int T = 130;
    const int64_t R = 48;
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        for (int shape = 0; shape < 2; shape++) {
            const tr_dtype t = types[ti];
            const int64_t cols = shape ? 1088 : 64; /* 34 blocks cross the 24-block chunk */
            assert_true(tr_cpu_repack16_supported(t, R, cols));
            mm_case c;
            mm_case_init(&c, t, R, cols, T, shape == 1);
            const size_t rb = row_bytes(t, cols), bytes = (size_t)R * rb;
            uint8_t *dense = malloc(bytes), *r16 = tr_aligned_alloc(bytes + 64, 64);
            assert_true(dense && r16);
            for (int64_t r = 0; r < R; r++) memcpy(dense + r * rb, c.w + r * c.wrb, rb);
            memset(r16 + bytes, 0xa5, 64);
            tr_cpu_repack16(t, dense, R, cols, r16);
            for (int i = 0; i < 64; i++) assert_int_equal(r16[bytes + i], 0xa5);
            const size_t os = (size_t)R + 3;
            float *ref = malloc((size_t)T * os * sizeof(float)), *out = malloc((size_t)T * os * sizeof(float));
            float *base = malloc((size_t)T * os * sizeof(float));
            assert_true(ref && out && base);
            for (int k = 1; k < nk; k++) {
                const cpu_quant_kernels *q = ks[k];
                assert_non_null(q->matmul_tile_r16);
                for (size_t j = 0; j < sizeof ntoks / sizeof ntoks[0]; j++) {
                    const int n = ntoks[j];
                    static const int64_t ranges[][2] = {{0, 48}, {16, 32}, {32, 48}};
                    for (int g = 0; g < 3; g++) {
                        const int64_t r0 = ranges[g][0], r1 = ranges[g][1];
                        fill_canary(ref, (size_t)T * os);
                        fill_canary(out, (size_t)T * os);
                        mm_run(ks[0], &c, 0, n, ref, os, r0, r1, false);
                        q->matmul_tile_r16(t, r16, rb, cols, c.xq, c.xs, n, out, os, r0, r1, false);
                        if (memcmp(ref, out, (size_t)T * os * sizeof(float)) != 0)
                            fail_msg("%s/%s r16: n_tok %d rows [%lld, %lld) differ from portable",
                                     tr_dtype_name(t), q->name, n, (long long)r0, (long long)r1);
                    }
                    for (size_t e = 0; e < (size_t)T * os; e++) base[e] = rnd_gauss();
                    memcpy(ref, base, (size_t)T * os * sizeof(float));
                    memcpy(out, base, (size_t)T * os * sizeof(float));
                    mm_run(ks[0], &c, 0, n, ref, os, 0, R, true);
                    q->matmul_tile_r16(t, r16, rb, cols, c.xq, c.xs, n, out, os, 0, R, true);
                    if (memcmp(ref, out, (size_t)T * os * sizeof(float)) != 0)
                        fail_msg("%s/%s r16: accumulate, n_tok %d differs", tr_dtype_name(t),
                                 q->name, n);
                }
            }
            free(ref);
            free(out);
            free(base);
            free(dense);
            tr_aligned_free(r16);
            mm_case_free(&c);
        }
    }
}

/* ---- the real default model ---- */

typedef struct model_golden {
    const char *name;
    int64_t row;
    double s1, s2;
} model_golden;

/* Row checksums (sum, and sum of x[i] * (i % 97 + 1)) from the gguf Python
 * package's dequantize() of the same file. */
static const model_golden k_model_golden[] = {
    {"blk.0.attn_q.weight", 0, 1.00726318359375, 155.84344482421875},
    {"blk.0.attn_q.weight", 1, -0.71209716796875, 159.61483764648438},
    {"blk.0.attn_q.weight", 575, -4.734954833984375, -372.6087646484375},
    {"blk.0.ffn_down.weight", 0, -17.089996337890625, -1306.8730163574219},
    {"blk.0.ffn_down.weight", 1, 6.04815673828125, 349.791748046875},
    {"blk.0.ffn_down.weight", 575, 1.4561767578125, -38.20262145996094},
    {"token_embd.weight", 0, -2.2541093826293945, -91.47386455535889},
    {"token_embd.weight", 1, 0.35922718048095703, 32.82113075256348},
    {"token_embd.weight", 49151, -0.4662208557128906, 26.90465545654297},
};

static void test_real_model(void **state) {
    (void)state;
    char path[4096];
    if (!tr_default_model_path(path, sizeof path) || access(path, R_OK) != 0) {
        print_message("default model not found (%s): skipped\n", path);
        skip();
    }
    gguf_file *f = NULL;
    tr_diag diag;
    assert_int_equal(tr_gguf_open(path, &f, &diag), TR_OK);
    const cpu_quant_kernels *ks[3];
    int nk = kernel_sets(ks);
    for (size_t g = 0; g < sizeof k_model_golden / sizeof k_model_golden[0]; g++) {
        const model_golden *e = &k_model_golden[g];
        const gguf_tensor *t = tr_gguf_tensor_find(f, e->name);
        assert_non_null(t);
        const int64_t cols = (int64_t)t->ne[0];
        const size_t rb = row_bytes((tr_dtype)t->type, cols);
        assert_true((uint64_t)e->row < t->ne[1]);
        const uint8_t *src = (const uint8_t *)t->data + (size_t)e->row * rb;
        float *y = malloc((size_t)cols * sizeof(float));
        double *r = malloc((size_t)cols * sizeof(double));
        assert_true(y && r);
        dequant_all_sets((tr_dtype)t->type, src, cols, y);
        ref_dequant((tr_dtype)t->type, src, r, cols);
        double s1 = 0, s2 = 0;
        for (int64_t i = 0; i < cols; i++) {
            assert_true(y[i] == (float)r[i]);
            s1 += y[i];
            s2 += y[i] * (double)((i % 97) + 1);
        }
        if (fabs(s1 - e->s1) > 1e-9 * (fabs(e->s2) + 1) || fabs(s2 - e->s2) > 1e-9 * (fabs(e->s2) + 1))
            fail_msg("%s row %lld: %.17g %.17g", e->name, (long long)e->row, s1, s2);
        free(y);
        free(r);
    }
    /* matmuls with the real matrices (token_embd: its first 96 rows) */
    static const char *mats[] = {"blk.0.attn_q.weight", "blk.0.ffn_down.weight",
                                 "blk.3.ffn_gate.weight", "token_embd.weight"};
    for (size_t m = 0; m < sizeof mats / sizeof mats[0]; m++) {
        const gguf_tensor *t = tr_gguf_tensor_find(f, mats[m]);
        assert_non_null(t);
        mm_case c;
        memset(&c, 0, sizeof c);
        c.t = (tr_dtype)t->type;
        c.cols = (int64_t)t->ne[0];
        c.rows = m == 3 ? 96 : (int64_t)t->ne[1];
        c.n_tok = 5;
        c.wrb = row_bytes(c.t, c.cols);
        c.w = malloc((size_t)c.rows * c.wrb);
        c.x = malloc((size_t)c.n_tok * c.cols * sizeof(float));
        c.xs = tr_cpu_quant_act_row_bytes(c.t, c.cols);
        c.xq = tr_aligned_alloc((size_t)c.n_tok * c.xs, 64);
        c.wd = malloc((size_t)c.rows * c.cols * sizeof(double));
        c.wm = malloc((size_t)c.rows * c.cols * sizeof(double));
        assert_true(c.w && c.x && c.xq && c.wd && c.wm);
        memcpy(c.w, t->data, (size_t)c.rows * c.wrb);
        for (int64_t r = 0; r < c.rows; r++)
            ref_dequant_mt(c.t, c.w + r * c.wrb, c.wd + r * c.cols, c.wm + r * c.cols, c.cols);
        for (int64_t i = 0; i < c.n_tok * c.cols; i++) c.x[i] = rnd_gauss();
        for (int i = 0; i < c.n_tok; i++)
            ks[0]->quantize_act_row(c.t, c.x + i * c.cols, c.xq + i * c.xs, c.cols);
        float *out = malloc((size_t)c.n_tok * c.rows * sizeof(float));
        float *first = malloc((size_t)c.n_tok * c.rows * sizeof(float));
        assert_true(out && first);
        for (int k = 0; k < nk; k++) {
            mm_run(ks[k], &c, 0, c.n_tok, out, (size_t)c.rows, 0, c.rows, false);
            mm_check_accuracy(&c, out, (size_t)c.rows, ks[k]->name);
            if (k == 0)
                memcpy(first, out, (size_t)c.n_tok * c.rows * sizeof(float));
            else
                assert_memory_equal(first, out, (size_t)c.n_tok * c.rows * sizeof(float));
        }
        free(out);
        free(first);
        mm_case_free(&c);
    }
    tr_gguf_close(f);
}

int main(void) {
    tr_test_kernels_require(quant_set_runs_here);
    const cpu_quant_kernels *ks[3];
    int nk = kernel_sets(ks);
    print_message("kernel sets:");
    for (int k = 0; k < nk; k++) print_message(" %s", ks[k]->name);
    print_message(" (selected: %s)\n", tr_cpu_quant_select(false)->name);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fp16_all_values),
        cmocka_unit_test(test_sizes),
        cmocka_unit_test(test_dequant_known_blocks),
        cmocka_unit_test(test_dequant_golden),
        cmocka_unit_test(test_act_quant),
        cmocka_unit_test(test_matmul_accuracy),
        cmocka_unit_test(test_matmul_determinism),
        cmocka_unit_test(test_matmul_r16),
        cmocka_unit_test(test_real_model),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
