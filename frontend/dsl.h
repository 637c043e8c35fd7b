/* dsl.h — Trellis's prompt-programming language: scripts of functions
 * that build a prompt (role blocks, interpolated text, few-shot loops) and
 * generate into it (gen, select, fork), run in-process on an engine or
 * against `trellis serve`. The language is specified in
 * frontend/README.md.
 *
 * Layering: the frontend library, an application on top of
 * include/trellis.h (in-process backend) or HTTP (remote backend); it sees
 * trellis.h, base/ and its own headers only (CMake enforces it).
 *
 * Concurrency model. A run is a tree of tasks, each an OS thread with its
 * own prompt and variables: the entry function, every fork branch, and
 * every call, in an expression, of a function that generates. A `gen`
 * submits its request and goes on (its variable becomes a future); a task
 * blocks only when it reads a value not yet generated, or needs its whole
 * prompt for the next generation. So independent generations are in the
 * engine's queue together and batched, and a branch never waits for a
 * sibling it does not read (it cannot read one: branches share nothing
 * but the values bound before the fork). Threads rather than one event
 * pump driving suspended tasks, because a task's state is then simply the
 * C stack of a tree-walking interpreter, and blocking on a future is a
 * condition variable; the cost (a thread per live task, 256 KiB of stack
 * each) is bounded by max_tasks, and a run's tasks spend their time
 * waiting for the engine, not competing for the CPU.
 *
 * Values are jansson values (null, bool, integer, real, string, array,
 * object), immutable once bound, shared between tasks by reference count
 * (atomic in jansson).
 *
 * Errors. Parse errors and run-time errors come as a tr_dsl_error: the
 * code, the script location (offset, line, column) and a message;
 * tr_dsl_error_format renders it with the source line and a caret.
 * Nothing aborts on bad input; every limit below is an error naming it.
 *
 * Threads. A parsed script is immutable; a session may run any number of
 * functions at once from any threads (tr_dsl_session_run is reentrant).
 */
#ifndef TR_FRONTEND_DSL_H
#define TR_FRONTEND_DSL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "base/status.h"
#include "frontend/backend.h"

/* Limits on what a script may take; every one is an error when exceeded
 * (TR_ERR_LIMIT, the message names the limit and its value). */
typedef struct tr_dsl_limits {
    size_t max_script_bytes;      /* source size (1 MiB) */
    size_t max_ast_bytes;         /* parser memory (64 MiB) */
    int32_t max_nesting;          /* nested blocks, brackets, expressions,
                                     interpolations (100) */
    int32_t max_call_depth;       /* function calls inside calls (64) */
    int64_t max_loop_iterations;  /* iterations of one for loop (100000) */
    int64_t max_steps;            /* statements and calls one run executes
                                     (10000000) */
    size_t max_string_bytes;      /* one string value (16 MiB) */
    size_t max_prompt_bytes;      /* one task's prompt (16 MiB) */
    int32_t max_fork_width;       /* branches of one fork (64) */
    int32_t max_tasks;            /* live tasks of one run (256) */
    size_t max_file_bytes;        /* a file load() reads (64 MiB; 0: load()
                                     is disabled) */
} tr_dsl_limits;

void tr_dsl_limits_default(tr_dsl_limits *l);

typedef struct tr_dsl_error {
    tr_status code;     /* TR_OK: no error */
    bool has_location;  /* false: not tied to the script (a bad argument) */
    uint64_t offset;    /* byte offset in the script */
    int line, column;   /* 1-based; column counts bytes */
    char message[640];
    char trace[512];    /* "called from f at 12:3" lines, innermost first;
                           may be empty */
} tr_dsl_error;

typedef struct tr_dsl_script tr_dsl_script;

/* Parses src[0..len) (need not be NUL-terminated; copied). name is used
 * in messages, dir is where load() resolves relative paths (NULL: the
 * current directory). lim may be NULL (defaults). On failure *out is
 * untouched and err says what and where. */
tr_status tr_dsl_script_parse(const char *name, const char *dir, const char *src,
                              size_t len, const tr_dsl_limits *lim,
                              tr_dsl_script **out, tr_dsl_error *err);
/* Reads and parses the file at path (dir: the file's directory). */
tr_status tr_dsl_script_load(const char *path, const tr_dsl_limits *lim,
                             tr_dsl_script **out, tr_dsl_error *err);
void tr_dsl_script_free(tr_dsl_script *s);

/* Reads a script file of at most max_bytes into *out (malloc'd,
 * NUL-terminated; *len its length), for callers that keep the source to
 * show parse errors (tr_dsl_error_format_src). */
tr_status tr_dsl_read_source(const char *path, size_t max_bytes, char **out, size_t *len,
                            tr_dsl_error *err);
/* The directory part of path ("." when none), where load() resolves. */
void tr_dsl_script_dir(const char *path, char *dir, size_t cap);

/* The script's name as given. */
const char *tr_dsl_script_name(const tr_dsl_script *s);
/* Whether the script defines function name. */
bool tr_dsl_script_has_fn(const tr_dsl_script *s, const char *name);
/* The function `trellis run SCRIPT` runs when none is named: main if
 * defined, else the only function; NULL when that is ambiguous. */
const char *tr_dsl_script_default_fn(const tr_dsl_script *s);

/* Writes "NAME:LINE:COL: error: MESSAGE", the source line, a caret under
 * the column, and the trace, into buf (always NUL-terminated; truncated
 * to cap). s may be NULL (no source line). Returns buf. */
char *tr_dsl_error_format(const tr_dsl_script *s, const tr_dsl_error *e, char *buf,
                          size_t cap);

/* The same for a script that did not parse: name and src[0..len) as
 * given to tr_dsl_script_parse. */
char *tr_dsl_error_format_src(const char *name, const char *src, size_t len,
                              const tr_dsl_error *e, char *buf, size_t cap);

/* ---- running ---- */

typedef struct tr_dsl_session tr_dsl_session;

/* Streaming: text as it is generated. name is the gen's variable, task a
 * small number telling concurrent tasks apart (0: the entry function's);
 * calls from many threads are serialized by the session. */
typedef struct tr_dsl_stream {
    void (*text)(void *user, int32_t task, const char *name, const char *text,
                 size_t len);
    void *user;
} tr_dsl_stream;

typedef struct tr_dsl_session_options {
    tr_dsl_limits limits;
    const tr_dsl_stream *stream; /* NULL: no streaming */
    /* Before a fork's branches start, prefill the prompt they share with
     * a one-token request, so that they find it in the prefix cache
     * instead of each computing it (default true). */
    bool warm_forks;
} tr_dsl_session_options;

void tr_dsl_session_options_default(tr_dsl_session_options *o);

/* Creates a session: evaluates the script's top-level `let`s (with the
 * backend, in case they call functions that generate). backend and
 * script are borrowed and must outlive the session. */
tr_status tr_dsl_session_new(const tr_dsl_script *s, tr_dsl_backend *b,
                             const tr_dsl_session_options *o, tr_dsl_session **out,
                             tr_dsl_error *err);
void tr_dsl_session_free(tr_dsl_session *s);

typedef struct tr_dsl_run_stats {
    int32_t gens;             /* generation requests (select and fork
                                 warm-ups included) */
    int64_t prompt_tokens;    /* summed over them */
    int64_t cached_tokens;    /* of which found in the prefix cache */
    int64_t completion_tokens;
    int32_t tasks;            /* tasks started (the entry one included) */
    double wall_ms;           /* start to end of the run */
    double interp_ms;         /* CPU time the run's threads spent
                                 interpreting (building prompts and chat
                                 rendering included): their thread CPU
                                 time less the time inside backend
                                 submissions; time blocked waiting for the
                                 engine costs no CPU and is not in it */
    double backend_ms;        /* CPU time inside backend submissions
                                 (tokenizing the prompt, compiling a
                                 grammar, queueing the request) */
} tr_dsl_run_stats;

typedef struct tr_dsl_result {
    json_t *ret;   /* the return value (null when none); owned */
    json_t *vars;  /* object: the variables gen/select (and forks of them)
                      bound in the entry function; owned */
    char *text;    /* the entry function's final prompt; owned */
    tr_dsl_run_stats stats;
} tr_dsl_result;

void tr_dsl_result_deinit(tr_dsl_result *r);

/* Runs function fn with args (an object: parameter -> value; borrowed;
 * NULL = none) to completion. On failure (a script error, a generation
 * that failed, a limit) err says what and where; *out is filled only on
 * success. */
tr_status tr_dsl_session_run(tr_dsl_session *s, const char *fn, json_t *args,
                             tr_dsl_result *out, tr_dsl_error *err);

/* ---- batches ---- */

typedef struct tr_dsl_batch_options {
    int32_t parallel;  /* runs at once (default 32) */
    /* Let the first input run alone until its first generation is done,
     * so that the prompt prefix every input shares (instructions,
     * few-shot examples) is in the prefix cache before the others start
     * (default true). */
    bool warm_first;
} tr_dsl_batch_options;

void tr_dsl_batch_options_default(tr_dsl_batch_options *o);

/* Called once per input, in input order, with the line to write: {"index":
 * i, "return": ..., "vars": {...}} or {"index": i, "error": {"message",
 * "line", "column", "text"}} (borrowed; valid during the call). */
typedef void (*tr_dsl_batch_emit)(void *user, size_t index, json_t *line);

typedef struct tr_dsl_batch_stats {
    size_t ok, failed;
    tr_dsl_run_stats sum; /* summed over runs; wall_ms is the batch's */
} tr_dsl_batch_stats;

/* Runs fn once per input object (inputs[i] NULL or not an object: that
 * input fails with inputs_err[i] if given, else a generic message),
 * o->parallel at a time, emitting each result in input order as soon as
 * it and all before it are done. Returns TR_OK when every input ran
 * (each may have failed: see the lines and st), else an error for the
 * batch as a whole (out of memory, no such function). */
tr_status tr_dsl_batch_run(tr_dsl_session *s, const char *fn, json_t *const *inputs,
                           const char *const *inputs_err, size_t n,
                           const tr_dsl_batch_options *o, tr_dsl_batch_emit emit,
                           void *user, tr_dsl_batch_stats *st, tr_dsl_error *err);

#endif
