/* grammar.c — compiling a regex into a grammar, and the grammar object's
 * life and queries.
 *
 * Layering: the façade of grammar/ (grammar.h entry points) over
 * grammar/regex (parse, NFA, DFA), grammar/mask (the memos it frees) and
 * grammar/cfg (a GRAMMAR_KIND_CFG grammar's automaton; the object itself
 * is defined in cfg.h). Compiling runs on any thread (the server uses the
 * libuv pool); the result is immutable apart from its mask memos, which
 * are created under `lock` and filled lock-free (grammar/mask/mask.c).
 */
#include <stdlib.h>
#include <string.h>

#include "grammar/cfg/cfg.h"

static void grammar_destroy(grammar *g) {
    gmask_cache *c = g->caches;
    while (c) {
        gmask_cache *n = c->next;
        tr_mask_cache_free(c);
        c = n;
    }
    tr_cfg_memo_free(g->cfg_memos);
    tr_cfg_free(g->cfg);
    pthread_mutex_destroy(&g->lock);
    tr_dfa_free(&g->dfa);
    free(g->keys_after);
    free(g->unique_paths);
    free(g);
}

tr_status tr_grammar_compile_regex(const char *pattern, size_t len,
                                const grammar_limits *limits, grammar **out,
                                tr_diag *diag) {
    if (diag) memset(diag, 0, sizeof *diag);
    if (!out || (!pattern && len > 0))
        return tr_diag_set(diag, TR_ERR_INVALID_ARG, 0, "NULL argument");
    uint64_t t0 = tr_now_ns();
    gcc cc;
    tr_gcc_init(&cc, limits, diag);
    /* indices in the DFA builder are 32-bit: keep states x 256 classes
     * far below 2^32 whatever the caller's limits say */
    if (cc.lim.max_dfa_states > (1u << 23)) cc.lim.max_dfa_states = 1u << 23;
    if (cc.lim.max_nfa_states > (1u << 30)) cc.lim.max_nfa_states = 1u << 30;
    gre_node *ast;
    gnfa nfa = {0};
    gdfa dfa = {0};
    tr_status st = tr_regex_parse(&cc, pattern ? pattern : "", len, &ast);
    if (!st) st = tr_nfa_build(&cc, ast, &nfa);
    uint32_t nfa_states = nfa.n_states;
    if (!st) st = tr_dfa_build(&cc, &nfa, &dfa);
    tr_nfa_free(&cc, &nfa);
    tr_gcc_deinit(&cc);
    if (st) return st;
    if (dfa.start == GDFA_DEAD) {
        tr_dfa_free(&dfa);
        return tr_diag_set(diag, TR_ERR_FORMAT, 0,
                           "the pattern matches no string at all");
    }
    grammar *g = calloc(1, sizeof *g);
    if (!g || pthread_mutex_init(&g->lock, NULL) != 0) {
        free(g);
        tr_dfa_free(&dfa);
        return tr_diag_set(diag, TR_ERR_NOMEM, 0, "out of memory");
    }
    atomic_init(&g->refs, 1);
    g->kind = GRAMMAR_KIND_REGEX;
    g->dfa = dfa;
    g->mask_budget = cc.lim.mask_cache_bytes;
    g->stats.nfa_states = nfa_states;
    g->stats.dfa_states_raw = dfa.raw_states;
    g->stats.dfa_states = dfa.n_states;
    g->stats.byte_classes = dfa.n_classes;
    g->stats.bytes = sizeof *g + tr_dfa_bytes(&dfa);
    g->stats.compile_ns = tr_now_ns() - t0;
    *out = g;
    return TR_OK;
}

grammar *tr_grammar_ref(grammar *g) {
    if (g) atomic_fetch_add_explicit(&g->refs, 1, memory_order_relaxed);
    return g;
}

void tr_grammar_free(grammar *g) {
    if (!g) return;
    if (atomic_fetch_sub_explicit(&g->refs, 1, memory_order_acq_rel) == 1)
        grammar_destroy(g);
}

bool tr_grammar_matches(const grammar *g, const void *bytes, size_t len) {
    if (g->cfg) return tr_cfg_matches(g, bytes, len);
    uint32_t s = tr_dfa_run(&g->dfa, g->dfa.start, bytes, len);
    return g->dfa.accept[s] != 0;
}

void tr_grammar_get_stats(const grammar *g, grammar_stats *st) { *st = g->stats; }

void tr_grammar_get_memo_stats(grammar *g, grammar_memo_stats *st) {
    st->bytes = st->masks = 0;
    pthread_mutex_lock(&g->lock);
    for (const gmask_cache *c = g->caches; c; c = c->next) {
        /* used counts stored masks only (a reservation that loses its
         * race or overruns the budget is given back at once) */
        uint64_t used = atomic_load_explicit(&c->used, memory_order_relaxed);
        st->bytes += sizeof *c + (uint64_t)c->n_states * sizeof *c->slots + used;
        st->masks += used / (c->n_words * sizeof(uint64_t));
    }
    tr_cfg_memo_stats(g->cfg_memos, &st->bytes, &st->masks);
    pthread_mutex_unlock(&g->lock);
    if (g->cfg) st->bytes += tr_cfg_bytes(g->cfg);
}

bool tr_grammar_exhausted(const grammar *g) { return g->cfg && tr_cfg_failed(g->cfg) != TR_OK; }

tr_status tr_grammar_check(const grammar *g) {
    if (!g) return TR_ERR_INTERNAL;
    if (g->kind == GRAMMAR_KIND_CFG) return g->cfg ? tr_cfg_check(g->cfg) : TR_ERR_INTERNAL;
    if (g->kind != GRAMMAR_KIND_REGEX || g->cfg) return TR_ERR_INTERNAL;
    tr_status st = tr_dfa_check(&g->dfa);
    if (st) return st;
    return g->dfa.start == GDFA_DEAD ? TR_ERR_INTERNAL : TR_OK;
}

void tr_grammar_dump(const grammar *g, FILE *f) {
    if (g->cfg)
        tr_cfg_dump(g->cfg, f);
    else
        tr_dfa_dump(&g->dfa, f);
}
