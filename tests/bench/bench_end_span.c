/* bench_end_span.c — the end-of-span rule (include/trellis.h,
 * trellis_request.end_span) measured on the real model: how many
 * constrained generations finish before max_tokens with the rule on and
 * off, how long they are, and that every finished one full-matches its
 * regex (PCRE2). The same runner as tests/unit/test_end_span.c
 * (end_span_run.h), with more seeds. Not a test: never run by ctest.
 *
 *   bench_end_span [--file FILE] [--limit N] [--seeds N] [--seed S]
 *                  [--max-tokens N] [--threads N] [--model PATH] [--verbose]
 *
 * FILE defaults to tests/data/grammar/end_span_regexes.txt (40 regexes
 * with unbounded quantifiers, each with a user message; --limit takes the
 * first N); each regex runs greedy and with N seeds (default 4) at
 * temperature 1.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/unit/end_span_run.h"

static void usage(void) {
    fprintf(stderr, "usage: bench_end_span [--file FILE] [--limit N] [--seeds N] "
                    "[--seed S] [--max-tokens N] [--threads N] [--model PATH] "
                    "[--verbose]\n");
}

static void row(const char *name, const es_result *r) {
    int greedy_fin = 0, n = r->n_cases;
    for (int i = 0; i < n; i++) greedy_fin += r->s[i][0].finish == TRELLIS_FINISH_STOP;
    printf("| %-4s | %4d / %-4d | %5.1f%% | %4d / %-3d | %6.1f | %5d | %6.1f s |\n", name,
           r->finished, r->total, 100.0 * r->finished / r->total, greedy_fin, n,
           r->mean_tokens, r->bad, r->seconds);
}

int main(int argc, char **argv) {
    const char *file = TRELLIS_SOURCE_DIR "/tests/data/grammar/end_span_regexes.txt";
    const char *model = NULL;
    int seeds = 4, max_tokens = 64, threads = 0, limit = ES_MAX_CASES;
    uint64_t seed = 1;
    bool verbose = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--verbose")) {
            verbose = true;
            continue;
        }
        if (!v) {
            usage();
            return 2;
        }
        if (!strcmp(a, "--file")) file = v;
        else if (!strcmp(a, "--model")) model = v;
        else if (!strcmp(a, "--seeds")) seeds = atoi(v);
        else if (!strcmp(a, "--limit")) limit = atoi(v);
        else if (!strcmp(a, "--seed")) seed = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--max-tokens")) max_tokens = atoi(v);
        else if (!strcmp(a, "--threads")) threads = atoi(v);
        else {
            usage();
            return 2;
        }
        i++;
    }
    if (seeds < 0 || seeds > ES_MAX_SEEDS || max_tokens < 1 || limit < 1 ||
        limit > ES_MAX_CASES) {
        fprintf(stderr, "bench_end_span: --seeds 0..%d, --max-tokens >= 1, "
                        "--limit 1..%d\n", ES_MAX_SEEDS, ES_MAX_CASES);
        return 2;
    }
    static es_case cs[ES_MAX_CASES];
    int n = es_load(file, cs, limit);
    if (n == 0) return 1;
    trellis_engine_options o;
    trellis_engine_options_default(&o);
    o.threads = threads;
    trellis_engine *e = NULL;
    char err[512];
    if (trellis_engine_new(model, &o, &e, err, sizeof err) != 0) {
        fprintf(stderr, "bench_end_span: %s\n", err);
        return 1;
    }
    es_result on, off;
    bool ok = es_run(e, cs, n, seeds, seed, max_tokens, TRELLIS_END_SPAN_ON, &on) &&
              es_run(e, cs, n, seeds, seed, max_tokens, TRELLIS_END_SPAN_OFF, &off);
    if (ok) {
        if (verbose) {
            for (int i = 0; i < n; i++)
                for (int j = 0; j < on.n_per_case; j++)
                    printf("%-40s %-6s on: %-6s %s\n%-40s %-6s off: %-6s %s\n", cs[i].regex,
                           j ? "seed" : "greedy", trellis_finish_name(on.s[i][j].finish),
                           on.s[i][j].text, "", j ? "seed" : "greedy",
                           trellis_finish_name(off.s[i][j].finish), off.s[i][j].text);
        }
        printf("\n%d regexes (%s), greedy + %d seeds at temperature 1, max_tokens %d\n\n",
               n, file, seeds, max_tokens);
        printf("| rule | finished    | share  | greedy    | tokens | broke | time     |\n");
        printf("| ---- | ----------- | ------ | --------- | ------ | ----- | -------- |\n");
        row("on", &on);
        row("off", &off);
        printf("\nfinished: generations that ended (finish \"stop\") before max_tokens; "
               "tokens: mean completion tokens; broke: finished outputs that do not "
               "full-match (PCRE2) or cut ones that are no prefix of a match (must be 0)\n");
    }
    int rc = ok && on.bad == 0 && off.bad == 0 ? 0 : 1;
    es_result_free(&on);
    es_result_free(&off);
    es_cases_free(cs, n);
    trellis_engine_free(e);
    return rc;
}
