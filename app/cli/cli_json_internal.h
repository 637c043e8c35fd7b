/* cli_json_internal.h — every JSON document the `trellis` commands print, written
 * from plain data so that a fuzz target (tests/fuzz/fuzz_cli_json.c) can
 * drive each writer with arbitrary bytes and no model.
 *
 * The promise: for ANY input bytes each writer returns valid JSON (RFC
 * 8259; strings are valid UTF-8, NUL bytes escaped as \u0000), never NULL
 * except when out of memory. Token pieces are the raw bytes of a token,
 * which for byte-level BPE are often not valid UTF-8 on their own (one
 * token may hold half of a Thai or CJK character, or of an emoji): a piece
 * is written as a JSON string when its bytes are valid UTF-8 and as an
 * array of byte values (0..255) otherwise, as llama.cpp's server does in
 * /tokenize with pieces. Text that should be valid UTF-8 (a completion)
 * is always a string: a byte that begins no valid character becomes
 * U+FFFD (the engine promises valid UTF-8, so this never happens in
 * practice; the writer does not rely on it).
 *
 * Numbers that are not finite (a log-prob of -inf) are written as null.
 *
 * Layering: applications (CLI). Pure functions, thread-safe. Every
 * returned string is malloc'd: free() it.
 */
#ifndef TR_CLI_JSON_H
#define TR_CLI_JSON_H

#include <stddef.h>
#include <stdint.h>

#include "trellis.h"

/* The bytes of token `id` (borrowed; NULL for an unknown id, written as
 * null). trellis_token_text has this shape with ctx = the engine. */
typedef const char *(*cli_piece_fn)(const void *ctx, int32_t id, size_t *len);

/* `trellis tokenize --json`:
 *   {"ids": [int...], "pieces": [string | [byte...]...], "count": int} */
char *tr_cli_json_tokenize(const int32_t *ids, size_t n, cli_piece_fn piece,
                           const void *ctx);

/* One sample of `trellis generate --json` (see cmd_generate.c for the
 * document's shape, which --help also gives). Everything is borrowed. */
typedef struct cli_sample_json {
    int32_t index;                   /* 0..n_samples-1 */
    int32_t n_samples;
    const char *text;
    size_t text_len;
    const int32_t *tokens;
    int32_t n_tokens;
    const trellis_logprob *logprobs; /* [n_tokens], or NULL: not asked */
    const char *finish;              /* "stop", "length", "error", ... */
    const char *stop;                /* the stop string that ended it, or NULL */
    int32_t stop_token;              /* the EOS / stop id that ended it, or -1 */
    const char *error;               /* finish "error": why; else NULL */
    trellis_metrics metrics;
    double load_ms;
    int32_t threads;
    const char *model_load;          /* "mmap" or "read" */
    const char *kv_type_k, *kv_type_v; /* KV cache types in force */
    const char *constraint;          /* kind ("regex", "choice", ...) or NULL */
    double constraint_ms;            /* compiling it (0: cached or none) */
} cli_sample_json;

char *tr_cli_json_sample(const cli_sample_json *s, cli_piece_fn piece, const void *ctx);

#endif
