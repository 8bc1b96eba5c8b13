/* dropout.c - inverted dropout: in training each element is kept with probability
 * 1 - rate and scaled by 1 / (1 - rate), so evaluation is the identity.
 *
 * The mask is dropout.h's draw from (run seed, layer index, step, place in the global batch):
 * the same step draws the same mask, which lets a gradient check repeat a forward pass exactly,
 * the GPU draws the same one, and a pass over a share of a global batch (p->offset) takes that
 * share's part of the whole batch's mask. */
#include <stdlib.h>
#include <string.h>

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

static void draw_mask(const bn_layer *l, const bn_pass *p, float *mask, size_t count)
{
    const dropout_priv *d = l->priv;
    const uint64_t key = bn_dropout_key(p->seed, l->index, p->step);
    /* The mask of a share is the part of the whole batch's mask that falls on it. */
    const uint64_t first = (uint64_t)p->offset * (uint64_t)d->per_example;
    const float keep_scale = 1.0f / (1.0f - d->rate);
    for (size_t i = 0; i < count; i++) mask[i] = bn_dropout_keeps(key, first + i, d->rate) ? keep_scale : 0.0f;
}

static bn_status dropout_forward(bn_layer *l, const bn_pass *p)
{
    dropout_priv *d = l->priv;
    size_t count = bn_blob_count(l->in);
    BN_HOST_RD(x, l->in);
    BN_HOST_WR(y, l->out);
    d->masked = 0;
    if (!p->train) {
        memcpy(y, x, count * sizeof *y);
        return BN_OK;
    }
    BN_TRY(reserve_mask(l, d));
    draw_mask(l, p, d->mask, count);
    d->masked = 1;
    for (size_t i = 0; i < count; i++) y[i] = x[i] * d->mask[i];
    return BN_OK;
}

/* Backward follows the forward that made the output: masked after training, else identity. */
static bn_status dropout_backward(bn_layer *l, const bn_pass *p)
{
    const dropout_priv *d = l->priv;
    if (!l->in_grad) return BN_OK;
    size_t count = bn_blob_count(l->in);
    BN_HOST_RD(dy, l->out_grad);
    BN_HOST_WR(dx, l->in_grad);
    if (!d->masked) {
        memcpy(dx, dy, count * sizeof *dx);
        return BN_OK;
    }
    for (size_t i = 0; i < count; i++) dx[i] = dy[i] * d->mask[i];
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
    .bf16 = 1,
};
