/* test_sampler.c — unit tests of runtime/sampler.
 *
 * What is checked: greedy = exact argmax with lowest-id ties; top_k=1 =
 * greedy; seeded reproducibility; sampled frequencies against the softmax
 * (chi-square with a fixed seed, so deterministic); the exact token sets
 * kept by top_k / top_p / min_p against a sort-based reference (both the
 * top_k path and the whole-vocabulary path of top_p); penalties and bias change
 * the logits exactly as documented; masks exclude tokens always; error
 * cases; log-probs against a direct log-softmax; parameter validation;
 * the vector kernels against each other (bit-identical) and the fast exp
 * against libm.
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

#include "tests/unit/harness.h"

#include "runtime/sampler/sampler.h"
#include "runtime/sampler/sampler_internal.h"

/* ------------------------------------------------------------ helpers */

static uint64_t trng = 1;
static void trng_seed(uint64_t s) { trng = s * 2654435761u + 1; }
static uint64_t trng_next(void) {
    trng ^= trng << 13;
    trng ^= trng >> 7;
    trng ^= trng << 17;
    return trng;
}
static double trng_unif(void) {
    return (double)(trng_next() >> 11) * 0x1.0p-53;
}
static double trng_normal(void) {
    double u1 = trng_unif(), u2 = trng_unif();
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2);
}

static sampler *mk(const sampler_params *p, int32_t vocab) {
    sampler *s = NULL;
    tr_diag d;
    memset(&d, 0, sizeof d);
    tr_status st = tr_sampler_new(p, vocab, &s, &d);
    if (st != TR_OK) fprintf(stderr, "sampler_new: %s\n", d.message);
    assert_int_equal(st, TR_OK);
    assert_non_null(s);
    return s;
}

static int32_t naive_argmax(const float *l, int32_t n) {
    int32_t best = -1;
    for (int32_t i = 0; i < n; i++)
        if (l[i] == l[i] && l[i] > -INFINITY && (best < 0 || l[i] > l[best]))
            best = i;
    return best;
}

static void random_row(float *l, int32_t n, int shape) {
    for (int32_t i = 0; i < n; i++) {
        switch (shape) {
        case 0: l[i] = (float)(trng_normal() * 2.5); break;
        case 1: l[i] = (float)(trng_next() % 7); break; /* many ties */
        case 2: l[i] = (float)(trng_normal() * 0.3); break; /* flat */
        default: l[i] = (float)(trng_normal() * 8.0); break; /* peaked */
        }
    }
    if (shape == 0)
        for (int i = 0; i < 5; i++)
            l[trng_next() % (uint64_t)n] += (float)(5 + 5 * trng_unif());
}

/* ------------------------------------------------------------- greedy */

static void test_greedy_ties(void **state) {
    (void)state;
    sampler_params p = tr_sampler_params_default();
    p.temperature = 0;
    sampler *s = mk(&p, 10);
    float l[10] = {1, 5, 2, 5, 0, 5, -1, 3, 4, 5};
    int32_t tok = -1;
    assert_int_equal(tr_sampler_sample(s, l, NULL, &tok, NULL), TR_OK);
    assert_int_equal(tok, 1);
    /* all equal: id 0 */
    float e[10];
    for (int i = 0; i < 10; i++) e[i] = 0.25f;
    assert_int_equal(tr_sampler_sample(s, e, NULL, &tok, NULL), TR_OK);
    assert_int_equal(tok, 0);
    /* max only in the scalar tail and tied with a vector lane */
    float t[10] = {0, 0, 0, 0, 0, 0, 0, 0, 7, 7};
    assert_int_equal(tr_sampler_sample(s, t, NULL, &tok, NULL), TR_OK);
    assert_int_equal(tok, 8);
    float u[10] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 7};
    assert_int_equal(tr_sampler_sample(s, u, NULL, &tok, NULL), TR_OK);
    assert_int_equal(tok, 9);
    tr_sampler_free(s);
}

static void test_greedy_random(void **state) {
    (void)state;
    sampler_params p = tr_sampler_params_default();
    p.temperature = 0;
    static const int32_t sizes[] = {1, 7, 8, 9, 63, 64, 65, 257, 1000, 4099};
    trng_seed(11);
    for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++) {
        int32_t n = sizes[si];
        sampler *s = mk(&p, n);
        float *l = malloc((size_t)n * sizeof *l);
        for (int rep = 0; rep < 40; rep++) {
            random_row(l, n, rep % 4);
            if (rep % 5 == 0 && n > 2) l[n - 1] = -INFINITY;
            int32_t want = naive_argmax(l, n), tok = -1;
            assert_int_equal(tr_sampler_sample(s, l, NULL, &tok, NULL), TR_OK);
            assert_int_equal(tok, want);
        }
        free(l);
        tr_sampler_free(s);
    }
}

static void test_top_k1_is_greedy(void **state) {
    (void)state;
    trng_seed(3);
    int32_t n = 3001;
    float *l = malloc((size_t)n * sizeof *l);
    for (uint64_t seed = 0; seed < 30; seed++) {
        sampler_params p = tr_sampler_params_default();
        p.top_k = 1;
        p.temperature = 1.5f;
        p.top_p = seed % 2 ? 0.5f : 1.0f;
        p.seed = seed;
        sampler *s = mk(&p, n);
        random_row(l, n, (int)(seed % 4));
        int32_t want = naive_argmax(l, n), tok = -1;
        assert_int_equal(tr_sampler_sample(s, l, NULL, &tok, NULL), TR_OK);
        assert_int_equal(tok, want);
        tr_sampler_free(s);
    }
    free(l);
}

/* ----------------------------------------------------- reproducibility */

static void run_seq(uint64_t seed, int32_t *out, int steps, int32_t n,
                    sampler **keep) {
    sampler_params p = tr_sampler_params_default();
    p.seed = seed;
    p.top_k = 50;
    p.top_p = 0.95f;
    p.temperature = 0.9f;
    sampler *s = keep && *keep ? *keep : mk(&p, n);
    float *row = malloc((size_t)n * sizeof *row);
    trng_seed(77); /* same logits for every run */
    for (int i = 0; i < steps; i++) {
        random_row(row, n, 2);
        assert_int_equal(tr_sampler_sample(s, row, NULL, &out[i], NULL), TR_OK);
        assert_int_equal(tr_sampler_accept(s, out[i]), TR_OK);
    }
    free(row);
    if (keep) *keep = s;
    else tr_sampler_free(s);
}

static void test_seed_reproducible(void **state) {
    (void)state;
    enum { STEPS = 200 };
    int32_t a[STEPS], b[STEPS], c[STEPS], d[STEPS];
    run_seq(1234, a, STEPS, 5000, NULL);
    run_seq(1234, b, STEPS, 5000, NULL);
    run_seq(1235, c, STEPS, 5000, NULL);
    assert_memory_equal(a, b, sizeof a);
    int diff = 0;
    for (int i = 0; i < STEPS; i++) diff += a[i] != c[i];
    assert_true(diff > STEPS / 4);
    /* reset repeats the sequence */
    sampler *s = NULL;
    run_seq(1234, c, STEPS, 5000, &s);
    tr_sampler_reset(s);
    run_seq(1234, d, STEPS, 5000, &s);
    assert_memory_equal(a, d, sizeof a);
    tr_sampler_free(s);
}

/* -------------------------------------------------------- distribution */

/* Pearson chi-square of counts against probabilities; cells whose
 * expectation is below 5 are pooled. */
static double chi_square(const long *cnt, const double *prob, int k,
                         long total, int *dof) {
    double chi = 0, pool_e = 0;
    long pool_o = 0;
    int cells = 0;
    for (int i = 0; i < k; i++) {
        double e = prob[i] * (double)total;
        if (e < 5) {
            pool_e += e;
            pool_o += cnt[i];
            continue;
        }
        chi += (cnt[i] - e) * (cnt[i] - e) / e;
        cells++;
    }
    if (pool_e > 0) {
        chi += (pool_o - pool_e) * (pool_o - pool_e) / pool_e;
        cells++;
    }
    *dof = cells - 1;
    return chi;
}

static void check_distribution(int32_t n, const float *logits, float temp,
                               long draws, uint64_t seed) {
    sampler_params p = tr_sampler_params_default();
    p.temperature = temp;
    p.seed = seed;
    sampler *s = mk(&p, n);
    long *cnt = calloc((size_t)n, sizeof *cnt);
    double *prob = malloc((size_t)n * sizeof *prob);
    float *row = malloc((size_t)n * sizeof *row);
    double mx = -INFINITY, z = 0;
    for (int32_t i = 0; i < n; i++) mx = fmax(mx, logits[i]);
    for (int32_t i = 0; i < n; i++) z += prob[i] = exp((logits[i] - mx) / temp);
    for (int32_t i = 0; i < n; i++) prob[i] /= z;
    for (long t = 0; t < draws; t++) {
        memcpy(row, logits, (size_t)n * sizeof *row);
        int32_t tok;
        assert_int_equal(tr_sampler_sample(s, row, NULL, &tok, NULL), TR_OK);
        assert_true(tok >= 0 && tok < n);
        cnt[tok]++;
    }
    int dof;
    double chi = chi_square(cnt, prob, n, draws, &dof);
    /* generous: mean dof, sd sqrt(2 dof); 6 sd + 10 is far beyond any
     * plausible fluctuation, while a wrong distribution (e.g. temperature
     * ignored, an off-by-one in the walk) lands orders of magnitude out */
    double limit = dof + 6 * sqrt(2.0 * dof) + 10;
    if (chi > limit)
        fprintf(stderr, "chi-square %.1f > %.1f (dof %d)\n", chi, limit, dof);
    assert_true(chi <= limit);
    free(cnt);
    free(prob);
    free(row);
    tr_sampler_free(s);
}

static void test_distribution_small(void **state) {
    (void)state;
    static const double pr[8] = {0.4, 0.25, 0.15, 0.1, 0.05, 0.03, 0.015, 0.005};
    float l[8];
    for (int i = 0; i < 8; i++) l[i] = (float)log(pr[i]);
    check_distribution(8, l, 1.0f, 100000, 42);
    check_distribution(8, l, 0.5f, 100000, 43);
    check_distribution(8, l, 2.0f, 100000, 44);
}

static void test_distribution_blocks(void **state) {
    (void)state;
    /* several walk blocks (256), ragged end, a masked-like -inf stretch */
    int32_t n = 1000;
    float *l = malloc((size_t)n * sizeof *l);
    trng_seed(5);
    for (int32_t i = 0; i < n; i++) l[i] = (float)(trng_normal() * 1.0);
    for (int32_t i = 300; i < 420; i++) l[i] = -INFINITY;
    check_distribution(n, l, 1.0f, 200000, 7);
    free(l);
}

/* ---------------------------------------------------- truncation sets */

/* Reference: steps 6-8 by full sort, weights from the same fexp. */
static int32_t ref_candidates(const float *l, int32_t n, const sampler_params *p,
                              int32_t *ids, bool *ambiguous) {
    sampler_cand *c = malloc((size_t)n * sizeof *c);
    int32_t nc = 0;
    for (int32_t i = 0; i < n; i++)
        if (l[i] > -INFINITY) c[nc++] = (sampler_cand){l[i], i};
    qsort(c, (size_t)nc, sizeof *c, sampler_cand_cmp);
    float m = c[0].l;
    *ambiguous = false;
    if (p->temperature == 0) {
        nc = 1;
    } else {
        if (p->top_k > 0 && p->top_k < nc) nc = p->top_k;
        if (p->top_p < 1) {
            double z = 0;
            for (int32_t i = 0; i < nc; i++) z += sampler_fexp(c[i].l - m);
            double target = (double)p->top_p * z, cum = 0;
            int32_t keep = nc;
            for (int32_t i = 0; i < nc; i++) {
                cum += sampler_fexp(c[i].l - m);
                if (fabs(cum - target) < 1e-9 * z) *ambiguous = true;
                if (cum >= target) {
                    keep = i + 1;
                    break;
                }
            }
            nc = keep;
        }
        if (p->min_p > 0) {
            double thr = log((double)p->min_p);
            int32_t j = 0;
            for (int32_t i = 0; i < nc; i++)
                if ((double)c[i].l - (double)m >= thr) c[j++] = c[i];
            nc = j;
        }
    }
    for (int32_t i = 0; i < nc; i++) ids[i] = c[i].id;
    free(c);
    /* increasing id order, as tr_sampler_candidates reports */
    for (int32_t i = 1; i < nc; i++) {
        int32_t x = ids[i], j = i;
        while (j > 0 && ids[j - 1] > x) {
            ids[j] = ids[j - 1];
            j--;
        }
        ids[j] = x;
    }
    return nc;
}

static void expect_set(const float *row, int32_t n, const sampler_params *p,
                       const int32_t *want, int32_t n_want) {
    sampler *s = mk(p, n);
    float *l = malloc((size_t)n * sizeof *l);
    int32_t *ids = malloc((size_t)n * sizeof *ids);
    memcpy(l, row, (size_t)n * sizeof *l);
    int32_t k = -1;
    assert_int_equal(tr_sampler_candidates(s, l, NULL, ids, &k), TR_OK);
    assert_int_equal(k, n_want);
    assert_memory_equal(ids, want, (size_t)k * sizeof *ids);
    /* and sampling only ever yields members (and yields all of them:
     * temperature 50 makes the kept set near-uniform) */
    sampler_params q = *p;
    q.temperature = 50.0f;
    sampler *s2 = mk(&q, n);
    bool *seen = calloc((size_t)n, 1);
    int draws = n_want <= 64 ? 400 * n_want : 300;
    for (int t = 0; t < draws; t++) {
        memcpy(l, row, (size_t)n * sizeof *l);
        int32_t tok;
        assert_int_equal(tr_sampler_sample(s2, l, NULL, &tok, NULL), TR_OK);
        bool member = false;
        for (int32_t i = 0; i < n_want; i++) member |= want[i] == tok;
        assert_true(member);
        seen[tok] = true;
    }
    if (n_want <= 64)
        for (int32_t i = 0; i < n_want; i++) assert_true(seen[want[i]]);
    free(seen);
    free(ids);
    free(l);
    tr_sampler_free(s);
    tr_sampler_free(s2);
}

static void test_top_p_known(void **state) {
    (void)state;
    /* probabilities 0.1 0.5 0.05 0.2 0.15 at ids 0..4 */
    static const double pr[5] = {0.1, 0.5, 0.05, 0.2, 0.15};
    float l[5];
    for (int i = 0; i < 5; i++) l[i] = (float)log(pr[i]);
    sampler_params p = tr_sampler_params_default();
    p.top_p = 0.8f; /* 0.5 + 0.2 = 0.7 < 0.8 <= 0.85 */
    int32_t w1[] = {1, 3, 4};
    expect_set(l, 5, &p, w1, 3);
    p.top_p = 0.5f; /* the max alone reaches it */
    int32_t w2[] = {1};
    expect_set(l, 5, &p, w2, 1);
    p.top_p = 0.3f;
    expect_set(l, 5, &p, w2, 1);
    p.top_p = 0.94f; /* needs all but the 0.05 (0.85 < 0.94 <= 0.95) */
    int32_t w3[] = {0, 1, 3, 4};
    expect_set(l, 5, &p, w3, 4);
    /* after top_k = 2 the renormalised pair is 0.714 / 0.286 */
    p.top_k = 2;
    p.top_p = 0.7f;
    expect_set(l, 5, &p, w2, 1);
    p.top_p = 0.75f;
    int32_t w4[] = {1, 3};
    expect_set(l, 5, &p, w4, 2);
}

static void test_top_k_min_p_known(void **state) {
    (void)state;
    float l[12] = {0, -1, -2, -3, -4, -5, 3, -2.5f, 1, 1, -0.5f, -9};
    sampler_params p = tr_sampler_params_default();
    p.top_k = 3; /* 3, 1 (id 8), 1 (id 9) */
    int32_t w1[] = {6, 8, 9};
    expect_set(l, 12, &p, w1, 3);
    p.top_k = 2; /* tie at 1: lower id wins */
    int32_t w2[] = {6, 8};
    expect_set(l, 12, &p, w2, 2);
    p.top_k = 0;
    p.min_p = 0.1f; /* keep l >= 3 + ln 0.1 = 0.697 */
    int32_t w3[] = {6, 8, 9};
    expect_set(l, 12, &p, w3, 3);
    p.min_p = 0.01f; /* keep l >= 3 - 4.605 = -1.605 */
    int32_t w4[] = {0, 1, 6, 8, 9, 10};
    expect_set(l, 12, &p, w4, 6);
    p.min_p = 1.0f; /* only the max */
    int32_t w5[] = {6};
    expect_set(l, 12, &p, w5, 1);
}

/* Differential: random rows, random settings, vs the sort reference.
 * Large flat rows give big nuclei (several ladder passes, large fronts). */
static void test_candidates_vs_reference(void **state) {
    (void)state;
    static const int32_t sizes[] = {5, 100, 1000, 20000, 60000};
    trng_seed(99);
    int checked = 0;
    for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++) {
        int32_t n = sizes[si];
        float *row = malloc((size_t)n * sizeof *row);
        float *l = malloc((size_t)n * sizeof *l);
        int32_t *ids = malloc((size_t)n * sizeof *ids);
        int32_t *want = malloc((size_t)n * sizeof *want);
        int reps = n > 10000 ? 12 : 40;
        for (int rep = 0; rep < reps; rep++) {
            random_row(row, n, rep % 4);
            if (rep % 3 == 0)
                for (int32_t i = 0; i < n / 10; i++)
                    row[trng_next() % (uint64_t)n] = -INFINITY;
            sampler_params p = tr_sampler_params_default();
            p.temperature = rep % 7 == 0 ? 0.0f : 0.7f;
            p.top_k = rep % 2 ? (int32_t)(trng_next() % 200) : 0;
            p.top_p = rep % 4 == 1 ? 1.0f : (float)(0.05 + 0.9 * trng_unif());
            p.min_p = rep % 5 == 0 ? (float)(0.2 * trng_unif()) : 0.0f;
            bool amb;
            if (naive_argmax(row, n) < 0) continue;
            int32_t nw = ref_candidates(row, n, &p, want, &amb);
            if (amb) continue;
            sampler *s = mk(&p, n);
            memcpy(l, row, (size_t)n * sizeof *l);
            int32_t k = -1;
            assert_int_equal(tr_sampler_candidates(s, l, NULL, ids, &k), TR_OK);
            if (k != nw)
                fprintf(stderr, "n=%d rep=%d top_k=%d top_p=%g min_p=%g: "
                                "%d candidates, want %d\n",
                        (int)n, rep, (int)p.top_k, (double)p.top_p,
                        (double)p.min_p, (int)k, (int)nw);
            assert_int_equal(k, nw);
            assert_memory_equal(ids, want, (size_t)k * sizeof *ids);
            tr_sampler_free(s);
            checked++;
        }
        free(row);
        free(l);
        free(ids);
        free(want);
    }
    assert_true(checked > 100);
}

static void test_top_p_large_nucleus(void **state) {
    (void)state;
    /* strictly decreasing, nearly flat: the nucleus is a long prefix of
     * ids, bracketed by several ladder passes */
    int32_t n = 50000;
    float *row = malloc((size_t)n * sizeof *row);
    for (int32_t i = 0; i < n; i++) row[i] = -(float)i * 2e-5f;
    sampler_params p = tr_sampler_params_default();
    p.top_p = 0.6f;
    int32_t *want = malloc((size_t)n * sizeof *want);
    bool amb;
    int32_t nw = ref_candidates(row, n, &p, want, &amb);
    assert_false(amb);
    assert_true(nw > 4096);
    for (int32_t i = 0; i < nw; i++) assert_int_equal(want[i], i);
    expect_set(row, n, &p, want, nw);
    /* all equal: ties by id, exactly half */
    for (int32_t i = 0; i < n; i++) row[i] = 1.5f;
    p.top_p = 0.5f;
    for (int32_t i = 0; i < n / 2; i++) want[i] = i;
    expect_set(row, n, &p, want, n / 2);
    free(row);
    free(want);
}

/* ---------------------------------------------------- penalties, bias */

static void test_penalties_exact(void **state) {
    (void)state;
    sampler_params p = tr_sampler_params_default();
    p.temperature = 0;
    p.repetition_penalty = 1.25f;
    p.frequency_penalty = 0.5f;
    p.presence_penalty = 0.3f;
    p.penalty_last_n = 4;
    sampler *s = mk(&p, 8);
    /* window: 1 2 2 5 (then 6 pushes the first 1 out) */
    int32_t hist[] = {1, 1, 2, 2, 5};
    for (size_t i = 0; i < 5; i++) assert_int_equal(tr_sampler_accept(s, hist[i]), TR_OK);
    assert_int_equal(tr_sampler_history_len(s), 4);
    assert_int_equal(tr_sampler_check(s), TR_OK);
    float l[8] = {1, 2, -2, 3, 4, 0.5f, 6, 7};
    int32_t tok;
    assert_int_equal(tr_sampler_sample(s, l, NULL, &tok, NULL), TR_OK);
    float want[8] = {1, 2.0f / 1.25f - 0.5f * 1 - 0.3f,
                     -2.0f * 1.25f - 0.5f * 2 - 0.3f, 3, 4,
                     0.5f / 1.25f - 0.5f - 0.3f, 6, 7};
    for (int i = 0; i < 8; i++) assert_true(l[i] == want[i]);
    assert_int_equal(tok, 7);

    /* the window slides: accept 7 three more times, the 2s fall out */
    for (int i = 0; i < 3; i++) assert_int_equal(tr_sampler_accept(s, 7), TR_OK);
    assert_int_equal(tr_sampler_check(s), TR_OK);
    float l2[8] = {1, 2, -2, 3, 4, 0.5f, 6, 7};
    assert_int_equal(tr_sampler_sample(s, l2, NULL, &tok, NULL), TR_OK);
    assert_true(l2[2] == -2.0f);
    assert_true(l2[1] == 2.0f);
    assert_true(l2[5] == 0.5f / 1.25f - 0.5f - 0.3f);
    assert_true(l2[7] == 7.0f / 1.25f - 0.5f * 3 - 0.3f);
    assert_int_equal(tok, 6);

    tr_sampler_reset(s);
    assert_int_equal(tr_sampler_history_len(s), 0);
    assert_int_equal(tr_sampler_check(s), TR_OK);
    float l3[8] = {1, 2, -2, 3, 4, 0.5f, 6, 7};
    assert_int_equal(tr_sampler_sample(s, l3, NULL, &tok, NULL), TR_OK);
    assert_true(l3[7] == 7.0f && l3[2] == -2.0f);
    assert_int_equal(tr_sampler_accept(s, 8), TR_ERR_INVALID_ARG);
    assert_int_equal(tr_sampler_accept(s, -1), TR_ERR_INVALID_ARG);
    assert_true(strstr(tr_sampler_last_error(s), "outside") != NULL);
    tr_sampler_free(s);

    /* -1: the whole history; 0: off */
    p.penalty_last_n = -1;
    p.repetition_penalty = 1.0f;
    s = mk(&p, 4);
    for (int i = 0; i < 1000; i++) assert_int_equal(tr_sampler_accept(s, i % 2), TR_OK);
    assert_int_equal(tr_sampler_check(s), TR_OK);
    float l4[4] = {1, 1, 1, 1};
    assert_int_equal(tr_sampler_sample(s, l4, NULL, &tok, NULL), TR_OK);
    assert_true(l4[0] == 1.0f - 500 * 0.5f - 0.3f);
    assert_true(l4[2] == 1.0f);
    tr_sampler_free(s);
    p.penalty_last_n = 0;
    s = mk(&p, 4);
    for (int i = 0; i < 10; i++) assert_int_equal(tr_sampler_accept(s, 0), TR_OK);
    float l5[4] = {1, 1, 1, 1};
    assert_int_equal(tr_sampler_sample(s, l5, NULL, &tok, NULL), TR_OK);
    assert_true(l5[0] == 1.0f);
    tr_sampler_free(s);
}

static void test_window_random(void **state) {
    (void)state;
    /* random accepts keep the invariants; counts match a recount */
    /* windows below, at and above the ring's first allocation (64), and
     * one far larger than the history (the ring grows on demand) */
    static const int32_t windows[] = {17, 64, 100, 300, 1 << 30};
    for (size_t wi = 0; wi < sizeof windows / sizeof *windows; wi++) {
        sampler_params p = tr_sampler_params_default();
        p.presence_penalty = 1.0f;
        p.penalty_last_n = windows[wi];
        sampler *s = mk(&p, 50);
        trng_seed(8);
        int32_t hist[3000];
        for (int i = 0; i < 3000; i++) {
            hist[i] = (int32_t)(trng_next() % 50);
            assert_int_equal(tr_sampler_accept(s, hist[i]), TR_OK);
            if (i % 97 == 0) assert_int_equal(tr_sampler_check(s), TR_OK);
        }
        int32_t w = windows[wi] < 3000 ? windows[wi] : 3000;
        assert_int_equal(tr_sampler_history_len(s), w);
        assert_int_equal(tr_sampler_check(s), TR_OK);
        /* the penalty lands exactly on the tokens of the last w */
        bool in[50] = {false};
        for (int i = 3000 - w; i < 3000; i++) in[hist[i]] = true;
        float l[50];
        for (int i = 0; i < 50; i++) l[i] = 2.0f;
        int32_t tok;
        assert_int_equal(tr_sampler_sample(s, l, NULL, &tok, NULL), TR_OK);
        for (int i = 0; i < 50; i++) assert_true(l[i] == (in[i] ? 1.0f : 2.0f));
        tr_sampler_free(s);
    }
}

static void test_bias(void **state) {
    (void)state;
    sampler_logit_bias b[] = {{2, 10.0f}, {0, -INFINITY}, {2, 0.5f}};
    sampler_params p = tr_sampler_params_default();
    p.temperature = 0;
    p.logit_bias = b;
    p.n_logit_bias = 3;
    sampler *s = mk(&p, 4);
    b[0].bias = 0; /* copied at creation: later edits do not matter */
    float l[4] = {100, 1, 2, 3};
    int32_t tok;
    assert_int_equal(tr_sampler_sample(s, l, NULL, &tok, NULL), TR_OK);
    assert_true(l[0] == -INFINITY);
    assert_true(l[2] == 12.5f);
    assert_int_equal(tok, 2);
    tr_sampler_free(s);
}

/* ------------------------------------------------------------- masks */

static void test_mask_never_sampled(void **state) {
    (void)state;
    int32_t n = 1000;
    int32_t nw = (n + 63) / 64;
    uint64_t *mask = calloc((size_t)nw, sizeof *mask);
    float *row = malloc((size_t)n * sizeof *row), *l = malloc((size_t)n * sizeof *l);
    trng_seed(21);
    for (int32_t i = 0; i < n; i++) {
        bool allowed = trng_next() % 10 == 0;
        if (allowed) mask[i / 64] |= 1ull << (i % 64);
        /* disallowed tokens get the big logits */
        row[i] = allowed ? (float)trng_normal() : 20.0f + (float)trng_normal();
    }
    for (uint64_t seed = 0; seed < 200; seed++) {
        sampler_params p = tr_sampler_params_default();
        p.seed = seed;
        p.temperature = 0.5f + (float)(seed % 4);
        p.top_k = seed % 3 ? 0 : 20;
        p.top_p = seed % 5 ? 1.0f : 0.9f;
        p.min_p = seed % 7 ? 0.0f : 0.05f;
        p.repetition_penalty = seed % 2 ? 1.3f : 1.0f;
        sampler *s = mk(&p, n);
        for (int i = 0; i < 10; i++) tr_sampler_accept(s, (int32_t)(trng_next() % (uint64_t)n));
        for (int t = 0; t < 10; t++) {
            memcpy(l, row, (size_t)n * sizeof *l);
            int32_t tok;
            sampler_logprobs lp;
            assert_int_equal(tr_sampler_sample(s, l, mask, &tok, t % 2 ? &lp : NULL), TR_OK);
            assert_true((mask[tok / 64] >> (tok % 64)) & 1);
            for (int32_t i = 0; i < n; i++)
                if (!((mask[i / 64] >> (i % 64)) & 1)) assert_true(l[i] == -INFINITY);
        }
        tr_sampler_free(s);
    }
    free(mask);
    free(row);
    free(l);
}

static void test_mask_errors(void **state) {
    (void)state;
    int32_t n = 70; /* two words, the last one ragged */
    sampler_params p = tr_sampler_params_default();
    sampler *s = mk(&p, n);
    float l[70];
    for (int i = 0; i < n; i++) l[i] = 1;
    uint64_t none[2] = {0, 0};
    int32_t tok = 12345;
    assert_int_equal(tr_sampler_sample(s, l, none, &tok, NULL), TR_ERR_INVALID_ARG);
    assert_string_equal(tr_sampler_last_error(s), "mask allows no token");
    assert_int_equal(tok, 12345);
    /* bits past the vocabulary do not count */
    uint64_t past[2] = {0, ~0ull << 6};
    for (int i = 0; i < n; i++) l[i] = 1;
    assert_int_equal(tr_sampler_sample(s, l, past, &tok, NULL), TR_ERR_INVALID_ARG);
    /* the one allowed token has -inf: also an error */
    uint64_t one[2] = {0, 1ull << 5};
    for (int i = 0; i < n; i++) l[i] = 1;
    l[69] = -INFINITY;
    assert_int_equal(tr_sampler_sample(s, l, one, &tok, NULL), TR_ERR_INVALID_ARG);
    assert_true(strstr(tr_sampler_last_error(s), "finite") != NULL);
    /* and with a finite logit it is the only choice */
    for (int i = 0; i < n; i++) l[i] = 1;
    assert_int_equal(tr_sampler_sample(s, l, one, &tok, NULL), TR_OK);
    assert_int_equal(tok, 69);
    /* NaN everywhere: error; NaN never sampled */
    for (int i = 0; i < n; i++) l[i] = NAN;
    assert_int_equal(tr_sampler_sample(s, l, NULL, &tok, NULL), TR_ERR_INVALID_ARG);
    for (int i = 0; i < n; i++) l[i] = i == 33 ? 0.0f : NAN;
    assert_int_equal(tr_sampler_sample(s, l, NULL, &tok, NULL), TR_OK);
    assert_int_equal(tok, 33);
    assert_true(l[0] == -INFINITY);
    /* +inf wins */
    for (int i = 0; i < n; i++) l[i] = 50;
    l[40] = INFINITY;
    assert_int_equal(tr_sampler_sample(s, l, NULL, &tok, NULL), TR_OK);
    assert_int_equal(tok, 40);
    assert_true(l[40] == FLT_MAX);
    assert_int_equal(tr_sampler_sample(s, NULL, NULL, &tok, NULL), TR_ERR_INVALID_ARG);
    tr_sampler_free(s);
    /* a tiny (denormal) temperature behaves like greedy */
    p.temperature = 1e-40f;
    s = mk(&p, n);
    for (int i = 0; i < n; i++) l[i] = (float)(i % 5);
    assert_int_equal(tr_sampler_sample(s, l, NULL, &tok, NULL), TR_OK);
    assert_int_equal(l[tok], 4.0f);
    assert_int_equal(tr_sampler_sample(s, l, NULL, NULL, NULL), TR_ERR_INVALID_ARG);
    tr_sampler_free(s);
}

/* ----------------------------------------------------------- logprobs */

static void test_logprobs(void **state) {
    (void)state;
    int32_t n = 777;
    float *row = malloc((size_t)n * sizeof *row), *l = malloc((size_t)n * sizeof *l);
    uint64_t mask[13];
    trng_seed(4);
    for (int i = 0; i < 13; i++) mask[i] = trng_next() | trng_next();
    random_row(row, n, 0);
    sampler_params p = tr_sampler_params_default();
    p.n_logprobs = 20;
    p.top_k = 5;
    p.temperature = 0.7f;
    p.repetition_penalty = 1.3f;
    for (uint64_t seed = 0; seed < 20; seed++) {
        p.seed = seed;
        sampler *s = mk(&p, n);
        tr_sampler_accept(s, naive_argmax(row, n));
        memcpy(l, row, (size_t)n * sizeof *l);
        int32_t tok;
        sampler_logprobs lp;
        assert_int_equal(tr_sampler_sample(s, l, seed % 2 ? mask : NULL, &tok, &lp),
                         TR_OK);
        /* reference log-softmax of the processed logits (left in l) */
        double mx = -INFINITY, z = 0;
        for (int32_t i = 0; i < n; i++) mx = fmax(mx, l[i]);
        for (int32_t i = 0; i < n; i++) z += exp((double)l[i] - mx);
        double lz = log(z);
        assert_int_equal(lp.token, tok);
        assert_true(fabs(lp.logprob - ((double)l[tok] - mx - lz)) < 1e-5);
        assert_int_equal(lp.n_top, 20);
        for (int i = 0; i < lp.n_top; i++) {
            int32_t t = lp.top[i].token;
            assert_true(fabs(lp.top[i].logprob - ((double)l[t] - mx - lz)) < 1e-5);
            if (i > 0) assert_true(lp.top[i].logprob <= lp.top[i - 1].logprob);
        }
        /* top[] really are the 20 best */
        int above = 0;
        for (int32_t i = 0; i < n; i++) above += l[i] > l[lp.top[19].token];
        assert_true(above <= 19);
        assert_int_equal(lp.top[0].token, naive_argmax(l, n));
        tr_sampler_free(s);
    }
    /* fewer finite tokens than asked */
    sampler_params q = tr_sampler_params_default();
    q.n_logprobs = 10;
    q.temperature = 0;
    sampler *s = mk(&q, 4);
    float l4[4] = {-INFINITY, 0, -INFINITY, (float)log(3.0)};
    int32_t tok;
    sampler_logprobs lp;
    assert_int_equal(tr_sampler_sample(s, l4, NULL, &tok, &lp), TR_OK);
    assert_int_equal(tok, 3);
    assert_int_equal(lp.n_top, 2);
    assert_int_equal(lp.top[0].token, 3);
    assert_int_equal(lp.top[1].token, 1);
    assert_true(fabs(lp.logprob - log(0.75)) < 1e-6);
    assert_true(fabs(lp.top[1].logprob - log(0.25)) < 1e-6);
    tr_sampler_free(s);
    free(row);
    free(l);
}

/* tr_sampler_logprobs after an unmasked sample reports, bit for bit,
 * what a masked sample of the same row reports (the engine's end-of-span
 * rule samples unmasked, then keeps an allowed token with these). */
static void test_logprobs_masked_after(void **state) {
    (void)state;
    int32_t n = 1000;
    float *row = malloc((size_t)n * sizeof *row), *a = malloc((size_t)n * sizeof *a),
          *b = malloc((size_t)n * sizeof *b);
    uint64_t mask[16];
    for (int round = 0; round < 40; round++) {
        trng_seed(100 + (uint64_t)round);
        random_row(row, n, round % 4);
        for (int i = 0; i < 16; i++) mask[i] = trng_next() & trng_next();
        sampler_params p = tr_sampler_params_default();
        p.n_logprobs = 1 + round % 20;
        p.temperature = round % 3 ? 0.8f : 0.0f;
        p.repetition_penalty = round % 2 ? 1.2f : 1.0f;
        p.presence_penalty = 0.3f;
        sampler_logit_bias bias[2] = {{7, 2.5f}, {(int32_t)(trng_next() % 1000), -INFINITY}};
        p.logit_bias = bias;
        p.n_logit_bias = 2;
        sampler *s1 = mk(&p, n), *s2 = mk(&p, n);
        for (int k = 0; k < 30; k++) {
            int32_t t = (int32_t)(trng_next() % (uint64_t)n);
            tr_sampler_accept(s1, t);
            tr_sampler_accept(s2, t);
        }
        memcpy(a, row, (size_t)n * sizeof *a);
        memcpy(b, row, (size_t)n * sizeof *b);
        int32_t ta, tb;
        sampler_logprobs la, lb;
        assert_int_equal(tr_sampler_sample(s1, a, mask, &ta, &la), TR_OK);
        assert_int_equal(tr_sampler_sample(s2, b, NULL, &tb, NULL), TR_OK);
        assert_int_equal(tr_sampler_logprobs(s2, b, mask, ta, &lb), TR_OK);
        assert_int_equal(lb.token, ta);
        assert_memory_equal(&la.logprob, &lb.logprob, sizeof la.logprob);
        assert_int_equal(la.n_top, lb.n_top);
        for (int i = 0; i < la.n_top; i++) {
            assert_int_equal(la.top[i].token, lb.top[i].token);
            assert_memory_equal(&la.top[i].logprob, &lb.top[i].logprob, sizeof(float));
        }
        /* greedy: the unmasked argmax, when allowed, is the masked one */
        if (p.temperature == 0.0f && (mask[tb >> 6] >> (tb & 63) & 1))
            assert_int_equal(ta, tb);
        tr_sampler_free(s1);
        tr_sampler_free(s2);
    }
    /* errors */
    sampler_params p = tr_sampler_params_default();
    sampler *s = mk(&p, 64);
    float l[64] = {0};
    uint64_t none = 0;
    sampler_logprobs lp;
    assert_int_equal(tr_sampler_logprobs(s, l, &none, 3, &lp), TR_ERR_INVALID_ARG);
    assert_non_null(strstr(tr_sampler_last_error(s), "allows no token"));
    assert_int_equal(tr_sampler_logprobs(s, l, NULL, 64, &lp), TR_ERR_INVALID_ARG);
    assert_non_null(strstr(tr_sampler_last_error(s), "outside the vocabulary"));
    tr_sampler_free(s);
    free(row);
    free(a);
    free(b);
}

/* --------------------------------------------------------- validation */

static void expect_invalid(const sampler_params *p, const char *needle) {
    tr_diag d;
    memset(&d, 0, sizeof d);
    assert_int_equal(tr_sampler_params_validate(p, &d), TR_ERR_INVALID_ARG);
    if (!strstr(d.message, needle))
        fprintf(stderr, "message '%s' lacks '%s'\n", d.message, needle);
    assert_non_null(strstr(d.message, needle));
    sampler *s = NULL;
    assert_int_equal(tr_sampler_new(p, 10, &s, NULL), TR_ERR_INVALID_ARG);
    assert_null(s);
}

static void test_validation(void **state) {
    (void)state;
    sampler_params d = tr_sampler_params_default();
    assert_int_equal(tr_sampler_params_validate(&d, NULL), TR_OK);
    assert_int_equal(tr_sampler_params_validate(NULL, NULL), TR_ERR_INVALID_ARG);
    sampler_params p;
    p = d; p.temperature = -0.1f; expect_invalid(&p, "temperature");
    p = d; p.temperature = NAN; expect_invalid(&p, "temperature");
    p = d; p.temperature = INFINITY; expect_invalid(&p, "temperature");
    p = d; p.top_k = -1; expect_invalid(&p, "top_k");
    p = d; p.top_p = 0; expect_invalid(&p, "top_p");
    p = d; p.top_p = 1.01f; expect_invalid(&p, "top_p");
    p = d; p.top_p = NAN; expect_invalid(&p, "top_p");
    p = d; p.min_p = -0.01f; expect_invalid(&p, "min_p");
    p = d; p.min_p = 1.5f; expect_invalid(&p, "min_p");
    p = d; p.repetition_penalty = 0; expect_invalid(&p, "repetition_penalty");
    p = d; p.presence_penalty = NAN; expect_invalid(&p, "presence_penalty");
    p = d; p.frequency_penalty = INFINITY; expect_invalid(&p, "frequency_penalty");
    p = d; p.penalty_last_n = -2; expect_invalid(&p, "penalty_last_n");
    p = d; p.n_logprobs = 21; expect_invalid(&p, "n_logprobs");
    p = d; p.n_logprobs = -1; expect_invalid(&p, "n_logprobs");
    p = d; p.n_logit_bias = 2; expect_invalid(&p, "logit_bias");
    sampler_logit_bias bad[] = {{1, NAN}};
    p = d; p.logit_bias = bad; p.n_logit_bias = 1; expect_invalid(&p, "logit_bias[0]");
    sampler_logit_bias neg[] = {{-3, 1}};
    p = d; p.logit_bias = neg; p.n_logit_bias = 1; expect_invalid(&p, "logit_bias[0]");
    /* limits that are fine */
    p = d; p.temperature = 0; p.top_p = 1; p.min_p = 1; p.n_logprobs = 20;
    assert_int_equal(tr_sampler_params_validate(&p, NULL), TR_OK);
    /* needs the vocabulary */
    tr_diag dg;
    sampler *s = NULL;
    sampler_logit_bias far[] = {{10, 1}};
    p = d; p.logit_bias = far; p.n_logit_bias = 1;
    assert_int_equal(tr_sampler_new(&p, 10, &s, &dg), TR_ERR_INVALID_ARG);
    assert_non_null(strstr(dg.message, "outside the vocabulary"));
    assert_int_equal(tr_sampler_new(&d, 0, &s, &dg), TR_ERR_INVALID_ARG);
    assert_non_null(strstr(dg.message, "vocab_size"));
    assert_int_equal(tr_sampler_new(&d, 10, NULL, &dg), TR_ERR_INVALID_ARG);
    assert_null(s);
}

/* ------------------------------------------------------------ kernels */

static void test_fexp(void **state) {
    (void)state;
    assert_true(sampler_fexp(0.0f) == 1.0f);
    assert_true(sampler_fexp(-INFINITY) == 0.0f);
    assert_true(sampler_fexp(-87.5f) == 0.0f);
    double worst = 0;
    for (float x = -86.9f; x <= 20.0f; x += 0.00731f) {
        double r = sampler_fexp(x), e = exp((double)x);
        worst = fmax(worst, fabs(r - e) / e);
    }
    fprintf(stderr, "fexp worst relative error %.3g\n", worst);
    assert_true(worst < 3e-7);
}

#ifdef SAMPLER_HAVE_AVX2_KERNELS
static bool scan_equal(const sampler_scan *a, const sampler_scan *b) {
    return a->max == b->max && a->argmax == b->argmax &&
           a->n_finite == b->n_finite && a->bad == b->bad;
}
#endif

/* The sampler's kernel sets: generic C (the "portable" variant) and AVX2. */
static int sampler_set_runs_here(const char *set) {
    if (strcmp(set, "portable") == 0) return 1;
#ifdef SAMPLER_HAVE_AVX2_KERNELS
    if (strcmp(set, "avx2") == 0) return __builtin_cpu_supports("avx2");
#endif
    return 0;
}

static void test_kernels_identical(void **state) {
    (void)state;
#ifdef SAMPLER_HAVE_AVX2_KERNELS
    /* the avx2 variant's test (harness.h, "Kernel-set variants") */
    if (!tr_test_kernels_wanted("avx2") || !__builtin_cpu_supports("avx2")) skip();
    const sampler_kernels *g = &tr_sampler_kernels_generic, *a = &tr_sampler_kernels_avx2;
    static const int32_t sizes[] = {1, 15, 16, 17, 255, 256, 257, 1000, 4101};
    trng_seed(31);
    for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++) {
        int32_t n = sizes[si];
        float *l = malloc((size_t)n * sizeof *l);
        float *l2 = malloc((size_t)n * sizeof *l2);
        float *w1 = malloc((size_t)n * sizeof *w1), *w2 = malloc((size_t)n * sizeof *w2);
        double *b1 = malloc(((size_t)n / SAMPLER_BLOCK + 1) * sizeof *b1);
        double *b2 = malloc(((size_t)n / SAMPLER_BLOCK + 1) * sizeof *b2);
        sampler_cand *c1 = malloc((size_t)n * sizeof *c1), *c2 = malloc((size_t)n * sizeof *c2);
        for (int rep = 0; rep < 8; rep++) {
            random_row(l, n, rep % 4);
            if (rep == 5) l[n / 2] = NAN;
            if (rep == 6) l[n - 1] = INFINITY;
            sampler_scan s1, s2;
            g->scan(l, n, &s1);
            a->scan(l, n, &s2);
            assert_true(scan_equal(&s1, &s2));
            if (s1.bad) continue;
            float m = s1.max;
            double z1 = g->exp_all(l, n, m, 0.8f, w1, b1);
            double z2 = a->exp_all(l, n, m, 0.8f, w2, b2);
            assert_true(z1 == z2);
            assert_memory_equal(w1, w2, (size_t)n * sizeof *w1);
            int32_t k = 1 + (int32_t)(trng_next() % 50);
            sampler_scan t1, t2;
            int32_t k1 = g->select_top(l, n, k, c1, &t1);
            int32_t k2 = a->select_top(l, n, k, c2, &t2);
            assert_int_equal(k1, k2);
            assert_memory_equal(c1, c2, (size_t)k1 * sizeof *c1);
            assert_true(scan_equal(&t1, &t2));
            assert_true(t1.max == s1.max && t1.argmax == s1.argmax &&
                        t1.n_finite == s1.n_finite);
            z1 = g->exp_cand(c1, k1, m, 1.0f, w1, b1);
            z2 = a->exp_cand(c2, k2, m, 1.0f, w2, b2);
            assert_true(z1 == z2);
            k1 = g->gather_min_p(l, n, m, -2.0, c1);
            k2 = a->gather_min_p(l, n, m, -2.0, c2);
            assert_int_equal(k1, k2);
            assert_memory_equal(c1, c2, (size_t)k1 * sizeof *c1);
            float t[8] = {m, m - 0.5f, m - 1, m - 2, m - 3, m - 5, m - 9, -FLT_MAX};
            double ms1[8], ms2[8];
            int64_t cn1[8], cn2[8];
            double zz = g->exp_all(l, n, m, 1.0f, w1, b1);
            g->ladder(l, w1, n, t, ms1, cn1);
            a->ladder(l, w1, n, t, ms2, cn2);
            assert_memory_equal(ms1, ms2, sizeof ms1);
            assert_memory_equal(cn1, cn2, sizeof cn1);
            /* exact counts; masses close to a double reference; the full
             * rung is the softmax denominator */
            for (int j = 0; j < 8; j++) {
                int64_t cc = 0;
                double mm = 0;
                for (int32_t i = 0; i < n; i++)
                    if (l[i] >= t[j]) {
                        cc++;
                        mm += sampler_fexp(l[i] - m);
                    }
                assert_int_equal(cn1[j], cc);
                assert_true(fabs(ms1[j] - mm) <= 1e-6 * mm + 1e-30);
            }
            assert_true(fabs(ms1[7] - zz) <= 1e-6 * zz); /* all finite: Z */
            int32_t nb1, nb2;
            k1 = g->gather_range(l, n, m - 1, m - 3, c1, c1 + n, &nb1);
            k2 = a->gather_range(l, n, m - 1, m - 3, c2, c2 + n, &nb2);
            assert_int_equal(k1, k2);
            assert_int_equal(nb1, nb2);
            assert_int_equal(k1, cn1[2]);
            assert_int_equal(k1 + nb1, cn1[4]);
            assert_memory_equal(c1, c2, (size_t)k1 * sizeof *c1);
            assert_memory_equal(c1 + n - nb1, c2 + n - nb2, (size_t)nb1 * sizeof *c1);
            uint64_t mask[70];
            for (int i = 0; i < 70; i++) mask[i] = trng_next() & trng_next();
            memcpy(l2, l, (size_t)n * sizeof *l);
            int64_t al1 = g->apply_mask(l, n, mask);
            int64_t al2 = a->apply_mask(l2, n, mask);
            assert_true(al1 == al2);
            assert_memory_equal(l, l2, (size_t)n * sizeof *l);
            for (int32_t i = 0; i < n; i++)
                assert_true(((mask[i / 64] >> (i % 64)) & 1) || l[i] == -INFINITY);
        }
        free(l);
        free(l2);
        free(w1);
        free(w2);
        free(b1);
        free(b2);
        free(c1);
        free(c2);
    }
#else
    fprintf(stderr, "not x86: generic kernels only\n");
#endif
}

static void test_large_vocab(void **state) {
    (void)state;
    /* Gemma-size vocabulary through every path once */
    int32_t n = 262144;
    float *row = malloc((size_t)n * sizeof *row), *l = malloc((size_t)n * sizeof *l);
    trng_seed(1);
    random_row(row, n, 0);
    int32_t want = naive_argmax(row, n);
    float temps[] = {0.0f, 1.0f};
    for (int ti = 0; ti < 2; ti++) {
        for (int cfg = 0; cfg < 4; cfg++) {
            sampler_params p = tr_sampler_params_default();
            p.temperature = temps[ti];
            p.top_k = cfg == 1 ? 40 : 0;
            p.top_p = cfg >= 1 ? 0.9f : 1.0f;
            p.min_p = cfg == 3 ? 0.05f : 0.0f;
            p.n_logprobs = 3;
            sampler *s = mk(&p, n);
            memcpy(l, row, (size_t)n * sizeof *l);
            int32_t tok;
            sampler_logprobs lp;
            assert_int_equal(tr_sampler_sample(s, l, NULL, &tok, &lp), TR_OK);
            if (p.temperature == 0) assert_int_equal(tok, want);
            assert_int_equal(lp.top[0].token, want);
            assert_true(lp.logprob <= 0);
            tr_sampler_free(s);
        }
    }
    free(row);
    free(l);
}

/* ------------------------------------------------ speculative sampling */

typedef struct spec_case {
    const char *name;
    sampler_params tp, dp; /* target's and draft's parameters */
    float noise;           /* draft logits = target's + noise * N(0, 1) */
    bool mask, greedy_draft, history;
} spec_case;

static bool mask_keep(void *ctx, int32_t id) {
    const uint64_t *m = ctx;
    return m[id >> 6] >> (id & 63) & 1;
}

/* Draws through the rule: the draft's token from its proposal (restricted
 * to the mask where there is one, as the engine restricts it to what the
 * grammar allows), the target's accept/reject; the tokens that come out
 * must follow p, the target's distribution (from the candidates path,
 * tested above against a sort reference), and the share kept must be
 * sum min(p, q). */
static void check_spec_case(const spec_case *sc, uint64_t seed) {
    enum { V = 40, DRAWS = 100000 };
    float tl[V], dl[V], row[V];
    trng_seed(seed);
    for (int i = 0; i < V; i++) {
        tl[i] = (float)(2.0 * trng_normal());
        dl[i] = tl[i] + sc->noise * (float)trng_normal();
    }
    uint64_t m[1] = {0};
    for (int i = 0; i < V; i++)
        if (!sc->mask || i % 3 != 1) m[0] |= UINT64_C(1) << i;
    const uint64_t *mask = sc->mask ? m : NULL;
    sampler *ts = mk(&sc->tp, V), *ds = mk(&sc->dp, V);
    if (sc->history) {
        static const int32_t h[] = {3, 7, 3, 11, 20, 3, 7};
        for (size_t i = 0; i < sizeof h / sizeof *h; i++) {
            assert_int_equal(tr_sampler_accept(ts, h[i]), TR_OK);
            assert_int_equal(tr_sampler_accept(ds, h[i]), TR_OK);
        }
    }
    /* p: the candidates after steps 1-8, weighted at the temperature */
    double prob[V] = {0}, z = 0;
    int32_t ids[V], nid = 0;
    memcpy(row, tl, sizeof row);
    assert_int_equal(tr_sampler_candidates(ts, row, mask, ids, &nid), TR_OK);
    double mx = -INFINITY;
    for (int32_t i = 0; i < nid; i++) mx = fmax(mx, row[ids[i]]);
    for (int32_t i = 0; i < nid; i++)
        z += prob[ids[i]] = exp(((double)row[ids[i]] - mx) / sc->tp.temperature);
    for (int i = 0; i < V; i++) prob[i] /= z;
    long cnt[V] = {0}, kept = 0;
    double overlap = 0; /* sum min(p, q), q as restricted */
    for (long t = 0; t < DRAWS; t++) {
        sampler_proposal q;
        int32_t d;
        memcpy(row, dl, sizeof row);
        if (sc->greedy_draft) { /* a deterministic proposer: q is d alone */
            d = 0;
            for (int i = 1; i < V; i++)
                if (dl[i] > dl[d] && (!mask || mask_keep(m, i))) d = i;
            q.n = 1, q.id[0] = d, q.p[0] = 1.0f;
        } else {
            assert_int_equal(tr_sampler_propose(ds, row, SAMPLER_PROPOSAL_MAX, &q, &d), TR_OK);
            if (mask && !mask_keep(m, d)) continue; /* cut: the engine samples p plainly */
            assert_true(tr_sampler_proposal_restrict(&q, mask_keep, m) > 0);
        }
        if (t == 0)
            for (int32_t j = 0; j < q.n; j++) overlap += fmin(prob[q.id[j]], q.p[j]);
        memcpy(row, tl, sizeof row);
        int32_t tok;
        assert_int_equal(tr_sampler_sample_spec(ts, row, mask, &q, d, &tok, NULL), TR_OK);
        assert_true(tok >= 0 && tok < V && prob[tok] > 0);
        cnt[tok]++;
        kept += tok == d;
    }
    long total = 0;
    for (int i = 0; i < V; i++) total += cnt[i];
    int dof;
    double chi = chi_square(cnt, prob, V, total, &dof);
    double limit = dof + 6 * sqrt(2.0 * dof) + 10;
    double acc = (double)kept / (double)total;
    fprintf(stderr, "spec %-12s chi-square %6.1f (limit %.1f, dof %d), kept %.3f of %ld "
            "(sum min(p,q) %.3f)\n", sc->name, chi, limit, dof, acc, total, overlap);
    assert_true(chi <= limit);
    /* the rule keeps a draft with probability sum min(p, q) (q fixed here:
     * the draft's logits do not change); 6 sd of a binomial share */
    if (!sc->mask) assert_true(fabs(acc - overlap) <= 6 * sqrt(overlap * (1 - overlap) / total) + 1e-3);
    tr_sampler_free(ts);
    tr_sampler_free(ds);
}

static void test_spec_distribution(void **state) {
    (void)state;
    sampler_params base = tr_sampler_params_default();
    base.temperature = 0.8f;
    spec_case cs[8];
    for (int i = 0; i < 8; i++) {
        memset(&cs[i], 0, sizeof cs[i]);
        cs[i].tp = cs[i].dp = base;
        cs[i].tp.seed = 11 + (uint64_t)i;
        cs[i].dp.seed = 101 + (uint64_t)i;
        cs[i].noise = 0.7f;
    }
    cs[0].name = "plain";
    cs[1].name = "top_k";
    cs[1].tp.top_k = cs[1].dp.top_k = 5;
    cs[2].name = "top_p/min_p";
    cs[2].tp.top_p = cs[2].dp.top_p = 0.7f;
    cs[2].tp.min_p = cs[2].dp.min_p = 0.05f;
    cs[2].tp.temperature = cs[2].dp.temperature = 1.3f;
    cs[3].name = "penalties";
    cs[3].history = true;
    cs[3].tp.repetition_penalty = cs[3].dp.repetition_penalty = 1.3f;
    cs[3].tp.frequency_penalty = 0.4f;
    cs[3].tp.presence_penalty = 0.3f;
    cs[4].name = "mask";
    cs[4].mask = true;
    cs[4].tp.top_p = cs[4].dp.top_p = 0.9f;
    cs[5].name = "far draft";
    cs[5].noise = 4.0f; /* mostly rejections: the residual carries it */
    cs[6].name = "greedy draft";
    cs[6].greedy_draft = true;
    cs[7].name = "greedy+mask";
    cs[7].greedy_draft = true;
    cs[7].mask = true;
    for (int i = 0; i < 8; i++) check_spec_case(&cs[i], 500 + (uint64_t)i);
}

/* Misuse is refused with a message; the twin draft is always kept. */
static void test_spec_edges(void **state) {
    (void)state;
    sampler_params p = tr_sampler_params_default();
    p.seed = 3;
    sampler *s = mk(&p, 8);
    float l[8] = {1, 2, 3, 4, 0, -1, 2, 1}, row[8];
    sampler_proposal q;
    int32_t d, tok;
    memcpy(row, l, sizeof row);
    assert_int_equal(tr_sampler_propose(s, row, 0, &q, &d), TR_ERR_INVALID_ARG);
    assert_int_equal(tr_sampler_propose(s, row, SAMPLER_PROPOSAL_MAX + 1, &q, &d),
                     TR_ERR_INVALID_ARG);
    memcpy(row, l, sizeof row);
    assert_int_equal(tr_sampler_propose(s, row, 8, &q, &d), TR_OK);
    assert_int_equal(q.n, 8);
    memcpy(row, l, sizeof row);
    assert_int_equal(tr_sampler_sample_spec(s, row, NULL, &q, 99, &tok, NULL),
                     TR_ERR_INVALID_ARG);
    assert_non_null(strstr(tr_sampler_last_error(s), "not in its proposal"));
    /* q = p (the same logits, nothing truncated): every draft is kept */
    for (int t = 0; t < 2000; t++) {
        memcpy(row, l, sizeof row);
        assert_int_equal(tr_sampler_propose(s, row, 8, &q, &d), TR_OK);
        memcpy(row, l, sizeof row);
        assert_int_equal(tr_sampler_sample_spec(s, row, NULL, &q, d, &tok, NULL), TR_OK);
        assert_int_equal(tok, d);
    }
    tr_sampler_free(s);
    p.temperature = 0.0f;
    s = mk(&p, 8);
    memcpy(row, l, sizeof row);
    assert_int_equal(tr_sampler_propose(s, row, 8, &q, &d), TR_ERR_INVALID_ARG);
    q.n = 2, q.id[0] = 2, q.id[1] = 3, q.p[0] = q.p[1] = 0.5f;
    memcpy(row, l, sizeof row);
    assert_int_equal(tr_sampler_sample_spec(s, row, NULL, &q, 2, &tok, NULL), TR_OK);
    assert_int_equal(tok, 3); /* greedy: the argmax, whatever was drafted */
    tr_sampler_free(s);
}

int main(void) {
    tr_test_kernels_require(sampler_set_runs_here);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy_ties),
        cmocka_unit_test(test_greedy_random),
        cmocka_unit_test(test_top_k1_is_greedy),
        cmocka_unit_test(test_seed_reproducible),
        cmocka_unit_test(test_distribution_small),
        cmocka_unit_test(test_distribution_blocks),
        cmocka_unit_test(test_top_p_known),
        cmocka_unit_test(test_top_k_min_p_known),
        cmocka_unit_test(test_candidates_vs_reference),
        cmocka_unit_test(test_top_p_large_nucleus),
        cmocka_unit_test(test_penalties_exact),
        cmocka_unit_test(test_window_random),
        cmocka_unit_test(test_bias),
        cmocka_unit_test(test_mask_never_sampled),
        cmocka_unit_test(test_mask_errors),
        cmocka_unit_test(test_logprobs),
        cmocka_unit_test(test_logprobs_masked_after),
        cmocka_unit_test(test_validation),
        cmocka_unit_test(test_fexp),
        cmocka_unit_test(test_kernels_identical),
        cmocka_unit_test(test_large_vocab),
        cmocka_unit_test(test_spec_distribution),
        cmocka_unit_test(test_spec_edges),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
