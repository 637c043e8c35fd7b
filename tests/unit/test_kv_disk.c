/* test_kv_disk.c — the radix cache's disk tier on its own
 * (radix/disk/kv_disk.h): keys, the record header and its checker, and
 * the store in a fresh temporary folder per test.
 *
 * Checked:
 *  - keys: a chain is a pure function of (fingerprint, namespace, tokens);
 *    another namespace, fingerprint, token, order or length changes both
 *    halves of the key;
 *  - header: write + check round trip; each field that can be wrong is
 *    refused with TR_ERR_FORMAT and a `why` naming it (fields after the
 *    header hash are rehashed, so the field's own check is reached); a
 *    short buffer is refused; every single flipped byte fails;
 *  - store: put / drain / read / poll round trip, byte for byte; has()
 *    before and after; a chain with a hole is read up to the hole; records
 *    survive a close and reopen; a truncated, flipped, renamed or
 *    wrong-size record and a leftover .tmp give a miss, never other bytes,
 *    and are deleted and counted, whether damaged while open or closed; a
 *    writer killed by SIGKILL leaves only whole records and a free lock; a
 *    second open of a folder is refused, within one process and across
 *    two; the size bound evicts least recently used (a read counts as a
 *    use, at run time and from the files' times at open); a full write
 *    queue drops writes; a full disk (RLIMIT_FSIZE, and a small tmpfs where
 *    this process may mount one) fails writes cleanly; clear forgets at
 *    once and deletes on the I/O thread, ordered with writes; bad settings
 *    are refused with a message.
 *
 * Children (fork) run what must not happen in the test process itself: a
 * writer to kill, a file size limit, a mount. They report through their
 * exit status and never return into cmocka.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/hash.h"
#include "radix/disk/kv_disk.h"
#include "tests/unit/temp_dir.h"

#define OK(expr) assert_int_equal((expr), TR_OK)

enum { PS = 4, PB = 1000 }; /* PB: not a multiple of 8, so the hash's tail runs */
static const uint64_t FP = 0x1234abcd5678ef01ull;

static size_t rec_bytes(void) { return tr_kvd_header_bytes(PS) + PB; }

/* ---- folders ---- */

static void folder_of(const char *dir, uint64_t fp, char *out, size_t cap) {
    snprintf(out, cap, "%s/%016" PRIx64, dir, fp);
}

static void path_of(const char *dir, tr_kvd_key key, const char *ext, char *out, size_t cap) {
    snprintf(out, cap, "%s/%016" PRIx64 "/%016" PRIx64 "%016" PRIx64 "%s", dir, FP, key.a,
             key.b, ext);
}

/* Files in the store's folder whose names end in ext. */
static int count_files(const char *dir, const char *ext) {
    char folder[4096];
    folder_of(dir, FP, folder, sizeof folder);
    DIR *d = opendir(folder);
    if (!d) return 0;
    int n = 0;
    size_t el = strlen(ext);
    for (struct dirent *de; (de = readdir(d));) {
        size_t l = strlen(de->d_name);
        if (l > el && !strcmp(de->d_name + l - el, ext)) n++;
    }
    closedir(d);
    return n;
}

static bool exists(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0;
}

/* Each store test gets a fresh folder as its state, removed even when
 * the test fails. */
static int dir_setup(void **state) {
    *state = temp_dir_make("trellis-kvd");
    return 0;
}

static int dir_teardown(void **state) {
    temp_dir_remove(*state);
    free(*state);
    return 0;
}

/* ---- keys, payloads, stores ---- */

/* Page i of chain `chain`: tokens that differ between chains and pages. */
static void page_tokens(int chain, int page, int32_t *t) {
    for (int j = 0; j < PS; j++) t[j] = chain * 100000 + page * PS + j;
}

/* n pages of a chain in namespace ns: their tokens and keys. */
static void make_chain(int chain, uint64_t ns, int n, int32_t *toks, tr_kvd_key *keys,
                       tr_kvd_key *root) {
    *root = tr_kvd_key_root(FP, ns);
    tr_kvd_key k = *root;
    for (int i = 0; i < n; i++) {
        page_tokens(chain, i, toks + (size_t)i * PS);
        k = tr_kvd_key_next(k, toks + (size_t)i * PS, PS);
        keys[i] = k;
    }
}

/* The payload a key must come back with: a function of the key alone, so
 * that a record read under another key shows. */
static void fill_payload(unsigned char *p, size_t n, tr_kvd_key key) {
    uint64_t s = key.a ^ (key.b * 3), w = 0;
    for (size_t i = 0; i < n; i++) {
        if (i % 8 == 0) w = tr_splitmix64(s + i);
        p[i] = (unsigned char)(w >> (8 * (i % 8)));
    }
}

static tr_kvd_config cfg(const char *dir, uint64_t max_records) {
    return (tr_kvd_config){.dir = dir,
                           .max_bytes = max_records * rec_bytes(),
                           .fingerprint = FP,
                           .page_size = PS,
                           .payload_bytes = PB};
}

static tr_kvd *open_ok(const tr_kvd_config *c) {
    tr_kvd *k = NULL;
    tr_diag d = {0};
    tr_status s = tr_kvd_open(c, &k, &d);
    if (s != TR_OK) print_error("tr_kvd_open: %s\n", d.message);
    OK(s);
    assert_non_null(k);
    return k;
}

static void put_page(tr_kvd *k, tr_kvd_key key, tr_kvd_key parent, const int32_t *toks) {
    void *b = tr_kvd_put_begin(k, key, parent, toks);
    assert_non_null(b);
    fill_payload(b, PB, key);
    tr_kvd_put_commit(k, b);
}

static void put_chain(tr_kvd *k, const tr_kvd_key *keys, tr_kvd_key root, const int32_t *toks,
                      int n) {
    for (int i = 0; i < n; i++) put_page(k, keys[i], i ? keys[i - 1] : root, toks + (size_t)i * PS);
}

/* Reads n pages, waits for the answer and checks it: the tag, and every
 * page it calls valid has exactly its key's payload. Returns n_valid. */
static int32_t read_chain(tr_kvd *k, const tr_kvd_key *keys, tr_kvd_key parent0,
                          const int32_t *toks, int32_t n) {
    static uint64_t tag = 1000;
    tag++;
    OK(tr_kvd_read(k, keys, parent0, toks, n, tag));
    tr_kvd_drain(k);
    tr_kvd_answer a;
    assert_true(tr_kvd_poll(k, &a));
    assert_int_equal(a.tag, tag);
    assert_in_range(a.n_valid, 0, n);
    unsigned char *want = malloc(PB);
    assert_non_null(want);
    for (int32_t i = 0; i < a.n_valid; i++) {
        fill_payload(want, PB, keys[i]);
        assert_memory_equal((unsigned char *)a.data + (size_t)i * PB, want, PB);
    }
    if (a.n_valid == 0) assert_null(a.data);
    free(want);
    int32_t nv = a.n_valid;
    tr_kvd_answer_free(&a);
    assert_null(a.data);
    tr_kvd_answer none;
    assert_false(tr_kvd_poll(k, &none)); /* one read, one answer */
    return nv;
}

static tr_kvd_stats stats(tr_kvd *k) {
    tr_kvd_stats s;
    tr_kvd_stats_get(k, &s);
    return s;
}

/* ---- children ---- */

/* In a child: cmocka's handlers would jump back into the test runner and
 * run the remaining tests a second time; a crash must end the child. */
static void child_begin(void) {
    int sigs[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) signal(sigs[i], SIG_DFL);
}

#define CHILD_CHECK(cond)                                                           \
    do {                                                                            \
        if (!(cond)) {                                                              \
            fprintf(stderr, "child: check failed: %s (line %d)\n", #cond, __LINE__); \
            _exit(1);                                                               \
        }                                                                           \
    } while (0)

/* Waits for a child; its exit status, or 128 + the signal that ended it. */
static int child_wait(pid_t pid) {
    int st;
    while (waitpid(pid, &st, 0) < 0) assert_int_equal(errno, EINTR);
    if (WIFEXITED(st)) return WEXITSTATUS(st);
    return 128 + WTERMSIG(st);
}

static pid_t fork_child(void) {
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) child_begin();
    return pid;
}

/* ---- keys and the header ---- */

static int key_cmp(const void *x, const void *y) {
    const tr_kvd_key *a = x, *b = y;
    return (a->a > b->a) - (a->a < b->a);
}

static void test_keys(void **state) {
    (void)state;
    tr_kvd_key r = tr_kvd_key_root(FP, 7);
    assert_true(tr_kvd_key_eq(r, tr_kvd_key_root(FP, 7)));
    /* another namespace, another fingerprint, the two swapped: other roots,
     * in both halves */
    tr_kvd_key roots[] = {tr_kvd_key_root(FP, 8), tr_kvd_key_root(FP ^ 1, 7),
                          tr_kvd_key_root(7, FP), tr_kvd_key_root(FP, 0)};
    for (size_t i = 0; i < sizeof roots / sizeof roots[0]; i++) {
        assert_int_not_equal(roots[i].a, r.a);
        assert_int_not_equal(roots[i].b, r.b);
    }

    /* a chain of 5 pages, twice: the same keys */
    int32_t toks[5 * PS];
    tr_kvd_key k1[5], k2[5], root1, root2;
    make_chain(3, 7, 5, toks, k1, &root1);
    make_chain(3, 7, 5, toks, k2, &root2);
    assert_true(tr_kvd_key_eq(root1, r));
    for (int i = 0; i < 5; i++) {
        assert_true(tr_kvd_key_eq(k1[i], k2[i]));
        for (int j = 0; j < i; j++) assert_false(tr_kvd_key_eq(k1[i], k1[j]));
    }
    /* the same tokens under another namespace or fingerprint: no key shared */
    tr_kvd_key k3[5], root3;
    make_chain(3, 8, 5, toks, k3, &root3);
    tr_kvd_key k4 = tr_kvd_key_next(tr_kvd_key_root(FP ^ 1, 7), toks, PS);
    for (int i = 0; i < 5; i++) {
        assert_false(tr_kvd_key_eq(k1[i], k3[i]));
        assert_false(tr_kvd_key_eq(k1[i], k4));
    }

    /* one page: another token, another order, a shorter page, a parent */
    int32_t t[4] = {11, 22, 33, 44}, other[4] = {11, 22, 33, 45}, swapped[4] = {22, 11, 33, 44};
    int32_t neg[4] = {11, 22, 33, -44};
    tr_kvd_key base = tr_kvd_key_next(r, t, 4);
    assert_true(tr_kvd_key_eq(base, tr_kvd_key_next(r, t, 4)));
    tr_kvd_key variants[] = {tr_kvd_key_next(r, other, 4), tr_kvd_key_next(r, swapped, 4),
                             tr_kvd_key_next(r, neg, 4), tr_kvd_key_next(r, t, 3),
                             tr_kvd_key_next(roots[0], t, 4), tr_kvd_key_next(base, t, 4),
                             tr_kvd_key_next(r, NULL, 0)};
    for (size_t i = 0; i < sizeof variants / sizeof variants[0]; i++) {
        assert_int_not_equal(variants[i].a, base.a);
        assert_int_not_equal(variants[i].b, base.b);
    }
    assert_false(tr_kvd_key_eq(tr_kvd_key_next(r, NULL, 0), r));

    /* 20,000 one-token pages under one parent: all keys distinct */
    enum { N = 20000 };
    tr_kvd_key *ks = malloc(N * sizeof *ks);
    assert_non_null(ks);
    for (int32_t i = 0; i < N; i++) ks[i] = tr_kvd_key_next(r, &i, 1);
    qsort(ks, N, sizeof *ks, key_cmp);
    for (int32_t i = 1; i < N; i++) { /* each half alone is distinct too */
        assert_int_not_equal(ks[i].a, ks[i - 1].a);
    }
    for (int32_t i = 0; i < N; i++) ks[i] = (tr_kvd_key){ks[i].b, ks[i].a};
    qsort(ks, N, sizeof *ks, key_cmp);
    for (int32_t i = 1; i < N; i++) assert_int_not_equal(ks[i].a, ks[i - 1].a);
    free(ks);
}

static void test_hash(void **state) {
    (void)state;
    unsigned char buf[100];
    for (size_t i = 0; i < sizeof buf; i++) buf[i] = (unsigned char)(i * 7 + 1);
    for (size_t n = 0; n <= sizeof buf; n++) {
        uint64_t h = tr_kvd_hash(buf, n);
        assert_int_equal(h, tr_kvd_hash(buf, n));
        if (n) assert_int_not_equal(h, tr_kvd_hash(buf, n - 1)); /* the length counts */
        for (size_t i = 0; i < n; i++) { /* any one byte changed: another hash */
            buf[i] ^= 0x10;
            assert_int_not_equal(h, tr_kvd_hash(buf, n));
            buf[i] ^= 0x10;
        }
    }
}

static void test_header_bytes(void **state) {
    (void)state;
    assert_int_equal(tr_kvd_header_bytes(0), 0);
    assert_int_equal(tr_kvd_header_bytes(-1), 0);
    assert_int_equal(tr_kvd_header_bytes(65537), 0);
    assert_int_equal(tr_kvd_header_bytes(1), 88);  /* 72 + 4, padded to 80, + 8 */
    assert_int_equal(tr_kvd_header_bytes(2), 88);  /* 72 + 8 */
    assert_int_equal(tr_kvd_header_bytes(3), 96);  /* 72 + 12, padded to 88, + 8 */
    assert_int_equal(tr_kvd_header_bytes(4), 96);
    assert_int_equal(tr_kvd_header_bytes(65536), 72 + 4 * 65536 + 8);
}

static void rehash(unsigned char *h, size_t hb) {
    uint64_t v = tr_kvd_hash(h, hb - 8);
    memcpy(h + hb - 8, &v, 8);
}

/* h[0..n) must be refused, with a reason containing `word`; *payload_hash
 * untouched. Also with no reason buffer, and with a tiny one. */
static void expect_refused(const unsigned char *h, size_t n, const tr_kvd_expect *x,
                           const char *word) {
    char why[128];
    memset(why, 'x', sizeof why);
    uint64_t ph = 0xdeadbeef;
    assert_int_equal(tr_kvd_header_check(h, n, x, &ph, why, sizeof why), TR_ERR_FORMAT);
    if (!strstr(why, word)) print_error("why '%s' does not name '%s'\n", why, word);
    assert_non_null(strstr(why, word));
    assert_int_equal(ph, 0xdeadbeef);
    assert_int_equal(tr_kvd_header_check(h, n, x, NULL, NULL, 0), TR_ERR_FORMAT);
    char small[4] = "zzz";
    assert_int_equal(tr_kvd_header_check(h, n, x, NULL, small, sizeof small), TR_ERR_FORMAT);
    assert_int_equal(strlen(small), 3); /* cut, terminated */
    assert_memory_equal(small, why, 3);
}

static void test_header_round_trip_and_refusals(void **state) {
    (void)state;
    /* page size 3: 4 bytes of padding before the header hash */
    enum { P = 3 };
    const size_t hb = tr_kvd_header_bytes(P);
    assert_int_equal(hb, 96);
    int32_t toks[P] = {5, -6, 70000};
    tr_kvd_key root = tr_kvd_key_root(FP, 1);
    tr_kvd_expect x = {.fingerprint = FP,
                       .page_size = P,
                       .payload_bytes = 12345,
                       .key = tr_kvd_key_next(root, toks, P),
                       .parent = root,
                       .tokens = toks};
    unsigned char good[256], h[256];
    memset(good, 0xee, sizeof good); /* write must zero its padding itself */
    tr_kvd_header_write(good, &x, 0x0123456789abcdefull);
    assert_int_equal(good[hb], 0xee); /* nothing past the header */
    assert_memory_equal(good, "TRKVDSK1", 8);

    uint64_t ph = 0;
    char why[128] = "";
    OK(tr_kvd_header_check(good, hb, &x, &ph, why, sizeof why));
    assert_int_equal(ph, 0x0123456789abcdefull);
    OK(tr_kvd_header_check(good, sizeof good, &x, NULL, NULL, 0)); /* longer: fine */
    tr_kvd_expect no_toks = x;
    no_toks.tokens = NULL; /* no tokens to compare: the rest still checked */
    OK(tr_kvd_header_check(good, hb, &no_toks, NULL, NULL, 0));

    /* short buffers, down to nothing */
    expect_refused(good, hb - 1, &x, "shorter");
    expect_refused(good, 8, &x, "shorter");
    expect_refused(good, 0, &x, "shorter");

    /* fields checked before the header hash: changed in place */
    memcpy(h, good, hb);
    h[0] ^= 1;
    expect_refused(h, hb, &x, "magic");
    memcpy(h, good, hb);
    h[7] = '2'; /* the magic's last byte: a foreign byte order or format */
    expect_refused(h, hb, &x, "magic");
    memcpy(h, good, hb);
    h[8] = 2;
    expect_refused(h, hb, &x, "version");
    memcpy(h, good, hb);
    h[12] = 4;
    expect_refused(h, hb, &x, "page size");
    /* the reader expects page size 4 (the same header length, 96) */
    tr_kvd_expect x4 = x;
    x4.page_size = 4;
    int32_t toks4[4] = {5, -6, 70000, 0};
    x4.tokens = toks4;
    expect_refused(good, hb, &x4, "page size");
    tr_kvd_expect x0 = x;
    x0.page_size = 0;
    expect_refused(good, hb, &x0, "page size");

    /* a header byte changed, the hash not: header hash */
    for (size_t i = 16; i < hb; i++) {
        memcpy(h, good, hb);
        h[i] ^= 0x80;
        expect_refused(h, hb, &x, "header hash");
    }

    /* the expectation differs (the header is whole) */
    tr_kvd_expect y = x;
    y.fingerprint ^= 1;
    expect_refused(good, hb, &y, "fingerprint");
    y = x;
    y.key.a ^= 1;
    expect_refused(good, hb, &y, "other key");
    y = x;
    y.key.b ^= 1;
    expect_refused(good, hb, &y, "other key");
    y = x;
    y.parent.a ^= 1;
    expect_refused(good, hb, &y, "parent");
    y = x;
    y.parent.b ^= 1;
    expect_refused(good, hb, &y, "parent");
    y = x;
    y.payload_bytes++;
    expect_refused(good, hb, &y, "payload size");
    int32_t toks_other[P] = {5, -6, 70001};
    y = x;
    y.tokens = toks_other;
    expect_refused(good, hb, &y, "tokens");

    /* the same, written by a wrong writer (rehashed): each field's own check */
    struct {
        size_t at;
        const char *word;
    } fields[] = {{16, "fingerprint"}, {24, "other key"}, {32, "other key"},
                  {40, "parent"},      {48, "parent"},    {56, "payload size"},
                  {72, "tokens"},      {80, "tokens"},    {84, "padding"},
                  {87, "padding"}};
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
        memcpy(h, good, hb);
        h[fields[i].at] ^= 0x01;
        rehash(h, hb);
        expect_refused(h, hb, &x, fields[i].word);
    }
    /* the payload hash field is not compared here: it is returned */
    memcpy(h, good, hb);
    h[64] ^= 0x01;
    rehash(h, hb);
    OK(tr_kvd_header_check(h, hb, &x, &ph, NULL, 0));
    assert_int_equal(ph, 0x0123456789abcdefull ^ 0x01);

    /* every single byte flipped, any way: refused */
    for (size_t i = 0; i < hb; i++)
        for (int bit = 0; bit < 8; bit++) {
            memcpy(h, good, hb);
            h[i] ^= (unsigned char)(1u << bit);
            assert_int_equal(tr_kvd_header_check(h, hb, &x, NULL, NULL, 0), TR_ERR_FORMAT);
        }
}

/* ---- the store ---- */

static atomic_int g_wakes;
static void on_wake(void *user) { /* the I/O thread: no cmocka asserts */
    if (user == &g_wakes) atomic_fetch_add(&g_wakes, 1);
}

static void test_put_read_round_trip(void **state) {
    const char *dir = *state;
    tr_kvd_config c = cfg(dir, 100);
    c.wake = on_wake;
    c.wake_user = &g_wakes;
    atomic_store(&g_wakes, 0);
    tr_kvd *k = open_ok(&c);
    assert_int_equal(stats(k).found_on_open, 0);

    int32_t toks[4 * PS];
    tr_kvd_key keys[4], root;
    make_chain(1, 0, 4, toks, keys, &root);
    for (int i = 0; i < 4; i++) assert_false(tr_kvd_has(k, keys[i]));
    put_chain(k, keys, root, toks, 4);
    for (int i = 0; i < 4; i++) assert_true(tr_kvd_has(k, keys[i])); /* queued counts */
    /* a key already present: nothing to do, not a dropped write */
    assert_null(tr_kvd_put_begin(k, keys[0], root, toks));
    tr_kvd_drain(k);
    tr_kvd_stats s = stats(k);
    assert_int_equal(s.records, 4);
    assert_int_equal(s.bytes, 4 * rec_bytes());
    assert_int_equal(s.writes, 4);
    assert_int_equal(s.write_bytes, 4 * rec_bytes());
    assert_int_equal(s.dropped_writes, 0);
    assert_int_equal(s.write_errors, 0);
    assert_int_equal(count_files(dir, ".kvp"), 4);
    assert_int_equal(count_files(dir, ".tmp"), 0);
    char path[4096];
    path_of(dir, keys[2], ".kvp", path, sizeof path);
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    assert_int_equal(sb.st_size, rec_bytes());

    /* the whole chain, then its first half */
    assert_int_equal(read_chain(k, keys, root, toks, 4), 4);
    assert_int_equal(atomic_load(&g_wakes), 1);
    assert_int_equal(read_chain(k, keys, root, toks, 2), 2);
    assert_int_equal(atomic_load(&g_wakes), 2);
    /* from the middle: the parent of page 2 is page 1 */
    assert_int_equal(read_chain(k, keys + 2, keys[1], toks + 2 * PS, 2), 2);
    s = stats(k);
    assert_int_equal(s.reads, 3);
    assert_int_equal(s.read_pages, 8);
    assert_int_equal(s.read_misses, 0);
    assert_int_equal(s.corrupt, 0);

    /* a put given back: never written, not present */
    int32_t t5[PS];
    page_tokens(9, 0, t5);
    tr_kvd_key k5 = tr_kvd_key_next(root, t5, PS);
    void *b = tr_kvd_put_begin(k, k5, root, t5);
    assert_non_null(b);
    assert_true(tr_kvd_has(k, k5));
    tr_kvd_put_abort(k, b);
    assert_false(tr_kvd_has(k, k5));
    tr_kvd_put_commit(k, NULL); /* NULL: no-ops */
    tr_kvd_put_abort(k, NULL);
    tr_kvd_drain(k);
    assert_int_equal(count_files(dir, ".kvp"), 4);
    assert_int_equal(stats(k).records, 4);

    /* a chain whose page 2 (of 0..3) was never written: pages 0 and 1 */
    int32_t toks2[4 * PS];
    tr_kvd_key keys2[4], root2;
    make_chain(2, 0, 4, toks2, keys2, &root2);
    for (int i = 0; i < 4; i++)
        if (i != 2) put_page(k, keys2[i], i ? keys2[i - 1] : root2, toks2 + i * PS);
    tr_kvd_drain(k);
    assert_false(tr_kvd_has(k, keys2[2]));
    assert_true(tr_kvd_has(k, keys2[3]));
    assert_int_equal(read_chain(k, keys2, root2, toks2, 4), 2);
    assert_int_equal(stats(k).read_misses, 1);
    assert_int_equal(read_chain(k, keys2 + 3, keys2[2], toks2 + 3 * PS, 1), 1);

    /* page 1 deleted behind the store's back: a miss, and forgotten */
    path_of(dir, keys2[1], ".kvp", path, sizeof path);
    assert_int_equal(unlink(path), 0);
    assert_true(tr_kvd_has(k, keys2[1]));
    assert_int_equal(read_chain(k, keys2, root2, toks2, 4), 1);
    assert_false(tr_kvd_has(k, keys2[1]));
    assert_int_equal(stats(k).read_misses, 2);
    assert_int_equal(stats(k).corrupt, 0);

    /* asked with other tokens than the record holds: the record's own check
     * refuses it (never its bytes), and it goes */
    int32_t wrong[PS];
    memcpy(wrong, toks, sizeof wrong);
    wrong[1]++;
    assert_int_equal(read_chain(k, keys, root, wrong, 1), 0);
    assert_int_equal(stats(k).corrupt, 1);
    assert_false(tr_kvd_has(k, keys[0]));
    path_of(dir, keys[0], ".kvp", path, sizeof path);
    assert_false(exists(path));

    /* bad read arguments */
    assert_int_equal(tr_kvd_read(k, keys, root, toks, 0, 1), TR_ERR_INVALID_ARG);
    assert_int_equal(tr_kvd_read(k, NULL, root, toks, 1, 1), TR_ERR_INVALID_ARG);
    assert_int_equal(tr_kvd_read(k, keys, root, NULL, 1, 1), TR_ERR_INVALID_ARG);
    assert_int_equal(tr_kvd_read(NULL, keys, root, toks, 1, 1), TR_ERR_INVALID_ARG);
    tr_kvd_answer a;
    assert_false(tr_kvd_poll(k, &a));
    tr_kvd_answer_free(NULL);

    /* an answer never polled is freed by close (ASan/valgrind would tell) */
    OK(tr_kvd_read(k, keys2 + 3, keys2[2], toks2 + 3 * PS, 1, 77));
    tr_kvd_close(k);
    tr_kvd_close(NULL);
}

static void test_survives_reopen(void **state) {
    const char *dir = *state;
    tr_kvd_config c = cfg(dir, 100);
    tr_kvd *k = open_ok(&c);
    int32_t ta[4 * PS], tb[3 * PS];
    tr_kvd_key ka[4], kb[3], ra, rb;
    make_chain(1, 0, 4, ta, ka, &ra);
    make_chain(2, 5, 3, tb, kb, &rb);
    put_chain(k, ka, ra, ta, 4);
    tr_kvd_drain(k);
    put_chain(k, kb, rb, tb, 3);
    tr_kvd_close(k); /* close finishes the queued writes */
    assert_int_equal(count_files(dir, ".kvp"), 7);
    assert_int_equal(count_files(dir, ".tmp"), 0);

    k = open_ok(&c);
    tr_kvd_stats s = stats(k);
    assert_int_equal(s.found_on_open, 7);
    assert_int_equal(s.records, 7);
    assert_int_equal(s.bytes, 7 * rec_bytes());
    assert_int_equal(s.writes, 0);
    assert_int_equal(s.evicted, 0);
    for (int i = 0; i < 4; i++) assert_true(tr_kvd_has(k, ka[i]));
    for (int i = 0; i < 3; i++) assert_true(tr_kvd_has(k, kb[i]));
    assert_int_equal(read_chain(k, ka, ra, ta, 4), 4);
    assert_int_equal(read_chain(k, kb, rb, tb, 3), 3);
    tr_kvd_close(k);

    /* another fingerprint on the same folder: another subfolder, nothing seen */
    tr_kvd_config c2 = c;
    c2.fingerprint = FP + 1;
    k = open_ok(&c2);
    assert_int_equal(stats(k).found_on_open, 0);
    assert_false(tr_kvd_has(k, ka[0]));
    tr_kvd_close(k);
    /* and a third open of the first: still all there */
    k = open_ok(&c);
    assert_int_equal(stats(k).found_on_open, 7);
    assert_int_equal(read_chain(k, ka, ra, ta, 4), 4);
    tr_kvd_close(k);
}

/* Damage: six chains of two pages (namespaces 10..15); page 1 of chains
 * 0..4 is damaged one way each, chain 5 is whole. */
enum { DMG_CHAINS = 6 };
typedef struct dmg {
    int32_t toks[DMG_CHAINS][2 * PS];
    tr_kvd_key keys[DMG_CHAINS][2], root[DMG_CHAINS];
} dmg;

static void dmg_make(dmg *m, tr_kvd *k) {
    for (int c = 0; c < DMG_CHAINS; c++) {
        make_chain(c, 10 + (uint64_t)c, 2, m->toks[c], m->keys[c], &m->root[c]);
        put_chain(k, m->keys[c], m->root[c], m->toks[c], 2);
    }
    tr_kvd_drain(k);
}

static void flip_byte(const char *path, off_t at) {
    int fd = open(path, O_RDWR);
    assert_true(fd >= 0);
    unsigned char b;
    assert_int_equal(pread(fd, &b, 1, at), 1);
    b ^= 0x20;
    assert_int_equal(pwrite(fd, &b, 1, at), 1);
    close(fd);
}

static void write_file(const char *path, const void *p, size_t n) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, p, n), (ssize_t)n);
    close(fd);
}

static void dmg_apply(const dmg *m, const char *dir, char bad[5][4096]) {
    for (int c = 0; c < 5; c++) path_of(dir, m->keys[c][1], ".kvp", bad[c], 4096);
    /* 0: cut short (a torn write after a power loss) */
    assert_int_equal(truncate(bad[0], (off_t)rec_bytes() / 2), 0);
    /* 1: one payload byte flipped */
    flip_byte(bad[1], (off_t)rec_bytes() - 5);
    /* 2: one header byte flipped (a token) */
    flip_byte(bad[2], 72 + 1);
    /* 3: the right content and 10 bytes more */
    int fd = open(bad[3], O_WRONLY | O_APPEND);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "0123456789", 10), 10);
    close(fd);
    /* 4: a whole record under another record's name */
    char src[4096], *buf;
    path_of(dir, m->keys[5][1], ".kvp", src, sizeof src);
    buf = malloc(rec_bytes());
    assert_non_null(buf);
    fd = open(src, O_RDONLY);
    assert_true(fd >= 0);
    assert_int_equal(read(fd, buf, rec_bytes()), (ssize_t)rec_bytes());
    close(fd);
    write_file(bad[4], buf, rec_bytes());
    free(buf);
    /* a killed writer's leftover */
    char tmp[4096];
    tr_kvd_key junk = {0x1111, 0x2222};
    path_of(dir, junk, ".tmp", tmp, sizeof tmp);
    write_file(tmp, "garbage", 7);
}

/* Every damaged chain reads as page 0 alone, the whole one whole; the
 * damaged records are gone from disk and index. */
static void dmg_check(const dmg *m, tr_kvd *k, char bad[5][4096]) {
    for (int c = 0; c < DMG_CHAINS; c++)
        assert_int_equal(read_chain(k, m->keys[c], m->root[c], m->toks[c], 2), c < 5 ? 1 : 2);
    for (int c = 0; c < 5; c++) {
        assert_false(exists(bad[c]));
        assert_false(tr_kvd_has(k, m->keys[c][1]));
        assert_true(tr_kvd_has(k, m->keys[c][0]));
    }
    assert_true(tr_kvd_has(k, m->keys[5][1]));
    /* again: now a plain miss */
    uint64_t misses = stats(k).read_misses;
    assert_int_equal(read_chain(k, m->keys[1], m->root[1], m->toks[1], 2), 1);
    assert_int_equal(stats(k).read_misses, misses + 1);
}

static void test_damage_while_open(void **state) {
    const char *dir = *state;
    tr_kvd_config c = cfg(dir, 100);
    tr_kvd *k = open_ok(&c);
    dmg *m = calloc(1, sizeof *m);
    assert_non_null(m);
    dmg_make(m, k);
    char bad[5][4096];
    dmg_apply(m, dir, bad);
    dmg_check(m, k, bad);
    tr_kvd_stats s = stats(k);
    assert_int_equal(s.corrupt, 5);
    assert_int_equal(s.records, 2 * DMG_CHAINS - 5);
    assert_int_equal(count_files(dir, ".kvp"), 2 * DMG_CHAINS - 5);
    assert_int_equal(count_files(dir, ".tmp"), 1); /* left for the next open */
    tr_kvd_close(k);
    k = open_ok(&c);
    assert_int_equal(count_files(dir, ".tmp"), 0);
    assert_int_equal(stats(k).found_on_open, 2 * DMG_CHAINS - 5);
    tr_kvd_close(k);
    free(m);
}

static void test_damage_while_closed(void **state) {
    const char *dir = *state;
    tr_kvd_config c = cfg(dir, 100);
    tr_kvd *k = open_ok(&c);
    dmg *m = calloc(1, sizeof *m);
    assert_non_null(m);
    dmg_make(m, k);
    tr_kvd_close(k);
    char bad[5][4096];
    dmg_apply(m, dir, bad);

    k = open_ok(&c);
    /* the scan deletes what its names and sizes tell: the leftover, the
     * short and the long record (those two count as corrupt) */
    assert_int_equal(count_files(dir, ".tmp"), 0);
    assert_false(exists(bad[0]));
    assert_false(exists(bad[3]));
    tr_kvd_stats s = stats(k);
    assert_int_equal(s.found_on_open, 2 * DMG_CHAINS - 2);
    assert_int_equal(s.corrupt, 2);
    assert_false(tr_kvd_has(k, m->keys[0][1]));
    assert_false(tr_kvd_has(k, m->keys[3][1]));
    /* the others only their hashes tell, on read */
    assert_true(tr_kvd_has(k, m->keys[1][1]));
    dmg_check(m, k, bad);
    s = stats(k);
    assert_int_equal(s.corrupt, 5);
    assert_int_equal(s.records, 2 * DMG_CHAINS - 5);
    assert_int_equal(count_files(dir, ".kvp"), 2 * DMG_CHAINS - 5);
    tr_kvd_close(k);
    free(m);
}

/* ---- a writer killed by SIGKILL ---- */

enum { KILL_ROUNDS = 3, KILL_MAX = 1500, KILL_PB = 16384 };

static tr_kvd_config kill_cfg(const char *dir) {
    tr_kvd_config c = cfg(dir, 0);
    c.payload_bytes = KILL_PB;
    c.max_bytes = (uint64_t)KILL_ROUNDS * KILL_MAX * (tr_kvd_header_bytes(PS) + KILL_PB);
    return c;
}

static tr_kvd_key kill_key(int round, int i, int32_t *toks, tr_kvd_key *root) {
    *root = tr_kvd_key_root(FP, 100 + (uint64_t)round);
    page_tokens(round, i, toks);
    return tr_kvd_key_next(*root, toks, PS);
}

/* The child: opens the store, writes its first record to the end, says
 * so (each round then has one record at least, however the scheduler
 * runs us), and writes until killed. */
static void kill_child(const char *dir, int round, int ready_fd) {
    tr_kvd_config c = kill_cfg(dir);
    tr_kvd *k = NULL;
    tr_diag d = {0};
    if (tr_kvd_open(&c, &k, &d) != TR_OK) {
        fprintf(stderr, "child: %s\n", d.message);
        _exit(2);
    }
    for (int i = 0; i < KILL_MAX; i++) {
        if (i == 1) {
            tr_kvd_drain(k);
            CHILD_CHECK(write(ready_fd, "r", 1) == 1);
        }
        int32_t toks[PS];
        tr_kvd_key root, key = kill_key(round, i, toks, &root);
        void *b = tr_kvd_put_begin(k, key, root, toks);
        if (!b) {
            i--; /* the queue is full: wait for the disk, then again */
            usleep(200);
            continue;
        }
        fill_payload(b, KILL_PB, key);
        tr_kvd_put_commit(k, b);
    }
    tr_kvd_drain(k);
    _exit(0); /* not killed in time: every record is whole, still a test */
}

static void test_kill_during_writes(void **state) {
    const char *dir = *state;
    unsigned seed = (unsigned)time(NULL) ^ ((unsigned)getpid() << 8);
    print_message("kill -9 delays: seed %u\n", seed);
    srand(seed);
    unsigned char *want = malloc(KILL_PB);
    assert_non_null(want);
    uint64_t total_valid = 0;
    tr_kvd_config c = kill_cfg(dir);
    for (int round = 0; round < KILL_ROUNDS; round++) {
        int p[2];
        assert_int_equal(pipe(p), 0);
        pid_t pid = fork_child();
        if (pid == 0) {
            close(p[0]);
            kill_child(dir, round, p[1]);
        }
        close(p[1]);
        char r;
        assert_int_equal(read(p[0], &r, 1), 1); /* the child wrote one record */
        close(p[0]);
        usleep(1000 * (useconds_t)(1 + rand() % 30));
        kill(pid, SIGKILL);
        int st = child_wait(pid);
        assert_true(st == 128 + SIGKILL || st == 0);

        /* its lock died with it; its leftover .tmp goes at open */
        tr_kvd *k = open_ok(&c);
        assert_int_equal(count_files(dir, ".tmp"), 0);
        tr_kvd_stats s = stats(k);
        assert_int_equal(s.found_on_open, (uint64_t)count_files(dir, ".kvp"));
        assert_int_equal(s.corrupt, 0);
        /* every record listed is one of ours, and reads back exactly (a
         * renamed record is always whole: the process died, not the disk) */
        uint64_t listed = 0, valid_before = total_valid;
        for (int rr = 0; rr <= round; rr++)
            for (int i = 0; i < KILL_MAX; i++) {
                int32_t toks[PS];
                tr_kvd_key root, key = kill_key(rr, i, toks, &root);
                if (!tr_kvd_has(k, key)) continue;
                listed++;
                OK(tr_kvd_read(k, &key, root, toks, 1, (uint64_t)i));
                tr_kvd_drain(k);
                tr_kvd_answer a;
                assert_true(tr_kvd_poll(k, &a));
                assert_int_equal(a.tag, (uint64_t)i);
                if (a.n_valid == 1) {
                    fill_payload(want, KILL_PB, key);
                    assert_memory_equal(a.data, want, KILL_PB);
                    if (rr == round) total_valid++;
                }
                tr_kvd_answer_free(&a);
            }
        assert_int_equal(listed, s.found_on_open);
        s = stats(k);
        assert_int_equal(s.read_pages + s.corrupt + s.read_misses, listed);
        assert_int_equal(s.corrupt, 0);
        assert_true(total_valid > valid_before); /* the first record, at least */
        tr_kvd_close(k);
    }
    print_message("kill -9: %" PRIu64 " records written before the kills\n", total_valid);
    free(want);
}

/* ---- the lock ---- */

static void test_second_open_refused(void **state) {
    const char *dir = *state;
    char folder[4096];
    folder_of(dir, FP, folder, sizeof folder);
    tr_kvd_config c = cfg(dir, 10);
    tr_kvd *a = open_ok(&c);

    /* a second open in this same process: another open file description,
     * so flock refuses it */
    for (int i = 0; i < 2; i++) { /* twice: the refused open's close freed nothing */
        tr_kvd *b = (tr_kvd *)0x1;
        tr_diag d = {0};
        assert_int_equal(tr_kvd_open(&c, &b, &d), TR_ERR_STATE);
        assert_ptr_equal(b, (tr_kvd *)0x1);
        if (!strstr(d.message, folder)) print_error("message: %s\n", d.message);
        assert_non_null(strstr(d.message, folder));
        assert_int_equal(tr_kvd_open(&c, &b, NULL), TR_ERR_STATE); /* no diag: fine */
    }

    /* and from another process */
    pid_t pid = fork_child();
    if (pid == 0) {
        tr_kvd *b = NULL;
        tr_diag d = {0};
        tr_status s = tr_kvd_open(&c, &b, &d);
        CHILD_CHECK(s == TR_ERR_STATE);
        CHILD_CHECK(strstr(d.message, folder) != NULL);
        _exit(0);
    }
    assert_int_equal(child_wait(pid), 0);

    /* another fingerprint: another folder, another lock */
    tr_kvd_config c2 = c;
    c2.fingerprint = FP ^ 0xff;
    tr_kvd *other = open_ok(&c2);
    tr_kvd_close(other);

    tr_kvd_close(a);
    tr_kvd *b = open_ok(&c); /* free once the first is closed */
    tr_kvd_close(b);
}

/* ---- the bounds ---- */

static void set_mtime(const char *path, time_t sec) {
    struct timespec ts[2] = {{sec, 0}, {sec, 0}};
    assert_int_equal(utimensat(AT_FDCWD, path, ts, 0), 0);
}

static void test_size_bound_lru(void **state) {
    const char *dir = *state;
    tr_kvd_config c = cfg(dir, 3);
    tr_kvd *k = open_ok(&c);
    enum { N = 5 };
    int32_t toks[N][PS];
    tr_kvd_key keys[N], root = tr_kvd_key_root(FP, 0);
    char paths[N][4096];
    for (int i = 0; i < N; i++) {
        page_tokens(i, 0, toks[i]);
        keys[i] = tr_kvd_key_next(root, toks[i], PS);
        path_of(dir, keys[i], ".kvp", paths[i], sizeof paths[i]);
    }
    /* A, B, C fill the bound */
    for (int i = 0; i < 3; i++) {
        put_page(k, keys[i], root, toks[i]);
        tr_kvd_drain(k);
    }
    assert_int_equal(stats(k).records, 3);
    assert_int_equal(stats(k).evicted, 0);
    /* A is read (which also touches its file: made old first to see it) */
    set_mtime(paths[0], 1000);
    assert_int_equal(read_chain(k, &keys[0], root, toks[0], 1), 1);
    struct stat sb;
    assert_int_equal(stat(paths[0], &sb), 0);
    assert_true(sb.st_mtime > 1000);
    /* D evicts B (the least recently used), E evicts C; A stays */
    put_page(k, keys[3], root, toks[3]);
    tr_kvd_drain(k);
    assert_false(tr_kvd_has(k, keys[1]));
    assert_true(tr_kvd_has(k, keys[0]));
    assert_true(tr_kvd_has(k, keys[2]));
    put_page(k, keys[4], root, toks[4]);
    tr_kvd_drain(k);
    tr_kvd_stats s = stats(k);
    assert_int_equal(s.records, 3);
    assert_int_equal(s.bytes, 3 * rec_bytes());
    assert_int_equal(s.evicted, 2);
    assert_int_equal(s.writes, 5);
    assert_int_equal(s.dropped_writes, 0);
    assert_int_equal(count_files(dir, ".kvp"), 3);
    bool want[N] = {true, false, false, true, true};
    for (int i = 0; i < N; i++) {
        assert_int_equal(tr_kvd_has(k, keys[i]), want[i]);
        assert_int_equal(exists(paths[i]), want[i]);
    }
    assert_int_equal(read_chain(k, &keys[0], root, toks[0], 1), 1);
    assert_int_equal(read_chain(k, &keys[3], root, toks[3], 1), 1);
    assert_int_equal(read_chain(k, &keys[4], root, toks[4], 1), 1);
    tr_kvd_close(k);

    /* at open, recency comes from the files' times: with room for two, the
     * oldest (D here) goes */
    set_mtime(paths[0], 3000);
    set_mtime(paths[3], 1000);
    set_mtime(paths[4], 2000);
    c.max_bytes = 2 * rec_bytes();
    k = open_ok(&c);
    s = stats(k);
    assert_int_equal(s.found_on_open, 2);
    assert_int_equal(s.records, 2);
    assert_int_equal(s.evicted, 1);
    assert_false(exists(paths[3]));
    assert_false(tr_kvd_has(k, keys[3]));
    assert_true(tr_kvd_has(k, keys[0]));
    assert_true(tr_kvd_has(k, keys[4]));
    /* and that order is the LRU's: a new record evicts E (2000), not A */
    put_page(k, keys[1], root, toks[1]);
    tr_kvd_drain(k);
    assert_false(tr_kvd_has(k, keys[4]));
    assert_true(tr_kvd_has(k, keys[0]));
    assert_int_equal(count_files(dir, ".kvp"), 2);
    tr_kvd_close(k);
}

static void test_queue_bound(void **state) {
    const char *dir = *state;
    tr_kvd_config c = cfg(dir, 100);
    c.max_queued_bytes = 2 * PB; /* two payloads waiting at most */
    tr_kvd *k = open_ok(&c);
    int32_t toks[4][PS];
    tr_kvd_key keys[4], root = tr_kvd_key_root(FP, 0);
    for (int i = 0; i < 4; i++) {
        page_tokens(i, 0, toks[i]);
        keys[i] = tr_kvd_key_next(root, toks[i], PS);
    }
    /* buffers not committed yet are queued bytes: deterministic */
    void *b0 = tr_kvd_put_begin(k, keys[0], root, toks[0]);
    void *b1 = tr_kvd_put_begin(k, keys[1], root, toks[1]);
    assert_non_null(b0);
    assert_non_null(b1);
    assert_null(tr_kvd_put_begin(k, keys[2], root, toks[2]));
    assert_int_equal(stats(k).dropped_writes, 1);
    assert_false(tr_kvd_has(k, keys[2]));
    assert_null(tr_kvd_put_begin(k, keys[3], root, toks[3]));
    assert_int_equal(stats(k).dropped_writes, 2);
    /* one given back: room again */
    tr_kvd_put_abort(k, b1);
    void *b2 = tr_kvd_put_begin(k, keys[2], root, toks[2]);
    assert_non_null(b2);
    fill_payload(b0, PB, keys[0]);
    fill_payload(b2, PB, keys[2]);
    tr_kvd_put_commit(k, b0);
    tr_kvd_put_commit(k, b2);
    tr_kvd_drain(k); /* written: the queue is empty again */
    put_page(k, keys[1], root, toks[1]);
    put_page(k, keys[3], root, toks[3]);
    tr_kvd_drain(k);
    tr_kvd_stats s = stats(k);
    assert_int_equal(s.dropped_writes, 2);
    assert_int_equal(s.writes, 4);
    for (int i = 0; i < 4; i++) assert_int_equal(read_chain(k, &keys[i], root, toks[i], 1), 1);
    tr_kvd_close(k);

    /* a queue smaller than one payload: every write dropped */
    c.max_queued_bytes = PB - 1;
    k = open_ok(&c);
    int32_t t[PS];
    page_tokens(50, 0, t);
    tr_kvd_key key = tr_kvd_key_next(root, t, PS);
    assert_null(tr_kvd_put_begin(k, key, root, t));
    assert_int_equal(stats(k).dropped_writes, 1);
    assert_false(tr_kvd_has(k, key));
    tr_kvd_close(k);
}

/* ---- a full disk ---- */

/* In a child whose files may not grow past half a record. */
static void fsize_child(const char *dir) {
    signal(SIGXFSZ, SIG_IGN); /* write() fails with EFBIG instead */
    struct rlimit old, lim;
    CHILD_CHECK(getrlimit(RLIMIT_FSIZE, &old) == 0);
    lim = old;
    lim.rlim_cur = rec_bytes() / 2;
    CHILD_CHECK(setrlimit(RLIMIT_FSIZE, &lim) == 0);
    tr_kvd_config c = cfg(dir, 100);
    tr_kvd *k = NULL;
    CHILD_CHECK(tr_kvd_open(&c, &k, NULL) == TR_OK);
    int32_t toks[3 * PS];
    tr_kvd_key keys[3], root;
    make_chain(1, 0, 3, toks, keys, &root);
    for (int i = 0; i < 3; i++) {
        void *b = tr_kvd_put_begin(k, keys[i], i ? keys[i - 1] : root, toks + i * PS);
        CHILD_CHECK(b != NULL);
        fill_payload(b, PB, keys[i]);
        tr_kvd_put_commit(k, b);
    }
    tr_kvd_drain(k);
    tr_kvd_stats s;
    tr_kvd_stats_get(k, &s);
    CHILD_CHECK(s.write_errors == 3);
    CHILD_CHECK(s.writes == 0);
    CHILD_CHECK(s.records == 0 && s.bytes == 0);
    for (int i = 0; i < 3; i++) CHILD_CHECK(!tr_kvd_has(k, keys[i]));
    CHILD_CHECK(count_files(dir, ".tmp") == 0);
    CHILD_CHECK(count_files(dir, ".kvp") == 0);
    /* a read of them: a miss, no answer data */
    CHILD_CHECK(tr_kvd_read(k, keys, root, toks, 3, 5) == TR_OK);
    tr_kvd_drain(k);
    tr_kvd_answer a;
    CHILD_CHECK(tr_kvd_poll(k, &a) && a.n_valid == 0 && a.data == NULL);
    /* room again: the same pages are written */
    CHILD_CHECK(setrlimit(RLIMIT_FSIZE, &old) == 0);
    for (int i = 0; i < 3; i++) {
        void *b = tr_kvd_put_begin(k, keys[i], i ? keys[i - 1] : root, toks + i * PS);
        CHILD_CHECK(b != NULL);
        fill_payload(b, PB, keys[i]);
        tr_kvd_put_commit(k, b);
    }
    tr_kvd_drain(k);
    CHILD_CHECK(tr_kvd_read(k, keys, root, toks, 3, 6) == TR_OK);
    tr_kvd_drain(k);
    CHILD_CHECK(tr_kvd_poll(k, &a) && a.n_valid == 3);
    unsigned char want[PB];
    for (int i = 0; i < 3; i++) {
        fill_payload(want, PB, keys[i]);
        CHILD_CHECK(memcmp((unsigned char *)a.data + i * PB, want, PB) == 0);
    }
    tr_kvd_answer_free(&a);
    tr_kvd_stats_get(k, &s);
    CHILD_CHECK(s.writes == 3 && s.write_errors == 3 && s.records == 3);
    tr_kvd_close(k);
    _exit(0);
}

/* In a child with its own mount namespace: the folder on a 16 KiB tmpfs
 * (four 4 KiB pages: four records of 1096 bytes fit, a fifth does not).
 * Exit 77: this process may not mount. */
static void tmpfs_child(const char *dir) {
    if (unshare(CLONE_NEWNS) != 0) _exit(77);
    /* private: the mount must not reach the test's own namespace */
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) _exit(77);
    if (mount("tr_kvd_test", dir, "tmpfs", 0, "size=16k") != 0) _exit(77);
    tr_kvd_config c = cfg(dir, 100);
    tr_kvd *k = NULL;
    CHILD_CHECK(tr_kvd_open(&c, &k, NULL) == TR_OK);
    enum { N = 8 };
    int32_t toks[N][PS];
    tr_kvd_key keys[N], root = tr_kvd_key_root(FP, 0);
    for (int i = 0; i < N; i++) {
        page_tokens(i, 0, toks[i]);
        keys[i] = tr_kvd_key_next(root, toks[i], PS);
        void *b = tr_kvd_put_begin(k, keys[i], root, toks[i]);
        CHILD_CHECK(b != NULL);
        fill_payload(b, PB, keys[i]);
        tr_kvd_put_commit(k, b);
    }
    tr_kvd_drain(k);
    tr_kvd_stats s;
    tr_kvd_stats_get(k, &s);
    CHILD_CHECK(s.writes + s.write_errors == N);
    CHILD_CHECK(s.write_errors >= 1 && s.writes >= 1);
    CHILD_CHECK(s.records == s.writes);
    CHILD_CHECK(count_files(dir, ".tmp") == 0);
    CHILD_CHECK((uint64_t)count_files(dir, ".kvp") == s.writes);
    int have = 0;
    for (int i = 0; i < N; i++) {
        if (!tr_kvd_has(k, keys[i])) continue;
        have++;
        CHILD_CHECK(tr_kvd_read(k, &keys[i], root, toks[i], 1, 1) == TR_OK);
        tr_kvd_drain(k);
        tr_kvd_answer a;
        CHILD_CHECK(tr_kvd_poll(k, &a) && a.n_valid == 1);
        unsigned char want[PB];
        fill_payload(want, PB, keys[i]);
        CHILD_CHECK(memcmp(a.data, want, PB) == 0);
        tr_kvd_answer_free(&a);
    }
    CHILD_CHECK((uint64_t)have == s.writes);
    /* a clear frees the space: writes land again */
    tr_kvd_clear(k);
    tr_kvd_drain(k);
    void *b = tr_kvd_put_begin(k, keys[N - 1], root, toks[N - 1]);
    CHILD_CHECK(b != NULL);
    fill_payload(b, PB, keys[N - 1]);
    tr_kvd_put_commit(k, b);
    tr_kvd_drain(k);
    tr_kvd_stats_get(k, &s);
    CHILD_CHECK(tr_kvd_has(k, keys[N - 1]) && count_files(dir, ".kvp") == 1);
    tr_kvd_close(k);
    _exit(0);
}

static void test_disk_full(void **state) {
    char sub[4096];
    snprintf(sub, sizeof sub, "%.3000s/rlimit", (const char *)*state);
    assert_int_equal(mkdir(sub, 0755), 0);
    pid_t pid = fork_child();
    if (pid == 0) fsize_child(sub);
    assert_int_equal(child_wait(pid), 0);

    snprintf(sub, sizeof sub, "%.3000s/tmpfs", (const char *)*state);
    assert_int_equal(mkdir(sub, 0755), 0);
    pid = fork_child();
    if (pid == 0) tmpfs_child(sub);
    int st = child_wait(pid);
    if (st == 77) print_message("disk full on tmpfs: skipped (cannot mount here)\n");
    else assert_int_equal(st, 0);
}

/* ---- clear ---- */

static void test_clear(void **state) {
    const char *dir = *state;
    tr_kvd_config c = cfg(dir, 100);
    tr_kvd *k = open_ok(&c);
    int32_t toks[3 * PS];
    tr_kvd_key keys[3], root;
    make_chain(1, 0, 3, toks, keys, &root);
    put_chain(k, keys, root, toks, 3);
    tr_kvd_drain(k);
    assert_int_equal(count_files(dir, ".kvp"), 3);
    tr_kvd_clear(k);
    for (int i = 0; i < 3; i++) assert_false(tr_kvd_has(k, keys[i])); /* at once */
    assert_int_equal(stats(k).records, 0);
    assert_int_equal(stats(k).bytes, 0);
    tr_kvd_drain(k);
    assert_int_equal(count_files(dir, ".kvp"), 0);
    assert_int_equal(read_chain(k, keys, root, toks, 3), 0);

    /* writes queued before a clear: gone; one asked after it: lands */
    int32_t toks2[3 * PS];
    tr_kvd_key keys2[3], root2;
    make_chain(2, 0, 3, toks2, keys2, &root2);
    put_chain(k, keys, root, toks, 3);
    put_chain(k, keys2, root2, toks2, 2);
    tr_kvd_clear(k);
    put_page(k, keys2[2], keys2[1], toks2 + 2 * PS);
    assert_true(tr_kvd_has(k, keys2[2]));
    tr_kvd_drain(k);
    assert_int_equal(count_files(dir, ".kvp"), 1);
    assert_int_equal(count_files(dir, ".tmp"), 0);
    assert_int_equal(stats(k).records, 1);
    for (int i = 0; i < 3; i++) assert_false(tr_kvd_has(k, keys[i]));
    assert_int_equal(read_chain(k, keys2 + 2, keys2[1], toks2 + 2 * PS, 1), 1);

    /* a buffer taken before a clear and committed after: never kept */
    int32_t t9[PS];
    page_tokens(9, 0, t9);
    tr_kvd_key k9 = tr_kvd_key_next(root, t9, PS);
    void *b = tr_kvd_put_begin(k, k9, root, t9);
    assert_non_null(b);
    tr_kvd_clear(k);
    fill_payload(b, PB, k9);
    tr_kvd_put_commit(k, b);
    tr_kvd_drain(k);
    assert_false(tr_kvd_has(k, k9));
    assert_int_equal(count_files(dir, ".kvp"), 0);

    /* and the store still works, across a reopen */
    put_chain(k, keys, root, toks, 3);
    tr_kvd_close(k);
    k = open_ok(&c);
    assert_int_equal(stats(k).found_on_open, 3);
    assert_int_equal(read_chain(k, keys, root, toks, 3), 3);
    tr_kvd_close(k);
}

/* ---- settings ---- */

static void expect_open_fails(const tr_kvd_config *c, tr_status want, const char *word) {
    tr_kvd *k = (tr_kvd *)0x1;
    tr_diag d = {0};
    assert_int_equal(tr_kvd_open(c, &k, &d), want);
    assert_ptr_equal(k, (tr_kvd *)0x1);
    assert_true(d.message[0] != 0);
    if (word && !strstr(d.message, word)) print_error("message: %s\n", d.message);
    if (word) assert_non_null(strstr(d.message, word));
}

static void test_bad_config(void **state) {
    const char *dir = *state;
    tr_kvd_config c = cfg(dir, 3), x;
    x = c;
    x.dir = NULL;
    expect_open_fails(&x, TR_ERR_INVALID_ARG, "folder");
    x = c;
    x.dir = "";
    expect_open_fails(&x, TR_ERR_INVALID_ARG, "folder");
    x = c;
    x.page_size = 0;
    expect_open_fails(&x, TR_ERR_INVALID_ARG, "page size");
    x = c;
    x.page_size = 65537;
    expect_open_fails(&x, TR_ERR_INVALID_ARG, "page size");
    x = c;
    x.payload_bytes = 0;
    expect_open_fails(&x, TR_ERR_INVALID_ARG, NULL);
    x = c;
    x.max_bytes = rec_bytes() - 1; /* the message says how much is needed */
    char need[32];
    snprintf(need, sizeof need, "%zu bytes", rec_bytes());
    expect_open_fails(&x, TR_ERR_INVALID_ARG, need);
    x.max_bytes = rec_bytes(); /* exactly one record: fine */
    tr_kvd *k = open_ok(&x);
    tr_kvd_close(k);
    expect_open_fails(NULL, TR_ERR_INVALID_ARG, NULL);
    assert_int_equal(tr_kvd_open(&c, NULL, NULL), TR_ERR_INVALID_ARG);

    /* a folder under a regular file: cannot be made */
    char file[4096], under[4096];
    snprintf(file, sizeof file, "%.3000s/plain", dir);
    write_file(file, "x", 1);
    snprintf(under, sizeof under, "%.3000s/sub", file);
    x = c;
    x.dir = under;
    expect_open_fails(&x, TR_ERR_IO, under);
    x.dir = file; /* the file itself as the folder */
    expect_open_fails(&x, TR_ERR_IO, file);
    /* missing levels are made, as mkdir -p does */
    snprintf(under, sizeof under, "%.3000s/a/b", dir);
    x.dir = under;
    k = open_ok(&x);
    tr_kvd_close(k);
    snprintf(under, sizeof under, "%.3000s/a/b/", dir); /* a trailing slash */
    x.dir = under;
    k = open_ok(&x);
    tr_kvd_close(k);
    snprintf(under, sizeof under, "%.3000s/new", dir);
    x.dir = under;
    k = open_ok(&x);
    tr_kvd_close(k);
}

#define DIR_TEST(f) cmocka_unit_test_setup_teardown(f, dir_setup, dir_teardown)

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_keys),
        cmocka_unit_test(test_hash),
        cmocka_unit_test(test_header_bytes),
        cmocka_unit_test(test_header_round_trip_and_refusals),
        DIR_TEST(test_put_read_round_trip),
        DIR_TEST(test_survives_reopen),
        DIR_TEST(test_damage_while_open),
        DIR_TEST(test_damage_while_closed),
        DIR_TEST(test_kill_during_writes),
        DIR_TEST(test_second_open_refused),
        DIR_TEST(test_size_bound_lru),
        DIR_TEST(test_queue_bound),
        DIR_TEST(test_disk_full),
        DIR_TEST(test_clear),
        DIR_TEST(test_bad_config),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
