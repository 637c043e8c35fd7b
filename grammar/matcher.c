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
 *
 * Grammars compiled from a JSON Schema also keep, on either path, the
 * keys of the open objects (json_keys_internal.h): masks lose, and
 * accept calls refuse, what would repeat a key; forced bytes stop before
 * it. Its history moves with the automaton's: one push per successful
 * accept call, rolled back together.
 */
#include <stdlib.h>
#include <string.h>

#include "grammar/cfg/cfg.h"
#include "grammar/json_keys_internal.h"

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
    if (g->unique_keys &&
        !(m->keys = tr_gkeys_new(v, max_rollback, g->keys_after, g->keys_after_len,
                                 g->unique_paths, g->unique_paths_len))) {
        tr_grammar_matcher_free(m);
        return TR_ERR_NOMEM;
    }
    tr_grammar_matcher_reset(m);
    *out = m;
    return TR_OK;
}

void tr_grammar_matcher_free(grammar_matcher *m) {
    if (!m) return;
    tr_gkeys_free(m->keys);
    tr_cfgm_free(m);
    tr_grammar_free(m->g);
    tr_grammar_vocab_free(m->v);
    free(m->hist_state);
    free(m->hist_term);
    free(m->stack);
    free(m->scratch);
    free(m->ahead);
    free(m);
}

void tr_grammar_matcher_reset(grammar_matcher *m) {
    if (m->keys) tr_gkeys_reset(m->keys);
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

static const uint8_t *token_bytes(const grammar_matcher *m, int32_t id, size_t *len);

static tr_status fill_mask_here(grammar_matcher *m, uint64_t *mask) {
    if (m->terminated) {
        memset(mask, 0, m->v->n_words * sizeof *mask);
        return TR_OK;
    }
    if (m->cfg) {
        tr_status st = tr_cfgm_fill_mask(m, mask);
        if (st == TR_OK && m->keys) tr_gkeys_filter_mask(m->keys, mask);
        return st;
    }
    if (!tr_mask_cache_fill(m->cache, &m->g->dfa, m->state, m->v, m->stack,
                          m->scratch, mask))
        m->n_computed++;
    if (m->keys) tr_gkeys_filter_mask(m->keys, mask);
    return TR_OK;
}

/* Whether token id, taken now, leads where the grammar allows only
 * blanks and tokens that close a repeat. The grammar alone takes it (the
 * tracker set aside: its rollback replays the text); the tracker checks
 * each token after it from where it stands, with id's bytes in front. */
static bool leads_to_repeat_only(grammar_matcher *m, int32_t id, const uint8_t *b, size_t len) {
    const grammar_vocab *v = m->v;
    struct gkeys *keys = m->keys;
    const uint64_t *blank = tr_gkeys_blank_tokens(keys);
    m->keys = NULL;
    bool dead = false;
    if (tr_grammar_matcher_accept_token(m, id) == TR_OK) {
        dead = fill_mask_here(m, m->ahead) == TR_OK;
        (void)tr_grammar_matcher_rollback(m, 1); /* one back: always remembered */
    }
    m->keys = keys;
    for (uint32_t w = 0; dead && w < v->n_words; w++)
        for (uint64_t bits = m->ahead[w] & ~blank[w]; dead && bits; bits &= bits - 1) {
            int32_t u = (int32_t)(w * 64 + (uint32_t)__builtin_ctzll(bits));
            size_t ul;
            const uint8_t *ub = token_bytes(m, u, &ul);
            dead = (v->flags[u] & GVOCAB_EOG) ? false : tr_gkeys_dup_after(keys, b, len, ub, ul);
        }
    return dead;
}

/* One token of lookahead inside an object or array item of a unique
 * array (json_keys_internal.h): a token after which closing the item
 * would repeat an earlier one, and after which the grammar allows
 * nothing but blanks and that close (all its members written), leads to
 * an empty mask: it is cleared. Only tokens that can leave the item able
 * to close at once are looked at (inside a string, those with a quote),
 * so the cost falls where a repeat is near. A dead end further ahead (a
 * last member with one value only) stays possible. */
static void unique_lookahead(grammar_matcher *m, uint64_t *mask) {
    const uint64_t *look = m->keys ? tr_gkeys_lookahead_tokens(m->keys) : NULL;
    if (!look) return;
    const grammar_vocab *v = m->v;
    if (!m->ahead && !(m->ahead = malloc(v->n_words * sizeof *m->ahead)))
        return; /* fewer checks, never a wrong refusal */
    for (uint32_t w = 0; w < v->n_words; w++)
        for (uint64_t bits = mask[w] & look[w]; bits; bits &= bits - 1) {
            int32_t id = (int32_t)(w * 64 + (uint32_t)__builtin_ctzll(bits));
            size_t len;
            const uint8_t *b = token_bytes(m, id, &len);
            if (tr_gkeys_close_repeats(m->keys, b, len) && leads_to_repeat_only(m, id, b, len))
                mask[w] &= ~(UINT64_C(1) << (id & 63));
        }
}

tr_status tr_grammar_matcher_fill_mask(grammar_matcher *m, uint64_t *mask,
                                    size_t n_words) {
    if (!mask || n_words != m->v->n_words) return TR_ERR_INVALID_ARG;
    m->n_fills++;
    tr_status st = fill_mask_here(m, mask);
    if (st == TR_OK) unique_lookahead(m, mask);
    return st;
}

static const uint8_t *token_bytes(const grammar_matcher *m, int32_t id, size_t *len) {
    *len = (size_t)(m->v->offs[id + 1] - m->v->offs[id]);
    return m->v->bytes + m->v->offs[id];
}

/* Whether token id's bytes would repeat a key (never, without a tracker). */
static bool token_repeats_key(const grammar_matcher *m, int32_t id) {
    return m->keys && tr_gkeys_token_would_dup(m->keys, id);
}

/* After a successful accept call of b[0..n): the tracker follows. Out of
 * memory there turns the tracker off (json_keys_internal.h), never the
 * call into a failure. */
static void keys_follow(grammar_matcher *m, const uint8_t *b, size_t n) {
    if (m->keys) (void)tr_gkeys_push(m->keys, b, n);
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
    if (!(m->v->flags[id] & GVOCAB_EOG) && token_repeats_key(m, id)) return false;
    if (m->cfg) return tr_cfgm_token_allowed(m, id);
    return token_target(m, id) != GDFA_DEAD;
}

tr_status tr_grammar_matcher_accept_token(grammar_matcher *m, int32_t id) {
    if (id < 0 || id >= m->v->n_vocab) return TR_ERR_INVALID_ARG;
    const grammar_vocab *v = m->v;
    uint8_t f = v->flags[id];
    size_t len;
    const uint8_t *b = token_bytes(m, id, &len);
    bool eog = f & GVOCAB_EOG;
    /* an end-of-generation token adds no text: the tracker sees nothing */
    size_t text_len = eog ? 0 : len;
    if (!eog && token_repeats_key(m, id)) return TR_ERR_STATE;
    if (m->cfg) {
        if (!eog && ((f & GVOCAB_SPECIAL) || len == 0)) return TR_ERR_STATE;
        tr_status st = tr_cfgm_accept(m, b, len, eog);
        if (st == TR_OK) keys_follow(m, b, text_len);
        return st;
    }
    uint32_t t = token_target(m, id);
    if (t == GDFA_DEAD) return TR_ERR_STATE;
    push_history(m);
    if (eog) m->terminated = true;
    m->state = t;
    keys_follow(m, b, text_len);
    return TR_OK;
}

tr_status tr_grammar_matcher_accept_bytes(grammar_matcher *m, const void *bytes,
                                       size_t len) {
    if (!bytes && len > 0) return TR_ERR_INVALID_ARG;
    if (m->terminated) return TR_ERR_STATE;
    if (m->keys && tr_gkeys_would_dup(m->keys, bytes, len)) return TR_ERR_STATE;
    if (m->cfg) {
        tr_status st = tr_cfgm_accept(m, bytes, len, false);
        if (st == TR_OK) keys_follow(m, bytes, len);
        return st;
    }
    uint32_t t = tr_dfa_run(&m->g->dfa, m->state, bytes, len);
    if (t == GDFA_DEAD) return TR_ERR_STATE;
    push_history(m);
    m->state = t;
    keys_follow(m, bytes, len);
    return TR_OK;
}

/* The tracker undoes what the automaton undid (it remembers as many
 * calls: the same max_rollback, one push per successful call). */
static tr_status keys_rollback(grammar_matcher *m, tr_status st, uint32_t n) {
    if (st == TR_OK && m->keys && !tr_gkeys_rollback(m->keys, n)) tr_gkeys_reset(m->keys);
    return st;
}

tr_status tr_grammar_matcher_rollback(grammar_matcher *m, uint32_t n) {
    if (m->cfg) return keys_rollback(m, tr_cfgm_rollback(m, n), n);
    if (n > m->hist_len) return TR_ERR_STATE;
    if (n == 0) return TR_OK;
    /* the entry pushed by the earliest undone call holds the state to
     * return to */
    uint32_t idx = (m->hist_head + m->hist_cap - n) % m->hist_cap;
    m->state = m->hist_state[idx];
    m->terminated = m->hist_term[idx];
    m->hist_head = idx;
    m->hist_len -= n;
    return keys_rollback(m, TR_OK, n);
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

/* Forced bytes stop before a key they would repeat. */
static tr_status keys_clip(const grammar_matcher *m, const uint8_t *buf, size_t *len) {
    if (m->keys && *len) *len = tr_gkeys_clean_prefix(m->keys, buf, *len);
    return TR_OK;
}

tr_status tr_grammar_matcher_forced_bytes(const grammar_matcher *m, uint8_t *buf,
                                       size_t cap, size_t *len) {
    if (!len || (!buf && cap > 0)) return TR_ERR_INVALID_ARG;
    if (m->cfg) {
        tr_status st = tr_cfgm_forced_bytes(m, buf, cap, len);
        return st == TR_OK ? keys_clip(m, buf, len) : st;
    }
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
    return keys_clip(m, buf, len);
}
