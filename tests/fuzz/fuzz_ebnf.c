/* fuzz_ebnf.c — libFuzzer target for the EBNF compiler and the matcher
 * over recursive grammars.
 *
 * Input: <grammar text> [ '\0' <subject> ]. The text is compiled under
 * small budgets (so the fuzzer explores syntax and structure, not
 * patience); it must either compile or fail with a diagnostic (code set,
 * message non-empty, line and column set for syntax errors). A compiled
 * grammar must pass tr_grammar_check, and a matcher over a small fixed
 * vocabulary (every byte plus some multi-byte tokens) is driven over the
 * subject byte by byte: each byte's token is in the mask iff
 * token_allowed says so iff accepting it succeeds (or every one of them
 * fails with the stacks budget: then the subject ends there), rollback
 * and redo agree, forced bytes are accepted, and the end agrees with
 * tr_grammar_matches. Any broken invariant aborts (that is how a fuzzer
 * reports). Replayed over tests/fuzz/corpus/ebnf/ by ctest (replay_ebnf).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"
#include "base/util.h"

static grammar_vocab *g_vocab;

static grammar_vocab *vocab(void) {
    if (g_vocab) return g_vocab;
    static const char *const extra[] = {"ab", "abc", "\"", "\":", "{\"", "}]", "12",
                                        "\xc3\xa9", "\xe4\xb8\xad", "  ", "()",
                                        "\xf0\x9f\x98\x80", "true", "<eos>",
                                        "<pad>"};
    enum { N_EXTRA = sizeof extra / sizeof extra[0], N = 256 + N_EXTRA };
    static uint8_t bytes[256];
    const uint8_t *tb[N];
    uint32_t tl[N];
    uint8_t sp[N] = {0};
    for (int i = 0; i < 256; i++) {
        bytes[i] = (uint8_t)i;
        tb[i] = &bytes[i];
        tl[i] = 1;
    }
    for (int i = 0; i < N_EXTRA; i++) {
        tb[256 + i] = (const uint8_t *)extra[i];
        tl[256 + i] = (uint32_t)strlen(extra[i]);
    }
    sp[N - 1] = sp[N - 2] = 1;
    int32_t eog = N - 2;
    grammar_vocab_desc d = {.n_vocab = N, .token_bytes = tb, .token_lens = tl,
                            .is_special = sp, .eog_ids = &eog, .n_eog = 1};
    if (tr_grammar_vocab_new(&d, &g_vocab, NULL) != TR_OK) abort();
    return g_vocab;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *nul = memchr(data, 0, size);
    size_t glen = nul ? (size_t)(nul - data) : size;
    const uint8_t *subj = nul ? nul + 1 : data + size;
    size_t slen = nul ? size - glen - 1 : 0;

    grammar_limits lim;
    tr_grammar_limits_default(&lim);
    lim.max_nfa_states = 20000;
    lim.max_dfa_states = 2000;
    lim.max_lazy_dfa_states = 2000;
    lim.max_repeat = 50;
    lim.max_nesting = 50;
    lim.max_compile_bytes = 32u << 20;
    lim.max_compile_us = 200000;
    lim.mask_cache_bytes = 1u << 16;
    lim.max_grammar_bytes = 1u << 16;
    lim.max_stacks = 64;

    grammar *g = NULL;
    tr_diag diag;
    tr_status st = tr_grammar_compile_ebnf((const char *)data, glen, &lim, &g, &diag);
    if (st != TR_OK) {
        if (g || diag.code != st || diag.message[0] == 0) abort();
        if (st == TR_ERR_FORMAT && (diag.line < 1 || diag.column < 1)) abort();
        return 0;
    }
    if (tr_grammar_check(g) != TR_OK) abort();

    grammar_vocab *v = vocab();
    grammar_matcher *m;
    if (tr_grammar_matcher_new(g, v, 8, &m) != TR_OK) abort();
    uint64_t mask[8];
    size_t nw = tr_grammar_vocab_mask_words(v);
    if (nw > 8) abort();
    bool alive = true, budget = false;
    for (size_t i = 0; i < slen && alive; i++) {
        tr_status f = tr_grammar_matcher_fill_mask(m, mask, nw);
        if (f == TR_ERR_LIMIT) { /* a very ambiguous grammar: fine */
            budget = true;
            break;
        }
        if (f != TR_OK) abort();
        int32_t id = subj[i];
        bool in = (mask[id >> 6] >> (id & 63)) & 1;
        bool allowed = tr_grammar_matcher_token_allowed(m, id);
        tr_status a = tr_grammar_matcher_accept_token(m, id);
        if (a == TR_ERR_LIMIT) {
            budget = true;
            break;
        }
        if (in != (a == TR_OK) || (allowed != in && !budget)) abort();
        alive = a == TR_OK;
        if (alive && (i % 7) == 3) { /* rollback and redo */
            if (tr_grammar_matcher_rollback(m, 1) != TR_OK) abort();
            if (tr_grammar_matcher_accept_bytes(m, &subj[i], 1) != TR_OK) abort();
        }
    }
    if (alive && !budget) {
        bool acc = tr_grammar_matcher_is_accepting(m);
        if (acc != tr_grammar_matches(g, subj, slen)) abort();
        int32_t eog = tr_grammar_vocab_n_vocab(v) - 2;
        if (tr_grammar_matcher_token_allowed(m, eog) != acc) abort();
        if (!acc && !tr_grammar_matcher_can_continue(m)) abort();
        uint8_t fb[64];
        size_t fl;
        if (tr_grammar_matcher_forced_bytes(m, fb, sizeof fb, &fl) != TR_OK) abort();
        tr_status fa = fl ? tr_grammar_matcher_accept_bytes(m, fb, fl) : TR_OK;
        if (fa != TR_OK && fa != TR_ERR_LIMIT) abort();
        if (fl && fa == TR_OK && tr_grammar_matcher_rollback(m, 1) != TR_OK) abort();
    } else if (!budget && tr_grammar_matches(g, subj, slen)) {
        abort(); /* died on a prefix of a matching string */
    }
    tr_grammar_matcher_free(m);
    tr_grammar_free(g);
    return 0;
}
