/* prelu.c - PReLU, a worked example of a custom layer (docs/custom-layers.md):
 *     y = x            for x > 0
 *     y = slope[c] * x otherwise,
 * with one learnable slope per channel (He et al., 2015). The slopes start at init_slope
 * (0.25 as in the paper) and, as the paper advises, take no weight decay: decay would pull
 * them towards 0, that is towards ReLU.
 *
 * Built as a plugin (build/plugins/prelu.so) and kept out of the core registry: blobnet
 * loads it with --plugin, which calls blobnet_plugin_register below. */
#include <stdlib.h>

#include "prelu.h"

enum { SLOPE };

static bn_status prelu_parse(bn_layer *l, bn_options *o)
{
    double init;
    BN_TRY(bn_opt_float(o, "init_slope", 0.25, 0.0, 1.0, &init));
    prelu_priv *p = calloc(1, sizeof *p);
    if (!p) return bn_error(BN_ERR_NOMEM, "layer %s: out of host memory", l->name);
    p->init_slope = (float)init;
    l->priv = p;
    return BN_OK;
}

static bn_status prelu_setup(bn_layer *l, bn_shape in, bn_shape *out)
{
    prelu_priv *p = l->priv;
    p->channels = in.c;
    p->spatial = in.h * in.w;
    if (bn_layer_add_param(l, "slope", in.c, 1, 1, 1, BN_INIT_CONSTANT, 1, 1) != SLOPE)
        return bn_last_status();
    l->params[SLOPE].init_value = p->init_slope;
    l->params[SLOPE].decay_mult = 0.0f;
    *out = in;
    return BN_OK;
}

static bn_status prelu_forward(bn_layer *l, const bn_pass *pass)
{
    const prelu_priv *p = l->priv;
    BN_HOST_RD(x, l->in);
    BN_HOST_RD(slope, l->params[SLOPE].value);
    BN_HOST_WR(y, l->out);
    size_t rows = (size_t)l->in->n * p->channels; /* one row per (example, channel) */
    for (size_t r = 0; r < rows; r++) {
        float a = slope[r % p->channels];
        const float *xr = x + r * p->spatial;
        float *yr = y + r * p->spatial;
        for (int k = 0; k < p->spatial; k++) yr[k] = xr[k] > 0.0f ? xr[k] : a * xr[k];
    }
    return BN_OK;
}

/* dx = dy where x > 0, slope * dy elsewhere; dslope[c] += sum of x * dy where x <= 0. The sum
 * runs in double, so the other order the GPU kernel adds in moves the float result by a
 * rounding at most. */
static bn_status prelu_backward(bn_layer *l, const bn_pass *pass)
{
    const prelu_priv *p = l->priv;
    int n = l->in->n, channels = p->channels, spatial = p->spatial;
    BN_HOST_RD(x, l->in);
    BN_HOST_RD(dy, l->out_grad);
    BN_HOST_RD(slope, l->params[SLOPE].value);
    float *dx = NULL;
    if (l->in_grad && !(dx = bn_blob_host_wr(l->in_grad))) return bn_last_status();
    BN_HOST_WR(dslope, l->params[SLOPE].grad);
    for (int c = 0; c < channels; c++) {
        double sum = 0.0;
        for (int i = 0; i < n; i++) {
            size_t base = ((size_t)i * channels + c) * spatial;
            for (int k = 0; k < spatial; k++) {
                size_t j = base + k;
                if (x[j] > 0.0f) {
                    if (dx) dx[j] = dy[j];
                } else {
                    if (dx) dx[j] = slope[c] * dy[j];
                    sum += (double)x[j] * dy[j];
                }
            }
        }
        dslope[c] += (float)sum;
    }
    return BN_OK;
}

static double prelu_flops(const bn_layer *l)
{
    const prelu_priv *p = l->priv;
    return (double)p->channels * p->spatial;
}

const bn_layer_ops bn_prelu_ops = {
    .type = "prelu",
    .help = "x for x > 0, slope[c] * x otherwise, a learnable slope per channel; "
            "keys: init_slope (0.25, in [0, 1])",
    .kind = BN_NVTX_LAYER_ACTIVATION,
    /* The GPU passes launch kernels on the stream and nothing else, so the training step may
     * be captured and replayed as a CUDA graph. */
    .graph_safe = 1,
    .parse = prelu_parse,
    .setup = prelu_setup,
    .forward_cpu = prelu_forward,
    .backward_cpu = prelu_backward,
    .forward_gpu = BN_GPU(bn_prelu_forward_gpu),
    .backward_gpu = BN_GPU(bn_prelu_backward_gpu),
    .flops = prelu_flops,
};

bn_status blobnet_plugin_register(void)
{
    return bn_register_layer(&bn_prelu_ops);
}
