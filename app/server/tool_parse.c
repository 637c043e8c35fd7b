/* tool_parse.c — content and tool calls out of a chat completion's text
 * (tool_parse.h says what shape and what is reported).
 *
 * A byte-at-a-time state machine. Content is reported as soon as it
 * cannot be the start of the trigger; inside a call, a small JSON scanner
 * (depth, strings, escapes) finds the top-level "name" and "arguments"
 * values; arguments bytes are reported as they come once the name is
 * known (before that they wait, so a call always starts with its name).
 */
#include <stdlib.h>
#include <string.h>

#include "app/server/tool_parse.h"

typedef enum {
    TP_CONTENT,   /* before the first call */
    TP_OPEN,      /* after a trigger: whitespace, then '{' */
    TP_JSON,      /* inside the call's object */
    TP_CLOSE,     /* after the object: whitespace, then the end tag */
    TP_BETWEEN,   /* after a call: whitespace, then a trigger */
    TP_RAW,       /* not the expected shape: the rest is content */
} tp_mode;

typedef struct dbuf {
    char *p;
    size_t n, cap;
} dbuf;

struct tr_tp {
    tr_tp_sink sink;
    bool at_start_only;
    bool oom;
    tp_mode mode;
    size_t seen;        /* bytes fed so far */
    dbuf hold;          /* content that may begin a trigger; in TP_CLOSE
                           and TP_BETWEEN the tag matched so far */
    int32_t n_calls;    /* calls begun (a trigger read) */
    int32_t n_done;     /* calls whose end tag was read */
    /* the JSON scanner */
    int depth;
    bool in_str, esc;
    bool expect_key;    /* depth 1: the next string is a key */
    dbuf key, name, args;
    int in_value;       /* 0, 1: name's string, 2: arguments */
    int args_depth;     /* depth at which the arguments value began */
    bool started;       /* call_start reported */
    dbuf out;           /* arguments bytes of this feed, reported at its
                           end (one event per feed, not per byte) */
};

static void put(tr_tp *t, dbuf *b, const char *p, size_t n) {
    if (t->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap * 2 : 64;
        while (b->n + n + 1 > nc) nc *= 2;
        char *q = realloc(b->p, nc);
        if (!q) {
            t->oom = true;
            return;
        }
        b->p = q;
        b->cap = nc;
    }
    memcpy(b->p + b->n, p, n);
    b->n += n;
    b->p[b->n] = 0;
}

static void flush_args(tr_tp *t) {
    if (t->out.n && t->sink.args) t->sink.args(t->sink.user, t->n_calls - 1, t->out.p, t->out.n);
    t->out.n = 0;
}

static void content(tr_tp *t, const char *p, size_t n) {
    flush_args(t);
    if (n && t->sink.content) t->sink.content(t->sink.user, p, n);
}

tr_tp *tr_tp_new(bool at_start_only, const tr_tp_sink *sink) {
    tr_tp *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    t->sink = *sink;
    t->at_start_only = at_start_only;
    return t;
}

void tr_tp_free(tr_tp *t) {
    if (!t) return;
    free(t->hold.p);
    free(t->key.p);
    free(t->name.p);
    free(t->args.p);
    free(t->out.p);
    free(t);
}

int32_t tr_tp_calls(const tr_tp *t) { return t->n_calls; }

void tr_tp_set_user(tr_tp *t, void *user) { t->sink.user = user; }

static void begin_call(tr_tp *t) {
    flush_args(t);
    t->hold.n = 0;
    t->mode = TP_OPEN;
    t->n_calls++;
    t->depth = 0;
    t->in_str = t->esc = false;
    t->key.n = t->name.n = t->args.n = 0;
    t->in_value = 0;
    t->started = false;
}

static void report_args(tr_tp *t, const char *p, size_t n) {
    if (t->started) {
        put(t, &t->out, p, n);
    } else {
        put(t, &t->args, p, n);
    }
}

static void start_call(tr_tp *t) {
    t->started = true;
    if (t->sink.call_start)
        t->sink.call_start(t->sink.user, t->n_calls - 1, t->name.p ? t->name.p : "", t->name.n);
    if (t->args.n && t->sink.args) t->sink.args(t->sink.user, t->n_calls - 1, t->args.p, t->args.n);
    t->args.n = 0;
}

/* a string or value at depth 1 just ended */
static void key_or_value_done(tr_tp *t) {
    if (t->in_value == 1) {
        t->in_value = 0;
        start_call(t);
    }
}

/* One byte of the call's JSON object. */
static void json_byte(tr_tp *t, char c) {
    if (t->in_value == 2) report_args(t, &c, 1);
    if (t->in_str) {
        if (t->esc) {
            t->esc = false;
        } else if (c == '\\') {
            t->esc = true;
        } else if (c == '"') {
            t->in_str = false;
            if (t->depth == 1 && t->expect_key) {
                t->expect_key = false;
            } else if (t->depth == 1) {
                key_or_value_done(t);
            }
            return;
        }
        if (t->depth == 1 && t->expect_key) put(t, &t->key, &c, 1);
        else if (t->depth == 1 && t->in_value == 1) put(t, &t->name, &c, 1);
        return;
    }
    switch (c) {
    case '"':
        t->in_str = true;
        if (t->depth == 1 && t->expect_key) t->key.n = 0;
        if (t->depth == 1 && !t->expect_key && t->key.n == 4 && !memcmp(t->key.p, "name", 4) &&
            !t->started)
            t->in_value = 1;
        break;
    case '{':
    case '[':
        if (t->depth == 1 && !t->expect_key && t->in_value == 0 && t->key.n == 9 &&
            !memcmp(t->key.p, "arguments", 9)) {
            t->in_value = 2;
            t->args_depth = 1;
            report_args(t, &c, 1);
        }
        t->depth++;
        if (t->depth == 1) t->expect_key = true;
        break;
    case '}':
    case ']':
        t->depth--;
        if (t->in_value == 2 && t->depth == t->args_depth) t->in_value = 0;
        if (t->depth == 0) {
            if (!t->started) start_call(t); /* no name: reported with "" */
            t->mode = TP_CLOSE;
            t->hold.n = 0;
        }
        break;
    case ',':
        if (t->depth == 1) t->expect_key = true;
        break;
    default: break;
    }
}

/* Content mode: text in hold, trigger search. */
static void content_bytes(tr_tp *t, const char *p, size_t n, size_t *used) {
    put(t, &t->hold, p, n);
    *used = n;
    if (t->oom) return;
    const char *h = t->hold.p;
    size_t hn = t->hold.n, tl = strlen(TR_TP_TRIGGER);
    if (t->at_start_only) {
        size_t k = hn < tl ? hn : tl;
        if (memcmp(h, TR_TP_TRIGGER, k) != 0) { /* not a call: all content */
            t->mode = TP_RAW;
            content(t, h, hn);
            t->hold.n = 0;
        } else if (hn >= tl) {
            size_t rest = hn - tl;
            *used = n - rest; /* the bytes after the trigger go on */
            t->hold.n = 0;
            begin_call(t);
        }
        return;
    }
    const char *at = NULL;
    for (size_t i = 0; i + tl <= hn && !at; i++)
        if (h[i] == '<' && !memcmp(h + i, TR_TP_TRIGGER, tl)) at = h + i;
    if (at) {
        size_t before = (size_t)(at - h), rest = hn - before - tl;
        content(t, h, before);
        *used = n - rest;
        t->hold.n = 0;
        begin_call(t);
        return;
    }
    /* keep the longest suffix that is a proper prefix of the trigger */
    size_t keep = 0;
    for (size_t k = tl - 1; k > 0 && !keep; k--)
        if (k <= hn && !memcmp(h + hn - k, TR_TP_TRIGGER, k)) keep = k;
    content(t, h, hn - keep);
    memmove(t->hold.p, h + hn - keep, keep);
    t->hold.n = keep;
}

static bool blank(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* After a call: whitespace, then tag (the end tag, or the next trigger);
 * anything else is content from there on (TP_RAW). */
static void tag_byte(tr_tp *t, char c, const char *tag, tp_mode next) {
    size_t tl = strlen(tag);
    if (t->hold.n == 0 && blank(c)) return;
    if (c == tag[t->hold.n]) {
        put(t, &t->hold, &c, 1);
        if (t->hold.n == tl) {
            t->hold.n = 0;
            if (next == TP_OPEN) {
                begin_call(t);
            } else {
                t->n_done++;
                t->mode = next;
            }
        }
        return;
    }
    put(t, &t->hold, &c, 1);
    t->mode = TP_RAW;
    content(t, t->hold.p, t->hold.n);
    t->hold.n = 0;
}

int tr_tp_feed(tr_tp *t, const char *p, size_t n) {
    size_t i = 0;
    while (i < n && !t->oom) {
        switch (t->mode) {
        case TP_CONTENT: {
            size_t used;
            content_bytes(t, p + i, n - i, &used);
            i += used;
            break;
        }
        case TP_OPEN: /* blanks wait in hold: not a call after all, they stay */
            if (p[i] == '{') {
                t->mode = TP_JSON;
                t->hold.n = 0;
                json_byte(t, p[i]);
            } else if (blank(p[i])) {
                put(t, &t->hold, p + i, 1);
            } else {
                t->mode = TP_RAW;
                t->n_calls--;
                content(t, TR_TP_TRIGGER, strlen(TR_TP_TRIGGER));
                content(t, t->hold.p, t->hold.n);
                content(t, p + i, 1);
                t->hold.n = 0;
            }
            i++;
            break;
        case TP_JSON: json_byte(t, p[i++]); break;
        case TP_CLOSE: tag_byte(t, p[i++], TR_TP_END, TP_BETWEEN); break;
        case TP_BETWEEN: tag_byte(t, p[i++], TR_TP_TRIGGER, TP_OPEN); break;
        case TP_RAW:
            content(t, p + i, n - i);
            i = n;
            break;
        }
    }
    flush_args(t);
    t->seen += n;
    return t->oom ? -1 : 0;
}

int32_t tr_tp_finish(tr_tp *t, bool *unfinished) {
    flush_args(t);
    if (t->mode == TP_CONTENT && t->hold.n) content(t, t->hold.p, t->hold.n);
    t->hold.n = t->mode == TP_CONTENT ? 0 : t->hold.n;
    bool open = t->mode == TP_OPEN || t->mode == TP_JSON || t->mode == TP_CLOSE ||
                (t->mode == TP_BETWEEN && t->hold.n > 0);
    if (t->mode == TP_JSON && !t->started && t->in_value == 0 && t->name.n) start_call(t);
    if (unfinished) *unfinished = open;
    return t->n_done;
}
