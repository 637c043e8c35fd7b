/* cfg_mask.c — token masks of a grammar with recursion: the part that
 * does not depend on the stack, memoized per DFA state, plus a run-time
 * residue for the tokens that run past the end of the current rule.
 *
 * Layering: grammar/ internal; called by matcher.c through
 * tr_cfgm_fill_mask. The memo (gcfg_memo) belongs to the grammar and is
 * shared by every matcher and thread using it with one vocabulary: one
 * atomic pointer per DFA state, filled by compare-and-swap (a thread that
 * loses the race frees its copy), never changed afterwards, and bounded
 * by mask_cache_bytes (past it, entries are computed and used but not
 * kept) — the regex memo's design (mask.c).
 *
 * The walk. Tokens are checked by walking the vocabulary trie (vocab.c)
 * with, per trie depth, the set of configurations reached by the prefix
 * so far; a dead set skips the subtree, a token is allowed when the set
 * after its last byte is not empty. Calls made inside a token push
 * scratch frames; the frames made below a depth are dropped when the
 * walk climbs back above it. In the common case, one configuration in a
 * state with neither calls nor returns, a trie node costs one table
 * lookup, as for a regex; an ASCII-only subtree whose bytes all loop on
 * a configuration's state is taken whole (mask.c's check nodes).
 *
 * Stack-independent part. For DFA state s the walk starts from (s, frame
 * 0) where "popping frame 0" means "the rule running at s returns": the
 * stack below is unknown. A token consumed without that is allowed
 * whatever the stack (the memoized bits). Where a return is possible
 * after j >= 1 bytes of a token, the trie node is recorded as an escape
 * point: the tokens below it may continue after the return, in the
 * caller. A return possible before any byte (escape0) means the caller's
 * own tokens are allowed too.
 *
 * Run time. For a configuration (s, F) of the matcher: the memo of s,
 * then for each escape point a walk of that node's subtree from the
 * caller's configuration (the frame F popped) with the real stack, and
 * when escape0, the same again for the popped configuration as a whole
 * (it is a configuration like any other: its memo, its escape points).
 * For JSON, escape points sit after '}' and ']' (the rules kept as calls
 * end there): the residue is the few hundred tokens that start with a
 * closing bracket. A state whose walk needed more configurations than
 * the stacks budget (a very ambiguous grammar) is marked overflow and
 * walked with the real stack at run time.
 */
#include <stdlib.h>
#include <string.h>

#include "grammar/cfg_internal.h"

typedef struct gcfg_entry {
    uint32_t n_esc;
    uint8_t escape0;  /* the rule may return before any byte */
    uint8_t overflow; /* too ambiguous to memoize: walk at run time */
    uint32_t (*esc)[2]; /* [n_esc] (trie node, depth) escape points */
    uint64_t bits[];  /* [n_words] tokens allowed whatever the stack */
} gcfg_entry;

/* Slots come in chunks of MEMO_CH, allocated on first use: a grammar
 * may make up to max_dfa_states (50,000) states but a request visits a
 * few dozen, and zeroing 50,000 slots up front cost ~700,000 instructions
 * per grammar (more than compiling a small schema). */
#define MEMO_CH 256u
typedef _Atomic(gcfg_entry *) memo_chunk[MEMO_CH];

struct gcfg_memo {
    uint64_t vocab_uid;
    uint32_t n_chunks;
    uint64_t budget;
    atomic_uint_fast64_t used;
    _Atomic(memo_chunk *) *chunks; /* [n_chunks] */
    struct gcfg_memo *next;
};

typedef struct gcfg_walker {
    gcfg_ctx x;
    gfstore none;     /* the persistent store of a stack-independent walk */
    uint32_t zero;
    gcfg_config *pool; /* sets per depth, contiguous */
    const uint32_t **prow; /* [pool_cap] each pooled state's DFA row */
    uint8_t *pflags;       /* [pool_cap] and its flags */
    uint32_t pool_cap;
    uint32_t *pstart, *pend, *ftop; /* [max_len + 2] per depth */
    gcset kern, tmp;
    uint32_t (*esc)[2];
    uint32_t n_esc, cap_esc;
    bool ci;          /* stack-independent walk (escape points recorded) */
    uint64_t *bits;   /* [n_words + 1] an entry's bits while computing */
    gcset work;       /* fill: configurations whose masks are pending */
    /* states' rows and flags, direct-mapped (a walk steps into the same
     * few states again and again; a ready row never changes) */
    uint32_t rc_state[64];
    const uint32_t *rc_row[64];
    uint8_t rc_flags[64];
    uint32_t *done;   /* fill: states whose bits are in the mask */
    uint32_t n_done, cap_done;
} gcfg_walker;

/* ---- the memo ---- */

static struct gcfg_memo *memo_new(const grammar *g, const grammar_vocab *v) {
    struct gcfg_memo *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->n_chunks = (g->cfg->max_states + MEMO_CH - 1) / MEMO_CH;
    c->chunks = calloc(c->n_chunks, sizeof *c->chunks);
    if (!c->chunks) {
        free(c);
        return NULL;
    }
    c->vocab_uid = v->uid;
    c->budget = g->mask_budget;
    atomic_init(&c->used, 0);
    for (uint32_t i = 0; i < c->n_chunks; i++) atomic_init(&c->chunks[i], NULL);
    return c;
}

void tr_cfg_memo_free(struct gcfg_memo *c) {
    while (c) {
        struct gcfg_memo *n = c->next;
        for (uint32_t i = 0; i < c->n_chunks; i++) {
            memo_chunk *ch = atomic_load_explicit(&c->chunks[i], memory_order_relaxed);
            for (uint32_t j = 0; ch && j < MEMO_CH; j++)
                free(atomic_load_explicit(&(*ch)[j], memory_order_relaxed));
            free(ch);
        }
        free(c->chunks);
        free(c);
        c = n;
    }
}

/* The slot of state s, its chunk made if needed (NULL on out-of-memory:
 * the caller computes without keeping). */
static _Atomic(gcfg_entry *) *memo_slot(struct gcfg_memo *c, uint32_t s, bool make) {
    memo_chunk *ch = atomic_load_explicit(&c->chunks[s / MEMO_CH], memory_order_acquire);
    if (!ch) {
        if (!make) return NULL;
        memo_chunk *fresh = calloc(1, sizeof *fresh);
        if (!fresh) return NULL;
        for (uint32_t j = 0; j < MEMO_CH; j++) atomic_init(&(*fresh)[j], NULL);
        if (atomic_compare_exchange_strong_explicit(&c->chunks[s / MEMO_CH], &ch, fresh,
                                                    memory_order_acq_rel,
                                                    memory_order_acquire))
            ch = fresh;
        else
            free(fresh); /* another thread's chunk is in ch */
    }
    return &(*ch)[s % MEMO_CH];
}

struct gcfg_memo *tr_cfg_memo_for(grammar *g, const grammar_vocab *v) {
    if (g->mask_budget == 0) return NULL;
    pthread_mutex_lock(&g->lock);
    struct gcfg_memo *c = g->cfg_memos;
    while (c && c->vocab_uid != v->uid) c = c->next;
    if (!c && (c = memo_new(g, v))) {
        c->next = g->cfg_memos;
        g->cfg_memos = c;
    }
    pthread_mutex_unlock(&g->lock);
    return c;
}

void tr_cfg_memo_stats(const struct gcfg_memo *c, uint64_t *bytes, uint64_t *masks) {
    for (; c; c = c->next) {
        *bytes += sizeof *c + (uint64_t)c->n_chunks * sizeof *c->chunks +
                  atomic_load_explicit(&c->used, memory_order_relaxed);
        for (uint32_t i = 0; i < c->n_chunks; i++) {
            memo_chunk *ch = atomic_load_explicit(&c->chunks[i], memory_order_acquire);
            if (!ch) continue;
            *bytes += sizeof *ch;
            for (uint32_t s = 0; s < MEMO_CH; s++)
                *masks += atomic_load_explicit(&(*ch)[s], memory_order_relaxed) != NULL;
        }
    }
}

/* ---- the walker ---- */

void tr_cfg_walker_free(gcfg_walker *w) {
    if (!w) return;
    tr_cfg_ctx_deinit(&w->x);
    free(w->pool);
    free(w->prow);
    free(w->pflags);
    free(w->pstart);
    free(w->pend);
    free(w->ftop);
    tr_cset_free(&w->kern);
    tr_cset_free(&w->tmp);
    tr_cset_free(&w->work);
    free(w->esc);
    free(w->bits);
    free(w->done);
    free(w);
}

static gcfg_walker *walker_new(const grammar *g, const grammar_vocab *v) {
    gcfg_walker *w = calloc(1, sizeof *w);
    if (!w) return NULL;
    size_t nd = (size_t)v->max_len + 2;
    w->pstart = malloc(nd * sizeof *w->pstart);
    w->pend = malloc(nd * sizeof *w->pend);
    w->ftop = malloc(nd * sizeof *w->ftop);
    w->bits = malloc((v->n_words + 1) * sizeof *w->bits);
    if (!w->pstart || !w->pend || !w->ftop || !w->bits) {
        tr_cfg_walker_free(w);
        return NULL;
    }
    w->none.ret = w->none.parent = &w->zero;
    w->none.n = w->none.cap = 1;
    for (int i = 0; i < 64; i++) w->rc_state[i] = UINT32_MAX;
    tr_cfg_ctx_init(&w->x, g->cfg, &w->none);
    return w;
}

static bool pool_reserve(gcfg_walker *w, uint32_t need) {
    if (need <= w->pool_cap) return true;
    uint32_t nc = w->pool_cap ? w->pool_cap * 2 : 256;
    while (nc < need) nc *= 2;
    gcfg_config *p = realloc(w->pool, (size_t)nc * sizeof *p);
    if (p) w->pool = p;
    const uint32_t **r = p ? realloc(w->prow, (size_t)nc * sizeof *r) : NULL;
    if (r) w->prow = r;
    uint8_t *f = r ? realloc(w->pflags, nc) : NULL;
    if (!f) {
        if (!w->x.err) w->x.err = TR_ERR_NOMEM;
        return false;
    }
    w->pflags = f;
    w->pool_cap = nc;
    return true;
}

/* State s's row (made if needed) and flags, through the walker's cache. */
static inline const uint32_t *row_of(gcfg_walker *w, uint32_t s, uint8_t *flags) {
    uint32_t j = s & 63;
    if (w->rc_state[j] != s) {
        gcfg *g = w->x.cfg;
        gl_chunk *ch = gl_ready(g, s);
        w->rc_state[j] = s;
        w->rc_row[j] = ch->rows + (size_t)(s % GL_CH) * g->n_cls;
        w->rc_flags[j] = ch->flags[s % GL_CH];
    }
    *flags = w->rc_flags[j];
    return w->rc_row[j];
}

/* Pools configuration c at index i with its row and flags. */
static void pool_put(gcfg_walker *w, uint32_t i, gcfg_config c) {
    w->pool[i] = c;
    w->prow[i] = row_of(w, c.state, &w->pflags[i]);
}

static void add_escape(gcfg_walker *w, uint32_t node, uint32_t depth) {
    if (w->n_esc == w->cap_esc) {
        uint32_t nc = w->cap_esc ? w->cap_esc * 2 : 16;
        uint32_t(*e)[2] = realloc(w->esc, (size_t)nc * sizeof *e);
        if (!e) {
            if (!w->x.err) w->x.err = TR_ERR_NOMEM;
            return;
        }
        w->esc = e;
        w->cap_esc = nc;
    }
    w->esc[w->n_esc][0] = node;
    w->esc[w->n_esc][1] = depth;
    w->n_esc++;
}

/* The first check node at or after node i (gtrie check nodes). */
static uint32_t first_check(const gtrie *tr, uint32_t i) {
    uint32_t lo = 0, hi = tr->n_checks;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (tr->check[mid] < i)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Whether some configuration of pool[a..b) stays in its state on every
 * byte the check node ck's subtree uses (then every token below is
 * allowed). */
static bool subtree_loops(gcfg *g, const gtrie *tr, uint32_t ck,
                          const gcfg_config *set, uint32_t n) {
    const uint64_t *need = tr->cbits[ck];
    for (uint32_t k = 0; k < n; k++) {
        const uint64_t *lp = gl_aloop(g, set[k].state);
        if (!(need[0] & ~lp[0]) && !(need[1] & ~lp[1])) return true;
    }
    return false;
}

/* Whether some child of trie node i has a byte that may follow a return
 * (gcfg.follow): only then can a token below continue after it. */
static bool follows(const gcfg *g, const gtrie *tr, uint32_t i) {
    for (uint32_t j = i + 1; j < tr->next[i]; j = tr->next[j])
        if (g->follow[tr->byte[j] >> 6] >> (tr->byte[j] & 63) & 1) return true;
    return false;
}

static bool in_follow(const gcfg *g, uint8_t b) {
    return g->follow[b >> 6] >> (b & 63) & 1;
}

/* Returns from frame f (the state before it may return and has no call):
 * whether they reach frame 0 (*calls: a return state with calls is on the
 * way, so the question needs a real closure). */
static bool returns_escape(const gcfg_ctx *x, uint32_t f, bool *calls) {
    *calls = false;
    for (;;) {
        uint32_t r = gf_ret(x, f), p = gf_parent(x, f);
        uint8_t fl = gl_flags(x->cfg, r);
        if (fl & GCFG_CALLS) {
            *calls = true;
            return false;
        }
        if (!(fl & GCFG_ACCEPT)) return false;
        if (p == 0) return true;
        f = p;
    }
}

/* Clears the tokens of trie nodes [a, b) (a subtree, or one without its
 * root) from mask. */
static void clear_nodes(const gtrie *tr, uint32_t a, uint32_t b, uint64_t *mask) {
    for (uint32_t k = tr->pfirst[a]; k < tr->pfirst[b]; k++) {
        uint32_t id = tr->ptoks[k];
        mask[id >> 6] &= ~(1ull << (id & 63));
    }
}

/* Whether a whole-trie walk from the set w->tmp should start from every
 * token and clear the dead ones (comp) rather than set the live ones:
 * true when most tokens are allowed. A permissive state (inside a JSON
 * string) allows ~48,800 of SmolLM2's 49,152 tokens; setting them one by
 * one from the check nodes' slices was half of its walk, while only 3,330
 * of the 100,298 trie nodes lie outside the ASCII check subtrees. Decided
 * on every 256th token in trie order (192 for SmolLM2), run through the
 * set's states as plain DFA paths (returns and calls ignored: an
 * estimate), when the first bytes alone do not already say no; whether a
 * token's first byte survives was not enough (in an identifier most
 * subtrees survive it, most of their tokens die later). */
static bool prefer_complement(const gcfg_walker *w, const grammar_vocab *v) {
    const gtrie *tr = &v->trie;
    uint32_t n = tr->pfirst[tr->n_nodes], live = 0, seen = 0;
    gcfg *g = w->x.cfg;
    /* first the first bytes alone (235 steps for SmolLM2): an upper bound
     * that rules out the restrictive states cheaply */
    uint64_t first = 0;
    for (uint32_t j = 1; j < tr->n_nodes; j = tr->next[j]) {
        bool alive = false;
        for (uint32_t k = 0; k < w->tmp.n && !alive; k++)
            alive = gl_step(w->x.cfg, w->tmp.c[k].state, tr->byte[j]) != GDFA_DEAD;
        if (alive) first += tr->pfirst[tr->next[j]] - tr->pfirst[j];
    }
    if (2 * first <= n) return false;
    for (uint32_t k = 0; k < n; k += 256, seen++) {
        uint32_t id = tr->ptoks[k];
        const uint8_t *p = v->bytes + v->offs[id];
        size_t len = (size_t)(v->offs[id + 1] - v->offs[id]);
        for (uint32_t c = 0; c < w->tmp.n; c++) {
            uint32_t q = w->tmp.c[c].state;
            for (size_t b = 0; b < len && q != GDFA_DEAD; b++) q = gl_step(g, q, p[b]);
            if (q != GDFA_DEAD) {
                live++;
                break;
            }
        }
    }
    return 2 * live > seen;
}

/* Walks the trie nodes [i0, i1) (all deeper than d0) from the closed set
 * w->tmp placed at depth d0, OR-ing allowed tokens into mask (n_words + 1
 * words; bit n_vocab is scratch), or, with comp, clearing the tokens that
 * die from a mask that starts with them all. In a stack-independent walk
 * (w->ci), returns from frame 0 after a byte are recorded as escape
 * points. */
static void walk(gcfg_walker *w, const grammar_vocab *v, uint32_t d0,
                 uint32_t i0, uint32_t i1, uint64_t *mask, bool comp) {
    gcfg_ctx *x = &w->x;
    gcfg *g = x->cfg;
    const gtrie *tr = &v->trie;
    const uint8_t *byte = tr->byte;
    const uint16_t *depth = tr->depth;
    const uint32_t *tok = tr->tok, *next = tr->next;
    if (!pool_reserve(w, w->tmp.n + 64)) return;
    for (uint32_t j = 0; j < w->tmp.n; j++) pool_put(w, j, w->tmp.c[j]);
    w->pstart[d0] = 0;
    w->pend[d0] = w->tmp.n;
    w->ftop[d0] = x->scr.n;
    uint32_t ck = first_check(tr, i0);
    uint32_t next_check = ck < tr->n_checks ? tr->check[ck] : UINT32_MAX;
    uint32_t i = i0;
    while (i < i1) {
        uint32_t dp = depth[i];
        uint32_t ps = w->pstart[dp - 1], pe = w->pend[dp - 1];
        if (i >= next_check) {
            if (i > next_check) {
                ck = first_check(tr, i);
                next_check = ck < tr->n_checks ? tr->check[ck] : UINT32_MAX;
            }
            if (i == next_check) {
                bool all = subtree_loops(g, tr, ck, w->pool + ps, pe - ps);
                if (all && !comp) gtrie_take_check(tr, ck, v->n_words, mask);
                ck++;
                next_check = ck < tr->n_checks ? tr->check[ck] : UINT32_MAX;
                if (all) {
                    i = next[i];
                    continue;
                }
            }
        }
        uint8_t b = byte[i];
        bool leaf = next[i] == i + 1;
        x->scr.n = w->ftop[dp - 1];
        gcfg_config c = w->pool[ps];
        const gcfg_config *src = w->pool + ps;
        uint32_t n_src = pe - ps;
        if (n_src == 1 && (w->pflags[ps] & GCFG_ACCEPT) && c.frame != 0 &&
            in_follow(x->cfg, b)) {
            /* a deferred return (below) may consume this byte: close */
            w->tmp.n = 0;
            tr_cfg_closure(x, &c, 1, &w->tmp);
            if (x->err) return;
            src = w->tmp.c;
            n_src = w->tmp.n;
        }
        gcfg_config k1; /* the kernel when it is one configuration */
        uint32_t nk;
        if (n_src == 1) { /* one configuration: the common case */
            k1.state = src == w->pool + ps ? w->prow[ps][g->cls[b]] : gl_step(g, src[0].state, b);
            k1.frame = src[0].frame;
            nk = k1.state != GDFA_DEAD;
        } else {
            w->kern.n = 0;
            tr_cfg_step(x, src, n_src, b, &w->kern);
            if (x->err) return;
            nk = w->kern.n;
            if (nk == 1) k1 = w->kern.c[0];
        }
        if (nk == 0) {
            if (comp) clear_nodes(tr, i, next[i], mask);
            i = next[i];
            continue;
        }
        uint32_t id = tok[i];
        if (!comp) mask[id >> 6] |= 1ull << (id & 63);
        if (leaf) {
            i++;
            continue;
        }
        if (nk == 1) {
            /* No call: the configuration stands for its closure. Its
             * returns are deferred until a byte that may follow a return
             * (above): inside an identifier that could end after each
             * letter, the set stays one configuration instead of two.
             * Whether they reach frame 0 (an escape point) is known now. */
            uint8_t ft;
            const uint32_t *krow = row_of(w, k1.state, &ft);
            bool lone = ft == GCFG_BYTES, esc = false;
            if (ft == (GCFG_BYTES | GCFG_ACCEPT)) {
                bool calls = false;
                esc = k1.frame == 0 || returns_escape(x, k1.frame, &calls);
                lone = !calls;
            }
            if (lone) {
                if (esc && w->ci && follows(x->cfg, tr, i)) add_escape(w, i, dp);
                if (!pool_reserve(w, pe + 1)) return;
                w->pool[pe] = k1;
                w->prow[pe] = krow;
                w->pflags[pe] = ft;
                w->pstart[dp] = pe;
                w->pend[dp] = pe + 1;
                w->ftop[dp] = x->scr.n;
                i++;
                continue;
            }
            w->kern.n = 0;
            if (!tr_cset_add(x, &w->kern, k1.state, k1.frame)) return;
        }
        w->tmp.n = 0;
        bool esc = tr_cfg_closure(x, w->kern.c, w->kern.n, &w->tmp);
        if (x->err) return;
        if (esc && w->ci && follows(x->cfg, tr, i)) add_escape(w, i, dp);
        if (w->tmp.n == 0) { /* nothing can consume another byte */
            if (comp) clear_nodes(tr, i + 1, next[i], mask);
            i = next[i];
            continue;
        }
        if (!pool_reserve(w, pe + w->tmp.n)) return;
        for (uint32_t j = 0; j < w->tmp.n; j++) pool_put(w, pe + j, w->tmp.c[j]);
        w->pstart[dp] = pe;
        w->pend[dp] = pe + w->tmp.n;
        w->ftop[dp] = x->scr.n;
        i++;
    }
}

/* The stack-independent entry of state s (heap; NULL on out-of-memory). */
static gcfg_entry *compute_entry(gcfg_walker *w, const grammar_vocab *v,
                                 uint32_t s) {
    gcfg_ctx *x = &w->x;
    x->per = &w->none;
    x->per_fh = NULL;
    tr_cfg_ctx_reset(x);
    w->ci = true;
    w->n_esc = 0;
    size_t nw = v->n_words;
    gcfg_config start = {s, 0};
    w->tmp.n = 0;
    bool esc0 = tr_cfg_closure(x, &start, 1, &w->tmp);
    bool comp = !x->err && prefer_complement(w, v);
    if (comp)
        memcpy(w->bits, v->trie_bits, (nw + 1) * sizeof *w->bits);
    else
        memset(w->bits, 0, (nw + 1) * sizeof *w->bits);
    if (!x->err) walk(w, v, 0, 1, v->trie.n_nodes, w->bits, comp);
    bool overflow = x->err == TR_ERR_LIMIT;
    if ((x->err && !overflow) || gl_failed(x->cfg)) return NULL; /* never memoized */
    uint32_t n_esc = overflow ? 0 : w->n_esc;
    size_t size = sizeof(gcfg_entry) + nw * sizeof(uint64_t) +
                  (size_t)n_esc * sizeof *w->esc;
    gcfg_entry *e = malloc(size);
    if (!e) return NULL;
    e->n_esc = n_esc;
    e->escape0 = esc0;
    e->overflow = overflow;
    memcpy(e->bits, w->bits, nw * sizeof *e->bits);
    e->esc = (uint32_t(*)[2])(e->bits + nw);
    if (n_esc) memcpy(e->esc, w->esc, n_esc * sizeof *w->esc);
    return e;
}

static size_t entry_size(const gcfg_entry *e, size_t nw) {
    return sizeof *e + nw * sizeof(uint64_t) + (size_t)e->n_esc * 8;
}

/* The entry of state s: from the memo, or computed (and kept if the
 * budget allows; *owned then tells the caller to free it). */
static const gcfg_entry *entry_of(gcfg_matcher *c, const grammar_vocab *v,
                                  uint32_t s, bool *computed, gcfg_entry **owned) {
    struct gcfg_memo *memo = c->memo;
    _Atomic(gcfg_entry *) *slot = memo ? memo_slot(memo, s, false) : NULL;
    if (slot) {
        gcfg_entry *e = atomic_load_explicit(slot, memory_order_acquire);
        if (e) return e;
    }
    *computed = true;
    gcfg_entry *e = compute_entry(c->w, v, s);
    if (memo && !slot) slot = memo_slot(memo, s, true);
    if (!e || !slot) {
        *owned = e;
        return e;
    }
    size_t bytes = entry_size(e, v->n_words);
    uint64_t before = atomic_fetch_add_explicit(&memo->used, bytes, memory_order_relaxed);
    if (before + bytes > memo->budget) {
        atomic_fetch_sub_explicit(&memo->used, bytes, memory_order_relaxed);
        *owned = e;
        return e;
    }
    gcfg_entry *expected = NULL;
    if (!atomic_compare_exchange_strong_explicit(slot, &expected, e,
                                                 memory_order_acq_rel,
                                                 memory_order_acquire)) {
        free(e); /* another thread published the same entry first */
        atomic_fetch_sub_explicit(&memo->used, bytes, memory_order_relaxed);
        return expected;
    }
    return e;
}

static bool done_add(gcfg_walker *w, uint32_t s) {
    for (uint32_t i = 0; i < w->n_done; i++)
        if (w->done[i] == s) return false;
    if (w->n_done == w->cap_done) {
        uint32_t nc = w->cap_done ? w->cap_done * 2 : 16;
        uint32_t *p = realloc(w->done, (size_t)nc * sizeof *p);
        if (!p) return true; /* OR again: harmless */
        w->done = p;
        w->cap_done = nc;
    }
    w->done[w->n_done++] = s;
    return true;
}

/* Run-time walk from configuration (s, f) with the real stack, over the
 * trie nodes [i0, i1) below depth d0. Returns whether the input may end
 * at (s, f) itself. */
static bool walk_real(gcfg_walker *w, const grammar_vocab *v,
                      const gcfg_matcher *c, uint32_t s,
                      uint32_t f, uint32_t d0, uint32_t i0, uint32_t i1,
                      uint64_t *mask) {
    gcfg_ctx *x = &w->x;
    x->per = &c->per;
    x->per_fh = c->fh;
    x->per_fh_cap = c->fh_cap;
    tr_status keep = x->err;
    tr_cfg_ctx_reset(x);
    x->err = keep;
    w->ci = false;
    gcfg_config start = {s, f};
    w->tmp.n = 0;
    bool end = tr_cfg_closure(x, &start, 1, &w->tmp);
    if (!x->err && w->tmp.n) walk(w, v, d0, i0, i1, mask, false);
    return end;
}

tr_status tr_cfgm_fill_mask(grammar_matcher *m, uint64_t *out) {
    gcfg_matcher *c = m->cfg;
    const grammar_vocab *v = m->v;
    size_t nw = v->n_words;
    if (!c->w && !(c->w = walker_new(m->g, v))) return TR_ERR_NOMEM;
    gcfg_walker *w = c->w;
    uint64_t *mask = m->scratch; /* n_words + 1 */
    memset(mask, 0, (nw + 1) * sizeof *mask);
    w->work.n = 0;
    w->n_done = 0;
    w->x.err = TR_OK;
    tr_status st = gl_failed(m->g->cfg);
    bool eog = false, computed = false;
    if (st) return st;
    for (uint32_t k = 0; k < c->cur.n; k++)
        if (!tr_cset_add(&w->x, &w->work, c->cur.c[k].state, c->cur.c[k].frame))
            return w->x.err;
    const gtrie *tr = &v->trie;
    for (uint32_t k = 0; k < w->work.n && !st; k++) {
        gcfg_config cf = w->work.c[k];
        gcfg_entry *owned = NULL;
        const gcfg_entry *e = entry_of(c, v, cf.state, &computed, &owned);
        if (!e) {
            st = gl_failed(m->g->cfg) ? gl_failed(m->g->cfg) : TR_ERR_NOMEM;
            break;
        }
        w->x.err = TR_OK;
        if (e->overflow) {
            eog |= walk_real(w, v, c, cf.state, cf.frame, 0, 1, tr->n_nodes, mask);
        } else {
            if (done_add(w, cf.state))
                for (size_t j = 0; j < nw; j++) mask[j] |= e->bits[j];
            if (cf.frame != 0) {
                uint32_t rs = c->per.ret[cf.frame], rf = c->per.parent[cf.frame];
                for (uint32_t j = 0; j < e->n_esc && !w->x.err; j++) {
                    uint32_t node = e->esc[j][0], dp = e->esc[j][1];
                    walk_real(w, v, c, rs, rf, dp, node + 1, tr->next[node], mask);
                }
                if (e->escape0 && !w->x.err) tr_cset_add(&w->x, &w->work, rs, rf);
            } else if (e->escape0) {
                eog = true;
            }
        }
        st = w->x.err;
        free(owned);
    }
    if (!st) st = gl_failed(m->g->cfg); /* a state could not be made */
    if (st) return st;
    /* the "no token" bit, duplicates of allowed tokens, end of generation */
    uint32_t none = (uint32_t)v->n_vocab;
    mask[none >> 6] &= ~(1ull << (none & 63));
    for (uint32_t j = 0; j < v->n_dups; j++) {
        int32_t r = v->dups[j][0], u = v->dups[j][1];
        if (mask[(uint32_t)r >> 6] >> (r & 63) & 1)
            mask[(uint32_t)u >> 6] |= 1ull << (u & 63);
    }
    if (eog)
        for (size_t e = 0; e < v->n_eog; e++)
            mask[v->eog[e] >> 6] |= 1ull << (v->eog[e] & 63);
    memcpy(out, mask, nw * sizeof *out);
    if (computed) m->n_computed++;
    return TR_OK;
}
