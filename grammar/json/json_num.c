/* json_num.c — exact decimals, and the regexes of JSON numbers within a
 * range (minimum / maximum / exclusiveMinimum / exclusiveMaximum).
 *
 * Layering: grammar/json (json_internal.h), used by the
 * JSON Schema generators. Pure functions over the compile arena.
 *
 * Bounds compare exactly, in decimal: a schema's 0.1 is the decimal 0.1
 * (jansson hands over the double; its shortest round-trip repr is the
 * literal the author wrote), and an instance's text is compared digit by
 * digit, so no value outside the range ever matches.
 *
 * The range is cut into two sign regions of magnitudes X >= 0: "X" for
 * values >= 0 and "-X" for values <= 0 (so "-0" and "-0.0" are in
 * exactly when 0 is). In a region, a number is an integer part I (a
 * canonical digit string) and an optional fraction F:
 *   - I strictly between the bounds' integer parts: any F;
 *   - I equal to a bound's integer part: F compared with the bound's
 *     fraction, digit by digit (frac() below: a small digit automaton
 *     with "still equal to the lower / upper bound" flags).
 * Integer ranges of same-length digit strings come from the same idea
 * (int_same_len). Exponent forms ("1e+16", what Python prints for large
 * floats) are allowed only where every value they can denote is in the
 * range: a region that is unbounded away from zero and starts at 0, or
 * magnitudes of at least 10^K above a lower bound of K integer digits.
 *
 * Spellings (js_numfmt): the same automata, narrowed in the syntax only.
 * Canonical integers drop the ".0+" and exponent forms and "-0"; a
 * bounded fraction counts its digits in every digit loop of frac()
 * (position i of the fraction leaves max_frac - i digits), and a bounded
 * exponent writes its "at least K" values within max_exp digits. The
 * range stays exact: the language is (range) ∩ (spelling).
 */
#include <stdio.h>
#include <string.h>

#include "grammar/json/json_internal.h"

js_numfmt tr_js_numfmt(const js_ctx *x, bool plain_int) {
    if (x->opt.numbers == GRAMMAR_JSON_NUM_FULL) return JS_NUMFMT_FULL;
    return (js_numfmt){plain_int, GRAMMAR_JSON_MAX_FRAC_DIGITS, GRAMMAR_JSON_MAX_EXP_DIGITS};
}

/* cls repeated min..max times (max 0: unbounded), as "+", "*" or {m,n}. */
static void reps(js_buf *b, const char *cls, uint32_t min, uint32_t max) {
    tr_js_buf_puts(b, cls);
    if (max == 0)
        tr_js_buf_puts(b, min ? "+" : "*");
    else if (min == max && min != 1)
        tr_js_buf_printf(b, "{%u}", min);
    else if (min != max)
        tr_js_buf_printf(b, "{%u,%u}", min, max);
}

/* Digit strings of 1..max digits (max 0: any) with a nonzero digit:
 * "[0-9]*[1-9][0-9]*", or bounded, one alternative per count of
 * leading zeros. */
static void nonzero_digits(js_buf *b, uint32_t max) {
    if (max == 0) {
        tr_js_buf_puts(b, "[0-9]*[1-9][0-9]*");
        return;
    }
    tr_js_buf_puts(b, "(?:");
    for (uint32_t k = 0; k < max; k++) {
        if (k) tr_js_buf_putc(b, '|');
        if (k) reps(b, "0", k, k);
        tr_js_buf_puts(b, "[1-9]");
        if (max - 1 - k) reps(b, "[0-9]", 0, max - 1 - k);
    }
    tr_js_buf_putc(b, ')');
}

/* ---- decimals ---- */

static bool dec_make(gcc *cc, bool neg, const char *digits, size_t nd, int64_t point,
                     js_dec *out) {
    /* digits[0..nd) with the decimal point after `point` digits */
    size_t a = 0, z = nd;
    while (a < z && digits[a] == '0') a++;
    while (z > a && digits[z - 1] == '0') z--;
    memset(out, 0, sizeof *out);
    if (a == z) {
        out->d = "";
        return true;
    }
    int64_t e = point - (int64_t)a;
    if (e > 1000000 || e < -1000000) return false;
    char *d = tr_js_strndup(cc, digits + a, z - a);
    if (!d) return false;
    out->neg = neg;
    out->exp = (int32_t)e;
    out->n = (uint32_t)(z - a);
    out->d = d;
    return true;
}

bool tr_js_dec_parse(gcc *cc, const char *s, size_t len, js_dec *out) {
    size_t i = 0;
    bool neg = false;
    if (i < len && s[i] == '-') neg = true, i++;
    if (i >= len || s[i] < '0' || s[i] > '9') return false;
    if (s[i] == '0' && i + 1 < len && s[i + 1] >= '0' && s[i + 1] <= '9') return false;
    char *dig = tr_gcc_alloc(cc, len + 1);
    if (!dig) return false;
    size_t nd = 0;
    while (i < len && s[i] >= '0' && s[i] <= '9') dig[nd++] = s[i++];
    int64_t point = (int64_t)nd;
    if (i < len && s[i] == '.') {
        i++;
        if (i >= len || s[i] < '0' || s[i] > '9') return false;
        while (i < len && s[i] >= '0' && s[i] <= '9') dig[nd++] = s[i++];
    }
    if (i < len && (s[i] == 'e' || s[i] == 'E')) {
        i++;
        bool eneg = false;
        if (i < len && (s[i] == '+' || s[i] == '-')) eneg = s[i++] == '-';
        if (i >= len || s[i] < '0' || s[i] > '9') return false;
        int64_t e = 0;
        while (i < len && s[i] >= '0' && s[i] <= '9') {
            if (e < 100000000) e = e * 10 + (s[i] - '0');
            i++;
        }
        if (e > 100000) return false;
        point += eneg ? -e : e;
    }
    if (i != len) return false;
    return dec_make(cc, neg, dig, nd, point, out);
}

bool tr_js_dec_from_json(gcc *cc, const json_t *v, js_dec *out) {
    char buf[64];
    const char *lit;
    size_t lit_len;
    if (tr_js_exact_literal(v, &lit, &lit_len)) return tr_js_dec_parse(cc, lit, lit_len, out);
    if (json_is_integer(v)) {
        snprintf(buf, sizeof buf, "%lld", (long long)json_integer_value(v));
        return tr_js_dec_parse(cc, buf, strlen(buf), out);
    }
    if (!json_is_real(v)) return false;
    double x = json_real_value(v);
    if (x != x || x - x != 0) return false; /* NaN, inf */
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, sizeof buf, "%.*e", prec - 1, x);
        if (strtod(buf, NULL) == x) break;
    }
    return tr_js_dec_parse(cc, buf, strlen(buf), out);
}

static int mag_cmp(const js_dec *a, const js_dec *b) {
    if (a->n == 0 || b->n == 0) return (a->n != 0) - (b->n != 0);
    if (a->exp != b->exp) return a->exp < b->exp ? -1 : 1;
    uint32_t m = TR_MIN(a->n, b->n);
    int c = memcmp(a->d, b->d, m);
    if (c) return c < 0 ? -1 : 1;
    return a->n == b->n ? 0 : (a->n < b->n ? -1 : 1);
}

int tr_js_dec_cmp(const js_dec *a, const js_dec *b) {
    bool an = a->neg && a->n, bn = b->neg && b->n;
    if (an != bn) return an ? -1 : 1;
    int c = mag_cmp(a, b);
    return an ? -c : c;
}

bool tr_js_dec_is_int(const js_dec *a) { return a->n == 0 || (int64_t)a->n <= a->exp; }

int32_t tr_js_dec_int_digits(const js_dec *a) { return a->n && a->exp > 0 ? a->exp : 0; }

/* Integer part's digits ("0" when |a| < 1) into the arena. */
static const char *int_part(gcc *cc, const js_dec *a) {
    int32_t k = tr_js_dec_int_digits(a);
    if (k == 0) return "0";
    char *s = tr_gcc_alloc(cc, (size_t)k + 1);
    if (!s) return NULL;
    for (int32_t i = 0; i < k; i++) s[i] = (uint32_t)i < a->n ? a->d[i] : '0';
    s[k] = 0;
    return s;
}

/* Fraction digits without trailing zeros ("" for integers). */
static const char *frac_part(gcc *cc, const js_dec *a) {
    if (tr_js_dec_is_int(a)) return "";
    int64_t lead = a->exp < 0 ? -(int64_t)a->exp : 0;
    uint32_t from = a->exp > 0 ? (uint32_t)a->exp : 0;
    size_t n = (size_t)lead + (a->n - from);
    char *s = tr_gcc_alloc(cc, n + 1);
    if (!s) return NULL;
    memset(s, '0', (size_t)lead);
    memcpy(s + lead, a->d + from, a->n - from);
    s[n] = 0;
    return s;
}

void tr_js_dec_print(js_buf *b, const js_dec *a) {
    if (a->n == 0) {
        tr_js_buf_putc(b, '0');
        return;
    }
    if (a->neg) tr_js_buf_putc(b, '-');
    const char *ip = int_part(b->cc, a), *fp = frac_part(b->cc, a);
    if (!ip || !fp) {
        b->failed = true;
        return;
    }
    tr_js_buf_puts(b, ip);
    if (*fp) {
        tr_js_buf_putc(b, '.');
        tr_js_buf_puts(b, fp);
    }
}

/* |a| + 1 for an integer a >= 0 given as canonical digits, into the arena. */
static const char *digits_inc(gcc *cc, const char *s) {
    size_t n = strlen(s);
    char *r = tr_gcc_alloc(cc, n + 2);
    if (!r) return NULL;
    memcpy(r + 1, s, n + 1);
    r[0] = '0';
    size_t i = n;
    while (r[i] == '9') r[i--] = '0';
    r[i]++;
    return r[0] == '0' ? r + 1 : r;
}

/* s - 1 for canonical digits s >= 1. */
static const char *digits_dec(gcc *cc, const char *s) {
    size_t n = strlen(s);
    char *r = tr_js_strndup(cc, s, n);
    if (!r) return NULL;
    size_t i = n - 1;
    while (r[i] == '0') r[i--] = '9';
    r[i]--;
    while (r[0] == '0' && r[1]) r++;
    return r;
}

static void dec_from_int_digits(gcc *cc, bool neg, const char *s, js_dec *out) {
    if (!s || !dec_make(cc, neg, s, strlen(s), (int64_t)strlen(s), out))
        memset(out, 0, sizeof *out), out->d = "";
}

/* floor(|a|) as digits, and whether a had a fraction */
void tr_js_dec_floor(gcc *cc, const js_dec *a, js_dec *out) {
    const char *ip = int_part(cc, a);
    if (tr_js_dec_is_int(a) || !ip) {
        *out = *a;
        return;
    }
    dec_from_int_digits(cc, a->neg, a->neg ? digits_inc(cc, ip) : ip, out);
}

void tr_js_dec_ceil(gcc *cc, const js_dec *a, js_dec *out) {
    const char *ip = int_part(cc, a);
    if (tr_js_dec_is_int(a) || !ip) {
        *out = *a;
        return;
    }
    dec_from_int_digits(cc, a->neg, a->neg ? ip : digits_inc(cc, ip), out);
}

void tr_js_dec_add_int(gcc *cc, const js_dec *a, int delta, js_dec *out) {
    /* a is an integer; delta is +1 or -1 */
    const char *ip = int_part(cc, a);
    if (!ip) {
        *out = *a;
        return;
    }
    bool neg = a->neg && a->n;
    if (a->n == 0) {
        dec_from_int_digits(cc, delta < 0, "1", out);
        return;
    }
    bool grow = (delta > 0) != neg; /* magnitude grows */
    dec_from_int_digits(cc, neg, grow ? digits_inc(cc, ip) : digits_dec(cc, ip), out);
}

/* ---- integer ranges over canonical digit strings ---- */

/* Same-length digit strings in [lo, hi] from position i, with flags
 * "still equal to lo / hi so far". */
static bool all_char(const char *s, size_t i, size_t n, char c) {
    for (; i < n; i++)
        if (s[i] != c) return false;
    return true;
}

static void int_same_len(js_buf *b, const char *lo, const char *hi, size_t i, size_t n,
                         bool tl, bool th) {
    if (i == n) return;
    /* a bound whose remaining digits are all 0 (low) or 9 (high) no
     * longer constrains the rest */
    if (tl && all_char(lo, i + 1, n, '0') && (!th || lo[i] < hi[i] || all_char(hi, i + 1, n, '9'))) {
        if (!th || all_char(hi, i + 1, n, '9')) {
            int a = lo[i] - '0', z = th ? hi[i] - '0' : 9;
            if (a == z)
                tr_js_buf_printf(b, "%d", a);
            else
                tr_js_buf_printf(b, "[%d-%d]", a, z);
            if (n - i - 1 == 1)
                tr_js_buf_puts(b, "[0-9]");
            else if (n - i - 1 > 1)
                tr_js_buf_printf(b, "[0-9]{%zu}", n - i - 1);
            return;
        }
    }
    if (!tl && !th) {
        if (n - i == 1)
            tr_js_buf_puts(b, "[0-9]");
        else
            tr_js_buf_printf(b, "[0-9]{%zu}", n - i);
        return;
    }
    int a = tl ? lo[i] - '0' : 0, z = th ? hi[i] - '0' : 9;
    /* alternatives: a (tight low), z (tight high), and the middle */
    int alts = 0;
    tr_js_buf_puts(b, "(?:");
    if (tl) {
        tr_js_buf_printf(b, "%d", a);
        int_same_len(b, lo, hi, i + 1, n, true, th && a == z);
        alts++;
    }
    if (th && !(tl && a == z)) {
        if (alts++) tr_js_buf_putc(b, '|');
        tr_js_buf_printf(b, "%d", z);
        int_same_len(b, lo, hi, i + 1, n, false, true);
    }
    int ma = tl ? a + 1 : a, mz = th ? z - 1 : z;
    if (ma <= mz) {
        if (alts++) tr_js_buf_putc(b, '|');
        if (ma == mz)
            tr_js_buf_printf(b, "%d", ma);
        else
            tr_js_buf_printf(b, "[%d-%d]", ma, mz);
        if (n - i - 1 == 1)
            tr_js_buf_puts(b, "[0-9]");
        else if (n - i - 1 > 1)
            tr_js_buf_printf(b, "[0-9]{%zu}", n - i - 1);
    }
    tr_js_buf_putc(b, ')');
}

/* Canonical integers (no sign) in [lo, hi]; hi NULL: unbounded. lo <= hi.
 * Appends alternatives separated by '|' (caller groups). */
static void int_range(gcc *cc, js_buf *b, const char *lo, const char *hi) {
    size_t la = strlen(lo), lz = hi ? strlen(hi) : la;
    char *l = tr_gcc_alloc(cc, lz + 2), *h = tr_gcc_alloc(cc, lz + 2);
    if (!l || !h) {
        b->failed = true;
        return;
    }
    bool first = true;
    for (size_t len = la; len <= lz; len++) {
        if (len == la)
            memcpy(l, lo, la + 1);
        else {
            memset(l, '0', len);
            l[0] = '1';
            l[len] = 0;
        }
        if (hi && len == lz)
            memcpy(h, hi, lz + 1);
        else {
            memset(h, '9', len);
            h[len] = 0;
        }
        if (!first) tr_js_buf_putc(b, '|');
        first = false;
        int_same_len(b, l, h, 0, len, true, true);
    }
    if (!hi) {
        if (!first) tr_js_buf_putc(b, '|');
        tr_js_buf_printf(b, "[1-9][0-9]{%zu,}", la);
    }
}

/* ---- fractions ---- */

/* Remainders D (digit strings) of a fraction from position i such that
 * the zero-padded 0.F stays within [lf, uf] (each bound optional), given
 * that F so far equals lf (tl) / uf (th). Appends the regex of the
 * NON-EMPTY remainders (nothing if none) and returns whether the empty
 * remainder (F ends here) is allowed; *any set when some non-empty
 * remainder exists. */
typedef struct fr {
    const char *lf, *uf;
    size_t nl, nu;
    bool lex, uex;
    uint32_t max; /* most fraction digits (0: any) */
} fr;

static bool frac(js_buf *b, const fr *f, size_t i, bool tl, bool th, bool *any) {
    bool lz = i >= f->nl, uz = i >= f->nu;
    bool empty_ok = (!tl || (lz && !f->lex)) && (!th || !(uz && f->uex));
    /* digits the remainder may still take (0: any) */
    uint32_t left = f->max ? f->max - (uint32_t)i : 0;
    *any = true;
    if (f->max && i >= f->max) {
        *any = false;
        return empty_ok;
    }
    if (!tl && !th) {
        reps(b, "[0-9]", 1, left);
        return empty_ok;
    }
    if (tl && lz && !th) {
        if (f->lex)
            nonzero_digits(b, left);
        else
            reps(b, "[0-9]", 1, left);
        return empty_ok;
    }
    if (th && uz) {
        /* the rest must be all zeros (and, when tl, zeros are also >= the
         * lower bound only if it ended too) */
        bool ok = !f->uex && (!tl || (lz && !f->lex));
        if (ok)
            reps(b, "0", 1, left);
        else
            *any = false;
        return empty_ok;
    }
    int a = tl ? (lz ? 0 : f->lf[i] - '0') : 0;
    int z = th ? f->uf[i] - '0' : 9;
    int alts = 0;
    js_buf t;
    tr_js_buf_init(&t, b->cc);
    tr_js_buf_puts(&t, "(?:");
    if (tl) {
        bool sub_any;
        js_buf s;
        tr_js_buf_init(&s, b->cc);
        bool e = frac(&s, f, i + 1, true, th && a == z, &sub_any);
        if (e || sub_any) {
            alts++;
            tr_js_buf_printf(&t, "%d", a);
            if (sub_any) {
                tr_js_buf_puts(&t, e ? "(?:" : "");
                tr_js_buf_add(&t, s.p, s.n);
                tr_js_buf_puts(&t, e ? ")?" : "");
            }
        }
        if (!js_buf_ok(&s)) t.failed = true;
        tr_js_buf_free(&s);
    }
    if (th && !(tl && a == z)) {
        bool sub_any;
        js_buf s;
        tr_js_buf_init(&s, b->cc);
        bool e = frac(&s, f, i + 1, false, true, &sub_any);
        if (e || sub_any) {
            if (alts++) tr_js_buf_putc(&t, '|');
            tr_js_buf_printf(&t, "%d", z);
            if (sub_any) {
                tr_js_buf_puts(&t, e ? "(?:" : "");
                tr_js_buf_add(&t, s.p, s.n);
                tr_js_buf_puts(&t, e ? ")?" : "");
            }
        }
        if (!js_buf_ok(&s)) t.failed = true;
        tr_js_buf_free(&s);
    }
    int ma = tl ? a + 1 : a, mz = th ? z - 1 : z;
    if (ma <= mz) {
        if (alts++) tr_js_buf_putc(&t, '|');
        if (ma == mz)
            tr_js_buf_printf(&t, "%d", ma);
        else
            tr_js_buf_printf(&t, "[%d-%d]", ma, mz);
        if (left != 1) reps(&t, "[0-9]", 0, left ? left - 1 : 0);
    }
    tr_js_buf_putc(&t, ')');
    if (alts)
        tr_js_buf_add(b, t.p, t.n);
    else
        *any = false;
    if (!js_buf_ok(&t)) b->failed = true;
    tr_js_buf_free(&t);
    return empty_ok;
}

/* The optional fraction part ("" or "\.digits") after an integer part
 * equal to the bounds' (lf NULL: no lower constraint beyond 0; uf NULL:
 * none). Appends its regex; false when no fraction fits. */
static bool frac_part_rx(js_buf *b, const char *lf, bool lex, const char *uf, bool uex,
                         uint32_t max) {
    fr f = {.lf = lf ? lf : "", .uf = uf ? uf : "", .lex = lf && lex, .uex = uf && uex,
            .max = max};
    f.nl = strlen(f.lf);
    f.nu = strlen(f.uf);
    js_buf s;
    tr_js_buf_init(&s, b->cc);
    bool any;
    bool e = frac(&s, &f, 0, lf != NULL, uf != NULL, &any);
    if (any) {
        tr_js_buf_puts(b, "(?:\\.");
        tr_js_buf_add(b, s.p, s.n);
        tr_js_buf_puts(b, e ? ")?" : ")");
    }
    if (!js_buf_ok(&s)) b->failed = true;
    tr_js_buf_free(&s);
    return e || any;
}

/* ---- regions ---- */

typedef struct region {
    js_dec lo, hi; /* magnitudes, lo >= 0 */
    bool lox, hix, has_hi;
} region;

/* Exponent part of at least k (k >= 1): e, E, optional +, leading zeros;
 * max > 0: at most max digits, leading zeros included. false (nothing
 * appended) when k needs more digits than that. */
static bool exp_at_least(gcc *cc, js_buf *b, int32_t k, uint32_t max) {
    char kd[16], lo[16], hi[16];
    int nk = snprintf(kd, sizeof kd, "%d", k);
    if (max == 0) {
        tr_js_buf_puts(b, "[eE]\\+?0*(?:");
        int_range(cc, b, kd, NULL);
        tr_js_buf_putc(b, ')');
        return true;
    }
    if ((uint32_t)nk > max || max >= sizeof hi) return false;
    /* canonical exponents of each length L, after up to max - L zeros */
    tr_js_buf_puts(b, "[eE]\\+?(?:");
    for (uint32_t len = (uint32_t)nk; len <= max; len++) {
        if (len > (uint32_t)nk) {
            tr_js_buf_putc(b, '|');
            memset(lo, '0', len);
            lo[0] = '1';
            lo[len] = 0;
        } else
            memcpy(lo, kd, (size_t)nk + 1);
        memset(hi, '9', len);
        hi[len] = 0;
        if (max > len) reps(b, "0", 0, max - len);
        tr_js_buf_puts(b, "(?:");
        int_range(cc, b, lo, hi);
        tr_js_buf_putc(b, ')');
    }
    tr_js_buf_putc(b, ')');
    return true;
}

/* The fraction of a number ("\\.[0-9]+"), or of an integral value
 * written as a number ("\\.0+"), within f's bound. */
static void frac_rx(js_buf *b, bool integer, const js_numfmt *f) {
    tr_js_buf_puts(b, "\\.");
    reps(b, integer ? "0" : "[0-9]", 1, f->max_frac);
}

/* "[eE]" and the exponent's sign and digits within f's bound; integral
 * values: no minus (1e-1 is not an integer). */
static void exp_rx(js_buf *b, bool integer, const js_numfmt *f) {
    tr_js_buf_puts(b, integer ? "[eE]\\+?" : "[eE][+-]?");
    reps(b, "[0-9]", 1, f->max_exp);
}

void tr_js_num_any_regex(const js_numfmt *f, bool integer, js_buf *b) {
    if (integer && f->plain_int) {
        tr_js_buf_puts(b, "(?:0|-?[1-9][0-9]*)");
        return;
    }
    tr_js_buf_puts(b, "-?(?:0|[1-9][0-9]*)(?:");
    frac_rx(b, integer, f);
    tr_js_buf_puts(b, ")?(?:");
    exp_rx(b, integer, f);
    tr_js_buf_puts(b, ")?");
}

/* Magnitudes in the region, as `(0|[1-9]\d*)(\.\d+)?` texts (integer:
 * integral values only, written with an optional .0+), plus exponent
 * forms where safe. Appends alternatives; returns false if none. */
static bool region_rx(gcc *cc, const region *r, bool integer, const js_numfmt *f,
                      js_buf *b) {
    if (r->has_hi) {
        int c = tr_js_dec_cmp(&r->lo, &r->hi);
        if (c > 0 || (c == 0 && (r->lox || r->hix))) return false;
    }
    size_t start = b->n;
    bool some = false;
    if (integer) {
        js_dec lo, hi;
        if (r->lox && tr_js_dec_is_int(&r->lo))
            tr_js_dec_add_int(cc, &r->lo, 1, &lo);
        else
            tr_js_dec_ceil(cc, &r->lo, &lo);
        if (r->has_hi) {
            if (r->hix && tr_js_dec_is_int(&r->hi))
                tr_js_dec_add_int(cc, &r->hi, -1, &hi);
            else
                tr_js_dec_floor(cc, &r->hi, &hi);
            if (tr_js_dec_cmp(&lo, &hi) > 0) return false;
        }
        const char *ls = int_part(cc, &lo), *hs = r->has_hi ? int_part(cc, &hi) : NULL;
        if (!ls || (r->has_hi && !hs)) return (b->failed = true), false;
        tr_js_buf_puts(b, "(?:");
        int_range(cc, b, ls, hs);
        tr_js_buf_putc(b, ')');
        if (!f->plain_int) {
            tr_js_buf_puts(b, "(?:");
            frac_rx(b, true, f);
            tr_js_buf_puts(b, ")?");
        }
        some = true;
    } else {
        const char *li = int_part(cc, &r->lo), *lf = frac_part(cc, &r->lo);
        const char *ui = r->has_hi ? int_part(cc, &r->hi) : NULL;
        const char *uf = r->has_hi ? frac_part(cc, &r->hi) : NULL;
        if (!li || !lf || (r->has_hi && (!ui || !uf))) return (b->failed = true), false;
        if (ui && strcmp(li, ui) == 0) {
            tr_js_buf_puts(b, li);
            some = frac_part_rx(b, lf, r->lox, uf, r->hix, f->max_frac);
        } else {
            size_t mark = b->n;
            tr_js_buf_puts(b, li);
            if (frac_part_rx(b, lf, r->lox, NULL, false, f->max_frac))
                some = true;
            else
                b->n = mark;
            const char *mid_lo = digits_inc(cc, li);
            const char *mid_hi = ui ? (strcmp(ui, "0") ? digits_dec(cc, ui) : NULL) : NULL;
            if (!mid_lo) return (b->failed = true), false;
            bool mid = !ui || (mid_hi && (strlen(mid_lo) < strlen(mid_hi) ||
                                          (strlen(mid_lo) == strlen(mid_hi) &&
                                           strcmp(mid_lo, mid_hi) <= 0)));
            if (mid) {
                if (some) tr_js_buf_putc(b, '|');
                tr_js_buf_puts(b, "(?:");
                int_range(cc, b, mid_lo, mid_hi);
                tr_js_buf_puts(b, ")(?:");
                frac_rx(b, false, f);
                tr_js_buf_puts(b, ")?");
                some = true;
            }
            if (ui) {
                mark = b->n;
                if (some) tr_js_buf_putc(b, '|');
                tr_js_buf_puts(b, ui);
                if (frac_part_rx(b, "", false, uf, r->hix, f->max_frac))
                    some = true;
                else
                    b->n = mark;
            }
        }
    }
    if (!r->has_hi && !(integer && f->plain_int)) { /* exponent forms */
        /* mantissas: any, or nonzero (0e5 is 0, outside a region that
         * excludes 0), then the exponent */
        if (some) tr_js_buf_putc(b, '|');
        size_t mark = b->n;
        if (r->lo.n == 0 && !r->lox) {
            tr_js_buf_puts(b, "(?:0|[1-9][0-9]*)(?:");
            frac_rx(b, integer, f);
            tr_js_buf_puts(b, ")?");
            exp_rx(b, integer, f);
            some = true;
        } else if (r->lo.n == 0) {
            tr_js_buf_puts(b, integer ? "[1-9][0-9]*(?:" : "(?:[1-9][0-9]*(?:");
            frac_rx(b, integer, f);
            if (integer)
                tr_js_buf_puts(b, ")?");
            else {
                tr_js_buf_puts(b, ")?|0\\.");
                nonzero_digits(b, f->max_frac);
                tr_js_buf_putc(b, ')');
            }
            exp_rx(b, integer, f);
            some = true;
        } else if (tr_js_dec_int_digits(&r->lo) < 100000) {
            /* [1-9](.d+)? x 10^K >= 10^K > lo when K >= lo's digit count */
            tr_js_buf_puts(b, "[1-9](?:");
            frac_rx(b, integer, f);
            tr_js_buf_puts(b, ")?");
            if (exp_at_least(cc, b, TR_MAX(1, tr_js_dec_int_digits(&r->lo)), f->max_exp))
                some = true;
            else
                b->n = mark - (some ? 1 : 0);
        } else
            b->n = mark - (some ? 1 : 0);
    }
    if (!some) b->n = start;
    return some;
}

static void dec_neg(const js_dec *a, js_dec *out) {
    *out = *a;
    out->neg = a->n ? !a->neg : false;
}

bool tr_js_num_regex(gcc *cc, const js_range *r, bool integer, const js_numfmt *f,
                     js_buf *b) {
    js_dec zero = {.d = ""};
    /* values >= 0: X in [max(lo, 0), hi] */
    region p = {.lo = zero};
    bool p_ok = !(r->has_hi && r->hi.neg && r->hi.n);
    if (r->has_lo && !(r->lo.neg && r->lo.n)) p.lo = r->lo, p.lox = r->lo_excl;
    if (r->has_hi) p.has_hi = true, p.hi = r->hi, p.hix = r->hi_excl;
    /* values <= 0: "-X" with X in [max(-hi, 0), -lo] */
    region m = {.lo = zero};
    bool m_ok = !(r->has_lo && !r->lo.neg && r->lo.n);
    if (r->has_hi && (r->hi.neg || r->hi.n == 0)) dec_neg(&r->hi, &m.lo), m.lox = r->hi_excl;
    if (r->has_lo) m.has_hi = true, dec_neg(&r->lo, &m.hi), m.hix = r->lo_excl;
    /* canonical integers: 0 only without its sign */
    if (integer && f->plain_int && m.lo.n == 0) m.lox = true;
    size_t start = b->n;
    tr_js_buf_puts(b, "(?:");
    bool some = false;
    if (p_ok) some = region_rx(cc, &p, integer, f, b);
    if (m_ok) {
        size_t mark = b->n;
        tr_js_buf_puts(b, some ? "|-(?:" : "-(?:");
        if (region_rx(cc, &m, integer, f, b)) {
            tr_js_buf_putc(b, ')');
            some = true;
        } else
            b->n = mark;
    }
    tr_js_buf_putc(b, ')');
    if (!some) b->n = start;
    if (b->p && b->cap) b->p[b->n] = 0;
    return some;
}
