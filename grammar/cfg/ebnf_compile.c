/* ebnf_compile.c — grammar text -> grammar: the kept rules as one NFA
 * whose rule references are call edges, handed to cfg_dfa.c, which makes
 * its DFA lazily.
 *
 * Layering: grammar/cfg; entry point tr_grammar_compile_ebnf (grammar.h) over
 * ebnf_parse.c, ebnf_analyze.c, ebnf_nfa.c and cfg_dfa.c. Runs on any thread;
 * the result grows only through its lazily made DFA states and its mask
 * memos, both shared and thread-safe.
 *
 * Compiling stops at the NFA: time to first mask is parsing, analysis and
 * the NFA (linear in the inlined grammar), plus the few DFA states the
 * first mask needs. A grammar without recursion is one rule and never
 * pushes, but runs on the same matcher: making all of its DFA upfront (a
 * regex grammar) cost milliseconds for schemas with bounded repetitions.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/cfg/cfg_internal.h"

/* A size budget ran out while rule `name` (with the rules inlined into
 * it) became automaton: the message says which, so that the author of a
 * grammar or schema (whose rules are named by their paths) sees the part
 * that grows. The time budget's message stays as it is. */
static void name_rule(gcc *cc, tr_status st, const char *name, uint32_t len) {
    tr_diag *d = cc->diag;
    if (st != TR_ERR_LIMIT || !d || tr_diag_is_time_budget(d)) return;
    size_t n = strlen(d->message);
    snprintf(d->message + n, sizeof d->message - n, " (while building the automaton of rule %.*s)",
             (int)TR_MIN(len, 200u), name);
}

static tr_status build(gcc *cc, const char *text, size_t len, const gdfa *const *ext,
                       uint32_t n_ext, uint32_t ws_bound, grammar **out, uint32_t *nfa_states) {
    gebnf e;
    gebnf_plan plan;
    gnfa nfa = {0};
    gcfg *cfg = NULL;
    /* each phase polls the clock now and then; between phases it is read
     * for sure, so no phase starts, and no grammar is returned, past the
     * time budget */
    tr_status st = tr_ebnf_parse(cc, text, len, ext, n_ext, &e);
    if (!st) st = tr_gcc_check_time(cc);
    if (!st) st = tr_ebnf_analyze(cc, &e, &plan);
    if (!st) st = tr_gcc_check_time(cc);
    uint32_t *starts = NULL, *name_lens = NULL;
    const char **names = NULL;
    if (!st) {
        starts = tr_gcc_alloc(cc, (size_t)plan.n_kept * sizeof *starts);
        name_lens = tr_gcc_alloc(cc, (size_t)plan.n_kept * sizeof *name_lens);
        names = tr_gcc_alloc(cc, (size_t)plan.n_kept * sizeof *names);
        if (!starts || !name_lens || !names) st = cc->err;
    }
    if (!st) {
        uint32_t at;
        st = tr_ebnf_nfa_build(cc, plan.bodies, plan.n_kept, plan.sym_of_rule, &nfa, starts, &at);
        if (st && at < plan.n_kept)
            name_rule(cc, st, e.rules[plan.kept[at]].name, e.rules[plan.kept[at]].name_len);
    }
    if (!st) st = tr_gcc_check_time(cc);
    *nfa_states = nfa.n_states;
    uint32_t n_calls = 0;
    for (uint32_t i = 0; !st && i < nfa.n_edges; i++) n_calls += nfa.edges[i].kind == GNFA_CALL;
    for (uint32_t i = 0; !st && i < plan.n_kept; i++) {
        names[i] = e.rules[plan.kept[i]].name;
        name_lens[i] = e.rules[plan.kept[i]].name_len;
    }
    if (!st) st = tr_cfg_new(cc, &nfa, starts, names, name_lens, plan.n_kept, ws_bound, &cfg);
    if (!st && (st = tr_gcc_check_time(cc))) tr_cfg_free(cfg);
    tr_nfa_free(cc, &nfa);
    tr_ebnf_free(&e);
    if (st) return st;
    grammar *g = calloc(1, sizeof *g);
    if (!g || pthread_mutex_init(&g->lock, NULL) != 0) {
        free(g);
        tr_cfg_free(cfg);
        return tr_gcc_fail(cc, TR_ERR_NOMEM, 0, "out of memory");
    }
    atomic_init(&g->refs, 1);
    g->kind = GRAMMAR_KIND_CFG;
    g->cfg = cfg;
    g->stats.rules = e.n_rules;
    g->stats.rules_kept = cfg->n_kept;
    g->stats.call_edges = n_calls;
    *out = g;
    return TR_OK;
}

tr_status tr_grammar_compile_ebnf(const char *text, size_t len,
                                  const grammar_limits *limits, grammar **out,
                                  tr_diag *diag) {
    return tr_grammar_compile_ebnf_ext(text, len, NULL, 0, 0, limits, out, diag);
}

tr_status tr_grammar_compile_ebnf_ext(const char *text, size_t len, const gdfa *const *ext,
                                      uint32_t n_ext, uint32_t ws_bound,
                                      const grammar_limits *limits, grammar **out,
                                      tr_diag *diag) {
    if (diag) memset(diag, 0, sizeof *diag);
    if (!out || (!text && len > 0))
        return tr_diag_set(diag, TR_ERR_INVALID_ARG, 0, "NULL argument");
    uint64_t t0 = tr_now_ns();
    gcc cc;
    tr_gcc_init(&cc, limits, diag);
    if (cc.lim.max_lazy_dfa_states > (1u << 23)) cc.lim.max_lazy_dfa_states = 1u << 23;
    if (cc.lim.max_nfa_states > (1u << 30)) cc.lim.max_nfa_states = 1u << 30;
    if (cc.lim.max_stacks == 0) cc.lim.max_stacks = 1;
    if (len > cc.lim.max_grammar_bytes) {
        tr_gcc_deinit(&cc);
        return tr_diag_set(diag, TR_ERR_LIMIT, 0,
                           "grammar text longer than max_grammar_bytes = %zu",
                           cc.lim.max_grammar_bytes);
    }
    grammar *g = NULL;
    uint32_t nfa_states = 0;
    tr_status st = build(&cc, text ? text : "", len, ext, n_ext, ws_bound, &g, &nfa_states);
    tr_gcc_deinit(&cc);
    if (st) return st;
    g->mask_budget = cc.lim.mask_cache_bytes;
    g->stats.nfa_states = nfa_states;
    g->stats.dfa_states_raw = g->stats.dfa_states = tr_cfg_n_states(g->cfg);
    g->stats.byte_classes = g->cfg->n_cls;
    g->stats.bytes = sizeof *g + sizeof *g->cfg +
                     (size_t)g->cfg->c_off[g->cfg->n_nfa] * sizeof(gl_edge) +
                     (size_t)g->cfg->n_nfa * 12;
    g->stats.compile_ns = tr_now_ns() - t0;
    *out = g;
    return TR_OK;
}
