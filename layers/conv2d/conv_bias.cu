/* conv_bias.cu - the bias kernels of conv_bias.h. Both read and write 16 bytes at a time where
 * the plane is a multiple of a pack (bn_pack: 4 FP32 or 8 BF16 values) and the data 16-byte
 * aligned, and index in 32 bits where the output fits (as batchnorm.cu does). */
#include "conv_bias.h"
#include "gpu/bf16.cuh"
#include "gpu/code_anchor.cuh"
#include "gpu/cuda_check.h"
#include "gpu/pdl.cuh"

#define THREADS 256
/* Elements of one filter per block of the gradient, at least. */
#define PART_ELEMENTS 4096

/* Pack i of y (row: packs per plane) is in plane i / row, of filter (i / row) % filters, of
 * example (i / row) / filters; relu_y's examples are relu_gap elements further apart than y's
 * (a slice of a channel join's output, blob.h; 0 when packed). */
template <typename T, int N, typename I>
static __global__ void add_kernel(T *__restrict__ y, const float *__restrict__ b, I packs, int row, int filters,
                                  T *__restrict__ relu_y, size_t relu_gap)
{
    bn_early_entry(); /* pdl.cuh */
    const I stride = (I)gridDim.x * blockDim.x;
    for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < packs; i += stride) {
        const I plane = i / (I)row, e = plane / (I)filters;
        const float bk = b[plane - e * (I)filters];
        float v[N];
        bn_ld_n<T, N>(&y[(size_t)i * N], v);
#pragma unroll
        for (int k = 0; k < N; k++) v[k] += bk;
        bn_st_n_relu<T, N>(y, relu_y, (size_t)i * N, (size_t)i * N + (size_t)e * relu_gap, v);
    }
}

/* Block (part, k): the sum of filter k's packs in its span (of n * row), into parts. */
template <typename T, int N, typename I>
static __global__ void __launch_bounds__(THREADS)
    partial_kernel(const T *__restrict__ dy, int filters, int row, I count, float *__restrict__ parts)
{
    bn_early_entry(); /* pdl.cuh */
    __shared__ float sum[THREADS];
    const int k = blockIdx.y, part = blockIdx.x;
    const I span = (count + gridDim.x - 1) / gridDim.x, lo = part * span, hi = lo + span < count ? lo + span : count;
    float acc = 0.0f;
#pragma unroll 4
    for (I q = lo + threadIdx.x; q < hi; q += THREADS) {
        const I e = q / (I)row;
        float v[N];
        bn_ld_n<T, N>(&dy[(((size_t)e * filters + k) * row + (size_t)(q - e * (I)row)) * N], v);
#pragma unroll
        for (int j = 0; j < N; j++) acc += v[j];
    }
    sum[threadIdx.x] = acc;
    __syncthreads();
    for (int s = THREADS / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) sum[threadIdx.x] += sum[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) parts[(size_t)k * BN_CONV_BIAS_PARTS + part] = sum[0];
}

/* One thread per filter: db[k] += its partial sums, in order. */
static __global__ void finish_kernel(const float *__restrict__ parts, int filters, int used, float *__restrict__ db)
{
    bn_early_entry(); /* pdl.cuh */
    const int k = blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= filters) return;
    float acc = 0.0f;
    for (int p = 0; p < used; p++) acc += parts[(size_t)k * BN_CONV_BIAS_PARTS + p];
    db[k] += acc;
}

static unsigned blocks_for(size_t n)
{
    size_t b = (n + THREADS - 1) / THREADS;
    return (unsigned)(b < 1 ? 1 : b > 4096 ? 4096 : b);
}

template <typename T, int N, typename I>
static bn_status add_as(T *y, const float *b, int n, int filters, int plane, T *relu_y, size_t gap, bn_ctx *ctx)
{
    const size_t packs = (size_t)n * filters * plane / N;
    bn_launch_early(add_kernel<T, N, I>, blocks_for(packs), THREADS, 0, (cudaStream_t)ctx->stream, y, b, (I)packs,
                    plane / N, filters, relu_y, gap);
    BN_CUDA_LAUNCH();
    return BN_OK;
}

template <typename T>
static bn_status add(T *y, const float *b, int n, int filters, int plane, T *relu_y, size_t relu_stride,
                     bn_ctx *ctx)
{
    const size_t per = (size_t)filters * plane;
    if (n * per == 0) return BN_OK;
    if (relu_y && relu_stride < per)
        return bn_error(BN_ERR_INTERNAL, "conv2d bias: a ReLU output's examples %zu apart, less than their %zu values",
                        relu_stride, per);
    const size_t gap = relu_y ? relu_stride - per : 0;
    const int N = bn_pack<T>::N;
    const bool index32 = bn_index_fits_32(n * per);
    if (plane % N == 0 && bn_aligned16(y) && (!relu_y || (bn_aligned16(relu_y) && gap % N == 0)))
        return index32 ? add_as<T, N, unsigned>(y, b, n, filters, plane, relu_y, gap, ctx)
                         : add_as<T, N, size_t>(y, b, n, filters, plane, relu_y, gap, ctx);
    return index32 ? add_as<T, 1, unsigned>(y, b, n, filters, plane, relu_y, gap, ctx)
                     : add_as<T, 1, size_t>(y, b, n, filters, plane, relu_y, gap, ctx);
}

template <typename T, int N, typename I>
static bn_status grad_as(float *db, const T *dy, int n, int filters, int plane, float *parts, cudaStream_t s)
{
    const size_t count = (size_t)n * plane;
    const size_t want = (count + PART_ELEMENTS - 1) / PART_ELEMENTS;
    const int used = (int)(want < 1 ? 1 : want > BN_CONV_BIAS_PARTS ? BN_CONV_BIAS_PARTS : want);
    bn_launch_early(partial_kernel<T, N, I>, dim3((unsigned)used, (unsigned)filters), THREADS, 0, s, dy, filters,
                    plane / N, (I)(count / N), parts);
    BN_CUDA_LAUNCH();
    bn_launch_early(finish_kernel, (filters + 127) / 128, 128, 0, s, parts, filters, used, db);
    BN_CUDA_LAUNCH();
    return BN_OK;
}

template <typename T>
static bn_status grad(float *db, const T *dy, int n, int filters, int plane, float *parts, cudaStream_t s)
{
    if (filters > 65535)
        return bn_error(BN_ERR_INTERNAL, "conv2d bias gradient of %d filters: more than 65535", filters);
    if ((size_t)n * plane == 0 || filters == 0) return BN_OK;
    const int N = bn_pack<T>::N;
    const bool index32 = bn_index_fits_32((size_t)n * filters * plane);
    if (plane % N == 0 && bn_aligned16(dy))
        return index32 ? grad_as<T, N, unsigned>(db, dy, n, filters, plane, parts, s)
                         : grad_as<T, N, size_t>(db, dy, n, filters, plane, parts, s);
    return index32 ? grad_as<T, 1, unsigned>(db, dy, n, filters, plane, parts, s)
                     : grad_as<T, 1, size_t>(db, dy, n, filters, plane, parts, s);
}

extern "C" bn_status bn_conv_bias_add_f32(float *y, const float *b, int n, int filters, int plane, float *relu_y,
                                          size_t relu_stride, bn_ctx *ctx)
{
    return add(y, b, n, filters, plane, relu_y, relu_stride, ctx);
}

extern "C" bn_status bn_conv_bias_add_bf16(void *y, const float *b, int n, int filters, int plane, void *relu_y,
                                           size_t relu_stride, bn_ctx *ctx)
{
    return add((__nv_bfloat16 *)y, b, n, filters, plane, (__nv_bfloat16 *)relu_y, relu_stride, ctx);
}

extern "C" bn_status bn_conv_bias_grad_f32(float *db, const float *dy, int n, int filters, int plane, float *parts,
                                           bn_ctx *ctx)
{
    return grad(db, dy, n, filters, plane, parts, (cudaStream_t)ctx->stream);
}

extern "C" bn_status bn_conv_bias_grad_f32_on(void *stream, float *db, const float *dy, int n, int filters,
                                              int plane, float *parts)
{
    return grad(db, dy, n, filters, plane, parts, (cudaStream_t)stream);
}

extern "C" bn_status bn_conv_bias_grad_bf16(float *db, const void *dy, int n, int filters, int plane, float *parts,
                                            bn_ctx *ctx)
{
    return grad(db, (const __nv_bfloat16 *)dy, n, filters, plane, parts, (cudaStream_t)ctx->stream);
}

BN_CODE_ANCHOR(conv_bias, finish_kernel) /* code_load.cu */
