/* args.h — the flag parser of every `trellis` command: a command is a
 * table of flags (cli_cmd), each with a value kind, a destination, its
 * bounds and the default --help shows; a command that starts an engine
 * adds the one table of engine flags (engine_flags.h).
 *
 * Every mistake is an error that names the flag as the user typed it and
 * says why, in one line on stderr, before anything is loaded:
 *   trellis generate: --top-p: must be in (0, 1], got 0
 *   trellis serve: --threads: must be between 0 and 512, got 1024
 *   trellis generate: -n: expects an integer, got 'ten'
 *   trellis generate: --load: unknown value 'fast' (auto, mmap or read)
 * (never silently ignored, never clamped). `--flag=value` and
 * `--flag value` both work; -h/--help prints the usage on stdout.
 *
 * Layering: applications (app/common, under every command). Single-
 * threaded; no state.
 */
#ifndef TR_CLI_ARGS_H
#define TR_CLI_ARGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum cli_kind {
    CLI_FLAG,    /* bool, no value */
    CLI_STR,     /* const char * (borrowed from argv) */
    CLI_INT,     /* int64_t, decimal, within [min, max] */
    CLI_INT32,   /* int32_t, decimal, within [min, max] (inside int32_t) */
    CLI_FLOAT,   /* double, finite, within [min, max] */
    CLI_STRS,    /* repeatable string: appended to a cli_strs */
    CLI_ENUM,    /* int: the index of the value in `choices` */
    CLI_SECTION, /* no flag: --help prints `name` as a heading here */
} cli_kind;

#define CLI_STRS_MAX 64

/* Several flags may append to one list; flags[i] says which gave items[i]
 * (its name as the table spells it). */
typedef struct cli_strs {
    const char *items[CLI_STRS_MAX];
    const char *flags[CLI_STRS_MAX];
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
    bool *given;       /* set to true when the flag is given (may be NULL) */
    void *also;        /* CLI_ENUM: a second destination the value goes to
                          too (--kv-type sets the K and the V type); NULL */
} cli_opt;

/* A command: its name ("generate", "bench serve": errors begin "trellis
 * NAME: "), its usage line (what follows "usage: trellis NAME "), an
 * optional paragraph under it, its own flags, the engine flags when it
 * starts an engine (engine_flags.h fills them), where its operands go
 * (arguments that are not flags; NULL: it takes none) and an optional
 * text --help prints after the flags. Everything is borrowed. */
typedef struct cli_cmd {
    const char *name, *usage, *about;
    const cli_opt *opts;
    size_t n_opts;
    const cli_opt *engine;
    size_t n_engine;
    cli_strs *operands;
    const char *epilog;
    /* called after a parse without errors (NULL: none): settles flags that
     * depend on each other; false after printing "trellis NAME: why" */
    bool (*finish)(void *ctx, const char *cmd);
    void *finish_ctx;
} cli_cmd;

/* Parses argv[0..argc) against c's flags. On error prints "trellis NAME:
 * FLAG: why" to stderr and returns false. "-h"/"--help" prints the usage
 * to stdout and sets *help (the caller then returns 0). Destinations of
 * flags not given are left as they are (their defaults). Then c->finish,
 * when set. */
bool tr_cli_parse(const cli_cmd *c, int argc, char **argv, bool *help);

/* "usage: trellis NAME USAGE", the paragraph, one line per flag with its
 * default (the command's, then the engine's), the epilog; on stdout. */
void tr_cli_print_usage(const cli_cmd *c);

#endif
