/* respond.c — what each API answers: OpenAI's chat.completion and
 * text_completion objects (whole, or as SSE chunks exactly as OpenAI
 * streams them: the role first, content deltas, finish_reason in the last
 * chunk of each choice, an optional usage chunk with `choices: []`, then
 * `data: [DONE]`), and SGLang's /generate objects (text, output_ids,
 * meta_info; streamed with the text so far, as SGLang does).
 *
 * Layering: app/server; loop thread. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/utf8.h"
#include "app/server/server_internal.h"

const char *tr_srv_finish_reason(trellis_finish f) {
    switch (f) {
    case TRELLIS_FINISH_STOP: return "stop";
    case TRELLIS_FINISH_LENGTH: return "length";
    case TRELLIS_FINISH_CANCELLED: return "abort";
    case TRELLIS_FINISH_ERROR: return "error";
    default: return NULL;
    }
}

/* A token's bytes as a JSON string: bytes that are not (yet) valid UTF-8,
 * as a token may split a character, become U+FFFD. */
json_t *tr_srv_lossy_string(const char *p, size_t n) {
    if (tr_utf8_valid(p, n)) return json_stringn(p, n);
    tr_sbuf b = {0};
    size_t i = 0;
    while (i < n) {
        size_t need = 1;
        size_t k = tr_utf8_partial((const uint8_t *)p + i, n - i, &need);
        if (k == need && k > 0) {
            tr_sbuf_append(&b, p + i, k);
            i += k;
        } else {
            tr_sbuf_puts(&b, "\xEF\xBF\xBD");
            i += k ? k : 1;
        }
    }
    json_t *s = json_stringn(b.data ? b.data : "", b.len);
    tr_sbuf_reset(&b);
    return s;
}

static json_t *token_string(const tr_srv *s, int32_t id) {
    size_t n = 0;
    const char *p = trellis_token_text(s->engine, id, &n);
    return p ? tr_srv_lossy_string(p, n) : json_string("");
}

static json_t *token_bytes(const tr_srv *s, int32_t id) {
    size_t n = 0;
    const char *p = trellis_token_text(s->engine, id, &n);
    json_t *a = json_array();
    for (size_t i = 0; p && i < n; i++) json_array_append_new(a, json_integer((unsigned char)p[i]));
    return a;
}

static double lp_value(float x) { return isfinite(x) ? (double)x : -9999.0; }

/* ---- logprobs of one event, in the API's shape ---- */

static json_t *chat_lp_entries(const tr_srv *s, const trellis_event *ev, int32_t top) {
    json_t *arr = json_array();
    for (int32_t i = 0; ev->logprobs && i < ev->n_tokens; i++) {
        const trellis_logprob *lp = &ev->logprobs[i];
        json_t *tops = json_array();
        for (int32_t k = 0; k < lp->n_top && k < top; k++)
            json_array_append_new(tops, json_pack("{s:o,s:f,s:o}", "token",
                                                  token_string(s, lp->top[k].token), "logprob",
                                                  lp_value(lp->top[k].logprob), "bytes",
                                                  token_bytes(s, lp->top[k].token)));
        json_array_append_new(arr, json_pack("{s:o,s:f,s:o,s:o}", "token",
                                             token_string(s, lp->token), "logprob",
                                             lp_value(lp->logprob), "bytes",
                                             token_bytes(s, lp->token), "top_logprobs", tops));
    }
    return arr;
}

/* completions: {tokens, token_logprobs, top_logprobs, text_offset} */
static void completion_lp_add(const tr_srv *s, json_t *obj, const trellis_event *ev,
                              size_t *offset) {
    json_t *toks = json_object_get(obj, "tokens"), *lps = json_object_get(obj, "token_logprobs");
    json_t *tops = json_object_get(obj, "top_logprobs"), *offs = json_object_get(obj, "text_offset");
    for (int32_t i = 0; ev->logprobs && i < ev->n_tokens; i++) {
        const trellis_logprob *lp = &ev->logprobs[i];
        json_array_append_new(toks, token_string(s, lp->token));
        json_array_append_new(lps, json_real(lp_value(lp->logprob)));
        json_t *t = json_object();
        for (int32_t k = 0; k < lp->n_top; k++) {
            json_t *ks = token_string(s, lp->top[k].token);
            json_object_set_new(t, json_string_value(ks), json_real(lp_value(lp->top[k].logprob)));
            json_decref(ks);
        }
        json_array_append_new(tops, t);
        json_array_append_new(offs, json_integer((json_int_t)*offset));
        size_t n = 0;
        trellis_token_text(s->engine, lp->token, &n);
        *offset += n;
    }
}

static json_t *completion_lp_new(void) {
    return json_pack("{s:[],s:[],s:[],s:[]}", "tokens", "token_logprobs", "top_logprobs",
                     "text_offset");
}

/* generate: output_token_logprobs [[lp, id, text or null]] (text with
 * return_text_in_logprobs), output_top_logprobs */
static void generate_lp_add(const tr_srv_req *q, json_t *obj, const trellis_event *ev) {
    json_t *out = json_object_get(obj, "output_token_logprobs");
    json_t *tops = json_object_get(obj, "output_top_logprobs");
    bool text = q->gen.lp_text;
    for (int32_t i = 0; ev->logprobs && i < ev->n_tokens; i++) {
        const trellis_logprob *lp = &ev->logprobs[i];
        json_array_append_new(out, tr_srv_generate_lp_entry(q->srv, lp->logprob, lp->token, text));
        json_t *t = json_array();
        for (int32_t k = 0; k < lp->n_top; k++)
            json_array_append_new(t, tr_srv_generate_lp_entry(q->srv, lp->top[k].logprob,
                                                              lp->top[k].token, text));
        json_array_append_new(tops, t);
    }
}

static json_t *generate_lp_new(void) {
    return json_pack("{s:[],s:[]}", "output_token_logprobs", "output_top_logprobs");
}

/* ---- accumulating (non-streaming, and /generate's cumulative stream) ---- */

void tr_srv_choice_add(tr_srv_req *q, int32_t ci, const trellis_event *ev) {
    tr_srv_choice *ch = &q->choices[ci];
    const tr_srv *s = q->srv;
    if (q->gen.echo && !ch->echoed) { /* the completion's offsets follow the prompt's */
        ch->lp_offset = tr_srv_echo_len(q, &q->subs[ci / q->gen.req.n]);
        ch->echoed = true;
    }
    if (ev->text_len) tr_sbuf_append(&ch->text, ev->text, ev->text_len);
    ch->n_tokens += ev->n_tokens;
    if (q->gen.api == TR_API_GENERATE) {
        if (!ch->token_ids) ch->token_ids = json_array();
        for (int32_t i = 0; i < ev->n_tokens; i++)
            json_array_append_new(ch->token_ids, json_integer(ev->tokens[i]));
    }
    if (!q->gen.logprobs || !ev->logprobs) return;
    switch (q->gen.api) {
    case TR_API_CHAT: {
        if (!ch->logprobs) ch->logprobs = json_array();
        json_t *more = chat_lp_entries(s, ev, q->gen.top_logprobs);
        json_array_extend(ch->logprobs, more);
        json_decref(more);
        break;
    }
    case TR_API_COMPLETION: {
        if (!ch->logprobs) ch->logprobs = completion_lp_new();
        completion_lp_add(s, ch->logprobs, ev, &ch->lp_offset);
        break;
    }
    case TR_API_GENERATE:
        if (!ch->logprobs) ch->logprobs = generate_lp_new();
        generate_lp_add(q, ch->logprobs, ev);
        break;
    }
}

/* ---- whole responses ---- */

static void usage_totals(const tr_srv_req *q, int64_t *prompt, int64_t *completion,
                         int64_t *cached) {
    *prompt = *completion = *cached = 0;
    for (int32_t i = 0; i < q->n_prompts; i++) {
        *prompt += q->subs[i].prompt_tokens;
        *cached += q->subs[i].cached_tokens;
    }
    for (int32_t i = 0; i < q->n_choices; i++) *completion += q->choices[i].m.completion_tokens;
}

static json_t *usage_json(const tr_srv_req *q) {
    int64_t p, c, k;
    usage_totals(q, &p, &c, &k);
    return json_pack("{s:I,s:I,s:I,s:{s:I}}", "prompt_tokens", (json_int_t)p,
                     "completion_tokens", (json_int_t)c, "total_tokens", (json_int_t)(p + c),
                     "prompt_tokens_details", "cached_tokens", (json_int_t)k);
}

static json_t *text_json(const tr_sbuf *b) { return json_stringn(b->data ? b->data : "", b->len); }

static json_t *finish_json(trellis_finish f) {
    const char *r = tr_srv_finish_reason(f);
    return r ? json_string(r) : json_null();
}

/* What ended a choice, as SGLang's `matched_stop` and finish_reason's
 * `matched` say it: the stop string, the stopping token id (EOS or a
 * stop_token_ids entry), or null (length, a completed constraint). */
static json_t *matched_stop(const tr_srv_req *q, const tr_srv_choice *ch) {
    if (ch->finish != TRELLIS_FINISH_STOP) return json_null();
    const trellis_request *r = &q->gen.req;
    if (ch->stop_index >= 0 && ch->stop_index < r->n_stop)
        return json_string(r->stop[ch->stop_index]);
    if (ch->stop_index >= r->n_stop && ch->stop_index < r->n_stop + r->n_stop_regex)
        return json_string(r->stop_regex[ch->stop_index - r->n_stop]);
    if (ch->stop_token >= 0) return json_integer(ch->stop_token);
    return json_null();
}

static json_t *generate_finish(const tr_srv_req *q, const tr_srv_choice *ch) {
    switch (ch->finish) {
    case TRELLIS_FINISH_STOP:
        return json_pack("{s:s,s:o}", "type", "stop", "matched", matched_stop(q, ch));
    case TRELLIS_FINISH_LENGTH:
        return json_pack("{s:s,s:i}", "type", "length", "length", ch->m.completion_tokens);
    case TRELLIS_FINISH_CANCELLED: return json_pack("{s:s,s:s}", "type", "abort", "message", "cancelled");
    case TRELLIS_FINISH_ERROR:
        return json_pack("{s:s,s:s}", "type", "abort", "message", ch->error ? ch->error : "error");
    default: return json_null();
    }
}

/* SGLang's meta_info log-probs: the input ones, then the output ones from
 * entry `from` on (a streamed chunk carries only its new entries, as
 * SGLang's frontend expects), output_token_logprobs_length the total. */
static void generate_lp_meta(const tr_srv_choice *ch, const tr_srv_sub *sub, json_t *meta,
                             size_t from) {
    static const char *keys[] = {"output_token_logprobs", "output_top_logprobs"};
    if (sub->plp) json_object_update(meta, sub->plp);
    size_t total = 0;
    for (int k = 0; k < 2; k++) {
        json_t *all = ch->logprobs ? json_object_get(ch->logprobs, keys[k]) : NULL;
        json_t *part = json_array();
        for (size_t i = from; all && i < json_array_size(all); i++)
            json_array_append(part, json_array_get(all, i));
        if (k == 0) total = all ? json_array_size(all) : 0;
        json_object_set_new(meta, keys[k], part);
    }
    json_object_set_new(meta, "output_token_logprobs_length", json_integer((json_int_t)total));
}

/* lp_from: the first output log-prob entry to include (streaming) */
static json_t *generate_item(const tr_srv_req *q, int32_t ci, bool partial, size_t lp_from) {
    const tr_srv_choice *ch = &q->choices[ci];
    const tr_srv_sub *sub = &q->subs[ci / q->gen.req.n];
    json_t *meta = json_pack("{s:s,s:o,s:i,s:i,s:i,s:f}", "id", q->gen.rid ? q->gen.rid : q->id,
                             "finish_reason", partial ? json_null() : generate_finish(q, ch),
                             "prompt_tokens", sub->prompt_tokens, "completion_tokens",
                             partial ? ch->n_tokens : ch->m.completion_tokens, "cached_tokens",
                             sub->cached_tokens, "e2e_latency",
                             partial ? (double)(uv_hrtime() - q->t_start_ns) / 1e9
                                     : ch->m.e2e_ms / 1000.0);
    json_object_set_new(meta, "matched_stop", partial ? json_null() : matched_stop(q, ch));
    if (q->gen.logprobs) generate_lp_meta(ch, sub, meta, lp_from);
    json_t *ids = ch->token_ids ? json_incref(ch->token_ids) : json_array();
    json_t *item = json_pack("{s:o,s:o,s:o}", "text",
                             text_json(partial ? &ch->sent_text : &ch->text), "output_ids", ids,
                             "meta_info", meta);
    if (q->gen.batch || q->gen.req.n > 1) json_object_set_new(item, "index", json_integer(ci));
    return item;
}

json_t *tr_srv_response_json(const tr_srv_req *q) {
    const tr_srv *s = q->srv;
    const tr_srv_gen *g = &q->gen;
    if (g->api == TR_API_GENERATE) {
        if (!g->batch && g->req.n == 1) return generate_item(q, 0, false, 0);
        json_t *arr = json_array();
        for (int32_t i = 0; i < q->n_choices; i++) json_array_append_new(arr, generate_item(q, i, false, 0));
        return arr;
    }
    bool chat = g->api == TR_API_CHAT;
    json_t *choices = json_array();
    for (int32_t i = 0; i < q->n_choices; i++) {
        const tr_srv_choice *ch = &q->choices[i];
        json_t *lp = json_null();
        const tr_srv_sub *sub = &q->subs[i / g->req.n];
        if (g->logprobs && chat)
            lp = json_pack("{s:o}", "content",
                           ch->logprobs ? json_incref(ch->logprobs) : json_array());
        else if (g->logprobs && g->echo) /* the prompt's first (echo.c) */
            lp = tr_srv_echo_logprobs(sub, ch->logprobs);
        else if (g->logprobs)
            lp = ch->logprobs ? json_incref(ch->logprobs) : completion_lp_new();
        json_t *text = g->echo ? tr_srv_echo_text(q, sub, &ch->text) : text_json(&ch->text);
        bool called = false;
        json_t *msg = !chat                 ? NULL
                      : g->tools.active ? tr_srv_tool_message(q, i, &ch->text, &called)
                                        : json_pack("{s:s,s:O}", "role", "assistant",
                                                    "content", text);
        json_t *fin = called ? json_string("tool_calls") : finish_json(ch->finish);
        json_t *c = chat ? json_pack("{s:i,s:o,s:o,s:o,s:o}", "index", i, "message", msg,
                                     "logprobs", lp, "finish_reason", fin, "matched_stop",
                                     matched_stop(q, ch))
                         : json_pack("{s:i,s:o,s:o,s:o,s:o}", "index", i, "text",
                                     json_incref(text), "logprobs", lp, "finish_reason", fin,
                                     "matched_stop", matched_stop(q, ch));
        json_decref(text);
        json_array_append_new(choices, c);
    }
    return json_pack("{s:s,s:s,s:I,s:s,s:s,s:o,s:o}", "id", q->id, "object",
                     chat ? "chat.completion" : "text_completion", "created", (json_int_t)q->created,
                     "model", s->model_id, "system_fingerprint", "trellis", "choices", choices,
                     "usage", usage_json(q));
}

/* ---- streaming ---- */

int tr_srv_send_event(tr_srv_req *q, json_t *obj) {
    if (!obj || !q->conn) {
        json_decref(obj);
        return -1;
    }
    char *js = json_dumps(obj, JSON_COMPACT);
    json_decref(obj);
    if (!js) return -1;
    tr_sbuf b = {0};
    int rc = tr_sbuf_puts(&b, "data: ");
    rc |= tr_sbuf_puts(&b, js);
    rc |= tr_sbuf_puts(&b, "\n\n");
    free(js);
    if (rc == 0) rc = tr_http_stream_write(q->conn, b.data, b.len);
    tr_sbuf_reset(&b);
    return rc;
}

json_t *tr_srv_chunk(const tr_srv_req *q, json_t *choices) {
    bool chat = q->gen.api == TR_API_CHAT;
    json_t *o = json_pack("{s:s,s:s,s:I,s:s,s:s,s:o}", "id", q->id, "object",
                          chat ? "chat.completion.chunk" : "text_completion", "created",
                          (json_int_t)q->created,
                          "model", q->srv->model_id, "system_fingerprint", "trellis", "choices",
                          choices);
    if (q->gen.include_usage) json_object_set_new(o, "usage", json_null());
    return o;
}

int tr_srv_stream_open(tr_srv_req *q) {
    if (tr_http_stream_begin(q->conn, 200, "text/event-stream",
                             "Cache-Control: no-cache\r\nX-Accel-Buffering: no\r\n") != 0)
        return -1;
    tr_srv_metrics_http(&q->srv->metrics, 200);
    if (q->gen.api != TR_API_CHAT) return 0;
    /* OpenAI's first chunk of each choice carries the role: one chunk per
     * choice, as OpenAI sends them */
    for (int32_t i = 0; i < q->n_choices; i++) {
        json_t *c = json_pack("{s:i,s:{s:s,s:s},s:n,s:n}", "index", i, "delta", "role",
                              "assistant", "content", "", "logprobs", "finish_reason");
        if (tr_srv_send_event(q, tr_srv_chunk(q, json_pack("[o]", c))) != 0) return -1;
    }
    return 0;
}

/* completions' echo, streamed: the prompt (and its log-probs) in a chunk
 * of its own before the choice's first text */
static int stream_echo(tr_srv_req *q, int32_t ci) {
    tr_srv_choice *ch = &q->choices[ci];
    if (!q->gen.echo || ch->echoed) return 0;
    const tr_srv_sub *sub = &q->subs[ci / q->gen.req.n];
    ch->echoed = true;
    ch->lp_offset = tr_srv_echo_len(q, sub);
    json_t *lp = q->gen.logprobs ? tr_srv_echo_logprobs(sub, NULL) : json_null();
    json_t *c = json_pack("{s:i,s:o,s:o,s:n}", "index", ci, "text",
                          tr_srv_echo_text(q, sub, NULL), "logprobs", lp, "finish_reason");
    return tr_srv_send_event(q, tr_srv_chunk(q, json_pack("[o]", c)));
}

/* A streamed /generate chunk: the text and ids so far, the output
 * log-probs not sent before */
static json_t *generate_stream_item(tr_srv_req *q, int32_t ci) {
    tr_srv_choice *ch = &q->choices[ci];
    json_t *item = generate_item(q, ci, true, ch->lp_sent);
    json_t *out = ch->logprobs ? json_object_get(ch->logprobs, "output_token_logprobs") : NULL;
    ch->lp_sent = out ? json_array_size(out) : 0;
    return item;
}

int tr_srv_stream_delta(tr_srv_req *q, int32_t ci, const trellis_event *ev) {
    const tr_srv_gen *g = &q->gen;
    if (stream_echo(q, ci) != 0) return -1;
    if (g->api == TR_API_GENERATE) {
        tr_srv_choice *ch = &q->choices[ci];
        tr_sbuf_append(&ch->sent_text, ev->text, ev->text_len);
        ch->n_tokens += ev->n_tokens;
        if (!ch->token_ids) ch->token_ids = json_array();
        for (int32_t i = 0; i < ev->n_tokens; i++)
            json_array_append_new(ch->token_ids, json_integer(ev->tokens[i]));
        if (g->logprobs && ev->logprobs) {
            if (!ch->logprobs) ch->logprobs = generate_lp_new();
            generate_lp_add(q, ch->logprobs, ev);
        }
        if (ev->kind == TRELLIS_EVENT_DONE) return 0; /* tr_srv_stream_finish sends it */
        return tr_srv_send_event(q, generate_stream_item(q, ci));
    }
    if (g->tools.active) { /* content and calls as they come (tool_respond.c) */
        if (tr_srv_tool_stream(q, ci, ev->text, ev->text_len) != 0) return -1;
        if (!g->logprobs || !ev->logprobs) return 0;
        json_t *c = json_pack("{s:i,s:{},s:{s:o},s:n}", "index", ci, "delta", "logprobs",
                              "content", chat_lp_entries(q->srv, ev, g->top_logprobs),
                              "finish_reason");
        return tr_srv_send_event(q, tr_srv_chunk(q, json_pack("[o]", c)));
    }
    json_t *lp = json_null();
    if (g->logprobs && ev->logprobs) {
        if (g->api == TR_API_CHAT) {
            lp = json_pack("{s:o}", "content", chat_lp_entries(q->srv, ev, g->top_logprobs));
        } else {
            lp = completion_lp_new();
            completion_lp_add(q->srv, lp, ev, &q->choices[ci].lp_offset);
        }
    }
    json_t *text = json_stringn(ev->text, ev->text_len);
    json_t *c = g->api == TR_API_CHAT
                    ? json_pack("{s:i,s:{s:o},s:o,s:n}", "index", ci, "delta", "content", text,
                                "logprobs", lp, "finish_reason")
                    : json_pack("{s:i,s:o,s:o,s:n}", "index", ci, "text", text, "logprobs", lp,
                                "finish_reason");
    return tr_srv_send_event(q, tr_srv_chunk(q, json_pack("[o]", c)));
}

int tr_srv_stream_finish(tr_srv_req *q, int32_t ci, const trellis_event *ev) {
    tr_srv_choice *ch = &q->choices[ci];
    if (stream_echo(q, ci) != 0) return -1;
    if (q->gen.api == TR_API_GENERATE) {
        json_t *item = generate_stream_item(q, ci);
        json_object_set_new(json_object_get(item, "meta_info"), "finish_reason",
                            generate_finish(q, ch));
        return tr_srv_send_event(q, item);
    }
    if (ch->finish == TRELLIS_FINISH_ERROR) {
        json_t *e = json_pack("{s:{s:s,s:s,s:n,s:n}}", "error", "message",
                              ch->error ? ch->error : "generation failed", "type", "server_error",
                              "param", "code");
        tr_srv_send_event(q, e);
    }
    json_t *c;
    if (q->gen.api == TR_API_CHAT) { /* OpenAI: an empty delta of its own */
        bool called = false;
        if (q->gen.tools.active && tr_srv_tool_stream_end(q, ci, &called) != 0) return -1;
        c = json_pack("{s:i,s:{},s:n,s:o,s:o}", "index", ci, "delta", "logprobs",
                      "finish_reason",
                      called ? json_string("tool_calls") : finish_json(ch->finish),
                      "matched_stop", matched_stop(q, ch));
    } else {
        /* completions: the last piece of text comes with the finish_reason,
         * with its log-probabilities (empty lists when it has no token)
         * when they were asked for */
        json_t *lp = json_null();
        if (q->gen.logprobs) {
            lp = completion_lp_new();
            completion_lp_add(q->srv, lp, ev, &ch->lp_offset);
        }
        c = json_pack("{s:i,s:o,s:o,s:o,s:o}", "index", ci, "text",
                      json_stringn(ev->text, ev->text_len), "logprobs", lp, "finish_reason",
                      finish_json(ch->finish), "matched_stop", matched_stop(q, ch));
    }
    return tr_srv_send_event(q, tr_srv_chunk(q, json_pack("[o]", c)));
}

int tr_srv_stream_close(tr_srv_req *q) {
    if (q->gen.include_usage && q->gen.api != TR_API_GENERATE) {
        json_t *o = tr_srv_chunk(q, json_array());
        json_object_set_new(o, "usage", usage_json(q));
        tr_srv_send_event(q, o);
    }
    const char *done = "data: [DONE]\n\n";
    return q->conn ? tr_http_stream_write(q->conn, done, strlen(done)) : -1;
}
