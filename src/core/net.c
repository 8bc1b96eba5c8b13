/* net.c - a network at work: its blobs walked, the batch size changed, the forward and backward
 * passes (with the sums of gradients where several layers read one output), the gradients
 * zeroed, and what callers look up in it. Built in net_build.c, set up in net_setup.c, fused in
 * fusion.c. */
#include "net.h"

#include <stdlib.h>
#include <string.h>

#include "device_ops.h"
#include "net_lanes.h"
#include "parallel.h"

static bn_status each_of(bn_blob **blobs, int n, bn_blob_fn fn, void *arg)
{
    for (int i = 0; i < n; i++)
        if (blobs[i]) BN_TRY(fn(blobs[i], arg));
    return BN_OK;
}

bn_status bn_net_each_batch_blob(bn_net *net, bn_blob_fn fn, void *arg)
{
    bn_blob *fixed[] = {net->input, net->input_grad, net->labels};
    BN_TRY(each_of(fixed, 3, fn, arg));
    BN_TRY(each_of(net->input_grad_parts, net->num_input_grad_parts, fn, arg));
    for (int i = 0; i < net->num_layers; i++) {
        bn_layer *l = net->layers[i];
        /* A layer run in place has the blobs of the layer it reads: each blob is walked once. */
        bn_blob *own[] = {l->out, l->out_grad};
        if (!l->in_place) BN_TRY(each_of(own, 2, fn, arg));
        BN_TRY(each_of(l->grad_parts, l->num_grad_parts, fn, arg));
    }
    return BN_OK;
}

bn_status bn_net_each_blob(bn_net *net, bn_blob_fn fn, void *arg)
{
    bn_blob *fixed[] = {net->metrics, net->params, net->grads, net->buffers, net->params16};
    BN_TRY(each_of(fixed, 5, fn, arg));
    return bn_net_each_batch_blob(net, fn, arg);
}

static bn_status reshape_batch(bn_blob *b, void *n)
{
    return bn_blob_reshape(b, *(int *)n, b->c, b->h, b->w);
}

bn_status bn_net_set_batch(bn_net *net, int n)
{
    if (n <= 0 || n > net->capacity)
        return bn_error(BN_ERR_INTERNAL, "%s: batch %d outside 1..%d", net->source, n, net->capacity);
    if (n == net->batch) return BN_OK;
    BN_TRY(bn_net_each_batch_blob(net, reshape_batch, &n));
    net->batch = n;
    return BN_OK;
}

bn_status bn_net_forward(bn_net *net, int train)
{
    net->pass.train = train;
    int ran = 0;
    if (net->pass.ctx) {
        bn_status s = bn_net_forward_beside(net, &ran);
        if (ran || s != BN_OK) return s;
    }
    for (int i = 0; i < net->num_layers; i++) {
        BN_TRY(bn_layer_forward(net->layers[i], &net->pass));
        if (i == 0 && net->after_first) BN_TRY(net->after_first(net->after_first_arg));
    }
    return bn_net_lanes_prepare(net);
}

/* dst += src over a range, for the pool; restrict so that the loop vectorises. */
typedef struct sum_run {
    float *dst;
    const float *src;
} sum_run;

static void add_into(float *restrict dst, const float *restrict src, size_t n)
{
    for (size_t e = 0; e < n; e++) dst[e] += src[e];
}

static void add_range(void *arg, size_t lo, size_t hi)
{
    const sum_run *r = arg;
    add_into(r->dst + lo, r->src + lo, hi - lo);
}

/* Adds the gradients that the second and later readers of an output wrote into the gradient
 * its first reader wrote, in reader order: the same float additions on the CPU and the GPU. */
static bn_status add_grad_parts(bn_net *net, bn_blob *grad, bn_blob **parts, int n)
{
    if (!grad || n == 0) return BN_OK;
    size_t count = bn_blob_count(grad);
    bn_ctx *ctx = net->pass.ctx;
    const bn_device_ops *dev = bn_device_ops_current();
    for (int k = 0; k < n; k++) {
        if (ctx && bn_blob_is_bf16(grad)) {
            void *dst = bn_blob_dev16_wr(grad);
            const void *src = dst ? bn_blob_dev16_rd(parts[k]) : NULL;
            if (!src) return bn_last_status();
            BN_TRY(dev->add_bf16(dst, src, count, ctx));
        } else if (ctx) {
            BN_DEV_WR(dst, grad);
            BN_DEV_RD(src, parts[k]);
            BN_TRY(dev->add(dst, src, count, ctx));
        } else {
            BN_HOST_WR(dst, grad);
            BN_HOST_RD(src, parts[k]);
            sum_run r = {dst, src};
            bn_parallel_ranges(count, 0, add_range, &r);
        }
    }
    return BN_OK;
}

bn_status bn_net_backward_layer(bn_net *net, int i)
{
    bn_layer *l = net->layers[i];
    if (l->num_grad_parts && !(net->pass.ctx && l->grad_part_to_reader)) {
        bn_nvtx_push(l->name, l->ops->kind);
        bn_nvtx_push("gradient sum", l->ops->kind);
        bn_status s = add_grad_parts(net, l->out_grad, l->grad_parts, l->num_grad_parts);
        bn_nvtx_pop();
        bn_nvtx_pop();
        BN_TRY(s);
    }
    net->pass.dy_part = net->pass.ctx ? l->dy_part : NULL;
    bn_status s = bn_layer_backward(l, &net->pass);
    net->pass.dy_part = NULL;
    return s;
}

bn_status bn_net_backward(bn_net *net)
{
    return bn_net_backward_each(net, NULL, NULL);
}

bn_status bn_net_backward_each(bn_net *net, bn_status (*done)(void *arg, bn_net *net, bn_layer *l), void *arg)
{
    bn_ctx *ctx = net->pass.ctx;
    bn_status s = BN_OK;
    /* Side work queued before the backward pass (bn_net_zero_grad_beside) ends before any layer
     * adds into the gradients. */
    if (ctx) BN_TRY(bn_device_ops_current()->ctx_join_side(ctx));
    net->pass.defer_joins = ctx != NULL;
    int ran = 0;
    if (ctx) s = bn_net_backward_beside(net, done, arg, &ran);
    for (int i = net->num_layers - 1; !ran && i >= 0 && s == BN_OK; i--) {
        s = bn_net_backward_layer(net, i);
        if (s == BN_OK && done) s = done(arg, net, net->layers[i]);
    }
    if (s == BN_OK) s = add_grad_parts(net, net->input_grad, net->input_grad_parts, net->num_input_grad_parts);
    /* What the forward left for here (the loss's metrics), beside the side stream's last work. */
    for (int i = 0; ctx && s == BN_OK && i < net->num_layers; i++) {
        bn_layer *l = net->layers[i];
        if (l->ops->finish_gpu) s = l->ops->finish_gpu(l, &net->pass);
    }
    net->pass.defer_joins = 0;
    /* Work the layers left on the side stream (weight gradients) ends here, before anything
     * reads the gradients. */
    if (ctx) {
        bn_status j = bn_device_ops_current()->ctx_join_side(ctx);
        if (s == BN_OK) s = j;
    }
    return s;
}

bn_status bn_net_zero_grad(bn_net *net)
{
    return net->grads ? bn_blob_zero(net->grads) : BN_OK;
}

bn_status bn_net_zero_grad_beside(bn_net *net)
{
    bn_ctx *ctx = net->pass.ctx;
    if (!net->grads || !ctx || !ctx->side_stream) return bn_net_zero_grad(net);
    float *d = bn_blob_dev_wr(net->grads);
    if (!d) return bn_last_status();
    size_t bytes = bn_blob_count(net->grads) * sizeof(float);
    return bn_device_ops_current()->ctx_zero_beside(ctx, d, bytes);
}

bn_status bn_net_metrics(bn_net *net, double *loss_sum, double *correct)
{
    const float *m = bn_blob_host_rd(net->metrics);
    if (!m) return bn_last_status();
    *loss_sum = m[0];
    *correct = m[1];
    return BN_OK;
}

bn_blob *bn_net_output(bn_net *net)
{
    return net->layers[net->num_layers - 1]->out;
}

bn_layer *bn_net_loss_layer(bn_net *net)
{
    bn_layer *last = net->layers[net->num_layers - 1];
    return last->ops->is_loss ? last : NULL;
}

bn_layer *bn_net_find_layer(bn_net *net, const char *name)
{
    int i = bn_name_table_get(net->names, name);
    return i >= 0 ? net->layers[i] : NULL;
}

static void free_layer(bn_layer *l)
{
    if (l->ops->destroy) l->ops->destroy(l);
    else free(l->priv);
    for (int k = 0; k < l->num_params; k++) {
        bn_blob_free(l->params[k].value);
        bn_blob_free(l->params[k].grad);
        bn_blob_free(l->params[k].value16);
    }
    for (int k = 0; k < l->num_buffers; k++) bn_blob_free(l->buffers[k].value);
    if (!l->in_place) {
        bn_blob_free(l->out);
        bn_blob_free(l->out_grad);
    }
    for (int k = 0; k < l->num_grad_parts; k++) bn_blob_free(l->grad_parts[k]);
    free(l->grad_parts);
    free(l);
}

void bn_net_free(bn_net *net)
{
    if (!net) return;
    bn_net_lanes_free(net);
    for (int i = 0; i < net->num_layers; i++) free_layer(net->layers[i]);
    free(net->layers);
    bn_name_table_free(net->names);
    bn_blob *own[] = {net->input,  net->input_grad, net->labels,  net->metrics,
                      net->params, net->grads,      net->buffers, net->params16, net->input_norm};
    for (size_t i = 0; i < sizeof own / sizeof own[0]; i++) bn_blob_free(own[i]);
    for (int k = 0; k < net->num_input_grad_parts; k++) bn_blob_free(net->input_grad_parts[k]);
    free(net->input_grad_parts);
    free(net->description);
    free(net->input_mean);
    free(net->input_std);
    bn_options_clear(&net->data);
    free(net);
}

static bn_status mark_written(bn_blob *b, void *arg)
{
    (void)arg;
    bn_blob_mark_device_written(b);
    return BN_OK;
}

void bn_net_mark_device_written(bn_net *net)
{
    bn_net_each_blob(net, mark_written, NULL);
}

const bn_layer *bn_net_graph_blocker(const bn_net *net)
{
    for (int i = 0; i < net->num_layers; i++) {
        const bn_layer_ops *ops = net->layers[i]->ops;
        if (!ops->graph_safe || !ops->forward_gpu || !ops->backward_gpu) return net->layers[i];
    }
    return NULL;
}

int bn_net_graph_safe(const bn_net *net)
{
    return bn_net_graph_blocker(net) == NULL;
}
