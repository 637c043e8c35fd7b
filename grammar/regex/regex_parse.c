/* regex_parse.c — regex text -> AST of code-point sets.
 *
 * Layering: grammar/regex (regex_internal.h); called by
 * tr_grammar_compile_regex (and by the EBNF and JSON Schema compilers, for
 * their regex pieces) with a compile context (budgets, arena, diag).
 * Single-threaded per call.
 *
 * A recursive-descent parser of the dialect documented in grammar.h:
 *
 *   alt    := concat ('|' concat)*
 *   concat := piece*
 *   piece  := atom quant?        quant := (* | + | ? | {m} | {m,} | {m,n}) '?'?
 *   atom   := '(' group ')' | '[' class ']' | '.' | '^' | '$' | '\' escape
 *           | any other code point (UTF-8)
 *
 * Every character becomes a GRE_SET of code points (a literal is a set of
 * one), so the NFA builder has only sets, sequences, choices and
 * repetitions to expand. Capture groups vanish (a DFA has no captures);
 * lazy quantifiers parse as greedy ones (same language). Constructs
 * outside the regular languages, or whose meaning differs between
 * ECMAScript and PCRE, stop the parse with TR_ERR_UNSUPPORTED naming the
 * construct and its byte offset: accepting them with a guessed meaning
 * would let a constraint silently mean something else.
 *
 * Recursion is bounded by max_nesting (groups), so hostile patterns
 * cannot overflow the C stack.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/util.h"
#include "grammar/regex/regex_internal.h"

typedef struct gp {
    gcc *cc;
    const uint8_t *s;
    size_t len;
    size_t pos;
    uint32_t depth;
    /* group names seen (duplicates are an error in PCRE and ECMAScript) */
    const uint8_t **names;
    uint32_t *name_lens;
    uint32_t n_names, cap_names;
} gp;

static tr_status fail(gp *p, tr_status code, size_t off, const char *fmt,
                      ...) __attribute__((format(printf, 4, 5)));

static tr_status fail(gp *p, tr_status code, size_t off, const char *fmt,
                      ...) {
    char msg[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return tr_gcc_fail(p->cc, code, off, "%s at byte %zu", msg, off);
}

static tr_status unsupported(gp *p, size_t off, const char *what) {
    return fail(p, TR_ERR_UNSUPPORTED, off, "unsupported construct: %s", what);
}

static bool at_end(const gp *p) { return p->pos >= p->len; }
static int peek(const gp *p) { return at_end(p) ? -1 : p->s[p->pos]; }
static int peek_at(const gp *p, size_t k) {
    return p->pos + k < p->len ? p->s[p->pos + k] : -1;
}

gre_node *tr_regex_node_new(gcc *cc, gre_kind k, size_t off) {
    gre_node *n = tr_gcc_alloc(cc, sizeof *n);
    if (!n) return NULL;
    n->kind = k;
    n->offset = (uint32_t)off;
    return n;
}

tr_status tr_regex_add_kid(gcc *cc, gre_node *n, gre_node *kid, uint32_t *cap) {
    if (n->n_kids == *cap) {
        uint32_t nc = *cap ? *cap * 2 : 4;
        gre_node **k = tr_gcc_alloc(cc, (size_t)nc * sizeof *k);
        if (!k) return cc->err;
        if (n->n_kids) memcpy(k, n->kids, n->n_kids * sizeof *k);
        n->kids = k;
        *cap = nc;
    }
    n->kids[n->n_kids++] = kid;
    return TR_OK;
}

static bool is_digit(int c) { return c >= '0' && c <= '9'; }

/* ---- Unicode properties ---- */

typedef struct uprop {
    const char *name;
    const char *cats; /* concatenated two-letter categories; "*" = Any */
} uprop;

static const uprop k_props[] = {
    {"L", "LuLlLtLmLo"}, {"Letter", "LuLlLtLmLo"},
    {"LC", "LuLlLt"}, {"L&", "LuLlLt"}, {"Cased_Letter", "LuLlLt"},
    {"Lu", "Lu"}, {"Uppercase_Letter", "Lu"},
    {"Ll", "Ll"}, {"Lowercase_Letter", "Ll"},
    {"Lt", "Lt"}, {"Titlecase_Letter", "Lt"},
    {"Lm", "Lm"}, {"Modifier_Letter", "Lm"},
    {"Lo", "Lo"}, {"Other_Letter", "Lo"},
    {"M", "MnMcMe"}, {"Mark", "MnMcMe"}, {"Combining_Mark", "MnMcMe"},
    {"Mn", "Mn"}, {"Nonspacing_Mark", "Mn"},
    {"Mc", "Mc"}, {"Spacing_Mark", "Mc"},
    {"Me", "Me"}, {"Enclosing_Mark", "Me"},
    {"N", "NdNlNo"}, {"Number", "NdNlNo"},
    {"Nd", "Nd"}, {"Decimal_Number", "Nd"}, {"digit", "Nd"},
    {"Nl", "Nl"}, {"Letter_Number", "Nl"},
    {"No", "No"}, {"Other_Number", "No"},
    {"P", "PcPdPsPePiPfPo"}, {"Punctuation", "PcPdPsPePiPfPo"},
    {"punct", "PcPdPsPePiPfPo"},
    {"Pc", "Pc"}, {"Connector_Punctuation", "Pc"},
    {"Pd", "Pd"}, {"Dash_Punctuation", "Pd"},
    {"Ps", "Ps"}, {"Open_Punctuation", "Ps"},
    {"Pe", "Pe"}, {"Close_Punctuation", "Pe"},
    {"Pi", "Pi"}, {"Initial_Punctuation", "Pi"},
    {"Pf", "Pf"}, {"Final_Punctuation", "Pf"},
    {"Po", "Po"}, {"Other_Punctuation", "Po"},
    {"S", "SmScSkSo"}, {"Symbol", "SmScSkSo"},
    {"Sm", "Sm"}, {"Math_Symbol", "Sm"},
    {"Sc", "Sc"}, {"Currency_Symbol", "Sc"},
    {"Sk", "Sk"}, {"Modifier_Symbol", "Sk"},
    {"So", "So"}, {"Other_Symbol", "So"},
    {"Z", "ZsZlZp"}, {"Separator", "ZsZlZp"},
    {"Zs", "Zs"}, {"Space_Separator", "Zs"},
    {"Zl", "Zl"}, {"Line_Separator", "Zl"},
    {"Zp", "Zp"}, {"Paragraph_Separator", "Zp"},
    {"C", "CcCfCsCoCn"}, {"Other", "CcCfCsCoCn"},
    {"Cc", "Cc"}, {"Control", "Cc"}, {"cntrl", "Cc"},
    {"Cf", "Cf"}, {"Format", "Cf"},
    {"Cs", "Cs"}, {"Surrogate", "Cs"},
    {"Co", "Co"}, {"Private_Use", "Co"},
    {"Cn", "Cn"}, {"Unassigned", "Cn"},
    {"Any", "*"},
};

static bool name_eq(const uint8_t *s, size_t n, const char *c) {
    return strlen(c) == n && memcmp(s, c, n) == 0;
}

static tr_status prop_set(gp *p, size_t off, const uint8_t *name, size_t n,
                          gcpset *out) {
    /* gc=X and General_Category=X name the same thing as X */
    for (size_t i = 0; i < n; i++) {
        if (name[i] == '=') {
            if (!(name_eq(name, i, "gc") ||
                  name_eq(name, i, "General_Category")))
                return unsupported(p, off,
                                   "Unicode property other than the general "
                                   "category (script, binary property)");
            name += i + 1;
            n -= i + 1;
            break;
        }
    }
    for (size_t i = 0; i < TR_ARRAY_LEN(k_props); i++) {
        if (!name_eq(name, n, k_props[i].name)) continue;
        const char *c = k_props[i].cats;
        if (c[0] == '*') return tr_cpset_add(p->cc, out, 0, GCP_MAX);
        for (; c[0]; c += 2) {
            for (size_t k = 0; k < tr_grammar_unicode_n_categories; k++) {
                const gunicode_category *uc = &tr_grammar_unicode_categories[k];
                if (uc->name[0] == c[0] && uc->name[1] == c[1]) {
                    tr_status st =
                        tr_cpset_add_table(p->cc, out, uc->ranges, uc->n);
                    if (st) return st;
                }
            }
        }
        return TR_OK;
    }
    return unsupported(p, off,
                       "unknown Unicode property (only general categories "
                       "such as L, Lu, Nd, P, S, Z are supported)");
}

/* ---- escapes ---- */

typedef enum esc_kind { ESC_CHAR, ESC_SET } esc_kind;

static tr_status ascii_class(gp *p, int c, gcpset *set) {
    tr_status st = TR_OK;
    switch (c) {
    case 'd':
        st = tr_cpset_add(p->cc, set, '0', '9');
        break;
    case 'w':
        if (!st) st = tr_cpset_add(p->cc, set, '0', '9');
        if (!st) st = tr_cpset_add(p->cc, set, 'A', 'Z');
        if (!st) st = tr_cpset_add(p->cc, set, '_', '_');
        if (!st) st = tr_cpset_add(p->cc, set, 'a', 'z');
        break;
    case 's':
        if (!st) st = tr_cpset_add(p->cc, set, '\t', '\r'); /* \t \n \v \f \r */
        if (!st) st = tr_cpset_add(p->cc, set, ' ', ' ');
        break;
    }
    return st;
}

/* Reads hex digits until '}' after a '{' (for \x{..} and \u{..}). */
static tr_status braced_hex(gp *p, size_t esc_off, uint32_t *cp) {
    p->pos++; /* '{' */
    uint32_t v = 0;
    int nd = 0;
    while (!at_end(p) && tr_hex_digit(peek(p)) >= 0) {
        v = v * 16 + (uint32_t)tr_hex_digit(peek(p));
        if (v > GCP_MAX)
            return fail(p, TR_ERR_FORMAT, esc_off,
                        "code point in escape above U+10FFFF");
        p->pos++;
        nd++;
    }
    if (peek(p) != '}' || nd == 0)
        return fail(p, TR_ERR_FORMAT, esc_off, "malformed braced hex escape");
    p->pos++;
    *cp = v;
    return TR_OK;
}

static tr_status fixed_hex(gp *p, size_t esc_off, int n, uint32_t *cp) {
    uint32_t v = 0;
    for (int i = 0; i < n; i++) {
        int h = tr_hex_digit(peek_at(p, (size_t)i));
        if (h < 0)
            return fail(p, TR_ERR_FORMAT, esc_off,
                        "malformed hex escape (expected %d hex digits)", n);
        v = v * 16 + (uint32_t)h;
    }
    p->pos += (size_t)n;
    *cp = v;
    return TR_OK;
}

/* Parses the escape after a backslash at p->pos - 1 (p->pos at the
 * character after '\'). Yields a code point or a set. */
static tr_status parse_escape(gp *p, bool in_class, esc_kind *kind,
                              uint32_t *cp, gcpset *set) {
    size_t off = p->pos - 1;
    if (at_end(p)) return fail(p, TR_ERR_FORMAT, off, "trailing backslash");
    int c = peek(p);
    *kind = ESC_CHAR;
    if (c >= 0x80) { /* \ before a non-ASCII character: the character */
        int n = tr_utf8_decode(p->s + p->pos, p->len - p->pos, cp);
        if (n == 0) return fail(p, TR_ERR_FORMAT, p->pos, "invalid UTF-8");
        p->pos += (size_t)n;
        return TR_OK;
    }
    p->pos++;
    switch (c) {
    case 'n': *cp = '\n'; return TR_OK;
    case 't': *cp = '\t'; return TR_OK;
    case 'r': *cp = '\r'; return TR_OK;
    case 'f': *cp = '\f'; return TR_OK;
    case 'v': *cp = 0x0B; return TR_OK;
    case '0':
        if (is_digit(peek(p)))
            return unsupported(p, off, "octal escape");
        *cp = 0;
        return TR_OK;
    case '1': case '2': case '3': case '4': case '5':
    case '6': case '7': case '8': case '9':
        return unsupported(p, off, in_class ? "octal escape"
                                            : "backreference \\N");
    case 'x': {
        tr_status st = peek(p) == '{' ? braced_hex(p, off, cp)
                                      : fixed_hex(p, off, 2, cp);
        if (st) return st;
        break;
    }
    case 'u': {
        tr_status st;
        if (peek(p) == '{') {
            st = braced_hex(p, off, cp);
        } else {
            st = fixed_hex(p, off, 4, cp);
            /* a UTF-16 surrogate pair written as two escapes */
            if (st == TR_OK && *cp >= 0xD800 && *cp <= 0xDBFF &&
                peek(p) == '\\' && peek_at(p, 1) == 'u') {
                size_t save = p->pos;
                p->pos += 2;
                uint32_t lo = 0;
                if (fixed_hex(p, off, 4, &lo) == TR_OK && lo >= 0xDC00 &&
                    lo <= 0xDFFF) {
                    *cp = 0x10000 + ((*cp - 0xD800) << 10) + (lo - 0xDC00);
                } else {
                    /* not a pair: leave the lone surrogate to the check */
                    if (p->cc->err) return p->cc->err;
                    p->pos = save;
                }
            }
        }
        if (st) return st;
        break;
    }
    case 'c': {
        int x = peek(p);
        if (!((x >= 'a' && x <= 'z') || (x >= 'A' && x <= 'Z')))
            return fail(p, TR_ERR_FORMAT, off, "\\c must be followed by a letter");
        p->pos++;
        *cp = (uint32_t)(x & 31);
        return TR_OK;
    }
    case 'd': case 'w': case 's':
        *kind = ESC_SET;
        return ascii_class(p, c, set);
    case 'D': case 'W': case 'S': {
        gcpset pos = {0};
        tr_status st = ascii_class(p, c + ('a' - 'A'), &pos);
        if (st) return st;
        tr_cpset_normalize(&pos);
        *kind = ESC_SET;
        return tr_cpset_complement(p->cc, &pos, set);
    }
    case 'p': case 'P': {
        const uint8_t *name;
        size_t n;
        bool neg = (c == 'P');
        if (peek(p) == '{') {
            size_t start = p->pos + 1;
            size_t e = start;
            while (e < p->len && p->s[e] != '}') e++;
            if (e >= p->len)
                return fail(p, TR_ERR_FORMAT, off, "missing } after \\p{");
            name = p->s + start;
            n = e - start;
            if (n > 0 && name[0] == '^') { /* PCRE's \p{^X} == \P{X} */
                neg = !neg;
                name++;
                n--;
            }
            p->pos = e + 1;
        } else {
            if (at_end(p)) return fail(p, TR_ERR_FORMAT, off, "malformed \\p");
            name = p->s + p->pos;
            n = 1;
            p->pos++;
        }
        gcpset ps = {0};
        tr_status st = prop_set(p, off, name, n, &ps);
        if (st) return st;
        *kind = ESC_SET;
        if (!neg) return tr_cpset_add_set(p->cc, set, &ps);
        tr_cpset_normalize(&ps);
        return tr_cpset_complement(p->cc, &ps, set);
    }
    case 'b':
        if (in_class) {
            *cp = 0x08;
            return TR_OK;
        }
        return unsupported(p, off, "word boundary \\b");
    case 'B': return unsupported(p, off, "word boundary \\B");
    case 'A': case 'z': case 'Z': case 'G':
        return unsupported(p, off, "anchor escape (\\A \\z \\Z \\G)");
    case 'K': return unsupported(p, off, "match reset \\K");
    case 'k': case 'g':
        return unsupported(p, off, "backreference or subroutine call");
    case 'Q': case 'E': return unsupported(p, off, "\\Q...\\E quoting");
    case 'o': return unsupported(p, off, "octal escape \\o{}");
    case 'R': case 'X': case 'h': case 'H': case 'V': case 'N': case 'C':
        return unsupported(p, off, "PCRE-only escape (\\R \\X \\h \\H \\V \\N \\C)");
    default:
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))
            return unsupported(p, off, "unknown escape of a letter");
        if (c < 0x20 || c == 0x7F)
            return fail(p, TR_ERR_FORMAT, off, "backslash before a control character");
        *cp = (uint32_t)c; /* escaped punctuation */
        return TR_OK;
    }
    /* \x, \u: validate the code point */
    if (*cp > GCP_MAX)
        return fail(p, TR_ERR_FORMAT, off, "code point above U+10FFFF");
    if (*cp >= GCP_SURR_LO && *cp <= GCP_SURR_HI)
        return fail(p, TR_ERR_FORMAT, off,
                    "lone UTF-16 surrogate in escape (not a character)");
    return TR_OK;
}

/* Reads one literal code point (UTF-8) at p->pos. */
static tr_status literal_cp(gp *p, uint32_t *cp) {
    int n = tr_utf8_decode(p->s + p->pos, p->len - p->pos, cp);
    if (n == 0) return fail(p, TR_ERR_FORMAT, p->pos, "invalid UTF-8");
    p->pos += (size_t)n;
    return TR_OK;
}

/* ---- classes ---- */

/* One class atom: a code point or a set. */
static tr_status class_atom(gp *p, esc_kind *kind, uint32_t *cp,
                            gcpset *set) {
    int c = peek(p);
    if (c == '\\') {
        p->pos++;
        return parse_escape(p, true, kind, cp, set);
    }
    if (c == '[') {
        int d = peek_at(p, 1);
        if (d == ':' || d == '.' || d == '=')
            return unsupported(p, p->pos, "POSIX class [:...:] / collating element");
    }
    *kind = ESC_CHAR;
    return literal_cp(p, cp);
}

static tr_status parse_class(gp *p, gre_node **out) {
    size_t open = p->pos;
    p->pos++; /* '[' */
    bool neg = false;
    if (peek(p) == '^') {
        neg = true;
        p->pos++;
    }
    if (peek(p) == ']')
        return unsupported(p, open,
                           "class starting with ']' ([] and [^] mean different "
                           "things in ECMAScript and PCRE; escape it: [\\]])");
    gcpset set = {0};
    for (;;) {
        if (at_end(p)) return fail(p, TR_ERR_FORMAT, open, "missing ] for class");
        if (peek(p) == ']') {
            p->pos++;
            break;
        }
        tr_status st = tr_gcc_poll_time(p->cc);
        if (st) return st;
        size_t a_off = p->pos;
        esc_kind k1;
        uint32_t c1 = 0;
        gcpset s1 = {0};
        st = class_atom(p, &k1, &c1, &s1);
        if (st) return st;
        /* a range? '-' not followed by ']' */
        if (peek(p) == '-' && peek_at(p, 1) != ']' && peek_at(p, 1) != -1) {
            size_t dash = p->pos;
            p->pos++;
            esc_kind k2;
            uint32_t c2 = 0;
            gcpset s2 = {0};
            st = class_atom(p, &k2, &c2, &s2);
            if (st) return st;
            if (k1 == ESC_SET || k2 == ESC_SET)
                return unsupported(p, dash, "range with a class escape as an end");
            if (c2 < c1)
                return fail(p, TR_ERR_FORMAT, a_off, "range out of order in class");
            st = tr_cpset_add(p->cc, &set, c1, c2);
        } else if (k1 == ESC_SET) {
            st = tr_cpset_add_set(p->cc, &set, &s1);
        } else {
            st = tr_cpset_add(p->cc, &set, c1, c1);
        }
        if (st) return st;
    }
    tr_cpset_normalize(&set);
    gre_node *n = tr_regex_node_new(p->cc, GRE_SET, open);
    if (!n) return p->cc->err;
    if (neg) {
        tr_status st = tr_cpset_complement(p->cc, &set, &n->set);
        if (st) return st;
    } else {
        n->set = set;
    }
    *out = n;
    return TR_OK;
}

/* ---- groups ---- */

static tr_status parse_alt(gp *p, gre_node **out);

static bool name_char(int c, bool first) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
           (!first && is_digit(c));
}

/* Reads a group name up to `close`; checks syntax and duplicates. */
static tr_status group_name(gp *p, size_t off, int close) {
    size_t start = p->pos;
    while (!at_end(p) && name_char(peek(p), p->pos == start)) p->pos++;
    if (p->pos == start || peek(p) != close)
        return fail(p, TR_ERR_FORMAT, off, "malformed group name");
    const uint8_t *nm = p->s + start;
    uint32_t nl = (uint32_t)(p->pos - start);
    p->pos++;
    for (uint32_t i = 0; i < p->n_names; i++)
        if (p->name_lens[i] == nl && memcmp(p->names[i], nm, nl) == 0)
            return fail(p, TR_ERR_FORMAT, off, "duplicate group name");
    if (p->n_names == p->cap_names) {
        uint32_t nc = p->cap_names ? p->cap_names * 2 : 8;
        const uint8_t **a = tr_gcc_alloc(p->cc, nc * sizeof *a);
        uint32_t *b = tr_gcc_alloc(p->cc, nc * sizeof *b);
        if (!a || !b) return p->cc->err;
        if (p->n_names) {
            memcpy(a, p->names, p->n_names * sizeof *a);
            memcpy(b, p->name_lens, p->n_names * sizeof *b);
        }
        p->names = a;
        p->name_lens = b;
        p->cap_names = nc;
    }
    p->names[p->n_names] = nm;
    p->name_lens[p->n_names++] = nl;
    return TR_OK;
}

/* At '('. *out is NULL for a comment group. */
static tr_status parse_group(gp *p, gre_node **out) {
    size_t open = p->pos;
    p->pos++;
    *out = NULL;
    if (peek(p) == '*') return unsupported(p, open, "PCRE verb (*...)");
    if (peek(p) == '?') {
        p->pos++;
        int c = peek(p);
        switch (c) {
        case ':': p->pos++; break;
        case '|': p->pos++; break; /* branch reset: only renumbers captures */
        case '#':
            while (!at_end(p) && peek(p) != ')') p->pos++;
            if (at_end(p)) return fail(p, TR_ERR_FORMAT, open, "missing ) for comment");
            p->pos++;
            return TR_OK;
        case '=': return unsupported(p, open, "lookahead (?=...)");
        case '!': return unsupported(p, open, "negative lookahead (?!...)");
        case '>': return unsupported(p, open, "atomic group (?>...)");
        case '(': return unsupported(p, open, "conditional group (?(...)...)");
        case 'R': case '&': case '+': case '-':
        case '0': case '1': case '2': case '3': case '4':
        case '5': case '6': case '7': case '8': case '9':
            return unsupported(p, open, "recursion or subroutine call");
        case 'C': return unsupported(p, open, "callout (?C...)");
        case '<': {
            int d = peek_at(p, 1);
            if (d == '=') return unsupported(p, open, "lookbehind (?<=...)");
            if (d == '!') return unsupported(p, open, "negative lookbehind (?<!...)");
            p->pos++;
            tr_status st = group_name(p, open, '>');
            if (st) return st;
            break;
        }
        case '\'': {
            p->pos++;
            tr_status st = group_name(p, open, '\'');
            if (st) return st;
            break;
        }
        case 'P': {
            int d = peek_at(p, 1);
            if (d == '<') {
                p->pos += 2;
                tr_status st = group_name(p, open, '>');
                if (st) return st;
                break;
            }
            if (d == '=') return unsupported(p, open, "backreference (?P=name)");
            if (d == '>') return unsupported(p, open, "recursion (?P>name)");
            return fail(p, TR_ERR_FORMAT, open, "malformed (?P group");
        }
        default:
            if (c == -1) return fail(p, TR_ERR_FORMAT, open, "missing ) for group");
            return unsupported(p, open, "inline flags or unknown group type (?...)");
        }
    }
    if (++p->depth > p->cc->lim.max_nesting)
        return tr_gcc_fail(p->cc, TR_ERR_LIMIT, open,
                        "nesting deeper than max_nesting = %u at byte %zu",
                        p->cc->lim.max_nesting, open);
    gre_node *inner;
    tr_status st = parse_alt(p, &inner);
    if (st) return st;
    p->depth--;
    if (peek(p) != ')') return fail(p, TR_ERR_FORMAT, open, "missing ) for group");
    p->pos++;
    *out = inner;
    return TR_OK;
}

/* ---- quantifiers ---- */

/* If a quantifier starts at p->pos, parses it. *has = false if none. */
static tr_status parse_quant(gp *p, bool *has, uint32_t *mn, uint32_t *mx) {
    size_t off = p->pos;
    int c = peek(p);
    *has = true;
    if (c == '*') {
        *mn = 0, *mx = GRE_INF;
        p->pos++;
    } else if (c == '+') {
        *mn = 1, *mx = GRE_INF;
        p->pos++;
    } else if (c == '?') {
        *mn = 0, *mx = 1;
        p->pos++;
    } else if (c == '{' && peek_at(p, 1) == ',') {
        return unsupported(p, off, "quantifier {,n} (PCRE2 versions disagree; "
                                   "write {0,n})");
    } else if (c == '{' && is_digit(peek_at(p, 1))) {
        p->pos++;
        uint64_t a = 0, b;
        while (is_digit(peek(p))) {
            a = a * 10 + (uint64_t)(peek(p) - '0');
            if (a > 1000000) a = 1000000; /* saturate; checked below */
            p->pos++;
        }
        if (peek(p) == '}') {
            b = a;
        } else if (peek(p) == ',') {
            p->pos++;
            if (peek(p) == '}') {
                b = GRE_INF;
            } else if (is_digit(peek(p))) {
                b = 0;
                while (is_digit(peek(p))) {
                    b = b * 10 + (uint64_t)(peek(p) - '0');
                    if (b > 1000000) b = 1000000;
                    p->pos++;
                }
            } else {
                return fail(p, TR_ERR_FORMAT, off, "malformed quantifier {m,n}");
            }
        } else {
            return fail(p, TR_ERR_FORMAT, off, "malformed quantifier {m,n}");
        }
        if (peek(p) != '}')
            return fail(p, TR_ERR_FORMAT, off, "malformed quantifier {m,n}");
        p->pos++;
        uint32_t lim = p->cc->lim.max_repeat;
        if (a > lim || (b != GRE_INF && b > lim))
            return tr_gcc_fail(p->cc, TR_ERR_LIMIT, off,
                            "counted repetition above max_repeat = %u at byte %zu",
                            lim, off);
        if (b < a)
            return fail(p, TR_ERR_FORMAT, off, "quantifier {m,n} with n < m");
        *mn = (uint32_t)a;
        *mx = (uint32_t)b;
    } else {
        *has = false;
        return TR_OK;
    }
    /* suffix: lazy '?' (same language) or possessive '+' (not regular
     * semantics we model: it changes which strings match) */
    if (peek(p) == '?') {
        p->pos++;
    } else if (peek(p) == '+') {
        return unsupported(p, p->pos, "possessive quantifier");
    }
    int d = peek(p);
    if (d == '*' || d == '+' || d == '?' ||
        (d == '{' && (is_digit(peek_at(p, 1)) || peek_at(p, 1) == ',')))
        return fail(p, TR_ERR_FORMAT, p->pos,
                    "quantifier follows a quantifier (nothing to repeat)");
    return TR_OK;
}

/* ---- sequences and alternatives ---- */

static tr_status set_node(gp *p, size_t off, uint32_t lo, uint32_t hi,
                          gre_node **out) {
    gre_node *n = tr_regex_node_new(p->cc, GRE_SET, off);
    if (!n) return p->cc->err;
    tr_status st = tr_cpset_add(p->cc, &n->set, lo, hi);
    if (st) return st;
    *out = n;
    return TR_OK;
}

static tr_status parse_concat(gp *p, gre_node **out) {
    gre_node *cat = tr_regex_node_new(p->cc, GRE_CONCAT, p->pos);
    if (!cat) return p->cc->err;
    uint32_t cap = 0;
    for (;;) {
        tr_status st = tr_gcc_poll_time(p->cc);
        if (st) return st;
        int c = peek(p);
        if (c == -1 || c == '|' || c == ')') break;
        size_t off = p->pos;
        gre_node *atom = NULL;
        bool anchor = false;
        switch (c) {
        case '(':
            st = parse_group(p, &atom);
            if (st) return st;
            if (!atom) { /* comment */
                int d = peek(p);
                if (d == '*' || d == '+' || d == '?')
                    return fail(p, TR_ERR_FORMAT, p->pos,
                                "quantifier after a comment group");
                continue;
            }
            break;
        case '[':
            st = parse_class(p, &atom);
            if (st) return st;
            break;
        case '.':
            p->pos++;
            atom = tr_regex_node_new(p->cc, GRE_SET, off);
            if (!atom) return p->cc->err;
            st = tr_cpset_add(p->cc, &atom->set, 0, '\n' - 1);
            if (!st) st = tr_cpset_add(p->cc, &atom->set, '\n' + 1, GCP_MAX);
            if (st) return st;
            break;
        case '^':
        case '$':
            p->pos++;
            atom = tr_regex_node_new(p->cc, c == '^' ? GRE_BOL : GRE_EOL, off);
            if (!atom) return p->cc->err;
            anchor = true;
            break;
        case '*':
        case '+':
        case '?':
            return fail(p, TR_ERR_FORMAT, off,
                        "quantifier does not follow a repeatable item");
        case '{':
            if (is_digit(peek_at(p, 1)))
                return fail(p, TR_ERR_FORMAT, off,
                            "quantifier does not follow a repeatable item");
            p->pos++;
            st = set_node(p, off, '{', '{', &atom);
            if (st) return st;
            break;
        case '\\': {
            p->pos++;
            esc_kind k;
            uint32_t cp = 0;
            gcpset s = {0};
            st = parse_escape(p, false, &k, &cp, &s);
            if (st) return st;
            if (k == ESC_SET) {
                atom = tr_regex_node_new(p->cc, GRE_SET, off);
                if (!atom) return p->cc->err;
                tr_cpset_normalize(&s);
                atom->set = s;
            } else {
                st = set_node(p, off, cp, cp, &atom);
                if (st) return st;
            }
            break;
        }
        default: {
            uint32_t cp;
            st = literal_cp(p, &cp);
            if (st) return st;
            st = set_node(p, off, cp, cp, &atom);
            if (st) return st;
            break;
        }
        }
        bool has;
        uint32_t mn = 0, mx = 0;
        size_t qoff = p->pos;
        st = parse_quant(p, &has, &mn, &mx);
        if (st) return st;
        if (has) {
            if (anchor)
                return unsupported(p, qoff, "quantifier on an anchor ^ or $");
            gre_node *r = tr_regex_node_new(p->cc, GRE_REPEAT, qoff);
            if (!r) return p->cc->err;
            uint32_t one = 0;
            st = tr_regex_add_kid(p->cc, r, atom, &one);
            if (st) return st;
            r->min = mn;
            r->max = mx;
            atom = r;
        }
        st = tr_regex_add_kid(p->cc, cat, atom, &cap);
        if (st) return st;
    }
    if (cat->n_kids == 0) cat->kind = GRE_EMPTY;
    *out = cat->n_kids == 1 ? cat->kids[0] : cat;
    return TR_OK;
}

static tr_status parse_alt(gp *p, gre_node **out) {
    gre_node *first;
    tr_status st = parse_concat(p, &first);
    if (st) return st;
    if (peek(p) != '|') {
        *out = first;
        return TR_OK;
    }
    gre_node *alt = tr_regex_node_new(p->cc, GRE_ALT, first->offset);
    if (!alt) return p->cc->err;
    uint32_t cap = 0;
    st = tr_regex_add_kid(p->cc, alt, first, &cap);
    while (st == TR_OK && peek(p) == '|') {
        p->pos++;
        gre_node *k;
        st = parse_concat(p, &k);
        if (st) return st;
        st = tr_regex_add_kid(p->cc, alt, k, &cap);
    }
    if (st) return st;
    /* Alternatives that are single characters (a|b|\p{L}|\d) become one
     * set: the same language, and one UTF-8 expansion with shared
     * suffixes instead of several overlapping ones (\p{L}|\p{N}|\p{P}
     * compiles ~10x faster this way). */
    uint32_t n_sets = 0, first_set = UINT32_MAX;
    for (uint32_t i = 0; i < alt->n_kids; i++)
        if (alt->kids[i]->kind == GRE_SET) {
            n_sets++;
            if (first_set == UINT32_MAX) first_set = i;
        }
    if (n_sets >= 2) {
        gre_node *u = tr_regex_node_new(p->cc, GRE_SET, alt->kids[first_set]->offset);
        if (!u) return p->cc->err;
        uint32_t w = 0;
        for (uint32_t i = 0; i < alt->n_kids; i++) {
            gre_node *k = alt->kids[i];
            if (k->kind == GRE_SET) {
                st = tr_cpset_add_set(p->cc, &u->set, &k->set);
                if (st) return st;
                if (i == first_set) alt->kids[w++] = u;
            } else {
                alt->kids[w++] = k;
            }
        }
        tr_cpset_normalize(&u->set);
        alt->n_kids = w;
        if (w == 1) {
            *out = u;
            return TR_OK;
        }
    }
    *out = alt;
    return TR_OK;
}

tr_status tr_regex_parse(gcc *cc, const char *pattern, size_t len, gre_node **out) {
    gp p = {.cc = cc, .s = (const uint8_t *)pattern, .len = len};
    if (len > cc->lim.max_pattern_bytes)
        return tr_gcc_fail(cc, TR_ERR_LIMIT, 0,
                        "pattern longer than max_pattern_bytes = %zu",
                        cc->lim.max_pattern_bytes);
    gre_node *root;
    tr_status st = parse_alt(&p, &root);
    if (st) return st;
    if (!at_end(&p)) /* only a stray ')' stops parse_alt early */
        return fail(&p, TR_ERR_FORMAT, p.pos, "unmatched )");
    *out = root;
    return TR_OK;
}
