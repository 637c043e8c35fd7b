/* synth_shapes.h — GGUF files with the exact tensor shapes, types and
 * metadata of two real models but random weights, written to a file by
 * the tests' own GGUF v3 writer (synth_gguf.h's byte buffer for the
 * header, tensor data streamed after it): what a GPU test machine, which
 * is given no model file, runs the CPU-vs-CUDA parity on.
 *
 *   smollm2  SmolLM2-135M-Instruct.Q4_1.gguf: llama, 30 layers, dim 576,
 *            9/3 heads of 64, FFN 1536, vocabulary 49,152, tied Q8_0
 *            embedding, every projection Q4_1, F32 norms (94 MB)
 *   gemma3   gemma-3-270m-q4_k_m.gguf: gemma3, 18 layers, dim 640, 4/1
 *            heads of 256, FFN 2048, vocabulary 262,144, window 512 (5
 *            local : 1 global), tied Q8_0 embedding; Q/K/gate/up Q5_0
 *            (640 columns are not a multiple of 256, so the real file
 *            has no K-quant there), V Q8_0 or Q5_0, attn_output Q4_K,
 *            ffn_down Q6_K or Q4_K, layer by layer as the real file
 *            (trellis info; read from it on the build machine). The real
 *            file has no Q5_K: layers 2, 8 and 14 carry their ffn_down in
 *            Q5_K instead of Q4_K so that every K-quant runs (253 MB).
 *   llama3-8b Meta-Llama-3-8B's shapes (32 layers, dim 4096, 32/8 heads
 *            of 128, FFN 14,336, vocabulary 128,256, untied output) with
 *            every matrix in one type the caller picks (`uniform`): what
 *            tests/bench/bench_gpu.c measures (Q4_1 5.0 GB, Q8_0 8.5 GB,
 *            BF16 16 GB).
 *
 * Weights: random quants, block scales set so that each matrix's values
 * have a standard deviation of about 1 / sqrt(cols) (the CPU tests'
 * recipe, synth_gguf.h), norms 1 +- 1/8. The logits of such a model are
 * less decisive than a trained one's: greedy picks meet near-ties more
 * often, which the parity test allows for explicitly.
 *
 * Header-only, for tests; libc only (a GPU test machine has no more).
 */
#ifndef TR_TESTS_GPU_SYNTH_SHAPES_H
#define TR_TESTS_GPU_SYNTH_SHAPES_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/unit/synth_gguf.h"

typedef struct shape_model {
    const char *name, *arch;
    int n_layers, dim, n_heads, n_kv, head_dim, ffn, window, ctx;
    int64_t n_vocab;
    float rope_base, eps;
    /* uniform: every matrix (embedding and output too) of type `type`,
     * instead of the real file's choices; untied: an output.weight of
     * its own. */
    bool uniform, untied;
    tr_dtype type;
} shape_model;

static const shape_model k_shape_models[] = {
    {"smollm2", "llama", 30, 576, 9, 3, 64, 1536, 0, 8192, 49152, 100000.0f, 1e-5f, false, false, TR_DTYPE_F32},
    {"gemma3", "gemma3", 18, 640, 4, 1, 256, 2048, 512, 32768, 262144, 1000000.0f, 1e-6f, false, false, TR_DTYPE_F32},
    {"llama3-8b", "llama", 32, 4096, 32, 8, 128, 14336, 0, 8192, 128256, 500000.0f, 1e-5f,
     true, true, TR_DTYPE_Q4_1},
};

/* Gemma 3 270M Q4_K_M's per-layer choices (from the real file). */
static bool shape_gemma_v_q8(int l) {
    static const int q8[] = {0, 1, 4, 7, 10, 13, 15, 16, 17};
    for (size_t i = 0; i < sizeof q8 / sizeof q8[0]; i++)
        if (q8[i] == l) return true;
    return false;
}
static bool shape_gemma_down_q6(int l) { return shape_gemma_v_q8(l); }

/* The tensor list in file order; returns the count (out: room for 512). */
static int shape_tensors(const shape_model *s, synth_tensor *out) {
    int n = 0;
    const int64_t d = s->dim, q_dim = (int64_t)s->n_heads * s->head_dim,
                  kv_dim = (int64_t)s->n_kv * s->head_dim;
    const bool gemma = strcmp(s->arch, "gemma3") == 0;
#define ST_(ty, r, c, g, ...)                                                    \
    do {                                                                         \
        snprintf(out[n].name, sizeof out[n].name, __VA_ARGS__);                  \
        out[n].type = ty;                                                        \
        out[n].rows = r;                                                         \
        out[n].cols = c;                                                         \
        out[n].gain = g;                                                         \
        out[n].perm = false;                                                     \
        n++;                                                                     \
    } while (0)
    ST_(s->uniform ? s->type : TR_DTYPE_Q8_0, s->n_vocab, d, 4.0, "token_embd.weight");
    for (int l = 0; l < s->n_layers; l++) {
        tr_dtype lin = s->uniform ? s->type : gemma ? TR_DTYPE_Q5_0 : TR_DTYPE_Q4_1;
        tr_dtype v = gemma && shape_gemma_v_q8(l) ? TR_DTYPE_Q8_0 : lin;
        tr_dtype o = gemma ? TR_DTYPE_Q4_K : lin;
        tr_dtype down = !gemma ? lin
                        : shape_gemma_down_q6(l) ? TR_DTYPE_Q6_K
                        : l % 6 == 2 ? TR_DTYPE_Q5_K : TR_DTYPE_Q4_K;
        ST_(TR_DTYPE_F32, 1, d, 1.0, "blk.%d.attn_norm.weight", l);
        ST_(lin, q_dim, d, 1.0, "blk.%d.attn_q.weight", l);
        ST_(lin, kv_dim, d, 1.0, "blk.%d.attn_k.weight", l);
        ST_(v, kv_dim, d, 1.0, "blk.%d.attn_v.weight", l);
        if (gemma) {
            ST_(TR_DTYPE_F32, 1, s->head_dim, 1.0, "blk.%d.attn_q_norm.weight", l);
            ST_(TR_DTYPE_F32, 1, s->head_dim, 1.0, "blk.%d.attn_k_norm.weight", l);
            ST_(TR_DTYPE_F32, 1, d, 1.0, "blk.%d.post_attention_norm.weight", l);
            ST_(TR_DTYPE_F32, 1, d, 1.0, "blk.%d.post_ffw_norm.weight", l);
        }
        ST_(o, d, q_dim, 1.0, "blk.%d.attn_output.weight", l);
        ST_(TR_DTYPE_F32, 1, d, 1.0, "blk.%d.ffn_norm.weight", l);
        ST_(lin, s->ffn, d, 1.0, "blk.%d.ffn_gate.weight", l);
        ST_(lin, s->ffn, d, 1.0, "blk.%d.ffn_up.weight", l);
        ST_(down, d, s->ffn, 1.0, "blk.%d.ffn_down.weight", l);
    }
    ST_(TR_DTYPE_F32, 1, d, 1.0, "output_norm.weight");
    if (s->untied) ST_(s->uniform ? s->type : TR_DTYPE_Q8_0, s->n_vocab, d, 1.0, "output.weight");
#undef ST_
    return n;
}

/* BF16 / F16 matrices: values uniform in +-sqrt(3) * gain / sqrt(cols)
 * (deviation gain / sqrt(cols)), four per random word. */
static void shape_float_bytes(uint64_t key, const synth_tensor *s, uint8_t *dst) {
    const float a = (float)(sqrt(3.0) * s->gain / sqrt((double)s->cols));
    const int64_t n = s->rows * s->cols;
    for (int64_t i = 0; i < n; i += 4) {
        uint64_t w = synth_sm64(key + (uint64_t)i);
        for (int64_t k = 0; k < 4 && i + k < n; k++) {
            float v = a * ((float)((w >> (16 * k)) & 0xffff) / 32767.5f - 1.0f);
            uint16_t h;
            if (s->type == TR_DTYPE_F16) {
                h = cpu_fp32_to_fp16(v);
            } else {
                uint32_t bits;
                memcpy(&bits, &v, 4);
                h = (uint16_t)(bits >> 16);
            }
            memcpy(dst + 2 * (i + k), &h, 2);
        }
    }
}

/* Fills one tensor (number t, 1-based) with random quants and scales
 * giving values of deviation ~gain / sqrt(cols); norms: gain +- 1/8. */
static void shape_tensor_bytes(int t, const synth_tensor *s, uint8_t *dst) {
    const uint64_t size = synth_tensor_size(s), key = (uint64_t)t << 40;
    if (s->type == TR_DTYPE_F32) {
        for (int64_t i = 0; i < s->rows * s->cols; i++) {
            int k = (int)(synth_sm64(key + (uint64_t)i) & 1023) - 512;
            float v = (float)s->gain + (float)k / 4096.0f;
            memcpy(dst + 4 * i, &v, 4);
        }
        return;
    }
    if (s->type == TR_DTYPE_BF16 || s->type == TR_DTYPE_F16) {
        shape_float_bytes(key, s, dst);
        return;
    }
    for (uint64_t i = 0; i * 8 < size; i++) {
        uint64_t w = synth_sm64(key + i);
        uint64_t n = size - i * 8 < 8 ? size - i * 8 : 8;
        for (uint64_t k = 0; k < n; k++) dst[i * 8 + k] = (uint8_t)(w >> (8 * k));
    }
    /* the deviation of one element per unit block scale, by type */
    double per;
    size_t d_off = 0;
    switch (s->type) {
    case TR_DTYPE_Q8_0: per = 73.9; break;
    case TR_DTYPE_Q4_1: per = 4.6; break;
    case TR_DTYPE_Q5_0: per = 9.2; break;
    case TR_DTYPE_Q4_K: per = 257.0; break;
    case TR_DTYPE_Q5_K: per = 520.0; break;
    default: per = 1367.0; d_off = 208; break; /* Q6_K */
    }
    const uint64_t bs = tr_dtype_block_size(s->type), tsz = tr_dtype_type_size(s->type);
    const uint64_t nb = (uint64_t)(s->rows * s->cols) / bs;
    const double sd = s->gain / (per * sqrt((double)s->cols));
    const uint16_t base = synth_fp16_of(sd);
    for (uint64_t b = 0; b < nb; b++) {
        uint64_t f = synth_sm64((key | 1ull << 39) + b);
        uint8_t *blk = dst + b * tsz;
        uint16_t d = (uint16_t)(base + (f & 63));
        memcpy(blk + d_off, &d, 2);
        uint16_t m = 0;
        if (s->type == TR_DTYPE_Q4_1) /* centre 0..15 on zero */
            m = synth_fp16_of(-7.5 * cpu_fp16_to_fp32(d));
        else if (s->type == TR_DTYPE_Q4_K) /* dmin: centre q * sc - m */
            m = synth_fp16_of(7.5 * cpu_fp16_to_fp32(d));
        else if (s->type == TR_DTYPE_Q5_K)
            m = synth_fp16_of(15.5 * cpu_fp16_to_fp32(d));
        if (m) memcpy(blk + 2, &m, 2);
    }
}

/* Writes the model to `path`, its metadata followed by the n_extra
 * key/value pairs already encoded in extra[0..extra_len) (GGUF v3: a
 * vocabulary's tokenizer.* keys, tiny_vocab.h's tv_put_tokenizer_kv;
 * none: the file has no vocabulary, which the model needs not). false
 * (with why on stderr) on an I/O failure. */
static bool shape_write_kv(const shape_model *s, const char *path, const void *extra,
                           size_t extra_len, uint64_t n_extra) {
    synth_tensor *ts = calloc(512, sizeof *ts);
    if (!ts) return false;
    int nt = shape_tensors(s, ts);
    synth_buf h = {0};
    bool gemma = strcmp(s->arch, "gemma3") == 0;
    sb_put(&h, "GGUF", 4);
    sb_u32(&h, 3);
    sb_u64(&h, (uint64_t)nt);
    sb_u64(&h, (gemma ? 13 : 10) + n_extra);
    sb_key(&h, NULL, "general.architecture", GGUF_TYPE_STRING);
    sb_str(&h, s->arch);
    sb_key(&h, NULL, "general.alignment", GGUF_TYPE_UINT32);
    sb_u32(&h, 32);
    const struct { const char *k; uint32_t v; } u[] = {
        {"block_count", (uint32_t)s->n_layers}, {"context_length", (uint32_t)s->ctx},
        {"embedding_length", (uint32_t)s->dim}, {"feed_forward_length", (uint32_t)s->ffn},
        {"attention.head_count", (uint32_t)s->n_heads},
        {"attention.head_count_kv", (uint32_t)s->n_kv}};
    for (size_t i = 0; i < sizeof u / sizeof u[0]; i++) {
        sb_key(&h, s->arch, u[i].k, GGUF_TYPE_UINT32);
        sb_u32(&h, u[i].v);
    }
    sb_key(&h, s->arch, "rope.freq_base", GGUF_TYPE_FLOAT32);
    sb_put(&h, &s->rope_base, 4);
    sb_key(&h, s->arch, "attention.layer_norm_rms_epsilon", GGUF_TYPE_FLOAT32);
    sb_put(&h, &s->eps, 4);
    if (gemma) {
        sb_key(&h, s->arch, "attention.key_length", GGUF_TYPE_UINT32);
        sb_u32(&h, (uint32_t)s->head_dim);
        sb_key(&h, s->arch, "attention.value_length", GGUF_TYPE_UINT32);
        sb_u32(&h, (uint32_t)s->head_dim);
        sb_key(&h, s->arch, "attention.sliding_window", GGUF_TYPE_UINT32);
        sb_u32(&h, (uint32_t)s->window);
    }
    if (extra_len) sb_put(&h, extra, extra_len);
    uint64_t off = 0, max = 0;
    for (int i = 0; i < nt; i++) {
        sb_str(&h, ts[i].name);
        bool vec = ts[i].rows == 1;
        sb_u32(&h, vec ? 1 : 2);
        sb_u64(&h, (uint64_t)ts[i].cols);
        if (!vec) sb_u64(&h, (uint64_t)ts[i].rows);
        sb_u32(&h, ts[i].type);
        sb_u64(&h, off);
        uint64_t sz = synth_tensor_size(&ts[i]);
        off += (sz + 31) / 32 * 32;
        if (sz > max) max = sz;
    }
    while (h.n % 32) sb_put(&h, "", 1);
    FILE *fp = fopen(path, "wb");
    uint8_t *buf = malloc((size_t)max + 32);
    bool ok = fp && buf && fwrite(h.p, 1, h.n, fp) == h.n;
    for (int i = 0; ok && i < nt; i++) {
        uint64_t sz = synth_tensor_size(&ts[i]), padded = (sz + 31) / 32 * 32;
        memset(buf, 0, (size_t)padded);
        shape_tensor_bytes(i + 1, &ts[i], buf);
        ok = fwrite(buf, 1, (size_t)padded, fp) == padded;
    }
    if (fp && fclose(fp) != 0) ok = false;
    if (!ok) fprintf(stderr, "cannot write %s\n", path);
    free(buf);
    free(h.p);
    free(ts);
    return ok;
}

/* The model without a vocabulary. */
static bool shape_write(const shape_model *s, const char *path) {
    return shape_write_kv(s, path, NULL, 0, 0);
}

#endif
