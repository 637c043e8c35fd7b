/* serve_args.c — `trellis serve` flags to a tr_srv_config, through the
 * parser and the engine flags every command shares (app/common). Every
 * value is range-checked; a bad flag prints what is wrong (exit 2).
 * The API key may come from a file (--api-key-file: the operator's file,
 * read once at start-up; trailing newlines dropped) so that it does not
 * show in the process list. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/common/args.h"
#include "app/common/engine_flags.h"
#include "app/server/server_internal.h"
#include "base/util.h"

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

static const char k_about[] =
    "An OpenAI-compatible server (/v1/chat/completions, /v1/completions, /v1/models)\n"
    "and SGLang's native /generate. Structured output: response_format json_schema\n"
    "(JSON Schema) and json_object, regex, choices, ebnf (EBNF and llama.cpp GBNF).\n"
    "Reference: app/server/README.md.\n";

/* The flags into c (c->api_key owned); 0 to go on, else the exit status
 * (-1: --help, exit 0). */
static int parse(int argc, char **argv, tr_srv_config *c, tr_engine_flags *ef) {
    const char *key = NULL, *key_file = NULL;
    int log_format = 0;
    bool help = false;
    int64_t port = c->port, max_queue = c->max_queue, max_body = (int64_t)c->http.max_body,
            max_header = (int64_t)c->http.max_header, max_url = (int64_t)c->http.max_url,
            max_conn = c->http.max_connections, read_s = c->http.read_timeout_ms / 1000,
            idle_s = c->http.idle_timeout_ms / 1000, write_s = c->http.write_timeout_ms / 1000,
            max_n = c->limits.max_n, max_prompts = c->limits.max_prompts,
            max_messages = c->limits.max_messages, max_tokens = c->limits.max_tokens,
            stuck_s = c->stuck_after_s, shutdown_s = c->shutdown_timeout_s;
    const cli_opt opts[] = {
        {"--model", "-m", CLI_STR, &c->model_path, 1, 0, "GGUF model",
         "the cached default model", .meta = "PATH"},
        {"--host", NULL, CLI_STR, &c->host, 1, 0, "address to bind",
         "127.0.0.1: loopback only", .meta = "ADDR"},
        {"--port", NULL, CLI_INT, &port, 0, 65535, "port; 0 = any free port", "8080"},
        {"--api-key", NULL, CLI_STR, &key, 1, 0,
         "require Authorization: Bearer KEY (all but /health)", .meta = "KEY"},
        {"--api-key-file", NULL, CLI_STR, &key_file, 1, 0, "the same, the key read from file F",
         .meta = "F"},
        {"--served-model-name", NULL, CLI_STR, &c->served_model_name, 1, 0,
         "the model id clients use (1..200 bytes)", "the file name", .meta = "NAME"},
        {"--max-queue", NULL, CLI_INT, &max_queue, 0, 1 << 20,
         "requests waiting beyond --max-running before 429", "256"},
        {"--log-format", NULL, CLI_ENUM, &log_format, 1, 0, "log lines", "text",
         .choices = "text|json"},
        {"--log-prompts", NULL, CLI_FLAG, &c->log_prompts, 1, 0,
         "log request bodies (off: prompts never reach the log)", "off"},
        {"--log-requests", NULL, CLI_FLAG, &c->log_requests, 1, 0,
         "one log line per request (method and path)", "off"},
        {"--port-file", NULL, CLI_STR, &c->port_file, 1, 0, "write the bound port to F",
         .meta = "F"},
        {"--no-ui", NULL, CLI_FLAG, &c->no_ui, 1, 0,
         "no playground page at / (the API only)", "the page is served"},
        {"limits", NULL, CLI_SECTION},
        {"--max-body", NULL, CLI_INT, &max_body, 1024, 1LL << 32, "request body -> 413",
         "8388608", .meta = "BYTES"},
        {"--max-header", NULL, CLI_INT, &max_header, 256, 1 << 20, "request headers -> 431",
         "16384", .meta = "BYTES"},
        {"--max-url", NULL, CLI_INT, &max_url, 64, 1 << 20, "request target -> 414", "8192",
         .meta = "BYTES"},
        {"--max-connections", NULL, CLI_INT, &max_conn, 1, 1 << 20,
         "open connections -> 503", "1024"},
        {"--read-timeout", NULL, CLI_INT, &read_s, 1, 86400,
         "first byte to whole request -> 408", "30", .meta = "S"},
        {"--idle-timeout", NULL, CLI_INT, &idle_s, 1, 86400, "keep-alive idle time", "60",
         .meta = "S"},
        {"--write-timeout", NULL, CLI_INT, &write_s, 1, 86400,
         "a client that stops reading", "60", .meta = "S"},
        {"--max-n", NULL, CLI_INT, &max_n, 1, TRELLIS_MAX_N, "samples per prompt", "64"},
        {"--max-prompts", NULL, CLI_INT, &max_prompts, 1, 4096,
         "prompts per completions/generate request", "64"},
        {"--max-messages", NULL, CLI_INT, &max_messages, 1, 1 << 20, "chat messages", "1024"},
        {"--max-tokens-limit", NULL, CLI_INT, &max_tokens, 1, 1 << 24, "cap on max_tokens",
         "the context"},
        {"--stuck-timeout", NULL, CLI_INT, &stuck_s, 1, 86400,
         "/health 503 after S s without engine progress", "60", .meta = "S"},
        {"--shutdown-timeout", NULL, CLI_INT, &shutdown_s, 0, 86400,
         "SIGINT/SIGTERM grace for in-flight requests", "30", .meta = "S"},
    };
    cli_cmd cmd = {.name = "serve", .usage = "[options]", .about = k_about, .opts = opts,
                   .n_opts = sizeof opts / sizeof opts[0]};
    tr_engine_flags_attach(ef, &cmd);
    if (!tr_cli_parse(&cmd, argc, argv, &help)) return 2;
    if (help) return -1;
    if (key && key_file) {
        fprintf(stderr, "trellis serve: --api-key-file: not both --api-key and "
                        "--api-key-file\n");
        return 2;
    }
    if (key && !*key) {
        fprintf(stderr, "trellis serve: --api-key is empty\n");
        return 2;
    }
    if (key && !(c->api_key = strdup(key))) return 1;
    if (key_file && !(c->api_key = read_key_file(key_file))) return 2;
    const char *name = c->served_model_name;
    if (name && (!*name || strlen(name) > 200)) {
        fprintf(stderr, "trellis serve: --served-model-name: 1..200 bytes\n");
        return 2;
    }
    c->engine = ef->opts;
    c->port = (int)port;
    c->max_queue = (int32_t)max_queue;
    c->log_json = log_format == 1;
    c->http.max_body = (size_t)max_body;
    c->http.max_header = (size_t)max_header;
    c->http.max_url = (size_t)max_url;
    c->http.max_connections = (int32_t)max_conn;
    c->http.read_timeout_ms = (uint32_t)read_s * 1000;
    c->http.idle_timeout_ms = (uint32_t)idle_s * 1000;
    c->http.write_timeout_ms = (uint32_t)write_s * 1000;
    c->limits.max_n = (int32_t)max_n;
    c->limits.max_prompts = (int32_t)max_prompts;
    c->limits.max_messages = (int32_t)max_messages;
    c->limits.max_tokens = (int32_t)max_tokens;
    c->stuck_after_s = (uint32_t)stuck_s;
    c->shutdown_timeout_s = (uint32_t)shutdown_s;
    return 0;
}

int tr_serve_main(int argc, char **argv) {
    tr_srv_config c;
    tr_srv_config_default(&c);
    tr_engine_flags ef;
    tr_engine_flags_init(&ef);
    ef.opts = c.engine; /* the server's engine defaults are the engine's */
    int rc = parse(argc, argv, &c, &ef);
    if (rc) {
        free(c.api_key);
        return rc < 0 ? 0 : rc;
    }
    return tr_srv_run(&c); /* frees c.api_key */
}
