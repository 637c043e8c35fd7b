/* fuzz_grammar_common.h — what the fuzz targets that drive a grammar
 * matcher over a subject share (fuzz_regex.c, fuzz_ebnf.c): the input
 * format, the small budgets, and the vocabulary the subject is fed in.
 *
 * Input: <grammar text> [ '\0' <subject> ]. The vocabulary: every byte as
 * token 0..255 (so the subject is fed one byte-token at a time), then each
 * target's multi-byte tokens, the last two special, the first of those two
 * the end-of-generation id (n_vocab - 2). Any broken invariant aborts
 * (that is how a fuzzer reports). Single-threaded, as libFuzzer runs.
 */
#ifndef TR_TESTS_FUZZ_GRAMMAR_COMMON_H
#define TR_TESTS_FUZZ_GRAMMAR_COMMON_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"
#include "base/util.h"

/* The text before the first NUL, the subject after it (empty without one). */
typedef struct fuzz_input {
    const char *text;
    size_t text_len;
    const uint8_t *subj;
    size_t subj_len;
} fuzz_input;

static inline fuzz_input fuzz_input_split(const uint8_t *data, size_t size) {
    const uint8_t *nul = memchr(data, 0, size);
    size_t tlen = nul ? (size_t)(nul - data) : size;
    return (fuzz_input){.text = (const char *)data,
                        .text_len = tlen,
                        .subj = nul ? nul + 1 : data + size,
                        .subj_len = nul ? size - tlen - 1 : 0};
}

/* Budgets small enough that the fuzzer explores syntax and structure, not
 * patience; each target sets its own on top. */
static inline void fuzz_grammar_limits(grammar_limits *lim) {
    tr_grammar_limits_default(lim);
    lim->max_nfa_states = 20000;
    lim->max_dfa_states = 2000;
    lim->max_nesting = 50;
    lim->max_compile_bytes = 32u << 20;
    lim->max_compile_us = 200000;
    lim->mask_cache_bytes = 1u << 16;
}

/* A compile that failed must say why: no grammar, the code in the
 * diagnostic, a message. */
static inline void fuzz_check_refusal(const grammar *g, const tr_diag *diag, tr_status st) {
    if (g || diag->code != st || diag->message[0] == 0) abort();
}

enum { FUZZ_VOCAB_MAX_EXTRA = 32, FUZZ_MASK_WORDS = 8 };

/* The vocabulary above, with extra[0..n_extra) after the bytes (the last
 * two of them special); built on the first call, the same afterwards. */
static grammar_vocab *fuzz_byte_vocab(const char *const *extra, int n_extra) {
    static grammar_vocab *v;
    if (v) return v;
    if (n_extra < 2 || n_extra > FUZZ_VOCAB_MAX_EXTRA) abort();
    static uint8_t bytes[256];
    const uint8_t *tb[256 + FUZZ_VOCAB_MAX_EXTRA];
    uint32_t tl[256 + FUZZ_VOCAB_MAX_EXTRA];
    uint8_t sp[256 + FUZZ_VOCAB_MAX_EXTRA] = {0};
    int n = 256 + n_extra;
    for (int i = 0; i < 256; i++) {
        bytes[i] = (uint8_t)i;
        tb[i] = &bytes[i];
        tl[i] = 1;
    }
    for (int i = 0; i < n_extra; i++) {
        tb[256 + i] = (const uint8_t *)extra[i];
        tl[256 + i] = (uint32_t)strlen(extra[i]);
    }
    sp[n - 1] = sp[n - 2] = 1;
    int32_t eog = n - 2;
    grammar_vocab_desc d = {.n_vocab = n, .token_bytes = tb, .token_lens = tl,
                            .is_special = sp, .eog_ids = &eog, .n_eog = 1};
    if (tr_grammar_vocab_new(&d, &v, NULL) != TR_OK) abort();
    return v;
}

/* A compiled grammar must pass tr_grammar_check; then a matcher over v (8
 * steps of rollback), with *n_words the words of v's masks (at most
 * FUZZ_MASK_WORDS). */
static grammar_matcher *fuzz_matcher_open(grammar *g, grammar_vocab *v, size_t *n_words) {
    if (tr_grammar_check(g) != TR_OK) abort();
    grammar_matcher *m;
    if (tr_grammar_matcher_new(g, v, 8, &m) != TR_OK) abort();
    *n_words = tr_grammar_vocab_mask_words(v);
    if (*n_words > FUZZ_MASK_WORDS) abort();
    return m;
}

/* After subject byte i was taken: every 7th one (i % 7 == 3) is undone and
 * taken again as bytes, which must succeed. */
static inline void fuzz_redo(grammar_matcher *m, const uint8_t *subj, size_t i) {
    if (i % 7 != 3) return;
    if (tr_grammar_matcher_rollback(m, 1) != TR_OK) abort();
    if (tr_grammar_matcher_accept_bytes(m, &subj[i], 1) != TR_OK) abort();
}

/* After the whole subject was taken: the matcher accepts iff the grammar
 * matches the subject, and allows EOG (id n_vocab - 2) iff it accepts.
 * Returns whether it accepts. */
static inline bool fuzz_check_end(const grammar_matcher *m, const grammar *g,
                                  const grammar_vocab *v, const uint8_t *subj,
                                  size_t slen) {
    bool acc = tr_grammar_matcher_is_accepting(m);
    if (acc != tr_grammar_matches(g, subj, slen)) abort();
    int32_t eog = tr_grammar_vocab_n_vocab(v) - 2;
    if (tr_grammar_matcher_token_allowed(m, eog) != acc) abort();
    return acc;
}

#endif
