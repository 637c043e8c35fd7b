/* echo.c — prompt log-probabilities in each API's shape, and OpenAI
 * completions' `echo` (the prompt before the completion's text).
 *
 * The engine hands a prompt's log-probs once, in sample 0's first event
 * (trellis_event.prompt_logprobs); tr_srv_plp_take turns them into the
 * API's JSON right there and keeps it on the sub-request, so every choice
 * of that prompt (n > 1) and every streamed chunk can use it.
 *
 *   /generate     meta_info.input_token_logprobs: [logprob, id, text]
 *                 per position from logprob_start_len (logprob null at
 *                 position 0; text null unless return_text_in_logprobs),
 *                 and input_top_logprobs with top_logprobs_num: a list of
 *                 [logprob, id, text] per position (null at position 0),
 *                 as SGLang returns them.
 *   completions   with echo and logprobs: the prompt's tokens first in
 *                 `tokens`, `token_logprobs` (null for the first, as
 *                 OpenAI returns it), `top_logprobs` (null for the first)
 *                 and `text_offset` (byte offsets into the echoed text,
 *                 from 0; the completion's tokens continue after the
 *                 prompt's bytes).
 *
 * Layering: app/server; loop thread. */
#include <math.h>
#include <string.h>

#include "app/server/server_internal.h"

static json_t *tok_text(const tr_srv *s, int32_t id) {
    size_t n = 0;
    const char *p = trellis_token_text(s->engine, id, &n);
    return p ? tr_srv_lossy_string(p, n) : json_string("");
}

static json_t *lp_json(float x) {
    if (isnan(x)) return json_null();
    return json_real(isfinite(x) ? (double)x : -9999.0);
}

json_t *tr_srv_generate_lp_entry(const tr_srv *s, float logprob, int32_t id, bool text) {
    return json_pack("[o,I,o]", lp_json(logprob), (json_int_t)id,
                     text ? tok_text(s, id) : json_null());
}

static json_t *plp_generate(const tr_srv *s, const tr_srv_gen *g, const trellis_event *ev) {
    json_t *toks = json_array(), *tops = json_array();
    for (int32_t i = 0; i < ev->n_prompt_logprobs; i++) {
        const trellis_logprob *lp = &ev->prompt_logprobs[i];
        json_array_append_new(toks, tr_srv_generate_lp_entry(s, lp->logprob, lp->token,
                                                             g->lp_text));
        if (isnan(lp->logprob)) {
            json_array_append_new(tops, json_null());
            continue;
        }
        json_t *t = json_array();
        for (int32_t k = 0; k < lp->n_top; k++)
            json_array_append_new(t, tr_srv_generate_lp_entry(s, lp->top[k].logprob,
                                                              lp->top[k].token, g->lp_text));
        json_array_append_new(tops, t);
    }
    json_t *o = json_pack("{s:o}", "input_token_logprobs", toks);
    if (g->top_logprobs > 0) json_object_set_new(o, "input_top_logprobs", tops);
    else json_decref(tops);
    return o;
}

static json_t *plp_completion(const tr_srv *s, const trellis_event *ev) {
    json_t *toks = json_array(), *lps = json_array(), *tops = json_array(),
           *offs = json_array();
    size_t off = 0;
    for (int32_t i = 0; i < ev->n_prompt_logprobs; i++) {
        const trellis_logprob *lp = &ev->prompt_logprobs[i];
        json_array_append_new(toks, tok_text(s, lp->token));
        json_array_append_new(lps, lp_json(lp->logprob));
        json_t *t = json_null();
        if (!isnan(lp->logprob)) {
            t = json_object();
            for (int32_t k = 0; k < lp->n_top; k++) {
                json_t *ks = tok_text(s, lp->top[k].token);
                json_object_set_new(t, json_string_value(ks), lp_json(lp->top[k].logprob));
                json_decref(ks);
            }
        }
        json_array_append_new(tops, t);
        json_array_append_new(offs, json_integer((json_int_t)off));
        size_t n = 0;
        trellis_token_text(s->engine, lp->token, &n);
        off += n;
    }
    return json_pack("{s:o,s:o,s:o,s:o}", "tokens", toks, "token_logprobs", lps,
                     "top_logprobs", tops, "text_offset", offs);
}

void tr_srv_plp_take(tr_srv_req *q, tr_srv_sub *sub, const trellis_event *ev) {
    if (!ev->prompt_logprobs || sub->plp) return;
    sub->plp = q->gen.api == TR_API_GENERATE ? plp_generate(q->srv, &q->gen, ev)
                                             : plp_completion(q->srv, ev);
}

/* The prompt as echoed: the text as given, or its tokens' bytes. */
static json_t *echo_text(const tr_srv_req *q, const tr_srv_sub *sub, size_t *len) {
    const tr_srv_prompt *p = &q->gen.prompts[sub->prompt];
    if (p->text) {
        *len = p->len;
        return tr_srv_lossy_string(p->text, p->len);
    }
    tr_sbuf b = {0};
    for (int32_t i = 0; i < p->n_tokens; i++) {
        size_t n = 0;
        const char *t = trellis_token_text(q->srv->engine, p->tokens[i], &n);
        if (t) tr_sbuf_append(&b, t, n);
    }
    *len = b.len;
    json_t *j = tr_srv_lossy_string(b.data ? b.data : "", b.len);
    tr_sbuf_reset(&b);
    return j;
}

size_t tr_srv_echo_len(const tr_srv_req *q, const tr_srv_sub *sub) {
    size_t n = 0;
    json_decref(echo_text(q, sub, &n));
    return n;
}

json_t *tr_srv_echo_text(const tr_srv_req *q, const tr_srv_sub *sub, const tr_sbuf *rest) {
    size_t n = 0;
    json_t *p = echo_text(q, sub, &n);
    tr_sbuf b = {0};
    tr_sbuf_append(&b, json_string_value(p), json_string_length(p));
    if (rest && rest->len) tr_sbuf_append(&b, rest->data, rest->len);
    json_decref(p);
    json_t *j = json_stringn(b.data ? b.data : "", b.len);
    tr_sbuf_reset(&b);
    return j;
}

json_t *tr_srv_echo_logprobs(const tr_srv_sub *sub, const json_t *completion) {
    static const char *keys[] = {"tokens", "token_logprobs", "top_logprobs", "text_offset"};
    json_t *o = json_object();
    for (int k = 0; k < 4; k++) {
        json_t *a = json_array();
        if (sub->plp) json_array_extend(a, json_object_get(sub->plp, keys[k]));
        if (completion) json_array_extend(a, json_object_get(completion, keys[k]));
        json_object_set_new(o, keys[k], a);
    }
    return o;
}
