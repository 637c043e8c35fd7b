/* bench_ops.c — CPU backend micro-benchmarks: worker-pool dispatch cost,
 * attention at decode (context 512 / 2048) and prefill, and the throughput
 * of the row ops, at the default model's shapes (SmolLM2-135M: dim 576,
 * 9 heads / 3 KV heads, head_dim 64, ffn 1536).
 *
 * Also: decode attention of 32 sequences through 30 layers (KV read
 * cold, as when serving 32 streams).
 *
 * Usage: bench_ops [max_threads]   (default 2; runs 1..max_threads)
 * Every figure is the best of 5 timed batches (the least disturbed by
 * other processes on a shared machine).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/backend.h"
#include "kernels/cpu/threadpool_internal.h"
#include "base/util.h"

static uint64_t g_rng = 12345;
static float rnd(void) {
    g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((g_rng >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}
static void fill(float *x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = rnd();
}

typedef void (*bench_fn)(void *ctx);

/* Best-of-5 nanoseconds per call; each batch runs about 20 ms worth of
 * calls (at most max_iters), so the whole benchmark stays short. */
static double time_ns(bench_fn fn, void *ctx, int max_iters) {
    uint64_t t0 = tr_now_ns();
    fn(ctx);
    uint64_t once = tr_now_ns() - t0;
    int iters = (int)TR_MIN((uint64_t)max_iters, 20000000ull / (once + 1) + 1);
    double best = 1e300;
    for (int r = 0; r < 5; r++) {
        t0 = tr_now_ns();
        for (int i = 0; i < iters; i++) fn(ctx);
        double ns = (double)(tr_now_ns() - t0) / iters;
        if (ns < best) best = ns;
    }
    return best;
}

/* ---- dispatch ---- */

typedef struct pool_bench {
    cpu_pool *pool;
    int nth;
    int sleep_us;
} pool_bench;

static void empty_task(void *ctx, int ith, int nth) {
    (void)ctx;
    (void)ith;
    (void)nth;
}

static void barrier_task(void *ctx, int ith, int nth) {
    (void)ith;
    (void)nth;
    tr_cpu_pool_barrier(((pool_bench *)ctx)->pool);
}

static void run_empty(void *ctx) {
    pool_bench *b = ctx;
    tr_cpu_pool_run(b->pool, b->nth, empty_task, b);
}

static void run_barrier(void *ctx) {
    pool_bench *b = ctx;
    tr_cpu_pool_run(b->pool, b->nth, barrier_task, b);
}

static void bench_dispatch(int max_threads) {
    printf("== dispatch (ns per empty run) ==\n");
    for (int n = 1; n <= max_threads; n++) {
        pool_bench b = {.nth = n};
        if (tr_cpu_pool_new(n, &b.pool) != TR_OK) {
            fprintf(stderr, "pool creation failed\n");
            exit(1);
        }
        double e = time_ns(run_empty, &b, 100000);
        double bar = time_ns(run_barrier, &b, 100000);
        /* Workers asleep: the run pays a futex wake-up. */
        uint64_t total = 0;
        int reps = 50;
        for (int i = 0; i < reps; i++) {
            struct timespec ts = {0, 2000000}; /* 2 ms > spin budget */
            nanosleep(&ts, NULL);
            uint64_t t0 = tr_now_ns();
            run_empty(&b);
            total += tr_now_ns() - t0;
        }
        printf("threads %d: empty run %.0f ns, run with one barrier %.0f ns, "
               "run after 2 ms idle %.0f ns\n",
               n, e, bar, (double)total / reps);
        tr_cpu_pool_free(b.pool);
    }
}

/* ---- attention ---- */

typedef struct attn_bench {
    tr_backend *be;
    float *out, *q;
    tr_kv_layout kv;
    tr_batch b;
    int n_heads;
} attn_bench;

static void run_attn(void *ctx) {
    attn_bench *a = ctx;
    for (int32_t l = 0; l < a->kv.n_layers; l++)
        a->be->ops->attention(a->be->stream, a->out, a->q, &a->kv, l, &a->b,
                              a->n_heads, 0.125f);
}

/* One sequence of `ctx_len` positions, page size 16, through n_layers
 * layers (1: K/V warm in the caches; 30: about 36 MB at 1,600 positions,
 * read cold as in a forward pass); the batch is the last `n_tok`
 * positions. */
static double bench_attention(tr_backend *be, int ctx_len, int n_tok,
                              tr_kv_type type, int n_layers) {
    const int n_heads = 9, n_kv = 3, hd = 64, ps = 16;
    int n_pages = (ctx_len + ps - 1) / ps;
    tr_kv_layout shape = {NULL, n_pages, n_layers, ps, n_kv, hd, type, type, NULL, 0, NULL};
    size_t bytes = (size_t)n_pages * tr_kv_page_bytes(&shape);
    attn_bench a = {.be = be, .n_heads = n_heads};
    void *mem = NULL;
    be->ops->alloc(be, bytes, &mem);
    memset(mem, 0, bytes);
    int32_t *pt = malloc(sizeof(int32_t) * n_pages);
    for (int i = 0; i < n_pages; i++) pt[i] = n_pages - 1 - i;
    int32_t *pos = malloc(sizeof(int32_t) * ctx_len);
    int32_t *seq = calloc((size_t)ctx_len, sizeof(int32_t));
    for (int i = 0; i < ctx_len; i++) pos[i] = i;
    const int32_t *const pts[1] = {pt};
    int32_t np[1] = {n_pages};
    a.kv = shape;
    a.kv.base = mem;
    /* Fill the whole context with random K/V. */
    float *k = malloc(sizeof(float) * ctx_len * n_kv * hd);
    float *v = malloc(sizeof(float) * ctx_len * n_kv * hd);
    fill(k, (size_t)ctx_len * n_kv * hd);
    fill(v, (size_t)ctx_len * n_kv * hd);
    tr_batch all = {ctx_len, pos, seq, 1, pts, np};
    for (int l = 0; l < n_layers; l++)
        be->ops->kv_store(be->stream, &a.kv, l, k, v, &all);
    a.b = (tr_batch){n_tok, pos + ctx_len - n_tok, seq, 1, pts, np};
    a.q = malloc(sizeof(float) * n_tok * n_heads * hd);
    a.out = malloc(sizeof(float) * n_tok * n_heads * hd);
    fill(a.q, (size_t)n_tok * n_heads * hd);
    double ns = time_ns(run_attn, &a, 1000);
    free(k);
    free(v);
    free(a.q);
    free(a.out);
    free(pt);
    free(pos);
    free(seq);
    be->ops->free(be, mem);
    return ns;
}

/* Decode of 32 sequences (contexts 40..159, F16 KV, page size 16, pages
 * shuffled over the pool) through all 30 layers: the rows are read cold,
 * as in serving, where the weights pass through the caches between
 * layers. Returns ns per 30-layer pass (best of 5 batches). */
typedef struct attn_decode_bench {
    tr_backend *be;
    float *out, *q;
    tr_kv_layout kv;
    tr_batch b;
} attn_decode_bench;

static void run_attn_decode(void *ctx) {
    attn_decode_bench *a = ctx;
    for (int32_t l = 0; l < a->kv.n_layers; l++)
        a->be->ops->attention(a->be->stream, a->out, a->q, &a->kv, l, &a->b, 9,
                              0.125f);
}

static double bench_attention_decode32(tr_backend *be, int *ctx_total) {
    enum { S = 32, L = 30, PS = 16, NKV = 3, HD = 64, NH = 9 };
    int32_t ctx[S], np[S], pos[S], seq[S], *pt[S];
    int total_pages = 0;
    *ctx_total = 0;
    g_rng = 424242; /* the same contexts and pages on every call */
    for (int s = 0; s < S; s++) {
        ctx[s] = 40 + (int)((rnd() + 1.0f) * 60.0f); /* 40..159 */
        np[s] = (ctx[s] + PS - 1) / PS;
        total_pages += np[s];
        *ctx_total += ctx[s];
    }
    int32_t *perm = malloc(sizeof(int32_t) * total_pages);
    for (int i = 0; i < total_pages; i++) perm[i] = i;
    for (int i = total_pages - 1; i > 0; i--) {
        int j = (int)((rnd() + 1.0f) * 0.5f * (float)i);
        int32_t x = perm[i];
        perm[i] = perm[j];
        perm[j] = x;
    }
    size_t bytes = (size_t)total_pages * L * 2 * PS * NKV * HD * 2;
    attn_decode_bench a = {.be = be};
    void *mem = NULL;
    be->ops->alloc(be, bytes, &mem);
    memset(mem, 0, bytes);
    a.kv = (tr_kv_layout){mem, total_pages, L, PS, NKV, HD, TR_KV_F16, TR_KV_F16, NULL, 0, NULL};
    for (int s = 0, next = 0; s < S; s++) {
        pt[s] = malloc(sizeof(int32_t) * np[s]);
        for (int i = 0; i < np[s]; i++) pt[s][i] = perm[next++];
        pos[s] = ctx[s] - 1;
        seq[s] = s;
    }
    /* Random K/V for every position of every sequence and layer. */
    for (int s = 0; s < S; s++) {
        int n = ctx[s];
        float *k = malloc(sizeof(float) * n * NKV * HD);
        float *v = malloc(sizeof(float) * n * NKV * HD);
        int32_t *p = malloc(sizeof(int32_t) * n), *z = calloc(n, sizeof(int32_t));
        for (int i = 0; i < n; i++) p[i] = i;
        const int32_t *const pts1[1] = {pt[s]};
        tr_batch one = {n, p, z, 1, pts1, &np[s]};
        for (int l = 0; l < L; l++) {
            fill(k, (size_t)n * NKV * HD);
            fill(v, (size_t)n * NKV * HD);
            be->ops->kv_store(be->stream, &a.kv, l, k, v, &one);
        }
        free(k);
        free(v);
        free(p);
        free(z);
    }
    a.b = (tr_batch){S, pos, seq, S, (const int32_t *const *)pt, np};
    a.q = malloc(sizeof(float) * S * NH * HD);
    a.out = malloc(sizeof(float) * S * NH * HD);
    fill(a.q, (size_t)S * NH * HD);
    double ns = time_ns(run_attn_decode, &a, 50);
    for (int s = 0; s < S; s++) free(pt[s]);
    free(perm);
    free(a.q);
    free(a.out);
    be->ops->free(be, mem);
    return ns;
}

/* ---- row ops ---- */

typedef struct row_bench {
    tr_backend *be;
    float *x, *y, *w;
    int32_t *pos;
    int n;
} row_bench;

static void run_rmsnorm(void *ctx) {
    row_bench *r = ctx;
    r->be->ops->rmsnorm(r->be->stream, r->y, r->x, r->w, r->n, 576, 1e-5f);
}
static void run_rope(void *ctx) {
    row_bench *r = ctx;
    r->be->ops->rope(r->be->stream, r->y, r->n, 9, 64, r->pos, 100000.0f);
}
static void run_swiglu(void *ctx) {
    row_bench *r = ctx;
    r->be->ops->swiglu(r->be->stream, r->y, r->x, r->w, (int64_t)r->n * 1536);
}
static void run_add(void *ctx) {
    row_bench *r = ctx;
    r->be->ops->add(r->be->stream, r->y, r->x, (int64_t)r->n * 576);
}

static void bench_rows(tr_backend *be, int n) {
    row_bench r = {.be = be, .n = n};
    r.x = malloc(sizeof(float) * n * 1536);
    r.y = malloc(sizeof(float) * n * 1536);
    r.w = malloc(sizeof(float) * n * 1536);
    r.pos = malloc(sizeof(int32_t) * n);
    fill(r.x, (size_t)n * 1536);
    fill(r.y, (size_t)n * 1536);
    fill(r.w, (size_t)n * 1536);
    for (int i = 0; i < n; i++) r.pos[i] = 100 + i;
    int it = 100000;
    double a = time_ns(run_rmsnorm, &r, it);
    double b = time_ns(run_rope, &r, it);
    double c = time_ns(run_swiglu, &r, it);
    double d = time_ns(run_add, &r, it);
    printf("  n=%-4d rmsnorm(576) %8.0f ns (%5.2f GB/s)  rope(9x64) %8.0f ns"
           "  swiglu(1536) %8.0f ns (%6.1f Melem/s)  add(576) %7.0f ns\n",
           n, a, (double)n * 576 * 8 / a, b, c, (double)n * 1536 * 1e3 / c,
           d);
    free(r.x);
    free(r.y);
    free(r.w);
    free(r.pos);
}

/* ---- matmul through the backend (the scheduling of the quant tiles) ---- */

typedef struct mm_bench {
    tr_backend *be;
    int n_mats;
    float *out[3];
    const tr_weight *w[3];
    float *x;
    int n;
} mm_bench;

static void run_mm(void *ctx) {
    mm_bench *m = ctx;
    m->be->ops->matmul(m->be->stream, m->n_mats, m->out, m->w, m->x, m->n, false);
}

/* Q4_1 weights with random nibbles and small scales. */
static void *q41_matrix(int64_t rows, int64_t cols) {
    size_t bytes = (size_t)rows * (size_t)cols / 32 * 20;
    uint8_t *p = malloc(bytes);
    for (size_t i = 0; i < bytes; i++) p[i] = (uint8_t)(rnd() * 255);
    for (size_t b = 0; b < bytes / 20; b++) {
        const uint16_t d = 0x1c00, m = 0x9c00; /* fp16 0.0039, -0.0039 */
        memcpy(p + b * 20, &d, 2);
        memcpy(p + b * 20 + 2, &m, 2);
    }
    return p;
}

static void bench_matmul(tr_backend *be, int n) {
    /* The default model's three matmul groups per layer. */
    struct {
        const char *name;
        int n_mats;
        int64_t rows[3], cols;
    } g[3] = {{"qkv 576->576+192+192", 3, {576, 192, 192}, 576},
              {"gate+up 576->2x1536", 2, {1536, 1536, 0}, 576},
              {"down 1536->576", 1, {576, 0, 0}, 1536}};
    for (int i = 0; i < 3; i++) {
        mm_bench m = {.be = be, .n_mats = g[i].n_mats, .n = n};
        tr_weight w[3];
        double bytes = 0, macs = 0;
        for (int k = 0; k < g[i].n_mats; k++) {
            w[k] = (tr_weight){q41_matrix(g[i].rows[k], g[i].cols),
                               TR_DTYPE_Q4_1, g[i].rows[k], g[i].cols, 0};
            m.w[k] = &w[k];
            m.out[k] = malloc(sizeof(float) * n * g[i].rows[k]);
            bytes += (double)g[i].rows[k] * g[i].cols / 32 * 20;
            macs += (double)g[i].rows[k] * g[i].cols * n;
        }
        m.x = malloc(sizeof(float) * n * g[i].cols);
        fill(m.x, (size_t)n * g[i].cols);
        double ns = time_ns(run_mm, &m, 100000);
        printf("  matmul Q4_1 %-22s n=%-4d %9.1f us  (%5.2f GB/s of weights, "
               "%6.1f GMAC/s)\n",
               g[i].name, n, ns / 1e3, bytes / ns, macs / ns);
        for (int k = 0; k < g[i].n_mats; k++) {
            free((void *)w[k].data);
            free(m.out[k]);
        }
        free(m.x);
    }
}

int main(int argc, char **argv) {
    int max_threads = argc > 1 ? atoi(argv[1]) : 2;
    if (max_threads < 1) max_threads = 1;
    bench_dispatch(max_threads);
    const char *sets[2] = {NULL /* the best */, "portable"};
    for (int s = 0; s < 2; s++) {
        for (int th = 1; th <= max_threads; th++) {
            tr_backend *be = NULL;
            tr_backend_config cfg = {.threads = th, .kernels = sets[s]};
            if (tr_backend_new("cpu", &cfg, &be, NULL) != TR_OK) return 1;
            const char *k = tr_backend_get_info(be).kernels;
            if (s == 0 && strcmp(k, "portable") == 0) {
                tr_backend_free(be);
                break; /* no SIMD set here: the second round measures it */
            }
            printf("== %s, %d thread(s) ==\n", k, th);
            const tr_kv_type kts[] = {TR_KV_F16, TR_KV_F32, TR_KV_Q8, TR_KV_Q4};
            for (int ti = 0; ti < 4; ti++) {
                tr_kv_type t = kts[ti];
                const char *tn = tr_kv_type_name(t);
                double d512 = bench_attention(be, 512, 1, t, 1);
                double d2048 = bench_attention(be, 2048, 1, t, 1);
                double p512 = bench_attention(be, 512, 512, t, 1);
                printf("  attention %s KV: decode ctx 512 %7.1f us, ctx 2048 "
                       "%7.1f us; prefill 512 tokens %7.2f ms\n",
                       tn, d512 / 1e3, d2048 / 1e3, p512 / 1e6);
            }
            /* a few-shot question after its cached prompt, and one decode
             * step there: 43, 14 and 1 tokens at ~1,593 positions, 30
             * layers */
            for (int ti = 0; ti < 4; ti++) {
                if (ti == 1) continue; /* F32: not a serving type */
                double sfx = bench_attention(be, 1593, 43, kts[ti], 30);
                double sfx14 = bench_attention(be, 1564, 14, kts[ti], 30);
                double dec = bench_attention(be, 1594, 1, kts[ti], 30);
                printf("  attention %s KV, 30 layers at ~1,593 positions (cold): "
                       "43-token suffix %7.2f ms, 14-token %7.2f ms, decode "
                       "%7.2f ms\n",
                       tr_kv_type_name(kts[ti]), sfx / 1e6, sfx14 / 1e6, dec / 1e6);
            }
            int ctx_total = 0;
            double d32 = bench_attention_decode32(be, &ctx_total);
            printf("  attention F16 KV: decode 32 sequences x 30 layers "
                   "(%d cached tokens, cold) %7.2f ms\n",
                   ctx_total, d32 / 1e6);
            bench_rows(be, 1);
            bench_rows(be, 512);
            bench_matmul(be, 1);
            bench_matmul(be, 512);
            tr_backend_free(be);
        }
    }
    return 0;
}
