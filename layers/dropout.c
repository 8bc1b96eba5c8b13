/* dropout.c - inverted dropout: in training each element is kept with probability
 * 1 - rate and scaled by 1 / (1 - rate), so evaluation is the identity.
 *
 * The mask is dropout.h's draw from (run seed, layer index, step, place in the global batch):
 * the same step draws the same mask, which lets a gradient check repeat a forward pass exactly,
 * the GPU draws the same one, and a pass over a share of a global batch (p->offset) takes that
 * share's part of the whole batch's mask. */
#include <stdlib.h>
#include <string.h>

#include "core/parallel.h"
#include "dropout.h"
#include "layers.h"

static bn_status dropout_parse(bn_layer *l, bn_options *o)
{
    double rate;
    BN_TRY(bn_opt_float(o, "rate", 0.5, 0.0, 1.0, &rate));
    if (rate >= 1.0) return bn_opt_error(o, "rate", "rate = %g must be below 1", rate);
    dropout_priv *d = calloc(1, sizeof *d);
    if (!d) return bn_error(BN_ERR_NOMEM, "layer %s: out of host memory", l->name);
    d->rate = (float)rate;
    l->priv = d;
    return BN_OK;
}

static bn_status dropout_setup(bn_layer *l, bn_shape in, bn_shape *out)
{
    dropout_priv *d = l->priv;
    d->per_example = (double)in.c * in.h * in.w;
    *out = in;
    return BN_OK;
}

/* Grows the mask to the input blob's capacity once; later steps reuse it. */
static bn_status reserve_mask(bn_layer *l, dropout_priv *d)
{
    size_t need = l->in->capacity;
    if (d->mask_cap >= need) return BN_OK;
    float *grown = realloc(d->mask, need * sizeof *grown);
    if (!grown) return bn_error(BN_ERR_NOMEM, "layer %s: cannot allocate a %zu-float mask",
                                l->name, need);
    d->mask = grown;
    d->mask_cap = need;
    return BN_OK;
}

/* Elements per task of the passes that only copy or multiply: LeNet's 32000 values in two tasks
 * took longer than in one, the hand-over costing more than the other core saved. The draws, ten
 * times the work per element, take the pool's default. */
#define COPY_GRAIN 65536

/* A pass's buffers, for the pool's ranges: out = in * mask, the mask drawn first where draw is set
 * (a training forward), or out = in where mask is NULL (an evaluation forward, or the backward
 * pass after one). */
typedef struct dropout_run {
    const float *in;
    float *out, *mask;
    int draw;
    uint64_t key, first; /* the layer's draws at this step; the share's first place in the batch */
    float rate, keep_scale;
} dropout_run;

/* out = in * mask; restrict, so that the compiler vectorises it. */
static void scale_by(float *restrict out, const float *restrict in, const float *restrict mask, size_t n)
{
    for (size_t i = 0; i < n; i++) out[i] = in[i] * mask[i];
}

/* mask[i] for the places first + i. A product, not a choice: GCC compiles a choice between the
 * two values to a branch, mispredicted at every other element where the rate is one half. */
static void draw(float *restrict mask, uint64_t key, uint64_t first, float rate, float keep_scale, size_t n)
{
    for (size_t i = 0; i < n; i++) mask[i] = (float)bn_dropout_keeps(key, first + i, rate) * keep_scale;
}

static void dropout_range(void *arg, size_t lo, size_t hi)
{
    const dropout_run *r = arg;
    if (!r->mask) {
        memcpy(r->out + lo, r->in + lo, (hi - lo) * sizeof *r->out);
        return;
    }
    if (r->draw) draw(r->mask + lo, r->key, r->first + lo, r->rate, r->keep_scale, hi - lo);
    scale_by(r->out + lo, r->in + lo, r->mask + lo, hi - lo);
}

static bn_status dropout_forward(bn_layer *l, const bn_pass *p)
{
    dropout_priv *d = l->priv;
    BN_HOST_RD(x, l->in);
    BN_HOST_WR(y, l->out);
    d->masked = 0;
    dropout_run r = {x, y, NULL, 0, 0, 0, d->rate, 1.0f / (1.0f - d->rate)};
    if (p->train) {
        BN_TRY(reserve_mask(l, d));
        d->masked = 1;
        r.mask = d->mask, r.draw = 1;
        r.key = bn_dropout_key(p->seed, l->index, p->step);
        /* The mask of a share is the part of the whole batch's mask that falls on it. */
        r.first = (uint64_t)p->offset * (uint64_t)d->per_example;
    }
    bn_parallel_ranges(bn_blob_count(l->in), p->train ? 0 : COPY_GRAIN, dropout_range, &r);
    return BN_OK;
}

/* Backward follows the forward that made the output: masked after training, else identity. */
static bn_status dropout_backward(bn_layer *l, const bn_pass *p)
{
    const dropout_priv *d = l->priv;
    if (!l->in_grad) return BN_OK;
    BN_HOST_RD(dy, l->out_grad);
    BN_HOST_WR(dx, l->in_grad);
    dropout_run r = {dy, dx, d->masked ? d->mask : NULL, 0, 0, 0, 0.0f, 0.0f};
    bn_parallel_ranges(bn_blob_count(l->in), COPY_GRAIN, dropout_range, &r);
    return BN_OK;
}

/* One multiply per element in training. */
static double dropout_flops(const bn_layer *l)
{
    const dropout_priv *d = l->priv;
    return d->per_example;
}

static void dropout_destroy(bn_layer *l)
{
    dropout_priv *d = l->priv;
    if (d) {
#ifdef BN_WITH_CUDA
        bn_dropout_gpu_release(d);
#endif
        free(d->mask);
    }
    free(d);
    l->priv = NULL;
}

const bn_layer_ops bn_dropout_ops = {
    .type = "dropout",
    .help = "inverted dropout in training (kept elements scaled by 1 / (1 - rate)), identity in "
            "evaluation; keys: rate (0.5, in [0, 1))",
    .kind = BN_NVTX_LAYER_OTHER,
    .parse = dropout_parse,
    .setup = dropout_setup,
    .forward_cpu = dropout_forward,
    .backward_cpu = dropout_backward,
    .forward_gpu = BN_GPU(bn_dropout_forward_gpu),
    .backward_gpu = BN_GPU(bn_dropout_backward_gpu),
    .flops = dropout_flops,
    .destroy = dropout_destroy,
    .graph_safe = 1,
    .beside = bn_layer_beside_always,
    .bf16 = 1,
};
