#include "optimizer.h"

#include <stdlib.h>

#include "core/lr_policies/lr_policies.h"
#include "core/optimizers/optimizers.h"
#include "core/parallel.h"

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
    const bn_optimizer_type *t = bn_optimizer_type_at(o->cfg.optimizer);
    for (int k = 0; k < t->num_state; k++) {
        bn_blob *b = bn_blob_new(t->state[k], (int)net->num_params, 1, 1, 1);
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
    o->layer_side = calloc(net->num_layers > 0 ? (size_t)net->num_layers : 1, 1);
    if (s == BN_OK && !o->layer_side) s = bn_error(BN_ERR_NOMEM, "out of host memory for the optimizer");
    if (s == BN_OK && net->num_params) s = create_state(o, net);
    if (s != BN_OK) {
        bn_optimizer_free(o);
        return s;
    }
    *out = o;
    return BN_OK;
}

double bn_optimizer_lr(const bn_optimizer *o, long iter)
{
    double lr = bn_lr_policy_at(o->cfg.lr_policy)->rate(&o->cfg, iter, o->max_iter);
    int warmup = o->cfg.warmup;
    return iter < warmup ? lr * (double)(iter + 1) / (double)warmup : lr;
}

bn_step_rates bn_optimizer_rates(const bn_optimizer *o, long iter)
{
    bn_step_rates r = {(float)bn_optimizer_lr(o, iter), {0.0f, 0.0f}};
    const bn_optimizer_type *t = bn_optimizer_type_at(o->cfg.optimizer);
    if (t->per_step) t->per_step(&o->cfg, iter, r.per_step);
    return r;
}

/* n elements through an optimizer's rule, each element's state values gathered from the slabs and
 * put back. The slabs are parameters of their own, restrict like the weights and the gradient, so
 * that the compiler may vectorise the loop without checking them for overlap (the slabs of an
 * optimizer with fewer than BN_OPTIMIZER_MAX_STATE are NULL and never read). */
typedef void (*cpu_update)(float *restrict w, const float *restrict g, float *restrict s0, float *restrict s1,
                           float *restrict s2, size_t n, float rate, float decay, bn_step_rates r, bn_rule_consts k);
_Static_assert(BN_OPTIMIZER_MAX_STATE == 3, "cpu_update takes one pointer per state slab");

#define CPU_UPDATE(name)                                                                                          \
    static void update_##name(float *restrict w, const float *restrict g, float *restrict s0, float *restrict s1, \
                              float *restrict s2, size_t n, float rate, float decay, bn_step_rates r,             \
                              bn_rule_consts k)                                                                   \
    {                                                                                                             \
        const int slabs = bn_##name##_state_count;                                                                \
        float *const slab[BN_OPTIMIZER_MAX_STATE] = {s0, s1, s2};                                                 \
        for (size_t i = 0; i < n; i++) {                                                                          \
            float s[BN_OPTIMIZER_MAX_STATE];                                                                      \
            for (int j = 0; j < slabs; j++) s[j] = slab[j][i];                                                    \
            bn_##name##_rule(&w[i], g[i], s, rate, decay, r, k);                                                  \
            for (int j = 0; j < slabs; j++) slab[j][i] = s[j];                                                    \
        }                                                                                                         \
    }
BN_OPTIMIZERS(CPU_UPDATE)

/* The loops in the optimizer table's order. */
#define CPU_ENTRY(name) update_##name,
static const cpu_update cpu_updates[] = {BN_OPTIMIZERS(CPU_ENTRY)};

/* An update of the slab, for the pool's ranges: every element is updated on its own, so however
 * the slab is cut, each gets the same bits. */
typedef struct update_run {
    const bn_optimizer *o;
    cpu_update update;
    float *w, *state[BN_OPTIMIZER_MAX_STATE];
    const float *g;
    float wd;
    bn_step_rates r;
    bn_rule_consts k;
} update_run;

/* The parts of [lo, hi) that fall in segments, each at its segment's rate and decay. */
static void update_range(void *arg, size_t lo, size_t hi)
{
    const update_run *u = arg;
    for (int s = 0; s < u->o->num_segments; s++) {
        const bn_param_segment *seg = &u->o->segments[s];
        size_t a = seg->offset > lo ? seg->offset : lo, b = seg->offset + seg->count;
        if (b > hi) b = hi;
        if (a >= b) continue;
        float *st[BN_OPTIMIZER_MAX_STATE] = {NULL, NULL, NULL};
        for (int j = 0; j < u->o->num_state; j++) st[j] = u->state[j] + a;
        u->update(u->w + a, u->g + a, st[0], st[1], st[2], b - a, u->r.lr * seg->lr_mult, u->wd * seg->decay_mult,
                  u->r, u->k);
    }
}

static bn_status step_cpu(bn_optimizer *o, bn_net *net, bn_step_rates r)
{
    update_run u = {o, cpu_updates[o->cfg.optimizer], NULL, {NULL}, NULL, (float)o->cfg.weight_decay, r,
                    bn_optimizer_type_at(o->cfg.optimizer)->consts(&o->cfg)};
    if (!(u.w = bn_blob_host_wr(net->params)) || !(u.g = bn_blob_host_rd(net->grads))) return bn_last_status();
    for (int j = 0; j < o->num_state; j++)
        if (!(u.state[j] = bn_blob_host_wr(o->state[j]))) return bn_last_status();
    bn_parallel_ranges(net->num_params, 0, update_range, &u);
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

/* The layer with parameters that the backward pass reaches after layer i (the next lower index),
 * or -1 where i is the first. */
static int next_with_params(const bn_net *net, int i)
{
    for (int j = i - 1; j >= 0; j--)
        if (net->layers[j]->num_params) return j;
    return -1;
}

/* The run [*lo, *hi) of the slab that layers first..last_layer hold; 0 where none has any. */
static int layers_range(const bn_net *net, int first, int last_layer, size_t *lo, size_t *hi)
{
    int any = 0;
    for (int i = first; i <= last_layer; i++) {
        const bn_layer *l = net->layers[i];
        if (!l->num_params) continue;
        if (!any) *lo = l->params[0].value->offset;
        any = 1;
        const bn_blob *end = l->params[l->num_params - 1].value;
        *hi = end->offset + bn_blob_count(end);
    }
    return any;
}

/* The update of layers first..last (a run of the slab) on stream, or on the side stream when
 * stream is NULL. */
static bn_status update_layers(bn_optimizer *o, bn_net *net, int first, int last_layer, void *stream)
{
    size_t lo = 0, hi = 0;
    if (!layers_range(net, first, last_layer, &lo, &hi)) return BN_OK;
    if (!net->pass.ctx || !net->pass.ctx->side_stream)
        return bn_error(BN_ERR_INTERNAL, "layer %s: a layer-by-layer update needs a device context",
                        net->layers[first]->name);
    bn_nvtx_push("optimizer/update", BN_NVTX_OPTIMIZER);
    bn_status s = bn_optimizer_update_range_gpu(o, net, lo, hi, bn_optimizer_rates(o, o->iter), stream);
    bn_nvtx_pop();
    return s;
}

/* An update of fewer elements than this may wait for the next layer's and go in one launch with
 * it: such an update is mostly its launch (65,536 elements move about 1.3 MB, a third of a
 * microsecond of memory time, against a launch's 3-5 us). */
#define UPDATE_JOINS_BELOW 65536

/* Whether layer l's update waits for the next layer's. It does where l's backward pass put its
 * weight gradient on the side stream (its update stands there behind it anyway) and the next
 * layer's, in an earlier step, did not (batchnorm's gradients, or the first layer's, are the main
 * stream's): the joint launch then stands on the side stream in front of the weight gradient
 * after that, as l's would have, and that gradient starts after the input gradient beside it has
 * taken the multiprocessors. Without an update there the networks with batchnorm ran 5-8% slower,
 * and chains of convolutions 2% (docs/performance.md, version 50). The next layer must run on the
 * same lane, whose streams hold l's gradient. */
static int holds(const bn_optimizer *o, const bn_net *net, const bn_layer *l, int beside)
{
    const int next = next_with_params(net, l->index);
    if (!beside || next < 0 || o->held || o->layer_side[next] != BN_SIDE_NEVER) return 0;
    if (bn_layer_param_count(l) >= UPDATE_JOINS_BELOW) return 0;
    return net->backward_lanes_used <= 1 || !net->lane || net->lane[next] == net->lane[l->index];
}

/* The updates held back (bn_optimizer_update_layer), launched on stream (NULL: the side stream). */
static bn_status launch_held(bn_optimizer *o, bn_net *net, void *stream)
{
    if (!o->held) return BN_OK;
    o->held = 0;
    return update_layers(o, net, o->held_first, o->held_last, stream);
}

bn_status bn_optimizer_update_layer(bn_optimizer *o, bn_net *net, const bn_layer *l)
{
    if (!l->num_params) return BN_OK;
    bn_ctx *ctx = net->pass.ctx;
    const int beside = ctx && ctx->side_forks != o->forks_seen;
    o->layer_side[l->index] = beside ? BN_SIDE_USED : BN_SIDE_NEVER;
    /* A held update joins this one only where this is the layer it waits for. */
    if (o->held && o->held_next != l->index) BN_TRY(launch_held(o, net, NULL));
    bn_status s = BN_OK;
    if (holds(o, net, l, beside)) {
        o->held = 1;
        o->held_first = o->held_last = l->index;
        o->held_next = next_with_params(net, l->index);
    } else if (o->held) {
        o->held_first = l->index;
        s = launch_held(o, net, NULL);
    } else {
        s = update_layers(o, net, l->index, l->index, NULL);
    }
    if (ctx) o->forks_seen = ctx->side_forks; /* the launch's own fork is not the next layer's */
    return s;
}

bn_status bn_optimizer_update_layers_on(bn_optimizer *o, bn_net *net, int first, int last, void *stream)
{
    return update_layers(o, net, first, last, stream);
}

bn_status bn_optimizer_update_args(bn_optimizer *o, bn_net *net, int first, int last, bn_update_args *u)
{
    size_t lo = 0, hi = 0;
    if (!net->pass.ctx || !layers_range(net, first, last, &lo, &hi))
        return bn_error(BN_ERR_INTERNAL, "layers %d..%d: no device update to describe", first, last);
    return bn_optimizer_range_args_gpu(o, net, lo, hi, bn_optimizer_rates(o, o->iter), u);
}

bn_status bn_optimizer_begin_step(bn_optimizer *o, bn_net *net)
{
    return net->pass.ctx ? bn_optimizer_begin_step_gpu(o, net) : BN_OK;
}

bn_status bn_optimizer_end_layered_step(bn_optimizer *o, bn_net *net)
{
    /* An update still held (the backward pass stopped before the layer it waited for) goes on the
     * context's stream, which has joined the side stream by now. */
    bn_status s = o->held ? launch_held(o, net, net->pass.ctx->stream) : BN_OK;
    o->iter++;
    return s;
}

void bn_optimizer_free(bn_optimizer *o)
{
    if (!o) return;
    for (int k = 0; k < o->num_state; k++) bn_blob_free(o->state[k]);
    bn_device_free(o->device_segments);
    bn_device_free(o->dev_schedule);
    bn_device_free(o->dev_cursor);
    bn_upload_buf_free(&o->schedule_up);
    free(o->segments);
    free(o->layer_side);
    free(o);
}
