/* tool_parse.h — a chat completion's text, as the tool-calling grammar
 * lets the model write it (tools.c), split into content and tool calls,
 * incrementally: fed in pieces as the engine hands text out, it says
 * what can be streamed at once.
 *
 * The text is: content (any text without the trigger "<tool_call>"),
 * then zero or more calls, each "<tool_call>" JSON "</tool_call>" with
 * whitespace around the JSON and between calls. The JSON is an object
 * with "name" (a string without escapes: function names are
 * [A-Za-z0-9_-]) and "arguments" (an object), in either order. The
 * grammar guarantees that shape; text that strays from it (a server
 * without the grammar, a truncated generation) is never lost: what cannot
 * be read as a call stays content, and a call cut short is reported
 * unfinished (tr_tp_finish).
 *
 * Layering: app/server; no engine, no JSON library: bytes in, events
 * out. One parser per choice, one thread at a time.
 */
#ifndef TR_SERVER_TOOL_PARSE_H
#define TR_SERVER_TOOL_PARSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TR_TP_TRIGGER "<tool_call>"
#define TR_TP_END "</tool_call>"

/* What the parser reports, in order, through the sink. */
typedef struct tr_tp_sink {
    void (*content)(void *user, const char *p, size_t n);
    /* call `index` (0, 1, ...) begins: its name is known */
    void (*call_start)(void *user, int32_t index, const char *name, size_t n);
    /* more bytes of call `index`'s arguments (the JSON text as written) */
    void (*args)(void *user, int32_t index, const char *p, size_t n);
    void *user;
} tr_tp_sink;

typedef struct tr_tp tr_tp;

/* at_start_only: the trigger counts only at the very start of the text
 * (the grammar's "a format or calls" alternative: content may then hold
 * the trigger's characters inside a JSON string). NULL on out of memory. */
tr_tp *tr_tp_new(bool at_start_only, const tr_tp_sink *sink);
void tr_tp_free(tr_tp *t);
/* The sink's user pointer from now on. */
void tr_tp_set_user(tr_tp *t, void *user);
/* Feeds more text; reports what is certain. 0, or -1 on out of memory. */
int tr_tp_feed(tr_tp *t, const char *p, size_t n);
/* The text is complete: reports what was held back (a partial trigger is
 * content). Returns the number of calls that were complete; *unfinished
 * set when a call began and did not end (its bytes so far were reported
 * as they came). */
int32_t tr_tp_finish(tr_tp *t, bool *unfinished);
/* Calls begun so far. */
int32_t tr_tp_calls(const tr_tp *t);

#endif
