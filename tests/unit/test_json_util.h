/* test_json_util.h — helpers of the JSON Schema tests: a byte-level
 * vocabulary (every byte a token, plus one end-of-generation token), the
 * byte-level acceptance check through the real matcher, Python-style
 * serialization of JSON values, and where the shared test data lives.
 */
#ifndef TR_TEST_JSON_UTIL_H
#define TR_TEST_JSON_UTIL_H

#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "grammar/grammar.h"

/* TRELLIS_TEST_SCALE=small (the sanitizer pass): fewer cases. */
static inline bool small_scale_json(void) {
    const char *s = getenv("TRELLIS_TEST_SCALE");
    return s && strcmp(s, "small") == 0;
}

/* 256 one-byte tokens (0x00..0xFF) and an EOG token (id 256). */
static inline grammar_vocab *tj_byte_vocab(void) {
    static uint8_t bytes[256];
    const uint8_t *tb[257];
    uint32_t tl[257];
    for (int i = 0; i < 256; i++) {
        bytes[i] = (uint8_t)i;
        tb[i] = &bytes[i];
        tl[i] = 1;
    }
    tb[256] = NULL;
    tl[256] = 0;
    uint8_t sp[257] = {0};
    sp[256] = 1;
    int32_t eog = 256;
    grammar_vocab_desc d = {.n_vocab = 257, .token_bytes = tb, .token_lens = tl,
                            .is_special = sp, .eog_ids = &eog, .n_eog = 1};
    grammar_vocab *v = NULL;
    if (tr_grammar_vocab_new(&d, &v, NULL) != TR_OK) return NULL;
    return v;
}

/* Whether the grammar accepts exactly text[0..n): fed byte by byte through
 * a fresh matcher (each byte must be allowed by the mask too), then EOG. */
static inline bool tj_accepts(grammar *g, grammar_vocab *v, const char *text, size_t n) {
    grammar_matcher *m = NULL;
    if (tr_grammar_matcher_new(g, v, 0, &m) != TR_OK) return false;
    size_t nw = tr_grammar_vocab_mask_words(v);
    uint64_t mask[8];
    bool ok = true;
    for (size_t i = 0; i < n && ok; i++) {
        int32_t id = (uint8_t)text[i];
        if (tr_grammar_matcher_fill_mask(m, mask, nw) != TR_OK) ok = false;
        bool allowed = (mask[id >> 6] >> (id & 63)) & 1;
        bool took = ok && tr_grammar_matcher_accept_token(m, id) == TR_OK;
        if (allowed != took) {
            fprintf(stderr, "tj_accepts: mask and accept disagree at byte %zu\n", i);
            abort();
        }
        ok = took;
    }
    ok = ok && tr_grammar_matcher_is_accepting(m) &&
         tr_grammar_matcher_accept_token(m, 256) == TR_OK;
    tr_grammar_matcher_free(m);
    return ok;
}

static inline char *tj_dumps(const json_t *v) {
    char *buf = NULL;
    size_t len = 0, cap = 0;
    if (!tr_grammar_json_dumps_py(v, &buf, &len, &cap)) {
        free(buf);
        return NULL;
    }
    return buf;
}

/* $TRELLIS_SHARED_DATA, else ../shared/data beside the source tree (CI),
 * else ../../shared/data (a worktree one level deeper), else the cache
 * where scripts/setup.sh unpacks the JSON-Schema-Test-Suite when neither
 * is there ($TRELLIS_CACHE, else $XDG_CACHE_HOME or ~/.cache under
 * trellis/): it holds json-schema-test-suite/ only. */
static inline const char *tj_shared_data(char *buf, size_t cap) {
    const char *e = getenv("TRELLIS_SHARED_DATA");
    if (e && *e) {
        snprintf(buf, cap, "%s", e);
        return buf;
    }
#ifdef TRELLIS_SOURCE_DIR
    const char *src = TRELLIS_SOURCE_DIR;
#else
    const char *src = ".";
#endif
    snprintf(buf, cap, "%s/../shared/data", src);
    if (access(buf, R_OK) == 0) return buf;
    snprintf(buf, cap, "%s/../../shared/data", src);
    if (access(buf, R_OK) == 0) return buf;
    const char *cache = getenv("TRELLIS_CACHE"), *xdg = getenv("XDG_CACHE_HOME"),
               *home = getenv("HOME");
    if (cache && *cache) snprintf(buf, cap, "%s", cache);
    else if (xdg && *xdg) snprintf(buf, cap, "%s/trellis", xdg);
    else snprintf(buf, cap, "%s/.cache/trellis", home ? home : ".");
    return buf;
}

#endif
