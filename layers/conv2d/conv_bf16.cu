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
 * and its gradient summed in FP32 in a fixed order (conv_bias.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conv2d.h"
#include "conv_bias.h"
#include "conv_bf16.h"
#include "conv_cudnn.cuh"
#include "conv_graph.h"
#include "conv_legacy.h"
#include "core/device.h"
#include "gpu/bf16.cuh"
#include "gpu/bf16.h"
#include "gpu/cuda_check.h"
#include "gpu/chooser.h"

enum { WEIGHT, BIAS };
/* How the passes run: cuDNN on the blobs' NCHW tensors, cuDNN on NHWC copies, or blobnet's own
 * FP32 kernels on FP32 copies (conv2d.cu: bn_conv2d_own_*). The first CUDNN_LAYOUTS are cuDNN's. */
enum { NCHW, NHWC, F32, LAYOUTS };
#define CUDNN_LAYOUTS 2

#define THREADS 256

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

typedef struct bf16_algos {
    cudnnConvolutionFwdAlgo_t fwd;
    cudnnConvolutionBwdDataAlgo_t data;
    cudnnConvolutionBwdFilterAlgo_t filter;
} bf16_algos;

enum { PASS_FWD = BN_CG_FORWARD, PASS_DATA = BN_CG_DATA, PASS_FILTER = BN_CG_FILTER };

typedef struct bf16_plan {
    int n;         /* batch size the algorithms were chosen for */
    int with_data; /* the layer has an input gradient, so `data` was chosen too */
    int layout;    /* the one the passes run in */
    int usable[LAYOUTS];                  /* cuDNN offered an algorithm for every pass */
    bf16_algos algos[LAYOUTS];            /* where usable */
    float ms[LAYOUTS];                    /* one timed forward and backward pass; 0 where not timed */
    cudnnTensorDescriptor_t x[LAYOUTS];   /* the input (and its gradient) at batch n */
    cudnnTensorDescriptor_t y[LAYOUTS];   /* the output (and its gradient) at batch n */
    bn_cg_plan *g[LAYOUTS][BN_CG_PASSES]; /* the pass through cuDNN's graph API where it has an engine
                                             (conv_graph.h); else the legacy algorithm in algos */
} bf16_plan;

struct conv_bf16 {
    int channels, filters; /* the layer's */
    int cp, kp;            /* the NHWC copies' channel and filter counts: the layer's, rounded up to
                              multiples of 8 (cuDNN's BF16 tensor-core engines want 16-byte rows);
                              the padding is zeros in inputs and filters, dropped from results */
    bn_layer *layer;       /* the layer this state belongs to */
    cudnnFilterDescriptor_t w_desc[CUDNN_LAYOUTS]; /* BF16, KCRS and KRSC (kp x cp) */
    float *x32, *dx32, *y32; /* the F32 layout's copies of x, dx and y (or dy); NULL until it is tried */
    cudnnConvolutionDescriptor_t conv_desc;  /* FP32 compute, tensor-op math */
    __nv_bfloat16 *dw;     /* cuDNN's filter gradient in the layout's filter order, then added into the FP32 slab */
    __nv_bfloat16 *wt;     /* the filter as KRSC */
    __nv_bfloat16 *xt;     /* the input as NHWC (the batch the blob holds at most); then its gradient */
    __nv_bfloat16 *yt;     /* the output, or its gradient, as NHWC */
    float *bias_parts;     /* the bias gradient's partial sums (conv_bias.h) */
    bf16_plan *plans;
    int num_plans;
};

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
    bn_device_free(s->yt);
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

/* Whether the NHWC copies carry padding channels or filters. */
static bool padded(const conv_priv *c, const conv_bf16 *s)
{
    return s->cp != c->g.c || s->kp != c->filters;
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
    const size_t in = l->in->capacity / (size_t)c->g.c * s->cp, out = l->out->capacity / (size_t)c->filters * s->kp;
    BN_TRY(bn_device_alloc((void **)&s->dw, weights * sizeof(__nv_bfloat16)));
    BN_TRY(bn_device_alloc((void **)&s->wt, weights * sizeof(__nv_bfloat16)));
    BN_TRY(bn_device_zero(s->wt, weights * sizeof(__nv_bfloat16)));
    BN_TRY(bn_device_alloc((void **)&s->xt, in * sizeof(__nv_bfloat16)));
    BN_TRY(bn_device_alloc((void **)&s->yt, out * sizeof(__nv_bfloat16)));
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
    /* In the order cuDNN measured them before: forward, filter, data. */
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
        BN_TRY(bn_conv_legacy_choose(ctx, pass, BN_LEGACY_DIRECT_SUMS, plan->x[L], s->w_desc[L], s->conv_desc,
                                     plan->y[L], &got, &found));
        if (!found) {
            *missing = pass_names[pass];
            return BN_OK;
        }
        if (got.memory > *need) *need = got.memory;
        if (pass == PASS_FWD) a->fwd = (cudnnConvolutionFwdAlgo_t)got.algo;
        else if (pass == PASS_FILTER) a->filter = (cudnnConvolutionBwdFilterAlgo_t)got.algo;
        else a->data = (cudnnConvolutionBwdDataAlgo_t)got.algo;
    }
    plan->usable[L] = 1;
    return BN_OK;
}

/* Whether a rows x cols matrix is its own transpose in memory (one row or one column): then an
 * array's two layouts coincide and cuDNN reads or writes the blob itself. */
static bool same_layouts(int rows, int cols)
{
    return rows == 1 || cols == 1;
}

/* dst[b][p][j] = src[b][j][p] for j < c, 0 for c <= j < cp: n images of c channels of hw pixels
 * into NHWC rows of cp channels. One thread per element written. */
static __global__ void to_nhwc_padded(__nv_bfloat16 *__restrict__ dst, const __nv_bfloat16 *__restrict__ src, int c,
                                      int cp, int hw, size_t total)
{
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
    to_nhwc_padded<<<blocks_for(total), THREADS, 0, (cudaStream_t)ctx->stream>>>(scratch, src, c, cp, hw, total);
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
    from_nhwc_padded<<<blocks_for(total), THREADS, 0, (cudaStream_t)ctx->stream>>>(dst, written, c, cp, hw, total);
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

/* y = the convolution of x by w (no bias) in layout L; x, w and y in the blobs' order. */
static bn_status conv_forward(const conv_priv *c, conv_bf16 *s, const bf16_plan *plan, int L, bn_ctx *ctx,
                              const __nv_bfloat16 *x, const __nv_bfloat16 *w, __nv_bfloat16 *y)
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
    add_padded_filter_kernel<<<(unsigned)blocks, THREADS, 0, (cudaStream_t)ctx->stream>>>(dw, s->dw, rs, c->g.c, s->cp,
                                                                                          weights);
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

/* dw (FP32, KCRS) += the filter gradient from x and dy, and, where dx is not NULL, dx = the input
 * gradient, in layout L; x, w, dy and dx in the blobs' order. The F32 layout's kernels also add
 * the bias gradient into db (the others leave it to the caller). */
static bn_status conv_backward(const conv_priv *c, conv_bf16 *s, const bf16_plan *plan, int L, bn_ctx *ctx,
                               const __nv_bfloat16 *x, const __nv_bfloat16 *w, const __nv_bfloat16 *dy, float *dw,
                               float *db, __nv_bfloat16 *dx)
{
    const int n = plan->n, in_hw = c->g.h * c->g.w, out_hw = c->g.oh * c->g.ow;
    if (L == F32) {
        const size_t in = (size_t)n * c->g.c * in_hw;
        BN_TRY(bn_gpu_bf16_to_f32(s->x32, x, in, ctx));
        BN_TRY(bn_gpu_bf16_to_f32(s->y32, dy, (size_t)n * c->filters * out_hw, ctx));
        BN_TRY(bn_conv2d_own_backward(s->layer, ctx, s->x32, s->y32, dx ? s->dx32 : NULL, dw, db));
        return dx ? bn_gpu_f32_to_bf16(dx, s->dx32, in, ctx) : BN_OK;
    }
    if (L == NCHW) {
        BN_TRY(filter_pass(c, s, plan, L, ctx, x, dy, dw));
        return dx ? data_pass(s, plan, L, ctx, w, dy, dx) : BN_OK;
    }
    const __nv_bfloat16 *xt = NULL, *dyt = NULL;
    BN_TRY(as_nhwc(x, s->xt, n, c->g.c, s->cp, in_hw, ctx, &xt));
    BN_TRY(as_nhwc(dy, s->yt, n, c->filters, s->kp, out_hw, ctx, &dyt));
    BN_TRY(filter_pass(c, s, plan, L, ctx, xt, dyt, dw));
    if (!dx) return BN_OK;
    const __nv_bfloat16 *wt = NULL;
    BN_TRY(filter_krsc(c, s, w, ctx, &wt));
    /* s->xt is free again: the filter pass queued before this one on the stream has read it. */
    __nv_bfloat16 *dxt = nhwc_target(dx, s->xt, c->g.c, s->cp, in_hw);
    BN_TRY(data_pass(s, plan, L, ctx, wt, dyt, dxt));
    return from_nhwc(dx, dxt, n, c->g.c, s->cp, in_hw, ctx);
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
    BN_TRY(conv_forward(c, s, plan, L, ctx, t->x, w, t->y));
    return conv_backward(c, s, plan, L, ctx, t->x, w, t->y, t->dw, t->db, plan->with_data ? t->dx : NULL);
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

/* After 2 pass pairs to warm up, the least of 3 means of 4, as conv2d.cu times FP32's kernels. */
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
    const bn_candidates cands = {LAYOUTS, layout_names, usable, order, count, run_trial, &tr};
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
    if (st == BN_OK) plan->layout = forced_f32 ? F32 : plan->usable[NHWC] ? NHWC : plan->usable[NCHW] ? NCHW : F32;
    int usable = 0;
    for (int L = 0; L < LAYOUTS; L++) usable += plan->usable[L];
    if (st == BN_OK && usable > 1 && !ctx->deterministic && !forced_f32) {
        const __nv_bfloat16 *w = (const __nv_bfloat16 *)bn_blob_dev16_rd(l->params[WEIGHT].value16);
        st = w ? time_layouts(c, s, plan, ctx, w, &t) : bn_last_status();
    }
    free_stand_ins(&t);
    /* The FP32 copies (three activations' worth of FP32) are kept only for a plan that runs on them. */
    bool f32_runs = plan->layout == F32;
    for (int i = 0; i < s->num_plans; i++) f32_runs = f32_runs || s->plans[i].layout == F32;
    if (st == BN_OK && !f32_runs && s->x32) {
        bn_device_free(s->x32);
        bn_device_free(s->y32);
        bn_device_free(s->dx32);
        s->x32 = s->y32 = s->dx32 = NULL;
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

extern "C" bn_status bn_conv_bf16_forward(bn_layer *l, const bn_pass *p)
{
    bn_ctx *ctx = p->ctx;
    const conv_priv *c = (const conv_priv *)l->priv;
    conv_bf16 *s = NULL;
    const bf16_plan *plan = NULL;
    BN_TRY(prepare(l, ctx, &s, &plan));
    BN_DEV16_RD(x, l->in);
    BN_DEV16_RD(w, l->params[WEIGHT].value16);
    BN_DEV_RD(b, l->params[BIAS].value);
    BN_DEV16_WR(y, l->out);
    BN_TRY(conv_forward(c, s, plan, plan->layout, ctx, x, w, y));
    if (plan->layout == F32) return BN_OK; /* the bias was added by blobnet's kernels */
    return bn_conv_bias_add_bf16(y, b, l->out->n, c->filters, c->g.oh * c->g.ow, ctx);
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
    return conv_backward(c, s, plan, plan->layout, ctx, x, w, dy, dw, db, dx);
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
