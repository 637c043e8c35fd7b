/* kv_disk.c — the disk tier's store: the index of records (a hash table
 * and an LRU list under one mutex), the folder (scan, lock) and the I/O
 * thread that writes, reads, deletes and clears records in FIFO order.
 * Contract in kv_disk.h; the record format in kv_record.c.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/log.h"
#include "radix/disk/kv_disk.h"

enum { ST_WRITING = 1, ST_DISK = 2 };
enum { JOB_WRITE, JOB_READ, JOB_UNLINK, JOB_CLEAR };

typedef struct entry {
    tr_kvd_key key;
    int state;
    struct entry *hnext;
    struct entry *prev, *next; /* LRU: head = most recent */
} entry;

typedef struct job {
    int kind;
    struct job *next;
    tr_kvd_key key, parent;
    int32_t *tokens;  /* write: page_size (in the block); read: n * page_size */
    tr_kvd_key *keys; /* read: n */
    int32_t n;
    uint64_t tag;
    unsigned char *rec; /* write: header + payload (in the block) */
} job;

typedef struct answer {
    tr_kvd_answer a;
    struct answer *next;
} answer;

struct tr_kvd {
    tr_kvd_config c;
    char *folder;
    size_t hb, rec_bytes; /* header, header + payload */
    int lock_fd;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t work, idle;
    bool quit, busy;
    job *head, *tail;
    job *spare;              /* write blocks kept for reuse (a fresh large
                                block costs page faults and zeroing) */
    int n_spare;
    answer *ans_head, *ans_tail;
    uint64_t queued_bytes;
    entry **buckets;
    size_t n_buckets, n_entries;
    entry *lru_head, *lru_tail;
    tr_kvd_stats st;
};

/* ---- index (mu held) ---- */

static size_t bucket_of(const tr_kvd *k, tr_kvd_key key) {
    return (size_t)(key.a ^ (key.b >> 7)) & (k->n_buckets - 1);
}

static entry *find(const tr_kvd *k, tr_kvd_key key) {
    for (entry *e = k->buckets[bucket_of(k, key)]; e; e = e->hnext)
        if (tr_kvd_key_eq(e->key, key)) return e;
    return NULL;
}

static void lru_unlink(tr_kvd *k, entry *e) {
    if (e->prev) e->prev->next = e->next;
    else k->lru_head = e->next;
    if (e->next) e->next->prev = e->prev;
    else k->lru_tail = e->prev;
    e->prev = e->next = NULL;
}

static void lru_front(tr_kvd *k, entry *e) {
    e->prev = NULL;
    e->next = k->lru_head;
    if (k->lru_head) k->lru_head->prev = e;
    else k->lru_tail = e;
    k->lru_head = e;
}

static void grow(tr_kvd *k) {
    size_t nb = k->n_buckets * 2;
    entry **b = calloc(nb, sizeof *b);
    if (!b) return; /* longer chains, still correct */
    entry **old = k->buckets;
    size_t on = k->n_buckets;
    k->buckets = b;
    k->n_buckets = nb;
    for (size_t i = 0; i < on; i++)
        for (entry *e = old[i], *nx; e; e = nx) {
            nx = e->hnext;
            size_t j = bucket_of(k, e->key);
            e->hnext = b[j];
            b[j] = e;
        }
    free(old);
}

static entry *add(tr_kvd *k, tr_kvd_key key, int state, bool front) {
    entry *e = calloc(1, sizeof *e);
    if (!e) return NULL;
    if (k->n_entries >= k->n_buckets) grow(k);
    e->key = key;
    e->state = state;
    size_t j = bucket_of(k, key);
    e->hnext = k->buckets[j];
    k->buckets[j] = e;
    if (front) lru_front(k, e);
    else { /* the scan at open adds oldest last */
        e->prev = k->lru_tail;
        if (k->lru_tail) k->lru_tail->next = e;
        else k->lru_head = e;
        k->lru_tail = e;
    }
    k->n_entries++;
    k->st.records++;
    k->st.bytes += k->rec_bytes;
    return e;
}

static void drop(tr_kvd *k, entry *e) {
    entry **pp = &k->buckets[bucket_of(k, e->key)];
    while (*pp != e) pp = &(*pp)->hnext;
    *pp = e->hnext;
    lru_unlink(k, e);
    k->n_entries--;
    k->st.records--;
    k->st.bytes -= k->rec_bytes;
    free(e);
}

static void push_job(tr_kvd *k, job *j) {
    j->next = NULL;
    if (k->tail) k->tail->next = j;
    else k->head = j;
    k->tail = j;
    pthread_cond_signal(&k->work);
}

/* Deletes least recently used records on disk until one more fits. */
static bool make_room(tr_kvd *k) {
    while (k->st.bytes + k->rec_bytes > k->c.max_bytes) {
        entry *v = k->lru_tail;
        while (v && v->state != ST_DISK) v = v->prev;
        if (!v) return false;
        job *j = calloc(1, sizeof *j);
        if (!j) return false;
        j->kind = JOB_UNLINK;
        j->key = v->key;
        drop(k, v);
        k->st.evicted++;
        push_job(k, j);
    }
    return true;
}

/* ---- files (I/O thread, mu not held) ---- */

static void rec_path(const tr_kvd *k, tr_kvd_key key, const char *ext, char *out,
                     size_t cap) {
    snprintf(out, cap, "%s/%016" PRIx64 "%016" PRIx64 "%s", k->folder, key.a, key.b, ext);
}

static bool write_all(int fd, const unsigned char *p, size_t n) {
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return false;
        p += w;
        n -= (size_t)w;
    }
    return true;
}

static bool read_all(int fd, unsigned char *p, size_t n) {
    while (n) {
        ssize_t r = read(fd, p, n);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return false;
        p += r;
        n -= (size_t)r;
    }
    return true;
}

static void do_write(tr_kvd *k, job *j) {
    char tmp[4096], fin[4096];
    tr_kvd_expect x = {k->c.fingerprint, k->c.page_size, k->c.payload_bytes,
                       j->key, j->parent, j->tokens};
    tr_kvd_header_write(j->rec, &x, tr_kvd_hash(j->rec + k->hb, k->c.payload_bytes));
    rec_path(k, j->key, ".tmp", tmp, sizeof tmp);
    rec_path(k, j->key, ".kvp", fin, sizeof fin);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    bool ok = fd >= 0 && write_all(fd, j->rec, k->rec_bytes);
    int err = ok ? 0 : errno;
    if (fd >= 0 && close(fd) != 0 && ok) {
        ok = false;
        err = errno;
    }
    if (ok && rename(tmp, fin) != 0) {
        ok = false;
        err = errno;
    }
    if (!ok) unlink(tmp);
    pthread_mutex_lock(&k->mu);
    entry *e = find(k, j->key);
    if (ok) {
        if (e) e->state = ST_DISK;
        else unlink(fin); /* forgotten by a clear meanwhile */
        k->st.writes++;
        k->st.write_bytes += k->rec_bytes;
    } else {
        if (e && e->state == ST_WRITING) drop(k, e);
        if (k->st.write_errors++ % 1000 == 0)
            tr_log(TR_LOG_WARN, "kv disk tier: cannot write %s: %s (the page is "
                   "not kept; later failures are counted, not logged)", tmp,
                   strerror(err ? err : EIO));
    }
    k->queued_bytes -= k->c.payload_bytes;
    pthread_mutex_unlock(&k->mu);
}

/* Reads and checks one record into dst; false (and the record deleted when
 * it exists but is wrong) on any failure. */
static bool read_one(tr_kvd *k, const tr_kvd_expect *x, unsigned char *hdr,
                     unsigned char *dst, bool *missing) {
    char path[4096];
    rec_path(k, x->key, ".kvp", path, sizeof path);
    *missing = false;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        *missing = true;
        return false;
    }
    struct stat sb;
    uint64_t want_hash = 0;
    bool ok = fstat(fd, &sb) == 0 && (uint64_t)sb.st_size == k->rec_bytes &&
              read_all(fd, hdr, k->hb) &&
              tr_kvd_header_check(hdr, k->hb, x, &want_hash, NULL, 0) == TR_OK &&
              read_all(fd, dst, k->c.payload_bytes) &&
              tr_kvd_hash(dst, k->c.payload_bytes) == want_hash;
    if (ok) futimens(fd, NULL); /* recency survives a restart */
    close(fd);
    if (!ok) unlink(path);
    return ok;
}

static void do_read(tr_kvd *k, job *j) {
    answer *an = calloc(1, sizeof *an);
    unsigned char *hdr = malloc(k->hb);
    unsigned char *data = j->n ? malloc((size_t)j->n * k->c.payload_bytes) : NULL;
    int32_t good = 0;
    uint64_t corrupt = 0, miss = 0;
    if (an && hdr && data) {
        for (; good < j->n; good++) {
            tr_kvd_expect x = {k->c.fingerprint, k->c.page_size, k->c.payload_bytes,
                               j->keys[good], good ? j->keys[good - 1] : j->parent,
                               j->tokens + (size_t)good * (size_t)k->c.page_size};
            bool missing;
            if (!read_one(k, &x, hdr, data + (size_t)good * k->c.payload_bytes, &missing)) {
                pthread_mutex_lock(&k->mu);
                entry *e = find(k, x.key);
                if (e && e->state == ST_DISK) drop(k, e);
                pthread_mutex_unlock(&k->mu);
                if (missing) miss++;
                else corrupt++;
                break;
            }
        }
    }
    free(hdr);
    pthread_mutex_lock(&k->mu);
    k->st.reads++;
    k->st.read_pages += (uint64_t)good;
    k->st.read_misses += miss;
    k->st.corrupt += corrupt;
    if (an) {
        an->a = (tr_kvd_answer){j->tag, good, good ? data : NULL};
        if (!good) free(data);
        if (k->ans_tail) k->ans_tail->next = an;
        else k->ans_head = an;
        k->ans_tail = an;
    } else {
        free(data);
    }
    pthread_mutex_unlock(&k->mu);
    if (an && k->c.wake) k->c.wake(k->c.wake_user);
}

static bool is_record_name(const char *n, const char *ext) {
    size_t len = strlen(n), el = strlen(ext);
    if (len != 32 + el || strcmp(n + 32, ext) != 0) return false;
    for (int i = 0; i < 32; i++)
        if (!((n[i] >= '0' && n[i] <= '9') || (n[i] >= 'a' && n[i] <= 'f'))) return false;
    return true;
}

static void do_clear(tr_kvd *k) {
    DIR *d = opendir(k->folder);
    if (!d) return;
    char path[4096];
    for (struct dirent *de; (de = readdir(d));) {
        if (!is_record_name(de->d_name, ".kvp") && !is_record_name(de->d_name, ".tmp"))
            continue;
        snprintf(path, sizeof path, "%s/%s", k->folder, de->d_name);
        unlink(path);
    }
    closedir(d);
}

static void free_job(job *j) {
    if (!j) return;
    if (j->kind == JOB_READ) {
        free(j->keys);
        free(j->tokens);
    }
    free(j); /* a write's block holds its record */
}

/* Frees a finished job, keeping a few write blocks (mu held). */
#define SPARE_MAX 16
static void recycle(tr_kvd *k, job *j) {
    if (j->kind == JOB_WRITE && k->n_spare < SPARE_MAX) {
        j->next = k->spare;
        k->spare = j;
        k->n_spare++;
        return;
    }
    free_job(j);
}

static void *io_main(void *arg) {
    tr_kvd *k = arg;
    pthread_mutex_lock(&k->mu);
    for (;;) {
        while (!k->head && !k->quit) pthread_cond_wait(&k->work, &k->mu);
        if (!k->head) break;
        job *j = k->head;
        k->head = j->next;
        if (!k->head) k->tail = NULL;
        k->busy = true;
        pthread_mutex_unlock(&k->mu);
        char path[4096];
        switch (j->kind) {
        case JOB_WRITE: do_write(k, j); break;
        case JOB_READ: do_read(k, j); break;
        case JOB_UNLINK:
            rec_path(k, j->key, ".kvp", path, sizeof path);
            unlink(path);
            break;
        case JOB_CLEAR: do_clear(k); break;
        }
        pthread_mutex_lock(&k->mu);
        recycle(k, j);
        k->busy = false;
        if (!k->head) pthread_cond_broadcast(&k->idle);
    }
    pthread_mutex_unlock(&k->mu);
    return NULL;
}

/* ---- open: folder, lock, scan ---- */

typedef struct found {
    tr_kvd_key key;
    int64_t t_ns;
} found;

static int found_newest_first(const void *x, const void *y) {
    const found *a = x, *b = y;
    return (a->t_ns < b->t_ns) - (a->t_ns > b->t_ns);
}

static void parse_key(const char *n, tr_kvd_key *out) {
    char h[17] = {0};
    memcpy(h, n, 16);
    out->a = strtoull(h, NULL, 16);
    memcpy(h, n + 16, 16);
    out->b = strtoull(h, NULL, 16);
}

/* Lists the records, deletes leftovers and wrong sizes, and indexes the
 * newest that fit the bound (deleting the rest). */
static tr_status scan(tr_kvd *k, tr_diag *d) {
    DIR *dir = opendir(k->folder);
    if (!dir) {
        snprintf(d->message, sizeof d->message, "cannot read %.300s: %s", k->folder,
                 strerror(errno));
        return TR_ERR_IO;
    }
    found *fs = NULL;
    size_t n = 0, cap = 0;
    char path[4096];
    tr_status s = TR_OK;
    for (struct dirent *de; (de = readdir(dir));) {
        bool rec = is_record_name(de->d_name, ".kvp");
        if (!rec && !is_record_name(de->d_name, ".tmp")) continue;
        snprintf(path, sizeof path, "%s/%s", k->folder, de->d_name);
        struct stat sb;
        bool seen = rec && stat(path, &sb) == 0;
        if (!seen || (uint64_t)sb.st_size != k->rec_bytes) {
            /* a record of the wrong size fails a check as surely as one
             * failing its hash on read: counted the same (.tmp: leftovers) */
            if (seen) k->st.corrupt++;
            unlink(path);
            continue;
        }
        if (n == cap) {
            size_t nc = cap ? cap * 2 : 256;
            found *g = realloc(fs, nc * sizeof *g);
            if (!g) {
                s = TR_ERR_NOMEM;
                break;
            }
            fs = g;
            cap = nc;
        }
        parse_key(de->d_name, &fs[n].key);
        fs[n].t_ns = (int64_t)sb.st_mtim.tv_sec * 1000000000 + sb.st_mtim.tv_nsec;
        n++;
    }
    closedir(dir);
    if (s == TR_OK) {
        if (n) /* an empty folder: fs is NULL, which qsort may not get */
            qsort(fs, n, sizeof *fs, found_newest_first);
        for (size_t i = 0; i < n; i++) {
            if (k->st.bytes + k->rec_bytes <= k->c.max_bytes && !find(k, fs[i].key) &&
                add(k, fs[i].key, ST_DISK, false)) {
                k->st.found_on_open++;
                continue;
            }
            rec_path(k, fs[i].key, ".kvp", path, sizeof path);
            unlink(path);
            k->st.evicted++;
        }
    } else {
        snprintf(d->message, sizeof d->message, "out of memory scanning %.300s", k->folder);
    }
    free(fs);
    return s;
}

/* mkdir -p: every missing level of path (at most 3000 bytes). */
static bool make_dirs(const char *path) {
    char p[3072];
    snprintf(p, sizeof p, "%s", path);
    for (char *s = p + 1; *s; s++) {
        if (*s != '/') continue;
        *s = 0;
        if (mkdir(p, 0755) != 0 && errno != EEXIST) return false;
        *s = '/';
    }
    return mkdir(p, 0755) == 0 || errno == EEXIST;
}

static tr_status open_folder(tr_kvd *k, tr_diag *d) {
    if (!make_dirs(k->c.dir)) {
        snprintf(d->message, sizeof d->message, "cannot create %.300s: %s", k->c.dir,
                 strerror(errno));
        return TR_ERR_IO;
    }
    size_t len = strlen(k->c.dir) + 18;
    k->folder = malloc(len);
    if (!k->folder) return TR_ERR_NOMEM;
    snprintf(k->folder, len, "%s/%016" PRIx64, k->c.dir, k->c.fingerprint);
    if (mkdir(k->folder, 0755) != 0 && errno != EEXIST) {
        snprintf(d->message, sizeof d->message, "cannot create %.300s: %s", k->folder,
                 strerror(errno));
        return TR_ERR_IO;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/lock", k->folder);
    k->lock_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (k->lock_fd < 0) {
        snprintf(d->message, sizeof d->message, "cannot open %.300s: %s", path, strerror(errno));
        return TR_ERR_IO;
    }
    if (flock(k->lock_fd, LOCK_EX | LOCK_NB) != 0) {
        snprintf(d->message, sizeof d->message,
                 "%.150s is in use by another process (its lock %.150s is held)", k->folder, path);
        return TR_ERR_STATE;
    }
    return scan(k, d);
}

static void free_store(tr_kvd *k) {
    for (job *j = k->head, *nx; j; j = nx) {
        nx = j->next;
        free_job(j);
    }
    for (job *j = k->spare, *nx; j; j = nx) {
        nx = j->next;
        free(j);
    }
    for (answer *a = k->ans_head, *nx; a; a = nx) {
        nx = a->next;
        free(a->a.data);
        free(a);
    }
    for (entry *e = k->lru_head, *nx; e; e = nx) {
        nx = e->next;
        free(e);
    }
    free(k->buckets);
    if (k->lock_fd >= 0) close(k->lock_fd);
    free(k->folder);
    pthread_mutex_destroy(&k->mu);
    pthread_cond_destroy(&k->work);
    pthread_cond_destroy(&k->idle);
    free(k);
}

tr_status tr_kvd_open(const tr_kvd_config *c, tr_kvd **out, tr_diag *d) {
    tr_diag local = {0};
    if (!d) d = &local;
    d->message[0] = 0;
    size_t hb = c ? tr_kvd_header_bytes(c->page_size) : 0;
    if (!c || !out || !c->dir || !c->dir[0] || strlen(c->dir) > 3000 || hb == 0 ||
        c->payload_bytes == 0 || c->payload_bytes > ((uint64_t)1 << 40) ||
        c->max_bytes < hb + c->payload_bytes) {
        snprintf(d->message, sizeof d->message,
                 "bad disk tier settings (a folder, a page size of 1..65536 and a "
                 "bound of at least one record, %" PRIu64 " bytes, are needed)",
                 c ? (uint64_t)hb + c->payload_bytes : 0);
        return TR_ERR_INVALID_ARG;
    }
    tr_kvd *k = calloc(1, sizeof *k);
    if (!k) return TR_ERR_NOMEM;
    k->c = *c;
    if (!k->c.max_queued_bytes) k->c.max_queued_bytes = 64ull << 20;
    k->hb = hb;
    k->rec_bytes = hb + c->payload_bytes;
    k->lock_fd = -1;
    k->n_buckets = 1024;
    k->buckets = calloc(k->n_buckets, sizeof *k->buckets);
    pthread_mutex_init(&k->mu, NULL);
    pthread_cond_init(&k->work, NULL);
    pthread_cond_init(&k->idle, NULL);
    tr_status s = k->buckets ? open_folder(k, d) : TR_ERR_NOMEM;
    if (s == TR_OK && pthread_create(&k->thread, NULL, io_main, k) != 0) {
        snprintf(d->message, sizeof d->message, "cannot start the disk tier's thread");
        s = TR_ERR_INTERNAL;
    }
    if (s != TR_OK) {
        k->c.dir = NULL;
        free_store(k);
        return s;
    }
    k->c.dir = NULL; /* borrowed: not kept past open */
    *out = k;
    return TR_OK;
}

void tr_kvd_close(tr_kvd *k) {
    if (!k) return;
    pthread_mutex_lock(&k->mu);
    k->quit = true;
    pthread_cond_signal(&k->work);
    pthread_mutex_unlock(&k->mu);
    pthread_join(k->thread, NULL);
    free_store(k);
}

/* ---- the engine's calls ---- */

bool tr_kvd_has(tr_kvd *k, tr_kvd_key key) {
    pthread_mutex_lock(&k->mu);
    bool r = find(k, key) != NULL;
    pthread_mutex_unlock(&k->mu);
    return r;
}

/* A write's block: the job, then the record (header, payload). */
static size_t job_room(void) { return (sizeof(job) + 63) & ~(size_t)63; }

void *tr_kvd_put_begin(tr_kvd *k, tr_kvd_key key, tr_kvd_key parent,
                       const int32_t *tokens) {
    size_t ps = (size_t)k->c.page_size;
    pthread_mutex_lock(&k->mu);
    void *ret = NULL;
    if (find(k, key)) goto out;
    if (k->queued_bytes + k->c.payload_bytes > k->c.max_queued_bytes || !make_room(k)) {
        k->st.dropped_writes++;
        goto out;
    }
    unsigned char *blk = (unsigned char *)k->spare;
    if (blk) {
        k->spare = k->spare->next;
        k->n_spare--;
    } else {
        blk = malloc(job_room() + k->rec_bytes + ps * sizeof(int32_t));
    }
    if (!blk) {
        k->st.dropped_writes++;
        goto out;
    }
    if (!add(k, key, ST_WRITING, true)) {
        ((job *)blk)->kind = JOB_WRITE; /* a write block, fresh or spare */
        recycle(k, (job *)blk);
        k->st.dropped_writes++;
        goto out;
    }
    job *j = (job *)blk;
    memset(j, 0, sizeof *j);
    j->kind = JOB_WRITE;
    j->key = key;
    j->parent = parent;
    j->rec = blk + job_room();
    j->tokens = (int32_t *)(j->rec + k->rec_bytes);
    memcpy(j->tokens, tokens, ps * sizeof(int32_t));
    k->queued_bytes += k->c.payload_bytes;
    ret = j->rec + k->hb;
out:
    pthread_mutex_unlock(&k->mu);
    return ret;
}

static job *job_of(const tr_kvd *k, void *buf) {
    return (job *)((unsigned char *)buf - k->hb - job_room());
}

void tr_kvd_put_commit(tr_kvd *k, void *buf) {
    if (!buf) return;
    pthread_mutex_lock(&k->mu);
    push_job(k, job_of(k, buf));
    pthread_mutex_unlock(&k->mu);
}

void tr_kvd_put_abort(tr_kvd *k, void *buf) {
    if (!buf) return;
    job *j = job_of(k, buf);
    pthread_mutex_lock(&k->mu);
    entry *e = find(k, j->key);
    if (e && e->state == ST_WRITING) drop(k, e);
    k->queued_bytes -= k->c.payload_bytes;
    recycle(k, j);
    pthread_mutex_unlock(&k->mu);
}

tr_status tr_kvd_read(tr_kvd *k, const tr_kvd_key *keys, tr_kvd_key parent0,
                      const int32_t *tokens, int32_t n, uint64_t tag) {
    if (!k || n < 1 || !keys || !tokens) return TR_ERR_INVALID_ARG;
    size_t nt = (size_t)n * (size_t)k->c.page_size;
    job *j = calloc(1, sizeof *j);
    if (j) {
        j->keys = malloc((size_t)n * sizeof *keys);
        j->tokens = malloc(nt * sizeof *tokens);
    }
    if (!j || !j->keys || !j->tokens) {
        if (j) free_job(j);
        return TR_ERR_NOMEM;
    }
    j->kind = JOB_READ;
    memcpy(j->keys, keys, (size_t)n * sizeof *keys);
    memcpy(j->tokens, tokens, nt * sizeof *tokens);
    j->n = n;
    j->parent = parent0;
    j->tag = tag;
    pthread_mutex_lock(&k->mu);
    for (int32_t i = 0; i < n; i++) { /* asked for: not the next to go */
        entry *e = find(k, keys[i]);
        if (e) {
            lru_unlink(k, e);
            lru_front(k, e);
        }
    }
    push_job(k, j);
    pthread_mutex_unlock(&k->mu);
    return TR_OK;
}

bool tr_kvd_poll(tr_kvd *k, tr_kvd_answer *out) {
    pthread_mutex_lock(&k->mu);
    answer *a = k->ans_head;
    if (a) {
        k->ans_head = a->next;
        if (!k->ans_head) k->ans_tail = NULL;
    }
    pthread_mutex_unlock(&k->mu);
    if (!a) return false;
    *out = a->a;
    free(a);
    return true;
}

void tr_kvd_answer_free(tr_kvd_answer *a) {
    if (!a) return;
    free(a->data);
    a->data = NULL;
    a->n_valid = 0;
}

void tr_kvd_clear(tr_kvd *k) {
    job *j = calloc(1, sizeof *j);
    pthread_mutex_lock(&k->mu);
    /* queued writes and deletions are moot; reads stay (they will miss) */
    job **pp = &k->head;
    k->tail = NULL;
    while (*pp) {
        job *x = *pp;
        if (x->kind == JOB_WRITE || x->kind == JOB_UNLINK) {
            *pp = x->next;
            if (x->kind == JOB_WRITE) k->queued_bytes -= k->c.payload_bytes;
            recycle(k, x);
        } else {
            k->tail = x;
            pp = &x->next;
        }
    }
    while (k->lru_head) drop(k, k->lru_head);
    if (j) {
        j->kind = JOB_CLEAR;
        push_job(k, j);
    }
    pthread_mutex_unlock(&k->mu);
    if (!j) do_clear(k); /* no memory for a job: delete here */
}

void tr_kvd_drain(tr_kvd *k) {
    pthread_mutex_lock(&k->mu);
    while (k->head || k->busy) pthread_cond_wait(&k->idle, &k->mu);
    pthread_mutex_unlock(&k->mu);
}

void tr_kvd_stats_get(tr_kvd *k, tr_kvd_stats *out) {
    pthread_mutex_lock(&k->mu);
    *out = k->st;
    pthread_mutex_unlock(&k->mu);
}
