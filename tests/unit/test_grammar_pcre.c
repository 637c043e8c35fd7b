/* test_grammar_pcre.c — the regex compiler against PCRE2, the oracle.
 *
 * Claim under test: for every pattern both accept, the DFA accepts a
 * string iff PCRE2 (UTF, anchored at both ends, $ only at the very end,
 * no UCP: the semantics grammar.h documents) matches all of it.
 *
 *   1. the hand-written regexes of tests/data/grammar/regexes.txt;
 *   2. >= 500 random regexes from a generator of ASTs over a small
 *      alphabet, escapes, classes and Unicode properties;
 *   3. every pattern of up to 4 symbols over {a b | * + ? ( ) ^ $}, and
 *      random longer ones, compared on all strings over {a, b} up to 4;
 *   4. each \p{..} class on a sweep of code points.
 *
 * Candidate strings per regex: positives generated from the AST and from
 * random walks through the DFA, mutations of those (byte and code point
 * level, so invalid UTF-8 too), and random strings. Disagreements are
 * printed (pattern, string) and fail the test. Syntax differences are
 * handled by translating our escapes to PCRE2's (\v, \uHHHH, \u{..}, long
 * property names), see to_pcre().
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "grammar/regex/regex_internal.h" /* the Unicode tables' version */
#include "tests/unit/test_grammar_util.h"

/* ---------------------------------------------------------------------
 * Translation of our dialect to PCRE2 syntax
 * ------------------------------------------------------------------- */

static const char *const k_long_props[][2] = {
    {"Letter", "L"}, {"Cased_Letter", "LC"}, {"Uppercase_Letter", "Lu"},
    {"Lowercase_Letter", "Ll"}, {"Titlecase_Letter", "Lt"},
    {"Modifier_Letter", "Lm"}, {"Other_Letter", "Lo"}, {"Mark", "M"},
    {"Combining_Mark", "M"}, {"Nonspacing_Mark", "Mn"},
    {"Spacing_Mark", "Mc"}, {"Enclosing_Mark", "Me"}, {"Number", "N"},
    {"Decimal_Number", "Nd"}, {"digit", "Nd"}, {"Letter_Number", "Nl"},
    {"Other_Number", "No"}, {"Punctuation", "P"}, {"punct", "P"},
    {"Connector_Punctuation", "Pc"}, {"Dash_Punctuation", "Pd"},
    {"Open_Punctuation", "Ps"}, {"Close_Punctuation", "Pe"},
    {"Initial_Punctuation", "Pi"}, {"Final_Punctuation", "Pf"},
    {"Other_Punctuation", "Po"}, {"Symbol", "S"}, {"Math_Symbol", "Sm"},
    {"Currency_Symbol", "Sc"}, {"Modifier_Symbol", "Sk"},
    {"Other_Symbol", "So"}, {"Separator", "Z"}, {"Space_Separator", "Zs"},
    {"Line_Separator", "Zl"}, {"Paragraph_Separator", "Zp"},
    {"Other", "C"}, {"Control", "Cc"}, {"cntrl", "Cc"}, {"Format", "Cf"},
    {"Surrogate", "Cs"}, {"Private_Use", "Co"}, {"Unassigned", "Cn"},
};

static int hexv(int c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Rewrites the escapes whose spelling differs; everything else is copied.
 * Only called on patterns our parser accepted, so they are well formed. */
static void to_pcre(const char *p, size_t n, tg_str *out) {
    out->len = 0;
    tg_put(out, "", 0);
    size_t i = 0;
    while (i < n) {
        if (p[i] != '\\' || i + 1 >= n) {
            tg_putc(out, p[i++]);
            continue;
        }
        char c = p[i + 1];
        if (c == 'v') {
            tg_puts(out, "\\x{b}");
            i += 2;
        } else if (c == '0') {
            tg_puts(out, "\\x{0}");
            i += 2;
        } else if (c == 'u') {
            uint32_t cp = 0;
            if (i + 2 < n && p[i + 2] == '{') {
                i += 3;
                while (i < n && p[i] != '}') cp = cp * 16 + (uint32_t)hexv(p[i++]);
                i++;
            } else {
                for (int k = 0; k < 4; k++) cp = cp * 16 + (uint32_t)hexv(p[i + 2 + k]);
                i += 6;
                if (cp >= 0xD800 && cp <= 0xDBFF && i + 6 <= n && p[i] == '\\' &&
                    p[i + 1] == 'u') {
                    uint32_t lo = 0;
                    for (int k = 0; k < 4; k++)
                        lo = lo * 16 + (uint32_t)hexv(p[i + 2 + k]);
                    if (lo >= 0xDC00 && lo <= 0xDFFF) {
                        cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                        i += 6;
                    }
                }
            }
            char buf[32];
            snprintf(buf, sizeof buf, "\\x{%x}", cp);
            tg_puts(out, buf);
        } else if ((c == 'p' || c == 'P') && i + 2 < n && p[i + 2] == '{') {
            size_t s = i + 3, e = s;
            while (e < n && p[e] != '}') e++;
            const char *name = p + s;
            size_t nl = e - s;
            bool neg = false;
            if (nl && name[0] == '^') neg = true, name++, nl--;
            const char *eq = memchr(name, '=', nl);
            if (eq) {
                nl -= (size_t)(eq + 1 - name);
                name = eq + 1;
            }
            char nm[64];
            snprintf(nm, sizeof nm, "%.*s", (int)nl, name);
            for (size_t k = 0; k < TR_ARRAY_LEN(k_long_props); k++)
                if (strcmp(nm, k_long_props[k][0]) == 0)
                    snprintf(nm, sizeof nm, "%s", k_long_props[k][1]);
            char buf[96];
            snprintf(buf, sizeof buf, "\\%c{%s%s}", c, neg ? "^" : "", nm);
            tg_puts(out, buf);
            i = e + 1;
        } else {
            /* copy the backslash and the whole (maybe multibyte) char */
            tg_putc(out, '\\');
            i++;
            uint32_t cp;
            int k = tr_utf8_decode((const uint8_t *)p + i, n - i, &cp);
            if (k <= 0) k = 1;
            tg_put(out, p + i, (size_t)k);
            i += (size_t)k;
        }
    }
}

/* ---------------------------------------------------------------------
 * The oracle
 * ------------------------------------------------------------------- */

typedef struct oracle {
    pcre2_code *code;
    pcre2_match_data *md;
    pcre2_match_context *mc;
    char err[256];
} oracle;

static bool oracle_compile(oracle *o, const char *pat, size_t n) {
    int ec;
    PCRE2_SIZE eo;
    o->code = pcre2_compile((PCRE2_SPTR)pat, n,
                            PCRE2_UTF | PCRE2_ANCHORED | PCRE2_ENDANCHORED |
                                PCRE2_DOLLAR_ENDONLY,
                            &ec, &eo, NULL);
    if (!o->code) {
        pcre2_get_error_message(ec, (PCRE2_UCHAR *)o->err, sizeof o->err);
        return false;
    }
    o->md = pcre2_match_data_create_from_pattern(o->code, NULL);
    o->mc = pcre2_match_context_create(NULL);
    pcre2_set_match_limit(o->mc, 200000);
    return true;
}

static void oracle_free(oracle *o) {
    pcre2_match_data_free(o->md);
    pcre2_match_context_free(o->mc);
    pcre2_code_free(o->code);
    memset(o, 0, sizeof *o);
}

/* 1 match, 0 no match (invalid UTF-8 included), -1 gave up (limit). */
static int oracle_match(oracle *o, const char *s, size_t n) {
    int rc = pcre2_match(o->code, (PCRE2_SPTR)s, n, 0, 0, o->md, o->mc);
    if (rc >= 0) return 1;
    if (rc == PCRE2_ERROR_NOMATCH) return 0;
    if (rc <= PCRE2_ERROR_UTF8_ERR1 && rc >= PCRE2_ERROR_UTF8_ERR21) return 0;
    return -1;
}

/* ---------------------------------------------------------------------
 * Candidate strings
 * ------------------------------------------------------------------- */

static const uint32_t k_pool[] = {
    'a', 'b', 'c', 'd', 'x', 'z', 'A', 'B', 'Z', '0', '1', '5', '9', '_',
    '-', '.', ',', ':', ';', '/', '\\', '"', '\'', '*', '+', '?', '(', ')',
    '[', ']', '{', '}', '<', '>', '@', '#', '$', '%', '&', '=', '^', '|',
    '~', '`', '!', ' ', '\t', '\n', '\r', 0x0B, 0x0C, 0x00, 0x01, 0x7F,
    0xE9,    /* é Ll */ 0xC9, /* É Lu */ 0x1C5, /* ǅ Lt */ 0x2B0, /* ʰ Lm */
    0x5D0,   /* א Lo */ 0x4E2D, /* 中 Lo */ 0x663, /* ٣ Nd */
    0x216B,  /* Ⅻ Nl */ 0xBD, /* ½ No */ 0x203F, /* ‿ Pc */
    0x2014,  /* — Pd */ 0xAB, /* « Pi */ 0xBB, /* » Pf */ 0xA1, /* ¡ Po */
    0x2211,  /* ∑ Sm */ 0x20AC, /* € Sc */ 0x2C2, /* ˂ Sk */ 0xA9, /* © So */
    0x1F600, /* 😀 So */ 0xA0, /* NBSP Zs */ 0x2028, /* Zl */ 0x2029, /* Zp */
    0x85,    /* Cc */ 0x200B, /* Cf */ 0xE000, /* Co */ 0x378, /* Cn */
    0x301,   /* Mn */ 0x903, /* Mc */ 0x20DD, /* Me */ 0x1D538, /* 𝔸 Lu */
    0x7FF, 0x800, 0xFFFF, 0x10000, 0x10FFFF, 0xD7FF, 0xE0, 0xFF, 0x3B1,
    0x430, 0x627, 0x3042, 0x30A2, 0x9FFF, 0x1F300, 0xFE0F, 0x2764, 0x1F44D,
    0x1F602,
};

static uint32_t rand_cp(tg_rng *r) {
    switch (tg_below(r, 8)) {
    case 0: {
        uint32_t c = tg_below(r, 0x110000);
        if (c >= 0xD800 && c <= 0xDFFF) c = 'q';
        return c;
    }
    case 1:
        return 0x20 + tg_below(r, 0x5F);
    default:
        return k_pool[tg_below(r, TR_ARRAY_LEN(k_pool))];
    }
}

/* A random walk through the DFA from the start, stopping at an accepting
 * state with probability 1/3 (or at max bytes). */
static void dfa_walk(const gdfa *d, tg_rng *r, tg_str *out, size_t max) {
    out->len = 0;
    tg_put(out, "", 0);
    uint32_t s = d->start;
    while (out->len < max) {
        if (d->accept[s] && (!d->can_cont[s] || tg_below(r, 3) == 0)) return;
        uint8_t live[256];
        int nl = 0;
        for (int b = 0; b < 256; b++)
            if (gdfa_step(d, s, (uint8_t)b) != GDFA_DEAD) live[nl++] = (uint8_t)b;
        if (nl == 0) return;
        /* prefer ASCII-ish bytes half of the time so strings stay short */
        uint8_t b = live[tg_below(r, (uint32_t)nl)];
        tg_put(out, &b, 1);
        s = gdfa_step(d, s, b);
    }
}

typedef struct strs {
    tg_str *v;
    size_t n, cap;
} strs;

static void strs_add(strs *a, const char *p, size_t n) {
    if (a->n == a->cap) {
        a->cap = a->cap ? a->cap * 2 : 64;
        a->v = realloc(a->v, a->cap * sizeof *a->v);
    }
    tg_str s = {0};
    tg_put(&s, p, n);
    a->v[a->n++] = s;
}

static void strs_free(strs *a) {
    for (size_t i = 0; i < a->n; i++) free(a->v[i].p);
    free(a->v);
    memset(a, 0, sizeof *a);
}

static void mutate(tg_rng *r, const tg_str *src, tg_str *out) {
    out->len = 0;
    tg_put(out, src->p ? src->p : "", src->len);
    int rounds = 1 + (int)tg_below(r, 2);
    for (int k = 0; k < rounds; k++) {
        size_t n = out->len;
        size_t at = n ? tg_below(r, (uint32_t)n + 1) : 0;
        tg_str t = {0};
        switch (tg_below(r, 7)) {
        case 0: /* delete one byte (may break UTF-8) */
            if (!n) break;
            if (at == n) at--;
            memmove(out->p + at, out->p + at + 1, n - at - 1);
            out->len--;
            break;
        case 1: /* insert a code point at a byte offset (maybe mid-char) */
        case 2: {
            tg_put(&t, out->p, at);
            tg_put_cp(&t, rand_cp(r));
            tg_put(&t, out->p + at, n - at);
            out->len = 0;
            tg_put(out, t.p, t.len);
            break;
        }
        case 3: /* replace a byte */
            if (!n) break;
            if (at == n) at--;
            out->p[at] = (char)tg_below(r, 256);
            break;
        case 4: { /* duplicate a slice */
            if (!n) break;
            size_t a = tg_below(r, (uint32_t)n), b = a + 1 + tg_below(r, (uint32_t)(n - a));
            tg_put(&t, out->p, b);
            tg_put(&t, out->p + a, n - a);
            out->len = 0;
            tg_put(out, t.p, t.len);
            break;
        }
        case 5: /* truncate */
            out->len = at;
            out->p[at] = 0;
            break;
        default: /* append a code point */
            tg_put_cp(out, rand_cp(r));
            break;
        }
        free(t.p);
    }
}

static void random_string(tg_rng *r, tg_str *out) {
    out->len = 0;
    tg_put(out, "", 0);
    uint32_t n = tg_below(r, 8);
    for (uint32_t i = 0; i < n; i++) tg_put_cp(out, rand_cp(r));
}

/* ---------------------------------------------------------------------
 * One regex against the oracle
 * ------------------------------------------------------------------- */

typedef struct dstats {
    size_t regexes, pairs, positives, skipped_pairs, disagreements;
    size_t ours_only_errors, empty_language, limit;
} dstats;

static void print_escaped(FILE *f, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c < 0x7F && c != '\\')
            fputc(c, f);
        else
            fprintf(f, "\\x%02x", c);
    }
}

/* Compares the compiled grammar g with the oracle on every string. */
static void compare_strings(const char *pat, const grammar *g, oracle *o,
                            const strs *cands, dstats *ds) {
    for (size_t i = 0; i < cands->n; i++) {
        const tg_str *s = &cands->v[i];
        int want = oracle_match(o, s->p, s->len);
        if (want < 0) {
            ds->skipped_pairs++;
            continue;
        }
        bool got = g ? tr_grammar_matches(g, s->p, s->len) : false;
        ds->pairs++;
        ds->positives += (size_t)want;
        if (got != (want == 1)) {
            if (ds->disagreements++ < 25) {
                fprintf(stderr, "DISAGREE /%s/ on \"", pat);
                print_escaped(stderr, s->p, s->len);
                fprintf(stderr, "\": dfa %d, pcre2 %d\n", got, want);
            }
        }
    }
}

/* Compiles pat both ways and compares on cands plus DFA walks, mutations
 * and random strings. Returns false if our compiler rejected it. */
static bool differential(const char *pat, size_t n, strs *cands, tg_rng *r,
                         dstats *ds, bool expect_ok) {
    grammar *g = NULL;
    tr_diag diag;
    tr_status st = tr_grammar_compile_regex(pat, n, NULL, &g, &diag);
    tg_str pp = {0};
    to_pcre(pat, n, &pp);
    oracle o = {0};
    bool pcre_ok = oracle_compile(&o, pp.p, pp.len);
    ds->regexes++;
    if (st != TR_OK) {
        if (st == TR_ERR_LIMIT) {
            ds->limit++;
        } else if (st == TR_ERR_FORMAT && strstr(diag.message, "no string")) {
            ds->empty_language++;
        } else if (expect_ok || pcre_ok) {
            fprintf(stderr, "we reject /%s/ (%s: %s)%s\n", pat,
                    tr_status_name(st), diag.message,
                    pcre_ok ? " but PCRE2 accepts it" : "");
            if (expect_ok) ds->disagreements++;
            ds->ours_only_errors++;
        }
        if (pcre_ok && !(st == TR_ERR_LIMIT)) {
            /* the empty language: PCRE2 must match none of the strings */
            compare_strings(pat, NULL, &o, cands, ds);
        }
        if (pcre_ok) oracle_free(&o);
        free(pp.p);
        return false;
    }
    if (!pcre_ok) {
        fprintf(stderr, "PCRE2 rejects /%s/ (as /%s/: %s) but we accept it\n",
                pat, pp.p, o.err);
        ds->disagreements++;
        tr_grammar_free(g);
        free(pp.p);
        return true;
    }
    assert_int_equal(tr_grammar_check(g), TR_OK);
    /* more candidates: walks through the DFA, their mutations, randoms */
    size_t base = cands->n;
    tg_str t = {0}, u = {0};
    for (int k = 0; k < 12; k++) {
        dfa_walk(&g->dfa, r, &t, 48);
        strs_add(cands, t.p, t.len);
    }
    size_t pos_end = cands->n;
    for (int k = 0; k < 24; k++) {
        size_t from = tg_below(r, (uint32_t)pos_end);
        mutate(r, &cands->v[from], &u);
        strs_add(cands, u.p, u.len);
    }
    for (int k = 0; k < 8; k++) {
        random_string(r, &t);
        strs_add(cands, t.p, t.len);
    }
    (void)base;
    compare_strings(pat, g, &o, cands, ds);
    free(t.p), free(u.p);
    oracle_free(&o);
    tr_grammar_free(g);
    free(pp.p);
    return true;
}

static void report(const char *what, const dstats *ds) {
    fprintf(stderr,
            "%s: %zu regexes, %zu (regex, string) pairs, %zu positives, "
            "%zu skipped (PCRE2 match limit), %zu empty-language, %zu over "
            "budget, %zu rejected by us only, %zu disagreements\n",
            what, ds->regexes, ds->pairs, ds->positives, ds->skipped_pairs,
            ds->empty_language, ds->limit, ds->ours_only_errors,
            ds->disagreements);
}

/* ---------------------------------------------------------------------
 * 1. The hand-written list
 * ------------------------------------------------------------------- */

static void test_handwritten(void **state) {
    (void)state;
    size_t len;
    char *text = tg_read_file(TRELLIS_SOURCE_DIR "/tests/data/grammar/regexes.txt", &len);
    assert_non_null(text);
    tg_rng r = {0x5eed1234};
    dstats ds = {0};
    char *line = text;
    while (line && *line) {
        char *nl = strchr(line, '\n');
        if (nl) *nl = 0;
        if (line[0] && line[0] != '#') {
            strs cands = {0};
            char *tab = strchr(line, '\t');
            size_t plen = tab ? (size_t)(tab - line) : strlen(line);
            while (tab) {
                char *ex = tab + 1;
                tab = strchr(ex, '\t');
                strs_add(&cands, ex, tab ? (size_t)(tab - ex) : strlen(ex));
            }
            char pat[1024];
            snprintf(pat, sizeof pat, "%.*s", (int)plen, line);
            differential(pat, plen, &cands, &r, &ds, true);
            strs_free(&cands);
        }
        line = nl ? nl + 1 : NULL;
    }
    free(text);
    report("hand-written", &ds);
    assert_true(ds.regexes >= 200);
    assert_int_equal(ds.limit, 0);
    assert_true(ds.positives > ds.pairs / 5); /* the walks do find matches */
    assert_int_equal(ds.disagreements, 0);
}

/* ---------------------------------------------------------------------
 * 2. Generated regexes
 * ------------------------------------------------------------------- */

/* Atoms: their source text; members are found by rejection sampling the
 * pool against a PCRE2 compile of the atom alone. */
static const char *const k_atoms[] = {
    "a", "b", "c", "0", "-", " ", "é", "中", "😀", "\\.", "\\*", "\\(",
    "\\[", "\\{", "\\}", "\\n", "\\t", "\\x41", "\\u00e9", "\\u{1F600}",
    "\\x{4e2d}", "\\\\", "\\/", "\\v", "\\0", "\\|", "\\^", "\\$", "\\-",
    "[abc]", "[a-c]", "[^a]", "[^a-c0-9]", "[\\d.]", "[\\w-]", "[é中]",
    "[^\\s]", "[a-zA-Z]", "[\\p{Lu}\\d]", "[^\\p{L}]", "[\\u00e0-\\u00ff]",
    "[\\x{4e00}-\\x{9fff}]", "[-a]", "[a-]", "[\\]a]", "[\\^b]", "[.]",
    "[^\\n]", "[\\s\\S]", ".", "\\d", "\\w", "\\s", "\\D", "\\W", "\\S",
    "\\p{L}", "\\p{Lu}", "\\p{Ll}", "\\p{Lt}", "\\p{Lm}", "\\p{Lo}",
    "\\p{N}", "\\p{Nd}", "\\p{P}", "\\p{S}", "\\p{Z}", "\\P{L}", "\\P{N}",
    "\\pL", "\\p{Letter}", "\\p{So}", "\\p{Sc}", "\\p{Pd}", "\\p{M}",
    "\\p{C}", "\\p{^Ll}", "[\\x{10000}-\\x{10FFFF}]", "[\\x80-\\x{7FF}]",
};

typedef struct atom_info {
    uint32_t *members;
    size_t n;
} atom_info;

static atom_info g_atoms[TR_ARRAY_LEN(k_atoms)];

static void atoms_init(void) {
    tg_str pp = {0};
    for (size_t i = 0; i < TR_ARRAY_LEN(k_atoms); i++) {
        if (g_atoms[i].members) continue;
        to_pcre(k_atoms[i], strlen(k_atoms[i]), &pp);
        oracle o = {0};
        assert_true(oracle_compile(&o, pp.p, pp.len));
        g_atoms[i].members = malloc(sizeof k_pool + 4096 * 4);
        tg_rng r = {0xa70 + i};
        for (size_t k = 0; k < TR_ARRAY_LEN(k_pool) + 4096; k++) {
            uint32_t cp = k < TR_ARRAY_LEN(k_pool) ? k_pool[k] : rand_cp(&r);
            tg_str s = {0};
            tg_put_cp(&s, cp);
            if (oracle_match(&o, s.p, s.len) == 1) {
                bool dup = false;
                for (size_t j = 0; j < g_atoms[i].n && !dup; j++)
                    dup = g_atoms[i].members[j] == cp;
                if (!dup) g_atoms[i].members[g_atoms[i].n++] = cp;
            }
            free(s.p);
        }
        assert_true(g_atoms[i].n > 0);
        oracle_free(&o);
    }
    free(pp.p);
}

typedef enum tk { T_ATOM, T_CAT, T_ALT, T_REP, T_GROUP, T_BOL, T_EOL } tk;

typedef struct tnode {
    tk k;
    int atom;
    int n;
    struct tnode *kids[4];
    uint32_t min, max; /* max UINT32_MAX = unbounded */
    int qform;         /* how the quantifier is spelled */
    bool lazy;
    int gkind;         /* 0 capturing, 1 (?:, 2 named */
} tnode;

static tnode *gen_node(tg_rng *r, int depth) {
    tnode *t = calloc(1, sizeof *t);
    uint32_t pick = depth <= 0 ? 0 : tg_below(r, 10);
    if (pick < 4) {
        t->k = T_ATOM;
        /* favour the small alphabet so that strings collide */
        t->atom = tg_below(r, 2) ? (int)tg_below(r, 3)
                                 : (int)tg_below(r, TR_ARRAY_LEN(k_atoms));
        if (depth > 0 && tg_below(r, 40) == 0) t->k = tg_below(r, 2) ? T_BOL : T_EOL;
    } else if (pick < 6) {
        t->k = T_CAT;
        t->n = 2 + (int)tg_below(r, 3);
        for (int i = 0; i < t->n; i++) t->kids[i] = gen_node(r, depth - 1);
    } else if (pick < 7) {
        t->k = T_ALT;
        t->n = 2 + (int)tg_below(r, 2);
        for (int i = 0; i < t->n; i++) t->kids[i] = gen_node(r, depth - 1);
    } else if (pick < 9) {
        t->k = T_REP;
        t->n = 1;
        t->kids[0] = gen_node(r, depth - 1);
        t->qform = (int)tg_below(r, 6);
        switch (t->qform) {
        case 0: t->min = 0, t->max = UINT32_MAX; break; /* * */
        case 1: t->min = 1, t->max = UINT32_MAX; break; /* + */
        case 2: t->min = 0, t->max = 1; break;          /* ? */
        case 3: t->min = t->max = tg_below(r, 4); break;          /* {m} */
        case 4: t->min = tg_below(r, 3), t->max = UINT32_MAX; break; /* {m,} */
        default:
            t->min = tg_below(r, 3);
            t->max = t->min + tg_below(r, 3);
            break; /* {m,n} */
        }
        t->lazy = tg_below(r, 4) == 0;
    } else {
        t->k = T_GROUP;
        t->n = 1;
        t->kids[0] = gen_node(r, depth - 1);
        t->gkind = (int)tg_below(r, 3);
    }
    return t;
}

static void free_node(tnode *t) {
    for (int i = 0; i < t->n; i++) free_node(t->kids[i]);
    free(t);
}

static int g_name_counter;

static void print_node(const tnode *t, tg_str *o, bool need_atom);

static void print_group(const tnode *t, tg_str *o, int gkind) {
    if (gkind == 0)
        tg_puts(o, "(");
    else if (gkind == 1)
        tg_puts(o, "(?:");
    else {
        char b[32];
        snprintf(b, sizeof b, "(?<g%d>", g_name_counter++);
        tg_puts(o, b);
    }
    print_node(t, o, false);
    tg_puts(o, ")");
}

/* need_atom: the context is a quantifier or a sequence that would change
 * the meaning of an unparenthesized alternation / sequence. */
static void print_node(const tnode *t, tg_str *o, bool need_atom) {
    switch (t->k) {
    case T_ATOM:
        /* \0 must not run into a following digit (that is octal) */
        if (strcmp(k_atoms[t->atom], "\\0") == 0)
            tg_puts(o, "(?:\\0)");
        else
            tg_puts(o, k_atoms[t->atom]);
        break;
    case T_BOL:
        tg_puts(o, "^");
        break;
    case T_EOL:
        tg_puts(o, "$");
        break;
    case T_CAT:
        if (need_atom) {
            print_group(t, o, 1);
            break;
        }
        for (int i = 0; i < t->n; i++) print_node(t->kids[i], o, true);
        break;
    case T_ALT:
        if (need_atom) {
            print_group(t, o, 1);
            break;
        }
        for (int i = 0; i < t->n; i++) {
            if (i) tg_puts(o, "|");
            /* a concat inside an alternative needs no parentheses */
            print_node(t->kids[i], o, t->kids[i]->k == T_ALT);
        }
        break;
    case T_REP: {
        const tnode *k = t->kids[0];
        bool atomic = k->k == T_ATOM || k->k == T_GROUP;
        if (k->k == T_BOL || k->k == T_EOL || !atomic)
            print_group(k, o, 1);
        else
            print_node(k, o, true);
        char b[48];
        switch (t->qform) {
        case 0: tg_puts(o, "*"); break;
        case 1: tg_puts(o, "+"); break;
        case 2: tg_puts(o, "?"); break;
        case 3: snprintf(b, sizeof b, "{%u}", t->min), tg_puts(o, b); break;
        case 4: snprintf(b, sizeof b, "{%u,}", t->min), tg_puts(o, b); break;
        default: snprintf(b, sizeof b, "{%u,%u}", t->min, t->max), tg_puts(o, b); break;
        }
        if (t->lazy) tg_puts(o, "?");
        break;
    }
    case T_GROUP:
        print_group(t->kids[0], o, t->gkind);
        break;
    }
}

/* A string the node (probably) matches: anchors are ignored, so strings
 * of patterns with inner anchors are only candidates. */
static void gen_string(const tnode *t, tg_rng *r, tg_str *o) {
    switch (t->k) {
    case T_ATOM: {
        const atom_info *a = &g_atoms[t->atom];
        tg_put_cp(o, a->members[tg_below(r, (uint32_t)a->n)]);
        break;
    }
    case T_BOL:
    case T_EOL:
        break;
    case T_CAT:
        for (int i = 0; i < t->n; i++) gen_string(t->kids[i], r, o);
        break;
    case T_ALT:
        gen_string(t->kids[tg_below(r, (uint32_t)t->n)], r, o);
        break;
    case T_REP: {
        uint32_t extra = t->max == UINT32_MAX ? tg_below(r, 4)
                                              : tg_below(r, t->max - t->min + 1);
        for (uint32_t i = 0; i < t->min + extra; i++) gen_string(t->kids[0], r, o);
        break;
    }
    case T_GROUP:
        gen_string(t->kids[0], r, o);
        break;
    }
}

static void test_generated(void **state) {
    (void)state;
    atoms_init();
    tg_rng r = {0x9e3779b97f4a7c15ULL};
    dstats ds = {0};
    size_t compiled = 0;
    for (int i = 0; i < 700; i++) {
        tnode *t = gen_node(&r, 1 + (int)tg_below(&r, 4));
        if (tg_below(&r, 6) == 0) { /* anchors at the ends */
            tnode *c = calloc(1, sizeof *c);
            c->k = T_CAT;
            c->n = 3;
            c->kids[0] = calloc(1, sizeof(tnode));
            c->kids[0]->k = T_BOL;
            c->kids[1] = t;
            c->kids[2] = calloc(1, sizeof(tnode));
            c->kids[2]->k = T_EOL;
            t = c;
        }
        tg_str pat = {0};
        g_name_counter = 0;
        print_node(t, &pat, false);
        strs cands = {0};
        for (int k = 0; k < 16; k++) {
            tg_str s = {0};
            tg_put(&s, "", 0);
            gen_string(t, &r, &s);
            strs_add(&cands, s.p, s.len);
            free(s.p);
        }
        if (differential(pat.p, pat.len, &cands, &r, &ds, true)) compiled++;
        strs_free(&cands);
        free(pat.p);
        free_node(t);
    }
    report("generated", &ds);
    assert_true(compiled >= 500);
    assert_true(ds.limit < 10);
    assert_true(ds.positives > ds.pairs / 5);
    assert_int_equal(ds.disagreements, 0);
}

/* ---------------------------------------------------------------------
 * 3. All small patterns over a tiny alphabet
 * ------------------------------------------------------------------- */

static void small_pattern(const char *pat, size_t n, const strs *all,
                          dstats *ds, size_t *both_ok, size_t *we_reject) {
    grammar *g = NULL;
    tr_diag diag;
    tr_status st = tr_grammar_compile_regex(pat, n, NULL, &g, &diag);
    oracle o = {0};
    bool pcre_ok = oracle_compile(&o, pat, n);
    ds->regexes++;
    if (st == TR_OK && !pcre_ok) {
        if (ds->disagreements++ < 25)
            fprintf(stderr, "PCRE2 rejects /%s/ (%s), we accept it\n", pat, o.err);
    } else if (st != TR_OK && pcre_ok) {
        bool empty = st == TR_ERR_FORMAT && strstr(diag.message, "no string");
        if (empty) {
            ds->empty_language++;
            compare_strings(pat, NULL, &o, all, ds);
        } else {
            /* what this alphabet can spell that we refuse on purpose:
             * possessive quantifiers (a*+) and the empty flag group (?) */
            (*we_reject)++;
            ds->ours_only_errors++;
            bool documented = st == TR_ERR_UNSUPPORTED &&
                              (strstr(diag.message, "possessive") ||
                               strstr(diag.message, "inline flags"));
            if (!documented && ds->disagreements++ < 25)
                fprintf(stderr, "we reject /%s/ (%s) but PCRE2 accepts it\n",
                        pat, diag.message);
        }
    } else if (st == TR_OK) {
        (*both_ok)++;
        compare_strings(pat, g, &o, all, ds);
    }
    tr_grammar_free(g);
    if (pcre_ok) oracle_free(&o);
}

static void test_exhaustive_small(void **state) {
    (void)state;
    static const char sym[] = "ab|*+?()^$";
    const size_t ns = sizeof sym - 1;
    strs all = {0};
    /* every string over {a, b} of length <= 4 */
    char buf[8];
    for (int len = 0; len <= 4; len++)
        for (int m = 0; m < (1 << len); m++) {
            for (int i = 0; i < len; i++) buf[i] = (m >> i) & 1 ? 'b' : 'a';
            strs_add(&all, buf, (size_t)len);
        }
    dstats ds = {0};
    size_t both_ok = 0, we_reject = 0;
    char pat[16];
    for (int len = 0; len <= 4; len++) {
        size_t total = 1;
        for (int i = 0; i < len; i++) total *= ns;
        for (size_t code = 0; code < total; code++) {
            size_t c = code;
            for (int i = 0; i < len; i++) {
                pat[i] = sym[c % ns];
                c /= ns;
            }
            pat[len] = 0;
            small_pattern(pat, (size_t)len, &all, &ds, &both_ok, &we_reject);
        }
    }
    /* every pattern of 5 symbols without + and $ */
    static const char sym5[] = "ab|*?()^";
    const size_t n5 = sizeof sym5 - 1;
    for (size_t code = 0; code < n5 * n5 * n5 * n5 * n5; code++) {
        size_t c = code;
        for (int i = 0; i < 5; i++) {
            pat[i] = sym5[c % n5];
            c /= n5;
        }
        pat[5] = 0;
        small_pattern(pat, 5, &all, &ds, &both_ok, &we_reject);
    }
    /* random longer ones: only those with balanced parentheses */
    tg_rng r = {77};
    for (int k = 0; k < 20000; k++) {
        int len = 6 + (int)tg_below(&r, 5), depth = 0;
        bool ok = true;
        for (int i = 0; i < len; i++) {
            pat[i] = sym[tg_below(&r, (uint32_t)ns)];
            depth += pat[i] == '(' ? 1 : pat[i] == ')' ? -1 : 0;
            ok = ok && depth >= 0;
        }
        pat[len] = 0;
        if (!ok || depth != 0) {
            k--;
            continue;
        }
        small_pattern(pat, (size_t)len, &all, &ds, &both_ok, &we_reject);
    }
    report("exhaustive-small", &ds);
    fprintf(stderr, "  both compile: %zu, only PCRE2 compiles: %zu\n", both_ok,
            we_reject);
    assert_true(both_ok > 6000);
    assert_int_equal(ds.disagreements, 0);
    strs_free(&all);
}

/* ---------------------------------------------------------------------
 * 4. Unicode properties on a sweep of code points
 * ------------------------------------------------------------------- */

static void test_unicode_properties(void **state) {
    (void)state;
    static const char *const props[] = {
        "L", "Lu", "Ll", "Lt", "Lm", "Lo", "LC", "M", "Mn", "Mc", "Me",
        "N", "Nd", "Nl", "No", "P", "Pc", "Pd", "Ps", "Pe", "Pi", "Pf",
        "Po", "S", "Sm", "Sc", "Sk", "So", "Z", "Zs", "Zl", "Zp", "C",
        "Cc", "Cf", "Co", "Cn", "Any"};
    size_t bad = 0, checked = 0;
    for (size_t i = 0; i < TR_ARRAY_LEN(props); i++) {
        for (int neg = 0; neg < 2; neg++) {
            char pat[32];
            snprintf(pat, sizeof pat, "\\%c{%s}", neg ? 'P' : 'p', props[i]);
            grammar *g = NULL;
            tr_diag diag;
            tr_status st = tr_grammar_compile_regex(pat, strlen(pat), NULL, &g, &diag);
            if (st == TR_ERR_FORMAT && neg && strcmp(props[i], "Any") == 0)
                continue; /* \P{Any}: the empty language */
            assert_int_equal(st, TR_OK);
            oracle o = {0};
            assert_true(oracle_compile(&o, pat, strlen(pat)));
            /* every code point below U+3400, then a stride */
            for (uint32_t cp = 0; cp <= 0x10FFFF;
                 cp += cp < 0x3400 ? 1 : (cp < 0x20000 ? 13 : 997)) {
                if (cp >= 0xD800 && cp <= 0xDFFF) continue;
                uint8_t b[4];
                int n = tr_utf8_encode(cp, b);
                int want = oracle_match(&o, (const char *)b, (size_t)n);
                bool got = tr_grammar_matches(g, b, (size_t)n);
                checked++;
                if (got != (want == 1) && bad++ < 20)
                    fprintf(stderr, "%s on U+%04X: dfa %d pcre2 %d\n", pat, cp,
                            got, want);
            }
            oracle_free(&o);
            tr_grammar_free(g);
        }
    }
    fprintf(stderr, "unicode properties: %zu (class, code point) checks, Unicode %s\n",
            checked, tr_grammar_unicode_version);
    assert_int_equal(bad, 0);
}

int main(void) {
    char v[64];
    pcre2_config(PCRE2_CONFIG_UNICODE_VERSION, v);
    if (strcmp(v, tr_grammar_unicode_version) != 0)
        fprintf(stderr,
                "warning: PCRE2 uses Unicode %s, our tables %s: property "
                "checks may disagree on new code points\n",
                v, tr_grammar_unicode_version);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_handwritten),
        cmocka_unit_test(test_generated),
        cmocka_unit_test(test_exhaustive_small),
        cmocka_unit_test(test_unicode_properties),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    for (size_t i = 0; i < TR_ARRAY_LEN(g_atoms); i++) free(g_atoms[i].members);
    return rc;
}
