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

#include "tests/fuzz/fuzz_grammar_common.h"

/* the multi-byte tokens after the 256 byte tokens (the last two special) */
static const char *const k_extra[] = {"ab", "abc", "\"", "\":", "{\"", "}]", "12",
                                      "\xc3\xa9", "\xe4\xb8\xad", "  ", "()",
                                      "\xf0\x9f\x98\x80", "true", "<eos>",
                                      "<pad>"};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    grammar_limits lim;
    fuzz_grammar_limits(&lim);
    lim.max_lazy_dfa_states = 2000;
    lim.max_repeat = 50;
    lim.max_grammar_bytes = 1u << 16;
    lim.max_stacks = 64;

    fuzz_input input = fuzz_input_split(data, size);
    const uint8_t *subj = input.subj;
    size_t slen = input.subj_len;

    grammar *g = NULL;
    tr_diag diag;
    /* the %json-aware entry: without %json the same as tr_grammar_compile_ebnf */
    tr_status st =
        tr_grammar_compile_ebnf_json(input.text, input.text_len, NULL, &lim, &g, &diag);
    if (st != TR_OK) {
        fuzz_check_refusal(g, &diag, st);
        if (st == TR_ERR_FORMAT && (diag.line < 1 || diag.column < 1)) abort();
        return 0;
    }

    grammar_vocab *v = fuzz_byte_vocab(k_extra, (int)TR_ARRAY_LEN(k_extra));
    size_t nw;
    grammar_matcher *m = fuzz_matcher_open(g, v, &nw);
    uint64_t mask[FUZZ_MASK_WORDS];
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
        if (alive) fuzz_redo(m, subj, i);
    }
    if (alive && !budget) {
        bool acc = fuzz_check_end(m, g, v, subj, slen);
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
