/* output.c — what a sample emits: incremental detokenization, stop
 * strings, and the events that carry text and tokens to the embedder.
 *
 * Layering: runtime/engine, engine thread only (events cross to the
 * embedder's threads through the output queue, engine.c).
 *
 * Stop strings across token boundaries. Text comes out of the tokenizer
 * stream in complete UTF-8 characters and is appended to `held`. If a stop
 * string occurs in held, the text before its first occurrence is emitted
 * and the sample ends; otherwise the longest suffix of held that is a
 * proper prefix of some stop string stays held and the rest is emitted.
 * Any occurrence of a stop string starts inside held (a suffix of emitted
 * text that began one would have been held back), so a stop string is
 * never emitted, not even partly, and text is delayed by at most
 * max(stop length) - 1 bytes. The cut points are character boundaries
 * because the stop strings are valid UTF-8 (checked by trellis_submit).
 * Stop patterns (stop_regex_internal.h) hold text the same way: from the
 * earliest position where a match may still begin, at most
 * TR_STOP_REGEX_HOLD bytes back.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "runtime/engine/engine_internal.h"
#include "runtime/spec/spec.h"

static bool grow(char **buf, size_t *cap, size_t need) {
    if (need <= *cap) return true;
    size_t c = *cap ? *cap : 64;
    while (c < need) c *= 2;
    char *p = realloc(*buf, c);
    if (!p) return false;
    *buf = p;
    *cap = c;
    return true;
}

static bool append(char **buf, size_t *len, size_t *cap, const char *s,
                   size_t n) {
    if (n == 0) return true;
    if (!grow(buf, cap, *len + n + 1)) return false;
    memcpy(*buf + *len, s, n);
    *len += n;
    (*buf)[*len] = 0;
    return true;
}

static bool push_out_token(engine_seq *s, int32_t tok,
                           const sampler_logprobs *lp) {
    if (s->out_n == s->out_tcap) {
        int32_t cap = s->out_tcap ? s->out_tcap * 2 : 16;
        int32_t *t = realloc(s->out_tokens, (size_t)cap * sizeof *t);
        if (!t) return false;
        s->out_tokens = t;
        if (s->req->logprobs) {
            trellis_logprob *l = realloc(s->out_lp, (size_t)cap * sizeof *l);
            if (!l) return false;
            s->out_lp = l;
        }
        s->out_tcap = cap;
    }
    s->out_tokens[s->out_n] = tok;
    if (s->req->logprobs) {
        trellis_logprob *l = &s->out_lp[s->out_n];
        memset(l, 0, sizeof *l);
        l->token = tok;
        if (lp) {
            l->logprob = lp->logprob;
            l->n_top = TR_MIN(lp->n_top, s->req->top_logprobs);
            for (int32_t i = 0; i < l->n_top; i++) {
                l->top[i].token = lp->top[i].token;
                l->top[i].logprob = lp->top[i].logprob;
            }
        }
    }
    s->out_n++;
    return true;
}

/* Emits what of `held` cannot start a stop string or a stop pattern's
 * match; true if one ended the sample. `fresh`: bytes just appended to
 * held (the stop patterns have seen the rest). The first stop to END in
 * the text wins (ties: the one starting first; a stop string before a
 * pattern). Before the sample has min_tokens tokens a stop does not end
 * it: each stop-string occurrence, earliest first, is emitted as text
 * (trellis.h). */
static bool scan_stops(engine_seq *s, size_t fresh) {
    const engine_req *r = s->req;
    bool may_stop = s->n_gen >= r->min_tokens;
    size_t hold_rx = s->held_len;
    tr_stop_hit hit = {0};
    bool rx = s->stop_scan && tr_stop_scan_feed(s->stop_scan, s->held, s->held_len,
                                                fresh, may_stop, &hit, &hold_rx);
    for (;;) {
        /* earliest occurrence of any stop string (ties: the earlier one) */
        size_t best = SIZE_MAX;
        int32_t which = -1;
        for (int32_t k = 0; k < r->n_stop; k++) {
            const char *p = memmem(s->held, s->held_len, r->stop[k], r->stop_len[k]);
            if (p && (size_t)(p - s->held) < best) {
                best = (size_t)(p - s->held);
                which = k;
            }
        }
        size_t str_end = which >= 0 ? best + r->stop_len[which] : SIZE_MAX;
        if (rx && (hit.end < str_end || (hit.end == str_end && hit.start < best))) {
            append(&s->out_text, &s->out_len, &s->out_cap, s->held, hit.start);
            s->held_len = 0;
            s->stop_index = r->n_stop + hit.pattern;
            return true;
        }
        if (which < 0) break;
        if (may_stop) {
            append(&s->out_text, &s->out_len, &s->out_cap, s->held, best);
            s->held_len = 0;
            s->stop_index = which;
            return true;
        }
        size_t through = str_end;
        append(&s->out_text, &s->out_len, &s->out_cap, s->held, through);
        memmove(s->held, s->held + through, s->held_len - through);
        s->held_len -= through;
        hold_rx = hold_rx > through ? hold_rx - through : 0;
    }
    size_t keep = s->held_len - hold_rx;
    for (int32_t k = 0; k < r->n_stop; k++) {
        size_t lmax = TR_MIN(s->held_len, r->stop_len[k] - 1);
        for (size_t l = lmax; l > keep; l--) {
            if (memcmp(s->held + s->held_len - l, r->stop[k], l) == 0) {
                keep = l;
                break;
            }
        }
    }
    size_t emit = s->held_len - keep;
    append(&s->out_text, &s->out_len, &s->out_cap, s->held, emit);
    memmove(s->held, s->held + emit, keep);
    s->held_len = keep;
    return false;
}

static bool has_stops(const engine_seq *s) {
    return s->req->n_stop > 0 || s->stop_scan != NULL;
}

bool tr_out_push_token(trellis_engine *e, engine_seq *s, int32_t tok,
                    const sampler_logprobs *lp, bool emit_text) {
    char *piece = e->piece;
    size_t n = 0;
    if (emit_text &&
        tr_tokenizer_stream_push(&s->ts, e->tok, tok, piece, e->max_piece, &n) !=
            TR_OK)
        n = 0; /* cannot happen: max_piece is the documented bound */
    if (!push_out_token(s, tok, lp)) return false;
    if (n == 0) return false;
    if (!has_stops(s)) {
        append(&s->out_text, &s->out_len, &s->out_cap, piece, n);
        return false;
    }
    if (!append(&s->held, &s->held_len, &s->held_cap, piece, n)) return false;
    return scan_stops(s, n);
}

void tr_out_flush(trellis_engine *e, engine_seq *s) {
    (void)e;
    char tail[16];
    size_t n = tr_tokenizer_stream_flush(&s->ts, tail, sizeof tail);
    append(&s->held, &s->held_len, &s->held_cap, tail, n);
    if (has_stops(s) && scan_stops(s, n)) return;
    append(&s->out_text, &s->out_len, &s->out_cap, s->held, s->held_len);
    s->held_len = 0;
}

/* Allocates an event with s's pending text and tokens (moved out of s)
 * and a copy of err (NULL: ""). */
static engine_event_box *make_event(engine_seq *s, trellis_event_kind kind,
                                    const char *err) {
    size_t err_len = err ? strlen(err) : 0;
    size_t text = s->out_len + 1;
    size_t toks = (size_t)s->out_n * sizeof(int32_t);
    size_t lps = s->out_lp && s->req->logprobs
                     ? (size_t)s->out_n * sizeof(trellis_logprob)
                     : 0;
    /* prompt log-probs: once, in the first event after they are done */
    bool plp = s->plp && !s->plp_sent && !tr_plp_pending(s);
    int32_t n_plp = plp ? s->req->n_prompt - s->req->plp_start : 0;
    size_t off_text = sizeof(engine_event_box);
    size_t off_lp = (off_text + text + 15) & ~(size_t)15;
    size_t off_plp = off_lp + lps;
    size_t off_tok = off_plp + (size_t)n_plp * sizeof(trellis_logprob);
    size_t off_err = off_tok + toks;
    engine_event_box *b = malloc(off_err + err_len + 1);
    if (!b) return NULL;
    memset(b, 0, sizeof *b);
    char *base = (char *)b;
    trellis_event *ev = &b->ev;
    ev->kind = kind;
    ev->request_id = s->req->id;
    ev->index = s->index;
    ev->user = s->req->user;
    char *t = base + off_text;
    if (s->out_len) memcpy(t, s->out_text, s->out_len);
    t[s->out_len] = 0;
    ev->text = t;
    ev->text_len = s->out_len;
    ev->n_tokens = s->out_n;
    ev->tokens = (const int32_t *)(base + off_tok);
    if (toks) memcpy(base + off_tok, s->out_tokens, toks);
    if (lps) {
        memcpy(base + off_lp, s->out_lp, lps);
        ev->logprobs = (const trellis_logprob *)(base + off_lp);
    }
    if (plp) {
        memcpy(base + off_plp, s->plp, (size_t)n_plp * sizeof(trellis_logprob));
        ev->prompt_logprobs = (const trellis_logprob *)(base + off_plp);
        ev->n_prompt_logprobs = n_plp;
        ev->prompt_logprobs_start = s->req->plp_start;
        s->plp_sent = true;
    }
    ev->stop_index = -1;
    ev->stop_token = -1;
    char *er = base + off_err;
    if (err_len) memcpy(er, err, err_len);
    er[err_len] = 0;
    ev->error = er;
    s->out_len = 0;
    s->out_n = 0;
    return b;
}

static void queue_event(trellis_engine *e, engine_event_box *b) {
    b->next = NULL;
    if (e->ev_tail) e->ev_tail->next = b;
    else e->ev_head = b;
    e->ev_tail = b;
    e->ev_n++;
}

void tr_out_emit_delta(trellis_engine *e, engine_seq *s) {
    if (!s->req->stream || (s->out_len == 0 && s->out_n == 0)) return;
    engine_event_box *b = make_event(s, TRELLIS_EVENT_DELTA, NULL);
    if (b) queue_event(e, b); /* out of memory: the text goes in DONE */
}

static double ms_between(uint64_t a, uint64_t b) {
    return a && b >= a ? (double)(b - a) / 1e6 : 0.0;
}

void tr_out_finish(trellis_engine *e, engine_seq *s, trellis_finish f,
                int status, const char *error) {
    engine_req *r = s->req;
    uint64_t now = tr_now_ns();
    if (f == TRELLIS_FINISH_ERROR)
        snprintf(s->error, sizeof s->error, "%s",
                 error && error[0] ? error : tr_status_message(status));
    engine_event_box *b = make_event(
        s, TRELLIS_EVENT_DONE, f == TRELLIS_FINISH_ERROR ? s->error : NULL);
    if (!b) {
        /* out of memory: the DONE event still comes, from the spare box
         * allocated at submit, without its last text */
        b = s->spare;
        s->spare = NULL;
        memset(b, 0, sizeof *b);
        b->ev.kind = TRELLIS_EVENT_DONE;
        b->ev.request_id = r->id;
        b->ev.index = s->index;
        b->ev.user = r->user;
        b->ev.text = b->ev.error = "";
        b->ev.tokens = NULL;
        if (f != TRELLIS_FINISH_CANCELLED) {
            f = TRELLIS_FINISH_ERROR;
            status = TR_ERR_NOMEM;
        }
    }
    s->state = SEQ_DONE;
    s->finish = f;
    r->n_done++;
    bool last = r->n_done == r->n;
    {
        trellis_event *ev = &b->ev;
        ev->finish = f;
        ev->status = status;
        ev->stop_index = s->stop_index;
        ev->stop_token = s->stop_token;
        ev->request_done = last;
        trellis_metrics *m = &ev->metrics;
        m->queue_ms = ms_between(r->t_submit, s->t_first_sched ? s->t_first_sched : now);
        m->ttft_ms = ms_between(r->t_submit, s->t_first_token);
        m->tpot_ms = s->n_gen > 1 ? ms_between(s->t_first_token, s->t_last_token) /
                                        (double)(s->n_gen - 1)
                                  : 0.0;
        m->e2e_ms = ms_between(r->t_submit, now);
        m->prompt_tokens = r->n_prompt;
        m->cached_tokens = s->cached_tokens;
        m->completion_tokens = s->n_gen;
        m->forced_tokens = s->n_forced;
        m->spec_accepted_tokens = s->n_spec_accepted;
        m->preemptions = s->preemptions;
        queue_event(e, b);
    }
    /* per-sample state */
    free(s->spare);
    s->spare = NULL;
    tr_sampler_free(s->smp);
    s->smp = NULL;
    if (s->cstate && r->cops) r->cops->free(s->cstate);
    s->cstate = NULL;
    free(s->held);
    free(s->out_text);
    free(s->out_tokens);
    free(s->out_lp);
    free(s->plp);
    s->plp = NULL;
    tr_ngram_free(s->ngram);
    s->ngram = NULL;
    free(s->dpages); /* its pages went back at release */
    s->dpages = NULL;
    free(s->dq);
    s->dq = NULL;
    s->d_cap = 0;
    s->held = s->out_text = NULL;
    s->out_tokens = NULL;
    s->out_lp = NULL;
    free(s->tokens);
    free(s->pages);
    s->tokens = NULL;
    s->pages = NULL;
    if (f == TRELLIS_FINISH_CANCELLED) e->st.requests_cancelled += last;
    if (last) {
        e->st.requests_finished++;
        tr_engine_hash_remove(e, r);
        tr_engine_req_free(r);
    }
}

void tr_out_publish(trellis_engine *e) {
    if (!e->ev_head) return;
    pthread_mutex_lock(&e->out_mu);
    if (e->out_tail) e->out_tail->next = e->ev_head;
    else e->out_head = e->ev_head;
    e->out_tail = e->ev_tail;
    pthread_cond_broadcast(&e->out_cond);
    pthread_mutex_unlock(&e->out_mu);
    e->ev_head = e->ev_tail = NULL;
    e->ev_n = 0;
    if (e->opt.wake) e->opt.wake(e->opt.wake_user);
}
