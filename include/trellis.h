/* trellis.h — the embeddable C API of Trellis: an engine that serves many
 * generation requests at once on one model (continuous batching, chunked
 * prefill, radix prefix cache, preemption, streaming, constraints).
 *
 * Layering: the top of the core library (runtime/engine implements it).
 * This header is self-contained: it includes only the C standard headers,
 * so an embedder needs nothing else from the source tree. The core links
 * libc, libm, pthreads, PCRE2 and jansson; no event loop: the embedder
 * drains the engine's output queue itself (see "Events").
 *
 * Threads. trellis_engine_new starts one engine thread that owns the model,
 * the KV page pool and the radix tree (and, unless no_overlap, one compute
 * thread that runs the forward passes). Every other function may be called
 * from any thread, concurrently: requests and cancellations travel to the
 * engine thread through a queue, results come back through another. No
 * callback runs on the embedder's threads except `wake`, which runs on the
 * engine thread (see below).
 *
 * Events. Every request produces, for each of its n samples, zero or more
 * TRELLIS_EVENT_DELTA events (only when stream is set) and exactly one
 * TRELLIS_EVENT_DONE event. Concatenating the text (and the tokens) of a
 * sample's DELTA and DONE events gives its whole completion; a stop string
 * is never part of it, not even partly (text that might begin a stop string
 * is held back until it cannot). After a successful trellis_submit the DONE
 * events always come, whatever happens (finish, error, cancel, even out of
 * memory), unless the engine is freed first. Events are taken with
 * trellis_poll (non-blocking) or
 * trellis_wait (blocking) and freed with trellis_event_free. The engine
 * calls options.wake (if set) on its own thread after queueing events,
 * at most once per engine step: an event loop calls uv_async_send there
 * and drains with trellis_poll on its own thread. wake must not call back
 * into the engine.
 *
 * Errors. Functions return 0 (TRELLIS_OK) or a negative status (the values
 * of the core's tr_status table); trellis_status_message() describes them,
 * and functions taking an `err` buffer write a sentence saying what is wrong
 * there. Bad input is never fatal.
 *
 * Ownership. Everything passed in a request is copied by trellis_submit
 * (the request may be freed when it returns), except a constraint's state,
 * which the engine takes over on success (see trellis_constraint).
 */
#ifndef TRELLIS_H
#define TRELLIS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The functions of this header are the only symbols libtrellis.so exports
 * (the library is built with hidden visibility). */
#if defined(__GNUC__) || defined(__clang__)
#define TRELLIS_API __attribute__((visibility("default")))
#else
#define TRELLIS_API
#endif

/* ---- status codes (equal to the core's tr_status values) ---- */
#define TRELLIS_OK 0
#define TRELLIS_ERR_NOMEM (-1)
#define TRELLIS_ERR_INVALID_ARG (-2)
#define TRELLIS_ERR_IO (-3)
#define TRELLIS_ERR_FORMAT (-4)
#define TRELLIS_ERR_UNSUPPORTED (-5)
#define TRELLIS_ERR_NOT_FOUND (-6)
#define TRELLIS_ERR_OVERFLOW (-7)
#define TRELLIS_ERR_LIMIT (-8)
#define TRELLIS_ERR_STATE (-9)
#define TRELLIS_ERR_FULL (-10)
#define TRELLIS_ERR_CANCELLED (-11)
#define TRELLIS_ERR_TOO_LONG (-12)
#define TRELLIS_ERR_INTERNAL (-13)

/* The code's name as the core spells it ("TR_ERR_NOMEM") and a message;
 * never NULL. */
TRELLIS_API const char *trellis_status_name(int status);
TRELLIS_API const char *trellis_status_message(int status);

/* The version of the library a program runs with (the shared library
 * may be newer than the program), as CMake's project(VERSION) names it:
 * "0.1.0" (static storage), and the same as one number for comparisons,
 * MAJOR * 1000000 + MINOR * 1000 + PATCH (1000 for 0.1.0; SQLite's
 * scheme). */
TRELLIS_API const char *trellis_version(void);
TRELLIS_API int trellis_version_number(void);

#define TRELLIS_MAX_TOP_LOGPROBS 20
#define TRELLIS_MAX_STOP 16     /* stop strings per request */
#define TRELLIS_MAX_STOP_LEN 256 /* bytes per stop string */
#define TRELLIS_MAX_N 64        /* samples per request */
#define TRELLIS_MAX_THREADS 512 /* trellis_engine_options.threads */

typedef struct trellis_engine trellis_engine;

/* ------------------------------------------------------------------ */
/* Engine                                                              */
/* ------------------------------------------------------------------ */

typedef void (*trellis_wake_fn)(void *user);

/* trellis_engine_options.load:
 *   MMAP  map the file read-only: nothing read up front, pages shared with
 *         the page cache and other processes.
 *   READ  read the whole file into memory advised for transparent huge
 *         pages: a copy of the file, and faster passes over the weights (no
 *         TLB miss every 4 KiB; docs/performance.md, "Weights in huge
 *         pages").
 *   AUTO  READ when transparent huge pages are enabled and the file takes
 *         at most a quarter of the RAM, else MMAP (also MMAP if the memory
 *         for READ cannot be had). */
enum { TRELLIS_LOAD_AUTO = 0, TRELLIS_LOAD_MMAP = 1, TRELLIS_LOAD_READ = 2 };

/* trellis_engine_options.kv_type_k / kv_type_v: how the KV cache stores
 * keys and values (each quantized once, when stored):
 *   F16  2 bytes per element.
 *   Q8   int8 with one F16 scale per (position, KV head): ~0.52x the
 *        bytes of F16 (head_dim + 2 bytes per head).
 *   Q4   4-bit with one F16 scale per 32 elements of a head: ~0.28x
 *        (head_dim / 2 + head_dim / 16 bytes per head; head_dim a
 *        multiple of 32).
 * docs/performance.md has what each costs in quality and speed. */
enum { TRELLIS_KV_F16 = 0, TRELLIS_KV_Q8 = 1, TRELLIS_KV_Q4 = 2 };

/* "f16", "q8", "q4" (the spelling of --kv-type); "?" for other values.
 * Static storage. */
TRELLIS_API const char *trellis_kv_type_name(int32_t kv_type);

typedef struct trellis_engine_options {
    const char *device;       /* compute backend by name: NULL or "cpu"
                                 (default), or "cuda" / "cuda:N" (GPU N;
                                 in builds made with the CUDA toolkit).
                                 An unknown or unavailable name fails
                                 trellis_engine_new, err listing
                                 the backends there are. Borrowed for the
                                 call only. */
    int32_t threads;          /* CPU compute threads, at most
                                 TRELLIS_MAX_THREADS; 0 = one per core */
    int32_t max_batch_tokens; /* tokens per step: decode rows + prefill
                                 chunks (default 512) */
    int32_t max_running;      /* sequences running at once (default 64;
                                 clamped to max_batch_tokens) */
    int32_t chunk_size;       /* prefill tokens per sequence per step
                                 (default 256) */
    int32_t page_size;        /* tokens per KV page (default 16) */
    int32_t kv_pages;         /* KV pool size in pages; 0 = from kv_mb */
    int32_t kv_mb;            /* KV memory in MiB when kv_pages == 0
                                 (default 512) */
    int32_t ctx;              /* context limit per sequence (prompt +
                                 completion); 0 = the model's */
    int32_t lpm_max_waiting;  /* order the waiting queue by longest cached
                                 prefix while it holds at most this many
                                 sequences, else by arrival (default 128;
                                 0 = always arrival order) */
    bool no_radix;            /* share no KV across requests (the n samples
                                 of one request still share their prompt) */
    bool no_overlap;          /* run forward passes on the engine thread
                                 instead of a compute thread */
    int32_t grammar_cache_mb; /* compiled grammars kept for reuse,
                                 memos included (default 256) */
    int32_t spec_ngram;       /* speculative decoding with n-gram drafts
                                 (prompt lookup): at most this many draft
                                 tokens per sequence and step, verified in
                                 the same forward pass (1..32; default 0:
                                 off). The output is the same, token for
                                 token, at any temperature, constraints and
                                 log-probs included (a constraint must have
                                 rollback to speculate). With
                                 no_jump_forward, the bytes a constraint
                                 forces are drafts too, verified. */
    int32_t load;             /* how the model file is brought in: one of
                                 TRELLIS_LOAD_* (default AUTO) */
    int32_t kv_type_k;        /* TRELLIS_KV_* of the cached keys (default
                                 F16) */
    int32_t kv_type_v;        /* and of the cached values (default F16) */
    const char *kv_cache_dir; /* the prefix cache's disk tier: pages the
                                 cache evicts (and, at engine_free, every
                                 cached page) are kept as files under this
                                 folder (created if missing; one
                                 subfolder per model and KV format) and
                                 read back when a later prompt, in this
                                 process or another after it, continues
                                 past what memory holds. NULL: no disk
                                 tier. Copied. */
    int32_t kv_cache_disk_mb; /* the disk tier's bound in MiB, least
                                 recently used records deleted first
                                 (default 4096) */
    bool kv_full_pages;       /* keep every layer's K/V of a position in
                                 one page. By default, a model with
                                 sliding-window layers (Gemma 3) keeps
                                 those layers in pages of their own, freed
                                 (or left to the prefix cache as
                                 evictable) once no window reads them: a
                                 long sequence holds about a third of the
                                 bytes, and a cached prefix is reused up
                                 to where its windows are still held. */
    const char *draft_model;  /* speculative decoding with a draft model:
                                 a GGUF file of a smaller model with the
                                 same vocabulary (every token's bytes and
                                 type equal, else trellis_engine_new
                                 refuses it, naming the first difference)
                                 proposes tokens greedily; the target
                                 verifies them as it does n-gram drafts,
                                 so the output is the same, token for
                                 token, at any temperature (unless
                                 draft_sampling). It runs on the
                                 same device and threads, with KV pages of
                                 its own (as many positions as the
                                 target's pool holds). Where n-gram
                                 drafts are on too, they go first; the
                                 draft model proposes when they have none.
                                 NULL: none. Copied. */
    int32_t spec_draft;       /* the draft model's tokens a sequence and
                                 step at most (1..16, default 4; the
                                 length adapts to what is kept) */
    bool draft_sampling;      /* the draft model draws its drafts from its
                                 own distribution (the request's
                                 temperature, top_k/top_p/min_p, its 256
                                 likeliest tokens) where a request samples
                                 (temperature > 0, no end_span, past
                                 min_tokens), and the target keeps each
                                 with the speculative sampling rule
                                 (min(1, p/q), else a draw from
                                 max(0, p - q)): the output follows the
                                 target's distribution exactly and more
                                 drafts are kept than greedy drafts at
                                 high temperatures, but a seeded request
                                 no longer repeats plain decoding's tokens
                                 (nor its own when the drafting differs:
                                 drafts adapt to the batch). false
                                 (default): greedy drafts, the output is
                                 plain decoding's, token for token. */
    trellis_wake_fn wake;     /* may be NULL */
    void *wake_user;
} trellis_engine_options;

TRELLIS_API void trellis_engine_options_default(trellis_engine_options *o);

/* The integer members of trellis_engine_options as the engine's one table
 * of options describes them: the default trellis_engine_options_default
 * sets and the bounds trellis_engine_new checks, so that a program taking
 * them as flags (the `trellis` commands) states and checks the same
 * numbers without copying them. Values in [min, max] are used as given;
 * above max is an error; below min, what happens depends on the option
 * (the default, min, or an error: see trellis_engine_options), so a
 * command line should refuse them. Bounds that depend on the model (ctx
 * beyond the model's context) are checked only when the model loads. */
typedef struct trellis_engine_option_desc {
    const char *name;  /* the member: "threads", "kv_mb" */
    int32_t def;       /* what trellis_engine_options_default sets */
    int32_t min, max;  /* inclusive */
    const char *note;  /* what a special value means ("0 = one per
                          core"), or "" */
} trellis_engine_option_desc;

/* The i-th option (0, 1, ... in the order of the table), NULL past the
 * last; _find looks one up by name, NULL when there is none. Static
 * storage; any thread. */
TRELLIS_API const trellis_engine_option_desc *trellis_engine_option_at(int32_t i);
TRELLIS_API const trellis_engine_option_desc *trellis_engine_option_find(const char *name);

/* Loads the GGUF model at model_path (NULL: the default model path, see
 * base/paths.h), allocates the KV pool and starts the engine.
 * On failure *out is untouched and err (may be NULL) says why. */
TRELLIS_API int trellis_engine_new(const char *model_path,
                       const trellis_engine_options *options,
                       trellis_engine **out, char *err, size_t err_cap);

/* Stops the engine and frees everything: unfinished requests are dropped
 * (no more events), unread events are freed. NULL is a no-op. No other call
 * on e may be in progress or follow (in particular not a trellis_wait on
 * another thread), and it must not be called from `wake`. */
TRELLIS_API void trellis_engine_free(trellis_engine *e);

typedef struct trellis_engine_info {
    const char *device;  /* the backend in use: "cpu", "cuda" (static) */
    int32_t n_vocab;
    int32_t n_ctx;       /* the context limit in force */
    int32_t page_size;
    int32_t kv_pages;
    int32_t max_batch_tokens, max_running, chunk_size;
    int32_t threads;
    int32_t eos;         /* -1 if none */
    bool add_bos;
    bool no_radix, overlap;
    int32_t load;        /* TRELLIS_LOAD_MMAP or _READ: what AUTO chose */
    int32_t kv_type_k, kv_type_v; /* TRELLIS_KV_* in force */
    int64_t kv_bytes;    /* the KV pool's size in bytes; 0 when unknown */
    const char *kv_cache_dir; /* the disk tier's folder for this model and
                                 KV format, NULL without one; lives as
                                 long as the engine */
    int32_t kv_cache_disk_mb; /* its bound (0 without one) */
    int32_t kv_units;    /* pages per position run: 1 = full pages; more:
                            the layers are cut into this many units, the
                            windowed ones freed apart (kv_full_pages) */
    const char *arch;    /* the model's architecture ("llama", "gemma3",
                            ...; "custom" for an engine on a custom
                            compute object); lives as long as the engine */
    int32_t n_layers;    /* 0 when unknown */
    const char *draft_arch; /* the draft model's architecture, NULL
                               without one (options.draft_model) */
    int32_t draft_n_layers;
    bool draft_sampling;   /* options.draft_sampling, with a draft model */
    const char *chat_template; /* the GGUF's tokenizer.chat_template text
                                  (Jinja, as the file has it), NULL when
                                  the file has none; lives as long as the
                                  engine */
} trellis_engine_info;

TRELLIS_API void trellis_engine_get_info(const trellis_engine *e, trellis_engine_info *out);

/* Layer `layer`'s attention: its sliding window in tokens (a local layer
 * attends to at most that many positions back), 0 for global attention,
 * -1 when layer is outside [0, n_layers). */
TRELLIS_API int32_t trellis_engine_layer_window(const trellis_engine *e, int32_t layer);

/* ------------------------------------------------------------------ */
/* Grammars: compiled constraints, shared by handle                    */
/* ------------------------------------------------------------------ */

/* A constraint (regex, choice list, JSON Schema, any JSON object, EBNF)
 * compiled against an engine's vocabulary into an immutable,
 * reference-counted handle. Requests refer to a handle
 * (trellis_request.grammar); the engine constrains each of their samples
 * with a fresh matcher over it.
 *
 * Compile cache. trellis_grammar_compile first looks the constraint up in
 * the engine's grammar cache, keyed by (kind, text, options): a hit
 * returns the cached handle (a new reference) without compiling. The
 * cache holds at most trellis_engine_options.grammar_cache_mb of compiled
 * grammars (their automata and their mask memos) and evicts the least
 * recently used entries beyond that; an evicted grammar lives on in the
 * requests and handles that still hold it. Concurrent compiles of the
 * same key compile once (the others wait for it). Failed compiles are not
 * cached.
 *
 * Shared masks. Each compiled grammar memoizes the token mask of every
 * automaton state it has met; the memo belongs to the grammar, so every
 * request using the same handle finds warm masks.
 *
 * Threads. trellis_grammar_compile blocks its caller for the compile (from
 * microseconds for a cached or small grammar to the compile-time budget)
 * and may be called from any thread, concurrently; an event loop calls it
 * on a worker pool (libuv's uv_queue_work), never on its loop thread. The
 * engine thread never compiles. _ref/_release and the accessors are
 * thread-safe. The concurrency design of the cache and the memo is
 * documented in runtime/engine (grammar_cache_internal.h).
 *
 * Errors. A bad constraint is TRELLIS_ERR_FORMAT (syntax; err says what
 * and where: byte offset, line:column, or JSON pointer for schemas),
 * TRELLIS_ERR_UNSUPPORTED (a construct or schema keyword that cannot be
 * enforced: named), or TRELLIS_ERR_LIMIT (a compile budget: states, bytes
 * or time; named). A kind this build cannot compile yet is
 * TRELLIS_ERR_UNSUPPORTED. */
typedef struct trellis_grammar trellis_grammar;

typedef enum trellis_grammar_kind {
    TRELLIS_GRAMMAR_REGEX = 1,       /* text: a regex (grammar/grammar.h
                                        dialect), matched as a whole */
    TRELLIS_GRAMMAR_CHOICE = 2,      /* text: a JSON array of strings; the
                                        output is exactly one of them */
    TRELLIS_GRAMMAR_JSON_SCHEMA = 3, /* text: a JSON Schema document */
    TRELLIS_GRAMMAR_JSON_OBJECT = 4, /* any JSON object; text ignored (NULL
                                        allowed) */
    TRELLIS_GRAMMAR_EBNF = 5,        /* text: GBNF / EBNF with regex
                                        terminals, start rule `root` */
} trellis_grammar_kind;

/* trellis_grammar_options.whitespace (JSON kinds; the same values as
 * grammar/'s grammar_json_ws) */
enum {
    TRELLIS_WS_FLEXIBLE = 0, /* JSON whitespace between tokens, each run at
                                most max_ws_run bytes */
    TRELLIS_WS_COMPACT = 1,  /* none */
    TRELLIS_WS_PRETTY = 2,   /* newlines and `indent` spaces per level */
};

/* trellis_grammar_options.json_numbers (JSON kinds; the same values as
 * grammar/'s grammar_json_numbers) */
enum {
    TRELLIS_JSON_NUMBERS_CANONICAL = 0, /* "integer": an optional minus and
                                           digits (never 1.0, 1e5, 01, -0);
                                           other numbers: at most 20
                                           fraction and 3 exponent digits */
    TRELLIS_JSON_NUMBERS_FULL = 1,      /* any JSON number with a valid
                                           value (1.0 and 1e5 are integers,
                                           as JSON Schema says) */
};

/* trellis_grammar_options.property_order (JSON Schema; the same values as
 * grammar/'s grammar_json_property_order) */
enum {
    TRELLIS_PROPERTY_ORDER_SCHEMA = 0, /* the order of `properties` */
    TRELLIS_PROPERTY_ORDER_ANY = 1,    /* any order: each listed property
                                          at most once, every required one
                                          before `}` (objects of more than
                                          4 listed properties are counted
                                          and their names kept unique by
                                          the matcher; grammar text, which
                                          has no matcher, keeps schema
                                          order past 10) */
};

typedef struct trellis_grammar_options {
    bool lenient;       /* JSON Schema: ignore keywords that cannot be
                           enforced (with a warning) instead of refusing
                           the schema */
    int32_t whitespace; /* TRELLIS_WS_*; default FLEXIBLE */
    int32_t max_ws_run; /* FLEXIBLE: most whitespace bytes in a row
                           (0..1000, default 24: deep pretty-printed
                           output fits; bounds loops on spaces) */
    int32_t indent;     /* PRETTY: spaces per level (0..16, default 2) */
    int32_t json_numbers; /* TRELLIS_JSON_NUMBERS_*; default CANONICAL
                             (enum / const values keep every spelling) */
    int32_t property_order; /* TRELLIS_PROPERTY_ORDER_*; default SCHEMA
                               (JSON_SCHEMA only) */
} trellis_grammar_options;

TRELLIS_API void trellis_grammar_options_default(trellis_grammar_options *o);

/* Compiles text[0..len) (len 0: strlen; text may be NULL for
 * JSON_OBJECT) as `kind`, or finds it in the cache. options may be NULL
 * (defaults). On success *out holds a new reference (release it with
 * trellis_grammar_release). On failure *out is untouched and err (may be
 * NULL) says why. */
TRELLIS_API int trellis_grammar_compile(trellis_engine *e, trellis_grammar_kind kind,
                                        const char *text, size_t len,
                                        const trellis_grammar_options *options,
                                        trellis_grammar **out, char *err, size_t err_cap);
/* The same as kind CHOICE with the JSON array of choices[0..n). */
TRELLIS_API int trellis_grammar_compile_choices(trellis_engine *e,
                                                const char *const *choices, int32_t n,
                                                trellis_grammar **out, char *err,
                                                size_t err_cap);
/* Adds a reference; returns g. */
TRELLIS_API trellis_grammar *trellis_grammar_ref(trellis_grammar *g);
/* Drops a reference (frees at zero); NULL is a no-op. A handle holds
 * what it needs (its compiled grammar and the vocabulary), so it outlives
 * its cache entry and may even be released after trellis_engine_free; it
 * constrains only requests of the engine that compiled it (submit refuses
 * it elsewhere). */
TRELLIS_API void trellis_grammar_release(trellis_grammar *g);
TRELLIS_API trellis_grammar_kind trellis_grammar_get_kind(const trellis_grammar *g);
/* Warnings of a lenient compile (keywords ignored, one per line, each with
 * its JSON pointer); "" when none. Borrowed, valid while g lives. */
TRELLIS_API const char *trellis_grammar_warnings(const trellis_grammar *g);

typedef struct trellis_grammar_cache_stats {
    uint64_t hits, misses;   /* lookups by trellis_grammar_compile and by
                                requests' `regex`; one that waited for a
                                concurrent compile of its key is a hit */
    uint64_t compiles;       /* successful compiles (== misses that
                                compiled) */
    uint64_t failures;       /* compiles that returned an error (misses ==
                                compiles + failures + compiles running) */
    uint64_t evictions;
    int32_t entries;
    uint64_t bytes;          /* held by cached grammars, memos included */
    uint64_t budget_bytes;
    uint64_t masks_computed; /* masks computed by walking the vocabulary,
                                over all grammars */
    uint64_t masks_reused;   /* masks taken from a grammar's memo */
    uint64_t exhausted;      /* grammars dropped because their automaton
                                reached its state budget (every request on
                                them fails from then on); the next lookup
                                compiles the text afresh */
} trellis_grammar_cache_stats;

TRELLIS_API void trellis_grammar_cache_get_stats(trellis_engine *e,
                                                 trellis_grammar_cache_stats *out);

/* Exact numbers in JSON Schemas. A JSON parser in front of the engine
 * (jansson keeps 64-bit integers and doubles) cannot hold a schema's
 * `maximum: 18446744073709551615` or `const: 0.12345678901234567891`.
 * Before parsing JSON text that carries a schema, call this: every
 * number literal outside strings that such a parser cannot hold (an
 * integer outside int64; with integers_only false also a decimal of more
 * than 15 significant digits or with an exponent beyond +-300) becomes a
 * string that the JSON Schema compiler reads back as exactly that number
 * (and that the parser carries unchanged when the schema is written out
 * again). *out: malloc'd text (free()) when something was rewritten,
 * NULL when the text needs no change. Returns false on out-of-memory. */
TRELLIS_API bool trellis_json_exact_numbers(const char *text, size_t len, bool integers_only,
                                            char **out, size_t *out_len);
/* Whether a parsed string value (bytes s[0..len)) is such a number;
 * *lit, *lit_len: its literal as the text wrote it. */
TRELLIS_API bool trellis_json_exact_string(const char *s, size_t len, const char **lit,
                                           size_t *lit_len);

/* ------------------------------------------------------------------ */
/* Requests                                                            */
/* ------------------------------------------------------------------ */

/* A token-level constraint, called on the engine thread. fill_mask writes
 * the allowed tokens of the current state as a bitset of n_words =
 * ceil(n_vocab / 64) words (bit t % 64 of word t / 64); accept advances by
 * the sampled token; is_done says the constraint is satisfied and complete
 * (generation stops, finish "stop"; may be NULL). clone (needed when n > 1)
 * copies a state that has accepted nothing yet. free releases a state.
 * Return 0 or a negative status; an error ends the sample with finish
 * TRELLIS_FINISH_ERROR. fill_mask runs while the step's forward pass is
 * computing (it overlaps).
 *
 * Jump-forward (optional: both of forced_bytes and rollback, else never).
 * forced_bytes writes the bytes every continuation of the current state
 * must start with (at most cap; *len = 0 when there is a choice) without
 * changing the state; rollback undoes the last n accepted tokens. After a
 * sampled token is accepted, when bytes are forced, the engine re-encodes
 * the token's bytes followed by the forced bytes with the model's
 * tokenizer, rolls the sampled token back and accepts the new tokens one
 * by one (stopping at the first one refused; if the first is refused it
 * accepts the sampled token again, so accept must be deterministic). The
 * new tokens replace the sampled one in the output and are fed to the
 * model together, as one chunk, in the next step: one forward pass instead
 * of one per forced token. The built-in regex constraint has both. */
typedef struct trellis_constraint_ops {
    int (*fill_mask)(void *state, uint64_t *mask, size_t n_words);
    int (*accept)(void *state, int32_t token);
    bool (*is_done)(void *state);
    void *(*clone)(void *state);
    void (*free)(void *state);
    int (*forced_bytes)(void *state, uint8_t *buf, size_t cap, size_t *len);
    int (*rollback)(void *state, int32_t n_tokens);
} trellis_constraint_ops;

typedef struct trellis_message {
    const char *role;    /* "system", "user" or "assistant" */
    const char *content; /* UTF-8 */
} trellis_message;

typedef struct trellis_logit_bias {
    int32_t token;
    float bias; /* -INFINITY bans the token */
} trellis_logit_bias;

typedef struct trellis_request {
    /* The prompt: exactly one of text, token ids, or chat messages. */
    const char *prompt;       /* UTF-8 text */
    size_t prompt_len;        /* 0: strlen(prompt) */
    bool parse_special;       /* control-token texts in prompt become tokens */
    const int32_t *tokens;    /* token ids, used as given (no BOS added) */
    int32_t n_tokens;
    const trellis_message *messages; /* rendered with the model's template */
    int32_t n_messages;
    bool no_generation_prompt; /* messages: do not open an assistant turn */
    bool continue_final_message; /* messages: the last one, an assistant
                                    message, stays open (no end of turn, no
                                    new turn): the completion continues its
                                    text (assistant prefill) */

    /* Sampling (the sampler module's semantics). */
    float temperature;        /* default 1; 0 = greedy */
    int32_t top_k;            /* 0 = off */
    float top_p;              /* 1 = off */
    float min_p;              /* 0 = off */
    float repetition_penalty; /* 1 = off */
    float presence_penalty, frequency_penalty;
    int32_t penalty_last_n;   /* default 64; -1 = all */
    uint64_t seed;            /* sample i of n uses seed + i */
    const trellis_logit_bias *logit_bias;
    int32_t n_logit_bias;

    int32_t max_tokens;       /* >= 1, or -1: as many as context and pool
                                 allow, or 0: prefill only (the prompt's KV
                                 is computed and cached in the radix tree,
                                 nothing is sampled; each sample's DONE
                                 comes with finish LENGTH, no text and 0
                                 completion_tokens). Default 128. */
    int32_t min_tokens;       /* 0..max_tokens (as resolved): before a
                                 sample has this many tokens, its
                                 end-of-generation tokens (unless
                                 ignore_eos) and stop token ids are masked
                                 out, and a stop string does not end it
                                 unless it ends at or after that token (an
                                 occurrence ending earlier is output as
                                 text). A constraint that completes still
                                 ends it. Default 0. */
    int32_t n;                /* samples forked from one prompt (1..64) */
    bool logprobs;            /* report the chosen tokens' log-probs */
    int32_t top_logprobs;     /* and this many alternatives (0..20) */
    /* Prompt log-probs (SGLang's return_logprob + logprob_start_len,
     * OpenAI completions' echo with logprobs). When prompt_logprobs is
     * set, the log-prob of each prompt token at positions
     * prompt_logprobs_start .. n_prompt-1 given the tokens before it
     * (positions count the prompt's tokens as the model is fed them, BOS
     * included), with the prompt_top_logprobs (0..20) most likely
     * alternatives at each position. They are the model's own
     * distribution: log_softmax of the logits at temperature 1, without
     * penalties, logit_bias, constraint or truncation (so they equal the
     * log-probs `logprobs` reports for the same tokens when generated
     * greedily without those). Position 0 has none (nothing precedes it):
     * its entry has logprob NAN and n_top 0. They come with sample 0's
     * first event (trellis_event.prompt_logprobs); max_tokens 0 (prefill
     * only) works.
     * Cost and the prefix cache. The prefill computes the output
     * projection for those positions only (at most 64 rows per engine
     * step, so a long prompt takes more steps). Positions the prefix
     * cache holds are not recomputed by a prefill, so sample 0 of such a
     * request matches the cache only up to the position before the first
     * log-prob it needs (max(start, 1) - 1, rounded down to a page) and
     * computes the rest afresh, as SGLang does; the other samples and
     * later requests share what it computed. A negative
     * prompt_logprobs_start counts from the end (-1: the last prompt
     * token alone, SGLang's default); outside [-prompt tokens, prompt
     * tokens) it is refused by trellis_submit (TRELLIS_ERR_INVALID_ARG). */
    bool prompt_logprobs;
    int32_t prompt_logprobs_start;
    int32_t prompt_top_logprobs;
    bool ignore_eos;          /* end-of-generation tokens do not stop */
    int32_t spec_ngram;       /* speculative decoding for this request
                                 (trellis_engine_options.spec_ngram): -1
                                 (trellis_request_default) the engine's
                                 option, 0 off, 1..32 at most this many
                                 drafts a step, also on an engine whose
                                 option is 0 */
    int32_t spec_draft;       /* drafts from the engine's draft model
                                 (trellis_engine_options.draft_model): -1
                                 (trellis_request_default) the engine's
                                 spec_draft, 0 off, 1..16 at most this
                                 many a step; ignored without a draft
                                 model */
    const char *const *stop;  /* stop strings (not emitted) */
    int32_t n_stop;
    const int32_t *stop_tokens; /* stop token ids (not emitted) */
    int32_t n_stop_tokens;
    /* Stop patterns (SGLang's stop_regex): regular expressions in the
     * grammar's regex dialect, each at most TRELLIS_MAX_STOP_LEN bytes, at
     * most TRELLIS_MAX_STOP of them. The sample ends where its output
     * first contains a match (the earliest END of a match; ties: the
     * match starting first, a stop string before a pattern); the text
     * before the match is the output, the match is not. Text that may
     * begin a match is held back, at most 256 bytes; a longer match's
     * older part may already have been emitted when it completes. ^ and
     * $ hold at the match's own ends. A pattern matching the empty
     * string, or one that does not compile within the stop budgets (100
     * ms, 10,000 DFA states), is refused by trellis_submit. The DONE
     * event's stop_index is n_stop + k for pattern k. min_tokens applies
     * as for stop strings. */
    const char *const *stop_regex;
    int32_t n_stop_regex;

    /* Constraint (at most one of grammar, regex, constraint): a compiled
     * grammar (borrowed: trellis_submit takes its own reference), a regex
     * the whole completion must match (compiled through the engine's
     * grammar cache, as trellis_grammar_compile with kind REGEX), or a
     * custom constraint. The engine takes over constraint_state on success
     * (it calls ops->free); on failure the caller keeps it. A grammar or
     * regex constraint is done (finish "stop", stop_token -1) as soon as
     * the text is complete and no byte can extend it, without sampling the
     * end-of-generation token that is then the only one allowed. */
    const trellis_grammar *grammar;
    const char *regex;
    const trellis_constraint_ops *constraint;
    void *constraint_state;
    bool no_jump_forward;     /* sample every token, even those the
                                 constraint forces (see
                                 trellis_constraint_ops) */
    int32_t end_span;         /* the end-of-span rule: TRELLIS_END_SPAN_*
                                 (default AUTO; see below) */

    uint64_t cache_namespace; /* KV is shared only within a namespace
                                 (63 bits used); default 0 */
    bool stream;              /* DELTA events as tokens come */
    void *user;               /* echoed in every event */
} trellis_request;

/* The end-of-span rule (trellis_request.end_span): ending a constrained
 * span where the model wants to end it.
 *
 * Why. In a state where the text so far is complete but may go on (an
 * unbounded quantifier: `[A-Z][a-z]+`, `-?\d+(\.\d+)?`), a model that
 * wants to leave the span (a comma after a name, a full stop after a
 * number) is masked to the grammar's continuations and almost never picks
 * the end-of-generation token, so plain masking runs to max_tokens
 * (`Theo Diazielloiello...`, `10.121212...`).
 *
 * The rule. At a sampling step of a constrained sample whose mask allows
 * an end-of-generation token (the constraint may end here: for grammars,
 * an accepting state), let p be the request's sampling distribution over
 * the WHOLE vocabulary, without the mask (penalties, logit_bias,
 * temperature, top_k, top_p, min_p as usual), and F the tokens the mask
 * forbids. The span ends with probability
 *     p_end = p(F) + p(end-of-generation tokens);
 * otherwise the next token is drawn from p restricted to the allowed
 * tokens that do not end generation. One draw does both: the token is
 * sampled from p (the PRNG advances exactly as for any sample); a
 * forbidden token ends the span (it is not output and not counted in
 * completion_tokens; the DONE event says finish STOP, stop_token -1), an
 * end-of-generation token ends it as usual (stop_token = that token), any
 * other token is taken. Greedy (temperature 0): the span ends iff the
 * argmax of the unmasked logits is forbidden or ends generation; otherwise
 * that argmax is taken, the token plain masking would have taken too. In
 * the other steps (the mask allows no end-of-generation token) sampling
 * is masked as usual, and so are the log-probs of every token taken
 * (logprobs report the masked distribution, as for any constrained
 * token). Jump-forward, n > 1 (each sample decides alone), stop strings
 * and stop tokens work as usual.
 *
 *   AUTO  on for grammar handles of kind REGEX and CHOICE and for a
 *         request's `regex`; off for other kinds and custom constraints
 *         (a JSON grammar ends where its brackets close)
 *   ON    on for any constraint (a custom one says it may end by allowing
 *         an end-of-generation token); no effect without a constraint
 *   OFF   plain masking */
enum {
    TRELLIS_END_SPAN_AUTO = 0,
    TRELLIS_END_SPAN_ON = 1,
    TRELLIS_END_SPAN_OFF = 2,
};

/* temperature 1, top_p 1, repetition 1, penalty_last_n 64, max_tokens 128,
 * n 1, everything else 0 / NULL / false. */
TRELLIS_API void trellis_request_default(trellis_request *r);

/* Validates and copies the request, tokenizes the prompt and compiles
 * its regex through the grammar cache (both on the calling thread, never
 * on the engine's), and queues it. Requests that can never run
 * are rejected here, with err saying why: empty prompt, min_tokens above
 * max_tokens,
 * prompt + max_tokens beyond the context (TRELLIS_ERR_TOO_LONG) or beyond
 * the whole KV pool (TRELLIS_ERR_LIMIT), bad sampling parameters, a bad
 * regex, etc. On success *id_out (may be NULL) receives the request id
 * (never 0). */
TRELLIS_API int trellis_submit(trellis_engine *e, const trellis_request *r,
                   uint64_t *id_out, char *err, size_t err_cap);

/* Asks the engine to stop request id: its pages are freed at the next
 * step and its unfinished samples end with finish CANCELLED. Unknown or
 * finished ids are ignored. Asynchronous; returns 0 or TRELLIS_ERR_NOMEM. */
TRELLIS_API int trellis_cancel(trellis_engine *e, uint64_t id);

/* ------------------------------------------------------------------ */
/* Events                                                              */
/* ------------------------------------------------------------------ */

typedef enum trellis_event_kind {
    TRELLIS_EVENT_DELTA = 1,
    TRELLIS_EVENT_DONE = 2,
} trellis_event_kind;

typedef enum trellis_finish {
    TRELLIS_FINISH_NONE = 0,
    TRELLIS_FINISH_STOP = 1,      /* EOS, stop token, stop string, or the
                                     constraint completed */
    TRELLIS_FINISH_LENGTH = 2,    /* max_tokens or the context */
    TRELLIS_FINISH_CANCELLED = 3,
    TRELLIS_FINISH_ERROR = 4,
} trellis_finish;

/* "stop", "length", "cancelled", "error", "" */
TRELLIS_API const char *trellis_finish_name(trellis_finish f);

typedef struct trellis_top_logprob {
    int32_t token;
    float logprob;
} trellis_top_logprob;

typedef struct trellis_logprob {
    int32_t token;
    float logprob;
    int32_t n_top;
    trellis_top_logprob top[TRELLIS_MAX_TOP_LOGPROBS];
} trellis_logprob;

typedef struct trellis_metrics {
    double queue_ms;   /* submit -> first scheduled */
    double ttft_ms;    /* submit -> first token sampled */
    double tpot_ms;    /* mean time per output token after the first */
    double e2e_ms;     /* submit -> done */
    int32_t prompt_tokens;
    int32_t cached_tokens;     /* prompt tokens found in the cache */
    int32_t completion_tokens; /* sampled (stop tokens included) and
                                  forced (jump-forward) */
    int32_t forced_tokens;     /* of which placed by jump-forward */
    int32_t spec_accepted_tokens; /* of which drafts verified in the pass
                                     of the token before them (spec_ngram) */
    int32_t preemptions;
} trellis_metrics;

typedef struct trellis_event {
    trellis_event_kind kind;
    uint64_t request_id;
    int32_t index;        /* sample index, 0..n-1 */
    void *user;           /* the request's user pointer */

    /* New output since this sample's previous event. Text is valid UTF-8
     * (it may contain NUL bytes, as token text may) followed by a NUL;
     * a stop string is never in it. Tokens are those sampled, in order,
     * except a stopping token (EOS, stop id), which is not output; the
     * tokens whose text a stop string cut are included. Tokens placed by
     * jump-forward (not sampled: the constraint forced their text) are
     * output like sampled ones; their log-prob entry has logprob 0 (the
     * constraint gives them probability 1) and n_top 0. When jump-forward
     * re-encodes the sampled token into a different first token, that one
     * too is reported as forced; when it keeps the sampled token, its
     * sampled log-probs are reported. All of it lives in the event's
     * memory (trellis_event_free). */
    const char *text;
    size_t text_len;
    const int32_t *tokens;
    const trellis_logprob *logprobs; /* [n_tokens] when asked, else NULL */
    int32_t n_tokens;

    /* DONE only. */
    trellis_finish finish;
    int status;           /* TRELLIS_OK unless finish is ERROR */
    const char *error;    /* "" unless finish is ERROR */
    int32_t stop_index;   /* the stop string that matched (n_stop + k:
                             stop pattern k), else -1 */
    int32_t stop_token;   /* the token that stopped (EOS/stop id), else -1 */
    bool request_done;    /* the request's last DONE event */
    trellis_metrics metrics;

    /* Prompt log-probs (trellis_request.prompt_logprobs): in sample 0's
     * first event, DELTA or DONE (NULL and 0 in every other event, and
     * when the sample ended before its prompt was computed: error,
     * cancel). prompt_logprobs[i] is prompt position
     * prompt_logprobs_start + i (the start as resolved: never negative):
     * the prompt token there (token), its
     * log-prob (NAN at position 0) and its n_top alternatives, most
     * likely first. n_prompt_logprobs = prompt tokens -
     * prompt_logprobs_start. They live in the event's memory
     * (trellis_event_free). */
    const trellis_logprob *prompt_logprobs;
    int32_t n_prompt_logprobs;
    int32_t prompt_logprobs_start;
} trellis_event;

/* Takes the next event: 1 and *out set (free it with trellis_event_free),
 * or 0 when the queue is empty. */
TRELLIS_API int trellis_poll(trellis_engine *e, trellis_event **out);

/* Waits up to timeout_ms (-1: forever) for an event: 1 and *out set, or 0
 * on time-out. */
TRELLIS_API int trellis_wait(trellis_engine *e, int timeout_ms, trellis_event **out);

TRELLIS_API void trellis_event_free(trellis_event *ev);

/* ------------------------------------------------------------------ */
/* Statistics and utilities                                            */
/* ------------------------------------------------------------------ */

typedef struct trellis_stats {
    int32_t running, waiting;
    int32_t pages_total, pages_used, pages_cached, pages_free;
    double cache_hit_rate;    /* cached / prompt tokens of admitted requests */
    double tokens_per_s;      /* generated tokens/s over the last second */
    uint64_t steps;
    uint64_t requests_submitted, requests_finished, requests_cancelled;
    uint64_t preemptions;
    uint64_t admitted_ahead;       /* sequences admitted while the previous
                                      step's forward pass ran (overlap) */
    uint64_t prompt_tokens;        /* of admitted sequences */
    uint64_t cached_prompt_tokens; /* found in the cache at admission */
    uint64_t prefill_tokens;       /* prompt tokens computed (recomputation
                                      after preemption included) */
    uint64_t generated_tokens;     /* sampled and forced */
    uint64_t batch_tokens;         /* sum of step batch sizes */
    /* Jump-forward. forced_tokens: output tokens placed without sampling
     * (each jump replaces the sampled token with k re-encoded tokens and
     * counts k - 1). forward_passes_saved: per sequence, the forward
     * passes it did not need: each step that feeds a generating sequence
     * m > 1 tokens at once counts m - 1 (one pass instead of m). For one
     * request alone these are whole engine steps; in a batch, a step is
     * saved only when no other row needed it, so read it as decode rows
     * saved. */
    uint64_t jump_forwards;        /* jumps that placed tokens */
    uint64_t forced_tokens;
    uint64_t forward_passes_saved;
    /* Speculative decoding (options.spec_ngram): draft tokens fed to the
     * model for verification, and of those the ones kept (each also counts
     * in forward_passes_saved). */
    uint64_t spec_drafted_tokens;
    uint64_t spec_accepted_tokens;
    /* The draft model (options.draft_model): its forward passes, the
     * tokens they were fed (catching up with the sequence, then one per
     * draft), the drafts it proposed, and the seconds the engine thread
     * waited for it (not part of forward_s). */
    uint64_t draft_passes;
    uint64_t draft_fed_tokens;
    uint64_t draft_proposed_tokens;
    double draft_s;
    /* Where the engine thread's time went (seconds, cumulative). */
    double step_s;      /* whole steps */
    double forward_s;   /* waiting for / running forward passes */
    double sample_s;    /* sampling, stops, detokenization */
    double schedule_s;  /* everything else: scheduling, batch building,
                           radix bookkeeping, events */
    double overlap_s;   /* work done while a forward pass ran (masks,
                           intake, admission for the next step) */
    /* The disk tier (options.kv_cache_dir; all 0 without one). */
    uint64_t disk_records, disk_bytes;   /* pages on disk now, their bytes */
    uint64_t disk_pages_written;        /* pages saved (evicted, spilled) */
    uint64_t disk_pages_read;           /* pages read back into the cache */
    uint64_t disk_reads;                /* reads asked of the tier; a request
                                           whose records another waiting
                                           request is reading already waits
                                           for that read instead */
    uint64_t disk_restored_tokens;      /* prompt tokens they covered */
    uint64_t disk_write_errors;         /* failed writes (disk full, I/O) */
    uint64_t disk_dropped_writes;       /* not saved: the write queue was full */
    uint64_t disk_corrupt;              /* records failing a check (deleted,
                                           recomputed) */
    uint64_t disk_evicted;              /* records deleted by the bound */
    /* Windowed KV pages (info.kv_units > 1; 0 otherwise): references let
     * go as positions left a sliding window (the page freed, or left to
     * the prefix cache), and cached windowed pages the cache freed from
     * prefixes still in use when memory ran short. */
    uint64_t kv_window_released;
    uint64_t kv_window_stripped;
} trellis_stats;

/* A snapshot taken at the end of the latest engine step. */
TRELLIS_API void trellis_get_stats(trellis_engine *e, trellis_stats *out);

/* Drops every unlocked prefix-cache entry (waits for the engine). */
TRELLIS_API int trellis_flush_cache(trellis_engine *e);

/* The text a chat becomes with the model's chat template, as
 * trellis_submit renders request.messages (the template's default system
 * prompt included), with an open assistant turn at the end when
 * add_generation_prompt. Encode it with parse_special. For clients that
 * build prompts themselves (the DSL continues text inside an assistant
 * turn). *out is malloc'd (free()), *out_len (may be NULL) its length.
 * TRELLIS_ERR_UNSUPPORTED when the model has no template Trellis knows. */
TRELLIS_API int trellis_chat_render(const trellis_engine *e, const trellis_message *m,
                                    int32_t n, bool add_generation_prompt, char **out,
                                    size_t *out_len, char *err, size_t err_cap);
/* The same with a template given by family name ("chatml", "llama3",
 * "gemma", "llama2", "mistral": no default system prompt) or by its Jinja
 * text (as a GGUF's tokenizer.chat_template), no engine needed. */
TRELLIS_API int trellis_chat_template_render(const char *tmpl, const trellis_message *m,
                                             int32_t n, bool add_generation_prompt,
                                             char **out, size_t *out_len, char *err,
                                             size_t err_cap);

/* Tokenizes text (no BOS added) into a malloc'd array (free with free()). */
TRELLIS_API int trellis_tokenize(const trellis_engine *e, const char *text, size_t len,
                     bool parse_special, int32_t **ids, size_t *n_ids);
/* The bytes of one token (borrowed; NULL for bad ids). */
TRELLIS_API const char *trellis_token_text(const trellis_engine *e, int32_t id,
                               size_t *len);

#ifdef __cplusplus
}
#endif

#endif
