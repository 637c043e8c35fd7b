/* gen.c — the life of a generation request (see server_internal.h):
 * validated on the loop thread, submitted by a job on libuv's thread pool
 * (chat template, tokenizer and grammar compiler run there, never on the
 * loop), fed by engine events drained on the loop thread, answered, and
 * freed once the job and every sub-request are over. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "app/server/server_internal.h"

/* ---- freeing ---- */

static void req_free(tr_srv_req *q) {
    tr_srv *s = q->srv;
    if (q->prev) q->prev->next = q->next;
    else if (s->reqs == q) s->reqs = q->next;
    if (q->next) q->next->prev = q->prev;
    if (q->counted) s->in_flight--;
    if (q->conn) tr_http_set_ctx(q->conn, NULL); /* nothing may point at q */
    for (int32_t i = 0; i < q->n_choices; i++) {
        tr_srv_choice *c = &q->choices[i];
        tr_sbuf_reset(&c->text);
        tr_sbuf_reset(&c->sent_text);
        json_decref(c->logprobs);
        json_decref(c->token_ids);
        tr_tp_free(c->tp);
        free(c->error);
    }
    free(q->choices);
    for (int32_t i = 0; i < q->n_prompts; i++) json_decref(q->subs[i].plp);
    free(q->subs);
    for (int32_t i = 0; i < q->n_held; i++) trellis_event_free(q->held[i]);
    free(q->held);
    tr_srv_constraint_release(q);
    tr_srv_gen_free(&q->gen);
    free(q);
}

static bool subs_all_done(const tr_srv_req *q) {
    for (int32_t i = 0; i < q->n_prompts; i++)
        if (q->subs[i].submitted && !q->subs[i].request_done) return false;
    return true;
}

static void cancel_subs(tr_srv_req *q) {
    tr_srv *s = q->srv;
    for (int32_t i = 0; i < q->n_prompts; i++)
        if (q->subs[i].submitted && !q->subs[i].request_done) trellis_cancel(s->engine, q->subs[i].id);
}

/* The answer once everything is in. */
static void respond_final(tr_srv_req *q) {
    tr_srv *s = q->srv;
    tr_http_conn *c = q->conn;
    q->conn = NULL;
    if (q->gen.stream) {
        q->conn = c; /* the closing chunks still go out through it */
        if (q->stream_open) {
            tr_srv_stream_close(q);
            tr_http_stream_end(c);
        } else {
            tr_http_set_ctx(c, NULL); /* its abort is under way */
        }
        q->conn = NULL;
        return;
    }
    /* a sample that failed fails the request: its partial text is no
     * answer; one cancelled fails it too unless /abort_request asked for
     * it (SGLang answers those with finish_reason "abort") */
    for (int32_t i = 0; i < q->n_choices; i++) {
        const tr_srv_choice *ch = &q->choices[i];
        if (ch->finish == TRELLIS_FINISH_ERROR) {
            tr_srv_errorf(s, c, 500, "server_error", NULL, NULL, "generation failed: %s",
                          ch->error ? ch->error : "unknown error");
            return;
        }
        if (ch->finish == TRELLIS_FINISH_CANCELLED && !q->aborted) {
            tr_srv_errorf(s, c, 503, "server_error", "shutting_down", NULL,
                          "the server shut down before the request finished");
            return;
        }
    }
    if (q->health) {
        tr_http_respond(c, 200, "text/plain", NULL, "", 0, false);
        tr_srv_metrics_http(&s->metrics, 200);
        return;
    }
    tr_srv_send_json(s, c, 200, tr_srv_response_json(q));
}

static void maybe_finish(tr_srv_req *q) {
    if (!q->job_done || !subs_all_done(q)) return;
    if (!q->finished && q->conn) respond_final(q);
    q->finished = true;
    req_free(q);
}

static void on_event(tr_srv *s, trellis_event *ev);

/* ---- the submission job (thread pool) ---- */

static void job(uv_work_t *w) {
    tr_srv_req *q = w->data;
    trellis_engine *e = q->srv->engine;
    tr_srv_gen *g = &q->gen;
    int rc = tr_srv_constraint_prepare(q, e, q->submit_err, sizeof q->submit_err);
    if (rc != TRELLIS_OK) {
        q->submit_status = rc;
        q->con_failed = true;
        return;
    }
    for (int32_t i = 0; i < q->n_prompts; i++) {
        trellis_request r = g->req;
        if (g->api != TR_API_CHAT) {
            const tr_srv_prompt *p = &g->prompts[i];
            r.messages = NULL;
            r.n_messages = 0;
            r.prompt = p->text;
            r.prompt_len = p->text ? p->len : 0;
            r.tokens = p->tokens;
            r.n_tokens = p->n_tokens;
        }
        r.user = &q->subs[i];
        rc = trellis_submit(e, &r, &q->subs[i].id, q->submit_err, sizeof q->submit_err);
        if (rc != TRELLIS_OK) {
            q->submit_status = rc;
            return;
        }
        q->subs[i].submitted = true;
    }
}

static void submit_error(tr_srv_req *q) {
    tr_srv *s = q->srv;
    int st = q->submit_status;
    int status = 400;
    const char *type = "invalid_request_error", *code = NULL, *param = NULL;
    switch (st) {
    case TRELLIS_ERR_TOO_LONG:
        code = "context_length_exceeded";
        param = q->gen.api == TR_API_CHAT ? "messages" : "prompt";
        break;
    case TRELLIS_ERR_NOMEM:
    case TRELLIS_ERR_FULL:
        status = 503;
        type = "server_error";
        break;
    case TRELLIS_ERR_INTERNAL:
    case TRELLIS_ERR_IO:
    case TRELLIS_ERR_STATE:
        status = 500;
        type = "server_error";
        break;
    default: break;
    }
    /* Whatever the compiler said (syntax, a budget, an unresolved $ref:
     * TRELLIS_ERR_NOT_FOUND), a constraint that did not compile is the
     * request's fault and is named as such; out of memory stays a 503. */
    if (!code && q->gen.con != TR_CON_NONE && !q->subs[0].submitted &&
        (q->con_failed ? status == 400
                       : (st == TRELLIS_ERR_FORMAT || st == TRELLIS_ERR_UNSUPPORTED ||
                          st == TRELLIS_ERR_LIMIT)))
        code = st == TRELLIS_ERR_UNSUPPORTED ? "unsupported_constraint" : "invalid_constraint";
    tr_http_conn *c = q->conn;
    q->conn = NULL;
    tr_srv_errorf(s, c, status, type, code, param, "%s",
                  q->submit_err[0] ? q->submit_err : trellis_status_message(st));
}

static void job_done(uv_work_t *w, int status) {
    tr_srv_req *q = w->data;
    tr_srv *s = q->srv;
    s->jobs--;
    q->job_done = true;
    if (status != 0 && q->submit_status == 0) { /* cancelled before it ran */
        q->submit_status = TRELLIS_ERR_CANCELLED;
        snprintf(q->submit_err, sizeof q->submit_err, "the server is shutting down");
    }
    for (int32_t i = 0; i < q->n_prompts; i++)
        if (q->subs[i].submitted) s->subs_live++;
    if (q->submit_status != TRELLIS_OK) {
        cancel_subs(q);
        if (q->conn) submit_error(q);
        q->finished = true;
    } else if (!q->conn || s->cancelled_all || q->aborted) {
        cancel_subs(q);
    } else if (q->gen.stream) {
        if (tr_srv_stream_open(q) == 0) q->stream_open = true;
    }
    /* events that came first go out now, in order */
    for (int32_t i = 0; i < q->n_held; i++) {
        on_event(s, q->held[i]);
        trellis_event_free(q->held[i]);
    }
    q->n_held = 0;
    maybe_finish(q);
}

/* ---- starting ---- */

static int queue_full(const tr_srv *s) {
    int64_t cap = (int64_t)s->info.max_running + s->cfg.max_queue;
    return s->in_flight >= cap;
}

static tr_srv_req *req_new(tr_srv *s, tr_http_conn *c, tr_srv_api api) {
    tr_srv_req *q = calloc(1, sizeof *q);
    if (!q) return NULL;
    q->ctx_kind = TR_CTX_REQ;
    q->srv = s;
    q->conn = c;
    q->gen.api = api;
    q->created = (int64_t)time(NULL);
    q->t_start_ns = uv_hrtime();
    const char *prefix = api == TR_API_CHAT ? "chatcmpl" : api == TR_API_COMPLETION ? "cmpl" : "gen";
    snprintf(q->id, sizeof q->id, "%s-%016llx%08llx", prefix,
             (unsigned long long)(s->started_unix * 0x9e3779b97f4a7c15ull),
             (unsigned long long)++s->next_id);
    return q;
}

/* Shapes, links and queues q (its gen already parsed). */
static void launch(tr_srv *s, tr_srv_req *q) {
    tr_srv_gen *g = &q->gen;
    q->n_prompts = g->api == TR_API_CHAT ? 1 : g->n_prompts;
    q->n_choices = q->n_prompts * g->req.n;
    q->subs = calloc((size_t)q->n_prompts, sizeof *q->subs);
    q->choices = calloc((size_t)q->n_choices, sizeof *q->choices);
    if (!q->subs || !q->choices) {
        tr_http_conn *c = q->conn;
        q->conn = NULL;
        tr_srv_errorf(s, c, 503, "server_error", NULL, NULL, "out of memory");
        free(q->subs);
        free(q->choices);
        tr_srv_gen_free(g);
        free(q);
        return;
    }
    for (int32_t i = 0; i < q->n_prompts; i++) {
        q->subs[i].req = q;
        q->subs[i].prompt = i;
    }
    for (int32_t i = 0; i < q->n_choices; i++) {
        q->choices[i].stop_index = q->choices[i].stop_token = -1;
        q->choices[i].text.limit = 0;
    }
    if (g->con != TR_CON_NONE) s->metrics.constrained_requests++;
    q->next = s->reqs;
    if (s->reqs) s->reqs->prev = q;
    s->reqs = q;
    s->in_flight++;
    q->counted = true;
    if (q->conn) tr_http_set_ctx(q->conn, q);
    q->work.data = q;
    if (uv_queue_work(s->loop, &q->work, job, job_done) != 0) {
        q->job_done = true;
        q->submit_status = TRELLIS_ERR_INTERNAL;
        snprintf(q->submit_err, sizeof q->submit_err, "cannot queue the request");
        if (q->conn) submit_error(q);
        maybe_finish(q);
        return;
    }
    s->jobs++;
}

void tr_srv_gen_start(tr_srv *s, tr_http_conn *c, tr_srv_api api, const tr_http_request *r) {
    if (s->state == SRV_LOADING) {
        tr_srv_errorf(s, c, 503, "server_error", "loading", NULL, "the model is still loading");
        return;
    }
    if (s->state != SRV_READY) {
        tr_srv_errorf(s, c, 503, "server_error", "shutting_down", NULL,
                      "the server is shutting down");
        return;
    }
    if (queue_full(s)) {
        /* refused before the body is even parsed: memory stays bounded */
        s->metrics.rejected_queue_full++;
        tr_srv_errorf(s, c, 429, "rate_limit_error", "queue_full", NULL,
                      "the server's queue is full (%d requests in flight); retry later",
                      s->in_flight);
        return;
    }
    tr_srv_req *q = req_new(s, c, api);
    if (!q) {
        tr_srv_errorf(s, c, 503, "server_error", NULL, NULL, "out of memory");
        return;
    }
    tr_srv_error err;
    if (tr_srv_gen_parse(api, r->body, r->body_len, &s->cfg.limits, &q->gen, &err) != 0) {
        tr_srv_send_error(s, c, &err);
        tr_srv_gen_free(&q->gen);
        free(q);
        return;
    }
    /* "default" names the served model, as in SGLang (its clients, docs
     * and test kits send it) */
    if (q->gen.model && strcmp(q->gen.model, s->model_id) != 0 &&
        strcmp(q->gen.model, "default") != 0) {
        tr_srv_errorf(s, c, 404, "invalid_request_error", "model_not_found", "model",
                      "the model '%.200s' does not exist; this server serves '%s'",
                      q->gen.model, s->model_id);
        tr_srv_gen_free(&q->gen);
        free(q);
        return;
    }
    if (s->cfg.log_prompts && r->body_len)
        tr_srv_logf(s, 2, "%s %s body: %.*s", q->id, r->path,
                    (int)(r->body_len > 65536 ? 65536 : r->body_len), r->body);
    launch(s, q);
}

void tr_srv_gen_health(tr_srv *s, tr_http_conn *c) {
    if (s->state != SRV_READY) {
        tr_srv_errorf(s, c, 503, "server_error", s->state == SRV_LOADING ? "loading" : "shutting_down",
                      NULL, "the server is not ready");
        return;
    }
    tr_srv_req *q = req_new(s, c, TR_API_GENERATE);
    if (!q) {
        tr_srv_errorf(s, c, 503, "server_error", NULL, NULL, "out of memory");
        return;
    }
    static const int32_t probe[1] = {0};
    tr_srv_gen *g = &q->gen;
    trellis_request_default(&g->req);
    g->req.max_tokens = 1;
    g->req.temperature = 0;
    g->prompts = calloc(1, sizeof *g->prompts);
    if (!g->prompts) {
        tr_srv_errorf(s, c, 503, "server_error", NULL, NULL, "out of memory");
        free(q);
        return;
    }
    g->prompts[0].tokens = probe;
    g->prompts[0].n_tokens = 1;
    g->n_prompts = 1;
    q->health = true;
    launch(s, q);
}

/* ---- events ---- */

static void on_event(tr_srv *s, trellis_event *ev) {
    tr_srv_sub *sub = ev->user;
    tr_srv_req *q = sub->req;
    int32_t ci = sub->prompt * q->gen.req.n + ev->index;
    if (ci < 0 || ci >= q->n_choices) return; /* cannot happen: the engine echoes user */
    tr_srv_choice *ch = &q->choices[ci];
    bool live = q->conn && !q->finished;
    tr_srv_plp_take(q, sub, ev); /* prompt log-probs: sample 0's first event */
    if (q->gen.stream) {
        /* a completion's last text goes out with its finish_reason */
        bool in_finish = ev->kind == TRELLIS_EVENT_DONE && q->gen.api == TR_API_COMPLETION;
        if (live && q->stream_open && !in_finish && (ev->text_len || ev->n_tokens))
            tr_srv_stream_delta(q, ci, ev);
    } else {
        tr_srv_choice_add(q, ci, ev);
    }
    if (ev->kind != TRELLIS_EVENT_DONE) return;
    ch->done = true;
    ch->finish = ev->finish;
    ch->stop_index = ev->stop_index;
    ch->stop_token = ev->stop_token;
    ch->m = ev->metrics;
    if (ev->finish == TRELLIS_FINISH_ERROR && !ch->error)
        ch->error = strdup(ev->error ? ev->error : "error");
    q->n_choices_done++;
    sub->prompt_tokens = ev->metrics.prompt_tokens;
    sub->cached_tokens = ev->index == 0 ? ev->metrics.cached_tokens : sub->cached_tokens;
    tr_srv_metrics_sample(&s->metrics, ev);
    if (q->gen.stream && live && q->stream_open) tr_srv_stream_finish(q, ci, ev);
    if (ev->request_done) {
        sub->request_done = true;
        s->subs_live--;
        s->metrics.prompt_tokens += (uint64_t)sub->prompt_tokens;
        s->metrics.cached_tokens += (uint64_t)sub->cached_tokens;
    }
}

/* Keeps ev until the stream opens; false when it cannot (out of memory:
 * then it is handled now, and the stream may miss that piece). */
static bool hold(tr_srv_req *q, trellis_event *ev) {
    if (q->n_held == q->cap_held) {
        int32_t cap = q->cap_held ? 2 * q->cap_held : 8;
        trellis_event **h = realloc(q->held, (size_t)cap * sizeof *h);
        if (!h) return false;
        q->held = h;
        q->cap_held = cap;
    }
    q->held[q->n_held++] = ev;
    return true;
}

void tr_srv_handle_event(tr_srv *s, trellis_event *ev) {
    tr_srv_sub *sub = ev->user;
    tr_srv_req *q = sub ? sub->req : NULL;
    if (q && !q->job_done && q->gen.stream && hold(q, ev)) return;
    bool last = ev->kind == TRELLIS_EVENT_DONE && ev->request_done;
    if (q) on_event(s, ev);
    trellis_event_free(ev);
    if (q && last) maybe_finish(q);
}

void tr_srv_drain_events(tr_srv *s) {
    if (!s->engine) return;
    trellis_event *ev;
    while (trellis_poll(s->engine, &ev) == 1) tr_srv_handle_event(s, ev);
}

/* ---- going away ---- */

void tr_srv_req_gone(tr_srv_req *q) {
    q->conn = NULL;
    if (q->finished) return;
    q->srv->metrics.client_disconnects++;
    if (q->job_done) cancel_subs(q); /* else job_done cancels */
}

int32_t tr_srv_abort(tr_srv *s, const char *rid) {
    int32_t n = 0;
    for (tr_srv_req *q = s->reqs; q; q = q->next) {
        if (q->finished || q->health) continue;
        const char *id = q->gen.rid ? q->gen.rid : q->id;
        if (rid && strcmp(rid, id) != 0) continue;
        q->aborted = true;
        if (q->job_done) cancel_subs(q); /* else job_done cancels */
        n++;
    }
    return n;
}

void tr_srv_cancel_all(tr_srv *s) {
    for (tr_srv_req *q = s->reqs; q; q = q->next)
        if (q->job_done) cancel_subs(q);
}
