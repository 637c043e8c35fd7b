/* test_engine_options.c — the engine's table of option defaults and
 * bounds (runtime/engine/options.c): trellis_engine_options_default,
 * tr_engine_options_resolve (what trellis_engine_new and
 * tr_engine_new_custom apply), trellis_engine_new refusing bad options
 * with a message naming the option before it opens any file, the public
 * descriptors of the table (trellis_engine_option_at/_find, what the
 * command-line flags take their bounds from), and trellis_version().
 * Needs no model.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "runtime/engine/engine_internal.h"

/* Field by field (struct copies need not copy padding). */
static void same_opts(const trellis_engine_options *a, const trellis_engine_options *b) {
    assert_int_equal(a->threads, b->threads);
    assert_int_equal(a->max_batch_tokens, b->max_batch_tokens);
    assert_int_equal(a->max_running, b->max_running);
    assert_int_equal(a->chunk_size, b->chunk_size);
    assert_int_equal(a->page_size, b->page_size);
    assert_int_equal(a->kv_pages, b->kv_pages);
    assert_int_equal(a->kv_mb, b->kv_mb);
    assert_int_equal(a->ctx, b->ctx);
    assert_int_equal(a->lpm_max_waiting, b->lpm_max_waiting);
    assert_int_equal(a->no_radix, b->no_radix);
    assert_int_equal(a->no_overlap, b->no_overlap);
    assert_int_equal(a->grammar_cache_mb, b->grammar_cache_mb);
    assert_int_equal(a->load, b->load);
    assert_ptr_equal(a->device, b->device);
    assert_ptr_equal(a->wake, b->wake);
    assert_ptr_equal(a->wake_user, b->wake_user);
}

static void test_defaults(void **state) {
    (void)state;
    trellis_engine_options o, r;
    trellis_engine_options_default(&o);
    assert_int_equal(o.threads, 0);
    assert_int_equal(o.max_batch_tokens, 512);
    assert_int_equal(o.max_running, 64);
    assert_int_equal(o.chunk_size, 256);
    assert_int_equal(o.page_size, 16);
    assert_int_equal(o.kv_pages, 0);
    assert_int_equal(o.kv_mb, 512);
    assert_int_equal(o.ctx, 0);
    assert_int_equal(o.lpm_max_waiting, 128);
    assert_int_equal(o.grammar_cache_mb, 256);
    assert_int_equal(o.load, TRELLIS_LOAD_AUTO);
    assert_false(o.no_radix);
    assert_false(o.no_overlap);
    assert_null(o.wake);
    assert_null(o.device); /* the default backend */
    /* resolving the defaults, or NULL, changes nothing */
    assert_int_equal(tr_engine_options_resolve(&o, &r, NULL, 0), TR_OK);
    same_opts(&o, &r);
    memset(&r, 0x55, sizeof r);
    assert_int_equal(tr_engine_options_resolve(NULL, &r, NULL, 0), TR_OK);
    same_opts(&o, &r);
    /* a zeroed struct (an embedder who did not call _default) resolves to
     * the defaults too, but for lpm_max_waiting, whose 0 means something
     * (always arrival order) */
    trellis_engine_options z;
    memset(&z, 0, sizeof z);
    assert_int_equal(tr_engine_options_resolve(&z, &r, NULL, 0), TR_OK);
    assert_int_equal(r.lpm_max_waiting, 0);
    r.lpm_max_waiting = o.lpm_max_waiting;
    same_opts(&o, &r);
}

static void test_unset_and_kept(void **state) {
    (void)state;
    trellis_engine_options o, r;
    trellis_engine_options_default(&o);
    o.max_batch_tokens = -3; /* unset: the default */
    o.chunk_size = 0;
    o.lpm_max_waiting = -7;  /* negative: 0 (always arrival order) */
    o.grammar_cache_mb = -1;
    o.max_running = 3;       /* kept */
    o.kv_pages = 99;
    o.ctx = 1000;
    o.load = TRELLIS_LOAD_READ;
    o.no_radix = true;
    assert_int_equal(tr_engine_options_resolve(&o, &r, NULL, 0), TR_OK);
    assert_int_equal(r.max_batch_tokens, 512);
    assert_int_equal(r.chunk_size, 256);
    assert_int_equal(r.lpm_max_waiting, 0);
    assert_int_equal(r.grammar_cache_mb, 256);
    assert_int_equal(r.max_running, 3);
    assert_int_equal(r.kv_pages, 99);
    assert_int_equal(r.ctx, 1000);
    assert_int_equal(r.load, TRELLIS_LOAD_READ);
    assert_true(r.no_radix);
}

static void expect_bad(void (*set)(trellis_engine_options *), const char *frag) {
    trellis_engine_options o, r;
    trellis_engine_options_default(&o);
    set(&o);
    memset(&r, 0x33, sizeof r);
    trellis_engine_options before = r;
    char err[256] = "";
    assert_int_equal(tr_engine_options_resolve(&o, &r, err, sizeof err),
                     TR_ERR_INVALID_ARG);
    if (!strstr(err, frag)) fprintf(stderr, "message: %s\n", err);
    assert_non_null(strstr(err, frag));
    assert_memory_equal(&r, &before, sizeof r); /* untouched: no copy at all */
    /* trellis_engine_new says the same, before opening anything */
    trellis_engine *e = NULL;
    char err2[256] = "";
    assert_int_equal(trellis_engine_new("/nonexistent/model.gguf", &o, &e, err2,
                                        sizeof err2),
                     TRELLIS_ERR_INVALID_ARG);
    assert_null(e);
    assert_string_equal(err, err2);
}

static void big_page(trellis_engine_options *o) { o->page_size = 5000; }
static void big_batch(trellis_engine_options *o) { o->max_batch_tokens = 65537; }
static void neg_pages(trellis_engine_options *o) { o->kv_pages = -1; }
static void neg_ctx(trellis_engine_options *o) { o->ctx = -2; }
static void bad_load(trellis_engine_options *o) { o->load = 3; }
static void many_threads(trellis_engine_options *o) { o->threads = TRELLIS_MAX_THREADS + 1; }

static void test_out_of_range(void **state) {
    (void)state;
    expect_bad(big_page, "options.page_size is 5000, expected 1..4096");
    expect_bad(big_batch, "options.max_batch_tokens is 65537, expected 1..65536");
    expect_bad(neg_pages, "options.kv_pages is -1, expected 0..");
    expect_bad(neg_pages, "(0 = from kv_mb)");
    expect_bad(neg_ctx, "options.ctx is -2");
    expect_bad(bad_load, "options.load is 3, expected 0..2 (a TRELLIS_LOAD_* mode)");
    /* the public bound, not a local one */
    char frag[96];
    snprintf(frag, sizeof frag, "options.threads is %d, expected 0..%d", TRELLIS_MAX_THREADS + 1,
             TRELLIS_MAX_THREADS);
    expect_bad(many_threads, frag);
}

/* TRELLIS_MAX_THREADS itself is accepted and kept. */
static void test_threads_bound(void **state) {
    (void)state;
    trellis_engine_options o, r;
    trellis_engine_options_default(&o);
    o.threads = TRELLIS_MAX_THREADS;
    assert_int_equal(tr_engine_options_resolve(&o, &r, NULL, 0), TR_OK);
    assert_int_equal(r.threads, TRELLIS_MAX_THREADS);
}

/* The member named by the option table (the public descriptors name the
 * members); NULL for a name this test does not know, which fails it: a
 * new option needs a line here. */
static int32_t *member(trellis_engine_options *o, const char *name) {
    static const struct {
        const char *name;
        size_t off;
    } k[] = {
#define M(f) {#f, offsetof(trellis_engine_options, f)}
        M(threads), M(max_batch_tokens), M(max_running), M(chunk_size), M(page_size),
        M(kv_pages), M(kv_mb), M(ctx), M(lpm_max_waiting), M(grammar_cache_mb), M(load),
        M(spec_ngram), M(kv_type_k), M(kv_type_v), M(kv_cache_disk_mb), M(spec_draft),
#undef M
    };
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++)
        if (strcmp(k[i].name, name) == 0) return (int32_t *)((char *)o + k[i].off);
    return NULL;
}

/* trellis_engine_option_at/_find describe the table the engine applies:
 * every default is what _default sets, min and max are accepted and kept,
 * max + 1 is refused with the bounds in the message. */
static void test_descriptors(void **state) {
    (void)state;
    trellis_engine_options def;
    trellis_engine_options_default(&def);
    int32_t n = 0;
    for (const trellis_engine_option_desc *d; (d = trellis_engine_option_at(n)); n++) {
        assert_ptr_equal(trellis_engine_option_find(d->name), d);
        assert_non_null(d->note);
        assert_true(d->min <= d->def && d->def <= d->max);
        int32_t *m = member(&def, d->name);
        if (!m) fail_msg("option '%s' unknown to this test", d->name);
        assert_int_equal(*m, d->def);
        int32_t edge[2] = {d->min, d->max};
        for (int e = 0; e < 2; e++) {
            trellis_engine_options o = def, r;
            *member(&o, d->name) = edge[e];
            assert_int_equal(tr_engine_options_resolve(&o, &r, NULL, 0), TR_OK);
            assert_int_equal(*member(&r, d->name), edge[e]);
        }
        if (d->max < INT32_MAX) {
            trellis_engine_options o = def, r;
            *member(&o, d->name) = d->max + 1;
            char err[256], want[128];
            assert_int_equal(tr_engine_options_resolve(&o, &r, err, sizeof err),
                             TR_ERR_INVALID_ARG);
            snprintf(want, sizeof want, "options.%s is %d, expected %d..%d", d->name,
                     d->max + 1, d->min, d->max);
            assert_non_null(strstr(err, want));
        }
    }
    assert_int_equal(n, 16); /* every int32_t member of trellis_engine_options */
    assert_null(trellis_engine_option_at(-1));
    assert_string_equal(trellis_kv_type_name(TRELLIS_KV_F16), "f16");
    assert_string_equal(trellis_kv_type_name(TRELLIS_KV_Q8), "q8");
    assert_string_equal(trellis_kv_type_name(TRELLIS_KV_Q4), "q4");
    assert_string_equal(trellis_kv_type_name(3), "?");
    assert_null(trellis_engine_option_find("nope"));
    assert_null(trellis_engine_option_find(NULL));
    const trellis_engine_option_desc *t = trellis_engine_option_find("threads");
    assert_non_null(t);
    assert_int_equal(t->min, 0);
    assert_int_equal(t->max, TRELLIS_MAX_THREADS);
    assert_string_equal(t->note, "0 = one per core");
}

/* trellis_version(): CMake's project(VERSION), as a string and a number. */
static void test_version(void **state) {
    (void)state;
    const char *v = trellis_version();
    assert_non_null(v);
    assert_string_equal(v, TRELLIS_PROJECT_VERSION);
    int a = -1, b = -1, c = -1, end = 0;
    assert_int_equal(sscanf(v, "%d.%d.%d%n", &a, &b, &c, &end), 3);
    assert_int_equal((size_t)end, strlen(v));
    assert_int_equal(trellis_version_number(), a * 1000000 + b * 1000 + c);
    assert_ptr_equal(trellis_version(), v); /* static */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_unset_and_kept),
        cmocka_unit_test(test_out_of_range),
        cmocka_unit_test(test_threads_bound),
        cmocka_unit_test(test_descriptors),
        cmocka_unit_test(test_version),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
