/* test_kernels.c — the CPU backend (kernels/cpu) against straightforward
 * scalar references computed in double, for both op kernel tables
 * (the "portable" and "avx2" kernel sets, the latter where the CPU has it) and 1, 2 and 3
 * threads; plus the worker pool, paged attention with random page tables,
 * and the determinism contract of kernels/backend.h (a token's outputs are
 * bitwise the same alone or in any batch, on any number of threads).
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tests/unit/harness.h"

#include "kernels/backend.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/cpu_features_internal.h"
#include "kernels/cpu/cpu_internal.h"
#include "kernels/cpu/quant_math_internal.h"
#include "kernels/cpu/threadpool_internal.h"
#include "base/util.h"

/* ---- helpers ---- */

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;

static uint64_t rng_next(void) {
    /* splitmix64 */
    uint64_t z = (g_rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in [lo, hi). */
static float rnd(float lo, float hi) {
    return lo + (hi - lo) * (float)((rng_next() >> 40) * (1.0 / 16777216.0));
}

static int rnd_int(int n) { return (int)(rng_next() % (uint64_t)n); }

static void fill(float *x, size_t n, float lo, float hi) {
    for (size_t i = 0; i < n; i++) x[i] = rnd(lo, hi);
}

/* Kernel sets: 0 = portable, 1 = avx2. The loops run ks over
 * [kset_first(), kset_end()): the set TRELLIS_TEST_KERNELS names, or every
 * set this CPU runs (harness.h, "Kernel-set variants"). */
static const char *const k_kset_names[] = {"portable", "avx2"};
static int kset_runs(int ks) { return ks == 0 || tr_cpu_features_avx2(); }
static int kset_first(void) { return tr_test_kernels_wanted("portable") ? 0 : 1; }
static int kset_end(void) { return tr_test_kernels_wanted("avx2") && kset_runs(1) ? 2 : 1; }
static int kset_runs_here(const char *set) {
    for (int ks = 0; ks < 2; ks++)
        if (strcmp(set, k_kset_names[ks]) == 0) return kset_runs(ks);
    return 0;
}

static tr_backend *make_backend(int kset, int threads) {
    const char *set = k_kset_names[kset];
    tr_backend *be = NULL;
    tr_backend_config cfg = {.threads = threads, .kernels = set};
    assert_int_equal(tr_backend_cpu_new(&cfg, &be, NULL), TR_OK);
    assert_non_null(be);
    tr_backend_info info = tr_backend_get_info(be);
    assert_string_equal(info.kernels, set);
    assert_int_equal(info.threads, threads);
    return be;
}

/* |got - want| <= atol + rtol * |want|, reporting the first failure. */
static void check_close(const float *got, const double *want, size_t n,
                        double atol, double rtol, const char *what) {
    for (size_t i = 0; i < n; i++) {
        double err = fabs((double)got[i] - want[i]);
        if (!(err <= atol + rtol * fabs(want[i]))) {
            fail_msg("%s[%zu]: got %.9g want %.9g (err %.3g)", what, i,
                     (double)got[i], want[i], err);
        }
    }
}

static float f16_round(float x) { return cpu_fp16_to_fp32(cpu_fp32_to_fp16(x)); }

/* ---- the worker pool ---- */

typedef struct pool_ctx {
    cpu_pool *pool;
    _Atomic int calls[8];
    _Atomic int errors;
    int slots[8];
    int rounds;
} pool_ctx;

static void count_task(void *ctx, int ith, int nth) {
    pool_ctx *c = ctx;
    if (ith < 0 || ith >= nth) atomic_fetch_add(&c->errors, 1);
    atomic_fetch_add(&c->calls[ith], 1);
}

static void barrier_task(void *ctx, int ith, int nth) {
    pool_ctx *c = ctx;
    for (int r = 0; r < c->rounds; r++) {
        c->slots[ith] = r * 100 + ith;
        tr_cpu_pool_barrier(c->pool);
        for (int j = 0; j < nth; j++)
            if (c->slots[j] != r * 100 + j) atomic_fetch_add(&c->errors, 1);
        tr_cpu_pool_barrier(c->pool);
    }
}

static void test_pool(void **state) {
    (void)state;
    cpu_pool *bad = NULL;
    assert_int_equal(tr_cpu_pool_new(0, &bad), TR_ERR_INVALID_ARG);
    assert_int_equal(tr_cpu_pool_new(TR_POOL_MAX_THREADS + 1, &bad),
                     TR_ERR_INVALID_ARG);
    assert_null(bad);
    for (int n = 1; n <= 4; n++) {
        pool_ctx c;
        memset(&c, 0, sizeof c);
        assert_int_equal(tr_cpu_pool_new(n, &c.pool), TR_OK);
        assert_int_equal(tr_cpu_pool_size(c.pool), n);
        int expect[8] = {0};
        for (int i = 0; i < 3000; i++) {
            int nth = 1 + i % (n + 1); /* n + 1 is clamped to n */
            tr_cpu_pool_run(c.pool, nth, count_task, &c);
            for (int j = 0; j < TR_POOL_MAX_THREADS && j < TR_MIN(nth, n); j++)
                expect[j]++;
        }
        for (int j = 0; j < 8; j++) assert_int_equal(c.calls[j], expect[j]);
        c.rounds = 200;
        for (int nth = 1; nth <= n; nth++)
            tr_cpu_pool_run(c.pool, nth, barrier_task, &c);
        assert_int_equal(c.errors, 0);
        tr_cpu_pool_free(c.pool);
    }
}

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Runs after the workers have gone to sleep (> TR_POOL_SPIN_NS idle) must
 * wake them. */
static void test_pool_sleep_wake(void **state) {
    (void)state;
    pool_ctx c;
    memset(&c, 0, sizeof c);
    assert_int_equal(tr_cpu_pool_new(3, &c.pool), TR_OK);
    for (int i = 0; i < 5; i++) {
        sleep_ms(3);
        tr_cpu_pool_run(c.pool, 3, count_task, &c);
        c.rounds = 3;
        sleep_ms(1);
        tr_cpu_pool_run(c.pool, 3, barrier_task, &c);
    }
    for (int j = 0; j < 3; j++) assert_int_equal(c.calls[j], 5);
    assert_int_equal(c.errors, 0);
    tr_cpu_pool_free(c.pool);
}

/* ---- backend basics ---- */

static void test_backend_basics(void **state) {
    (void)state;
    tr_backend *be = NULL;
    tr_diag d = {0};
    tr_backend_config cfg = {.threads = TR_CPU_MAX_THREADS + 1};
    assert_int_equal(tr_backend_cpu_new(&cfg, &be, &d), TR_ERR_INVALID_ARG);
    assert_non_null(strstr(d.message, "threads"));
    assert_null(be);
    assert_int_equal(tr_backend_cpu_new(NULL, NULL, NULL), TR_ERR_INVALID_ARG);
    assert_int_equal(tr_backend_cpu_new(NULL, &be, NULL), TR_OK); /* one per core */
    tr_backend_info info = tr_backend_get_info(be);
    assert_string_equal(info.name, "cpu");
    assert_true(info.threads >= 1);
    assert_true(info.host_memory);
    assert_false(info.async);
    assert_non_null(strstr(info.device, "thread"));
    /* the default: the best set this CPU runs */
    assert_string_equal(info.kernels, tr_cpu_features_avx512vnni() ? "avx512vnni"
                                      : tr_cpu_features_avx2()     ? "avx2"
                                                                   : "portable");
    assert_true(be->ops->supports(be, TR_BACKEND_CAP_WEIGHT, TR_DTYPE_Q4_1));
    assert_false(be->ops->supports(be, TR_BACKEND_CAP_WEIGHT, TR_DTYPE_IQ2_XS));
    assert_true(be->ops->supports_kv(be, TR_KV_F16, TR_KV_F16));
    assert_true(be->ops->supports_kv(be, TR_KV_Q8, TR_KV_Q4));
    assert_false(be->ops->supports_kv(be, (tr_kv_type)TR_KV_TYPE_COUNT, TR_KV_F16));
    void *p = NULL;
    assert_int_equal(be->ops->alloc(be, 1000, &p), TR_OK);
    assert_true(((uintptr_t)p & 63) == 0);
    char src[1000], dst[1000];
    for (int i = 0; i < 1000; i++) src[i] = (char)(i * 7);
    assert_int_equal(be->ops->upload(be->stream, p, src, sizeof src), TR_OK);
    assert_int_equal(be->ops->download(be->stream, dst, p, sizeof dst), TR_OK);
    assert_memory_equal(src, dst, sizeof src);
    assert_int_equal(be->ops->upload(be->stream, NULL, src, 0), TR_OK);
    assert_int_equal(be->ops->synchronize(be), TR_OK);
    /* weights are read in place: nothing to free */
    const void *dev = NULL;
    void *owned = (void *)1;
    assert_int_equal(be->ops->import_weights(be, src, sizeof src, &dev, &owned), TR_OK);
    assert_ptr_equal(dev, src);
    assert_null(owned);
    be->ops->free(be, p);
    be->ops->free(be, NULL);
    /* an event and a stream of two backends do not mix */
    tr_backend *other = make_backend(0, 1);
    tr_event *e = NULL;
    assert_int_equal(be->ops->event_new(be, &e), TR_OK);
    assert_int_equal(be->ops->event_record(e, other->stream), TR_ERR_INVALID_ARG);
    assert_int_equal(be->ops->stream_wait(other->stream, e), TR_ERR_INVALID_ARG);
    assert_int_equal(be->ops->event_record(e, be->stream), TR_OK);
    assert_int_equal(be->ops->event_synchronize(e), TR_OK);
    be->ops->event_free(e);
    be->ops->stream_free(be->stream); /* the default stream: not freed */
    tr_backend_free(other);
    tr_backend_free(be);
    tr_backend_free(NULL);
}

/* Kernel sets by name, from the config or from TRELLIS_CPU; a name the
 * CPU cannot run is an error naming it, never a silent fallback. */
static void test_kernel_set_choice(void **state) {
    (void)state;
    tr_backend *be = NULL;
    tr_diag d = {0};
    tr_backend_config cfg = {.threads = 1, .kernels = "sse9"};
    assert_int_equal(tr_backend_cpu_new(&cfg, &be, &d), TR_ERR_NOT_FOUND);
    assert_non_null(strstr(d.message, "'sse9'"));
    assert_non_null(strstr(d.message, "portable, avx2, avx512vnni"));
    assert_null(be);
    cfg.kernels = "avx512vnni";
    if (!tr_cpu_features_avx512vnni()) {
        assert_int_equal(tr_backend_cpu_new(&cfg, &be, &d), TR_ERR_UNSUPPORTED);
        assert_non_null(strstr(d.message, "AVX-512 VNNI"));
        assert_null(be);
    } else {
        assert_int_equal(tr_backend_cpu_new(&cfg, &be, &d), TR_OK);
        assert_string_equal(tr_backend_get_info(be).kernels, "avx512vnni");
        tr_backend_free(be);
        be = NULL;
    }
    /* the environment, unless the config names a set */
    setenv("TRELLIS_CPU", "portable", 1);
    cfg.kernels = NULL;
    assert_int_equal(tr_backend_cpu_new(&cfg, &be, &d), TR_OK);
    assert_string_equal(tr_backend_get_info(be).kernels, "portable");
    tr_backend_free(be);
    if (tr_cpu_features_avx2()) {
        cfg.kernels = "avx2";
        assert_int_equal(tr_backend_cpu_new(&cfg, &be, &d), TR_OK);
        assert_string_equal(tr_backend_get_info(be).kernels, "avx2");
        tr_backend_free(be);
        cfg.kernels = NULL;
    }
    be = NULL;
    setenv("TRELLIS_CPU", "fast", 1);
    assert_int_equal(tr_backend_cpu_new(&cfg, &be, &d), TR_ERR_NOT_FOUND);
    assert_non_null(strstr(d.message, "TRELLIS_CPU 'fast'"));
    assert_null(be);
    unsetenv("TRELLIS_CPU");
    /* through the registry */
    assert_int_equal(tr_backend_new("cpu", &(tr_backend_config){.threads = 2,
                                                                .kernels = "portable"},
                                    &be, &d),
                     TR_OK);
    tr_backend_info info = tr_backend_get_info(be);
    assert_string_equal(info.name, "cpu");
    assert_string_equal(info.kernels, "portable");
    assert_int_equal(info.threads, 2);
    tr_backend_free(be);
}

/* ---- elementwise and row ops ---- */

static void ref_rmsnorm(double *out, const float *x, const float *w, int n,
                        int dim, float eps) {
    for (int i = 0; i < n; i++) {
        double ss = 0;
        for (int j = 0; j < dim; j++) ss += (double)x[i * dim + j] * x[i * dim + j];
        double sc = 1.0 / sqrt(ss / dim + eps);
        for (int j = 0; j < dim; j++) out[i * dim + j] = x[i * dim + j] * sc * w[j];
    }
}

static void test_rmsnorm(void **state) {
    (void)state;
    const int dims[] = {576, 13, 64};
    const int ns[] = {1, 5, 40};
    for (int ks = kset_first(); ks < kset_end(); ks++)
        for (int th = 1; th <= 3; th++) {
            tr_backend *be = make_backend(ks, th);
            for (int di = 0; di < 3; di++)
                for (int ni = 0; ni < 3; ni++) {
                    int dim = dims[di], n = ns[ni];
                    size_t sz = (size_t)n * dim;
                    float *x = malloc(sz * 4), *out = malloc(sz * 4),
                          *w = malloc((size_t)dim * 4);
                    double *ref = malloc(sz * 8);
                    fill(x, sz, -3, 3);
                    fill(w, (size_t)dim, -2, 2);
                    ref_rmsnorm(ref, x, w, n, dim, 1e-5f);
                    be->ops->rmsnorm(be->stream, out, x, w, n, dim, 1e-5f);
                    check_close(out, ref, sz, 1e-6, 2e-6, "rmsnorm");
                    /* In place gives the same bits. */
                    be->ops->rmsnorm(be->stream, x, x, w, n, dim, 1e-5f);
                    assert_memory_equal(x, out, sz * 4);
                    free(x);
                    free(out);
                    free(w);
                    free(ref);
                }
            tr_backend_free(be);
        }
}

static void ref_rope(double *out, const float *x, int n, int n_heads, int hd,
                     const int32_t *pos, double base) {
    /* angles by GGML's recipe (float running product, as ops.c documents);
     * the rotation itself in double */
    const float scale = powf((float)base, -2.0f / (float)hd);
    for (int t = 0; t < n; t++)
        for (int h = 0; h < n_heads; h++)
            for (int i = 0; i < hd / 2; i++) {
                float thf = (float)pos[t];
                for (int k = 0; k < i; k++) thf *= scale;
                double th = thf;
                size_t o = ((size_t)t * n_heads + h) * hd + 2 * i;
                double a = x[o], b = x[o + 1];
                out[o] = a * cos(th) - b * sin(th);
                out[o + 1] = a * sin(th) + b * cos(th);
            }
}

/* The AVX2 rotation does the portable loop's arithmetic: same bits. */
static void test_rope_kernel_sets_agree(void **state) {
    (void)state;
    /* AVX2 against the portable reference: part of the avx2 variant */
    if (kset_end() < 2) skip();
    const int n = 9, nh = 3, hd = 64;
    float x0[n * nh * hd], x1[n * nh * hd];
    int32_t pos[n];
    fill(x0, TR_ARRAY_LEN(x0), -4, 4);
    memcpy(x1, x0, sizeof x0);
    for (int i = 0; i < n; i++) pos[i] = rnd_int(100000);
    tr_backend *p = make_backend(0, 1), *a = make_backend(1, 2);
    p->ops->rope(p->stream, x0, n, nh, hd, pos, 10000.0f);
    a->ops->rope(a->stream, x1, n, nh, hd, pos, 10000.0f);
    assert_memory_equal(x0, x1, sizeof x0);
    tr_backend_free(p);
    tr_backend_free(a);
}

static void test_rope(void **state) {
    (void)state;
    struct {
        int n, n_heads, hd;
        float base;
    } cases[] = {{1, 9, 64, 100000.0f}, {7, 3, 64, 10000.0f},
                 {40, 2, 6, 10000.0f}, {3, 1, 1100, 500000.0f}};
    for (int ks = kset_first(); ks < kset_end(); ks++)
        for (int th = 1; th <= 3; th++) {
            tr_backend *be = make_backend(ks, th);
            for (size_t ci = 0; ci < TR_ARRAY_LEN(cases); ci++) {
                int n = cases[ci].n, nh = cases[ci].n_heads, hd = cases[ci].hd;
                size_t sz = (size_t)n * nh * hd;
                float *x = malloc(sz * 4), *orig = malloc(sz * 4);
                double *ref = malloc(sz * 8);
                int32_t *pos = malloc((size_t)n * 4);
                for (int t = 0; t < n; t++) pos[t] = t == 0 ? 0 : rnd_int(5000);
                fill(x, sz, -2, 2);
                memcpy(orig, x, sz * 4);
                ref_rope(ref, x, n, nh, hd, pos, cases[ci].base);
                be->ops->rope(be->stream, x, n, nh, hd, pos, cases[ci].base);
                check_close(x, ref, sz, 2e-6, 2e-6, "rope");
                /* Position 0 is the identity. */
                assert_memory_equal(x, orig, (size_t)nh * hd * 4);
                /* Again at the same positions (the backend reuses its angle
                 * table): the same bits. */
                float *again = malloc(sz * 4);
                memcpy(again, orig, sz * 4);
                be->ops->rope(be->stream, again, n, nh, hd, pos, cases[ci].base);
                assert_memory_equal(again, x, sz * 4);
                /* Same positions, other base: a different table. */
                memcpy(again, orig, sz * 4);
                be->ops->rope(be->stream, again, n, nh, hd, pos, cases[ci].base * 2);
                if (n > 1) assert_memory_not_equal(again, x, sz * 4);
                /* One position changed: only that token differs. */
                if (n > 1) {
                    memcpy(again, orig, sz * 4);
                    pos[n - 1] += 1;
                    be->ops->rope(be->stream, again, n, nh, hd, pos, cases[ci].base);
                    size_t last = (size_t)(n - 1) * nh * hd;
                    assert_memory_equal(again, x, last * 4);
                    assert_memory_not_equal(again + last, x + last,
                                            (size_t)nh * hd * 4);
                }
                free(again);
                free(x);
                free(orig);
                free(ref);
                free(pos);
            }
            tr_backend_free(be);
        }
}

/* NEOX rotation: element i pairs with i + hd/2, theta_i = freq_scale *
 * (GGML's float running product pos * r^i). */
static void ref_rope_neox(double *out, const float *x, int n, int n_heads, int hd,
                          const int32_t *pos, double base, float freq_scale) {
    const float scale = powf((float)base, -2.0f / (float)hd);
    for (int t = 0; t < n; t++)
        for (int h = 0; h < n_heads; h++)
            for (int i = 0; i < hd / 2; i++) {
                float thf = (float)pos[t];
                for (int k = 0; k < i; k++) thf *= scale;
                if (freq_scale != 1.0f) thf *= freq_scale;
                double th = thf;
                size_t o = ((size_t)t * n_heads + h) * hd + i;
                double a = x[o], b = x[o + hd / 2];
                out[o] = a * cos(th) - b * sin(th);
                out[o + hd / 2] = a * sin(th) + b * cos(th);
            }
}

static void test_rope_neox(void **state) {
    (void)state;
    struct {
        int n, n_heads, hd;
        float base, fscale;
    } cases[] = {{1, 4, 256, 1000000.0f, 1.0f}, {7, 2, 64, 10000.0f, 1.0f},
                 {40, 2, 6, 10000.0f, 0.125f}, {3, 1, 1100, 500000.0f, 1.0f}};
    float *first[TR_ARRAY_LEN(cases)] = {0};
    for (int ks = kset_first(); ks < kset_end(); ks++)
        for (int th = 1; th <= 3; th++) {
            tr_backend *be = make_backend(ks, th);
            for (size_t ci = 0; ci < TR_ARRAY_LEN(cases); ci++) {
                int n = cases[ci].n, nh = cases[ci].n_heads, hd = cases[ci].hd;
                size_t sz = (size_t)n * nh * hd;
                float *x = malloc(sz * 4), *orig = malloc(sz * 4);
                double *ref = malloc(sz * 8);
                int32_t *pos = malloc((size_t)n * 4);
                g_rng = 99 + ci;
                for (int t = 0; t < n; t++) pos[t] = t == 0 ? 0 : rnd_int(5000);
                fill(x, sz, -2, 2);
                memcpy(orig, x, sz * 4);
                ref_rope_neox(ref, x, n, nh, hd, pos, cases[ci].base, cases[ci].fscale);
                be->ops->rope_neox(be->stream, x, n, nh, hd, pos, cases[ci].base, cases[ci].fscale);
                check_close(x, ref, sz, 2e-6, 2e-6, "rope_neox");
                assert_memory_equal(x, orig, (size_t)nh * hd * 4); /* pos 0 */
                /* every kernel set and thread count: the same bits */
                if (!first[ci]) {
                    first[ci] = malloc(sz * 4);
                    memcpy(first[ci], x, sz * 4);
                } else {
                    assert_memory_equal(x, first[ci], sz * 4);
                }
                /* two bases in turn (the two cached tables), then the
                 * first again: the same bits as the first time */
                float *again = malloc(sz * 4);
                memcpy(again, orig, sz * 4);
                be->ops->rope_neox(be->stream, again, n, nh, hd, pos, cases[ci].base * 3,
                                   cases[ci].fscale);
                be->ops->rope(be->stream, again, n, nh, hd, pos, cases[ci].base * 5);
                memcpy(again, orig, sz * 4);
                be->ops->rope_neox(be->stream, again, n, nh, hd, pos, cases[ci].base,
                                   cases[ci].fscale);
                assert_memory_equal(again, x, sz * 4);
                free(again);
                free(x);
                free(orig);
                free(ref);
                free(pos);
            }
            tr_backend_free(be);
        }
    for (size_t ci = 0; ci < TR_ARRAY_LEN(cases); ci++) free(first[ci]);
}

/* x/2 (1 + tanh(y)) in the form x / (1 + exp(-2y)), which keeps its
 * relative accuracy in the far negative tail (1 + tanh(y) cancels). */
static double ref_gelu(double x) {
    double y = sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x);
    return x / (1.0 + exp(-2.0 * y));
}

static void test_geglu_bias_scale_softcap(void **state) {
    (void)state;
    const int64_t ns[] = {1, 7, 8, 9, 2048, 20001};
    for (int ks = kset_first(); ks < kset_end(); ks++)
        for (int th = 1; th <= 3; th++) {
            tr_backend *be = make_backend(ks, th);
            for (size_t ni = 0; ni < TR_ARRAY_LEN(ns); ni++) {
                int64_t n = ns[ni];
                float *g = malloc((size_t)n * 4), *u = malloc((size_t)n * 4),
                      *out = malloc((size_t)n * 4);
                double *ref = malloc((size_t)n * 8);
                fill(g, (size_t)n, -12, 12);
                fill(u, (size_t)n, -3, 3);
                const float ext[] = {-100.0f, 100.0f, 0.0f, -30.0f, 30.0f, -1e-30f, 5.0f};
                for (size_t e = 0; e < TR_ARRAY_LEN(ext) && (int64_t)e < n; e++) g[e] = ext[e];
                for (int64_t i = 0; i < n; i++) ref[i] = ref_gelu(g[i]) * u[i];
                be->ops->geglu(be->stream, out, g, u, n);
                check_close(out, ref, (size_t)n, 1e-7, 3e-6, "geglu");
                be->ops->geglu(be->stream, g, g, u, n); /* in place: same bits */
                assert_memory_equal(g, out, (size_t)n * 4);
                /* scale and softcap */
                fill(g, (size_t)n, -80, 80);
                memcpy(out, g, (size_t)n * 4);
                be->ops->scale(be->stream, out, 25.298221f, n);
                for (int64_t i = 0; i < n; i++) {
                    float want = g[i] * 25.298221f;
                    assert_memory_equal(&out[i], &want, 4);
                }
                memcpy(out, g, (size_t)n * 4);
                be->ops->softcap(be->stream, out, 30.0f, n);
                for (int64_t i = 0; i < n; i++) ref[i] = 30.0 * tanh(g[i] / 30.0);
                check_close(out, ref, (size_t)n, 1e-30, 2e-6, "softcap");
                free(g);
                free(u);
                free(out);
                free(ref);
            }
            /* add_bias: every row gets the same exact float sums */
            enum { R = 13, D = 37 };
            float x[R * D], b[D], want[R * D];
            fill(x, R * D, -5, 5);
            fill(b, D, -1, 1);
            for (int r = 0; r < R; r++)
                for (int d = 0; d < D; d++) want[r * D + d] = x[r * D + d] + b[d];
            be->ops->add_bias(be->stream, x, b, R, D);
            assert_memory_equal(x, want, sizeof x);
            /* mul_cols: one exact product per element, the same per row */
            for (int r = 0; r < R; r++)
                for (int d = 0; d < D; d++) want[r * D + d] = x[r * D + d] * b[d];
            be->ops->mul_cols(be->stream, x, b, R, D);
            assert_memory_equal(x, want, sizeof x);
            tr_backend_free(be);
        }
}

static void test_swiglu_add_get_rows(void **state) {
    (void)state;
    const int64_t ns[] = {1, 7, 8, 9, 1536, 20001};
    for (int ks = kset_first(); ks < kset_end(); ks++)
        for (int th = 1; th <= 3; th++) {
            tr_backend *be = make_backend(ks, th);
            for (size_t ni = 0; ni < TR_ARRAY_LEN(ns); ni++) {
                int64_t n = ns[ni];
                float *g = malloc((size_t)n * 4), *u = malloc((size_t)n * 4),
                      *out = malloc((size_t)n * 4);
                double *ref = malloc((size_t)n * 8);
                fill(g, (size_t)n, -20, 20);
                fill(u, (size_t)n, -3, 3);
                /* Extremes: far tails of the sigmoid, zero. */
                const float ext[] = {-100.0f, 100.0f, 0.0f, -87.5f, 88.5f,
                                     -1e-30f, 30.0f};
                for (size_t e = 0; e < TR_ARRAY_LEN(ext) && (int64_t)e < n; e++)
                    g[e] = ext[e];
                for (int64_t i = 0; i < n; i++)
                    ref[i] = (double)g[i] / (1.0 + exp(-(double)g[i])) * u[i];
                be->ops->swiglu(be->stream, out, g, u, n);
                check_close(out, ref, (size_t)n, 1e-35, 2e-6, "swiglu");
                /* In place (out == gate) gives the same bits. */
                be->ops->swiglu(be->stream, g, g, u, n);
                assert_memory_equal(g, out, (size_t)n * 4);

                /* add: exact float sums. */
                float *a = malloc((size_t)n * 4), *b = malloc((size_t)n * 4);
                fill(a, (size_t)n, -5, 5);
                fill(b, (size_t)n, -5, 5);
                memcpy(out, a, (size_t)n * 4);
                be->ops->add(be->stream, out, b, n);
                for (int64_t i = 0; i < n; i++) {
                    float want = a[i] + b[i];
                    assert_memory_equal(&out[i], &want, 4);
                }
                free(a);
                free(b);
                free(g);
                free(u);
                free(out);
                free(ref);
            }
            /* get_rows: gather, repeated and reversed rows. */
            float x[5 * 6], out[4 * 6];
            fill(x, 30, -1, 1);
            const int32_t rows[4] = {4, 0, 4, 2};
            be->ops->get_rows(be->stream, out, x, 6, rows, 4);
            for (int i = 0; i < 4; i++)
                assert_memory_equal(out + i * 6, x + rows[i] * 6, 24);
            tr_backend_free(be);
        }
}

/* ---- quantized blocks (built by hand, dequantized by the test) ---- */

static void put_f16(uint8_t *p, float v) {
    uint16_t h = cpu_fp32_to_fp16(v);
    memcpy(p, &h, 2);
}

static float get_f16(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return cpu_fp16_to_fp32(h);
}

/* Random row of `cols` elements of type t (F32, F16, Q4_0, Q4_1, Q8_0,
 * Q4_K, Q6_K) with sane scales. */
static void random_row(tr_dtype t, uint8_t *row, int64_t cols) {
    uint64_t bytes = 0;
    assert_true(tr_dtype_row_bytes(t, (uint64_t)cols, &bytes));
    for (uint64_t i = 0; i < bytes; i++) row[i] = (uint8_t)rng_next();
    int64_t bs = tr_dtype_block_size(t), ts = tr_dtype_type_size(t);
    for (int64_t b = 0; b < cols / bs; b++) {
        uint8_t *blk = row + b * ts;
        switch (t) {
        case TR_DTYPE_F32:
            for (int i = 0; i < bs; i++) {
                float v = rnd(-1, 1);
                memcpy(blk + 4 * i, &v, 4);
            }
            break;
        case TR_DTYPE_F16:
            put_f16(blk, rnd(-1, 1));
            break;
        case TR_DTYPE_Q4_0:
        case TR_DTYPE_Q8_0:
            put_f16(blk, rnd(0.001f, 0.05f));
            break;
        case TR_DTYPE_Q4_1:
            put_f16(blk, rnd(0.001f, 0.05f));
            put_f16(blk + 2, rnd(-0.3f, 0.3f));
            break;
        case TR_DTYPE_Q4_K:
            put_f16(blk, rnd(0.0001f, 0.002f));
            put_f16(blk + 2, rnd(0.0001f, 0.002f));
            break;
        case TR_DTYPE_Q6_K:
            put_f16(blk + 208, rnd(0.0001f, 0.002f));
            break;
        default:
            fail_msg("random_row: type %d", (int)t);
        }
    }
}

/* The test's own dequantization for the simple types; K-quants go through
 * the quant module's portable dequantize_row (tested by test_quant). */
static void ref_dequant(tr_dtype t, const uint8_t *row, double *out,
                        int64_t cols) {
    switch (t) {
    case TR_DTYPE_F32:
        for (int64_t i = 0; i < cols; i++) {
            float v;
            memcpy(&v, row + 4 * i, 4);
            out[i] = v;
        }
        return;
    case TR_DTYPE_F16:
        for (int64_t i = 0; i < cols; i++) out[i] = get_f16(row + 2 * i);
        return;
    case TR_DTYPE_Q4_0:
        for (int64_t b = 0; b < cols / 32; b++) {
            const uint8_t *blk = row + b * 18;
            double d = get_f16(blk);
            for (int i = 0; i < 16; i++) {
                out[b * 32 + i] = d * ((blk[2 + i] & 15) - 8);
                out[b * 32 + i + 16] = d * ((blk[2 + i] >> 4) - 8);
            }
        }
        return;
    case TR_DTYPE_Q4_1:
        for (int64_t b = 0; b < cols / 32; b++) {
            const uint8_t *blk = row + b * 20;
            double d = get_f16(blk), m = get_f16(blk + 2);
            for (int i = 0; i < 16; i++) {
                out[b * 32 + i] = d * (blk[4 + i] & 15) + m;
                out[b * 32 + i + 16] = d * (blk[4 + i] >> 4) + m;
            }
        }
        return;
    case TR_DTYPE_Q8_0:
        for (int64_t b = 0; b < cols / 32; b++) {
            const uint8_t *blk = row + b * 34;
            double d = get_f16(blk);
            for (int i = 0; i < 32; i++) out[b * 32 + i] = d * (int8_t)blk[2 + i];
        }
        return;
    default: {
        const cpu_quant_kernels *q = tr_cpu_quant_get("portable");
        assert_non_null(q);
        float *tmp = malloc((size_t)cols * 4);
        q->dequantize_row(t, row, tmp, cols);
        for (int64_t i = 0; i < cols; i++) out[i] = tmp[i];
        free(tmp);
    }
    }
}

static void test_embed(void **state) {
    (void)state;
    const tr_dtype types[] = {TR_DTYPE_F32, TR_DTYPE_F16, TR_DTYPE_Q8_0,
                              TR_DTYPE_Q4_1, TR_DTYPE_Q4_K};
    const int64_t vocab = 50, dim = 256;
    for (int ks = kset_first(); ks < kset_end(); ks++)
        for (int th = 1; th <= 3; th += 2) {
            tr_backend *be = make_backend(ks, th);
            for (size_t ti = 0; ti < TR_ARRAY_LEN(types); ti++) {
                tr_dtype t = types[ti];
                uint64_t rb = 0;
                assert_true(tr_dtype_row_bytes(t, dim, &rb));
                uint8_t *table = malloc(rb * vocab);
                for (int64_t r = 0; r < vocab; r++) random_row(t, table + r * rb, dim);
                tr_weight w = {table, t, vocab, dim, 0};
                int32_t ids[70];
                for (int i = 0; i < 70; i++) ids[i] = rnd_int((int)vocab);
                ids[3] = -1; /* invalid ids embed as zeros */
                ids[5] = (int32_t)vocab;
                float *out = malloc(sizeof(float) * 70 * dim);
                double *ref = malloc(sizeof(double) * dim);
                be->ops->embed(be->stream, out, &w, ids, 70);
                for (int i = 0; i < 70; i++) {
                    if (i == 3 || i == 5) {
                        for (int64_t j = 0; j < dim; j++) ref[j] = 0;
                    } else {
                        ref_dequant(t, table + ids[i] * rb, ref, dim);
                    }
                    /* Dequantization is exact up to one float rounding. */
                    check_close(out + i * dim, ref, (size_t)dim, 0, 1e-7,
                                "embed");
                }
                free(table);
                free(out);
                free(ref);
            }
            tr_backend_free(be);
        }
}

/* ---- matmul (the quant module's tiles driven by the backend) ---- */

typedef struct mm_case {
    tr_dtype types[3];
    int64_t rows[3];
    int64_t cols;
} mm_case;

static void test_matmul(void **state) {
    (void)state;
    const mm_case cases[] = {
        {{TR_DTYPE_Q4_1, TR_DTYPE_Q4_1, TR_DTYPE_Q4_1}, {40, 24, 17}, 96},
        {{TR_DTYPE_Q4_0, TR_DTYPE_Q8_0, TR_DTYPE_F32}, {33, 8, 64}, 64},
        {{TR_DTYPE_Q4_K, TR_DTYPE_Q6_K, TR_DTYPE_F16}, {16, 9, 24}, 256},
    };
    const int ntoks[] = {1, 5, 70};
    for (int ks = kset_first(); ks < kset_end(); ks++)
        for (int th = 1; th <= 3; th++) {
            tr_backend *be = make_backend(ks, th);
            for (size_t ci = 0; ci < TR_ARRAY_LEN(cases); ci++) {
                const mm_case *mc = &cases[ci];
                int64_t cols = mc->cols;
                uint8_t *wdata[3];
                double *wref[3];
                tr_weight w[3];
                const tr_weight *wp[3];
                for (int m = 0; m < 3; m++) {
                    uint64_t rb = 0;
                    assert_true(tr_dtype_row_bytes(mc->types[m], cols, &rb));
                    wdata[m] = malloc(rb * mc->rows[m]);
                    wref[m] = malloc(sizeof(double) * mc->rows[m] * cols);
                    for (int64_t r = 0; r < mc->rows[m]; r++) {
                        random_row(mc->types[m], wdata[m] + r * rb, cols);
                        ref_dequant(mc->types[m], wdata[m] + r * rb,
                                    wref[m] + r * cols, cols);
                    }
                    w[m] = (tr_weight){wdata[m], mc->types[m], mc->rows[m], cols, 0};
                    wp[m] = &w[m];
                }
                for (size_t ni = 0; ni < TR_ARRAY_LEN(ntoks); ni++) {
                    int n = ntoks[ni];
                    float *x = malloc(sizeof(float) * n * cols);
                    fill(x, (size_t)(n * cols), -1, 1);
                    float *out[3], *init[3];
                    for (int m = 0; m < 3; m++) {
                        out[m] = malloc(sizeof(float) * n * mc->rows[m]);
                        init[m] = malloc(sizeof(float) * n * mc->rows[m]);
                        fill(init[m], (size_t)(n * mc->rows[m]), -1, 1);
                    }
                    for (int acc = 0; acc < 2; acc++) {
                        for (int m = 0; m < 3; m++)
                            memcpy(out[m], init[m],
                                   sizeof(float) * n * mc->rows[m]);
                        be->ops->matmul(be->stream, 3, out, wp, x, n, acc);
                        for (int m = 0; m < 3; m++) {
                            bool fl = mc->types[m] == TR_DTYPE_F32 ||
                                      mc->types[m] == TR_DTYPE_F16;
                            int64_t bs = mc->types[m] == TR_DTYPE_Q4_K ||
                                                 mc->types[m] == TR_DTYPE_Q6_K
                                             ? 256
                                             : 32;
                            for (int t = 0; t < n; t++)
                                for (int64_t r = 0; r < mc->rows[m]; r++) {
                                    const double *wr = wref[m] + r * cols;
                                    const float *xr = x + t * cols;
                                    double dot = 0, mag = 0, qerr = 0;
                                    for (int64_t b = 0; b < cols / bs; b++) {
                                        double amax = 0, wsum = 0;
                                        for (int64_t i = b * bs; i < (b + 1) * bs; i++) {
                                            dot += wr[i] * xr[i];
                                            mag += fabs(wr[i] * xr[i]);
                                            amax = fmax(amax, fabs(xr[i]));
                                            wsum += fabs(wr[i]);
                                        }
                                        /* Activation rounding bound. */
                                        qerr += amax / 127 / 2 * wsum;
                                    }
                                    double tol = (fl ? 0 : qerr * 1.01) +
                                                 2e-6 * mag + 1e-6;
                                    double base = acc ? init[m][t * mc->rows[m] + r] : 0;
                                    double got = out[m][t * mc->rows[m] + r];
                                    if (!(fabs(got - (base + dot)) <= tol))
                                        fail_msg("matmul case %zu mat %d t %d r %lld: "
                                                 "got %.7g want %.7g tol %.3g",
                                                 ci, m, t, (long long)r, got,
                                                 base + dot, tol);
                                }
                        }
                    }
                    /* Determinism: each token alone gives the same bits. */
                    be->ops->matmul(be->stream, 3, out, wp, x, n, false);
                    for (int t = 0; t < n; t += (n > 5 ? 13 : 1)) {
                        float *one[3];
                        for (int m = 0; m < 3; m++)
                            one[m] = malloc(sizeof(float) * mc->rows[m]);
                        be->ops->matmul(be->stream, 3, one, wp, x + t * cols, 1, false);
                        for (int m = 0; m < 3; m++) {
                            assert_memory_equal(one[m], out[m] + t * mc->rows[m],
                                                sizeof(float) * mc->rows[m]);
                            free(one[m]);
                        }
                    }
                    for (int m = 0; m < 3; m++) {
                        free(out[m]);
                        free(init[m]);
                    }
                    free(x);
                }
                for (int m = 0; m < 3; m++) {
                    free(wdata[m]);
                    free(wref[m]);
                }
            }
            tr_backend_free(be);
        }
}

/* ---- paged KV: kv_store + attention ---- */

/* A test scenario: sequences with their full K/V (contiguous, the
 * reference's view), page tables into a shared paged memory, and a ragged
 * batch of tokens (shuffled) whose K/V the batch itself stores. */
typedef struct attn_world {
    int n_seqs;
    int len[4];  /* context length of each sequence after the batch */
    int from[4]; /* first position of each sequence that is in the batch */
    int n_heads, n_kv, hd, n_layers, layer;
    int page_size;
    tr_kv_type type;
    float *k[4], *v[4]; /* [len][kv_dim], rounded to the KV type */
    float *q;           /* [n_tok][n_heads * hd] */
    int n_tok;
    int32_t tok_seq[512], tok_pos[512];
    int32_t *pt[4];
    int32_t npages[4];
    int32_t total_pages;
    void *mem;
    int window;          /* sliding window of `layer` (0: none) */
    int32_t windows[2];  /* per layer, what the layout points at */
} attn_world;

static size_t world_kv_dim(const attn_world *w) { return (size_t)w->n_kv * w->hd; }

static void world_build(attn_world *w, uint64_t seed) {
    g_rng = seed;
    size_t kvd = world_kv_dim(w);
    w->n_tok = 0;
    w->total_pages = 0;
    for (int s = 0; s < w->n_seqs; s++) {
        w->k[s] = malloc(sizeof(float) * w->len[s] * kvd);
        w->v[s] = malloc(sizeof(float) * w->len[s] * kvd);
        fill(w->k[s], w->len[s] * kvd, -1, 1);
        fill(w->v[s], w->len[s] * kvd, -1, 1);
        if (w->type == TR_KV_F16)
            for (size_t i = 0; i < w->len[s] * kvd; i++) {
                w->k[s][i] = f16_round(w->k[s][i]);
                w->v[s][i] = f16_round(w->v[s][i]);
            }
        for (int p = w->from[s]; p < w->len[s]; p++) {
            w->tok_seq[w->n_tok] = s;
            w->tok_pos[w->n_tok] = p;
            w->n_tok++;
        }
        w->npages[s] = (w->len[s] + w->page_size - 1) / w->page_size;
        w->total_pages += w->npages[s];
    }
    w->total_pages += 3; /* unused pages too */
    /* Shuffle the batch order. */
    for (int i = w->n_tok - 1; i > 0; i--) {
        int j = rnd_int(i + 1);
        int32_t a = w->tok_seq[i], b = w->tok_pos[i];
        w->tok_seq[i] = w->tok_seq[j];
        w->tok_pos[i] = w->tok_pos[j];
        w->tok_seq[j] = a;
        w->tok_pos[j] = b;
    }
    /* q before the page ids: the data must not depend on the page size. */
    w->q = malloc(sizeof(float) * w->n_tok * w->n_heads * w->hd);
    fill(w->q, (size_t)w->n_tok * w->n_heads * w->hd, -1, 1);
    /* Random page ids: a permutation dealt out to the sequences. */
    int32_t *perm = malloc(sizeof(int32_t) * w->total_pages);
    for (int i = 0; i < w->total_pages; i++) perm[i] = i;
    for (int i = w->total_pages - 1; i > 0; i--) {
        int j = rnd_int(i + 1);
        int32_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    int next = 0;
    for (int s = 0; s < w->n_seqs; s++) {
        w->pt[s] = malloc(sizeof(int32_t) * (w->npages[s] + 1));
        for (int i = 0; i < w->npages[s]; i++) w->pt[s][i] = perm[next++];
    }
    free(perm);
}

static void world_free(attn_world *w) {
    for (int s = 0; s < w->n_seqs; s++) {
        free(w->k[s]);
        free(w->v[s]);
        free(w->pt[s]);
    }
    free(w->q);
}

static tr_kv_layout world_layout(attn_world *w) {
    w->windows[0] = w->windows[1] = 0;
    w->windows[w->layer] = w->window;
    return (tr_kv_layout){w->mem, w->total_pages, w->n_layers, w->page_size,
                          w->n_kv, w->hd, w->type, w->type, w->window ? w->windows : NULL, 0, NULL};
}

/* First position a token at p reads. */
static int world_lo(const attn_world *w, int p) {
    return w->window > 0 && p >= w->window ? p - w->window + 1 : 0;
}

static size_t world_mem_bytes(const attn_world *w) {
    return (size_t)w->total_pages * w->n_layers * 2 * w->page_size *
           world_kv_dim(w) * (w->type == TR_KV_F16 ? 2 : 4);
}

static tr_batch world_batch(const attn_world *w, int n, const int32_t *pos,
                            const int32_t *seq) {
    return (tr_batch){n, pos, seq, w->n_seqs, (const int32_t *const *)w->pt,
                      w->npages};
}

/* Fills the paged memory: NaN everywhere (a wrong read shows), then the
 * positions before the batch, then the batch's own K/V (as the model does:
 * kv_store of the batch, then attention). */
static void world_store(attn_world *w, tr_backend *be) {
    memset(w->mem, 0xff, world_mem_bytes(w));
    size_t kvd = world_kv_dim(w);
    tr_kv_layout kv = world_layout(w);
    for (int s = 0; s < w->n_seqs; s++) {
        int n = w->from[s];
        if (n == 0) continue;
        int32_t *pos = malloc(sizeof(int32_t) * n), *seq = malloc(sizeof(int32_t) * n);
        for (int i = 0; i < n; i++) {
            pos[i] = i;
            seq[i] = s;
        }
        tr_batch b = world_batch(w, n, pos, seq);
        be->ops->kv_store(be->stream, &kv, w->layer, w->k[s], w->v[s], &b);
        free(pos);
        free(seq);
    }
    float *bk = malloc(sizeof(float) * w->n_tok * kvd);
    float *bv = malloc(sizeof(float) * w->n_tok * kvd);
    for (int t = 0; t < w->n_tok; t++) {
        memcpy(bk + t * kvd, w->k[w->tok_seq[t]] + w->tok_pos[t] * kvd, kvd * 4);
        memcpy(bv + t * kvd, w->v[w->tok_seq[t]] + w->tok_pos[t] * kvd, kvd * 4);
    }
    tr_batch b = world_batch(w, w->n_tok, w->tok_pos, w->tok_seq);
    be->ops->kv_store(be->stream, &kv, w->layer, bk, bv, &b);
    free(bk);
    free(bv);
}

static void ref_attention(const attn_world *w, double *out, float scale) {
    size_t kvd = world_kv_dim(w);
    int group = w->n_heads / w->n_kv;
    double *sc = malloc(sizeof(double) * 4096);
    for (int t = 0; t < w->n_tok; t++) {
        int s = w->tok_seq[t], p = w->tok_pos[t];
        for (int h = 0; h < w->n_heads; h++) {
            const float *q = w->q + ((size_t)t * w->n_heads + h) * w->hd;
            size_t ho = (size_t)(h / group) * w->hd;
            double mx = -INFINITY;
            int lo = world_lo(w, p);
            for (int j = lo; j <= p; j++) {
                double d = 0;
                for (int e = 0; e < w->hd; e++)
                    d += (double)q[e] * w->k[s][j * kvd + ho + e];
                sc[j] = d * scale;
                mx = fmax(mx, sc[j]);
            }
            double sum = 0;
            for (int j = lo; j <= p; j++) sum += (sc[j] = exp(sc[j] - mx));
            double *o = out + ((size_t)t * w->n_heads + h) * w->hd;
            for (int e = 0; e < w->hd; e++) {
                double a = 0;
                for (int j = lo; j <= p; j++) a += sc[j] * w->v[s][j * kvd + ho + e];
                o[e] = a / sum;
            }
        }
    }
    free(sc);
}

static void test_kv_store(void **state) {
    (void)state;
    for (int ks = kset_first(); ks < kset_end(); ks++)
        for (int ti = 0; ti < 2; ti++)
            for (int psi = 0; psi < 2; psi++) {
                tr_backend *be = make_backend(ks, 2);
                attn_world w = {.n_seqs = 2, .len = {37, 20}, .from = {10, 0},
                                .n_heads = 6, .n_kv = 2, .hd = 24,
                                .n_layers = 3, .layer = 2,
                                .page_size = psi ? 16 : 1,
                                .type = ti ? TR_KV_F16 : TR_KV_F32};
                world_build(&w, 77 + ti);
                assert_int_equal(be->ops->alloc(be, world_mem_bytes(&w), &w.mem), TR_OK);
                world_store(&w, be);
                size_t kvd = world_kv_dim(&w);
                size_t es = ti ? 2 : 4;
                for (int s = 0; s < w.n_seqs; s++)
                    for (int p = 0; p < w.len[s]; p++)
                        for (int c = 0; c < 2; c++) {
                            int64_t page = w.pt[s][p / w.page_size];
                            size_t off = ((((size_t)page * w.n_layers + w.layer) * 2 + c) *
                                              w.page_size + p % w.page_size) * kvd;
                            const uint8_t *row = (const uint8_t *)w.mem + off * es;
                            const float *want = (c ? w.v[s] : w.k[s]) + p * kvd;
                            for (size_t e = 0; e < kvd; e++) {
                                float got;
                                if (ti) {
                                    uint16_t hbits;
                                    memcpy(&hbits, row + 2 * e, 2);
                                    got = cpu_fp16_to_fp32(hbits);
                                } else {
                                    memcpy(&got, row + 4 * e, 4);
                                }
                                assert_memory_equal(&got, &want[e], 4);
                            }
                        }
                /* Other layers stay untouched (all bytes 0xff). */
                size_t layer_bytes = (size_t)w.page_size * kvd * es * 2;
                const uint8_t *l0 = (const uint8_t *)w.mem +
                                    (size_t)w.pt[0][0] * w.n_layers * layer_bytes;
                for (size_t i = 0; i < layer_bytes; i++) assert_int_equal(l0[i], 0xff);
                be->ops->free(be, w.mem);
                world_free(&w);
                tr_backend_free(be);
            }
}

/* Quantized rows hold, per head, the quantizer's bytes of the head
 * rotated as backend.h says: K by tr_kv_rotation, V by tr_kv_v_rotation
 * (Q4: both over 32; Q8: K over the head, V as is), in both kernel
 * sets. */
static void test_kv_store_quantized(void **state) {
    (void)state;
    for (int ks = kset_first(); ks < kset_end(); ks++)
        for (int ti = 0; ti < 2; ti++) {
            tr_kv_type t = ti ? TR_KV_Q4 : TR_KV_Q8;
            tr_backend *be = make_backend(ks, 2);
            attn_world w = {.n_seqs = 2, .len = {21, 9}, .from = {4, 0}, .n_heads = 4,
                            .n_kv = 2, .hd = 64, .n_layers = 2, .layer = 1,
                            .page_size = 8, .type = t};
            world_build(&w, 91 + ti);
            assert_int_equal(be->ops->alloc(be, world_mem_bytes(&w), &w.mem), TR_OK);
            world_store(&w, be);
            tr_kv_layout kv = world_layout(&w);
            size_t kvd = world_kv_dim(&w), hb = tr_kv_head_bytes(t, w.hd);
            float x[64];
            uint8_t want[80];
            for (int s = 0; s < w.n_seqs; s++)
                for (int p = 0; p < w.len[s]; p++)
                    for (int c = 0; c < 2; c++)
                        for (int h = 0; h < w.n_kv; h++) {
                            memcpy(x, (c ? w.v[s] : w.k[s]) + p * kvd + (size_t)h * w.hd,
                                   sizeof x);
                            int32_t rot = c ? tr_kv_v_rotation(t) : tr_kv_rotation(t, w.hd);
                            assert_int_equal(rot, c && !ti ? 0 : ti ? 32 : 64);
                            if (rot) tr_cpu_kv_rotate(x, w.hd, rot);
                            tr_cpu_kv_quantize_head(want, x, w.hd, t);
                            const uint8_t *row =
                                (const uint8_t *)w.mem +
                                tr_kv_offset(&kv, w.layer, w.pt[s][p / w.page_size], c,
                                             p % w.page_size) + (size_t)h * hb;
                            assert_memory_equal(row, want, hb);
                        }
            be->ops->free(be, w.mem);
            world_free(&w);
            tr_backend_free(be);
        }
}

/* F16 KV rows hold exactly cpu_fp32_to_fp16 of the input (round to
 * nearest even, subnormals, overflow to inf), in both kernel sets. */
static void test_kv_store_f16_rounding(void **state) {
    (void)state;
    enum { HD = 20, PS = 4 };
    float k[PS * HD], v[PS * HD];
    fill(k, PS * HD, -70000, 70000);
    fill(v, PS * HD, -1e-5f, 1e-5f); /* many fp16 subnormals */
    const float special[] = {65504.0f, 65519.0f, 65520.0f, -1e-8f, 6e-8f,
                             3e-8f, 1.0009765625f, 1.00048828125f,
                             1.00146484375f, 0.0f, -0.0f, 1e30f};
    for (size_t i = 0; i < TR_ARRAY_LEN(special); i++) {
        k[i * 3 % (PS * HD)] = special[i];
        v[(i * 7 + 1) % (PS * HD)] = special[i];
    }
    int32_t pos[PS] = {0, 1, 2, 3}, seq[PS] = {0, 0, 0, 0};
    int32_t page[1] = {0};
    const int32_t *pts[1] = {page};
    int32_t np[1] = {1};
    tr_batch b = {PS, pos, seq, 1, pts, np};
    for (int ks = kset_first(); ks < kset_end(); ks++) {
        tr_backend *be = make_backend(ks, 1);
        uint16_t mem[2 * PS * HD];
        tr_kv_layout kv = {mem, 1, 1, PS, 1, HD, TR_KV_F16, TR_KV_F16, NULL, 0, NULL};
        be->ops->kv_store(be->stream, &kv, 0, k, v, &b);
        for (int i = 0; i < PS * HD; i++) {
            assert_int_equal(mem[i], cpu_fp32_to_fp16(k[i]));
            assert_int_equal(mem[PS * HD + i], cpu_fp32_to_fp16(v[i]));
        }
        tr_backend_free(be);
    }
}

/* Runs attention for the whole batch; returns out[n_tok][n_heads*hd]. */
static float *run_attention(attn_world *w, tr_backend *be, float scale) {
    size_t row = (size_t)w->n_heads * w->hd;
    float *out = malloc(sizeof(float) * w->n_tok * row);
    tr_kv_layout kv = world_layout(w);
    tr_batch b = world_batch(w, w->n_tok, w->tok_pos, w->tok_seq);
    be->ops->attention(be->stream, out, w->q, &kv, w->layer, &b, w->n_heads, scale);
    return out;
}

typedef struct attn_shape {
    int n_heads, n_kv, hd;
} attn_shape;

static void test_attention(void **state) {
    (void)state;
    const attn_shape shapes[] = {{9, 3, 64}, {4, 2, 20}};
    for (size_t si = 0; si < TR_ARRAY_LEN(shapes); si++)
        for (int ti = 0; ti < 2; ti++)
            for (int psi = 0; psi < 2; psi++) {
                /* Seq 0: one-token prompt; 1: decode at 399 (split
                 * schedule on 2-3 threads when alone); 2: a prefill chunk
                 * 100..149; 3: decode at 64 (exactly two blocks). */
                attn_world w = {.n_seqs = 4, .len = {1, 400, 150, 65},
                                .from = {0, 399, 100, 64},
                                .n_heads = shapes[si].n_heads,
                                .n_kv = shapes[si].n_kv, .hd = shapes[si].hd,
                                .n_layers = 2, .layer = 1,
                                .page_size = psi ? 16 : 1,
                                .type = ti ? TR_KV_F16 : TR_KV_F32};
                world_build(&w, 1000 + si * 10 + ti);
                w.mem = malloc(world_mem_bytes(&w));
                size_t row = (size_t)w.n_heads * w.hd;
                double *ref = malloc(sizeof(double) * w.n_tok * row);
                float scale = 1.0f / sqrtf((float)w.hd);
                /* Sharper softmax for the F16 runs. */
                if (ti)
                    for (size_t i = 0; i < (size_t)w.n_tok * row; i++) w.q[i] *= 4;
                ref_attention(&w, ref, scale);
                float *first = NULL;
                for (int ks = kset_first(); ks < kset_end(); ks++)
                    for (int th = 1; th <= 3; th++) {
                        tr_backend *be = make_backend(ks, th);
                        world_store(&w, be);
                        float *out = run_attention(&w, be, scale);
                        check_close(out, ref, (size_t)w.n_tok * row, 2e-6, 2e-5,
                                    "attention");
                        /* Same kernel set, other thread count: same bits. */
                        if (th == 1) {
                            free(first);
                            first = out;
                        } else {
                            assert_memory_equal(out, first,
                                                sizeof(float) * w.n_tok * row);
                            free(out);
                        }
                        tr_backend_free(be);
                    }
                free(first);
                free(ref);
                free(w.mem);
                world_free(&w);
            }
}

/* Poisons (NaN) the K/V rows of sequence s's positions [0, n) in w's
 * layer: a windowed read that strays before the window shows as NaN. */
static void world_poison(attn_world *w, int s, int n) {
    size_t kvd = world_kv_dim(w), es = w->type == TR_KV_F16 ? 2 : 4;
    tr_kv_layout kv = world_layout(w);
    for (int p = 0; p < n; p++)
        for (int c = 0; c < 2; c++) {
            size_t page = (size_t)w->pt[s][p / w->page_size];
            size_t off = ((((page * (size_t)kv.n_layers + (size_t)w->layer) * 2 + (size_t)c) *
                               (size_t)w->page_size +
                           (size_t)(p % w->page_size)) *
                          kvd) *
                         es;
            memset((uint8_t *)w->mem + off, 0xff, kvd * es);
        }
}

/* Sliding-window layers (kv->window): each token attends to its last
 * `window` positions only, whatever the schedule (unit or split), thread
 * count or page size; rows before every token's window are NaN and never
 * read; a token alone gives the bits it gets in the batch. */
static void test_attention_window(void **state) {
    (void)state;
    const attn_shape shapes[] = {{9, 3, 64}, {4, 1, 256}};
    const int windows[] = {1, 64, 100, 512};
    for (size_t si = 0; si < TR_ARRAY_LEN(shapes); si++)
        for (size_t wi = 0; wi < TR_ARRAY_LEN(windows); wi++)
            for (int psi = 0; psi < 2; psi++) {
                /* decode at 399 and 700, a prefill chunk 100..149 */
                attn_world w = {.n_seqs = 3, .len = {400, 150, 701},
                                .from = {399, 100, 700},
                                .n_heads = shapes[si].n_heads,
                                .n_kv = shapes[si].n_kv, .hd = shapes[si].hd,
                                .n_layers = 2, .layer = 1,
                                .page_size = psi ? 16 : 1,
                                .type = TR_KV_F16, .window = windows[wi]};
                world_build(&w, 7000 + si * 10 + wi);
                w.mem = malloc(world_mem_bytes(&w));
                size_t row = (size_t)w.n_heads * w.hd;
                double *ref = malloc(sizeof(double) * w.n_tok * row);
                float scale = 1.0f / sqrtf((float)w.hd);
                ref_attention(&w, ref, scale);
                float *first = NULL;
                for (int ks = kset_first(); ks < kset_end(); ks++)
                    for (int th = 1; th <= 3; th++) {
                        tr_backend *be = make_backend(ks, th);
                        world_store(&w, be);
                        for (int sq = 0; sq < w.n_seqs; sq++)
                            world_poison(&w, sq, world_lo(&w, w.from[sq]));
                        float *out = run_attention(&w, be, scale);
                        check_close(out, ref, (size_t)w.n_tok * row, 2e-6, 2e-5,
                                    "windowed attention");
                        if (th == 1) {
                            free(first);
                            first = out;
                        } else {
                            assert_memory_equal(out, first, sizeof(float) * w.n_tok * row);
                            free(out);
                        }
                        /* one token alone (the decode at 700) */
                        tr_kv_layout kv = world_layout(&w);
                        for (int t = 0; t < w.n_tok; t++) {
                            if (w.tok_pos[t] != 700) continue;
                            float *one = malloc(sizeof(float) * row);
                            tr_batch b = world_batch(&w, 1, &w.tok_pos[t], &w.tok_seq[t]);
                            be->ops->attention(be->stream, one, w.q + t * row, &kv, w.layer, &b,
                                               w.n_heads, scale);
                            assert_memory_equal(one, first + t * row, sizeof(float) * row);
                            free(one);
                        }
                        tr_backend_free(be);
                    }
                free(first);
                free(ref);
                free(w.mem);
                world_free(&w);
            }
}

/* The determinism contract: a token computed alone equals the same token
 * computed in a ragged batch, whatever the thread count; and with other
 * page ids (a cached prefix vs a recomputed one) or another page size. */
static void test_attention_determinism(void **state) {
    (void)state;
    for (int ks = kset_first(); ks < kset_end(); ks++)
        for (int ti = 0; ti < 2; ti++) {
            float *base = NULL; /* batch result, 1 thread, page size 16 */
            int n_tok = 0;
            size_t row = 0;
            for (int psi = 0; psi < 3; psi++) {
                attn_world w = {.n_seqs = 3, .len = {700, 90, 130},
                                .from = {699, 0, 125},
                                .n_heads = 9, .n_kv = 3, .hd = 64,
                                .n_layers = 1, .layer = 0,
                                .page_size = psi == 1 ? 1 : 16,
                                .type = ti ? TR_KV_F16 : TR_KV_F32};
                /* Same data each time; psi 2 reshuffles the page ids. */
                world_build(&w, 4242 + ti);
                if (psi == 2) {
                    for (int s = 0; s < w.n_seqs; s++)
                        for (int i = 0; i < w.npages[s]; i++)
                            w.pt[s][i] = w.total_pages - 1 - w.pt[s][i];
                }
                w.mem = malloc(world_mem_bytes(&w));
                row = (size_t)w.n_heads * w.hd;
                float scale = 0.125f;
                for (int th = 1; th <= 3; th++) {
                    tr_backend *be = make_backend(ks, th);
                    world_store(&w, be);
                    float *out = run_attention(&w, be, scale);
                    if (!base) {
                        base = out;
                        n_tok = w.n_tok;
                    } else {
                        assert_int_equal(w.n_tok, n_tok);
                        assert_memory_equal(out, base, sizeof(float) * n_tok * row);
                        free(out);
                    }
                    /* Each token alone. */
                    tr_kv_layout kv = world_layout(&w);
                    float *one = malloc(sizeof(float) * row);
                    for (int t = 0; t < w.n_tok; t += (th == 2 ? 1 : 7)) {
                        tr_batch b = world_batch(&w, 1, &w.tok_pos[t], &w.tok_seq[t]);
                        be->ops->attention(be->stream, one, w.q + t * row, &kv, w.layer,
                                           &b, w.n_heads, scale);
                        assert_memory_equal(one, base + t * row, sizeof(float) * row);
                    }
                    free(one);
                    tr_backend_free(be);
                }
                free(w.mem);
                world_free(&w);
            }
            free(base);
        }
}

/* Row ops: a row alone equals the row inside a batch, across threads. */
static void test_row_determinism(void **state) {
    (void)state;
    const int n = 33, dim = 576, hd = 64, nh = 9;
    float *x = malloc(sizeof(float) * n * dim), *w = malloc(sizeof(float) * dim);
    float *g = malloc(sizeof(float) * n * 1536), *u = malloc(sizeof(float) * n * 1536);
    int32_t pos[33];
    fill(x, (size_t)n * dim, -2, 2);
    fill(w, dim, -1, 1);
    fill(g, (size_t)n * 1536, -8, 8);
    fill(u, (size_t)n * 1536, -2, 2);
    for (int i = 0; i < n; i++) pos[i] = rnd_int(3000);
    for (int ks = kset_first(); ks < kset_end(); ks++) {
        float *norm0 = NULL, *rope0 = NULL, *swi0 = NULL;
        for (int th = 1; th <= 3; th++) {
            tr_backend *be = make_backend(ks, th);
            float *norm = malloc(sizeof(float) * n * dim);
            float *rope = malloc(sizeof(float) * n * nh * hd);
            float *swi = malloc(sizeof(float) * n * 1536);
            be->ops->rmsnorm(be->stream, norm, x, w, n, dim, 1e-5f);
            memcpy(rope, x, sizeof(float) * n * nh * hd);
            be->ops->rope(be->stream, rope, n, nh, hd, pos, 10000.0f);
            be->ops->swiglu(be->stream, swi, g, u, (int64_t)n * 1536);
            for (int t = 0; t < n; t += 4) {
                float one[1536];
                be->ops->rmsnorm(be->stream, one, x + t * dim, w, 1, dim, 1e-5f);
                assert_memory_equal(one, norm + t * dim, sizeof(float) * dim);
                memcpy(one, x + t * nh * hd, sizeof(float) * nh * hd);
                be->ops->rope(be->stream, one, 1, nh, hd, &pos[t], 10000.0f);
                assert_memory_equal(one, rope + t * nh * hd, sizeof(float) * nh * hd);
                be->ops->swiglu(be->stream, one, g + t * 1536, u + t * 1536, 1536);
                assert_memory_equal(one, swi + t * 1536, sizeof(float) * 1536);
                /* An odd slice: every element's value is position-free. */
                be->ops->swiglu(be->stream, one, g + t * 1536 + 3, u + t * 1536 + 3, 13);
                assert_memory_equal(one, swi + t * 1536 + 3, sizeof(float) * 13);
            }
            if (th == 1) {
                norm0 = norm;
                rope0 = rope;
                swi0 = swi;
            } else {
                assert_memory_equal(norm, norm0, sizeof(float) * n * dim);
                assert_memory_equal(rope, rope0, sizeof(float) * n * nh * hd);
                assert_memory_equal(swi, swi0, sizeof(float) * n * 1536);
                free(norm);
                free(rope);
                free(swi);
            }
            tr_backend_free(be);
        }
        free(norm0);
        free(rope0);
        free(swi0);
    }
    free(x);
    free(w);
    free(g);
    free(u);
}


/* Rows of n positions of type t, row stride `stride` bytes, from kf
 * (STRIDE floats per row); only the first head (hd) of each is written. */
static void make_rows(uint8_t *dst, size_t stride, const float *kf, size_t fstride,
                      int32_t n, int32_t hd, tr_kv_type t) {
    for (int32_t j = 0; j < n; j++) {
        uint8_t *r = dst + (size_t)j * stride;
        const float *x = kf + (size_t)j * fstride;
        if (t == TR_KV_F32) memcpy(r, x, (size_t)hd * sizeof(float));
        else if (t == TR_KV_F16)
            for (int32_t d = 0; d < hd; d++) {
                uint16_t h = cpu_fp32_to_fp16(x[d]);
                memcpy(r + 2 * (size_t)d, &h, 2);
            }
        else tr_cpu_kv_quantize_head(r, x, hd, t);
    }
}

/* The attention kernels take the g query heads of one KV head together
 * (each K/V row read once); every head's scores and accumulators must be
 * bitwise what the head gets alone, in both kernel tables, for grouped
 * and odd head sizes, every KV type, any row count. And rows of a
 * quantized or F16 type give bitwise what their exact F32 values
 * (load_heads) give: the attention op stages rows as F32 for prefill
 * tiles and reads the pages directly otherwise. */
static void test_attention_heads_together(void **state) {
    (void)state;
    const cpu_op_kernels *sets[2] = {NULL, NULL};
    if (kset_first() == 0) sets[0] = &tr_cpu_op_kernels_portable;
#if defined(__x86_64__) || defined(__i386__)
    if (kset_end() == 2) sets[1] = &tr_cpu_op_kernels_avx2;
#endif
    enum { MAXG = 7, MAXN = 70, MAXHD = 128, STRIDE = 3 * MAXHD, RB = 4 * STRIDE };
    static float q[MAXG * MAXHD], pr[MAXG * MAXN];
    static float kf[MAXN * STRIDE], staged[MAXN * MAXHD];
    static uint8_t kb[MAXN * RB];
    static float s1[MAXG * MAXN], s2[MAXG * MAXN], a1[MAXG * MAXHD], a2[MAXG * MAXHD];
    const int32_t hds[] = {64, 128, 40, 12};
    const tr_kv_type types[] = {TR_KV_F32, TR_KV_F16, TR_KV_Q8, TR_KV_Q4};
    int checked = 0;
    for (int set = 0; set < 2; set++) {
        const cpu_op_kernels *k = sets[set];
        if (!k) continue;
        for (int trial = 0; trial < 96; trial++) {
            int32_t hd = hds[trial % 4], g = 1 + rnd_int(MAXG), n = 1 + rnd_int(MAXN);
            tr_kv_type t = types[(trial / 4) % 4];
            if (!tr_kv_head_bytes(t, hd)) continue; /* Q4 needs hd % 32 */
            fill(q, (size_t)g * (size_t)hd, -1, 1);
            fill(pr, (size_t)g * MAXN, 0, 1);
            fill(kf, (size_t)n * STRIDE, -1, 1);
            make_rows(kb, RB, kf, STRIDE, n, hd, t);
            float mx1[MAXG], mx2[MAXG];
            k->attn_scores(s1, MAXN, mx1, q, g, kb, RB, n, hd, t, 0.125f);
            for (int32_t h = 0; h < g; h++)
                k->attn_scores(s2 + (size_t)h * MAXN, MAXN, mx2 + h, q + (size_t)h * hd,
                               1, kb, RB, n, hd, t, 0.125f);
            for (int32_t h = 0; h < g; h++) {
                assert_memory_equal(s1 + (size_t)h * MAXN, s2 + (size_t)h * MAXN,
                                    (size_t)n * sizeof(float));
                assert_memory_equal(&mx1[h], &mx2[h], sizeof(float));
            }
            /* the same rows staged as F32 */
            for (int32_t j = 0; j < n; j++)
                k->load_heads(staged + (size_t)j * hd, kb + (size_t)j * RB, 1, hd, t);
            k->attn_scores(s2, MAXN, mx2, q, g, staged, (size_t)hd * sizeof(float), n, hd,
                           TR_KV_F32, 0.125f);
            assert_memory_equal(s1, s2, (size_t)g * MAXN * sizeof(float));
            fill(a1, (size_t)g * (size_t)hd, -1, 1);
            memcpy(a2, a1, (size_t)g * (size_t)hd * sizeof(float));
            k->attn_accum(a1, (size_t)hd, pr, MAXN, g, kb, RB, n, hd, t);
            for (int32_t h = 0; h < g; h++)
                k->attn_accum(a2 + (size_t)h * hd, (size_t)hd, pr + (size_t)h * MAXN, MAXN,
                              1, kb, RB, n, hd, t);
            assert_memory_equal(a1, a2, (size_t)g * (size_t)hd * sizeof(float));
            memcpy(a2, a1, (size_t)g * (size_t)hd * sizeof(float));
            k->attn_accum(a1, (size_t)hd, pr, MAXN, g, kb, RB, n, hd, t);
            k->attn_accum(a2, (size_t)hd, pr, MAXN, g, staged, (size_t)hd * sizeof(float), n,
                          hd, TR_KV_F32);
            assert_memory_equal(a1, a2, (size_t)g * (size_t)hd * sizeof(float));
            checked++;
        }
    }
    assert_true(checked >= 80);
}

/* Q8 keys against quantized queries (attn_scores_q8): every kernel set
 * gives the portable loop's bits (the dots are integers), heads together
 * give what each head gets alone, and each score is within the bound the
 * query's rounding allows of the exact score of the stored keys: a level
 * is off by at most half a step, so |s - s_exact| <= scale * step / 2 *
 * sum_i |k_i| (plus float rounding). A step or a key scale applied
 * wrongly, or a row read from the wrong place, is off by far more. */
static void test_attention_scores_q8(void **state) {
    (void)state;
    const cpu_op_kernels *sets[3] = {&tr_cpu_op_kernels_portable, NULL, NULL};
#if defined(__x86_64__) || defined(__i386__)
    if (tr_cpu_features_avx2()) sets[1] = &tr_cpu_op_kernels_avx2;
    if (tr_cpu_features_avx512vnni()) sets[2] = &tr_cpu_op_kernels_vnni;
#endif
    enum { MAXG = 7, MAXN = 70, MAXHD = 256, RB = MAXHD + 2 + 30 };
    static float qf[MAXG * MAXHD], kf[MAXN * MAXHD];
    static float s0[MAXG * MAXN], s1[MAXG * MAXN];
    static int16_t q8[MAXG * MAXHD];
    static uint8_t kb[MAXN * RB];
    const int32_t hds[] = {64, 128, 256, 96, 40, 12};
    int checked = 0;
    for (int trial = 0; trial < 120; trial++) {
        int32_t hd = hds[trial % 6], g = 1 + rnd_int(MAXG), n = 1 + rnd_int(MAXN);
        float qd[MAXG], mx0[MAXG], mx1[MAXG];
        fill(qf, (size_t)g * (size_t)hd, -2, 2);
        fill(kf, (size_t)n * (size_t)hd, -1, 1);
        if (trial % 5 == 0) qf[rnd_int(g * hd)] = 0.0f, kf[0] = 30.0f; /* outliers */
        for (int32_t h = 0; h < g; h++) {
            qd[h] = tr_cpu_kv_quantize_query(q8 + (size_t)h * hd, qf + (size_t)h * hd, hd);
            float amax = 0;
            for (int32_t i = 0; i < hd; i++) {
                float x = qf[(size_t)h * hd + i], lv = (float)q8[(size_t)h * hd + i];
                amax = fmaxf(amax, fabsf(x));
                assert_true(lv >= -CPU_ATTN_Q_LEVELS && lv <= CPU_ATTN_Q_LEVELS);
                /* half a step, and x * (levels / amax) rounded once in float */
                assert_true(fabs((double)lv * qd[h] - x) <= 0.502 * qd[h]);
            }
            assert_true(qd[h] == amax / (float)CPU_ATTN_Q_LEVELS);
        }
        for (int32_t j = 0; j < n; j++)
            tr_cpu_kv_quantize_head(kb + (size_t)j * RB, kf + (size_t)j * hd, hd, TR_KV_Q8);
        const cpu_op_kernels *p = sets[0];
        p->attn_scores_q8(s0, MAXN, mx0, q8, qd, g, kb, RB, n, hd, 0.125f);
        for (int32_t h = 0; h < g; h++) {
            float m = -INFINITY;
            for (int32_t j = 0; j < n; j++) {
                const uint8_t *row = kb + (size_t)j * RB;
                double e = 0, bound = 0;
                for (int32_t i = 0; i < hd; i++) {
                    double kx = tr_cpu_kv_elem(row, i, hd, TR_KV_Q8);
                    e += kx * qf[(size_t)h * hd + i];
                    bound += fabs(kx);
                }
                e *= 0.125;
                bound = 0.125 * qd[h] / 2 * bound + 1e-5 * (1 + fabs(e));
                float got = s0[(size_t)h * MAXN + j];
                if (fabs(got - e) > bound)
                    fail_msg("hd %d head %d row %d: %g against %g (bound %g)", hd, h, j,
                             got, e, bound);
                m = fmaxf(m, got);
            }
            assert_true(mx0[h] == m);
        }
        for (int si = 0; si < 3; si++) {
            const cpu_op_kernels *k = sets[si];
            if (!k) continue;
            k->attn_scores_q8(s1, MAXN, mx1, q8, qd, g, kb, RB, n, hd, 0.125f);
            for (int32_t h = 0; h < g; h++) {
                assert_memory_equal(s1 + (size_t)h * MAXN, s0 + (size_t)h * MAXN,
                                    (size_t)n * sizeof(float));
                assert_true(mx1[h] == mx0[h]);
            }
            for (int32_t h = 0; h < g; h++) { /* alone, and cut into two calls */
                int32_t cut = n / 2;
                float *sh = s1 + (size_t)h * MAXN, ma, mb;
                k->attn_scores_q8(sh, MAXN, &ma, q8 + (size_t)h * hd, qd + h, 1, kb, RB,
                                  TR_MAX(cut, 1), hd, 0.125f);
                if (cut >= 1 && n - cut >= 1)
                    k->attn_scores_q8(sh + cut, MAXN, &mb, q8 + (size_t)h * hd, qd + h, 1,
                                      kb + (size_t)cut * RB, RB, n - cut, hd, 0.125f);
                assert_memory_equal(sh, s0 + (size_t)h * MAXN, (size_t)n * sizeof(float));
            }
            checked++;
        }
    }
    assert_true(checked >= 120);
}

/* The keys' rotation (backend.h tr_kv_rotation): orthonormal (dot products
 * kept, to float rounding) and its own inverse, for every block size the
 * formats use; and the blocks each format gets. */
static void test_kv_rotation(void **state) {
    (void)state;
    float x[512], y[512], rx[512], ry[512];
    const int32_t blocks[] = {32, 64, 256, 512};
    for (size_t bi = 0; bi < TR_ARRAY_LEN(blocks); bi++) {
        int32_t b = blocks[bi];
        fill(x, 512, -1, 1);
        fill(y, 512, -1, 1);
        x[3] = 40.0f; /* an outlier channel: spread over its block */
        memcpy(rx, x, sizeof x);
        memcpy(ry, y, sizeof y);
        tr_cpu_kv_rotate(rx, 512, b);
        tr_cpu_kv_rotate(ry, 512, b);
        double d0 = 0, d1 = 0, amax = 0;
        for (int i = 0; i < 512; i++) {
            d0 += (double)x[i] * y[i];
            d1 += (double)rx[i] * ry[i];
            if (i < b) amax = fmax(amax, fabs(rx[i]));
        }
        assert_true(fabs(d0 - d1) <= 1e-4 * (1 + fabs(d0)));
        assert_true(amax < 40.0 / sqrt((double)b) + 4.0); /* spread */
        tr_cpu_kv_rotate(rx, 512, b);
        for (int i = 0; i < 512; i++) assert_true(fabsf(rx[i] - x[i]) <= 1e-5f * (1 + fabsf(x[i])));
    }
    assert_int_equal(tr_kv_rotation(TR_KV_Q4, 64), 32);
    assert_int_equal(tr_kv_rotation(TR_KV_Q8, 64), 64);
    assert_int_equal(tr_kv_rotation(TR_KV_Q8, 256), 256);
    assert_int_equal(tr_kv_rotation(TR_KV_Q8, 96), 32);
    assert_int_equal(tr_kv_rotation(TR_KV_Q8, 20), 0);
    assert_int_equal(tr_kv_rotation(TR_KV_F16, 64), 0);
}

/* The value of the Q4 level nearest to x / d (backend.h's levels), and
 * whether y is as near to x as that level is. */
static bool q4_is_nearest(float y, float x, float d) {
    float best = INFINITY;
    for (int i = 0; i < 16; i++) best = fminf(best, fabsf((float)tr_kv_q4_level(i) * d - x));
    return fabsf(y - x) <= best * (1.0f + 1e-6f) + 1e-30f;
}

/* The quantizer: each element at the nearest level (Q8: within half a
 * step), the scale from the largest magnitude, zeros and non-numbers
 * stored as 0, and the bytes the same whatever kernel set reads them (one
 * quantizer). */
static void test_kv_quantize(void **state) {
    (void)state;
    float x[256], y[256];
    /* q4's group scale from the signed extreme, which is level 0 */
    {
        float g[32] = {0};
        uint8_t qb[32];
        g[5] = 2.0f, g[9] = -1.0f;
        tr_cpu_kv_quantize_head(qb, g, 32, TR_KV_Q4);
        float out[32];
        tr_cpu_load_heads_portable(out, qb, 1, 32, TR_KV_Q4);
        assert_int_equal(qb[5] & 15, 0);
        assert_true(out[5] >= 2.0f && out[5] <= 2.0f * (1.0f + 1.0f / 1024));
        /* -1 / d = 63.5 steps: between levels 54 and 70, nearer 70 */
        assert_int_equal(tr_kv_q4_level(qb[9] & 15), 70);
        assert_true(out[9] < -1.0f && out[9] > -1.2f);
        assert_true(out[0] == 0.0f || fabsf(out[0]) <= 2.0f * 2.0f / 127 * 1.001f);
    }
    /* the levels: ascending, level 0 at -127 (the extreme's) */
    assert_int_equal(tr_kv_q4_level(0), -127);
    for (int i = 1; i < 16; i++) assert_true(tr_kv_q4_level(i) > tr_kv_q4_level(i - 1));
    uint8_t b[1024];
    for (int ti = 0; ti < 2; ti++) {
        tr_kv_type t = ti ? TR_KV_Q4 : TR_KV_Q8;
        for (int trial = 0; trial < 50; trial++) {
            int32_t hd = trial % 2 ? 256 : 64;
            float amp = trial % 5 == 0 ? 1e-3f : trial % 7 == 0 ? 300.0f
                        : trial % 11 == 0 ? 1e-6f : 1.0f;
            fill(x, (size_t)hd, -amp, amp);
            if (trial == 3) memset(x, 0, sizeof x);
            tr_cpu_kv_quantize_head(b, x, hd, t);
            tr_cpu_load_heads_portable(y, b, 1, hd, t);
            int32_t group = t == TR_KV_Q8 ? hd : 32;
            for (int32_t g0 = 0; g0 < hd; g0 += group) {
                float amax = 0;
                for (int32_t i = g0; i < g0 + group; i++) amax = fmaxf(amax, fabsf(x[i]));
                /* the stored step: at least amax / 127, at most that
                 * rounded up to the next F16 (relative 2^-10, or 2^-24
                 * absolute among subnormals) */
                uint16_t h;
                memcpy(&h, t == TR_KV_Q8 ? b + hd : b + hd / 2 + 2 * (g0 / 32), 2);
                float sd = cpu_fp16_to_fp32(h), d = fabsf(sd), lo = amax / 127.0f;
                assert_true(d >= lo); /* rounded away from zero */
                assert_true(d <= lo * (1.0f + 1.0f / 1024) + 0x1p-24f);
                for (int32_t i = g0; i < g0 + group; i++) {
                    if (t == TR_KV_Q4) assert_true(q4_is_nearest(y[i], x[i], sd));
                    else assert_true(fabsf(y[i] - x[i]) <= 0.5f * d * (1.0f + 1e-6f));
                }
            }
        }
        /* zeros and NaN */
        memset(x, 0, sizeof x);
        x[5] = NAN;
        tr_cpu_kv_quantize_head(b, x, 64, t);
        tr_cpu_load_heads_portable(y, b, 1, 64, t);
        for (int i = 0; i < 64; i++) assert_true(y[i] == 0.0f);
    }
}

int main(void) {
    tr_test_kernels_require(kset_runs_here);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pool),
        cmocka_unit_test(test_pool_sleep_wake),
        cmocka_unit_test(test_backend_basics),
        cmocka_unit_test(test_kernel_set_choice),
        cmocka_unit_test(test_rmsnorm),
        cmocka_unit_test(test_rope),
        cmocka_unit_test(test_rope_kernel_sets_agree),
        cmocka_unit_test(test_swiglu_add_get_rows),
        cmocka_unit_test(test_embed),
        cmocka_unit_test(test_matmul),
        cmocka_unit_test(test_kv_store),
        cmocka_unit_test(test_kv_store_f16_rounding),
        cmocka_unit_test(test_kv_store_quantized),
        cmocka_unit_test(test_attention),
        cmocka_unit_test(test_attention_determinism),
        cmocka_unit_test(test_attention_window),
        cmocka_unit_test(test_rope_neox),
        cmocka_unit_test(test_geglu_bias_scale_softcap),
        cmocka_unit_test(test_attention_heads_together),
        cmocka_unit_test(test_attention_scores_q8),
        cmocka_unit_test(test_kv_quantize),
        cmocka_unit_test(test_kv_rotation),
        cmocka_unit_test(test_row_determinism),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
