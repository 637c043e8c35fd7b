/* bench_stream.c — `trellis bench stream`: one client's stream through
 * `trellis serve` against the same requests in-process, alternating, so
 * that what the HTTP path costs shows as a ratio.
 *
 *   trellis bench stream --url http://127.0.0.1:8080 [-m MODEL]
 *       [--rounds 5] [--requests 8] [--prompt-tokens 200] [--max-tokens 128]
 *       [--seed 1] [--api-key KEY] [engine flags: the server's own]
 *
 * Each round sends --requests requests one after the other down each
 * path, HTTP first in even rounds and in-process first in odd ones:
 * prompts of --prompt-tokens random token ids (a fresh set per round, the
 * same set for both paths, so neither path's prefix cache helps), greedy,
 * EOS ignored, --max-tokens tokens each. The in-process engine is loaded
 * once with the engine flags given here, which should be the server's;
 * while one path runs the other's threads sleep.
 *
 * Both paths are timed the same way, by the client as it receives: TTFT =
 * first output token received - request sent; TPOT = (last - first) /
 * (tokens - 1). In-process the client is this thread waiting on
 * trellis_wait; over HTTP it is this thread reading the SSE stream of
 * /v1/completions with the small blocking client of frontend/http.h (no
 * JSON parsing: a delta is an event whose "text" is not empty), so the
 * client costs the two cores little. Prints each round's medians and the
 * median over rounds of the HTTP / in-process ratios; also the client
 * thread's CPU time per output token on each path.
 *
 * Layering: applications (app/bench); the engine through
 * include/trellis.h, HTTP through frontend/http.h. Single-threaded apart
 * from the engine's threads.
 */
#include "app/bench/bench.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "app/common/args.h"
#include "app/common/engine_flags.h"
#include "frontend/http.h"
#include "trellis.h"

#define STREAM_MAX_ROUNDS 100
#define STREAM_MAX_REQUESTS 1000

typedef struct stream_opts {
    const char *model, *url, *api_key;
    int rounds, requests, prompt_tokens, max_tokens;
    uint64_t seed;
    tr_engine_flags engine;
} stream_opts;

/* One request's figures as the client saw them. */
typedef struct stream_timing {
    double ttft, tpot; /* seconds */
    int tokens;
    double cpu;        /* this thread's CPU seconds */
} stream_timing;

/* One path of one round. */
typedef struct stream_side {
    double ttft_p50, tpot_p50, cpu_per_token;
    int errors;
} stream_side;

static double thread_cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static uint64_t prompt_seed(const stream_opts *o, int round, int i) {
    return o->seed * 1000003ull + (uint64_t)round * 4099ull + (uint64_t)i;
}

/* ---- in-process ---- */

static bool run_inproc(trellis_engine *e, const stream_opts *o, const int32_t *ids,
                       stream_timing *t) {
    trellis_request q;
    trellis_request_default(&q);
    q.tokens = ids;
    q.n_tokens = o->prompt_tokens;
    q.max_tokens = o->max_tokens;
    q.temperature = 0;
    q.ignore_eos = true;
    q.stream = true;
    char err[512];
    uint64_t id;
    double c0 = thread_cpu_s(), t0 = tr_bench_now_s(), first = 0, last = 0;
    if (trellis_submit(e, &q, &id, err, sizeof err) != TRELLIS_OK) {
        fprintf(stderr, "trellis bench stream: in-process submit failed: %s\n", err);
        return false;
    }
    int tokens = 0;
    bool ok = false;
    for (;;) {
        trellis_event *ev;
        if (!trellis_wait(e, 600000, &ev)) {
            fprintf(stderr, "trellis bench stream: no in-process event for 10 minutes\n");
            return false;
        }
        if (ev->n_tokens > 0) {
            last = tr_bench_now_s();
            if (!tokens) first = last;
            tokens += ev->n_tokens;
        }
        bool done = ev->kind == TRELLIS_EVENT_DONE && ev->request_done;
        if (ev->kind == TRELLIS_EVENT_DONE && ev->finish == TRELLIS_FINISH_ERROR)
            fprintf(stderr, "trellis bench stream: in-process request failed: %s\n", ev->error);
        else if (done)
            ok = true;
        trellis_event_free(ev);
        if (done) break;
    }
    t->cpu = thread_cpu_s() - c0;
    t->tokens = tokens;
    t->ttft = first - t0;
    t->tpot = tokens > 1 ? (last - first) / (tokens - 1) : 0;
    return ok && tokens > 0;
}

/* ---- over HTTP ---- */

typedef struct sse_reader {
    char pending[8192]; /* an event not yet complete */
    size_t n;
    double first, last;
    int deltas, usage_tokens;
    bool error, overflow;
} sse_reader;

/* One complete SSE event ("data: {...}"): a delta when its "text" is not
 * empty; the usage chunk gives the token count. */
static void sse_event(sse_reader *r, const char *ev, double now) {
    if (strncmp(ev, "data: ", 6) != 0 || !strcmp(ev + 6, "[DONE]")) return;
    if (strstr(ev, "\"error\"")) r->error = true;
    const char *text = strstr(ev, "\"text\":\"");
    if (text && text[8] != '"') {
        if (!r->deltas) r->first = now;
        r->last = now;
        r->deltas++;
    }
    const char *u = strstr(ev, "\"completion_tokens\":");
    if (u) r->usage_tokens = atoi(u + 20);
}

static bool on_sse_bytes(void *user, const char *data, size_t len) {
    sse_reader *r = user;
    double now = tr_bench_now_s();
    for (size_t i = 0; i < len; i++) {
        if (r->n + 1 >= sizeof r->pending) {
            r->overflow = true;
            return false;
        }
        r->pending[r->n++] = data[i];
        if (r->n >= 2 && r->pending[r->n - 1] == '\n' && r->pending[r->n - 2] == '\n') {
            r->pending[r->n - 2] = '\0';
            sse_event(r, r->pending, now);
            r->n = 0;
        }
    }
    return true;
}

static bool run_http(const tr_dsl_url *u, const stream_opts *o, const int32_t *ids,
                     stream_timing *t) {
    size_t cap = 256 + (size_t)o->prompt_tokens * 12;
    char *body = malloc(cap);
    if (!body) return false;
    size_t n = (size_t)snprintf(body, cap, "{\"prompt\":[");
    for (int i = 0; i < o->prompt_tokens; i++)
        n += (size_t)snprintf(body + n, cap - n, "%s%d", i ? "," : "", (int)ids[i]);
    n += (size_t)snprintf(body + n, cap - n,
                          "],\"max_tokens\":%d,\"temperature\":0,\"ignore_eos\":true,"
                          "\"stream\":true,\"stream_options\":{\"include_usage\":true}}",
                          o->max_tokens);
    sse_reader rd = {0};
    tr_dsl_http_request rq = {.method = "POST", .path = "/v1/completions",
                              .api_key = o->api_key, .body = body, .body_len = n,
                              .connect_timeout_ms = 10000, .timeout_ms = 600000,
                              .max_body = (size_t)1 << 30, .on_body = on_sse_bytes,
                              .user = &rd};
    tr_dsl_http_response resp;
    char err[512];
    double c0 = thread_cpu_s(), t0 = tr_bench_now_s();
    tr_status s = tr_dsl_http_do(u, &rq, &resp, err, sizeof err);
    t->cpu = thread_cpu_s() - c0;
    free(body);
    bool ok = false;
    if (s != TR_OK)
        fprintf(stderr, "trellis bench stream: %s\n", err);
    else if (resp.status != 200)
        fprintf(stderr, "trellis bench stream: HTTP %d: %.200s\n", resp.status,
                resp.body.p ? resp.body.p : "");
    else if (rd.error || rd.overflow || !rd.deltas)
        fprintf(stderr, "trellis bench stream: %s\n",
                rd.overflow ? "an SSE event over 8 KiB" : rd.error ? "the stream reported an error"
                                                                   : "no output tokens");
    else
        ok = true;
    tr_dsl_buf_free(&resp.body);
    t->tokens = rd.usage_tokens > 0 ? rd.usage_tokens : rd.deltas;
    t->ttft = rd.first - t0;
    t->tpot = t->tokens > 1 ? (rd.last - rd.first) / (t->tokens - 1) : 0;
    return ok;
}

/* ---- rounds ---- */

/* Runs the round's requests down one path (u NULL: in-process). */
static stream_side run_side(trellis_engine *e, const tr_dsl_url *u, const stream_opts *o,
                            int round, int32_t *ids) {
    stream_side sd = {0};
    double ttft[STREAM_MAX_REQUESTS] = {0}, tpot[STREAM_MAX_REQUESTS] = {0}, cpu = 0;
    int n = 0, tokens = 0;
    for (int i = 0; i < o->requests; i++) {
        tr_bench_rand_ids(prompt_seed(o, round, i), ids, o->prompt_tokens);
        stream_timing t = {0};
        bool ok = u ? run_http(u, o, ids, &t) : run_inproc(e, o, ids, &t);
        if (!ok) {
            sd.errors++;
            continue;
        }
        ttft[n] = t.ttft;
        tpot[n++] = t.tpot;
        cpu += t.cpu;
        tokens += t.tokens;
    }
    sd.ttft_p50 = 1e3 * tr_bench_pct(ttft, n, 0.5);
    sd.tpot_p50 = 1e3 * tr_bench_pct(tpot, n, 0.5);
    sd.cpu_per_token = tokens ? 1e6 * cpu / tokens : 0;
    return sd;
}

static int run_rounds(trellis_engine *e, const tr_dsl_url *u, const stream_opts *o) {
    int32_t *ids = malloc((size_t)o->prompt_tokens * sizeof *ids);
    if (!ids) return 1;
    /* one request down each path first: page faults, lazy allocations */
    stream_timing warm;
    tr_bench_rand_ids(~o->seed, ids, o->prompt_tokens);
    if (!run_http(u, o, ids, &warm) || !run_inproc(e, o, ids, &warm)) {
        free(ids);
        return 1;
    }
    printf("%-5s %-9s | %9s %9s %6s | %9s %9s %6s | %s\n", "round", "first", "TTFT http",
           "in-proc", "ratio", "TPOT http", "in-proc", "ratio", "client CPU us/token h/i");
    double rt[STREAM_MAX_ROUNDS], rp[STREAM_MAX_ROUNDS];
    int errors = 0;
    for (int r = 0; r < o->rounds; r++) {
        stream_side h, p;
        if (r % 2 == 0) {
            h = run_side(e, u, o, r, ids);
            p = run_side(e, NULL, o, r, ids);
        } else {
            p = run_side(e, NULL, o, r, ids);
            h = run_side(e, u, o, r, ids);
        }
        errors += h.errors + p.errors;
        rt[r] = p.ttft_p50 > 0 ? h.ttft_p50 / p.ttft_p50 : 0;
        rp[r] = p.tpot_p50 > 0 ? h.tpot_p50 / p.tpot_p50 : 0;
        printf("%-5d %-9s | %9.2f %9.2f %6.3f | %9.3f %9.3f %6.3f | %.0f / %.0f\n", r + 1,
               r % 2 == 0 ? "http" : "in-proc", h.ttft_p50, p.ttft_p50, rt[r], h.tpot_p50,
               p.tpot_p50, rp[r], h.cpu_per_token, p.cpu_per_token);
        fflush(stdout);
    }
    double mt = tr_bench_pct(rt, o->rounds, 0.5), mp = tr_bench_pct(rp, o->rounds, 0.5);
    printf("\nmedian over %d rounds, HTTP / in-process: TTFT %.3f (%+.1f%%), TPOT %.3f "
           "(%+.1f%%); %d failed requests\n",
           o->rounds, mt, 100 * (mt - 1), mp, 100 * (mp - 1), errors);
    free(ids);
    return errors ? 1 : 0;
}

/* ---- flags ---- */

#define STREAM_USAGE "--url URL [-m MODEL] [--rounds N] [--requests N] [options]"

static int parse(int argc, char **argv, stream_opts *o) {
    bool help = false;
    int64_t rounds = 5, requests = 8, ptok = 200, max_tokens = 128, seed = 1;
    const cli_opt opts[] = {
        {"--url", NULL, CLI_STR, &o->url, 1, 0, "the running `trellis serve`", NULL,
         .meta = "URL"},
        {"--model", "-m", CLI_STR, &o->model, 1, 0,
         "GGUF model file for the in-process engine (the server's)",
         "the cached default model", .meta = "FILE"},
        {"--api-key", NULL, CLI_STR, &o->api_key, 1, 0, "the server's key, if it has one",
         NULL, .meta = "KEY"},
        {"--rounds", NULL, CLI_INT, &rounds, 1, STREAM_MAX_ROUNDS,
         "rounds, alternating which path goes first", "5"},
        {"--requests", NULL, CLI_INT, &requests, 1, STREAM_MAX_REQUESTS,
         "requests per path per round", "8"},
        {"--prompt-tokens", NULL, CLI_INT, &ptok, 1, 4000, "prompt length (random ids)", "200"},
        {"--max-tokens", NULL, CLI_INT, &max_tokens, 2, 100000, "output tokens per request",
         "128"},
        {"--seed", NULL, CLI_INT, &seed, 0, 1 << 30, "prompt seed", "1"},
    };
    o->engine.opts.threads = 2;
    cli_cmd c = {.name = "bench stream", .usage = STREAM_USAGE, .opts = opts,
                 .n_opts = sizeof opts / sizeof opts[0]};
    tr_engine_flags_attach(&o->engine, &c);
    if (!tr_cli_parse(&c, argc - 1, argv + 1, &help)) return 2;
    if (help) return -1;
    if (!o->url) {
        fprintf(stderr, "trellis bench stream: --url: required (the server to compare with)\n");
        return 2;
    }
    o->rounds = (int)rounds, o->requests = (int)requests, o->prompt_tokens = (int)ptok;
    o->max_tokens = (int)max_tokens, o->seed = (uint64_t)seed;
    return 0;
}

int tr_bench_stream(int argc, char **argv) {
    stream_opts o = {0};
    tr_engine_flags_init(&o.engine);
    int prc = parse(argc, argv, &o);
    if (prc) return prc < 0 ? 0 : prc;
    char err[512];
    tr_dsl_url u;
    if (tr_dsl_url_parse(o.url, &u, err, sizeof err) != TR_OK) {
        fprintf(stderr, "trellis bench stream: --url: %s\n", err);
        return 2;
    }
    trellis_engine *e;
    if (trellis_engine_new(o.model, &o.engine.opts, &e, err, sizeof err) != TRELLIS_OK) {
        fprintf(stderr, "trellis bench stream: %s\n", err);
        return 1;
    }
    printf("one stream: %d-token prompts, %d tokens, %d requests per path per round\n",
           o.prompt_tokens, o.max_tokens, o.requests);
    int rc = run_rounds(e, &u, &o);
    trellis_engine_free(e);
    return rc;
}
