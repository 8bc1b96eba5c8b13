/* dense_plan.h - what dense.cu's passes and dense_plan.cu's plans share: a product's plan (who
 * runs it: cuBLASLt's algorithm, cublasSgemm, own_gemm or the few-outputs kernels, chosen once per
 * batch size, pointer alignment, TF32 flag and way of choosing), the layer's GPU state, a
 * product's operands, and the two calls the passes make: the plan for a product, and the
 * product run through it. dense_plan.cu owns the plans and their choice; dense.cu owns the
 * passes and the fusions. For .cu files only. */
#ifndef BN_DENSE_PLAN_H
#define BN_DENSE_PLAN_H

#include <cublasLt.h>

#include "dense.h"
#include "dense_gemm.h"
#include "dense_kernels.h"
#include "gpu/overlap.h"

/* Operand slots of a plan's pointer alignments. */
enum { OPND_A, OPND_B, OPND_D, OPND_BIAS, OPNDS };

typedef struct dense_plan {
    int kind;                       /* GEMM_FWD, GEMM_DW or GEMM_DX */
    int n;                          /* batch size */
    int tf32, mode;                 /* the context's TF32 flag and bn_chooser_mode when made */
    unsigned align[OPNDS];          /* pointer alignment (bytes) it was chosen for */
    int use_lt;                     /* 0: cuBLASLt offered nothing, use cublasSgemm */
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t a, b, d; /* C is D (same buffer, same layout) */
    cublasLtMatmulAlgo_t algo;
    size_t workspace;               /* bytes the algorithm needs */
    int forced_cfg, forced_splits;  /* bn_dense_gpu_force_own's setting it was made under */
    int own;                        /* 1: own_gemm runs the product (then use_lt is unused) */
    int skinny;                     /* 1: the few-outputs kernels run it (then own and use_lt are unused) */
    own_plan ow;
} dense_plan;

struct dense_gpu {
    cublasLtHandle_t lt;
    bn_overlap side; /* dW on the side stream beside dX */
    dense_plan **plans;
    int num_plans;
    int sms;        /* the device's multiprocessors */
    int tensor_ok;  /* compute capability 8.0 or later: the TF32 tensor cores (OWN_TC64, OWN_TC32) */
};

/* No fused ReLU. */
static const relu_epi NO_RELU = {NULL, NULL, NULL};

/* The operands of one product: A, B, D (also C), the bias (forward only), beta, and the bias
 * gradient (DW only: own_gemm adds to it when it runs the product). */
typedef struct gemm_args {
    const float *a, *b;
    float *d;
    const float *bias;
    float beta;
    float *db;
    relu_epi relu;  /* FWD, DX: a fused ReLU (zeros: none) */
} gemm_args;

#ifdef __cplusplus
extern "C" {
#endif

/* The GPU state (made on first use; the layer owns it) and the plan for product `kind` at the
 * layer's batch size and ga's pointers, made on first use (dense_plan.cu says how it is chosen). */
bn_status bn_dense_prepare(bn_layer *l, bn_ctx *ctx, int kind, const gemm_args *ga, dense_gpu **gpu,
                           dense_plan **plan);

/* Runs one product through its plan (or the cublasSgemm fallback). *fused (DW, may be NULL) is
 * set to 1 when the bias gradient ga->db was added too. A fused ReLU (ga->relu) goes into the
 * epilogue of blobnet's kernels; cuBLAS's have none, so *relu_done (may be NULL) says whether it
 * ran. */
bn_status bn_dense_gemm(bn_layer *l, bn_ctx *ctx, int kind, const gemm_args *ga, int *fused, int *relu_done);

#ifdef __cplusplus
}
#endif
#endif
