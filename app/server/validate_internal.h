/* validate_internal.h — a request body (JSON) to a validated generation request:
 * OpenAI's chat and completions fields, and SGLang's native /generate
 * fields (named exactly as SGLang names them), mapped onto
 * trellis_request. Every problem is a tr_srv_error (HTTP status, OpenAI
 * error type, the offending parameter, a sentence); nothing is ever
 * half-accepted.
 *
 * Layering: app/server; uses jansson and include/trellis.h (types and
 * limits only: no engine call), so it runs on any thread and is what the
 * HTTP fuzz target drives.
 *
 * Limits checked here, each naming the field: prompts per request, n,
 * messages (count and bytes), stop strings (count and length), stop token
 * ids, logit_bias entries and range, top_logprobs, max_tokens (>= 1, or
 * 0 for prefill only where the API allows it: /generate and completions;
 * at most the configured cap), min_tokens (at most max_tokens); the rest (prompt length against the
 * context, token ids against the vocabulary, the constraint's text) is
 * checked by trellis_submit and trellis_grammar_compile, whose messages
 * the server passes on.
 *
 * Ownership: a tr_srv_gen owns the parsed JSON; every string it points to
 * lives in that document or in memory it owns. tr_srv_gen_free releases
 * all of it (also after a failed parse).
 */
#ifndef TR_SERVER_VALIDATE_H
#define TR_SERVER_VALIDATE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "trellis.h"

typedef enum tr_srv_api {
    TR_API_CHAT = 1,   /* POST /v1/chat/completions */
    TR_API_COMPLETION, /* POST /v1/completions */
    TR_API_GENERATE,   /* POST /generate (SGLang native) */
} tr_srv_api;

/* The constraint a request asks for; its text goes to the grammar
 * compiler (kinds equal trellis_grammar_kind; NONE is 0). */
typedef enum tr_srv_con {
    TR_CON_NONE = 0,
    TR_CON_REGEX = TRELLIS_GRAMMAR_REGEX,
    TR_CON_CHOICE = TRELLIS_GRAMMAR_CHOICE,
    TR_CON_JSON_SCHEMA = TRELLIS_GRAMMAR_JSON_SCHEMA,
    TR_CON_JSON_OBJECT = TRELLIS_GRAMMAR_JSON_OBJECT,
    TR_CON_EBNF = TRELLIS_GRAMMAR_EBNF,
} tr_srv_con;

typedef struct tr_srv_limits {
    int32_t max_prompts;       /* prompts in one completions / generate batch */
    int32_t max_n;             /* samples per prompt */
    int32_t max_choices_total; /* prompts x n */
    int32_t max_messages;
    size_t max_message_bytes;  /* all message texts together */
    int32_t max_tokens;        /* cap on max_tokens; 0 = only the context */
    int32_t max_logit_bias;    /* entries */
    int32_t max_input_ids;     /* token ids in one prompt */
    size_t max_constraint_bytes; /* regex / schema / grammar text */
} tr_srv_limits;

void tr_srv_limits_default(tr_srv_limits *l);

typedef struct tr_srv_error {
    int status;          /* HTTP status */
    const char *type;    /* OpenAI error type: "invalid_request_error", ... */
    const char *code;    /* OpenAI error code, or NULL */
    char param[96];      /* the offending parameter ("messages[2].content"), or "" */
    char message[512];
} tr_srv_error;

/* Fills e and returns -1 (for `return tr_srv_fail(...)`). */
int tr_srv_fail(tr_srv_error *e, int status, const char *type, const char *code,
                const char *param, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));

typedef struct tr_srv_prompt {
    const char *text;      /* UTF-8 (not checked here: trellis_submit does) */
    size_t len;
    const int32_t *tokens; /* or token ids */
    int32_t n_tokens;
} tr_srv_prompt;

/* Tool calling (tools.c): what the request's tools ask of the output. */
typedef enum tr_srv_tool_choice {
    TR_TOOL_NONE = 0, /* no calls: the tools are not even described */
    TR_TOOL_AUTO,     /* text, or calls */
    TR_TOOL_REQUIRED, /* one call or more */
    TR_TOOL_NAMED,    /* one call of tools[named] */
} tr_srv_tool_choice;

typedef struct tr_srv_tools {
    bool active;               /* the output is parsed for calls */
    tr_srv_tool_choice choice;
    int32_t named;             /* TR_TOOL_NAMED: the tool's index */
    bool parallel;             /* parallel_tool_calls (default true) */
    bool format_first;         /* auto with response_format: the output is
                                  the format's JSON or calls from byte 0 */
    const char *prompt;        /* the tools' description (in `owned`) */
} tr_srv_tools;

typedef struct tr_srv_gen {
    tr_srv_api api;
    json_t *root;               /* owned */

    /* The request each prompt is submitted with; its prompt, tokens and
     * messages fields are set per prompt at submission. */
    trellis_request req;
    trellis_message *messages;  /* chat: owned array */
    int32_t n_messages;
    char **owned;               /* joined content parts, the choice list... */
    int32_t n_owned;
    tr_srv_prompt *prompts;     /* completions / generate: owned array */
    int32_t n_prompts;
    const char **stop;          /* owned array of borrowed strings */
    const char **stop_regex;    /* the same, for stop patterns */
    int32_t *stop_tokens;       /* owned */
    trellis_logit_bias *bias;   /* owned */

    tr_srv_con con;
    const char *con_text;       /* borrowed or in `owned`; NULL for JSON_OBJECT */
    size_t con_len;
    const char *const *choices; /* TR_CON_CHOICE: the strings */
    int32_t n_choices;
    bool con_strict;            /* json_schema.strict */
    int32_t con_ws;             /* JSON kinds: TRELLIS_WS_* ("whitespace"
                                   extension), -1 = the compiler's default */
    int32_t con_numbers;        /* JSON kinds: TRELLIS_JSON_NUMBERS_*
                                   ("json_numbers" extension), -1 = the
                                   compiler's default */
    int32_t con_order;          /* JSON Schema: TRELLIS_PROPERTY_ORDER_*, -1 unset */

    const char *model;          /* as asked, or NULL */
    const char *rid;            /* generate: "rid", or NULL */
    bool batch;                 /* generate: text / input_ids was a list */
    bool stream;
    bool include_usage;         /* stream_options.include_usage */
    bool logprobs;
    int32_t top_logprobs;
    bool echo;                  /* completions: the prompt before the text
                                   (and its log-probs first: echo.c) */
    bool lp_text;               /* generate: return_text_in_logprobs */
    tr_srv_tools tools;         /* chat: tools, tool_choice (tools.c) */
} tr_srv_gen;

/* Hands s (malloc'd, may be NULL) to g, freed with it; returns s, or NULL
 * (s freed) when it cannot be kept. */
char *tr_srv_gen_keep(tr_srv_gen *g, char *s);

/* tools.c. Each returns 0, or -1 with err filled. */
/* tools, tool_choice, parallel_tool_calls of body o; when calls may come,
 * sets g->tools and replaces the constraint with the tool grammar
 * (after read_constraint: a json response_format joins it). */
int tr_srv_tools_read(tr_srv_gen *g, json_t *o, tr_srv_error *err);
/* The tools' description into the first system message (or a new one). */
int tr_srv_tools_system(tr_srv_gen *g, tr_srv_error *err);
/* An assistant message's tool_calls (param p) appended to *content as the
 * model writes calls. */
int tr_srv_tools_assistant(tr_srv_gen *g, json_t *tool_calls, const char *p,
                           const char **content, tr_srv_error *err);
/* A tool result as user text; prev: the text of the results just before
 * it (consecutive results make one turn), or NULL. */
int tr_srv_tools_result(tr_srv_gen *g, const char *prev, const char *content,
                        const char **out, tr_srv_error *err);

/* Parses and checks body[0..len) for api. On failure fills err (status
 * 400 or 413) and leaves *out freed (tr_srv_gen_free is still safe). */
int tr_srv_gen_parse(tr_srv_api api, const char *body, size_t len,
                     const tr_srv_limits *lim, tr_srv_gen *out, tr_srv_error *err);
void tr_srv_gen_free(tr_srv_gen *g);

#endif
