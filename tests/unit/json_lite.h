/* json_lite.h — a small JSON reader for the reference data of the
 * model-core tests (tests/data/model/ JSON files), which must build with no
 * library but libc (TRELLIS_CORE_ONLY; see harness.h). The rest of the
 * project reads JSON with jansson.
 *
 * jl_parse builds a tree of jl_value nodes from trusted, checked-in test
 * data: it validates the syntax and fails cleanly (NULL) on a malformed
 * file, but keeps \u escapes outside ASCII as '?', since the reference
 * files only need them in prompts the tests do not read. Numbers are
 * doubles (exact for the token ids and counts the tests read).
 * Ownership: jl_free frees a tree; lookups return borrowed nodes.
 */
#ifndef TR_TESTS_UNIT_JSON_LITE_H
#define TR_TESTS_UNIT_JSON_LITE_H

#include <ctype.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum { JL_NULL, JL_BOOL, JL_NUM, JL_STR, JL_ARR, JL_OBJ } jl_kind;

typedef struct jl_value {
    jl_kind kind;
    double num;              /* JL_NUM, JL_BOOL (0/1) */
    char *str;               /* JL_STR */
    struct jl_value **items; /* JL_ARR, JL_OBJ (values) */
    char **keys;             /* JL_OBJ */
    size_t n;
} jl_value;

static inline void jl_free(jl_value *v) {
    if (!v) return;
    for (size_t i = 0; i < v->n; i++) {
        jl_free(v->items[i]);
        if (v->keys) free(v->keys[i]);
    }
    free(v->items);
    free(v->keys);
    free(v->str);
    free(v);
}

typedef struct jl_parser {
    const char *p, *end;
    int depth;
} jl_parser;

static inline void jl_ws(jl_parser *ps) {
    while (ps->p < ps->end && isspace((unsigned char)*ps->p)) ps->p++;
}

static jl_value *jl_value_parse(jl_parser *ps);

static inline char *jl_string_parse(jl_parser *ps) {
    if (ps->p >= ps->end || *ps->p != '"') return NULL;
    ps->p++;
    size_t cap = 16, n = 0;
    char *s = malloc(cap);
    while (s && ps->p < ps->end && *ps->p != '"') {
        char c = *ps->p++;
        if (c == '\\') {
            if (ps->p >= ps->end) break;
            switch (*ps->p++) {
            case '"': c = '"'; break;
            case '\\': c = '\\'; break;
            case '/': c = '/'; break;
            case 'b': c = '\b'; break;
            case 'f': c = '\f'; break;
            case 'n': c = '\n'; break;
            case 'r': c = '\r'; break;
            case 't': c = '\t'; break;
            case 'u': {
                if (ps->end - ps->p < 4) goto bad;
                char hex[5] = {ps->p[0], ps->p[1], ps->p[2], ps->p[3], 0};
                unsigned long cp = strtoul(hex, NULL, 16);
                ps->p += 4;
                c = cp < 0x80 ? (char)cp : '?';
                break;
            }
            default: goto bad;
            }
        }
        if (n + 2 > cap) {
            char *t = realloc(s, cap *= 2);
            if (!t) break;
            s = t;
        }
        s[n++] = c;
    }
    if (!s || ps->p >= ps->end || *ps->p != '"') {
    bad:
        free(s);
        return NULL;
    }
    ps->p++;
    s[n] = 0;
    return s;
}

static inline jl_value *jl_push(jl_value *v, jl_value *item, char *key) {
    jl_value **items = realloc(v->items, (v->n + 1) * sizeof *items);
    if (!items) return NULL;
    v->items = items;
    if (v->kind == JL_OBJ) {
        char **keys = realloc(v->keys, (v->n + 1) * sizeof *keys);
        if (!keys) return NULL;
        v->keys = keys;
        v->keys[v->n] = key;
    }
    v->items[v->n++] = item;
    return v;
}

static inline jl_value *jl_container_parse(jl_parser *ps, jl_value *v, char close) {
    ps->p++;
    jl_ws(ps);
    if (ps->p < ps->end && *ps->p == close) {
        ps->p++;
        return v;
    }
    for (;;) {
        char *key = NULL;
        if (v->kind == JL_OBJ) {
            jl_ws(ps);
            key = jl_string_parse(ps);
            jl_ws(ps);
            if (!key || ps->p >= ps->end || *ps->p++ != ':') {
                free(key);
                return NULL;
            }
        }
        jl_value *item = jl_value_parse(ps);
        if (!item || !jl_push(v, item, key)) {
            jl_free(item);
            free(key);
            return NULL;
        }
        jl_ws(ps);
        if (ps->p < ps->end && *ps->p == ',') {
            ps->p++;
            continue;
        }
        if (ps->p < ps->end && *ps->p == close) {
            ps->p++;
            return v;
        }
        return NULL;
    }
}

static jl_value *jl_value_parse(jl_parser *ps) {
    jl_ws(ps);
    if (ps->p >= ps->end || ++ps->depth > 64) return NULL;
    jl_value *v = calloc(1, sizeof *v);
    if (!v) return NULL;
    char c = *ps->p;
    bool ok = true;
    if (c == '{' || c == '[') {
        v->kind = c == '{' ? JL_OBJ : JL_ARR;
        ok = jl_container_parse(ps, v, c == '{' ? '}' : ']') != NULL;
    } else if (c == '"') {
        v->kind = JL_STR;
        ok = (v->str = jl_string_parse(ps)) != NULL;
    } else if (ps->end - ps->p >= 4 && !strncmp(ps->p, "true", 4)) {
        v->kind = JL_BOOL, v->num = 1, ps->p += 4;
    } else if (ps->end - ps->p >= 5 && !strncmp(ps->p, "false", 5)) {
        v->kind = JL_BOOL, ps->p += 5;
    } else if (ps->end - ps->p >= 4 && !strncmp(ps->p, "null", 4)) {
        v->kind = JL_NULL, ps->p += 4;
    } else {
        char *e;
        v->kind = JL_NUM;
        v->num = strtod(ps->p, &e); /* the file is NUL-terminated */
        ok = e != ps->p && e <= ps->end;
        ps->p = e;
    }
    ps->depth--;
    if (!ok) {
        jl_free(v);
        return NULL;
    }
    return v;
}

/* Parses the whole file; NULL if it cannot be read or is not JSON. */
static inline jl_value *jl_load_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = len >= 0 ? malloc((size_t)len + 1) : NULL;
    jl_value *v = NULL;
    if (buf && fread(buf, 1, (size_t)len, f) == (size_t)len) {
        buf[len] = 0;
        jl_parser ps = {buf, buf + len, 0};
        v = jl_value_parse(&ps);
        jl_ws(&ps);
        if (v && ps.p != ps.end) {
            jl_free(v);
            v = NULL;
        }
    }
    free(buf);
    fclose(f);
    return v;
}

/* Borrowed lookups; NULL when absent or of another kind. */
static inline jl_value *jl_get(const jl_value *o, const char *key) {
    if (!o || o->kind != JL_OBJ) return NULL;
    for (size_t i = 0; i < o->n; i++)
        if (!strcmp(o->keys[i], key)) return o->items[i];
    return NULL;
}
static inline jl_value *jl_at(const jl_value *a, size_t i) {
    return a && a->kind == JL_ARR && i < a->n ? a->items[i] : NULL;
}
static inline size_t jl_len(const jl_value *a) { return a && a->kind == JL_ARR ? a->n : 0; }
static inline double jl_num(const jl_value *v) { return v && v->kind == JL_NUM ? v->num : 0; }
static inline const char *jl_str(const jl_value *v) {
    return v && v->kind == JL_STR ? v->str : NULL;
}

#endif
