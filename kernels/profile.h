/* profile.h — a backend that runs another and times each op, for finding
 * where a forward pass spends its time (tests/bench/bench_model -P 1).
 *
 * tr_backend_profile_new(inner) returns a backend whose every function
 * forwards to inner's (streams and events are wrapped one to one), and
 * whose compute ops are timed on the host's monotonic clock: the time of
 * a call, from its start to its return, after waiting for its stream when
 * inner is asynchronous (so a profiled asynchronous backend runs its ops
 * one at a time: the figures are each op's own, not the overlapped
 * whole). On the CPU backend an op's time includes its threads' wait at
 * the op's end (the imbalance between them), which is part of what a
 * step costs.
 *
 * Times are kept per key: the op's name, and for matmul the shapes too
 * ("matmul 3x576 -> 576+192+192"), since a forward pass's matmuls differ
 * by an order of magnitude. At most TR_PROFILE_MAX_KEYS keys; later ones
 * are counted under "other".
 *
 * Ownership: the profile backend owns inner (destroying it destroys
 * inner). Thread-safe as inner is: counters are atomic.
 */
#ifndef TR_KERNELS_PROFILE_H
#define TR_KERNELS_PROFILE_H

#include <stdint.h>

#include "kernels/backend.h"

#define TR_PROFILE_MAX_KEYS 48

typedef struct tr_profile_entry {
    char key[64];
    uint64_t calls;
    uint64_t ns;
} tr_profile_entry;

/* On success *out is a new backend wrapping inner (which it now owns).
 * TR_ERR_NOMEM: inner untouched and still the caller's. */
tr_status tr_backend_profile_new(tr_backend *inner, tr_backend **out);

/* Copies up to cap entries (in first-seen order) into out; returns how
 * many keys there are. be must come from tr_backend_profile_new. */
int tr_backend_profile_get(tr_backend *be, tr_profile_entry *out, int cap);

/* Zeroes every counter (keys stay). */
void tr_backend_profile_reset(tr_backend *be);

#endif
