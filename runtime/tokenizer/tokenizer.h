/* tokenizer.h — text <-> token ids for the model's vocabulary.
 *
 * Layering: runtime; built from a gguf_file (runtime/gguf) and PCRE2.
 * Kinds:
 *   gpt2   GPT-2-style byte-level BPE, with the pre-tokenizer split of
 *          tokenizer.ggml.pre done by PCRE2 (UTF + UCP, JIT-compiled once
 *          at creation), merges by rank (tokenizer.ggml.merges);
 *   llama  SentencePiece-style (Llama 2, Gemma, ...): no pre-tokenizer;
 *          spaces are "▁" in token texts; adjacent pieces merge by token
 *          score (tokenizer.ggml.scores, highest first); a character that
 *          is no token falls back to byte tokens "<0xNN>";
 *          tokenizer.ggml.add_space_prefix (default true) puts a space in
 *          front of text at the start and after each special token.
 *          Gemma 3: 262,144 tokens, add_space_prefix false, runs of 2..31
 *          spaces and of 1..31 newlines are user-defined tokens.
 *
 * Pre-tokenizers (tokenizer.ggml.pre; the regexes are llama.cpp's):
 *   smollm (also starcoder, refact, command-r, codeshell, exaone, ...):
 *     every \p{N} alone, then the GPT-2 regex;
 *   gpt2 / gpt-2 (also phi-2, mpt, olmo, jais, ...): the GPT-2 regex;
 *   llama3 / llama-v3 / llama-bpe (also falcon3, pixtral, ...): the llama3
 *     regex, and a pre-token that is itself a token is kept whole;
 *   qwen2 (also stablelm2, deepseek-r1-qwen, ...): the qwen2 regex;
 *   default (and a missing key): llama.cpp's default four-regex split.
 * Any other name is TR_ERR_UNSUPPORTED. Ids equal llama.cpp's on the
 * reference set (tests/data/tokenizer), except next to characters assigned
 * after PCRE2's Unicode version (14.0 for PCRE2 10.42).
 *
 * A tokenizer is immutable after creation and owns copies of everything it
 * read (the gguf_file may be closed): any number of threads may encode and
 * decode with it at once (PCRE2 match data is per call). Incremental
 * decoding state lives in a caller-owned tokenizer_stream.
 */
#ifndef TR_TOKENIZER_H
#define TR_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "base/status.h"
#include "runtime/gguf/gguf.h"

typedef struct tokenizer tokenizer;

/* Token types, as tokenizer.ggml.token_type stores them (tr_tokenizer_type
 * reports them after llama.cpp's fix-up: a token whose text is a known
 * end-of-turn or FIM marker, e.g. "<|im_end|>", is made CONTROL). */
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
tr_status tr_tokenizer_from_gguf(const gguf_file *f, tokenizer **out,
                              tr_diag *diag);
/* Same, with the pre-tokenizer named by pre instead of tokenizer.ggml.pre
 * (NULL: from the file). For files with a wrong or missing pre name, and for
 * tests that run one vocabulary under several pre-tokenizers. */
tr_status tr_tokenizer_from_gguf_pre(const gguf_file *f, const char *pre,
                                  tokenizer **out, tr_diag *diag);
void tr_tokenizer_free(tokenizer *t);

int32_t tr_tokenizer_n_vocab(const tokenizer *t);
int32_t tr_tokenizer_bos(const tokenizer *t);  /* -1 if none */
int32_t tr_tokenizer_eos(const tokenizer *t);  /* -1 if none */
/* Whether the model expects BOS prepended (tokenizer.ggml.add_bos_token). */
bool tr_tokenizer_add_bos(const tokenizer *t);
/* true for tokens that end generation, as llama.cpp decides: EOS, the
 * EOT/EOM and FIM pad/repo/separator ids the file names, and tokens whose
 * text is a known end marker (<|im_end|>, <|endoftext|>, <|eot_id|>,
 * <end_of_turn>, <|end|>, <|eom_id|>, </s>, the FIM repo/pad/sep texts,
 * ...). SmolLM2: 0 <|endoftext|>, 2 <|im_end|>, 4 <reponame>. */
bool tr_tokenizer_is_eog(const tokenizer *t, int32_t id);
/* Control and user-defined tokens (control tokens never come out of plain
 * text unless special parsing is on; user-defined ones always may). */
bool tr_tokenizer_is_special(const tokenizer *t, int32_t id);
tokenizer_token_type tr_tokenizer_type(const tokenizer *t, int32_t id);
/* Id of a token whose text is exactly s (e.g. "<|im_end|>"), or -1. */
int32_t tr_tokenizer_find(const tokenizer *t, const char *s);
/* Name of the pre-tokenizer in use ("smollm", "gpt2", "llama3", ...), as
 * the file (or tr_tokenizer_from_gguf_pre) spelled it; for llama (SPM)
 * vocabularies, which have none, the file's name, unused. */
const char *tr_tokenizer_pre_name(const tokenizer *t);
/* "gpt2: byte-level BPE" or "llama: SentencePiece-style". */
const char *tr_tokenizer_kind_name(const tokenizer *t);
/* true for llama (SentencePiece-style) vocabularies. */
bool tr_tokenizer_is_spm(const tokenizer *t);
/* llama (SPM) vocabularies: whether a space is put in front of the text
 * (see above); false for gpt2 ones. */
bool tr_tokenizer_add_space_prefix(const tokenizer *t);
/* Length of the longest tr_tokenizer_token_bytes (81 for SmolLM2). */
size_t tr_tokenizer_max_token_len(const tokenizer *t);

/* The raw bytes a token stands for (byte-level BPE symbols mapped back to
 * bytes; SPM: "▁" as a space, "<0xNN>" as byte NN; special tokens: their
 * text). Borrowed, valid while t lives.
 * NULL (and *len = 0) for ids outside the vocabulary. */
const uint8_t *tr_tokenizer_token_bytes(const tokenizer *t, int32_t id,
                                     size_t *len);

/* Encodes text[0..len) (any bytes: invalid UTF-8 is encoded byte-wise, so
 * decode(encode(x)) == x; llama.cpp would turn such bytes into U+FFFD
 * instead). Exception: a byte whose byte-level symbol the vocabulary lacks
 * is dropped, as llama.cpp drops it (SmolLM2 lacks 21: 0x04, 0x06, 0x13,
 * 0x14, 0x16, 0x1D, 0xC0, 0xC1, 0xF1, 0xF2, 0xF5..0xFF). With parse_special,
 * control token texts in the input become those tokens (matched first,
 * longest first, as llama.cpp does); without, they are plain text.
 * User-defined tokens are split out in both modes (llama.cpp and HF
 * tokenizers do the same). BOS is NOT added here (see tr_tokenizer_add_bos).
 * *ids is a malloc'd array (never NULL on success, even for 0 ids) the
 * caller frees; on error nothing is allocated. Thread-safe. */
tr_status tr_tokenizer_encode(const tokenizer *t, const char *text, size_t len,
                           bool parse_special, int32_t **ids, size_t *n_ids);

/* Concatenated token bytes of ids into a malloc'd NUL-terminated buffer
 * (*len excludes the NUL; the bytes may be any, invalid UTF-8 included).
 * With add_space_prefix, a space that starts the first token's bytes is
 * dropped (the encoder added it; the stream below keeps it: it renders
 * continuations).
 * Control (and unknown) tokens are rendered as their text when
 * render_special, else skipped; user-defined tokens always render; unused
 * and undefined ones never (as in llama.cpp). TR_ERR_INVALID_ARG for an id
 * outside the vocabulary (nothing allocated). */
tr_status tr_tokenizer_decode(const tokenizer *t, const int32_t *ids,
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

void tr_tokenizer_stream_init(tokenizer_stream *s, bool render_special);
/* Writes the newly complete text to out (capacity out_cap). At most
 * 3 * (token length + 1) bytes are written: complete characters are copied,
 * and each invalid byte sequence (a byte-level token may hold a lone
 * continuation byte) becomes a 3-byte U+FFFD, so
 * 3 * (tr_tokenizer_max_token_len(t) + 1) is always enough. TR_ERR_FULL if
 * out_cap is too small for this push (state unchanged, nothing written).
 * *out_len receives the count of bytes written. */
tr_status tr_tokenizer_stream_push(tokenizer_stream *s, const tokenizer *t,
                                int32_t id, char *out, size_t out_cap,
                                size_t *out_len);
/* Flushes held bytes at end of generation (an incomplete character becomes
 * U+FFFD, 3 bytes; with out_cap < 3 nothing is written and the bytes stay
 * held). Returns the bytes written. */
size_t tr_tokenizer_stream_flush(tokenizer_stream *s, char *out, size_t out_cap);

/* Validates the internal invariants (tables, merges, byte alphabet, special
 * list): TR_OK or TR_ERR_INTERNAL (logged). For tests. */
tr_status tr_tokenizer_check(const tokenizer *t);
/* One-paragraph summary (pre-tokenizer, sizes, special tokens) to fp. */
void tr_tokenizer_dump(const tokenizer *t, FILE *fp);

#endif
