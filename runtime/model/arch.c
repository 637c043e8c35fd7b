/* arch.c — the architecture table: GGUF `general.architecture` name ->
 * the family's loader and forward pass (model_internal.h says how to add
 * one). Constant data; thread-safe.
 */
#include <string.h>

#include "base/util.h"
#include "runtime/model/model_internal.h"

static const tr_model_arch *const k_archs[] = {
    &tr_model_arch_llama,
    &tr_model_arch_qwen2,
    &tr_model_arch_qwen3,
    &tr_model_arch_gemma3,
};

const tr_model_arch *tr_model_arch_find(const char *name) {
    for (size_t i = 0; i < TR_ARRAY_LEN(k_archs); i++)
        if (strcmp(k_archs[i]->name, name) == 0) return k_archs[i];
    return NULL;
}

const char *tr_model_arch_list(char *buf, size_t cap) {
    size_t at = 0;
    if (cap == 0) return buf;
    buf[0] = 0;
    for (size_t i = 0; i < TR_ARRAY_LEN(k_archs); i++) {
        size_t len = strlen(k_archs[i]->name);
        if (at + len + 3 > cap) break;
        if (i) {
            memcpy(buf + at, ", ", 2);
            at += 2;
        }
        memcpy(buf + at, k_archs[i]->name, len);
        at += len;
        buf[at] = 0;
    }
    return buf;
}
