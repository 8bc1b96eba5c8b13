/* dense_bf16.cu - the dense layer's GPU passes under --precision bf16. Its input, output and
 * their gradients are BF16 on the device, its weights are read from their BF16 copy (value16)
 * and its parameter gradients stay FP32. The three products go through cublasGemmEx with BF16
 * operands on the tensor cores and FP32 accumulation (CUBLAS_COMPUTE_32F), in the column-major
 * reading dense.cu describes:
 *
 *   forward   Y^T (m x n)  = op_T(W) X^T + b   into BF16 Y, seeded with the bias (beta = 1)
 *   dW        dW^T (k x m) += X^T op_T(dY^T)   into the FP32 gradient slab (beta = 1)
 *   dX        dX^T (k x n) = W^T dY^T          into BF16 dX (beta = 0)
 *
 * so each output element is rounded once, after the FP32 sum. The bias gradient is the FP32 column
 * sum of dY in a fixed order, as in dense.cu. Nothing here allocates or synchronises, so the
 * passes can be captured in a CUDA graph. blobnet's own product kernels, the cuBLASLt plans and
 * the fusions are FP32 only (the net applies no fusion rule under bf16). */
#include "dense.h"
#include "dense_bias.cuh"
#include "gpu/bf16.cuh"
#include "gpu/code_anchor.cuh"
#include "gpu/cuda_check.h"

enum { WEIGHT, BIAS };

/* The context's cuBLAS handle in its default math mode: the FP32 path may have left it in TF32
 * mode, which does not concern BF16 operands but is reset so that the mode is known. */
static bn_status blas_of(const bn_ctx *ctx, cublasHandle_t *h)
{
    *h = (cublasHandle_t)ctx->cublas;
    BN_CUBLAS(cublasSetMathMode(*h, CUBLAS_DEFAULT_MATH));
    return BN_OK;
}

extern "C" bn_status bn_dense_forward_bf16(bn_layer *l, const bn_pass *p)
{
    const dense_priv *d = (const dense_priv *)l->priv;
    const int n = l->in->n, k = d->inputs, m = d->outputs;
    BN_DEV16_RD(x, l->in);
    BN_DEV16_RD(w, l->params[WEIGHT].value16);
    BN_DEV16_RD(b, l->params[BIAS].value16);
    BN_DEV16_WR(y, l->out);
    cublasHandle_t h;
    BN_TRY(blas_of(p->ctx, &h));
    size_t total = (size_t)n * m;
    bn_launch_early(seed_bias<__nv_bfloat16>, grid_for(total), 256, 0, (cudaStream_t)p->ctx->stream, y, b, total, m);
    BN_CUDA_LAUNCH();
    const float one = 1.0f;
    BN_CUBLAS(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &one, w, CUDA_R_16BF, k, x, CUDA_R_16BF, k, &one, y,
                           CUDA_R_16BF, m, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return BN_OK;
}

extern "C" bn_status bn_dense_backward_bf16(bn_layer *l, const bn_pass *p)
{
    const dense_priv *d = (const dense_priv *)l->priv;
    const int n = l->in->n, k = d->inputs, m = d->outputs;
    BN_DEV16_RD(x, l->in);
    BN_DEV16_RD(dy, l->out_grad);
    BN_DEV_WR(dw, l->params[WEIGHT].grad);
    BN_DEV_WR(db, l->params[BIAS].grad);
    cublasHandle_t h;
    BN_TRY(blas_of(p->ctx, &h));
    const float one = 1.0f, zero = 0.0f;
    BN_CUBLAS(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_T, k, m, n, &one, x, CUDA_R_16BF, k, dy, CUDA_R_16BF, m, &one, dw,
                           CUDA_R_32F, k, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    dim3 threads(BIAS_COLS, BIAS_ROWS);
    bn_launch_early(bias_grad<__nv_bfloat16>, (m + BIAS_COLS - 1) / BIAS_COLS, threads, 0, (cudaStream_t)p->ctx->stream,
                    dy, n, m, db);
    BN_CUDA_LAUNCH();
    if (!l->in_grad) return BN_OK;
    BN_DEV16_RD(w, l->params[WEIGHT].value16);
    BN_DEV16_WR(dx, l->in_grad);
    BN_CUBLAS(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, k, n, m, &one, w, CUDA_R_16BF, k, dy, CUDA_R_16BF, m, &zero,
                           dx, CUDA_R_16BF, k, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return BN_OK;
}

BN_CODE_ANCHOR(dense_bf16, seed_bias<__nv_bfloat16>) /* code_load.cu */
