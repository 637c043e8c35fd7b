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
 * Constraints: drafts are cut at the first token the constraint refuses
 * (accepted one by one, then rolled back), and verification computes each
 * position's mask after the tokens before it, as a step would (min_tokens
 * and the end-of-span rule included); jump-forward works as without
 * speculation (its chunk is fed before drafts start again). A request that
 * turns jump-forward off (no_jump_forward: the model's own tokenization
 * of forced text) gets the forced bytes as drafts where the n-gram index
 * has nothing: verified, not trusted, in as few passes as jump-forward
 * would take. Log-probs come from each position's own row. Requests whose constraint cannot roll back do not speculate.
 *
 * Sampled drafts (draft.c, options.draft_sampling) are verified instead
 * by the speculative sampling rule (tr_sampler_sample_spec): row i keeps
 * d(i+1) with probability min(1, p/q) against the q it was drawn from,
 * else its token is drawn from max(0, p - q); the last row samples as
 * usual. Each token then follows the target's distribution (not its
 * exact draws), with the same masks, penalties and log-probs.
 * The drafts never pass max_tokens or the context. Drafts of the draft
 * model (draft.c) are verified the same way; which proposer made them
 * decides only whose length adapts.
 *
 * Batches: a draft row costs what a prefill token costs, a kept draft
 * saves its sequence a step; with B decode rows a step costs about
 * TR_SPEC_FIXED_ROWS + B rows, so drafts go in only for sequences whose
 * running acceptance beats B / (TR_SPEC_FIXED_ROWS + B) (1/6 alone, 0.86
 * at 32 streams). The scheduler feeds a
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
    /* a constraint must take drafts back (rollback) to check them */
    (void)e;
    if (r->spec_max <= 0 || (r->cops && !r->cops->rollback) || s->ngram) return;
    tr_ngram_options o;
    tr_ngram_options_default(&o);
    o.max_draft = r->spec_max;
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
    if (keep == 0) s->spec_from_draft = s->spec_sampled = false;
    tr_draft_forget_from(s, s->len); /* the draft model saw the cut ones */
}

float tr_spec_worth(const trellis_engine *e) {
    int32_t b = 0; /* decode rows this step, drafts aside */
    for (int32_t i = 0; i < e->n_running; i++) {
        const engine_seq *s = e->running[i];
        if (s->len - s->n_kv == 1 + s->spec_k) b++;
    }
    return (float)b / (float)(TR_SPEC_FIXED_ROWS + b);
}

bool tr_spec_pays(const engine_seq *s, float worth) {
    /* the draft model's drafts were judged when made (draft.c): their
     * cost is spent by now */
    if (s->spec_from_draft) return true;
    return s->ngram && tr_ngram_acceptance(s->ngram) > worth;
}

void tr_spec_accepted(engine_seq *s, int32_t tok) {
    if (s->ngram && tr_ngram_append(s->ngram, &tok, 1) != TR_OK) {
        tr_ngram_free(s->ngram); /* out of memory: stop speculating */
        s->ngram = NULL;
    }
}

/* Takes back the ok drafts a cut accepted; false (and no more
 * speculation for s) if the constraint cannot. */
static bool cut_rollback(engine_seq *s, int32_t ok) {
    if (ok > 0 && s->req->cops->rollback(s->cstate, ok) != 0) {
        tr_ngram_free(s->ngram);
        s->ngram = NULL;
        s->drafting = false;
        return false;
    }
    return true;
}

int32_t tr_spec_grammar_cut(engine_seq *s, const int32_t *d, int32_t n) {
    const trellis_constraint_ops *c = s->req->cops;
    int32_t ok = 0;
    while (ok < n && c->accept(s->cstate, d[ok]) == 0) {
        ok++;
        if (c->is_done && c->is_done(s->cstate)) break;
    }
    return cut_rollback(s, ok) ? ok : 0;
}

typedef struct accept_probe {
    const trellis_constraint_ops *c;
    void *cstate;
    bool broken; /* a probe could not be taken back */
} accept_probe;

/* Whether the constraint accepts id next (probed, then taken back). */
static bool probe_accepts(void *ctx, int32_t id) {
    accept_probe *a = ctx;
    if (a->broken || a->c->accept(a->cstate, id) != 0) return false;
    if (a->c->rollback(a->cstate, 1) != 0) a->broken = true;
    return !a->broken;
}

int32_t tr_spec_grammar_cut_sampled(engine_seq *s, int32_t n) {
    const trellis_constraint_ops *c = s->req->cops;
    const int32_t *d = s->tokens + s->len;
    accept_probe a = {c, s->cstate, false};
    int32_t ok = 0;
    while (ok < n) {
        sampler_proposal *q = &s->dq[ok];
        tr_sampler_proposal_restrict(q, probe_accepts, &a);
        bool in = false;
        for (int32_t j = 0; j < q->n; j++) in |= q->id[j] == d[ok];
        if (a.broken || !in || c->accept(s->cstate, d[ok]) != 0) break;
        ok++;
        if (c->is_done && c->is_done(s->cstate)) break;
    }
    bool back = cut_rollback(s, ok);
    if (a.broken) { /* a probe's state is not known to be undone: no more drafts */
        tr_ngram_free(s->ngram);
        s->ngram = NULL;
        s->drafting = false;
    }
    return back && !a.broken ? ok : 0;
}


/* Drafts from the bytes the constraint forces next (what jump-forward
 * would place unverified), tokenized on their own; the model's own
 * tokenization wins where it differs. */
static int32_t forced_drafts(trellis_engine *e, engine_seq *s, int32_t *out, int32_t cap) {
    const trellis_constraint_ops *c = s->req->cops;
    uint8_t buf[CONSTRAINT_JF_MAX_BYTES];
    size_t fl = 0;
    if (!c->forced_bytes || c->forced_bytes(s->cstate, buf, sizeof buf, &fl) != 0 || fl == 0)
        return 0;
    int32_t *ids = NULL;
    size_t n = 0;
    if (tr_tokenizer_encode(e->tok, (const char *)buf, fl, false, &ids, &n) != TR_OK) n = 0;
    int32_t m = (int32_t)TR_MIN(n, (size_t)cap);
    if (m > 0) memcpy(out, ids, (size_t)m * sizeof *out);
    free(ids);
    return m > 0 ? tr_spec_grammar_cut(s, out, m) : 0;
}

void tr_spec_propose(trellis_engine *e, engine_seq *s) {
    /* not after a jump-forward: its forced tokens go in first */
    if (!s->ngram || s->spec_k || s->state != SEQ_RUNNING || s->len - s->n_kv != 1) return;
    const engine_req *r = s->req;
    /* every accepted draft and the token after them are generated tokens,
     * at positions below the context */
    int32_t room = TR_MIN(r->max_tokens - s->n_gen - 1, e->n_ctx - s->len - 1);
    room = TR_MIN(room, s->cap - s->len);
    if (room <= 0) return;
    int32_t n = tr_ngram_propose(s->ngram, s->tokens + s->len, TR_MIN(room, r->spec_max));
    if (n > 0 && s->cstate) n = tr_spec_grammar_cut(s, s->tokens + s->len, n);
    /* forced bytes, where jump-forward is off: as many tokens as it would
     * place at once (they cost the rows its chunk would) */
    if (n == 0 && s->cstate && s->ngram && !r->jump_forward)
        n = forced_drafts(e, s, s->tokens + s->len, TR_MIN(room, TR_SPEC_DRAFT_MAX));
    s->spec_k = n;
    s->len += n;
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
    int32_t drafts[TR_SPEC_DRAFT_MAX];
    memcpy(drafts, s->tokens + base + 1, (size_t)k * sizeof *drafts);
    /* t is in the K/V now; the drafts count only as they are taken */
    s->len = base + 1;
    s->n_kv = base + 1;
    s->spec_k = 0;
    bool sampled = s->spec_sampled; /* the drafts were drawn from s->dq */
    s->spec_sampled = false;
    /* each position's mask after the tokens before it: the regular row's
     * mask slot is free (fill_masks skipped s) */
    uint64_t *m = e->masks + (size_t)s->logit_row * e->n_words;
    bool want_lp = s->req->logprobs;
    int32_t accepted = 0;
    bool going = true;
    for (int32_t i = 0; i <= k && going; i++) {
        int32_t rr = i < k ? s->spec_row0 + i : row;
        float *l = e->logits + (size_t)rr * (size_t)e->n_vocab;
        s->status = 0;
        tr_engine_seq_mask(e, s, m);
        int32_t tok = -1;
        sampler_logprobs lp;
        tr_status st = TR_OK; /* s->status: ended by tr_engine_end_row */
        if (!s->status && i < k && sampled && !s->span_rule)
            st = tr_sampler_sample_spec(s->smp, l, s->mask, &s->dq[i], drafts[i], &tok,
                                        want_lp ? &lp : NULL);
        else if (!s->status)
            st = (tr_status)tr_engine_seq_sample(s, l, &tok, want_lp ? &lp : NULL);
        if (tr_engine_end_row(e, s, st)) {
            going = false;
            break;
        }
        int32_t len0 = s->len;
        going = tr_engine_take_token(e, s, tok, want_lp ? &lp : NULL); /* false: s may be freed */
        if (!going || i == k || tok != drafts[i]) break;
        if (s->len != len0 + 1) break; /* a jump-forward placed other tokens */
        s->n_kv++; /* d(i+1)'s K/V, computed after the same prefix */
        s->n_spec_accepted++;
        accepted++;
    }
    e->st.spec_drafted_tokens += (uint64_t)k; /* verified: fed to the model */
    e->st.spec_accepted_tokens += (uint64_t)accepted;
    e->st.forward_passes_saved += (uint64_t)accepted;
    if (!going) return;
    /* the draft model's K/V holds only what stays: t and the kept drafts */
    tr_draft_forget_from(s, base + accepted + 1);
    if (s->spec_from_draft) tr_draft_feedback(s, k, accepted);
    else if (s->ngram) tr_ngram_feedback(s->ngram, k, accepted);
    s->spec_from_draft = false;
    tr_spec_propose(e, s);
    tr_out_emit_delta(e, s);
}
