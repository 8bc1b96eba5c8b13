/* optimizer.h - SGD with momentum and L2 weight decay over the network's contiguous
 * parameter slab (Caffe's rule, with per-parameter multipliers):
 *     g = grad + weight_decay * decay_mult * w
 *     v = momentum * v + lr(iter) * lr_mult * g
 *     w = w - v
 * The momentum lives in a slab of the same layout as the parameters. */
#ifndef BN_OPTIMIZER_H
#define BN_OPTIMIZER_H

#include "core/net.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A run of the slab sharing one pair of multipliers (one parameter, or several in a row). */
typedef struct bn_param_segment {
    size_t offset, count;
    float lr_mult, decay_mult;
} bn_param_segment;

typedef struct bn_sgd {
    bn_train_config cfg;
    long iter;                  /* steps taken: the lr policy's clock */
    long max_iter;              /* steps of the whole run, for the cosine policy */
    bn_blob *momentum;          /* same layout as net->params */
    bn_param_segment *segments;
    int num_segments;
    void *device_segments;      /* the segment table on the device (GPU path) */
    float *dev_schedule;        /* GPU: learning rates of a run of steps (bn_sgd_schedule) */
    int *dev_cursor;            /* GPU: index into dev_schedule of the next update */
    long schedule_first, schedule_len, schedule_cap;
} bn_sgd;

/* An optimizer for net's parameters with zero momentum; *out is freed with bn_sgd_free. */
bn_status bn_sgd_create(bn_net *net, const bn_train_config *cfg, bn_sgd **out);

/* The learning rate the policy gives at step iter. */
double bn_sgd_lr(const bn_sgd *o, long iter);

/* Applies one update from net's gradient slab and advances iter. */
bn_status bn_sgd_step(bn_sgd *o, bn_net *net);

/* The same step layer by layer, on the GPU: called after each layer's backward pass (through
 * bn_net_backward_each), it enqueues the update of that layer's parameters on the context's
 * side stream once everything the context stream holds has run, so that it runs beside the
 * backward passes of the layers below; the net's backward pass joins it. The update of the
 * net's first layer with parameters, the last to come, moves the device's schedule cursor.
 * bn_sgd_end_layered_step then advances iter. Layers without parameters are skipped. */
bn_status bn_sgd_update_layer(bn_sgd *o, bn_net *net, const bn_layer *l);
void bn_sgd_end_layered_step(bn_sgd *o);

void bn_sgd_free(bn_sgd *o);

/* The update on the device: one kernel over the slab (optimizer_gpu.cu). While a schedule
 * covers the step, the kernel reads its rate from the device, so a captured step replays
 * with the right rate; otherwise it takes lr. */
bn_status bn_sgd_step_gpu(bn_sgd *o, bn_net *net, float lr);

/* One layer's update on the side stream (bn_sgd_update_layer); `last`: the step's last update. */
bn_status bn_sgd_update_layer_gpu(bn_sgd *o, bn_net *net, const bn_layer *l, float lr, int last);

/* GPU: uploads the learning rates of steps first .. first+count-1 (as bn_sgd_lr gives them)
 * and points the device cursor at `first`; updates then advance the cursor on the device. */
bn_status bn_sgd_schedule(bn_sgd *o, long first, long count);

#ifdef __cplusplus
}
#endif
#endif
