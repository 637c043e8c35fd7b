/* test_tokenizer_gemma.c — the SentencePiece-style tokenizer on Gemma 3's
 * vocabulary (262,144 tokens) against llama.cpp: tests/data/tokenizer/
 * gemma3_*.jsonl, made by scripts/ref/make_tokenizer_ref.py (command
 * there and in tests/data/tokenizer/README.md).
 *
 * Needs gemma-3-270m-q4_k_m.gguf in the model cache (scripts/setup.sh
 * --model gemma3-270m): without it every test FAILS (ctest label gemma).
 *
 * Checks: ids identical to llama.cpp on the BPE reference strings plus
 * Gemma's chat-template strings, with add_space_prefix as the file says
 * (false) and flipped to true; the special ids and the end-of-generation
 * set; decode and the incremental decoder on byte-fallback pieces; Gemma's
 * chat template rendered as llama.cpp renders it (same text, same ids);
 * the engine taking that template from the vocabulary, since the file has
 * none.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "base/paths.h"
#include "base/util.h"
#include "runtime/chat/chat.h"
#include "runtime/gguf/gguf.h"
#include "runtime/tokenizer/tokenizer.h"
#include "runtime/tokenizer/tokenizer_internal.h"
#include "tests/unit/tokenizer_fixture.h"
#include "tests/unit/test_env.h"
#include "trellis.h"

static gguf_file *g_file;
static tokenizer *g_tok;

static int setup(void **state) {
    (void)state;
    char path[4096];
    if (!gemma_model_path(path, sizeof path)) return -1;
    tr_diag d = {0};
    if (tr_gguf_open(path, &g_file, &d) || tr_tokenizer_from_gguf(g_file, &g_tok, &d)) {
        fprintf(stderr, "load: %s\n", d.message);
        return -1;
    }
    return 0;
}

static int teardown(void **state) {
    (void)state;
    tr_tokenizer_free(g_tok);
    tr_gguf_close(g_file);
    return 0;
}

/* Every line of file encoded and compared; returns the lines and sets
 * *bad_out to the mismatches. */
static size_t parity(const char *file, size_t *bad_out) {
    size_t n;
    *bad_out = check_parity(g_tok, file, &n);
    printf("%s: %zu/%zu lines identical to llama.cpp\n", file, n - *bad_out, n);
    return n;
}

static void test_parity(void **state) {
    (void)state;
    assert_false(tr_tokenizer_add_space_prefix(g_tok)); /* Gemma's setting */
    size_t bad;
    assert_true(parity("gemma3_ref.jsonl", &bad) >= 400);
    assert_int_equal(bad, 0);
}

/* The other setting of add_space_prefix (Llama-2-style SPM files): the
 * same vocabulary with the flag flipped, as the reference script patched
 * the file. */
static void test_parity_space_prefix(void **state) {
    (void)state;
    g_tok->add_space_prefix = true; /* test-only: the tokenizer is ours */
    size_t bad;
    parity("gemma3_prefix.jsonl", &bad);
    g_tok->add_space_prefix = false;
    assert_int_equal(bad, 0);
}

static void test_meta(void **state) {
    (void)state;
    char *buf;
    size_t len;
    assert_int_equal(tr_read_file(TOK_REF_DIR "gemma3_meta.json", &buf, &len), 0);
    json_error_t err;
    json_t *j = json_loads(buf, 0, &err);
    free(buf);
    assert_non_null(j);
    assert_int_equal(tr_tokenizer_n_vocab(g_tok), json_integer_value(json_object_get(j, "n_vocab")));
    assert_int_equal(tr_tokenizer_bos(g_tok), json_integer_value(json_object_get(j, "bos")));
    assert_int_equal(tr_tokenizer_eos(g_tok), json_integer_value(json_object_get(j, "eos")));
    assert_true(tr_tokenizer_add_bos(g_tok));
    json_t *eog = json_object_get(j, "eog");
    size_t n_eog = 0;
    for (int32_t id = 0; id < tr_tokenizer_n_vocab(g_tok); id++) {
        bool want = false;
        for (size_t i = 0; i < json_array_size(eog); i++)
            want |= json_integer_value(json_array_get(eog, i)) == id;
        if (tr_tokenizer_is_eog(g_tok, id) != want)
            fail_msg("EOG mismatch at id %d: llama.cpp %d", id, want);
        n_eog += want;
    }
    assert_true(n_eog >= 2); /* <eos>, <end_of_turn> */
    assert_int_equal(tr_tokenizer_find(g_tok, "<end_of_turn>"), 106);
    assert_true(tr_tokenizer_is_eog(g_tok, 106));
    json_decref(j);
    assert_int_equal(tr_tokenizer_check(g_tok), TR_OK);
}

/* text with "▁" read as the space SPM decodes it to */
static size_t spm_plain(const char *s, size_t n, char *out) {
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (n - i >= 3 && memcmp(s + i, "\xE2\x96\x81", 3) == 0) {
            out[o++] = ' ';
            i += 2;
        } else {
            out[o++] = s[i];
        }
    }
    return o;
}

/* true if s[0..n) is a sequence of whole (structurally complete) UTF-8
 * characters: every lead byte has its continuation bytes. */
static bool utf8_whole(const uint8_t *s, size_t n) {
    for (size_t i = 0; i < n;) {
        uint8_t b = s[i];
        size_t k = b < 0x80 ? 1 : b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : b >= 0xC0 ? 2 : 0;
        if (k == 0 || i + k > n) return false;
        for (size_t j = 1; j < k; j++)
            if ((s[i + j] & 0xC0) != 0x80) return false;
        i += k;
    }
    return true;
}

/* decode(encode(x)) == x, and the incremental decoder emits the same text
 * in whole characters, on every reference string; byte-fallback pieces
 * (characters that are no token: single bytes "<0xNN>") included. */
static void test_decode_and_stream(void **state) {
    (void)state;
    ref_line *ref;
    size_t n = load_ref("gemma3_ref.jsonl", &ref), byte_pieces = 0, split_chars = 0;
    size_t cap = 3 * (tr_tokenizer_max_token_len(g_tok) + 1);
    char *chunk = malloc(cap);
    for (size_t i = 0; i < n; i++) {
        if (ref[i].special) continue;
        char *out;
        size_t len;
        assert_int_equal(tr_tokenizer_decode(g_tok, ref[i].ids, ref[i].n_ids, true, &out, &len),
                         TR_OK);
        char *want = malloc(ref[i].len + 1);
        size_t wl = spm_plain(ref[i].text, ref[i].len, want);
        if (len != wl || memcmp(out, want, wl) != 0)
            fail_msg("decode of line %zu differs: %.60s", i, ref[i].text);
        /* streamed, one token at a time */
        char *acc = malloc(3 * len + 8);
        size_t al = 0;
        tokenizer_stream st;
        tr_tokenizer_stream_init(&st, true);
        for (size_t k = 0; k < ref[i].n_ids; k++) {
            size_t ol;
            int32_t id = ref[i].ids[k];
            byte_pieces += tr_tokenizer_type(g_tok, id) == TOKENIZER_TYPE_BYTE;
            assert_int_equal(tr_tokenizer_stream_push(&st, g_tok, id, chunk, cap, &ol), TR_OK);
            split_chars += st.n_pending > 0;
            /* never part of a character: every chunk is whole UTF-8 */
            if (!utf8_whole((const uint8_t *)chunk, ol))
                fail_msg("line %zu: chunk %zu splits a character", i, k);
            memcpy(acc + al, chunk, ol);
            al += ol;
        }
        al += tr_tokenizer_stream_flush(&st, acc + al, 8);
        if (al != len || memcmp(acc, out, len) != 0)
            fail_msg("stream of line %zu differs: %.60s", i, ref[i].text);
        free(acc);
        free(want);
        free(out);
    }
    printf("byte-fallback pieces: %zu; pushes that held part of a character: %zu\n",
           byte_pieces, split_chars);
    assert_true(byte_pieces > 0); /* the reference exercises the fallback */
    assert_true(split_chars > 0);
    free(chunk);
    free_ref(ref, n);
}

/* Gemma's chat template: Trellis renders llama.cpp's text and the text
 * encodes to llama.cpp's ids. */
static void test_chat_template(void **state) {
    (void)state;
    char *buf;
    size_t len;
    assert_int_equal(tr_read_file(TOK_REF_DIR "gemma3_chat.jsonl", &buf, &len), 0);
    size_t n_conv = 0;
    for (char *line = buf; line && *line;) {
        char *nl = strchr(line, '\n');
        if (nl) *nl = 0;
        json_error_t err;
        json_t *j = json_loads(line, 0, &err);
        assert_non_null(j);
        json_t *msgs = json_object_get(j, "messages");
        size_t nm = json_array_size(msgs);
        chat_message m[16];
        assert_true(nm <= 16);
        for (size_t i = 0; i < nm; i++) {
            json_t *o = json_array_get(msgs, i);
            m[i].role = json_string_value(json_object_get(o, "role"));
            m[i].content = json_string_value(json_object_get(o, "content"));
        }
        char *text;
        size_t tl;
        tr_diag d = {0};
        assert_int_equal(tr_chat_render(CHAT_TEMPLATE_GEMMA, NULL, m, nm, true, &text, &tl, &d),
                         TR_OK);
        const char *want = json_string_value(json_object_get(j, "text"));
        if (strcmp(text, want) != 0) fail_msg("render:\n%s\nllama.cpp:\n%s", text, want);
        int32_t *ids;
        size_t n_ids;
        assert_int_equal(tr_tokenizer_encode(g_tok, text, tl, true, &ids, &n_ids), TR_OK);
        json_t *ji = json_object_get(j, "ids");
        assert_int_equal(n_ids, json_array_size(ji));
        for (size_t i = 0; i < n_ids; i++)
            assert_int_equal(ids[i], json_integer_value(json_array_get(ji, i)));
        free(ids);
        free(text);
        json_decref(j);
        n_conv++;
        line = nl ? nl + 1 : NULL;
    }
    free(buf);
    assert_true(n_conv >= 3);
}

/* The Gemma GGUF carries no chat template: the engine takes the Gemma
 * family's from the vocabulary's <start_of_turn>/<end_of_turn> tokens,
 * and a chat request renders and runs. */
static void test_chat_without_template(void **state) {
    (void)state;
    char path[4096], err[256] = "";
    assert_true(tr_cached_model_path(TR_GEMMA3_MODEL_FILE, path, sizeof path));
    trellis_engine_options o;
    trellis_engine_options_default(&o);
    o.threads = 2;
    trellis_engine *e = NULL;
    assert_int_equal(trellis_engine_new(path, &o, &e, err, sizeof err), TRELLIS_OK);
    trellis_message m[2] = {{.role = "user", .content = "Hi"},
                            {.role = "assistant", .content = "Hello."}};
    char *text = NULL;
    assert_int_equal(trellis_chat_render(e, m, 2, true, &text, NULL, err, sizeof err),
                     TRELLIS_OK);
    assert_string_equal(text, "<start_of_turn>user\nHi<end_of_turn>\n"
                              "<start_of_turn>model\nHello.<end_of_turn>\n"
                              "<start_of_turn>model\n");
    free(text);
    trellis_engine_free(e);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parity),
        cmocka_unit_test(test_parity_space_prefix),
        cmocka_unit_test(test_meta),
        cmocka_unit_test(test_decode_and_stream),
        cmocka_unit_test(test_chat_template),
        cmocka_unit_test(test_chat_without_template),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
