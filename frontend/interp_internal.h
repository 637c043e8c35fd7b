/* interp_internal.h — the interpreter's pieces, shared by its files:
 *
 *   session.c  sessions, runs, results, globals
 *   task.c     tasks (threads), spawned calls, fork/parallel and the join
 *   exec.c     statements          eval.c   expressions
 *   gen.c      gen/select: options -> a backend request -> a future
 *   prompt.c   a task's prompt: items, chat rendering
 *   future.c   futures: values that arrive later
 *
 *   session ─ run (one per tr_dsl_session_run) ─┬─ task (entry, on the
 *                                                │  caller's thread)
 *                                                ├─ task (fork branch)
 *                                                └─ task (let x = f())
 *   task ─ prompt (items: text | future | role open | role close)
 *        └ frame (function activation: variables) ─ parent frame (inline
 *          calls run in the caller's task and prompt)
 *
 * Layering: frontend, internal. Threads: a task, its frames, its prompt
 * and its variables belong to its thread; what crosses threads is
 * immutable (the script, jansson values, the globals) or synchronized
 * (futures: mutex + condition; run counters: atomics; the stream
 * callback: the session's mutex).
 */
#ifndef TR_FRONTEND_INTERP_INTERNAL_H
#define TR_FRONTEND_INTERP_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

#include "frontend/ast_internal.h"
#include "frontend/backend.h"
#include "frontend/dsl.h"
#include "frontend/value.h"

typedef struct tr_dsl_run tr_dsl_run;
typedef struct tr_dsl_task tr_dsl_task;

/* ---- futures ---- */

typedef enum tr_dsl_future_kind {
    TR_DSL_FUT_GEN,  /* a generation: text (and value: text or parsed JSON) */
    TR_DSL_FUT_TASK, /* a spawned call: value is its return */
    TR_DSL_FUT_WARM, /* a fork's warm-up request: nothing */
} tr_dsl_future_kind;

typedef struct tr_dsl_future {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    atomic_int refs;
    tr_dsl_future_kind kind;
    bool done;
    /* set before done, read only after it */
    json_t *value;     /* owned */
    json_t *text;      /* GEN: the generated text, a string (owned) */
    tr_dsl_error error; /* code != TR_OK: failed */
    /* GEN: how to finish it (set at creation, read on the backend thread) */
    tr_dsl_run *run;
    const char *name;      /* the variable (script memory) */
    uint32_t off;          /* the gen statement */
    bool parse_json;       /* json/json_schema: value = the parsed text */
    bool constrained;      /* stopping at max_tokens is an error */
    int32_t max_tokens;
    int32_t task_id;
} tr_dsl_future;

tr_dsl_future *tr_dsl_future_new(tr_dsl_future_kind kind);
tr_dsl_future *tr_dsl_future_ref(tr_dsl_future *f);
void tr_dsl_future_release(tr_dsl_future *f);
/* Completes f: takes value and text (may be NULL); err NULL = success. */
void tr_dsl_future_complete(tr_dsl_future *f, json_t *value, json_t *text,
                            const tr_dsl_error *err);
/* Blocks until f is done. */
void tr_dsl_future_wait(tr_dsl_future *f);

/* ---- prompts ---- */

typedef enum tr_dsl_item_kind {
    TR_DSL_ITEM_TEXT,  /* text: a string value */
    TR_DSL_ITEM_FUT,   /* fut: a pending generation's text */
    TR_DSL_ITEM_OPEN,  /* role: a role block begins */
    TR_DSL_ITEM_CLOSE, /* it ends */
} tr_dsl_item_kind;

typedef struct tr_dsl_item {
    tr_dsl_item_kind kind;
    json_t *text;
    tr_dsl_future *fut;
    const char *role;
} tr_dsl_item;

typedef enum tr_dsl_prompt_mode {
    TR_DSL_MODE_EMPTY = 0,
    TR_DSL_MODE_TEXT, /* plain text: no role blocks */
    TR_DSL_MODE_CHAT, /* role blocks only */
} tr_dsl_prompt_mode;

typedef struct tr_dsl_prompt {
    tr_dsl_item *items;
    int32_t n, cap;
    tr_dsl_prompt_mode mode;
    const char *open_role; /* the role block we are in, or NULL */
    size_t bytes;          /* text appended so far (futures excluded) */
} tr_dsl_prompt;

void tr_dsl_prompt_deinit(tr_dsl_prompt *p);
/* A copy sharing the items' values (fork branches). */
tr_status tr_dsl_prompt_copy(const tr_dsl_prompt *src, tr_dsl_prompt *dst);
/* Appends (takes a reference of) text / fut, or a role marker. */
tr_status tr_dsl_prompt_push(tr_dsl_prompt *p, tr_dsl_item_kind kind, json_t *text,
                             tr_dsl_future *fut, const char *role);

/* The prompt's text as the model sees it (waits for pending generations):
 * plain text, or the chat rendered through the backend's template with
 * the open role block's text so far at the end. *out malloc'd. An error
 * (a generation in it failed, the template refuses) goes to *err with
 * the failing gen's location or `off`. */
tr_status tr_dsl_prompt_render(tr_dsl_task *t, tr_dsl_prompt *p, uint32_t off, char **out,
                               size_t *len);

/* ---- variables ---- */

typedef struct tr_dsl_slot {
    const char *name;
    json_t *value;       /* owned; NULL while fut pending */
    tr_dsl_future *fut;  /* owned reference, or NULL */
    const json_t *origin; /* the future value that value copies (identity
                             only, never read: see same_slot); else NULL */
    bool captured;       /* bound by gen/select (or joined from branches) */
} tr_dsl_slot;

typedef struct tr_dsl_env {
    tr_dsl_slot *slots;
    int32_t n, cap;
} tr_dsl_env;

void tr_dsl_env_deinit(tr_dsl_env *e);
tr_dsl_slot *tr_dsl_env_find(tr_dsl_env *e, const char *name);
/* Binds name to value (a reference taken) or fut (a reference taken). */
tr_status tr_dsl_env_set(tr_dsl_env *e, const char *name, json_t *value,
                         tr_dsl_future *fut, bool captured);
tr_status tr_dsl_env_copy(const tr_dsl_env *src, tr_dsl_env *dst);

/* ---- runs, tasks, frames ---- */

typedef struct tr_dsl_frame {
    const tr_dsl_fn *fn;     /* NULL: the session's globals */
    tr_dsl_env env;
    json_t *ret;             /* owned, once returned */
    bool returned;
    struct tr_dsl_frame *parent;
    uint32_t call_off;       /* where the caller called it */
} tr_dsl_frame;

struct tr_dsl_session {
    const tr_dsl_script *script;
    tr_dsl_backend *backend;
    tr_dsl_session_options opt;
    json_t **globals;        /* [script->n_globals], resolved */
    pthread_mutex_t stream_mu;
    atomic_uint_fast64_t seed_counter;
    uint64_t seed_base;
};

struct tr_dsl_run {
    tr_dsl_session *sess;
    const tr_dsl_limits *lim;
    atomic_bool abort;             /* a task failed: the others stop early */
    atomic_int_fast64_t steps;
    atomic_int live_tasks;
    atomic_int task_ids;
    /* stats */
    atomic_int gens, tasks;
    atomic_int_fast64_t prompt_tokens, cached_tokens, completion_tokens;
    atomic_int_fast64_t interp_ns, backend_ns;
    /* spawned calls' tasks, joined and freed when the run ends */
    pthread_mutex_t children_mu;
    void **children;
    int32_t n_children, cap_children;
    /* batch warm-up: signalled when the first generation completes */
    void (*on_gen_done)(void *user);
    void *on_gen_done_user;
    atomic_bool first_gen_done;
};

struct tr_dsl_task {
    tr_dsl_run *run;
    tr_dsl_prompt prompt;
    tr_dsl_frame *frame;     /* innermost */
    int32_t id;
    int32_t calls;           /* call depth (frames) */
    int32_t depth;           /* C recursion of exec/eval */
    tr_dsl_error err;        /* the first error */
    tr_dsl_future **futs;    /* futures this task created (drained at end) */
    int32_t n_futs, cap_futs;
    int64_t backend_ns;      /* thread CPU time inside backend calls */
};

/* Records an error at script offset off (first error wins) and sets the
 * run's abort flag; returns code. */
tr_status tr_dsl_fail(tr_dsl_task *t, uint32_t off, tr_status code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Adopts an error from elsewhere (a future, a callee task). */
tr_status tr_dsl_fail_with(tr_dsl_task *t, const tr_dsl_error *e);
/* Adds "  in FN, called at L:C" for every frame from the innermost. */
void tr_dsl_add_trace(tr_dsl_task *t, tr_dsl_error *e);
/* Fills an error's line/column from its offset. */
void tr_dsl_locate(const tr_dsl_script *s, tr_dsl_error *e);

/* Task bookkeeping. */
void tr_dsl_task_init(tr_dsl_task *t, tr_dsl_run *run);
void tr_dsl_task_deinit(tr_dsl_task *t);
tr_status tr_dsl_task_track(tr_dsl_task *t, tr_dsl_future *f);
/* Waits for every future the task made; the first failure becomes the
 * task's error (if it has none). */
tr_status tr_dsl_task_drain(tr_dsl_task *t);
/* The thread CPU clock (ns). */
int64_t tr_dsl_thread_cpu_ns(void);

/* Counts one step against max_steps and checks abort. */
tr_status tr_dsl_step(tr_dsl_task *t, uint32_t off);

/* ---- execution ---- */

tr_status tr_dsl_exec_block(tr_dsl_task *t, const tr_dsl_block *b);
/* Evaluates e into *out (a new reference). */
tr_status tr_dsl_eval(tr_dsl_task *t, const tr_dsl_expr *e, json_t **out);
/* A variable's value, waiting for it if generated (a new reference). */
tr_status tr_dsl_read_var(tr_dsl_task *t, const char *name, uint32_t off, json_t **out);
/* Waits for a slot's future and replaces it by its value. */
tr_status tr_dsl_resolve_slot(tr_dsl_task *t, tr_dsl_slot *s);

/* Evaluates the defaults of fn's parameters not bound in the current
 * frame (in that frame: a default may use the parameters before it). */
tr_status tr_dsl_bind_defaults(tr_dsl_task *t, const tr_dsl_fn *fn);

/* tr_dsl_session_run, calling on_gen_done (from a backend thread) once,
 * when the run's first generation completes. */
tr_status tr_dsl_session_run_hooked(tr_dsl_session *s, const char *fn, json_t *args,
                                    void (*on_gen_done)(void *), void *user,
                                    tr_dsl_result *out, tr_dsl_error *err);

/* Calls script function fn with arguments evaluated from call (a
 * TR_DSL_E_CALL). inline_: in the current task and prompt (a statement);
 * else in a fresh prompt, on this thread, returning its value. */
tr_status tr_dsl_call(tr_dsl_task *t, const tr_dsl_expr *call, bool inline_, json_t **out);
/* let NAME = f(...) with f generating: starts f as a task of its own;
 * *out is the future of its return value. */
tr_status tr_dsl_spawn_call(tr_dsl_task *t, const tr_dsl_expr *call, tr_dsl_future **out);

/* Joins and frees the run's spawned tasks (all finished: their futures
 * were drained). */
void tr_dsl_run_join_children(tr_dsl_run *run);

tr_status tr_dsl_exec_fork(tr_dsl_task *t, const tr_dsl_stmt *st);
tr_status tr_dsl_exec_parallel(tr_dsl_task *t, const tr_dsl_stmt *st);
tr_status tr_dsl_exec_gen(tr_dsl_task *t, const tr_dsl_stmt *st);
/* select_lp.c: `select ... by logprob` over options (a list of distinct
 * non-empty strings, checked): scores them, binds and appends the best. */
tr_status tr_dsl_select_by_logprob(tr_dsl_task *t, const tr_dsl_stmt *st, json_t *options);
/* The fork warm-up: prefills the task's prompt (one token), waits. */
tr_status tr_dsl_warm(tr_dsl_task *t, uint32_t off);

/* The value of a frame when its function ends without `return`: an
 * object of its captured variables. */
tr_status tr_dsl_frame_captures(tr_dsl_task *t, tr_dsl_frame *f, json_t **out);

#endif
