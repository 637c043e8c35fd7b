/* routes.c — the HTTP handler: API keys, the route table, the endpoints
 * that are not generation (health, models, server and model info,
 * tokenize, detokenize, metrics, flush_cache), and the error and JSON
 * writers every endpoint shares.
 *
 * Layering: app/server; loop thread. Calls that block (tokenizing a
 * long text, flushing the cache, which waits for an engine step) run as
 * jobs on libuv's thread pool.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "app/server/server_internal.h"
#include "app/server/ui_internal.h"

/* ---- logging ---- */

void tr_srv_logf(const tr_srv *s, int level, const char *fmt, ...) {
    static const char *names[] = {"error", "warn", "info", "debug"};
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (level < 0 || level > 3) level = 2;
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    char ts[32];
    strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%SZ", &tm);
    if (s->cfg.log_json) {
        json_t *o = json_pack("{s:s,s:s,s:s}", "ts", ts, "level", names[level], "msg", msg);
        char *js = o ? json_dumps(o, JSON_COMPACT) : NULL;
        if (js) fprintf(stderr, "%s\n", js);
        free(js);
        json_decref(o);
    } else {
        fprintf(stderr, "%s trellis serve %s: %s\n", ts, names[level], msg);
    }
}

/* ---- writers ---- */

void tr_srv_send_json(tr_srv *s, tr_http_conn *c, int status, json_t *body) {
    char *js = body ? json_dumps(body, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
    json_decref(body);
    if (!js) {
        const char *oom = "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\","
                          "\"param\":null,\"code\":null}}";
        tr_http_respond(c, 503, "application/json", NULL, oom, strlen(oom), false);
        tr_srv_metrics_http(&s->metrics, 503);
        return;
    }
    tr_http_respond(c, status, "application/json", NULL, js, strlen(js), false);
    tr_srv_metrics_http(&s->metrics, status);
    free(js);
}

void tr_srv_send_error(tr_srv *s, tr_http_conn *c, const tr_srv_error *e) {
    json_t *o = json_pack("{s:{s:s,s:s,s:o,s:o}}", "error", "message", e->message, "type",
                          e->type ? e->type : "invalid_request_error", "param",
                          e->param[0] ? json_string(e->param) : json_null(), "code",
                          e->code ? json_string(e->code) : json_null());
    const char *extra = NULL;
    if (e->status == 401) extra = "WWW-Authenticate: Bearer\r\n";
    if (e->status == 429 || e->status == 503) extra = "Retry-After: 1\r\n";
    char *js = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (!js) js = strdup("{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\","
                         "\"param\":null,\"code\":null}}");
    if (js) tr_http_respond(c, e->status, "application/json", extra, js, strlen(js), false);
    tr_srv_metrics_http(&s->metrics, e->status);
    free(js);
}

int tr_srv_errorf(tr_srv *s, tr_http_conn *c, int status, const char *type, const char *code,
                  const char *param, const char *fmt, ...) {
    tr_srv_error e = {.status = status, .type = type, .code = code};
    snprintf(e.param, sizeof e.param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e.message, sizeof e.message, fmt, ap);
    va_end(ap);
    if (c) tr_srv_send_error(s, c, &e);
    return -1;
}

/* ---- jobs: blocking calls off the loop ---- */

static void job_run(uv_work_t *w) {
    tr_srv_job *j = w->data;
    j->run(j);
}

static void job_after(uv_work_t *w, int status) {
    tr_srv_job *j = w->data;
    tr_srv *s = j->srv;
    s->jobs--;
    if (j->conn) {
        tr_http_set_ctx(j->conn, NULL);
        if (status == 0 && j->out) {
            tr_srv_send_json(s, j->conn, 200, j->out);
            j->out = NULL;
        } else {
            tr_srv_errorf(s, j->conn, j->status ? j->status : 500,
                          j->status == 400 ? "invalid_request_error" : "server_error", NULL, NULL,
                          "%s", j->err[0] ? j->err : "failed");
        }
    }
    json_decref(j->in);
    json_decref(j->out);
    free(j);
}

static void job_start(tr_srv *s, tr_http_conn *c, json_t *in, void (*run)(tr_srv_job *)) {
    tr_srv_job *j = calloc(1, sizeof *j);
    if (!j) {
        json_decref(in);
        tr_srv_errorf(s, c, 503, "server_error", NULL, NULL, "out of memory");
        return;
    }
    j->ctx_kind = TR_CTX_JOB;
    j->srv = s;
    j->conn = c;
    j->in = in;
    j->run = run;
    j->work.data = j;
    tr_http_set_ctx(c, j);
    if (uv_queue_work(s->loop, &j->work, job_run, job_after) != 0) {
        tr_http_set_ctx(c, NULL);
        json_decref(in);
        free(j);
        tr_srv_errorf(s, c, 503, "server_error", NULL, NULL, "cannot queue the request");
        return;
    }
    s->jobs++;
}

void tr_srv_on_gone(void *app, void *ctx) {
    (void)app;
    int kind = *(int *)ctx;
    if (kind == TR_CTX_REQ) tr_srv_req_gone(ctx);
    else ((tr_srv_job *)ctx)->conn = NULL;
}

/* ---- endpoints ---- */

static bool ready(tr_srv *s, tr_http_conn *c) {
    if (s->state == SRV_READY) return true;
    tr_srv_errorf(s, c, 503, "server_error", s->state == SRV_LOADING ? "loading" : "shutting_down",
                  NULL, s->state == SRV_LOADING ? "the model is still loading"
                                                : "the server is shutting down");
    return false;
}

static void ep_health(tr_srv *s, tr_http_conn *c) {
    if (s->state == SRV_READY && !s->stuck) {
        tr_http_respond(c, 200, "text/plain", NULL, "", 0, false);
        tr_srv_metrics_http(&s->metrics, 200);
        return;
    }
    const char *why = s->state == SRV_LOADING ? "loading"
                      : s->stuck              ? "stuck: the engine has made no progress"
                                              : "shutting down";
    tr_http_respond(c, 503, "text/plain", "Retry-After: 1\r\n", why, strlen(why), false);
    tr_srv_metrics_http(&s->metrics, 503);
}

static json_t *model_obj(const tr_srv *s) {
    return json_pack("{s:s,s:s,s:I,s:s,s:s,s:i}", "id", s->model_id, "object", "model", "created",
                     (json_int_t)s->started_unix, "owned_by", "trellis", "root", s->model_id,
                     "max_model_len", s->engine ? s->info.n_ctx : 0);
}

static void ep_models(tr_srv *s, tr_http_conn *c, const char *path) {
    const char *id = path + strlen("/v1/models");
    if (*id == '/') {
        if (strcmp(id + 1, s->model_id) != 0) {
            tr_srv_errorf(s, c, 404, "invalid_request_error", "model_not_found", "model",
                          "the model '%.200s' does not exist", id + 1);
            return;
        }
        tr_srv_send_json(s, c, 200, model_obj(s));
        return;
    }
    tr_srv_send_json(s, c, 200, json_pack("{s:s,s:[o]}", "object", "list", "data", model_obj(s)));
}

/* The two names answer differently, because two SGLang clients read
 * them. SGLang's router (sglang-router 0.3.2) asks /model_info first
 * (/get_model_info only after a 404) and loads a tokenizer from
 * tokenizer_path or model_path: a name it cannot find on its own disk is
 * taken for a model hub id and fetched from the network, which blocks it
 * for minutes where there is none. So /model_info has neither, and the
 * router routes on text. SGLang's frontend (RuntimeEndpoint) reads
 * /get_model_info and needs model_path (a KeyError without it), from
 * which it guesses a chat template by name: there model_path is the
 * served model name (the server's file paths are never given out), and
 * a frontend program names its template itself (chat_template_name) when
 * the name says nothing. chat_template is the GGUF's template text (null
 * when it has none, or while loading), as llama-server's /props gives
 * it: clients that render prompts themselves (and send them to
 * /generate) need it. */
static void ep_model_info(tr_srv *s, tr_http_conn *c, bool get_alias) {
    json_t *o = json_pack("{s:s,s:s,s:b,s:n,s:s,s:i,s:s?,s:i}", "model_id", s->model_id,
                          "served_model_name", s->model_id, "is_generation", 1,
                          "preferred_sampling_params", "weight_version", "default",
                          "max_context_length", s->engine ? s->info.n_ctx : 0,
                          "chat_template", s->info.chat_template, "vocab_size",
                          s->engine ? s->info.n_vocab : 0);
    if (o && get_alias) json_object_set_new(o, "model_path", json_string(s->model_id));
    tr_srv_send_json(s, c, 200, o);
}

/* Routes of SGLang's server and of OpenAI's API that this server does not
 * offer: answered at once with 501 and the reason, so that a client
 * reports it instead of waiting (SGLang's frontend calls /start_profile,
 * /stop_profile). */
static const struct {
    const char *path;
    const char *why;
} unsupported[] = {
    {"/v1/embeddings", "embeddings are not supported: this server runs generative models"},
    {"/encode", "embeddings are not supported: this server runs generative models"},
    {"/v1/rerank", "reranking is not supported: this server runs generative models"},
    {"/v1/score", "scoring is not supported"},
    {"/classify", "classification is not supported: this server runs generative models"},
    {"/v1/responses", "the Responses API is not supported; use /v1/chat/completions"},
    {"/v1/audio/transcriptions", "audio is not supported"},
    {"/v1/images/generations", "images are not supported"},
    {"/v1/moderations", "moderations are not supported"},
    {"/pause_generation", "pausing the engine is not supported"},
    {"/continue_generation", "pausing the engine is not supported"},
    {"/start_profile", "profiling is not supported"},
    {"/stop_profile", "profiling is not supported"},
    {"/update_weights_from_disk", "weights cannot be updated while serving; restart the server"},
};

static const char *unsupported_why(const char *path) {
    for (size_t i = 0; i < sizeof unsupported / sizeof *unsupported; i++)
        if (strcmp(path, unsupported[i].path) == 0) return unsupported[i].why;
    return NULL;
}

static json_t *engine_json(tr_srv *s) {
    trellis_stats st;
    memset(&st, 0, sizeof st);
    if (s->engine) trellis_get_stats(s->engine, &st);
    json_t *o = json_pack("{s:i,s:i,s:i,s:i,s:i,s:i,s:f,s:f,s:I,s:I,s:I,s:I,s:I,s:I,s:I}", "running",
                     st.running, "waiting", st.waiting, "pages_total", st.pages_total,
                     "pages_used", st.pages_used, "pages_cached", st.pages_cached, "pages_free",
                     st.pages_free, "cache_hit_rate", st.cache_hit_rate, "tokens_per_s",
                     st.tokens_per_s, "steps", (json_int_t)st.steps, "requests_submitted",
                     (json_int_t)st.requests_submitted, "requests_finished",
                     (json_int_t)st.requests_finished, "requests_cancelled",
                     (json_int_t)st.requests_cancelled, "prompt_tokens",
                     (json_int_t)st.prompt_tokens, "cached_prompt_tokens",
                     (json_int_t)st.cached_prompt_tokens, "generated_tokens",
                     (json_int_t)st.generated_tokens);
    if (o) { /* the disk tier (0 without one) */
        json_object_set_new(o, "disk_pages", json_integer((json_int_t)st.disk_records));
        json_object_set_new(o, "disk_bytes", json_integer((json_int_t)st.disk_bytes));
        json_object_set_new(o, "disk_hit_tokens",
                            json_integer((json_int_t)st.disk_restored_tokens));
        json_object_set_new(o, "disk_pages_written",
                            json_integer((json_int_t)st.disk_pages_written));
    }
    return o;
}

/* The tokens the KV pool holds (a page slot is kv_units pages); 0 while
 * the model loads (s->info is still zero then, and /server_info is
 * answered during loading). */
static json_int_t max_total_tokens(const trellis_engine_info *i) {
    return i->kv_units > 0 ? (json_int_t)i->kv_pages / i->kv_units * i->page_size : 0;
}

static void ep_server_info(tr_srv *s, tr_http_conn *c) {
    const trellis_engine_info *i = &s->info;
    json_t *o = json_pack(
        "{s:s,s:s,s:s,s:i,s:s,s:i,s:i,s:i,s:i,s:I,s:i,s:b,s:i,s:i,s:i,s:i,s:I}", "model_id",
        s->model_id, "served_model_name", s->model_id, "version", "trellis 0.1.0", "port",
        tr_http_server_port(s->http), "status",
        s->state == SRV_LOADING ? "loading" : s->state == SRV_READY ? "ready" : "shutting_down",
        "context_length", i->n_ctx, "max_running_requests", i->max_running, "max_batch_tokens",
        i->max_batch_tokens, "page_size", i->page_size, "max_total_num_tokens",
        max_total_tokens(i), "kv_pages", i->kv_pages,
        "disable_radix_cache",
        i->no_radix, "threads", i->threads, "max_queue", s->cfg.max_queue, "in_flight",
        s->in_flight, "connections", tr_http_server_open_connections(s->http), "uptime_s",
        (json_int_t)((uint64_t)time(NULL) - s->started_unix));
    if (o) {
        json_object_set_new(o, "engine", engine_json(s));
        json_object_set_new(o, "load_ms", json_integer((json_int_t)s->load_ms));
        json_object_set_new(o, "kv_cache_dtype_k",
                            json_string(trellis_kv_type_name(i->kv_type_k)));
        json_object_set_new(o, "kv_cache_dtype_v",
                            json_string(trellis_kv_type_name(i->kv_type_v)));
        json_object_set_new(o, "kv_bytes", json_integer((json_int_t)i->kv_bytes));
        json_object_set_new(o, "kv_cache_dir",
                            i->kv_cache_dir ? json_string(i->kv_cache_dir) : json_null());
        json_object_set_new(o, "kv_cache_disk_mb", json_integer(i->kv_cache_disk_mb));
        json_object_set_new(o, "kv_units", json_integer(i->kv_units));
        json_object_set_new(o, "draft_model_arch",
                            i->draft_arch ? json_string(i->draft_arch) : json_null());
        json_object_set_new(o, "draft_sampling", json_boolean(i->draft_sampling));
        /* SGLang's router reads internal_states[0] */
        json_object_set_new(o, "internal_states",
                            json_pack("[{s:I,s:i}]", "max_total_num_tokens",
                                      max_total_tokens(i), "max_running_requests",
                                      i->max_running));
    }
    tr_srv_send_json(s, c, 200, o);
}

static void ep_load(tr_srv *s, tr_http_conn *c) {
    trellis_stats st;
    memset(&st, 0, sizeof st);
    if (s->engine) trellis_get_stats(s->engine, &st);
    tr_srv_send_json(s, c, 200,
                     json_pack("{s:i,s:i,s:i,s:i}", "load", s->in_flight, "num_reqs", st.running,
                               "num_waiting_reqs", st.waiting, "num_tokens", st.pages_used * s->info.page_size));
}

static void ep_metrics(tr_srv *s, tr_http_conn *c) {
    tr_sbuf b = {0};
    tr_srv_gauges g = {.in_flight = s->in_flight,
                       .connections = tr_http_server_open_connections(s->http),
                       .ready = s->state == SRV_READY};
    if (tr_srv_metrics_write(&s->metrics, s->engine, &g, &b) != 0) {
        tr_sbuf_reset(&b);
        tr_srv_errorf(s, c, 503, "server_error", NULL, NULL, "out of memory");
        return;
    }
    tr_http_respond(c, 200, "text/plain; version=0.0.4; charset=utf-8", NULL, b.data ? b.data : "",
                    b.len, false);
    tr_srv_metrics_http(&s->metrics, 200);
    tr_sbuf_reset(&b);
}

static void run_tokenize(tr_srv_job *j) {
    json_t *p = json_object_get(j->in, "prompt");
    if (!p) p = json_object_get(j->in, "text");
    if (!json_is_string(p)) {
        j->status = 400;
        snprintf(j->err, sizeof j->err, "'prompt' (or 'text') must be a string");
        return;
    }
    const char *text = json_string_value(p);
    size_t len = json_string_length(p);
    int32_t *ids = NULL;
    size_t n = 0;
    int rc = trellis_tokenize(j->srv->engine, text, len, true, &ids, &n);
    if (rc != TRELLIS_OK) {
        j->status = rc == TRELLIS_ERR_NOMEM ? 503 : 400;
        snprintf(j->err, sizeof j->err, "cannot tokenize: %s", trellis_status_message(rc));
        return;
    }
    json_t *arr = json_array();
    for (size_t i = 0; i < n && arr; i++) json_array_append_new(arr, json_integer(ids[i]));
    free(ids);
    j->out = json_pack("{s:o,s:I,s:i}", "tokens", arr, "count", (json_int_t)json_array_size(arr),
                       "max_model_len", j->srv->info.n_ctx);
}

static void run_flush(tr_srv_job *j) {
    int rc = trellis_flush_cache(j->srv->engine);
    if (rc != TRELLIS_OK) {
        j->status = 500;
        snprintf(j->err, sizeof j->err, "cannot flush: %s", trellis_status_message(rc));
        return;
    }
    j->out = json_pack("{s:b,s:s}", "success", 1, "message", "Cache flushed.");
}

static json_t *parse_body(tr_srv *s, tr_http_conn *c, const tr_http_request *r) {
    json_error_t je;
    json_t *o = json_loadb(r->body, r->body_len, JSON_REJECT_DUPLICATES, &je);
    if (!o || !json_is_object(o)) {
        json_decref(o);
        tr_srv_errorf(s, c, 400, "invalid_request_error", NULL, NULL,
                      o ? "the body must be a JSON object"
                        : "the body is not valid JSON: %s (line %d, column %d)",
                      je.text, je.line, je.column);
        return NULL;
    }
    return o;
}

/* SGLang's parallel encoding: its frontend encodes fork branches as
 * separate requests, asks the server to join their KV caches behind the
 * parent's (this route), and then sends the parent's whole text with its
 * next /generate. Trellis does not join caches: that next request
 * computes the joined text with full attention (the radix cache supplies
 * the shared prefix), which is exact where SGLang's joined caches are an
 * approximation (a branch never attended to the branches before it). So
 * the route checks its body and answers success; nothing else is owed. */
static void ep_concat_append(tr_srv *s, tr_http_conn *c, const tr_http_request *r) {
    json_t *o = parse_body(s, c, r);
    if (!o) return;
    json_t *src = json_object_get(o, "src_rids"), *dst = json_object_get(o, "dst_rid");
    bool ok = json_is_array(src) && json_is_string(dst);
    for (size_t i = 0; ok && i < json_array_size(src); i++)
        ok = json_is_string(json_array_get(src, i));
    json_decref(o);
    if (!ok) {
        tr_srv_errorf(s, c, 400, "invalid_request_error", NULL, NULL,
                      "expected {\"src_rids\": [request ids], \"dst_rid\": request id}");
        return;
    }
    tr_srv_send_json(s, c, 200, json_pack("{s:b}", "success", 1));
}

/* SGLang's /abort_request: {"rid": id} cancels that request (its rid, or
 * the id of its response), {"abort_all": true} every one. Answers 200
 * with how many were found (SGLang answers 200 whether or not the rid is
 * known). */
static void ep_abort(tr_srv *s, tr_http_conn *c, const tr_http_request *r) {
    json_t *o = parse_body(s, c, r);
    if (!o) return;
    json_t *rid = json_object_get(o, "rid"), *all = json_object_get(o, "abort_all");
    bool ok = (!rid || json_is_string(rid) || json_is_null(rid)) &&
              (!all || json_is_boolean(all)) && (json_is_string(rid) || json_is_true(all));
    if (!ok) {
        json_decref(o);
        tr_srv_errorf(s, c, 400, "invalid_request_error", NULL, NULL,
                      "expected {\"rid\": request id} or {\"abort_all\": true}");
        return;
    }
    int32_t n = tr_srv_abort(s, json_is_true(all) ? NULL : json_string_value(rid));
    json_decref(o);
    tr_srv_send_json(s, c, 200, json_pack("{s:b,s:i}", "success", 1, "aborted", n));
}

static void ep_detokenize(tr_srv *s, tr_http_conn *c, const tr_http_request *r) {
    json_t *o = parse_body(s, c, r);
    if (!o) return;
    json_t *t = json_object_get(o, "tokens");
    if (!json_is_array(t)) {
        json_decref(o);
        tr_srv_errorf(s, c, 400, "invalid_request_error", NULL, "tokens",
                      "'tokens' must be an array of token ids");
        return;
    }
    tr_sbuf b = {0};
    size_t i;
    json_t *x;
    json_array_foreach(t, i, x) {
        size_t n = 0;
        const char *p = json_is_integer(x) && json_integer_value(x) >= 0 &&
                                json_integer_value(x) < s->info.n_vocab
                            ? trellis_token_text(s->engine, (int32_t)json_integer_value(x), &n)
                            : NULL;
        if (!p) {
            json_decref(o);
            tr_sbuf_reset(&b);
            tr_srv_errorf(s, c, 400, "invalid_request_error", NULL, "tokens",
                          "'tokens[%zu]' is not a token id (0..%d)", i, s->info.n_vocab - 1);
            return;
        }
        if (tr_sbuf_append(&b, p, n)) break;
    }
    json_decref(o);
    /* token bytes may end inside a character: invalid bytes become U+FFFD */
    json_t *text = tr_srv_lossy_string(b.data ? b.data : "", b.len);
    tr_sbuf_reset(&b);
    tr_srv_send_json(s, c, 200, json_pack("{s:o}", "text", text));
}

/* ---- the route table ---- */

typedef enum { R_GET = 1, R_POST = 2 } rmethod;

typedef struct route {
    const char *path;
    bool prefix;  /* path is a prefix ending in '/' */
    int methods;  /* R_* bits */
    bool public_; /* no API key needed */
    int id;
} route;

enum {
    E_HEALTH = 1, E_HEALTH_GEN, E_MODELS, E_MODEL_INFO, E_SERVER_INFO, E_LOAD, E_METRICS,
    E_TOKENIZE, E_DETOKENIZE, E_FLUSH, E_CHAT, E_COMPLETION, E_GENERATE, E_CONCAT, E_ABORT
};

static const route routes[] = {
    {"/health", false, R_GET, true, E_HEALTH},
    {"/health_generate", false, R_GET, false, E_HEALTH_GEN},
    {"/v1/models", false, R_GET, false, E_MODELS},
    {"/v1/models/", true, R_GET, false, E_MODELS},
    {"/model_info", false, R_GET, false, E_MODEL_INFO},
    {"/get_model_info", false, R_GET, false, E_MODEL_INFO},
    {"/server_info", false, R_GET, false, E_SERVER_INFO},
    {"/get_server_info", false, R_GET, false, E_SERVER_INFO},
    {"/get_load", false, R_GET, false, E_LOAD},
    {"/metrics", false, R_GET, false, E_METRICS},
    {"/tokenize", false, R_POST, false, E_TOKENIZE},
    {"/detokenize", false, R_POST, false, E_DETOKENIZE},
    {"/flush_cache", false, R_POST | R_GET, false, E_FLUSH},
    {"/v1/chat/completions", false, R_POST, false, E_CHAT},
    {"/v1/completions", false, R_POST, false, E_COMPLETION},
    {"/generate", false, R_POST, false, E_GENERATE},
    {"/concate_and_append_request", false, R_POST, false, E_CONCAT},
    {"/abort_request", false, R_POST, false, E_ABORT},
};

static const route *find_route(const char *path) {
    for (size_t i = 0; i < sizeof routes / sizeof *routes; i++) {
        const route *rt = &routes[i];
        if (rt->prefix ? strncmp(path, rt->path, strlen(rt->path)) == 0 && path[strlen(rt->path)]
                       : strcmp(path, rt->path) == 0)
            return rt;
    }
    return NULL;
}

/* The playground page and its files: public (the page asks for the API
 * key itself), GET or HEAD only. True when r was one of them. */
static bool ui_request(tr_srv *s, tr_http_conn *c, const tr_http_request *r) {
    if (s->cfg.no_ui || (r->method != TR_HTTP_GET && r->method != TR_HTTP_HEAD)) return false;
    const tr_embedded_file *f = tr_ui_find(r->path);
    if (!f) return false;
    tr_http_respond(c, 200, tr_ui_content_type(f->path), tr_ui_headers, (const char *)f->data,
                    f->len, false);
    tr_srv_metrics_http(&s->metrics, 200);
    return true;
}

void tr_srv_on_request(void *app, tr_http_conn *c, const tr_http_request *r) {
    tr_srv *s = app;
    if (ui_request(s, c, r)) return;
    const route *rt = find_route(r->path);
    const char *why = rt ? NULL : unsupported_why(r->path);
    if (why) {
        tr_srv_errorf(s, c, 501, "invalid_request_error", "not_implemented", NULL,
                      "%s: %s", r->path, why);
        return;
    }
    if (!rt) {
        tr_srv_errorf(s, c, 404, "invalid_request_error", "unknown_url", NULL,
                      "no route for %s %.200s", r->method_name, r->path);
        return;
    }
    int m = r->method == TR_HTTP_GET || r->method == TR_HTTP_HEAD ? R_GET
            : r->method == TR_HTTP_POST                           ? R_POST
                                                                  : 0;
    if (!(rt->methods & m)) {
        tr_srv_error e = {.status = 405, .type = "invalid_request_error",
                          .code = "method_not_allowed"};
        snprintf(e.message, sizeof e.message, "%s does not allow %s (use %s)", rt->path,
                 r->method_name, rt->methods & R_POST ? "POST" : "GET");
        tr_srv_send_error(s, c, &e);
        return;
    }
    if (!rt->public_ && !tr_srv_auth_ok(s, r->authorization)) {
        /* never say what was sent: the key must not appear anywhere */
        tr_srv_errorf(s, c, 401, "invalid_request_error", "invalid_api_key", NULL,
                      r->authorization ? "the API key is wrong"
                                       : "an API key is required (Authorization: Bearer KEY)");
        return;
    }
    if (s->cfg.log_requests) tr_srv_logf(s, 2, "%s %s", r->method_name, r->path);
    switch (rt->id) {
    case E_HEALTH: ep_health(s, c); return;
    case E_HEALTH_GEN: tr_srv_gen_health(s, c); return;
    case E_MODELS: ep_models(s, c, r->path); return;
    case E_MODEL_INFO: ep_model_info(s, c, strcmp(r->path, "/get_model_info") == 0); return;
    case E_SERVER_INFO: ep_server_info(s, c); return;
    case E_LOAD: ep_load(s, c); return;
    case E_METRICS: ep_metrics(s, c); return;
    case E_CHAT: tr_srv_gen_start(s, c, TR_API_CHAT, r); return;
    case E_COMPLETION: tr_srv_gen_start(s, c, TR_API_COMPLETION, r); return;
    case E_GENERATE: tr_srv_gen_start(s, c, TR_API_GENERATE, r); return;
    case E_ABORT: ep_abort(s, c, r); return;
    default: break;
    }
    if (!ready(s, c)) return;
    if (rt->id == E_DETOKENIZE) {
        ep_detokenize(s, c, r);
        return;
    }
    if (rt->id == E_CONCAT) {
        ep_concat_append(s, c, r);
        return;
    }
    if (rt->id == E_FLUSH) {
        job_start(s, c, NULL, run_flush);
        return;
    }
    json_t *in = parse_body(s, c, r);
    if (in) job_start(s, c, in, run_tokenize);
}
