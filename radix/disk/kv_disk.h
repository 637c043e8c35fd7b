/* kv_disk.h — the radix cache's disk tier: KV pages kept as files, found
 * again by the prefix they hold, surviving the process.
 *
 * Layering: radix/disk (tr_radix_disk), on base only. It stores opaque
 * page payloads under 128-bit keys; it knows nothing of pools, trees,
 * models or devices. The engine (runtime/engine/disk_tier.c) decides what
 * to save (pages the radix tree evicts, and at shutdown every cached
 * page) and when to read (a waiting request whose prompt continues past
 * what memory holds), and copies page bytes between the KV buffer and
 * the buffers this module hands out.
 *
 * Keys. A page is named by the whole prefix it ends: key(0) =
 * tr_kvd_key_root(fingerprint, namespace), key(i+1) =
 * tr_kvd_key_next(key(i), tokens of page i). Two mixers of 64 bits each
 * (accidental collisions ~2^-128 per pair; not meant to resist a chosen
 * collision, and the tokens of the page itself are compared on read). So
 * the index needs no tree of its own: "where did this node's pages go" is
 * answered by recomputing the chain over the prompt, after a restart as
 * before it.
 *
 * Files. DIR/<fingerprint as 16 hex>/ holds one record per page,
 * <key as 32 hex>.kvp: a header (magic, version, page size, fingerprint,
 * key, parent key, payload size, payload hash, the page's tokens, a hash
 * of all of it) and the payload. A record is written to a .tmp name and
 * renamed, so a reader never sees half of one; after a crash or a power
 * loss a torn or flipped record fails its hashes on read and is deleted
 * (the caller recomputes: a miss, never wrong K/V). `lock` in the same
 * folder is held (flock) while a store is open: a second process gets a
 * clear error rather than two writers. The fingerprint (model weights, KV
 * types, page geometry: the engine's) names the folder, so records of
 * another model or format are never even looked at.
 *
 * Bound. Records' bytes stay under max_bytes: adding one deletes the least
 * recently used (written or read) records first. On open, the folder is
 * scanned (names and sizes only, LRU order from the files' times: a read
 * touches its record), leftovers of killed writers (.tmp) are deleted,
 * and so are records of the wrong size or past the bound.
 *
 * Threads. One I/O thread per store does every file operation, in the
 * order they were asked for (a clear comes after every write asked before
 * it, a write after a clear lands after it). The index (what is on disk or
 * being written) is under a mutex; every public function may be called
 * from any thread, but the engine calls them from its own thread. Writes
 * are asynchronous and bounded by max_queued_bytes (beyond it a write is
 * dropped and counted: the engine never waits for the disk); reads are
 * asynchronous and answered through tr_kvd_poll, with wake(user) called
 * when an answer is ready.
 */
#ifndef TR_RADIX_DISK_KV_DISK_H
#define TR_RADIX_DISK_KV_DISK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

typedef struct tr_kvd_key {
    uint64_t a, b;
} tr_kvd_key;

tr_kvd_key tr_kvd_key_root(uint64_t fingerprint, uint64_t ns);
tr_kvd_key tr_kvd_key_next(tr_kvd_key parent, const int32_t *tokens, int32_t n);
static inline bool tr_kvd_key_eq(tr_kvd_key x, tr_kvd_key y) {
    return x.a == y.a && x.b == y.b;
}

typedef struct tr_kvd tr_kvd;

typedef struct tr_kvd_config {
    const char *dir;          /* created if missing (every level) */
    uint64_t max_bytes;       /* bound on the records' bytes (>= one record) */
    uint64_t fingerprint;     /* what the payload bytes mean */
    int32_t page_size;        /* tokens per record, 1..65536 */
    uint64_t payload_bytes;   /* bytes of one page, >= 1 */
    uint64_t max_queued_bytes; /* payloads waiting to be written; 0: 64 MiB */
    void (*wake)(void *user); /* a read answer is ready (I/O thread); may be NULL */
    void *wake_user;
} tr_kvd_config;

typedef struct tr_kvd_stats {
    uint64_t records, bytes;       /* on disk or being written, now */
    uint64_t writes, write_bytes;  /* records written */
    uint64_t write_errors;         /* failed writes (disk full, I/O) */
    uint64_t dropped_writes;       /* not queued: the queue was full */
    uint64_t reads, read_pages;    /* read jobs, records read and valid */
    uint64_t read_misses;          /* records asked for but gone */
    uint64_t corrupt;              /* records failing a check (deleted) */
    uint64_t evicted;              /* records deleted by the bound */
    uint64_t found_on_open;        /* records the scan at open kept */
} tr_kvd_stats;

/* Opens (creating) the store's folder, takes its lock, scans it and starts
 * the I/O thread. Errors (with d->message naming the path and the reason):
 * TR_ERR_INVALID_ARG (bad config), TR_ERR_IO (cannot create or read the
 * folder), TR_ERR_STATE (another process holds it), TR_ERR_NOMEM. */
tr_status tr_kvd_open(const tr_kvd_config *c, tr_kvd **out, tr_diag *d);

/* Finishes every queued write, then stops the thread and frees the store
 * (unanswered reads are dropped; answers not polled are freed). NULL: no-op. */
void tr_kvd_close(tr_kvd *k);

/* Is a record for key on disk or queued for writing? */
bool tr_kvd_has(tr_kvd *k, tr_kvd_key key);

/* A write: put_begin returns a buffer of payload_bytes to fill (NULL: key
 * already present, queue full, or no memory: nothing to do), then
 * put_commit queues it (taking the buffer) or put_abort gives it back.
 * tokens: the page's page_size tokens (copied). */
void *tr_kvd_put_begin(tr_kvd *k, tr_kvd_key key, tr_kvd_key parent,
                       const int32_t *tokens);
void tr_kvd_put_commit(tr_kvd *k, void *buf);
void tr_kvd_put_abort(tr_kvd *k, void *buf);

/* Asks for the records of n consecutive pages: keys[i] is page i's key,
 * its parent is keys[i-1] (parent0 for i = 0), tokens[i*page_size..] its
 * tokens (keys and tokens are copied). The answer, via tr_kvd_poll,
 * carries the tag and the number of leading pages read and valid. */
tr_status tr_kvd_read(tr_kvd *k, const tr_kvd_key *keys, tr_kvd_key parent0,
                      const int32_t *tokens, int32_t n, uint64_t tag);

typedef struct tr_kvd_answer {
    uint64_t tag;
    int32_t n_valid; /* leading pages whose payloads are in data */
    void *data;      /* n_valid * payload_bytes; free with tr_kvd_answer_free */
} tr_kvd_answer;

/* Takes one ready answer: true and *out filled, or false. */
bool tr_kvd_poll(tr_kvd *k, tr_kvd_answer *out);
void tr_kvd_answer_free(tr_kvd_answer *a);

/* Forgets every record now (tr_kvd_has is false from return) and deletes
 * the files on the I/O thread; queued writes not yet started are dropped. */
void tr_kvd_clear(tr_kvd *k);

/* Waits until every job asked for so far is done (tests, shutdown). */
void tr_kvd_drain(tr_kvd *k);

void tr_kvd_stats_get(tr_kvd *k, tr_kvd_stats *out);

/* ---- the record format (the I/O thread's, exposed for tests and the
 * fuzz target) ---- */

/* Bytes of a record's header for page_size tokens (0 if out of range). */
size_t tr_kvd_header_bytes(int32_t page_size);

/* What a record must say to be used. */
typedef struct tr_kvd_expect {
    uint64_t fingerprint;
    int32_t page_size;
    uint64_t payload_bytes;
    tr_kvd_key key, parent;
    const int32_t *tokens; /* page_size tokens */
} tr_kvd_expect;

/* Writes the header of a record into h (tr_kvd_header_bytes bytes;
 * nothing for a page size out of range). */
void tr_kvd_header_write(void *h, const tr_kvd_expect *x, uint64_t payload_hash);

/* Checks a header of n bytes against x: TR_OK and *payload_hash, or
 * TR_ERR_FORMAT with why (may be NULL) saying which field is wrong. Reads
 * only h[0..n). */
tr_status tr_kvd_header_check(const void *h, size_t n, const tr_kvd_expect *x,
                              uint64_t *payload_hash, char *why, size_t why_cap);

/* The payload hash: 64 bits over n bytes (four multiply-rotate lanes). */
uint64_t tr_kvd_hash(const void *p, size_t n);

#endif
