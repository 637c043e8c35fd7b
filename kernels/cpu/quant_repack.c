/* quant_repack.c — row-major GGUF blocks into the 16-row interleaved
 * ("r16") layout that matmul_tile_r16 reads; the layout and why are in
 * quant_math_internal.h. Portable C: it runs once per matrix at load. */
#include <string.h>

#include "kernels/cpu/quant_internal.h"
#include "kernels/cpu/quant_math_internal.h"

/* Bytes of a block before its body (fp16 d, and m where there is one). */
static size_t header_bytes(tr_dtype t) { return cpu_q_has_min(t) ? 4 : 2; }

bool tr_cpu_repack16_supported(tr_dtype t, int64_t rows, int64_t cols) {
    return cpu_q_act_kind(t) == CPU_ACT_A32 && rows > 0 && rows % 16 == 0 &&
           tr_cpu_quant_supported(t, cols);
}

/* One chunk: block b of the 16 rows starting at `first`. */
static void repack_chunk(tr_dtype t, const uint8_t *first, size_t row_bytes,
                         int64_t b, uint8_t *chunk) {
    const size_t tsz = tr_dtype_type_size(t), hdr = header_bytes(t), nd = cpu_r16_nd(t);
    uint8_t *scales = chunk + cpu_r16_scales_off(nd);
    for (size_t r = 0; r < 16; r++) {
        const uint8_t *blk = first + r * row_bytes + (size_t)b * tsz;
        for (size_t j = 0; j < nd; j++)
            memcpy(chunk + cpu_r16_body_off(nd, r, j), blk + hdr + 4 * j, 4);
        memcpy(scales + 2 * r, blk, 2);
        if (cpu_q_has_min(t)) memcpy(scales + 32 + 2 * r, blk + 2, 2);
    }
}

void tr_cpu_repack16(tr_dtype t, const void *src, int64_t rows, int64_t cols,
                     void *dst) {
    const size_t tsz = tr_dtype_type_size(t);
    const int64_t nb = cols / 32;
    const size_t row_bytes = (size_t)nb * tsz, chunk = 16 * tsz;
    const uint8_t *s = src;
    uint8_t *d = dst;
    for (int64_t g = 0; g < rows / 16; g++)
        for (int64_t b = 0; b < nb; b++)
            repack_chunk(t, s + (size_t)g * 16 * row_bytes, row_bytes, b,
                         d + ((size_t)g * (size_t)nb + (size_t)b) * chunk);
}

void tr_cpu_r16_read_blocks(tr_dtype t, const void *r16, int64_t cols, int64_t row,
                            int64_t b0, int64_t n_blocks, void *dst) {
    const size_t tsz = tr_dtype_type_size(t), hdr = header_bytes(t), nd = cpu_r16_nd(t);
    const size_t chunk = 16 * tsz, r = (size_t)(row % 16);
    const int64_t nb = cols / 32;
    const uint8_t *grp = (const uint8_t *)r16 + (size_t)(row / 16) * (size_t)nb * chunk;
    uint8_t *out = dst;
    for (int64_t b = b0; b < b0 + n_blocks; b++, out += tsz) {
        const uint8_t *c = grp + (size_t)b * chunk, *scales = c + cpu_r16_scales_off(nd);
        memcpy(out, scales + 2 * r, 2);
        if (cpu_q_has_min(t)) memcpy(out + 2, scales + 32 + 2 * r, 2);
        for (size_t j = 0; j < nd; j++)
            memcpy(out + hdr + 4 * j, c + cpu_r16_body_off(nd, r, j), 4);
    }
}
