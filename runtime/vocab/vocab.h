/* vocab.h — the bridge from a tokenizer to the grammar library: the
 * grammar_vocab (every token's bytes, which tokens are special, the
 * end-of-generation ids) that grammar matchers compute token masks over.
 *
 * Layering: runtime/vocab, above runtime/tokenizer and grammar/, which know
 * nothing of each other (grammar/ sees a vocabulary only as byte strings;
 * the tokenizer knows nothing about constraints), so the one function that
 * needs both lives here. Its callers: the engine, for its constraints
 * (runtime/engine), and the applications that drive grammar/ directly
 * (`trellis bench grammar`'s micro part, `trellis bench maskbench`), which
 * thereby measure the masks the engine computes.
 *
 * Reentrant, any thread: the tokenizer is only read.
 */
#ifndef TR_VOCAB_VOCAB_H
#define TR_VOCAB_VOCAB_H

#include "base/status.h"
#include "grammar/grammar.h"
#include "runtime/tokenizer/tokenizer.h"

/* The grammar vocabulary of tok: every token's raw bytes, its special flag
 * (control tokens are never allowed in constrained text) and the
 * end-of-generation ids. *out (owned by the caller, free with
 * tr_grammar_vocab_free) untouched on failure; diag (may be NULL) says
 * why. ~50 ms for SmolLM2's 49,152 tokens. */
tr_status tr_vocab_from_tokenizer(const tokenizer *tok, grammar_vocab **out,
                                  tr_diag *diag);

#endif
