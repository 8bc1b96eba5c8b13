/* conv_alone_gpu.cu - the device side of conv_alone.h: the device's multiprocessors, and cuDNN
 * run alone on one pass of a shape, on the algorithm conv_legacy.h's heuristics give it, with the
 * bias kernels conv2d uses beside it (conv_bias.h). */
#include <stdio.h>
#include <stdlib.h>

#include "conv_alone.h"
#include "conv_bias.h"
#include "conv_cudnn.cuh"
#include "conv_legacy.h"
#include "gpu/cuda_check.h"

struct bn_conv_cudnn_alone {
    int pass;
    bn_conv_shape s;
    cudnnTensorDescriptor_t x, y;
    cudnnFilterDescriptor_t w;
    cudnnConvolutionDescriptor_t conv;
    int algo;            /* the pass's cudnnConvolution*Algo_t */
    float *bias_parts;   /* the bias gradient's partial sums */
};

extern "C" bn_status bn_conv_alone_device_shape(bn_ctx *ctx, bn_conv_shape *s)
{
    BN_CUDA(cudaDeviceGetAttribute(&s->sms, cudaDevAttrMultiProcessorCount, ctx->device));
    return BN_OK;
}

extern "C" void bn_conv_cudnn_alone_free(bn_conv_cudnn_alone *a)
{
    if (!a) return;
    if (a->x) cudnnDestroyTensorDescriptor(a->x);
    if (a->y) cudnnDestroyTensorDescriptor(a->y);
    if (a->w) cudnnDestroyFilterDescriptor(a->w);
    if (a->conv) cudnnDestroyConvolutionDescriptor(a->conv);
    bn_device_free(a->bias_parts);
    free(a);
}

static bn_status describe(bn_conv_cudnn_alone *a, const bn_conv_shape *s)
{
    const bn_conv_geom *g = &s->g;
    BN_CUDNN(cudnnCreateTensorDescriptor(&a->x));
    BN_CUDNN(cudnnSetTensor4dDescriptor(a->x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, s->n, g->c, g->h, g->w));
    BN_CUDNN(cudnnCreateTensorDescriptor(&a->y));
    BN_CUDNN(cudnnSetTensor4dDescriptor(a->y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, s->n, s->filters, g->oh, g->ow));
    BN_CUDNN(cudnnCreateFilterDescriptor(&a->w));
    BN_CUDNN(cudnnSetFilter4dDescriptor(a->w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, s->filters, g->c, g->k, g->k));
    BN_CUDNN(cudnnCreateConvolutionDescriptor(&a->conv));
    BN_CUDNN(cudnnSetConvolution2dDescriptor(a->conv, g->pad, g->pad, g->stride, g->stride, 1, 1,
                                             CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    BN_CUDNN(cudnnSetConvolutionMathType(a->conv, s->tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH));
    return bn_device_alloc((void **)&a->bias_parts, (size_t)s->filters * BN_CONV_BIAS_PARTS * sizeof(float));
}

/* The pass's algorithm into a->algo and its workspace reserved; *name its name, NULL for none:
 * the first of the heuristics' results (BN_LEGACY_HEURISTICS, whatever ctx's flags) that ran,
 * fits the workspace limit and, without tf32, sums FP32 products directly with FMA math. */
static bn_status choose(bn_conv_cudnn_alone *a, bn_ctx *ctx, const char **name)
{
    const unsigned needs = a->s.tf32 ? 0u : BN_LEGACY_DIRECT_SUMS | BN_LEGACY_FMA_ONLY;
    bn_legacy_algo got;
    int found = 0;
    *name = NULL;
    BN_TRY(bn_conv_legacy_choose(ctx, a->pass, BN_LEGACY_HEURISTICS, needs, a->x, a->w, a->conv, a->y, &got, &found));
    if (!found) return BN_OK;
    a->algo = got.algo;
    if (a->pass == BN_CONV_FORWARD) *name = bn_cudnn_algo_name((cudnnConvolutionFwdAlgo_t)got.algo);
    else if (a->pass == BN_CONV_DATA) *name = bn_cudnn_algo_name((cudnnConvolutionBwdDataAlgo_t)got.algo);
    else *name = bn_cudnn_algo_name((cudnnConvolutionBwdFilterAlgo_t)got.algo);
    return bn_ctx_reserve_workspace(ctx, got.memory);
}

extern "C" bn_status bn_conv_cudnn_alone_make(bn_ctx *ctx, const bn_conv_shape *s, int pass,
                                              bn_conv_cudnn_alone **out, const char **why, char *algo, size_t cap)
{
    *out = NULL;
    *why = NULL;
    bn_conv_cudnn_alone *a = (bn_conv_cudnn_alone *)calloc(1, sizeof *a);
    if (!a) return bn_error(BN_ERR_NOMEM, "conv-families: out of host memory");
    a->pass = pass;
    a->s = *s;
    const char *name = NULL;
    bn_status st = describe(a, s);
    if (st == BN_OK) st = choose(a, ctx, &name);
    if (st != BN_OK || !name) {
        bn_conv_cudnn_alone_free(a);
        if (st == BN_OK) *why = s->tf32 ? "no algorithm fits the workspace limit" : "no algorithm sums FP32 products";
        return st;
    }
    snprintf(algo, cap, "%s", name);
    *out = a;
    return BN_OK;
}

extern "C" bn_status bn_conv_cudnn_alone_run(bn_conv_cudnn_alone *a, bn_ctx *ctx, const bn_conv_io *io)
{
    cudnnHandle_t h = (cudnnHandle_t)ctx->cudnn;
    const bn_conv_shape *s = &a->s;
    const int plane = s->g.oh * s->g.ow;
    const float one = 1.0f, zero = 0.0f;
    if (a->pass == BN_CONV_FORWARD) {
        BN_CUDNN(cudnnConvolutionForward(h, &one, a->x, io->x, a->w, io->w, a->conv, (cudnnConvolutionFwdAlgo_t)a->algo,
                                         ctx->workspace, ctx->workspace_size, &zero, a->y, io->y));
        return bn_conv_bias_add_f32(io->y, io->b, s->n, s->filters, plane, NULL, 0, ctx);
    }
    if (a->pass == BN_CONV_DATA) {
        BN_CUDNN(cudnnConvolutionBackwardData(h, &one, a->w, io->w, a->y, io->dy, a->conv,
                                              (cudnnConvolutionBwdDataAlgo_t)a->algo, ctx->workspace,
                                              ctx->workspace_size, &zero, a->x, io->dx));
        return BN_OK;
    }
    BN_TRY(bn_conv_bias_grad_f32(io->db, io->dy, s->n, s->filters, plane, a->bias_parts, ctx));
    BN_CUDNN(cudnnConvolutionBackwardFilter(h, &one, a->x, io->x, a->y, io->dy, a->conv,
                                            (cudnnConvolutionBwdFilterAlgo_t)a->algo, ctx->workspace,
                                            ctx->workspace_size, &one, a->w, io->dw));
    return BN_OK;
}
