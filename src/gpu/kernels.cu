/* kernels.cu - small generic device operations (declared in core/device.h). */
#include "core/device.h"
#include "add_into.cuh"
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

extern "C" bn_status bn_gpu_fill(float *dst, float value, size_t n, bn_ctx *ctx)
{
    fill_kernel<<<bn_grid_stride_blocks(n), 256, 0, (cudaStream_t)ctx->stream>>>(dst, value, n);
    BN_CUDA_LAUNCH();
    return BN_OK;
}
