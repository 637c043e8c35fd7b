/* fuzz_chat.c — libFuzzer target for runtime/chat.
 *
 * The whole input (NUL-terminated copy) is a candidate Jinja template for
 * tr_chat_template_detect and tr_chat_template_default_system. The same bytes
 * also drive a conversation: byte 0 picks the kind (including invalid
 * ones), byte 1 the flags (generation prompt, default system), and the
 * rest, split at 0x00 bytes, gives (role selector, content) pairs.
 * Checked: no crash or sanitizer report; success and failure are
 * consistent (out set iff TR_OK); a ChatML rendering contains every
 * message's content verbatim and its length is what the format implies.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "runtime/chat/chat.h"

static const char *const roles[] = {"system", "user", "assistant", "tool",
                                    "User", "",      "wizard"};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > (1u << 20)) return 0;
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = '\0';

    chat_template_kind k = CHAT_TEMPLATE_NONE;
    tr_diag d;
    tr_status st = tr_chat_template_detect(text, &k, &d);
    if (st == TR_OK && tr_chat_template_end_of_turn(k) == NULL) abort();
    if (st != TR_OK && st != TR_ERR_UNSUPPORTED) abort();
    char *sys = NULL;
    if (tr_chat_template_default_system(text, &sys) != TR_OK) abort();
    if (sys && strlen(sys) > size) abort();

    /* the conversation */
    enum { MAX_MSG = 16 };
    chat_message msgs[MAX_MSG];
    size_t n = 0;
    chat_template_kind kind = size > 0 ? (chat_template_kind)(data[0] % 7) : k;
    uint8_t flags = size > 1 ? data[1] : 0;
    size_t pos = size > 2 ? 2 : size;
    while (pos < size && n < MAX_MSG) {
        uint8_t sel = (uint8_t)text[pos++];
        const char *role = sel == 0xff ? NULL : roles[sel % TR_ARRAY_LEN(roles)];
        const char *content = text + pos; /* runs to the next NUL */
        pos += strlen(content) + 1;
        msgs[n++] = (chat_message){role, (sel & 0x80) ? NULL : content};
    }
    const char *dsys = (flags & 2) ? (sys ? sys : "Default system.") : NULL;
    char *out = (char *)0x1;
    size_t len = 0;
    st = tr_chat_render(kind, dsys, msgs, n, flags & 1, &out, &len, &d);
    if (st == TR_OK) {
        if (!out || out == (char *)0x1 || strlen(out) != len) abort();
        if (kind == CHAT_TEMPLATE_CHATML) {
            size_t want = (flags & 1) ? strlen("<|im_start|>assistant\n") : 0;
            for (size_t i = 0; i < n; i++) {
                const char *c = msgs[i].content ? msgs[i].content : "";
                if (!strstr(out, c)) abort();
                want += strlen("<|im_start|>\n<|im_end|>\n") +
                        strlen(msgs[i].role) + strlen(c);
            }
            if (dsys && n > 0 && strcmp(msgs[0].role, "system") != 0)
                want += strlen("<|im_start|>system\n<|im_end|>\n") + strlen(dsys);
            if (len != want) abort();
        }
        free(out);
    } else if (out != (char *)0x1) {
        abort();
    }
    free(sys);
    free(text);
    return 0;
}
