/* json_dumps.c — JSON text exactly as Python's json.dumps writes it
 * (ensure_ascii=False, separators ", " and ": "), for MaskBench: its
 * test instances are tokenized from that text, so the benchmark must
 * produce the same bytes.
 *
 * Layering: grammar/json (public through grammar.h: the benchmark and the
 * tests use it), over jansson. Thread-safe (no state).
 *
 * Floats follow repr(): the shortest digits that read back as the same
 * double, fixed notation when the decimal point falls within 16 digits
 * of the first digit ("0.0001", "1234567890123456.0"), else d.ddde+XX
 * ("1e-05", "1.5e+16"); integral floats keep ".0". Strings escape only
 * " \ and the control characters (\n \r \t \b \f by name, others as
 * \u00xx in lower case); everything else stays raw UTF-8.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "grammar/grammar.h"

typedef struct out {
    char **buf;
    size_t *len, *cap;
    bool ok;
} out;

static void put(out *o, const char *s, size_t n) {
    if (!o->ok) return;
    if (*o->len + n + 1 > *o->cap) {
        size_t nc = *o->cap ? *o->cap : 256;
        while (nc < *o->len + n + 1) nc *= 2;
        char *p = realloc(*o->buf, nc);
        if (!p) {
            o->ok = false;
            return;
        }
        *o->buf = p;
        *o->cap = nc;
    }
    memcpy(*o->buf + *o->len, s, n);
    *o->len += n;
    (*o->buf)[*o->len] = 0;
}

static void puts_(out *o, const char *s) { put(o, s, strlen(s)); }

static void put_str(out *o, const char *s, size_t n) {
    put(o, "\"", 1);
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        const char *e = NULL;
        char u[8];
        if (c == '"') e = "\\\"";
        else if (c == '\\') e = "\\\\";
        else if (c == '\n') e = "\\n";
        else if (c == '\r') e = "\\r";
        else if (c == '\t') e = "\\t";
        else if (c == '\b') e = "\\b";
        else if (c == '\f') e = "\\f";
        else if (c < 0x20) {
            snprintf(u, sizeof u, "\\u%04x", c);
            e = u;
        }
        if (!e) continue;
        put(o, s + run, i - run);
        puts_(o, e);
        run = i + 1;
    }
    put(o, s + run, n - run);
    put(o, "\"", 1);
}

static void put_float(out *o, double x) {
    if (isnan(x)) {
        puts_(o, "NaN");
        return;
    }
    if (isinf(x)) {
        puts_(o, x < 0 ? "-Infinity" : "Infinity");
        return;
    }
    char e[40];
    for (int p = 1; p <= 17; p++) {
        snprintf(e, sizeof e, "%.*e", p - 1, x);
        if (strtod(e, NULL) == x) break;
    }
    /* e = [-]d[.ddd]e[+-]XX: split into digits and exponent */
    const char *s = e;
    bool neg = *s == '-';
    if (neg) s++;
    char digits[24];
    int nd = 0;
    for (; *s && *s != 'e'; s++)
        if (*s != '.') digits[nd++] = *s;
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    digits[nd] = 0;
    int exp10 = atoi(s + 1), decpt = exp10 + 1;
    char r[64];
    size_t k = 0;
    if (neg) r[k++] = '-';
    if (decpt > -4 && decpt <= 16) {
        if (decpt <= 0) {
            r[k++] = '0';
            r[k++] = '.';
            for (int i = 0; i < -decpt; i++) r[k++] = '0';
            for (int i = 0; i < nd; i++) r[k++] = digits[i];
        } else if (decpt >= nd) {
            for (int i = 0; i < nd; i++) r[k++] = digits[i];
            for (int i = nd; i < decpt; i++) r[k++] = '0';
            r[k++] = '.';
            r[k++] = '0';
        } else {
            for (int i = 0; i < nd; i++) {
                if (i == decpt) r[k++] = '.';
                r[k++] = digits[i];
            }
        }
    } else {
        r[k++] = digits[0];
        if (nd > 1) {
            r[k++] = '.';
            for (int i = 1; i < nd; i++) r[k++] = digits[i];
        }
        k += (size_t)snprintf(r + k, sizeof r - k, "e%c%02d", exp10 < 0 ? '-' : '+',
                              exp10 < 0 ? -exp10 : exp10);
    }
    put(o, r, k);
}

static void dump(out *o, const json_t *v, int depth) {
    if (depth > 2048) {
        o->ok = false;
        return;
    }
    char num[32];
    switch (json_typeof(v)) {
    case JSON_NULL: puts_(o, "null"); return;
    case JSON_TRUE: puts_(o, "true"); return;
    case JSON_FALSE: puts_(o, "false"); return;
    case JSON_INTEGER:
        snprintf(num, sizeof num, "%lld", (long long)json_integer_value(v));
        puts_(o, num);
        return;
    case JSON_REAL: put_float(o, json_real_value(v)); return;
    case JSON_STRING: {
        const char *lit;
        size_t n;
        if (tr_grammar_json_exact_literal(v, &lit, &n)) /* a number beyond jansson's */
            put(o, lit, n);
        else
            put_str(o, json_string_value(v), json_string_length(v));
        return;
    }
    case JSON_ARRAY:
        put(o, "[", 1);
        for (size_t i = 0; i < json_array_size(v); i++) {
            if (i) put(o, ", ", 2);
            dump(o, json_array_get(v, i), depth + 1);
        }
        put(o, "]", 1);
        return;
    case JSON_OBJECT: {
        put(o, "{", 1);
        const char *k;
        size_t kl;
        json_t *e;
        bool first = true;
        json_object_keylen_foreach((json_t *)v, k, kl, e) {
            if (!first) put(o, ", ", 2);
            first = false;
            put_str(o, k, kl);
            put(o, ": ", 2);
            dump(o, e, depth + 1);
        }
        put(o, "}", 1);
        return;
    }
    }
}

bool tr_grammar_json_dumps_py(const struct json_t *v, char **buf, size_t *len, size_t *cap) {
    out o = {buf, len, cap, true};
    dump(&o, v, 0);
    if (o.ok && !*buf) put(&o, "", 0);
    return o.ok;
}
