/* cli_json.c — see cli_json_internal.h. */
#include "app/cli/cli_json_internal.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "base/utf8.h"

/* A JSON number, or null when x is not finite (JSON has no inf/nan). */
static json_t *num(double x) { return isfinite(x) ? json_real(x) : json_null(); }

/* s[0..n) as a JSON string; bytes that begin no valid character become
 * U+FFFD, one per maximal invalid subpart (Unicode's recommended
 * practice, as tr_utf8_partial defines it). */
static json_t *text_value(const char *s, size_t n) {
    if (!s) return json_string("");
    if (tr_utf8_valid(s, n)) return json_stringn(s, n);
    /* each bad byte grows to at most 3 bytes (EF BF BD) */
    char *buf = malloc(3 * n + 1);
    if (!buf) return NULL;
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        size_t need = 1;
        size_t k = tr_utf8_partial((const uint8_t *)s + i, n - i, &need);
        if (k == need && k > 0) {
            memcpy(buf + o, s + i, k);
            o += k;
            i += k;
            continue;
        }
        memcpy(buf + o, "\xEF\xBF\xBD", 3);
        o += 3;
        i += k ? k : 1;
    }
    json_t *v = json_stringn(buf, o);
    free(buf);
    return v;
}

/* A C string (NULL: "") as JSON text. */
static json_t *str(const char *s) { return text_value(s, s ? strlen(s) : 0); }

/* A token's bytes: a string when valid UTF-8, else an array of bytes. */
static json_t *piece_value(const char *p, size_t n) {
    if (!p) return json_null();
    if (tr_utf8_valid(p, n)) return json_stringn(p, n);
    json_t *a = json_array();
    for (size_t i = 0; a && i < n; i++)
        json_array_append_new(a, json_integer((unsigned char)p[i]));
    return a;
}

static json_t *piece_of(cli_piece_fn piece, const void *ctx, int32_t id) {
    size_t len = 0;
    const char *p = piece ? piece(ctx, id, &len) : NULL;
    return piece_value(p, len);
}

/* Serializes and frees root; NULL when out of memory (jansson gives NULL
 * for any member that could not be made, and json_dumps refuses nothing
 * else: every string here was checked or built valid). */
static char *dump(json_t *root, size_t flags) {
    char *s = root ? json_dumps(root, JSON_COMPACT | flags) : NULL;
    json_decref(root);
    return s;
}

char *tr_cli_json_tokenize(const int32_t *ids, size_t n, cli_piece_fn piece,
                           const void *ctx) {
    json_t *root = json_object(), *arr = json_array(), *pieces = json_array();
    for (size_t i = 0; arr && pieces && i < n; i++) {
        json_array_append_new(arr, json_integer(ids[i]));
        json_array_append_new(pieces, piece_of(piece, ctx, ids[i]));
    }
    json_object_set_new(root, "ids", arr);
    json_object_set_new(root, "pieces", pieces);
    json_object_set_new(root, "count", json_integer((json_int_t)n));
    return dump(root, 0);
}

static json_t *logprob_entry(const trellis_logprob *lp, cli_piece_fn piece,
                             const void *ctx) {
    json_t *o = json_object(), *top = json_array();
    json_object_set_new(o, "id", json_integer(lp->token));
    json_object_set_new(o, "text", piece_of(piece, ctx, lp->token));
    json_object_set_new(o, "logprob", num(lp->logprob));
    int32_t n_top = lp->n_top < 0 ? 0 : lp->n_top;
    if (n_top > TRELLIS_MAX_TOP_LOGPROBS) n_top = TRELLIS_MAX_TOP_LOGPROBS;
    for (int32_t k = 0; top && k < n_top; k++) {
        json_t *t = json_object();
        json_object_set_new(t, "id", json_integer(lp->top[k].token));
        json_object_set_new(t, "text", piece_of(piece, ctx, lp->top[k].token));
        json_object_set_new(t, "logprob", num(lp->top[k].logprob));
        json_array_append_new(top, t);
    }
    json_object_set_new(o, "top", top);
    return o;
}

static json_t *timings(const cli_sample_json *s) {
    const trellis_metrics *m = &s->metrics;
    /* prefill: submit to first token (tokenizing, prefill, first sample);
     * decode: first token to last */
    double decode_ms = m->e2e_ms > m->ttft_ms ? m->e2e_ms - m->ttft_ms : 0.0;
    json_t *t = json_object();
    json_object_set_new(t, "load_ms", num(s->load_ms));
    json_object_set_new(t, "prefill_ms", num(m->ttft_ms));
    json_object_set_new(t, "prefill_tok_per_s",
                        num(m->ttft_ms > 0 ? m->prompt_tokens / (m->ttft_ms / 1e3) : 0));
    json_object_set_new(t, "decode_ms", num(decode_ms));
    json_object_set_new(t, "decode_tok_per_s", num(m->tpot_ms > 0 ? 1e3 / m->tpot_ms : 0));
    json_object_set_new(t, "queue_ms", num(m->queue_ms));
    json_object_set_new(t, "ttft_ms", num(m->ttft_ms));
    json_object_set_new(t, "e2e_ms", num(m->e2e_ms));
    json_object_set_new(t, "spec_accepted_tokens", json_integer(m->spec_accepted_tokens));
    return t;
}

static json_t *constraint(const cli_sample_json *s) {
    const trellis_metrics *m = &s->metrics;
    json_t *c = json_object();
    bool stop = s->finish && strcmp(s->finish, "stop") == 0;
    int32_t sampled = m->completion_tokens - m->forced_tokens;
    json_object_set_new(c, "kind", str(s->constraint));
    /* stopped by the constraint itself (complete) or by the end-of-
     * generation token, which a constraint allows only when complete */
    json_object_set_new(c, "accepted", json_boolean(stop && !s->stop));
    json_object_set_new(c, "forced_tokens", json_integer(m->forced_tokens));
    /* each sampled token but the last was fed in a forward pass */
    json_object_set_new(c, "forward_passes", json_integer(sampled > 1 ? sampled - 1 : 0));
    json_object_set_new(c, "compile_ms", num(s->constraint_ms));
    return c;
}

char *tr_cli_json_sample(const cli_sample_json *s, cli_piece_fn piece, const void *ctx) {
    json_t *root = json_object(), *ids = json_array();
    json_object_set_new(root, "index", json_integer(s->index));
    json_object_set_new(root, "text", text_value(s->text, s->text_len));
    for (int32_t i = 0; ids && i < s->n_tokens; i++)
        json_array_append_new(ids, json_integer(s->tokens[i]));
    json_object_set_new(root, "tokens", ids);
    if (s->logprobs) {
        json_t *lps = json_array();
        for (int32_t i = 0; lps && i < s->n_tokens; i++)
            json_array_append_new(lps, logprob_entry(&s->logprobs[i], piece, ctx));
        json_object_set_new(root, "logprobs", lps);
    }
    json_object_set_new(root, "prompt_tokens", json_integer(s->metrics.prompt_tokens));
    json_object_set_new(root, "cached_tokens", json_integer(s->metrics.cached_tokens));
    json_object_set_new(root, "completion_tokens", json_integer(s->n_tokens));
    json_object_set_new(root, "finish_reason", str(s->finish));
    if (s->stop) json_object_set_new(root, "stop", str(s->stop));
    if (s->stop_token >= 0) {
        json_object_set_new(root, "stop_token", json_integer(s->stop_token));
        json_object_set_new(root, "stop_token_text", piece_of(piece, ctx, s->stop_token));
    }
    if (s->error) json_object_set_new(root, "error", str(s->error));
    json_object_set_new(root, "n_samples", json_integer(s->n_samples));
    json_object_set_new(root, "timings", timings(s));
    json_object_set_new(root, "threads", json_integer(s->threads));
    json_object_set_new(root, "model_load", str(s->model_load));
    if (s->kv_type_k) json_object_set_new(root, "kv_type_k", str(s->kv_type_k));
    if (s->kv_type_v) json_object_set_new(root, "kv_type_v", str(s->kv_type_v));
    if (s->constraint) json_object_set_new(root, "constraint", constraint(s));
    return dump(root, JSON_ENSURE_ASCII);
}
