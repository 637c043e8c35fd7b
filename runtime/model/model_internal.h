/* model_internal.h — what the files of runtime/model share: the model
 * object, the architecture table's entry type, the GGUF hyper-parameter
 * and weight-binding helpers, and the shared blocks an architecture's
 * forward pass is written with.
 *
 * Layering: internal to runtime/model (model.c, hparams.c, weights.c,
 * blocks.c, arch.c, arch_<family>.c); -> kernels (backend), runtime/gguf.
 *
 * Adding a family: write runtime/model/arch_<family>.c defining one
 * `const tr_model_arch tr_model_arch_<family>` (its hyper-parameter
 * loader, weight binder and forward pass), declare it below and list it in
 * arch.c. Nothing outside runtime/model changes: the engine, the radix
 * cache and the grammar see only token ids, logits and KV pages.
 *
 * Shapes: n = tokens in the batch, dim = embedding width, q_dim = n_heads *
 * head_dim, kv_dim = n_kv_heads * head_dim, ffn = feed-forward width.
 * Matrices are [rows, cols] row-major ([out features, in features]).
 *
 * Threads: as model.h (one thread drives a model at a time).
 */
#ifndef TR_MODEL_INTERNAL_H
#define TR_MODEL_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/backend.h"
#include "runtime/model/model.h"

/* The attention sub-layer's weights (GGUF blk.<l>.attn_*). The optional
 * ones are NULL when the family (or the file) has none. */
typedef struct tr_attn_weights {
    const float *norm; /* [dim] pre-attention RMSNorm */
    tr_weight wq;      /* [q_dim, dim] */
    tr_weight wk;      /* [kv_dim, dim] */
    tr_weight wv;      /* [kv_dim, dim] */
    tr_weight wo;      /* [dim, q_dim] */
    const float *bq, *bk, *bv; /* [q_dim], [kv_dim] x 2: biases (qwen2) */
    const float *q_norm;    /* [head_dim] per-head RMSNorm of Q (qwen3, gemma3) */
    const float *k_norm;    /* [head_dim] of K */
    /* the two norms with Q4 keys balanced against the queries
     * (kv_balance.c): used instead when the layout's K type is Q4; NULL
     * without q_norm */
    const float *q_norm_q4k, *k_norm_q4k;
    /* families without q_norm, when the layout's K type is Q4
     * (kv_center.c): after the rope, K += k_center_neg ([kv_dim], minus
     * the keys' mean), then K *= k_scale_q4k and Q *= q_scale_q4k ([head_dim]
     * each, every head); NULL: not calibrated */
    const float *k_center_neg, *k_scale_q4k, *q_scale_q4k;
    const float *post_norm; /* [dim] RMSNorm of the output before the
                               residual add (gemma3 post_attention_norm) */
} tr_attn_weights;

/* The gated feed-forward sub-layer's weights (GGUF blk.<l>.ffn_*). */
typedef struct tr_ffn_weights {
    const float *norm; /* [dim] pre-FFN RMSNorm */
    tr_weight gate;    /* [ffn, dim] */
    tr_weight up;      /* [ffn, dim] */
    tr_weight down;    /* [dim, ffn] */
    const float *post_norm; /* [dim] optional (gemma3 post_ffw_norm) */
} tr_ffn_weights;

/* One transformer layer: the union of what the families use (a family
 * leaves alone what it does not have). */
typedef struct tr_layer_weights {
    tr_attn_weights attn;
    tr_ffn_weights ffn;
} tr_layer_weights;

typedef struct tr_fwd tr_fwd;

/* An architecture: GGUF `general.architecture` name and how to load and
 * run it. */
typedef struct tr_model_arch {
    const char *name;
    /* Reads the family's hyper-parameters into hp (arch and n_vocab are
     * already set) and checks what only this family knows; model.c checks
     * the generic bounds afterwards (tr_model_hp_check). Errors name the
     * GGUF key. */
    tr_status (*load_hparams)(const gguf_file *f, model_hparams *hp,
                              tr_diag *diag);
    /* OPTIONAL (NULL: every layer global): fills window[n_layers] (zeroed)
     * with each layer's sliding window, after the generic checks. */
    tr_status (*load_windows)(const gguf_file *f, const model_hparams *hp,
                              int32_t *window, tr_diag *diag);
    /* Binds every layer's tensors into m->layers (token_embd, output_norm
     * and output are already bound). */
    tr_status (*bind_layers)(model *m, tr_diag *diag);
    /* The forward pass over f's batch, logits included (blocks below). */
    tr_status (*forward)(tr_fwd *f);
} tr_model_arch;

/* The families (arch_<family>.c). */
extern const tr_model_arch tr_model_arch_llama;
extern const tr_model_arch tr_model_arch_qwen2;
extern const tr_model_arch tr_model_arch_qwen3;
extern const tr_model_arch tr_model_arch_gemma3;

/* The table (arch.c): the entry for `name`, or NULL. */
const tr_model_arch *tr_model_arch_find(const char *name);
/* Writes "llama, ..." (every supported name, for error messages; cut
 * short if cap is too small) into buf and returns buf. */
const char *tr_model_arch_list(char *buf, size_t cap);

struct model {
    model_hparams hp;
    const tr_model_arch *arch;
    tr_backend *be;           /* borrowed */
    bool host_memory;         /* be's info.host_memory */
    const gguf_file *file;    /* borrowed */
    tr_weight tok_embd;       /* [vocab, dim] */
    const float *out_norm;    /* [dim] */
    tr_weight output;         /* [vocab, dim], may alias tok_embd */
    tr_layer_weights *layers; /* [n_layers] */
    int32_t *window;          /* [n_layers] sliding window, 0 = global;
                                 tr_kv_layout.window points here */
    /* KV units when windowed layers' pages are freed apart (kv_units.c):
     * kv_layer_unit NULL = never split */
    tr_kv_units kv_split;
    int32_t *kv_layer_unit;   /* [n_layers] */
    int32_t *kv_layer_slot;   /* [n_layers]; tr_kv_layout.layer_slot */
    int32_t *unit_ids;        /* forward scratch: per-unit page tables */
    size_t unit_ids_cap;
    const int32_t **unit_ptrs;
    size_t unit_ptrs_cap;
    tr_batch unit_b[TR_MODEL_MAX_KV_UNITS];
    const float *output_bias; /* [vocab] optional (qwen2 output.bias) */
    void **device_copies;     /* weights the backend copied (import_weights) */
    int n_device_copies;
    float *balanced_norms;    /* host bytes of the q_norm_q4k / k_norm_q4k
                                 vectors (a host backend reads them here) */
    float *q4k_calibration;   /* host bytes of k_center_neg, k_scale_q4k and
                                 q_scale_q4k of every layer */
    uint64_t kv_fingerprint;  /* tr_model_kv_fingerprint */
    gguf_file *owned_file;    /* file (the same as `file`) whose copied tensors'
                                 bytes may be given back (tr_model_load_owning);
                                 NULL: f is only borrowed */
    uint64_t weight_bytes;

    /* scratch on the backend, sized for max_batch tokens */
    int32_t max_batch;
    float *x;      /* [n, dim] residual stream */
    float *xb;     /* [n, dim] normed input of a sub-layer */
    float *q;      /* [n, q_dim] */
    float *k;      /* [n, kv_dim] */
    float *v;      /* [n, kv_dim] */
    float *att;    /* [n, q_dim] attention output before wo */
    float *hg;     /* [n, ffn] gate, then act(gate) * up */
    float *hu;     /* [n, ffn] up */
    float *xsel;   /* [n, dim] rows whose logits are wanted */
    float *logits; /* [n, vocab] on the device (NULL with host memory) */

    /* host scratch of the masked output projection (blocks.c) */
    uint64_t *mask_union; /* [(vocab + 63) / 64] */
    int32_t *mask_ids;    /* [vocab / MODEL_SPARSE_LOGITS_SHARE] */
};

/* The output projection reads only the rows the logit rows' masks allow
 * when they are at most 1 / this share of the vocabulary (blocks.c). */
#define MODEL_SPARSE_LOGITS_SHARE 8

/* One forward call: the batch and where its ops go. */
struct tr_fwd {
    model *m;
    tr_stream *st;            /* where the forward's ops are enqueued */
    const tr_backend_ops *op; /* m->be->ops */
    const tr_kv_layout *kv;
    const tr_batch *b;
    const tr_batch *unit_b;   /* per-unit batches (kv_units.c) or NULL */
    const int32_t *tokens;    /* [n] */
    int32_t n;                /* tokens in the batch */
    const int32_t *logit_rows; /* [n_logits] batch rows whose logits... */
    int32_t n_logits;
    float *logits;            /* ...go here: host [n_logits, vocab] */
    const tr_logit_masks *masks; /* may be NULL (model.h) */
};

/* ---- KV units (kv_units.c) ---- */
/* Cuts the layers into units at load (after the windows are known). */
tr_status tr_model_kv_units_init(model *m);
int32_t tr_model_kv_n_units(const model *m, const tr_kv_layout *kv);
/* Every id a batch's tokens read or write is a page of kv. */
tr_status tr_model_check_tables(const model *m, const tr_kv_layout *kv,
                                const tr_batch *b);
/* The batch of each unit (*out NULL with one unit); scratch in m. */
tr_status tr_model_unit_batches(model *m, const tr_kv_layout *kv, const tr_batch *b,
                                const tr_batch **out);
/* The batch layer l's kv_store and attention take. */
const tr_batch *tr_fwd_layer_batch(const tr_fwd *f, int32_t layer);

/* ---- hyper-parameters (hparams.c) ----
 * Keys are "<arch>.<suffix>". A missing required key is TR_ERR_NOT_FOUND
 * naming it; a key of the wrong type is TR_ERR_FORMAT naming it; a
 * missing optional key leaves *out as it was (the default). */
tr_status tr_model_hp_u32(const gguf_file *f, const char *arch,
                          const char *suffix, uint32_t *out, bool required,
                          tr_diag *diag);
tr_status tr_model_hp_f32(const gguf_file *f, const char *arch,
                          const char *suffix, float *out, bool required,
                          tr_diag *diag);
/* The keys every llama-like family shares: block_count,
 * embedding_length, attention.head_count, feed_forward_length (required);
 * attention.head_count_kv (default: head_count), context_length (4096),
 * attention.layer_norm_rms_epsilon (1e-5), rope.freq_base (10000). */
tr_status tr_model_hp_read_common(const gguf_file *f, model_hparams *hp,
                                  tr_diag *diag);
/* Bounds every family must meet (layers, widths, head counts dividing,
 * an even head_dim the attention kernels take, context): TR_ERR_FORMAT or
 * TR_ERR_UNSUPPORTED naming the values. */
tr_status tr_model_hp_check(const model_hparams *hp, tr_diag *diag);

/* ---- weights (weights.c) ----
 * Bind tensor `name` of shape [rows, cols] (GGUF ne = {cols, rows}):
 * checks presence, shape and a computable type (errors name the tensor),
 * makes it readable by the backend and counts its bytes. */
tr_status tr_model_bind(model *m, const char *name, int64_t rows,
                        int64_t cols, tr_weight *w, tr_diag *diag);
/* An F32 vector of n elements (a norm's weight). */
tr_status tr_model_bind_norm(model *m, const char *name, int64_t n,
                             const float **out, tr_diag *diag);
/* blk.<l>.<suffix>.weight (or .bias) of n F32 elements into *out; absent:
 * *out = NULL when !required, else TR_ERR_NOT_FOUND naming it. */
tr_status tr_model_bind_layer_vec(model *m, int32_t l, const char *suffix,
                                  int64_t n, bool required, const float **out,
                                  tr_diag *diag);
/* Host bytes made readable by the backend's ops (import_weights): *out
 * is where they are read; a device copy is freed with the model, host
 * bytes read in place must outlive it. */
tr_status tr_model_import(model *m, const void *host, size_t bytes,
                          const void **out);
/* After bind_layers: the backend's prepare_matmul_weights over every
 * layer matrix and the output matrix (each tr_weight replaced by what it
 * returns, a tied token table with the output; the copies freed with the
 * model). A backend without it: nothing. */
tr_status tr_model_prepare_matmuls(model *m, tr_diag *diag);
/* The standard GGUF names of layer l: attn_norm, attn_q, attn_k, attn_v,
 * attn_output. */
tr_status tr_model_bind_attn(model *m, int32_t l, tr_attn_weights *w,
                             tr_diag *diag);
/* ffn_norm, ffn_gate, ffn_up, ffn_down. */
tr_status tr_model_bind_ffn(model *m, int32_t l, tr_ffn_weights *w,
                            tr_diag *diag);

/* ---- Q4 keys balanced against queries (kv_balance.c) ----
 * After bind_layers (before prepare_matmuls: it reads W_q, W_k as bound,
 * through the backend's embed op), for every layer with per-head Q/K norms
 * (qwen3, gemma3, both NEOX-roped): copies of the two norms' weights with
 * key channel c multiplied by a_c and query channel c divided by it (q.k
 * unchanged), into attn.q_norm_q4k / k_norm_q4k. a_c = sqrt(|q_c| /
 * |k_c|) over the RoPE pair (c, c + head_dim / 2), clipped to [1/8, 8]; 1
 * where a size is 0; the sizes estimated from the file's F32 norms and the
 * rows of W_q, W_k weighted by attn_norm. Layers without those norms:
 * nothing (the pointers stay NULL). */
tr_status tr_model_balance_q4_keys(model *m, tr_diag *diag);
/* a[head_dim]: the Q4 key factors of layer l of a family without per-head
 * norms (kv_balance.c), one per pair of channels the rope turns together
 * (neox: (i, i + head_dim/2), else (2i, 2i+1)), in [1/8, 8].
 * TR_ERR_NOT_FOUND when attn_norm is not an F32 tensor of the file. */
tr_status tr_model_q4k_factors(model *m, int32_t l, bool neox, float *a);

/* Reads attention.key_length / value_length (default dim / n_heads; the
 * two must be equal) into hp->head_dim, checks rope.dimension_count
 * (partial rotary embedding is refused) and sets hp->attn_scale =
 * 1 / sqrt(head_dim). */
tr_status tr_model_hp_read_head_dim(const gguf_file *f, model_hparams *hp,
                                    tr_diag *diag);
/* rope.scaling.type ("none" or "linear"; others are refused naming it)
 * and rope.scaling.factor (or rope.scale_linear) into hp->rope_freq_scale. */
tr_status tr_model_hp_read_rope_scaling(const gguf_file *f, model_hparams *hp,
                                        tr_diag *diag);

/* ---- shared blocks (blocks.c) ----
 * Each enqueues ops on f->st; together they are a llama-style layer. */

/* x[n, dim] = token_embd rows of f->tokens (times hp->embd_scale when it
 * is not 1). */
void tr_model_block_embed(tr_fwd *f);

/* How an attention sub-layer ropes and scales. */
typedef struct tr_attn_opts {
    float rope_base;
    float rope_scale; /* freq_scale (NEOX only) */
    bool neox;        /* GGML NEOX rope mode, else normal */
    float scale;      /* q.k scale */
} tr_attn_opts;

/* The attention sub-layer of layer l with paged KV (its sliding window, if
 * any, comes with f->kv):
 *   xb = rmsnorm(x) ; q, k, v = xb . wq, wk, wv [+ bq, bk, bv] ;
 *   [q, k = per-head rmsnorm(q, k)] ; rope(q, k at pos) ; kv_store(k, v) ;
 *   att = softmax(q k^T * scale) v ;
 *   x += att . wo, or with post_norm: x += rmsnorm(att . wo) */
void tr_model_block_attn(tr_fwd *f, int32_t l, const tr_attn_weights *w,
                         const tr_attn_opts *o);
/* The gated FFN sub-layer: xb = rmsnorm(x) ;
 *   h = act(xb . gate) * (xb . up), act = silu (swiglu) or gelu (geglu) ;
 *   x += h . down, or with post_norm: x += rmsnorm(h . down) */
void tr_model_block_ffn_swiglu(tr_fwd *f, const tr_ffn_weights *w);
void tr_model_block_ffn_geglu(tr_fwd *f, const tr_ffn_weights *w);
/* The final norm and the output projection of the rows asked for:
 * logits[n_logits, vocab] = rmsnorm(x[logit_rows]) . output [+ output
 * bias] [soft-capped by hp->final_softcap]. Returns
 * when the logits are in f->logits (the one op whose failure, a device
 * download, is reported). */
tr_status tr_model_block_logits(tr_fwd *f);

#endif
