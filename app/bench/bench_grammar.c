/* bench_grammar.c — `trellis bench grammar`: what constrained decoding
 * costs and what jump-forward saves, side by side in one run.
 *
 *   trellis bench grammar [-m MODEL] [--part micro,throughput,jump]
 *       [--rounds N] [--requests N] [--patterns FILE] [engine options]
 *       [--model-regexes FILE] [--steps N] [--reps N]
 *
 * (a) micro: regex compile time and token-mask time, single thread, on the
 *     model's vocabulary (SmolLM2: 49,152 tokens). Every pattern of
 *     tests/data/grammar/regexes.txt is compiled `reps` times (per-pattern
 *     median, then percentiles over patterns). Masks: per pattern a fresh
 *     grammar (empty memo) and a matcher walk of `steps` tokens drawn
 *     uniformly among the allowed ones (EOG only when nothing else is
 *     allowed, then reset); each fill_mask is timed and classed cold (the
 *     state's mask was computed: tr_grammar_matcher_mask_counts went up) or
 *     warm (from the memo); the same walk is replayed (all warm). The
 *     rounds repeat it with fresh grammars (the same calls, cold and warm)
 *     and keep each call's fastest time: a shared machine's preemption
 *     spikes go, a slow path stays (a cold call is cold in every round).
 * (b) throughput: `requests` (default 64) concurrent requests through the
 *     engine, each a regex of tests/data/grammar/model_regexes.txt with
 *     its prompt (chat template), temperature 0.7 with a fixed seed,
 *     jump-forward OFF (this part measures the mask cost alone, not what
 *     jump-forward saves), max_tokens 48. A constraint decides when a
 *     request stops, so the unconstrained twin of each request gets the
 *     same prompt, max_tokens = the token count the constrained one
 *     produced and ignore_eos: both runs compute exactly the same token
 *     counts per request, hence the same batch shapes step by step, and
 *     differ only by the grammar work (masks on the engine thread,
 *     overlapped with the forward pass; masked sampling; accept). Output
 *     tok/s = generated tokens / wall time from the first submit to the
 *     last DONE (prefill included, the same in both). The prefix cache is
 *     flushed before every run.
 * (c) jump-forward: the JSON-shaped regexes of model_regexes.txt (lines
 *     starting with `\{` or `\[`), `requests` requests cycling over them
 *     with different seeds, run with and without jump-forward. Reported:
 *     engine steps (forward passes of the whole batch), sequence passes
 *     (the passes each sequence took: its tokens minus what jump-forward
 *     chunks saved), tokens, forced tokens and wall time.
 * Rounds interleave the two sides of (b) and of (c) (the order flips each
 * round) so that a noisy minute hits both; medians over rounds.
 *
 * Layering: applications (app/bench): include/trellis.h for the
 * engine; for (a), the public headers of grammar, tokenizer and gguf (the
 * grammar library measured on its own, as the engine drives it).
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/paths.h"
#include "base/util.h"
#include "grammar/grammar.h"
#include "app/bench/bench.h"
#include "app/common/args.h"
#include "app/common/engine_flags.h"
#include "runtime/gguf/gguf.h"
#include "runtime/tokenizer/tokenizer.h"
#include "runtime/vocab/vocab.h"
#include "trellis.h"

#define BG_MAX_REQ 256

typedef struct bg_opts {
    const char *model, *patterns, *model_regexes;
    bool micro, throughput, jump;
    int rounds, requests, steps, reps, max_tokens;
    tr_engine_flags engine; /* 2 threads unless given */
} bg_opts;

/* ---- small helpers ---- */

typedef struct bg_samples {
    double *v;
    size_t n, cap;
} bg_samples;

static bool bg_add(bg_samples *s, double x) {
    if (s->n == s->cap) {
        size_t c = s->cap ? s->cap * 2 : 1024;
        double *p = realloc(s->v, c * sizeof *p);
        if (!p) return false;
        s->v = p;
        s->cap = c;
    }
    s->v[s->n++] = x;
    return true;
}

static int bg_cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Percentile p of v[0..n) (sorts v). */
static double bg_pct(double *v, size_t n, double p) {
    if (!n) return 0;
    qsort(v, n, sizeof *v, bg_cmp_d);
    return v[(size_t)(p / 100.0 * (double)(n - 1) + 0.5)];
}

static uint64_t bg_rng(uint64_t *s) { /* xorshift64* */
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 0x2545F4914F6CDD1DULL;
}

/* Reads a data file; tries the path as given, then relative to the
 * executable's parent directory (build/trellis -> source tree). */
static char *bg_read(const char *path, size_t *len) {
    char *text = NULL;
    if (tr_read_file(path, &text, len) == 0) return text;
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0 || path[0] == '/') return NULL;
    exe[n] = 0;
    for (int up = 0; up < 2; up++) { /* strip the file, then its folder */
        char *sl = strrchr(exe, '/');
        if (!sl) return NULL;
        *sl = 0;
    }
    char alt[8192];
    snprintf(alt, sizeof alt, "%s/%s", exe, path);
    if (tr_read_file(alt, &text, len) == 0) return text;
    return NULL;
}

/* Splits text into lines that are not comments; each line's TAB (if any)
 * ends the pattern, *second gets what follows. */
static int bg_lines(char *text, char **pat, char **second, int max) {
    int n = 0;
    for (char *p = text; p && *p && n < max;) {
        char *nl = strchr(p, '\n');
        if (nl) *nl = 0;
        if (p[0] && p[0] != '#') {
            char *tab = strchr(p, '\t');
            if (tab) *tab = 0;
            pat[n] = p;
            second[n] = tab ? tab + 1 : NULL;
            n++;
        }
        p = nl ? nl + 1 : NULL;
    }
    return n;
}

/* ---- (a) compile and mask micro-benchmark ---- */

static int32_t bg_pick(uint64_t *r, const uint64_t *mask, size_t nw,
                       const grammar_vocab *v) {
    size_t n = tr_grammar_mask_count(mask, nw);
    if (!n) return -1;
    int32_t eog = -1;
    for (int tries = 0; tries < 16; tries++) {
        int32_t id = tr_grammar_mask_nth(mask, nw, (size_t)(bg_rng(r) % n));
        if (!tr_grammar_vocab_is_eog(v, id)) return id;
        eog = id;
    }
    return eog;
}

static void bg_report(const char *name, bg_samples *s) {
    double p50 = bg_pct(s->v, s->n, 50), p90 = bg_pct(s->v, s->n, 90),
           p99 = bg_pct(s->v, s->n, 99);
    double mx = s->n ? s->v[s->n - 1] : 0.0;
    printf("  %-30s n=%-7zu p50 %9.2f  p90 %9.2f  p99 %9.2f  max %9.2f us\n", name,
           s->n, p50, p90, p99, mx);
}

static int bg_micro(const bg_opts *o, const char *model_path) {
    size_t len;
    char *text = bg_read(o->patterns, &len);
    if (!text) {
        fprintf(stderr, "trellis bench grammar: cannot read %s\n", o->patterns);
        return 1;
    }
    enum { MAXP = 4096 };
    char **pats = malloc(MAXP * sizeof *pats), **unused = malloc(MAXP * sizeof *unused);
    if (!pats || !unused) return 1;
    size_t np = (size_t)bg_lines(text, pats, unused, MAXP);
    free(unused);

    gguf_file *f = NULL;
    tokenizer *tok = NULL;
    grammar_vocab *v = NULL;
    tr_diag d = {0};
    uint64_t t0 = tr_now_ns();
    tr_status st = tr_gguf_open(model_path, &f, &d);
    if (st == TR_OK) st = tr_tokenizer_from_gguf(f, &tok, &d);
    if (st == TR_OK) st = tr_vocab_from_tokenizer(tok, &v, &d);
    if (st != TR_OK) {
        fprintf(stderr, "trellis bench grammar: %s: %s\n", model_path,
                d.message[0] ? d.message : tr_status_message(st));
        tr_tokenizer_free(tok);
        tr_gguf_close(f);
        free(pats);
        free(text);
        return 1;
    }
    printf("== (a) compile and masks, single thread: %d-token vocabulary "
           "(built in %.0f ms with the GGUF and tokenizer load), %zu patterns "
           "of %s\n",
           tr_grammar_vocab_n_vocab(v), (double)(tr_now_ns() - t0) / 1e6, np,
           o->patterns);

    int rc = 1;
    bg_samples comp = {0}, cold = {0}, warm = {0}, first = {0}, replay = {0};
    size_t nw = tr_grammar_vocab_mask_words(v);
    size_t n_calls = np * (size_t)o->steps;
    uint64_t *mask = malloc(nw * sizeof *mask);
    double *one = malloc((size_t)o->reps * sizeof *one);
    double *t_first = malloc(n_calls * sizeof *t_first);
    double *t_replay = malloc(n_calls * sizeof *t_replay);
    uint8_t *is_cold = calloc(n_calls, 1);
    double *t_comp = malloc(np * sizeof *t_comp);
    if (!mask || !one || !t_first || !t_replay || !is_cold || !t_comp) goto out;
    for (size_t i = 0; i < n_calls; i++) t_first[i] = t_replay[i] = 1e30;
    for (size_t p = 0; p < np; p++) t_comp[p] = 1e30;
    for (int round = 0; round < o->rounds; round++) {
        for (size_t p = 0; p < np; p++) {
            /* compile: median of reps, fastest over rounds */
            for (int k = 0; k < o->reps; k++) {
                grammar *g = NULL;
                uint64_t a = tr_now_ns();
                st = tr_grammar_compile_regex(pats[p], strlen(pats[p]), NULL, &g, NULL);
                one[k] = (double)(tr_now_ns() - a) / 1e3;
                tr_grammar_free(g);
                if (st != TR_OK) {
                    fprintf(stderr, "trellis bench grammar: /%s/ does not compile\n",
                            pats[p]);
                    goto out;
                }
            }
            double med = bg_pct(one, (size_t)o->reps, 50);
            if (med < t_comp[p]) t_comp[p] = med;
            /* masks: a fresh grammar, a walk, its replay */
            grammar *g = NULL;
            grammar_matcher *m = NULL;
            if (tr_grammar_compile_regex(pats[p], strlen(pats[p]), NULL, &g, NULL) ||
                tr_grammar_matcher_new(g, v, 0, &m)) {
                tr_grammar_free(g);
                goto out;
            }
            for (int pass = 0; pass < 2; pass++) {
                uint64_t r = 0x1234 + p;
                tr_grammar_matcher_reset(m);
                for (int s = 0; s < o->steps; s++) {
                    size_t call = p * (size_t)o->steps + (size_t)s;
                    uint64_t before, after;
                    tr_grammar_matcher_mask_counts(m, NULL, &before);
                    uint64_t a = tr_now_ns();
                    tr_grammar_matcher_fill_mask(m, mask, nw);
                    double us = (double)(tr_now_ns() - a) / 1e3;
                    tr_grammar_matcher_mask_counts(m, NULL, &after);
                    double *slot = pass == 0 ? &t_first[call] : &t_replay[call];
                    if (us < *slot) *slot = us;
                    if (pass == 0 && after > before) is_cold[call] = 1;
                    int32_t id = bg_pick(&r, mask, nw, v);
                    if (id < 0 || tr_grammar_vocab_is_eog(v, id) ||
                        tr_grammar_matcher_accept_token(m, id) != TR_OK)
                        tr_grammar_matcher_reset(m);
                }
            }
            tr_grammar_matcher_free(m);
            tr_grammar_free(g);
        }
    }
    for (size_t p = 0; p < np; p++)
        if (!bg_add(&comp, t_comp[p])) goto out;
    for (size_t i = 0; i < n_calls; i++) {
        if (!bg_add(&first, t_first[i]) || !bg_add(&replay, t_replay[i]) ||
            !bg_add(is_cold[i] ? &cold : &warm, t_first[i]))
            goto out;
    }
    printf("  (fastest of %d round(s) per pattern / per call; masks: %d-token walks)\n",
           o->rounds, o->steps);
    bg_report("regex compile (median of reps)", &comp);
    bg_report("fill_mask, cold (computed)", &cold);
    bg_report("fill_mask, warm (memo)", &warm);
    bg_report("fill_mask, first pass (all)", &first);
    bg_report("fill_mask, replay (all warm)", &replay);
    rc = 0;
out:
    free(comp.v), free(cold.v), free(warm.v), free(first.v), free(replay.v);
    free(mask), free(one), free(t_first), free(t_replay), free(is_cold), free(t_comp);
    tr_grammar_vocab_free(v);
    tr_tokenizer_free(tok);
    tr_gguf_close(f);
    free(pats);
    free(text);
    return rc;
}

/* ---- engine runs for (b) and (c) ---- */

typedef struct bg_req {
    const char *regex, *prompt;
    int32_t max_tokens;
    bool ignore_eos, no_jf;
    uint64_t seed;
    /* results */
    uint64_t id;
    int32_t n_tokens, forced;
    trellis_finish finish;
} bg_req;

typedef struct bg_run {
    double wall_s;
    long tokens, forced;
    uint64_t steps, seq_passes, saved;
    double mask_s; /* engine overlap_s: masks and intake during forwards */
} bg_run;

/* Submits every request at once, waits for all, fills results. */
static int bg_engine_run(trellis_engine *e, bg_req *rq, int n, bg_run *out) {
    trellis_flush_cache(e);
    trellis_stats s0, s1;
    trellis_get_stats(e, &s0);
    uint64_t t0 = tr_now_ns();
    char err[512];
    for (int i = 0; i < n; i++) {
        trellis_message msg = {"user", rq[i].prompt};
        trellis_request q;
        trellis_request_default(&q);
        q.messages = &msg;
        q.n_messages = 1;
        q.regex = rq[i].regex;
        q.max_tokens = rq[i].max_tokens;
        q.ignore_eos = rq[i].ignore_eos;
        q.no_jump_forward = rq[i].no_jf;
        q.temperature = 0.7f;
        q.seed = rq[i].seed;
        int rc = trellis_submit(e, &q, &rq[i].id, err, sizeof err);
        if (rc) {
            fprintf(stderr, "trellis bench grammar: submit: %s\n", err);
            return 1;
        }
    }
    int left = n;
    while (left > 0) {
        trellis_event *ev;
        if (trellis_wait(e, 600000, &ev) != 1) {
            fprintf(stderr, "trellis bench grammar: no event for 10 minutes\n");
            return 1;
        }
        for (int i = 0; i < n; i++) {
            if (rq[i].id != ev->request_id) continue;
            rq[i].n_tokens = ev->metrics.completion_tokens;
            rq[i].forced = ev->metrics.forced_tokens;
            rq[i].finish = ev->finish;
            if (ev->finish == TRELLIS_FINISH_ERROR)
                fprintf(stderr, "trellis bench grammar: request error: %s\n", ev->error);
        }
        trellis_event_free(ev);
        left--;
    }
    out->wall_s = (double)(tr_now_ns() - t0) / 1e9;
    /* the snapshot is published before a step's events: it is current */
    trellis_get_stats(e, &s1);
    out->tokens = out->forced = 0;
    for (int i = 0; i < n; i++) {
        out->tokens += rq[i].n_tokens;
        out->forced += rq[i].forced;
    }
    out->steps = s1.steps - s0.steps;
    out->saved = s1.forward_passes_saved - s0.forward_passes_saved;
    out->seq_passes = (uint64_t)out->tokens - out->saved;
    out->mask_s = s1.overlap_s - s0.overlap_s;
    return 0;
}

static double bg_median(double *v, int n) { return bg_pct(v, (size_t)n, 50); }

static int bg_throughput(const bg_opts *o, trellis_engine *e, char **pat,
                         char **prompt, int np) {
    int n = o->requests;
    bg_req *con = calloc((size_t)n, sizeof *con), *unc = calloc((size_t)n, sizeof *unc);
    double *r_con = calloc((size_t)o->rounds, sizeof(double));
    double *r_unc = calloc((size_t)o->rounds, sizeof(double));
    double *r_mask = calloc((size_t)o->rounds, sizeof(double));
    int rc = 1;
    if (!con || !unc || !r_con || !r_unc || !r_mask) goto out;
    /* spread over the file: every kind of pattern */
    for (int i = 0; i < n; i++) {
        int k = (int)((long)i * np / n);
        con[i] = (bg_req){.regex = pat[k], .prompt = prompt[k],
                          .max_tokens = o->max_tokens, .no_jf = true,
                          .seed = 77 + (uint64_t)i};
    }
    printf("\n== (b) constrained vs unconstrained generation: %d concurrent "
           "requests, jump-forward off, same token counts (method: see "
           "bench_grammar.c)\n",
           n);
    printf("  %-5s %12s %12s %14s %14s %7s %10s\n", "round", "tokens", "con wall s",
           "con tok/s", "uncon tok/s", "ratio", "mask s");
    bg_run warm;
    if (bg_engine_run(e, con, n, &warm)) goto out; /* warm-up; fixes counts */
    for (int i = 0; i < n; i++)
        unc[i] = (bg_req){.regex = NULL, .prompt = con[i].prompt,
                          .max_tokens = con[i].n_tokens > 0 ? con[i].n_tokens : 1,
                          .ignore_eos = true, .seed = con[i].seed};
    long want = warm.tokens;
    for (int round = 0; round < o->rounds; round++) {
        bg_run a, b;
        bool con_first = round % 2 == 0;
        if (bg_engine_run(e, con_first ? con : unc, n, con_first ? &a : &b) ||
            bg_engine_run(e, con_first ? unc : con, n, con_first ? &b : &a))
            goto out;
        if (a.tokens != want || b.tokens != want)
            printf("  note: token counts differ (constrained %ld, unconstrained "
                   "%ld, expected %ld)\n", a.tokens, b.tokens, want);
        r_con[round] = (double)a.tokens / a.wall_s;
        r_unc[round] = (double)b.tokens / b.wall_s;
        r_mask[round] = a.mask_s;
        printf("  %-5d %12ld %12.2f %14.1f %14.1f %7.3f %10.3f\n", round + 1, a.tokens,
               a.wall_s, r_con[round], r_unc[round], r_con[round] / r_unc[round],
               a.mask_s);
    }
    double mc = bg_median(r_con, o->rounds), mu = bg_median(r_unc, o->rounds);
    printf("  median: constrained %.1f tok/s, unconstrained %.1f tok/s: "
           "ratio %.3f (target >= 0.95)\n", mc, mu, mc / mu);
    rc = 0;
out:
    free(con), free(unc), free(r_con), free(r_unc), free(r_mask);
    return rc;
}

static int bg_jump(const bg_opts *o, trellis_engine *e, char **pat, char **prompt,
                   int np) {
    int idx[BG_MAX_REQ], nj = 0;
    for (int i = 0; i < np && nj < BG_MAX_REQ; i++)
        if (!strncmp(pat[i], "\\{", 2) || !strncmp(pat[i], "\\[", 2)) idx[nj++] = i;
    if (nj == 0) {
        fprintf(stderr, "trellis bench grammar: no JSON-shaped regex in %s\n",
                o->model_regexes);
        return 1;
    }
    int n = o->requests;
    bg_req *on = calloc((size_t)n, sizeof *on), *off = calloc((size_t)n, sizeof *off);
    double *w_on = calloc((size_t)o->rounds, sizeof(double));
    double *w_off = calloc((size_t)o->rounds, sizeof(double));
    double *st_on = calloc((size_t)o->rounds, sizeof(double));
    double *st_off = calloc((size_t)o->rounds, sizeof(double));
    double *sp_on = calloc((size_t)o->rounds, sizeof(double));
    double *sp_off = calloc((size_t)o->rounds, sizeof(double));
    int rc = 1;
    if (!on || !off || !w_on || !w_off || !st_on || !st_off || !sp_on || !sp_off)
        goto out;
    for (int i = 0; i < n; i++) {
        int k = idx[i % nj];
        on[i] = (bg_req){.regex = pat[k], .prompt = prompt[k],
                         .max_tokens = o->max_tokens, .seed = 500 + (uint64_t)i};
        off[i] = on[i];
        off[i].no_jf = true;
    }
    printf("\n== (c) jump-forward on %d JSON-shaped regexes: %d concurrent "
           "requests, with vs without\n", nj, n);
    printf("  %-5s %-4s %8s %8s %9s %11s %9s\n", "round", "jf", "tokens", "forced",
           "steps", "seq passes", "wall s");
    for (int round = 0; round < o->rounds; round++) {
        bg_run a, b;
        bool on_first = round % 2 == 0;
        if (bg_engine_run(e, on_first ? on : off, n, on_first ? &a : &b) ||
            bg_engine_run(e, on_first ? off : on, n, on_first ? &b : &a))
            goto out;
        st_on[round] = (double)a.steps, st_off[round] = (double)b.steps;
        sp_on[round] = (double)a.seq_passes, sp_off[round] = (double)b.seq_passes;
        w_on[round] = a.wall_s, w_off[round] = b.wall_s;
        printf("  %-5d %-4s %8ld %8ld %9llu %11llu %9.2f\n", round + 1, "on", a.tokens,
               a.forced, (unsigned long long)a.steps,
               (unsigned long long)a.seq_passes, a.wall_s);
        printf("  %-5s %-4s %8ld %8ld %9llu %11llu %9.2f\n", "", "off", b.tokens,
               b.forced, (unsigned long long)b.steps,
               (unsigned long long)b.seq_passes, b.wall_s);
    }
    double s_on = bg_median(st_on, o->rounds), s_off = bg_median(st_off, o->rounds);
    double p_on = bg_median(sp_on, o->rounds), p_off = bg_median(sp_off, o->rounds);
    double wo = bg_median(w_on, o->rounds), wf = bg_median(w_off, o->rounds);
    printf("  median: engine steps %.0f vs %.0f (%.1f%% fewer), sequence passes "
           "%.0f vs %.0f (%.1f%% fewer; target >= 20%%), wall %.2f s vs %.2f s "
           "(%.2fx)\n",
           s_on, s_off, 100.0 * (1.0 - s_on / s_off), p_on, p_off,
           100.0 * (1.0 - p_on / p_off), wo, wf, wf / wo);
    rc = 0;
out:
    free(on), free(off), free(w_on), free(w_off), free(st_on), free(st_off);
    free(sp_on), free(sp_off);
    return rc;
}

/* ---- command ---- */

/* The flags into *o; 0, or the exit status (-1: --help, exit 0). */
static int bg_parse(int argc, char **argv, bg_opts *o) {
    const char *part = "micro,throughput,jump";
    int64_t rounds = o->rounds, requests = o->requests, max_tokens = o->max_tokens,
            steps = o->steps, reps = o->reps;
    bool help = false;
    const cli_opt opts[] = {
        {"--model", "-m", CLI_STR, &o->model, 1, 0, "GGUF model file",
         "the cached default model", .meta = "FILE"},
        {"--part", NULL, CLI_STR, &part, 1, 0, "parts to run: micro, throughput, jump",
         "all three", .meta = "LIST"},
        {"--rounds", NULL, CLI_INT, &rounds, 1, 100, "interleaved rounds", "5"},
        {"--requests", NULL, CLI_INT, &requests, 1, BG_MAX_REQ,
         "concurrent requests in (b) and (c)", "64"},
        {"--max-tokens", NULL, CLI_INT, &max_tokens, 1, 4096, "per constrained request",
         "48"},
        {"--patterns", NULL, CLI_STR, &o->patterns, 1, 0, "(a)'s regexes",
         "tests/data/grammar/regexes.txt", .meta = "FILE"},
        {"--model-regexes", NULL, CLI_STR, &o->model_regexes, 1, 0,
         "(b) and (c)'s regexes and prompts", "tests/data/grammar/model_regexes.txt",
         .meta = "FILE"},
        {"--steps", NULL, CLI_INT, &steps, 1, 100000, "(a) mask walk length", "64"},
        {"--reps", NULL, CLI_INT, &reps, 1, 1000, "(a) compiles per pattern", "5"},
    };
    o->engine.opts.threads = 2;
    cli_cmd c = {.name = "bench grammar", .usage = "[-m MODEL] [--part LIST] [options]",
                 .opts = opts, .n_opts = sizeof opts / sizeof opts[0]};
    tr_engine_flags_attach(&o->engine, &c);
    if (!tr_cli_parse(&c, argc - 1, argv + 1, &help)) return 2;
    if (help) return -1;
    o->micro = o->throughput = o->jump = false;
    char tmp[256];
    snprintf(tmp, sizeof tmp, "%s", part);
    char *save = NULL;
    for (char *t = strtok_r(tmp, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (!strcmp(t, "micro")) o->micro = true;
        else if (!strcmp(t, "throughput")) o->throughput = true;
        else if (!strcmp(t, "jump")) o->jump = true;
        else {
            fprintf(stderr, "trellis bench grammar: --part: unknown part '%s' (micro, "
                            "throughput or jump)\n", t);
            return 2;
        }
    }
    if (!o->micro && !o->throughput && !o->jump) {
        fprintf(stderr, "trellis bench grammar: --part: empty list\n");
        return 2;
    }
    o->rounds = (int)rounds, o->requests = (int)requests, o->max_tokens = (int)max_tokens;
    o->steps = (int)steps, o->reps = (int)reps;
    return 0;
}

/* argv[0] is "grammar". */
int tr_bench_grammar(int argc, char **argv) {
    bg_opts o = {.patterns = "tests/data/grammar/regexes.txt",
                 .model_regexes = "tests/data/grammar/model_regexes.txt",
                 .micro = true, .throughput = true, .jump = true, .rounds = 5,
                 .requests = 64, .steps = 64, .reps = 5,
                 .max_tokens = 48};
    tr_engine_flags_init(&o.engine);
    int prc = bg_parse(argc, argv, &o);
    if (prc) return prc < 0 ? 0 : prc;
    char path[4096];
    const char *model = o.model;
    if (!model) {
        if (!tr_default_model_path(path, sizeof path)) {
            fprintf(stderr, "trellis bench grammar: no default model path; give -m\n");
            return 1;
        }
        model = path;
    }
    uint64_t t0 = tr_now_ns();
    if (o.micro && bg_micro(&o, model)) return 1;
    if (!o.throughput && !o.jump) return 0;

    size_t len;
    char *text = bg_read(o.model_regexes, &len);
    if (!text) {
        fprintf(stderr, "trellis bench grammar: cannot read %s\n", o.model_regexes);
        return 1;
    }
    char *pat[BG_MAX_REQ], *prompt[BG_MAX_REQ];
    int np = bg_lines(text, pat, prompt, BG_MAX_REQ);
    for (int i = 0; i < np; i++) {
        if (!prompt[i]) {
            fprintf(stderr, "trellis bench grammar: %s: /%s/ has no prompt\n",
                    o.model_regexes, pat[i]);
            free(text);
            return 1;
        }
    }
    trellis_engine *e = NULL;
    char err[512];
    if (trellis_engine_new(model, &o.engine.opts, &e, err, sizeof err)) {
        fprintf(stderr, "trellis bench grammar: %s\n", err);
        free(text);
        return 1;
    }
    trellis_engine_info info;
    trellis_engine_get_info(e, &info);
    printf("\nengine: %d threads, max batch %d tokens, %d running at most\n",
           info.threads, info.max_batch_tokens, info.max_running);
    int rc = 0;
    if (o.throughput) rc = bg_throughput(&o, e, pat, prompt, np);
    if (rc == 0 && o.jump) rc = bg_jump(&o, e, pat, prompt, np);
    trellis_engine_free(e);
    free(text);
    printf("\n(total %.1f s)\n", (double)(tr_now_ns() - t0) / 1e9);
    return rc;
}
