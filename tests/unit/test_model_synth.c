/* test_model_synth.c — the qwen2 and qwen3 families against llama.cpp on
 * random-weight GGUFs (no real Qwen weights are available here): the files
 * of scripts/ref/synth_models.py, rebuilt in memory byte for byte by
 * synth_gguf.h (their digest must equal the one the reference recorded),
 * and tests/data/model/{qwen2,qwen3}_synth_ref.json with their logits,
 * made by scripts/ref/make_family_ref.py (command there).
 *
 * Checks (model_ref.h): first-step logits within tolerance of llama.cpp's
 * and no further from float64 than llama.cpp's; teacher-forced greedy
 * agreement with every mismatch at a near-tie; chunked prefill, one thread
 * and batch invariance bit-identical. No file needed: always runs.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/unit/harness.h"

#include "tests/unit/model_ref.h"
#include "tests/unit/synth_gguf.h"

/* Tolerances, measured (the printed figures): both engines quantize
 * activations to 8 bits before the integer dots and sum in other orders,
 * so the logits (std ~4 by construction) differ by rounding noise through
 * 3 layers: worst element 0.56, RMS 0.12 (qwen2; qwen3 0.41 / 0.10), and
 * each engine is as far from float64 arithmetic as the other (mean RMS
 * 0.106 vs 0.102; 0.084 vs 0.084). Teacher-forced greedy: qwen2 9 of 256
 * steps differ (3.5%), qwen3 3, all at top-2 gaps below 0.3: random
 * weights are less decisive than trained ones (synth_models.py). */
static const mref_limits k_limits = {
    .max_abs = 0.75, .rms = 0.16, .near_tie = 0.60, .exact_slack = 1.15,
    .max_mismatch_pct = 5};

typedef struct fixture {
    uint8_t *mem;
    gguf_file *file;
    tr_backend *be, *be1;
    model *m, *m1;
    mref ref;
} fixture;

static void open_arch(fixture *f, int a) {
    const synth_arch *arch = &k_synth_archs[a];
    char name[64];
    snprintf(name, sizeof name, "%s_synth_ref.json", arch->name);
    mref_load(&f->ref, name);
    size_t len;
    uint64_t digest;
    f->mem = synth_gguf(arch, f->ref.n_vocab, &len, &digest);
    char hex[32];
    snprintf(hex, sizeof hex, "%016llx", (unsigned long long)digest);
    const char *want = jl_str(jl_get(f->ref.root, "digest"));
    if (!want || strcmp(hex, want) != 0)
        fail_msg("%s: rebuilt tensors' digest %s, reference %s (synth_gguf.h and "
                 "synth_models.py disagree)",
                 arch->name, hex, want ? want : "(none)");
    tr_diag d = {0};
    assert_int_equal(tr_gguf_open_memory(f->mem, len, &f->file, &d), TR_OK);
    assert_int_equal(tr_backend_new("cpu", &(tr_backend_config){.threads = 2}, &f->be, NULL), TR_OK);
    assert_int_equal(tr_backend_new("cpu", &(tr_backend_config){.threads = 1}, &f->be1, NULL), TR_OK);
    if (tr_model_load(f->file, f->be, 512, &f->m, &d) ||
        tr_model_load(f->file, f->be1, 512, &f->m1, &d))
        fail_msg("load: %s", d.message);
    assert_string_equal(tr_model_get_hparams(f->m)->arch, arch->name);
}

static void close_arch(fixture *f) {
    tr_model_free(f->m);
    tr_model_free(f->m1);
    tr_backend_free(f->be);
    tr_backend_free(f->be1);
    tr_gguf_close(f->file);
    free(f->mem);
    mref_free(&f->ref);
}

static void run_arch(int a) {
    fixture f;
    open_arch(&f, a);
    printf("%s:\n", k_synth_archs[a].name);
    bool small = small_scale();
    mref_parity(f.m, &f.ref, &k_limits, small ? 1 : f.ref.n_cases, small ? 8 : f.ref.n_gen);
    const int32_t chunks[] = {1, 5, 16, 37};
    mref_chunking(f.m, f.m1, &f.ref.c[0], chunks + small, TR_ARRAY_LEN(chunks) - small);
    mref_batch_invariance(f.m, &f.ref.c[1], &f.ref.c[0]);
    close_arch(&f);
}

static void test_qwen2(void **state) {
    (void)state;
    run_arch(0);
}

static void test_qwen3(void **state) {
    (void)state;
    run_arch(1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_qwen2),
        cmocka_unit_test(test_qwen3),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
