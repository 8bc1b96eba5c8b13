/* blobnet.h - the one header a layer author includes: the layer contract and everything a
 * layer's code touches (blobs, options, errors, the device context, the registry), plus the
 * entry point of an out-of-tree layer plugin. docs/custom-layers.md walks through an example.
 *
 * A layer type is a const bn_layer_ops table (layer.h). What each op must do:
 *   parse        read the section's keys with the bn_opt_* readers (options.h; a bad value is
 *                reported with file:line) into l->priv, which it allocates. Optional.
 *   setup        from the input shape of one example, set *out and declare every parameter with
 *                bn_layer_add_param (shape and initialiser; for BN_INIT_CONSTANT set
 *                l->params[i].init_value after it). It must not depend on the batch size, and
 *                refuses an input it cannot handle with bn_layer_error (a usage error).
 *   forward_cpu  read l->in, write EVERY element of l->out (first l->in->n examples).
 *   backward_cpu read l->out_grad (and in, out), write every element of l->in_grad when it is not
 *                NULL, and ADD into each l->params[i].grad: the network zeroes them once a step.
 *   forward_gpu, backward_gpu   the same on the device, on pass->ctx->stream (cuBLAS and cuDNN
 *                handles in pass->ctx are bound to it); take device pointers with BN_DEV_RD/WR.
 *                Optional: NULL runs the CPU function instead. In the ops table write
 *                BN_GPU(fn), which is NULL in a build without CUDA.
 *   flops        forward floating-point operations per example, for `blobnet summary`. Optional.
 *   destroy      free l->priv and what it holds (device scratch too). Optional (NULL frees l->priv).
 *   graph_safe   set it to 1 to promise that the GPU passes only queue work on pass->ctx->stream
 *                (and side_stream): no host state that changes from step to step (a seed, a
 *                counter, a pointer chosen per step), no synchronisation, no cudaMalloc or
 *                cudaFree, no reading device results on the host. A layer that draws random
 *                numbers per step reads the step on the device from pass->dev_step (when set)
 *                and draws with a counter-based hash (core/counter_rng.h), as dropout does.
 *                The trainer then captures one training step as a CUDA graph and replays it,
 *                so the host side of those passes runs only in the captured step. Left 0 (or without GPU passes), every step of
 *                a network holding the layer launches kernel by kernel: correct, but slower for
 *                small layers, and `blobnet train` says so once on stderr, naming the layer.
 *   beside       return BN_BESIDE_FORWARD and BN_BESIDE_BACKWARD for the GPU passes that need
 *                nothing but pass->ctx->stream (and side_stream through bn_overlap_run; no cuBLAS
 *                or cuDNN handle, not the context's workspace): a captured step may then run them
 *                on another stream, beside the layers of other branches of the network.
 *                bn_layer_beside_always serves passes of the layer's own kernels. Optional
 *                (NULL: the layer runs on the context's stream).
 *   fuse_gpu, fuse_next_gpu, fuse_loss_gpu, absorbable_as, absorbs   GPU fusion with a neighbour
 *                (layer.h): what the layer computes when a neighbour's kernels may do it in its
 *                place (absorbable_as, a BN_ABSORB_* bit), which activations its fuse_gpu takes
 *                (absorbs), and the hooks the network asks (core/fusion.c). Optional (0 / NULL).
 * A loss layer (is_loss = 1) reads pass->labels, writes pass->metrics [loss sum, correct count]
 * and has no out_grad: its backward starts the gradient. Every op returns BN_OK or the status
 * of bn_error / bn_layer_error / bn_opt_error. The framework opens an NVTX range around every
 * forward and backward call, so a user layer is named on the profiler timeline like the others.
 *
 * Device scratch memory (a mask, partial sums): bn_device_alloc in the layer's first GPU pass,
 * sized for the batch capacity (l->in->capacity elements, not l->in->n, which is smaller on a
 * last partial batch), kept in l->priv and released with bn_device_free in destroy. Never
 * allocate or free per step: both synchronise the device, are refused while a step is being
 * captured, and a captured graph replays the addresses it saw. The first step always runs
 * eagerly, so an allocation there is never captured. A layer that must replace a buffer later
 * (it needs a larger one) frees the old one, allocates the new one and increments
 * pass->ctx->buffer_generation, so that the step is captured again with the new address; where no
 * later step reads the old contents (scratch), it may instead hand the old one to
 * bn_device_retire, which keeps it for the graphs captured before, so they replay as they are.
 *
 * CUDA files (.cu) including this header also get cuda_check.h: BN_CUDA, BN_CUBLAS, BN_CUDNN
 * and BN_CUDA_LAUNCH turn a failed call into a status naming file:line.
 *
 * Adding a layer type, in tree: a file pair layers/X.c and layers/X.cu plus one line in the
 * builtin table of src/core/registry.c (and its declaration in layers/layers.h). Out of tree:
 * build the pair into a shared library that defines blobnet_plugin_register (below) and run
 * `blobnet train MODEL --plugin FILE.so`; or link the pair into your own program against
 * libblobnet.a and call bn_register_layer. */
#ifndef BN_BLOBNET_H
#define BN_BLOBNET_H

#include "core/blob.h"
#include "core/device.h"
#include "core/layer.h"
#include "core/options.h"
#include "core/registry.h"
#include "core/status.h"

#ifdef __CUDACC__
#include "gpu/cuda_check.h"
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* The name of the one symbol a plugin exports (bn_plugin_load looks it up). */
#define BN_PLUGIN_ENTRY "blobnet_plugin_register"

#if defined(__GNUC__)
#define BN_PLUGIN_EXPORT __attribute__((visibility("default")))
#else
#define BN_PLUGIN_EXPORT
#endif

/* Defined by a plugin, called once when blobnet loads it: registers the plugin's layer types
 * with bn_register_layer and returns the first failure. The ops tables it registers must stay
 * valid for the life of the process (a loaded plugin is never unloaded). A plugin is built
 * against the blobnet headers of the binary that loads it. */
BN_PLUGIN_EXPORT bn_status blobnet_plugin_register(void);

#ifdef __cplusplus
}
#endif
#endif
