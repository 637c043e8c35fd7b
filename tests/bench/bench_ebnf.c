/* bench_ebnf.c — what EBNF grammars cost: compile time, time to first
 * mask, and per-token mask + accept time, single thread, on the default
 * model's vocabulary (SmolLM2: 49,152 tokens). Not a test: never run by
 * ctest.
 *
 *   bench_ebnf [--dir DIR] [--only a,b] [--rounds N] [--reps N]
 *              [--walk N] [--csv FILE]
 *
 * Every DIR/NAME.gbnf (default: this tree's tests/data/grammar/ebnf) is
 * compiled `reps` times (compile = time to compile; TTFM = compile plus
 * the first fill_mask of a fresh matcher). Token workload: the documents
 * of NAME.txt (separated by lines "%%"), tokenized with the model's
 * tokenizer, then a random walk of `walk` tokens drawn uniformly among
 * the allowed ones; each token costs one fill_mask and one accept_token
 * (TBM, MaskBench's "time between masks"); EOG at the end of each
 * document. The first pass runs on a freshly compiled grammar (its mask
 * memo empty: what a new request sees; "cold" masks are those the matcher
 * had to compute, tr_grammar_matcher_mask_counts); the replay runs the
 * same tokens again on the same grammar (all warm). Rounds repeat the
 * whole thing with fresh grammars and keep each call's fastest time, so
 * that a shared machine's preemption spikes go while a slow path stays
 * (a cold call is cold in every round).
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"
#include "base/util.h"
#include "tests/unit/test_grammar_util.h"

typedef struct samples {
    double *v;
    size_t n, cap;
} samples;

static void put(samples *s, double x) {
    if (s->n == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 256;
        s->v = realloc(s->v, s->cap * sizeof *s->v);
        if (!s->v) abort();
    }
    s->v[s->n++] = x;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double pct(samples *s, double p) {
    if (!s->n) return 0;
    qsort(s->v, s->n, sizeof *s->v, cmp_d);
    size_t i = (size_t)(p / 100.0 * (double)(s->n - 1) + 0.5);
    return s->v[i];
}

static double us(uint64_t ns) { return (double)ns / 1000.0; }

/* One timed call of the token workload: its fastest time over rounds. */
typedef struct call {
    uint64_t mask_ns, accept_ns;
    bool cold;
} call;

typedef struct workload {
    int32_t *toks; /* -1 ends a document (then reset) */
    size_t n;
} workload;

static tokenizer *g_tok;
static grammar_vocab *g_vocab;

static bool load_model(void) {
    char path[4096];
    if (!tr_default_model_path(path, sizeof path)) return false;
    gguf_file *f;
    tr_diag d;
    if (tr_gguf_open(path, &f, &d) != TR_OK) {
        fprintf(stderr, "%s: %s\n", path, d.message);
        return false;
    }
    if (tr_tokenizer_from_gguf(f, &g_tok, &d) != TR_OK) {
        fprintf(stderr, "tokenizer: %s\n", d.message);
        return false;
    }
    g_vocab = tg_vocab_smollm2();
    return g_vocab != NULL;
}

/* The documents of a samples file, tokenized, then a random walk. */
static void build_workload(grammar *g, const char *txt_path, int walk, workload *w) {
    size_t len = 0;
    char *text = tg_read_file(txt_path, &len);
    w->n = 0;
    size_t cap = 1024;
    w->toks = malloc(cap * sizeof *w->toks);
    char *doc = text;
    while (text && doc && *doc) {
        char *sep = strstr(doc, "\n%%\n");
        size_t dl = sep ? (size_t)(sep - doc) + 1 : strlen(doc);
        int32_t *ids;
        size_t n;
        if (tr_tokenizer_encode(g_tok, doc, dl, false, &ids, &n) == TR_OK) {
            /* keep the document only if the grammar accepts it (with
             * its final newline, or else without) */
            if (!tr_grammar_matches(g, doc, dl) && dl > 0 && doc[dl - 1] == '\n') {
                free(ids);
                dl--;
                if (tr_tokenizer_encode(g_tok, doc, dl, false, &ids, &n) != TR_OK) break;
            }
            if (tr_grammar_matches(g, doc, dl)) {
                while (w->n + n + 1 > cap) cap *= 2, w->toks = realloc(w->toks, cap * 4);
                memcpy(w->toks + w->n, ids, n * sizeof *ids);
                w->n += n;
                w->toks[w->n++] = -1;
            } else {
                fprintf(stderr, "  (a document of %s does not match its grammar; "
                                "skipped)\n", txt_path);
            }
            free(ids);
        }
        doc = sep ? sep + 4 : NULL;
    }
    free(text);
    /* a random walk: uniform among the allowed tokens, EOG only at the end */
    grammar_matcher *m;
    if (tr_grammar_matcher_new(g, g_vocab, 0, &m) != TR_OK) return;
    size_t nw = tr_grammar_vocab_mask_words(g_vocab);
    uint64_t *mask = malloc(nw * 8);
    tg_rng r = {0x5EED};
    for (int i = 0; i < walk; i++) {
        if (tr_grammar_matcher_fill_mask(m, mask, nw) != TR_OK) break;
        for (size_t e = 0; e < nw; e++) /* no EOG mid-walk */
            for (int b = 0; b < 64; b++)
                if ((mask[e] >> b & 1) && tr_grammar_vocab_is_eog(g_vocab, (int32_t)(e * 64 + b)))
                    mask[e] &= ~(1ull << b);
        size_t cnt = tr_grammar_mask_count(mask, nw);
        if (!cnt) break;
        int32_t id = tr_grammar_mask_nth(mask, nw, tg_below(&r, (uint32_t)cnt));
        if (tr_grammar_matcher_accept_token(m, id) != TR_OK) break;
        while (w->n + 2 > cap) cap *= 2, w->toks = realloc(w->toks, cap * 4);
        w->toks[w->n++] = id;
    }
    w->toks[w->n++] = -2; /* the walk ends without EOG */
    free(mask);
    tr_grammar_matcher_free(m);
}

/* Runs the workload once on matcher m, min-merging times into calls[]. */
static void run(grammar *g, const workload *w, call *calls, bool first_round) {
    size_t nw = tr_grammar_vocab_mask_words(g_vocab);
    uint64_t *mask = malloc(nw * 8);
    grammar_matcher *m;
    if (tr_grammar_matcher_new(g, g_vocab, 0, &m) != TR_OK) abort();
    int32_t eog = -1;
    for (int32_t i = 0; i < tr_grammar_vocab_n_vocab(g_vocab) && eog < 0; i++)
        if (tr_grammar_vocab_is_eog(g_vocab, i)) eog = i;
    for (size_t k = 0; k < w->n; k++) {
        int32_t id = w->toks[k];
        if (id == -2) {
            tr_grammar_matcher_reset(m);
            continue;
        }
        if (id == -1) id = eog;
        uint64_t c0, c1;
        tr_grammar_matcher_mask_counts(m, NULL, &c0);
        uint64_t t0 = tr_now_ns();
        tr_grammar_matcher_fill_mask(m, mask, nw);
        uint64_t t1 = tr_now_ns();
        tr_status st = tr_grammar_matcher_accept_token(m, id);
        uint64_t t2 = tr_now_ns();
        tr_grammar_matcher_mask_counts(m, NULL, &c1);
        if (st != TR_OK) {
            fprintf(stderr, "token %d rejected at %zu: %s\n", id, k, tr_status_name(st));
            abort();
        }
        call *c = &calls[k];
        if (first_round || t1 - t0 < c->mask_ns) c->mask_ns = t1 - t0;
        if (first_round || t2 - t1 < c->accept_ns) c->accept_ns = t2 - t1;
        if (first_round) c->cold = c1 > c0;
        if (w->toks[k] == -1) tr_grammar_matcher_reset(m);
    }
    tr_grammar_matcher_free(m);
    free(mask);
}

static bool listed(const char *only, const char *name) {
    if (!only) return true;
    size_t n = strlen(name);
    for (const char *p = only; (p = strstr(p, name)); p += n)
        if ((p == only || p[-1] == ',') && (p[n] == 0 || p[n] == ',')) return true;
    return false;
}

int main(int argc, char **argv) {
    const char *dir = TRELLIS_SOURCE_DIR "/tests/data/grammar/ebnf";
    const char *only = NULL, *csv_path = NULL;
    int rounds = 3, reps = 20, walk = 200;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--dir") && v) dir = v, i++;
        else if (!strcmp(a, "--only") && v) only = v, i++;
        else if (!strcmp(a, "--rounds") && v) rounds = atoi(v), i++;
        else if (!strcmp(a, "--reps") && v) reps = atoi(v), i++;
        else if (!strcmp(a, "--walk") && v) walk = atoi(v), i++;
        else if (!strcmp(a, "--csv") && v) csv_path = v, i++;
        else {
            fprintf(stderr, "usage: %s [--dir DIR] [--only a,b] [--rounds N] "
                            "[--reps N] [--walk N] [--csv FILE]\n", argv[0]);
            return 2;
        }
    }
    if (rounds < 1) rounds = 1;
    if (!load_model()) {
        fprintf(stderr, "the default model is needed for its vocabulary\n");
        return 1;
    }
    static const char *const names[] = {"json", "schema_tree", "schema_flat",
                                        "arithmetic", "c", "chess", "list"};
    FILE *csv = csv_path ? fopen(csv_path, "w") : NULL;
    if (csv)
        fprintf(csv, "grammar,compile_p50_us,ttfm_p50_us,tokens,tbm_p50_us,tbm_p99_us,"
                     "tbm_max_us,cold,cold_p50_us,cold_p99_us,warm_tbm_p50_us,"
                     "warm_tbm_p99_us,accept_p50_us,accept_p99_us\n");
    printf("single thread; SmolLM2 vocabulary (%d tokens); %d rounds (fastest per "
           "call); times in us\n",
           tr_grammar_vocab_n_vocab(g_vocab), rounds);
    printf("%-12s %5s %6s %8s %8s | %6s %7s %7s %7s | %5s %7s %7s | %7s %7s | %6s %6s\n",
           "grammar", "kept", "states", "compile", "ttfm", "tokens", "tbm50", "tbm99",
           "tbmmax", "cold", "cold50", "cold99", "warm50", "warm99", "acc50", "acc99");
    samples all_tbm = {0}, all_compile = {0}, all_ttfm = {0};
    for (size_t gi = 0; gi < TR_ARRAY_LEN(names); gi++) {
        if (!listed(only, names[gi])) continue;
        char path[4096], txt[4096];
        snprintf(path, sizeof path, "%s/%s.gbnf", dir, names[gi]);
        snprintf(txt, sizeof txt, "%s/%s.txt", dir, names[gi]);
        size_t len;
        char *text = tg_read_file(path, &len);
        if (!text) {
            fprintf(stderr, "%s: cannot read\n", path);
            continue;
        }
        samples comp = {0}, ttfm = {0};
        grammar_stats st = {0};
        for (int r = 0; r < reps; r++) {
            grammar *g;
            tr_diag d;
            uint64_t t0 = tr_now_ns();
            if (tr_grammar_compile_ebnf(text, len, NULL, &g, &d) != TR_OK) {
                fprintf(stderr, "%s: %s\n", path, d.message);
                return 1;
            }
            uint64_t t1 = tr_now_ns();
            grammar_matcher *m;
            tr_grammar_matcher_new(g, g_vocab, 0, &m);
            size_t nw = tr_grammar_vocab_mask_words(g_vocab);
            uint64_t *mask = malloc(nw * 8);
            tr_grammar_matcher_fill_mask(m, mask, nw);
            uint64_t t2 = tr_now_ns();
            put(&comp, us(t1 - t0));
            put(&ttfm, us(t2 - t0));
            tr_grammar_get_stats(g, &st);
            free(mask);
            tr_grammar_matcher_free(m);
            tr_grammar_free(g);
        }
        grammar *g0;
        tr_grammar_compile_ebnf(text, len, NULL, &g0, NULL);
        workload w = {0};
        build_workload(g0, txt, walk, &w);
        tr_grammar_free(g0);
        call *first = calloc(w.n + 1, sizeof *first), *replay = calloc(w.n + 1, sizeof *replay);
        for (int r = 0; r < rounds; r++) {
            grammar *g;
            tr_grammar_compile_ebnf(text, len, NULL, &g, NULL);
            run(g, &w, first, r == 0);
            run(g, &w, replay, r == 0);
            tr_grammar_free(g);
        }
        samples tbm = {0}, cold = {0}, warm = {0}, acc = {0};
        size_t n_tok = 0;
        for (size_t k = 0; k < w.n; k++) {
            if (w.toks[k] == -2) continue;
            n_tok++;
            double t = us(first[k].mask_ns + first[k].accept_ns);
            put(&tbm, t);
            put(&all_tbm, t);
            if (first[k].cold) put(&cold, us(first[k].mask_ns));
            put(&warm, us(replay[k].mask_ns + replay[k].accept_ns));
            put(&acc, us(first[k].accept_ns));
        }
        double c50 = pct(&comp, 50), t50 = pct(&ttfm, 50);
        put(&all_compile, c50);
        put(&all_ttfm, t50);
        printf("%-12s %5u %6u %8.1f %8.1f | %6zu %7.2f %7.1f %7.0f | %5zu %7.1f %7.1f | "
               "%7.2f %7.2f | %6.2f %6.2f\n",
               names[gi], st.rules_kept, st.dfa_states, c50, t50, n_tok, pct(&tbm, 50),
               pct(&tbm, 99), pct(&tbm, 100), cold.n, pct(&cold, 50), pct(&cold, 99),
               pct(&warm, 50), pct(&warm, 99), pct(&acc, 50), pct(&acc, 99));
        if (csv)
            fprintf(csv, "%s,%.1f,%.1f,%zu,%.2f,%.1f,%.0f,%zu,%.1f,%.1f,%.2f,%.2f,%.2f,%.2f\n",
                    names[gi], c50, t50, n_tok, pct(&tbm, 50), pct(&tbm, 99),
                    pct(&tbm, 100), cold.n, pct(&cold, 50), pct(&cold, 99),
                    pct(&warm, 50), pct(&warm, 99), pct(&acc, 50), pct(&acc, 99));
        free(first), free(replay), free(w.toks), free(text);
        free(comp.v), free(ttfm.v), free(tbm.v), free(cold.v), free(warm.v), free(acc.v);
    }
    printf("all grammars: compile p50 %.1f us (max %.1f), TTFM p50 %.1f us (max %.1f), "
           "TBM first pass p50 %.2f us, p99 %.1f us, max %.0f us\n",
           pct(&all_compile, 50), pct(&all_compile, 100), pct(&all_ttfm, 50),
           pct(&all_ttfm, 100), pct(&all_tbm, 50), pct(&all_tbm, 99), pct(&all_tbm, 100));
    if (csv) fclose(csv);
    tr_grammar_vocab_free(g_vocab);
    tr_tokenizer_free(g_tok);
    return 0;
}
