/* bench_grammar.c — `trellis bench grammar` as a standalone program built
 * against the core library alone: the same source,
 * runtime/cli/cmd_bench_grammar.c, compiled into this file (as
 * bench_serve.c does with cmd_bench.c), so the figures of the two are the
 * same code's. Not a test: never run by ctest.
 *
 *   bench_grammar [grammar] [options of `trellis bench grammar`]
 *
 * The data files default to this source tree's; e.g. only the compile and
 * mask micro-benchmark (what this program measured before the engine):
 *   bench_grammar --part micro --rounds 5
 */
#include <stdlib.h>
#include <string.h>

#include "runtime/cli/cmd_bench_grammar.c"

int main(int argc, char **argv) {
    /* accept both `bench_grammar grammar ...` and `bench_grammar ...` */
    int skip = argc >= 2 && strcmp(argv[1], "grammar") == 0 ? 2 : 1;
    /* the source tree's data files first; the user's options override */
    char **av = malloc((size_t)(argc + 5) * sizeof *av);
    if (!av) return 1;
    int n = 0;
    av[n++] = (char *)"grammar";
    av[n++] = (char *)"--patterns";
    av[n++] = (char *)TRELLIS_SOURCE_DIR "/tests/data/grammar/regexes.txt";
    av[n++] = (char *)"--model-regexes";
    av[n++] = (char *)TRELLIS_SOURCE_DIR "/tests/data/grammar/model_regexes.txt";
    for (int i = skip; i < argc; i++) av[n++] = argv[i];
    int rc = cmd_bench_grammar(n, av);
    free(av);
    return rc;
}
