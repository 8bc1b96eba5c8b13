/* conv2d.h - the conv2d layer's private state, shared by conv2d.c (setup, CPU path) and
 * conv2d.cu (GPU path through cuDNN), and its GPU entry points. */
#ifndef BN_CONV2D_H
#define BN_CONV2D_H

#include <stddef.h>

#include "conv_bf16.h"
#include "conv_family.h"
#include "core/layer.h"
#include "im2col.h"

#ifdef __cplusplus
extern "C" {
#endif

/* cuDNN descriptors and the plans made per batch size; defined in conv2d_gpu.cuh. */
typedef struct conv_gpu conv_gpu;

/* Which kernels may run a GPU pass: auto (cuDNN's and blobnet's), cuDNN's only, or blobnet's own
 * (the families of conv_family.h) wherever they apply; conv_plan.cu says how one of them is chosen
 * per batch size (the fixed rule, timing, or the kernel cache). The CPU path ignores it. */
enum { BN_CONV_ENGINE_AUTO, BN_CONV_ENGINE_CUDNN, BN_CONV_ENGINE_BLOBNET };

typedef struct conv_priv {
    int filters, size, stride, pad, init, engine;
    bn_conv_geom g;  /* from setup */
    conv_gpu *gpu;   /* NULL until the first GPU pass; released by bn_conv2d_gpu_release */
    bn_layer *pool_after; /* a 2x2 max pooling after it whose GPU passes this layer's do
                             (bn_conv2d_fuse_next), else NULL */
    conv_bf16 *bf16;      /* the passes' state under --precision bf16 (conv_bf16.h): NULL until the
                             first BF16 pass; released by bn_conv2d_gpu_release */
    bn_layer *relu_after; /* a ReLU layer whose GPU forward this layer's does (bn_conv2d_fuse_relu) */
    bn_layer *relu_before; /* a ReLU layer, this one's input, whose GPU backward this layer's does
                              (bn_conv2d_fuse_relu) */
} conv_priv;

/* The CPU passes on host buffers for a batch of n, as the layer runs them (conv_cpu.c: chunks
 * of examples, im2col then GEMMs, on the CPU pool; the reference every GPU runner is checked
 * against): forward writes y (bias added, then max(y, 0) where relu is set); backward adds into
 * dw and db and, where dx is not NULL, writes dx, reading dy only where relu_y > 0 when relu_y is
 * not NULL (the output of a ReLU done by the forward pass). Fail only where their scratch cannot
 * be allocated. */
bn_status bn_conv2d_cpu_forward(const bn_conv_geom *g, int filters, int n, const float *x, const float *w,
                                const float *b, float *y, int relu);
/* The forward pass adding num_addends blobs of y's shape to the output (after the bias, before
 * the ReLU, in that order): a plain sum the layer writes (bn_layer.cpu_sum_into). */
bn_status bn_conv2d_cpu_forward_sum(const bn_conv_geom *g, int filters, int n, const float *x, const float *w,
                                    const float *b, float *y, int relu, const float *const *addends,
                                    int num_addends);
bn_status bn_conv2d_cpu_backward(const bn_conv_geom *g, int filters, int n, const float *x, const float *w,
                                 const float *dy, const float *relu_y, float *dx, float *dw, float *db);
/* With on, the CPU passes use direct sums only (no Winograd transforms, conv_winograd.h), which
 * are exact where the data make every sum exact (the exact-grid comparisons of the tests); off
 * (the default), the fastest path. Not for use while passes run on other threads. */
void bn_conv2d_cpu_exact(int on);
/* The last step of every CPU backward path: db[f] += the chunks' sums of filter f's output
 * gradient (parts[chunk][filter]), added in chunk order, so that it does not depend on the
 * number of threads. */
void bn_conv2d_cpu_bias_grad(const double *parts, int chunks, int filters, float *db);

bn_status bn_conv2d_forward_gpu(bn_layer *l, const bn_pass *p);
bn_status bn_conv2d_backward_gpu(bn_layer *l, const bn_pass *p);

/* bn_layer_ops.beside: each pass whose kernels, as planned for the current batch size, are one of
 * blobnet's families (on FP32 blobs; in backward both the data and the filter pass), which use
 * neither cuDNN nor the workspace. */
unsigned bn_conv2d_beside(const bn_layer *l);

/* bn_layer_ops.fuse_next_gpu: a max pooling of 2x2 windows at stride 2 without padding after
 * the layer has both GPU passes done by this layer's (conv_pooled.h).
 * - Forward: the forward kernel writes the pooled output and each window's argmax
 *   (pool_priv.dev_mask) from its epilogue, so this layer's full-size output is never written;
 *   where the kernel chosen for a batch size cannot, it writes that output and the pooling's
 *   own forward pass runs after it.
 * - Backward: this layer's filter and data kernels read the pooled gradient through the mask
 *   where they can, so the full-size output gradient is never written; where the kernels
 *   chosen for a batch size cannot, the pooling's own backward pass (from the mask) runs first
 *   (the argmax filter pass, conv_argmax.h, reads the pooled gradient even then).
 * Returns BN_FUSED_FORWARD | BN_FUSED_NO_IN | BN_FUSED_BACKWARD | BN_FUSED_NO_IN_GRAD, or 0. */
int bn_conv2d_fuse_next(bn_layer *l, bn_layer *next);

/* bn_layer_ops.fuse_gpu: a ReLU layer after this one (after = 1) has its GPU forward done by
 * this layer's: where cuDNN ran the convolution, the kernel that adds the bias writes the ReLU's
 * output too, and so do the epilogues of the families that take a ReLU (conv_family.h's
 * takes_relu, conv_relu.h); after the others and under --precision bf16 the ReLU's own pass runs
 * right after. A ReLU layer before this one (after = 0, FP32 only) has its GPU backward done by
 * this layer's: the data pass of a family that takes a ReLU writes the ReLU's input gradient
 * with dx; after another data pass the ReLU's own backward pass runs right after it. */
int bn_conv2d_fuse_relu(bn_layer *l, bn_layer *relu, int after);

/* Under --precision bf16 (conv_bf16.cu), blobnet's own FP32 kernels on FP32 copies of the
 * layer's BF16 blobs, with its FP32 master weight and bias: a plan of blobnet's kernels alone for
 * the layer's current batch, chosen as conv2d.cu chooses (kernel cache, timing), and *ok = 1
 * where they serve every pass the layer needs; then the forward pass (bias fused) and the
 * backward passes (dw and db accumulate; dx NULL for no input gradient) on such copies. */
bn_status bn_conv2d_own_plan(bn_layer *l, bn_ctx *ctx, int *ok);
bn_status bn_conv2d_own_forward(bn_layer *l, bn_ctx *ctx, const float *x, float *y);
bn_status bn_conv2d_own_backward(bn_layer *l, bn_ctx *ctx, const float *x, const float *dy, float *dx, float *dw,
                                 float *db);

/* Frees the GPU state (descriptors, chosen algorithms), FP32's and BF16's, and sets c->gpu and
 * c->bf16 to NULL. */
void bn_conv2d_gpu_release(conv_priv *c);

/* Writes the algorithms chosen so far, one "n=<batch>: fwd X, bwd_data Y, bwd_filter Z" entry
 * per batch size, into buf (for logs and tests); blobnet's own kernels are named "blobnet " and the
 * family's name (conv_family.h: "blobnet direct", "blobnet igemm", "blobnet rows", "blobnet
 * tensor", "blobnet argmax"); the entries of BF16 passes end in " (bf16)" (conv_bf16.h). */
void bn_conv2d_gpu_describe(const bn_layer *l, char *buf, size_t cap);

/* For tests: plans made from now on run blobnet's passes with family `family` (BN_CONV_FAMILY_*,
 * conv_family.h: the direct kernels 1, the implicit-GEMM kernels 2, the row-tiled kernels 3, the
 * tensor-core kernels 4, the argmax filter pass 5, for the filter pass of a layer whose output a
 * 2x2 max pooling reads) wherever that family can; 0 restores the normal choice. */
void bn_conv2d_gpu_force_own(int family);

/* For tests: plans made from now on by timing (not in a deterministic context) run every pass
 * cuDNN runs through its graph API (conv_graph.h) wherever it offers an allowed engine, instead
 * of only where that engine was timed faster than the legacy algorithm; 0 restores that. */
void bn_conv2d_gpu_force_graph(int on);

#ifdef __cplusplus
}
#endif
#endif
