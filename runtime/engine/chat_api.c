/* chat_api.c — trellis_chat_render and trellis_chat_template_render: the
 * text a chat becomes, for clients that build prompts themselves (the
 * DSL interleaves role blocks with generations, so it needs the text an
 * open assistant turn starts with, which trellis_request.messages cannot
 * give).
 *
 * Layering: runtime/engine, over runtime/chat. Reads only the engine's
 * immutable fields (template kind, default system prompt): any thread,
 * concurrently.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/utf8.h"
#include "runtime/chat/chat.h"
#include "runtime/engine/engine_internal.h"

static int render(chat_template_kind kind, const char *system,
                  const trellis_message *m, int32_t n, bool gen_prompt, char **out,
                  size_t *out_len, char *err, size_t cap) {
    if (!out || n < 0 || (n > 0 && !m))
        return tr_errf(err, cap, TR_ERR_INVALID_ARG, "bad message array");
    chat_message *msgs = calloc(n ? (size_t)n : 1, sizeof *msgs);
    if (!msgs) return tr_errf(err, cap, TR_ERR_NOMEM, "out of memory");
    for (int32_t i = 0; i < n; i++) {
        msgs[i].role = m[i].role;
        msgs[i].content = m[i].content;
        if (m[i].content && !tr_utf8_valid(m[i].content, strlen(m[i].content))) {
            free(msgs);
            return tr_errf(err, cap, TR_ERR_INVALID_ARG,
                           "message %d is not valid UTF-8", i);
        }
    }
    tr_diag d = {0};
    tr_status s = tr_chat_render(kind, system, msgs, (size_t)n, gen_prompt, out,
                                 out_len, &d);
    free(msgs);
    if (s != TR_OK)
        return tr_errf(err, cap, s, "cannot render the chat: %s",
                       d.message[0] ? d.message : tr_status_message(s));
    return TRELLIS_OK;
}

int trellis_chat_render(const trellis_engine *e, const trellis_message *m, int32_t n,
                        bool add_generation_prompt, char **out, size_t *out_len,
                        char *err, size_t err_cap) {
    if (!e) return tr_errf(err, err_cap, TR_ERR_INVALID_ARG, "no engine");
    if (e->chat_kind == CHAT_TEMPLATE_NONE)
        return tr_errf(err, err_cap, TR_ERR_UNSUPPORTED,
                       "the model has no chat template Trellis knows");
    return render((chat_template_kind)e->chat_kind, e->chat_system, m, n,
                  add_generation_prompt, out, out_len, err, err_cap);
}

int trellis_chat_template_render(const char *tmpl, const trellis_message *m, int32_t n,
                                 bool add_generation_prompt, char **out,
                                 size_t *out_len, char *err, size_t err_cap) {
    if (!tmpl) return tr_errf(err, err_cap, TR_ERR_INVALID_ARG, "no template");
    static const chat_template_kind kinds[] = {
        CHAT_TEMPLATE_CHATML, CHAT_TEMPLATE_LLAMA3, CHAT_TEMPLATE_GEMMA,
        CHAT_TEMPLATE_LLAMA2, CHAT_TEMPLATE_MISTRAL};
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        if (strcmp(tmpl, tr_chat_template_kind_name(kinds[i])) == 0)
            return render(kinds[i], NULL, m, n, add_generation_prompt, out, out_len,
                          err, err_cap);
    chat_template_kind kind;
    tr_diag d = {0};
    tr_status s = tr_chat_template_detect(tmpl, &kind, &d);
    if (s != TR_OK)
        return tr_errf(err, err_cap, s,
                       "unknown chat template (not chatml, llama3, gemma, llama2, "
                       "mistral, nor a Jinja template of one of them): %s",
                       d.message[0] ? d.message : tr_status_message(s));
    char *system = NULL;
    if (tr_chat_template_default_system(tmpl, &system) != TR_OK) system = NULL;
    int rc = render(kind, system, m, n, add_generation_prompt, out, out_len, err,
                    err_cap);
    free(system);
    return rc;
}
