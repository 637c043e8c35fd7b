/* stop_regex.c — stop patterns (the contract: stop_regex_internal.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "base/util.h"
#include "runtime/engine/stop_regex_internal.h"
#include "trellis.h"

struct tr_stop_regex_set {
    grammar_vocab *v;
    grammar **g; /* [n] */
    int32_t n;
};

typedef struct run {
    uint64_t start; /* absolute output offset of its first byte */
    grammar_matcher *m;
} run;

typedef struct pattern_scan {
    grammar *g;
    grammar_vocab *v;
    run *runs; /* [n_runs], by start ascending */
    int32_t n_runs, cap_runs;
    grammar_matcher **pool; /* idle matchers */
    int32_t n_pool, cap_pool;
} pattern_scan;

struct tr_stop_scan {
    uint64_t fed; /* output bytes fed so far */
    int32_t n;
    pattern_scan p[];
};

/* Budgets for a stop pattern: it is compiled on the submitting thread,
 * so tighter than a constraint's. */
static void stop_limits(grammar_limits *l) {
    tr_grammar_limits_default(l);
    l->max_pattern_bytes = TRELLIS_MAX_STOP_LEN;
    l->max_dfa_states = 10000;
    l->max_compile_us = 100000;
    l->mask_cache_bytes = 0;
}

int tr_stop_regex_set_new(grammar_vocab *v, const char *const *patterns,
                          int32_t n, tr_stop_regex_set **out, char *err,
                          size_t cap) {
    if (!v)
        return tr_errf(err, cap, TR_ERR_UNSUPPORTED,
                       "stop_regex needs the engine's grammar vocabulary, which "
                       "failed to load");
    tr_stop_regex_set *x = calloc(1, sizeof *x);
    if (x) x->g = calloc((size_t)n, sizeof *x->g);
    if (!x || !x->g) {
        free(x);
        return tr_errf(err, cap, TR_ERR_NOMEM, "out of memory");
    }
    x->v = tr_grammar_vocab_ref(v);
    grammar_limits lim;
    stop_limits(&lim);
    for (int32_t k = 0; k < n; k++) {
        tr_diag d = {0};
        const char *p = patterns[k];
        tr_status s = tr_grammar_compile_regex(p, strlen(p), &lim, &x->g[k], &d);
        x->n = k + (s == TR_OK);
        if (s != TR_OK) {
            tr_stop_regex_set_free(x);
            return tr_errf(err, cap, s, "stop_regex %d: %s", k, d.message);
        }
        if (tr_grammar_matches(x->g[k], "", 0)) {
            tr_stop_regex_set_free(x);
            return tr_errf(err, cap, TR_ERR_INVALID_ARG,
                           "stop_regex %d matches the empty string, so it would "
                           "stop before any text",
                           k);
        }
    }
    *out = x;
    return TR_OK;
}

void tr_stop_regex_set_free(tr_stop_regex_set *x) {
    if (!x) return;
    for (int32_t k = 0; k < x->n; k++) tr_grammar_free(x->g[k]);
    free(x->g);
    tr_grammar_vocab_free(x->v);
    free(x);
}

int32_t tr_stop_regex_set_count(const tr_stop_regex_set *x) { return x ? x->n : 0; }

tr_stop_scan *tr_stop_scan_new(const tr_stop_regex_set *x) {
    tr_stop_scan *sc = calloc(1, sizeof *sc + (size_t)x->n * sizeof(pattern_scan));
    if (!sc) return NULL;
    sc->n = x->n;
    for (int32_t k = 0; k < x->n; k++) {
        sc->p[k].g = x->g[k];
        sc->p[k].v = x->v;
    }
    return sc;
}

void tr_stop_scan_free(tr_stop_scan *sc) {
    if (!sc) return;
    for (int32_t k = 0; k < sc->n; k++) {
        pattern_scan *p = &sc->p[k];
        for (int32_t i = 0; i < p->n_runs; i++) tr_grammar_matcher_free(p->runs[i].m);
        for (int32_t i = 0; i < p->n_pool; i++) tr_grammar_matcher_free(p->pool[i]);
        free(p->runs);
        free(p->pool);
    }
    free(sc);
}

static void release(pattern_scan *p, grammar_matcher *m) {
    if (p->n_pool == p->cap_pool) {
        int32_t c = p->cap_pool ? 2 * p->cap_pool : 8;
        grammar_matcher **q = realloc(p->pool, (size_t)c * sizeof *q);
        if (!q) {
            tr_grammar_matcher_free(m);
            return;
        }
        p->pool = q;
        p->cap_pool = c;
    }
    p->pool[p->n_pool++] = m;
}

/* A matcher at the pattern's start, from the pool or new (NULL: no memory,
 * and the run is not started: a match from here can be missed). */
static grammar_matcher *acquire(pattern_scan *p) {
    if (p->n_pool > 0) {
        grammar_matcher *m = p->pool[--p->n_pool];
        tr_grammar_matcher_reset(m);
        return m;
    }
    grammar_matcher *m = NULL;
    if (tr_grammar_matcher_new(p->g, p->v, 1, &m) != TR_OK) return NULL;
    return m;
}

/* Starts a run at absolute offset `at` if its first byte can begin a
 * match (the byte is fed here). */
static void start_run(pattern_scan *p, uint64_t at, uint8_t b) {
    grammar_matcher *m = acquire(p);
    if (!m) return;
    if (tr_grammar_matcher_accept_bytes(m, &b, 1) != TR_OK) {
        release(p, m);
        return;
    }
    if (p->n_runs == TR_STOP_REGEX_MAX_RUNS) {
        release(p, p->runs[0].m);
        memmove(p->runs, p->runs + 1, (size_t)(p->n_runs - 1) * sizeof *p->runs);
        p->n_runs--;
    }
    if (p->n_runs == p->cap_runs) {
        int32_t c = p->cap_runs ? 2 * p->cap_runs : 8;
        run *r = realloc(p->runs, (size_t)c * sizeof *r);
        if (!r) {
            release(p, m);
            return;
        }
        p->runs = r;
        p->cap_runs = c;
    }
    p->runs[p->n_runs++] = (run){at, m};
}

/* Feeds byte b at absolute offset `at` to p's live runs (dropping those it
 * ends), then starts a run there. Returns the start of the earliest run
 * that is a match after b, or UINT64_MAX. */
static uint64_t step_pattern(pattern_scan *p, uint64_t at, uint8_t b) {
    int32_t kept = 0;
    for (int32_t i = 0; i < p->n_runs; i++) {
        run r = p->runs[i];
        if (tr_grammar_matcher_accept_bytes(r.m, &b, 1) == TR_OK)
            p->runs[kept++] = r;
        else
            release(p, r.m);
    }
    p->n_runs = kept;
    if ((b & 0xC0) != 0x80) start_run(p, at, b); /* a character boundary */
    for (int32_t i = 0; i < p->n_runs; i++)
        if (tr_grammar_matcher_is_accepting(p->runs[i].m)) return p->runs[i].start;
    return UINT64_MAX;
}

bool tr_stop_scan_feed(tr_stop_scan *sc, const char *held, size_t held_len,
                       size_t fresh, bool may_stop, tr_stop_hit *hit,
                       size_t *hold_from) {
    uint64_t base = sc->fed - (held_len - fresh); /* offset of held[0] */
    bool found = false;
    for (size_t j = held_len - fresh; j < held_len && !found; j++) {
        uint64_t at = base + j;
        uint64_t best = UINT64_MAX;
        int32_t which = -1;
        for (int32_t k = 0; k < sc->n; k++) {
            uint64_t st = step_pattern(&sc->p[k], at, (uint8_t)held[j]);
            if (st < best) {
                best = st;
                which = k;
            }
        }
        sc->fed++;
        if (which >= 0 && may_stop) {
            hit->pattern = which;
            hit->start = best < base ? 0 : (size_t)(best - base);
            hit->end = j + 1;
            found = true;
        }
    }
    uint64_t end = sc->fed;
    uint64_t from = end > TR_STOP_REGEX_HOLD ? end - TR_STOP_REGEX_HOLD : 0;
    uint64_t earliest = end;
    for (int32_t k = 0; k < sc->n; k++)
        if (sc->p[k].n_runs > 0) earliest = TR_MIN(earliest, sc->p[k].runs[0].start);
    from = TR_MAX(from, earliest);
    *hold_from = from <= base ? 0 : (size_t)TR_MIN(from - base, (uint64_t)held_len);
    return found;
}
