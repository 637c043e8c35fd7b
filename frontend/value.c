/* value.c — see value.h. */
#include "frontend/value.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "frontend/ast_internal.h"

bool tr_dsl_buf_put(tr_dsl_buf *b, const char *s, size_t n) {
    size_t need;
    if (tr_add_overflow_size(b->len, n + 1, &need)) return false;
    if (need > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < need) cap *= 2;
        char *np = realloc(b->p, cap);
        if (!np) return false;
        b->p = np;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
    return true;
}

void tr_dsl_buf_free(tr_dsl_buf *b) {
    free(b->p);
    b->p = NULL;
    b->len = b->cap = 0;
}

const char *tr_dsl_type_name(const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_NULL: return "null";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    case JSON_INTEGER:
    case JSON_REAL: return "a number";
    case JSON_STRING: return "a string";
    case JSON_ARRAY: return "a list";
    case JSON_OBJECT: return "an object";
    }
    return "?";
}

char *tr_dsl_value_json(const json_t *v) {
    return json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY | JSON_REAL_PRECISION(15));
}

tr_status tr_dsl_value_append_text(tr_dsl_buf *b, const json_t *v) {
    char tmp[64];
    switch (json_typeof(v)) {
    case JSON_NULL: return TR_OK;
    case JSON_STRING:
        return tr_dsl_buf_put(b, json_string_value(v), json_string_length(v)) ? TR_OK
                                                                             : TR_ERR_NOMEM;
    case JSON_TRUE:
    case JSON_FALSE: {
        const char *t = json_is_true(v) ? "true" : "false";
        return tr_dsl_buf_put(b, t, strlen(t)) ? TR_OK : TR_ERR_NOMEM;
    }
    case JSON_INTEGER: {
        int n = snprintf(tmp, sizeof tmp, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        return tr_dsl_buf_put(b, tmp, (size_t)n) ? TR_OK : TR_ERR_NOMEM;
    }
    default: {
        char *j = tr_dsl_value_json(v);
        if (!j) return TR_ERR_NOMEM;
        bool ok = tr_dsl_buf_put(b, j, strlen(j));
        free(j);
        return ok ? TR_OK : TR_ERR_NOMEM;
    }
    }
}

bool tr_dsl_truthy(const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_NULL:
    case JSON_FALSE: return false;
    case JSON_TRUE: return true;
    case JSON_INTEGER: return json_integer_value(v) != 0;
    case JSON_REAL: return json_real_value(v) != 0.0;
    case JSON_STRING: return json_string_length(v) != 0;
    case JSON_ARRAY: return json_array_size(v) != 0;
    case JSON_OBJECT: return json_object_size(v) != 0;
    }
    return false;
}

bool tr_dsl_equal(const json_t *a, const json_t *b) {
    if (json_is_number(a) && json_is_number(b)) {
        if (json_is_integer(a) && json_is_integer(b))
            return json_integer_value(a) == json_integer_value(b);
        return json_number_value(a) == json_number_value(b);
    }
    if (json_typeof(a) != json_typeof(b)) return false;
    if (json_is_array(a)) {
        if (json_array_size(a) != json_array_size(b)) return false;
        for (size_t i = 0; i < json_array_size(a); i++)
            if (!tr_dsl_equal(json_array_get(a, i), json_array_get(b, i))) return false;
        return true;
    }
    if (json_is_object(a)) {
        if (json_object_size(a) != json_object_size(b)) return false;
        const char *k;
        json_t *va;
        json_object_foreach((json_t *)a, k, va) {
            json_t *vb = json_object_get(b, k);
            if (!vb || !tr_dsl_equal(va, vb)) return false;
        }
        return true;
    }
    return json_equal((json_t *)a, (json_t *)b);
}

size_t tr_dsl_utf8_count(const char *s, size_t n) {
    size_t c = 0;
    for (size_t i = 0; i < n; i++)
        if (((unsigned char)s[i] & 0xC0) != 0x80) c++;
    return c;
}

/* Byte offset of character k of s (valid UTF-8), or n. */
static size_t utf8_offset(const char *s, size_t n, size_t k) {
    size_t c = 0;
    for (size_t i = 0; i < n; i++)
        if (((unsigned char)s[i] & 0xC0) != 0x80) {
            if (c == k) return i;
            c++;
        }
    return n;
}

static const char *op_name(int op) {
    switch (op) {
    case TR_DSL_OP_ADD: return "+";
    case TR_DSL_OP_SUB: return "-";
    case TR_DSL_OP_MUL: return "*";
    case TR_DSL_OP_DIV: return "/";
    case TR_DSL_OP_MOD: return "%";
    case TR_DSL_OP_LT: return "<";
    case TR_DSL_OP_LE: return "<=";
    case TR_DSL_OP_GT: return ">";
    case TR_DSL_OP_GE: return ">=";
    case TR_DSL_OP_IN: return "in";
    case TR_DSL_OP_NOT_IN: return "not in";
    default: return "?";
    }
}

static tr_status arith(int op, const json_t *a, const json_t *b, json_t **out, char *err,
                       size_t cap) {
    if (json_is_integer(a) && json_is_integer(b) && op != TR_DSL_OP_DIV) {
        json_int_t x = json_integer_value(a), y = json_integer_value(b), r = 0;
        bool ovf = false;
        switch (op) {
        case TR_DSL_OP_ADD: ovf = __builtin_add_overflow(x, y, &r); break;
        case TR_DSL_OP_SUB: ovf = __builtin_sub_overflow(x, y, &r); break;
        case TR_DSL_OP_MUL: ovf = __builtin_mul_overflow(x, y, &r); break;
        case TR_DSL_OP_MOD:
            if (y == 0) return tr_errf(err, cap, TR_ERR_INVALID_ARG, "modulo by zero");
            if (y == -1) r = 0;
            else r = x % y;
            break;
        }
        if (ovf) return tr_errf(err, cap, TR_ERR_OVERFLOW, "integer overflow in %s", op_name(op));
        *out = json_integer(r);
        return *out ? TR_OK : TR_ERR_NOMEM;
    }
    double x = json_number_value(a), y = json_number_value(b), r = 0;
    switch (op) {
    case TR_DSL_OP_ADD: r = x + y; break;
    case TR_DSL_OP_SUB: r = x - y; break;
    case TR_DSL_OP_MUL: r = x * y; break;
    case TR_DSL_OP_DIV:
        if (y == 0) return tr_errf(err, cap, TR_ERR_INVALID_ARG, "division by zero");
        r = x / y;
        break;
    case TR_DSL_OP_MOD:
        if (y == 0) return tr_errf(err, cap, TR_ERR_INVALID_ARG, "modulo by zero");
        r = fmod(x, y);
        break;
    }
    if (!isfinite(r))
        return tr_errf(err, cap, TR_ERR_OVERFLOW, "the result of %s is not a finite number",
                       op_name(op));
    *out = json_real(r);
    return *out ? TR_OK : TR_ERR_NOMEM;
}

static tr_status add(const json_t *a, const json_t *b, size_t max_string, json_t **out,
                     char *err, size_t cap) {
    if (json_is_string(a) && json_is_string(b)) {
        size_t la = json_string_length(a), lb = json_string_length(b);
        if (la + lb > max_string)
            return tr_errf(err, cap, TR_ERR_LIMIT,
                           "string of %zu bytes over the limit max_string_bytes (%zu)",
                           la + lb, max_string);
        char *t = malloc(la + lb + 1);
        if (!t) return TR_ERR_NOMEM;
        memcpy(t, json_string_value(a), la);
        memcpy(t + la, json_string_value(b), lb);
        *out = json_stringn_nocheck(t, la + lb);
        free(t);
        return *out ? TR_OK : TR_ERR_NOMEM;
    }
    if (json_is_array(a) && json_is_array(b)) {
        *out = json_array();
        if (!*out || json_array_extend(*out, (json_t *)a) || json_array_extend(*out, (json_t *)b)) {
            tr_dsl_unref(*out);
            return TR_ERR_NOMEM;
        }
        return TR_OK;
    }
    if (json_is_object(a) && json_is_object(b)) {
        *out = json_object();
        if (!*out || json_object_update(*out, (json_t *)a) ||
            json_object_update(*out, (json_t *)b)) {
            tr_dsl_unref(*out);
            return TR_ERR_NOMEM;
        }
        return TR_OK;
    }
    if (json_is_number(a) && json_is_number(b))
        return arith(TR_DSL_OP_ADD, a, b, out, err, cap);
    return tr_errf(err, cap, TR_ERR_INVALID_ARG,
                   "cannot add %s and %s (+ adds numbers, joins strings, lists or objects; "
                   "use \"{a}{b}\" or str() to join text with other values)",
                   tr_dsl_type_name(a), tr_dsl_type_name(b));
}

static tr_status member(const json_t *a, const json_t *b, bool *in, char *err, size_t cap) {
    if (json_is_string(b)) {
        if (!json_is_string(a))
            return tr_errf(err, cap, TR_ERR_INVALID_ARG,
                           "'in' a string needs a string on its left, not %s",
                           tr_dsl_type_name(a));
        *in = memmem(json_string_value(b), json_string_length(b), json_string_value(a),
                     json_string_length(a)) != NULL;
        return TR_OK;
    }
    if (json_is_array(b)) {
        *in = false;
        for (size_t i = 0; i < json_array_size(b) && !*in; i++)
            *in = tr_dsl_equal(a, json_array_get(b, i));
        return TR_OK;
    }
    if (json_is_object(b)) {
        if (!json_is_string(a))
            return tr_errf(err, cap, TR_ERR_INVALID_ARG,
                           "'in' an object looks up a key: a string, not %s",
                           tr_dsl_type_name(a));
        *in = json_object_getn(b, json_string_value(a), json_string_length(a)) != NULL;
        return TR_OK;
    }
    return tr_errf(err, cap, TR_ERR_INVALID_ARG,
                   "'in' needs a string, a list or an object on its right, not %s",
                   tr_dsl_type_name(b));
}

tr_status tr_dsl_binary(int op, const json_t *a, const json_t *b, size_t max_string,
                        json_t **out, char *err, size_t cap) {
    switch (op) {
    case TR_DSL_OP_EQ:
    case TR_DSL_OP_NE: {
        bool eq = tr_dsl_equal(a, b);
        *out = json_boolean(op == TR_DSL_OP_EQ ? eq : !eq);
        return TR_OK;
    }
    case TR_DSL_OP_IN:
    case TR_DSL_OP_NOT_IN: {
        bool in;
        tr_status s = member(a, b, &in, err, cap);
        if (s) return s;
        *out = json_boolean(op == TR_DSL_OP_IN ? in : !in);
        return TR_OK;
    }
    case TR_DSL_OP_LT:
    case TR_DSL_OP_LE:
    case TR_DSL_OP_GT:
    case TR_DSL_OP_GE: {
        int c;
        if (json_is_number(a) && json_is_number(b)) {
            double x = json_number_value(a), y = json_number_value(b);
            if (json_is_integer(a) && json_is_integer(b)) {
                json_int_t i = json_integer_value(a), j = json_integer_value(b);
                c = i < j ? -1 : i > j;
            } else {
                c = x < y ? -1 : x > y;
            }
        } else if (json_is_string(a) && json_is_string(b)) {
            size_t la = json_string_length(a), lb = json_string_length(b);
            int m = memcmp(json_string_value(a), json_string_value(b), TR_MIN(la, lb));
            c = m ? m : (la < lb ? -1 : la > lb);
        } else {
            return tr_errf(err, cap, TR_ERR_INVALID_ARG,
                           "cannot compare %s with %s using %s (only numbers with numbers, "
                           "strings with strings)",
                           tr_dsl_type_name(a), tr_dsl_type_name(b), op_name(op));
        }
        bool r = op == TR_DSL_OP_LT   ? c < 0
                 : op == TR_DSL_OP_LE ? c <= 0
                 : op == TR_DSL_OP_GT ? c > 0
                                      : c >= 0;
        *out = json_boolean(r);
        return TR_OK;
    }
    case TR_DSL_OP_ADD: return add(a, b, max_string, out, err, cap);
    case TR_DSL_OP_SUB:
    case TR_DSL_OP_MUL:
    case TR_DSL_OP_DIV:
    case TR_DSL_OP_MOD:
        if (!json_is_number(a) || !json_is_number(b))
            return tr_errf(err, cap, TR_ERR_INVALID_ARG, "cannot apply %s to %s and %s",
                           op_name(op), tr_dsl_type_name(a), tr_dsl_type_name(b));
        return arith(op, a, b, out, err, cap);
    }
    return tr_errf(err, cap, TR_ERR_INTERNAL, "bad operator %d", op);
}

tr_status tr_dsl_index(const json_t *v, const json_t *index, json_t **out, char *err,
                       size_t cap) {
    if (json_is_object(v)) {
        if (!json_is_string(index))
            return tr_errf(err, cap, TR_ERR_INVALID_ARG,
                           "an object is indexed by a string key, not %s",
                           tr_dsl_type_name(index));
        json_t *r = json_object_getn(v, json_string_value(index), json_string_length(index));
        if (!r)
            return tr_errf(err, cap, TR_ERR_NOT_FOUND, "the object has no key \"%.200s\"",
                           json_string_value(index));
        *out = tr_dsl_ref(r);
        return TR_OK;
    }
    if (!json_is_array(v) && !json_is_string(v))
        return tr_errf(err, cap, TR_ERR_INVALID_ARG,
                       "cannot index %s (only lists, strings and objects)",
                       tr_dsl_type_name(v));
    if (!json_is_integer(index))
        return tr_errf(err, cap, TR_ERR_INVALID_ARG, "a %s is indexed by an integer, not %s",
                       json_is_array(v) ? "list" : "string", tr_dsl_type_name(index));
    json_int_t i = json_integer_value(index);
    size_t n = json_is_array(v) ? json_array_size(v)
                                : tr_dsl_utf8_count(json_string_value(v),
                                                    json_string_length(v));
    if (i < 0) i += (json_int_t)n;
    if (i < 0 || (size_t)i >= n)
        return tr_errf(err, cap, TR_ERR_NOT_FOUND,
                       "index %" JSON_INTEGER_FORMAT " is out of range (the %s has %zu %s)",
                       json_integer_value(index), json_is_array(v) ? "list" : "string", n,
                       json_is_array(v) ? "items" : "characters");
    if (json_is_array(v)) {
        *out = tr_dsl_ref(json_array_get(v, (size_t)i));
        return TR_OK;
    }
    const char *s = json_string_value(v);
    size_t len = json_string_length(v);
    size_t a = utf8_offset(s, len, (size_t)i), b = utf8_offset(s, len, (size_t)i + 1);
    *out = json_stringn_nocheck(s + a, b - a);
    return *out ? TR_OK : TR_ERR_NOMEM;
}
