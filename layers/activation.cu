/* activation.cu - the activations on the GPU, all five as elementwise kernels of our own (one
 * launch per pass) with the CPU's formulas and kink conventions (activation.c): relu'(0) = 0,
 * leaky_relu'(0) = slope, elu takes its linear branch only for x > 0, and sigmoid and tanh take
 * their derivatives from the output y. Sigmoid evaluates exp of a non-positive argument only,
 * as the CPU does, so neither branch overflows. No cuDNN descriptor is needed any more. */
#include "activation.h"
#include "gpu/bf16.cuh"
#include "gpu/cuda_check.h"

static __device__ __forceinline__ float sigmoid_of(float x)
{
    if (x >= 0.0f) return 1.0f / (1.0f + expf(-x));
    float e = expf(x);
    return e / (1.0f + e);
}

/* y = f(x); a is leaky_relu's slope or elu's alpha. */
template <act_kind K>
static __device__ __forceinline__ float act_value(float x, float a)
{
    switch (K) {
    case ACT_RELU: return x > 0.0f ? x : 0.0f;
    case ACT_SIGMOID: return sigmoid_of(x);
    case ACT_TANH: return tanhf(x);
    case ACT_LEAKY: return x > 0.0f ? x : a * x;
    case ACT_ELU: return x > 0.0f ? x : a * expm1f(x);
    }
    return x;
}

/* dx = dy * f'(x), f' written in x (relu-like) or in y = f(x) (sigmoid, tanh, elu's left side,
 * where a e^x = y + a). */
template <act_kind K>
static __device__ __forceinline__ float act_grad(float x, float y, float dy, float a)
{
    switch (K) {
    case ACT_RELU: return x > 0.0f ? dy : 0.0f;
    case ACT_SIGMOID: return dy * y * (1.0f - y);
    case ACT_TANH: return dy * (1.0f - y * y);
    case ACT_LEAKY: return x > 0.0f ? dy : a * dy;
    case ACT_ELU: return x > 0.0f ? dy : dy * (y + a);
    }
    return dy;
}

/* T is the blobs' element type on the device: float, or __nv_bfloat16 under --precision bf16
 * (loaded as float, the result rounded once on the store). */
template <act_kind K, typename T>
static __global__ void act_forward(const T *__restrict__ x, T *__restrict__ y, size_t n, float a)
{
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        bn_st(y + i, act_value<K>(bn_ld(x + i), a));
}

template <act_kind K, typename T>
static __global__ void act_backward(const T *__restrict__ x, const T *__restrict__ y, const T *__restrict__ dy,
                                    T *__restrict__ dx, size_t n, float a)
{
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        /* Only the operands the formula uses are loaded (the compiler drops the others). */
        float xi = K == ACT_SIGMOID || K == ACT_TANH ? 0.0f : bn_ld(x + i);
        float yi = K == ACT_RELU || K == ACT_LEAKY ? 0.0f : bn_ld(y + i);
        bn_st(dx + i, act_grad<K>(xi, yi, bn_ld(dy + i), a));
    }
}

/* The same over packs of 16 bytes (bn_pack: 8 BF16 or 4 FP32 values per thread and step), for
 * 16-byte aligned blobs: a quarter to an eighth of the memory instructions. */
template <act_kind K, typename T>
static __global__ void act_forward_packs(const T *__restrict__ x, T *__restrict__ y, size_t packs, float a)
{
    const int N = bn_pack<T>::N;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < packs; i += stride) {
        float v[N];
        bn_ld_pack(x + i * N, v);
#pragma unroll
        for (int j = 0; j < N; j++) v[j] = act_value<K>(v[j], a);
        bn_st_pack(y + i * N, v);
    }
}

template <act_kind K, typename T>
static __global__ void act_backward_packs(const T *__restrict__ x, const T *__restrict__ y, const T *__restrict__ dy,
                                          T *__restrict__ dx, size_t packs, float a)
{
    const int N = bn_pack<T>::N;
    const bool use_x = K != ACT_SIGMOID && K != ACT_TANH, use_y = K != ACT_RELU && K != ACT_LEAKY;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < packs; i += stride) {
        float xv[N] = {}, yv[N] = {}, g[N];
        if (use_x) bn_ld_pack(x + i * N, xv);
        if (use_y) bn_ld_pack(y + i * N, yv);
        bn_ld_pack(dy + i * N, g);
#pragma unroll
        for (int j = 0; j < N; j++) g[j] = act_grad<K>(xv[j], yv[j], g[j], a);
        bn_st_pack(dx + i * N, g);
    }
}

static int grid_for(size_t n)
{
    size_t b = (n + 255) / 256;
    return (int)(b < 1 ? 1 : b > 4096 ? 4096 : b);
}

/* Packs over the aligned body where every pointer is 16-byte aligned, one element per thread
 * over the rest (the tail, or everything). */
template <act_kind K, typename T>
static void launch_forward(const T *x, T *y, size_t count, float a, cudaStream_t s)
{
    size_t done = 0;
    if (bn_aligned16(x) && bn_aligned16(y)) {
        const size_t packs = count / bn_pack<T>::N;
        if (packs) act_forward_packs<K, T><<<grid_for(packs), 256, 0, s>>>(x, y, packs, a);
        done = packs * bn_pack<T>::N;
    }
    if (done < count) act_forward<K, T><<<grid_for(count - done), 256, 0, s>>>(x + done, y + done, count - done, a);
}

template <act_kind K, typename T>
static void launch_backward(const T *x, const T *y, const T *dy, T *dx, size_t count, float a, cudaStream_t s)
{
    size_t done = 0;
    if (bn_aligned16(x) && bn_aligned16(y) && bn_aligned16(dy) && bn_aligned16(dx)) {
        const size_t packs = count / bn_pack<T>::N;
        if (packs) act_backward_packs<K, T><<<grid_for(packs), 256, 0, s>>>(x, y, dy, dx, packs, a);
        done = packs * bn_pack<T>::N;
    }
    if (done < count)
        act_backward<K, T><<<grid_for(count - done), 256, 0, s>>>(x + done, y + done, dy + done, dx + done,
                                                                  count - done, a);
}

template <typename T>
static bn_status forward_on(const act_priv *p, const T *x, T *y, size_t count, cudaStream_t s)
{
    switch (p->kind) {
    case ACT_RELU: launch_forward<ACT_RELU>(x, y, count, p->a, s); break;
    case ACT_SIGMOID: launch_forward<ACT_SIGMOID>(x, y, count, p->a, s); break;
    case ACT_TANH: launch_forward<ACT_TANH>(x, y, count, p->a, s); break;
    case ACT_LEAKY: launch_forward<ACT_LEAKY>(x, y, count, p->a, s); break;
    case ACT_ELU: launch_forward<ACT_ELU>(x, y, count, p->a, s); break;
    }
    BN_CUDA_LAUNCH();
    return BN_OK;
}

template <typename T>
static bn_status backward_on(const act_priv *p, const T *x, const T *y, const T *dy, T *dx, size_t count,
                             cudaStream_t s)
{
    switch (p->kind) {
    case ACT_RELU: launch_backward<ACT_RELU>(x, y, dy, dx, count, p->a, s); break;
    case ACT_SIGMOID: launch_backward<ACT_SIGMOID>(x, y, dy, dx, count, p->a, s); break;
    case ACT_TANH: launch_backward<ACT_TANH>(x, y, dy, dx, count, p->a, s); break;
    case ACT_LEAKY: launch_backward<ACT_LEAKY>(x, y, dy, dx, count, p->a, s); break;
    case ACT_ELU: launch_backward<ACT_ELU>(x, y, dy, dx, count, p->a, s); break;
    }
    BN_CUDA_LAUNCH();
    return BN_OK;
}

extern "C" bn_status bn_activation_forward_gpu(bn_layer *l, const bn_pass *pass)
{
    const act_priv *p = (const act_priv *)l->priv;
    size_t count = bn_blob_count(l->in);
    cudaStream_t s = (cudaStream_t)pass->ctx->stream;
    if (bn_blob_is_bf16(l->out)) {
        BN_DEV16_RD(x, l->in);
        BN_DEV16_WR(y, l->out);
        return forward_on(p, x, y, count, s);
    }
    BN_DEV_RD(x, l->in);
    BN_DEV_WR(y, l->out);
    return forward_on(p, x, y, count, s);
}

extern "C" bn_status bn_activation_backward_gpu(bn_layer *l, const bn_pass *pass)
{
    if (!l->in_grad) return BN_OK;
    const act_priv *p = (const act_priv *)l->priv;
    size_t count = bn_blob_count(l->in);
    cudaStream_t s = (cudaStream_t)pass->ctx->stream;
    if (bn_blob_is_bf16(l->out)) {
        BN_DEV16_RD(x, l->in);
        BN_DEV16_RD(y, l->out);
        BN_DEV16_RD(dy, l->out_grad);
        BN_DEV16_WR(dx, l->in_grad);
        return backward_on(p, x, y, dy, dx, count, s);
    }
    BN_DEV_RD(x, l->in);
    BN_DEV_RD(y, l->out);
    BN_DEV_RD(dy, l->out_grad);
    BN_DEV_WR(dx, l->in_grad);
    return backward_on(p, x, y, dy, dx, count, s);
}
