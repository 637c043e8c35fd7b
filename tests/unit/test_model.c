/* test_model.c — the llama forward pass against llama.cpp, and the
 * determinism contract on the real default model.
 *
 * Reference: tests/data/model/smollm2_ref.json + logits_*.f32, made by
 * scripts/ref/make_model_ref.py (command in that file) with llama.cpp
 * through llama-cpp-python 0.3.36.
 *
 * tests/data/model/exact_*.f32 are the same prompts' first-step logits in
 * float64 arithmetic without activation quantization
 * (scripts/ref/numpy_forward.py, the dequantized weights of the same file).
 *
 * Checks:
 *  0. Trellis's first-step logits are no further from exact arithmetic
 *     than llama.cpp's are (RMS over the vocabulary, 25% slack).
 *  1. First-step logits of every prompt agree with llama.cpp within
 *     LOGIT_MAX_ABS (worst element) and LOGIT_RMS (root mean square).
 *  2. Greedy generation of 64 tokens gives llama.cpp's ids; where a prompt
 *     diverges, the reference's top-2 gap at that step is below
 *     NEAR_TIE_GAP (the two engines differ only in rounding, so they may
 *     only disagree where the reference was itself near a tie), and at most
 *     one prompt in ten diverges.
 *  3. Determinism: logits are bitwise identical whether the prompt is
 *     prefilled in one batch, in chunks, or token by token, whatever the
 *     thread count, and whether other sequences share the batch.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/unit/harness.h"
#include "tests/unit/json_lite.h"

#include "kernels/backend.h"
#include "base/paths.h"
#include "base/util.h"
#include "runtime/gguf/gguf.h"
#include "runtime/model/model.h"
#include "tests/unit/test_env.h"

/* Tolerances, measured and justified in docs/performance.md ("Parity with llama.cpp"):
 * both engines quantize activations to 8 bits before the integer dot
 * products and sum in different orders, so logits differ by rounding noise
 * that grows through 30 layers. Logits of this model span about +-30. */
#define LOGIT_MAX_ABS 1.60
#define LOGIT_RMS 0.70
#define NEAR_TIE_GAP 0.50
#define MAX_MISMATCH_PERCENT 5
#define PAGE 16
/* Q4's squared logit error against F16 KV with the keys calibrated, as a
 * share of it without: measured 0.66 (6 prompts and 8 steps each); a
 * calibration that did nothing would give 1 */
#define CALIBRATED_Q4_ERROR_SHARE 0.85

typedef struct fixture {
    gguf_file *file;
    tr_backend *be;
    model *m;
    jl_value *ref;
} fixture;

static int setup(void **state) {
    char path[4096];
    tr_default_model_path(path, sizeof path);
    if (access(path, R_OK) != 0) {
        fprintf(stderr, "default model missing at %s (run scripts/setup.sh)\n", path);
        return -1;
    }
    fixture *f = calloc(1, sizeof *f);
    tr_diag d = {0};
    if (tr_gguf_open(path, &f->file, &d) || tr_backend_new("cpu", &(tr_backend_config){.threads = 2}, &f->be, &d) ||
        tr_model_load(f->file, f->be, 512, &f->m, &d)) {
        fprintf(stderr, "load failed: %s\n", d.message);
        return -1;
    }
    f->ref = jl_load_file(TRELLIS_SOURCE_DIR "/tests/data/model/smollm2_ref.json");
    if (!f->ref) {
        fprintf(stderr, "reference: tests/data/model/smollm2_ref.json is missing or not JSON\n");
        return -1;
    }
    *state = f;
    return 0;
}

static int teardown(void **state) {
    fixture *f = *state;
    jl_free(f->ref);
    tr_model_free(f->m);
    tr_backend_free(f->be);
    tr_gguf_close(f->file);
    free(f);
    return 0;
}

/* One sequence's KV: pages 0..n-1 of its own layout. */
typedef struct seq_kv {
    tr_kv_layout kv;
    int32_t *table;
    int32_t n_pages;
} seq_kv;

static void seq_kv_init_typed(model *m, seq_kv *s, int32_t max_tokens, tr_kv_type t) {
    s->n_pages = (max_tokens + PAGE - 1) / PAGE;
    assert_int_equal(tr_model_kv_alloc(m, s->n_pages, PAGE, t, t, &s->kv, NULL), TR_OK);
    s->table = malloc(sizeof(int32_t) * (size_t)s->n_pages);
    /* a scrambled page order: attention must follow the table */
    for (int32_t i = 0; i < s->n_pages; i++) s->table[i] = s->n_pages - 1 - i;
}

static void seq_kv_init(model *m, seq_kv *s, int32_t max_tokens) {
    seq_kv_init_typed(m, s, max_tokens, TR_KV_F16);
}

static void seq_kv_free(model *m, seq_kv *s) {
    tr_model_kv_free(m, &s->kv);
    free(s->table);
}

/* Runs tokens[0..n) at positions start.. in chunks of `chunk`; returns the
 * logits of the last token in out. */
static void run(model *m, seq_kv *s, const int32_t *tokens, int32_t n,
                int32_t start, int32_t chunk, float *out) {
    int32_t pos[512], seq[512] = {0};
    const int32_t *tables[1] = {s->table};
    for (int32_t at = 0; at < n; at += chunk) {
        int32_t c = TR_MIN(chunk, n - at);
        for (int32_t i = 0; i < c; i++) pos[i] = start + at + i;
        tr_batch b = {.n_tokens = c, .pos = pos, .seq = seq, .n_seqs = 1,
                      .page_table = tables, .n_pages = &s->n_pages};
        int32_t row = c - 1;
        bool last = at + c >= n;
        assert_int_equal(tr_model_forward(m, &s->kv, &b, tokens + at, &row, last ? 1 : 0, out),
                         TR_OK);
    }
}

static int32_t argmax(const float *x, int32_t n) {
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

static int32_t *json_ids(const jl_value *arr, int32_t *n) {
    *n = (int32_t)jl_len(arr);
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)(*n + 1));
    for (int32_t i = 0; i < *n; i++) ids[i] = (int32_t)jl_num(jl_at(arr, (size_t)i));
    return ids;
}

static void test_parity_with_llama_cpp(void **state) {
    fixture *f = *state;
    const int32_t vocab = tr_model_get_hparams(f->m)->n_vocab;
    jl_value *cases = jl_get(f->ref, "cases");
    size_t n_cases = jl_len(cases);
    int n_gen = (int)jl_num(jl_get(f->ref, "n_gen"));
    if (small_scale()) { n_cases = 2; n_gen = 8; }
    assert_true(n_cases >= 2);
    float *logits = malloc(sizeof(float) * (size_t)vocab);
    float *ref = malloc(sizeof(float) * (size_t)vocab);
    int diverged = 0, mismatched = 0, steps = 0;
    double worst_abs = 0, worst_rms = 0, sum_te = 0, sum_le = 0;
    for (size_t c = 0; c < n_cases; c++) {
        jl_value *cs = jl_at(cases, c);
        int32_t n_prompt, n_ref_gen;
        int32_t *prompt = json_ids(jl_get(cs, "prompt_ids"), &n_prompt);
        int32_t *want = json_ids(jl_get(cs, "generated"), &n_ref_gen);
        jl_value *gaps = jl_get(cs, "top2_gap");
        char path[4096];
        snprintf(path, sizeof path, "%s/tests/data/model/%s", TRELLIS_SOURCE_DIR,
                 jl_str(jl_get(cs, "logits_file")));
        FILE *fp = fopen(path, "rb");
        assert_non_null(fp);
        assert_int_equal(fread(ref, sizeof(float), (size_t)vocab, fp), (size_t)vocab);
        fclose(fp);

        seq_kv s;
        seq_kv_init(f->m, &s, n_prompt + n_gen + 1);
        run(f->m, &s, prompt, n_prompt, 0, 512, logits);
        const char *dump = getenv("TRELLIS_DUMP_LOGITS"); /* for scripts/ref */
        if (dump) {
            char dp[4096];
            snprintf(dp, sizeof dp, "%s/trellis_%zu.f32", dump, c);
            FILE *df = fopen(dp, "wb");
            if (df) {
                fwrite(logits, sizeof(float), (size_t)vocab, df);
                fclose(df);
            }
        }
        double max_abs = 0, sq = 0;
        for (int32_t i = 0; i < vocab; i++) {
            double dlt = fabs((double)logits[i] - ref[i]);
            max_abs = fmax(max_abs, dlt);
            sq += dlt * dlt;
        }
        double rms = sqrt(sq / vocab);
        /* distance of each engine from exact (float64) arithmetic */
        snprintf(path, sizeof path, "%s/tests/data/model/exact_%zu.f32", TRELLIS_SOURCE_DIR, c);
        fp = fopen(path, "rb");
        assert_non_null(fp);
        float *exact = malloc(sizeof(float) * (size_t)vocab);
        assert_int_equal(fread(exact, sizeof(float), (size_t)vocab, fp), (size_t)vocab);
        fclose(fp);
        double sq_te = 0, sq_le = 0;
        for (int32_t i = 0; i < vocab; i++) {
            sq_te += ((double)logits[i] - exact[i]) * ((double)logits[i] - exact[i]);
            sq_le += ((double)ref[i] - exact[i]) * ((double)ref[i] - exact[i]);
        }
        double rms_te = sqrt(sq_te / vocab), rms_le = sqrt(sq_le / vocab);
        free(exact);
        printf("  vs exact float64: trellis rms %.4f, llama.cpp rms %.4f\n", rms_te, rms_le);
        sum_te += rms_te;
        sum_le += rms_le;
        worst_abs = fmax(worst_abs, max_abs);
        worst_rms = fmax(worst_rms, rms);
        printf("prompt %zu: %d tokens, first-step logits max|d| %.4f rms %.4f\n", c,
               n_prompt, max_abs, rms);
        assert_true(max_abs <= LOGIT_MAX_ABS);
        assert_true(rms <= LOGIT_RMS);

        /* Teacher-forced: at every step Trellis predicts from llama.cpp's
         * own prefix, so one near-tie does not hide the remaining steps.
         * The first mismatch is where free-running greedy decoding would
         * diverge. */
        int32_t p = n_prompt, first = -1;
        for (int k = 0; k < n_gen; k++) {
            int32_t tok = argmax(logits, vocab);
            if (tok != want[k]) {
                double gap = jl_num(jl_at(gaps, (size_t)k));
                printf("  step %d: trellis %d, llama.cpp %d (reference top-2 gap %.4f)\n", k,
                       tok, want[k], gap);
                assert_true(gap < NEAR_TIE_GAP);
                mismatched++;
                if (first < 0) first = k;
            }
            steps++;
            run(f->m, &s, &want[k], 1, p++, 1, logits);
        }
        if (first >= 0) diverged++;
        printf("prompt %zu: greedy %s\n", c, first < 0 ? "identical for all steps" : "diverges at a near-tie");
        seq_kv_free(f->m, &s);
        free(prompt);
        free(want);
    }
    printf("%zu prompts: %d diverge (all at near-ties); teacher-forced steps %d, "
           "mismatched %d (%.1f%%); first-step logits vs llama.cpp worst max|d| %.4f, "
           "worst rms %.4f; mean rms vs exact float64: trellis %.4f, llama.cpp %.4f\n",
           n_cases, diverged, steps, mismatched, 100.0 * mismatched / steps, worst_abs,
           worst_rms, sum_te / (double)n_cases, sum_le / (double)n_cases);
    /* Trellis is at least as close to exact arithmetic as llama.cpp (10%
     * slack for the sample of prompts) */
    assert_true(sum_te <= 1.10 * sum_le);
    /* teacher-forced mismatches are rare and each one a near-tie */
    /* (a rate over the 16 steps of the small ASan run means nothing) */
    if (!small_scale()) assert_true(mismatched * 100 <= MAX_MISMATCH_PERCENT * steps);
    free(logits);
    free(ref);
}

/* Teacher-forced over llama.cpp's greedy continuation of each reference
 * prompt: the argmax of every step with K/V of type t, against F16 KV's.
 * Returns the steps and counts mismatches; each mismatch of Q8 must be
 * at a near-tie of the F16 run (top-2 gap below NEAR_TIE_GAP, the bound
 * of the parity check). The agreement rates are docs/performance.md's
 * ("Quantized KV": Q8 96.9%, Q4 89.2% on the 12 prompts x 64 steps; F16
 * Trellis against llama.cpp's own F16 run agrees at 97.1% on the same
 * steps, so Q8's changes are of the size of two float implementations'
 * rounding differences); the floors below keep them from sliding. */
static int kv_type_agreement(fixture *f, tr_kv_type t, int *mismatched, double *worst_gap) {
    const int32_t vocab = tr_model_get_hparams(f->m)->n_vocab;
    jl_value *cases = jl_get(f->ref, "cases");
    size_t n_cases = jl_len(cases);
    int n_gen = (int)jl_num(jl_get(f->ref, "n_gen"));
    if (small_scale()) { n_cases = 2; n_gen = 8; }
    float *lf = malloc(sizeof(float) * (size_t)vocab);
    float *lq = malloc(sizeof(float) * (size_t)vocab);
    int steps = 0;
    *mismatched = 0;
    *worst_gap = 0;
    for (size_t c = 0; c < n_cases; c++) {
        int32_t n_prompt, n_ref;
        jl_value *cs = jl_at(cases, c);
        int32_t *prompt = json_ids(jl_get(cs, "prompt_ids"), &n_prompt);
        int32_t *want = json_ids(jl_get(cs, "generated"), &n_ref);
        seq_kv a, b;
        seq_kv_init(f->m, &a, n_prompt + n_gen + 1);
        seq_kv_init_typed(f->m, &b, n_prompt + n_gen + 1, t);
        run(f->m, &a, prompt, n_prompt, 0, 512, lf);
        run(f->m, &b, prompt, n_prompt, 0, 512, lq);
        for (int k = 0; k < n_gen && k < n_ref; k++) {
            int32_t top = argmax(lf, vocab), got = argmax(lq, vocab);
            if (got != top) {
                float second = -INFINITY;
                for (int32_t i = 0; i < vocab; i++)
                    if (i != top && lf[i] > second) second = lf[i];
                double gap = (double)lf[top] - second;
                *worst_gap = fmax(*worst_gap, gap);
                (*mismatched)++;
            }
            steps++;
            run(f->m, &a, &want[k], 1, n_prompt + k, 1, lf);
            run(f->m, &b, &want[k], 1, n_prompt + k, 1, lq);
        }
        seq_kv_free(f->m, &a);
        seq_kv_free(f->m, &b);
        free(prompt);
        free(want);
    }
    free(lf);
    free(lq);
    return steps;
}

static void test_quantized_kv_agreement(void **state) {
    fixture *f = *state;
    int mis;
    double gap;
    int steps = kv_type_agreement(f, TR_KV_Q8, &mis, &gap);
    printf("q8 KV vs f16 KV, teacher-forced: %d of %d steps agree (%.1f%%), "
           "largest f16 top-2 gap at a mismatch %.3f\n",
           steps - mis, steps, 100.0 * (steps - mis) / steps, gap);
    assert_true(gap < NEAR_TIE_GAP);
    if (!small_scale()) assert_true((steps - mis) * 100 >= 95 * steps);
    steps = kv_type_agreement(f, TR_KV_Q4, &mis, &gap);
    /* reported, not bounded by a near-tie: 4 bits move logits further */
    printf("q4 KV vs f16 KV, teacher-forced: %d of %d steps agree (%.1f%%), "
           "largest f16 top-2 gap at a mismatch %.3f\n",
           steps - mis, steps, 100.0 * (steps - mis) / steps, gap);
    if (!small_scale()) assert_true((steps - mis) * 100 >= 82 * steps);
}

/* Chunked prefill and token-by-token decoding give the same bits as one
 * batch: the determinism contract of kernels/backend.h end to end. */
static void test_chunking_is_bit_identical(void **state) {
    fixture *f = *state;
    const int32_t vocab = tr_model_get_hparams(f->m)->n_vocab;
    jl_value *cs = jl_at(jl_get(f->ref, "cases"), 0);
    int32_t n;
    int32_t *prompt = json_ids(jl_get(cs, "prompt_ids"), &n);
    float *a = malloc(sizeof(float) * (size_t)vocab);
    float *b = malloc(sizeof(float) * (size_t)vocab);
    int32_t chunks[] = {1, 5, 16, 37};
    seq_kv s;
    /* quantized KV too: a prefix read back from its pages (chunks, decode)
     * gives the bits of one batch, whose tiles read staged rows */
    const tr_kv_type types[] = {TR_KV_Q8, TR_KV_Q4};
    for (size_t ti = 0; ti < TR_ARRAY_LEN(types); ti++) {
        seq_kv_init_typed(f->m, &s, n + 1, types[ti]);
        run(f->m, &s, prompt, n, 0, 512, a);
        for (size_t i = 1; i < TR_ARRAY_LEN(chunks); i++) {
            run(f->m, &s, prompt, n, 0, chunks[i], b);
            assert_memory_equal(a, b, sizeof(float) * (size_t)vocab);
        }
        seq_kv_free(f->m, &s);
    }
    seq_kv_init(f->m, &s, n + 1);
    run(f->m, &s, prompt, n, 0, 512, a);
    for (size_t i = 0; i < TR_ARRAY_LEN(chunks); i++) {
        if (small_scale() && chunks[i] == 1) continue;
        run(f->m, &s, prompt, n, 0, chunks[i], b);
        assert_memory_equal(a, b, sizeof(float) * (size_t)vocab);
    }
    seq_kv_free(f->m, &s);

    /* one thread instead of two */
    tr_backend *be1;
    model *m1;
    assert_int_equal(tr_backend_new("cpu", &(tr_backend_config){.threads = 1}, &be1, NULL), TR_OK);
    assert_int_equal(tr_model_load(f->file, be1, 512, &m1, NULL), TR_OK);
    seq_kv_init(m1, &s, n + 1);
    run(m1, &s, prompt, n, 0, 512, b);
    assert_memory_equal(a, b, sizeof(float) * (size_t)vocab);
    seq_kv_free(m1, &s);
    tr_model_free(m1);
    tr_backend_free(be1);
    free(a);
    free(b);
    free(prompt);
}

/* The same prompt as sequence 1 of a two-sequence batch (sequence 0 a
 * different prompt, its pages interleaved with ours) gives the same bits. */
static void test_batch_invariance(void **state) {
    fixture *f = *state;
    const int32_t vocab = tr_model_get_hparams(f->m)->n_vocab;
    jl_value *cases = jl_get(f->ref, "cases");
    int32_t na, nb;
    int32_t *pa = json_ids(jl_get(jl_at(cases, 6), "prompt_ids"), &na);
    int32_t *pb = json_ids(jl_get(jl_at(cases, 9), "prompt_ids"), &nb);
    float *alone = malloc(sizeof(float) * (size_t)vocab);
    float *mixed = malloc(sizeof(float) * 2 * (size_t)vocab);
    seq_kv s;
    seq_kv_init(f->m, &s, nb);
    run(f->m, &s, pb, nb, 0, 512, alone);
    seq_kv_free(f->m, &s);

    int32_t pages_a = (na + PAGE - 1) / PAGE, pages_b = (nb + PAGE - 1) / PAGE;
    tr_kv_layout kv;
    assert_int_equal(tr_model_kv_alloc(f->m, pages_a + pages_b, PAGE, TR_KV_F16, TR_KV_F16, &kv, NULL), TR_OK);
    int32_t *ta = malloc(sizeof(int32_t) * (size_t)pages_a);
    int32_t *tb = malloc(sizeof(int32_t) * (size_t)pages_b);
    int32_t next = 0;
    for (int32_t i = 0; i < TR_MAX(pages_a, pages_b); i++) {
        if (i < pages_a) ta[i] = next++;
        if (i < pages_b) tb[i] = next++;
    }
    int32_t tokens[512], pos[512], seq[512];
    int32_t n = 0;
    for (int32_t i = 0; i < na; i++) { tokens[n] = pa[i]; pos[n] = i; seq[n++] = 0; }
    for (int32_t i = 0; i < nb; i++) { tokens[n] = pb[i]; pos[n] = i; seq[n++] = 1; }
    const int32_t *tables[2] = {ta, tb};
    int32_t npages[2] = {pages_a, pages_b};
    tr_batch b = {.n_tokens = n, .pos = pos, .seq = seq, .n_seqs = 2,
                  .page_table = tables, .n_pages = npages};
    int32_t rows[2] = {na - 1, n - 1};
    assert_int_equal(tr_model_forward(f->m, &kv, &b, tokens, rows, 2, mixed), TR_OK);
    assert_memory_equal(alone, mixed + vocab, sizeof(float) * (size_t)vocab);
    tr_model_kv_free(f->m, &kv);
    free(ta); free(tb); free(pa); free(pb); free(alone); free(mixed);
}

/* ---- masked logits (model.h tr_logit_masks) ---- */

typedef struct mask_probe {
    int awaited;
} mask_probe;

static void probe_await(void *ctx) { ((mask_probe *)ctx)->awaited++; }

/* One sequence of n tokens with logits at rows (n/2, n-1), under masks
 * (NULL: none), into out[2, vocab] prefilled with NaN bytes. */
static tr_status masked_run(model *m, seq_kv *s, const int32_t *tokens, int32_t n,
                            const tr_logit_masks *lm, float *out) {
    int32_t pos[512], seq[512] = {0};
    const int32_t *tables[1] = {s->table};
    for (int32_t i = 0; i < n; i++) pos[i] = i;
    tr_batch b = {.n_tokens = n, .pos = pos, .seq = seq, .n_seqs = 1,
                  .page_table = tables, .n_pages = &s->n_pages};
    int32_t rows[2] = {n / 2, n - 1};
    memset(out, 0xff, 2 * sizeof(float) * (size_t)tr_model_get_hparams(m)->n_vocab);
    return tr_model_forward_masked(m, &s->kv, &b, tokens, rows, 2, out, lm);
}

static bool bit(const uint64_t *m, int32_t t) { return m && (m[t >> 6] >> (t & 63) & 1); }

/* Checks out against the unmasked logits: every element a row's mask
 * allows (and every element of an unmasked row) is bitwise equal; returns
 * how many elements were left unwritten (NaN bytes). */
static int32_t masked_compare(const float *out, const float *full, int32_t vocab,
                              const uint64_t *const *row_mask) {
    int32_t unwritten = 0;
    for (int32_t r = 0; r < 2; r++)
        for (int32_t t = 0; t < vocab; t++) {
            size_t i = (size_t)r * (size_t)vocab + (size_t)t;
            uint32_t bits;
            memcpy(&bits, &out[i], sizeof bits);
            if (!row_mask[r] || bit(row_mask[r], t))
                assert_memory_equal(&out[i], &full[i], sizeof(float));
            else
                unwritten += bits == 0xffffffffu;
        }
    return unwritten;
}

/* Logits under masks are bitwise the unmasked ones where a mask allows;
 * few allowed tokens leave the rest unwritten (the output projection read
 * only those rows); a row without a mask, or masks allowing much, get
 * every logit; the masks are awaited once; bad masks are an error. */
static void test_masked_logits(void **state) {
    fixture *f = *state;
    const int32_t vocab = tr_model_get_hparams(f->m)->n_vocab;
    const size_t nw = ((size_t)vocab + 63) / 64;
    jl_value *cases = jl_get(f->ref, "cases");
    int32_t n;
    int32_t *p = json_ids(jl_get(jl_at(cases, 6), "prompt_ids"), &n);
    seq_kv s;
    seq_kv_init(f->m, &s, n);
    float *full = malloc(2 * sizeof(float) * (size_t)vocab);
    float *out = malloc(2 * sizeof(float) * (size_t)vocab);
    uint64_t *m0 = calloc(nw, sizeof *m0), *m1 = calloc(nw, sizeof *m1);
    assert_int_equal(masked_run(f->m, &s, p, n, NULL, full), TR_OK);
    /* digits-like sparse sets, the first and last token included */
    const int32_t few0[] = {0, 15, 16, 17, 1000, 4095, vocab - 1};
    const int32_t few1[] = {17, 64, 65, 30000 % vocab, vocab - 2};
    for (size_t i = 0; i < TR_ARRAY_LEN(few0); i++) m0[few0[i] >> 6] |= UINT64_C(1) << (few0[i] & 63);
    for (size_t i = 0; i < TR_ARRAY_LEN(few1); i++) m1[few1[i] >> 6] |= UINT64_C(1) << (few1[i] & 63);
    const uint64_t *rm[2] = {m0, m1};
    mask_probe probe = {0};
    tr_logit_masks lm = {.await = probe_await, .ctx = &probe, .row_mask = rm, .n_words = nw};
    assert_int_equal(masked_run(f->m, &s, p, n, &lm, out), TR_OK);
    assert_int_equal(probe.awaited, 1);
    /* the union of the two masks was computed: 11 of 2 * vocab written */
    assert_int_equal(masked_compare(out, full, vocab, rm), 2 * vocab - 2 * 11);

    /* a row without a mask: every logit */
    rm[1] = NULL;
    assert_int_equal(masked_run(f->m, &s, p, n, &lm, out), TR_OK);
    assert_int_equal(masked_compare(out, full, vocab, (const uint64_t *const[2]){NULL, NULL}), 0);
    /* a mask allowing half the vocabulary: every logit */
    for (size_t k = 0; k < nw; k++) m1[k] = 0x5555555555555555ull;
    rm[1] = m1;
    assert_int_equal(masked_run(f->m, &s, p, n, &lm, out), TR_OK);
    assert_int_equal(masked_compare(out, full, vocab, (const uint64_t *const[2]){NULL, NULL}), 0);
    assert_int_equal(probe.awaited, 3);

    /* masks the forward cannot read are refused */
    lm.n_words = nw - 1;
    assert_int_equal(masked_run(f->m, &s, p, n, &lm, out), TR_ERR_INVALID_ARG);
    lm.n_words = nw;
    lm.row_mask = NULL;
    assert_int_equal(masked_run(f->m, &s, p, n, &lm, out), TR_ERR_INVALID_ARG);
    seq_kv_free(f->m, &s);
    free(p); free(full); free(out); free(m0); free(m1);
}

/* Squared logit error of Q4 KV against F16 KV, summed over the first
 * n_cases reference prompts and 8 teacher-forced steps after each. */
static double q4_logit_error(model *m, jl_value *cases, size_t n_cases, int32_t vocab) {
    float *lf = malloc(sizeof(float) * (size_t)vocab), *lq = malloc(sizeof(float) * (size_t)vocab);
    double err = 0;
    for (size_t c = 0; c < n_cases; c++) {
        int32_t n_prompt, n_ref;
        jl_value *cs = jl_at(cases, c);
        int32_t *prompt = json_ids(jl_get(cs, "prompt_ids"), &n_prompt);
        int32_t *want = json_ids(jl_get(cs, "generated"), &n_ref);
        seq_kv a, b;
        seq_kv_init(m, &a, n_prompt + 9);
        seq_kv_init_typed(m, &b, n_prompt + 9, TR_KV_Q4);
        run(m, &a, prompt, n_prompt, 0, 512, lf);
        run(m, &b, prompt, n_prompt, 0, 512, lq);
        for (int k = 0; k <= 8 && k <= n_ref; k++) {
            for (int32_t i = 0; i < vocab; i++) err += ((double)lq[i] - lf[i]) * (lq[i] - lf[i]);
            if (k == 8 || k == n_ref) break;
            run(m, &a, &want[k], 1, n_prompt + k, 1, lf);
            run(m, &b, &want[k], 1, n_prompt + k, 1, lq);
        }
        seq_kv_free(m, &a);
        seq_kv_free(m, &b);
        free(prompt);
        free(want);
    }
    free(lf);
    free(lq);
    return err;
}

/* Q4 keys calibrated (runtime/model/kv_center.c): F16 KV is untouched
 * (bitwise), the page fingerprint changes, and Q4's logits come closer to
 * F16's. The calibration tokens here are the reference prompts (the engine
 * runs its own fixed text). */
static void test_q4_keys_calibrated(void **state) {
    fixture *f = *state;
    model *m;
    tr_diag d = {0};
    assert_int_equal(tr_model_load(f->file, f->be, 512, &m, &d), TR_OK);
    const int32_t vocab = tr_model_get_hparams(m)->n_vocab;
    jl_value *cases = jl_get(f->ref, "cases");
    size_t n_cases = small_scale() ? 2 : 6;
    int32_t calib[512], n_calib = 0;
    for (size_t c = 0; c < jl_len(cases) && n_calib < 256; c++) {
        int32_t n;
        int32_t *ids = json_ids(jl_get(jl_at(cases, c), "prompt_ids"), &n);
        for (int32_t i = 0; i < n && n_calib < 256; i++) calib[n_calib++] = ids[i];
        free(ids);
    }
    int32_t n_prompt;
    int32_t *prompt = json_ids(jl_get(jl_at(cases, 0), "prompt_ids"), &n_prompt);
    float *before = malloc(sizeof(float) * (size_t)vocab),
          *after = malloc(sizeof(float) * (size_t)vocab);
    seq_kv s;
    seq_kv_init(m, &s, n_prompt);
    run(m, &s, prompt, n_prompt, 0, 512, before);
    double plain = q4_logit_error(m, cases, n_cases, vocab);

    assert_int_equal(tr_model_kv_fingerprint(m), 0);
    int32_t bad = vocab;
    assert_int_equal(tr_model_calibrate_q4_keys(m, &bad, 1, &d), TR_ERR_INVALID_ARG);
    assert_non_null(strstr(d.message, "vocabulary"));
    assert_int_equal(tr_model_kv_fingerprint(m), 0);
    assert_int_equal(tr_model_calibrate_q4_keys(m, calib, n_calib, &d), TR_OK);
    uint64_t fp = tr_model_kv_fingerprint(m);
    assert_true(fp != 0);
    assert_int_equal(tr_model_calibrate_q4_keys(m, calib, 8, &d), TR_OK); /* once */
    assert_true(tr_model_kv_fingerprint(m) == fp);

    run(m, &s, prompt, n_prompt, 0, 512, after);
    assert_memory_equal(before, after, sizeof(float) * (size_t)vocab);
    double calibrated = q4_logit_error(m, cases, n_cases, vocab);
    printf("q4 KV logits vs f16 KV, squared error over %zu prompts: %.4g plain, %.4g "
           "calibrated (%.2fx)\n", n_cases, plain, calibrated, calibrated / plain);
    assert_true(calibrated < CALIBRATED_Q4_ERROR_SHARE * plain);
    seq_kv_free(m, &s);
    free(prompt);
    free(before);
    free(after);
    tr_model_free(m);
}

/* A malformed batch is an error, never a read outside the pages. */
static void test_bad_batch_rejected(void **state) {
    fixture *f = *state;
    seq_kv s;
    seq_kv_init(f->m, &s, 16);
    const int32_t *tables[1] = {s.table};
    int32_t pos[1] = {16}, seq[1] = {0}, tok[1] = {1}, row = 0;
    float *out = malloc(sizeof(float) * (size_t)tr_model_get_hparams(f->m)->n_vocab);
    tr_batch b = {.n_tokens = 1, .pos = pos, .seq = seq, .n_seqs = 1,
                  .page_table = tables, .n_pages = &s.n_pages};
    assert_int_equal(tr_model_forward(f->m, &s.kv, &b, tok, &row, 1, out), TR_ERR_INVALID_ARG);
    pos[0] = 0;
    tok[0] = -1;
    assert_int_equal(tr_model_forward(f->m, &s.kv, &b, tok, &row, 1, out), TR_ERR_INVALID_ARG);
    tok[0] = 1 << 30;
    assert_int_equal(tr_model_forward(f->m, &s.kv, &b, tok, &row, 1, out), TR_ERR_INVALID_ARG);
    tok[0] = 1;
    seq[0] = 3;
    assert_int_equal(tr_model_forward(f->m, &s.kv, &b, tok, &row, 1, out), TR_ERR_INVALID_ARG);
    seq[0] = 0;
    row = 5;
    assert_int_equal(tr_model_forward(f->m, &s.kv, &b, tok, &row, 1, out), TR_ERR_INVALID_ARG);
    b.n_tokens = 513;
    row = 0;
    assert_int_equal(tr_model_forward(f->m, &s.kv, &b, tok, &row, 1, out), TR_ERR_INVALID_ARG);
    free(out);
    seq_kv_free(f->m, &s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_batch_rejected),
        cmocka_unit_test(test_chunking_is_bit_identical),
        cmocka_unit_test(test_batch_invariance),
        cmocka_unit_test(test_masked_logits),
        cmocka_unit_test(test_parity_with_llama_cpp),
        cmocka_unit_test(test_quantized_kv_agreement),
        cmocka_unit_test(test_q4_keys_calibrated),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
