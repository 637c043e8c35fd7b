/* sbuf.c — see sbuf_internal.h. */
#include "app/server/sbuf_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int reserve(tr_sbuf *b, size_t extra) {
    if (extra > (size_t)-1 - b->len - 1) return -1;
    size_t need = b->len + extra + 1;
    if (b->limit && need - 1 > b->limit) return -1;
    if (need <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < need) cap = cap > (size_t)-1 / 2 ? need : cap * 2;
    char *p = realloc(b->data, cap);
    if (!p) return -1;
    b->data = p;
    b->cap = cap;
    return 0;
}

int tr_sbuf_append(tr_sbuf *b, const void *p, size_t n) {
    if (reserve(b, n)) return -1;
    if (n) memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = '\0';
    return 0;
}

int tr_sbuf_puts(tr_sbuf *b, const char *s) { return tr_sbuf_append(b, s, strlen(s)); }

int tr_sbuf_printf(tr_sbuf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char small[256];
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0) return -1;
    if ((size_t)n < sizeof small) return tr_sbuf_append(b, small, (size_t)n);
    if (reserve(b, (size_t)n)) return -1;
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
    return 0;
}

int tr_sbuf_json_str(tr_sbuf *b, const char *s, size_t n) {
    size_t len0 = b->len;
    size_t run = 0; /* bytes copied as they are, flushed in one append */
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c != '"' && c != '\\') {
            run++;
            continue;
        }
        if (run && tr_sbuf_append(b, s + i - run, run)) goto fail;
        run = 0;
        char esc[8];
        const char *e = esc;
        switch (c) {
        case '"': e = "\\\""; break;
        case '\\': e = "\\\\"; break;
        case '\n': e = "\\n"; break;
        case '\r': e = "\\r"; break;
        case '\t': e = "\\t"; break;
        default: snprintf(esc, sizeof esc, "\\u%04x", c);
        }
        if (tr_sbuf_puts(b, e)) goto fail;
    }
    if (run && tr_sbuf_append(b, s + n - run, run)) goto fail;
    return 0;
fail:
    b->len = len0;
    if (b->data) b->data[len0] = '\0';
    return -1;
}

char *tr_sbuf_take(tr_sbuf *b, size_t *len) {
    char *p = b->data;
    if (len) *len = b->len;
    b->data = NULL;
    b->len = b->cap = 0;
    return p;
}

void tr_sbuf_reset(tr_sbuf *b) {
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}
