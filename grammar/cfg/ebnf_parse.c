/* ebnf_parse.c — grammar text (GBNF + regex terminals) -> rules of IR.
 *
 * Layering: grammar/cfg (cfg_internal.h); called by
 * tr_grammar_compile_ebnf under a compile context (budgets, arena, diag).
 * Single-threaded per call.
 *
 * The format (grammar.h has the contract):
 *
 *   grammar := (rule | blank line | comment)*
 *   rule    := name '::=' alts (newline | end)
 *   alts    := seq ('|' seq)*
 *   seq     := (item quant*)*
 *   item    := name | '"' literal '"' | '[' class ']' | '.' | '(' alts ')'
 *            | '/' regex '/'
 *   quant   := '*' | '+' | '?' | '{' m '}' | '{' m ',' '}' | '{' m ',' n '}'
 *            | '{' ',' n '}'
 *
 * Newlines: a rule ends at a newline outside parentheses, except right
 * after '::=' or '|' and before a line that starts with '|' (llama.cpp's
 * files put the first alternative on the line after '::=' and break long
 * alternations after '|'). '#' comments run to the end of the line.
 * Literals and classes are code points (UTF-8 text, escapes \n \r \t \\
 * \" \[ \] \xHH \uHHHH \UHHHHHHHH and escaped ASCII punctuation); each
 * becomes a GRE_SET per code point, so the NFA builder expands them to
 * UTF-8 exactly as it does regex classes. A regex terminal is parsed by
 * regex_parse.c; one that uses ^ or $ is compiled to a DFA on its own
 * (GRE_DFA) so that its anchors mean "the terminal's ends", not the
 * text's. A literal or regex whose text was met before is not parsed
 * again: the places share one tree (ep.terminals).
 *
 * Every error names what was expected and where (byte offset, line,
 * column). Nesting is bounded by max_nesting, so hostile texts cannot
 * overflow the C stack.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/utf8.h"
#include "base/util.h"
#include "grammar/cfg/cfg_internal.h"

typedef struct ep {
    gcc *cc;
    gebnf *e;
    const uint8_t *s;
    size_t len, pos;
    uint32_t depth;
    const gdfa *const *ext; /* automata named %dfaN (internal callers) */
    uint32_t n_ext;
    /* A grammar made from a JSON Schema writes the same terminals many
     * times (the same string or number regex wherever the schema allows
     * one), and a closed terminal's tree is never changed after parsing:
     * each distinct text is parsed once and its tree shared (the NFA
     * builder then finds the copies equal at once). */
    gre_memo terminals;
} ep;

void tr_ebnf_diag_at(gcc *cc, const gebnf *e, uint64_t off) {
    tr_diag *d = cc->diag;
    if (!d || d->line != 0) return;
    if (off > e->len) off = e->len;
    int line = 1, col = 1;
    for (uint64_t i = 0; i < off; i++) {
        uint8_t c = e->text[i];
        if (c == '\n') {
            line++;
            col = 1;
        } else if ((c & 0xC0) != 0x80) { /* count code points */
            col++;
        }
    }
    d->offset = off;
    d->line = line;
    d->column = col;
}

static tr_status fail(ep *p, tr_status code, size_t off, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static tr_status fail(ep *p, tr_status code, size_t off, const char *fmt, ...) {
    if (p->cc->err) return p->cc->err;
    char msg[320];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    /* line and column first: the message then reads "3:14: ..." */
    int line = 1, col = 1;
    for (size_t i = 0; i < off && i < p->len; i++) {
        if (p->s[i] == '\n')
            line++, col = 1;
        else if ((p->s[i] & 0xC0) != 0x80)
            col++;
    }
    tr_status st = tr_gcc_fail(p->cc, code, off, "%d:%d: %s", line, col, msg);
    tr_ebnf_diag_at(p->cc, p->e, off);
    return st;
}

static bool at_end(const ep *p) { return p->pos >= p->len; }
static int peek(const ep *p) { return at_end(p) ? -1 : p->s[p->pos]; }
static int peek_at(const ep *p, size_t k) {
    return p->pos + k < p->len ? p->s[p->pos + k] : -1;
}

static bool name_char(int c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c >= '0' && c <= '9') || c == '_' || c == '-';
}

/* Skips spaces, tabs, carriage returns and comments; newlines too when
 * nl is true. */
static void skip_ws(ep *p, bool nl) {
    while (!at_end(p)) {
        int c = peek(p);
        if (c == ' ' || c == '\t' || c == '\r' || (nl && c == '\n')) {
            p->pos++;
        } else if (c == '#') {
            while (!at_end(p) && peek(p) != '\n') p->pos++;
        } else {
            break;
        }
    }
}

/* At a newline ending a top-level sequence: if the next non-blank line
 * starts with '|', the rule goes on (pos moves to the '|'). */
static bool continues_with_bar(ep *p) {
    size_t save = p->pos;
    skip_ws(p, true);
    if (peek(p) == '|') return true;
    p->pos = save;
    return false;
}

static gre_node *node_new(ep *p, gre_kind k, size_t off) {
    if (++p->e->n_nodes > p->cc->lim.max_nfa_states) {
        fail(p, TR_ERR_LIMIT, off,
             "grammar larger than max_nfa_states = %u IR nodes",
             p->cc->lim.max_nfa_states);
        return NULL;
    }
    return tr_regex_node_new(p->cc, k, off);
}

/* ---- rule names ---- */

static uint64_t name_hash(const char *s, uint32_t n) { return tr_fnv1a(TR_FNV1A_BASIS, s, n); }

/* The index of rule name[0..n), created (undefined) on first sight. */
static tr_status rule_index(ep *p, const char *name, uint32_t n, size_t off,
                            uint32_t *out) {
    gebnf *e = p->e;
    if (e->n_rules * 2 >= e->names_cap) {
        uint32_t nc = e->names_cap ? e->names_cap * 2 : 64;
        uint32_t *t = tr_gcc_alloc(p->cc, (size_t)nc * sizeof *t);
        if (!t) return p->cc->err;
        for (uint32_t r = 0; r < e->n_rules; r++) {
            uint32_t j = (uint32_t)name_hash(e->rules[r].name,
                                             e->rules[r].name_len) & (nc - 1);
            while (t[j]) j = (j + 1) & (nc - 1);
            t[j] = r + 1;
        }
        e->names = t;
        e->names_cap = nc;
    }
    uint32_t j = (uint32_t)name_hash(name, n) & (e->names_cap - 1);
    while (e->names[j]) {
        gebnf_rule *r = &e->rules[e->names[j] - 1];
        if (r->name_len == n && memcmp(r->name, name, n) == 0) {
            *out = e->names[j] - 1;
            return TR_OK;
        }
        j = (j + 1) & (e->names_cap - 1);
    }
    if (e->n_rules == e->cap_rules) {
        uint32_t nc = e->cap_rules ? e->cap_rules * 2 : 16;
        gebnf_rule *r = tr_gcc_alloc(p->cc, (size_t)nc * sizeof *r);
        if (!r) return p->cc->err;
        if (e->n_rules) memcpy(r, e->rules, e->n_rules * sizeof *r);
        e->rules = r;
        e->cap_rules = nc;
    }
    gebnf_rule *r = &e->rules[e->n_rules];
    memset(r, 0, sizeof *r);
    r->name = name;
    r->name_len = n;
    r->ref_off = (uint32_t)off;
    e->names[j] = e->n_rules + 1;
    *out = e->n_rules++;
    return TR_OK;
}

/* ---- characters ---- */

/* One code point of a literal or class at p->pos (escape or UTF-8). */
static tr_status read_char(ep *p, const char *where, uint32_t *cp) {
    size_t off = p->pos;
    int c = peek(p);
    if (c == '\n' || c == -1)
        return fail(p, TR_ERR_FORMAT, off, "unterminated %s (%s)", where,
                    c == -1 ? "the text ends" : "a newline comes first");
    if (c != '\\') {
        int n = tr_utf8_decode(p->s + p->pos, p->len - p->pos, cp);
        if (n == 0) return fail(p, TR_ERR_FORMAT, off, "invalid UTF-8 in %s", where);
        p->pos += (size_t)n;
        return TR_OK;
    }
    p->pos++;
    int e = peek(p);
    int digits = 0;
    switch (e) {
    case 'n': *cp = '\n'; break;
    case 'r': *cp = '\r'; break;
    case 't': *cp = '\t'; break;
    case 'x': digits = 2; break;
    case 'u': digits = 4; break;
    case 'U': digits = 8; break;
    default:
        if (e > 0x20 && e < 0x7F && !((e >= 'a' && e <= 'z') ||
                                      (e >= 'A' && e <= 'Z') ||
                                      (e >= '0' && e <= '9'))) {
            *cp = (uint32_t)e; /* \\ \" \[ \] \- \/ and other punctuation */
            break;
        }
        return fail(p, TR_ERR_FORMAT, off,
                    "unknown escape in %s (use \\n \\r \\t \\\\ \\\" \\xHH "
                    "\\uHHHH \\UHHHHHHHH or an escaped punctuation mark)",
                    where);
    }
    p->pos++;
    if (digits) {
        uint32_t v = 0;
        for (int i = 0; i < digits; i++) {
            int h = tr_hex_digit(peek(p));
            if (h < 0)
                return fail(p, TR_ERR_FORMAT, off,
                            "malformed \\%c escape in %s (expected %d hex digits)",
                            e, where, digits);
            v = v * 16 + (uint32_t)h;
            p->pos++;
        }
        if (v > GCP_MAX || (v >= GCP_SURR_LO && v <= GCP_SURR_HI))
            return fail(p, TR_ERR_FORMAT, off,
                        "escape U+%X in %s is not a character (surrogate or "
                        "above U+10FFFF)",
                        v, where);
        *cp = v;
    }
    return TR_OK;
}

/* Marks the nodes of a terminal's subtree that hold no empty set as
 * closed (a regex or literal has no references); whether x is closed. */
static bool close_terminal(gre_node *x) {
    bool ok = x->kind != GRE_SET || x->set.n > 0;
    if (x->kind == GRE_REF || x->kind == GRE_DFA || x->kind == GRE_BOL ||
        x->kind == GRE_EOL)
        ok = false;
    for (uint32_t i = 0; i < x->n_kids; i++) ok &= close_terminal(x->kids[i]);
    x->closed = ok;
    return ok;
}

static gre_node *set_node(ep *p, size_t off, uint32_t lo, uint32_t hi) {
    gre_node *n = node_new(p, GRE_SET, off);
    if (n && tr_cpset_add(p->cc, &n->set, lo, hi)) return NULL;
    return n;
}

/* "..." -> CONCAT of one-code-point sets (EMPTY for ""). */
static tr_status parse_literal(ep *p, gre_node **out) {
    size_t open = p->pos++;
    gre_node *cat = node_new(p, GRE_CONCAT, open);
    if (!cat) return p->cc->err;
    uint32_t cap = 0;
    while (peek(p) != '"') {
        size_t off = p->pos;
        uint32_t cp;
        tr_status st = read_char(p, "string literal", &cp);
        if (st) return st;
        gre_node *k = set_node(p, off, cp, cp);
        if (!k) return p->cc->err;
        if ((st = tr_regex_add_kid(p->cc, cat, k, &cap))) return st;
    }
    p->pos++;
    if (cat->n_kids == 0) cat->kind = GRE_EMPTY;
    close_terminal(cat);
    *out = cat->n_kids == 1 ? cat->kids[0] : cat;
    return TR_OK;
}

/* [...] / [^...] over code points. */
static tr_status parse_class(ep *p, gre_node **out) {
    size_t open = p->pos++;
    bool neg = peek(p) == '^';
    if (neg) p->pos++;
    gcpset set = {0};
    while (peek(p) != ']') {
        uint32_t a, b;
        size_t off = p->pos;
        tr_status st = read_char(p, "character class", &a);
        if (st) return st;
        b = a;
        if (peek(p) == '-' && peek_at(p, 1) != ']' && peek_at(p, 1) != -1) {
            p->pos++;
            if ((st = read_char(p, "character class", &b))) return st;
            if (b < a)
                return fail(p, TR_ERR_FORMAT, off,
                            "range out of order in character class");
        }
        if ((st = tr_cpset_add(p->cc, &set, a, b))) return st;
    }
    p->pos++;
    tr_cpset_normalize(&set);
    if (!neg && set.n == 0)
        return fail(p, TR_ERR_FORMAT, open,
                    "empty character class [] matches nothing");
    gre_node *n = node_new(p, GRE_SET, open);
    if (!n) return p->cc->err;
    if (neg) {
        tr_status st = tr_cpset_complement(p->cc, &set, &n->set);
        if (st) return st;
        if (n->set.n == 0)
            return fail(p, TR_ERR_FORMAT, open,
                        "negated character class excludes every code point");
    } else {
        n->set = set;
    }
    n->closed = true; /* a set of at least one code point */
    *out = n;
    return TR_OK;
}

static bool has_anchor(const gre_node *n, uint32_t depth) {
    if (n->kind == GRE_BOL || n->kind == GRE_EOL) return true;
    if (depth > 10000) return true; /* cannot happen: nesting is bounded */
    for (uint32_t i = 0; i < n->n_kids; i++)
        if (has_anchor(n->kids[i], depth + 1)) return true;
    return false;
}

/* Compiles an anchored terminal to its own DFA (anchors = its ends). */
static tr_status terminal_dfa(ep *p, gre_node *ast, size_t off, gre_node **out) {
    gebnf *e = p->e;
    if (e->n_dfas == e->cap_dfas) {
        uint32_t nc = e->cap_dfas ? e->cap_dfas * 2 : 4;
        gdfa **d = tr_gcc_alloc(p->cc, (size_t)nc * sizeof *d);
        if (!d) return p->cc->err;
        if (e->n_dfas) memcpy(d, e->dfas, e->n_dfas * sizeof *d);
        e->dfas = d;
        e->cap_dfas = nc;
    }
    gdfa *d = tr_gcc_alloc(p->cc, sizeof *d);
    if (!d) return p->cc->err;
    gnfa nfa = {0};
    tr_status st = tr_nfa_build(p->cc, ast, &nfa);
    if (!st) st = tr_dfa_build(p->cc, &nfa, d);
    tr_nfa_free(p->cc, &nfa);
    if (st) {
        tr_ebnf_diag_at(p->cc, e, off);
        return st;
    }
    e->dfas[e->n_dfas++] = d; /* freed by tr_ebnf_free from here on */
    if (d->start == GDFA_DEAD)
        return fail(p, TR_ERR_FORMAT, off,
                    "regex terminal matches no string at all");
    gre_node *n = node_new(p, GRE_DFA, off);
    if (!n) return p->cc->err;
    n->dfa = d;
    *out = n;
    return TR_OK;
}

/* /regex/: the text up to the next unescaped '/' on the same line. */
static tr_status parse_regex(ep *p, gre_node **out) {
    size_t open = p->pos++;
    size_t start = p->pos;
    while (peek(p) != '/') {
        int c = peek(p);
        if (c == -1 || c == '\n')
            return fail(p, TR_ERR_FORMAT, open,
                        "unterminated regex terminal (%s before the closing /)",
                        c == -1 ? "the text ends" : "a newline comes");
        p->pos += (c == '\\' && peek_at(p, 1) != -1 && peek_at(p, 1) != '\n') ? 2 : 1;
    }
    size_t end = p->pos++;
    gre_node *ast;
    tr_status st = tr_regex_parse(p->cc, (const char *)p->s + start, end - start, &ast);
    if (st) {
        /* the regex parser's offset is within the terminal: make it the
         * text's, and say where the terminal is */
        tr_diag *d = p->cc->diag;
        if (d) {
            char msg[sizeof d->message];
            snprintf(msg, sizeof msg, "%s", d->message);
            d->line = 0;
            tr_ebnf_diag_at(p->cc, p->e, start + d->offset);
            snprintf(d->message, sizeof d->message,
                     "%d:%d: in regex terminal: %.340s", d->line, d->column, msg);
        }
        return st;
    }
    if (has_anchor(ast, 0)) return terminal_dfa(p, ast, open, out);
    close_terminal(ast);
    *out = ast;
    return TR_OK;
}

/* ---- sequences, alternatives, quantifiers ---- */

static tr_status parse_alts(ep *p, gre_node **out);

static tr_status read_uint(ep *p, size_t off, uint32_t *v) {
    if (!(peek(p) >= '0' && peek(p) <= '9'))
        return fail(p, TR_ERR_FORMAT, off, "malformed repetition {m,n}: expected a number");
    uint64_t x = 0;
    while (peek(p) >= '0' && peek(p) <= '9') {
        x = x * 10 + (uint64_t)(peek(p) - '0');
        if (x > 100000000) x = 100000000; /* saturate; the limit says more */
        p->pos++;
    }
    *v = (uint32_t)x;
    return TR_OK;
}

/* {m} {m,} {m,n} {,n} at '{'. */
static tr_status parse_braces(ep *p, uint32_t *mn, uint32_t *mx) {
    size_t off = p->pos++;
    *mn = *mx = 0;
    tr_status st;
    skip_ws(p, false);
    if (peek(p) == ',') {
        *mn = 0;
    } else if ((st = read_uint(p, off, mn))) {
        return st;
    }
    skip_ws(p, false);
    if (peek(p) == '}') {
        *mx = *mn;
    } else if (peek(p) == ',') {
        p->pos++;
        skip_ws(p, false);
        if (peek(p) == '}') {
            *mx = GRE_INF;
        } else if ((st = read_uint(p, off, mx))) {
            return st;
        }
        skip_ws(p, false);
    }
    if (peek(p) != '}')
        return fail(p, TR_ERR_FORMAT, off, "malformed repetition {m,n}: expected }");
    p->pos++;
    uint32_t lim = p->cc->lim.max_repeat;
    if (*mn > lim || (*mx != GRE_INF && *mx > lim)) {
        tr_status r = fail(p, TR_ERR_LIMIT, off,
                           "repetition count above max_repeat = %u", lim);
        return r;
    }
    if (*mx < *mn)
        return fail(p, TR_ERR_FORMAT, off, "repetition {m,n} with n < m");
    return TR_OK;
}

/* %dfaN: the internal caller's automaton N, as a terminal. */
static tr_status parse_ext(ep *p, gre_node **out) {
    size_t off = p->pos;
    p->pos += 4;
    uint64_t i = 0;
    bool digits = false;
    while (peek(p) >= '0' && peek(p) <= '9' && i < p->n_ext) {
        i = i * 10 + (uint64_t)(peek(p) - '0');
        p->pos++;
        digits = true;
    }
    if (!digits || i >= p->n_ext)
        return fail(p, TR_ERR_FORMAT, off, "no automaton %%dfa%llu", (unsigned long long)i);
    gre_node *n = node_new(p, GRE_DFA, off);
    if (!n) return p->cc->err;
    n->dfa = p->ext[i];
    *out = n;
    return TR_OK;
}

/* One past the closing delimiter of the literal or regex opened at p->pos
 * (the same escapes as its parser skips), or 0 when it does not close on
 * its line: its parser then says what is wrong. */
static size_t terminal_end(const ep *p) {
    uint8_t d = p->s[p->pos];
    for (size_t i = p->pos + 1; i < p->len; i++) {
        uint8_t c = p->s[i];
        if (c == d) return i + 1;
        if (c == '\n') return 0;
        if (c == '\\' && i + 1 < p->len && p->s[i + 1] != '\n') i++;
    }
    return 0;
}

/* A literal or regex terminal, from the memo when its text was met. */
static tr_status parse_terminal(ep *p, gre_node **out) {
    bool lit = peek(p) == '"';
    size_t off = p->pos, end = terminal_end(p);
    if (!end) return lit ? parse_literal(p, out) : parse_regex(p, out);
    uint64_t h = tr_gre_memo_hash(p->s + off, end - off);
    gre_node *n = tr_gre_memo_get(&p->terminals, p->s + off, end - off, h);
    if (n) {
        *out = n;
        p->pos = end;
        return TR_OK;
    }
    tr_status st = lit ? parse_literal(p, out) : parse_regex(p, out);
    if (st || p->pos != end || !((*out)->closed || (*out)->kind == GRE_DFA)) return st;
    return tr_gre_memo_put(p->cc, &p->terminals, p->s + off, end - off, h, *out);
}

static tr_status parse_item(ep *p, gre_node **out) {
    size_t off = p->pos;
    int c = peek(p);
    if (c == '"' || c == '/') return parse_terminal(p, out);
    if (c == '%' && p->n_ext && p->pos + 4 <= p->len && !memcmp(p->s + p->pos, "%dfa", 4))
        return parse_ext(p, out);
    if (c == '[') return parse_class(p, out);
    if (c == '.') {
        p->pos++;
        *out = set_node(p, off, 0, GCP_MAX);
        return *out ? TR_OK : p->cc->err;
    }
    if (c == '(') {
        if (++p->depth > p->cc->lim.max_nesting)
            return fail(p, TR_ERR_LIMIT, off,
                        "parentheses nested deeper than max_nesting = %u",
                        p->cc->lim.max_nesting);
        p->pos++;
        skip_ws(p, true);
        tr_status st = parse_alts(p, out);
        if (st) return st;
        if (peek(p) != ')')
            return fail(p, TR_ERR_FORMAT, off, "missing ) for this (");
        p->pos++;
        p->depth--;
        return TR_OK;
    }
    if (name_char(c)) {
        size_t start = p->pos;
        while (name_char(peek(p))) p->pos++;
        uint32_t n = (uint32_t)(p->pos - start);
        size_t save = p->pos;
        skip_ws(p, p->depth > 0);
        if (peek(p) == ':' && peek_at(p, 1) == ':' && peek_at(p, 2) == '=')
            return fail(p, TR_ERR_FORMAT, start,
                        "rule '%.*s' starts inside the previous rule (a rule "
                        "ends at a newline outside parentheses; is a ( or a "
                        "rule body missing?)",
                        (int)n, (const char *)p->s + start);
        p->pos = save;
        gre_node *r = node_new(p, GRE_REF, off);
        if (!r) return p->cc->err;
        tr_status st = rule_index(p, (const char *)p->s + start, n, start, &r->ref);
        if (st) return st;
        *out = r;
        return TR_OK;
    }
    if (c == '<' || c == '!')
        return fail(p, TR_ERR_UNSUPPORTED, off,
                    "token references (<...>, !<...>) are not supported; "
                    "write the token's text as a literal");
    if (c == '*' || c == '+' || c == '?' || c == '{')
        return fail(p, TR_ERR_FORMAT, off, "'%c' does not follow an item", c);
    if (c == ':' && peek_at(p, 1) == ':')
        return fail(p, TR_ERR_FORMAT, off, "'::=' without a rule name before it");
    if (c >= 0x21 && c < 0x7F)
        return fail(p, TR_ERR_FORMAT, off, "unexpected '%c' (expected a rule "
                    "name, \"literal\", [class], ., (group) or /regex/)", c);
    return fail(p, TR_ERR_FORMAT, off, "unexpected byte 0x%02X (expected a rule "
                "name, \"literal\", [class], ., (group) or /regex/)", (unsigned)c);
}

/* Ends at '|', ')', end of text, or (top level) a newline. */
static tr_status parse_seq(ep *p, gre_node **out) {
    gre_node *cat = node_new(p, GRE_CONCAT, p->pos);
    if (!cat) return p->cc->err;
    uint32_t cap = 0;
    for (;;) {
        skip_ws(p, p->depth > 0);
        int c = peek(p);
        if (c == -1 || c == '|' || c == ')' || c == '\n') break;
        tr_status st = tr_gcc_poll_time(p->cc);
        if (st) return st;
        gre_node *item;
        if ((st = parse_item(p, &item))) return st;
        for (;;) { /* quantifiers, stacked as written: x*? = (x*)? */
            size_t qoff = p->pos;
            uint32_t mn = 0, mx = 0;
            c = peek(p);
            if (c == '*') mn = 0, mx = GRE_INF, p->pos++;
            else if (c == '+') mn = 1, mx = GRE_INF, p->pos++;
            else if (c == '?') mn = 0, mx = 1, p->pos++;
            else if (c == '{') {
                if ((st = parse_braces(p, &mn, &mx))) return st;
            } else break;
            gre_node *r = node_new(p, GRE_REPEAT, qoff);
            if (!r) return p->cc->err;
            uint32_t one = 0;
            if ((st = tr_regex_add_kid(p->cc, r, item, &one))) return st;
            r->min = mn;
            r->max = mx;
            item = r;
        }
        if ((st = tr_regex_add_kid(p->cc, cat, item, &cap))) return st;
    }
    if (cat->n_kids == 0) cat->kind = GRE_EMPTY;
    *out = cat->n_kids == 1 ? cat->kids[0] : cat;
    return TR_OK;
}

static tr_status parse_alts(ep *p, gre_node **out) {
    gre_node *first;
    tr_status st = parse_seq(p, &first);
    if (st) return st;
    gre_node *alt = NULL;
    uint32_t cap = 0;
    for (;;) {
        if (peek(p) == '\n' && p->depth == 0 && !continues_with_bar(p)) break;
        if (peek(p) != '|') break;
        p->pos++;
        skip_ws(p, true); /* a newline may follow '|' */
        if (!alt) {
            alt = node_new(p, GRE_ALT, first->offset);
            if (!alt || (st = tr_regex_add_kid(p->cc, alt, first, &cap))) return p->cc->err;
        }
        gre_node *k;
        if ((st = parse_seq(p, &k))) return st;
        if ((st = tr_regex_add_kid(p->cc, alt, k, &cap))) return st;
    }
    *out = alt ? alt : first;
    return TR_OK;
}

static tr_status parse_rule(ep *p) {
    size_t start = p->pos;
    if (!name_char(peek(p))) {
        int c = peek(p);
        if (c >= 0x21 && c < 0x7F)
            return fail(p, TR_ERR_FORMAT, start,
                        "expected a rule name (name ::= ...), found '%c'", c);
        return fail(p, TR_ERR_FORMAT, start,
                    "expected a rule name (name ::= ...), found byte 0x%02X",
                    (unsigned)c);
    }
    while (name_char(peek(p))) p->pos++;
    uint32_t n = (uint32_t)(p->pos - start);
    const char *name = (const char *)p->s + start;
    skip_ws(p, false);
    if (!(peek(p) == ':' && peek_at(p, 1) == ':' && peek_at(p, 2) == '='))
        return fail(p, TR_ERR_FORMAT, p->pos,
                    "expected '::=' after rule name '%.*s'", (int)n, name);
    p->pos += 3;
    uint32_t r;
    tr_status st = rule_index(p, name, n, start, &r);
    if (st) return st;
    gebnf_rule *rule = &p->e->rules[r];
    if (rule->defined) {
        int line = 1;
        for (uint32_t i = 0; i < rule->def_off; i++) line += p->s[i] == '\n';
        return fail(p, TR_ERR_FORMAT, start,
                    "rule '%.*s' is defined twice (first on line %d)", (int)n,
                    name, line);
    }
    skip_ws(p, true); /* the body may start on the next line */
    gre_node *body;
    if ((st = parse_alts(p, &body))) return st;
    if (peek(p) == ')')
        return fail(p, TR_ERR_FORMAT, p->pos, "unmatched )");
    rule = &p->e->rules[r]; /* the table may have moved */
    rule->defined = true;
    rule->def_off = (uint32_t)start;
    rule->body = body;
    return TR_OK;
}

tr_status tr_ebnf_parse(gcc *cc, const char *text, size_t len, const gdfa *const *ext,
                        uint32_t n_ext, gebnf *e) {
    memset(e, 0, sizeof *e);
    e->text = (const uint8_t *)text;
    e->len = len;
    ep p = {.cc = cc, .e = e, .s = (const uint8_t *)text, .len = len, .ext = ext,
            .n_ext = n_ext};
    for (;;) {
        skip_ws(&p, true);
        if (at_end(&p)) break;
        tr_status st = parse_rule(&p);
        if (st) return st;
    }
    for (uint32_t r = 0; r < e->n_rules; r++)
        if (!e->rules[r].defined)
            return fail(&p, TR_ERR_FORMAT, e->rules[r].ref_off,
                        "undefined rule '%.*s'", (int)e->rules[r].name_len,
                        e->rules[r].name);
    uint32_t root;
    for (root = 0; root < e->n_rules; root++)
        if (e->rules[root].name_len == 4 && memcmp(e->rules[root].name, "root", 4) == 0)
            break;
    if (root == e->n_rules)
        return fail(&p, TR_ERR_FORMAT, 0,
                    "no rule named 'root' (the start rule)");
    e->root = root;
    return TR_OK;
}

void tr_ebnf_free(gebnf *e) {
    for (uint32_t i = 0; i < e->n_dfas; i++) tr_dfa_free(e->dfas[i]);
    e->n_dfas = 0;
}
