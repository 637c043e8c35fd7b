/* cmd_run.c — `trellis run SCRIPT [FUNCTION] ...`: parses the script,
 * starts an engine in-process (or connects to --server), runs the
 * function once or once per line of --batch, prints the result.
 *
 * Layering: an application (app/cli) over the DSL library (frontend/dsl.h,
 * frontend/value.h) and base/.
 * Exit status: 0 ok, 1 a run failed (any input of a batch), 2 bad usage
 * or a script that does not parse. Errors go to stderr as
 * `SCRIPT:LINE:COL: error: ...` with the source line and a caret.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/cli/cli.h"
#include "app/common/args.h"
#include "app/common/engine_flags.h"
#include "base/util.h"
#include "frontend/dsl.h"
#include "frontend/value.h"

typedef struct run_opts {
    const char *script, *fn, *model, *server, *api_key, *chat_template, *batch;
    const char *args[CLI_STRS_MAX][2]; /* NAME, VALUE of --arg/--arg-json */
    bool args_json[CLI_STRS_MAX];
    int n_args;
    bool json, stream, stats, check, no_warm;
    int64_t parallel, timeout, max_depth, max_loop, max_fork, max_tasks;
    tr_engine_flags engine; /* in-process runs */
} run_opts;

static int usage_error(const char *fmt, const char *a) {
    fprintf(stderr, "trellis run: ");
    fprintf(stderr, fmt, a);
    fprintf(stderr, "\n(trellis run --help lists the options)\n");
    return 2;
}

/* --arg and --arg-json, in the order given, into o->args. Exit status or
 * -1. */
static int take_args(const cli_strs *a, run_opts *o) {
    for (int i = 0; i < a->n; i++) {
        const char *v = a->items[i], *eq = strchr(v, '=');
        if (!eq || eq == v) return usage_error("%s takes NAME=VALUE", a->flags[i]);
        char *name = strndup(v, (size_t)(eq - v));
        if (!name) return usage_error("%s", "out of memory");
        o->args[o->n_args][0] = name;
        o->args[o->n_args][1] = eq + 1;
        o->args_json[o->n_args] = strcmp(a->flags[i], "--arg-json") == 0;
        o->n_args++;
    }
    return -1;
}

/* Returns -1 to go on, else the exit status. */
static int parse_args(int argc, char **argv, run_opts *o) {
    memset(o, 0, sizeof *o);
    o->parallel = 32;
    o->timeout = 600;
    o->max_depth = 64;
    o->max_loop = 100000;
    o->max_fork = 64;
    o->max_tasks = 256;
    tr_engine_flags_init(&o->engine);
    cli_strs operands = {0}, args = {0};
    bool help = false;
    const cli_opt opts[] = {
        {"arguments", NULL, CLI_SECTION},
        {"--arg", NULL, CLI_STRS, &args, 1, 0, "a string argument", .meta = "NAME=TEXT"},
        {"--arg-json", NULL, CLI_STRS, &args, 1, 0, "an argument given as JSON",
         .meta = "NAME=JSON"},
        {"--batch", NULL, CLI_STR, &o->batch, 1, 0,
         "run once per line (a JSON object of arguments), concurrently; one JSON line out "
         "per input, in order", .meta = "FILE.jsonl"},
        {"--parallel", NULL, CLI_INT, &o->parallel, 1, 4096, "runs at once with --batch",
         "32"},
        {"where it runs", NULL, CLI_SECTION},
        {"--model", "-m", CLI_STR, &o->model, 1, 0,
         "in-process, on this GGUF model (with the engine options below)",
         "the cached default model", .meta = "FILE"},
        {"--server", NULL, CLI_STR, &o->server, 1, 0,
         "against `trellis serve` at URL (http://HOST:PORT)", .meta = "URL"},
        {"--api-key", NULL, CLI_STR, &o->api_key, 1, 0, "the server's API key",
         .meta = "KEY"},
        {"--chat-template", NULL, CLI_STR, &o->chat_template, 1, 0,
         "with --server: chatml, llama3, gemma, llama2 or mistral",
         "what the server reports", .meta = "NAME"},
        {"--timeout", NULL, CLI_INT, &o->timeout, 1, 86400,
         "with --server: longest silence of the server in seconds", "600"},
        {"output", NULL, CLI_SECTION},
        {"--json", NULL, CLI_FLAG, &o->json, 1, 0,
         "print {\"return\", \"vars\", \"text\", \"stats\"}", "off"},
        {"--stream", NULL, CLI_FLAG, &o->stream, 1, 0, "show generated text as it comes",
         "off"},
        {"--stats", NULL, CLI_FLAG, &o->stats, 1, 0, "print run statistics to stderr", "off"},
        {"--check", NULL, CLI_FLAG, &o->check, 1, 0, "only parse the script", "off"},
        {"limits", NULL, CLI_SECTION},
        {"--max-depth", NULL, CLI_INT, &o->max_depth, 1, 10000, "call depth", "64"},
        {"--max-loop", NULL, CLI_INT, &o->max_loop, 1, 1000000000,
         "iterations of one loop", "100000"},
        {"--max-fork", NULL, CLI_INT, &o->max_fork, 1, 4096, "branches of one fork", "64"},
        {"--max-tasks", NULL, CLI_INT, &o->max_tasks, 1, 65536, "tasks alive at once",
         "256"},
        {"--no-warm", NULL, CLI_FLAG, &o->no_warm, 1, 0,
         "no prefix warm-up before forks and batches", "off"},
    };
    cli_cmd c = {.name = "run", .usage = "SCRIPT [FUNCTION] [options]",
                 .about = "Runs FUNCTION (default: main, or the script's only function) of a "
                          "prompt\nprogram (frontend/README.md) and prints its return value, "
                          "or its generated\nvariables when it returns nothing.\n",
                 .opts = opts, .n_opts = TR_ARRAY_LEN(opts), .operands = &operands};
    tr_engine_flags_attach(&o->engine, &c);
    if (!tr_cli_parse(&c, argc, argv, &help)) return 2;
    if (help) return 0;
    if (operands.n > 2) return usage_error("unexpected argument '%s'", operands.items[2]);
    o->script = operands.n > 0 ? operands.items[0] : NULL;
    o->fn = operands.n > 1 ? operands.items[1] : NULL;
    int rc = take_args(&args, o);
    if (rc >= 0) return rc;
    if (!o->script) return usage_error("%s", "no SCRIPT given");
    if (o->server && o->model) return usage_error("%s", "give -m MODEL or --server URL, not both");
    const char *engine_flag = tr_engine_flags_first_given(&o->engine);
    if (o->server && engine_flag)
        return usage_error("%s: engine options are the server's, not --server's",
                           engine_flag);
    if (o->batch && o->n_args)
        return usage_error("%s", "--batch takes its arguments from the file; no --arg");
    return -1;
}

static void free_opts(run_opts *o) {
    for (int i = 0; i < o->n_args; i++) free((char *)o->args[i][0]);
}

/* ---- streaming ---- */

typedef struct stream_state {
    FILE *out;
    int32_t task;
    const char *name;
} stream_state;

static void stream_text(void *user, int32_t task, const char *name, const char *text,
                        size_t len) {
    stream_state *s = user;
    if (task != s->task || name != s->name) {
        if (task) fprintf(s->out, "\n[%s #%d] ", name ? name : "", task);
        else fprintf(s->out, "\n[%s] ", name ? name : "");
        s->task = task;
        s->name = name;
    }
    fwrite(text, 1, len, s->out);
    fflush(s->out);
}

/* ---- output ---- */

static json_t *stats_json(const tr_dsl_run_stats *st, tr_dsl_backend *b) {
    json_t *j = json_pack("{s:i, s:I, s:I, s:I, s:i, s:f, s:f, s:f}", "gens", st->gens,
                          "prompt_tokens", (json_int_t)st->prompt_tokens, "cached_tokens",
                          (json_int_t)st->cached_tokens, "completion_tokens",
                          (json_int_t)st->completion_tokens, "tasks", st->tasks, "wall_ms",
                          st->wall_ms, "interp_ms", st->interp_ms, "backend_ms",
                          st->backend_ms);
    if (!j) return NULL;
    json_object_set_new(j, "cache_hit_rate",
                        json_real(st->prompt_tokens
                                      ? (double)st->cached_tokens / (double)st->prompt_tokens
                                      : 0.0));
    json_object_set_new(j, "interp_overhead",
                        json_real(st->wall_ms > 0 ? st->interp_ms / st->wall_ms : 0.0));
    if (b && b->ops->get_stats) {
        tr_dsl_backend_stats bs = {0};
        b->ops->get_stats(b, &bs);
        if (bs.known)
            json_object_set_new(
                j, "engine_cache_hit_rate",
                json_real(bs.prompt_tokens ? (double)bs.cached_tokens / (double)bs.prompt_tokens
                                           : 0.0));
    }
    return j;
}

static void print_stats(const char *what, const tr_dsl_run_stats *st, tr_dsl_backend *b) {
    fprintf(stderr,
            "%s: %d gens, %lld prompt tokens (%lld cached, %.1f%%), %lld generated; wall "
            "%.1f ms, interpreter %.2f ms (%.3f%% of wall), backend calls %.2f ms\n",
            what, st->gens, (long long)st->prompt_tokens, (long long)st->cached_tokens,
            st->prompt_tokens ? 100.0 * (double)st->cached_tokens / (double)st->prompt_tokens
                              : 0.0,
            (long long)st->completion_tokens, st->wall_ms, st->interp_ms,
            st->wall_ms > 0 ? 100.0 * st->interp_ms / st->wall_ms : 0.0, st->backend_ms);
    if (b && b->ops->get_stats) {
        tr_dsl_backend_stats bs = {0};
        b->ops->get_stats(b, &bs);
        if (bs.known)
            fprintf(stderr, "engine: %llu prompt tokens admitted, %llu cached (%.1f%%)\n",
                    (unsigned long long)bs.prompt_tokens, (unsigned long long)bs.cached_tokens,
                    bs.prompt_tokens ? 100.0 * (double)bs.cached_tokens / (double)bs.prompt_tokens
                                     : 0.0);
    }
}

static void print_value(FILE *f, json_t *v) {
    if (json_is_string(v)) {
        fwrite(json_string_value(v), 1, json_string_length(v), f);
        fputc('\n', f);
    } else {
        char *j = json_dumps(v, JSON_INDENT(2) | JSON_ENCODE_ANY | JSON_REAL_PRECISION(15));
        if (j) fprintf(f, "%s\n", j);
        free(j);
    }
}

/* ---- batch ---- */

static void emit_line(void *user, size_t index, json_t *line) {
    (void)user;
    (void)index;
    char *s = json_dumps(line, JSON_COMPACT | JSON_REAL_PRECISION(15));
    if (s) printf("%s\n", s);
    else printf("{\"index\":%zu,\"error\":{\"message\":\"out of memory\"}}\n", index);
    free(s);
    fflush(stdout);
}

static int run_batch(const run_opts *o, tr_dsl_session *sess, const tr_dsl_script *script,
                     const char *fn, tr_dsl_backend *backend) {
    FILE *f = fopen(o->batch, "rb");
    if (!f) {
        fprintf(stderr, "trellis run: cannot open %s: %s\n", o->batch, strerror(errno));
        return 2;
    }
    json_t **inputs = NULL;
    char **errs = NULL;
    size_t n = 0, cap = 0;
    char *line = NULL;
    size_t lcap = 0;
    ssize_t len;
    long lineno = 0;
    int rc = 0;
    while ((len = getline(&line, &lcap, f)) >= 0) {
        lineno++;
        size_t a = 0, b = (size_t)len;
        while (a < b && (line[a] == ' ' || line[a] == '\t' || line[a] == '\r' || line[a] == '\n'))
            a++;
        while (b > a && (line[b - 1] == ' ' || line[b - 1] == '\t' || line[b - 1] == '\r' ||
                         line[b - 1] == '\n'))
            b--;
        if (a == b) continue; /* blank lines are not inputs */
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            json_t **ni = realloc(inputs, cap * sizeof *ni);
            char **ne = ni ? realloc(errs, cap * sizeof *ne) : NULL;
            if (ni) inputs = ni;
            if (ne) errs = ne;
            if (!ni || !ne) {
                fprintf(stderr, "trellis run: out of memory reading %s\n", o->batch);
                rc = 1;
                break;
            }
        }
        json_error_t je;
        inputs[n] = json_loadb(line + a, b - a, 0, &je);
        errs[n] = NULL;
        char msg[400];
        if (!inputs[n]) {
            snprintf(msg, sizeof msg, "%s line %ld is not JSON: %s (column %d)", o->batch,
                     lineno, je.text, je.column);
            errs[n] = strdup(msg);
        } else if (!json_is_object(inputs[n])) {
            snprintf(msg, sizeof msg,
                     "%s line %ld is not a JSON object of arguments ({\"name\": value})",
                     o->batch, lineno);
            errs[n] = strdup(msg);
            tr_dsl_unref(inputs[n]);
            inputs[n] = NULL;
        }
        n++;
    }
    free(line);
    fclose(f);
    if (rc == 0) {
        tr_dsl_batch_options bo;
        tr_dsl_batch_options_default(&bo);
        bo.parallel = (int32_t)o->parallel;
        bo.warm_first = !o->no_warm;
        tr_dsl_batch_stats st;
        tr_dsl_error err;
        tr_status s = tr_dsl_batch_run(sess, fn, inputs, (const char *const *)errs, n, &bo,
                                       emit_line, NULL, &st, &err);
        if (s != TR_OK) {
            char buf[2048];
            fputs(tr_dsl_error_format(script, &err, buf, sizeof buf), stderr);
            rc = 1;
        } else {
            if (o->stats) {
                fprintf(stderr, "batch: %zu inputs, %zu ok, %zu failed\n", n, st.ok,
                        st.failed);
                print_stats("batch", &st.sum, backend);
            }
            rc = st.failed ? 1 : 0;
        }
    }
    for (size_t i = 0; i < n; i++) {
        tr_dsl_unref(inputs[i]);
        free(errs[i]);
    }
    free(inputs);
    free(errs);
    return rc;
}

/* ---- one run ---- */

static int run_once(const run_opts *o, tr_dsl_session *sess, const tr_dsl_script *script,
                    const char *fn, tr_dsl_backend *backend) {
    json_t *args = json_object();
    if (!args) return 1;
    for (int i = 0; i < o->n_args; i++) {
        json_t *v;
        if (o->args_json[i]) {
            json_error_t je;
            v = json_loads(o->args[i][1], JSON_DECODE_ANY, &je);
            if (!v) {
                fprintf(stderr, "trellis run: --arg-json %s: not JSON: %s\n", o->args[i][0],
                        je.text);
                tr_dsl_unref(args);
                return 2;
            }
        } else {
            v = json_string(o->args[i][1]);
            if (!v) {
                fprintf(stderr, "trellis run: --arg %s: not valid UTF-8\n", o->args[i][0]);
                tr_dsl_unref(args);
                return 2;
            }
        }
        json_object_set_new(args, o->args[i][0], v);
    }
    tr_dsl_result r;
    tr_dsl_error err;
    tr_status s = tr_dsl_session_run(sess, fn, args, &r, &err);
    tr_dsl_unref(args);
    if (o->stream) fputc('\n', o->json ? stderr : stdout);
    if (s != TR_OK) {
        char buf[2048];
        fputs(tr_dsl_error_format(script, &err, buf, sizeof buf), stderr);
        return 1;
    }
    if (o->json) {
        json_t *out = json_pack("{s:O, s:O, s:s}", "return", r.ret, "vars", r.vars, "text",
                                r.text ? r.text : "");
        if (out) json_object_set_new(out, "stats", stats_json(&r.stats, backend));
        char *j = out ? json_dumps(out, JSON_INDENT(2) | JSON_REAL_PRECISION(15)) : NULL;
        if (j) printf("%s\n", j);
        free(j);
        tr_dsl_unref(out);
    } else if (!json_is_null(r.ret)) {
        print_value(stdout, r.ret);
    } else {
        const char *k;
        json_t *v;
        json_object_foreach(r.vars, k, v) {
            printf("%s: ", k);
            print_value(stdout, v);
        }
    }
    if (o->stats) print_stats("run", &r.stats, backend);
    tr_dsl_result_deinit(&r);
    return 0;
}

static int open_backend(const run_opts *o, trellis_engine **engine, tr_dsl_backend **out) {
    char err[1024];
    if (o->server) {
        tr_dsl_http_options ho = {0};
        ho.url = o->server;
        ho.api_key = o->api_key;
        ho.chat_template = o->chat_template;
        ho.timeout_ms = (int32_t)(o->timeout * 1000);
        ho.max_inflight = (int32_t)TR_MAX(o->parallel, 16);
        if (tr_dsl_backend_http_new(&ho, out, err, sizeof err) != TR_OK) {
            fprintf(stderr, "trellis run: %s\n", err);
            return 1;
        }
        return 0;
    }
    if (o->chat_template)
        fprintf(stderr, "trellis run: --chat-template is for --server; in-process runs use "
                        "the model's own template\n");
    if (trellis_engine_new(o->model, &o->engine.opts, engine, err, sizeof err) != TRELLIS_OK) {
        fprintf(stderr, "trellis run: cannot load the model: %s\n", err);
        return 1;
    }
    if (tr_dsl_backend_engine_new(*engine, out, err, sizeof err) != TR_OK) {
        fprintf(stderr, "trellis run: %s\n", err);
        trellis_engine_free(*engine);
        *engine = NULL;
        return 1;
    }
    return 0;
}

int tr_cli_run(int argc, char **argv) {
    run_opts o;
    int rc = parse_args(argc, argv, &o);
    if (rc >= 0) {
        free_opts(&o);
        return rc;
    }
    tr_dsl_session_options so;
    tr_dsl_session_options_default(&so);
    so.limits.max_call_depth = (int32_t)o.max_depth;
    so.limits.max_loop_iterations = o.max_loop;
    so.limits.max_fork_width = (int32_t)o.max_fork;
    so.limits.max_tasks = (int32_t)o.max_tasks;
    so.warm_forks = !o.no_warm;
    tr_dsl_script *script = NULL;
    tr_dsl_error err;
    char buf[2048];
    char *src = NULL;
    size_t src_len = 0;
    if (tr_dsl_read_source(o.script, so.limits.max_script_bytes, &src, &src_len, &err) !=
        TR_OK) {
        fprintf(stderr, "trellis run: %s\n", err.message);
        free_opts(&o);
        return 2;
    }
    char dir[4096];
    tr_dsl_script_dir(o.script, dir, sizeof dir);
    tr_status ps = tr_dsl_script_parse(o.script, dir, src, src_len, &so.limits, &script, &err);
    if (ps != TR_OK) {
        fputs(tr_dsl_error_format_src(o.script, src, src_len, &err, buf, sizeof buf), stderr);
        free(src);
        free_opts(&o);
        return 2;
    }
    free(src);
    const char *fn = o.fn ? o.fn : tr_dsl_script_default_fn(script);
    if (!fn || !tr_dsl_script_has_fn(script, fn)) {
        if (o.fn) fprintf(stderr, "trellis run: %s has no function '%s'\n", o.script, o.fn);
        else fprintf(stderr, "trellis run: %s has no main function; name the one to run\n",
                     o.script);
        tr_dsl_script_free(script);
        free_opts(&o);
        return 2;
    }
    if (o.check) {
        printf("%s: ok\n", o.script);
        tr_dsl_script_free(script);
        free_opts(&o);
        return 0;
    }
    trellis_engine *engine = NULL;
    tr_dsl_backend *backend = NULL;
    rc = open_backend(&o, &engine, &backend);
    stream_state ss = {o.json ? stderr : stdout, -1, NULL};
    tr_dsl_stream stream = {stream_text, &ss};
    if (o.stream) so.stream = &stream;
    tr_dsl_session *sess = NULL;
    if (rc == 0 && tr_dsl_session_new(script, backend, &so, &sess, &err) != TR_OK) {
        fputs(tr_dsl_error_format(script, &err, buf, sizeof buf), stderr);
        rc = 1;
    }
    if (rc == 0) {
        rc = o.batch ? run_batch(&o, sess, script, fn, backend)
                     : run_once(&o, sess, script, fn, backend);
    }
    tr_dsl_session_free(sess);
    tr_dsl_backend_free(backend);
    trellis_engine_free(engine);
    tr_dsl_script_free(script);
    free_opts(&o);
    return rc;
}
