/* script.c — loading and parsing a script, the limits' defaults, and
 * rendering an error with its source line and a caret. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/utf8.h"
#include "base/util.h"
#include "frontend/ast_internal.h"
#include "frontend/dsl.h"
#include "frontend/parser_internal.h"
#include "frontend/value.h"

void tr_dsl_limits_default(tr_dsl_limits *l) {
    l->max_script_bytes = (size_t)1 << 20;
    l->max_ast_bytes = (size_t)64 << 20;
    l->max_nesting = 100;
    l->max_call_depth = 64;
    l->max_loop_iterations = 100000;
    l->max_steps = 10000000;
    l->max_string_bytes = (size_t)16 << 20;
    l->max_prompt_bytes = (size_t)16 << 20;
    l->max_fork_width = 64;
    l->max_tasks = 256;
    l->max_file_bytes = (size_t)64 << 20;
}

/* Line and column (1-based, bytes) of offset in src. */
static void locate(const char *src, size_t len, uint64_t off, int *line, int *col) {
    if (off > len) off = len;
    int l = 1;
    size_t start = 0;
    for (size_t i = 0; i < off; i++)
        if (src[i] == '\n') {
            l++;
            start = i + 1;
        }
    *line = l;
    *col = (int)(off - start) + 1;
}

static void set_error(tr_dsl_error *err, const tr_dsl_script *s, tr_status code,
                      bool located, uint64_t off, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
static void set_error(tr_dsl_error *err, const tr_dsl_script *s, tr_status code,
                      bool located, uint64_t off, const char *fmt, ...) {
    if (!err) return;
    memset(err, 0, sizeof *err);
    err->code = code;
    err->has_location = located;
    err->offset = off;
    if (located && s) locate(s->src, s->len, off, &err->line, &err->column);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
}

void tr_dsl_script_free(tr_dsl_script *s) {
    if (!s) return;
    for (int32_t i = 0; i < s->n_consts; i++) tr_dsl_unref(s->consts[i]);
    free(s->consts);
    tr_arena_deinit(&s->arena);
    free(s->src);
    free(s->name);
    free(s->dir);
    free(s);
}

tr_status tr_dsl_script_parse(const char *name, const char *dir, const char *src,
                              size_t len, const tr_dsl_limits *lim, tr_dsl_script **out,
                              tr_dsl_error *err) {
    tr_dsl_limits defaults;
    if (!lim) {
        tr_dsl_limits_default(&defaults);
        lim = &defaults;
    }
    if (err) memset(err, 0, sizeof *err);
    if (!src && len) {
        set_error(err, NULL, TR_ERR_INVALID_ARG, false, 0, "no source");
        return TR_ERR_INVALID_ARG;
    }
    if (len > lim->max_script_bytes || len >= UINT32_MAX) {
        set_error(err, NULL, TR_ERR_LIMIT, false, 0,
                  "the script has %zu bytes, over the limit max_script_bytes (%zu)", len,
                  lim->max_script_bytes);
        return TR_ERR_LIMIT;
    }
    tr_dsl_script *s = calloc(1, sizeof *s);
    if (!s) goto nomem;
    s->name = strdup(name ? name : "<script>");
    s->dir = strdup(dir ? dir : ".");
    s->src = malloc(len + 1);
    if (!s->name || !s->dir || !s->src) goto nomem;
    if (len) memcpy(s->src, src, len);
    s->src[len] = 0;
    s->len = len;
    /* blocks of 4 KiB doubling up to 1 MiB; max_ast_bytes 0: no budget */
    tr_arena_init(&s->arena, 4096, (size_t)1 << 20,
                  lim->max_ast_bytes ? lim->max_ast_bytes : UINT64_MAX);
    size_t bad = tr_utf8_invalid_at(s->src, len);
    if (bad != len) {
        set_error(err, s, TR_ERR_FORMAT, true, bad, "the script is not valid UTF-8 here");
        tr_dsl_script_free(s);
        return TR_ERR_FORMAT;
    }
    if (memchr(s->src, 0, len)) {
        size_t at = (size_t)((char *)memchr(s->src, 0, len) - s->src);
        set_error(err, s, TR_ERR_FORMAT, true, at, "a NUL byte in the script");
        tr_dsl_script_free(s);
        return TR_ERR_FORMAT;
    }
    tr_diag d = {0};
    tr_status st = tr_dsl_parse(s, lim, &d);
    if (st != TR_OK) {
        set_error(err, s, st, true, d.offset, "%s",
                  d.message[0] ? d.message : tr_status_message(st));
        tr_dsl_script_free(s);
        return st;
    }
    *out = s;
    return TR_OK;
nomem:
    if (s) {
        free(s->name);
        free(s->dir);
        free(s->src);
        free(s);
    }
    set_error(err, NULL, TR_ERR_NOMEM, false, 0, "out of memory");
    return TR_ERR_NOMEM;
}

tr_status tr_dsl_read_source(const char *path, size_t max_bytes, char **out, size_t *len,
                            tr_dsl_error *err) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        set_error(err, NULL, TR_ERR_IO, false, 0, "cannot open %s: %s", path, strerror(errno));
        return TR_ERR_IO;
    }
    char *buf = NULL;
    size_t n = 0, cap = 0;
    tr_status st = TR_OK;
    for (;;) {
        if (n == cap) {
            cap = cap ? cap * 2 : 65536;
            char *nb = realloc(buf, cap + 1);
            if (!nb) {
                set_error(err, NULL, TR_ERR_NOMEM, false, 0, "out of memory");
                st = TR_ERR_NOMEM;
                break;
            }
            buf = nb;
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (n > max_bytes) {
            set_error(err, NULL, TR_ERR_LIMIT, false, 0,
                      "%s is larger than the limit max_script_bytes (%zu)", path, max_bytes);
            st = TR_ERR_LIMIT;
            break;
        }
        if (got == 0) {
            if (ferror(f)) {
                set_error(err, NULL, TR_ERR_IO, false, 0, "cannot read %s", path);
                st = TR_ERR_IO;
            }
            break;
        }
    }
    fclose(f);
    if (st != TR_OK) {
        free(buf);
        return st;
    }
    if (!buf && !(buf = malloc(1))) {
        set_error(err, NULL, TR_ERR_NOMEM, false, 0, "out of memory");
        return TR_ERR_NOMEM;
    }
    buf[n] = 0;
    *out = buf;
    *len = n;
    return TR_OK;
}

void tr_dsl_script_dir(const char *path, char *dir, size_t cap) {
    const char *slash = strrchr(path, '/');
    if (slash && (size_t)(slash - path) < cap) {
        size_t n = slash == path ? 1 : (size_t)(slash - path);
        memcpy(dir, path, n);
        dir[n] = 0;
    } else {
        snprintf(dir, cap, ".");
    }
}

tr_status tr_dsl_script_load(const char *path, const tr_dsl_limits *lim,
                             tr_dsl_script **out, tr_dsl_error *err) {
    tr_dsl_limits defaults;
    if (!lim) {
        tr_dsl_limits_default(&defaults);
        lim = &defaults;
    }
    char *src;
    size_t len;
    tr_status st = tr_dsl_read_source(path, lim->max_script_bytes, &src, &len, err);
    if (st != TR_OK) return st;
    char dir[4096];
    tr_dsl_script_dir(path, dir, sizeof dir);
    st = tr_dsl_script_parse(path, dir, src, len, lim, out, err);
    free(src);
    return st;
}

const char *tr_dsl_script_name(const tr_dsl_script *s) { return s->name; }

bool tr_dsl_script_has_fn(const tr_dsl_script *s, const char *name) {
    for (int32_t i = 0; i < s->n_fns; i++)
        if (strcmp(s->fns[i].name, name) == 0) return true;
    return false;
}

const char *tr_dsl_script_default_fn(const tr_dsl_script *s) {
    if (tr_dsl_script_has_fn(s, "main")) return "main";
    return s->n_fns == 1 ? s->fns[0].name : NULL;
}

static void put(char *buf, size_t cap, size_t *w, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void put(char *buf, size_t cap, size_t *w, const char *fmt, ...) {
    if (*w >= cap) return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf + *w, cap - *w, fmt, ap);
    va_end(ap);
    if (n > 0) *w = TR_MIN(cap - 1, *w + (size_t)n);
}

char *tr_dsl_error_format(const tr_dsl_script *s, const tr_dsl_error *e, char *buf,
                          size_t cap) {
    return tr_dsl_error_format_src(s ? s->name : NULL, s ? s->src : NULL, s ? s->len : 0, e,
                                   buf, cap);
}

char *tr_dsl_error_format_src(const char *name, const char *src, size_t len,
                              const tr_dsl_error *e, char *buf, size_t cap) {
    if (!cap) return buf;
    buf[0] = 0;
    size_t w = 0;
    if (!name) name = "trellis run";
    if (e->has_location && src) {
        put(buf, cap, &w, "%s:%d:%d: error: %s\n", name, e->line, e->column, e->message);
        size_t off = e->offset > len ? len : (size_t)e->offset;
        size_t a = off, b = off;
        while (a > 0 && src[a - 1] != '\n') a--;
        while (b < len && src[b] != '\n') b++;
        size_t shown = TR_MIN(b - a, (size_t)240);
        put(buf, cap, &w, "%5d | %.*s\n      | ", e->line, (int)shown, src + a);
        /* one space per character before the spot (tabs stay tabs) so the
         * caret lines up under it */
        for (size_t i = a; i < off && i < a + shown; i++)
            if (((unsigned char)src[i] & 0xC0) != 0x80)
                put(buf, cap, &w, "%c", src[i] == '\t' ? '\t' : ' ');
        put(buf, cap, &w, "^\n");
    } else if (e->has_location) {
        put(buf, cap, &w, "%s:%d:%d: error: %s\n", name, e->line, e->column, e->message);
    } else {
        put(buf, cap, &w, "%s: error: %s\n", name, e->message);
    }
    if (e->trace[0]) put(buf, cap, &w, "%s", e->trace);
    return buf;
}
