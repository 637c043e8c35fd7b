/* kv_quant.c — the quantized KV formats of backend.h (Q8, Q4) on the CPU:
 * the one quantizer every kernel set stores with, and the exact element
 * reader and head dequantizer of the portable kernels.
 *
 * Layering: internal to kernels/cpu (cpu_internal.h). Pure functions.
 *
 * Why these formats. Q8 keeps one scale per (position, KV head): a head is
 * what one attention kernel call reads, so the scale is loaded once per
 * row, and the row costs head_dim + 2 bytes (SmolLM2's heads of 64: 0.52x
 * of F16, where per-32 blocks would cost 0.53x). Q4 needs a scale per 32
 * elements to keep its error near Q8's per-block behaviour (one per head
 * of 64 quantizes every element to 1/8 of the head's largest). Both are
 * symmetric (no zero point): K and V of a head are centred near zero. Q4's
 * 16 levels are uneven (backend.h's tr_kv_q4_level): rows are rotated
 * before they are stored, which makes a group of 32 look like Gaussian
 * samples, and for those the squared-error optimum puts more levels near
 * zero than even steps do; the group's signed extreme is one level
 * exactly. Measured against even steps (SmolLM2, perplexity over the
 * standard text): values alone +0.66% -> +0.40%, keys alone about the
 * same (docs/performance.md "Quantized KV").
 */
#include <math.h>
#include <string.h>

#include "kernels/cpu/cpu_internal.h"
#include "base/util.h"

/* The F16 scale x / levels (what is stored; x may be negative), finite,
 * and never smaller in magnitude than |x| / levels: rounded away from zero
 * when rounding to F16 went towards it, so that x maps to at most
 * `levels` steps and nothing beyond the range is clamped (in F16's
 * subnormal range the rounding is coarse: the scale of a head of
 * magnitude 1e-3 moves by up to ~1%). */
static float kv_scale(float x, float levels, uint16_t *bits) {
    float d = x / levels;
    if (!(fabsf(d) <= 65504.0f)) d = d < 0 ? -65504.0f : 65504.0f; /* NaN, past F16 */
    *bits = cpu_fp32_to_fp16(d);
    /* sign and magnitude: one more in the bits is one F16 further out */
    if (fabsf(cpu_fp16_to_fp32(*bits)) < fabsf(d) && (*bits & 0x7fff) < 0x7bff) (*bits)++;
    return cpu_fp16_to_fp32(*bits);
}

/* round(x / d) (to nearest even) clamped to [lo, hi]; 0 when d is 0 or x
 * is not a number. */
static int kv_level(float x, float d, int lo, int hi) {
    if (d == 0.0f || !(x == x)) return 0;
    float r = nearbyintf(x / d);
    if (r > (float)hi) return hi;
    if (r < (float)lo) return lo;
    return (int)r;
}

/* The element of largest magnitude (the first of equals; NaN never). */
static float extreme_of(const float *x, int32_t n) {
    float e = 0.0f;
    for (int32_t i = 0; i < n; i++)
        if (fabsf(x[i]) > fabsf(e)) e = x[i];
    return e;
}

/* The nibbles whose Q4 levels (backend.h) are nearest to x[i] / d, i <
 * 32 (the lower of two equally near: the count of midpoints r exceeds);
 * the level nearest 0 where d is 0 or x[i] is not a number. Branch-free
 * over the elements, so the compiler vectorizes it (a search per element
 * cost 9% of a 1,500-token prefill). */
static void q4_nearest(uint8_t *nib, const float *x, float d) {
    float mid[15];
    for (int k = 0; k < 15; k++) mid[k] = 0.5f * (float)(tr_kv_q4_level(k) + tr_kv_q4_level(k + 1));
    for (int i = 0; i < 32; i++) {
        float r = x[i] / d;
        int n = 0;
        for (int k = 0; k < 15; k++) n += r > mid[k];
        nib[i] = (uint8_t)(d != 0.0f && r == r ? n : 8);
    }
}

static float amax_of(const float *x, int32_t n) {
    float m = 0.0f;
    for (int32_t i = 0; i < n; i++) {
        float a = fabsf(x[i]);
        if (a > m) m = a;
    }
    return m;
}

static void put16(uint8_t *p, uint16_t v) { memcpy(p, &v, 2); }
static uint16_t get16(const uint8_t *p) {
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
}

void tr_cpu_kv_rotate(float *x, int32_t n, int32_t block) {
    TR_ASSERT(block > 0 && (block & (block - 1)) == 0);
    const float norm = 1.0f / sqrtf((float)block);
    for (int32_t g = 0; g + block <= n; g += block) {
        float *v = x + g;
        /* the fast transform: log2(block) rounds of butterflies */
        for (int32_t len = 1; len < block; len <<= 1)
            for (int32_t i = 0; i < block; i += len << 1)
                for (int32_t j = i; j < i + len; j++) {
                    float a = v[j], b = v[j + len];
                    v[j] = a + b;
                    v[j + len] = a - b;
                }
        for (int32_t i = 0; i < block; i++) v[i] *= norm;
    }
}

void tr_cpu_kv_quantize_head(uint8_t *dst, const float *src, int32_t hd,
                             tr_kv_type t) {
    uint16_t bits;
    if (t == TR_KV_Q8) {
        float d = kv_scale(amax_of(src, hd), 127.0f, &bits);
        for (int32_t i = 0; i < hd; i++)
            dst[i] = (uint8_t)(int8_t)kv_level(src[i], d, -127, 127);
        put16(dst + hd, bits);
        return;
    }
    TR_ASSERT(t == TR_KV_Q4 && hd % 32 == 0);
    for (int32_t g = 0; g < hd / 32; g++) {
        const float *x = src + 32 * g;
        uint8_t *q = dst + 16 * g;
        /* the extreme is level 0 (-127 d) exactly */
        float d = kv_scale(-extreme_of(x, 32), 127.0f, &bits);
        uint8_t nib[32];
        q4_nearest(nib, x, d);
        for (int i = 0; i < 16; i++) q[i] = (uint8_t)(nib[i] | nib[16 + i] << 4);
        put16(dst + hd / 2 + 2 * g, bits);
    }
}

float tr_cpu_kv_quantize_query(int16_t *dst, const float *src, int32_t hd) {
    const float levels = (float)CPU_ATTN_Q_LEVELS;
    float amax = amax_of(src, hd);
    float inv = amax > 0.0f ? levels / amax : 0.0f;
    /* Adding and taking away 1.5 * 2^23 rounds |x| < 2^22 to the nearest
     * integer, ties to even, in plain float arithmetic (so the loop
     * vectorizes); |src[i] * inv| <= levels * (1 + 2^-23) here. */
    const float magic = 12582912.0f;
    for (int32_t i = 0; i < hd; i++) {
        float r = (src[i] * inv + magic) - magic;
        r = r > levels ? levels : r < -levels ? -levels : r;
        dst[i] = (int16_t)(r == r ? r : 0.0f);
    }
    return amax / levels;
}

float tr_cpu_kv_elem(const uint8_t *head, int32_t d, int32_t hd, tr_kv_type t) {
    switch (t) {
    case TR_KV_F32: {
        float f;
        memcpy(&f, head + 4 * (size_t)d, 4);
        return f;
    }
    case TR_KV_F16: return cpu_fp16_to_fp32(get16(head + 2 * (size_t)d));
    case TR_KV_Q8:
        return (float)(int8_t)head[d] * cpu_fp16_to_fp32(get16(head + hd));
    case TR_KV_Q4: {
        int32_t g = d / 32, i = d % 32;
        uint8_t b = head[16 * g + (i & 15)];
        int nib = i < 16 ? (b & 15) : (b >> 4);
        return (float)tr_kv_q4_level(nib) * cpu_fp16_to_fp32(get16(head + hd / 2 + 2 * g));
    }
    default: return 0.0f;
    }
}

void tr_cpu_load_heads_portable(float *dst, const void *src, int32_t n_heads,
                                int32_t hd, tr_kv_type t) {
    size_t hb = tr_kv_head_bytes(t, hd);
    for (int32_t h = 0; h < n_heads; h++) {
        const uint8_t *head = (const uint8_t *)src + (size_t)h * hb;
        for (int32_t d = 0; d < hd; d++)
            dst[(size_t)h * hd + d] = tr_cpu_kv_elem(head, d, hd, t);
    }
}
