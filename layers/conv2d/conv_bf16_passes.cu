/* conv_bf16_passes.cu - conv2d's passes under --precision bf16 in each of its three layouts
 * (conv_bf16_state.cuh): cuDNN on the blobs' NCHW tensors, cuDNN on NHWC copies (the transposes
 * into and out of them, their padding channels and filters, the filter gradient added back from
 * KRSC), and blobnet's FP32 kernels on FP32 copies (conv2d.h: bn_conv2d_own_*). Each pass runs on
 * its graph-API plan where the plan has one (conv_graph.h), else on its legacy algorithm. In
 * cuDNN's layouts the filter pass runs on the side stream beside the data pass where it can
 * (bn_ctx_on_side), as blobnet's own filter passes do. Which layout and which engines run a
 * plan is conv_bf16.cu's. */
#include "conv_bf16_state.cuh"
#include "gpu/bf16.h"
#include "gpu/code_anchor.cuh"
#include "gpu/cuda_check.h"
#include "gpu/pdl.cuh"

#define THREADS 256

/* dst[b][p][j] = src[b][j][p] for j < c, 0 for c <= j < cp: n images of c channels of hw pixels
 * into NHWC rows of cp channels. One thread per element written. */
static __global__ void to_nhwc_padded(__nv_bfloat16 *__restrict__ dst, const __nv_bfloat16 *__restrict__ src, int c,
                                      int cp, int hw, size_t total)
{
    bn_early_entry(); /* pdl.cuh */
    for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += (size_t)gridDim.x * blockDim.x) {
        const int j = (int)(e % (size_t)cp);
        const size_t rest = e / (size_t)cp, p = rest % (size_t)hw, b = rest / (size_t)hw;
        dst[e] = j < c ? src[(b * c + j) * hw + p] : __float2bfloat16_rn(0.0f);
    }
}

/* dst[b][j][p] = src[b][p][j] for j < c: NHWC rows of cp channels back to n images of c channels,
 * the padding dropped. */
static __global__ void from_nhwc_padded(__nv_bfloat16 *__restrict__ dst, const __nv_bfloat16 *__restrict__ src, int c,
                                        int cp, int hw, size_t total)
{
    bn_early_entry(); /* pdl.cuh */
    for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += (size_t)gridDim.x * blockDim.x) {
        const size_t p = e % (size_t)hw, rest = e / (size_t)hw, j = rest % (size_t)c, b = rest / (size_t)c;
        dst[e] = src[(b * hw + p) * cp + j];
    }
}

static unsigned blocks_for(size_t total)
{
    size_t b = (total + THREADS - 1) / THREADS;
    return (unsigned)(b < 1 ? 1 : b > 4096 ? 4096 : b);
}

/* src (n images of c channels of hw pixels) as NHWC rows of cp channels: itself where the layouts
 * coincide and nothing is padded, else queued into scratch (a transpose, or with padding). */
static bn_status as_nhwc(const __nv_bfloat16 *src, __nv_bfloat16 *scratch, int n, int c, int cp, int hw, bn_ctx *ctx,
                         const __nv_bfloat16 **out)
{
    *out = src;
    if (c == cp && same_layouts(c, hw)) return BN_OK;
    *out = scratch;
    if (c == cp) return bn_gpu_bf16_transpose(scratch, src, n, c, hw, ctx);
    const size_t total = (size_t)n * hw * cp;
    bn_launch_early(to_nhwc_padded, blocks_for(total), THREADS, 0, (cudaStream_t)ctx->stream, scratch, src, c, cp, hw,
                    total);
    BN_CUDA_LAUNCH();
    return BN_OK;
}

/* Where cuDNN writes the NHWC form of dst (rows of cp channels): dst itself where the layouts
 * coincide and nothing is padded, else scratch (then from_nhwc moves it into dst). */
static __nv_bfloat16 *nhwc_target(__nv_bfloat16 *dst, __nv_bfloat16 *scratch, int c, int cp, int hw)
{
    return c == cp && same_layouts(c, hw) ? dst : scratch;
}

static bn_status from_nhwc(__nv_bfloat16 *dst, const __nv_bfloat16 *written, int n, int c, int cp, int hw,
                           bn_ctx *ctx)
{
    if (written == dst) return BN_OK;
    if (c == cp) return bn_gpu_bf16_transpose(dst, written, n, hw, c, ctx);
    const size_t total = (size_t)n * c * hw;
    bn_launch_early(from_nhwc_padded, blocks_for(total), THREADS, 0, (cudaStream_t)ctx->stream, dst, written, c, cp, hw,
                    total);
    BN_CUDA_LAUNCH();
    return BN_OK;
}

/* The filter as KRSC of kp x cp: value16 itself for a 1x1 filter or one input channel when
 * nothing is padded, else s->wt (its padding filters stay zero: describe_layer). */
static bn_status filter_krsc(const conv_priv *c, conv_bf16 *s, const __nv_bfloat16 *w, bn_ctx *ctx,
                             const __nv_bfloat16 **out)
{
    if (s->kp != c->filters) {
        *out = s->wt;
        const __nv_bfloat16 *ignored = NULL;
        /* The first c->filters filters, each C x RS -> RS x cp; where that needs no copy (c == cp and
         * one of C, RS is 1), the filter is copied as it is. */
        BN_TRY(as_nhwc(w, s->wt, c->filters, c->g.c, s->cp, c->size * c->size, ctx, &ignored));
        if (ignored == w)
            BN_CUDA(cudaMemcpyAsync(s->wt, w, (size_t)c->filters * c->g.c * c->size * c->size * sizeof *w,
                                    cudaMemcpyDeviceToDevice, (cudaStream_t)ctx->stream));
        return BN_OK;
    }
    return as_nhwc(w, s->wt, c->filters, c->g.c, s->cp, c->size * c->size, ctx, out);
}

extern "C" bn_status bn_conv_bf16_run_forward(const conv_priv *c, conv_bf16 *s, const bf16_plan *plan, int L,
                                              bn_ctx *ctx, const __nv_bfloat16 *x, const __nv_bfloat16 *w,
                                              __nv_bfloat16 *y)
{
    cudnnHandle_t h = (cudnnHandle_t)ctx->cudnn;
    const float one = 1.0f, zero = 0.0f;
    const int n = plan->n, in_hw = c->g.h * c->g.w, out_hw = c->g.oh * c->g.ow;
    if (L == F32) {
        /* blobnet's FP32 kernels, the bias added by them. */
        BN_TRY(bn_gpu_bf16_to_f32(s->x32, x, (size_t)n * c->g.c * in_hw, ctx));
        BN_TRY(bn_conv2d_own_forward(s->layer, ctx, s->x32, s->y32));
        return bn_gpu_f32_to_bf16(y, s->y32, (size_t)n * c->filters * out_hw, ctx);
    }
    const bn_cg_plan *g = plan->g[L][PASS_FWD];
    if (L == NCHW) {
        if (g) return bn_cg_run(ctx, g, x, w, y);
        BN_CUDNN(cudnnConvolutionForward(h, &one, plan->x[L], x, s->w_desc[L], w, s->conv_desc, plan->algos[L].fwd,
                                         ctx->workspace, ctx->workspace_size, &zero, plan->y[L], y));
        return BN_OK;
    }
    const __nv_bfloat16 *xt = NULL, *wt = NULL;
    BN_TRY(as_nhwc(x, s->xt, n, c->g.c, s->cp, in_hw, ctx, &xt));
    BN_TRY(filter_krsc(c, s, w, ctx, &wt));
    __nv_bfloat16 *yt = nhwc_target(y, s->yt, c->filters, s->kp, out_hw);
    if (g)
        BN_TRY(bn_cg_run(ctx, g, xt, wt, yt));
    else
        BN_CUDNN(cudnnConvolutionForward(h, &one, plan->x[L], xt, s->w_desc[L], wt, s->conv_desc, plan->algos[L].fwd,
                                         ctx->workspace, ctx->workspace_size, &zero, plan->y[L], yt));
    return from_nhwc(y, yt, n, c->filters, s->kp, out_hw, ctx);
}

/* dw[k][j][i] += src[(k * rs + i) * cp + j] over filters x channels x rs (j < channels, i < rs):
 * a padded NHWC copy's KRSC filter gradient (cp channels per row) into KCRS, its padding
 * dropped. Filters are small: one thread per element, no tiling. */
static __global__ void add_padded_filter_kernel(float *__restrict__ dw, const __nv_bfloat16 *__restrict__ src, int rs,
                                                int channels, int cp, size_t total)
{
    bn_early_entry(); /* pdl.cuh */
    for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += (size_t)gridDim.x * blockDim.x) {
        const size_t per = (size_t)rs * channels, k = e / per, rem = e % per;
        const size_t j = rem / rs, i = rem % rs;
        dw[e] += bn_ld(&src[(k * rs + i) * cp + j]);
    }
}

/* dw (FP32, KCRS) += the filter gradient of layout L from x and dy (in the layout's order).
 * cuDNN writes it in the filter's type, BF16, into s->dw (cuDNN 9.14's heuristics offered no
 * engine writing FP32 from BF16 tensors, neither into the slab nor into scratch: version 26 of
 * docs/performance.md), by the graph-API plan where there is one, else by the legacy algorithm;
 * then s->dw is added into dw: as it is from NCHW's KCRS, transposed from KRSC, or from a padded
 * KRSC. */
static bn_status filter_pass(const conv_priv *c, conv_bf16 *s, const bf16_plan *plan, int L, bn_ctx *ctx,
                             const __nv_bfloat16 *x, const __nv_bfloat16 *dy, float *dw)
{
    const float one = 1.0f, zero = 0.0f;
    const int rs = c->size * c->size;
    const size_t weights = (size_t)c->filters * c->g.c * rs;
    const bn_cg_plan *g = plan->g[L][PASS_FILTER];
    if (g)
        BN_TRY(bn_cg_run(ctx, g, x, s->dw, dy));
    else
        BN_CUDNN(cudnnConvolutionBackwardFilter((cudnnHandle_t)ctx->cudnn, &one, plan->x[L], x, plan->y[L], dy,
                                                s->conv_desc, plan->algos[L].filter, ctx->workspace,
                                                ctx->workspace_size, &zero, s->w_desc[L], s->dw));
    if (L == NCHW) return bn_gpu_add_bf16_to_f32(dw, s->dw, weights, ctx);
    if (!padded(c, s)) return bn_gpu_add_bf16_transposed_to_f32(dw, s->dw, c->filters, rs, c->g.c, ctx);
    size_t blocks = (weights + THREADS - 1) / THREADS;
    if (blocks > 1024) blocks = 1024;
    bn_launch_early(add_padded_filter_kernel, (unsigned)blocks, THREADS, 0, (cudaStream_t)ctx->stream, dw, s->dw, rs,
                    c->g.c, s->cp, weights);
    BN_CUDA_LAUNCH();
    return BN_OK;
}

/* dx = the input gradient of layout L from w and dy (in the layout's order). */
static bn_status data_pass(conv_bf16 *s, const bf16_plan *plan, int L, bn_ctx *ctx, const __nv_bfloat16 *w,
                           const __nv_bfloat16 *dy, __nv_bfloat16 *dx)
{
    const float one = 1.0f, zero = 0.0f;
    const bn_cg_plan *g = plan->g[L][PASS_DATA];
    if (g) return bn_cg_run(ctx, g, dx, w, dy);
    BN_CUDNN(cudnnConvolutionBackwardData((cudnnHandle_t)ctx->cudnn, &one, s->w_desc[L], w, plan->y[L], dy,
                                          s->conv_desc, plan->algos[L].data, ctx->workspace, ctx->workspace_size,
                                          &zero, plan->x[L], dx));
    return BN_OK;
}

/* The two passes of bn_conv_bf16_run_backward in a cuDNN layout, with their operands in its
 * order, for bn_overlap_run. */
typedef struct gradients {
    const conv_priv *c;
    conv_bf16 *s;
    const bf16_plan *plan;
    int L;
    bn_ctx *ctx;
    const __nv_bfloat16 *x, *w, *dy;
    float *dw;
    __nv_bfloat16 *dx, *dxt;
} gradients;

/* The filter pass on the stream the context is turned to (bn_ctx_on_side). */
static bn_status filter_turned(void *env)
{
    const gradients *t = (const gradients *)env;
    return filter_pass(t->c, t->s, t->plan, t->L, t->ctx, t->x, t->dy, t->dw);
}

/* The filter pass on the side stream, with the context turned there. */
static bn_status filter_beside(void *env, void *stream)
{
    (void)stream; /* the turn makes it the context's */
    return bn_ctx_on_side(((const gradients *)env)->ctx, filter_turned, env);
}

/* The data pass into dxt, then dxt into dx where they differ (NHWC's copy back). */
static bn_status data_here(void *env)
{
    const gradients *t = (const gradients *)env;
    const __nv_bfloat16 *wt = t->w;
    if (t->L == NHWC) BN_TRY(filter_krsc(t->c, t->s, t->w, t->ctx, &wt));
    BN_TRY(data_pass(t->s, t->plan, t->L, t->ctx, wt, t->dy, t->dxt));
    if (t->L == NCHW) return BN_OK;
    const conv_priv *c = t->c;
    return from_nhwc(t->dx, t->dxt, t->plan->n, c->g.c, t->s->cp, c->g.h * c->g.w, t->ctx);
}

/* Whether the filter pass in layout L can run on the side stream beside the data pass: the
 * context has a side stream (a lane's own on a lane), the layer has the events for the fork and,
 * in NHWC where the input gradient is written apart from the blob, that gradient's own scratch,
 * and the side workspace holds what the filter pass needs (else it runs on the stream, as
 * before). */
static bool filter_fits_beside(const bn_ctx *ctx, const conv_priv *c, const conv_bf16 *s, const bf16_plan *plan,
                               int L)
{
    return ctx->side_stream && s->side.fork && (L == NCHW || s->dxt || !nhwc_dx_apart(c, s)) &&
           filter_workspace(plan, L) <= ctx->side_workspace_size;
}

extern "C" bn_status bn_conv_bf16_run_backward(const conv_priv *c, conv_bf16 *s, const bf16_plan *plan, int L,
                                               bn_ctx *ctx, const __nv_bfloat16 *x, const __nv_bfloat16 *w,
                                               const __nv_bfloat16 *dy, float *dw, float *db, __nv_bfloat16 *dx,
                                               int defer)
{
    const int n = plan->n, in_hw = c->g.h * c->g.w, out_hw = c->g.oh * c->g.ow;
    if (L == F32) {
        const size_t in = (size_t)n * c->g.c * in_hw;
        BN_TRY(bn_gpu_bf16_to_f32(s->x32, x, in, ctx));
        BN_TRY(bn_gpu_bf16_to_f32(s->y32, dy, (size_t)n * c->filters * out_hw, ctx));
        BN_TRY(bn_conv2d_own_backward(s->layer, ctx, s->x32, s->y32, dx ? s->dx32 : NULL, dw, db));
        return dx ? bn_gpu_f32_to_bf16(dx, s->dx32, in, ctx) : BN_OK;
    }
    gradients t = {c, s, plan, L, ctx, x, w, dy, dw, dx, dx};
    if (L == NHWC) {
        BN_TRY(as_nhwc(x, s->xt, n, c->g.c, s->cp, in_hw, ctx, &t.x));
        BN_TRY(as_nhwc(dy, s->yt, n, c->filters, s->kp, out_hw, ctx, &t.dy));
    }
    const bool beside = dx && filter_fits_beside(ctx, c, s, plan, L);
    if (L == NHWC && dx) t.dxt = nhwc_target(dx, beside ? s->dxt : s->xt, c->g.c, s->cp, in_hw);
    if (beside) return bn_overlap_run(ctx, &s->side, defer, filter_beside, data_here, &t);
    BN_TRY(filter_pass(c, s, plan, L, ctx, t.x, t.dy, dw));
    /* s->xt is free again for dxt: the filter pass queued before the data pass has read it. */
    return dx ? data_here(&t) : BN_OK;
}

BN_CODE_ANCHOR(conv_bf16_passes, to_nhwc_padded) /* code_load.cu */
