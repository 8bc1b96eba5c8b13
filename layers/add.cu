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
 * elsewhere. The values are those of the two layers' own passes, one element at a time: a pass
 * over the activations and a launch fewer each way. */
#include "add.h"
#include "gpu/cuda_check.h"
#include "gpu/bf16.cuh"
#include "gpu/typed.cuh"

template <typename T> struct add_args {
    const T *x[BN_MAX_INPUTS];
    T *dx[BN_MAX_INPUTS];
    float coeff[BN_MAX_INPUTS];
    int inputs;
    int scaled; /* 0: every coefficient is 1, no multiply */
};

/* y = the sum, or with relu (a fused ReLU) its output max(sum, 0). */
template <typename T>
static __global__ void add_forward(add_args<T> a, T *__restrict__ y, size_t n, int relu)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float acc = a.scaled ? __fmul_rn(a.coeff[0], bn_ld(&a.x[0][i])) : bn_ld(&a.x[0][i]);
        for (int j = 1; j < a.inputs; j++)
            acc = __fadd_rn(acc, a.scaled ? __fmul_rn(a.coeff[j], bn_ld(&a.x[j][i])) : bn_ld(&a.x[j][i]));
        bn_st(&y[i], relu && !(acc > 0.0f) ? 0.0f : acc);
    }
}

/* dy: the sum's gradient, or with relu_y (a fused ReLU's output) the ReLU's output gradient. */
template <typename T>
static __global__ void add_backward(add_args<T> a, const T *__restrict__ dy, const T *__restrict__ relu_y, size_t n)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float g = relu_y && !(bn_ld(&relu_y[i]) > 0.0f) ? 0.0f : bn_ld(&dy[i]);
        for (int j = 0; j < a.inputs; j++)
            if (a.dx[j]) bn_st(&a.dx[j][i], a.scaled ? __fmul_rn(a.coeff[j], g) : g);
    }
}

static int grid_for(size_t n)
{
    size_t b = (n + 255) / 256;
    return (int)(b < 1 ? 1 : b > 4096 ? 4096 : b);
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
    size_t n = bn_blob_count(l->out);
    add_forward<T><<<grid_for(n), 256, 0, (cudaStream_t)p->ctx->stream>>>(a, y, n, relu != NULL);
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
    size_t n = bn_blob_count(l->out);
    add_backward<T><<<grid_for(n), 256, 0, (cudaStream_t)p->ctx->stream>>>(a, dy, relu_y, n);
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
