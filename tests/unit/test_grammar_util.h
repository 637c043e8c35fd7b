/* test_grammar_util.h — helpers shared by the tests and the benchmark of
 * grammar/: a deterministic PRNG, synthetic vocabularies, the real
 * SmolLM2 vocabulary (through runtime/gguf + runtime/tokenizer; NULL when
 * the model file is absent so that callers skip), and a brute-force mask
 * (each token run through the DFA on its own) to check the trie walk
 * against.
 */
#ifndef TR_TEST_GRAMMAR_UTIL_H
#define TR_TEST_GRAMMAR_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "grammar/grammar.h"
#include "grammar/cfg/cfg.h"
#include "base/paths.h"
#include "runtime/gguf/gguf.h"
#include "runtime/tokenizer/tokenizer.h"

/* ---- PRNG (xorshift64*) ---- */

typedef struct tg_rng {
    uint64_t s;
} tg_rng;

static inline uint64_t tg_next(tg_rng *r) {
    r->s ^= r->s >> 12;
    r->s ^= r->s << 25;
    r->s ^= r->s >> 27;
    return r->s * 0x2545F4914F6CDD1DULL;
}
static inline uint32_t tg_below(tg_rng *r, uint32_t n) {
    return n ? (uint32_t)(tg_next(r) % n) : 0;
}

/* ---- growable byte string ---- */

typedef struct tg_str {
    char *p;
    size_t len, cap;
} tg_str;

static inline void tg_put(tg_str *s, const void *b, size_t n) {
    if (s->len + n + 1 > s->cap) {
        size_t c = s->cap ? s->cap * 2 : 64;
        while (c < s->len + n + 1) c *= 2;
        char *q = realloc(s->p, c);
        if (!q) abort();
        s->p = q;
        s->cap = c;
    }
    if (n) memcpy(s->p + s->len, b, n);
    s->len += n;
    s->p[s->len] = 0;
}
static inline void tg_puts(tg_str *s, const char *z) { tg_put(s, z, strlen(z)); }
static inline void tg_putc(tg_str *s, char c) { tg_put(s, &c, 1); }
static inline void tg_put_cp(tg_str *s, uint32_t cp) {
    uint8_t b[4];
    int n = tr_utf8_encode(cp, b);
    tg_put(s, b, (size_t)n);
}

/* ---- vocabularies ---- */

/* Builds a vocabulary from NUL-free C strings; the last n_special entries
 * are special, and eog (if >= 0) is an EOG id. */
static inline grammar_vocab *tg_vocab_from_strings(const char *const *toks,
                                                   int32_t n, int32_t n_special,
                                                   int32_t eog) {
    const uint8_t **b = malloc((size_t)n * sizeof *b);
    uint32_t *l = malloc((size_t)n * sizeof *l);
    uint8_t *sp = calloc((size_t)n, 1);
    for (int32_t i = 0; i < n; i++) {
        b[i] = (const uint8_t *)toks[i];
        l[i] = (uint32_t)strlen(toks[i]);
        sp[i] = i >= n - n_special;
    }
    grammar_vocab_desc d = {.n_vocab = n, .token_bytes = b, .token_lens = l,
                            .is_special = sp, .eog_ids = &eog,
                            .n_eog = eog >= 0 ? 1 : 0};
    grammar_vocab *v = NULL;
    tr_status st = tr_grammar_vocab_new(&d, &v, NULL);
    free(b), free(l), free(sp);
    return st == TR_OK ? v : NULL;
}

/* A random vocabulary: every single byte 0..255 (so any text can be
 * spelled), then n - 258 random strings of 1..12 bytes drawn mostly from a
 * small alphabet plus UTF-8 fragments, some duplicates, one empty token,
 * an EOG and a special token at the end. */
static inline grammar_vocab *tg_vocab_random(tg_rng *r, int32_t n) {
    static const char *const frags[] = {
        "a", "b", "c", "x", "0", "1", "9", "-", ".", " ", "\"", "{", "}",
        "\n", "\xc3\xa9", "\xe4\xb8\xad", "\xf0\x9f\x98\x80", "\xc3",
        "\xa9", "\xe4\xb8", "\x80", "\xff", "ab", "abc", "aa", "{\"",
        "\":", "12", "\xce\xa9"};
    uint8_t **b = malloc((size_t)n * sizeof *b);
    uint32_t *l = malloc((size_t)n * sizeof *l);
    uint8_t *sp = calloc((size_t)n, 1);
    for (int32_t i = 0; i < n; i++) {
        b[i] = malloc(64);
        if (i < 256) {
            b[i][0] = (uint8_t)i;
            l[i] = 1;
        } else if (i == 256) {
            l[i] = 0; /* an empty token: never allowed */
        } else if (i >= n - 2) {
            const char *sp_text = i == n - 2 ? "</s>" : "<pad>";
            l[i] = (uint32_t)strlen(sp_text);
            memcpy(b[i], sp_text, l[i]);
            sp[i] = 1;
        } else if (i > 300 && tg_below(r, 20) == 0) { /* duplicate */
            int32_t j = 257 + (int32_t)tg_below(r, (uint32_t)(i - 257));
            l[i] = l[j];
            memcpy(b[i], b[j], l[j]);
        } else {
            uint32_t len = 0, want = 1 + tg_below(r, 12);
            while (len < want) {
                const char *f = frags[tg_below(r, TR_ARRAY_LEN(frags))];
                size_t fl = strlen(f);
                if (len + fl > 60) break;
                memcpy(b[i] + len, f, fl);
                len += (uint32_t)fl;
            }
            l[i] = len;
        }
    }
    int32_t eog = n - 2;
    grammar_vocab_desc d = {.n_vocab = n,
                            .token_bytes = (const uint8_t *const *)b,
                            .token_lens = l, .is_special = sp,
                            .eog_ids = &eog, .n_eog = 1};
    grammar_vocab *v = NULL;
    tr_status st = tr_grammar_vocab_new(&d, &v, NULL);
    for (int32_t i = 0; i < n; i++) free(b[i]);
    free(b), free(l), free(sp);
    return st == TR_OK ? v : NULL;
}

/* The SmolLM2 vocabulary from the default model file, or NULL (file
 * missing or tokenizer failure: message on stderr). */
static inline grammar_vocab *tg_vocab_smollm2(void) {
    char path[4096];
    if (!tr_default_model_path(path, sizeof path) || access(path, R_OK) != 0) {
        fprintf(stderr, "note: model file not found; skipping SmolLM2 checks\n");
        return NULL;
    }
    gguf_file *f = NULL;
    tokenizer *tok = NULL;
    tr_diag diag;
    if (tr_gguf_open(path, &f, &diag) != TR_OK) {
        fprintf(stderr, "gguf_open: %s\n", diag.message);
        return NULL;
    }
    if (tr_tokenizer_from_gguf(f, &tok, &diag) != TR_OK) {
        fprintf(stderr, "tokenizer_from_gguf: %s\n", diag.message);
        tr_gguf_close(f);
        return NULL;
    }
    int32_t n = tr_tokenizer_n_vocab(tok);
    const uint8_t **b = malloc((size_t)n * sizeof *b);
    uint32_t *l = malloc((size_t)n * sizeof *l);
    uint8_t *sp = calloc((size_t)n, 1);
    int32_t *eog = malloc((size_t)n * sizeof *eog);
    size_t n_eog = 0;
    for (int32_t i = 0; i < n; i++) {
        size_t len = 0;
        b[i] = tr_tokenizer_token_bytes(tok, i, &len);
        l[i] = (uint32_t)len;
        sp[i] = tr_tokenizer_is_special(tok, i);
        if (tr_tokenizer_is_eog(tok, i)) eog[n_eog++] = i;
    }
    grammar_vocab_desc d = {.n_vocab = n, .token_bytes = b, .token_lens = l,
                            .is_special = sp, .eog_ids = eog, .n_eog = n_eog};
    grammar_vocab *v = NULL;
    if (tr_grammar_vocab_new(&d, &v, &diag) != TR_OK)
        fprintf(stderr, "grammar_vocab_new: %s\n", diag.message);
    free(b), free(l), free(sp), free(eog);
    tr_tokenizer_free(tok);
    tr_gguf_close(f);
    return v;
}

/* ---- brute-force mask ---- */

/* The mask of DFA state s by running every token separately. */
static inline void tg_brute_mask(const gdfa *d, uint32_t s,
                                 const grammar_vocab *v, uint64_t *mask) {
    memset(mask, 0, v->n_words * sizeof *mask);
    for (int32_t id = 0; id < v->n_vocab; id++) {
        size_t len;
        const uint8_t *b = tr_grammar_vocab_token_bytes(v, id, &len);
        bool ok;
        if (tr_grammar_vocab_is_eog(v, id))
            ok = d->accept[s];
        else if (tr_grammar_vocab_is_special(v, id) || len == 0)
            ok = false;
        else
            ok = tr_dfa_run(d, s, b, len) != GDFA_DEAD;
        if (ok) mask[id >> 6] |= 1ull << (id & 63);
    }
}

static inline bool tg_bit(const uint64_t *mask, int32_t id) {
    return (mask[id >> 6] >> (id & 63)) & 1;
}

/* Reads a whole file, or NULL. */
static inline char *tg_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    tg_str s = {0};
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) tg_put(&s, buf, n);
    fclose(f);
    if (!s.p) tg_put(&s, "", 0);
    *len = s.len;
    return s.p;
}

#endif
