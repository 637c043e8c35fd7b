/* bench_kv_window.c — what windowed KV units (include/trellis.h,
 * kv_full_pages) save on a model with sliding-window layers (Gemma 3):
 *
 *   bytes   one sequence of --tokens positions (a prompt of random
 *           token ids, then greedy decoding to the length): the most KV
 *           bytes it held at once (pages locked: in use by it, so never
 *           evictable; the engine's published stats, sampled every 2 ms),
 *           with full pages and with split ones;
 *   fit     --seqs such sequences at once (distinct prompts) in a pool of
 *           --kv-mem MiB: output tokens/s, wall time and preemptions, full
 *           pages against split ones, alternating, --rounds times.
 *
 * Not a test: never run by ctest. Usage:
 *
 *   bench_kv_window [--model PATH] [--tokens N] [--decode N] [--seqs N]
 *                   [--kv-mem MiB] [--rounds N] [--threads N]
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/paths.h"
#include "trellis.h"

typedef struct opts {
    const char *model;
    int tokens, decode, seqs, kv_mem, rounds, threads;
} opts;

typedef struct run {
    int64_t peak_used;   /* pages locked, most at once */
    int64_t page_bytes;
    int32_t units;
    uint64_t out_tokens, preemptions, released, stripped;
    double seconds;
} run;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void die(const char *what, const char *why) {
    fprintf(stderr, "bench_kv_window: %s: %s\n", what, why);
    exit(1);
}

/* n sequences of o->tokens positions (prompts of distinct random ids)
 * on an engine with full or split pages. */
static run run_once(const opts *o, bool full, int n, int kv_mem) {
    trellis_engine_options eo;
    trellis_engine_options_default(&eo);
    eo.threads = o->threads;
    eo.kv_mb = kv_mem;
    eo.ctx = o->tokens + 16;
    eo.max_running = n;
    eo.kv_full_pages = full;
    char err[512];
    trellis_engine *e;
    if (trellis_engine_new(o->model, &eo, &e, err, sizeof err) != 0) die("engine", err);
    trellis_engine_info info;
    trellis_engine_get_info(e, &info);
    run r = {.page_bytes = info.kv_bytes / info.kv_pages, .units = info.kv_units};
    int32_t n_prompt = o->tokens - o->decode;
    int32_t *prompt = malloc(sizeof(int32_t) * (size_t)n_prompt);
    if (!prompt) die("prompt", "out of memory");
    uint64_t rng = 0x9e3779b97f4a7c15ull;
    double t0 = now_s();
    for (int s = 0; s < n; s++) {
        for (int32_t i = 0; i < n_prompt; i++) {
            rng = rng * 6364136223846793005ull + 1442695040888963407ull + (uint64_t)s;
            prompt[i] = 300 + (int32_t)((rng >> 33) % (uint64_t)(info.n_vocab - 600));
        }
        trellis_request q;
        trellis_request_default(&q);
        q.tokens = prompt;
        q.n_tokens = n_prompt;
        q.max_tokens = o->decode;
        q.ignore_eos = true;
        uint64_t id;
        if (trellis_submit(e, &q, &id, err, sizeof err) != 0) die("submit", err);
    }
    free(prompt);
    for (int done = 0; done < n;) {
        trellis_event *ev;
        /* wake every 2 ms to sample the stats the engine publishes each step */
        if (trellis_wait(e, 2, &ev)) {
            if (ev->kind == TRELLIS_EVENT_DONE) {
                done++;
                r.out_tokens += (uint64_t)ev->metrics.completion_tokens;
                r.preemptions += (uint64_t)ev->metrics.preemptions;
            }
            trellis_event_free(ev);
        } else if (now_s() - t0 > 3600) {
            die("wait", "not done in an hour");
        }
        trellis_stats st;
        trellis_get_stats(e, &st);
        if (st.pages_used > r.peak_used) r.peak_used = st.pages_used;
    }
    r.seconds = now_s() - t0;
    trellis_stats st;
    trellis_get_stats(e, &st);
    r.released = st.kv_window_released;
    r.stripped = st.kv_window_stripped;
    trellis_engine_free(e);
    return r;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    opts o = {.tokens = 4096, .decode = 64, .seqs = 16, .kv_mem = 256, .rounds = 3};
    char gemma[4096];
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) die(a, "needs a value");
        i++;
        if (!strcmp(a, "--model")) o.model = v;
        else if (!strcmp(a, "--tokens")) o.tokens = atoi(v);
        else if (!strcmp(a, "--decode")) o.decode = atoi(v);
        else if (!strcmp(a, "--seqs")) o.seqs = atoi(v);
        else if (!strcmp(a, "--kv-mem")) o.kv_mem = atoi(v);
        else if (!strcmp(a, "--rounds")) o.rounds = atoi(v);
        else if (!strcmp(a, "--threads")) o.threads = atoi(v);
        else die(a, "unknown option");
    }
    if (o.tokens < 2 || o.decode < 1 || o.decode >= o.tokens || o.seqs < 1 || o.rounds < 1)
        die("options", "out of range");
    if (!o.model) {
        if (!tr_cached_model_path(TR_GEMMA3_MODEL_FILE, gemma, sizeof gemma))
            die("model", "no model cache folder");
        o.model = gemma;
    }

    /* bytes: one sequence, room to spare */
    run full = run_once(&o, true, 1, 2048), split = run_once(&o, false, 1, 2048);
    double fb = (double)full.peak_used * (double)full.page_bytes,
           sb = (double)split.peak_used * (double)split.page_bytes;
    printf("one sequence of %d positions (%d decoded):\n", o.tokens, o.decode);
    printf("  full pages : %lld pages x %lld B = %.1f MiB held at most\n",
           (long long)full.peak_used, (long long)full.page_bytes, fb / 1048576.0);
    printf("  split (%d units): %lld pages x %lld B = %.1f MiB held at most "
           "(%llu windowed pages let go)\n",
           split.units, (long long)split.peak_used, (long long)split.page_bytes,
           sb / 1048576.0, (unsigned long long)split.released);
    printf("  ratio split / full: %.3f\n", sb / fb);

    /* fit: seqs at once in kv_mem, alternating */
    double *tf = calloc((size_t)o.rounds, sizeof *tf), *ts = calloc((size_t)o.rounds, sizeof *ts);
    printf("%d sequences of %d positions at once in %d MiB of KV:\n", o.seqs, o.tokens, o.kv_mem);
    for (int k = 0; k < o.rounds; k++) {
        for (int which = 0; which < 2; which++) {
            bool is_full = (which == (k & 1)); /* alternate which goes first */
            run r = run_once(&o, is_full, o.seqs, o.kv_mem);
            double tps = (double)r.out_tokens / r.seconds;
            (is_full ? tf : ts)[k] = tps;
            printf("  round %d %-5s: %6.1f s, %5.1f output tok/s, %llu preemptions, "
                   "%llu windowed pages let go, %llu stripped\n",
                   k + 1, is_full ? "full" : "split", r.seconds, tps,
                   (unsigned long long)r.preemptions, (unsigned long long)r.released,
                   (unsigned long long)r.stripped);
            fflush(stdout);
        }
    }
    qsort(tf, (size_t)o.rounds, sizeof *tf, cmp_double);
    qsort(ts, (size_t)o.rounds, sizeof *ts, cmp_double);
    printf("  median output tok/s: full %.1f, split %.1f (%.2fx)\n", tf[o.rounds / 2],
           ts[o.rounds / 2], ts[o.rounds / 2] / tf[o.rounds / 2]);
    free(tf);
    free(ts);
    return 0;
}
