/* dense_kernels.h - the little that the dense layer's GPU files share: the names of its three
 * products and the fused-ReLU epilogue its own kernels take. dense.cu owns the layer's passes,
 * dense_plan.cu the choice of what runs each product; dense_gemm.cu (dense_gemm.h) owns the split-K GEMM
 * kernels and their plans; dense_skinny.cu (dense_skinny.h) owns the few-outputs kernels. For
 * .cu files only. */
#ifndef BN_DENSE_KERNELS_H
#define BN_DENSE_KERNELS_H

#include "activation.h"

/* The three products of the layer. */
enum { GEMM_FWD, GEMM_DW, GEMM_DX };

/* A fused activation (net fusion, bn_layer_ops.fuse_gpu; any of the five, act) in a product's
 * epilogue: FWD also writes relu_y = f(Y), the activation layer's output; DX also writes relu_dx
 * = dX passed through f's derivative, taken from mask (the layer's input, which the activation
 * wrote): for a ReLU dX where mask is above 0 and 0 elsewhere. The activation layer's own
 * formulas (activation_fn.cuh), so both give the same bits. */
typedef struct relu_epi {
    float *relu_y;
    const float *mask;
    float *relu_dx;
    bn_act_fn act;
} relu_epi;

#endif
