/* cfg_matcher.c — the matcher API over a set of configurations, for
 * grammars with recursion (GRAMMAR_KIND_CFG).
 *
 * Layering: grammar/cfg (cfg_internal.h; the entry points are cfg.h's):
 * grammar/matcher.c dispatches here for CFG grammars. One thread at a time per matcher (the API's rule); the
 * const entry points (token_allowed, forced_bytes, is_accepting) use the
 * matcher's scratch and so must not run concurrently either.
 *
 * Every operation first runs on scratch frames (nothing of the matcher
 * changes), and an accept call only then commits: the surviving
 * configurations' stacks are interned as persistent frames, and the
 * previous set goes to the rollback ring. So a rejected call, an
 * out-of-memory or a stack budget error leaves the matcher as it was.
 */
#include <stdlib.h>
#include <string.h>

#include "grammar/cfg/cfg_internal.h"

/* ---- persistent frames ---- */

static bool fh_rebuild(gcfg_matcher *c, uint32_t cap) {
    uint32_t *t = calloc(cap, sizeof *t);
    if (!t) return false;
    for (uint32_t f = 1; f < c->per.n; f++) {
        uint32_t j = gf_slot(c->per.ret[f], c->per.parent[f], cap);
        while (t[j]) j = (j + 1) & (cap - 1);
        t[j] = f;
    }
    free(c->fh);
    c->fh = t;
    c->fh_cap = cap;
    c->x.per_fh = t; /* scratch pushes look here first */
    c->x.per_fh_cap = cap;
    return true;
}

/* The persistent frame (ret, parent), made if new; UINT32_MAX on OOM. */
static uint32_t intern(gcfg_matcher *c, uint32_t ret, uint32_t parent) {
    uint32_t j = gf_slot(ret, parent, c->fh_cap);
    for (uint32_t f; (f = c->fh[j]); j = (j + 1) & (c->fh_cap - 1))
        if (f < c->per.n && c->per.ret[f] == ret && c->per.parent[f] == parent)
            return f;
    gfstore *p = &c->per;
    if (p->n == p->cap) {
        uint32_t nc = p->cap * 2;
        if (nc >= GF_SCR) return UINT32_MAX;
        uint32_t *r = realloc(p->ret, (size_t)nc * sizeof *r);
        if (r) p->ret = r;
        uint32_t *q = r ? realloc(p->parent, (size_t)nc * sizeof *q) : NULL;
        if (!q) return UINT32_MAX;
        p->parent = q;
        p->cap = nc;
    }
    if ((p->n + 1) * 2 > c->fh_cap) {
        if (!fh_rebuild(c, c->fh_cap * 2)) return UINT32_MAX;
        j = gf_slot(ret, parent, c->fh_cap);
        while (c->fh[j]) j = (j + 1) & (c->fh_cap - 1);
    }
    p->ret[p->n] = ret;
    p->parent[p->n] = parent;
    c->fh[j] = p->n;
    return p->n++;
}

/* Scratch frame f (and its scratch ancestors) as a persistent frame. */
static uint32_t persist(gcfg_matcher *c, uint32_t f) {
    c->chain.n = 0;
    while (f & GF_SCR) {
        if (!tr_cset_reserve(&c->chain, c->chain.n + 1)) return UINT32_MAX;
        c->chain.c[c->chain.n++].state = f;
        f = c->x.scr.parent[f & ~GF_SCR];
    }
    for (uint32_t i = c->chain.n; i-- > 0 && f != UINT32_MAX;)
        f = intern(c, c->x.scr.ret[c->chain.c[i].state & ~GF_SCR], f);
    return f;
}

/* Mark-compact of the persistent frames reachable from cur and history. */
static void collect(grammar_matcher *m) {
    gcfg_matcher *c = m->cfg;
    uint32_t n = c->per.n;
    uint32_t *map = calloc(n, sizeof *map); /* 0: unmarked (frame 0 maps to 0) */
    if (!map) {
        c->gc_at = n + n / 2 + 1; /* try again later */
        return;
    }
    const uint32_t MARK = UINT32_MAX;
    for (uint32_t i = 0; i <= m->hist_len; i++) {
        const gcset *s = NULL;
        gcset hs;
        if (i == m->hist_len) {
            s = &c->cur;
        } else {
            uint32_t idx = (m->hist_head + m->hist_cap - 1 - i) % m->hist_cap;
            hs.c = c->hist[idx].c, hs.n = c->hist[idx].n;
            s = &hs;
        }
        for (uint32_t k = 0; k < s->n; k++)
            for (uint32_t f = s->c[k].frame; f && map[f] != MARK; f = c->per.parent[f])
                map[f] = MARK;
    }
    uint32_t w = 1;
    for (uint32_t f = 1; f < n; f++) { /* parents precede children */
        if (map[f] != MARK) continue;
        c->per.ret[w] = c->per.ret[f];
        c->per.parent[w] = map[c->per.parent[f]] == MARK ? 0 : map[c->per.parent[f]];
        map[f] = w++;
    }
    map[0] = 0;
    c->per.n = w;
    for (uint32_t k = 0; k < c->cur.n; k++) c->cur.c[k].frame = map[c->cur.c[k].frame];
    for (uint32_t i = 0; i < m->hist_len; i++) {
        uint32_t idx = (m->hist_head + m->hist_cap - 1 - i) % m->hist_cap;
        for (uint32_t k = 0; k < c->hist[idx].n; k++)
            c->hist[idx].c[k].frame = map[c->hist[idx].c[k].frame];
    }
    free(map);
    uint32_t cap = 64;
    while (cap < 2 * (w + 1)) cap *= 2;
    if (!fh_rebuild(c, cap)) fh_rebuild(c, c->fh_cap); /* keep the old size */
    c->gc_at = 2 * w > 4096 ? 2 * w : 4096;
}

/* ---- life cycle ---- */

tr_status tr_cfgm_new(grammar_matcher *m) {
    gcfg_matcher *c = calloc(1, sizeof *c);
    if (!c) return TR_ERR_NOMEM;
    c->per.cap = 64;
    c->per.ret = malloc(c->per.cap * sizeof *c->per.ret);
    c->per.parent = malloc(c->per.cap * sizeof *c->per.parent);
    c->hist = calloc(m->hist_cap, sizeof *c->hist);
    m->cfg = c;
    tr_cfg_ctx_init(&c->x, m->g->cfg, &c->per);
    if (!c->per.ret || !c->per.parent || !c->hist || !fh_rebuild(c, 128) ||
        !tr_cset_reserve(&c->cur, 4)) {
        tr_cfgm_free(m);
        return TR_ERR_NOMEM;
    }
    c->memo = tr_cfg_memo_for(m->g, m->v); /* NULL: masks not memoized */
    tr_cfgm_reset(m);
    return TR_OK;
}

void tr_cfgm_free(grammar_matcher *m) {
    gcfg_matcher *c = m->cfg;
    if (!c) return;
    free(c->per.ret);
    free(c->per.parent);
    free(c->fh);
    tr_cset_free(&c->cur);
    if (c->hist)
        for (uint32_t i = 0; i < m->hist_cap; i++) free(c->hist[i].c);
    free(c->hist);
    tr_cfg_ctx_deinit(&c->x);
    tr_cset_free(&c->a);
    tr_cset_free(&c->b);
    tr_cset_free(&c->chain);
    tr_cfg_walker_free(c->w);
    free(c);
    m->cfg = NULL;
}

void tr_cfgm_reset(grammar_matcher *m) {
    gcfg_matcher *c = m->cfg;
    c->per.n = 1;
    c->per.ret[0] = 0;
    c->per.parent[0] = 0;
    memset(c->fh, 0, c->fh_cap * sizeof *c->fh);
    c->gc_at = 4096;
    c->cur.n = 1;
    c->cur.c[0].state = m->g->cfg->rule_start[0];
    c->cur.c[0].frame = 0;
    c->ws_run = 0;
    m->terminated = false;
    m->hist_head = 0;
    m->hist_len = 0;
}

/* ---- running bytes on scratch frames ---- */

/* Runs bytes from the configurations in c->a, after a whitespace run of
 * c->ws_run bytes; the result replaces c->a, the run after them goes to
 * c->a_run. False if the bytes are rejected or on error (c->x.err). */
static bool run_bytes(gcfg_matcher *c, const uint8_t *p, size_t n) {
    uint32_t run = c->ws_run;
    for (size_t i = 0; i < n; i++) {
        c->b.n = 0;
        tr_cfg_closure(&c->x, c->a.c, c->a.n, &c->b);
        if (c->x.err) return false;
        c->a.n = 0;
        tr_cfg_step(&c->x, c->b.c, c->b.n, p[i], &c->a);
        if (c->x.err || c->a.n == 0) break;
        if ((run = tr_cfg_ws_run(c->x.cfg, c->a.c, c->a.n, p[i], run)) == UINT32_MAX) {
            c->a.n = 0; /* one blank too many */
            break;
        }
    }
    c->a_run = run;
    /* an automaton that could not make a state answers nothing */
    tr_status f = gl_failed(c->x.cfg);
    if (f && !c->x.err) c->x.err = f;
    return !c->x.err && c->a.n > 0;
}

static bool load_cur(gcfg_matcher *c) {
    tr_cfg_ctx_reset(&c->x);
    if (!tr_cset_reserve(&c->a, c->cur.n)) return false;
    memcpy(c->a.c, c->cur.c, c->cur.n * sizeof *c->a.c);
    c->a.n = c->cur.n;
    return true;
}

/* Closure of cur into c->b; returns whether the input may end. */
static bool close_cur(gcfg_matcher *c) {
    tr_cfg_ctx_reset(&c->x);
    c->b.n = 0;
    bool end = tr_cfg_closure(&c->x, c->cur.c, c->cur.n, &c->b);
    tr_status f = gl_failed(c->x.cfg);
    if (f && !c->x.err) c->x.err = f;
    return end;
}

bool tr_cfgm_is_accepting(const grammar_matcher *m) {
    if (m->terminated) return false;
    bool end = close_cur(m->cfg);
    return end && !m->cfg->x.err;
}

bool tr_cfgm_can_continue(const grammar_matcher *m) {
    if (m->terminated) return false;
    close_cur(m->cfg);
    return m->cfg->b.n > 0 && !m->cfg->x.err;
}

bool tr_cfgm_token_allowed(const grammar_matcher *m, int32_t id) {
    const grammar_vocab *v = m->v;
    if (m->terminated) return false;
    uint8_t f = v->flags[id];
    if (f & GVOCAB_EOG) return tr_cfgm_is_accepting(m);
    size_t len = (size_t)(v->offs[id + 1] - v->offs[id]);
    if ((f & GVOCAB_SPECIAL) || len == 0) return false;
    gcfg_matcher *c = m->cfg;
    return load_cur(c) && run_bytes(c, v->bytes + v->offs[id], len);
}

static void push_history(grammar_matcher *m) {
    gcfg_matcher *c = m->cfg;
    gcfg_hist *h = &c->hist[m->hist_head];
    /* the caller reserved room (so that this cannot fail) */
    memcpy(h->c, c->cur.c, c->cur.n * sizeof *h->c);
    h->n = c->cur.n;
    h->ws_run = c->ws_run;
    m->hist_term[m->hist_head] = m->terminated;
    m->hist_head = (m->hist_head + 1) % m->hist_cap;
    if (m->hist_len < m->hist_cap) m->hist_len++;
}

static bool reserve_hist(grammar_matcher *m) {
    gcfg_hist *h = &m->cfg->hist[m->hist_head];
    uint32_t need = m->cfg->cur.n;
    if (need <= h->cap) return true;
    gcfg_config *p = realloc(h->c, (size_t)need * sizeof *p);
    if (!p) return false;
    h->c = p;
    h->cap = need;
    return true;
}

tr_status tr_cfgm_accept(grammar_matcher *m, const uint8_t *bytes, size_t len,
                         bool eog) {
    gcfg_matcher *c = m->cfg;
    if (m->terminated) return TR_ERR_STATE;
    if (eog) {
        if (!tr_cfgm_is_accepting(m)) return c->x.err ? c->x.err : TR_ERR_STATE;
        if (!reserve_hist(m)) return TR_ERR_NOMEM;
        push_history(m);
        m->terminated = true;
        return TR_OK;
    }
    if (!load_cur(c)) return TR_ERR_NOMEM;
    if (!run_bytes(c, bytes, len)) return c->x.err ? c->x.err : TR_ERR_STATE;
    /* commit: everything that can fail first */
    if (!reserve_hist(m) || !tr_cset_reserve(&c->b, c->a.n)) return TR_ERR_NOMEM;
    uint32_t n_per = c->per.n;
    for (uint32_t i = 0; i < c->a.n; i++) {
        uint32_t f = persist(c, c->a.c[i].frame);
        if (f == UINT32_MAX) {
            c->per.n = n_per; /* new frames are unreferenced: drop them */
            fh_rebuild(c, c->fh_cap);
            return TR_ERR_NOMEM;
        }
        c->b.c[i].state = c->a.c[i].state;
        c->b.c[i].frame = f;
    }
    if (!tr_cset_reserve(&c->cur, c->a.n)) {
        c->per.n = n_per;
        fh_rebuild(c, c->fh_cap);
        return TR_ERR_NOMEM;
    }
    push_history(m);
    memcpy(c->cur.c, c->b.c, c->a.n * sizeof *c->cur.c);
    c->cur.n = c->a.n;
    c->ws_run = c->a_run;
    if (c->per.n >= c->gc_at) collect(m);
    return TR_OK;
}

tr_status tr_cfgm_rollback(grammar_matcher *m, uint32_t n) {
    gcfg_matcher *c = m->cfg;
    if (n > m->hist_len) return TR_ERR_STATE;
    if (n == 0) return TR_OK;
    uint32_t idx = (m->hist_head + m->hist_cap - n) % m->hist_cap;
    gcfg_hist *h = &c->hist[idx];
    if (!tr_cset_reserve(&c->cur, h->n)) return TR_ERR_NOMEM;
    memcpy(c->cur.c, h->c, h->n * sizeof *h->c);
    c->cur.n = h->n;
    c->ws_run = h->ws_run;
    m->terminated = m->hist_term[idx];
    m->hist_head = idx;
    m->hist_len -= n;
    return TR_OK;
}

tr_status tr_cfgm_forced_bytes(const grammar_matcher *m, uint8_t *buf,
                               size_t cap, size_t *len) {
    gcfg_matcher *c = m->cfg;
    size_t n = 0;
    if (!m->terminated && load_cur(c)) {
        gcfg *g = m->g->cfg;
        while (n < cap) {
            c->b.n = 0;
            bool end = tr_cfg_closure(&c->x, c->a.c, c->a.n, &c->b);
            if (end || c->x.err || c->b.n == 0) break;
            int b = gl_only(g, c->b.c[0].state);
            for (uint32_t i = 1; i < c->b.n && b >= 0; i++)
                if (gl_only(g, c->b.c[i].state) != b) b = -1;
            if (b < 0) break;
            c->a.n = 0;
            tr_cfg_step(&c->x, c->b.c, c->b.n, (uint8_t)b, &c->a);
            if (c->x.err || c->a.n == 0) break;
            buf[n++] = (uint8_t)b;
        }
        if (gl_failed(m->g->cfg)) n = 0; /* nothing is forced by a broken automaton */
    }
    *len = n;
    return TR_OK;
}

bool tr_cfg_matches(const grammar *g, const uint8_t *bytes, size_t len) {
    gfstore none = {0};
    uint32_t zero = 0;
    none.ret = none.parent = &zero;
    none.n = none.cap = 1;
    gcfg_ctx x;
    tr_cfg_ctx_init(&x, g->cfg, &none);
    gcset a = {0}, b = {0};
    bool ok = tr_cset_add(&x, &a, g->cfg->rule_start[0], 0);
    uint32_t run = 0;
    for (size_t i = 0; i < len && ok; i++) {
        b.n = 0;
        tr_cfg_closure(&x, a.c, a.n, &b);
        a.n = 0;
        tr_cfg_step(&x, b.c, b.n, bytes[i], &a);
        ok = !x.err && a.n > 0 &&
             (run = tr_cfg_ws_run(g->cfg, a.c, a.n, bytes[i], run)) != UINT32_MAX;
    }
    if (ok) {
        b.n = 0;
        ok = tr_cfg_closure(&x, a.c, a.n, &b) && !x.err;
    }
    ok = ok && !gl_failed(g->cfg);
    tr_cset_free(&a);
    tr_cset_free(&b);
    tr_cfg_ctx_deinit(&x);
    return ok;
}
