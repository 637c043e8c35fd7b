/* ops.cu — the CUDA backend's row and element ops: rmsnorm, rope (normal
 * and NEOX), swiglu, geglu, add, add_bias, mul_cols, scale, softcap, get_rows.
 *
 * Layering: kernels/cuda; the table is in cuda_backend.cu.
 *
 * Numerics follow the CPU's portable loops (kernels/cpu/ops.c) operation
 * by operation: the library is compiled with --fmad=false, so a * b + c
 * rounds twice as the C code does (gcc -std=c11 does not contract) and a
 * fused multiply-add appears only where the CPU writes fmaf. rmsnorm sums
 * squares in double as the CPU does; rope computes its angles with the
 * same float running product (backend.h). What may differ is libm versus
 * CUDA's expf/tanhf/sinf/cosf (1-2 ulp), within test_backend_ops's
 * ERR_ROW. Every output element is computed by one thread, or (rmsnorm)
 * reduced by one block in a fixed tree: no atomics, nothing that depends
 * on the batch (backend.h's determinism contract).
 */
#include <math.h>
#include <string.h>

#include "kernels/cuda/cuda_internal.h"


const int k_threads = 256;

/* Blocks for n elements, one per thread, capped (the kernels stride). */
static unsigned blocks_for(int64_t n) {
    int64_t b = (n + k_threads - 1) / k_threads;
    return (unsigned)(b < 65535 * 8 ? (b > 0 ? b : 1) : 65535 * 8);
}

#define GRID_STRIDE(i, n)                                                    \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); \
         i += (int64_t)gridDim.x * blockDim.x)

/* ---- rmsnorm: one block of k_threads per row ---- */

static __global__ void rmsnorm_kernel(float *out, const float *x, const float *w, int32_t dim,
                               float eps) {
    __shared__ double part[k_threads];
    const float *xr = x + (int64_t)blockIdx.x * dim;
    float *orow = out + (int64_t)blockIdx.x * dim;
    double ss = 0.0;
    for (int32_t i = threadIdx.x; i < dim; i += blockDim.x)
        ss += (double)xr[i] * (double)xr[i];
    part[threadIdx.x] = ss;
    __syncthreads();
    for (int h = k_threads / 2; h > 0; h /= 2) { /* a fixed tree */
        if ((int)threadIdx.x < h) part[threadIdx.x] += part[threadIdx.x + h];
        __syncthreads();
    }
    float scale = 1.0f / sqrtf((float)(part[0] / dim) + eps);
    for (int32_t i = threadIdx.x; i < dim; i += blockDim.x) orow[i] = (xr[i] * scale) * w[i];
}

/* ---- rope: one thread per (token, pair) over every head ----
 * theta of pair i is pos * r^i with r^i the float running product (i
 * factors), exactly as backend.h and the CPU's rope_angles have it. */

static __global__ void rope_kernel(float *x, int32_t n, int32_t n_heads, int32_t head_dim,
                            const int32_t *pos, float theta_scale, float freq_scale,
                            int neox) {
    int32_t half = head_dim / 2;
    GRID_STRIDE(idx, (int64_t)n * half) {
        int64_t t = idx / half;
        int32_t i = (int32_t)(idx % half);
        float theta = (float)pos[t];
        for (int32_t k = 0; k < i; k++) theta *= theta_scale;
        float th = freq_scale == 1.0f ? theta : freq_scale * theta;
        float c = cosf(th), sn = sinf(th);
        float *row = x + t * (int64_t)n_heads * head_dim;
        for (int32_t h = 0; h < n_heads; h++) {
            float *v = row + (int64_t)h * head_dim;
            int32_t a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
            float p = v[a], q = v[b];
            v[a] = p * c - q * sn;
            v[b] = p * sn + q * c;
        }
    }
}

/* ---- element ops ---- */

static __global__ void swiglu_kernel(float *out, const float *g, const float *u, int64_t n) {
    GRID_STRIDE(i, n) {
        float x = g[i];
        out[i] = x / (1.0f + expf(-x)) * u[i];
    }
}

/* gelu_tanh in the CPU's sigmoid form: x / (1 + exp(-2y)). */
static __global__ void geglu_kernel(float *out, const float *g, const float *u, int64_t n) {
    GRID_STRIDE(i, n) {
        float x = g[i];
        float y2 = 1.5957691216057308f * x * (1.0f + 0.044715f * x * x);
        out[i] = x / (1.0f + expf(-y2)) * u[i];
    }
}

static __global__ void add_kernel(float *out, const float *x, int64_t n) {
    GRID_STRIDE(i, n) out[i] += x[i];
}

static __global__ void add_bias_kernel(float *x, const float *b, int64_t n, int32_t dim) {
    GRID_STRIDE(i, n) x[i] += b[i % dim];
}

static __global__ void mul_cols_kernel(float *x, const float *w, int64_t n, int32_t dim) {
    GRID_STRIDE(i, n) x[i] *= w[i % dim];
}

static __global__ void scale_kernel(float *x, float sc, int64_t n) {
    GRID_STRIDE(i, n) x[i] *= sc;
}

static __global__ void softcap_kernel(float *x, float cap, int64_t n) {
    GRID_STRIDE(i, n) x[i] = cap * tanhf(x[i] / cap);
}

static __global__ void get_rows_kernel(float *out, const float *x, int32_t dim,
                                const int32_t *rows, int32_t n) {
    GRID_STRIDE(i, (int64_t)n * dim) {
        int64_t r = i / dim;
        out[i] = x[(int64_t)rows[r] * dim + i % dim];
    }
}

static void rope_run(tr_stream *s, float *x, int32_t n, int32_t n_heads, int32_t head_dim,
              const int32_t *pos, float freq_base, float freq_scale, int neox) {
    cuda_stream *cs = tr_cuda_stream_of(s);
    if (n <= 0 || !tr_cuda_enter(tr_cuda_backend_of(s))) return;
    const int32_t *dpos = (const int32_t *)tr_cuda_stage(cs, pos, sizeof(int32_t) * (size_t)n);
    if (!dpos) return;
    /* on the host with libm, as the CPU computes it */
    float theta_scale = powf(freq_base, -2.0f / (float)head_dim);
    rope_kernel<<<blocks_for((int64_t)n * (head_dim / 2)), k_threads, 0, cs->s>>>(
        x, n, n_heads, head_dim, dpos, theta_scale, freq_scale, neox);
    tr_cuda_launched(cs, "rope");
}


/* Launches one element kernel on s (no-op for n <= 0 or after a fault). */
#define LAUNCH_ELEMS(s, n, what, kernel, ...)                                 \
    do {                                                                      \
        cuda_stream *cs_ = tr_cuda_stream_of(s);                              \
        if ((n) <= 0 || !tr_cuda_enter(tr_cuda_backend_of(s))) return;       \
        kernel<<<blocks_for(n), k_threads, 0, cs_->s>>>(__VA_ARGS__);         \
        tr_cuda_launched(cs_, what);                                          \
    } while (0)

void tr_cuda_op_rmsnorm(tr_stream *s, float *out, const float *x, const float *w,
                        int32_t n, int32_t dim, float eps) {
    cuda_stream *cs = tr_cuda_stream_of(s);
    if (n <= 0 || dim <= 0 || !tr_cuda_enter(tr_cuda_backend_of(s))) return;
    rmsnorm_kernel<<<(unsigned)n, k_threads, 0, cs->s>>>(out, x, w, dim, eps);
    tr_cuda_launched(cs, "rmsnorm");
}

void tr_cuda_op_rope(tr_stream *s, float *x, int32_t n, int32_t n_heads,
                     int32_t head_dim, const int32_t *pos, float freq_base) {
    rope_run(s, x, n, n_heads, head_dim, pos, freq_base, 1.0f, 0);
}

void tr_cuda_op_rope_neox(tr_stream *s, float *x, int32_t n, int32_t n_heads,
                          int32_t head_dim, const int32_t *pos, float freq_base,
                          float freq_scale) {
    rope_run(s, x, n, n_heads, head_dim, pos, freq_base, freq_scale, 1);
}

void tr_cuda_op_swiglu(tr_stream *s, float *out, const float *gate, const float *up,
                       int64_t n) {
    LAUNCH_ELEMS(s, n, "swiglu", swiglu_kernel, out, gate, up, n);
}

void tr_cuda_op_geglu(tr_stream *s, float *out, const float *gate, const float *up,
                      int64_t n) {
    LAUNCH_ELEMS(s, n, "geglu", geglu_kernel, out, gate, up, n);
}

void tr_cuda_op_add(tr_stream *s, float *out, const float *x, int64_t n) {
    LAUNCH_ELEMS(s, n, "add", add_kernel, out, x, n);
}

void tr_cuda_op_add_bias(tr_stream *s, float *x, const float *b, int32_t n, int32_t dim) {
    int64_t total = (int64_t)n * dim;
    if (dim <= 0) return;
    LAUNCH_ELEMS(s, total, "add_bias", add_bias_kernel, x, b, total, dim);
}

void tr_cuda_op_mul_cols(tr_stream *s, float *x, const float *w, int32_t n, int32_t dim) {
    int64_t total = (int64_t)n * dim;
    if (dim <= 0) return;
    LAUNCH_ELEMS(s, total, "mul_cols", mul_cols_kernel, x, w, total, dim);
}

void tr_cuda_op_scale(tr_stream *s, float *x, float sc, int64_t n) {
    LAUNCH_ELEMS(s, n, "scale", scale_kernel, x, sc, n);
}

void tr_cuda_op_softcap(tr_stream *s, float *x, float cap, int64_t n) {
    LAUNCH_ELEMS(s, n, "softcap", softcap_kernel, x, cap, n);
}

void tr_cuda_op_get_rows(tr_stream *s, float *out, const float *x, int32_t dim,
                         const int32_t *rows, int32_t n) {
    cuda_stream *cs = tr_cuda_stream_of(s);
    if (n <= 0 || dim <= 0 || !tr_cuda_enter(tr_cuda_backend_of(s))) return;
    const int32_t *drows =
        (const int32_t *)tr_cuda_stage(cs, rows, sizeof(int32_t) * (size_t)n);
    if (!drows) return;
    int64_t total = (int64_t)n * dim;
    get_rows_kernel<<<blocks_for(total), k_threads, 0, cs->s>>>(out, x, dim, drows, n);
    tr_cuda_launched(cs, "get_rows");
}
