/* sampler_kernels_internal.h — the sampler's hot loops, written once with
 * GCC/Clang vector extensions and instantiated per instruction set:
 *
 *   #define SK_W 4 (16-byte vectors, any x86-64 / NEON) or 8 (AVX2)
 *   #define SK_SUFFIX generic | avx2
 *   #include "sampler_kernels_internal.h"
 *
 * defines `const sampler_kernels sampler_kernels_<SK_SUFFIX>`. No include
 * guard on purpose. Each pass handles 8 logical lanes per step (8 / SK_W
 * vectors), so reductions (sums, max/argmax) combine the same partial
 * results in the same order whatever SK_W is: both instantiations return
 * bit-identical values (see sampler_internal.h).
 *
 * Why vector extensions and not plain loops: with the default
 * -ftrapping-math GCC will not if-convert float selects, so the plain C
 * versions of these loops stayed scalar (measured: ~2.4 ns per logit for
 * the max scan at 49k). Helpers are macros because functions taking or
 * returning 32-byte vectors change the ABI without AVX (-Wpsabi).
 */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/sampler/sampler_internal.h"

#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#endif

#define SK_CAT2(a, b) a##_##b
#define SK_CAT(a, b) SK_CAT2(a, b)
#define SK(name) SK_CAT(name, SK_SUFFIX)
#define SK_N (8 / SK_W)

typedef float SK(vf) __attribute__((vector_size(SK_W * 4)));
typedef int32_t SK(vi) __attribute__((vector_size(SK_W * 4)));
#define VF SK(vf)
#define VI SK(vi)
#define SK_LD(v, p) memcpy(&(v), (p), sizeof(v))
#define SK_ST(p, v) memcpy((p), &(v), sizeof(v))
#define SK_SEL(m, a, b) ((VF)((((VI)(a)) & (m)) | (((VI)(b)) & ~(m))))
#define SK_SELI(m, a, b) (((a) & (m)) | ((b) & ~(m)))

/* SK_ANY(m): 1 if any lane of the compare mask m is set. One movemask
 * on x86 (extracting lanes one by one cost more than the compares it
 * guards: measured 25% of the top_p ladder); elsewhere an OR of the
 * mask's 64-bit halves. */
#if SK_W == 8 && defined(__AVX__)
#include <immintrin.h>
#define SK_ANY(m) (_mm256_movemask_ps((__m256)(m)) != 0)
#elif SK_W == 4 && defined(__SSE__)
#include <xmmintrin.h>
#define SK_ANY(m) (_mm_movemask_ps((__m128)(m)) != 0)
#else
#define SK_ANY(m) SK_CAT(sk_any, SK_SUFFIX)(&(m))
static inline int SK_CAT(sk_any, SK_SUFFIX)(const VI *m) {
    uint64_t u[SK_W / 2], r = 0;
    memcpy(u, m, sizeof u);
    for (int i = 0; i < SK_W / 2; i++) r |= u[i];
    return r != 0;
}
#endif

/* y = sampler_fexp(x), lane-wise, same operations in the same order. */
#define SK_FEXP(y, x)                                                     \
    do {                                                                  \
        VF xc_ = SK_SEL((x) < SAMPLER_EXP_LO, (VF){0} + SAMPLER_EXP_LO,   \
                        SK_SEL((x) > SAMPLER_EXP_HI,                      \
                               (VF){0} + SAMPLER_EXP_HI, (x)));           \
        VF t_ = xc_ * SAMPLER_LOG2E;                                      \
        VF n_ = (t_ + SAMPLER_ROUND_MAGIC) - SAMPLER_ROUND_MAGIC;         \
        VF f_ = xc_ - n_ * SAMPLER_LN2_HI;                                \
        f_ = f_ - n_ * SAMPLER_LN2_LO;                                    \
        VF p_ = (VF){0} + 1.0f / 5040.0f;                                 \
        p_ = p_ * f_ + 1.0f / 720.0f;                                     \
        p_ = p_ * f_ + 1.0f / 120.0f;                                     \
        p_ = p_ * f_ + 1.0f / 24.0f;                                      \
        p_ = p_ * f_ + 1.0f / 6.0f;                                       \
        p_ = p_ * f_ + 0.5f;                                              \
        p_ = p_ * f_ + 1.0f;                                              \
        p_ = p_ * f_ + 1.0f;                                              \
        VI e_ = (__builtin_convertvector(n_, VI) + 127) << 23;            \
        VF r_ = p_ * (VF)e_;                                              \
        (y) = SK_SEL((x) < SAMPLER_EXP_LO, (VF){0}, r_);                  \
    } while (0)

static void SK(scan)(const float *restrict l, int32_t n, sampler_scan *r) {
    VF mx[SK_N];
    VI idx[SK_N], cur[SK_N], cnt[SK_N], bad[SK_N];
    for (int q = 0; q < SK_N; q++) {
        mx[q] = (VF){0} - INFINITY;
        idx[q] = (VI){0} - 1;
        cnt[q] = (VI){0};
        bad[q] = (VI){0};
        for (int j = 0; j < SK_W; j++) cur[q][j] = q * SK_W + j;
    }
    int32_t i = 0;
    for (; i + 8 <= n; i += 8) {
        for (int q = 0; q < SK_N; q++) {
            VF x;
            SK_LD(x, l + i + q * SK_W);
            VI gt = x > mx[q]; /* strict: a lane keeps its first max */
            mx[q] = SK_SEL(gt, x, mx[q]);
            idx[q] = SK_SELI(gt, cur[q], idx[q]);
            cnt[q] -= x > -INFINITY;
            bad[q] |= (x != x) | (x > FLT_MAX);
            cur[q] += 8;
        }
    }
    /* combine the 8 lanes: highest value, then lowest index */
    float best = -INFINITY;
    int32_t arg = -1, nf = 0;
    bool any_bad = false;
    for (int q = 0; q < SK_N; q++) {
        for (int j = 0; j < SK_W; j++) {
            float v = mx[q][j];
            int32_t id = idx[q][j];
            if (id >= 0 && (v > best || (v == best && id < arg))) {
                best = v;
                arg = id;
            }
            nf += cnt[q][j];
            any_bad |= bad[q][j] != 0;
        }
    }
    for (; i < n; i++) {
        float x = l[i];
        if (x > best) {
            best = x;
            arg = i;
        }
        nf += x > -INFINITY;
        any_bad |= x != x || x > FLT_MAX;
    }
    r->max = best;
    r->argmax = arg;
    r->n_finite = nf;
    r->bad = any_bad;
}

/* Weights of 8 logical lanes at a time with the running block sums:
 * within a block each lane sums its column, the lanes are added in a
 * fixed tree, a ragged end is added one by one; blocks add up in double.
 * LOADX(x, i, q) loads the SK_W inputs of vector q at index i. */
#define SK_WEIGHTS_BODY(LOADX, SCALAR_X)                                   \
    double z = 0;                                                         \
    int32_t nb = (n + SAMPLER_BLOCK - 1) / SAMPLER_BLOCK;                 \
    for (int32_t b = 0; b < nb; b++) {                                    \
        int32_t i = b * SAMPLER_BLOCK;                                    \
        int32_t hi = n - i < SAMPLER_BLOCK ? n : i + SAMPLER_BLOCK;       \
        VF acc[SK_N];                                                     \
        for (int q = 0; q < SK_N; q++) acc[q] = (VF){0};                  \
        for (; i + 8 <= hi; i += 8) {                                     \
            for (int q = 0; q < SK_N; q++) {                              \
                VF x, y;                                                  \
                LOADX(x, i, q);                                           \
                x = (x - m) * inv_t;                                      \
                SK_FEXP(y, x);                                            \
                SK_ST(w + i + q * SK_W, y);                               \
                acc[q] += y;                                              \
            }                                                             \
        }                                                                 \
        float a[8];                                                       \
        for (int q = 0; q < SK_N; q++)                                    \
            for (int j = 0; j < SK_W; j++) a[q * SK_W + j] = acc[q][j];   \
        float s = ((a[0] + a[1]) + (a[2] + a[3])) +                       \
                  ((a[4] + a[5]) + (a[6] + a[7]));                        \
        for (; i < hi; i++) {                                             \
            w[i] = sampler_fexp((SCALAR_X - m) * inv_t);                  \
            s += w[i];                                                    \
        }                                                                 \
        bsum[b] = s;                                                      \
        z += s;                                                           \
    }                                                                     \
    return z;

#define SK_LOAD_ALL(x, i, q) SK_LD(x, l + (i) + (q) * SK_W)
#define SK_LOAD_CAND(x, i, q)                                              \
    for (int j_ = 0; j_ < SK_W; j_++) (x)[j_] = c[(i) + (q) * SK_W + j_].l

static double SK(exp_all)(const float *restrict l, int32_t n, float m,
                          float inv_t, float *restrict w,
                          double *restrict bsum) {
    SK_WEIGHTS_BODY(SK_LOAD_ALL, l[i])
}

static double SK(exp_cand)(const sampler_cand *restrict c, int32_t n,
                           float m, float inv_t, float *restrict w,
                           double *restrict bsum) {
    SK_WEIGHTS_BODY(SK_LOAD_CAND, c[i].l)
}

/* 1 when some lane of the 16 floats at p satisfies x CMP thr. */
#define SK_ANY16(hit, p, CMP, thr)                                        \
    do {                                                                  \
        VI any_ = (VI){0};                                                \
        for (int q_ = 0; q_ < 16 / SK_W; q_++) {                          \
            VF x_;                                                        \
            SK_LD(x_, (p) + q_ * SK_W);                                   \
            any_ |= x_ CMP(thr);                                          \
        }                                                                 \
        (hit) = SK_ANY(any_);                                             \
    } while (0)

static inline void SK(heap_offer)(const float *restrict l, int32_t i,
                                  int32_t k, sampler_cand *restrict out) {
    if (l[i] > out[0].l) {
        out[0] = (sampler_cand){l[i], i};
        sampler_heap_sift_down(out, k, 0);
    }
}

/* One pass with a bounded min-heap. Ids are visited in increasing order,
 * so a token tying the heap's worst has a higher id and rightly stays out:
 * a strict '>' suffices. Once the heap is full, each block of 16 logits
 * is first tested with vector compares; in LLM logits almost every block
 * is below the heap's worst, so the heap code runs rarely.
 * With scan != NULL the same pass also counts finite logits and flags
 * NaN/+inf, and max/argmax come from the heap's best (this saves the
 * separate scan pass when top_k is on). Cost grows with k (replacements
 * ~ k ln(n/k), each a sift of log k): fine for the usual top_k <= 100,
 * slower for thousands. */
static int32_t SK(select_top)(const float *restrict l, int32_t n, int32_t k,
                              sampler_cand *restrict out,
                              sampler_scan *scan) {
    int32_t h = 0, i = 0, nf = 0;
    bool bad = false;
    VI cnt = (VI){0}, badv = (VI){0};
    if (k > 0) {
        for (; i < n && h < k; i++) {
            float x = l[i];
            nf += x > -INFINITY;
            bad |= x != x || x > FLT_MAX;
            if (x > -INFINITY) {
                out[h] = (sampler_cand){x, i};
                sampler_heap_sift_up(out, h);
                h++;
            }
        }
    }
    if (h == k && k > 0) {
        for (; i < n && (i & 15); i++) {
            float x = l[i];
            nf += x > -INFINITY;
            bad |= x != x || x > FLT_MAX;
            SK(heap_offer)(l, i, k, out);
        }
        for (; i + 16 <= n; i += 16) {
            VF thr = (VF){0} + out[0].l;
            VI any = (VI){0};
            for (int q = 0; q < 16 / SK_W; q++) {
                VF x;
                SK_LD(x, l + i + q * SK_W);
                any |= x > thr;
                if (scan) {
                    cnt -= x > -INFINITY;
                    badv |= (x != x) | (x > FLT_MAX);
                }
            }
            int32_t hit = SK_ANY(any);
            if (!hit) continue;
            for (int32_t j = i; j < i + 16; j++) SK(heap_offer)(l, j, k, out);
        }
    }
    for (; i < n; i++) {
        float x = l[i];
        nf += x > -INFINITY;
        bad |= x != x || x > FLT_MAX;
        if (h == k && k > 0) SK(heap_offer)(l, i, k, out);
    }
    qsort(out, (size_t)h, sizeof *out, sampler_cand_cmp);
    if (scan) {
        for (int j = 0; j < SK_W; j++) {
            nf += cnt[j];
            bad |= badv[j] != 0;
        }
        scan->n_finite = nf;
        scan->bad = bad;
        scan->max = h > 0 ? out[0].l : -INFINITY;
        scan->argmax = h > 0 ? out[0].id : -1;
    }
    return h;
}

/* The exact test is (double)l - m >= thr; blocks whose logits are all
 * below a float bound no larger than m + thr are skipped first. */
static int32_t SK(gather_min_p)(const float *restrict l, int32_t n, float m,
                                double thr, sampler_cand *restrict out) {
    double td = (double)m + thr;
    float tf = (float)td;
    if ((double)tf > td) tf = nextafterf(tf, -INFINITY);
    VF tv = (VF){0} + tf;
    int32_t k = 0, i = 0;
    for (; i + 16 <= n; i += 16) {
        int32_t hit;
        SK_ANY16(hit, l + i, >=, tv);
        if (!hit) continue;
        for (int32_t j = i; j < i + 16; j++)
            if ((double)l[j] - (double)m >= thr)
                out[k++] = (sampler_cand){l[j], j};
    }
    for (; i < n; i++)
        if ((double)l[i] - (double)m >= thr) out[k++] = (sampler_cand){l[i], i};
    return k;
}

/* Masked logits become -inf, 8 at a time: the mask byte of 8 tokens,
 * broadcast and tested against the lane bits, selects per lane (random
 * masks made the bit-by-bit loop branch-mispredict on every other token).
 * All-ones words, the common case for loose grammars, cost one test. */
static int64_t SK(apply_mask)(float *restrict l, int32_t n,
                              const uint64_t *restrict mask) {
    int32_t nw = (n + 63) / 64;
    int64_t allowed = 0;
    VI lane;
    for (int j = 0; j < SK_W; j++) lane[j] = 1 << j;
    const VF ninf = (VF){0} - INFINITY;
    for (int32_t wi = 0; wi < nw; wi++) {
        int32_t base = wi * 64;
        int32_t nbits = n - base < 64 ? n - base : 64;
        uint64_t valid = nbits == 64 ? ~0ull : ((1ull << nbits) - 1);
        uint64_t bits = mask[wi] & valid;
        allowed += __builtin_popcountll(bits);
        if (bits == valid) continue;
        if (nbits == 64) {
            float *lw = l + base;
            for (int c = 0; c < 64; c += SK_W) {
                VI sel = ((VI){0} + (int32_t)((bits >> c) & ((1u << SK_W) - 1)))
                         & lane;
                VF x;
                SK_LD(x, lw + c);
                x = SK_SEL(sel != 0, x, ninf);
                SK_ST(lw + c, x);
            }
        } else {
            for (int32_t j = 0; j < nbits; j++)
                if (!((bits >> j) & 1)) l[base + j] = -INFINITY;
        }
    }
    return allowed;
}

/* top_p's threshold ladder (see top_p_all in sampler.c): for the 8
 * thresholds t[0] > ... > t[7], cnt[j] = #{i : l[i] >= t[j]} and mass[j]
 * = the sum of w[i] over those i. No scatter, no branches per token: 8
 * compares and masked adds per vector, and groups of 16 tokens all below
 * t[7] are skipped after one vector test (they would add exact zeros, so
 * skipping changes no bit of the sums). Masses: float per block of
 * SAMPLER_BLOCK over 8 logical lanes (so both instantiations agree),
 * double across blocks; counts are exact. */
static void SK(ladder)(const float *restrict l, const float *restrict w,
                       int32_t n, const float *restrict t,
                       double *restrict mass, int64_t *restrict cnt) {
    VF tv[8];
    VI cv[8];
    for (int j = 0; j < 8; j++) {
        tv[j] = (VF){0} + t[j];
        cv[j] = (VI){0};
        mass[j] = 0;
        cnt[j] = 0;
    }
    int32_t nb = (n + SAMPLER_BLOCK - 1) / SAMPLER_BLOCK;
    for (int32_t b = 0; b < nb; b++) {
        int32_t i = b * SAMPLER_BLOCK;
        int32_t hi = n - i < SAMPLER_BLOCK ? n : i + SAMPLER_BLOCK;
        VF acc[8][SK_N];
        bool touched = false;
        for (; i + 16 <= hi; i += 16) {
            int32_t hit;
            SK_ANY16(hit, l + i, >=, tv[7]);
            if (!hit) continue;
            if (!touched) {
                for (int j = 0; j < 8; j++)
                    for (int q = 0; q < SK_N; q++) acc[j][q] = (VF){0};
                touched = true;
            }
            for (int h = 0; h < 16; h += 8) {
                for (int q = 0; q < SK_N; q++) {
                    VF x, y;
                    SK_LD(x, l + i + h + q * SK_W);
                    SK_LD(y, w + i + h + q * SK_W);
                    for (int j = 0; j < 8; j++) {
                        VI mk = x >= tv[j];
                        acc[j][q] += (VF)((VI)y & mk);
                        cv[j] -= mk;
                    }
                }
            }
        }
        for (int j = 0; j < 8; j++) {
            float s = 0;
            if (touched) {
                float a[8];
                for (int q = 0; q < SK_N; q++)
                    for (int k = 0; k < SK_W; k++)
                        a[q * SK_W + k] = acc[j][q][k];
                s = ((a[0] + a[1]) + (a[2] + a[3])) +
                    ((a[4] + a[5]) + (a[6] + a[7]));
            }
            for (int32_t r = i; r < hi; r++) {
                if (l[r] >= t[j]) {
                    s += w[r];
                    cnt[j]++;
                }
            }
            mass[j] += s;
        }
    }
    for (int j = 0; j < 8; j++)
        for (int k = 0; k < SK_W; k++) cnt[j] += cv[j][k];
}

/* Tokens with l >= hi go to front[] (id order), those with lo <= l < hi
 * to the slots just below back_end (back_end[-1], back_end[-2], ...).
 * Returns the front count, *n_back the other. Blocks of 16 with no logit
 * >= lo are skipped with one vector test. */
static int32_t SK(gather_range)(const float *restrict l, int32_t n, float hi,
                                float lo, sampler_cand *restrict front,
                                sampler_cand *restrict back_end,
                                int32_t *n_back) {
    int32_t nn = 0, nb = 0, i = 0;
    VF lov = (VF){0} + lo;
    for (; i + 16 <= n; i += 16) {
        int32_t hit;
        SK_ANY16(hit, l + i, >=, lov);
        if (!hit) continue;
        for (int32_t j = i; j < i + 16; j++) {
            if (l[j] >= hi) front[nn++] = (sampler_cand){l[j], j};
            else if (l[j] >= lo) back_end[-1 - nb++] = (sampler_cand){l[j], j};
        }
    }
    for (; i < n; i++) {
        if (l[i] >= hi) front[nn++] = (sampler_cand){l[i], i};
        else if (l[i] >= lo) back_end[-1 - nb++] = (sampler_cand){l[i], i};
    }
    *n_back = nb;
    return nn;
}

const sampler_kernels SK(tr_sampler_kernels) = {
    .name = SK_NAME,
    .scan = SK(scan),
    .exp_all = SK(exp_all),
    .exp_cand = SK(exp_cand),
    .select_top = SK(select_top),
    .gather_min_p = SK(gather_min_p),
    .apply_mask = SK(apply_mask),
    .ladder = SK(ladder),
    .gather_range = SK(gather_range),
};

#undef SK_CAT2
#undef SK_CAT
#undef SK
#undef SK_N
#undef VF
#undef VI
#undef SK_LD
#undef SK_ST
#undef SK_SEL
#undef SK_SELI
#undef SK_FEXP
#undef SK_WEIGHTS_BODY
#undef SK_LOAD_ALL
#undef SK_LOAD_CAND
#undef SK_ANY16
#undef SK_ANY
#undef SK_W
#undef SK_SUFFIX
#undef SK_NAME
