/* test_fault_kv.c — the CPU attention's fallback when it cannot have the
 * scratch for prepared queries.
 *
 * With K stored rotated (Q8 and Q4 KV, backend.h tr_kv_rotation), the
 * attention op rotates the queries once into a scratch buffer, and for Q8
 * keys quantizes them there too (tr_cpu_kv_quantize_query); when that
 * buffer cannot be allocated it does the same per block instead
 * (kernels/cpu/ops_kv.c, attn_queries), which must give the same bits. This
 * binary is linked with -Wl,--wrap=malloc,... (tests/CMakeLists.txt,
 * test_fault_*), and fails exactly the allocation of that buffer (the
 * only request of its size in the op): a fresh backend runs the op with
 * the failure (the fallback), then again without it (the scratch), and
 * the outputs must be equal byte for byte, for decode rows (the split
 * schedule) and a prefill chunk (the tile schedule), on every kernel set
 * this CPU has. The failure is counted, so the test cannot pass without
 * taking the fallback.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/unit/harness.h"

#include "kernels/backend.h"

/* ---- the allocator: fails requests of one size while armed ---- */

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t n);
void __real_free(void *p);
int __real_posix_memalign(void **p, size_t align, size_t n);
char *__real_strdup(const char *s);
char *__real_strndup(const char *s, size_t n);

static _Atomic size_t g_fail_size;  /* 0: fail nothing */
static _Atomic int64_t g_failed;

void *__wrap_malloc(size_t n) { return __real_malloc(n); }
void *__wrap_calloc(size_t n, size_t size) { return __real_calloc(n, size); }
void *__wrap_realloc(void *p, size_t n) { return __real_realloc(p, n); }
void __wrap_free(void *p) { __real_free(p); }
char *__wrap_strdup(const char *s) { return __real_strdup(s); }
char *__wrap_strndup(const char *s, size_t n) { return __real_strndup(s, n); }
int __wrap_posix_memalign(void **p, size_t align, size_t n) {
    if (n && n == atomic_load(&g_fail_size)) {
        atomic_fetch_add(&g_failed, 1);
        return 12; /* ENOMEM */
    }
    return __real_posix_memalign(p, align, n);
}

/* ---- a paged KV world: two sequences, one layer ---- */

enum { N_HEADS = 9, N_KV = 3, HD = 64, PAGE = 16, LEN0 = 300, LEN1 = 40 };
enum { PAGES0 = (LEN0 + PAGE - 1) / PAGE, PAGES1 = (LEN1 + PAGE - 1) / PAGE };
/* attention batch: sequence 0 decodes at LEN0 - 1, sequence 1 prefills
 * positions 30..39 (adjacent: a tile) */
enum { N_Q = 1 + 10 };

static float frand(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((*s >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}

/* Runs kv_store of every position then attention of the N_Q rows on a
 * fresh backend of kernel set `kernels`; fail_size (0: none) is armed
 * around the attention op. Returns the output (malloc'd), or NULL when
 * the kernel set is not available here. */
static float *run(const char *kernels, tr_kv_type kt, size_t fail_size) {
    tr_backend *be = NULL;
    tr_backend_config cfg = {.threads = 2, .kernels = kernels};
    tr_diag d = {0};
    if (tr_backend_new("cpu", &cfg, &be, &d) != TR_OK) return NULL;
    tr_kv_layout kv = {NULL, PAGES0 + PAGES1, 1, PAGE, N_KV, HD, kt, TR_KV_F16, NULL, 0, NULL};
    void *mem = NULL;
    assert_int_equal(be->ops->alloc(be, (size_t)kv.n_pages * tr_kv_page_bytes(&kv), &mem), TR_OK);
    kv.base = mem;
    int32_t t0[PAGES0], t1[PAGES1];
    for (int i = 0; i < PAGES0; i++) t0[i] = i;
    for (int i = 0; i < PAGES1; i++) t1[i] = PAGES0 + i;
    const int32_t *tables[2] = {t0, t1};
    int32_t npages[2] = {PAGES0, PAGES1};
    /* every position's K and V */
    int32_t n_all = LEN0 + LEN1, *pos = malloc(sizeof(int32_t) * (size_t)n_all),
            *seq = malloc(sizeof(int32_t) * (size_t)n_all);
    size_t kvd = (size_t)N_KV * HD;
    float *k = malloc(sizeof(float) * kvd * (size_t)n_all),
          *v = malloc(sizeof(float) * kvd * (size_t)n_all);
    uint64_t s = 7;
    for (int32_t i = 0; i < n_all; i++) {
        pos[i] = i < LEN0 ? i : i - LEN0;
        seq[i] = i < LEN0 ? 0 : 1;
    }
    for (size_t i = 0; i < kvd * (size_t)n_all; i++) k[i] = frand(&s), v[i] = frand(&s);
    k[5] = 9.0f; /* an outlier channel: what the rotation is for */
    tr_batch all = {n_all, pos, seq, 2, tables, npages};
    tr_stream *st = tr_backend_stream(be);
    be->ops->kv_store(st, &kv, 0, k, v, &all);
    /* the attention rows */
    int32_t qpos[N_Q] = {LEN0 - 1}, qseq[N_Q] = {0};
    for (int i = 1; i < N_Q; i++) qpos[i] = 29 + i, qseq[i] = 1;
    size_t row = (size_t)N_HEADS * HD;
    float *q = malloc(sizeof(float) * row * N_Q), *out = malloc(sizeof(float) * row * N_Q);
    for (size_t i = 0; i < row * N_Q; i++) q[i] = frand(&s);
    tr_batch b = {N_Q, qpos, qseq, 2, tables, npages};
    atomic_store(&g_fail_size, fail_size);
    be->ops->attention(st, out, q, &kv, 0, &b, N_HEADS, 0.125f);
    atomic_store(&g_fail_size, 0);
    assert_int_equal(be->ops->synchronize(be), TR_OK);
    be->ops->free(be, mem);
    tr_backend_free(be);
    free(pos), free(seq), free(k), free(v), free(q);
    return out;
}

static void test_rotation_fallback_same_bits(void **state) {
    (void)state;
    static const char *const sets[] = {"portable", "avx2", "avx512vnni"};
    /* the scratch asks for exactly the prepared queries' bytes first:
     * rotated (Q4 keys), or rotated and quantized, levels (64-byte
     * aligned, 2 bytes each) then one step per head (Q8 keys) */
    const size_t heads = (size_t)N_HEADS * N_Q;
    const size_t q_bytes[2] = {((heads * HD * 2 + 63) & ~(size_t)63) + sizeof(float) * heads,
                               sizeof(float) * heads * HD};
    int ran = 0;
    for (size_t si = 0; si < sizeof sets / sizeof sets[0]; si++)
        for (int ti = 0; ti < 2; ti++) {
            tr_kv_type kt = ti ? TR_KV_Q4 : TR_KV_Q8;
            int64_t before = atomic_load(&g_failed);
            float *fallback = run(sets[si], kt, q_bytes[ti]);
            if (!fallback) continue; /* that kernel set is not on this CPU */
            assert_true(atomic_load(&g_failed) > before); /* the fallback ran */
            float *normal = run(sets[si], kt, 0);
            assert_non_null(normal);
            size_t n = (size_t)N_HEADS * HD * N_Q;
            for (size_t i = 0; i < n; i++)
                if (!isfinite(normal[i])) fail_msg("%s: output %zu is %g", sets[si], i, normal[i]);
            if (memcmp(fallback, normal, n * sizeof(float)))
                fail_msg("%s, K %s: queries prepared per block differ from the op's", sets[si],
                         tr_kv_type_name(kt));
            free(fallback);
            free(normal);
            ran++;
        }
    assert_true(ran >= 2); /* portable, at least */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rotation_fallback_same_bits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
