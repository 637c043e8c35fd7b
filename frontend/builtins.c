/* builtins.c — see builtins_internal.h. Each builtin checks its argument types and
 * says which argument is wrong and why. */
#include "frontend/builtins_internal.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/utf8.h"
#include "base/util.h"
#include "frontend/value.h"

static tr_status fail(tr_dsl_builtin_env *env, tr_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static tr_status fail(tr_dsl_builtin_env *env, tr_status code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(env->err, env->err_cap, fmt, ap);
    va_end(ap);
    return code;
}

static tr_status need(tr_dsl_builtin_env *env, const char *fn, int32_t i, const json_t *v,
                      json_type t, const char *what) {
    bool ok = json_typeof(v) == t || (t == JSON_REAL && json_is_number(v)) ||
              (t == JSON_TRUE && json_is_boolean(v));
    if (ok) return TR_OK;
    return fail(env, TR_ERR_INVALID_ARG, "%s: argument %d must be %s, not %s", fn, i + 1,
                what, tr_dsl_type_name(v));
}

#define NEED(i, t, what) \
    do { tr_status s_ = need(env, name, i, args[i], t, what); if (s_) return s_; } while (0)

static tr_status ret(json_t *v, json_t **out) {
    *out = v;
    return v ? TR_OK : TR_ERR_NOMEM;
}

static tr_status ret_str(tr_dsl_builtin_env *env, const char *s, size_t n, json_t **out) {
    if (n > env->max_string_bytes)
        return fail(env, TR_ERR_LIMIT, "string of %zu bytes over max_string_bytes (%zu)", n,
                    env->max_string_bytes);
    return ret(json_stringn_nocheck(s, n), out);
}

static tr_status b_len(tr_dsl_builtin_env *env, json_t *const *args, int32_t n, json_t **out) {
    const json_t *v = args[0];
    if (json_is_string(v))
        return ret(json_integer((json_int_t)tr_dsl_utf8_count(json_string_value(v),
                                                              json_string_length(v))),
                   out);
    if (json_is_array(v)) return ret(json_integer((json_int_t)json_array_size(v)), out);
    if (json_is_object(v)) return ret(json_integer((json_int_t)json_object_size(v)), out);
    return fail(env, TR_ERR_INVALID_ARG, "len: needs a string, list or object, not %s",
                tr_dsl_type_name(v));
}

static tr_status b_str(tr_dsl_builtin_env *env, json_t *const *args, int32_t n, json_t **out) {
    if (json_is_string(args[0])) return ret(tr_dsl_ref(args[0]), out);
    tr_dsl_buf b = {0};
    tr_status s = tr_dsl_value_append_text(&b, args[0]);
    if (s == TR_OK) s = ret_str(env, b.p ? b.p : "", b.len, out);
    tr_dsl_buf_free(&b);
    return s;
}

static tr_status b_json(tr_dsl_builtin_env *env, json_t *const *args, int32_t n, json_t **out) {
    char *j = tr_dsl_value_json(args[0]);
    if (!j) return TR_ERR_NOMEM;
    tr_status s = ret_str(env, j, strlen(j), out);
    free(j);
    return s;
}

static tr_status b_parse_json(tr_dsl_builtin_env *env, json_t *const *args, int32_t n,
                              json_t **out) {
    const char *name = "parse_json";
    NEED(0, JSON_STRING, "a string");
    json_error_t je;
    json_t *v = json_loadb(json_string_value(args[0]), json_string_length(args[0]),
                           JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
    if (!v)
        return fail(env, TR_ERR_FORMAT, "parse_json: not JSON: %s (line %d, column %d)",
                    je.text, je.line, je.column);
    return ret(v, out);
}

static bool ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

/* One JSON value per non-blank line. */
static tr_status load_jsonl(tr_dsl_builtin_env *env, const char *path, const char *text,
                            size_t len, json_t **out) {
    json_t *list = json_array();
    if (!list) return TR_ERR_NOMEM;
    size_t pos = 0;
    int line = 0;
    while (pos < len) {
        line++;
        const char *nl = memchr(text + pos, '\n', len - pos);
        size_t end = nl ? (size_t)(nl - text) : len;
        size_t a = pos, b = end;
        while (a < b && isspace((unsigned char)text[a])) a++;
        while (b > a && isspace((unsigned char)text[b - 1])) b--;
        if (b > a) {
            json_error_t je;
            json_t *v = json_loadb(text + a, b - a, JSON_DECODE_ANY, &je);
            if (!v) {
                tr_dsl_unref(list);
                return fail(env, TR_ERR_FORMAT, "load: %s line %d is not JSON: %s (column %d)",
                            path, line, je.text, je.column);
            }
            if (json_array_append_new(list, v)) {
                tr_dsl_unref(list);
                return TR_ERR_NOMEM;
            }
        }
        pos = end + 1;
    }
    *out = list;
    return TR_OK;
}

static tr_status b_load(tr_dsl_builtin_env *env, json_t *const *args, int32_t n, json_t **out) {
    const char *name = "load";
    NEED(0, JSON_STRING, "a file path");
    if (env->max_file_bytes == 0)
        return fail(env, TR_ERR_UNSUPPORTED, "load: reading files is disabled here");
    const char *rel = json_string_value(args[0]);
    if (strlen(rel) != json_string_length(args[0]) || !*rel)
        return fail(env, TR_ERR_INVALID_ARG, "load: bad file path");
    char path[4096];
    int w = rel[0] == '/' ? snprintf(path, sizeof path, "%s", rel)
                          : snprintf(path, sizeof path, "%s/%s", env->dir ? env->dir : ".", rel);
    if (w < 0 || (size_t)w >= sizeof path)
        return fail(env, TR_ERR_INVALID_ARG, "load: path too long");
    FILE *f = fopen(path, "rb");
    if (!f) return fail(env, TR_ERR_IO, "load: cannot open %s: %s", path, strerror(errno));
    tr_dsl_buf b = {0};
    char chunk[65536];
    size_t got;
    tr_status s = TR_OK;
    while ((got = fread(chunk, 1, sizeof chunk, f)) > 0) {
        if (b.len + got > env->max_file_bytes) {
            s = fail(env, TR_ERR_LIMIT, "load: %s is larger than max_file_bytes (%zu)", path,
                     env->max_file_bytes);
            break;
        }
        if (!tr_dsl_buf_put(&b, chunk, got)) {
            s = TR_ERR_NOMEM;
            break;
        }
    }
    if (s == TR_OK && ferror(f)) s = fail(env, TR_ERR_IO, "load: cannot read %s", path);
    fclose(f);
    const char *text = b.p ? b.p : "";
    if (s == TR_OK) {
        size_t bad = tr_utf8_invalid_at(text, b.len);
        if (bad != b.len)
            s = fail(env, TR_ERR_FORMAT, "load: %s is not valid UTF-8 (byte %zu)", path, bad);
    }
    if (s == TR_OK) {
        if (ends_with(path, ".jsonl")) {
            s = load_jsonl(env, path, text, b.len, out);
        } else if (ends_with(path, ".json")) {
            json_error_t je;
            json_t *v = json_loadb(text, b.len, JSON_DECODE_ANY, &je);
            if (!v)
                s = fail(env, TR_ERR_FORMAT, "load: %s is not JSON: %s (line %d, column %d)",
                         path, je.text, je.line, je.column);
            else
                *out = v;
        } else {
            s = ret_str(env, text, b.len, out);
        }
    }
    tr_dsl_buf_free(&b);
    return s;
}

static tr_status b_range(tr_dsl_builtin_env *env, json_t *const *args, int32_t n, json_t **out) {
    const char *name = "range";
    NEED(0, JSON_INTEGER, "an integer");
    if (n > 1) NEED(1, JSON_INTEGER, "an integer");
    json_int_t a = n > 1 ? json_integer_value(args[0]) : 0;
    json_int_t b = n > 1 ? json_integer_value(args[1]) : json_integer_value(args[0]);
    if (b > a && (uint64_t)(b - a) > (uint64_t)env->max_items)
        return fail(env, TR_ERR_LIMIT, "range: %" JSON_INTEGER_FORMAT
                                       " items, over the limit of %lld",
                    b - a, (long long)env->max_items);
    json_t *list = json_array();
    if (!list) return TR_ERR_NOMEM;
    for (json_int_t i = a; i < b; i++)
        if (json_array_append_new(list, json_integer(i))) {
            tr_dsl_unref(list);
            return TR_ERR_NOMEM;
        }
    *out = list;
    return TR_OK;
}

static tr_status b_trim(tr_dsl_builtin_env *env, json_t *const *args, int32_t n, json_t **out) {
    const char *name = "trim";
    NEED(0, JSON_STRING, "a string");
    const char *s = json_string_value(args[0]);
    size_t a = 0, b = json_string_length(args[0]);
    while (a < b && isspace((unsigned char)s[a])) a++;
    while (b > a && isspace((unsigned char)s[b - 1])) b--;
    return ret_str(env, s + a, b - a, out);
}

static tr_status change_case(tr_dsl_builtin_env *env, const char *name, json_t *const *args,
                             bool upper, json_t **out) {
    NEED(0, JSON_STRING, "a string");
    size_t len = json_string_length(args[0]);
    char *t = malloc(len + 1);
    if (!t) return TR_ERR_NOMEM;
    const char *s = json_string_value(args[0]);
    for (size_t i = 0; i < len; i++) /* ASCII letters only */
        t[i] = (char)(upper ? toupper((unsigned char)s[i]) : tolower((unsigned char)s[i]));
    tr_status st = ret_str(env, t, len, out);
    free(t);
    return st;
}

static tr_status b_lower(tr_dsl_builtin_env *env, json_t *const *args, int32_t n, json_t **out) {
    return change_case(env, "lower", args, false, out);
}
static tr_status b_upper(tr_dsl_builtin_env *env, json_t *const *args, int32_t n, json_t **out) {
    return change_case(env, "upper", args, true, out);
}

static tr_status b_split(tr_dsl_builtin_env *env, json_t *const *args, int32_t n, json_t **out) {
    const char *name = "split";
    NEED(0, JSON_STRING, "a string");
    NEED(1, JSON_STRING, "a separator string");
    const char *s = json_string_value(args[0]), *sep = json_string_value(args[1]);
    size_t len = json_string_length(args[0]), sl = json_string_length(args[1]);
    if (sl == 0) return fail(env, TR_ERR_INVALID_ARG, "split: empty separator");
    json_t *list = json_array();
    if (!list) return TR_ERR_NOMEM;
    size_t pos = 0;
    for (;;) {
        if ((int64_t)json_array_size(list) >= env->max_items) {
            tr_dsl_unref(list);
            return fail(env, TR_ERR_LIMIT, "split: more than %lld pieces",
                        (long long)env->max_items);
        }
        const char *hit = memmem(s + pos, len - pos, sep, sl);
        size_t end = hit ? (size_t)(hit - s) : len;
        if (json_array_append_new(list, json_stringn_nocheck(s + pos, end - pos))) {
            tr_dsl_unref(list);
            return TR_ERR_NOMEM;
        }
        if (!hit) break;
        pos = end + sl;
    }
    *out = list;
    return TR_OK;
}

static tr_status b_join(tr_dsl_builtin_env *env, json_t *const *args, int32_t n, json_t **out) {
    const char *name = "join";
    NEED(0, JSON_ARRAY, "a list");
    if (n > 1) NEED(1, JSON_STRING, "a separator string");
    const char *sep = n > 1 ? json_string_value(args[1]) : "";
    size_t sl = n > 1 ? json_string_length(args[1]) : 0;
    tr_dsl_buf b = {0};
    tr_status s = TR_OK;
    if (!tr_dsl_buf_put(&b, "", 0)) s = TR_ERR_NOMEM;
    for (size_t i = 0; s == TR_OK && i < json_array_size(args[0]); i++) {
        if (i && !tr_dsl_buf_put(&b, sep, sl)) s = TR_ERR_NOMEM;
        if (s == TR_OK) s = tr_dsl_value_append_text(&b, json_array_get(args[0], i));
        if (s == TR_OK && b.len > env->max_string_bytes)
            s = fail(env, TR_ERR_LIMIT, "join: result over max_string_bytes (%zu)",
                     env->max_string_bytes);
    }
    if (s == TR_OK) s = ret_str(env, b.p, b.len, out);
    tr_dsl_buf_free(&b);
    return s;
}

static tr_status b_replace(tr_dsl_builtin_env *env, json_t *const *args, int32_t n,
                           json_t **out) {
    const char *name = "replace";
    NEED(0, JSON_STRING, "a string");
    NEED(1, JSON_STRING, "the text to replace");
    NEED(2, JSON_STRING, "the replacement");
    const char *s = json_string_value(args[0]), *old = json_string_value(args[1]);
    size_t len = json_string_length(args[0]), ol = json_string_length(args[1]);
    if (ol == 0) return fail(env, TR_ERR_INVALID_ARG, "replace: empty text to replace");
    tr_dsl_buf b = {0};
    tr_status st = tr_dsl_buf_put(&b, "", 0) ? TR_OK : TR_ERR_NOMEM;
    size_t pos = 0;
    while (st == TR_OK) {
        const char *hit = memmem(s + pos, len - pos, old, ol);
        size_t end = hit ? (size_t)(hit - s) : len;
        if (!tr_dsl_buf_put(&b, s + pos, end - pos)) st = TR_ERR_NOMEM;
        if (!hit || st) break;
        if (!tr_dsl_buf_put(&b, json_string_value(args[2]), json_string_length(args[2])))
            st = TR_ERR_NOMEM;
        if (b.len > env->max_string_bytes)
            st = fail(env, TR_ERR_LIMIT, "replace: result over max_string_bytes (%zu)",
                      env->max_string_bytes);
        pos = end + ol;
    }
    if (st == TR_OK) st = ret_str(env, b.p, b.len, out);
    tr_dsl_buf_free(&b);
    return st;
}

static tr_status affix(tr_dsl_builtin_env *env, const char *name, json_t *const *args,
                       bool start, json_t **out) {
    NEED(0, JSON_STRING, "a string");
    NEED(1, JSON_STRING, "a string");
    size_t a = json_string_length(args[0]), b = json_string_length(args[1]);
    const char *s = json_string_value(args[0]), *x = json_string_value(args[1]);
    bool r = a >= b && memcmp(start ? s : s + a - b, x, b) == 0;
    return ret(json_boolean(r), out);
}
static tr_status b_starts_with(tr_dsl_builtin_env *env, json_t *const *args, int32_t n,
                               json_t **out) {
    return affix(env, "starts_with", args, true, out);
}
static tr_status b_ends_with(tr_dsl_builtin_env *env, json_t *const *args, int32_t n,
                             json_t **out) {
    return affix(env, "ends_with", args, false, out);
}

/* int("42"), int(3.9) == 3, int(true) == 1 */
static tr_status b_int(tr_dsl_builtin_env *env, json_t *const *args, int32_t n, json_t **out) {
    const json_t *v = args[0];
    if (json_is_integer(v)) return ret(tr_dsl_ref((json_t *)v), out);
    if (json_is_real(v)) {
        double d = json_real_value(v);
        if (!(d > -9.2e18 && d < 9.2e18))
            return fail(env, TR_ERR_OVERFLOW, "int: %g does not fit an integer", d);
        return ret(json_integer((json_int_t)d), out);
    }
    if (json_is_boolean(v)) return ret(json_integer(json_is_true(v)), out);
    if (json_is_string(v)) {
        const char *s = json_string_value(v);
        while (isspace((unsigned char)*s)) s++;
        char *end;
        errno = 0;
        long long x = strtoll(s, &end, 10);
        while (isspace((unsigned char)*end)) end++;
        if (end == s || *end || errno)
            return fail(env, TR_ERR_FORMAT, "int: \"%.80s\" is not an integer",
                        json_string_value(v));
        return ret(json_integer(x), out);
    }
    return fail(env, TR_ERR_INVALID_ARG, "int: cannot convert %s", tr_dsl_type_name(v));
}

static tr_status b_float(tr_dsl_builtin_env *env, json_t *const *args, int32_t n,
                         json_t **out) {
    const json_t *v = args[0];
    if (json_is_number(v)) return ret(json_real(json_number_value(v)), out);
    if (json_is_string(v)) {
        const char *s = json_string_value(v);
        char *end;
        errno = 0;
        double d = strtod(s, &end);
        while (isspace((unsigned char)*end)) end++;
        if (end == s || *end || errno || !isfinite(d))
            return fail(env, TR_ERR_FORMAT, "float: \"%.80s\" is not a number", s);
        return ret(json_real(d), out);
    }
    return fail(env, TR_ERR_INVALID_ARG, "float: cannot convert %s", tr_dsl_type_name(v));
}

static tr_status b_keys(tr_dsl_builtin_env *env, json_t *const *args, int32_t n, json_t **out) {
    const char *name = "keys";
    NEED(0, JSON_OBJECT, "an object");
    json_t *list = json_array();
    if (!list) return TR_ERR_NOMEM;
    const char *k;
    size_t kl;
    json_t *v;
    json_object_keylen_foreach(args[0], k, kl, v) {
        if (json_array_append_new(list, json_stringn_nocheck(k, kl))) {
            tr_dsl_unref(list);
            return TR_ERR_NOMEM;
        }
    }
    *out = list;
    return TR_OK;
}

/* min, max, sum, argmax over a list of numbers */
static tr_status fold(tr_dsl_builtin_env *env, const char *name, json_t *const *args,
                      int which, json_t **out) {
    NEED(0, JSON_ARRAY, "a list of numbers");
    size_t n = json_array_size(args[0]);
    if (n == 0 && which != 2)
        return fail(env, TR_ERR_INVALID_ARG, "%s: the list is empty", name);
    bool all_int = true;
    size_t best = 0;
    for (size_t i = 0; i < n; i++) {
        json_t *x = json_array_get(args[0], i);
        if (!json_is_number(x))
            return fail(env, TR_ERR_INVALID_ARG, "%s: item %zu is %s, not a number", name, i,
                        tr_dsl_type_name(x));
        if (!json_is_integer(x)) all_int = false;
        double xv = json_number_value(x), bv = json_number_value(json_array_get(args[0], best));
        if ((which == 0 && xv < bv) || ((which == 1 || which == 3) && xv > bv)) best = i;
    }
    if (which == 3) return ret(json_integer((json_int_t)best), out);
    if (which != 2) return ret(tr_dsl_ref(json_array_get(args[0], best)), out);
    if (all_int) {
        json_int_t s = 0;
        for (size_t i = 0; i < n; i++)
            if (__builtin_add_overflow(s, json_integer_value(json_array_get(args[0], i)), &s))
                return fail(env, TR_ERR_OVERFLOW, "sum: integer overflow");
        return ret(json_integer(s), out);
    }
    double s = 0;
    for (size_t i = 0; i < n; i++) s += json_number_value(json_array_get(args[0], i));
    return ret(json_real(s), out);
}
static tr_status b_min(tr_dsl_builtin_env *env, json_t *const *a, int32_t n, json_t **o) {
    return fold(env, "min", a, 0, o);
}
static tr_status b_max(tr_dsl_builtin_env *env, json_t *const *a, int32_t n, json_t **o) {
    return fold(env, "max", a, 1, o);
}
static tr_status b_sum(tr_dsl_builtin_env *env, json_t *const *a, int32_t n, json_t **o) {
    return fold(env, "sum", a, 2, o);
}
static tr_status b_argmax(tr_dsl_builtin_env *env, json_t *const *a, int32_t n, json_t **o) {
    return fold(env, "argmax", a, 3, o);
}

static tr_status b_print(tr_dsl_builtin_env *env, json_t *const *args, int32_t n,
                         json_t **out) {
    tr_dsl_buf b = {0};
    tr_status s = TR_OK;
    for (int32_t i = 0; i < n && s == TR_OK; i++) {
        if (i && !tr_dsl_buf_put(&b, " ", 1)) s = TR_ERR_NOMEM;
        if (s == TR_OK) s = tr_dsl_value_append_text(&b, args[i]);
    }
    if (s == TR_OK) fprintf(stderr, "%s\n", b.p ? b.p : "");
    tr_dsl_buf_free(&b);
    if (s) return s;
    return ret(json_null(), out);
}

static const tr_dsl_builtin builtins[] = {
    {"len", 1, 1, b_len, "len(value)"},
    {"str", 1, 1, b_str, "str(value)"},
    {"json", 1, 1, b_json, "json(value)"},
    {"parse_json", 1, 1, b_parse_json, "parse_json(text)"},
    {"load", 1, 1, b_load, "load(path)"},
    {"range", 1, 2, b_range, "range(end) or range(start, end)"},
    {"trim", 1, 1, b_trim, "trim(text)"},
    {"lower", 1, 1, b_lower, "lower(text)"},
    {"upper", 1, 1, b_upper, "upper(text)"},
    {"split", 2, 2, b_split, "split(text, separator)"},
    {"join", 1, 2, b_join, "join(list, separator)"},
    {"replace", 3, 3, b_replace, "replace(text, old, new)"},
    {"starts_with", 2, 2, b_starts_with, "starts_with(text, prefix)"},
    {"ends_with", 2, 2, b_ends_with, "ends_with(text, suffix)"},
    {"int", 1, 1, b_int, "int(value)"},
    {"float", 1, 1, b_float, "float(value)"},
    {"keys", 1, 1, b_keys, "keys(object)"},
    {"min", 1, 1, b_min, "min(list)"},
    {"max", 1, 1, b_max, "max(list)"},
    {"sum", 1, 1, b_sum, "sum(list)"},
    {"argmax", 1, 1, b_argmax, "argmax(list)"},
    {"print", 0, 16, b_print, "print(values...)"},
};

int32_t tr_dsl_builtin_find(const char *name) {
    for (size_t i = 0; i < TR_ARRAY_LEN(builtins); i++)
        if (strcmp(builtins[i].name, name) == 0) return (int32_t)i;
    return -1;
}

const tr_dsl_builtin *tr_dsl_builtin_get(int32_t index) {
    return index >= 0 && (size_t)index < TR_ARRAY_LEN(builtins) ? &builtins[index] : NULL;
}
