/* kernels.cu - small generic device operations (declared in core/device.h). */
#include "core/device.h"
#include "add_into.cuh"
#include "cuda_check.h"

__global__ void fill_kernel(float *dst, float value, size_t n)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dst[i] = value;
}

static int blocks_for(size_t n)
{
    size_t b = (n + 255) / 256;
    return (int)(b < 1 ? 1 : b > 4096 ? 4096 : b);
}

extern "C" bn_status bn_gpu_add(float *dst, const float *src, size_t n, bn_ctx *ctx)
{
    bn_queue_add_into(dst, src, n, (cudaStream_t)ctx->stream);
    BN_CUDA_LAUNCH();
    return BN_OK;
}

extern "C" bn_status bn_gpu_fill(float *dst, float value, size_t n, bn_ctx *ctx)
{
    fill_kernel<<<blocks_for(n), 256, 0, (cudaStream_t)ctx->stream>>>(dst, value, n);
    BN_CUDA_LAUNCH();
    return BN_OK;
}
