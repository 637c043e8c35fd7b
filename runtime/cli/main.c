/* main.c — `trellis` entry point: dispatches to the subcommands. Only
 * main() decides to exit; every command returns its exit status. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "frontend/dsl.h"
#include "runtime/cli/cli.h"
#include "runtime/cli/cmd_bench.h"
#include "runtime/server/server.h"

static void usage(void) {
    fprintf(stderr,
            "usage: trellis COMMAND [options]\n\n"
            "commands:\n"
            "  serve      the OpenAI-compatible HTTP server\n"
            "  generate   generate text from a prompt (CPU)\n"
            "  info       describe a GGUF model\n"
            "  tokenize   show the token ids of a text\n"
            "  run        run a prompt program (frontend/README.md)\n"
            "  bench      benchmarks (`trellis bench serve`: the engine under load;\n"
            "             `trellis bench grammar`: constrained decoding)\n\n"
            "`trellis COMMAND --help` lists a command's options.\n"
            "-m MODEL defaults to the model scripts/setup.sh caches.\n");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage();
        return 2;
    }
    const char *cmd = argv[1];
    if (getenv("TRELLIS_LOG")) {
        const char *lv = getenv("TRELLIS_LOG");
        tr_log_set_level(strcmp(lv, "debug") == 0  ? TR_LOG_DEBUG
                         : strcmp(lv, "info") == 0 ? TR_LOG_INFO
                                                   : TR_LOG_WARN);
    }
    if (strcmp(cmd, "serve") == 0) return tr_serve_main(argc - 2, argv + 2);
    if (strcmp(cmd, "generate") == 0) return cmd_generate(argc - 2, argv + 2);
    if (strcmp(cmd, "info") == 0) return cmd_info(argc - 2, argv + 2);
    if (strcmp(cmd, "tokenize") == 0) return cmd_tokenize(argc - 2, argv + 2);
    if (strcmp(cmd, "run") == 0) return tr_dsl_cmd_run(argc - 2, argv + 2);
    if (strcmp(cmd, "bench") == 0) {
        if (argc >= 3 && strcmp(argv[2], "grammar") == 0)
            return cmd_bench_grammar(argc - 2, argv + 2);
        return cmd_bench(argc - 2, argv + 2);
    }
    if (strcmp(cmd, "-h") == 0 || strcmp(cmd, "--help") == 0 ||
        strcmp(cmd, "help") == 0) {
        usage();
        return 0;
    }
    fprintf(stderr, "trellis: unknown command '%s'\n\n", cmd);
    usage();
    return 2;
}
