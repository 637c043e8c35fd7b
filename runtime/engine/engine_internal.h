/* engine_internal.h — the engine's data structures, shared by its files:
 *
 *   engine.c   creation, the engine thread's loop, queues, control, stats
 *   submit.c   trellis_submit: validation, prompt building, request copies
 *   sched.c    admission, page reservation, preemption, release
 *   step.c     one step: batch, forward (overlapped), sampling, stops
 *   output.c   detokenization, stop strings, events
 *   stop_regex.c stop patterns (stop_regex_internal.h)
 *   compute.c  the real model behind engine_compute, the compute thread
 *   options.c  the table of option defaults and bounds
 *   grammar_*.c grammar handles and their compile cache (grammar_cache_internal.h)
 *
 * Ownership and threads. A request (engine_req) is allocated and filled by
 * trellis_submit on the caller's thread, then handed to the engine thread
 * through the input queue; from then on only the engine thread touches it
 * (and its sequences) until it frees it after its last DONE event. Events
 * are allocated by the engine thread and handed to the embedder through
 * the output queue. The fields marked "immutable" are written before the
 * engine thread starts and only read afterwards.
 *
 * Pages of a sequence. Its page table has n_pages page slots of W ids
 * each (pages[slot * W + u], W = the engine's units, 1 unless the model's
 * windowed layers have pages of their own: window_pages.c). For a unit
 * without a window: the first n_locked slots belong to the radix tree and
 * are pinned by the lock the sequence holds on `node` (NULL when n_locked
 * == 0); the sequence owns one pool reference on each id of the slots
 * n_locked..n_pages. For a windowed unit: every id is -1 (let go: no
 * position from n_kv on reads it) or one the sequence holds a reference
 * on, tree page or not; the slots below let_go are -1 in every windowed
 * unit. Positions
 * 0..n_kv-1 have their K/V computed; tokens[n_kv..len) are still to be fed
 * (a decoding sequence has exactly one: its last sampled token).
 */
#ifndef TR_ENGINE_INTERNAL_H
#define TR_ENGINE_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/hash.h"
#include "grammar/grammar.h"
#include "radix/radix.h"
#include "runtime/sampler/sampler.h"
#include "runtime/tokenizer/tokenizer.h"
#include "trellis.h"
#include "runtime/engine/constraint_internal.h"
#include "runtime/engine/engine_compute_internal.h"
#include "runtime/engine/grammar_cache_internal.h"
#include "runtime/engine/stop_regex_internal.h"

typedef struct engine_req engine_req;
typedef struct engine_seq engine_seq;

typedef enum seq_state {
    SEQ_NEW = 0,  /* in a request not yet taken in by the engine thread */
    SEQ_WAITING,  /* in the waiting list (new or preempted) */
    SEQ_RUNNING,  /* in the running array */
    SEQ_DONE,     /* finished; DONE event queued */
} seq_state;

struct engine_seq {
    engine_req *req;
    int32_t index;           /* sample index within the request */
    seq_state state;
    engine_seq *prev, *next; /* waiting list links */
    uint64_t admit_order;    /* larger = admitted later (preemption victim) */

    int32_t *tokens;         /* [cap] prompt then generated tokens */
    int32_t len, cap;
    int32_t n_kv;            /* positions whose K/V are in the pages */
    int32_t prefill_to;      /* len when last admitted: prompt pages below
                                it are cached as prefill proceeds */
    int32_t *pages;          /* [pages_cap] page table */
    int32_t n_pages, pages_cap;
    radix_node *node;        /* locked tree node covering slots [0, n_locked) */
    int32_t n_locked;
    int32_t let_go;          /* windowed ids of slots below are all -1 */

    int32_t plan;            /* tokens scheduled this step */
    int32_t logit_row;       /* its row in the step's logits, or -1 */

    sampler *smp;            /* created at first admission */
    void *cstate;            /* constraint state (NULL: none) */
    uint64_t *mask;          /* this step's mask row (borrowed) or NULL */
    bool span_rule;          /* this step: the end-of-span rule applies
                                (the mask allows an end-of-generation
                                token), so the row is sampled unmasked */
    bool span_end;           /* ... and the token drawn was forbidden */

    tokenizer_stream ts;
    char *held;              /* text held back (may start a stop string) */
    tr_stop_scan *stop_scan; /* stop patterns' runs (NULL: none asked) */
    size_t held_len, held_cap;
    char *out_text;          /* text not yet handed out in an event */
    size_t out_len, out_cap;
    int32_t *out_tokens;     /* tokens not yet handed out */
    trellis_logprob *out_lp; /* their log-probs (when asked) */
    int32_t out_n, out_tcap;

    struct engine_event_box *spare; /* a DONE event that needs no allocation */
    int32_t n_gen;           /* tokens generated (sampled + forced) */
    int32_t n_forced;        /* of which placed by jump-forward */
    trellis_finish finish;
    int status;
    const char *fail_msg;    /* this step: why status is set, when not the
                                mask's fault (static text), or NULL */
    char error[256];
    int32_t stop_index, stop_token;

    /* speculative decoding (spec.c): drafts at tokens[len - spec_k, len),
     * fed and verified with the token before them */
    struct tr_ngram *ngram;  /* the proposer, NULL: no speculation */
    int32_t spec_k;          /* unverified drafts at the end of tokens */
    int32_t spec_row0;       /* this step: logits row of the first draft's
                                predecessor (rows spec_row0 .. + spec_k) */
    int32_t n_spec_accepted; /* drafts verified and kept (metrics) */
    /* the draft model's view of s (draft.c) */
    bool drafting;           /* s takes drafts from the draft model */
    bool spec_from_draft;    /* its unverified drafts came from it */
    int32_t *dpages;         /* [d_cap] its page table in the draft's pool */
    int32_t d_npages, d_cap;
    int32_t d_kv;            /* positions whose draft K/V are right */
    int32_t d_len;           /* drafts to ask for next (adapts) */
    int32_t d_skip;          /* steps skipped while its drafts do not pay */
    float d_rate;            /* running share of its drafts kept */
    sampler_proposal *dq;    /* [req->draft_max] what each draft was drawn
                                from (options.draft_sampling), or NULL */
    bool d_sample;           /* this proposal's drafts are drawn from dq */
    bool spec_sampled;       /* its unverified drafts were drawn from dq:
                                verified by the speculative sampling rule */

    /* prompt log-probs (sample 0 of a request that asks; prompt_lp.c) */
    trellis_logprob *plp;    /* [n_prompt - plp_start] entries, or NULL */
    int32_t plp_next;        /* next position whose logits row is needed;
                                n_prompt - 1: all computed */
    bool plp_sent;           /* handed out in an event */

    /* metrics */
    uint64_t t_first_sched, t_first_token, t_last_token;
    int32_t cached_tokens;   /* at first admission */
    int32_t preemptions;
    bool admitted_once;
};

struct engine_req {
    uint64_t id;
    engine_req *hnext;       /* id hash chain (engine thread) */
    int32_t n, n_done;
    bool cancelled;

    sampler_params sp;
    sampler_logit_bias *bias; /* owned copy */
    int32_t max_tokens;      /* resolved (>= 0; 0: prefill only) */
    int32_t min_tokens;      /* 0..max_tokens (trellis_request) */
    int32_t spec_max;        /* drafts a step at most (0: no speculation) */
    int32_t draft_max;       /* draft-model drafts a step at most (0: none) */
    bool logprobs;
    int32_t top_logprobs;
    bool ignore_eos, stream;
    char **stop;             /* [n_stop] owned NUL-terminated copies */
    size_t *stop_len;
    int32_t n_stop;
    int32_t *stop_tokens;
    int32_t n_stop_tokens;
    tr_stop_regex_set *stop_rx; /* compiled stop patterns (NULL: none);
                                   stop_index n_stop + k is pattern k */

    const trellis_constraint_ops *cops; /* NULL: unconstrained */
    bool jump_forward;       /* cops has forced_bytes and rollback, and the
                                request did not turn it off */
    bool end_span;           /* the end-of-span rule (trellis.h), resolved */
    void *cstate0;           /* the state given (sample 0 uses it) */

    bool plp;                /* prompt log-probs asked (prompt_lp.c) */
    int32_t plp_start;       /* first prompt position reported */
    sampler *plp_smp;        /* plain sampler computing them: default
                                params, n_logprobs = prompt_top_logprobs */

    uint64_t ns;             /* radix namespace */
    bool disk_wait;          /* its prompt's pages are being read from the
                                disk tier: not admitted until they are in
                                the cache (disk_tier.c) */
    int32_t disk_first;      /* the first page index that read asked for */
    uint32_t disk_gen;       /* the tier's flush count when it was asked */
    uint64_t disk_key[2];    /* the chain key of its read's first record */
    int32_t disk_count;      /* records its read asked for */
    uint64_t disk_follow;    /* id of the request whose read brings this
                                one's records (0: its own read) */
    struct radix_node *disk_node; /* locked while it waits for the read and
                                until a sample is admitted: the memory part
                                of its prefix (then the restored one) cannot
                                be evicted meanwhile (tr_disk_release) */
    void *user;
    int32_t *prompt;         /* [n_prompt] owned */
    int32_t n_prompt;
    uint64_t t_submit;

    engine_seq seqs[];       /* [n] */
};

/* Waiting sequences examined per step for ordering and admission: bounds
 * the scheduler's work when thousands of requests wait. */
#define SCHED_SCAN_MAX 256

typedef struct sched_cand {
    engine_seq *s;
    int32_t match; /* cached prefix tokens */
    int32_t order; /* position in the waiting list */
} sched_cand;

/* Input queue messages. */
typedef enum engine_msg_kind {
    MSG_SUBMIT,
    MSG_CANCEL,
    MSG_FLUSH,
    MSG_CHECK,
} engine_msg_kind;

typedef struct engine_sync {
    bool done;
    tr_status result;
} engine_sync;

typedef struct engine_msg {
    engine_msg_kind kind;
    engine_req *req;         /* MSG_SUBMIT (owned by the message) */
    uint64_t id;             /* MSG_CANCEL */
    engine_sync *sync;       /* MSG_FLUSH, MSG_CHECK: the waiter's */
    struct engine_msg *next;
} engine_msg;

/* An event and its payload in one allocation; ev first so that
 * trellis_event_free can free the box from the event pointer. */
typedef struct engine_event_box {
    trellis_event ev;
    struct engine_event_box *next;
} engine_event_box;

/* The compute thread (overlap): runs one job at a time for the engine
 * thread: a forward pass, or the sampling of a range of rows. */
enum { W_JOB_FORWARD = 0, W_JOB_SAMPLE = 1 };
typedef struct engine_worker {
    pthread_t thread;
    bool started;
    pthread_mutex_t mu;
    pthread_cond_t cond;
    int state;               /* 0 idle, 1 job posted, 2 job done, 3 quit */
    int kind;                /* W_JOB_FORWARD or W_JOB_SAMPLE */
    const engine_compute *c; /* forward job: the model (target or draft) */
    const tr_logit_masks *lm; /* ... and its masks */
    int32_t r0, r1;          /* sample job: rows [r0, r1) */
    const tr_batch *b;
    const int32_t *tokens, *rows;
    int32_t n_rows;
    float *logits;
    bool masks_ready;        /* the forward job's masks are filled */
    tr_status result;
} engine_worker;

struct trellis_engine {
    /* ---- immutable after creation ---- */
    trellis_engine_options opt;
    gguf_file *file;
    tokenizer *tok;
    engine_compute compute;
    struct engine_draft *draft; /* the draft model (draft.c), or NULL */
    grammar_vocab *gvocab;   /* what grammars are compiled against; NULL
                                if it failed (no grammar constraints) */
    gcache *gcache;          /* compiled grammars (thread-safe); NULL
                                without gvocab */
    int32_t n_vocab, n_ctx, page_size, n_pages;
    int32_t W;               /* ids per page slot (units), >= 1 */
    int32_t unit_window[TR_MODEL_MAX_KV_UNITS]; /* 0: unit without window */
    bool windowed;           /* some unit has a window */
    size_t n_words;          /* mask words */
    int32_t eos;
    bool add_bos;
    uint8_t *is_eog;         /* [n_vocab] */
    int32_t *eog_ids;        /* [n_eog] the ids is_eog marks */
    int32_t n_eog;
    size_t max_piece;        /* bytes one tr_tokenizer_stream_push may write */
    char *piece;             /* [max_piece] engine thread's scratch */

    /* ---- threads and queues ---- */
    pthread_t thread;
    bool thread_started;
    pthread_mutex_t in_mu;
    pthread_cond_t in_cond;  /* engine thread waits for messages */
    pthread_cond_t ctl_cond; /* control callers wait for their sync */
    engine_msg *in_head, *in_tail;
    bool quit;               /* under in_mu */
    bool disk_ready;         /* under in_mu: the disk tier has answers */
    pthread_mutex_t out_mu;
    pthread_cond_t out_cond;
    engine_event_box *out_head, *out_tail;
    pthread_mutex_t stats_mu;
    trellis_stats snap;      /* under stats_mu */
    atomic_uint_fast64_t next_id;
    atomic_uint_fast64_t n_submitted;
    engine_worker worker;

    /* ---- engine thread only ---- */
    kv_pool *pool;
    radix_tree *tree;
    struct engine_disk *disk; /* the disk tier (disk_tier.c), or NULL */
    engine_seq *wait_head, *wait_tail;
    int32_t n_waiting;
    engine_seq **running;    /* [max_running], admission order */
    int32_t n_running;
    engine_req **hash;       /* id -> request, chained */
    size_t hash_cap, hash_n;
    uint64_t admit_counter;
    /* step buffers, sized at creation */
    int32_t *b_tokens, *b_pos, *b_seq, *b_rows, *b_npages;
    const int32_t **b_tables;
    engine_seq **b_seqs;     /* batch sequence index -> seq */
    engine_seq **row_seqs;   /* logits row -> seq */
    float *logits;           /* [logits_rows, n_vocab]: the sampled rows,
                                then the prompt log-prob rows */
    int32_t logits_rows;     /* max_running, + TR_PLP_ROWS_MAX once a
                                request asked for prompt log-probs */
    int32_t *plp_bidx;       /* [TR_PLP_ROWS_MAX] this step's prompt rows:
                                batch index */
    engine_seq **plp_seqs;   /* [TR_PLP_ROWS_MAX] ... and sequence */
    int32_t plp_rows_left;   /* the scheduler's prompt-row budget */
    int32_t spec_rows_left;  /* ... and its draft-row budget */
    int32_t *row_tok;        /* [max_running] sampled token per row */
    int *row_st;             /* [max_running] sampler status per row */
    sampler_logprobs *row_lp; /* [max_running] */
    uint64_t *masks;         /* [max_running, n_words] */
    const uint64_t **row_mask; /* [max_running] what the sampler reads of
                                  each logits row: its mask, NULL = all */
    tr_logit_masks lmasks;   /* row_mask as the forward sees it */
    sched_cand *cand;        /* [SCHED_SCAN_MAX] admission candidates */
    engine_msg *deferred, *deferred_tail; /* taken during a forward pass,
                                             processed after it */
    int chat_kind;           /* chat_template_kind; 0 = none */
    char *chat_system;       /* the template's default system prompt */
    char *chat_template;     /* the GGUF's template text, or NULL
                                (trellis_engine_info.chat_template) */
    engine_event_box *ev_head, *ev_tail; /* this step's events */
    int32_t ev_n;
    trellis_stats st;        /* running counters (snapshotted) */
    uint64_t tps_t0, tps_gen0;
};

/* ---- options.c ---- */
/* Defaults for unset options, bounds checked (err names the option);
 * in NULL: the defaults. */
tr_status tr_engine_options_resolve(const trellis_engine_options *in,
                                    trellis_engine_options *out, char *err,
                                    size_t cap);

/* ---- engine.c ---- */
void tr_engine_req_free(engine_req *r);
void tr_engine_hash_remove(trellis_engine *e, engine_req *r);
engine_req *tr_engine_hash_find(const trellis_engine *e, uint64_t id);
/* Takes the input queue's messages (waiting for one when block) and
 * processes them; with submits_only (during a forward pass) only new
 * requests, the rest is deferred to the next call. Returns true once the
 * engine is asked to quit. */
bool tr_engine_take_messages(trellis_engine *e, bool block, bool submits_only);
tr_status tr_engine_send(trellis_engine *e, engine_msg *m);
void tr_engine_publish_stats(trellis_engine *e);
static inline uint64_t engine_ns_private(uint64_t id) {
    /* no_radix: a namespace of the request's own (top bit set; user
     * namespaces use 63 bits) so forks share and nothing else does */
    return tr_splitmix64(id) | (1ull << 63);
}

/* ---- sched.c ---- */
void tr_sched_waiting_push_back(trellis_engine *e, engine_seq *s);
void tr_sched_waiting_push_front(trellis_engine *e, engine_seq *s);
void tr_sched_waiting_remove(trellis_engine *e, engine_seq *s);
/* Fills each running sequence's plan for this step (admitting and
 * preempting as needed); returns the number of tokens planned. */
int32_t tr_sched_plan(trellis_engine *e);
/* Admits waiting sequences for the NEXT step while this step's forward
 * pass computes (step.c calls it in the overlap window, and at the same
 * point when nothing overlaps, so both modes schedule alike). Its budget
 * is max_batch_tokens minus what the running sequences will feed next
 * step if none finishes. Safe during the forward: it reads the tree,
 * locks matched nodes, evicts unlocked pages (no page of the step's batch
 * is unlocked) and takes free pages for the new sequences; it appends to
 * `running` but never touches the step's batch or its sequences' page
 * tables. The admitted sequences' first chunks are fed next step
 * (tr_sched_plan pass 2). Returns the tokens they will feed. */
int32_t tr_sched_admit_ahead(trellis_engine *e);
/* After a forward: n_kv advanced by plan; caches completed prompt pages. */
void tr_sched_after_forward(trellis_engine *e, engine_seq *s);
/* Gives back every page of s (to the tree if it caches), and removes it
 * from the running array or waiting list. */
void tr_sched_release(trellis_engine *e, engine_seq *s, bool cache);
int32_t tr_sched_pages_for(const trellis_engine *e, int64_t tokens);

/* ---- window_pages.c ---- */
/* The most ids a sequence of `tokens` positions holds at once (what must
 * fit the empty pool): every slot of the units without a window, the
 * window plus a prefill chunk of the others. */
int64_t tr_win_pages_for(const trellis_engine *e, int64_t tokens);
/* The longest sequence the empty pool holds. */
int64_t tr_win_pool_tokens(const trellis_engine *e);
/* After tr_radix_tree_match wrote n_pages slots into s->pages: references
 * on the windowed ids a position from n_kv on reads, -1 for the others. */
void tr_win_take_match(trellis_engine *e, engine_seq *s);
/* Lets go of the windowed ids no position from n_kv on reads: a private
 * one returns to the pool, a tree one becomes evictable. */
void tr_win_let_go(trellis_engine *e, engine_seq *s);
/* Drops every reference s holds (windowed ids of the tree slots, every id
 * of its private slots); not its lock. */
void tr_win_unref_all(trellis_engine *e, engine_seq *s);

/* ---- output.c ---- */
/* Appends a sampled token to s's output (detokenize, stop strings).
 * Returns true when a stop string ended the sample. */
bool tr_out_push_token(trellis_engine *e, engine_seq *s, int32_t tok,
                    const sampler_logprobs *lp, bool emit_text);
/* Emits the held text at the end of a sample (flush the detokenizer). */
void tr_out_flush(trellis_engine *e, engine_seq *s);
/* Queues a DELTA event with s's pending output (if any). */
void tr_out_emit_delta(trellis_engine *e, engine_seq *s);
/* Marks s finished, queues its DONE event and frees its per-sample state
 * (not its pages: tr_sched_release does that first). */
void tr_out_finish(trellis_engine *e, engine_seq *s, trellis_finish f,
                int status, const char *error);
/* Moves this step's events to the output queue and wakes the embedder. */
void tr_out_publish(trellis_engine *e);

/* ---- prompt_lp.c: prompt log-probs (trellis_request.prompt_logprobs) ----
 * Logits rows of prompt positions per step, over all sequences: bounds
 * the extra logits memory (64 x 49,152 floats = 12.6 MB for SmolLM2),
 * allocated on first use. */
#define TR_PLP_ROWS_MAX 64
/* s still needs logits rows of prompt positions. */
bool tr_plp_pending(const engine_seq *s);
/* The most tokens of s the prefix cache may supply (they are not
 * recomputed, so they would get no rows): len - 1, or less while s
 * still needs rows. */
int32_t tr_plp_match_limit(const engine_seq *s);
/* Rows s needs when fed c tokens from n_kv on. */
int32_t tr_plp_rows_for(const engine_seq *s, int32_t c);
/* The longest chunk <= c whose rows fit e->plp_rows_left; takes those
 * rows from the budget. */
int32_t tr_plp_fit_chunk(trellis_engine *e, const engine_seq *s, int32_t c);
/* After the forward: stores the entries of rows [r0, r0 + n) of e->logits,
 * which are s's prompt rows of this step, in order. */
tr_status tr_plp_store(trellis_engine *e, engine_seq *s, int32_t r0, int32_t n);
/* Grows e->logits for the prompt rows (engine thread, between forwards). */
tr_status tr_plp_reserve_logits(trellis_engine *e);

/* ---- spec.c: speculative decoding (trellis_engine_options.spec_ngram) ----
 * Rows of drafts per step, over all sequences (the logits buffer grows by
 * that many rows once, when speculation is on). */
#define TR_SPEC_ROWS_MAX 128
/* Drafts of one sequence at most: n-gram ones (TR_NGRAM_MAX_DRAFT) or the
 * tokens of forced bytes (what jump-forward would place in one chunk). */
#define TR_SPEC_DRAFT_MAX CONSTRAINT_JF_MAX_TOKENS
/* At first admission: gives s a proposer when the engine speculates and
 * the request lets it (no constraint, log-probs, min_tokens). */
void tr_spec_setup(trellis_engine *e, engine_seq *s);
/* A step's fixed cost (weights read once, whatever the rows) in rows of
 * compute: a draft row is worth its cost in a batch of B decode rows when
 * its sequence keeps more than B / (TR_SPEC_FIXED_ROWS + B) of its drafts
 * (docs/performance.md, "Speculative decoding": measured 2026-12-04). */
#define TR_SPEC_FIXED_ROWS 5
/* That acceptance for this step's batch; whether s's drafts reach it. */
float tr_spec_worth(const trellis_engine *e);
bool tr_spec_pays(const engine_seq *s, float worth);
/* Keeps at most keep of s's drafts (0: none, before a preemption). */
void tr_spec_cut(engine_seq *s, int32_t keep);
/* After s took a token and goes on: drafts for the next step. */
void tr_spec_propose(trellis_engine *e, engine_seq *s);
/* The step's end for s, fed with drafts: samples its rows in order,
 * takes each token, keeps the drafts that match, proposes again. */
void tr_spec_verify(trellis_engine *e, engine_seq *s, int32_t row);
/* The drafts d[0..n) the constraint of s allows, in order (cut at the
 * first it refuses, or after one that completes it); the constraint is
 * left as it was. 0, and no more speculation for s, if it cannot be
 * taken back. */
int32_t tr_spec_grammar_cut(engine_seq *s, const int32_t *d, int32_t n);
/* The same for n sampled drafts at tokens[len..) (draft.c): each draft's
 * proposal s->dq[i] is first restricted to the tokens the constraint
 * accepts at its position; a draft not among them is the first cut. */
int32_t tr_spec_grammar_cut_sampled(engine_seq *s, int32_t n);
/* The token after the ngram of s; for take_token. */
void tr_spec_accepted(engine_seq *s, int32_t tok);
/* Grows e->logits to rows rows (engine thread, between forwards). */
tr_status tr_engine_reserve_logits(trellis_engine *e, int32_t rows);

/* ---- draft.c: the draft model (trellis_engine_options.draft_model) ----
 * Takes ownership of c and f (both freed with the engine, also on
 * failure); err says why it cannot be used. Before the threads start. */
tr_status tr_draft_attach(trellis_engine *e, const engine_compute *c, gguf_file *f,
                          char *err, size_t cap);
void tr_draft_free(trellis_engine *e);
/* At first admission: whether s takes the draft model's drafts. */
void tr_draft_setup(trellis_engine *e, engine_seq *s);
/* s leaves the running set (finish, preemption): its draft pages go back
 * and its draft K/V is forgotten. */
void tr_draft_release(trellis_engine *e, engine_seq *s);
/* s's tokens from position `from` on are no longer known to be final:
 * the draft K/V keeps only what lies below. */
void tr_draft_forget_from(engine_seq *s, int32_t from);
/* After verification: accepted of proposed drafts kept (adapts d_len). */
void tr_draft_feedback(engine_seq *s, int32_t proposed, int32_t accepted);
/* End of a step: drafts for every running sequence that takes them and
 * has none from the n-gram index, from batched draft-model passes. */
void tr_draft_propose_all(trellis_engine *e);
/* Its counters into st; its model into info. */
void tr_draft_stats(const trellis_engine *e, trellis_stats *st);
void tr_draft_info(const trellis_engine *e, trellis_engine_info *o);
/* The draft pool's accounting (tr_engine_debug_check): every page free or
 * held by exactly one running sequence. */
tr_status tr_draft_check(trellis_engine *e);

/* ---- step.c ---- */
/* Takes tok (sampled for s; lp: its log-probs, or NULL) as s's next
 * token: constraint, stop tokens, jump-forward, output and stops, length.
 * True when s goes on (no event queued yet: the caller emits the delta). */
bool tr_engine_take_token(trellis_engine *e, engine_seq *s, int32_t tok,
                          const sampler_logprobs *lp);
/* s's mask for its next token, written to m (n_words): sets s->mask,
 * span_rule (and s->status when the constraint fails); returns what the
 * forward may restrict the row to (NULL: every logit). */
uint64_t *tr_engine_seq_mask(trellis_engine *e, engine_seq *s, uint64_t *m);
/* Samples s's next token from logits row l under s->mask and the
 * end-of-span rule; lp: its log-probs (NULL: none). */
int tr_engine_seq_sample(engine_seq *s, float *l, int32_t *tok, sampler_logprobs *lp);
/* Ends s when its row failed (mask, sampler status st) or drew a token
 * past the end of its span; true when it did. */
bool tr_engine_end_row(trellis_engine *e, engine_seq *s, tr_status st);
void tr_engine_step(trellis_engine *e);
/* The vocabulary-wide part of sampling for logits rows [r0, r1) (each row
 * with its own sampler, so two threads may take disjoint ranges). */
void tr_engine_sample_rows(trellis_engine *e, int32_t r0, int32_t r1);
/* Finishes sample s now (cancel, error): releases pages, queues DONE. */
void tr_engine_end_seq(trellis_engine *e, engine_seq *s, trellis_finish f,
                    int status, const char *error);

/* ---- compute.c ---- */
tr_status tr_worker_start(trellis_engine *e);
void tr_worker_stop(trellis_engine *e);
void tr_worker_post(trellis_engine *e, const tr_batch *b, const int32_t *tokens,
                 const int32_t *rows, int32_t n_rows, float *logits);
/* A forward pass of compute c with masks lm: on the compute thread (and
 * waited for) when there is one, else on the calling thread. */
tr_status tr_worker_forward(trellis_engine *e, const engine_compute *c, const tr_batch *b,
                            const int32_t *tokens, const int32_t *rows, int32_t n_rows,
                            float *logits, const tr_logit_masks *lm);
void tr_worker_post_sample(trellis_engine *e, int32_t r0, int32_t r1);
tr_status tr_worker_wait(trellis_engine *e);
/* The posted forward's masks are filled (row_mask): wakes its await. */
void tr_worker_masks_ready(trellis_engine *e);
/* tr_logit_masks.await of a posted forward (ctx: the engine). */
void tr_worker_await_masks(void *ctx);

/* ---- disk_tier.c: the radix cache's disk tier (radix/disk/kv_disk.h).
 * Every function is a no-op without one (e->disk NULL). Page bytes move
 * only while no forward pass runs: saves of evicted pages are copied out
 * at tr_disk_sync_saves, called before each forward and before a restore
 * writes pages (an evicted page is not rewritten before the next forward
 * pass, so its K/V is intact until then). ---- */
/* Opens the tier when options.kv_cache_dir is set; err says why not. */
tr_status tr_disk_open(trellis_engine *e, char *err, size_t cap);
void tr_disk_close(trellis_engine *e); /* finishes queued writes */
/* Intake: reads the pages past the memory match that the disk holds;
 * the request waits (disk_wait) until they are in the cache. */
void tr_disk_lookup(trellis_engine *e, engine_req *r);
void tr_disk_sync_saves(trellis_engine *e);
/* Between steps: puts the pages read into the cache, releases waiters. */
void tr_disk_answers(trellis_engine *e);
bool tr_disk_waiting_only(const trellis_engine *e); /* all waiters wait on it */
/* Drops the request's disk_node lock (admission, end); idempotent. */
void tr_disk_release(trellis_engine *e, engine_req *r);
/* Every waiter's lock (nothing can start while they pin pages); true if
 * there was one. */
bool tr_disk_release_all(trellis_engine *e);
bool tr_disk_any_waiting(const trellis_engine *e);
void tr_disk_flush(trellis_engine *e);  /* flush_cache: forget the tier too */
void tr_disk_spill(trellis_engine *e);  /* shutdown: save every cached page */
/* Its counters into st: the engine's (engine thread: publish_stats) and
 * the store's (any thread: trellis_get_stats, live). */
void tr_disk_stats(trellis_engine *e, trellis_stats *st);
void tr_disk_store_stats(trellis_engine *e, trellis_stats *st);
/* The model file's part of the fingerprint (engine_compute.kv_fingerprint):
 * metadata, tensor table, the first 4 KiB of every tensor. */
uint64_t tr_disk_file_fingerprint(const gguf_file *f);

#endif
