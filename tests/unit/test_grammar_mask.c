/* test_grammar_mask.c — vocabularies, token masks and matchers.
 *
 *   - the vocabulary trie (tr_grammar_vocab_check) on hand-made, random and
 *     SmolLM2 vocabularies, and tr_grammar_vocab_new's argument checks;
 *   - masks against brute force (every token run through the DFA on its
 *     own) for every state of small DFAs on a random vocabulary;
 *   - SmolLM2 (skipped without the model file): for states sampled by
 *     random token walks, every token in the mask is accepted by the
 *     matcher and every token outside is rejected (all 49,152 each time);
 *   - the matcher API: EOG only when accepting, special and empty tokens
 *     never, all-or-nothing accept_bytes, rollback through a bounded ring,
 *     forced bytes, reset, argument errors;
 *   - the mask memo: results identical with the memo off, full, or
 *     bounded, and the fallback recomputes past the budget;
 *   - threads sharing one grammar and its memo.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tests/unit/test_grammar_util.h"

static grammar *compile(const char *pat, const grammar_limits *lim) {
    grammar *g = NULL;
    tr_diag d;
    tr_status st = tr_grammar_compile_regex(pat, strlen(pat), lim, &g, &d);
    if (st) fprintf(stderr, "/%s/: %s\n", pat, d.message);
    assert_int_equal(st, TR_OK);
    return g;
}

/* ---- vocabulary ---- */

static void test_vocab_small(void **state) {
    (void)state;
    static const char *const toks[] = {"a", "ab", "abc", "b", "bx", "ab",
                                       "",  "x", "<eos>", "<s>"};
    grammar_vocab *v = tg_vocab_from_strings(toks, 10, 2, 8);
    assert_non_null(v);
    assert_int_equal(tr_grammar_vocab_check(v), TR_OK);
    assert_int_equal(tr_grammar_vocab_n_vocab(v), 10);
    assert_int_equal(tr_grammar_vocab_mask_words(v), 1);
    /* root + a ab abc b bx x = 7 nodes; "ab" twice: one duplicate */
    assert_int_equal(v->trie.n_nodes, 7);
    assert_int_equal(v->n_dups, 1);
    assert_int_equal(v->dups[0][0], 1);
    assert_int_equal(v->dups[0][1], 5);
    assert_int_equal(v->max_len, 3);
    size_t len;
    const uint8_t *b = tr_grammar_vocab_token_bytes(v, 2, &len);
    assert_int_equal(len, 3);
    assert_memory_equal(b, "abc", 3);
    assert_null(tr_grammar_vocab_token_bytes(v, 10, &len));
    assert_int_equal(len, 0);
    assert_null(tr_grammar_vocab_token_bytes(v, -1, &len));
    assert_true(tr_grammar_vocab_is_eog(v, 8));
    assert_true(tr_grammar_vocab_is_special(v, 9));
    assert_false(tr_grammar_vocab_is_special(v, 0));
    assert_false(tr_grammar_vocab_is_eog(v, 99));

    grammar *g = compile("ab*", NULL);
    grammar_matcher *m;
    assert_int_equal(tr_grammar_matcher_new(g, v, 0, &m), TR_OK);
    uint64_t mask[1];
    assert_int_equal(tr_grammar_matcher_fill_mask(m, mask, 1), TR_OK);
    /* a, ab, abc? no (c kills) -> a(0) ab(1) ab-dup(5) */
    assert_int_equal(mask[0], (1u << 0) | (1u << 1) | (1u << 5));
    assert_int_equal(tr_grammar_matcher_accept_token(m, 0), TR_OK);
    assert_int_equal(tr_grammar_matcher_fill_mask(m, mask, 1), TR_OK);
    /* after "a": accepting, so <eos>(8); b(3) */
    assert_int_equal(mask[0], (1u << 3) | (1u << 8));
    tr_grammar_matcher_free(m);
    tr_grammar_free(g);
    tr_grammar_vocab_free(v);
}

static void test_vocab_errors(void **state) {
    (void)state;
    const uint8_t *b[2] = {(const uint8_t *)"a", NULL};
    uint32_t l[2] = {1, 1};
    int32_t eog = 5;
    grammar_vocab *v = NULL;
    tr_diag d;
    grammar_vocab_desc desc = {.n_vocab = 2, .token_bytes = b, .token_lens = l};
    /* NULL bytes with a nonzero length */
    assert_int_equal(tr_grammar_vocab_new(&desc, &v, &d), TR_ERR_INVALID_ARG);
    assert_non_null(strstr(d.message, "token 1"));
    assert_null(v);
    l[1] = 0; /* now fine: an empty token */
    assert_int_equal(tr_grammar_vocab_new(&desc, &v, &d), TR_OK);
    tr_grammar_vocab_free(v);
    v = NULL;
    desc.eog_ids = &eog;
    desc.n_eog = 1;
    assert_int_equal(tr_grammar_vocab_new(&desc, &v, &d), TR_ERR_INVALID_ARG);
    assert_non_null(strstr(d.message, "EOG"));
    desc.n_eog = 0;
    desc.n_vocab = 0;
    assert_int_equal(tr_grammar_vocab_new(&desc, &v, &d), TR_ERR_INVALID_ARG);
    desc.n_vocab = 2;
    l[0] = 70000;
    assert_int_equal(tr_grammar_vocab_new(&desc, &v, &d), TR_ERR_LIMIT);
    assert_int_equal(tr_grammar_vocab_new(NULL, &v, &d), TR_ERR_INVALID_ARG);
    assert_null(v);
}

static void test_vocab_random(void **state) {
    (void)state;
    tg_rng r = {42};
    for (int k = 0; k < 5; k++) {
        grammar_vocab *v = tg_vocab_random(&r, 600 + 500 * k);
        assert_non_null(v);
        assert_int_equal(tr_grammar_vocab_check(v), TR_OK);
        assert_true(v->n_dups > 0);
        tr_grammar_vocab_free(v);
    }
}

/* ---- masks against brute force, every state ---- */

static const char *const k_mask_patterns[] = {
    "ab*c?", "[0-9]+(\\.[0-9]+)?", "\"([^\"\\\\]|\\\\.)*\"", ".*", ".{0,5}",
    "\\p{L}+", "(true|false|null)", "\\{\"a\": \\d+\\}", "é+|中",
    "[\\x{80}-\\x{10FFFF}]*x", "a{3}b{2,4}", "[^a]*", "(\\n|x)*",
    "\\d{4}-\\d{2}-\\d{2}", "(ab|cd|xy)*", "[\\s\\S]*", "(😀|😂)+",
};

static void check_all_states(const grammar *g, grammar_vocab *v,
                             grammar_matcher *m) {
    const gdfa *d = &g->dfa;
    size_t nw = v->n_words;
    uint64_t *want = malloc(nw * 8), *got = malloc(nw * 8);
    for (uint32_t s = 1; s < d->n_states; s++) {
        tg_brute_mask(d, s, v, want);
        m->state = s; /* white-box: visit every state directly */
        assert_int_equal(tr_grammar_matcher_fill_mask(m, got, nw), TR_OK);
        assert_memory_equal(want, got, nw * 8);
        /* again: now from the memo */
        assert_int_equal(tr_grammar_matcher_fill_mask(m, got, nw), TR_OK);
        assert_memory_equal(want, got, nw * 8);
    }
    free(want), free(got);
}

static void test_mask_brute_force_random_vocab(void **state) {
    (void)state;
    tg_rng r = {7};
    grammar_vocab *v = tg_vocab_random(&r, 2000);
    assert_non_null(v);
    for (size_t i = 0; i < TR_ARRAY_LEN(k_mask_patterns); i++) {
        grammar *g = compile(k_mask_patterns[i], NULL);
        grammar_matcher *m;
        assert_int_equal(tr_grammar_matcher_new(g, v, 0, &m), TR_OK);
        check_all_states(g, v, m);
        tr_grammar_matcher_free(m);
        tr_grammar_free(g);
    }
    /* vocabularies whose size is a multiple of 64 (no padding bits) */
    grammar_vocab *v2 = tg_vocab_random(&r, 1024);
    grammar *g = compile(".*", NULL);
    grammar_matcher *m;
    assert_int_equal(tr_grammar_matcher_new(g, v2, 0, &m), TR_OK);
    check_all_states(g, v2, m);
    tr_grammar_matcher_free(m);
    tr_grammar_free(g);
    tr_grammar_vocab_free(v2);
    tr_grammar_vocab_free(v);
}

/* A vocabulary of every string of up to 4 symbols over {a b " \\ .},
 * plus a few non-ASCII tokens: big ASCII-only subtrees, so the walk's
 * shortcut (taking a whole subtree when its bytes loop the state) is
 * exercised at every depth, and must agree with brute force. */
static void test_mask_ascii_shortcut(void **state) {
    (void)state;
    static const char sym[] = "ab\"\\.";
    char *store = malloc(1000 * 8);
    const char **toks = malloc(1000 * sizeof *toks);
    int32_t n = 0;
    for (int len = 1; len <= 4; len++) {
        int total = 1;
        for (int i = 0; i < len; i++) total *= 5;
        for (int code = 0; code < total; code++) {
            char *t = store + n * 8;
            int c = code;
            for (int i = 0; i < len; i++, c /= 5) t[i] = sym[c % 5];
            t[len] = 0;
            toks[n++] = t;
        }
    }
    static const char *const extra[] = {"a\xc3\xa9", "\xc3\xa9", "\xe4\xb8\xad",
                                        "a\xe4", "</s>"};
    for (size_t i = 0; i < TR_ARRAY_LEN(extra); i++) toks[n++] = extra[i];
    grammar_vocab *v = tg_vocab_from_strings(toks, n, 1, n - 1);
    assert_non_null(v);
    assert_int_equal(tr_grammar_vocab_check(v), TR_OK);
    assert_true(v->trie.n_checks > 20);
    static const char *const pats[] = {
        "[^\"]*\"", "\"([^\"\\\\]|\\\\.)*\"", "[ab.]*", ".*", "(a|b)*\"?",
        "[^a]*a", "\\.*", "[ab]{0,3}\"[\\x{80}-\\x{10FFFF}]*",
        /* counted repetition: the walk follows uniform chains */
        "[ab.\"\\\\]{2,6}", "(a|b|\\.){0,7}x", "[^x]{3,9}", ".{1,4}\"",
    };
    for (size_t i = 0; i < TR_ARRAY_LEN(pats); i++) {
        grammar *g = compile(pats[i], NULL);
        grammar_matcher *m;
        assert_int_equal(tr_grammar_matcher_new(g, v, 0, &m), TR_OK);
        check_all_states(g, v, m);
        tr_grammar_matcher_free(m);
        tr_grammar_free(g);
    }
    tr_grammar_vocab_free(v);
    free(toks);
    free(store);
}

/* ---- SmolLM2: brute force through the matcher API ---- */

static grammar_vocab *g_smol;
static bool g_smol_tried;

static grammar_vocab *smol(void) {
    if (!g_smol_tried) {
        g_smol_tried = true;
        g_smol = tg_vocab_smollm2();
    }
    return g_smol;
}

/* Picks a random allowed token of mask (or -1 if none). */
static int32_t pick_token(tg_rng *r, const uint64_t *mask, size_t nw,
                          const grammar_vocab *v, bool allow_eog) {
    size_t n = tr_grammar_mask_count(mask, nw);
    if (n == 0) return -1;
    for (int tries = 0; tries < 8; tries++) {
        int32_t id = tr_grammar_mask_nth(mask, nw, tg_below(r, (uint32_t)n));
        if (allow_eog || !tr_grammar_vocab_is_eog(v, id)) return id;
    }
    return -1;
}

/* tr_grammar_mask_count / tr_grammar_mask_nth against a bit-by-bit walk, on
 * empty, full, sparse and random masks. */
static void test_mask_count_nth(void **state) {
    (void)state;
    tg_rng r = {7};
    enum { NW = 5 };
    uint64_t m[NW];
    for (int trial = 0; trial < 200; trial++) {
        for (size_t w = 0; w < NW; w++) {
            uint64_t x = tg_next(&r);
            m[w] = trial == 0 ? 0 : trial == 1 ? ~0ull : trial % 3 == 0 ? x & (x >> 7) & (x >> 13) : x;
        }
        size_t k = 0;
        for (int32_t id = 0; id < NW * 64; id++) {
            if (!((m[id / 64] >> (id % 64)) & 1)) continue;
            assert_int_equal(tr_grammar_mask_nth(m, NW, k), id);
            k++;
        }
        assert_int_equal(tr_grammar_mask_count(m, NW), k);
        assert_int_equal(tr_grammar_mask_nth(m, NW, k), -1);
        assert_int_equal(tr_grammar_mask_nth(m, NW, k + 1000), -1);
    }
}

static void test_mask_smollm2(void **state) {
    (void)state;
    grammar_vocab *v = smol();
    if (!v) skip();
    assert_int_equal(tr_grammar_vocab_check(v), TR_OK);
    assert_int_equal(tr_grammar_vocab_n_vocab(v), 49152);
    fprintf(stderr, "SmolLM2 trie: %u nodes, longest token %u bytes, %u duplicates\n",
            v->trie.n_nodes, v->max_len, v->n_dups);
    static const char *const pats[] = {
        "[^\"]*\"", "\\d+(\\.\\d+)?", "\"([^\"\\\\]|\\\\.)*\"",
        "\\{\"name\": \"[A-Za-z ]{1,20}\", \"age\": \\d{1,3}\\}",
        "(true|false)", "\\p{L}+( \\p{L}+)*", ".{0,40}",
        "[a-z]+(_[a-z0-9]+)*", "\\d{4}-\\d{2}-\\d{2}",
        "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}", "(😀|😂|❤️)+ ok",
        "[\\u4e00-\\u9fff]{1,5}", "\\s*\\[\\s*(\\d+\\s*,\\s*)*\\d+\\s*\\]",
        "<[a-z]+>[^<]*</[a-z]+>", "[A-Z][a-z]+( [A-Z][a-z]+)*",
        "-?(0|[1-9]\\d*)(\\.\\d+)?([eE][+-]?\\d+)?", "(\\w+\\s?){1,5}",
        "[^\\n]{0,80}\\n", "(yes|no|maybe)",
    };
    size_t nw = v->n_words;
    uint64_t *mask = malloc(nw * 8), *want = malloc(nw * 8);
    tg_rng r = {2024};
    size_t states = 0, checks = 0;
    for (size_t p = 0; p < TR_ARRAY_LEN(pats); p++) {
        grammar *g = compile(pats[p], NULL);
        grammar_matcher *m;
        assert_int_equal(tr_grammar_matcher_new(g, v, 0, &m), TR_OK);
        for (int step = 0; step < 8; step++) {
            assert_int_equal(tr_grammar_matcher_fill_mask(m, mask, nw), TR_OK);
            /* the trie walk equals running each token on its own */
            tg_brute_mask(&g->dfa, m->state, v, want);
            assert_memory_equal(mask, want, nw * 8);
            /* and the matcher agrees, token by token */
            for (int32_t id = 0; id < v->n_vocab; id++) {
                bool in = tg_bit(mask, id);
                tr_status st = tr_grammar_matcher_accept_token(m, id);
                if (in) {
                    assert_int_equal(st, TR_OK);
                    assert_int_equal(tr_grammar_matcher_rollback(m, 1), TR_OK);
                } else {
                    assert_int_equal(st, TR_ERR_STATE);
                }
                assert_int_equal(tr_grammar_matcher_token_allowed(m, id), in);
                checks++;
            }
            states++;
            int32_t id = pick_token(&r, mask, nw, v, false);
            if (id < 0) break;
            assert_int_equal(tr_grammar_matcher_accept_token(m, id), TR_OK);
        }
        tr_grammar_matcher_free(m);
        tr_grammar_free(g);
    }
    fprintf(stderr, "SmolLM2: %zu states, %zu (state, token) checks\n", states, checks);
    assert_true(states >= 100);
    free(mask), free(want);
}

/* ---- matcher API ---- */

static void test_matcher_api(void **state) {
    (void)state;
    static const char *const toks[] = {
        "{", "\"", "name", "\":", " \"", "Bob", "\",", " \"age", "\": ",
        "4", "2", "42", "}", "x", "", "é", "\xc3", "\xa9",
        "{\"name\": \"", "<|im_end|>", "<|im_start|>"};
    const int32_t n = (int32_t)TR_ARRAY_LEN(toks);
    grammar_vocab *v = tg_vocab_from_strings(toks, n, 2, 19);
    assert_non_null(v);
    grammar *g = compile("\\{\"name\": \"[A-Za-z]+\", \"age\": \\d+\\}", NULL);
    grammar_matcher *m;
    assert_int_equal(tr_grammar_matcher_new(g, v, 4, &m), TR_OK);
    uint64_t mask[1];
    uint8_t buf[64];
    size_t len;

    /* forced text at the start */
    assert_int_equal(tr_grammar_matcher_forced_bytes(m, buf, sizeof buf, &len), TR_OK);
    assert_int_equal(len, 10);
    assert_memory_equal(buf, "{\"name\": \"", 10);
    assert_int_equal(tr_grammar_matcher_forced_bytes(m, buf, 3, &len), TR_OK);
    assert_int_equal(len, 3); /* capped */
    assert_false(tr_grammar_matcher_is_accepting(m));
    assert_true(tr_grammar_matcher_can_continue(m));

    /* mask: "{" and the whole forced prefix token; never special/empty */
    assert_int_equal(tr_grammar_matcher_fill_mask(m, mask, 1), TR_OK);
    assert_int_equal(mask[0], (1u << 0) | (1u << 18));
    assert_int_equal(tr_grammar_matcher_fill_mask(m, mask, 2), TR_ERR_INVALID_ARG);
    assert_int_equal(tr_grammar_matcher_fill_mask(m, NULL, 1), TR_ERR_INVALID_ARG);

    /* rejections leave the state alone */
    assert_int_equal(tr_grammar_matcher_accept_token(m, 13), TR_ERR_STATE);
    assert_int_equal(tr_grammar_matcher_accept_token(m, 14), TR_ERR_STATE); /* empty */
    assert_int_equal(tr_grammar_matcher_accept_token(m, 19), TR_ERR_STATE); /* EOG */
    assert_int_equal(tr_grammar_matcher_accept_token(m, 20), TR_ERR_STATE); /* special */
    assert_int_equal(tr_grammar_matcher_accept_token(m, n), TR_ERR_INVALID_ARG);
    assert_int_equal(tr_grammar_matcher_accept_token(m, -1), TR_ERR_INVALID_ARG);
    assert_false(tr_grammar_matcher_token_allowed(m, n));
    assert_int_equal(tr_grammar_matcher_history_len(m), 0);

    /* accept the forced bytes, then tokens */
    assert_int_equal(tr_grammar_matcher_accept_bytes(m, buf, 0), TR_OK); /* no-op call */
    assert_int_equal(tr_grammar_matcher_rollback(m, 1), TR_OK);
    assert_int_equal(tr_grammar_matcher_accept_bytes(m, "{\"name\": \"Bo", 12), TR_OK);
    /* all or nothing: a dying byte run changes nothing */
    assert_int_equal(tr_grammar_matcher_accept_bytes(m, "b1", 2), TR_ERR_STATE);
    assert_int_equal(tr_grammar_matcher_accept_bytes(m, "b", 1), TR_OK);
    assert_int_equal(tr_grammar_matcher_accept_token(m, 6), TR_OK);   /* ", */
    assert_int_equal(tr_grammar_matcher_forced_bytes(m, buf, sizeof buf, &len), TR_OK);
    assert_int_equal(len, 8);
    assert_memory_equal(buf, " \"age\": ", 8);
    assert_int_equal(tr_grammar_matcher_accept_token(m, 7), TR_OK);   /*  "age */
    assert_int_equal(tr_grammar_matcher_accept_token(m, 8), TR_OK);   /* ":  */
    assert_int_equal(tr_grammar_matcher_accept_token(m, 11), TR_OK);  /* 42 */
    assert_false(tr_grammar_matcher_is_accepting(m));
    assert_int_equal(tr_grammar_matcher_fill_mask(m, mask, 1), TR_OK);
    assert_int_equal(mask[0], (1u << 9) | (1u << 10) | (1u << 11) | (1u << 12));
    assert_int_equal(tr_grammar_matcher_accept_token(m, 12), TR_OK);  /* } */
    assert_true(tr_grammar_matcher_is_accepting(m));
    assert_false(tr_grammar_matcher_can_continue(m));
    assert_int_equal(tr_grammar_matcher_forced_bytes(m, buf, sizeof buf, &len), TR_OK);
    assert_int_equal(len, 0); /* accepting: nothing is forced */
    assert_int_equal(tr_grammar_matcher_fill_mask(m, mask, 1), TR_OK);
    assert_int_equal(mask[0], 1u << 19); /* only EOG */
    assert_int_equal(tr_grammar_matcher_accept_token(m, 19), TR_OK);
    assert_true(tr_grammar_matcher_is_terminated(m));
    assert_false(tr_grammar_matcher_is_accepting(m));
    assert_int_equal(tr_grammar_matcher_fill_mask(m, mask, 1), TR_OK);
    assert_int_equal(mask[0], 0);
    assert_int_equal(tr_grammar_matcher_accept_token(m, 19), TR_ERR_STATE);
    assert_int_equal(tr_grammar_matcher_accept_bytes(m, "", 0), TR_ERR_STATE);

    /* the ring keeps the last 4 accept calls */
    assert_int_equal(tr_grammar_matcher_history_len(m), 4);
    assert_int_equal(tr_grammar_matcher_rollback(m, 5), TR_ERR_STATE);
    assert_true(tr_grammar_matcher_is_terminated(m));
    assert_int_equal(tr_grammar_matcher_rollback(m, 1), TR_OK); /* undo EOG */
    assert_false(tr_grammar_matcher_is_terminated(m));
    assert_true(tr_grammar_matcher_is_accepting(m));
    assert_int_equal(tr_grammar_matcher_rollback(m, 2), TR_OK); /* undo } 42 */
    assert_int_equal(tr_grammar_matcher_accept_token(m, 9), TR_OK); /* 4 */
    assert_int_equal(tr_grammar_matcher_accept_token(m, 10), TR_OK); /* 2 */
    assert_int_equal(tr_grammar_matcher_accept_token(m, 12), TR_OK);
    assert_true(tr_grammar_matcher_is_accepting(m));
    assert_int_equal(tr_grammar_matcher_rollback(m, 0), TR_OK);

    tr_grammar_matcher_reset(m);
    assert_int_equal(tr_grammar_matcher_history_len(m), 0);
    assert_int_equal(tr_grammar_matcher_forced_bytes(m, buf, sizeof buf, &len), TR_OK);
    assert_int_equal(len, 10);
    assert_int_equal(tr_grammar_matcher_forced_bytes(m, NULL, 5, &len), TR_ERR_INVALID_ARG);
    tr_grammar_matcher_free(m);
    tr_grammar_matcher_free(NULL);

    /* UTF-8 split across tokens */
    grammar *g2 = compile("é+", NULL);
    assert_int_equal(tr_grammar_matcher_new(g2, v, 0, &m), TR_OK);
    assert_int_equal(tr_grammar_matcher_forced_bytes(m, buf, sizeof buf, &len), TR_OK);
    assert_int_equal(len, 2);
    assert_memory_equal(buf, "\xc3\xa9", 2);
    assert_int_equal(tr_grammar_matcher_fill_mask(m, mask, 1), TR_OK);
    assert_int_equal(mask[0], (1u << 15) | (1u << 16));
    assert_int_equal(tr_grammar_matcher_accept_token(m, 16), TR_OK); /* \xc3 */
    assert_int_equal(tr_grammar_matcher_fill_mask(m, mask, 1), TR_OK);
    assert_int_equal(mask[0], 1u << 17);                         /* \xa9 */
    assert_int_equal(tr_grammar_matcher_accept_token(m, 17), TR_OK);
    assert_true(tr_grammar_matcher_is_accepting(m));
    tr_grammar_matcher_free(m);

    /* argument checks */
    assert_int_equal(tr_grammar_matcher_new(NULL, v, 0, &m), TR_ERR_INVALID_ARG);
    assert_int_equal(tr_grammar_matcher_new(g2, v, (1u << 20) + 1, &m),
                     TR_ERR_INVALID_ARG);
    /* the matcher holds references: freeing ours first is fine */
    assert_int_equal(tr_grammar_matcher_new(g2, v, 0, &m), TR_OK);
    tr_grammar_free(g2);
    tr_grammar_free(g);
    tr_grammar_vocab_free(v);
    assert_int_equal(tr_grammar_matcher_accept_bytes(m, "\xc3\xa9", 2), TR_OK);
    assert_true(tr_grammar_matcher_is_accepting(m));
    tr_grammar_matcher_free(m);
}

/* Long random sessions: accept, rollback and reset against a model of the
 * state history kept by the test. */
static void test_matcher_random_rollback(void **state) {
    (void)state;
    tg_rng r = {99};
    grammar_vocab *v = tg_vocab_random(&r, 1500);
    grammar *g = compile("(\"[a-c\\x{e9}]*\"|\\d+|\\{\\})( (\"[a-c]*\"|\\d+|\\{\\}))*", NULL);
    grammar_matcher *m;
    const uint32_t cap = 16;
    assert_int_equal(tr_grammar_matcher_new(g, v, cap, &m), TR_OK);
    uint32_t hist[4096];
    uint32_t n = 0;     /* model: hist[0..n) states before each accept */
    uint32_t avail = 0; /* model: how many the ring still remembers */
    size_t nw = v->n_words;
    uint64_t *mask = malloc(nw * 8);
    for (int step = 0; step < 4000; step++) {
        uint32_t op = tg_below(&r, 10);
        if (op < 6) {
            assert_int_equal(tr_grammar_matcher_fill_mask(m, mask, nw), TR_OK);
            int32_t id = pick_token(&r, mask, nw, v, false);
            if (id < 0) continue;
            uint32_t before = m->state;
            assert_int_equal(tr_grammar_matcher_accept_token(m, id), TR_OK);
            if (n < 4096) hist[n++] = before;
            if (avail < cap) avail++;
        } else if (op < 9) {
            assert_int_equal(tr_grammar_matcher_history_len(m), avail);
            uint32_t k = tg_below(&r, avail + 2);
            tr_status st = tr_grammar_matcher_rollback(m, k);
            if (k > avail) {
                assert_int_equal(st, TR_ERR_STATE);
            } else {
                assert_int_equal(st, TR_OK);
                if (k) {
                    assert_int_equal(m->state, hist[n - k]);
                    n -= k;
                    avail -= k;
                }
            }
        } else if (tg_below(&r, 10) == 0) {
            tr_grammar_matcher_reset(m);
            n = avail = 0;
            assert_int_equal(m->state, g->dfa.start);
        }
        if (n == 4096) { /* keep the model bounded: forget the old part */
            memmove(hist, hist + 4096 - cap, cap * sizeof *hist);
            n = cap;
        }
    }
    free(mask);
    tr_grammar_matcher_free(m);
    tr_grammar_free(g);
    tr_grammar_vocab_free(v);
}

/* ---- the memo ---- */

static void test_cache_budget(void **state) {
    (void)state;
    tg_rng r = {5};
    grammar_vocab *v = tg_vocab_random(&r, 3000);
    size_t nw = v->n_words;
    uint64_t *a = malloc(nw * 8), *b = malloc(nw * 8);
    const char *pat = "[a-c]{0,3}x(\\d|é)+";
    grammar_limits lim;
    tr_grammar_limits_default(&lim);
    grammar *full = compile(pat, &lim);
    lim.mask_cache_bytes = 0;
    grammar *none = compile(pat, &lim);
    lim.mask_cache_bytes = 2 * nw * 8; /* room for two masks */
    grammar *two = compile(pat, &lim);
    grammar_matcher *mf, *mn, *mt;
    assert_int_equal(tr_grammar_matcher_new(full, v, 0, &mf), TR_OK);
    assert_int_equal(tr_grammar_matcher_new(none, v, 0, &mn), TR_OK);
    assert_int_equal(tr_grammar_matcher_new(two, v, 0, &mt), TR_OK);
    assert_null(mn->cache);
    uint32_t ns = full->dfa.n_states;
    assert_true(ns > 4);
    for (int round = 0; round < 3; round++) {
        for (uint32_t s = 1; s < ns; s++) {
            mf->state = mn->state = mt->state = s;
            assert_int_equal(tr_grammar_matcher_fill_mask(mf, a, nw), TR_OK);
            assert_int_equal(tr_grammar_matcher_fill_mask(mn, b, nw), TR_OK);
            assert_memory_equal(a, b, nw * 8);
            assert_int_equal(tr_grammar_matcher_fill_mask(mt, b, nw), TR_OK);
            assert_memory_equal(a, b, nw * 8);
        }
    }
    uint64_t fills = 3 * (uint64_t)(ns - 1);
    assert_int_equal(mf->n_computed, ns - 1);   /* each state once */
    assert_int_equal(mn->n_computed, fills);    /* every time */
    /* two states memoized, the rest recomputed each round */
    assert_int_equal(mt->n_computed, (ns - 1) + 2 * (ns - 3));
    assert_true(atomic_load(&mt->cache->used) <= 2 * nw * 8);
    /* a second matcher of the same grammar and vocabulary shares the memo */
    grammar_matcher *mf2;
    assert_int_equal(tr_grammar_matcher_new(full, v, 0, &mf2), TR_OK);
    assert_ptr_equal(mf2->cache, mf->cache);
    assert_int_equal(tr_grammar_matcher_fill_mask(mf2, a, nw), TR_OK);
    assert_int_equal(mf2->n_computed, 0);
    /* another vocabulary gets its own memo */
    grammar_vocab *v2 = tg_vocab_random(&r, 500);
    grammar_matcher *mv2;
    assert_int_equal(tr_grammar_matcher_new(full, v2, 0, &mv2), TR_OK);
    assert_ptr_not_equal(mv2->cache, mf->cache);
    tr_grammar_matcher_free(mv2);
    tr_grammar_vocab_free(v2);
    tr_grammar_matcher_free(mf2);
    tr_grammar_matcher_free(mf), tr_grammar_matcher_free(mn), tr_grammar_matcher_free(mt);
    tr_grammar_free(full), tr_grammar_free(none), tr_grammar_free(two);
    tr_grammar_vocab_free(v);
    free(a), free(b);
}

/* ---- threads ---- */

typedef struct thr_arg {
    grammar *g;
    grammar_vocab *v;
    uint64_t *expect; /* [n_states][nw] */
    uint64_t seed;
    int bad;
} thr_arg;

static void *thr_main(void *p) {
    thr_arg *a = p;
    size_t nw = a->v->n_words;
    uint64_t *mask = malloc(nw * 8);
    grammar_matcher *m;
    if (tr_grammar_matcher_new(a->g, a->v, 0, &m) != TR_OK) {
        a->bad++;
        free(mask);
        return NULL;
    }
    tg_rng r = {a->seed};
    for (int step = 0; step < 3000; step++) {
        tr_grammar_matcher_fill_mask(m, mask, nw);
        if (memcmp(mask, a->expect + (size_t)m->state * nw, nw * 8) != 0) a->bad++;
        int32_t id = pick_token(&r, mask, nw, a->v, false);
        if (id < 0 || tg_below(&r, 50) == 0)
            tr_grammar_matcher_reset(m);
        else if (tr_grammar_matcher_accept_token(m, id) != TR_OK)
            a->bad++;
    }
    tr_grammar_matcher_free(m);
    free(mask);
    return NULL;
}

static void test_threads_share_grammar(void **state) {
    (void)state;
    tg_rng r = {11};
    grammar_vocab *v = tg_vocab_random(&r, 4000);
    grammar *g = compile("(\"[^\"]{0,6}\"|\\d{1,4}|[a-c]+)(, ?(\"[^\"]{0,6}\"|\\d{1,4}|[a-c]+))*", NULL);
    size_t nw = v->n_words;
    uint32_t ns = g->dfa.n_states;
    uint64_t *expect = calloc((size_t)ns * nw, 8);
    for (uint32_t s = 1; s < ns; s++) tg_brute_mask(&g->dfa, s, v, expect + (size_t)s * nw);
    enum { NT = 4 };
    pthread_t th[NT];
    thr_arg args[NT];
    for (int i = 0; i < NT; i++) {
        args[i] = (thr_arg){.g = g, .v = v, .expect = expect, .seed = 100 + (uint64_t)i};
        assert_int_equal(pthread_create(&th[i], NULL, thr_main, &args[i]), 0);
    }
    for (int i = 0; i < NT; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(args[i].bad, 0);
    }
    free(expect);
    tr_grammar_free(g);
    tr_grammar_vocab_free(v);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_vocab_small),
        cmocka_unit_test(test_vocab_errors),
        cmocka_unit_test(test_vocab_random),
        cmocka_unit_test(test_mask_brute_force_random_vocab),
        cmocka_unit_test(test_mask_ascii_shortcut),
        cmocka_unit_test(test_mask_count_nth),
        cmocka_unit_test(test_mask_smollm2),
        cmocka_unit_test(test_matcher_api),
        cmocka_unit_test(test_matcher_random_rollback),
        cmocka_unit_test(test_cache_budget),
        cmocka_unit_test(test_threads_share_grammar),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    tr_grammar_vocab_free(g_smol);
    return rc;
}
