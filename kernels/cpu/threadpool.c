/* threadpool.c — see threadpool_internal.h for the protocol.
 *
 * All waiting goes through wait_change(word, v): spin while word == v for
 * up to TR_POOL_SPIN_NS, then sleep on the word's futex. Whatever changes a
 * waited-on word in a way a sleeper must see calls notify() afterwards,
 * which costs a system call only if somebody is actually asleep on it.
 */
#include "kernels/cpu/threadpool_internal.h"

#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

#include "base/util.h"

#if defined(__linux__)
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
#define POOL_FUTEX 1
#else
#define POOL_FUTEX 0
#endif

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* A value threads wait on (64 bits: never wraps), a 32-bit futex word
 * bumped whenever a waiter must be woken, and the number of threads asleep
 * on it; on a cache line of its own (the spinning readers must not share a
 * line with unrelated writes). */
typedef struct pool_word {
    alignas(64) _Atomic uint64_t value;
    _Atomic uint32_t futex;
    _Atomic uint32_t sleepers;
} pool_word;

typedef struct pool_worker {
    cpu_pool *pool;
    int ith;
    pthread_t thread;
} pool_worker;

/* The generation word packs the run's sequence number and its thread
 * count, so that a worker reads both in one load: a worker left out of a
 * run never reads that run's descriptor, and so cannot mistake a later
 * run's arguments for it. */
#define GEN_NTH_BITS 10
#define GEN_NTH_MASK ((1u << GEN_NTH_BITS) - 1)

struct cpu_pool {
    /* Run descriptor: fn and ctx are written by the caller before `gen` is
     * bumped and read by the run's participants after they see the bump
     * (release/acquire on gen); the caller writes them again only after
     * every participant has finished. */
    pool_word gen; /* (sequence << GEN_NTH_BITS) | nth; nth 0 = stop */
    cpu_pool_fn fn;
    void *ctx;
    int nth; /* of the current run, for the barrier */

    pool_word pending; /* participants that have not finished this run */

    /* Barrier: count arrivals; the last arrival bumps the phase. */
    alignas(64) _Atomic uint32_t bar_count;
    pool_word bar_phase;

    int n_threads;
    int n_started;
    uint64_t seq;
    pool_worker *workers; /* [n_threads - 1] */
#if !POOL_FUTEX
    pthread_mutex_t mu;
    pthread_cond_t cv;
#endif
};

/* ---- sleeping and waking ---- */

#if POOL_FUTEX
static void sleep_on(cpu_pool *p, pool_word *w, uint32_t f) {
    (void)p;
    /* Returns at once if the futex word no longer holds f; spurious
     * wake-ups are fine, the caller re-checks. */
    syscall(SYS_futex, (void *)&w->futex, FUTEX_WAIT_PRIVATE, f, NULL, NULL,
            0);
}
static void wake_sleepers(cpu_pool *p, pool_word *w) {
    (void)p;
    syscall(SYS_futex, (void *)&w->futex, FUTEX_WAKE_PRIVATE, INT_MAX, NULL,
            NULL, 0);
}
#else
static void sleep_on(cpu_pool *p, pool_word *w, uint32_t f) {
    pthread_mutex_lock(&p->mu);
    while (atomic_load(&w->futex) == f) pthread_cond_wait(&p->cv, &p->mu);
    pthread_mutex_unlock(&p->mu);
}
static void wake_sleepers(cpu_pool *p, pool_word *w) {
    (void)w;
    /* Taking the mutex orders this wake after a sleeper's re-check. */
    pthread_mutex_lock(&p->mu);
    pthread_mutex_unlock(&p->mu);
    pthread_cond_broadcast(&p->cv);
}
#endif

/* Returns once w->value != v (acquire). Sleeping threads are woken only by
 * notify(), so a change that a waiter must see has to be followed by it. */
static void wait_change(cpu_pool *p, pool_word *w, uint64_t v) {
    uint64_t start = 0;
    for (uint32_t i = 1;; i++) {
        if (atomic_load_explicit(&w->value, memory_order_acquire) != v) return;
        cpu_relax();
        if ((i & 63) == 0) {
            uint64_t now = tr_now_ns();
            if (start == 0) {
                start = now;
            } else if (now - start > TR_POOL_SPIN_NS) {
                break;
            } else if (now - start > TR_POOL_SPIN_NS / 8) {
                /* Past the common case: let a thread that wants this CPU
                 * (on an oversubscribed machine, maybe the very thread we
                 * wait for) run. */
                sched_yield();
            }
        }
    }
    for (;;) {
        /* All seq_cst: a notifier changes value, bumps futex, then reads
         * sleepers; we count ourselves, read futex, then re-check value. */
        atomic_fetch_add(&w->sleepers, 1);
        uint32_t f = atomic_load(&w->futex);
        if (atomic_load(&w->value) != v) {
            atomic_fetch_sub(&w->sleepers, 1);
            return;
        }
        sleep_on(p, w, f);
        atomic_fetch_sub(&w->sleepers, 1);
        if (atomic_load_explicit(&w->value, memory_order_acquire) != v) return;
    }
}

/* Call after changing w->value (seq_cst) to wake its sleepers. */
static void notify(cpu_pool *p, pool_word *w) {
    atomic_fetch_add(&w->futex, 1);
    if (atomic_load(&w->sleepers) != 0) wake_sleepers(p, w);
}

/* ---- workers ---- */

static void *worker_main(void *arg) {
    pool_worker *me = arg;
    cpu_pool *p = me->pool;
    uint64_t seen = 0; /* the pool starts at generation 0 */
    for (;;) {
        wait_change(p, &p->gen, seen);
        seen = atomic_load_explicit(&p->gen.value, memory_order_acquire);
        int nth = (int)(seen & GEN_NTH_MASK);
        if (nth == 0) break; /* the pool is being freed */
        if (me->ith >= nth) continue; /* not in this run */
        p->fn(p->ctx, me->ith, nth);
        if (atomic_fetch_sub(&p->pending.value, 1) == 1) notify(p, &p->pending);
    }
    return NULL;
}

/* Starts a run of nth threads (or, with nth == 0, the stop). */
static void publish(cpu_pool *p, int nth) {
    atomic_store_explicit(&p->pending.value, (uint64_t)(nth > 0 ? nth - 1 : 0),
                          memory_order_relaxed);
    p->seq++;
    /* seq_cst: the release that publishes the descriptor, and the store
     * half of the sleep protocol. */
    atomic_store(&p->gen.value, (p->seq << GEN_NTH_BITS) | (uint64_t)nth);
    notify(p, &p->gen);
}

static void wait_workers(cpu_pool *p) {
    for (;;) {
        uint64_t left =
            atomic_load_explicit(&p->pending.value, memory_order_acquire);
        if (left == 0) return;
        wait_change(p, &p->pending, left);
    }
}

tr_status tr_cpu_pool_new(int n_threads, cpu_pool **out) {
    if (!out || n_threads < 1 || n_threads > TR_POOL_MAX_THREADS)
        return TR_ERR_INVALID_ARG;
    cpu_pool *p = tr_aligned_alloc(sizeof *p, 64);
    if (!p) return TR_ERR_NOMEM;
    *p = (cpu_pool){.n_threads = n_threads, .nth = 1};
    pool_word *words[3] = {&p->gen, &p->pending, &p->bar_phase};
    for (int i = 0; i < 3; i++) {
        atomic_init(&words[i]->value, 0);
        atomic_init(&words[i]->futex, 0);
        atomic_init(&words[i]->sleepers, 0);
    }
    atomic_init(&p->bar_count, 0);
#if !POOL_FUTEX
    if (pthread_mutex_init(&p->mu, NULL) != 0) {
        tr_aligned_free(p);
        return TR_ERR_INTERNAL;
    }
    if (pthread_cond_init(&p->cv, NULL) != 0) {
        pthread_mutex_destroy(&p->mu);
        tr_aligned_free(p);
        return TR_ERR_INTERNAL;
    }
#endif
    if (n_threads > 1) {
        p->workers = calloc((size_t)n_threads - 1, sizeof *p->workers);
        if (!p->workers) {
            tr_cpu_pool_free(p);
            return TR_ERR_NOMEM;
        }
    }
    for (int i = 1; i < n_threads; i++) {
        pool_worker *w = &p->workers[i - 1];
        w->pool = p;
        w->ith = i;
        if (pthread_create(&w->thread, NULL, worker_main, w) != 0) {
            tr_cpu_pool_free(p); /* joins the n_started already running */
            return TR_ERR_INTERNAL;
        }
        p->n_started++;
    }
    *out = p;
    return TR_OK;
}

void tr_cpu_pool_free(cpu_pool *p) {
    if (!p) return;
    if (p->n_started > 0) {
        publish(p, 0);
        for (int i = 0; i < p->n_started; i++)
            pthread_join(p->workers[i].thread, NULL);
    }
#if !POOL_FUTEX
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
#endif
    free(p->workers);
    tr_aligned_free(p);
}

int tr_cpu_pool_size(const cpu_pool *p) { return p->n_threads; }

void tr_cpu_pool_run(cpu_pool *p, int nth, cpu_pool_fn fn, void *ctx) {
    if (nth > p->n_threads) nth = p->n_threads;
    if (nth <= 1) {
        p->nth = 1;
        fn(ctx, 0, 1);
        return;
    }
    p->fn = fn;
    p->ctx = ctx;
    p->nth = nth;
    publish(p, nth);
    fn(ctx, 0, nth);
    wait_workers(p);
}

void tr_cpu_pool_barrier(cpu_pool *p) {
    int nth = p->nth;
    if (nth <= 1) return;
    uint64_t phase =
        atomic_load_explicit(&p->bar_phase.value, memory_order_acquire);
    if (atomic_fetch_add(&p->bar_count, 1) == (uint32_t)nth - 1) {
        /* Last arrival: reset the count before releasing the others, so
         * none of them can arrive at the next barrier early. */
        atomic_store_explicit(&p->bar_count, 0, memory_order_relaxed);
        atomic_fetch_add(&p->bar_phase.value, 1); /* seq_cst */
        notify(p, &p->bar_phase);
    } else {
        wait_change(p, &p->bar_phase, phase);
    }
}
