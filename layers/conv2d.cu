/* conv2d.cu - the conv2d layer on the GPU through cuDNN: forward, backward-data and
 * backward-filter convolutions (cross-correlation, FP32 compute), the bias added with
 * cudnnAddTensor and its gradient with cudnnConvolutionBackwardBias.
 *
 * The descriptors are made on the first GPU pass. The algorithms are chosen once per batch
 * size (the last batch of an epoch is smaller) and cached: measured with cudnnFind*, or, in a
 * deterministic context, taken from cudnnGet*_v7's heuristics restricted to deterministic
 * algorithms, so that every run picks the same ones (measured timings vary between runs).
 * Without ctx->tf32 the results must match the CPU's FP32 sums: the math type is
 * CUDNN_FMA_MATH (CUDNN_DEFAULT_MATH would allow TF32 tensor cores on Ampere and Hopper), and
 * only algorithms that sum products directly are taken. The FFT and Winograd ones trade
 * precision for speed (an FFT backward-filter on LeNet's conv1 measured 1.4e-3 relative error
 * on an H200), so they are allowed with tf32 only. All layers share the context's one workspace. */
#include <stdio.h>
#include <stdlib.h>

#include "conv2d.h"
#include "cuda_check.h"

enum { WEIGHT, BIAS };

/* The most workspace one algorithm may ask for; faster ones that want more are skipped. */
#define WORKSPACE_LIMIT ((size_t)256 << 20)

/* A blob's cuDNN tensor descriptor for its current shape, or return the recorded error. */
typedef struct conv_plan {
    int n;                                     /* batch size the algorithms were chosen for */
    cudnnConvolutionFwdAlgo_t fwd;
    cudnnConvolutionBwdFilterAlgo_t bwd_filter;
    int with_data;                             /* the layer has an input gradient: */
    cudnnConvolutionBwdDataAlgo_t bwd_data;    /* then this is chosen too */
} conv_plan;

struct conv_gpu {
    cudnnFilterDescriptor_t w_desc;
    cudnnConvolutionDescriptor_t conv_desc;
    cudnnTensorDescriptor_t bias_desc;         /* (1, filters, 1, 1) */
    conv_plan *plans;
    int num_plans;
};

extern "C" void bn_conv2d_gpu_release(conv_priv *c)
{
    conv_gpu *g = c->gpu;
    if (!g) return;
    if (g->w_desc) cudnnDestroyFilterDescriptor(g->w_desc);
    if (g->conv_desc) cudnnDestroyConvolutionDescriptor(g->conv_desc);
    if (g->bias_desc) cudnnDestroyTensorDescriptor(g->bias_desc);
    free(g->plans);
    free(g);
    c->gpu = NULL;
}

static bn_status describe_layer(const conv_priv *c, const bn_ctx *ctx, conv_gpu *g)
{
    BN_CUDNN(cudnnCreateFilterDescriptor(&g->w_desc));
    BN_CUDNN(cudnnSetFilter4dDescriptor(g->w_desc, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, c->filters, c->g.c, c->size,
                                        c->size));
    BN_CUDNN(cudnnCreateConvolutionDescriptor(&g->conv_desc));
    BN_CUDNN(cudnnSetConvolution2dDescriptor(g->conv_desc, c->pad, c->pad, c->stride, c->stride, 1, 1,
                                             CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    BN_CUDNN(cudnnSetConvolutionMathType(g->conv_desc, ctx->tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH));
    BN_CUDNN(cudnnCreateTensorDescriptor(&g->bias_desc));
    BN_CUDNN(cudnnSetTensor4dDescriptor(g->bias_desc, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, c->filters, 1, 1));
    return BN_OK;
}

/* Whether an algorithm sums products directly (no FFT or Winograd transform). */
static bool sums_products(cudnnConvolutionFwdAlgo_t a)
{
    return a == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM || a == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM ||
           a == CUDNN_CONVOLUTION_FWD_ALGO_GEMM || a == CUDNN_CONVOLUTION_FWD_ALGO_DIRECT;
}

static bool sums_products(cudnnConvolutionBwdDataAlgo_t a)
{
    return a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_0 || a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_1;
}

static bool sums_products(cudnnConvolutionBwdFilterAlgo_t a)
{
    return a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0 || a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1 ||
           a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3;
}

/* The first usable result (cuDNN lists the fastest first): it ran, fits the workspace limit,
 * is deterministic when the context asks for that, and, unless the context allows TF32, uses
 * neither tensor-core math nor a transform. -1 when none qualifies. */
template <typename Perf>
static int pick(const Perf *r, int count, const bn_ctx *ctx)
{
    for (int i = 0; i < count; i++) {
        if (r[i].status != CUDNN_STATUS_SUCCESS || r[i].memory > WORKSPACE_LIMIT) continue;
        if (ctx->deterministic && r[i].determinism != CUDNN_DETERMINISTIC) continue;
        if (!ctx->tf32 && (r[i].mathType == CUDNN_TENSOR_OP_MATH ||
                           r[i].mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION || !sums_products(r[i].algo)))
            continue;
        return i;
    }
    return -1;
}

static bn_status none_usable(const bn_layer *l, const char *pass)
{
    return bn_error(BN_ERR_DEVICE, "layer %s: cuDNN offers no usable %s algorithm for this shape", l->name, pass);
}

static bn_status choose_fwd(const bn_layer *l, const bn_ctx *ctx, const conv_gpu *g, cudnnTensorDescriptor_t x,
                            cudnnTensorDescriptor_t y, conv_plan *plan, size_t *need)
{
    cudnnHandle_t h = (cudnnHandle_t)ctx->cudnn;
    cudnnConvolutionFwdAlgoPerf_t r[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    int got = 0;
    if (ctx->deterministic)
        BN_CUDNN(cudnnGetConvolutionForwardAlgorithm_v7(h, x, g->w_desc, g->conv_desc, y,
                                                        CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &got, r));
    else
        BN_CUDNN(cudnnFindConvolutionForwardAlgorithm(h, x, g->w_desc, g->conv_desc, y,
                                                      CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &got, r));
    int i = pick(r, got, ctx);
    if (i < 0) return none_usable(l, "forward");
    plan->fwd = r[i].algo;
    if (r[i].memory > *need) *need = r[i].memory;
    return BN_OK;
}

static bn_status choose_bwd_data(const bn_layer *l, const bn_ctx *ctx, const conv_gpu *g, cudnnTensorDescriptor_t dx,
                                 cudnnTensorDescriptor_t dy, conv_plan *plan, size_t *need)
{
    cudnnHandle_t h = (cudnnHandle_t)ctx->cudnn;
    cudnnConvolutionBwdDataAlgoPerf_t r[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    int got = 0;
    if (ctx->deterministic)
        BN_CUDNN(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, g->w_desc, dy, g->conv_desc, dx,
                                                             CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &got, r));
    else
        BN_CUDNN(cudnnFindConvolutionBackwardDataAlgorithm(h, g->w_desc, dy, g->conv_desc, dx,
                                                           CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &got, r));
    int i = pick(r, got, ctx);
    if (i < 0) return none_usable(l, "backward-data");
    plan->bwd_data = r[i].algo;
    if (r[i].memory > *need) *need = r[i].memory;
    return BN_OK;
}

static bn_status choose_bwd_filter(const bn_layer *l, const bn_ctx *ctx, const conv_gpu *g,
                                   cudnnTensorDescriptor_t x, cudnnTensorDescriptor_t dy, conv_plan *plan,
                                   size_t *need)
{
    cudnnHandle_t h = (cudnnHandle_t)ctx->cudnn;
    cudnnConvolutionBwdFilterAlgoPerf_t r[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
    int got = 0;
    if (ctx->deterministic)
        BN_CUDNN(cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, x, dy, g->conv_desc, g->w_desc,
                                                               CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &got, r));
    else
        BN_CUDNN(cudnnFindConvolutionBackwardFilterAlgorithm(h, x, dy, g->conv_desc, g->w_desc,
                                                             CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &got, r));
    int i = pick(r, got, ctx);
    if (i < 0) return none_usable(l, "backward-filter");
    plan->bwd_filter = r[i].algo;
    if (r[i].memory > *need) *need = r[i].memory;
    return BN_OK;
}

/* Chooses the three algorithms for the current batch size and grows the shared workspace to
 * what they need. Runs once per batch size: cudnnFind* synchronises and allocates. */
static bn_status make_plan(bn_layer *l, conv_priv *c, bn_ctx *ctx, conv_plan *plan)
{
    conv_gpu *g = c->gpu;
    BN_TENSOR_DESC(x, l->in);
    BN_TENSOR_DESC(y, l->out);
    int n, k, oh, ow;
    BN_CUDNN(cudnnGetConvolution2dForwardOutputDim(g->conv_desc, x, g->w_desc, &n, &k, &oh, &ow));
    if (n != l->in->n || k != c->filters || oh != c->g.oh || ow != c->g.ow)
        return bn_error(BN_ERR_INTERNAL, "layer %s: cuDNN computes a %dx%dx%dx%d output where blobnet has %dx%dx%dx%d",
                        l->name, n, k, oh, ow, l->in->n, c->filters, c->g.oh, c->g.ow);
    plan->n = n;
    size_t need = 0;
    BN_TRY(choose_fwd(l, ctx, g, x, y, plan, &need));
    BN_TRY(choose_bwd_filter(l, ctx, g, x, y, plan, &need));
    plan->with_data = l->in_grad != NULL;
    if (plan->with_data) BN_TRY(choose_bwd_data(l, ctx, g, x, y, plan, &need));
    return bn_ctx_reserve_workspace(ctx, need);
}

/* The GPU state and the plan for the current batch size, made on first use. */
static bn_status prepare(bn_layer *l, bn_ctx *ctx, const conv_gpu **gpu, const conv_plan **plan)
{
    conv_priv *c = (conv_priv *)l->priv;
    if (!c->gpu) {
        c->gpu = (conv_gpu *)calloc(1, sizeof *c->gpu);
        if (!c->gpu) return bn_error(BN_ERR_NOMEM, "layer %s: out of host memory", l->name);
        bn_status s = describe_layer(c, ctx, c->gpu);
        if (s != BN_OK) {
            bn_conv2d_gpu_release(c);
            return s;
        }
    }
    conv_gpu *g = c->gpu;
    *gpu = g;
    for (int i = 0; i < g->num_plans; i++)
        if (g->plans[i].n == l->in->n) {
            *plan = &g->plans[i];
            return BN_OK;
        }
    conv_plan made = {0, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1, 0,
                      CUDNN_CONVOLUTION_BWD_DATA_ALGO_1};
    BN_TRY(make_plan(l, c, ctx, &made));
    conv_plan *grown = (conv_plan *)realloc(g->plans, (size_t)(g->num_plans + 1) * sizeof *grown);
    if (!grown) return bn_error(BN_ERR_NOMEM, "layer %s: out of host memory", l->name);
    g->plans = grown;
    g->plans[g->num_plans] = made;
    *plan = &g->plans[g->num_plans++];
    return BN_OK;
}

extern "C" bn_status bn_conv2d_forward_gpu(bn_layer *l, const bn_pass *p)
{
    bn_ctx *ctx = p->ctx;
    const conv_gpu *g = NULL;
    const conv_plan *plan = NULL;
    BN_TRY(prepare(l, ctx, &g, &plan));
    BN_TENSOR_DESC(xd, l->in);
    BN_TENSOR_DESC(yd, l->out);
    BN_DEV_RD(x, l->in);
    BN_DEV_RD(w, l->params[WEIGHT].value);
    BN_DEV_RD(b, l->params[BIAS].value);
    BN_DEV_WR(y, l->out);
    cudnnHandle_t h = (cudnnHandle_t)ctx->cudnn;
    const float one = 1.0f, zero = 0.0f;
    BN_CUDNN(cudnnConvolutionForward(h, &one, xd, x, g->w_desc, w, g->conv_desc, plan->fwd, ctx->workspace,
                                     ctx->workspace_size, &zero, yd, y));
    BN_CUDNN(cudnnAddTensor(h, &one, g->bias_desc, b, &one, yd, y));
    return BN_OK;
}

extern "C" bn_status bn_conv2d_backward_gpu(bn_layer *l, const bn_pass *p)
{
    bn_ctx *ctx = p->ctx;
    const conv_gpu *g = NULL;
    const conv_plan *plan = NULL;
    BN_TRY(prepare(l, ctx, &g, &plan));
    BN_TENSOR_DESC(xd, l->in);
    BN_TENSOR_DESC(dyd, l->out_grad);
    BN_DEV_RD(x, l->in);
    BN_DEV_RD(w, l->params[WEIGHT].value);
    BN_DEV_RD(dy, l->out_grad);
    BN_DEV_WR(dw, l->params[WEIGHT].grad);
    BN_DEV_WR(db, l->params[BIAS].grad);
    cudnnHandle_t h = (cudnnHandle_t)ctx->cudnn;
    const float one = 1.0f, zero = 0.0f;
    /* beta = 1: both parameter gradients accumulate, as the layer contract asks. */
    BN_CUDNN(cudnnConvolutionBackwardBias(h, &one, dyd, dy, &one, g->bias_desc, db));
    BN_CUDNN(cudnnConvolutionBackwardFilter(h, &one, xd, x, dyd, dy, g->conv_desc, plan->bwd_filter, ctx->workspace,
                                            ctx->workspace_size, &one, g->w_desc, dw));
    if (l->in_grad) {
        BN_TENSOR_DESC(dxd, l->in_grad);
        BN_DEV_WR(dx, l->in_grad);
        BN_CUDNN(cudnnConvolutionBackwardData(h, &one, g->w_desc, w, dyd, dy, g->conv_desc, plan->bwd_data,
                                              ctx->workspace, ctx->workspace_size, &zero, dxd, dx));
    }
    return BN_OK;
}

static const char *const fwd_names[] = {"implicit_gemm", "implicit_precomp_gemm", "gemm", "direct",
                                        "fft", "fft_tiling", "winograd", "winograd_nonfused"};
static const char *const bwd_data_names[] = {"algo_0", "algo_1", "fft", "fft_tiling", "winograd",
                                             "winograd_nonfused"};
static const char *const bwd_filter_names[] = {"algo_0", "algo_1", "fft", "algo_3", "winograd",
                                               "winograd_nonfused", "fft_tiling"};

static const char *name_of(const char *const *names, int count, int algo)
{
    return algo >= 0 && algo < count ? names[algo] : "?";
}

extern "C" void bn_conv2d_gpu_describe(const conv_priv *c, char *buf, size_t cap)
{
    size_t len = 0;
    if (cap) buf[0] = '\0';
    int plans = c->gpu ? c->gpu->num_plans : 0;
    for (int i = 0; i < plans && len < cap; i++) {
        const conv_plan *pl = &c->gpu->plans[i];
        int w = snprintf(buf + len, cap - len, "%sn=%d: fwd %s, bwd_data %s, bwd_filter %s", i ? "; " : "", pl->n,
                         name_of(fwd_names, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, pl->fwd),
                         pl->with_data ? name_of(bwd_data_names, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, pl->bwd_data)
                                       : "-",
                         name_of(bwd_filter_names, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, pl->bwd_filter));
        if (w < 0) break;
        len += (size_t)w;
    }
}
