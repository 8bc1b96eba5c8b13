/* activation.cu - the activations on the GPU, all five as elementwise kernels of our own (one
 * launch per pass) with the CPU's formulas and kink conventions (activation.c): relu'(0) = 0,
 * leaky_relu'(0) = slope, elu takes its linear branch only for x > 0, and sigmoid and tanh take
 * their derivatives from the output y. Sigmoid evaluates exp of a non-positive argument only,
 * as the CPU does, so neither branch overflows. No cuDNN descriptor is needed any more. The
 * output and its gradient may be slices of a channel join's (examples further apart than their
 * size, blob.h): those passes run by rows. */
#include "activation.h"
#include "gpu/add_into.cuh"
#include "gpu/bf16.cuh"
#include "gpu/code_anchor.cuh"
#include "gpu/cuda_check.h"
#include "gpu/grid_stride.h"
#include "gpu/pdl.cuh"
#include "gpu/typed.cuh"

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
    bn_early_entry(); /* pdl.cuh */
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        bn_st(y + i, act_value<K>(bn_ld(x + i), a));
}

template <act_kind K, typename T>
static __global__ void act_backward(const T *__restrict__ x, const T *__restrict__ y, const T *__restrict__ dy,
                                    const T *__restrict__ part, T *__restrict__ dx, size_t n, float a)
{
    bn_early_entry(); /* pdl.cuh */
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        /* Only the operands the formula uses are loaded (the compiler drops the others). */
        float xi = K == ACT_SIGMOID || K == ACT_TANH ? 0.0f : bn_ld(x + i);
        float yi = K == ACT_RELU || K == ACT_LEAKY ? 0.0f : bn_ld(y + i), g;
        bn_ld_grad_n<T, 1>(dy, part, i, &g);
        bn_st(dx + i, act_grad<K>(xi, yi, g, a));
    }
}

/* The same over packs of 16 bytes (bn_pack: 8 BF16 or 4 FP32 values per thread and step), for
 * 16-byte aligned blobs: a quarter to an eighth of the memory instructions. */
template <act_kind K, typename T>
static __global__ void act_forward_packs(const T *__restrict__ x, T *__restrict__ y, size_t packs, float a)
{
    bn_early_entry(); /* pdl.cuh */
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
                                          const T *__restrict__ part, T *__restrict__ dx, size_t packs, float a)
{
    bn_early_entry(); /* pdl.cuh */
    const int N = bn_pack<T>::N;
    const bool use_x = K != ACT_SIGMOID && K != ACT_TANH, use_y = K != ACT_RELU && K != ACT_LEAKY;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < packs; i += stride) {
        float xv[N] = {}, yv[N] = {}, g[N];
        if (use_x) bn_ld_pack(x + i * N, xv);
        if (use_y) bn_ld_pack(y + i * N, yv);
        bn_ld_grad_n<T, N>(dy, part, i * N, g);
#pragma unroll
        for (int j = 0; j < N; j++) g[j] = act_grad<K>(xv[j], yv[j], g[j], a);
        bn_st_pack(dx + i * N, g);
    }
}

/* The same over `rows` examples of `per` elements whose operands lie `s*` elements from one
 * example to the next (an output, or its gradient, that is a slice of a channel join's: blob.h),
 * in units of U elements (U = bn_pack<T>::N where per, the strides and the pointers allow 16-byte
 * packs, else 1): blockIdx.y walks the examples, x the units of one. */
typedef struct act_rows {
    size_t rows, per, sx, sy, sdy, sdx;
} act_rows;

template <act_kind K, typename T, int U>
static __global__ void act_forward_rows(const T *__restrict__ x, T *__restrict__ y, act_rows r, float a)
{
    bn_early_entry(); /* pdl.cuh */
    const size_t units = r.per / U, step = (size_t)gridDim.x * blockDim.x;
    for (size_t e = blockIdx.y; e < r.rows; e += gridDim.y)
        for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < units; i += step) {
            float v[U];
            bn_ld_n<T, U>(x + e * r.sx + i * U, v);
#pragma unroll
            for (int j = 0; j < U; j++) v[j] = act_value<K>(v[j], a);
            bn_st_n<T, U>(y + e * r.sy + i * U, v);
        }
}

template <act_kind K, typename T, int U>
static __global__ void act_backward_rows(const T *__restrict__ x, const T *__restrict__ y, const T *__restrict__ dy,
                                         T *__restrict__ dx, act_rows r, float a)
{
    bn_early_entry(); /* pdl.cuh */
    const bool use_x = K != ACT_SIGMOID && K != ACT_TANH, use_y = K != ACT_RELU && K != ACT_LEAKY;
    const size_t units = r.per / U, step = (size_t)gridDim.x * blockDim.x;
    for (size_t e = blockIdx.y; e < r.rows; e += gridDim.y)
        for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < units; i += step) {
            float xv[U] = {}, yv[U] = {}, g[U];
            if (use_x) bn_ld_n<T, U>(x + e * r.sx + i * U, xv);
            if (use_y) bn_ld_n<T, U>(y + e * r.sy + i * U, yv);
            bn_ld_n<T, U>(dy + e * r.sdy + i * U, g);
#pragma unroll
            for (int j = 0; j < U; j++) g[j] = act_grad<K>(xv[j], yv[j], g[j], a);
            bn_st_n<T, U>(dx + e * r.sdx + i * U, g);
        }
}

/* The grid of a rows launch: about 4096 blocks of 256 threads in all. */
static dim3 rows_grid(const act_rows &r, int unit)
{
    size_t across = (r.per / unit + 255) / 256, down = r.rows < 65535 ? r.rows : 65535;
    if (across < 1) across = 1;
    size_t cap = 4096 / down > 0 ? 4096 / down : 1;
    return dim3((unsigned)(across < cap ? across : cap), (unsigned)(down < 1 ? 1 : down));
}

/* Whether a rows launch over these operands may take 16-byte packs. */
template <typename T>
static bool rows_pack(const act_rows &r, const void *const *p, int count)
{
    const size_t N = bn_pack<T>::N;
    if (r.per % N || r.sx % N || r.sy % N || r.sdy % N || r.sdx % N) return false;
    for (int i = 0; i < count; i++)
        if (p[i] && !bn_aligned16(p[i])) return false;
    return true;
}

/* Packs over the aligned body where every pointer is 16-byte aligned, one element per thread
 * over the rest (the tail, or everything). */
template <act_kind K, typename T>
static void launch_forward(const T *x, T *y, size_t count, float a, cudaStream_t s)
{
    size_t done = 0;
    if (bn_aligned16(x) && bn_aligned16(y)) {
        const size_t packs = count / bn_pack<T>::N;
        if (packs) bn_launch_early(act_forward_packs<K, T>, bn_grid_stride_blocks(packs), 256, 0, s, x, y, packs, a);
        done = packs * bn_pack<T>::N;
    }
    if (done < count)
        bn_launch_early(act_forward<K, T>, bn_grid_stride_blocks(count - done), 256, 0, s, x + done, y + done,
                        count - done, a);
}

template <act_kind K, typename T>
static void launch_backward(const T *x, const T *y, const T *dy, const T *part, T *dx, size_t count, float a,
                            cudaStream_t s)
{
    size_t done = 0;
    if (bn_aligned16(x) && bn_aligned16(y) && bn_aligned16(dy) && bn_aligned16(dx) && (!part || bn_aligned16(part))) {
        const size_t packs = count / bn_pack<T>::N;
        if (packs)
            bn_launch_early(act_backward_packs<K, T>, bn_grid_stride_blocks(packs), 256, 0, s, x, y, dy, part, dx,
                            packs, a);
        done = packs * bn_pack<T>::N;
    }
    if (done < count)
        bn_launch_early(act_backward<K, T>, bn_grid_stride_blocks(count - done), 256, 0, s, x + done, y + done,
                        dy + done, part ? part + done : NULL, dx + done, count - done, a);
}

/* Packed operands (every stride per) as one run of rows x per elements, else by rows. */
template <act_kind K, typename T>
static void forward_as(const T *x, T *y, const act_rows &r, float a, cudaStream_t s)
{
    if (r.sx == r.per && r.sy == r.per) return launch_forward<K>(x, y, r.rows * r.per, a, s);
    const void *ptrs[] = {x, y};
    if (rows_pack<T>(r, ptrs, 2))
        bn_launch_early(act_forward_rows<K, T, bn_pack<T>::N>, rows_grid(r, bn_pack<T>::N), 256, 0, s, x, y, r, a);
    else bn_launch_early(act_forward_rows<K, T, 1>, rows_grid(r, 1), 256, 0, s, x, y, r, a);
}

template <act_kind K, typename T>
static void backward_as(const T *x, const T *y, const T *dy, const T *part, T *dx, const act_rows &r, float a,
                        cudaStream_t s)
{
    if (r.sx == r.per && r.sy == r.per && r.sdy == r.per && r.sdx == r.per)
        return launch_backward<K>(x, y, dy, part, dx, r.rows * r.per, a, s);
    const void *ptrs[] = {x, y, dy, dx};
    if (rows_pack<T>(r, ptrs, 4))
        bn_launch_early(act_backward_rows<K, T, bn_pack<T>::N>, rows_grid(r, bn_pack<T>::N), 256, 0, s, x, y, dy, dx,
                        r, a);
    else bn_launch_early(act_backward_rows<K, T, 1>, rows_grid(r, 1), 256, 0, s, x, y, dy, dx, r, a);
}

template <typename T>
static bn_status forward_on(const act_priv *p, const T *x, T *y, const act_rows &r, cudaStream_t s)
{
    switch (p->kind) {
    case ACT_RELU: forward_as<ACT_RELU>(x, y, r, p->a, s); break;
    case ACT_SIGMOID: forward_as<ACT_SIGMOID>(x, y, r, p->a, s); break;
    case ACT_TANH: forward_as<ACT_TANH>(x, y, r, p->a, s); break;
    case ACT_LEAKY: forward_as<ACT_LEAKY>(x, y, r, p->a, s); break;
    case ACT_ELU: forward_as<ACT_ELU>(x, y, r, p->a, s); break;
    }
    BN_CUDA_LAUNCH();
    return BN_OK;
}

template <typename T>
static bn_status backward_on(const act_priv *p, const T *x, const T *y, const T *dy, const T *part, T *dx,
                             const act_rows &r, cudaStream_t s)
{
    switch (p->kind) {
    case ACT_RELU: backward_as<ACT_RELU>(x, y, dy, part, dx, r, p->a, s); break;
    case ACT_SIGMOID: backward_as<ACT_SIGMOID>(x, y, dy, part, dx, r, p->a, s); break;
    case ACT_TANH: backward_as<ACT_TANH>(x, y, dy, part, dx, r, p->a, s); break;
    case ACT_LEAKY: backward_as<ACT_LEAKY>(x, y, dy, part, dx, r, p->a, s); break;
    case ACT_ELU: backward_as<ACT_ELU>(x, y, dy, part, dx, r, p->a, s); break;
    }
    BN_CUDA_LAUNCH();
    return BN_OK;
}

/* The layer's examples: n of c*h*w elements, every stride that size until a blob says otherwise. */
static act_rows rows_of(const bn_layer *l)
{
    act_rows r = {};
    r.rows = (size_t)l->out->n;
    r.per = r.sx = r.sy = r.sdy = r.sdx = (size_t)l->out->c * l->out->h * l->out->w;
    return r;
}

/* The passes on blobs of element type T. The output and its gradient may be slices of a channel
 * join's (out_slices): every blob is reached with its stride. */
template <typename T> static bn_status forward_typed(bn_layer *l, const bn_pass *pass)
{
    act_rows r = rows_of(l);
    const T *x = bn_typed_rows_rd<T>(l->in, &r.sx);
    T *y = x ? bn_typed_rows_wr<T>(l->out, &r.sy) : NULL;
    if (!y) return bn_last_status();
    return forward_on((const act_priv *)l->priv, x, y, r, (cudaStream_t)pass->ctx->stream);
}

template <typename T> static bn_status backward_typed(bn_layer *l, const bn_pass *pass)
{
    act_rows r = rows_of(l);
    const T *x = bn_typed_rows_rd<T>(l->in, &r.sx);
    const T *y = x ? bn_typed_rows_rd<T>(l->out, &r.sy) : NULL;
    const T *dy = y ? bn_typed_rows_rd<T>(l->out_grad, &r.sdy) : NULL;
    T *dx = dy ? bn_typed_rows_wr<T>(l->in_grad, &r.sdx) : NULL;
    if (!dx) return bn_last_status();
    /* A second reader's part (bn_pass.dy_part) comes only with an output gradient of its own: a
     * slice of a join's has the join as its one reader. */
    const T *part = NULL;
    if (pass->dy_part) {
        if (r.sdy != r.per || r.sdx != r.per || r.sx != r.per || r.sy != r.per)
            return bn_error(BN_ERR_INTERNAL, "%s: a gradient part given with sliced blobs", l->name);
        if (!(part = bn_typed_rd<T>(pass->dy_part))) return bn_last_status();
    }
    return backward_on((const act_priv *)l->priv, x, y, dy, part, dx, r, (cudaStream_t)pass->ctx->stream);
}

extern "C" bn_status bn_activation_forward_gpu(bn_layer *l, const bn_pass *pass)
{
    return bn_blob_is_bf16(l->out) ? forward_typed<__nv_bfloat16>(l, pass) : forward_typed<float>(l, pass);
}

extern "C" bn_status bn_activation_backward_gpu(bn_layer *l, const bn_pass *pass)
{
    if (!l->in_grad) return BN_OK;
    return bn_blob_is_bf16(l->out) ? backward_typed<__nv_bfloat16>(l, pass) : backward_typed<float>(l, pass);
}

BN_CODE_ANCHOR(activation, act_forward<ACT_RELU, float>) /* code_load.cu */
