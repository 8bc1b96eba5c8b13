/* conv_bf16.cu - conv2d under --precision bf16 (conv_bf16.h): cuDNN's convolutions on BF16
 * tensors and filters with FP32 accumulation (the convolution descriptor's compute type FLOAT,
 * tensor-op math), the bias and its gradient by the kernels below.
 *
 * Only algorithms that sum products directly are taken: the FFT and Winograd transforms add
 * their own rounding (1.4e-3 relative on LeNet's conv1 in FP32, conv2d.cu) on top of BF16's, and
 * the products' accuracy should be BF16's inputs', nothing worse. The bias is added to the
 * output cuDNN wrote (one more BF16 rounding) from the FP32 master copy, and its gradient summed
 * in FP32 in a fixed order (deterministic, no atomics): blocks of (part, channel) write partial
 * sums, then one thread per channel adds them in order into the FP32 gradient. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conv2d.h"
#include "conv_bf16.h"
#include "core/device.h"
#include "gpu/bf16.cuh"
#include "gpu/bf16.h"
#include "gpu/cuda_check.h"

enum { WEIGHT, BIAS };

/* The most workspace one algorithm may ask for, as in FP32 (conv2d.cu). */
#define WORKSPACE_LIMIT ((size_t)256 << 20)
#define THREADS 256
/* The bias gradient: elements of one channel per block, and the most blocks per channel. */
#define PART_ELEMENTS 4096
#define MAX_PARTS 64

typedef struct bf16_plan {
    int n;         /* batch size the algorithms were chosen for */
    int with_data; /* the layer has an input gradient, so `data` was chosen too */
    cudnnConvolutionFwdAlgo_t fwd;
    cudnnConvolutionBwdDataAlgo_t data;
    cudnnConvolutionBwdFilterAlgo_t filter;
} bf16_plan;

struct conv_bf16 {
    cudnnFilterDescriptor_t w_desc;        /* BF16 */
    cudnnConvolutionDescriptor_t conv_desc; /* FP32 compute, tensor-op math */
    __nv_bfloat16 *dw;                     /* cuDNN's filter gradient, then added into the FP32 slab */
    float *bias_parts;                     /* the bias gradient's partial sums: MAX_PARTS per filter */
    bf16_plan *plans;
    int num_plans;
};

extern "C" void bn_conv_bf16_release(conv_bf16 **state)
{
    conv_bf16 *s = *state;
    if (!s) return;
    if (s->w_desc) cudnnDestroyFilterDescriptor(s->w_desc);
    if (s->conv_desc) cudnnDestroyConvolutionDescriptor(s->conv_desc);
    bn_device_free(s->dw);
    bn_device_free(s->bias_parts);
    free(s->plans);
    free(s);
    *state = NULL;
}

static bn_status describe_layer(const conv_priv *c, conv_bf16 *s)
{
    BN_CUDNN(cudnnCreateFilterDescriptor(&s->w_desc));
    BN_CUDNN(cudnnSetFilter4dDescriptor(s->w_desc, CUDNN_DATA_BFLOAT16, CUDNN_TENSOR_NCHW, c->filters, c->g.c, c->size,
                                        c->size));
    BN_CUDNN(cudnnCreateConvolutionDescriptor(&s->conv_desc));
    BN_CUDNN(cudnnSetConvolution2dDescriptor(s->conv_desc, c->pad, c->pad, c->stride, c->stride, 1, 1,
                                             CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    BN_CUDNN(cudnnSetConvolutionMathType(s->conv_desc, CUDNN_TENSOR_OP_MATH));
    const size_t weights = (size_t)c->filters * c->g.c * c->size * c->size;
    BN_TRY(bn_device_alloc((void **)&s->dw, weights * sizeof(__nv_bfloat16)));
    return bn_device_alloc((void **)&s->bias_parts, (size_t)c->filters * MAX_PARTS * sizeof(float));
}

/* Whether an algorithm sums products directly (no FFT or Winograd transform). */
static bool sums_directly(cudnnConvolutionFwdAlgo_t a)
{
    return a == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM || a == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM ||
           a == CUDNN_CONVOLUTION_FWD_ALGO_GEMM || a == CUDNN_CONVOLUTION_FWD_ALGO_DIRECT;
}

static bool sums_directly(cudnnConvolutionBwdDataAlgo_t a)
{
    return a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_0 || a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_1;
}

static bool sums_directly(cudnnConvolutionBwdFilterAlgo_t a)
{
    return a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0 || a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1 ||
           a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3;
}

/* The first usable result (cuDNN lists the fastest, or the likeliest fastest, first): it ran,
 * fits the workspace limit, sums directly, and is deterministic when the context asks for that.
 * Adds its workspace to *need; -1 when none qualifies. */
template <typename Perf> static int pick(const Perf *r, int count, const bn_ctx *ctx, size_t *need)
{
    for (int i = 0; i < count; i++) {
        if (r[i].status != CUDNN_STATUS_SUCCESS || r[i].memory > WORKSPACE_LIMIT || !sums_directly(r[i].algo))
            continue;
        if (ctx->deterministic && r[i].determinism != CUDNN_DETERMINISTIC) continue;
        if (r[i].memory > *need) *need = r[i].memory;
        return i;
    }
    return -1;
}

static bn_status none_usable(const bn_layer *l, const char *pass)
{
    return bn_error(BN_ERR_DEVICE, "layer %s: cuDNN offers no usable BF16 %s algorithm for this shape", l->name,
                    pass);
}

/* cuDNN's algorithms for the three passes of the current batch size (timed, or by its heuristics
 * in a deterministic context), and the shared workspace grown to what they need. */
static bn_status make_plan(bn_layer *l, bn_ctx *ctx, const conv_bf16 *s, bf16_plan *plan)
{
    cudnnHandle_t h = (cudnnHandle_t)ctx->cudnn;
    BN_TENSOR_DESC(x, l->in);
    BN_TENSOR_DESC(y, l->out);
    const bool timed = !ctx->deterministic;
    size_t need = 0;
    int got = 0, i;
    plan->n = l->in->n;
    plan->with_data = l->in_grad != NULL;

    cudnnConvolutionFwdAlgoPerf_t f[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    if (timed)
        BN_CUDNN(cudnnFindConvolutionForwardAlgorithm(h, x, s->w_desc, s->conv_desc, y, CUDNN_CONVOLUTION_FWD_ALGO_COUNT,
                                                      &got, f));
    else
        BN_CUDNN(cudnnGetConvolutionForwardAlgorithm_v7(h, x, s->w_desc, s->conv_desc, y,
                                                        CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &got, f));
    if ((i = pick(f, got, ctx, &need)) < 0) return none_usable(l, "forward");
    plan->fwd = f[i].algo;

    cudnnConvolutionBwdFilterAlgoPerf_t w[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
    if (timed)
        BN_CUDNN(cudnnFindConvolutionBackwardFilterAlgorithm(h, x, y, s->conv_desc, s->w_desc,
                                                             CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &got, w));
    else
        BN_CUDNN(cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, x, y, s->conv_desc, s->w_desc,
                                                               CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &got, w));
    if ((i = pick(w, got, ctx, &need)) < 0) return none_usable(l, "backward-filter");
    plan->filter = w[i].algo;

    plan->data = CUDNN_CONVOLUTION_BWD_DATA_ALGO_1;
    if (plan->with_data) {
        cudnnConvolutionBwdDataAlgoPerf_t d[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
        if (timed)
            BN_CUDNN(cudnnFindConvolutionBackwardDataAlgorithm(h, s->w_desc, y, s->conv_desc, x,
                                                               CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &got, d));
        else
            BN_CUDNN(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, s->w_desc, y, s->conv_desc, x,
                                                                 CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &got, d));
        if ((i = pick(d, got, ctx, &need)) < 0) return none_usable(l, "backward-data");
        plan->data = d[i].algo;
    }
    return bn_ctx_reserve_workspace(ctx, need);
}

/* The BF16 state and the plan for the current batch size, made on first use. */
static bn_status prepare(bn_layer *l, bn_ctx *ctx, const conv_bf16 **state, const bf16_plan **plan)
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
        bn_status st = describe_layer(c, c->bf16);
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
    BN_TRY(make_plan(l, ctx, s, &made));
    bf16_plan *grown = (bf16_plan *)realloc(s->plans, (size_t)(s->num_plans + 1) * sizeof *grown);
    if (!grown) return bn_error(BN_ERR_NOMEM, "layer %s: out of host memory", l->name);
    s->plans = grown;
    s->plans[s->num_plans] = made;
    *plan = &s->plans[s->num_plans++];
    return BN_OK;
}

/* y[e, k, :] += b[k] over total elements of planes of `plane` cells, `filters` channels. */
static __global__ void add_bias(__nv_bfloat16 *__restrict__ y, const float *__restrict__ b, size_t total, int plane,
                                int filters)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x)
        bn_st(&y[i], bn_ld(&y[i]) + b[(i / (size_t)plane) % (size_t)filters]);
}

/* Block (part, k): the sum of dy over its span of channel k's count = batch x plane elements. */
static __global__ void __launch_bounds__(THREADS)
    bias_partials(const __nv_bfloat16 *__restrict__ dy, int filters, int plane, long count, float *__restrict__ parts)
{
    __shared__ float sum[THREADS];
    const int k = blockIdx.y, part = blockIdx.x;
    const long span = (count + gridDim.x - 1) / gridDim.x, lo = part * span, hi = min(count, lo + span);
    float acc = 0.0f;
    for (long m = lo + threadIdx.x; m < hi; m += THREADS) {
        const long e = m / plane;
        acc += bn_ld(&dy[((size_t)e * filters + k) * (size_t)plane + (size_t)(m - e * plane)]);
    }
    sum[threadIdx.x] = acc;
    __syncthreads();
    for (int s = THREADS / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) sum[threadIdx.x] += sum[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) parts[(size_t)k * MAX_PARTS + part] = sum[0];
}

/* One thread per filter: db[k] += its partial sums, in order. */
static __global__ void bias_finish(const float *__restrict__ parts, int filters, int used, float *__restrict__ db)
{
    const int k = blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= filters) return;
    float acc = 0.0f;
    for (int p = 0; p < used; p++) acc += parts[(size_t)k * MAX_PARTS + p];
    db[k] += acc;
}

static unsigned grid_for(size_t n)
{
    size_t b = (n + THREADS - 1) / THREADS;
    return (unsigned)(b < 1 ? 1 : b > 4096 ? 4096 : b);
}

extern "C" bn_status bn_conv_bf16_forward(bn_layer *l, const bn_pass *p)
{
    bn_ctx *ctx = p->ctx;
    const conv_priv *c = (const conv_priv *)l->priv;
    const conv_bf16 *s = NULL;
    const bf16_plan *plan = NULL;
    BN_TRY(prepare(l, ctx, &s, &plan));
    BN_DEV16_RD(x, l->in);
    BN_DEV16_RD(w, l->params[WEIGHT].value16);
    BN_DEV_RD(b, l->params[BIAS].value);
    BN_DEV16_WR(y, l->out);
    BN_TENSOR_DESC(xd, l->in);
    BN_TENSOR_DESC(yd, l->out);
    const float one = 1.0f, zero = 0.0f;
    BN_CUDNN(cudnnConvolutionForward((cudnnHandle_t)ctx->cudnn, &one, xd, x, s->w_desc, w, s->conv_desc, plan->fwd,
                                     ctx->workspace, ctx->workspace_size, &zero, yd, y));
    const size_t total = bn_blob_count(l->out);
    add_bias<<<grid_for(total), THREADS, 0, (cudaStream_t)ctx->stream>>>(y, b, total, c->g.oh * c->g.ow, c->filters);
    BN_CUDA_LAUNCH();
    return BN_OK;
}

extern "C" bn_status bn_conv_bf16_backward(bn_layer *l, const bn_pass *p)
{
    bn_ctx *ctx = p->ctx;
    const conv_priv *c = (const conv_priv *)l->priv;
    const conv_bf16 *s = NULL;
    const bf16_plan *plan = NULL;
    BN_TRY(prepare(l, ctx, &s, &plan));
    cudnnHandle_t h = (cudnnHandle_t)ctx->cudnn;
    cudaStream_t stream = (cudaStream_t)ctx->stream;
    BN_DEV16_RD(x, l->in);
    BN_DEV16_RD(dy, l->out_grad);
    BN_DEV16_RD(w, l->params[WEIGHT].value16);
    BN_DEV_WR(dw, l->params[WEIGHT].grad);
    BN_DEV_WR(db, l->params[BIAS].grad);
    BN_TENSOR_DESC(xd, l->in);
    BN_TENSOR_DESC(dyd, l->out_grad);
    const float one = 1.0f, zero = 0.0f;

    const int plane = c->g.oh * c->g.ow;
    const long count = (long)l->out_grad->n * plane;
    long want = (count + PART_ELEMENTS - 1) / PART_ELEMENTS;
    const int parts = (int)(want < 1 ? 1 : want > MAX_PARTS ? MAX_PARTS : want);
    bias_partials<<<dim3(parts, c->filters), THREADS, 0, stream>>>(dy, c->filters, plane, count, s->bias_parts);
    BN_CUDA_LAUNCH();
    bias_finish<<<(c->filters + 127) / 128, 128, 0, stream>>>(s->bias_parts, c->filters, parts, db);
    BN_CUDA_LAUNCH();

    BN_CUDNN(cudnnConvolutionBackwardFilter(h, &one, xd, x, dyd, dy, s->conv_desc, plan->filter, ctx->workspace,
                                            ctx->workspace_size, &zero, s->w_desc, s->dw));
    BN_TRY(bn_gpu_add_bf16_to_f32(dw, s->dw, bn_blob_count(l->params[WEIGHT].grad), ctx));
    if (!l->in_grad) return BN_OK;
    BN_DEV16_WR(dx, l->in_grad);
    BN_TENSOR_DESC(dxd, l->in_grad);
    BN_CUDNN(cudnnConvolutionBackwardData(h, &one, s->w_desc, w, dyd, dy, s->conv_desc, plan->data, ctx->workspace,
                                          ctx->workspace_size, &zero, dxd, dx));
    return BN_OK;
}

static const char *const fwd_names[] = {"implicit_gemm", "implicit_precomp_gemm", "gemm", "direct",
                                        "fft", "fft_tiling", "winograd", "winograd_nonfused"};
static const char *const data_names[] = {"algo_0", "algo_1", "fft", "fft_tiling", "winograd", "winograd_nonfused"};
static const char *const filter_names[] = {"algo_0", "algo_1", "fft", "algo_3", "winograd", "winograd_nonfused",
                                           "fft_tiling"};

static const char *name_of(const char *const *names, int count, int algo)
{
    return algo >= 0 && algo < count ? names[algo] : "?";
}

extern "C" size_t bn_conv_bf16_describe(const conv_bf16 *state, char *buf, size_t len, size_t cap)
{
    const int plans = state ? state->num_plans : 0;
    for (int i = 0; i < plans && len < cap; i++) {
        const bf16_plan *pl = &state->plans[i];
        int w = snprintf(buf + len, cap - len, "%sn=%d: fwd %s, bwd_data %s, bwd_filter %s (bf16)", len ? "; " : "",
                         pl->n, name_of(fwd_names, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, pl->fwd),
                         pl->with_data ? name_of(data_names, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, pl->data) : "-",
                         name_of(filter_names, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, pl->filter));
        if (w < 0) break;
        len += (size_t)w;
    }
    return len < cap ? len : cap;
}
