/* dense_skinny.h - the dense layer's few-outputs kernels (dense_skinny.cu): the forward and
 * input-gradient products of a layer with at most SKINNY_M outputs (a classifier's last), where
 * a tiled GEMM has almost nothing to tile. dense_plan.cu decides when they run (by the rule wherever
 * they fit, else when timed fastest). For .cu files only. */
#ifndef BN_DENSE_SKINNY_H
#define BN_DENSE_SKINNY_H

#include <cuda_runtime.h>

#include "core/status.h"
#include "dense_kernels.h"

/* The most outputs the few-outputs kernels take. */
#define SKINNY_M 16

#ifdef __cplusplus
extern "C" {
#endif

/* Whether the few-outputs kernels can run product `kind` for a batch of n, k inputs, m outputs. */
bool bn_dense_skinny_fits(int kind, int n, int k, int m);
/* Enqueues product `kind` on s: GEMM_FWD d = Y from a = W, b = X and bias; GEMM_DX d = dX from
 * a = W, b = dY (bias unused); e a fused ReLU, or NULLs. */
bn_status bn_dense_run_skinny(int kind, cudaStream_t s, const float *a, const float *b, float *d, const float *bias,
                              int n, int k, int m, relu_epi e);

#ifdef __cplusplus
}
#endif
#endif
