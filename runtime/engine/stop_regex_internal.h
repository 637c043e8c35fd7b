/* stop_regex_internal.h — stop patterns: generation ends where the output
 * first contains a match of one of a request's regular expressions.
 *
 * Layering: runtime/engine; uses grammar.h's regex compiler and matchers
 * (the grammar's regex dialect, README's "Regex dialect").
 *
 * Semantics (trellis.h, trellis_request.stop_regex). A pattern is searched
 * for anywhere in the sample's output text. The sample ends at the first
 * byte where some match ENDS (earliest end; among matches ending there, the
 * one starting first; among patterns, the lower index); the text before
 * that match's start is the output, the match itself is not emitted.
 * Anchors ^ and $ hold at the ends of the match itself, so they add
 * nothing. A pattern that matches the empty string is refused.
 *
 * How. Every character boundary of the output starts a "run": a matcher
 * on the pattern's grammar fed the bytes from there on. A run ends when
 * its matcher refuses a byte; a run in an accepting state is a match from
 * its start to here. Text from the earliest live run on may begin a match,
 * so output.c holds it back, but never more than TR_STOP_REGEX_HOLD bytes:
 * older text is emitted even if a run from it is still alive. A match
 * that starts in text already emitted is still found (the run lives on);
 * the sample then ends with what is still held dropped, and the emitted
 * part of the match stays emitted. At most TR_STOP_REGEX_MAX_RUNS runs per
 * pattern live at once (the oldest is dropped beyond that), so a match
 * longer than that many characters can be missed.
 *
 * Cost: per output byte, one matcher step per live run (runs die at the
 * first byte that cannot continue a match, so for most patterns a few).
 *
 * Ownership: a tr_stop_regex_set is made by trellis_submit on the caller's
 * thread and owned by the request; the per-sample tr_stop_scan is owned
 * by its sample and touched only by the engine thread after intake.
 */
#ifndef TR_STOP_REGEX_INTERNAL_H
#define TR_STOP_REGEX_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "grammar/grammar.h"

#define TR_STOP_REGEX_HOLD 256      /* bytes held back at most */
#define TR_STOP_REGEX_MAX_RUNS 4096 /* live runs per pattern at most */

typedef struct tr_stop_regex_set tr_stop_regex_set;
typedef struct tr_stop_scan tr_stop_scan;

/* Compiles patterns[0..n) against v. On failure returns TR_ERR_* with
 * err naming the pattern's index, the byte offset and why (syntax, an
 * unsupported construct, a budget, matches the empty string). */
int tr_stop_regex_set_new(grammar_vocab *v, const char *const *patterns,
                          int32_t n, tr_stop_regex_set **out, char *err,
                          size_t cap);
void tr_stop_regex_set_free(tr_stop_regex_set *x); /* NULL ok */
int32_t tr_stop_regex_set_count(const tr_stop_regex_set *x);

/* Per-sample scanning state over x (borrowed: x outlives it). NULL when
 * out of memory. */
tr_stop_scan *tr_stop_scan_new(const tr_stop_regex_set *x);
void tr_stop_scan_free(tr_stop_scan *sc); /* NULL ok */

typedef struct tr_stop_hit {
    int32_t pattern;   /* which pattern matched */
    size_t start, end; /* the match in held coordinates (start clamped to
                          0 when it began in text already emitted) */
} tr_stop_hit;

/* Feeds the bytes held[held_len - fresh .. held_len): held is the text not
 * yet emitted, ending with the fresh bytes. When may_stop and a match ends
 * within the fresh bytes, stops feeding there, fills *hit and returns
 * true. Otherwise returns false; in both cases *hold_from is the first
 * held offset that must stay held (held_len when none). A byte sequence
 * that is not valid UTF-8 simply matches nothing. */
bool tr_stop_scan_feed(tr_stop_scan *sc, const char *held, size_t held_len,
                       size_t fresh, bool may_stop, tr_stop_hit *hit,
                       size_t *hold_from);

#endif
