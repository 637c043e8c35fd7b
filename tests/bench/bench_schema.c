/* bench_schema.c — where JSON Schema grammars spend their time, in one
 * process (so that callgrind and perf can see it): the MaskBench
 * protocol of `trellis bench maskbench` without the forked child per
 * schema, with the compile split into its phases and every time taken
 * as this thread's CPU time. Not a test: never run by ctest.
 *
 *   bench_schema FILE.jsonl[.gz] [--from K] [--every E] [--limit N]
 *                [--only ID] [--dump] [--csv OUT] [--no-tests] [--quiet]
 *                [--any-order]
 *
 * --every E runs one schema in E (a sample spread over the whole file).
 * --any-order compiles with property_order ANY (maskbench --property-order
 * any).
 *
 * Per schema: text (json_schema_to_ebnf; it may refuse what compiles, since
 * automata and the uniqueItems tracker have no text: counted, text_us -1
 * in the CSV, and the compile runs anyway), compile (the whole of
 * tr_grammar_compile_json_schema: MaskBench's TTFM), then every test as
 * MaskBench runs it (json.dumps text, the model's tokens, from a fresh
 * matcher: fill_mask + check + accept per token = TBM, EOS at the end).
 * --dump prints the grammar text of the schemas run (with --only: one).
 * The summary has MaskBench's rows, TBM split into cold steps (the mask
 * was computed: a state the grammar had not met) and warm ones (from the
 * memo); the CSV one line per schema with the
 * grammar's stats (NFA states, rules kept, DFA states made by the end).
 *
 * Clock: CLOCK_THREAD_CPUTIME_ID (a system call, ~600 ns here), minus
 * the least cost of a back-to-back pair, so figures hold on a loaded
 * machine; under callgrind, compare instruction counts instead
 * (`valgrind --tool=callgrind --toggle-collect=...`).
 */
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/paths.h"
#include "grammar/grammar.h"
#include "runtime/gguf/gguf.h"
#include "runtime/tokenizer/tokenizer.h"
#include "tests/unit/test_grammar_util.h"

typedef struct i64s {
    int64_t *v;
    size_t n, cap;
} i64s;

static void push(i64s *s, int64_t x) {
    if (s->n == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 1024;
        s->v = realloc(s->v, s->cap * sizeof *s->v);
        if (!s->v) abort();
    }
    s->v[s->n++] = x;
}

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

static uint64_t cpu_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}
static uint64_t g_over;
static int64_t since(uint64_t t0) {
    uint64_t d = cpu_ns() - t0;
    return d > g_over ? (int64_t)(d - g_over) : 0;
}

typedef struct opts {
    const char *file, *only, *csv;
    long from, every, limit;
    bool dump, no_tests, quiet, any_order;
} opts;

static tokenizer *g_tok;
static grammar_vocab *g_vocab;
static int32_t g_eos = -1;

static bool load(void) {
    char path[4096];
    if (!tr_default_model_path(path, sizeof path)) return false;
    gguf_file *f;
    tr_diag d;
    if (tr_gguf_open(path, &f, &d) != TR_OK) return false;
    if (tr_tokenizer_from_gguf(f, &g_tok, &d) != TR_OK) return false;
    g_vocab = tg_vocab_smollm2();
    for (int32_t i = 0; g_vocab && i < tr_grammar_vocab_n_vocab(g_vocab); i++)
        if (tr_grammar_vocab_is_eog(g_vocab, i)) {
            g_eos = i;
            break;
        }
    return g_vocab && g_eos >= 0;
}

typedef struct result {
    int64_t text_ns, compile_ns;
    bool text_ok; /* the text export succeeded (it may refuse what compiles:
                     automata and the uniqueItems tracker have no text) */
    int status; /* 0 pass, 1 compile error, 2 valid rejected, 3 invalid accepted */
    char reason[420];
    size_t tokens;
    int64_t tbm_sum, tbm_max;
    grammar_stats st;
} result;

/* One test from a fresh matcher; true when every token passed and EOS closed it. */
/* TBM split by whether the step's mask was computed (a state this
 * grammar had not met: cold) or read from the memo (warm). */
static i64s g_tbm_cold, g_tbm_warm;

static bool run_test(grammar *g, const int32_t *ids, size_t n, uint64_t *mask, size_t nw,
                     i64s *tbm, result *r) {
    grammar_matcher *m = NULL;
    if (tr_grammar_matcher_new(g, g_vocab, 0, &m) != TR_OK) return false;
    bool ok = true;
    for (size_t i = 0; i < n && ok; i++) {
        uint64_t c0, c1;
        tr_grammar_matcher_mask_counts(m, NULL, &c0);
        uint64_t t0 = cpu_ns();
        tr_grammar_matcher_fill_mask(m, mask, nw);
        int32_t id = ids[i];
        bool bit = (mask[id >> 6] >> (id & 63)) & 1;
        tr_status ast = bit ? tr_grammar_matcher_accept_token(m, id) : TR_OK;
        ok = bit && ast == TR_OK;
        int64_t dt = since(t0);
        if (bit && !ok) /* a defect: maskbench counts these */
            fprintf(stderr, "mask/accept disagree at token %zu (id %d): %s\n", i, id,
                    tr_status_name(ast));
        push(tbm, dt);
        tr_grammar_matcher_mask_counts(m, NULL, &c1);
        push(c1 != c0 ? &g_tbm_cold : &g_tbm_warm, dt);
        r->tokens++;
        r->tbm_sum += dt;
        if (dt > r->tbm_max) r->tbm_max = dt;
    }
    if (ok) {
        tr_grammar_matcher_fill_mask(m, mask, nw);
        ok = ((mask[g_eos >> 6] >> (g_eos & 63)) & 1) && tr_grammar_matcher_is_accepting(m);
    }
    tr_grammar_matcher_free(m);
    return ok;
}

static void run_schema(const opts *o, json_t *item, i64s *tbm, i64s *ttfm, result *r) {
    memset(r, 0, sizeof *r);
    json_t *schema = json_object_get(item, "schema");
    char *text = schema ? json_dumps(schema, JSON_ENCODE_ANY | JSON_COMPACT) : NULL;
    if (!text) {
        r->status = 1;
        snprintf(r->reason, sizeof r->reason, "no schema");
        return;
    }
    grammar_json_options jo;
    tr_grammar_json_options_default(&jo);
    jo.numbers = GRAMMAR_JSON_NUM_FULL; /* as maskbench */
    if (o->any_order) jo.property_order = GRAMMAR_JSON_ORDER_ANY;
    grammar_limits lim;
    tr_grammar_limits_default(&lim);
    lim.max_compile_us = 60000000; /* as maskbench --timeout 60 */
    tr_diag d = {0};
    char *gtext = NULL;
    size_t glen = 0;
    uint64_t t0 = cpu_ns();
    tr_status st = tr_grammar_json_schema_to_ebnf(text, strlen(text), &jo, &lim, &gtext, &glen,
                                                  &d);
    r->text_ns = since(t0);
    r->text_ok = st == TR_OK;
    if (r->text_ok && o->dump)
        printf("# %s\n%s\n", json_string_value(json_object_get(item, "id")), gtext);
    free(gtext);
    grammar *g = NULL;
    memset(&d, 0, sizeof d);
    t0 = cpu_ns();
    st = tr_grammar_compile_json_schema(text, strlen(text), &jo, &lim, &g, &d);
    r->compile_ns = since(t0);
    free(text);
    if (st) {
        r->status = 1;
        snprintf(r->reason, sizeof r->reason, "%s: %s", tr_status_name(st), d.message);
        return;
    }
    push(ttfm, r->compile_ns);
    size_t nw = tr_grammar_vocab_mask_words(g_vocab);
    uint64_t *mask = malloc((nw + 1) * sizeof *mask);
    json_t *tests = json_object_get(item, "tests");
    for (size_t i = 0; !o->no_tests && i < json_array_size(tests); i++) {
        json_t *t = json_array_get(tests, i);
        bool valid = json_is_true(json_object_get(t, "valid"));
        char *inst = NULL;
        size_t il = 0, icap = 0;
        if (!tr_grammar_json_dumps_py(json_object_get(t, "data"), &inst, &il, &icap)) continue;
        int32_t *ids = NULL;
        size_t n = 0;
        if (tr_tokenizer_encode(g_tok, inst, il, false, &ids, &n) == TR_OK) {
            bool acc = run_test(g, ids, n, mask, nw, tbm, r);
            if (acc != valid) r->status = valid ? 2 : 3;
        }
        free(ids);
        free(inst);
    }
    free(mask);
    tr_grammar_get_stats(g, &r->st);
    tr_grammar_free(g);
}

static double pct(const i64s *s, double p) {
    if (!s->n) return 0;
    size_t i = (size_t)((double)s->n * p / 100.0);
    if (i >= s->n) i = s->n - 1;
    return (double)s->v[i] / 1e3;
}

static void row(const char *name, i64s *s) {
    qsort(s->v, s->n, sizeof *s->v, cmp_i64);
    double avg = 0;
    for (size_t i = 0; i < s->n; i++) avg += (double)s->v[i];
    avg = s->n ? avg / (double)s->n / 1e3 : 0;
    printf("%-5s avg %9.1f  p25 %8.1f  p50 %8.1f  p75 %8.1f  p90 %9.1f  p99 %9.1f  "
           "p100 %10.1f  (n=%zu)\n",
           name, avg, pct(s, 25), pct(s, 50), pct(s, 75), pct(s, 90), pct(s, 99), pct(s, 100),
           s->n);
}

static char *next_line(FILE *f, char **buf, size_t *cap) {
    ssize_t k = getline(buf, cap, f);
    return k < 0 ? NULL : *buf;
}

int main(int argc, char **argv) {
    opts o = {0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--from") && v) o.from = atol(v), i++;
        else if (!strcmp(a, "--limit") && v) o.limit = atol(v), i++;
        else if (!strcmp(a, "--every") && v) o.every = atol(v), i++;
        else if (!strcmp(a, "--only") && v) o.only = v, i++;
        else if (!strcmp(a, "--csv") && v) o.csv = v, i++;
        else if (!strcmp(a, "--dump")) o.dump = true;
        else if (!strcmp(a, "--no-tests")) o.no_tests = true;
        else if (!strcmp(a, "--any-order")) o.any_order = true;
        else if (!strcmp(a, "--quiet")) o.quiet = true;
        else if (a[0] != '-' && !o.file) o.file = a;
        else {
            fprintf(stderr, "usage: bench_schema FILE.jsonl[.gz] [--from K] [--every E] [--limit N] "
                            "[--only ID] [--dump] [--csv OUT] [--no-tests] [--quiet] [--any-order]\n");
            return 2;
        }
    }
    if (!o.file || !load()) {
        fprintf(stderr, "bench_schema: need a data file and the default model\n");
        return 2;
    }
    g_over = UINT64_MAX;
    for (int i = 0; i < 2000; i++) {
        uint64_t a = cpu_ns(), b = cpu_ns();
        if (b - a < g_over) g_over = b - a;
    }
    size_t fl = strlen(o.file);
    bool gz = fl > 3 && !strcmp(o.file + fl - 3, ".gz");
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "gzip -dc '%s'", o.file);
    FILE *in = gz ? popen(cmd, "r") : fopen(o.file, "r");
    FILE *csv = o.csv ? fopen(o.csv, "w") : NULL;
    if (!in) return 1;
    if (csv)
        fprintf(csv, "index,id,status,reason,text_us,compile_us,tokens,tbm_avg_us,tbm_max_us,"
                     "nfa_states,rules_kept,dfa_states\n");
    i64s tbm = {0}, ttfm = {0}, text = {0};
    long counts[4] = {0}, k = 0, done = 0, text_refused = 0, unread = 0;
    char *line = NULL;
    size_t cap = 0;
    for (; next_line(in, &line, &cap); k++) {
        if (k < o.from || (o.every > 1 && (k - o.from) % o.every)) continue;
        if (o.limit && done >= o.limit) break;
        json_t *item = json_loads(line, 0, NULL);
        if (!item) { /* jansson refuses integers beyond 64 bits: maskbench reads them */
            unread++;
            continue;
        }
        const char *id = json_string_value(json_object_get(item, "id"));
        if (o.only && (!id || strcmp(id, o.only))) {
            json_decref(item);
            continue;
        }
        result r;
        run_schema(&o, item, &tbm, &ttfm, &r);
        if (r.text_ok && (!r.status || r.status > 1)) push(&text, r.text_ns);
        text_refused += !r.text_ok && r.status != 1;
        counts[r.status]++;
        done++;
        if (csv) {
            for (char *p = r.reason; *p; p++)
                if (*p == '"' || *p == '\n') *p = '\'';
            fprintf(csv, "%ld,\"%s\",%d,\"%s\",%.1f,%.1f,%zu,%.2f,%.1f,%u,%u,%u\n", k,
                    id ? id : "", r.status, r.reason, r.text_ok ? (double)r.text_ns / 1e3 : -1.0,
                    (double)r.compile_ns / 1e3, r.tokens,
                    r.tokens ? (double)r.tbm_sum / (double)r.tokens / 1e3 : 0,
                    (double)r.tbm_max / 1e3, r.st.nfa_states, r.st.rules_kept,
                    r.st.dfa_states);
        }
        if (!o.quiet && r.status == 1) fprintf(stderr, "%ld %s: %s\n", k, id, r.reason);
        json_decref(item);
    }
    free(line);
    if (gz) pclose(in);
    else fclose(in);
    if (csv) fclose(csv);
    printf("thread CPU time, us (clock overhead %.2f us subtracted)\n", (double)g_over / 1e3);
    row("TBM", &tbm);
    row("cold", &g_tbm_cold);
    row("warm", &g_tbm_warm);
    row("TTFM", &ttfm);
    row("text", &text);
    if (unread) printf("lines jansson cannot read, skipped: %ld\n", unread);
    printf("schemas %ld: passing %ld, compile error %ld, valid rejected %ld, invalid accepted "
           "%ld; text export refused %ld of those that compiled\n",
           done, counts[0], counts[1], counts[2], counts[3], text_refused);
    free(tbm.v), free(ttfm.v), free(text.v), free(g_tbm_cold.v), free(g_tbm_warm.v);
    tr_grammar_vocab_free(g_vocab);
    tr_tokenizer_free(g_tok);
    return 0;
}
