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
#include "base/util.h"
#include "frontend/dsl.h"
#include "frontend/value.h"

static const char usage_text[] =
    "usage: trellis run SCRIPT [FUNCTION] [options]\n"
    "\n"
    "Runs FUNCTION (default: main, or the script's only function) of a prompt\n"
    "program (frontend/README.md) and prints its return value, or its generated\n"
    "variables when it returns nothing.\n"
    "\n"
    "arguments:\n"
    "  --arg NAME=TEXT        a string argument (repeatable)\n"
    "  --arg-json NAME=JSON   an argument given as JSON (repeatable)\n"
    "  --batch FILE.jsonl     run once per line (a JSON object of arguments),\n"
    "                         concurrently; one JSON line out per input, in order\n"
    "  --parallel N           runs at once with --batch (default 32)\n"
    "where it runs:\n"
    "  -m, --model PATH       in-process, on this GGUF model (default: the cached\n"
    "                         default model)\n"
    "  --server URL           against `trellis serve` at URL (http://HOST:PORT)\n"
    "  --api-key KEY          the server's API key\n"
    "  --chat-template NAME   with --server: chatml|llama3|gemma|llama2|mistral\n"
    "                         (default: what the server reports)\n"
    "  --timeout SECONDS      with --server: longest silence of the server (600)\n"
    "engine (in-process):\n"
    "  -t, --threads N  --kv-mem MIB  --max-running N  --ctx N  --load auto|mmap|read\n"
    "  --no-radix             no prefix cache across requests (for comparisons)\n"
    "output:\n"
    "  --json                 print {\"return\", \"vars\", \"text\", \"stats\"}\n"
    "  --stream               show generated text as it comes\n"
    "  --stats                print run statistics to stderr\n"
    "  --check                only parse the script\n"
    "limits:\n"
    "  --max-depth N (64)  --max-loop N (100000)  --max-fork N (64)\n"
    "  --max-tasks N (256)  --no-warm (no prefix warm-up before forks and batches)\n";

typedef struct run_opts {
    const char *script, *fn, *model, *server, *api_key, *chat_template, *batch, *load;
    const char *args[64][2];
    bool args_json[64];
    int n_args;
    bool json, stream, stats, check, no_radix, no_warm;
    long parallel, threads, kv_mem, max_running, ctx, timeout;
    long max_depth, max_loop, max_fork, max_tasks;
} run_opts;

static int usage_error(const char *fmt, const char *a) {
    fprintf(stderr, "trellis run: ");
    fprintf(stderr, fmt, a);
    fprintf(stderr, "\n(trellis run --help lists the options)\n");
    return 2;
}

static bool parse_long(const char *flag, const char *v, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long x = v ? strtol(v, &end, 10) : 0;
    if (!v || !*v || *end || errno || x < lo || x > hi) {
        fprintf(stderr, "trellis run: %s needs an integer in %ld..%ld, not '%s'\n", flag, lo,
                hi, v ? v : "");
        return false;
    }
    *out = x;
    return true;
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
    int positional = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define VALUE()                                                          \
    do {                                                                 \
        if (!v) return usage_error("%s needs a value", a);               \
        i++;                                                             \
    } while (0)
#define NUM(flag, lo, hi, dst)                                           \
    if (strcmp(a, flag) == 0) {                                          \
        VALUE();                                                         \
        if (!parse_long(flag, v, lo, hi, dst)) return 2;                 \
        continue;                                                        \
    }
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            fputs(usage_text, stdout);
            return 0;
        }
        if (strcmp(a, "--arg") == 0 || strcmp(a, "--arg-json") == 0) {
            VALUE();
            const char *eq = strchr(v, '=');
            if (!eq || eq == v) return usage_error("%s takes NAME=VALUE", a);
            if (o->n_args == 64) return usage_error("%s: at most 64 arguments", a);
            char *name = strndup(v, (size_t)(eq - v));
            if (!name) return usage_error("%s", "out of memory");
            o->args[o->n_args][0] = name;
            o->args[o->n_args][1] = eq + 1;
            o->args_json[o->n_args] = strcmp(a, "--arg-json") == 0;
            o->n_args++;
            continue;
        }
        const char **str = strcmp(a, "-m") == 0 || strcmp(a, "--model") == 0 ? &o->model
                           : strcmp(a, "--server") == 0                      ? &o->server
                           : strcmp(a, "--api-key") == 0                     ? &o->api_key
                           : strcmp(a, "--chat-template") == 0 ? &o->chat_template
                           : strcmp(a, "--batch") == 0         ? &o->batch
                           : strcmp(a, "--load") == 0          ? &o->load
                                                               : NULL;
        if (str) {
            VALUE();
            *str = v;
            continue;
        }
        bool *flag = strcmp(a, "--json") == 0       ? &o->json
                     : strcmp(a, "--stream") == 0   ? &o->stream
                     : strcmp(a, "--stats") == 0    ? &o->stats
                     : strcmp(a, "--check") == 0    ? &o->check
                     : strcmp(a, "--no-radix") == 0 ? &o->no_radix
                     : strcmp(a, "--no-warm") == 0  ? &o->no_warm
                                                    : NULL;
        if (flag) {
            *flag = true;
            continue;
        }
        NUM("--parallel", 1, 4096, &o->parallel)
        if (strcmp(a, "-t") == 0) a = "--threads"; /* as generate and bench */
        NUM("--threads", 0, TRELLIS_MAX_THREADS, &o->threads)
        NUM("--kv-mem", 1, 1 << 20, &o->kv_mem)
        NUM("--max-running", 1, 4096, &o->max_running)
        NUM("--ctx", 0, 1 << 24, &o->ctx)
        NUM("--timeout", 1, 86400, &o->timeout)
        NUM("--max-depth", 1, 10000, &o->max_depth)
        NUM("--max-loop", 1, 1000000000, &o->max_loop)
        NUM("--max-fork", 1, 4096, &o->max_fork)
        NUM("--max-tasks", 1, 65536, &o->max_tasks)
        if (a[0] == '-' && a[1]) return usage_error("unknown option '%s'", a);
        if (positional == 0) o->script = a;
        else if (positional == 1) o->fn = a;
        else return usage_error("unexpected argument '%s'", a);
        positional++;
#undef NUM
#undef VALUE
    }
    if (!o->script) return usage_error("%s", "no SCRIPT given");
    if (o->server && o->model) return usage_error("%s", "give -m MODEL or --server URL, not both");
    if (o->server && (o->no_radix || o->threads || o->kv_mem || o->max_running || o->ctx))
        return usage_error("%s", "engine options (--no-radix, --threads, --kv-mem, "
                                 "--max-running, --ctx) are the server's, not --server's");
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
    trellis_engine_options eo;
    trellis_engine_options_default(&eo);
    if (o->threads) eo.threads = (int32_t)o->threads;
    if (o->kv_mem) eo.kv_mb = (int32_t)o->kv_mem;
    if (o->max_running) eo.max_running = (int32_t)o->max_running;
    if (o->ctx) eo.ctx = (int32_t)o->ctx;
    eo.no_radix = o->no_radix;
    if (o->load) {
        if (strcmp(o->load, "auto") == 0) eo.load = TRELLIS_LOAD_AUTO;
        else if (strcmp(o->load, "mmap") == 0) eo.load = TRELLIS_LOAD_MMAP;
        else if (strcmp(o->load, "read") == 0) eo.load = TRELLIS_LOAD_READ;
        else return usage_error("--load takes auto, mmap or read, not '%s'", o->load);
    }
    if (trellis_engine_new(o->model, &eo, engine, err, sizeof err) != TRELLIS_OK) {
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

int tr_dsl_cmd_run(int argc, char **argv) {
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
