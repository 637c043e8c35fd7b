/* fuzz_tool_parse.c — libFuzzer target for the server's tool-call reader
 * (app/server/tool_parse.c).
 *
 * Byte 0: bit 0 picks at_start_only, the other bits seed the piece sizes;
 * the rest is the text. It is read twice, whole and in pieces of 1..8
 * bytes, and both readings must report the same content, the same calls
 * (names and arguments), the same counts. Also checked: no crash or
 * sanitizer report; arguments are never reported before their call's
 * start; complete calls never outnumber begun ones; text without '<' is
 * content, byte for byte.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "app/server/tool_parse.h"

typedef struct seen {
    char *content, *names, *args;
    size_t nc, nn, na;
    int32_t starts, last_k;
} seen;

static void add(char **b, size_t *n, const char *p, size_t k) {
    char *q = realloc(*b, *n + k + 1);
    if (!q) abort();
    memcpy(q + *n, p, k);
    *n += k;
    q[*n] = 0;
    *b = q;
}

static void on_content(void *u, const char *p, size_t n) {
    seen *s = u;
    add(&s->content, &s->nc, p, n);
}

static void on_start(void *u, int32_t k, const char *name, size_t n) {
    seen *s = u;
    if (k != s->starts) abort();
    s->starts++;
    add(&s->names, &s->nn, name, n);
    add(&s->names, &s->nn, "\n", 1);
}

static void on_args(void *u, int32_t k, const char *p, size_t n) {
    seen *s = u;
    if (k >= s->starts) abort(); /* arguments before their call's start */
    if (k != s->last_k) { /* pieces of one call join; a new call is marked */
        char mark[2] = {'\x01', (char)('0' + k % 64)};
        add(&s->args, &s->na, mark, 2);
        s->last_k = k;
    }
    add(&s->args, &s->na, p, n);
}

static int32_t read_text(const char *p, size_t n, bool start_only, uint8_t seed, seen *s,
                         bool *unfinished) {
    tr_tp_sink sink = {on_content, on_start, on_args, s};
    tr_tp *t = tr_tp_new(start_only, &sink);
    if (!t) abort();
    uint32_t r = seed | 1u;
    for (size_t at = 0; at < n;) {
        size_t k = seed ? 1 + (r >> 5) % 8 : n;
        r = r * 1103515245u + 12345u;
        if (k > n - at) k = n - at;
        if (tr_tp_feed(t, p + at, k) != 0) abort();
        at += k;
    }
    int32_t done = tr_tp_finish(t, unfinished);
    if (done > tr_tp_calls(t)) abort();
    tr_tp_free(t);
    return done;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1 || size > (1u << 16)) return 0;
    bool start_only = data[0] & 1;
    const char *text = (const char *)data + 1;
    size_t n = size - 1;
    seen a = {.last_k = -1}, b = {.last_k = -1};
    bool ua, ub;
    int32_t da = read_text(text, n, start_only, 0, &a, &ua);
    int32_t db = read_text(text, n, start_only, (uint8_t)(data[0] | 2), &b, &ub);
    if (da != db || ua != ub || a.starts != b.starts) abort();
    if (a.nc != b.nc || (a.nc && memcmp(a.content, b.content, a.nc))) abort();
    if (a.nn != b.nn || (a.nn && memcmp(a.names, b.names, a.nn))) abort();
    if (a.na != b.na || (a.na && memcmp(a.args, b.args, a.na))) abort();
    if (!memchr(text, '<', n) && (a.nc != n || (n && memcmp(a.content, text, n)))) abort();
    free(a.content), free(a.names), free(a.args);
    free(b.content), free(b.names), free(b.args);
    return 0;
}
