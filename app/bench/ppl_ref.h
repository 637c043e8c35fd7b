/* ppl_ref.h — the reference file of `trellis bench ppl`: each scored
 * position's top-1 token and its log-prob gap to the second, with the
 * settings they were made under, so that another run (another KV type,
 * backend, kernel set) can be compared with it position by position.
 *
 * Format (little-endian, a 64-byte header, then one 8-byte record per
 * scored position in window order):
 *   0  char[8] "TRPPLREF"      32 u64 hash of the text's token ids
 *   8  u32 version (1)         40 u64 scored positions
 *  12  u32 ctx                 48 f64 mean NLL of the run that made it
 *  16  u32 windows             56 u32 flags (bit 0: BOS replaced the first)
 *  20  u32 vocabulary size     60 u32 0 (reserved)
 *  24  u64 tokens in the text
 *   record: i32 top-1 id, f32 top-1 minus top-2 log-prob (nats; +inf
 *   when the model gave no second)
 * scored positions = windows * (ctx - ctx / 2): a file is complete or
 * refused.
 *
 * Layering: applications (app/bench); libc only. Every parse of outside
 * bytes goes through tr_ppl_ref_parse (fuzzed: tests/fuzz/fuzz_ppl_ref.c).
 */
#ifndef TR_APP_BENCH_PPL_REF_H
#define TR_APP_BENCH_PPL_REF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TR_PPL_REF_MAGIC "TRPPLREF"
#define TR_PPL_REF_VERSION 1u
#define TR_PPL_REF_HEADER 64
#define TR_PPL_REF_RECORD 8
#define TR_PPL_REF_FLAG_BOS 1u

typedef struct tr_ppl_ref_head {
    uint32_t ctx, windows, n_vocab, flags;
    uint64_t text_tokens, hash, n_scored;
    double mean_nll;
} tr_ppl_ref_head;

/* A parsed file: its header and its records (owned; tr_ppl_ref_free). */
typedef struct tr_ppl_ref {
    tr_ppl_ref_head h;
    int32_t *top1; /* [h.n_scored] */
    float *gap;    /* [h.n_scored] */
} tr_ppl_ref;

/* Parses buf[0..len). On success true and *out filled (the caller frees
 * it); else false, *out zeroed, and why[0..cap) says what is wrong in
 * words that follow "the file is": "not a reference file", "of format
 * version 3, this trellis reads 1", "damaged: 70 bytes for 1 positions of
 * 1 windows of 2 tokens"; or exactly "out of memory". */
bool tr_ppl_ref_parse(const unsigned char *buf, size_t len, tr_ppl_ref *out, char *why,
                      size_t cap);
void tr_ppl_ref_free(tr_ppl_ref *r);

/* The header's 64 bytes for h (version TR_PPL_REF_VERSION), and one
 * record's 8. */
void tr_ppl_ref_put_head(unsigned char out[TR_PPL_REF_HEADER], const tr_ppl_ref_head *h);
void tr_ppl_ref_put_record(unsigned char out[TR_PPL_REF_RECORD], int32_t top1, float gap);

#endif
