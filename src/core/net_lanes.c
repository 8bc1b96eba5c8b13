/* net_lanes.c - a network's passes with its independent branches side by side (net_lanes.h). */
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

/* The passes a layer must run beside others: its forward, and its backward where the network's
 * backward pass runs on the lanes too. */
static int beside_of(const bn_layer *l, void *arg)
{
    const unsigned need = *(const unsigned *)arg;
    return l->ops->beside && (l->ops->beside(l) & need) == need;
}

/* The events a net keeps: one a layer, one for the input, one a lane (net->lane_done). */
static int events_of(const bn_net *net)
{
    return net->num_layers + 1 + BN_CTX_LANES;
}

/* The lanes the net's layers plan now, into net->lane (its tables made on first use). */
static bn_status plan(bn_net *net, int *lanes)
{
    const int n = net->num_layers;
    if (!net->lane) {
        net->lane = calloc((size_t)n, sizeof *net->lane);
        net->lane_mark = calloc((size_t)n + 1, 1);
        if (!net->lane || !net->lane_mark) return bn_error(BN_ERR_NOMEM, "%s: out of host memory", net->source);
    }
    unsigned need = BN_BESIDE_FORWARD | (net->backward_beside ? BN_BESIDE_BACKWARD : 0u);
    *lanes = bn_net_plan_lanes(net, beside_of, &need, BN_CTX_LANES, net->lane);
    return BN_OK;
}

bn_status bn_net_lanes_prepare(bn_net *net)
{
    if (!net->pass.ctx || net->pass.ctx->capturing || net->num_layers < 2) return BN_OK;
    int lanes;
    BN_TRY(plan(net, &lanes));
    if (lanes < 2) return BN_OK;
    const bn_device_ops *dev = bn_device_ops_current();
    BN_TRY(dev->ctx_open_lanes(net->pass.ctx, lanes));
    if (net->lane_done) return BN_OK;
    const int events = events_of(net);
    void **done = calloc((size_t)events, sizeof *done);
    if (!done) return bn_error(BN_ERR_NOMEM, "%s: out of host memory", net->source);
    for (int i = 0; i < events; i++) {
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

/* The lane of what input j of layer l reads. */
static int source_lane(const bn_net *net, const bn_layer *l, int j)
{
    return l->sources[j] < 0 ? 0 : net->lane[l->sources[j]];
}

static int inputs_of(const bn_layer *l)
{
    return l->num_inputs > 0 ? l->num_inputs : 1;
}

/* The lanes planned for a captured pass, with `lanes` their count; 0 where the pass runs as a
 * chain (not captured, one lane, or fewer lanes made than planned: the layers planned otherwise
 * at the eager step). */
static bn_status captured_plan(bn_net *net, int *lanes)
{
    *lanes = 0;
    bn_ctx *ctx = net->pass.ctx;
    if (!ctx || !ctx->capturing || !net->lane_done) return BN_OK;
    int k;
    BN_TRY(plan(net, &k));
    if (k >= 2 && k <= ctx->num_lanes) *lanes = k;
    return BN_OK;
}

/* The forward pass's marks (net->lane_mark; index num_layers: the input's, on the context's
 * stream): the layers read on another lane. */
static void mark_forward(bn_net *net)
{
    const int n = net->num_layers;
    memset(net->lane_mark, 0, (size_t)n + 1);
    for (int i = 0; i < n; i++) {
        const bn_layer *l = net->layers[i];
        for (int j = 0; j < inputs_of(l); j++)
            if (source_lane(net, l, j) != net->lane[i]) net->lane_mark[l->sources[j] < 0 ? n : l->sources[j]] = 1;
    }
}

/* Lane `into` waits for everything queued so far on the other lanes, their side streams
 * included (each joined into its lane first), and is entered. */
static bn_status settle(bn_net *net, int lanes, int into)
{
    bn_ctx *ctx = net->pass.ctx;
    const bn_device_ops *dev = bn_device_ops_current();
    void **end = net->lane_done + net->num_layers + 1;
    for (int k = 0; k < lanes; k++) {
        if (k == into) continue;
        BN_TRY(dev->ctx_set_lane(ctx, k));
        BN_TRY(dev->ctx_join_side(ctx));
        BN_TRY(dev->ctx_record(ctx, end[k]));
    }
    BN_TRY(dev->ctx_set_lane(ctx, into));
    for (int k = 0; k < lanes; k++)
        if (k != into) BN_TRY(dev->ctx_wait(ctx, end[k]));
    return BN_OK;
}

/* The end of a pass on lanes: the context's stream waits for every lane (after s, the pass's
 * status, is BN_OK), and the lanes are left either way. */
static bn_status join_lanes(bn_net *net, int lanes, bn_status s)
{
    if (s == BN_OK) s = settle(net, lanes, 0);
    bn_device_ops_current()->ctx_leave_lanes(net->pass.ctx);
    return s;
}

bn_status bn_net_forward_beside(bn_net *net, int *ran)
{
    *ran = 0;
    int lanes;
    BN_TRY(captured_plan(net, &lanes));
    net->lanes_used = lanes ? lanes : 1;
    if (!lanes) return BN_OK;
    const int n = net->num_layers;
    mark_forward(net);
    bn_ctx *ctx = net->pass.ctx;
    const bn_device_ops *dev = bn_device_ops_current();
    *ran = 1;
    bn_status s = net->lane_mark[n] ? dev->ctx_record(ctx, net->lane_done[n]) : BN_OK;
    for (int i = 0; i < n && s == BN_OK; i++) {
        bn_layer *l = net->layers[i];
        s = dev->ctx_set_lane(ctx, net->lane[i]);
        for (int j = 0; j < inputs_of(l) && s == BN_OK; j++)
            if (source_lane(net, l, j) != net->lane[i])
                s = dev->ctx_wait(ctx, net->lane_done[l->sources[j] < 0 ? n : l->sources[j]]);
        if (s == BN_OK) s = bn_layer_forward(l, &net->pass);
        if (s == BN_OK && net->lane_mark[i]) s = dev->ctx_record(ctx, net->lane_done[i]);
        if (s == BN_OK && i == 0 && net->after_first) {
            /* On the context's own stream, as before the forward pass. */
            s = dev->ctx_set_lane(ctx, 0);
            if (s == BN_OK) s = net->after_first(net->after_first_arg);
        }
    }
    return join_lanes(net, lanes, s);
}

/* Calls fn(net, reader, env) for each layer that reads layer i's output (once per input). */
static bn_status each_reader(bn_net *net, int i, bn_status (*fn)(bn_net *, int, void *), void *env)
{
    for (int r = i + 1; r < net->num_layers; r++) {
        const bn_layer *l = net->layers[r];
        for (int j = 0; j < inputs_of(l); j++)
            if (l->sources[j] == i) BN_TRY(fn(net, r, env));
    }
    return BN_OK;
}

static bn_status mark_reader(bn_net *net, int r, void *env)
{
    if (net->lane[r] != *(const int *)env) net->lane_mark[r] = 1;
    return BN_OK;
}

static bn_status wait_reader(bn_net *net, int r, void *env)
{
    if (net->lane[r] == *(const int *)env) return BN_OK;
    return bn_device_ops_current()->ctx_wait(net->pass.ctx, net->lane_done[r]);
}

bn_status bn_net_backward_beside(bn_net *net, bn_status (*done)(void *arg, bn_net *net, bn_layer *l), void *arg,
                                 int *ran)
{
    *ran = 0;
    int lanes = 0;
    if (net->backward_beside) BN_TRY(captured_plan(net, &lanes));
    net->backward_lanes_used = lanes ? lanes : 1;
    if (!lanes) return BN_OK;
    const int n = net->num_layers;
    /* The backward marks: the readers of an output on another lane than its producer's. The
     * readers of the network's input write parts of its gradient, which the net adds after the
     * lanes are joined. */
    memset(net->lane_mark, 0, (size_t)n + 1);
    for (int i = n - 1; i >= 0; i--) BN_TRY(each_reader(net, i, mark_reader, &net->lane[i]));
    bn_ctx *ctx = net->pass.ctx;
    const bn_device_ops *dev = bn_device_ops_current();
    *ran = 1;
    bn_status s = BN_OK;
    for (int i = n - 1; i >= 0 && s == BN_OK; i--) {
        s = dev->ctx_set_lane(ctx, net->lane[i]);
        if (s == BN_OK) s = each_reader(net, i, wait_reader, &net->lane[i]);
        if (s == BN_OK) s = bn_net_backward_layer(net, i);
        if (s == BN_OK && done) s = done(arg, net, net->layers[i]);
        if (s == BN_OK && net->lane_mark[i]) s = dev->ctx_record(ctx, net->lane_done[i]);
    }
    return join_lanes(net, lanes, s);
}

void bn_net_lanes_free(bn_net *net)
{
    if (net->lane_done) {
        const bn_device_ops *dev = bn_device_ops_current();
        for (int i = 0; i < events_of(net); i++) dev->order_event_destroy(net->lane_done[i]);
        free(net->lane_done);
        net->lane_done = NULL;
    }
    free(net->lane);
    free(net->lane_mark);
    net->lane = NULL;
    net->lane_mark = NULL;
}
