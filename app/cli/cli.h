/* cli.h — the `trellis` commands and what they share: finding the model,
 * reading text inputs, opening a model's vocabulary without its weights,
 * and printing errors.
 *
 * Layering: applications. The commands are clients of include/trellis.h;
 * `info` and `tokenize` also read the GGUF file and its tokenizer through
 * the public headers of gguf and tokenizer (no weights, no engine). Only
 * main() exits: every command returns its exit status (0 ok, 1 failure,
 * 2 bad usage). Single-threaded (the engine has its own threads).
 *
 * Errors are one line on stderr: "trellis CMD: what: why", where `what`
 * names the flag at fault when there is one ("--ctx: ...").
 */
#ifndef TR_CLI_H
#define TR_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "base/status.h"
#include "runtime/gguf/gguf.h"
#include "runtime/tokenizer/tokenizer.h"

int tr_cli_generate(int argc, char **argv);
int tr_cli_info(int argc, char **argv);
int tr_cli_tokenize(int argc, char **argv);
/* `trellis run` (cmd_run.c, over the DSL of frontend/dsl.h): exit status
 * 0, 1 (a run failed), 2 (usage or parse error). */
int tr_cli_run(int argc, char **argv);

/* The model file: path itself, or the default model's path written into
 * buf. NULL (with "trellis CMD: default model not found at ... (run
 * scripts/setup.sh, or pass -m MODEL)" on stderr) when the default model
 * is missing. A given path is returned as is: opening it reports errors. */
const char *tr_cli_model_path(const char *cmd, const char *path, char *buf, size_t cap);

/* Reads file `path` (named by flag `flag` in errors) into a NUL-terminated
 * heap buffer; false with "trellis CMD: FLAG: cannot read 'path': why". */
bool tr_cli_read_file(const char *cmd, const char *flag, const char *path, char **out,
                      size_t *len);

/* True when s[0..len) is valid UTF-8 without NUL bytes; otherwise prints
 * "trellis CMD: what: not valid UTF-8 (at byte N)" (or "contains a NUL
 * byte") and returns false. */
bool tr_cli_check_text(const char *cmd, const char *what, const char *s, size_t len);

/* A model's GGUF file (mapped) and tokenizer, without its weights: what
 * `info` and `tokenize` need. tr_cli_vocab_close frees both. */
typedef struct cli_vocab {
    gguf_file *file;
    tokenizer *tok;
} cli_vocab;

/* Opens path (see tr_cli_model_path); false with the error printed. */
bool tr_cli_vocab_open(const char *cmd, const char *path, cli_vocab *out);
void tr_cli_vocab_close(cli_vocab *v);

/* Writes bytes[0..n) on one line: valid UTF-8 as is; newline, tab,
 * backslash and quote escaped; other control characters and bytes that
 * begin no valid character (half of a CJK character, say) as \xNN. */
void tr_cli_print_bytes(FILE *f, const void *bytes, size_t n);

/* "trellis CMD: what: why (at byte N)" from a status and its diag. */
void tr_cli_report(const char *cmd, const char *what, tr_status s, const tr_diag *d);

#endif
