/* tokenizer_internal.h — the tokenizer's data layout, shared by its .c files
 * and by tests/unit/test_tokenizer.c (differential tests of the two BPE
 * loops, pre-tokenizer splits). Not part of the public contract.
 *
 * Two kinds share the layout: byte-level BPE ("gpt2": merges, regexes,
 * byte-level alphabet) and SentencePiece-style ("llama": scores, "▁" for
 * spaces, byte-fallback tokens; no merges, no regexes, wmap empty). Fields
 * marked BPE or SPM are used by that kind only.
 *
 * Layout of one tokenizer (all immutable after tr_tokenizer_from_gguf):
 *
 *   id ──► text_off[id]..text_off[id+1]  in text_blob   raw GGUF token text
 *      ──► bytes_off[id]..bytes_off[id+1] in bytes_blob  bytes it stands for
 *      ──► type[id], flags[id] (EOG, special-list membership)
 *
 *   tmap:  open-addressed table of ids keyed by raw text (text -> id)
 *   wmap:  the same keyed by token bytes, holding only the "whole" normal
 *          tokens: those whose own bytes BPE-encode to exactly themselves.
 *          A pre-token equal to such bytes is that token without running
 *          BPE (exact, since BPE is a function of the bytes alone); in
 *          English text most pre-tokens are whole tokens.
 *   mmap:  open-addressed table keyed by the id pair (left << 32 | right),
 *          value = (merge rank, id of the merged token)
 *   byte_tok[b]: id of the one-symbol token of byte b (GPT-2 byte-level)
 *   specials: control / user-defined / unknown ids, longest text first
 *   re[0..n_re): the pre-tokenizer's PCRE2 regexes, applied in sequence
 *
 * Merges are stored by token id rather than by string: a merge "A B" is kept
 * only when A, B and AB are all in the vocabulary (true of every merge of
 * well-formed files, checked at creation), so BPE works on ids and each pair
 * lookup is one hash probe of a 64-bit key.
 */
#ifndef TR_TOKENIZER_INTERNAL_H
#define TR_TOKENIZER_INTERNAL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "runtime/tokenizer/tokenizer.h"

#define TOKENIZER_MAX_RE 4

typedef enum tokenizer_kind {
    TOKENIZER_KIND_BPE = 0, /* tokenizer.ggml.model = "gpt2" */
    TOKENIZER_KIND_SPM,     /* tokenizer.ggml.model = "llama" */
} tokenizer_kind;

/* flags[id] bits */
#define TOKENIZER_FLAG_EOG 0x01u

/* Slot of a string-keyed table: the id (-1 = empty) and 32 bits of the
 * key's hash, compared before touching the key's bytes (a probe that
 * misses then costs no cache miss in the blob). */
typedef struct tokenizer_slot {
    int32_t id;
    uint32_t tag;
} tokenizer_slot;

typedef struct tokenizer_strmap {
    tokenizer_slot *slot; /* [mask + 1] */
    uint64_t mask;
} tokenizer_strmap;

typedef struct tokenizer_merge {
    uint64_t key;    /* left << 32 | right; TOKENIZER_MERGE_EMPTY if free */
    uint32_t rank;   /* index in tokenizer.ggml.merges (lower merges first) */
    int32_t result;  /* id of the merged token */
} tokenizer_merge;

#define TOKENIZER_MERGE_EMPTY UINT64_MAX

/* A pre-tokenizer: the regexes llama.cpp applies for a tokenizer.ggml.pre
 * name, each splitting every piece the previous one produced. */
typedef struct tokenizer_pre_def {
    const char *kind;       /* canonical name: "smollm", "gpt2", ... */
    const char *const *regex; /* NULL-terminated */
    bool ignore_merges;     /* a piece that is itself a token is emitted whole */
    bool add_bos;           /* default when the file does not say */
} tokenizer_pre_def;

/* NULL if name is not known. */
const tokenizer_pre_def *tr_tokenizer_pre_lookup(const char *name);

struct tokenizer {
    tokenizer_kind kind;
    int32_t n_vocab;
    char *text_blob;
    size_t *text_off;    /* [n_vocab + 1] */
    uint8_t *bytes_blob;
    size_t *bytes_off;   /* [n_vocab + 1] */
    uint8_t *type;       /* [n_vocab] tokenizer_token_type */
    uint8_t *flags;      /* [n_vocab] TOKENIZER_FLAG_* */
    size_t max_token_len; /* longest bytes_off span */
    size_t max_text_len;  /* longest text_off span */
    float *score;         /* [n_vocab] SPM: merge priority (higher first) */
    bool add_space_prefix; /* SPM: "▁" before text that starts a fragment
                              at the start or after a special token */

    tokenizer_strmap tmap; /* raw text -> id, every token */
    tokenizer_strmap wmap; /* bytes -> id, whole normal tokens only */
    tokenizer_merge *mmap; /* [mmap_mask + 1] */
    uint64_t mmap_mask;
    uint32_t n_merges;   /* merges kept */
    uint32_t n_merges_skipped; /* merges naming tokens not in the vocabulary */

    int32_t byte_tok[256]; /* BPE: the byte's one-symbol token; SPM: its
                              "<0xNN>" token; -1 if the vocabulary lacks it */

    int32_t *specials;   /* [n_specials] sorted by text length desc, id asc */
    int32_t n_specials;
    uint32_t *special_lens; /* distinct lengths of special texts, desc */
    int32_t n_special_lens;
    uint8_t special_first[32]; /* bitset: first bytes of special texts */

    const tokenizer_pre_def *pre; /* BPE; NULL for SPM */
    char pre_name[64];
    pcre2_code *re[TOKENIZER_MAX_RE];
    bool re_jit[TOKENIZER_MAX_RE]; /* JIT-compiled: call pcre2_jit_match */
    int n_re;
    uint32_t re_ovec_pairs;

    int32_t bos, eos, unk;
    bool add_bos;
};

/* Growable id array used by the encoder. */
typedef struct tokenizer_ids {
    int32_t *v;
    size_t n, cap;
} tokenizer_ids;

tr_status tr_tokenizer_ids_push(tokenizer_ids *a, int32_t id);

/* Raw text -> id (-1 if absent). */
int32_t tr_tokenizer_text_find(const tokenizer *t, const char *s, size_t n);
/* Bytes -> id of the whole token with exactly those bytes, or -1. */
int32_t tr_tokenizer_whole_find(const tokenizer *t, const uint8_t *s, size_t n);

/* String-table primitives (keys live in blob[off[id]..off[id+1])). */
tr_status tr_tokenizer_strmap_init(tokenizer_strmap *m, uint64_t n_keys);
/* Inserts id; returns the id already holding an equal key, or -1. */
int32_t tr_tokenizer_strmap_insert(tokenizer_strmap *m, const char *blob,
                                const size_t *off, int32_t id);

/* Fills t->wmap (needs merges, byte_tok and token bytes). */
tr_status tr_tokenizer_build_whole(tokenizer *t);

/* Merge of the pair (a, b): its rank and result, or false. */
bool tr_tokenizer_merge_find(const tokenizer *t, int32_t a, int32_t b,
                          uint32_t *rank, int32_t *result);

/* BPE of one pre-token (raw bytes) appended to out. mode: 0 = automatic,
 * 1 = force the quadratic scan loop, 2 = force the priority-queue loop (the
 * two must agree; the unit test checks it). */
tr_status tr_tokenizer_bpe_word(const tokenizer *t, const uint8_t *s, size_t n,
                             int mode, tokenizer_ids *out);

/* Runs the pre-tokenizer over text (no special-token handling) and calls
 * fn for every piece, in order; the pieces tile the text. */
typedef tr_status (*tokenizer_piece_fn)(void *ud, const char *s, size_t n);
tr_status tr_tokenizer_pretokenize(const tokenizer *t, const char *text,
                                size_t len, tokenizer_piece_fn fn, void *ud);

/* SPM encoding of one raw fragment (tokenizer_spm.c): the caller's
 * scratch, reused across fragments, freed with _free. */
typedef struct tokenizer_spm_scratch {
    char *text; /* the escaped fragment */
    size_t text_cap;
    struct spm_sym *sym;
    size_t sym_cap;
    struct spm_cand *heap;
    size_t heap_n, heap_cap;
} tokenizer_spm_scratch;

/* Appends the ids of src[0..n) to out; prefix: put "▁" in front (see
 * add_space_prefix). */
tr_status tr_tokenizer_spm_encode(const tokenizer *t, tokenizer_spm_scratch *s,
                               const char *src, size_t n, bool prefix,
                               tokenizer_ids *out);
void tr_tokenizer_spm_scratch_free(tokenizer_spm_scratch *s);
/* Reads what SPM needs beyond the shared arrays: scores, byte tokens,
 * add_space_prefix (needs texts, types and tmap). */
tr_status tr_tokenizer_spm_load(tokenizer *t, const gguf_file *f, tr_diag *diag);

/* GPT-2 byte-level alphabet: the code point standing for byte b. */
uint32_t tr_tokenizer_byte_to_cp(uint8_t b);

#endif
