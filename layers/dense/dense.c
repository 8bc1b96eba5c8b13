/* dense.c - fully connected layer: flattens each example to c*h*w inputs and computes
 * Y = X W^T + b with W of shape (outputs, inputs). CPU path on OpenBLAS, in bands of rows on the
 * CPU pool (core/cpu_gemm.h). */
#include <stdlib.h>

#include "core/cpu_gemm.h"
#include "dense.h"
#include "layers.h"

static const char *const init_names[] = {"xavier", "he", NULL};
static const bn_init init_kinds[] = {BN_INIT_XAVIER, BN_INIT_HE};

enum { WEIGHT, BIAS };

static bn_status dense_parse(bn_layer *l, bn_options *o)
{
    int outputs, init;
    BN_TRY(bn_opt_int_required(o, "outputs", 1, 1 << 24, &outputs));
    BN_TRY(bn_opt_choice(o, "init", init_names, 0, &init));
    dense_priv *d = calloc(1, sizeof *d);
    if (!d) return bn_error(BN_ERR_NOMEM, "layer %s: out of host memory", l->name);
    d->outputs = outputs;
    d->init = init;
    l->priv = d;
    return BN_OK;
}

static bn_status dense_setup(bn_layer *l, bn_shape in, bn_shape *out)
{
    dense_priv *d = l->priv;
    long inputs = (long)in.c * in.h * in.w;
    if (inputs <= 0 || inputs > (1L << 30))
        return bn_layer_error(l, "input %dx%dx%d has no usable size", in.c, in.h, in.w);
    d->inputs = (int)inputs;
    if (bn_layer_add_param(l, "weight", d->outputs, d->inputs, 1, 1, init_kinds[d->init],
                           d->inputs, d->outputs) != WEIGHT)
        return bn_last_status();
    if (bn_layer_add_param(l, "bias", d->outputs, 1, 1, 1, BN_INIT_ZERO, d->inputs,
                           d->outputs) != BIAS)
        return bn_last_status();
    bn_param_mark_bias(l, BIAS);
    *out = (bn_shape){d->outputs, 1, 1};
    return BN_OK;
}

static bn_status dense_forward(bn_layer *l, const bn_pass *p)
{
    const dense_priv *d = l->priv;
    int n = l->in->n, k = d->inputs, m = d->outputs;
    BN_HOST_RD(x, l->in);
    BN_HOST_RD(w, l->params[WEIGHT].value);
    BN_HOST_RD(b, l->params[BIAS].value);
    BN_HOST_WR(y, l->out);
    /* Seed every row with the bias so the GEMM can accumulate on top of it (beta = 1). */
    for (int i = 0; i < n; i++)
        for (int o = 0; o < m; o++) y[(size_t)i * m + o] = b[o];
    bn_cpu_sgemm(0, 1, n, m, k, 1.0f, x, k, w, k, 1.0f, y, m);
    return BN_OK;
}

static bn_status dense_backward(bn_layer *l, const bn_pass *p)
{
    const dense_priv *d = l->priv;
    int n = l->in->n, k = d->inputs, m = d->outputs;
    BN_HOST_RD(x, l->in);
    BN_HOST_RD(w, l->params[WEIGHT].value);
    BN_HOST_RD(dy, l->out_grad);
    BN_HOST_WR(dw, l->params[WEIGHT].grad);
    BN_HOST_WR(db, l->params[BIAS].grad);
    bn_cpu_sgemm(1, 0, m, k, n, 1.0f, dy, m, x, k, 1.0f, dw, k);
    for (int i = 0; i < n; i++)
        for (int o = 0; o < m; o++) db[o] += dy[(size_t)i * m + o];
    if (l->in_grad) {
        BN_HOST_WR(dx, l->in_grad);
        bn_cpu_sgemm(0, 0, n, k, m, 1.0f, dy, m, w, k, 0.0f, dx, k);
    }
    return BN_OK;
}

static double dense_flops(const bn_layer *l)
{
    const dense_priv *d = l->priv;
    return 2.0 * d->inputs * d->outputs + d->outputs;
}

static void dense_destroy(bn_layer *l)
{
    dense_priv *d = l->priv;
#ifdef BN_WITH_CUDA
    if (d) bn_dense_gpu_release(d);
#endif
    free(d);
    l->priv = NULL;
}

const bn_layer_ops bn_dense_ops = {
    .type = "dense",
    .help = "fully connected Y = X W^T + b over the flattened input; keys: outputs (required), "
            "init = xavier|he (xavier)",
    .kind = BN_NVTX_LAYER_COMPUTE,
    .graph_safe = 1,
    .parse = dense_parse,
    .setup = dense_setup,
    .forward_cpu = dense_forward,
    .backward_cpu = dense_backward,
    .forward_gpu = BN_GPU(bn_dense_forward_gpu),
    .backward_gpu = BN_GPU(bn_dense_backward_gpu),
    .flops = dense_flops,
    .destroy = dense_destroy,
    .fuse_gpu = BN_GPU(bn_dense_fuse_relu),
    .absorbs = BN_ABSORB_RELU,
    .relu_in_place = 1, /* its backward pass does not read its output */
    .fuse_next_gpu = BN_GPU(bn_dense_fuse_next),
    .describe_gpu = BN_GPU(bn_dense_gpu_describe),
    .bf16 = 1,
};

#ifndef BN_WITH_CUDA
/* Without CUDA there are no GPU plans to force. */
void bn_dense_gpu_force_own(int config, int splits)
{
    (void)config;
    (void)splits;
}

int bn_dense_gpu_tiling(int kind, int n, int k, int m, int sms, int *splits)
{
    (void)kind, (void)n, (void)k, (void)m, (void)sms;
    *splits = 0;
    return 0;
}
#endif
