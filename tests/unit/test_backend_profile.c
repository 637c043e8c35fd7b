/* test_backend_profile.c — kernels/profile.h: the timing backend forwards
 * every call to the backend it wraps (results bitwise those of the plain
 * backend; streams, events and memory work through it), counts each op
 * under its key (matmuls by shape), resets, and sends keys past the limit
 * to "other". */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/unit/harness.h"

#include "kernels/backend.h"
#include "kernels/profile.h"

static const tr_profile_entry *find(const tr_profile_entry *e, int n, const char *key) {
    for (int i = 0; i < n; i++)
        if (strcmp(e[i].key, key) == 0) return &e[i];
    return NULL;
}

/* rmsnorm + an F32 matmul on be; returns the outputs in out[0..2*dim). */
static void run_ops(tr_backend *be, float *out, int rows) {
    const int dim = 64;
    float x[64], w[64], *wm = malloc(sizeof(float) * (size_t)rows * dim);
    for (int i = 0; i < dim; i++) {
        x[i] = (float)(i % 7) - 3.0f;
        w[i] = 1.0f + (float)i / 64;
    }
    for (int i = 0; i < rows * dim; i++) wm[i] = (float)((i * 37) % 11) / 11 - 0.5f;
    tr_stream *st = tr_backend_stream(be);
    be->ops->rmsnorm(st, out, x, w, 1, dim, 1e-6f);
    tr_weight W = {.data = wm, .type = TR_DTYPE_F32, .rows = rows, .cols = dim};
    const tr_weight *ws[1] = {&W};
    float *o[1] = {out + dim};
    be->ops->matmul(st, 1, o, ws, out, 1, false);
    assert_int_equal(be->ops->stream_synchronize(st), TR_OK);
    free(wm);
}

static void test_forwards_and_counts(void **state) {
    (void)state;
    tr_backend *plain, *inner, *p;
    tr_diag d = {0};
    tr_backend_config cfg = {.threads = 2};
    assert_int_equal(tr_backend_new("cpu", &cfg, &plain, &d), TR_OK);
    assert_int_equal(tr_backend_new("cpu", &cfg, &inner, &d), TR_OK);
    assert_int_equal(tr_backend_profile_new(inner, &p), TR_OK);
    float a[128], b[128];
    run_ops(plain, a, 64);
    run_ops(p, b, 64);
    assert_memory_equal(a, b, sizeof a); /* bitwise what the plain backend gives */
    run_ops(p, b, 64);
    tr_profile_entry e[TR_PROFILE_MAX_KEYS + 1];
    int n = tr_backend_profile_get(p, e, TR_PROFILE_MAX_KEYS + 1);
    assert_int_equal(n, 2);
    const tr_profile_entry *rn = find(e, n, "rmsnorm"), *mm = find(e, n, "matmul 1x64 -> 64");
    assert_non_null(rn);
    assert_non_null(mm);
    assert_int_equal(rn->calls, 2);
    assert_int_equal(mm->calls, 2);
    assert_true(mm->ns > 0);
    /* the info, memory, streams and events of the inner backend */
    tr_backend_info i1 = tr_backend_get_info(p), i2 = tr_backend_get_info(plain);
    assert_string_equal(i1.name, i2.name);
    void *mem = NULL;
    assert_int_equal(p->ops->alloc(p, 256, &mem), TR_OK);
    tr_stream *s2;
    tr_event *ev;
    assert_int_equal(p->ops->stream_new(p, &s2), TR_OK);
    assert_int_equal(p->ops->event_new(p, &ev), TR_OK);
    assert_int_equal(p->ops->upload(s2, mem, a, sizeof a < 256 ? sizeof a : 256), TR_OK);
    assert_int_equal(p->ops->event_record(ev, s2), TR_OK);
    assert_int_equal(p->ops->stream_wait(tr_backend_stream(p), ev), TR_OK);
    assert_int_equal(p->ops->event_synchronize(ev), TR_OK);
    assert_memory_equal(mem, a, 256);
    /* an event of another backend is refused, as the plain backend does */
    tr_event *foreign;
    assert_int_equal(plain->ops->event_new(plain, &foreign), TR_OK);
    assert_int_equal(p->ops->stream_wait(s2, foreign), TR_ERR_INVALID_ARG);
    plain->ops->event_free(foreign);
    p->ops->event_free(ev);
    if (p->ops->stream_free) p->ops->stream_free(s2);
    p->ops->free(p, mem);
    /* reset keeps the keys with zero counts */
    tr_backend_profile_reset(p);
    n = tr_backend_profile_get(p, e, TR_PROFILE_MAX_KEYS + 1);
    assert_int_equal(n, 2);
    assert_int_equal(e[0].calls + e[1].calls, 0);
    tr_backend_free(p); /* frees inner too */
    tr_backend_free(plain);
}

/* More matmul shapes than keys: the rest are counted as "other". */
static void test_key_limit(void **state) {
    (void)state;
    tr_backend *inner, *p;
    tr_diag d = {0};
    tr_backend_config cfg = {.threads = 1};
    assert_int_equal(tr_backend_new("cpu", &cfg, &inner, &d), TR_OK);
    assert_int_equal(tr_backend_profile_new(inner, &p), TR_OK);
    float out[128 + 64];
    for (int r = 1; r <= TR_PROFILE_MAX_KEYS + 5; r++) run_ops(p, out, r);
    tr_profile_entry e[TR_PROFILE_MAX_KEYS + 1];
    int n = tr_backend_profile_get(p, e, TR_PROFILE_MAX_KEYS + 1);
    assert_int_equal(n, TR_PROFILE_MAX_KEYS + 1);
    const tr_profile_entry *other = find(e, n, "other");
    assert_non_null(other);
    /* rmsnorm took one key, matmul shapes 1..47 the others, 48.. are other */
    assert_int_equal(other->calls, TR_PROFILE_MAX_KEYS + 5 - (TR_PROFILE_MAX_KEYS - 1));
    assert_int_equal(find(e, n, "rmsnorm")->calls, TR_PROFILE_MAX_KEYS + 5);
    tr_backend_free(p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_forwards_and_counts),
        cmocka_unit_test(test_key_limit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
