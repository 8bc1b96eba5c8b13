/* dense_bias.cuh - the dense layer's bias kernels, on FP32 and BF16 blobs alike (element type T):
 * dense.cu runs them on FP32, dense_bf16.cu on BF16, with the same arithmetic in FP32. For .cu
 * files only. */
#ifndef BN_DENSE_BIAS_CUH
#define BN_DENSE_BIAS_CUH

#include <stddef.h>

#include "gpu/bf16.cuh"
#include "gpu/pdl.cuh"

/* Column tile of the bias-gradient kernel: BIAS_COLS columns per block, BIAS_ROWS threads
 * walking down each column. */
#define BIAS_COLS 32
#define BIAS_ROWS 16

/* y[i][o] = b[o] for every row i of the batch: a product accumulated onto y then adds the bias. */
template <typename T>
static __global__ void seed_bias(T *__restrict__ y, const T *__restrict__ b, size_t total, int m)
{
    bn_early_entry(); /* pdl.cuh */
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) y[i] = b[i % m];
}

/* db[o] += sum over the n rows of dy[i][o], in FP32. Threads of a warp read consecutive columns
 * (coalesced); the BIAS_ROWS partial sums of a column are then added in a fixed order. Launched
 * with (BIAS_COLS, BIAS_ROWS) threads and a block per BIAS_COLS columns. */
template <typename T>
static __global__ void bias_grad(const T *__restrict__ dy, int n, int m, float *__restrict__ db)
{
    bn_early_entry(); /* pdl.cuh */
    __shared__ float part[BIAS_ROWS][BIAS_COLS + 1];
    int col = blockIdx.x * BIAS_COLS + threadIdx.x;
    float s = 0.0f;
    if (col < m)
        for (int i = threadIdx.y; i < n; i += BIAS_ROWS) s += bn_ld(dy + (size_t)i * m + col);
    part[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y == 0 && col < m) {
        float total = 0.0f;
        for (int r = 0; r < BIAS_ROWS; r++) total += part[r][threadIdx.x];
        db[col] += total;
    }
}

/* Blocks of 256 threads for a grid-stride loop over n elements (at least 1, at most 4096). */
static inline int grid_for(size_t n)
{
    size_t b = (n + 255) / 256;
    return (int)(b < 1 ? 1 : b > 4096 ? 4096 : b);
}

#endif
