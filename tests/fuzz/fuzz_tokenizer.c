/* fuzz_tokenizer.c — libFuzzer target: encode arbitrary bytes (special
 * parsing off and on), decode, incremental decode.
 *
 * Checked on every input:
 *   - decode(encode(x)) == x in both special modes (special tokens render as
 *     their text), minus the bytes the vocabulary has no symbol for;
 *   - the pre-tokenizer's pieces tile x exactly;
 *   - stream-decoding the ids yields valid UTF-8 in every chunk, within the
 *     documented bound, and equals the plain decode whenever that is valid
 *     UTF-8.
 * Uses the default model when present (TRELLIS_MODEL or the cache), else a
 * small built-in byte-level vocabulary, so the replay test always runs.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/utf8.h"
#include "base/paths.h"
#include "runtime/gguf/gguf.h"
#include "runtime/tokenizer/tokenizer.h"
#include "runtime/tokenizer/tokenizer_internal.h"

#define CHECK(c)                                                          \
    do {                                                                  \
        if (!(c)) {                                                       \
            fprintf(stderr, "fuzz_tokenizer: check failed: %s (line %d)\n", #c, \
                    __LINE__);                                            \
            abort();                                                      \
        }                                                                 \
    } while (0)

static tokenizer *g_tok;
static gguf_file *g_file;
static uint8_t *g_mem;
static bool g_drop[256];

/* ---- built-in toy vocabulary (when the model file is absent) ---- */

typedef struct gb {
    uint8_t *p;
    size_t n, cap;
} gb;

static void put(gb *b, const void *d, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        CHECK(b->p);
    }
    memcpy(b->p + b->n, d, n);
    b->n += n;
}
static void put_u32(gb *b, uint32_t v) { put(b, &v, 4); }
static void put_u64(gb *b, uint64_t v) { put(b, &v, 8); }
static void put_str(gb *b, const char *s) {
    put_u64(b, strlen(s));
    put(b, s, strlen(s));
}

static uint8_t *toy_gguf(size_t *len) {
    enum { N_EXTRA = 7 };
    static char sym[256][4];
    const char *extra[N_EXTRA] = {"ab", "abc", "\xC4\xA0\x61" /* Ġa */, "\xC4\xA0\xC4\xA0",
                                  "<|im_start|>", "<|im_end|>", "<ud>"};
    int32_t types[256 + N_EXTRA];
    gb kv = {0};
    put_str(&kv, "tokenizer.ggml.model");
    put_u32(&kv, GGUF_TYPE_STRING);
    put_str(&kv, "gpt2");
    put_str(&kv, "tokenizer.ggml.pre");
    put_u32(&kv, GGUF_TYPE_STRING);
    put_str(&kv, "smollm");
    put_str(&kv, "tokenizer.ggml.tokens");
    put_u32(&kv, GGUF_TYPE_ARRAY);
    put_u32(&kv, GGUF_TYPE_STRING);
    put_u64(&kv, 256 + N_EXTRA);
    for (int b = 0; b < 256; b++) {
        uint32_t cp = tr_tokenizer_byte_to_cp((uint8_t)b);
        if (cp < 0x80) {
            sym[b][0] = (char)cp;
        } else {
            sym[b][0] = (char)(0xC0 | (cp >> 6));
            sym[b][1] = (char)(0x80 | (cp & 0x3F));
        }
        put_str(&kv, sym[b]);
        types[b] = 1;
    }
    for (int i = 0; i < N_EXTRA; i++) {
        put_str(&kv, extra[i]);
        types[256 + i] = i < 4 ? 1 : (i < 6 ? 3 : 4);
    }
    put_str(&kv, "tokenizer.ggml.token_type");
    put_u32(&kv, GGUF_TYPE_ARRAY);
    put_u32(&kv, GGUF_TYPE_INT32);
    put_u64(&kv, 256 + N_EXTRA);
    put(&kv, types, sizeof types);
    const char *merges[] = {"a b", "ab c", "\xC4\xA0 a", "\xC4\xA0 \xC4\xA0"};
    put_str(&kv, "tokenizer.ggml.merges");
    put_u32(&kv, GGUF_TYPE_ARRAY);
    put_u32(&kv, GGUF_TYPE_STRING);
    put_u64(&kv, 4);
    for (int i = 0; i < 4; i++) put_str(&kv, merges[i]);
    gb f = {0};
    put(&f, "GGUF", 4);
    put_u32(&f, 3);
    put_u64(&f, 0);
    put_u64(&f, 5);
    put(&f, kv.p, kv.n);
    while (f.n % 32) put(&f, "", 1);
    free(kv.p);
    *len = f.n;
    return f.p;
}

static void setup(void) {
    char path[4096];
    tr_diag d = {0};
    if (tr_default_model_path(path, sizeof path) && access(path, R_OK) == 0 &&
        tr_gguf_open(path, &g_file, &d) == TR_OK) {
        CHECK(tr_tokenizer_from_gguf(g_file, &g_tok, &d) == TR_OK);
    } else {
        size_t len;
        g_mem = toy_gguf(&len);
        CHECK(tr_gguf_open_memory(g_mem, len, &g_file, &d) == TR_OK);
        CHECK(tr_tokenizer_from_gguf(g_file, &g_tok, &d) == TR_OK);
    }
    for (int b = 0; b < 256; b++) {
        char c = (char)b;
        int32_t *ids;
        size_t n;
        CHECK(tr_tokenizer_encode(g_tok, &c, 1, false, &ids, &n) == TR_OK);
        g_drop[b] = n == 0;
        free(ids);
    }
}

typedef struct tile {
    const char *base;
    size_t pos;
} tile;

static tr_status on_piece(void *ud, const char *s, size_t n) {
    tile *t = ud;
    CHECK(n > 0 && s == t->base + t->pos);
    t->pos += n;
    return TR_OK;
}

static void stream_check(const int32_t *ids, size_t n, bool render_special,
                         const char *plain, size_t plain_len) {
    size_t cap = 3 * (tr_tokenizer_max_token_len(g_tok) + 1);
    char *chunk = malloc(cap);
    char *acc = malloc(3 * plain_len + 8);
    CHECK(chunk && acc);
    size_t acc_len = 0;
    tokenizer_stream st;
    tr_tokenizer_stream_init(&st, render_special);
    for (size_t i = 0; i < n; i++) {
        size_t ol;
        CHECK(tr_tokenizer_stream_push(&st, g_tok, ids[i], chunk, cap, &ol) == TR_OK);
        CHECK(ol <= cap);
        CHECK(tr_utf8_valid((const uint8_t *)chunk, ol));
        memcpy(acc + acc_len, chunk, ol);
        acc_len += ol;
    }
    char tail[8];
    size_t tl = tr_tokenizer_stream_flush(&st, tail, sizeof tail);
    CHECK(st.n_pending == 0 && tl <= 3);
    memcpy(acc + acc_len, tail, tl);
    acc_len += tl;
    CHECK(tr_utf8_valid((const uint8_t *)acc, acc_len));
    if (tr_utf8_valid((const uint8_t *)plain, plain_len))
        CHECK(acc_len == plain_len && memcmp(acc, plain, plain_len) == 0);
    free(chunk);
    free(acc);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!g_tok) setup();
    if (size > 1 << 16) size = 1 << 16;
    const char *text = (const char *)data;

    char *want = malloc(size + 1);
    CHECK(want);
    size_t wl = 0;
    for (size_t i = 0; i < size; i++)
        if (!g_drop[data[i]]) want[wl++] = text[i];

    tile tl = {text, 0};
    CHECK(tr_tokenizer_pretokenize(g_tok, text, size, on_piece, &tl) == TR_OK);
    CHECK(tl.pos == size);

    for (int special = 0; special < 2; special++) {
        int32_t *ids;
        size_t n;
        CHECK(tr_tokenizer_encode(g_tok, text, size, special, &ids, &n) == TR_OK);
        CHECK(ids != NULL && n <= size);
        for (size_t i = 0; i < n; i++) CHECK(ids[i] >= 0 && ids[i] < tr_tokenizer_n_vocab(g_tok));
        if (!special)
            for (size_t i = 0; i < n; i++)
                CHECK(tr_tokenizer_type(g_tok, ids[i]) != TOKENIZER_TYPE_CONTROL);
        char *out;
        size_t len;
        CHECK(tr_tokenizer_decode(g_tok, ids, n, true, &out, &len) == TR_OK);
        CHECK(len == wl && memcmp(out, want, wl) == 0);
        stream_check(ids, n, true, out, len);
        free(out);
        CHECK(tr_tokenizer_decode(g_tok, ids, n, false, &out, &len) == TR_OK);
        stream_check(ids, n, false, out, len);
        free(out);
        free(ids);
    }
    free(want);
    return 0;
}
