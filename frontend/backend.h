/* backend.h — where a script's generations go: one interface, two
 * implementations (the in-process engine, and a `trellis serve` reached
 * over HTTP), plus whatever tests plug in (a fake that answers from a
 * table).
 *
 * Layering: frontend. backend_engine.c uses include/trellis.h only;
 * backend_http.c uses plain sockets (frontend/http.h) and jansson. The
 * interpreter sees nothing but this header.
 *
 * Contract of submit: it either fails (returns an error, writes err, and
 * never calls the sink) or succeeds and then calls sink->done exactly
 * once, from any thread, possibly before submit returns; sink->delta
 * (only when the request asks to stream) runs zero or more times before
 * done, on one thread at a time. Submissions may come from many threads
 * at once. done receives a result it owns (tr_dsl_gen_out_deinit).
 *
 * Threads: every function may be called from any thread, concurrently,
 * except free, which must come after every done has been delivered.
 */
#ifndef TR_FRONTEND_BACKEND_H
#define TR_FRONTEND_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "trellis.h"

/* What constrains a generation. */
typedef enum tr_dsl_constraint_kind {
    TR_DSL_CONSTRAINT_NONE = 0,
    TR_DSL_CONSTRAINT_REGEX = 1,       /* text: the regex */
    TR_DSL_CONSTRAINT_CHOICES = 2,     /* choices[0..n_choices) */
    TR_DSL_CONSTRAINT_JSON_SCHEMA = 3, /* text: the schema as JSON */
    TR_DSL_CONSTRAINT_JSON = 4,        /* any JSON object */
} tr_dsl_constraint_kind;

typedef struct tr_dsl_gen_req {
    const char *prompt; /* the whole prompt text (chat markers included) */
    size_t prompt_len;
    int32_t max_tokens;
    float temperature, top_p, min_p;
    int32_t top_k;
    float presence_penalty, frequency_penalty, repetition_penalty;
    bool has_seed;
    uint64_t seed;
    const char *const *stop;
    int32_t n_stop;
    bool ignore_eos;
    tr_dsl_constraint_kind constraint;
    const char *constraint_text;
    const char *const *choices;
    int32_t n_choices;
    bool stream;
    /* the prompt tokens' log-probs from token position
     * prompt_logprobs_start (negative: from the end), as
     * trellis_request.prompt_logprobs; max_tokens may then be 0 */
    bool prompt_logprobs;
    int32_t prompt_logprobs_start;
} tr_dsl_gen_req;

/* temperature 1, top_p 1, repetition 1, max_tokens 128, the rest 0. */
void tr_dsl_gen_req_default(tr_dsl_gen_req *r);

typedef struct tr_dsl_gen_out {
    tr_status status;    /* TR_OK, or why the generation failed */
    char *text;          /* owned (malloc'd, NUL-terminated), never NULL
                            when status is TR_OK */
    size_t len;
    const char *finish;  /* "stop", "length", "cancelled", "error" (static) */
    int32_t prompt_tokens, cached_tokens, completion_tokens;
    float *prompt_logprobs; /* owned, [n_prompt_logprobs] when asked: the
                               log-prob of each prompt token from the start
                               asked for (NAN where there is none: position
                               0), else NULL */
    int32_t n_prompt_logprobs;
    char error[512];     /* when status != TR_OK */
} tr_dsl_gen_out;

void tr_dsl_gen_out_deinit(tr_dsl_gen_out *o);

typedef struct tr_dsl_gen_sink {
    void (*delta)(void *user, const char *text, size_t len);
    /* takes out (the callee owns out's memory from here) */
    void (*done)(void *user, tr_dsl_gen_out *out);
    void *user;
} tr_dsl_gen_sink;

typedef struct tr_dsl_backend tr_dsl_backend;

typedef struct tr_dsl_backend_stats {
    uint64_t prompt_tokens, cached_tokens; /* engine-wide, when known */
    bool known;
} tr_dsl_backend_stats;

typedef struct tr_dsl_backend_ops {
    const char *name;
    tr_status (*submit)(tr_dsl_backend *b, const tr_dsl_gen_req *r,
                        const tr_dsl_gen_sink *sink, char *err, size_t cap);
    /* Renders messages m[0..n) with the model's chat template into
     * *out (malloc'd, NUL-terminated; *len its length), with an open
     * assistant turn at the end when gen_prompt. */
    tr_status (*render_chat)(tr_dsl_backend *b, const trellis_message *m, int32_t n,
                             bool gen_prompt, char **out, size_t *len, char *err,
                             size_t cap);
    /* may be NULL */
    void (*get_stats)(tr_dsl_backend *b, tr_dsl_backend_stats *out);
    void (*free)(tr_dsl_backend *b);
} tr_dsl_backend_ops;

struct tr_dsl_backend {
    const tr_dsl_backend_ops *ops;
};

static inline void tr_dsl_backend_free(tr_dsl_backend *b) {
    if (b) b->ops->free(b);
}

/* The in-process backend over an engine (borrowed: it must outlive the
 * backend). It starts one thread that drains the engine's events and
 * completes each generation; free stops it. */
tr_status tr_dsl_backend_engine_new(trellis_engine *e, tr_dsl_backend **out,
                                    char *err, size_t cap);

typedef struct tr_dsl_http_options {
    const char *url;           /* http://HOST[:PORT][/PREFIX] */
    const char *api_key;       /* sent as a bearer token; may be NULL */
    const char *chat_template; /* a family name (chatml, llama3, gemma,
                                  llama2, mistral) or a Jinja template;
                                  NULL: the server's (GET /model_info
                                  field chat_template) */
    int32_t connect_timeout_ms; /* default 5000 */
    int32_t timeout_ms;         /* no byte from the server for this long
                                   fails the generation (default 600000) */
    int32_t max_inflight;       /* requests open at once (default 64) */
} tr_dsl_http_options;

/* The remote backend: each generation is one POST /generate to a
 * `trellis serve` (or any server speaking SGLang's native API). Fails
 * when the server cannot be reached (err says where and why). */
tr_status tr_dsl_backend_http_new(const tr_dsl_http_options *o, tr_dsl_backend **out,
                                  char *err, size_t cap);

#endif
