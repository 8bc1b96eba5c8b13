/* compare.cu - random inputs and the comparison of a result with a reference (compare.h). */
#include <string.h>

#include "code_anchor.cuh"
#include "compare.h"
#include "core/counter_rng.h"
#include "cuda_check.h"

__global__ void fill_uniform_kernel(float *dst, size_t n, uint64_t seed)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dst[i] = 2.0f * bn_counter_uniform(bn_counter_mix(seed ^ bn_counter_mix(i))) - 1.0f;
}

/* Each thread's largest difference and largest reference magnitude, reduced over its warp, then
 * folded into most[0] and most[1] by an atomic maximum on their bits: the two are non-negative
 * floats (or +infinity), whose order is their bits' order as unsigned integers. */
__global__ void largest_kernel(const float *out, const float *ref, size_t n, unsigned *most)
{
    float diff = 0.0f, scale = 0.0f;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const float r = ref[i];
        if (!isfinite(r)) continue;
        const float d = fabsf(out[i] - r);
        diff = isfinite(d) ? fmaxf(diff, d) : INFINITY;
        scale = fmaxf(scale, fabsf(r));
    }
    for (int lane = 16; lane > 0; lane /= 2) {
        diff = fmaxf(diff, __shfl_xor_sync(0xffffffffu, diff, lane));
        scale = fmaxf(scale, __shfl_xor_sync(0xffffffffu, scale, lane));
    }
    if (threadIdx.x % 32 == 0) {
        atomicMax(&most[0], __float_as_uint(diff));
        atomicMax(&most[1], __float_as_uint(scale));
    }
}

static int blocks_for(size_t n)
{
    size_t b = (n + 255) / 256;
    return (int)(b < 1 ? 1 : b > 1024 ? 1024 : b);
}

extern "C" bn_status bn_gpu_fill_uniform(float *dst, size_t n, uint64_t seed, const bn_ctx *ctx)
{
    fill_uniform_kernel<<<blocks_for(n), 256, 0, (cudaStream_t)ctx->stream>>>(dst, n, seed);
    BN_CUDA_LAUNCH();
    return BN_OK;
}

extern "C" bn_status bn_gpu_relative_error(const float *out, const float *ref, size_t n, const bn_ctx *ctx,
                                          double *err)
{
    cudaStream_t stream = (cudaStream_t)ctx->stream;
    unsigned *most = NULL, host[2] = {0, 0};
    BN_TRY(bn_device_alloc((void **)&most, sizeof host));
    cudaError_t e = cudaMemsetAsync(most, 0, sizeof host, stream);
    if (e == cudaSuccess) {
        largest_kernel<<<blocks_for(n), 256, 0, stream>>>(out, ref, n, most);
        e = cudaGetLastError();
    }
    if (e == cudaSuccess) e = cudaMemcpyAsync(host, most, sizeof host, cudaMemcpyDeviceToHost, stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(stream);
    bn_device_free(most);
    if (e != cudaSuccess)
        return bn_error(BN_ERR_DEVICE, "comparing a result with its reference: %s", cudaGetErrorString(e));
    float diff, scale;
    memcpy(&diff, &host[0], sizeof diff);
    memcpy(&scale, &host[1], sizeof scale);
    *err = (double)diff / (scale > 0.0f ? (double)scale : 1.0);
    return BN_OK;
}

BN_CODE_ANCHOR(compare, largest_kernel) /* code_load.cu */
