/* serve_args.c — `trellis serve` flags to a tr_srv_config. Every value is
 * range-checked; a bad flag prints what is wrong and the usage (exit 2).
 * The API key may come from a file (--api-key-file: the operator's file,
 * read once at start-up; trailing newlines dropped) so that it does not
 * show in the process list. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "app/server/server_internal.h"

static void usage(FILE *f) {
    fprintf(f,
        "usage: trellis serve [options]\n\n"
        "An OpenAI-compatible server (/v1/chat/completions, /v1/completions, /v1/models)\n"
        "and SGLang's native /generate. Structured output: response_format json_schema\n"
        "(JSON Schema) and json_object, regex, choices, ebnf (EBNF and llama.cpp GBNF).\n"
        "Reference: app/server/README.md.\n\n"
        "  -m, --model PATH          GGUF model (default: the cached default model)\n"
        "  --host ADDR               address to bind (default 127.0.0.1: loopback only)\n"
        "  --port N                  port (default 8080; 0 = any free port)\n"
        "  --api-key KEY             require Authorization: Bearer KEY (all but /health)\n"
        "  --api-key-file F          the same, the key read from file F\n"
        "  --served-model-name NAME  the model id clients use (default: the file name)\n"
        "  --threads N               compute threads (default: one per core)\n"
        "  --kv-mem MiB              KV cache memory (default 512)\n"
        "  --page-size N             tokens per KV page (default 16)\n"
        "  --ctx N                   context limit per sequence (default: the model's)\n"
        "  --max-running N           sequences running at once (default 64)\n"
        "  --max-batch-tokens N      tokens per engine step (default 512)\n"
        "  --chunk-size N            prefill tokens per sequence per step (default 256)\n"
        "  --max-queue N             requests waiting beyond --max-running before 429\n"
        "                            (default 256)\n"
        "  --no-radix                share no KV cache across requests\n"
        "  --load auto|mmap|read     how the model file comes in (default auto)\n"
        "  --log-format text|json    log lines (default text)\n"
        "  --log-prompts             log request bodies (off: prompts never reach the log)\n"
        "  --log-requests            one log line per request (method and path)\n"
        "limits:\n"
        "  --max-body BYTES          request body (default 8388608) -> 413\n"
        "  --max-header BYTES        request headers (default 16384) -> 431\n"
        "  --max-url BYTES           request target (default 8192) -> 414\n"
        "  --max-connections N       open connections (default 1024) -> 503\n"
        "  --read-timeout S          first byte to whole request (default 30) -> 408\n"
        "  --idle-timeout S          keep-alive idle time (default 60)\n"
        "  --write-timeout S         a client that stops reading (default 60)\n"
        "  --max-n N                 samples per prompt (default 64)\n"
        "  --max-prompts N           prompts per completions/generate request (default 64)\n"
        "  --max-messages N          chat messages (default 1024)\n"
        "  --max-tokens-limit N      cap on max_tokens (default: the context)\n"
        "  --stuck-timeout S         /health 503 after S s without engine progress (60)\n"
        "  --shutdown-timeout S      SIGINT/SIGTERM grace for in-flight requests (30)\n"
        "  --port-file F             write the bound port to F\n");
}

static int num(const char *flag, const char *v, long long lo, long long hi, long long *out) {
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (!*v || *end || errno || x < lo || x > hi) {
        fprintf(stderr, "trellis serve: %s: '%s' is not a number in %lld..%lld\n", flag, v, lo, hi);
        return -1;
    }
    *out = x;
    return 0;
}

static char *read_key_file(const char *path) {
    char *data = NULL;
    size_t len = 0;
    if (tr_read_file(path, &data, &len) != 0) {
        fprintf(stderr, "trellis serve: --api-key-file: cannot read %s\n", path);
        return NULL;
    }
    while (len && (data[len - 1] == '\n' || data[len - 1] == '\r' || data[len - 1] == ' '))
        data[--len] = '\0';
    if (len == 0 || strlen(data) != len) {
        fprintf(stderr, "trellis serve: --api-key-file: %s holds no key (or a NUL byte)\n", path);
        free(data);
        return NULL;
    }
    return data;
}

int tr_serve_main(int argc, char **argv) {
    tr_srv_config c;
    tr_srv_config_default(&c);
    int rc = 2;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            free(c.api_key);
            return 0;
        }
        bool flag_only = !strcmp(a, "--no-radix") || !strcmp(a, "--log-prompts") ||
                         !strcmp(a, "--log-requests");
        if (flag_only) {
            if (!strcmp(a, "--no-radix")) c.engine.no_radix = true;
            else if (!strcmp(a, "--log-prompts")) c.log_prompts = true;
            else c.log_requests = true;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "trellis serve: %s needs a value (or is unknown)\n\n", a);
            usage(stderr);
            goto out;
        }
        const char *v = argv[++i];
        long long x;
#define NUM(lo, hi) if (num(a, v, lo, hi, &x)) goto out
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) c.model_path = v;
        else if (!strcmp(a, "--host")) c.host = v;
        else if (!strcmp(a, "--port")) { NUM(0, 65535); c.port = (int)x; }
        else if (!strcmp(a, "--api-key")) {
            free(c.api_key);
            if (!*v) { fprintf(stderr, "trellis serve: --api-key is empty\n"); goto out; }
            c.api_key = strdup(v);
        } else if (!strcmp(a, "--api-key-file")) {
            free(c.api_key);
            if (!(c.api_key = read_key_file(v))) goto out;
        } else if (!strcmp(a, "--served-model-name")) {
            if (!*v || strlen(v) > 200) { fprintf(stderr, "trellis serve: --served-model-name: 1..200 bytes\n"); goto out; }
            c.served_model_name = v;
        }
        else if (!strcmp(a, "--threads")) { NUM(0, 1024); c.engine.threads = (int32_t)x; }
        else if (!strcmp(a, "--kv-mem")) { NUM(1, 1 << 20); c.engine.kv_mb = (int32_t)x; }
        else if (!strcmp(a, "--page-size")) { NUM(1, 4096); c.engine.page_size = (int32_t)x; }
        else if (!strcmp(a, "--ctx")) { NUM(0, 1 << 24); c.engine.ctx = (int32_t)x; }
        else if (!strcmp(a, "--max-running")) { NUM(1, 1 << 16); c.engine.max_running = (int32_t)x; }
        else if (!strcmp(a, "--max-batch-tokens")) { NUM(1, 1 << 20); c.engine.max_batch_tokens = (int32_t)x; }
        else if (!strcmp(a, "--chunk-size")) { NUM(1, 1 << 20); c.engine.chunk_size = (int32_t)x; }
        else if (!strcmp(a, "--max-queue")) { NUM(0, 1 << 20); c.max_queue = (int32_t)x; }
        else if (!strcmp(a, "--load")) {
            if (!strcmp(v, "auto")) c.engine.load = TRELLIS_LOAD_AUTO;
            else if (!strcmp(v, "mmap")) c.engine.load = TRELLIS_LOAD_MMAP;
            else if (!strcmp(v, "read")) c.engine.load = TRELLIS_LOAD_READ;
            else { fprintf(stderr, "trellis serve: --load: auto, mmap or read\n"); goto out; }
        } else if (!strcmp(a, "--log-format")) {
            if (!strcmp(v, "json")) c.log_json = true;
            else if (!strcmp(v, "text")) c.log_json = false;
            else { fprintf(stderr, "trellis serve: --log-format: text or json\n"); goto out; }
        }
        else if (!strcmp(a, "--max-body")) { NUM(1024, 1LL << 32); c.http.max_body = (size_t)x; }
        else if (!strcmp(a, "--max-header")) { NUM(256, 1 << 20); c.http.max_header = (size_t)x; }
        else if (!strcmp(a, "--max-url")) { NUM(64, 1 << 20); c.http.max_url = (size_t)x; }
        else if (!strcmp(a, "--max-connections")) { NUM(1, 1 << 20); c.http.max_connections = (int32_t)x; }
        else if (!strcmp(a, "--read-timeout")) { NUM(1, 86400); c.http.read_timeout_ms = (uint32_t)x * 1000; }
        else if (!strcmp(a, "--idle-timeout")) { NUM(1, 86400); c.http.idle_timeout_ms = (uint32_t)x * 1000; }
        else if (!strcmp(a, "--write-timeout")) { NUM(1, 86400); c.http.write_timeout_ms = (uint32_t)x * 1000; }
        else if (!strcmp(a, "--max-n")) { NUM(1, TRELLIS_MAX_N); c.limits.max_n = (int32_t)x; }
        else if (!strcmp(a, "--max-prompts")) { NUM(1, 4096); c.limits.max_prompts = (int32_t)x; }
        else if (!strcmp(a, "--max-messages")) { NUM(1, 1 << 20); c.limits.max_messages = (int32_t)x; }
        else if (!strcmp(a, "--max-tokens-limit")) { NUM(1, 1 << 24); c.limits.max_tokens = (int32_t)x; }
        else if (!strcmp(a, "--stuck-timeout")) { NUM(1, 86400); c.stuck_after_s = (uint32_t)x; }
        else if (!strcmp(a, "--shutdown-timeout")) { NUM(0, 86400); c.shutdown_timeout_s = (uint32_t)x; }
        else if (!strcmp(a, "--port-file")) c.port_file = v;
        else {
            fprintf(stderr, "trellis serve: unknown option %s\n\n", a);
            usage(stderr);
            goto out;
        }
#undef NUM
    }
    return tr_srv_run(&c); /* frees c.api_key */
out:
    free(c.api_key);
    return rc;
}
