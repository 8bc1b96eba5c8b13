/* activation_fn.cuh - the five activations' formulas on the GPU, for the activation layers' own
 * kernels (activation.cu) and for the kernels of the layers that do an activation's passes in its
 * place (bn_layer_ops.fuse_gpu: a dense layer's epilogues, batchnorm's passes). One copy of each
 * formula, so that a fused pass gives the bits the activation's own pass would.
 *
 * The CPU's conventions (activation.c): relu'(0) = 0, leaky_relu'(0) = slope, elu takes its
 * linear branch only for x > 0, sigmoid and tanh take their derivatives from the output y. For
 * all five, y > 0 exactly where x > 0 (a slope of 0 makes leaky_relu a ReLU; elu's left branch is
 * alpha (e^x - 1) <= 0), so the derivative can be taken from y alone (bn_act_grad_y): what a
 * layer that reads the activation's output, and not its input, has at hand. */
#ifndef BN_ACTIVATION_FN_CUH
#define BN_ACTIVATION_FN_CUH

#include "activation.h"

static __device__ __forceinline__ float bn_sigmoid_of(float x)
{
    if (x >= 0.0f) return 1.0f / (1.0f + expf(-x));
    float e = expf(x);
    return e / (1.0f + e);
}

/* y = f(x); a is leaky_relu's slope or elu's alpha. */
template <act_kind K> static __device__ __forceinline__ float act_value(float x, float a)
{
    switch (K) {
    case ACT_RELU: return x > 0.0f ? x : 0.0f;
    case ACT_SIGMOID: return bn_sigmoid_of(x);
    case ACT_TANH: return tanhf(x);
    case ACT_LEAKY: return x > 0.0f ? x : a * x;
    case ACT_ELU: return x > 0.0f ? x : a * expm1f(x);
    }
    return x;
}

/* dx = dy * f'(x), f' written in x (relu-like) or in y = f(x) (sigmoid, tanh, elu's left side,
 * where a e^x = y + a). */
template <act_kind K> static __device__ __forceinline__ float act_grad(float x, float y, float dy, float a)
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

/* The same for a kind known only at run time (bn_act_fn, activation.h). */
static __device__ __forceinline__ float bn_act_value(bn_act_fn f, float x)
{
    switch (f.kind) {
    case ACT_SIGMOID: return act_value<ACT_SIGMOID>(x, f.a);
    case ACT_TANH: return act_value<ACT_TANH>(x, f.a);
    case ACT_LEAKY: return act_value<ACT_LEAKY>(x, f.a);
    case ACT_ELU: return act_value<ACT_ELU>(x, f.a);
    default: return act_value<ACT_RELU>(x, f.a);
    }
}

static __device__ __forceinline__ float bn_act_grad(bn_act_fn f, float x, float y, float dy)
{
    switch (f.kind) {
    case ACT_SIGMOID: return act_grad<ACT_SIGMOID>(x, y, dy, f.a);
    case ACT_TANH: return act_grad<ACT_TANH>(x, y, dy, f.a);
    case ACT_LEAKY: return act_grad<ACT_LEAKY>(x, y, dy, f.a);
    case ACT_ELU: return act_grad<ACT_ELU>(x, y, dy, f.a);
    default: return act_grad<ACT_RELU>(x, y, dy, f.a);
    }
}

/* dx from the output y alone (see the top of this file). */
static __device__ __forceinline__ float bn_act_grad_y(bn_act_fn f, float y, float dy)
{
    return bn_act_grad(f, y, y, dy);
}

/* The same on the vector types of gpu/vec_ops.cuh's loads, element by element. */
static __device__ __forceinline__ float bn_act_grad_y_v(bn_act_fn f, float y, float dy)
{
    return bn_act_grad_y(f, y, dy);
}

static __device__ __forceinline__ float2 bn_act_grad_y_v(bn_act_fn f, float2 y, float2 dy)
{
    return make_float2(bn_act_grad_y(f, y.x, dy.x), bn_act_grad_y(f, y.y, dy.y));
}

static __device__ __forceinline__ float4 bn_act_grad_y_v(bn_act_fn f, float4 y, float4 dy)
{
    return make_float4(bn_act_grad_y(f, y.x, dy.x), bn_act_grad_y(f, y.y, dy.y), bn_act_grad_y(f, y.z, dy.z),
                       bn_act_grad_y(f, y.w, dy.w));
}

#endif
