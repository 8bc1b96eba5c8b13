/* layer.h - the layer contract: what every layer type, built in or written by a user,
 * provides (a const bn_layer_ops table) and what it is given (a bn_layer).
 *
 * The network owns every blob a layer touches. A layer reads `in`, writes `out` in
 * forward; in backward it reads `out_grad`, writes `in_grad` (when it is not NULL: the
 * network's input needs no gradient) and ADDS its parameter gradients into the
 * param grad views (the network zeroes them once per step).
 *
 * The network is a graph: a layer may read several earlier layers (a type that takes more than
 * one input says so in min_inputs/max_inputs and reads inputs[] and input_grads[]; `in` and
 * `in_grad` are the first of them), and a layer's output may feed several layers. Each reader
 * then writes its own input gradient and the network adds them up into the output gradient
 * before the layer's backward pass, so no layer ever sums what its readers sent back. */
#ifndef BN_LAYER_H
#define BN_LAYER_H

#include "blob.h"
#include "device.h"
#include "nvtx.h"
#include "options.h"
#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define BN_MAX_PARAMS 4
#define BN_MAX_INPUTS 8
#define BN_MAX_BUFFERS 4

/* The shape of one example, without the batch dimension. */
typedef struct bn_shape {
    int c, h, w;
} bn_shape;

typedef enum bn_init {
    BN_INIT_ZERO,     /* all zeros (biases) */
    BN_INIT_HE,       /* normal, std sqrt(2 / fan_in): for layers followed by ReLU */
    BN_INIT_XAVIER,   /* uniform in +-sqrt(6 / (fan_in + fan_out)) */
    BN_INIT_CONSTANT  /* every element equal to the param's init_value */
} bn_init;

typedef struct bn_param {
    char name[32];        /* "weight", "bias", ... ; the checkpoint key is "<layer>.<name>" */
    bn_blob *value;       /* view into the network's parameter slab */
    bn_blob *grad;        /* view into the network's gradient slab, same layout */
    bn_init init;
    int fan_in, fan_out;
    float init_value;     /* for BN_INIT_CONSTANT */
    float lr_mult;        /* multiplies the learning rate (biases: the [train] bias_lr_mult) */
    float decay_mult;     /* multiplies the weight decay (0 for biases) */
    int is_bias;
    bn_blob *value16;     /* BF16 device copy of value (a view into net->params16) under
                             --precision bf16, else NULL */
} bn_param;

/* State a layer keeps that is not learned (running statistics, counters): saved in checkpoints
 * as "<layer>.<name>" and restored on resume, never touched by the optimizer, weight decay or
 * gradient checks, and not counted as parameters. */
typedef struct bn_buffer {
    char name[32];
    bn_blob *value;       /* view into the network's buffer slab */
    float init_value;     /* every element's value when the network is initialised */
} bn_buffer;

/* What one forward or backward pass is given besides the layer's blobs. */
typedef struct bn_pass {
    int train;                 /* 1 in training (dropout active), 0 in evaluation */
    unsigned long long step;   /* optimizer step number, for per-step randomness */
    unsigned long long seed;   /* the run's seed */
    bn_blob *labels;           /* n class indices stored as floats (loss layers) */
    bn_blob *metrics;          /* loss layers write [sum of losses, correct predictions] */
    bn_ctx *ctx;               /* device context on the GPU path, NULL on the CPU path */
    int defer_joins;           /* set by bn_net_backward: a layer's backward pass may leave work
                                  on ctx->side_stream unjoined (bn_ctx_defer_side); the net joins
                                  it once all layers have run */
    int offset;                /* the position of this pass's first example in the global batch:
                                  a rank of data-parallel training holds a share of each batch,
                                  and draws made per example (dropout, augmentation) follow the
                                  example's global position; 0 on one GPU */
    const unsigned long long *dev_step; /* GPU: device memory that holds `step` while a training
                                  step's passes run (the loader writes it as it gathers the
                                  batch), so that a pass captured in a CUDA graph draws with each
                                  replay's step; NULL where no loader drew the batch: the passes
                                  take `step` */
    bn_blob *dy_part;          /* GPU backward: a second reader's part of the output gradient the
                                  layer reads, which the network has not added in (only for a type
                                  with sums_grad_part, bn_layer.dy_part): the gradient is that
                                  blob plus this one, element by element; NULL otherwise */
} bn_pass;

typedef struct bn_layer bn_layer;
typedef struct bn_layer_ops bn_layer_ops;

struct bn_layer {
    char name[64];
    const bn_layer_ops *ops;
    int index;                 /* position in the network */
    bn_blob *in, *out;
    bn_blob *in_grad;          /* NULL when the input needs no gradient */
    bn_blob *out_grad;         /* NULL for a loss layer */
    bn_param params[BN_MAX_PARAMS];
    int num_params;
    void *priv;                /* the layer type's own state, allocated by parse */
    float bias_lr_mult;        /* from [train], for bn_layer_add_param */
    int fallback_warned;       /* the CPU-fallback warning was printed for this layer */
    int gpu_fused;             /* BN_FUSED_* bits: GPU passes a neighbour's kernels do (fuse_gpu) */
    /* The graph (kept after the fields above, so code written for one input is unchanged): */
    int num_inputs;
    bn_blob *inputs[BN_MAX_INPUTS];      /* inputs[0] == in */
    bn_blob *input_grads[BN_MAX_INPUTS]; /* input_grads[0] == in_grad; each NULL when no gradient
                                            is needed there */
    bn_shape input_shapes[BN_MAX_INPUTS]; /* one example of each input, set before setup */
    int sources[BN_MAX_INPUTS];          /* the index of the layer each input reads, -1 for the
                                            network's input */
    int line;                  /* the model file's line of the layer's section */
    bn_blob **grad_parts;      /* when several inputs read `out`: the gradients of all but the
                                  first, which the network adds into out_grad (owned by it) */
    int num_grad_parts;
    bn_buffer buffers[BN_MAX_BUFFERS]; /* declared by setup (bn_layer_add_buffer) */
    int num_buffers;
    int num_readers;           /* inputs of later layers that read `out` (one layer may count twice) */
    int reader;                /* the index of the first layer that reads `out`, -1 when none does */
    int in_place;              /* set up to run in place: out and out_grad are the blobs of the layer
                                  it reads (in == out, in_grad == out_grad), which own them */
    int cpu_relu;              /* the in-place ReLU after it has its CPU passes done by this layer's
                                  (bn_layer_ops.relu_cpu): the forward pass writes max(y, 0), the
                                  backward pass reads the output gradient where y > 0 only */
    int cpu_fused;             /* an in-place ReLU whose CPU passes its producer's do (cpu_relu):
                                  running them on the CPU does nothing */
    bn_layer *cpu_sum_into;    /* a plain sum (bn_layer_ops.cpu_sums_inputs) whose output this layer's
                                  CPU forward pass writes, adding the sum's other inputs to its own
                                  output (and doing the sum's ReLU where it has one, cpu_relu), and
                                  whose output gradient its CPU backward pass reads; this layer's
                                  own output and output gradient are then never written
                                  (bn_net_fuse_cpu_sums). NULL when none */
    int cpu_summed_input;      /* for such a sum: 1 + the index of the input whose producer's CPU
                                  forward writes the sum, so this layer's CPU forward does nothing
                                  and its CPU backward skips that input's gradient; 0 when none */
    int grad_part_to_reader;   /* on a device: its one gradient part is left to the kernels that read
                                  its output gradient (fusion.c), which add it as they load it;
                                  out_grad then holds the first reader's part only */
    bn_blob *dy_part;          /* on a device: the part of its output gradient (or of the gradient of
                                  the activation whose backward pass its kernels do) that this
                                  layer's GPU backward pass adds in, handed to it as bn_pass.dy_part;
                                  NULL when none */
    int grad_shared;           /* on a device, a channel join whose output holds a join it reads
                                  (bn_net_join_slices): that join's output gradient is the first
                                  channels of this one's, into which the join's other reader adds
                                  its input gradient, so after the backward pass they hold that
                                  sum, not this layer's gradient */
    int adds_in_grad;          /* on a device: its GPU backward pass adds its input gradient into
                                  in_grad, a nested join's gradient (a slice, bn_net_join_slices),
                                  each value rounded as a stored gradient part would be, instead of
                                  storing it (a type with in_slices) */
};

/* The bits of bn_layer.gpu_fused: the layer's GPU forward (backward) pass is done by its
 * neighbour's kernels, so running the layer's own pass on the device does nothing. With
 * BN_FUSED_BACKWARD, BN_FUSED_NO_IN_GRAD says that the neighbour reads this layer's output
 * gradient directly and nothing writes its input gradient on the device (only that neighbour
 * would read it). With BN_FUSED_FORWARD, BN_FUSED_NO_IN says that the neighbour may leave this
 * layer's input (the neighbour's own output) unwritten on the device: it computes this layer's
 * output without storing it, and nothing else reads it (bn_net_blob_unwritten). */
#define BN_FUSED_FORWARD 1
#define BN_FUSED_BACKWARD 2
#define BN_FUSED_NO_IN_GRAD 4
#define BN_FUSED_NO_IN 8

/* What a layer computes, told to its neighbours' fusion hooks so that they can tell whether their
 * kernels may do its passes (bn_layer_ops.absorbable_as; absorbs for what fuse_gpu takes). A type
 * declares a kind only when it computes exactly that, with no state a neighbour would not know. */
#define BN_ABSORB_RELU 1u    /* elementwise max(x, 0), no parameters: a producer's epilogue may
                              * write its output, a consumer mask its own input gradient where
                              * the output is 0 (fusion.c asks fuse_gpu), and on the CPU the
                              * network may run it in place (relu_in_place): its CPU passes then
                              * find in == out and in_grad == out_grad */
#define BN_ABSORB_MAXPOOL 2u /* the max pooling of layers/pool.h, its window and argmax mask in
                              * that file's pool_priv: a producer's kernels may pool their output
                              * (fuse_next_gpu looks for it) */
/* The kinds that are elementwise activations: those the network offers to fuse_gpu. */
#define BN_ABSORB_ACTIVATIONS BN_ABSORB_RELU

struct bn_layer_ops {
    const char *type;          /* the model-file section name, e.g. "conv2d" */
    const char *help;          /* one line: what it computes and its keys */
    int is_loss;               /* takes labels, writes metrics, needs no out_grad */
    bn_nvtx_kind kind;         /* colour of its ranges on the profiler timeline */
    int graph_safe;            /* its GPU passes keep no per-step host state and never
                                * synchronise, so a captured CUDA graph may replay them */
    int min_inputs, max_inputs; /* how many inputs it reads (model file: `input = a, b`); 0 and 0
                                 * for exactly one. setup gets the first input's shape and finds
                                 * all of them in l->input_shapes */

    /* Reads the layer's keys from opts into l->priv (allocated here). May be NULL. */
    bn_status (*parse)(bn_layer *l, bn_options *opts);
    /* Computes the output shape from the input shape and declares the parameters
     * (bn_layer_add_param). Rejects inputs it cannot handle with a usage error. */
    bn_status (*setup)(bn_layer *l, bn_shape in, bn_shape *out);
    bn_status (*forward_cpu)(bn_layer *l, const bn_pass *p);
    bn_status (*backward_cpu)(bn_layer *l, const bn_pass *p);
    /* GPU versions; NULL falls back to the CPU ones (with a one-time warning). */
    bn_status (*forward_gpu)(bn_layer *l, const bn_pass *p);
    bn_status (*backward_gpu)(bn_layer *l, const bn_pass *p);
    /* Forward floating-point operations for one example, for summaries. May be NULL. */
    double (*flops)(const bn_layer *l);
    /* Releases l->priv and what it holds. May be NULL (then priv is free()d). */
    void (*destroy)(bn_layer *l);
    /* GPU fusion with a neighbouring elementwise activation `act`, asked by the network when it
     * is set up on a device, and only about an activation whose absorbable_as names a kind that
     * l's absorbs lists: `after` = 1: act reads l's output, and l's GPU forward pass is to write
     * act's output too; `after` = 0: l reads act's output, and l's GPU backward pass is to write
     * act's input gradient (its own input gradient passed through act's derivative, read from
     * act's output: for BN_ABSORB_RELU masked where it is 0) instead of its input gradient.
     * Returns 1 when l takes that pass over; with `after` = 1 it may return BN_FUSED_* bits
     * instead: BN_FUSED_FORWARD | BN_FUSED_BACKWARD when l's backward pass also does act's,
     * reading act's output gradient (BN_FUSED_NO_IN_GRAD: l's own output gradient is then left
     * unwritten), BN_FUSED_NO_IN when l's forward pass writes act's output and not its own
     * (an add, whose passes are elementwise). Asked under --precision bf16 too, where the blobs
     * are BF16 by then (bn_blob_is_bf16): a hook whose BF16 passes cannot do it returns 0.
     * May be NULL. */
    int (*fuse_gpu)(bn_layer *l, bn_layer *act, int after);
    /* GPU fusion with the layer after it, `next` (which reads l's output, and no other layer
     * does), asked by the network when it is set up on a device after the activation fusions,
     * when neither layer has a pass fused yet: l's GPU passes are to do some of next's passes
     * too, which then do nothing (next->ops->absorbable_as says what next computes). Returns
     * the BN_FUSED_* bits of next's passes that l takes over (BN_FUSED_FORWARD: l's forward
     * pass does next's; BN_FUSED_BACKWARD: l's backward pass does next's first), 0 for none.
     * Asked under --precision bf16 too, as fuse_gpu is. May be NULL. */
    int (*fuse_next_gpu)(bn_layer *l, bn_layer *next);
    /* For a loss layer, asked before each training or evaluation step on a device (never by the
     * network's setup, whose rules are in fusion.c): its following GPU forwards are also to add
     * the batch's [loss sum, correct count] into acc (2 floats; when not NULL) and, with grad in
     * a training pass, to write the input gradient the backward would write, so that the
     * backward which follows launches nothing. Called again with (NULL, 0) when the step is
     * done. Returns 1 when l takes the request. May be NULL. */
    int (*fuse_loss_gpu)(bn_layer *l, const bn_pass *pass, bn_blob *acc, int grad);
    /* GPU work the layer's forward pass left for the end of the backward pass, queued on
     * pass->ctx->stream by the network once every layer's backward pass (and update) is queued and
     * before it joins the side stream: a loss layer's forward that wrote its input gradient leaves
     * the last sum of its metrics there, so that the backward pass does not wait for it. Does
     * nothing when nothing was left. May be NULL. */
    bn_status (*finish_gpu)(bn_layer *l, const bn_pass *pass);
    /* Writes which kernels run the layer's GPU passes at the current batch size into buf (for
     * `blobnet time`), or leaves buf empty when there is nothing to say. May be NULL. */
    void (*describe_gpu)(const bn_layer *l, char *buf, size_t cap);
    int bf16;  /* its GPU passes read and write BF16 blobs (--precision bf16): every output,
                * output gradient and input gradient through bn_blob_dev16_rd/wr, the parameters
                * through bn_param.value16, and the parameter gradients still FP32 */
    unsigned absorbable_as; /* what the layer computes, as a neighbour's kernels may compute it in
                             * its place: one BN_ABSORB_* bit, 0 (the default) for nothing they may */
    unsigned absorbs;       /* the elementwise activations (BN_ABSORB_* bits) whose passes this
                             * type's fuse_gpu can do; the network asks it about no other */
    int relu_in_place;      /* a ReLU that is the only reader of this layer's output may run in place
                             * over it on the CPU (net_setup.c): the ReLU's forward pass then writes
                             * max(out, 0) over the output, its backward pass the output gradient
                             * masked over the output gradient. Set only where the type's backward
                             * passes never read the output, or (a ReLU's) read only its sign */
    int out_slices;         /* its GPU passes (FP32 and BF16) reach its output and output gradient
                             * only through bn_blob_dev_rows_rd/wr, honouring the stride: on a device
                             * they may be slices of a channel join's output (fusion.c) */
    int act_out_slices;     /* the epilogue that writes the output of an activation whose forward
                             * this type's fuse_gpu takes honours the stride of a slice likewise,
                             * and so does a backward pass that reads that activation's output
                             * gradient where the hook takes its backward pass too */
    int joins_slices;       /* its output is its inputs' channels one input after the other per
                             * example: an input whose producer can write a slice of it (out_slices)
                             * becomes that slice on a device, and the type's passes skip such an
                             * input (bn_net_join_slices); its GPU passes reach its own output and
                             * output gradient at their stride, so that it may be a slice of a later
                             * join's in turn */
    int in_slices;          /* its GPU passes read its one input only through bn_blob_dev_rows_rd,
                             * honouring the stride, and where bn_layer.adds_in_grad is set add
                             * their input gradient into in_grad at its stride: on a device the
                             * input may be a join's output that is a slice of a later join's
                             * (bn_net_join_slices) */
    int relu_cpu;           /* with relu_in_place: this type's CPU passes can also do the passes of
                             * that in-place ReLU (bn_layer.cpu_relu), so they run as one pass over
                             * the activations instead of two */
    int sum_cpu;            /* this type's CPU forward pass can write the sum of its output and
                             * other blobs of its shape, and its backward read that sum's output
                             * gradient (bn_layer.cpu_sum_into) */
    /* For a layer that may be a plain sum: returns 1 when its output is the sum of its inputs with
     * coefficients 1 (and its CPU forward then may be done by the producer of one input,
     * bn_layer.cpu_summed_input). May be NULL. */
    int (*cpu_sums_inputs)(const bn_layer *l);
    /* Returns the BN_BESIDE_* bits of the layer's GPU passes, as planned for the current batch
     * size, that queue their work only on p->ctx->stream (and, in backward, side_stream through
     * bn_overlap_run or bn_ctx_on_side) and use no cuBLAS handle, cuDNN only through the
     * context's handle and workspaces (a lane's own on a lane: bn_ctx_set_lane), so that in a
     * captured step the network may run them on another stream, beside the layers of other
     * branches (core/net_lanes.c). Asked only after an eager forward pass at that batch
     * size, once the layer's GPU forward pass has made its plans (for every pass it will run).
     * NULL: none (the layer runs on the context's stream).
     * bn_layer_beside_always serves types whose GPU passes are all their own kernels. */
    unsigned (*beside)(const bn_layer *l);
    int sums_grad_part;     /* its GPU backward pass, given bn_pass.dy_part, reads the output
                             * gradient it reads (its own, or that of an activation whose backward
                             * pass it does) plus that part, the sum rounded to the blobs' type as
                             * a stored sum would be, so that the network need not add the part in
                             * first (a pass over the gradient fewer: fusion.c) */
};

#define BN_BESIDE_FORWARD 1u
#define BN_BESIDE_BACKWARD 2u

/* A `beside` for types whose GPU passes launch only their own kernels: both bits. */
unsigned bn_layer_beside_always(const bn_layer *l);

/* The elements of all of l's parameters. */
size_t bn_layer_param_count(const bn_layer *l);

/* Declares a parameter of shape (n,c,h,w) during setup; returns its index or -1 on error. */
int bn_layer_add_param(bn_layer *l, const char *name, int n, int c, int h, int w,
                       bn_init init, int fan_in, int fan_out);

/* Declares a buffer of shape (n,c,h,w) during setup, every element init_value; returns its index
 * or -1 on error. */
int bn_layer_add_buffer(bn_layer *l, const char *name, int n, int c, int h, int w, float init_value);

/* Marks param i as a bias: no weight decay, learning rate times bias_lr_mult. */
void bn_param_mark_bias(bn_layer *l, int i);

/* Records a usage error prefixed with the layer's name and type. */
bn_status bn_layer_error(const bn_layer *l, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* Output size of a window of `size` with `stride` and `pad` over `in` cells (floor mode),
 * or 0 when the window does not fit. */
int bn_window_out(int in, int size, int stride, int pad);

/* Runs forward (or backward) on the device when ctx is set and the type has a GPU
 * function, else on the CPU; inside the NVTX range path "<name>/forward" ("<name>/backward"):
 * a range named after the layer holding one named after the pass. */
bn_status bn_layer_forward(bn_layer *l, const bn_pass *p);
bn_status bn_layer_backward(bn_layer *l, const bn_pass *p);

/* A GPU function for an ops table: the function in a CUDA build, NULL (CPU fallback) in a
 * build without CUDA, where the .cu file that defines it is not compiled. */
#ifdef BN_WITH_CUDA
#define BN_GPU(fn) fn
#else
#define BN_GPU(fn) NULL
#endif

/* Shorthands for layer code: fetch a blob pointer or return the recorded error. */
#define BN_HOST_RD(var, blob) const float *var = bn_blob_host_rd(blob); if (!var) return bn_last_status()
#define BN_HOST_WR(var, blob) float *var = bn_blob_host_wr(blob); if (!var) return bn_last_status()
#define BN_DEV_RD(var, blob) const float *var = bn_blob_dev_rd(blob); if (!var) return bn_last_status()
#define BN_DEV_WR(var, blob) float *var = bn_blob_dev_wr(blob); if (!var) return bn_last_status()

#ifdef __cplusplus
}
#endif
#endif
