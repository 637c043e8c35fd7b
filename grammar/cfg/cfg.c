/* cfg.c — configurations of a grammar's pushdown automaton: closures
 * (calls push, accepting states pop) and byte steps over sets of them.
 *
 * Layering: grammar/cfg (cfg_internal.h); used by the CFG matcher
 * (cfg_matcher.c) and the mask walk (cfg_mask.c). A gcfg_ctx belongs to
 * one thread at a time; the grammar it reads is shared and immutable.
 *
 * A closure starts from configurations that have just consumed a byte
 * (or the start) and adds every configuration reachable without input:
 * at a state with call edges s --Q--> t, push t and go to Q's start
 * (unless t is a tail: accepting with no transition, where returning
 * would only pop again, so the frame is not pushed at all); at an
 * accepting state, pop. It terminates because the analysis refused left
 * recursion (no rule reaches itself without input) and because popping
 * shrinks the stack: each configuration is processed once (the `seen`
 * list). Only configurations with a live byte transition are kept: the
 * others can neither consume nor end (ending is reported separately, as
 * "popped frame 0").
 */
#include <stdlib.h>
#include <string.h>

#include "grammar/cfg/cfg_internal.h"

void tr_cfg_ctx_init(gcfg_ctx *x, gcfg *cfg, const gfstore *per) {
    memset(x, 0, sizeof *x);
    x->cfg = cfg;
    x->per = per;
}

void tr_cfg_ctx_deinit(gcfg_ctx *x) {
    free(x->scr.ret);
    free(x->scr.parent);
    free(x->sh);
    tr_cset_free(&x->work);
    tr_cset_free(&x->seen);
    free(x->out_ix.slot);
    free(x->seen_ix.slot);
    memset(x, 0, sizeof *x);
}

bool tr_cset_reserve(gcset *s, uint32_t need) {
    if (need <= s->cap) return true;
    uint32_t nc = s->cap ? s->cap : 8;
    while (nc < need) {
        if (nc > UINT32_MAX / 4) return false;
        nc *= 2;
    }
    gcfg_config *c = realloc(s->c, (size_t)nc * sizeof *c);
    if (!c) return false;
    s->c = c;
    s->cap = nc;
    return true;
}

void tr_cset_free(gcset *s) {
    free(s->c);
    memset(s, 0, sizeof *s);
}

static bool fail(gcfg_ctx *x, tr_status st) {
    if (!x->err) x->err = st;
    return false;
}

/* Makes ix cover s->c[0, s->n): a new table when s shrank since (or
 * this call began) or when it is more than half full, then the entries
 * appended since. False when the table cannot grow (the caller scans). */
static bool idx_sync(gcidx *ix, const gcset *s) {
    if (s->n < ix->covered || (uint64_t)s->n * 2 + 2 > ix->cap) {
        /* sized for this set, not for the largest one so far: clearing
         * a table many times too large would cost what the scan did */
        uint64_t cap = 64;
        while (cap < 4 * ((uint64_t)s->n + 1)) cap *= 2;
        if (cap > UINT32_MAX / 2 + 1) return false;
        if (cap > ix->alloc) {
            uint32_t *t = realloc(ix->slot, (size_t)cap * sizeof *t);
            if (!t) return false;
            ix->slot = t;
            ix->alloc = (uint32_t)cap;
        }
        ix->cap = (uint32_t)cap;
        memset(ix->slot, 0, (size_t)ix->cap * sizeof *ix->slot);
        ix->covered = 0;
    }
    for (; ix->covered < s->n; ix->covered++) {
        const gcfg_config *c = &s->c[ix->covered];
        uint32_t j = gf_slot(c->state, c->frame, ix->cap);
        while (ix->slot[j]) j = (j + 1) & (ix->cap - 1);
        ix->slot[j] = ix->covered + 1;
    }
    return true;
}

/* Whether (state, frame) is in s: through ix when ix indexes s during
 * this call and s is large, else by a scan. */
static bool cset_has(gcidx *ix, const gcset *s, uint32_t state, uint32_t frame) {
    if (ix->set == s && s->n >= GCIDX_MIN && idx_sync(ix, s)) {
        for (uint32_t j = gf_slot(state, frame, ix->cap), e; (e = ix->slot[j]);
             j = (j + 1) & (ix->cap - 1))
            if (s->c[e - 1].state == state && s->c[e - 1].frame == frame) return true;
        return false;
    }
    for (uint32_t i = 0; i < s->n; i++)
        if (s->c[i].state == state && s->c[i].frame == frame) return true;
    return false;
}

/* From here to idx_end, s only grows and is checked through ix. */
static void idx_begin(gcidx *ix, const gcset *s) {
    ix->set = s;
    ix->covered = UINT32_MAX; /* whatever s held before is unknown */
}

static void idx_end(gcidx *ix) { ix->set = NULL; }

bool tr_cset_add(gcfg_ctx *x, gcset *s, uint32_t state, uint32_t frame) {
    if (cset_has(&x->out_ix, s, state, frame)) return true;
    if (s->n >= x->cfg->max_stacks) return fail(x, TR_ERR_LIMIT);
    if (!tr_cset_reserve(s, s->n + 1)) return fail(x, TR_ERR_NOMEM);
    s->c[s->n].state = state;
    s->c[s->n].frame = frame;
    s->n++;
    return true;
}

void tr_cfg_ctx_reset(gcfg_ctx *x) {
    x->scr.n = 0;
    x->err = TR_OK;
    if (x->sh_used) {
        memset(x->sh, 0, x->sh_cap * sizeof *x->sh);
        x->sh_used = 0;
    }
}

/* Rebuilds the scratch table for the live frames [0, scr.n). */
static bool sh_rebuild(gcfg_ctx *x) {
    uint32_t cap = 64;
    while (cap < 4 * (x->scr.n + 1)) cap *= 2;
    uint32_t *t = calloc(cap, sizeof *t);
    if (!t) return fail(x, TR_ERR_NOMEM);
    for (uint32_t i = 0; i < x->scr.n; i++) {
        uint32_t j = gf_slot(x->scr.ret[i], x->scr.parent[i], cap);
        while (t[j]) j = (j + 1) & (cap - 1);
        t[j] = i + 1;
    }
    free(x->sh);
    x->sh = t;
    x->sh_cap = cap;
    x->sh_used = x->scr.n;
    return true;
}

/* The canonical frame (ret, parent): an existing persistent or scratch
 * frame if there is one, else a new scratch frame; UINT32_MAX on error. */
static uint32_t scr_push(gcfg_ctx *x, uint32_t ret, uint32_t parent) {
    if (!(parent & GF_SCR) && x->per_fh) {
        uint32_t cap = x->per_fh_cap;
        for (uint32_t j = gf_slot(ret, parent, cap), f; (f = x->per_fh[j]);
             j = (j + 1) & (cap - 1))
            if (f < x->per->n && x->per->ret[f] == ret && x->per->parent[f] == parent)
                return f;
    }
    if ((x->sh_used + 1) * 2 > x->sh_cap && !sh_rebuild(x)) return UINT32_MAX;
    uint32_t j = gf_slot(ret, parent, x->sh_cap);
    for (uint32_t e; (e = x->sh[j]); j = (j + 1) & (x->sh_cap - 1)) {
        uint32_t i = e - 1;
        if (i >= x->scr.n) break; /* stale: dropped by a truncation; reuse */
        if (x->scr.ret[i] == ret && x->scr.parent[i] == parent) return i | GF_SCR;
    }
    gfstore *f = &x->scr;
    if (f->n == f->cap) {
        uint32_t nc = f->cap ? f->cap * 2 : 64;
        if (nc >= GF_SCR) {
            fail(x, TR_ERR_LIMIT);
            return UINT32_MAX;
        }
        uint32_t *r = realloc(f->ret, (size_t)nc * sizeof *r);
        if (r) f->ret = r;
        uint32_t *p = r ? realloc(f->parent, (size_t)nc * sizeof *p) : NULL;
        if (p) f->parent = p;
        if (!r || !p) {
            fail(x, TR_ERR_NOMEM);
            return UINT32_MAX;
        }
        f->cap = nc;
    }
    f->ret[f->n] = ret;
    f->parent[f->n] = parent;
    if (!x->sh[j]) x->sh_used++;
    x->sh[j] = f->n + 1;
    return f->n++ | GF_SCR;
}

static bool work_push(gcfg_ctx *x, uint32_t state, uint32_t frame) {
    gcset *w = &x->work;
    if (!tr_cset_reserve(w, w->n + 1)) return fail(x, TR_ERR_NOMEM);
    w->c[w->n].state = state;
    w->c[w->n].frame = frame;
    w->n++;
    return true;
}

/* The closure when no call is on the way: each configuration only
 * returns, popping its stack, which ends (no cycle is possible and no
 * frame is made). False (out restored) when a call shows up. */
static bool closure_returns(gcfg_ctx *x, const gcfg_config *in, uint32_t n_in,
                            gcset *out, bool *escaped) {
    uint32_t out0 = out->n;
    *escaped = false;
    for (uint32_t i = 0; i < n_in; i++) {
        uint32_t s = in[i].state, f = in[i].frame;
        for (;;) {
            uint8_t fl = gl_flags(x->cfg, s);
            if (fl & GCFG_CALLS) {
                out->n = out0;
                return false;
            }
            if ((fl & GCFG_BYTES) && !tr_cset_add(x, out, s, f)) return true;
            if (!(fl & GCFG_ACCEPT)) break;
            if (f == 0) {
                *escaped = true;
                break;
            }
            s = gf_ret(x, f);
            f = gf_parent(x, f);
        }
    }
    return true;
}

/* The closure's general case: a walk over configurations, each processed
 * once (the seen set), calls pushing frames. */
static bool closure_walk(gcfg_ctx *x, const gcfg_config *in, uint32_t n_in, gcset *out) {
    gcfg *g = x->cfg;
    bool escaped = false;
    x->work.n = 0;
    x->seen.n = 0;
    for (uint32_t i = n_in; i-- > 0;)
        if (!work_push(x, in[i].state, in[i].frame)) return false;
    /* every processed configuration is in `seen`; a bound on it keeps a
     * grammar that explodes in ambiguity from running away (4x the
     * stacks budget: intermediate configurations, pure calls and
     * returns, are not in the output) */
    uint64_t seen_max = (uint64_t)g->max_stacks * 4;
    while (x->work.n) {
        gcfg_config c = x->work.c[--x->work.n];
        uint8_t f = gl_flags(g, c.state);
        if (f != GCFG_BYTES) { /* calls or returns: may come back here */
            if (cset_has(&x->seen_ix, &x->seen, c.state, c.frame)) continue;
            if (x->seen.n >= seen_max) return fail(x, TR_ERR_LIMIT);
            if (!tr_cset_reserve(&x->seen, x->seen.n + 1)) return fail(x, TR_ERR_NOMEM);
            x->seen.c[x->seen.n++] = c;
        }
        if ((f & GCFG_BYTES) && !tr_cset_add(x, out, c.state, c.frame)) return false;
        if (f & GCFG_CALLS) {
            uint32_t nc;
            const gl_call *calls = gl_calls(g, c.state, &nc);
            for (uint32_t j = 0; j < nc; j++) {
                uint32_t start = calls[j].start, ret = calls[j].ret;
                uint32_t nf = gl_tail(g, ret) ? c.frame : scr_push(x, ret, c.frame);
                if (nf == UINT32_MAX || !work_push(x, start, nf)) return false;
            }
        }
        if (f & GCFG_ACCEPT) {
            if (c.frame == 0)
                escaped = true;
            else if (!work_push(x, gf_ret(x, c.frame), gf_parent(x, c.frame)))
                return false;
        }
    }
    return escaped;
}

bool tr_cfg_closure(gcfg_ctx *x, const gcfg_config *in, uint32_t n_in,
                    gcset *out) {
    bool escaped = false;
    idx_begin(&x->out_ix, out);
    if (closure_returns(x, in, n_in, out, &escaped)) {
        idx_end(&x->out_ix);
        return escaped;
    }
    idx_begin(&x->out_ix, out); /* out was cut back to where it began */
    idx_begin(&x->seen_ix, &x->seen);
    escaped = closure_walk(x, in, n_in, out);
    idx_end(&x->out_ix);
    idx_end(&x->seen_ix);
    return escaped;
}

void tr_cfg_step(gcfg_ctx *x, const gcfg_config *closed, uint32_t n, uint8_t b,
                 gcset *out) {
    idx_begin(&x->out_ix, out);
    for (uint32_t i = 0; i < n; i++) {
        uint32_t t = gl_step(x->cfg, closed[i].state, b);
        if (t != GDFA_DEAD && !tr_cset_add(x, out, t, closed[i].frame)) break;
    }
    idx_end(&x->out_ix);
}

