/* net_lanes.c - a network's forward pass with its independent branches side by side (net_lanes.h). */
#include "net_lanes.h"

#include <stdlib.h>
#include <string.h>

#include "device_ops.h"

int bn_net_plan_lanes(const bn_net *net, int (*beside)(const bn_layer *l, void *arg), void *arg, int max_lanes,
                      int *lane)
{
    const int n = net->num_layers;
    /* continued[s + 1]: a reader of layer s's output (s = -1: the input) runs on s's lane. */
    unsigned char *continued = calloc((size_t)n + 1, 1);
    int next = 1, used = 1;
    for (int i = 0; i < n; i++) {
        const bn_layer *l = net->layers[i];
        const int s = l->sources[0], base = s < 0 ? 0 : lane[s];
        int k;
        if (!continued || max_lanes < 2 || !beside(l, arg))
            k = 0;
        else if (!continued[s + 1])
            k = base;
        else {
            k = next;
            next = next % (max_lanes - 1) + 1;
        }
        if (continued && k == base) continued[s + 1] = 1;
        lane[i] = k;
        if (k + 1 > used) used = k + 1;
    }
    free(continued);
    return used;
}

static int beside_of(const bn_layer *l, void *arg)
{
    (void)arg;
    return l->ops->forward_beside && l->ops->forward_beside(l);
}

/* The lanes the net's layers plan now (net->lane), after the tables are made. */
static bn_status plan(bn_net *net, int *lanes)
{
    const int n = net->num_layers;
    if (!net->lane) {
        net->lane = calloc((size_t)n, sizeof *net->lane);
        net->lane_mark = calloc((size_t)n + 1, 1);
        if (!net->lane || !net->lane_mark) return bn_error(BN_ERR_NOMEM, "%s: out of host memory", net->source);
    }
    *lanes = bn_net_plan_lanes(net, beside_of, NULL, BN_CTX_LANES, net->lane);
    return BN_OK;
}

/* The lanes and events a captured forward pass will need, made outside the capture: after an
 * eager forward pass, once every layer has planned its kernels for the batch size. */
static bn_status prepare(bn_net *net)
{
    int lanes;
    BN_TRY(plan(net, &lanes));
    if (lanes < 2) return BN_OK;
    const bn_device_ops *dev = bn_device_ops_current();
    BN_TRY(dev->ctx_open_lanes(net->pass.ctx, lanes));
    if (net->lane_done) return BN_OK;
    const int n = net->num_layers;
    void **done = calloc((size_t)n + 1, sizeof *done);
    if (!done) return bn_error(BN_ERR_NOMEM, "%s: out of host memory", net->source);
    for (int i = 0; i <= n; i++) {
        bn_status s = dev->order_event_create(&done[i]);
        if (s != BN_OK) {
            for (int j = 0; j < i; j++) dev->order_event_destroy(done[j]);
            free(done);
            return s;
        }
    }
    net->lane_done = done;
    return BN_OK;
}

/* The lane of what input j of layer i reads. */
static int source_lane(const bn_net *net, const bn_layer *l, int j)
{
    return l->sources[j] < 0 ? 0 : net->lane[l->sources[j]];
}

/* Which layers' events are recorded (net->lane_mark; index num_layers: the input's, on the
 * context's stream): those read on another lane, and each lane's last, which the context's
 * stream waits for at the end. last[k]: lane k's last layer, -1 for none. */
static void mark(bn_net *net, int lanes, int *last)
{
    const int n = net->num_layers;
    memset(net->lane_mark, 0, (size_t)n + 1);
    for (int k = 0; k < lanes; k++) last[k] = -1;
    for (int i = 0; i < n; i++) {
        const bn_layer *l = net->layers[i];
        const int inputs = l->num_inputs > 0 ? l->num_inputs : 1;
        for (int j = 0; j < inputs; j++)
            if (source_lane(net, l, j) != net->lane[i]) net->lane_mark[l->sources[j] < 0 ? n : l->sources[j]] = 1;
        last[net->lane[i]] = i;
    }
    for (int k = 1; k < lanes; k++)
        if (last[k] >= 0) net->lane_mark[last[k]] = 1;
}

bn_status bn_net_forward_beside(bn_net *net, int *ran)
{
    *ran = 0;
    bn_ctx *ctx = net->pass.ctx;
    if (!ctx || !ctx->capturing || !net->lane_done) return BN_OK;
    int lanes;
    BN_TRY(plan(net, &lanes));
    /* Fewer lanes made than planned: the layers planned otherwise at the eager step; a chain. */
    net->lanes_used = 1;
    if (lanes < 2 || lanes > ctx->num_lanes) return BN_OK;
    net->lanes_used = lanes;
    const int n = net->num_layers;
    int last[BN_CTX_LANES];
    mark(net, lanes, last);
    const bn_device_ops *dev = bn_device_ops_current();
    *ran = 1;
    bn_status s = net->lane_mark[n] ? dev->ctx_record(ctx, net->lane_done[n]) : BN_OK;
    for (int i = 0; i < n && s == BN_OK; i++) {
        bn_layer *l = net->layers[i];
        s = dev->ctx_set_lane(ctx, net->lane[i]);
        const int inputs = l->num_inputs > 0 ? l->num_inputs : 1;
        for (int j = 0; j < inputs && s == BN_OK; j++)
            if (source_lane(net, l, j) != net->lane[i])
                s = dev->ctx_wait(ctx, net->lane_done[l->sources[j] < 0 ? n : l->sources[j]]);
        if (s == BN_OK) s = bn_layer_forward(l, &net->pass);
        if (s == BN_OK && net->lane_mark[i]) s = dev->ctx_record(ctx, net->lane_done[i]);
    }
    dev->ctx_leave_lanes(ctx);
    for (int k = 1; k < lanes && s == BN_OK; k++)
        if (last[k] >= 0) s = dev->ctx_wait(ctx, net->lane_done[last[k]]);
    return s;
}

bn_status bn_net_lanes_prepare(bn_net *net)
{
    bn_ctx *ctx = net->pass.ctx;
    if (!ctx || ctx->capturing || net->num_layers < 2) return BN_OK;
    return prepare(net);
}

void bn_net_lanes_free(bn_net *net)
{
    if (net->lane_done) {
        const bn_device_ops *dev = bn_device_ops_current();
        for (int i = 0; i <= net->num_layers; i++) dev->order_event_destroy(net->lane_done[i]);
        free(net->lane_done);
        net->lane_done = NULL;
    }
    free(net->lane);
    free(net->lane_mark);
    net->lane = NULL;
    net->lane_mark = NULL;
}
