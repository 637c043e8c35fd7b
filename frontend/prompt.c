/* prompt.c — a task's prompt: a log of items (text, pending generations,
 * role markers) turned into the model's text on demand.
 *
 * Chat rendering. The backend renders a list of messages with the model's
 * template; a prompt whose last role block is still open (a gen inside
 * `assistant { ... }`) needs the text that turn starts with, followed by
 * what the block holds so far. It is found by rendering the closed
 * messages plus the open one with a sentinel as its content and cutting
 * at the sentinel: exact for every template family (whatever it puts
 * before a message, default system prompt included), and the same text
 * the closed form of the conversation begins with, so consecutive
 * generations of a task share their prefix in the radix cache.
 */
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "frontend/interp_internal.h"

/* Cannot occur in a message: control characters nobody writes. */
static const char SENTINEL[] = "\x1e\x1f\x1e";

void tr_dsl_prompt_deinit(tr_dsl_prompt *p) {
    for (int32_t i = 0; i < p->n; i++) {
        tr_dsl_unref(p->items[i].text);
        tr_dsl_future_release(p->items[i].fut);
    }
    free(p->items);
    memset(p, 0, sizeof *p);
}

static bool reserve(tr_dsl_prompt *p, int32_t n) {
    if (n <= p->cap) return true;
    int32_t cap = p->cap ? p->cap : 16;
    while (cap < n) cap *= 2;
    tr_dsl_item *ni = realloc(p->items, (size_t)cap * sizeof *ni);
    if (!ni) return false;
    p->items = ni;
    p->cap = cap;
    return true;
}

tr_status tr_dsl_prompt_copy(const tr_dsl_prompt *src, tr_dsl_prompt *dst) {
    memset(dst, 0, sizeof *dst);
    if (!reserve(dst, src->n)) return TR_ERR_NOMEM;
    for (int32_t i = 0; i < src->n; i++) {
        dst->items[i] = src->items[i];
        tr_dsl_ref(dst->items[i].text);
        if (dst->items[i].fut) tr_dsl_future_ref(dst->items[i].fut);
    }
    dst->n = src->n;
    dst->mode = src->mode;
    dst->open_role = src->open_role;
    dst->bytes = src->bytes;
    return TR_OK;
}

tr_status tr_dsl_prompt_push(tr_dsl_prompt *p, tr_dsl_item_kind kind, json_t *text,
                             tr_dsl_future *fut, const char *role) {
    if (!reserve(p, p->n + 1)) return TR_ERR_NOMEM;
    tr_dsl_item *it = &p->items[p->n++];
    it->kind = kind;
    it->text = text ? tr_dsl_ref(text) : NULL;
    it->fut = fut ? tr_dsl_future_ref(fut) : NULL;
    it->role = role;
    if (text) p->bytes += json_string_length(text);
    return TR_OK;
}

/* The text of item i, waiting for it if pending; NULL when failed. */
static json_t *item_text(tr_dsl_task *t, tr_dsl_item *it) {
    if (it->kind == TR_DSL_ITEM_TEXT) return it->text;
    tr_dsl_future_wait(it->fut);
    if (it->fut->error.code != TR_OK) {
        tr_dsl_fail_with(t, &it->fut->error);
        return NULL;
    }
    /* settle it: later renders need not look at the future again (with a
     * copy of its text, made on another thread: see tr_dsl_resolve_slot) */
    json_t *text = it->fut->text ? json_deep_copy(it->fut->text) : NULL;
    if (it->fut->text && !text) {
        tr_dsl_fail(t, 0, TR_ERR_NOMEM, "out of memory");
        return NULL;
    }
    tr_dsl_future_release(it->fut);
    it->fut = NULL;
    it->kind = TR_DSL_ITEM_TEXT;
    it->text = text;
    return text;
}

typedef struct msgs {
    trellis_message *m;
    tr_dsl_buf *content;
    int32_t n, cap;
} msgs;

static void msgs_free(msgs *ms) {
    for (int32_t i = 0; i < ms->n; i++) tr_dsl_buf_free(&ms->content[i]);
    free(ms->m);
    free(ms->content);
}

static bool msgs_add(msgs *ms, const char *role) {
    if (ms->n == ms->cap) {
        int32_t cap = ms->cap ? ms->cap * 2 : 8;
        trellis_message *nm = realloc(ms->m, (size_t)cap * sizeof *nm);
        if (!nm) return false;
        ms->m = nm;
        tr_dsl_buf *nc = realloc(ms->content, (size_t)cap * sizeof *nc);
        if (!nc) return false;
        ms->content = nc;
        ms->cap = cap;
    }
    ms->m[ms->n].role = role;
    ms->m[ms->n].content = "";
    memset(&ms->content[ms->n], 0, sizeof ms->content[ms->n]);
    ms->n++;
    return true;
}

static tr_status render_chat(tr_dsl_task *t, tr_dsl_prompt *p, uint32_t off, char **out,
                             size_t *len) {
    msgs ms = {0};
    tr_status s = TR_OK;
    bool open = false;
    for (int32_t i = 0; i < p->n && s == TR_OK; i++) {
        tr_dsl_item *it = &p->items[i];
        if (it->kind == TR_DSL_ITEM_OPEN) {
            if (!msgs_add(&ms, it->role)) s = TR_ERR_NOMEM;
            open = true;
        } else if (it->kind == TR_DSL_ITEM_CLOSE) {
            open = false;
        } else if (ms.n == 0) {
            s = tr_dsl_fail(t, off, TR_ERR_INTERNAL, "text before the first role block");
        } else {
            json_t *text = item_text(t, it);
            if (!text) s = t->err.code;
            else if (!tr_dsl_buf_put(&ms.content[ms.n - 1], json_string_value(text),
                                     json_string_length(text)))
                s = TR_ERR_NOMEM;
        }
    }
    tr_dsl_buf tail = {0};
    if (s == TR_OK && open) { /* the open block: rendered up to the sentinel */
        tail = ms.content[ms.n - 1];
        memset(&ms.content[ms.n - 1], 0, sizeof tail);
        if (!tr_dsl_buf_put(&ms.content[ms.n - 1], SENTINEL, sizeof SENTINEL - 1))
            s = TR_ERR_NOMEM;
    }
    for (int32_t i = 0; i < ms.n; i++)
        ms.m[i].content = ms.content[i].p ? ms.content[i].p : "";
    char *text = NULL;
    size_t n = 0;
    if (s == TR_OK) {
        char err[512] = "";
        /* rendering is prompt building: it counts as the interpreter's time */
        tr_status r = t->run->sess->backend->ops->render_chat(t->run->sess->backend, ms.m,
                                                              ms.n, false, &text, &n, err,
                                                              sizeof err);
        if (r != TR_OK) s = tr_dsl_fail(t, off, r, "%s", err);
    }
    if (s == TR_OK && open) {
        char *cut = NULL;
        for (char *q = text; (q = strstr(q, SENTINEL)) != NULL; q++) cut = q;
        if (!cut) {
            s = tr_dsl_fail(t, off, TR_ERR_INTERNAL,
                            "the chat template dropped the open %s block",
                            ms.m[ms.n - 1].role);
        } else {
            size_t head = (size_t)(cut - text);
            char *joined = malloc(head + tail.len + 1);
            if (!joined) {
                s = TR_ERR_NOMEM;
            } else {
                memcpy(joined, text, head);
                if (tail.len) memcpy(joined + head, tail.p, tail.len);
                joined[head + tail.len] = 0;
                free(text);
                text = joined;
                n = head + tail.len;
            }
        }
    }
    tr_dsl_buf_free(&tail);
    msgs_free(&ms);
    if (s != TR_OK) {
        free(text);
        if (s == TR_ERR_NOMEM) tr_dsl_fail(t, off, s, "out of memory rendering the prompt");
        return s;
    }
    *out = text;
    *len = n;
    return TR_OK;
}

tr_status tr_dsl_prompt_render(tr_dsl_task *t, tr_dsl_prompt *p, uint32_t off, char **out,
                               size_t *len) {
    if (p->mode == TR_DSL_MODE_CHAT) return render_chat(t, p, off, out, len);
    tr_dsl_buf b = {0};
    if (!tr_dsl_buf_put(&b, "", 0)) return tr_dsl_fail(t, off, TR_ERR_NOMEM, "out of memory");
    for (int32_t i = 0; i < p->n; i++) {
        json_t *text = item_text(t, &p->items[i]);
        if (!text) {
            tr_dsl_buf_free(&b);
            return t->err.code;
        }
        if (!tr_dsl_buf_put(&b, json_string_value(text), json_string_length(text))) {
            tr_dsl_buf_free(&b);
            return tr_dsl_fail(t, off, TR_ERR_NOMEM, "out of memory");
        }
    }
    *out = b.p;
    *len = b.len;
    return TR_OK;
}
