/* ops_kv.c — the CPU backend's ops on the paged KV cache: kv_store and
 * attention (its schedules; the inner loops are the kernel table's
 * attn_scores, attn_exp_sum and attn_accum, portable in ops.c and AVX2 in
 * ops_avx2.c).
 *
 * Layering: internal to kernels/cpu; called through the tr_backend_ops table
 * built in cpu_backend.c, on the backend owner's thread (worker 0).
 *
 * Determinism (backend.h): attention is the one op that splits a row's
 * reduction (long contexts at decode); it does so along fixed 64-position
 * blocks that depend only on the token's position, and always folds the
 * blocks in the same order (see CPU_ATTN_BLOCK), whatever the schedule.
 */
#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "kernels/cpu/cpu_internal.h"
#include "base/util.h"

/* ------------------------------------------------------------------ */
/* kv_store and attention: paged KV addressing                         */

/* Row (page, slot) of kind c (0 = K, 1 = V) of a layer, per the layout in
 * backend.h. */
static inline uint8_t *kv_row(const tr_kv_layout *kv, int32_t layer,
                              int64_t page, int c, int32_t slot) {
    return (uint8_t *)kv->base + tr_kv_offset(kv, layer, page, c, slot);
}

static inline tr_kv_type kv_type_of(const tr_kv_layout *kv, int c) {
    return c ? kv->type_v : kv->type_k;
}

/* Checks (once per op, on the calling thread) that every page a token
 * reads or writes exists: the scheduler builds batches, so a violation is
 * a bug upstream, and it would otherwise corrupt memory. */
static void check_batch_pages(const tr_kv_layout *kv, const tr_batch *b,
                              bool all_positions, int32_t window) {
    /* Pages already checked for the previous token's sequence: a prefill
     * chunk's tokens are adjacent, so each page is checked about once. */
    int32_t last_s = -1, checked = 0;
    for (int32_t t = 0; t < b->n_tokens; t++) {
        int32_t s = b->seq[t], p = b->pos[t];
        TR_ASSERT(s >= 0 && s < b->n_seqs && p >= 0);
        int32_t last = p / kv->page_size;
        TR_ASSERT(last < b->n_pages[s]);
        if (s != last_s) checked = 0;
        int32_t reach = window > 0 && p - window + 1 > 0 ? (p - window + 1) / kv->page_size : 0;
        int32_t first = all_positions ? TR_MAX(checked, reach) : last;
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
    int32_t hd = kv->head_dim, kv_dim = kv->n_kv_heads * hd;
    int64_t lo, hi;
    tr_cpu_share_rows(a->b->n_tokens, ith, nth, &lo, &hi);
    for (int64_t t = lo; t < hi; t++) {
        int32_t s = a->b->seq[t], p = a->b->pos[t];
        int64_t page = a->b->page_table[s][p / kv->page_size];
        int32_t slot = p % kv->page_size;
        for (int c = 0; c < 2; c++) {
            uint8_t *row = kv_row(kv, a->layer, page, c, slot);
            const float *src = a->src[c] + t * kv_dim;
            tr_kv_type ty = kv_type_of(kv, c);
            if (ty == TR_KV_F16 || ty == TR_KV_F32) {
                a->k->store_row(row, src, kv_dim, ty == TR_KV_F16);
                continue;
            }
            size_t hb = tr_kv_head_bytes(ty, hd);
            int32_t rot = c == 0 ? tr_kv_rotation(ty, hd) : tr_kv_v_rotation(ty);
            float tmp[CPU_ATTN_MAX_HEAD_DIM];
            for (int32_t h = 0; h < kv->n_kv_heads; h++) {
                const float *x = src + (size_t)h * hd;
                if (rot) {
                    memcpy(tmp, x, (size_t)hd * sizeof(float));
                    tr_cpu_kv_rotate(tmp, hd, rot);
                    x = tmp;
                }
                tr_cpu_kv_quantize_head(row + (size_t)h * hb, x, hd, ty);
            }
        }
    }
}

void tr_cpu_op_kv_store(tr_stream *s, const tr_kv_layout *kv, int32_t layer,
                     const float *k, const float *v, const tr_batch *b) {
    cpu_backend *c = cpu_of(s);
    if (b->n_tokens <= 0) return;
    TR_ASSERT(tr_kv_row_bytes(kv, 0) > 0 && tr_kv_row_bytes(kv, 1) > 0);
    TR_ASSERT(layer >= 0 && layer < kv->n_layers && kv->page_size >= 1);
    check_batch_pages(kv, b, false, 0);
    kv_store_args a = {c->k, kv, layer, {k, v}, b};
    int64_t work = (int64_t)b->n_tokens * kv->n_kv_heads * kv->head_dim;
    tr_cpu_pool_run(c->pool, TR_MIN(tr_cpu_op_threads(c, work, 16384), b->n_tokens),
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
 *   (prefill, or decode of many sequences: plenty of units); adjacent
 *   tokens of one sequence (a prefill chunk) go as a tile, which reads
 *   each block of their common context once for all of them (attn_tile);
 * - split: phase 1 computes every (tile, block) partial of all KV heads
 *   into scratch (a tile: one token, or a run of a sequence's adjacent
 *   tokens, which share each block's read), barrier, phase 2 folds each
 *   (token, head) (decode of a few sequences, or a short question, over a
 *   long context: few units, many blocks; on one thread too, for the
 *   prefetching and whole-row reads of its blocks). */

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
    size_t kv_dim;           /* elements of a row (staged F32 rows) */
    tr_kv_type type[2];      /* K, V */
    size_t head_bytes[2], row_bytes[2];
    /* the layer's rows, precomputed (tr_kv_offset derives these sizes on
     * every call): row (page, slot) of kind c is at page * page_bytes +
     * kind_off[c] + slot * row_bytes[c] from kv->base */
    size_t page_bytes, kind_off[2];
    int32_t rotate_v;        /* V's rotation block (tr_kv_v_rotation): each
                                output head is rotated back; 0 */
    int32_t rotate_q;        /* K's rotation block (tr_kv_rotation) when q
                                still has to be rotated (per block); 0 */
    /* Q8 keys: the queries rotated and quantized once per op
     * (tr_cpu_kv_quantize_query), [n_tokens][n_heads][hd] levels and
     * [n_tokens][n_heads] steps; NULL: attn_queries makes them per block */
    const int16_t *q8;
    const float *q8_step;
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
    const int64_t *toff;  /* [n_tiles + 1] first item of each tile */
    /* per-unit schedule: tiles of tokens (see attn_tile) */
    int32_t n_tiles;
    const int32_t *tile;  /* [n_tiles + 1] first token of each; NULL: one
                             token per tile */
    float *ws;            /* tile work space, ws_floats per thread */
    size_t ws_floats;
} attn_args;

/* Row (page, slot) of kind c of the op's layer: kv_row without
 * re-deriving the layout's sizes. */
static inline const uint8_t *attn_row(const attn_args *a, int64_t page, int c,
                                      int32_t slot) {
    return (const uint8_t *)a->kv->base + (size_t)page * a->page_bytes + a->kind_off[c] +
           (size_t)slot * a->row_bytes[c];
}

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
} attn_pf;

/* Requests the next per_call rows, a page run at a time (a run's rows are
 * contiguous), into L2 rather than L1: the rows requested while one block
 * computes are the next block's (~50 KB for SmolLM2), more than L1 holds
 * beside the block being read, so into L1 they pushed that block out
 * (measured: decode at 512 positions 5-8% faster, 1 and 2 threads). */
static void attn_pf_step(const attn_args *a, attn_pf *pf) {
    const tr_kv_layout *kv = a->kv;
    int32_t ps = kv->page_size;
    const int32_t *pt = a->b->page_table[a->b->seq[pf->t]];
    int32_t stop = TR_MIN(2 * pf->rows, pf->next + pf->per_call);
    while (pf->next < stop) {
        int c = pf->next >= pf->rows;
        int32_t j = pf->first + pf->next - c * pf->rows;
        int32_t n = TR_MIN(TR_MIN(stop, (c + 1) * pf->rows) - pf->next, ps - j % ps);
        const char *row = (const char *)attn_row(a, pt[j / ps], c, j % ps);
        for (size_t o = 0; o < (size_t)n * a->row_bytes[c]; o += 64)
            __builtin_prefetch(row + o, 0, 2);
        pf->next += n;
    }
}

/* Requests rows [from, to) of kind c (0 K, 1 V) of token t's sequence,
 * heads h0 .. h0 + nh - 1 of each, as far as its pages go. The rows of a
 * page are contiguous but pages lie far apart, so the hardware prefetcher
 * starts over at each page: reading page by page, request the next one
 * (attn_stage; measured on a 43-token suffix over ~1,593 cached
 * positions, 30 layers, 1 thread, with and without: 119-143 vs 124-193
 * ms in 3 rounds each, on a busy machine). */
static void attn_prefetch_rows(const attn_args *a, int32_t t, int c,
                               int32_t from, int32_t to, int32_t h0,
                               int32_t nh) {
    const tr_kv_layout *kv = a->kv;
    int32_t s = a->b->seq[t], ps = kv->page_size;
    const int32_t *pt = a->b->page_table[s];
    to = TR_MIN(to, a->b->n_pages[s] * ps);
    size_t bytes = (size_t)nh * a->head_bytes[c];
    for (int32_t j = from; j < to; j++) {
        const char *row = (const char *)attn_row(a, pt[j / ps], c, j % ps) +
                          (size_t)h0 * a->head_bytes[c];
        for (size_t o = 0; o < bytes; o += 64) __builtin_prefetch(row + o, 0, 3);
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

/* A block's K and V slices of one KV head staged as F32 rows of hd
 * floats, positions [base, ...) (the tile schedule); attn_block reads the
 * paged cache instead when given none. */
typedef struct attn_rows {
    const float *k, *v; /* k NULL: keys read from the cache (Q8) */
    size_t stride; /* floats from one row to the next */
    int32_t base;
} attn_rows;

/* Heads c0 .. c0 + g - 1 of token t's query in the keys' form: rotated
 * into their basis where keys are stored rotated (backend.h), and for Q8
 * keys quantized as well. The op makes these once (attn_rotate_queries,
 * attn_quantize_queries); where it could not have the scratch, they are
 * made here, per block, into buf: the same function of the same values,
 * so the same bits. */
typedef struct attn_query {
    const float *f;      /* F32 heads (keys of the other types) */
    const int16_t *lv;   /* Q8 keys: levels, NULL otherwise */
    const float *step;   /* and one step per head */
} attn_query;

typedef struct attn_qbuf {
    float f[ATTN_HEADS_TOGETHER * CPU_ATTN_MAX_HEAD_DIM];
    int16_t lv[ATTN_HEADS_TOGETHER * CPU_ATTN_MAX_HEAD_DIM];
    float step[ATTN_HEADS_TOGETHER];
} attn_qbuf;

static attn_query attn_queries(const attn_args *a, int32_t t, int32_t c0,
                               int32_t g, attn_qbuf *buf) {
    int32_t hd = a->hd;
    size_t head = (size_t)t * (size_t)a->n_heads + (size_t)c0;
    attn_query r = {a->q + head * (size_t)hd, NULL, NULL};
    if (a->type[0] != TR_KV_Q8) {
        if (a->rotate_q) {
            memcpy(buf->f, r.f, (size_t)g * (size_t)hd * sizeof(float));
            tr_cpu_kv_rotate(buf->f, g * hd, a->rotate_q);
            r.f = buf->f;
        }
        return r;
    }
    if (a->q8) {
        r.lv = a->q8 + head * (size_t)hd;
        r.step = a->q8_step + head;
        return r;
    }
    for (int32_t h = 0; h < g; h++) {
        const float *src = r.f + (size_t)h * (size_t)hd;
        if (a->rotate_q) {
            memcpy(buf->f, src, (size_t)hd * sizeof(float));
            tr_cpu_kv_rotate(buf->f, hd, a->rotate_q);
            src = buf->f;
        }
        buf->step[h] = tr_cpu_kv_quantize_query(buf->lv + (size_t)h * (size_t)hd, src, hd);
    }
    r.lv = buf->lv;
    r.step = buf->step;
    return r;
}

/* Whether K is staged as F32 for tiles: Q8 keys stay int8 (attn_scores_q8
 * reads them from the cache, a block's slice small enough for L1). */
static inline bool attn_k_staged(const attn_args *a) {
    return a->type[0] != TR_KV_Q8;
}

/* Scores of heads c0 .. c0 + g - 1 (query qq) of token t against KV head
 * kvh's keys j0 .. j1 - 1, into scores; their maxima into m. */
static void attn_block_scores(const attn_args *a, int32_t t, int32_t kvh,
                              const attn_query *qq, int32_t g, int32_t j0,
                              int32_t j1, float *scores, float *m,
                              attn_pf *pf, const attn_rows *rows) {
    const int32_t *pt = a->b->page_table[a->b->seq[t]];
    int32_t ps = a->kv->page_size, hd = a->hd;
    float rm[ATTN_HEADS_TOGETHER];
    for (int32_t h = 0; h < g; h++) m[h] = -INFINITY;
    bool staged = rows && rows->k;
    if (staged)
        a->k->attn_scores(scores, CPU_ATTN_BLOCK, m, qq->f, g,
                          rows->k + (size_t)(j0 - rows->base) * rows->stride,
                          rows->stride * sizeof(float), j1 - j0, hd,
                          TR_KV_F32, a->scale);
    /* Page run by page run (rows of a run are contiguous). */
    for (int32_t j = staged ? j1 : j0; j < j1;) {
        int32_t end = TR_MIN(j1, (j / ps + 1) * ps);
        const uint8_t *row = attn_row(a, pt[j / ps], 0, j % ps) +
                             (size_t)kvh * a->head_bytes[0];
        if (pf) attn_pf_step(a, pf);
        if (qq->lv)
            a->k->attn_scores_q8(scores + (j - j0), CPU_ATTN_BLOCK, rm, qq->lv,
                                 qq->step, g, row, a->row_bytes[0], end - j,
                                 hd, a->scale);
        else
            a->k->attn_scores(scores + (j - j0), CPU_ATTN_BLOCK, rm, qq->f, g,
                              row, a->row_bytes[0], end - j, hd, a->type[0],
                              a->scale);
        for (int32_t h = 0; h < g; h++) m[h] = rm[h] > m[h] ? rm[h] : m[h];
        j = end;
    }
}

/* Partials of query heads [h0, h1) of KV head kvh, token t, block blk,
 * into dst[(h - h0) * (hd + 2)]; scores: ATTN_SCORES_FLOATS of scratch.
 * The heads go through the kernels together, up to ATTN_HEADS_TOGETHER at
 * a time; each head's partial is bitwise what it gets alone. K and V come
 * from rows where staged (the F16 -> F32 conversion is exact, and a row's
 * score and fma chain do not depend on how the rows are cut into kernel
 * calls, so the partial is bitwise the same), else from the cache. */
static void attn_block(const attn_args *a, int32_t t, int32_t kvh,
                       int32_t h0, int32_t h1, int32_t blk, float *dst,
                       float *scores, attn_pf *pf, const attn_rows *rows) {
    int32_t s = a->b->seq[t], p = a->b->pos[t];
    const int32_t *pt = a->b->page_table[s];
    int32_t ps = a->kv->page_size, hd = a->hd;
    int32_t j0 = TR_MAX(blk * CPU_ATTN_BLOCK, attn_lo(a->window, p));
    int32_t j1 = TR_MIN((blk + 1) * CPU_ATTN_BLOCK, p + 1);
    int32_t len = j1 - j0;
    size_t pstride = (size_t)hd + 2;

    for (int32_t c0 = h0; c0 < h1; c0 += ATTN_HEADS_TOGETHER) {
        int32_t g = TR_MIN(ATTN_HEADS_TOGETHER, h1 - c0);
        attn_qbuf qbuf;
        attn_query qq = attn_queries(a, t, c0, g, &qbuf);
        float *part = dst + (size_t)(c0 - h0) * pstride;
        float m[ATTN_HEADS_TOGETHER];
        attn_block_scores(a, t, kvh, &qq, g, j0, j1, scores, m, pf, rows);
        for (int32_t h = 0; h < g; h++) {
            float *ph = part + (size_t)h * pstride;
            ph[0] = m[h];
            ph[1] = a->k->attn_exp_sum(scores + (size_t)h * CPU_ATTN_BLOCK,
                                       len, m[h]);
            memset(ph + 2, 0, (size_t)hd * sizeof(float));
        }
        if (rows)
            a->k->attn_accum(part + 2, pstride, scores, CPU_ATTN_BLOCK, g,
                             rows->v + (size_t)(j0 - rows->base) * rows->stride,
                             rows->stride * sizeof(float),
                             len, hd, TR_KV_F32);
        for (int32_t j = rows ? j1 : j0; j < j1;) {
            int32_t end = TR_MIN(j1, (j / ps + 1) * ps);
            const uint8_t *row = attn_row(a, pt[j / ps], 1, j % ps) +
                                 (size_t)kvh * a->head_bytes[1];
            if (pf) attn_pf_step(a, pf);
            a->k->attn_accum(part + 2, pstride, scores + (j - j0),
                             CPU_ATTN_BLOCK, g, row, a->row_bytes[1], end - j,
                             hd, a->type[1]);
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

/* out = acc / l, rotated back over blocks of vrot when V is stored
 * rotated (backend.h's tr_kv_v_rotation; 0: none): a weighted sum of
 * rotated rows is the rotated weighted sum. */
static void attn_finish(float *out, const float *state, int32_t hd, int32_t vrot) {
    float l = state[1];
    for (int32_t d = 0; d < hd; d++) out[d] = state[2 + d] / l;
    if (vrot) tr_cpu_kv_rotate(out, hd, vrot);
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
        attn_block(a, t, kvh, h0, h1, fb, state, scores, pf, NULL);
        for (int32_t blk = fb + 1; blk <= lb; blk++) {
            attn_block(a, t, kvh, h0, h1, blk, tmp, scores, pf, NULL);
            for (size_t i = 0; i < nh; i++)
                attn_merge(state + i * pstride, tmp + i * pstride, hd);
        }
        for (size_t i = 0; i < nh; i++)
            attn_finish(a->out + ((int64_t)t * a->n_heads + h0 + (int64_t)i) *
                                     hd,
                        state + i * pstride, hd, a->rotate_v);
    }
}

/* Most tokens per tile. Each tile reads the K/V of its sequence's whole
 * context once: the more tokens share that read, the less it costs per
 * token (few-shot suffix prefill, 43 tokens over ~1,550 cached positions,
 * 1 thread, TTFT p50: one token at a time 293-304 ms, tiles of 8 249-282,
 * of 16 228-252, of 32 219-228). */
#define ATTN_TILE_TOKENS 32

/* Work space floats of a tile (attn_tile), per thread, 64-byte multiple. */
static size_t attn_tile_floats(int32_t group, int32_t hd) {
    size_t n = 2 * (size_t)CPU_ATTN_BLOCK * (size_t)hd + ATTN_SCORES_FLOATS +
               (1 + ATTN_TILE_TOKENS) * (size_t)group * ((size_t)hd + 2);
    return (n + 15) & ~(size_t)15;
}

static inline int32_t tile_first(const attn_args *a, int32_t i) {
    return a->tile ? a->tile[i] : i;
}

/* nh heads of a cached row of kind c as F32 (exact). */
static void kv_load(const attn_args *a, int c, float *dst, const uint8_t *src,
                    int32_t nh) {
    tr_kv_type t = a->type[c];
    if (t == TR_KV_F16 || t == TR_KV_F32)
        a->k->load_row(dst, src, nh * a->hd, t == TR_KV_F16);
    else
        a->k->load_heads(dst, src, nh, a->hd, t);
}

/* Stages positions [from, to) of token t's sequence as F32 rows (exact
 * conversion): heads h0 .. h0 + nh - 1 of each cached row into kbuf and
 * vbuf, nh * hd floats per row (one KV head's slice, or whole rows);
 * kbuf NULL: values only. */
static void attn_stage(const attn_args *a, int32_t t, int32_t h0, int32_t nh,
                       int32_t from, int32_t to, float *kbuf, float *vbuf) {
    const tr_kv_layout *kv = a->kv;
    const int32_t *pt = a->b->page_table[a->b->seq[t]];
    int32_t ps = kv->page_size;
    size_t width = (size_t)nh * (size_t)a->hd;
    for (int32_t j = from; j < to; j++) {
        size_t r = (size_t)(j - from) * width;
        /* a page ahead, a row at a time: the requests spread over the
         * conversions instead of queueing up in a burst */
        attn_prefetch_rows(a, t, 0, j + ps, j + ps + 1, h0, nh);
        attn_prefetch_rows(a, t, 1, j + ps, j + ps + 1, h0, nh);
        for (int c = !kbuf; c < 2; c++)
            kv_load(a, c, (c ? vbuf : kbuf) + r,
                    attn_row(a, pt[j / ps], c, j % ps) +
                        (size_t)h0 * a->head_bytes[c],
                    nh);
    }
}

/* Tile schedule: tokens t0 .. t0 + nt - 1 of one sequence (a prefill
 * chunk; nt <= ATTN_TILE_TOKENS), KV head kvh. Each block's K and V
 * slices are staged once and then read from L1/L2 by every token of the
 * tile that attends to the block, where one token at a time reads them
 * from the cache, converting each element once per token. Per token, the
 * blocks, kernels and fold order are attn_unit_head's, so every output is
 * bitwise what the token gets alone. ws: attn_tile_floats of scratch. */
static void attn_tile(const attn_args *a, int32_t t0, int32_t nt,
                      int32_t kvh, float *ws) {
    int32_t hd = a->hd, g = a->group, h0 = kvh * a->group;
    size_t pstride = (size_t)hd + 2, hstride = (size_t)g * pstride;
    float *kbuf = ws, *vbuf = kbuf + (size_t)CPU_ATTN_BLOCK * hd;
    float *scores = vbuf + (size_t)CPU_ATTN_BLOCK * hd;
    float *tmp = scores + ATTN_SCORES_FLOATS;
    float *state = tmp + hstride; /* [nt][g][hd + 2] */
    const int32_t *pos = a->b->pos + t0;
    int32_t b0 = INT32_MAX, b1 = 0, lo = INT32_MAX, hi = 0;
    for (int32_t i = 0; i < nt; i++) {
        b0 = TR_MIN(b0, attn_first_blk(a->window, pos[i]));
        b1 = TR_MAX(b1, pos[i] / CPU_ATTN_BLOCK);
        lo = TR_MIN(lo, attn_lo(a->window, pos[i]));
        hi = TR_MAX(hi, pos[i] + 1);
    }
    for (int32_t blk = b0; blk <= b1; blk++) {
        float *kb = attn_k_staged(a) ? kbuf : NULL;
        attn_rows rows = {kb, vbuf, (size_t)hd, TR_MAX(blk * CPU_ATTN_BLOCK, lo)};
        attn_stage(a, t0, kvh, 1, rows.base,
                   TR_MIN((blk + 1) * CPU_ATTN_BLOCK, hi), kb, vbuf);
        for (int32_t i = 0; i < nt; i++) {
            int32_t fb = attn_first_blk(a->window, pos[i]);
            if (blk < fb || blk > pos[i] / CPU_ATTN_BLOCK) continue;
            float *st = state + (size_t)i * hstride;
            attn_block(a, t0 + i, kvh, h0, h0 + g, blk, blk == fb ? st : tmp,
                       scores, NULL, &rows);
            if (blk != fb)
                for (int32_t h = 0; h < g; h++)
                    attn_merge(st + (size_t)h * pstride,
                               tmp + (size_t)h * pstride, hd);
        }
    }
    for (int32_t i = 0; i < nt; i++)
        for (int32_t h = 0; h < g; h++)
            attn_finish(a->out + ((int64_t)(t0 + i) * a->n_heads + h0 + h) * hd,
                        state + (size_t)i * hstride + (size_t)h * pstride, hd, a->rotate_v);
}

/* Per-unit schedule: units claimed dynamically (their costs differ with
 * the position; which thread runs a unit does not change its result).
 * A unit is unit_kv KV heads of one token. With tokens enough for every
 * thread, it is all of them: a cached row holds the KV heads side by
 * side, so the thread then uses whole rows, and it prefetches the rows of
 * the token it will most likely take next while it computes. */
static void attn_unit_task(void *ctx, int ith, int nth) {
    attn_args *a = ctx;
    float buf[ATTN_STACK_FLOATS];
    int32_t per_tile = a->kv->n_kv_heads / a->unit_kv;
    int64_t n_units = (int64_t)a->n_tiles * per_tile;
    for (;;) {
        int64_t u = atomic_fetch_add_explicit(&a->next, 1,
                                              memory_order_relaxed);
        if (u >= n_units) break;
        int32_t ti = (int32_t)(u / per_tile);
        int32_t kv0 = (int32_t)(u % per_tile) * a->unit_kv;
        int32_t t = tile_first(a, ti), nt = tile_first(a, ti + 1) - t;
        if (nt > 1) {
            for (int32_t kvh = kv0; kvh < kv0 + a->unit_kv; kvh++)
                attn_tile(a, t, nt, kvh, a->ws + (size_t)ith * a->ws_floats);
            continue;
        }
        /* Units go out in order, so this thread's next one is most likely
         * nth tiles on (the other threads take those between). A token
         * of the same sequence reads the rows this one does: nothing to
         * fetch then. */
        attn_pf pf = {0};
        int32_t tn = ti + nth < a->n_tiles ? tile_first(a, ti + nth) : -1;
        if (per_tile == 1 && tn >= 0 && a->b->seq[tn] != a->b->seq[t]) {
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

/* A tile's blocks: *b0 .. *b1, the union of its tokens'. */
static void tile_blocks(const attn_args *a, int32_t ti, int32_t *b0,
                        int32_t *b1) {
    *b0 = INT32_MAX, *b1 = 0;
    for (int32_t t = tile_first(a, ti); t < tile_first(a, ti + 1); t++) {
        *b0 = TR_MIN(*b0, attn_first_blk(a->window, a->b->pos[t]));
        *b1 = TR_MAX(*b1, a->b->pos[t] / CPU_ATTN_BLOCK);
    }
}

/* Phase-1 item i of the split schedule: tile *ti (advanced from its
 * current value: items are visited in increasing order) and its block
 * *blk. */
static void split_item(const attn_args *a, int64_t i, int32_t *ti,
                       int32_t *blk) {
    while (a->toff[*ti + 1] <= i) (*ti)++;
    int32_t b0, b1;
    tile_blocks(a, *ti, &b0, &b1);
    *blk = b0 + (int32_t)(i - a->toff[*ti]);
}

/* Token t's partials of block blk, every head. */
static float *split_part(const attn_args *a, int32_t t, int32_t blk) {
    int64_t i = a->boff[t] + blk - attn_first_blk(a->window, a->b->pos[t]);
    return a->part + (size_t)i * (size_t)a->n_heads * ((size_t)a->hd + 2);
}

/* Block blk of the tokens of tile ti, every KV head, into their partials.
 * One token reads the cache (prefetching pf's rows meanwhile); more stage
 * the block's whole rows as F32 once (ws) and read them from there, each
 * token the blocks it attends to (bitwise as from the cache, attn_block). */
static void split_tile_block(const attn_args *a, int32_t ti, int32_t blk,
                             float *ws, float *scores, attn_pf *pf) {
    int32_t t0 = tile_first(a, ti), t1 = tile_first(a, ti + 1);
    int32_t hd = a->hd, g = a->group, n_kv = a->kv->n_kv_heads;
    size_t pstride = (size_t)hd + 2;
    bool staged = t1 - t0 > 1;
    float *kbuf = ws, *vbuf = NULL;
    int32_t from = 0;
    if (staged) {
        vbuf = ws + (size_t)CPU_ATTN_BLOCK * a->kv_dim;
        int32_t lo = INT32_MAX, hi = 0;
        for (int32_t t = t0; t < t1; t++) {
            lo = TR_MIN(lo, attn_lo(a->window, a->b->pos[t]));
            hi = TR_MAX(hi, a->b->pos[t] + 1);
        }
        from = TR_MAX(blk * CPU_ATTN_BLOCK, lo);
        attn_stage(a, t0, 0, n_kv, from,
                   TR_MIN((blk + 1) * CPU_ATTN_BLOCK, hi),
                   attn_k_staged(a) ? kbuf : NULL, vbuf);
    }
    for (int32_t t = t0; t < t1; t++) {
        int32_t p = a->b->pos[t];
        if (blk < attn_first_blk(a->window, p) || blk > p / CPU_ATTN_BLOCK)
            continue;
        float *dst = split_part(a, t, blk);
        for (int32_t kvh = 0; kvh < n_kv; kvh++) {
            attn_rows rows = {0};
            if (staged)
                rows = (attn_rows){attn_k_staged(a) ? kbuf + (size_t)kvh * hd : NULL,
                                   vbuf + (size_t)kvh * hd, a->kv_dim, from};
            attn_block(a, t, kvh, kvh * g, (kvh + 1) * g, blk,
                       dst + (size_t)kvh * g * pstride, scores,
                       staged ? NULL : pf, staged ? &rows : NULL);
        }
    }
}

/* Split schedule. Phase-1 item i is one block of one tile (a token, or a
 * run of adjacent tokens of a sequence: a prefill chunk), for every KV
 * head: a block's cached rows hold the KV heads side by side, so an item
 * reads whole rows, page run by page run, and a tile's tokens share that
 * read. Items go out in order, so this thread's next one is most likely
 * nth items on: while a one-token item computes, it prefetches that one's
 * rows (a staged tile prefetches its own, a page ahead). */
static void attn_split_task(void *ctx, int ith, int nth) {
    attn_args *a = ctx;
    float scores[ATTN_SCORES_FLOATS];
    int32_t hd = a->hd, n_kv = a->kv->n_kv_heads;
    size_t pstride = (size_t)hd + 2;
    int64_t n_items = a->toff[a->n_tiles];
    float *ws = a->ws ? a->ws + (size_t)ith * a->ws_floats : NULL;
    int32_t ti = 0;
    for (;;) {
        int64_t i = atomic_fetch_add_explicit(&a->next, 1,
                                              memory_order_relaxed);
        if (i >= n_items) break;
        int32_t blk;
        split_item(a, i, &ti, &blk);
        attn_pf pf = {0};
        int32_t tn = ti, bn;
        if (i + nth < n_items) split_item(a, i + nth, &tn, &bn);
        if (i + nth < n_items && tile_first(a, tn + 1) - tile_first(a, tn) == 1) {
            int32_t t = tile_first(a, tn), pn = a->b->pos[t];
            pf.t = t;
            pf.first = TR_MAX(bn * CPU_ATTN_BLOCK, attn_lo(a->window, pn));
            pf.rows = TR_MIN((bn + 1) * CPU_ATTN_BLOCK, pn + 1) - pf.first;
            int32_t calls =
                2 * n_kv * (CPU_ATTN_BLOCK / a->kv->page_size + 1);
            pf.per_call = 2 * pf.rows / calls + 1;
        }
        split_tile_block(a, ti, blk, ws, scores, pf.rows ? &pf : NULL);
    }
    tr_cpu_pool_barrier(a->pool);
    int32_t n_tok = a->b->n_tokens;
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
        attn_finish(a->out + i * hd, state, hd, a->rotate_v);
    }
}

typedef struct rotate_args {
    float *q;
    int64_t rows;     /* tokens */
    int32_t row_len;  /* n_heads * hd */
    int32_t block;
} rotate_args;

static void rotate_task(void *ctx, int ith, int nth) {
    const rotate_args *r = ctx;
    int64_t lo, hi;
    tr_cpu_share_rows(r->rows, ith, nth, &lo, &hi);
    for (int64_t t = lo; t < hi; t++)
        tr_cpu_kv_rotate(r->q + t * r->row_len, r->row_len, r->block);
}

/* The batch's queries rotated into the keys' basis (backend.h,
 * tr_kv_rotation) once, in scratch: *q then points there. Returns false
 * when the scratch cannot be had (attn_block then rotates per block). */
static bool attn_rotate_queries(cpu_backend *c, const float **q, int32_t n_tok,
                                int32_t n_heads, int32_t hd, int32_t block) {
    size_t n = (size_t)n_tok * (size_t)n_heads * (size_t)hd;
    if (!tr_cpu_scratch_reserve(&c->attn_q, &c->attn_q_cap, n * sizeof(float))) return false;
    memcpy(c->attn_q, *q, n * sizeof(float));
    rotate_args r = {c->attn_q, n_tok, n_heads * hd, block};
    int nth = tr_cpu_op_threads(c, (int64_t)n * 8, 65536);
    tr_cpu_pool_run(c->pool, TR_MIN(nth, n_tok), rotate_task, &r);
    *q = c->attn_q;
    return true;
}

typedef struct quantize_args {
    const float *q;
    int16_t *q8;
    float *step;
    int64_t rows;     /* tokens */
    int32_t n_heads, hd, block;
} quantize_args;

static void quantize_task(void *ctx, int ith, int nth) {
    const quantize_args *r = ctx;
    float head[CPU_ATTN_MAX_HEAD_DIM];
    int64_t lo, hi;
    tr_cpu_share_rows(r->rows, ith, nth, &lo, &hi);
    for (int64_t i = lo * r->n_heads; i < hi * r->n_heads; i++) {
        const float *src = r->q + i * r->hd;
        if (r->block) {
            memcpy(head, src, (size_t)r->hd * sizeof(float));
            tr_cpu_kv_rotate(head, r->hd, r->block);
            src = head;
        }
        r->step[i] = tr_cpu_kv_quantize_query(r->q8 + i * r->hd, src, r->hd);
    }
}

/* For Q8 keys: the batch's queries rotated into the keys' basis (block:
 * tr_kv_rotation, 0 none) and quantized (tr_cpu_kv_quantize_query) once,
 * in scratch, into a->q8 and a->q8_step. Returns false when the scratch
 * cannot be had (attn_queries then does it per block). */
static bool attn_quantize_queries(cpu_backend *c, attn_args *a,
                                  int32_t n_tok, int32_t block) {
    size_t heads = (size_t)n_tok * (size_t)a->n_heads;
    size_t lv = (heads * (size_t)a->hd * sizeof(int16_t) + 63) & ~(size_t)63;
    if (!tr_cpu_scratch_reserve(&c->attn_q, &c->attn_q_cap, lv + heads * sizeof(float)))
        return false;
    quantize_args r = {a->q, (int16_t *)c->attn_q, (float *)(void *)((uint8_t *)c->attn_q + lv),
                       n_tok, a->n_heads, a->hd, block};
    int nth = tr_cpu_op_threads(c, (int64_t)(heads * (size_t)a->hd) * 8, 65536);
    tr_cpu_pool_run(c->pool, TR_MIN(nth, n_tok), quantize_task, &r);
    a->q8 = r.q8;
    a->q8_step = r.step;
    return true;
}

/* Whether no two adjacent tokens of the batch belong to one sequence
 * (a decode step: no tiles form). */
static bool attn_decode_only(const tr_batch *b) {
    for (int32_t t = 1; t < b->n_tokens; t++)
        if (b->seq[t] == b->seq[t - 1]) return false;
    return true;
}

/* End of the run of adjacent tokens of token t's sequence. */
static int32_t attn_run_end(const tr_batch *b, int32_t t) {
    int32_t e = t + 1;
    while (e < b->n_tokens && b->seq[e] == b->seq[t]) e++;
    return e;
}

/* Cuts the batch into tiles: each run of adjacent tokens of one sequence
 * into the fewest tiles of at most ATTN_TILE_TOKENS, at least min_k (as
 * far as its tokens go), of equal sizes (+-1) so that they cost alike;
 * writes the first token of each into tile (when not NULL); returns their
 * count. */
static int32_t attn_cut_tiles(const tr_batch *b, int32_t min_k,
                              int32_t *tile) {
    int32_t n = 0;
    for (int32_t t = 0, e; t < b->n_tokens; t = e) {
        e = attn_run_end(b, t);
        int32_t len = e - t;
        int32_t k = (len + ATTN_TILE_TOKENS - 1) / ATTN_TILE_TOKENS;
        k = TR_MIN(len, TR_MAX(k, min_k));
        for (int32_t i = 0; i < k; i++, n++)
            if (tile) tile[n] = t + (int32_t)((int64_t)i * len / k);
    }
    if (tile) tile[n] = b->n_tokens;
    return n;
}

/* Tiles per run of the per-unit schedule, at least: enough for 2 units
 * (tile, KV head) per thread (a 14-token question on 3 KV heads and 2
 * threads: 2 tiles, 6 units, not 1 tile whose 3 units leave a thread idle
 * a third of the time). */
static int32_t unit_min_tiles(int32_t n_kv, int nth) {
    return (2 * nth + n_kv - 1) / n_kv;
}

/* The tiles of the per-unit schedule. A batch without two adjacent tokens
 * of a sequence (decode), or whose work space cannot be had, keeps one
 * token per tile: the same result, only slower. */
static void attn_make_tiles(cpu_backend *c, attn_args *a, int nth) {
    int32_t n_kv = a->kv->n_kv_heads;
    int32_t min_k = unit_min_tiles(n_kv, nth);
    int32_t n_tiles = attn_cut_tiles(a->b, min_k, NULL);
    a->n_tiles = a->b->n_tokens;
    a->tile = NULL;
    if (n_tiles == a->b->n_tokens) return;
    a->ws_floats = attn_tile_floats(a->group, a->hd);
    size_t ws_bytes = (size_t)nth * a->ws_floats * sizeof(float);
    size_t tile_bytes = ((size_t)n_tiles + 1) * sizeof(int32_t);
    if (!tr_cpu_scratch_reserve(&c->attn, &c->attn_cap, ws_bytes + tile_bytes))
        return;
    a->ws = c->attn;
    int32_t *tile = (int32_t *)((uint8_t *)c->attn + ws_bytes);
    a->n_tiles = attn_cut_tiles(a->b, min_k, tile);
    a->tile = tile;
}

static size_t align64(size_t n) { return (n + 63) & ~(size_t)63; }

/* The split schedule's scratch: partials of every (token, block), the
 * token and tile offsets, the tiles (runs of a sequence's adjacent tokens,
 * ATTN_TILE_TOKENS at most, as few as possible: each reads the context
 * once) and, when a tile has more than one token, staging space per
 * thread. Returns false when the memory cannot be had. */
static bool attn_split_setup(cpu_backend *c, attn_args *a, int nth,
                             int64_t blocks) {
    const tr_batch *b = a->b;
    int32_t n_tok = b->n_tokens;
    int32_t n_tiles = attn_cut_tiles(b, 1, NULL);
    bool tiled = n_tiles < n_tok;
    size_t part_bytes = align64((size_t)blocks * (size_t)a->n_heads *
                                ((size_t)a->hd + 2) * sizeof(float));
    size_t boff_bytes = align64(((size_t)n_tok + 1) * sizeof(int64_t));
    size_t toff_bytes = align64(((size_t)n_tiles + 1) * sizeof(int64_t));
    size_t tile_bytes =
        tiled ? align64(((size_t)n_tiles + 1) * sizeof(int32_t)) : 0;
    a->ws_floats = tiled ? 2 * (size_t)CPU_ATTN_BLOCK * a->kv_dim : 0;
    size_t ws_bytes = align64((size_t)nth * a->ws_floats * sizeof(float));
    if (!tr_cpu_scratch_reserve(&c->attn, &c->attn_cap,
                                part_bytes + boff_bytes + toff_bytes +
                                    tile_bytes + ws_bytes))
        return false;
    uint8_t *m = c->attn;
    a->part = (float *)m;
    int64_t *boff = (int64_t *)(m += part_bytes);
    int64_t *toff = (int64_t *)(m += boff_bytes);
    int32_t *tile = (int32_t *)(m += toff_bytes);
    a->ws = tiled ? (float *)(m + tile_bytes) : NULL;
    boff[0] = 0;
    for (int32_t t = 0; t < n_tok; t++)
        boff[t + 1] = boff[t] + attn_blocks(a->window, b->pos[t]);
    a->boff = boff;
    a->n_tiles = n_tiles;
    a->tile = tiled ? tile : NULL;
    if (tiled) attn_cut_tiles(b, 1, tile);
    toff[0] = 0;
    for (int32_t ti = 0; ti < n_tiles; ti++) {
        int32_t b0, b1;
        tile_blocks(a, ti, &b0, &b1);
        toff[ti + 1] = toff[ti] + (b1 - b0 + 1);
    }
    a->toff = toff;
    return true;
}

void tr_cpu_op_attention(tr_stream *s, float *out, const float *q,
                      const tr_kv_layout *kv, int32_t layer,
                      const tr_batch *b, int32_t n_heads, float scale) {
    cpu_backend *c = cpu_of(s);
    int32_t n_tok = b->n_tokens;
    if (n_tok <= 0) return;
    int32_t n_kv = kv->n_kv_heads, hd = kv->head_dim;
    TR_ASSERT(tr_kv_row_bytes(kv, 0) > 0 && tr_kv_row_bytes(kv, 1) > 0);
    TR_ASSERT(layer >= 0 && layer < kv->n_layers && kv->page_size >= 1);
    TR_ASSERT(n_kv >= 1 && n_heads >= n_kv && n_heads % n_kv == 0);
    TR_ASSERT(hd >= 1 && hd <= CPU_ATTN_MAX_HEAD_DIM);
    check_batch_pages(kv, b, true, kv->window ? kv->window[layer] : 0);
    int32_t rot = tr_kv_rotation(kv->type_k, hd);
    if (rot && kv->type_k != TR_KV_Q8 &&
        attn_rotate_queries(c, &q, n_tok, n_heads, hd, rot))
        rot = 0;

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
        .type = {kv->type_k, kv->type_v},
        .head_bytes = {tr_kv_head_bytes(kv->type_k, hd), tr_kv_head_bytes(kv->type_v, hd)},
        .row_bytes = {tr_kv_row_bytes(kv, 0), tr_kv_row_bytes(kv, 1)},
        .page_bytes = tr_kv_page_bytes(kv),
        .kind_off = {tr_kv_offset(kv, layer, 0, 0, 0), tr_kv_offset(kv, layer, 0, 1, 0)},
        .rotate_q = rot,
        .rotate_v = tr_kv_v_rotation(kv->type_v),
        .scale = scale,
        .window = kv->window ? kv->window[layer] : 0,
        .pool = c->pool,
    };
    if (kv->type_k == TR_KV_Q8 && attn_quantize_queries(c, &a, n_tok, rot))
        a.rotate_q = 0;
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
    int nth = tr_cpu_op_threads(c, work, 8192);
    int64_t units =
        (int64_t)attn_cut_tiles(b, unit_min_tiles(n_kv, nth), NULL) * n_kv;
    /* Split when the per-unit schedule's units are too few to share out
     * (a question after a cached prompt: its tiles each read the whole
     * context, one KV head's slice of each row), and for a decode batch
     * of fewer tokens than 4 per thread: the per-unit schedule would
     * then give a unit one KV head and prefetch nothing, and the cached
     * rows come from DRAM (one stream at ~1,600 positions, 30 layers, KV
     * cold: 19-20 ms per step on one thread, 8-10 ms split; on two
     * threads 6.8-10.2 vs 5.9-8.4 ms, 4 alternating rounds, a noisy
     * machine). On allocation failure the per-unit schedule gives the
     * same result, just with less parallelism. */
    bool split = max_nb > 1 &&
                 (units < 4 * (int64_t)nth ||
                  (n_tok < 4 * nth && attn_decode_only(b)));
    if (split && attn_split_setup(c, &a, nth, blocks)) {
        tr_cpu_pool_run(c->pool, nth, attn_split_task, &a);
        return;
    }
    attn_make_tiles(c, &a, nth);
    /* Whole tiles per unit once there are 4 per thread at least. */
    a.unit_kv = a.n_tiles >= 4 * nth ? n_kv : 1;
    units = (int64_t)a.n_tiles * (n_kv / a.unit_kv);
    tr_cpu_pool_run(c->pool, (int)TR_MIN((int64_t)nth, units), attn_unit_task,
                 &a);
}
