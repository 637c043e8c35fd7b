/* json_keys_internal.h — the keys already written in each open JSON
 * object of a matcher's text, so that no object gets a key twice.
 *
 * A JSON Schema may let an object take keys it does not list
 * (additionalProperties, patternProperties, a plain JSON object): a
 * regular or context-free grammar cannot remember which of infinitely
 * many strings were used, so such a grammar alone allows {"a": 1, "a": 2},
 * which most parsers read as {"a": 2}. The matcher of a grammar compiled
 * from a JSON Schema (or plain JSON) keeps this tracker beside its
 * automaton: a small JSON lexer over the accepted bytes with, per open
 * object, the set of its keys as decoded strings (so "a" and "\u0061" are
 * one key; surrogate pairs join; a lone surrogate is kept as its 3-byte
 * form). It refuses any bytes that would close a key string equal to one
 * its object already has: masks lose those tokens, accept calls refuse
 * them, forced bytes stop before them. Exact for every key, listed or
 * not; the grammar still decides everything else.
 *
 * Arrays too (uniqueItems, grammar/json/json_unique.c): the grammar may
 * name instance paths (unique_paths[0..unique_paths_len), borrowed for
 * the tracker's life: per path a count of elements, with
 * TR_GKEYS_ANY_ITEMS (cfg.h) set when the array's items may be any JSON value,
 * then each element: 'i' (an array item), 'k' + 4-byte little-endian
 * length + a key's decoded bytes, or 'a' + a 4-byte count + that many
 * keys spelled as 'k' spells one: any key but those). An array opening
 * where the open objects' current keys and the open arrays spell one of
 * them keeps its items distinct. String items (no TR_GKEYS_ANY_ITEMS) are
 * kept as an object keeps its keys: one that would close equal to an
 * earlier item is refused the same way. Any items are kept as canonical
 * forms (strings decoded, numbers by value: 1, 1.0 and 10e-1 are one
 * item, objects with their members sorted by key), made when an item
 * ends: at its closing quote or bracket, or, for a number or literal, at
 * the comma, bracket or blank after it; the byte that ends a repeat is
 * refused. Masks then check every token that can end an item (a quote,
 * a comma, a closing bracket or a blank; inside a string only those with
 * a quote) among those the grammar allows.
 *
 * Limit, stated: the tracker only removes. Where the grammar allows
 * nothing but a duplicate next (an object that must take another key
 * and can only repeat one), the mask is left without that key and the
 * request ends as any empty mask ends it, instead of writing the
 * duplicate.
 *
 * Layering: grammar/ facade, internal (matcher.c). Owns its memory; one
 * thread at a time, like its matcher.
 */
#ifndef TR_GRAMMAR_JSON_KEYS_H
#define TR_GRAMMAR_JSON_KEYS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "grammar/mask/mask.h"

typedef struct gkeys gkeys;

/* A tracker for text matched against vocabulary v (borrowed: must
 * outlive it), remembering hist_cap accept calls for rollback. NULL on
 * out-of-memory.
 * after[0..after_len) (after_len 0: none): the text is not all JSON, only
 * the values that follow this literal are (an EBNF grammar's `%json
 * -keys-after`, grammar.h): bytes are then read as JSON from the end of
 * each occurrence of the literal until the outermost object or array
 * after it closes, and keys are tracked there only; elsewhere nothing is
 * refused. Such a value must be an object or an array (a tool call's
 * {"name": ..., "arguments": ...}). */
gkeys *tr_gkeys_new(const grammar_vocab *v, uint32_t hist_cap, const uint8_t *after,
                    size_t after_len, const uint8_t *unique_paths, size_t unique_paths_len);
void tr_gkeys_free(gkeys *k);
/* Back to empty text. */
void tr_gkeys_reset(gkeys *k);

/* Whether appending b[0..n) would close a key its object already has. */
bool tr_gkeys_would_dup(const gkeys *k, const uint8_t *b, size_t n);
/* The same for token id of the vocabulary (at once false for a token
 * without a quote). */
bool tr_gkeys_token_would_dup(const gkeys *k, int32_t id);
/* The longest prefix of b[0..n) that closes no duplicate key. */
size_t tr_gkeys_clean_prefix(const gkeys *k, const uint8_t *b, size_t n);
/* Clears from mask (the vocabulary's words) every token whose bytes
 * would close a duplicate key. */
void tr_gkeys_filter_mask(const gkeys *k, uint64_t *mask);

/* The tokens the matcher's one-token lookahead (matcher.c) must look at:
 * NULL when no unique array with any items ('v') has an object or array
 * item open, or the innermost such item is already past 512 bytes (the
 * checks cost the item's length); else inside a string those with a quote (only they can
 * leave it), elsewhere every token with bytes (a bitmap over the
 * vocabulary's words, the tracker's). */
const uint64_t *tr_gkeys_lookahead_tokens(const gkeys *k);
/* Whether, after b[0..n), closing the innermost object or array would
 * repeat an earlier item of a unique array. */
bool tr_gkeys_close_repeats(const gkeys *k, const uint8_t *b, size_t n);
/* Whether u[0..un) would close a repeat if appended after t[0..tn)
 * (t itself closing none; texts past 512 bytes together: false). */
bool tr_gkeys_dup_after(const gkeys *k, const uint8_t *t, size_t tn, const uint8_t *u,
                        size_t un);
/* The tokens of blanks alone (a bitmap over the vocabulary's words). */
const uint64_t *tr_gkeys_blank_tokens(const gkeys *k);

/* Appends b[0..n) as one accept call (n may be 0: an end-of-generation
 * token). The caller has checked tr_gkeys_would_dup. False on
 * out-of-memory (the tracker is then reset and refuses nothing until
 * reset again: it never refuses valid text for want of memory). */
bool tr_gkeys_push(gkeys *k, const uint8_t *b, size_t n);
/* Undoes the last n pushes; false (unchanged) when fewer are
 * remembered. */
bool tr_gkeys_rollback(gkeys *k, uint32_t n);

#endif
