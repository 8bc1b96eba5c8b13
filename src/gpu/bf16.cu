/* bf16.cu - the FP32 / BF16 conversion kernels (bf16.h) and the BF16 sum of core/device.h. */
#include "bf16.cuh"
#include "bf16.h"
#include "cuda_check.h"

__global__ void f32_to_bf16_kernel(__nv_bfloat16 *dst, const float *src, size_t n)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        bn_st_bf16(dst + i, src[i]);
}

__global__ void bf16_to_f32_kernel(float *dst, const __nv_bfloat16 *src, size_t n)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dst[i] = bn_ld_bf16(src + i);
}

__global__ void add_bf16_to_f32_kernel(float *dst, const __nv_bfloat16 *src, size_t n)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dst[i] += bn_ld_bf16(src + i);
}

__global__ void add_bf16_kernel(__nv_bfloat16 *dst, const __nv_bfloat16 *src, size_t n)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        bn_st_bf16(dst + i, bn_ld_bf16(dst + i) + bn_ld_bf16(src + i));
}

static int blocks_for(size_t n)
{
    size_t b = (n + 255) / 256;
    return (int)(b < 1 ? 1 : b > 4096 ? 4096 : b);
}

extern "C" bn_status bn_gpu_f32_to_bf16(void *dst, const float *src, size_t n, bn_ctx *ctx)
{
    f32_to_bf16_kernel<<<blocks_for(n), 256, 0, (cudaStream_t)ctx->stream>>>((__nv_bfloat16 *)dst, src, n);
    BN_CUDA_LAUNCH();
    return BN_OK;
}

extern "C" bn_status bn_gpu_bf16_to_f32(float *dst, const void *src, size_t n, bn_ctx *ctx)
{
    bf16_to_f32_kernel<<<blocks_for(n), 256, 0, (cudaStream_t)ctx->stream>>>(dst, (const __nv_bfloat16 *)src, n);
    BN_CUDA_LAUNCH();
    return BN_OK;
}

extern "C" bn_status bn_gpu_add_bf16_to_f32(float *dst, const void *src, size_t n, bn_ctx *ctx)
{
    add_bf16_to_f32_kernel<<<blocks_for(n), 256, 0, (cudaStream_t)ctx->stream>>>(dst, (const __nv_bfloat16 *)src,
                                                                                  n);
    BN_CUDA_LAUNCH();
    return BN_OK;
}

extern "C" bn_status bn_gpu_add_bf16(void *dst, const void *src, size_t n, bn_ctx *ctx)
{
    add_bf16_kernel<<<blocks_for(n), 256, 0, (cudaStream_t)ctx->stream>>>((__nv_bfloat16 *)dst,
                                                                          (const __nv_bfloat16 *)src, n);
    BN_CUDA_LAUNCH();
    return BN_OK;
}
