/* fuzz_tokenizer.c — libFuzzer target: encode arbitrary bytes (special
 * parsing off and on), decode, incremental decode, with a byte-level BPE
 * vocabulary and a SentencePiece-style ("llama") one.
 *
 * Checked on every input, for each vocabulary:
 *   - decode(encode(x)) == x in both special modes (special tokens render as
 *     their text), minus the bytes the vocabulary has no symbol for;
 *   - the pre-tokenizer's pieces tile x exactly;
 *   - stream-decoding the ids yields valid UTF-8 in every chunk, within the
 *     documented bound, and equals the plain decode whenever that is valid
 *     UTF-8.
 * And for the SPM one with add_space_prefix on: the decode is x with one
 * space put after each special token that raw text follows (the first one
 * is dropped by decode).
 * BPE: the default model when present (TRELLIS_MODEL or the cache), else a
 * small built-in vocabulary, so the replay test always runs. SPM: Gemma 3's
 * vocabulary when its model is in the cache, else a built-in one.
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

/* One vocabulary under test. */
typedef struct vocab {
    tokenizer *tok;
    gguf_file *file;
    uint8_t *mem;
    bool drop[256]; /* bytes that encode to nothing */
} vocab;

static vocab g_v[2]; /* BPE, SPM */
static tokenizer *g_tok; /* the one being checked */
static bool *g_drop;
static bool g_ready;

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

/* A SentencePiece-style toy: <unk>, <s>, </s>, the 256 byte tokens, a few
 * pieces with "▁" and equal scores (the leftmost pair must win ties), a
 * 2-byte character, a user-defined run of spaces and a control token. */
static uint8_t *toy_spm_gguf(size_t *len) {
    static const struct {
        const char *text;
        float score;
        int32_t type;
    } extra[] = {
        {"\xE2\x96\x81", -1, 1}, {"a", -2, 1}, {"b", -2, 1}, {"c", -3, 1},
        {"\xE2\x96\x81" "a", -1, 1}, {"ab", -1, 1}, {"bc", -1, 1}, {"abc", -0.5f, 1},
        {"\xE2\x96\x81" "ab", -0.5f, 1}, {"\xC3\xA9", -4, 1},
        {"\xE2\x96\x81\xE2\x96\x81", -2, 1}, {"  ", 0, 4}, {"<t>", 0, 3},
    };
    enum { N_HEAD = 3, N_EXTRA = sizeof extra / sizeof extra[0] };
    const uint64_t n = N_HEAD + 256 + N_EXTRA;
    gb kv = {0};
    put_str(&kv, "tokenizer.ggml.model");
    put_u32(&kv, GGUF_TYPE_STRING);
    put_str(&kv, "llama");
    put_str(&kv, "tokenizer.ggml.add_space_prefix");
    put_u32(&kv, GGUF_TYPE_BOOL);
    put(&kv, "", 1);
    put_str(&kv, "tokenizer.ggml.tokens");
    put_u32(&kv, GGUF_TYPE_ARRAY);
    put_u32(&kv, GGUF_TYPE_STRING);
    put_u64(&kv, n);
    put_str(&kv, "<unk>");
    put_str(&kv, "<s>");
    put_str(&kv, "</s>");
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        put_str(&kv, name);
    }
    for (int i = 0; i < N_EXTRA; i++) put_str(&kv, extra[i].text);
    put_str(&kv, "tokenizer.ggml.scores");
    put_u32(&kv, GGUF_TYPE_ARRAY);
    put_u32(&kv, GGUF_TYPE_FLOAT32);
    put_u64(&kv, n);
    float zero = 0;
    for (int i = 0; i < N_HEAD + 256; i++) put(&kv, &zero, 4);
    for (int i = 0; i < N_EXTRA; i++) put(&kv, &extra[i].score, 4);
    put_str(&kv, "tokenizer.ggml.token_type");
    put_u32(&kv, GGUF_TYPE_ARRAY);
    put_u32(&kv, GGUF_TYPE_INT32);
    put_u64(&kv, n);
    int32_t head[N_HEAD] = {2, 3, 3}, byte = 6;
    put(&kv, head, sizeof head);
    for (int b = 0; b < 256; b++) put(&kv, &byte, 4);
    for (int i = 0; i < N_EXTRA; i++) put(&kv, &extra[i].type, 4);
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

static void vocab_open(vocab *v, const char *path, uint8_t *(*toy)(size_t *)) {
    tr_diag d = {0};
    if (path && access(path, R_OK) == 0 && tr_gguf_open(path, &v->file, &d) == TR_OK) {
        CHECK(tr_tokenizer_from_gguf(v->file, &v->tok, &d) == TR_OK);
    } else {
        size_t len;
        v->mem = toy(&len);
        CHECK(tr_gguf_open_memory(v->mem, len, &v->file, &d) == TR_OK);
        CHECK(tr_tokenizer_from_gguf(v->file, &v->tok, &d) == TR_OK);
    }
    CHECK(tr_tokenizer_check(v->tok) == TR_OK);
    for (int b = 0; b < 256; b++) {
        char c = (char)b;
        int32_t *ids;
        size_t n;
        CHECK(tr_tokenizer_encode(v->tok, &c, 1, false, &ids, &n) == TR_OK);
        v->drop[b] = n == 0;
        free(ids);
    }
}

static void setup(void) {
    char path[4096], gemma[4096];
    vocab_open(&g_v[0], tr_default_model_path(path, sizeof path), toy_gguf);
    vocab_open(&g_v[1], tr_cached_model_path(TR_GEMMA3_MODEL_FILE, gemma, sizeof gemma),
               toy_spm_gguf);
    g_ready = true;
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

/* Removes spaces, and "▁" (which SPM decodes as a space), in place. */
static size_t strip_spaces(char *p, size_t n) {
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (p[i] == ' ') continue;
        if (n - i >= 3 && memcmp(p + i, "\xE2\x96\x81", 3) == 0) {
            i += 2;
            continue;
        }
        p[o++] = p[i];
    }
    return o;
}

/* SPM with add_space_prefix: a space goes in front of every raw fragment
 * and decode drops the first one, so decode(encode(x)) is x up to spaces. */
static void check_space_prefix(const uint8_t *data, size_t size) {
    tokenizer *t = g_v[1].tok;
    bool was = t->add_space_prefix;
    t->add_space_prefix = true; /* test-only: the tokenizer is ours */
    int32_t *ids;
    size_t n;
    CHECK(tr_tokenizer_encode(t, (const char *)data, size, false, &ids, &n) == TR_OK);
    char *out;
    size_t len;
    CHECK(tr_tokenizer_decode(t, ids, n, true, &out, &len) == TR_OK);
    char *want = malloc(size + 1);
    CHECK(want);
    memcpy(want, data, size);
    size_t wl = strip_spaces(want, size);
    len = strip_spaces(out, len);
    CHECK(len == wl && memcmp(out, want, wl) == 0);
    free(want);
    free(out);
    free(ids);
    t->add_space_prefix = was;
}

static void check_one(const uint8_t *data, size_t size);

/* SPM on invalid UTF-8: a symbol's length comes from its lead byte, so a
 * truncated character before an escaped space takes some of the "▁"
 * bytes, which then come back by byte fallback as "▁", not as a space
 * (llama.cpp does the same). a == b with each space of b allowed to come
 * out as "▁". */
static bool spm_same(const char *a, size_t na, const char *b, size_t nb) {
    size_t i = 0, j = 0;
    while (i < na && j < nb) {
        if (b[j] == ' ' && na - i >= 3 && memcmp(a + i, "\xE2\x96\x81", 3) == 0) {
            i += 3;
            j++;
        } else if (a[i] == b[j]) {
            i++;
            j++;
        } else {
            return false;
        }
    }
    return i == na && j == nb;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!g_ready) setup();
    if (size > 1 << 16) size = 1 << 16;
    for (int v = 0; v < 2; v++) {
        g_tok = g_v[v].tok;
        g_drop = g_v[v].drop;
        check_one(data, size);
    }
    check_space_prefix(data, size);
    return 0;
}

static void check_one(const uint8_t *data, size_t size) {
    const char *text = (const char *)data;

    char *want = malloc(size + 1);
    CHECK(want);
    size_t wl = 0;
    /* SPM decodes "▁" as a space (no special token of ours contains it) */
    bool spm = g_tok->kind == TOKENIZER_KIND_SPM;
    for (size_t i = 0; i < size; i++) {
        if (spm && size - i >= 3 && memcmp(text + i, "\xE2\x96\x81", 3) == 0) {
            want[wl++] = ' ';
            i += 2;
        } else if (!g_drop[data[i]]) {
            want[wl++] = text[i];
        }
    }

    tile tl = {text, 0};
    CHECK(tr_tokenizer_pretokenize(g_tok, text, size, on_piece, &tl) == TR_OK);
    CHECK(tl.pos == size);

    for (int special = 0; special < 2; special++) {
        int32_t *ids;
        size_t n;
        CHECK(tr_tokenizer_encode(g_tok, text, size, special, &ids, &n) == TR_OK);
        /* SPM: a space is 3 bytes once escaped, each maybe a byte token */
        CHECK(ids != NULL && n <= (spm ? 3 * size : size));
        for (size_t i = 0; i < n; i++) CHECK(ids[i] >= 0 && ids[i] < tr_tokenizer_n_vocab(g_tok));
        if (!special)
            for (size_t i = 0; i < n; i++)
                CHECK(tr_tokenizer_type(g_tok, ids[i]) != TOKENIZER_TYPE_CONTROL);
        char *out;
        size_t len;
        CHECK(tr_tokenizer_decode(g_tok, ids, n, true, &out, &len) == TR_OK);
        if (spm && !tr_utf8_valid(data, size))
            CHECK(spm_same(out, len, want, wl));
        else
            CHECK(len == wl && memcmp(out, want, wl) == 0);
        stream_check(ids, n, true, out, len);
        free(out);
        CHECK(tr_tokenizer_decode(g_tok, ids, n, false, &out, &len) == TR_OK);
        stream_check(ids, n, false, out, len);
        free(out);
        free(ids);
    }
    free(want);
}
