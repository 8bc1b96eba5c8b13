/* batchnorm.c - batch normalization (Ioffe and Szegedy): keys, shapes and the CPU path. */
#include <math.h>
#include <stdlib.h>

#include "batchnorm.h"
#include "layers.h"

enum { P_WEIGHT, P_BIAS };
enum { B_MEAN, B_VAR };

static bn_status batchnorm_parse(bn_layer *l, bn_options *o)
{
    batchnorm_priv b = {0};
    BN_TRY(bn_opt_float(o, "momentum", 0.1, 0.0, 1.0, &b.momentum));
    BN_TRY(bn_opt_float(o, "eps", 1e-5, 1e-12, 1.0, &b.eps));
    batchnorm_priv *q = malloc(sizeof *q);
    if (!q) return bn_error(BN_ERR_NOMEM, "layer %s: out of host memory", l->name);
    *q = b;
    l->priv = q;
    return BN_OK;
}

static bn_status batchnorm_setup(bn_layer *l, bn_shape in, bn_shape *out)
{
    batchnorm_priv *b = l->priv;
    b->channels = in.c;
    b->plane = in.h * in.w;
    free(b->mean);
    free(b->inv_std);
    b->mean = malloc((size_t)in.c * sizeof *b->mean);
    b->inv_std = malloc((size_t)in.c * sizeof *b->inv_std);
    if (!b->mean || !b->inv_std) return bn_error(BN_ERR_NOMEM, "layer %s: out of host memory", l->name);
    if (bn_layer_add_param(l, "weight", 1, in.c, 1, 1, BN_INIT_CONSTANT, in.c, in.c) != P_WEIGHT ||
        bn_layer_add_param(l, "bias", 1, in.c, 1, 1, BN_INIT_ZERO, in.c, in.c) != P_BIAS ||
        bn_layer_add_buffer(l, "running_mean", 1, in.c, 1, 1, 0.0f) != B_MEAN ||
        bn_layer_add_buffer(l, "running_var", 1, in.c, 1, 1, 1.0f) != B_VAR)
        return bn_last_status();
    l->params[P_WEIGHT].init_value = 1.0f;
    bn_param_mark_bias(l, P_BIAS);
    *out = in;
    return BN_OK;
}

/* Element k of channel c, example n. */
#define AT(v, n, c) ((v) + ((size_t)(n) * b->channels + (size_t)(c)) * (size_t)b->plane)

static bn_status batchnorm_forward(bn_layer *l, const bn_pass *p)
{
    batchnorm_priv *b = l->priv;
    int n = l->in->n;
    size_t count = (size_t)n * b->plane;
    BN_HOST_RD(x, l->in);
    BN_HOST_RD(w, l->params[P_WEIGHT].value);
    BN_HOST_RD(bias, l->params[P_BIAS].value);
    BN_HOST_WR(rm, l->buffers[B_MEAN].value);
    BN_HOST_WR(rv, l->buffers[B_VAR].value);
    BN_HOST_WR(y, l->out);
    b->trained = p->train;
    for (int c = 0; c < b->channels; c++) {
        float mean, inv_std;
        if (p->train) {
            double sum = 0.0, sq = 0.0;
            for (int e = 0; e < n; e++)
                for (int k = 0; k < b->plane; k++) sum += AT(x, e, c)[k];
            double m = sum / (double)count;
            for (int e = 0; e < n; e++)
                for (int k = 0; k < b->plane; k++) sq += (AT(x, e, c)[k] - m) * (AT(x, e, c)[k] - m);
            double var = sq / (double)count;
            mean = (float)m;
            inv_std = (float)(1.0 / sqrt(var + b->eps));
            double unbiased = count > 1 ? sq / (double)(count - 1) : var;
            rm[c] = (float)((1.0 - b->momentum) * rm[c] + b->momentum * m);
            rv[c] = (float)((1.0 - b->momentum) * rv[c] + b->momentum * unbiased);
            b->mean[c] = mean;
            b->inv_std[c] = inv_std;
        } else {
            mean = rm[c];
            inv_std = (float)(1.0 / sqrt((double)rv[c] + b->eps));
        }
        float scale = w[c] * inv_std, shift = bias[c] - mean * scale;
        for (int e = 0; e < n; e++)
            for (int k = 0; k < b->plane; k++) AT(y, e, c)[k] = AT(x, e, c)[k] * scale + shift;
    }
    return BN_OK;
}

/* After a training forward: the gradient through the batch's statistics; after an evaluation
 * forward: through the fixed running ones (a plain per-channel scale). */
static bn_status batchnorm_backward(bn_layer *l, const bn_pass *p)
{
    const batchnorm_priv *b = l->priv;
    int n = l->in->n;
    double count = (double)n * b->plane;
    BN_HOST_RD(x, l->in);
    BN_HOST_RD(dy, l->out_grad);
    BN_HOST_RD(w, l->params[P_WEIGHT].value);
    BN_HOST_RD(rv, l->buffers[B_VAR].value);
    BN_HOST_RD(rm, l->buffers[B_MEAN].value);
    BN_HOST_WR(dw, l->params[P_WEIGHT].grad);
    BN_HOST_WR(db, l->params[P_BIAS].grad);
    float *dx = NULL;
    if (l->in_grad && !(dx = bn_blob_host_wr(l->in_grad))) return bn_last_status();
    for (int c = 0; c < b->channels; c++) {
        float mean = b->trained ? b->mean[c] : rm[c];
        float inv_std = b->trained ? b->inv_std[c] : (float)(1.0 / sqrt((double)rv[c] + b->eps));
        double sum_dy = 0.0, sum_dy_xhat = 0.0;
        for (int e = 0; e < n; e++)
            for (int k = 0; k < b->plane; k++) {
                float g = AT(dy, e, c)[k];
                sum_dy += g;
                sum_dy_xhat += (double)g * ((AT(x, e, c)[k] - mean) * inv_std);
            }
        dw[c] += (float)sum_dy_xhat;
        db[c] += (float)sum_dy;
        if (!dx) continue;
        float scale = w[c] * inv_std;
        float mean_dy = b->trained ? (float)(sum_dy / count) : 0.0f;
        float mean_dy_xhat = b->trained ? (float)(sum_dy_xhat / count) : 0.0f;
        for (int e = 0; e < n; e++)
            for (int k = 0; k < b->plane; k++) {
                float xhat = (AT(x, e, c)[k] - mean) * inv_std;
                AT(dx, e, c)[k] = scale * (AT(dy, e, c)[k] - mean_dy - xhat * mean_dy_xhat);
            }
    }
    return BN_OK;
}

/* Normalize, scale and shift: about 4 operations per element. */
static double batchnorm_flops(const bn_layer *l)
{
    const batchnorm_priv *b = l->priv;
    return 4.0 * b->channels * b->plane;
}

static void batchnorm_destroy(bn_layer *l)
{
    batchnorm_priv *b = l->priv;
    if (b) {
#ifdef BN_WITH_CUDA
        bn_batchnorm_gpu_release(b);
#endif
        free(b->mean);
        free(b->inv_std);
    }
    free(b);
    l->priv = NULL;
}

const bn_layer_ops bn_batchnorm_ops = {
    .type = "batchnorm",
    .help = "batch normalization per channel (per feature after a dense layer): batch statistics in "
            "training, running averages in evaluation, learnable weight and bias; keys: momentum (0.1), "
            "eps (1e-5)",
    .kind = BN_NVTX_LAYER_OTHER,
    .graph_safe = 1,
    .parse = batchnorm_parse,
    .setup = batchnorm_setup,
    .forward_cpu = batchnorm_forward,
    .backward_cpu = batchnorm_backward,
    .forward_gpu = BN_GPU(bn_batchnorm_forward_gpu),
    .backward_gpu = BN_GPU(bn_batchnorm_backward_gpu),
    .fuse_gpu = BN_GPU(bn_batchnorm_fuse_relu),
    .absorbs = BN_ABSORB_RELU,
    .relu_in_place = 1, /* its backward pass does not read its output */
    .flops = batchnorm_flops,
    .destroy = batchnorm_destroy,
    .bf16 = 1,
};
