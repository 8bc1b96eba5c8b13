/* batchrms.c - batch RMS normalization, the example of a layer with a buffer
 * (docs/custom-layers.md, section 6). Each channel is divided by the root mean square of its
 * values and multiplied by a learned gain:
 *     y = gain[c] * x / sqrt(ms[c] + eps)
 * In training ms[c] is the mean of x * x over the batch and the channel's positions, and a
 * running average of it is kept in the buffer running_ms; evaluation divides by that instead,
 * so an example's output does not depend on the rest of its batch. It is batch normalization
 * without the mean: nothing is subtracted, so the mean square of a batch is an unbiased
 * estimate of the channel's and needs no correction.
 *
 * Built as a plugin (build/plugins/batchrms.so); blobnet loads it with --plugin. */
#include <math.h>
#include <stdlib.h>

#include "batchrms.h"

enum { GAIN };
enum { RUNNING_MS };

static bn_status batchrms_parse(bn_layer *l, bn_options *o)
{
    batchrms_priv *b = calloc(1, sizeof *b);
    if (!b) return bn_error(BN_ERR_NOMEM, "layer %s: out of host memory", l->name);
    l->priv = b;
    BN_TRY(bn_opt_float(o, "momentum", 0.1, 0.0, 1.0, &b->momentum));
    BN_TRY(bn_opt_float(o, "eps", 1e-5, 1e-12, 1.0, &b->eps));
    return BN_OK;
}

static bn_status batchrms_setup(bn_layer *l, bn_shape in, bn_shape *out)
{
    batchrms_priv *b = l->priv;
    b->channels = in.c;
    b->plane = in.h * in.w;
    free(b->scale);
    if (!(b->scale = malloc((size_t)in.c * sizeof *b->scale)))
        return bn_error(BN_ERR_NOMEM, "layer %s: out of host memory", l->name);
    if (bn_layer_add_param(l, "gain", 1, in.c, 1, 1, BN_INIT_CONSTANT, in.c, in.c) != GAIN ||
        bn_layer_add_buffer(l, "running_ms", 1, in.c, 1, 1, 1.0f) != RUNNING_MS)
        return bn_last_status();
    l->params[GAIN].init_value = 1.0f;
    l->params[GAIN].decay_mult = 0.0f; /* decay would pull every channel towards zero */
    *out = in;
    return BN_OK;
}

/* row walks the first element of channel c in each of the n examples. */
#define EACH_ROW(b, n, c, row) \
    for (size_t row = (size_t)(c) * (b)->plane, end_ = (size_t)(n) * (b)->channels * (b)->plane; row < end_; \
         row += (size_t)(b)->channels * (b)->plane)

static bn_status batchrms_forward(bn_layer *l, const bn_pass *p)
{
    batchrms_priv *b = l->priv;
    int n = l->in->n;
    BN_HOST_RD(x, l->in);
    BN_HOST_RD(gain, l->params[GAIN].value);
    BN_HOST_WR(running, l->buffers[RUNNING_MS].value);
    BN_HOST_WR(y, l->out);
    for (int c = 0; c < b->channels; c++) {
        double ms = running[c];
        if (p->train) {
            double sum = 0.0;
            EACH_ROW(b, n, c, row) for (int k = 0; k < b->plane; k++) sum += (double)x[row + k] * x[row + k];
            ms = sum / ((double)n * b->plane);
            running[c] = (float)((1.0 - b->momentum) * running[c] + b->momentum * ms);
        }
        float scale = (float)(1.0 / sqrt(ms + b->eps));
        if (p->train) b->scale[c] = scale;
        float g = gain[c] * scale;
        EACH_ROW(b, n, c, row) for (int k = 0; k < b->plane; k++) y[row + k] = g * x[row + k];
    }
    return BN_OK;
}

/* With s = 1 / sqrt(ms + eps) and m values per channel:
 *     dgain[c] += s * sum(dy * x)
 *     dx = gain * s * dy - gain * s^3 * x * sum(dy * x) / m
 * the second term from ms depending on every x of the channel. */
static bn_status batchrms_backward(bn_layer *l, const bn_pass *p)
{
    (void)p;
    const batchrms_priv *b = l->priv;
    int n = l->in->n;
    double m = (double)n * b->plane;
    BN_HOST_RD(x, l->in);
    BN_HOST_RD(dy, l->out_grad);
    BN_HOST_RD(gain, l->params[GAIN].value);
    BN_HOST_WR(dgain, l->params[GAIN].grad);
    float *dx = NULL;
    if (l->in_grad && !(dx = bn_blob_host_wr(l->in_grad))) return bn_last_status();
    for (int c = 0; c < b->channels; c++) {
        double dot = 0.0, s = b->scale[c];
        EACH_ROW(b, n, c, row) for (int k = 0; k < b->plane; k++) dot += (double)dy[row + k] * x[row + k];
        dgain[c] += (float)(s * dot);
        if (!dx) continue;
        float direct = (float)(gain[c] * s), through_ms = (float)(gain[c] * s * s * s * dot / m);
        EACH_ROW(b, n, c, row) for (int k = 0; k < b->plane; k++) dx[row + k] = direct * dy[row + k] -
                                                                                 through_ms * x[row + k];
    }
    return BN_OK;
}

static void batchrms_destroy(bn_layer *l)
{
    batchrms_priv *b = l->priv;
    if (!b) return;
    bn_device_free(b->dev);
    free(b->scale);
    free(b);
}

static double batchrms_flops(const bn_layer *l)
{
    const batchrms_priv *b = l->priv;
    return 3.0 * b->channels * b->plane;
}

const bn_layer_ops bn_batchrms_ops = {
    .type = "batchrms",
    .help = "batch RMS normalization: each channel divided by the root mean square of its values over the "
            "batch (a running average of it in evaluation), times a learned gain; keys: momentum (0.1, in "
            "[0, 1]), eps (1e-5)",
    .kind = BN_NVTX_LAYER_OTHER,
    /* The GPU passes launch kernels on the stream, read the step's state on the device and
     * allocate their scratch once, in the first (eager) step. */
    .graph_safe = 1,
    .parse = batchrms_parse,
    .setup = batchrms_setup,
    .forward_cpu = batchrms_forward,
    .backward_cpu = batchrms_backward,
    .forward_gpu = BN_GPU(bn_batchrms_forward_gpu),
    .backward_gpu = BN_GPU(bn_batchrms_backward_gpu),
    .destroy = batchrms_destroy,
    .flops = batchrms_flops,
};

bn_status blobnet_plugin_register(void)
{
    return bn_register_layer(&bn_batchrms_ops);
}
