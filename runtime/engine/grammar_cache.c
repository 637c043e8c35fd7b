/* grammar_cache.c — the compile cache and the handles (grammar_cache_internal.h
 * has the design: key, budget, single flight, locks), and the "Grammars"
 * functions of include/trellis.h.
 *
 * Layering: runtime/engine. Any thread; see grammar_cache_internal.h for which
 * lock guards what.
 *
 * Table: chained buckets, a power of two, doubled when the entries
 * outnumber them. LRU: a doubly-linked list of READY entries, most
 * recently used at the head; eviction takes from the tail.
 */
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/hash.h"
#include "base/util.h"
#include "runtime/engine/engine_internal.h"
#include "runtime/engine/grammar_cache_internal.h"

enum { GE_COMPILING = 0, GE_READY = 1, GE_FAILED = 2 };

typedef struct gentry {
    uint64_t hash;
    trellis_grammar_kind kind;
    trellis_grammar_options opt; /* those the kind reads; rest zero */
    char *text;                  /* owned, NUL-terminated */
    size_t len;
    int state;                   /* GE_* */
    trellis_grammar *h;          /* READY: the cache's reference */
    tr_status status;            /* FAILED: for the waiters */
    char *error;                 /* FAILED: malloc'd message or NULL */
    int32_t waiters;             /* lookups waiting on this compile */
    uint64_t bytes;              /* READY: weight as last measured */
    struct gentry *hnext;        /* bucket chain */
    struct gentry *prev, *next;  /* LRU list (READY only) */
} gentry;

struct gcache {
    grammar_vocab *v;            /* one reference */
    uint64_t budget;
    grammar_limits lim;
    pthread_mutex_t mu;
    pthread_cond_t cond;         /* a compile finished */
    /* ---- under mu ---- */
    gentry **buckets;
    size_t n_buckets, n_entries; /* entries in the table (any state) */
    gentry *lru_head, *lru_tail;
    int32_t n_ready;
    uint64_t bytes;              /* sum of READY entries' bytes */
    uint64_t hits, misses, compiles, failures, evictions, exhausted;
    /* ---- atomics ---- */
    gcache_mask_counters masks;
};

/* ---- handles ---- */

static void handle_free(trellis_grammar *h) {
    tr_grammar_free(h->g);
    tr_grammar_vocab_free(h->v);
    free(h->warnings);
    free(h);
}

trellis_grammar *trellis_grammar_ref(trellis_grammar *h) {
    if (h) atomic_fetch_add_explicit(&h->refs, 1, memory_order_relaxed);
    return h;
}

void trellis_grammar_release(trellis_grammar *h) {
    if (h && atomic_fetch_sub_explicit(&h->refs, 1, memory_order_acq_rel) == 1)
        handle_free(h);
}

trellis_grammar_kind trellis_grammar_get_kind(const trellis_grammar *h) {
    return h ? h->kind : (trellis_grammar_kind)0;
}

const char *trellis_grammar_warnings(const trellis_grammar *h) {
    return h ? h->warnings : "";
}

void trellis_grammar_options_default(trellis_grammar_options *o) {
    /* grammar/'s defaults, so that both layers agree */
    grammar_json_options j;
    tr_grammar_json_options_default(&j);
    memset(o, 0, sizeof *o);
    o->lenient = j.lenient;
    o->whitespace = (int32_t)j.whitespace;
    o->json_numbers = (int32_t)j.numbers;
    o->property_order = (int32_t)j.property_order;
    o->max_ws_run = (int32_t)j.max_ws_run;
    o->indent = (int32_t)j.indent;
}

/* ---- the cache ---- */

tr_status tr_gcache_new(grammar_vocab *v, uint64_t budget, gcache **out) {
    if (!v || !out || budget == 0) return TR_ERR_INVALID_ARG;
    gcache *c = calloc(1, sizeof *c);
    if (!c) return TR_ERR_NOMEM;
    c->n_buckets = 64;
    c->buckets = calloc(c->n_buckets, sizeof *c->buckets);
    if (!c->buckets || pthread_mutex_init(&c->mu, NULL) != 0) {
        free(c->buckets);
        free(c);
        return TR_ERR_NOMEM;
    }
    if (pthread_cond_init(&c->cond, NULL) != 0) {
        pthread_mutex_destroy(&c->mu);
        free(c->buckets);
        free(c);
        return TR_ERR_NOMEM;
    }
    c->v = tr_grammar_vocab_ref(v);
    c->budget = budget;
    tr_grammar_limits_default(&c->lim);
    c->lim.mask_cache_bytes = TR_MIN(c->lim.mask_cache_bytes, budget);
    atomic_init(&c->masks.computed, 0);
    atomic_init(&c->masks.reused, 0);
    *out = c;
    return TR_OK;
}

static void entry_free(gentry *x) {
    free(x->text);
    free(x->error);
    free(x);
}

void tr_gcache_free(gcache *c) {
    if (!c) return;
    for (size_t b = 0; b < c->n_buckets; b++) {
        for (gentry *x = c->buckets[b], *nx; x; x = nx) {
            nx = x->hnext;
            /* nobody compiles or waits: no call is in progress */
            trellis_grammar_release(x->h);
            entry_free(x);
        }
    }
    free(c->buckets);
    pthread_cond_destroy(&c->cond);
    pthread_mutex_destroy(&c->mu);
    tr_grammar_vocab_free(c->v);
    free(c);
}

void tr_gcache_set_limits(gcache *c, const grammar_limits *lim) { c->lim = *lim; }

gcache_mask_counters *tr_gcache_counters(gcache *c) { return &c->masks; }

/* FNV-1a over the key's fields. */
static uint64_t key_hash(trellis_grammar_kind kind, const trellis_grammar_options *o,
                         const char *text, size_t len) {
    int32_t k[7] = {(int32_t)kind, o->lenient,  o->whitespace,    o->max_ws_run,
                    o->indent,     o->json_numbers, o->property_order};
    return tr_fnv1a(tr_fnv1a(TR_FNV1A_BASIS, k, sizeof k), text, len);
}

static bool key_equal(const gentry *x, uint64_t hash, trellis_grammar_kind kind,
                      const trellis_grammar_options *o, const char *text,
                      size_t len) {
    return x->hash == hash && x->kind == kind && x->len == len &&
           x->opt.lenient == o->lenient && x->opt.whitespace == o->whitespace &&
           x->opt.max_ws_run == o->max_ws_run && x->opt.indent == o->indent &&
           x->opt.json_numbers == o->json_numbers &&
           x->opt.property_order == o->property_order &&
           memcmp(x->text, text, len) == 0;
}

static gentry **bucket(gcache *c, uint64_t hash) {
    return &c->buckets[(hash >> 7) & (c->n_buckets - 1)];
}

static void table_remove(gcache *c, gentry *x) {
    gentry **p = bucket(c, x->hash);
    while (*p && *p != x) p = &(*p)->hnext;
    if (*p) {
        *p = x->hnext;
        c->n_entries--;
    }
}

/* Doubles the bucket array when entries outnumber buckets; on failure the
 * chains just grow longer. */
static void table_grow(gcache *c) {
    if (c->n_entries < c->n_buckets) return;
    size_t nb = c->n_buckets * 2;
    gentry **t = calloc(nb, sizeof *t);
    if (!t) return;
    gentry **old = c->buckets;
    size_t old_n = c->n_buckets;
    c->buckets = t;
    c->n_buckets = nb;
    for (size_t b = 0; b < old_n; b++) {
        for (gentry *x = old[b], *nx; x; x = nx) {
            nx = x->hnext;
            gentry **p = bucket(c, x->hash);
            x->hnext = *p;
            *p = x;
        }
    }
    free(old);
}

static void lru_unlink(gcache *c, gentry *x) {
    if (x->prev) x->prev->next = x->next;
    else c->lru_head = x->next;
    if (x->next) x->next->prev = x->prev;
    else c->lru_tail = x->prev;
    x->prev = x->next = NULL;
}

static void lru_push_front(gcache *c, gentry *x) {
    x->prev = NULL;
    x->next = c->lru_head;
    if (c->lru_head) c->lru_head->prev = x;
    else c->lru_tail = x;
    c->lru_head = x;
}

static uint64_t entry_weight(const gentry *x) {
    grammar_stats gs;
    grammar_memo_stats ms;
    tr_grammar_get_stats(x->h->g, &gs);
    tr_grammar_get_memo_stats(x->h->g, &ms);
    return (uint64_t)gs.bytes + ms.bytes + sizeof *x + sizeof *x->h + x->len +
           strlen(x->h->warnings);
}

/* Re-measures every ready entry and evicts from the LRU end, skipping
 * entries with waiters, until within budget. The evicted handles are
 * chained through *victims (their cache references, to be released
 * after mu is). Called with mu held. */
static void measure_and_evict(gcache *c, gentry **victims) {
    uint64_t total = 0;
    for (gentry *x = c->lru_head; x; x = x->next) {
        x->bytes = entry_weight(x);
        total += x->bytes;
    }
    c->bytes = total;
    for (gentry *x = c->lru_tail, *pv; x && c->bytes > c->budget; x = pv) {
        pv = x->prev;
        if (x->waiters > 0) continue;
        lru_unlink(c, x);
        table_remove(c, x);
        c->bytes -= x->bytes;
        c->n_ready--;
        c->evictions++;
        x->hnext = *victims;
        *victims = x;
    }
}

static void release_victims(gentry *v) {
    for (gentry *nx; v; v = nx) {
        nx = v->hnext;
        trellis_grammar_release(v->h);
        entry_free(v);
    }
}

/* Builds a handle: compiles outside any lock. */
static tr_status compile_handle(gcache *c, trellis_grammar_kind kind,
                                const char *text, size_t len,
                                const trellis_grammar_options *o,
                                trellis_grammar **out, tr_diag *d) {
    trellis_grammar *h = calloc(1, sizeof *h);
    if (!h) return tr_diag_set(d, TR_ERR_NOMEM, 0, "out of memory");
    tr_status st = tr_engine_grammar_compile(kind, text, len, o, &c->lim, &h->g,
                                             &h->warnings, d);
    if (st) {
        free(h);
        return st;
    }
    atomic_init(&h->refs, 1);
    h->kind = kind;
    h->v = tr_grammar_vocab_ref(c->v);
    *out = h;
    return TR_OK;
}

/* "bad regex: <diag> (at byte N)": what was compiled, what is wrong,
 * where. The regex parser's messages end with their position already
 * ("... at byte N"): the offset is added only to those that lack it, so
 * it is said once. */
static void format_error(char *buf, size_t cap, trellis_grammar_kind kind,
                         tr_status st, const tr_diag *d) {
    const char *what = tr_engine_grammar_kind_name(kind);
    const char *msg = d->message[0] ? d->message : tr_status_message(st);
    if (!what)
        snprintf(buf, cap, "%s", msg);
    else if (kind == TRELLIS_GRAMMAR_REGEX && st != TR_ERR_NOMEM && !strstr(msg, "at byte "))
        snprintf(buf, cap, "bad regex: %s (at byte %llu)", msg,
                 (unsigned long long)d->offset);
    else
        snprintf(buf, cap, "bad %s: %s", what, msg);
}

/* A lookup that found x (mu held): waits for its compile if it is still
 * running, then shares its handle or its error. Unlocks mu. */
static tr_status take_found(gcache *c, gentry *x, trellis_grammar **out, char *err,
                            size_t err_cap) {
    c->hits++;
    if (x->state == GE_COMPILING) {
        x->waiters++;
        while (x->state == GE_COMPILING) pthread_cond_wait(&c->cond, &c->mu);
        x->waiters--;
    }
    if (x->state == GE_READY) {
        if (x->prev) { /* not already the most recent */
            lru_unlink(c, x);
            lru_push_front(c, x);
        }
        *out = trellis_grammar_ref(x->h);
        pthread_mutex_unlock(&c->mu);
        return TR_OK;
    }
    /* FAILED: out of the table already; the last waiter frees it */
    tr_status st = x->status;
    if (err && err_cap) snprintf(err, err_cap, "%s", x->error ? x->error : "");
    if (x->waiters == 0) entry_free(x);
    pthread_mutex_unlock(&c->mu);
    return st;
}

/* A ready entry whose grammar is exhausted (its automaton reached the
 * state budget, so every matcher on it fails) leaves the table and the
 * LRU (mu held): the lookup compiles the text afresh, and the requests
 * still holding the old handle keep it. Entries with waiters stay (they
 * are about to take the handle); the next lookup drops them. */
static bool drop_if_exhausted(gcache *c, gentry *x) {
    if (x->state != GE_READY || x->waiters > 0 || !tr_grammar_exhausted(x->h->g))
        return false;
    lru_unlink(c, x);
    table_remove(c, x);
    c->bytes -= TR_MIN(c->bytes, x->bytes);
    c->n_ready--;
    c->exhausted++;
    x->hnext = NULL;
    return true;
}

/* A miss (mu held): a COMPILING entry for the key, in the table, so that
 * lookups of the same key wait for it. NULL when out of memory. */
static gentry *insert_compiling(gcache *c, uint64_t hash, trellis_grammar_kind kind,
                                const trellis_grammar_options *o, const char *text,
                                size_t len) {
    c->misses++;
    gentry *x = calloc(1, sizeof *x);
    char *key_text = x ? malloc(len + 1) : NULL;
    if (!key_text) {
        free(x);
        c->failures++;
        return NULL;
    }
    memcpy(key_text, text, len);
    key_text[len] = 0;
    *x = (gentry){.hash = hash, .kind = kind, .opt = *o, .text = key_text,
                  .len = len, .state = GE_COMPILING};
    table_grow(c);
    gentry **b = bucket(c, hash);
    x->hnext = *b;
    *b = x;
    c->n_entries++;
    return x;
}

/* The compile of x ended with st (h on success): publishes the entry or
 * the error to the waiters, and evicts what exceeds the budget. */
static void finish_compile(gcache *c, gentry *x, tr_status st, trellis_grammar *h,
                           const char *msg, trellis_grammar **out) {
    gentry *victims = NULL;
    pthread_mutex_lock(&c->mu);
    if (st == TR_OK) {
        x->h = h;
        x->state = GE_READY;
        lru_push_front(c, x);
        c->n_ready++;
        c->compiles++;
        *out = trellis_grammar_ref(h);
        measure_and_evict(c, &victims);
    } else {
        c->failures++;
        table_remove(c, x);
        x->state = GE_FAILED;
        x->status = st;
        x->error = strdup(msg); /* NULL: the waiters get "" */
    }
    pthread_cond_broadcast(&c->cond);
    if (st && x->waiters == 0) entry_free(x);
    pthread_mutex_unlock(&c->mu);
    release_victims(victims);
}

tr_status tr_gcache_compile(gcache *c, trellis_grammar_kind kind, const char *text,
                            size_t len, const trellis_grammar_options *options,
                            trellis_grammar **out, char *err, size_t err_cap) {
    if (err && err_cap) err[0] = 0;
    if (!c || !out)
        return tr_errf(err, err_cap, TR_ERR_INVALID_ARG, "no cache or no output");
    tr_diag d = {0};
    if (!tr_engine_grammar_kind_name(kind))
        return tr_errf(err, err_cap, TR_ERR_INVALID_ARG,
                       "%d is not a TRELLIS_GRAMMAR_* kind", (int)kind);
    if (kind == TRELLIS_GRAMMAR_JSON_OBJECT) {
        text = "";
        len = 0;
    } else if (!text) {
        return tr_errf(err, err_cap, TR_ERR_INVALID_ARG, "no %s text",
                       tr_engine_grammar_kind_name(kind));
    } else if (len == 0) {
        len = strlen(text);
    }
    trellis_grammar_options o;
    tr_status st = tr_engine_grammar_kind_options(kind, options, &o, &d);
    if (st) return tr_errf(err, err_cap, st, "%s", d.message);
    uint64_t hash = key_hash(kind, &o, text, len);

    pthread_mutex_lock(&c->mu);
    gentry *x = *bucket(c, hash);
    while (x && !key_equal(x, hash, kind, &o, text, len)) x = x->hnext;
    if (x && !drop_if_exhausted(c, x)) return take_found(c, x, out, err, err_cap);
    gentry *stale = x; /* NULL, or the exhausted entry just dropped */
    x = insert_compiling(c, hash, kind, &o, text, len);
    pthread_mutex_unlock(&c->mu);
    release_victims(stale);
    if (!x) return tr_errf(err, err_cap, TR_ERR_NOMEM, "out of memory");

    /* no lock held: x stays in the table, COMPILING, until finish_compile */
    trellis_grammar *h = NULL;
    st = compile_handle(c, kind, x->text, len, &o, &h, &d);
    char msg[512] = "";
    if (st) format_error(msg, sizeof msg, kind, st, &d);
    finish_compile(c, x, st, h, msg, out);
    if (st) return tr_errf(err, err_cap, st, "%s", msg);
    return TR_OK;
}

void tr_gcache_get_stats(gcache *c, trellis_grammar_cache_stats *out) {
    memset(out, 0, sizeof *out);
    gentry *victims = NULL;
    pthread_mutex_lock(&c->mu);
    measure_and_evict(c, &victims);
    out->hits = c->hits;
    out->misses = c->misses;
    out->compiles = c->compiles;
    out->failures = c->failures;
    out->evictions = c->evictions;
    out->exhausted = c->exhausted;
    out->entries = c->n_ready;
    out->bytes = c->bytes;
    out->budget_bytes = c->budget;
    pthread_mutex_unlock(&c->mu);
    release_victims(victims);
    out->masks_computed = atomic_load(&c->masks.computed);
    out->masks_reused = atomic_load(&c->masks.reused);
}

tr_status tr_gcache_check(gcache *c) {
    tr_status st = TR_OK;
    pthread_mutex_lock(&c->mu);
    size_t in_table = 0, ready_in_table = 0;
    for (size_t b = 0; b < c->n_buckets; b++) {
        for (gentry *x = c->buckets[b]; x; x = x->hnext) {
            in_table++;
            if (bucket(c, x->hash) != &c->buckets[b] || x->state == GE_FAILED ||
                (x->state == GE_READY) != (x->h != NULL)) {
                fprintf(stderr, "gcache_check: bad entry in bucket %zu\n", b);
                st = TR_ERR_INTERNAL;
            }
            ready_in_table += x->state == GE_READY;
        }
    }
    int32_t n_lru = 0;
    uint64_t bytes = 0;
    for (gentry *x = c->lru_head; x; x = x->next) {
        n_lru++;
        bytes += x->bytes;
        if (x->state != GE_READY || (x->next && x->next->prev != x) ||
            (!x->next && c->lru_tail != x)) {
            fprintf(stderr, "gcache_check: broken LRU list\n");
            st = TR_ERR_INTERNAL;
            break;
        }
    }
    if (in_table != c->n_entries || ready_in_table != (size_t)c->n_ready ||
        n_lru != c->n_ready || bytes != c->bytes ||
        c->misses != c->compiles + c->failures + (c->n_entries - ready_in_table)) {
        fprintf(stderr, "gcache_check: %zu entries (%zu counted), %zu ready, "
                        "%d in LRU (%d counted), %llu bytes (%llu counted), "
                        "%llu misses %llu compiles %llu failures\n",
                in_table, c->n_entries, ready_in_table, n_lru, c->n_ready,
                (unsigned long long)bytes, (unsigned long long)c->bytes,
                (unsigned long long)c->misses, (unsigned long long)c->compiles,
                (unsigned long long)c->failures);
        st = TR_ERR_INTERNAL;
    }
    pthread_mutex_unlock(&c->mu);
    return st;
}

/* ---- trellis.h ---- */

int trellis_grammar_compile(trellis_engine *e, trellis_grammar_kind kind,
                            const char *text, size_t len,
                            const trellis_grammar_options *options,
                            trellis_grammar **out, char *err, size_t err_cap) {
    if (!e || !out)
        return tr_errf(err, err_cap, TR_ERR_INVALID_ARG, "no engine or no output");
    if (!e->gcache)
        return tr_errf(err, err_cap, TR_ERR_UNSUPPORTED,
                       "constraints are unavailable: the engine has no grammar "
                       "vocabulary");
    return tr_gcache_compile(e->gcache, kind, text, len, options, out, err,
                             err_cap);
}

int trellis_grammar_compile_choices(trellis_engine *e, const char *const *choices,
                                    int32_t n, trellis_grammar **out, char *err,
                                    size_t err_cap) {
    if (n < 0 || (n > 0 && !choices))
        return tr_errf(err, err_cap, TR_ERR_INVALID_ARG, "bad choice array (n = %d)", n);
    json_t *arr = json_array();
    if (!arr) return tr_errf(err, err_cap, TR_ERR_NOMEM, "out of memory");
    for (int32_t i = 0; i < n; i++) {
        if (!choices[i]) {
            json_decref(arr);
            return tr_errf(err, err_cap, TR_ERR_INVALID_ARG,
                           "bad choices: choice %d is NULL", i);
        }
        json_t *s = json_stringn(choices[i], strlen(choices[i]));
        if (!s) {
            json_decref(arr);
            return tr_errf(err, err_cap, TR_ERR_FORMAT,
                           "bad choices: choice %d is not valid UTF-8", i);
        }
        if (json_array_append_new(arr, s) != 0) {
            json_decref(arr);
            return tr_errf(err, err_cap, TR_ERR_NOMEM, "out of memory");
        }
    }
    char *text = json_dumps(arr, JSON_COMPACT | JSON_ENCODE_ANY);
    json_decref(arr);
    if (!text) return tr_errf(err, err_cap, TR_ERR_NOMEM, "out of memory");
    int rc = trellis_grammar_compile(e, TRELLIS_GRAMMAR_CHOICE, text, strlen(text),
                                     NULL, out, err, err_cap);
    free(text);
    return rc;
}

void trellis_grammar_cache_get_stats(trellis_engine *e,
                                     trellis_grammar_cache_stats *out) {
    if (!out) return;
    if (!e || !e->gcache) {
        memset(out, 0, sizeof *out);
        return;
    }
    tr_gcache_get_stats(e->gcache, out);
}
