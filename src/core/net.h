/* net.h - a network: a graph of layers, built from a model file, kept in the file's order,
 * which is an order of the graph (a layer reads only the data and the layers above it).
 *
 * Setup walks the shapes from the input, allocates every activation and gradient blob
 * once for the batch size, and carves all parameters out of one contiguous slab and all
 * parameter gradients out of another, so the optimizer is one pass and a checkpoint one
 * write. Smaller batches (the last one of an epoch) reuse the same buffers. */
#ifndef BN_NET_H
#define BN_NET_H

#include <stdint.h>

#include "augment.h"
#include "layer.h"
#include "name_table.h"
#include "train_config.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct bn_net {
    char source[256];          /* the model file's path (or a name given for text) */
    char *description;         /* what the weights mean (describe.h): checkpoints refuse another */
    uint64_t text_hash;        /* FNV-1a of the model file's text, which checkpoints of format 1
                                * were tied to */
    bn_shape input_shape;
    float *input_mean, *input_std; /* [input] mean and std, one value per channel (owned): pixels in
                                * [0,1] become (x - mean[c]) / std[c] */
    int input_norm_auto;       /* BN_NORM_AUTO_MEAN | BN_NORM_AUTO_STD: `auto` in [input], to be set
                                * from the training set or a checkpoint (bn_net_set_input_norm) */
    bn_options data;           /* the [data] section (count 0 when absent), for the program to read */
    bn_train_config train;     /* the [train] section over the defaults */
    bn_layer **layers;
    int num_layers;
    bn_name_table *names;      /* each layer's name to its index (owned) */
    int num_input_readers;     /* how many inputs of layers read the data */

    /* Filled by bn_net_setup: */
    int capacity;              /* the largest batch the blobs hold */
    int batch;                 /* the current batch size */
    bn_blob *input;            /* (batch, C, H, W) */
    bn_blob *input_grad;       /* only when setup was asked for it (gradient checks) */
    bn_blob *labels;           /* (batch, 1, 1, 1) class indices as floats */
    bn_blob *metrics;          /* [sum of losses, correct predictions] of the last forward */
    bn_blob *params;           /* the parameter slab */
    bn_blob *grads;            /* the gradient slab, same layout */
    size_t num_params;         /* elements in each slab */
    bn_pass pass;              /* what forward/backward hand the layers; ctx NULL on the CPU */
    size_t max_bytes;          /* setup refuses a net whose blobs and parameters need more host
                                * memory than this; 0 stands for what the machine and the
                                * process's cgroup leave (bn_host_memory_available) */
    bn_blob **input_grad_parts; /* with input_grad, when several layers read the input: the
                                   gradients of all readers but the first (see bn_layer.grad_parts) */
    int num_input_grad_parts;
    bn_blob *buffers;          /* the buffer slab: every layer's bn_buffer values, in layer order */
    size_t num_buffer_floats;  /* elements in it */
    bn_augment augment;        /* the [augment] section: how training examples move (none by default) */
    size_t grad_guard;         /* set before setup, by the check kit only: free elements left after
                                * each parameter gradient in the gradient slab, where a write past
                                * a gradient lands instead of in the next one. The slab then no
                                * longer mirrors the parameter slab: not for the optimizer. */
    bn_blob *input_norm;       /* set up: mean[0..C) then std[0..C), what the device gather reads */
    int relu_in_place;         /* set before setup: on the CPU, run each ReLU in place over its
                                * input where the graph allows (bn_layer.in_place), which halves
                                * the memory of a chain of ReLUs. Off by default: a layer's output
                                * is then its own blob, which tests comparing each layer of a CPU
                                * network with a GPU one rely on. The CLI's commands turn it on */
    bn_blob *params16;         /* under --precision bf16: the BF16 device copy of the parameter
                                * slab, same layout, which the layers' products read (each
                                * bn_param.value16 is a view of it); NULL otherwise */
    /* Passes with their branches beside each other (net_lanes.c), made on a device: */
    int *lane;                 /* each layer's lane */
    unsigned char *lane_mark;  /* each layer (and the input): its event is recorded after its
                                * pass, for a layer on another lane to wait for */
    void **lane_done;          /* an event per layer, one for the input, then one per lane */
    int lanes_used;            /* the lanes the last captured forward pass ran on (1: a chain) */
    int backward_beside;       /* set by the caller: a captured backward pass (bn_net_backward_each)
                                * may run branches beside each other too, its `done` callback
                                * queueing only work that follows the layer's own (its update) */
    int backward_lanes_used;   /* the lanes the last captured backward pass ran on */
    bn_status (*after_first)(void *arg); /* set by the caller: queued once the forward pass has
                                * queued its first layer's pass (the next batch's gather, beside
                                * the passes after it, not ahead of the first); NULL for none */
    void *after_first_arg;
} bn_net;

enum { BN_NORM_AUTO_MEAN = 1, BN_NORM_AUTO_STD = 2 };

/* Sets the input's per-channel mean and std (input_shape.c values each; NULL leaves that one),
 * the values `auto` stands for; after setup the copy the loader reads follows. A std that is
 * not above 0 (a constant channel) becomes 1. */
bn_status bn_net_set_input_norm(bn_net *net, const double *mean, const double *std);

/* Reads a model file and creates its layers (not yet set up). *out is owned by the caller
 * (bn_net_free). Errors name file:line. */
bn_status bn_net_from_file(const char *path, bn_net **out);

/* The same from text in memory; `name` stands for the file in messages. */
bn_status bn_net_from_text(const char *text, const char *name, bn_net **out);

/* Infers shapes, allocates blobs for `batch` examples and initialises the parameters from
 * `seed`. With ctx the network runs on that device; with want_input_grad the input's
 * gradient is computed too. With ctx->bf16 the input, every layer's output and every
 * activation gradient hold BF16 on the device, params16 is made, and a layer whose type has no
 * BF16 GPU pass (bn_layer_ops.bf16) is refused. A network that needs more host memory than max_bytes allows, or
 * more device memory than ctx's device has free, is refused with both figures before
 * anything is allocated. */
bn_status bn_net_setup(bn_net *net, int batch, bn_ctx *ctx, int want_input_grad, uint64_t seed);

/* Draws fresh initial parameters from seed (the same values on every path) and sets every
 * buffer to its initial value (and refreshes params16). */
bn_status bn_net_init_params(bn_net *net, uint64_t seed);

/* Copies the parameter slab into params16, rounded to BF16, after the FP32 master weights were
 * written other than by the optimizer's GPU update (initialisation, a checkpoint). Nothing to
 * do without params16. */
bn_status bn_net_refresh_params16(bn_net *net);

/* Uses the first n (<= capacity) examples of every blob for the following passes. */
bn_status bn_net_set_batch(bn_net *net, int n);

/* Forward through every layer; train selects training behaviour (dropout). After the first
 * layer's pass it calls net->after_first where set. */
bn_status bn_net_forward(bn_net *net, int train);

/* Backward from the loss layer (or, without one, from the output gradient already in the
 * last layer's out_grad). Parameter gradients are added to the gradient slab. */
bn_status bn_net_backward(bn_net *net);

/* The same, calling done(arg, net, l) after each layer's backward pass has been run or
 * enqueued, in the order of the pass (the last layer first). An error from done ends it. */
bn_status bn_net_backward_each(bn_net *net, bn_status (*done)(void *arg, bn_net *net, bn_layer *l), void *arg);

/* Layer i's backward pass (bn_layer_backward), after adding into its output gradient the
 * gradients of its output's other readers. bn_net_backward runs it for every layer. */
bn_status bn_net_backward_layer(bn_net *net, int i);

/* Zeroes the gradient slab. */
bn_status bn_net_zero_grad(bn_net *net);

/* The same for a training step on the GPU: the fill runs on the context's side stream, beside
 * the forward pass, and the next bn_net_backward waits for it before any layer adds into the
 * slab (nothing else may read or write the gradients in between). Without a device context it
 * is bn_net_zero_grad. */
bn_status bn_net_zero_grad_beside(bn_net *net);

/* The loss sum and correct count of the last forward (reads them to the host). */
bn_status bn_net_metrics(bn_net *net, double *loss_sum, double *correct);

/* The network's final output blob. */
bn_blob *bn_net_output(bn_net *net);

/* The last layer when it is a loss layer, else NULL. */
bn_layer *bn_net_loss_layer(bn_net *net);

/* The layer named `name`, or NULL. */
bn_layer *bn_net_find_layer(bn_net *net, const char *name);

/* A function called on blobs of a network by bn_net_each_blob; an error it returns ends the walk. */
typedef bn_status (*bn_blob_fn)(bn_blob *b, void *arg);

/* Calls fn(b, arg) on every blob of the network that holds a row per example: the input and its
 * gradient, the labels, each layer's output and output gradient, and the gradient parts of
 * outputs read several times. Returns fn's first error. */
bn_status bn_net_each_batch_blob(bn_net *net, bn_blob_fn fn, void *arg);

/* The same, after the blobs the batch size does not shape: the metrics and the parameter,
 * gradient, buffer and BF16 parameter slabs (not input_norm, which only the host writes). */
bn_status bn_net_each_blob(bn_net *net, bn_blob_fn fn, void *arg);

/* Marks every blob of the network device-newer: after a replayed graph, whose writes the
 * sync states did not see. */
void bn_net_mark_device_written(bn_net *net);

/* The one layer that reads l's output, or NULL when none or several do (a layer that reads it
 * twice counts twice). */
bn_layer *bn_net_sole_consumer(const bn_net *net, const bn_layer *l);

/* Fusion (fusion.c): on a device, hands layers' GPU passes to their neighbours' kernels where
 * the network's rules allow it and the layer types accept. Called by bn_net_setup. */
void bn_net_fuse(bn_net *net);

/* Gradient parts added by the kernels that read them (fusion.c): for each layer whose output has
 * two readers, where the layer whose GPU backward pass reads its output gradient declares
 * sums_grad_part, marks the layer grad_part_to_reader and hands that reader the part (its
 * dy_part).
 * Called by bn_net_fuse; its flags act only on a device. */
void bn_net_fuse_grad_parts(bn_net *net);

/* Channel joins without copies (fusion.c): on a device, after bn_net_fuse, each input of a
 * joins_slices layer whose producer writes nothing else and can write a slice (out_slices, and
 * act_out_slices for the layer whose kernels do its passes) has its output and output gradient
 * replaced by slices of the join's, so that it writes its part in place and reads its gradient
 * where the join's consumers left it. The producer's own blobs are freed. */
bn_status bn_net_join_slices(bn_net *net);

/* Asks the loss layer to fold into its following GPU forwards the running sum of its metrics
 * (into acc, when not NULL) and, with grad, its input gradient (bn_layer_ops.fuse_loss_gpu).
 * Returns 1 when it will: the caller then must not add the metrics again, and runs the backward
 * right after the forward. 0 on the CPU or when the loss layer cannot. */
int bn_net_fuse_loss(bn_net *net, bn_blob *acc, int grad);

/* Ends what bn_net_fuse_loss asked for, once the step is done. */
void bn_net_unfuse_loss(bn_net *net);

/* Whether layer i's output (grad = 0) or output gradient (grad = 1) may hold what is not the
 * layer's after a step: left unwritten on the device, its consumer's pass being fused into a
 * neighbour's kernels that read past it (BN_FUSED_NO_IN, BN_FUSED_NO_IN_GRAD), or written over by
 * a ReLU run in place (bn_layer.in_place: the ReLU's output over its input, its input gradient
 * over its output gradient; where the producer's CPU passes do the ReLU's, bn_layer.cpu_fused,
 * the shared gradient stays the ReLU's output gradient instead). */
int bn_net_blob_unwritten(const bn_net *net, int i, int grad);

/* Decides, once the network's blobs exist, which plain sums have their CPU forward pass written
 * by the producer of one input (bn_layer.cpu_sum_into; fusion.c). */
void bn_net_fuse_cpu_sums(bn_net *net);

/* The first layer that keeps the network's steps out of a CUDA graph (its type leaves
 * bn_layer_ops.graph_safe unset or lacks a GPU pass), or NULL when every layer can be captured. */
const bn_layer *bn_net_graph_blocker(const bn_net *net);

/* Whether every layer can be captured in a CUDA graph (no bn_net_graph_blocker). */
int bn_net_graph_safe(const bn_net *net);

/* Frees the network, its layers and blobs. NULL is fine. */
void bn_net_free(bn_net *net);

#ifdef __cplusplus
}
#endif
#endif
