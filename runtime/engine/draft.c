/* draft.c — speculative decoding with a draft model
 * (trellis_engine_options.draft_model): a smaller model of the same
 * vocabulary proposes a sequence's next tokens greedily; the target
 * verifies them exactly as it verifies n-gram drafts (speculate.c), so the
 * output is the target's, token for token, at any temperature (sampled
 * drafts, below, keep its distribution instead).
 *
 * Layering: runtime/engine, engine thread only (the draft's forward
 * passes run on the compute thread, one job at a time like the target's).
 *
 * KV. The draft has a page pool of its own (as many positions as the
 * target's pool) and no prefix cache: each sequence that drafts holds a
 * private page table (dpages) and knows how many of its positions the
 * draft has computed for tokens that are final (d_kv). Positions past
 * d_kv may hold K/V of rejected drafts: they are never read (attention
 * reads only the positions before the one fed) and are overwritten when
 * the sequence gets there. A sequence that leaves the running set
 * (finish, preemption) gives its pages back and starts over if it
 * returns; the draft then catches up on its whole sequence in one
 * prefill-like pass, which for a draft several times smaller than the
 * target costs a fraction of the target's prefill.
 *
 * A step's drafting (tr_draft_propose_all, after sampling): every running
 * sequence that drafts, whose last token is sampled and not yet fed, and
 * for which the n-gram index proposed nothing, is fed the tokens the
 * draft has not seen (the catch-up, then one draft at a time); all such
 * sequences go into one ragged batch per pass, so k drafts for B
 * sequences cost k passes of the draft model (plus catch-up chunks when a
 * batch's token budget runs out). Each pass's rows are decided by argmax
 * (greedy drafting: a deterministic proposer, which is what keeps the
 * target's sampling exact); an end-of-generation draft ends that
 * sequence's proposal. A constrained request's drafts are cut at the
 * first token its grammar refuses.
 *
 * Sampled drafts (options.draft_sampling, for a request that samples
 * without the end-of-span rule and is past min_tokens): a row's draft is
 * drawn instead from q, the draft's distribution as the request's sampler
 * shapes it (tr_sampler_propose: its 256 likeliest tokens), and q is kept
 * (s->dq) for the target's accept/reject rule (speculate.c). A
 * constrained request's q is restricted to the tokens its grammar accepts
 * at that draft's position, and the draft cut where it is not one of
 * them: given that it was not cut, the draft was drawn from the
 * restricted q, which is the q the rule then uses; where it was cut, the
 * target samples its own distribution. Either way each position's token
 * follows the target's distribution.
 *
 * Cost control: a sequence asks for d_len drafts (1..draft_max: + 1 after
 * a proposal kept whole, accepted + 1 after a rejection) and drafts only
 * while its running acceptance beats what a draft row must earn in the
 * coming batch (tr_spec_worth), trying again every 16th step otherwise.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "runtime/engine/engine_internal.h"

typedef struct engine_draft {
    engine_compute c;          /* the draft model */
    gguf_file *file;           /* its file: closed after c */
    int32_t *free_ids;         /* stack of free pages of c's pool */
    int32_t n_free;
    int32_t max_batch, max_running;
    float *logits;             /* [max_running, n_vocab] */
    int32_t *tokens, *pos, *seq; /* [max_batch] a pass's batch */
    int32_t *rows, *npages;    /* [max_running] */
    const int32_t **tables;    /* [max_running] */
    const uint64_t **row_mask; /* [max_running], all NULL: every logit */
    engine_seq **cand;         /* [max_running] this step's sequences */
    int32_t *want, *made, *fed; /* [max_running] drafts asked, drafts made,
                                   positions fed */
    int32_t *slot;             /* [max_running] a cand's batch slot or -1 */
    uint64_t passes, fed_tokens, proposed;
    double seconds;
} engine_draft;

static void draft_destroy(engine_draft *d) {
    if (!d) return;
    if (d->c.ops && d->c.ops->destroy) d->c.ops->destroy(d->c.ctx);
    tr_gguf_close(d->file);
    free(d->free_ids);
    free(d->logits);
    free(d->tokens);
    free(d->pos);
    free(d->seq);
    free(d->rows);
    free(d->npages);
    free(d->tables);
    free(d->row_mask);
    free(d->cand);
    free(d->want);
    free(d->made);
    free(d->fed);
    free(d->slot);
    free(d);
}

void tr_draft_free(trellis_engine *e) {
    draft_destroy(e->draft);
    e->draft = NULL;
}

tr_status tr_draft_attach(trellis_engine *e, const engine_compute *c, gguf_file *f, char *err,
                          size_t cap) {
    engine_draft *d = calloc(1, sizeof *d);
    if (!d) {
        if (c->ops && c->ops->destroy) c->ops->destroy(c->ctx);
        tr_gguf_close(f);
        return tr_errf(err, cap, TR_ERR_NOMEM, "out of memory");
    }
    d->c = *c;
    d->file = f;
    if (c->n_vocab != e->n_vocab || c->page_size != e->page_size || c->n_pages <= 0) {
        tr_status s = tr_errf(err, cap, TR_ERR_INVALID_ARG,
                              "the draft model has %d tokens and pages of %d positions; "
                              "the target %d and %d",
                              c->n_vocab, c->page_size, e->n_vocab, e->page_size);
        draft_destroy(d);
        return s;
    }
    size_t nb = (size_t)TR_MIN(e->opt.max_batch_tokens, c->max_batch);
    size_t nr = (size_t)e->opt.max_running;
    d->max_batch = (int32_t)nb;
    d->max_running = (int32_t)nr;
    d->free_ids = malloc((size_t)c->n_pages * sizeof *d->free_ids);
    d->logits = malloc(nr * (size_t)c->n_vocab * sizeof *d->logits);
    d->tokens = malloc(nb * sizeof *d->tokens);
    d->pos = malloc(nb * sizeof *d->pos);
    d->seq = malloc(nb * sizeof *d->seq);
    d->rows = malloc(nr * sizeof *d->rows);
    d->npages = malloc(nr * sizeof *d->npages);
    d->tables = malloc(nr * sizeof *d->tables);
    d->row_mask = calloc(nr, sizeof *d->row_mask);
    d->cand = malloc(nr * sizeof *d->cand);
    d->want = malloc(nr * sizeof *d->want);
    d->made = malloc(nr * sizeof *d->made);
    d->fed = malloc(nr * sizeof *d->fed);
    d->slot = malloc(nr * sizeof *d->slot);
    if (!d->free_ids || !d->logits || !d->tokens || !d->pos || !d->seq || !d->rows ||
        !d->npages || !d->tables || !d->row_mask || !d->cand || !d->want || !d->made ||
        !d->fed || !d->slot) {
        draft_destroy(d);
        return tr_errf(err, cap, TR_ERR_NOMEM, "out of memory for the draft model's buffers");
    }
    for (int32_t i = 0; i < c->n_pages; i++) d->free_ids[i] = c->n_pages - 1 - i;
    d->n_free = c->n_pages;
    e->draft = d;
    return TR_OK;
}

void tr_draft_setup(trellis_engine *e, engine_seq *s) {
    const engine_req *r = s->req;
    /* a constraint must take drafts back (rollback) to check them */
    if (!e->draft || s->drafting || r->draft_max <= 0 || (r->cops && !r->cops->rollback))
        return;
    s->drafting = true;
    s->d_len = r->draft_max;
    s->d_rate = 1.0f;
    if (e->opt.draft_sampling && r->sp.temperature > 0.0f && !r->end_span && !s->dq)
        s->dq = malloc((size_t)r->draft_max * sizeof *s->dq); /* NULL: greedy drafts */
}

void tr_draft_release(trellis_engine *e, engine_seq *s) {
    engine_draft *d = e->draft;
    if (!d) return;
    for (int32_t i = 0; i < s->d_npages; i++) d->free_ids[d->n_free++] = s->dpages[i];
    s->d_npages = 0;
    s->d_kv = 0;
}

void tr_draft_forget_from(engine_seq *s, int32_t from) {
    if (s->d_kv > from) s->d_kv = from;
}

void tr_draft_feedback(engine_seq *s, int32_t proposed, int32_t accepted) {
    if (proposed <= 0) return;
    s->d_rate = 0.75f * s->d_rate + 0.25f * (float)accepted / (float)proposed;
    if (accepted == proposed) s->d_len = TR_MIN(s->d_len + 1, s->req->draft_max);
    else s->d_len = accepted + 1;
}

/* Pages for positions [0, upto) of s's draft K/V; false if the pool has
 * too few (s keeps what it had). */
static bool take_pages(engine_draft *d, engine_seq *s, int32_t upto) {
    int32_t need = (upto + d->c.page_size - 1) / d->c.page_size;
    if (need <= s->d_npages) return true;
    if (need - s->d_npages > d->n_free) return false;
    if (need > s->d_cap) {
        int32_t nc = TR_MAX(need, 2 * s->d_cap);
        int32_t *p = realloc(s->dpages, (size_t)nc * sizeof *p);
        if (!p) return false;
        s->dpages = p;
        s->d_cap = nc;
    }
    while (s->d_npages < need) s->dpages[s->d_npages++] = d->free_ids[--d->n_free];
    return true;
}

/* How many drafts s should ask for now (0: none this step). */
static int32_t drafts_wanted(const trellis_engine *e, engine_seq *s, float worth) {
    const engine_req *r = s->req;
    if (!s->drafting || s->spec_k || s->state != SEQ_RUNNING || s->len - s->n_kv != 1)
        return 0;
    /* every kept draft and the token after it are generated tokens at
     * positions below the context, as for n-gram drafts */
    int32_t room = TR_MIN(r->max_tokens - s->n_gen - 1, e->n_ctx - s->len - 1);
    room = TR_MIN(room, s->cap - s->len);
    room = TR_MIN(room, s->d_len);
    if (room <= 0) return 0;
    if (s->d_rate <= worth && ++s->d_skip % 16 != 0) return 0;
    return room;
}

/* One draft pass over the candidates still drafting: each gets the tokens
 * it has not been fed, up to the batch budget; a candidate fed up to its
 * last known token gets a row, and its argmax becomes its next draft. */
static tr_status draft_pass(trellis_engine *e, engine_draft *d, int32_t n_cand, bool *any) {
    int32_t nt = 0, nseq = 0, nrows = 0;
    *any = false;
    for (int32_t i = 0; i < n_cand; i++) {
        engine_seq *s = d->cand[i];
        d->slot[i] = -1;
        if (d->made[i] >= d->want[i]) continue;
        int32_t goal = s->len + d->made[i], c = TR_MIN(goal - d->fed[i], d->max_batch - nt);
        if (c <= 0) continue;
        for (int32_t k = 0; k < c; k++) {
            d->tokens[nt + k] = s->tokens[d->fed[i] + k];
            d->pos[nt + k] = d->fed[i] + k;
            d->seq[nt + k] = nseq;
        }
        d->tables[nseq] = s->dpages;
        d->npages[nseq] = s->d_npages;
        nt += c;
        if (d->fed[i] + c == goal) {
            d->rows[nrows] = nt - 1;
            d->slot[i] = nrows++;
        }
        d->fed[i] += c;
        nseq++;
    }
    if (nt == 0) return TR_OK;
    *any = true;
    tr_batch b = {.n_tokens = nt, .pos = d->pos, .seq = d->seq, .n_seqs = nseq,
                  .page_table = d->tables, .n_pages = d->npages};
    tr_logit_masks lm = {.row_mask = d->row_mask, .n_words = e->n_words};
    tr_status st = tr_worker_forward(e, &d->c, &b, d->tokens, d->rows, nrows, d->logits, &lm);
    d->passes++;
    d->fed_tokens += (uint64_t)nt;
    if (st != TR_OK) return st;
    for (int32_t i = 0; i < n_cand; i++) {
        if (d->slot[i] < 0) continue;
        engine_seq *s = d->cand[i];
        float *l = d->logits + (size_t)d->slot[i] * (size_t)e->n_vocab;
        int32_t best = 0;
        if (!s->d_sample) {
            for (int32_t t = 1; t < e->n_vocab; t++)
                if (l[t] > l[best]) best = t;
        } else if (tr_sampler_propose(s->smp, l, SAMPLER_PROPOSAL_MAX, &s->dq[d->made[i]],
                                      &best) != TR_OK) {
            d->want[i] = d->made[i]; /* no finite logit: no more drafts */
            continue;
        }
        s->tokens[s->len + d->made[i]++] = best;
        if (e->is_eog[best]) d->want[i] = d->made[i]; /* nothing follows it */
    }
    return TR_OK;
}

/* The drafts made for s become its unverified drafts (cut by its
 * constraint), as tr_spec_propose leaves n-gram ones. */
static void place_drafts(trellis_engine *e, engine_seq *s, int32_t made, int32_t fed) {
    s->d_kv = fed; /* the tokens fed: final ones, then drafts 1..made-1 */
    int32_t n = made;
    if (n > 0 && s->cstate)
        n = s->d_sample ? tr_spec_grammar_cut_sampled(s, n)
                        : tr_spec_grammar_cut(s, s->tokens + s->len, n);
    s->spec_k = n;
    s->len += n;
    s->spec_from_draft = n > 0;
    s->spec_sampled = n > 0 && s->d_sample;
    tr_draft_forget_from(s, s->len); /* drafts cut off */
    e->draft->proposed += (uint64_t)n;
}

void tr_draft_propose_all(trellis_engine *e) {
    engine_draft *d = e->draft;
    if (!d) return;
    uint64_t t0 = tr_now_ns();
    float worth = tr_spec_worth(e);
    int32_t n = 0;
    for (int32_t i = 0; i < e->n_running && n < d->max_running; i++) {
        engine_seq *s = e->running[i];
        int32_t want = drafts_wanted(e, s, worth);
        /* the draft K/V of every position fed: the catch-up and all but
         * the last draft */
        if (want <= 0 || !take_pages(d, s, s->len + want - 1)) continue;
        d->cand[n] = s;
        /* past min_tokens the target's mask bans no ender the draft's
         * q could hold */
        s->d_sample = s->dq && s->n_gen >= s->req->min_tokens;
        d->want[n] = want;
        d->made[n] = 0;
        d->fed[n] = s->d_kv;
        n++;
    }
    if (n == 0) return;
    bool any = true;
    tr_status st = TR_OK;
    while (any && st == TR_OK) st = draft_pass(e, d, n, &any);
    for (int32_t i = 0; i < n; i++) {
        engine_seq *s = d->cand[i];
        if (st != TR_OK) {
            /* a failed draft pass costs speed, never output: no drafts,
             * and the draft K/V is no longer trusted */
            s->drafting = false;
            tr_draft_release(e, s);
            continue;
        }
        place_drafts(e, s, d->made[i], d->fed[i]);
    }
    d->seconds += (double)(tr_now_ns() - t0) / 1e9;
}

void tr_draft_stats(const trellis_engine *e, trellis_stats *st) {
    const engine_draft *d = e->draft;
    if (!d) return;
    st->draft_passes = d->passes;
    st->draft_fed_tokens = d->fed_tokens;
    st->draft_proposed_tokens = d->proposed;
    st->draft_s = d->seconds;
}

void tr_draft_info(const trellis_engine *e, trellis_engine_info *o) {
    const engine_draft *d = e->draft;
    if (!d) return;
    o->draft_arch = d->c.arch ? d->c.arch : "custom";
    o->draft_n_layers = d->c.n_layers;
    o->draft_sampling = e->opt.draft_sampling;
}

tr_status tr_draft_check(trellis_engine *e) {
    const engine_draft *d = e->draft;
    if (!d) return TR_OK;
    int64_t held = 0;
    for (int32_t i = 0; i < e->n_running; i++) {
        const engine_seq *q = e->running[i];
        held += q->d_npages;
        if (q->d_kv > q->d_npages * d->c.page_size || q->d_kv > q->len) {
            fprintf(stderr, "engine_check: sequence %llu/%d: draft K/V %d of %d pages, len %d\n",
                    (unsigned long long)q->req->id, q->index, q->d_kv, q->d_npages, q->len);
            return TR_ERR_INTERNAL;
        }
    }
    for (const engine_seq *q = e->wait_head; q; q = q->next)
        if (q->d_npages != 0) {
            fprintf(stderr, "engine_check: a waiting sequence holds draft pages\n");
            return TR_ERR_INTERNAL;
        }
    if (held + d->n_free != d->c.n_pages) {
        fprintf(stderr, "engine_check: draft pages: %lld held + %d free of %d\n",
                (long long)held, d->n_free, d->c.n_pages);
        return TR_ERR_INTERNAL;
    }
    return TR_OK;
}
