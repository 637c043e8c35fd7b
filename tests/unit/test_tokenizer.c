/* test_tokenizer.c — tokenizer tests: parity with llama.cpp on the default
 * model (tests/data/tokenizer/, made by scripts/ref/make_tokenizer_ref.py),
 * round trips, token bytes, EOG set, incremental decoding, the two BPE loops
 * against each other, thread safety, and error cases on hand-made GGUF files.
 *
 * Tests that need the default model skip when it is absent.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "base/utf8.h"
#include "base/paths.h"
#include "base/util.h"
#include "runtime/gguf/gguf.h"
#include "runtime/tokenizer/tokenizer.h"
#include "runtime/tokenizer/tokenizer_internal.h"
#include "tests/unit/tokenizer_fixture.h"

/* ---- shared fixtures: the default model, opened once ---- */

static gguf_file *g_file;
static tokenizer *g_tok;
static bool g_tried;

static tokenizer *model_tok(void) {
    if (!g_tried) {
        g_tried = true;
        char path[4096];
        if (!tr_default_model_path(path, sizeof path) || access(path, R_OK) != 0) {
            fprintf(stderr, "[ SKIP ] default model not found\n");
            return NULL;
        }
        tr_diag d = {0};
        assert_int_equal(tr_gguf_open(path, &g_file, &d), TR_OK);
        tr_status s = tr_tokenizer_from_gguf(g_file, &g_tok, &d);
        if (s) fprintf(stderr, "tokenizer_from_gguf: %s: %s\n", tr_status_name(s), d.message);
        assert_int_equal(s, TR_OK);
    }
    return g_tok;
}

#define NEED_MODEL(t)           \
    tokenizer *t = model_tok(); \
    if (!t) {                   \
        skip();                 \
        return;                 \
    }

static void test_parity_smollm(void **state) {
    (void)state;
    NEED_MODEL(t);
    size_t total, bad = check_parity(t, "smollm2_ref.jsonl", &total);
    printf("parity smollm: %zu/%zu lines identical to llama.cpp\n", total - bad, total);
    assert_true(total >= 250);
    assert_int_equal(bad, 0);
}

static void test_parity_other_pre(void **state) {
    (void)state;
    NEED_MODEL(t);
    (void)t;
    static const char *const pres[][2] = {{"gpt-2", "smollm2_pre_gpt_2.jsonl"},
                                          {"llama-bpe", "smollm2_pre_llama_bpe.jsonl"},
                                          {"qwen2", "smollm2_pre_qwen2.jsonl"},
                                          {"default", "smollm2_pre_default.jsonl"}};
    size_t all_bad = 0;
    for (size_t p = 0; p < TR_ARRAY_LEN(pres); p++) {
        tokenizer *tp;
        tr_diag d = {0};
        assert_int_equal(tr_tokenizer_from_gguf_pre(g_file, pres[p][0], &tp, &d), TR_OK);
        assert_string_equal(tr_tokenizer_pre_name(tp), pres[p][0]);
        size_t total, bad = check_parity(tp, pres[p][1], &total);
        printf("parity pre=%s: %zu/%zu lines identical to llama.cpp\n", pres[p][0],
               total - bad, total);
        all_bad += bad;
        tr_tokenizer_free(tp);
    }
    assert_int_equal(all_bad, 0);
}

/* ---- round trips ---- */

/* Bytes the vocabulary has no symbol for (SmolLM2 lacks 21 of them): encode
 * drops them, as llama.cpp does, so round trips compare without them. */
static bool dropped_byte(const tokenizer *t, uint8_t b) {
    static const tokenizer *cached;
    static bool drop[256];
    if (cached != t) {
        for (int i = 0; i < 256; i++) {
            char c = (char)i;
            int32_t *ids;
            size_t n;
            assert_int_equal(tr_tokenizer_encode(t, &c, 1, false, &ids, &n), TR_OK);
            drop[i] = n == 0;
            free(ids);
        }
        cached = t;
    }
    return drop[b];
}

static void roundtrip(const tokenizer *t, const char *s, size_t len, bool special) {
    int32_t *ids;
    size_t n;
    assert_int_equal(tr_tokenizer_encode(t, s, len, special, &ids, &n), TR_OK);
    assert_non_null(ids);
    char *out;
    size_t out_len;
    assert_int_equal(tr_tokenizer_decode(t, ids, n, true, &out, &out_len), TR_OK);
    char *want = malloc(len + 1);
    size_t wl = 0;
    for (size_t i = 0; i < len; i++)
        if (!dropped_byte(t, (uint8_t)s[i])) want[wl++] = s[i];
    assert_int_equal(out_len, wl);
    assert_memory_equal(out, want, wl);
    assert_int_equal(out[out_len], 0);
    free(want);
    free(out);
    free(ids);
}

static void test_roundtrip(void **state) {
    (void)state;
    NEED_MODEL(t);
    ref_line *ref;
    size_t n = load_ref("smollm2_ref.jsonl", &ref);
    for (size_t i = 0; i < n; i++) {
        roundtrip(t, ref[i].text, ref[i].len, false);
        roundtrip(t, ref[i].text, ref[i].len, true);
    }
    free_ref(ref, n);
}

static uint64_t rng_next(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* Arbitrary bytes (invalid UTF-8 included) survive encode/decode. */
static void test_roundtrip_bytes(void **state) {
    (void)state;
    NEED_MODEL(t);
    uint64_t rng = 0x1234567887654321ull;
    static const char *const frags[] = {"\xF0\x9F", "\x80", "\xC3", "\xE2\x82", "<|im_end|>",
                                        " ", "  ", "\n", "a", "1", "'s", "\xFF", "\xED\xA0\x80",
                                        "\xC0\xAF", "\xF4\x90\x80\x80", "\xEF\xBF\xBD"};
    char buf[512];
    for (int it = 0; it < 3000; it++) {
        size_t len = 0, target = rng_next(&rng) % 200;
        while (len < target) {
            if (rng_next(&rng) % 3 == 0) {
                const char *f = frags[rng_next(&rng) % TR_ARRAY_LEN(frags)];
                size_t fl = strlen(f);
                if (len + fl > sizeof buf) break;
                memcpy(buf + len, f, fl);
                len += fl;
            } else {
                buf[len++] = (char)(rng_next(&rng) & 0xFF);
            }
        }
        roundtrip(t, buf, len, false);
        /* with special parsing the text may contain specials: rendered back */
        roundtrip(t, buf, len, true);
    }
}

/* ---- vocabulary facts ---- */

static void test_vocab_facts(void **state) {
    (void)state;
    NEED_MODEL(t);
    assert_int_equal(tr_tokenizer_check(t), TR_OK);
    assert_int_equal(tr_tokenizer_n_vocab(t), 49152);
    assert_int_equal(tr_tokenizer_bos(t), 1);
    assert_int_equal(tr_tokenizer_eos(t), 2);
    assert_false(tr_tokenizer_add_bos(t));
    assert_string_equal(tr_tokenizer_pre_name(t), "smollm");
    assert_int_equal(tr_tokenizer_find(t, "<|im_end|>"), 2);
    assert_int_equal(tr_tokenizer_find(t, "<|im_start|>"), 1);
    assert_int_equal(tr_tokenizer_find(t, "<|endoftext|>"), 0);
    assert_int_equal(tr_tokenizer_find(t, "no such token at all"), -1);
    assert_true(tr_tokenizer_is_special(t, 2));
    assert_false(tr_tokenizer_is_special(t, 17));
    assert_int_equal(tr_tokenizer_type(t, 2), TOKENIZER_TYPE_CONTROL);
    assert_int_equal(tr_tokenizer_type(t, 100), TOKENIZER_TYPE_NORMAL);
    assert_int_equal(tr_tokenizer_type(t, -1), TOKENIZER_TYPE_UNDEFINED);
    assert_int_equal(tr_tokenizer_max_token_len(t), 81);

    /* every byte has a one-byte token, except 21 the vocabulary lacks (some
     * C0 controls, and bytes valid UTF-8 never or almost never holds) */
    int n_dropped = 0;
    for (int b = 0; b < 256; b++) {
        char c = (char)b;
        int32_t *ids;
        size_t n;
        assert_int_equal(tr_tokenizer_encode(t, &c, 1, false, &ids, &n), TR_OK);
        if (n == 0) {
            n_dropped++;
            assert_true(b < 0x20 || b == 0xC0 || b == 0xC1 || b >= 0xF1);
            free(ids);
            continue;
        }
        assert_int_equal(n, 1);
        size_t l;
        const uint8_t *p = tr_tokenizer_token_bytes(t, ids[0], &l);
        assert_int_equal(l, 1);
        assert_int_equal(p[0], b);
        free(ids);
    }
    size_t l;
    const uint8_t *p = tr_tokenizer_token_bytes(t, 2, &l);
    assert_int_equal(l, 10);
    assert_int_equal(n_dropped, 21);
    assert_memory_equal(p, "<|im_end|>", 10);
    /* " the" is stored as "Ġthe" */
    int32_t the = tr_tokenizer_find(t, "\xC4\xA0the");
    assert_true(the > 0);
    p = tr_tokenizer_token_bytes(t, the, &l);
    assert_int_equal(l, 4);
    assert_memory_equal(p, " the", 4);
    assert_null(tr_tokenizer_token_bytes(t, 49152, &l));
    assert_int_equal(l, 0);
    assert_null(tr_tokenizer_token_bytes(t, -5, &l));
}

static void test_eog(void **state) {
    (void)state;
    NEED_MODEL(t);
    char *buf;
    size_t len;
    assert_int_equal(tr_read_file(TOK_REF_DIR "smollm2_meta.json", &buf, &len), 0);
    json_error_t err;
    json_t *j = json_loads(buf, 0, &err);
    free(buf);
    assert_non_null(j);
    assert_int_equal(json_integer_value(json_object_get(j, "n_vocab")), tr_tokenizer_n_vocab(t));
    assert_int_equal(json_integer_value(json_object_get(j, "bos")), tr_tokenizer_bos(t));
    assert_int_equal(json_integer_value(json_object_get(j, "eos")), tr_tokenizer_eos(t));
    json_t *eog = json_object_get(j, "eog");
    size_t n_eog = 0;
    for (int32_t id = 0; id < tr_tokenizer_n_vocab(t); id++) {
        bool want = false;
        for (size_t k = 0; k < json_array_size(eog); k++)
            if (json_integer_value(json_array_get(eog, k)) == id) want = true;
        if (want != tr_tokenizer_is_eog(t, id))
            fprintf(stderr, "  EOG mismatch at id %d: llama.cpp %d\n", id, want);
        assert_int_equal(want, tr_tokenizer_is_eog(t, id));
        n_eog += want;
    }
    assert_int_equal(n_eog, 3); /* <|endoftext|>, <|im_end|>, <reponame> */
    assert_true(tr_tokenizer_is_eog(t, 2));
    assert_true(tr_tokenizer_is_eog(t, 0));
    assert_false(tr_tokenizer_is_eog(t, 1));
    assert_false(tr_tokenizer_is_eog(t, -1));
    assert_false(tr_tokenizer_is_eog(t, 1 << 20));
    json_decref(j);
}

/* ---- decode ---- */

static void test_decode_special(void **state) {
    (void)state;
    NEED_MODEL(t);
    const char *s = "<|im_start|>user\nhi<|im_end|>";
    int32_t *ids;
    size_t n;
    assert_int_equal(tr_tokenizer_encode(t, s, strlen(s), true, &ids, &n), TR_OK);
    assert_int_equal(ids[0], 1);
    assert_int_equal(ids[n - 1], 2);
    char *out;
    size_t len;
    assert_int_equal(tr_tokenizer_decode(t, ids, n, false, &out, &len), TR_OK);
    assert_string_equal(out, "user\nhi");
    free(out);
    assert_int_equal(tr_tokenizer_decode(t, ids, n, true, &out, &len), TR_OK);
    assert_string_equal(out, s);
    free(out);
    free(ids);
    /* without special parsing, the markers are ordinary text */
    assert_int_equal(tr_tokenizer_encode(t, s, strlen(s), false, &ids, &n), TR_OK);
    for (size_t i = 0; i < n; i++) assert_false(tr_tokenizer_is_special(t, ids[i]));
    free(ids);
    /* empty input: a valid array, no ids */
    assert_int_equal(tr_tokenizer_encode(t, "", 0, true, &ids, &n), TR_OK);
    assert_non_null(ids);
    assert_int_equal(n, 0);
    free(ids);
    assert_int_equal(tr_tokenizer_decode(t, NULL, 0, true, &out, &len), TR_OK);
    assert_int_equal(len, 0);
    assert_string_equal(out, "");
    free(out);
}

/* ---- incremental decoding ---- */

static void test_stream(void **state) {
    (void)state;
    NEED_MODEL(t);
    const char *s = "Hi 👨‍👩‍👧‍👦 and 🇫🇷, 你好 — naïve 😀!";
    int32_t *ids;
    size_t n;
    assert_int_equal(tr_tokenizer_encode(t, s, strlen(s), false, &ids, &n), TR_OK);
    tokenizer_stream st;
    tr_tokenizer_stream_init(&st, false);
    char acc[512];
    size_t acc_len = 0, held_pushes = 0;
    for (size_t i = 0; i < n; i++) {
        char out[256 + 16];
        size_t ol = 99;
        assert_int_equal(tr_tokenizer_stream_push(&st, t, ids[i], out, sizeof out, &ol), TR_OK);
        /* every chunk is whole characters */
        assert_true(tr_utf8_valid((const uint8_t *)out, ol));
        size_t tl;
        tr_tokenizer_token_bytes(t, ids[i], &tl);
        if (ol < tl) held_pushes++;
        memcpy(acc + acc_len, out, ol);
        acc_len += ol;
    }
    char out[8];
    assert_int_equal(tr_tokenizer_stream_flush(&st, out, sizeof out), 0);
    assert_int_equal(acc_len, strlen(s));
    assert_memory_equal(acc, s, acc_len);
    /* the emoji are split across byte-level tokens: some pushes held bytes */
    assert_true(held_pushes > 0);
    free(ids);

    /* a lone continuation byte becomes U+FFFD; a dangling lead byte is held,
     * then replaced when the next token breaks it, or at flush */
    char c80 = (char)0x80, cf0 = (char)0xF0;
    int32_t *i80, *if0;
    size_t n1;
    assert_int_equal(tr_tokenizer_encode(t, &c80, 1, false, &i80, &n1), TR_OK);
    assert_int_equal(tr_tokenizer_encode(t, &cf0, 1, false, &if0, &n1), TR_OK);
    int32_t ia = tr_tokenizer_find(t, "a");
    tr_tokenizer_stream_init(&st, true);
    char o[64];
    size_t ol;
    assert_int_equal(tr_tokenizer_stream_push(&st, t, i80[0], o, sizeof o, &ol), TR_OK);
    assert_int_equal(ol, 3);
    assert_memory_equal(o, "\xEF\xBF\xBD", 3);
    assert_int_equal(tr_tokenizer_stream_push(&st, t, if0[0], o, sizeof o, &ol), TR_OK);
    assert_int_equal(ol, 0);
    assert_int_equal(st.n_pending, 1);
    /* too small a buffer: TR_ERR_FULL, state unchanged */
    assert_int_equal(tr_tokenizer_stream_push(&st, t, ia, o, 2, &ol), TR_ERR_FULL);
    assert_int_equal(st.n_pending, 1);
    assert_int_equal(tr_tokenizer_stream_push(&st, t, ia, o, sizeof o, &ol), TR_OK);
    assert_int_equal(ol, 4);
    assert_memory_equal(o, "\xEF\xBF\xBD" "a", 4);
    assert_int_equal(tr_tokenizer_stream_push(&st, t, if0[0], o, sizeof o, &ol), TR_OK);
    assert_int_equal(tr_tokenizer_stream_flush(&st, o, 2), 0); /* too small: kept */
    assert_int_equal(st.n_pending, 1);
    assert_int_equal(tr_tokenizer_stream_flush(&st, o, sizeof o), 3);
    assert_memory_equal(o, "\xEF\xBF\xBD", 3);
    assert_int_equal(st.n_pending, 0);
    /* control tokens: rendered only when asked */
    assert_int_equal(tr_tokenizer_stream_push(&st, t, 2, o, sizeof o, &ol), TR_OK);
    assert_int_equal(ol, 10);
    tr_tokenizer_stream_init(&st, false);
    assert_int_equal(tr_tokenizer_stream_push(&st, t, 2, o, sizeof o, &ol), TR_OK);
    assert_int_equal(ol, 0);
    assert_int_equal(tr_tokenizer_stream_push(&st, t, 49152, o, sizeof o, &ol),
                     TR_ERR_INVALID_ARG);
    free(i80);
    free(if0);

    /* the documented bound holds for every token after every pending state */
    static const char *const pend[] = {"", "\xF0", "\xF0\x9F", "\xF0\x9F\x98", "\xE4", "\xC3"};
    size_t bound = 3 * (tr_tokenizer_max_token_len(t) + 1), worst = 0;
    char *big = malloc(bound);
    for (size_t p = 0; p < TR_ARRAY_LEN(pend); p++) {
        for (int32_t id = 0; id < tr_tokenizer_n_vocab(t); id++) {
            tr_tokenizer_stream_init(&st, true);
            memcpy(st.pending, pend[p], strlen(pend[p]));
            st.n_pending = (uint32_t)strlen(pend[p]);
            assert_int_equal(tr_tokenizer_stream_push(&st, t, id, big, bound, &ol), TR_OK);
            assert_true(tr_utf8_valid((const uint8_t *)big, ol));
            if (ol > worst) worst = ol;
        }
    }
    free(big);
    printf("stream: largest single push output %zu bytes (bound %zu)\n", worst, bound);
}

/* ---- the two BPE loops agree ---- */

static void test_bpe_modes(void **state) {
    (void)state;
    NEED_MODEL(t);
    uint64_t rng = 42;
    static const char alpha[] = "aeinorst thlTH.,'0123456789\n\t\xC3\xA9\xE4\xB8\xAD";
    uint8_t w[300];
    for (int it = 0; it < 4000; it++) {
        size_t n = 2 + rng_next(&rng) % (it < 3000 ? 40 : 298);
        bool bytes = rng_next(&rng) % 4 == 0;
        for (size_t i = 0; i < n; i++)
            w[i] = bytes ? (uint8_t)rng_next(&rng)
                         : (uint8_t)alpha[rng_next(&rng) % (sizeof alpha - 1)];
        tokenizer_ids a = {0}, b = {0};
        assert_int_equal(tr_tokenizer_bpe_word(t, w, n, 1, &a), TR_OK);
        assert_int_equal(tr_tokenizer_bpe_word(t, w, n, 2, &b), TR_OK);
        assert_int_equal(a.n, b.n);
        assert_memory_equal(a.v, b.v, a.n * sizeof *a.v);
        /* the pieces cover the word */
        size_t total = 0, kept = 0;
        for (size_t i = 0; i < a.n; i++) {
            size_t l;
            tr_tokenizer_token_bytes(t, a.v[i], &l);
            total += l;
        }
        for (size_t i = 0; i < n; i++) kept += !dropped_byte(t, w[i]);
        assert_int_equal(total, kept);
        free(a.v);
        free(b.v);
    }
}

/* ---- pre-tokenizer splits ---- */

typedef struct pieces {
    char buf[1024];
    size_t n;
} pieces;

static tr_status collect(void *ud, const char *s, size_t n) {
    pieces *p = ud;
    memcpy(p->buf + p->n, s, n);
    p->n += n;
    p->buf[p->n++] = '|';
    return TR_OK;
}

static void expect_split(const tokenizer *t, const char *s, const char *want) {
    pieces p = {.n = 0};
    assert_int_equal(tr_tokenizer_pretokenize(t, s, strlen(s), collect, &p), TR_OK);
    p.buf[p.n] = 0;
    if (strcmp(p.buf, want) != 0)
        fprintf(stderr, "  split of '%s': got '%s' want '%s'\n", s, p.buf, want);
    assert_string_equal(p.buf, want);
}

static void test_pretokenize(void **state) {
    (void)state;
    NEED_MODEL(t);
    expect_split(t, "Hello world! 123", "Hello| world|!| |1|2|3|");
    expect_split(t, "a  1", "a|  |1|");
    expect_split(t, "a   b", "a|  | b|");
    expect_split(t, "I'm here's", "I|'m| here|'s|");
    expect_split(t, "x\t\ty", "x|\t|\t|y|");
    expect_split(t, "end  ", "end|  |");
    expect_split(t, "a\xC2\x85\xC2\x85 b", "a|\xC2\x85\xC2\x85| b|"); /* U+0085 is space */
}

/* ---- concurrency: one tokenizer, several threads ---- */

typedef struct thr_arg {
    const tokenizer *t;
    ref_line *ref;
    size_t n;
    size_t bad;
} thr_arg;

static void *thr_main(void *p) {
    thr_arg *a = p;
    for (int rep = 0; rep < 3; rep++)
        for (size_t i = 0; i < a->n; i++) {
            int32_t *ids;
            size_t n;
            if (tr_tokenizer_encode(a->t, a->ref[i].text, a->ref[i].len, a->ref[i].special,
                                 &ids, &n) != TR_OK ||
                n != a->ref[i].n_ids || (n && memcmp(ids, a->ref[i].ids, n * 4) != 0))
                a->bad++;
            else
                free(ids);
        }
    return NULL;
}

static void test_threads(void **state) {
    (void)state;
    NEED_MODEL(t);
    ref_line *ref;
    size_t n = load_ref("smollm2_ref.jsonl", &ref);
    pthread_t th[4];
    thr_arg args[4];
    for (int i = 0; i < 4; i++) {
        args[i] = (thr_arg){t, ref, n, 0};
        assert_int_equal(pthread_create(&th[i], NULL, thr_main, &args[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(args[i].bad, 0);
    }
    free_ref(ref, n);
}

/* ---- long inputs: linear time, no JIT stack trouble ---- */

static void test_long_inputs(void **state) {
    (void)state;
    NEED_MODEL(t);
    size_t n = 256 << 10; /* 256 KiB: seconds under ASan */
    char *s = malloc(n);
    const char fills[] = {' ', 'a', '1', '\n', '!'};
    for (size_t f = 0; f < sizeof fills; f++) {
        memset(s, fills[f], n);
        s[n - 1] = 'z';
        uint64_t t0 = tr_now_ns();
        roundtrip(t, s, n, false);
        double ms = (double)(tr_now_ns() - t0) / 1e6;
        printf("256 KiB of '%c': %.1f ms\n", fills[f] == '\n' ? 'N' : fills[f], ms);
    }
    free(s);
}

/* ---- hand-made GGUF files: toy vocabularies and error cases ---- */

typedef struct gbuf {
    uint8_t *p;
    size_t n, cap;
    uint64_t n_kv;
} gbuf;

static void gput(gbuf *b, const void *d, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, d, n);
    b->n += n;
}
static void gput_u32(gbuf *b, uint32_t v) { gput(b, &v, 4); }
static void gput_u64(gbuf *b, uint64_t v) { gput(b, &v, 8); }
static void gput_str(gbuf *b, const char *s) {
    gput_u64(b, strlen(s));
    gput(b, s, strlen(s));
}
static void kv_str(gbuf *b, const char *k, const char *v) {
    gput_str(b, k);
    gput_u32(b, GGUF_TYPE_STRING);
    gput_str(b, v);
    b->n_kv++;
}
static void kv_u32(gbuf *b, const char *k, uint32_t v) {
    gput_str(b, k);
    gput_u32(b, GGUF_TYPE_UINT32);
    gput_u32(b, v);
    b->n_kv++;
}
static void kv_strs(gbuf *b, const char *k, char **v, size_t n) {
    gput_str(b, k);
    gput_u32(b, GGUF_TYPE_ARRAY);
    gput_u32(b, GGUF_TYPE_STRING);
    gput_u64(b, n);
    for (size_t i = 0; i < n; i++) gput_str(b, v[i]);
    b->n_kv++;
}
static void kv_i32s(gbuf *b, const char *k, const int32_t *v, size_t n) {
    gput_str(b, k);
    gput_u32(b, GGUF_TYPE_ARRAY);
    gput_u32(b, GGUF_TYPE_INT32);
    gput_u64(b, n);
    gput(b, v, n * 4);
    b->n_kv++;
}
/* Header + kvs + padding; returns the file bytes (caller frees). */
static uint8_t *gfinish(gbuf *kvs, size_t *len) {
    gbuf f = {0};
    gput(&f, "GGUF", 4);
    gput_u32(&f, 3);
    gput_u64(&f, 0);
    gput_u64(&f, kvs->n_kv);
    gput(&f, kvs->p, kvs->n);
    while (f.n % 32) gput(&f, "", 1);
    free(kvs->p);
    *len = f.n;
    return f.p;
}

/* A toy byte-level vocabulary: the 256 byte symbols, a few merges, and
 * special tokens. Options break it in chosen ways. */
typedef struct toy_opts {
    const char *model, *pre;
    bool no_tokens, no_merges, bad_merge, dup_token;
} toy_opts;

enum { TOY_AB = 256, TOY_ABC, TOY_SPA, TOY_ABD, TOY_UD, TOY_CTL, TOY_IMEND, TOY_N };

static uint8_t *toy_gguf(toy_opts o, size_t *len) {
    char *toks[TOY_N];
    int32_t types[TOY_N];
    char sym[256][4];
    for (int b = 0; b < 256; b++) {
        uint32_t cp = tr_tokenizer_byte_to_cp((uint8_t)b);
        if (cp < 0x80) {
            sym[b][0] = (char)cp;
            sym[b][1] = 0;
        } else {
            sym[b][0] = (char)(0xC0 | (cp >> 6));
            sym[b][1] = (char)(0x80 | (cp & 0x3F));
            sym[b][2] = 0;
        }
        toks[b] = sym[b];
        types[b] = TOKENIZER_TYPE_NORMAL;
    }
    toks[TOY_AB] = "ab";
    toks[TOY_ABC] = "abc";
    toks[TOY_SPA] = "\xC4\xA0" "a";
    toks[TOY_ABD] = o.dup_token ? "abc" : "abd"; /* no merge makes "abd" */
    toks[TOY_UD] = "<ud>";
    toks[TOY_CTL] = "<|ctl|>";
    toks[TOY_IMEND] = "<|im_end|>";
    for (int i = TOY_AB; i < TOY_N; i++) types[i] = TOKENIZER_TYPE_NORMAL;
    types[TOY_UD] = TOKENIZER_TYPE_USER_DEFINED;
    types[TOY_CTL] = TOKENIZER_TYPE_CONTROL;
    char *merges[] = {"a b", "ab c", "\xC4\xA0 a", o.bad_merge ? "nospace" : "x y"};
    gbuf b = {0};
    kv_str(&b, "general.architecture", "llama");
    if (o.model) kv_str(&b, "tokenizer.ggml.model", o.model);
    if (o.pre) kv_str(&b, "tokenizer.ggml.pre", o.pre);
    if (!o.no_tokens) kv_strs(&b, "tokenizer.ggml.tokens", toks, TOY_N);
    kv_i32s(&b, "tokenizer.ggml.token_type", types, TOY_N);
    if (!o.no_merges) kv_strs(&b, "tokenizer.ggml.merges", merges, 4);
    kv_u32(&b, "tokenizer.ggml.eos_token_id", TOY_CTL);
    kv_u32(&b, "tokenizer.ggml.bos_token_id", TOY_UD);
    return gfinish(&b, len);
}

static tr_status toy_open(toy_opts o, tokenizer **t, tr_diag *d, uint8_t **mem,
                          gguf_file **f) {
    size_t len;
    *mem = toy_gguf(o, &len);
    assert_int_equal(tr_gguf_open_memory(*mem, len, f, d), TR_OK);
    return tr_tokenizer_from_gguf(*f, t, d);
}

static void expect_ids(const tokenizer *t, const char *s, bool special, const int32_t *want,
                       size_t n_want) {
    int32_t *ids;
    size_t n;
    assert_int_equal(tr_tokenizer_encode(t, s, strlen(s), special, &ids, &n), TR_OK);
    if (n != n_want || memcmp(ids, want, n * 4) != 0) {
        fprintf(stderr, "  encode '%s' special=%d\n", s, special);
        print_ids("want", want, n_want);
        print_ids("got ", ids, n);
    }
    assert_int_equal(n, n_want);
    assert_memory_equal(ids, want, n * 4);
    free(ids);
}

static void test_byte_alphabet(void **state) {
    (void)state;
    /* GPT-2's bytes_to_unicode(): printable Latin-1 maps to itself, the
     * other 68 bytes to U+0100.. in byte order */
    assert_int_equal(tr_tokenizer_byte_to_cp('!'), '!');
    assert_int_equal(tr_tokenizer_byte_to_cp('~'), '~');
    assert_int_equal(tr_tokenizer_byte_to_cp(0xA1), 0xA1);
    assert_int_equal(tr_tokenizer_byte_to_cp(0xFF), 0xFF);
    assert_int_equal(tr_tokenizer_byte_to_cp(0x00), 0x100);
    assert_int_equal(tr_tokenizer_byte_to_cp('\n'), 0x10A);
    assert_int_equal(tr_tokenizer_byte_to_cp(' '), 0x120); /* "Ġ" */
    assert_int_equal(tr_tokenizer_byte_to_cp(0x7F), 0x121);
    assert_int_equal(tr_tokenizer_byte_to_cp(0xA0), 0x142);
    assert_int_equal(tr_tokenizer_byte_to_cp(0xAD), 0x143);
    bool seen[324] = {false};
    for (int b = 0; b < 256; b++) {
        uint32_t cp = tr_tokenizer_byte_to_cp((uint8_t)b);
        assert_true(cp < 324 && !seen[cp]);
        seen[cp] = true;
    }
}

static void test_toy_vocab(void **state) {
    (void)state;
    tokenizer *t;
    tr_diag d = {0};
    uint8_t *mem;
    gguf_file *f;
    assert_int_equal(toy_open((toy_opts){.model = "gpt2", .pre = "gpt2"}, &t, &d, &mem, &f),
                     TR_OK);
    assert_int_equal(tr_tokenizer_check(t), TR_OK);
    tr_tokenizer_dump(t, stdout);
    expect_ids(t, "abc", false, (int32_t[]){TOY_ABC}, 1);
    expect_ids(t, "ab", false, (int32_t[]){TOY_AB}, 1);
    expect_ids(t, "abd", false, (int32_t[]){TOY_AB, 'd'}, 2);
    expect_ids(t, "x a", false, (int32_t[]){'x', TOY_SPA}, 2);
    /* user-defined tokens are split out even without special parsing */
    expect_ids(t, "x<ud>y", false, (int32_t[]){'x', TOY_UD, 'y'}, 3);
    /* control tokens only with it; <|im_end|> is control by its text */
    expect_ids(t, "<|ctl|>", true, (int32_t[]){TOY_CTL}, 1);
    expect_ids(t, "a<|im_end|>", true, (int32_t[]){'a', TOY_IMEND}, 2);
    int32_t *ids;
    size_t n;
    assert_int_equal(tr_tokenizer_encode(t, "<|ctl|>", 7, false, &ids, &n), TR_OK);
    assert_int_equal(n, 7); /* "<|", "ctl", "|>": no merges, one id per byte */
    free(ids);
    assert_true(tr_tokenizer_is_eog(t, TOY_CTL));   /* eos */
    assert_true(tr_tokenizer_is_eog(t, TOY_IMEND)); /* by text */
    assert_int_equal(tr_tokenizer_type(t, TOY_IMEND), TOKENIZER_TYPE_CONTROL);
    assert_false(tr_tokenizer_is_eog(t, TOY_UD));
    assert_false(tr_tokenizer_add_bos(t));
    assert_int_equal(tr_tokenizer_bos(t), TOY_UD);
    tr_tokenizer_free(t);

    /* llama3: a piece that is a token as a whole skips the merges */
    tokenizer *t3;
    assert_int_equal(tr_tokenizer_from_gguf_pre(f, "llama3", &t3, &d), TR_OK);
    expect_ids(t3, "abd", false, (int32_t[]){TOY_ABD}, 1);
    assert_true(tr_tokenizer_add_bos(t3)); /* llama3's default */
    tr_tokenizer_free(t3);
    tr_gguf_close(f);
    free(mem);
}

static void expect_build_error(toy_opts o, tr_status want, const char *needle) {
    tokenizer *t = NULL;
    tr_diag d = {0};
    uint8_t *mem;
    gguf_file *f;
    tr_status s = toy_open(o, &t, &d, &mem, &f);
    if (s != want || (needle && !strstr(d.message, needle)))
        fprintf(stderr, "  got %s '%s', want %s with '%s'\n", tr_status_name(s), d.message,
                tr_status_name(want), needle ? needle : "");
    assert_int_equal(s, want);
    assert_null(t);
    if (needle) assert_non_null(strstr(d.message, needle));
    tr_gguf_close(f);
    free(mem);
}

static void test_errors(void **state) {
    (void)state;
    expect_build_error((toy_opts){.model = "gpt2", .pre = "no-such-pre"}, TR_ERR_UNSUPPORTED,
                       "no-such-pre");
    /* an unknown tokenizer model names itself and the supported ones */
    expect_build_error((toy_opts){.model = "bert", .pre = "gpt2"}, TR_ERR_UNSUPPORTED, "'bert'");
    expect_build_error((toy_opts){.model = "bert", .pre = "gpt2"}, TR_ERR_UNSUPPORTED,
                       "gpt2, llama");
    expect_build_error((toy_opts){.pre = "gpt2"}, TR_ERR_NOT_FOUND, "tokenizer.ggml.model");
    expect_build_error((toy_opts){.model = "gpt2", .pre = "gpt2", .no_tokens = true},
                       TR_ERR_NOT_FOUND, "tokens");
    expect_build_error((toy_opts){.model = "gpt2", .pre = "gpt2", .no_merges = true},
                       TR_ERR_NOT_FOUND, "merges");
    expect_build_error((toy_opts){.model = "gpt2", .pre = "gpt2", .bad_merge = true},
                       TR_ERR_FORMAT, "nospace");
    expect_build_error((toy_opts){.model = "gpt2", .pre = "gpt2", .dup_token = true},
                       TR_ERR_FORMAT, "duplicate");

    /* a missing pre name means "default" */
    tokenizer *t;
    tr_diag d = {0};
    uint8_t *mem;
    gguf_file *f;
    assert_int_equal(toy_open((toy_opts){.model = "gpt2"}, &t, &d, &mem, &f), TR_OK);
    assert_string_equal(tr_tokenizer_pre_name(t), "default");
    tr_tokenizer_free(t);
    tr_status s = tr_tokenizer_from_gguf_pre(f, "unknown-thing", &t, &d);
    assert_int_equal(s, TR_ERR_UNSUPPORTED);
    assert_non_null(strstr(d.message, "unknown-thing"));

    /* NULL and out-of-range arguments */
    int32_t *ids;
    size_t n;
    char *out;
    size_t len;
    assert_int_equal(tr_tokenizer_from_gguf(NULL, &t, &d), TR_ERR_INVALID_ARG);
    tokenizer *tt;
    assert_int_equal(tr_tokenizer_from_gguf(f, &tt, NULL), TR_OK);
    assert_int_equal(tr_tokenizer_encode(NULL, "a", 1, false, &ids, &n), TR_ERR_INVALID_ARG);
    assert_int_equal(tr_tokenizer_encode(tt, NULL, 1, false, &ids, &n), TR_ERR_INVALID_ARG);
    assert_int_equal(tr_tokenizer_encode(tt, "a", 1, false, NULL, &n), TR_ERR_INVALID_ARG);
    int32_t bad[] = {1, TOY_N};
    assert_int_equal(tr_tokenizer_decode(tt, bad, 2, true, &out, &len), TR_ERR_INVALID_ARG);
    assert_int_equal(tr_tokenizer_decode(tt, NULL, 1, true, &out, &len), TR_ERR_INVALID_ARG);
    assert_int_equal(tr_tokenizer_n_vocab(NULL), 0);
    assert_int_equal(tr_tokenizer_find(NULL, "a"), -1);
    assert_false(tr_tokenizer_is_eog(NULL, 0));
    tr_tokenizer_free(NULL);
    tr_tokenizer_free(tt);
    tr_gguf_close(f);
    free(mem);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_byte_alphabet),
        cmocka_unit_test(test_toy_vocab),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_vocab_facts),
        cmocka_unit_test(test_eog),
        cmocka_unit_test(test_parity_smollm),
        cmocka_unit_test(test_parity_other_pre),
        cmocka_unit_test(test_pretokenize),
        cmocka_unit_test(test_roundtrip),
        cmocka_unit_test(test_roundtrip_bytes),
        cmocka_unit_test(test_decode_special),
        cmocka_unit_test(test_stream),
        cmocka_unit_test(test_bpe_modes),
        cmocka_unit_test(test_threads),
        cmocka_unit_test(test_long_inputs),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    tr_tokenizer_free(g_tok);
    tr_gguf_close(g_file);
    return rc;
}
