/* mask_internal.h — the mask walk itself, shared by the files of
 * grammar/mask/ (the memo in mask.c calls it; tests may too). Layers
 * above get masks through the memo (mask.h), and cfg/ walks the same
 * trie with its own stack-aware walker.
 *
 * Layering: grammar/mask, internal. Pure functions: any thread, with its
 * own scratch.
 */
#ifndef TR_GRAMMAR_MASK_INTERNAL_H
#define TR_GRAMMAR_MASK_INTERNAL_H

#include <stdint.h>

#include "grammar/mask/mask.h"

/* The trie walk alone: into mask[0..v->n_words] (n_words + 1 words: the
 * last is scratch; on return bits past n_vocab are zero) the tokens whose
 * bytes DFA state s can consume without dying; no EOG, no special tokens.
 * stack is scratch of v->max_len + 1 entries. The dead state's mask is
 * empty. */
void tr_mask_walk(const gdfa *d, uint32_t s, const grammar_vocab *v,
                uint32_t *stack, uint64_t *mask);
/* A regex grammar's mask: tr_mask_walk plus the EOG tokens iff s accepts. */
void tr_mask_compute(const gdfa *d, uint32_t s, const grammar_vocab *v,
                   uint32_t *stack, uint64_t *mask);

#endif
