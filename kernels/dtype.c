/* dtype.c — the GGML type table. Block layouts: ggml's ggml-common.h
 * (e.g. Q4_K = fp16 d, fp16 dmin, 12 bytes of 6-bit scales, 128 bytes of
 * nibbles = 144 bytes per 256 elements). */
#include "kernels/dtype.h"

typedef struct dtype_info {
    const char *name;
    uint32_t block_size;
    uint32_t type_size;
    bool computable;
} dtype_info;

static const dtype_info k_types[TR_DTYPE_COUNT_] = {
    [TR_DTYPE_F32] = {"F32", 1, 4, true},
    [TR_DTYPE_F16] = {"F16", 1, 2, true},
    [TR_DTYPE_Q4_0] = {"Q4_0", 32, 18, true},
    [TR_DTYPE_Q4_1] = {"Q4_1", 32, 20, true},
    [TR_DTYPE_Q5_0] = {"Q5_0", 32, 22, true},
    [TR_DTYPE_Q5_1] = {"Q5_1", 32, 24, true},
    [TR_DTYPE_Q8_0] = {"Q8_0", 32, 34, true},
    [TR_DTYPE_Q8_1] = {"Q8_1", 32, 36, false},
    [TR_DTYPE_Q2_K] = {"Q2_K", 256, 84, false},
    [TR_DTYPE_Q3_K] = {"Q3_K", 256, 110, false},
    [TR_DTYPE_Q4_K] = {"Q4_K", 256, 144, true},
    [TR_DTYPE_Q5_K] = {"Q5_K", 256, 176, true},
    [TR_DTYPE_Q6_K] = {"Q6_K", 256, 210, true},
    [TR_DTYPE_Q8_K] = {"Q8_K", 256, 292, false},
    [TR_DTYPE_IQ2_XXS] = {"IQ2_XXS", 256, 66, false},
    [TR_DTYPE_IQ2_XS] = {"IQ2_XS", 256, 74, false},
    [TR_DTYPE_IQ3_XXS] = {"IQ3_XXS", 256, 98, false},
    [TR_DTYPE_IQ1_S] = {"IQ1_S", 256, 50, false},
    [TR_DTYPE_IQ4_NL] = {"IQ4_NL", 32, 18, false},
    [TR_DTYPE_IQ3_S] = {"IQ3_S", 256, 110, false},
    [TR_DTYPE_IQ2_S] = {"IQ2_S", 256, 82, false},
    [TR_DTYPE_IQ4_XS] = {"IQ4_XS", 256, 136, false},
    [TR_DTYPE_I8] = {"I8", 1, 1, false},
    [TR_DTYPE_I16] = {"I16", 1, 2, false},
    [TR_DTYPE_I32] = {"I32", 1, 4, false},
    [TR_DTYPE_I64] = {"I64", 1, 8, false},
    [TR_DTYPE_F64] = {"F64", 1, 8, false},
    [TR_DTYPE_IQ1_M] = {"IQ1_M", 256, 56, false},
    [TR_DTYPE_BF16] = {"BF16", 1, 2, true},
    [TR_DTYPE_TQ1_0] = {"TQ1_0", 256, 54, false},
    [TR_DTYPE_TQ2_0] = {"TQ2_0", 256, 66, false},
    [TR_DTYPE_MXFP4] = {"MXFP4", 32, 17, false},
};

bool tr_dtype_known(uint32_t id) {
    return id < TR_DTYPE_COUNT_ && k_types[id].name != NULL;
}

const char *tr_dtype_name(uint32_t id) {
    return tr_dtype_known(id) ? k_types[id].name : "unknown";
}

uint32_t tr_dtype_block_size(uint32_t id) {
    return tr_dtype_known(id) ? k_types[id].block_size : 0;
}

uint32_t tr_dtype_type_size(uint32_t id) {
    return tr_dtype_known(id) ? k_types[id].type_size : 0;
}

bool tr_dtype_row_bytes(uint32_t id, uint64_t n, uint64_t *out) {
    if (!tr_dtype_known(id)) return false;
    const dtype_info *t = &k_types[id];
    if (n % t->block_size != 0) return false;
    return !__builtin_mul_overflow(n / t->block_size, (uint64_t)t->type_size,
                                   out);
}

bool tr_dtype_computable(uint32_t id) {
    return tr_dtype_known(id) && k_types[id].computable;
}
