/* conv2d.cu - the conv2d layer on the GPU: forward, backward-data and backward-filter
 * convolutions (cross-correlation, FP32 results), each run either by one of blobnet's four
 * families of own kernels (conv_direct.cu, conv_igemm.cu, conv_rows.cu, conv_tensor.cu: bias and
 * its gradient fused; the tensor-core one keeps FP32 accuracy with split TF32 products; and for
 * the filter pass through a max pooling, conv_argmax.cu) or by cuDNN (the bias and its gradient
 * then by conv_bias.h's kernels). The layer's engine key says
 * which runners may run a pass; among them a plan for each batch size chooses (choice_mode):
 *
 * - by the fixed rule, blobnet's kernels wherever they apply in a fixed order of preference
 *   (cuDNN where none does), in a deterministic context and for the shapes the rule was
 *   measured on (rule_measured: LeNet's), so that those pick the same kernels every run and
 *   time nothing at start-up;
 * - with --autotune, whichever runner was fastest when timed;
 * - by default elsewhere, the timed choice taken from the kernel cache (gpu/kernel_cache.h),
 *   keyed by the device, the libraries and the layer's shape; a shape the cache lacks is timed
 *   as --autotune times it, once, and its choice is kept there for every later layer and run.
 *
 * cuDNN's algorithms are measured with cudnnFind*, or, in a deterministic context, taken from
 * cudnnGet*_v7's heuristics restricted to deterministic algorithms, so that every run picks the
 * same ones (measured timings vary between runs). Without ctx->tf32 the results must match the
 * CPU's FP32 sums: the math type is CUDNN_FMA_MATH (CUDNN_DEFAULT_MATH would allow TF32 tensor
 * cores on Ampere and Hopper), and only algorithms that sum products directly are taken. The FFT
 * and Winograd ones trade precision for speed (an FFT backward-filter on LeNet's conv1 measured
 * 1.4e-3 relative error on an H200), so they are allowed with tf32 only; with tf32 the
 * tensor-core family takes one TF32 product per multiply (bn_tensor_plan_make). With tf32 a pass
 * cuDNN runs may also take an engine of cuDNN's graph API (conv_graph.h: every engine with its
 * tile and split choices, TF32 tensor cores included) where one was timed faster than the legacy
 * algorithm; without tf32 the legacy algorithms alone (one graph engine without any note of
 * reduced precision gave a filter gradient 0.7% of its scale off in FP32). All layers share the
 * context's one workspace. Under --precision bf16 (BF16 blobs) every pass goes to conv_bf16.cu
 * instead, which may run blobnet's FP32 families on FP32 copies through bn_conv2d_own_*
 * (own-only plans: blobnet's kernels alone, chosen as above). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conv2d.h"
#include "conv_argmax.h"
#include "conv_bias.h"
#include "conv_cudnn.cuh"
#include "conv_direct.h"
#include "conv_graph.h"
#include "conv_igemm.h"
#include "conv_rows.h"
#include "conv_tensor.h"
#include "core/device.h"
#include "gpu/cuda_check.h"
#include "gpu/kernel_cache.h"
#include "layers.h"
#include "pool.h"

enum { WEIGHT, BIAS };

/* Who runs a pass: cuDNN, or one of blobnet's kernel families (conv_direct.h, conv_igemm.h,
 * conv_rows.h, conv_tensor.h, and conv_argmax.h for the filter pass through a max pooling).
 * The values match BN_CONV_FAMILY_*. */
enum { BY_CUDNN, BY_DIRECT, BY_IGEMM, BY_ROWS, BY_TENSOR, BY_ARGMAX, BY_COUNT };

/* Forced by bn_conv2d_gpu_force_own: 0, or the family (BY_DIRECT ... BY_ARGMAX) that every new
 * plan takes for the passes blobnet runs and the family can run. */
static int force_family = 0;

extern "C" void bn_conv2d_gpu_force_own(int family)
{
    force_family = family > BY_CUDNN && family < BY_COUNT ? family : 0;
}


/* A blob's cuDNN tensor descriptor for its current shape, or return the recorded error. */
typedef struct conv_plan {
    int n;                                     /* batch size the algorithms were chosen for */
    cudnnConvolutionFwdAlgo_t fwd;
    cudnnConvolutionBwdFilterAlgo_t bwd_filter;
    int with_data;                             /* the layer has an input gradient: */
    cudnnConvolutionBwdDataAlgo_t bwd_data;    /* then this is chosen too, */
    size_t bwd_data_workspace;                 /* needing this much workspace */
    int by[3];                                 /* who runs forward, data, filter: BY_* */
    bn_direct_plan direct;                     /* launch shapes of blobnet's direct kernels */
    bn_igemm_plan ig;                          /* of its implicit-GEMM kernels */
    bn_rows_plan rows;                         /* of its row-tiled kernels */
    bn_tensor_plan tc;                         /* of its tensor-core kernels */
    bn_argmax_plan am;                         /* and of its filter pass through a max pooling */
    bn_cg_plan *cg[3];                         /* where cuDNN runs a pass through its graph API
                                                  (conv_graph.h) instead of the legacy algorithm */
    int own_only;                              /* made for FP32 copies under bf16 (bn_conv2d_own_*):
                                                  blobnet's kernels alone, */
    int own_ok;                                /* and they serve every pass the layer needs */
} conv_plan;

struct conv_gpu {
    cudnnFilterDescriptor_t w_desc;
    cudnnConvolutionDescriptor_t conv_desc;
    cudaEvent_t fork, join;                    /* the filter pass on the side stream */
    float *bias_parts;                         /* the bias gradient's partial sums after cuDNN's filter pass */
    float *parts;                              /* partial sums of blobnet's filter passes: the */
    size_t parts_bytes;                        /* layer's own, as the pass may outlive the layer's
                                                  backward on the side stream (bn_pass.defer_joins) */
    conv_plan *plans;
    int num_plans;
};

extern "C" void bn_conv2d_gpu_release(conv_priv *c)
{
    bn_conv_bf16_release(&c->bf16);
    conv_gpu *g = c->gpu;
    if (!g) return;
    if (g->w_desc) cudnnDestroyFilterDescriptor(g->w_desc);
    if (g->conv_desc) cudnnDestroyConvolutionDescriptor(g->conv_desc);
    bn_device_free(g->bias_parts);
    if (g->fork) cudaEventDestroy(g->fork);
    if (g->join) cudaEventDestroy(g->join);
    bn_device_free(g->parts);
    for (int i = 0; i < g->num_plans; i++)
        for (int k = 0; k < 3; k++) bn_cg_free(&g->plans[i].cg[k]);
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
    BN_CUDA(cudaEventCreateWithFlags(&g->fork, cudaEventDisableTiming));
    BN_CUDA(cudaEventCreateWithFlags(&g->join, cudaEventDisableTiming));
    return bn_device_alloc((void **)&g->bias_parts, (size_t)c->filters * BN_CONV_BIAS_PARTS * sizeof(float));
}

/* The first usable result (cuDNN lists the fastest first): it ran, fits the workspace limit,
 * is deterministic when the context asks for that, and, unless the context allows TF32, uses
 * neither tensor-core math nor a transform. -1 when none qualifies. */
template <typename Perf>
static int pick(const Perf *r, int count, const bn_ctx *ctx)
{
    for (int i = 0; i < count; i++) {
        if (r[i].status != CUDNN_STATUS_SUCCESS || r[i].memory > BN_CONV_WORKSPACE_LIMIT) continue;
        if (ctx->deterministic && r[i].determinism != CUDNN_DETERMINISTIC) continue;
        if (!ctx->tf32 && (r[i].mathType == CUDNN_TENSOR_OP_MATH ||
                           r[i].mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION ||
                           !bn_sums_directly(r[i].algo)))
            continue;
        return i;
    }
    return -1;
}

static bn_status none_usable(const bn_layer *l, const char *pass)
{
    return bn_error(BN_ERR_DEVICE, "layer %s: cuDNN offers no usable %s algorithm for this shape", l->name, pass);
}

/* cuDNN's graph-API plan for pass `pass` (BN_CG_*) on the layer's FP32 NCHW tensors at its
 * current batch (conv_graph.h): TF32 products allowed with ctx->tf32 only; the filter pass adds
 * into the gradient as the legacy one does. Timed on scratch buffers of the layer's sizes, or
 * taken from the kernel cache (cached). *out is NULL where cuDNN offers no allowed engine. */
static bn_status graph_plan(const bn_layer *l, bn_ctx *ctx, int pass, int cached, bn_cg_plan **out)
{
    *out = NULL;
    const conv_priv *c = (const conv_priv *)l->priv;
    const bn_conv_geom *g = &c->g;
    const int n = l->in->n;
    bn_cg_spec spec;
    memset(&spec, 0, sizeof spec);
    spec.pass = pass;
    spec.pad = c->pad;
    spec.stride = c->stride;
    spec.allow_down_convert = ctx->tf32;
    spec.beta = pass == BN_CG_FILTER ? 1.0f : 0.0f;
    spec.x = bn_cg_nchw(n, g->c, g->h, g->w, CUDNN_DATA_FLOAT);
    spec.w = bn_cg_nchw(c->filters, g->c, c->size, c->size, CUDNN_DATA_FLOAT);
    spec.y = bn_cg_nchw(n, c->filters, g->oh, g->ow, CUDNN_DATA_FLOAT);
    const bn_blob *xb = pass == BN_CG_DATA ? l->in_grad : l->in, *yb = pass == BN_CG_FORWARD ? l->out : l->out_grad;
    const bn_blob *wb = pass == BN_CG_FILTER ? l->params[WEIGHT].grad : l->params[WEIGHT].value;
    bn_cg_align(&spec.x, xb->offset * sizeof(float));
    bn_cg_align(&spec.y, yb->offset * sizeof(float));
    bn_cg_align(&spec.w, wb->offset * sizeof(float));
    const size_t in = (size_t)n * g->c * g->h * g->w, outs = (size_t)n * c->filters * g->oh * g->ow;
    const size_t weights = (size_t)c->filters * g->c * c->size * c->size;
    float *x = NULL, *w = NULL, *y = NULL;
    bn_status st = bn_device_alloc((void **)&x, in * sizeof(float));
    if (st == BN_OK) st = bn_device_alloc((void **)&w, weights * sizeof(float));
    if (st == BN_OK) st = bn_device_alloc((void **)&y, outs * sizeof(float));
    if (st == BN_OK) st = bn_device_zero(x, in * sizeof(float));
    if (st == BN_OK) st = bn_device_zero(w, weights * sizeof(float));
    if (st == BN_OK) st = bn_device_zero(y, outs * sizeof(float));
    if (st == BN_OK) st = bn_cg_choose(ctx, &spec, cached, x, w, y, out);
    bn_device_free(x);
    bn_device_free(w);
    bn_device_free(y);
    return st;
}

/* Runner names in the cache's choices, by BY_*; cuDNN's carry the algorithm, "cudnn:1", or
 * "cudnn:g" for its graph API (whose engine the cache keeps under the pass's own key). */
static const char *const cached_names[BY_COUNT] = {"cudnn", "direct", "igemm", "rows", "tensor", "argmax"};

/* BLOBNET_CONV_VERBOSE=1: every timed choice of a plan to stderr (each runner's milliseconds). */
static bool verbose(void)
{
    static int on = -1;
    if (on < 0) {
        const char *e = getenv("BLOBNET_CONV_VERBOSE");
        on = e && e[0] && strcmp(e, "0") != 0;
    }
    return on != 0;
}

static const char *const pass_names[3] = {"forward", "backward-data", "backward-filter"};

/* Set by bn_conv2d_gpu_force_graph: the graph API's plan wherever it has one, timed or not. */
static bool graph_forced = false;

extern "C" void bn_conv2d_gpu_force_graph(int on)
{
    graph_forced = on != 0;
}

/* After the legacy algorithm of a pass was measured at legacy_ms: the graph API's plan instead
 * where it was timed faster (never in a deterministic context, whose runs take the legacy
 * heuristics' choice). Its workspace joins *need. */
static bn_status maybe_graph(const bn_layer *l, bn_ctx *ctx, int pass, float legacy_ms, conv_plan *plan, size_t *need)
{
    if (ctx->deterministic) return BN_OK;
    bn_cg_plan *gp = NULL;
    BN_TRY(graph_plan(l, ctx, pass, 0, &gp));
    const bool taken = gp && (graph_forced || bn_cg_ms(gp) < legacy_ms);
    if (verbose())
        fprintf(stderr, "conv2d %s n=%d %s: cuDNN legacy %.4f ms, graph %s %.4f ms; %s\n", l->name, l->in->n,
                pass_names[pass], legacy_ms, gp ? bn_cg_name(gp) : "(none)", gp ? bn_cg_ms(gp) : 0.0f,
                taken ? "graph" : "legacy");
    if (!taken) {
        bn_cg_free(&gp);
        return BN_OK;
    }
    plan->cg[pass] = gp;
    if (bn_cg_workspace(gp) > *need) *need = bn_cg_workspace(gp);
    if (pass == BN_CG_DATA) plan->bwd_data_workspace = bn_cg_workspace(gp);
    return BN_OK;
}

static bn_status choose_fwd(const bn_layer *l, bn_ctx *ctx, bool graph, const conv_gpu *g, cudnnTensorDescriptor_t x,
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
    return graph ? maybe_graph(l, ctx, BN_CG_FORWARD, r[i].time, plan, need) : BN_OK;
}

static bn_status choose_bwd_data(const bn_layer *l, bn_ctx *ctx, bool graph, const conv_gpu *g,
                                 cudnnTensorDescriptor_t dx,
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
    plan->bwd_data_workspace = r[i].memory;
    if (r[i].memory > *need) *need = r[i].memory;
    return graph ? maybe_graph(l, ctx, BN_CG_DATA, r[i].time, plan, need) : BN_OK;
}

static bn_status choose_bwd_filter(const bn_layer *l, bn_ctx *ctx, bool graph, const conv_gpu *g,
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
    return graph ? maybe_graph(l, ctx, BN_CG_FILTER, r[i].time, plan, need) : BN_OK;
}

/* Whether the forward pass by `by` can write a 2x2 max pooling's output instead of its own
 * (conv_pooled.h): the row tiles' and the tensor cores' where their buffers allow. */
static bool writes_pooled(const conv_plan *plan, int by)
{
    if (by == BY_ROWS) return bn_rows_pools(&plan->rows) != 0;
    return by == BY_TENSOR && plan->tc.fwd_ok && plan->tc.fwd.pools;
}

/* The three passes on the given buffers, by blobnet's kernels (own) or by cuDNN's chosen
 * algorithm with its bias operation, which blobnet's kernels fuse. Used by the layer's passes
 * and by the timing that chooses between the two. The forward pass writes y, or with `pooled`
 * (writes_pooled) the pooling's output and mask instead; by cuDNN, where relu_y is not NULL, the
 * fused ReLU's output too (from its bias kernel). */
static bn_status forward_pass(int by, const conv_gpu *g, const conv_plan *plan, bn_ctx *ctx,
                              cudnnTensorDescriptor_t xd, cudnnTensorDescriptor_t yd, const float *x, const float *w,
                              const float *b, float *y, const bn_pooled_out *pooled, float *relu_y)
{
    const bn_direct_plan *d = &plan->direct;
    if (pooled && !writes_pooled(plan, by))
        return bn_error(BN_ERR_INTERNAL, "this forward pass cannot write a pooled output");
    if (by == BY_DIRECT) return bn_direct_forward(d, ctx->stream, x, w, b, y);
    if (by == BY_IGEMM) return bn_igemm_forward(&plan->ig, &d->g, d->filters, d->n, ctx->stream, x, w, b, y);
    if (by == BY_ROWS) return bn_rows_forward(&plan->rows, ctx->stream, x, w, b, y, pooled);
    if (by == BY_TENSOR) return bn_tensor_forward(&plan->tc, ctx->stream, x, w, b, y, pooled);
    cudnnHandle_t h = (cudnnHandle_t)ctx->cudnn;
    const float one = 1.0f, zero = 0.0f;
    if (plan->cg[0])
        BN_TRY(bn_cg_run(ctx, plan->cg[0], x, w, y));
    else
        BN_CUDNN(cudnnConvolutionForward(h, &one, xd, x, g->w_desc, w, g->conv_desc, plan->fwd, ctx->workspace,
                                         ctx->workspace_size, &zero, yd, y));
    return bn_conv_bias_add_f32(y, b, d->n, d->filters, d->g.oh * d->g.ow, relu_y, ctx);
}

/* Whether pass 1 (data) or 2 (filter) by `by` can read dy through a max pooling
 * (conv_pooled.h): the row tiles' filter pass, the tensor cores' passes where their buffers
 * fit, and the argmax filter pass, which reads nothing else. */
static bool reads_pooled(const conv_plan *plan, int by, int pass)
{
    if (by == BY_ARGMAX) return pass == 2 && plan->am.ok;
    if (by == BY_ROWS) return pass == 2 && plan->rows.filter_ok;
    return by == BY_TENSOR && bn_tensor_pooled_fits(&plan->tc, pass);
}

/* dx is overwritten. dy is read through `pooled` when it is not NULL (reads_pooled). */
static bn_status data_pass(int by, const conv_gpu *g, const conv_plan *plan, bn_ctx *ctx,
                           cudnnTensorDescriptor_t dxd, cudnnTensorDescriptor_t dyd, const float *dy,
                           const bn_pooled_dy *pooled, const float *w, float *dx)
{
    const bn_direct_plan *d = &plan->direct;
    if (pooled && !reads_pooled(plan, by, 1))
        return bn_error(BN_ERR_INTERNAL, "this backward-data pass cannot read dy through a pooling");
    if (by == BY_DIRECT) return bn_direct_backward_data(d, ctx->stream, dy, w, dx);
    if (by == BY_IGEMM) return bn_igemm_backward_data(&plan->ig, &d->g, d->filters, d->n, ctx->stream, dy, w, dx);
    if (by == BY_ROWS) return bn_rows_backward_data(&plan->rows, ctx->stream, dy, w, dx);
    if (by == BY_TENSOR) return bn_tensor_backward_data(&plan->tc, ctx->stream, dy, pooled, w, dx);
    const float one = 1.0f, zero = 0.0f;
    if (plan->cg[1]) return bn_cg_run(ctx, plan->cg[1], dx, w, dy);
    BN_CUDNN(cudnnConvolutionBackwardData((cudnnHandle_t)ctx->cudnn, &one, g->w_desc, w, dyd, dy, g->conv_desc,
                                          plan->bwd_data, ctx->workspace, ctx->workspace_size, &zero, dxd, dx));
    return BN_OK;
}

/* dw and db accumulate (beta = 1 for cuDNN), as the layer contract asks. blobnet's kernels run
 * on `stream` with their partial sums in `parts`; cuDNN's handle is bound to the context stream
 * and uses the context's workspace. */
static bn_status filter_pass(int by, const conv_gpu *g, const conv_plan *plan, bn_ctx *ctx, cudaStream_t stream,
                             cudnnTensorDescriptor_t xd, cudnnTensorDescriptor_t dyd, const float *x, const float *dy,
                             const bn_pooled_dy *pooled, float *dw, float *db, float *parts)
{
    const bn_direct_plan *d = &plan->direct;
    if (pooled && !reads_pooled(plan, by, 2))
        return bn_error(BN_ERR_INTERNAL, "this backward-filter pass cannot read dy through a pooling");
    if (by == BY_DIRECT) return bn_direct_backward_filter(d, stream, x, dy, dw, db, parts);
    if (by == BY_ARGMAX) {
        if (!pooled) return bn_error(BN_ERR_INTERNAL, "the argmax backward-filter pass needs dy through a pooling");
        return bn_argmax_backward_filter(&plan->am, stream, x, pooled, dw, db, parts);
    }
    if (by == BY_ROWS) return bn_rows_backward_filter(&plan->rows, stream, x, dy, pooled, dw, db, parts);
    if (by == BY_TENSOR) return bn_tensor_backward_filter(&plan->tc, stream, x, dy, pooled, dw, db, parts);
    if (by == BY_IGEMM) {
        const bn_igemm_pass *f = &plan->ig.pass[2];
        BN_TRY(bn_igemm_backward_filter_parts(&plan->ig, &d->g, d->filters, d->n, stream, x, dy, parts));
        return bn_direct_finish_filter(stream, parts, f->splits, f->M, f->N, dw, db);
    }
    cudnnHandle_t h = (cudnnHandle_t)ctx->cudnn;
    const float one = 1.0f;
    BN_TRY(bn_conv_bias_grad_f32(db, dy, d->n, d->filters, d->g.oh * d->g.ow, g->bias_parts, ctx));
    if (plan->cg[2]) return bn_cg_run(ctx, plan->cg[2], x, dw, dy);
    BN_CUDNN(cudnnConvolutionBackwardFilter(h, &one, xd, x, dyd, dy, g->conv_desc, plan->bwd_filter, ctx->workspace,
                                            ctx->workspace_size, &one, g->w_desc, dw));
    return BN_OK;
}

/* Scratch buffers of the layer's sizes for timing the passes. */
typedef struct scratch {
    float *x, *dx, *y, *w, *dw, *b, *db, *parts;
    bn_pooled_dy pooled; /* a pooled gradient and mask of zeros, for the argmax filter pass */
} scratch;

/* Whether the backward pass runs the filter pass (by `filter`) on the side stream beside the
 * data pass (by `data`): blobnet's filter pass, and a data pass that needs no workspace. */
static bool overlapped(const conv_plan *plan, const bn_ctx *ctx, int filter, int data)
{
    return filter != BY_CUDNN && ctx->side_stream && (data != BY_CUDNN || plan->bwd_data_workspace == 0);
}

/* Both gradients, the filter pass by `filter` (reading dy through filter_pooled when that is
 * not NULL) and the data pass by `data` (through pooled). When they overlap
 * (see overlapped) the filter pass runs on the side stream beside the data pass (neither
 * depends on the other), joined back before returning, or with `defer` left for the net to
 * join at the end of its backward pass (bn_ctx_defer_side), so that it also runs beside the
 * layers below; else the filter pass runs first. */
static bn_status both_passes(int filter, int data, const conv_gpu *g, const conv_plan *plan, bn_ctx *ctx,
                             cudnnTensorDescriptor_t xd, cudnnTensorDescriptor_t dxd, cudnnTensorDescriptor_t dyd,
                             const float *x, const float *dy, const bn_pooled_dy *pooled,
                             const bn_pooled_dy *filter_pooled, const float *w, float *dw, float *db, float *dx,
                             float *parts, bool defer)
{
    cudaStream_t main_stream = (cudaStream_t)ctx->stream, side = (cudaStream_t)ctx->side_stream;
    if (!overlapped(plan, ctx, filter, data)) {
        BN_TRY(filter_pass(filter, g, plan, ctx, main_stream, xd, dyd, x, dy, filter_pooled, dw, db, parts));
        return data_pass(data, g, plan, ctx, dxd, dyd, dy, pooled, w, dx);
    }
    BN_CUDA(cudaEventRecord(g->fork, main_stream));
    BN_CUDA(cudaStreamWaitEvent(side, g->fork, 0));
    BN_TRY(filter_pass(filter, g, plan, ctx, side, xd, dyd, x, dy, filter_pooled, dw, db, parts));
    if (defer) {
        bn_ctx_defer_side(ctx);
        return data_pass(data, g, plan, ctx, dxd, dyd, dy, pooled, w, dx);
    }
    BN_CUDA(cudaEventRecord(g->join, side));
    BN_TRY(data_pass(data, g, plan, ctx, dxd, dyd, dy, pooled, w, dx));
    BN_CUDA(cudaStreamWaitEvent(main_stream, g->join, 0));
    return BN_OK;
}

/* One call of a pass on scratch buffers (blobnet's filter passes on scratch partial sums, so
 * that the workspace is not touched). `beside` >= 0: the data pass runs as the backward pass
 * runs it, with the filter pass by `beside` (both_passes), so that every data candidate is
 * timed with the same filter work. */
static bn_status run_pass(int pass, int by, int beside, const conv_gpu *g, const conv_plan *plan, bn_ctx *ctx,
                          cudnnTensorDescriptor_t xd, cudnnTensorDescriptor_t yd, const scratch *m)
{
    if (pass == 0) return forward_pass(by, g, plan, ctx, xd, yd, m->x, m->w, m->b, m->y, NULL, NULL);
    if (pass == 2)
        return filter_pass(by, g, plan, ctx, (cudaStream_t)ctx->stream, xd, yd, m->x, m->y,
                           by == BY_ARGMAX ? &m->pooled : NULL, m->dw, m->db, m->parts);
    if (beside < 0) return data_pass(by, g, plan, ctx, xd, yd, m->y, NULL, m->w, m->dx);
    return both_passes(beside, by, g, plan, ctx, xd, xd, yd, m->x, m->y, NULL, beside == BY_ARGMAX ? &m->pooled : NULL,
                       m->w, m->dw, m->db, m->dx, m->parts, false);
}

/* count floats rounded up to a multiple of 64 (256 bytes). */
static size_t round_up(size_t count)
{
    return (count + 63) / 64 * 64;
}

/* The partial sums blobnet's filter pass needs, in bytes. */
static size_t own_parts(const conv_plan *plan)
{
    size_t most = plan->direct.workspace > plan->ig.workspace ? plan->direct.workspace : plan->ig.workspace;
    if (plan->rows.workspace > most) most = plan->rows.workspace;
    if (plan->am.workspace > most) most = plan->am.workspace;
    return plan->tc.workspace > most ? plan->tc.workspace : most;
}

/* Milliseconds per call of pass p by runner r where timed[p][r], measured alike for every
 * runner on zeroed scratch buffers of the layer's sizes (the workspace already reserved for
 * all): after 2 calls to warm up, the least of 3 means of 4 calls each (the least, because
 * other work on the device only ever adds time). `beside`: as for run_pass. */
static bn_status time_passes(const conv_priv *c, const conv_plan *plan, bn_ctx *ctx, cudnnTensorDescriptor_t xd,
                             cudnnTensorDescriptor_t yd, const bool timed[3][BY_COUNT], int beside,
                             float ms[3][BY_COUNT])
{
    const bn_direct_plan *d = &plan->direct;
    const bn_conv_geom *g = &c->g;
    /* Every buffer starts 256-byte aligned, as cudaMalloc's do: cuDNN's vector loads need it. */
    size_t in = round_up((size_t)d->n * g->c * g->h * g->w), out = round_up((size_t)d->n * c->filters * g->oh * g->ow);
    size_t wts = round_up((size_t)c->filters * g->c * g->k * g->k), parts = round_up(own_parts(plan) / sizeof(float));
    size_t bias = round_up((size_t)c->filters);
    size_t pooled = round_up((size_t)d->n * c->filters * plan->am.ph * plan->am.pw);
    size_t total = 2 * in + out + 2 * wts + 2 * bias + parts + pooled + pooled / 4;
    float *buf = NULL;
    BN_TRY(bn_device_alloc((void **)&buf, total * sizeof(float)));
    scratch m;
    m.x = buf, m.dx = m.x + in, m.y = m.dx + in, m.w = m.y + out, m.dw = m.w + wts, m.b = m.dw + wts;
    m.db = m.b + bias, m.parts = m.db + bias;
    m.pooled.dy = m.parts + parts;
    m.pooled.mask = (const unsigned char *)(m.pooled.dy + pooled);
    m.pooled.ph = plan->am.ph, m.pooled.pw = plan->am.pw;
    void *start = NULL, *end = NULL;
    bn_status s = bn_device_zero(buf, total * sizeof(float));
    if (s == BN_OK) s = bn_event_create(&start);
    if (s == BN_OK) s = bn_event_create(&end);
    for (int pass = 0; pass < 3 && s == BN_OK; pass++) {
        for (int by = 0; by < BY_COUNT && s == BN_OK; by++) {
            if (!timed[pass][by]) continue;
            for (int rep = 0; rep < 2 && s == BN_OK; rep++) s = run_pass(pass, by, beside, c->gpu, plan, ctx, xd, yd, &m);
            for (int round = 0; round < 3 && s == BN_OK; round++) {
                float t = 0.0f;
                s = bn_event_record(start);
                for (int rep = 0; rep < 4 && s == BN_OK; rep++)
                    s = run_pass(pass, by, beside, c->gpu, plan, ctx, xd, yd, &m);
                if (s == BN_OK) s = bn_event_record(end);
                if (s == BN_OK) s = bn_event_elapsed_ms(start, end, &t);
                if (s == BN_OK && (round == 0 || t / 4 < ms[pass][by])) ms[pass][by] = t / 4;
            }
        }
    }
    if (start) bn_event_destroy(start);
    if (end) bn_event_destroy(end);
    bn_device_free(buf);
    return s;
}

/* The fewest filters for which the rule gives a large batch's filter pass to the tensor cores. */
#define TENSOR_FILTER_MIN 32

/* blobnet's families in the rule's order of preference, per pass (forward, data, filter). */
static const int rule_order[3][5] = {{BY_TENSOR, BY_ROWS, BY_DIRECT, BY_IGEMM, BY_ARGMAX},
                                     {BY_TENSOR, BY_ROWS, BY_DIRECT, BY_IGEMM, BY_ARGMAX},
                                     {BY_ROWS, BY_IGEMM, BY_TENSOR, BY_DIRECT, BY_ARGMAX}};

/* Timed runners within this fraction of the fastest count as equally fast. */
#define TIE 0.05f

/* The layer shapes at which the rule's order of preference was measured against the timed
 * choice, in whole training steps: LeNet's two convolutions, each read by a 2x2 max pooling, at
 * batches 64 and 256 (docs/performance.md, versions 12-21; 83 against 89 ms per epoch at batch
 * 64, 38 against 39 at 256 on an H200). Elsewhere the rule's families were never measured
 * against the others: VGG-style 3x3 layers of 32-64 filters ran 1.34x slower by the rule than
 * timed, a strided and 1x1 network 1.79x (version 24). Input channels, size, window, stride,
 * padding, filters. */
static const struct {
    int c, h, w, k, stride, pad, filters;
} rule_measured[] = {{1, 28, 28, 5, 1, 0, 20}, {20, 12, 12, 5, 1, 0, 50}};

static bool rule_was_measured(const conv_priv *c)
{
    if (!c->pool_after) return false;
    for (size_t i = 0; i < sizeof rule_measured / sizeof rule_measured[0]; i++) {
        const bn_conv_geom *g = &c->g;
        if (g->c == rule_measured[i].c && g->h == rule_measured[i].h && g->w == rule_measured[i].w &&
            g->k == rule_measured[i].k && g->stride == rule_measured[i].stride && g->pad == rule_measured[i].pad &&
            c->filters == rule_measured[i].filters)
            return true;
    }
    return false;
}

/* How the plan's runners are chosen (bn_kernel_choice); a family forced for tests keeps the
 * rule, or timing with --autotune, and no cache. */
static int choice_mode(const conv_priv *c, const bn_ctx *ctx)
{
    return bn_kernel_choice(ctx, force_family || rule_was_measured(c));
}

/* Who may run each pass (forward, data, filter) of the plan: can[i][r] for runner r, ask[i]
 * when cuDNN is among them (its algorithm is then chosen too). By the rule, one runner each. */
static void runners(const conv_priv *c, const conv_plan *plan, bool by_rule, int sms, bool can[3][BY_COUNT],
                    bool ask[3])
{
    const bn_direct_plan *d = &plan->direct;
    const bool needed[3] = {true, plan->with_data != 0, true};
    const bool direct_ok[3] = {d->fwd_ok != 0, d->data_ok != 0, d->filter_ok != 0};
    const bn_rows_plan *rw = &plan->rows;
    const bool rows_ok[3] = {rw->fwd_ok != 0, rw->data_ok != 0, rw->filter_ok != 0};
    const bool tensor_ok[3] = {plan->tc.fwd_ok != 0, plan->tc.data_ok != 0, plan->tc.filter_ok != 0};
    for (int i = 0; i < 3; i++) {
        const bool mine = needed[i] && c->engine != BN_CONV_ENGINE_CUDNN;
        can[i][BY_DIRECT] = mine && direct_ok[i];
        /* The implicit-GEMM forward and data kernels measured 1.7-3.5x slower than the direct
         * ones at LeNet's sizes (docs/performance.md, version 11): they run when forced (tests)
         * and are not timed otherwise, which keeps their first-launch and timing cost out of
         * the start-up. */
        can[i][BY_IGEMM] = mine && plan->ig.pass[i].ok && (i == 2 || force_family == BY_IGEMM);
        can[i][BY_ROWS] = mine && rows_ok[i];
        can[i][BY_TENSOR] = mine && tensor_ok[i];
        /* The argmax filter pass reads dy only through the max pooling after the layer. */
        can[i][BY_ARGMAX] = mine && i == 2 && plan->am.ok && c->pool_after != NULL;
        if (force_family && can[i][force_family])
            for (int r = BY_DIRECT; r < BY_COUNT; r++)
                if (r != force_family) can[i][r] = false;
        bool own = false;
        for (int r = BY_DIRECT; r < BY_COUNT; r++) own = own || can[i][r];
        /* blobnet's kernels settle the pass: cuDNN is not asked or timed. */
        const bool settled =
            own && (c->engine == BN_CONV_ENGINE_BLOBNET || (c->engine == BN_CONV_ENGINE_AUTO && by_rule));
        ask[i] = needed[i] && !settled;
        can[i][BY_CUDNN] = ask[i];
        if (!by_rule || !settled) continue;
        /* The rule takes one family by a fixed order of preference, so that every run picks the
         * same kernels and none is timed, the faster ones at LeNet's sizes first
         * (docs/performance.md): the tensor-core kernels for the forward and data passes, the
         * row tiles for the filter pass (conv1's, where they beat the tensor cores most), then
         * the row tiles, the implicit GEMM for the filter pass and the direct kernels for the
         * others. Two exceptions for the filter pass. Through a max pooling, the argmax kernel
         * where one block holds a thread for every filter, input channel and window row (LeNet's
         * conv1: 11.6 us against the row tiles' 21.3 at batch 256, the epoch 44 -> 41 ms;
         * LeNet's conv2 needs 5000 such threads, and a version with 8 filters per thread measured
         * 2-4x slower than the tensor cores). Else a layer of at least TENSOR_FILTER_MIN filters
         * takes the tensor cores when the batch holds at least one image per multiprocessor
         * (LeNet's conv2 at batch 256: its row tiles, beside the data pass and conv1's filter
         * pass, made the step 18 us longer; at batch 64 they are the faster). */
        int keep = -1;
        if (i == 2 && can[i][BY_ARGMAX] && plan->am.groups == 1) keep = BY_ARGMAX;
        if (keep < 0 && i == 2 && plan->n >= sms && c->filters >= TENSOR_FILTER_MIN && can[i][BY_TENSOR])
            keep = BY_TENSOR;
        for (int r = 0; r < 5 && keep < 0; r++)
            if (can[i][rule_order[i][r]]) keep = rule_order[i][r];
        for (int r = BY_DIRECT; r < BY_COUNT; r++)
            if (r != keep) can[i][r] = false;
    }
}

/* Pass i's runner among can: the only one, or of those timed within TIE of the fastest the first
 * in the rule's order, cuDNN after blobnet's families. Taking the fastest alone was not
 * reproducible: two runs of it gave strided_fashion 205 and 228 ms per epoch
 * (docs/performance.md, version 24). This way runs agree where runners are that close, and a tie
 * goes to blobnet's kernels, whose gradients overlap on the side stream and which take a max
 * pooling's passes, which the timing of a pass alone does not see. */
static int pick_runner(int i, const bool can[BY_COUNT], const bool timed[BY_COUNT], const float ms[BY_COUNT])
{
    float fastest = INFINITY;
    int only = BY_CUDNN;
    for (int r = 0; r < BY_COUNT; r++) {
        if (can[r]) only = r;
        if (timed[r] && ms[r] < fastest) fastest = ms[r];
    }
    if (fastest == INFINITY) return only;
    for (int k = 0; k < 5; k++)
        if (timed[rule_order[i][k]] && ms[rule_order[i][k]] <= fastest * (1.0f + TIE)) return rule_order[i][k];
    return BY_CUDNN;
}

/* Reserves the shared workspace (need bytes) and, when blobnet's kernels may run the filter
 * pass, the layer's partial sums, before anything is timed or run: every runner then runs as it
 * will in the steps. */
static bn_status reserve(conv_priv *c, bn_ctx *ctx, const conv_plan *plan, size_t need, bool own_filter)
{
    BN_TRY(bn_ctx_reserve_workspace(ctx, need));
    conv_gpu *g = c->gpu;
    if (!own_filter || own_parts(plan) <= g->parts_bytes) return BN_OK;
    /* cudaFree waits for the device, so no pass still uses the old buffer; a captured step graph
     * holds its address, so the context's buffer generation moves on. */
    bn_device_free(g->parts);
    g->parts = NULL;
    g->parts_bytes = 0;
    BN_TRY(bn_device_alloc((void **)&g->parts, own_parts(plan)));
    g->parts_bytes = own_parts(plan);
    ctx->buffer_generation++;
    return BN_OK;
}

/* Chooses the runners among can and ask: cuDNN's algorithms for the passes it may run (measured,
 * or in a deterministic context by its heuristics; with `graph`, its graph-API engines too where
 * they were timed faster than the legacy algorithm: maybe_graph), then, where several runners remain, the one
 * timed fastest (pick_runner): forward and filter first, then the data pass timed beside the
 * chosen filter pass, as the backward pass runs the two. */
static bn_status choose_runners(bn_layer *l, conv_priv *c, bn_ctx *ctx, conv_plan *plan, const bool can[3][BY_COUNT],
                                const bool ask[3], bool graph)
{
    conv_gpu *g = c->gpu;
    BN_TENSOR_DESC(x, l->in);
    BN_TENSOR_DESC(y, l->out);
    size_t need = 0;
    float ms[3][BY_COUNT] = {{0}};
    if (ask[0]) BN_TRY(choose_fwd(l, ctx, graph, g, x, y, plan, &need));
    if (ask[1]) BN_TRY(choose_bwd_data(l, ctx, graph, g, x, y, plan, &need));
    if (ask[2]) BN_TRY(choose_bwd_filter(l, ctx, graph, g, x, y, plan, &need));
    bool own_filter = false, timed[3][BY_COUNT];
    for (int i = 0; i < 3; i++) {
        int candidates = 0;
        for (int r = 0; r < BY_COUNT; r++) candidates += can[i][r];
        for (int r = 0; r < BY_COUNT; r++) timed[i][r] = candidates > 1 && can[i][r];
    }
    for (int r = BY_DIRECT; r < BY_COUNT; r++) own_filter = own_filter || can[2][r];
    BN_TRY(reserve(c, ctx, plan, need, own_filter));
    static const int order[3] = {0, 2, 1};
    for (int o = 0; o < 3; o++) {
        const int i = order[o];
        bool timing = false, only[3][BY_COUNT] = {{false}};
        for (int r = 0; r < BY_COUNT; r++) {
            only[i][r] = timed[i][r];
            timing = timing || timed[i][r];
        }
        const int beside = i == 1 && plan->with_data ? plan->by[2] : -1;
        if (timing) BN_TRY(time_passes(c, plan, ctx, x, y, only, beside, ms));
        plan->by[i] = pick_runner(i, can[i], timed[i], ms[i]);
        if (timing && verbose()) {
            fprintf(stderr, "conv2d %s n=%d %s:", l->name, plan->n, pass_names[i]);
            for (int r = 0; r < BY_COUNT; r++)
                if (timed[i][r]) fprintf(stderr, " %s %.4f ms", cached_names[r], ms[i][r]);
            fprintf(stderr, "; takes %s\n", cached_names[plan->by[i]]);
        }
    }
    return BN_OK;
}

/* The kernel cache's key for the plan: the device's scope, then everything the candidates and
 * their timing depend on. */
static bn_status cache_key(const bn_layer *l, const conv_priv *c, const bn_ctx *ctx, int n, char *key, size_t cap)
{
    char scope[256];
    BN_TRY(bn_kernel_cache_scope(ctx, scope, sizeof scope));
    static const char *const engines[] = {"", " engine=cudnn", " engine=blobnet"};
    const bn_conv_geom *g = &c->g;
    int w = snprintf(key, cap, "%s conv2d %dx%dx%d k%d s%d p%d f%d n%d%s%s%s%s", scope, g->c, g->h, g->w, g->k,
                     g->stride, g->pad, c->filters, n, l->in_grad ? " data" : "", c->pool_after ? " pooled" : "",
                     ctx->tf32 ? " tf32" : "", engines[c->engine]);
    if (w < 0 || (size_t)w >= cap)
        return bn_error(BN_ERR_INTERNAL, "layer %s: no room for its kernel cache key", l->name);
    return BN_OK;
}

/* The plan's runners as a cache choice: "fwd=tensor data=cudnn:1 filter=rows" ("data=-" for a
 * layer without an input gradient). */
static void cache_choice(const conv_plan *plan, char *buf, size_t cap)
{
    const int algo[3] = {(int)plan->fwd, (int)plan->bwd_data, (int)plan->bwd_filter};
    char pass[3][24];
    for (int i = 0; i < 3; i++) {
        if (i == 1 && !plan->with_data) snprintf(pass[i], sizeof pass[i], "-");
        else if (plan->by[i] == BY_CUDNN && plan->cg[i]) snprintf(pass[i], sizeof pass[i], "cudnn:g");
        else if (plan->by[i] == BY_CUDNN) snprintf(pass[i], sizeof pass[i], "cudnn:%d", algo[i]);
        else snprintf(pass[i], sizeof pass[i], "%s", cached_names[plan->by[i]]);
    }
    snprintf(buf, cap, "fwd=%s data=%s filter=%s", pass[0], pass[1], pass[2]);
}

/* One pass's runner in a cache choice: *by and, for cuDNN, *algo (below `count`, or -1 for its
 * graph API); "-" gives *by = -1. 0 when the text is none of these. */
static int read_runner(const char *text, int count, int *by, int *algo)
{
    *by = -1;
    *algo = 0;
    if (strcmp(text, "-") == 0) return 1;
    if (strcmp(text, "cudnn:g") == 0) {
        *by = BY_CUDNN;
        *algo = -1;
        return 1;
    }
    for (int r = BY_DIRECT; r < BY_COUNT; r++)
        if (strcmp(text, cached_names[r]) == 0) {
            *by = r;
            return 1;
        }
    int used = 0;
    if (sscanf(text, "cudnn:%d%n", algo, &used) != 1 || text[used] || *algo < 0 || *algo >= count) return 0;
    *by = BY_CUDNN;
    return 1;
}

/* The cache's choice for the plan, if it has one that can run: the runners set in plan, cuDNN's
 * algorithms with their workspace and the buffers reserved, *hit = true. A choice that some
 * pass cannot take (another engine, an algorithm this context does not allow or cuDNN cannot
 * run on this shape) is no hit; one that cannot be read is an error naming the cache file. */
static bn_status from_cache(bn_layer *l, conv_priv *c, bn_ctx *ctx, conv_plan *plan, const char *key,
                            const bool can[3][BY_COUNT], bool *hit)
{
    *hit = false;
    char choice[BN_KERNEL_CHOICE_MAX], text[3][24];
    int found = 0, used = 0;
    BN_TRY(bn_kernel_cache_get(key, choice, sizeof choice, &found));
    if (!found) return BN_OK;
    static const int counts[3] = {CUDNN_CONVOLUTION_FWD_ALGO_COUNT, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT,
                                  CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT};
    int by[3], algo[3];
    bool readable = sscanf(choice, "fwd=%23s data=%23s filter=%23s%n", text[0], text[1], text[2], &used) == 3 &&
                    !choice[used];
    for (int i = 0; i < 3 && readable; i++) readable = read_runner(text[i], counts[i], &by[i], &algo[i]);
    if (!readable)
        return bn_error(BN_ERR_DATA, "kernel cache %s: cannot read the choice '%s' of layer %s; delete the file to "
                        "time again", bn_kernel_cache_path(), choice, l->name);
    const bool needed[3] = {true, plan->with_data != 0, true};
    for (int i = 0; i < 3; i++) {
        if (!needed[i]) {
            if (by[i] != -1) return BN_OK;
            continue;
        }
        if (by[i] < 0 || !can[i][by[i]]) return BN_OK;
    }
    const cudnnConvolutionFwdAlgo_t fwd = (cudnnConvolutionFwdAlgo_t)algo[0];
    const cudnnConvolutionBwdDataAlgo_t data = (cudnnConvolutionBwdDataAlgo_t)algo[1];
    const cudnnConvolutionBwdFilterAlgo_t filter = (cudnnConvolutionBwdFilterAlgo_t)algo[2];
    if (!ctx->tf32 && ((by[0] == BY_CUDNN && algo[0] >= 0 && !bn_sums_directly(fwd)) ||
                       (by[1] == BY_CUDNN && algo[1] >= 0 && !bn_sums_directly(data)) ||
                       (by[2] == BY_CUDNN && algo[2] >= 0 && !bn_sums_directly(filter))))
        return BN_OK;
    conv_gpu *g = c->gpu;
    cudnnHandle_t h = (cudnnHandle_t)ctx->cudnn;
    BN_TENSOR_DESC(x, l->in);
    BN_TENSOR_DESC(y, l->out);
    size_t bytes[3] = {0, 0, 0}, need = 0;
    cudnnStatus_t s[3] = {CUDNN_STATUS_SUCCESS, CUDNN_STATUS_SUCCESS, CUDNN_STATUS_SUCCESS};
    if (by[0] == BY_CUDNN && algo[0] >= 0)
        s[0] = cudnnGetConvolutionForwardWorkspaceSize(h, x, g->w_desc, g->conv_desc, y, fwd, &bytes[0]);
    if (by[1] == BY_CUDNN && algo[1] >= 0)
        s[1] = cudnnGetConvolutionBackwardDataWorkspaceSize(h, g->w_desc, y, g->conv_desc, x, data, &bytes[1]);
    if (by[2] == BY_CUDNN && algo[2] >= 0)
        s[2] = cudnnGetConvolutionBackwardFilterWorkspaceSize(h, x, y, g->conv_desc, g->w_desc, filter, &bytes[2]);
    /* The graph-API passes, from the kernel cache's entries of their own (timed afresh if missing). */
    bn_cg_plan *cg[3] = {NULL, NULL, NULL};
    bool usable = true;
    bn_status st = BN_OK;
    for (int i = 0; i < 3 && st == BN_OK && usable; i++) {
        if (!needed[i] || by[i] != BY_CUDNN || algo[i] >= 0) continue;
        st = graph_plan(l, ctx, i, 1, &cg[i]);
        usable = st == BN_OK && cg[i] != NULL;
        if (usable) bytes[i] = bn_cg_workspace(cg[i]);
    }
    for (int i = 0; i < 3 && usable; i++) {
        if (s[i] != CUDNN_STATUS_SUCCESS || bytes[i] > BN_CONV_WORKSPACE_LIMIT) usable = false;
        if (bytes[i] > need) need = bytes[i];
    }
    if (st != BN_OK || !usable) {
        for (int i = 0; i < 3; i++) bn_cg_free(&cg[i]);
        return st;
    }
    for (int i = 0; i < 3; i++) plan->cg[i] = cg[i];
    plan->fwd = fwd;
    plan->bwd_data = data;
    plan->bwd_filter = filter;
    plan->bwd_data_workspace = bytes[1];
    for (int i = 0; i < 3; i++) plan->by[i] = needed[i] ? by[i] : BY_CUDNN;
    BN_TRY(reserve(c, ctx, plan, need, by[2] != BY_CUDNN));
    *hit = true;
    return BN_OK;
}

/* Chooses who runs each pass for the current batch size (see the engine key and choice_mode)
 * and cuDNN's algorithm for the passes cuDNN runs, and grows the shared workspace to what they
 * need. Runs once per batch size: cudnnFind* and the timing synchronise and allocate. */
static bn_status make_plan(bn_layer *l, conv_priv *c, bn_ctx *ctx, conv_plan *plan)
{
    conv_gpu *g = c->gpu;
    int n = l->in->n, k, oh, ow;
    /* The blobs' descriptors are BF16 ones for an own-only plan, which never calls cuDNN. */
    if (!plan->own_only) {
        BN_TENSOR_DESC(x, l->in);
        BN_TENSOR_DESC(y, l->out);
        BN_CUDNN(cudnnGetConvolution2dForwardOutputDim(g->conv_desc, x, g->w_desc, &n, &k, &oh, &ow));
        if (n != l->in->n || k != c->filters || oh != c->g.oh || ow != c->g.ow)
            return bn_error(BN_ERR_INTERNAL,
                            "layer %s: cuDNN computes a %dx%dx%dx%d output where blobnet has %dx%dx%dx%d", l->name, n,
                            k, oh, ow, l->in->n, c->filters, c->g.oh, c->g.ow);
    }
    plan->n = n;
    plan->with_data = l->in_grad != NULL;
    int sms = 0;
    BN_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, ctx->device));
    bn_direct_plan_make(&plan->direct, &c->g, c->filters, n, sms);
    bn_igemm_plan_make(&plan->ig, &c->g, c->filters, n, sms);
    bn_rows_plan_make(&plan->rows, &c->g, c->filters, n, sms);
    bn_tensor_plan_make(&plan->tc, &c->g, c->filters, n, sms, ctx->tf32);
    bn_argmax_plan_make(&plan->am, &c->g, c->filters, n, sms);
    const int mode = choice_mode(c, ctx);
    bool can[3][BY_COUNT], ask[3];
    runners(c, plan, mode == BN_CHOOSE_RULE, sms, can, ask);
    if (plan->own_only) {
        /* blobnet's kernels alone: without one for a needed pass the FP32 copies cannot serve. */
        const bool needed[3] = {true, plan->with_data != 0, true};
        plan->own_ok = 1;
        for (int i = 0; i < 3; i++) {
            ask[i] = false;
            can[i][BY_CUDNN] = false;
            bool any = false;
            for (int r = BY_DIRECT; r < BY_COUNT; r++) any = any || can[i][r];
            if (needed[i] && !any) plan->own_ok = 0;
        }
        if (!plan->own_ok) return BN_OK;
    }
    /* Timed choices are kept in the kernel cache, except those of a forced family. */
    char key[BN_KERNEL_KEY_MAX] = "";
    if (mode != BN_CHOOSE_RULE && !force_family) BN_TRY(cache_key(l, c, ctx, n, key, sizeof key));
    if (key[0] && plan->own_only) strncat(key, " own", sizeof key - strlen(key) - 1);
    if (mode == BN_CHOOSE_CACHED) {
        bool hit = false;
        BN_TRY(from_cache(l, c, ctx, plan, key, can, &hit));
        if (hit) return BN_OK;
    }
    /* The graph API's engines under --tf32 only: the FP32-exact default keeps the legacy
     * algorithms (on LeNet's conv2 shape at 20x24x24 one graph engine without any note of
     * reduced precision gave a filter gradient 0.7% of its scale off the CPU's). */
    BN_TRY(choose_runners(l, c, ctx, plan, can, ask, mode != BN_CHOOSE_RULE && ctx->tf32));
    if (!key[0]) return BN_OK;
    char choice[BN_KERNEL_CHOICE_MAX];
    cache_choice(plan, choice, sizeof choice);
    return bn_kernel_cache_put(key, choice);
}

/* The GPU state and the plan for the current batch size, made on first use. */
static bn_status prepare(bn_layer *l, bn_ctx *ctx, const conv_gpu **gpu, const conv_plan **plan, bool own_only)
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
        if (g->plans[i].n == l->in->n && g->plans[i].own_only == (int)own_only) {
            *plan = &g->plans[i];
            return BN_OK;
        }
    conv_plan made;
    memset(&made, 0, sizeof made);
    made.own_only = own_only;
    made.fwd = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
    made.bwd_filter = CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1;
    made.bwd_data = CUDNN_CONVOLUTION_BWD_DATA_ALGO_1;
    BN_TRY(make_plan(l, c, ctx, &made));
    conv_plan *grown = (conv_plan *)realloc(g->plans, (size_t)(g->num_plans + 1) * sizeof *grown);
    if (!grown) return bn_error(BN_ERR_NOMEM, "layer %s: out of host memory", l->name);
    g->plans = grown;
    g->plans[g->num_plans] = made;
    *plan = &g->plans[g->num_plans++];
    return BN_OK;
}

/* The ReLU layer after l whose forward l's does (bn_conv2d_fuse_relu): its own pass, after a
 * forward that did not write its output. */
static bn_status relu_forward(const bn_layer *l, const bn_pass *p)
{
    bn_layer *relu = ((const conv_priv *)l->priv)->relu_after;
    return relu ? relu->ops->forward_gpu(relu, p) : BN_OK;
}

extern "C" bn_status bn_conv2d_forward_gpu(bn_layer *l, const bn_pass *p)
{
    if (bn_blob_is_bf16(l->out)) {
        BN_TRY(bn_conv_bf16_forward(l, p));
        return relu_forward(l, p);
    }
    bn_ctx *ctx = p->ctx;
    const conv_gpu *g = NULL;
    const conv_plan *plan = NULL;
    BN_TRY(prepare(l, ctx, &g, &plan, false));
    BN_DEV_RD(x, l->in);
    BN_DEV_RD(w, l->params[WEIGHT].value);
    BN_DEV_RD(b, l->params[BIAS].value);
    BN_DEV_WR(y, l->out);
    BN_TENSOR_DESC(xd, l->in);
    BN_TENSOR_DESC(yd, l->out);
    /* The max pooling after the layer, if any (bn_conv2d_fuse_next): its forward pass is this
     * one's, in the kernel's epilogue where the kernel chosen for this batch size can (y is then
     * left unwritten), else by the pooling's own kernel after it. */
    const conv_priv *c = (const conv_priv *)l->priv;
    bn_layer *pool = c->pool_after;
    if (!pool) {
        /* A fused ReLU's output is written by cuDNN's bias kernel, else by the ReLU's own pass. */
        float *relu_y = NULL;
        if (c->relu_after && plan->by[0] == BY_CUDNN && !(relu_y = bn_blob_dev_wr(c->relu_after->out)))
            return bn_last_status();
        BN_TRY(forward_pass(plan->by[0], g, plan, ctx, xd, yd, x, w, b, y, NULL, relu_y));
        return relu_y ? BN_OK : relu_forward(l, p);
    }
    if (!writes_pooled(plan, plan->by[0])) {
        BN_TRY(forward_pass(plan->by[0], g, plan, ctx, xd, yd, x, w, b, y, NULL, NULL));
        return bn_maxpool_forward_gpu(pool, p);
    }
    const pool_priv *pp = (const pool_priv *)pool->priv;
    bn_pooled_out po = {bn_blob_dev_wr(pool->out), pp->dev_mask, pp->oh, pp->ow};
    if (!po.y) return bn_last_status();
    return forward_pass(plan->by[0], g, plan, ctx, xd, yd, x, w, b, y, &po, NULL);
}

/* The max pooling after the layer, if any (bn_conv2d_fuse_next): *pooled = pd, its gradient
 * and argmax mask, when the passes chosen for this batch size read dy through it; else its own
 * backward pass writes the layer's output gradient first and *pooled stays NULL. The argmax
 * filter pass reads only the pooled gradient: *filter_pooled is pd whenever it runs, and the
 * other passes' *pooled as above. */
static bn_status through_pool(bn_layer *l, const conv_plan *plan, const bn_pass *p, bn_pooled_dy *pd,
                              const bn_pooled_dy **pooled, const bn_pooled_dy **filter_pooled)
{
    bn_layer *pool = ((const conv_priv *)l->priv)->pool_after;
    *pooled = *filter_pooled = NULL;
    if (!pool) return BN_OK;
    const pool_priv *pp = (const pool_priv *)pool->priv;
    if (!(pd->dy = bn_blob_dev_rd(pool->out_grad))) return bn_last_status();
    pd->mask = pp->dev_mask, pd->ph = pp->oh, pd->pw = pp->ow;
    if (plan->by[2] == BY_ARGMAX) *filter_pooled = pd;
    if (!reads_pooled(plan, plan->by[2], 2) || (l->in_grad && !reads_pooled(plan, plan->by[1], 1)))
        return bn_maxpool_backward_gpu(pool, p);
    *pooled = *filter_pooled = pd;
    return BN_OK;
}

extern "C" bn_status bn_conv2d_backward_gpu(bn_layer *l, const bn_pass *p)
{
    if (bn_blob_is_bf16(l->out_grad)) return bn_conv_bf16_backward(l, p);
    bn_ctx *ctx = p->ctx;
    const conv_gpu *g = NULL;
    const conv_plan *plan = NULL;
    BN_TRY(prepare(l, ctx, &g, &plan, false));
    bn_pooled_dy pd;
    const bn_pooled_dy *pooled = NULL, *filter_pooled = NULL;
    BN_TRY(through_pool(l, plan, p, &pd, &pooled, &filter_pooled));
    const float *dy = NULL;
    if (!pooled && !(dy = bn_blob_dev_rd(l->out_grad))) return bn_last_status();
    BN_DEV_RD(x, l->in);
    BN_DEV_RD(w, l->params[WEIGHT].value);
    BN_DEV_WR(dw, l->params[WEIGHT].grad);
    BN_DEV_WR(db, l->params[BIAS].grad);
    BN_TENSOR_DESC(xd, l->in);
    BN_TENSOR_DESC(dyd, l->out_grad);
    if (!l->in_grad)
        return filter_pass(plan->by[2], g, plan, ctx, (cudaStream_t)ctx->stream, xd, dyd, x, dy, filter_pooled, dw,
                           db, g->parts);
    BN_DEV_WR(dx, l->in_grad);
    BN_TENSOR_DESC(dxd, l->in_grad);
    return both_passes(plan->by[2], plan->by[1], g, plan, ctx, xd, dxd, dyd, x, dy, pooled, filter_pooled, w, dw, db,
                       dx, g->parts, p->defer_joins != 0);
}

extern "C" bn_status bn_conv2d_own_plan(bn_layer *l, bn_ctx *ctx, int *ok)
{
    const conv_gpu *g = NULL;
    const conv_plan *plan = NULL;
    *ok = 0;
    BN_TRY(prepare(l, ctx, &g, &plan, true));
    *ok = plan->own_ok;
    return BN_OK;
}

/* The own-only plan for the layer's batch, which must serve (bn_conv2d_own_plan said so). */
static bn_status own_plan(bn_layer *l, bn_ctx *ctx, const conv_gpu **g, const conv_plan **plan)
{
    BN_TRY(prepare(l, ctx, g, plan, true));
    if (!(*plan)->own_ok)
        return bn_error(BN_ERR_INTERNAL, "layer %s: blobnet's FP32 kernels cannot run every pass at batch %d", l->name,
                        l->in->n);
    return BN_OK;
}

extern "C" bn_status bn_conv2d_own_forward(bn_layer *l, bn_ctx *ctx, const float *x, float *y)
{
    const conv_gpu *g = NULL;
    const conv_plan *plan = NULL;
    BN_TRY(own_plan(l, ctx, &g, &plan));
    BN_DEV_RD(w, l->params[WEIGHT].value);
    BN_DEV_RD(b, l->params[BIAS].value);
    return forward_pass(plan->by[0], g, plan, ctx, NULL, NULL, x, w, b, y, NULL, NULL);
}

extern "C" bn_status bn_conv2d_own_backward(bn_layer *l, bn_ctx *ctx, const float *x, const float *dy, float *dx,
                                            float *dw, float *db)
{
    const conv_gpu *g = NULL;
    const conv_plan *plan = NULL;
    BN_TRY(own_plan(l, ctx, &g, &plan));
    BN_DEV_RD(w, l->params[WEIGHT].value);
    if (!dx)
        return filter_pass(plan->by[2], g, plan, ctx, (cudaStream_t)ctx->stream, NULL, NULL, x, dy, NULL, dw, db,
                           g->parts);
    return both_passes(plan->by[2], plan->by[1], g, plan, ctx, NULL, NULL, NULL, x, dy, NULL, NULL, w, dw, db, dx,
                       g->parts, false);
}

extern "C" int bn_conv2d_fuse_relu(bn_layer *l, bn_layer *relu, int after)
{
    if (!after) return 0; /* no pass here writes the input gradient that a mask could ride on */
    ((conv_priv *)l->priv)->relu_after = relu;
    return 1;
}

extern "C" int bn_conv2d_fuse_next(bn_layer *l, bn_layer *next)
{
    conv_priv *c = (conv_priv *)l->priv;
    if (!(next->ops->absorbable_as & BN_ABSORB_MAXPOOL) || !l->out_grad || !next->out_grad) return 0;
    pool_priv *pp = (pool_priv *)next->priv;
    if (pp->size != 2 || pp->stride != 2 || pp->pad != 0 || pp->oh < 1 || pp->ow < 1) return 0;
    if (!pp->dev_mask && bn_device_alloc((void **)&pp->dev_mask, next->out->capacity) != BN_OK) {
        pp->dev_mask = NULL;
        return 0; /* the passes stay apart */
    }
    c->pool_after = next;
    return BN_FUSED_FORWARD | BN_FUSED_NO_IN | BN_FUSED_BACKWARD | BN_FUSED_NO_IN_GRAD;
}

/* Who runs pass `pass` of the plan: one of blobnet's families, cuDNN's graph API ("graph engN";
 * the engine's knobs are in the kernel cache), or cuDNN's legacy algorithm `legacy`. */
static const char *pass_name(const conv_plan *pl, int pass, const char *legacy, char *buf, size_t cap)
{
    switch (pl->by[pass]) {
    case BY_DIRECT: return "blobnet direct";
    case BY_IGEMM: return "blobnet igemm";
    case BY_ROWS: return "blobnet rows";
    case BY_TENSOR: return "blobnet tensor";
    case BY_ARGMAX: return "blobnet argmax";
    default: break;
    }
    if (!pl->cg[pass]) return legacy;
    const char *name = bn_cg_name(pl->cg[pass]), *space = strchr(name, ' ');
    snprintf(buf, cap, "graph %.*s", space ? (int)(space - name) : (int)strlen(name), name);
    return buf;
}

extern "C" void bn_conv2d_gpu_describe(const bn_layer *l, char *buf, size_t cap)
{
    const conv_priv *c = (const conv_priv *)l->priv;
    size_t len = 0;
    if (cap) buf[0] = '\0';
    int plans = c->gpu ? c->gpu->num_plans : 0;
    for (int i = 0; i < plans && len < cap; i++) {
        const conv_plan *pl = &c->gpu->plans[i];
        /* An own-only plan (bf16's FP32 copies) is told where the BF16 plan runs on it. */
        if (pl->own_only && (!pl->own_ok || !bn_conv_bf16_runs_fp32(c->bf16, pl->n))) continue;
        char names[3][48];
        const char *fwd = pass_name(pl, 0, bn_cudnn_algo_name(pl->fwd), names[0], sizeof names[0]);
        const char *data =
            pl->with_data ? pass_name(pl, 1, bn_cudnn_algo_name(pl->bwd_data), names[1], sizeof names[1]) : "-";
        const char *filter = pass_name(pl, 2, bn_cudnn_algo_name(pl->bwd_filter), names[2], sizeof names[2]);
        int w = snprintf(buf + len, cap - len, "%sn=%d: fwd %s, bwd_data %s, bwd_filter %s", len ? "; " : "", pl->n,
                         fwd, data, filter);
        if (w < 0) break;
        len += (size_t)w;
    }
    if (len < cap) bn_conv_bf16_describe(c->bf16, buf, len, cap);
}
