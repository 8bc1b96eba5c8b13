/* dense.cu - the dense layer on the GPU. The three products go through cuBLASLt, which is
 * column-major: a row-major (r x c) matrix is, read column-major, its (c x r) transpose, so
 * Y = X W^T is computed as Y^T = W X^T, and so on:
 *
 *   forward   Y^T (m x n)  = op_T(W: k x m, ld k) * X^T (k x n, ld k)   + b   (bias epilogue)
 *   dW        dW^T (k x m) += X^T (k x n, ld k)  * op_T(dY: m x n, ld m)       (beta = 1)
 *   dX        dX^T (k x n) = W^T (k x m, ld k)   * dY^T (m x n, ld m)          (beta = 0)
 *
 * with n the batch, k the inputs and m the outputs. The forward bias is added by the GEMM's
 * BIAS epilogue: its vector has one entry per row of the column-major output, i.e. per output
 * unit, broadcast over the n columns (examples). The bias gradient is a column sum done by a
 * kernel in a fixed order, so it is deterministic, and it accumulates like dW.
 *
 * Each GEMM's algorithm is chosen once per (batch size, pointer alignment, TF32, determinism)
 * and kept in a plan, like conv2d.cu's: the cuBLASLt heuristic results (up to eight) are timed on
 * the context stream and the fastest kept, or, in a deterministic context, the first one is
 * taken so that every run makes the same choice. Plans are made on the first pass for a batch
 * size, which the trainer runs eagerly; once made, a pass only enqueues work (no allocation,
 * synchronisation or timing), so it can be captured in a CUDA graph. A plan asked for while
 * the stream is being captured takes the first heuristic result without timing.
 *
 * Only full batches (the blob capacity) may grow the context's shared workspace: those plans
 * are made in the first, eager step, before any graph is captured; plans for a smaller last
 * batch must make do with the workspace already there (none in a deterministic context, so
 * that the choice does not depend on earlier reservations), so that they never free the
 * buffer a captured graph refers to.
 *
 * Without ctx->tf32 the compute type is CUBLAS_COMPUTE_32F (plain FP32, like the CPU); with it,
 * CUBLAS_COMPUTE_32F_FAST_TF32. Should cuBLASLt offer no algorithm for a product, that product
 * goes through cublasSgemm as before (the bias then seeded into Y first). */
#include <stdint.h>
#include <stdlib.h>

#include <cublasLt.h>

#include "cuda_check.h"
#include "dense.h"

enum { WEIGHT, BIAS };

/* The three products of the layer. */
enum { GEMM_FWD, GEMM_DW, GEMM_DX };

/* Column tile of the bias-gradient kernel: BIAS_COLS columns per block, BIAS_ROWS threads
 * walking down each column. */
#define BIAS_COLS 32
#define BIAS_ROWS 16

/* The most workspace one algorithm may ask for (these products are small). */
#define WORKSPACE_LIMIT ((size_t)8 << 20)
/* Heuristic results asked for, how many of them are timed, and the launches timed per result. */
#define HEURISTIC_RESULTS 8
#define TIMED_RESULTS 8
#define TIMING_REPS 10

/* Operand slots of a plan's pointer alignments. */
enum { OPND_A, OPND_B, OPND_D, OPND_BIAS, OPNDS };

typedef struct dense_plan {
    int kind;                       /* GEMM_FWD, GEMM_DW or GEMM_DX */
    int n;                          /* batch size */
    int tf32, deterministic;        /* the context flags it was made under */
    unsigned align[OPNDS];          /* pointer alignment (bytes) it was chosen for */
    int use_lt;                     /* 0: cuBLASLt offered nothing, use cublasSgemm */
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t a, b, d; /* C is D (same buffer, same layout) */
    cublasLtMatmulAlgo_t algo;
    size_t workspace;               /* bytes the algorithm needs */
} dense_plan;

struct dense_gpu {
    cublasLtHandle_t lt;
    dense_plan **plans;
    int num_plans;
};

/* y[i][o] = b[o] for every row i of the batch (the cublasSgemm fallback only). */
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

/* ---- plans ---- */

static void plan_free(dense_plan *p)
{
    if (!p) return;
    if (p->a) cublasLtMatrixLayoutDestroy(p->a);
    if (p->b) cublasLtMatrixLayoutDestroy(p->b);
    if (p->d) cublasLtMatrixLayoutDestroy(p->d);
    if (p->op) cublasLtMatmulDescDestroy(p->op);
    free(p);
}

extern "C" void bn_dense_gpu_release(dense_priv *dp)
{
    dense_gpu *g = dp->gpu;
    if (!g) return;
    for (int i = 0; i < g->num_plans; i++) plan_free(g->plans[i]);
    free(g->plans);
    if (g->lt) cublasLtDestroy(g->lt);
    free(g);
    dp->gpu = NULL;
}

/* The largest power of two (at most 256) dividing the address; 256 for NULL. */
static unsigned align_of(const void *p)
{
    uintptr_t a = (uintptr_t)p;
    if (a == 0) return 256;
    uintptr_t low = a & (~a + 1);
    return low >= 256 ? 256u : (unsigned)low;
}

/* The stored (column-major) shape of a product's operands A, B and D (C is D), and the
 * transposes applied to A and B. Every operand is packed: its leading dimension is its rows. */
typedef struct gemm_shape {
    uint64_t rows[3], cols[3];
    cublasOperation_t ta, tb;
} gemm_shape;

static void set_operand(gemm_shape *s, int i, int rows, int cols)
{
    s->rows[i] = (uint64_t)rows;
    s->cols[i] = (uint64_t)cols;
}

static gemm_shape shape_of(int kind, int n, int k, int m)
{
    gemm_shape s;
    switch (kind) {
    case GEMM_FWD: /* Y^T (m x n) = op_T(W, stored k x m) * X^T (k x n) */
        set_operand(&s, 0, k, m);
        set_operand(&s, 1, k, n);
        set_operand(&s, 2, m, n);
        s.ta = CUBLAS_OP_T;
        s.tb = CUBLAS_OP_N;
        break;
    case GEMM_DW: /* dW^T (k x m) += X^T (k x n) * op_T(dY^T, stored m x n) */
        set_operand(&s, 0, k, n);
        set_operand(&s, 1, m, n);
        set_operand(&s, 2, k, m);
        s.ta = CUBLAS_OP_N;
        s.tb = CUBLAS_OP_T;
        break;
    default: /* GEMM_DX: dX^T (k x n) = W^T (stored k x m) * dY^T (m x n) */
        set_operand(&s, 0, k, m);
        set_operand(&s, 1, m, n);
        set_operand(&s, 2, k, n);
        s.ta = CUBLAS_OP_N;
        s.tb = CUBLAS_OP_N;
        break;
    }
    return s;
}

/* One launch of the plan's algorithm: D = alpha op(A) op(B) + beta D (+ bias, set in op). */
static cublasStatus_t run_lt(const dense_gpu *g, const dense_plan *p, const bn_ctx *ctx, const void *A,
                             const void *B, float beta, void *D, const cublasLtMatmulAlgo_t *algo)
{
    const float one = 1.0f;
    return cublasLtMatmul(g->lt, p->op, &one, A, p->a, B, p->b, &beta, D, p->d, D, p->d, algo, ctx->workspace,
                          ctx->workspace_size, (cudaStream_t)ctx->stream);
}

/* The operation and layout descriptors of a plan for its kind and batch size. */
static bn_status describe(dense_plan *p, int k, int m, const float *bias)
{
    gemm_shape s = shape_of(p->kind, p->n, k, m);
    BN_CUBLAS(cublasLtMatmulDescCreate(&p->op, p->tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F,
                                       CUDA_R_32F));
    BN_CUBLAS(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &s.ta, sizeof s.ta));
    BN_CUBLAS(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &s.tb, sizeof s.tb));
    if (p->kind == GEMM_FWD) {
        cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
        BN_CUBLAS(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
        /* The heuristics read the pointer's value for its alignment; each pass sets it again. */
        BN_CUBLAS(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    }
    BN_CUBLAS(cublasLtMatrixLayoutCreate(&p->a, CUDA_R_32F, s.rows[0], s.cols[0], (int64_t)s.rows[0]));
    BN_CUBLAS(cublasLtMatrixLayoutCreate(&p->b, CUDA_R_32F, s.rows[1], s.cols[1], (int64_t)s.rows[1]));
    BN_CUBLAS(cublasLtMatrixLayoutCreate(&p->d, CUDA_R_32F, s.rows[2], s.cols[2], (int64_t)s.rows[2]));
    return BN_OK;
}

/* Asks the heuristics for up to HEURISTIC_RESULTS algorithms that fit `limit` bytes of
 * workspace and the plan's pointer alignments; *got is 0 when cuBLASLt supports none. */
static bn_status heuristics(const dense_gpu *g, const dense_plan *p, size_t limit,
                            cublasLtMatmulHeuristicResult_t *r, int *got)
{
    *got = 0;
    cublasLtMatmulPreference_t pref;
    BN_CUBLAS(cublasLtMatmulPreferenceCreate(&pref));
    uint64_t ws = limit;
    uint32_t al[4] = {p->align[OPND_A], p->align[OPND_B], p->align[OPND_D], p->align[OPND_D]};
    cublasStatus_t s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                                            sizeof ws);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al[0], sizeof al[0]);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al[1], sizeof al[1]);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al[2], sizeof al[2]);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al[3], sizeof al[3]);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulAlgoGetHeuristic(g->lt, p->op, p->a, p->b, p->d, p->d, pref, HEURISTIC_RESULTS, r, got);
    cublasLtMatmulPreferenceDestroy(pref);
    if (s == CUBLAS_STATUS_NOT_SUPPORTED) { /* no algorithm for this configuration */
        *got = 0;
        return BN_OK;
    }
    BN_CUBLAS(s);
    /* Keep the usable results only, in the heuristics' order (fastest estimate first). */
    int kept = 0;
    for (int i = 0; i < *got; i++)
        if (r[i].state == CUBLAS_STATUS_SUCCESS && r[i].workspaceSize <= limit) r[kept++] = r[i];
    *got = kept;
    return BN_OK;
}

/* Milliseconds per launch of each candidate (INFINITY for one that fails to run), timed on the
 * context stream with D in scratch, so that no real output is touched. */
static bn_status time_candidates(const dense_gpu *g, const dense_plan *p, const bn_ctx *ctx, const void *A,
                                 const void *B, float beta, void *scratch, const cublasLtMatmulHeuristicResult_t *r,
                                 int count, cudaEvent_t start, cudaEvent_t stop, float *ms)
{
    cudaStream_t s = (cudaStream_t)ctx->stream;
    for (int i = 0; i < count; i++) {
        ms[i] = INFINITY;
        /* One untimed launch: it must run at all, and it warms caches and lazy loading. */
        if (run_lt(g, p, ctx, A, B, beta, scratch, &r[i].algo) != CUBLAS_STATUS_SUCCESS) continue;
        BN_CUDA(cudaEventRecord(start, s));
        int ok = 1;
        for (int rep = 0; rep < TIMING_REPS && ok; rep++)
            ok = run_lt(g, p, ctx, A, B, beta, scratch, &r[i].algo) == CUBLAS_STATUS_SUCCESS;
        BN_CUDA(cudaEventRecord(stop, s));
        BN_CUDA(cudaEventSynchronize(stop));
        float total = 0.0f;
        BN_CUDA(cudaEventElapsedTime(&total, start, stop));
        if (ok) ms[i] = total / TIMING_REPS;
    }
    cudaGetLastError(); /* a candidate that failed to launch leaves no error for later checks */
    return BN_OK;
}

/* Times the candidates (scratch and events made and freed here) and returns the fastest in
 * *best, or -1 when none ran. */
static bn_status fastest(const dense_gpu *g, const dense_plan *p, const bn_ctx *ctx, const void *A, const void *B,
                         float beta, size_t out_bytes, const cublasLtMatmulHeuristicResult_t *r, int count, int *best)
{
    *best = -1;
    void *scratch = NULL;
    BN_TRY(bn_device_alloc(&scratch, out_bytes));
    void *start = NULL, *stop = NULL;
    float ms[HEURISTIC_RESULTS];
    bn_status st = bn_device_zero(scratch, out_bytes);
    if (st == BN_OK) st = bn_event_create(&start);
    if (st == BN_OK) st = bn_event_create(&stop);
    if (st == BN_OK)
        st = time_candidates(g, p, ctx, A, B, beta, scratch, r, count, (cudaEvent_t)start, (cudaEvent_t)stop, ms);
    bn_event_destroy(start);
    bn_event_destroy(stop);
    bn_device_free(scratch); /* after the last timed launch: cudaFree waits for the device */
    BN_TRY(st);
    for (int i = 0; i < count; i++)
        if (ms[i] < INFINITY && (*best < 0 || ms[i] < ms[*best])) *best = i;
    return BN_OK;
}

/* Chooses the algorithm of a described plan: the first usable heuristic result, or the fastest
 * of the first TIMED_RESULTS when `measure`. Reserves the workspace it needs (at most `limit`,
 * which never exceeds what is there unless growing is allowed). */
static bn_status choose(const dense_gpu *g, dense_plan *p, bn_ctx *ctx, const void *A, const void *B, float beta,
                        size_t out_bytes, size_t limit, int measure)
{
    cublasLtMatmulHeuristicResult_t r[HEURISTIC_RESULTS];
    int got = 0;
    BN_TRY(heuristics(g, p, limit, r, &got));
    if (got == 0) {
        p->use_lt = 0;
        return BN_OK;
    }
    int pick = 0;
    if (measure && got > 1) {
        int count = got < TIMED_RESULTS ? got : TIMED_RESULTS;
        size_t need = 0;
        for (int i = 0; i < count; i++)
            if (r[i].workspaceSize > need) need = r[i].workspaceSize;
        BN_TRY(bn_ctx_reserve_workspace(ctx, need));
        BN_TRY(fastest(g, p, ctx, A, B, beta, out_bytes, r, count, &pick));
        if (pick < 0) pick = 0; /* none ran while timed: the call below reports why */
    }
    BN_TRY(bn_ctx_reserve_workspace(ctx, r[pick].workspaceSize));
    p->use_lt = 1;
    p->algo = r[pick].algo;
    p->workspace = r[pick].workspaceSize;
    return BN_OK;
}

/* The operands of one product: A, B, D (also C), the bias (forward only) and beta. */
typedef struct gemm_args {
    const float *a, *b;
    float *d;
    const float *bias;
    float beta;
} gemm_args;

static bool plan_fits(const dense_plan *p, int kind, int n, const bn_ctx *ctx, const unsigned *align)
{
    if (p->kind != kind || p->n != n || p->tf32 != (ctx->tf32 != 0) || p->deterministic != (ctx->deterministic != 0))
        return false;
    for (int i = 0; i < OPNDS; i++)
        if (align[i] < p->align[i]) return false;
    return true;
}

/* Makes a plan for the product: descriptors, then the algorithm. */
static bn_status make_plan(bn_layer *l, dense_gpu *g, bn_ctx *ctx, dense_plan *p, const gemm_args *ga)
{
    const dense_priv *dp = (const dense_priv *)l->priv;
    int k = dp->inputs, m = dp->outputs;
    BN_TRY(describe(p, k, m, ga->bias));
    cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
    BN_CUDA(cudaStreamIsCapturing((cudaStream_t)ctx->stream, &cap));
    int capturing = cap != cudaStreamCaptureStatusNone;
    /* Full batches may grow the shared workspace up to WORKSPACE_LIMIT (see the top of the
     * file). Other batch sizes may use what is there, except in a deterministic context: there
     * the choice must not depend on what other layers reserved before, so they take none. */
    size_t full = l->in->capacity / (size_t)k;
    size_t limit;
    if (!capturing && (size_t)p->n == full) limit = WORKSPACE_LIMIT;
    else if (ctx->deterministic) limit = 0;
    else limit = ctx->workspace_size < WORKSPACE_LIMIT ? ctx->workspace_size : WORKSPACE_LIMIT;
    gemm_shape s = shape_of(p->kind, p->n, k, m);
    size_t out_bytes = (size_t)s.rows[2] * s.cols[2] * sizeof(float);
    return choose(g, p, ctx, ga->a, ga->b, ga->beta, out_bytes, limit, !ctx->deterministic && !capturing);
}

/* The GPU state and the plan for this product at the current batch size and pointers, made on
 * first use. */
static bn_status prepare(bn_layer *l, bn_ctx *ctx, int kind, const gemm_args *ga, dense_gpu **gpu,
                         dense_plan **plan)
{
    dense_priv *dp = (dense_priv *)l->priv;
    if (!dp->gpu) {
        dp->gpu = (dense_gpu *)calloc(1, sizeof *dp->gpu);
        if (!dp->gpu) return bn_error(BN_ERR_NOMEM, "layer %s: out of host memory", l->name);
        cublasLtHandle_t h = NULL;
        cublasStatus_t s = cublasLtCreate(&h);
        if (s != CUBLAS_STATUS_SUCCESS) {
            bn_dense_gpu_release(dp);
            BN_CUBLAS(s);
        }
        dp->gpu->lt = h;
    }
    dense_gpu *g = dp->gpu;
    *gpu = g;
    int n = l->in->n;
    unsigned align[OPNDS] = {align_of(ga->a), align_of(ga->b), align_of(ga->d), align_of(ga->bias)};
    for (int i = 0; i < g->num_plans; i++)
        if (plan_fits(g->plans[i], kind, n, ctx, align)) {
            *plan = g->plans[i];
            return BN_OK;
        }
    dense_plan *p = (dense_plan *)calloc(1, sizeof *p);
    if (!p) return bn_error(BN_ERR_NOMEM, "layer %s: out of host memory", l->name);
    p->kind = kind;
    p->n = n;
    p->tf32 = ctx->tf32 != 0;
    p->deterministic = ctx->deterministic != 0;
    for (int i = 0; i < OPNDS; i++) p->align[i] = align[i];
    bn_status s = make_plan(l, g, ctx, p, ga);
    dense_plan **grown = s == BN_OK ? (dense_plan **)realloc(g->plans, (size_t)(g->num_plans + 1) * sizeof *grown)
                                    : NULL;
    if (s == BN_OK && !grown) s = bn_error(BN_ERR_NOMEM, "layer %s: out of host memory", l->name);
    if (s != BN_OK) {
        plan_free(p);
        return s;
    }
    g->plans = grown;
    g->plans[g->num_plans++] = p;
    *plan = p;
    return BN_OK;
}

/* ---- the cublasSgemm fallback ---- */

/* FP32 FMA unless the context allows TF32 tensor cores. The handle is shared, so the mode is
 * set before every use rather than once. */
static bn_status blas_for(const bn_ctx *ctx, cublasHandle_t *h)
{
    *h = (cublasHandle_t)ctx->cublas;
    BN_CUBLAS(cublasSetMathMode(*h, ctx->tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
    return BN_OK;
}

/* The product through cublasSgemm, with the operands as shape_of describes them. */
static bn_status run_sgemm(const bn_ctx *ctx, int kind, int n, int k, int m, const gemm_args *ga)
{
    cublasHandle_t h = NULL;
    BN_TRY(blas_for(ctx, &h));
    gemm_shape s = shape_of(kind, n, k, m);
    /* op(A) is (rows of D) x inner, op(B) inner x (cols of D) */
    int rows = (int)s.rows[2], cols = (int)s.cols[2];
    int inner = kind == GEMM_FWD ? k : kind == GEMM_DW ? n : m;
    const float one = 1.0f;
    BN_CUBLAS(cublasSgemm(h, s.ta, s.tb, rows, cols, inner, &one, ga->a, (int)s.rows[0], ga->b, (int)s.rows[1],
                          &ga->beta, ga->d, (int)s.rows[2]));
    return BN_OK;
}

/* Runs one product through its plan (or the fallback). */
static bn_status gemm(bn_layer *l, bn_ctx *ctx, int kind, const gemm_args *ga)
{
    const dense_priv *dp = (const dense_priv *)l->priv;
    dense_gpu *g = NULL;
    dense_plan *p = NULL;
    BN_TRY(prepare(l, ctx, kind, ga, &g, &p));
    int n = l->in->n, k = dp->inputs, m = dp->outputs;
    if (!p->use_lt) {
        if (kind == GEMM_FWD) { /* seed the bias, then accumulate onto it */
            size_t total = (size_t)n * m;
            seed_bias<<<grid_for(total), 256, 0, (cudaStream_t)ctx->stream>>>(ga->d, ga->bias, total, m);
            BN_CUDA_LAUNCH();
            gemm_args acc = *ga;
            acc.beta = 1.0f;
            return run_sgemm(ctx, kind, n, k, m, &acc);
        }
        return run_sgemm(ctx, kind, n, k, m, ga);
    }
    if (kind == GEMM_FWD)
        BN_CUBLAS(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &ga->bias,
                                                 sizeof ga->bias));
    BN_CUBLAS(run_lt(g, p, ctx, ga->a, ga->b, ga->beta, ga->d, &p->algo));
    return BN_OK;
}

extern "C" bn_status bn_dense_forward_gpu(bn_layer *l, const bn_pass *p)
{
    BN_DEV_RD(x, l->in);
    BN_DEV_RD(w, l->params[WEIGHT].value);
    BN_DEV_RD(b, l->params[BIAS].value);
    BN_DEV_WR(y, l->out);
    /* Y^T = op_T(W) X^T + b, beta = 0: Y's old contents are not read. */
    gemm_args ga = {w, x, y, b, 0.0f};
    return gemm(l, p->ctx, GEMM_FWD, &ga);
}

extern "C" bn_status bn_dense_backward_gpu(bn_layer *l, const bn_pass *p)
{
    const dense_priv *d = (const dense_priv *)l->priv;
    int n = l->in->n, m = d->outputs;
    BN_DEV_RD(x, l->in);
    BN_DEV_RD(w, l->params[WEIGHT].value);
    BN_DEV_RD(dy, l->out_grad);
    BN_DEV_WR(dw, l->params[WEIGHT].grad);
    BN_DEV_WR(db, l->params[BIAS].grad);
    /* dW^T += X^T op_T(dY^T): beta = 1, the gradient accumulates. */
    gemm_args gw = {x, dy, dw, NULL, 1.0f};
    BN_TRY(gemm(l, p->ctx, GEMM_DW, &gw));
    dim3 threads(BIAS_COLS, BIAS_ROWS);
    bias_grad<<<(m + BIAS_COLS - 1) / BIAS_COLS, threads, 0, (cudaStream_t)p->ctx->stream>>>(dy, n, m, db);
    BN_CUDA_LAUNCH();
    if (l->in_grad) {
        BN_DEV_WR(dx, l->in_grad);
        /* dX^T = W^T dY^T: beta = 0, dX is overwritten. */
        gemm_args gx = {w, dy, dx, NULL, 0.0f};
        BN_TRY(gemm(l, p->ctx, GEMM_DX, &gx));
    }
    return BN_OK;
}
