/* backend_http.c — the remote backend: each generation is one
 * `POST /generate` to a `trellis serve` in SGLang's native format:
 *
 *   {"text": PROMPT, "stream": BOOL,
 *    "sampling_params": {"max_new_tokens", "temperature", "top_p",
 *        "top_k", "min_p", "presence_penalty", "frequency_penalty",
 *        "repetition_penalty", "stop", "ignore_eos", "sampling_seed",
 *        "regex" | "json_schema" (a string)}}
 *   (with "return_logprob": true, "logprob_start_len" when the prompt's
 *   log-probs are asked: select by logprob)
 *   -> {"text": COMPLETION, "meta_info": {"finish_reason": {"type"},
 *        "prompt_tokens", "completion_tokens", "cached_tokens",
 *        "input_token_logprobs"}}
 *
 * streamed as server-sent events `data: {...}` (each with the text so
 * far, as SGLang sends it) ending with `data: [DONE]`. A choice list goes
 * as the regex of its alternation (/generate has no choices field).
 *
 * Requests run on a pool of worker threads (at most max_inflight, started
 * as needed), so the interpreter's submit never blocks on the network
 * and independent generations reach the server together, where they are
 * batched. The chat template comes from the options, else from the
 * server's GET /model_info (field chat_template), and is rendered
 * locally with trellis_chat_template_render.
 *
 * Special tokens. The rendered chat holds the template's markers
 * ("<|im_start|>"), which must reach the model as its special tokens, as
 * SGLang's /generate tokenizes them. A server that tokenizes /generate's
 * text literally would feed the model the markers' characters instead;
 * so when a chat template is in use, the backend compares once how the
 * server counts a rendered turn through /generate (meta_info
 * prompt_tokens, one token generated) and through /tokenize (which
 * parses special tokens), and if they differ, sends every prompt as the
 * token ids /tokenize gives (input_ids): one more round trip per
 * generation, the same tokens as in-process.
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "frontend/backend_internal.h"
#include "frontend/http.h"
#include "frontend/value.h"

#define MAX_RESPONSE_BYTES ((size_t)64 << 20)

typedef struct job {
    struct job *next;
    json_t *body; /* the /generate request */
    bool stream;
    tr_dsl_gen_sink sink;
} job;

typedef struct http_backend {
    tr_dsl_backend base;
    tr_dsl_url url;
    char url_text[600];
    char *api_key;
    char *chat_template; /* NULL: none known */
    bool send_ids;       /* tokenize through /tokenize, send input_ids */
    int32_t connect_timeout_ms, timeout_ms, max_workers;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    job *head, *tail;
    int32_t workers, idle;
    pthread_t *threads;
    bool stop;
} http_backend;

static tr_status fail(char *err, size_t cap, tr_status code, const char *msg) {
    snprintf(err, cap, "%s", msg);
    return code;
}

/* The message of an error body: {"error": {"message"}}, {"error": "..."},
 * {"message": "..."}, {"detail": "..."}, or the raw text. */
static void error_message(const tr_dsl_buf *body, char *out, size_t cap) {
    json_t *j = body->p ? json_loadb(body->p, body->len, 0, NULL) : NULL;
    const char *m = NULL;
    if (j) {
        json_t *e = json_object_get(j, "error");
        if (json_is_object(e)) m = json_string_value(json_object_get(e, "message"));
        if (!m && json_is_string(e)) m = json_string_value(e);
        if (!m) m = json_string_value(json_object_get(j, "message"));
        if (!m) m = json_string_value(json_object_get(j, "detail"));
    }
    snprintf(out, cap, "%.400s", m ? m : body->p ? body->p : "(no body)");
    tr_dsl_unref(j);
}

/* ---- one request ---- */

typedef struct stream_state {
    tr_dsl_buf line;  /* the SSE line being read */
    tr_dsl_buf text;  /* the completion so far */
    json_t *last;     /* the last chunk's JSON */
    bool done, bad;
    char error[512];
    const tr_dsl_gen_sink *sink;
} stream_state;

static void sse_line(stream_state *st, const char *l, size_t n) {
    if (n < 5 || memcmp(l, "data:", 5) != 0) return; /* comments, event names */
    l += 5;
    n -= 5;
    while (n && *l == ' ') l++, n--;
    if (n == 6 && memcmp(l, "[DONE]", 6) == 0) {
        st->done = true;
        return;
    }
    json_t *j = json_loadb(l, n, 0, NULL);
    if (!j) {
        st->bad = true;
        snprintf(st->error, sizeof st->error, "a streamed chunk is not JSON: %.200s", l);
        return;
    }
    json_t *e = json_object_get(j, "error");
    if (e) {
        tr_dsl_buf b = {0};
        tr_dsl_buf_put(&b, l, n);
        error_message(&b, st->error, sizeof st->error);
        tr_dsl_buf_free(&b);
        st->bad = true;
        tr_dsl_unref(j);
        return;
    }
    const char *text = json_string_value(json_object_get(j, "text"));
    size_t len = json_string_length(json_object_get(j, "text"));
    if (text) {
        /* SGLang sends the text so far; take what is new */
        const char *add = text;
        size_t add_len = len;
        if (len >= st->text.len && (st->text.len == 0 || memcmp(text, st->text.p, st->text.len) == 0)) {
            add = text + st->text.len;
            add_len = len - st->text.len;
        }
        if (add_len) {
            if (st->sink->delta) st->sink->delta(st->sink->user, add, add_len);
            tr_dsl_buf_put(&st->text, add, add_len);
        }
    }
    tr_dsl_unref(st->last);
    st->last = j;
}

static bool on_stream_body(void *user, const char *data, size_t len) {
    stream_state *st = user;
    for (size_t i = 0; i < len; i++) {
        if (data[i] == '\n') {
            size_t n = st->line.len;
            if (n && st->line.p[n - 1] == '\r') n--;
            if (n) sse_line(st, st->line.p, n);
            st->line.len = 0;
            if (st->bad || st->done) return false;
        } else if (!tr_dsl_buf_put(&st->line, &data[i], 1)) {
            st->bad = true;
            snprintf(st->error, sizeof st->error, "out of memory");
            return false;
        } else if (st->line.len > MAX_RESPONSE_BYTES) {
            st->bad = true;
            snprintf(st->error, sizeof st->error, "a streamed line is too long");
            return false;
        }
    }
    return true;
}

/* Reads meta_info into out. */
static void read_meta(json_t *obj, tr_dsl_gen_out *out) {
    json_t *meta = json_object_get(obj, "meta_info");
    out->prompt_tokens = (int32_t)json_integer_value(json_object_get(meta, "prompt_tokens"));
    out->cached_tokens = (int32_t)json_integer_value(json_object_get(meta, "cached_tokens"));
    out->completion_tokens =
        (int32_t)json_integer_value(json_object_get(meta, "completion_tokens"));
    json_t *fr = json_object_get(meta, "finish_reason");
    const char *type = json_is_object(fr) ? json_string_value(json_object_get(fr, "type"))
                                          : json_string_value(fr);
    out->finish = type && strcmp(type, "length") == 0    ? "length"
                  : type && strcmp(type, "abort") == 0   ? "cancelled"
                                                         : "stop";
    /* [[logprob or null, id, text or null], ...] */
    json_t *itl = json_object_get(meta, "input_token_logprobs");
    size_t n = json_is_array(itl) ? json_array_size(itl) : 0;
    if (n && !out->prompt_logprobs && (out->prompt_logprobs = malloc(n * sizeof(float)))) {
        for (size_t i = 0; i < n; i++) {
            json_t *v = json_array_get(json_array_get(itl, i), 0);
            out->prompt_logprobs[i] = json_is_number(v) ? (float)json_number_value(v) : NAN;
        }
        out->n_prompt_logprobs = (int32_t)n;
    }
}

/* POST path with body (a JSON object); *out the answer's JSON object. */
static tr_status post_json(http_backend *b, const char *path, json_t *body, json_t **out,
                           char *err, size_t cap) {
    char *text = json_dumps(body, JSON_COMPACT);
    if (!text) return fail(err, cap, TR_ERR_NOMEM, "out of memory");
    tr_dsl_http_request req = {.method = "POST", .path = path, .api_key = b->api_key,
                               .body = text, .body_len = strlen(text),
                               .connect_timeout_ms = b->connect_timeout_ms,
                               .timeout_ms = b->timeout_ms, .max_body = MAX_RESPONSE_BYTES};
    tr_dsl_http_response resp;
    char e[400];
    tr_status s = tr_dsl_http_do(&b->url, &req, &resp, e, sizeof e);
    free(text);
    if (s != TR_OK) {
        snprintf(err, cap, "%s %s: %.300s", "POST", path, e);
        return s;
    }
    if (resp.status != 200) {
        char msg[420];
        error_message(&resp.body, msg, sizeof msg);
        snprintf(err, cap, "POST %s answered %d: %.400s", path, resp.status, msg);
        tr_dsl_buf_free(&resp.body);
        return resp.status == 400 ? TR_ERR_INVALID_ARG : TR_ERR_IO;
    }
    *out = resp.body.p ? json_loadb(resp.body.p, resp.body.len, 0, NULL) : NULL;
    tr_dsl_buf_free(&resp.body);
    if (!json_is_object(*out)) {
        tr_dsl_unref(*out);
        snprintf(err, cap, "POST %s: the answer is not a JSON object", path);
        return TR_ERR_FORMAT;
    }
    return TR_OK;
}

/* The token ids /tokenize gives for text (a new array). */
static tr_status tokenize(http_backend *b, json_t *text, json_t **ids, char *err, size_t cap) {
    json_t *req = json_pack("{s:O}", "text", text), *ans = NULL;
    if (!req) return fail(err, cap, TR_ERR_NOMEM, "out of memory");
    tr_status s = post_json(b, "/tokenize", req, &ans, err, cap);
    tr_dsl_unref(req);
    if (s) return s;
    json_t *t = json_object_get(ans, "tokens");
    if (!json_is_array(t)) {
        tr_dsl_unref(ans);
        return fail(err, cap, TR_ERR_FORMAT, "POST /tokenize: no \"tokens\" in the answer");
    }
    *ids = tr_dsl_ref(t);
    tr_dsl_unref(ans);
    return TR_OK;
}

static void run_job(http_backend *b, job *jb) {
    tr_dsl_gen_out out = {0};
    out.finish = "stop";
    stream_state st = {0};
    st.sink = &jb->sink;
    char err[400] = "";
    tr_status s = TR_OK;
    if (b->send_ids) {
        json_t *ids = NULL;
        s = tokenize(b, json_object_get(jb->body, "text"), &ids, err, sizeof err);
        if (s == TR_OK) {
            json_object_del(jb->body, "text");
            json_object_set_new(jb->body, "input_ids", ids);
        }
    }
    char *body = s == TR_OK ? json_dumps(jb->body, JSON_COMPACT) : NULL;
    if (s == TR_OK && !body) s = fail(err, sizeof err, TR_ERR_NOMEM, "out of memory");
    tr_dsl_http_request req = {
        .method = "POST", .path = "/generate", .api_key = b->api_key,
        .body = body, .body_len = body ? strlen(body) : 0,
        .connect_timeout_ms = b->connect_timeout_ms, .timeout_ms = b->timeout_ms,
        .max_body = MAX_RESPONSE_BYTES,
        .on_body = jb->stream ? on_stream_body : NULL, .user = &st,
    };
    tr_dsl_http_response resp = {0};
    if (s == TR_OK) s = tr_dsl_http_do(&b->url, &req, &resp, err, sizeof err);
    free(body);
    if (s != TR_OK && !(jb->stream && (st.done || st.bad))) {
        out.status = s;
        snprintf(out.error, sizeof out.error, "%.300s (server %.150s)", err, b->url_text);
    } else if (resp.status < 200 || resp.status >= 300) {
        char msg[420];
        error_message(&resp.body, msg, sizeof msg);
        out.status = resp.status == 400 || resp.status == 422 ? TR_ERR_INVALID_ARG
                     : resp.status == 429                      ? TR_ERR_FULL
                     : resp.status == 401 || resp.status == 403 ? TR_ERR_INVALID_ARG
                                                                : TR_ERR_IO;
        snprintf(out.error, sizeof out.error, "the server answered %d: %s", resp.status, msg);
    } else if (jb->stream) {
        if (st.bad) {
            out.status = TR_ERR_IO;
            snprintf(out.error, sizeof out.error, "%s", st.error);
        } else {
            if (st.last) read_meta(st.last, &out);
            out.text = st.text.p ? st.text.p : strdup("");
            out.len = st.text.len;
            st.text.p = NULL;
            if (!out.text) out.status = TR_ERR_NOMEM;
        }
    } else {
        json_error_t je;
        json_t *j = resp.body.p ? json_loadb(resp.body.p, resp.body.len, 0, &je) : NULL;
        json_t *text = json_object_get(j, "text");
        if (json_is_array(j)) text = NULL;
        if (!json_is_string(text)) {
            out.status = TR_ERR_FORMAT;
            snprintf(out.error, sizeof out.error,
                     "the server's answer has no \"text\": %.200s",
                     resp.body.p ? resp.body.p : "(empty)");
        } else {
            read_meta(j, &out);
            out.len = json_string_length(text);
            out.text = malloc(out.len + 1);
            if (!out.text) {
                out.status = TR_ERR_NOMEM;
            } else {
                memcpy(out.text, json_string_value(text), out.len + 1);
            }
        }
        tr_dsl_unref(j);
    }
    if (out.status != TR_OK) {
        free(out.text);
        out.text = NULL;
        out.finish = "error";
    }
    tr_dsl_buf_free(&resp.body);
    tr_dsl_buf_free(&st.line);
    tr_dsl_buf_free(&st.text);
    tr_dsl_unref(st.last);
    jb->sink.done(jb->sink.user, &out);
    tr_dsl_gen_out_deinit(&out);
}

static void *worker_main(void *arg) {
    http_backend *b = arg;
    pthread_mutex_lock(&b->mu);
    for (;;) {
        while (!b->head && !b->stop) {
            b->idle++;
            pthread_cond_wait(&b->cv, &b->mu);
            b->idle--;
        }
        if (!b->head) break; /* stopping, nothing left */
        job *jb = b->head;
        b->head = jb->next;
        if (!b->head) b->tail = NULL;
        pthread_mutex_unlock(&b->mu);
        run_job(b, jb);
        tr_dsl_unref(jb->body);
        free(jb);
        pthread_mutex_lock(&b->mu);
    }
    pthread_mutex_unlock(&b->mu);
    return NULL;
}

/* ---- the request body ---- */

static json_t *request_json(const tr_dsl_gen_req *r, char *err, size_t cap) {
    json_t *sp = json_pack("{s:i, s:f, s:f, s:f, s:f, s:f, s:f, s:b}", "max_new_tokens",
                           r->max_tokens, "temperature", (double)r->temperature, "top_p",
                           (double)r->top_p, "min_p", (double)r->min_p, "presence_penalty",
                           (double)r->presence_penalty, "frequency_penalty",
                           (double)r->frequency_penalty, "repetition_penalty",
                           (double)r->repetition_penalty, "ignore_eos", r->ignore_eos);
    if (!sp) return NULL;
    if (r->top_k > 0) json_object_set_new(sp, "top_k", json_integer(r->top_k));
    if (r->has_seed)
        json_object_set_new(sp, "sampling_seed", json_integer((json_int_t)(r->seed & INT64_MAX)));
    if (r->n_stop) {
        json_t *stop = json_array();
        for (int32_t i = 0; i < r->n_stop; i++) json_array_append_new(stop, json_string(r->stop[i]));
        json_object_set_new(sp, "stop", stop);
    }
    switch (r->constraint) {
    case TR_DSL_CONSTRAINT_NONE: break;
    case TR_DSL_CONSTRAINT_REGEX:
        json_object_set_new(sp, "regex", json_string(r->constraint_text));
        break;
    case TR_DSL_CONSTRAINT_CHOICES: {
        char *re = tr_dsl_choices_regex(r->choices, r->n_choices);
        if (!re) {
            tr_dsl_unref(sp);
            return NULL;
        }
        json_object_set_new(sp, "regex", json_string(re));
        free(re);
        break;
    }
    case TR_DSL_CONSTRAINT_JSON_SCHEMA:
        json_object_set_new(sp, "json_schema", json_string(r->constraint_text));
        break;
    case TR_DSL_CONSTRAINT_JSON:
        json_object_set_new(sp, "json_schema", json_string("{\"type\":\"object\"}"));
        break;
    }
    json_t *text = json_stringn(r->prompt, r->prompt_len);
    if (!text) {
        tr_dsl_unref(sp);
        snprintf(err, cap, "the prompt is not valid UTF-8");
        return NULL;
    }
    json_t *req = json_pack("{s:o, s:o, s:b}", "text", text, "sampling_params", sp, "stream",
                            r->stream);
    if (req && r->prompt_logprobs) { /* meta_info.input_token_logprobs */
        json_object_set_new(req, "return_logprob", json_true());
        json_object_set_new(req, "logprob_start_len", json_integer(r->prompt_logprobs_start));
    }
    return req;
}

static tr_status http_submit(tr_dsl_backend *base, const tr_dsl_gen_req *r,
                             const tr_dsl_gen_sink *sink, char *err, size_t cap) {
    http_backend *b = (http_backend *)base;
    err[0] = 0;
    json_t *j = request_json(r, err, cap);
    if (!j) return err[0] ? TR_ERR_INVALID_ARG : fail(err, cap, TR_ERR_NOMEM, "out of memory");
    job *jb = calloc(1, sizeof *jb);
    if (!jb) {
        tr_dsl_unref(j);
        return fail(err, cap, TR_ERR_NOMEM, "out of memory");
    }
    jb->body = j;
    jb->stream = r->stream;
    jb->sink = *sink;
    pthread_mutex_lock(&b->mu);
    if (b->tail) b->tail->next = jb;
    else b->head = jb;
    b->tail = jb;
    if (b->idle == 0 && b->workers < b->max_workers &&
        pthread_create(&b->threads[b->workers], NULL, worker_main, b) == 0)
        b->workers++;
    bool none = b->workers == 0;
    pthread_cond_signal(&b->cv);
    pthread_mutex_unlock(&b->mu);
    if (none) { /* no thread could start: do it here */
        pthread_mutex_lock(&b->mu);
        job *mine = b->head == jb ? jb : NULL;
        if (mine) {
            b->head = jb->next;
            if (!b->head) b->tail = NULL;
        }
        pthread_mutex_unlock(&b->mu);
        if (mine) {
            run_job(b, jb);
            tr_dsl_unref(jb->body);
            free(jb);
        }
    }
    return TR_OK;
}

static tr_status http_render(tr_dsl_backend *base, const trellis_message *m, int32_t n,
                             bool gen_prompt, char **out, size_t *len, char *err, size_t cap) {
    http_backend *b = (http_backend *)base;
    if (!b->chat_template) {
        snprintf(err, cap,
                 "role blocks need the model's chat template, and the server at %s does not "
                 "report one (GET /model_info has no chat_template): pass --chat-template "
                 "chatml|llama3|gemma|llama2|mistral",
                 b->url_text);
        return TR_ERR_UNSUPPORTED;
    }
    return (tr_status)trellis_chat_template_render(b->chat_template, m, n, gen_prompt, out,
                                                   len, err, cap);
}

static void http_free(tr_dsl_backend *base) {
    http_backend *b = (http_backend *)base;
    pthread_mutex_lock(&b->mu);
    b->stop = true;
    pthread_cond_broadcast(&b->cv);
    int32_t n = b->workers;
    pthread_mutex_unlock(&b->mu);
    for (int32_t i = 0; i < n; i++) pthread_join(b->threads[i], NULL);
    pthread_cond_destroy(&b->cv);
    pthread_mutex_destroy(&b->mu);
    free(b->threads);
    free(b->api_key);
    free(b->chat_template);
    free(b);
}

static const tr_dsl_backend_ops http_ops = {
    "http", http_submit, http_render, NULL, http_free,
};

/* GET /model_info (or its older name): checks the server is there and
 * takes its chat template if it reports one. */
static tr_status probe(http_backend *b, char *err, size_t cap) {
    static const char *paths[] = {"/model_info", "/get_model_info"};
    char last[512] = "";
    for (int i = 0; i < 2; i++) {
        tr_dsl_http_request req = {.method = "GET", .path = paths[i], .api_key = b->api_key,
                                   .connect_timeout_ms = b->connect_timeout_ms,
                                   .timeout_ms = b->connect_timeout_ms,
                                   .max_body = (size_t)16 << 20};
        tr_dsl_http_response resp;
        tr_status s = tr_dsl_http_do(&b->url, &req, &resp, last, sizeof last);
        if (s != TR_OK) {
            snprintf(err, cap, "cannot reach the server at %s: %s", b->url_text, last);
            return s;
        }
        if (resp.status == 200) {
            json_t *j = json_loadb(resp.body.p ? resp.body.p : "", resp.body.len, 0, NULL);
            const char *t = json_string_value(json_object_get(j, "chat_template"));
            if (t && !b->chat_template) b->chat_template = strdup(t);
            tr_dsl_unref(j);
            tr_dsl_buf_free(&resp.body);
            return TR_OK;
        }
        if (resp.status == 401 || resp.status == 403) {
            snprintf(err, cap, "the server at %s refused the API key (HTTP %d)", b->url_text,
                     resp.status);
            tr_dsl_buf_free(&resp.body);
            return TR_ERR_INVALID_ARG;
        }
        snprintf(last, sizeof last, "GET %s answered %d", paths[i], resp.status);
        tr_dsl_buf_free(&resp.body);
    }
    snprintf(err, cap, "the server at %s does not look like `trellis serve`: %s", b->url_text,
             last);
    return TR_ERR_IO;
}

/* Does /generate parse the template's special tokens in text? One short
 * rendered turn through /tokenize (which does) and through /generate
 * (one token): if the prompt counts differ, send token ids from now on. */
static tr_status probe_special(http_backend *b, char *err, size_t cap) {
    trellis_message m = {"user", "hi"};
    char *text = NULL;
    size_t len = 0;
    tr_status s = (tr_status)trellis_chat_template_render(b->chat_template, &m, 1, true, &text,
                                                          &len, err, cap);
    if (s != TR_OK) return s; /* a bad --chat-template: say so now */
    json_t *t = json_stringn(text, len);
    free(text);
    json_t *ids = NULL, *ans = NULL;
    char e[512];
    if (!t || tokenize(b, t, &ids, e, sizeof e) != TR_OK) {
        tr_dsl_unref(t);
        return TR_OK; /* no /tokenize: text it is */
    }
    json_t *req = json_pack("{s:O, s:{s:i, s:f}}", "text", t, "sampling_params",
                            "max_new_tokens", 1, "temperature", 0.0);
    if (req && post_json(b, "/generate", req, &ans, e, sizeof e) == TR_OK) {
        json_int_t n = json_integer_value(
            json_object_get(json_object_get(ans, "meta_info"), "prompt_tokens"));
        b->send_ids = n > (json_int_t)json_array_size(ids);
    }
    tr_dsl_unref(req);
    tr_dsl_unref(ans);
    tr_dsl_unref(ids);
    tr_dsl_unref(t);
    return TR_OK;
}

tr_status tr_dsl_backend_http_new(const tr_dsl_http_options *o, tr_dsl_backend **out,
                                  char *err, size_t cap) {
    http_backend *b = calloc(1, sizeof *b);
    if (!b) return fail(err, cap, TR_ERR_NOMEM, "out of memory");
    b->base.ops = &http_ops;
    tr_status s = tr_dsl_url_parse(o->url, &b->url, err, cap);
    if (s) {
        free(b);
        return s;
    }
    snprintf(b->url_text, sizeof b->url_text, "%s", o->url);
    b->connect_timeout_ms = o->connect_timeout_ms > 0 ? o->connect_timeout_ms : 5000;
    b->timeout_ms = o->timeout_ms > 0 ? o->timeout_ms : 600000;
    b->max_workers = o->max_inflight > 0 ? o->max_inflight : 64;
    b->api_key = o->api_key ? strdup(o->api_key) : NULL;
    b->chat_template = o->chat_template ? strdup(o->chat_template) : NULL;
    b->threads = calloc((size_t)b->max_workers, sizeof *b->threads);
    pthread_mutex_init(&b->mu, NULL);
    pthread_cond_init(&b->cv, NULL);
    if (!b->threads || (o->api_key && !b->api_key) ||
        (o->chat_template && !b->chat_template)) {
        http_free(&b->base);
        return fail(err, cap, TR_ERR_NOMEM, "out of memory");
    }
    s = probe(b, err, cap);
    if (s == TR_OK && b->chat_template) s = probe_special(b, err, cap);
    if (s != TR_OK) {
        http_free(&b->base);
        return s;
    }
    *out = &b->base;
    return TR_OK;
}
