/* fuzz_gguf.c — libFuzzer target for the GGUF loader: any byte string must
 * open cleanly or fail with a diagnostic; an opened file must pass
 * tr_gguf_check, and every kv, getter and tensor must be readable without
 * touching memory outside the input. Replayed over tests/fuzz/corpus/gguf/
 * by ctest (replay_gguf). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "runtime/gguf/gguf.h"

static volatile uint64_t g_sink;

/* Reads key i through every getter (each must answer, never crash). */
static void poke_kv(const gguf_file *f, uint64_t i) {
    gguf_str k = tr_gguf_kv_key(f, i);
    char key[128];
    if (k.len >= sizeof key || memchr(k.ptr, '\0', (size_t)k.len)) return;
    memcpy(key, k.ptr, (size_t)k.len);
    key[k.len] = '\0';
    if (tr_gguf_kv_find(f, key) != (int64_t)i) abort(); /* keys are unique */
    uint32_t u32;
    uint64_t u64;
    int64_t i64;
    float f32;
    bool b;
    gguf_str s;
    double d;
    gguf_type et;
    uint64_t n = 0;
    uint64_t acc = 0;
    if (!tr_gguf_get_u32(f, key, &u32)) acc += u32;
    if (!tr_gguf_get_u64(f, key, &u64)) acc += u64;
    if (!tr_gguf_get_i64(f, key, &i64)) acc += (uint64_t)i64;
    if (!tr_gguf_get_f32(f, key, &f32)) acc += (uint64_t)(f32 == f32);
    if (!tr_gguf_get_bool(f, key, &b)) acc += b;
    if (!tr_gguf_get_str(f, key, &s) && s.len) acc += (unsigned char)s.ptr[s.len - 1];
    if (!tr_gguf_get_arr(f, key, &et, &n) && n) {
        uint64_t idx[2] = {0, n - 1};
        for (int j = 0; j < 2; j++) {
            if (!tr_gguf_get_arr_str(f, key, idx[j], &s) && s.len)
                acc += (unsigned char)s.ptr[s.len - 1];
            if (!tr_gguf_get_arr_f64(f, key, idx[j], &d)) acc += (uint64_t)(d == d);
            if (!tr_gguf_get_arr_i64(f, key, idx[j], &i64)) acc += (uint64_t)i64;
        }
        if (tr_gguf_get_arr_str(f, key, n, &s) != TR_ERR_INVALID_ARG &&
            et == GGUF_TYPE_STRING)
            abort();
        const uint8_t *raw = tr_gguf_get_arr_data(f, key);
        if (raw) acc += raw[0]; /* n > 0: at least one element */
    }
    g_sink += acc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    gguf_file *f = NULL;
    tr_diag diag;
    if (tr_gguf_open_memory(data, size, &f, &diag) != TR_OK) {
        if (diag.message[0] == '\0' || diag.offset > size) abort();
        return 0;
    }
    if (tr_gguf_check(f) != TR_OK) abort();
    char buf[256];
    for (uint64_t i = 0; i < tr_gguf_kv_count(f); i++) {
        tr_gguf_kv_format(f, i, buf, sizeof buf);
        g_sink += strlen(buf);
        poke_kv(f, i);
    }
    for (uint64_t i = 0; i < tr_gguf_tensor_count(f); i++) {
        const gguf_tensor *t = tr_gguf_tensor_at(f, i);
        uintptr_t p = (uintptr_t)t->data, lo = (uintptr_t)data;
        if (p < lo || p - lo > size || t->size > size - (p - lo)) abort();
        if (tr_gguf_tensor_find(f, "") == t && t->name.len) abort();
        const uint8_t *bytes = t->data;
        g_sink += bytes[0] + bytes[t->size - 1]; /* size > 0: ne >= 1 */
    }
    tr_gguf_close(f);
    return 0;
}
