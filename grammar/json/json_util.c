/* json_util.c — text buffers and small helpers of the JSON Schema
 * compiler (json_internal.h).
 *
 * Layering: grammar/json (json_internal.h). A js_buf grows on the heap and charges
 * every byte to the compile context's budget, so that a schema that
 * would print a gigantic grammar fails with TR_ERR_LIMIT instead of
 * exhausting memory. Single-threaded per compile.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "grammar/json/json_internal.h"

void tr_js_buf_init(js_buf *b, gcc *cc) {
    memset(b, 0, sizeof *b);
    b->cc = cc;
}

void tr_js_buf_free(js_buf *b) {
    if (b->cap) tr_gcc_refund(b->cc, b->cap);
    free(b->p);
    b->p = NULL;
    b->n = b->cap = 0;
}

static bool buf_reserve(js_buf *b, size_t extra) {
    if (b->failed) return false;
    size_t need;
    if (tr_add_overflow_size(b->n, extra, &need) ||
        tr_add_overflow_size(need, 1, &need)) {
        tr_gcc_fail(b->cc, TR_ERR_LIMIT, 0, "grammar text size overflows");
        b->failed = true;
        return false;
    }
    if (need <= b->cap) return true;
    size_t nc = b->cap ? b->cap : 256;
    while (nc < need) {
        if (nc > SIZE_MAX / 2) {
            nc = need;
            break;
        }
        nc *= 2;
    }
    if (tr_gcc_charge(b->cc, nc - b->cap)) {
        b->failed = true;
        return false;
    }
    char *q = realloc(b->p, nc);
    if (!q) {
        tr_gcc_refund(b->cc, nc - b->cap);
        tr_gcc_fail(b->cc, TR_ERR_NOMEM, 0, "out of memory while compiling");
        b->failed = true;
        return false;
    }
    b->p = q;
    b->cap = nc;
    return true;
}

/* Whether n more bytes would pass b's limit (then b is marked over). */
static bool past_limit(js_buf *b, size_t n) {
    if (b->limit && (b->over || n > b->limit - TR_MIN(b->n, b->limit))) b->over = true;
    return b->over;
}

void tr_js_buf_add(js_buf *b, const void *s, size_t n) {
    if (past_limit(b, n) || !n || !buf_reserve(b, n)) return;
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

void tr_js_buf_puts(js_buf *b, const char *s) { tr_js_buf_add(b, s, strlen(s)); }

void tr_js_buf_putc(js_buf *b, char c) { tr_js_buf_add(b, &c, 1); }

void tr_js_buf_printf(js_buf *b, const char *fmt, ...) {
    char small[256];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (k < 0) return;
    if ((size_t)k < sizeof small) {
        tr_js_buf_add(b, small, (size_t)k);
        return;
    }
    if (past_limit(b, (size_t)k) || !buf_reserve(b, (size_t)k)) return;
    va_start(ap, fmt);
    vsnprintf(b->p + b->n, (size_t)k + 1, fmt, ap);
    va_end(ap);
    b->n += (size_t)k;
}

char *tr_js_buf_dup(js_buf *b) {
    if (b->failed) return NULL;
    return tr_js_strndup(b->cc, b->p ? b->p : "", b->n);
}

char *tr_js_strndup(gcc *cc, const char *s, size_t n) {
    if (n == SIZE_MAX) return NULL;
    char *p = tr_gcc_alloc(cc, n + 1);
    if (!p) return NULL;
    if (n) memcpy(p, s, n);
    p[n] = 0;
    return p;
}

/* Characters with a meaning in the regex dialect (and '/', which ends a
 * regex terminal in grammar text). */
static bool rx_special(unsigned char c) {
    return strchr("\\.*+?()[]{}|^$/", c) != NULL && c != 0;
}

void tr_js_rx_escape(js_buf *b, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c == 0x7f)
            tr_js_buf_printf(b, "\\x%02x", c);
        else if (rx_special(c)) {
            char e[2] = {'\\', (char)c};
            tr_js_buf_add(b, e, 2);
        } else
            tr_js_buf_add(b, &s[i], 1);
    }
}

/* ---- pointer -> value map ---- */

static uint64_t mix_ptr(const void *p) {
    uint64_t x = (uint64_t)(uintptr_t)p;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return x;
}

bool tr_js_ptrmap_get(const js_ptrmap *m, const void *key, uint64_t *val) {
    if (!m->cap) return false;
    for (uint32_t i = (uint32_t)mix_ptr(key) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
        if (!m->keys[i]) return false;
        if (m->keys[i] == key) {
            *val = m->vals[i];
            return true;
        }
    }
}

tr_status tr_js_ptrmap_put(gcc *cc, js_ptrmap *m, const void *key, uint64_t val) {
    if ((uint64_t)(m->n + 1) * 2 > m->cap) {
        uint32_t nc = m->cap ? m->cap * 2 : 64;
        const void **k = tr_gcc_alloc(cc, (size_t)nc * sizeof *k);
        uint64_t *v = tr_gcc_alloc(cc, (size_t)nc * sizeof *v);
        if (!k || !v) return cc->err;
        for (uint32_t i = 0; i < m->cap; i++) {
            if (!m->keys[i]) continue;
            uint32_t j = (uint32_t)mix_ptr(m->keys[i]) & (nc - 1);
            while (k[j]) j = (j + 1) & (nc - 1);
            k[j] = m->keys[i];
            v[j] = m->vals[i];
        }
        m->keys = k;
        m->vals = v;
        m->cap = nc;
    }
    uint32_t i = (uint32_t)mix_ptr(key) & (m->cap - 1);
    while (m->keys[i] && m->keys[i] != key) i = (i + 1) & (m->cap - 1);
    if (!m->keys[i]) m->n++;
    m->keys[i] = key;
    m->vals[i] = val;
    return TR_OK;
}
