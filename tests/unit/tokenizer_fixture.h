/* tokenizer_fixture.h — what the tokenizer tests on real vocabularies
 * share (test_tokenizer.c on SmolLM2's BPE, test_tokenizer_gemma.c on
 * Gemma 3's SentencePiece-style vocabulary): the llama.cpp reference lines
 * of tests/data/tokenizer/<name>.jsonl (made by
 * scripts/ref/make_tokenizer_ref.py) and the parity check against them.
 *
 * A reference file holds one JSON object a line: {"text": "...", "ids":
 * [...], "special": true|false}, the ids llama.cpp's tokenizer gives the
 * text (special: control-token text parsed as such).
 *
 * Needs cmocka and jansson (the tests link both). Single-threaded.
 */
#ifndef TR_TESTS_UNIT_TOKENIZER_FIXTURE_H
#define TR_TESTS_UNIT_TOKENIZER_FIXTURE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "base/util.h"
#include "runtime/tokenizer/tokenizer.h"
#include "tests/unit/harness.h"

#define TOK_REF_DIR TRELLIS_SOURCE_DIR "/tests/data/tokenizer/"

typedef struct ref_line {
    char *text;
    size_t len;
    bool special;
    int32_t *ids;
    size_t n_ids;
} ref_line;

/* The lines of TOK_REF_DIR/file in *out (free with free_ref); returns how
 * many. A file that cannot be read or a malformed line fails the test. */
static size_t load_ref(const char *file, ref_line **out) {
    char path[1024];
    snprintf(path, sizeof path, "%s%s", TOK_REF_DIR, file);
    char *buf;
    size_t len;
    if (tr_read_file(path, &buf, &len)) fail_msg("cannot read %s", path);
    size_t cap = 64, n = 0;
    ref_line *v = malloc(cap * sizeof *v);
    for (char *line = buf; line && *line;) {
        char *nl = strchr(line, '\n');
        if (nl) *nl = 0;
        json_error_t err;
        json_t *j = json_loads(line, JSON_ALLOW_NUL, &err);
        assert_non_null(j);
        json_t *jt = json_object_get(j, "text"), *ji = json_object_get(j, "ids");
        assert_true(json_is_string(jt) && json_is_array(ji));
        if (n == cap) v = realloc(v, (cap *= 2) * sizeof *v);
        ref_line *r = &v[n++];
        r->len = json_string_length(jt);
        r->text = malloc(r->len + 1);
        memcpy(r->text, json_string_value(jt), r->len + 1);
        r->special = json_is_true(json_object_get(j, "special"));
        r->n_ids = json_array_size(ji);
        r->ids = malloc((r->n_ids + 1) * sizeof *r->ids);
        for (size_t i = 0; i < r->n_ids; i++)
            r->ids[i] = (int32_t)json_integer_value(json_array_get(ji, i));
        json_decref(j);
        line = nl ? nl + 1 : NULL;
    }
    free(buf);
    *out = v;
    return n;
}

static void free_ref(ref_line *v, size_t n) {
    for (size_t i = 0; i < n; i++) {
        free(v[i].text);
        free(v[i].ids);
    }
    free(v);
}

static void print_ids(const char *what, const int32_t *ids, size_t n) {
    fprintf(stderr, "    %s (%zu):", what, n);
    for (size_t i = 0; i < n && i < 40; i++) fprintf(stderr, " %d", ids[i]);
    fprintf(stderr, "%s\n", n > 40 ? " ..." : "");
}

/* Encodes every line of file with t and compares with llama.cpp's ids;
 * returns the mismatches (the first 15 printed) and sets *total to the
 * lines. */
static size_t check_parity(const tokenizer *t, const char *file, size_t *total) {
    ref_line *ref;
    size_t n = load_ref(file, &ref), bad = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t *ids;
        size_t n_ids;
        assert_int_equal(tr_tokenizer_encode(t, ref[i].text, ref[i].len, ref[i].special,
                                             &ids, &n_ids),
                         TR_OK);
        bool same = n_ids == ref[i].n_ids &&
                    (n_ids == 0 || memcmp(ids, ref[i].ids, n_ids * sizeof *ids) == 0);
        if (!same) {
            if (bad < 15) {
                fprintf(stderr, "  MISMATCH %s line %zu special=%d text='%.*s'\n", file,
                        i + 1, ref[i].special, (int)TR_MIN(ref[i].len, 120), ref[i].text);
                print_ids("llama.cpp", ref[i].ids, ref[i].n_ids);
                print_ids("trellis  ", ids, n_ids);
            }
            bad++;
        }
        free(ids);
    }
    free_ref(ref, n);
    *total = n;
    return bad;
}

#endif
