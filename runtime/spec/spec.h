/* spec.h — proposers for speculative decoding: cheap guesses of the next
 * tokens that the target model then verifies in one forward pass.
 *
 * Layering: runtime; depends on base only. Knows nothing of models or
 * the engine: a proposer sees a sequence's token ids and the outcome of
 * its proposals (runtime/engine/speculate.c feeds and verifies them).
 *
 * N-gram ("prompt lookup"). The sequence so far (prompt, then accepted
 * output) is indexed by its n-grams, n = min_n .. max_n. A proposal takes
 * the sequence's last n tokens, longest n first, finds an EARLIER place
 * they occurred, and proposes the tokens that followed there (as many as
 * the current draft length, fewer when the sequence ends first). The
 * place: once a proposal has had feedback, the copy has a cursor (where
 * the last proposal was copied from, plus the tokens kept of it), and the
 * first occurrence ending at or after the cursor, within
 * TR_NGRAM_CURSOR_SPAN tokens, wins, so a copy that leaves a word out or
 * makes an edit resumes where it was in the text, not at a later repeat
 * of the same words; otherwise the most recent occurrence. Where no
 * n-gram matches, a last token that occurred exactly once before
 * (unique_1gram) proposes what followed it. Outputs that copy their input
 * (extraction, rewriting, JSON that repeats values) are where this pays.
 *
 * Draft length adapts per sequence: it starts at options.start, grows by
 * `grow` after a proposal accepted whole (up to max_draft), and falls to
 * accepted + 1 after a rejection. A running acceptance rate (exponential,
 * weight 1/4 per proposal) below options.off_below after at least 8
 * proposals turns the proposer off for `backoff` calls (doubling each
 * time, up to 256; a proposal accepted whole resets it to the start).
 *
 * Memory: the token array plus one hash table per n (an int32 per slot,
 * load at most 1/2): ~ (4 + 16 * (max_n - min_n + 1)) bytes per token,
 * and with unique_1gram the 1-gram table with a count per slot (up to 16
 * more bytes per distinct token).
 *
 * Ownership: the caller owns a tr_ngram; not thread-safe (one sequence,
 * one thread).
 */
#ifndef TR_RUNTIME_SPEC_H
#define TR_RUNTIME_SPEC_H

#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"

#define TR_NGRAM_MAX_N 8
#define TR_NGRAM_MAX_DRAFT 32
#define TR_NGRAM_CURSOR_SPAN 1024

typedef struct tr_ngram_options {
    int32_t min_n, max_n; /* n-gram sizes matched; default 2 .. 4 */
    int32_t start;        /* first draft length; default 4 */
    int32_t max_draft;    /* default 8; at most TR_NGRAM_MAX_DRAFT */
    int32_t grow;         /* added after a whole acceptance; default 2 */
    float off_below;      /* acceptance rate that turns it off; default 0.2 */
    int32_t backoff;      /* calls it stays off the first time; default 16 */
    bool unique_1gram;    /* where no n-gram of min_n .. max_n matches: a
                             last token that occurred exactly once before
                             proposes what followed it; default true */
} tr_ngram_options;

typedef struct tr_ngram tr_ngram;

void tr_ngram_options_default(tr_ngram_options *o);

/* o NULL: defaults. TR_ERR_INVALID_ARG with diag for sizes out of range
 * (1 <= min_n <= max_n <= TR_NGRAM_MAX_N, 1 <= start <= max_draft <=
 * TR_NGRAM_MAX_DRAFT, grow >= 0, 0 <= off_below <= 1, backoff >= 1). */
tr_status tr_ngram_new(const tr_ngram_options *o, tr_ngram **out, tr_diag *diag);
void tr_ngram_free(tr_ngram *g); /* NULL ok */

/* Appends tokens to the sequence (the prompt, then each accepted token;
 * never a draft that is still unverified). TR_ERR_NOMEM leaves the
 * sequence as it was. */
tr_status tr_ngram_append(tr_ngram *g, const int32_t *tokens, int32_t n);

/* Cuts the sequence to its first len tokens (len <= its length). */
void tr_ngram_truncate(tr_ngram *g, int32_t len);

int32_t tr_ngram_length(const tr_ngram *g);

/* Writes a proposal of at most min(cap, the current draft length) tokens
 * to out and returns its length: 0 when nothing matches or the proposer
 * is off (each call while off counts down its backoff). */
int32_t tr_ngram_propose(tr_ngram *g, int32_t *out, int32_t cap);

/* The outcome of the last proposal: `accepted` of its `proposed` tokens
 * (0 <= accepted <= proposed) were verified. Adapts the draft length. */
void tr_ngram_feedback(tr_ngram *g, int32_t proposed, int32_t accepted);

/* The current draft length, and whether the proposer is off (tests,
 * metrics). */
int32_t tr_ngram_draft_length(const tr_ngram *g);
/* The running acceptance rate (kept / proposed, exponential; 1 before
 * any feedback): what the engine weighs against a batch's cost. */
float tr_ngram_acceptance(const tr_ngram *g);
int tr_ngram_is_off(const tr_ngram *g);

#endif
