/* dense.h - the dense layer's private state, shared by dense.c (setup, CPU path) and the GPU
 * path (dense.cu, dense_plan.cu), and its GPU entry points (dense.cu and dense_plan.cu; the test
 * hook in dense_gemm.cu). The GPU path keeps its cuBLASLt handle and the GEMM algorithms it chose
 * (per batch size) in `gpu`. */
#ifndef BN_DENSE_H
#define BN_DENSE_H

#include "core/layer.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The cuBLASLt handle and the chosen GEMM plans; defined in dense_plan.h. */
typedef struct dense_gpu dense_gpu;

typedef struct dense_priv {
    int outputs;
    int init;       /* index into dense.c's init_names */
    int inputs;     /* from setup */
    dense_gpu *gpu; /* NULL until the first GPU pass; released by bn_dense_gpu_release */
    bn_layer *relu_after;  /* a ReLU layer whose GPU forward this layer's does (fuse_gpu) */
    bn_layer *relu_before; /* a ReLU layer whose GPU backward this layer's does (fuse_gpu) */
    bn_layer *loss_after;  /* a softmax_ce layer that runs this layer's GPU forward as its dense
                              head (fuse_next_gpu, softmax_ce.h) */
    int dx_written;        /* the head wrote the input gradient in this step's forward: the GPU
                              backward that follows leaves it (set and cleared in one step body) */
} dense_priv;

/* Y = X W^T + b and its gradients through cuBLASLt on the context stream. */
bn_status bn_dense_forward_gpu(bn_layer *l, const bn_pass *p);
bn_status bn_dense_backward_gpu(bn_layer *l, const bn_pass *p);

/* The passes under --precision bf16 (dense_bf16.cu): BF16 activations and weights (value16)
 * through cublasGemmEx with FP32 accumulation, the parameter gradients FP32. The two above
 * hand a layer whose blobs hold BF16 to these. */
bn_status bn_dense_forward_bf16(bn_layer *l, const bn_pass *p);
bn_status bn_dense_backward_bf16(bn_layer *l, const bn_pass *p);

/* bn_layer_ops.fuse_gpu: takes over a neighbouring ReLU layer's GPU forward (after = 1) or
 * backward (after = 0) pass. */
int bn_dense_fuse_relu(bn_layer *l, bn_layer *relu, int after);
/* bn_layer_ops.fuse_next_gpu: a softmax_ce layer after it runs its forward as a dense head. */
int bn_dense_fuse_next(bn_layer *l, bn_layer *next);

/* Test hook: every dense plan made from now on runs through the layer's own GEMM kernels in
 * configuration `config` (0: FP32 FMA, 64x64 tiles; 1: FP32 FMA, 32x32; 2 and 3: tensor cores
 * with split TF32, 64x64 and 32x32, or configs 0 and 1 on a device without them) with `splits`
 * inner-dimension ranges (0: the shape's rule; clamped to what the shape allows), whatever the
 * context's flags; config 4 takes the few-outputs kernels for the forward and input-gradient
 * products of a layer with at most 16 outputs and config 1 for the rest; config -1 restores the
 * normal choice. Plans made under another setting are not reused. */
void bn_dense_gpu_force_own(int config, int splits);
/* The inner ranges (*splits) the tensor cores' 32x32 tiles take for product `kind` (0 forward, 1
 * weight gradient, 2 input gradient) of a layer of k inputs and m outputs at batch n on a device of
 * `sms` multiprocessors. Returns 0 without CUDA, else 1. */
int bn_dense_gpu_tiling(int kind, int n, int k, int m, int sms, int *splits);

/* Writes who runs each product planned so far, one "n=<batch> <product>: <runner>" entry per
 * plan ("fwd", "dW", "dX"; runners "blobnet fma64", "fma32", "tc64", "tc32" for own_gemm's
 * configurations, "blobnet skinny", "cublasLt", "cublas sgemm"), into buf (for logs and tests). */
void bn_dense_gpu_describe(const bn_layer *l, char *buf, size_t cap);

/* Frees the GPU state (handle, descriptors, chosen algorithms) and sets d->gpu to NULL. */
void bn_dense_gpu_release(dense_priv *d);

#ifdef __cplusplus
}
#endif
#endif
