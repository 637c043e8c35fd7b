/* threadpool_internal.h — the CPU backend's worker pool: run one task on N threads
 * with very little dispatch cost, plus a reusable barrier for multi-phase
 * tasks.
 *
 * Layering: internal to kernels/cpu (the CPU backend owns one pool); no
 * other module includes it.
 *
 * Model: a pool of n threads where the calling thread is worker 0 and
 * n - 1 threads are owned by the pool. tr_cpu_pool_run(pool, nth, fn, ctx)
 * calls fn(ctx, ith, nth) once for every ith in [0, nth), worker 0 on the
 * calling thread, and returns when all calls have returned. A model step on
 * the tiny default model issues ~300 such runs per decoded token, so a run
 * must cost well under a microsecond when the workers are awake:
 *
 *   caller                          worker i (1 <= i < n)
 *   ------                          ---------------------
 *   fn, ctx := ...                  spin on `gen` (pause), then sleep on it
 *   pending := nth - 1                (futex on Linux, condvar elsewhere)
 *   gen := (seq + 1, nth)  ───────► sees gen change: if i < nth, fn(ctx,i,nth)
 *   fn(ctx, 0, nth)                   then pending -= 1 (the last one wakes
 *   wait until pending == 0  ◄────    the caller if it went to sleep)
 *
 * The generation word carries the run's thread count, so a worker left
 * out of a run (i >= nth) neither reads its descriptor nor is waited for:
 * a small op on a large pool costs only its participants. The sequence
 * number is 54 bits wide and never wraps. Waiting spins (pause) for the
 * first TR_POOL_SPIN_NS / 8 (a decode step's ops follow each other within
 * microseconds), then keeps spinning but yields the CPU between checks
 * until TR_POOL_SPIN_NS, then sleeps, so idle workers cost no CPU between
 * requests. The yielding phase matters on oversubscribed machines: on a
 * 2-core box at load ~6, an empty 2-thread run took 0.4-0.56 ms without it
 * (the awaited thread could not get the CPU) and 0.3-115 us with it. A sleeper is counted before it re-checks the value it waits
 * on, and a notifier reads that count after changing the value (both
 * sequentially consistent), so no wake-up is lost.
 *
 * Invariants: runs never nest (fn must not call tr_cpu_pool_run); nth is in
 * [1, n]; nth == 1 runs fn inline without touching the workers.
 *
 * Thread-safety: one thread (the owner of the backend) calls tr_cpu_pool_run
 * and tr_cpu_pool_free; tr_cpu_pool_barrier is called from inside fn, by all nth
 * participants of the current run.
 */
#ifndef TR_KERNELS_CPU_THREADPOOL_H
#define TR_KERNELS_CPU_THREADPOOL_H

#include "base/status.h"

/* How long a waiting thread spins before it sleeps. 200 us covers the gap
 * between the ops of one forward pass with a wide margin; longer gaps (the
 * engine sampling, or idle) put the workers to sleep. */
#define TR_POOL_SPIN_NS 200000ull

/* Upper bound on the pool size (far above any sane --threads). */
#define TR_POOL_MAX_THREADS 512

typedef struct cpu_pool cpu_pool;

/* The task: ith in [0, nth) says which share of the work to do. */
typedef void (*cpu_pool_fn)(void *ctx, int ith, int nth);

/* Starts n_threads - 1 threads (n_threads in [1, TR_POOL_MAX_THREADS]).
 * Returns TR_ERR_INVALID_ARG, TR_ERR_NOMEM, or TR_ERR_INTERNAL if a thread
 * cannot be created; *out is untouched on failure. */
tr_status tr_cpu_pool_new(int n_threads, cpu_pool **out);

/* Stops and joins the threads and frees the pool. NULL is a no-op. */
void tr_cpu_pool_free(cpu_pool *pool);

/* n_threads as given to tr_cpu_pool_new. */
int tr_cpu_pool_size(const cpu_pool *pool);

/* Calls fn(ctx, ith, nth) for every ith < nth (clamped to [1, size]);
 * returns when all have returned. */
void tr_cpu_pool_run(cpu_pool *pool, int nth, cpu_pool_fn fn, void *ctx);

/* Inside fn: returns when all nth participants of the current run have
 * called it. Reusable any number of times per run. Everything written
 * before the barrier by any participant is visible to all after it. */
void tr_cpu_pool_barrier(cpu_pool *pool);

#endif
