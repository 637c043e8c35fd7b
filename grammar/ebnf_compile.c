/* ebnf_compile.c — grammar text -> grammar: the kept rules as one DFA with
 * call edges, plus the per-state tables the matcher reads.
 *
 * Layering: grammar/ entry point tr_grammar_compile_ebnf (grammar.h) over
 * ebnf_parse.c, ebnf_analyze.c, nfa.c and dfa.c. Runs on any thread;
 * the result is immutable apart from its mask memos (cfg_mask.c).
 *
 * All kept rules go through one subset construction (one start state per
 * rule, one column per call symbol) and one minimization, so equal tails
 * of different rules share states, and a grammar whose recursion was all
 * inlined away comes out as a plain DFA: such a grammar is returned as a
 * GRAMMAR_KIND_REGEX grammar and runs on the regex matcher, at regex
 * speed (most JSON schemas without $ref cycles end up there).
 */
#include <stdlib.h>
#include <string.h>

#include "grammar/cfg_internal.h"

void tr_cfg_free(gcfg *c) {
    if (!c) return;
    if (c->rule_name)
        for (uint32_t i = 0; i < c->n_kept; i++) free(c->rule_name[i]);
    free(c->rule_name);
    free(c->rule_start);
    free(c->flags);
    free(c->only_byte);
    free(c->tail);
    free(c);
}

/* The per-state tables of the context-free part; calls rewritten from
 * symbols to the callee's start state. */
static gcfg *cfg_tables(gdfa *d, const gebnf *e, const gebnf_plan *plan,
                        const uint32_t *starts, uint32_t max_stacks) {
    gcfg *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    uint32_t ns = d->n_states, nk = plan->n_kept;
    c->n_kept = nk;
    c->max_stacks = max_stacks;
    c->rule_start = malloc((size_t)nk * sizeof *c->rule_start);
    c->rule_name = calloc(nk, sizeof *c->rule_name);
    c->flags = calloc(ns, 1);
    c->only_byte = malloc((size_t)ns * sizeof *c->only_byte);
    c->tail = calloc(ns, 1);
    if (!c->rule_start || !c->rule_name || !c->flags || !c->only_byte || !c->tail) {
        tr_cfg_free(c);
        return NULL;
    }
    for (uint32_t i = 0; i < nk; i++) {
        const gebnf_rule *r = &e->rules[plan->kept[i]];
        c->rule_start[i] = starts[i];
        c->rule_name[i] = malloc(r->name_len + 1);
        if (!c->rule_name[i]) {
            tr_cfg_free(c);
            return NULL;
        }
        memcpy(c->rule_name[i], r->name, r->name_len);
        c->rule_name[i][r->name_len] = 0;
    }
    for (uint32_t j = 0; j < d->call_off[ns]; j++)
        d->calls[j][0] = starts[d->calls[j][0]];
    for (uint32_t s = 0; s < ns; s++) {
        int only = -2;
        for (int b = 0; b < 256; b++) {
            if (gdfa_step(d, s, (uint8_t)b) == GDFA_DEAD) continue;
            only = only == -2 ? b : -1;
            if (only == -1) break;
        }
        c->only_byte[s] = (int16_t)only;
        bool calls = d->call_off[s + 1] > d->call_off[s];
        c->flags[s] = (uint8_t)((calls ? GCFG_CALLS : 0) |
                                (d->accept[s] ? GCFG_ACCEPT : 0) |
                                (only != -2 ? GCFG_BYTES : 0));
        c->tail[s] = d->accept[s] && only == -2 && !calls;
    }
    if (tr_cfg_follow(d, c)) {
        tr_cfg_free(c);
        return NULL;
    }
    return c;
}

static tr_status build(gcc *cc, const char *text, size_t len, grammar **out,
                       uint32_t *nfa_states) {
    gebnf e;
    gebnf_plan plan;
    gnfa nfa = {0};
    gdfa dfa = {0};
    tr_status st = tr_ebnf_parse(cc, text, len, &e);
    if (!st) st = tr_ebnf_analyze(cc, &e, &plan);
    uint32_t *starts = NULL;
    if (!st) {
        starts = tr_gcc_alloc(cc, (size_t)plan.n_kept * 2 * sizeof *starts);
        if (!starts) st = cc->err;
    }
    if (!st)
        st = tr_nfa_build_rules(cc, (const gre_node *const *)plan.bodies,
                                plan.n_kept, plan.sym_of_rule, &nfa, starts);
    *nfa_states = nfa.n_states;
    if (!st) {
        uint32_t *dstarts = starts + plan.n_kept;
        gdfa_build_opts o = {.starts = starts, .n_starts = plan.n_kept,
                             .n_syms = plan.n_kept, .out_starts = dstarts};
        st = tr_dfa_build_ex(cc, &nfa, &o, &dfa);
        starts = dstarts;
    }
    tr_nfa_free(cc, &nfa);
    if (!st && dfa.start == GDFA_DEAD) /* analysis keeps root productive */
        st = tr_gcc_fail(cc, TR_ERR_INTERNAL, 0, "root compiled to nothing");
    gcfg *cfg = NULL;
    if (!st && dfa.call_off && dfa.call_off[dfa.n_states] > 0) {
        cfg = cfg_tables(&dfa, &e, &plan, starts, cc->lim.max_stacks);
        if (!cfg) st = tr_gcc_fail(cc, TR_ERR_NOMEM, 0, "out of memory while compiling");
    } else if (!st) {
        /* no call left: a plain DFA, run as a regex */
        free(dfa.call_off), free(dfa.calls);
        dfa.call_off = NULL, dfa.calls = NULL, dfa.n_syms = 0;
    }
    tr_ebnf_free(&e);
    if (st) {
        tr_dfa_free(&dfa);
        return st;
    }
    grammar *g = calloc(1, sizeof *g);
    if (!g || pthread_mutex_init(&g->lock, NULL) != 0) {
        free(g);
        tr_cfg_free(cfg);
        tr_dfa_free(&dfa);
        return tr_gcc_fail(cc, TR_ERR_NOMEM, 0, "out of memory");
    }
    atomic_init(&g->refs, 1);
    g->kind = cfg ? GRAMMAR_KIND_CFG : GRAMMAR_KIND_REGEX;
    g->dfa = dfa;
    g->cfg = cfg;
    g->stats.rules = e.n_rules;
    g->stats.rules_kept = cfg ? cfg->n_kept : 1;
    g->stats.call_edges = dfa.call_off ? dfa.call_off[dfa.n_states] : 0;
    *out = g;
    return TR_OK;
}

tr_status tr_grammar_compile_ebnf(const char *text, size_t len,
                                  const grammar_limits *limits, grammar **out,
                                  tr_diag *diag) {
    if (diag) memset(diag, 0, sizeof *diag);
    if (!out || (!text && len > 0))
        return tr_diag_set(diag, TR_ERR_INVALID_ARG, 0, "NULL argument");
    uint64_t t0 = tr_now_ns();
    gcc cc;
    tr_gcc_init(&cc, limits, diag);
    if (cc.lim.max_dfa_states > (1u << 23)) cc.lim.max_dfa_states = 1u << 23;
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
    tr_status st = build(&cc, text ? text : "", len, &g, &nfa_states);
    tr_gcc_deinit(&cc);
    if (st) return st;
    g->mask_budget = cc.lim.mask_cache_bytes;
    g->stats.nfa_states = nfa_states;
    g->stats.dfa_states_raw = g->dfa.raw_states;
    g->stats.dfa_states = g->dfa.n_states;
    g->stats.byte_classes = g->dfa.n_classes;
    g->stats.bytes = sizeof *g + tr_dfa_bytes(&g->dfa) +
                     (g->cfg ? (size_t)g->dfa.n_states * 4 : 0);
    g->stats.compile_ns = tr_now_ns() - t0;
    *out = g;
    return TR_OK;
}
