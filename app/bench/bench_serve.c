/* bench_serve.c — `trellis bench serve`: throughput and latency of the
 * engine under load, in-process through the public C API (over HTTP once
 * the server exists).
 *
 *   trellis bench serve [-m MODEL] [--workload random,fewshot,multiturn,json]
 *       [--concurrency 1,8,32,64] [--radix on,off] [--requests N]
 *       [--csv FILE] [--png FILE] [engine options: app/common/engine_flags.h]
 *
 * For each workload x radix setting x concurrency C it starts a fresh
 * engine (so no cache survives from one configuration to the next) and
 * runs a closed loop: C clients, each submitting its next request as soon
 * as the previous one is done, until the workload's requests are done.
 * Prompts are token ids drawn from a seeded generator (speed does not
 * depend on content), so runs are reproducible.
 *
 * Workloads:
 *   random     prompts of 32..256 random tokens (--prompt-min/max), 64
 *              output tokens each (EOS ignored: every request generates
 *              the same amount).
 *   fewshot    one shared 1,500-token prefix + a different 24..40-token
 *              question per request, 16 output tokens; 64 requests.
 *   multiturn  conversations of 8 turns: a 64-token system prompt, then per
 *              turn a new 24..40-token user message appended to the whole
 *              history (previous prompts and answers), 32 output tokens.
 *              Reports the cached share of prompt tokens from turn 2 on.
 *   json       random 64-token prompts, output constrained by a regex for a
 *              small JSON object (grammar masks on every step).
 *
 * Output: a table on stdout, a CSV (--csv) with every figure, and a PNG
 * (--png, through gnuplot when installed) of output throughput and TTFT /
 * TPOT p50/p99 against concurrency, radix on and off.
 *
 * Scheduler overhead is the engine's own measure (trellis_stats): the time
 * the engine thread spends outside the forward pass and sampling (planning,
 * batch building, radix bookkeeping, events), as a share of step time.
 *
 * Layering: applications (app/bench); the engine through
 * include/trellis.h only.
 */
#include "app/bench/bench.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "app/common/args.h"
#include "app/common/engine_flags.h"
#include "base/hash.h"
#include "trellis.h"

#define BENCH_MAX_LIST 16

typedef enum bench_workload {
    WL_RANDOM,
    WL_FEWSHOT,
    WL_MULTITURN,
    WL_JSON,
    WL_COUNT_,
} bench_workload;

static const char *const k_wl_names[WL_COUNT_] = {"random", "fewshot",
                                                  "multiturn", "json"};

#define JSON_REGEX "\\{\"name\": \"[a-z]{3,8}\", \"age\": [1-9][0-9]?\\}"

typedef struct bench_opts {
    const char *model;
    const char *csv, *png;
    int workloads[WL_COUNT_];
    int n_workloads;
    int conc[BENCH_MAX_LIST];
    int n_conc;
    int radix[2]; /* 1 = on, 0 = off */
    int n_radix;
    int requests;   /* 0: the workload's default */
    tr_engine_flags engine; /* 2 threads and max(64, concurrency) running
                               unless given */
    int max_tokens; /* 0: the workload's default */
    int turns;
    int prefix;     /* fewshot prefix tokens */
    int prompt_min, prompt_max; /* random: prompt length range */
    uint64_t seed;
    int repeat;     /* runs per configuration, interleaved; median kept */
    bool quiet;
} bench_opts;

/* One configuration's results. */
typedef struct bench_row {
    bench_workload wl;
    int radix, conc, requests;
    double duration_s, out_tok_s, total_tok_s;
    double ttft_mean, ttft_p50, ttft_p99, tpot_mean, tpot_p50, tpot_p99, e2e_p50;
    double queue_mean;
    uint64_t prompt_tokens, cached_tokens, prefill_tokens, generated;
    double hit_rate, hit_rate_turn2;
    uint64_t steps, preemptions;
    double mean_batch, sched_pct, sample_pct, forward_pct, overlap_pct;
    double sched_ms_per_step;
    int errors;
} bench_row;

/* ---- helpers ---- */

static double mean(const double *v, int n) {
    double s = 0;
    for (int i = 0; i < n; i++) s += v[i];
    return n ? s / n : 0;
}

static bool parse_list(const char *s, int *out, int *n, int max) {
    *n = 0;
    while (*s) {
        char *end;
        errno = 0;
        long v = strtol(s, &end, 10);
        if (end == s || errno || v <= 0 || v > 4096 || *n >= max) return false;
        out[(*n)++] = (int)v;
        s = end;
        if (*s == ',') s++;
        else if (*s) return false;
    }
    return *n > 0;
}

/* ---- one configuration ---- */

/* A client slot: one outstanding request at a time. For multiturn it also
 * carries the conversation so far. */
typedef struct client {
    uint64_t id;      /* outstanding request, 0 when idle */
    int32_t *hist;    /* multiturn: tokens of the conversation so far */
    int32_t n_hist, cap_hist;
    int turn;         /* multiturn: turns done */
    int conv;         /* conversation number */
    int32_t *answer;  /* tokens of the current answer */
    int32_t n_answer, cap_answer;
    int cur_turn;     /* turn of the outstanding request */
} client;

static bool push_ids(int32_t **buf, int32_t *n, int32_t *cap, const int32_t *src,
                     int k) {
    if (*n + k > *cap) {
        int32_t c = (*cap ? *cap : 256);
        while (c < *n + k) c *= 2;
        int32_t *p = realloc(*buf, (size_t)c * sizeof *p);
        if (!p) return false;
        *buf = p;
        *cap = c;
    }
    memcpy(*buf + *n, src, (size_t)k * sizeof *src);
    *n += k;
    return true;
}

typedef struct wl_state {
    bench_workload wl;
    const bench_opts *o;
    int32_t *prefix; /* fewshot shared prefix */
    int32_t *sys;    /* multiturn system prompt */
    int next;        /* requests (or conversations) started */
    int reserved;    /* multiturn: the turns of the conversations begun,
                        so that those running cannot overrun total */
    int total;       /* requests to run */
} wl_state;

static int wl_default_requests(bench_workload wl, int conc, const bench_opts *o) {
    if (o->requests > 0) return o->requests;
    switch (wl) {
    case WL_FEWSHOT: return 64;
    case WL_MULTITURN: return (conc < 4 ? 4 : conc) * o->turns;
    default: return conc < 8 ? 16 : 2 * conc;
    }
}

/* Submits the next request of client c; false when the workload is done
 * (or on error, counted). */
static bool submit_next(trellis_engine *e, wl_state *w, client *c, int *errors) {
    const bench_opts *o = w->o;
    int32_t buf[2048];
    int32_t *toks = buf;
    int n = 0;
    trellis_request q;
    trellis_request_default(&q);
    q.ignore_eos = true;
    q.temperature = 0.7f;
    uint64_t r = tr_splitmix64(o->seed ^ ((uint64_t)w->wl << 56) ^ (uint64_t)w->next);
    q.seed = r;
    switch (w->wl) {
    case WL_RANDOM:
        if (w->next >= w->total) return false;
        n = o->prompt_min + (int)(r % (uint64_t)(o->prompt_max - o->prompt_min + 1));
        tr_bench_rand_ids(r, buf, n);
        q.max_tokens = o->max_tokens ? o->max_tokens : 64;
        w->next++;
        break;
    case WL_FEWSHOT: {
        if (w->next >= w->total) return false;
        int qn = 24 + (int)(r % 17);
        memcpy(buf, w->prefix, (size_t)o->prefix * sizeof *buf);
        tr_bench_rand_ids(r, buf + o->prefix, qn);
        n = o->prefix + qn;
        q.max_tokens = o->max_tokens ? o->max_tokens : 16;
        w->next++;
        break;
    }
    case WL_MULTITURN: {
        if (c->turn == 0 || c->turn >= o->turns) {
            /* a new conversation */
            if (w->reserved + o->turns > w->total) return false;
            w->reserved += o->turns;
            c->conv = w->next / o->turns;
            c->turn = 0;
            c->n_hist = 0;
            if (!push_ids(&c->hist, &c->n_hist, &c->cap_hist, w->sys, 64)) return false;
        } else {
            /* the previous answer joins the history */
            if (!push_ids(&c->hist, &c->n_hist, &c->cap_hist, c->answer, c->n_answer))
                return false;
        }
        int un = 24 + (int)(r % 17);
        int32_t user[64];
        tr_bench_rand_ids(r, user, un);
        if (!push_ids(&c->hist, &c->n_hist, &c->cap_hist, user, un)) return false;
        toks = c->hist;
        n = c->n_hist;
        q.max_tokens = o->max_tokens ? o->max_tokens : 32;
        c->cur_turn = c->turn;
        c->n_answer = 0;
        w->next++;
        break;
    }
    case WL_JSON:
        if (w->next >= w->total) return false;
        n = 64;
        tr_bench_rand_ids(r, buf, n);
        q.regex = JSON_REGEX;
        q.ignore_eos = false;
        q.max_tokens = o->max_tokens ? o->max_tokens : 48;
        w->next++;
        break;
    default:
        return false;
    }
    q.tokens = toks;
    q.n_tokens = n;
    char err[512];
    if (trellis_submit(e, &q, &c->id, err, sizeof err) != TRELLIS_OK) {
        fprintf(stderr, "trellis bench serve: submit failed: %s\n", err);
        (*errors)++;
        c->id = 0;
        return false;
    }
    return true;
}

static int run_config(const bench_opts *o, bench_workload wl, int radix, int conc,
                      bench_row *row) {
    memset(row, 0, sizeof *row);
    row->wl = wl;
    row->radix = radix;
    row->conc = conc;
    trellis_engine_options eo = o->engine.opts;
    /* every client running at once, unless --max-running says otherwise */
    if (!o->engine.given[TR_EF_MAX_RUNNING] && conc > eo.max_running) eo.max_running = conc;
    eo.no_radix = !radix;
    trellis_engine *e;
    char err[512];
    if (trellis_engine_new(o->model, &eo, &e, err, sizeof err) != TRELLIS_OK) {
        fprintf(stderr, "trellis bench serve: %s\n", err);
        return 1;
    }
    wl_state w = {.wl = wl, .o = o, .total = wl_default_requests(wl, conc, o)};
    row->requests = w.total;
    w.prefix = malloc((size_t)(o->prefix > 0 ? o->prefix : 1) * sizeof(int32_t));
    w.sys = malloc(64 * sizeof(int32_t));
    client *cl = calloc((size_t)conc, sizeof *cl);
    double *ttft = calloc((size_t)w.total + 1, sizeof(double));
    double *tpot = calloc((size_t)w.total + 1, sizeof(double));
    double *e2e = calloc((size_t)w.total + 1, sizeof(double));
    double *queue = calloc((size_t)w.total + 1, sizeof(double));
    if (!w.prefix || !w.sys || !cl || !ttft || !tpot || !e2e || !queue) {
        fprintf(stderr, "trellis bench serve: out of memory\n");
        trellis_engine_free(e);
        return 1;
    }
    tr_bench_rand_ids(o->seed + 1, w.prefix, o->prefix);
    tr_bench_rand_ids(o->seed + 2, w.sys, 64);

    int done = 0, n_tpot = 0, active = 0;
    uint64_t p2 = 0, c2 = 0;
    double t0 = tr_bench_now_s();
    for (int i = 0; i < conc; i++)
        if (submit_next(e, &w, &cl[i], &row->errors)) active++;
    while (active > 0) {
        trellis_event *ev;
        if (!trellis_wait(e, 600000, &ev)) {
            fprintf(stderr, "trellis bench serve: no event for 10 minutes; giving up\n");
            break;
        }
        client *c = NULL;
        for (int i = 0; i < conc; i++)
            if (cl[i].id == ev->request_id) c = &cl[i];
        if (c && wl == WL_MULTITURN && ev->n_tokens)
            push_ids(&c->answer, &c->n_answer, &c->cap_answer, ev->tokens, ev->n_tokens);
        if (ev->kind == TRELLIS_EVENT_DONE) {
            const trellis_metrics *m = &ev->metrics;
            if (ev->finish == TRELLIS_FINISH_ERROR) {
                row->errors++;
                if (!o->quiet) fprintf(stderr, "trellis bench serve: request failed: %s\n", ev->error);
            }
            ttft[done] = m->ttft_ms;
            e2e[done] = m->e2e_ms;
            queue[done] = m->queue_ms;
            if (m->completion_tokens > 1) tpot[n_tpot++] = m->tpot_ms;
            row->prompt_tokens += (uint64_t)m->prompt_tokens;
            row->cached_tokens += (uint64_t)m->cached_tokens;
            row->generated += (uint64_t)m->completion_tokens;
            if (c && wl == WL_MULTITURN && c->cur_turn >= 1) {
                p2 += (uint64_t)m->prompt_tokens;
                c2 += (uint64_t)m->cached_tokens;
            }
            done++;
            if (c) {
                c->id = 0;
                c->turn++;
                active--;
                if (submit_next(e, &w, c, &row->errors)) active++;
            }
        }
        trellis_event_free(ev);
    }
    double t1 = tr_bench_now_s();
    trellis_stats st;
    trellis_get_stats(e, &st);
    row->duration_s = t1 - t0;
    row->out_tok_s = row->generated / row->duration_s;
    row->total_tok_s = (row->generated + row->prompt_tokens) / row->duration_s;
    row->ttft_mean = mean(ttft, done);
    row->ttft_p50 = tr_bench_pct(ttft, done, 0.50);
    row->ttft_p99 = tr_bench_pct(ttft, done, 0.99);
    row->tpot_mean = mean(tpot, n_tpot);
    row->tpot_p50 = tr_bench_pct(tpot, n_tpot, 0.50);
    row->tpot_p99 = tr_bench_pct(tpot, n_tpot, 0.99);
    row->e2e_p50 = tr_bench_pct(e2e, done, 0.50);
    row->queue_mean = mean(queue, done);
    row->prefill_tokens = st.prefill_tokens;
    row->hit_rate = row->prompt_tokens ? (double)row->cached_tokens / row->prompt_tokens : 0;
    row->hit_rate_turn2 = p2 ? (double)c2 / p2 : 0;
    row->steps = st.steps;
    row->preemptions = st.preemptions;
    row->mean_batch = st.steps ? (double)st.batch_tokens / st.steps : 0;
    if (st.step_s > 0) {
        row->sched_pct = 100 * st.schedule_s / st.step_s;
        row->sample_pct = 100 * st.sample_s / st.step_s;
        row->forward_pct = 100 * st.forward_s / st.step_s;
        row->overlap_pct = 100 * st.overlap_s / st.step_s;
    }
    row->sched_ms_per_step = st.steps ? 1e3 * st.schedule_s / st.steps : 0;
    for (int i = 0; i < conc; i++) {
        free(cl[i].hist);
        free(cl[i].answer);
    }
    free(cl);
    free(ttft);
    free(tpot);
    free(e2e);
    free(queue);
    free(w.prefix);
    free(w.sys);
    trellis_engine_free(e);
    return 0;
}

/* ---- output ---- */

static void print_header(void) {
    printf("%-9s %-5s %4s %5s %8s %9s %9s %9s %9s %8s %8s %9s %6s %6s %6s %6s\n",
           "workload", "radix", "conc", "reqs", "time_s", "out_tok/s",
           "ttft_mean", "ttft_p50", "ttft_p99", "tpot_p50", "tpot_p99",
           "prefill", "hit%", "batch", "sched%", "pre");
}

static void print_row(const bench_row *r) {
    printf("%-9s %-5s %4d %5d %8.1f %9.1f %9.0f %9.0f %9.0f %8.1f %8.1f %9llu %6.1f %6.1f %6.2f %6llu",
           k_wl_names[r->wl], r->radix ? "on" : "off", r->conc, r->requests,
           r->duration_s, r->out_tok_s, r->ttft_mean, r->ttft_p50, r->ttft_p99,
           r->tpot_p50, r->tpot_p99, (unsigned long long)r->prefill_tokens,
           100 * r->hit_rate, r->mean_batch, r->sched_pct,
           (unsigned long long)r->preemptions);
    if (r->wl == WL_MULTITURN) printf("  turn2+ hit %.1f%%", 100 * r->hit_rate_turn2);
    if (r->errors) printf("  (%d errors)", r->errors);
    printf("\n");
    fflush(stdout);
}

static void write_csv(FILE *f, const bench_row *rows, int n) {
    fprintf(f, "workload,radix,concurrency,requests,duration_s,output_tok_s,"
               "total_tok_s,ttft_mean_ms,ttft_p50_ms,ttft_p99_ms,tpot_mean_ms,"
               "tpot_p50_ms,tpot_p99_ms,e2e_p50_ms,queue_mean_ms,prompt_tokens,"
               "cached_tokens,prefill_tokens,generated_tokens,hit_rate,"
               "hit_rate_turn2plus,steps,mean_batch_tokens,sched_pct,sample_pct,"
               "forward_pct,overlap_pct,sched_ms_per_step,preemptions,errors\n");
    for (int i = 0; i < n; i++) {
        const bench_row *r = &rows[i];
        fprintf(f, "%s,%s,%d,%d,%.3f,%.2f,%.2f,%.2f,%.2f,%.2f,%.3f,%.3f,%.3f,%.2f,"
                   "%.2f,%llu,%llu,%llu,%llu,%.4f,%.4f,%llu,%.2f,%.3f,%.3f,%.3f,"
                   "%.3f,%.4f,%llu,%d\n",
                k_wl_names[r->wl], r->radix ? "on" : "off", r->conc, r->requests,
                r->duration_s, r->out_tok_s, r->total_tok_s, r->ttft_mean,
                r->ttft_p50, r->ttft_p99, r->tpot_mean, r->tpot_p50, r->tpot_p99,
                r->e2e_p50, r->queue_mean, (unsigned long long)r->prompt_tokens,
                (unsigned long long)r->cached_tokens,
                (unsigned long long)r->prefill_tokens,
                (unsigned long long)r->generated, r->hit_rate, r->hit_rate_turn2,
                (unsigned long long)r->steps, r->mean_batch, r->sched_pct,
                r->sample_pct, r->forward_pct, r->overlap_pct,
                r->sched_ms_per_step, (unsigned long long)r->preemptions,
                r->errors);
    }
}

/* Plots the CSV with gnuplot (if installed): three panels against
 * concurrency, one line per workload and radix setting. */
static int plot(const char *csv, const char *png, const bench_row *rows, int n) {
    FILE *g = popen("gnuplot 2>&1", "w");
    if (!g) return 1;
    fprintf(g,
            "set terminal pngcairo size 1500,480 font ',10'\n"
            "set output '%s'\n"
            "set datafile separator ','\n"
            "set key top left font ',8'\n"
            "set logscale x 2\n"
            "set xlabel 'concurrent clients'\n"
            "set grid\n"
            "set multiplot layout 1,3 title 'trellis bench serve'\n",
            png);
    const char *panels[3][3] = {
        {"output tokens/s", "6", ""},
        {"TTFT (ms)", "9", "10"},
        {"TPOT (ms)", "12", "13"},
    };
    for (int p = 0; p < 3; p++) {
        fprintf(g, "set title '%s'\n", panels[p][0]);
        if (p > 0) fprintf(g, "set logscale y\n");
        fprintf(g, "plot ");
        bool first = true;
        for (int w = 0; w < WL_COUNT_; w++) {
            for (int rd = 1; rd >= 0; rd--) {
                bool any = false;
                for (int i = 0; i < n; i++)
                    if ((int)rows[i].wl == w && rows[i].radix == rd) any = true;
                if (!any) continue;
                for (int k = 1; k <= (panels[p][2][0] ? 2 : 1); k++) {
                    const char *col = panels[p][k];
                    fprintf(g,
                            "%s'%s' skip 1 using (strcol(1) eq '%s' && strcol(2) "
                            "eq '%s' ? $3 : NaN):%s with linespoints title '%s "
                            "radix %s%s' %s",
                            first ? "" : ", ", csv, k_wl_names[w], rd ? "on" : "off",
                            col, k_wl_names[w], rd ? "on" : "off",
                            panels[p][2][0] ? (k == 1 ? " p50" : " p99") : "",
                            k == 2 ? "dashtype 2" : "");
                    first = false;
                }
            }
        }
        fprintf(g, "\n");
    }
    fprintf(g, "unset multiplot\n");
    int rc = pclose(g);
    return rc == 0 ? 0 : 1;
}

/* ---- arguments ---- */

/* A comma-separated list of names: out[k] = the index in names. */
static bool parse_names(const char *flag, const char *s, const char *const *names,
                        int n_names, int *out, int *n, int max) {
    *n = 0;
    char tmp[256];
    snprintf(tmp, sizeof tmp, "%s", s);
    char *save = NULL;
    for (char *t = strtok_r(tmp, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        int k = -1;
        for (int w = 0; w < n_names; w++)
            if (!strcmp(t, names[w])) k = w;
        if (k < 0 || *n >= max) {
            fprintf(stderr, "trellis bench serve: %s: unknown or too many: '%s'\n", flag, t);
            return false;
        }
        out[(*n)++] = k;
    }
    if (*n == 0) fprintf(stderr, "trellis bench serve: %s: empty list\n", flag);
    return *n > 0;
}

#define SERVE_USAGE "[-m MODEL] [--workload LIST] [--concurrency LIST] [--radix LIST] [options]"

/* The flags into *o; 0, or the exit status (-1: --help, exit 0). */
static int parse(int argc, char **argv, bench_opts *o) {
    const char *workload = "random,fewshot,multiturn,json", *conc = "1,8,32,64",
               *radix = "on,off";
    bool help = false;
    int64_t requests = 0, max_tokens = 0, turns = 8, prefix = 1500, pmin = 32, pmax = 256,
            seed = 1, repeat = 1;
    const cli_opt opts[] = {
        {"--model", "-m", CLI_STR, &o->model, 1, 0, "GGUF model file",
         "the cached default model", .meta = "FILE"},
        {"--workload", NULL, CLI_STR, &workload, 1, 0,
         "workloads: random, fewshot, multiturn, json", "all four", .meta = "LIST"},
        {"--concurrency", NULL, CLI_STR, &conc, 1, 0, "concurrent clients (1..4096 each)",
         "1,8,32,64", .meta = "LIST"},
        {"--radix", NULL, CLI_STR, &radix, 1, 0, "prefix cache: on, off or on,off", "on,off",
         .meta = "LIST"},
        {"--requests", NULL, CLI_INT, &requests, 1, 1000000, "requests per configuration",
         "per workload"},
        {"--max-tokens", NULL, CLI_INT, &max_tokens, 1, 100000,
         "output tokens per request", "per workload"},
        {"--turns", NULL, CLI_INT, &turns, 1, 100, "multiturn: turns per conversation", "8"},
        {"--prefix", NULL, CLI_INT, &prefix, 1, 2000, "fewshot: shared prefix tokens", "1500"},
        {"--prompt-min", NULL, CLI_INT, &pmin, 1, 2000, "random: shortest prompt", "32"},
        {"--prompt-max", NULL, CLI_INT, &pmax, 1, 2000, "random: longest prompt", "256"},
        {"--seed", NULL, CLI_INT, &seed, 0, 1 << 30, "workload seed", "1"},
        {"--repeat", NULL, CLI_INT, &repeat, 1, 100,
         "runs per configuration, interleaved; the run of median throughput is kept", "1"},
        {"--csv", NULL, CLI_STR, &o->csv, 1, 0, "write every figure as CSV", .meta = "FILE"},
        {"--png", NULL, CLI_STR, &o->png, 1, 0, "plot the CSV with gnuplot (needs --csv)",
         .meta = "FILE"},
        {"--quiet", NULL, CLI_FLAG, &o->quiet, 1, 0, "no message per failed request", "off"},
    };
    o->engine.opts.threads = 2;
    o->engine.shown[TR_EF_MAX_RUNNING] = "max(64, concurrency)";
    o->engine.shown[TR_EF_NO_RADIX] = "off; the same as --radix off";
    cli_cmd c = {.name = "bench serve", .usage = SERVE_USAGE, .opts = opts,
                 .n_opts = sizeof opts / sizeof opts[0]};
    tr_engine_flags_attach(&o->engine, &c);
    if (!tr_cli_parse(&c, argc - 1, argv + 1, &help)) return 2;
    if (help) return -1;
    if (o->engine.opts.no_radix) radix = "off";
    static const char *const onoff[] = {"off", "on"};
    if (!parse_names("--workload", workload, k_wl_names, WL_COUNT_, o->workloads,
                     &o->n_workloads, WL_COUNT_) ||
        !parse_names("--radix", radix, onoff, 2, o->radix, &o->n_radix, 2))
        return 2;
    if (!parse_list(conc, o->conc, &o->n_conc, BENCH_MAX_LIST)) {
        fprintf(stderr, "trellis bench serve: --concurrency: expects a list of 1..4096 "
                        "like 1,8,32,64, got '%s'\n", conc);
        return 2;
    }
    o->requests = (int)requests, o->max_tokens = (int)max_tokens, o->turns = (int)turns;
    o->prefix = (int)prefix, o->prompt_min = (int)pmin, o->prompt_max = (int)pmax;
    o->seed = (uint64_t)seed, o->repeat = (int)repeat;
    if (o->prompt_min > o->prompt_max) {
        fprintf(stderr, "trellis bench serve: --prompt-min: above --prompt-max (%d > %d)\n",
                o->prompt_min, o->prompt_max);
        return 2;
    }
    if (o->png && !o->csv) {
        fprintf(stderr, "trellis bench serve: --png: needs --csv (the plot reads it)\n");
        return 2;
    }
    return 0;
}

int tr_bench_serve(int argc, char **argv) {
    bench_opts o = {0};
    tr_engine_flags_init(&o.engine);
    int prc = parse(argc, argv, &o);
    if (prc) return prc < 0 ? 0 : prc;
    int n_cfg = o.n_workloads * o.n_radix * o.n_conc;
    bench_row *all = calloc((size_t)n_cfg * (size_t)o.repeat, sizeof *all);
    bench_row *rows = calloc((size_t)n_cfg, sizeof *rows);
    if (!all || !rows) {
        free(all);
        free(rows);
        fprintf(stderr, "trellis bench serve: out of memory\n");
        return 1;
    }
    int n = 0, rc = 0;
    print_header();
    /* repeats outermost, so that a noisy minute on a shared machine hits
     * one run of every configuration rather than all runs of one */
    for (int rep = 0; rep < o.repeat && rc == 0; rep++) {
        int k = 0;
        for (int w = 0; w < o.n_workloads && rc == 0; w++)
            for (int c = 0; c < o.n_conc && rc == 0; c++)
                for (int rd = 0; rd < o.n_radix && rc == 0; rd++, k++) {
                    bench_row *r = &all[(size_t)k * (size_t)o.repeat + (size_t)rep];
                    rc = run_config(&o, (bench_workload)o.workloads[w],
                                    o.radix[rd], o.conc[c], r);
                    if (rc == 0) print_row(r);
                }
    }
    if (rc == 0) {
        for (int k = 0; k < n_cfg; k++) {
            bench_row *runs = &all[(size_t)k * (size_t)o.repeat];
            /* the run of median output throughput (insertion sort) */
            for (int i = 1; i < o.repeat; i++)
                for (int j = i; j > 0 && runs[j].out_tok_s < runs[j - 1].out_tok_s; j--) {
                    bench_row t = runs[j];
                    runs[j] = runs[j - 1];
                    runs[j - 1] = t;
                }
            rows[n++] = runs[o.repeat / 2];
        }
        if (o.repeat > 1) {
            printf("\nmedians of %d runs:\n", o.repeat);
            print_header();
            for (int i = 0; i < n; i++) print_row(&rows[i]);
        }
    }
    free(all);
    if (o.csv && n > 0) {
        FILE *f = fopen(o.csv, "w");
        if (!f) {
            fprintf(stderr, "trellis bench serve: --csv: cannot write '%s': %s\n", o.csv,
                    strerror(errno));
            rc = 1;
        } else {
            write_csv(f, rows, n);
            fclose(f);
        }
    }
    if (o.png && rc == 0 && plot(o.csv, o.png, rows, n) != 0)
        fprintf(stderr, "trellis bench serve: --png: gnuplot failed or is not installed: no %s\n",
                o.png);
    free(rows);
    return rc;
}
