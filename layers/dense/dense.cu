/* dense.cu - the dense layer on the GPU: its passes and its fusions with the layers around it.
 * The products are read as cuBLASLt reads them, column-major: a row-major (r x c) matrix is, read
 * column-major, its (c x r) transpose, so Y = X W^T is computed as Y^T = W X^T, and so on:
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
 * Who runs each product (cuBLASLt's algorithms, cublasSgemm, blobnet's own kernels) and how that
 * is chosen is dense_plan.cu's; this file holds the passes, the two gradients' overlap on the side
 * stream and the fusions with the layers around the dense layer. */
#include <stdlib.h>

#include "dense.h"
#include "dense_bias.cuh"
#include "dense_plan.h"
#include "dense_skinny.h"
#include "gpu/code_anchor.cuh"
#include "gpu/cuda_check.h"
#include "gpu/overlap.h"
#include "softmax_ce.h"

enum { WEIGHT, BIAS };

extern "C" bn_status bn_dense_forward_gpu(bn_layer *l, const bn_pass *p)
{
    if (bn_blob_is_bf16(l->out)) return bn_dense_forward_bf16(l, p);
    BN_DEV_RD(x, l->in);
    BN_DEV_RD(w, l->params[WEIGHT].value);
    BN_DEV_RD(b, l->params[BIAS].value);
    BN_DEV_WR(y, l->out);
    dense_priv *dp = (dense_priv *)l->priv;
    if (dp->loss_after) { /* the loss layer's kernel computes Y (bn_dense_fuse_next) */
        bn_softmax_head h = {x, w, b, dp->inputs, y, NULL, NULL};
        const int grad = l->in_grad && bn_softmax_ce_grad_in_forward(dp->loss_after, p);
        if (grad && !(h.dx = bn_blob_dev_wr(l->in_grad))) return bn_last_status();
        if (grad && dp->relu_before && !(h.relu_dx = bn_blob_dev_wr(dp->relu_before->in_grad)))
            return bn_last_status();
        BN_TRY(bn_softmax_ce_head_gpu(dp->loss_after, p, &h));
        dp->dx_written = grad;
        return BN_OK;
    }
    /* Y^T = op_T(W) X^T + b, beta = 0: Y's old contents are not read. */
    gemm_args ga = {w, x, y, b, 0.0f, NULL, NO_RELU};
    const dense_priv *d = (const dense_priv *)l->priv;
    if (d->relu_after) {
        BN_DEV_WR(relu_y, d->relu_after->out);
        ga.relu.relu_y = relu_y;
    }
    int relu_done = 0;
    BN_TRY(bn_dense_gemm(l, p->ctx, GEMM_FWD, &ga, NULL, &relu_done));
    /* After a cuBLAS product the ReLU layer runs its own pass on what it wrote. */
    if (d->relu_after && !relu_done) return d->relu_after->ops->forward_gpu(d->relu_after, p);
    return BN_OK;
}

/* The input gradient by an own plan (own_gemm or the few-outputs kernels). */
static bn_status run_dx(const dense_plan *px, const bn_ctx *ctx, const gemm_args *gx, int n, int k, int m)
{
    if (px->skinny)
        return bn_dense_run_skinny(GEMM_DX, (cudaStream_t)ctx->stream, gx->a, gx->b, gx->d, NULL, n, k, m, gx->relu);
    return bn_dense_run_own(&px->ow, GEMM_DX, ctx, gx->b, gx->a, gx->d, gx->bias, NULL, gx->relu);
}

/* The two gradients for bn_overlap_run: dW and db by own_gemm on the side stream, dX by an own
 * plan on the stream. */
typedef struct gradients {
    const dense_plan *pw, *px;
    const bn_ctx *ctx;
    const gemm_args *gw, *gx;
    float *db;
    int n, k, m;
} gradients;

static bn_status dw_beside(void *env, void *side)
{
    const gradients *t = (const gradients *)env;
    return bn_dense_run_own_on(&t->pw->ow, GEMM_DW, (cudaStream_t)side, t->gw->b, t->gw->a, t->gw->d, t->gw->bias,
                               t->db, NO_RELU);
}

static bn_status dx_here(void *env)
{
    const gradients *t = (const gradients *)env;
    return run_dx(t->px, t->ctx, t->gx, t->n, t->k, t->m);
}

extern "C" bn_status bn_dense_backward_gpu(bn_layer *l, const bn_pass *p)
{
    if (bn_blob_is_bf16(l->out)) return bn_dense_backward_bf16(l, p);
    dense_priv *d = (dense_priv *)l->priv;
    int n = l->in->n, m = d->outputs;
    /* The dense head wrote dX (and the fused ReLU's gradient) in this step's forward. */
    const int dx_done = d->dx_written;
    d->dx_written = 0;
    BN_DEV_RD(x, l->in);
    BN_DEV_RD(w, l->params[WEIGHT].value);
    BN_DEV_RD(dy, l->out_grad);
    BN_DEV_WR(dw, l->params[WEIGHT].grad);
    BN_DEV_WR(db, l->params[BIAS].grad);
    /* dW^T += X^T op_T(dY^T): beta = 1, the gradient accumulates. */
    gemm_args gw = {x, dy, dw, NULL, 1.0f, db, NO_RELU};
    /* dX^T = W^T dY^T: beta = 0, dX is overwritten; with a fused ReLU before this layer, the
     * ReLU's input gradient too (dX masked where the ReLU's output, this layer's input, is 0). */
    relu_epi rx = NO_RELU;
    if (d->relu_before && l->in_grad && !dx_done) {
        BN_DEV_WR(relu_dx, d->relu_before->in_grad);
        rx.mask = x;
        rx.relu_dx = relu_dx;
    }
    if (l->in_grad && p->ctx->side_stream) {
        /* When blobnet's kernels run both products (no shared workspace, their own partial
         * sums), dW and db go to the side stream beside dX and are joined back here, or by the
         * net at the end of its backward pass (bn_pass.defer_joins), so that they also run
         * beside the layers below. */
        BN_DEV_WR(dx, l->in_grad);
        gemm_args gx = {w, dy, dx, NULL, 0.0f, NULL, rx};
        dense_gpu *g = NULL;
        dense_plan *pw = NULL, *px = NULL;
        BN_TRY(bn_dense_prepare(l, p->ctx, GEMM_DW, &gw, &g, &pw));
        if (!dx_done) BN_TRY(bn_dense_prepare(l, p->ctx, GEMM_DX, &gx, &g, &px));
        if (pw->own && (dx_done || px->own || px->skinny)) {
            const gradients both = {pw, px, p->ctx, &gw, &gx, db, n, d->inputs, m};
            return bn_overlap_run(p->ctx, &g->side, p->defer_joins, dw_beside, dx_done ? NULL : dx_here,
                                  (void *)&both);
        }
    }
    int fused = 0;
    BN_TRY(bn_dense_gemm(l, p->ctx, GEMM_DW, &gw, &fused, NULL));
    if (!fused) { /* db += column sums of dY, unless own_gemm added them with dW */
        dim3 threads(BIAS_COLS, BIAS_ROWS);
        bn_launch_early(bias_grad<float>, (m + BIAS_COLS - 1) / BIAS_COLS, threads, 0, (cudaStream_t)p->ctx->stream, dy,
                        n, m, db);
        BN_CUDA_LAUNCH();
    }
    if (l->in_grad && !dx_done) {
        BN_DEV_WR(dx, l->in_grad);
        gemm_args gx = {w, dy, dx, NULL, 0.0f, NULL, rx};
        int relu_done = 0;
        BN_TRY(bn_dense_gemm(l, p->ctx, GEMM_DX, &gx, NULL, &relu_done));
        /* After a cuBLAS product the ReLU layer runs its own pass on the gradient written. */
        if (d->relu_before && !relu_done) return d->relu_before->ops->backward_gpu(d->relu_before, p);
    }
    return BN_OK;
}

extern "C" int bn_dense_fuse_relu(bn_layer *l, bn_layer *relu, int after)
{
    dense_priv *d = (dense_priv *)l->priv;
    if (bn_blob_is_bf16(l->out)) return 0; /* dense_bf16.cu's products take no ReLU */
    if (after) d->relu_after = relu;
    else d->relu_before = relu;
    return 1;
}

extern "C" int bn_dense_fuse_next(bn_layer *l, bn_layer *next)
{
    dense_priv *d = (dense_priv *)l->priv;
    if (bn_blob_is_bf16(l->out) || d->relu_after || !bn_softmax_ce_head_fits(next, d->outputs)) return 0;
    d->loss_after = next;
    d->dx_written = 0;
    return BN_FUSED_FORWARD;
}

BN_CODE_ANCHOR(dense, bias_grad<float>) /* code_load.cu */
