/* gen_internal.h — the parts of `trellis generate` (cmd_generate.c: flags, checks,
 * the engine and the request; gen_constraint.c: --regex, --choice and the
 * grammar flags; gen_output.c: draining the engine's events and printing
 * the samples).
 *
 * `generate` is a client of include/trellis.h like samples/embed.c: it
 * starts an engine, submits ONE request (n samples) and drains its events;
 * prompt templating, tokenizing, sampling, constraints, jump-forward, stop
 * strings and detokenizing are the engine's.
 *
 * Layering: applications (CLI). Single-threaded.
 */
#ifndef TR_CLI_GEN_H
#define TR_CLI_GEN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "app/common/args.h"
#include "app/common/engine_flags.h"
#include "trellis.h"

typedef struct gen_opts {
    const char *model, *prompt, *file, *system;
    const char *regex, *json_schema, *grammar;
    cli_strs choices, stops, stop_regexes;
    bool chat, json, ignore_eos, special, json_object, no_jump_forward;
    int schema_mode; /* -1 unset, 0 strict, 1 lenient */
    int whitespace;  /* -1 unset, else TRELLIS_WS_* */
    int json_numbers; /* -1 unset, else TRELLIS_JSON_NUMBERS_* */
    int property_order; /* -1 unset, else TRELLIS_PROPERTY_ORDER_* */
    int end_span;    /* TRELLIS_END_SPAN_* */
    int64_t n_predict, seed, top_k, batch, logprobs, n_samples, repeat_last_n;
    double temp, top_p, min_p, repeat_penalty, presence, frequency;
    tr_engine_flags engine; /* the engine flags (device, threads, ctx, ...) */
} gen_opts;

/* ---- constraints (gen_constraint.c) ---- */

typedef struct gen_constraint {
    const char *kind;         /* "regex", "choice", "json_schema",
                                 "json_object", "grammar"; NULL: none */
    const char *flag;         /* the flag that asked for it */
    char *text;               /* the schema or grammar text (owned) */
    size_t text_len;
    const char *regex;        /* for trellis_request.regex, or NULL */
    trellis_grammar *grammar; /* for trellis_request.grammar, or NULL */
    double compile_ms;
} gen_constraint;

/* Before the model loads: checks that at most one constraint flag is
 * given and that the grammar options go with one, reads the schema or
 * grammar file. Returns 0, or the exit status after printing "trellis
 * generate: FLAG: why". */
int tr_cli_gen_constraint_prepare(const gen_opts *o, gen_constraint *c);

/* Compiles the prepared constraint against e (a grammar handle), or
 * leaves the regex for the request to carry. Returns 0, or the exit
 * status after printing the error (2: a bad constraint, 1: otherwise). */
int tr_cli_gen_constraint_compile(const gen_opts *o, trellis_engine *e, gen_constraint *c);

void tr_cli_gen_constraint_free(gen_constraint *c);

/* ---- output (gen_output.c) ---- */

/* What every sample's report repeats. */
typedef struct gen_facts {
    double load_ms;
    int32_t threads;
    const char *model_load;   /* "mmap" or "read" */
    const char *kv_type_k, *kv_type_v; /* "f16", "q8", "q4" */
    const char *const *stops; /* the request's stop strings */
    int32_t n_stops;
    const char *const *stop_regexes; /* and its stop patterns */
    int32_t n_stop_regexes;
    const gen_constraint *constraint;
} gen_facts;

/* Waits for the n samples of request `id` and prints them one after
 * another: streamed text (sample 0 as it comes, the others from what
 * arrived meanwhile) with a summary line per sample on stderr, or one
 * JSON object per sample and line (--json). Returns 0, or 1 if a sample
 * ended with an error (printed) or out of memory. */
int tr_cli_gen_output_run(trellis_engine *e, const gen_opts *o, const gen_facts *f, int32_t n);

#endif
