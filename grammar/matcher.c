/* matcher.c — one sequence's position in a grammar: masks, accepting
 * tokens and bytes, rollback, forced continuations.
 *
 * Layering: the façade of grammar/ (grammar.h), over grammar/mask (the
 * regex path's masks) and grammar/cfg (the matcher object, cfg.h; the
 * stacks of CFG grammars); used by the engine once per constrained
 * sequence. A matcher is used by one thread at a time; the grammar and
 * vocabulary it references are shared and read-only (the mask memo is
 * thread-safe, grammar/mask/mask.c).
 *
 * Invariant: the current DFA state is never the dead state — accept calls
 * check before they commit — so "rejected" always leaves the matcher as it
 * was. History: every successful accept call pushes the (state, terminated)
 * it started from onto a fixed ring of max_rollback entries (allocated at
 * creation: accepting never allocates); the oldest entries are forgotten
 * when the ring is full.
 *
 * Grammars with recursion (GRAMMAR_KIND_CFG) keep a set of stacks
 * instead of one state: every entry point hands them to cfg_matcher.c
 * (one branch on m->cfg; the regex path is unchanged).
 */
#include <stdlib.h>
#include <string.h>

#include "grammar/cfg/cfg.h"

#define MAX_ROLLBACK_LIMIT (1u << 20)

/* The grammar's memo for vocabulary v, created on first use. NULL on
 * out-of-memory or a zero budget (masks are then computed every time). */
static gmask_cache *cache_for(grammar *g, const grammar_vocab *v) {
    if (g->mask_budget == 0) return NULL;
    pthread_mutex_lock(&g->lock);
    gmask_cache *c = g->caches;
    while (c && c->vocab_uid != v->uid) c = c->next;
    if (!c) {
        c = tr_mask_cache_new(&g->dfa, v, g->mask_budget);
        if (c) {
            c->next = g->caches;
            g->caches = c;
        }
    }
    pthread_mutex_unlock(&g->lock);
    return c;
}

tr_status tr_grammar_matcher_new(grammar *g, grammar_vocab *v,
                              uint32_t max_rollback, grammar_matcher **out) {
    if (!g || !v || !out) return TR_ERR_INVALID_ARG;
    if (max_rollback == 0) max_rollback = GRAMMAR_DEFAULT_MAX_ROLLBACK;
    if (max_rollback > MAX_ROLLBACK_LIMIT) return TR_ERR_INVALID_ARG;
    grammar_matcher *m = calloc(1, sizeof *m);
    if (!m) return TR_ERR_NOMEM;
    m->hist_state = malloc((size_t)max_rollback * sizeof *m->hist_state);
    m->hist_term = malloc(max_rollback);
    m->stack = malloc(((size_t)v->max_len + 1) * sizeof *m->stack);
    m->scratch = malloc((v->n_words + 1) * sizeof *m->scratch);
    if (!m->hist_state || !m->hist_term || !m->stack || !m->scratch) {
        free(m->hist_state), free(m->hist_term), free(m->stack);
        free(m->scratch), free(m);
        return TR_ERR_NOMEM;
    }
    m->hist_cap = max_rollback;
    m->g = tr_grammar_ref(g);
    m->v = tr_grammar_vocab_ref(v);
    /* NULL on OOM or a zero budget: masks are then computed every time */
    if (g->kind == GRAMMAR_KIND_CFG) {
        tr_status st = tr_cfgm_new(m);
        if (st) {
            tr_grammar_matcher_free(m);
            return st;
        }
    } else {
        m->cache = cache_for(g, v);
    }
    tr_grammar_matcher_reset(m);
    *out = m;
    return TR_OK;
}

void tr_grammar_matcher_free(grammar_matcher *m) {
    if (!m) return;
    tr_cfgm_free(m);
    tr_grammar_free(m->g);
    tr_grammar_vocab_free(m->v);
    free(m->hist_state);
    free(m->hist_term);
    free(m->stack);
    free(m->scratch);
    free(m);
}

void tr_grammar_matcher_reset(grammar_matcher *m) {
    if (m->cfg) {
        tr_cfgm_reset(m);
        return;
    }
    m->state = m->g->dfa.start;
    m->terminated = false;
    m->hist_head = 0;
    m->hist_len = 0;
}

static void push_history(grammar_matcher *m) {
    m->hist_state[m->hist_head] = m->state;
    m->hist_term[m->hist_head] = m->terminated;
    m->hist_head = (m->hist_head + 1) % m->hist_cap;
    if (m->hist_len < m->hist_cap) m->hist_len++;
}

tr_status tr_grammar_matcher_fill_mask(grammar_matcher *m, uint64_t *mask,
                                    size_t n_words) {
    if (!mask || n_words != m->v->n_words) return TR_ERR_INVALID_ARG;
    m->n_fills++;
    if (m->terminated) {
        memset(mask, 0, n_words * sizeof *mask);
        return TR_OK;
    }
    if (m->cfg) return tr_cfgm_fill_mask(m, mask);
    if (!tr_mask_cache_fill(m->cache, &m->g->dfa, m->state, m->v, m->stack,
                          m->scratch, mask))
        m->n_computed++;
    return TR_OK;
}

/* The state after token id, or GDFA_DEAD if it is rejected (EOG: the same
 * state when accepting). */
static uint32_t token_target(const grammar_matcher *m, int32_t id) {
    if (m->terminated) return GDFA_DEAD;
    const grammar_vocab *v = m->v;
    uint8_t f = v->flags[id];
    if (f & GVOCAB_EOG) return m->g->dfa.accept[m->state] ? m->state : GDFA_DEAD;
    if (f & GVOCAB_SPECIAL) return GDFA_DEAD;
    size_t len = (size_t)(v->offs[id + 1] - v->offs[id]);
    if (len == 0) return GDFA_DEAD;
    return tr_dfa_run(&m->g->dfa, m->state, v->bytes + v->offs[id], len);
}

bool tr_grammar_matcher_token_allowed(const grammar_matcher *m, int32_t id) {
    if (id < 0 || id >= m->v->n_vocab) return false;
    if (m->cfg) return tr_cfgm_token_allowed(m, id);
    return token_target(m, id) != GDFA_DEAD;
}

tr_status tr_grammar_matcher_accept_token(grammar_matcher *m, int32_t id) {
    if (id < 0 || id >= m->v->n_vocab) return TR_ERR_INVALID_ARG;
    if (m->cfg) {
        const grammar_vocab *v = m->v;
        uint8_t f = v->flags[id];
        size_t len = (size_t)(v->offs[id + 1] - v->offs[id]);
        if (!(f & GVOCAB_EOG) && ((f & GVOCAB_SPECIAL) || len == 0))
            return TR_ERR_STATE;
        return tr_cfgm_accept(m, v->bytes + v->offs[id], len, f & GVOCAB_EOG);
    }
    uint32_t t = token_target(m, id);
    if (t == GDFA_DEAD) return TR_ERR_STATE;
    push_history(m);
    if (m->v->flags[id] & GVOCAB_EOG) m->terminated = true;
    m->state = t;
    return TR_OK;
}

tr_status tr_grammar_matcher_accept_bytes(grammar_matcher *m, const void *bytes,
                                       size_t len) {
    if (!bytes && len > 0) return TR_ERR_INVALID_ARG;
    if (m->terminated) return TR_ERR_STATE;
    if (m->cfg) return tr_cfgm_accept(m, bytes, len, false);
    uint32_t t = tr_dfa_run(&m->g->dfa, m->state, bytes, len);
    if (t == GDFA_DEAD) return TR_ERR_STATE;
    push_history(m);
    m->state = t;
    return TR_OK;
}

tr_status tr_grammar_matcher_rollback(grammar_matcher *m, uint32_t n) {
    if (m->cfg) return tr_cfgm_rollback(m, n);
    if (n > m->hist_len) return TR_ERR_STATE;
    if (n == 0) return TR_OK;
    /* the entry pushed by the earliest undone call holds the state to
     * return to */
    uint32_t idx = (m->hist_head + m->hist_cap - n) % m->hist_cap;
    m->state = m->hist_state[idx];
    m->terminated = m->hist_term[idx];
    m->hist_head = idx;
    m->hist_len -= n;
    return TR_OK;
}

uint32_t tr_grammar_matcher_history_len(const grammar_matcher *m) {
    return m->hist_len;
}

void tr_grammar_matcher_mask_counts(const grammar_matcher *m, uint64_t *filled,
                                 uint64_t *computed) {
    if (filled) *filled = m->n_fills;
    if (computed) *computed = m->n_computed;
}

bool tr_grammar_matcher_is_accepting(const grammar_matcher *m) {
    if (m->cfg) return tr_cfgm_is_accepting(m);
    return !m->terminated && m->g->dfa.accept[m->state];
}

bool tr_grammar_matcher_can_continue(const grammar_matcher *m) {
    if (m->cfg) return tr_cfgm_can_continue(m);
    return !m->terminated && m->g->dfa.can_cont[m->state];
}

bool tr_grammar_matcher_is_terminated(const grammar_matcher *m) {
    return m->terminated;
}

tr_status tr_grammar_matcher_forced_bytes(const grammar_matcher *m, uint8_t *buf,
                                       size_t cap, size_t *len) {
    if (!len || (!buf && cap > 0)) return TR_ERR_INVALID_ARG;
    if (m->cfg) return tr_cfgm_forced_bytes(m, buf, cap, len);
    size_t n = 0;
    if (!m->terminated) {
        const gdfa *d = &m->g->dfa;
        uint32_t s = m->state;
        /* a chain of forced states ends: each is non-accepting with one
         * live byte, and a trimmed DFA cannot loop without acceptance */
        while (n < cap && d->forced[s] >= 0) {
            uint8_t b = (uint8_t)d->forced[s];
            buf[n++] = b;
            s = gdfa_step(d, s, b);
        }
    }
    *len = n;
    return TR_OK;
}
