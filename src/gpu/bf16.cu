/* bf16.cu - the FP32 / BF16 conversion and transpose kernels (bf16.h) and the BF16 sum of
 * core/device.h.
 *
 * A transpose moves 64 x 64 tiles through shared memory so that both its reads and its writes
 * run along rows (coalesced); each thread moves pairs of neighbours, as one 4-byte access where
 * the row length is even and the buffer aligned (else as two 2-byte ones). */
#include <stdint.h>

#include "add_into.cuh"
#include "bf16.cuh"
#include "bf16.h"
#include "code_anchor.cuh"
#include "cuda_check.h"
#include "grid_stride.h"
#include "pdl.cuh"

__global__ void f32_to_bf16_kernel(__nv_bfloat16 *dst, const float *src, size_t n)
{
    bn_early_entry(); /* pdl.cuh */
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        bn_st_bf16(dst + i, src[i]);
}

__global__ void bf16_to_f32_kernel(float *dst, const __nv_bfloat16 *src, size_t n)
{
    bn_early_entry(); /* pdl.cuh */
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dst[i] = bn_ld_bf16(src + i);
}

__global__ void add_bf16_to_f32_kernel(float *dst, const __nv_bfloat16 *src, size_t n)
{
    bn_early_entry(); /* pdl.cuh */
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dst[i] += bn_ld_bf16(src + i);
}

#define TILE 64
/* A block is 32 x TILE_ROWS threads: 32 pairs span a tile's row, TILE_ROWS rows at a time. */
#define TILE_ROWS 8

/* One element of the transpose: BF16 written, or added into FP32. */
static __device__ __forceinline__ void put(__nv_bfloat16 *q, __nv_bfloat16 v) { *q = v; }
static __device__ __forceinline__ void put(float *q, __nv_bfloat16 v) { *q += __bfloat162float(v); }

/* Two neighbours of the transpose, q aligned to the pair's size. */
static __device__ __forceinline__ void put_pair(__nv_bfloat16 *q, __nv_bfloat16 a, __nv_bfloat16 b)
{
    *(__nv_bfloat162 *)q = __halves2bfloat162(a, b);
}

static __device__ __forceinline__ void put_pair(float *q, __nv_bfloat16 a, __nv_bfloat16 b)
{
    float2 v = *(float2 *)q;
    v.x += __bfloat162float(a);
    v.y += __bfloat162float(b);
    *(float2 *)q = v;
}

/* Block (x, y, z): the tile at rows 64y, columns 64x of matrix z. pairs_in: cols is even and src
 * 4-byte aligned; pairs_out: rows is even and dst aligned to two of its elements. */
template <typename Out>
__global__ void __launch_bounds__(32 * TILE_ROWS)
    transpose_kernel(Out *__restrict__ dst, const __nv_bfloat16 *__restrict__ src, int rows, int cols, bool pairs_in,
                     bool pairs_out)
{
    bn_early_entry(); /* pdl.cuh */
    /* An odd row length in 2-byte elements puts the 32 pairs read down a column in 32 banks. */
    __shared__ __nv_bfloat16 tile[TILE][TILE + 1];
    const size_t matrix = (size_t)blockIdx.z * rows * cols;
    const __nv_bfloat16 *s = src + matrix;
    Out *d = dst + matrix;
    const int r0 = blockIdx.y * TILE, c0 = blockIdx.x * TILE, t = 2 * threadIdx.x;
    for (int r = threadIdx.y; r < TILE; r += TILE_ROWS) {
        const int i = r0 + r, j = c0 + t;
        if (i >= rows || j >= cols) continue;
        const __nv_bfloat16 *p = s + (size_t)i * cols + j;
        if (pairs_in) {
            const __nv_bfloat162 v = *(const __nv_bfloat162 *)p;
            tile[r][t] = v.x;
            tile[r][t + 1] = v.y;
        } else {
            tile[r][t] = p[0];
            if (j + 1 < cols) tile[r][t + 1] = p[1];
        }
    }
    __syncthreads();
    for (int r = threadIdx.y; r < TILE; r += TILE_ROWS) {
        const int j = c0 + r, i = r0 + t;
        if (j >= cols || i >= rows) continue;
        Out *q = d + (size_t)j * rows + i;
        if (pairs_out) {
            put_pair(q, tile[t][r], tile[t + 1][r]);
        } else {
            put(q, tile[t][r]);
            if (i + 1 < rows) put(q + 1, tile[t + 1][r]);
        }
    }
}

static bool aligned(const void *p, size_t bytes)
{
    return (uintptr_t)p % bytes == 0;
}

template <typename Out>
static bn_status transpose(Out *dst, const __nv_bfloat16 *src, int batch, int rows, int cols, bn_ctx *ctx)
{
    if (batch < 0 || rows < 0 || cols < 0)
        return bn_error(BN_ERR_INTERNAL, "BF16 transpose of %d matrices of %d x %d: a negative size", batch, rows,
                        cols);
    if (batch == 0 || rows == 0 || cols == 0) return BN_OK;
    const unsigned tiles_down = (unsigned)((rows + TILE - 1) / TILE);
    if (batch > 65535 || tiles_down > 65535)
        return bn_error(BN_ERR_INTERNAL, "BF16 transpose of %d matrices of %d x %d: more than 65535 matrices or "
                        "65535 tiles of %d rows", batch, rows, cols, TILE);
    const dim3 grid((unsigned)((cols + TILE - 1) / TILE), tiles_down, (unsigned)batch);
    const bool pairs_in = cols % 2 == 0 && aligned(src, 2 * sizeof *src);
    const bool pairs_out = rows % 2 == 0 && aligned(dst, 2 * sizeof *dst);
    bn_launch_early(transpose_kernel<Out>, grid, dim3(32, TILE_ROWS), 0, (cudaStream_t)ctx->stream, dst, src, rows,
                    cols, pairs_in, pairs_out);
    BN_CUDA_LAUNCH();
    return BN_OK;
}

extern "C" bn_status bn_gpu_f32_to_bf16(void *dst, const float *src, size_t n, bn_ctx *ctx)
{
    bn_launch_early(f32_to_bf16_kernel, bn_grid_stride_blocks(n), 256, 0, (cudaStream_t)ctx->stream,
                    (__nv_bfloat16 *)dst, src, n);
    BN_CUDA_LAUNCH();
    return BN_OK;
}

extern "C" bn_status bn_gpu_bf16_to_f32(float *dst, const void *src, size_t n, bn_ctx *ctx)
{
    bn_launch_early(bf16_to_f32_kernel, bn_grid_stride_blocks(n), 256, 0, (cudaStream_t)ctx->stream, dst,
                    (const __nv_bfloat16 *)src, n);
    BN_CUDA_LAUNCH();
    return BN_OK;
}

extern "C" bn_status bn_gpu_add_bf16_to_f32(float *dst, const void *src, size_t n, bn_ctx *ctx)
{
    bn_launch_early(add_bf16_to_f32_kernel, bn_grid_stride_blocks(n), 256, 0, (cudaStream_t)ctx->stream, dst,
                    (const __nv_bfloat16 *)src, n);
    BN_CUDA_LAUNCH();
    return BN_OK;
}

extern "C" bn_status bn_gpu_add_bf16(void *dst, const void *src, size_t n, bn_ctx *ctx)
{
    bn_queue_add_into((__nv_bfloat16 *)dst, (const __nv_bfloat16 *)src, n, (cudaStream_t)ctx->stream);
    BN_CUDA_LAUNCH();
    return BN_OK;
}

extern "C" bn_status bn_gpu_bf16_transpose(void *dst, const void *src, int batch, int rows, int cols, bn_ctx *ctx)
{
    return transpose((__nv_bfloat16 *)dst, (const __nv_bfloat16 *)src, batch, rows, cols, ctx);
}

extern "C" bn_status bn_gpu_add_bf16_transposed_to_f32(float *dst, const void *src, int batch, int rows, int cols,
                                                       bn_ctx *ctx)
{
    return transpose(dst, (const __nv_bfloat16 *)src, batch, rows, cols, ctx);
}

BN_CODE_ANCHOR(bf16, bf16_to_f32_kernel) /* code_load.cu */
