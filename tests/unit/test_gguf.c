/* test_gguf.c — the GGUF loader: the real default model, hand-built valid
 * files, one corrupt file per parse stage (each asserting the error code,
 * the byte offset and that the message names the field), every truncation
 * of a valid file, byte-flip mutations, getters' conversions.
 *
 * Files are built in memory by a small writer (wbuf) and opened from an
 * exact-size heap copy, so that AddressSanitizer catches any read past the
 * end.
 */
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/unit/harness.h"

#include "kernels/dtype.h"
#include "base/paths.h"
#include "base/util.h"
#include "runtime/gguf/gguf.h"

/* ---- an in-memory GGUF writer ---- */

typedef struct wbuf {
    uint8_t *p;
    size_t len, cap;
} wbuf;

static void w_bytes(wbuf *w, const void *src, size_t n) {
    if (w->len + n > w->cap) {
        size_t c = w->cap ? w->cap * 2 : 256;
        while (c < w->len + n) c *= 2;
        w->p = realloc(w->p, c);
        assert_non_null(w->p);
        w->cap = c;
    }
    if (n) memcpy(w->p + w->len, src, n);
    w->len += n;
}
static void w_u8(wbuf *w, uint8_t v) { w_bytes(w, &v, 1); }
static void w_le(wbuf *w, uint64_t v, int n) {
    for (int i = 0; i < n; i++) w_u8(w, (uint8_t)(v >> (8 * i)));
}
static void w_u16(wbuf *w, uint16_t v) { w_le(w, v, 2); }
static void w_u32(wbuf *w, uint32_t v) { w_le(w, v, 4); }
static void w_u64(wbuf *w, uint64_t v) { w_le(w, v, 8); }
static void w_f32(wbuf *w, float f) {
    uint32_t b;
    memcpy(&b, &f, 4);
    w_u32(w, b);
}
static void w_f64(wbuf *w, double d) {
    uint64_t b;
    memcpy(&b, &d, 8);
    w_u64(w, b);
}
static void w_str(wbuf *w, const char *s) {
    w_u64(w, strlen(s));
    w_bytes(w, s, strlen(s));
}
static void w_header(wbuf *w, uint32_t version, uint64_t n_tensors,
                     uint64_t n_kv) {
    w_bytes(w, "GGUF", 4);
    w_u32(w, version);
    w_u64(w, n_tensors);
    w_u64(w, n_kv);
}
static void w_kv(wbuf *w, const char *key, gguf_type t) {
    w_str(w, key);
    w_u32(w, t);
}
static void w_arr(wbuf *w, gguf_type elem, uint64_t n) {
    w_u32(w, elem);
    w_u64(w, n);
}
static void w_tensor(wbuf *w, const char *name, uint32_t n_dims,
                     const uint64_t *ne, uint32_t type, uint64_t offset) {
    w_str(w, name);
    w_u32(w, n_dims);
    for (uint32_t d = 0; d < n_dims; d++) w_u64(w, ne[d]);
    w_u32(w, type);
    w_u64(w, offset);
}
static void w_pad(wbuf *w, size_t align) {
    while (w->len % align) w_u8(w, 0);
}
static void w_fill(wbuf *w, size_t n, uint8_t seed) {
    for (size_t i = 0; i < n; i++) w_u8(w, (uint8_t)(seed + i * 7));
}
static void w_free(wbuf *w) {
    free(w->p);
    memset(w, 0, sizeof *w);
}

/* Opens an exact-size copy of bytes (so ASan sees any overread). The copy
 * is returned through *copy and must outlive the file. */
static tr_status open_copy(const void *bytes, size_t len, gguf_file **f,
                           tr_diag *d, void **copy) {
    *copy = malloc(len ? len : 1);
    assert_non_null(*copy);
    if (len) memcpy(*copy, bytes, len);
    return tr_gguf_open_memory(*copy, len, f, d);
}

/* Opens w, expecting failure with code at offset, the message containing
 * every given substring (NULL-terminated list). */
static void expect_fail_(const wbuf *w, size_t len, tr_status code,
                         uint64_t offset, ...) {
    gguf_file *sentinel = (gguf_file *)(uintptr_t)0x1234;
    gguf_file *f = sentinel;
    tr_diag d;
    memset(&d, 0, sizeof d);
    void *copy;
    tr_status s = open_copy(w->p, len, &f, &d, &copy);
    if (s != code || d.offset != offset)
        print_error("got %s at %llu: %s\n", tr_status_name(s),
                    (unsigned long long)d.offset, d.message);
    assert_int_equal(s, code);
    assert_int_equal(d.code, code);
    assert_ptr_equal(f, sentinel); /* untouched on failure */
    assert_int_equal(d.offset, offset);
    va_list ap;
    va_start(ap, offset);
    const char *sub;
    while ((sub = va_arg(ap, const char *))) {
        if (!strstr(d.message, sub))
            print_error("message \"%s\" lacks \"%s\"\n", d.message, sub);
        assert_non_null(strstr(d.message, sub));
    }
    va_end(ap);
    /* Every message also states the byte offset. */
    char at[48];
    snprintf(at, sizeof at, "at byte %llu", (unsigned long long)offset);
    assert_non_null(strstr(d.message, at));
    free(copy);
}
#define expect_fail(w, code, offset, ...) \
    expect_fail_((w), (w)->len, (code), (offset), __VA_ARGS__, (const char *)NULL)

/* The small valid file most tests start from. Records a few offsets. */
typedef struct small_file {
    wbuf w;
    size_t data_start;
} small_file;

static const float k_f32_data[8] = {1, 2, 3, 4, -1, -2, -3, -4};

static void build_small(small_file *sf) {
    memset(sf, 0, sizeof *sf);
    wbuf *w = &sf->w;
    w_header(w, 3, 2, 22);
    w_kv(w, "general.architecture", GGUF_TYPE_STRING);
    w_str(w, "llama");
    w_kv(w, "t.u8", GGUF_TYPE_UINT8);
    w_u8(w, 200);
    w_kv(w, "t.i8", GGUF_TYPE_INT8);
    w_u8(w, (uint8_t)-5);
    w_kv(w, "t.u16", GGUF_TYPE_UINT16);
    w_u16(w, 65000);
    w_kv(w, "t.i16", GGUF_TYPE_INT16);
    w_u16(w, (uint16_t)-300);
    w_kv(w, "t.u32", GGUF_TYPE_UINT32);
    w_u32(w, 4000000000u);
    w_kv(w, "t.i32", GGUF_TYPE_INT32);
    w_u32(w, (uint32_t)-7);
    w_kv(w, "t.i32pos", GGUF_TYPE_INT32);
    w_u32(w, 7);
    w_kv(w, "t.u64", GGUF_TYPE_UINT64);
    w_u64(w, 1ull << 40);
    w_kv(w, "t.u64max", GGUF_TYPE_UINT64);
    w_u64(w, UINT64_MAX);
    w_kv(w, "t.i64", GGUF_TYPE_INT64);
    w_u64(w, (uint64_t)-(1ll << 40));
    w_kv(w, "t.f32", GGUF_TYPE_FLOAT32);
    w_f32(w, 1.5f);
    w_kv(w, "t.f64", GGUF_TYPE_FLOAT64);
    w_f64(w, 2.25);
    w_kv(w, "t.f64big", GGUF_TYPE_FLOAT64);
    w_f64(w, 1e300);
    w_kv(w, "t.bool", GGUF_TYPE_BOOL);
    w_u8(w, 1);
    w_kv(w, "t.strs", GGUF_TYPE_ARRAY);
    w_arr(w, GGUF_TYPE_STRING, 3);
    w_str(w, "a");
    w_str(w, "bc");
    w_str(w, "");
    w_kv(w, "t.ints", GGUF_TYPE_ARRAY);
    w_arr(w, GGUF_TYPE_INT32, 3);
    w_u32(w, 1);
    w_u32(w, (uint32_t)-2);
    w_u32(w, 3);
    w_kv(w, "t.nested", GGUF_TYPE_ARRAY); /* [[1, 2], [], ["x"]] */
    w_arr(w, GGUF_TYPE_ARRAY, 3);
    w_arr(w, GGUF_TYPE_UINT8, 2);
    w_u8(w, 1);
    w_u8(w, 2);
    w_arr(w, GGUF_TYPE_STRING, 0);
    w_arr(w, GGUF_TYPE_STRING, 1);
    w_str(w, "x");
    w_kv(w, "t.bools", GGUF_TYPE_ARRAY);
    w_arr(w, GGUF_TYPE_BOOL, 2);
    w_u8(w, 1);
    w_u8(w, 0);
    w_kv(w, "t.f32s", GGUF_TYPE_ARRAY);
    w_arr(w, GGUF_TYPE_FLOAT32, 2);
    w_f32(w, 0.5f);
    w_f32(w, -1.0f);
    w_kv(w, "t.u64s", GGUF_TYPE_ARRAY);
    w_arr(w, GGUF_TYPE_UINT64, 2);
    w_u64(w, 5);
    w_u64(w, UINT64_MAX);
    w_kv(w, "t.str", GGUF_TYPE_STRING);
    w_str(w, "he said \"hi\"\n");
    const uint64_t ne_a[2] = {4, 2}, ne_b[1] = {32};
    w_tensor(w, "t.f32", 2, ne_a, TR_DTYPE_F32, 0);
    w_tensor(w, "t.q4", 1, ne_b, TR_DTYPE_Q4_1, 32);
    w_pad(w, 32);
    sf->data_start = w->len;
    w_bytes(w, k_f32_data, sizeof k_f32_data); /* 32 bytes */
    w_fill(w, 20, 9);                           /* one Q4_1 block */
}

/* ---- the real model ---- */

static void test_real_model(void **state) {
    (void)state;
    char path[4096];
    if (!tr_default_model_path(path, sizeof path) || access(path, R_OK) != 0) {
        print_message("default model not found (%s): skipped\n", path);
        skip();
    }
    gguf_file *f = NULL;
    tr_diag d;
    memset(&d, 0, sizeof d);
    uint64_t t0 = tr_now_ns();
    tr_status s = tr_gguf_open(path, &f, &d);
    uint64_t t1 = tr_now_ns();
    if (s) print_error("%s\n", d.message);
    assert_int_equal(s, TR_OK);
    print_message("opened %s in %.2f ms\n", path, (t1 - t0) / 1e6);
    assert_int_equal(tr_gguf_check(f), TR_OK);
    assert_int_equal(tr_gguf_version(f), 3);
    assert_int_equal(tr_gguf_tensor_count(f), 272);
    assert_int_equal(tr_gguf_kv_count(f), 33);
    assert_int_equal(tr_gguf_alignment(f), 32);
    assert_int_equal(tr_gguf_data_offset(f), 1785664);
    assert_int_equal(tr_gguf_file_size(f), 98362432);

    gguf_str arch;
    assert_int_equal(tr_gguf_get_str(f, "general.architecture", &arch), TR_OK);
    assert_true(tr_gguf_str_eq(arch, "llama"));
    uint32_t u;
    assert_int_equal(tr_gguf_get_u32(f, "llama.block_count", &u), TR_OK);
    assert_int_equal(u, 30);
    assert_int_equal(tr_gguf_get_u32(f, "llama.embedding_length", &u), TR_OK);
    assert_int_equal(u, 576);
    assert_int_equal(tr_gguf_get_u32(f, "llama.feed_forward_length", &u), TR_OK);
    assert_int_equal(u, 1536);
    assert_int_equal(tr_gguf_get_u32(f, "llama.attention.head_count_kv", &u), TR_OK);
    assert_int_equal(u, 3);
    float eps;
    assert_int_equal(
        tr_gguf_get_f32(f, "llama.attention.layer_norm_rms_epsilon", &eps), TR_OK);
    assert_float_equal(eps, 1e-5f, 1e-9f);
    bool b = true;
    assert_int_equal(tr_gguf_get_bool(f, "tokenizer.ggml.add_bos_token", &b), TR_OK);
    assert_false(b);

    gguf_type et;
    uint64_t n;
    assert_int_equal(tr_gguf_get_arr(f, "tokenizer.ggml.tokens", &et, &n), TR_OK);
    assert_int_equal(et, GGUF_TYPE_STRING);
    assert_int_equal(n, 49152);
    gguf_str tok;
    assert_int_equal(tr_gguf_get_arr_str(f, "tokenizer.ggml.tokens", 0, &tok), TR_OK);
    assert_true(tr_gguf_str_eq(tok, "<|endoftext|>"));
    assert_int_equal(tr_gguf_get_arr_str(f, "tokenizer.ggml.tokens", 49151, &tok),
                     TR_OK);
    assert_true(tr_gguf_str_eq(tok, "ectable"));
    assert_int_equal(tr_gguf_get_arr_str(f, "tokenizer.ggml.tokens", 49152, &tok),
                     TR_ERR_INVALID_ARG);
    assert_int_equal(tr_gguf_get_arr(f, "tokenizer.ggml.merges", &et, &n), TR_OK);
    assert_int_equal(et, GGUF_TYPE_STRING);
    assert_int_equal(n, 48900);
    assert_int_equal(tr_gguf_get_arr_str(f, "tokenizer.ggml.merges", 0, &tok), TR_OK);
    assert_true(tr_gguf_str_eq(tok, "\xc4\xa0 t"));
    assert_int_equal(tr_gguf_get_arr_str(f, "tokenizer.ggml.merges", 48899, &tok),
                     TR_OK);
    assert_true(tr_gguf_str_eq(tok, "ect able"));
    int64_t tt;
    assert_int_equal(tr_gguf_get_arr_i64(f, "tokenizer.ggml.token_type", 0, &tt),
                     TR_OK);
    assert_int_equal(tt, 3);
    assert_int_equal(tr_gguf_get_arr_i64(f, "tokenizer.ggml.token_type", 100, &tt),
                     TR_OK);
    assert_int_equal(tt, 1);

    const gguf_tensor *emb = tr_gguf_tensor_find(f, "token_embd.weight");
    assert_non_null(emb);
    assert_int_equal(emb->type, TR_DTYPE_Q8_0);
    assert_int_equal(emb->n_dims, 2);
    assert_int_equal(emb->ne[0], 576);
    assert_int_equal(emb->ne[1], 49152);
    assert_int_equal(emb->ne[2], 1);
    const gguf_tensor *fd = tr_gguf_tensor_find(f, "blk.0.ffn_down.weight");
    assert_non_null(fd);
    assert_int_equal(fd->type, TR_DTYPE_Q4_1);
    assert_int_equal(fd->ne[0], 1536);
    assert_int_equal(fd->ne[1], 576);
    assert_int_equal(fd->size, 552960);
    const gguf_tensor *on = tr_gguf_tensor_find(f, "output_norm.weight");
    assert_non_null(on);
    assert_int_equal(on->type, TR_DTYPE_F32);
    assert_null(tr_gguf_tensor_find(f, "output.weight")); /* tied embeddings */

    /* Every tensor: inside the mapping, size = rows x row bytes. */
    const uint8_t *base = (const uint8_t *)emb->data - emb->offset;
    for (uint64_t i = 0; i < tr_gguf_tensor_count(f); i++) {
        const gguf_tensor *t = tr_gguf_tensor_at(f, i);
        uint64_t row;
        assert_true(tr_dtype_row_bytes(t->type, t->ne[0], &row));
        assert_int_equal(t->size, row * t->ne[1] * t->ne[2] * t->ne[3]);
        assert_ptr_equal(t->data, base + t->offset);
        assert_true(t->offset >= tr_gguf_data_offset(f));
        assert_true(t->offset + t->size <= tr_gguf_file_size(f));
        assert_int_equal(t->offset % 32, 0);
        assert_ptr_equal(tr_gguf_tensor_find(f, "token_embd.weight"), emb);
    }
    assert_null(tr_gguf_tensor_at(f, 272));
    /* The F32 norm weights read as plausible numbers. */
    float w0;
    memcpy(&w0, on->data, 4);
    assert_true(w0 > -100.0f && w0 < 100.0f && w0 != 0.0f);

    char buf[256];
    for (uint64_t i = 0; i < tr_gguf_kv_count(f); i++) {
        tr_gguf_kv_format(f, i, buf, sizeof buf);
        assert_true(strlen(buf) > 0);
    }
    int64_t ti = tr_gguf_kv_find(f, "tokenizer.ggml.tokens");
    assert_true(ti >= 0);
    tr_gguf_kv_format(f, (uint64_t)ti, buf, sizeof buf);
    assert_non_null(strstr(buf, "\"<|endoftext|>\""));
    assert_non_null(strstr(buf, "(49152 x string)"));
    tr_gguf_close(f);
}

/* ---- valid small files ---- */

static void test_small_valid(void **state) {
    (void)state;
    small_file sf;
    build_small(&sf);
    gguf_file *f = NULL;
    tr_diag d;
    void *copy;
    tr_status s = open_copy(sf.w.p, sf.w.len, &f, &d, &copy);
    if (s) print_error("%s\n", d.message);
    assert_int_equal(s, TR_OK);
    assert_int_equal(tr_gguf_check(f), TR_OK);
    assert_int_equal(tr_gguf_version(f), 3);
    assert_int_equal(tr_gguf_alignment(f), 32);
    assert_int_equal(tr_gguf_data_offset(f), sf.data_start);
    assert_int_equal(tr_gguf_kv_count(f), 22);
    assert_int_equal(tr_gguf_tensor_count(f), 2);
    assert_int_equal(tr_gguf_kv_find(f, "general.architecture"), 0);
    assert_int_equal(tr_gguf_kv_find(f, "t.str"), 21);
    assert_int_equal(tr_gguf_kv_find(f, "nope"), -1);
    assert_true(tr_gguf_str_eq(tr_gguf_kv_key(f, 1), "t.u8"));
    assert_null(tr_gguf_kv_key(f, 22).ptr);
    assert_int_equal(tr_gguf_kv_type(f, 1), GGUF_TYPE_UINT8);
    assert_string_equal(tr_gguf_type_name(tr_gguf_kv_type(f, 99)), "unknown");

    const gguf_tensor *a = tr_gguf_tensor_find(f, "t.f32");
    const gguf_tensor *q = tr_gguf_tensor_find(f, "t.q4");
    assert_non_null(a);
    assert_non_null(q);
    assert_ptr_equal(tr_gguf_tensor_at(f, 0), a);
    assert_int_equal(a->n_elements, 8);
    assert_int_equal(a->size, 32);
    assert_int_equal(a->offset, sf.data_start);
    assert_ptr_equal(a->data, (const uint8_t *)copy + sf.data_start);
    assert_memory_equal(a->data, k_f32_data, sizeof k_f32_data);
    assert_int_equal(q->ne[0], 32);
    assert_int_equal(q->ne[1], 1);
    assert_int_equal(q->size, 20);
    assert_int_equal(q->offset, sf.data_start + 32);
    assert_int_equal(q->offset + q->size, sf.w.len);
    assert_null(tr_gguf_tensor_find(f, "t.f3"));

    /* Rendering. */
    char buf[256];
    assert_string_equal(tr_gguf_kv_format(f, 0, buf, sizeof buf), "\"llama\"");
    assert_string_equal(tr_gguf_kv_format(f, 2, buf, sizeof buf), "-5");
    assert_string_equal(tr_gguf_kv_format(f, 9, buf, sizeof buf),
                        "18446744073709551615");
    assert_string_equal(tr_gguf_kv_format(f, 11, buf, sizeof buf), "1.5");
    assert_string_equal(tr_gguf_kv_format(f, 14, buf, sizeof buf), "true");
    assert_string_equal(tr_gguf_kv_format(f, 15, buf, sizeof buf),
                        "[\"a\", \"bc\", \"\"] (3 x string)");
    assert_string_equal(tr_gguf_kv_format(f, 16, buf, sizeof buf),
                        "[1, -2, 3] (3 x int32)");
    assert_string_equal(tr_gguf_kv_format(f, 17, buf, sizeof buf),
                        "[[1, 2] (2 x uint8), [] (0 x string), [\"x\"] "
                        "(1 x string)] (3 x array)");
    assert_string_equal(tr_gguf_kv_format(f, 21, buf, sizeof buf),
                        "\"he said \\\"hi\\\"\\n\"");
    /* Tiny buffers truncate without overflow. */
    char tiny[6];
    memset(tiny, 'Z', sizeof tiny);
    tr_gguf_kv_format(f, 17, tiny, 5);
    assert_int_equal(strlen(tiny), 4);
    assert_int_equal(tiny[5], 'Z');
    tr_gguf_kv_format(f, 17, tiny, 1);
    assert_int_equal(tiny[0], '\0');
    assert_null(tr_gguf_kv_format(f, 0, NULL, 0));
    tr_gguf_kv_format(f, 999, buf, sizeof buf);
    assert_string_equal(buf, "");

    FILE *devnull = fopen("/dev/null", "w");
    assert_non_null(devnull);
    tr_gguf_dump(f, devnull);
    fclose(devnull);
    tr_gguf_close(f);
    free(copy);
    w_free(&sf.w);
}

static void test_getters(void **state) {
    (void)state;
    small_file sf;
    build_small(&sf);
    gguf_file *f = NULL;
    void *copy;
    assert_int_equal(open_copy(sf.w.p, sf.w.len, &f, NULL, &copy), TR_OK);

    uint32_t u32 = 77;
    uint64_t u64 = 77;
    int64_t i64 = 77;
    float f32 = 77;
    bool b = false;
    gguf_str str;
    /* u32 from narrower unsigned and non-negative signed. */
    assert_int_equal(tr_gguf_get_u32(f, "t.u8", &u32), TR_OK);
    assert_int_equal(u32, 200);
    assert_int_equal(tr_gguf_get_u32(f, "t.u16", &u32), TR_OK);
    assert_int_equal(u32, 65000);
    assert_int_equal(tr_gguf_get_u32(f, "t.i32pos", &u32), TR_OK);
    assert_int_equal(u32, 7);
    assert_int_equal(tr_gguf_get_u32(f, "t.u32", &u32), TR_OK);
    assert_int_equal(u32, 4000000000u);
    /* Negative into unsigned, too large, wrong type: FORMAT, untouched. */
    u32 = 77;
    assert_int_equal(tr_gguf_get_u32(f, "t.i8", &u32), TR_ERR_FORMAT);
    assert_int_equal(tr_gguf_get_u32(f, "t.i32", &u32), TR_ERR_FORMAT);
    assert_int_equal(tr_gguf_get_u32(f, "t.u64", &u32), TR_ERR_FORMAT);
    assert_int_equal(tr_gguf_get_u32(f, "t.f32", &u32), TR_ERR_FORMAT);
    assert_int_equal(tr_gguf_get_u32(f, "t.bool", &u32), TR_ERR_FORMAT);
    assert_int_equal(tr_gguf_get_u32(f, "general.architecture", &u32), TR_ERR_FORMAT);
    assert_int_equal(tr_gguf_get_u32(f, "t.ints", &u32), TR_ERR_FORMAT);
    assert_int_equal(u32, 77);
    /* Missing keys. */
    assert_int_equal(tr_gguf_get_u32(f, "missing", &u32), TR_ERR_NOT_FOUND);
    assert_int_equal(tr_gguf_get_u64(f, "missing", &u64), TR_ERR_NOT_FOUND);
    assert_int_equal(tr_gguf_get_i64(f, "missing", &i64), TR_ERR_NOT_FOUND);
    assert_int_equal(tr_gguf_get_f32(f, "missing", &f32), TR_ERR_NOT_FOUND);
    assert_int_equal(tr_gguf_get_bool(f, "missing", &b), TR_ERR_NOT_FOUND);
    assert_int_equal(tr_gguf_get_str(f, "missing", &str), TR_ERR_NOT_FOUND);
    assert_int_equal(tr_gguf_get_arr(f, "missing", NULL, NULL), TR_ERR_NOT_FOUND);
    assert_int_equal(tr_gguf_get_arr_str(f, "missing", 0, &str), TR_ERR_NOT_FOUND);
    assert_int_equal(tr_gguf_get_arr_f64(f, "missing", 0, &(double){0}),
                     TR_ERR_NOT_FOUND);
    assert_int_equal(tr_gguf_get_arr_i64(f, "missing", 0, &i64), TR_ERR_NOT_FOUND);
    assert_null(tr_gguf_get_arr_data(f, "missing"));
    /* u64 / i64. */
    assert_int_equal(tr_gguf_get_u64(f, "t.u64max", &u64), TR_OK);
    assert_true(u64 == UINT64_MAX);
    assert_int_equal(tr_gguf_get_u64(f, "t.i64", &u64), TR_ERR_FORMAT);
    assert_int_equal(tr_gguf_get_i64(f, "t.i64", &i64), TR_OK);
    assert_true(i64 == -(1ll << 40));
    assert_int_equal(tr_gguf_get_i64(f, "t.i16", &i64), TR_OK);
    assert_int_equal(i64, -300);
    assert_int_equal(tr_gguf_get_i64(f, "t.u64", &i64), TR_OK);
    assert_true(i64 == (1ll << 40));
    i64 = 77;
    assert_int_equal(tr_gguf_get_i64(f, "t.u64max", &i64), TR_ERR_FORMAT);
    assert_int_equal(i64, 77);
    /* floats: float32 and float64 only; out of float range rejected. */
    assert_int_equal(tr_gguf_get_f32(f, "t.f32", &f32), TR_OK);
    assert_true(f32 == 1.5f);
    assert_int_equal(tr_gguf_get_f32(f, "t.f64", &f32), TR_OK);
    assert_true(f32 == 2.25f);
    f32 = 77;
    assert_int_equal(tr_gguf_get_f32(f, "t.f64big", &f32), TR_ERR_FORMAT);
    assert_int_equal(tr_gguf_get_f32(f, "t.u8", &f32), TR_ERR_FORMAT);
    assert_true(f32 == 77);
    /* bool and strings. */
    assert_int_equal(tr_gguf_get_bool(f, "t.bool", &b), TR_OK);
    assert_true(b);
    assert_int_equal(tr_gguf_get_bool(f, "t.u8", &b), TR_ERR_FORMAT);
    assert_int_equal(tr_gguf_get_str(f, "t.str", &str), TR_OK);
    assert_true(tr_gguf_str_eq(str, "he said \"hi\"\n"));
    assert_int_equal(tr_gguf_get_str(f, "t.strs", &str), TR_ERR_FORMAT);
    /* Arrays. */
    gguf_type et = GGUF_TYPE_UINT8;
    uint64_t n = 0;
    assert_int_equal(tr_gguf_get_arr(f, "t.strs", &et, &n), TR_OK);
    assert_int_equal(et, GGUF_TYPE_STRING);
    assert_int_equal(n, 3);
    assert_int_equal(tr_gguf_get_arr(f, "t.u8", &et, &n), TR_ERR_FORMAT);
    assert_int_equal(tr_gguf_get_arr_str(f, "t.strs", 1, &str), TR_OK);
    assert_true(tr_gguf_str_eq(str, "bc"));
    assert_int_equal(tr_gguf_get_arr_str(f, "t.strs", 2, &str), TR_OK);
    assert_int_equal(str.len, 0);
    str.len = 99;
    assert_int_equal(tr_gguf_get_arr_str(f, "t.strs", 3, &str), TR_ERR_INVALID_ARG);
    assert_int_equal(tr_gguf_get_arr_str(f, "t.strs", UINT64_MAX, &str),
                     TR_ERR_INVALID_ARG);
    assert_int_equal(str.len, 99);
    assert_int_equal(tr_gguf_get_arr_str(f, "t.ints", 0, &str), TR_ERR_FORMAT);
    assert_int_equal(tr_gguf_get_arr_str(f, "t.str", 0, &str), TR_ERR_FORMAT);
    assert_int_equal(tr_gguf_get_arr_i64(f, "t.ints", 1, &i64), TR_OK);
    assert_int_equal(i64, -2);
    assert_int_equal(tr_gguf_get_arr_i64(f, "t.ints", 3, &i64), TR_ERR_INVALID_ARG);
    assert_int_equal(tr_gguf_get_arr_i64(f, "t.bools", 0, &i64), TR_OK);
    assert_int_equal(i64, 1);
    assert_int_equal(tr_gguf_get_arr_i64(f, "t.f32s", 0, &i64), TR_ERR_FORMAT);
    assert_int_equal(tr_gguf_get_arr_i64(f, "t.u64s", 0, &i64), TR_OK);
    assert_int_equal(i64, 5);
    assert_int_equal(tr_gguf_get_arr_i64(f, "t.u64s", 1, &i64), TR_ERR_FORMAT);
    assert_int_equal(tr_gguf_get_arr_i64(f, "t.strs", 0, &i64), TR_ERR_FORMAT);
    assert_int_equal(tr_gguf_get_arr_i64(f, "t.nested", 0, &i64), TR_ERR_FORMAT);
    double dv = 0;
    assert_int_equal(tr_gguf_get_arr_f64(f, "t.f32s", 1, &dv), TR_OK);
    assert_true(dv == -1.0);
    assert_int_equal(tr_gguf_get_arr_f64(f, "t.ints", 1, &dv), TR_OK);
    assert_true(dv == -2.0);
    assert_int_equal(tr_gguf_get_arr_f64(f, "t.f32s", 2, &dv), TR_ERR_INVALID_ARG);
    assert_int_equal(tr_gguf_get_arr_f64(f, "t.strs", 0, &dv), TR_ERR_FORMAT);
    assert_int_equal(tr_gguf_get_arr_f64(f, "t.f32", 0, &dv), TR_ERR_FORMAT);
    /* Raw data. */
    const uint8_t *raw = tr_gguf_get_arr_data(f, "t.ints");
    assert_non_null(raw);
    int32_t v32[3];
    memcpy(v32, raw, sizeof v32);
    assert_int_equal(v32[0], 1);
    assert_int_equal(v32[1], -2);
    assert_int_equal(v32[2], 3);
    assert_null(tr_gguf_get_arr_data(f, "t.strs"));
    assert_null(tr_gguf_get_arr_data(f, "t.nested"));
    assert_null(tr_gguf_get_arr_data(f, "t.u8"));
    assert_non_null(tr_gguf_get_arr_data(f, "t.bools"));
    assert_int_equal(tr_gguf_get_arr(f, "t.nested", &et, &n), TR_OK);
    assert_int_equal(et, GGUF_TYPE_ARRAY);
    assert_int_equal(n, 3);

    tr_gguf_close(f);
    free(copy);
    w_free(&sf.w);
}

/* Writes len bytes to path (created or truncated). */
static void rewrite_file(const char *path, const void *p, size_t len) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    assert_true(fd >= 0);
    if (len) assert_int_equal(write(fd, p, len), (ssize_t)len);
    close(fd);
}

/* A fresh temporary file (path: a mkstemp template) holding sf's bytes. */
static void temp_file(char *path, const small_file *sf) {
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    rewrite_file(path, sf->w.p, sf->w.len);
}

static void test_open_path(void **state) {
    (void)state;
    small_file sf;
    build_small(&sf);
    char path[] = "/tmp/trellis_test_gguf_XXXXXX";
    temp_file(path, &sf);
    gguf_file *f = NULL;
    tr_diag d;
    assert_int_equal(tr_gguf_open(path, &f, &d), TR_OK);
    assert_int_equal(tr_gguf_check(f), TR_OK);
    const gguf_tensor *a = tr_gguf_tensor_find(f, "t.f32");
    assert_non_null(a);
    assert_memory_equal(a->data, k_f32_data, sizeof k_f32_data);
    tr_gguf_close(f);
    /* A corrupt file through the path: the mapping is released. */
    sf.w.p[0] = 'X';
    rewrite_file(path, sf.w.p, sf.w.len);
    f = NULL;
    assert_int_equal(tr_gguf_open(path, &f, &d), TR_ERR_FORMAT);
    assert_null(f);
    assert_non_null(strstr(d.message, "magic"));
    /* Empty file. */
    rewrite_file(path, NULL, 0);
    assert_int_equal(tr_gguf_open(path, &f, &d), TR_ERR_FORMAT);
    assert_non_null(strstr(d.message, "empty"));
    unlink(path);
    /* Missing file, directory. */
    assert_int_equal(tr_gguf_open(path, &f, &d), TR_ERR_IO);
    assert_non_null(strstr(d.message, path));
    assert_int_equal(tr_gguf_open("/tmp", &f, &d), TR_ERR_IO);
    assert_null(f);
    /* NULL arguments. */
    assert_int_equal(tr_gguf_open(NULL, &f, &d), TR_ERR_INVALID_ARG);
    assert_int_equal(tr_gguf_open_memory(NULL, 4, &f, &d), TR_ERR_INVALID_ARG);
    assert_int_equal(tr_gguf_open_memory(sf.w.p, sf.w.len, NULL, &d),
                     TR_ERR_INVALID_ARG);
    assert_int_equal(tr_gguf_open_memory(NULL, 0, &f, &d), TR_ERR_FORMAT);
    tr_gguf_close(NULL);
    w_free(&sf.w);
}

/* The load modes: the same bytes and the same validation whichever way the
 * file comes in; READ's copy is its own (not the file mapping) and lives
 * until tr_gguf_close; AUTO resolves to MMAP or READ. */
static void test_load_modes(void **state) {
    (void)state;
    small_file sf;
    build_small(&sf);
    char path[] = "/tmp/trellis_test_gguf_XXXXXX";
    temp_file(path, &sf);
    tr_diag d;
    gguf_file *fm = NULL, *fr = NULL, *fa = NULL;
    assert_int_equal(tr_gguf_open_ex(path, GGUF_LOAD_MMAP, &fm, &d), TR_OK);
    assert_int_equal(tr_gguf_open_ex(path, GGUF_LOAD_READ, &fr, &d), TR_OK);
    assert_int_equal(tr_gguf_open_ex(path, GGUF_LOAD_AUTO, &fa, &d), TR_OK);
    assert_int_equal(tr_gguf_load_used(fm), GGUF_LOAD_MMAP);
    assert_int_equal(tr_gguf_load_used(fr), GGUF_LOAD_READ);
    /* a file of a few hundred bytes is far below a quarter of any RAM */
    assert_int_equal(tr_gguf_load_used(fa),
                     tr_gguf_huge_pages_available() ? GGUF_LOAD_READ : GGUF_LOAD_MMAP);
    assert_int_equal(tr_gguf_check(fr), TR_OK);
    assert_int_equal(tr_gguf_kv_count(fr), tr_gguf_kv_count(fm));
    assert_int_equal(tr_gguf_tensor_count(fr), tr_gguf_tensor_count(fm));
    for (uint64_t i = 0; i < tr_gguf_tensor_count(fm); i++) {
        const gguf_tensor *a = tr_gguf_tensor_at(fm, i), *b = tr_gguf_tensor_at(fr, i);
        assert_int_equal(a->name.len, b->name.len);
        assert_memory_equal(a->name.ptr, b->name.ptr, a->name.len);
        assert_int_equal(a->type, b->type);
        assert_int_equal(a->size, b->size);
        assert_ptr_not_equal(a->data, b->data);
        assert_memory_equal(a->data, b->data, a->size);
    }
    /* READ's copy does not follow the file: rewrite the file, the open
     * READ copy still holds the old bytes */
    const gguf_tensor *t = tr_gguf_tensor_find(fr, "t.f32");
    assert_non_null(t);
    assert_memory_equal(t->data, k_f32_data, sizeof k_f32_data);
    rewrite_file(path, NULL, 0);
    assert_memory_equal(t->data, k_f32_data, sizeof k_f32_data);
    tr_gguf_close(fm);
    tr_gguf_close(fr);
    tr_gguf_close(fa);
    /* A corrupt file read in: the same error as mapped, the copy freed
     * (ASan/valgrind would see a leak otherwise). */
    sf.w.p[0] = 'X';
    rewrite_file(path, sf.w.p, sf.w.len);
    gguf_file *f = NULL;
    assert_int_equal(tr_gguf_open_ex(path, GGUF_LOAD_READ, &f, &d), TR_ERR_FORMAT);
    assert_null(f);
    assert_non_null(strstr(d.message, "magic"));
    /* Truncated: the tensor data runs past the end, in either mode. */
    sf.w.p[0] = 'G';
    rewrite_file(path, sf.w.p, sf.w.len - 8);
    tr_diag dm, dr;
    assert_int_equal(tr_gguf_open_ex(path, GGUF_LOAD_MMAP, &f, &dm), TR_ERR_FORMAT);
    assert_int_equal(tr_gguf_open_ex(path, GGUF_LOAD_READ, &f, &dr), TR_ERR_FORMAT);
    assert_null(f);
    assert_string_equal(dm.message, dr.message);
    assert_int_equal(dm.offset, dr.offset);
    unlink(path);
    /* Missing file, directory, unknown mode. */
    assert_int_equal(tr_gguf_open_ex(path, GGUF_LOAD_READ, &f, &d), TR_ERR_IO);
    assert_non_null(strstr(d.message, path));
    assert_int_equal(tr_gguf_open_ex("/tmp", GGUF_LOAD_READ, &f, &d), TR_ERR_IO);
    assert_int_equal(tr_gguf_open_ex("/tmp", (gguf_load)7, &f, &d), TR_ERR_INVALID_ARG);
    assert_non_null(strstr(d.message, "load mode"));
    assert_null(f);
    /* Names. */
    gguf_load g;
    assert_true(tr_gguf_load_parse("read", &g));
    assert_int_equal(g, GGUF_LOAD_READ);
    assert_true(tr_gguf_load_parse("mmap", &g));
    assert_int_equal(g, GGUF_LOAD_MMAP);
    assert_true(tr_gguf_load_parse("auto", &g));
    assert_int_equal(g, GGUF_LOAD_AUTO);
    assert_false(tr_gguf_load_parse("Read", &g));
    assert_false(tr_gguf_load_parse("", &g));
    assert_false(tr_gguf_load_parse(NULL, &g));
    assert_string_equal(tr_gguf_load_name(GGUF_LOAD_READ), "read");
    w_free(&sf.w);
}

/* ---- corrupt files, one per stage ---- */

/* tr_gguf_forget: only whole pages inside the range go; the neighbours'
 * bytes stay readable; a mapped file's forgotten bytes come back from the
 * file; out-of-range, NULL and borrowed bytes are no-ops. (A read-in
 * file's forgotten pages fault when read: not exercised here.) */
static void test_forget(void **state) {
    (void)state;
    enum { BIG = 131072, SMALL = 64 };
    small_file sf;
    memset(&sf, 0, sizeof sf);
    w_header(&sf.w, 3, 2, 0);
    const uint64_t big_ne[1] = {BIG / 4}, small_ne[1] = {SMALL / 4};
    w_tensor(&sf.w, "big", 1, big_ne, 0 /* F32 */, 0);
    w_tensor(&sf.w, "small", 1, small_ne, 0, BIG);
    w_pad(&sf.w, 32);
    size_t data_at = sf.w.len;
    w_fill(&sf.w, BIG, 3);
    w_fill(&sf.w, SMALL, 9);
    char path[] = "/tmp/trellis_test_gguf_XXXXXX";
    temp_file(path, &sf);
    const uint8_t *want = sf.w.p + data_at;
    const gguf_load modes[2] = {GGUF_LOAD_MMAP, GGUF_LOAD_READ};
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    for (int i = 0; i < 2; i++) {
        gguf_file *f = NULL;
        tr_diag d;
        assert_int_equal(tr_gguf_open_ex(path, modes[i], &f, &d), TR_OK);
        const gguf_tensor *big = tr_gguf_tensor_find(f, "big"), *small = tr_gguf_tensor_find(f, "small");
        assert_true(big && small && big->size == BIG);
        tr_gguf_forget(f, NULL, 10);
        tr_gguf_forget(f, want, BIG); /* not f's bytes */
        tr_gguf_forget(NULL, big->data, BIG);
        tr_gguf_forget(f, big->data, big->size);
        assert_memory_equal(small->data, want + BIG, SMALL);
        /* the bytes before big's first whole page stay */
        size_t head = (page - (uintptr_t)big->data % page) % page;
        assert_memory_equal(big->data, want, head);
        if (modes[i] == GGUF_LOAD_MMAP) assert_memory_equal(big->data, want, BIG);
        tr_gguf_close(f);
    }
    gguf_file *fm = NULL;
    tr_diag d;
    assert_int_equal(tr_gguf_open_memory(sf.w.p, sf.w.len, &fm, &d), TR_OK);
    const gguf_tensor *big = tr_gguf_tensor_find(fm, "big");
    tr_gguf_forget(fm, big->data, big->size); /* borrowed: kept */
    assert_memory_equal(big->data, want, BIG);
    tr_gguf_close(fm);
    unlink(path);
    w_free(&sf.w);
}

static void test_bad_header(void **state) {
    (void)state;
    wbuf w = {0};
    w_bytes(&w, "GGUX", 4);
    w_u32(&w, 3);
    w_u64(&w, 0);
    w_u64(&w, 0);
    expect_fail(&w, TR_ERR_FORMAT, 0, "magic", "47 47 55 58");
    w_free(&w);

    static const uint32_t bad_versions[] = {1, 4, 0, 0x03000000u};
    static const char *const what[] = {"v1", "4 not supported",
                                       "0 not supported", "big-endian"};
    for (size_t i = 0; i < TR_ARRAY_LEN(bad_versions); i++) {
        w_header(&w, bad_versions[i], 0, 0);
        expect_fail(&w, TR_ERR_UNSUPPORTED, 4, "version", what[i]);
        w_free(&w);
    }
    /* Version 2 is accepted. */
    w_header(&w, 2, 0, 0);
    gguf_file *f = NULL;
    void *copy;
    assert_int_equal(open_copy(w.p, w.len, &f, NULL, &copy), TR_OK);
    assert_int_equal(tr_gguf_version(f), 2);
    assert_int_equal(tr_gguf_kv_count(f), 0);
    assert_int_equal(tr_gguf_tensor_count(f), 0);
    assert_int_equal(tr_gguf_check(f), TR_OK);
    tr_gguf_close(f);
    free(copy);

    /* Truncated header: kv_count cut in half; version cut. */
    expect_fail_(&w, 20, TR_ERR_FORMAT, 16, "kv_count", "truncated", NULL);
    expect_fail_(&w, 6, TR_ERR_FORMAT, 4, "version", "truncated", NULL);
    expect_fail_(&w, 2, TR_ERR_FORMAT, 0, "magic", "truncated", NULL);
    w_free(&w);

    /* Huge counts are rejected before any allocation. */
    w_header(&w, 3, 1ull << 40, 0);
    expect_fail(&w, TR_ERR_FORMAT, 8, "tensor_count", "implausible");
    w_free(&w);
    w_header(&w, 3, UINT64_MAX, 0);
    expect_fail(&w, TR_ERR_FORMAT, 8, "tensor_count", "implausible");
    w_free(&w);
    w_header(&w, 3, 0, UINT64_MAX / 2);
    expect_fail(&w, TR_ERR_FORMAT, 16, "kv_count", "implausible");
    w_free(&w);
    /* 3 kvs of 13 bytes each fit in 39 bytes, a 4th does not. */
    w_header(&w, 3, 0, 4);
    w_fill(&w, 39, 0);
    expect_fail(&w, TR_ERR_FORMAT, 16, "kv_count", "implausible");
    w_free(&w);
    /* kvs + tensors together must fit. */
    w_header(&w, 3, 1, 2);
    w_fill(&w, 2 * 13 + 31, 0);
    expect_fail(&w, TR_ERR_FORMAT, 8, "tensor_count", "implausible");
    w_free(&w);
}

static void test_bad_kv(void **state) {
    (void)state;
    wbuf w = {0};
    /* Truncated key. */
    w_header(&w, 3, 0, 1);
    w_u64(&w, 10);
    w_bytes(&w, "abcde", 5);
    expect_fail(&w, TR_ERR_FORMAT, 24, "kv #0 key: string length 10 past end "
                                       "of file");
    w_free(&w);
    /* Key length UINT64_MAX. */
    w_header(&w, 3, 0, 1);
    w_u64(&w, UINT64_MAX);
    w_fill(&w, 20, 0);
    expect_fail(&w, TR_ERR_FORMAT, 24, "kv #0 key: string length "
                                       "18446744073709551615 past end");
    w_free(&w);
    /* Truncated key length field (second kv). */
    w_header(&w, 3, 0, 2);
    w_kv(&w, "a_key_long_enough", GGUF_TYPE_UINT8); /* count stays plausible */
    w_u8(&w, 1);
    size_t at = w.len;
    w_u32(&w, 1);
    expect_fail(&w, TR_ERR_FORMAT, at, "kv #1 key", "truncated");
    w_free(&w);
    /* Unknown value type. */
    w_header(&w, 3, 0, 1);
    w_str(&w, "general.name");
    at = w.len;
    w_u32(&w, 13);
    w_u32(&w, 0);
    expect_fail(&w, TR_ERR_FORMAT, at, "kv #0 'general.name'",
                "value type 13 unknown");
    w_free(&w);
    /* Truncated scalar value. */
    w_header(&w, 3, 0, 1);
    w_kv(&w, "k", GGUF_TYPE_UINT64);
    at = w.len;
    w_u32(&w, 0);
    expect_fail(&w, TR_ERR_FORMAT, at, "kv #0 'k' value: truncated");
    w_free(&w);
    /* Truncated string value. */
    w_header(&w, 3, 0, 1);
    w_kv(&w, "k", GGUF_TYPE_STRING);
    at = w.len;
    w_u64(&w, 5);
    w_bytes(&w, "abc", 3);
    expect_fail(&w, TR_ERR_FORMAT, at, "kv #0 'k' value: string length 5");
    w_free(&w);
    /* Bool byte other than 0/1. */
    w_header(&w, 3, 0, 1);
    w_kv(&w, "k", GGUF_TYPE_BOOL);
    at = w.len;
    w_u8(&w, 2);
    expect_fail(&w, TR_ERR_FORMAT, at, "kv #0 'k'", "bool byte 2");
    w_free(&w);
    /* Non-printable key bytes are escaped in the message. */
    w_header(&w, 3, 0, 1);
    w_u64(&w, 2);
    w_bytes(&w, "\x01'", 2);
    at = w.len;
    w_u32(&w, 99);
    w_u8(&w, 0);
    expect_fail(&w, TR_ERR_FORMAT, at, "kv #0 '\\x01\\x27'", "value type 99");
    w_free(&w);
    /* Duplicate key. */
    w_header(&w, 3, 0, 3);
    w_kv(&w, "a", GGUF_TYPE_UINT8);
    w_u8(&w, 1);
    w_kv(&w, "b", GGUF_TYPE_UINT8);
    w_u8(&w, 1);
    at = w.len;
    w_kv(&w, "a", GGUF_TYPE_UINT32);
    w_u32(&w, 1);
    expect_fail(&w, TR_ERR_FORMAT, at, "kv #2 'a' key: duplicate",
                "first defined by kv #0");
    w_free(&w);
}

static void test_bad_array(void **state) {
    (void)state;
    wbuf w = {0};
    /* Truncated packed array: 4 uint32 announced, 2 present. */
    w_header(&w, 3, 0, 1);
    w_kv(&w, "arr", GGUF_TYPE_ARRAY);
    w_u32(&w, GGUF_TYPE_UINT32);
    size_t at = w.len;
    w_u64(&w, 4);
    w_u32(&w, 1);
    w_u32(&w, 2);
    expect_fail(&w, TR_ERR_FORMAT, at, "kv #0 'arr' array length 4 past end "
                                       "of file");
    w_free(&w);
    /* Array length overflow: n * 8 wraps. */
    w_header(&w, 3, 0, 1);
    w_kv(&w, "arr", GGUF_TYPE_ARRAY);
    w_u32(&w, GGUF_TYPE_UINT64);
    at = w.len;
    w_u64(&w, UINT64_MAX);
    w_u64(&w, 0);
    expect_fail(&w, TR_ERR_FORMAT, at, "array length 18446744073709551615");
    w_free(&w);
    w_header(&w, 3, 0, 1);
    w_kv(&w, "arr", GGUF_TYPE_ARRAY);
    w_u32(&w, GGUF_TYPE_UINT64);
    at = w.len;
    w_u64(&w, (UINT64_MAX / 8) + 2); /* * 8 wraps to a small number */
    w_u64(&w, 0);
    w_u64(&w, 0);
    expect_fail(&w, TR_ERR_FORMAT, at, "array length", "past end of file");
    w_free(&w);
    /* Truncated string array: element [1]'s length past the end. */
    w_header(&w, 3, 0, 1);
    w_kv(&w, "toks", GGUF_TYPE_ARRAY);
    w_arr(&w, GGUF_TYPE_STRING, 2);
    w_str(&w, "ok");
    at = w.len;
    w_u64(&w, 1000);
    w_bytes(&w, "abc", 3);
    expect_fail(&w, TR_ERR_FORMAT, at, "kv #0 'toks'[1] value: string length "
                                       "1000 past end of file");
    w_free(&w);
    /* Unknown element type. */
    w_header(&w, 3, 0, 1);
    w_kv(&w, "arr", GGUF_TYPE_ARRAY);
    at = w.len;
    w_arr(&w, (gguf_type)200, 0);
    expect_fail(&w, TR_ERR_FORMAT, at, "array element type 200 unknown");
    w_free(&w);
    /* Bad bool inside an array. */
    w_header(&w, 3, 0, 1);
    w_kv(&w, "arr", GGUF_TYPE_ARRAY);
    w_arr(&w, GGUF_TYPE_BOOL, 3);
    w_u8(&w, 0);
    w_u8(&w, 1);
    at = w.len;
    w_u8(&w, 7);
    expect_fail(&w, TR_ERR_FORMAT, at, "kv #0 'arr'[2]", "bool byte 7");
    w_free(&w);
    /* Nested arrays: an error deep inside names the path. */
    w_header(&w, 3, 0, 1);
    w_kv(&w, "nest", GGUF_TYPE_ARRAY);
    w_arr(&w, GGUF_TYPE_ARRAY, 2);
    w_arr(&w, GGUF_TYPE_UINT8, 0);
    w_arr(&w, GGUF_TYPE_ARRAY, 1);
    at = w.len;
    w_arr(&w, GGUF_TYPE_UINT16, 3);
    w_u16(&w, 1);
    expect_fail(&w, TR_ERR_FORMAT, at + 4, "kv #0 'nest'[1][0] array length 3");
    w_free(&w);
}

static void build_nested(wbuf *w, int levels, size_t *last_header) {
    /* levels arrays nested in one another; the innermost holds uint8s. */
    w_header(w, 3, 0, 1);
    w_kv(w, "deep", GGUF_TYPE_ARRAY);
    for (int i = 0; i < levels - 1; i++) {
        *last_header = w->len;
        w_arr(w, GGUF_TYPE_ARRAY, 1);
    }
    *last_header = w->len;
    w_arr(w, GGUF_TYPE_UINT8, 1);
    w_u8(w, 42);
}

static void test_nesting_limit(void **state) {
    (void)state;
    wbuf w = {0};
    size_t last;
    /* GGUF_MAX_ARRAY_DEPTH levels: fine, and rendered. */
    build_nested(&w, GGUF_MAX_ARRAY_DEPTH, &last);
    gguf_file *f = NULL;
    void *copy;
    tr_diag d;
    tr_status s = open_copy(w.p, w.len, &f, &d, &copy);
    if (s) print_error("%s\n", d.message);
    assert_int_equal(s, TR_OK);
    char buf[512];
    tr_gguf_kv_format(f, 0, buf, sizeof buf);
    assert_non_null(strstr(buf, "[42] (1 x uint8)"));
    tr_gguf_close(f);
    free(copy);
    w_free(&w);
    /* One more level: TR_ERR_LIMIT at the offending array header. */
    build_nested(&w, GGUF_MAX_ARRAY_DEPTH + 1, &last);
    expect_fail(&w, TR_ERR_LIMIT, last, "kv #0 'deep'[0][0]",
                "nested deeper than");
    w_free(&w);
    /* A depth bomb: 100000 levels (1.2 MB), rejected at the limit. */
    build_nested(&w, 100000, &last);
    size_t limit_at = 24 + 8 + 4 + 4 + 12 * GGUF_MAX_ARRAY_DEPTH;
    expect_fail(&w, TR_ERR_LIMIT, limit_at, "nested deeper than");
    w_free(&w);
}

/* A file of one kv and the given tensor infos; data_bytes of data. */
static void test_bad_alignment(void **state) {
    (void)state;
    wbuf w = {0};
    static const uint32_t bad[] = {0, 3, 48, 0x80000001u};
    for (size_t i = 0; i < TR_ARRAY_LEN(bad); i++) {
        w_header(&w, 3, 0, 1);
        w_kv(&w, "general.alignment", GGUF_TYPE_UINT32);
        size_t at = w.len;
        w_u32(&w, bad[i]);
        char num[32];
        snprintf(num, sizeof num, "%u is not", bad[i]);
        expect_fail(&w, TR_ERR_FORMAT, at, "'general.alignment'", num,
                    "power of two");
        w_free(&w);
    }
    /* Wrong type. */
    w_header(&w, 3, 0, 1);
    w_kv(&w, "general.alignment", GGUF_TYPE_STRING);
    size_t at = w.len;
    w_str(&w, "32");
    expect_fail(&w, TR_ERR_FORMAT, at, "'general.alignment'", "type string");
    w_free(&w);
    /* Negative. */
    w_header(&w, 3, 0, 1);
    w_kv(&w, "general.alignment", GGUF_TYPE_INT32);
    at = w.len;
    w_u32(&w, (uint32_t)-32);
    expect_fail(&w, TR_ERR_FORMAT, at, "-32 is not");
    w_free(&w);
    /* A valid alignment of 64 moves the data start and checks offsets. */
    const uint64_t ne[1] = {16};
    w_header(&w, 3, 2, 1);
    w_kv(&w, "general.alignment", GGUF_TYPE_UINT32);
    w_u32(&w, 64);
    w_tensor(&w, "a", 1, ne, TR_DTYPE_F32, 0);
    w_tensor(&w, "b", 1, ne, TR_DTYPE_F32, 64);
    w_pad(&w, 64);
    size_t data = w.len;
    w_fill(&w, 128, 1);
    gguf_file *f = NULL;
    void *copy;
    assert_int_equal(open_copy(w.p, w.len, &f, NULL, &copy), TR_OK);
    assert_int_equal(tr_gguf_alignment(f), 64);
    assert_int_equal(tr_gguf_data_offset(f), data);
    assert_int_equal(tr_gguf_data_offset(f) % 64, 0);
    assert_int_equal(tr_gguf_tensor_at(f, 1)->offset, data + 64);
    assert_int_equal(tr_gguf_check(f), TR_OK);
    tr_gguf_close(f);
    free(copy);
    w_free(&w);
    /* Under alignment 64, an offset of 32 is misaligned. */
    w_header(&w, 3, 1, 1);
    w_kv(&w, "general.alignment", GGUF_TYPE_UINT32);
    w_u32(&w, 64);
    w_str(&w, "a");
    w_u32(&w, 1);
    w_u64(&w, 8);
    w_u32(&w, TR_DTYPE_F32);
    at = w.len;
    w_u64(&w, 32);
    w_pad(&w, 64);
    w_fill(&w, 64, 1);
    expect_fail(&w, TR_ERR_FORMAT, at, "tensor #0 'a' offset 32 not a "
                                       "multiple of the alignment 64");
    w_free(&w);
}

/* One tensor info with the given fields, then `data` bytes of data. Returns
 * the offsets of the n_dims, first ne, type and offset fields. */
typedef struct tinfo_offs {
    size_t name, n_dims, ne, type, offset;
} tinfo_offs;

static tinfo_offs build_one_tensor(wbuf *w, const char *name, uint32_t n_dims,
                                   const uint64_t *ne, uint32_t type,
                                   uint64_t offset, size_t data) {
    tinfo_offs o;
    w_header(w, 3, 1, 0);
    o.name = w->len;
    w_str(w, name);
    o.n_dims = w->len;
    w_u32(w, n_dims);
    o.ne = w->len;
    for (uint32_t d = 0; d < n_dims; d++) w_u64(w, ne[d]);
    if (n_dims == 0) w_u64(w, 1); /* keep the count plausible */
    o.type = w->len;
    w_u32(w, type);
    o.offset = w->len;
    w_u64(w, offset);
    w_pad(w, 32);
    w_fill(w, data, 3);
    return o;
}

static void test_bad_tensor(void **state) {
    (void)state;
    wbuf w = {0};
    const char *nm = "blk.0.attn_q.weight";
    uint64_t ne[5] = {32, 2, 1, 1, 1};
    tinfo_offs o;

    /* A valid one first, so each case below differs in one field only. */
    o = build_one_tensor(&w, nm, 2, ne, TR_DTYPE_F32, 0, 256);
    gguf_file *f = NULL;
    void *copy;
    assert_int_equal(open_copy(w.p, w.len, &f, NULL, &copy), TR_OK);
    assert_int_equal(tr_gguf_tensor_at(f, 0)->size, 256);
    tr_gguf_close(f);
    free(copy);
    w_free(&w);

    /* n_dims 0 and 5. */
    o = build_one_tensor(&w, nm, 0, ne, TR_DTYPE_F32, 0, 256);
    expect_fail(&w, TR_ERR_FORMAT, o.n_dims,
                "tensor #0 'blk.0.attn_q.weight' n_dims 0 outside 1..4");
    w_free(&w);
    o = build_one_tensor(&w, nm, 5, ne, TR_DTYPE_F32, 0, 256);
    expect_fail(&w, TR_ERR_FORMAT, o.n_dims, "n_dims 5 outside 1..4");
    w_free(&w);
    /* ne 0 (in the second dim). */
    uint64_t ne0[2] = {32, 0};
    o = build_one_tensor(&w, nm, 2, ne0, TR_DTYPE_F32, 0, 256);
    expect_fail(&w, TR_ERR_FORMAT, o.ne + 8, "'blk.0.attn_q.weight' ne[1] is 0");
    w_free(&w);
    /* Element count overflow: 2^32 x 2^32, and 2^32 x 2^31 (= 2^63). */
    uint64_t big[2] = {1ull << 32, 1ull << 32};
    o = build_one_tensor(&w, nm, 2, big, TR_DTYPE_F32, 0, 256);
    expect_fail(&w, TR_ERR_FORMAT, o.ne, "element count overflows");
    w_free(&w);
    big[1] = 1ull << 31;
    o = build_one_tensor(&w, nm, 2, big, TR_DTYPE_F32, 0, 256);
    expect_fail(&w, TR_ERR_FORMAT, o.ne, "element count overflows");
    w_free(&w);
    /* Byte size overflow: 2^62 F32 elements = 2^64 bytes. */
    uint64_t huge[1] = {1ull << 62};
    o = build_one_tensor(&w, nm, 1, huge, TR_DTYPE_F32, 0, 256);
    expect_fail(&w, TR_ERR_FORMAT, o.ne, "byte size overflows");
    w_free(&w);
    /* Unknown tensor types. */
    o = build_one_tensor(&w, nm, 2, ne, 4, 0, 256);
    expect_fail(&w, TR_ERR_UNSUPPORTED, o.type, "type 4 unknown");
    w_free(&w);
    o = build_one_tensor(&w, nm, 2, ne, 1000, 0, 256);
    expect_fail(&w, TR_ERR_UNSUPPORTED, o.type,
                "tensor #0 'blk.0.attn_q.weight' type 1000 unknown");
    w_free(&w);
    /* ne[0] not a multiple of the block size. */
    uint64_t odd[2] = {33, 2};
    o = build_one_tensor(&w, nm, 2, odd, TR_DTYPE_Q4_1, 0, 256);
    expect_fail(&w, TR_ERR_FORMAT, o.ne, "ne[0] 33 not a multiple of the Q4_1 "
                                         "block size 32");
    w_free(&w);
    /* Misaligned offset. */
    o = build_one_tensor(&w, nm, 2, ne, TR_DTYPE_F32, 4, 512);
    expect_fail(&w, TR_ERR_FORMAT, o.offset,
                "offset 4 not a multiple of the alignment 32");
    w_free(&w);
    /* Data past the end of the file: one byte short, far out, wrapping. */
    o = build_one_tensor(&w, nm, 2, ne, TR_DTYPE_F32, 0, 255);
    expect_fail(&w, TR_ERR_FORMAT, o.offset,
                "tensor #0 'blk.0.attn_q.weight' offset 0 outside file");
    w_free(&w);
    o = build_one_tensor(&w, nm, 2, ne, TR_DTYPE_F32, 1024, 256);
    expect_fail(&w, TR_ERR_FORMAT, o.offset, "offset 1024 outside file");
    w_free(&w);
    o = build_one_tensor(&w, nm, 2, ne, TR_DTYPE_F32, UINT64_MAX - 31, 256);
    expect_fail(&w, TR_ERR_FORMAT, o.offset, "offset 18446744073709551584 "
                                             "outside file");
    w_free(&w);
    /* Truncated name. */
    w_header(&w, 3, 1, 0);
    w_u64(&w, 100);
    w_fill(&w, 30, 0);
    expect_fail(&w, TR_ERR_FORMAT, 24, "tensor #0 name: string length 100");
    w_free(&w);
    /* Truncated ne. */
    w_header(&w, 3, 1, 0);
    w_str(&w, "t");
    w_u32(&w, 3);
    w_u64(&w, 32);
    size_t at = w.len;
    w_u64(&w, 2);
    w_u32(&w, 0);
    expect_fail(&w, TR_ERR_FORMAT, at + 8, "tensor #0 't' ne[2]: truncated");
    w_free(&w);

    /* Duplicate tensor names. */
    const uint64_t ne1[1] = {8};
    w_header(&w, 3, 3, 0);
    w_tensor(&w, "x", 1, ne1, TR_DTYPE_F32, 0);
    w_tensor(&w, "y", 1, ne1, TR_DTYPE_F32, 32);
    at = w.len;
    w_tensor(&w, "x", 1, ne1, TR_DTYPE_F32, 64);
    w_pad(&w, 32);
    w_fill(&w, 96, 0);
    expect_fail(&w, TR_ERR_FORMAT, at, "tensor #2 'x' name: duplicate",
                "tensor #0");
    w_free(&w);
}

/* Every proper prefix of a valid file fails cleanly; the whole succeeds. */
static void test_truncation(void **state) {
    (void)state;
    small_file sf;
    build_small(&sf);
    for (size_t len = 0; len <= sf.w.len; len++) {
        gguf_file *f = NULL;
        tr_diag d;
        memset(&d, 0, sizeof d);
        void *copy;
        tr_status s = open_copy(sf.w.p, len, &f, &d, &copy);
        if (len == sf.w.len) {
            assert_int_equal(s, TR_OK);
            assert_int_equal(tr_gguf_check(f), TR_OK);
            tr_gguf_close(f);
        } else {
            if (s != TR_ERR_FORMAT)
                print_error("prefix %zu: %s %s\n", len, tr_status_name(s),
                            d.message);
            assert_int_equal(s, TR_ERR_FORMAT);
            assert_null(f);
            assert_true(d.message[0] != '\0');
            assert_true(d.offset <= len);
        }
        free(copy);
    }
    w_free(&sf.w);
}

/* Every byte of a valid file flipped several ways: either a valid file
 * whose invariants hold and whose every value renders, or a clean error. */
static void test_mutations(void **state) {
    (void)state;
    small_file sf;
    build_small(&sf);
    static const uint8_t xors[] = {0x01, 0x80, 0xff, 0x10};
    int ok = 0, failed = 0;
    for (size_t pos = 0; pos < sf.w.len; pos++) {
        for (size_t k = 0; k < TR_ARRAY_LEN(xors); k++) {
            sf.w.p[pos] ^= xors[k];
            gguf_file *f = NULL;
            tr_diag d;
            memset(&d, 0, sizeof d);
            void *copy;
            tr_status s = open_copy(sf.w.p, sf.w.len, &f, &d, &copy);
            if (s == TR_OK) {
                ok++;
                assert_int_equal(tr_gguf_check(f), TR_OK);
                char buf[128];
                for (uint64_t i = 0; i < tr_gguf_kv_count(f); i++)
                    tr_gguf_kv_format(f, i, buf, sizeof buf);
                tr_gguf_close(f);
            } else {
                failed++;
                assert_true(s < 0);
                assert_int_equal(d.code, s);
                assert_true(d.message[0] != '\0');
                assert_true(d.offset <= sf.w.len);
            }
            free(copy);
            sf.w.p[pos] ^= xors[k];
        }
    }
    print_message("mutations: %d opened, %d rejected\n", ok, failed);
    assert_true(ok > 0 && failed > 0);
    w_free(&sf.w);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_real_model),
        cmocka_unit_test(test_small_valid),
        cmocka_unit_test(test_getters),
        cmocka_unit_test(test_open_path),
        cmocka_unit_test(test_bad_header),
        cmocka_unit_test(test_bad_kv),
        cmocka_unit_test(test_bad_array),
        cmocka_unit_test(test_nesting_limit),
        cmocka_unit_test(test_bad_alignment),
        cmocka_unit_test(test_bad_tensor),
        cmocka_unit_test(test_truncation),
        cmocka_unit_test(test_mutations),
        cmocka_unit_test(test_load_modes),
        cmocka_unit_test(test_forget),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
