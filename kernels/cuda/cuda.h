/* cuda.h — the CUDA backend: its constructor, its knobs and its registry
 * entry. Everything it computes is described by kernels/backend.h; how,
 * and what is not written yet, by kernels/cuda/README.md.
 *
 * Layering: kernels/cuda (CUDA C++ inside, C linkage at this edge);
 * callers that just want "a backend" use tr_backend_new("cuda", ...) or
 * tr_backend_new("cuda:N", ...) from backend.h instead.
 *
 * Device: config.device, the CUDA ordinal (0 = the first GPU; "cuda:N"
 * sets it through the registry). Compute capability 8.0 or newer (A100,
 * H100, H200, ...): the build carries SASS for sm_80 and sm_90 and PTX
 * for newer devices. config.threads is ignored.
 *
 * Kernel sets (config.kernels): one, "sm_80" (the kernels of this
 * folder, for every device of capability >= 8.0); NULL picks it.
 *
 * Opening fails, *out untouched and diag naming the reason, with:
 *   TR_ERR_UNSUPPORTED  no CUDA driver (libcuda.so.1 not loadable), a
 *                       driver older than the runtime, no CUDA device, a
 *                       device below compute capability 8.0, or a kernel
 *                       set this device cannot run
 *   TR_ERR_INVALID_ARG  config.device outside [0, device count), or a
 *                       knob below that is not a whole number in range
 *   TR_ERR_NOT_FOUND    an unknown kernel set
 *   TR_ERR_INTERNAL     the CUDA runtime failed (its message quoted)
 * never a crash or an abort.
 *
 * Knobs (environment, read at open): TRELLIS_CUDA_MMA_MIN, the token
 * count from which the 32-block matmul runs on tensor cores (default 9,
 * 0 never; the same bits either way); TRELLIS_CUDA_ATTN_CHUNK, positions
 * per piece of a split attention row (default 128, 1..1048576).
 *
 * Memory is device memory (info.host_memory false): alloc is cudaMalloc,
 * host_alloc cudaMallocHost (page-locked), import_weights a device copy
 * of the GGUF bytes in their own types. Ops and copies are enqueued on
 * CUDA streams and may finish after the call returns (info.async).
 */
#ifndef TR_KERNELS_CUDA_CUDA_H
#define TR_KERNELS_CUDA_CUDA_H

#include "kernels/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* On failure *out is untouched and diag says why (above). cfg NULL:
 * defaults (device 0). */
tr_status tr_backend_cuda_new(const tr_backend_config *cfg, tr_backend **out,
                              tr_diag *diag);

/* The registry's entry for the CUDA backend. */
extern const tr_backend_reg tr_backend_cuda_reg;

#ifdef __cplusplus
}
#endif

#endif
