/* conv_nhwc.cu - the FP32 layout copies of conv_nhwc.h: 32 x 32 tiles through shared memory, so
 * that reads and writes both run along rows (coalesced); a tile row of 33 floats keeps a
 * column's 32 reads in 32 banks. */
#include "conv_nhwc.h"
#include "gpu/cuda_check.h"

#define TILE 32
#define TILE_ROWS 8

/* Block (x, y, z): the tile at rows 32y, columns 32x of matrix z; with add, dst accumulates
 * (and e is unused), else e's extras are done where set. */
template <bool Add>
static __global__ void __launch_bounds__(TILE * TILE_ROWS)
    transpose_kernel(float *__restrict__ dst, const float *__restrict__ src, int rows, int cols, bn_nhwc_extra e)
{
    __shared__ float tile[TILE][TILE + 1];
    const size_t matrix = (size_t)blockIdx.z * rows * cols;
    const int r0 = blockIdx.y * TILE, c0 = blockIdx.x * TILE;
    for (int r = threadIdx.y; r < TILE; r += TILE_ROWS) {
        const int i = r0 + r, j = c0 + threadIdx.x;
        if (i < rows && j < cols) tile[r][threadIdx.x] = src[matrix + (size_t)i * cols + j];
    }
    __syncthreads();
    for (int r = threadIdx.y; r < TILE; r += TILE_ROWS) {
        const int j = c0 + r, i = r0 + threadIdx.x;
        if (j >= cols || i >= rows) continue;
        const size_t q = matrix + (size_t)j * rows + i;
        float v = tile[threadIdx.x][r];
        if (Add) {
            dst[q] += v;
            continue;
        }
        if (e.bias) v += e.bias[j];
        dst[q] = v;
        if (e.relu_y) e.relu_y[q] = v > 0.0f ? v : 0.0f;
        if (e.relu_dx) e.relu_dx[q] = e.mask[q] > 0.0f ? v : 0.0f;
    }
}

template <bool Add>
static bn_status transpose(float *dst, const float *src, int batch, int rows, int cols, const bn_nhwc_extra *extra,
                           bn_ctx *ctx)
{
    if (batch < 0 || rows < 0 || cols < 0)
        return bn_error(BN_ERR_INTERNAL, "NHWC copy of %d matrices of %d x %d: a negative size", batch, rows, cols);
    if (batch == 0 || rows == 0 || cols == 0) return BN_OK;
    const unsigned down = (unsigned)((rows + TILE - 1) / TILE);
    if (batch > 65535 || down > 65535)
        return bn_error(BN_ERR_INTERNAL, "NHWC copy of %d matrices of %d x %d: more than 65535 matrices or 65535 "
                        "tiles of %d rows", batch, rows, cols, TILE);
    bn_nhwc_extra e = {NULL, NULL, NULL, NULL};
    if (extra) e = *extra;
    if (!e.mask) e.relu_dx = NULL;
    const dim3 grid((unsigned)((cols + TILE - 1) / TILE), down, (unsigned)batch);
    transpose_kernel<Add><<<grid, dim3(TILE, TILE_ROWS), 0, (cudaStream_t)ctx->stream>>>(dst, src, rows, cols, e);
    BN_CUDA_LAUNCH();
    return BN_OK;
}

extern "C" bn_status bn_nhwc_transpose(float *dst, const float *src, int batch, int rows, int cols,
                                       const bn_nhwc_extra *extra, bn_ctx *ctx)
{
    return transpose<false>(dst, src, batch, rows, cols, extra, ctx);
}

extern "C" bn_status bn_nhwc_add_transposed(float *dst, const float *src, int batch, int rows, int cols, bn_ctx *ctx)
{
    return transpose<true>(dst, src, batch, rows, cols, NULL, ctx);
}
