/* grammar.h — constrained decoding: constraints compiled to automata, and
 * per-step token masks that keep generated text inside the constraint.
 *
 * What it does
 *   A constraint (this part: a regular expression; later parts add JSON
 *   Schema and EBNF on top of the same machinery) compiles to a grammar:
 *   a minimized, byte-level DFA (code points expanded to UTF-8). A matcher
 *   follows one sequence through the grammar and, at every step, fills a
 *   token mask: the tokens whose bytes the automaton can consume from the
 *   current state without dying, plus the end-of-generation tokens when
 *   the text so far is a complete match. A sampler that only picks masked
 *   tokens produces, by construction, text the constraint accepts.
 *
 * Layering
 *   Needs only a vocabulary (token byte strings and which ids are special
 *   or end generation) and base. Knows nothing of models, engines,
 *   servers or tokenizers: the caller builds a grammar_vocab from whatever
 *   holds its tokens (runtime/tokenizer's tr_tokenizer_token_bytes, say).
 *
 * Regex dialect (the common subset of ECMAScript, PCRE2 and JSON Schema
 * `pattern`; the match is always anchored at both ends: the whole output
 * must match)
 *   literals (the pattern is UTF-8); escapes \n \t \r \f \v (U+000B) \0
 *   (not followed by a digit) \xHH \x{H..} \uHHHH \u{H..} \cX and any
 *   escaped ASCII punctuation; \d \w \s \D \W \S (ASCII: [0-9],
 *   [A-Za-z0-9_], [\t\n\v\f\r ]; ECMAScript's \s also takes Unicode
 *   spaces: not here); . (any code point but \n); classes [..] [^..] with
 *   ranges, escapes and \d\w\s\p inside, \b in a class is U+0008;
 *   \p{X} \P{X} for the general categories (L Lu Ll Lt Lm Lo LC M Mn Mc Me
 *   N Nd Nl No P Pc Pd Ps Pe Pi Pf Po S Sm Sc Sk So Z Zs Zl Zp C Cc Cf Co
 *   Cn, their long names, gc=/General_Category= forms, and Any);
 *   groups ( ) (?: ) (?<name> ) (?P<name> ) (?'name' ), comments (?# );
 *   alternation |; quantifiers * + ? {m} {m,} {m,n} and their lazy forms
 *   (the same language); ^ and $ as assertions (exact: ^ holds only
 *   before the first byte, $ only after the last). A `{` that does not
 *   start a quantifier and is not followed by a digit is a literal.
 *   Compile errors (TR_ERR_UNSUPPORTED, diag names the construct and its
 *   byte offset): backreferences, lookahead/lookbehind, atomic groups,
 *   possessive quantifiers, recursion and subroutine calls, conditionals,
 *   inline flags, \b \B \A \z \Z \G \K \Q \R \h \X, octal escapes,
 *   POSIX classes, Unicode scripts. Syntax errors are TR_ERR_FORMAT.
 *   Patterns that match no string at all are rejected (TR_ERR_FORMAT).
 *
 * Budgets
 *   grammar_limits bounds the pattern size, nesting, counted repetitions,
 *   NFA and DFA state counts, compile memory and compile time; exceeding
 *   one is TR_ERR_LIMIT with a diag naming the budget. Whatever the input,
 *   compiling neither exhausts memory nor hangs.
 *
 * Token masks
 *   A mask is a bitset of tr_grammar_vocab_mask_words() uint64_t words, bit
 *   (id & 63) of word (id >> 6) set when token id is allowed. A normal
 *   token is allowed in a state iff the DFA, fed the token's bytes from
 *   that state, does not reach the dead state (it can still complete a
 *   match). End-of-generation tokens are allowed iff the state accepts.
 *   Other special tokens, and empty tokens, are never allowed.
 *   Masks are computed by walking the vocabulary's byte trie through the
 *   DFA (pruning a whole subtree at the first dead byte) and memoized per
 *   DFA state, in a cache owned by the grammar and keyed by vocabulary,
 *   under grammar_limits.mask_cache_bytes; once the budget is spent,
 *   masks of uncached states are recomputed on every request (correct,
 *   only slower).
 *
 * Thread-safety and ownership
 *   grammar_vocab and grammar are immutable once built and reference
 *   counted: any number of threads may use one at once (the mask cache
 *   inside a grammar is filled with atomic operations). _ref adds a
 *   reference, _free drops one and frees at zero. A matcher holds one
 *   reference on its grammar and its vocabulary; it belongs to one
 *   sequence and must be used by one thread at a time.
 */
#ifndef TR_GRAMMAR_H
#define TR_GRAMMAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "base/status.h"

typedef struct grammar_vocab grammar_vocab;
typedef struct grammar grammar;
typedef struct grammar_matcher grammar_matcher;

/* ---------------------------------------------------------------------
 * Vocabulary
 * ------------------------------------------------------------------- */

/* What a vocabulary is made of; everything is borrowed during
 * tr_grammar_vocab_new only (the vocabulary keeps its own copy). */
typedef struct grammar_vocab_desc {
    int32_t n_vocab;                   /* > 0 */
    const uint8_t *const *token_bytes; /* [n_vocab] raw bytes of each token
                                          (byte-level BPE already decoded);
                                          NULL allowed when the length is 0 */
    const uint32_t *token_lens;        /* [n_vocab] byte lengths, <= 65535 */
    const uint8_t *is_special;         /* [n_vocab] or NULL: nonzero for
                                          control/special tokens, which are
                                          never allowed in constrained text */
    const int32_t *eog_ids;            /* [n_eog] end-of-generation ids */
    size_t n_eog;
} grammar_vocab_desc;

/* Copies the tokens and builds the vocabulary's byte trie (once per
 * vocabulary; ~50 ms for SmolLM2's 49,152 tokens). Errors:
 * TR_ERR_INVALID_ARG (bad counts, NULL bytes with a nonzero length, EOG id
 * out of range: diag says which), TR_ERR_LIMIT (a token longer than 65535
 * bytes), TR_ERR_NOMEM. *out is untouched on failure. */
tr_status tr_grammar_vocab_new(const grammar_vocab_desc *desc,
                            grammar_vocab **out, tr_diag *diag);
grammar_vocab *tr_grammar_vocab_ref(grammar_vocab *v);
void tr_grammar_vocab_free(grammar_vocab *v); /* drops one reference; NULL ok */

int32_t tr_grammar_vocab_n_vocab(const grammar_vocab *v);
/* ceil(n_vocab / 64): the length of every mask. */
size_t tr_grammar_vocab_mask_words(const grammar_vocab *v);
/* Token bytes (borrowed, valid while v lives); NULL and *len = 0 for ids
 * outside the vocabulary. */
const uint8_t *tr_grammar_vocab_token_bytes(const grammar_vocab *v, int32_t id,
                                         size_t *len);
bool tr_grammar_vocab_is_eog(const grammar_vocab *v, int32_t id);
bool tr_grammar_vocab_is_special(const grammar_vocab *v, int32_t id);
/* Validates every invariant of the trie (tests). TR_ERR_INTERNAL if broken. */
tr_status tr_grammar_vocab_check(const grammar_vocab *v);

/* How many tokens a mask of n_words words allows. */
size_t tr_grammar_mask_count(const uint64_t *mask, size_t n_words);
/* The k-th allowed token of a mask (ids ascending, k from 0), or -1 when
 * the mask allows k tokens or fewer: with tr_grammar_mask_count, a uniform
 * pick among the allowed tokens (benchmarks and tests walk grammars so). */
int32_t tr_grammar_mask_nth(const uint64_t *mask, size_t n_words, size_t k);

/* ---------------------------------------------------------------------
 * Compiling
 * ------------------------------------------------------------------- */

typedef struct grammar_limits {
    size_t max_pattern_bytes;   /* default 65536 */
    uint32_t max_nesting;       /* groups/quantifiers deep; default 200 */
    uint32_t max_repeat;        /* largest m, n in {m,n}; default 1000 */
    uint32_t max_nfa_states;    /* default 500000 */
    uint32_t max_dfa_states;    /* before minimization; default 50000 */
    uint64_t max_compile_bytes; /* scratch + result; default 512 MiB */
    uint64_t max_compile_us;    /* wall clock; default 2 s */
    uint64_t mask_cache_bytes;  /* per (grammar, vocabulary) mask memo;
                                   default 64 MiB; 0 disables the memo */
} grammar_limits;

void tr_grammar_limits_default(grammar_limits *l);

/* Compiles pattern[0..len) (UTF-8, need not be NUL-terminated) into a
 * grammar matching exactly the strings the regex fully matches. limits
 * may be NULL (defaults). Errors: TR_ERR_FORMAT (syntax; invalid UTF-8;
 * empty language), TR_ERR_UNSUPPORTED (a construct outside the dialect),
 * TR_ERR_LIMIT (a budget; diag names it), TR_ERR_NOMEM. diag (may be NULL)
 * gets the byte offset in the pattern and a message. *out untouched on
 * failure. */
tr_status tr_grammar_compile_regex(const char *pattern, size_t len,
                                const grammar_limits *limits, grammar **out,
                                tr_diag *diag);
grammar *tr_grammar_ref(grammar *g);
void tr_grammar_free(grammar *g); /* drops one reference; NULL ok */

/* Whether the whole of bytes[0..len) is in the grammar's language. */
bool tr_grammar_matches(const grammar *g, const void *bytes, size_t len);

typedef struct grammar_stats {
    uint32_t nfa_states;     /* NFA built from the pattern */
    uint32_t dfa_states_raw; /* after subset construction */
    uint32_t dfa_states;     /* after minimization, dead state included */
    uint32_t byte_classes;   /* columns of the transition table */
    size_t bytes;            /* memory held by the compiled grammar,
                                mask memo excluded */
    uint64_t compile_ns;
} grammar_stats;
void tr_grammar_get_stats(const grammar *g, grammar_stats *st);

/* What the grammar's mask memos hold now, over every vocabulary it was
 * matched with: bytes (masks and slot tables) and memoized states. For
 * caches that keep grammars under a byte budget (runtime/engine's grammar
 * cache adds it to grammar_stats.bytes). Thread-safe, callable while
 * matchers fill the memo; a mask being stored by another thread at that
 * moment may already be counted. */
typedef struct grammar_memo_stats {
    uint64_t bytes;
    uint64_t masks;
} grammar_memo_stats;
void tr_grammar_get_memo_stats(grammar *g, grammar_memo_stats *st);

/* Validates the automaton's invariants (tests). */
tr_status tr_grammar_check(const grammar *g);
/* Human-readable automaton, for debugging. */
void tr_grammar_dump(const grammar *g, FILE *f);

/* ---------------------------------------------------------------------
 * Matcher: one per sequence
 * ------------------------------------------------------------------- */

#define GRAMMAR_DEFAULT_MAX_ROLLBACK 256u

/* New matcher at the grammar's start. Takes a reference on g and v.
 * max_rollback: how many accept calls rollback can undo (0: default
 * GRAMMAR_DEFAULT_MAX_ROLLBACK; at most 1<<20). */
tr_status tr_grammar_matcher_new(grammar *g, grammar_vocab *v,
                              uint32_t max_rollback, grammar_matcher **out);
void tr_grammar_matcher_free(grammar_matcher *m);
/* Back to the start state, history cleared. */
void tr_grammar_matcher_reset(grammar_matcher *m);

/* Writes the mask of the current state into mask[0..n_words), n_words ==
 * tr_grammar_vocab_mask_words(v) (else TR_ERR_INVALID_ARG). After an
 * end-of-generation token the mask is empty. */
tr_status tr_grammar_matcher_fill_mask(grammar_matcher *m, uint64_t *mask,
                                    size_t n_words);
/* Whether token id would be accepted now (no state change). The cheap
 * check for "sample first, mask only if rejected". */
bool tr_grammar_matcher_token_allowed(const grammar_matcher *m, int32_t id);

/* Advances by one token. TR_ERR_STATE if the grammar rejects it (the
 * matcher is unchanged), TR_ERR_INVALID_ARG for an id outside the
 * vocabulary. An end-of-generation token is accepted only in an
 * accepting state and terminates the matcher (only rollback and reset
 * are then useful). */
tr_status tr_grammar_matcher_accept_token(grammar_matcher *m, int32_t id);
/* Advances by raw bytes (forced text, jump-forward). All or nothing:
 * TR_ERR_STATE and unchanged if some prefix kills the match. len may be 0. */
tr_status tr_grammar_matcher_accept_bytes(grammar_matcher *m, const void *bytes,
                                       size_t len);
/* Undoes the last n successful accept calls (tokens or byte runs).
 * TR_ERR_STATE (unchanged) if fewer than n are remembered. */
tr_status tr_grammar_matcher_rollback(grammar_matcher *m, uint32_t n);
/* How many accept calls rollback can undo right now. */
uint32_t tr_grammar_matcher_history_len(const grammar_matcher *m);
/* Masks this matcher has filled since it was made, and how many of them
 * it had to compute (the rest came from the grammar's memo): a "cold"
 * fill is one that raised *computed. For benchmarks and tests. */
void tr_grammar_matcher_mask_counts(const grammar_matcher *m, uint64_t *filled,
                                 uint64_t *computed);

/* The text so far is a complete match (end-of-generation allowed). */
bool tr_grammar_matcher_is_accepting(const grammar_matcher *m);
/* Some non-empty continuation keeps the text matchable. A matcher is never
 * "dead": rejected calls leave it unchanged, so at any time it is
 * accepting, can continue, or both (until terminated). */
bool tr_grammar_matcher_can_continue(const grammar_matcher *m);
/* An end-of-generation token was accepted. */
bool tr_grammar_matcher_is_terminated(const grammar_matcher *m);

/* The bytes every accepted continuation must start with (empty when the
 * state accepts or branches). Writes at most cap bytes to buf; *len gets
 * the count. Does not advance the matcher (use accept_bytes). */
tr_status tr_grammar_matcher_forced_bytes(const grammar_matcher *m, uint8_t *buf,
                                       size_t cap, size_t *len);

#endif
