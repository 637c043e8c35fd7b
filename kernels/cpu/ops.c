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
 * computes a value depends on the thread count, never *how*. (Attention,
 * in ops_kv.c, is the one op that splits a row's reduction.)
 *
 * Small ops run on the calling thread alone: waking a worker costs more
 * than, e.g., normalizing one 576-wide row.
 */
#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "kernels/cpu/cpu_internal.h"
#include "base/util.h"

int tr_cpu_op_threads(const cpu_backend *c, int64_t work, int64_t min_share) {
    int64_t t = work / min_share;
    if (t < 1) t = 1;
    if (t > c->n_threads) t = c->n_threads;
    return (int)t;
}

void tr_cpu_share_rows(int64_t n, int ith, int nth, int64_t *lo,
                       int64_t *hi) {
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
    tr_cpu_share_rows(blocks, ith, nth, &b0, &b1);
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

static void load_row_portable(float *dst, const void *src, int32_t n,
                              bool f16) {
    if (!f16) {
        memcpy(dst, src, (size_t)n * sizeof(float));
        return;
    }
    const uint16_t *s = src;
    for (int32_t i = 0; i < n; i++) dst[i] = cpu_fp16_to_fp32(s[i]);
}

/* Element d of an F16 row (inline: the generic tr_cpu_kv_elem is a
 * call and a switch per element, which doubled the portable F16
 * attention's time). */
static inline float kv_f16_elem(const uint8_t *r, int32_t d) {
    uint16_t h;
    memcpy(&h, r + 2 * (size_t)d, 2);
    return cpu_fp16_to_fp32(h);
}

/* One head: s[j] = scale * dot(q, k_j). */
static float scores_one_portable(float *s, const float *q, const void *k,
                                 size_t stride, int32_t n, int32_t hd,
                                 tr_kv_type t, float scale) {
    float mx = -INFINITY;
    for (int32_t j = 0; j < n; j++) {
        const uint8_t *r = (const uint8_t *)k + (size_t)j * stride;
        float acc = 0.0f;
        if (t == TR_KV_F32) {
            const float *rf = (const float *)(const void *)r;
            for (int32_t d = 0; d < hd; d++) acc += q[d] * rf[d];
        } else if (t == TR_KV_F16) {
            for (int32_t d = 0; d < hd; d++) acc += q[d] * kv_f16_elem(r, d);
        } else {
            for (int32_t d = 0; d < hd; d++)
                acc += q[d] * tr_cpu_kv_elem(r, d, hd, t);
        }
        s[j] = acc * scale;
        mx = s[j] > mx ? s[j] : mx;
    }
    return mx;
}

void tr_cpu_attn_scores_portable(float *s, size_t s_stride, float *max,
                                 const float *q, int32_t g, const void *k,
                                 size_t stride, int32_t n, int32_t hd,
                                 tr_kv_type t, float scale) {
    for (int32_t h = 0; h < g; h++)
        max[h] = scores_one_portable(s + (size_t)h * s_stride,
                                     q + (size_t)h * (size_t)hd, k, stride, n,
                                     hd, t, scale);
}

void tr_cpu_attn_scores_q8_portable(float *s, size_t s_stride, float *max,
                                    const int16_t *q, const float *qd,
                                    int32_t g, const void *k, size_t stride,
                                    int32_t n, int32_t hd, float scale) {
    for (int32_t h = 0; h < g; h++) {
        const int16_t *qh = q + (size_t)h * (size_t)hd;
        float qs = qd[h] * scale, m = -INFINITY;
        float *sh = s + (size_t)h * s_stride;
        for (int32_t j = 0; j < n; j++) {
            const uint8_t *r = (const uint8_t *)k + (size_t)j * stride;
            int32_t dot = 0; /* CPU_ATTN_Q_LEVELS: no overflow */
            for (int32_t d = 0; d < hd; d++) dot += (int32_t)qh[d] * (int8_t)r[d];
            uint16_t dk;
            memcpy(&dk, r + hd, 2);
            float v = ((float)dot * cpu_fp16_to_fp32(dk)) * qs;
            sh[j] = v;
            m = v > m ? v : m;
        }
        max[h] = m;
    }
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
                                size_t stride, int32_t n, int32_t hd,
                                tr_kv_type t) {
    for (int32_t h = 0; h < g; h++) {
        float *ah = acc + (size_t)h * acc_stride;
        const float *ph = p + (size_t)h * p_stride;
        for (int32_t j = 0; j < n; j++) {
            float w = ph[j];
            const uint8_t *r = (const uint8_t *)v + (size_t)j * stride;
            if (t == TR_KV_F32) {
                const float *rf = (const float *)(const void *)r;
                for (int32_t d = 0; d < hd; d++) ah[d] += w * rf[d];
            } else if (t == TR_KV_F16) {
                for (int32_t d = 0; d < hd; d++) ah[d] += w * kv_f16_elem(r, d);
            } else {
                for (int32_t d = 0; d < hd; d++)
                    ah[d] += w * tr_cpu_kv_elem(r, d, hd, t);
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
    .load_row = load_row_portable,
    .load_heads = tr_cpu_load_heads_portable,
    .attn_scores = tr_cpu_attn_scores_portable,
    .attn_scores_q8 = tr_cpu_attn_scores_q8_portable,
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

/* Row id of an r16 table (a tied output matrix), a few blocks at a time
 * back in GGUF's layout, then dequantized as a row-major row would be. */
static void embed_r16_row(const cpu_backend *c, const tr_weight *table, int32_t id,
                          float *dst) {
    enum { CHUNK_BLOCKS = 64 };
    uint8_t blocks[CHUNK_BLOCKS * 34]; /* the widest r16 block: Q8_0's 34 bytes */
    const int64_t nb = table->cols / 32;
    for (int64_t b0 = 0; b0 < nb; b0 += CHUNK_BLOCKS) {
        const int64_t n = TR_MIN((int64_t)CHUNK_BLOCKS, nb - b0);
        tr_cpu_r16_read_blocks(table->type, table->data, table->cols, id, b0, n, blocks);
        c->qk->dequantize_row(table->type, blocks, dst + b0 * 32, n * 32);
    }
}

static void embed_task(void *ctx, int ith, int nth) {
    const embed_args *a = ctx;
    int64_t lo, hi;
    tr_cpu_share_rows(a->n, ith, nth, &lo, &hi);
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
        if (a->table->layout == TR_CPU_LAYOUT_R16) {
            embed_r16_row(a->c, a->table, id, dst);
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
    tr_cpu_pool_run(c->pool, tr_cpu_op_threads(c, (int64_t)n * table->cols, 16384),
                 embed_task, &a);
}

/* ------------------------------------------------------------------ */
/* matmul                                                              */

/* The matmul splits the union of all matrices' rows into MATMUL_PIECES
 * contiguous pieces per thread, balanced by weight bytes (at decode the op
 * streams the weights once: it is memory-bound), cut at multiples of
 * MATMUL_ROW_ALIGN rows within a matrix (the quant kernels' register tile
 * is 16 rows). Threads take pieces from a shared counter rather than owning
 * a fixed share: when another process preempts one worker (a server's
 * event loop and its clients wake once per streamed token on a machine
 * with as many cores as workers), the others take its pieces instead of
 * idling at the barrier for the whole preemption.
 * Inside a piece a thread walks blocks of MATMUL_ROW_BLOCK rows x
 * MATMUL_TOK_BLOCK tokens so that a block of weights stays in cache while
 * the token rows go by (prefill). The quant kernels' contract makes every
 * output value independent of these blockings. */
#define MATMUL_ROW_ALIGN 16 /* also the r16 layout's row groups */
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
    tr_cpu_share_rows(a->n, ith, nth, &lo, &hi);
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
                (w->layout == TR_CPU_LAYOUT_R16 ? a->qk->matmul_tile_r16
                                                 : a->qk->matmul_tile)(
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
        int nth = tr_cpu_op_threads(c, work, 131072);
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
    tr_cpu_share_rows(a->n, ith, nth, &lo, &hi);
    for (int64_t i = lo; i < hi; i++)
        a->k->rmsnorm_row(a->out + i * a->dim, a->x + i * a->dim, a->w,
                          a->dim, a->eps);
}

void tr_cpu_op_rmsnorm(tr_stream *s, float *out, const float *x,
                    const float *w, int32_t n, int32_t dim, float eps) {
    cpu_backend *c = cpu_of(s);
    if (n <= 0 || dim <= 0) return;
    rmsnorm_args a = {c->k, out, x, w, n, dim, eps};
    int nth = tr_cpu_op_threads(c, (int64_t)n * dim, 8192);
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
    tr_cpu_share_rows(a->n, ith, nth, &lo, &hi);
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
    int nth = tr_cpu_op_threads(c, work, 128);
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
    tr_cpu_pool_run(c->pool, tr_cpu_op_threads(c, n, 8192), swiglu_task, &e);
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
    tr_cpu_pool_run(c->pool, tr_cpu_op_threads(c, n, 65536), add_task, &e);
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
    tr_cpu_pool_run(c->pool, tr_cpu_op_threads(c, n, 8192), geglu_task, &e);
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
    tr_cpu_share_rows(a->n, ith, nth, &lo, &hi);
    for (int64_t t = lo; t < hi; t++) a->k->add(a->x + t * a->dim, a->b, a->dim);
}

/* Runs task over the rows of x[n, dim] with the vector b. */
static void run_rows_with(tr_stream *s, float *x, const float *b, int32_t n, int32_t dim,
                          void (*task)(void *, int, int)) {
    cpu_backend *c = cpu_of(s);
    if (n <= 0 || dim <= 0) return;
    bias_args a = {c->k, x, b, n, dim};
    int nth = tr_cpu_op_threads(c, (int64_t)n * dim, 65536);
    tr_cpu_pool_run(c->pool, TR_MIN(nth, n), task, &a);
}

void tr_cpu_op_add_bias(tr_stream *s, float *x, const float *b, int32_t n,
                        int32_t dim) {
    run_rows_with(s, x, b, n, dim, bias_task);
}

/* x[n, dim] *= w: a plain loop per row (the compiler vectorizes it). */
static void mul_cols_task(void *ctx, int ith, int nth) {
    const bias_args *a = ctx;
    int64_t lo, hi;
    tr_cpu_share_rows(a->n, ith, nth, &lo, &hi);
    for (int64_t t = lo; t < hi; t++) {
        float *x = a->x + t * a->dim;
        for (int32_t i = 0; i < a->dim; i++) x[i] *= a->b[i];
    }
}

void tr_cpu_op_mul_cols(tr_stream *s, float *x, const float *w, int32_t n,
                        int32_t dim) {
    run_rows_with(s, x, w, n, dim, mul_cols_task);
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
