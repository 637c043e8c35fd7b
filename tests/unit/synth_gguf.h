/* synth_gguf.h — the random-weight qwen2 / qwen3 test models of
 * scripts/ref/synth_models.py, rebuilt in C: the same tensors, byte for
 * byte, in an in-memory GGUF without the vocabulary (the model test feeds
 * token ids; the reference ids and logits come from llama.cpp on the
 * Python-written file, vocabulary included).
 *
 * Why rebuilt, not checked in: with a real 49,152-token vocabulary the
 * files are 17-27 MB (the embedding alone is 13 MB); rebuilding takes
 * ~0.2 s and needs neither Python nor the files. synth_digest() is
 * compared with the digest the Python script recorded in the reference
 * JSON, so the two recipes cannot drift apart unnoticed.
 *
 * THE RECIPE MUST STAY IN STEP WITH synth_models.py (its docstring states
 * it). Header-only, for tests.
 */
#ifndef TR_TESTS_UNIT_SYNTH_GGUF_H
#define TR_TESTS_UNIT_SYNTH_GGUF_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/quant_math_internal.h"
#include "kernels/dtype.h"
#include "runtime/gguf/gguf.h"

typedef struct synth_arch {
    const char *name;
    int n_layers, dim, n_heads, n_kv, head_dim, ffn;
    float rope_base, eps;
    int ctx;
    bool bias, qk_norm, tied;
} synth_arch;

static const synth_arch k_synth_archs[] = {
    {"qwen2", 3, 256, 4, 2, 64, 512, 1000000.0f, 1e-6f, 4096, true, false, false},
    {"qwen3", 3, 256, 4, 2, 128, 768, 1000000.0f, 1e-6f, 4096, false, true, true},
};

typedef struct synth_tensor {
    char name[48];
    tr_dtype type;
    int64_t rows, cols;
    double gain; /* F32: the center */
    bool perm;   /* token_embd's rows permuted (qwen2's output.weight) */
} synth_tensor;

#define SYNTH_PERM_A 7919 /* output row (A t + B) mod vocab = embedding row t */
#define SYNTH_PERM_B 1

static inline uint64_t synth_sm64(uint64_t x) {
    uint64_t z = x + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* The tensor list in file order (as tensors() in the script); returns the
 * count written to out (room for 64). */
static int synth_tensors(const synth_arch *a, int64_t n_vocab, synth_tensor *out) {
    int n = 0;
    const int64_t d = a->dim, hd = a->head_dim, q_dim = (int64_t)a->n_heads * hd,
                  kv_dim = (int64_t)a->n_kv * hd;
#define T_(nm, ty, r, c, g)                                                      \
    do {                                                                         \
        snprintf(out[n].name, sizeof out[n].name, "%s", nm);                     \
        out[n].type = ty;                                                        \
        out[n].rows = r;                                                         \
        out[n].cols = c;                                                         \
        out[n].gain = g;                                                         \
        out[n].perm = false;                                                     \
        n++;                                                                     \
    } while (0)
    char nm[48];
    T_("token_embd.weight", a->tied ? TR_DTYPE_Q8_0 : TR_DTYPE_Q6_K, n_vocab, d, 4.0);
    for (int l = 0; l < a->n_layers; l++) {
        bool odd = l % 2;
#define L_(suffix, ty, r, c, g)                                                  \
    do {                                                                         \
        snprintf(nm, sizeof nm, "blk.%d.%s", l, suffix);                         \
        T_(nm, ty, r, c, g);                                                     \
    } while (0)
        L_("attn_norm.weight", TR_DTYPE_F32, 1, d, 1.0);
        L_("attn_q.weight", TR_DTYPE_Q4_K, q_dim, d, 1.0);
        L_("attn_k.weight", odd ? TR_DTYPE_Q4_K : TR_DTYPE_Q5_0, kv_dim, d, 1.0);
        L_("attn_v.weight", odd ? TR_DTYPE_Q8_0 : TR_DTYPE_Q6_K, kv_dim, d, 1.0);
        if (a->bias) {
            L_("attn_q.bias", TR_DTYPE_F32, 1, q_dim, 0.0);
            L_("attn_k.bias", TR_DTYPE_F32, 1, kv_dim, 0.0);
            L_("attn_v.bias", TR_DTYPE_F32, 1, kv_dim, 0.0);
        }
        if (a->qk_norm) {
            L_("attn_q_norm.weight", TR_DTYPE_F32, 1, hd, 1.0);
            L_("attn_k_norm.weight", TR_DTYPE_F32, 1, hd, 1.0);
        }
        L_("attn_output.weight", TR_DTYPE_Q4_K, d, q_dim, 1.0);
        L_("ffn_norm.weight", TR_DTYPE_F32, 1, d, 1.0);
        L_("ffn_gate.weight", TR_DTYPE_Q4_K, a->ffn, d, 1.0);
        L_("ffn_up.weight", odd ? TR_DTYPE_Q5_0 : TR_DTYPE_Q4_0, a->ffn, d, 1.0);
        L_("ffn_down.weight", odd ? TR_DTYPE_Q4_K : TR_DTYPE_Q6_K, d, a->ffn, 1.0);
#undef L_
    }
    T_("output_norm.weight", TR_DTYPE_F32, 1, d, 1.0);
    if (!a->tied) {
        T_("output.weight", TR_DTYPE_Q6_K, n_vocab, d, 4.0);
        out[n - 1].perm = true;
    }
#undef T_
    return n;
}

static uint64_t synth_tensor_size(const synth_tensor *t) {
    uint64_t row;
    tr_dtype_row_bytes(t->type, (uint64_t)t->cols, &row);
    return row * (uint64_t)t->rows;
}

static uint16_t synth_fp16_of(double x) { return cpu_fp32_to_fp16((float)x); }

static double synth_scale_div(tr_dtype t) {
    switch (t) {
    case TR_DTYPE_Q8_0: return 73.9;
    case TR_DTYPE_Q4_0: return 4.6;
    case TR_DTYPE_Q5_0: return 9.2;
    case TR_DTYPE_Q4_K: return 257.0;
    default: return 1367.0; /* Q6_K */
    }
}

/* Fills dst with tensor number t (1-based); a permuted tensor copies the
 * rows of emb (tensor 1, already filled). */
static void synth_tensor_bytes(int t, const synth_tensor *s, uint8_t *dst,
                               const uint8_t *emb) {
    if (s->perm) {
        uint64_t row = synth_tensor_size(s) / (uint64_t)s->rows;
        for (int64_t r = 0; r < s->rows; r++)
            memcpy(dst + (uint64_t)((SYNTH_PERM_A * r + SYNTH_PERM_B) % s->rows) * row,
                   emb + (uint64_t)r * row, (size_t)row);
        return;
    }
    const uint64_t size = synth_tensor_size(s);
    const uint64_t fkey = ((uint64_t)t | 1u << 20) << 40;
    if (s->type == TR_DTYPE_F32) {
        for (int64_t i = 0; i < s->rows * s->cols; i++) {
            int k = (int)(synth_sm64(fkey + (uint64_t)i) & 1023) - 512;
            float v = (float)s->gain + (float)k / 4096.0f;
            memcpy(dst + 4 * i, &v, 4);
        }
        return;
    }
    for (uint64_t i = 0; i * 8 < size; i++) {
        uint64_t w = synth_sm64(((uint64_t)t << 40) + i);
        uint64_t n = size - i * 8 < 8 ? size - i * 8 : 8;
        for (uint64_t k = 0; k < n; k++) dst[i * 8 + k] = (uint8_t)(w >> (8 * k));
    }
    const uint64_t bs = tr_dtype_block_size(s->type), tsz = tr_dtype_type_size(s->type);
    const uint64_t nb = (uint64_t)(s->rows * s->cols) / bs;
    const double sd = s->gain / (synth_scale_div(s->type) * sqrt((double)s->cols));
    const uint16_t base = synth_fp16_of(sd), base2 = synth_fp16_of(7.5 * sd);
    const size_t off = s->type == TR_DTYPE_Q6_K ? 208 : 0;
    for (uint64_t b = 0; b < nb; b++) {
        uint64_t f = synth_sm64(fkey + b);
        uint16_t d = (uint16_t)(base + (f & 63));
        memcpy(dst + b * tsz + off, &d, 2);
        if (s->type == TR_DTYPE_Q4_K) {
            uint16_t m = (uint16_t)(base2 + ((f >> 8) & 63));
            memcpy(dst + b * tsz + 2, &m, 2);
        }
    }
}

/* The digest of tensor_hash() in the script. */
static uint64_t synth_digest_add(uint64_t h, int t, const uint8_t *p, uint64_t size) {
    for (uint64_t i = 0; i * 8 < size; i++) {
        uint64_t w = 0;
        uint64_t n = size - i * 8 < 8 ? size - i * 8 : 8;
        memcpy(&w, p + i * 8, (size_t)n);
        h += synth_sm64(w ^ (((uint64_t)t << 40) | i));
    }
    return h;
}

/* ---- a minimal GGUF v3 writer ---- */

typedef struct synth_buf {
    uint8_t *p;
    size_t n, cap;
} synth_buf;

static void sb_put(synth_buf *b, const void *d, size_t n) {
    if (b->n + n > b->cap) {
        size_t c = b->cap ? b->cap : 4096;
        while (c < b->n + n) c *= 2;
        b->p = realloc(b->p, c);
        if (!b->p) abort();
        b->cap = c;
    }
    memcpy(b->p + b->n, d, n);
    b->n += n;
}
static void sb_u32(synth_buf *b, uint32_t v) { sb_put(b, &v, 4); }
static void sb_u64(synth_buf *b, uint64_t v) { sb_put(b, &v, 8); }
static void sb_str(synth_buf *b, const char *s) {
    sb_u64(b, strlen(s));
    sb_put(b, s, strlen(s));
}
static void sb_key(synth_buf *b, const char *arch, const char *suffix, gguf_type t) {
    char k[96];
    snprintf(k, sizeof k, "%s%s%s", arch ? arch : "", arch ? "." : "", suffix);
    sb_str(b, k);
    sb_u32(b, t);
}

/* The model as an in-memory GGUF (caller frees *mem after closing the
 * gguf_file); *digest gets the tensors' digest. n_vocab: 49,152 for the
 * checked-in references (SmolLM2's vocabulary). */
static uint8_t *synth_gguf(const synth_arch *a, int64_t n_vocab, size_t *len,
                           uint64_t *digest) {
    synth_tensor ts[64];
    int nt = synth_tensors(a, n_vocab, ts);
    synth_buf h = {0};
    int n_kv = 10 + (a->head_dim * a->n_heads != a->dim ? 2 : 0);
    sb_put(&h, "GGUF", 4);
    sb_u32(&h, 3);
    sb_u64(&h, (uint64_t)nt);
    sb_u64(&h, (uint64_t)n_kv);
    sb_key(&h, NULL, "general.architecture", GGUF_TYPE_STRING);
    sb_str(&h, a->name);
    const struct { const char *k; uint32_t v; } u[] = {
        {"block_count", (uint32_t)a->n_layers}, {"context_length", (uint32_t)a->ctx},
        {"embedding_length", (uint32_t)a->dim}, {"feed_forward_length", (uint32_t)a->ffn},
        {"attention.head_count", (uint32_t)a->n_heads},
        {"attention.head_count_kv", (uint32_t)a->n_kv}};
    for (size_t i = 0; i < sizeof u / sizeof u[0]; i++) {
        sb_key(&h, a->name, u[i].k, GGUF_TYPE_UINT32);
        sb_u32(&h, u[i].v);
    }
    sb_key(&h, a->name, "rope.freq_base", GGUF_TYPE_FLOAT32);
    sb_put(&h, &a->rope_base, 4);
    sb_key(&h, a->name, "attention.layer_norm_rms_epsilon", GGUF_TYPE_FLOAT32);
    sb_put(&h, &a->eps, 4);
    sb_key(&h, NULL, "general.alignment", GGUF_TYPE_UINT32);
    sb_u32(&h, 32);
    if (a->head_dim * a->n_heads != a->dim) {
        sb_key(&h, a->name, "attention.key_length", GGUF_TYPE_UINT32);
        sb_u32(&h, (uint32_t)a->head_dim);
        sb_key(&h, a->name, "attention.value_length", GGUF_TYPE_UINT32);
        sb_u32(&h, (uint32_t)a->head_dim);
    }
    uint64_t off = 0;
    for (int i = 0; i < nt; i++) {
        sb_str(&h, ts[i].name);
        bool vec = ts[i].rows == 1;
        sb_u32(&h, vec ? 1 : 2);
        sb_u64(&h, (uint64_t)ts[i].cols);
        if (!vec) sb_u64(&h, (uint64_t)ts[i].rows);
        sb_u32(&h, ts[i].type);
        sb_u64(&h, off);
        off += (synth_tensor_size(&ts[i]) + 31) / 32 * 32;
    }
    while (h.n % 32) sb_put(&h, "", 1);
    size_t data0 = h.n;
    uint8_t *zero = calloc(1, (size_t)off + 1);
    if (!zero) abort();
    sb_put(&h, zero, (size_t)off);
    free(zero);
    uint64_t dg = 0, at = 0;
    for (int i = 0; i < nt; i++) {
        uint64_t sz = synth_tensor_size(&ts[i]);
        uint8_t *p = h.p + data0 + at;
        synth_tensor_bytes(i + 1, &ts[i], p, h.p + data0);
        dg = synth_digest_add(dg, i + 1, p, sz);
        at += (sz + 31) / 32 * 32;
    }
    *len = h.n;
    *digest = dg;
    return h.p;
}

#endif
