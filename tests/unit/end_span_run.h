/* end_span_run.h — runs the end-of-span measurement on the real model:
 * every regex of a file (tests/data/grammar/end_span_regexes.txt: pattern,
 * TAB, user message), greedy and at temperature 1 with some seeds, with
 * the end-of-span rule on and off, all requests submitted at once so that
 * the engine batches them. Each sample is checked against PCRE2 (anchored
 * at both ends, UTF, `$` at the very end: the grammar dialect): a sample
 * that finished ("stop") must full-match; one cut at max_tokens must be a
 * prefix of a match. Shared by tests/unit/test_end_span.c (asserts) and
 * tests/bench/bench_end_span.c (prints the table).
 *
 * Plain C over include/trellis.h and PCRE2; errors go to stderr and make
 * es_run return false.
 */
#ifndef TR_TESTS_UNIT_END_SPAN_RUN_H
#define TR_TESTS_UNIT_END_SPAN_RUN_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "trellis.h"

#define ES_MAX_CASES 256
#define ES_MAX_SEEDS 16

typedef struct es_case {
    char *regex, *prompt;
    pcre2_code *full, *partial;
} es_case;

typedef struct es_sample {
    char *text;
    size_t len;
    trellis_finish finish;
    int32_t n_tokens;
    bool matches;    /* full match (finish stop) or live prefix (length) */
} es_sample;

/* One setting's results: [case][0] greedy, [case][1 + k] seed k. */
typedef struct es_result {
    int n_cases, n_per_case;
    es_sample (*s)[1 + ES_MAX_SEEDS];
    int finished, total, bad; /* bad: outputs that broke their regex */
    double mean_tokens;       /* over all samples */
    double seconds;
} es_result;

static inline pcre2_code *es_pcre(const char *rx, bool partial) {
    size_t n = strlen(rx) + 8;
    char *pat = malloc(n);
    if (!pat) return NULL;
    snprintf(pat, n, partial ? "(?:%s)$" : "%s", rx);
    int ec;
    PCRE2_SIZE eo;
    uint32_t opt = PCRE2_UTF | PCRE2_ANCHORED | PCRE2_DOLLAR_ENDONLY;
    if (!partial) opt |= PCRE2_ENDANCHORED;
    pcre2_code *c = pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED, opt, &ec,
                                  &eo, NULL);
    free(pat);
    return c;
}

static inline bool es_match(pcre2_code *c, const char *s, size_t len, bool partial) {
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(c, NULL);
    int rc = pcre2_match(c, (PCRE2_SPTR)s, len, 0, partial ? PCRE2_PARTIAL_HARD : 0,
                         md, NULL);
    pcre2_match_data_free(md);
    return rc >= 0 || (partial && rc == PCRE2_ERROR_PARTIAL);
}

/* Reads the cases of path; returns how many (0 on error, said on stderr). */
static inline int es_load(const char *path, es_case *cs, int max) {
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "cannot open %s\n", path);
        return 0;
    }
    char line[4096];
    int n = 0;
    while (n < max && fgets(line, sizeof line, f)) {
        size_t l = strlen(line);
        while (l && (line[l - 1] == '\n' || line[l - 1] == '\r')) line[--l] = 0;
        if (!l || line[0] == '#') continue;
        char *tab = strchr(line, '\t');
        if (!tab) {
            fprintf(stderr, "%s: no TAB in '%s'\n", path, line);
            fclose(f);
            return 0;
        }
        *tab = 0;
        cs[n].regex = strdup(line);
        cs[n].prompt = strdup(tab + 1);
        cs[n].full = es_pcre(line, false);
        cs[n].partial = es_pcre(line, true);
        if (!cs[n].full || !cs[n].partial) {
            fprintf(stderr, "%s: PCRE2 rejects /%s/\n", path, line);
            fclose(f);
            return 0;
        }
        n++;
    }
    fclose(f);
    return n;
}

static inline void es_cases_free(es_case *cs, int n) {
    for (int i = 0; i < n; i++) {
        free(cs[i].regex);
        free(cs[i].prompt);
        pcre2_code_free(cs[i].full);
        pcre2_code_free(cs[i].partial);
    }
}

static inline void es_result_free(es_result *r) {
    if (!r->s) return;
    for (int i = 0; i < r->n_cases; i++)
        for (int j = 0; j < r->n_per_case; j++) free(r->s[i][j].text);
    free(r->s);
    r->s = NULL;
}

static inline double es_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* Runs every case greedy and with seeds seed0 .. seed0 + n_seeds - 1 at
 * temperature 1 (one request with n = n_seeds; none when 0), end_span as
 * given. */
static inline bool es_run(trellis_engine *e, es_case *cs, int n_cases, int n_seeds,
                          uint64_t seed0, int32_t max_tokens, int32_t end_span,
                          es_result *out) {
    memset(out, 0, sizeof *out);
    out->n_cases = n_cases;
    out->n_per_case = 1 + n_seeds;
    out->s = calloc((size_t)n_cases, sizeof *out->s);
    uint64_t *ids = calloc((size_t)n_cases * 2, sizeof *ids);
    if (!out->s || !ids) {
        free(ids);
        return false;
    }
    double t0 = es_now();
    for (int i = 0; i < n_cases; i++) {
        for (int g = 0; g < (n_seeds > 0 ? 2 : 1); g++) { /* 0: greedy, 1: seeds */
            trellis_message m = {"user", cs[i].prompt};
            trellis_request q;
            trellis_request_default(&q);
            q.messages = &m;
            q.n_messages = 1;
            q.regex = cs[i].regex;
            q.max_tokens = max_tokens;
            q.end_span = end_span;
            q.temperature = g == 0 ? 0.0f : 1.0f;
            q.n = g == 0 ? 1 : n_seeds;
            q.seed = seed0;
            q.user = (void *)(intptr_t)(2 * i + g);
            char err[512];
            if (trellis_submit(e, &q, &ids[2 * i + g], err, sizeof err) != 0) {
                fprintf(stderr, "/%s/: %s\n", cs[i].regex, err);
                free(ids);
                return false;
            }
        }
    }
    int left = n_cases * out->n_per_case;
    bool ok = true;
    while (left > 0) {
        trellis_event *ev;
        if (trellis_wait(e, 600000, &ev) != 1) {
            fprintf(stderr, "no event for 10 minutes\n");
            ok = false;
            break;
        }
        int k = (int)(intptr_t)ev->user, i = k / 2;
        int j = k % 2 == 0 ? 0 : 1 + ev->index;
        es_sample *s = &out->s[i][j];
        if (ev->kind == TRELLIS_EVENT_DONE) {
            s->text = malloc(ev->text_len + 1);
            if (s->text) {
                memcpy(s->text, ev->text, ev->text_len + 1);
                s->len = ev->text_len;
            }
            s->finish = ev->finish;
            s->n_tokens = ev->metrics.completion_tokens;
            if (ev->finish == TRELLIS_FINISH_ERROR) {
                fprintf(stderr, "/%s/: error: %s\n", cs[i].regex, ev->error);
                ok = false;
            }
            left--;
        }
        trellis_event_free(ev);
    }
    out->seconds = es_now() - t0;
    free(ids);
    double tokens = 0;
    for (int i = 0; i < n_cases; i++) {
        for (int j = 0; j < out->n_per_case; j++) {
            es_sample *s = &out->s[i][j];
            bool fin = s->finish == TRELLIS_FINISH_STOP;
            s->matches = s->text && es_match(fin ? cs[i].full : cs[i].partial, s->text,
                                             s->len, !fin);
            out->total++;
            out->finished += fin;
            out->bad += !s->matches;
            tokens += s->n_tokens;
        }
    }
    out->mean_tokens = out->total ? tokens / out->total : 0;
    return ok;
}

#endif
