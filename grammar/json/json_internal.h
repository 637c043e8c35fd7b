/* json_internal.h — the pieces of the JSON Schema compiler
 * (tr_grammar_compile_json_schema and the other JSON calls of grammar.h),
 * shared by the files of grammar/json/ and its tests, never by other
 * modules: json/ is the top sub-compiler, nothing in grammar/ uses it.
 *
 * Layering: grammar/json, over grammar/cfg (cfg.h: only
 * tr_grammar_compile_ebnf_ext, which compiles the text it writes),
 * grammar/regex (regex.h: the compile context, ASTs, NFA and DFA it
 * builds string languages with), base and jansson.
 *
 * Pipeline:
 *
 *   schema text --jansson--> json_t tree
 *     --json_ref.c-----> index: every schema position's JSON pointer and
 *                        base URI; $id / $anchor / JSON-pointer targets
 *     --json_flat.c----> a conjunction of schema nodes (allOf, $ref and
 *                        siblings) flattened into one js_norm: the
 *                        constraints per JSON type, plus the disjunctions
 *                        (anyOf / oneOf) still to expand
 *     --json_gen*.c----> one grammar rule per (conjunction, depth), its
 *                        body a gx expression; rules are built from a
 *                        worklist, so schema nesting never recurses in C
 *     --json_emit.c----> simplified (dead rules, single-use rules
 *                        inlined, regular runs merged into one /regex/
 *                        terminal) and printed as grammar text
 *   grammar text --tr_grammar_compile_ebnf_ext (grammar/cfg)--> grammar
 *
 * Strings are where JSON escaping meets regexes: a `pattern` constrains
 * the DECODED string, the grammar emits the ENCODED one. Decoded
 * languages are regex ASTs of code-point sets (gre_node, parsed by
 * regex_parse.c); json_str.c prints an AST as the regex of its JSON
 * encodings. Boolean operations on decoded languages (pattern AND
 * length, keys NOT in the listed names, patternProperties regions) go
 * through code-point automata (cpdfa.c): AST -> byte DFA (nfa.c, dfa.c)
 * -> code-point DFA -> product / complement -> state elimination -> AST;
 * a string value whose AST would be too large becomes the byte DFA of
 * its encodings instead (tr_cpdfa_encode), a %dfaN terminal of the
 * grammar text (js_dfas).
 *
 * Everything is allocated in one compile context (gcc: arena, byte and
 * time budgets, the diag) and freed at once; jansson values are borrowed
 * from the parsed document, which lives as long as the compile.
 * Single-threaded per compile; no global state.
 */
#ifndef TR_GRAMMAR_JSON_INTERNAL_H
#define TR_GRAMMAR_JSON_INTERNAL_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "grammar/grammar.h"
#include "grammar/regex/regex.h"

/* ---------------------------------------------------------------------
 * Growable text buffer in the compile arena's budget (heap memory,
 * charged to cc). Errors stick: after a failure every append is a no-op
 * and js_buf_ok() is false (the cc holds the error).
 * ------------------------------------------------------------------- */

typedef struct js_buf {
    gcc *cc;
    char *p;
    size_t n, cap;
    bool failed;
    /* limit > 0: an append that would pass limit bytes sets over and
     * writes nothing (not an error: the caller then takes another way) */
    size_t limit;
    bool over;
} js_buf;

void tr_js_buf_init(js_buf *b, gcc *cc);
void tr_js_buf_free(js_buf *b);
void tr_js_buf_add(js_buf *b, const void *s, size_t n);
void tr_js_buf_puts(js_buf *b, const char *s);
void tr_js_buf_putc(js_buf *b, char c);
void tr_js_buf_printf(js_buf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* A NUL-terminated copy of the contents in the arena (NULL on failure). */
char *tr_js_buf_dup(js_buf *b);
static inline bool js_buf_ok(const js_buf *b) { return !b->failed; }

/* Pointer -> value map in the arena (memo of DAG traversals). */
typedef struct js_ptrmap {
    const void **keys;
    uint64_t *vals;
    uint32_t n, cap;
} js_ptrmap;
bool tr_js_ptrmap_get(const js_ptrmap *m, const void *key, uint64_t *val);
tr_status tr_js_ptrmap_put(gcc *cc, js_ptrmap *m, const void *key, uint64_t val);

/* Arena copy of s[0..n) plus a NUL. */
char *tr_js_strndup(gcc *cc, const char *s, size_t n);

/* ---------------------------------------------------------------------
 * Grammar expressions (json_emit.c): rule bodies before printing.
 * ------------------------------------------------------------------- */

typedef enum gx_kind {
    GX_NEVER,  /* the empty language */
    GX_EMPTY,  /* the empty string */
    GX_RX,     /* a regular piece: regex text in grammar.h's dialect */
    GX_REF,    /* a rule */
    GX_SEQ,    /* kids in order */
    GX_ALT,    /* any one kid */
    GX_REP,    /* kid{min,max}; max GX_INF = unbounded */
    GX_DFA,    /* the compile's automaton n (js_dfas), printed %dfaN */
} gx_kind;

#define GX_INF UINT32_MAX

typedef struct gx {
    gx_kind kind;
    uint32_t n;        /* SEQ/ALT: kid count; REF: rule id */
    uint32_t min, max; /* REP */
    struct gx **kids;  /* SEQ/ALT: [n]; REP: [1] */
    const char *rx;    /* RX: NUL-terminated; an atom once put in (?:...) */
    uint32_t rx_len;
    uint8_t lit;       /* RX: rx is a plain literal's regex (for printing
                          it back as "..."); raw holds the bytes */
    const char *raw;
    uint32_t raw_len;
    uint8_t nullable;  /* RX: may match the empty string (conservative) */
    /* memo of the printer (json_emit.c): -1 unknown */
    int8_t reg;        /* 1: no REF inside and every count <= 1000 */
    int8_t rx_atom;    /* RX: its text is one atom (no (?:...) needed
                          before a quantifier) */
    int8_t rx_top_alt; /* RX: its text has a top-level | (wrapped in a
                          sequence); both scan the text, which a shared
                          leaf (a key complement: kilobytes) is printed
                          from many times */
    uint32_t depth;    /* tree depth */
    uint64_t rx_size;  /* bytes of its regex text (saturating) */
    uint64_t weight;   /* rough DFA size if made one terminal (counted
                          repetitions multiply); 0 unknown */
    struct gx *simp_to[2]; /* what simplifying it gave, before (0) and
                              after (1) the rules' productivity was
                              known; NULL: not yet */
} gx;

gx *tr_gx_never(gcc *cc);
gx *tr_gx_empty(gcc *cc);
/* Regex text (copied); _ne: the regex never matches the empty string
 * (lets the printer prove that no rule is left-recursive). */
gx *tr_gx_rx(gcc *cc, const char *rx, size_t len);
gx *tr_gx_rxz(gcc *cc, const char *rx);
gx *tr_gx_rx_ne(gcc *cc, const char *rx, size_t len);
/* A literal byte string (escaped for the regex dialect here). */
gx *tr_gx_lit(gcc *cc, const char *s, size_t n);
gx *tr_gx_litz(gcc *cc, const char *s);
gx *tr_gx_ref(gcc *cc, uint32_t rule);
/* Automaton i of the compile's js_dfas; nullable: it accepts "". */
gx *tr_gx_dfa(gcc *cc, uint32_t i, bool nullable);
/* SEQ/ALT of kids[0..n) (the array is copied); NULL kids mean failure
 * (the result is NULL then, so a chain of constructors can be checked
 * once at the end). */
gx *tr_gx_seq(gcc *cc, gx *const *kids, uint32_t n);
gx *tr_gx_alt(gcc *cc, gx *const *kids, uint32_t n);
gx *tr_gx_seq2(gcc *cc, gx *a, gx *b);
gx *tr_gx_seq3(gcc *cc, gx *a, gx *b, gx *c);
gx *tr_gx_alt2(gcc *cc, gx *a, gx *b);
gx *tr_gx_rep(gcc *cc, gx *kid, uint32_t min, uint32_t max);
gx *tr_gx_opt(gcc *cc, gx *kid);

/* A growable list of gx, for building SEQ/ALT kids. */
typedef struct gx_list {
    gx **v;
    uint32_t n, cap;
} gx_list;
tr_status tr_gx_list_push(gcc *cc, gx_list *l, gx *x);

/* The rules of one grammar. Rule 0 is `root`. */
typedef struct gx_rule {
    const char *name; /* arena; unique, [A-Za-z][A-Za-z0-9-]* */
    gx *body;         /* NULL until built */
    uint32_t next_suffix; /* rules named after this one as a base: the
                             suffix to try next (0: none yet) */
} gx_rule;

typedef struct gx_grammar {
    gx_rule *rules;
    uint32_t n, cap;
    uint32_t *ht; /* hash set of names: rule ids, UINT32_MAX empty */
    uint32_t ht_cap;
} gx_grammar;

/* Adds a rule named after hint (sanitized, made unique); *id gets it. */
tr_status tr_gx_rule_add(gcc *cc, gx_grammar *g, const char *hint, uint32_t *id);

typedef struct gx_emit_opts {
    uint32_t max_regex_bytes; /* merged regular runs longer than this stay
                                 split; default 16384 */
    uint32_t inline_bytes;    /* rules whose regex is at most this long are
                                 inlined at every use; default 256 */
    uint32_t max_weight;      /* a regular piece whose estimated DFA size
                                 is larger stays split, its counted
                                 repetitions left to the grammar; default
                                 2048 (a string of ~100 code points) */
    uint32_t max_repeat;      /* counted repetitions above this are capped
                                 (maxLength 32767 -> 1000: fewer texts,
                                 never more); a minimum above it is
                                 TR_ERR_LIMIT; default 1000 */
} gx_emit_opts;

/* Simplifies g in place (NEVER propagation and unproductive rules, rules
 * used once or small and regular inlined, regular runs merged) and
 * prints it as grammar text into out (root first). Errors: TR_ERR_FORMAT
 * when the root accepts nothing; TR_ERR_UNSUPPORTED for a rule that can
 * reach itself without consuming input (left recursion through $ref);
 * budget errors. */
tr_status tr_gx_emit(gcc *cc, gx_grammar *g, const gx_emit_opts *o, js_buf *out);

/* Regex text of a regular expression (no REF inside), or NULL when it
 * is not regular or too long (max bytes). For tests and for pieces that
 * must be one terminal. */
char *tr_gx_to_regex(gcc *cc, const gx *x, size_t max, size_t *len);

/* Appends s[0..n) to b escaped as a literal of the regex dialect. */
void tr_js_rx_escape(js_buf *b, const char *s, size_t n);

/* ---------------------------------------------------------------------
 * Decimal numbers and numeric ranges (json_num.c).
 * ------------------------------------------------------------------- */

/* An exact decimal: (-1)^neg * 0.d1d2...dn * 10^exp, digits without
 * leading or trailing zeros (zero: n = 0, neg = false). */
typedef struct js_dec {
    bool neg;
    int32_t exp;
    uint32_t n;
    const char *d; /* arena; ASCII digits */
} js_dec;

/* Parses a JSON number's text (strict JSON syntax). false if malformed
 * or its exponent is beyond +-100000. */
bool tr_js_dec_parse(gcc *cc, const char *s, size_t len, js_dec *out);
/* A jansson number: integers exactly; reals as the shortest decimal that
 * reads back as the same double (what the schema's author wrote, for
 * any literal of at most 17 significant digits). false for NaN/inf. */
bool tr_js_dec_from_json(gcc *cc, const json_t *v, js_dec *out);
/* Exact numbers. jansson holds integers in 64 bits and other numbers as
 * doubles: before a schema or instance text is parsed, every integer
 * literal outside int64 (and, when the caller asks, every decimal of
 * more than 15 significant digits or an exponent beyond +-300) is
 * rewritten as the string GRAMMAR_JSON_EXACT_PREFIX + the
 * literal (grammar.h, tr_grammar_json_exact_numbers), which the
 * compiler and the validator read as that number: tr_js_is_num,
 * tr_js_dec_from_json, tr_js_value_type, tr_js_json_equal,
 * tr_js_value_gx and the dumps. lit, len: the literal. */
bool tr_js_exact_literal(const json_t *v, const char **lit, size_t *len);
/* json_is_number, or an exact-number string. */
bool tr_js_is_num(const json_t *v);
int tr_js_dec_cmp(const js_dec *a, const js_dec *b);
bool tr_js_dec_is_int(const js_dec *a);
/* Integer part's digit count (0 when |a| < 1). */
int32_t tr_js_dec_int_digits(const js_dec *a);
/* Prints a as plain decimal text ("-12.5", "0.001", "100"). */
void tr_js_dec_print(js_buf *b, const js_dec *a);
/* floor / ceil to an integer. */
void tr_js_dec_floor(gcc *cc, const js_dec *a, js_dec *out);
void tr_js_dec_ceil(gcc *cc, const js_dec *a, js_dec *out);
void tr_js_dec_add_int(gcc *cc, const js_dec *a, int delta, js_dec *out);

/* Bounds of a numeric range; has_* false = unbounded on that side. */
typedef struct js_range {
    bool has_lo, has_hi, lo_excl, hi_excl;
    js_dec lo, hi;
} js_range;

/* How number texts may be spelled (grammar_json_options.numbers). */
typedef struct js_numfmt {
    bool plain_int;    /* integral values: digits only (no "1.0", "1e3", "-0") */
    uint32_t max_frac; /* most fraction digits; 0: any number */
    uint32_t max_exp;  /* most exponent digits; 0: any number */
} js_numfmt;

/* Every spelling of a value: enum / const values and excluded values
 * take it whatever the options (tr_js_numfmt gives the options'). */
#define JS_NUMFMT_FULL ((js_numfmt){false, 0, 0})

/* Regex text (appended to b) of the JSON number texts whose values lie
 * in r, spelled as f allows. integer: only integral values (written
 * "12", "12.0", "-0", "1e3"... unless f->plain_int). Writes nothing and
 * returns false when the range is empty. Sound (never a value outside
 * r); exponent forms are accepted where every value they can denote is
 * inside r (see json_num.c). */
bool tr_js_num_regex(gcc *cc, const js_range *r, bool integer, const js_numfmt *f,
                     js_buf *b);
/* Regex text of every number (integer: every integral one), spelled as
 * f allows. */
void tr_js_num_any_regex(const js_numfmt *f, bool integer, js_buf *b);

/* Regex of the integer texts (canonical digits, no sign handling beyond
 * the values) that are multiples of k, within r; false if none or too
 * large to express (budget: max bytes of regex text; the caller refuses
 * the schema then). */
tr_status tr_js_int_multiple_regex(gcc *cc, const js_range *r, const js_dec *k,
                                   size_t max, js_buf *b, bool *empty);

/* ---------------------------------------------------------------------
 * Code-point automata (cpdfa.c).
 * ------------------------------------------------------------------- */

typedef struct cpd_edge {
    uint32_t lo, hi; /* code points, inclusive; never surrogates */
    uint32_t to;
} cpd_edge;

/* A DFA over code points: state s's edges are e[off[s] .. off[s+1]),
 * sorted, disjoint; a missing code point dies. Arena memory. */
typedef struct cpdfa {
    uint32_t n, start;
    uint8_t *acc;  /* [n] */
    uint32_t *off; /* [n + 1] */
    cpd_edge *e;
} cpdfa;

tr_status tr_cpdfa_from_ast(gcc *cc, const gre_node *ast, cpdfa *out);
/* The language of the UTF-8 strings strs[i] (lens[i] bytes each). */
tr_status tr_cpdfa_from_strings(gcc *cc, const char *const *strs,
                                const size_t *lens, uint32_t n, cpdfa *out);
/* Strings of min..max code points (max UINT32_MAX: unbounded). */
tr_status tr_cpdfa_length(gcc *cc, uint32_t min, uint32_t max, cpdfa *out);
typedef enum cpd_op { CPD_AND, CPD_OR, CPD_MINUS } cpd_op;
/* Product automaton, trimmed (only states that reach acceptance). */
tr_status tr_cpdfa_product(gcc *cc, const cpdfa *a, const cpdfa *b, cpd_op op,
                           cpdfa *out);
/* All strings but a's (over every code point but surrogates). */
tr_status tr_cpdfa_complement(gcc *cc, const cpdfa *a, cpdfa *out);
bool tr_cpdfa_is_empty(const cpdfa *a);
/* How many strings a accepts: *out, or UINT64_MAX when more than cap
 * (infinitely many included; a cycle through states that accept nothing
 * also counts as unbounded: trimmed automata have none). */
tr_status tr_cpdfa_count(gcc *cc, const cpdfa *a, uint64_t cap, uint64_t *out);
bool tr_cpdfa_matches(const cpdfa *a, const char *s, size_t n);
/* Minimized copy: the coarsest partition that separates accepting states
 * and respects every state's edges (Moore's fixpoint), refined only where
 * a successor changed class, classes numbered in order of first state. */
tr_status tr_cpdfa_minimize(gcc *cc, const cpdfa *a, cpdfa *out);
/* A regex AST of a's language by state elimination; TR_ERR_LIMIT when
 * the expression would print to more than max_nodes nodes. */
tr_status tr_cpdfa_to_ast(gcc *cc, const cpdfa *a, uint32_t max_nodes,
                          gre_node **out);
/* The byte DFA (minimized; free with tr_dfa_free) of the JSON string
 * bodies that encode a's strings, each code point spelled as
 * tr_js_str_unit_regex allows (quotes not included), or, plain, of the
 * strings' UTF-8 bytes themselves (number text): the way into a grammar
 * for automata whose regex would be too large (the grammar text names
 * it, tr_grammar_compile_ebnf_ext). Budgets: max_nfa_states,
 * max_dfa_states, memory, time. */
tr_status tr_cpdfa_encode(gcc *cc, const cpdfa *a, bool plain, gdfa *out);

/* ---------------------------------------------------------------------
 * Strings (json_str.c): decoded-language ASTs and their JSON encoding.
 * ------------------------------------------------------------------- */

gre_node *tr_js_ast_set(gcc *cc, uint32_t lo, uint32_t hi);
gre_node *tr_js_ast_any(gcc *cc); /* one code point, any */
gre_node *tr_js_ast_empty(gcc *cc);
gre_node *tr_js_ast_cat(gcc *cc, gre_node *a, gre_node *b);
gre_node *tr_js_ast_alt(gcc *cc, gre_node *a, gre_node *b);
gre_node *tr_js_ast_rep(gcc *cc, gre_node *a, uint32_t min, uint32_t max);
gre_node *tr_js_ast_lit(gcc *cc, const char *utf8, size_t n);
/* Code-point length range of an AST's strings (max GRE_INF). */
void tr_js_ast_len(const gre_node *a, uint64_t *min, uint64_t *max);
/* Whether the AST contains ^ or $. */
bool tr_js_ast_has_anchor(const gre_node *a);

/* Parses an ECMAScript-flavoured JSON Schema pattern (. excludes all
 * line terminators, \s / \S are ECMAScript's) into the AST of the
 * strings it is FOUND in (search semantics: unanchored unless ^ / $).
 * The result has no anchors. Errors as tr_regex_parse (the diag names
 * the construct and its offset in the pattern). */
tr_status tr_js_pattern_parse(gcc *cc, const char *pat, size_t len,
                              gre_node **out);
/* The AST of a known format's strings, or NULL with *known = false for
 * a format this compiler does not know (callers decide: annotation, or
 * refusal for the formats validators check). */
tr_status tr_js_format_ast(gcc *cc, const char *fmt, gre_node **out, bool *known);
/* Whether validators commonly assert this format (so that ignoring it
 * would accept what they reject). */
bool tr_js_format_is_asserted(const char *fmt);

/* Appends to b the regex of the JSON string literals ("..." with the
 * quotes) whose decoded value is in the AST's language. Escapes: every
 * code point may be written raw (but for " \ and U+0000..U+001F), the
 * two-character escapes \" \\ \/ \b \f \n \r \t stand for their
 * characters, \u00XX for the control characters; sets of every code
 * point also take any \uXXXX and surrogate pairs. Anchors must have been
 * removed. */
tr_status tr_js_str_regex(gcc *cc, const gre_node *ast, js_buf *b);
/* The same as a grammar expression (counted repetitions stay GX_REP, so
 * the printer can keep large counts out of a DFA). */
gx *tr_js_str_gx(gcc *cc, const gre_node *ast);
/* Structural equality; in-place simplification of state-elimination
 * output (x(x(x)?)? -> x{1,3}); nesting depth. */
bool tr_js_ast_eq(const gre_node *a, const gre_node *b);
gre_node *tr_js_ast_compress(gcc *cc, gre_node *a);
/* Nesting depth and tree size (saturating), memoized over the DAG. */
uint32_t tr_js_ast_depth(gcc *cc, const gre_node *a);
uint64_t tr_js_ast_tree_size(gcc *cc, const gre_node *a);
/* Regex of one encoded code point of the set (no quotes). */
void tr_js_str_unit_regex(const gcpset *set, js_buf *b);
/* Regex of any JSON string, with count code points in [min, max]
 * (max GRE_INF: unbounded). */
void tr_js_str_any_regex(uint32_t min, uint32_t max, js_buf *b);
/* Regex of one encoded code point, any; _counted: only the spellings
 * Python writes (for strings with a maximum length: a smaller DFA). */
void tr_js_str_any_unit(js_buf *b);
void tr_js_str_counted_unit(js_buf *b);

/* Prints a decoded-string AST as a plain regex of the dialect (numbers'
 * digit languages; anchors must have been removed). */
void tr_js_ast_regex(const gre_node *a, js_buf *b);

/* ---------------------------------------------------------------------
 * The compile context (json_schema.c) and the schema index (json_ref.c)
 * ------------------------------------------------------------------- */

/* What the index knows of one schema position. */
typedef struct js_info {
    const json_t *node;
    const char *ptr;  /* JSON pointer from the document root ("" = root) */
    const char *base; /* absolute base URI in effect at this node */
} js_info;

typedef struct js_resource {
    const char *uri; /* absolute, no fragment; or uri#anchor for anchors */
    const json_t *node;
} js_resource;

typedef struct js_index {
    js_info *info; /* open-addressing hash on node pointers */
    uint32_t info_cap, info_n;
    js_resource *res;
    uint32_t n_res, cap_res;
} js_index;

/* A conjunction item: a schema node, which of its disjunctions a branch
 * was already chosen for (JS_DONE_*), and whether its $ref / allOf
 * members are already in the list (JS_EXPANDED: the conjunctions made
 * for the branches of a disjunction list every member flattened). */
enum { JS_DONE_ANYOF = 1, JS_DONE_ONEOF = 2, JS_EXPANDED = 4 };

typedef struct js_item {
    const json_t *node;
    uint32_t done;
} js_item;

typedef struct js_conj {
    js_item *v;
    uint32_t n;
} js_conj;

typedef struct js_memo {
    uint64_t *hash;
    uint32_t *rule;
    js_conj *key;
    uint32_t *depth;
    uint32_t cap, n;
} js_memo;

typedef struct js_job {
    uint32_t rule;
    js_conj conj;
    uint32_t depth; /* nesting depth (pretty mode; 0 otherwise) */
} js_job;

/* Whitespace pieces of one nesting depth (json_gen.c). */
typedef struct js_ws {
    const char *pre, *first, *sep, *post, *colon; /* regex texts */
} js_ws;

/* Byte DFAs of string languages that the grammar text names as %dfaN
 * terminals (their regex would be too large); heap tables, freed by
 * tr_js_dfas_free after the grammar is compiled. Not allowed when the
 * text must stand alone (tr_grammar_json_schema_to_ebnf). */
typedef struct js_dfas {
    gdfa **v;
    uint32_t n, cap;
    bool allowed;
    js_buf *upaths; /* unique-string array paths for the matcher
                       (json_unique.c); NULL: none may be made */
} js_dfas;
void tr_js_dfas_free(js_dfas *d);

typedef struct js_ctx {
    gcc *cc;
    js_dfas *dfas; /* NULL: none allowed */
    grammar_json_options opt;
    json_t *doc;
    js_index idx;
    gx_grammar g;
    js_memo memo;
    js_job *jobs;
    uint32_t n_jobs, cap_jobs;
    uint32_t any_rule[64]; /* the any-value rule per depth, 0 = none yet */
    char ws_rx[64];        /* flexible whitespace run */
    /* caches of parsed patterns / compiled pattern automata, by string */
    struct js_pat *pats;
    uint32_t n_pats, cap_pats;
    uint32_t n_warn;
    void *warned; /* (node, keyword) pairs already reported */
    uint32_t n_warned, cap_warned;
    json_t **owned; /* synthetic schema nodes, released with the compile */
    uint32_t n_owned, cap_owned;
    bool keys_tracked; /* the grammar's matcher will keep the key tracker
                          (compiled straight from the schema); false for
                          text (%json in EBNF, the text export): property
                          order ANY then never counts (chain_tally needs
                          the tracker to keep names unique) */
    bool any_counted; /* property_order ANY: every object by counting
                         (json_gen_obj.c, chain_tally), none by the set
                         of its members: the retry after a size budget */
    bool no_some;   /* complements never say "some member exists"
                       (JS_KW_SOME): the retry after a size budget, with
                       the oneOf planner's sound fallbacks instead */
    bool used_some; /* some complement said it */
    bool valid_skip_values; /* validator: the top-level enum/const is known
                               to hold (filtering a schema's own values) */
    /* schema nodes this compile made (json_not.c) */
    js_ptrmap synth;    /* node -> 1 */
    uint32_t n_synth;
    js_ptrmap neg;      /* schema -> the node of its complement */
    js_ptrmap neg_fail; /* schema -> why it has none (const char *) */
    js_ptrmap cond;     /* node -> its if/then/else + dependentSchemas member */
    struct js_uwalk *uwalk; /* uniqueItems paths (json_unique.c), on demand */
    js_ptrmap dep_with; /* dependentSchemas value -> the member "has the
                           property and satisfies it" */
} js_ctx;

/* The spelling of numbers the compile's options ask for; plain_int for
 * a schema whose type is "integer" (json_num.c). */
js_numfmt tr_js_numfmt(const js_ctx *x, bool plain_int);

/* Takes a reference to a synthetic node for the compile's lifetime
 * (json_schema.c); TR_ERR_NOMEM (v released) on failure. */
tr_status tr_js_keep(js_ctx *x, json_t *v);
/* Releases what tr_js_keep holds (objects are emptied first: synthetic
 * nodes may refer to each other in cycles). */
void tr_js_release(js_ctx *x);

/* ---------------------------------------------------------------------
 * Synthetic schema nodes and complements (json_not.c)
 *
 * Private keywords, read only on nodes this compile made (a user's
 * schema that spells them means nothing by it):
 * ------------------------------------------------------------------- */

#define JS_KW_TYPES "\x01" "types"              /* integer: JT_* bits allowed */
#define JS_KW_NOT_VALUES "\x01" "notValues"     /* array: values excluded */
#define JS_KW_NOT_STRING "\x01" "notString"     /* schema: strings in its string
                                                language are excluded */
#define JS_KW_NOT_MULTIPLE "\x01" "notMultipleOf" /* k: multiples of k excluded */
#define JS_KW_CONTAINS_FROM "\x01" "containsFrom" /* f: `contains` counts the
                                                  items at positions >= f */
/* {patterns?, notPatterns?, notNames?, notKeys?, value?, at}: the object
 * has some member whose key matches one of `patterns` (absent: any key),
 * none of `notPatterns`, is none of `notNames` and fails the schema
 * `notKeys`, and whose value satisfies `value` (absent: any value); the
 * patterns are read as patternProperties patterns of the node `at`. The
 * complement of patternProperties, additionalProperties and
 * propertyNames (json_not.c); the object generator writes it as a
 * required witness member (json_gen_obj.c). */
#define JS_KW_SOME "\x01" "someMember"

/* A new empty schema object owned by the compile (borrowed; budgets:
 * NULL with the error set). */
json_t *tr_js_synth_new(js_ctx *x);
bool tr_js_is_synthetic(const js_ctx *x, const json_t *node);
/* A synthetic node allowing only the JT_* types given (0: nothing). */
json_t *tr_js_synth_types(js_ctx *x, uint32_t types);
/* The node of "not s" (memoized; recursive schemas give recursive
 * complements). *out NULL with *why set when some keyword of s has no
 * complement here (the caller refuses or falls back); errors are the
 * compile's (budgets, a $ref that does not resolve). */
tr_status tr_js_negate(js_ctx *x, const json_t *s, const json_t **out, const char **why);
/* The member standing for node's if/then/else and dependentSchemas
 * (schema-form dependencies) as disjunctions, or NULL when it has none;
 * refusals as for the keywords (strict) or ignored (lenient). */
tr_status tr_js_conditionals(js_ctx *x, const json_t *node, const json_t **out);

/* Whether the JSON text inst is valid under the schema, by the validator
 * (json_valid.c) alone: the tests' and the fuzzer's oracle for what the
 * grammar accepts (an accepted instance must be valid). */
tr_status tr_js_check_instance(const char *schema, size_t slen, const char *inst, size_t ilen,
                               bool *valid, tr_diag *diag);

/* json_unique.c: whether uniqueItems node u is in force only at
 * instance paths the matcher's tracker can follow (json_unique.c: routes
 * through choices and pattern keys widened, none below `not` or past 32
 * levels); then *ok and its paths, marked by whether its items are
 * strings only, are added to x->dfas->upaths for the grammar. Never in a
 * text export. */
typedef struct js_uwalk js_uwalk;
tr_status tr_js_unique_items(js_ctx *x, const json_t *u, bool *ok);

/* json_ref.c */
tr_status tr_js_index_build(js_ctx *x);
/* After the index: a document declaring draft 3..7 loses the keywords
 * its draft ignores ($ref siblings, newer keywords; json_dialect.c). */
tr_status tr_js_dialect_apply(js_ctx *x);
const js_info *tr_js_info(const js_ctx *x, const json_t *node);
/* Pointer text of a node, for messages ("(unknown)" if not indexed). */
const char *tr_js_ptr(const js_ctx *x, const json_t *node);
/* Resolves node's $ref (string ref) to its target. Errors name the ref
 * and the node's pointer. */
tr_status tr_js_resolve_ref(js_ctx *x, const json_t *node, const char *ref,
                            const json_t **target);

/* json_schema.c: refusals and warnings. In strict mode a keyword this
 * compiler cannot enforce is an error (TR_ERR_UNSUPPORTED naming it and
 * where); in lenient mode it is reported through opt.warn and ignored
 * (returns TR_OK). */
tr_status tr_js_unsupported(js_ctx *x, const json_t *node, const char *keyword,
                            const char *why);
void tr_js_warn(js_ctx *x, const json_t *node, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
tr_status tr_js_fail(js_ctx *x, tr_status code, const json_t *node, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* ---------------------------------------------------------------------
 * Flattening a conjunction (json_flat.c)
 * ------------------------------------------------------------------- */

enum {
    JT_NULL = 1, JT_BOOL = 2, JT_INT = 4, JT_FRAC = 8, /* integral / other numbers */
    JT_STR = 16, JT_ARR = 32, JT_OBJ = 64, JT_ALL = 127
};

typedef struct js_norm {
    js_item *nodes; /* every schema object of the conjunction, in order */
    uint32_t n;
    bool never;     /* a `false` or contradictory constraints */
    uint32_t types; /* JT_* allowed */
    bool has_values;
    json_t **vals;  /* enum/const: the values common to all (borrowed) */
    uint32_t n_vals;
    /* first pending disjunction: nodes[split] has an anyOf/oneOf whose
     * branch is still to be chosen; UINT32_MAX if none */
    uint32_t split;
    const char *split_kw; /* "anyOf" or "oneOf" */
    /* exclusions of synthetic members (complements, json_not.c): */
    json_t **not_vals;  /* values excluded */
    uint32_t n_not_vals;
    const json_t **not_strs; /* schemas whose string language a string
                                must NOT be in */
    uint32_t n_not_strs;
} js_norm;

tr_status tr_js_flatten(js_ctx *x, const js_conj *c, js_norm *out);
/* mark[i] = 1 for the members of n whose annotations reach member at
 * (unevaluatedProperties / unevaluatedItems): at itself and what it
 * applies in place ($ref, allOf, anyOf / oneOf branches, if, then / else
 * when the conjunction holds if / its complement), following only
 * members of n (they hold, so their annotations count). Fewer than the
 * validator's (dependentSchemas, branches not chosen): the generators
 * then ask more of the unevaluated members, never less. mark has n->n
 * bytes. */
tr_status tr_js_in_place(js_ctx *x, const js_norm *n, uint32_t at, uint8_t *mark);
/* JSON equality as JSON Schema defines it (numbers by value). */
bool tr_js_json_equal(gcc *cc, const json_t *a, const json_t *b);
/* The JT_* bits of a value's type. */
uint32_t tr_js_value_type(gcc *cc, const json_t *v);

/* ---------------------------------------------------------------------
 * Generators (json_gen*.c)
 * ------------------------------------------------------------------- */

/* The rule for a conjunction at a depth (created and queued on first
 * use). */
tr_status tr_js_rule_for(js_ctx *x, const js_conj *c, uint32_t depth, const char *hint,
                         uint32_t *rule);
tr_status tr_js_rule_for_node(js_ctx *x, const json_t *node, uint32_t depth, uint32_t *rule);
/* A member that only points elsewhere ($ref, allOf) and annotates: once
 * flattened its targets are listed, so memo keys leave it out. */
bool tr_js_trivial(const json_t *node);
/* Builds the body of one queued rule. */
tr_status tr_js_build(js_ctx *x, const js_job *j);
void tr_js_ws(const js_ctx *x, uint32_t depth, js_ws *ws);
/* open PRE (FIRST items POST)? close, the JSON container around items
 * (already separated); items NULL: the empty container only. */
gx *tr_js_container(js_ctx *x, char open, gx *items, bool may_be_empty, uint32_t depth);
/* Rule of any JSON value (object_only: objects) at depth. */
tr_status tr_js_any_value(js_ctx *x, uint32_t depth, uint32_t *rule);
/* The grammar of the JSON texts of exactly the value v (any spelling a
 * JSON parser reads as v: escapes, 1 == 1.0, flexible whitespace). */
gx *tr_js_value_gx(js_ctx *x, const json_t *v, uint32_t depth);

tr_status tr_js_gen_string(js_ctx *x, const js_norm *n, gx **out);
tr_status tr_js_gen_number(js_ctx *x, const js_norm *n, gx **out);
tr_status tr_js_gen_array(js_ctx *x, const js_norm *n, uint32_t depth, gx **out);
tr_status tr_js_gen_object(js_ctx *x, const js_norm *n, uint32_t depth, gx **out);

/* The decoded language of a string schema (for keys: propertyNames,
 * patternProperties); NULL language = any string. */
tr_status tr_js_pattern_cpdfa(js_ctx *x, const json_t *pat_node, const char *pat,
                              cpdfa **out);
tr_status tr_js_pattern_cpdfa_n(js_ctx *x, const json_t *pat_node, const char *pat, size_t len,
                                cpdfa **out);
/* The decoded strings a schema accepts (the key language of
 * propertyNames): *any when it accepts every string; an empty automaton
 * when none. */
tr_status tr_js_string_lang(js_ctx *x, const js_conj *c, cpdfa *out, bool *any);
/* cpdfa -> AST (NULL: empty), refusing through keyword kw at node when
 * the expression would be too large. */
tr_status tr_js_ast_of_cpdfa(js_ctx *x, const cpdfa *d, const json_t *node, const char *kw,
                             gre_node **out);
/* tr_js_ast_of_cpdfa with the minimized automaton in *min; where the
 * grammar may name automata (a compile, not the text export) and big is
 * not NULL, a too-large expression sets *big (the compile's error
 * cleared, *out NULL) instead of refusing. */
tr_status tr_js_ast_of_cpdfa_or_big(js_ctx *x, const cpdfa *d, const json_t *node,
                                    const char *kw, gre_node **out, bool *big, cpdfa *min);
/* The JSON string (quotes included) of the strings of the minimized
 * automaton m as an automaton the grammar names (%dfaN); refused through
 * kw at node past its budgets. */
tr_status tr_js_string_dfa_gx(js_ctx *x, const cpdfa *m, const json_t *node, const char *kw,
                              gx **out);
/* The same for text that is not a JSON string (a number): m's strings
 * as their own UTF-8 bytes, no quotes. */
tr_status tr_js_text_dfa_gx(js_ctx *x, const cpdfa *m, const json_t *node, const char *kw,
                            gx **out);
/* [any code point]* */
gre_node *tr_js_rep_any(gcc *cc);
/* A pattern's search language (cached; NULL when lenient mode ignores
 * a pattern that does not parse). _n: len bytes (a `pattern` string may
 * hold U+0000); without: a NUL-terminated text (object keys cannot). */
tr_status tr_js_pattern_ast(js_ctx *x, const json_t *node, const char *text, gre_node **ast);
tr_status tr_js_pattern_ast_n(js_ctx *x, const json_t *node, const char *text, size_t len,
                             gre_node **ast);
/* a restricted to lengths [min, max] when that is structural (one part
 * of varying length, repeating one code point); *fits false otherwise;
 * NULL with *fits: empty. */
gre_node *tr_js_with_length(gcc *cc, gre_node *a, uint64_t min, uint64_t max, bool *fits);
/* Regex of the JSON encodings of a key (an exact string). */
tr_status tr_js_key_regex(js_ctx *x, const char *key, size_t len, js_buf *b);

/* A count keyword of node (minItems, maxProperties...; json_gen_arr.c):
 * *has false when absent; counts past 10^9 read as 10^9; TR_ERR_FORMAT
 * unless a non-negative integer. */
tr_status tr_js_count_kw(js_ctx *x, const json_t *node, const char *kw, uint64_t *v, bool *has);

/* The numeric range every member of n allows (json_gen_str.c). */
tr_status tr_js_num_range(js_ctx *x, const js_norm *n, js_range *r);
/* oneOf (json_oneof.c): per branch of list, the extra conjunction items
 * that make every other branch fail, ctx the conjunction holding the
 * oneOf (its members' `required` hold in every branch); *ok false when
 * that cannot be shown, *why then the reason the branch in the way has
 * no complement. */
tr_status tr_js_oneof_plan(js_ctx *x, const js_norm *ctx, const json_t *list, js_item **extra,
                           uint32_t *n_extra, bool *ok, const char **why);

/* Validator (json_valid.c): whether value v satisfies the conjunction.
 * *ok gets the answer; errors for keywords it cannot decide. */
tr_status tr_js_validate(js_ctx *x, const js_conj *c, const json_t *v, uint32_t depth,
                         bool *ok);

#endif
