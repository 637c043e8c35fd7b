/* chat.c — chat template detection and rendering. See chat.h for what
 * each template family renders; this file is the C transcription.
 *
 * Layering: runtime; libc + base. No state: any thread.
 * Every message is checked before anything is allocated, so a bad
 * conversation fails without side effects; the output grows in a
 * buffer whose size arithmetic is overflow-checked (contents come from
 * HTTP requests).
 */
#include "runtime/chat/chat.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"

/* ------------------------------------------------------------- names */

const char *tr_chat_template_kind_name(chat_template_kind kind) {
    switch (kind) {
    case CHAT_TEMPLATE_NONE: return "none";
    case CHAT_TEMPLATE_CHATML: return "chatml";
    case CHAT_TEMPLATE_LLAMA3: return "llama3";
    case CHAT_TEMPLATE_GEMMA: return "gemma";
    case CHAT_TEMPLATE_LLAMA2: return "llama2";
    case CHAT_TEMPLATE_MISTRAL: return "mistral";
    }
    return "unknown";
}

const char *tr_chat_template_end_of_turn(chat_template_kind kind) {
    switch (kind) {
    case CHAT_TEMPLATE_CHATML: return "<|im_end|>";
    case CHAT_TEMPLATE_LLAMA3: return "<|eot_id|>";
    case CHAT_TEMPLATE_GEMMA: return "<end_of_turn>";
    case CHAT_TEMPLATE_LLAMA2:
    case CHAT_TEMPLATE_MISTRAL: return "</s>";
    case CHAT_TEMPLATE_NONE: break;
    }
    return NULL;
}

/* ---------------------------------------------------------- detection */

/* Writes a printable, escaped excerpt of s (at most max input bytes) to
 * buf, so a diagnostic can quote arbitrary bytes safely. */
static void excerpt(const char *s, size_t max, char *buf, size_t cap) {
    size_t o = 0;
    for (size_t i = 0; s[i] && i < max && o + 5 < cap; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\n') {
            buf[o++] = '\\';
            buf[o++] = 'n';
        } else if (c == '"' || c == '\\') {
            buf[o++] = '\\';
            buf[o++] = (char)c;
        } else if (c < 0x20 || c >= 0x7f) {
            static const char hex[] = "0123456789abcdef";
            buf[o++] = '\\';
            buf[o++] = 'x';
            buf[o++] = hex[c >> 4];
            buf[o++] = hex[c & 15];
        } else {
            buf[o++] = (char)c;
        }
    }
    buf[o] = '\0';
}

tr_status tr_chat_template_detect(const char *t, chat_template_kind *out,
                               tr_diag *d) {
    if (!out) return tr_diag_set(d, TR_ERR_INVALID_ARG, 0, "out is NULL");
    if (!t)
        return tr_diag_set(d, TR_ERR_NOT_FOUND, 0,
                           "the model has no chat template "
                           "(tokenizer.chat_template is missing)");
    chat_template_kind k = CHAT_TEMPLATE_NONE;
    if (strstr(t, "<|start_header_id|>")) k = CHAT_TEMPLATE_LLAMA3;
    else if (strstr(t, "<start_of_turn>")) k = CHAT_TEMPLATE_GEMMA;
    else if (strstr(t, "<|im_start|>")) k = CHAT_TEMPLATE_CHATML;
    else if (strstr(t, "[INST]"))
        k = strstr(t, "<<SYS>>") ? CHAT_TEMPLATE_LLAMA2 : CHAT_TEMPLATE_MISTRAL;
    if (k == CHAT_TEMPLATE_NONE) {
        char ex[200];
        excerpt(t, 60, ex, sizeof ex);
        return tr_diag_set(d, TR_ERR_UNSUPPORTED, 0,
                           "unrecognised chat template: none of the markers "
                           "<|im_start|>, <|start_header_id|>, "
                           "<start_of_turn>, [INST] occurs in it "
                           "(it begins \"%s\")",
                           ex);
    }
    *out = k;
    return TR_OK;
}

/* Decodes one Jinja string literal's text from p (just after the
 * "<|im_start|>system" + newline) up to "<|im_end|>". The literal is
 * delimited by quote q; reaching an unescaped q first means the literal
 * ends before <|im_end|> (the template renders something else there):
 * returns false. On success *out is the malloc'd text. */
static bool literal_until_im_end(const char *p, char q, char **out,
                                 bool *nomem) {
    static const char end[] = "<|im_end|>";
    size_t cap = strlen(p) + 1;
    char *buf = malloc(cap);
    if (!buf) {
        *nomem = true;
        return false;
    }
    size_t o = 0;
    for (size_t i = 0; p[i]; i++) {
        if (strncmp(p + i, end, sizeof end - 1) == 0) {
            buf[o] = '\0';
            *out = buf;
            return true;
        }
        char c = p[i];
        if (c == q) break;
        if (c == '\\' && p[i + 1]) {
            char e = p[++i];
            switch (e) {
            case 'n': buf[o++] = '\n'; break;
            case 't': buf[o++] = '\t'; break;
            case 'r': buf[o++] = '\r'; break;
            case '\\': case '\'': case '"': buf[o++] = e; break;
            default: /* not an escape Python knows: kept as written */
                buf[o++] = '\\';
                buf[o++] = e;
                break;
            }
            continue;
        }
        buf[o++] = c;
    }
    free(buf);
    return false;
}

tr_status tr_chat_template_default_system(const char *t, char **out) {
    if (!out) return TR_ERR_INVALID_ARG;
    *out = NULL;
    if (!t) return TR_ERR_INVALID_ARG;
    static const char head[] = "<|im_start|>system";
    for (const char *p = strstr(t, head); p; p = strstr(p + 1, head)) {
        if (p == t || (p[-1] != '\'' && p[-1] != '"')) continue;
        char q = p[-1];
        const char *a = p + sizeof head - 1;
        if (a[0] == '\n') a += 1;
        else if (a[0] == '\\' && a[1] == 'n') a += 2;
        else continue;
        bool nomem = false;
        char *text = NULL;
        if (literal_until_im_end(a, q, &text, &nomem)) {
            *out = text;
            return TR_OK;
        }
        if (nomem) return TR_ERR_NOMEM;
    }
    return TR_OK;
}

/* ---------------------------------------------------------- rendering */

typedef struct sbuf {
    char *p;
    size_t len, cap;
    tr_status err;
    size_t mark; /* the end of the latest message content written
                    (CHAT_END_CONTINUE cuts there) */
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t n) {
    if (b->err != TR_OK) return;
    size_t need;
    if (tr_add_overflow_size(b->len, n, &need) ||
        tr_add_overflow_size(need, 1, &need)) {
        b->err = TR_ERR_OVERFLOW;
        return;
    }
    if (need > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < need) {
            if (tr_mul_overflow_size(cap, 2, &cap)) {
                cap = need;
                break;
            }
        }
        char *np = realloc(b->p, cap);
        if (!np) {
            b->err = TR_ERR_NOMEM;
            return;
        }
        b->p = np;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void sb_str(sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

static bool is_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' ||
           c == '\f';
}

/* Appends s with ASCII whitespace stripped at both ends. */
static void sb_trim(sbuf *b, const char *s) {
    size_t n = strlen(s), i = 0;
    while (i < n && is_space(s[i])) i++;
    while (n > i && is_space(s[n - 1])) n--;
    sb_put(b, s + i, n - i);
}

typedef enum role {
    ROLE_SYSTEM,
    ROLE_USER,
    ROLE_ASSISTANT,
    ROLE_TOOL,
} role;

static const char *const role_names[] = {"system", "user", "assistant",
                                         "tool"};

/* A conversation after validation: roles parsed, the default system
 * prompt (if it applies) in front as message -1. */
typedef struct conv {
    const chat_message *m;
    size_t n;
    role *r; /* [n] */
    const char *sys; /* default system prompt to prepend, or NULL */
} conv;

static const char *content_of(const chat_message *m) {
    return m->content ? m->content : "";
}

/* Kinds that fold a leading system message into the first user turn and
 * need user/assistant alternation after it. */
static bool folds_system(chat_template_kind k) {
    return k == CHAT_TEMPLATE_GEMMA || k == CHAT_TEMPLATE_LLAMA2 ||
           k == CHAT_TEMPLATE_MISTRAL;
}

static tr_status validate(chat_template_kind kind, conv *c, tr_diag *d) {
    bool has_sys = c->sys != NULL; /* default system acts as m[-1] */
    size_t turn = 0; /* index among alternating turns */
    for (size_t i = 0; i < c->n; i++) {
        const char *name = c->m[i].role;
        if (!name)
            return tr_diag_set(d, TR_ERR_INVALID_ARG, i,
                               "message %zu has no role", i);
        size_t r = 0;
        while (r < TR_ARRAY_LEN(role_names) && strcmp(name, role_names[r]))
            r++;
        if (r == TR_ARRAY_LEN(role_names)) {
            char ex[120];
            excerpt(name, 40, ex, sizeof ex);
            return tr_diag_set(d, TR_ERR_INVALID_ARG, i,
                               "message %zu has unknown role \"%s\" "
                               "(expected system, user, assistant or tool)",
                               i, ex);
        }
        c->r[i] = (role)r;
        if (!folds_system(kind)) continue;
        if (r == ROLE_TOOL)
            return tr_diag_set(d, TR_ERR_UNSUPPORTED, i,
                               "message %zu: the %s chat template has no "
                               "tool role",
                               i, tr_chat_template_kind_name(kind));
        if (r == ROLE_SYSTEM) {
            if (i == 0 && !has_sys) continue;
            return tr_diag_set(d, TR_ERR_INVALID_ARG, i,
                               "message %zu: the %s chat template accepts a "
                               "system message only as the first message",
                               i, tr_chat_template_kind_name(kind));
        }
        role want = turn % 2 == 0 ? ROLE_USER : ROLE_ASSISTANT;
        if (r != want)
            return tr_diag_set(d, TR_ERR_INVALID_ARG, i,
                               "message %zu: the %s chat template needs "
                               "roles alternating user/assistant starting "
                               "with user (got %s where %s is expected)",
                               i, tr_chat_template_kind_name(kind),
                               role_names[r], role_names[want]);
        turn++;
    }
    return TR_OK;
}

static void render_chatml(sbuf *b, const conv *c, bool gen) {
    if (c->sys) {
        sb_str(b, "<|im_start|>system\n");
        sb_str(b, c->sys);
        sb_str(b, "<|im_end|>\n");
    }
    for (size_t i = 0; i < c->n; i++) {
        sb_str(b, "<|im_start|>");
        sb_str(b, role_names[c->r[i]]);
        sb_str(b, "\n");
        sb_str(b, content_of(&c->m[i]));
        b->mark = b->len;
        sb_str(b, "<|im_end|>\n");
    }
    if (gen) sb_str(b, "<|im_start|>assistant\n");
}

static void llama3_turn(sbuf *b, const char *role_name, const char *text) {
    sb_str(b, "<|start_header_id|>");
    sb_str(b, role_name);
    sb_str(b, "<|end_header_id|>\n\n");
    sb_trim(b, text);
    b->mark = b->len;
    sb_str(b, "<|eot_id|>");
}

static void render_llama3(sbuf *b, const conv *c, bool gen) {
    if (c->sys) llama3_turn(b, "system", c->sys);
    for (size_t i = 0; i < c->n; i++) {
        role r = c->r[i];
        llama3_turn(b, r == ROLE_TOOL ? "ipython" : role_names[r],
                    content_of(&c->m[i]));
    }
    if (gen) sb_str(b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

/* The system text to fold into the first user turn (explicit first
 * message or default) and the index of the first turn message. */
static const char *folded_system(const conv *c, size_t *first) {
    if (c->n > 0 && c->r[0] == ROLE_SYSTEM) {
        *first = 1;
        return content_of(&c->m[0]);
    }
    *first = 0;
    return c->sys;
}

static void render_gemma(sbuf *b, const conv *c, bool gen) {
    size_t first;
    const char *sys = folded_system(c, &first);
    for (size_t i = first; i < c->n; i++) {
        bool user = c->r[i] == ROLE_USER;
        sb_str(b, user ? "<start_of_turn>user\n" : "<start_of_turn>model\n");
        if (i == first && sys) {
            sb_str(b, sys);
            sb_str(b, "\n\n");
        }
        sb_trim(b, content_of(&c->m[i]));
        b->mark = b->len;
        sb_str(b, "<end_of_turn>\n");
    }
    if (gen) sb_str(b, "<start_of_turn>model\n");
}

static void render_llama2(sbuf *b, const conv *c) {
    size_t first;
    const char *sys = folded_system(c, &first);
    for (size_t i = first; i < c->n; i++) {
        const char *text = content_of(&c->m[i]);
        if (c->r[i] == ROLE_USER) {
            if (i != first) sb_str(b, "<s>");
            sb_str(b, "[INST] ");
            if (i == first && sys) {
                /* .strip() applies to the whole folded content */
                sbuf f = {NULL, 0, 0, TR_OK, 0};
                sb_str(&f, "<<SYS>>\n");
                sb_str(&f, sys);
                sb_str(&f, "\n<</SYS>>\n\n");
                sb_str(&f, text);
                if (f.err != TR_OK) b->err = f.err;
                else sb_trim(b, f.p);
                free(f.p);
            } else {
                sb_trim(b, text);
            }
            sb_str(b, " [/INST]");
        } else {
            sb_str(b, " ");
            sb_trim(b, text);
            b->mark = b->len;
            sb_str(b, " </s>");
        }
    }
}

static void render_mistral(sbuf *b, const conv *c) {
    size_t first;
    const char *sys = folded_system(c, &first);
    for (size_t i = first; i < c->n; i++) {
        const char *text = content_of(&c->m[i]);
        if (c->r[i] == ROLE_USER) {
            sb_str(b, "[INST] ");
            if (i == first && sys) {
                sb_str(b, sys);
                sb_str(b, "\n\n");
            }
            sb_str(b, text);
            sb_str(b, " [/INST]");
        } else {
            sb_str(b, text);
            b->mark = b->len;
            sb_str(b, "</s>");
        }
    }
}

tr_status tr_chat_render(chat_template_kind kind, const char *default_system,
                      const chat_message *msgs, size_t n,
                      chat_render_end end, char **out,
                      size_t *out_len, tr_diag *d) {
    if (!out) return tr_diag_set(d, TR_ERR_INVALID_ARG, 0, "out is NULL");
    if (n > 0 && !msgs)
        return tr_diag_set(d, TR_ERR_INVALID_ARG, 0,
                           "msgs is NULL but n is %zu", n);
    if (!tr_chat_template_end_of_turn(kind))
        return tr_diag_set(d, TR_ERR_INVALID_ARG, 0,
                           "unknown chat template kind %d", (int)kind);
    if (n > SIZE_MAX / sizeof(role))
        return tr_diag_set(d, TR_ERR_OVERFLOW, 0, "too many messages");
    if (end == CHAT_END_CONTINUE &&
        (n == 0 || !msgs[n - 1].role || strcmp(msgs[n - 1].role, "assistant") != 0)) {
        char ex[120];
        excerpt(n && msgs[n - 1].role ? msgs[n - 1].role : "none", 40, ex, sizeof ex);
        return tr_diag_set(d, TR_ERR_INVALID_ARG, n ? n - 1 : 0,
                           "continuing the final message needs an assistant "
                           "message last (the last role is \"%s\")",
                           ex);
    }
    bool add_generation_prompt = end == CHAT_END_GENERATION_PROMPT;

    conv c = {msgs, n, NULL, NULL};
    c.r = malloc((n ? n : 1) * sizeof *c.r);
    if (!c.r) return tr_diag_set(d, TR_ERR_NOMEM, 0, "out of memory");
    /* the default system prompt applies when there is a first message
     * and it is not a system message (SmolLM2's loop.first test) */
    if (default_system && n > 0 && msgs[0].role &&
        strcmp(msgs[0].role, "system") != 0)
        c.sys = default_system;
    tr_status st = validate(kind, &c, d);
    if (st != TR_OK) {
        free(c.r);
        return st;
    }

    sbuf b = {NULL, 0, 0, TR_OK, 0};
    sb_put(&b, "", 0); /* an empty conversation still yields "" */
    switch (kind) {
    case CHAT_TEMPLATE_CHATML: render_chatml(&b, &c, add_generation_prompt); break;
    case CHAT_TEMPLATE_LLAMA3: render_llama3(&b, &c, add_generation_prompt); break;
    case CHAT_TEMPLATE_GEMMA: render_gemma(&b, &c, add_generation_prompt); break;
    case CHAT_TEMPLATE_LLAMA2: render_llama2(&b, &c); break;
    case CHAT_TEMPLATE_MISTRAL: render_mistral(&b, &c); break;
    case CHAT_TEMPLATE_NONE: break;
    }
    free(c.r);
    if (b.err != TR_OK) {
        free(b.p);
        return tr_diag_set(d, b.err, 0, "rendering the prompt: %s",
                           tr_status_message(b.err));
    }
    if (end == CHAT_END_CONTINUE) { /* the last message is written last */
        b.len = b.mark;
        b.p[b.len] = '\0';
    }
    *out = b.p;
    if (out_len) *out_len = b.len;
    return TR_OK;
}
