/* tool_respond.c — OpenAI tool calling, response side: a chat choice's
 * text (written under the tool grammar, tools.c) as `message.content` and
 * `message.tool_calls`, whole or streamed as OpenAI streams calls (the
 * call's id, type and name first with empty arguments, then argument
 * pieces), and finish_reason "tool_calls" when the choice ended on its
 * calls.
 *
 * Layering: app/server, loop thread (tool_parse.c does the reading).
 */
#include <stdio.h>
#include <string.h>

#include "app/server/server_internal.h"

static json_t *call_id(const tr_srv_req *q, int32_t ci, int32_t k) {
    char id[96];
    snprintf(id, sizeof id, "call_%s_%d_%d", q->id, (int)ci, (int)k);
    return json_string(id);
}

/* ---- whole ---- */

typedef struct collect {
    const tr_srv_req *q;
    int32_t ci;
    tr_sbuf content;
    json_t *calls;
    bool oom;
} collect;

static void col_content(void *u, const char *p, size_t n) {
    collect *c = u;
    if (tr_sbuf_append(&c->content, p, n)) c->oom = true;
}

static void col_start(void *u, int32_t k, const char *name, size_t n) {
    collect *c = u;
    json_t *call = json_pack("{s:o,s:s,s:{s:s%,s:s}}", "id", call_id(c->q, c->ci, k), "type",
                             "function", "function", "name", name, n, "arguments", "");
    if (!call || json_array_append_new(c->calls, call)) c->oom = true;
}

static void col_args(void *u, int32_t k, const char *p, size_t n) {
    collect *c = u;
    json_t *f = json_object_get(json_array_get(c->calls, (size_t)k), "function");
    json_t *a = json_object_get(f, "arguments");
    if (!a) return;
    tr_sbuf b = {0};
    if (tr_sbuf_append(&b, json_string_value(a), json_string_length(a)) ||
        tr_sbuf_append(&b, p, n) ||
        json_object_set_new(f, "arguments", json_stringn(b.data, b.len)))
        c->oom = true;
    tr_sbuf_reset(&b);
}

json_t *tr_srv_tool_message(const tr_srv_req *q, int32_t ci, const tr_sbuf *text,
                            bool *called) {
    collect c = {.q = q, .ci = ci, .calls = json_array()};
    tr_tp_sink sink = {col_content, col_start, col_args, &c};
    tr_tp *tp = tr_tp_new(q->gen.tools.format_first, &sink);
    bool unfinished = false;
    int32_t done = 0;
    if (tp && tr_tp_feed(tp, text->data ? text->data : "", text->len) == 0)
        done = tr_tp_finish(tp, &unfinished);
    else
        c.oom = true;
    tr_tp_free(tp);
    const tr_srv_choice *ch = &q->choices[ci];
    *called = done > 0 && !unfinished && ch->finish == TRELLIS_FINISH_STOP;
    /* a call cut short (max_tokens) is not a call: its arguments are not
     * valid JSON yet; finish_reason "length" says so */
    while (json_array_size(c.calls) > (size_t)done)
        json_array_remove(c.calls, json_array_size(c.calls) - 1);
    json_t *content = c.content.len || !json_array_size(c.calls)
                          ? json_stringn(c.content.data ? c.content.data : "", c.content.len)
                          : json_null();
    tr_sbuf_reset(&c.content);
    json_t *m = json_pack("{s:s,s:o}", "role", "assistant", "content", content);
    if (m && json_array_size(c.calls)) json_object_set(m, "tool_calls", c.calls);
    json_decref(c.calls);
    if (c.oom) { /* never a half answer: the raw text as content */
        json_decref(m);
        m = json_pack("{s:s,s:s%}", "role", "assistant", "content",
                      text->data ? text->data : "", text->len);
        *called = false;
    }
    return m;
}

/* ---- streamed ---- */

typedef struct streamer {
    tr_srv_req *q;
    int32_t ci;
    int rc;
} streamer;

static void send_delta(streamer *s, json_t *delta) {
    json_t *c = json_pack("{s:i,s:o,s:n,s:n}", "index", s->ci, "delta", delta, "logprobs",
                          "finish_reason");
    if (tr_srv_send_event(s->q, tr_srv_chunk(s->q, json_pack("[o]", c))) != 0) s->rc = -1;
}

static void st_content(void *u, const char *p, size_t n) {
    send_delta(u, json_pack("{s:s%}", "content", p, n));
}

static void st_start(void *u, int32_t k, const char *name, size_t n) {
    streamer *s = u;
    send_delta(s, json_pack("{s:[{s:i,s:o,s:s,s:{s:s%,s:s}}]}", "tool_calls", "index", k, "id",
                            call_id(s->q, s->ci, k), "type", "function", "function", "name",
                            name, n, "arguments", ""));
}

static void st_args(void *u, int32_t k, const char *p, size_t n) {
    send_delta(u, json_pack("{s:[{s:i,s:{s:s%}}]}", "tool_calls", "index", k, "function",
                            "arguments", p, n));
}

int tr_srv_tool_stream(tr_srv_req *q, int32_t ci, const char *text, size_t n) {
    tr_srv_choice *ch = &q->choices[ci];
    streamer s = {q, ci, 0};
    tr_tp_sink sink = {st_content, st_start, st_args, &s};
    if (!ch->tp && !(ch->tp = tr_tp_new(q->gen.tools.format_first, &sink))) return -1;
    tr_tp_set_user(ch->tp, &s); /* the sink's context lives for this call */
    if (tr_tp_feed(ch->tp, text, n) != 0) return -1;
    return s.rc;
}

int tr_srv_tool_stream_end(tr_srv_req *q, int32_t ci, bool *called) {
    tr_srv_choice *ch = &q->choices[ci];
    *called = false;
    if (!ch->tp) return 0;
    streamer s = {q, ci, 0};
    tr_tp_set_user(ch->tp, &s);
    bool unfinished = false;
    int32_t done = tr_tp_finish(ch->tp, &unfinished);
    *called = done > 0 && !unfinished && ch->finish == TRELLIS_FINISH_STOP;
    return s.rc;
}
