/* disk_tier.c — the radix cache's second tier: pages the tree evicts are
 * saved to disk (radix/disk/kv_disk.h) and read back when a waiting
 * prompt continues past what memory holds.
 *
 * Layering: runtime/engine, engine thread only (the store's I/O thread
 * wakes it through disk_ready). Contract of the calls in engine_internal.h.
 *
 * Save. The tree's eviction hook (radix_tree.h) sees each node before it
 * goes: for each of its pages not on disk yet, a pending save (key,
 * parent key, tokens, page id). The page returns to the pool at once and
 * may be handed to another sequence, but nothing writes it before the next
 * forward pass, and tr_disk_sync_saves copies the pending pages out right
 * before every forward (and before a restore writes pages). The store
 * writes them on its own thread; a full queue drops a save (counted).
 * At shutdown every unlocked page is evicted the same way (spill), so a
 * restarted server finds what the old one had cached.
 *
 * Restore. At intake, a request's prompt is matched in memory; the chain
 * keys of the following full pages are looked up in the store's index,
 * and the consecutive hits are read on the I/O thread while the request
 * waits (disk_wait: not admitted). The answer is handled between steps:
 * the prompt is matched again (memory may have changed), new pages are
 * allocated past the match, filled with the records' bytes (kv_write),
 * and inserted into the tree; then the request is admitted as usual and
 * finds its prefix cached. Nothing is trusted that failed a check: a
 * missing or corrupt record ends the read there, and the rest of the
 * prompt is computed.
 *
 * Units (windowed KV, radix_tree.h). A record is one page slot: its W
 * pages side by side. A slot with a hole (a windowed page already freed)
 * is not saved: the chain of records stops there, as a read does. A
 * restore allocates all W pages of each slot; the tree takes the windowed
 * ones with a reference of its own, so the restore drops its references
 * afterwards and they are ordinary cached pages.
 */
#include <stdlib.h>
#include <string.h>

#include "base/hash.h"
#include "base/log.h"
#include "base/util.h"
#include "radix/disk/kv_disk.h"
#include "runtime/engine/engine_internal.h"

typedef struct pending_save {
    tr_kvd_key key, parent; /* save i's W page ids: pend_ids + i * W */
} pending_save;

struct engine_disk {
    tr_kvd *kvd;
    char *folder; /* DIR/<fingerprint>, for reports */
    uint64_t fp;
    int32_t ps, W;
    size_t pb;               /* a unit page's bytes; a record holds W */
    int32_t cap_tokens;      /* longest prefix handled: n_ctx + a page */
    int32_t *scratch;        /* [cap_tokens] a node's prefix */
    tr_kvd_key *keys;        /* [cap_tokens / ps + 1] chain keys */
    int32_t *pagebuf;        /* [(cap_tokens / ps + 1) * W] a restore's page table */
    pending_save *pend;      /* [n_pages] */
    int32_t *pend_ids;       /* [n_pages * W] */
    int32_t *pend_tok;       /* [n_pages * ps] */
    int32_t n_pend;
    uint32_t gen;            /* flushes so far: a read asked before the
                                latest flush restores nothing */
    uint64_t pages_read, restored_tokens, reads;
};

/* ---- fingerprint ---- */

uint64_t tr_disk_file_fingerprint(const gguf_file *f) {
    uint64_t h = tr_fnv1a_word(TR_FNV1A_BASIS, tr_gguf_file_size(f));
    char buf[256];
    for (uint64_t i = 0, n = tr_gguf_kv_count(f); i < n; i++) {
        gguf_str k = tr_gguf_kv_key(f, i);
        h = tr_fnv1a(h, k.ptr, k.len);
        const char *v = tr_gguf_kv_format(f, i, buf, sizeof buf);
        h = tr_fnv1a(h, v, strlen(v));
    }
    for (uint64_t i = 0, n = tr_gguf_tensor_count(f); i < n; i++) {
        const gguf_tensor *t = tr_gguf_tensor_at(f, i);
        h = tr_fnv1a(h, t->name.ptr, t->name.len);
        h = tr_fnv1a_word(h, t->type);
        h = tr_fnv1a(h, t->ne, sizeof t->ne);
        if (t->data) h = tr_fnv1a_word(h, tr_kvd_hash(t->data, TR_MIN(t->size, 4096)));
    }
    return tr_splitmix64(h);
}

/* ---- keys ---- */

/* keys[i] for pages 0..n of tokens (n full pages); the root is returned. */
static tr_kvd_key chain(const struct engine_disk *d, uint64_t ns, const int32_t *tokens,
                        int32_t n, tr_kvd_key *keys) {
    tr_kvd_key root = tr_kvd_key_root(d->fp, ns), k = root;
    for (int32_t i = 0; i < n; i++) {
        k = tr_kvd_key_next(k, tokens + (size_t)i * (size_t)d->ps, d->ps);
        keys[i] = k;
    }
    return root;
}

/* ---- save ---- */

static void on_evict(void *user, uint64_t ns, const radix_node *x) {
    trellis_engine *e = user;
    struct engine_disk *d = e->disk;
    if (ns >> 63) return; /* a request's private namespace: never matched again */
    int32_t n = tr_radix_node_prefix(e->tree, x, d->scratch, d->cap_tokens);
    if (n <= 0) return;
    int32_t total = n / d->ps, np = tr_radix_node_n_pages(x);
    const int32_t *pages = tr_radix_node_pages(x);
    tr_kvd_key root = chain(d, ns, d->scratch, total, d->keys);
    for (int32_t j = 0; j < np; j++) {
        int32_t i = total - np + j;
        const int32_t *ids = pages + (size_t)j * (size_t)d->W;
        bool hole = false;
        for (int32_t u = 0; u < d->W; u++) hole |= ids[u] < 0;
        if (hole || d->n_pend >= e->n_pages || tr_kvd_has(d->kvd, d->keys[i])) continue;
        pending_save *p = &d->pend[d->n_pend];
        p->key = d->keys[i];
        p->parent = i ? d->keys[i - 1] : root;
        memcpy(d->pend_ids + (size_t)d->n_pend * (size_t)d->W, ids,
               (size_t)d->W * sizeof *ids);
        memcpy(d->pend_tok + (size_t)d->n_pend * (size_t)d->ps,
               d->scratch + (size_t)i * (size_t)d->ps, (size_t)d->ps * sizeof(int32_t));
        d->n_pend++;
    }
}

/* wait: when the write queue is full, let it drain rather than drop the
 * page (the shutdown spill; a step never waits for the disk). */
static void sync_saves(trellis_engine *e, bool wait) {
    struct engine_disk *d = e->disk;
    if (!d || !d->n_pend) return;
    for (int32_t i = 0; i < d->n_pend; i++) {
        pending_save *p = &d->pend[i];
        const int32_t *tok = d->pend_tok + (size_t)i * (size_t)d->ps;
        void *buf = tr_kvd_put_begin(d->kvd, p->key, p->parent, tok);
        if (!buf && wait && !tr_kvd_has(d->kvd, p->key)) {
            tr_kvd_drain(d->kvd);
            buf = tr_kvd_put_begin(d->kvd, p->key, p->parent, tok);
        }
        if (!buf) continue;
        const int32_t *ids = d->pend_ids + (size_t)i * (size_t)d->W;
        bool ok = true;
        for (int32_t u = 0; ok && u < d->W; u++)
            ok = e->compute.ops->kv_read(e->compute.ctx, ids[u],
                                         (char *)buf + (size_t)u * d->pb) == TR_OK;
        if (!ok) {
            tr_kvd_put_abort(d->kvd, buf);
            continue;
        }
        tr_kvd_put_commit(d->kvd, buf);
    }
    d->n_pend = 0;
}

void tr_disk_sync_saves(trellis_engine *e) { sync_saves(e, false); }

void tr_disk_spill(trellis_engine *e) {
    if (!e->disk) return;
    tr_radix_tree_evict(e->tree, INT32_MAX);
    sync_saves(e, true);
}

/* ---- restore ---- */

/* The prompt tokens a match may cover (as admission's match), within
 * the longest prefix the scratch arrays hold. */
static int32_t match_limit(const struct engine_disk *d, const engine_seq *s) {
    return TR_MIN(tr_plp_match_limit(s), d->cap_tokens);
}

/* A waiting request whose own read brings at least the h records from
 * key on (the same key: the same prefix), or NULL. */
static const engine_req *reading(const trellis_engine *e, uint64_t ns, tr_kvd_key key,
                                 int32_t h) {
    for (const engine_seq *s = e->wait_head; s; s = s->next) {
        const engine_req *q = s->req;
        if (q->disk_wait && !q->disk_follow && q->ns == ns && q->disk_count >= h &&
            q->disk_key[0] == key.a && q->disk_key[1] == key.b)
            return q;
    }
    return NULL;
}

void tr_disk_lookup(trellis_engine *e, engine_req *r) {
    struct engine_disk *d = e->disk;
    if (!d || r->n_done >= r->n) return;
    const engine_seq *s = &r->seqs[0];
    int32_t limit = match_limit(d, s), full = limit / d->ps;
    radix_match m;
    if (full == 0 || tr_radix_tree_match(e->tree, r->ns, s->tokens, limit, NULL, &m) != TR_OK ||
        m.n_pages >= full)
        return;
    tr_kvd_key root = chain(d, r->ns, s->tokens, full, d->keys);
    int32_t first = m.n_pages, h = 0;
    while (first + h < full && tr_kvd_has(d->kvd, d->keys[first + h])) h++;
    if (h == 0) return;
    tr_kvd_key parent = first ? d->keys[first - 1] : root;
    const engine_req *lead = reading(e, r->ns, d->keys[first], h);
    if (lead) {
        r->disk_follow = lead->id; /* its restore puts them in the cache */
    } else {
        if (tr_kvd_read(d->kvd, d->keys + first, parent,
                        s->tokens + (size_t)first * (size_t)d->ps, h, r->id) != TR_OK)
            return;
        d->reads++;
        r->disk_key[0] = d->keys[first].a;
        r->disk_key[1] = d->keys[first].b;
        r->disk_count = h;
    }
    /* what memory holds of the prompt stays while the rest is read: a
     * waiter that lost it would come out worse than one that never waited */
    if (m.node && tr_radix_tree_lock(e->tree, m.node) == TR_OK) r->disk_node = m.node;
    r->disk_wait = true;
    r->disk_first = first;
    r->disk_gen = d->gen;
}

/* Puts pages [skip, n) of the answer (page indices disk_first + ...) into
 * the tree behind the prompt's memory match. */
static void restore(trellis_engine *e, engine_req *r, const tr_kvd_answer *a) {
    struct engine_disk *d = e->disk;
    const engine_seq *s = &r->seqs[0];
    radix_match m;
    if (tr_radix_tree_match(e->tree, r->ns, s->tokens, match_limit(d, s), d->pagebuf, &m) !=
            TR_OK ||
        m.n_pages < r->disk_first)
        return; /* memory lost pages before the ones read: compute them */
    int32_t skip = m.n_pages - r->disk_first, k = a->n_valid - skip, W = d->W;
    if (k <= 0) return;
    if (m.node && tr_radix_tree_lock(e->tree, m.node) != TR_OK) return;
    /* the matched slots' windowed ids are the tree's, not ours: pass none */
    for (int32_t i = 0; i < m.n_pages * W; i++)
        if (e->unit_window[i % W] > 0) d->pagebuf[i] = -1;
    int32_t nfree = tr_kv_pool_n_free(e->pool);
    if (nfree < k * W) tr_radix_tree_evict(e->tree, k * W - nfree);
    tr_disk_sync_saves(e); /* what that evicted, before a page is rewritten */
    int32_t *pages = d->pagebuf + (size_t)m.n_pages * (size_t)W;
    bool got = tr_kv_pool_alloc(e->pool, k * W, pages) == TR_OK, ok = got;
    for (int32_t i = 0; ok && i < k * W; i++)
        ok = e->compute.ops->kv_write(e->compute.ctx, pages[i],
                                      (const char *)a->data +
                                          ((size_t)skip * (size_t)W + (size_t)i) * d->pb) ==
             TR_OK;
    int32_t n = (m.n_pages + k) * d->ps;
    radix_node *x = NULL;
    if (ok && tr_radix_tree_insert(e->tree, r->ns, s->tokens, d->pagebuf, n, &x) == TR_OK) {
        /* the tree holds the windowed pages with references of its own */
        for (int32_t i = 0; i < k * W; i++) {
            if (e->unit_window[i % W] == 0) continue;
            tr_status st = tr_kv_pool_unref(e->pool, pages[i]);
            TR_ASSERT(st == TR_OK);
            (void)st;
        }
        d->pages_read += (uint64_t)k;
        d->restored_tokens += (uint64_t)k * (uint64_t)d->ps;
        /* held until a sample is admitted, as the memory part was */
        if (x && tr_radix_tree_lock(e->tree, x) == TR_OK) {
            tr_disk_release(e, r);
            r->disk_node = x;
        }
    } else if (got) { /* a failed insert leaves the pages ours */
        tr_log(TR_LOG_WARN, "engine: pages read from the disk tier not restored");
        tr_status st = tr_kv_pool_unref_n(e->pool, pages, k * W);
        TR_ASSERT(st == TR_OK);
        (void)st;
    }
    if (m.node) tr_radix_tree_unlock(e->tree, m.node);
}

void tr_disk_answers(trellis_engine *e) {
    struct engine_disk *d = e->disk;
    if (!d) return;
    pthread_mutex_lock(&e->in_mu);
    e->disk_ready = false;
    pthread_mutex_unlock(&e->in_mu);
    tr_kvd_answer a;
    while (tr_kvd_poll(d->kvd, &a)) {
        engine_req *r = tr_engine_hash_find(e, a.tag);
        if (r && r->disk_wait) {
            r->disk_wait = false;
            if (a.n_valid > 0 && r->n_done < r->n && r->disk_gen == d->gen)
                restore(e, r, &a);
        }
        /* those that waited for this read (even if its own request ended
         * meanwhile) find the restored prefix in the cache now */
        for (engine_seq *s = e->wait_head; s; s = s->next) {
            if (s->req->disk_follow != a.tag) continue;
            s->req->disk_follow = 0;
            s->req->disk_wait = false;
        }
        tr_kvd_answer_free(&a);
    }
}

void tr_disk_release(trellis_engine *e, engine_req *r) {
    if (!r->disk_node) return;
    tr_status st = tr_radix_tree_unlock(e->tree, r->disk_node);
    TR_ASSERT(st == TR_OK);
    (void)st;
    r->disk_node = NULL;
}

bool tr_disk_release_all(trellis_engine *e) {
    bool any = false;
    for (engine_seq *s = e->wait_head; s; s = s->next) {
        any = any || s->req->disk_node;
        tr_disk_release(e, s->req);
    }
    return any;
}

bool tr_disk_any_waiting(const trellis_engine *e) {
    if (!e->disk) return false;
    for (const engine_seq *s = e->wait_head; s; s = s->next)
        if (s->req->disk_wait) return true;
    return false;
}

bool tr_disk_waiting_only(const trellis_engine *e) {
    if (!e->disk || !e->wait_head) return false;
    for (const engine_seq *s = e->wait_head; s; s = s->next)
        if (!s->req->disk_wait) return false;
    return true;
}

void tr_disk_flush(trellis_engine *e) {
    if (!e->disk) return;
    e->disk->n_pend = 0;
    e->disk->gen++;
    tr_kvd_clear(e->disk->kvd);
}

void tr_disk_stats(trellis_engine *e, trellis_stats *st) {
    struct engine_disk *d = e->disk;
    if (!d) return;
    st->disk_pages_read = d->pages_read;
    st->disk_reads = d->reads;
    st->disk_restored_tokens = d->restored_tokens;
}

void tr_disk_store_stats(trellis_engine *e, trellis_stats *st) {
    struct engine_disk *d = e->disk;
    if (!d) return;
    tr_kvd_stats k;
    tr_kvd_stats_get(d->kvd, &k);
    st->disk_records = k.records;
    st->disk_bytes = k.bytes;
    st->disk_pages_written = k.writes;
    st->disk_write_errors = k.write_errors;
    st->disk_dropped_writes = k.dropped_writes;
    st->disk_corrupt = k.corrupt;
    st->disk_evicted = k.evicted;
}

/* ---- open / close ---- */

static void wake_engine(void *user) {
    trellis_engine *e = user;
    pthread_mutex_lock(&e->in_mu);
    e->disk_ready = true;
    pthread_cond_broadcast(&e->in_cond);
    pthread_mutex_unlock(&e->in_mu);
}

static tr_status alloc_disk(trellis_engine *e, struct engine_disk *d) {
    d->ps = e->page_size;
    d->W = e->W;
    d->pb = (size_t)e->compute.kv_page_bytes;
    d->fp = e->compute.kv_fingerprint;
    d->cap_tokens = e->n_ctx + e->page_size;
    size_t nk = (size_t)(d->cap_tokens / d->ps + 1);
    d->scratch = malloc((size_t)d->cap_tokens * sizeof *d->scratch);
    d->keys = malloc(nk * sizeof *d->keys);
    d->pagebuf = malloc(nk * (size_t)d->W * sizeof *d->pagebuf);
    d->pend = malloc((size_t)e->n_pages * sizeof *d->pend);
    d->pend_ids = malloc((size_t)e->n_pages * (size_t)d->W * sizeof *d->pend_ids);
    d->pend_tok = malloc((size_t)e->n_pages * (size_t)d->ps * sizeof *d->pend_tok);
    return d->scratch && d->keys && d->pagebuf && d->pend && d->pend_ids && d->pend_tok
               ? TR_OK
               : TR_ERR_NOMEM;
}

static void free_disk(struct engine_disk *d) {
    if (!d) return;
    free(d->scratch);
    free(d->keys);
    free(d->pagebuf);
    free(d->pend);
    free(d->pend_ids);
    free(d->pend_tok);
    free(d->folder);
    free(d);
}

tr_status tr_disk_open(trellis_engine *e, char *err, size_t cap) {
    const char *dir = e->opt.kv_cache_dir;
    e->opt.kv_cache_dir = NULL; /* borrowed from the caller: the copy is d->folder */
    if (!dir || !dir[0]) return TR_OK;
    const engine_compute_ops *o = e->compute.ops;
    if (!o->kv_read || !o->kv_write || !e->compute.kv_page_bytes || !e->compute.kv_fingerprint)
        return tr_errf(err, cap, TR_ERR_UNSUPPORTED,
                       "this compute object cannot copy KV pages: no disk tier");
    struct engine_disk *d = calloc(1, sizeof *d);
    if (!d || alloc_disk(e, d) != TR_OK) {
        free_disk(d);
        return tr_errf(err, cap, TR_ERR_NOMEM, "out of memory for the disk tier");
    }
    tr_kvd_config c = {.dir = dir,
                       .max_bytes = (uint64_t)e->opt.kv_cache_disk_mb << 20,
                       .fingerprint = d->fp,
                       .page_size = d->ps,
                       .payload_bytes = d->pb * (size_t)d->W,
                       .wake = wake_engine,
                       .wake_user = e};
    tr_diag dg = {0};
    tr_status s = tr_kvd_open(&c, &d->kvd, &dg);
    size_t len = strlen(dir) + 18;
    d->folder = s == TR_OK ? malloc(len) : NULL;
    if (s == TR_OK && !d->folder) {
        tr_kvd_close(d->kvd);
        s = TR_ERR_NOMEM;
    }
    if (s != TR_OK) {
        free_disk(d);
        return tr_errf(err, cap, s, "kv_cache_dir '%s': %s", dir,
                       dg.message[0] ? dg.message : tr_status_message(s));
    }
    snprintf(d->folder, len, "%s/%016llx", dir, (unsigned long long)d->fp);
    e->opt.kv_cache_dir = d->folder;
    e->disk = d;
    tr_radix_tree_set_evict_hook(e->tree, on_evict, e);
    tr_kvd_stats ks;
    tr_kvd_stats_get(d->kvd, &ks);
    tr_log(TR_LOG_INFO, "engine: disk tier %s: %llu pages found, bound %d MiB", d->folder,
           (unsigned long long)ks.found_on_open, e->opt.kv_cache_disk_mb);
    return TR_OK;
}

void tr_disk_close(trellis_engine *e) {
    struct engine_disk *d = e->disk;
    if (!d) return;
    if (e->tree) tr_radix_tree_set_evict_hook(e->tree, NULL, NULL);
    tr_kvd_close(d->kvd);
    e->disk = NULL;
    free_disk(d);
}
