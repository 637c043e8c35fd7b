/* fuzz_cli_json.c — libFuzzer target for the CLI's JSON writers
 * (app/cli/cli_json_internal.h): `tokenize --json` and `generate --json`.
 *
 * The input makes a small vocabulary and a completion: byte 0 picks the
 * number of pieces (1..16); each piece is a length byte (0..31) and that
 * many bytes, any bytes; the rest is the completion text, and its bytes
 * also give the token ids (some outside the vocabulary), their log-probs
 * (a few non-finite) and top alternatives.
 *
 * Checked on every input: each writer returns a document that jansson
 * parses; tokenize's pieces give back each token's bytes exactly (a string
 * when valid UTF-8, else an array of byte values, null for an unknown id);
 * the sample's text equals the input when that is valid UTF-8 and is a
 * valid string otherwise; every log-prob entry is there with at most
 * TRELLIS_MAX_TOP_LOGPROBS alternatives.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "base/utf8.h"
#include "app/cli/cli_json_internal.h"

#define CHECK(c)                                                                   \
    do {                                                                           \
        if (!(c)) {                                                                \
            fprintf(stderr, "fuzz_cli_json: check failed: %s (line %d)\n", #c,     \
                    __LINE__);                                                     \
            abort();                                                               \
        }                                                                          \
    } while (0)

typedef struct vocab {
    const uint8_t *p[16];
    size_t len[16];
    int n;
} vocab;

static const char *piece(const void *ctx, int32_t id, size_t *len) {
    const vocab *v = ctx;
    if (id < 0 || id >= v->n) return NULL;
    *len = v->len[id];
    return (const char *)v->p[id];
}

/* The bytes a piece value stands for; false for null. */
static bool piece_bytes(json_t *p, uint8_t *out, size_t *n) {
    if (json_is_null(p)) return false;
    if (json_is_string(p)) {
        *n = json_string_length(p);
        memcpy(out, json_string_value(p), *n);
        return true;
    }
    CHECK(json_is_array(p));
    *n = json_array_size(p);
    for (size_t i = 0; i < *n; i++) {
        json_int_t b = json_integer_value(json_array_get(p, i));
        CHECK(json_is_integer(json_array_get(p, i)) && b >= 0 && b <= 255);
        out[i] = (uint8_t)b;
    }
    /* an array only for bytes that are not valid UTF-8 */
    CHECK(!tr_utf8_valid(out, *n));
    return true;
}

static json_t *parse(char *s) {
    CHECK(s != NULL);
    json_t *j = json_loads(s, JSON_ALLOW_NUL, NULL);
    CHECK(j != NULL);
    free(s);
    return j;
}

static void check_tokenize(const vocab *v, const int32_t *ids, size_t n) {
    json_t *j = parse(tr_cli_json_tokenize(ids, n, piece, v));
    json_t *pieces = json_object_get(j, "pieces");
    CHECK(json_array_size(pieces) == n);
    CHECK(json_integer_value(json_object_get(j, "count")) == (json_int_t)n);
    for (size_t i = 0; i < n; i++) {
        CHECK(json_integer_value(json_array_get(json_object_get(j, "ids"), i)) == ids[i]);
        uint8_t buf[64];
        size_t len = 0;
        bool known = piece_bytes(json_array_get(pieces, i), buf, &len);
        CHECK(known == (ids[i] < v->n));
        if (known) CHECK(len == v->len[ids[i]] && memcmp(buf, v->p[ids[i]], len) == 0);
    }
    json_decref(j);
}

static void check_sample(const vocab *v, const char *text, size_t len, const int32_t *ids,
                         size_t n) {
    trellis_logprob *lp = calloc(n ? n : 1, sizeof *lp);
    CHECK(lp != NULL);
    for (size_t i = 0; i < n; i++) {
        uint8_t b = (uint8_t)text[i];
        lp[i].token = ids[i];
        lp[i].logprob = b == 0xff ? -INFINITY : b == 0xfe ? NAN : -(float)b / 16.0f;
        lp[i].n_top = (int32_t)(b % 24) - 2; /* -2..21: out of range both ways */
        for (int k = 0; k < TRELLIS_MAX_TOP_LOGPROBS; k++)
            lp[i].top[k] = (trellis_top_logprob){(int32_t)((b + k) % 20), -(float)k};
    }
    cli_sample_json s = {
        .index = 0, .n_samples = 1, .text = text, .text_len = len, .tokens = ids,
        .n_tokens = (int32_t)n, .logprobs = n % 2 ? lp : NULL, .finish = "length",
        .stop = len ? text : NULL, .stop_token = n ? ids[0] : -1,
        .error = n % 3 ? NULL : text, .model_load = "read",
        .constraint = n % 5 ? NULL : "regex",
        .metrics = {.prompt_tokens = (int32_t)len, .ttft_ms = (double)n,
                    .tpot_ms = (double)len, .e2e_ms = (double)(n + len)},
    };
    json_t *j = parse(tr_cli_json_sample(&s, piece, v));
    json_t *t = json_object_get(j, "text");
    CHECK(json_is_string(t));
    if (tr_utf8_valid(text, len))
        CHECK(json_string_length(t) == len && memcmp(json_string_value(t), text, len) == 0);
    CHECK(json_array_size(json_object_get(j, "tokens")) == n);
    json_t *l = json_object_get(j, "logprobs");
    CHECK(!s.logprobs == !l);
    for (size_t i = 0; l && i < n; i++) {
        json_t *top = json_object_get(json_array_get(l, i), "top");
        CHECK(json_array_size(top) <= TRELLIS_MAX_TOP_LOGPROBS);
    }
    json_decref(j);
    free(lp);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0 || size > (1u << 16)) return 0;
    vocab v = {.n = 1 + data[0] % 16};
    size_t at = 1;
    for (int i = 0; i < v.n; i++) {
        size_t len = at < size ? data[at++] % 32 : 0;
        if (len > size - at) len = size - at;
        v.p[i] = data + at;
        v.len[i] = len;
        at += len;
    }
    size_t len = size - at;
    char *text = malloc(len + 1); /* NUL-terminated: it is also the stop string */
    int32_t *ids = malloc((len ? len : 1) * sizeof *ids);
    if (!text || !ids) {
        free(text);
        free(ids);
        return 0;
    }
    memcpy(text, data + at, len);
    text[len] = 0;
    for (size_t i = 0; i < len; i++) ids[i] = (int32_t)((uint8_t)text[i] % (v.n + 2));
    check_tokenize(&v, ids, len);
    check_sample(&v, text, len, ids, len);
    free(ids);
    free(text);
    return 0;
}
