/* fuzz_regex.c — libFuzzer target for the regex compiler and the matcher.
 *
 * Input: <pattern> [ '\0' <subject> ]. The pattern is compiled under
 * small budgets (so the fuzzer explores syntax, not patience); it must
 * either compile or fail with a diagnostic (code set, message non-empty).
 * A compiled grammar must pass tr_grammar_check, and a matcher over a small
 * fixed vocabulary (every single byte plus some multi-byte tokens) is
 * driven over the subject byte by byte: each byte's token must be in the
 * mask iff accepting it succeeds, forced bytes must be accepted, rollback
 * must restore, and the walk must agree with tr_grammar_matches. Any broken
 * invariant aborts (that is how a fuzzer reports). Replayed over
 * tests/fuzz/corpus/regex/ by ctest (replay_regex).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tests/fuzz/fuzz_grammar_common.h"

/* the multi-byte tokens after the 256 byte tokens (the last two special) */
static const char *const k_extra[] = {"ab", "abc", "\"", "\":", "{\"", "12",
                                      "\xc3\xa9", "\xe4\xb8\xad", "  ",
                                      "\xf0\x9f\x98\x80", "true", "<eos>",
                                      "<pad>"};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    grammar_limits lim;
    fuzz_grammar_limits(&lim);
    lim.max_repeat = 200;

    fuzz_input input = fuzz_input_split(data, size);
    const uint8_t *subj = input.subj;
    size_t slen = input.subj_len;

    grammar *g = NULL;
    tr_diag diag;
    tr_status st = tr_grammar_compile_regex(input.text, input.text_len, &lim, &g, &diag);
    if (st != TR_OK) {
        fuzz_check_refusal(g, &diag, st);
        return 0;
    }

    grammar_vocab *v = fuzz_byte_vocab(k_extra, (int)TR_ARRAY_LEN(k_extra));
    size_t nw;
    grammar_matcher *m = fuzz_matcher_open(g, v, &nw);
    uint64_t mask[FUZZ_MASK_WORDS];
    bool alive = true;
    for (size_t i = 0; i < slen && alive; i++) {
        if (tr_grammar_matcher_fill_mask(m, mask, nw) != TR_OK) abort();
        int32_t id = subj[i];
        bool in = (mask[id >> 6] >> (id & 63)) & 1;
        tr_status a = tr_grammar_matcher_accept_token(m, id);
        if (in != (a == TR_OK)) abort();
        alive = a == TR_OK;
        if (alive) fuzz_redo(m, subj, i);
    }
    if (alive) {
        fuzz_check_end(m, g, v, subj, slen);
        uint8_t fb[64];
        size_t fl;
        if (tr_grammar_matcher_forced_bytes(m, fb, sizeof fb, &fl) != TR_OK) abort();
        if (fl && tr_grammar_matcher_accept_bytes(m, fb, fl) != TR_OK) abort();
        if (fl && tr_grammar_matcher_rollback(m, 1) != TR_OK) abort();
    } else if (tr_grammar_matches(g, subj, slen)) {
        abort(); /* died on a prefix of a matching string */
    }
    tr_grammar_matcher_free(m);
    tr_grammar_free(g);
    return 0;
}
