/* bench_ppl.c — `trellis bench ppl`: perplexity of a text, and how often
 * the model's teacher-forced top-1 pick agrees with a reference run's, so
 * that an engine setting (a quantized KV cache, another backend) can be
 * judged on quality, not only speed.
 *
 *   trellis bench ppl [-m MODEL] --text FILE [--ctx 512] [--chunks N]
 *       [--ref FILE.bin] [--save-ref FILE.bin] [--near-tie 0.5]
 *       [engine flags]
 *
 * Windows, as llama-perplexity cuts them. The text is tokenized whole
 * (trellis_tokenize, no special tokens) and cut into consecutive,
 * non-overlapping windows of --ctx tokens (the tail shorter than a window
 * is left out). When the model adds a BOS, it replaces the window's first
 * token (as llama-perplexity does, so the figures compare with its output
 * at the same context). Each window is one prompt of token ids with
 * prompt log-probs from position ctx/2 on, max_tokens 0: only the second
 * half is scored, so every scored token has at least ctx/2 tokens of
 * context (llama-perplexity scores ctx/2 - 1 of them, from ctx/2 + 1; we
 * also score position ctx/2, which has the same context it needs). The
 * perplexity is exp(mean NLL) over the scored tokens; the +/- is the
 * standard error of the mean NLL carried through exp (ppl * SE), as
 * llama-perplexity reports it.
 *
 * Teacher-forced agreement. Each scored position also gives the model's
 * top two tokens (prompt_top_logprobs 2). --save-ref writes each
 * position's top-1 id and its log-prob gap to the second (file format
 * below); --ref reads such a file and reports how many positions pick the
 * reference's top-1, over all positions and over those where the
 * reference was not at a near-tie (its top-2 gap >= --near-tie nats). The
 * default 0.5 is the near-tie bound of the parity tests with llama.cpp
 * (tests/unit/test_model.c, NEAR_TIE_GAP: where rounding alone may swap
 * the top two picks of SmolLM2). A log-prob gap is the logit gap: the
 * log-softmax shifts every logit by the same amount.
 *
 * Reference file: ppl_ref.h (format, parse, encode).
 * A file made from another text, tokenizer, --ctx or --chunks is refused,
 * with the field that differs; the hash is FNV-1a (base/hash.h) over the
 * text's ids, so it tells texts and tokenizers apart, not adversaries.
 *
 * Exit status: 0; 2 for bad usage or input (flags, a text that is missing,
 * empty or shorter than one window, --ctx beyond the model's context, a
 * reference that does not fit); 1 when a run fails (the model does not
 * load, a request fails, the reference cannot be written).
 *
 * Layering: applications (app/bench); the engine through
 * include/trellis.h only; file and text checks from app/cli/cli.h (the
 * same library). Single-threaded apart from the engine's threads.
 */
#include "app/bench/bench.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/bench/ppl_ref.h"
#include "app/cli/cli.h"
#include "app/common/args.h"
#include "app/common/engine_flags.h"
#include "base/hash.h"
#include "base/util.h"
#include "trellis.h"

#define PPL_CMD "bench ppl"
#define PPL_ERR "trellis " PPL_CMD ": "
#define PPL_MAX_CTX (1 << 20)
/* windows in the engine at once: enough that other windows' unscored
 * first halves fill the steps while one window's scored rows wait for
 * their turn (the engine computes at most 64 log-prob rows a step).
 * SmolLM2, --ctx 512, 2 threads: 612 window tokens/s with 1 in flight,
 * 784 with 2, 1,318 with 8, 1,254 with 16. */
#define PPL_IN_FLIGHT 8

typedef struct ppl_opts {
    const char *model, *text, *ref, *save_ref;
    int32_t ctx;
    int64_t chunks;
    double near_tie;
    bool near_tie_given;
    tr_engine_flags engine;
} ppl_opts;

/* What a run measured, per scored position in window order. */
typedef struct ppl_run {
    int32_t ctx, start;  /* window size, first scored position */
    int32_t windows;
    int64_t n_scored;    /* windows * (ctx - start) */
    double *nll;         /* [n_scored] */
    int32_t *top1;       /* [n_scored] */
    float *gap;          /* [n_scored] */
} ppl_run;

/* ---- the reference file ---- */

/* Reads and checks the file's own consistency (ppl_ref.h). false with
 * the error printed. */
static bool ref_read(const char *path, tr_ppl_ref *r) {
    char *buf = NULL, why[200];
    size_t len = 0;
    memset(r, 0, sizeof *r);
    if (!tr_cli_read_file(PPL_CMD, "--ref", path, &buf, &len)) return false;
    bool ok = tr_ppl_ref_parse((const unsigned char *)buf, len, r, why, sizeof why);
    if (!ok && !strcmp(why, "out of memory"))
        fprintf(stderr, PPL_ERR "--ref: out of memory\n");
    else if (!ok)
        fprintf(stderr, PPL_ERR "--ref: '%s' is %s%s\n", path, why,
                strcmp(why, "not a reference file") ? "" : " (write one with --save-ref)");
    free(buf);
    return ok;
}

/* Writes the run as a reference to f (opened by the caller); false with
 * the error printed. */
static bool ref_write(FILE *f, const char *path, const tr_ppl_ref_head *h,
                      const ppl_run *run) {
    unsigned char head[TR_PPL_REF_HEADER];
    tr_ppl_ref_put_head(head, h);
    bool ok = fwrite(head, 1, sizeof head, f) == sizeof head;
    for (int64_t i = 0; ok && i < run->n_scored; i++) {
        unsigned char rec[TR_PPL_REF_RECORD];
        tr_ppl_ref_put_record(rec, run->top1[i], run->gap[i]);
        ok = fwrite(rec, 1, sizeof rec, f) == sizeof rec;
    }
    if (fflush(f) != 0) ok = false;
    if (!ok) fprintf(stderr, PPL_ERR "--save-ref: cannot write '%s'\n", path);
    return ok;
}

/* The reference against this run's text and settings: true when it fits,
 * else false with the first field that differs named. */
static bool ref_matches(const tr_ppl_ref_head *r, const tr_ppl_ref_head *now, const char *path) {
    if (r->n_vocab != now->n_vocab) {
        fprintf(stderr, PPL_ERR "--ref: '%s' was made with a model of %u tokens of "
                        "vocabulary, this one has %u\n", path, r->n_vocab, now->n_vocab);
        return false;
    }
    if (r->text_tokens != now->text_tokens || r->hash != now->hash) {
        fprintf(stderr, PPL_ERR "--ref: '%s' was made from another text or tokenizer: %llu "
                        "tokens (hash %016llx), this text has %llu (hash %016llx)\n",
                path, (unsigned long long)r->text_tokens, (unsigned long long)r->hash,
                (unsigned long long)now->text_tokens, (unsigned long long)now->hash);
        return false;
    }
    if (r->flags != now->flags) {
        fprintf(stderr, PPL_ERR "--ref: '%s' was made with a model that %s a BOS, this one "
                        "%s\n", path, r->flags & TR_PPL_REF_FLAG_BOS ? "adds" : "adds no",
                now->flags & TR_PPL_REF_FLAG_BOS ? "does" : "does not");
        return false;
    }
    if (r->windows != now->windows) {
        fprintf(stderr, PPL_ERR "--ref: '%s' has %u windows, this run scores %u (--chunks "
                        "must match)\n", path, r->windows, now->windows);
        return false;
    }
    return true;
}

/* ---- running the windows ---- */

/* The BOS id the engine puts before a text prompt (info.add_bos):
 * trellis.h does not name it, so ask for the prompt log-probs of a
 * one-character text and read the token at position 0. -1 on failure
 * (printed). */
static int32_t probe_bos(trellis_engine *e) {
    trellis_request q;
    trellis_request_default(&q);
    q.prompt = "a";
    q.max_tokens = 0;
    q.prompt_logprobs = true;
    q.prompt_logprobs_start = 0;
    char err[512];
    uint64_t id;
    if (trellis_submit(e, &q, &id, err, sizeof err) != TRELLIS_OK) {
        fprintf(stderr, PPL_ERR "cannot find the BOS token: %s\n", err);
        return -1;
    }
    int32_t bos = -1;
    for (;;) {
        trellis_event *ev;
        if (!trellis_wait(e, 600000, &ev)) {
            fprintf(stderr, PPL_ERR "no event from the engine for 10 minutes\n");
            return -1;
        }
        if (ev->prompt_logprobs && ev->n_prompt_logprobs > 0 && ev->prompt_logprobs_start == 0)
            bos = ev->prompt_logprobs[0].token;
        if (ev->kind == TRELLIS_EVENT_DONE && ev->finish == TRELLIS_FINISH_ERROR)
            fprintf(stderr, PPL_ERR "cannot find the BOS token: %s\n", ev->error);
        bool done = ev->kind == TRELLIS_EVENT_DONE && ev->request_done;
        trellis_event_free(ev);
        if (done) break;
    }
    if (bos < 0) fprintf(stderr, PPL_ERR "cannot find the BOS token: no prompt log-probs\n");
    return bos;
}

/* Submits window w (ids[w*ctx ..), BOS first when bos >= 0). */
static bool submit_window(trellis_engine *e, const ppl_run *run, const int32_t *ids,
                          int32_t bos, int32_t w, int32_t *scratch) {
    memcpy(scratch, ids + (size_t)w * (size_t)run->ctx, (size_t)run->ctx * sizeof *scratch);
    if (bos >= 0) scratch[0] = bos;
    trellis_request q;
    trellis_request_default(&q);
    q.tokens = scratch; /* copied by trellis_submit */
    q.n_tokens = run->ctx;
    q.max_tokens = 0;
    q.prompt_logprobs = true;
    q.prompt_logprobs_start = run->start;
    q.prompt_top_logprobs = 2;
    q.user = (void *)(intptr_t)w;
    char err[512];
    uint64_t id;
    if (trellis_submit(e, &q, &id, err, sizeof err) == TRELLIS_OK) return true;
    fprintf(stderr, PPL_ERR "window %d: %s\n", w + 1, err);
    return false;
}

/* Copies window w's log-probs out of its event. */
static bool take_window(ppl_run *run, int32_t w, const trellis_event *ev) {
    int32_t per = run->ctx - run->start;
    if (ev->prompt_logprobs_start != run->start || ev->n_prompt_logprobs != per) {
        fprintf(stderr, PPL_ERR "window %d: %d log-probs from position %d, expected %d from "
                        "%d\n", w + 1, ev->n_prompt_logprobs, ev->prompt_logprobs_start, per,
                run->start);
        return false;
    }
    for (int32_t i = 0; i < per; i++) {
        const trellis_logprob *lp = &ev->prompt_logprobs[i];
        int64_t k = (int64_t)w * per + i;
        if (!isfinite(lp->logprob) || lp->n_top < 1) {
            fprintf(stderr, PPL_ERR "window %d, position %d: log-prob %g with %d alternatives\n",
                    w + 1, run->start + i, (double)lp->logprob, lp->n_top);
            return false;
        }
        run->nll[k] = -(double)lp->logprob;
        run->top1[k] = lp->top[0].token;
        run->gap[k] = lp->n_top >= 2 ? lp->top[0].logprob - lp->top[1].logprob : INFINITY;
    }
    return true;
}

static double mean_nll(const ppl_run *run, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += run->nll[i];
    return n ? s / (double)n : 0;
}

/* Runs every window, PPL_IN_FLIGHT at a time; progress on stderr every
 * tenth of them. false with the error printed. */
static bool run_windows(trellis_engine *e, ppl_run *run, const int32_t *ids, int32_t bos) {
    int32_t *scratch = malloc((size_t)run->ctx * sizeof *scratch);
    /* per window: 0 running, 1 log-probs taken, 2 done */
    unsigned char *state = calloc((size_t)run->windows, 1);
    if (!scratch || !state) {
        free(scratch);
        free(state);
        fprintf(stderr, PPL_ERR "out of memory\n");
        return false;
    }
    int32_t next = 0, finished = 0, in_order = 0, every = run->windows / 10;
    if (every < 1) every = 1;
    bool ok = true;
    double t0 = tr_bench_now_s();
    while (ok && finished < run->windows) {
        while (ok && next < run->windows && next - finished < PPL_IN_FLIGHT)
            ok = submit_window(e, run, ids, bos, next++, scratch);
        if (!ok) break;
        trellis_event *ev;
        if (!trellis_wait(e, 600000, &ev)) {
            fprintf(stderr, PPL_ERR "no event from the engine for 10 minutes\n");
            ok = false;
            break;
        }
        int32_t w = (int32_t)(intptr_t)ev->user;
        if (ev->prompt_logprobs && (ok = take_window(run, w, ev))) state[w] = 1;
        if (ok && ev->kind == TRELLIS_EVENT_DONE && ev->finish == TRELLIS_FINISH_ERROR) {
            fprintf(stderr, PPL_ERR "window %d: %s\n", w + 1, ev->error);
            ok = false;
        }
        if (ok && ev->kind == TRELLIS_EVENT_DONE && ev->request_done && state[w] != 1) {
            fprintf(stderr, PPL_ERR "window %d: finished without its log-probs\n", w + 1);
            ok = false;
        }
        if (ok && ev->kind == TRELLIS_EVENT_DONE && ev->request_done) {
            state[w] = 2;
            finished++;
            while (in_order < run->windows && state[in_order] == 2) in_order++;
            if (finished % every == 0 || finished == run->windows)
                fprintf(stderr, "trellis " PPL_CMD ": %d/%d windows, %.1f s, ppl of the first "
                                "%d %.4f\n", finished, run->windows, tr_bench_now_s() - t0,
                        in_order, exp(mean_nll(run, (int64_t)in_order * (run->ctx - run->start))));
        }
        trellis_event_free(ev);
    }
    /* a failed run leaves requests behind: trellis_engine_free drops them */
    free(scratch);
    free(state);
    return ok;
}

/* ---- the figures ---- */

static void print_ppl(const ppl_run *run, double secs) {
    int64_t n = run->n_scored;
    double m = mean_nll(run, n), sq = 0;
    for (int64_t i = 0; i < n; i++) sq += (run->nll[i] - m) * (run->nll[i] - m);
    double se = n > 1 ? sqrt(sq / (double)(n - 1) / (double)n) : 0, ppl = exp(m);
    printf("perplexity: %.4f +/- %.4f (mean NLL %.5f +/- %.5f nats)\n", ppl, ppl * se, m, se);
    printf("time: %.1f s (%.0f tokens/s over %lld window tokens)\n", secs,
           secs > 0 ? (double)run->windows * run->ctx / secs : 0,
           (long long)run->windows * run->ctx);
}

static void print_agreement(const ppl_run *run, const tr_ppl_ref *ref, const char *path,
                            double near_tie) {
    int64_t n = run->n_scored, same = 0, decided = 0, decided_same = 0;
    for (int64_t i = 0; i < n; i++) {
        bool eq = run->top1[i] == ref->top1[i];
        same += eq;
        if (ref->gap[i] >= near_tie) {
            decided++;
            decided_same += eq;
        }
    }
    printf("reference: %s (perplexity %.4f; this run %+.3f%%)\n", path, exp(ref->h.mean_nll),
           100 * (exp(mean_nll(run, n) - ref->h.mean_nll) - 1));
    printf("agreement: %.3f%% (%lld of %lld positions pick the reference's top-1)\n",
           n ? 100.0 * (double)same / (double)n : 0.0, (long long)same, (long long)n);
    printf("agreement without near-ties: %.3f%% (%lld of %lld positions where the reference's "
           "top-2 gap is >= %.3g nats; %lld near-ties left out)\n",
           decided ? 100.0 * (double)decided_same / (double)decided : 0.0,
           (long long)decided_same, (long long)decided, near_tie, (long long)(n - decided));
}

/* ---- flags ---- */

#define PPL_USAGE "--text FILE [-m MODEL] [--ctx N] [--chunks N] [--ref FILE] [--save-ref FILE]"

static const char k_ppl_about[] =
    "Perplexity of a text, and teacher-forced agreement with a reference run. The\n"
    "text is cut into consecutive windows of --ctx tokens (BOS first when the model\n"
    "adds one, as llama-perplexity does); only the second half of each window is\n"
    "scored, so every scored token has at least ctx/2 tokens of context. The +/- is\n"
    "the standard error of the mean NLL, carried through exp. The standard text:\n"
    "scripts/fetch_ppl_text.sh (KJV Genesis 1 - Exodus 20, SHA-256 checked).\n";

static const char k_ppl_epilog[] =
    "\nAgreement: --save-ref writes each scored position's top-1 token and its\n"
    "log-prob gap to the second; --ref compares this run's top-1 tokens with them\n"
    "(same text, vocabulary, --ctx and --chunks, else refused), over all positions\n"
    "and without the reference's near-ties. An int8 KV cache against F16:\n"
    "  trellis bench ppl --text T --save-ref f16.bin\n"
    "  trellis bench ppl --text T --ref f16.bin --kv-type q8\n";

/* The engine flags without --ctx/-c: here --ctx is the window, and the
 * engine keeps the model's context (the window is checked against it). */
static void drop_engine_ctx(tr_engine_flags *f, cli_opt *out, cli_cmd *c) {
    size_t n = 0;
    for (size_t i = 0; i < c->n_engine; i++)
        if (i != TR_EF_CTX) out[n++] = f->table[i];
    c->engine = out;
    c->n_engine = n;
}

static int parse(int argc, char **argv, ppl_opts *o, cli_opt *engine_opts) {
    bool help = false;
    const cli_opt opts[] = {
        {"--model", "-m", CLI_STR, &o->model, 1, 0, "GGUF model file",
         "the cached default model", .meta = "FILE"},
        {"--text", NULL, CLI_STR, &o->text, 1, 0, "the text to score, UTF-8 (required)", NULL,
         .meta = "FILE"},
        {"--ctx", "-c", CLI_INT32, &o->ctx, 8, PPL_MAX_CTX,
         "tokens per window (at most the model's context); the second half is scored",
         "512"},
        {"--chunks", NULL, CLI_INT, &o->chunks, 0, 1 << 30,
         "score at most the first N windows (0: every whole window of the text)", "0"},
        {"--ref", NULL, CLI_STR, &o->ref, 1, 0,
         "compare the top-1 tokens with this reference (from --save-ref)", NULL,
         .meta = "FILE"},
        {"--save-ref", NULL, CLI_STR, &o->save_ref, 1, 0,
         "write this run's top-1 tokens and top-2 gaps as a reference", NULL,
         .meta = "FILE"},
        {"--near-tie", NULL, CLI_FLOAT, &o->near_tie, 0, 100,
         "--ref: positions where the reference's top-2 gap is below this many nats are "
         "near-ties, left out of the second agreement figure",
         "0.5", .given = &o->near_tie_given},
    };
    o->engine.opts.threads = 2;
    cli_cmd c = {.name = PPL_CMD, .usage = PPL_USAGE, .about = k_ppl_about, .opts = opts,
                 .n_opts = TR_ARRAY_LEN(opts), .epilog = k_ppl_epilog};
    tr_engine_flags_attach(&o->engine, &c);
    drop_engine_ctx(&o->engine, engine_opts, &c);
    if (!tr_cli_parse(&c, argc - 1, argv + 1, &help)) return 2;
    if (help) return -1;
    if (!o->text) {
        fprintf(stderr, PPL_ERR "--text: required (the text to score; "
                        "scripts/fetch_ppl_text.sh fetches the standard one)\n");
        return 2;
    }
    if (o->near_tie_given && !o->ref) {
        fprintf(stderr, PPL_ERR "--near-tie: needs --ref\n");
        return 2;
    }
    return 0;
}

/* ---- the command ---- */

/* Reads --text: 0, or 2 with the error printed. */
static int read_text(const char *path, char **text, size_t *len) {
    if (!tr_cli_read_file(PPL_CMD, "--text", path, text, len)) return 2;
    if (!tr_cli_check_text(PPL_CMD, "--text", *text, *len)) return 2;
    size_t i = 0;
    while (i < *len && strchr(" \t\r\n", (*text)[i])) i++;
    if (i == *len) {
        fprintf(stderr, PPL_ERR "--text: '%s' is empty\n", path);
        return 2;
    }
    return 0;
}

static uint64_t hash_ids(const int32_t *ids, size_t n) {
    uint64_t h = TR_FNV1A_BASIS;
    for (size_t i = 0; i < n; i++) h = tr_fnv1a_word(h, (uint32_t)ids[i]);
    return h;
}

/* Tokenizes and cuts the text: fills run's windows and the reference
 * header of this run. 0, 1 (runtime) or 2 (input), with the error
 * printed. */
static int plan(trellis_engine *e, const ppl_opts *o, const char *text, size_t len,
                int32_t **ids, ppl_run *run, tr_ppl_ref_head *head) {
    trellis_engine_info info;
    trellis_engine_get_info(e, &info);
    if (o->ctx > info.n_ctx) {
        fprintf(stderr, PPL_ERR "--ctx: the model's context is %d tokens, got %d\n",
                info.n_ctx, o->ctx);
        return 2;
    }
    size_t n = 0;
    int s = trellis_tokenize(e, text, len, false, ids, &n);
    if (s != TRELLIS_OK) {
        fprintf(stderr, PPL_ERR "--text: cannot tokenize '%s': %s\n", o->text,
                trellis_status_message(s));
        return 1;
    }
    if (n < (size_t)o->ctx) {
        fprintf(stderr, PPL_ERR "--text: '%s' has %zu tokens, fewer than one window of "
                        "--ctx %d\n", o->text, n, o->ctx);
        return 2;
    }
    size_t windows = n / (size_t)o->ctx;
    if (o->chunks > 0 && (size_t)o->chunks < windows) windows = (size_t)o->chunks;
    if (windows > INT32_MAX) windows = INT32_MAX;
    run->ctx = o->ctx;
    run->start = o->ctx / 2;
    run->windows = (int32_t)windows;
    run->n_scored = (int64_t)windows * (o->ctx - run->start);
    *head = (tr_ppl_ref_head){.ctx = (uint32_t)o->ctx, .windows = (uint32_t)windows,
                           .n_vocab = (uint32_t)info.n_vocab,
                           .flags = info.add_bos ? TR_PPL_REF_FLAG_BOS : 0, .text_tokens = n,
                           .hash = hash_ids(*ids, n), .n_scored = (uint64_t)run->n_scored};
    size_t k = (size_t)run->n_scored;
    run->nll = malloc(k * sizeof *run->nll);
    run->top1 = malloc(k * sizeof *run->top1);
    run->gap = malloc(k * sizeof *run->gap);
    if (!run->nll || !run->top1 || !run->gap) {
        fprintf(stderr, PPL_ERR "out of memory\n");
        return 1;
    }
    printf("text: %s: %zu tokens, %d windows of %d (%s), %lld scored tokens (positions "
           "%d..%d of each)\n", o->text, n, run->windows, run->ctx,
           info.add_bos ? "BOS first" : "no BOS", (long long)run->n_scored, run->start,
           run->ctx - 1);
    printf("engine: %s, %d threads, KV %s/%s\n", info.device, info.threads,
           info.kv_type_k == TRELLIS_KV_Q8 ? "q8" : info.kv_type_k == TRELLIS_KV_Q4 ? "q4" : "f16",
           info.kv_type_v == TRELLIS_KV_Q8 ? "q8" : info.kv_type_v == TRELLIS_KV_Q4 ? "q4" : "f16");
    fflush(stdout);
    return 0;
}

/* Everything after the flags and the text: 0, 1 or 2. */
static int bench(const ppl_opts *o, const char *model, const char *text, size_t len,
                 const tr_ppl_ref *ref, FILE *save) {
    trellis_engine *e = NULL;
    char err[512];
    if (trellis_engine_new(model, &o->engine.opts, &e, err, sizeof err) != TRELLIS_OK) {
        fprintf(stderr, PPL_ERR "%s\n", err);
        return 1;
    }
    printf("model: %s\n", model);
    int32_t *ids = NULL;
    ppl_run run = {0};
    tr_ppl_ref_head head = {0};
    int rc = plan(e, o, text, len, &ids, &run, &head);
    if (!rc && ref && !ref_matches(&ref->h, &head, o->ref)) rc = 2;
    trellis_engine_info info;
    trellis_engine_get_info(e, &info);
    int32_t bos = -1;
    if (!rc && info.add_bos && (bos = probe_bos(e)) < 0) rc = 1;
    double t0 = tr_bench_now_s();
    if (!rc && !run_windows(e, &run, ids, bos)) rc = 1;
    if (!rc) {
        print_ppl(&run, tr_bench_now_s() - t0);
        if (ref) print_agreement(&run, ref, o->ref, o->near_tie);
        head.mean_nll = mean_nll(&run, run.n_scored);
        if (save) {
            if (!ref_write(save, o->save_ref, &head, &run)) rc = 1;
        }
    }
    trellis_engine_free(e);
    free(ids);
    free(run.nll);
    free(run.top1);
    free(run.gap);
    return rc;
}

int tr_bench_ppl(int argc, char **argv) {
    ppl_opts o = {.ctx = 512, .near_tie = 0.5};
    cli_opt engine_opts[TR_EF_COUNT];
    tr_engine_flags_init(&o.engine);
    int rc = parse(argc, argv, &o, engine_opts);
    if (rc) return rc < 0 ? 0 : rc;
    char *text = NULL;
    size_t len = 0;
    if ((rc = read_text(o.text, &text, &len))) {
        free(text);
        return rc;
    }
    tr_ppl_ref ref = {0};
    if (o.ref && !ref_read(o.ref, &ref)) rc = 2;
    if (!rc && o.ref && ref.h.ctx != (uint32_t)o.ctx) {
        fprintf(stderr, PPL_ERR "--ref: '%s' was made with --ctx %u, this run uses --ctx %d\n",
                o.ref, ref.h.ctx, o.ctx);
        rc = 2;
    }
    /* written to FILE.part, opened now (a path that cannot be written
     * fails before the run, not after it) and renamed over FILE when the
     * run succeeds: a failed run leaves FILE as it was, even when it is
     * also the --ref */
    char part[4200];
    FILE *save = NULL;
    if (!rc && o.save_ref) {
        snprintf(part, sizeof part, "%s.part", o.save_ref);
        if (strlen(o.save_ref) > 4000 || !(save = fopen(part, "wb"))) {
            fprintf(stderr, PPL_ERR "--save-ref: cannot write '%s': %s\n", part,
                    strlen(o.save_ref) > 4000 ? "path too long" : strerror(errno));
            rc = 2;
        }
    }
    char def[4096];
    const char *model = NULL;
    if (!rc && !(model = tr_cli_model_path(PPL_CMD, o.model, def, sizeof def))) rc = 1;
    if (!rc) rc = bench(&o, model, text, len, o.ref ? &ref : NULL, save);
    if (save) {
        bool closed = fclose(save) == 0;
        if (!rc && (!closed || rename(part, o.save_ref) != 0)) {
            fprintf(stderr, PPL_ERR "--save-ref: cannot write '%s': %s\n", o.save_ref,
                    strerror(errno));
            rc = 1;
        }
        if (rc) remove(part);
        else printf("saved the reference: %s\n", o.save_ref);
    }
    tr_ppl_ref_free(&ref);
    free(text);
    return rc;
}
