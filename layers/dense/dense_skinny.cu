/* dense_skinny.cu - the dense layer's few-outputs kernels (dense_skinny.h), for the forward and
 * input-gradient products of a layer with at most SKINNY_M outputs (a classifier's last layer):
 * there a tiled GEMM has almost nothing to tile and pays for a split reduction, so these take a
 * warp per example row or a thread per group of inputs instead, with no tiles and no split:
 *
 *   skinny_fwd: SKINNY_PARTS warps per example row i, each taking every SKINNY_PARTS-th piece
 *               of V inputs per lane and keeping one sum per output; each warp adds its lanes'
 *               sums by a fixed shuffle tree, then y[i][o] = the warps' sums in warp order + b[o].
 *   skinny_dx:  a thread per V consecutive inputs of a row: dx[i][c] = sum over o of
 *               dy[i][o] W[o][c], o in order.
 *
 * Both sum in a fixed order, so they are deterministic. softmax_ce.cu's dense head computes the
 * input gradient with skinny_dx's expression and order. */
#include <stdint.h>

#include "dense_skinny.h"
#include "gpu/code_anchor.cuh"
#include "gpu/cuda_check.h"
#include "gpu/pdl.cuh"
#include "gpu/vec_ops.cuh"

/* Rows per block of skinny_fwd, and warps per row (each takes every SKINNY_PARTS-th piece of the
 * row's inputs). */
#define SKINNY_ROWS 2
#define SKINNY_PARTS 4

template <int M, int V>
static __global__ void __launch_bounds__(256) skinny_fwd(const float *__restrict__ x, const float *__restrict__ w,
                                                         const float *__restrict__ b, float *__restrict__ y, int n,
                                                         int k, float *__restrict__ relu_y)
{
    bn_early_entry(); /* pdl.cuh */
    typedef typename vec_of<V>::t vt;
    __shared__ float part[SKINNY_ROWS][SKINNY_PARTS][M];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int r = warp / SKINNY_PARTS, pt = warp % SKINNY_PARTS, row = blockIdx.x * SKINNY_ROWS + r;
    float acc[M];
#pragma unroll
    for (int o = 0; o < M; o++) acc[o] = 0.0f;
    if (row < n) {
        const vt *xr = (const vt *)(x + (size_t)row * k);
        const int kv = k / V;
#pragma unroll 2
        for (int i = pt * 32 + lane; i < kv; i += 32 * SKINNY_PARTS) {
            const vt xv = xr[i];
#pragma unroll
            for (int o = 0; o < M; o++) acc[o] = dot_v(xv, ((const vt *)(w + (size_t)o * k))[i], acc[o]);
        }
    }
#pragma unroll
    for (int o = 0; o < M; o++) {
        float v = acc[o];
#pragma unroll
        for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
        if (lane == 0) part[r][pt][o] = v;
    }
    __syncthreads();
    /* The warps' sums of a row in part order, then the bias. */
    if (threadIdx.x < SKINNY_ROWS * M) {
        const int rr = threadIdx.x / M, o = threadIdx.x - rr * M, orow = blockIdx.x * SKINNY_ROWS + rr;
        if (orow < n) {
            float sum = part[rr][0][o];
#pragma unroll
            for (int q = 1; q < SKINNY_PARTS; q++) sum += part[rr][q][o];
            const float v = sum + b[o];
            y[(size_t)orow * M + o] = v;
            if (relu_y) relu_y[(size_t)orow * M + o] = relu_of(v);
        }
    }
}

template <int M, int V>
static __global__ void __launch_bounds__(256) skinny_dx(const float *__restrict__ dy, const float *__restrict__ w,
                                                        float *__restrict__ dx, int n, int k,
                                                        const float *__restrict__ mask, float *__restrict__ relu_dx)
{
    bn_early_entry(); /* pdl.cuh */
    typedef typename vec_of<V>::t vt;
    const int groups = k / V;
    const long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (long long)n * groups) return;
    const int row = (int)(idx / groups), g = (int)(idx - (long long)row * groups);
    const float *d = dy + (size_t)row * M;
    vt acc = vt(); /* zeros */
#pragma unroll
    for (int o = 0; o < M; o++) axpy_v(d[o], ((const vt *)(w + (size_t)o * k))[g], acc);
    ((vt *)(dx + (size_t)row * k))[g] = acc;
    if (relu_dx) ((vt *)(relu_dx + (size_t)row * k))[g] = masked(acc, ((const vt *)(mask + (size_t)row * k))[g]);
}

template <int M, int V>
static void launch_skinny(int kind, cudaStream_t s, const float *a, const float *b, float *d, const float *bias, int n,
                          int k, relu_epi e)
{
    if (kind == GEMM_FWD) {
        const unsigned blocks = (unsigned)((n + SKINNY_ROWS - 1) / SKINNY_ROWS);
        bn_launch_early(skinny_fwd<M, V>, dim3(blocks), dim3(32 * SKINNY_ROWS * SKINNY_PARTS), 0, s, b, a, bias, d, n,
                        k, e.relu_y);
    } else {
        const long long threads = (long long)n * (k / V);
        bn_launch_early(skinny_dx<M, V>, dim3((unsigned)((threads + 255) / 256)), dim3(256), 0, s, b, a, d, n, k,
                        e.mask, e.relu_dx);
    }
}

template <int M>
static void launch_skinny_m(int kind, cudaStream_t s, int v, const float *a, const float *b, float *d,
                            const float *bias, int n, int k, relu_epi e)
{
    if (v == 4) launch_skinny<M, 4>(kind, s, a, b, d, bias, n, k, e);
    else if (v == 2) launch_skinny<M, 2>(kind, s, a, b, d, bias, n, k, e);
    else launch_skinny<M, 1>(kind, s, a, b, d, bias, n, k, e);
}

/* The forward (a, b, d, bias: W, X, Y, b) or input-gradient (a, b, d: W, dY, dX) product by the
 * kernels above, one instance per output count (1 .. SKINNY_M), so that every loop over the
 * outputs unrolls and a lane's loads are all in flight at once, and per width of the loads the
 * operands' alignment allows (the parameters may sit at any 4-byte offset of their slab). */
extern "C" bn_status bn_dense_run_skinny(int kind, cudaStream_t s, const float *a, const float *b, float *d,
                                         const float *bias, int n, int k, int m, relu_epi e)
{
    const uintptr_t all = (uintptr_t)a | (uintptr_t)b | (uintptr_t)d | (uintptr_t)e.mask | (uintptr_t)e.relu_dx;
    const int v = k % 4 == 0 && (all & 15) == 0 ? 4 : k % 2 == 0 && (all & 7) == 0 ? 2 : 1;
    switch (m) {
#define SKINNY_CASE(M)                                           \
    case M:                                                      \
        launch_skinny_m<M>(kind, s, v, a, b, d, bias, n, k, e);  \
        break;
        SKINNY_CASE(1) SKINNY_CASE(2) SKINNY_CASE(3) SKINNY_CASE(4) SKINNY_CASE(5) SKINNY_CASE(6)
        SKINNY_CASE(7) SKINNY_CASE(8) SKINNY_CASE(9) SKINNY_CASE(10) SKINNY_CASE(11) SKINNY_CASE(12)
        SKINNY_CASE(13) SKINNY_CASE(14) SKINNY_CASE(15) SKINNY_CASE(16)
#undef SKINNY_CASE
    default: return bn_error(BN_ERR_INTERNAL, "dense: no few-outputs kernel for %d outputs", m);
    }
    BN_CUDA_LAUNCH();
    return BN_OK;
}

extern "C" bool bn_dense_skinny_fits(int kind, int n, int k, int m)
{
    /* skinny_dx's grid of n * k threads (at most one per input) stays within 2^31 blocks of 256. */
    return kind != GEMM_DW && m >= 1 && m <= SKINNY_M && k >= 1 && n >= 1 && (long long)n * k < (1LL << 39);
}

BN_CODE_ANCHOR(dense_skinny, skinny_fwd<10, 1>) /* code_load.cu */
