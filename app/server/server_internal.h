/* server_internal.h — the server's shared state, seen by its own files
 * only: the server object (configuration, engine, HTTP listener, metrics)
 * and the life of one generation request.
 *
 * Layering: app/server; the engine is reached through
 * include/trellis.h only.
 *
 * Threads. Everything here belongs to the loop thread, except what a
 * generation request's submission job (gen.c, on libuv's thread pool)
 * reads and writes while it runs: it reads req->gen and writes req->subs[].id,
 * req->submit_*; the loop thread touches neither until the job's
 * completion callback. The engine's wake callback only calls
 * uv_async_send.
 *
 * A generation request (tr_srv_req) lives from its validated body until
 * both (a) its submission job has completed and (b) every sub-request it
 * submitted (one per prompt) has delivered its last DONE event. Its
 * connection may go away at any point before that ("gone"): its
 * sub-requests are then cancelled and it lives on, answering nobody, until
 * (a) and (b) hold. This is what makes a disconnect free its KV pages at
 * the next engine step and never leaves an event pointing at freed memory.
 */
#ifndef TR_SERVER_INTERNAL_H
#define TR_SERVER_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "app/server/http_internal.h"
#include "app/server/metrics_internal.h"
#include "app/server/sbuf_internal.h"
#include "app/server/server.h"
#include "app/server/tool_parse.h"
#include "app/server/validate_internal.h"
#include "trellis.h"

typedef struct tr_srv_config {
    const char *model_path;   /* NULL: the default model */
    const char *host;         /* default 127.0.0.1 (loopback) */
    int port;                 /* default 8080; 0 = any (printed) */
    char *api_key;            /* owned copy, or NULL: no authentication */
    const char *served_model_name; /* default: the file name without .gguf */
    trellis_engine_options engine;
    int32_t max_queue;        /* generation requests waiting beyond
                                 max_running before 429 (default 256) */
    bool log_json;            /* --log-format json */
    bool log_prompts;         /* prompts and outputs in the log */
    bool log_requests;        /* one access-log line per request */
    bool no_ui;               /* --no-ui: no playground page at / */
    uint32_t stuck_after_s;   /* /health 503 after this long without an
                                 engine step while work is queued (60) */
    uint32_t shutdown_timeout_s; /* SIGINT/SIGTERM: in-flight requests get
                                    this long to finish (30) */
    tr_http_limits http;
    tr_srv_limits limits;
    const char *port_file;    /* write the bound port here (tests) */
} tr_srv_config;

void tr_srv_config_default(tr_srv_config *c);

/* Runs the server until SIGINT/SIGTERM (exit status 0) or a fatal start-up
 * error (1: the model cannot load, the port cannot be bound). */
int tr_srv_run(const tr_srv_config *c);

enum { SRV_LOADING, SRV_READY, SRV_DRAINING, SRV_STOPPING };

typedef struct tr_srv_req tr_srv_req;

typedef struct tr_srv {
    uv_loop_t *loop;
    tr_srv_config cfg;
    tr_http_server *http;
    trellis_engine *engine; /* NULL while loading */
    trellis_engine_info info;
    char model_id[256];     /* the served model name */
    char load_error[512];
    int state;
    int exit_code;
    uint64_t started_unix;
    uint64_t load_ms;

    uv_async_t wake;
    uv_signal_t sigint, sigterm;
    uv_timer_t tick;        /* 1 s: progress watch, shutdown deadline */
    uv_work_t load_work;
    bool handles_ready;
    uint64_t drain_started_ms;
    bool cancelled_all;

    /* progress watch for /health */
    uint64_t last_steps;
    uint64_t last_progress_ms;
    bool stuck;

    tr_srv_req *reqs;       /* every live generation request */
    int32_t subs_live;      /* sub-requests submitted, last DONE not yet in */
    int32_t in_flight;      /* of them, those not finished yet */
    int32_t jobs;           /* submission jobs on the thread pool */
    uint64_t next_id;
    tr_srv_metrics metrics;
} tr_srv;

typedef struct tr_srv_choice {
    tr_sbuf text;        /* non-streaming: the whole completion */
    tr_sbuf sent_text;   /* /generate streaming: the text so far (SGLang
                            streams it cumulatively) */
    json_t *logprobs;    /* the API's logprob entries so far, or NULL */
    size_t lp_sent;      /* /generate streaming: output log-prob entries
                            sent in earlier chunks */
    size_t lp_offset;    /* completions: text_offset of the next token */
    int32_t n_tokens;
    json_t *token_ids;   /* /generate: output_ids */
    trellis_finish finish;
    int32_t stop_index;
    int32_t stop_token;
    char *error;
    bool done;
    bool echoed;         /* completions' echo: lp_offset set, the prompt
                            streamed (echo.c) */
    struct tr_tp *tp;    /* chat with tools, streamed: the text's reader
                            (tool_respond.c), or NULL */
    trellis_metrics m;
} tr_srv_choice;

typedef struct tr_srv_sub {
    tr_srv_req *req;
    int32_t prompt;      /* index of the prompt */
    uint64_t id;         /* engine request id (written by the job) */
    bool submitted;      /* written by the job */
    bool request_done;   /* its last DONE event arrived */
    int32_t prompt_tokens, cached_tokens;
    json_t *plp;         /* its prompt's log-probs in the API's shape
                            (echo.c), or NULL */
} tr_srv_sub;

enum { TR_CTX_REQ = 1, TR_CTX_JOB = 2 }; /* what a connection's ctx points at */

struct tr_srv_req {
    int ctx_kind;        /* TR_CTX_REQ */
    tr_srv *srv;
    tr_srv_req *prev, *next;
    tr_http_conn *conn;  /* NULL once gone or answered */
    tr_srv_gen gen;
    bool health;         /* /health_generate's probe: answer 200, no body */
    uv_work_t work;
    bool job_done;
    bool counted;        /* counts in srv->in_flight */
    bool aborted;        /* /abort_request named it: cancelled once submitted */
    bool finished;       /* its response is complete (or nobody to send to) */
    bool stream_open;
    int submit_status;   /* written by the job */
    bool con_failed;     /* the job: the constraint did not compile */
    char submit_err[512];
    trellis_grammar *grammar; /* the compiled constraint (a reference), or NULL */
    trellis_event **held; /* streaming: events that came before the stream
                             opened (the job's completion and the engine's
                             wake-up race), replayed in order once it is */
    int32_t n_held, cap_held;
    tr_srv_sub *subs;    /* [gen.n_prompts] */
    int32_t n_prompts;
    tr_srv_choice *choices; /* [n_prompts * n] */
    int32_t n_choices;
    int32_t n_choices_done;
    char id[48];
    int64_t created;
    uint64_t t_start_ns;
};

/* A small blocking call (tokenize, flush) run on the thread pool. */
typedef struct tr_srv_job {
    int ctx_kind; /* TR_CTX_JOB */
    tr_srv *srv;
    tr_http_conn *conn; /* NULL once gone */
    uv_work_t work;
    json_t *in;         /* the parsed body (owned) */
    json_t *out;        /* the answer (owned), or NULL with err set */
    int status;
    char err[512];
    void (*run)(struct tr_srv_job *);
} tr_srv_job;

void tr_srv_logf(const tr_srv *s, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* routes.c: the HTTP handler and the `gone` callback */
void tr_srv_on_request(void *app, tr_http_conn *c, const tr_http_request *r);
void tr_srv_on_gone(void *app, void *ctx);
/* An OpenAI error body; closes the connection when close is set. */
void tr_srv_send_error(tr_srv *s, tr_http_conn *c, const tr_srv_error *e);
void tr_srv_send_json(tr_srv *s, tr_http_conn *c, int status, json_t *body_stolen);
int tr_srv_errorf(tr_srv *s, tr_http_conn *c, int status, const char *type, const char *code,
                  const char *param, const char *fmt, ...) __attribute__((format(printf, 7, 8)));

/* gen.c: generation requests */
void tr_srv_gen_start(tr_srv *s, tr_http_conn *c, tr_srv_api api, const tr_http_request *r);
void tr_srv_gen_health(tr_srv *s, tr_http_conn *c);
void tr_srv_drain_events(tr_srv *s);
void tr_srv_handle_event(tr_srv *s, trellis_event *ev); /* takes ev */
void tr_srv_req_gone(tr_srv_req *q);
/* SGLang's /abort_request: cancels the live generation requests whose
 * rid (or, without one, response id) is `rid`, or every one when rid is
 * NULL. They end as cancelled requests do (finish "abort"). Returns how
 * many it found. */
int32_t tr_srv_abort(tr_srv *s, const char *rid);
void tr_srv_cancel_all(tr_srv *s);

/* respond.c: response bodies and stream chunks for each API */
json_t *tr_srv_response_json(const tr_srv_req *q);
int tr_srv_stream_open(tr_srv_req *q);                         /* headers, role */
int tr_srv_stream_delta(tr_srv_req *q, int32_t choice, const trellis_event *ev);
/* finish_reason; ev: the choice's DONE event (completions send its text
 * in this last chunk) */
int tr_srv_stream_finish(tr_srv_req *q, int32_t choice, const trellis_event *ev);
int tr_srv_stream_close(tr_srv_req *q);                        /* usage, [DONE] */
void tr_srv_choice_add(tr_srv_req *q, int32_t choice, const trellis_event *ev);
const char *tr_srv_finish_reason(trellis_finish f);
/* bytes as a JSON string, invalid UTF-8 replaced by U+FFFD */
json_t *tr_srv_lossy_string(const char *p, size_t n);

/* respond.c: one server-sent event (obj taken; 0, or -1 when the
 * client is gone); a chunk object around choices (taken) */
int tr_srv_send_event(tr_srv_req *q, json_t *obj);
json_t *tr_srv_chunk(const tr_srv_req *q, json_t *choices);

/* tool_respond.c: chat with tools (g->tools.active). The choice's
 * message {role, content, tool_calls} from its whole text; *called: it
 * ended on complete calls (finish_reason "tool_calls"). Streamed: text as
 * it comes, then the end (flushes held text; *called as above). */
json_t *tr_srv_tool_message(const tr_srv_req *q, int32_t ci, const tr_sbuf *text,
                            bool *called);
int tr_srv_tool_stream(tr_srv_req *q, int32_t ci, const char *text, size_t n);
int tr_srv_tool_stream_end(tr_srv_req *q, int32_t ci, bool *called);

/* echo.c: prompt log-probs and completions' echo */
/* Keeps ev's prompt log-probs (if any) on sub, in q's API shape. */
void tr_srv_plp_take(tr_srv_req *q, tr_srv_sub *sub, const trellis_event *ev);
/* /generate's [logprob (null for NaN), id, text or null] */
json_t *tr_srv_generate_lp_entry(const tr_srv *s, float logprob, int32_t id, bool text);
/* Bytes of sub's prompt as echoed; the echoed prompt followed by rest
 * (may be NULL); the prompt's log-probs followed by a completion's
 * (completion may be NULL), as one completions logprobs object. */
size_t tr_srv_echo_len(const tr_srv_req *q, const tr_srv_sub *sub);
json_t *tr_srv_echo_text(const tr_srv_req *q, const tr_srv_sub *sub, const tr_sbuf *rest);
json_t *tr_srv_echo_logprobs(const tr_srv_sub *sub, const json_t *completion);

/* constraint.c: a request's constraint, compiled off the loop thread */
int tr_srv_constraint_prepare(tr_srv_req *q, trellis_engine *e, char *err, size_t cap);
void tr_srv_constraint_release(tr_srv_req *q);

/* auth.c */
bool tr_srv_auth_ok(const tr_srv *s, const char *authorization);

uint64_t tr_srv_now_ms(void);

#endif
