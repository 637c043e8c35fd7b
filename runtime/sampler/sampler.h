/* sampler.h — picks the next token from one row of logits.
 *
 * Layering: runtime; depends on base only. It knows nothing about
 * models, tokenizers or grammars: the grammar engine hands it a token mask
 * (a bitset), the engine hands it a row of float logits.
 *
 * Processing order (llama.cpp's order; every step is skipped when off):
 *
 *   1. mask      tokens whose bit is 0 get -inf (before everything else,
 *                so no later step can revive them; an all-zero mask is an
 *                error). Bits past vocab_size in the last word are ignored.
 *                (llama.cpp applies penalties first; -inf is absorbing
 *                under steps 2-3, so the result is the same.)
 *   2. penalties for each token t seen c > 0 times in the penalty window
 *                (the last penalty_last_n accepted tokens, or all of them
 *                when penalty_last_n == -1):
 *                  repetition (CTRL / llama.cpp style):
 *                    l = l > 0 ? l / repetition_penalty
 *                              : l * repetition_penalty
 *                  then frequency / presence (OpenAI style):
 *                    l = l - c * frequency_penalty - presence_penalty
 *   3. bias      l += bias for each logit_bias entry (duplicates add up;
 *                a bias of -INFINITY bans the token).
 *   4. sanitize  NaN -> -inf, +inf -> FLT_MAX. If no token is left with a
 *                finite logit, sampling fails (TR_ERR_INVALID_ARG).
 *      The logits after steps 1-4 are "the processed logits"; the logits
 *      buffer holds exactly them when tr_sampler_sample returns, and log-probs
 *      (below) refer to their softmax at temperature 1.
 *   5. greedy    temperature == 0: the argmax of the processed logits,
 *                ties broken by the lowest token id. Steps 6-9 are skipped
 *                (they all keep the argmax, so they could not change it).
 *   6. top_k     keep the top_k tokens with the highest logits (ties: lower
 *                id first); off when 0 or >= the number of finite logits.
 *   7. top_p     softmax (temperature 1) over the survivors; keep the
 *                smallest prefix of them, in (logit desc, id asc) order,
 *                whose probability sum reaches top_p (always >= 1 token).
 *                Sums are in double precision: the cut can differ from an
 *                exact-arithmetic cut only when a prefix sum lies within
 *                ~1e-12 (relative) of top_p.
 *   8. min_p     keep survivors with p >= min_p * p_max, computed as
 *                (double)l - (double)l_max >= log(min_p) (softmax ratios
 *                do not depend on renormalisation, so this is exact).
 *   9. sample    p_i proportional to exp((l_i - l_max) / temperature) over
 *                the survivors; one uniform double from the sampler's own
 *                xoshiro256** generator (seeded by splitmix64(seed)) picks
 *                by inverse CDF. Each non-greedy sample draws exactly one
 *                number; greedy samples draw none.
 *
 * exp() here is the sampler's own polynomial approximation (relative
 * error < 3e-7, exactly 0 below -87), used everywhere in the module so
 * that every path computes identical probabilities and the hot loops
 * vectorise (with AVX2 when the CPU has it; results are bit-identical
 * either way).
 *
 * Log-probs (OpenAI's `logprobs`): when lp_out is given, the chosen
 * token's log-probability and the n_logprobs most likely tokens (logit
 * desc, id asc; only tokens with a finite logit) are reported, all from
 * log_softmax of the processed logits at temperature 1 — i.e. after mask,
 * penalties and bias, before top_k/top_p/min_p/temperature. Like OpenAI,
 * this is the model's distribution after logit processing, not the
 * truncated distribution actually sampled from. Costs two extra passes
 * over the vocabulary (softmax denominator, top-N selection).
 *
 * Determinism: the same params (seed included), the same sequence of
 * logits, masks and accepted tokens give the same tokens, on any machine
 * whose float arithmetic is IEEE-754, whether or not it has AVX2 (no
 * dependence on threads or time; built without FMA contraction, which
 * gcc's ISO C mode guarantees and sampler_internal.h asks clang for).
 *
 * Threads: a sampler is used by one thread at a time; distinct samplers
 * share nothing (no global PRNG).
 *
 * Speed (measured in tests/bench/bench_sampler.c): no full sort anywhere;
 * the passes over the vocabulary are vector code (AVX2 when available).
 * top_k selects with a bounded heap in the same pass that finds the max
 * (blocks of 16 logits that cannot enter the heap are skipped with one
 * vector compare). top_p without top_k computes the softmax denominator
 * in one pass, then tries the top 256 / 4096 tokens (heap selection); only
 * flat rows with a bigger nucleus fall back to a histogram of
 * (l_max - l) in 1/16-nat buckets, where only the boundary bucket is
 * sorted. min_p is a threshold. Sampling walks block sums of 256 weights
 * before single tokens.
 */
#ifndef TR_SAMPLER_H
#define TR_SAMPLER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

#define SAMPLER_MAX_LOGPROBS 20

typedef struct sampler sampler;

typedef struct sampler_logit_bias {
    int32_t token; /* 0 <= token < vocab_size (checked by tr_sampler_new) */
    float bias;    /* finite, or -INFINITY to ban the token */
} sampler_logit_bias;

typedef struct sampler_params {
    float temperature;        /* >= 0; 0 = greedy (argmax) */
    int32_t top_k;            /* >= 0; 0 = off */
    float top_p;              /* (0, 1]; 1 = off */
    float min_p;              /* [0, 1]; 0 = off */
    float repetition_penalty; /* > 0; 1 = off */
    float presence_penalty;   /* finite; 0 = off */
    float frequency_penalty;  /* finite; 0 = off */
    int32_t penalty_last_n;   /* window for all three penalties: the last N
                                 accepted tokens; -1 = all; 0 = no penalties */
    uint64_t seed;
    const sampler_logit_bias *logit_bias; /* [n_logit_bias]; borrowed,
                                             copied by tr_sampler_new */
    int32_t n_logit_bias;
    int32_t n_logprobs;       /* 0..SAMPLER_MAX_LOGPROBS alternatives */
} sampler_params;

typedef struct sampler_token_logprob {
    int32_t token;
    float logprob;
} sampler_token_logprob;

typedef struct sampler_logprobs {
    int32_t token;   /* the sampled token */
    float logprob;   /* its log-probability (see header comment) */
    int32_t n_top;   /* min(n_logprobs, tokens with finite logits) */
    sampler_token_logprob top[SAMPLER_MAX_LOGPROBS]; /* most likely first */
} sampler_logprobs;

/* temperature 1, top_k 0, top_p 1, min_p 0, penalties off (repetition 1,
 * presence 0, frequency 0, penalty_last_n 64), seed 0, no bias, no
 * logprobs. */
sampler_params tr_sampler_params_default(void);

/* Checks every field that can be checked without the vocabulary size.
 * Returns TR_OK or TR_ERR_INVALID_ARG with diag->message naming the field
 * and the bad value (diag may be NULL). */
tr_status tr_sampler_params_validate(const sampler_params *p, tr_diag *diag);

/* Creates a sampler for a vocabulary of vocab_size (> 0) tokens. Validates
 * params (as above) and the logit_bias tokens against vocab_size; copies
 * everything it needs from params. Errors: TR_ERR_INVALID_ARG (diag says
 * why), TR_ERR_NOMEM. *out is untouched on failure. Free with
 * tr_sampler_free. Allocates O(vocab_size) scratch once (~8 bytes/token, plus
 * 8 bytes/token when penalties are on); sampling never allocates. */
tr_status tr_sampler_new(const sampler_params *params, int32_t vocab_size,
                      sampler **out, tr_diag *diag);

void tr_sampler_free(sampler *s);

/* Samples one token.
 *   logits    [vocab_size], modified in place: on success it holds the
 *             processed logits (steps 1-4 above); on failure its content
 *             is unspecified.
 *   mask      NULL (all allowed) or ceil(vocab_size / 64) words, bit i of
 *             word i / 64 set = token i allowed. Borrowed.
 *   token_out receives the token.
 *   lp_out    NULL or receives log-probs (see header comment).
 * Does NOT record the token for penalties: call tr_sampler_accept with the
 * token actually used (the engine may substitute a forced token).
 * Errors: TR_ERR_INVALID_ARG for NULL arguments, a mask that allows no
 * token ("mask allows no token"), or no allowed token with a finite
 * processed logit; tr_sampler_last_error() says which. The PRNG state and
 * history are unchanged on failure. */
tr_status tr_sampler_sample(sampler *s, float *logits, const uint64_t *mask,
                         int32_t *token_out, sampler_logprobs *lp_out);

/* Log-probs (as tr_sampler_sample reports them) of `token` and of the
 * n_logprobs most likely tokens under processed logits further
 * restricted by mask: what tr_sampler_sample would have reported for
 * this token had it been given the mask. For a caller that sampled
 * without a mask and then decided to keep a token the mask allows (the
 * engine's end-of-span rule). logits must hold the processed logits of
 * the tr_sampler_sample call just made (steps 1-4); the tokens the mask
 * forbids are set to -inf in it. Draws nothing; the history is
 * untouched. Errors: TR_ERR_INVALID_ARG for NULL arguments, a token
 * outside the vocabulary, or a mask that allows no token with a finite
 * logit. */
tr_status tr_sampler_logprobs(sampler *s, float *logits, const uint64_t *mask,
                              int32_t token, sampler_logprobs *lp_out);

/* Steps 1-8 without drawing: writes the ids that survive them (the set
 * step 9 samples from; for greedy, the argmax alone), in increasing id
 * order, to ids_out [vocab_size] and their count to *n_out. Tokens of
 * weight 0 (-inf) are left out when no truncation applies. logits are
 * processed in place as by tr_sampler_sample; the PRNG is not touched. For
 * tests and debugging ("why was this token possible?"). Same errors as
 * tr_sampler_sample. */
tr_status tr_sampler_candidates(sampler *s, float *logits, const uint64_t *mask,
                             int32_t *ids_out, int32_t *n_out);

/* ---- Speculative sampling (sampled drafts) ----
 *
 * A draft model proposes a token by drawing it from a distribution q of
 * its own; the target then keeps it with probability min(1, p(d) / q(d))
 * and otherwise draws from max(0, p - q), normalised. The token that
 * comes out is distributed exactly as p, the distribution
 * tr_sampler_sample draws from, whatever q is, provided d was drawn from
 * q (Leviathan et al. 2023, Chen et al. 2023). So q may be truncated or
 * restricted freely; a q closer to p only keeps more drafts. */
#define SAMPLER_PROPOSAL_MAX 256

typedef struct sampler_proposal {
    int32_t n;                        /* 1..SAMPLER_PROPOSAL_MAX tokens */
    int32_t id[SAMPLER_PROPOSAL_MAX]; /* distinct ids */
    float p[SAMPLER_PROPOSAL_MAX];    /* > 0, summing to 1 (to rounding) */
} sampler_proposal;

/* The draft's side: from its row of logits (processed in place by steps
 * 2-4; no mask), q is the n_max (<= SAMPLER_PROPOSAL_MAX) likeliest
 * tokens, fewer with top_k, then top_p and min_p applied among them (top_p
 * over their own mass), weighted at the temperature and normalised; one
 * token is drawn from q with the sampler's generator (one number). The
 * temperature must be > 0. Errors: TR_ERR_INVALID_ARG for NULL
 * arguments, n_max out of range, temperature 0, no finite logit. */
tr_status tr_sampler_propose(sampler *s, float *logits, int32_t n_max, sampler_proposal *q,
                             int32_t *token_out);

/* Keeps the tokens of q for which keep(ctx, id) is true, renormalised;
 * returns how many are left (0: q is left empty). */
int32_t tr_sampler_proposal_restrict(sampler_proposal *q, bool (*keep)(void *ctx, int32_t id),
                                     void *ctx);

/* The target's side: the accept/reject rule for draft (one of q's ids,
 * drawn from q) against p, the distribution tr_sampler_sample would draw
 * from given these logits and mask (steps 1-8 at the temperature). Draws
 * one number to decide and, on rejection, one more for the residual.
 * logits end processed (steps 1-4) and lp_out is filled as by
 * tr_sampler_sample. With temperature 0 p is the argmax alone: the draft
 * is kept exactly when it is the argmax, and nothing is drawn. Errors as
 * tr_sampler_sample's, and TR_ERR_INVALID_ARG when draft is not in q with
 * a positive weight. */
tr_status tr_sampler_sample_spec(sampler *s, float *logits, const uint64_t *mask,
                                 const sampler_proposal *q, int32_t draft, int32_t *token_out,
                                 sampler_logprobs *lp_out);

/* Records token for the penalties (the window slides). TR_ERR_INVALID_ARG
 * if token is outside [0, vocab_size) (state unchanged). Cheap (O(1)). */
tr_status tr_sampler_accept(sampler *s, int32_t token);

/* Forgets the history and restarts the PRNG from the seed given at
 * creation, so a reset sampler repeats its sequence. */
void tr_sampler_reset(sampler *s);

/* Restarts the PRNG from a new seed (history kept). */
void tr_sampler_reseed(sampler *s, uint64_t seed);

/* Message describing the last tr_sampler_sample / tr_sampler_accept failure
 * ("" if none). Borrowed, valid until the next call on s. */
const char *tr_sampler_last_error(const sampler *s);

int32_t tr_sampler_vocab_size(const sampler *s);
/* "avx2" or "generic": the vector kernels chosen for this CPU (they give
 * bit-identical results; for benchmarks and logs). */
const char *tr_sampler_kernels_name(const sampler *s);
/* Number of tokens in the penalty window now (tests and debugging). */
int32_t tr_sampler_history_len(const sampler *s);

/* Validates internal invariants (window counts match the history, the set
 * of distinct tokens matches the counts). TR_OK or TR_ERR_INTERNAL. */
tr_status tr_sampler_check(const sampler *s);

#endif
