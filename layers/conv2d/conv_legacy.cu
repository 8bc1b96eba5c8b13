/* conv_legacy.cu - choosing cuDNN's legacy algorithm for a convolution pass (conv_legacy.h). */
#include "conv_cudnn.cuh"
#include "conv_graph.h"
#include "conv_legacy.h"
#include "gpu/cuda_check.h"

/* The first usable result (cuDNN lists the fastest, or the likeliest fastest, first): it ran,
 * fits the workspace limit, is deterministic where `deterministic` asks for that, and does what
 * `needs` asks. -1 when none qualifies. */
template <typename Perf> static int pick(const Perf *r, int count, bool deterministic, unsigned needs)
{
    for (int i = 0; i < count; i++) {
        if (r[i].status != CUDNN_STATUS_SUCCESS || r[i].memory > BN_CONV_WORKSPACE_LIMIT) continue;
        if (deterministic && r[i].determinism != CUDNN_DETERMINISTIC) continue;
        if ((needs & BN_LEGACY_FMA_ONLY) &&
            (r[i].mathType == CUDNN_TENSOR_OP_MATH || r[i].mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION))
            continue;
        if ((needs & BN_LEGACY_DIRECT_SUMS) && !bn_sums_directly(r[i].algo)) continue;
        return i;
    }
    return -1;
}

/* The result pick takes into *out. */
template <typename Perf>
static void take(const Perf *r, int count, bool deterministic, unsigned needs, bn_legacy_algo *out, int *found)
{
    const int i = pick(r, count, deterministic, needs);
    *found = i >= 0;
    if (i < 0) return;
    out->algo = (int)r[i].algo;
    out->memory = r[i].memory;
    out->ms = r[i].time;
}

extern "C" bn_status bn_conv_legacy_choose(const bn_ctx *ctx, int pass, int source, unsigned needs,
                                           cudnnTensorDescriptor_t x, cudnnFilterDescriptor_t w,
                                           cudnnConvolutionDescriptor_t conv, cudnnTensorDescriptor_t y,
                                           bn_legacy_algo *out, int *found)
{
    cudnnHandle_t h = (cudnnHandle_t)ctx->cudnn;
    const bool as_context = source == BN_LEGACY_AS_CONTEXT;
    const bool measured = as_context && !ctx->deterministic, deterministic = as_context && ctx->deterministic;
    int got = 0;
    *found = 0;
    if (pass == BN_CG_FORWARD) {
        cudnnConvolutionFwdAlgoPerf_t r[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
        if (measured)
            BN_CUDNN(cudnnFindConvolutionForwardAlgorithm(h, x, w, conv, y, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &got, r));
        else
            BN_CUDNN(cudnnGetConvolutionForwardAlgorithm_v7(h, x, w, conv, y, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &got,
                                                            r));
        take(r, got, deterministic, needs, out, found);
    } else if (pass == BN_CG_DATA) {
        cudnnConvolutionBwdDataAlgoPerf_t r[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
        if (measured)
            BN_CUDNN(cudnnFindConvolutionBackwardDataAlgorithm(h, w, y, conv, x, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT,
                                                               &got, r));
        else
            BN_CUDNN(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, w, y, conv, x,
                                                                 CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &got, r));
        take(r, got, deterministic, needs, out, found);
    } else {
        cudnnConvolutionBwdFilterAlgoPerf_t r[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
        if (measured)
            BN_CUDNN(cudnnFindConvolutionBackwardFilterAlgorithm(h, x, y, conv, w,
                                                                 CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &got, r));
        else
            BN_CUDNN(cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, x, y, conv, w,
                                                                   CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &got, r));
        take(r, got, deterministic, needs, out, found);
    }
    return BN_OK;
}
