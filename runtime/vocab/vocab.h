/* bench_vocab.h — the grammar vocabulary of a tokenizer, for the
 * benchmarks that drive the grammar library directly (`bench grammar`'s
 * micro part, `bench maskbench`): built as the engine builds it for its
 * constraints (runtime/engine/constraint.c, which applications cannot
 * include), so that they measure the masks the engine computes.
 *
 * Layering: applications (app/bench) over grammar/ and the
 * tokenizer. Pure function, any thread.
 */
#ifndef TR_BENCH_VOCAB_H
#define TR_BENCH_VOCAB_H

#include "base/status.h"
#include "grammar/grammar.h"
#include "runtime/tokenizer/tokenizer.h"

/* Every token's bytes, control tokens marked special (never allowed in
 * constrained text), the end-of-generation ids. *out (free with
 * tr_grammar_vocab_free) untouched on failure; diag (may be NULL) says
 * why. */
tr_status bench_vocab_from_tokenizer(const tokenizer *tok, grammar_vocab **out,
                                     tr_diag *diag);

#endif
