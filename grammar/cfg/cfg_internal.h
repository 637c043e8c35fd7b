/* cfg_internal.h — how grammar/cfg/ works inside: EBNF text to an IR,
 * the IR to one pushdown automaton, and the matcher's stacks. Shared by
 * the files of grammar/cfg/ and by its tests and benchmark only; the
 * layers above use cfg.h.
 *
 * Pipeline of a grammar text:
 *
 *   text --ebnf_parse.c--> rules, each body an IR tree (gre_node: the regex
 *                          AST's sets, sequences, choices, repetitions, plus
 *                          GRE_REF rule references and GRE_DFA terminals)
 *        --ebnf_analyze.c-> direct left recursion rewritten (A ::= A x | y
 *                          becomes A ::= y x*), unproductive parts dropped,
 *                          other left recursion refused, rules inlined until
 *                          only a few recursive ones remain ("kept")
 *        --ebnf_nfa.c-----> the kept bodies as one NFA whose rule references
 *                          are CALL edges (equal pieces with equal futures
 *                          built once)
 *   cfg_dfa.c: its DFA, states made on demand (subset construction with a
 *              column per call symbol), shared lock-free by all threads
 *   cfg.c: configurations (DFA state + stack), closures, byte steps
 *   cfg_mask.c: token masks (memoized stack-independent part + residue)
 *   cfg_matcher.c: the matcher API over a set of configurations
 *
 * The automaton. A position is a DFA state. A byte moves along the byte
 * table as for a regex. A call edge s --Q--> t enters rule Q: push t,
 * continue at Q's start state. An accepting state may return: pop t,
 * continue at t. A configuration is (state, frame), the frame being the
 * stack of return states as a persistent linked list (parent pointers):
 * configurations that share a stack tail share its frames, so copying a
 * set of configurations (rollback history) copies two words each. The
 * grammar is not determinized across calls, so the matcher follows a set
 * of configurations (a GLR-like frontier); for the grammars JSON Schema
 * produces it holds one or two.
 *
 * Frames. Frame 0 is the bottom of every stack (popping it means "the
 * input may end here"). Persistent frames (the matcher's, hash-consed so
 * equal stacks are one id) have ids below GF_SCR; scratch frames, made by
 * checks that must not change the matcher (masks, token_allowed, forced
 * bytes), have GF_SCR set and are dropped after the operation.
 */
#ifndef TR_GRAMMAR_CFG_INTERNAL_H
#define TR_GRAMMAR_CFG_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "grammar/cfg/cfg.h"

/* ---------------------------------------------------------------------
 * IR of a grammar text (ebnf_parse.c, ebnf_analyze.c)
 * ------------------------------------------------------------------- */

typedef struct gebnf_rule {
    const char *name; /* into the text; not NUL-terminated */
    uint32_t name_len;
    uint32_t def_off;   /* byte offset of the definition (its name) */
    uint32_t ref_off;   /* first reference (for "undefined rule") */
    bool defined;
    gre_node *body;     /* NULL: the rule matches no string at all */
} gebnf_rule;

typedef struct gebnf {
    const uint8_t *text;
    size_t len;
    gebnf_rule *rules; /* arena */
    uint32_t n_rules, cap_rules;
    uint32_t root;     /* index of `root` */
    /* name -> rule index + 1, open addressing (arena) */
    uint32_t *names;
    uint32_t names_cap;
    /* regex terminals compiled on their own (they had anchors); their
     * tables are heap memory, freed by tr_ebnf_free */
    gdfa **dfas;
    uint32_t n_dfas, cap_dfas;
    uint32_t n_nodes;  /* IR nodes made (size budget) */
} gebnf;

/* Parses text[0..len) into e (IR in cc's arena). Errors TR_ERR_FORMAT /
 * TR_ERR_UNSUPPORTED / TR_ERR_LIMIT with the diag's offset, line and
 * column at the fault. ext[0..n_ext) are automata the text may name as
 * terminals, `%dfaN` for ext[N] (borrowed; NULL/0: the syntax is an
 * error, as in every user's grammar). */
tr_status tr_ebnf_parse(gcc *cc, const char *text, size_t len, const gdfa *const *ext,
                        uint32_t n_ext, gebnf *e);
void tr_ebnf_free(gebnf *e);
/* Fills the diag's line and column for a byte offset of e's text (the
 * first error only: a later call leaves an earlier position alone). */
void tr_ebnf_diag_at(gcc *cc, const gebnf *e, uint64_t off);

/* The kept rules after analysis: the rules that stay calls, root first. */
typedef struct gebnf_plan {
    uint32_t n_kept;
    uint32_t *kept;        /* [n_kept] rule indices, kept[0] = root */
    uint32_t *sym_of_rule; /* [n_rules] call symbol, UINT32_MAX if inlined */
    gre_node **bodies;     /* [n_kept] bodies with inlined rules substituted */
    bool left_rewritten;   /* some rule's direct left recursion was rewritten */
} gebnf_plan;

/* Rewrites direct left recursion, drops unproductive parts, refuses
 * other left recursion (TR_ERR_UNSUPPORTED naming the rules), decides
 * what to inline and substitutes it. Errors with the diag set. */
tr_status tr_ebnf_analyze(gcc *cc, gebnf *e, gebnf_plan *plan);

/* The NFA of a grammar (ebnf_nfa.c): bodies[i] (the plan's, modified:
 * equal nodes merged) entered at starts[i], every one ending in the one
 * shared final state ("the rule may return here"). A GRE_REF node to rule
 * r becomes a CALL edge on symbol sym_of_rule[r]; GRE_DFA nodes are copied
 * state by state; a piece built twice into the same state is built once.
 * Heap arrays accounted in cc; free with tr_nfa_free. On failure *at is
 * the index of the body being built (n when none was). */
tr_status tr_ebnf_nfa_build(gcc *cc, gre_node *const *bodies, uint32_t n,
                            const uint32_t *sym_of_rule, gnfa *out, uint32_t *starts,
                            uint32_t *at);

/* ---------------------------------------------------------------------
 * The grammar's automaton, built lazily (cfg_dfa.c)
 * ------------------------------------------------------------------- */

/* per-state flags */
#define GCFG_CALLS 1u  /* has call edges */
#define GCFG_ACCEPT 2u /* may return (pop) */
#define GCFG_BYTES 4u  /* has a live byte transition */

#define GL_CH 256u /* DFA states per chunk */

typedef struct gl_call {
    uint32_t start; /* the callee's start state */
    uint32_t ret;   /* where to continue when it returns */
} gl_call;

/* A consuming NFA edge as a range of columns: byte classes [0, n_cls),
 * then call symbol y at column n_cls + y. */
typedef struct gl_edge {
    uint32_t to, c0, c1;
} gl_edge;

/* GL_CH DFA states; never moved once published. A state's row and info
 * are valid once ready[i] reads 1 (acquire). */
typedef struct gl_chunk {
    _Atomic uint8_t ready[GL_CH];
    uint8_t accept[GL_CH];
    uint8_t flags[GL_CH]; /* GCFG_* */
    uint8_t tail[GL_CH];  /* see tr_cfg_tail */
    int16_t only[GL_CH];  /* the one live byte, -1 several, -2 none */
    uint32_t ncall[GL_CH];
    gl_call *calls[GL_CH];
    uint64_t aloop[GL_CH][2]; /* ASCII bytes leading back to the state
                               * (bounded whitespace excepted: gl_wsl) */
    uint8_t wsl[GL_CH];       /* a bounded whitespace loop (gl_wsl) */
    uint32_t rows[];          /* [GL_CH * n_cls] next state per class, then
                               * [GL_CH][4] uint64_t: the bytes with a
                               * transition (gl_chunk_live; mask walks find
                               * a state's next live byte in a word). Both
                               * written when the state is made, never
                               * cleared before: a chunk's header is
                               * cleared when it is created, and every
                               * page a compile touches costs a fault in
                               * MaskBench's worker (~5 us) */
} gl_chunk;

/* State i of chunk ch's live bytes (4 words; n_cls columns per row). */
static inline uint64_t *gl_chunk_live(gl_chunk *ch, uint32_t n_cls, uint32_t i) {
    return (uint64_t *)(ch->rows + (size_t)GL_CH * n_cls) + (size_t)i * 4;
}

/* The automaton of a grammar: the kept rules' NFA (immutable), and its
 * DFA made state by state the first time a matcher needs one (subset
 * construction on demand: compiling costs the NFA only, and a grammar
 * pays for the states its outputs visit; the JSON any-value grammar
 * reaches a few dozen of its ~740 states in a typical document). Not
 * minimized: trimming comes from the NFA (its dead states never enter a
 * subset), so every state but 0 can still complete. Shared by every
 * thread using the grammar: states are created and expanded under
 * `lock`; readers find them through atomic chunk pointers and ready
 * flags (release/acquire), never locking on the hot path. Past
 * max_states, expansion fails: the state gets no transition and
 * `failed` is set, which every matcher call checks (TR_ERR_LIMIT). */
typedef struct gcfg {
    /* the NFA, immutable after compile */
    uint32_t n_nfa, nfa_final;
    uint32_t *c_off; /* [n_nfa + 1] consuming edges of live states */
    gl_edge *c_edge;
    uint32_t *e_off; /* [n_nfa + 1] epsilon edges to live states */
    uint32_t *e_to;
    uint8_t cls[256];
    uint16_t cls_size[256]; /* bytes per class */
    uint8_t cls_byte[256];  /* a byte of each class */
    uint32_t n_cls, n_sym, k; /* k = n_cls + n_sym columns */
    /* the kept rules: their start states; root is rule 0 */
    uint32_t n_kept;
    uint32_t *rule_start;
    char **rule_name;
    uint32_t max_stacks;  /* live configurations a matcher may track */
    uint32_t max_states;
    /* Bounded whitespace (JSON's flexible mode; 0: none). A state whose
     * four whitespace bytes (space, tab, LF, CR) all lead back to itself
     * is a whitespace loop (gl_wsl); a whitespace byte that lands in one
     * extends the current run, any other byte ends it, and a run longer
     * than ws_bound is refused (tr_cfg_ws_run). The automaton thus keeps
     * one state per place where blanks may go instead of a counter state
     * per length, which multiplied the states a mask walk makes at every
     * key and value; matchers, mask walks and the memo's run-time
     * correction count instead. Sound for grammars where such a loop is
     * the only way to consume raw whitespace at that point (JSON: raw
     * tab, LF and CR never occur inside a string). */
    uint32_t ws_bound;
    /* The bytes that can come right after a rule returns, in any context
     * (what every call's return point can consume first). A mask walk
     * only records a return inside a token where the next byte of some
     * longer token is one of these: in an expression grammar an
     * identifier could end after each of its letters, but only ')' may
     * follow, so the letters' subtrees need no run-time check. */
    uint64_t follow[4];
    /* DFA states */
    _Atomic(gl_chunk *) *chunks; /* [n_slots] */
    uint32_t n_slots;
    _Atomic uint32_t n_states;
    _Atomic int failed; /* 0, or TR_ERR_LIMIT / TR_ERR_NOMEM */
    pthread_mutex_t lock;
    /* under lock: subset keys [accept, sorted consuming NFA states] and
     * the expansion's scratch */
    uint32_t *pool, *koff, *klen, *ht;
    size_t pool_n, pool_cap;
    uint32_t kcap, ht_cap;
    uint32_t *stack, *mark, *out, *bo, *bucket, *memo_t, *memo_used;
    struct gl_run *runs; /* [k] an expansion's targets, runs of columns */
    bool by_column;      /* tests: bucket every state's targets per column
                          * (the way for subsets with many edges), to
                          * compare with the way by ranges; set before any
                          * state is expanded */
    uint64_t *memo_h;
    uint32_t *memo_off, *memo_len;
    uint32_t gen, bucket_cap, memo_cap;
    _Atomic uint64_t bytes; /* held by the DFA so far (stats) */
} gcfg;

/* Compile time: the automaton of the kept rules (starts[i] is rule i's
 * NFA start; names borrowed and copied). Takes nothing from nfa (it is
 * copied in compact form). Errors set cc's diag. */
tr_status tr_cfg_new(gcc *cc, const gnfa *nfa, const uint32_t *starts,
                     const char *const *names, const uint32_t *name_lens,
                     uint32_t n_kept, uint32_t ws_bound, gcfg **out);
/* Makes state s's row and info (slow path, takes the lock). */
void tr_cfg_expand(gcfg *c, uint32_t s);
/* States made so far. */
static inline uint32_t tr_cfg_n_states(const gcfg *c) {
    return atomic_load_explicit(&((gcfg *)c)->n_states, memory_order_acquire);
}

static inline gl_chunk *gl_ready(gcfg *c, uint32_t s) {
    gl_chunk *ch = atomic_load_explicit(&c->chunks[s / GL_CH], memory_order_acquire);
    if (!atomic_load_explicit(&ch->ready[s % GL_CH], memory_order_acquire))
        tr_cfg_expand(c, s);
    return ch;
}
static inline uint32_t gl_step(gcfg *c, uint32_t s, uint8_t b) {
    return gl_ready(c, s)->rows[(s % GL_CH) * c->n_cls + c->cls[b]];
}
static inline uint8_t gl_flags(gcfg *c, uint32_t s) {
    return gl_ready(c, s)->flags[s % GL_CH];
}
/* A call returning to s would only return again (s accepts and has no
 * transition): the caller's frame is not pushed (a tail call; keeps
 * right-recursive lists at a constant stack depth). */
static inline bool gl_tail(gcfg *c, uint32_t s) { return gl_ready(c, s)->tail[s % GL_CH]; }
static inline int16_t gl_only(gcfg *c, uint32_t s) { return gl_ready(c, s)->only[s % GL_CH]; }
static inline const uint64_t *gl_aloop(gcfg *c, uint32_t s) {
    return gl_ready(c, s)->aloop[s % GL_CH];
}
/* Whether s is a bounded whitespace loop (see gcfg.ws_bound). */
static inline bool gl_wsl(gcfg *c, uint32_t s) { return gl_ready(c, s)->wsl[s % GL_CH]; }
static inline const uint64_t *gl_live(gcfg *c, uint32_t s) {
    return gl_chunk_live(gl_ready(c, s), c->n_cls, s % GL_CH);
}
static inline const gl_call *gl_calls(gcfg *c, uint32_t s, uint32_t *n) {
    gl_chunk *ch = gl_ready(c, s);
    *n = ch->ncall[s % GL_CH];
    return ch->calls[s % GL_CH];
}
static inline tr_status gl_failed(const gcfg *c) {
    return (tr_status)atomic_load_explicit(&((gcfg *)c)->failed, memory_order_acquire);
}

/* ---------------------------------------------------------------------
 * Configurations and frames (cfg.c)
 * ------------------------------------------------------------------- */

#define GF_SCR 0x80000000u /* scratch frame id bit */

typedef struct gcfg_config {
    uint32_t state; /* DFA state, never GDFA_DEAD */
    uint32_t frame; /* stack: persistent id, or scratch id | GF_SCR */
} gcfg_config;

typedef struct gfstore {
    uint32_t *ret;    /* [cap] return state */
    uint32_t *parent; /* [cap] parent frame id */
    uint32_t n, cap;
} gfstore;

/* A growable set of configurations. */
typedef struct gcset {
    gcfg_config *c;
    uint32_t n, cap;
} gcset;

/* A hash index over one gcset while a closure or a step fills it, so that
 * the duplicate check stays constant-time when an ambiguous grammar makes
 * thousands of configurations (a linear scan made such closures
 * quadratic). Built only once the set holds GCIDX_MIN entries: the sets
 * of JSON Schema grammars hold one or two. The set may only grow while it
 * is indexed (entries are appended; a shorter set rebuilds the index). */
#define GCIDX_MIN 32u

typedef struct gcidx {
    const gcset *set; /* the set indexed during this call, or NULL */
    uint32_t covered; /* set->c[0, covered) are in slot[] */
    uint32_t *slot;   /* position + 1, 0 empty; open addressing */
    uint32_t cap;     /* slots in use: a power of two, more than twice
                         covered */
    uint32_t alloc;   /* slots allocated (>= cap) */
} gcidx;

/* The whitespace run after byte b took a configuration set to the n
 * configurations of set, from a run of `run` bytes before it (see
 * gcfg.ws_bound); past the bound, UINT32_MAX: the byte is refused. */
static inline uint32_t tr_cfg_ws_run(gcfg *c, const gcfg_config *set, uint32_t n, uint8_t b,
                                     uint32_t run) {
    if (!c->ws_bound || !tr_is_json_ws(b)) return 0;
    for (uint32_t k = 0; k < n; k++)
        if (gl_wsl(c, set[k].state)) return run + 1 > c->ws_bound ? UINT32_MAX : run + 1;
    return 0;
}

/* Slot of frame (ret, parent) in a hash table of cap (a power of two)
 * entries; shared by the persistent and the scratch tables. */
static inline uint32_t gf_slot(uint32_t ret, uint32_t parent, uint32_t cap) {
    uint64_t h = ((uint64_t)ret << 32 | parent) * 0x9E3779B97F4A7C15ULL;
    return (uint32_t)(h >> 32) & (cap - 1);
}

/* What the closure and step functions need: the automaton, the frame
 * stores, scratch sets, budgets, and a sticky error.
 *
 * Frames are canonical: equal stacks have one id, so configurations
 * deduplicate exactly (without it an ambiguous grammar multiplies equal
 * stacks until the budget). A scratch push first looks for an equal
 * persistent frame (per_fh), then for an equal scratch frame (sh: ids
 * + 1, entries checked against the store, since walks drop scratch
 * frames by truncating scr.n and leave stale slots behind). */
typedef struct gcfg_ctx {
    gcfg *cfg;          /* grows as states are needed */
    const gfstore *per; /* persistent frames (read only here) */
    const uint32_t *per_fh; /* their hash table (ids, 0 empty) or NULL */
    uint32_t per_fh_cap;
    gfstore scr;        /* scratch frames (owned) */
    uint32_t *sh;       /* scratch hash table (ids + 1, 0 empty) */
    uint32_t sh_cap, sh_used;
    gcset work, seen;   /* closure scratch */
    gcidx out_ix, seen_ix; /* dedup indexes of the set being filled, seen */
    tr_status err;      /* first failure: TR_ERR_NOMEM or TR_ERR_LIMIT */
} gcfg_ctx;

void tr_cfg_ctx_init(gcfg_ctx *x, gcfg *cfg, const gfstore *per);
void tr_cfg_ctx_deinit(gcfg_ctx *x);
/* Drops every scratch frame and clears the error (start of an operation). */
void tr_cfg_ctx_reset(gcfg_ctx *x);

static inline uint32_t gf_ret(const gcfg_ctx *x, uint32_t f) {
    return (f & GF_SCR) ? x->scr.ret[f & ~GF_SCR] : x->per->ret[f];
}
static inline uint32_t gf_parent(const gcfg_ctx *x, uint32_t f) {
    return (f & GF_SCR) ? x->scr.parent[f & ~GF_SCR] : x->per->parent[f];
}

bool tr_cset_reserve(gcset *s, uint32_t need);
void tr_cset_free(gcset *s);
/* Appends c unless present; false on out-of-memory (x->err set) or when
 * the set would exceed the budget (x->err = TR_ERR_LIMIT). */
bool tr_cset_add(gcfg_ctx *x, gcset *s, uint32_t state, uint32_t frame);

/* Appends to out (deduplicated) the closure of the configurations in[]:
 * every configuration reachable without consuming a byte (calls push,
 * accepting states pop), keeping those with a live byte transition.
 * Returns true if some configuration returns from frame 0 (the input
 * may end here; in a stack-independent walk: "the rule may return").
 * Scratch frames for pushes go to x->scr. */
bool tr_cfg_closure(gcfg_ctx *x, const gcfg_config *in, uint32_t n_in,
                    gcset *out);
/* out = configurations of closed[] after byte b (deduplicated). */
void tr_cfg_step(gcfg_ctx *x, const gcfg_config *closed, uint32_t n,
                 uint8_t b, gcset *out);


/* ---------------------------------------------------------------------
 * Matcher over configurations (cfg_matcher.c) and its masks (cfg_mask.c)
 * ------------------------------------------------------------------- */

typedef struct gcfg_hist {
    gcfg_config *c;
    uint32_t n, cap;
    uint32_t ws_run;
} gcfg_hist;

struct gcfg_walker;

/* The context-free state of one grammar_matcher. The kernel set `cur`
 * holds the configurations right after the last byte (before closure),
 * their frames persistent. History entry i (parallel to the matcher's
 * ring) is a copy of `cur` before an accept call. Persistent frames are
 * hash-consed (equal stacks are one id, so sets deduplicate exactly) and
 * collected (mark from cur and history, compact: parents always have
 * lower ids than their children) when their count doubles. */
typedef struct gcfg_matcher {
    gfstore per;           /* [0] is the bottom of every stack */
    uint32_t *fh;          /* (ret, parent) -> id, open addressing, 0 empty */
    uint32_t fh_cap;
    gcset cur;
    uint32_t ws_run;       /* whitespace bytes just taken (gcfg.ws_bound) */
    uint32_t a_run;        /* run_bytes: the run after its bytes */
    gcfg_hist *hist;       /* [the matcher's hist_cap] */
    gcfg_ctx x;            /* scratch frames and closure lists */
    gcset a, b;            /* scratch sets */
    gcset chain;           /* persist() scratch */
    uint32_t gc_at;        /* collect when per.n reaches this */
    struct gcfg_walker *w; /* mask walker (cfg_mask.c) */
    struct gcfg_memo *memo;/* the grammar's memo for this vocabulary */
} gcfg_matcher;

/* Masks (cfg_mask.c). */
void tr_cfg_walker_free(struct gcfg_walker *w);
struct gcfg_memo *tr_cfg_memo_for(grammar *g, const grammar_vocab *v);
/* Tests and benchmarks only: true makes every cold entry a whole walk
 * (regions, cfg_mask.c, unused), to compare the two. Set it before
 * any matcher runs. */
extern bool tr_cfg_regions_off;

#endif
