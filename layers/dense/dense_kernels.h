/* dense_kernels.h - the little that the dense layer's GPU files share: the names of its three
 * products and the fused-ReLU epilogue its own kernels take. dense.cu owns the layer's passes,
 * dense_plan.cu the choice of what runs each product; dense_gemm.cu (dense_gemm.h) owns the split-K GEMM
 * kernels and their plans; dense_skinny.cu (dense_skinny.h) owns the few-outputs kernels. For
 * .cu files only. */
#ifndef BN_DENSE_KERNELS_H
#define BN_DENSE_KERNELS_H

/* The three products of the layer. */
enum { GEMM_FWD, GEMM_DW, GEMM_DX };

/* A fused ReLU (net fusion, bn_layer_ops.fuse_gpu) in a product's epilogue: FWD also writes
 * relu_y = max(Y, 0), the ReLU layer's output; DX also writes relu_dx = dX where mask (the
 * layer's input, which the ReLU wrote) is above 0 and 0 elsewhere, the ReLU layer's input
 * gradient. The CPU's rules (activation.c), so both give the same bits. */
typedef struct relu_epi {
    float *relu_y;
    const float *mask;
    float *relu_dx;
} relu_epi;

#endif
