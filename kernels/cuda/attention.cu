/* attention.cu — the CUDA backend's ops on the paged KV memory: kv_store
 * and attention, over backend.h's tr_kv_layout (pages of any size, K and
 * V each F16, F32, Q8 or Q4, per-layer sliding windows) and a ragged
 * tr_batch.
 *
 * Layering: kernels/cuda; the table is in cuda_backend.cu.
 *
 * The batch (positions, sequences, page tables) is host memory borrowed
 * for the call (rule 3): it goes to the device as one staged block of
 * int32: pos[n] | seq[n] | first[n_seqs + 1] | pages[sum of n_pages],
 * where the page table of sequence s is pages[first[s] .. first[s + 1]).
 * Rows are addressed in bytes as tr_kv_offset does (kv_geom).
 *
 * kv_store: one warp per (token, kind, KV head). Q8 and Q4 follow
 * kernels/cpu/kv_quant.c operation for operation (K's Walsh-Hadamard
 * rotation, the largest magnitude, the F16 scale rounded to nearest even
 * then up when that went down, levels rounded to nearest even), so the
 * stored bytes are the CPU backend's, which test_backend_ops checks byte
 * for byte.
 *
 * attention, split over the positions (flash-decoding): a token's range
 * lo..p is cut at absolute multiples of the backend's attn_chunk (128 by
 * default: on an H200 pieces of 32 and 64 were slower at batch 1 and 64,
 * docs/performance.md) positions, and each piece is one block of 8 warps
 * per (token, query head, piece), so one decoding sequence at 4k
 * positions keeps 32 blocks per head busy instead of one, and a warp
 * walks 16 positions (each a dependent chain of loads). In a block, warp
 * w takes the piece's positions start + w, start + w + 8, ...; per position one lane-parallel dot product (lane l
 * holds dims l, l + 32, ...; a butterfly shuffle sum) and an online
 * softmax (running max, sum, and the weighted V rows in registers); the 4
 * warps' states are merged in warp order. A range in one piece is written
 * out by its block; otherwise each block writes its piece's state (max,
 * sum, weighted V) and attention_merge_kernel folds the pieces in order.
 * The cuts depend on the token's position and window only, never on the
 * batch or on how it is launched: deterministic (backend.h), and a
 * prefill row and a decode row at the same position are cut alike
 * (cached prefixes stay bit-identical). Quantized elements are
 * dequantized exactly ((float)q * d) and go through the same arithmetic
 * as F16 ones; a rotated K has the query rotated first. Not yet: a KV
 * head's rows read once for its GQA group, tiles of a prefill chunk's
 * tokens sharing K/V in shared memory (kernels/cuda/README.md).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_fp16.h>

#include "kernels/cuda/cuda_internal.h"


const int k_warps = 8;
const int k_max_per_lane = 16; /* head_dim <= 512 */
/* Most bytes of piece states one attention launch writes; a batch whose
 * states need more is launched in groups of tokens (each row's result
 * does not depend on its group). */
const size_t k_part_cap = (size_t)128 << 20;

struct dev_batch {
    const int32_t *pos, *seq, *first, *pages;
};

/* Stages b; false (the fault set) on failure. */
static bool stage_batch(cuda_stream *cs, const tr_batch *b, dev_batch *out) {
    size_t total_pages = 0;
    for (int32_t s = 0; s < b->n_seqs; s++) total_pages += (size_t)b->n_pages[s];
    size_t words = 2 * (size_t)b->n_tokens + (size_t)b->n_seqs + 1 + total_pages;
    int32_t *h = (int32_t *)malloc(words * sizeof(int32_t));
    if (!h) {
        tr_cuda_backend_of(&cs->base)->fault = TR_ERR_NOMEM;
        return false;
    }
    int32_t *pos = h, *seq = h + b->n_tokens, *first = seq + b->n_tokens;
    int32_t *pages = first + b->n_seqs + 1;
    memcpy(pos, b->pos, sizeof(int32_t) * (size_t)b->n_tokens);
    memcpy(seq, b->seq, sizeof(int32_t) * (size_t)b->n_tokens);
    int32_t at = 0;
    for (int32_t s = 0; s < b->n_seqs; s++) {
        first[s] = at;
        memcpy(pages + at, b->page_table[s], sizeof(int32_t) * (size_t)b->n_pages[s]);
        at += b->n_pages[s];
    }
    first[b->n_seqs] = at;
    const int32_t *d = (const int32_t *)tr_cuda_stage(cs, h, words * sizeof(int32_t));
    free(h);
    if (!d) return false;
    out->pos = d;
    out->seq = d + b->n_tokens;
    out->first = out->seq + b->n_tokens;
    out->pages = out->first + b->n_seqs + 1;
    return true;
}

/* Where one layer's rows are, in bytes, as backend.h's tr_kv_offset:
 * row (page, kind c, slot) starts at
 *   base + page * page_bytes + kind_off[c] + slot * row_bytes[c]
 * and head h of it h * head_bytes[c] further. K and V have their own
 * types, so their rows differ in size; with a quantized kind beside a
 * float one, the float rows need not start at a multiple of their
 * element's size (Q8 K of 3 heads of 64 is 198 bytes a row, so the V
 * rows of a 7-position page start 2 bytes past a multiple of 4): a kind
 * whose rows are not `aligned` is read and written byte by byte. */
struct kv_geom {
    char *base;
    int64_t page_bytes;   /* tr_kv_page_bytes */
    int64_t kind_off[2];  /* tr_kv_offset(kv, layer, 0, c, 0) */
    int64_t row_bytes[2]; /* tr_kv_row_bytes */
    int32_t head_bytes[2]; /* tr_kv_head_bytes of each kind's type */
    int32_t type[2];       /* tr_kv_type of K, V */
    int32_t aligned[2];    /* every row of kind c starts at a multiple of
                              its element's size (F32 4, F16 2; always for
                              Q8, Q4, which are read by the byte) */
    int32_t page_size, n_kv_heads, head_dim;
    int32_t rot;    /* tr_kv_rotation(type_k, head_dim): K's rotation
                       block, 0 = none */
    float rot_norm; /* 1 / sqrtf(rot), computed as the CPU does */
    int32_t rot_v;  /* tr_kv_v_rotation(type_v): V's, 0 = none */
    float rot_v_norm;
};

/* (Members of kind c are picked with c ? [1] : [0]: indexing the kernel
 * parameter's arrays by a run-time c makes the compiler copy the whole
 * struct to local memory.) */
static __device__ __forceinline__ uint8_t *kv_row(const kv_geom &g, int64_t page, int c,
                                                  int32_t slot) {
    return (uint8_t *)g.base + page * g.page_bytes + (c ? g.kind_off[1] : g.kind_off[0]) +
           slot * (c ? g.row_bytes[1] : g.row_bytes[0]);
}

/* ---- element formats (backend.h's tr_kv_type) ---- */

static __device__ __forceinline__ float half_bits_to_f(uint16_t b) {
    return __half2float(__ushort_as_half(b));
}
static __device__ __forceinline__ uint16_t ld_u16(const uint8_t *p) {
    return (uint16_t)(p[0] | p[1] << 8);
}
static __device__ __forceinline__ void st_u16(uint8_t *p, uint16_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}
static __device__ __forceinline__ float ld_f32(const uint8_t *p, bool aligned) {
    if (aligned) return *(const float *)p;
    return __uint_as_float((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                           (uint32_t)p[3] << 24);
}
static __device__ __forceinline__ void st_f32(uint8_t *p, float v, bool aligned) {
    if (aligned) {
        *(float *)p = v;
        return;
    }
    uint32_t u = __float_as_uint(v);
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(u >> 8 * i);
}
static __device__ __forceinline__ float ld_f16(const uint8_t *p, bool aligned) {
    return half_bits_to_f(aligned ? *(const uint16_t *)p : ld_u16(p));
}
/* F16 by round to nearest even, as the CPU's cpu_fp32_to_fp16. */
static __device__ __forceinline__ void st_f16(uint8_t *p, float v, bool aligned) {
    uint16_t b = __half_as_ushort(__float2half_rn(v));
    if (aligned) *(uint16_t *)p = b;
    else st_u16(p, b);
}

/* backend.h's tr_kv_q4_level, indexed by nibble. */
__constant__ int8_t c_q4_levels[16] = {-127, -101, -80, -63, -49, -35, -22, -10,
                                       2,    14,   27,  40,  54,  70,  88,  111};

/* Elements lane + 32 i of one head of type T into x[i], 0 past head_dim:
 * exactly the stored values (a quantized element is (float)q * d, exact
 * in F32, backend.h). */
template <int T>
static __device__ __forceinline__ void load_head(float (&x)[k_max_per_lane], const uint8_t *head,
                                                 int32_t hd, bool aligned, int lane) {
    float dq = 0.0f;
    if (T == TR_KV_Q8) dq = half_bits_to_f(ld_u16(head + hd));
#pragma unroll
    for (int i = 0; i < k_max_per_lane; i++) {
        int d = lane + 32 * i;
        x[i] = 0.0f;
        if (T == TR_KV_Q4) {
            if (32 * i >= hd) continue;
            uint8_t b = head[16 * i + (lane & 15)];
            int nib = lane < 16 ? (b & 15) : (b >> 4);
            x[i] = (float)c_q4_levels[nib] * half_bits_to_f(ld_u16(head + hd / 2 + 2 * i));
            continue;
        }
        if (d >= hd) continue;
        if (T == TR_KV_F32) x[i] = ld_f32(head + 4 * d, aligned);
        else if (T == TR_KV_F16) x[i] = ld_f16(head + 2 * d, aligned);
        else x[i] = (float)(int8_t)head[d] * dq;
    }
}

/* x (element lane + 32 i in x[i]) times backend.h's Walsh-Hadamard
 * matrix, block elements at a time (block a power of two, 32..512,
 * dividing head_dim): the CPU's tr_cpu_kv_rotate step for step. Its
 * butterfly rounds of span 1, 2, ..., block / 2 in that order (spans
 * under 32 pair lanes, longer ones pair registers of a lane), the lower
 * element of a pair a + b and the upper a - b, then each element times
 * norm: every element goes through the same float operations as on the
 * CPU, so the stored K bytes are the CPU's. */
static __device__ __forceinline__ void kv_rotate(float (&x)[k_max_per_lane], int lane,
                                                 int32_t hd, int32_t block, float norm) {
    for (int len = 1; len < 32 && len < block; len <<= 1) {
        const bool upper = (lane & len) != 0;
#pragma unroll
        for (int i = 0; i < k_max_per_lane; i++) {
            if (32 * i >= hd) break; /* uniform across the warp */
            float o = __shfl_xor_sync(0xffffffffu, x[i], len);
            x[i] = upper ? o - x[i] : x[i] + o;
        }
    }
#pragma unroll
    for (int sh = 0; sh < 4; sh++) { /* spans 32 << sh: registers i, i | 1 << sh */
        if ((32 << sh) >= block) break;
#pragma unroll
        for (int i = 0; i < k_max_per_lane; i++) {
            if (i & (1 << sh)) continue;
            float a = x[i], b = x[i | 1 << sh];
            x[i] = a + b;
            x[i | 1 << sh] = a - b;
        }
    }
#pragma unroll
    for (int i = 0; i < k_max_per_lane; i++) x[i] *= norm;
}

/* The quantizer of kernels/cpu/kv_quant.c, operation for operation (so
 * the bytes are the CPU's): the F16 scale x / levels (x may be negative),
 * rounded one F16 further from zero when rounding to nearest went towards
 * it; stored bits in *bits. */
static __device__ __forceinline__ float kv_scale(float x, float levels, uint16_t *bits) {
    float d = x / levels;
    if (!(fabsf(d) <= 65504.0f)) d = d < 0 ? -65504.0f : 65504.0f; /* NaN, past F16 */
    uint16_t b = __half_as_ushort(__float2half_rn(d));
    if (fabsf(half_bits_to_f(b)) < fabsf(d) && (b & 0x7fff) < 0x7bff) b++;
    *bits = b;
    return half_bits_to_f(b);
}

/* round(x / d) (to nearest even, as nearbyintf) clamped to [lo, hi]; 0
 * when d is 0 or x is not a number. */
static __device__ __forceinline__ int kv_level(float x, float d, int lo, int hi) {
    if (d == 0.0f || !(x == x)) return 0;
    float r = rintf(x / d);
    if (r > (float)hi) return hi;
    if (r < (float)lo) return lo;
    return (int)r;
}

/* The nibble whose Q4 level is nearest to x / d (the lower of two
 * equally near: the count of midpoints r exceeds); the level nearest 0
 * when d is 0 or x is not a number: kv_quant.c's q4_nearest, the same
 * rule. */
static __device__ __forceinline__ int q4_nearest(float x, float d) {
    float r = x / d;
    if (d == 0.0f || !(r == r)) return 8;
    int n = 0;
#pragma unroll
    for (int k = 0; k < 15; k++) n += r > 0.5f * (float)(c_q4_levels[k] + c_q4_levels[k + 1]);
    return n;
}

/* The warp's element of largest magnitude, the lowest lane of equals (the
 * CPU's first in index order), NaN never; +0 when every element is 0. */
static __device__ __forceinline__ float warp_extreme(float e, int lane) {
    float a = fabsf(e);
    if (!(a == a)) a = -1.0f;
    int idx = lane;
    for (int o = 16; o > 0; o /= 2) {
        float ao = __shfl_xor_sync(0xffffffffu, a, o);
        float eo = __shfl_xor_sync(0xffffffffu, e, o);
        int io = __shfl_xor_sync(0xffffffffu, idx, o);
        if (ao > a || (ao == a && io < idx)) a = ao, e = eo, idx = io;
    }
    return a > 0.0f ? e : 0.0f;
}

/* The largest of the warp's m (each >= 0 and not NaN): exact, in any
 * order. */
static __device__ __forceinline__ float warp_max(float m) {
    for (int o = 16; o > 0; o /= 2) {
        float x = __shfl_xor_sync(0xffffffffu, m, o);
        m = x > m ? x : m;
    }
    return m;
}

/* |x| where it exceeds m, else m: the CPU's amax step (NaN never
 * wins). */
static __device__ __forceinline__ float amax_step(float m, float x) {
    float a = fabsf(x);
    return a > m ? a : m;
}

/* One warp per (token, kind, KV head): F32 and F16 lane-strided, any
 * head_dim; Q8 and Q4 (head_dim <= 512) hold the head in registers,
 * rotate K (backend.h's tr_kv_rotation), take the largest magnitude with
 * warp shuffles and write levels and scales as kv_quant.c does. */
static __global__ void __launch_bounds__(32 * k_warps)
    kv_store_kernel(kv_geom g, const float *k, const float *v, dev_batch b, int32_t n) {
    const int lane = threadIdx.x & 31;
    const int32_t hd = g.head_dim, n_kv = g.n_kv_heads;
    const int64_t items = (int64_t)n * 2 * n_kv;
    for (int64_t it = (int64_t)blockIdx.x * k_warps + (threadIdx.x >> 5); it < items;
         it += (int64_t)gridDim.x * k_warps) {
        const int64_t t = it / (2 * n_kv);
        const int c = (int)(it / n_kv % 2);
        const int32_t h = (int32_t)(it % n_kv), p = b.pos[t];
        const int32_t page = b.pages[b.first[b.seq[t]] + p / g.page_size];
        uint8_t *head = kv_row(g, page, c, p % g.page_size) +
                        (int64_t)h * (c ? g.head_bytes[1] : g.head_bytes[0]);
        const float *src = (c ? v : k) + (t * n_kv + h) * hd;
        const int type = c ? g.type[1] : g.type[0];
        const bool al = (c ? g.aligned[1] : g.aligned[0]) != 0;
        if (type == TR_KV_F32 || type == TR_KV_F16) {
            for (int32_t d = lane; d < hd; d += 32) {
                if (type == TR_KV_F32) st_f32(head + 4 * d, src[d], al);
                else st_f16(head + 2 * d, src[d], al);
            }
            continue;
        }
        float x[k_max_per_lane];
#pragma unroll
        for (int i = 0; i < k_max_per_lane; i++) {
            int d = lane + 32 * i;
            x[i] = d < hd ? src[d] : 0.0f;
        }
        if (c == 0 && g.rot) kv_rotate(x, lane, hd, g.rot, g.rot_norm);
        if (c == 1 && g.rot_v) kv_rotate(x, lane, hd, g.rot_v, g.rot_v_norm);
        uint16_t bits;
        if (type == TR_KV_Q8) {
            float m = 0.0f;
#pragma unroll
            for (int i = 0; i < k_max_per_lane; i++)
                if (lane + 32 * i < hd) m = amax_step(m, x[i]);
            float d = kv_scale(warp_max(m), 127.0f, &bits);
#pragma unroll
            for (int i = 0; i < k_max_per_lane; i++) {
                int e = lane + 32 * i;
                if (e < hd) head[e] = (uint8_t)(int8_t)kv_level(x[i], d, -127, 127);
            }
            if (lane == 0) st_u16(head + hd, bits);
            continue;
        }
        /* Q4: group i is register i of every lane (head_dim % 32 == 0);
         * lane j < 16 packs element j (low nibble) with element 16 + j,
         * which lane 16 + j holds (high nibble) */
#pragma unroll
        for (int i = 0; i < k_max_per_lane; i++) {
            if (32 * i >= hd) break;
            float d = kv_scale(-warp_extreme(x[i], lane), 127.0f, &bits);
            int q = q4_nearest(x[i], d);
            int hi = __shfl_down_sync(0xffffffffu, q, 16);
            if (lane < 16) head[16 * i + lane] = (uint8_t)(q | hi << 4);
            if (lane == 0) st_u16(head + hd / 2 + 2 * i, bits);
        }
    }
}

/* The first position a token at p reads with a window (0: every one). */
static __host__ __device__ __forceinline__ int32_t attn_lo(int32_t p, int32_t window) {
    return window > 0 && p - window + 1 > 0 ? p - window + 1 : 0;
}

/* How many pieces of `chunk` positions the range lo..p spans. */
static __host__ __device__ __forceinline__ int32_t attn_pieces(int32_t p, int32_t window,
                                                               int32_t chunk) {
    return p / chunk - attn_lo(p, window) / chunk + 1;
}

static __device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* K of type TK and V of type TV (one instantiation per pair). With a
 * rotated K (backend.h), the query is rotated the same way first, in
 * registers, as the CPU rotates it before its dot products. Each K and V
 * element is the stored value, exact (load_head), then the same
 * arithmetic for every type. */
/* Where a split row's piece states go: token t0 + blockIdx.x's piece c
 * of head h is rec + ((blockIdx.x * n_heads + h) * pieces + c) * (head_dim
 * + 2): its max, its sum, then its weighted V row. */
struct attn_parts {
    float *rec;
    int32_t t0, pieces;
    int32_t chunk; /* positions per piece (the backend's attn_chunk) */
};

/* K of type TK and V of type TV (one instantiation per pair). With a
 * rotated K (backend.h), the query is rotated the same way first, in
 * registers, as the CPU rotates it before its dot products. Each K and V
 * element is the stored value, exact (load_head), then the same
 * arithmetic for every type. Block (x, h, c): token parts.t0 + x, query
 * head h, piece c of its range (none past the range's last). */
template <int TK, int TV>
static __global__ void __launch_bounds__(32 * k_warps)
    attention_kernel(float *out, const float *q, kv_geom g, dev_batch b, int32_t n_heads,
                     int32_t group, int32_t window, float scale, attn_parts parts) {
    __shared__ float st_m[k_warps], st_l[k_warps];
    __shared__ float st_acc[k_warps][k_max_per_lane * 32];
    const int32_t t = parts.t0 + (int32_t)blockIdx.x, h = blockIdx.y, kvh = h / group;
    const int32_t head_dim = g.head_dim;
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    const int32_t p = b.pos[t];
    const int32_t chunk = parts.chunk;
    const int32_t lo = attn_lo(p, window), n_pieces = attn_pieces(p, window, chunk);
    const int32_t piece = (int32_t)blockIdx.z;
    if (piece >= n_pieces) return; /* the whole block: before any barrier */
    const int32_t first = (lo / chunk + piece) * chunk;
    const int32_t start = first > lo ? first : lo;
    const int32_t end = first + chunk - 1 < p ? first + chunk - 1 : p;
    const int32_t *table = b.pages + b.first[b.seq[t]];
    const float *qh = q + ((int64_t)t * n_heads + h) * head_dim;
    const bool al_k = g.aligned[0] != 0, al_v = g.aligned[1] != 0;
    float qv[k_max_per_lane], acc[k_max_per_lane];
#pragma unroll
    for (int i = 0; i < k_max_per_lane; i++) {
        int d = lane + 32 * i;
        qv[i] = d < head_dim ? qh[d] : 0.0f;
        acc[i] = 0.0f;
    }
    if ((TK == TR_KV_Q8 || TK == TR_KV_Q4) && g.rot)
        kv_rotate(qv, lane, head_dim, g.rot, g.rot_norm);
    float m = -INFINITY, l = 0.0f;
    for (int32_t j = start + w; j <= end; j += k_warps) {
        int64_t page = table[j / g.page_size];
        int32_t slot = j % g.page_size;
        const uint8_t *kr = kv_row(g, page, 0, slot) + (int64_t)kvh * g.head_bytes[0];
        const uint8_t *vr = kv_row(g, page, 1, slot) + (int64_t)kvh * g.head_bytes[1];
        float kx[k_max_per_lane], vx[k_max_per_lane];
        load_head<TK>(kx, kr, head_dim, al_k, lane);
        float dot = 0.0f;
#pragma unroll
        for (int i = 0; i < k_max_per_lane; i++) {
            int d = lane + 32 * i;
            if (d < head_dim) dot += qv[i] * kx[i];
        }
        float sc = warp_sum(dot) * scale;
        float mn = sc > m ? sc : m;
        float corr = expf(m - mn), e = expf(sc - mn);
        l = l * corr + e;
        load_head<TV>(vx, vr, head_dim, al_v, lane);
#pragma unroll
        for (int i = 0; i < k_max_per_lane; i++) {
            int d = lane + 32 * i;
            if (d < head_dim) acc[i] = acc[i] * corr + e * vx[i];
        }
        m = mn;
    }
    if (lane == 0) {
        st_m[w] = m;
        st_l[w] = l;
    }
#pragma unroll
    for (int i = 0; i < k_max_per_lane; i++) st_acc[w][lane + 32 * i] = acc[i];
    __syncthreads();
    if (w != 0) return;
    float big = st_m[0];
    for (int k = 1; k < k_warps; k++) big = st_m[k] > big ? st_m[k] : big;
    float sum = 0.0f, f[k_warps];
    for (int k = 0; k < k_warps; k++) { /* an empty warp: m = -inf, f = 0 */
        f[k] = st_m[k] == -INFINITY ? 0.0f : expf(st_m[k] - big);
        sum += st_l[k] * f[k];
    }
    /* one piece: the row itself; else this piece's state for the merge
     * (parts.rec is NULL when no row of the launch is split) */
    float *oh = out + ((int64_t)t * n_heads + h) * head_dim;
    if (n_pieces > 1) {
        float *rec = parts.rec + (((int64_t)blockIdx.x * n_heads + h) * parts.pieces + piece) *
                                     (head_dim + 2);
        if (lane == 0) {
            rec[0] = big;
            rec[1] = sum;
        }
        oh = rec + 2;
    }
#pragma unroll
    for (int i = 0; i < k_max_per_lane; i++) {
        int d = lane + 32 * i;
        if (d >= head_dim) continue;
        float v = 0.0f;
        for (int k = 0; k < k_warps; k++) v += st_acc[k][d] * f[k];
        oh[d] = n_pieces == 1 ? v / sum : v;
    }
}

/* One warp per (token parts.t0 + x, head h) of a row split in pieces:
 * the pieces' states folded in piece order, as a block folds its warps
 * (the row's result does not depend on the launch). One-piece rows were
 * written by attention_kernel. */
static __global__ void attention_merge_kernel(float *out, attn_parts parts, dev_batch b,
                                              int32_t n_heads, int32_t head_dim,
                                              int32_t window) {
    const int32_t t = parts.t0 + (int32_t)blockIdx.x, h = blockIdx.y;
    const int lane = threadIdx.x;
    const int32_t n_pieces = attn_pieces(b.pos[t], window, parts.chunk);
    if (n_pieces == 1) return;
    const int64_t stride = head_dim + 2;
    const float *rec =
        parts.rec + ((int64_t)blockIdx.x * n_heads + h) * parts.pieces * stride;
    float big = rec[0];
    for (int32_t c = 1; c < n_pieces; c++) big = rec[c * stride] > big ? rec[c * stride] : big;
    float sum = 0.0f;
    for (int32_t c = 0; c < n_pieces; c++) { /* no piece is empty: m is finite */
        float m = rec[c * stride];
        sum += rec[c * stride + 1] * (m == -INFINITY ? 0.0f : expf(m - big));
    }
    float *oh = out + ((int64_t)t * n_heads + h) * head_dim;
    for (int32_t d = lane; d < head_dim; d += 32) {
        float v = 0.0f;
        for (int32_t c = 0; c < n_pieces; c++) {
            float m = rec[c * stride];
            v += rec[c * stride + 2 + d] * (m == -INFINITY ? 0.0f : expf(m - big));
        }
        oh[d] = v / sum;
    }
}

/* One warp per output head: rotated back over blocks of `block`
 * (backend.h's tr_kv_v_rotation; the CPU's rotation step for step). */
static __global__ void __launch_bounds__(32 * k_warps)
    unrotate_kernel(float *out, int64_t heads, int32_t hd, int32_t block, float norm) {
    const int lane = threadIdx.x & 31;
    for (int64_t it = (int64_t)blockIdx.x * k_warps + (threadIdx.x >> 5); it < heads;
         it += (int64_t)gridDim.x * k_warps) {
        float *oh = out + it * hd;
        float x[k_max_per_lane];
#pragma unroll
        for (int i = 0; i < k_max_per_lane; i++) {
            int d = lane + 32 * i;
            x[i] = d < hd ? oh[d] : 0.0f;
        }
        kv_rotate(x, lane, hd, block, norm);
#pragma unroll
        for (int i = 0; i < k_max_per_lane; i++) {
            int d = lane + 32 * i;
            if (d < hd) oh[d] = x[i];
        }
    }
}

typedef void (*attention_fn)(float *, const float *, kv_geom, dev_batch, int32_t, int32_t,
                             int32_t, float, attn_parts);

/* [type_k][type_v], indexed by tr_kv_type (F16, F32, Q8, Q4). */
#define TR_ATTN_ROW(K)                                                                  \
    {attention_kernel<K, TR_KV_F16>, attention_kernel<K, TR_KV_F32>,                    \
     attention_kernel<K, TR_KV_Q8>, attention_kernel<K, TR_KV_Q4>}
static const attention_fn k_attention[TR_KV_TYPE_COUNT][TR_KV_TYPE_COUNT] = {
    TR_ATTN_ROW(TR_KV_F16), TR_ATTN_ROW(TR_KV_F32), TR_ATTN_ROW(TR_KV_Q8),
    TR_ATTN_ROW(TR_KV_Q4)};
#undef TR_ATTN_ROW

/* The element size a kind's rows must be aligned to for whole-element
 * access (1: read by the byte anyway). */
static size_t kv_elem_align(tr_kv_type t) {
    return t == TR_KV_F32 ? 4 : t == TR_KV_F16 ? 2 : 1;
}

static kv_geom geom_of(const tr_kv_layout *kv, int32_t layer) {
    kv_geom g;
    g.base = (char *)kv->base;
    g.page_bytes = (int64_t)tr_kv_page_bytes(kv);
    for (int c = 0; c < 2; c++) {
        tr_kv_type t = c ? kv->type_v : kv->type_k;
        g.kind_off[c] = (int64_t)tr_kv_offset(kv, layer, 0, c, 0);
        g.row_bytes[c] = (int64_t)tr_kv_row_bytes(kv, c);
        g.head_bytes[c] = (int32_t)tr_kv_head_bytes(t, kv->head_dim);
        g.type[c] = (int32_t)t;
        uint64_t at = (uint64_t)(uintptr_t)kv->base | (uint64_t)g.page_bytes |
                      (uint64_t)g.kind_off[c] | (uint64_t)g.row_bytes[c];
        g.aligned[c] = at % kv_elem_align(t) == 0;
    }
    g.page_size = kv->page_size;
    g.n_kv_heads = kv->n_kv_heads;
    g.head_dim = kv->head_dim;
    g.rot = tr_kv_rotation(kv->type_k, kv->head_dim);
    g.rot_norm = g.rot ? 1.0f / sqrtf((float)g.rot) : 1.0f;
    g.rot_v = tr_kv_v_rotation(kv->type_v);
    g.rot_v_norm = g.rot_v ? 1.0f / sqrtf((float)g.rot_v) : 1.0f;
    return g;
}

/* Whether kv's types are known and can hold its heads (Q4: head_dim a
 * multiple of 32); the model checks this at load (supports_kv and
 * tr_kv_head_bytes), so false is a caller bug. */
static bool kv_types_ok(const tr_kv_layout *kv) {
    return (unsigned)kv->type_k < TR_KV_TYPE_COUNT && (unsigned)kv->type_v < TR_KV_TYPE_COUNT &&
           tr_kv_row_bytes(kv, 0) > 0 && tr_kv_row_bytes(kv, 1) > 0;
}

static bool kv_quantized(tr_kv_type t) { return t == TR_KV_Q8 || t == TR_KV_Q4; }

void tr_cuda_op_kv_store(tr_stream *s, const tr_kv_layout *kv, int32_t layer,
                         const float *k, const float *v, const tr_batch *b) {
    cuda_stream *cs = tr_cuda_stream_of(s);
    cuda_backend *c = tr_cuda_backend_of(s);
    if (b->n_tokens <= 0 || !tr_cuda_enter(c)) return;
    if (!kv_types_ok(kv) ||
        ((kv_quantized(kv->type_k) || kv_quantized(kv->type_v)) &&
         kv->head_dim > 32 * k_max_per_lane)) {
        /* a quantized head is held in registers, as attention's (which
         * takes head_dim <= 512 for every type): a caller bug, made loud */
        tr_cuda_check(c, cudaErrorInvalidValue, "kv_store (KV types or head_dim > 512)");
        return;
    }
    dev_batch db;
    if (!stage_batch(cs, b, &db)) return;
    kv_geom g = geom_of(kv, layer);
    int64_t warps = (int64_t)b->n_tokens * 2 * kv->n_kv_heads;
    int64_t nb = (warps + k_warps - 1) / k_warps;
    unsigned blocks = (unsigned)(nb < 65535 * 8 ? nb : 65535 * 8);
    kv_store_kernel<<<blocks, 32 * k_warps, 0, cs->s>>>(g, k, v, db, b->n_tokens);
    tr_cuda_launched(cs, "kv_store");
}

/* The tokens t0..*t1 one launch takes: as many as keep their piece
 * states within k_part_cap (at least one); returns the most pieces of
 * their rows (the grid's third dimension). */
static int32_t attn_group(const tr_batch *b, int32_t window, int32_t chunk, size_t rec_bytes,
                          int32_t t0, int32_t *t1) {
    int32_t most = 1, t = t0;
    for (; t < b->n_tokens; t++) {
        int32_t n = attn_pieces(b->pos[t], window, chunk), m = n > most ? n : most;
        if (t > t0 && m > 1 && (size_t)(t - t0 + 1) * (size_t)m * rec_bytes > k_part_cap) break;
        most = m;
    }
    *t1 = t;
    return most;
}

void tr_cuda_op_attention(tr_stream *s, float *out, const float *q,
                          const tr_kv_layout *kv, int32_t layer, const tr_batch *b,
                          int32_t n_heads, float scale) {
    cuda_stream *cs = tr_cuda_stream_of(s);
    cuda_backend *c = tr_cuda_backend_of(s);
    if (b->n_tokens <= 0 || !tr_cuda_enter(c)) return;
    if (kv->head_dim > 32 * k_max_per_lane || n_heads % kv->n_kv_heads != 0 ||
        n_heads > 65535 || !kv_types_ok(kv)) {
        /* the model checks head shapes and KV types at load (cuda
         * supports every type, heads up to 512); reaching here is a
         * caller bug: make it loud */
        tr_cuda_check(c, cudaErrorInvalidValue, "attention (KV types or head_dim > 512)");
        return;
    }
    dev_batch db;
    if (!stage_batch(cs, b, &db)) return;
    kv_geom g = geom_of(kv, layer);
    int32_t window = kv->window ? kv->window[layer] : 0;
    int32_t group = n_heads / kv->n_kv_heads;
    size_t rec_bytes = sizeof(float) * (size_t)(kv->head_dim + 2) * (size_t)n_heads;
    for (int32_t t0 = 0, t1; t0 < b->n_tokens; t0 = t1) {
        attn_parts parts = {NULL, t0, 0, c->attn_chunk};
        parts.pieces = attn_group(b, window, c->attn_chunk, rec_bytes, t0, &t1);
        if (parts.pieces > 1) {
            size_t bytes = (size_t)(t1 - t0) * (size_t)parts.pieces * rec_bytes;
            if (!(parts.rec = (float *)tr_cuda_scratch(cs, bytes))) return;
        }
        dim3 grid((unsigned)(t1 - t0), (unsigned)n_heads, (unsigned)parts.pieces);
        k_attention[kv->type_k][kv->type_v]<<<grid, 32 * k_warps, 0, cs->s>>>(
            out, q, g, db, n_heads, group, window, scale, parts);
        tr_cuda_launched(cs, "attention");
        if (parts.pieces == 1) continue;
        attention_merge_kernel<<<dim3((unsigned)(t1 - t0), (unsigned)n_heads), 32, 0, cs->s>>>(
            out, parts, db, n_heads, kv->head_dim, window);
        tr_cuda_launched(cs, "attention (merge)");
    }
    if (g.rot_v) { /* rotated V rows give rotated outputs (backend.h) */
        int64_t heads = (int64_t)b->n_tokens * n_heads, nb = (heads + k_warps - 1) / k_warps;
        unrotate_kernel<<<(unsigned)(nb < 65535 * 8 ? nb : 65535 * 8), 32 * k_warps, 0, cs->s>>>(
            out, heads, kv->head_dim, g.rot_v, g.rot_v_norm);
        tr_cuda_launched(cs, "attention (V rotation)");
    }
}
