/* conv2d.cu - the conv2d layer on the GPU: forward, backward-data and backward-filter
 * convolutions (cross-correlation, FP32 results), each run either by one of blobnet's kernel
 * families (conv_family.h: bias and its gradient fused) or by cuDNN (the bias and its gradient
 * then by conv_bias.h's kernels). A plan per batch size (conv_plan.cu) says who runs each pass;
 * this file runs the passes from it, holds cuDNN's descriptors and chooses its algorithms.
 *
 * cuDNN's algorithms are measured, or in a deterministic context taken from its heuristics, so
 * that every run picks the same ones (conv_legacy.h). Without ctx->tf32 the results must match
 * the CPU's FP32 sums: the math type is CUDNN_FMA_MATH (CUDNN_DEFAULT_MATH would allow TF32 tensor
 * cores on Ampere and Hopper), and only algorithms that sum products directly with FMA math are
 * taken. The FFT and Winograd ones trade precision for speed (an FFT backward-filter on LeNet's
 * conv1 measured 1.4e-3 relative error on an H200), so they are allowed with tf32 only (blobnet's
 * own Winograd family, conv_wino.h, sums its points' products with FP32 accuracy and is checked
 * against the direct sums to the families' tolerance, so it is offered always); with tf32 the
 * tensor-core family takes one TF32 product per multiply (bn_tensor_plan_make). With tf32 a pass
 * cuDNN runs may also take an engine of cuDNN's graph API (conv_graph.h: every engine with its
 * tile and split choices, TF32 tensor cores included) where one was timed faster than the legacy
 * algorithm; without tf32 the legacy algorithms alone (one graph engine without any note of
 * reduced precision gave a filter gradient 0.7% of its scale off in FP32). All layers share the
 * context's one workspace. Under --precision bf16 (BF16 blobs) every pass goes to conv_bf16.cu
 * instead, which may run blobnet's FP32 families on FP32 copies through bn_conv2d_own_*
 * (own-only plans: blobnet's kernels alone, chosen as conv_plan.cu says). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conv2d_gpu.cuh"
#include "conv_bias.h"
#include "conv_cudnn.cuh"
#include "conv_legacy.h"
#include "core/device.h"
#include "gpu/chooser.h"
#include "gpu/cuda_check.h"
#include "gpu/overlap.h"
#include "gpu/typed.cuh"
#include "layers.h"
#include "pool.h"

extern "C" void bn_conv2d_gpu_release(conv_priv *c)
{
    bn_conv_bf16_release(&c->bf16);
    conv_gpu *g = c->gpu;
    if (!g) return;
    if (g->w_desc) cudnnDestroyFilterDescriptor(g->w_desc);
    if (g->conv_desc) cudnnDestroyConvolutionDescriptor(g->conv_desc);
    bn_device_free(g->bias_parts);
    bn_overlap_destroy(&g->side);
    bn_device_free(g->parts);
    bn_device_free(g->scratch);
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
    BN_TRY(bn_overlap_create(&g->side));
    return bn_device_alloc((void **)&g->bias_parts, (size_t)c->filters * BN_CONV_BIAS_PARTS * sizeof(float));
}

static bn_status none_usable(const bn_layer *l, const char *pass)
{
    return bn_error(BN_ERR_DEVICE, "layer %s: cuDNN offers no usable %s algorithm for this shape", l->name, pass);
}

/* cuDNN's graph-API plan for pass `pass` (BN_CG_*) on the layer's FP32 NCHW tensors at its
 * current batch (conv_graph.h): TF32 products allowed with ctx->tf32 only; the filter pass adds
 * into the gradient as the legacy one does. Timed on scratch buffers of the layer's sizes, or
 * taken from the kernel cache (cached). *out is NULL where cuDNN offers no allowed engine. */
extern "C" bn_status bn_conv_graph_plan(const bn_layer *l, bn_ctx *ctx, int pass, int cached, bn_cg_plan **out)
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
    BN_TRY(bn_conv_graph_plan(l, ctx, pass, 0, &gp));
    const bool taken = gp && (graph_forced || bn_cg_ms(gp) < legacy_ms);
    bn_chooser_say(BN_CONV_VERBOSE, "conv2d %s n=%d %s: cuDNN legacy %.4f ms, graph %s %.4f ms; %s\n", l->name,
                   l->in->n, bn_conv_pass_name(pass), legacy_ms, gp ? bn_cg_name(gp) : "(none)",
                   gp ? bn_cg_ms(gp) : 0.0f, taken ? "graph" : "legacy");
    if (!taken) {
        bn_cg_free(&gp);
        return BN_OK;
    }
    plan->cg[pass] = gp;
    if (bn_cg_workspace(gp) > *need) *need = bn_cg_workspace(gp);
    if (pass == BN_CG_DATA) plan->bwd_data_workspace = bn_cg_workspace(gp);
    if (pass == BN_CG_FILTER) plan->bwd_filter_workspace = bn_cg_workspace(gp);
    return BN_OK;
}

/* cuDNN's legacy algorithm for pass `pass` (conv_legacy.h; without ctx->tf32, one that sums FP32
 * products directly with FMA math, as the CPU does) set in plan, its workspace joining *need; with
 * `graph`, the graph API's plan instead where it was timed faster (maybe_graph). x is the input (or
 * its gradient), y the output (or its gradient). */
static bn_status choose_legacy(const bn_layer *l, bn_ctx *ctx, bool graph, const conv_gpu *g, int pass,
                               cudnnTensorDescriptor_t x, cudnnTensorDescriptor_t y, conv_plan *plan, size_t *need)
{
    const unsigned needs = ctx->tf32 ? 0u : BN_LEGACY_DIRECT_SUMS | BN_LEGACY_FMA_ONLY;
    bn_legacy_algo got;
    int found = 0;
    BN_TRY(bn_conv_legacy_choose(ctx, pass, BN_LEGACY_AS_CONTEXT, needs, x, g->w_desc, g->conv_desc, y, &got,
                                 &found));
    if (!found) return none_usable(l, bn_conv_pass_name(pass));
    if (pass == BN_CG_FORWARD) {
        plan->fwd = (cudnnConvolutionFwdAlgo_t)got.algo;
    } else if (pass == BN_CG_DATA) {
        plan->bwd_data = (cudnnConvolutionBwdDataAlgo_t)got.algo;
        plan->bwd_data_workspace = got.memory;
    } else {
        plan->bwd_filter = (cudnnConvolutionBwdFilterAlgo_t)got.algo;
        plan->bwd_filter_workspace = got.memory;
    }
    if (got.memory > *need) *need = got.memory;
    return graph ? maybe_graph(l, ctx, pass, got.ms, plan, need) : BN_OK;
}

extern "C" bn_status bn_conv_cudnn_algorithms(const bn_layer *l, bn_ctx *ctx, bool graph, const conv_gpu *g,
                                              cudnnTensorDescriptor_t x, cudnnTensorDescriptor_t y, const bool ask[3],
                                              conv_plan *plan, size_t *need)
{
    for (int pass = BN_CG_FORWARD; pass < BN_CG_PASSES; pass++)
        if (ask[pass]) BN_TRY(choose_legacy(l, ctx, graph, g, pass, x, y, plan, need));
    return BN_OK;
}

/* Whether the forward pass by `by` can write a 2x2 max pooling's output instead of its own
 * (conv_pooled.h): a family's where it says its buffers allow. */
extern "C" bool bn_conv_writes_pooled(const conv_plan *plan, int by)
{
    if (by == BY_CUDNN) return false;
    const bn_conv_family *f = runner_family(by);
    return f->writes_pooled && f->writes_pooled(&plan->fam[by - 1]);
}

/* The family's pass `pass` on the given buffers. */
static bn_status family_pass(int by, const conv_plan *plan, int pass, void *stream, const bn_conv_io *io)
{
    return runner_family(by)->run(&plan->fam[by - 1], &plan->shape, pass, stream, io);
}

/* The forward and data passes' scratch (NULL where the plan needs none). */
static void *scratch_of(const conv_gpu *g, const conv_plan *plan)
{
    return plan->scratch_bytes ? g->scratch : NULL;
}

/* Whether runner `by` writes a fused ReLU's output (pass BN_CONV_FORWARD) or input gradient
 * (BN_CONV_DATA) with its own: cuDNN's forward pass (its bias kernel) and the families that say
 * so (conv_relu.h). */
extern "C" bool bn_conv_takes_relu(int by, int pass)
{
    if (by == BY_CUDNN) return pass == BN_CONV_FORWARD;
    return (runner_family(by)->takes_relu >> pass) & 1u;
}

/* The three passes on the given buffers, by blobnet's kernels (own) or by cuDNN's chosen
 * algorithm with its bias operation, which blobnet's kernels fuse. Used by the layer's passes
 * and by the timing that chooses between the two. The forward pass writes y, or with `pooled`
 * (bn_conv_writes_pooled) the pooling's output and mask instead; where relu_y is not NULL (only
 * for a runner that bn_conv_takes_relu), the fused ReLU's output too (its images relu_stride
 * elements apart, more than y's where it is a slice of a channel join's output). */
extern "C" bn_status bn_conv_forward_pass(int by, const conv_gpu *g, const conv_plan *plan, bn_ctx *ctx,
                                          cudnnTensorDescriptor_t xd, cudnnTensorDescriptor_t yd, const float *x,
                                          const float *w, const float *b, float *y, const bn_pooled_out *pooled,
                                          float *relu_y, size_t relu_stride)
{
    const bn_conv_shape *s = &plan->shape;
    if (pooled && !bn_conv_writes_pooled(plan, by))
        return bn_error(BN_ERR_INTERNAL, "this forward pass cannot write a pooled output");
    if (relu_y && !bn_conv_takes_relu(by, BN_CONV_FORWARD))
        return bn_error(BN_ERR_INTERNAL, "this forward pass cannot write a ReLU's output");
    if (by != BY_CUDNN) {
        bn_conv_io io = {};
        io.x = x, io.w = w, io.b = b, io.y = y, io.pooled_out = pooled, io.scratch = scratch_of(g, plan);
        io.relu = (bn_conv_relu){relu_y, NULL, relu_stride};
        return family_pass(by, plan, BN_CONV_FORWARD, ctx->stream, &io);
    }
    cudnnHandle_t h = (cudnnHandle_t)ctx->cudnn;
    const float one = 1.0f, zero = 0.0f;
    if (plan->cg[0])
        BN_TRY(bn_cg_run(ctx, plan->cg[0], x, w, y));
    else
        BN_CUDNN(cudnnConvolutionForward(h, &one, xd, x, g->w_desc, w, g->conv_desc, plan->fwd, ctx->workspace,
                                         ctx->workspace_size, &zero, yd, y));
    return bn_conv_bias_add_f32(y, b, s->n, s->filters, s->g.oh * s->g.ow, relu_y, relu_stride, ctx);
}

/* Whether pass 1 (data) or 2 (filter) by `by` can read dy through a max pooling
 * (conv_pooled.h): a family's where it says so (the argmax filter pass reads nothing else). */
extern "C" bool bn_conv_reads_pooled(const conv_plan *plan, int by, int pass)
{
    if (by == BY_CUDNN) return false;
    const bn_conv_family *f = runner_family(by);
    return f->reads_pooled && f->reads_pooled(&plan->fam[by - 1], pass);
}

/* dx is overwritten. dy is read through `pooled` when it is not NULL (bn_conv_reads_pooled).
 * Where relu is not NULL (only for a runner that bn_conv_takes_relu), the fused ReLU's input
 * gradient is written too. `beside`: the filter pass runs beside it by the same family
 * (bn_conv_io.beside). */
extern "C" bn_status bn_conv_data_pass(int by, const conv_gpu *g, const conv_plan *plan, bn_ctx *ctx,
                                       cudnnTensorDescriptor_t dxd, cudnnTensorDescriptor_t dyd, const float *dy,
                                       const bn_pooled_dy *pooled, const float *w, float *dx, const bn_conv_relu *relu,
                                       bool beside)
{
    if (pooled && !bn_conv_reads_pooled(plan, by, 1))
        return bn_error(BN_ERR_INTERNAL, "this backward-data pass cannot read dy through a pooling");
    if (relu && !bn_conv_takes_relu(by, BN_CONV_DATA))
        return bn_error(BN_ERR_INTERNAL, "this backward-data pass cannot write a ReLU's input gradient");
    if (by != BY_CUDNN) {
        bn_conv_io io = {};
        io.dy = dy, io.pooled_dy = pooled, io.w = w, io.dx = dx, io.scratch = scratch_of(g, plan);
        io.beside = beside;
        if (relu) io.relu = *relu;
        return family_pass(by, plan, BN_CONV_DATA, ctx->stream, &io);
    }
    const float one = 1.0f, zero = 0.0f;
    if (plan->cg[1]) return bn_cg_run(ctx, plan->cg[1], dx, w, dy);
    BN_CUDNN(cudnnConvolutionBackwardData((cudnnHandle_t)ctx->cudnn, &one, g->w_desc, w, dyd, dy, g->conv_desc,
                                          plan->bwd_data, ctx->workspace, ctx->workspace_size, &zero, dxd, dx));
    return BN_OK;
}

/* dw and db accumulate (beta = 1 for cuDNN), as the layer contract asks. blobnet's kernels run
 * on `stream` with their partial sums in `parts`; cuDNN's handle is bound to the context stream
 * and uses the context's workspace. `beside`: the data pass runs beside it by the same family. */
extern "C" bn_status bn_conv_filter_pass(int by, const conv_gpu *g, const conv_plan *plan, bn_ctx *ctx,
                                         cudaStream_t stream, cudnnTensorDescriptor_t xd, cudnnTensorDescriptor_t dyd,
                                         const float *x, const float *dy, const bn_pooled_dy *pooled, float *dw,
                                         float *db, float *parts, bool beside)
{
    const bn_conv_shape *s = &plan->shape;
    if (pooled && !bn_conv_reads_pooled(plan, by, 2))
        return bn_error(BN_ERR_INTERNAL, "this backward-filter pass cannot read dy through a pooling");
    if (by != BY_CUDNN) {
        bn_conv_io io = {};
        io.x = x, io.dy = dy, io.pooled_dy = pooled, io.dw = dw, io.db = db, io.parts = parts;
        io.beside = beside;
        return family_pass(by, plan, BN_CONV_FILTER, stream, &io);
    }
    cudnnHandle_t h = (cudnnHandle_t)ctx->cudnn;
    const float one = 1.0f;
    BN_TRY(bn_conv_bias_grad_f32(db, dy, s->n, s->filters, s->g.oh * s->g.ow, g->bias_parts, ctx));
    if (plan->cg[2]) return bn_cg_run(ctx, plan->cg[2], x, dw, dy);
    BN_CUDNN(cudnnConvolutionBackwardFilter(h, &one, xd, x, dyd, dy, g->conv_desc, plan->bwd_filter, ctx->workspace,
                                            ctx->workspace_size, &one, g->w_desc, dw));
    return BN_OK;
}

/* Whether the backward pass runs the filter pass (by `filter`) on the side stream beside the data
 * pass. blobnet's filter passes write only the layer's own partial sums, so they always can. cuDNN's
 * runs there with the context turned to the side stream (bn_ctx_on_side: its handle and the side
 * workspace, a lane's own on a lane), and only where the side workspace holds what the pass needs
 * (bn_conv_reserve_beside grew it when the plan was made); else it runs on the stream before the
 * data pass. */
static bool overlapped(const conv_plan *plan, const bn_ctx *ctx, int filter)
{
    if (!ctx->side_stream) return false;
    return filter != BY_CUDNN || plan->bwd_filter_workspace <= ctx->side_workspace_size;
}

extern "C" bn_status bn_conv_reserve_beside(const conv_plan *plan, bn_ctx *ctx)
{
    if (plan->by[2] != BY_CUDNN || !plan->with_data || !ctx->side_stream) return BN_OK;
    return bn_ctx_reserve_side_workspace(ctx, plan->bwd_filter_workspace);
}

/* The two gradients of bn_conv_both_passes, for bn_overlap_run. */
typedef struct gradients {
    int filter, data;
    const conv_gpu *g;
    const conv_plan *plan;
    bn_ctx *ctx;
    cudnnTensorDescriptor_t xd, dxd, dyd;
    const float *x, *dy;
    const bn_pooled_dy *pooled, *filter_pooled;
    const float *w;
    float *dw, *db, *dx;
    const bn_conv_relu *relu;
    float *parts;
    bool beside; /* the two passes run side by side on one family (bn_conv_io.beside) */
} gradients;

/* The filter pass on `stream`. */
static bn_status filter_on(void *env, void *stream)
{
    const gradients *t = (const gradients *)env;
    return bn_conv_filter_pass(t->filter, t->g, t->plan, t->ctx, (cudaStream_t)stream, t->xd, t->dyd, t->x, t->dy,
                               t->filter_pooled, t->dw, t->db, t->parts, t->beside);
}

/* The filter pass on the stream the context is turned to (bn_ctx_on_side). */
static bn_status filter_turned(void *env)
{
    const gradients *t = (const gradients *)env;
    return filter_on(env, t->ctx->stream);
}

/* The filter pass on the side stream (`stream`): cuDNN's with the context turned there, so that
 * its handle, workspace and bias-gradient kernel go there too. */
static bn_status filter_beside(void *env, void *stream)
{
    const gradients *t = (const gradients *)env;
    return t->filter == BY_CUDNN ? bn_ctx_on_side(t->ctx, filter_turned, env) : filter_on(env, stream);
}

/* The data pass on the context stream. */
static bn_status data_here(void *env)
{
    const gradients *t = (const gradients *)env;
    return bn_conv_data_pass(t->data, t->g, t->plan, t->ctx, t->dxd, t->dyd, t->dy, t->pooled, t->w, t->dx,
                             t->relu, t->beside);
}

/* Both gradients, the filter pass by `filter` (reading dy through filter_pooled when that is
 * not NULL) and the data pass by `data` (through pooled). When they overlap
 * (see overlapped) the filter pass runs on the side stream beside the data pass (neither
 * depends on the other), joined back before returning, or with `defer` left for the net to
 * join at the end of its backward pass (bn_overlap_run), so that it also runs beside the layers
 * below; else the filter pass runs first. */
extern "C" bn_status bn_conv_both_passes(int filter, int data, const conv_gpu *g, const conv_plan *plan,
                                         bn_ctx *ctx, cudnnTensorDescriptor_t xd, cudnnTensorDescriptor_t dxd,
                                         cudnnTensorDescriptor_t dyd, const float *x, const float *dy,
                                         const bn_pooled_dy *pooled, const bn_pooled_dy *filter_pooled,
                                         const float *w, float *dw, float *db, float *dx, const bn_conv_relu *relu,
                                         float *parts, bool defer)
{
    const bool side = overlapped(plan, ctx, filter);
    gradients both = {filter, data, g, plan, ctx, xd, dxd, dyd, x, dy, pooled, filter_pooled, w, dw, db, dx, relu,
                      parts, side && filter == data};
    if (!side) {
        BN_TRY(filter_on(&both, ctx->stream));
        return data_here(&both);
    }
    return bn_overlap_run(ctx, &g->side, defer, filter_beside, data_here, &both);
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
    BN_TRY(bn_conv_make_plan(l, c, ctx, &made));
    conv_plan *grown = (conv_plan *)realloc(g->plans, (size_t)(g->num_plans + 1) * sizeof *grown);
    if (!grown) return bn_error(BN_ERR_NOMEM, "layer %s: out of host memory", l->name);
    g->plans = grown;
    g->plans[g->num_plans] = made;
    *plan = &g->plans[g->num_plans++];
    return BN_OK;
}

/* Every pass may run on a lane once the layer's plans are made: cuDNN's passes, in FP32 as in
 * BF16, take the lane's stream and workspaces from the context (bn_ctx_set_lane). */
extern "C" unsigned bn_conv2d_beside(const bn_layer *l)
{
    const conv_priv *c = (const conv_priv *)l->priv;
    if (bn_blob_is_bf16(l->out)) return c->bf16 ? BN_BESIDE_FORWARD | BN_BESIDE_BACKWARD : 0u;
    if (!c->gpu) return 0;
    for (int i = 0; i < c->gpu->num_plans; i++) {
        const conv_plan *plan = &c->gpu->plans[i];
        if (plan->n == l->in->n && !plan->own_only) return BN_BESIDE_FORWARD | BN_BESIDE_BACKWARD;
    }
    return 0;
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
        int relu_done = 0;
        BN_TRY(bn_conv_bf16_forward(l, p, &relu_done));
        return relu_done ? BN_OK : relu_forward(l, p);
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
        /* A fused ReLU's output is written by cuDNN's bias kernel or the family's epilogue, else
         * by the ReLU's own pass; each honours its stride (a slice of a channel join's output:
         * act_out_slices). */
        float *relu_y = NULL;
        size_t relu_stride = 0;
        if (c->relu_after && bn_conv_takes_relu(plan->by[0], BN_CONV_FORWARD) &&
            !(relu_y = bn_typed_rows_wr<float>(c->relu_after->out, &relu_stride)))
            return bn_last_status();
        BN_TRY(bn_conv_forward_pass(plan->by[0], g, plan, ctx, xd, yd, x, w, b, y, NULL, relu_y, relu_stride));
        return relu_y ? BN_OK : relu_forward(l, p);
    }
    if (!bn_conv_writes_pooled(plan, plan->by[0])) {
        BN_TRY(bn_conv_forward_pass(plan->by[0], g, plan, ctx, xd, yd, x, w, b, y, NULL, NULL, 0));
        return bn_maxpool_forward_gpu(pool, p);
    }
    const pool_priv *pp = (const pool_priv *)pool->priv;
    bn_pooled_out po = {bn_blob_dev_wr(pool->out), pp->dev_mask, pp->oh, pp->ow};
    if (!po.y) return bn_last_status();
    return bn_conv_forward_pass(plan->by[0], g, plan, ctx, xd, yd, x, w, b, y, &po, NULL, 0);
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
    if (plan->by[2] != BY_CUDNN && runner_family(plan->by[2])->needs_pooled) *filter_pooled = pd;
    if (!bn_conv_reads_pooled(plan, plan->by[2], 2) || (l->in_grad && !bn_conv_reads_pooled(plan, plan->by[1], 1)))
        return bn_maxpool_backward_gpu(pool, p);
    *pooled = *filter_pooled = pd;
    return BN_OK;
}

/* The ReLU before the layer whose backward pass this one's does (bn_conv2d_fuse_relu): its own
 * pass, after a data pass that did not write its input gradient. */
static bn_status relu_backward(const bn_layer *l, const bn_pass *p)
{
    bn_layer *relu = ((const conv_priv *)l->priv)->relu_before;
    return relu ? relu->ops->backward_gpu(relu, p) : BN_OK;
}

extern "C" bn_status bn_conv2d_backward_gpu(bn_layer *l, const bn_pass *p)
{
    if (bn_blob_is_bf16(l->out_grad)) {
        BN_TRY(bn_conv_bf16_backward(l, p));
        return relu_backward(l, p);
    }
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
        return bn_conv_filter_pass(plan->by[2], g, plan, ctx, (cudaStream_t)ctx->stream, xd, dyd, x, dy, filter_pooled,
                                   dw, db, g->parts, false);
    BN_DEV_WR(dx, l->in_grad);
    BN_TENSOR_DESC(dxd, l->in_grad);
    /* The ReLU before the layer: its input gradient from the data pass's epilogue, or its own
     * pass after it. */
    const conv_priv *c = (const conv_priv *)l->priv;
    bn_conv_relu relu = {NULL, x, 0};
    const bool in_epilogue = c->relu_before && bn_conv_takes_relu(plan->by[1], BN_CONV_DATA);
    if (in_epilogue && !(relu.out = bn_typed_rows_wr<float>(c->relu_before->in_grad, &relu.image)))
        return bn_last_status();
    BN_TRY(bn_conv_both_passes(plan->by[2], plan->by[1], g, plan, ctx, xd, dxd, dyd, x, dy, pooled, filter_pooled, w,
                               dw, db, dx, in_epilogue ? &relu : NULL, g->parts, p->defer_joins != 0));
    return in_epilogue ? BN_OK : relu_backward(l, p);
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
    return bn_conv_forward_pass(plan->by[0], g, plan, ctx, NULL, NULL, x, w, b, y, NULL, NULL, 0);
}

extern "C" bn_status bn_conv2d_own_backward(bn_layer *l, bn_ctx *ctx, const float *x, const float *dy, float *dx,
                                            float *dw, float *db)
{
    const conv_gpu *g = NULL;
    const conv_plan *plan = NULL;
    BN_TRY(own_plan(l, ctx, &g, &plan));
    BN_DEV_RD(w, l->params[WEIGHT].value);
    if (!dx)
        return bn_conv_filter_pass(plan->by[2], g, plan, ctx, (cudaStream_t)ctx->stream, NULL, NULL, x, dy, NULL, dw,
                                   db, g->parts, false);
    return bn_conv_both_passes(plan->by[2], plan->by[1], g, plan, ctx, NULL, NULL, NULL, x, dy, NULL, NULL, w, dw,
                               db, dx, NULL, g->parts, false);
}

extern "C" int bn_conv2d_fuse_relu(bn_layer *l, bn_layer *relu, int after)
{
    conv_priv *c = (conv_priv *)l->priv;
    if (after) {
        c->relu_after = relu;
        return 1;
    }
    if (bn_blob_is_bf16(l->out)) return 0; /* the BF16 passes take no ReLU before the layer */
    c->relu_before = relu;
    return 1;
}

extern "C" int bn_conv2d_fuse_next(bn_layer *l, bn_layer *next)
{
    conv_priv *c = (conv_priv *)l->priv;
    if (!(next->ops->absorbable_as & BN_ABSORB_MAXPOOL) || !l->out_grad || !next->out_grad) return 0;
    if (bn_blob_is_bf16(l->out)) return 0; /* the pooling epilogues are the FP32 families' */
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
    if (pl->by[pass] != BY_CUDNN) {
        snprintf(buf, cap, "blobnet %s", runner_family(pl->by[pass])->name);
        return buf;
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
