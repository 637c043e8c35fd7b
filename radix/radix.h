/* radix.h — the radix module: the paged KV page pool and the radix-tree
 * prefix cache on top of it (RadixAttention).
 *
 *   kv_pool.h     page ids of the engine's KV buffer: O(1) alloc/free,
 *                 reference counts, free / locked / cached accounting.
 *   radix_tree.h  token sequences -> page ids; match, lock, insert (with
 *                 page-border splits), LRU eviction, namespaces.
 *
 * Layering: depends on base only; deals in int32 token ids and
 * int32 page ids. runtime/engine owns one pool and one tree per model and
 * uses both from its thread only. Contracts, invariants and the ownership
 * rules of page references are in the two headers.
 */
#ifndef TR_RADIX_RADIX_H
#define TR_RADIX_RADIX_H

#include "radix/kv_pool.h"
#include "radix/radix_tree.h"

#endif
