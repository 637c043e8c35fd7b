/* args.h — the CLI's flag parser: a table of flags per subcommand, each
 * with a value kind and a destination. Unknown flags, missing values and
 * malformed numbers are errors naming the flag (never silently ignored).
 * Layering: CLI only. Single-threaded. */
#ifndef TR_CLI_ARGS_H
#define TR_CLI_ARGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum cli_kind {
    CLI_FLAG,   /* bool, no value */
    CLI_STR,    /* const char * */
    CLI_INT,    /* int64_t, decimal */
    CLI_FLOAT,  /* double */
    CLI_STRS,   /* repeated string: appended to a cli_strs */
} cli_kind;

typedef struct cli_strs {
    const char *items[64];
    int n;
} cli_strs;

typedef struct cli_opt {
    const char *name;  /* "--temp" */
    const char *alias; /* "-t" or NULL */
    cli_kind kind;
    void *dest;
    double min, max;   /* numeric bounds, inclusive (ignored when min > max) */
    const char *help;
} cli_opt;

/* Parses argv[0..argc) against opts. On error prints "trellis CMD: ..." to
 * stderr and returns false. "-h"/"--help" prints usage and sets *help. */
bool cli_parse(const char *cmd, const char *usage, const cli_opt *opts,
               size_t n_opts, int argc, char **argv, bool *help);
void cli_print_usage(const char *cmd, const char *usage, const cli_opt *opts,
                     size_t n_opts);

#endif
