/* conv_bf16.cu - conv2d under --precision bf16 (conv_bf16.h): cuDNN's convolutions on BF16
 * tensors and filters with FP32 accumulation (graph-API engines, conv_graph.h, else the legacy
 * algorithms with the descriptor's compute type FLOAT and tensor-op math), or blobnet's FP32
 * kernels on FP32 copies; the bias and its gradient, in cuDNN's layouts, by conv_bias.h.
 *
 * Only algorithms that sum products directly are taken: the FFT and Winograd transforms add
 * their own rounding (1.4e-3 relative on LeNet's conv1 in FP32, conv2d.cu) on top of BF16's, and
 * the products' accuracy should be BF16's inputs', nothing worse. The graph API's engines with
 * reduced-precision sums are refused too; the legacy API cannot say which of its algorithms
 * have them (its BF16 filter gradients measured up to 2.9% of their scale off FP32 on an H200,
 * against 0.4-0.6% for the graph engines), so it serves only passes the graph API cannot. The
 * bias is added to the output cuDNN wrote (one more BF16 rounding) from the FP32 master copy,
 * and its gradient summed in FP32 in a fixed order (conv_bias.h).
 *
 * This file holds the layer's BF16 state and its plans: per batch size, each layout's engines
 * (conv_graph.h) or legacy algorithms (conv_legacy.h), and the layout, timed through the chooser
 * (gpu/chooser.h). conv_bf16_passes.cu runs a plan's passes in its layout. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conv2d.h"
#include "conv_bf16.h"
#include "conv_bf16_state.cuh"
#include "conv_bias.h"
#include "conv_cudnn.cuh"
#include "conv_graph.h"
#include "conv_legacy.h"
#include "core/device.h"
#include "gpu/bf16.cuh"
#include "gpu/bf16.h"
#include "gpu/chooser.h"
#include "gpu/cuda_check.h"
#include "gpu/typed.cuh"

enum { WEIGHT, BIAS };

static const char *const layout_names[LAYOUTS] = {"nchw", "nhwc", "fp32 copies"};

/* The layout every plan from now on must use (bn_conv_bf16_force_layout). */
static int forced_layout = BN_CONV_BF16_EITHER;
/* Whether plans may take cuDNN's graph API (bn_conv_bf16_force_legacy). */
static bool use_graph = true;

extern "C" void bn_conv_bf16_force_legacy(int legacy)
{
    use_graph = !legacy;
}

extern "C" void bn_conv_bf16_force_layout(int layout)
{
    forced_layout = layout;
}

static void release_plan(bf16_plan *p)
{
    for (int L = 0; L < LAYOUTS; L++) {
        if (p->x[L]) cudnnDestroyTensorDescriptor(p->x[L]);
        if (p->y[L]) cudnnDestroyTensorDescriptor(p->y[L]);
        for (int i = 0; i < BN_CG_PASSES; i++) bn_cg_free(&p->g[L][i]);
    }
}

extern "C" void bn_conv_bf16_release(conv_bf16 **state)
{
    conv_bf16 *s = *state;
    if (!s) return;
    for (int L = 0; L < CUDNN_LAYOUTS; L++)
        if (s->w_desc[L]) cudnnDestroyFilterDescriptor(s->w_desc[L]);
    bn_device_free(s->x32);
    bn_device_free(s->dx32);
    bn_device_free(s->y32);
    if (s->conv_desc) cudnnDestroyConvolutionDescriptor(s->conv_desc);
    bn_device_free(s->dw);
    bn_device_free(s->wt);
    bn_device_free(s->xt);
    bn_device_free(s->dxt);
    bn_device_free(s->yt);
    bn_overlap_destroy(&s->side);
    bn_device_free(s->bias_parts);
    for (int i = 0; i < s->num_plans; i++) release_plan(&s->plans[i]);
    free(s->plans);
    free(s);
    *state = NULL;
}

static const cudnnTensorFormat_t formats[CUDNN_LAYOUTS] = {CUDNN_TENSOR_NCHW, CUDNN_TENSOR_NHWC};

/* c rounded up to a multiple of 8. */
static int pad8(int c)
{
    return (c + 7) / 8 * 8;
}

/* Elements of the input as NHWC with its channels padded to s->cp, at the batch the blob holds at
 * most: the size of xt and of dxt. */
static size_t nhwc_in_count(const bn_layer *l, const conv_priv *c, const conv_bf16 *s)
{
    return l->in->capacity / (size_t)c->g.c * s->cp;
}

static bn_status describe_layer(const bn_layer *l, const conv_priv *c, conv_bf16 *s)
{
    s->layer = (bn_layer *)l;
    s->channels = c->g.c;
    s->filters = c->filters;
    s->cp = pad8(c->g.c);
    s->kp = pad8(c->filters);
    for (int L = 0; L < CUDNN_LAYOUTS; L++) {
        BN_CUDNN(cudnnCreateFilterDescriptor(&s->w_desc[L]));
        BN_CUDNN(cudnnSetFilter4dDescriptor(s->w_desc[L], CUDNN_DATA_BFLOAT16, formats[L],
                                            L == NHWC ? s->kp : c->filters, L == NHWC ? s->cp : c->g.c, c->size,
                                            c->size));
    }
    BN_CUDNN(cudnnCreateConvolutionDescriptor(&s->conv_desc));
    BN_CUDNN(cudnnSetConvolution2dDescriptor(s->conv_desc, c->pad, c->pad, c->stride, c->stride, 1, 1,
                                             CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    BN_CUDNN(cudnnSetConvolutionMathType(s->conv_desc, CUDNN_TENSOR_OP_MATH));
    /* The NHWC scratch at the padded counts; the filter copy's padding filters stay zero (only
     * the first c->filters are ever written), its padding channels are written as zeros. */
    const size_t weights = (size_t)s->kp * s->cp * c->size * c->size;
    const size_t in = nhwc_in_count(l, c, s), out = l->out->capacity / (size_t)c->filters * s->kp;
    BN_TRY(bn_device_alloc((void **)&s->dw, weights * sizeof(__nv_bfloat16)));
    BN_TRY(bn_device_alloc((void **)&s->wt, weights * sizeof(__nv_bfloat16)));
    BN_TRY(bn_device_zero(s->wt, weights * sizeof(__nv_bfloat16)));
    BN_TRY(bn_device_alloc((void **)&s->xt, in * sizeof(__nv_bfloat16)));
    BN_TRY(bn_device_alloc((void **)&s->yt, out * sizeof(__nv_bfloat16)));
    BN_TRY(bn_overlap_create(&s->side));
    return bn_device_alloc((void **)&s->bias_parts, (size_t)c->filters * BN_CONV_BIAS_PARTS * sizeof(float));
}

/* cuDNN's legacy algorithms for the passes in layout L that have no graph-API plan, at the
 * plan's batch size (conv_legacy.h: measured, or by its heuristics in a deterministic context;
 * always summing products directly), their workspace added to *need. *missing: NULL, or the
 * pass for which cuDNN offers nothing usable in this layout. */
static bn_status choose_algos(bn_ctx *ctx, const conv_bf16 *s, bf16_plan *plan, int L, size_t *need,
                              const char **missing)
{
    static const char *const pass_names[BN_CG_PASSES] = {"forward", "backward-data", "backward-filter"};
    /* Forward, filter, then data, each measured (or looked up) in turn. */
    static const int passes[BN_CG_PASSES] = {PASS_FWD, PASS_FILTER, PASS_DATA};
    bf16_algos *a = &plan->algos[L];
    *missing = NULL;
    a->fwd = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM;
    a->filter = CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1;
    a->data = CUDNN_CONVOLUTION_BWD_DATA_ALGO_1;
    for (int i = 0; i < BN_CG_PASSES; i++) {
        const int pass = passes[i];
        if (plan->g[L][pass] || (pass == PASS_DATA && !plan->with_data)) continue;
        bn_legacy_algo got;
        int found = 0;
        BN_TRY(bn_conv_legacy_choose(ctx, pass, BN_LEGACY_AS_CONTEXT, BN_LEGACY_DIRECT_SUMS, plan->x[L], s->w_desc[L],
                                     s->conv_desc, plan->y[L], &got, &found));
        if (!found) {
            *missing = pass_names[pass];
            return BN_OK;
        }
        if (got.memory > *need) *need = got.memory;
        if (pass == PASS_FWD) {
            a->fwd = (cudnnConvolutionFwdAlgo_t)got.algo;
        } else if (pass == PASS_FILTER) {
            a->filter = (cudnnConvolutionBwdFilterAlgo_t)got.algo;
            plan->legacy_filter_workspace[L] = got.memory;
        } else {
            a->data = (cudnnConvolutionBwdDataAlgo_t)got.algo;
        }
    }
    plan->usable[L] = 1;
    return BN_OK;
}

/* Buffers of the plan's sizes that stand in for the blobs while the layouts are timed. */
typedef struct stand_ins {
    __nv_bfloat16 *x, *y, *dx;
    float *dw, *db;
} stand_ins;

static void free_stand_ins(stand_ins *t)
{
    bn_device_free(t->x);
    bn_device_free(t->y);
    bn_device_free(t->dx);
    bn_device_free(t->dw);
    bn_device_free(t->db);
}

/* x, dx and y serve both layouts, so they hold the NHWC copies' padded counts. */
static bn_status alloc_stand_ins(const conv_priv *c, const conv_bf16 *s, int n, stand_ins *t)
{
    const size_t in = (size_t)n * s->cp * c->g.h * c->g.w * sizeof(__nv_bfloat16);
    const size_t out = (size_t)n * s->kp * c->g.oh * c->g.ow * sizeof(__nv_bfloat16);
    const size_t weights = (size_t)c->filters * c->g.c * c->size * c->size * sizeof(float);
    BN_TRY(bn_device_alloc((void **)&t->x, in));
    BN_TRY(bn_device_alloc((void **)&t->y, out));
    BN_TRY(bn_device_alloc((void **)&t->dx, in));
    BN_TRY(bn_device_alloc((void **)&t->dw, weights));
    BN_TRY(bn_device_alloc((void **)&t->db, (size_t)c->filters * sizeof(float)));
    BN_TRY(bn_device_zero(t->db, (size_t)c->filters * sizeof(float)));
    BN_TRY(bn_device_zero(t->x, in));
    BN_TRY(bn_device_zero(t->y, out));
    BN_TRY(bn_device_zero(t->dx, in));
    return bn_device_zero(t->dw, weights);
}

/* One forward and backward pass in layout L on the stand-ins (the output read back as its own
 * gradient), the bias left out in cuDNN's layouts (the same in both) and in by the F32 layout's
 * fused kernels (a little more work there, never less). */
static bn_status pass_pair(const conv_priv *c, conv_bf16 *s, const bf16_plan *plan, int L, bn_ctx *ctx,
                           const stand_ins *t, const __nv_bfloat16 *w)
{
    BN_TRY(bn_conv_bf16_run_forward(c, s, plan, L, ctx, t->x, w, t->y));
    return bn_conv_bf16_run_backward(c, s, plan, L, ctx, t->x, w, t->y, t->dw, t->db, plan->with_data ? t->dx : NULL,
                                     0);
}

/* The chooser's view of the layouts while they are timed: pass_pair's arguments. */
typedef struct trial {
    const conv_priv *c;
    conv_bf16 *s;
    const bf16_plan *plan;
    bn_ctx *ctx;
    const stand_ins *t;
    const __nv_bfloat16 *w;
} trial;

static bn_status run_trial(void *env, int L, int warm, int *ok)
{
    const trial *t = (const trial *)env;
    *ok = 1;
    return pass_pair(t->c, t->s, t->plan, L, t->ctx, t->t, t->w);
}

/* After 2 pass pairs to warm up, the least of 3 means of 4, as conv_choice.cu times FP32's kernels. */
static const bn_chooser_timing TIMING = {2, 3, 4};

/* plan->ms[L] for each usable layout, measured alike on zeroed stand-ins (values do not change
 * the kernels' time), and plan->layout the fastest of them: on equal times the layout it held
 * before timing, else the first in LAYOUTS order (the fastest alone, no tie fraction). */
static bn_status time_layouts(const conv_priv *c, conv_bf16 *s, bf16_plan *plan, bn_ctx *ctx,
                              const __nv_bfloat16 *w, const stand_ins *t)
{
    int order[LAYOUTS], count = 0;
    bool usable[LAYOUTS];
    order[count++] = plan->layout;
    for (int L = 0; L < LAYOUTS; L++) {
        usable[L] = plan->usable[L] != 0;
        if (L != plan->layout) order[count++] = L;
    }
    trial tr = {c, s, plan, ctx, t, w};
    const bn_candidates cands = {LAYOUTS, layout_names, usable, order, count, run_trial, &tr, -1, NULL, NULL};
    const bn_chooser chooser = {TIMING, 0.0f, NULL, NULL};
    float ms[LAYOUTS];
    int pick = -1;
    BN_TRY(bn_chooser_timed(&chooser, &cands, ms, &pick));
    for (int L = 0; L < LAYOUTS; L++)
        if (usable[L]) plan->ms[L] = ms[L];
    if (pick >= 0) plan->layout = pick;
    return BN_OK;
}

static bn_status tensor_desc(cudnnTensorDescriptor_t *d, int L, int n, int c, int h, int w)
{
    BN_CUDNN(cudnnCreateTensorDescriptor(d));
    BN_CUDNN(cudnnSetTensor4dDescriptor(*d, formats[L], CUDNN_DATA_BFLOAT16, n, c, h, w));
    return BN_OK;
}

/* t's align for blob b's data (elem bytes each) when b itself is what the pass reads or writes,
 * 16 when it is the layer's scratch. */
static void align_to(bn_cg_tensor *t, const bn_blob *b, size_t elem, bool blob_itself)
{
    bn_cg_align(t, blob_itself ? (uintptr_t)(b->offset * elem) : 0);
}

/* The passes of layout L that cuDNN's graph API has an engine for (conv_graph.h), each chosen
 * (timed on the stand-ins t, or from the kernel cache) into plan->g[L]; the filter pass writes
 * BF16 scratch (filter_pass). */
static bn_status choose_graph(const bn_layer *l, const conv_priv *c, bn_ctx *ctx, conv_bf16 *s, bf16_plan *plan,
                              int L, const stand_ins *t)
{
    const int n = plan->n, rs = c->size * c->size, in_hw = c->g.h * c->g.w, out_hw = c->g.oh * c->g.ow;
    const int cached = bn_chooser_mode(ctx, 0) == BN_CHOOSE_CACHED;
    bn_cg_tensor (*make)(int, int, int, int, cudnnDataType_t) = L == NCHW ? bn_cg_nchw : bn_cg_nhwc;
    /* The channel and filter counts of the layout's tensors, and which tensors are the blobs
     * themselves rather than NHWC scratch copies (as as_nhwc, nhwc_target and filter_krsc decide). */
    const int ch = L == NHWC ? s->cp : c->g.c, filters = L == NHWC ? s->kp : c->filters;
    const bool x_blob = L == NCHW || (s->cp == c->g.c && same_layouts(c->g.c, in_hw));
    const bool y_blob = L == NCHW || (s->kp == c->filters && same_layouts(c->filters, out_hw));
    const bool w_blob = L == NCHW || (!padded(c, s) && same_layouts(c->g.c, rs));

    bn_cg_spec spec;
    memset(&spec, 0, sizeof spec);
    spec.pad = c->pad;
    spec.stride = c->stride;
    spec.x = make(n, ch, c->g.h, c->g.w, CUDNN_DATA_BFLOAT16);
    spec.w = make(filters, ch, c->size, c->size, CUDNN_DATA_BFLOAT16);
    spec.y = make(n, filters, c->g.oh, c->g.ow, CUDNN_DATA_BFLOAT16);
    const bn_cg_spec base = spec;

    spec.pass = BN_CG_FORWARD;
    align_to(&spec.x, l->in, 2, x_blob);
    align_to(&spec.w, l->params[WEIGHT].value16, 2, w_blob);
    align_to(&spec.y, l->out, 2, y_blob);
    BN_TRY(bn_cg_choose(ctx, &spec, cached, t->x, s->wt, t->y, &plan->g[L][PASS_FWD]));

    if (plan->with_data) {
        spec = base;
        spec.pass = BN_CG_DATA;
        align_to(&spec.x, l->in_grad, 2, x_blob);
        align_to(&spec.w, l->params[WEIGHT].value16, 2, w_blob);
        align_to(&spec.y, l->out_grad, 2, y_blob);
        BN_TRY(bn_cg_choose(ctx, &spec, cached, t->dx, s->wt, t->y, &plan->g[L][PASS_DATA]));
    }

    spec = base;
    spec.pass = BN_CG_FILTER;
    align_to(&spec.x, l->in, 2, x_blob);
    align_to(&spec.y, l->out_grad, 2, y_blob);
    return bn_cg_choose(ctx, &spec, cached, t->x, s->dw, t->y, &plan->g[L][PASS_FILTER]);
}

/* plan->usable[F32]: whether blobnet's FP32 kernels serve every pass of the layer at the plan's
 * batch (bn_conv2d_own_plan, which chooses them), with the layer's FP32 copies allocated. A
 * failure there leaves the layout out; an allocation failure is an error. */
static bn_status f32_usable(bn_layer *l, const conv_priv *c, bn_ctx *ctx, conv_bf16 *s, bf16_plan *plan)
{
    int ok = 0;
    if (bn_conv2d_own_plan(l, ctx, &ok) != BN_OK || !ok) return BN_OK;
    if (!s->x32) {
        BN_TRY(bn_device_alloc((void **)&s->x32, l->in->capacity * sizeof(float)));
        BN_TRY(bn_device_alloc((void **)&s->y32, l->out->capacity * sizeof(float)));
        if (l->in_grad) BN_TRY(bn_device_alloc((void **)&s->dx32, l->in->capacity * sizeof(float)));
    }
    if (plan->with_data && !s->dx32) return BN_OK;
    plan->usable[F32] = 1;
    return BN_OK;
}

/* The plan for the current batch size: each allowed layout's descriptors and algorithms, the
 * shared workspace grown to what they need, then the layout. A layout cuDNN cannot serve (no
 * usable algorithm, or an error of its own) leaves the other; the error names both reasons. */
static bn_status make_plan(bn_layer *l, bn_ctx *ctx, conv_bf16 *s, bf16_plan *plan)
{
    const conv_priv *c = (const conv_priv *)l->priv;
    plan->n = l->in->n;
    plan->with_data = l->in_grad != NULL;
    /* Forcing the FP32 copies leaves cuDNN's layouts to the shapes they do not serve. */
    const bool either = forced_layout == BN_CONV_BF16_EITHER || forced_layout == BN_CONV_BF16_FP32;
    const int allowed[CUDNN_LAYOUTS] = {either || forced_layout == BN_CONV_BF16_NCHW,
                                        either || forced_layout == BN_CONV_BF16_NHWC};
    char why_not[CUDNN_LAYOUTS][256] = {"it is not allowed (bn_conv_bf16_force_layout)",
                                        "it is not allowed (bn_conv_bf16_force_layout)"};
    size_t need = 0;
    stand_ins t;
    memset(&t, 0, sizeof t);
    bn_status st = alloc_stand_ins(c, s, plan->n, &t);
    for (int L = 0; L < CUDNN_LAYOUTS && st == BN_OK; L++) {
        st = tensor_desc(&plan->x[L], L, plan->n, L == NHWC ? s->cp : c->g.c, c->g.h, c->g.w);
        if (st == BN_OK) st = tensor_desc(&plan->y[L], L, plan->n, L == NHWC ? s->kp : c->filters, c->g.oh, c->g.ow);
        if (st != BN_OK || !allowed[L]) continue;
        const char *missing = NULL;
        /* A graph-API failure leaves the layout to the legacy algorithms. */
        if (use_graph && choose_graph(l, c, ctx, s, plan, L, &t) != BN_OK)
            for (int i = 0; i < BN_CG_PASSES; i++) bn_cg_free(&plan->g[L][i]);
        if (choose_algos(ctx, s, plan, L, &need, &missing) != BN_OK)
            snprintf(why_not[L], sizeof why_not[L], "%s", bn_last_error());
        else if (missing)
            snprintf(why_not[L], sizeof why_not[L], "cuDNN offers no usable %s algorithm", missing);
    }
    /* blobnet's FP32 kernels on FP32 copies: a timed candidate (never in a deterministic
     * context, unless forced), where they serve every pass. */
    const bool try_f32 = c->engine == BN_CONV_ENGINE_AUTO &&
                         (forced_layout == BN_CONV_BF16_FP32 ||
                          (forced_layout == BN_CONV_BF16_EITHER && !ctx->deterministic));
    if (st == BN_OK && try_f32) st = f32_usable(l, c, ctx, s, plan);
    const bool forced_f32 = forced_layout == BN_CONV_BF16_FP32 && plan->usable[F32];
    if (st == BN_OK && !plan->usable[NCHW] && !plan->usable[NHWC] && !plan->usable[F32])
        st = bn_error(BN_ERR_DEVICE, "layer %s: no BF16 convolution for this shape: not in NCHW, as %s; not in "
                      "NHWC, as %s; and blobnet's FP32 kernels cannot run all its passes", l->name, why_not[NCHW],
                      why_not[NHWC]);
    if (st == BN_OK) st = bn_ctx_reserve_workspace(ctx, need);
    /* The filter pass may run on the side stream, on a workspace of its own; in NHWC the data pass
     * beside it then writes the input gradient into scratch of its own, made while a plan may use it
     * (timed or chosen). */
    for (int L = 0; L < CUDNN_LAYOUTS && st == BN_OK && ctx->side_stream && plan->with_data; L++)
        if (plan->usable[L]) st = bn_ctx_reserve_side_workspace(ctx, filter_workspace(plan, L));
    if (st == BN_OK && ctx->side_stream && plan->with_data && plan->usable[NHWC] && !s->dxt && nhwc_dx_apart(c, s))
        st = bn_device_alloc((void **)&s->dxt, nhwc_in_count(l, c, s) * sizeof(__nv_bfloat16));
    if (st == BN_OK) plan->layout = forced_f32 ? F32 : plan->usable[NHWC] ? NHWC : plan->usable[NCHW] ? NCHW : F32;
    int usable = 0;
    for (int L = 0; L < LAYOUTS; L++) usable += plan->usable[L];
    if (st == BN_OK && usable > 1 && !ctx->deterministic && !forced_f32) {
        const __nv_bfloat16 *w = (const __nv_bfloat16 *)bn_blob_dev16_rd(l->params[WEIGHT].value16);
        st = w ? time_layouts(c, s, plan, ctx, w, &t) : bn_last_status();
    }
    free_stand_ins(&t);
    /* The FP32 copies (three activations' worth of FP32) are kept only for a plan that runs on them,
     * the NHWC input gradient's scratch only for one that runs NHWC. */
    bool f32_runs = plan->layout == F32, nhwc_runs = plan->layout == NHWC;
    for (int i = 0; i < s->num_plans; i++) {
        f32_runs = f32_runs || s->plans[i].layout == F32;
        nhwc_runs = nhwc_runs || s->plans[i].layout == NHWC;
    }
    if (st == BN_OK && !f32_runs && s->x32) {
        bn_device_free(s->x32);
        bn_device_free(s->y32);
        bn_device_free(s->dx32);
        s->x32 = s->y32 = s->dx32 = NULL;
    }
    if (st == BN_OK && !nhwc_runs && s->dxt) {
        bn_device_free(s->dxt);
        s->dxt = NULL;
    }
    return st;
}

/* The BF16 state and the plan for the current batch size, made on first use. */
static bn_status prepare(bn_layer *l, bn_ctx *ctx, conv_bf16 **state, const bf16_plan **plan)
{
    conv_priv *c = (conv_priv *)l->priv;
    if (c->engine == BN_CONV_ENGINE_BLOBNET)
        return bn_error(BN_ERR_USAGE, "layer %s: engine = blobnet has no BF16 kernels; use engine = auto or cudnn "
                        "under --precision bf16", l->name);
    if (!l->params[WEIGHT].value16)
        return bn_error(BN_ERR_INTERNAL, "layer %s: its weight has no BF16 copy under --precision bf16", l->name);
    if (!c->bf16) {
        c->bf16 = (conv_bf16 *)calloc(1, sizeof *c->bf16);
        if (!c->bf16) return bn_error(BN_ERR_NOMEM, "layer %s: out of host memory", l->name);
        bn_status st = describe_layer(l, c, c->bf16);
        if (st != BN_OK) {
            bn_conv_bf16_release(&c->bf16);
            return st;
        }
    }
    conv_bf16 *s = c->bf16;
    *state = s;
    for (int i = 0; i < s->num_plans; i++)
        if (s->plans[i].n == l->in->n) {
            *plan = &s->plans[i];
            return BN_OK;
        }
    bf16_plan made;
    memset(&made, 0, sizeof made);
    bn_status st = make_plan(l, ctx, s, &made);
    bf16_plan *grown = NULL;
    if (st == BN_OK) {
        grown = (bf16_plan *)realloc(s->plans, (size_t)(s->num_plans + 1) * sizeof *grown);
        if (!grown) st = bn_error(BN_ERR_NOMEM, "layer %s: out of host memory", l->name);
    }
    if (st != BN_OK) {
        release_plan(&made);
        return st;
    }
    s->plans = grown;
    s->plans[s->num_plans] = made;
    *plan = &s->plans[s->num_plans++];
    return BN_OK;
}

extern "C" bn_status bn_conv_bf16_forward(bn_layer *l, const bn_pass *p, int *relu_done)
{
    *relu_done = 0;
    bn_ctx *ctx = p->ctx;
    const conv_priv *c = (const conv_priv *)l->priv;
    conv_bf16 *s = NULL;
    const bf16_plan *plan = NULL;
    BN_TRY(prepare(l, ctx, &s, &plan));
    BN_DEV16_RD(x, l->in);
    BN_DEV16_RD(w, l->params[WEIGHT].value16);
    BN_DEV_RD(b, l->params[BIAS].value);
    BN_DEV16_WR(y, l->out);
    BN_TRY(bn_conv_bf16_run_forward(c, s, plan, plan->layout, ctx, x, w, y));
    if (plan->layout == F32) return BN_OK; /* the bias was added by blobnet's kernels */
    /* A fused ReLU's output is written by the bias kernel (after blobnet's FP32 kernels it runs
     * its own pass). */
    __nv_bfloat16 *relu_y = NULL;
    size_t relu_stride = 0;
    if (c->relu_after && !(relu_y = bn_typed_rows_wr<__nv_bfloat16>(c->relu_after->out, &relu_stride)))
        return bn_last_status();
    *relu_done = relu_y != NULL;
    return bn_conv_bias_add_bf16(y, b, l->out->n, c->filters, c->g.oh * c->g.ow, relu_y, relu_stride, ctx);
}

extern "C" bn_status bn_conv_bf16_backward(bn_layer *l, const bn_pass *p)
{
    bn_ctx *ctx = p->ctx;
    const conv_priv *c = (const conv_priv *)l->priv;
    conv_bf16 *s = NULL;
    const bf16_plan *plan = NULL;
    BN_TRY(prepare(l, ctx, &s, &plan));
    BN_DEV16_RD(x, l->in);
    BN_DEV16_RD(dy, l->out_grad);
    BN_DEV16_RD(w, l->params[WEIGHT].value16);
    BN_DEV_WR(dw, l->params[WEIGHT].grad);
    BN_DEV_WR(db, l->params[BIAS].grad);

    /* blobnet's FP32 kernels sum the bias gradient themselves */
    if (plan->layout != F32)
        BN_TRY(bn_conv_bias_grad_bf16(db, dy, l->out_grad->n, c->filters, c->g.oh * c->g.ow, s->bias_parts, ctx));

    __nv_bfloat16 *dx = NULL;
    if (l->in_grad && !(dx = (__nv_bfloat16 *)bn_blob_dev16_wr(l->in_grad))) return bn_last_status();
    return bn_conv_bf16_run_backward(c, s, plan, plan->layout, ctx, x, w, dy, dw, db, dx, p->defer_joins);
}

extern "C" int bn_conv_bf16_runs_fp32(const conv_bf16 *state, int n)
{
    for (int i = 0; state && i < state->num_plans; i++)
        if (state->plans[i].n == n) return state->plans[i].layout == F32;
    return 0;
}

extern "C" size_t bn_conv_bf16_describe(const conv_bf16 *state, char *buf, size_t len, size_t cap)
{
    const int plans = state ? state->num_plans : 0;
    for (int i = 0; i < plans && len < cap; i++) {
        const bf16_plan *pl = &state->plans[i];
        const int L = pl->layout;
        const bf16_algos *a = &pl->algos[L];
        char timed[96] = "", names[BN_CG_PASSES][48];
        if (pl->ms[NCHW] > 0.0f && pl->ms[NHWC] > 0.0f)
            snprintf(timed, sizeof timed, " timed: nchw %.3f ms, nhwc %.3f ms", pl->ms[NCHW], pl->ms[NHWC]);
        if (pl->ms[F32] > 0.0f) {
            const size_t at = strlen(timed);
            snprintf(timed + at, sizeof timed - at, "%s fp32 %.3f ms", at ? "," : " timed:", pl->ms[F32]);
        }
        if (L == F32) { /* the kernels are the FP32 plan's, which bn_conv2d_gpu_describe writes first */
            int w = snprintf(buf + len, cap - len, "%sn=%d: blobnet's FP32 kernels on fp32 copies%s (bf16)",
                             len ? "; " : "", pl->n, timed);
            if (w < 0) break;
            len += (size_t)w;
            continue;
        }
        const char *legacy[BN_CG_PASSES] = {bn_cudnn_algo_name(a->fwd),
                                            pl->with_data ? bn_cudnn_algo_name(a->data) : "-",
                                            bn_cudnn_algo_name(a->filter)};
        for (int i = 0; i < BN_CG_PASSES; i++) {
            const bn_cg_plan *g = pl->g[L][i];
            if (!g) {
                snprintf(names[i], sizeof names[i], "%s", legacy[i]);
                continue;
            }
            /* The engine alone: its knobs are in the kernel cache. */
            const char *name = bn_cg_name(g), *space = strchr(name, ' ');
            snprintf(names[i], sizeof names[i], "graph %.*s", space ? (int)(space - name) : (int)strlen(name), name);
        }
        char layout[64];
        if (L == NHWC && (state->cp != state->channels || state->kp != state->filters))
            snprintf(layout, sizeof layout, "nhwc padded to %dx%d", state->kp, state->cp);
        else
            snprintf(layout, sizeof layout, "%s", layout_names[L]);
        int w = snprintf(buf + len, cap - len, "%sn=%d: fwd %s, bwd_data %s, bwd_filter %s, %s%s (bf16)",
                         len ? "; " : "", pl->n, names[PASS_FWD], names[PASS_DATA], names[PASS_FILTER], layout,
                         timed);
        if (w < 0) break;
        len += (size_t)w;
    }
    return len < cap ? len : cap;
}
