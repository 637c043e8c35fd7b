/* cmd_generate.c — `trellis generate`: one prompt, n completions, through
 * the engine of include/trellis.h (see gen_internal.h).
 *
 * Order of work: every flag is checked first (a bad value is reported as
 * "FLAG: why" before the model loads), then the prompt is read and
 * checked, then the engine starts, the constraint compiles, the request
 * goes in and its events come out (gen_output.c).
 *
 * -n is what the engine calls max_tokens, bounded by the context: when
 * prompt + n does not fit, the request asks for as many tokens as fit
 * (max_tokens -1), so generation stops at the end of the context with
 * finish "length", as it always did.
 *
 * The --json document: one JSON object per sample, one per line, sample
 * 0 first; k_json_doc (printed by --help) lists its fields.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/util.h"
#include "app/common/args.h"
#include "app/common/engine_flags.h"
#include "app/cli/cli.h"
#include "app/cli/gen_internal.h"

/* After the flags in --help: the --json document. */
static const char k_json_doc[] =
    "\n--json prints one JSON object per sample, one per line, in sample order:\n"
    "  index, n_samples       the sample (0-based) and how many there are\n"
    "  text, tokens           the completion and its token ids (a stop string is\n"
    "                         not in the text; the token it was cut from is)\n"
    "  logprobs               with --logprobs N: per token {id, text, logprob,\n"
    "                         top: [{id, text, logprob} x N]}; a token's text is a\n"
    "                         string, or an array of byte values when its bytes are\n"
    "                         not valid UTF-8 on their own; tokens a constraint\n"
    "                         forced have logprob 0 and no alternatives\n"
    "  prompt_tokens, cached_tokens, completion_tokens\n"
    "  finish_reason          stop (end of generation, --stop, or the constraint\n"
    "                         completed), length (-n or the context), error\n"
    "  stop                   the --stop text that ended the sample, if one did\n"
    "  stop_token, stop_token_text   the end-of-generation token that did\n"
    "  error                  why, when finish_reason is error\n"
    "  timings                load_ms, prefill_ms and prefill_tok_per_s (request to\n"
    "                         first token), decode_ms and decode_tok_per_s (first\n"
    "                         token to last), queue_ms, ttft_ms, e2e_ms,\n"
    "                         spec_accepted_tokens (--spec-ngram: drafts kept)\n"
    "  threads, model_load    CPU threads; how the model came in: mmap or read\n"
    "  kv_type_k, kv_type_v   the KV cache types in force: f16, q8 or q4\n"
    "  constraint             with a constraint: kind, accepted (it completed the\n"
    "                         text), forced_tokens (jump-forward), forward_passes,\n"
    "                         compile_ms\n";

/* generate's -b: one number for both the step and the prefill chunk,
 * within the bounds of both (the engine's) */
static void batch_bounds(double *lo, double *hi) {
    int32_t a, b, c, d;
    tr_engine_flag_bounds(TR_EF_MAX_BATCH_TOKENS, &a, &b);
    tr_engine_flag_bounds(TR_EF_CHUNK_SIZE, &c, &d);
    *lo = a > c ? a : c;
    *hi = b < d ? b : d;
}

static bool parse(int argc, char **argv, gen_opts *o, bool *help) {
    double blo, bhi;
    batch_bounds(&blo, &bhi);
    const cli_opt opts[] = {
        {"--model", "-m", CLI_STR, &o->model, 1, 0, "GGUF model file",
         "the cached default model", .meta = "FILE"},
        {"--prompt", "-p", CLI_STR, &o->prompt, 1, 0, "prompt text"},
        {"--file", "-f", CLI_STR, &o->file, 1, 0, "read the prompt from a file", .meta = "FILE"},
        {"--chat", NULL, CLI_FLAG, &o->chat, 1, 0,
         "apply the model's chat template (the prompt is the user's message)", "off"},
        {"--system", NULL, CLI_STR, &o->system, 1, 0, "system message (with --chat)",
         "the template's own"},
        {"--special", NULL, CLI_FLAG, &o->special, 1, 0,
         "parse special tokens such as <|im_start|> in a raw prompt", "off"},
        {"--n-predict", "-n", CLI_INT, &o->n_predict, 1, 1 << 20,
         "most tokens to generate per sample (fewer when the context ends first)", "128"},
        {"--n-samples", "-N", CLI_INT, &o->n_samples, 1, TRELLIS_MAX_N,
         "samples from the prompt, printed one after another (sample i uses seed + i)",
         "1"},
        {"--temp", NULL, CLI_FLOAT, &o->temp, 0, 100, "temperature; 0 = greedy", "0"},
        {"--top-k", NULL, CLI_INT, &o->top_k, 0, 1 << 30, "top-k; 0 = off", "0"},
        {"--top-p", NULL, CLI_FLOAT, &o->top_p, 1e-9, 1, "top-p; 1 = off", "1",
         .range = "(0, 1]"},
        {"--min-p", NULL, CLI_FLOAT, &o->min_p, 0, 1, "min-p; 0 = off", "0"},
        {"--repeat-penalty", NULL, CLI_FLOAT, &o->repeat_penalty, 1e-3, 100,
         "repetition penalty; 1 = off", "1"},
        {"--repeat-last-n", NULL, CLI_INT, &o->repeat_last_n, -1, 1 << 20,
         "tokens the penalties look back over; -1 = all", "64"},
        {"--presence-penalty", NULL, CLI_FLOAT, &o->presence, -2, 2, "presence penalty", "0"},
        {"--frequency-penalty", NULL, CLI_FLOAT, &o->frequency, -2, 2, "frequency penalty",
         "0"},
        {"--seed", NULL, CLI_INT, &o->seed, 0, 9.2e18, "sampling seed (same seed, same output)",
         "0"},
        {"--ignore-eos", NULL, CLI_FLAG, &o->ignore_eos, 1, 0,
         "keep generating past end-of-generation tokens", "off"},
        {"--stop", NULL, CLI_STRS, &o->stops, 1, 0,
         "stop before this text; it is not printed (at most 16, 256 bytes each)"},
        {"--stop-regex", NULL, CLI_STRS, &o->stop_regexes, 1, 0,
         "stop before the first match of this regex; it is not printed (at most 16, "
         "256 bytes each)"},
        {"--logprobs", NULL, CLI_INT, &o->logprobs, 0, TRELLIS_MAX_TOP_LOGPROBS,
         "with --json: each token's log-prob and the N most likely alternatives", "off"},
        {"--regex", NULL, CLI_STR, &o->regex, 1, 0, "constrain the output to match this regex"},
        {"--choice", NULL, CLI_STRS, &o->choices, 1, 0,
         "constrain the output to be one of these texts"},
        {"--json-schema", NULL, CLI_STR, &o->json_schema, 1, 0,
         "constrain the output to JSON valid under this schema (inline when it starts "
         "with '{', else a file)", .meta = "FILE|TEXT"},
        {"--schema-mode", NULL, CLI_ENUM, &o->schema_mode, 1, 0,
         "strict: refuse a schema with keywords that cannot be enforced; lenient: "
         "ignore them with a warning", "strict", .choices = "strict|lenient"},
        {"--json-object", NULL, CLI_FLAG, &o->json_object, 1, 0,
         "constrain the output to any JSON object", "off"},
        {"--whitespace", NULL, CLI_ENUM, &o->whitespace, 1, 0,
         "whitespace in constrained JSON", "flexible", .choices = "flexible|compact|pretty"},
        {"--json-numbers", NULL, CLI_ENUM, &o->json_numbers, 1, 0,
         "numbers in constrained JSON: canonical (an integer is digits only, no 1.0 or 1e5; "
         "at most 20 fraction and 3 exponent digits) or full (any JSON number that has "
         "the value)", "canonical", .choices = "canonical|full"},
        {"--property-order", NULL, CLI_ENUM, &o->property_order, 1, 0,
         "object properties in constrained JSON: in the schema's order, or in any order "
         "(each at most once, required ones before `}`; objects with more than 10 listed "
         "properties keep schema order)", "schema", .choices = "schema|any"},
        {"--grammar", NULL, CLI_STR, &o->grammar, 1, 0,
         "constrain the output to this GBNF grammar (start rule root)", .meta = "FILE"},
        {"--end-span", NULL, CLI_ENUM, &o->end_span, 1, 0,
         "where a constraint may end, let the unmasked model decide whether it does "
         "(trellis.h, the end-of-span rule); auto: for --regex and --choice",
         "auto", .choices = "auto|on|off"},
        {"--no-jump-forward", NULL, CLI_FLAG, &o->no_jump_forward, 1, 0,
         "sample every token, even those a constraint forces", "off"},
        {"--json", NULL, CLI_FLAG, &o->json, 1, 0,
         "print one JSON object per sample and line (see below)", "off: stream the text"},
        {"--batch", "-b", CLI_INT, &o->batch, blo, bhi,
         "sets --max-batch-tokens and --chunk-size both (deprecated: give those)",
         "not set"},
    };
    /* one sequence: its prefill chunk takes the whole step, unless told */
    o->engine.shown[TR_EF_CHUNK_SIZE] = "--max-batch-tokens";
    cli_cmd c = {.name = "generate",
                 .usage = "[-m MODEL] (-p TEXT | -f FILE) [--chat [--system TEXT]] [-n N] "
                          "[-N N] [sampling] [--stop TEXT]... [--regex R | --choice A "
                          "--choice B... | --json-schema S | --json-object | --grammar "
                          "FILE] [--json [--logprobs N]] [engine options]",
                 .opts = opts, .n_opts = TR_ARRAY_LEN(opts), .epilog = k_json_doc};
    tr_engine_flags_attach(&o->engine, &c);
    if (!tr_cli_parse(&c, argc, argv, help)) return false;
    if (!o->engine.given[TR_EF_CHUNK_SIZE])
        o->engine.opts.chunk_size = o->engine.opts.max_batch_tokens;
    if (o->batch > 0) {
        if (o->engine.given[TR_EF_MAX_BATCH_TOKENS] || o->engine.given[TR_EF_CHUNK_SIZE]) {
            fprintf(stderr, "trellis generate: --batch: sets --max-batch-tokens and "
                            "--chunk-size; give those or it, not both\n");
            return false;
        }
        o->engine.opts.max_batch_tokens = o->engine.opts.chunk_size = (int32_t)o->batch;
    }
    return true;
}

/* The checks that need no model. */
static bool check_opts(const gen_opts *o) {
    if (!!o->prompt == !!o->file) {
        fprintf(stderr, "trellis generate: give exactly one of -p TEXT or -f FILE\n");
        return false;
    }
    if (o->system && !o->chat) {
        fprintf(stderr, "trellis generate: --system: needs --chat\n");
        return false;
    }
    if (o->system && !tr_cli_check_text("generate", "--system", o->system, strlen(o->system)))
        return false;
    if (o->logprobs >= 0 && !o->json) {
        fprintf(stderr, "trellis generate: --logprobs: needs --json (log-probs are "
                        "reported in the JSON output)\n");
        return false;
    }
    if (o->stops.n > TRELLIS_MAX_STOP) {
        fprintf(stderr, "trellis generate: --stop: at most %d stop strings, got %d\n",
                TRELLIS_MAX_STOP, o->stops.n);
        return false;
    }
    for (int i = 0; i < o->stops.n; i++) {
        const char *s = o->stops.items[i];
        size_t len = strlen(s);
        char what[48];
        snprintf(what, sizeof what, "--stop number %d", i + 1);
        if (len == 0 || len > TRELLIS_MAX_STOP_LEN) {
            fprintf(stderr, "trellis generate: %s: must be 1 to %d bytes, got %zu\n", what,
                    TRELLIS_MAX_STOP_LEN, len);
            return false;
        }
        if (!tr_cli_check_text("generate", what, s, len)) return false;
    }
    return true;
}

/* The prompt (-p or -f) into *text, checked. Exit status or 0. */
static int read_prompt(const gen_opts *o, char **text, size_t *len) {
    const char *flag = o->file ? "-f" : "-p";
    if (o->file) {
        if (!tr_cli_read_file("generate", "-f", o->file, text, len)) return 1;
    } else {
        *len = strlen(o->prompt);
        if (!(*text = malloc(*len + 1))) return 1;
        memcpy(*text, o->prompt, *len + 1);
    }
    if (!tr_cli_check_text("generate", flag, *text, *len)) return 1;
    if (*len == 0 && !o->chat) {
        fprintf(stderr, "trellis generate: %s: the prompt is empty\n", flag);
        return 1;
    }
    return 0;
}

/* --ctx against the model's trained context (read from the GGUF header,
 * so that the error comes before the weights load). */
static bool check_ctx(const char *path, int64_t ctx) {
    gguf_file *f = NULL;
    if (tr_gguf_open_ex(path, GGUF_LOAD_MMAP, &f, NULL) != TR_OK)
        return true; /* the engine reports what is wrong with the file */
    gguf_str arch = {0};
    int64_t n = -1;
    char key[96];
    if (tr_gguf_get_str(f, "general.architecture", &arch) == TR_OK && arch.len < 64) {
        snprintf(key, sizeof key, "%.*s.context_length", (int)arch.len, arch.ptr);
        if (tr_gguf_get_i64(f, key, &n) != TR_OK) n = -1;
    }
    tr_gguf_close(f);
    if (n > 0 && ctx > n) {
        fprintf(stderr, "trellis generate: --ctx: the model's context is %lld tokens, "
                        "got %lld\n", (long long)n, (long long)ctx);
        return false;
    }
    return true;
}

static int start_engine(const gen_opts *o, const char *path, trellis_engine **e,
                        double *load_ms) {
    const trellis_engine_options *eo = &o->engine.opts;
    bool tty = isatty(2);
    if (tty) fprintf(stderr, "\r\033[Kloading %s", path);
    uint64_t t0 = tr_now_ns();
    char err[1024];
    int rc = trellis_engine_new(path, eo, e, err, sizeof err);
    *load_ms = (double)(tr_now_ns() - t0) / 1e6;
    if (tty) fprintf(stderr, "\r\033[K");
    if (rc != TRELLIS_OK) {
        /* an unknown or unavailable --device is the one engine option
         * only the engine can check */
        static const char backend[] = "cannot start the compute backend: ";
        bool dev = eo->device && strncmp(err, backend, sizeof backend - 1) == 0;
        fprintf(stderr, "trellis generate: %s%s\n", dev ? "--device: " : "",
                dev ? err + sizeof backend - 1 : err);
        return dev ? 2 : 1;
    }
    return 0;
}

static void fill_request(const gen_opts *o, const char *text, size_t len,
                         const trellis_message *msgs, int32_t n_msgs,
                         const gen_constraint *c, trellis_request *r) {
    trellis_request_default(r);
    if (o->chat) {
        r->messages = msgs;
        r->n_messages = n_msgs;
    } else {
        r->prompt = text;
        r->prompt_len = len;
        r->parse_special = o->special;
    }
    r->temperature = (float)o->temp;
    r->top_k = (int32_t)o->top_k;
    r->top_p = (float)o->top_p;
    r->min_p = (float)o->min_p;
    r->repetition_penalty = (float)o->repeat_penalty;
    r->presence_penalty = (float)o->presence;
    r->frequency_penalty = (float)o->frequency;
    r->penalty_last_n = (int32_t)o->repeat_last_n;
    r->seed = (uint64_t)o->seed;
    r->max_tokens = (int32_t)o->n_predict;
    r->n = (int32_t)o->n_samples;
    r->logprobs = o->logprobs >= 0;
    r->top_logprobs = o->logprobs > 0 ? (int32_t)o->logprobs : 0;
    r->ignore_eos = o->ignore_eos;
    r->stop = o->stops.n ? o->stops.items : NULL;
    r->n_stop = o->stops.n;
    r->stop_regex = o->stop_regexes.n ? o->stop_regexes.items : NULL;
    r->n_stop_regex = o->stop_regexes.n;
    r->regex = c->regex;
    r->grammar = c->grammar;
    r->no_jump_forward = o->no_jump_forward;
    r->end_span = o->end_span; /* args.h index == TRELLIS_END_SPAN_* */
    r->stream = !o->json;
}

/* Submits r; when prompt + -n does not fit the context (or the KV pool),
 * asks for what fits instead. Exit status or 0. */
static int submit(trellis_engine *e, trellis_request *r) {
    char err[1024];
    int rc = trellis_submit(e, r, NULL, err, sizeof err);
    if (rc == TRELLIS_ERR_TOO_LONG || rc == TRELLIS_ERR_LIMIT) {
        r->max_tokens = -1;
        rc = trellis_submit(e, r, NULL, err, sizeof err);
        if (rc == TRELLIS_ERR_TOO_LONG) {
            fprintf(stderr, "trellis generate: the prompt is longer than the context "
                            "allows (--ctx): %s\n", err);
            return 1;
        }
    }
    if (rc == TRELLIS_OK) return 0;
    fprintf(stderr, "trellis generate: %s\n", err);
    return 1;
}

static int run(const gen_opts *o, const char *path, const char *text, size_t len,
               gen_constraint *c) {
    trellis_engine *e = NULL;
    double load_ms = 0;
    int rc = start_engine(o, path, &e, &load_ms);
    if (rc) return rc;
    rc = tr_cli_gen_constraint_compile(o, e, c);
    if (rc == 0) {
        trellis_message msgs[2];
        int32_t n_msgs = 0;
        if (o->system) msgs[n_msgs++] = (trellis_message){"system", o->system};
        msgs[n_msgs++] = (trellis_message){"user", text};
        trellis_request r;
        fill_request(o, text, len, msgs, n_msgs, c, &r);
        rc = submit(e, &r);
    }
    if (rc == 0) {
        trellis_engine_info info;
        trellis_engine_get_info(e, &info);
        gen_facts f = {.load_ms = load_ms, .threads = info.threads,
                       .model_load = info.load == TRELLIS_LOAD_READ ? "read" : "mmap",
                       .kv_type_k = trellis_kv_type_name(info.kv_type_k),
                       .kv_type_v = trellis_kv_type_name(info.kv_type_v),
                       .stops = o->stops.items, .n_stops = o->stops.n,
                       .stop_regexes = o->stop_regexes.items,
                       .n_stop_regexes = o->stop_regexes.n,
                       .constraint = c->kind ? c : NULL};
        rc = tr_cli_gen_output_run(e, o, &f, (int32_t)o->n_samples);
    }
    /* the request holds its own reference to the grammar */
    tr_cli_gen_constraint_free(c);
    trellis_engine_free(e);
    return rc;
}

int tr_cli_generate(int argc, char **argv) {
    trellis_request rd; /* the engine's defaults, where the CLI has none of its own */
    trellis_request_default(&rd);
    gen_opts o = {.n_predict = 128, .batch = -1, .temp = 0.0, .top_p = rd.top_p,
                  .min_p = rd.min_p, .repeat_penalty = rd.repetition_penalty,
                  .repeat_last_n = rd.penalty_last_n, .logprobs = -1, .n_samples = 1,
                  .schema_mode = -1, .whitespace = -1, .json_numbers = -1,
                  .property_order = -1};
    tr_engine_flags_init(&o.engine);
    bool help = false;
    if (!parse(argc, argv, &o, &help)) return 2;
    if (help) return 0;
    if (!check_opts(&o)) return 2;
    gen_constraint c;
    int rc = tr_cli_gen_constraint_prepare(&o, &c);
    char *text = NULL;
    size_t len = 0;
    if (!rc) rc = read_prompt(&o, &text, &len);
    char def[4096];
    const char *path = rc ? NULL : tr_cli_model_path("generate", o.model, def, sizeof def);
    if (!rc && !path) rc = 1;
    if (!rc && o.engine.opts.ctx && !check_ctx(path, o.engine.opts.ctx)) rc = 2;
    if (!rc) rc = run(&o, path, text, len, &c);
    tr_cli_gen_constraint_free(&c);
    free(text);
    return rc;
}
