/* bench_matmul.c — single-thread speed of the quantized matmul kernels
 * (kernels/cpu/quant_math_internal.h) on the default model's shapes.
 *
 * For each kernel set (portable, avx2, avx512vnni where the CPU has it) and
 * each shape of SmolLM2-135M (Q4_1 576->576, 576->192, 576->1536,
 * 1536->576; Q8_0 576->49152, the tied output matrix), at n_tok = 1
 * (decode GEMV) and 512 (prefill), prints the time per call, GFLOP/s
 * (2 * rows * cols * n_tok / time) and GB/s of weight bytes read once per
 * call. Decode is measured twice: "hot" (the same matrix again and again,
 * so it sits in L2/L3) and "cold" (cycling through copies totalling more
 * than the last-level cache, as a real forward pass streams its 66 MB of
 * layers from DRAM). A last block times all of a forward pass's matmuls
 * (30 layers x 7 matrices + the output matrix) per decoded token and per
 * 512-token prefill, on the real weights when the model file is present,
 * and per batched decode step of 32 sequences (every row's logits); with
 * the model file mapped (4 KiB pages) and read into huge pages (gguf.h's
 * load modes), one after the other.
 *
 * Usage: bench_matmul [--quick] [--wall] [--forward] [--set NAME] [--gemma]
 *   --quick  shorter runs; --set  only that kernel set; --forward  only the
 *   forward-pass block; --wall  time with the wall clock (default: the
 *   thread's CPU time, which is what a busy shared machine still measures
 *   fairly); --gemma  Gemma 3 270M Q4_K_M's shapes and types instead
 *   (Q5_0 q/k/gate/up, Q8_0 v and the 262,144-row tied output, Q4_K o,
 *   Q6_K down), no forward-pass block.
 * Not run by ctest (timings are not tests).
 */
#include <math.h>
#include <stdbool.h>
#include <time.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/cpu/quant_math_internal.h"
#include "kernels/dtype.h"
#include "base/paths.h"
#include "base/util.h"
#include "runtime/gguf/gguf.h"

static double g_min_time = 0.4; /* seconds per measurement */
static bool g_wall = false;      /* wall clock instead of thread CPU time */

/* Nanoseconds of this thread's CPU time (default: other processes sharing
 * the cores then do not count against the kernels), or of wall time. */
static uint64_t now_ns(void) {
    if (g_wall) return tr_now_ns();
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t g_rng = 12345;
static uint32_t rnd(void) {
    g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(g_rng >> 32);
}
static float rnd_f(void) { return (float)((int)(rnd() % 20001) - 10000) * 1e-4f; }

static size_t row_bytes(tr_dtype t, int64_t cols) {
    uint64_t n = 0;
    if (!tr_dtype_row_bytes(t, (uint64_t)cols, &n)) abort();
    return (size_t)n;
}

/* Random blocks with small fp16 scales. */
static void fill_weights(tr_dtype t, uint8_t *w, int64_t rows, int64_t cols) {
    size_t n = row_bytes(t, cols) * (size_t)rows;
    for (size_t i = 0; i < n; i++) w[i] = (uint8_t)rnd();
    size_t tsz = tr_dtype_type_size(t);
    for (size_t b = 0; b < n / tsz; b++) {
        uint16_t h = (uint16_t)(0x1c00 | (rnd() & 0x0fff));
        memcpy(w + b * tsz, &h, 2);
        if (t == TR_DTYPE_Q4_1) memcpy(w + b * tsz + 2, &h, 2);
    }
}

typedef struct shape {
    const char *what;
    tr_dtype t;
    int64_t rows, cols;
} shape;

static const shape k_smollm2_shapes[] = {
    {"attn q/o  576->576 ", TR_DTYPE_Q4_1, 576, 576},
    {"attn k/v  576->192 ", TR_DTYPE_Q4_1, 192, 576},
    {"ffn g/u  576->1536 ", TR_DTYPE_Q4_1, 1536, 576},
    {"ffn down 1536->576 ", TR_DTYPE_Q4_1, 576, 1536},
    {"output 576->49152  ", TR_DTYPE_Q8_0, 49152, 576},
    {NULL, 0, 0, 0},
};

static const shape k_gemma3_shapes[] = {
    {"attn q Q5_0 640->1024  ", TR_DTYPE_Q5_0, 1024, 640},
    {"attn k Q5_0 640->256   ", TR_DTYPE_Q5_0, 256, 640},
    {"attn v Q8_0 640->256   ", TR_DTYPE_Q8_0, 256, 640},
    {"attn o Q4_K 1024->640  ", TR_DTYPE_Q4_K, 640, 1024},
    {"ffn g/u Q5_0 640->2048 ", TR_DTYPE_Q5_0, 2048, 640},
    {"ffn down Q6_K 2048->640", TR_DTYPE_Q6_K, 640, 2048},
    {"output Q8_0 640->262144", TR_DTYPE_Q8_0, 262144, 640},
    {NULL, 0, 0, 0},
};

static const shape *k_shapes = k_smollm2_shapes;

/* Quantized activations of n_tok random rows. */
static uint8_t *make_act(const cpu_quant_kernels *k, tr_dtype t, int64_t cols, int n_tok,
                         size_t *xs) {
    *xs = tr_cpu_quant_act_row_bytes(t, cols);
    uint8_t *xq = tr_aligned_alloc(*xs * (size_t)n_tok, 64);
    float *x = malloc((size_t)cols * sizeof(float));
    if (!xq || !x) abort();
    for (int i = 0; i < n_tok; i++) {
        for (int64_t c = 0; c < cols; c++) x[c] = rnd_f();
        k->quantize_act_row(t, x, xq + (size_t)i * *xs, cols);
    }
    free(x);
    return xq;
}

/* Seconds per call of matmul over `ncopies` weight copies in turn. */
static double time_mm(const cpu_quant_kernels *k, const shape *s, uint8_t *const *w, int ncopies,
                      const uint8_t *xq, size_t xs, int n_tok, float *out, bool r16) {
    const size_t wrb = row_bytes(s->t, s->cols);
    int64_t calls = 0;
    uint64_t t0 = now_ns(), t1;
    do {
        (r16 ? k->matmul_tile_r16 : k->matmul_tile)(s->t, w[calls % ncopies], wrb, s->cols, xq,
                                                    xs, n_tok, out, (size_t)s->rows, 0, s->rows,
                                                    false);
        calls++;
        t1 = now_ns();
    } while ((double)(t1 - t0) * 1e-9 < g_min_time);
    return (double)(t1 - t0) * 1e-9 / (double)calls;
}

static void report(const char *set, const shape *s, const char *mode, int n_tok, double sec) {
    double flop = 2.0 * (double)s->rows * (double)s->cols * n_tok;
    double bytes = (double)row_bytes(s->t, s->cols) * (double)s->rows;
    printf("  %-10s %s %-8s n_tok=%-3d %10.1f us  %7.2f GFLOP/s  %7.2f GB/s\n", set, s->what,
           mode, n_tok, sec * 1e6, flop / sec * 1e-9, bytes / sec * 1e-9);
    fflush(stdout);
}

static void bench_shapes(const cpu_quant_kernels *k) {
    for (size_t i = 0; k_shapes[i].what; i++) {
        const shape *s = &k_shapes[i];
        const size_t wbytes = row_bytes(s->t, s->cols) * (size_t)s->rows;
        /* cold: copies totalling >= 160 MB (well past the LLC) */
        int ncold = (int)(160e6 / (double)wbytes) + 1;
        if (ncold > 400) ncold = 400;
        uint8_t **w = malloc(sizeof(uint8_t *) * (size_t)ncold);
        if (!w) abort();
        for (int c = 0; c < ncold; c++) {
            w[c] = tr_aligned_alloc(wbytes, 64);
            if (!w[c]) abort();
            if (c == 0)
                fill_weights(s->t, w[0], s->rows, s->cols);
            else
                memcpy(w[c], w[0], wbytes);
        }
        const bool portable = strcmp(k->name, "portable") == 0;
        /* the layout matmul sees: row-major, then (where the set and type
         * have it) the 16-row interleaved copies of the same matrices */
        const bool has_r16 = k->matmul_tile_r16 && tr_cpu_repack16_supported(s->t, s->rows, s->cols);
        for (int layout = 0; layout < (has_r16 ? 2 : 1); layout++) {
            if (layout == 1) {
                uint8_t *rm = tr_aligned_alloc(wbytes, 64);
                if (!rm) abort();
                memcpy(rm, w[0], wbytes);
                for (int c = 0; c < ncold; c++) tr_cpu_repack16(s->t, rm, s->rows, s->cols, w[c]);
                tr_aligned_free(rm);
            }
            const int ntoks[3] = {1, 32, 512};
            for (int j = 0; j < (portable ? 2 : 3); j++) {
                const int n_tok = ntoks[j];
                const bool r16 = layout == 1;
                size_t xs;
                uint8_t *xq = make_act(k, s->t, s->cols, n_tok, &xs);
                float *out = tr_aligned_alloc(sizeof(float) * (size_t)n_tok * (size_t)s->rows, 64);
                if (!out) abort();
                report(k->name, s, r16 ? "r16 hot" : "hot", n_tok,
                       time_mm(k, s, w, 1, xq, xs, n_tok, out, r16));
                if (n_tok == 1)
                    report(k->name, s, r16 ? "r16 cold" : "cold", n_tok,
                           time_mm(k, s, w, ncold, xq, xs, n_tok, out, r16));
                tr_aligned_free(out);
                tr_aligned_free(xq);
            }
        }
        for (int c = 0; c < ncold; c++) tr_aligned_free(w[c]);
        free(w);
    }
}

/* All matmuls of one forward pass: per layer q, k, v, o, gate, up, down,
 * then the output matrix for the last token only (as the model computes
 * logits). Weights: the real model's, else random ones of its shapes. */
typedef struct fwd_mat {
    tr_dtype t;
    int64_t rows, cols;
    const void *w;
    bool last_only; /* only one token goes through it */
} fwd_mat;

static void bench_forward(const cpu_quant_kernels *k, gguf_load load) {
    char path[4096];
    gguf_file *f = NULL;
    if (tr_default_model_path(path, sizeof path) && access(path, R_OK) == 0) {
        tr_diag d;
        if (tr_gguf_open_ex(path, load, &f, &d) != TR_OK) f = NULL;
    }
    if (!f && load == GGUF_LOAD_READ) return; /* random weights: measured once */
    enum { NL = 30 };
    static const char *names[7] = {"attn_q", "attn_k", "attn_v", "attn_output",
                                   "ffn_gate", "ffn_up", "ffn_down"};
    static const int64_t rc[7][2] = {{576, 576}, {192, 576}, {192, 576}, {576, 576},
                                     {1536, 576}, {1536, 576}, {576, 1536}};
    fwd_mat m[NL * 7 + 1];
    int nm = 0;
    void *owned[NL * 7 + 1];
    int nowned = 0;
    double wbytes = 0;
    for (int l = 0; l < NL; l++)
        for (int j = 0; j < 7; j++) {
            fwd_mat *x = &m[nm++];
            x->t = TR_DTYPE_Q4_1;
            x->rows = rc[j][0];
            x->cols = rc[j][1];
            x->last_only = false;
            x->w = NULL;
            if (f) {
                char name[64];
                snprintf(name, sizeof name, "blk.%d.%s.weight", l, names[j]);
                const gguf_tensor *t = tr_gguf_tensor_find(f, name);
                if (t && (int64_t)t->ne[0] == x->cols && (int64_t)t->ne[1] == x->rows) {
                    x->t = (tr_dtype)t->type;
                    x->w = t->data;
                }
            }
            if (!x->w) {
                size_t n = row_bytes(x->t, x->cols) * (size_t)x->rows;
                uint8_t *w = tr_aligned_alloc(n, 64);
                if (!w) abort();
                fill_weights(x->t, w, x->rows, x->cols);
                x->w = owned[nowned++] = w;
            }
            wbytes += (double)row_bytes(x->t, x->cols) * (double)x->rows;
        }
    fwd_mat *o = &m[nm++];
    o->t = TR_DTYPE_Q8_0;
    o->rows = 49152;
    o->cols = 576;
    o->last_only = true;
    o->w = NULL;
    if (f) {
        const gguf_tensor *t = tr_gguf_tensor_find(f, "token_embd.weight");
        if (t && t->type == TR_DTYPE_Q8_0) o->w = t->data;
    }
    if (!o->w) {
        size_t n = row_bytes(o->t, o->cols) * (size_t)o->rows;
        uint8_t *w = tr_aligned_alloc(n, 64);
        if (!w) abort();
        fill_weights(o->t, w, o->rows, o->cols);
        o->w = owned[nowned++] = w;
    }
    wbytes += (double)row_bytes(o->t, o->cols) * (double)o->rows;

    const bool portable = strcmp(k->name, "portable") == 0;
    /* 1: one decode step; 32: a batched decode step of 32 sequences (the
     * output matrix runs for every row); 512: a prefill chunk (the output
     * matrix for its last row only) */
    const int ntoks[3] = {1, portable ? 16 : 32, portable ? 16 : 512};
    for (int j = 0; j < (portable ? 2 : 3); j++) {
        const int n_tok = ntoks[j];
        const bool all_logits = n_tok <= 32;
        size_t xs_a, xs_b, xs_o;
        uint8_t *xa = make_act(k, TR_DTYPE_Q4_1, 576, n_tok, &xs_a);
        uint8_t *xb = make_act(k, TR_DTYPE_Q4_1, 1536, n_tok, &xs_b);
        uint8_t *xo = make_act(k, o->t, 576, all_logits ? n_tok : 1, &xs_o);
        float *out = tr_aligned_alloc(sizeof(float) * (size_t)n_tok * 49152, 64);
        float *xf = malloc(sizeof(float) * 1536);
        if (!out || !xf) abort();
        for (int c = 0; c < 1536; c++) xf[c] = rnd_f();
        int passes = 0;
        uint64_t t0 = now_ns(), t1, tq = 0;
        do {
            for (int i = 0; i < nm; i++) {
                const fwd_mat *x = &m[i];
                const bool big = x->cols == 1536;
                if (x->last_only) {
                    x = o;
                    k->matmul_tile(x->t, x->w, row_bytes(x->t, x->cols), x->cols, xo, xs_o,
                                   all_logits ? n_tok : 1, out,
                                   (size_t)x->rows, 0, x->rows, false);
                } else {
                    k->matmul_tile(x->t, x->w, row_bytes(x->t, x->cols), x->cols,
                                   big ? xb : xa, big ? xs_b : xs_a, n_tok, out,
                                   (size_t)x->rows, 0, x->rows, false);
                }
            }
            /* activation quantization, as the ops would do per layer:
             * x (576) once for q/k/v, attention out once, the ffn input
             * once, the ffn hidden (1536) once */
            uint64_t q0 = now_ns();
            for (int l = 0; l < NL; l++)
                for (int tk = 0; tk < n_tok; tk++) {
                    for (int r = 0; r < 3; r++)
                        k->quantize_act_row(TR_DTYPE_Q4_1, xf, xa + (size_t)tk * xs_a, 576);
                    k->quantize_act_row(TR_DTYPE_Q4_1, xf, xb + (size_t)tk * xs_b, 1536);
                }
            tq += now_ns() - q0;
            passes++;
            t1 = now_ns();
        } while ((double)(t1 - t0) * 1e-9 < g_min_time * 3);
        double sec = (double)(t1 - t0) * 1e-9 / passes;
        double flop = 0;
        for (int i = 0; i < nm; i++)
            flop += 2.0 * (double)m[i].rows * (double)m[i].cols *
                    (m[i].last_only && !all_logits ? 1 : n_tok);
        printf("  %-10s forward matmuls (%s weights%s) n_tok=%-3d %9.2f ms  = %8.1f tok/s"
               "  %6.2f GFLOP/s  %6.2f GB/s of weights  (act quant %.1f%%)\n",
               k->name, f ? "model" : "random",
               !f ? "" : tr_gguf_load_used(f) == GGUF_LOAD_READ ? ", read" : ", mmap", n_tok,
               sec * 1e3, n_tok / sec, flop / sec * 1e-9, wbytes / sec * 1e-9, 100.0 * (double)tq * 1e-9 / passes / sec);
        fflush(stdout);
        tr_aligned_free(xa);
        tr_aligned_free(xb);
        tr_aligned_free(xo);
        tr_aligned_free(out);
        free(xf);
    }
    for (int i = 0; i < nowned; i++) tr_aligned_free(owned[i]);
    if (f) tr_gguf_close(f);
}

int main(int argc, char **argv) {
    const char *only = NULL;
    bool forward_only = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--forward") == 0) {
            forward_only = true;
        } else if (strcmp(argv[i], "--quick") == 0) {
            g_min_time = 0.1;
        } else if (strcmp(argv[i], "--wall") == 0) {
            g_wall = true;
        } else if (strcmp(argv[i], "--set") == 0 && i + 1 < argc) {
            only = argv[++i];
        } else if (strcmp(argv[i], "--gemma") == 0) {
            k_shapes = k_gemma3_shapes;
        } else {
            fprintf(stderr,
                    "usage: %s [--quick] [--wall] [--forward] [--set portable|avx2|avx512vnni] "
                    "[--gemma]\n",
                    argv[0]);
            return 2;
        }
    }
    static const char *sets[] = {"portable", "avx2", "avx512vnni"};
    printf("bench_matmul: single thread, %s time; selected set: %s\n",
           g_wall ? "wall" : "thread CPU", tr_cpu_quant_select(false)->name);
    for (int i = 0; i < 3; i++) {
        if (only && strcmp(only, sets[i]) != 0) continue;
        const cpu_quant_kernels *k = tr_cpu_quant_get(sets[i]);
        if (!k) {
            printf("  %s: not supported by this CPU\n", sets[i]);
            continue;
        }
        if (!forward_only) bench_shapes(k);
        if (k_shapes != k_smollm2_shapes) continue; /* SmolLM2's forward pass */
        bench_forward(k, GGUF_LOAD_MMAP);
        bench_forward(k, GGUF_LOAD_READ);
    }
    return 0;
}
