/* conv_bf16.h - conv2d's GPU passes under --precision bf16, all through cuDNN: BF16 input,
 * output and filter (the weight's BF16 copy, bn_param.value16), FP32 accumulation on the tensor
 * cores; the bias added and its gradient summed in FP32 by the layer's own kernels; the filter
 * gradient written by cuDNN in BF16 (it writes the filter's type) into the layer's scratch and
 * added into the FP32 gradient slab. blobnet's own kernel families are FP32-only and never run
 * here.
 *
 * Two layouts per batch size: cuDNN on the blobs' NCHW tensors and KCRS filter as they are, or
 * on NHWC tensors and a KRSC filter (where cuDNN's fast BF16 tensor-core kernels are) through
 * transposes into and out of the layer's scratch; the blobs stay NCHW either way. */
#ifndef BN_CONV_BF16_H
#define BN_CONV_BF16_H

#include <stddef.h>

#include "core/layer.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The BF16 descriptors, scratch and the algorithms chosen per batch size; defined in conv_bf16.cu. */
typedef struct conv_bf16 conv_bf16;

/* The layer's passes on BF16 blobs. The first pass at a batch size chooses cuDNN's algorithms
 * for each layout: timed by cudnnFind* or, in a deterministic context, by cuDNN's heuristics
 * (deterministic algorithms only), among those that sum products directly; then the layout: the
 * faster of a timed forward and backward pass in each (transposes included), or NHWC in a
 * deterministic context (a choice that never varies between runs). It allocates and
 * synchronises, so it runs before a step is captured. */
bn_status bn_conv_bf16_forward(bn_layer *l, const bn_pass *p);
bn_status bn_conv_bf16_backward(bn_layer *l, const bn_pass *p);

/* Frees *state and what it holds and sets it to NULL; NULL is fine. */
void bn_conv_bf16_release(conv_bf16 **state);

/* Appends "n=<batch>: fwd X, bwd_data Y, bwd_filter Z, <layout>[ timed: nchw A ms, nhwc B ms]
 * (bf16)" per batch size to buf, which holds len characters already (A and B: one forward and
 * backward pass in each layout); returns the new length. */
size_t bn_conv_bf16_describe(const conv_bf16 *state, char *buf, size_t len, size_t cap);

/* Whether the plan for batch n runs on blobnet's FP32 kernels over FP32 copies (0 without one). */
int bn_conv_bf16_runs_fp32(const conv_bf16 *state, int n);

/* For tests: plans made from now on run on NCHW tensors (BN_CONV_BF16_NCHW) or NHWC ones
 * (BN_CONV_BF16_NHWC) alone, or by blobnet's FP32 kernels on FP32 copies wherever those serve
 * every pass (BN_CONV_BF16_FP32; the normal choice elsewhere); BN_CONV_BF16_EITHER (the default)
 * restores the choice above. */
enum { BN_CONV_BF16_EITHER, BN_CONV_BF16_NCHW, BN_CONV_BF16_NHWC, BN_CONV_BF16_FP32 };
void bn_conv_bf16_force_layout(int layout);

/* For tests: plans made from now on take cuDNN's legacy algorithms alone (legacy != 0), or, by
 * default (0), the graph API's engines (conv_graph.h) for every pass that has one. */
void bn_conv_bf16_force_legacy(int legacy);

#ifdef __cplusplus
}
#endif
#endif
