/* sampler.c — logit processing and token sampling. See sampler.h for the
 * contract and the processing order; this file explains the how.
 *
 * Layering: runtime; libc + libm + base. Called from the engine
 * thread (one sampler per sequence, one thread at a time).
 *
 * Memory: everything O(vocab) is allocated by tr_sampler_new:
 *   cand  [vocab] {logit, id}   top_k heap, candidate lists, top_p boundary
 *   w     [vocab] float         sampling weights of the current candidates
 *   bsum  [vocab/256 + 1] double block sums of w (the walk skips blocks)
 *   counts/set_pos [vocab] int32 penalty window (only when penalties on)
 * The vector loops live in sampler_kernels_internal.h (one template,
 * instantiated for 16-byte vectors and for AVX2, chosen per CPU).
 *
 * Penalty window invariants (tr_sampler_check):
 *   counts[t] = occurrences of t in the window;
 *   set[0..n_set) = the distinct t with counts[t] > 0, set_pos[t] = index
 *   of t in set (-1 when absent); with penalty_last_n > 0 the window is
 *   the ring buffer ring[head..head+len) (mod cap), len <= cap.
 * Sliding costs O(1) per accepted token and applying the penalties costs
 * O(distinct tokens in the window), not O(vocab).
 */
#include "runtime/sampler/sampler.h"

#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/hash.h"
#include "base/util.h"
#include "runtime/sampler/sampler_internal.h"

typedef sampler_cand cand;

struct sampler {
    sampler_params p; /* p.logit_bias points at bias below */
    sampler_logit_bias *bias;
    int32_t vocab;
    const sampler_kernels *k;
    uint64_t seed0;
    uint64_t rng[4];

    bool pen_on;
    int32_t *counts;  /* [vocab] */
    int32_t *set_pos; /* [vocab] */
    int32_t *set;     /* [set_cap] */
    int32_t n_set;
    int32_t *ring;    /* [ring_alloc] when penalty_last_n > 0 */
    int32_t ring_cap; /* window size, penalty_last_n */
    int32_t ring_alloc; /* grows to ring_cap as tokens arrive (a huge
                           penalty_last_n costs only what is used) */
    int32_t ring_len, ring_head;
    int64_t n_hist;   /* tokens in the window (== ring_len when ringed) */

    cand *cand;       /* [vocab] */
    float *w;         /* [vocab] */
    double *bsum;     /* [vocab / SAMPLER_BLOCK + 1] */
    char err[160];
};

/* ---------------------------------------------------------------- PRNG */

/* splitmix64 expands the 64-bit seed into xoshiro's 256-bit state (the
 * generator's authors' recommendation: it never yields the all-zero
 * state): its first four outputs from state seed. */
static void rng_seed(uint64_t st[4], uint64_t seed) {
    uint64_t x = seed;
    for (int i = 0; i < 4; i++, x += TR_SPLITMIX64_GAMMA) st[i] = tr_splitmix64(x);
}

static inline uint64_t rotl64(uint64_t x, int k) {
    return (x << k) | (x >> (64 - k));
}

/* xoshiro256** */
static uint64_t rng_next(uint64_t st[4]) {
    uint64_t r = rotl64(st[1] * 5, 7) * 9;
    uint64_t t = st[1] << 17;
    st[2] ^= st[0];
    st[3] ^= st[1];
    st[1] ^= st[2];
    st[0] ^= st[3];
    st[2] ^= t;
    st[3] = rotl64(st[3], 45);
    return r;
}

/* Uniform in [0, 1) with 53 random bits. */
static double rng_uniform(uint64_t st[4]) {
    return (double)(rng_next(st) >> 11) * 0x1.0p-53;
}

/* ----------------------------------------------------------- params */

sampler_params tr_sampler_params_default(void) {
    sampler_params p;
    memset(&p, 0, sizeof p);
    p.temperature = 1.0f;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.repetition_penalty = 1.0f;
    p.presence_penalty = 0.0f;
    p.frequency_penalty = 0.0f;
    p.penalty_last_n = 64;
    p.seed = 0;
    p.logit_bias = NULL;
    p.n_logit_bias = 0;
    p.n_logprobs = 0;
    return p;
}

tr_status tr_sampler_params_validate(const sampler_params *p, tr_diag *d) {
    if (!p) return tr_diag_set(d, TR_ERR_INVALID_ARG, 0, "params is NULL");
    if (!(p->temperature >= 0.0f) || isinf(p->temperature))
        return tr_diag_set(d, TR_ERR_INVALID_ARG, 0,
                           "temperature must be finite and >= 0 (got %g)",
                           (double)p->temperature);
    if (p->top_k < 0)
        return tr_diag_set(d, TR_ERR_INVALID_ARG, 0,
                           "top_k must be >= 0 (0 = off) (got %d)",
                           (int)p->top_k);
    if (!(p->top_p > 0.0f && p->top_p <= 1.0f))
        return tr_diag_set(d, TR_ERR_INVALID_ARG, 0,
                           "top_p must be in (0, 1] (1 = off) (got %g)",
                           (double)p->top_p);
    if (!(p->min_p >= 0.0f && p->min_p <= 1.0f))
        return tr_diag_set(d, TR_ERR_INVALID_ARG, 0,
                           "min_p must be in [0, 1] (0 = off) (got %g)",
                           (double)p->min_p);
    if (!(p->repetition_penalty > 0.0f) || isinf(p->repetition_penalty))
        return tr_diag_set(d, TR_ERR_INVALID_ARG, 0,
                           "repetition_penalty must be finite and > 0 "
                           "(1 = off) (got %g)",
                           (double)p->repetition_penalty);
    if (!isfinite(p->presence_penalty))
        return tr_diag_set(d, TR_ERR_INVALID_ARG, 0,
                           "presence_penalty must be finite (got %g)",
                           (double)p->presence_penalty);
    if (!isfinite(p->frequency_penalty))
        return tr_diag_set(d, TR_ERR_INVALID_ARG, 0,
                           "frequency_penalty must be finite (got %g)",
                           (double)p->frequency_penalty);
    if (p->penalty_last_n < -1)
        return tr_diag_set(d, TR_ERR_INVALID_ARG, 0,
                           "penalty_last_n must be >= -1 (-1 = whole "
                           "history, 0 = off) (got %d)",
                           (int)p->penalty_last_n);
    if (p->n_logprobs < 0 || p->n_logprobs > SAMPLER_MAX_LOGPROBS)
        return tr_diag_set(d, TR_ERR_INVALID_ARG, 0,
                           "n_logprobs must be in [0, %d] (got %d)",
                           SAMPLER_MAX_LOGPROBS, (int)p->n_logprobs);
    if (p->n_logit_bias < 0)
        return tr_diag_set(d, TR_ERR_INVALID_ARG, 0,
                           "n_logit_bias must be >= 0 (got %d)",
                           (int)p->n_logit_bias);
    if (p->n_logit_bias > 0 && !p->logit_bias)
        return tr_diag_set(d, TR_ERR_INVALID_ARG, 0,
                           "logit_bias is NULL but n_logit_bias is %d",
                           (int)p->n_logit_bias);
    for (int32_t i = 0; i < p->n_logit_bias; i++) {
        float b = p->logit_bias[i].bias;
        if (p->logit_bias[i].token < 0)
            return tr_diag_set(d, TR_ERR_INVALID_ARG, 0,
                               "logit_bias[%d]: token %d is negative",
                               (int)i, (int)p->logit_bias[i].token);
        if (isnan(b) || b == INFINITY)
            return tr_diag_set(d, TR_ERR_INVALID_ARG, 0,
                               "logit_bias[%d]: bias must be finite or "
                               "-inf (got %g)",
                               (int)i, (double)b);
    }
    return TR_OK;
}

/* ---------------------------------------------------------- lifetime */

static bool penalties_on(const sampler_params *p) {
    return p->penalty_last_n != 0 &&
           (p->repetition_penalty != 1.0f || p->presence_penalty != 0.0f ||
            p->frequency_penalty != 0.0f);
}

void tr_sampler_free(sampler *s) {
    if (!s) return;
    free(s->bias);
    free(s->counts);
    free(s->set_pos);
    free(s->set);
    free(s->ring);
    free(s->cand);
    free(s->w);
    free(s->bsum);
    free(s);
}

tr_status tr_sampler_new(const sampler_params *params, int32_t vocab_size,
                      sampler **out, tr_diag *d) {
    if (!out) return tr_diag_set(d, TR_ERR_INVALID_ARG, 0, "out is NULL");
    tr_status st = tr_sampler_params_validate(params, d);
    if (st != TR_OK) return st;
    if (vocab_size <= 0)
        return tr_diag_set(d, TR_ERR_INVALID_ARG, 0,
                           "vocab_size must be > 0 (got %d)", (int)vocab_size);
    for (int32_t i = 0; i < params->n_logit_bias; i++)
        if (params->logit_bias[i].token >= vocab_size)
            return tr_diag_set(d, TR_ERR_INVALID_ARG, 0,
                               "logit_bias[%d]: token %d is outside the "
                               "vocabulary (size %d)",
                               (int)i, (int)params->logit_bias[i].token,
                               (int)vocab_size);

    sampler *s = calloc(1, sizeof *s);
    if (!s) return tr_diag_set(d, TR_ERR_NOMEM, 0, "out of memory");
    s->p = *params;
    s->vocab = vocab_size;
    size_t nv = (size_t)vocab_size;
    bool ok = true;
    if (params->n_logit_bias > 0) {
        s->bias = malloc((size_t)params->n_logit_bias * sizeof *s->bias);
        ok = ok && s->bias;
        if (s->bias)
            memcpy(s->bias, params->logit_bias,
                   (size_t)params->n_logit_bias * sizeof *s->bias);
    }
    s->p.logit_bias = s->bias;
    s->cand = malloc(nv * sizeof *s->cand);
    s->w = malloc(nv * sizeof *s->w);
    s->bsum = malloc((nv / SAMPLER_BLOCK + 1) * sizeof *s->bsum);
    ok = ok && s->cand && s->w && s->bsum;
    s->pen_on = penalties_on(params);
    if (ok && s->pen_on) {
        /* the window holds at most min(last_n, vocab) distinct tokens */
        size_t set_cap = nv;
        if (params->penalty_last_n > 0)
            set_cap = TR_MIN(nv, (size_t)params->penalty_last_n);
        s->counts = calloc(nv, sizeof *s->counts);
        s->set_pos = malloc(nv * sizeof *s->set_pos);
        s->set = malloc(set_cap * sizeof *s->set);
        ok = s->counts && s->set_pos && s->set;
        if (ok) memset(s->set_pos, 0xff, nv * sizeof *s->set_pos);
        if (ok && params->penalty_last_n > 0) {
            s->ring_cap = params->penalty_last_n;
            s->ring_alloc = TR_MIN(s->ring_cap, 64);
            s->ring = malloc((size_t)s->ring_alloc * sizeof *s->ring);
            ok = s->ring != NULL;
        }
    }
    if (!ok) {
        tr_sampler_free(s);
        return tr_diag_set(d, TR_ERR_NOMEM, 0,
                           "out of memory (vocabulary of %d tokens)",
                           (int)vocab_size);
    }
    s->k = &tr_sampler_kernels_generic;
#ifdef SAMPLER_HAVE_AVX2_KERNELS
    if (__builtin_cpu_supports("avx2"))
        s->k = &tr_sampler_kernels_avx2;
#endif
    s->seed0 = params->seed;
    rng_seed(s->rng, params->seed);
    *out = s;
    return TR_OK;
}

void tr_sampler_reset(sampler *s) {
    if (!s) return;
    if (s->pen_on) {
        for (int32_t i = 0; i < s->n_set; i++) {
            s->counts[s->set[i]] = 0;
            s->set_pos[s->set[i]] = -1;
        }
    }
    s->n_set = 0;
    s->ring_len = s->ring_head = 0;
    s->n_hist = 0;
    rng_seed(s->rng, s->seed0);
    s->err[0] = '\0';
}

void tr_sampler_reseed(sampler *s, uint64_t seed) {
    if (!s) return;
    s->seed0 = seed;
    rng_seed(s->rng, seed);
}

const char *tr_sampler_last_error(const sampler *s) { return s ? s->err : ""; }

int32_t tr_sampler_vocab_size(const sampler *s) { return s ? s->vocab : 0; }

int32_t tr_sampler_history_len(const sampler *s) {
    if (!s) return 0;
    return s->n_hist > INT32_MAX ? INT32_MAX : (int32_t)s->n_hist;
}

static tr_status fail(sampler *s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static tr_status fail(sampler *s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->err, sizeof s->err, fmt, ap);
    va_end(ap);
    return TR_ERR_INVALID_ARG;
}

/* ---------------------------------------------------------- penalties */

static void window_add(sampler *s, int32_t t) {
    if (s->counts[t] == 0) {
        s->set_pos[t] = s->n_set;
        s->set[s->n_set++] = t;
    }
    if (s->counts[t] < INT32_MAX) s->counts[t]++;
}

static void window_remove(sampler *s, int32_t t) {
    if (--s->counts[t] == 0) {
        /* swap-remove: order of the set is irrelevant (each token's
         * penalty is independent of the others) */
        int32_t pos = s->set_pos[t];
        int32_t last = s->set[--s->n_set];
        s->set[pos] = last;
        s->set_pos[last] = pos;
        s->set_pos[t] = -1;
    }
}

tr_status tr_sampler_accept(sampler *s, int32_t token) {
    if (!s) return TR_ERR_INVALID_ARG;
    if (token < 0 || token >= s->vocab)
        return fail(s, "accepted token %d is outside the vocabulary (size %d)",
                    (int)token, (int)s->vocab);
    if (!s->pen_on) return TR_OK;
    if (s->ring) {
        if (s->ring_len == s->ring_alloc && s->ring_alloc < s->ring_cap) {
            /* not yet wrapped (head is 0), so the entries stay in order */
            int32_t na = s->ring_alloc > s->ring_cap / 2 ? s->ring_cap
                                                         : 2 * s->ring_alloc;
            int32_t *nr = realloc(s->ring, (size_t)na * sizeof *nr);
            if (!nr) {
                snprintf(s->err, sizeof s->err, "out of memory");
                return TR_ERR_NOMEM;
            }
            s->ring = nr;
            s->ring_alloc = na;
        }
        if (s->ring_len == s->ring_cap) {
            window_remove(s, s->ring[s->ring_head]);
            s->ring[s->ring_head] = token;
            s->ring_head = (s->ring_head + 1) % s->ring_cap;
        } else {
            s->ring[(s->ring_head + s->ring_len) % s->ring_cap] = token;
            s->ring_len++;
        }
        s->n_hist = s->ring_len;
    } else {
        s->n_hist++;
    }
    window_add(s, token);
    return TR_OK;
}

static void apply_penalties(const sampler *s, float *l) {
    const float rp = s->p.repetition_penalty;
    const float fp = s->p.frequency_penalty;
    const float pp = s->p.presence_penalty;
    for (int32_t i = 0; i < s->n_set; i++) {
        int32_t t = s->set[i];
        float x = l[t];
        if (rp != 1.0f) x = x > 0.0f ? x / rp : x * rp;
        x = x - (float)s->counts[t] * fp - pp;
        l[t] = x;
    }
}

tr_status tr_sampler_check(const sampler *s) {
    if (!s) return TR_ERR_INVALID_ARG;
    if (!s->pen_on) return s->n_set == 0 && s->n_hist == 0 ? TR_OK
                                                             : TR_ERR_INTERNAL;
    int64_t total = 0;
    for (int32_t i = 0; i < s->n_set; i++) {
        int32_t t = s->set[i];
        if (t < 0 || t >= s->vocab || s->set_pos[t] != i || s->counts[t] <= 0)
            return TR_ERR_INTERNAL;
        total += s->counts[t];
    }
    int32_t nonzero = 0;
    for (int32_t t = 0; t < s->vocab; t++) {
        if (s->counts[t] < 0) return TR_ERR_INTERNAL;
        if (s->counts[t] > 0) nonzero++;
        else if (s->set_pos[t] != -1) return TR_ERR_INTERNAL;
    }
    if (nonzero != s->n_set) return TR_ERR_INTERNAL;
    if (s->ring) {
        if (s->ring_len < 0 || s->ring_len > s->ring_alloc ||
            s->ring_alloc > s->ring_cap ||
            (s->ring_len < s->ring_cap && s->ring_head != 0) ||
            s->ring_head < 0 || s->ring_head >= s->ring_cap ||
            s->n_hist != s->ring_len || total != s->ring_len)
            return TR_ERR_INTERNAL;
        /* recount the ring */
        for (int32_t i = 0; i < s->n_set; i++) {
            int32_t t = s->set[i], c = 0;
            for (int32_t j = 0; j < s->ring_len; j++)
                c += s->ring[(s->ring_head + j) % s->ring_cap] == t;
            if (c != s->counts[t]) return TR_ERR_INTERNAL;
        }
    } else if (total != s->n_hist && total < INT32_MAX) {
        return TR_ERR_INTERNAL;
    }
    return TR_OK;
}

/* ------------------------------------------------------------- scan */

/* NaN -> -inf, +inf -> FLT_MAX in place. NaN and +inf are rare (a broken
 * model; a +inf bias is rejected), so the vector scans only flag them and
 * this scalar fix-up runs before the scan is repeated. */
static void sanitize(float *l, int32_t n) {
    for (int32_t i = 0; i < n; i++) {
        if (l[i] != l[i]) l[i] = -INFINITY;
        else if (l[i] > FLT_MAX) l[i] = FLT_MAX;
    }
}

/* Walks sampling weights (inverse CDF): the first index whose running
 * sum exceeds target (0 <= target < total). Block sums let it skip whole
 * blocks. Rounding (block sums are float, the walk double) may leave the
 * walk short of target at the end: then the last index of positive weight
 * is returned, so a zero-weight (masked) index never is. */
static int32_t walk(const float *w, const double *bsum, int32_t n,
                    double target) {
    int32_t nb = (n + SAMPLER_BLOCK - 1) / SAMPLER_BLOCK;
    double cum = 0;
    int32_t b = 0;
    for (; b < nb; b++) {
        if (cum + bsum[b] > target) break;
        cum += bsum[b];
    }
    int32_t last = -1;
    for (int32_t i = b * SAMPLER_BLOCK; i < n; i++) {
        if (w[i] > 0) {
            last = i;
            cum += w[i];
            if (cum > target) return i;
        }
    }
    if (last >= 0) return last;
    for (int32_t i = n - 1; i >= 0; i--)
        if (w[i] > 0) return i;
    return 0; /* unreachable: the max logit has weight 1 */
}

/* ------------------------------------------------------------- top_p */

/* Cuts a sorted candidate list to its top_p prefix. */
static int32_t top_p_sorted(const sampler *s, const cand *c, int32_t n,
                            float m, float top_p) {
    float *w = s->w;
    s->k->exp_cand(c, n, m, 1.0f, w, s->bsum);
    double z = 0;
    for (int32_t i = 0; i < n; i++) z += w[i];
    double target = (double)top_p * z, cum = 0;
    for (int32_t i = 0; i < n; i++) {
        cum += w[i];
        if (cum >= target) return i + 1;
    }
    return n;
}

/* The exact, slow way, for what the fast way cannot settle (rounding
 * at a boundary): every finite token sorted, the prefix cut. */
static int32_t top_p_sort_all(sampler *s, const float *l, const float *w,
                              double target) {
    cand *c = s->cand;
    int32_t nb = 0;
    int32_t nn = s->k->gather_range(l, s->vocab, INFINITY, -FLT_MAX, c,
                                    c + s->vocab, &nb);
    TR_ASSERT(nn == 0);
    memmove(c, c + s->vocab - nb, (size_t)nb * sizeof *c);
    qsort(c, (size_t)nb, sizeof *c, sampler_cand_cmp);
    double cum = 0;
    for (int32_t i = 0; i < nb; i++) {
        cum += w[c[i].id];
        if (cum >= target) return i + 1;
    }
    return nb;
}

/* top_p over the whole vocabulary without sorting it.
 *
 * One vectorised exp pass gives the weights and Z. The nucleus is then
 * {l >= tau} for the right threshold tau (plus a prefix, in id order, of
 * the tokens tied at tau). A "ladder" pass measures the count and mass
 * of {l >= t} for 8 thresholds at once (vector compares, no scatter,
 * sampler_kernels_internal.h), skipping every group of 16 tokens below
 * its lowest rung, which in LLM rows is almost all of them. Rungs m,
 * m - 1/4, ..., m - 8 first (most nuclei end within 8 nats of the max),
 * then m - 9 ... m - 88 if needed (a full pass); they bracket tau in
 * [lo, hi): mass {l >= hi} < top_p Z <= mass {l >= lo}. While the
 * bracket holds more than 256 tokens, another ladder (skipping all below
 * lo) splits it in 8. Then one gathering
 * pass collects the front {l >= hi} (all in the nucleus, in any order)
 * and the bracket [lo, hi); only the bracket is sorted, and the exact
 * prefix sums (double, front first) cut it. Weights below m - 88 are
 * exactly 0, so the bracket never needs to reach below that.
 *
 * The ladder's masses are rounded (float within 256-token blocks); if
 * the exact front mass already reaches the target, or the bracket does
 * not, the bracket was misjudged by rounding and the exact fallback (sort
 * every finite token) decides. Fills s->cand with the nucleus and returns
 * its size. */
static int32_t top_p_all(sampler *s, const float *l, float m, float top_p) {
    const int32_t n = s->vocab;
    const sampler_kernels *k = s->k;
    float *w = s->w;
    cand *c = s->cand;
    const double target = (double)top_p * k->exp_all(l, n, m, 1.0f, w, s->bsum);
    const float bottom = m - 88.0f;
    float t[8] = {m,        m - 0.25f, m - 0.5f, m - 1.0f,
                  m - 2.0f, m - 3.0f,  m - 5.0f, m - 8.0f};
    double mass[8];
    int64_t cnt[8];
    /* bracket: the front {l >= hi} (c_hi tokens) falls short of the
     * target, {l >= lo} (c_lo tokens) reaches it; hi = INFINITY: no
     * front, lo = -FLT_MAX: every finite token */
    float hi = INFINITY, lo = -FLT_MAX;
    int64_t c_hi = 0, c_lo = INT64_MAX;
    k->ladder(l, w, n, t, mass, cnt);
    if (!(mass[7] >= target)) {
        hi = t[7];
        c_hi = cnt[7];
        /* finer just below 8, where such nuclei usually end */
        float t2[8] = {m - 9.0f,  m - 10.0f, m - 11.0f, m - 12.0f,
                       m - 14.0f, m - 17.0f, m - 24.0f, bottom};
        memcpy(t, t2, sizeof t);
        k->ladder(l, w, n, t, mass, cnt);
    }
    for (int pass = 0;; pass++) {
        int j = 0;
        while (j < 8 && !(mass[j] >= target)) j++;
        if (j < 8) {
            lo = t[j];
            c_lo = cnt[j];
        }
        if (j > 0) { /* rung j - 1 (the last one if j == 8) falls short */
            hi = t[j - 1];
            c_hi = cnt[j - 1];
        }
        if (c_lo - c_hi <= 256 || hi == INFINITY || pass >= 6) break;
        /* split [b, hi) in 8 rungs */
        float b = lo < bottom ? bottom : lo;
        for (int r = 0; r < 7; r++)
            t[r] = hi - (hi - b) * (float)(r + 1) / 8.0f;
        t[7] = b;
        if (!(t[0] < hi && t[6] > b)) break; /* no float left to split */
        k->ladder(l, w, n, t, mass, cnt);
    }

    int32_t nb = 0;
    int32_t nn = k->gather_range(l, n, hi, lo, c, c + n, &nb);
    double cum = 0;
    for (int32_t i = 0; i < nn; i++) cum += w[c[i].id];
    if (cum >= target) return top_p_sort_all(s, l, w, target);
    cand *bc = c + n - nb;
    qsort(bc, (size_t)nb, sizeof *bc, sampler_cand_cmp);
    int32_t take = 0;
    while (take < nb && cum < target) cum += w[bc[take++].id];
    if (cum < target) return top_p_sort_all(s, l, w, target);
    memmove(c + nn, bc, (size_t)take * sizeof *c);
    return nn + take;
}

/* ------------------------------------------------------------ sample */

/* 1 / temperature (> 0): a denormal temperature would make it infinite
 * and 0 * inf a NaN weight for the max; FLT_MAX gives the same limit. */
static float inv_temperature(const sampler *s) {
    float inv_t = 1.0f / s->p.temperature;
    return inv_t > FLT_MAX ? FLT_MAX : inv_t;
}

/* Steps 1-8 (sampler.h): processes l in place and leaves the candidates
 * in *c_out[0..*nc_out) (c_out NULL: every token; greedy: the argmax). */
static tr_status process(sampler *s, float *l, const uint64_t *mask,
                         sampler_scan *sr_out, cand **c_out, int32_t *nc_out) {
    const int32_t n = s->vocab;
    const sampler_kernels *k = s->k;
    const sampler_params *p = &s->p;

    /* 1. mask */
    if (mask && k->apply_mask(l, n, mask) == 0)
        return fail(s, "mask allows no token");
    /* 2. penalties */
    if (s->pen_on && s->n_set > 0) apply_penalties(s, l);
    /* 3. bias */
    for (int32_t i = 0; i < p->n_logit_bias; i++)
        l[s->bias[i].token] += s->bias[i].bias;

    /* 4. sanitize and scan; with top_k the selection pass scans too. When
     * fewer than top_k logits are finite the heap holds all of them,
     * which is the same candidate set as no top_k. */
    sampler_scan sr;
    cand *c = NULL; /* NULL: every token is a candidate */
    int32_t nc = n;
    bool greedy = p->temperature == 0.0f;
    if (!greedy && p->top_k > 0) {
        c = s->cand;
        nc = k->select_top(l, n, p->top_k, c, &sr);
        if (sr.bad) {
            sanitize(l, n);
            nc = k->select_top(l, n, p->top_k, c, &sr);
        }
    } else {
        k->scan(l, n, &sr);
        if (sr.bad) {
            sanitize(l, n);
            k->scan(l, n, &sr);
        }
    }
    if (sr.n_finite == 0)
        return fail(s, "no %stoken has a finite logit",
                    mask ? "allowed " : "");
    const float m = sr.max;

    if (greedy) {
        /* 5. greedy */
        c = s->cand;
        c[0] = (cand){m, sr.argmax};
        nc = 1;
    } else {
        /* 6. top_k: done above. 7. top_p */
        if (p->top_p < 1.0f) {
            if (c) {
                nc = top_p_sorted(s, c, nc, m, p->top_p);
            } else {
                c = s->cand;
                nc = top_p_all(s, l, m, p->top_p);
            }
        }
        /* 8. min_p */
        if (p->min_p > 0.0f) {
            double thr = log((double)p->min_p);
            if (c) {
                int32_t j = 0;
                for (int32_t i = 0; i < nc; i++)
                    if ((double)c[i].l - (double)m >= thr) c[j++] = c[i];
                nc = j;
            } else {
                c = s->cand;
                nc = k->gather_min_p(l, n, m, thr, c);
            }
        }
    }
    *sr_out = sr;
    *c_out = c;
    *nc_out = nc;
    return TR_OK;
}

/* Log-probs: the full softmax at temperature 1 over l[0..vocab) (max m;
 * uses s->w, s->bsum, not the candidates). Fills lp_out's top list and
 * returns log Z, from which the chosen token's log-prob follows. */
static double logprobs_top(sampler *s, const float *l, float m,
                           sampler_logprobs *lp_out) {
    const sampler_kernels *k = s->k;
    double log_z = log(k->exp_all(l, s->vocab, m, 1.0f, s->w, s->bsum));
    cand top[SAMPLER_MAX_LOGPROBS];
    int32_t nt = k->select_top(l, s->vocab, s->p.n_logprobs, top, NULL);
    lp_out->n_top = nt;
    for (int32_t i = 0; i < nt; i++) {
        lp_out->top[i].token = top[i].id;
        lp_out->top[i].logprob = (float)((double)top[i].l - m - log_z);
    }
    return log_z;
}

/* The processed row's weights at the sampler's temperature into s->w
 * (over the candidates c, or the whole row when c is NULL): their sum.
 * m: the row's max. */
static double row_weights(sampler *s, const float *l, const cand *c, int32_t nc, float m) {
    float inv_t = inv_temperature(s);
    return c ? s->k->exp_cand(c, nc, m, inv_t, s->w, s->bsum)
             : s->k->exp_all(l, s->vocab, m, inv_t, s->w, s->bsum);
}

tr_status tr_sampler_sample(sampler *s, float *logits, const uint64_t *mask,
                         int32_t *token_out, sampler_logprobs *lp_out) {
    if (!s) return TR_ERR_INVALID_ARG;
    s->err[0] = '\0';
    if (!logits || !token_out) return fail(s, "logits or token_out is NULL");
    float *l = logits;

    sampler_scan sr;
    cand *c;
    int32_t nc;
    tr_status st = process(s, l, mask, &sr, &c, &nc);
    if (st != TR_OK) return st;
    const float m = sr.max;

    double log_z = lp_out ? logprobs_top(s, l, m, lp_out) : 0;

    int32_t tok;
    if (s->p.temperature == 0.0f) {
        tok = sr.argmax;
    } else {
        /* 9. sample */
        double z = row_weights(s, l, c, nc, m);
        double u = rng_uniform(s->rng);
        int32_t j = walk(s->w, s->bsum, nc, u * z);
        tok = c ? c[j].id : j;
    }

    *token_out = tok;
    if (lp_out) {
        lp_out->token = tok;
        lp_out->logprob = (float)((double)l[tok] - m - log_z);
    }
    return TR_OK;
}

tr_status tr_sampler_logprobs(sampler *s, float *logits, const uint64_t *mask,
                              int32_t token, sampler_logprobs *lp_out) {
    if (!s) return TR_ERR_INVALID_ARG;
    s->err[0] = '\0';
    if (!logits || !lp_out) return fail(s, "logits or lp_out is NULL");
    if (token < 0 || token >= s->vocab)
        return fail(s, "token %d is outside the vocabulary (size %d)", (int)token,
                    (int)s->vocab);
    const int32_t n = s->vocab;
    const sampler_kernels *k = s->k;
    if (mask && k->apply_mask(logits, n, mask) == 0)
        return fail(s, "mask allows no token");
    /* the same passes as tr_sampler_sample's log-probs, over the same
     * values (processed logits are sanitized: no NaN, no +inf) */
    sampler_scan sr;
    k->scan(logits, n, &sr);
    if (sr.bad) {
        sanitize(logits, n);
        k->scan(logits, n, &sr);
    }
    if (sr.n_finite == 0) return fail(s, "no allowed token has a finite logit");
    const float m = sr.max;
    double log_z = logprobs_top(s, logits, m, lp_out);
    lp_out->token = token;
    lp_out->logprob = (float)((double)logits[token] - m - log_z);
    return TR_OK;
}

static int id_cmp(const void *pa, const void *pb) {
    int32_t a = *(const int32_t *)pa, b = *(const int32_t *)pb;
    return (a > b) - (a < b);
}

tr_status tr_sampler_candidates(sampler *s, float *logits, const uint64_t *mask,
                             int32_t *ids_out, int32_t *n_out) {
    if (!s) return TR_ERR_INVALID_ARG;
    s->err[0] = '\0';
    if (!logits || !ids_out || !n_out)
        return fail(s, "logits, ids_out or n_out is NULL");
    sampler_scan sr;
    cand *c;
    int32_t nc;
    tr_status st = process(s, logits, mask, &sr, &c, &nc);
    if (st != TR_OK) return st;
    int32_t k = 0;
    if (c) {
        for (int32_t i = 0; i < nc; i++) ids_out[k++] = c[i].id;
        qsort(ids_out, (size_t)k, sizeof *ids_out, id_cmp);
    } else {
        for (int32_t i = 0; i < s->vocab; i++)
            if (logits[i] > -INFINITY) ids_out[k++] = i;
    }
    *n_out = k;
    return TR_OK;
}

/* ------------------------------------------------ speculative sampling */

tr_status tr_sampler_propose(sampler *s, float *logits, int32_t n_max, sampler_proposal *q,
                             int32_t *token_out) {
    if (!s) return TR_ERR_INVALID_ARG;
    s->err[0] = '\0';
    if (!logits || !q || !token_out) return fail(s, "logits, q or token_out is NULL");
    if (n_max < 1 || n_max > SAMPLER_PROPOSAL_MAX)
        return fail(s, "a proposal of %d tokens, expected 1..%d", (int)n_max,
                    SAMPLER_PROPOSAL_MAX);
    const sampler_params *p = &s->p;
    if (p->temperature == 0.0f) return fail(s, "a proposal needs a temperature above 0");
    const int32_t n = s->vocab;
    float *l = logits;
    if (s->pen_on && s->n_set > 0) apply_penalties(s, l);
    for (int32_t i = 0; i < p->n_logit_bias; i++) l[s->bias[i].token] += s->bias[i].bias;
    int32_t want = p->top_k > 0 && p->top_k < n_max ? p->top_k : n_max;
    cand c[SAMPLER_PROPOSAL_MAX];
    sampler_scan sr;
    int32_t nc = s->k->select_top(l, n, want, c, &sr);
    if (sr.bad) {
        sanitize(l, n);
        nc = s->k->select_top(l, n, want, c, &sr);
    }
    if (nc == 0) return fail(s, "no token has a finite logit");
    /* c is sorted, best first: top_p and min_p cut a prefix of it */
    const double m = (double)c[0].l;
    if (p->top_p < 1.0f) nc = top_p_sorted(s, c, nc, (float)m, p->top_p);
    if (p->min_p > 0.0f) {
        double thr = log((double)p->min_p);
        int32_t keep = 1;
        while (keep < nc && (double)c[keep].l - m >= thr) keep++;
        nc = keep;
    }
    float inv_t = inv_temperature(s);
    double z = 0;
    for (int32_t i = 0; i < nc; i++) z += (double)sampler_fexp((c[i].l - (float)m) * inv_t);
    /* q holds the rounded weights; the draw walks exactly those */
    double zq = 0;
    q->n = 0;
    for (int32_t i = 0; i < nc; i++) {
        float w = (float)((double)sampler_fexp((c[i].l - (float)m) * inv_t) / z);
        if (!(w > 0.0f)) continue;
        q->id[q->n] = c[i].id;
        q->p[q->n++] = w;
        zq += w;
    }
    double target = rng_uniform(s->rng) * zq, cum = 0;
    int32_t j = 0;
    for (; j < q->n - 1; j++) {
        cum += q->p[j];
        if (cum > target) break;
    }
    *token_out = q->id[j];
    return TR_OK;
}

int32_t tr_sampler_proposal_restrict(sampler_proposal *q, bool (*keep)(void *ctx, int32_t id),
                                     void *ctx) {
    int32_t k = 0;
    double z = 0;
    for (int32_t i = 0; i < q->n; i++) {
        if (!keep(ctx, q->id[i])) continue;
        q->id[k] = q->id[i];
        z += q->p[k] = q->p[i];
        k++;
    }
    for (int32_t i = 0; i < k; i++) q->p[i] = (float)((double)q->p[i] / z);
    q->n = k;
    return k;
}

static int key_cmp(const void *pa, const void *pb) {
    int64_t a = *(const int64_t *)pa, b = *(const int64_t *)pb;
    return (a > b) - (a < b);
}

/* Where each of q's tokens sits among the candidates c[0..nc) (c NULL:
 * every token, at its id), or -1 where it is not one. */
static void proposal_slots(const sampler_proposal *q, const cand *c, int32_t nc, int32_t *at) {
    for (int32_t j = 0; j < q->n; j++) at[j] = c ? -1 : q->id[j];
    if (!c) return;
    /* q's ids sorted (with their index), one binary search per candidate */
    int64_t key[SAMPLER_PROPOSAL_MAX];
    for (int32_t j = 0; j < q->n; j++) key[j] = (int64_t)q->id[j] << 16 | j;
    qsort(key, (size_t)q->n, sizeof *key, key_cmp);
    for (int32_t i = 0; i < nc; i++) {
        int32_t lo = 0, hi = q->n;
        while (lo < hi) {
            int32_t mid = (lo + hi) / 2;
            if ((key[mid] >> 16) < c[i].id) lo = mid + 1;
            else hi = mid;
        }
        if (lo < q->n && (key[lo] >> 16) == c[i].id) at[key[lo] & 0xffff] = i;
    }
}

tr_status tr_sampler_sample_spec(sampler *s, float *logits, const uint64_t *mask,
                                 const sampler_proposal *q, int32_t draft, int32_t *token_out,
                                 sampler_logprobs *lp_out) {
    if (!s) return TR_ERR_INVALID_ARG;
    s->err[0] = '\0';
    if (!logits || !q || !token_out) return fail(s, "logits, q or token_out is NULL");
    int32_t jd = -1;
    for (int32_t j = 0; q->n <= SAMPLER_PROPOSAL_MAX && j < q->n; j++)
        if (q->id[j] == draft && q->p[j] > 0.0f && q->id[j] >= 0 && q->id[j] < s->vocab) jd = j;
    if (jd < 0) return fail(s, "the draft %d is not in its proposal", (int)draft);
    sampler_scan sr;
    cand *c;
    int32_t nc;
    tr_status st = process(s, logits, mask, &sr, &c, &nc);
    if (st != TR_OK) return st;
    const float m = sr.max;
    double log_z = lp_out ? logprobs_top(s, logits, m, lp_out) : 0;
    int32_t tok = sr.argmax;
    if (s->p.temperature != 0.0f) {
        double z = row_weights(s, logits, c, nc, m);
        int32_t at[SAMPLER_PROPOSAL_MAX];
        proposal_slots(q, c, nc, at);
        double pd = at[jd] >= 0 ? (double)s->w[at[jd]] / z : 0.0;
        tok = draft;
        if (!(rng_uniform(s->rng) * (double)q->p[jd] < pd)) {
            /* rejected: the residual max(0, p - q), in weight units */
            for (int32_t j = 0; j < q->n; j++) {
                if (at[j] < 0) continue;
                float *w = &s->w[at[j]];
                double nw = (double)*w - (double)q->p[j] * z;
                float f = nw > 0 ? (float)nw : 0.0f;
                s->bsum[at[j] / SAMPLER_BLOCK] += (double)f - (double)*w;
                *w = f;
            }
            int32_t nb = (nc + SAMPLER_BLOCK - 1) / SAMPLER_BLOCK;
            double zr = 0;
            for (int32_t b = 0; b < nb; b++) zr += s->bsum[b];
            /* zr > 0 in exact arithmetic (a rejection means p(d) < q(d));
             * a rounding remainder of nothing keeps the draft */
            if (zr > z * 1e-9) {
                int32_t j = walk(s->w, s->bsum, nc, rng_uniform(s->rng) * zr);
                tok = c ? c[j].id : j;
            }
        }
    }
    *token_out = tok;
    if (lp_out) {
        lp_out->token = tok;
        lp_out->logprob = (float)((double)logits[tok] - m - log_z);
    }
    return TR_OK;
}

const char *tr_sampler_kernels_name(const sampler *s) {
    return s ? s->k->name : "";
}
