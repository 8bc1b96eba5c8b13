/* kernels.cu - small generic device operations (declared in core/device.h). */
#include "core/device.h"
#include "core/hash.h"
#include "add_into.cuh"
#include "code_anchor.cuh"
#include "cuda_check.h"
#include "grid_stride.h"

__global__ void fill_kernel(float *dst, float value, size_t n)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dst[i] = value;
}

extern "C" bn_status bn_gpu_add(float *dst, const float *src, size_t n, bn_ctx *ctx)
{
    bn_queue_add_into(dst, src, n, (cudaStream_t)ctx->stream);
    BN_CUDA_LAUNCH();
    return BN_OK;
}

/* Each thread adds its words' mixes; a warp's lanes, then the block's warps, add theirs, and
 * one 64-bit atomic add a block: integer sums, so the order does not change the value. */
__global__ void hash_words_kernel(const uint32_t *w, size_t n, unsigned long long *out)
{
    uint64_t h = 0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        h += bn_hash_word(i, w[i]);
    for (int d = 16; d > 0; d >>= 1) h += __shfl_down_sync(0xffffffffu, h, d);
    __shared__ uint64_t warps[32];
    if (threadIdx.x % 32 == 0) warps[threadIdx.x / 32] = h;
    __syncthreads();
    if (threadIdx.x == 0) {
        uint64_t sum = 0;
        for (unsigned k = 0; k < blockDim.x / 32; k++) sum += warps[k];
        atomicAdd(out, (unsigned long long)sum);
    }
}

extern "C" bn_status bn_gpu_hash_words(const void *src, size_t n, uint64_t *hash, bn_ctx *ctx)
{
    cudaStream_t s = (cudaStream_t)ctx->stream;
    unsigned long long *d = NULL, h = 0;
    BN_TRY(bn_device_alloc((void **)&d, sizeof *d));
    cudaError_t e = cudaMemsetAsync(d, 0, sizeof *d, s);
    if (e == cudaSuccess && n > 0) {
        hash_words_kernel<<<bn_grid_stride_blocks(n), 256, 0, s>>>((const uint32_t *)src, n, d);
        e = cudaGetLastError();
    }
    if (e == cudaSuccess) e = cudaMemcpyAsync(&h, d, sizeof h, cudaMemcpyDeviceToHost, s);
    if (e == cudaSuccess) e = cudaStreamSynchronize(s);
    bn_device_free(d);
    if (e != cudaSuccess) return bn_error(BN_ERR_DEVICE, "hashing %zu words on the device: %s", n, cudaGetErrorString(e));
    *hash = h;
    return BN_OK;
}

extern "C" bn_status bn_gpu_fill(float *dst, float value, size_t n, bn_ctx *ctx)
{
    fill_kernel<<<bn_grid_stride_blocks(n), 256, 0, (cudaStream_t)ctx->stream>>>(dst, value, n);
    BN_CUDA_LAUNCH();
    return BN_OK;
}

BN_CODE_ANCHOR(kernels, fill_kernel) /* code_load.cu */
