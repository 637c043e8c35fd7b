/* cli.h — the `trellis` subcommands and what they share (model loading
 * with progress, error printing). Layering: top (CLI). Single-threaded
 * apart from the backend's workers. */
#ifndef TR_CLI_H
#define TR_CLI_H

#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"
#include "runtime/gguf/gguf.h"
#include "runtime/model/model.h"
#include "runtime/tokenizer/tokenizer.h"

int cmd_info(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_generate(int argc, char **argv);

/* Everything a command needs to run the model; cli_loaded_free releases it. */
typedef struct cli_loaded {
    gguf_file *file;
    tokenizer *tok;
    tr_backend *be;
    model *model;
    double load_ms;
} cli_loaded;

/* Opens path (NULL: the default model) as `load` says, builds the
 * tokenizer and, when with_model, the CPU backend (threads) and the model.
 * Prints a clear error (what, where, why) to stderr and returns false on
 * failure, having freed what it made. Shows progress on stderr when it is a
 * terminal. */
bool cli_load(const char *cmd, const char *path, gguf_load load, bool with_model,
              int threads, int32_t max_batch, cli_loaded *out);

/* --load's value (NULL: auto) into *out; false with an error on stderr
 * naming the flag and the modes for anything else. */
bool cli_parse_load(const char *cmd, const char *value, gguf_load *out);
void cli_loaded_free(cli_loaded *l);

/* "trellis CMD: what: why (at byte N)" from a status and its diag. */
void cli_report(const char *cmd, const char *what, tr_status s,
                const tr_diag *d);


#endif
