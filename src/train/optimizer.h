/* optimizer.h - the optimizer of a run over the network's contiguous parameter slab, with
 * per-parameter multipliers: rate = lr(iter) * lr_mult and decay = weight_decay * decay_mult for
 * each element. The optimizer itself (its keys, state and rule for one element) is an entry of
 * the table in core/optimizers/optimizers.h; its state lives in slabs of the same layout as the
 * parameters. The rate comes from the learning-rate policy's table (core/lr_policies/). */
#ifndef BN_OPTIMIZER_H
#define BN_OPTIMIZER_H

#include "core/device.h"
#include "core/net.h"
#include "core/optimizers/optimizer_type.h"
#include "core/optimizers/update_args.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What a layer's backward pass did with the side stream when last seen (bn_optimizer.layer_side):
 * not seen yet, put work there, or kept to the context's stream. */
enum { BN_SIDE_UNSEEN, BN_SIDE_USED, BN_SIDE_NEVER };

typedef struct bn_optimizer {
    bn_train_config cfg;        /* cfg.optimizer: the optimizer table's entry */
    long iter;                  /* steps taken: the lr policy's clock */
    long max_iter;              /* steps of the whole run, for the policies that read it */
    bn_blob *state[BN_OPTIMIZER_MAX_STATE]; /* named as the entry's state, each the layout
                                               of net->params */
    int num_state;
    bn_param_segment *segments;
    int num_segments;
    void *device_segments;      /* the segment table on the device (GPU path) */
    bn_step_rates *dev_schedule; /* GPU: the rates of a run of steps (bn_optimizer_schedule) */
    int *dev_cursor;            /* GPU: one past the index into dev_schedule of the step under way
                                   (bn_optimizer_begin_step moves it on) */
    long schedule_first, schedule_len, schedule_cap;
    int schedule_ahead;         /* GPU: the schedule in place was queued ahead of its run's first
                                   step (bn_optimizer_schedule_ahead) */
    bn_upload_buf schedule_up;  /* GPU: the pinned buffer the rates are uploaded through */
    int held;                   /* a layer-by-layer update held back to go with the next layer's: */
    int held_first, held_last;  /* its layers (indices), */
    int held_next;              /* and the layer it waits for */
    unsigned forks_seen;        /* the context's side_forks after the last update queued */
    unsigned char *layer_side;  /* per layer: what its backward pass last did with the side stream
                                   (BN_SIDE_*), for the holding of updates (optimizer.c) */
} bn_optimizer;

/* The optimizer cfg->optimizer names for net's parameters with zeroed state; *out is freed
 * with bn_optimizer_free. */
bn_status bn_optimizer_create(bn_net *net, const bn_train_config *cfg, bn_optimizer **out);

/* The learning rate at step iter: cfg.lr_policy's, scaled during the warmup. */
double bn_optimizer_lr(const bn_optimizer *o, long iter);

/* The rate of step iter and what the optimizer works out for it (its per_step). */
bn_step_rates bn_optimizer_rates(const bn_optimizer *o, long iter);

/* Starts a training step on the GPU (nothing on the CPU): while a schedule covers the step, moves
 * the device's schedule cursor on to it, on the side stream (where there is one) after what the
 * context stream holds, so that the backward pass's join orders it before every update of the
 * step, and after every update of the step before. Each training step calls it once, before its
 * forward pass; the updates then read their rates at the cursor, wherever and in whatever order
 * they run. */
bn_status bn_optimizer_begin_step(bn_optimizer *o, bn_net *net);
bn_status bn_optimizer_begin_step_gpu(bn_optimizer *o, bn_net *net);

/* Applies one update from net's gradient slab and advances iter. */
bn_status bn_optimizer_step(bn_optimizer *o, bn_net *net);

/* The same step layer by layer, on the GPU: called after each layer's backward pass (through
 * bn_net_backward_each), it enqueues the update of that layer's parameters on the context's
 * side stream once everything the context stream holds has run, so that it runs beside the
 * backward passes of the layers below; the net's backward pass joins it. The small update of a
 * layer whose weight gradient went to the side stream is held back and launched with the next
 * layer's where that layer's gradient, in an earlier step, did not, and the backward pass takes
 * it on the same lane.
 * bn_optimizer_end_layered_step launches an update still held, on the context's stream, and
 * advances iter. Layers without parameters are skipped. */
bn_status bn_optimizer_update_layer(bn_optimizer *o, bn_net *net, const bn_layer *l);
bn_status bn_optimizer_end_layered_step(bn_optimizer *o, bn_net *net);

/* bn_optimizer_update_layer's updates of layers first..last (indices; their parameters are one
 * run of the slab, as the layers are carved in order) in one launch, queued on `stream` (a
 * cudaStream_t) instead, which the caller has ordered after their gradients and will join before
 * the parameters are read again: data-parallel training updates each bucket of layers where its
 * gradients were all-reduced. */
bn_status bn_optimizer_update_layers_on(bn_optimizer *o, bn_net *net, int first, int last, void *stream);

/* The update bn_optimizer_update_layers_on would launch for layers first..last, described for a
 * kernel that applies it in its own pass (the gradient sum of a pushed bucket, dist.h) instead; the
 * caller launches it at most once, where that launch would have stood. GPU only. */
bn_status bn_optimizer_update_args(bn_optimizer *o, bn_net *net, int first, int last, bn_update_args *u);

void bn_optimizer_free(bn_optimizer *o);

/* The update on the device: one kernel over the slab (optimizer_gpu.cu). While a schedule
 * covers the step, the kernel reads its rates from the device, so a captured step replays
 * with the right ones; otherwise it takes r. */
bn_status bn_optimizer_step_gpu(bn_optimizer *o, bn_net *net, bn_step_rates r);

/* The update of slab elements [lo, hi) (a layer's, or a run of layers') on `stream`, or on the side
 * stream after a fork when stream is NULL (bn_optimizer_update_layer). */
bn_status bn_optimizer_update_range_gpu(bn_optimizer *o, bn_net *net, size_t lo, size_t hi, bn_step_rates r,
                                        void *stream);
/* The update of slab elements [lo, hi) with rates r as a kernel takes it. */
bn_status bn_optimizer_range_args_gpu(bn_optimizer *o, bn_net *net, size_t lo, size_t hi, bn_step_rates r,
                                      bn_update_args *u);

/* GPU: uploads the rates of steps first .. first+count-1 (as bn_optimizer_rates gives them)
 * and sets the device cursor before `first` (its first step's bn_optimizer_begin_step moves it
 * there). The
 * uploads are queued on the context stream, after the steps queued before them, and not waited
 * for; where bn_optimizer_schedule_ahead has queued the same run already, nothing more is. A
 * table that has to grow moves, so net's context then tells captured graphs to capture again. */
bn_status bn_optimizer_schedule(bn_optimizer *o, bn_net *net, long first, long count);

/* The same, queued while the steps before `first` are still queued (the next epoch's, after the
 * last step of this one), so that bn_optimizer_schedule at the epoch's start finds it in place
 * (o->schedule_ahead); where the table would have to grow, nothing is queued and the epoch's
 * start uploads it. */
bn_status bn_optimizer_schedule_ahead(bn_optimizer *o, long first, long count);

#ifdef __cplusplus
}
#endif
#endif
