/* test_stop_regex.c — stop patterns (runtime/engine/stop_regex_internal.h).
 *
 * The scanner against a naive reference: random texts over a small
 * alphabet, fed in random chunks the way output.c feeds it (held text,
 * emitted up to hold_from); the reference finds the earliest-ending match
 * with PCRE2 (anchored at both ends, from every start). The output must be
 * the text before that match, and no emitted byte may belong to it.
 * Then through the engine on the fake model: a pattern spanning token
 * boundaries ends the sample there (stop_index n_stop + k, the match not
 * emitted in any delta), stop strings and patterns together (the first to
 * end wins), min_tokens, and the refusals (syntax, empty match, length).
 */
#include "tests/unit/engine_fake.h"
#include "tests/unit/harness.h"

#include "grammar/grammar.h"
#include "runtime/engine/stop_regex_internal.h"

static grammar_vocab *byte_vocab(void) {
    static uint8_t bytes[256];
    const uint8_t *tb[256];
    uint32_t lens[256];
    for (int i = 0; i < 256; i++) {
        bytes[i] = (uint8_t)i;
        tb[i] = &bytes[i];
        lens[i] = 1;
    }
    int32_t eog = 0;
    grammar_vocab_desc d = {.n_vocab = 256, .token_bytes = tb, .token_lens = lens,
                            .eog_ids = &eog, .n_eog = 1};
    grammar_vocab *v = NULL;
    tr_diag diag = {0};
    assert_int_equal(tr_grammar_vocab_new(&d, &v, &diag), TR_OK);
    return v;
}

/* Earliest end e (then smallest start) where text[s..e) fully matches re;
 * false when none. */
static bool ref_first_match(const pcre2_code *re, const char *t, size_t n, size_t *ms,
                            size_t *me) {
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
    bool found = false;
    for (size_t e = 1; e <= n && !found; e++)
        for (size_t s = 0; s < e && !found; s++)
            if (pcre2_match(re, (PCRE2_SPTR)(t + s), e - s, 0,
                            PCRE2_ANCHORED | PCRE2_ENDANCHORED, md, NULL) >= 0) {
                *ms = s;
                *me = e;
                found = true;
            }
    pcre2_match_data_free(md);
    return found;
}

static pcre2_code *pcre(const char *p) {
    int ec;
    PCRE2_SIZE eo;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)p, PCRE2_ZERO_TERMINATED, PCRE2_UTF, &ec, &eo, NULL);
    assert_non_null(re);
    return re;
}

/* Feeds t in random chunks as output.c does; returns whether a match
 * ended the scan (*cut: where the output stops, in t) and the output. */
static bool drive(tr_stop_scan *sc, const char *t, size_t n, uint64_t seed, char *emitted,
                  size_t *n_emitted, size_t *cut, int32_t *which) {
    char held[1024];
    size_t held_len = 0, pos = 0;
    *n_emitted = 0;
    while (pos < n) {
        size_t k = 1 + (size_t)(mix(seed + pos) % 5);
        if (k > n - pos) k = n - pos;
        memcpy(held + held_len, t + pos, k);
        held_len += k;
        pos += k;
        tr_stop_hit hit = {0};
        size_t hold_from = 0;
        if (tr_stop_scan_feed(sc, held, held_len, k, true, &hit, &hold_from)) {
            memcpy(emitted + *n_emitted, held, hit.start);
            *n_emitted += hit.start;
            *cut = *n_emitted; /* in the whole text */
            *which = hit.pattern;
            return true;
        }
        assert_true(hold_from <= held_len);
        memcpy(emitted + *n_emitted, held, hold_from);
        *n_emitted += hold_from;
        memmove(held, held + hold_from, held_len - hold_from);
        held_len -= hold_from;
    }
    memcpy(emitted + *n_emitted, held, held_len); /* the flush at the end */
    *n_emitted += held_len;
    return false;
}

static void test_scan_against_pcre(void **state) {
    (void)state;
    const char *patterns[] = {"ab+c", "[0-9]{2}\\.", "x|yz", "a.*b", "(foo|fo)o?z",
                              "\\d+\\s", "c[^a]c", "(ab)+a"};
    const char alphabet[] = "abcxyz0123. \nfo";
    grammar_vocab *v = byte_vocab();
    int matched = 0, unmatched = 0;
    for (size_t p = 0; p < sizeof patterns / sizeof *patterns; p++) {
        tr_stop_regex_set *x = NULL;
        char err[256];
        assert_int_equal(tr_stop_regex_set_new(v, &patterns[p], 1, &x, err, sizeof err), 0);
        pcre2_code *re = pcre(patterns[p]);
        for (uint64_t seed = 1; seed <= 300; seed++) {
            char t[200], out[200];
            size_t n = 1 + (size_t)(mix(seed * 7 + p) % 150);
            for (size_t i = 0; i < n; i++)
                t[i] = alphabet[mix(seed * 1000 + p * 100000 + i) % (sizeof alphabet - 1)];
            size_t ms = 0, me = 0, n_out = 0, cut = 0;
            int32_t which = -1;
            bool want = ref_first_match(re, t, n, &ms, &me);
            tr_stop_scan *sc = tr_stop_scan_new(x);
            assert_non_null(sc);
            bool got = drive(sc, t, n, seed, out, &n_out, &cut, &which);
            tr_stop_scan_free(sc);
            if (got != want || (want && cut != ms))
                fail_msg("pattern %s seed %llu: want %d at %zu, got %d at %zu", patterns[p],
                         (unsigned long long)seed, want, ms, got, cut);
            assert_int_equal(n_out, want ? ms : n);
            assert_memory_equal(out, t, n_out);
            if (want) assert_int_equal(which, 0);
            matched += want;
            unmatched += !want;
        }
        pcre2_code_free(re);
        tr_stop_regex_set_free(x);
    }
    assert_true(matched > 300 && unmatched > 300); /* both kinds exercised */
    tr_grammar_vocab_free(v);
}

/* Two patterns: the one whose match ends first wins, whatever its index. */
static void test_scan_two_patterns(void **state) {
    (void)state;
    grammar_vocab *v = byte_vocab();
    const char *pats[2] = {"b.*z", "cd"};
    tr_stop_regex_set *x = NULL;
    char err[256];
    assert_int_equal(tr_stop_regex_set_new(v, pats, 2, &x, err, sizeof err), 0);
    tr_stop_scan *sc = tr_stop_scan_new(x);
    const char *t = "abcdz";
    char out[16];
    size_t n_out, cut;
    int32_t which;
    assert_true(drive(sc, t, 5, 3, out, &n_out, &cut, &which));
    assert_int_equal(which, 1);
    assert_int_equal(cut, 2);
    tr_stop_scan_free(sc);
    tr_stop_regex_set_free(x);
    tr_grammar_vocab_free(v);
}

/* A run that outlives the hold window: older text is emitted, the match
 * is still found, and what is still held is dropped. */
static void test_scan_hold_window(void **state) {
    (void)state;
    grammar_vocab *v = byte_vocab();
    const char *pat = "<[a-z]*>";
    tr_stop_regex_set *x = NULL;
    char err[256];
    assert_int_equal(tr_stop_regex_set_new(v, &pat, 1, &x, err, sizeof err), 0);
    tr_stop_scan *sc = tr_stop_scan_new(x);
    char t[600], out[600];
    memcpy(t, "xy<", 3);
    memset(t + 3, 'q', 400);
    t[403] = '>';
    size_t n_out, cut;
    int32_t which;
    assert_true(drive(sc, t, 404, 5, out, &n_out, &cut, &which));
    /* everything older than the window went out, the match's start with
     * it; the rest was held and is dropped */
    assert_true(n_out >= 404 - TR_STOP_REGEX_HOLD - 5);
    assert_true(n_out > 3 && n_out < 404);
    assert_memory_equal(out, t, n_out);
    tr_stop_scan_free(sc);
    tr_stop_regex_set_free(x);
    tr_grammar_vocab_free(v);
}

static void test_refusals(void **state) {
    (void)state;
    fake *f;
    fake_cfg c = fake_default();
    trellis_engine *e = fake_engine(&c, &f);
    int32_t prompt[8];
    rand_tokens(1, prompt, 8);
    trellis_request q;
    trellis_request_default(&q);
    q.tokens = prompt;
    q.n_tokens = 8;
    char err[512];
    uint64_t id;
    struct {
        const char *pat;
        const char *says;
    } bad[] = {{"ab(", "stop_regex 0"}, {"a*", "empty string"}, {"(?=a)b", "stop_regex 0"},
               {"", "empty"}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        q.stop_regex = &bad[i].pat;
        q.n_stop_regex = 1;
        assert_int_not_equal(trellis_submit(e, &q, &id, err, sizeof err), 0);
        if (!strstr(err, bad[i].says)) fail_msg("%s: %s", bad[i].pat, err);
    }
    char longp[TRELLIS_MAX_STOP_LEN + 2];
    memset(longp, 'a', sizeof longp - 1);
    longp[sizeof longp - 1] = 0;
    const char *lp = longp;
    q.stop_regex = &lp;
    assert_int_not_equal(trellis_submit(e, &q, &id, err, sizeof err), 0);
    assert_non_null(strstr(err, "at most"));
    q.n_stop_regex = TRELLIS_MAX_STOP + 1;
    assert_int_not_equal(trellis_submit(e, &q, &id, err, sizeof err), 0);
    expect_clean(e);
    trellis_engine_free(e);
}

/* Escapes t[0..n) as a regex literal. */
static void regex_literal(const char *t, size_t n, char *out) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (strchr("\\^$.|?*+()[]{}/-", t[i])) out[k++] = '\\';
        out[k++] = t[i];
    }
    out[k] = 0;
}

/* Through the engine: a pattern made from text spanning two token
 * boundaries ends the sample where the reference text first contains it. */
static void test_engine_stop_regex(void **state) {
    (void)state;
    fake *f;
    fake_cfg c = fake_default();
    trellis_engine *e = fake_engine(&c, &f);
    int tested = 0;
    for (uint64_t seed = 1; seed < 60 && tested < 6; seed++) {
        int32_t prompt[20];
        rand_tokens(seed, prompt, 20);
        trellis_request q;
        trellis_request_default(&q);
        q.tokens = prompt;
        q.n_tokens = 20;
        q.max_tokens = 24;
        q.seed = seed;
        q.stream = true;
        result ref;
        run1(e, &q, &ref);
        const char *t = ref.s[0].text;
        size_t n = ref.s[0].text_len;
        bool ascii = n > 40 && memchr(t, 0, n) == NULL;
        for (size_t i = 0; i < n && ascii; i++) ascii = (unsigned char)t[i] < 0x80;
        if (!ascii) {
            result_free(&ref);
            continue;
        }
        /* the pattern: bytes [20, 28) of the text as a literal, then [a-zA-Z ]*
         * (so the match may run on), found first where the reference has it */
        char lit[64], pat[160];
        regex_literal(t + 20, 8, lit);
        snprintf(pat, sizeof pat, "%s", lit);
        char needle[9];
        memcpy(needle, t + 20, 8);
        needle[8] = 0;
        size_t expect = (size_t)(strstr(t, needle) - t);
        const char *pats[2] = {"\x01never", pat};
        const char *stops[1] = {"\x02nope"};
        q.stop = stops;
        q.n_stop = 1;
        q.stop_regex = pats;
        q.n_stop_regex = 2;
        result got;
        run1(e, &q, &got);
        assert_int_equal(got.s[0].finish, TRELLIS_FINISH_STOP);
        assert_int_equal(got.s[0].stop_index, 1 + 1); /* n_stop + pattern 1 */
        assert_int_equal(got.s[0].text_len, expect);
        assert_memory_equal(got.s[0].text, t, expect);
        result_free(&got);

        /* a stop string ending before the pattern's match wins */
        char early[5];
        memcpy(early, t + 10, 4);
        early[4] = 0;
        size_t e_at = (size_t)(strstr(t, early) - t);
        stops[0] = early;
        run1(e, &q, &got);
        assert_int_equal(got.s[0].stop_index, 0);
        assert_int_equal(got.s[0].text_len, e_at);
        result_free(&got);

        /* min_tokens past the whole output: nothing stops it */
        q.n_stop = 0;
        q.min_tokens = 24;
        run1(e, &q, &got);
        assert_int_equal(got.s[0].finish, TRELLIS_FINISH_LENGTH);
        assert_int_equal(got.s[0].text_len, n);
        assert_memory_equal(got.s[0].text, t, n);
        result_free(&got);

        /* n = 2: each sample scans its own text */
        q.min_tokens = 0;
        q.n = 2;
        run1(e, &q, &got);
        for (int i = 0; i < 2; i++) assert_int_equal(got.s[i].done, true);
        result_free(&got);
        result_free(&ref);
        tested++;
    }
    assert_true(tested >= 3);
    expect_clean(e);
    trellis_engine_free(e);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_scan_against_pcre),
        cmocka_unit_test(test_scan_two_patterns),
        cmocka_unit_test(test_scan_hold_window),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_engine_stop_regex),
    };
    tr_test_filter_from_env();
    return cmocka_run_group_tests(tests, NULL, NULL);
}
