#include "optimizer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static bn_status build_segments(bn_sgd *o, bn_net *net)
{
    int total = 0;
    for (int i = 0; i < net->num_layers; i++) total += net->layers[i]->num_params;
    o->segments = calloc(total ? (size_t)total : 1, sizeof *o->segments);
    if (!o->segments) return bn_error(BN_ERR_NOMEM, "out of host memory for the optimizer");
    for (int i = 0; i < net->num_layers; i++) {
        bn_layer *l = net->layers[i];
        for (int k = 0; k < l->num_params; k++) {
            bn_param *p = &l->params[k];
            bn_param_segment *last = o->num_segments ? &o->segments[o->num_segments - 1] : NULL;
            if (last && last->lr_mult == p->lr_mult && last->decay_mult == p->decay_mult &&
                last->offset + last->count == p->value->offset) {
                last->count += bn_blob_count(p->value);
                continue;
            }
            o->segments[o->num_segments++] = (bn_param_segment){
                p->value->offset, bn_blob_count(p->value), p->lr_mult, p->decay_mult};
        }
    }
    return BN_OK;
}

bn_status bn_sgd_create(bn_net *net, const bn_train_config *cfg, bn_sgd **out)
{
    *out = NULL;
    bn_sgd *o = calloc(1, sizeof *o);
    if (!o) return bn_error(BN_ERR_NOMEM, "out of host memory for the optimizer");
    o->cfg = *cfg;
    bn_status s = build_segments(o, net);
    if (s == BN_OK && net->num_params) {
        o->momentum = bn_blob_new("momentum", (int)net->num_params, 1, 1, 1);
        if (!o->momentum) s = bn_last_status();
        else if (net->pass.ctx) s = bn_blob_reserve_device(o->momentum);
        if (s == BN_OK) s = bn_blob_zero(o->momentum);
    }
    if (s != BN_OK) {
        bn_sgd_free(o);
        return s;
    }
    *out = o;
    return BN_OK;
}

double bn_sgd_lr(const bn_sgd *o, long iter)
{
    const bn_train_config *c = &o->cfg;
    switch (c->lr_policy) {
    case BN_LR_FIXED: return c->lr;
    case BN_LR_STEP: return c->lr * pow(c->gamma, (double)(iter / c->stepsize));
    case BN_LR_INV: return c->lr * pow(1.0 + c->gamma * (double)iter, -c->power);
    case BN_LR_COSINE: {
        double t = o->max_iter > 0 ? fmin((double)iter / (double)o->max_iter, 1.0) : 0.0;
        return c->lr_min + (c->lr - c->lr_min) * 0.5 * (1.0 + cos(3.14159265358979323846 * t));
    }
    }
    return c->lr;
}

static bn_status step_cpu(bn_sgd *o, bn_net *net, float lr)
{
    BN_HOST_WR(w, net->params);
    BN_HOST_RD(g, net->grads);
    BN_HOST_WR(v, o->momentum);
    const float mom = (float)o->cfg.momentum, wd = (float)o->cfg.weight_decay;
    for (int s = 0; s < o->num_segments; s++) {
        const bn_param_segment *seg = &o->segments[s];
        const float rate = lr * seg->lr_mult, decay = wd * seg->decay_mult;
        for (size_t i = seg->offset; i < seg->offset + seg->count; i++) {
            v[i] = mom * v[i] + rate * (g[i] + decay * w[i]);
            w[i] -= v[i];
        }
    }
    return BN_OK;
}

bn_status bn_sgd_step(bn_sgd *o, bn_net *net)
{
    float lr = (float)bn_sgd_lr(o, o->iter);
    if (net->num_params) {
        bn_nvtx_push("optimizer/update", BN_NVTX_OPTIMIZER);
        bn_status s = net->pass.ctx ? bn_sgd_step_gpu(o, net, lr) : step_cpu(o, net, lr);
        bn_nvtx_pop();
        BN_TRY(s);
    }
    o->iter++;
    return BN_OK;
}

bn_status bn_sgd_update_layer(bn_sgd *o, bn_net *net, const bn_layer *l)
{
    if (!l->num_params) return BN_OK;
    if (!net->pass.ctx || !net->pass.ctx->side_stream)
        return bn_error(BN_ERR_INTERNAL, "layer %s: a layer-by-layer update needs a device context", l->name);
    int last = 1;
    for (int i = 0; i < l->index; i++)
        if (net->layers[i]->num_params) last = 0;
    bn_nvtx_push("optimizer/update", BN_NVTX_OPTIMIZER);
    bn_status s = bn_sgd_update_layer_gpu(o, net, l, (float)bn_sgd_lr(o, o->iter), last);
    bn_nvtx_pop();
    return s;
}

void bn_sgd_end_layered_step(bn_sgd *o)
{
    o->iter++;
}

void bn_sgd_free(bn_sgd *o)
{
    if (!o) return;
    bn_blob_free(o->momentum);
    bn_device_free(o->device_segments);
    bn_device_free(o->dev_schedule);
    bn_device_free(o->dev_cursor);
    free(o->segments);
    free(o);
}
