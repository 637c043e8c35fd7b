/* speculate.c — speculative decoding in the engine: n-gram drafts
 * (runtime/spec) fed with the token before them and verified in the same
 * forward pass (trellis_engine_options.spec_ngram).
 *
 * Layering: runtime/engine, engine thread only.
 *
 * A sequence that speculates holds, after the token it sampled (t, not
 * yet fed), k drafts d1..dk at the end of its tokens (spec_k = k). The
 * next step feeds t d1..dk as one chunk, with a logits row at every
 * position (rows spec_row0 .. spec_row0 + k - 1 for t .. d(k-1), the
 * usual row for dk). Verification then does exactly what k + 1 decode
 * steps would have done, in order: sample row i with the sequence's
 * sampler (its penalty window and random stream as they would be then),
 * take the token (stops, output, length), and go on to row i + 1 only
 * when the token is d(i+1), whose K/V the pass computed for the same
 * prefix. The first token that differs from its draft is the step's last
 * (its K/V is computed next step); the K/V of the drafts after it are
 * left behind n_kv, never read, overwritten later. So the output is the
 * same token for token as without speculation, at any temperature and
 * seed (tests/unit/test_engine_spec.c), and a step emits 1 .. k + 1
 * tokens.
 *
 * Who speculates: requests without a constraint (masks would have to be
 * computed down the drafts), without log-probs, without min_tokens; the
 * drafts never pass max_tokens or the context. The scheduler feeds a
 * sequence's chunk whole or cuts its drafts (budget, pages, at most
 * TR_SPEC_ROWS_MAX draft rows a step); a preempted sequence drops them.
 */
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "runtime/engine/engine_internal.h"
#include "runtime/spec/spec.h"

void tr_spec_setup(trellis_engine *e, engine_seq *s) {
    const engine_req *r = s->req;
    if (e->opt.spec_ngram <= 0 || r->cops || r->logprobs || r->min_tokens > 0 || s->ngram)
        return;
    tr_ngram_options o;
    tr_ngram_options_default(&o);
    o.max_draft = e->opt.spec_ngram;
    if (o.start > o.max_draft) o.start = o.max_draft;
    tr_diag d;
    if (tr_ngram_new(&o, &s->ngram, &d) != TR_OK) {
        s->ngram = NULL; /* no speculation: nothing else changes */
        return;
    }
    if (tr_ngram_append(s->ngram, s->tokens, s->len) != TR_OK) {
        tr_ngram_free(s->ngram);
        s->ngram = NULL;
    }
}

void tr_spec_cut(engine_seq *s, int32_t keep) {
    if (keep >= s->spec_k) return;
    s->len -= s->spec_k - keep;
    s->spec_k = keep;
}

void tr_spec_accepted(engine_seq *s, int32_t tok) {
    if (s->ngram && tr_ngram_append(s->ngram, &tok, 1) != TR_OK) {
        tr_ngram_free(s->ngram); /* out of memory: stop speculating */
        s->ngram = NULL;
    }
}

void tr_spec_propose(trellis_engine *e, engine_seq *s) {
    if (!s->ngram || s->spec_k || s->state != SEQ_RUNNING) return;
    const engine_req *r = s->req;
    /* every accepted draft and the token after them are generated tokens,
     * at positions below the context */
    int32_t room = TR_MIN(r->max_tokens - s->n_gen - 1, e->n_ctx - s->len - 1);
    room = TR_MIN(room, s->cap - s->len);
    room = TR_MIN(room, e->opt.spec_ngram);
    if (room <= 0) return;
    int32_t n = tr_ngram_propose(s->ngram, s->tokens + s->len, room);
    s->spec_k = n;
    s->len += n;
    e->st.spec_drafted_tokens += (uint64_t)n;
}

tr_status tr_engine_reserve_logits(trellis_engine *e, int32_t rows) {
    if (e->logits_rows >= rows) return TR_OK;
    int32_t want = e->opt.max_running + TR_PLP_ROWS_MAX + TR_SPEC_ROWS_MAX;
    if (want < rows) want = rows;
    float *l = realloc(e->logits, (size_t)want * (size_t)e->n_vocab * sizeof *l);
    if (!l) return TR_ERR_NOMEM;
    e->logits = l;
    e->logits_rows = want;
    return TR_OK;
}

void tr_spec_verify(trellis_engine *e, engine_seq *s, int32_t row) {
    int32_t k = s->spec_k, base = s->len - 1 - k; /* position of t */
    int32_t drafts[TR_NGRAM_MAX_DRAFT];
    memcpy(drafts, s->tokens + base + 1, (size_t)k * sizeof *drafts);
    /* t is in the K/V now; the drafts count only as they are taken */
    s->len = base + 1;
    s->n_kv = base + 1;
    s->spec_k = 0;
    int32_t accepted = 0;
    bool going = true;
    for (int32_t i = 0; i <= k && going; i++) {
        int32_t rr = i < k ? s->spec_row0 + i : row;
        float *l = e->logits + (size_t)rr * (size_t)e->n_vocab;
        int32_t tok;
        tr_status st = tr_sampler_sample(s->smp, l, NULL, &tok, NULL);
        if (st != TR_OK) {
            tr_engine_end_seq(e, s, TRELLIS_FINISH_ERROR, st, tr_sampler_last_error(s->smp));
            return;
        }
        going = tr_engine_take_token(e, s, tok, NULL); /* false: s may be freed */
        if (!going || i == k || tok != drafts[i]) break;
        s->n_kv++; /* d(i+1)'s K/V, computed after the same prefix */
        s->n_spec_accepted++;
        accepted++;
    }
    e->st.spec_accepted_tokens += (uint64_t)accepted;
    e->st.forward_passes_saved += (uint64_t)accepted;
    if (!going) return;
    if (s->ngram) tr_ngram_feedback(s->ngram, k, accepted);
    tr_spec_propose(e, s);
    tr_out_emit_delta(e, s);
}
