/* ops.c — the CPU backend's ops: how each op is split across the worker
 * pool, and the portable (plain C) inner loops. ops_avx2.c has the AVX2
 * inner loops; quant_*.c the quantized math the matmul and embed ops call.
 *
 * Layering: internal to kernels/cpu; called through the tr_backend_ops table
 * built in cpu_backend.c, on the backend owner's thread (worker 0).
 *
 * Splitting rules (what keeps the determinism contract of backend.h): a
 * thread always computes whole output rows (or, for elementwise ops, whole
 * elements) with the same kernel a single thread would use, so only *who*
 * computes a value depends on the thread count, never *how*. Attention is
 * the one op that splits a row's reduction (long contexts at decode); it
 * does so along fixed 64-position blocks that depend only on the token's
 * position, and always folds the blocks in the same order (see
 * CPU_ATTN_BLOCK).
 *
 * Small ops run on the calling thread alone: waking a worker costs more
 * than, e.g., normalizing one 576-wide row.
 */
#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "kernels/cpu/cpu_internal.h"
#include "base/util.h"

static inline cpu_backend *cpu_of(tr_stream *s) { return (cpu_backend *)s->be; }

/* Threads for an op of `work` units when a thread should get at least
 * `min_share` of them to be worth waking. */
static int op_threads(const cpu_backend *c, int64_t work, int64_t min_share) {
    int64_t t = work / min_share;
    if (t < 1) t = 1;
    if (t > c->n_threads) t = c->n_threads;
    return (int)t;
}

/* Rows [lo, hi) of n for thread ith of nth. */
static void share_rows(int64_t n, int ith, int nth, int64_t *lo, int64_t *hi) {
    *lo = n * ith / nth;
    *hi = n * (ith + 1) / nth;
}

/* Same over elements, cut at multiples of 64 floats (whole cache lines,
 * whole vectors: a thread's range starts where a single thread's vector
 * loop would have an iteration start). */
static void share_elems(int64_t n, int ith, int nth, int64_t *lo,
                        int64_t *hi) {
    int64_t blocks = (n + 63) / 64;
    int64_t b0, b1;
    share_rows(blocks, ith, nth, &b0, &b1);
    *lo = TR_MIN(n, b0 * 64);
    *hi = TR_MIN(n, b1 * 64);
}

bool tr_cpu_scratch_reserve(void **buf, size_t *cap, size_t bytes) {
    if (bytes <= *cap) return true;
    /* Grow by half again so that slowly growing contexts do not reallocate
     * on every step. */
    size_t want = bytes;
    if (*cap <= SIZE_MAX / 3 && *cap + *cap / 2 > want) want = *cap + *cap / 2;
    void *p = tr_aligned_alloc(want, 64);
    if (!p) return false;
    tr_aligned_free(*buf);
    *buf = p;
    *cap = want;
    return true;
}

/* ------------------------------------------------------------------ */
/* Portable inner loops.                                               */

static void rmsnorm_row_portable(float *out, const float *x, const float *w,
                                 int32_t dim, float eps) {
    /* Squares summed in double (exact products), as ggml does; the scale
     * is applied before the weight, in that order, as there (ggml's norm
     * and weight multiply are separate ops), to match it closely. */
    double ss = 0.0;
    for (int32_t i = 0; i < dim; i++) ss += (double)x[i] * (double)x[i];
    float scale = 1.0f / sqrtf((float)(ss / dim) + eps);
    for (int32_t i = 0; i < dim; i++) out[i] = (x[i] * scale) * w[i];
}

void tr_cpu_rope_row_portable(float *x, int32_t n_heads, int32_t head_dim,
                           const float *cs) {
    int32_t half = head_dim / 2;
    for (int32_t h = 0; h < n_heads; h++) {
        float *v = x + (int64_t)h * head_dim;
        for (int32_t i = 0; i < half; i++) {
            float c = cs[2 * i], s = cs[2 * i + 1];
            float a = v[2 * i], b = v[2 * i + 1];
            v[2 * i] = a * c - b * s;
            v[2 * i + 1] = a * s + b * c;
        }
    }
}

static void swiglu_portable(float *out, const float *g, const float *u,
                            int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        float x = g[i];
        out[i] = x / (1.0f + expf(-x)) * u[i];
    }
}

/* gelu_tanh(x) = x/2 (1 + tanh(y)) = x / (1 + exp(-2y)), y = sqrt(2/pi)
 * (x + 0.044715 x^3): the sigmoid form, one exp per element (tanhf is
 * ~3x slower). */
static void geglu_portable(float *out, const float *g, const float *u,
                           int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        float x = g[i];
        float y2 = 1.5957691216057308f * x * (1.0f + 0.044715f * x * x);
        out[i] = x / (1.0f + expf(-y2)) * u[i];
    }
}

static void add_portable(float *out, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) out[i] += x[i];
}

static void store_row_portable(void *dst, const float *src, int32_t n,
                               bool f16) {
    if (!f16) {
        memcpy(dst, src, (size_t)n * sizeof(float));
        return;
    }
    uint16_t *d = dst;
    for (int32_t i = 0; i < n; i++) d[i] = cpu_fp32_to_fp16(src[i]);
}

/* One head: s[j] = scale * dot(q, k_j). */
static float scores_one_portable(float *s, const float *q, const void *k,
                                 size_t stride, int32_t n, int32_t hd,
                                 bool f16, float scale) {
    float mx = -INFINITY;
    for (int32_t j = 0; j < n; j++) {
        float acc = 0.0f;
        if (f16) {
            const uint16_t *r = (const uint16_t *)k + (size_t)j * stride;
            for (int32_t d = 0; d < hd; d++)
                acc += q[d] * cpu_fp16_to_fp32(r[d]);
        } else {
            const float *r = (const float *)k + (size_t)j * stride;
            for (int32_t d = 0; d < hd; d++) acc += q[d] * r[d];
        }
        s[j] = acc * scale;
        mx = s[j] > mx ? s[j] : mx;
    }
    return mx;
}

void tr_cpu_attn_scores_portable(float *s, size_t s_stride, float *max,
                              const float *q, int32_t g, const void *k,
                              size_t stride, int32_t n, int32_t hd, bool f16,
                              float scale) {
    for (int32_t h = 0; h < g; h++)
        max[h] = scores_one_portable(s + (size_t)h * s_stride,
                                     q + (size_t)h * (size_t)hd, k, stride, n,
                                     hd, f16, scale);
}

static float attn_exp_sum_portable(float *s, int32_t n, float max) {
    float sum = 0.0f;
    for (int32_t j = 0; j < n; j++) {
        float e = expf(s[j] - max);
        s[j] = e;
        sum += e;
    }
    return sum;
}

void tr_cpu_attn_accum_portable(float *acc, size_t acc_stride, const float *p,
                             size_t p_stride, int32_t g, const void *v,
                             size_t stride, int32_t n, int32_t hd, bool f16) {
    for (int32_t h = 0; h < g; h++) {
        float *ah = acc + (size_t)h * acc_stride;
        const float *ph = p + (size_t)h * p_stride;
        for (int32_t j = 0; j < n; j++) {
            float w = ph[j];
            if (f16) {
                const uint16_t *r = (const uint16_t *)v + (size_t)j * stride;
                for (int32_t d = 0; d < hd; d++)
                    ah[d] += w * cpu_fp16_to_fp32(r[d]);
            } else {
                const float *r = (const float *)v + (size_t)j * stride;
                for (int32_t d = 0; d < hd; d++) ah[d] += w * r[d];
            }
        }
    }
}

const cpu_op_kernels tr_cpu_op_kernels_portable = {
    .name = "portable",
    .rmsnorm_row = rmsnorm_row_portable,
    .rope_row = tr_cpu_rope_row_portable,
    .swiglu = swiglu_portable,
    .geglu = geglu_portable,
    .add = add_portable,
    .store_row = store_row_portable,
    .attn_scores = tr_cpu_attn_scores_portable,
    .attn_exp_sum = attn_exp_sum_portable,
    .attn_accum = tr_cpu_attn_accum_portable,
};

/* ------------------------------------------------------------------ */
/* embed                                                               */

typedef struct embed_args {
    const cpu_backend *c;
    float *out;
    const tr_weight *table;
    const int32_t *ids;
    int32_t n;
    size_t row_bytes;
} embed_args;

static void embed_task(void *ctx, int ith, int nth) {
    const embed_args *a = ctx;
    int64_t lo, hi;
    share_rows(a->n, ith, nth, &lo, &hi);
    int64_t dim = a->table->cols;
    for (int64_t i = lo; i < hi; i++) {
        float *dst = a->out + i * dim;
        int32_t id = a->ids[i];
        if (id < 0 || id >= a->table->rows) {
            /* Ids are validated upstream; an invalid one must not read
             * outside the table, so it embeds as zeros. */
            memset(dst, 0, (size_t)dim * sizeof(float));
            continue;
        }
        const uint8_t *src =
            (const uint8_t *)a->table->data + (size_t)id * a->row_bytes;
        a->c->qk->dequantize_row(a->table->type, src, dst, dim);
    }
}

void tr_cpu_op_embed(tr_stream *s, float *out, const tr_weight *table,
                  const int32_t *ids, int32_t n) {
    cpu_backend *c = cpu_of(s);
    if (n <= 0) return;
    uint64_t rb = 0;
    bool ok = tr_dtype_row_bytes(table->type, (uint64_t)table->cols, &rb);
    TR_ASSERT(ok && tr_dtype_computable(table->type));
    embed_args a = {c, out, table, ids, n, (size_t)rb};
    tr_cpu_pool_run(c->pool, op_threads(c, (int64_t)n * table->cols, 16384),
                 embed_task, &a);
}

/* ------------------------------------------------------------------ */
/* matmul                                                              */

/* The matmul splits the union of all matrices' rows into MATMUL_PIECES
 * contiguous pieces per thread, balanced by weight bytes (at decode the op
 * streams the weights once: it is memory-bound), cut at multiples of
 * MATMUL_ROW_ALIGN rows within a matrix (the quant kernels' register tile
 * is 8 rows). Threads take pieces from a shared counter rather than owning
 * a fixed share: when another process preempts one worker (a server's
 * event loop and its clients wake once per streamed token on a machine
 * with as many cores as workers), the others take its pieces instead of
 * idling at the barrier for the whole preemption.
 * Inside a piece a thread walks blocks of MATMUL_ROW_BLOCK rows x
 * MATMUL_TOK_BLOCK tokens so that a block of weights stays in cache while
 * the token rows go by (prefill). The quant kernels' contract makes every
 * output value independent of these blockings. */
#define MATMUL_ROW_ALIGN 8
/* Overridable at build time for tuning experiments (-DMATMUL_ROW_BLOCK=). */
#ifndef MATMUL_ROW_BLOCK
#define MATMUL_ROW_BLOCK 64
#endif
#ifndef MATMUL_TOK_BLOCK
#define MATMUL_TOK_BLOCK 64
#endif
/* Matrices per call (Q, K, V; gate, up): a fixed bound keeps the
 * per-call state on the stack. */
#define MATMUL_MAX_MATS 8
/* Pieces per thread: enough that a preempted thread's share is taken up by
 * the others, few enough that a piece still holds several row blocks. */
#ifndef MATMUL_PIECES
#define MATMUL_PIECES 4
#endif

typedef struct matmul_args {
    const cpu_quant_kernels *qk;
    cpu_pool *pool;
    int32_t n_mats;
    float *out[MATMUL_MAX_MATS]; /* this chunk's first token */
    const tr_weight *const *w;
    const float *x;             /* this chunk's first token */
    int32_t n;                  /* tokens in this chunk */
    bool accumulate;
    int64_t cols;
    size_t w_row_bytes[MATMUL_MAX_MATS];
    uint64_t total_bytes;
    /* Activations, quantized once per distinct weight type. */
    int32_t n_fmt;
    tr_dtype fmt_type[MATMUL_MAX_MATS];
    size_t fmt_row_bytes[MATMUL_MAX_MATS];
    uint8_t *fmt_data[MATMUL_MAX_MATS];
    int32_t mat_fmt[MATMUL_MAX_MATS]; /* matrix -> format index */
    int n_pieces;                      /* of the row space, this run */
    atomic_int next_piece;             /* the next piece not yet taken */
} matmul_args;

typedef struct row_pos {
    int32_t mat;
    int64_t row;
} row_pos;

/* Where thread share k of nth begins in the concatenated row space. */
static row_pos matmul_boundary(const matmul_args *a, int k, int nth) {
    if (k >= nth) return (row_pos){a->n_mats, 0};
    /* target = total * k / nth without overflow (total < 2^63 / nth). */
    uint64_t target = a->total_bytes / (uint64_t)nth * (uint64_t)k +
                      a->total_bytes % (uint64_t)nth * (uint64_t)k /
                          (uint64_t)nth;
    for (int32_t i = 0; i < a->n_mats; i++) {
        uint64_t bytes = (uint64_t)a->w[i]->rows * a->w_row_bytes[i];
        if (target >= bytes) {
            target -= bytes;
            continue;
        }
        int64_t row = (int64_t)(target / a->w_row_bytes[i]);
        row = (row + MATMUL_ROW_ALIGN / 2) / MATMUL_ROW_ALIGN *
              MATMUL_ROW_ALIGN;
        if (row >= a->w[i]->rows) return (row_pos){i + 1, 0};
        return (row_pos){i, row};
    }
    return (row_pos){a->n_mats, 0};
}

static void matmul_piece(const matmul_args *a, row_pos from, row_pos to);

static void matmul_task(void *ctx, int ith, int nth) {
    matmul_args *a = ctx; /* shared: only next_piece is written */
    /* Phase 1: quantize the activations, token rows split across
     * threads. */
    int64_t lo, hi;
    share_rows(a->n, ith, nth, &lo, &hi);
    for (int32_t f = 0; f < a->n_fmt; f++)
        for (int64_t t = lo; t < hi; t++)
            a->qk->quantize_act_row(a->fmt_type[f], a->x + t * a->cols,
                                    a->fmt_data[f] + t * a->fmt_row_bytes[f],
                                    a->cols);
    tr_cpu_pool_barrier(a->pool);

    /* Phase 2: pieces of the row space, for all tokens, until none is
     * left. */
    for (;;) {
        int k = atomic_fetch_add_explicit(&a->next_piece, 1, memory_order_relaxed);
        if (k >= a->n_pieces) break;
        matmul_piece(a, matmul_boundary(a, k, a->n_pieces),
                     matmul_boundary(a, k + 1, a->n_pieces));
    }
}

/* Rows [from, to) of the concatenated row space, for all tokens. */
static void matmul_piece(const matmul_args *a, row_pos from, row_pos to) {
    for (int32_t i = from.mat; i <= to.mat && i < a->n_mats; i++) {
        int64_t r0 = i == from.mat ? from.row : 0;
        int64_t r1 = i == to.mat ? to.row : a->w[i]->rows;
        const tr_weight *w = a->w[i];
        int32_t f = a->mat_fmt[i];
        for (int64_t rb = r0; rb < r1; rb += MATMUL_ROW_BLOCK) {
            int64_t re = TR_MIN(rb + MATMUL_ROW_BLOCK, r1);
            for (int32_t tb = 0; tb < a->n; tb += MATMUL_TOK_BLOCK) {
                int32_t nt = TR_MIN(MATMUL_TOK_BLOCK, a->n - tb);
                a->qk->matmul_tile(
                    w->type, w->data, a->w_row_bytes[i], a->cols,
                    a->fmt_data[f] + (size_t)tb * a->fmt_row_bytes[f],
                    a->fmt_row_bytes[f], nt,
                    a->out[i] + (int64_t)tb * w->rows, (size_t)w->rows, rb,
                    re, a->accumulate);
            }
        }
    }
}

void tr_cpu_op_matmul(tr_stream *s, int32_t n_mats, float *const *out,
                   const tr_weight *const *w, const float *x, int32_t n,
                   bool accumulate) {
    cpu_backend *c = cpu_of(s);
    if (n <= 0 || n_mats <= 0) return;
    TR_ASSERT(n_mats <= MATMUL_MAX_MATS);
    matmul_args a = {
        .qk = c->qk,
        .pool = c->pool,
        .n_mats = n_mats,
        .w = w,
        .accumulate = accumulate,
        .cols = w[0]->cols,
    };
    size_t act_bytes = 0;
    int64_t rows_total = 0;
    for (int32_t i = 0; i < n_mats; i++) {
        uint64_t rb = 0;
        bool ok = w[i]->cols == a.cols && w[i]->rows >= 0 &&
                  tr_cpu_quant_supported(w[i]->type, a.cols) &&
                  tr_dtype_row_bytes(w[i]->type, (uint64_t)a.cols, &rb);
        TR_ASSERT(ok); /* shapes are checked when the model loads */
        a.w_row_bytes[i] = (size_t)rb;
        a.total_bytes += (uint64_t)w[i]->rows * rb;
        rows_total += w[i]->rows;
        int32_t f = 0;
        while (f < a.n_fmt && a.fmt_type[f] != w[i]->type) f++;
        if (f == a.n_fmt) {
            a.fmt_type[f] = w[i]->type;
            a.fmt_row_bytes[f] = tr_cpu_quant_act_row_bytes(w[i]->type, a.cols);
            act_bytes += a.fmt_row_bytes[f] * (size_t)n;
            a.n_fmt++;
        }
        a.mat_fmt[i] = f;
    }
    /* The activation scratch is a few hundred bytes per token and weight
     * type. If it cannot grow to the whole batch, the tokens go through in
     * chunks that fit (the results do not depend on the chunking). */
    size_t tok_bytes = act_bytes / (size_t)n;
    int32_t chunk = n;
    if (!tr_cpu_scratch_reserve(&c->act, &c->act_cap, act_bytes)) {
        chunk = (int32_t)TR_MIN((size_t)n, c->act_cap / tok_bytes);
        TR_ASSERT(chunk >= 1); /* not even one token's worth: out of memory */
    }
    uint8_t *p = c->act;
    for (int32_t f = 0; f < a.n_fmt; f++) {
        a.fmt_data[f] = p;
        p += a.fmt_row_bytes[f] * (size_t)chunk;
    }
    for (int32_t t0 = 0; t0 < n; t0 += chunk) {
        a.n = TR_MIN(chunk, n - t0);
        a.x = x + (int64_t)t0 * a.cols;
        for (int32_t i = 0; i < n_mats; i++)
            a.out[i] = out[i] + (int64_t)t0 * w[i]->rows;
        int64_t work = (int64_t)a.n * rows_total * a.cols;
        /* A share below ~2 row groups wastes the wake-up. */
        int nth = op_threads(c, work, 131072);
        nth = (int)TR_MIN((int64_t)nth,
                          TR_MAX(1, rows_total / (2 * MATMUL_ROW_ALIGN)));
        a.n_pieces = nth == 1 ? 1 : nth * MATMUL_PIECES;
        atomic_store_explicit(&a.next_piece, 0, memory_order_relaxed);
        tr_cpu_pool_run(c->pool, nth, matmul_task, &a);
    }
}

/* ------------------------------------------------------------------ */
/* rmsnorm                                                             */

typedef struct rmsnorm_args {
    const cpu_op_kernels *k;
    float *out;
    const float *x, *w;
    int32_t n, dim;
    float eps;
} rmsnorm_args;

static void rmsnorm_task(void *ctx, int ith, int nth) {
    const rmsnorm_args *a = ctx;
    int64_t lo, hi;
    share_rows(a->n, ith, nth, &lo, &hi);
    for (int64_t i = lo; i < hi; i++)
        a->k->rmsnorm_row(a->out + i * a->dim, a->x + i * a->dim, a->w,
                          a->dim, a->eps);
}

void tr_cpu_op_rmsnorm(tr_stream *s, float *out, const float *x,
                    const float *w, int32_t n, int32_t dim, float eps) {
    cpu_backend *c = cpu_of(s);
    if (n <= 0 || dim <= 0) return;
    rmsnorm_args a = {c->k, out, x, w, n, dim, eps};
    int nth = op_threads(c, (int64_t)n * dim, 8192);
    tr_cpu_pool_run(c->pool, TR_MIN(nth, n), rmsnorm_task, &a);
}

/* ------------------------------------------------------------------ */
/* rope                                                                */

/* Pairs whose inverse frequencies are tabulated once per call; a larger
 * head computes the rest inline with the same formula. */
#define ROPE_TABLE_PAIRS 512

typedef struct rope_args {
    const cpu_op_kernels *k;
    float *x;
    int32_t n, n_heads, head_dim;
    const int32_t *pos;
    double base;
    float freq_scale;
    bool neox;              /* pairs (i, i + half) instead of (2i, 2i+1) */
    float *table;           /* [n][half][2] cos, sin; NULL: no memory */
    bool table_valid;       /* the table already holds these positions */
} rope_args;

/* cs[2i], cs[2i+1] = cos, sin of pair i0 + i of token t, i < cnt.
 * The angles follow GGML's recipe exactly (theta_0 = pos, theta_{i+1} =
 * theta_i * base^(-2/head_dim) in float, times freq_scale, then
 * cosf/sinf), so that rotated Q/K match llama.cpp's bit for bit where libm
 * agrees: measured on the reference prompts, exact double angles (up to
 * 1.4e-4 away from GGML's) were enough to flip greedy picks at near-ties. */
static void rope_angles(const rope_args *a, int64_t t, int32_t i0,
                        int32_t cnt, float *cs) {
    const float theta_scale = powf((float)a->base, -2.0f / (float)a->head_dim);
    float theta = (float)a->pos[t];
    for (int32_t i = 0; i < i0; i++) theta *= theta_scale;
    for (int32_t i = 0; i < cnt; i++) {
        float th = a->freq_scale == 1.0f ? theta : a->freq_scale * theta;
        cs[2 * i] = cosf(th);
        cs[2 * i + 1] = sinf(th);
        theta *= theta_scale;
    }
}

/* NEOX mode: element i of each head pairs with i + half (pairs i0 .. i0 +
 * cnt of a head of `half` pairs), the same two roundings per output as the
 * normal mode's rotation; one loop serves every kernel set. */
static void rope_row_neox(float *x, int32_t n_heads, int32_t half, int32_t i0,
                          int32_t cnt, const float *cs) {
    for (int32_t h = 0; h < n_heads; h++) {
        float *v = x + (int64_t)h * 2 * half;
        for (int32_t i = 0; i < cnt; i++) {
            float c = cs[2 * i], sn = cs[2 * i + 1];
            float p = v[i0 + i], q = v[i0 + i + half];
            v[i0 + i] = p * c - q * sn;
            v[i0 + i + half] = p * sn + q * c;
        }
    }
}

static void rope_rotate(const rope_args *a, float *row, int32_t n_heads,
                        int32_t i0, int32_t cnt, const float *cs) {
    if (a->neox) {
        rope_row_neox(row, n_heads, a->head_dim / 2, i0, cnt, cs);
    } else if (i0 == 0 && cnt == a->head_dim / 2) {
        a->k->rope_row(row, n_heads, a->head_dim, cs);
    } else {
        for (int32_t h = 0; h < n_heads; h++)
            a->k->rope_row(row + (int64_t)h * a->head_dim + 2 * i0, 1, 2 * cnt, cs);
    }
}

static void rope_task(void *ctx, int ith, int nth) {
    const rope_args *a = ctx;
    int32_t half = a->head_dim / 2;
    int64_t lo, hi;
    share_rows(a->n, ith, nth, &lo, &hi);
    int64_t row = (int64_t)a->n_heads * a->head_dim;
    if (a->table) {
        for (int64_t t = lo; t < hi; t++) {
            float *cs = a->table + t * 2 * half;
            if (!a->table_valid) rope_angles(a, t, 0, half, cs);
            rope_rotate(a, a->x + t * row, a->n_heads, 0, half, cs);
        }
        return;
    }
    /* No table memory: angles on the stack, ROPE_TABLE_PAIRS at a time
     * (same values, same rotation). */
    float cs[2 * ROPE_TABLE_PAIRS];
    for (int64_t t = lo; t < hi; t++) {
        for (int32_t i0 = 0; i0 < half; i0 += ROPE_TABLE_PAIRS) {
            int32_t cnt = TR_MIN(ROPE_TABLE_PAIRS, half - i0);
            rope_angles(a, t, i0, cnt, cs);
            rope_rotate(a, a->x + t * row, a->n_heads, i0, cnt, cs);
        }
    }
}

/* A forward pass ropes Q and K of every layer at the same positions: the
 * angle tables of the last calls are kept and reused when the positions,
 * head size, base and scale are the same (compared by value). Two tables,
 * least recently used replaced: Gemma 3 alternates a local and a global
 * base layer by layer, which would recompute one table per layer. */
static void rope_run(cpu_backend *c, float *x, int32_t n, int32_t n_heads,
                     int32_t head_dim, const int32_t *pos, float freq_base,
                     float freq_scale, bool neox) {
    if (n <= 0 || n_heads <= 0 || head_dim < 2) return;
    int32_t half = head_dim / 2;
    rope_args a = {c->k,     x,          n,    n_heads, head_dim, pos,
                   freq_base, freq_scale, neox, NULL,    false};
    size_t cs_bytes = (size_t)n * (size_t)half * 2 * sizeof(float);
    cpu_rope_cache *rc = NULL;
    for (int e = 0; e < CPU_ROPE_TABLES; e++) {
        cpu_rope_cache *r = &c->rope[e];
        if (r->n == n && r->head_dim == head_dim && r->base == freq_base &&
            r->scale == freq_scale &&
            memcmp(r->pos, pos, (size_t)n * sizeof(int32_t)) == 0) {
            rc = r;
            a.table = r->cs;
            a.table_valid = true;
        }
    }
    if (!rc) {
        rc = &c->rope[0];
        for (int e = 1; e < CPU_ROPE_TABLES; e++)
            if (c->rope[e].used < rc->used) rc = &c->rope[e];
        rc->n = -1; /* invalid until filled */
        if (tr_cpu_scratch_reserve(&rc->cs, &rc->cs_cap, cs_bytes) &&
            tr_cpu_scratch_reserve(&rc->pos, &rc->pos_cap,
                                (size_t)n * sizeof(int32_t))) {
            a.table = rc->cs;
            memcpy(rc->pos, pos, (size_t)n * sizeof(int32_t));
        }
    }
    rc->used = ++c->rope_clock;
    /* Rotating a token costs ~n_heads*half multiply-adds; computing its
     * angles ~half sin/cos (~40 ns each). */
    int64_t work = a.table_valid ? (int64_t)n * n_heads * half / 16
                                 : (int64_t)n * half;
    int nth = op_threads(c, work, 128);
    tr_cpu_pool_run(c->pool, TR_MIN(nth, n), rope_task, &a);
    if (a.table && !a.table_valid) {
        rc->n = n;
        rc->head_dim = head_dim;
        rc->base = freq_base;
        rc->scale = freq_scale;
    }
}

void tr_cpu_op_rope(tr_stream *s, float *x, int32_t n, int32_t n_heads,
                    int32_t head_dim, const int32_t *pos, float freq_base) {
    rope_run(cpu_of(s), x, n, n_heads, head_dim, pos, freq_base, 1.0f, false);
}

void tr_cpu_op_rope_neox(tr_stream *s, float *x, int32_t n, int32_t n_heads,
                         int32_t head_dim, const int32_t *pos, float freq_base,
                         float freq_scale) {
    rope_run(cpu_of(s), x, n, n_heads, head_dim, pos, freq_base, freq_scale,
             true);
}

/* ------------------------------------------------------------------ */
/* swiglu, add, get_rows                                               */

typedef struct elem_args {
    const cpu_op_kernels *k;
    float *out;
    const float *a, *b;
    int64_t n;
} elem_args;

static void swiglu_task(void *ctx, int ith, int nth) {
    const elem_args *e = ctx;
    int64_t lo, hi;
    share_elems(e->n, ith, nth, &lo, &hi);
    if (hi > lo) e->k->swiglu(e->out + lo, e->a + lo, e->b + lo, hi - lo);
}

void tr_cpu_op_swiglu(tr_stream *s, float *out, const float *gate,
                   const float *up, int64_t n) {
    cpu_backend *c = cpu_of(s);
    if (n <= 0) return;
    elem_args e = {c->k, out, gate, up, n};
    tr_cpu_pool_run(c->pool, op_threads(c, n, 8192), swiglu_task, &e);
}

static void add_task(void *ctx, int ith, int nth) {
    const elem_args *e = ctx;
    int64_t lo, hi;
    share_elems(e->n, ith, nth, &lo, &hi);
    if (hi > lo) e->k->add(e->out + lo, e->a + lo, hi - lo);
}

void tr_cpu_op_add(tr_stream *s, float *out, const float *x, int64_t n) {
    cpu_backend *c = cpu_of(s);
    if (n <= 0) return;
    elem_args e = {c->k, out, x, NULL, n};
    /* Memory-bound: only worth splitting when large. */
    tr_cpu_pool_run(c->pool, op_threads(c, n, 65536), add_task, &e);
}

static void geglu_task(void *ctx, int ith, int nth) {
    const elem_args *e = ctx;
    int64_t lo, hi;
    share_elems(e->n, ith, nth, &lo, &hi);
    if (hi > lo) e->k->geglu(e->out + lo, e->a + lo, e->b + lo, hi - lo);
}

void tr_cpu_op_geglu(tr_stream *s, float *out, const float *gate,
                     const float *up, int64_t n) {
    cpu_backend *c = cpu_of(s);
    if (n <= 0) return;
    elem_args e = {c->k, out, gate, up, n};
    tr_cpu_pool_run(c->pool, op_threads(c, n, 8192), geglu_task, &e);
}

/* x[n, dim] += b: row by row with the add kernel (memory-bound). */
typedef struct bias_args {
    const cpu_op_kernels *k;
    float *x;
    const float *b;
    int32_t n, dim;
} bias_args;

static void bias_task(void *ctx, int ith, int nth) {
    const bias_args *a = ctx;
    int64_t lo, hi;
    share_rows(a->n, ith, nth, &lo, &hi);
    for (int64_t t = lo; t < hi; t++) a->k->add(a->x + t * a->dim, a->b, a->dim);
}

void tr_cpu_op_add_bias(tr_stream *s, float *x, const float *b, int32_t n,
                        int32_t dim) {
    cpu_backend *c = cpu_of(s);
    if (n <= 0 || dim <= 0) return;
    bias_args a = {c->k, x, b, n, dim};
    int nth = op_threads(c, (int64_t)n * dim, 65536);
    tr_cpu_pool_run(c->pool, TR_MIN(nth, n), bias_task, &a);
}

/* scale and softcap: elementwise, once per forward on small arrays (the
 * embedding rows, the logits rows): plain loops on the calling thread,
 * the same in every kernel set. */
void tr_cpu_op_scale(tr_stream *s, float *x, float sc, int64_t n) {
    (void)s;
    for (int64_t i = 0; i < n; i++) x[i] *= sc;
}

void tr_cpu_op_softcap(tr_stream *s, float *x, float cap, int64_t n) {
    (void)s;
    for (int64_t i = 0; i < n; i++) x[i] = cap * tanhf(x[i] / cap);
}

void tr_cpu_op_get_rows(tr_stream *s, float *out, const float *x, int32_t dim,
                     const int32_t *rows, int32_t n) {
    (void)s;
    for (int32_t i = 0; i < n; i++)
        memcpy(out + (int64_t)i * dim, x + (int64_t)rows[i] * dim,
               (size_t)dim * sizeof(float));
}

/* ------------------------------------------------------------------ */
/* kv_store and attention: paged KV addressing                         */

/* Element offset of row (page, slot) of kind c (0 = K, 1 = V) of a layer,
 * per the layout in backend.h. */
static inline size_t kv_row_offset(const tr_kv_layout *kv, int32_t layer,
                                   int64_t page, int c, int32_t slot) {
    size_t kv_dim = (size_t)kv->n_kv_heads * (size_t)kv->head_dim;
    return ((((size_t)page * (size_t)kv->n_layers + (size_t)layer) * 2 +
             (size_t)c) *
                (size_t)kv->page_size +
            (size_t)slot) *
           kv_dim;
}

/* Checks (once per op, on the calling thread) that every page a token
 * reads or writes exists: the scheduler builds batches, so a violation is
 * a bug upstream, and it would otherwise corrupt memory. */
static void check_batch_pages(const tr_kv_layout *kv, const tr_batch *b,
                              bool all_positions) {
    /* Pages already checked for the previous token's sequence: a prefill
     * chunk's tokens are adjacent, so each page is checked about once. */
    int32_t last_s = -1, checked = 0;
    for (int32_t t = 0; t < b->n_tokens; t++) {
        int32_t s = b->seq[t], p = b->pos[t];
        TR_ASSERT(s >= 0 && s < b->n_seqs && p >= 0);
        int32_t last = p / kv->page_size;
        TR_ASSERT(last < b->n_pages[s]);
        if (s != last_s) checked = 0;
        int32_t first = all_positions ? checked : last;
        for (int32_t i = first; i <= last; i++) {
            int32_t pg = b->page_table[s][i];
            TR_ASSERT(pg >= 0 && pg < kv->n_pages);
        }
        if (all_positions) {
            last_s = s;
            checked = TR_MAX(checked, last + 1);
        }
    }
}

typedef struct kv_store_args {
    const cpu_op_kernels *k;
    const tr_kv_layout *kv;
    int32_t layer;
    const float *src[2]; /* K, V */
    const tr_batch *b;
} kv_store_args;

static void kv_store_task(void *ctx, int ith, int nth) {
    const kv_store_args *a = ctx;
    const tr_kv_layout *kv = a->kv;
    bool f16 = kv->type == TR_DTYPE_F16;
    size_t esize = f16 ? 2 : 4;
    int32_t kv_dim = kv->n_kv_heads * kv->head_dim;
    int64_t lo, hi;
    share_rows(a->b->n_tokens, ith, nth, &lo, &hi);
    for (int64_t t = lo; t < hi; t++) {
        int32_t s = a->b->seq[t], p = a->b->pos[t];
        int64_t page = a->b->page_table[s][p / kv->page_size];
        int32_t slot = p % kv->page_size;
        for (int c = 0; c < 2; c++) {
            size_t off = kv_row_offset(kv, a->layer, page, c, slot);
            a->k->store_row((uint8_t *)kv->base + off * esize,
                            a->src[c] + t * kv_dim, kv_dim, f16);
        }
    }
}

void tr_cpu_op_kv_store(tr_stream *s, const tr_kv_layout *kv, int32_t layer,
                     const float *k, const float *v, const tr_batch *b) {
    cpu_backend *c = cpu_of(s);
    if (b->n_tokens <= 0) return;
    TR_ASSERT(kv->type == TR_DTYPE_F16 || kv->type == TR_DTYPE_F32);
    TR_ASSERT(layer >= 0 && layer < kv->n_layers && kv->page_size >= 1);
    check_batch_pages(kv, b, false);
    kv_store_args a = {c->k, kv, layer, {k, v}, b};
    int64_t work = (int64_t)b->n_tokens * kv->n_kv_heads * kv->head_dim;
    tr_cpu_pool_run(c->pool, TR_MIN(op_threads(c, work, 16384), b->n_tokens),
                 kv_store_task, &a);
}

/* Attention.
 *
 * One (token t, head h) attends to positions lo..p (lo = 0, or in a
 * sliding-window layer p - window + 1) in blocks of CPU_ATTN_BLOCK
 * positions, [k*64, (k+1)*64) cut to lo..p: where the blocks fall depends
 * only on p and the window, never on the batch. A block gives a partial
 *   [m, l, acc[hd]]: m = max score, l = sum exp(s - m), acc = sum exp(s-m) v
 * and partials fold left to right:
 *   M = max(m1, m2), a = exp(m1 - M), b = exp(m2 - M),
 *   l = l1 a + l2 b, acc = acc1 a + acc2 b;   out = acc / l.
 * A "unit" is (token, KV head): the query heads sharing that KV head run
 * together per block, so the block's K/V rows are read from memory once.
 *
 * Two schedules, bit-identical by construction:
 * - per unit: a thread folds all blocks of a unit as it computes them
 *   (prefill, or decode of many sequences: plenty of units);
 * - split: phase 1 computes every (unit, block) partial into scratch,
 *   barrier, phase 2 folds each (token, head) (decode of a few sequences
 *   over long contexts: few units, many blocks). */

/* Stack floats per unit pass: 2 partials per head + the block's scores
 * (ATTN_SCORES_FLOATS, defined with attn_block). */
#define ATTN_STACK_FLOATS 8192

typedef struct attn_args {
    const cpu_op_kernels *k;
    float *out;
    const float *q;
    const tr_kv_layout *kv;
    int32_t layer;
    const tr_batch *b;
    int32_t n_heads, group, hd;
    size_t kv_dim, esize;
    bool f16;
    float scale;
    int32_t window;         /* 0, or this layer's sliding window */
    int32_t heads_per_pass; /* query heads whose partials fit the stack */
    int32_t unit_kv;        /* per-unit schedule: KV heads per unit */

    _Atomic int64_t next;  /* next unit / phase-1 item */
    _Atomic int64_t next2; /* next phase-2 item */
    cpu_pool *pool;
    /* split schedule only */
    float *part;          /* [blocks][n_heads][hd + 2] */
    const int64_t *boff;  /* [n_tokens + 1] first block of each token */
} attn_args;

/* Query heads of one KV head that attn_block computes together (each K
 * and V row is read once for all of them); its scores buffer holds
 * ATTN_HEADS_TOGETHER * CPU_ATTN_BLOCK floats. */
#define ATTN_HEADS_TOGETHER 8
#define ATTN_SCORES_FLOATS (ATTN_HEADS_TOGETHER * CPU_ATTN_BLOCK)

/* Software prefetch of another token's K and V rows (whole rows: every KV
 * head), a few rows before each kernel call of the current token. Decode
 * attention reads each cached row once per step, from DRAM, in runs of
 * one page: the hardware prefetcher restarts at every page, so without
 * this the op takes the time of its arithmetic plus that of its reads
 * (measured on 32 decoding streams: the same op 2-3x faster on a warm
 * cache), and a burst of prefetches up front only moves the wait. */
typedef struct attn_pf {
    int32_t t;        /* token whose rows are requested */
    int32_t first;    /* its first position read (sliding window) */
    int32_t rows;     /* its rows per kind; 0: nothing to request */
    int32_t per_call; /* rows to request per kernel call */
    int32_t next;     /* next row to request: K rows, then V rows */
    size_t col;       /* elements into each row where the request starts */
    size_t bytes;     /* bytes of each row requested (0: the whole row) */
} attn_pf;

static void attn_pf_step(const attn_args *a, attn_pf *pf) {
    const tr_kv_layout *kv = a->kv;
    int32_t ps = kv->page_size;
    const int32_t *pt = a->b->page_table[a->b->seq[pf->t]];
    size_t row_bytes = pf->bytes ? pf->bytes : a->kv_dim * a->esize;
    int32_t stop = TR_MIN(2 * pf->rows, pf->next + pf->per_call);
    for (; pf->next < stop; pf->next++) {
        int c = pf->next >= pf->rows;
        int32_t j = pf->first + pf->next - c * pf->rows;
        const char *row = (const char *)kv->base +
                          (kv_row_offset(kv, a->layer, pt[j / ps], c, j % ps) + pf->col) *
                              a->esize;
        for (size_t o = 0; o < row_bytes; o += 64)
            __builtin_prefetch(row + o, 0, 3);
    }
}

/* The first position a token at p reads. */
static inline int32_t attn_lo(int32_t window, int32_t p) {
    return window > 0 && p >= window ? p - window + 1 : 0;
}

/* Its blocks: first_blk .. p / CPU_ATTN_BLOCK. */
static inline int32_t attn_first_blk(int32_t window, int32_t p) {
    return attn_lo(window, p) / CPU_ATTN_BLOCK;
}

static int32_t attn_blocks(int32_t window, int32_t p) {
    return p / CPU_ATTN_BLOCK - attn_first_blk(window, p) + 1;
}

/* Partials of query heads [h0, h1) of KV head kvh, token t, block blk,
 * into dst[(h - h0) * (hd + 2)]; scores: ATTN_SCORES_FLOATS of scratch.
 * The heads go through the kernels together, up to ATTN_HEADS_TOGETHER at
 * a time; each head's partial is bitwise what it gets alone. */
static void attn_block(const attn_args *a, int32_t t, int32_t kvh,
                       int32_t h0, int32_t h1, int32_t blk, float *dst,
                       float *scores, attn_pf *pf) {
    const tr_kv_layout *kv = a->kv;
    int32_t s = a->b->seq[t], p = a->b->pos[t];
    const int32_t *pt = a->b->page_table[s];
    int32_t ps = kv->page_size, hd = a->hd;
    int32_t j0 = TR_MAX(blk * CPU_ATTN_BLOCK, attn_lo(a->window, p));
    int32_t j1 = TR_MIN((blk + 1) * CPU_ATTN_BLOCK, p + 1);
    int32_t len = j1 - j0;
    const uint8_t *base = kv->base;
    size_t head_off = (size_t)kvh * (size_t)hd;
    size_t pstride = (size_t)hd + 2;

    for (int32_t c0 = h0; c0 < h1; c0 += ATTN_HEADS_TOGETHER) {
        int32_t g = TR_MIN(ATTN_HEADS_TOGETHER, h1 - c0);
        const float *q = a->q + ((int64_t)t * a->n_heads + c0) * hd;
        float *part = dst + (size_t)(c0 - h0) * pstride;
        float m[ATTN_HEADS_TOGETHER], rm[ATTN_HEADS_TOGETHER];
        for (int32_t h = 0; h < g; h++) m[h] = -INFINITY;
        /* Scores, page run by page run (rows of a run are contiguous). */
        for (int32_t j = j0; j < j1;) {
            int32_t end = TR_MIN(j1, (j / ps + 1) * ps);
            size_t off = kv_row_offset(kv, a->layer, pt[j / ps], 0, j % ps) +
                         head_off;
            if (pf) attn_pf_step(a, pf);
            a->k->attn_scores(scores + (j - j0), CPU_ATTN_BLOCK, rm, q, g,
                              base + off * a->esize, a->kv_dim, end - j, hd,
                              a->f16, a->scale);
            for (int32_t h = 0; h < g; h++) m[h] = rm[h] > m[h] ? rm[h] : m[h];
            j = end;
        }
        for (int32_t h = 0; h < g; h++) {
            float *ph = part + (size_t)h * pstride;
            ph[0] = m[h];
            ph[1] = a->k->attn_exp_sum(scores + (size_t)h * CPU_ATTN_BLOCK,
                                       len, m[h]);
            memset(ph + 2, 0, (size_t)hd * sizeof(float));
        }
        for (int32_t j = j0; j < j1;) {
            int32_t end = TR_MIN(j1, (j / ps + 1) * ps);
            size_t off = kv_row_offset(kv, a->layer, pt[j / ps], 1, j % ps) +
                         head_off;
            if (pf) attn_pf_step(a, pf);
            a->k->attn_accum(part + 2, pstride, scores + (j - j0),
                             CPU_ATTN_BLOCK, g, base + off * a->esize,
                             a->kv_dim, end - j, hd, a->f16);
            j = end;
        }
    }
}

/* state = fold(state, p); both [m, l, acc[hd]]. */
static void attn_merge(float *state, const float *p, int32_t hd) {
    float m1 = state[0], m2 = p[0];
    float mx = m1 > m2 ? m1 : m2;
    float ea = expf(m1 - mx), eb = expf(m2 - mx);
    state[0] = mx;
    state[1] = state[1] * ea + p[1] * eb;
    float *acc = state + 2;
    const float *pa = p + 2;
    for (int32_t d = 0; d < hd; d++) acc[d] = acc[d] * ea + pa[d] * eb;
}

static void attn_finish(float *out, const float *state, int32_t hd) {
    float l = state[1];
    for (int32_t d = 0; d < hd; d++) out[d] = state[2 + d] / l;
}

/* One KV head's query heads of token t, all blocks, into the output
 * (buf: ATTN_STACK_FLOATS of scratch; pf: prefetch to spread, or NULL). */
static void attn_unit_head(const attn_args *a, int32_t t, int32_t kvh,
                           float *buf, attn_pf *pf) {
    int32_t hd = a->hd, p = a->b->pos[t];
    int32_t fb = attn_first_blk(a->window, p), lb = p / CPU_ATTN_BLOCK;
    size_t pstride = (size_t)hd + 2;
    for (int32_t h0 = kvh * a->group; h0 < (kvh + 1) * a->group;
         h0 += a->heads_per_pass) {
        int32_t h1 = TR_MIN(h0 + a->heads_per_pass, (kvh + 1) * a->group);
        size_t nh = (size_t)(h1 - h0);
        float *state = buf;
        float *tmp = buf + nh * pstride;
        float *scores = tmp + nh * pstride;
        attn_block(a, t, kvh, h0, h1, fb, state, scores, pf);
        for (int32_t blk = fb + 1; blk <= lb; blk++) {
            attn_block(a, t, kvh, h0, h1, blk, tmp, scores, pf);
            for (size_t i = 0; i < nh; i++)
                attn_merge(state + i * pstride, tmp + i * pstride, hd);
        }
        for (size_t i = 0; i < nh; i++)
            attn_finish(a->out + ((int64_t)t * a->n_heads + h0 + (int64_t)i) *
                                     hd,
                        state + i * pstride, hd);
    }
}

/* Per-unit schedule: units claimed dynamically (their costs differ with
 * the position; which thread runs a unit does not change its result).
 * A unit is unit_kv KV heads of one token. With tokens enough for every
 * thread, it is all of them: a cached row holds the KV heads side by
 * side, so the thread then uses whole rows, and it prefetches the rows of
 * the token it will most likely take next while it computes. */
static void attn_unit_task(void *ctx, int ith, int nth) {
    (void)ith;
    attn_args *a = ctx;
    float buf[ATTN_STACK_FLOATS];
    int32_t per_tok = a->kv->n_kv_heads / a->unit_kv;
    int32_t n_tok = a->b->n_tokens;
    int64_t n_units = (int64_t)n_tok * per_tok;
    for (;;) {
        int64_t u = atomic_fetch_add_explicit(&a->next, 1,
                                              memory_order_relaxed);
        if (u >= n_units) break;
        int32_t t = (int32_t)(u / per_tok);
        int32_t kv0 = (int32_t)(u % per_tok) * a->unit_kv;
        /* Units go out in order, so this thread's next one is most likely
         * nth tokens on (the other threads take those between). A token
         * of the same sequence (prefill) reads the rows this one does:
         * nothing to fetch then. */
        attn_pf pf = {0};
        int32_t tn = t + nth;
        if (per_tok == 1 && tn < n_tok && a->b->seq[tn] != a->b->seq[t]) {
            /* about one kernel call per page run, K and V, per KV head */
            int32_t ps = a->kv->page_size;
            int32_t rows_t = a->b->pos[t] + 1 - attn_lo(a->window, a->b->pos[t]);
            int32_t calls = 2 * a->unit_kv * ((rows_t + ps - 1) / ps + 1);
            pf.t = tn;
            pf.first = attn_lo(a->window, a->b->pos[tn]);
            pf.rows = a->b->pos[tn] + 1 - pf.first;
            pf.per_call = 2 * pf.rows / calls + 1;
        }
        for (int32_t kvh = kv0; kvh < kv0 + a->unit_kv; kvh++)
            attn_unit_head(a, t, kvh, buf, pf.rows ? &pf : NULL);
    }
}

/* Phase-1 item i of the split schedule: token *t (advanced from its
 * current value: items are visited in increasing order), KV head, block. */
static void split_item(const attn_args *a, int64_t i, int32_t *t, int32_t *kvh,
                       int32_t *lb) {
    int32_t n_kv = a->kv->n_kv_heads;
    while (a->boff[*t + 1] * n_kv <= i) (*t)++;
    int64_t local = i - a->boff[*t] * n_kv;
    int32_t nb = (int32_t)(a->boff[*t + 1] - a->boff[*t]);
    *kvh = (int32_t)(local / nb);
    *lb = (int32_t)(local % nb);
}

/* Split schedule. Phase-1 item i: the tokens' items are laid out token by
 * token, (kv head, block) within a token. Items go out in order, so this
 * thread's next one is most likely nth items on: while it computes a
 * block, it prefetches that one's K and V slices (one KV head's columns),
 * as the per-unit schedule does with whole rows. Measured on one stream
 * decoding at ~1,500 positions, where this schedule runs: see
 * docs/performance.md. */
static void attn_split_task(void *ctx, int ith, int nth) {
    (void)ith;
    attn_args *a = ctx;
    float scores[ATTN_SCORES_FLOATS];
    int32_t hd = a->hd;
    int32_t n_tok = a->b->n_tokens;
    size_t pstride = (size_t)hd + 2;
    int64_t n_items = a->boff[n_tok] * a->kv->n_kv_heads;
    int32_t t = 0;
    for (;;) {
        int64_t i = atomic_fetch_add_explicit(&a->next, 1,
                                              memory_order_relaxed);
        if (i >= n_items) break;
        int32_t kvh, lb;
        split_item(a, i, &t, &kvh, &lb);
        int32_t blk = attn_first_blk(a->window, a->b->pos[t]) + lb;
        attn_pf pf = {0};
        if (i + nth < n_items) {
            int32_t tn = t, kn, ln;
            split_item(a, i + nth, &tn, &kn, &ln);
            int32_t pn = a->b->pos[tn];
            int32_t bn = attn_first_blk(a->window, pn) + ln;
            pf.t = tn;
            pf.first = TR_MAX(bn * CPU_ATTN_BLOCK, attn_lo(a->window, pn));
            pf.rows = TR_MIN((bn + 1) * CPU_ATTN_BLOCK, pn + 1) - pf.first;
            int32_t calls = 2 * (CPU_ATTN_BLOCK / a->kv->page_size + 1);
            pf.per_call = 2 * pf.rows / calls + 1;
            pf.col = (size_t)kn * (size_t)hd;
            pf.bytes = (size_t)hd * a->esize;
        }
        int32_t h0 = kvh * a->group;
        float *dst = a->part +
                     ((size_t)(a->boff[t] + lb) * (size_t)a->n_heads +
                      (size_t)h0) * pstride;
        attn_block(a, t, kvh, h0, h0 + a->group, blk, dst, scores, pf.rows ? &pf : NULL);
    }
    tr_cpu_pool_barrier(a->pool);
    int64_t n_out = (int64_t)n_tok * a->n_heads;
    float state[CPU_ATTN_MAX_HEAD_DIM + 2];
    for (;;) {
        int64_t i = atomic_fetch_add_explicit(&a->next2, 1,
                                              memory_order_relaxed);
        if (i >= n_out) break;
        int32_t tt = (int32_t)(i / a->n_heads), h = (int32_t)(i % a->n_heads);
        int64_t b0 = a->boff[tt], b1 = a->boff[tt + 1];
        const float *p0 = a->part + ((size_t)b0 * a->n_heads + h) * pstride;
        memcpy(state, p0, pstride * sizeof(float));
        for (int64_t blk = b0 + 1; blk < b1; blk++)
            attn_merge(state,
                       a->part + ((size_t)blk * a->n_heads + h) * pstride, hd);
        attn_finish(a->out + i * hd, state, hd);
    }
}

void tr_cpu_op_attention(tr_stream *s, float *out, const float *q,
                      const tr_kv_layout *kv, int32_t layer,
                      const tr_batch *b, int32_t n_heads, float scale) {
    cpu_backend *c = cpu_of(s);
    int32_t n_tok = b->n_tokens;
    if (n_tok <= 0) return;
    int32_t n_kv = kv->n_kv_heads, hd = kv->head_dim;
    TR_ASSERT(kv->type == TR_DTYPE_F16 || kv->type == TR_DTYPE_F32);
    TR_ASSERT(layer >= 0 && layer < kv->n_layers && kv->page_size >= 1);
    TR_ASSERT(n_kv >= 1 && n_heads >= n_kv && n_heads % n_kv == 0);
    TR_ASSERT(hd >= 1 && hd <= CPU_ATTN_MAX_HEAD_DIM);
    check_batch_pages(kv, b, true);

    attn_args a = {
        .k = c->k,
        .out = out,
        .q = q,
        .kv = kv,
        .layer = layer,
        .b = b,
        .n_heads = n_heads,
        .group = n_heads / n_kv,
        .hd = hd,
        .kv_dim = (size_t)n_kv * (size_t)hd,
        .esize = kv->type == TR_DTYPE_F16 ? 2 : 4,
        .f16 = kv->type == TR_DTYPE_F16,
        .scale = scale,
        .window = kv->window ? kv->window[layer] : 0,
        .pool = c->pool,
    };
    a.heads_per_pass = (int32_t)((ATTN_STACK_FLOATS - ATTN_SCORES_FLOATS) /
                                 (2 * ((size_t)hd + 2)));
    atomic_init(&a.next, 0);
    atomic_init(&a.next2, 0);

    int64_t blocks = 0, work = 0;
    int32_t max_nb = 0;
    for (int32_t t = 0; t < n_tok; t++) {
        int32_t nb = attn_blocks(a.window, b->pos[t]);
        blocks += nb;
        max_nb = TR_MAX(max_nb, nb);
        work += ((int64_t)b->pos[t] - attn_lo(a.window, b->pos[t]) + 1) * n_heads * hd;
    }
    /* ~8K multiply-adds per thread at least. Decode attention reads its
     * K/V rows from DRAM (the weights streamed since evicted them), so a
     * share takes several times its arithmetic: at 64K (~10 us of
     * arithmetic) one decoding sequence ran its attention on one thread up
     * to position ~113 while the other waited, 14% of a decode step
     * (perf). Measured against 64K, alternating, one stream: 1.057x
     * (bench_model -p 16 -n 256, 6 of 6 rounds) and 1.045x (bench_serve
     * --concurrency 1, 4 of 4). Bigger batches split anyway. */
    int nth = op_threads(c, work, 8192);
    int64_t units = (int64_t)n_tok * n_kv;
    bool split = nth > 1 && max_nb > 1 && units < 4 * (int64_t)nth;
    if (split) {
        size_t part_bytes = (size_t)blocks * (size_t)n_heads *
                            ((size_t)hd + 2) * sizeof(float);
        part_bytes = (part_bytes + 63) & ~(size_t)63; /* boff alignment */
        size_t off_bytes = ((size_t)n_tok + 1) * sizeof(int64_t);
        /* On allocation failure the per-unit schedule gives the same
         * result, just with less parallelism. */
        if (tr_cpu_scratch_reserve(&c->attn, &c->attn_cap,
                                part_bytes + off_bytes)) {
            int64_t *boff = (int64_t *)((uint8_t *)c->attn + part_bytes);
            boff[0] = 0;
            for (int32_t t = 0; t < n_tok; t++)
                boff[t + 1] = boff[t] + attn_blocks(a.window, b->pos[t]);
            a.part = c->attn;
            a.boff = boff;
            tr_cpu_pool_run(c->pool, nth, attn_split_task, &a);
            return;
        }
    }
    /* Whole tokens per unit once there are 4 per thread at least. */
    a.unit_kv = n_tok >= 4 * nth ? n_kv : 1;
    units = (int64_t)n_tok * (n_kv / a.unit_kv);
    tr_cpu_pool_run(c->pool, (int)TR_MIN((int64_t)nth, units), attn_unit_task,
                 &a);
}
