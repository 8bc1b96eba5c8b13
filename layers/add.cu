/* add.cu - the add layer on the GPU: one kernel per pass over every element, the inputs (or
 * input gradients) passed by value. Each element is summed with round-to-nearest operations that
 * the compiler may not fuse (__fmul_rn, __fadd_rn), in input order, as the CPU path sums it.
 * Under --precision bf16 the same kernels read and write BF16 (gpu/typed.cuh): the sum is taken
 * in float and rounded to BF16 once.
 *
 * A ReLU after the layer (the residual block's, after its sum) runs inside both kernels
 * (bn_add_fuse_relu): the forward kernel stores max(sum, 0) in the ReLU's output and not the sum,
 * the backward kernel takes the ReLU's output gradient where the ReLU's output is above 0 (the
 * CPU's rule, dx = x > 0 ? dy : 0, since the output is above 0 exactly where the input is) and 0
 * elsewhere. The values are those of the two layers' own passes, element by element: a pass
 * over the activations and a launch fewer each way. */
#include "add.h"
#include "gpu/add_into.cuh"
#include "gpu/code_anchor.cuh"
#include "gpu/cuda_check.h"
#include "gpu/grid_stride.h"
#include "gpu/pdl.cuh"
#include "gpu/bf16.cuh"
#include "gpu/typed.cuh"

template <typename T> struct add_args {
    const T *x[BN_MAX_INPUTS];
    T *dx[BN_MAX_INPUTS];
    float coeff[BN_MAX_INPUTS];
    int inputs;
    int scaled; /* 0: every coefficient is 1, no multiply */
};

/* The kernels work on packs of N elements (N = 1, or bn_pack<T>::N: 16 bytes, where every
 * pointer is 16-byte aligned and the count a multiple of N; bn_ld_n and bn_st_n in
 * gpu/bf16.cuh) counted in the index type I (unsigned where the packs fit in 31 bits): one
 * element at a time with 64-bit indices, the sums and their gradients of resnet_fashion's step at
 * batch 64 took 5-21 us a pass over 6.4 MB blobs.
 *
 * y = the sum, or with relu (a fused ReLU) its output max(sum, 0). */
template <typename T, int N, typename I>
static __global__ void add_forward(add_args<T> a, T *__restrict__ y, I packs, int relu)
{
    bn_early_entry(); /* pdl.cuh */
    for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < packs; i += (I)gridDim.x * blockDim.x) {
        const size_t at = (size_t)i * N;
        float acc[N], v[N];
        bn_ld_n<T, N>(&a.x[0][at], acc);
        if (a.scaled) {
#pragma unroll
            for (int k = 0; k < N; k++) acc[k] = __fmul_rn(a.coeff[0], acc[k]);
        }
        for (int j = 1; j < a.inputs; j++) {
            bn_ld_n<T, N>(&a.x[j][at], v);
#pragma unroll
            for (int k = 0; k < N; k++) acc[k] = __fadd_rn(acc[k], a.scaled ? __fmul_rn(a.coeff[j], v[k]) : v[k]);
        }
        if (relu) {
#pragma unroll
            for (int k = 0; k < N; k++) acc[k] = !(acc[k] > 0.0f) ? 0.0f : acc[k];
        }
        bn_st_n<T, N>(&y[at], acc);
    }
}

/* dy: the sum's gradient, or with relu_y (a fused ReLU's output) the ReLU's output gradient; plus
 * part where it is not NULL (bn_pass.dy_part). */
template <typename T, int N, typename I>
static __global__ void add_backward(add_args<T> a, const T *__restrict__ dy, const T *__restrict__ part,
                                    const T *__restrict__ relu_y, I packs)
{
    bn_early_entry(); /* pdl.cuh */
    for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < packs; i += (I)gridDim.x * blockDim.x) {
        const size_t at = (size_t)i * N;
        float g[N], out[N];
        bn_ld_grad_n<T, N>(dy, part, at, g);
        if (relu_y) {
            float r[N];
            bn_ld_n<T, N>(&relu_y[at], r);
#pragma unroll
            for (int k = 0; k < N; k++) g[k] = !(r[k] > 0.0f) ? 0.0f : g[k];
        }
        for (int j = 0; j < a.inputs; j++) {
            if (!a.dx[j]) continue;
#pragma unroll
            for (int k = 0; k < N; k++) out[k] = a.scaled ? __fmul_rn(a.coeff[j], g[k]) : g[k];
            bn_st_n<T, N>(&a.dx[j][at], out);
        }
    }
}

/* Whether a pass over n elements may take packs: n a multiple of the pack and every pointer
 * aligned to it. */
template <typename T> static bool packed(size_t n, const add_args<T> &a, const void *y, const void *z)
{
    bool ok = n % bn_pack<T>::N == 0 && (!y || bn_aligned16(y)) && (!z || bn_aligned16(z));
    for (int j = 0; j < a.inputs; j++)
        ok = ok && (!a.x[j] || bn_aligned16(a.x[j])) && (!a.dx[j] || bn_aligned16(a.dx[j]));
    return ok;
}

template <typename T> static add_args<T> args_of(const bn_layer *l)
{
    const add_priv *p = (const add_priv *)l->priv;
    add_args<T> a = {};
    a.inputs = l->num_inputs;
    a.scaled = p->num_coeffs != 0;
    for (int j = 0; j < l->num_inputs; j++) a.coeff[j] = bn_add_coeff(p, j);
    return a;
}

template <typename T> static bn_status add_forward_as(bn_layer *l, const bn_pass *p)
{
    add_args<T> a = args_of<T>(l);
    for (int j = 0; j < l->num_inputs; j++) {
        BN_TYPED_RD(T, x, l->inputs[j]);
        a.x[j] = x;
    }
    const bn_layer *relu = ((const add_priv *)l->priv)->relu_after;
    BN_TYPED_WR(T, y, relu ? relu->out : l->out);
    const size_t n = bn_blob_count(l->out), N = bn_pack<T>::N;
    cudaStream_t s = (cudaStream_t)p->ctx->stream;
    const int r = relu != NULL;
    const bool pk = packed(n, a, y, NULL);
    const int packs_grid = bn_grid_stride_blocks(n / N), grid = bn_grid_stride_blocks(n);
    if (pk && bn_index_fits_32(n)) {
        bn_launch_early(add_forward<T, bn_pack<T>::N, unsigned>, packs_grid, 256, 0, s, a, y, (unsigned)(n / N), r);
    } else if (pk) {
        bn_launch_early(add_forward<T, bn_pack<T>::N, size_t>, packs_grid, 256, 0, s, a, y, n / N, r);
    } else if (bn_index_fits_32(n)) {
        bn_launch_early(add_forward<T, 1, unsigned>, grid, 256, 0, s, a, y, (unsigned)n, r);
    } else {
        bn_launch_early(add_forward<T, 1, size_t>, grid, 256, 0, s, a, y, n, r);
    }
    BN_CUDA_LAUNCH();
    return BN_OK;
}

template <typename T> static bn_status add_backward_as(bn_layer *l, const bn_pass *p)
{
    add_args<T> a = args_of<T>(l);
    int any = 0;
    for (int j = 0; j < l->num_inputs; j++) {
        if (!l->input_grads[j]) continue;
        BN_TYPED_WR(T, dx, l->input_grads[j]);
        a.dx[j] = dx;
        any = 1;
    }
    if (!any) return BN_OK;
    const bn_layer *relu = ((const add_priv *)l->priv)->relu_after;
    const T *relu_y = NULL;
    if (relu) {
        BN_TYPED_RD(T, ry, relu->out);
        relu_y = ry;
    }
    BN_TYPED_RD(T, dy, relu ? relu->out_grad : l->out_grad);
    const T *part = NULL;
    if (p->dy_part) {
        BN_TYPED_RD(T, pt, p->dy_part);
        part = pt;
    }
    const size_t n = bn_blob_count(l->out), N = bn_pack<T>::N;
    cudaStream_t s = (cudaStream_t)p->ctx->stream;
    const bool pk = packed(n, a, dy, relu_y) && (!part || bn_aligned16(part));
    const int packs_grid = bn_grid_stride_blocks(n / N), grid = bn_grid_stride_blocks(n);
    if (pk && bn_index_fits_32(n)) {
        bn_launch_early(add_backward<T, bn_pack<T>::N, unsigned>, packs_grid, 256, 0, s, a, dy, part, relu_y,
                        (unsigned)(n / N));
    } else if (pk) {
        bn_launch_early(add_backward<T, bn_pack<T>::N, size_t>, packs_grid, 256, 0, s, a, dy, part, relu_y, n / N);
    } else if (bn_index_fits_32(n)) {
        bn_launch_early(add_backward<T, 1, unsigned>, grid, 256, 0, s, a, dy, part, relu_y, (unsigned)n);
    } else {
        bn_launch_early(add_backward<T, 1, size_t>, grid, 256, 0, s, a, dy, part, relu_y, n);
    }
    BN_CUDA_LAUNCH();
    return BN_OK;
}

extern "C" bn_status bn_add_forward_gpu(bn_layer *l, const bn_pass *p)
{
    if (bn_blob_is_bf16(l->out)) return add_forward_as<__nv_bfloat16>(l, p);
    return add_forward_as<float>(l, p);
}

extern "C" bn_status bn_add_backward_gpu(bn_layer *l, const bn_pass *p)
{
    if (bn_blob_is_bf16(l->out_grad)) return add_backward_as<__nv_bfloat16>(l, p);
    return add_backward_as<float>(l, p);
}

extern "C" int bn_add_fuse_relu(bn_layer *l, bn_layer *relu, int after)
{
    if (!after || !relu->out_grad || !l->out_grad) return 0;
    ((add_priv *)l->priv)->relu_after = relu;
    return BN_FUSED_FORWARD | BN_FUSED_NO_IN | BN_FUSED_BACKWARD | BN_FUSED_NO_IN_GRAD;
}

BN_CODE_ANCHOR(add, add_forward<float, 1, unsigned>) /* code_load.cu */
