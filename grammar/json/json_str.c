/* json_str.c — JSON Schema strings: `pattern` (ECMAScript flavour, search
 * semantics) as the AST of the decoded strings it allows, and that AST
 * printed as the regex of the JSON string literals that encode them.
 *
 * Layering: grammar/json (json_internal.h), over
 * regex_parse.c (the dialect of grammar.h) and cpdfa.c.
 *
 * Patterns. JSON Schema patterns are ECMAScript regexes that are FOUND
 * in the string (not anchored). Before parsing, the ECMAScript meanings
 * that differ from grammar.h's dialect are spelled out: `.` excludes all
 * four line terminators (\n \r U+2028 U+2029), \s and \S are
 * ECMAScript's Unicode white space. After parsing, the search is made
 * explicit: P becomes [any]* P [any]* unless P starts with ^ / ends with
 * $ (per branch of a top-level alternation). A pattern whose anchors sit
 * anywhere else goes through the exact automaton route (cpdfa.c), which
 * gives anchors their exact meaning.
 *
 * Encoding. A decoded code point c may appear in a JSON string raw
 * (unless it is ", \ or a control character), as one of the escapes
 * \" \\ \/ \b \f \n \r \t, or as \u00XX for control characters (what
 * Python's json.dumps writes); sets that hold every code point also take
 * any \uXXXX escape and surrogate pairs (lone surrogates never: they are
 * not code points). Each encoded unit stands for exactly one code point,
 * so repetition counts (minLength / maxLength) carry over unchanged.
 */
#include <string.h>

#include "base/utf8.h"
#include "grammar/json/json_internal.h"

/* ---- AST constructors ---- */

static gre_node *ast_new(gcc *cc, gre_kind k) { return tr_regex_node_new(cc, k, 0); }

gre_node *tr_js_ast_set(gcc *cc, uint32_t lo, uint32_t hi) {
    gre_node *n = ast_new(cc, GRE_SET);
    if (!n || tr_cpset_add(cc, &n->set, lo, hi)) return NULL;
    tr_cpset_normalize(&n->set);
    return n;
}

gre_node *tr_js_ast_any(gcc *cc) { return tr_js_ast_set(cc, 0, GCP_MAX); }

gre_node *tr_js_ast_empty(gcc *cc) { return ast_new(cc, GRE_EMPTY); }

static gre_node *ast_pair(gcc *cc, gre_kind k, gre_node *a, gre_node *b) {
    if (!a || !b) return NULL;
    gre_node *n = ast_new(cc, k);
    if (!n) return NULL;
    n->kids = tr_gcc_alloc(cc, 2 * sizeof *n->kids);
    if (!n->kids) return NULL;
    n->kids[0] = a;
    n->kids[1] = b;
    n->n_kids = 2;
    return n;
}

gre_node *tr_js_ast_cat(gcc *cc, gre_node *a, gre_node *b) {
    if (a && a->kind == GRE_EMPTY) return b;
    if (b && b->kind == GRE_EMPTY) return a;
    return ast_pair(cc, GRE_CONCAT, a, b);
}

gre_node *tr_js_ast_alt(gcc *cc, gre_node *a, gre_node *b) {
    return ast_pair(cc, GRE_ALT, a, b);
}

gre_node *tr_js_ast_rep(gcc *cc, gre_node *a, uint32_t min, uint32_t max) {
    if (!a) return NULL;
    gre_node *n = ast_new(cc, GRE_REPEAT);
    if (!n) return NULL;
    n->kids = tr_gcc_alloc(cc, sizeof *n->kids);
    if (!n->kids) return NULL;
    n->kids[0] = a;
    n->n_kids = 1;
    n->min = min;
    n->max = max;
    return n;
}

gre_node *tr_js_ast_lit(gcc *cc, const char *s, size_t n) {
    gre_node *r = tr_js_ast_empty(cc);
    for (size_t i = 0; r && i < n;) {
        uint32_t cp;
        int k = tr_utf8_decode((const uint8_t *)s + i, n - i, &cp);
        if (k <= 0) {
            tr_gcc_fail(cc, TR_ERR_FORMAT, i, "invalid UTF-8 in a string");
            return NULL;
        }
        r = tr_js_ast_cat(cc, r, tr_js_ast_set(cc, cp, cp));
        i += (size_t)k;
    }
    return r;
}

static uint64_t sat_mul(uint64_t a, uint64_t b) {
    if (a == GRE_INF || b == GRE_INF) return (a == 0 || b == 0) ? 0 : GRE_INF;
    uint64_t r = a * b;
    return r >= GRE_INF ? GRE_INF : r;
}

static uint64_t sat_add(uint64_t a, uint64_t b) {
    uint64_t r = a + b;
    return (a >= GRE_INF || b >= GRE_INF || r >= GRE_INF) ? GRE_INF : r;
}

void tr_js_ast_len(const gre_node *a, uint64_t *min, uint64_t *max) {
    switch (a->kind) {
    case GRE_SET: *min = *max = 1; return;
    case GRE_EMPTY:
    case GRE_BOL:
    case GRE_EOL: *min = *max = 0; return;
    case GRE_CONCAT: {
        uint64_t lo = 0, hi = 0;
        for (uint32_t i = 0; i < a->n_kids; i++) {
            uint64_t l, h;
            tr_js_ast_len(a->kids[i], &l, &h);
            lo = sat_add(lo, l);
            hi = sat_add(hi, h);
        }
        *min = lo, *max = hi;
        return;
    }
    case GRE_ALT: {
        uint64_t lo = GRE_INF, hi = 0;
        for (uint32_t i = 0; i < a->n_kids; i++) {
            uint64_t l, h;
            tr_js_ast_len(a->kids[i], &l, &h);
            lo = TR_MIN(lo, l);
            hi = TR_MAX(hi, h);
        }
        *min = lo, *max = hi;
        return;
    }
    case GRE_REPEAT: {
        uint64_t l, h;
        tr_js_ast_len(a->kids[0], &l, &h);
        *min = sat_mul(l, a->min);
        *max = sat_mul(h, a->max);
        return;
    }
    default: /* GRE_REF, GRE_DFA: never in a string AST */
        *min = 0, *max = GRE_INF;
        return;
    }
}

bool tr_js_ast_has_anchor(const gre_node *a) {
    if (a->kind == GRE_BOL || a->kind == GRE_EOL) return true;
    for (uint32_t i = 0; i < a->n_kids; i++)
        if (tr_js_ast_has_anchor(a->kids[i])) return true;
    return false;
}

/* ---- ECMAScript patterns ---- */

#define ECMA_WS "\\t\\n\\x0B\\f\\r \\xA0\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}" \
                "\\x{202F}\\x{205F}\\x{3000}\\x{FEFF}"
#define ECMA_NOT_WS "\\x00-\\x08\\x0E-\\x1F!-\\x9F\\xA1-\\x{167F}\\x{1681}-\\x{1FFF}"        \
                    "\\x{200B}-\\x{2027}\\x{202A}-\\x{202E}\\x{2030}-\\x{205E}"              \
                    "\\x{2060}-\\x{2FFF}\\x{3001}-\\x{FEFE}\\x{FF00}-\\x{10FFFF}"

/* Rewrites the ECMAScript-only meanings into the dialect's syntax. */
static void ecma_rewrite(js_buf *b, const char *p, size_t n) {
    bool in_class = false;
    for (size_t i = 0; i < n; i++) {
        char c = p[i];
        if (c == '\\' && i + 1 < n) {
            char k = p[i + 1];
            if (k == 's' || k == 'S') {
                if (in_class)
                    tr_js_buf_puts(b, k == 's' ? ECMA_WS : ECMA_NOT_WS);
                else
                    tr_js_buf_puts(b, k == 's' ? "[" ECMA_WS "]" : "[^" ECMA_WS "]");
                i++;
                continue;
            }
            tr_js_buf_add(b, p + i, 2);
            i++;
            continue;
        }
        if (in_class) {
            if (c == ']') in_class = false;
            tr_js_buf_add(b, &c, 1);
            continue;
        }
        if (c == '[') {
            in_class = true;
            tr_js_buf_add(b, &c, 1);
            /* a leading ] or ^] is not special here; let the parser decide */
            continue;
        }
        if (c == '.') {
            tr_js_buf_puts(b, "[^\\n\\r\\x{2028}\\x{2029}]");
            continue;
        }
        tr_js_buf_add(b, &c, 1);
    }
}

gre_node *tr_js_rep_any(gcc *cc) { return tr_js_ast_rep(cc, tr_js_ast_any(cc), 0, GRE_INF); }

static gre_node *any_star(gcc *cc) { return tr_js_rep_any(cc); }

/* Search language of one branch: leading ^ and trailing $ become "no
 * padding" on that side; false when anchors sit anywhere else. */
static bool branch_search(gcc *cc, gre_node *br, gre_node **out) {
    gre_node **kids = &br;
    uint32_t n = 1;
    if (br->kind == GRE_CONCAT) kids = br->kids, n = br->n_kids;
    uint32_t a = 0, z = n;
    bool bol = false, eol = false;
    while (a < z && kids[a]->kind == GRE_BOL) bol = true, a++;
    while (z > a && kids[z - 1]->kind == GRE_EOL) eol = true, z--;
    gre_node *core = tr_js_ast_empty(cc);
    for (uint32_t i = a; core && i < z; i++) {
        if (tr_js_ast_has_anchor(kids[i])) return false;
        core = tr_js_ast_cat(cc, core, kids[i]);
    }
    if (!bol) core = tr_js_ast_cat(cc, any_star(cc), core);
    if (!eol) core = tr_js_ast_cat(cc, core, any_star(cc));
    *out = core;
    return true;
}

static tr_status parse_plain(gcc *cc, const char *pat, size_t len, gre_node **out) {
    js_buf b;
    tr_js_buf_init(&b, cc);
    ecma_rewrite(&b, pat, len);
    gre_node *ast = NULL;
    tr_status st = js_buf_ok(&b) ? tr_regex_parse(cc, b.p ? b.p : "", b.n, &ast) : cc->err;
    tr_js_buf_free(&b);
    if (st) return st;
    gre_node **br = &ast;
    uint32_t n = 1;
    if (ast->kind == GRE_ALT) br = ast->kids, n = ast->n_kids;
    gre_node *res = NULL;
    for (uint32_t i = 0; i < n; i++) {
        gre_node *s;
        if (!branch_search(cc, br[i], &s)) {
            res = NULL;
            break;
        }
        res = res ? tr_js_ast_alt(cc, res, s) : s;
        if (!res) return cc->err;
    }
    if (res) {
        *out = res;
        return TR_OK;
    }
    /* anchors in odd places: the automaton gives them their exact
     * meaning (^ only before the first code point, $ only after the
     * last), then state elimination gives an anchor-free AST back */
    gre_node *wrapped = tr_js_ast_cat(cc, tr_js_ast_cat(cc, any_star(cc), ast), any_star(cc));
    if (!wrapped) return cc->err;
    cpdfa d;
    if ((st = tr_cpdfa_from_ast(cc, wrapped, &d))) return st;
    return tr_cpdfa_to_ast(cc, &d, 20000, out);
}

/* ---- lookaheads ----
 *
 * The regex engine has no lookaround. Two shapes of negative and
 * positive lookahead that schemas use are regular and rewritten here
 * into automaton products (then back to an AST by state elimination):
 *   ^(?!X)R  ^(?=X)R     the strings of ^R with (without) a prefix in X;
 *                        several in a row nest (^(?=A)(?!B)R);
 *   ^((?!X1)...(?!Xk).)*$  (or a (?: group): strings of non-line-
 *                        terminators in which no Xi starts anywhere.
 * Anything else with a lookahead stays refused, as before. */

/* Index of the ')' closing the group that opens at t[open] ('('), past
 * escapes and character classes; len when unbalanced. */
static size_t group_end(const char *t, size_t len, size_t open) {
    int depth = 0;
    bool cls = false;
    for (size_t i = open; i < len; i++) {
        if (t[i] == '\\') {
            i++;
            continue;
        }
        if (cls) {
            cls = t[i] != ']';
            continue;
        }
        if (t[i] == '[') cls = true;
        else if (t[i] == '(') depth++;
        else if (t[i] == ')' && --depth == 0) return i;
    }
    return len;
}

static bool starts(const char *t, size_t len, size_t at, const char *w) {
    size_t n = strlen(w);
    return at + n <= len && memcmp(t + at, w, n) == 0;
}

/* The full-string language (automaton) of pattern text a b c. */
static tr_status lang_of(gcc *cc, const char *a, size_t an, const char *b, size_t bn,
                         const char *c, size_t cn, cpdfa *out) {
    js_buf t;
    tr_js_buf_init(&t, cc);
    tr_js_buf_add(&t, a, an);
    tr_js_buf_add(&t, b, bn);
    tr_js_buf_add(&t, c, cn);
    gre_node *ast = NULL;
    tr_status st = js_buf_ok(&t) ? TR_OK : cc->err;
    if (!st) st = parse_plain(cc, t.p ? t.p : "", t.n, &ast);
    tr_js_buf_free(&t);
    if (!st) st = tr_cpdfa_from_ast(cc, ast, out);
    return st;
}

static tr_status tempered(gcc *cc, const char *pat, size_t len, cpdfa *out, bool *shaped) {
    size_t at = starts(pat, len, 0, "^(?:") ? 4 : starts(pat, len, 0, "^(") ? 2 : 0;
    if (!at || !starts(pat, len, at, "(?!")) return TR_OK;
    size_t x0[8], x1[8], k = 0;
    while (k < 8 && starts(pat, len, at, "(?!")) {
        size_t e = group_end(pat, len, at);
        if (e >= len) return TR_OK;
        x0[k] = at + 3;
        x1[k++] = e;
        at = e + 1;
    }
    if (!(len == at + 4 && starts(pat, len, at, ".)*$"))) return TR_OK;
    *shaped = true;
    tr_status st = lang_of(cc, "^(?:.)*$", 8, "", 0, "", 0, out);
    for (size_t i = 0; !st && i < k; i++) {
        cpdfa x, r;
        st = lang_of(cc, "(?:", 3, pat + x0[i], x1[i] - x0[i], ")", 1, &x);
        if (!st) st = tr_cpdfa_product(cc, out, &x, CPD_MINUS, &r);
        if (!st) *out = r;
    }
    return st;
}

/* pat as a lookahead shape above: its language in *out (*shaped false
 * when it has neither shape). depth bounds the nesting. */
static tr_status lookahead_lang(gcc *cc, const char *pat, size_t len, int depth, cpdfa *out,
                                bool *shaped) {
    *shaped = false;
    if (depth > 8) return TR_OK;
    tr_status st = tempered(cc, pat, len, out, shaped);
    if (st || *shaped) return st;
    bool neg = starts(pat, len, 0, "^(?!");
    if (!neg && !starts(pat, len, 0, "^(?=")) return TR_OK;
    size_t e = group_end(pat, len, 1);
    if (e >= len) return TR_OK;
    *shaped = true;
    cpdfa rest, x, r;
    bool inner = false;
    /* the rest: ^R, itself perhaps a lookahead shape */
    js_buf t;
    tr_js_buf_init(&t, cc);
    tr_js_buf_putc(&t, '^');
    tr_js_buf_add(&t, pat + e + 1, len - e - 1);
    st = js_buf_ok(&t) ? lookahead_lang(cc, t.p, t.n, depth + 1, &rest, &inner) : cc->err;
    if (!st && !inner) st = lang_of(cc, t.p, t.n, "", 0, "", 0, &rest);
    tr_js_buf_free(&t);
    if (!st) st = lang_of(cc, "^(?:", 4, pat + 4, e - 4, ")", 1, &x);
    if (!st) st = tr_cpdfa_product(cc, &rest, &x, neg ? CPD_MINUS : CPD_AND, &r);
    if (!st) *out = r;
    return st;
}

static bool has_lookahead(const char *pat, size_t len) {
    for (size_t i = 0; i + 3 <= len; i++)
        if (pat[i] == '\\') i++;
        else if (pat[i] == '(' && pat[i + 1] == '?' && (pat[i + 2] == '!' || pat[i + 2] == '='))
            return true;
    return false;
}

tr_status tr_js_pattern_parse(gcc *cc, const char *pat, size_t len, gre_node **out) {
    tr_status st = parse_plain(cc, pat, len, out);
    if (st != TR_ERR_UNSUPPORTED || !has_lookahead(pat, len)) return st;
    tr_diag keep = cc->diag ? *cc->diag : (tr_diag){0};
    cc->err = TR_OK;
    if (cc->diag) memset(cc->diag, 0, sizeof *cc->diag);
    cpdfa d, m;
    bool shaped = false;
    tr_status st2 = lookahead_lang(cc, pat, len, 0, &d, &shaped);
    if (!st2 && shaped && !tr_cpdfa_is_empty(&d)) {
        st2 = tr_cpdfa_minimize(cc, &d, &m);
        if (!st2) st2 = tr_cpdfa_to_ast(cc, &m, 20000, out);
        if (!st2) return TR_OK;
    }
    if (st2 && st2 != TR_ERR_UNSUPPORTED && st2 != TR_ERR_FORMAT && st2 != TR_ERR_LIMIT)
        return st2; /* out of memory, time */
    if (shaped && !st2 && tr_cpdfa_is_empty(&d))
        return tr_gcc_fail(cc, TR_ERR_UNSUPPORTED, 0, "pattern matches no string");
    /* not a shape handled here, or too large: the regex engine's refusal */
    if (cc->diag) *cc->diag = keep;
    cc->err = st;
    return st;
}

/* ---- encoding ---- */

static void put_cp(js_buf *b, uint32_t c) {
    if (c < 0x20 || c == 0x7f)
        tr_js_buf_printf(b, "\\x%02X", c);
    else if (c < 0x80) {
        if (strchr("\\]^-[/", (int)c)) tr_js_buf_putc(b, '\\');
        tr_js_buf_putc(b, (char)c);
    } else
        tr_js_buf_printf(b, "\\x{%X}", c);
}

static bool set_covers(const gcpset *s, uint32_t lo, uint32_t hi) {
    /* s normalized; is [lo, hi] minus surrogates inside s? */
    for (uint32_t i = 0; i < s->n; i++) {
        if (s->r[i][0] <= lo && s->r[i][1] >= hi) return true;
        if (s->r[i][0] <= lo && s->r[i][1] >= lo) {
            /* a range may stop at the surrogate gap and resume after it */
            if (s->r[i][1] == GCP_SURR_LO - 1 && hi > GCP_SURR_HI)
                return set_covers(s, GCP_SURR_HI + 1, hi);
            return false;
        }
    }
    return false;
}

static void put_range(js_buf *b, uint32_t a, uint32_t z) {
    put_cp(b, a);
    if (z > a) {
        if (z > a + 1) tr_js_buf_putc(b, '-');
        put_cp(b, z);
    }
}

/* The raw part: the set minus ", \ and U+0000..U+001F, as one class. */
static bool put_raw_class(js_buf *b, const gcpset *s) {
    size_t mark = b->n;
    bool any = false;
    tr_js_buf_putc(b, '[');
    for (uint32_t i = 0; i < s->n; i++) {
        uint32_t a = TR_MAX(s->r[i][0], 0x20u), hi = s->r[i][1];
        if (a > hi) continue;
        static const uint32_t cuts[2] = {'"', '\\'};
        for (int k = 0; k < 2; k++) {
            if (cuts[k] < a || cuts[k] > hi) continue;
            if (cuts[k] > a) put_range(b, a, cuts[k] - 1), any = true;
            a = cuts[k] + 1;
        }
        if (a <= hi) put_range(b, a, hi), any = true;
    }
    tr_js_buf_putc(b, ']');
    if (!any) b->n = mark;
    return any;
}

/* A set with no escaped spelling: one code point (printed as itself)
 * or one class. */
static bool raw_only(const gcpset *s) {
    for (uint32_t i = 0; i < s->n; i++) {
        if (s->r[i][0] < 0x20) return false;
        if (s->r[i][0] <= '"' && s->r[i][1] >= '"') return false;
        if (s->r[i][0] <= '/' && s->r[i][1] >= '/') return false;
        if (s->r[i][0] <= '\\' && s->r[i][1] >= '\\') return false;
    }
    return true;
}

void tr_js_str_unit_regex(const gcpset *s, js_buf *b) {
    if (s->n && raw_only(s) && !set_covers(s, 0x20, 0xFFFF)) {
        if (s->n == 1 && s->r[0][0] == s->r[0][1]) {
            uint32_t c = s->r[0][0];
            if (c < 0x80 && strchr("\\.*+?()[]{}|^$/", (int)c))
                tr_js_buf_putc(b, '\\');
            if (c < 0x80)
                tr_js_buf_putc(b, (char)c);
            else
                tr_js_buf_printf(b, "\\x{%X}", c);
            return;
        }
        put_raw_class(b, s);
        return;
    }
    tr_js_buf_puts(b, "(?:");
    bool alt = put_raw_class(b, s);
    /* two-character escapes */
    static const struct { uint32_t cp; char e; } esc[] = {
        {'"', '"'}, {'\\', '\\'}, {'/', '/'}, {8, 'b'}, {12, 'f'}, {10, 'n'}, {13, 'r'}, {9, 't'}};
    char letters[16];
    int nl = 0;
    for (size_t i = 0; i < TR_ARRAY_LEN(esc); i++)
        if (tr_cpset_contains(s, esc[i].cp)) letters[nl++] = esc[i].e;
    bool all_bmp = set_covers(s, 0, 0xFFFF);
    bool all_astral = set_covers(s, 0x10000, GCP_MAX);
    bool ctrl = false;
    for (uint32_t c = 0; c < 0x20 && !ctrl; c++) ctrl = tr_cpset_contains(s, c);
    if (nl || all_bmp || ctrl) {
        if (alt) tr_js_buf_putc(b, '|');
        alt = true;
        tr_js_buf_puts(b, "\\\\(?:");
        bool inner = false;
        if (nl) {
            tr_js_buf_putc(b, '[');
            for (int i = 0; i < nl; i++) {
                if (letters[i] == '\\' || letters[i] == '/') tr_js_buf_putc(b, '\\');
                tr_js_buf_putc(b, letters[i]);
            }
            tr_js_buf_putc(b, ']');
            inner = true;
        }
        if (all_bmp) {
            tr_js_buf_puts(b, inner ? "|" : "");
            tr_js_buf_puts(b, "u(?:[0-9a-cA-CefEF][0-9a-fA-F]{3}|[dD][0-7][0-9a-fA-F]{2}");
            if (all_astral)
                tr_js_buf_puts(b, "|[dD][89abAB][0-9a-fA-F]{2}\\\\u[dD][c-fC-F][0-9a-fA-F]{2}");
            tr_js_buf_putc(b, ')');
        } else if (ctrl) {
            /* \u00XX for the control characters in the set, per high digit */
            bool all = true;
            for (uint32_t c = 0; c < 0x20 && all; c++) all = tr_cpset_contains(s, c);
            if (all) {
                tr_js_buf_puts(b, inner ? "|u00[01][0-9a-fA-F]" : "u00[01][0-9a-fA-F]");
            } else {
                tr_js_buf_puts(b, inner ? "|u00(?:" : "u00(?:");
                bool first = true;
                for (uint32_t hi = 0; hi < 2; hi++) {
                    char cls[64];
                    int k = 0;
                    for (uint32_t lo = 0; lo < 16; lo++) {
                        if (!tr_cpset_contains(s, hi * 16 + lo)) continue;
                        const char *hx = "0123456789abcdef";
                        cls[k++] = hx[lo];
                        if (lo >= 10) cls[k++] = (char)(hx[lo] - 'a' + 'A');
                    }
                    if (!k) continue;
                    cls[k] = 0;
                    tr_js_buf_printf(b, "%s%u[%s]", first ? "" : "|", hi, cls);
                    first = false;
                }
                tr_js_buf_putc(b, ')');
            }
        }
        tr_js_buf_putc(b, ')');
    }
    if (!alt) tr_js_buf_puts(b, "[^\\x00-\\x{10FFFF}]"); /* empty set: never */
    tr_js_buf_putc(b, ')');
}

/* Prints a decoded-string AST as regex text, each code-point set by
 * `set`: as the JSON encodings of its code points (tr_js_str_unit_regex)
 * or as itself (plain_set). Anchors must have been removed before. */
typedef void (*set_printer)(const gcpset *s, js_buf *b);

static void print_ast(const gre_node *a, set_printer set, js_buf *b) {
    if (b->over) return; /* past the caller's limit: the rest is not wanted */
    switch (a->kind) {
    case GRE_SET: set(&a->set, b); return;
    case GRE_EMPTY:
    case GRE_BOL:
    case GRE_EOL: return; /* anchors were removed before */
    case GRE_CONCAT:
        for (uint32_t i = 0; i < a->n_kids; i++) {
            bool g = a->kids[i]->kind == GRE_ALT;
            if (g) tr_js_buf_puts(b, "(?:");
            print_ast(a->kids[i], set, b);
            if (g) tr_js_buf_putc(b, ')');
        }
        return;
    case GRE_ALT:
        for (uint32_t i = 0; i < a->n_kids; i++) {
            if (i) tr_js_buf_putc(b, '|');
            print_ast(a->kids[i], set, b);
        }
        return;
    default: return; /* GRE_REF, GRE_DFA: never in a string AST */
    case GRE_REPEAT:
        tr_js_buf_puts(b, "(?:");
        print_ast(a->kids[0], set, b);
        tr_js_buf_putc(b, ')');
        if (a->min == 0 && a->max == GRE_INF)
            tr_js_buf_putc(b, '*');
        else if (a->min == 1 && a->max == GRE_INF)
            tr_js_buf_putc(b, '+');
        else if (a->min == 0 && a->max == 1)
            tr_js_buf_putc(b, '?');
        else if (a->max == GRE_INF)
            tr_js_buf_printf(b, "{%u,}", a->min);
        else if (a->min == a->max)
            tr_js_buf_printf(b, "{%u}", a->min);
        else
            tr_js_buf_printf(b, "{%u,%u}", a->min, a->max);
        return;
    }
}

tr_status tr_js_str_regex(gcc *cc, const gre_node *ast, js_buf *b) {
    if (tr_js_ast_has_anchor(ast))
        return tr_gcc_fail(cc, TR_ERR_INTERNAL, 0, "anchor left in a string AST");
    tr_js_buf_puts(b, "\"(?:");
    print_ast(ast, tr_js_str_unit_regex, b);
    tr_js_buf_puts(b, ")\"");
    return js_buf_ok(b) ? TR_OK : (cc->err ? cc->err : TR_ERR_NOMEM);
}

#define ANY_UNIT                                                                      \
    "(?:[^\"\\\\\\x00-\\x1F]|\\\\(?:[\"\\\\\\/bfnrt]|u(?:[0-9a-cA-CefEF][0-9a-fA-F]{3}|" \
    "[dD][0-7][0-9a-fA-F]{2}|[dD][89abAB][0-9a-fA-F]{2}\\\\u[dD][c-fC-F][0-9a-fA-F]{2})))"

void tr_js_str_any_unit(js_buf *b) { tr_js_buf_puts(b, ANY_UNIT); }

/* One code point in the spellings Python's json.dumps uses (raw, the
 * two-character escapes, \u00XX for controls): 13 DFA states per counted
 * position instead of 20 with every \uXXXX and surrogate pair, which
 * matters when maxLength multiplies them. */
void tr_js_str_counted_unit(js_buf *b) {
    tr_js_buf_puts(b, "(?:[^\"\\\\\\x00-\\x1F]|\\\\(?:[\"\\\\\\/bfnrt]|u00[01][0-9a-fA-F]))");
}

void tr_js_str_any_regex(uint32_t min, uint32_t max, js_buf *b) {
    tr_js_buf_puts(b, "\"" ANY_UNIT);
    if (min == 1 && max == 1)
        ;
    else if (min == 0 && max == GRE_INF)
        tr_js_buf_putc(b, '*');
    else if (min == 1 && max == GRE_INF)
        tr_js_buf_putc(b, '+');
    else if (max == GRE_INF)
        tr_js_buf_printf(b, "{%u,}", min);
    else if (min == max)
        tr_js_buf_printf(b, "{%u}", min);
    else
        tr_js_buf_printf(b, "{%u,%u}", min, max);
    tr_js_buf_putc(b, '"');
}

/* ---- plain regex text of a decoded AST ---- */

static void plain_set(const gcpset *s, js_buf *b) {
    if (s->n == 1 && s->r[0][0] == s->r[0][1]) {
        uint32_t c = s->r[0][0];
        if (c >= 0x20 && c < 0x7f && !strchr("\\.*+?()[]{}|^$/", (int)c))
            tr_js_buf_putc(b, (char)c);
        else if (c < 0x80)
            tr_js_buf_printf(b, "\\x%02X", c);
        else
            tr_js_buf_printf(b, "\\x{%X}", c);
        return;
    }
    tr_js_buf_putc(b, '[');
    for (uint32_t i = 0; i < s->n; i++) put_range(b, s->r[i][0], s->r[i][1]);
    tr_js_buf_putc(b, ']');
}

void tr_js_ast_regex(const gre_node *a, js_buf *b) { print_ast(a, plain_set, b); }

/* ---- simplifying ASTs that state elimination produced ---- */

static bool set_eq(const gcpset *a, const gcpset *b) {
    return a->n == b->n && !memcmp(a->r, b->r, a->n * sizeof *a->r);
}

bool tr_js_ast_eq(const gre_node *a, const gre_node *b) {
    if (a == b) return true;
    if (a->kind != b->kind || a->n_kids != b->n_kids) return false;
    if (a->kind == GRE_SET) return set_eq(&a->set, &b->set);
    if (a->kind == GRE_REPEAT && (a->min != b->min || a->max != b->max)) return false;
    for (uint32_t i = 0; i < a->n_kids; i++)
        if (!tr_js_ast_eq(a->kids[i], b->kids[i])) return false;
    return true;
}

static uint32_t add_count(uint32_t a, uint32_t b) {
    return a == GRE_INF || b == GRE_INF || a + b >= GRE_INF ? GRE_INF : a + b;
}

/* A concatenation's parts as (base, lo, hi), adjacent equal bases merged:
 * x{a,b} x{c,d} = x{a+c,b+d}. Turns the x(x(x)?)? chains that state
 * elimination makes of counted repetitions back into x{1,3}. */
static gre_node *merge_concat(gcc *cc, gre_node *a) {
    gre_node **out = tr_gcc_alloc(cc, (size_t)a->n_kids * sizeof *out);
    if (!out) return NULL;
    uint32_t n = 0;
    for (uint32_t i = 0; i < a->n_kids; i++) {
        gre_node *k = a->kids[i];
        gre_node *base = k->kind == GRE_REPEAT ? k->kids[0] : k;
        uint32_t lo = k->kind == GRE_REPEAT ? k->min : 1, hi = k->kind == GRE_REPEAT ? k->max : 1;
        if (n) {
            gre_node *p = out[n - 1];
            gre_node *pb = p->kind == GRE_REPEAT ? p->kids[0] : p;
            if (tr_js_ast_eq(pb, base)) {
                uint32_t plo = p->kind == GRE_REPEAT ? p->min : 1, phi = p->kind == GRE_REPEAT ? p->max : 1;
                out[n - 1] = tr_js_ast_rep(cc, pb, add_count(plo, lo), add_count(phi, hi));
                if (!out[n - 1]) return NULL;
                continue;
            }
        }
        out[n++] = k;
    }
    if (n == 1) return out[0];
    a->kids = out;
    a->n_kids = n;
    return a;
}

static gre_node *compress(gcc *cc, gre_node *a, js_ptrmap *done) {
    uint64_t v;
    if (tr_js_ptrmap_get(done, a, &v)) return (gre_node *)(uintptr_t)v;
    for (uint32_t i = 0; i < a->n_kids; i++) {
        a->kids[i] = compress(cc, a->kids[i], done);
        if (!a->kids[i]) return NULL;
    }
    gre_node *r = a;
    if (a->kind == GRE_CONCAT)
        r = merge_concat(cc, a);
    else if (a->kind == GRE_REPEAT && a->min == 0 && a->max == 1) {
        gre_node *k = a->kids[0];
        if (k->kind == GRE_REPEAT && k->min <= 1) r = tr_js_ast_rep(cc, k->kids[0], 0, k->max);
    }
    if (r && tr_js_ptrmap_put(cc, done, a, (uint64_t)(uintptr_t)r)) return NULL;
    return r;
}

gre_node *tr_js_ast_compress(gcc *cc, gre_node *a) {
    js_ptrmap done = {0};
    return compress(cc, a, &done);
}

static uint64_t measure(gcc *cc, const gre_node *a, js_ptrmap *m, bool size) {
    uint64_t v;
    if (tr_js_ptrmap_get(m, a, &v)) return v;
    uint64_t r = 0;
    for (uint32_t i = 0; i < a->n_kids; i++) {
        uint64_t k = measure(cc, a->kids[i], m, size);
        r = size ? (r + k < r ? UINT64_MAX : r + k) : TR_MAX(r, k);
    }
    r = size ? (r == UINT64_MAX ? r : r + 1)
             : r + (a->kind == GRE_SET || a->kind == GRE_EMPTY ? 0 : 1);
    if (tr_js_ptrmap_put(cc, m, a, r)) return UINT64_MAX;
    return r;
}

uint32_t tr_js_ast_depth(gcc *cc, const gre_node *a) {
    js_ptrmap m = {0};
    uint64_t d = measure(cc, a, &m, false);
    return d > UINT32_MAX ? UINT32_MAX : (uint32_t)d;
}

uint64_t tr_js_ast_tree_size(gcc *cc, const gre_node *a) {
    js_ptrmap m = {0};
    return measure(cc, a, &m, true);
}

/* ---- a decoded AST as a grammar expression of its JSON encodings ---- */

static gx *ast_gx_rec(gcc *cc, const gre_node *a) {
    switch (a->kind) {
    case GRE_SET: {
        js_buf b;
        tr_js_buf_init(&b, cc);
        tr_js_str_unit_regex(&a->set, &b);
        gx *r = js_buf_ok(&b) ? tr_gx_rx_ne(cc, b.p, b.n) : NULL;
        tr_js_buf_free(&b);
        return r;
    }
    case GRE_EMPTY:
    case GRE_BOL:
    case GRE_EOL: return tr_gx_empty(cc);
    case GRE_CONCAT:
    case GRE_ALT: {
        gx **k = tr_gcc_alloc(cc, (size_t)a->n_kids * sizeof *k);
        if (!k) return NULL;
        for (uint32_t i = 0; i < a->n_kids; i++)
            if (!(k[i] = ast_gx_rec(cc, a->kids[i]))) return NULL;
        return a->kind == GRE_CONCAT ? tr_gx_seq(cc, k, a->n_kids) : tr_gx_alt(cc, k, a->n_kids);
    }
    case GRE_REPEAT:
        return tr_gx_rep(cc, ast_gx_rec(cc, a->kids[0]), a->min,
                         a->max == GRE_INF ? GX_INF : a->max);
    default: return NULL; /* GRE_REF, GRE_DFA: never in a string AST */
    }
}

gx *tr_js_str_gx(gcc *cc, const gre_node *ast) {
    if (tr_js_ast_has_anchor(ast)) {
        tr_gcc_fail(cc, TR_ERR_INTERNAL, 0, "anchor left in a string AST");
        return NULL;
    }
    return tr_gx_seq3(cc, tr_gx_lit(cc, "\"", 1), ast_gx_rec(cc, ast), tr_gx_lit(cc, "\"", 1));
}
