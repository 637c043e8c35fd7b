/* fuzz_json_schema.c — libFuzzer target for the JSON Schema compiler.
 *
 * Input: <schema JSON> [ '\0' <instance> ]. The schema is compiled under
 * small budgets, in strict and in lenient mode: each must either compile
 * or fail with a diagnostic (code set, message non-empty). A compiled
 * grammar is driven over the instance byte by byte through a matcher on
 * a byte vocabulary: a byte's token must be in the mask iff accepting it
 * succeeds. Strict mode bounds whitespace runs at 1-4 bytes (by the
 * input's size): an accepted instance must not hold a longer run outside
 * its strings. Numbers are canonical or full, properties in schema or
 * any order (by the input's size too: every mode, at no extra compile). If the whole instance is accepted in strict mode, it must be
 * valid JSON that the compiler's own validator (json_valid.c) declares
 * valid against the schema: the grammar never lets through what the
 * schema forbids; and no object in it may repeat a key (jansson's
 * JSON_REJECT_DUPLICATES), in either mode. Any broken invariant aborts. Replayed over
 * tests/fuzz/corpus/json_schema/ by ctest (replay_json_schema).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "grammar/grammar.h"
#include "grammar/json/json_internal.h"

static grammar_vocab *g_vocab;

static grammar_vocab *vocab(void) {
    if (g_vocab) return g_vocab;
    static uint8_t bytes[256];
    const uint8_t *tb[257];
    uint32_t tl[257];
    uint8_t sp[257] = {0};
    for (int i = 0; i < 256; i++) {
        bytes[i] = (uint8_t)i;
        tb[i] = &bytes[i];
        tl[i] = 1;
    }
    tb[256] = NULL;
    tl[256] = 0;
    sp[256] = 1;
    int32_t eog = 256;
    grammar_vocab_desc d = {.n_vocab = 257, .token_bytes = tb, .token_lens = tl,
                            .is_special = sp, .eog_ids = &eog, .n_eog = 1};
    if (tr_grammar_vocab_new(&d, &g_vocab, NULL) != TR_OK) abort();
    return g_vocab;
}

/* Feeds the instance; returns whether all of it and then EOG were taken. */
static bool drive(grammar *g, const uint8_t *s, size_t n) {
    grammar_matcher *m = NULL;
    if (tr_grammar_matcher_new(g, vocab(), 0, &m) != TR_OK) abort();
    uint64_t mask[8];
    size_t nw = tr_grammar_vocab_mask_words(vocab());
    bool ok = true;
    for (size_t i = 0; i < n && ok; i++) {
        if (tr_grammar_matcher_fill_mask(m, mask, nw) != TR_OK) {
            ok = false; /* a stack budget: nothing allowed */
            break;
        }
        bool bit = (mask[s[i] >> 6] >> (s[i] & 63)) & 1;
        bool took = tr_grammar_matcher_accept_token(m, s[i]) == TR_OK;
        if (bit != took) abort();
        ok = took;
    }
    ok = ok && tr_grammar_matcher_accept_token(m, 256) == TR_OK;
    tr_grammar_matcher_free(m);
    return ok;
}

/* The longest run of JSON blanks outside strings in t. */
static size_t longest_blank_run(const uint8_t *t, size_t n) {
    size_t run = 0, best = 0;
    bool str = false;
    for (size_t i = 0; i < n; i++) {
        if (str) {
            if (t[i] == '\\') i++;
            else if (t[i] == '"') str = false;
            continue;
        }
        str = t[i] == '"';
        run = (t[i] == ' ' || t[i] == '\t' || t[i] == '\n' || t[i] == '\r') ? run + 1 : 0;
        best = run > best ? run : best;
    }
    return best;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *nul = memchr(data, 0, size);
    size_t slen = nul ? (size_t)(nul - data) : size;
    const uint8_t *inst = nul ? nul + 1 : data + size;
    size_t ilen = nul ? size - slen - 1 : 0;
    grammar_limits lim;
    tr_grammar_limits_default(&lim);
    lim.max_nfa_states = 50000;
    lim.max_dfa_states = 5000;
    lim.max_lazy_dfa_states = 5000;
    lim.max_compile_bytes = 64u << 20;
    lim.max_compile_us = 300000;
    for (int lenient = 0; lenient < 2; lenient++) {
        grammar_json_options o;
        tr_grammar_json_options_default(&o);
        o.lenient = lenient;
        if (!lenient) o.max_ws_run = 1 + (uint32_t)(size % 4); /* counted by the matcher */
        o.numbers = (size >> 2) & 1 ? GRAMMAR_JSON_NUM_FULL : GRAMMAR_JSON_NUM_CANONICAL;
        o.property_order = (size >> 3) & 1 ? GRAMMAR_JSON_ORDER_ANY : GRAMMAR_JSON_ORDER_SCHEMA;
        grammar *g = NULL;
        tr_diag d;
        tr_status st = tr_grammar_compile_json_schema((const char *)data, slen, &o, &lim, &g, &d);
        if (st) {
            if (!d.code || !d.message[0]) abort();
            continue;
        }
        if (tr_grammar_check(g) != TR_OK) abort();
        bool acc = drive(g, inst, ilen);
        tr_grammar_free(g);
        if (!acc) continue;
        json_error_t je;
        json_t *dup = json_loadb((const char *)inst, ilen, JSON_DECODE_ANY | JSON_ALLOW_NUL |
                                 JSON_REJECT_DUPLICATES, &je);
        if (!dup && strstr(je.text, "duplicate")) {
            fprintf(stderr, "accepted a repeated key: %.*s (%s)\n", (int)ilen,
                    (const char *)inst, je.text);
            abort();
        }
        json_decref(dup);
        if (lenient) continue;
        if (longest_blank_run(inst, ilen) > o.max_ws_run) {
            fprintf(stderr, "accepted a run of blanks over %u: %.*s\n", o.max_ws_run, (int)ilen,
                    (const char *)inst);
            abort();
        }
        bool valid = false;
        tr_diag vd;
        st = tr_js_check_instance((const char *)data, slen, (const char *)inst, ilen, &valid, &vd);
        /* accepted text must parse and be valid (a validator refusal of
         * the schema itself, e.g. a budget, proves nothing) */
        bool jansson_limit = strstr(vd.message, "too big") || strstr(vd.message, "overflow") ||
                             strstr(vd.message, "NUL") || strstr(vd.message, "depth");
        if (st == TR_ERR_FORMAT && strstr(vd.message, "instance") && !jansson_limit) {
            fprintf(stderr, "accepted a non-JSON text: %.*s (%s)\n", (int)ilen,
                    (const char *)inst, vd.message);
            abort();
        }
        if (!st && !valid) {
            fprintf(stderr, "accepted an invalid instance: %.*s\n", (int)ilen, (const char *)inst);
            abort();
        }
    }
    return 0;
}
