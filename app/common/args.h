/* args.h — the flag parser of the `trellis` commands: a table of flags per
 * command, each with a value kind, a destination, its bounds and the
 * default --help shows.
 *
 * Every mistake is an error that names the flag as the user typed it and
 * says why, in one line on stderr, before anything is loaded:
 *   trellis generate: --top-p: must be in (0, 1], got 0
 *   trellis generate: -n: expects an integer, got 'ten'
 *   trellis generate: --load: unknown value 'fast' (auto, mmap or read)
 * (never silently ignored, never clamped). `--flag=value` and
 * `--flag value` both work; -h/--help prints the usage on stdout.
 *
 * Layering: applications (CLI, bench). Single-threaded; no state.
 */
#ifndef TR_CLI_ARGS_H
#define TR_CLI_ARGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum cli_kind {
    CLI_FLAG,   /* bool, no value */
    CLI_STR,    /* const char * (borrowed from argv) */
    CLI_INT,    /* int64_t, decimal, within [min, max] */
    CLI_FLOAT,  /* double, finite, within [min, max] */
    CLI_STRS,   /* repeatable string: appended to a cli_strs */
    CLI_ENUM,   /* int: the index of the value in `choices` */
} cli_kind;

#define CLI_STRS_MAX 64

typedef struct cli_strs {
    const char *items[CLI_STRS_MAX];
    int n;
} cli_strs;

/* The first seven members are positional in every table; the rest are
 * optional (zero when left out). */
typedef struct cli_opt {
    const char *name;  /* "--temp" */
    const char *alias; /* "-t" or NULL */
    cli_kind kind;
    void *dest;
    double min, max;   /* numeric bounds, inclusive (ignored when min > max) */
    const char *help;
    const char *def;   /* the default as --help shows it; NULL: none shown */
    const char *range; /* CLI_INT/CLI_FLOAT: the bounds as errors and --help
                          state them ("(0, 1]"); NULL: "min..max" */
    const char *choices; /* CLI_ENUM: the values, '|'-separated ("a|b|c") */
    const char *meta;  /* the value's name in --help (NULL: N, X or TEXT) */
} cli_opt;

/* Parses argv[0..argc) against opts. On error prints "trellis CMD: FLAG:
 * why" to stderr and returns false. "-h"/"--help" prints the usage to
 * stdout and sets *help (the caller then returns 0). */
bool cli_parse(const char *cmd, const char *usage, const cli_opt *opts,
               size_t n_opts, int argc, char **argv, bool *help);

/* "usage: trellis CMD USAGE" and one line per flag with its default. */
void cli_print_usage(const char *cmd, const char *usage, const cli_opt *opts,
                     size_t n_opts);

#endif
