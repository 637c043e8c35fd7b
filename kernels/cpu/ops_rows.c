/* ops_rows.c — the matmul_rows op: a matmul over a list of weight rows
 * (the output projection restricted to the tokens grammar masks allow).
 *
 * Layering: internal to kernels/cpu; called through the tr_backend_ops
 * table (cpu_backend.c) on the backend owner's thread (worker 0).
 *
 * How. The rows are scattered through the matrix, and matmul_tile takes a
 * contiguous row range, so each piece of ROWS_TILE ids copies its weight
 * rows into the thread's packed buffer (an r16 matrix's rows are
 * put back in row order on the way), runs matmul_tile over it (for
 * every token) into a small tile of outputs and scatters those to their
 * ids. matmul_tile's contract makes a value independent of which tile and
 * range its row sits in, so every stored element is bitwise what the full
 * matmul would store there. Copying a row costs about what reading it
 * costs; the op pays off when the ids are a small share of the rows (the
 * model decides).
 */
#include <stdatomic.h>
#include <string.h>

#include "base/util.h"
#include "kernels/cpu/cpu_internal.h"

/* Ids per piece: the quant kernels' widest register tile. */
#define ROWS_TILE 16

typedef struct rows_args {
    const cpu_quant_kernels *qk;
    cpu_pool *pool;
    const tr_weight *w;
    size_t w_row_bytes;
    const float *x;
    int32_t n;
    float *out;
    const int32_t *ids;
    int32_t n_ids;
    uint8_t *xq;         /* [n] activation rows */
    size_t xq_row_bytes;
    uint8_t *scratch;    /* per thread: packed rows, then the output tile */
    size_t packed_bytes; /* ROWS_TILE rows, rounded to 64 */
    size_t per_thread;
    int n_pieces;
    atomic_int next_piece;
} rows_args;

static void rows_piece(const rows_args *a, int k, uint8_t *packed,
                       float *tile) {
    const int32_t j0 = k * ROWS_TILE;
    const int32_t nr = TR_MIN(ROWS_TILE, a->n_ids - j0);
    const uint8_t *w = a->w->data;
    for (int32_t j = 0; j < nr; j++) {
        uint8_t *dst = packed + (size_t)j * a->w_row_bytes;
        if (a->w->layout == TR_CPU_LAYOUT_R16) /* the row's bytes, back in row order */
            tr_cpu_r16_read_blocks(a->w->type, w, a->w->cols, a->ids[j0 + j], 0,
                                   a->w->cols / 32, dst);
        else
            memcpy(dst, w + (size_t)a->ids[j0 + j] * a->w_row_bytes, a->w_row_bytes);
    }
    a->qk->matmul_tile(a->w->type, packed, a->w_row_bytes, a->w->cols, a->xq,
                       a->xq_row_bytes, a->n, tile, ROWS_TILE, 0, nr, false);
    for (int32_t t = 0; t < a->n; t++) {
        float *o = a->out + (size_t)t * (size_t)a->w->rows;
        for (int32_t j = 0; j < nr; j++)
            o[a->ids[j0 + j]] = tile[(size_t)t * ROWS_TILE + (size_t)j];
    }
}

static void rows_task(void *ctx, int ith, int nth) {
    rows_args *a = ctx; /* shared: only next_piece is written */
    int64_t lo, hi;
    tr_cpu_share_rows(a->n, ith, nth, &lo, &hi);
    for (int64_t t = lo; t < hi; t++)
        a->qk->quantize_act_row(a->w->type, a->x + t * a->w->cols,
                                a->xq + (size_t)t * a->xq_row_bytes, a->w->cols);
    tr_cpu_pool_barrier(a->pool);
    uint8_t *packed = a->scratch + (size_t)ith * a->per_thread;
    float *tile = (float *)(packed + a->packed_bytes);
    for (;;) {
        int k = atomic_fetch_add_explicit(&a->next_piece, 1, memory_order_relaxed);
        if (k >= a->n_pieces) break;
        rows_piece(a, k, packed, tile);
    }
}

void tr_cpu_op_matmul_rows(tr_stream *s, float *out, const tr_weight *w,
                           const float *x, int32_t n, const int32_t *ids,
                           int32_t n_ids) {
    cpu_backend *c = cpu_of(s);
    if (n <= 0 || n_ids <= 0) return;
    uint64_t rb = 0;
    bool ok = tr_cpu_quant_supported(w->type, w->cols) &&
              tr_dtype_row_bytes(w->type, (uint64_t)w->cols, &rb);
    TR_ASSERT(ok); /* shapes are checked when the model loads */
    rows_args a = {.qk = c->qk, .pool = c->pool, .w = w,
                   .w_row_bytes = (size_t)rb, .x = x, .n = n, .out = out,
                   .ids = ids, .n_ids = n_ids};
    a.xq_row_bytes = tr_cpu_quant_act_row_bytes(w->type, w->cols);
    a.packed_bytes = (ROWS_TILE * a.w_row_bytes + 63) / 64 * 64;
    a.per_thread = a.packed_bytes +
                   ((size_t)n * ROWS_TILE * sizeof(float) + 63) / 64 * 64;
    a.n_pieces = (n_ids + ROWS_TILE - 1) / ROWS_TILE;
    int nth = tr_cpu_op_threads(c, (int64_t)n * n_ids * w->cols, 131072);
    nth = TR_MIN(nth, a.n_pieces);
    if (!tr_cpu_scratch_reserve(&c->act, &c->act_cap, a.xq_row_bytes * (size_t)n) ||
        !tr_cpu_scratch_reserve(&c->rows, &c->rows_cap, a.per_thread * (size_t)nth)) {
        /* no memory for the scratch: every row, through matmul (its own
         * fallback takes tokens in chunks), stores the same values */
        float *o[1] = {out};
        const tr_weight *ws[1] = {w};
        tr_cpu_op_matmul(s, 1, o, ws, x, n, false);
        return;
    }
    a.xq = c->act;
    a.scratch = c->rows;
    atomic_store_explicit(&a.next_piece, 0, memory_order_relaxed);
    tr_cpu_pool_run(c->pool, nth, rows_task, &a);
}
