#include "optimizer.h"

#include <math.h>
#include <stdlib.h>

#include "update_rules.h"

#define PI 3.14159265358979323846

int bn_optimizer_state_names(bn_optimizer_kind kind, const char *names[BN_OPTIMIZER_MAX_STATE])
{
    if (kind == BN_OPT_SGD) {
        names[0] = "momentum";
        return 1;
    }
    names[0] = "exp_avg";
    names[1] = "exp_avg_sq";
    return 2;
}

static bn_status build_segments(bn_optimizer *o, bn_net *net)
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

/* The state slabs, zeroed, on the device too when the net is there. */
static bn_status create_state(bn_optimizer *o, bn_net *net)
{
    const char *names[BN_OPTIMIZER_MAX_STATE];
    int n = bn_optimizer_state_names(o->cfg.optimizer, names);
    for (int k = 0; k < n; k++) {
        bn_blob *b = bn_blob_new(names[k], (int)net->num_params, 1, 1, 1);
        if (!b) return bn_last_status();
        o->state[o->num_state++] = b;
        if (net->pass.ctx) BN_TRY(bn_blob_reserve_device(b));
        BN_TRY(bn_blob_zero(b));
    }
    return BN_OK;
}

bn_status bn_optimizer_create(bn_net *net, const bn_train_config *cfg, bn_optimizer **out)
{
    *out = NULL;
    bn_optimizer *o = calloc(1, sizeof *o);
    if (!o) return bn_error(BN_ERR_NOMEM, "out of host memory for the optimizer");
    o->cfg = *cfg;
    bn_status s = build_segments(o, net);
    if (s == BN_OK && net->num_params) s = create_state(o, net);
    if (s != BN_OK) {
        bn_optimizer_free(o);
        return s;
    }
    *out = o;
    return BN_OK;
}

/* PyTorch's OneCycleLR (anneal_strategy 'cos', cycle_momentum off, two phases) over the run's
 * T = max_iter steps, at step s (its last_epoch; a step past the run, as in `blobnet time`,
 * which has no run length and takes T = 1, counts as the last, s = T - 1):
 *     initial = lr / div_factor,  final = initial / final_div_factor
 *     phase 1: steps 0 .. e1 = pct_start * T - 1, from initial up to lr
 *     phase 2: steps e1 .. e2 = T - 1, from lr down to final
 *     in the phase from step a to step b, rising or falling from `from` to `to`:
 *         p = (s - a) / (b - a),  rate = to + (from - to) / 2 * (cos(pi * p) + 1)
 * A step belongs to phase 1 while s <= e1. A phase with b = a (pct_start * T = 1, where
 * PyTorch divides by zero) is taken as ended: p = 1. */
static double onecycle(const bn_train_config *c, long iter, long max_iter)
{
    double total = max_iter > 0 ? (double)max_iter : 1.0;
    double s = fmin((double)iter, total - 1.0);
    double initial = c->lr / c->div_factor, final = initial / c->final_div_factor;
    double e1 = c->pct_start * total - 1.0, a = 0.0, b = e1, from = initial, to = c->lr;
    if (s > e1) a = e1, b = total - 1.0, from = c->lr, to = final;
    double p = b > a ? (s - a) / (b - a) : 1.0;
    return to + (from - to) / 2.0 * (cos(PI * p) + 1.0);
}

static double policy_lr(const bn_optimizer *o, long iter)
{
    const bn_train_config *c = &o->cfg;
    switch (c->lr_policy) {
    case BN_LR_FIXED: return c->lr;
    case BN_LR_STEP: return c->lr * pow(c->gamma, (double)(iter / c->stepsize));
    case BN_LR_INV: return c->lr * pow(1.0 + c->gamma * (double)iter, -c->power);
    case BN_LR_COSINE: {
        double t = o->max_iter > 0 ? fmin((double)iter / (double)o->max_iter, 1.0) : 0.0;
        return c->lr_min + (c->lr - c->lr_min) * 0.5 * (1.0 + cos(PI * t));
    }
    case BN_LR_ONECYCLE: return onecycle(c, iter, o->max_iter);
    }
    return c->lr;
}

double bn_optimizer_lr(const bn_optimizer *o, long iter)
{
    double lr = policy_lr(o, iter);
    int warmup = o->cfg.warmup;
    return iter < warmup ? lr * (double)(iter + 1) / (double)warmup : lr;
}

bn_step_rates bn_optimizer_rates(const bn_optimizer *o, long iter)
{
    double t = (double)iter + 1.0;
    return (bn_step_rates){(float)bn_optimizer_lr(o, iter), (float)(1.0 - pow(o->cfg.beta1, t)),
                           (float)sqrt(1.0 - pow(o->cfg.beta2, t))};
}

static bn_status step_cpu(bn_optimizer *o, bn_net *net, bn_step_rates r)
{
    BN_HOST_WR(w, net->params);
    BN_HOST_RD(g, net->grads);
    BN_HOST_WR(s0, o->state[0]);
    float *s1 = NULL;
    if (o->num_state > 1 && !(s1 = bn_blob_host_wr(o->state[1]))) return bn_last_status();
    const float mom = (float)o->cfg.momentum, wd = (float)o->cfg.weight_decay;
    const bn_adam_consts k = bn_adam_consts_of(&o->cfg);
    for (int s = 0; s < o->num_segments; s++) {
        const bn_param_segment *seg = &o->segments[s];
        const float rate = r.lr * seg->lr_mult, decay = wd * seg->decay_mult;
        for (size_t i = seg->offset; i < seg->offset + seg->count; i++) {
            if (s1) bn_adam_rule(&w[i], g[i], &s0[i], &s1[i], rate, decay, r, k);
            else bn_sgd_rule(&w[i], g[i], &s0[i], rate, decay, mom);
        }
    }
    return BN_OK;
}

bn_status bn_optimizer_step(bn_optimizer *o, bn_net *net)
{
    bn_step_rates r = bn_optimizer_rates(o, o->iter);
    if (net->num_params) {
        bn_nvtx_push("optimizer/update", BN_NVTX_OPTIMIZER);
        bn_status s = net->pass.ctx ? bn_optimizer_step_gpu(o, net, r) : step_cpu(o, net, r);
        bn_nvtx_pop();
        BN_TRY(s);
    }
    o->iter++;
    return BN_OK;
}

/* A layer's update on stream, or on the side stream when stream is NULL. */
static bn_status update_layer(bn_optimizer *o, bn_net *net, const bn_layer *l, void *stream)
{
    if (!l->num_params) return BN_OK;
    if (!net->pass.ctx || !net->pass.ctx->side_stream)
        return bn_error(BN_ERR_INTERNAL, "layer %s: a layer-by-layer update needs a device context", l->name);
    int last = 1;
    for (int i = 0; i < l->index; i++)
        if (net->layers[i]->num_params) last = 0;
    bn_nvtx_push("optimizer/update", BN_NVTX_OPTIMIZER);
    bn_status s = bn_optimizer_update_layer_gpu(o, net, l, bn_optimizer_rates(o, o->iter), last, stream);
    bn_nvtx_pop();
    return s;
}

bn_status bn_optimizer_update_layer(bn_optimizer *o, bn_net *net, const bn_layer *l)
{
    return update_layer(o, net, l, NULL);
}

bn_status bn_optimizer_update_layer_on(bn_optimizer *o, bn_net *net, const bn_layer *l, void *stream)
{
    return update_layer(o, net, l, stream);
}

void bn_optimizer_end_layered_step(bn_optimizer *o)
{
    o->iter++;
}

void bn_optimizer_free(bn_optimizer *o)
{
    if (!o) return;
    for (int k = 0; k < o->num_state; k++) bn_blob_free(o->state[k]);
    bn_device_free(o->device_segments);
    bn_device_free(o->dev_schedule);
    bn_device_free(o->dev_cursor);
    free(o->segments);
    free(o);
}
