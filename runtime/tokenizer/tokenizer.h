/* tokenizer.h — text <-> token ids for the model's vocabulary.
 *
 * Layering: runtime; built from a gguf_file (runtime/gguf) and PCRE2.
 * Kinds: GPT-2-style byte-level BPE (tokenizer.ggml.model = "gpt2") with
 * the pre-tokenizer split of tokenizer.ggml.pre done by PCRE2 (JIT).
 * (SentencePiece-style "llama" vocabularies arrive with Gemma support.)
 *
 * A tokenizer is immutable after creation: any number of threads may encode
 * and decode with it at once (PCRE2 match data is per call). Incremental
 * decoding state lives in a caller-owned tokenizer_stream.
 */
#ifndef TR_TOKENIZER_H
#define TR_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../base/status.h"
#include "../gguf/gguf.h"

typedef struct tokenizer tokenizer;

/* Token types, as tokenizer.ggml.token_type stores them. */
typedef enum tokenizer_token_type {
    TOKENIZER_TYPE_UNDEFINED = 0,
    TOKENIZER_TYPE_NORMAL = 1,
    TOKENIZER_TYPE_UNKNOWN = 2,
    TOKENIZER_TYPE_CONTROL = 3,
    TOKENIZER_TYPE_USER_DEFINED = 4,
    TOKENIZER_TYPE_UNUSED = 5,
    TOKENIZER_TYPE_BYTE = 6,
} tokenizer_token_type;

/* Builds the tokenizer from the file's tokenizer.* metadata. Errors:
 * TR_ERR_NOT_FOUND (metadata missing), TR_ERR_UNSUPPORTED (tokenizer model
 * or pre-tokenizer type not known: the diag names it), TR_ERR_FORMAT
 * (inconsistent arrays, bad merges), TR_ERR_NOMEM. */
tr_status tokenizer_from_gguf(const gguf_file *f, tokenizer **out,
                              tr_diag *diag);
void tokenizer_free(tokenizer *t);

int32_t tokenizer_n_vocab(const tokenizer *t);
int32_t tokenizer_bos(const tokenizer *t);  /* -1 if none */
int32_t tokenizer_eos(const tokenizer *t);  /* -1 if none */
/* Whether the model expects BOS prepended (tokenizer.ggml.add_bos_token). */
bool tokenizer_add_bos(const tokenizer *t);
/* true for tokens that end generation: EOS, EOT, <|im_end|>,
 * <|endoftext|> and the like (control tokens marked end-of-generation). */
bool tokenizer_is_eog(const tokenizer *t, int32_t id);
/* Control and user-defined tokens (never produced from plain text unless
 * special parsing is on). */
bool tokenizer_is_special(const tokenizer *t, int32_t id);
tokenizer_token_type tokenizer_type(const tokenizer *t, int32_t id);
/* Id of a token whose text is exactly s (e.g. "<|im_end|>"), or -1. */
int32_t tokenizer_find(const tokenizer *t, const char *s);
/* Name of the pre-tokenizer in use ("smollm", "gpt2", "llama3", ...). */
const char *tokenizer_pre_name(const tokenizer *t);

/* The raw bytes a token stands for (byte-level BPE symbols mapped back to
 * bytes; special tokens: their text). Borrowed, valid while t lives.
 * NULL (and *len = 0) for ids outside the vocabulary. */
const uint8_t *tokenizer_token_bytes(const tokenizer *t, int32_t id,
                                     size_t *len);

/* Encodes text[0..len) (any bytes; invalid UTF-8 is encoded byte-wise, as
 * llama.cpp does). With parse_special, control/user-defined token texts in
 * the input become those tokens (matched first, longest first); without,
 * they are plain text. BOS is NOT added here (see tokenizer_add_bos).
 * *ids is a malloc'd array the caller frees; on error nothing is
 * allocated. */
tr_status tokenizer_encode(const tokenizer *t, const char *text, size_t len,
                           bool parse_special, int32_t **ids, size_t *n_ids);

/* Concatenated token bytes of ids into a malloc'd NUL-terminated buffer
 * (*len excludes the NUL). Special tokens are rendered as their text when
 * render_special, else skipped. */
tr_status tokenizer_decode(const tokenizer *t, const int32_t *ids,
                           size_t n_ids, bool render_special, char **out,
                           size_t *len);

/* Incremental detokenization: push one token, get the bytes that are now
 * complete. Never emits part of a UTF-8 character: bytes of an unfinished
 * character are held until it completes (or, if the sequence turns out
 * invalid, emitted as U+FFFD). Caller-owned storage. */
typedef struct tokenizer_stream {
    uint8_t pending[8];
    uint32_t n_pending;
    bool render_special;
} tokenizer_stream;

void tokenizer_stream_init(tokenizer_stream *s, bool render_special);
/* Appends the newly complete text to out (capacity out_cap; at most
 * token length + 8 bytes are ever written, so 256 + 16 is always enough for
 * the default vocabulary; TR_ERR_FULL if out_cap is too small, state
 * unchanged). *out_len receives the count of bytes written. */
tr_status tokenizer_stream_push(tokenizer_stream *s, const tokenizer *t,
                                int32_t id, char *out, size_t out_cap,
                                size_t *out_len);
/* Flushes held bytes at end of generation (an incomplete character becomes
 * U+FFFD). */
size_t tokenizer_stream_flush(tokenizer_stream *s, char *out, size_t out_cap);

#endif
