/* cfg.h — the context-free layer of grammar/ as the layers above see it:
 * EBNF text compiled to a grammar whose automaton runs on stacks, the
 * matcher over its stacks and masks, and the grammar and matcher objects
 * that grammar.h hands out. The contract of grammar/cfg/ for json/ (which
 * compiles the grammar text a schema becomes) and the façade (grammar.c,
 * matcher.c: the object's life and the public matcher calls, dispatching
 * on the grammar's kind). How it works: cfg_internal.h.
 *
 * Layering: grammar/cfg, over grammar/mask (mask.h: the vocabulary trie
 * and mask memo), grammar/regex (regex.h: the AST, NFA and DFA) and base.
 *
 * Why the grammar and matcher objects are defined here and not at the
 * façade: this layer makes grammars (ebnf_compile.c) and keeps a matcher's
 * rollback ring in step with its own stacks (cfg_matcher.c), so it must
 * see them; a regex grammar is the same object with a DFA and no cfg.
 *
 * Threads: a grammar is shared by every thread (its automaton grows
 * lock-free for readers, cfg_dfa.c); a matcher belongs to one thread at
 * a time (grammar.h).
 */
#ifndef TR_GRAMMAR_CFG_H
#define TR_GRAMMAR_CFG_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "grammar/grammar.h"
#include "grammar/mask/mask.h"
#include "grammar/regex/regex.h"

typedef struct gcfg gcfg;                 /* the automaton (cfg_internal.h) */
typedef struct gcfg_memo gcfg_memo;       /* masks per vocabulary (cfg_mask.c) */
typedef struct gcfg_matcher gcfg_matcher; /* a matcher's stacks (cfg_internal.h) */

/* ---------------------------------------------------------------------
 * The compiled grammar (life and queries: grammar.c)
 * ------------------------------------------------------------------- */

typedef enum grammar_kind {
    GRAMMAR_KIND_REGEX = 1, /* a DFA (regexes, EBNF without recursion) */
    GRAMMAR_KIND_CFG = 2,   /* a DFA with call edges, run on stacks */
} grammar_kind;

struct grammar {
    atomic_uint refs;
    grammar_kind kind;
    gdfa dfa;
    grammar_stats stats;
    uint64_t mask_budget;
    pthread_mutex_t lock; /* guards the caches lists only */
    gmask_cache *caches;
    gcfg *cfg;            /* GRAMMAR_KIND_CFG: cfg_internal.h */
    gcfg_memo *cfg_memos; /* GRAMMAR_KIND_CFG: one per vocabulary */
    bool unique_keys;     /* compiled from a JSON Schema, or EBNF with
                             %json-keys-after: its matchers keep every
                             object's keys unique (json_keys_internal.h) */
    uint8_t *keys_after;  /* %json-keys-after's literal (owned), or NULL:
                             the whole text is JSON */
    size_t keys_after_len;
    uint8_t *unique_paths; /* instance paths of arrays whose items the
                              tracker keeps distinct (json_unique.c's
                              records, json_keys_internal.h's format;
                              owned), or NULL */
    size_t unique_paths_len;
};

/* A unique_paths record's count byte has this bit when the array's items
 * may be any JSON value (else strings only). */
#define TR_GKEYS_ANY_ITEMS 0x80u
/* ... and this one when the record's elements are the last ones of a
 * path of any depth (a recursive schema's array) */
#define TR_GKEYS_ANY_DEPTH 0x40u

/* ---------------------------------------------------------------------
 * The matcher (public calls: matcher.c)
 * ------------------------------------------------------------------- */

struct grammar_matcher {
    gcfg_matcher *cfg;   /* GRAMMAR_KIND_CFG: the stacks (cfg_matcher.c) */
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
    struct gkeys *keys;  /* g->unique_keys: the keys of the open objects
                            (json_keys_internal.h); else NULL */
    uint64_t *ahead;     /* [v->n_words] the lookahead's mask (matcher.c),
                            made on first use; NULL until then */
};

/* ---------------------------------------------------------------------
 * Compiling (ebnf_compile.c)
 * ------------------------------------------------------------------- */

/* tr_grammar_compile_ebnf whose text may also name ext's automata as
 * terminals (%dfaN; borrowed for the call: the grammar copies them), and
 * whose whitespace loops take at most ws_bound bytes (0: unbounded; see
 * gcfg.ws_bound). */
tr_status tr_grammar_compile_ebnf_ext(const char *text, size_t len, const gdfa *const *ext,
                                      uint32_t n_ext, uint32_t ws_bound,
                                      const grammar_limits *limits, grammar **out,
                                      tr_diag *diag);

/* ---------------------------------------------------------------------
 * A GRAMMAR_KIND_CFG grammar's automaton (cfg_dfa.c)
 * ------------------------------------------------------------------- */

void tr_cfg_free(gcfg *c);
/* Invariants of the NFA tables and of every state made so far (each
 * expanded row recomputed from its subset); tests. */
tr_status tr_cfg_check(gcfg *c);
void tr_cfg_dump(gcfg *c, FILE *f);
/* TR_OK, or why the automaton can make no more states (TR_ERR_LIMIT past
 * max_lazy_dfa_states, TR_ERR_NOMEM): every matcher on it fails then. */
tr_status tr_cfg_failed(const gcfg *c);
/* Bytes its lazily made DFA states hold so far. */
uint64_t tr_cfg_bytes(const gcfg *c);

/* ---------------------------------------------------------------------
 * Matching on stacks (cfg_matcher.c) and masks (cfg_mask.c)
 * ------------------------------------------------------------------- */

/* The context-free side of the matcher calls of grammar.h, for a matcher
 * m of a GRAMMAR_KIND_CFG grammar (same contracts). */
tr_status tr_cfgm_new(grammar_matcher *m);
void tr_cfgm_free(grammar_matcher *m);
void tr_cfgm_reset(grammar_matcher *m);
bool tr_cfgm_token_allowed(const grammar_matcher *m, int32_t id);
tr_status tr_cfgm_accept(grammar_matcher *m, const uint8_t *bytes, size_t len,
                         bool eog);
tr_status tr_cfgm_rollback(grammar_matcher *m, uint32_t n);
bool tr_cfgm_is_accepting(const grammar_matcher *m);
bool tr_cfgm_can_continue(const grammar_matcher *m);
tr_status tr_cfgm_forced_bytes(const grammar_matcher *m, uint8_t *buf,
                               size_t cap, size_t *len);
tr_status tr_cfgm_fill_mask(grammar_matcher *m, uint64_t *mask);
/* Whether the grammar's language holds bytes[0..len) (no matcher). */
bool tr_cfg_matches(const grammar *g, const uint8_t *bytes, size_t len);

/* Frees a grammar's list of memos (one per vocabulary). */
void tr_cfg_memo_free(gcfg_memo *c);
/* Adds the memos' bytes (slot tables and entries) and memoized states of
 * the list c to *bytes and *masks (tr_grammar_get_memo_stats; called
 * under the grammar's lock, which guards the list). */
void tr_cfg_memo_stats(const gcfg_memo *c, uint64_t *bytes, uint64_t *masks);

#endif
