/* tools.c — OpenAI tool calling, request side: `tools`, `tool_choice`,
 * `parallel_tool_calls` read and checked; the grammar that makes every
 * call valid; the tools' description for the prompt; assistant
 * `tool_calls` and `tool` messages of the history as text.
 *
 * The format (app/server/README.md, "Tool calling"): a call is
 *   <tool_call>\n{"name": NAME, "arguments": {...}}\n</tool_call>
 * the tags Qwen 2.5/3, Hermes and SmolLM3's templates use; tool results
 * go back as a user turn "<tool_response>\n...\n</tool_response>" (one
 * turn for consecutive results), which every chat template family can
 * render. The tools are described in the system message.
 *
 * The grammar (EBNF with %json items, grammar.h): a call's JSON is
 * one object per function {"name": const, "arguments": parameters}, so a
 * call's arguments always validate against its function's schema.
 *   required    root ::= calls        (calls: one, or several with
 *   named       root ::= one call of that function      parallel_tool_calls)
 *   auto        root ::= text calls?  (text: anything without the trigger)
 *   auto + response_format json:  root ::= FORMAT | calls
 *   none        no grammar of its own (response_format alone, if any), and
 *               the tools are not described in the prompt
 *
 * Layering: app/server (validate side: no engine call; the fuzz target
 * drives it through tr_srv_gen_parse).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/server/sbuf_internal.h"
#include "app/server/tool_parse.h"
#include "app/server/validate_internal.h"

#define BAD(param, ...) tr_srv_fail(err, 400, "invalid_request_error", NULL, param, __VA_ARGS__)
#define TOOLS_MAX 128

static int nomem(tr_srv_error *err) {
    return tr_srv_fail(err, 500, "server_error", NULL, NULL, "out of memory");
}

static bool name_ok(const char *s, size_t n) {
    if (n == 0 || n > 64) return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-'))
            return false;
    }
    return true;
}

/* JSON pointers of $ref inside a schema moved to `base` in a larger
 * document: "#/x" -> "#BASE/x", "#" -> "#BASE". */
static int rebase_refs(json_t *v, const char *base) {
    if (json_is_array(v)) {
        for (size_t i = 0; i < json_array_size(v); i++)
            if (rebase_refs(json_array_get(v, i), base) < 0) return -1;
        return 0;
    }
    if (!json_is_object(v)) return 0;
    const char *k;
    json_t *x;
    json_object_foreach(v, k, x) {
        const char *s = json_string_value(x);
        if (strcmp(k, "$ref") == 0 && s && (s[0] == '#' && (s[1] == 0 || s[1] == '/'))) {
            size_t n = strlen(base) + strlen(s) + 2;
            char *r = malloc(n);
            if (!r) return -1;
            snprintf(r, n, "#%s%s", base, s + 1);
            int rc = json_object_set_new(v, k, json_string(r));
            free(r);
            if (rc) return -1;
        } else if (rebase_refs(x, base) < 0) {
            return -1;
        }
    }
    return 0;
}

/* The schema of a call to function f (a tools[] entry's "function"),
 * sitting at JSON pointer `at` of the document it goes into. */
static json_t *call_schema(json_t *f, const char *at) {
    json_t *params = json_object_get(f, "parameters");
    json_t *args = params ? json_deep_copy(params) : json_pack("{s:s}", "type", "object");
    char base[128];
    snprintf(base, sizeof base, "%s/properties/arguments", at);
    if (!args || rebase_refs(args, base) < 0) {
        json_decref(args);
        return NULL;
    }
    /* a function takes the arguments it lists: without a word on others,
     * none (else a small model invents keys until max_tokens) */
    if (json_object_get(args, "properties") && !json_object_get(args, "additionalProperties") &&
        !json_object_get(args, "patternProperties") &&
        json_object_set_new(args, "additionalProperties", json_false())) {
        json_decref(args);
        return NULL;
    }
    return json_pack("{s:s,s:{s:{s:s},s:o},s:[s,s],s:b}", "type", "object", "properties",
                     "name", "const", json_string_value(json_object_get(f, "name")),
                     "arguments", args, "required", "name", "arguments",
                     "additionalProperties", 0);
}

/* The JSON Schema of one call: of `only` (an index), or of any tool. */
static char *calls_schema_text(json_t *tools, int32_t only) {
    json_t *doc;
    if (only >= 0) {
        doc = call_schema(json_object_get(json_array_get(tools, (size_t)only), "function"), "");
    } else {
        json_t *any = json_array();
        doc = json_pack("{s:o}", "anyOf", any);
        for (size_t i = 0; doc && i < json_array_size(tools); i++) {
            char at[32];
            snprintf(at, sizeof at, "/anyOf/%zu", i);
            json_t *s = call_schema(json_object_get(json_array_get(tools, i), "function"), at);
            if (!s || json_array_append_new(any, s)) {
                json_decref(doc);
                doc = NULL;
            }
        }
    }
    char *t = doc ? json_dumps(doc, JSON_COMPACT) : NULL;
    json_decref(doc);
    return t;
}

/* An EBNF regex terminal for text that never contains the trigger
 * (whose first character, '<', appears in it only there): runs of
 * non-'<', each '<' followed by something other than the trigger's rest. */
static void put_char(tr_sbuf *b, char c) {
    bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    tr_sbuf_printf(b, alnum ? "%c" : "\\%c", c);
}

static void put_no_trigger_regex(tr_sbuf *b) {
    const char *rest = &TR_TP_TRIGGER[1];
    size_t m = strlen(rest);
    tr_sbuf_puts(b, "/[^<]*(?:<");
    for (size_t i = 0; i < m; i++) {
        /* nothing more, a different character then anything, or the same
         * one and deeper (never the last: that would complete it) */
        tr_sbuf_puts(b, "(?:[^<");
        put_char(b, rest[i]);
        tr_sbuf_puts(b, "][^<]*");
        if (i + 1 < m) {
            tr_sbuf_puts(b, "|");
            put_char(b, rest[i]);
        }
    }
    for (size_t i = 0; i < m; i++) tr_sbuf_puts(b, ")?");
    tr_sbuf_puts(b, ")*/");
}

/* The grammar of the request's output (tools.c's header). format: the
 * response_format schema text (JSON object kind: NULL with object true). */
static char *grammar_text(json_t *tools, const tr_srv_tools *t, const char *format,
                          bool format_object) {
    char *calls = calls_schema_text(tools, t->choice == TR_TOOL_NAMED ? t->named : -1);
    if (!calls) return NULL;
    tr_sbuf b = {0};
    tr_sbuf_puts(&b, "root ::= ");
    if (t->choice == TR_TOOL_AUTO && (format || format_object)) {
        tr_sbuf_puts(&b, "%json ");
        tr_sbuf_puts(&b, format ? format : "{\"type\":\"object\"}");
        tr_sbuf_puts(&b, " | tc-calls\n");
    } else if (t->choice == TR_TOOL_AUTO) {
        tr_sbuf_puts(&b, "tc-text tc-calls?\ntc-text ::= ");
        put_no_trigger_regex(&b);
        tr_sbuf_puts(&b, "\n");
    } else if (t->choice == TR_TOOL_NAMED) {
        tr_sbuf_puts(&b, "tc-call\n");
    } else {
        tr_sbuf_puts(&b, "tc-calls\n");
    }
    tr_sbuf_puts(&b, t->parallel && t->choice != TR_TOOL_NAMED
                         ? "tc-calls ::= tc-call (\"\\n\" tc-call)*\n"
                         : "tc-calls ::= tc-call\n");
    tr_sbuf_printf(&b, "tc-call ::= \"%s\\n\" %%json %s \"\\n%s\"\n", TR_TP_TRIGGER, calls,
                   TR_TP_END);
    /* no key twice in a call's JSON (arguments whose schema lets keys
     * free included): the other text never holds the trigger */
    tr_sbuf_printf(&b, "%%json-keys-after \"%s\\n\"\n", TR_TP_TRIGGER);
    free(calls);
    size_t n;
    return tr_sbuf_take(&b, &n);
}

/* The tools' description, for the system message. */
static char *prompt_text(json_t *tools, const tr_srv_tools *t) {
    tr_sbuf b = {0};
    tr_sbuf_puts(&b, "# Tools\n\nYou can call functions. Each is described by a JSON object "
                     "between <tools> and </tools>:\n<tools>\n");
    for (size_t i = 0; i < json_array_size(tools); i++) {
        if (t->choice == TR_TOOL_NAMED && (int32_t)i != t->named) continue;
        char *d = json_dumps(json_array_get(tools, i), JSON_COMPACT);
        if (d) tr_sbuf_puts(&b, d);
        free(d);
        tr_sbuf_puts(&b, "\n");
    }
    tr_sbuf_printf(&b, "</tools>\n\nTo call a function, write its name and its arguments as "
                       "one JSON object between %s and %s, like this:\n%s\n{\"name\": "
                       "\"function name\", \"arguments\": {\"argument name\": value}}\n%s",
                   TR_TP_TRIGGER, TR_TP_END, TR_TP_TRIGGER, TR_TP_END);
    if (t->choice == TR_TOOL_REQUIRED) tr_sbuf_puts(&b, "\n\nAnswer with at least one call.");
    if (t->parallel && t->choice != TR_TOOL_NAMED)
        tr_sbuf_puts(&b, "\nSeveral calls go one after another, each in its own tags.");
    size_t n;
    return tr_sbuf_take(&b, &n);
}

static int read_tool(json_t *tools, size_t i, tr_srv_error *err) {
    char p[64];
    snprintf(p, sizeof p, "tools[%zu]", i);
    json_t *t = json_array_get(tools, i);
    const char *type = json_string_value(json_object_get(t, "type"));
    json_t *f = json_object_get(t, "function");
    if (!json_is_object(t) || !type || strcmp(type, "function") != 0 || !json_is_object(f))
        return BAD(p, "'%s' must be {\"type\": \"function\", \"function\": {...}} (the only "
                      "tool type there is)", p);
    json_t *name = json_object_get(f, "name");
    if (!json_is_string(name) || !name_ok(json_string_value(name), json_string_length(name)))
        return BAD(p, "'%s.function.name' must be 1 to 64 characters of a-z, A-Z, 0-9, _ and -",
                   p);
    for (size_t j = 0; j < i; j++) {
        json_t *o = json_object_get(json_object_get(json_array_get(tools, j), "function"), "name");
        if (json_equal(o, name))
            return BAD(p, "'%s.function.name': '%s' is also the name of tools[%zu]", p,
                       json_string_value(name), j);
    }
    json_t *params = json_object_get(f, "parameters");
    if (params && !json_is_null(params)) {
        const char *pt = json_string_value(json_object_get(params, "type"));
        if (!json_is_object(params) || (pt && strcmp(pt, "object") != 0))
            return BAD(p, "'%s.function.parameters' must be a JSON Schema of an object", p);
    } else if (params) {
        json_object_del(f, "parameters");
    }
    return 0;
}

static int read_choice(json_t *o, json_t *tools, tr_srv_tools *t, tr_srv_error *err) {
    json_t *c = json_object_get(o, "tool_choice");
    t->choice = TR_TOOL_AUTO;
    t->named = -1;
    if (!c || json_is_null(c)) return 0;
    const char *s = json_string_value(c);
    if (s) {
        if (strcmp(s, "none") == 0) t->choice = TR_TOOL_NONE;
        else if (strcmp(s, "auto") == 0) t->choice = TR_TOOL_AUTO;
        else if (strcmp(s, "required") == 0) t->choice = TR_TOOL_REQUIRED;
        else
            return BAD("tool_choice", "'tool_choice' is '%.32s'; expected none, auto, required "
                                      "or {\"type\": \"function\", \"function\": {\"name\": ...}}",
                       s);
        return 0;
    }
    const char *name = json_string_value(json_object_get(json_object_get(c, "function"), "name"));
    if (!name)
        return BAD("tool_choice", "'tool_choice' must be none, auto, required or {\"type\": "
                                  "\"function\", \"function\": {\"name\": ...}}");
    for (size_t i = 0; i < json_array_size(tools); i++) {
        const char *n = json_string_value(
            json_object_get(json_object_get(json_array_get(tools, i), "function"), "name"));
        if (strcmp(n, name) == 0) {
            t->choice = TR_TOOL_NAMED;
            t->named = (int32_t)i;
            return 0;
        }
    }
    return BAD("tool_choice", "'tool_choice' names '%.64s', which is not one of the tools", name);
}

int tr_srv_tools_read(tr_srv_gen *g, json_t *o, tr_srv_error *err) {
    json_t *legacy = json_object_get(o, "functions");
    if (legacy && !json_is_null(legacy))
        return BAD("functions", "'functions' (OpenAI's deprecated form) is not supported; "
                                "send them as 'tools'");
    json_t *tools = json_object_get(o, "tools");
    json_t *choice = json_object_get(o, "tool_choice");
    if (!tools || json_is_null(tools) || (json_is_array(tools) && !json_array_size(tools))) {
        const char *cs = json_string_value(choice);
        if (choice && !json_is_null(choice) &&
            !(cs && (strcmp(cs, "none") == 0 || strcmp(cs, "auto") == 0)))
            return BAD("tool_choice", "'tool_choice' needs 'tools'");
        return 0;
    }
    if (!json_is_array(tools)) return BAD("tools", "'tools' must be an array");
    if (json_array_size(tools) > TOOLS_MAX)
        return BAD("tools", "'tools' has %zu entries, at most %d", json_array_size(tools),
                   TOOLS_MAX);
    if (g->api != TR_API_CHAT) return BAD("tools", "'tools' needs /v1/chat/completions");
    for (size_t i = 0; i < json_array_size(tools); i++)
        if (read_tool(tools, i, err) < 0) return -1;
    tr_srv_tools *t = &g->tools;
    if (read_choice(o, tools, t, err) < 0) return -1;
    t->parallel = true;
    json_t *par = json_object_get(o, "parallel_tool_calls");
    if (par && !json_is_null(par)) {
        if (!json_is_boolean(par))
            return BAD("parallel_tool_calls", "'parallel_tool_calls' must be true or false");
        t->parallel = json_is_true(par);
    }
    if (t->choice == TR_TOOL_NONE) return 0;
    if (g->con != TR_CON_NONE && g->con != TR_CON_JSON_SCHEMA && g->con != TR_CON_JSON_OBJECT)
        return BAD("tools", "'tools' combine with response_format json_schema or json_object "
                            "only (not with a regex, EBNF or choices constraint)");
    t->active = true;
    t->format_first = t->choice == TR_TOOL_AUTO && g->con != TR_CON_NONE;
    char *gram = tr_srv_gen_keep(g, grammar_text(tools, t, g->con == TR_CON_JSON_SCHEMA ? g->con_text : NULL,
                                                 g->con == TR_CON_JSON_OBJECT));
    t->prompt = tr_srv_gen_keep(g, prompt_text(tools, t));
    if (!gram || !t->prompt) return nomem(err);
    g->con = TR_CON_EBNF;
    g->con_text = gram;
    g->con_len = strlen(gram);
    return 0;
}

/* ---- the history ---- */

/* Appends one call of an assistant message's tool_calls as the model
 * writes it. */
static int put_call(tr_sbuf *b, json_t *call, const char *p, tr_srv_error *err) {
    json_t *f = json_object_get(call, "function");
    const char *name = json_string_value(json_object_get(f, "name"));
    if (!json_is_object(call) || !name)
        return BAD(p, "'%s' must be {\"type\": \"function\", \"function\": {\"name\": ..., "
                      "\"arguments\": ...}}", p);
    json_t *a = json_object_get(f, "arguments");
    json_t *args = NULL;
    if (json_is_string(a)) /* a JSON text, as OpenAI sends it back */
        args = json_loads(json_string_value(a), JSON_DECODE_ANY, NULL);
    if (!args) args = a ? json_incref(a) : json_object();
    char *at = json_dumps(args, JSON_COMPACT | JSON_ENCODE_ANY);
    json_decref(args);
    json_t *jn = json_string(name);
    char *nm = jn ? json_dumps(jn, JSON_ENCODE_ANY) : NULL;
    json_decref(jn);
    if (!at || !nm) {
        free(at);
        free(nm);
        return nomem(err);
    }
    tr_sbuf_printf(b, "%s\n{\"name\": %s, \"arguments\": %s}\n%s", TR_TP_TRIGGER, nm, at,
                   TR_TP_END);
    free(at);
    free(nm);
    return 0;
}

int tr_srv_tools_assistant(tr_srv_gen *g, json_t *tc, const char *p, const char **content,
                           tr_srv_error *err) {
    if (!json_is_array(tc)) return BAD(p, "'%s.tool_calls' must be an array", p);
    tr_sbuf b = {0};
    if (*content && **content) {
        tr_sbuf_puts(&b, *content);
        tr_sbuf_puts(&b, "\n");
    }
    for (size_t i = 0; i < json_array_size(tc); i++) {
        char pc[128];
        snprintf(pc, sizeof pc, "%s.tool_calls[%zu]", p, i);
        if (i) tr_sbuf_puts(&b, "\n");
        if (put_call(&b, json_array_get(tc, i), pc, err) < 0) {
            tr_sbuf_reset(&b);
            return -1;
        }
    }
    size_t n;
    char *s = tr_srv_gen_keep(g, tr_sbuf_take(&b, &n));
    if (!s) return nomem(err);
    *content = s;
    return 0;
}

int tr_srv_tools_result(tr_srv_gen *g, const char *prev, const char *content, const char **out,
                        tr_srv_error *err) {
    tr_sbuf b = {0};
    if (prev) {
        tr_sbuf_puts(&b, prev);
        tr_sbuf_puts(&b, "\n");
    }
    tr_sbuf_printf(&b, "<tool_response>\n%s\n</tool_response>", content ? content : "");
    size_t n;
    char *s = tr_srv_gen_keep(g, tr_sbuf_take(&b, &n));
    if (!s) return nomem(err);
    *out = s;
    return 0;
}

int tr_srv_tools_system(tr_srv_gen *g, tr_srv_error *err) {
    if (!g->tools.active) return 0;
    if (g->n_messages > 0 && strcmp(g->messages[0].role, "system") == 0) {
        tr_sbuf b = {0};
        tr_sbuf_printf(&b, "%s\n\n%s", g->messages[0].content, g->tools.prompt);
        size_t n;
        char *s = tr_srv_gen_keep(g, tr_sbuf_take(&b, &n));
        if (!s) return nomem(err);
        g->messages[0].content = s;
        return 0;
    }
    trellis_message *m = realloc(g->messages, ((size_t)g->n_messages + 1) * sizeof *m);
    if (!m) return nomem(err);
    memmove(m + 1, m, (size_t)g->n_messages * sizeof *m);
    m[0] = (trellis_message){.role = "system", .content = g->tools.prompt};
    g->messages = m;
    g->n_messages++;
    g->req.messages = m;
    g->req.n_messages = g->n_messages;
    return 0;
}
