/* model.h — a transformer's weights and its forward pass over a ragged
 * batch, written once against the backend table (kernels/backend.h).
 *
 * Layering: runtime/model -> kernels (backend), runtime/gguf. Knows nothing
 * of tokenizers, requests, the radix tree or the scheduler: it takes token
 * ids, positions, page tables (tr_batch) and a KV memory (tr_kv_layout) and
 * returns logits for the rows asked for.
 *
 * Architectures: one file per family (runtime/model/arch_<family>.c, the
 * table in arch.c), written on shared blocks (blocks.c);
 * model_internal.h says how to add one:
 *   llama   RMSNorm, RoPE normal mode, GQA, SwiGLU, optional tied output;
 *   qwen2   llama with Q/K/V biases and NEOX RoPE;
 *   qwen3   llama with per-head Q/K RMSNorm, NEOX RoPE, head_dim from the
 *           metadata (q_dim may differ from dim);
 *   gemma3  embeddings times sqrt(dim), per-head Q/K RMSNorm, NEOX RoPE,
 *           GELU-tanh gated FFN, RMSNorm after attention and after the FFN
 *           too, local (sliding-window) and global layers interleaved with
 *           their own RoPE bases, optional final logit soft-capping.
 *
 * Sliding-window (local) layers and the KV pages. A token at position p
 * of a local layer with window W attends to positions p-W+1..p only
 * (llama.cpp's rule), read through the same pages as every other layer:
 * a page holds all layers of its positions, so the pages of positions
 * that have left every local layer's window stay allocated (global layers
 * still read them) and local layers skip them. Consequences:
 *   - the radix cache reuses a prefix unchanged: a cached page holds the
 *     K/V of every layer for its positions, local ones included, so a
 *     request continuing a cached prefix of any length finds in the pages
 *     exactly the rows a recomputation would write, and the attention
 *     kernel cuts its blocks at absolute multiples of 64 positions (then
 *     at the window's start), so cached and uncached logits are
 *     bit-identical (tested on prompts longer than the window);
 *   - nothing in the engine, the radix tree or the page pool knows about
 *     windows: the model describes them in tr_kv_layout.window;
 *   - memory: the local layers' rows of out-of-window positions are dead
 *     (Gemma 3 270M: 15 of 18 layers local, window 512: at 3K tokens
 *     69% of a sequence's KV bytes are unread, tending to 15/18). Freeing
 *     them would need per-layer-group pages, and the radix cache would
 *     then have to track which cached prefixes still hold their local
 *     rows (SGLang's SWA pool keeps a second, windowed pool and evicts
 *     from it separately); not done: Gemma 3 270M's KV is 18 KB per token
 *     in F16, small beside its weights at the context lengths served here. The model borrows the gguf_file:
 * with a host-memory backend the weights are used in place from the
 * mapping (no copy), so the gguf_file must outlive the model.
 *
 * Threads: a model is driven by one thread at a time (its scratch buffers
 * are reused between calls); the backend's workers do the parallel work.
 */
#ifndef TR_MODEL_H
#define TR_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "kernels/backend.h"
#include "base/status.h"
#include "runtime/gguf/gguf.h"

typedef struct model_hparams {
    char arch[32];
    int32_t n_layers;
    int32_t dim;        /* embedding width */
    int32_t n_heads;
    int32_t n_kv_heads;
    int32_t head_dim;   /* attention.key_length, else dim / n_heads */
    int32_t ffn_dim;
    int32_t n_vocab;
    int32_t n_ctx_train;
    float rms_eps;
    float rope_base;
    bool tied_output;   /* output projection shares token_embd */
    /* Families past llama (0 / 1 where they do not apply): */
    float rope_freq_scale;  /* 1 / the linear rope-scaling factor, 1 if none
                               (global layers only in gemma3) */
    float rope_base_local;  /* base of the sliding-window layers (gemma3) */
    int32_t sliding_window; /* window of the local layers, 0: none */
    int32_t n_local_layers; /* layers that have that window */
    float attn_scale;       /* q.k scale, 1 / sqrt(head_dim) unless stated */
    float embd_scale;       /* embedding rows times this (gemma3: sqrt(dim)) */
    float final_softcap;    /* logits = c * tanh(logits / c); 0: none */
} model_hparams;

typedef struct model model;

/* Reads hyper-parameters and binds every tensor, checking presence, shape
 * and type (an error names the tensor and what is wrong; a known but
 * non-computable type is TR_ERR_UNSUPPORTED naming tensor and type; an
 * architecture not in the table is TR_ERR_UNSUPPORTED naming it and the
 * supported ones).
 * max_batch_tokens bounds the rows of one forward call (scratch is sized
 * for it). On failure nothing is allocated. */
tr_status tr_model_load(const gguf_file *f, tr_backend *be,
                     int32_t max_batch_tokens, model **out, tr_diag *diag);
void tr_model_free(model *m);

/* As tr_model_load, for a caller that owns f and reads no tensor of it
 * afterwards (the engine): when the backend copies matrices into a layout
 * of its own (backend.h, prepare_matmul_weights), the file's bytes of each
 * are given back as soon as it is copied (tr_gguf_forget), so neither the
 * load nor the model holds both. f must outlive the model as usual. */
tr_status tr_model_load_owning(gguf_file *f, tr_backend *be,
                               int32_t max_batch_tokens, model **out,
                               tr_diag *diag);

const model_hparams *tr_model_get_hparams(const model *m);
/* Layer l's sliding window (0: global attention, every position). */
int32_t tr_model_layer_window(const model *m, int32_t layer);
/* Bytes of weights the model reads per forward (for reports). */
uint64_t tr_model_weight_bytes(const model *m);
int32_t tr_model_max_batch_tokens(const model *m);

/* Allocates KV memory for n_pages pages of page_size tokens on the
 * model's backend, K rows of type k and V rows of type v (backend.h's
 * formats), and describes it in *kv. TR_ERR_UNSUPPORTED when the backend
 * cannot compute with those types or a type cannot hold the model's heads
 * (Q4: head_dim not a multiple of 32); *why (may be NULL) then says which.
 * Free with tr_model_kv_free. */
tr_status tr_model_kv_alloc(model *m, int32_t n_pages, int32_t page_size,
                            tr_kv_type k, tr_kv_type v, tr_kv_layout *kv,
                            const char **why);
void tr_model_kv_free(model *m, tr_kv_layout *kv);
/* Copies KV page `page` (tr_kv_page_bytes of kv) between the device and
 * host memory (to_device: host -> page), on the model's stream, and waits
 * for it. Not while a forward pass runs (one thread at a time). */
tr_status tr_model_kv_page_copy(model *m, const tr_kv_layout *kv, int32_t page,
                                void *host, bool to_device);
/* KV units. The pages of a model whose layers have different sliding
 * windows can be cut into units, each a group of layers with one window
 * (backend.h's tr_kv_layout.unit_layers), so that the engine frees a
 * windowed unit's pages once no position in them can be read again. A
 * sequence's page table then has n ids per page slot (ids[slot * n + u]);
 * tr_model_forward takes such tables. */
#define TR_MODEL_MAX_KV_UNITS 64
typedef struct tr_kv_units {
    int32_t n;      /* units per page slot; 1: a page holds every layer */
    int32_t layers; /* layers per unit */
    int32_t window[TR_MODEL_MAX_KV_UNITS]; /* each unit's window, 0 = none */
} tr_kv_units;
/* The units split (true) gives this model: one unit without windowed
 * layers, or when the grouping would need more than the maximum; one unit
 * when split is false. */
void tr_model_kv_units(const model *m, bool split, tr_kv_units *out);
/* tr_model_kv_alloc with n_pages pages of one unit each (split) or of
 * every layer. */
tr_status tr_model_kv_alloc_units(model *m, int32_t n_pages, int32_t page_size,
                                  tr_kv_type k, tr_kv_type v, bool split,
                                  tr_kv_layout *kv, const char **why);

/* Q4 keys calibrated (llama and qwen2: the families whose heads have no
 * Q/K norms to balance at load): runs tokens[0..n) (a fixed text, ids of
 * this model's vocabulary) through the model once; from then on a forward
 * over a layout of Q4 keys stores each key less the offset the keys share
 * (their mean, in the RoPE pairs that turn slowly), and scales
 * its channels against the queries' (the queries by the inverse), which
 * leaves every attention output as it was in exact arithmetic while the 4
 * bits go where the scores need them (kv_center.c, kv_balance.c). Other K
 * types compute as before, bit for bit. Call once, after the load and
 * before KV pages of Q4 keys are written; other families, and a second
 * call, change nothing (TR_OK). Errors: TR_ERR_INVALID_ARG (no tokens, an
 * id outside the vocabulary), TR_ERR_NOMEM; the model is then as it was
 * loaded. */
tr_status tr_model_calibrate_q4_keys(model *m, const int32_t *tokens, int32_t n,
                                     tr_diag *diag);
/* What a KV page's bytes depend on in the model beyond its file and the
 * layout: the Q4 key calibration's hash, 0 when there is none. */
uint64_t tr_model_kv_fingerprint(const model *m);

/* Bytes of one KV page; 0 when a type cannot hold the model's heads. */
uint64_t tr_model_kv_page_bytes(const model *m, int32_t page_size, tr_kv_type k,
                                tr_kv_type v);

/* Runs the batch: tokens[b->n_tokens] at the positions/sequences of b
 * (1 <= n_tokens <= max_batch_tokens; every page a token writes or reads
 * must be listed in its page table, checked). Writes their K/V into kv and
 * stores into logits (host memory, [n_logits, n_vocab] floats) the logits
 * of the batch rows logit_rows[0..n_logits). Errors: TR_ERR_INVALID_ARG
 * for a malformed batch (the diag-free message goes to the log). */
tr_status tr_model_forward(model *m, const tr_kv_layout *kv, const tr_batch *b,
                        const int32_t *tokens, const int32_t *logit_rows,
                        int32_t n_logits, float *logits);

/* Which tokens' logits a forward call's caller will read: the grammar
 * masks of the logit rows. A row's logits outside its mask are left
 * unspecified (any float, NaN included): the caller must not read them
 * (the sampler's first step overwrites them with -inf). When the rows'
 * masks together allow few tokens, the output projection reads only those
 * rows of the vocabulary matrix (where the backend has matmul_rows); the
 * logits it computes are bitwise those of a forward without masks.
 *
 * The masks may be filled while the forward pass runs (the engine computes
 * them on its own thread meanwhile): before reading them, the forward
 * calls await(ctx), which returns once they are complete; await may be
 * NULL when they already are. await is called at most once per forward,
 * from the forward's thread. */
typedef struct tr_logit_masks {
    void (*await)(void *ctx);
    void *ctx;
    /* [n_logits]: row i's mask (bit t of word t / 64 set = token t read),
     * n_words words; a NULL entry: every token of that row is read. */
    const uint64_t *const *row_mask;
    size_t n_words; /* >= (n_vocab + 63) / 64 */
} tr_logit_masks;

/* tr_model_forward with masks (NULL: every logit is computed). */
tr_status tr_model_forward_masked(model *m, const tr_kv_layout *kv,
                                  const tr_batch *b, const int32_t *tokens,
                                  const int32_t *logit_rows, int32_t n_logits,
                                  float *logits, const tr_logit_masks *masks);

#endif
