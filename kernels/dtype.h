/* dtype.h — tensor element types (the GGML type ids, as GGUF stores them).
 *
 * Layering: bottom (kernels); gguf, model and backends include it.
 * A quantized type packs `block_size` elements into `type_size` bytes; a
 * row of n elements (n a multiple of block_size) takes
 * n / block_size * type_size bytes. The table knows every type GGUF files
 * may contain, so that any file can be parsed and described; which types the
 * backends can compute with is a separate question (tr_dtype_computable).
 * Thread-safe: constant tables only.
 */
#ifndef TR_KERNELS_DTYPE_H
#define TR_KERNELS_DTYPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* C linkage for the CUDA backend's .cu files (compiled as C++). */
#ifdef __cplusplus
extern "C" {
#endif

typedef enum tr_dtype {
    TR_DTYPE_F32 = 0,
    TR_DTYPE_F16 = 1,
    TR_DTYPE_Q4_0 = 2,
    TR_DTYPE_Q4_1 = 3,
    TR_DTYPE_Q5_0 = 6,
    TR_DTYPE_Q5_1 = 7,
    TR_DTYPE_Q8_0 = 8,
    TR_DTYPE_Q8_1 = 9,
    TR_DTYPE_Q2_K = 10,
    TR_DTYPE_Q3_K = 11,
    TR_DTYPE_Q4_K = 12,
    TR_DTYPE_Q5_K = 13,
    TR_DTYPE_Q6_K = 14,
    TR_DTYPE_Q8_K = 15,
    TR_DTYPE_IQ2_XXS = 16,
    TR_DTYPE_IQ2_XS = 17,
    TR_DTYPE_IQ3_XXS = 18,
    TR_DTYPE_IQ1_S = 19,
    TR_DTYPE_IQ4_NL = 20,
    TR_DTYPE_IQ3_S = 21,
    TR_DTYPE_IQ2_S = 22,
    TR_DTYPE_IQ4_XS = 23,
    TR_DTYPE_I8 = 24,
    TR_DTYPE_I16 = 25,
    TR_DTYPE_I32 = 26,
    TR_DTYPE_I64 = 27,
    TR_DTYPE_F64 = 28,
    TR_DTYPE_IQ1_M = 29,
    TR_DTYPE_BF16 = 30,
    TR_DTYPE_TQ1_0 = 34,
    TR_DTYPE_TQ2_0 = 35,
    TR_DTYPE_MXFP4 = 39,
    TR_DTYPE_COUNT_ = 40 /* one past the largest id */
} tr_dtype;

/* true if id names a type in the table (ids 4, 5, 31-33, 36-38 were
 * removed from GGML and are rejected). */
bool tr_dtype_known(uint32_t id);
/* "Q4_1"; "unknown" for unknown ids. */
const char *tr_dtype_name(uint32_t id);
/* Elements per block (1 for plain types); 0 for unknown ids. */
uint32_t tr_dtype_block_size(uint32_t id);
/* Bytes per block; 0 for unknown ids. */
uint32_t tr_dtype_type_size(uint32_t id);
/* Bytes of a row of n elements. Returns false if the id is unknown, n is
 * not a multiple of the block size, or the size overflows. */
bool tr_dtype_row_bytes(uint32_t id, uint64_t n, uint64_t *out);
/* true for the types the matmul/embedding kernels implement: F32, F16,
 * BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K. */
bool tr_dtype_computable(uint32_t id);

#ifdef __cplusplus
}
#endif

#endif
