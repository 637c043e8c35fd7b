/* submit.c — trellis_submit: checks a request, builds its prompt tokens,
 * resolves its constraint, copies everything into one engine_req and
 * queues it.
 *
 * Layering: runtime/engine; runs on the embedder's thread and reads only
 * the engine's immutable fields (tokenizer, vocabulary, chat template,
 * limits), so any number of threads may submit at once.
 *
 * Everything that can be known before the request runs is checked here, so
 * that an impossible request fails at once with a sentence saying why
 * instead of occupying the queue: prompt source, empty prompt, max_tokens,
 * context and pool limits, sampling parameters, stop strings and tokens,
 * the constraint. A request's `regex` is compiled here, on the caller's
 * thread, through the engine's grammar cache (grammar_cache_internal.h): N requests
 * with one regex compile it once, and the engine thread never compiles.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/utf8.h"
#include "base/util.h"
#include "runtime/engine/engine_internal.h"

#include "runtime/chat/chat.h"

void trellis_request_default(trellis_request *r) {
    memset(r, 0, sizeof *r);
    /* the sampling defaults are the sampler's own (one place) */
    sampler_params sp = tr_sampler_params_default();
    r->temperature = sp.temperature;
    r->top_k = sp.top_k;
    r->top_p = sp.top_p;
    r->min_p = sp.min_p;
    r->repetition_penalty = sp.repetition_penalty;
    r->presence_penalty = sp.presence_penalty;
    r->frequency_penalty = sp.frequency_penalty;
    r->penalty_last_n = sp.penalty_last_n;
    r->seed = sp.seed;
    r->max_tokens = 128;
    r->n = 1;
    r->spec_ngram = -1; /* the engine's */
    r->spec_draft = -1;
}

/* The one conversion from a request to sampler parameters (sample i of n
 * then adds i to the seed, sched.c). logit_bias is left empty: the
 * engine points it at its own copy of the request's array. */
static sampler_params request_sampler_params(const trellis_request *r) {
    sampler_params sp = tr_sampler_params_default();
    sp.temperature = r->temperature;
    sp.top_k = r->top_k;
    sp.top_p = r->top_p;
    sp.min_p = r->min_p;
    sp.repetition_penalty = r->repetition_penalty;
    sp.presence_penalty = r->presence_penalty;
    sp.frequency_penalty = r->frequency_penalty;
    sp.penalty_last_n = r->penalty_last_n;
    sp.seed = r->seed;
    sp.n_logprobs = r->logprobs ? r->top_logprobs : 0;
    return sp;
}

/* The plain sampler that computes prompt log-probs (prompt_lp.c): no
 * penalties, bias or truncation, the request's number of alternatives. */
static int plp_setup(trellis_engine *e, engine_req *q, const trellis_request *r,
                     char *err, size_t cap) {
    sampler_params sp = tr_sampler_params_default();
    sp.n_logprobs = r->prompt_top_logprobs;
    tr_diag d = {0};
    tr_status st = tr_sampler_new(&sp, e->n_vocab, &q->plp_smp, &d);
    if (st != TR_OK)
        return tr_errf(err, cap, st, "prompt log-probs: %s",
                       d.message[0] ? d.message : "cannot create their sampler");
    q->plp = true;
    q->plp_start = r->prompt_logprobs_start;
    return TR_OK;
}

/* ---- prompt ---- */

static int append_ids(int32_t **ids, int32_t *n, const int32_t *src,
                      size_t k) {
    if (k > (size_t)INT32_MAX - (size_t)*n) return TR_ERR_TOO_LONG;
    int32_t *p = realloc(*ids, ((size_t)*n + k + 1) * sizeof *p);
    if (!p) return TR_ERR_NOMEM;
    if (k) memcpy(p + *n, src, k * sizeof *p);
    *ids = p;
    *n += (int32_t)k;
    return TR_OK;
}

static int encode_text(const trellis_engine *e, const char *text, size_t len,
                       bool parse_special, int32_t **ids, int32_t *n,
                       char *err, size_t cap) {
    if (!tr_utf8_valid(text, len))
        return tr_errf(err, cap, TR_ERR_INVALID_ARG, "the prompt is not valid UTF-8");
    if (e->add_bos) {
        int32_t bos = tr_tokenizer_bos(e->tok);
        int s = append_ids(ids, n, &bos, 1);
        if (s) return tr_errf(err, cap, s, "out of memory");
    }
    int32_t *enc = NULL;
    size_t n_enc = 0;
    tr_status s = tr_tokenizer_encode(e->tok, text, len, parse_special, &enc, &n_enc);
    if (s != TR_OK)
        return tr_errf(err, cap, s, "cannot tokenize the prompt: %s",
                       tr_status_message(s));
    int a = append_ids(ids, n, enc, n_enc);
    free(enc);
    if (a) return tr_errf(err, cap, a, "the prompt is too long");
    return TR_OK;
}

static int build_prompt(const trellis_engine *e, const trellis_request *r,
                        int32_t **ids, int32_t *n, char *err, size_t cap) {
    int sources = (r->prompt != NULL) + (r->tokens != NULL || r->n_tokens > 0) +
                  (r->messages != NULL || r->n_messages > 0);
    if (sources != 1)
        return tr_errf(err, cap, TR_ERR_INVALID_ARG,
                       "give exactly one of prompt, tokens or messages (got %d)",
                       sources);
    if (r->prompt) {
        size_t len = r->prompt_len ? r->prompt_len : strlen(r->prompt);
        return encode_text(e, r->prompt, len, r->parse_special, ids, n, err, cap);
    }
    if (r->tokens || r->n_tokens) {
        if (!r->tokens || r->n_tokens < 0)
            return tr_errf(err, cap, TR_ERR_INVALID_ARG, "bad token array");
        for (int32_t i = 0; i < r->n_tokens; i++)
            if (r->tokens[i] < 0 || r->tokens[i] >= e->n_vocab)
                return tr_errf(err, cap, TR_ERR_INVALID_ARG,
                               "prompt token %d at index %d is outside the "
                               "vocabulary (0..%d)",
                               r->tokens[i], i, e->n_vocab - 1);
        int s = append_ids(ids, n, r->tokens, (size_t)r->n_tokens);
        return s ? tr_errf(err, cap, s, "out of memory") : TR_OK;
    }
    if (!r->messages || r->n_messages <= 0)
        return tr_errf(err, cap, TR_ERR_INVALID_ARG, "bad message array");
    if (e->chat_kind == CHAT_TEMPLATE_NONE)
        return tr_errf(err, cap, TR_ERR_UNSUPPORTED,
                       "the model has no chat template Trellis knows");
    chat_message *msgs = calloc((size_t)r->n_messages, sizeof *msgs);
    if (!msgs) return tr_errf(err, cap, TR_ERR_NOMEM, "out of memory");
    for (int32_t i = 0; i < r->n_messages; i++) {
        msgs[i].role = r->messages[i].role;
        msgs[i].content = r->messages[i].content;
        if (msgs[i].content && !tr_utf8_valid(msgs[i].content, strlen(msgs[i].content))) {
            free(msgs);
            return tr_errf(err, cap, TR_ERR_INVALID_ARG,
                           "message %d is not valid UTF-8", i);
        }
    }
    char *text = NULL;
    size_t text_len = 0;
    tr_diag d = {0};
    tr_status s = tr_chat_render((chat_template_kind)e->chat_kind, e->chat_system,
                              msgs, (size_t)r->n_messages,
                              r->continue_final_message ? CHAT_END_CONTINUE
                              : r->no_generation_prompt ? CHAT_END_CLOSED
                                                        : CHAT_END_GENERATION_PROMPT,
                              &text, &text_len, &d);
    free(msgs);
    if (s != TR_OK)
        return tr_errf(err, cap, s, "cannot render the chat: %s",
                       d.message[0] ? d.message : tr_status_message(s));
    int rc = encode_text(e, text, text_len, true, ids, n, err, cap);
    free(text);
    return rc;
}

/* ---- submit ---- */

static int check_params(const trellis_engine *e, const trellis_request *r,
                        char *err, size_t cap) {
    if (r->n < 1 || r->n > TRELLIS_MAX_N)
        return tr_errf(err, cap, TR_ERR_INVALID_ARG, "n is %d, expected 1..%d",
                       r->n, TRELLIS_MAX_N);
    if (r->max_tokens < -1)
        return tr_errf(err, cap, TR_ERR_INVALID_ARG,
                       "max_tokens is %d (expected >= 1, -1 for as many as fit, "
                       "or 0 for prefill only)",
                       r->max_tokens);
    if (r->min_tokens < 0 || (r->max_tokens >= 0 && r->min_tokens > r->max_tokens))
        return tr_errf(err, cap, TR_ERR_INVALID_ARG,
                       "min_tokens is %d, expected 0..max_tokens (%d)", r->min_tokens,
                       r->max_tokens);
    if (r->top_logprobs < 0 || r->top_logprobs > TRELLIS_MAX_TOP_LOGPROBS)
        return tr_errf(err, cap, TR_ERR_INVALID_ARG,
                       "top_logprobs is %d, expected 0..%d", r->top_logprobs,
                       TRELLIS_MAX_TOP_LOGPROBS);
    if (r->top_logprobs > 0 && !r->logprobs)
        return tr_errf(err, cap, TR_ERR_INVALID_ARG, "top_logprobs needs logprobs");
    if (r->spec_ngram < -1 || r->spec_ngram > 32)
        return tr_errf(err, cap, TR_ERR_INVALID_ARG,
                       "spec_ngram is %d, expected -1 (the engine's), 0 (off) or 1..32",
                       r->spec_ngram);
    if (r->spec_draft < -1 || r->spec_draft > 16)
        return tr_errf(err, cap, TR_ERR_INVALID_ARG,
                       "spec_draft is %d, expected -1 (the engine's), 0 (off) or 1..16",
                       r->spec_draft);
    if (r->prompt_top_logprobs < 0 || r->prompt_top_logprobs > TRELLIS_MAX_TOP_LOGPROBS)
        return tr_errf(err, cap, TR_ERR_INVALID_ARG,
                       "prompt_top_logprobs is %d, expected 0..%d",
                       r->prompt_top_logprobs, TRELLIS_MAX_TOP_LOGPROBS);
    if ((r->prompt_top_logprobs > 0 || r->prompt_logprobs_start != 0) &&
        !r->prompt_logprobs)
        return tr_errf(err, cap, TR_ERR_INVALID_ARG,
                       "prompt_top_logprobs and prompt_logprobs_start need "
                       "prompt_logprobs");
    if (r->n_stop < 0 || r->n_stop > TRELLIS_MAX_STOP || (r->n_stop && !r->stop))
        return tr_errf(err, cap, TR_ERR_INVALID_ARG,
                       "%d stop strings (at most %d)", r->n_stop, TRELLIS_MAX_STOP);
    for (int32_t k = 0; k < r->n_stop; k++) {
        const char *s = r->stop[k];
        size_t len = s ? strlen(s) : 0;
        if (len == 0)
            return tr_errf(err, cap, TR_ERR_INVALID_ARG, "stop string %d is empty", k);
        if (len > TRELLIS_MAX_STOP_LEN)
            return tr_errf(err, cap, TR_ERR_INVALID_ARG,
                           "stop string %d is %zu bytes (at most %d)", k, len,
                           TRELLIS_MAX_STOP_LEN);
        if (!tr_utf8_valid(s, len))
            return tr_errf(err, cap, TR_ERR_INVALID_ARG,
                           "stop string %d is not valid UTF-8", k);
    }
    if (r->n_stop_regex < 0 || r->n_stop_regex > TRELLIS_MAX_STOP ||
        (r->n_stop_regex && !r->stop_regex))
        return tr_errf(err, cap, TR_ERR_INVALID_ARG, "%d stop patterns (at most %d)",
                       r->n_stop_regex, TRELLIS_MAX_STOP);
    for (int32_t k = 0; k < r->n_stop_regex; k++) {
        const char *s = r->stop_regex[k];
        size_t len = s ? strlen(s) : 0;
        if (len == 0)
            return tr_errf(err, cap, TR_ERR_INVALID_ARG, "stop_regex %d is empty", k);
        if (len > TRELLIS_MAX_STOP_LEN)
            return tr_errf(err, cap, TR_ERR_INVALID_ARG,
                           "stop_regex %d is %zu bytes (at most %d)", k, len,
                           TRELLIS_MAX_STOP_LEN);
    }
    if (r->n_stop_tokens < 0 || r->n_stop_tokens > 1024 ||
        (r->n_stop_tokens && !r->stop_tokens))
        return tr_errf(err, cap, TR_ERR_INVALID_ARG, "bad stop token array");
    for (int32_t k = 0; k < r->n_stop_tokens; k++)
        if (r->stop_tokens[k] < 0 || r->stop_tokens[k] >= e->n_vocab)
            return tr_errf(err, cap, TR_ERR_INVALID_ARG,
                           "stop token %d is outside the vocabulary (0..%d)",
                           r->stop_tokens[k], e->n_vocab - 1);
    if (r->n_logit_bias < 0 || r->n_logit_bias > e->n_vocab ||
        (r->n_logit_bias && !r->logit_bias))
        return tr_errf(err, cap, TR_ERR_INVALID_ARG, "bad logit_bias array");
    for (int32_t k = 0; k < r->n_logit_bias; k++) {
        const trellis_logit_bias *b = &r->logit_bias[k];
        if (b->token < 0 || b->token >= e->n_vocab)
            return tr_errf(err, cap, TR_ERR_INVALID_ARG,
                           "logit_bias token %d is outside the vocabulary", b->token);
        if (isnan(b->bias) || b->bias == INFINITY)
            return tr_errf(err, cap, TR_ERR_INVALID_ARG,
                           "logit_bias of token %d is not finite", b->token);
    }
    if ((r->grammar != NULL) + (r->regex != NULL) + (r->constraint != NULL) > 1)
        return tr_errf(err, cap, TR_ERR_INVALID_ARG,
                       "give at most one of grammar, regex and constraint");
    if (r->grammar && r->grammar->v != e->gvocab)
        return tr_errf(err, cap, TR_ERR_INVALID_ARG,
                       "the grammar was compiled by another engine (for another "
                       "vocabulary)");
    if (r->end_span < TRELLIS_END_SPAN_AUTO || r->end_span > TRELLIS_END_SPAN_OFF)
        return tr_errf(err, cap, TR_ERR_INVALID_ARG,
                       "end_span is %d, not a TRELLIS_END_SPAN_* value", r->end_span);
    if (r->constraint_state && !r->constraint)
        return tr_errf(err, cap, TR_ERR_INVALID_ARG,
                       "constraint_state without constraint ops");
    if (r->constraint) {
        const trellis_constraint_ops *c = r->constraint;
        if (!c->fill_mask || !c->accept || !c->free)
            return tr_errf(err, cap, TR_ERR_INVALID_ARG,
                           "the constraint needs fill_mask, accept and free");
        if (r->n > 1 && !c->clone)
            return tr_errf(err, cap, TR_ERR_INVALID_ARG,
                           "n > 1 with a constraint needs its clone operation");
        if (!c->forced_bytes != !c->rollback)
            return tr_errf(err, cap, TR_ERR_INVALID_ARG,
                           "the constraint has only one of forced_bytes and "
                           "rollback: jump-forward needs both (or neither)");
    }
    return TR_OK;
}

int trellis_submit(trellis_engine *e, const trellis_request *r,
                   uint64_t *id_out, char *err, size_t cap) {
    if (err && cap) err[0] = 0;
    if (!e || !r) return tr_errf(err, cap, TR_ERR_INVALID_ARG, "no engine or request");
    int rc = check_params(e, r, err, cap);
    if (rc) return rc;

    sampler_params sp = request_sampler_params(r);
    tr_diag d = {0};
    tr_status s = tr_sampler_params_validate(&sp, &d);
    if (s != TR_OK)
        return tr_errf(err, cap, s, "bad sampling parameters: %s", d.message);

    int32_t *prompt = NULL, n_prompt = 0;
    rc = build_prompt(e, r, &prompt, &n_prompt, err, cap);
    if (rc) {
        free(prompt);
        return rc;
    }
    if (n_prompt == 0) {
        free(prompt);
        return tr_errf(err, cap, TR_ERR_INVALID_ARG,
                       "the prompt is empty (no tokens to start from)");
    }
    if (r->prompt_logprobs &&
        (r->prompt_logprobs_start < -n_prompt || r->prompt_logprobs_start >= n_prompt)) {
        free(prompt);
        return tr_errf(err, cap, TR_ERR_INVALID_ARG,
                       "prompt_logprobs_start is %d, but the prompt has %d tokens "
                       "(expected 0..%d, or -%d..-1 from the end; positions count "
                       "the BOS token when one is added)",
                       r->prompt_logprobs_start, n_prompt, n_prompt - 1, n_prompt);
    }
    int64_t pool_tokens = tr_win_pool_tokens(e);
    int64_t max_tokens = r->max_tokens;
    if (max_tokens == -1) {
        max_tokens = TR_MIN((int64_t)e->n_ctx, pool_tokens) - n_prompt;
        if (max_tokens < 1) {
            free(prompt);
            return tr_errf(err, cap, TR_ERR_TOO_LONG,
                           "the prompt is %d tokens: no room for a completion "
                           "(context %d, KV pool %lld tokens)",
                           n_prompt, e->n_ctx, (long long)pool_tokens);
        }
    }
    if (r->min_tokens > max_tokens) { /* max_tokens -1, resolved */
        free(prompt);
        return tr_errf(err, cap, TR_ERR_TOO_LONG,
                       "min_tokens is %d, but the prompt (%d tokens) leaves room for "
                       "only %lld (context %d, KV pool %lld tokens)",
                       r->min_tokens, n_prompt, (long long)max_tokens, e->n_ctx,
                       (long long)pool_tokens);
    }
    int64_t total = (int64_t)n_prompt + max_tokens;
    if (total > e->n_ctx) {
        free(prompt);
        return tr_errf(err, cap, TR_ERR_TOO_LONG,
                       "prompt (%d tokens) + max_tokens (%lld) = %lld exceeds the "
                       "context of %d tokens",
                       n_prompt, (long long)max_tokens, (long long)total, e->n_ctx);
    }
    int32_t need_pages = tr_sched_pages_for(e, total); /* page slots */
    int64_t need_ids = tr_win_pages_for(e, total);
    if (need_ids > e->n_pages) {
        free(prompt);
        return tr_errf(err, cap, TR_ERR_LIMIT,
                       "prompt (%d tokens) + max_tokens (%lld) needs %lld KV pages "
                       "of %d tokens, but the whole pool has %d",
                       n_prompt, (long long)max_tokens, (long long)need_ids, e->page_size,
                       e->n_pages);
    }

    /* the constraint: a grammar handle (the request's own or its regex,
     * compiled here through the cache), or the caller's ops */
    void *cstate = r->constraint_state;
    const trellis_constraint_ops *cops = r->constraint;
    bool owned_state = false; /* ours to free on failure */
    bool end_span = r->end_span == TRELLIS_END_SPAN_ON;
    if (r->grammar || r->regex) {
        trellis_grammar *h = (trellis_grammar *)r->grammar;
        if (h) {
            trellis_grammar_ref(h);
        } else {
            rc = trellis_grammar_compile(e, TRELLIS_GRAMMAR_REGEX, r->regex,
                                         strlen(r->regex), NULL, &h, err, cap);
            if (rc) {
                free(prompt);
                return rc;
            }
        }
        if (r->end_span == TRELLIS_END_SPAN_AUTO)
            end_span = tr_engine_grammar_kind_ends_spans(h->kind);
        cstate = tr_gconstraint_new(h, tr_gcache_counters(e->gcache));
        trellis_grammar_release(h); /* the state holds its own reference */
        if (!cstate) {
            free(prompt);
            return tr_errf(err, cap, TR_ERR_NOMEM, "out of memory");
        }
        cops = &tr_gconstraint_ops;
        owned_state = true;
    }

    engine_req *q = calloc(1, sizeof *q + (size_t)r->n * sizeof(engine_seq));
    if (!q) goto nomem;
    q->n = r->n;
    q->prompt = prompt;
    q->n_prompt = n_prompt;
    prompt = NULL;
    q->sp = sp;
    q->max_tokens = (int32_t)max_tokens;
    q->min_tokens = r->min_tokens;
    q->spec_max = r->spec_ngram < 0 ? e->opt.spec_ngram : r->spec_ngram;
    q->draft_max = !e->draft ? 0 : r->spec_draft < 0 ? e->opt.spec_draft : r->spec_draft;
    q->logprobs = r->logprobs;
    q->top_logprobs = r->top_logprobs;
    q->ignore_eos = r->ignore_eos;
    q->stream = r->stream;
    q->ns = r->cache_namespace & ~(1ull << 63);
    q->user = r->user;
    q->cops = cops;
    q->cstate0 = cstate;
    q->jump_forward = cops && cops->forced_bytes && cops->rollback &&
                      !r->no_jump_forward;
    q->end_span = cops && end_span;
    if (r->n_logit_bias) {
        q->bias = malloc((size_t)r->n_logit_bias * sizeof *q->bias);
        if (!q->bias) goto nomem;
        for (int32_t k = 0; k < r->n_logit_bias; k++)
            q->bias[k] = (sampler_logit_bias){r->logit_bias[k].token,
                                              r->logit_bias[k].bias};
        q->sp.logit_bias = q->bias;
        q->sp.n_logit_bias = r->n_logit_bias;
    }
    if (r->prompt_logprobs && (rc = plp_setup(e, q, r, err, cap)) != TR_OK) goto fail;
    if (q->plp && q->plp_start < 0) q->plp_start += n_prompt; /* from the end */
    if (r->n_stop) {
        q->stop = calloc((size_t)r->n_stop, sizeof *q->stop);
        q->stop_len = calloc((size_t)r->n_stop, sizeof *q->stop_len);
        if (!q->stop || !q->stop_len) goto nomem;
        q->n_stop = r->n_stop;
        for (int32_t k = 0; k < r->n_stop; k++) {
            q->stop[k] = strdup(r->stop[k]);
            if (!q->stop[k]) goto nomem;
            q->stop_len[k] = strlen(q->stop[k]);
        }
    }
    if (r->n_stop_regex) {
        rc = tr_stop_regex_set_new(e->gvocab, r->stop_regex, r->n_stop_regex,
                                   &q->stop_rx, err, cap);
        if (rc) goto fail;
    }
    if (r->n_stop_tokens) {
        q->stop_tokens = malloc((size_t)r->n_stop_tokens * sizeof(int32_t));
        if (!q->stop_tokens) goto nomem;
        memcpy(q->stop_tokens, r->stop_tokens,
               (size_t)r->n_stop_tokens * sizeof(int32_t));
        q->n_stop_tokens = r->n_stop_tokens;
    }
    for (int32_t i = 0; i < q->n; i++) {
        engine_seq *sq = &q->seqs[i];
        sq->req = q;
        sq->index = i;
        sq->state = SEQ_NEW;
        sq->cap = (int32_t)total;
        sq->len = n_prompt;
        sq->tokens = malloc((size_t)total * sizeof(int32_t));
        sq->pages_cap = need_pages;
        sq->pages = malloc((size_t)need_pages * (size_t)e->W * sizeof(int32_t));
        sq->spare = malloc(sizeof(engine_event_box));
        if (!sq->tokens || !sq->pages || !sq->spare) goto nomem;
        memcpy(sq->tokens, q->prompt, (size_t)n_prompt * sizeof(int32_t));
        if (q->stop_rx && !(sq->stop_scan = tr_stop_scan_new(q->stop_rx))) goto nomem;
        sq->stop_index = -1;
        sq->stop_token = -1;
        sq->logit_row = -1;
    }
    if (q->plp) {
        /* sample 0 computes them (prompt_lp.c); position 0 has none */
        engine_seq *s0 = &q->seqs[0];
        int32_t n_e = n_prompt - q->plp_start;
        s0->plp = calloc((size_t)n_e, sizeof *s0->plp);
        if (!s0->plp) goto nomem;
        for (int32_t i = 0; i < n_e; i++) s0->plp[i].token = q->prompt[q->plp_start + i];
        if (q->plp_start == 0) s0->plp[0].logprob = NAN;
        s0->plp_next = TR_MAX(q->plp_start, 1) - 1;
    }
    engine_msg *m = calloc(1, sizeof *m);
    if (!m) goto nomem;
    q->id = atomic_fetch_add(&e->next_id, 1);
    q->t_submit = tr_now_ns();
    m->kind = MSG_SUBMIT;
    m->req = q;
    atomic_fetch_add(&e->n_submitted, 1);
    if (id_out) *id_out = q->id;
    tr_engine_send(e, m);
    return TR_OK;

nomem:
    rc = tr_errf(err, cap, TR_ERR_NOMEM, "out of memory");
fail:
    if (q) {
        /* the caller keeps its constraint state on failure */
        if (!owned_state) q->cstate0 = NULL;
        tr_engine_req_free(q);
    } else if (owned_state) {
        cops->free(cstate);
    }
    free(prompt);
    return rc;
}
