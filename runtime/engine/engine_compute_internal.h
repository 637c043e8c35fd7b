/* engine_compute_internal.h — what the engine's own files and its tests
 * see beyond the public API (include/trellis.h, which this module
 * implements): the compute seam, custom engines, the debug check.
 *
 * Layering: runtime/engine -> runtime/model (forward), radix (pool + tree),
 * runtime/sampler, runtime/tokenizer, runtime/chat, grammar, runtime/vocab.
 * The only module that ties them together. The server (app/server) and
 * the CLI reach it through include/trellis.h only. constraint_internal.h
 * is the engine's glue between grammar/ and the tokenizer (constraint ops,
 * jump-forward re-encoding); no application includes it.
 *
 * The engine in one paragraph. One engine thread runs a loop of steps.
 * Each step it takes new requests and cancellations off its input queue,
 * builds one ragged batch — one decode token for every running sequence
 * plus prefill chunks of sequences still prefilling or newly admitted,
 * under max_batch_tokens — runs ONE forward pass for that batch (so each
 * weight is read once per step for all rows), samples the rows that need
 * a next token, applies stops, and queues events. KV memory is a pool of
 * pages (radix/kv_pool.h); the radix tree (radix/radix_tree.h) maps token
 * prefixes to pages, so that prompts sharing a prefix compute it once.
 * See sched.c for the scheduling policy (admission order by longest cached
 * prefix, in-flight prefix deduplication, preemption) and step.c for the
 * step itself (overlap of mask computation with the forward pass).
 *
 * Constraints. A request's grammar handle (or its `regex`, compiled on the
 * submitting thread through the engine's grammar cache, grammar_cache_internal.h)
 * becomes one matcher per sample (grammar_constraint.c); the engine thread
 * fills the masks while the forward pass runs and never compiles. The
 * end-of-span rule (trellis.h, trellis_request.end_span) is decided per
 * row and step: when the row's mask allows an end-of-generation token and
 * the request has the rule, the row is sampled without the mask, and a
 * token the mask forbids ends the sample (finish "stop", stop_token -1,
 * the token neither output nor counted) while an allowed one is taken
 * with the masked distribution's log-probs (step.c, sample_span_rule).
 * Measured on 40 regexes with unbounded quantifiers, greedy + 2 seeds,
 * max_tokens 64 (tests/bench/bench_end_span.c): 90% of generations end
 * before the limit with the rule, 38% without, every finished one a full
 * match.
 *
 * The forward pass is reached through engine_compute so that tests can run
 * the whole scheduler against a fake model (a few microseconds per step,
 * which can check every page it is given); trellis_engine_new plugs in the
 * real model (compute.c).
 *
 * Threads: tr_engine_new_custom starts the engine thread (and a compute
 * thread unless options.no_overlap); the compute object is then used from
 * one of those threads only, one call at a time.
 */
#ifndef TR_ENGINE_H
#define TR_ENGINE_H

#include <stdint.h>

#include "base/status.h"
#include "runtime/gguf/gguf.h"
#include "runtime/model/model.h"
#include "runtime/tokenizer/tokenizer.h"
#include "trellis.h"
#include "kernels/backend.h"

/* One forward pass over a ragged batch (kernels/backend.h tr_batch, whose
 * page tables index the engine's page pool of n_pages pages of page_size
 * tokens): writes the K/V of the batch's tokens and stores the logits of
 * rows[0..n_rows) into logits ([n_rows, n_vocab]). masks (never NULL)
 * says which logits the engine reads (runtime/model/model.h
 * tr_logit_masks: the others may be left unspecified; await must be called
 * before reading the masks, and may be ignored by a forward that computes
 * every logit). */
typedef struct engine_compute_ops {
    tr_status (*forward)(void *ctx, const tr_batch *b, const int32_t *tokens,
                         const int32_t *rows, int32_t n_rows, float *logits,
                         const tr_logit_masks *masks);
    void (*destroy)(void *ctx); /* may be NULL */
    /* Layer l's sliding attention window, 0 for global attention (may be
     * NULL: every layer global). l is in [0, n_layers). */
    int32_t (*layer_window)(void *ctx, int32_t layer);
    /* A KV page's bytes (engine_compute.kv_page_bytes) out to host memory
     * and back in: what the disk tier saves and restores. Called on the
     * engine thread while no forward pass runs. May be NULL (then the
     * engine refuses a disk tier). */
    tr_status (*kv_read)(void *ctx, int32_t page, void *dst);
    tr_status (*kv_write)(void *ctx, int32_t page, const void *src);
} engine_compute_ops;

typedef struct engine_compute {
    const engine_compute_ops *ops;
    void *ctx;
    int32_t n_vocab;
    int32_t n_ctx;     /* the model's context (the engine's default) */
    int32_t max_batch; /* most tokens one forward takes */
    int32_t n_pages;   /* KV pages the compute side holds */
    int32_t page_size;
    int32_t threads;   /* for reports */
    const char *device; /* backend name for reports (static); NULL:
                           "custom" */
    const char *arch;   /* architecture for reports (lives as long as the
                           compute object); NULL: "custom" */
    int32_t n_layers;   /* for reports; 0 when unknown */
    int32_t kv_type_k, kv_type_v; /* TRELLIS_KV_* for reports */
    int64_t kv_bytes;   /* the KV pool's bytes for reports; 0: unknown */
    uint64_t kv_page_bytes; /* one page's bytes (kv_read/kv_write) */
    /* Units (runtime/model/model.h tr_kv_units): a page slot of page_size
     * positions is kv_units pages, one per group of layers; unit u's
     * layers read only the last kv_unit_window[u] positions (0: all).
     * 0 or 1: one page holds every layer (what a custom compute gets
     * unless it says otherwise). */
    int32_t kv_units;
    int32_t kv_unit_window[TR_MODEL_MAX_KV_UNITS];
    uint64_t kv_fingerprint; /* what a page's bytes mean: the weights,
                                the KV format and geometry, the kernels
                                that computed them; pages of equal
                                fingerprints are interchangeable (the disk
                                tier keys on it); 0: unknown */
} engine_compute;

/* Starts an engine on a compute object and a tokenizer. Takes ownership of
 * file (may be NULL; closed last), tok and compute (destroyed with the
 * engine) on success AND on failure. options->page_size and the pool size
 * are taken from compute (n_pages, page_size). err (may be NULL) says what
 * went wrong. */
tr_status tr_engine_new_custom(const trellis_engine_options *options,
                            gguf_file *file, tokenizer *tok,
                            const engine_compute *compute,
                            trellis_engine **out, char *err, size_t err_cap);

/* As tr_engine_new_custom, with a draft model (trellis_engine_options.
 * draft_model) as a second compute object: same vocabulary size and page
 * size as compute, its own page pool (draft->n_pages pages), its forward
 * passes run where the target's do. Takes ownership of draft and
 * draft_file (may be NULL; closed after draft is destroyed) like the rest,
 * on success and on failure; draft NULL: tr_engine_new_custom. */
tr_status tr_engine_new_custom_draft(const trellis_engine_options *options,
                                     gguf_file *file, tokenizer *tok,
                                     const engine_compute *compute,
                                     const engine_compute *draft, gguf_file *draft_file,
                                     trellis_engine **out, char *err, size_t err_cap);

/* Runs, on the engine thread between two steps, every invariant check:
 * tr_radix_tree_check (which runs tr_kv_pool_check), that the pool's locked
 * pages are exactly those the sequences hold, and each sequence's page
 * accounting. Returns TR_OK or TR_ERR_INTERNAL (details on stderr). */
tr_status tr_engine_debug_check(trellis_engine *e);

/* What a model compute object frees when destroyed: nothing (the caller
 * keeps model and backend), its model (a draft model sharing the
 * target's backend), or both. */
typedef enum engine_own { ENGINE_OWN_NONE, ENGINE_OWN_MODEL, ENGINE_OWN_BOTH } engine_own;

/* The real model as an engine_compute: loads nothing itself; m and be stay
 * owned by the caller until the compute object is destroyed, which frees
 * the KV memory it allocated (n_pages pages of page_size tokens, K and V of
 * the given types; with split, the model's windowed layers in pages of
 * their own and n_pages counting those unit pages) and what `own` says.
 * *why: as tr_model_kv_alloc's. */
tr_status tr_engine_compute_model_new(model *m, tr_backend *be, int32_t n_pages,
                                      int32_t page_size, tr_kv_type k, tr_kv_type v,
                                      bool split, engine_own own, engine_compute *out,
                                      const char **why);

/* The KV format of a TRELLIS_KV_* value (an unknown one: F16; the option
 * table has checked it). */
tr_kv_type tr_engine_kv_type(int32_t trellis_kv);

/* With Q4 keys (k), calibrates m's keys on a fixed text run through it
 * once (tr_model_calibrate_q4_keys; a no-op for other K types and for the
 * families it leaves alone). Call right after the load, before
 * tr_engine_compute_model_new (whose page fingerprint includes the
 * calibration). Errors are written to err. */
tr_status tr_engine_calibrate_keys(model *m, const tokenizer *tok, tr_kv_type k,
                                char *err, size_t err_cap);

#endif
