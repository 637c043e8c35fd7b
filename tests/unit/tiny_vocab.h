/* tiny_vocab.h — a synthetic byte-level BPE vocabulary, built in memory as
 * a metadata-only GGUF (tr_gguf_open_memory) and read by the real
 * tokenizer, so that the engine's fake-model tests need no model file.
 *
 * Shaped like SmolLM2's where the tests care: 49,152 tokens, the "smollm"
 * pre-tokenizer, ChatML control tokens at the same ids (0 <|endoftext|>,
 * 1 <|im_start|>, 2 <|im_end|>; 3..16 other control tokens; 0 and 2 end
 * generation with 4 <reponame>, as in SmolLM2), EOS 2, BOS 1 not added, a
 * ChatML chat template. Then the 256 byte symbols (GPT-2's
 * byte-to-character map), then letter strings built by merges that each
 * add one letter to an existing token: " a".." z", every 2 and 3 lowercase
 * letters with and without a leading space, then 4-letter strings in
 * lexicographic order until the vocabulary is full. So every token above
 * the byte symbols is ASCII, 2 to 5 bytes long, and text in lowercase
 * words tokenizes into several-letter pieces (jump-forward re-encodings
 * and stop strings across token boundaries behave as with a real
 * vocabulary).
 *
 * tv_tokenizer() returns a fresh tokenizer (the caller frees it); the GGUF
 * bytes are built once per process and kept (the tokenizer copies what it
 * reads, so the gguf_file is closed right away).
 */
#ifndef TR_TESTS_UNIT_TINY_VOCAB_H
#define TR_TESTS_UNIT_TINY_VOCAB_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/gguf/gguf.h"
#include "runtime/tokenizer/tokenizer.h"

#define TV_N_VOCAB 49152
#define TV_N_CONTROL 17
#define TV_FIRST_BYTE TV_N_CONTROL
#define TV_FIRST_MERGED (TV_FIRST_BYTE + 256)

typedef struct tv_buf {
    uint8_t *p;
    size_t len, cap;
} tv_buf;

static inline void tv_put(tv_buf *b, const void *src, size_t n) {
    if (b->len + n > b->cap) {
        size_t c = b->cap ? b->cap : 4096;
        while (c < b->len + n) c *= 2;
        uint8_t *q = realloc(b->p, c);
        if (!q) abort();
        b->p = q;
        b->cap = c;
    }
    memcpy(b->p + b->len, src, n);
    b->len += n;
}
static inline void tv_u32(tv_buf *b, uint32_t v) { tv_put(b, &v, 4); }
static inline void tv_u64(tv_buf *b, uint64_t v) { tv_put(b, &v, 8); }
static inline void tv_str(tv_buf *b, const char *s) {
    tv_u64(b, strlen(s));
    tv_put(b, s, strlen(s));
}
static inline void tv_key(tv_buf *b, const char *k, gguf_type t) {
    tv_str(b, k);
    tv_u32(b, (uint32_t)t);
}

/* GPT-2's byte-level alphabet: printable bytes stand for themselves, the
 * others for 256, 257, ... in byte order. UTF-8 of the character into
 * out (2 bytes at most); returns the length. */
static inline int tv_byte_sym(uint8_t b, char *out) {
    uint32_t cp;
    if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174) {
        cp = b;
    } else {
        uint32_t k = 0;
        for (uint32_t x = 0; x < b; x++)
            k += !((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || x >= 174);
        cp = 256 + k;
    }
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    out[0] = (char)(0xC0 | (cp >> 6));
    out[1] = (char)(0x80 | (cp & 63));
    return 2;
}

/* The token texts (byte-level symbols) of the merged part, in order: a
 * leading space is the symbol of byte 32 ("\xc4\xa0"). */
static inline void tv_merged_text(int32_t i, char *out, char *left, char *right) {
    static const char sp[] = "\xc4\xa0";
    /* blocks: " x" (26), xx (676), " xx" (676), xxx (17576), " xxx"
     * (17576), then xxxx */
    int32_t sizes[5] = {26, 676, 676, 17576, 17576};
    int len = 0, space = 0, k = i, blk = 0;
    while (blk < 5 && k >= sizes[blk]) k -= sizes[blk++];
    switch (blk) {
    case 0: space = 1, len = 1; break;
    case 1: len = 2; break;
    case 2: space = 1, len = 2; break;
    case 3: len = 3; break;
    case 4: space = 1, len = 3; break;
    default: len = 4; break;
    }
    char letters[5];
    for (int j = len - 1; j >= 0; j--) {
        letters[j] = (char)('a' + k % 26);
        k /= 26;
    }
    letters[len] = 0;
    out[0] = 0;
    if (space) strcat(out, sp);
    strcat(out, letters);
    /* merge: everything but the last letter, and the last letter */
    size_t n = strlen(out);
    memcpy(left, out, n - 1);
    left[n - 1] = 0;
    right[0] = out[n - 1];
    right[1] = 0;
}

/* Appends the vocabulary's metadata key/value pairs (every tokenizer.*
 * key: model, pre-tokenizer, tokens, types, merges, EOS, BOS, add_bos,
 * chat template) to b in GGUF v3 encoding; returns how many. Shared by
 * tv_gguf() below and by a model file that carries this vocabulary
 * (tests/gpu/test_gpu_engine.c appends them to synth_shapes.h's header),
 * so the keys are written in one place. */
#define TV_N_KV 9
static inline uint64_t tv_put_tokenizer_kv(tv_buf *b) {
    static const char *const control[TV_N_CONTROL] = {
        "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<repo_name>", "<reponame>",
        "<file_sep>", "<filename>", "<gh_stars>", "<issue_start>", "<issue_comment>",
        "<issue_closed>", "<jupyter_start>", "<jupyter_text>", "<jupyter_code>",
        "<jupyter_output>", "<jupyter_script>", "<empty_output>"};
    const int32_t n = TV_N_VOCAB, n_merged = n - TV_FIRST_MERGED;
    tv_key(b, "tokenizer.ggml.model", GGUF_TYPE_STRING);
    tv_str(b, "gpt2");
    tv_key(b, "tokenizer.ggml.pre", GGUF_TYPE_STRING);
    tv_str(b, "smollm");
    tv_key(b, "tokenizer.ggml.tokens", GGUF_TYPE_ARRAY);
    tv_u32(b, GGUF_TYPE_STRING);
    tv_u64(b, (uint64_t)n);
    char text[16], l[16], r[4];
    for (int32_t i = 0; i < TV_N_CONTROL; i++) tv_str(b, control[i]);
    for (int i = 0; i < 256; i++) {
        int k = tv_byte_sym((uint8_t)i, text);
        text[k] = 0;
        tv_str(b, text);
    }
    for (int32_t i = 0; i < n_merged; i++) {
        tv_merged_text(i, text, l, r);
        tv_str(b, text);
    }
    tv_key(b, "tokenizer.ggml.token_type", GGUF_TYPE_ARRAY);
    tv_u32(b, GGUF_TYPE_INT32);
    tv_u64(b, (uint64_t)n);
    for (int32_t i = 0; i < n; i++) tv_u32(b, i < TV_N_CONTROL ? 3u : 1u);
    tv_key(b, "tokenizer.ggml.merges", GGUF_TYPE_ARRAY);
    tv_u32(b, GGUF_TYPE_STRING);
    tv_u64(b, (uint64_t)n_merged);
    for (int32_t i = 0; i < n_merged; i++) {
        char m[40];
        tv_merged_text(i, text, l, r);
        snprintf(m, sizeof m, "%s %s", l, r);
        tv_str(b, m);
    }
    tv_key(b, "tokenizer.ggml.eos_token_id", GGUF_TYPE_UINT32);
    tv_u32(b, 2);
    tv_key(b, "tokenizer.ggml.bos_token_id", GGUF_TYPE_UINT32);
    tv_u32(b, 1);
    tv_key(b, "tokenizer.ggml.add_bos_token", GGUF_TYPE_BOOL);
    tv_put(b, "", 1); /* false */
    tv_key(b, "tokenizer.chat_template", GGUF_TYPE_STRING);
    tv_str(b, "{% for message in messages %}{{'<|im_start|>' + message['role'] + "
              "'\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}"
              "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}");
    return TV_N_KV;
}

static inline const tv_buf *tv_gguf(void) {
    static tv_buf b;
    if (b.len) return &b;
    tv_put(&b, "GGUF", 4);
    tv_u32(&b, 3);           /* version */
    tv_u64(&b, 0);           /* tensors */
    tv_u64(&b, 1 + TV_N_KV); /* key/values */
    tv_key(&b, "general.architecture", GGUF_TYPE_STRING);
    tv_str(&b, "llama");
    tv_put_tokenizer_kv(&b);
    return &b;
}

/* The vocabulary's GGUF, opened over the process-wide bytes (free with
 * tr_gguf_close; the bytes stay). */
static inline gguf_file *tv_open(void) {
    const tv_buf *b = tv_gguf();
    gguf_file *f = NULL;
    tr_diag d = {0};
    if (tr_gguf_open_memory(b->p, b->len, &f, &d) != TR_OK) {
        fprintf(stderr, "tiny_vocab: %s\n", d.message);
        return NULL;
    }
    return f;
}

static inline tokenizer *tv_tokenizer(void) {
    gguf_file *f = tv_open();
    tokenizer *t = NULL;
    tr_diag d = {0};
    if (f && tr_tokenizer_from_gguf(f, &t, &d) != TR_OK)
        fprintf(stderr, "tiny_vocab: %s\n", d.message);
    tr_gguf_close(f);
    return t;
}

#endif
