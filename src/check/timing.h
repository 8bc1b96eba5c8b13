/* timing.h - per-layer forward and backward times of a network, like `caffe time`:
 * CUDA events on the GPU, each step queued behind a hold of the stream so that the events read
 * the device's time rather than the host's launches; a monotonic clock on the CPU; after warm-up
 * iterations. */
#ifndef BN_TIMING_H
#define BN_TIMING_H

#include "core/net.h"
#include "train/optimizer.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct bn_layer_time {
    double forward_ms;     /* mean over the timed iterations */
    double backward_ms;
} bn_layer_time;

typedef struct bn_time_report {
    bn_layer_time *layers; /* one per layer, owned by the report */
    int num_layers;
    double update_ms;      /* the optimizer's update */
    double step_ms;        /* forward + backward + update, measured around the whole step */
    int batch, iters;
    int held;              /* GPU: the steps ran behind a hold (0: a pass waited for the device, so
                              the figures include the host's launches) */
} bn_time_report;

/* Times `iters` training steps of a set-up net (after `warmup` untimed ones) on random
 * inputs and labels; opt may be NULL (no update timed). Free the report with
 * bn_time_report_free. */
bn_status bn_time_net(bn_net *net, bn_optimizer *opt, int warmup, int iters, bn_time_report *out);

void bn_time_report_free(bn_time_report *r);

#ifdef __cplusplus
}
#endif
#endif
