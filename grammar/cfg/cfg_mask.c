/* cfg_mask.c — token masks of a grammar with recursion: the part that
 * does not depend on the stack, memoized per DFA state, plus a run-time
 * residue for the tokens that run past the end of the current rule.
 *
 * Layering: grammar/cfg (cfg_internal.h); called by grammar/matcher.c
 * through tr_cfgm_fill_mask (cfg.h). The memo (gcfg_memo) belongs to the grammar and is
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

#include "grammar/cfg/cfg_internal.h"

/* The tokens allowed whatever the stack are kept as a bitmap of n_words
 * words (dense), or, when at most n_words / 4 of its words are nonzero,
 * as those words and their indexes (sparse): most states of a schema
 * allow a few tokens (a key's next letters, punctuation), and a dense
 * entry cost a 6 KiB copy to make and a 6 KiB OR from memory that is
 * rarely still in cache on every later use (~1,500 cycles of a mask
 * that takes ~15,000; dev schemas). */
#define ENTRY_DENSE UINT32_MAX
typedef struct gcfg_entry {
    uint32_t n_esc;
    uint8_t escape0;  /* the rule may return before any byte */
    uint8_t overflow; /* too ambiguous to memoize: walk at run time */
    uint32_t n_nz;    /* sparse: words kept; ENTRY_DENSE: bitmap */
    uint32_t *idx;    /* sparse: [n_nz] word indexes, increasing */
    uint32_t (*esc)[2]; /* [n_esc] (trie node, depth) escape points */
    uint64_t bits[];  /* [n_words] dense, or [n_nz] the nonzero words */
} gcfg_entry;

/* ORs entry e's stack-independent tokens into mask. */
static void entry_or(const gcfg_entry *e, size_t nw, uint64_t *mask) {
    if (e->n_nz == ENTRY_DENSE) {
        for (size_t j = 0; j < nw; j++) mask[j] |= e->bits[j];
        return;
    }
    for (uint32_t k = 0; k < e->n_nz; k++) mask[e->idx[k]] |= e->bits[k];
}

/* Slots come in chunks of MEMO_CH, allocated on first use: a grammar
 * may make up to max_lazy_dfa_states (200,000) states but a request
 * visits a few dozen, and zeroing 50,000 slots up front cost ~700,000
 * instructions per grammar (more than compiling a small schema). */
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

/* Regions (see "Regions" below). */
#define RG_MAX 48u          /* states explored from a looping state */
#define RG_HT 128u          /* state -> label table (power of two) */
#define RG_NONE UINT32_MAX
#define RG_DEAD 0xFFu       /* table codes besides labels */
#define RG_OUT 0xFEu
#define RG_BUCKETS 1024u
/* Bytes of region entries one vocabulary keeps (all grammars together):
 * a JSON string body's entry is ~6.5 KiB with SmolLM2, so 16 MiB holds
 * ~2,500 distinct regions; the 200 dev schemas make far fewer. */
#define RG_BUDGET (16ull << 20)

typedef struct gcfg_region {
    struct gcfg_region *next; /* bucket chain, never changed once published */
    uint64_t hash;
    uint32_t n_lab, n_exit;
    uint8_t *table;           /* [n_lab * 256] canonical structure */
    uint32_t (*exit)[2];      /* [n_exit] (trie node, label of the state before) */
    uint64_t bits[];          /* [n_words] tokens that stay in the region */
} gcfg_region;

struct gcfg_rcache {
    gvocab_ext ext; /* first: the vocabulary frees it through ext.free */
    _Atomic(gcfg_region *) head[RG_BUCKETS];
    atomic_uint_fast64_t used;
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
    uint32_t *run;    /* [max_len + 2] per depth: the whitespace run there */
    uint32_t run0;    /* a walk's run at its start depth (gcfg.ws_bound) */
    gcset kern, tmp;
    uint32_t (*esc)[2];
    uint32_t n_esc, cap_esc;
    bool ci;          /* stack-independent walk (escape points recorded) */
    uint64_t *bits;   /* [n_words + 1] an entry's bits while computing */
    uint32_t *nzi;    /* [n_words + 1] entry_pack: indexes of nonzero words */
    bool bits_clean;  /* every word of bits is 0 */
    /* which words of bits a walk set, a bit per word (entry_pack visits
     * those instead of all n_words), while `sum_ok`: a walk that takes
     * whole check subtrees, or bits from a region, clears it */
    uint64_t *sum;    /* [n_words / 64 + 1] */
    bool sum_ok;
    gcset work;       /* fill: configurations whose masks are pending */
    /* states' rows and flags, direct-mapped (a walk steps into the same
     * few states again and again; a ready row never changes) */
    uint32_t rc_state[64];
    const uint32_t *rc_row[64];
    uint8_t rc_flags[64];
    uint32_t *done;   /* fill: states whose bits are in the mask */
    uint32_t n_done, cap_done;
    /* the region of the state being computed ("Regions" below) */
    bool region;                /* walk: leaving the region is an exit */
    uint32_t rg_n;              /* its states, labelled 0..rg_n-1 */
    uint32_t rg_state[RG_MAX];  /* label -> state */
    uint32_t rg_key[RG_HT], rg_val[RG_HT]; /* state + 1 -> label */
    uint64_t rg_pred[RG_MAX];   /* exploration: predecessors (bit per index) */
    uint64_t rg_succ[RG_MAX];   /* and successors */
    uint64_t rg_live[RG_MAX][4]; /* and live byte classes */
    uint8_t rg_table[RG_MAX * 256];
    uint32_t (*rx)[2];          /* exits found: (trie node, label) */
    uint32_t n_rx, cap_rx;
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
    free(w->run);
    tr_cset_free(&w->kern);
    tr_cset_free(&w->tmp);
    tr_cset_free(&w->work);
    free(w->esc);
    free(w->bits);
    free(w->sum);
    free(w->nzi);
    free(w->done);
    free(w->rx);
    free(w);
}

static gcfg_walker *walker_new(const grammar *g, const grammar_vocab *v) {
    gcfg_walker *w = calloc(1, sizeof *w);
    if (!w) return NULL;
    size_t nd = (size_t)v->max_len + 2;
    w->pstart = malloc(nd * sizeof *w->pstart);
    w->pend = malloc(nd * sizeof *w->pend);
    w->ftop = malloc(nd * sizeof *w->ftop);
    w->run = malloc(nd * sizeof *w->run);
    w->bits = malloc((v->n_words + 1) * sizeof *w->bits);
    w->sum = calloc(v->n_words / 64 + 1, sizeof *w->sum);
    w->nzi = malloc((v->n_words + 1) * sizeof *w->nzi);
    if (!w->pstart || !w->pend || !w->ftop || !w->run || !w->bits || !w->nzi || !w->sum) {
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

/* The first check node at or after node i (gtrie check nodes), searched
 * from check index lo on: galloping, then a binary search, since a walk
 * moves forward and usually jumps over a few checks at a time (a plain
 * binary search over SmolLM2's 4,640 checks was ~14% of the walks'
 * instructions on the dev schemas). */
static uint32_t first_check(const gtrie *tr, uint32_t lo, uint32_t i) {
    uint32_t hi = tr->n_checks, step = 1;
    while (lo + step < hi && tr->check[lo + step] < i) {
        lo += step + 1;
        step *= 2;
    }
    if (lo + step < hi) hi = lo + step + 1;
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
    if (w->tmp.n == 1) { /* one live byte (a key's next letter): its tokens, at once */
        int16_t b = gl_only(g, w->tmp.c[0].state);
        if (b >= 0 && 2 * (tr->root_cum[b + 1] - tr->root_cum[b]) <= n) return false;
    }
    /* first the first bytes alone (a step per byte class and state): an upper bound
     * that rules out the restrictive states cheaply */
    uint64_t first = 0;
    bool live1[256] = {false}; /* per class: some state of the set takes it */
    for (uint32_t k = 0; k < w->tmp.n; k++) {
        const uint32_t *row = gl_ready(g, w->tmp.c[k].state)->rows +
                              (size_t)(w->tmp.c[k].state % GL_CH) * g->n_cls;
        for (uint32_t c = 0; c < g->n_cls; c++) live1[c] |= row[c] != GDFA_DEAD;
    }
    /* classes are ranges of bytes, in order; cls_byte[c] ends class c */
    for (uint32_t c = 0, b0 = 0; c < g->n_cls; b0 = g->cls_byte[c] + 1u, c++)
        if (live1[c]) first += tr->root_cum[g->cls_byte[c] + 1u] - tr->root_cum[b0];
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

/* Label of state st in the current region, RG_NONE if outside. */
static inline uint32_t rg_label(const gcfg_walker *w, uint32_t st) {
    for (uint32_t j = (st * 0x9E3779B1u) >> 25 & (RG_HT - 1); w->rg_key[j];
         j = (j + 1) & (RG_HT - 1))
        if (w->rg_key[j] == st + 1) return w->rg_val[j];
    return RG_NONE;
}

static void rg_put(gcfg_walker *w, uint32_t st, uint32_t label) {
    uint32_t j = (st * 0x9E3779B1u) >> 25 & (RG_HT - 1);
    while (w->rg_key[j] && w->rg_key[j] != st + 1) j = (j + 1) & (RG_HT - 1);
    w->rg_key[j] = st + 1;
    w->rg_val[j] = label;
}

static void rg_exit(gcfg_walker *w, uint32_t node, uint32_t label) {
    if (w->n_rx == w->cap_rx) {
        uint32_t nc = w->cap_rx ? w->cap_rx * 2 : 64;
        uint32_t(*e)[2] = realloc(w->rx, (size_t)nc * sizeof *e);
        if (!e) {
            if (!w->x.err) w->x.err = TR_ERR_NOMEM;
            return;
        }
        w->rx = e;
        w->cap_rx = nc;
    }
    w->rx[w->n_rx][0] = node;
    w->rx[w->n_rx][1] = label;
    w->n_rx++;
}

/* Skips the siblings from node i on (below i1, at depth dp) that die on
 * their first byte from the one configuration pool[ps], when no return
 * can take the byte instead (its state does not accept, or its frame is
 * 0: a walk's own bottom), and returns the first node left. Most nodes
 * a walk visits are such siblings: the general step costs ~50
 * instructions each, this loop a handful. A check node skipped here
 * could not have been taken (its first byte is no loop), and walk()
 * catches up with the checks it passed. */
static uint32_t skip_dead(const gcfg_walker *w, const grammar_vocab *v, uint32_t ps,
                          uint32_t dp, uint32_t i, uint32_t i1, uint64_t *mask, bool comp) {
    if ((w->pflags[ps] & GCFG_ACCEPT) && w->pool[ps].frame != 0) return i;
    const gtrie *tr = &v->trie;
    const uint32_t *row = w->prow[ps], *next = tr->next;
    const uint8_t *cls = w->x.cfg->cls, *byte = tr->byte;
    const uint16_t *depth = tr->depth;
    if (dp == 1 && !comp) {
        /* the root's children: the next byte both live in the state and
         * starting a token, a word of bytes at a time, without touching
         * the dead children (in byte order, so that child is the first
         * node left; past i1, none is) */
        if (i >= i1) return i;
        const uint64_t *lv = gl_live(w->x.cfg, w->pool[ps].state);
        for (uint32_t wd = byte[i] >> 6, lo = byte[i] & 63; wd < 4; wd++, lo = 0) {
            uint64_t m = lv[wd] & tr->root_bits[wd] & (~0ull << lo);
            if (m) {
                uint32_t j = tr->root[wd * 64 + (uint32_t)__builtin_ctzll(m)];
                return j < i1 ? j : i1;
            }
        }
        return i1;
    }
    while (i < i1 && depth[i] == dp && row[cls[byte[i]]] == GDFA_DEAD) {
        if (comp) clear_nodes(tr, i, next[i], mask);
        i = next[i];
    }
    return i;
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
    w->run[d0] = w->run0;
    uint32_t ck = first_check(tr, 0, i0);
    uint32_t next_check = ck < tr->n_checks ? tr->check[ck] : UINT32_MAX;
    uint32_t i = i0;
    while (i < i1) {
        uint32_t dp = depth[i];
        uint32_t ps = w->pstart[dp - 1], pe = w->pend[dp - 1];
        if (i >= next_check) {
            if (i > next_check) {
                /* a root child (the root skip jumps far): known */
                ck = depth[i] == 1 ? tr->root_ck[byte[i]] : first_check(tr, ck + 1, i);
                next_check = ck < tr->n_checks ? tr->check[ck] : UINT32_MAX;
            }
            if (i == next_check) {
                bool all = subtree_loops(g, tr, ck, w->pool + ps, pe - ps);
                if (all && !comp) {
                    gtrie_take_check(tr, ck, v->n_words, mask);
                    w->sum_ok = false;
                }
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
        if (nk && g->ws_bound) { /* bounded whitespace: one blank too many dies */
            uint32_t r = tr_cfg_ws_run(g, nk == 1 ? &k1 : w->kern.c, nk, b, w->run[dp - 1]);
            if (r == UINT32_MAX) nk = 0;
            w->run[dp] = r;
        }
        if (w->region && nk && rg_label(w, k1.state) == RG_NONE) {
            /* leaves the region: walked per grammar (region_entry) */
            rg_exit(w, i, rg_label(w, src[0].state));
            nk = 0;
        }
        if (nk == 0) {
            if (comp) clear_nodes(tr, i, next[i], mask);
            i = next[i];
            if (n_src == 1 && src == w->pool + ps)
                i = skip_dead(w, v, ps, dp, i, i1, mask, comp);
            continue;
        }
        uint32_t id = tok[i];
        if (!comp) {
            mask[id >> 6] |= 1ull << (id & 63);
            w->sum[id >> 12] |= 1ull << (id >> 6 & 63);
        }
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

static gcfg_entry *entry_pack(gcfg_walker *w, size_t nw, bool esc0);

/* w->bits at the start of a stack-independent walk: every trie token
 * (comp) or none. Packing a sparse entry clears the words it read, so
 * the common narrow walk skips a 6 KiB clear (~450 cycles). */
static void bits_start(gcfg_walker *w, const grammar_vocab *v, bool comp) {
    size_t nw = v->n_words;
    memset(w->sum, 0, (nw / 64 + 1) * sizeof *w->sum);
    w->sum_ok = !comp;
    if (comp)
        memcpy(w->bits, v->trie_bits, (nw + 1) * sizeof *w->bits);
    else if (!w->bits_clean)
        memset(w->bits, 0, (nw + 1) * sizeof *w->bits);
    w->bits_clean = false;
}


/* ---- regions: the looping part of a lexer, shared across states and grammars ----
 *
 * Grammars inline their terminals, so the inside of every string property
 * is its own copy of the JSON string automaton (body, escapes, \uXXXX,
 * UTF-8 continuations), and one vocabulary serves many grammars with the
 * same copies. Over the 200 MaskBench dev schemas, 4,241 of the 5,000
 * entries computed duplicated an earlier one, most of them permissive
 * string states (150-200 us each). Comparing whole walks fails: a string
 * state's walk reads, through the tokens that contain the closing quote,
 * the next key, which differs per property.
 *
 * So the walk of a state s is split. Its region R is the set of states
 * without calls or returns that lie on a cycle through s, plus those
 * reached from them through states live on the same bytes as s (the
 * counter states of a bounded run of blanks, which the flexible JSON
 * whitespace makes before every value, key and bracket), found among
 * the first RG_MAX such states reachable from s. A token either
 * stays in R for all its bytes, or leaves R at a first byte (an exit: a
 * trie node), or dies before. The tokens that stay in R, and the exit
 * nodes with the region state before them, depend only on R's structure
 * and the vocabulary: they are computed once per vocabulary and kept in
 * a cache keyed by R's canonical form (states numbered in breadth-first
 * order over bytes 0..255 from s, each byte's target a label, dead, or
 * out; compared in full, so no collision can pass). The entry of s is
 * that set plus, per exit node, a walk of its subtree from the grammar's
 * own state before it (the closing quote and what follows it): a few
 * hundred nodes instead of the ~100,000 of a permissive state. Exact by
 * construction: every token is in exactly one of the three cases.
 *
 * The cache hangs off the vocabulary (grammar_vocab.rcache), bounded by
 * RG_BUDGET; buckets are lists pushed by compare-and-swap and never
 * changed afterwards, read without a lock (a race may insert one region
 * twice: harmless). */

bool tr_cfg_regions_off; /* tests: compare with the plain walk */
#include <stdio.h>

static void rcache_free(gvocab_ext *e) {
    struct gcfg_rcache *rc = (struct gcfg_rcache *)e;
    for (uint32_t i = 0; i < RG_BUCKETS; i++) {
        gcfg_region *r = atomic_load_explicit(&rc->head[i], memory_order_relaxed);
        while (r) {
            gcfg_region *n = r->next;
            free(r);
            r = n;
        }
    }
    free(rc);
}

static struct gcfg_rcache *rcache_of(const grammar_vocab *v) {
    _Atomic(gvocab_ext *) *p = &((grammar_vocab *)v)->rcache;
    gvocab_ext *rc = atomic_load_explicit(p, memory_order_acquire);
    if (rc) return (struct gcfg_rcache *)rc;
    struct gcfg_rcache *fresh = malloc(sizeof *fresh);
    if (!fresh) return NULL;
    fresh->ext.free = rcache_free;
    for (uint32_t i = 0; i < RG_BUCKETS; i++) atomic_init(&fresh->head[i], NULL);
    atomic_init(&fresh->used, sizeof *fresh);
    if (atomic_compare_exchange_strong_explicit(p, &rc, &fresh->ext, memory_order_acq_rel,
                                                memory_order_acquire))
        return fresh;
    free(fresh); /* another thread's cache is in rc */
    return (struct gcfg_rcache *)rc;
}

/* Whether state t's row is made (a region search makes s's successors
 * and no further: making every state within a few bytes of a string's
 * body made 39 states per search over the dev schemas, 3,000 cycles
 * each, most of them never used; a state a token can reach is made by
 * the first walk that reaches it, so later searches see more of the
 * region: each form is a region of its own, all exact). */
static bool gl_made(gcfg *g, uint32_t t) {
    gl_chunk *ch = atomic_load_explicit(&g->chunks[t / GL_CH], memory_order_acquire);
    return ch && atomic_load_explicit(&ch->ready[t % GL_CH], memory_order_acquire);
}

/* Explores the states without calls or returns reachable from s (at most
 * RG_MAX); returns a bit set of those (by exploration index, in ex[]) in
 * its region, or 0 when s has none worth it (alone, without a loop). */
static uint64_t region_explore(gcfg_walker *w, uint32_t s, uint32_t *ex) {
    gcfg *g = w->x.cfg;
    /* one live byte: no loop worth sharing, and the plain walk of so
     * narrow a state is short (a key's letters, punctuation: 59% of the
     * entries the 200 dev schemas compute; exploring them made states) */
    if (gl_flags(g, s) != GCFG_BYTES || gl_only(g, s) >= 0) return 0;
    /* bounded whitespace is counted by the plain walk, never shared */
    if (g->ws_bound && gl_wsl(g, s)) return 0;
    /* exploring makes states; never let it be what exhausts the budget */
    if (tr_cfg_n_states(g) + RG_MAX >= g->max_states) return 0;
    memset(w->rg_key, 0, sizeof w->rg_key);
    uint32_t n = 1;
    ex[0] = s;
    w->rg_pred[0] = 0;
    rg_put(w, s, 0);
    for (uint32_t u = 0; u < n; u++) {
        gl_chunk *ch = gl_ready(g, ex[u]);
        const uint32_t *row = ch->rows + (size_t)(ex[u] % GL_CH) * g->n_cls;
        w->rg_succ[u] = 0;
        memset(w->rg_live[u], 0, sizeof w->rg_live[u]);
        for (uint32_t c = 0; c < g->n_cls; c++) {
            uint32_t t = row[c];
            if (t == GDFA_DEAD) continue;
            w->rg_live[u][c >> 6] |= 1ull << (c & 63);
            uint32_t l = rg_label(w, t);
            if (l == RG_NONE) {
                if (n == RG_MAX || (u && !gl_made(g, t)) || gl_flags(g, t) != GCFG_BYTES ||
                    (g->ws_bound && gl_wsl(g, t)))
                    continue;
                l = n++;
                ex[l] = t;
                w->rg_pred[l] = 0;
                rg_put(w, t, l);
            }
            w->rg_pred[l] |= 1ull << u;
            w->rg_succ[u] |= 1ull << l;
        }
    }
    if (gl_failed(g)) return 0;
    uint64_t in = 1, todo = 1;
    while (todo) {
        uint32_t u = (uint32_t)__builtin_ctzll(todo);
        todo &= todo - 1;
        uint64_t fresh = w->rg_pred[u] & ~in;
        in |= fresh;
        todo |= fresh;
    }
    /* and the states reached through states that take the same bytes as
     * s (a bounded run of blanks: a chain of counter states, no cycle) */
    uint64_t same = 0;
    for (uint32_t u = 0; u < n; u++)
        same |= (uint64_t)!memcmp(w->rg_live[u], w->rg_live[0], sizeof w->rg_live[0]) << u;
    todo = in;
    while (todo) {
        uint32_t u = (uint32_t)__builtin_ctzll(todo);
        todo &= todo - 1;
        uint64_t fresh = w->rg_succ[u] & same & ~in;
        in |= fresh;
        todo |= fresh;
    }
    if (in == 1 && !(gl_aloop(g, s)[0] | gl_aloop(g, s)[1])) return 0; /* nothing to share */
    return in;
}

/* The region of s in canonical form: w->rg_n labels (rg_state, rg_key),
 * rg_table; returns rg_n (0: none) and its hash. */
static uint32_t region_find(gcfg_walker *w, uint32_t s, uint64_t *hash) {
    gcfg *g = w->x.cfg;
    uint32_t ex[RG_MAX], canon[RG_MAX], order[RG_MAX];
    uint64_t in = region_explore(w, s, ex);
    if (!in) return 0;
    for (uint32_t e = 0; e < RG_MAX; e++) canon[e] = RG_NONE;
    canon[0] = 0;
    order[0] = 0;
    uint32_t m = 1;
    for (uint32_t k = 0; k < m; k++) {
        const uint32_t *row = gl_ready(g, ex[order[k]])->rows +
                              (size_t)(ex[order[k]] % GL_CH) * g->n_cls;
        uint8_t *tb = w->rg_table + (size_t)k * 256;
        /* classes are ranges of bytes in increasing order, so labels go
         * in order of first byte (canonical) taking a class at a time */
        for (uint32_t c = 0, b0 = 0; c < g->n_cls; b0 = g->cls_byte[c] + 1u, c++) {
            uint32_t t = row[c], e = t == GDFA_DEAD ? RG_NONE : rg_label(w, t);
            uint8_t code;
            if (t == GDFA_DEAD)
                code = RG_DEAD;
            else if (e == RG_NONE || !(in >> e & 1))
                code = RG_OUT;
            else {
                if (canon[e] == RG_NONE) {
                    canon[e] = m;
                    order[m++] = e;
                }
                code = (uint8_t)canon[e];
            }
            memset(tb + b0, code, g->cls_byte[c] + 1u - b0);
        }
    }
    memset(w->rg_key, 0, sizeof w->rg_key);
    for (uint32_t k = 0; k < m; k++) {
        w->rg_state[k] = ex[order[k]];
        rg_put(w, ex[order[k]], k);
    }
    uint64_t h = 0x9E3779B97F4A7C15ull ^ m;
    for (size_t j = 0; j < (size_t)m * 256; j += 8) {
        uint64_t x;
        memcpy(&x, w->rg_table + j, 8);
        h = (h ^ x) * 0xff51afd7ed558ccdull;
        h ^= h >> 32;
    }
    *hash = h;
    w->rg_n = m;
    return m;
}

/* Walks the vocabulary through the region of s (labelled by region_find):
 * a new region entry (heap), or NULL. */
static gcfg_region *region_compute(gcfg_walker *w, const grammar_vocab *v, uint32_t s,
                                   uint64_t hash, size_t *bytes) {
    gcfg_ctx *x = &w->x;
    size_t nw = v->n_words, tb = (size_t)w->rg_n * 256;
    x->per = &w->none;
    x->per_fh = NULL;
    tr_cfg_ctx_reset(x);
    w->ci = true;
    w->n_esc = 0;
    w->n_rx = 0;
    w->run0 = 0;
    gcfg_config start = {s, 0};
    w->tmp.n = 0;
    tr_cfg_closure(x, &start, 1, &w->tmp);
    bool comp = !x->err && prefer_complement(w, v);
    bits_start(w, v, comp);
    w->region = true;
    if (!x->err) walk(w, v, 0, 1, v->trie.n_nodes, w->bits, comp);
    w->region = false;
    /* a region has no return, so no escape point: anything else is a bug */
    if (x->err || gl_failed(x->cfg) || w->n_esc) return NULL;
    *bytes = sizeof(gcfg_region) + nw * sizeof(uint64_t) + (size_t)w->n_rx * 8 + tb;
    gcfg_region *r = malloc(*bytes);
    if (!r) return NULL;
    r->next = NULL;
    r->hash = hash;
    r->n_lab = w->rg_n;
    r->n_exit = w->n_rx;
    memcpy(r->bits, w->bits, nw * sizeof *r->bits);
    r->exit = (uint32_t(*)[2])(r->bits + nw);
    if (w->n_rx) memcpy(r->exit, w->rx, (size_t)w->n_rx * 8);
    r->table = (uint8_t *)(r->exit + w->n_rx);
    memcpy(r->table, w->rg_table, tb);
    return r;
}

/* Publishes r in rc if the budget allows (then rc owns it). */
static bool region_publish(struct gcfg_rcache *rc, gcfg_region *r, size_t bytes) {
    uint64_t before = atomic_fetch_add_explicit(&rc->used, bytes, memory_order_relaxed);
    if (before + bytes > RG_BUDGET) {
        atomic_fetch_sub_explicit(&rc->used, bytes, memory_order_relaxed);
        return false;
    }
    _Atomic(gcfg_region *) *hd = &rc->head[r->hash % RG_BUCKETS];
    gcfg_region *old = atomic_load_explicit(hd, memory_order_acquire);
    do {
        r->next = old;
    } while (!atomic_compare_exchange_weak_explicit(hd, &old, r, memory_order_release,
                                                    memory_order_acquire));
    return true;
}

/* The entry of s through its region (heap), or NULL: s has no region, or
 * something failed (the caller then walks as usual). */
static gcfg_entry *region_entry(gcfg_walker *w, const grammar_vocab *v, uint32_t s) {
    uint64_t h;
    if (tr_cfg_regions_off || !region_find(w, s, &h)) return NULL;
    struct gcfg_rcache *rc = rcache_of(v);
    if (!rc) return NULL;
    size_t tb = (size_t)w->rg_n * 256, nw = v->n_words, bytes = 0;
    const gcfg_region *r = atomic_load_explicit(&rc->head[h % RG_BUCKETS], memory_order_acquire);
    while (r && !(r->hash == h && r->n_lab == w->rg_n && !memcmp(r->table, w->rg_table, tb)))
        r = r->next;
    gcfg_region *own = NULL;
    if (!r) {
        if (!(own = region_compute(w, v, s, h, &bytes))) return NULL;
        r = own;
        if (region_publish(rc, own, bytes)) own = NULL;
    }
    gcfg_ctx *x = &w->x;
    x->per = &w->none;
    x->per_fh = NULL;
    tr_cfg_ctx_reset(x);
    w->ci = true;
    w->n_esc = 0;
    w->run0 = 0; /* an exit leaves a region state: no run before it */
    memcpy(w->bits, r->bits, nw * sizeof *w->bits);
    w->bits[nw] = 0;
    w->bits_clean = false;
    w->sum_ok = false;
    const gtrie *tr = &v->trie;
    /* A region state has neither call nor return: its closure is itself,
     * and a leaf exit (a token whose last byte leaves the region) is one
     * step, as walk() would take it (17 exits per entry on the dev
     * schemas). */
    if (!tr_cset_reserve(&w->tmp, 1)) {
        free(own);
        return NULL;
    }
    for (uint32_t k = 0; k < r->n_exit && !x->err; k++) {
        uint32_t node = r->exit[k][0], st = w->rg_state[r->exit[k][1]];
        if (tr->next[node] == node + 1) {
            uint32_t id = tr->tok[node];
            if (gl_step(x->cfg, st, tr->byte[node]) != GDFA_DEAD)
                w->bits[id >> 6] |= 1ull << (id & 63);
            continue;
        }
        w->tmp.c[0] = (gcfg_config){st, 0};
        w->tmp.n = 1;
        walk(w, v, tr->depth[node] - 1u, node, tr->next[node], w->bits, false);
    }
    free(own);
    return entry_pack(w, nw, false);
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
    w->run0 = 0; /* after a run of blanks, fill_mask drops the tokens too long */
    size_t nw = v->n_words;
    gcfg_config start = {s, 0};
    w->tmp.n = 0;
    bool esc0 = tr_cfg_closure(x, &start, 1, &w->tmp);
    bool comp = !x->err && prefer_complement(w, v);
    bits_start(w, v, comp);
    if (!x->err) walk(w, v, 0, 1, v->trie.n_nodes, w->bits, comp);
    return entry_pack(w, nw, esc0);
}

/* The entry made of w->bits and w->esc after a stack-independent walk
 * (heap; NULL when the walk failed or on out-of-memory). */
static gcfg_entry *entry_pack(gcfg_walker *w, size_t nw, bool esc0) {
    gcfg_ctx *x = &w->x;
    bool overflow = x->err == TR_ERR_LIMIT;
    if ((x->err && !overflow) || gl_failed(x->cfg)) return NULL; /* never memoized */
    uint32_t n_esc = overflow ? 0 : w->n_esc;
    /* the nonzero words, found a block of 4 at a time (a narrow state's
     * few tokens sit in a few blocks); their indexes into w->nzi */
    size_t nz = 0, j = 0;
    const uint64_t *bw = w->bits;
    if (w->sum_ok) { /* the words the walk set, in increasing order */
        for (size_t k = 0; k <= nw / 64 && nz <= nw / 4; k++)
            for (uint64_t m = w->sum[k]; m && nz <= nw / 4; m &= m - 1) {
                size_t q = k * 64 + (size_t)__builtin_ctzll(m);
                if (q < nw) w->nzi[nz++] = (uint32_t)q;
            }
        j = nw; /* skip the scan */
    }
    for (; j + 4 <= nw && nz <= nw / 4; j += 4)
        if (bw[j] | bw[j + 1] | bw[j + 2] | bw[j + 3])
            for (size_t q = j; q < j + 4; q++) {
                w->nzi[nz] = (uint32_t)q;
                nz += bw[q] != 0;
            }
    for (; j < nw && nz <= nw / 4; j++) {
        w->nzi[nz] = (uint32_t)j;
        nz += bw[j] != 0;
    }
    bool dense = nz > nw / 4;
    size_t n_bits = dense ? nw : nz;
    size_t size = sizeof(gcfg_entry) + n_bits * sizeof(uint64_t) +
                  (size_t)n_esc * sizeof *w->esc + (dense ? 0 : nz * sizeof(uint32_t));
    gcfg_entry *e = malloc(size);
    if (!e) return NULL;
    e->n_esc = n_esc;
    e->escape0 = esc0;
    e->overflow = overflow;
    e->esc = (uint32_t(*)[2])(e->bits + n_bits);
    if (n_esc) memcpy(e->esc, w->esc, n_esc * sizeof *w->esc);
    if (dense) {
        e->n_nz = ENTRY_DENSE;
        e->idx = NULL;
        memcpy(e->bits, w->bits, nw * sizeof *e->bits);
        return e;
    }
    e->n_nz = (uint32_t)nz;
    e->idx = (uint32_t *)(e->esc + n_esc);
    for (size_t k = 0; k < nz; k++) {
        e->idx[k] = w->nzi[k];
        e->bits[k] = bw[w->nzi[k]];
        w->bits[w->nzi[k]] = 0;
    }
    w->bits[nw] = 0; /* the "no token" bit */
    w->bits_clean = true;
    return e;
}

static size_t entry_size(const gcfg_entry *e, size_t nw) {
    size_t n = e->n_nz == ENTRY_DENSE ? nw * sizeof(uint64_t) : e->n_nz * 12u;
    return sizeof *e + n + (size_t)e->n_esc * 8;
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
    gcfg_entry *e = region_entry(c->w, v, s);
    if (!e) e = compute_entry(c->w, v, s);
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

/* The whitespace run at an escape point (trie node at depth dp): the
 * blanks that end the node's dp bytes, plus the matcher's own run when
 * they are all blanks. Counted on the text, which may count more blanks
 * than the automaton does (never fewer): at worst a token is refused
 * that could have been taken. JSON's escape points follow a closing
 * bracket, where the run is 0. */
static uint32_t escape_run(const grammar_vocab *v, const gcfg_matcher *c, uint32_t node,
                           uint32_t dp) {
    if (!c->x.cfg->ws_bound) return 0;
    const gtrie *tr = &v->trie;
    int32_t id = (int32_t)tr->ptoks[tr->pfirst[node]]; /* its first dp bytes are the node's */
    const uint8_t *p = v->bytes + v->offs[id];
    uint32_t r = 0;
    while (r < dp && tr_is_json_ws(p[dp - 1 - r])) r++;
    return r == dp ? r + c->ws_run : r;
}

/* Clears the tokens whose leading blanks are more than `room` (after a
 * run of blanks, a mask made from a memo entry counts from 0). */
static void drop_long_blanks(const grammar_vocab *v, uint32_t room, uint64_t *mask) {
    for (uint32_t k = 0; k < v->n_ws_lead && v->ws_lead_len[k] > room; k++) {
        int32_t id = v->ws_lead_ids[k];
        mask[(uint32_t)id >> 6] &= ~(1ull << (id & 63));
    }
}

/* Run-time walk from configuration (s, f) with the real stack, over the
 * trie nodes [i0, i1) below depth d0. Returns whether the input may end
 * at (s, f) itself. */
static bool walk_real(gcfg_walker *w, const grammar_vocab *v,
                      const gcfg_matcher *c, uint32_t s,
                      uint32_t f, uint32_t d0, uint32_t run0, uint32_t i0, uint32_t i1,
                      uint64_t *mask) {
    gcfg_ctx *x = &w->x;
    x->per = &c->per;
    x->per_fh = c->fh;
    x->per_fh_cap = c->fh_cap;
    tr_status keep = x->err;
    tr_cfg_ctx_reset(x);
    x->err = keep;
    w->ci = false;
    w->run0 = run0;
    gcfg_config start = {s, f};
    w->tmp.n = 0;
    bool end = tr_cfg_closure(x, &start, 1, &w->tmp);
    if (!x->err && w->tmp.n) walk(w, v, d0, i0, i1, mask, false);
    return end;
}

/* The mask being built, moved from the caller's words to the matcher's
 * scratch (n_words + 1 words) before a run-time walk: a walk sets the
 * "no token" bit n_vocab, past the caller's last word when n_vocab is a
 * multiple of 64 (SmolLM2). Masks made of memo entries alone (most) are
 * built in place, without a 6 KiB clear and copy more. */
static uint64_t *in_scratch(grammar_matcher *m, uint64_t *mask, size_t nw) {
    if (mask == m->scratch) return mask;
    memcpy(m->scratch, mask, nw * sizeof *mask);
    m->scratch[nw] = 0;
    return m->scratch;
}

tr_status tr_cfgm_fill_mask(grammar_matcher *m, uint64_t *out) {
    gcfg_matcher *c = m->cfg;
    const grammar_vocab *v = m->v;
    size_t nw = v->n_words;
    if (!c->w && !(c->w = walker_new(m->g, v))) return TR_ERR_NOMEM;
    gcfg_walker *w = c->w;
    uint64_t *mask = out;
    memset(mask, 0, nw * sizeof *mask); /* also the empty mask of a failure */
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
            mask = in_scratch(m, mask, nw);
            eog |= walk_real(w, v, c, cf.state, cf.frame, 0, c->ws_run, 1, tr->n_nodes, mask);
        } else {
            if (done_add(w, cf.state))
                entry_or(e, nw, mask);
            if (cf.frame != 0) {
                uint32_t rs = c->per.ret[cf.frame], rf = c->per.parent[cf.frame];
                if (e->n_esc) mask = in_scratch(m, mask, nw);
                for (uint32_t j = 0; j < e->n_esc && !w->x.err; j++) {
                    uint32_t node = e->esc[j][0], dp = e->esc[j][1];
                    walk_real(w, v, c, rs, rf, dp, escape_run(v, c, node, dp), node + 1,
                              tr->next[node], mask);
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
    if (st) {
        memset(out, 0, nw * sizeof *out);
        return st;
    }
    /* the "no token" bit, blanks past the bound, duplicates of allowed
     * tokens, end of generation */
    uint32_t none = (uint32_t)v->n_vocab;
    if (mask != out || none >> 6 < nw) mask[none >> 6] &= ~(1ull << (none & 63));
    if (c->ws_run) drop_long_blanks(v, m->g->cfg->ws_bound - c->ws_run, mask);
    for (uint32_t j = 0; j < v->n_dups; j++) {
        int32_t r = v->dups[j][0], u = v->dups[j][1];
        if (mask[(uint32_t)r >> 6] >> (r & 63) & 1)
            mask[(uint32_t)u >> 6] |= 1ull << (u & 63);
    }
    if (eog)
        for (size_t e = 0; e < v->n_eog; e++)
            mask[v->eog[e] >> 6] |= 1ull << (v->eog[e] & 63);
    if (mask != out) memcpy(out, mask, nw * sizeof *out);
    if (computed) m->n_computed++;
    return TR_OK;
}
