/* dense_gemm.h - blobnet's own GEMM kernels for the dense layer's products (dense_gemm.cu):
 * own_gemm (FP32 FMA) and own_gemm_tc (the TF32 tensor cores at FP32 accuracy), the output tiled
 * over the whole GPU and the inner dimension split across blocks, whose partial sums are added in
 * a fixed order. An own_plan fixes how one product is tiled and split and owns the counters and
 * partial sums of its reduction; dense_plan.cu decides when a product runs through one. For .cu
 * files only. */
#ifndef BN_DENSE_GEMM_H
#define BN_DENSE_GEMM_H

#include <cuda_runtime.h>

#include "core/device.h"
#include "core/status.h"
#include "dense_kernels.h"

/* The configurations of own_gemm, by their tiles {BM, BN}: OWN_FMA64 and OWN_FMA32, the FP32
 * FMA kernel (256 threads, 4 x 4 or 2 x 2 outputs each); OWN_TC64 and OWN_TC32, the tensor-core
 * kernels (128 threads: own_gemm_tc, or for OWN_TC32 with operands that allow 8-byte copies
 * own_gemm_tck). OWN_SKINNY, as a forced configuration: the few-outputs kernels where they
 * can run, else OWN_FMA32. */
enum { OWN_FMA64, OWN_FMA32, OWN_TC64, OWN_TC32, OWN_CONFIGS, OWN_SKINNY = OWN_CONFIGS };

/* The depth of the inner dimension's slices in own_gemm and own_gemm_tc (own_gemm_tck's are two of
 * them), and the unit of a plan's inner ranges. */
#define OWN_BK 16

/* How one product runs through own_gemm, and the counters and partial sums it owns. */
typedef struct own_plan {
    int cfg;                /* OWN_FMA64 .. OWN_TC32 */
    int rows, cols, inner;  /* the product as own_gemm sees it */
    int tiles_n, tiles;     /* column tiles, all tiles */
    int splits, ktps;       /* inner ranges, slices per range */
    unsigned *counters;     /* splits > 1: per-tile counters, zeroed at creation */
    float *part;            /* splits > 1: partial tiles */
    int one_product;        /* tensor cores: one TF32 product per multiply (tf32), not three */
} own_plan;

#ifdef __cplusplus
extern "C" {
#endif

/* The tiling of product `kind` (batch n, k inputs, m outputs) in configuration cfg on `sms`
 * multiprocessors: want_splits > 0 asks for that many inner ranges, no_alloc for one. Allocates
 * nothing (bn_dense_own_alloc does). */
own_plan bn_dense_own_layout(int kind, int n, int k, int m, int cfg, int sms, int want_splits, int no_alloc);
/* The configuration the fixed rule takes for the product (tensor_ok: TF32 tensor cores). */
int bn_dense_own_rule(int kind, int n, int k, int m, int sms, int tensor_ok);
/* Allocates and zeroes the counters and partial sums a layout with splits needs. */
bn_status bn_dense_own_alloc(own_plan *o);
/* Frees what bn_dense_own_alloc allocated, if anything. */
void bn_dense_own_free(own_plan *o);
/* One launch of the plan's kernel on s: a and b the operands as own_gemm names them
 * (dense_gemm.cu), c the output, bias (FWD), db (DW: the bias gradient, added too, or NULL), e
 * (FWD, DX: a fused ReLU, or NULLs). */
bn_status bn_dense_run_own_on(const own_plan *o, int kind, cudaStream_t s, const float *a, const float *b, float *c,
                              const float *bias, float *db, relu_epi e);
/* bn_dense_run_own_on on the context stream. */
bn_status bn_dense_run_own(const own_plan *o, int kind, const bn_ctx *ctx, const float *a, const float *b, float *c,
                           const float *bias, float *db, relu_epi e);
/* What bn_dense_gpu_force_own (dense.h) set: *config -1 when nothing is forced. */
void bn_dense_own_forced(int *config, int *splits);

#ifdef __cplusplus
}
#endif
#endif
