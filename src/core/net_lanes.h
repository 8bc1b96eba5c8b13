/* net_lanes.h - a network's passes with its independent branches side by side: while a training
 * or evaluation step is captured as a CUDA graph, each layer runs on one of the context's lanes
 * (core/device.h), and events order a layer after the layers it reads (in backward: the layers
 * that read it) that ran on other lanes, so that the graph holds the branches as parallel paths
 * (an inception module's four branches, a residual block's projection beside its convolutions)
 * instead of one chain. Every layer computes what it computes in a chain, with the same kernels:
 * only which kernels may run at the same time changes. */
#ifndef BN_NET_LANES_H
#define BN_NET_LANES_H

#include "net.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Assigns each of net's layers a lane in 0..max_lanes-1 (lane[i] for layer i) and returns how many
 * lanes the assignment uses. In layer order: a layer that `beside` refuses runs on lane 0 (the
 * context's stream); otherwise the first layer to read an output (or the network's input) runs on
 * the lane of its producer (lane 0 for the input), and each later reader whose first input is
 * that output opens a branch on the next of lanes 1..max_lanes-1 in turn. A layer's lane thus
 * follows its first input; its other inputs are waited for. */
int bn_net_plan_lanes(const bn_net *net, int (*beside)(const bn_layer *l, void *arg), void *arg, int max_lanes,
                      int *lane);

/* The forward pass with branches beside each other, where net is on a device whose step is being
 * captured and whose lanes and events an eager forward pass before made (bn_net_lanes_prepare):
 * *ran is then 1 and the pass has run (its status returned); else *ran is 0 and nothing ran. */
bn_status bn_net_forward_beside(bn_net *net, int *ran);

/* The backward pass of bn_net_backward_each (each layer's backward, then done(arg, net, layer))
 * with branches beside each other, where net->backward_beside is set and the forward pass of
 * the same captured step ran on lanes: a layer runs on its forward lane after the layers that
 * read its output on other lanes, and `done` runs on the layer's lane (work it queues follows
 * the layer's). *ran is then 1; else 0 and nothing ran. */
bn_status bn_net_backward_beside(bn_net *net, bn_status (*done)(void *arg, bn_net *net, bn_layer *l), void *arg,
                                 int *ran);

/* After an eager forward pass on a device (every layer's kernels planned for the batch size):
 * the lanes and events that a capture of the same pass will need, where its layers plan more
 * than one lane. Nothing inside a capture, or on the CPU. */
bn_status bn_net_lanes_prepare(bn_net *net);

/* Releases the events bn_net_forward_beside made. */
void bn_net_lanes_free(bn_net *net);

#ifdef __cplusplus
}
#endif
#endif
