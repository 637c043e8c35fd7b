/* test_cuda_open.c — opening the CUDA backend (kernels/cuda/cuda.h): on a
 * machine without a usable GPU, every way of asking for it fails with the
 * status cuda.h promises and a message naming the reason (no driver, a
 * driver too old, no device), never a crash; on a machine with one, it
 * opens, says what it runs on, has every required op, and refuses a
 * device index out of range. Both paths check the registry's "cuda:N"
 * spelling. What this test checked is printed: "no GPU: the error path"
 * or "GPU: opened ...".
 *
 * SKIPPED (77) in a build without the CUDA backend (no toolkit, or
 * TRELLIS_CUDA=OFF). The ops themselves: test_backend_ops[cuda].
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/unit/harness.h"

#include "kernels/backend.h"
#if defined(TRELLIS_HAVE_CUDA)
#include "kernels/cuda/cuda.h"
#endif

#if defined(TRELLIS_HAVE_CUDA)

/* The reasons cuda.h names when no device can be opened. */
static int names_a_reason(const char *msg) {
    return strstr(msg, "no CUDA driver found") || strstr(msg, "older than the runtime") ||
           strstr(msg, "no CUDA device found") || strstr(msg, "CUDA runtime cannot start");
}

static void test_open(void **state) {
    (void)state;
    const tr_backend_reg *r = tr_backend_reg_find("cuda");
    assert_non_null(r);
    assert_string_equal(r->kernel_sets[0], "sm_80");
    char why[256] = "";
    tr_backend *be = NULL;
    tr_diag d = {0};
    if (!r->available(why, sizeof why)) {
        printf("no GPU: the error path: %s\n", why);
        assert_true(names_a_reason(why));
        /* through the registry */
        assert_int_equal(tr_backend_new("cuda", NULL, &be, &d), TR_ERR_UNSUPPORTED);
        assert_null(be);
        assert_non_null(strstr(d.message, "backend 'cuda' is not available"));
        assert_true(names_a_reason(d.message));
        assert_non_null(strstr(d.message, "(available: cpu)"));
        memset(&d, 0, sizeof d);
        assert_int_equal(tr_backend_new("cuda:1", NULL, &be, &d), TR_ERR_UNSUPPORTED);
        assert_true(names_a_reason(d.message));
        /* directly: the same reason, prefixed "cuda: " */
        memset(&d, 0, sizeof d);
        assert_int_equal(tr_backend_cuda_new(NULL, &be, &d), TR_ERR_UNSUPPORTED);
        assert_null(be);
        assert_true(strncmp(d.message, "cuda: ", 6) == 0);
        assert_true(names_a_reason(d.message));
        assert_false(r->kernels_available("sm_80", why, sizeof why));
        assert_true(names_a_reason(why));
    } else {
        assert_int_equal(tr_backend_new("cuda", NULL, &be, &d), TR_OK);
        tr_backend_info info = tr_backend_get_info(be);
        printf("GPU: opened %s (%s)\n", info.device, info.kernels);
        assert_string_equal(info.name, "cuda");
        assert_false(info.host_memory);
        assert_true(info.async);
        assert_true(info.memory_total > 0);
        const char *missing = tr_backend_missing_op(be);
        if (missing) fail_msg("the cuda backend lacks the required op '%s'", missing);
        assert_true(be->ops->supports(be, TR_BACKEND_CAP_WEIGHT, TR_DTYPE_Q4_1));
        assert_true(be->ops->supports(be, TR_BACKEND_CAP_WEIGHT, TR_DTYPE_Q8_0));
        /* Gemma 3 Q4_K_M's K-quants; Q2_K: neither backend computes it */
        assert_true(be->ops->supports(be, TR_BACKEND_CAP_WEIGHT, TR_DTYPE_Q4_K));
        assert_true(be->ops->supports(be, TR_BACKEND_CAP_WEIGHT, TR_DTYPE_Q5_K));
        assert_true(be->ops->supports(be, TR_BACKEND_CAP_WEIGHT, TR_DTYPE_Q6_K));
        assert_false(be->ops->supports(be, TR_BACKEND_CAP_WEIGHT, TR_DTYPE_Q2_K));
        assert_true(be->ops->supports_kv(be, TR_KV_F16, TR_KV_F16));
        tr_backend_free(be);
        be = NULL;
        assert_int_equal(tr_backend_new("cuda:0", NULL, &be, &d), TR_OK);
        assert_int_equal(tr_backend_get_info(be).device_index, 0);
        tr_backend_free(be);
        be = NULL;
        memset(&d, 0, sizeof d);
        assert_int_equal(tr_backend_new("cuda:9999", NULL, &be, &d), TR_ERR_INVALID_ARG);
        assert_null(be);
        assert_non_null(strstr(d.message, "device 9999 out of range"));
    }
    /* spelled wrong, on any machine */
    memset(&d, 0, sizeof d);
    assert_int_equal(tr_backend_new("cuda:x", NULL, &be, &d), TR_ERR_INVALID_ARG);
    assert_non_null(strstr(d.message, "NAME:DEVICE"));
    assert_int_equal(tr_backend_new("cuda:", NULL, &be, &d), TR_ERR_INVALID_ARG);
    assert_int_equal(tr_backend_new("cuda:-1", NULL, &be, &d), TR_ERR_INVALID_ARG);
    assert_null(be);
    /* an unknown kernel set is named, GPU or not */
    memset(&d, 0, sizeof d);
    tr_backend_config cfg = {.kernels = "sm_70"};
    assert_int_equal(tr_backend_cuda_new(&cfg, &be, &d), TR_ERR_NOT_FOUND);
    assert_non_null(strstr(d.message, "'sm_70'"));
    assert_false(r->kernels_available("sm_70", why, sizeof why));
    assert_null(be);
    /* the environment's knobs, GPU or not: a bad value is named */
    const char *bad[][2] = {{"TRELLIS_CUDA_MMA_MIN", "-1"},    {"TRELLIS_CUDA_MMA_MIN", "8x"},
                            {"TRELLIS_CUDA_MMA_MIN", ""},      {"TRELLIS_CUDA_ATTN_CHUNK", "0"},
                            {"TRELLIS_CUDA_ATTN_CHUNK", "1e3"}, {"TRELLIS_CUDA_ATTN_CHUNK", "99999999"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        setenv(bad[i][0], bad[i][1], 1);
        memset(&d, 0, sizeof d);
        assert_int_equal(tr_backend_cuda_new(NULL, &be, &d), TR_ERR_INVALID_ARG);
        assert_null(be);
        assert_non_null(strstr(d.message, bad[i][0]));
        assert_non_null(strstr(d.message, "expected a whole number"));
        unsetenv(bad[i][0]);
    }
    if (r->available(why, sizeof why)) { /* good values open */
        setenv("TRELLIS_CUDA_MMA_MIN", "0", 1);
        setenv("TRELLIS_CUDA_ATTN_CHUNK", "32", 1);
        assert_int_equal(tr_backend_cuda_new(NULL, &be, &d), TR_OK);
        tr_backend_free(be);
        be = NULL;
        unsetenv("TRELLIS_CUDA_MMA_MIN");
        unsetenv("TRELLIS_CUDA_ATTN_CHUNK");
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_open)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}

#else

int main(void) {
    tr_test_skip_all("built without the CUDA backend (no CUDA toolkit, or TRELLIS_CUDA=OFF)");
    return 0;
}

#endif
