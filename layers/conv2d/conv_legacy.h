/* conv_legacy.h - the algorithm of cuDNN's legacy convolution API that a pass takes, for the FP32
 * passes (conv2d.cu), the BF16 ones (conv_bf16.cu) and cuDNN run alone (conv_alone_gpu.cu): the
 * fastest that cudnnFind* measures, or in a deterministic context (or where the caller asks) the
 * first of cudnnGet*_v7's heuristics, so that every run takes the same (measured timings vary between runs), among the
 * results that ran, fit BN_CONV_WORKSPACE_LIMIT and are deterministic where the context asks for
 * that, and, as the caller requires, sum products directly (no FFT or Winograd transform:
 * conv_cudnn.cuh) or use no tensor-core math (FP32-exact results: TF32 products are not). */
#ifndef BN_CONV_LEGACY_H
#define BN_CONV_LEGACY_H

#include <stddef.h>

#include <cudnn.h>

#include "core/device.h"
#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What a legacy algorithm must do besides running within the workspace limit. */
enum {
    BN_LEGACY_DIRECT_SUMS = 1, /* sum products directly (bn_sums_directly) */
    BN_LEGACY_FMA_ONLY = 2     /* no tensor-op math, with or without conversion */
};

/* Where the results a pass takes the first usable of come from. */
enum {
    BN_LEGACY_AS_CONTEXT, /* cudnnFind*'s measurements; in a deterministic context the heuristics',
                             deterministic algorithms only */
    BN_LEGACY_HEURISTICS  /* the heuristics' in any context, deterministic or not, and nothing run to
                             measure (cuDNN run alone, on whatever context its caller has) */
};

/* The algorithm taken for a pass, its workspace and the time cuDNN measured (0 from the
 * heuristics). algo is the pass's cudnnConvolution{Fwd,BwdData,BwdFilter}Algo_t. */
typedef struct bn_legacy_algo {
    int algo;
    size_t memory;
    float ms;
} bn_legacy_algo;

/* Chooses the algorithm of pass `pass` (conv_graph.h's BN_CG_FORWARD, BN_CG_DATA, BN_CG_FILTER)
 * on x (the input, or its gradient for the data pass), w, conv and y (the output, or its
 * gradient for the backward passes) on ctx's cuDNN handle, as the top of this file says, from
 * `source` (BN_LEGACY_AS_CONTEXT or BN_LEGACY_HEURISTICS), with `needs` a set of
 * BN_LEGACY_DIRECT_SUMS and BN_LEGACY_FMA_ONLY. *found is 0 when no result qualifies. Measuring
 * allocates and synchronises: at plan time only. */
bn_status bn_conv_legacy_choose(const bn_ctx *ctx, int pass, int source, unsigned needs, cudnnTensorDescriptor_t x,
                                cudnnFilterDescriptor_t w, cudnnConvolutionDescriptor_t conv,
                                cudnnTensorDescriptor_t y, bn_legacy_algo *out, int *found);

#ifdef __cplusplus
}
#endif
#endif
