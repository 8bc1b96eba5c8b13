/* conv_bf16.h - conv2d's GPU passes under --precision bf16: BF16 blobs in and out, FP32
 * accumulation, FP32 master weight and gradients. Three ways to run them, chosen per batch size:
 *
 * - NCHW: cuDNN on the blobs' NCHW tensors and the weight's BF16 copy (bn_param.value16) as KCRS;
 * - NHWC: cuDNN on NHWC copies and a KRSC filter (where its BF16 tensor-core engines are), through
 *   transposes into and out of the layer's scratch, channels and filters padded with zeros to
 *   multiples of 8 (the engines want 16-byte rows; LeNet's 1, 20 and 50 get 8, 24 and 56);
 * - FP32 copies: blobnet's own FP32 kernel families (conv2d.h: bn_conv2d_own_*) on FP32 copies
 *   of the BF16 blobs, with the FP32 master weight: the fastest for layers of few channels, where
 *   cuDNN's BF16 engines are slow (a first layer of one channel).
 *
 * In cuDNN's two, each pass runs on the engine of cuDNN's graph API (conv_graph.h) timed fastest
 * among those with FP32 sums, else on the legacy API's algorithm; the bias is added and its
 * gradient summed in FP32 by the kernels of conv_bf16.cu, and the filter gradient (cuDNN writes
 * the filter's type, BF16, from FP32 sums) is added from scratch into the FP32 slab. In the FP32
 * copies blobnet's kernels do the bias and write the FP32 gradients themselves. The blobs stay
 * NCHW throughout. */
#ifndef BN_CONV_BF16_H
#define BN_CONV_BF16_H

#include <stddef.h>

#include "core/layer.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The BF16 descriptors, scratch and the algorithms chosen per batch size; defined in conv_bf16.cu. */
typedef struct conv_bf16 conv_bf16;

/* The layer's passes on BF16 blobs. The first pass at a batch size chooses cuDNN's engines and
 * algorithms for each of its layouts (timed and kept in the kernel cache, or in a deterministic
 * context cuDNN's heuristics' first deterministic one), blobnet's FP32 kernels for the FP32
 * copies where they serve every pass (as conv2d.cu chooses them), then the way: the fastest of a
 * timed forward and backward pass in each (transposes and copies included), or NHWC in a
 * deterministic context (a choice that never varies between runs). It allocates and
 * synchronises, so it runs before a step is captured. The forward pass also writes a fused
 * ReLU's output (conv_priv.relu_after) where the bias kernel runs after cuDNN (*relu_done = 1);
 * after blobnet's FP32 kernels on FP32 copies it leaves the ReLU to its own pass. */
bn_status bn_conv_bf16_forward(bn_layer *l, const bn_pass *p, int *relu_done);
bn_status bn_conv_bf16_backward(bn_layer *l, const bn_pass *p);

/* Frees *state and what it holds and sets it to NULL; NULL is fine. */
void bn_conv_bf16_release(conv_bf16 **state);

/* Appends "n=<batch>: fwd X, bwd_data Y, bwd_filter Z, <layout>[ timed: nchw A ms, nhwc B ms,
 * fp32 C ms] (bf16)" per batch size to buf, which holds len characters already: X, Y and Z are
 * "graph engN" (an engine of the graph API) or a legacy algorithm's name,
 * the layout "nchw", "nhwc" or "nhwc padded to KxC"; A, B and C are one forward and backward pass
 * in each way. A plan on the FP32 copies reads "n=<batch>: blobnet's FP32 kernels on fp32
 * copies[ timed: ...] (bf16)" (bn_conv2d_gpu_describe writes those kernels before it). Returns
 * the new length. */
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
