/* bench_gpu.c — the GPU benchmark of issue 28 (tests/gpu/run.sh runs it):
 * decode step time over batch sizes and context lengths, prefill speed,
 * and a prefill and a decode batch on two streams together against one
 * after the other, on random weights in Llama-3-8B's shapes
 * (tests/gpu/synth_shapes.h; a GPU machine is given no model file).
 *
 *   bench_gpu [-d BACKEND] [-s SHAPE] [-w q4_1|q8_0|bf16|f16] [-f FILE]
 *             [-b 1,8,64,256] [-c 1024,4096] [-p PROMPT] [-n STEPS]
 *             [-r REPEATS] [-k f16|q8|q4] [-M KV_GIB] [-G PEAK_GBS]
 *             [-T PEAK_TFLOPS] [-o 0|1] [-P 0|1]
 *
 * Defaults: cuda, llama3-8b, q4_1, batches 1,8,64,256, contexts 1024,4096,
 * a 2048-token prefill, 8 timed steps, 3 prefill repeats, F16 KV, at most
 * 96 GiB of KV per point, peaks of one H200 (4,800 GB/s HBM, 989 TFLOP/s
 * dense BF16). The model file is written to $TMPDIR (removed after)
 * unless -f names one (kept; reused when it exists).
 *
 * Decode point (B, C): B sequences, each with C positions already in its
 * own pages (zeros: the step's time does not depend on the values), run
 * one token each per forward pass; step_ms is the median over STEPS
 * passes returning every row's logits (what the engine downloads today),
 * step_ms_1row over STEPS passes returning one row's (the rest of the
 * pass is the same: the difference is the logits' download). gbs is the
 * bytes a step must read at least (every matrix once, the output matrix
 * included, plus the B sequences' K/V) over step_ms_1row: an effective
 * bandwidth, against -G. A point whose KV exceeds -M GiB is skipped and
 * says so.
 *
 * Prefill: one sequence of PROMPT tokens in one forward pass, last row's
 * logits; tflops counts 2 flops per weight per token (the output matrix
 * for the one row) plus the causal attention's 4 * heads * head_dim per
 * (query, key) pair, against -T.
 *
 * -o 1 (overlap): a second backend instance (its own default stream) runs
 * the same model; one thread prefills PROMPT tokens on the first while
 * another runs decode steps of batch 64 at context 1024 on the second
 * (as many steps as take about as long as the prefill, measured alone
 * first): ratio = together / (prefill alone + decode alone).
 *
 * -P 1: the backend under kernels/profile.h's timer (each op waited for,
 * so the figures are each op's own): per decode point, the attention op's
 * milliseconds per step and its effective bandwidth (the K/V bytes over
 * that time), and the matmul ops' milliseconds; for the prefill, the
 * attention and matmul ops' milliseconds. Slower steps: run it apart from
 * the plain timings.
 *
 * One JSON object per line. Not a test: never run by ctest.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/util.h"
#include "kernels/backend.h"
#include "kernels/profile.h"
#include "runtime/gguf/gguf.h"
#include "runtime/model/model.h"
/* header-only test helpers, not all of which this program calls */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#include "tests/gpu/synth_shapes.h"
#pragma GCC diagnostic pop

#define MAX_POINTS 16
#define PAGE 16

typedef struct bench_opts {
    const char *device, *shape, *file;
    tr_dtype wtype;
    tr_kv_type kv;
    int32_t batch[MAX_POINTS], ctx[MAX_POINTS];
    int n_batch, n_ctx;
    int32_t prompt, steps, repeats;
    double max_kv_gib, peak_gbs, peak_tflops;
    bool overlap, profile;
} bench_opts;

/* One loaded model on one backend. */
typedef struct bench_model {
    tr_backend *be;
    model *m;
    const model_hparams *hp;
} bench_model;

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static int parse_list(const char *s, int32_t *out) {
    int n = 0;
    for (char *end; *s && n < MAX_POINTS; s = *end ? end + 1 : end) {
        long v = strtol(s, &end, 10);
        if (end == s || v < 1 || v > 1 << 20 || (*end && *end != ',')) return -1;
        out[n++] = (int32_t)v;
    }
    return n;
}

static bool parse_wtype(const char *s, tr_dtype *out) {
    static const struct { const char *name; tr_dtype t; } k[] = {
        {"q4_1", TR_DTYPE_Q4_1}, {"q8_0", TR_DTYPE_Q8_0},
        {"bf16", TR_DTYPE_BF16}, {"f16", TR_DTYPE_F16}};
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++)
        if (!strcmp(s, k[i].name)) return (*out = k[i].t), true;
    return false;
}

static bool parse_kv(const char *s, tr_kv_type *out) {
    if (!strcmp(s, "f16")) *out = TR_KV_F16;
    else if (!strcmp(s, "q8")) *out = TR_KV_Q8;
    else if (!strcmp(s, "q4")) *out = TR_KV_Q4;
    else return false;
    return true;
}

static int usage(const char *why) {
    fprintf(stderr, "bench_gpu: %s\nusage: bench_gpu [-d BACKEND] [-s SHAPE] "
                    "[-w q4_1|q8_0|bf16|f16] [-f FILE] [-b LIST] [-c LIST] [-p N] [-n N] "
                    "[-r N] [-k f16|q8|q4] [-M GIB] [-G GBS] [-T TFLOPS] [-o 0|1] [-P 0|1]\n",
            why);
    return 2;
}

static int parse_opt(bench_opts *o, char flag, const char *v) {
    switch (flag) {
    case 'd': o->device = v; return 0;
    case 's': o->shape = v; return 0;
    case 'f': o->file = v; return 0;
    case 'w': return parse_wtype(v, &o->wtype) ? 0 : -1;
    case 'k': return parse_kv(v, &o->kv) ? 0 : -1;
    case 'b': return (o->n_batch = parse_list(v, o->batch)) > 0 ? 0 : -1;
    case 'c': return (o->n_ctx = parse_list(v, o->ctx)) > 0 ? 0 : -1;
    case 'p': o->prompt = atoi(v); return o->prompt >= 0 ? 0 : -1;
    case 'n': o->steps = atoi(v); return o->steps >= 1 && o->steps <= 1000 ? 0 : -1;
    case 'r': o->repeats = atoi(v); return o->repeats >= 1 && o->repeats <= 100 ? 0 : -1;
    case 'M': o->max_kv_gib = atof(v); return o->max_kv_gib > 0 ? 0 : -1;
    case 'G': o->peak_gbs = atof(v); return o->peak_gbs > 0 ? 0 : -1;
    case 'T': o->peak_tflops = atof(v); return o->peak_tflops > 0 ? 0 : -1;
    case 'o': o->overlap = atoi(v) != 0; return 0;
    case 'P': o->profile = atoi(v) != 0; return 0;
    default: return -1;
    }
}

static int parse_args(int argc, char **argv, bench_opts *o) {
    *o = (bench_opts){.device = "cuda", .shape = "llama3-8b", .wtype = TR_DTYPE_Q4_1,
                      .kv = TR_KV_F16, .batch = {1, 8, 64, 256}, .n_batch = 4,
                      .ctx = {1024, 4096}, .n_ctx = 2, .prompt = 2048, .steps = 8,
                      .repeats = 3, .max_kv_gib = 96, .peak_gbs = 4800,
                      .peak_tflops = 989};
    for (int i = 1; i < argc; i += 2) {
        if (argv[i][0] != '-' || !argv[i][1] || argv[i][2] || i + 1 >= argc)
            return usage("options are -X VALUE");
        if (parse_opt(o, argv[i][1], argv[i + 1]))
            return usage("bad option or value");
    }
    return 0;
}

static const shape_model *find_shape(const char *name) {
    for (size_t i = 0; i < sizeof k_shape_models / sizeof k_shape_models[0]; i++)
        if (!strcmp(k_shape_models[i].name, name)) return &k_shape_models[i];
    return NULL;
}

/* Bytes one decode step reads at least: every tensor but an untied
 * token table (a step reads B rows of it). */
static uint64_t step_weight_bytes(const shape_model *s) {
    synth_tensor *ts = calloc(512, sizeof *ts);
    if (!ts) return 0;
    int n = shape_tensors(s, ts);
    uint64_t sum = 0;
    for (int i = 0; i < n; i++)
        if (!(s->untied && !strcmp(ts[i].name, "token_embd.weight")))
            sum += synth_tensor_size(&ts[i]);
    free(ts);
    return sum;
}

static int model_open(const bench_opts *o, gguf_file *f, int32_t max_batch, bench_model *bm) {
    tr_diag d = {0};
    tr_backend_config cfg = {0};
    if (tr_backend_new(o->device, &cfg, &bm->be, &d)) {
        fprintf(stderr, "bench_gpu: %s\n", d.message);
        return 77; /* no usable device: SKIPPED for run.sh */
    }
    if (o->profile) {
        tr_backend *pb;
        if (tr_backend_profile_new(bm->be, &pb)) return 1;
        bm->be = pb;
    }
    if (tr_model_load(f, bm->be, max_batch, &bm->m, &d)) {
        fprintf(stderr, "bench_gpu: %s\n", d.message);
        return 1;
    }
    bm->hp = tr_model_get_hparams(bm->m);
    return 0;
}

static void model_close(bench_model *bm) {
    tr_model_free(bm->m);
    tr_backend_free(bm->be);
}

/* Writes zeros over the KV memory (uninitialized device memory could
 * hold NaNs; the time does not depend on the values either way). */
static int kv_zero(tr_backend *be, const tr_kv_layout *kv) {
    size_t total = (size_t)kv->n_pages * tr_kv_page_bytes(kv), chunk = 64u << 20;
    void *zeros = NULL;
    if (be->ops->host_alloc(be, chunk, &zeros)) return 1;
    memset(zeros, 0, chunk);
    tr_status s = TR_OK;
    for (size_t off = 0; s == TR_OK && off < total; off += chunk)
        s = be->ops->upload(tr_backend_stream(be), (char *)kv->base + off, zeros,
                            total - off < chunk ? total - off : chunk);
    if (s == TR_OK) s = be->ops->synchronize(be);
    be->ops->host_free(be, zeros);
    return s != TR_OK;
}

/* B sequences with their own pages for `need` positions each. */
typedef struct seq_set {
    int32_t n, pages_each;
    int32_t *pages, *n_pages, *pos, *seq, *ids, *rows;
    const int32_t **tables;
    tr_batch b;
} seq_set;

static int seqs_new(seq_set *ss, int32_t n, int32_t need) {
    ss->n = n;
    ss->pages_each = (need + PAGE - 1) / PAGE;
    ss->pages = malloc(sizeof(int32_t) * (size_t)n * (size_t)ss->pages_each);
    ss->n_pages = malloc(sizeof(int32_t) * (size_t)n);
    ss->pos = malloc(sizeof(int32_t) * (size_t)n);
    ss->seq = malloc(sizeof(int32_t) * (size_t)n);
    ss->ids = malloc(sizeof(int32_t) * (size_t)n);
    ss->rows = malloc(sizeof(int32_t) * (size_t)n);
    ss->tables = malloc(sizeof(int32_t *) * (size_t)n);
    if (!ss->pages || !ss->n_pages || !ss->pos || !ss->seq || !ss->ids || !ss->rows ||
        !ss->tables)
        return 1;
    for (int64_t p = 0; p < (int64_t)n * ss->pages_each; p++) ss->pages[p] = (int32_t)p;
    for (int32_t i = 0; i < n; i++) {
        ss->tables[i] = ss->pages + (size_t)i * (size_t)ss->pages_each;
        ss->n_pages[i] = ss->pages_each;
        ss->seq[i] = i;
        ss->rows[i] = i;
    }
    ss->b = (tr_batch){.n_tokens = n, .pos = ss->pos, .seq = ss->seq, .n_seqs = n,
                       .page_table = ss->tables, .n_pages = ss->n_pages};
    return 0;
}

static void seqs_free(seq_set *ss) {
    free(ss->pages);
    free(ss->n_pages);
    free(ss->pos);
    free(ss->seq);
    free(ss->ids);
    free(ss->rows);
    free(ss->tables);
}

/* A deterministic id from k, clear of the first 100 (control tokens). */
static int32_t token_id(int64_t k, const model_hparams *hp) {
    return (int32_t)(k % (hp->n_vocab - 200) + 100);
}

/* One decode pass of every sequence at position `at`; n_logits rows of
 * logits come back. Returns seconds, or a negative value on failure. */
static double decode_pass(bench_model *bm, const tr_kv_layout *kv, seq_set *ss, int32_t at,
                          int32_t n_logits, float *logits) {
    for (int32_t i = 0; i < ss->n; i++) {
        ss->pos[i] = at;
        ss->ids[i] = token_id((int64_t)(i + 1) * 7919 + (int64_t)at * 104729, bm->hp);
    }
    uint64_t t0 = tr_now_ns();
    if (tr_model_forward(bm->m, kv, &ss->b, ss->ids, ss->rows, n_logits, logits))
        return -1;
    return (double)(tr_now_ns() - t0) / 1e9;
}

/* Milliseconds of ops whose key starts with `prefix`, since the reset. */
static double profile_ms(tr_backend *be, const char *prefix) {
    tr_profile_entry e[TR_PROFILE_MAX_KEYS + 1];
    int n = tr_backend_profile_get(be, e, TR_PROFILE_MAX_KEYS + 1);
    double ms = 0;
    for (int i = 0; i < n; i++)
        if (!strncmp(e[i].key, prefix, strlen(prefix))) ms += (double)e[i].ns / 1e6;
    return ms;
}

typedef struct decode_result {
    double step_all, step_one, attn_ms, mm_ms;
} decode_result;

/* Warm-up, then `steps` passes with all rows' logits and `steps` with one
 * row's, alternating; medians. */
static int decode_measure(const bench_opts *o, bench_model *bm, const tr_kv_layout *kv,
                          seq_set *ss, int32_t ctx, decode_result *r) {
    float *logits = malloc(sizeof(float) * (size_t)ss->n * (size_t)bm->hp->n_vocab);
    double *all = malloc(sizeof(double) * (size_t)o->steps);
    double *one = malloc(sizeof(double) * (size_t)o->steps);
    int rc = !logits || !all || !one;
    int32_t at = ctx;
    for (int w = 0; !rc && w < 2; w++) rc = decode_pass(bm, kv, ss, at++, 1, logits) < 0;
    if (o->profile && !rc) tr_backend_profile_reset(bm->be);
    for (int s = 0; !rc && s < o->steps; s++) {
        all[s] = decode_pass(bm, kv, ss, at++, ss->n, logits);
        one[s] = decode_pass(bm, kv, ss, at++, 1, logits);
        rc = all[s] < 0 || one[s] < 0;
    }
    if (!rc) {
        r->attn_ms = o->profile ? profile_ms(bm->be, "attention") / (2.0 * o->steps) : 0;
        r->mm_ms = o->profile ? profile_ms(bm->be, "matmul") / (2.0 * o->steps) : 0;
        r->step_all = median(all, o->steps);
        r->step_one = median(one, o->steps);
    }
    free(logits);
    free(all);
    free(one);
    return rc;
}

static void print_decode(const bench_opts *o, int32_t B, int32_t C, uint64_t wbytes,
                         uint64_t kv_tok, const decode_result *r) {
    /* the timed passes run at positions ctx + 2 .. ctx + 2 + 2 * steps */
    double kv_gb = (double)B * (C + 2.0 + o->steps) * (double)kv_tok / 1e9;
    double gbs = ((double)wbytes / 1e9 + kv_gb) / r->step_one;
    printf("{\"point\":\"decode\",\"batch\":%d,\"context\":%d,\"step_ms\":%.3f,"
           "\"step_ms_1row\":%.3f,\"tok_s\":%.1f,\"weights_gb\":%.3f,\"kv_gb\":%.3f,"
           "\"gbs\":%.0f,\"pct_peak_bw\":%.1f",
           B, C, r->step_all * 1e3, r->step_one * 1e3, B / r->step_all, (double)wbytes / 1e9,
           kv_gb, gbs, 100 * gbs / o->peak_gbs);
    if (o->profile)
        printf(",\"attention_ms\":%.3f,\"attention_gbs\":%.0f,\"attention_pct_peak\":%.1f,"
               "\"matmul_ms\":%.3f",
               r->attn_ms, kv_gb / (r->attn_ms / 1e3),
               100 * kv_gb / (r->attn_ms / 1e3) / o->peak_gbs, r->mm_ms);
    printf("}\n");
    fflush(stdout);
}

static int decode_point(const bench_opts *o, bench_model *bm, int32_t B, int32_t C,
                        uint64_t wbytes) {
    uint64_t kv_tok = tr_model_kv_page_bytes(bm->m, 1, o->kv, o->kv);
    int32_t need = C + 2 + 2 * o->steps;
    double gib = (double)B * ((need + PAGE - 1) / PAGE * PAGE) * (double)kv_tok / (1u << 30);
    if (gib > o->max_kv_gib) {
        printf("{\"point\":\"decode\",\"batch\":%d,\"context\":%d,\"skipped\":"
               "\"needs %.1f GiB of KV, over -M %.0f\"}\n", B, C, gib, o->max_kv_gib);
        return 0;
    }
    seq_set ss = {0};
    tr_kv_layout kv;
    const char *why = NULL;
    int rc = seqs_new(&ss, B, need);
    if (!rc && tr_model_kv_alloc(bm->m, B * ss.pages_each, PAGE, o->kv, o->kv, &kv, &why)) {
        fprintf(stderr, "bench_gpu: KV of %.1f GiB: %s\n", gib, why ? why : "no memory");
        seqs_free(&ss);
        return 1;
    }
    decode_result r = {0};
    if (!rc) rc = kv_zero(bm->be, &kv);
    if (!rc) rc = decode_measure(o, bm, &kv, &ss, C, &r);
    if (!rc) print_decode(o, B, C, wbytes, kv_tok, &r);
    tr_model_kv_free(bm->m, &kv);
    seqs_free(&ss);
    return rc;
}

/* Seconds of one prefill of n tokens (one sequence, last row's logits). */
static double prefill_once(bench_model *bm, const tr_kv_layout *kv, int32_t n, float *logits) {
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)n);
    int32_t *pos = malloc(sizeof(int32_t) * (size_t)n);
    int32_t *seq = calloc((size_t)n, sizeof(int32_t));
    int32_t n_pages = kv->n_pages, *table = malloc(sizeof(int32_t) * (size_t)n_pages);
    double t = -1;
    if (ids && pos && seq && table) {
        for (int32_t i = 0; i < n; i++) {
            ids[i] = token_id((int64_t)i * 7919, bm->hp);
            pos[i] = i;
        }
        for (int32_t p = 0; p < n_pages; p++) table[p] = p;
        const int32_t *tables[1] = {table};
        tr_batch b = {.n_tokens = n, .pos = pos, .seq = seq, .n_seqs = 1,
                      .page_table = tables, .n_pages = &n_pages};
        int32_t row = n - 1;
        uint64_t t0 = tr_now_ns();
        if (!tr_model_forward(bm->m, kv, &b, ids, &row, 1, logits))
            t = (double)(tr_now_ns() - t0) / 1e9;
    }
    free(ids);
    free(pos);
    free(seq);
    free(table);
    return t;
}

static double prefill_flops(const model_hparams *hp, int32_t n) {
    double d = hp->dim, q = (double)hp->n_heads * hp->head_dim,
           kvd = (double)hp->n_kv_heads * hp->head_dim;
    double per_tok = d * q * 2 + d * kvd * 2 + 3 * d * hp->ffn_dim;
    double attn = 4.0 * q * ((double)n * (n + 1) / 2);
    return hp->n_layers * (2 * per_tok * n + attn) + 2 * d * hp->n_vocab;
}

static int prefill_point(const bench_opts *o, bench_model *bm) {
    tr_kv_layout kv;
    const char *why = NULL;
    if (tr_model_kv_alloc(bm->m, (o->prompt + PAGE - 1) / PAGE, PAGE, o->kv, o->kv, &kv, &why))
        return fprintf(stderr, "bench_gpu: prefill KV: %s\n", why ? why : "no memory"), 1;
    float *logits = malloc(sizeof(float) * (size_t)bm->hp->n_vocab);
    double *t = malloc(sizeof(double) * (size_t)o->repeats);
    int rc = !logits || !t || prefill_once(bm, &kv, o->prompt, logits) < 0; /* warm-up */
    if (o->profile && !rc) tr_backend_profile_reset(bm->be);
    for (int r = 0; !rc && r < o->repeats; r++) rc = (t[r] = prefill_once(bm, &kv, o->prompt, logits)) < 0;
    if (!rc) {
        double s = median(t, o->repeats), tf = prefill_flops(bm->hp, o->prompt) / s / 1e12;
        printf("{\"point\":\"prefill\",\"tokens\":%d,\"ms\":%.1f,\"tok_s\":%.0f,"
               "\"tflops\":%.2f,\"pct_peak_bf16\":%.1f",
               o->prompt, s * 1e3, o->prompt / s, tf, 100 * tf / o->peak_tflops);
        if (o->profile) /* each op's own milliseconds per prefill */
            printf(",\"attention_ms\":%.1f,\"matmul_ms\":%.1f",
                   profile_ms(bm->be, "attention") / o->repeats,
                   profile_ms(bm->be, "matmul") / o->repeats);
        printf("}\n");
        fflush(stdout);
    }
    tr_model_kv_free(bm->m, &kv);
    free(logits);
    free(t);
    return rc;
}

/* ---- overlap: a prefill on one backend, decode steps on another ---- */

typedef struct overlap_job {
    bench_model *bm;
    tr_kv_layout *kv;
    seq_set *ss;      /* decode job; NULL: prefill job */
    int32_t n, ctx;   /* prefill tokens, or decode steps at ctx */
    float *logits;
    double seconds;
} overlap_job;

static void *overlap_run(void *arg) {
    overlap_job *j = arg;
    uint64_t t0 = tr_now_ns();
    j->seconds = -1;
    if (!j->ss) {
        if (prefill_once(j->bm, j->kv, j->n, j->logits) < 0) return NULL;
    } else {
        for (int32_t s = 0; s < j->n; s++)
            if (decode_pass(j->bm, j->kv, j->ss, j->ctx + s, 1, j->logits) < 0) return NULL;
    }
    j->seconds = (double)(tr_now_ns() - t0) / 1e9;
    return NULL;
}

/* Median over `repeats` of the two jobs run alone (one after the other)
 * and together (two threads). */
static int overlap_time(const bench_opts *o, overlap_job *pre, overlap_job *dec,
                        double *alone, double *together) {
    double *a = malloc(sizeof(double) * (size_t)o->repeats);
    double *t = malloc(sizeof(double) * (size_t)o->repeats);
    int rc = !a || !t;
    for (int r = 0; !rc && r < o->repeats; r++) {
        overlap_run(pre);
        overlap_run(dec);
        a[r] = pre->seconds + dec->seconds;
        rc = pre->seconds < 0 || dec->seconds < 0;
        pthread_t th;
        uint64_t t0 = tr_now_ns();
        if (!rc && pthread_create(&th, NULL, overlap_run, dec)) rc = 1;
        if (!rc) {
            overlap_run(pre);
            pthread_join(th, NULL);
            t[r] = (double)(tr_now_ns() - t0) / 1e9;
            rc = pre->seconds < 0 || dec->seconds < 0;
        }
    }
    if (!rc) {
        *alone = median(a, o->repeats);
        *together = median(t, o->repeats);
    }
    free(a);
    free(t);
    return rc;
}

static int overlap_point(const bench_opts *o, bench_model *bm, gguf_file *f, int32_t max_batch) {
    bench_model second = {0};
    int rc = model_open(o, f, max_batch, &second);
    if (rc) return rc;
    const int32_t B = 64, C = 1024;
    tr_kv_layout kv_pre = {0}, kv_dec = {0};
    seq_set ss = {0};
    rc = seqs_new(&ss, B, C + 1024);
    const char *why = NULL;
    if (!rc) rc = tr_model_kv_alloc(bm->m, (o->prompt + PAGE - 1) / PAGE, PAGE, o->kv, o->kv,
                                    &kv_pre, &why) != TR_OK;
    if (!rc) rc = tr_model_kv_alloc(second.m, B * ss.pages_each, PAGE, o->kv, o->kv, &kv_dec,
                                    &why) != TR_OK;
    if (!rc) rc = kv_zero(second.be, &kv_dec);
    float *lp = malloc(sizeof(float) * (size_t)bm->hp->n_vocab);
    float *ld = malloc(sizeof(float) * (size_t)bm->hp->n_vocab);
    overlap_job pre = {bm, &kv_pre, NULL, o->prompt, 0, lp, 0};
    overlap_job dec = {&second, &kv_dec, &ss, 1, C, ld, 0};
    if (!rc) rc = !lp || !ld;
    /* calibrate: as many decode steps as take about one prefill */
    if (!rc) overlap_run(&pre), overlap_run(&pre), overlap_run(&dec), overlap_run(&dec);
    if (!rc && pre.seconds > 0 && dec.seconds > 0) {
        double k = pre.seconds / dec.seconds;
        dec.n = k < 1 ? 1 : k > 1000 ? 1000 : (int32_t)(k + 0.5);
    } else {
        rc = 1;
    }
    double alone = 0, together = 0;
    if (!rc) rc = overlap_time(o, &pre, &dec, &alone, &together);
    if (!rc)
        printf("{\"point\":\"overlap\",\"prefill_tokens\":%d,\"decode_batch\":%d,"
               "\"decode_context\":%d,\"decode_steps\":%d,\"alone_ms\":%.1f,"
               "\"together_ms\":%.1f,\"ratio\":%.3f}\n",
               o->prompt, B, C, dec.n, alone * 1e3, together * 1e3, together / alone);
    if (why) fprintf(stderr, "bench_gpu: overlap KV: %s\n", why);
    tr_model_kv_free(bm->m, &kv_pre);
    tr_model_kv_free(second.m, &kv_dec);
    seqs_free(&ss);
    free(lp);
    free(ld);
    model_close(&second);
    return rc;
}

/* The model file: -f FILE when it exists, else written (and removed by
 * the caller unless -f named it). */
static int model_file(const bench_opts *o, shape_model *s, char *path, size_t cap) {
    if (o->file) snprintf(path, cap, "%s", o->file);
    else snprintf(path, cap, "%s/trellis-bench-%s-%d-%d.gguf",
                  getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", s->name, (int)s->type,
                  (int)getpid());
    if (o->file && access(path, R_OK) == 0) return 0;
    uint64_t t0 = tr_now_ns();
    if (!shape_write(s, path)) return 1;
    fprintf(stderr, "bench_gpu: wrote %s in %.1f s\n", path, (double)(tr_now_ns() - t0) / 1e9);
    return 0;
}

static int run_points(const bench_opts *o, bench_model *bm, gguf_file *f, int32_t max_batch,
                      uint64_t wbytes) {
    int rc = 0;
    for (int c = 0; !rc && c < o->n_ctx; c++)
        for (int b = 0; !rc && b < o->n_batch; b++)
            rc = decode_point(o, bm, o->batch[b], o->ctx[c], wbytes);
    if (!rc && o->prompt > 0) rc = prefill_point(o, bm);
    if (!rc && o->overlap && o->prompt > 0 && !o->profile) rc = overlap_point(o, bm, f, max_batch);
    return rc;
}

int main(int argc, char **argv) {
    bench_opts o;
    int rc = parse_args(argc, argv, &o);
    if (rc) return rc;
    const shape_model *base = find_shape(o.shape);
    if (!base) return usage("unknown shape (llama3-8b, smollm2, gemma3)");
    shape_model s = *base;
    if (s.uniform) s.type = o.wtype;
    char path[1024];
    if (model_file(&o, &s, path, sizeof path)) return 1;
    gguf_file *f = NULL;
    tr_diag d = {0};
    int32_t max_batch = o.prompt;
    for (int b = 0; b < o.n_batch; b++) max_batch = o.batch[b] > max_batch ? o.batch[b] : max_batch;
    if (max_batch < 64) max_batch = 64;
    bench_model bm = {0};
    if (tr_gguf_open_ex(path, GGUF_LOAD_AUTO, &f, &d)) {
        fprintf(stderr, "bench_gpu: %s\n", d.message);
        rc = 1;
    }
    if (!rc) rc = model_open(&o, f, max_batch, &bm);
    if (!rc) {
        tr_backend_info info = tr_backend_get_info(bm.be);
        printf("{\"setup\":\"%s\",\"kernels\":\"%s\",\"shape\":\"%s\",\"weights\":\"%s\","
               "\"kv_type\":\"%s\",\"page_size\":%d,\"steps\":%d,\"repeats\":%d,"
               "\"peak_gbs\":%.0f,\"peak_tflops\":%.0f}\n",
               info.device, info.kernels, s.name,
               s.uniform ? tr_dtype_name(s.type) : "as the real file",
               tr_kv_type_name(o.kv), PAGE, o.steps, o.repeats, o.peak_gbs, o.peak_tflops);
        rc = run_points(&o, &bm, f, max_batch, step_weight_bytes(&s));
        model_close(&bm);
    }
    if (f) tr_gguf_close(f);
    if (!o.file) remove(path);
    return rc;
}
