/* attention.cu — the CUDA backend's ops on the paged KV memory: kv_store
 * and attention, over backend.h's tr_kv_layout (F16 or F32 pages of any
 * size, per-layer sliding windows) and a ragged tr_batch.
 *
 * Layering: kernels/cuda; the table is in cuda_backend.cu.
 *
 * The batch (positions, sequences, page tables) is host memory borrowed
 * for the call (rule 3): it goes to the device as one staged block of
 * int32: pos[n] | seq[n] | first[n_seqs + 1] | pages[sum of n_pages],
 * where the page table of sequence s is pages[first[s] .. first[s + 1]).
 *
 * attention, first version: one block of 4 warps per (token, query
 * head). Warp w takes the positions lo + w, lo + w + 4, ... of the
 * token's range; per position one lane-parallel dot product (lane l holds
 * dims l, l + 32, ...; a butterfly shuffle sum), and an online softmax
 * (running max, sum, and the weighted V rows in registers). The 4 warps'
 * states are merged in warp order. The split depends on the token's
 * position range only, never on the batch: deterministic (backend.h).
 * Not yet: a KV head's rows read once for its GQA group, tiles of a
 * prefill chunk's tokens sharing K/V in shared memory, split-KV over
 * blocks for long decodes (kernels/cuda/README.md).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_fp16.h>

#include "kernels/cuda/cuda_internal.h"


const int k_warps = 4;
const int k_max_per_lane = 16; /* head_dim <= 512 */

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

struct kv_geom {
    char *base;
    int32_t n_layers, page_size, kv_dim, layer;
};

/* Element offset of (page, kind, slot)'s row: backend.h's layout for K
 * and V of one F16 or F32 type (cuda_supports_kv). */
static __device__ __forceinline__ int64_t kv_row(const kv_geom &g, int64_t page, int c, int32_t slot) {
    return (((page * g.n_layers + g.layer) * 2 + c) * g.page_size + slot) * (int64_t)g.kv_dim;
}

static __device__ __forceinline__ float to_f(float v) { return v; }
static __device__ __forceinline__ float to_f(__half v) { return __half2float(v); }
static __device__ __forceinline__ void from_f(float *d, float v) { *d = v; }
static __device__ __forceinline__ void from_f(__half *d, float v) { *d = __float2half_rn(v); }

/* One thread per (token, element) of K and of V. */
template <typename T>
static __global__ void kv_store_kernel(kv_geom g, const float *k, const float *v, dev_batch b,
                                int32_t n) {
    int64_t total = (int64_t)n * g.kv_dim;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t t = i / g.kv_dim;
        int32_t e = (int32_t)(i % g.kv_dim), p = b.pos[t];
        int32_t page = b.pages[b.first[b.seq[t]] + p / g.page_size];
        T *base = (T *)g.base;
        from_f(base + kv_row(g, page, 0, p % g.page_size) + e, k[i]);
        from_f(base + kv_row(g, page, 1, p % g.page_size) + e, v[i]);
    }
}

static __device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

template <typename T>
static __global__ void __launch_bounds__(32 * k_warps)
    attention_kernel(float *out, const float *q, kv_geom g, dev_batch b, int32_t n_heads,
                     int32_t group, int32_t head_dim, int32_t window, float scale) {
    __shared__ float st_m[k_warps], st_l[k_warps];
    __shared__ float st_acc[k_warps][k_max_per_lane * 32];
    const int32_t t = blockIdx.x, h = blockIdx.y, kvh = h / group;
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    const int32_t p = b.pos[t];
    const int32_t lo = window > 0 && p - window + 1 > 0 ? p - window + 1 : 0;
    const int32_t *table = b.pages + b.first[b.seq[t]];
    const float *qh = q + ((int64_t)t * n_heads + h) * head_dim;
    float qv[k_max_per_lane], acc[k_max_per_lane];
#pragma unroll
    for (int i = 0; i < k_max_per_lane; i++) {
        int d = lane + 32 * i;
        qv[i] = d < head_dim ? qh[d] : 0.0f;
        acc[i] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    const T *base = (const T *)g.base;
    for (int32_t j = lo + w; j <= p; j += k_warps) {
        int64_t page = table[j / g.page_size];
        int32_t slot = j % g.page_size;
        const T *kr = base + kv_row(g, page, 0, slot) + (int64_t)kvh * head_dim;
        const T *vr = base + kv_row(g, page, 1, slot) + (int64_t)kvh * head_dim;
        float dot = 0.0f;
#pragma unroll
        for (int i = 0; i < k_max_per_lane; i++) {
            int d = lane + 32 * i;
            if (d < head_dim) dot += qv[i] * to_f(kr[d]);
        }
        float sc = warp_sum(dot) * scale;
        float mn = sc > m ? sc : m;
        float corr = expf(m - mn), e = expf(sc - mn);
        l = l * corr + e;
#pragma unroll
        for (int i = 0; i < k_max_per_lane; i++) {
            int d = lane + 32 * i;
            if (d < head_dim) acc[i] = acc[i] * corr + e * to_f(vr[d]);
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
    float *oh = out + ((int64_t)t * n_heads + h) * head_dim;
#pragma unroll
    for (int i = 0; i < k_max_per_lane; i++) {
        int d = lane + 32 * i;
        if (d >= head_dim) continue;
        float v = 0.0f;
        for (int k = 0; k < k_warps; k++) v += st_acc[k][d] * f[k];
        oh[d] = v / sum;
    }
}

static kv_geom geom_of(const tr_kv_layout *kv, int32_t layer) {
    kv_geom g;
    g.base = (char *)kv->base;
    g.n_layers = kv->n_layers;
    g.page_size = kv->page_size;
    g.kv_dim = kv->n_kv_heads * kv->head_dim;
    g.layer = layer;
    return g;
}


void tr_cuda_op_kv_store(tr_stream *s, const tr_kv_layout *kv, int32_t layer,
                         const float *k, const float *v, const tr_batch *b) {
    cuda_stream *cs = tr_cuda_stream_of(s);
    if (b->n_tokens <= 0 || !tr_cuda_enter(tr_cuda_backend_of(s))) return;
    dev_batch db;
    if (!stage_batch(cs, b, &db)) return;
    kv_geom g = geom_of(kv, layer);
    int64_t total = (int64_t)b->n_tokens * g.kv_dim;
    int64_t nb = (total + 255) / 256;
    unsigned blocks = (unsigned)(nb < 65535 * 8 ? nb : 65535 * 8);
    if (kv->type_k == TR_KV_F16)
        kv_store_kernel<__half><<<blocks, 256, 0, cs->s>>>(g, k, v, db, b->n_tokens);
    else
        kv_store_kernel<float><<<blocks, 256, 0, cs->s>>>(g, k, v, db, b->n_tokens);
    tr_cuda_launched(cs, "kv_store");
}

void tr_cuda_op_attention(tr_stream *s, float *out, const float *q,
                          const tr_kv_layout *kv, int32_t layer, const tr_batch *b,
                          int32_t n_heads, float scale) {
    cuda_stream *cs = tr_cuda_stream_of(s);
    cuda_backend *c = tr_cuda_backend_of(s);
    if (b->n_tokens <= 0 || !tr_cuda_enter(c)) return;
    if (kv->head_dim > 32 * k_max_per_lane || n_heads % kv->n_kv_heads != 0 ||
        n_heads > 65535) {
        /* the model checks head shapes at load (cuda supports them all up
         * to 512); reaching here is a caller bug: make it loud */
        tr_cuda_check(c, cudaErrorInvalidValue, "attention (head_dim > 512)");
        return;
    }
    dev_batch db;
    if (!stage_batch(cs, b, &db)) return;
    kv_geom g = geom_of(kv, layer);
    int32_t window = kv->window ? kv->window[layer] : 0;
    dim3 grid((unsigned)b->n_tokens, (unsigned)n_heads);
    int32_t group = n_heads / kv->n_kv_heads;
    if (kv->type_k == TR_KV_F16)
        attention_kernel<__half><<<grid, 32 * k_warps, 0, cs->s>>>(
            out, q, g, db, n_heads, group, kv->head_dim, window, scale);
    else
        attention_kernel<float><<<grid, 32 * k_warps, 0, cs->s>>>(
            out, q, g, db, n_heads, group, kv->head_dim, window, scale);
    tr_cuda_launched(cs, "attention");
}
