/* main.c — the `trellis` program: a table of commands, and --version.
 * Only main() decides to exit; every command returns its exit status (0
 * ok, 1 failure, 2 bad usage). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/bench/bench.h"
#include "app/cli/cli.h"
#include "app/server/server.h"
#include "base/log.h"
#include "trellis.h"

/* One line per command; argv[0] of run is the first argument after the
 * command's name. */
static const struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *what;
} k_commands[] = {
    {"serve", tr_serve_main, "the OpenAI-compatible HTTP server"},
    {"generate", tr_cli_generate, "generate text from a prompt"},
    {"info", tr_cli_info, "describe a GGUF model"},
    {"tokenize", tr_cli_tokenize, "show the token ids of a text"},
    {"run", tr_cli_run, "run a prompt program (frontend/README.md)"},
    {"bench", tr_bench_main, "benchmarks: serve (the engine under load), grammar "
                              "(constrained decoding), maskbench (JSON Schema)"},
};

static void usage(FILE *f) {
    fprintf(f, "usage: trellis COMMAND [options]\n       trellis --version\n\ncommands:\n");
    for (size_t i = 0; i < sizeof k_commands / sizeof k_commands[0]; i++)
        fprintf(f, "  %-10s %s\n", k_commands[i].name, k_commands[i].what);
    fprintf(f, "\n`trellis COMMAND --help` lists a command's options and their defaults.\n"
               "-m MODEL defaults to the model scripts/setup.sh caches ($TRELLIS_MODEL,\n"
               "else $TRELLIS_CACHE, $XDG_CACHE_HOME or ~/.cache: trellis/models/).\n"
               "TRELLIS_LOG=info|debug prints the engine's log on stderr.\n");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *lv = getenv("TRELLIS_LOG");
    if (lv)
        tr_log_set_level(strcmp(lv, "debug") == 0  ? TR_LOG_DEBUG
                         : strcmp(lv, "info") == 0 ? TR_LOG_INFO
                                                   : TR_LOG_WARN);
    const char *cmd = argv[1];
    for (size_t i = 0; i < sizeof k_commands / sizeof k_commands[0]; i++)
        if (strcmp(cmd, k_commands[i].name) == 0) return k_commands[i].run(argc - 2, argv + 2);
    if (strcmp(cmd, "-h") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "help") == 0) {
        usage(stdout);
        return 0;
    }
    if (strcmp(cmd, "--version") == 0) {
        printf("trellis %s\n", trellis_version());
        return 0;
    }
    fprintf(stderr, "trellis: unknown command '%s'\n\n", cmd);
    usage(stderr);
    return 2;
}
