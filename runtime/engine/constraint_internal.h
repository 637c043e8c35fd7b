/* constraint_internal.h — the glue between grammar/, a tokenizer and the
 * engine's constraints (applications reach it only through
 * include/trellis.h: `trellis generate` is a client of the engine), so that
 * there is ONE implementation of each piece:
 *
 *   - trellis_constraint_ops over a bare grammar_matcher,
 *   - jump-forward: the sampled token plus the bytes the constraint forces
 *     next, re-encoded by the tokenizer and put in place of the sampled
 *     token (docs/design.md, "The path of one request", step 5).
 *
 * The grammar vocabulary of a tokenizer (token bytes, specials, EOG) is
 * runtime/vocab's, which the benchmarks that drive grammar/ directly share.
 *
 * Layering: runtime/engine. grammar/ knows nothing about tokenizers, so
 * the code that needs both lives here; the tokenizer knows nothing about
 * constraints. Jump-forward works on any trellis_constraint_ops that has
 * forced_bytes and rollback (the built-in regex constraint, a custom one),
 * not on grammar_matcher directly. Every function is reentrant; a
 * constraint state is used by one thread at a time (its owner's).
 */
#ifndef TR_ENGINE_CONSTRAINT_H
#define TR_ENGINE_CONSTRAINT_H

#include <stdint.h>

#include "grammar/grammar.h"
#include "runtime/tokenizer/tokenizer.h"
#include "trellis.h"

/* trellis_constraint_ops whose state is a grammar_matcher * (borrowed: the
 * ops have no clone and their free does nothing; the caller frees the
 * matcher). is_done: the matcher took an end-of-generation token, or its
 * text is a complete match that no byte can extend (only EOG could follow,
 * so generation can stop without spending a forward pass to sample it).
 * rollback(n) undoes n accepted tokens. */
extern const trellis_constraint_ops tr_constraint_matcher_ops;

/* Most tokens one jump-forward produces, and most forced bytes it reads
 * (a longer forced run is taken over several jumps). */
#define CONSTRAINT_JF_MAX_TOKENS 128
#define CONSTRAINT_JF_MAX_BYTES 512

/* Jump-forward after `sampled` was accepted by the constraint (ops, state).
 * If the constraint forces bytes next (ops->forced_bytes gives a non-empty
 * run; ops->forced_bytes or ops->rollback NULL: never), the sampled token's
 * bytes followed by the forced bytes are re-encoded with tok, the sampled
 * token is rolled back, and the new ids are accepted one by one until the
 * first one the constraint rejects or `room` ids (room >= 1: what
 * max_tokens and the context still allow); those ids go to out[0..*n_out).
 * Why re-encode rather than append the forced bytes' own tokens: the model
 * then sees the tokens unconstrained text would have at the boundary
 * (`"` sampled + `name` forced becomes the one token `"name`).
 * If nothing usable comes out (the sampled token is special or too long,
 * no forced bytes, the re-encoding fails, its first id is rejected, or the
 * ids that fit cover fewer bytes than the sampled token did), out[0] is
 * `sampled`, *n_out is 1 and the constraint is as it was on entry.
 * On success the constraint has accepted exactly out[0..*n_out).
 * Errors: TR_ERR_INVALID_ARG (room < 1), or the constraint's own error
 * when it refuses to re-accept the sampled token after the rollback
 * (a constraint that is not deterministic): the state is then undefined
 * and the caller should end the sequence. */
tr_status tr_constraint_jump_forward(const tokenizer *tok,
                                  const trellis_constraint_ops *ops,
                                  void *state, int32_t sampled, int32_t room,
                                  int32_t *out, int32_t *n_out);

#endif
