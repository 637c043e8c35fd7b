/* step.c — one engine step: plan (sched.c), build the ragged batch, run
 * ONE forward pass for every row, sample, apply stops, queue events.
 *
 * Layering: runtime/engine, engine thread only.
 *
 * Overlap. Unless options.no_overlap, the forward pass runs on the compute
 * thread (compute.c) while the engine thread
 *   - computes the grammar masks of this step's sampled rows (the
 *     constraint hooks' fill_mask; they depend only on tokens already
 *     accepted),
 *   - takes newly submitted requests off the input queue into the waiting
 *     list (cancellations and control messages wait for the step's end:
 *     they may free memory the forward pass is reading),
 *   - admits waiting sequences for the next step (tr_sched_admit_ahead: the
 *     queue's longest-prefix order, radix matches, first-chunk pages),
 * then waits for the forward pass. On the CPU backend the compute thread
 * is worker 0 of the backend's pool, so the engine thread's overlapped
 * work competes with the pool for cores; it is small (a mask is a walk of
 * the vocabulary trie, cached per automaton state) and is reported as
 * stats.overlap_s. What does not overlap with the forward pass: sampling
 * (it needs the logits; with 8 rows or more the compute thread samples
 * half of them meanwhile, each row having its own sampler) and the rest of
 * the next step's plan: which running sequences feed which tokens needs
 * this step's sampled tokens, finishes and jump-forwards.
 *
 * The end-of-span rule (trellis.h, trellis_request.end_span): rows whose
 * mask allows an end-of-generation token and whose request has the rule
 * are sampled without the mask (fill_masks decides, sample_span_rule
 * draws); a forbidden draw ends the sample in finish_row before the
 * constraint sees it, an allowed one goes on as if sampled with the mask.
 *
 * Jump-forward (finish_row): when a constraint forces the bytes after the
 * sampled token, the sampled token and those bytes are re-encoded and
 * appended as several tokens at once; the next step feeds them as one
 * chunk. stats.forward_passes_saved counts, per sequence, the passes such
 * chunks saved.
 *
 * Time accounting (trellis_stats): step_s = the whole step; forward_s =
 * from posting the batch to having its logits (overlapped work happens
 * inside it and is also counted in overlap_s); sample_s = sampling,
 * constraint accept, detokenization, stops; schedule_s = the rest
 * (planning, batch building, radix bookkeeping, events).
 * Stats are published at the end of each step, before its events.
 */
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/util.h"
#include "runtime/engine/engine_internal.h"

void tr_engine_end_seq(trellis_engine *e, engine_seq *s, trellis_finish f,
                    int status, const char *error) {
    if (s->state == SEQ_DONE) return;
    tr_disk_release(e, s->req);
    bool cache = !e->opt.no_radix;
    if (s->state == SEQ_RUNNING || s->state == SEQ_WAITING)
        tr_sched_release(e, s, cache);
    tr_out_finish(e, s, f, status, error);
}

static bool is_stop_token(const engine_req *r, int32_t tok) {
    for (int32_t i = 0; i < r->n_stop_tokens; i++)
        if (r->stop_tokens[i] == tok) return true;
    return false;
}

/* The end-of-span rule (trellis.h, trellis_request.end_span) for row r:
 * one draw from the unmasked distribution decides. A forbidden token
 * ends the span (s->span_end; finish_row ends the sample); an allowed one
 * is taken, with the log-probs of the masked distribution. */
static int sample_span_rule(engine_seq *s, float *l, int32_t *tok, sampler_logprobs *lp) {
    tr_status st = tr_sampler_sample(s->smp, l, NULL, tok, NULL);
    if (st != TR_OK) return st;
    if (!(s->mask[(uint32_t)*tok >> 6] >> (*tok & 63) & 1)) {
        s->span_end = true;
        return TR_OK;
    }
    return lp ? tr_sampler_logprobs(s->smp, l, s->mask, *tok, lp) : TR_OK;
}

int tr_engine_seq_sample(engine_seq *s, float *l, int32_t *tok, sampler_logprobs *lp) {
    if (s->span_rule) return sample_span_rule(s, l, tok, lp);
    return tr_sampler_sample(s->smp, l, s->mask, tok, lp);
}

void tr_engine_sample_rows(trellis_engine *e, int32_t r0, int32_t r1) {
    for (int32_t r = r0; r < r1; r++) {
        engine_seq *s = e->row_seqs[r];
        if (s->spec_k > 0) { /* sampled in order with its drafts' rows */
            e->row_st[r] = TR_OK;
            continue;
        }
        if (s->status != 0) { /* no mask: ended by the caller */
            e->row_st[r] = s->status;
            continue;
        }
        e->row_st[r] = tr_engine_seq_sample(s, e->logits + (size_t)r * (size_t)e->n_vocab,
                                            &e->row_tok[r],
                                            s->req->logprobs ? &e->row_lp[r] : NULL);
    }
}

/* s generated stop token tok (EOS or a stop id): counted, never shown,
 * and the sample ends with finish STOP. */
static void end_at_stop_token(trellis_engine *e, engine_seq *s, int32_t tok) {
    tr_sampler_accept(s->smp, tok);
    s->n_gen++;
    e->st.generated_tokens++;
    s->stop_token = tok;
    tr_out_flush(e, s);
    tr_engine_end_seq(e, s, TRELLIS_FINISH_STOP, TR_OK, NULL);
}

/* Takes row r's sampled token for s, jumps forward over the bytes the
 * constraint forces next (if any), and applies stops.
 *
 * Jump-forward puts the re-encoded tokens (constraint.c) in place of the
 * sampled token at s->tokens[len..], so that len - n_kv > 1 and the
 * scheduler feeds them next step as one chunk (sched.c pass 2, like a
 * prefill chunk: pages are reserved there, all or what the pool has),
 * with the logits row on the last one. Each placed token is a generated
 * token: it counts toward max_tokens (the jump gets room for at most
 * max_tokens - n_gen tokens, and for what the context has left), goes
 * through tr_out_push_token (detokenization, stop strings: a stop string
 * inside the chunk ends the sample there, the later tokens are dropped),
 * and enters the sampler's penalty window. The radix insert at the end
 * caches tokens[0..n_kv), computed ones only, so a sample that ends with
 * tokens still unfed caches nothing wrong; preemption re-admits it with
 * its whole token list, the unfed part being prefilled like a prompt. */
bool tr_engine_end_row(trellis_engine *e, engine_seq *s, tr_status st) {
    if (s->status != 0) {
        tr_engine_end_seq(e, s, TRELLIS_FINISH_ERROR, s->status,
                          s->fail_msg ? s->fail_msg
                          : s->status == TR_ERR_LIMIT
                              ? "the constraint reached a budget of its grammar (automaton "
                                "states or parse stacks) computing a token mask"
                              : "the constraint could not compute a token mask");
        return true;
    }
    if (st != TR_OK) {
        tr_engine_end_seq(e, s, TRELLIS_FINISH_ERROR, st, tr_sampler_last_error(s->smp));
        return true;
    }
    if (s->span_end) {
        /* the model chose a token the constraint forbids where the text is
         * complete: the span ends here; the token is not output */
        tr_out_flush(e, s);
        tr_engine_end_seq(e, s, TRELLIS_FINISH_STOP, TR_OK, NULL);
        return true;
    }
    return false;
}

static void finish_row(trellis_engine *e, engine_seq *s, int32_t row) {
    engine_req *r = s->req;
    if (s->spec_k > 0) {
        tr_spec_verify(e, s, row); /* speculate.c */
        return;
    }
    const sampler_logprobs *lp = r->logprobs ? &e->row_lp[row] : NULL;
    int32_t tok = e->row_tok[row];
    tr_status st = (tr_status)e->row_st[row];
    if (tr_engine_end_row(e, s, st)) return;
    if (!tr_engine_take_token(e, s, tok, lp)) return;
    tr_spec_propose(e, s); /* drafts for the next step, when s speculates */
    tr_out_emit_delta(e, s);
}

bool tr_engine_take_token(trellis_engine *e, engine_seq *s, int32_t tok,
                          const sampler_logprobs *lp) {
    engine_req *r = s->req;
    if (s->cstate) {
        int cs = r->cops->accept(s->cstate, tok);
        if (cs != 0) {
            tr_engine_end_seq(e, s, TRELLIS_FINISH_ERROR, cs,
                           "the constraint rejected the sampled token");
            return false;
        }
    }
    uint64_t now = tr_now_ns();
    if (s->n_gen == 0) s->t_first_token = now;
    s->t_last_token = now;

    bool eog = e->is_eog[tok] && !r->ignore_eos;
    if (eog || is_stop_token(r, tok)) {
        end_at_stop_token(e, s, tok);
        return false;
    }
    /* the tokens to append: the sampled one, or what jump-forward puts in
     * its place (written straight into s->tokens; room keeps len <= cap) */
    TR_ASSERT(s->len < s->cap && s->n_gen < r->max_tokens && s->len < e->n_ctx);
    int32_t *chunk = s->tokens + s->len;
    int32_t n_chunk = 1;
    chunk[0] = tok;
    if (r->jump_forward && s->cstate) {
        int32_t room = TR_MIN(r->max_tokens - s->n_gen, e->n_ctx - s->len);
        room = TR_MIN(room, s->cap - s->len);
        tr_status js = tr_constraint_jump_forward(e->tok, r->cops, s->cstate, tok,
                                               room, chunk, &n_chunk);
        if (js != TR_OK) {
            tr_engine_end_seq(e, s, TRELLIS_FINISH_ERROR, js,
                           "the constraint refused its own token again after "
                           "a jump-forward rollback");
            return false;
        }
    }
    bool jumped = n_chunk > 1 || chunk[0] != tok;
    if (jumped) {
        e->st.jump_forwards++;
        e->st.forced_tokens += (uint64_t)(n_chunk - 1);
        s->n_forced += n_chunk - 1;
    }
    for (int32_t i = 0; i < n_chunk; i++) {
        int32_t t = chunk[i];
        if (i > 0 && is_stop_token(r, t) && s->n_gen >= r->min_tokens) {
            /* forced, but still a stop */
            end_at_stop_token(e, s, t);
            return false;
        }
        tr_sampler_accept(s->smp, t);
        tr_spec_accepted(s, t);
        s->len++;
        s->n_gen++;
        e->st.generated_tokens++;
        /* forced tokens report logprob 0 (probability 1), no alternatives */
        if (tr_out_push_token(e, s, t, jumped ? NULL : lp, true)) {
            tr_engine_end_seq(e, s, TRELLIS_FINISH_STOP, TR_OK, NULL);
            return false;
        }
    }
    if (s->cstate && r->cops->is_done && r->cops->is_done(s->cstate)) {
        tr_out_flush(e, s);
        tr_engine_end_seq(e, s, TRELLIS_FINISH_STOP, TR_OK, NULL);
        return false;
    }
    if (s->n_gen >= r->max_tokens || s->len >= e->n_ctx) {
        tr_out_flush(e, s);
        tr_engine_end_seq(e, s, TRELLIS_FINISH_LENGTH, TR_OK, NULL);
        return false;
    }
    return true;
}

static bool mask_allows_eog(const trellis_engine *e, const uint64_t *m) {
    for (int32_t k = 0; k < e->n_eog; k++) {
        uint32_t t = (uint32_t)e->eog_ids[k];
        if (m[t >> 6] >> (t & 63) & 1) return true;
    }
    return false;
}

static void clear_bit(uint64_t *m, int32_t t) {
    m[(uint32_t)t >> 6] &= ~(UINT64_C(1) << (t & 63));
}

/* min_tokens (trellis.h): masks out what would end s now, its
 * end-of-generation tokens (unless ignore_eos) and stop token ids, as
 * SGLang's min_new_tokens and vLLM's min_tokens do. False when m then
 * allows nothing (a constraint that may only end: it ends). */
static bool mask_out_enders(const trellis_engine *e, const engine_seq *s, uint64_t *m) {
    const engine_req *r = s->req;
    if (!r->ignore_eos)
        for (int32_t k = 0; k < e->n_eog; k++) clear_bit(m, e->eog_ids[k]);
    for (int32_t k = 0; k < r->n_stop_tokens; k++) clear_bit(m, r->stop_tokens[k]);
    for (size_t k = 0; k < e->n_words; k++)
        if (m[k]) return true;
    return false;
}

/* Fills the masks of the constrained rows (overlapped with the forward),
 * decides which rows the end-of-span rule applies to, and tells the
 * forward which logits sampling will read (e->row_mask: a masked row's
 * mask; every logit of a row sampled without one, the end-of-span rule's
 * draw included). */
uint64_t *tr_engine_seq_mask(trellis_engine *e, engine_seq *s, uint64_t *m) {
    s->mask = NULL;
    s->span_rule = s->span_end = false;
    bool ban = s->n_gen < s->req->min_tokens;
    if (!s->cstate && !ban) return NULL;
    int st = 0;
    if (s->cstate) {
        st = s->req->cops->fill_mask(s->cstate, m, e->n_words);
    } else { /* every token of the vocabulary, none past it */
        memset(m, 0xff, e->n_words * sizeof *m);
        if (e->n_vocab % 64)
            m[e->n_words - 1] = (UINT64_C(1) << (e->n_vocab % 64)) - 1;
    }
    if (st == 0 && ban && !mask_out_enders(e, s, m) && s->cstate)
        st = s->req->cops->fill_mask(s->cstate, m, e->n_words); /* as it was */
    if (st != 0) {
        s->status = st; /* ended after the forward pass */
        return NULL;
    }
    s->mask = m;
    s->span_rule = s->req->end_span && mask_allows_eog(e, m);
    return s->span_rule ? NULL : m;
}

static void fill_masks(trellis_engine *e, int32_t n_rows) {
    for (int32_t i = 0; i < n_rows; i++) {
        engine_seq *s = e->row_seqs[i];
        if (s->spec_k > 0) { /* its masks follow its drafts (speculate.c) */
            s->mask = NULL;
            s->span_rule = s->span_end = false;
            e->row_mask[i] = NULL;
            continue;
        }
        e->row_mask[i] = tr_engine_seq_mask(e, s, e->masks + (size_t)i * e->n_words);
    }
}

/* Prompt log-probs of this step's prompt rows (logits rows nrows..,
 * grouped by sequence, prompt_lp.c), before any event of the step. When
 * their logits could not be had (nomem), the sequences that needed rows
 * end with an error. */
static void fail_prompt_rows(trellis_engine *e, engine_seq *s, tr_status st,
                             const char *msg) {
    if (s->logit_row >= 0) { /* it has a row to sample: finish_row ends it */
        s->status = st;
        s->fail_msg = msg;
        return;
    }
    tr_engine_end_seq(e, s, TRELLIS_FINISH_ERROR, st, msg);
}

static void store_prompt_rows(trellis_engine *e, int32_t nrows, int32_t nplp,
                              bool nomem, int32_t nseq) {
    if (nomem) {
        for (int32_t i = 0; i < nseq; i++) {
            engine_seq *s = e->b_seqs[i];
            if (tr_plp_pending(s))
                fail_prompt_rows(e, s, TR_ERR_NOMEM,
                                 "out of memory for the prompt log-probs' logits");
        }
        return;
    }
    for (int32_t k = 0; k < nplp;) {
        engine_seq *s = e->plp_seqs[k];
        int32_t n = 1;
        while (k + n < nplp && e->plp_seqs[k + n] == s) n++;
        tr_status st = tr_plp_store(e, s, nrows + k, n);
        if (st != TR_OK)
            fail_prompt_rows(e, s, st, "the prompt log-probs could not be computed "
                                       "(no finite logit)");
        k += n;
    }
}

/* Speculation (speculate.c): the logits rows the planned drafts need,
 * or, when they cannot be had (out of memory), no drafts this step. */
static void plan_draft_rows(trellis_engine *e) {
    int32_t need = 0;
    for (int32_t i = 0; i < e->n_running; i++)
        if (e->running[i]->plan > 1) need += e->running[i]->spec_k;
    if (need == 0 ||
        tr_engine_reserve_logits(e, e->opt.max_running + TR_PLP_ROWS_MAX + need) == TR_OK)
        return;
    for (int32_t i = 0; i < e->n_running; i++) {
        engine_seq *s = e->running[i];
        if (s->plan == 0 || s->spec_k == 0) continue;
        s->plan -= s->spec_k;
        tr_spec_cut(s, 0);
    }
}

/* The drafts' rows from logits row `base` on: each speculating sequence's
 * positions but its last (whose row is the usual one); spec_row0 turns
 * from the first batch index into the first row. Returns the count. */
static int32_t place_draft_rows(trellis_engine *e, int32_t base) {
    int32_t n = 0;
    for (int32_t i = 0; i < e->n_running; i++) {
        engine_seq *s = e->running[i];
        if (s->plan == 0 || s->spec_k == 0) continue;
        TR_ASSERT(s->plan == 1 + s->spec_k && s->logit_row >= 0);
        int32_t b0 = s->spec_row0;
        s->spec_row0 = base + n;
        for (int32_t k = 0; k < s->spec_k; k++, n++) {
            e->b_rows[base + n] = b0 + k;
            e->row_mask[base + n] = NULL;
        }
    }
    TR_ASSERT(n <= TR_SPEC_ROWS_MAX);
    return n;
}

void tr_engine_step(trellis_engine *e) {
    uint64_t t0 = tr_now_ns();
    int32_t n_tok = tr_sched_plan(e);
    if (n_tok == 0) {
        tr_out_publish(e);
        return;
    }
    plan_draft_rows(e);
    /* the batch: each running sequence's planned tokens, in running order */
    int32_t nt = 0, nseq = 0, nrows = 0, nplp = 0;
    for (int32_t i = 0; i < e->n_running; i++) {
        engine_seq *s = e->running[i];
        s->logit_row = -1;
        if (s->plan == 0) continue;
        e->b_seqs[nseq] = s;
        e->b_tables[nseq] = s->pages;
        e->b_npages[nseq] = s->n_pages;
        /* prompt log-prob rows: positions plp_next.. (prompt_lp.c) */
        int32_t k_plp = tr_plp_rows_for(s, s->plan);
        TR_ASSERT(nplp + k_plp <= TR_PLP_ROWS_MAX);
        for (int32_t k = 0; k < k_plp; k++) {
            e->plp_bidx[nplp] = nt + s->plp_next - s->n_kv + k;
            e->plp_seqs[nplp++] = s;
        }
        if (s->spec_k > 0) s->spec_row0 = nt; /* its batch index, for now */
        for (int32_t k = 0; k < s->plan; k++) {
            e->b_tokens[nt] = s->tokens[s->n_kv + k];
            e->b_pos[nt] = s->n_kv + k;
            e->b_seq[nt] = nseq;
            nt++;
        }
        if (s->n_kv + s->plan == s->len && s->req->max_tokens > 0) {
            /* a prefill-only request (max_tokens 0) needs no logits */
            e->b_rows[nrows] = nt - 1;
            e->row_seqs[nrows] = s;
            s->logit_row = nrows++;
        }
        s->status = 0;
        s->fail_msg = NULL;
        nseq++;
    }
    TR_ASSERT(nt == n_tok && nt <= e->opt.max_batch_tokens);
    /* the prompt rows go after the sampled ones, every logit read */
    bool plp_nomem = nplp > 0 && tr_plp_reserve_logits(e) != TR_OK;
    if (plp_nomem) nplp = 0; /* those sequences end after the forward */
    for (int32_t k = 0; k < nplp; k++) {
        e->b_rows[nrows + k] = e->plp_bidx[k];
        e->row_mask[nrows + k] = NULL;
    }
    int32_t nspec = place_draft_rows(e, nrows + nplp); /* after them */
    tr_batch b = {.n_tokens = nt, .pos = e->b_pos, .seq = e->b_seq,
                  .n_seqs = nseq, .page_table = e->b_tables,
                  .n_pages = e->b_npages};
    tr_disk_sync_saves(e); /* evicted pages out before this pass rewrites them */
    uint64_t t1 = tr_now_ns();
    tr_status fst;
    uint64_t ov = 0;
    e->lmasks = (tr_logit_masks){.ctx = e, .row_mask = e->row_mask,
                                 .n_words = e->n_words};
    if (e->worker.started) {
        e->lmasks.await = tr_worker_await_masks;
        tr_worker_post(e, &b, e->b_tokens, e->b_rows, nrows + nplp + nspec, e->logits);
        uint64_t o0 = tr_now_ns();
        fill_masks(e, nrows);
        tr_worker_masks_ready(e);
        tr_engine_take_messages(e, false, true);
        tr_sched_admit_ahead(e);
        ov = tr_now_ns() - o0;
        fst = tr_worker_wait(e);
    } else {
        uint64_t o0 = tr_now_ns();
        fill_masks(e, nrows);
        tr_sched_admit_ahead(e);
        ov = tr_now_ns() - o0;
        fst = e->compute.ops->forward(e->compute.ctx, &b, e->b_tokens,
                                      e->b_rows, nrows + nplp + nspec, e->logits,
                                      &e->lmasks);
    }
    uint64_t t2 = tr_now_ns();
    e->st.steps++;
    e->st.batch_tokens += (uint64_t)nt;
    for (int32_t i = 0; i < nseq; i++) {
        engine_seq *s = e->b_seqs[i];
        /* prompt tokens computed (all but decode feeds) */
        if (s->n_kv < s->prefill_to)
            e->st.prefill_tokens += (uint64_t)TR_MIN(s->plan, s->prefill_to - s->n_kv);
        else if (s->plan > 1 && s->spec_k == 0) /* a jump-forward chunk: one pass, not plan */
            e->st.forward_passes_saved += (uint64_t)(s->plan - 1);
    }
    if (fst != TR_OK) {
        tr_log(TR_LOG_ERROR, "engine: forward pass failed (%s)",
               tr_status_name(fst));
        for (int32_t i = 0; i < nseq; i++)
            tr_engine_end_seq(e, e->b_seqs[i], TRELLIS_FINISH_ERROR, fst,
                           "the forward pass failed");
        tr_out_publish(e);
        return;
    }
    for (int32_t i = 0; i < nseq; i++) tr_sched_after_forward(e, e->b_seqs[i]);
    store_prompt_rows(e, nrows, nplp, plp_nomem, nseq);
    /* prefill only (max_tokens 0): done once the whole prompt is in the
     * KV; releasing it caches the prompt's pages in the radix tree */
    for (int32_t i = 0; i < nseq; i++) {
        engine_seq *s = e->b_seqs[i];
        if (s->req->max_tokens == 0 && s->n_kv == s->len)
            tr_engine_end_seq(e, s, TRELLIS_FINISH_LENGTH, TR_OK, NULL);
    }
    uint64_t t3 = tr_now_ns();
    /* the vocabulary-wide sampling work: half on the (now idle) compute
     * thread when there are enough rows to pay for the hand-off */
    if (e->worker.started && nrows >= 8) {
        int32_t h = nrows / 2;
        tr_worker_post_sample(e, h, nrows);
        tr_engine_sample_rows(e, 0, h);
        tr_worker_wait(e);
    } else {
        tr_engine_sample_rows(e, 0, nrows);
    }
    for (int32_t r = 0; r < nrows; r++) finish_row(e, e->row_seqs[r], r);
    uint64_t t4 = tr_now_ns();
    tr_draft_propose_all(e); /* draft-model drafts for the next step */
    e->st.step_s += (double)(tr_now_ns() - t4) / 1e9;
    e->st.step_s += (double)(t4 - t0) / 1e9;
    e->st.forward_s += (double)(t2 - t1) / 1e9;
    e->st.overlap_s += (double)ov / 1e9;
    e->st.sample_s += (double)(t4 - t3) / 1e9;
    e->st.schedule_s += (double)((t1 - t0) + (t3 - t2)) / 1e9;
    if (!e->worker.started) {
        /* masks were computed serially: count them as scheduling work */
        e->st.schedule_s += (double)ov / 1e9;
        e->st.forward_s -= (double)ov / 1e9;
    }
    /* stats first, so that an embedder reading them after this step's
     * events sees the step; publishing the events (a list splice and a
     * wake-up) is then the last, uncounted, microsecond of the step */
    tr_engine_publish_stats(e);
    tr_out_publish(e);
}
