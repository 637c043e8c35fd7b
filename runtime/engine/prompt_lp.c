/* prompt_lp.c — prompt log-probs (trellis_request.prompt_logprobs): which
 * prompt positions need a logits row, how many fit a step, and the
 * entries computed from those rows.
 *
 * Layering: runtime/engine, engine thread only.
 *
 * The entry of prompt position p (p >= 1) is the log-prob of token p given
 * tokens [0, p): it comes from the logits row of position p - 1. A request
 * asking from position `start` needs the rows of positions
 * [max(start, 1) - 1, n_prompt - 1); the row of n_prompt - 1 is the one
 * every generating sequence samples its first token from. Only sample 0
 * computes them (seq->plp); its plp_next is the next position whose row is
 * still needed, so that a preempted sequence resumes where it was.
 *
 * What keeps it true:
 *   - n_kv <= plp_next while rows are pending: admission matches the
 *     prefix cache only up to plp_next (tr_plp_match_limit; a cached
 *     position is never recomputed, so its row could not be had), hence a
 *     step's rows of s are the positions plp_next, plp_next + 1, ...;
 *   - at most TR_PLP_ROWS_MAX rows per step over all sequences (the
 *     scheduler shortens chunks, tr_plp_fit_chunk), so the logits buffer
 *     grows once, by that many rows, and only for an engine that has seen
 *     such a request.
 * The rows' log-probs use a plain sampler of the request (default
 * parameters): the same arithmetic as a generated token's log-probs.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "runtime/engine/engine_internal.h"

bool tr_plp_pending(const engine_seq *s) {
    return s->plp && s->plp_next < s->req->n_prompt - 1;
}

int32_t tr_plp_match_limit(const engine_seq *s) {
    int32_t lim = s->len - 1;
    return tr_plp_pending(s) ? TR_MIN(lim, s->plp_next) : lim;
}

int32_t tr_plp_rows_for(const engine_seq *s, int32_t c) {
    if (!tr_plp_pending(s)) return 0;
    int32_t lo = TR_MAX(s->n_kv, s->plp_next);
    int32_t hi = TR_MIN(s->n_kv + c, s->req->n_prompt - 1);
    return hi > lo ? hi - lo : 0;
}

int32_t tr_plp_fit_chunk(trellis_engine *e, const engine_seq *s, int32_t c) {
    int32_t rows = tr_plp_rows_for(s, c);
    if (rows > e->plp_rows_left) {
        /* rows begin at plp_next (>= n_kv): feed up to the last row that
         * fits, and the positions before plp_next */
        c = s->plp_next - s->n_kv + e->plp_rows_left;
        rows = e->plp_rows_left;
    }
    e->plp_rows_left -= rows;
    return c;
}

tr_status tr_plp_reserve_logits(trellis_engine *e) {
    return tr_engine_reserve_logits(e, e->opt.max_running + TR_PLP_ROWS_MAX);
}

tr_status tr_plp_store(trellis_engine *e, engine_seq *s, int32_t r0, int32_t n) {
    engine_req *r = s->req;
    for (int32_t j = 0; j < n; j++) {
        int32_t pos = s->plp_next; /* the row's position */
        int32_t tok = s->tokens[pos + 1];
        sampler_logprobs lp;
        float *row = e->logits + (size_t)(r0 + j) * (size_t)e->n_vocab;
        tr_status st = tr_sampler_logprobs(r->plp_smp, row, NULL, tok, &lp);
        if (st != TR_OK) return st;
        trellis_logprob *out = &s->plp[pos + 1 - r->plp_start];
        memset(out, 0, sizeof *out);
        out->token = tok;
        out->logprob = lp.logprob;
        out->n_top = lp.n_top;
        for (int32_t i = 0; i < lp.n_top; i++) {
            out->top[i].token = lp.top[i].token;
            out->top[i].logprob = lp.top[i].logprob;
        }
        s->plp_next++;
    }
    return TR_OK;
}
