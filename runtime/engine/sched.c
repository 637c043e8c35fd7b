/* sched.c — the scheduler: which tokens of which sequences go into the
 * next step's batch, and where their KV pages come from.
 *
 * Layering: runtime/engine, engine thread only. Uses the page pool and the
 * radix tree (radix/), nothing else.
 *
 * Each step, tr_sched_plan fills seq->plan (tokens to feed) for the running
 * sequences, in three passes over a token budget of max_batch_tokens:
 *
 *   1. decodes: every running sequence that has only its last sampled
 *      token left to feed gets 1 token, oldest first. Decodes never wait
 *      behind a prefill: they are planned before any prefill chunk. When
 *      the pool has no page for one, cached pages are evicted; when there
 *      is nothing left to evict, the NEWEST running sequence is preempted
 *      (its computed prefix goes to the radix tree, its other pages back to
 *      the pool, and it returns to the front of the waiting list, to
 *      resume later by re-matching its tokens in the tree).
 *   2. prefill chunks of running sequences still prefilling, oldest first,
 *      up to chunk_size each (smaller if the budget or the pool is short;
 *      a prefill never preempts anyone, it stalls). A generating sequence
 *      whose last step appended several tokens at once (jump-forward,
 *      step.c) is fed them here too, as one chunk.
 *   3. admission of waiting sequences while the budget lasts and fewer than
 *      max_running run. Most admission happens a step early, in
 *      tr_sched_admit_ahead, while the previous step's forward pass computes
 *      (the overlap): its budget is what the running sequences will leave
 *      if they all go on; pass 3 admits with whatever budget is left after
 *      passes 1-2 (first steps, finished sequences, a preemption). Order:
 *      longest cached prefix first (SGLang's LPM) while at most
 *      lpm_max_waiting sequences wait, else arrival order.
 *      A candidate is deferred when a sequence still prefilling will put a
 *      longer prefix of the candidate's prompt into the tree than the tree
 *      holds now ("in-flight prefix deduplication": 64 requests sharing a
 *      new 1,500-token prefix compute it once, not 64 times in the same
 *      few steps). Admission needs the pages of the first chunk plus a
 *      watermark of one page per running sequence (their next decode page),
 *      counting free and cached (evictable) pages.
 *
 * Progress. The oldest running sequence is never preempted by a newer one,
 * and every admitted request fits the pool on its own (trellis_submit
 * rejects the others), so the oldest always gets its pages and finishes: no
 * deadlock. If a step plans nothing while sequences run (all stalled on
 * pages), the newest is preempted until something fits.
 *
 * Caching. Prompt pages are inserted into the tree as soon as each prefill
 * chunk completes full pages (so that forks and other requests can match
 * them while this one still runs); the whole sequence is inserted when it
 * finishes (radix mode) or is preempted. The sequence then holds a lock on
 * the deepest node, which pins those pages (engine_internal.h).
 */
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/util.h"
#include "runtime/engine/engine_internal.h"

int32_t tr_sched_pages_for(const trellis_engine *e, int64_t tokens) {
    return (int32_t)((tokens + e->page_size - 1) / e->page_size);
}

/* ---- the waiting list ---- */

void tr_sched_waiting_push_back(trellis_engine *e, engine_seq *s) {
    s->prev = e->wait_tail;
    s->next = NULL;
    if (e->wait_tail) e->wait_tail->next = s;
    else e->wait_head = s;
    e->wait_tail = s;
    e->n_waiting++;
    s->state = SEQ_WAITING;
}

void tr_sched_waiting_push_front(trellis_engine *e, engine_seq *s) {
    s->next = e->wait_head;
    s->prev = NULL;
    if (e->wait_head) e->wait_head->prev = s;
    else e->wait_tail = s;
    e->wait_head = s;
    e->n_waiting++;
    s->state = SEQ_WAITING;
}

void tr_sched_waiting_remove(trellis_engine *e, engine_seq *s) {
    if (s->prev) s->prev->next = s->next;
    else e->wait_head = s->next;
    if (s->next) s->next->prev = s->prev;
    else e->wait_tail = s->prev;
    s->prev = s->next = NULL;
    e->n_waiting--;
}

static void running_remove(trellis_engine *e, engine_seq *s) {
    for (int32_t i = 0; i < e->n_running; i++) {
        if (e->running[i] != s) continue;
        memmove(e->running + i, e->running + i + 1,
                (size_t)(e->n_running - i - 1) * sizeof *e->running);
        e->n_running--;
        return;
    }
    TR_ASSERT(!"sequence not in the running array");
}

/* ---- pages ---- */

/* Makes s's page table cover positions [0, upto), evicting cached pages
 * when the pool is short. All or nothing. */
static bool reserve(trellis_engine *e, engine_seq *s, int32_t upto) {
    int32_t want = tr_sched_pages_for(e, upto);
    int32_t need = (want - s->n_pages) * e->W; /* every unit of a new slot */
    if (need <= 0) return true;
    TR_ASSERT(want <= s->pages_cap);
    int32_t nfree = tr_kv_pool_n_free(e->pool);
    if (nfree < need) tr_radix_tree_evict(e->tree, need - nfree);
    if (tr_kv_pool_alloc(e->pool, need, s->pages + (int64_t)s->n_pages * e->W) != TR_OK)
        return false;
    s->n_pages = want;
    return true;
}

/* Free plus cached (evictable) pages. */
static int32_t pages_available(const trellis_engine *e) {
    kv_pool_stats ps;
    tr_kv_pool_stats_get(e->pool, &ps);
    return ps.n_free + ps.n_cached;
}

/* Drops the lock and the references of s without caching anything. */
static void drop_pages(trellis_engine *e, engine_seq *s) {
    tr_win_unref_all(e, s);
    if (s->node) {
        tr_status st = tr_radix_tree_unlock(e->tree, s->node);
        TR_ASSERT(st == TR_OK);
    }
    s->node = NULL;
    s->n_locked = 0;
    s->n_pages = 0;
    s->n_kv = 0;
    s->let_go = 0;
}

/* Inserts tokens[0..n_kv) into the tree. On success pages[0..F) are tree
 * pages (F = n_kv / page_size) and *x the node covering them (unlocked);
 * the sequence no longer owns references on pages[n_locked..F). */
static bool cache_prefix(trellis_engine *e, engine_seq *s, radix_node **x) {
    *x = NULL;
    int32_t full = s->n_kv / e->page_size;
    if (full <= s->n_locked) return false;
    tr_status st = tr_radix_tree_insert(e->tree, s->req->ns, s->tokens,
                                     s->pages, s->n_kv, x);
    if (st != TR_OK) {
        /* out of bookkeeping memory: nothing changed; keep the pages
         * private, the prefix just is not shared */
        tr_log(TR_LOG_WARN, "engine: radix insert failed (%s)",
               tr_status_name(st));
        *x = NULL;
        return false;
    }
    return true;
}

void tr_sched_release(trellis_engine *e, engine_seq *s, bool cache) {
    radix_node *x;
    if (cache && cache_prefix(e, s, &x)) {
        int32_t full = s->n_kv / e->page_size;
        /* pages[0..full) now belong to the tree; the rest are ours */
        s->n_locked = full;
    }
    drop_pages(e, s);
    tr_draft_release(e, s);
    if (s->state == SEQ_RUNNING) running_remove(e, s);
    else if (s->state == SEQ_WAITING) tr_sched_waiting_remove(e, s);
    s->plan = 0;
    s->logit_row = -1;
}

static void preempt(trellis_engine *e, engine_seq *v) {
    TR_ASSERT(v->state == SEQ_RUNNING);
    tr_spec_cut(v, 0); /* unverified: re-admission must not prefill them */
    tr_sched_release(e, v, true);
    v->preemptions++;
    e->st.preemptions++;
    tr_sched_waiting_push_front(e, v);
    tr_log(TR_LOG_DEBUG, "engine: preempted request %llu/%d at %d tokens",
           (unsigned long long)v->req->id, v->index, v->len);
}

void tr_sched_after_forward(trellis_engine *e, engine_seq *s) {
    int32_t before = s->n_kv;
    s->n_kv += s->plan;
    /* share completed prompt pages right away (not decode pages: those
     * are cached when the sequence ends) */
    if (before >= s->prefill_to) return;
    radix_node *x;
    if (!cache_prefix(e, s, &x)) return;
    tr_status st = tr_radix_tree_lock(e->tree, x);
    TR_ASSERT(st == TR_OK); /* counts are bounded by the sequences */
    if (s->node) tr_radix_tree_unlock(e->tree, s->node);
    s->node = x;
    s->n_locked = s->n_kv / e->page_size;
}

/* ---- admission ---- */

static int32_t common_prefix(const int32_t *a, int32_t na, const int32_t *b,
                             int32_t nb) {
    int32_t n = TR_MIN(na, nb), i = 0;
    while (i < n && a[i] == b[i]) i++;
    return i;
}

/* Will a running prefill put more of c's prompt into the tree than the
 * `cached` tokens it holds now? Then c waits for it. */
static bool defer_for_inflight(const trellis_engine *e, const engine_seq *c,
                               int32_t cached) {
    for (int32_t i = 0; i < e->n_running; i++) {
        const engine_seq *p = e->running[i];
        if (p->n_kv >= p->prefill_to || p->req->ns != c->req->ns) continue;
        int32_t l = common_prefix(c->tokens, c->len - 1, p->tokens,
                                  p->prefill_to);
        if (l / e->page_size * e->page_size > cached) return true;
    }
    return false;
}

/* Sets up what s needs to run that is not pages: its sampler (first
 * admission). False (and s ended with an error) on failure. */
static bool first_admission(trellis_engine *e, engine_seq *s, int32_t cached) {
    engine_req *r = s->req;
    sampler_params sp = r->sp;
    sp.seed = r->sp.seed + (uint64_t)s->index;
    tr_diag d = {0};
    tr_status st = tr_sampler_new(&sp, e->n_vocab, &s->smp, &d);
    if (st != TR_OK) {
        tr_engine_end_seq(e, s, TRELLIS_FINISH_ERROR, st,
                       d.message[0] ? d.message : "cannot create the sampler");
        return false;
    }
    /* the penalty window starts with the prompt (as cmd_generate does) */
    for (int32_t i = 0; i < s->len; i++) tr_sampler_accept(s->smp, s->tokens[i]);
    s->admitted_once = true;
    tr_spec_setup(e, s); /* a proposer when the engine speculates */
    tr_draft_setup(e, s);
    s->cached_tokens = cached;
    s->t_first_sched = tr_now_ns();
    e->st.prompt_tokens += (uint64_t)r->n_prompt;
    e->st.cached_prompt_tokens += (uint64_t)TR_MIN(cached, r->n_prompt);
    return true;
}

/* Candidate order: longest cached prefix first, then arrival (stable). */
static int cand_cmp(const void *a, const void *b) {
    const sched_cand *x = a, *y = b;
    if (x->match != y->match) return x->match > y->match ? -1 : 1;
    return (x->order > y->order) - (x->order < y->order);
}

/* Tries to admit s with `budget` tokens; returns the tokens planned (0:
 * not admitted, s unchanged and still waiting). *stop is set when no later
 * candidate can be admitted this step either (pages). */
static int32_t try_admit(trellis_engine *e, engine_seq *s, int32_t budget,
                         int32_t n_decoding, bool *stop) {
    radix_match m;
    /* prompt log-probs: cached positions would get no logits rows */
    int32_t limit = tr_plp_match_limit(s);
    tr_status st = tr_radix_tree_match(e->tree, s->req->ns, s->tokens, limit,
                                    s->pages, &m);
    if (st != TR_OK) m = (radix_match){0};
    if (limit == s->len - 1 && defer_for_inflight(e, s, m.n_tokens)) return 0;
    if (m.node) {
        st = tr_radix_tree_lock(e->tree, m.node);
        TR_ASSERT(st == TR_OK);
    }
    s->node = m.node;
    s->n_locked = s->n_pages = m.n_pages;
    s->n_kv = m.n_tokens;
    tr_win_take_match(e, s);
    int32_t c = TR_MIN(TR_MIN(e->opt.chunk_size, s->len - s->n_kv), budget);
    int32_t rows_left = e->plp_rows_left;
    c = tr_plp_fit_chunk(e, s, c);
    if (c == 0) { /* no prompt log-prob rows left this step */
        drop_pages(e, s);
        e->plp_rows_left = rows_left;
        return 0;
    }
    int32_t need = (tr_sched_pages_for(e, s->n_kv + c) - s->n_pages) * e->W;
    if (need + n_decoding * e->W > pages_available(e) || !reserve(e, s, s->n_kv + c)) {
        e->plp_rows_left = rows_left;
        drop_pages(e, s);
        *stop = true;
        return 0;
    }
    if (!s->admitted_once && !first_admission(e, s, m.n_tokens)) {
        e->plp_rows_left = rows_left;
        return 0; /* s was ended (and released) */
    }
    tr_sched_waiting_remove(e, s);
    tr_disk_release(e, s->req); /* s holds its own lock on the prefix now */
    s->state = SEQ_RUNNING;
    s->admit_order = ++e->admit_counter;
    s->prefill_to = s->len;
    s->plan = c;
    e->running[e->n_running++] = s;
    return c;
}

static int32_t admit(trellis_engine *e, int32_t budget) {
    if (!e->wait_head || budget <= 0 || e->n_running >= e->opt.max_running)
        return 0;
    int32_t n_decoding = e->n_running;
    /* collect up to SCHED_SCAN_MAX candidates in list order */
    int32_t n = 0;
    sched_cand *cs = e->cand;
    for (engine_seq *s = e->wait_head; s && n < SCHED_SCAN_MAX; s = s->next) {
        if (s->req->disk_wait) continue; /* its prefix is being read */
        cs[n] = (sched_cand){s, 0, n};
        n++;
    }
    if (e->n_waiting <= e->opt.lpm_max_waiting && n > 1) {
        for (int32_t i = 0; i < n; i++) {
            radix_match m;
            engine_seq *s = cs[i].s;
            if (tr_radix_tree_match(e->tree, s->req->ns, s->tokens, s->len - 1,
                                 NULL, &m) == TR_OK)
                cs[i].match = m.n_tokens;
        }
        qsort(cs, (size_t)n, sizeof *cs, cand_cmp);
    }
    int32_t planned = 0;
    for (int32_t i = 0; i < n; i++) {
        if (e->n_running >= e->opt.max_running || budget <= 0) break;
        bool stop = false;
        int32_t c = try_admit(e, cs[i].s, budget, n_decoding, &stop);
        if (stop) break;
        budget -= c;
        planned += c;
        if (c) n_decoding++;
    }
    return planned;
}

int32_t tr_sched_admit_ahead(trellis_engine *e) {
    /* what the running sequences will feed next step if they all go on:
     * one decode token for each that samples now (or waits to decode),
     * the next chunk for each that is still prefilling */
    int64_t need = 0;
    for (int32_t i = 0; i < e->n_running; i++) {
        const engine_seq *s = e->running[i];
        int32_t left = s->len - (s->n_kv + s->plan);
        if (s->logit_row >= 0 || left <= 1) need += 1;
        else need += TR_MIN(e->opt.chunk_size, left);
    }
    if (need >= e->opt.max_batch_tokens) return 0;
    /* the rows are planned again next step (pass 2); this only shapes the
     * first chunks */
    e->plp_rows_left = TR_PLP_ROWS_MAX;
    int32_t before = e->n_running;
    int32_t planned = admit(e, e->opt.max_batch_tokens - (int32_t)need);
    e->st.admitted_ahead += (uint64_t)(e->n_running - before);
    return planned;
}

int32_t tr_sched_plan(trellis_engine *e) {
    for (;;) {
        int32_t budget = e->opt.max_batch_tokens, planned = 0;
        int32_t waiting_before = e->n_waiting;
        e->plp_rows_left = TR_PLP_ROWS_MAX;
        for (int32_t i = 0; i < e->n_running; i++) {
            e->running[i]->plan = 0;
            tr_win_let_go(e, e->running[i]); /* what no window reads now */
        }

        /* 1. decodes, oldest first, with their drafts (speculate.c) when
         * the budget, the draft rows and the pool allow, else without;
         * preempt the newest when out of pages */
        e->spec_rows_left = TR_SPEC_ROWS_MAX;
        float worth = tr_spec_worth(e); /* the acceptance a draft needs now */
        for (int32_t i = 0; i < e->n_running && budget > 0; i++) {
            engine_seq *s = e->running[i];
            if (s->len - s->n_kv != 1 + s->spec_k) continue;
            tr_spec_cut(s, TR_MIN(budget - 1, e->spec_rows_left));
            if (s->spec_k && !tr_spec_pays(s, worth)) tr_spec_cut(s, 0);
            if (s->spec_k && !reserve(e, s, s->n_kv + 1 + s->spec_k)) tr_spec_cut(s, 0);
            bool self = false;
            while (!reserve(e, s, s->n_kv + 1)) {
                engine_seq *v = e->running[e->n_running - 1];
                preempt(e, v);
                if (v == s) {
                    self = true;
                    break;
                }
            }
            if (self) break;
            s->plan = 1 + s->spec_k;
            e->spec_rows_left -= s->spec_k;
            budget -= s->plan;
            planned += s->plan;
        }
        /* 2. continuing prefills, oldest first; stall when out of pages */
        for (int32_t i = 0; i < e->n_running && budget > 0; i++) {
            engine_seq *s = e->running[i];
            int32_t left = s->len - s->n_kv;
            if (left <= 1 || s->spec_k) continue; /* drafts: pass 1 only */
            int32_t c = TR_MIN(TR_MIN(e->opt.chunk_size, left), budget);
            c = tr_plp_fit_chunk(e, s, c); /* prompt log-prob rows */
            if (!reserve(e, s, s->n_kv + c)) {
                /* take what the pool still has */
                int32_t room = (s->n_pages + pages_available(e) / e->W) * e->page_size -
                               s->n_kv;
                c = TR_MIN(c, room);
                if (c <= 0 || !reserve(e, s, s->n_kv + c)) c = 0;
            }
            s->plan = c;
            budget -= c;
            planned += c;
        }
        /* 3. admission */
        planned += admit(e, budget);

        if (planned > 0) return planned;
        if (e->n_running > 0) {
            /* every running sequence is stalled on pages: free some by
             * preempting the newest, then plan again */
            preempt(e, e->running[e->n_running - 1]);
            continue;
        }
        if (!e->wait_head) return 0;
        if (e->n_waiting != waiting_before) continue; /* some ended: retry */
        if (tr_disk_any_waiting(e)) return 0; /* pages are on their way */
        if (tr_disk_release_all(e)) continue; /* waiters' pins held the pool */
        /* nothing runs and the first waiting sequence cannot start: cannot
         * happen for requests trellis_submit accepted (each fits the empty
         * pool), but never spin on it */
        tr_engine_end_seq(e, e->wait_head, TRELLIS_FINISH_ERROR, TR_ERR_FULL,
                       "the request does not fit the KV pool");
    }
}
