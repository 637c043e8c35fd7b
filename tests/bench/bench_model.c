/* bench_model.c — prefill and decode speed of the default model on the CPU
 * backend, as scripts/bench_cpu.py runs it side by side with llama.cpp.
 *
 *   bench_model [-m MODEL] [-t THREADS] [-p PROMPT_TOKENS] [-n DECODE_TOKENS]
 *               [-r REPEATS] [-l auto|mmap|read] [-d BACKEND] [-k KERNELS]
 *               [-P 1] [-c f16|q8|q4]
 *
 * Prompt ids are synthetic and deterministic (token speed does not depend
 * on content): id_i = (i * 7919) % 49000 + 100, the same formula the
 * llama.cpp side uses. Prefill runs the whole prompt as one batch; decode
 * runs one token per forward pass, greedy. Prints one JSON line with the
 * median over repeats. -l: how the model file comes in (gguf.h; default
 * auto, as `trellis generate` and the engine). -d: the backend by registry
 * name (default cpu); -k: its kernel set (default: the best, or
 * $TRELLIS_CPU). -P 1: where decode's time goes: the backend runs under
 * kernels/profile.h's timer, and after the JSON line a table gives, for
 * each op (matmuls by shape), its calls and microseconds per decoded token
 * (summed over the repeats' decode phases) and its share of decode time;
 * "outside ops" is the rest (the model's own code between ops, and this
 * program's argmax). -c: the KV cache type of K and V (default f16).
 * Not a test: never run by ctest. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/profile.h"
#include "base/paths.h"
#include "base/util.h"
#include "runtime/gguf/gguf.h"
#include "runtime/model/model.h"

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Adds the profile backend's counters to sum[0..n) by key; returns the
 * new count. */
static int add_profile(tr_backend *be, tr_profile_entry *sum, int n) {
    tr_profile_entry e[TR_PROFILE_MAX_KEYS + 1];
    int k = tr_backend_profile_get(be, e, TR_PROFILE_MAX_KEYS + 1);
    for (int i = 0; i < k && i <= TR_PROFILE_MAX_KEYS; i++) {
        int j = 0;
        while (j < n && strcmp(sum[j].key, e[i].key) != 0) j++;
        if (j == n) {
            if (n > TR_PROFILE_MAX_KEYS) continue;
            sum[n++] = (tr_profile_entry){.calls = 0, .ns = 0};
            memcpy(sum[j].key, e[i].key, sizeof sum[j].key);
        }
        sum[j].calls += e[i].calls;
        sum[j].ns += e[i].ns;
    }
    return n;
}

/* The decode breakdown: per op, calls and microseconds per token. */
static void print_profile(tr_profile_entry *e, int n, double total_s, double tokens) {
    double ops_s = 0;
    printf("%-40s %10s %12s %7s\n", "op (decode)", "calls/tok", "us/tok", "share");
    for (int i = 0; i < n; i++) {
        double s = (double)e[i].ns / 1e9;
        ops_s += s;
        printf("%-40s %10.1f %12.1f %6.1f%%\n", e[i].key, (double)e[i].calls / tokens,
               s / tokens * 1e6, 100 * s / total_s);
    }
    printf("%-40s %10s %12.1f %6.1f%%\n", "outside ops", "", (total_s - ops_s) / tokens * 1e6,
           100 * (total_s - ops_s) / total_s);
    printf("%-40s %10s %12.1f\n", "decode step", "", total_s / tokens * 1e6);
}

int main(int argc, char **argv) {
    char def[4096];
    const char *path = tr_default_model_path(def, sizeof def);
    int threads = 0, n_prompt = 512, n_decode = 128, repeats = 3, profile = 0;
    gguf_load load = GGUF_LOAD_AUTO;
    const char *device = NULL, *kernels = NULL;
    tr_kv_type kv_type = TR_KV_F16;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-m")) path = argv[i + 1];
        else if (!strcmp(argv[i], "-t")) threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-p")) n_prompt = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-n")) n_decode = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-r")) repeats = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-d")) device = argv[i + 1];
        else if (!strcmp(argv[i], "-k")) kernels = argv[i + 1];
        else if (!strcmp(argv[i], "-P")) profile = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-c")) {
            if (!strcmp(argv[i + 1], "q8")) kv_type = TR_KV_Q8;
            else if (!strcmp(argv[i + 1], "q4")) kv_type = TR_KV_Q4;
            else if (strcmp(argv[i + 1], "f16")) {
                fprintf(stderr, "bench_model: -c wants f16, q8 or q4\n");
                return 2;
            }
        }
        else if (!strcmp(argv[i], "-l")) {
            if (!tr_gguf_load_parse(argv[i + 1], &load)) {
                fprintf(stderr, "bench_model: -l wants auto, mmap or read\n");
                return 2;
            }
        } else {
            fprintf(stderr, "bench_model: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    if (n_prompt < 1 || n_decode < 1 || repeats < 1 || repeats > 100) return 2;
    gguf_file *f;
    tr_backend *be;
    model *m;
    tr_diag d = {0};
    tr_backend_config cfg = {.threads = threads, .kernels = kernels};
    if (tr_gguf_open_ex(path, load, &f, &d) || tr_backend_new(device, &cfg, &be, &d)) {
        fprintf(stderr, "bench_model: %s\n", d.message);
        return 1;
    }
    if (profile) {
        tr_backend *pb;
        if (tr_backend_profile_new(be, &pb)) return 1;
        be = pb;
    }
    if (tr_model_load(f, be, n_prompt, &m, &d)) {
        fprintf(stderr, "bench_model: %s\n", d.message);
        return 1;
    }
    const model_hparams *hp = tr_model_get_hparams(m);
    int32_t total = n_prompt + n_decode, page = 16;
    int32_t n_pages = (total + page - 1) / page;
    tr_kv_layout kv;
    const char *why = NULL;
    if (tr_model_kv_alloc(m, n_pages, page, kv_type, kv_type, &kv, &why)) {
        fprintf(stderr, "bench_model: cannot allocate the KV cache%s%s\n", why ? ": " : "",
                why ? why : "");
        return 1;
    }
    int32_t *table = malloc(sizeof(int32_t) * (size_t)n_pages);
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)n_prompt);
    int32_t *pos = malloc(sizeof(int32_t) * (size_t)n_prompt);
    int32_t *seq = calloc((size_t)n_prompt, sizeof(int32_t));
    float *logits = malloc(sizeof(float) * (size_t)hp->n_vocab);
    double *pre = malloc(sizeof(double) * (size_t)repeats);
    double *dec = malloc(sizeof(double) * (size_t)repeats);
    for (int32_t i = 0; i < n_pages; i++) table[i] = i;
    for (int32_t i = 0; i < n_prompt; i++) {
        ids[i] = (int32_t)(((int64_t)i * 7919) % 49000 + 100);
        pos[i] = i;
    }
    const int32_t *tables[1] = {table};
    tr_profile_entry prof[TR_PROFILE_MAX_KEYS + 1];
    int n_prof = 0;
    double dec_total = 0;
    for (int r = 0; r < repeats; r++) {
        tr_batch b = {.n_tokens = n_prompt, .pos = pos, .seq = seq, .n_seqs = 1,
                      .page_table = tables, .n_pages = &n_pages};
        int32_t row = n_prompt - 1;
        uint64_t t0 = tr_now_ns();
        if (tr_model_forward(m, &kv, &b, ids, &row, 1, logits)) return 1;
        uint64_t t1 = tr_now_ns();
        if (profile) tr_backend_profile_reset(be);
        for (int k = 0; k < n_decode; k++) {
            int32_t tok = 0;
            for (int32_t v = 1; v < hp->n_vocab; v++)
                if (logits[v] > logits[tok]) tok = v;
            int32_t p = n_prompt + k;
            tr_batch bd = {.n_tokens = 1, .pos = &p, .seq = seq, .n_seqs = 1,
                           .page_table = tables, .n_pages = &n_pages};
            int32_t r0 = 0;
            if (tr_model_forward(m, &kv, &bd, &tok, &r0, 1, logits)) return 1;
        }
        uint64_t t2 = tr_now_ns();
        pre[r] = (double)(t1 - t0) / 1e9;
        dec[r] = (double)(t2 - t1) / 1e9;
        dec_total += dec[r];
        if (profile) /* decode phases only: each prefill is excluded */
            n_prof = add_profile(be, prof, n_prof);
    }
    qsort(pre, (size_t)repeats, sizeof(double), cmp_double);
    qsort(dec, (size_t)repeats, sizeof(double), cmp_double);
    tr_backend_info info = tr_backend_get_info(be);
    printf("{\"engine\":\"trellis\",\"device\":\"%s\",\"kernels\":\"%s\",\"threads\":%d,"
           "\"kv_type\":\"%s\",\"kv_bytes_per_token\":%llu,"
           "\"prompt_tokens\":%d,\"decode_tokens\":%d,"
           "\"prefill_tok_s\":%.2f,\"decode_tok_s\":%.2f}\n",
           info.name, info.kernels, info.threads, tr_kv_type_name(kv_type),
           (unsigned long long)(tr_model_kv_page_bytes(m, 1, kv_type, kv_type)), n_prompt,
           n_decode, n_prompt / pre[repeats / 2], n_decode / dec[repeats / 2]);
    if (profile) print_profile(prof, n_prof, dec_total, (double)n_decode * repeats);
    tr_model_kv_free(m, &kv);
    tr_model_free(m);
    tr_backend_free(be);
    tr_gguf_close(f);
    free(table); free(ids); free(pos); free(seq); free(logits); free(pre); free(dec);
    return 0;
}
