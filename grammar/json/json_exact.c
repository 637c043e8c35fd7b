/* json_exact.c — number literals that jansson cannot hold exactly,
 * carried through it as marked strings (grammar.h,
 * tr_grammar_json_exact_numbers; json_internal.h, tr_js_exact_literal).
 *
 * Layering: grammar/json; pure functions (the scan allocates its output).
 */
#include <stdlib.h>
#include <string.h>

#include "grammar/json/json_internal.h"

static bool is_digit(char c) { return c >= '0' && c <= '9'; }

/* The length of the number literal at s[0..n) (JSON syntax), or 0. */
static size_t literal_len(const char *s, size_t n) {
    size_t i = 0;
    if (i < n && s[i] == '-') i++;
    if (i >= n || !is_digit(s[i])) return 0;
    if (s[i] == '0') i++;
    else
        while (i < n && is_digit(s[i])) i++;
    if (i < n && s[i] == '.') {
        if (i + 1 >= n || !is_digit(s[i + 1])) return 0;
        for (i++; i < n && is_digit(s[i]); i++) {}
    }
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        size_t j = i + 1;
        if (j < n && (s[j] == '+' || s[j] == '-')) j++;
        if (j >= n || !is_digit(s[j])) return 0;
        for (i = j; i < n && is_digit(s[i]); i++) {}
    }
    return i;
}

/* Whether jansson would not hold the literal s[0..n) exactly. */
static bool needs_exact(const char *s, size_t n, bool integers_only) {
    bool neg = s[0] == '-';
    const char *d = s + neg;
    size_t nd = n - neg;
    if (!memchr(d, '.', nd) && !memchr(d, 'e', nd) && !memchr(d, 'E', nd)) {
        if (nd != 19) return nd > 19; /* int64: at most 19 digits */
        return memcmp(d, neg ? "9223372036854775808" : "9223372036854775807", 19) > 0;
    }
    if (integers_only) return false;
    /* a decimal: significant digits of the mantissa, and the exponent
     * (s is not NUL-terminated: every scan stays within n) */
    size_t mant = 0;
    while (mant < nd && d[mant] != 'e' && d[mant] != 'E') mant++;
    size_t first = SIZE_MAX, last = 0;
    for (size_t i = 0; i < mant; i++)
        if (is_digit(d[i]) && d[i] != '0') {
            if (first == SIZE_MAX) first = i;
            last = i;
        }
    if (first == SIZE_MAX) return false; /* zero */
    size_t sig = 0;
    for (size_t i = first; i <= last; i++) sig += is_digit(d[i]);
    if (sig > 15) return true;
    if (mant < nd) {
        size_t i = mant + 1;
        if (i < nd && (d[i] == '+' || d[i] == '-')) i++;
        long e = 0;
        for (; i < nd && is_digit(d[i]); i++)
            if ((e = e * 10 + (d[i] - '0')) > 300) return true;
    }
    return false;
}

static bool put(char **o, size_t *n, size_t *cap, const char *s, size_t k) {
    if (*n + k + 1 > *cap) {
        size_t c = *cap ? *cap : 256;
        while (c < *n + k + 1) c *= 2;
        char *p = realloc(*o, c);
        if (!p) return false;
        *o = p;
        *cap = c;
    }
    memcpy(*o + *n, s, k);
    *n += k;
    (*o)[*n] = 0;
    return true;
}

bool tr_grammar_json_exact_numbers(const char *text, size_t len, bool integers_only, char **out,
                                   size_t *out_len) {
    *out = NULL;
    *out_len = 0;
    char *o = NULL;
    size_t on = 0, cap = 0, done = 0; /* text[0..done) is in o */
    bool str = false;
    for (size_t i = 0; i < len; i++) {
        char c = text[i];
        if (str) {
            if (c == '\\') i++;
            else if (c == '"') str = false;
            continue;
        }
        if (c == '"') {
            str = true;
            continue;
        }
        if (c != '-' && !is_digit(c)) continue;
        size_t k = literal_len(text + i, len - i);
        if (k && needs_exact(text + i, k, integers_only)) {
            if (!put(&o, &on, &cap, text + done, i - done) ||
                !put(&o, &on, &cap, "\"" GRAMMAR_JSON_EXACT_PREFIX, 1 + strlen(GRAMMAR_JSON_EXACT_PREFIX)) ||
                !put(&o, &on, &cap, text + i, k) || !put(&o, &on, &cap, "\"", 1)) {
                free(o);
                return false;
            }
            done = i + k;
        }
        if (k) i += k - 1;
    }
    if (!o) return true;
    if (!put(&o, &on, &cap, text + done, len - done)) {
        free(o);
        return false;
    }
    *out = o;
    *out_len = on;
    return true;
}

bool tr_grammar_json_exact_literal(const json_t *v, const char **lit, size_t *len) {
    return json_is_string(v) &&
           tr_grammar_json_exact_string(json_string_value(v), json_string_length(v), lit, len);
}

bool tr_grammar_json_exact_string(const char *s, size_t n, const char **lit, size_t *len) {
    if (!s || n <= GRAMMAR_JSON_EXACT_PREFIX_LEN ||
        memcmp(s, GRAMMAR_JSON_EXACT_PREFIX_BYTES, GRAMMAR_JSON_EXACT_PREFIX_LEN) != 0)
        return false;
    const char *l = s + GRAMMAR_JSON_EXACT_PREFIX_LEN;
    size_t ln = n - GRAMMAR_JSON_EXACT_PREFIX_LEN;
    if (literal_len(l, ln) != ln) return false;
    if (lit) *lit = l;
    if (len) *len = ln;
    return true;
}

bool tr_js_exact_literal(const json_t *v, const char **lit, size_t *len) {
    return tr_grammar_json_exact_literal(v, lit, len);
}

bool tr_js_is_num(const json_t *v) { return json_is_number(v) || tr_js_exact_literal(v, NULL, NULL); }
