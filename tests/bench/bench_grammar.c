/* bench_grammar.c — regex compile time and token-mask time on the SmolLM2
 * vocabulary (49,152 tokens), single thread.
 *
 *   compile: every pattern of tests/data/grammar/regexes.txt compiled
 *            `reps` times; per-pattern median, then p50/p90/p99/max over
 *            patterns.
 *   mask:    for each pattern a fresh grammar (empty memo) and a matcher
 *            walk of `steps` sampled tokens (uniform among the allowed
 *            ones; EOG only when nothing else is allowed, then reset).
 *            Every grammar_matcher_fill_mask call is timed and classed
 *            "cold" (the state's mask was computed: first visit) or
 *            "warm" (served from the memo). The same walk is then
 *            replayed (all warm). Reported: cold, warm, and all calls of
 *            the first pass (what a fresh request sees).
 *
 * Usage: bench_grammar [--patterns FILE] [--steps N] [--reps N]
 *                      [--repeat N] [--model GGUF]
 * --repeat N runs the whole mask benchmark N times (fresh grammars each
 * time: the sequence of calls, cold and warm, is identical) and keeps,
 * per call, the fastest of the N timings: on a shared machine this
 * removes preemption spikes without hiding a slow path (a cold call is
 * cold in every repeat). The model path defaults to
 * tr_default_model_path(). Numbers go to stdout; grammar/README.md
 * records a run.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/unit/test_grammar_util.h"

typedef struct samples {
    double *v;
    size_t n, cap;
} samples;

static void add(samples *s, double x) {
    if (s->n == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 1024;
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

static void report(const char *name, samples *s, const char *unit) {
    double p50 = pct(s, 50), p90 = pct(s, 90), p99 = pct(s, 99);
    double mx = s->n ? s->v[s->n - 1] : 0.0; /* sorted by pct */
    printf("  %-28s n=%-7zu p50 %9.2f  p90 %9.2f  p99 %9.2f  max %9.2f %s\n",
           name, s->n, p50, p90, p99, mx, unit);
}

static int32_t pick(tg_rng *r, const uint64_t *mask, size_t nw,
                    const grammar_vocab *v) {
    size_t n = 0;
    for (size_t w = 0; w < nw; w++) n += (size_t)__builtin_popcountll(mask[w]);
    if (!n) return -1;
    int32_t eog = -1;
    for (int tries = 0; tries < 16; tries++) {
        size_t k = tg_below(r, (uint32_t)n);
        for (size_t w = 0; w < nw; w++) {
            size_t c = (size_t)__builtin_popcountll(mask[w]);
            if (k >= c) {
                k -= c;
                continue;
            }
            uint64_t x = mask[w];
            for (size_t j = 0; j < k; j++) x &= x - 1;
            int32_t id = (int32_t)(w * 64 + (size_t)__builtin_ctzll(x));
            if (!grammar_vocab_is_eog(v, id)) return id;
            eog = id;
            break;
        }
    }
    return eog;
}

int main(int argc, char **argv) {
    const char *pfile = TRELLIS_SOURCE_DIR "/tests/data/grammar/regexes.txt";
    int steps = 64, reps = 5, repeat = 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--patterns") && i + 1 < argc)
            pfile = argv[++i];
        else if (!strcmp(argv[i], "--steps") && i + 1 < argc)
            steps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--repeat") && i + 1 < argc)
            repeat = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--model") && i + 1 < argc)
            setenv("TRELLIS_MODEL", argv[++i], 1);
        else {
            fprintf(stderr, "usage: %s [--patterns FILE] [--steps N] [--reps N] [--repeat N] [--model GGUF]\n",
                    argv[0]);
            return 2;
        }
    }
    uint64_t t0 = tr_now_ns();
    grammar_vocab *v = tg_vocab_smollm2();
    if (!v) {
        fprintf(stderr, "bench_grammar: needs the SmolLM2 model file\n");
        return 1;
    }
    printf("vocabulary: %d tokens, trie %u nodes, built in %.1f ms (incl. "
           "GGUF + tokenizer load)\n",
           grammar_vocab_n_vocab(v), v->trie.n_nodes,
           (double)(tr_now_ns() - t0) / 1e6);

    size_t len;
    char *text = tg_read_file(pfile, &len);
    if (!text) {
        fprintf(stderr, "cannot read %s\n", pfile);
        return 1;
    }
    char **pats = NULL;
    size_t np = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        if (line[0] == '#') continue;
        char *tab = strchr(line, '\t');
        if (tab) *tab = 0;
        pats = realloc(pats, (np + 1) * sizeof *pats);
        pats[np++] = line;
    }

    /* ---- compile ---- */
    samples comp = {0};
    double slow_us[5] = {0};
    size_t slow_p[5] = {0};
    for (size_t p = 0; p < np; p++) {
        samples one = {0};
        for (int k = 0; k < reps; k++) {
            grammar *g = NULL;
            uint64_t a = tr_now_ns();
            tr_status st = grammar_compile_regex(pats[p], strlen(pats[p]), NULL, &g, NULL);
            double us = (double)(tr_now_ns() - a) / 1e3;
            if (st != TR_OK) {
                fprintf(stderr, "compile failed: /%s/\n", pats[p]);
                return 1;
            }
            add(&one, us);
            grammar_free(g);
        }
        double med = pct(&one, 50);
        add(&comp, med);
        free(one.v);
        for (int k = 0; k < 5; k++) { /* keep the five slowest */
            if (med > slow_us[k]) {
                for (int j = 4; j > k; j--) slow_us[j] = slow_us[j - 1], slow_p[j] = slow_p[j - 1];
                slow_us[k] = med;
                slow_p[k] = p;
                break;
            }
        }
    }
    printf("\ncompile (%zu patterns, median of %d runs each), microseconds:\n", np, reps);
    report("regex compile", &comp, "us");
    printf("  slowest:\n");
    for (int k = 0; k < 5; k++) {
        grammar *g = NULL;
        grammar_stats st = {0};
        if (grammar_compile_regex(pats[slow_p[k]], strlen(pats[slow_p[k]]), NULL, &g, NULL) == TR_OK)
            grammar_get_stats(g, &st);
        printf("    %9.1f us  nfa %6u  raw dfa %6u  min dfa %6u  classes %3u  /%s/\n",
               slow_us[k], st.nfa_states, st.dfa_states_raw, st.dfa_states,
               st.byte_classes, pats[slow_p[k]]);
        grammar_free(g);
    }

    /* ---- masks ---- */
    size_t nw = grammar_vocab_mask_words(v);
    uint64_t *mask = malloc(nw * sizeof *mask);
    samples cold = {0}, warm = {0}, first = {0}, replay = {0}, accept = {0};
    size_t states_total = 0;
    /* per call of the sequence: fastest time over the repeats */
    size_t n_calls = np * (size_t)steps;
    double *t_first = malloc(n_calls * sizeof *t_first);
    double *t_replay = malloc(n_calls * sizeof *t_replay);
    double *t_accept = malloc(n_calls * sizeof *t_accept);
    uint8_t *is_cold = calloc(n_calls, 1);
    uint8_t *has_accept = calloc(n_calls, 1);
    uint32_t *allowed = calloc(n_calls, sizeof *allowed); /* mask popcount */
    for (size_t i = 0; i < n_calls; i++) t_first[i] = t_replay[i] = t_accept[i] = 1e30;
    for (int rep = 0; rep < repeat; rep++) {
        for (size_t p = 0; p < np; p++) {
            grammar *g = NULL;
            if (grammar_compile_regex(pats[p], strlen(pats[p]), NULL, &g, NULL)) return 1;
            if (rep == 0) states_total += g->dfa.n_states;
            grammar_matcher *m;
            if (grammar_matcher_new(g, v, 0, &m)) return 1;
            for (int pass = 0; pass < 2; pass++) {
                tg_rng r = {0x1234 + p};
                grammar_matcher_reset(m);
                for (int s = 0; s < steps; s++) {
                    size_t call = p * (size_t)steps + (size_t)s;
                    uint64_t before = m->n_computed;
                    uint64_t a = tr_now_ns();
                    grammar_matcher_fill_mask(m, mask, nw);
                    double us = (double)(tr_now_ns() - a) / 1e3;
                    double *slot = pass == 0 ? &t_first[call] : &t_replay[call];
                    if (us < *slot) *slot = us;
                    if (pass == 0 && m->n_computed > before) {
                        is_cold[call] = 1;
                        uint32_t pc = 0;
                        for (size_t w = 0; w < nw; w++)
                            pc += (uint32_t)__builtin_popcountll(mask[w]);
                        allowed[call] = pc;
                    }
                    int32_t id = pick(&r, mask, nw, v);
                    if (id < 0 || grammar_vocab_is_eog(v, id)) {
                        grammar_matcher_reset(m);
                        continue;
                    }
                    a = tr_now_ns();
                    if (grammar_matcher_accept_token(m, id) != TR_OK) return 1;
                    us = (double)(tr_now_ns() - a) / 1e3;
                    if (pass == 0) {
                        has_accept[call] = 1;
                        if (us < t_accept[call]) t_accept[call] = us;
                    }
                }
            }
            grammar_matcher_free(m);
            grammar_free(g);
        }
    }
    /* the slowest cold calls, to see which states cost */
    size_t worst[5] = {0};
    for (size_t i = 0; i < n_calls; i++) {
        if (!is_cold[i]) continue;
        for (int k = 0; k < 5; k++) {
            if (!is_cold[worst[k]] || t_first[i] > t_first[worst[k]]) {
                for (int j = 4; j > k; j--) worst[j] = worst[j - 1];
                worst[k] = i;
                break;
            }
        }
    }
    printf("\nslowest cold masks (fastest of the repeats):\n");
    for (int k = 0; k < 5; k++)
        if (is_cold[worst[k]])
            printf("  %8.1f us  %5u tokens allowed  /%s/ step %zu\n", t_first[worst[k]],
                   allowed[worst[k]], pats[worst[k] / (size_t)steps],
                   worst[k] % (size_t)steps);
    for (size_t i = 0; i < n_calls; i++) {
        add(&first, t_first[i]);
        add(&replay, t_replay[i]);
        add(is_cold[i] ? &cold : &warm, t_first[i]);
        if (has_accept[i]) add(&accept, t_accept[i]);
    }
    free(t_first), free(t_replay), free(t_accept), free(is_cold), free(has_accept);
    free(allowed);
    printf("\nmask (%zu patterns x %d steps, %zu DFA states in all; fastest of %d "
           "repeat(s) per call), microseconds:\n",
           np, steps, states_total, repeat);
    report("fill_mask, cold (computed)", &cold, "us");
    report("fill_mask, warm (memo)", &warm, "us");
    report("fill_mask, first pass (all)", &first, "us");
    report("fill_mask, replay (all warm)", &replay, "us");
    report("accept_token", &accept, "us");
    free(comp.v), free(cold.v), free(warm.v), free(first.v), free(replay.v);
    free(accept.v);
    free(mask);
    free(pats);
    free(text);
    grammar_vocab_free(v);
    return 0;
}
