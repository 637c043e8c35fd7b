/* chat.h — chat templates: messages -> prompt text.
 *
 * Layering: runtime; depends on base only. It does not evaluate
 * Jinja: tr_chat_template_detect recognises which of a few well-known
 * template families a GGUF's tokenizer.chat_template string belongs to,
 * by distinctive markers, and tr_chat_render reproduces that family's output
 * in C. The result is plain text; encode it with parse_special so the
 * marker strings become their special tokens. Thread-safe: no state.
 *
 * Detection (first match wins):
 *   "<|start_header_id|>"         -> CHAT_TEMPLATE_LLAMA3
 *   "<start_of_turn>"             -> CHAT_TEMPLATE_GEMMA
 *   "<|im_start|>"                -> CHAT_TEMPLATE_CHATML (SmolLM2, Qwen, ...)
 *   "[INST]" and "<<SYS>>"        -> CHAT_TEMPLATE_LLAMA2
 *   "[INST]"                      -> CHAT_TEMPLATE_MISTRAL
 *   anything else                 -> TR_ERR_UNSUPPORTED; NULL -> TR_ERR_NOT_FOUND
 *
 * What each kind renders, for messages m[0..n) (role, content) and
 * G = add_generation_prompt. Content is used verbatim unless "trim(c)"
 * says otherwise (ASCII whitespace stripped at both ends, as Jinja's
 * |trim / .strip() do for ASCII; other Unicode spaces are kept). The
 * leading BOS token of the conversation is NEVER rendered: the tokenizer
 * adds it (tr_tokenizer_add_bos); BOS/EOS between turns are rendered as text.
 *
 *   CHATML   [S] then per message
 *              "<|im_start|>" role "\n" content "<|im_end|>\n"
 *            then, if G, "<|im_start|>assistant\n".
 *            [S] = "<|im_start|>system\n" default_system "<|im_end|>\n",
 *            rendered when default_system != NULL, n > 0 and m[0] is not
 *            a system message (SmolLM2's template does exactly this with
 *            "You are a helpful AI assistant named SmolLM, trained by
 *            Hugging Face"; get it with tr_chat_template_default_system).
 *            Roles: system, user, assistant, tool (rendered as named).
 *
 *   LLAMA3   per message
 *              "<|start_header_id|>" r "<|end_header_id|>\n\n" trim(c)
 *              "<|eot_id|>"
 *            with r = role, except tool -> "ipython" (Llama 3.1); then,
 *            if G, "<|start_header_id|>assistant<|end_header_id|>\n\n".
 *            default_system, if given and m[0] is not system, is rendered
 *            as a leading system message.
 *
 *   GEMMA    (Gemma 3's template) a first system message is not a turn:
 *            its content + "\n\n" is put before the first user turn's
 *            content. The other messages must alternate user, assistant,
 *            user, ... starting with user; per message
 *              "<start_of_turn>" r "\n" [prefix] trim(c) "<end_of_turn>\n"
 *            with r = "model" for assistant, "user" for user; then, if
 *            G, "<start_of_turn>model\n". A system message alone renders
 *            nothing (as in the original template). default_system acts
 *            as a first system message when m[0] is not one.
 *
 *   LLAMA2   (Llama-2-chat) a first system message is folded into the
 *            first user turn as "<<SYS>>\n" sys "\n<</SYS>>\n\n" + content.
 *            The rest alternate user/assistant starting with user:
 *              user:      ["<s>" except for the first] "[INST] "
 *                         trim(c) " [/INST]"
 *              assistant: " " trim(c) " </s>"
 *            G adds nothing (a prompt ending in [/INST] is already one).
 *
 *   MISTRAL  (Mistral-Instruct v0.1 style, no <<SYS>>) user/assistant
 *            alternate starting with user:
 *              user:      "[INST] " c " [/INST]"
 *              assistant: c "</s>"
 *            The original template rejects system messages; Trellis
 *            folds a first system message into the first user turn as
 *            sys "\n\n" c. G adds nothing.
 *
 * Errors from tr_chat_render (diag->message says which message and why,
 * diag->offset is that message's index):
 *   TR_ERR_INVALID_ARG  unknown role (named, with its index), NULL role,
 *                       roles not alternating where the kind needs it,
 *                       a system message other than the first where the
 *                       kind folds it, bad kind.
 *   TR_ERR_UNSUPPORTED  a known role the kind cannot express (tool in
 *                       GEMMA, LLAMA2, MISTRAL).
 *   TR_ERR_OVERFLOW / TR_ERR_NOMEM.
 */
#ifndef TR_CHAT_H
#define TR_CHAT_H

#include <stdbool.h>
#include <stddef.h>

#include "base/status.h"

typedef enum chat_template_kind {
    CHAT_TEMPLATE_NONE = 0,
    CHAT_TEMPLATE_CHATML = 1,
    CHAT_TEMPLATE_LLAMA3 = 2,
    CHAT_TEMPLATE_GEMMA = 3,
    CHAT_TEMPLATE_LLAMA2 = 4,
    CHAT_TEMPLATE_MISTRAL = 5,
} chat_template_kind;

typedef struct chat_message {
    const char *role;    /* "system", "user", "assistant" or "tool" */
    const char *content; /* NUL-terminated; NULL is the empty string */
} chat_message;

/* "chatml", "llama3", "gemma", "llama2", "mistral"; "none" / "unknown". */
const char *tr_chat_template_kind_name(chat_template_kind kind);

/* Recognises the template family of a Jinja chat template (see the table
 * above). *out is set only on success. Errors: TR_ERR_NOT_FOUND (template
 * is NULL: the model has no chat template), TR_ERR_UNSUPPORTED (no known
 * marker; diag quotes the template's start), TR_ERR_INVALID_ARG (out is
 * NULL). */
tr_status tr_chat_template_detect(const char *jinja_template,
                               chat_template_kind *out, tr_diag *diag);

/* The default system prompt a ChatML template injects when the first
 * message is not a system message: the text of a Jinja string literal
 * that reads '<|im_start|>system\n' TEXT '<|im_end|>' in one piece
 * (Jinja escapes \n \t \\ \' \" decoded). *out = malloc'd text (free()),
 * or NULL when the template has none (a template that only renders the
 * caller's system message has the literal cut by a quote, and does not
 * count). A textual heuristic, not Jinja evaluation: it finds SmolLM2's
 * and Qwen2.5's defaults. Errors: TR_ERR_INVALID_ARG, TR_ERR_NOMEM. */
tr_status tr_chat_template_default_system(const char *jinja_template,
                                       char **out);

/* The text that ends an assistant turn ("<|im_end|>", "<|eot_id|>",
 * "<end_of_turn>", "</s>"), for stop conditions; NULL for a bad kind. */
const char *tr_chat_template_end_of_turn(chat_template_kind kind);

/* How the rendered text ends (tr_chat_render's `end`; false and true
 * are CLOSED and GENERATION_PROMPT, the G of the table above):
 *   CLOSED             after the last message's end of turn
 *   GENERATION_PROMPT  then an open assistant turn (G)
 *   CONTINUE           right after the last message's content, which must
 *                      be an assistant message (TR_ERR_INVALID_ARG
 *                      otherwise, naming its role): its end of turn and
 *                      what follows are not rendered, so the model
 *                      continues that text (assistant prefill; as
 *                      transformers' continue_final_message, the content
 *                      is trimmed where the kind trims it). */
typedef enum chat_render_end {
    CHAT_END_CLOSED = 0,
    CHAT_END_GENERATION_PROMPT = 1,
    CHAT_END_CONTINUE = 2,
} chat_render_end;

/* Renders msgs[0..n) (n may be 0) as described above. default_system may
 * be NULL. On success *out is a malloc'd NUL-terminated string (free())
 * and *out_len (if not NULL) its length; on failure nothing is
 * allocated and *out is untouched. */
tr_status tr_chat_render(chat_template_kind kind, const char *default_system,
                      const chat_message *msgs, size_t n,
                      chat_render_end end, char **out,
                      size_t *out_len, tr_diag *diag);

#endif
