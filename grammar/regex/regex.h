/* grammar_internal.h — the pieces behind grammar.h, shared by the files of
 * grammar/ and by its tests and benchmark (never by other modules).
 *
 * Pipeline of a regex:
 *
 *   pattern --regex_parse.c--> AST (gre_node, code-point sets)
 *           --nfa.c----------> byte NFA (Thompson; code-point ranges
 *                              expanded to UTF-8 byte-range sequences)
 *           --dfa.c----------> DFA by subset construction over byte
 *                              classes, trimmed, Hopcroft-minimized
 *   DFA + vocabulary trie (vocab.c) --mask.c--> token masks, memoized per
 *                              (DFA, state) in a gmask_cache
 *   matcher.c: one sequence's position in the DFA, with rollback history.
 *
 * Everything built during compilation is accounted against one budget
 * (gcc: bytes, time, state counts) so that hostile patterns fail cleanly.
 *
 * The DFA + trie + mask-cache trio is deliberately independent of where
 * the DFA came from: the JSON Schema / EBNF compilers reuse it for their
 * regular terminals (one gmask_cache per terminal DFA and vocabulary).
 */
#ifndef TR_GRAMMAR_INTERNAL_H
#define TR_GRAMMAR_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "grammar/grammar.h"
#include "base/status.h"
#include "base/utf8.h"
#include "base/util.h"

/* ---------------------------------------------------------------------
 * Compile context: budgets and the scratch arena
 * ------------------------------------------------------------------- */

typedef struct garena_chunk garena_chunk;

typedef struct gcc {
    grammar_limits lim;
    tr_diag *diag;
    tr_status err;        /* first error reported through tr_gcc_fail */
    uint64_t bytes;       /* accounted bytes currently held */
    uint64_t deadline_ns; /* tr_now_ns() value past which we give up */
    uint32_t tick;        /* time is polled every 1024 ticks */
    garena_chunk *chunks; /* arena: freed all at once by tr_gcc_deinit */
    uint8_t *cur;
    size_t left;
} gcc;

void tr_gcc_init(gcc *cc, const grammar_limits *lim, tr_diag *diag);
void tr_gcc_deinit(gcc *cc);
/* Arena allocation (zeroed, 16-byte aligned), accounted. NULL after
 * setting the diag (TR_ERR_LIMIT or TR_ERR_NOMEM) on failure. */
void *tr_gcc_alloc(gcc *cc, size_t size);
/* Accounts bytes of a heap block the caller manages itself (grows
 * tables): true and diag set if the budget would be exceeded. */
bool tr_gcc_charge(gcc *cc, size_t size);
void tr_gcc_refund(gcc *cc, size_t size);
/* Grows a heap array *p of *cap elements of size es to hold at least need
 * (doubling), accounting the growth. TR_OK, TR_ERR_LIMIT or TR_ERR_NOMEM
 * (diag set; *p unchanged). */
tr_status tr_gcc_grow(gcc *cc, void **p, uint32_t *cap, size_t es, uint64_t need);
/* JSON's whitespace bytes: space, tab, LF, CR. */
static inline bool tr_is_json_ws(uint8_t b) {
    return b == ' ' || b == '\t' || b == '\n' || b == '\r';
}
/* TR_ERR_LIMIT (diag set) when the time budget is spent; cheap: reads the
 * clock once every 1024 calls. */
tr_status tr_gcc_poll_time(gcc *cc);
/* The same check at every call: for loops whose steps are long (one
 * state of an array automaton can take a millisecond). */
tr_status tr_gcc_check_time(gcc *cc);
/* Records an error (the first one wins: later ones are consequences),
 * fills the diag, and returns the recorded error. */
tr_status tr_gcc_fail(gcc *cc, tr_status code, uint64_t offset, const char *fmt,
                   ...) __attribute__((format(printf, 4, 5)));

/* ---------------------------------------------------------------------
 * Code-point sets and Unicode data (cpset.c, unicode_tables.c)
 * ------------------------------------------------------------------- */

#define GCP_MAX 0x10FFFFu
#define GCP_SURR_LO 0xD800u
#define GCP_SURR_HI 0xDFFFu

/* A set of code points: sorted, disjoint, non-adjacent ranges [lo, hi],
 * never containing surrogates (UTF-8 cannot encode them). Arena memory. */
typedef struct gcpset {
    uint32_t (*r)[2];
    uint32_t n, cap;
} gcpset;

tr_status tr_cpset_add(gcc *cc, gcpset *s, uint32_t lo, uint32_t hi);
tr_status tr_cpset_add_set(gcc *cc, gcpset *s, const gcpset *t);
tr_status tr_cpset_add_table(gcc *cc, gcpset *s, const uint32_t (*r)[2],
                           size_t n);
/* Normalizes (sort + merge) in place. */
void tr_cpset_normalize(gcpset *s);
/* *out = complement of s over [0, 0x10FFFF] minus surrogates; s must be
 * normalized. */
tr_status tr_cpset_complement(gcc *cc, const gcpset *s, gcpset *out);
bool tr_cpset_contains(const gcpset *s, uint32_t cp); /* normalized s */

typedef struct gunicode_category {
    const char *name; /* two letters: "Lu" */
    const uint32_t (*ranges)[2];
    size_t n;
} gunicode_category;

extern const char tr_grammar_unicode_version[];
extern const gunicode_category tr_grammar_unicode_categories[];
extern const size_t tr_grammar_unicode_n_categories;


/* ---------------------------------------------------------------------
 * Regex AST (regex_parse.c)
 * ------------------------------------------------------------------- */

typedef enum gre_kind {
    GRE_EMPTY,  /* matches "" */
    GRE_SET,    /* one code point from set */
    GRE_CONCAT, /* kids in order */
    GRE_ALT,    /* any one kid */
    GRE_REPEAT, /* kid{min,max} */
    GRE_BOL,    /* ^: holds before the first byte only */
    GRE_EOL,    /* $: holds after the last byte only */
    /* grammar IR only (ebnf_*.c), never produced by the regex parser: */
    GRE_REF,    /* the rule `ref` (a call, or inlined before the NFA) */
    GRE_DFA,    /* a regex terminal compiled on its own (it had anchors) */
} gre_kind;

#define GRE_INF UINT32_MAX

typedef struct gre_node {
    gre_kind kind;
    uint32_t offset; /* byte offset in the pattern (diagnostics) */
    gcpset set;      /* GRE_SET */
    struct gre_node **kids;
    uint32_t n_kids; /* CONCAT, ALT; REPEAT has one kid */
    uint32_t min, max;
    uint32_t ref;          /* GRE_REF: rule index */
    const struct gdfa *dfa; /* GRE_DFA: borrowed, lives as long as the IR */
} gre_node;

/* Parses pattern[0..len) into an AST in cc's arena. Errors as for
 * tr_grammar_compile_regex (diag set). */
tr_status tr_regex_parse(gcc *cc, const char *pattern, size_t len, gre_node **out);

/* ---------------------------------------------------------------------
 * Byte NFA (nfa.c)
 * ------------------------------------------------------------------- */

typedef enum gnfa_edge_kind {
    GNFA_BYTE, /* consumes one byte in [lo, hi] */
    GNFA_EPS,  /* free */
    GNFA_BOL,  /* free, only before any byte was consumed */
    GNFA_EOL,  /* free, but nothing may be consumed afterwards */
    GNFA_CALL, /* consumes call symbol lo | hi << 8 (a whole rule, run on
                  the matcher's stack; grammars only) */
} gnfa_edge_kind;

#define GNFA_MAX_SYMS 65536u

typedef struct gnfa_edge {
    uint32_t to;
    uint32_t next; /* next edge of the same state, UINT32_MAX ends */
    uint8_t lo, hi, kind, pad;
} gnfa_edge;

static inline uint32_t gnfa_edge_sym(const gnfa_edge *e) {
    return (uint32_t)e->lo | (uint32_t)e->hi << 8;
}

typedef struct gnfa {
    uint32_t n_states, cap_states;
    uint32_t *head; /* [n_states] first edge or UINT32_MAX */
    gnfa_edge *edges;
    uint32_t n_edges, cap_edges;
    uint32_t start, final;
} gnfa;

/* Builds the NFA of the AST (heap arrays accounted in cc; free with
 * tr_nfa_free). */
tr_status tr_nfa_build(gcc *cc, const gre_node *root, gnfa *out);
/* Adds the fragment of ast to n: its strings lead from *s to *e, two new
 * states that nothing else links yet. */
tr_status tr_nfa_add_fragment(gcc *cc, gnfa *n, const gre_node *ast, uint32_t *s,
                              uint32_t *e);
/* A new state / edge of n (budgets: max_nfa_states, memory, time). */
tr_status tr_nfa_new_state(gcc *cc, gnfa *n, uint32_t *id);
tr_status tr_nfa_add_edge(gcc *cc, gnfa *n, uint32_t from, uint32_t to, int kind, uint8_t lo,
                          uint8_t hi);
void tr_nfa_free(gcc *cc, gnfa *n);

/* UTF-8 expansion of the code points [lo, hi] (no surrogates inside):
 * fn is called once per product of byte ranges, bytes a[i]..z[i] at
 * position i of n (U+0800..U+FFFF: [E0][A0-BF][80-BF], then
 * [E1-EF][80-BF][80-BF]); its first error stops the split. */
typedef tr_status (*gutf8_seq_fn)(void *ctx, const uint8_t *a, const uint8_t *z, int n);
tr_status tr_utf8_split(uint32_t lo, uint32_t hi, gutf8_seq_fn fn, void *ctx);

/* ---------------------------------------------------------------------
 * DFA (dfa.c)
 * ------------------------------------------------------------------- */

#define GDFA_DEAD 0u

/* A minimized DFA over byte classes. State 0 is the dead state (every
 * transition of it leads to itself; it never accepts), so a zeroed
 * transition means "dies". Every other state can reach an accepting state
 * (trimmed). Immutable once built.
 *
 *   cls[256]: byte -> class; trans[s * n_classes + cls[b]]: next state.
 */
typedef struct gdfa {
    uint32_t n_states; /* dead state included */
    uint32_t n_classes;
    uint32_t start;
    uint8_t cls[256];
    uint32_t *trans;   /* [n_states * n_classes] */
    uint32_t *rows;    /* the same, pre-multiplied: next_state * n_classes
                          (the mask walk's index, one multiply less per
                          trie node) */
    uint8_t *accept;   /* [n_states] 1 if accepting */
    int16_t *forced;   /* [n_states] the only live byte of a non-accepting
                          state, -1 when none or several */
    uint8_t *can_cont; /* [n_states] 1 if some byte leads to a live state */
    uint32_t raw_states; /* before minimization (stats) */
    /* For the mask walk's ASCII shortcut (mask.c): aloop[s] has bit b set
     * (b < 128) when byte b leads from s back to s; usucc[s] is the live
     * state other than s that the most ASCII bytes lead to from s (0 if
     * none) and ubits[s] those bytes; dbits[s] the ASCII bytes that lead
 * from s to the dead state; row_magic turns a row offset back
     * into its state: state = (row * row_magic) >> 40. */
    uint64_t (*aloop)[2]; /* [n_states] */
    uint64_t (*ubits)[2]; /* [n_states] */
    uint64_t (*dbits)[2]; /* [n_states] ASCII bytes that kill s */
    uint32_t *usucc;      /* [n_states] */
    uint64_t row_magic;
} gdfa;

/* Subset construction from nfa, then trimming and minimization. */
tr_status tr_dfa_build(gcc *cc, const gnfa *nfa, gdfa *out);

void tr_dfa_free(gdfa *d);
size_t tr_dfa_bytes(const gdfa *d);
tr_status tr_dfa_check(const gdfa *d);
void tr_dfa_dump(const gdfa *d, FILE *f);

static inline uint32_t gdfa_step(const gdfa *d, uint32_t s, uint8_t b) {
    return d->trans[(size_t)s * d->n_classes + d->cls[b]];
}

/* Runs bytes from s; returns the state reached (GDFA_DEAD if it died). */
uint32_t tr_dfa_run(const gdfa *d, uint32_t s, const uint8_t *p, size_t n);

/* ---------------------------------------------------------------------
 * Vocabulary and its byte trie (vocab.c)
 * ------------------------------------------------------------------- */

/* The trie is a flat array in depth-first preorder (children by byte),
 * node 0 the root (empty prefix), stored as parallel arrays (the walk
 * touches each field of a node once; separate arrays keep the hot loop's
 * loads dense). A node's subtree is the contiguous run [i, next[i]); its
 * parent is the last node before it with depth one less.
 *
 *   i:      0     1     2     3     4     5
 *   byte:   -    'a'   'b'   'c'   'b'   'x'      tokens: a ab abc b bx
 *   depth:  0     1     2     3     1     2
 *   next:   6     4     4     4     6     6
 *   tok:    N    id(a) id(ab) id(abc) id(b) id(bx)      N = n_vocab
 *
 * Walking it through a DFA keeps the state reached at each depth on a
 * stack; a dead transition skips to next[i] (the whole subtree dies). A
 * node where no token ends has tok = n_vocab: the walk then sets the bit
 * just past the vocabulary in a scratch mask of n_words + 1 words instead
 * of branching (measured: the branch on "has a token" mispredicts on
 * about half the nodes and doubled the walk time). Ids with the same
 * bytes as an earlier token are not in the trie: they are listed in dups
 * as (representative, duplicate) and copied afterwards. Special tokens,
 * EOG tokens and empty tokens are not in the trie. */
typedef struct gtrie {
    uint32_t n_nodes;
    uint8_t *byte;   /* [n_nodes] last byte of the prefix */
    uint16_t *depth; /* [n_nodes] length of the prefix */
    uint32_t *tok;   /* [n_nodes] token ending here, or n_vocab */
    uint32_t *next;  /* [n_nodes] first node after the subtree */
    /* Check nodes, for the mask walk's ASCII shortcut (mask.c): the nodes
     * whose subtree (own byte included) has only ASCII bytes and at least
     * GTRIE_CHECK_MIN nodes, in preorder (they nest). For each: the set
     * of bytes its subtree uses and its tokens as a slice of ptoks (all
     * trie tokens in preorder). SmolLM2: 4,640 check nodes. */
    uint32_t n_checks;
    uint32_t *check;       /* [n_checks] node index */
    uint64_t (*cbits)[2];  /* [n_checks] bytes 0..127 used in the subtree */
    uint32_t *ctok_lo;     /* [n_checks] slice of ptoks */
    uint32_t *ctok_hi;
    uint16_t *cheight;     /* [n_checks] longest path in the subtree, in
                              bytes, the check node's own byte included */
    uint32_t *ptoks;       /* trie tokens in preorder */
    uint16_t *plen;        /* their byte lengths */
    uint32_t *pfirst;      /* [n_nodes + 1] the tokens of node i's subtree
                              are ptoks[pfirst[i] .. pfirst[next[i]]) */
    /* The biggest check nodes' tokens also as masks ([n_checks], NULL for
     * the others): taking a whole subtree is then an OR of n_words words
     * instead of a scattered bit per token (SmolLM2: 60 check nodes hold
     * 256 tokens or more, 29,800 in all; a token costs ~4 instructions, a
     * word a fraction of one). Only nodes with at least n_words / 4
     * tokens, largest first, within GTRIE_CMASK_BYTES. */
    uint64_t **cmask;
    /* The root's children by byte (node index, 0: no token starts with
     * that byte): a walk from the root skips the children whose byte its
     * state refuses without visiting them (they lie ~400 nodes apart in
     * preorder, so stepping from one to the next was a cache miss each:
     * ~250 of them, a third of a narrow state's mask). root_cum[b]: the
     * tokens whose first byte is below b (so a range of first bytes, a
     * byte class, counts in one subtraction). */
    uint32_t root[256];
    uint32_t root_cum[257];
    uint64_t root_bits[4]; /* the bytes b with root[b] */
    uint32_t root_ck[256]; /* the first check node at or after root[b] */
} gtrie;

#define GTRIE_CMASK_BYTES (4u << 20)

/* ORs the tokens of check node ck into mask. */
static inline void gtrie_take_check(const gtrie *tr, uint32_t ck, size_t n_words,
                                    uint64_t *mask) {
    const uint64_t *cm = tr->cmask[ck];
    if (cm) {
        for (size_t w = 0; w < n_words; w++) mask[w] |= cm[w];
        return;
    }
    for (uint32_t k = tr->ctok_lo[ck]; k < tr->ctok_hi[ck]; k++) {
        uint32_t id = tr->ptoks[k];
        mask[id >> 6] |= 1ull << (id & 63);
    }
}

/* Subtrees smaller than this are walked, not checked: a check costs about
 * as much as stepping a few nodes. */
#define GTRIE_CHECK_MIN 16u

#define GVOCAB_SPECIAL 1u
#define GVOCAB_EOG 2u

struct grammar_vocab {
    atomic_uint refs;
    uint64_t uid; /* process-unique: keys mask caches */
    int32_t n_vocab;
    size_t n_words;
    uint8_t *bytes;    /* all token bytes */
    uint64_t *offs;    /* [n_vocab + 1] */
    uint8_t *flags;    /* [n_vocab] GVOCAB_* */
    int32_t *eog;      /* [n_eog] */
    size_t n_eog;
    gtrie trie;
    int32_t (*dups)[2];
    uint32_t n_dups;
    uint32_t max_len; /* longest token in the trie */
    uint64_t *trie_bits; /* [n_words + 1] every token of the trie */
    /* The trie's tokens that start with whitespace (space, tab, LF, CR),
     * by the length of that run, longest first: a JSON grammar's mask
     * after a run of blanks drops those that would make it too long
     * (cfg_mask.c). */
    int32_t *ws_lead_ids;  /* [n_ws_lead] */
    uint32_t *ws_lead_len; /* [n_ws_lead] */
    uint32_t n_ws_lead;
    /* Token sets of looping lexer regions (the inside of a JSON string,
     * digits...), shared by every grammar using this vocabulary
     * (cfg_mask.c, "Regions"); made on first use, lock-free. */
    _Atomic(struct gcfg_rcache *) rcache;
};

/* Frees a vocabulary's region cache (cfg_mask.c; vocab_destroy). */
void tr_cfg_rcache_free(struct gcfg_rcache *rc);

/* ---------------------------------------------------------------------
 * Token masks (mask.c)
 * ------------------------------------------------------------------- */

/* The trie walk alone: into mask[0..v->n_words] (n_words + 1 words: the
 * last is scratch; on return bits past n_vocab are zero) the tokens whose
 * bytes DFA state s can consume without dying; no EOG, no special tokens.
 * stack is scratch of v->max_len + 1 entries. The dead state's mask is
 * empty. (The EBNF/JSON matchers build on this for their terminals, where
 * "accepting" does not mean "may end".) */
void tr_mask_walk(const gdfa *d, uint32_t s, const grammar_vocab *v,
                uint32_t *stack, uint64_t *mask);
/* A regex grammar's mask: tr_mask_walk plus the EOG tokens iff s accepts. */
void tr_mask_compute(const gdfa *d, uint32_t s, const grammar_vocab *v,
                   uint32_t *stack, uint64_t *mask);

/* Memo of the masks of one DFA's states for one vocabulary. Slots are
 * filled at most once each (compare-and-swap; the loser frees its copy),
 * so readers never lock. A byte budget bounds the memo: when a new mask
 * would exceed it, that mask is computed and returned but not kept, and
 * later requests for that state recompute it. */
typedef struct gmask_cache {
    uint64_t vocab_uid;
    uint32_t n_states;
    size_t n_words;
    uint64_t budget;
    atomic_uint_fast64_t used;   /* bytes of masks held */
    _Atomic(uint64_t *) *slots; /* [n_states] */
    struct gmask_cache *next;    /* list in the owning grammar */
} gmask_cache;

gmask_cache *tr_mask_cache_new(const gdfa *d, const grammar_vocab *v,
                             uint64_t budget);
void tr_mask_cache_free(gmask_cache *c);
/* Writes state s's mask into out[0..n_words), from the memo (returns
 * true) or computed (false; then memoized if the budget allows). c may be
 * NULL (no memo: always computed). scratch holds n_words + 1 words.
 * Thread-safe. */
bool tr_mask_cache_fill(gmask_cache *c, const gdfa *d, uint32_t s,
                      const grammar_vocab *v, uint32_t *stack,
                      uint64_t *scratch, uint64_t *out);

/* ---------------------------------------------------------------------
 * Compiled grammar (grammar.c)
 * ------------------------------------------------------------------- */

typedef enum grammar_kind {
    GRAMMAR_KIND_REGEX = 1, /* a DFA (regexes, EBNF without recursion) */
    GRAMMAR_KIND_CFG = 2,   /* a DFA with call edges, run on stacks */
} grammar_kind;

struct gcfg;
struct gcfg_memo;

struct grammar {
    atomic_uint refs;
    grammar_kind kind;
    gdfa dfa;
    grammar_stats stats;
    uint64_t mask_budget;
    pthread_mutex_t lock; /* guards the caches lists only */
    gmask_cache *caches;
    struct gcfg *cfg;           /* GRAMMAR_KIND_CFG: cfg_internal.h */
    struct gcfg_memo *cfg_memos; /* GRAMMAR_KIND_CFG: one per vocabulary */
};

/* ---------------------------------------------------------------------
 * Matcher (matcher.c)
 * ------------------------------------------------------------------- */

struct gcfg_matcher;

struct grammar_matcher {
    struct gcfg_matcher *cfg; /* GRAMMAR_KIND_CFG: the stacks (cfg_matcher.c) */
    grammar *g;          /* referenced */
    grammar_vocab *v;    /* referenced */
    gmask_cache *cache;  /* the grammar's memo for v; NULL: none */
    uint32_t state;      /* DFA state; never GDFA_DEAD */
    bool terminated;     /* an EOG token was accepted */
    /* rollback history: ring of the (state, terminated) before each
     * accept call; the newest at (head - 1) mod cap */
    uint32_t *hist_state;
    uint8_t *hist_term;
    uint32_t hist_cap, hist_head, hist_len;
    uint32_t *stack;     /* [v->max_len + 1] scratch of the mask walk */
    uint64_t *scratch;   /* [v->n_words + 1] the walk's output */
    uint64_t n_fills, n_computed; /* masks served / computed (stats) */
};

/* The grammar's memo for vocabulary v, created on first use. NULL on
 * out-of-memory (callers then compute without memo). */
gmask_cache *tr_grammar_cache_for(grammar *g, const grammar_vocab *v);

#endif
