/* regex.h — the regular-language core of grammar/: the compile context
 * (budgets and scratch arena) every sub-compiler allocates through,
 * code-point sets, the regex AST and its parser, the byte NFA and the
 * minimized byte DFA. The contract of grammar/regex/ for the layers above
 * it (mask/, cfg/, json/ and the façade). Nothing here includes what is
 * above: the DFA precomputes facts for the mask walk and the AST and NFA
 * carry the CFG compiler's rule calls, as plain data.
 *
 * Layering: the bottom of grammar/; includes grammar/grammar.h (the
 * limits, the diag) and base only. Tests may include it too.
 *
 * Pipeline of a regex:
 *
 *   pattern --regex_parse.c--> AST (gre_node, code-point sets)
 *           --nfa.c----------> byte NFA (Thompson; code-point ranges
 *                              expanded to UTF-8 byte-range sequences)
 *           --dfa.c----------> DFA by subset construction over byte
 *                              classes, trimmed, Hopcroft-minimized
 *
 * Everything built during compilation is accounted against one budget
 * (gcc, context.c: bytes, time, state counts) so that hostile patterns
 * fail cleanly. The CFG and JSON Schema compilers reuse the AST (their
 * IR), the NFA builder (call edges) and the DFA (their regular
 * terminals); grammar/mask/ walks a vocabulary through any DFA.
 *
 * Threads: a gcc and what is built in it belong to one compilation on one
 * thread; a built gdfa is immutable and may be read by any thread.
 */
#ifndef TR_GRAMMAR_REGEX_H
#define TR_GRAMMAR_REGEX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "base/arena.h"
#include "base/hash.h"
#include "base/status.h"
#include "base/utf8.h"
#include "base/util.h"
#include "grammar/grammar.h"

/* ---------------------------------------------------------------------
 * Compile context: budgets and the scratch arena
 * ------------------------------------------------------------------- */

typedef struct gcc {
    grammar_limits lim;
    tr_diag *diag;
    tr_status err;        /* first error reported through tr_gcc_fail */
    uint64_t bytes;       /* accounted bytes currently held: arena blocks
                             and heap tables alike */
    uint64_t deadline_ns; /* tr_now_ns() value past which we give up */
    uint32_t tick;        /* time is polled every 1024 ticks */
    tr_arena arena;       /* freed all at once by tr_gcc_deinit; its
                             blocks charged to bytes */
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
/* TR_ERR_LIMIT (diag set) when the time budget is spent; cheap: reads the
 * clock once every 1024 calls. */
tr_status tr_gcc_poll_time(gcc *cc);
/* The same check at every call: for loops whose steps are long (one
 * state of an array automaton can take a millisecond). */
tr_status tr_gcc_check_time(gcc *cc);
/* Whether d (may be NULL) holds the time budget's message: retries after
 * a size budget, and messages that name where a size budget ran out,
 * leave that one alone (a path or rule name may hold "time"). */
bool tr_diag_is_time_budget(const tr_diag *d);
/* Records an error (the first one wins: later ones are consequences),
 * fills the diag, and returns the recorded error. */
tr_status tr_gcc_fail(gcc *cc, tr_status code, uint64_t offset, const char *fmt,
                   ...) __attribute__((format(printf, 4, 5)));

/* ---------------------------------------------------------------------
 * Code-point sets (cpset.c)
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
/* Normalizes (sort + merge) in place. */
void tr_cpset_normalize(gcpset *s);
/* *out = complement of s over [0, 0x10FFFF] minus surrogates; s must be
 * normalized. */
tr_status tr_cpset_complement(gcc *cc, const gcpset *s, gcpset *out);
bool tr_cpset_contains(const gcpset *s, uint32_t cp); /* normalized s */

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
    /* grammar IR only (grammar/cfg/ebnf_*.c), never produced by the regex parser: */
    GRE_REF,    /* the rule `ref` (a call, or inlined before the NFA) */
    GRE_DFA,    /* a regex terminal compiled on its own (it had anchors) */
} gre_kind;

#define GRE_INF UINT32_MAX

typedef struct gre_node {
    gre_kind kind : 8;
    /* grammar IR: a regex terminal's subtree, no GRE_REF, GRE_DFA or empty
     * set below (so the analysis, which is about rules, need not look in) */
    bool closed : 1;
    uint32_t offset; /* byte offset in the pattern (diagnostics) */
    gcpset set;      /* GRE_SET */
    struct gre_node **kids;
    uint32_t n_kids; /* CONCAT, ALT; REPEAT has one kid */
    uint32_t min, max;
    uint32_t ref;          /* GRE_REF: rule index */
    const struct gdfa *dfa; /* GRE_DFA: borrowed, lives as long as the IR */
    struct gre_node *canon; /* the grammar NFA builder's hash-consing: this
                               node's canonical node (NULL: not met yet) */
} gre_node;

/* Parses pattern[0..len) into an AST in cc's arena. Errors as for
 * tr_grammar_compile_regex (diag set). */
tr_status tr_regex_parse(gcc *cc, const char *pattern, size_t len, gre_node **out);

/* Trees by the text they were parsed from (text_memo.c). Equal texts
 * parse to equal trees, and a grammar made from a JSON Schema repeats its
 * terminals many times (the slowest dev-set schemas: 88%
 * of the regex bytes are repeats), so a tree met before can be shared
 * instead of parsed again, when nothing changes it after parsing. Keys
 * point into the caller's text, which must outlive the memo; entries live
 * in cc's arena. Zero-initialize. */
typedef struct gre_memo_ent {
    uint64_t hash;
    const uint8_t *text;
    size_t len;
    gre_node *node; /* NULL: an empty slot */
} gre_memo_ent;

typedef struct gre_memo {
    gre_memo_ent *slot;
    uint32_t cap, n;
} gre_memo;

uint64_t tr_gre_memo_hash(const void *text, size_t len);
/* The tree of text (hash from tr_gre_memo_hash), or NULL. */
gre_node *tr_gre_memo_get(const gre_memo *m, const void *text, size_t len, uint64_t hash);
/* Adds text -> node (text not in m). */
tr_status tr_gre_memo_put(gcc *cc, gre_memo *m, const void *text, size_t len, uint64_t hash,
                          gre_node *node);

/* Building ASTs (the regex parser's, and the EBNF parser's on the same
 * nodes): a zeroed node of kind k at byte offset off, from cc's arena
 * (NULL with cc->err set); and kid appended to n's kids, the array
 * doubled in cc's arena when full (*cap: its capacity, kept by the
 * caller while it adds). */
gre_node *tr_regex_node_new(gcc *cc, gre_kind k, size_t off);
tr_status tr_regex_add_kid(gcc *cc, gre_node *n, gre_node *kid, uint32_t *cap);

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
    /* For the mask walk's ASCII shortcut (grammar/mask/mask.c): aloop[s] has bit b set
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

/* The seed three of grammar/'s FNV-1a hashes start from (dfa.c's column
 * hashes, json/'s rule names and memo keys): FNV's offset basis with its
 * last decimal digit lost when it was copied (14695981039346656037 ->
 * 1469598103934665603). Any seed serves those tables (keys are compared
 * after a hash match); this one is kept so that every hash value stays
 * what it was. */
#define GHASH_SEED 1469598103934665603ull

/* Hash of a subset-construction key (sorted NFA state ids; dfa.c, and
 * grammar/cfg/cfg_dfa.c's lazy construction): FNV-1a over the ids, seeded with the
 * count, each step followed by an xor-shift (ids are small integers that
 * differ in their low bits only). */
static inline uint64_t gdfa_key_hash(const uint32_t *k, uint32_t n) {
    uint64_t h = TR_FNV1A_BASIS ^ n;
    for (uint32_t i = 0; i < n; i++) {
        h = tr_fnv1a_word(h, k[i]);
        h ^= h >> 29;
    }
    return h;
}

#endif
