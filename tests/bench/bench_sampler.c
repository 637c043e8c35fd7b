/* bench_sampler.c — microseconds per tr_sampler_sample call for the 49,152
 * (SmolLM2) and 262,144 (Gemma 3) vocabularies under common settings.
 *
 * Logits are synthetic but LLM-shaped: a Gaussian bulk (sd 2.5) plus a few
 * dozen tokens lifted 6-14 above it, so the nucleus is small as in real
 * decoding; a "flat" row (sd 1, no peaks) is the worst case for top_p
 * alone (the nucleus is most of the vocabulary). Settings without a mask,
 * penalties or bias leave the logits unchanged, so the same row is reused;
 * the masked settings copy a fresh row each call and report the copy's
 * cost separately.
 *
 * Real rows: given a file of float32 logits rows of 49,152 (e.g. SmolLM2
 * decode steps dumped with llama-cpp-python), the 49,152 column uses them
 * instead (cycling through the rows); the 262,144 column stays
 * synthetic.
 *
 * Usage: bench_sampler [seconds_per_case (default 0.3)] [rows.f32]
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "runtime/sampler/sampler.h"

static uint64_t lcg_state = 0x12345678abcdefull;
static double urand(void) {
    lcg_state = lcg_state * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(lcg_state >> 11) * 0x1.0p-53;
}
static double nrand(void) {
    double u1 = urand(), u2 = urand();
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2);
}

static void make_logits(float *l, int32_t n, bool flat) {
    for (int32_t i = 0; i < n; i++) l[i] = (float)(nrand() * (flat ? 1.0 : 2.5));
    if (!flat)
        for (int i = 0; i < 40; i++)
            l[(int32_t)(urand() * n)] += (float)(6 + 8 * urand());
}

typedef struct bcase {
    const char *name;
    float temperature;
    int32_t top_k;
    float top_p;
    float min_p;
    bool flat;
    bool mask;
    bool penalties;
    bool logprobs;
} bcase;

static const float *real_rows;
static int32_t n_real_rows;

static double run_case(const bcase *bc, int32_t n, double secs,
                       double *copy_us) {
    sampler_params p = tr_sampler_params_default();
    p.temperature = bc->temperature;
    p.top_k = bc->top_k;
    p.top_p = bc->top_p;
    p.min_p = bc->min_p;
    p.seed = 42;
    if (bc->penalties) {
        p.repetition_penalty = 1.1f;
        p.frequency_penalty = 0.2f;
        p.presence_penalty = 0.1f;
        p.penalty_last_n = 64;
    }
    if (bc->logprobs) p.n_logprobs = 5;
    sampler *s;
    tr_diag d;
    if (tr_sampler_new(&p, n, &s, &d) != TR_OK) {
        fprintf(stderr, "sampler_new: %s\n", d.message);
        exit(1);
    }
    int32_t nrows = real_rows && n == 49152 && !bc->flat ? n_real_rows : 1;
    float *orig = malloc((size_t)nrows * (size_t)n * sizeof *orig);
    float *work = malloc((size_t)nrows * (size_t)n * sizeof *work);
    int32_t nw = (n + 63) / 64;
    uint64_t *mask = malloc((size_t)nw * sizeof *mask);
    if (!orig || !work || !mask) exit(1);
    if (nrows > 1) memcpy(orig, real_rows, (size_t)nrows * (size_t)n * sizeof *orig);
    else make_logits(orig, n, bc->flat);
    memcpy(work, orig, (size_t)nrows * (size_t)n * sizeof *work);
    for (int32_t i = 0; i < nw; i++)
        mask[i] = (uint64_t)(urand() * 18446744073709551615.0) |
                  (i == 0 ? 1u : 0u);
    if (bc->penalties)
        for (int i = 0; i < 64; i++) tr_sampler_accept(s, (int32_t)(urand() * n));

    bool copy = bc->mask || bc->penalties;
    sampler_logprobs lp;
    double best = 1e30;
    for (int rep = 0; rep < 3; rep++) {
        long iters = 0;
        uint64_t t0 = tr_now_ns(), t1;
        do {
            for (int k = 0; k < 16; k++) {
                float *row = work + (size_t)(k % nrows) * (size_t)n;
                if (copy)
                    memcpy(row, orig + (size_t)(k % nrows) * (size_t)n,
                           (size_t)n * sizeof *work);
                int32_t tok;
                if (tr_sampler_sample(s, row, bc->mask ? mask : NULL, &tok,
                                   bc->logprobs ? &lp : NULL) != TR_OK) {
                    fprintf(stderr, "sample failed: %s\n",
                            tr_sampler_last_error(s));
                    exit(1);
                }
            }
            iters += 16;
            t1 = tr_now_ns();
        } while ((double)(t1 - t0) < secs * 1e9 / 3);
        double us = (double)(t1 - t0) / 1e3 / (double)iters;
        if (us < best) best = us;
    }
    *copy_us = 0;
    if (copy) {
        long iters = 0;
        uint64_t t0 = tr_now_ns(), t1;
        do {
            for (int k = 0; k < 64; k++) {
                memcpy(work, orig, (size_t)n * sizeof *work);
                __asm__ volatile("" ::"r"(work) : "memory");
            }
            iters += 64;
            t1 = tr_now_ns();
        } while ((double)(t1 - t0) < 0.05e9);
        *copy_us = (double)(t1 - t0) / 1e3 / (double)iters;
    }
    free(orig);
    free(work);
    free(mask);
    tr_sampler_free(s);
    return best;
}

int main(int argc, char **argv) {
    double secs = argc > 1 ? atof(argv[1]) : 0.3;
    if (!(secs > 0)) secs = 0.3;
    if (argc > 2) {
        char *buf;
        size_t len;
        if (tr_read_file(argv[2], &buf, &len) != 0 || len < 49152 * 4) {
            fprintf(stderr, "cannot read rows from %s\n", argv[2]);
            return 1;
        }
        n_real_rows = (int32_t)TR_MIN(len / (49152 * 4), 16);
        real_rows = (const float *)buf; /* malloc'd: aligned for floats */
        printf("49,152 column: %d real rows from %s\n", (int)n_real_rows,
               argv[2]);
    }
    static const bcase cases[] = {
        {"greedy", 0.0f, 0, 1.0f, 0.0f, false, false, false, false},
        {"top_k=40 top_p=0.9 T=0.8", 0.8f, 40, 0.9f, 0.0f, false, false, false, false},
        {"top_p=0.9 (no top_k)", 1.0f, 0, 0.9f, 0.0f, false, false, false, false},
        {"top_p=0.9 flat row", 1.0f, 0, 0.9f, 0.0f, true, false, false, false},
        {"T=1 full vocabulary", 1.0f, 0, 1.0f, 0.0f, false, false, false, false},
        {"min_p=0.05", 1.0f, 0, 1.0f, 0.05f, false, false, false, false},
        {"top_k=40 top_p=0.9 + logprobs=5", 0.8f, 40, 0.9f, 0.0f, false, false, false, true},
        {"greedy + 50% mask (+copy)", 0.0f, 0, 1.0f, 0.0f, false, true, false, false},
        {"top_k=40 + penalties (+copy)", 0.8f, 40, 1.0f, 0.0f, false, false, true, false},
    };
    static const int32_t vocabs[] = {49152, 262144};
    {
        sampler_params p = tr_sampler_params_default();
        sampler *s;
        if (tr_sampler_new(&p, 8, &s, NULL) == TR_OK) {
            printf("kernels: %s\n", tr_sampler_kernels_name(s));
            tr_sampler_free(s);
        }
    }
    printf("%-36s %12s %12s\n", "case (us per sample)", "vocab 49152",
           "vocab 262144");
    for (size_t c = 0; c < TR_ARRAY_LEN(cases); c++) {
        double us[2], cp[2];
        for (int v = 0; v < 2; v++)
            us[v] = run_case(&cases[c], vocabs[v], secs, &cp[v]);
        printf("%-36s %12.2f %12.2f", cases[c].name, us[0], us[1]);
        if (cp[0] > 0)
            printf("   (copy of the row alone: %.2f / %.2f)", cp[0], cp[1]);
        printf("\n");
    }
    return 0;
}
