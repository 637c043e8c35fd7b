/* cpu.h — the CPU backend: its constructor, its knobs and its registry
 * entry. Everything it computes is described by kernels/backend.h.
 *
 * Layering: kernels/cpu; callers that just want "a backend" use
 * tr_backend_new("cpu", ...) from backend.h instead.
 *
 * Threads: n workers, the calling thread being worker 0 of every op
 * (kernels/cpu/threadpool_internal.h). config.threads <= 0 means one per online
 * core; at most TR_CPU_MAX_THREADS.
 *
 * Kernel sets (config.kernels; the ops' inner loops and the quantized
 * matmul together):
 *   "portable"    plain C, any CPU
 *   "avx2"        AVX2 + FMA + F16C loops
 *   "avx512vnni"  the avx2 set with the quantized matmul on 256-bit
 *                 AVX-512 VNNI (vpdpbusd)
 * NULL picks the best the CPU runs, unless the environment variable
 * TRELLIS_CPU names a set (read at creation; an unknown or unavailable
 * name is an error, never silently ignored). An explicit config.kernels
 * wins over the environment. The sets compute the quantized matmul,
 * embed, rope and kv_store bitwise alike; elsewhere (exp, sums) they may
 * differ in the last bits, within test_backend_ops's bounds.
 *
 * Memory is host memory (info.host_memory): alloc/host_alloc are 64-byte
 * aligned malloc, copies are memmove, weights are used in place. Every op
 * and copy has finished when it returns (info.async false): streams and
 * events are bookkeeping only (backend.h says why that is exact).
 */
#ifndef TR_KERNELS_CPU_CPU_H
#define TR_KERNELS_CPU_CPU_H

#include "kernels/backend.h"

#define TR_CPU_MAX_THREADS 512

/* On failure *out is untouched and diag says why (TR_ERR_INVALID_ARG:
 * threads above the maximum; TR_ERR_NOT_FOUND: an unknown kernel set;
 * TR_ERR_UNSUPPORTED: a set this CPU cannot run). cfg NULL: defaults. */
tr_status tr_backend_cpu_new(const tr_backend_config *cfg, tr_backend **out,
                             tr_diag *diag);

/* The registry's entry for the CPU backend. */
extern const tr_backend_reg tr_backend_cpu_reg;

#endif
