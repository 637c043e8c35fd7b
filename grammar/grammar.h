/* grammar.h — constrained decoding: constraints compiled to automata, and
 * per-step token masks that keep generated text inside the constraint.
 *
 * What it does
 *   A constraint (a regular expression, or an EBNF grammar, the form
 *   JSON Schemas are compiled to) compiles to a grammar: a minimized,
 *   byte-level DFA (code points expanded to UTF-8), whose states may also
 *   call rules (EBNF with recursion: the matcher keeps stacks). A matcher
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
 * EBNF grammars (tr_grammar_compile_ebnf): llama.cpp's GBNF plus regex
 * terminals
 *   grammar := (rule | blank line | comment)*; rule := name '::=' alts
 *   name     [A-Za-z0-9_-]+ (the contract for generated grammars:
 *            [A-Za-z][A-Za-z0-9_-]*); the start rule is `root`; rules may
 *            come in any order, be referenced before their definition, and
 *            recurse (also mutually). A rule defined twice, an undefined
 *            rule (anywhere in the text, used or not) and a missing root
 *            are errors.
 *   lines    a rule ends at a newline outside parentheses, except right
 *            after '::=' or '|' and before a line whose first non-blank
 *            character is '|'; '#' starts a comment to the end of the
 *            line; \r is a blank.
 *   items    rule reference; "literal" (UTF-8 text, escapes \n \r \t \\
 *            \" \xHH \uHHHH \UHHHHHHHH and any escaped ASCII punctuation
 *            such as \[ \] \- \/; \xHH is the code point U+00HH, not a
 *            byte; a raw newline inside is an error); [class] and [^class]
 *            over code points with ranges a-z and the same escapes ([^...]
 *            is every code point, surrogates excluded, not listed; [] is an
 *            error); . (any code point, newline included); ( alts ) ;
 *            /regex/ (the regex dialect above, \/ for a slash, on one line;
 *            it stands for the strings the regex fully matches, ^ and $
 *            meaning the terminal's own ends).
 *   alts     seq ('|' seq)*, a seq possibly empty (matches "").
 *   quantifiers on any item, stackable (x*? = (x*)?): * + ? {m} {m,}
 *            {m,n} {,n}; counts up to max_repeat.
 *   Not supported (TR_ERR_UNSUPPORTED): llama.cpp's token references
 *   <...> and !<...>.
 * Semantics: the grammar is a language of UTF-8 byte strings (every
 *   string of it is valid UTF-8); there is no lexer, so no longest match
 *   and no priority between terminals: a matcher accepts a byte string iff
 *   it is a prefix of some string of the language, and is accepting iff
 *   the string is in the language. Alternatives of a rule that can never
 *   complete (they need a rule without a finite derivation) are dropped,
 *   so no prefix that cannot be completed is ever allowed; a root that
 *   can never complete is TR_ERR_FORMAT ("matches no string").
 * Left recursion: a rule's own leading self-reference is rewritten into
 *   the same language (A ::= A x | A y | z | w becomes A ::= (z | w)
 *   (x | y)*); any other left recursion (through other rules, or after a
 *   nullable prefix) is TR_ERR_UNSUPPORTED naming the cycle of rules.
 * Errors carry the byte offset, line and column (1-based, in code points)
 *   of the fault, also at the start of the message ("3:14: ..."); an error
 *   inside a regex terminal gives the text's position of the fault.
 * Compilation: rules that are not recursive are inlined into their
 *   callers; the rest become call edges of one automaton, run on stacks.
 *   Which rules stay calls is an implementation choice (stats report it);
 *   it never changes the language. Compiling stops at the NFA: DFA states
 *   are made the first time a matcher reaches them (stats.dfa_states
 *   counts those made at compile time), shared by every thread.
 *
 * Budgets
 *   grammar_limits bounds the pattern size, nesting, counted repetitions,
 *   NFA and DFA state counts, compile memory and compile time; exceeding
 *   one is TR_ERR_LIMIT with a diag naming the budget. Whatever the input,
 *   compiling neither exhausts memory nor hangs. For EBNF: max_grammar_bytes
 *   bounds the text, max_nesting the parentheses, max_nfa_states also the
 *   IR, max_lazy_dfa_states the DFA states made over the grammar's life
 *   (past it the grammar is exhausted: every matcher call on it returns
 *   TR_ERR_LIMIT, the boolean queries false, tr_grammar_exhausted true; a
 *   cache then compiles it afresh for later users), and max_stacks the configurations (parse
 *   stacks) one matcher
 *   follows at once: an ambiguous grammar can make them multiply (each
 *   is a different parse of the text so far; equal stacks are merged); a
 *   call that would exceed it fails with TR_ERR_LIMIT (accept: matcher
 *   unchanged; fill_mask: no mask), and the boolean queries
 *   (token_allowed, is_accepting, tr_grammar_matches) answer false.
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
 *   only slower). With stacks, what is memoized per DFA state is the part
 *   that does not depend on the stack (tokens consumed before the running
 *   rule could return) plus where, inside longer tokens, it could return;
 *   only those tokens are checked at run time against the real stack.
 *   Nothing is computed at compile time: a state's entry is made the
 *   first time a matcher needs it.
 *
 * Thread-safety and ownership
 *   grammar_vocab and grammar are immutable once built and reference
 *   counted: any number of threads may use one at once (the mask cache
 *   inside a grammar is filled with atomic operations: one pointer per
 *   DFA state, published by compare-and-swap, never changed afterwards;
 *   a thread that loses the race frees its copy). _ref adds a reference,
 *   _free drops one and frees at zero. A matcher holds one reference on
 *   its grammar and its vocabulary; it belongs to one sequence and must
 *   be used by one thread at a time, its const queries included (they use
 *   the matcher's scratch memory).
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
    uint32_t max_dfa_states;    /* a regex's DFA before minimization;
                                   default 50000 */
    uint32_t max_lazy_dfa_states; /* EBNF and JSON Schema: DFA states made
                                   over the grammar's life (~300-450 bytes
                                   each with ~70 byte classes); default
                                   200000 */
    uint64_t max_compile_bytes; /* scratch + result; default 512 MiB */
    uint64_t max_compile_us;    /* wall clock, the whole compile (a JSON
                                   Schema's translation and its grammar's
                                   together, read at least between
                                   phases); default 2 s */
    uint64_t mask_cache_bytes;  /* per (grammar, vocabulary) mask memo;
                                   default 64 MiB; 0 disables the memo */
    size_t max_grammar_bytes;   /* EBNF text; default 4 MiB (each regex
                                   terminal in it: max_pattern_bytes) */
    uint32_t max_stacks;        /* EBNF: parse stacks one matcher may
                                   follow at once (ambiguous grammars);
                                   default 4096 */
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
/* Compiles grammar text (the EBNF format above) into a grammar that the
 * same matcher API runs. limits may be NULL (defaults). Errors:
 * TR_ERR_FORMAT (syntax, undefined rule, no root, a root that matches no
 * string; diag gives offset, line, column and what), TR_ERR_UNSUPPORTED
 * (left recursion other than a rule's own leading self-reference, token
 * references, regex constructs outside the dialect), TR_ERR_LIMIT (a
 * budget; diag names it), TR_ERR_NOMEM. *out untouched on failure. */
tr_status tr_grammar_compile_ebnf(const char *text, size_t len,
                                  const grammar_limits *limits, grammar **out,
                                  tr_diag *diag);
grammar *tr_grammar_ref(grammar *g);
void tr_grammar_free(grammar *g); /* drops one reference; NULL ok */

/* Whether the whole of bytes[0..len) is in the grammar's language (false
 * also when an EBNF grammar's max_stacks or max_lazy_dfa_states is
 * exceeded).
 * Thread-safe like every use of a grammar. */
bool tr_grammar_matches(const grammar *g, const void *bytes, size_t len);

typedef struct grammar_stats {
    uint32_t nfa_states;     /* NFA built from the pattern */
    uint32_t dfa_states_raw; /* after subset construction */
    uint32_t dfa_states;     /* after minimization, dead state included
                                (EBNF: made at compile time, the rest
                                come lazily) */
    uint32_t byte_classes;   /* columns of the transition table */
    size_t bytes;            /* memory held by the compiled grammar,
                                mask memo excluded */
    uint64_t compile_ns;
    /* EBNF grammars (0 for a regex): rules in the text, rules left as
     * calls after inlining (1: the whole grammar became one DFA), call
     * edges of the automaton */
    uint32_t rules;
    uint32_t rules_kept;
    uint32_t call_edges;
} grammar_stats;
void tr_grammar_get_stats(const grammar *g, grammar_stats *st);

/* True once an EBNF or JSON Schema grammar's DFA reached
 * max_lazy_dfa_states (or memory ran out while making a state): every
 * matcher on it fails from then on, so a cache should drop it and compile
 * the text again for the next request. False for regexes. Thread-safe. */
bool tr_grammar_exhausted(const grammar *g);

/* What the grammar's parts that grow after compiling hold now: bytes of
 * its mask memos over every vocabulary it was matched with (masks and slot
 * tables) and of an EBNF or JSON Schema grammar's lazily made DFA states,
 * and the memoized masks. For
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
 * JSON Schema
 * ------------------------------------------------------------------- */

/* JSON Schema -> grammar text -> grammar (grammar/json/json_schema.c; the
 * keyword-by-keyword account is in grammar/README.md).
 *
 * What the grammar accepts: exactly the JSON texts of the values the
 * schema accepts, as far as this compiler can enforce them, written
 * with the chosen whitespace, object properties in the order of
 * `properties` (then the required names not listed there, then any
 * additional properties) or, with property_order ANY, in any order, every JSON string escape a JSON parser reads
 * back as the same string (raw characters, \" \\ \/ \b \f \n \r
 * \t, \u00XX for control characters, any \uXXXX in unconstrained
 * strings). A keyword it cannot enforce (uniqueItems over unbounded
 * items, $dynamicRef, a `not` / `if` / oneOf whose complement cannot be
 * written...) is an error in strict mode (the default:
 * TR_ERR_UNSUPPORTED, the diag names the keyword and its JSON pointer)
 * and ignored with a warning in lenient mode. Never the other way
 * round: without lenient, no text the schema forbids is accepted.
 * Unknown keywords are annotations (ignored), as validators do.
 * $ref: JSON pointers (~0 ~1, percent-escapes), $defs / definitions,
 * $id-relative URIs, $anchor; never fetched from disk or network. */
typedef enum grammar_json_ws {
    GRAMMAR_JSON_WS_FLEXIBLE = 0, /* JSON whitespace between tokens, each
                                     run at most max_ws_run bytes */
    GRAMMAR_JSON_WS_COMPACT,      /* none: {"a":1,"b":[1,2]} */
    GRAMMAR_JSON_WS_PRETTY,       /* Python json.dumps(indent=N) layout */
} grammar_json_ws;

/* How numbers may be written (grammar/README.md, "Numbers"). Enum and
 * const values are matched in every plain spelling of their value in
 * both modes. */
typedef enum grammar_json_numbers {
    GRAMMAR_JSON_NUM_CANONICAL = 0, /* "integer": an optional minus and
                                       digits (0, -7, 123; never 1.0, 1e5,
                                       01, -0); other numbers: at most
                                       GRAMMAR_JSON_MAX_FRAC_DIGITS
                                       fraction and GRAMMAR_JSON_MAX_EXP_DIGITS
                                       exponent digits */
    GRAMMAR_JSON_NUM_FULL,          /* JSON's number grammar wherever the
                                       value fits: 1.0 and 1e5 are integers
                                       (JSON Schema's validators agree) */
} grammar_json_numbers;

/* Canonical mode's bounds: every float64 as a shortest round-trip printer
 * writes it (Python's repr: 0.00012345678901234567 has 20 fraction
 * digits; exponents run to 308 and -324). */
#define GRAMMAR_JSON_MAX_FRAC_DIGITS 20u
#define GRAMMAR_JSON_MAX_EXP_DIGITS 3u

/* In which order an object's properties may be written
 * (grammar/README.md, "Property order"). */
typedef enum grammar_json_property_order {
    GRAMMAR_JSON_ORDER_SCHEMA = 0, /* the order of `properties` (then
                                      required names not listed, then
                                      additional properties) */
    GRAMMAR_JSON_ORDER_ANY,        /* any order, exactly: each listed
                                      property at most once, every
                                      required one before `}`,
                                      additional ones anywhere */
} grammar_json_property_order;

/* ORDER_ANY: an object with at most 4 listed properties keeps the set of
 * those written in the grammar's state (masks exact at every byte); a
 * larger one is compiled by counting (the required properties written,
 * and the others where keys can run out), leaving "no name twice" to the
 * matcher's key tracker (grammar/README.md, "No key twice"), so its mask
 * may offer the first bytes of a name that only a repeat completes (the
 * closing quote is refused). Objects with minProperties >= 2,
 * maxProperties or dependentRequired keep the set up to this many listed
 * properties and schema order past it (fewer texts, never more). A schema
 * whose ANY grammar passes a size budget (TR_ERR_LIMIT other than time,
 * diag given) is compiled again counting every object, then in schema
 * order. Grammar text (tr_grammar_json_schema_to_ebnf, EBNF's %json) has
 * no key tracker and never counts: the set up to this many listed
 * properties, schema order past it (grammar/README.md, "Property
 * order"). */
#define GRAMMAR_JSON_ANY_ORDER_MAX_MEMBERS 10u

typedef struct grammar_json_options {
    bool lenient;             /* ignore unenforceable keywords (warn) */
    grammar_json_ws whitespace;
    grammar_json_numbers numbers; /* default canonical */
    grammar_json_property_order property_order; /* default schema */
    uint32_t max_ws_run;      /* flexible: longest whitespace run (default
                                 24: deep pretty-printed output fits, and
                                 generation cannot loop on blanks) */
    uint32_t indent;          /* pretty: spaces per level (default 2) */
    uint32_t max_depth;       /* pretty: deepest nesting with its own
                                 indentation (default 24, at most 63) */
    /* lenient mode's warnings: one call per ignored keyword, with the
     * JSON pointer of its schema and a message; NULL: dropped */
    void (*warn)(void *ctx, const char *pointer, const char *message);
    void *warn_ctx;
} grammar_json_options;

void tr_grammar_json_options_default(grammar_json_options *o);

/* The grammar text of a schema (schema_json: UTF-8 JSON, len bytes; opt
 * and limits may be NULL for the defaults). *text is malloc'd,
 * NUL-terminated (free() it); *text_len excludes the NUL. Errors:
 * TR_ERR_FORMAT (the text is not JSON: diag has line, column, offset;
 * the schema is malformed or accepts nothing: diag names the JSON
 * pointer), TR_ERR_UNSUPPORTED (strict mode; diag names keyword and
 * pointer), TR_ERR_NOT_FOUND (a $ref that does not resolve),
 * TR_ERR_LIMIT (a budget: diag names it), TR_ERR_NOMEM. Nothing is
 * allocated on failure. */
tr_status tr_grammar_json_schema_to_ebnf(const char *schema_json, size_t len,
                                         const grammar_json_options *opt,
                                         const grammar_limits *limits, char **text,
                                         size_t *text_len, tr_diag *diag);
/* Same, compiled (tr_grammar_compile_ebnf). */
tr_status tr_grammar_compile_json_schema(const char *schema_json, size_t len,
                                         const grammar_json_options *opt,
                                         const grammar_limits *limits, grammar **out,
                                         tr_diag *diag);
/* EBNF with embedded JSON Schemas: besides the items above, `%json`
 * followed by a JSON Schema object ({...}, as JSON text) is an item
 * standing for the JSON texts the schema accepts, written as opt says
 * (opt and limits may be NULL for the defaults). Rule names starting
 * with "json", digits and '-' are reserved for the schemas' rules
 * (TR_ERR_FORMAT). A `%json` inside a literal, class, regex or comment is
 * text.
 * `%json-keys-after "TEXT"` (at most once, anywhere between rules; TEXT a
 * JSON string of 1 to 64 bytes) makes the grammar's matchers keep the
 * keys of every object unique in each JSON object or array that follows
 * an occurrence of TEXT in the output, up to where it closes (the
 * tracker of JSON Schema grammars, json_keys_internal.h); the rest of the
 * output is not read as JSON. For grammars whose JSON always comes right
 * after a fixed text (a tool call's tag) that the other text cannot
 * contain: a stray TEXT elsewhere would make what follows it read as
 * JSON, which can only remove a token that repeats a key there. _expand writes the plain EBNF text (malloc'd, NUL-terminated;
 * *text_len may be NULL); _compile compiles it. Errors: those of the
 * schema translator (the message starts with the `%json`'s line:column)
 * and of the EBNF compiler (offsets past the first `%json` refer to the
 * expanded text). */
tr_status tr_grammar_ebnf_expand_json(const char *text, size_t len,
                                      const grammar_json_options *opt,
                                      const grammar_limits *limits, char **out,
                                      size_t *out_len, tr_diag *diag);
tr_status tr_grammar_compile_ebnf_json(const char *text, size_t len,
                                       const grammar_json_options *opt,
                                       const grammar_limits *limits, grammar **out,
                                       tr_diag *diag);
/* Plain JSON: any JSON value, or (object_only) any JSON object. */
tr_status tr_grammar_compile_json(bool object_only, const grammar_json_options *opt,
                                  const grammar_limits *limits, grammar **out,
                                  tr_diag *diag);

/* Numbers beyond what a JSON parser holds exactly. jansson keeps
 * integers in 64 bits and other numbers as doubles, so a schema's
 * `maximum: 18446744073709551615` or `const: 0.1234567890123456789`
 * cannot reach the compiler as written. Every number literal of
 * text[0..len) outside strings that does not fit (an integer outside
 * int64; a decimal with more than 15 significant digits or a decimal
 * exponent beyond +-300) is rewritten as a JSON string: the prefix
 * below, then the literal. The JSON Schema compiler and validator read
 * such a string as the number it spells, exactly; so does anything that
 * passes a parsed value on (a server re-serializing a schema from a
 * request). integers_only: decimals are left to the parser (a server's
 * request fields read them as doubles anyway). *out is malloc'd
 * (NUL-terminated) when something was rewritten, else NULL (use the text
 * as it is). false: out of memory. */
#define GRAMMAR_JSON_EXACT_PREFIX "\\u0000\\u0001num:" /* as JSON text */
#define GRAMMAR_JSON_EXACT_PREFIX_BYTES "\0\001num:" /* decoded: 6 bytes */
#define GRAMMAR_JSON_EXACT_PREFIX_LEN 6
bool tr_grammar_json_exact_numbers(const char *text, size_t len, bool integers_only, char **out,
                                   size_t *out_len);
/* Whether a parsed value is such a string (_string: its bytes
 * s[0..n)); *lit, *len: the literal. */
struct json_t;
bool tr_grammar_json_exact_literal(const struct json_t *v, const char **lit, size_t *len);
bool tr_grammar_json_exact_string(const char *s, size_t n, const char **lit, size_t *len);

/* JSON text exactly as Python's json.dumps(v, ensure_ascii=False) writes
 * it (separators ", " and ": ", keys in the object's order, floats as
 * repr(): shortest round trip, "1e-05", "1e+16", "1.0"; non-finite as
 * NaN / Infinity): MaskBench serializes test instances so. Appends to a
 * malloc'd buffer: *buf (may be NULL), *len, *cap updated; false on
 * out-of-memory or nesting beyond 2048. */
struct json_t; /* jansson's */
bool tr_grammar_json_dumps_py(const struct json_t *v, char **buf, size_t *len,
                              size_t *cap);

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
