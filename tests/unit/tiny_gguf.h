/* tiny_gguf.h — builds small GGUF files in memory for model tests: key/
 * value metadata and F32 tensors, opened with tr_gguf_open_memory. Lets a
 * test make a model of any architecture with random weights and no file
 * on disk (the real-model tests are test_model.c).
 *
 * Usage: tg_init; tg_u32/tg_f32/tg_str for metadata; tg_tensor for each
 * tensor (data copied); tg_open builds the file and opens it (the bytes
 * live in the builder: tg_free after tr_gguf_close).
 */
#ifndef TR_TESTS_UNIT_TINY_GGUF_H
#define TR_TESTS_UNIT_TINY_GGUF_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/gguf/gguf.h"

#define TG_MAX 512

typedef struct tg_tensor_def {
    char name[64];
    uint64_t ne[2];
    float *data; /* ne[0] * ne[1] */
} tg_tensor_def;

typedef struct tg_kv {
    char key[96];
    gguf_type type; /* UINT32, FLOAT32 or STRING */
    uint32_t u32;
    float f32;
    char str[64];
} tg_kv;

typedef struct tg_builder {
    tg_kv kv[TG_MAX];
    int n_kv;
    tg_tensor_def t[TG_MAX];
    int n_t;
    uint8_t *bytes;
    size_t len, cap;
} tg_builder;

static inline void tg_init(tg_builder *b) { memset(b, 0, sizeof *b); }

static inline tg_kv *tg_kv_add(tg_builder *b, const char *key, gguf_type t) {
    tg_kv *kv = &b->kv[b->n_kv++];
    memset(kv, 0, sizeof *kv);
    snprintf(kv->key, sizeof kv->key, "%s", key);
    kv->type = t;
    return kv;
}
static inline void tg_u32(tg_builder *b, const char *key, uint32_t v) {
    tg_kv_add(b, key, GGUF_TYPE_UINT32)->u32 = v;
}
static inline void tg_f32(tg_builder *b, const char *key, float v) {
    tg_kv_add(b, key, GGUF_TYPE_FLOAT32)->f32 = v;
}
static inline void tg_str(tg_builder *b, const char *key, const char *v) {
    tg_kv *kv = tg_kv_add(b, key, GGUF_TYPE_STRING);
    snprintf(kv->str, sizeof kv->str, "%s", v);
}

/* An F32 tensor of GGUF shape {ne0, ne1} (ne1 = 1: a vector); data is
 * copied. Returns the builder's copy (edit it before tg_open if needed). */
static inline float *tg_tensor(tg_builder *b, const char *name, uint64_t ne0,
                               uint64_t ne1, const float *data) {
    tg_tensor_def *t = &b->t[b->n_t++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->ne[0] = ne0;
    t->ne[1] = ne1;
    t->data = malloc(sizeof(float) * ne0 * ne1);
    memcpy(t->data, data, sizeof(float) * ne0 * ne1);
    return t->data;
}

/* Removes metadata key `key` (to test its absence). */
static inline void tg_drop_kv(tg_builder *b, const char *key) {
    for (int i = 0; i < b->n_kv; i++)
        if (strcmp(b->kv[i].key, key) == 0) {
            b->kv[i] = b->kv[--b->n_kv];
            return;
        }
}

static inline void tg_put(tg_builder *b, const void *p, size_t n) {
    if (b->len + n > b->cap) {
        size_t c = b->cap ? b->cap * 2 : 4096;
        while (c < b->len + n) c *= 2;
        b->bytes = realloc(b->bytes, c);
        b->cap = c;
    }
    memcpy(b->bytes + b->len, p, n);
    b->len += n;
}
static inline void tg_put_u32(tg_builder *b, uint32_t v) { tg_put(b, &v, 4); }
static inline void tg_put_u64(tg_builder *b, uint64_t v) { tg_put(b, &v, 8); }
static inline void tg_put_str(tg_builder *b, const char *s) {
    tg_put_u64(b, strlen(s));
    tg_put(b, s, strlen(s));
}

/* Serializes (little-endian host assumed, as every target of Trellis) and
 * opens. */
static inline tr_status tg_open(tg_builder *b, gguf_file **f, tr_diag *d) {
    b->len = 0;
    tg_put(b, "GGUF", 4);
    tg_put_u32(b, 3);
    tg_put_u64(b, (uint64_t)b->n_t);
    tg_put_u64(b, (uint64_t)b->n_kv);
    for (int i = 0; i < b->n_kv; i++) {
        tg_put_str(b, b->kv[i].key);
        tg_put_u32(b, b->kv[i].type);
        if (b->kv[i].type == GGUF_TYPE_UINT32) tg_put_u32(b, b->kv[i].u32);
        else if (b->kv[i].type == GGUF_TYPE_FLOAT32) tg_put(b, &b->kv[i].f32, 4);
        else tg_put_str(b, b->kv[i].str);
    }
    uint64_t off = 0;
    for (int i = 0; i < b->n_t; i++) {
        tg_put_str(b, b->t[i].name);
        tg_put_u32(b, 2);
        tg_put_u64(b, b->t[i].ne[0]);
        tg_put_u64(b, b->t[i].ne[1]);
        tg_put_u32(b, 0); /* F32 */
        tg_put_u64(b, off);
        off += (sizeof(float) * b->t[i].ne[0] * b->t[i].ne[1] + 31) / 32 * 32;
    }
    static const uint8_t zero[32];
    tg_put(b, zero, (32 - b->len % 32) % 32);
    for (int i = 0; i < b->n_t; i++) {
        size_t n = sizeof(float) * b->t[i].ne[0] * b->t[i].ne[1];
        tg_put(b, b->t[i].data, n);
        tg_put(b, zero, (32 - n % 32) % 32);
    }
    return tr_gguf_open_memory(b->bytes, b->len, f, d);
}

static inline void tg_free(tg_builder *b) {
    for (int i = 0; i < b->n_t; i++) free(b->t[i].data);
    free(b->bytes);
    memset(b, 0, sizeof *b);
}

#endif
