/* sampler_internal.h — what sampler.c shares with its vector kernels
 * (sampler_kernels_internal.h, instantiated for SSE2-class 16-byte vectors
 * in sampler.c and for AVX2 in sampler_kernels_avx2.c). Not a public
 * header.
 *
 * Determinism across instantiations: every kernel computes each value with
 * the same operations in the same order whatever the vector width (sums
 * run over 8 logical lanes, as two 4-wide or one 8-wide vector; no FMA
 * contraction: ISO C mode is -ffp-contract=off for gcc, and the template
 * sets FP_CONTRACT OFF for clang), so an AVX2 machine and a machine without
 * it sample the same tokens from the same seed.
 */
#ifndef TR_SAMPLER_INTERNAL_H
#define TR_SAMPLER_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

/* No fused multiply-add anywhere in the sampler (see above): gcc's ISO C
 * mode already has -ffp-contract=off; clang contracts by default. */
#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#endif

/* A candidate token: its (processed) logit and id. */
typedef struct sampler_cand {
    float l;
    int32_t id;
} sampler_cand;

typedef struct sampler_scan {
    float max;        /* max over non-NaN logits (+inf included) */
    int32_t argmax;   /* lowest id holding max; -1 if every logit is -inf/NaN */
    int32_t n_finite; /* logits > -inf (NaN excluded) */
    bool bad;         /* some logit is NaN or +inf: sanitise and rescan */
} sampler_scan;

/* 256 floats = 1 KiB keeps a block in L1 while the block sums stay few
 * (1024 for a 262k vocabulary). */
#define SAMPLER_BLOCK 256

/* The hot loops, one table per instruction set. */
typedef struct sampler_kernels {
    const char *name;
    /* Read-only pass: max, first argmax, finite count, NaN/+inf flag. */
    void (*scan)(const float *l, int32_t n, sampler_scan *r);
    /* w[i] = sampler_fexp((l[i] - m) * inv_t), bsum[b] = the sum of block
     * b (SAMPLER_BLOCK entries); returns the total (blocks added in
     * order, in double). */
    double (*exp_all)(const float *l, int32_t n, float m, float inv_t,
                      float *w, double *bsum);
    /* Same over c[i].l. */
    double (*exp_cand)(const sampler_cand *c, int32_t n, float m,
                       float inv_t, float *w, double *bsum);
    /* The k best finite logits, sorted (logit desc, id asc); returns how
     * many (< k when fewer are finite). With scan != NULL also fills it
     * as the scan kernel would (max/argmax = the best candidate). */
    int32_t (*select_top)(const float *l, int32_t n, int32_t k,
                          sampler_cand *out, sampler_scan *scan);
    /* Appends to out every i with (double)l[i] - m >= thr, in id order;
     * returns the count. */
    int32_t (*gather_min_p)(const float *l, int32_t n, float m, double thr,
                            sampler_cand *out);
    /* l[i] = -inf where mask bit i is 0; returns the allowed count. */
    int64_t (*apply_mask)(float *l, int32_t n, const uint64_t *mask);
    /* For thresholds t[0] > ... > t[7]: cnt[j] = #{l[i] >= t[j]}, mass[j]
     * = sum of w[i] over them. */
    void (*ladder)(const float *l, const float *w, int32_t n,
                   const float *t, double *mass, int64_t *cnt);
    /* l[i] >= hi to front (id order), lo <= l[i] < hi to back_end[-1],
     * back_end[-2], ...; returns the front count. */
    int32_t (*gather_range)(const float *l, int32_t n, float hi, float lo,
                            sampler_cand *front, sampler_cand *back_end,
                            int32_t *n_back);
} sampler_kernels;

extern const sampler_kernels tr_sampler_kernels_generic;
#if defined(__x86_64__) || defined(__i386__)
#define SAMPLER_HAVE_AVX2_KERNELS 1
extern const sampler_kernels tr_sampler_kernels_avx2;
#endif

/* exp(x) for x <= ~88, written without libm or branches so that it
 * vectorises and every kernel computes bit-identical values. Range
 * reduction x = n ln2 + f with ln2 split in two (Cody-Waite) so f stays
 * accurate for x near -87; e^f by its degree-7 Taylor polynomial on
 * |f| <= ln2/2 (truncation < 6e-9); 2^n built in the exponent bits. Below
 * -87 the result is exactly 0, so -inf (masked) logits weigh nothing;
 * relative error otherwise < 3e-7 (measured by the unit tests). The vector
 * kernels spell out these same operations in the same order. */
#define SAMPLER_EXP_LO (-87.0f)
#define SAMPLER_EXP_HI 88.0f
#define SAMPLER_LOG2E 1.44269504088896341f
#define SAMPLER_ROUND_MAGIC 12582912.0f /* 1.5 * 2^23 */
#define SAMPLER_LN2_HI 0.693359375f
#define SAMPLER_LN2_LO (-2.12194440e-4f)

static inline float sampler_fexp(float x) {
    float xc = x < SAMPLER_EXP_LO ? SAMPLER_EXP_LO
                                  : (x > SAMPLER_EXP_HI ? SAMPLER_EXP_HI : x);
    float t = xc * SAMPLER_LOG2E;
    float n = (t + SAMPLER_ROUND_MAGIC) - SAMPLER_ROUND_MAGIC;
    float f = xc - n * SAMPLER_LN2_HI;
    f = f - n * SAMPLER_LN2_LO;
    float p = 1.0f / 5040.0f;
    p = p * f + 1.0f / 720.0f;
    p = p * f + 1.0f / 120.0f;
    p = p * f + 1.0f / 24.0f;
    p = p * f + 1.0f / 6.0f;
    p = p * f + 0.5f;
    p = p * f + 1.0f;
    p = p * f + 1.0f;
    uint32_t bits = (uint32_t)((int32_t)n + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    float r = p * scale;
    return x < SAMPLER_EXP_LO ? 0.0f : r;
}

/* "a ranks before b": higher logit, then lower id. */
static inline bool sampler_cand_before(sampler_cand a, sampler_cand b) {
    return a.l > b.l || (a.l == b.l && a.id < b.id);
}

static inline int sampler_cand_cmp(const void *pa, const void *pb) {
    const sampler_cand *a = pa, *b = pb;
    if (sampler_cand_before(*a, *b)) return -1;
    if (sampler_cand_before(*b, *a)) return 1;
    return 0;
}

/* Min-heap on rank: h[0] is the worst kept candidate. */
static inline void sampler_heap_sift_down(sampler_cand *h, int32_t n,
                                          int32_t i) {
    sampler_cand x = h[i];
    for (;;) {
        int32_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && sampler_cand_before(h[c], h[c + 1])) c++;
        if (!sampler_cand_before(x, h[c])) break;
        h[i] = h[c];
        i = c;
    }
    h[i] = x;
}

static inline void sampler_heap_sift_up(sampler_cand *h, int32_t i) {
    sampler_cand x = h[i];
    while (i > 0) {
        int32_t p = (i - 1) / 2;
        if (!sampler_cand_before(h[p], x)) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = x;
}

#endif
