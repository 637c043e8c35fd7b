/* bench_maskbench.c — `trellis bench maskbench`: the MaskBench
 * protocol (JSON Schema coverage and mask speed), exactly as the peers'
 * runner that tests/bench/maskbench_compare.py drives measures xgrammar,
 * llguidance and outlines-core, so that the rows compare.
 *
 *   trellis bench maskbench FILE.jsonl[.gz] [-m MODEL] [--limit N]
 *       [--timeout S] [--json] [--csv OUT] [--lenient] [--mem-limit-gb G]
 *       [--reasons N] [--quiet] [--clock wall|cpu] [--fork-each]
 *       [--property-order schema|any]
 *
 * FILE: one JSON object a line, {"id", "schema", "tests": [{"valid",
 * "data"}]} (MaskBench's data from guidance-ai/jsonschemabench, which
 * this repository does not carry). Per schema:
 *   - compile it (strict mode unless --lenient; flexible whitespace, the
 *     peers' setting; full numbers: the tests are Python's json.dumps of
 *     the data, which writes 1.0 for an integer-typed float, and JSON
 *     Schema counts 1.0 as an integer; properties in schema order, the
 *     peers' setting, unless --property-order any; the compile time
 *     budget is --timeout), TTFM = wall time of tr_grammar_compile_json_schema;
 *   - per test: text = Python's json.dumps(data) (tr_grammar_json_dumps_py:
 *     ", " and ": ", ensure_ascii=False, repr floats), tokens = the model's
 *     tokenizer (llama.cpp's ids; a test whose tokens do not spell the
 *     text is skipped and counted, as the peers do); from a fresh
 *     matcher, each token: fill the mask, check the token's bit, accept
 *     it; TBM = that step's time (mask + check + advance). After the last
 *     token the mask must allow EOS (not counted in TBM);
 *   - passing (every test as its `valid` says), compile_error (refused:
 *     reason kept), validation_error (a valid test rejected),
 *     invalidation_error (an invalid test accepted); when several tests
 *     fail the last one decides (MaskBench's runner); timeout (compile +
 *     tests over --timeout s: the worker process is killed then); crash
 *     (the worker died).
 * Isolation, as the peers' runner: schemas run one at a time in a worker
 * process (forked once, warmed up by one small untimed schema); a worker
 * that timed out or died is replaced by a fresh one for the next schema.
 * --fork-each forks a fresh child per schema instead (no warm-up): every
 * heap page a compile touches is then a page fault, ~150 of them at ~5 us
 * here, which the peers' warm workers do not pay (TTFM p50 ~1,200 us
 * against ~700 us with the worker, --clock cpu, 200 dev schemas).
 * Summary: MaskBench's rows (TBM and TTFM avg, p25..p100, with the
 * peers' percentile rule sorted[min(int(n*p/100), n-1)]; TTFM of a schema
 * that timed out before compiling counts as the timeout), the counts, and
 * the most frequent compile-error reasons. --json prints the summary as
 * JSON (the keys of maskbench_peers.py's summary); --csv writes one row
 * per schema with the peers' CSV columns.
 *
 * Single-threaded: one worker at a time; the parent only waits. Layering:
 * applications (app/bench) over grammar/, the tokenizer and zlib.
 */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "base/paths.h"
#include "base/util.h"
#include "grammar/grammar.h"
#include "app/bench/bench.h"
#include "app/common/args.h"
#include "runtime/gguf/gguf.h"
#include "runtime/tokenizer/tokenizer.h"
#include "runtime/vocab/vocab.h"

#define MB_PCTS 8
static const double mb_pcts[MB_PCTS] = {25, 50, 75, 90, 95, 99, 99.9, 100};

typedef struct mb_opts {
    const char *data, *model, *csv;
    long limit;
    double timeout_s, mem_gb;
    bool json, lenient, quiet;
    bool cpu;       /* --clock cpu: this thread's CPU time, not wall time */
    bool fork_each; /* a fresh child per schema instead of one worker */
    int any_order;  /* --property-order any: GRAMMAR_JSON_ORDER_ANY */
    int reasons;
} mb_opts;

typedef enum mb_status {
    MB_PASSING, MB_COMPILE_ERROR, MB_VALIDATION_ERROR, MB_INVALIDATION_ERROR, MB_TIMEOUT,
    MB_CRASH, MB_N_STATUS
} mb_status;

static const char *const mb_status_name[MB_N_STATUS] = {
    "passing", "compile_error", "validation_error", "invalidation_error", "timeout", "crash"};

/* One schema's outcome (what the child reports). */
typedef struct mb_rec {
    char id[128];
    mb_status status;
    char reason[400];
    int64_t ttfm_ns; /* -1: not compiled */
    int n_tests, valid_ok, invalid_ok, valid_rejected, invalid_accepted, skipped, inconsistent;
    double elapsed_s;
    int64_t *steps; /* TBM samples, ns */
    size_t n_steps;
} mb_rec;

/* ---- growable arrays ---- */

typedef struct mb_i64 {
    int64_t *v;
    size_t n, cap;
} mb_i64;

static bool mb_push(mb_i64 *a, int64_t x) {
    if (a->n == a->cap) {
        size_t c = a->cap ? a->cap * 2 : 4096;
        int64_t *p = realloc(a->v, c * sizeof *p);
        if (!p) return false;
        a->v = p;
        a->cap = c;
    }
    a->v[a->n++] = x;
    return true;
}

static int mb_cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* ---- reading the data file (plain or gzip) line by line ---- */

/* One line of the data set, its integers beyond 64 bits carried exactly
 * (grammar.h: the schema compiler reads them as written, the tests' text
 * is written back with them; decimals are doubles, as for the schema
 * compiler). je may be NULL. */
static json_t *mb_load_line(const char *s, size_t n, json_error_t *je) {
    char *x = NULL;
    size_t xn = 0;
    if (!tr_grammar_json_exact_numbers(s, n, true, &x, &xn)) return NULL;
    json_t *v = json_loadb(x ? x : s, x ? xn : n, JSON_ALLOW_NUL, je);
    free(x);
    return v;
}

static char *mb_getline(gzFile f, char **buf, size_t *cap) {
    size_t n = 0;
    for (;;) {
        if (*cap - n < 2) {
            size_t c = *cap ? *cap * 2 : 1 << 16;
            char *p = realloc(*buf, c);
            if (!p) return NULL;
            *buf = p;
            *cap = c;
        }
        if (!gzgets(f, *buf + n, (int)TR_MIN(*cap - n, (size_t)INT32_MAX))) return n ? *buf : NULL;
        n += strlen(*buf + n);
        if (n && (*buf)[n - 1] == '\n') return *buf;
    }
}

/* ---- the child: one schema ---- */

/* The clock of TBM and TTFM. Wall time is what the peers' runner
 * measures; on a loaded machine it also counts the time other processes
 * ran. --clock cpu reads CLOCK_THREAD_CPUTIME_ID instead, minus the
 * clock's own cost (a system call here: ~600 ns, against ~20 ns for the
 * wall clock), which mb_clock_calibrate measures as the least of many
 * back-to-back pairs. */
static bool mb_cpu_clock;
static uint64_t mb_cpu_overhead;

static uint64_t mb_thread_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}
static uint64_t mb_now(void) { return mb_cpu_clock ? mb_thread_ns() : tr_now_ns(); }
/* Elapsed time between two mb_now() readings. */
static uint64_t mb_elapsed(uint64_t t0, uint64_t t1) {
    uint64_t d = t1 - t0;
    if (!mb_cpu_clock) return d;
    return d > mb_cpu_overhead ? d - mb_cpu_overhead : 0;
}
static void mb_clock_calibrate(bool cpu) {
    mb_cpu_clock = cpu;
    if (!cpu) return;
    uint64_t best = UINT64_MAX;
    for (int i = 0; i < 2000; i++) {
        uint64_t a = mb_thread_ns(), b = mb_thread_ns();
        if (b - a < best) best = b - a;
    }
    mb_cpu_overhead = best;
}

typedef struct mb_ctx {
    const mb_opts *o;
    tokenizer *tok;
    grammar_vocab *v;
    int32_t eos;
    size_t nw;
} mb_ctx;

/* Feeds one test; *accepted when every token was in its mask and EOS
 * closed it. Steps appended to st. */
/* Runs one test; *stop is the number of tokens taken before a refusal
 * (n when every token was taken, whatever the end's verdict). */
static void mb_run_test(const mb_ctx *c, grammar *g, const int32_t *ids, size_t n,
                        uint64_t *mask, mb_i64 *st, bool *accepted, bool *inconsistent,
                        size_t *stop) {
    grammar_matcher *m = NULL;
    *accepted = false;
    *inconsistent = false;
    *stop = 0;
    if (tr_grammar_matcher_new(g, c->v, 0, &m) != TR_OK) return;
    bool ok = true;
    for (size_t i = 0; i < n && ok; i++, *stop += ok) {
        uint64_t t0 = mb_now();
        tr_grammar_matcher_fill_mask(m, mask, c->nw);
        int32_t id = ids[i];
        bool bit = (mask[id >> 6] >> (id & 63)) & 1;
        bool took = bit && tr_grammar_matcher_accept_token(m, id) == TR_OK;
        uint64_t t1 = mb_now();
        mb_push(st, (int64_t)mb_elapsed(t0, t1));
        if (bit != took) *inconsistent = true;
        ok = took;
    }
    if (ok) {
        tr_grammar_matcher_fill_mask(m, mask, c->nw);
        ok = (mask[c->eos >> 6] >> (c->eos & 63)) & 1;
        ok = ok && tr_grammar_matcher_is_accepting(m);
    }
    *accepted = ok;
    tr_grammar_matcher_free(m);
}

/* "valid test I rejected at byte B: ...<text before>|<the refused token>"
 * (or "at the end" when every token was taken), quotes and controls
 * escaped so the reason stays one CSV field. */
static void mb_rejected_at(const mb_ctx *c, size_t test, const char *text, size_t len,
                           const int32_t *ids, size_t n, size_t stop, char *out,
                           size_t cap) {
    if (stop >= n) {
        snprintf(out, cap, "valid test %zu rejected at the end (EOS refused)", test);
        return;
    }
    size_t at = 0, tl = 0;
    for (size_t j = 0; j < stop; j++) {
        tr_tokenizer_token_bytes(c->tok, ids[j], &tl);
        at += tl;
    }
    tr_tokenizer_token_bytes(c->tok, ids[stop], &tl);
    size_t from = at > 40 ? at - 40 : 0, to = TR_MIN(len, at + tl);
    char snip[160];
    size_t k = 0;
    for (size_t j = from; j < to && k + 5 < sizeof snip; j++) {
        if (j == at) snip[k++] = '|';
        unsigned char ch = (unsigned char)text[j];
        snip[k++] = ch < 0x20 || ch == '"' || ch == ',' ? '.' : (char)ch;
    }
    snip[k] = 0;
    snprintf(out, cap, "valid test %zu rejected at byte %zu: %s", test, at, snip);
}

/* Writes all of buf to fd. */
static void mb_write(int fd, const void *buf, size_t n) {
    const char *p = buf;
    while (n) {
        ssize_t k = write(fd, p, n);
        if (k <= 0) {
            if (k < 0 && errno == EINTR) continue;
            return;
        }
        p += k;
        n -= (size_t)k;
    }
}

/* Child protocol on fd: "C <ttfm_ns>\n" once compiled, then one final
 * record "R <status> <n_tests> <valid_ok> <invalid_ok> <valid_rejected>
 * <invalid_accepted> <skipped> <inconsistent> <n_steps>\n<reason>\n"
 * followed by n_steps int64 (binary). */
static void mb_child(const mb_ctx *c, json_t *item, int fd) {
    const mb_opts *o = c->o;
    if (o->mem_gb > 0) {
        struct rlimit rl;
        if (getrlimit(RLIMIT_AS, &rl) == 0) {
            rlim_t extra = (rlim_t)(o->mem_gb * 1024.0 * 1024.0 * 1024.0);
            struct rusage ru;
            getrusage(RUSAGE_SELF, &ru);
            rl.rlim_cur = (rlim_t)ru.ru_maxrss * 1024 * 4 + extra;
            setrlimit(RLIMIT_AS, &rl);
        }
    }
    json_t *schema = json_object_get(item, "schema");
    json_t *tests = json_object_get(item, "tests");
    char reason[400] = "";
    mb_i64 steps = {0};
    int n_tests = 0, vok = 0, iok = 0, vrej = 0, iacc = 0, skipped = 0, incons = 0;
    mb_status status = MB_PASSING;
    char *text = schema ? json_dumps(schema, JSON_ENCODE_ANY | JSON_COMPACT) : NULL;
    grammar *g = NULL;
    grammar_json_options jo;
    tr_grammar_json_options_default(&jo);
    jo.lenient = o->lenient;
    jo.numbers = GRAMMAR_JSON_NUM_FULL; /* the tests write integers as 1.0 too */
    jo.property_order = o->any_order ? GRAMMAR_JSON_ORDER_ANY : GRAMMAR_JSON_ORDER_SCHEMA;
    /* the per-schema timeout bounds the compile, not the library's 2 s
     * default (a shared machine's load would turn slow compiles into
     * refusals) */
    grammar_limits lim;
    tr_grammar_limits_default(&lim);
    lim.max_compile_us = (uint64_t)(o->timeout_s * 1e6);
    tr_diag d = {0};
    mb_clock_calibrate(o->cpu);
    uint64_t t0 = mb_now();
    tr_status st = text ? tr_grammar_compile_json_schema(text, strlen(text), &jo, &lim, &g, &d)
                        : TR_ERR_FORMAT;
    uint64_t ttfm = mb_elapsed(t0, mb_now());
    char line[64];
    int k = snprintf(line, sizeof line, "C %lld\n", (long long)(st ? -1 : (int64_t)ttfm));
    mb_write(fd, line, (size_t)k);
    if (st) {
        status = MB_COMPILE_ERROR;
        snprintf(reason, sizeof reason, "%s: %s", tr_status_name(st),
                 d.message[0] ? d.message : "no schema");
    } else {
        uint64_t *mask = malloc((c->nw + 1) * sizeof *mask);
        for (size_t i = 0; mask && i < json_array_size(tests); i++) {
            json_t *t = json_array_get(tests, i);
            bool valid = json_is_true(json_object_get(t, "valid"));
            char *inst = NULL;
            size_t il = 0, icap = 0;
            int32_t *ids = NULL;
            size_t nid = 0;
            bool usable = tr_grammar_json_dumps_py(json_object_get(t, "data"), &inst, &il, &icap) &&
                          tr_tokenizer_encode(c->tok, inst, il, false, &ids, &nid) == TR_OK;
            if (usable) { /* the tokens must spell the text exactly */
                size_t at = 0;
                for (size_t j = 0; j < nid && usable; j++) {
                    size_t tl;
                    const uint8_t *tb = tr_tokenizer_token_bytes(c->tok, ids[j], &tl);
                    usable = tb && at + tl <= il && !memcmp(inst + at, tb, tl);
                    at += tl;
                }
                usable = usable && at == il;
            }
            if (!usable) {
                skipped++;
            } else {
                bool acc, bad;
                size_t stop;
                mb_run_test(c, g, ids, nid, mask, &steps, &acc, &bad, &stop);
                n_tests++;
                incons += bad;
                if (acc && valid) vok++;
                else if (!acc && !valid) iok++;
                else if (valid) {
                    vrej++;
                    status = MB_VALIDATION_ERROR;
                    mb_rejected_at(c, i, inst, il, ids, nid, stop, reason, sizeof reason);
                } else {
                    iacc++;
                    status = MB_INVALIDATION_ERROR;
                    snprintf(reason, sizeof reason, "invalid test %zu accepted", i);
                }
            }
            free(inst);
            free(ids);
        }
        free(mask);
    }
    char *head = NULL;
    size_t hl = 0;
    FILE *mf = open_memstream(&head, &hl);
    if (mf) {
        for (char *p = reason; *p; p++)
            if (*p == '\n') *p = ' ';
        fprintf(mf, "R %d %d %d %d %d %d %d %d %zu\n%s\n", (int)status, n_tests, vok, iok, vrej,
                iacc, skipped, incons, steps.n, reason);
        fclose(mf);
        mb_write(fd, head, hl);
        mb_write(fd, steps.v, steps.n * sizeof *steps.v);
    }
    free(head);
    tr_grammar_free(g);
    free(text);
}

/* ---- the parent: run one schema in a child, with a deadline ---- */

typedef struct mb_buf {
    char *p;
    size_t n, cap;
} mb_buf;

static bool mb_buf_add(mb_buf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t c = b->cap ? b->cap * 2 : 4096;
        while (c < b->n + n + 1) c *= 2;
        char *p = realloc(b->p, c);
        if (!p) return false;
        b->p = p;
        b->cap = c;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
    return true;
}

static void mb_parse(const mb_buf *b, mb_rec *r) {
    const char *p = b->p ? b->p : "";
    if (p[0] == 'C') r->ttfm_ns = strtoll(p + 2, NULL, 10);
    const char *R = strstr(p, "\nR ");
    if (!R) return;
    int status;
    size_t ns;
    if (sscanf(R + 3, "%d %d %d %d %d %d %d %d %zu", &status, &r->n_tests, &r->valid_ok,
               &r->invalid_ok, &r->valid_rejected, &r->invalid_accepted, &r->skipped,
               &r->inconsistent, &ns) != 9)
        return;
    const char *nl = strchr(R + 1, '\n');
    const char *nl2 = nl ? strchr(nl + 1, '\n') : NULL;
    if (!nl2) return;
    snprintf(r->reason, sizeof r->reason, "%.*s", (int)(nl2 - nl - 1), nl + 1);
    size_t have = b->n - (size_t)(nl2 + 1 - b->p);
    if (have < ns * sizeof(int64_t)) return;
    r->status = (mb_status)status;
    r->steps = malloc((ns ? ns : 1) * sizeof *r->steps);
    if (r->steps) {
        memcpy(r->steps, nl2 + 1, ns * sizeof *r->steps);
        r->n_steps = ns;
    }
}

/* Whether b holds a whole record (the C line, the R line, the reason and
 * the n_steps samples). */
static bool mb_complete(const mb_buf *b) {
    const char *R = b->p ? strstr(b->p, "\nR ") : NULL;
    if (!R) return false;
    const char *nl = strchr(R + 1, '\n');
    const char *nl2 = nl ? strchr(nl + 1, '\n') : NULL;
    if (!nl2) return false;
    const char *sp = nl;
    while (sp > R + 1 && sp[-1] != ' ') sp--;
    size_t ns = (size_t)strtoull(sp, NULL, 10);
    return b->n - (size_t)(nl2 + 1 - b->p) >= ns * sizeof(int64_t);
}

static bool mb_read_full(int fd, void *p, size_t n) {
    while (n) {
        ssize_t k = read(fd, p, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return false;
        p = (char *)p + k;
        n -= (size_t)k;
    }
    return true;
}

/* The worker: schemas arrive on `in` as (uint64 length, JSON line), each
 * answered on `out` by mb_child's record; ends at EOF. As the peers'
 * workers (maskbench_peers.py), it first runs one small schema untimed, so
 * the first timed one does not pay the heap's first page faults: in a
 * fresh child every page the compile touches is a fault (~5 us here, 150
 * of them per compile: 2/3 of a fork-per-schema TTFM was kernel time). */
static void mb_worker_main(const mb_ctx *c, int in, int out, bool warm_up) {
    if (warm_up) {
        json_t *w = json_loads("{\"schema\": {\"type\": \"object\", \"properties\": "
                               "{\"a\": {\"type\": \"string\"}, \"b\": {\"type\": "
                               "\"integer\"}}, \"required\": [\"a\"]}, \"tests\": "
                               "[{\"valid\": true, \"data\": {\"a\": \"x y\", \"b\": 1}}]}",
                               0, NULL);
        int nul = open("/dev/null", O_WRONLY);
        if (w && nul >= 0) mb_child(c, w, nul);
        if (nul >= 0) close(nul);
        json_decref(w);
    }
    for (;;) {
        uint64_t len;
        if (!mb_read_full(in, &len, sizeof len) || len > ((uint64_t)1 << 34)) return;
        char *text = malloc((size_t)len + 1);
        if (!text || !mb_read_full(in, text, (size_t)len)) {
            free(text);
            return;
        }
        text[len] = 0;
        json_t *item = mb_load_line(text, (size_t)len, NULL);
        free(text);
        if (!item) item = json_object(); /* the parent read it: out of memory */
        mb_child(c, item, out);
        json_decref(item);
    }
}

/* The worker process (pid 0: none running). */
typedef struct mb_worker {
    pid_t pid;
    int to, from;
} mb_worker;

static void mb_worker_stop(mb_worker *w, bool kill_it, int *ws) {
    if (!w->pid) return;
    close(w->to);
    if (kill_it) kill(w->pid, SIGKILL);
    int st = 0;
    while (waitpid(w->pid, &st, 0) < 0 && errno == EINTR) {
    }
    close(w->from);
    if (ws) *ws = st;
    *w = (mb_worker){0};
}

static bool mb_worker_start(const mb_ctx *c, mb_worker *w, char *err, size_t cap) {
    int a[2], b[2];
    if (pipe(a) != 0) {
        snprintf(err, cap, "pipe: %s", strerror(errno));
        return false;
    }
    if (pipe(b) != 0) {
        snprintf(err, cap, "pipe: %s", strerror(errno));
        close(a[0]), close(a[1]);
        return false;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        close(a[1]);
        close(b[0]);
        mb_worker_main(c, a[0], b[1], !c->o->fork_each);
        _exit(0);
    }
    close(a[0]);
    close(b[1]);
    if (pid < 0) {
        snprintf(err, cap, "fork: %s", strerror(errno));
        close(a[1]), close(b[0]);
        return false;
    }
    *w = (mb_worker){pid, a[1], b[0]};
    return true;
}

static bool mb_write_all(int fd, const void *p, size_t n) {
    while (n) {
        ssize_t k = write(fd, p, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return false;
        p = (const char *)p + k;
        n -= (size_t)k;
    }
    return true;
}

/* Runs the schema line `text` in the worker (started if none runs), with
 * the deadline; a worker that timed out or died is replaced at the next
 * schema. --fork-each: a fresh worker for every schema, no warm-up. */
static void mb_run_schema(const mb_ctx *c, mb_worker *w, const char *text, mb_rec *r) {
    r->ttfm_ns = -1;
    r->status = MB_CRASH;
    uint64_t t0 = tr_now_ns();
    if (!w->pid && !mb_worker_start(c, w, r->reason, sizeof r->reason)) return;
    uint64_t len = strlen(text);
    mb_buf b = {0};
    bool timed_out = false, done = false;
    if (mb_write_all(w->to, &len, sizeof len) && mb_write_all(w->to, text, len)) {
        double limit_ms = c->o->timeout_s * 1000.0;
        while (!done) {
            double left = limit_ms - (double)(tr_now_ns() - t0) / 1e6;
            if (left <= 0) {
                timed_out = true;
                break;
            }
            struct pollfd pf = {w->from, POLLIN, 0};
            int pr = poll(&pf, 1, (int)TR_MIN(left, 1e9) + 1);
            if (pr < 0 && errno == EINTR) continue;
            if (pr <= 0) continue;
            char chunk[65536];
            ssize_t k = read(w->from, chunk, sizeof chunk);
            if (k < 0 && errno == EINTR) continue;
            if (k <= 0) break;
            if (!mb_buf_add(&b, chunk, (size_t)k)) break;
            done = mb_complete(&b);
        }
    }
    int ws = 0;
    if (!done || c->o->fork_each) mb_worker_stop(w, timed_out || !done, &ws);
    r->elapsed_s = (double)(tr_now_ns() - t0) / 1e9;
    mb_parse(&b, r);
    free(b.p);
    if (timed_out) {
        r->status = MB_TIMEOUT;
        snprintf(r->reason, sizeof r->reason, "over %.0f s", c->o->timeout_s);
        free(r->steps);
        r->steps = NULL;
        r->n_steps = 0;
    } else if (r->status == MB_CRASH) {
        if (WIFSIGNALED(ws))
            snprintf(r->reason, sizeof r->reason, "killed by signal %d", WTERMSIG(ws));
        else if (!r->reason[0])
            snprintf(r->reason, sizeof r->reason, "exit status %d, no result", WEXITSTATUS(ws));
    }
}

/* ---- summary ---- */

static double mb_pct(const int64_t *s, size_t n, double p) {
    size_t i = (size_t)((double)n * p / 100.0);
    return (double)s[i < n ? i : n - 1];
}

typedef struct mb_sum {
    mb_i64 tbm, ttfm;
    long counts[MB_N_STATUS];
    long tests, skipped, inconsistent, schemas;
} mb_sum;

/* "NAME avg": .., "NAME p25": .. (µs) for the JSON summary; sorts a. */
static void mb_row(FILE *f, const char *name, mb_i64 *a, bool *first) {
    qsort(a->v, a->n, sizeof *a->v, mb_cmp_i64);
    double avg = 0;
    for (size_t i = 0; i < a->n; i++) avg += (double)a->v[i];
    fprintf(f, "%s\"%s avg\": ", *first ? "" : ", ", name);
    *first = false;
    if (a->n)
        fprintf(f, "%.3f", avg / (double)a->n / 1e3);
    else
        fprintf(f, "null");
    for (int k = 0; k < MB_PCTS; k++) {
        fprintf(f, ", \"%s p%g\": ", name, mb_pcts[k]);
        if (a->n)
            fprintf(f, "%.3f", mb_pct(a->v, a->n, mb_pcts[k]) / 1e3);
        else
            fprintf(f, "null");
    }
}

static void mb_fmt(char *buf, size_t cap, double us) {
    if (us < 10) snprintf(buf, cap, "%.1f", us);
    else snprintf(buf, cap, "%.0f", us);
}

/* The summary as a markdown table (expects sorted samples). */
static void mb_table(FILE *out, const mb_sum *s) {
    fprintf(out, "| metric | Trellis |\n|:--|--:|\n");
    const mb_i64 *arr[2] = {&s->tbm, &s->ttfm};
    const char *nm[2] = {"TBM", "TTFM"};
    for (int a = 0; a < 2; a++) {
        const mb_i64 *x = arr[a];
        char v[32];
        double avg = 0;
        for (size_t i = 0; i < x->n; i++) avg += (double)x->v[i];
        if (x->n) mb_fmt(v, sizeof v, avg / (double)x->n / 1e3);
        fprintf(out, "| %s avg | %s |\n", nm[a], x->n ? v : "-");
        for (int k = 0; k < MB_PCTS; k++) {
            if (x->n) mb_fmt(v, sizeof v, mb_pct(x->v, x->n, mb_pcts[k]) / 1e3);
            fprintf(out, "| %s p%g | %s |\n", nm[a], mb_pcts[k], x->n ? v : "-");
        }
    }
    fprintf(out, "| tokens | %zu |\n| schemas | %ld |\n", s->tbm.n, s->schemas);
    static const char *const rows[MB_N_STATUS] = {"passing", "compile error", "validation error",
                                                  "invalidation error", "timeout", "crash"};
    for (int k = 0; k < MB_N_STATUS; k++) fprintf(out, "| %s | %ld |\n", rows[k], s->counts[k]);
}

static void mb_json(mb_sum *s, const mb_opts *o) {
    bool first = true;
    printf("{\"engine\": \"Trellis\", \"summary\": {");
    mb_row(stdout, "TBM", &s->tbm, &first);
    mb_row(stdout, "TTFM", &s->ttfm, &first);
    printf(", \"tokens\": %zu, \"schemas\": %ld", s->tbm.n, s->schemas);
    static const char *const keys[MB_N_STATUS] = {"passing", "compile error", "validation error",
                                                  "invalidation error", "timeout", "crash"};
    for (int k = 0; k < MB_N_STATUS; k++) printf(", \"%s\": %ld", keys[k], s->counts[k]);
    printf("}, \"extra\": {\"tests run\": %ld, \"tests skipped (tokens do not spell the text)\": %ld,"
           " \"mask/advance disagreements\": %ld}, \"config\": {\"mode\": \"%s\", \"whitespace\": "
           "\"flexible\", \"json_numbers\": \"full\", \"property_order\": \"%s\", \"timeout_s\": %g, "
           "\"clock\": \"%s\", \"data\": \"%s\"}}\n",
           s->tests, s->skipped, s->inconsistent, o->lenient ? "lenient" : "strict",
           o->any_order ? "any" : "schema", o->timeout_s, o->cpu ? "thread_cpu" : "wall", o->data);
}

/* Most frequent compile-error reasons, JSON pointers, quoted names and
 * a budget's "(while building the rule for ...)" blanked so that one
 * kind of refusal counts once. */
typedef struct mb_reason {
    char text[200];
    long n;
} mb_reason;

static void mb_generalize(const char *in, char *out, size_t cap) {
    size_t k = 0;
    const char *p = strchr(in, ':');
    p = p ? p + 1 : in;
    if (strncmp(in, "TR_ERR_", 7) == 0) { /* "TR_ERR_X: /ptr: msg" */
        const char *q = strstr(p, ": ");
        if (q && (p[1] == '/' || p[1] == '#')) p = q + 1;
    }
    while (*p == ' ') p++;
    bool quoted = false;
    for (; *p && k + 2 < cap; p++) {
        if (*p == '"') {
            quoted = !quoted;
            if (quoted) out[k++] = '"', out[k++] = 'X';
            else out[k++] = '"';
            continue;
        }
        if (!quoted) out[k++] = *p;
    }
    out[k] = 0;
    char *where = strstr(out, " (while building the rule for ");
    if (where) *where = 0;
}

static void mb_reasons(mb_rec *recs, size_t n, int top) {
    mb_reason *rs = calloc(n ? n : 1, sizeof *rs);
    size_t nr = 0;
    if (!rs) return;
    for (size_t i = 0; i < n; i++) {
        if (recs[i].status != MB_COMPILE_ERROR) continue;
        char g[200];
        mb_generalize(recs[i].reason, g, sizeof g);
        size_t j = 0;
        while (j < nr && strcmp(rs[j].text, g)) j++;
        if (j == nr) snprintf(rs[nr++].text, sizeof rs->text, "%s", g);
        rs[j].n++;
    }
    for (int t = 0; t < top; t++) {
        size_t best = SIZE_MAX;
        for (size_t j = 0; j < nr; j++)
            if (rs[j].n && (best == SIZE_MAX || rs[j].n > rs[best].n)) best = j;
        if (best == SIZE_MAX) break;
        fprintf(stderr, "  %5ld  %s\n", rs[best].n, rs[best].text);
        rs[best].n = 0;
    }
    free(rs);
}

static void mb_csv_row(FILE *f, size_t idx, const mb_rec *r) {
    double sum = 0, mx = 0;
    for (size_t i = 0; i < r->n_steps; i++) {
        sum += (double)r->steps[i];
        mx = TR_MAX(mx, (double)r->steps[i]);
    }
    fprintf(f, "%zu,\"%s\",%s,\"", idx, r->id, mb_status_name[r->status]);
    for (const char *p = r->reason; *p; p++) fputs(*p == '"' ? "\"\"" : (char[2]){*p, 0}, f);
    fprintf(f, "\",");
    if (r->ttfm_ns >= 0) fprintf(f, "%.1f", (double)r->ttfm_ns / 1e3);
    fprintf(f, ",%d,%d,%d,%d,%d,%d,%d,%zu,", r->n_tests, r->valid_ok, r->invalid_ok,
            r->valid_rejected, r->invalid_accepted, r->skipped, r->inconsistent, r->n_steps);
    if (r->n_steps)
        fprintf(f, "%.2f,%.1f,%.2f", sum / (double)r->n_steps / 1e3, mx / 1e3,
                sum / (double)r->n_steps / 1e3);
    else
        fprintf(f, ",,");
    fprintf(f, ",%.3f\n", r->elapsed_s);
}

/* ---- options ---- */

/* The flags into *o; -1 to go on, else the exit status. */
static int mb_parse_args(int argc, char **argv, mb_opts *o) {
    *o = (mb_opts){.timeout_s = 60, .mem_gb = 8};
    int64_t limit = 0, reasons = 15;
    int clock = 0;
    bool help = false;
    cli_strs files = {0};
    const cli_opt opts[] = {
        {"--model", "-m", CLI_STR, &o->model, 1, 0,
         "GGUF whose tokenizer and vocabulary are used", "the cached default model",
         .meta = "FILE"},
        {"--limit", NULL, CLI_INT, &limit, 1, 1e9, "first N schemas only", "all"},
        {"--timeout", NULL, CLI_FLOAT, &o->timeout_s, 0.01, 86400,
         "seconds per schema, compile + tests", "60", .meta = "S"},
        {"--json", NULL, CLI_FLAG, &o->json, 1, 0,
         "summary as JSON on stdout (table on stderr)", "off"},
        {"--csv", NULL, CLI_STR, &o->csv, 1, 0, "one row per schema", .meta = "OUT"},
        {"--lenient", NULL, CLI_FLAG, &o->lenient, 1, 0,
         "lenient JSON Schema mode", "off: strict"},
        {"--mem-limit-gb", NULL, CLI_FLOAT, &o->mem_gb, 0, 1e6,
         "extra address space per schema; 0 = none", "8", .meta = "G"},
        {"--reasons", NULL, CLI_INT, &reasons, 0, 1000,
         "most frequent compile-error reasons listed", "15"},
        {"--clock", NULL, CLI_ENUM, &clock, 1, 0,
         "TBM and TTFM in wall time (as the peers' runner) or in this thread's CPU time "
         "(a loaded machine)", "wall", .choices = "wall|cpu"},
        {"--quiet", NULL, CLI_FLAG, &o->quiet, 1, 0, "no progress on stderr", "off"},
        {"--fork-each", NULL, CLI_FLAG, &o->fork_each, 1, 0,
         "a fresh child per schema, no warm-up (default: one worker process, replaced "
         "after a timeout or crash, warmed up by one untimed schema, as the peers' runner "
         "does)", "off"},
        {"--property-order", NULL, CLI_ENUM, &o->any_order, 1, 0,
         "object properties in the order of `properties` (the peers' setting) or in any "
         "order (each at most once, required ones before `}`)", "schema",
         .choices = "schema|any"},
    };
    const cli_cmd c = {.name = "bench maskbench", .usage = "FILE.jsonl[.gz] [options]",
                       .opts = opts, .n_opts = sizeof opts / sizeof opts[0],
                       .operands = &files,
                       .epilog = "\nSchemas compile with flexible whitespace and full JSON numbers "
                                 "(generate's --json-numbers full): the tests are Python's "
                                 "json.dumps of the data, which may write 1.0 for an integer.\n"};
    if (!tr_cli_parse(&c, argc - 1, argv + 1, &help)) return 2;
    if (help) return 0;
    if (files.n != 1) {
        fprintf(stderr, "trellis bench maskbench: %s (see trellis bench maskbench --help)\n",
                files.n ? "one data file only" : "no data file given");
        return 2;
    }
    o->data = files.items[0];
    o->limit = (long)limit, o->reasons = (int)reasons, o->cpu = clock == 1;
    return -1;
}

/* ---- main ---- */

static bool mb_load(const mb_opts *o, gguf_file **f, mb_ctx *c) {
    char path[4096];
    const char *mp = o->model ? o->model : tr_default_model_path(path, sizeof path);
    tr_diag d = {0};
    tr_status st = mp ? tr_gguf_open(mp, f, &d) : TR_ERR_NOT_FOUND;
    if (!st) st = tr_tokenizer_from_gguf(*f, &c->tok, &d);
    if (!st) st = tr_vocab_from_tokenizer(c->tok, &c->v, &d);
    if (st) {
        fprintf(stderr, "trellis bench maskbench: %s: %s\n", mp ? mp : "(no model path)",
                d.message[0] ? d.message : tr_status_message(st));
        return false;
    }
    c->eos = tr_tokenizer_eos(c->tok);
    c->nw = tr_grammar_vocab_mask_words(c->v);
    if (c->eos < 0) {
        fprintf(stderr, "trellis bench maskbench: %s: the tokenizer has no EOS token\n", mp);
        return false;
    }
    return true;
}

static void mb_add(mb_sum *s, const mb_rec *r, double timeout_s) {
    s->schemas++;
    s->counts[r->status]++;
    s->tests += r->n_tests;
    s->skipped += r->skipped;
    s->inconsistent += r->inconsistent;
    if (r->ttfm_ns >= 0)
        mb_push(&s->ttfm, r->ttfm_ns);
    else if (r->status == MB_TIMEOUT)
        mb_push(&s->ttfm, (int64_t)(timeout_s * 1e9));
    if (r->status != MB_TIMEOUT && r->status != MB_CRASH)
        for (size_t i = 0; i < r->n_steps; i++) mb_push(&s->tbm, r->steps[i]);
}

int tr_bench_maskbench(int argc, char **argv) {
    mb_opts o;
    int rc = mb_parse_args(argc, argv, &o);
    if (rc >= 0) return rc;
    rc = 0;
    gzFile in = gzopen(o.data, "rb");
    if (!in) {
        fprintf(stderr, "trellis bench maskbench: cannot open %s: %s\n", o.data, strerror(errno));
        return 1;
    }
    gguf_file *f = NULL;
    mb_ctx c = {.o = &o};
    FILE *csv = NULL;
    if (!mb_load(&o, &f, &c)) {
        gzclose(in);
        tr_tokenizer_free(c.tok);
        tr_gguf_close(f);
        return 1;
    }
    if (o.csv && !(csv = fopen(o.csv, "w"))) {
        fprintf(stderr, "trellis bench maskbench: cannot write %s: %s\n", o.csv, strerror(errno));
        rc = 1;
        goto out;
    }
    if (csv)
        fprintf(csv, "index,id,status,reason,ttfm_us,n_tests,valid_ok,invalid_ok,valid_rejected,"
                     "invalid_accepted,test_errors,mask_inconsistent,tokens,tbm_avg_us,"
                     "tbm_max_us,mask_avg_us,elapsed_s\n");
    mb_sum sum = {0};
    mb_rec *recs = NULL;
    size_t nrec = 0, caprec = 0;
    char *line = NULL;
    size_t cap = 0;
    uint64_t t_all = tr_now_ns();
    mb_worker worker = {0};
    signal(SIGPIPE, SIG_IGN); /* a dead worker's pipe: write fails, recorded as a crash */
    for (long k = 0; (!o.limit || k < o.limit) && mb_getline(in, &line, &cap); k++) {
        json_error_t je;
        json_t *item = mb_load_line(line, strlen(line), &je);
        if (nrec == caprec) {
            caprec = caprec ? caprec * 2 : 1024;
            mb_rec *p = realloc(recs, caprec * sizeof *p);
            if (!p) {
                json_decref(item);
                rc = 1;
                break;
            }
            recs = p;
        }
        mb_rec *r = &recs[nrec++];
        memset(r, 0, sizeof *r);
        r->ttfm_ns = -1;
        if (!item) {
            r->status = MB_COMPILE_ERROR;
            snprintf(r->id, sizeof r->id, "%ld", k);
            snprintf(r->reason, sizeof r->reason, "line %ld is not readable JSON: %s", k + 1,
                     je.text);
        } else {
            json_t *id = json_object_get(item, "id");
            if (json_is_string(id))
                snprintf(r->id, sizeof r->id, "%s", json_string_value(id));
            else
                snprintf(r->id, sizeof r->id, "%ld", k);
            mb_run_schema(&c, &worker, line, r);
            json_decref(item);
        }
        mb_add(&sum, r, o.timeout_s);
        if (csv) mb_csv_row(csv, (size_t)k, r);
        free(r->steps);
        r->steps = NULL;
        if (!o.quiet && (k + 1) % 100 == 0)
            fprintf(stderr, "  %ld schemas: %ld passing, %.0f s\n", k + 1,
                    sum.counts[MB_PASSING], (double)(tr_now_ns() - t_all) / 1e9);
    }
    mb_worker_stop(&worker, false, NULL);
    free(line);
    /* qsort(NULL, 0, ...) is undefined: no samples when every schema failed */
    if (sum.tbm.n) qsort(sum.tbm.v, sum.tbm.n, sizeof *sum.tbm.v, mb_cmp_i64);
    if (sum.ttfm.n) qsort(sum.ttfm.v, sum.ttfm.n, sizeof *sum.ttfm.v, mb_cmp_i64);
    mb_table(o.json ? stderr : stdout, &sum);
    if (o.json) mb_json(&sum, &o);
    fprintf(stderr,
            "\nTimes in µs (%s). TBM = mask + check + advance per token; TTFM = compile; %ld "
            "schemas of %s; %ld tests run, %ld skipped (tokens do not spell the text), %ld "
            "mask/advance disagreements; %s mode, flexible whitespace, full numbers, %s "
            "property order, timeout %g s.\n",
            o.cpu ? "thread CPU time" : "wall clock", sum.schemas, o.data, sum.tests, sum.skipped, sum.inconsistent,
            o.lenient ? "lenient" : "strict", o.any_order ? "any" : "schema", o.timeout_s);
    if (o.reasons && sum.counts[MB_COMPILE_ERROR]) {
        fprintf(stderr, "most frequent compile-error reasons:\n");
        mb_reasons(recs, nrec, o.reasons);
    }
    free(sum.tbm.v);
    free(sum.ttfm.v);
    free(recs);
out:
    if (csv) fclose(csv);
    gzclose(in);
    tr_grammar_vocab_free(c.v);
    tr_tokenizer_free(c.tok);
    tr_gguf_close(f);
    return rc;
}
