/* backend.h — the compute backend interface: a table of operations on
 * device buffers that the model code (runtime/model) is written against
 * once, and that each backend (kernels/cpu now, kernels/cuda later) fills;
 * and the registry that creates a backend by name.
 *
 * Layering: kernels/ knows nothing about requests, tokenizers or the radix
 * tree. It sees weights, activations, a paged KV memory and a batch layout.
 * Nothing here is specific to one backend: each backend's own constructor
 * and knobs are in kernels/<name>/<name>.h, and callers that only want "a
 * backend" go through tr_backend_new (the engine does).
 *
 * ---- Objects ----
 *
 *   tr_backend  one device: its memory, its kernels, its worker threads
 *               (CPU) or its context and cuBLAS handles (CUDA).
 *   tr_stream   an in-order queue of work on one backend. Ops and copies
 *               enqueued on one stream run in call order; work on two
 *               streams may run concurrently (a GPU overlaps a prefill
 *               chunk on one stream with a decode step on another). Every
 *               backend has a default stream (tr_backend_stream); more come
 *               from stream_new.
 *   tr_event    a point in one stream's work: event_record marks it,
 *               stream_wait makes another stream wait for it (on the
 *               device, the host does not block), event_synchronize makes
 *               the host wait for it. An event never recorded counts as
 *               complete; re-recording moves it to the new point.
 *
 *   The CPU backend runs every op and copy synchronously before the call
 *   returns, so its streams are always idle, its events always complete,
 *   and the calls that order them succeed and do nothing. That is exact by
 *   this contract, not a shortcut: every rule below holds trivially when
 *   enqueued work has finished on return.
 *
 * ---- Memory ----
 *
 *   device memory  alloc/free: what ops read and write. Pointers may be
 *                  offset by the host (p + i), never dereferenced by it
 *                  unless the backend's info says host_memory.
 *   host memory    host_alloc/host_free: memory the host reads and writes
 *                  that copies to and from the device run asynchronously
 *                  with (page-locked on a GPU; ordinary memory on the CPU).
 *                  Copies from ordinary host memory are allowed too but may
 *                  block the host until the copy is done.
 *   weights        import_weights: read-only host bytes (the model file)
 *                  made readable by ops: used in place where the device
 *                  reads host memory, else a device copy the caller frees.
 *
 * ---- Who may touch what, when ----
 *
 *   1. An op or copy enqueued on stream s may run at any time until s has
 *      passed it. Until then the host must not write a copy's source
 *      (upload) nor read its destination (download), and must not free
 *      or reuse any device buffer it names. "Passed" means: after
 *      stream_synchronize(s) or synchronize(be) returns, or
 *      event_synchronize(e) returns for an event recorded after it.
 *   2. Device memory written on one stream and read on another needs
 *      event_record on the writer and stream_wait on the reader between
 *      the two; the same for memory freed or reused across streams.
 *   3. Index arrays (ids, pos, rows, a tr_batch and what it points to) and
 *      descriptors (tr_weight, tr_kv_layout) are host memory borrowed for
 *      the duration of the call only: a device backend stages what it
 *      needs before returning, and the host may reuse them at once.
 *   4. free/host_free/stream_free/event_free need the object to be idle
 *      (rule 1); destroy waits for every stream first.
 *
 * ---- Errors ----
 *
 *   Lifetime, memory, stream and event calls return tr_status. Ops return
 *   void: their arguments are checked by the caller (the model checks
 *   shapes and types at load time with `supports`, and each batch before
 *   its forward pass), and a violated precondition is a bug in the caller.
 *   A device fault while running enqueued work (a GPU exception, a lost
 *   device) is reported, as TR_ERR_INTERNAL, by the next synchronize,
 *   stream_synchronize, event_synchronize or download of that backend, and
 *   sticks: the backend can then only be destroyed.
 *
 * ---- Determinism (a contract, tested by test_backend_ops) ----
 *
 *   The value computed for one token row depends only on that row's inputs
 *   (and, for attention, its sequence's KV), never on how many other rows
 *   share the batch, on their content, on the number of threads, or on the
 *   stream. Reductions run in a fixed order per output element. This gives
 *   batch invariance and bit-identical logits whether a prefix was cached
 *   or recomputed. Two backends (or two kernel sets of one) may differ from
 *   each other within each op's error bound (test_backend_ops).
 *
 * ---- Threads ----
 *
 *   A backend, its streams and its events are driven by one thread at a
 *   time (the engine's compute thread). Concurrency comes from streams,
 *   not from host threads. Distinct backends are independent. The
 *   registry functions are thread-safe.
 *
 * ---- Members ----
 *
 *   Every member of tr_backend_ops is required unless marked OPTIONAL:
 *   then it may be NULL and the caller falls back on required members (the
 *   model does; each optional member says how). A backend still being
 *   written may leave required ops NULL (never claim what it does not
 *   do): tr_backend_missing_op names the first, and the model refuses
 *   to load on it, naming the op. Adding an op (a family needs GELU, say):
 *   the member here with its contract, the CPU's portable loop (the
 *   reference) and SIMD loop in kernels/cpu, a check and a grid in
 *   tests/unit/test_backend_ops.c with an error bound argued beside it,
 *   and the name in tr_backend_missing_op unless the op is OPTIONAL.
 *
 * ---- How a CUDA backend fills this ----
 *
 *   stream_new          cudaStreamCreateWithFlags(cudaStreamNonBlocking),
 *                       with the stream's cuBLAS handle and workspace
 *   event_record / stream_wait / event_synchronize
 *                       cudaEventRecord / cudaStreamWaitEvent /
 *                       cudaEventSynchronize (events made with
 *                       cudaEventDisableTiming)
 *   alloc / host_alloc  cudaMalloc / cudaMallocHost
 *   import_weights      cudaMalloc + cudaMemcpy (owned: the copy)
 *   upload / download / copy
 *                       cudaMemcpyAsync on the stream; pinned host memory
 *                       keeps them asynchronous (rule 1 says when the
 *                       host may touch it again)
 *   index arrays        staged through pinned memory on the op's stream
 *                       (rule 3), or cached by content as the CPU caches
 *                       rope angles
 *   ops                 kernels and cuBLAS GEMMs enqueued on the stream;
 *                       a fault surfaces at the next synchronize (Errors)
 *   prefill / decode    two streams; a sequence's first decode step
 *                       waits (stream_wait) for an event recorded after
 *                       the prefill chunk that wrote its pages (rule 2)
 */
#ifndef TR_KERNELS_BACKEND_H
#define TR_KERNELS_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "kernels/dtype.h"

/* C linkage for the CUDA backend's .cu files (compiled as C++). */
#ifdef __cplusplus
extern "C" {
#endif

typedef struct tr_backend tr_backend;
typedef struct tr_stream tr_stream;
typedef struct tr_event tr_event;

/* A weight matrix W of `rows` x `cols`, row-major, each row `cols`
 * elements of `type` (quantized rows are blocks along cols). In GGUF terms
 * ne[0] = cols (input features), ne[1] = rows (output features). */
typedef struct tr_weight {
    const void *data; /* device pointer (borrowed) */
    tr_dtype type;
    int64_t rows;
    int64_t cols;
    /* 0: row-major as above (GGUF's layout). Else the bytes are in a
     * layout private to the backend that made them (prepare_matmul_weights)
     * and only that backend's ops read them. */
    int32_t layout;
} tr_weight;

/* Element formats of cached K and V. A row is one position's K (or V) in
 * one layer: its n_kv_heads heads side by side, each tr_kv_head_bytes:
 *   F32, F16  head_dim floats / halves (F16: rounded to nearest even).
 *   Q8        head_dim int8 q, then one F16 scale d: element i is d * q[i],
 *             d = max|x| / 127 rounded to F16 (up, when to-nearest went
 *             down), q = round(x / d) (to nearest even).
 *   Q4        head_dim / 32 groups of 16 bytes (element i < 16 of a group
 *             in the low nibble of byte i, element 16 + i in its high
 *             nibble), then one F16 scale per group: an element is
 *             d * (nibble - 8), d = -e / 8 rounded to F16 (away from
 *             zero, as Q8's) where e is the group's element of largest
 *             magnitude (the first of equals), nibble = clamp(round(x /
 *             d), -8, 7) + 8 (d may be negative). head_dim a multiple of
 *             32.
 * A dequantized element is exact in F32 (an 11-bit mantissa times an
 * integer of at most 8 bits), so a kernel may stage rows as F32 and read
 * them there with the same result as from the cache. Quantizing is done
 * once, by kv_store, the same way on every kernel set. */
typedef enum tr_kv_type {
    TR_KV_F16 = 0,
    TR_KV_F32 = 1,
    TR_KV_Q8 = 2,
    TR_KV_Q4 = 3,
    TR_KV_TYPE_COUNT
} tr_kv_type;

/* Bumped whenever the bytes of a KV type change meaning (levels, scales,
 * rotations), so that pages saved by another build (the radix cache's
 * disk tier, whose folder is named by a fingerprint that includes this)
 * are never read back as this one's. 2: Q4's uneven levels and rotated
 * values. 3: Q4 keys balanced against the queries by the model
 * (runtime/model/kv_balance.c). */
#define TR_KV_FORMAT_VERSION 3

/* K rows of a quantized type are stored rotated: each block of b
 * consecutive elements of a head multiplied by the orthonormal b x b
 * Walsh-Hadamard matrix H (Sylvester order, scaled by 1/sqrt(b); H is its
 * own inverse) before quantizing, and the attention op rotates the queries
 * the same way, so that every q.k is unchanged in exact arithmetic. Keys
 * carry a few channels far larger than the rest; the rotation spreads them
 * over the block, so a step sized by the largest element costs the others
 * far less. The block is the scale's group: the whole head for Q8 (its
 * largest power-of-two divisor, when head_dim is not a power of two), 32
 * for Q4 (spreading an outlier over the whole head would raise every
 * group's step). Measured on perplexity: docs/performance.md "Quantized
 * KV". Returns b, or 0 when K of type t is stored as is (F16, F32; Q8
 * whose head_dim has no power-of-two divisor of 32 or more). */
static inline int32_t tr_kv_rotation(tr_kv_type t, int32_t head_dim) {
    if (t == TR_KV_Q4) return 32;
    if (t != TR_KV_Q8 || head_dim <= 0) return 0;
    int32_t b = head_dim & -head_dim; /* largest power of two dividing it */
    return b >= 32 ? b : 0;
}

/* V rows of type t are stored rotated the same way over blocks of this
 * many elements (0: as is), and the attention op rotates each output
 * head back (a weighted sum of rotated rows is the rotated weighted sum).
 * Q4 only, over its 32-element groups: halves what 4-bit values cost in
 * perplexity (SmolLM2, values alone: +1.09% -> +0.56%); Q8 values
 * measured no change. */
static inline int32_t tr_kv_v_rotation(tr_kv_type t) {
    return t == TR_KV_Q4 ? 32 : 0;
}

/* Q4's 16 levels in units of its group's scale d: element value =
 * level(nibble) * d, d = -(the group's element of largest magnitude) / 127
 * (so that element is level 0 exactly). Not evenly spaced: the levels are
 * the squared-error optimum (Lloyd's iterations) for groups of 32
 * Gaussian values scaled by their extreme, which is what rotated keys and
 * values look like; 14% less squared error than 16 even steps, and no
 * level at 0. */
static inline int32_t tr_kv_q4_level(int32_t nibble) {
    static const int8_t levels[16] = {-127, -101, -80, -63, -49, -35, -22, -10,
                                      2,    14,   27,  40,  54,  70,  88,  111};
    return levels[nibble & 15];
}

/* Bytes of one head of a row; 0 when the type cannot hold head_dim (Q4:
 * not a multiple of 32) or is unknown. */
static inline size_t tr_kv_head_bytes(tr_kv_type t, int32_t head_dim) {
    size_t hd = head_dim > 0 ? (size_t)head_dim : 0;
    switch (t) {
    case TR_KV_F16: return 2 * hd;
    case TR_KV_F32: return 4 * hd;
    case TR_KV_Q8: return hd ? hd + 2 : 0;
    case TR_KV_Q4: return hd && hd % 32 == 0 ? hd / 2 + hd / 16 : 0;
    default: return 0;
    }
}

/* "f16", "f32", "q8", "q4"; "?" for other values. */
static inline const char *tr_kv_type_name(tr_kv_type t) {
    static const char *const names[] = {"f16", "f32", "q8", "q4"};
    return (unsigned)t < TR_KV_TYPE_COUNT ? names[t] : "?";
}

/* Paged KV memory. Page p holds K and V of page_size consecutive
 * positions for every layer: layer l's part of the page is its page_size
 * K rows, then its page_size V rows, each row tr_kv_row_bytes of its
 * kind; so a layer's K (or V) rows of one page are contiguous. Byte
 * offsets: tr_kv_offset below. */
typedef struct tr_kv_layout {
    void *base;     /* device pointer, n_pages * tr_kv_page_bytes (borrowed) */
    int32_t n_pages;
    int32_t n_layers;
    int32_t page_size; /* tokens per page, >= 1 */
    int32_t n_kv_heads;
    int32_t head_dim;
    tr_kv_type type_k, type_v; /* formats of the K rows and the V rows */
    /* Sliding-window layers: window[l] > 0 means a token at position p
     * attends only to positions p - window[l] + 1 .. p in layer l (the
     * older ones stay in the pages, unread); 0 = every position. NULL: no
     * layer has a window. Host memory, borrowed (the model owns it). */
    const int32_t *window;
    /* Units: with unit_layers > 0, a page holds unit_layers layers (one
     * unit) rather than all of them, layer l at index layer_slot[l] of its
     * unit's pages; a batch then gives each layer the page table of its
     * unit (the model builds those from the engine's tables). This lets
     * the pages of windowed layers be freed apart from the others.
     * unit_layers 0: one unit of every layer (layer_slot unused). Host
     * memory, borrowed. */
    int32_t unit_layers;
    const int32_t *layer_slot;
} tr_kv_layout;

/* Layers per page. */
static inline int32_t tr_kv_page_layers(const tr_kv_layout *kv) {
    return kv->unit_layers > 0 ? kv->unit_layers : kv->n_layers;
}

/* Bytes of one row of kind c (0 = K, 1 = V). */
static inline size_t tr_kv_row_bytes(const tr_kv_layout *kv, int c) {
    return tr_kv_head_bytes(c ? kv->type_v : kv->type_k, kv->head_dim) *
           (size_t)kv->n_kv_heads;
}

/* Bytes of one layer's part of a page, and of a page. */
static inline size_t tr_kv_layer_bytes(const tr_kv_layout *kv) {
    return (size_t)kv->page_size * (tr_kv_row_bytes(kv, 0) + tr_kv_row_bytes(kv, 1));
}
static inline size_t tr_kv_page_bytes(const tr_kv_layout *kv) {
    return (size_t)tr_kv_page_layers(kv) * tr_kv_layer_bytes(kv);
}

/* Byte offset from base of row (page, slot) of kind c of a layer. */
static inline size_t tr_kv_offset(const tr_kv_layout *kv, int32_t layer, int64_t page,
                                  int c, int32_t slot) {
    int32_t at = kv->unit_layers > 0 ? kv->layer_slot[layer] : layer;
    return (size_t)page * tr_kv_page_bytes(kv) + (size_t)at * tr_kv_layer_bytes(kv) +
           (c ? (size_t)kv->page_size * tr_kv_row_bytes(kv, 0) : 0) +
           (size_t)slot * tr_kv_row_bytes(kv, c);
}

/* A ragged batch of tokens from one or more sequences.
 * Token t belongs to sequence seq[t] at position pos[t]. Its K/V is written
 * to page page_table[seq[t]][pos[t] / page_size], slot pos[t] % page_size.
 * It attends causally to positions 0..pos[t] of its own sequence (the
 * positions before this batch must already be in the KV pages; those of
 * this batch are written by kv_store before attention runs).
 * All arrays are host memory (rule 3 above). */
typedef struct tr_batch {
    int32_t n_tokens;
    const int32_t *pos;              /* [n_tokens] */
    const int32_t *seq;              /* [n_tokens] index into the arrays below */
    int32_t n_seqs;
    const int32_t *const *page_table; /* [n_seqs] -> page ids */
    const int32_t *n_pages;          /* [n_seqs] length of each page table */
} tr_batch;

/* What a backend says about itself (get_info). */
typedef struct tr_backend_info {
    const char *name;    /* the registry name: "cpu", "cuda" */
    const char *kernels; /* the kernel set in use: "portable", "avx2",
                            "avx512vnni" (cpu); e.g. "sm_90" (cuda) */
    char device[96];     /* what it runs on, for reports: "x86-64 (2
                            threads)", "NVIDIA H200 (device 0)" */
    int32_t threads;     /* host worker threads the ops use (cpu); 0 */
    int32_t device_index; /* device ordinal (cuda); 0 */
    uint64_t memory_total; /* device memory bytes; 0 = the host's */
    bool host_memory;    /* device pointers are host pointers: the host may
                            dereference them once their stream has passed
                            (rule 1), and ops may read and write any host
                            memory */
    bool async;          /* ops and copies may return before they finish */
} tr_backend_info;

/* The data types a backend computes with, asked at load time. */
typedef enum tr_backend_cap {
    TR_BACKEND_CAP_WEIGHT = 1, /* matmul and embed with weights of type t */
} tr_backend_cap;

typedef struct tr_backend_ops {
    /* ---- identity and lifetime ---- */
    /* Waits for every stream, then frees the backend and its default
     * stream. Streams and events from stream_new/event_new are freed by
     * their creator first. */
    void (*destroy)(tr_backend *be);
    void (*get_info)(const tr_backend *be, tr_backend_info *out);
    bool (*supports)(const tr_backend *be, tr_backend_cap cap, tr_dtype t);
    /* Whether kv_store and attention take KV pages whose K rows are of
     * type k and V rows of type v. */
    bool (*supports_kv)(const tr_backend *be, tr_kv_type k, tr_kv_type v);

    /* ---- streams and events ---- */
    tr_status (*stream_new)(tr_backend *be, tr_stream **out);
    /* Idle streams only (rule 4); never the default stream. NULL: no-op. */
    void (*stream_free)(tr_stream *s);
    /* Host waits until s has passed everything enqueued on it. */
    tr_status (*stream_synchronize)(tr_stream *s);
    tr_status (*event_new)(tr_backend *be, tr_event **out);
    void (*event_free)(tr_event *e);
    /* Marks the current end of s's work. e and s of the same backend,
     * else TR_ERR_INVALID_ARG. */
    tr_status (*event_record)(tr_event *e, tr_stream *s);
    /* Work enqueued on s from now on starts after e's point (the host
     * does not wait). Same-backend rule as event_record. */
    tr_status (*stream_wait)(tr_stream *s, tr_event *e);
    /* Host waits until e's point is passed. */
    tr_status (*event_synchronize)(tr_event *e);
    /* Host waits until every stream of be has passed all its work. */
    tr_status (*synchronize)(tr_backend *be);

    /* ---- memory ---- */
    /* 64-byte aligned device memory; *out untouched on failure. */
    tr_status (*alloc)(tr_backend *be, size_t bytes, void **out);
    void (*free)(tr_backend *be, void *ptr); /* NULL: no-op */
    /* 64-byte aligned host memory for asynchronous copies. */
    tr_status (*host_alloc)(tr_backend *be, size_t bytes, void **out);
    void (*host_free)(tr_backend *be, void *ptr); /* NULL: no-op */
    /* Makes `bytes` of read-only host memory at src readable by ops:
     * *dev receives the pointer ops use, *owned the device copy to free
     * (with free) when done, or NULL when src is used in place (then src
     * must outlive every use). Synchronous: src may change after return
     * when *owned is not NULL. */
    tr_status (*import_weights)(tr_backend *be, const void *src, size_t bytes,
                                const void **dev, void **owned);
    /* Copies enqueued on s (rule 1): host -> device, device -> host,
     * device -> device. bytes == 0 is a no-op. */
    tr_status (*upload)(tr_stream *s, void *dst, const void *src,
                        size_t bytes);
    tr_status (*download)(tr_stream *s, void *dst, const void *src,
                          size_t bytes);
    tr_status (*copy)(tr_stream *s, void *dst, const void *src, size_t bytes);

    /* ---- ops, enqueued on s ----
     * Shapes are given as [rows, cols] row-major, float32 unless noted;
     * all pointers are device pointers. */

    /* out[n, dim] = dequantized rows ids[i] of table[vocab, dim]; an id
     * outside [0, vocab) gives a row of zeros. ids: host. */
    void (*embed)(tr_stream *s, float *out, const tr_weight *table,
                  const int32_t *ids, int32_t n);

    /* out[n, dim] = x / sqrt(mean(x^2) + eps) * w[dim]. out may equal x. */
    void (*rmsnorm)(tr_stream *s, float *out, const float *x, const float *w,
                    int32_t n, int32_t dim, float eps);

    /* For each i < n_mats: out[i][n, w[i]->rows] (+)= x[n, cols] . w[i]^T.
     * All w[i] share cols. x may be quantized once (to the activation
     * format the weight type's integer dot product needs) and reused for
     * every matrix: pass Q, K and V (or gate and up) together. With
     * accumulate, the product is added to out instead of stored (residual
     * add fused). out[i] must not overlap x or each other. */
    void (*matmul)(tr_stream *s, int32_t n_mats, float *const *out,
                   const tr_weight *const *w, const float *x, int32_t n,
                   bool accumulate);

    /* Rotary embedding in place, GGML "normal" mode: pair (2i, 2i+1) of
     * each head rotated by theta_i = pos * r^i, r = base^(-2 / head_dim),
     * with r^i the float running product r * r * ... (i factors, as ggml
     * computes it: positions reach 10^5, where the last bits of theta
     * matter). x[n, n_heads * head_dim]; head_dim even. pos: host. */
    void (*rope)(tr_stream *s, float *x, int32_t n, int32_t n_heads,
                 int32_t head_dim, const int32_t *pos, float freq_base);

    /* Writes k[n, kv_dim], v[n, kv_dim] of the batch's tokens into their
     * pages of layer `layer`, converting to kv->type_k / type_v (the
     * formats above). */
    void (*kv_store)(tr_stream *s, const tr_kv_layout *kv, int32_t layer,
                     const float *k, const float *v, const tr_batch *b);

    /* out[n, n_heads * head_dim] = causal softmax(q k^T * scale) v over each
     * token's sequence, read through its page table; in a sliding-window
     * layer (kv->window) over the window's positions only. n_heads is a
     * multiple of kv->n_kv_heads (grouped-query attention: query head h
     * reads KV head h / (n_heads / n_kv_heads)). */
    void (*attention)(tr_stream *s, float *out, const float *q,
                      const tr_kv_layout *kv, int32_t layer,
                      const tr_batch *b, int32_t n_heads, float scale);

    /* out[i] = silu(gate[i]) * up[i] for i < n. out may equal gate. */
    void (*swiglu)(tr_stream *s, float *out, const float *gate,
                   const float *up, int64_t n);

    /* out[i] += x[i] for i < n. */
    void (*add)(tr_stream *s, float *out, const float *x, int64_t n);

    /* OPTIONAL. out[i, dim] = x[rows[i], dim] for i < n (gather the rows
     * whose logits are wanted); rows: host; out must not overlap x.
     * Without it: one `copy` of dim floats per row. */
    void (*get_rows)(tr_stream *s, float *out, const float *x, int32_t dim,
                     const int32_t *rows, int32_t n);

    /* Rotary embedding in place, GGML "NEOX" mode (Qwen, Gemma): element i
     * of each head pairs with element i + head_dim / 2, rotated by
     * theta_i = freq_scale * pos * base^(-2i / head_dim) (the power as the
     * same float running product as rope; freq_scale: 1 / the linear
     * rope-scaling factor, 1 without scaling). x[n, n_heads * head_dim]. */
    void (*rope_neox)(tr_stream *s, float *x, int32_t n, int32_t n_heads,
                      int32_t head_dim, const int32_t *pos, float freq_base,
                      float freq_scale);

    /* out[i] = gelu(gate[i]) * up[i] for i < n, GELU's tanh form:
     * gelu(x) = x / 2 * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 x^3))).
     * out may equal gate. */
    void (*geglu)(tr_stream *s, float *out, const float *gate,
                  const float *up, int64_t n);

    /* x[n, dim] += b[dim] (every row; a projection's bias). */
    void (*add_bias)(tr_stream *s, float *x, const float *b, int32_t n,
                     int32_t dim);

    /* x[i] *= sc for i < n. */
    void (*scale)(tr_stream *s, float *x, float sc, int64_t n);

    /* x[i] = cap * tanh(x[i] / cap) for i < n (logit soft-capping). */
    void (*softcap)(tr_stream *s, float *x, float cap, int64_t n);

    /* x[n, dim] *= w[dim], element by element (every row times the same
     * vector: per-channel factors of a head, n = tokens x heads). */
    void (*mul_cols)(tr_stream *s, float *x, const float *w, int32_t n,
                     int32_t dim);

    /* OPTIONAL. matmul restricted to some rows of w: for t < n and j <
     * n_ids,
     *   out[t * w->rows + ids[j]] = x[t, cols] . (row ids[j] of w),
     * bitwise what matmul (accumulate false) stores in that element; no
     * other element of out is written. ids: host, distinct, each in
     * [0, w->rows). The model's output projection when grammar masks allow
     * few tokens: it reads those rows of the vocabulary matrix only.
     * Without it: matmul over every row. */
    void (*matmul_rows)(tr_stream *s, float *out, const tr_weight *w,
                        const float *x, int32_t n, const int32_t *ids,
                        int32_t n_ids);

    /* ---- load time ---- */

    /* OPTIONAL. Copies of the n matrices w[i] in a layout this backend's
     * matmul reads faster (the CPU: 16 rows interleaved per block, so a
     * decode step loads a block's quants without transposing them). out[i]
     * describes w[i]'s copy (out[i].layout != 0) or, for a matrix the
     * backend keeps as it is (its type, its shape), *w[i] itself. All the
     * copies live in *owned (free it with `free` once no op uses them;
     * NULL when nothing was copied). A prepared matrix goes to this
     * backend's ops only (matmul, matmul_rows, embed), which compute from
     * it bitwise what they compute from the row-major matrix. Synchronous;
     * the w[i] stay the caller's. copied (may be NULL) is called, on the
     * calling thread before the op returns, with i for each w[i] copied,
     * once the backend will not read w[i]->data again (so a caller can
     * give those bytes back while the rest are copied). NULL: every
     * matrix stays row-major. */
    tr_status (*prepare_matmul_weights)(tr_backend *be, int32_t n,
                                        const tr_weight *const *w,
                                        tr_weight *out, void **owned,
                                        void (*copied)(void *ctx, int32_t i),
                                        void *ctx);
} tr_backend_ops;

/* Every backend object starts with this header, every stream with
 * tr_stream, every event with tr_event (backends extend all three). */
struct tr_backend {
    const tr_backend_ops *ops;
    tr_stream *stream; /* the default stream (owned by the backend) */
};

struct tr_stream {
    tr_backend *be;
};

struct tr_event {
    tr_backend *be;
};

/* be->stream. */
static inline tr_stream *tr_backend_stream(tr_backend *be) {
    return be->stream;
}

/* Destroys be (NULL: no-op). */
static inline void tr_backend_free(tr_backend *be) {
    if (be) be->ops->destroy(be);
}

/* be's info (a shorthand for be->ops->get_info). */
static inline tr_backend_info tr_backend_get_info(const tr_backend *be) {
    tr_backend_info i;
    be->ops->get_info(be, &i);
    return i;
}

/* The first required member of be's table that is NULL, by name
 * ("matmul"), or NULL when every one is there. A backend still being
 * written may leave ops out; whoever runs a model on it asks first (the
 * model's load does, and names the op). */
const char *tr_backend_missing_op(const tr_backend *be);

/* ---- the registry ----
 * Every backend compiled in (cpu always; cuda when built with it) has an
 * entry; `available` says whether it can be created on this machine now
 * (the cuda entry: a device is present and its driver answers). */

/* What tr_backend_new passes on to the backend. Zero means default. */
typedef struct tr_backend_config {
    int32_t threads;     /* host worker threads (cpu); 0 = one per online
                            core */
    const char *kernels; /* a kernel set by name (the entry's
                            kernel_sets); NULL = the best this machine runs
                            (cpu: or $TRELLIS_CPU, see kernels/cpu/cpu.h) */
    int32_t device;      /* device ordinal (cuda) */
} tr_backend_config;

typedef struct tr_backend_reg {
    const char *name;
    /* NULL-terminated; the first is the most portable. */
    const char *const *kernel_sets;
    /* true if a backend can be created here; else false with why (e.g.
     * "no CUDA device") written to why[cap]. */
    bool (*available)(char *why, size_t cap);
    /* true if kernel set `name` runs on this machine; else false with why
     * ("this CPU lacks AVX-512 VNNI"). */
    bool (*kernels_available)(const char *name, char *why, size_t cap);
    /* On failure *out is untouched and diag says why. */
    tr_status (*create)(const tr_backend_config *cfg, tr_backend **out,
                        tr_diag *diag);
} tr_backend_reg;

/* The compiled-in entries, 0 <= i < tr_backend_reg_count(). */
int tr_backend_reg_count(void);
const tr_backend_reg *tr_backend_reg_get(int i);
/* The entry named `name`, or NULL. */
const tr_backend_reg *tr_backend_reg_find(const char *name);

/* Creates backend `name` (NULL = "cpu") with cfg (NULL = defaults).
 * "name:N" (e.g. "cuda:1") is name with cfg->device = N (a bad suffix:
 * TR_ERR_INVALID_ARG).
 * Errors, with diag naming what exists: TR_ERR_NOT_FOUND for a name not
 * compiled in ("unknown backend 'tpu' (built in: cpu, cuda)"),
 * TR_ERR_UNSUPPORTED for one not usable here ("backend 'cuda' is not
 * available: no CUDA device (available: cpu)") or a kernel set this
 * machine lacks, TR_ERR_INVALID_ARG for a bad config value. *out
 * untouched on failure. */
tr_status tr_backend_new(const char *name, const tr_backend_config *cfg,
                         tr_backend **out, tr_diag *diag);

#ifdef __cplusplus
}
#endif

#endif
