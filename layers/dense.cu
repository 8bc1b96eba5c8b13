/* dense.cu - the dense layer on the GPU. The three products go through cuBLAS, which is
 * column-major: a row-major (r x c) matrix is, read column-major, its (c x r) transpose, so
 * Y = X W^T is computed as Y^T = W X^T, and so on. The bias is seeded into Y before the
 * forward GEMM accumulates onto it (as on the CPU); its gradient is a column sum done by a
 * kernel in a fixed order, so it is deterministic. */
#include "cuda_check.h"
#include "dense.h"

enum { WEIGHT, BIAS };

/* Column tile of the bias-gradient kernel: BIAS_COLS columns per block, BIAS_ROWS threads
 * walking down each column. */
#define BIAS_COLS 32
#define BIAS_ROWS 16

/* y[i][o] = b[o] for every row i of the batch. */
static __global__ void seed_bias(float *__restrict__ y, const float *__restrict__ b, size_t total, int m)
{
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) y[i] = b[i % m];
}

/* db[o] += sum over the n rows of dy[i][o]. Threads of a warp read consecutive columns (coalesced);
 * the BIAS_ROWS partial sums of a column are then added in a fixed order. */
static __global__ void bias_grad(const float *__restrict__ dy, int n, int m, float *__restrict__ db)
{
    __shared__ float part[BIAS_ROWS][BIAS_COLS + 1];
    int col = blockIdx.x * BIAS_COLS + threadIdx.x;
    float s = 0.0f;
    if (col < m)
        for (int i = threadIdx.y; i < n; i += BIAS_ROWS) s += dy[(size_t)i * m + col];
    part[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y == 0 && col < m) {
        float total = 0.0f;
        for (int r = 0; r < BIAS_ROWS; r++) total += part[r][threadIdx.x];
        db[col] += total;
    }
}

static int grid_for(size_t n)
{
    size_t b = (n + 255) / 256;
    return (int)(b < 1 ? 1 : b > 4096 ? 4096 : b);
}

/* FP32 FMA unless the context allows TF32 tensor cores. The handle is shared, so the mode is
 * set before every use rather than once. */
static bn_status blas_for(const bn_ctx *ctx, cublasHandle_t *h)
{
    *h = (cublasHandle_t)ctx->cublas;
    BN_CUBLAS(cublasSetMathMode(*h, ctx->tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
    return BN_OK;
}

extern "C" bn_status bn_dense_forward_gpu(bn_layer *l, const bn_pass *p)
{
    const dense_priv *d = (const dense_priv *)l->priv;
    int n = l->in->n, k = d->inputs, m = d->outputs;
    BN_DEV_RD(x, l->in);
    BN_DEV_RD(w, l->params[WEIGHT].value);
    BN_DEV_RD(b, l->params[BIAS].value);
    BN_DEV_WR(y, l->out);
    size_t total = (size_t)n * m;
    seed_bias<<<grid_for(total), 256, 0, (cudaStream_t)p->ctx->stream>>>(y, b, total, m);
    BN_CUDA_LAUNCH();
    cublasHandle_t h = NULL;
    BN_TRY(blas_for(p->ctx, &h));
    const float one = 1.0f;
    /* Y^T (m x n) += W (m x k, stored as its transpose) times X^T (k x n) */
    BN_CUBLAS(cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &one, w, k, x, k, &one, y, m));
    return BN_OK;
}

extern "C" bn_status bn_dense_backward_gpu(bn_layer *l, const bn_pass *p)
{
    const dense_priv *d = (const dense_priv *)l->priv;
    int n = l->in->n, k = d->inputs, m = d->outputs;
    BN_DEV_RD(x, l->in);
    BN_DEV_RD(w, l->params[WEIGHT].value);
    BN_DEV_RD(dy, l->out_grad);
    BN_DEV_WR(dw, l->params[WEIGHT].grad);
    BN_DEV_WR(db, l->params[BIAS].grad);
    cublasHandle_t h = NULL;
    BN_TRY(blas_for(p->ctx, &h));
    const float one = 1.0f, zero = 0.0f;
    /* dW^T (k x m) += X^T (k x n) times dY (n x m, stored as its transpose) */
    BN_CUBLAS(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_T, k, m, n, &one, x, k, dy, m, &one, dw, k));
    dim3 threads(BIAS_COLS, BIAS_ROWS);
    bias_grad<<<(m + BIAS_COLS - 1) / BIAS_COLS, threads, 0, (cudaStream_t)p->ctx->stream>>>(dy, n, m, db);
    BN_CUDA_LAUNCH();
    if (l->in_grad) {
        BN_DEV_WR(dx, l->in_grad);
        /* dX^T (k x n) = W^T (k x m) times dY^T (m x n) */
        BN_CUBLAS(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, k, n, m, &one, w, k, dy, m, &zero, dx, k));
    }
    return BN_OK;
}
