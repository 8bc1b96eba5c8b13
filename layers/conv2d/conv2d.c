/* conv2d.c - 2-D convolution (cross-correlation) with square kernels, zero padding and a
 * stride: the layer's keys, shapes and parameters; its CPU passes are conv_cpu.c's (im2col
 * then GEMMs, W (filters x c*k*k) times the column matrix (c*k*k x positions)). */
#include <stdlib.h>

#include "conv2d.h"
#include "layers.h"

static const char *const init_names[] = {"xavier", "he", NULL};
static const bn_init init_kinds[] = {BN_INIT_XAVIER, BN_INIT_HE};
static const char *const engine_names[] = {"auto", "cudnn", "blobnet", NULL};

enum { WEIGHT, BIAS };

/* 2^28 floats (1 GiB): a bound on the weights and on one example's column matrix (the CPU
 * passes' scratch holds at least one). */
#define CONV_MAX_FLOATS (1 << 28)

static bn_status conv_parse(bn_layer *l, bn_options *o)
{
    conv_priv c = {0};
    BN_TRY(bn_opt_int_required(o, "filters", 1, 1 << 20, &c.filters));
    BN_TRY(bn_opt_int_required(o, "size", 1, 1 << 12, &c.size));
    BN_TRY(bn_opt_int(o, "stride", 1, 1, 1 << 12, &c.stride));
    BN_TRY(bn_opt_int(o, "pad", 0, 0, 1 << 12, &c.pad));
    BN_TRY(bn_opt_choice(o, "init", init_names, 0, &c.init));
    BN_TRY(bn_opt_choice(o, "engine", engine_names, BN_CONV_ENGINE_AUTO, &c.engine));
    /* A window lying wholly in the padding would see no input at all. */
    if (c.pad >= c.size)
        return bn_opt_error(o, "pad", "pad = %d must be smaller than size = %d", c.pad, c.size);
    conv_priv *p = malloc(sizeof *p);
    if (!p) return bn_error(BN_ERR_NOMEM, "layer %s: out of host memory", l->name);
    *p = c;
    l->priv = p;
    return BN_OK;
}

static bn_status conv_setup(bn_layer *l, bn_shape in, bn_shape *out)
{
    conv_priv *c = l->priv;
    int oh = bn_window_out(in.h, c->size, c->stride, c->pad);
    int ow = bn_window_out(in.w, c->size, c->stride, c->pad);
    if (oh == 0 || ow == 0)
        return bn_layer_error(l, "kernel %dx%d is larger than the padded input %dx%d", c->size,
                              c->size, in.h + 2 * c->pad, in.w + 2 * c->pad);
    /* The passes count weights and column cells in ints: sizes past CONV_MAX_FLOATS are refused
     * before either can go wrong. */
    double weights = (double)c->filters * in.c * c->size * c->size;
    double cols = (double)in.c * c->size * c->size * oh * ow;
    if (weights > CONV_MAX_FLOATS || cols > CONV_MAX_FLOATS)
        return bn_layer_error(l, "input %dx%dx%d and %d filters of %dx%d need %.3g weights and a column buffer of "
                              "%.3g floats; at most %d each", in.c, in.h, in.w, c->filters, c->size, c->size,
                              weights, cols, CONV_MAX_FLOATS);
    c->g = (bn_conv_geom){in.c, in.h, in.w, c->size, c->stride, c->pad, oh, ow};
    int taps = in.c * c->size * c->size;
    if (bn_layer_add_param(l, "weight", c->filters, in.c, c->size, c->size, init_kinds[c->init],
                           taps, c->filters * c->size * c->size) != WEIGHT)
        return bn_last_status();
    if (bn_layer_add_param(l, "bias", c->filters, 1, 1, 1, BN_INIT_ZERO, taps, c->filters) != BIAS)
        return bn_last_status();
    bn_param_mark_bias(l, BIAS);
    *out = (bn_shape){c->filters, oh, ow};
    return BN_OK;
}

/* Where the layer writes a plain sum (bn_layer.cpu_sum_into), its output is the sum's, its ReLU
 * the sum's, and the sum's other inputs are added. */
static bn_status conv_forward(bn_layer *l, const bn_pass *p)
{
    conv_priv *c = l->priv;
    const bn_layer *sum = l->cpu_sum_into;
    const float *addends[BN_MAX_INPUTS];
    int num_addends = 0;
    for (int j = 0; sum && j < sum->num_inputs; j++) {
        if (j == sum->cpu_summed_input - 1) continue;
        if (!(addends[num_addends++] = bn_blob_host_rd(sum->inputs[j]))) return bn_last_status();
    }
    BN_HOST_RD(x, l->in);
    BN_HOST_RD(w, l->params[WEIGHT].value);
    BN_HOST_RD(b, l->params[BIAS].value);
    BN_HOST_WR(y, sum ? sum->out : l->out);
    return bn_conv2d_cpu_forward_sum(&c->g, c->filters, l->in->n, x, w, b, y, sum ? sum->cpu_relu : l->cpu_relu, addends,
                                     num_addends);
}

static bn_status conv_backward(bn_layer *l, const bn_pass *p)
{
    conv_priv *c = l->priv;
    BN_HOST_RD(x, l->in);
    BN_HOST_RD(w, l->params[WEIGHT].value);
    const bn_layer *sum = l->cpu_sum_into; /* its output gradient is the sum's, masked by its ReLU */
    BN_HOST_RD(dy, sum ? sum->out_grad : l->out_grad);
    BN_HOST_WR(dw, l->params[WEIGHT].grad);
    BN_HOST_WR(db, l->params[BIAS].grad);
    float *dx = NULL;
    if (l->in_grad) {
        dx = bn_blob_host_wr(l->in_grad);
        if (!dx) return bn_last_status();
    }
    const float *relu_y = NULL;
    const bn_layer *masked = sum ? sum : l;
    if (masked->cpu_relu && !(relu_y = bn_blob_host_rd(masked->out))) return bn_last_status();
    return bn_conv2d_cpu_backward(&c->g, c->filters, l->in->n, x, w, dy, relu_y, dx, dw, db);
}

static double conv_flops(const bn_layer *l)
{
    const conv_priv *c = l->priv;
    double pos = (double)c->g.oh * c->g.ow;
    return pos * c->filters * (2.0 * c->g.c * c->g.k * c->g.k + 1.0);
}

static void conv_destroy(bn_layer *l)
{
    conv_priv *c = l->priv;
    if (c) {
#ifdef BN_WITH_CUDA
        bn_conv2d_gpu_release(c);
#endif
    }
    free(c);
    l->priv = NULL;
}

const bn_layer_ops bn_conv2d_ops = {
    .type = "conv2d",
    .help = "2-D convolution with square kernels; keys: filters (required), size (required), "
            "stride (1), pad (0, < size), init = xavier|he (xavier), engine = auto|cudnn|blobnet (auto: "
            "the faster on the GPU, measured per batch size)",
    .kind = BN_NVTX_LAYER_COMPUTE,
    .graph_safe = 1,
    .parse = conv_parse,
    .setup = conv_setup,
    .forward_cpu = conv_forward,
    .backward_cpu = conv_backward,
    .forward_gpu = BN_GPU(bn_conv2d_forward_gpu),
    .backward_gpu = BN_GPU(bn_conv2d_backward_gpu),
    .beside = BN_GPU(bn_conv2d_beside),
    .flops = conv_flops,
    .destroy = conv_destroy,
    .fuse_gpu = BN_GPU(bn_conv2d_fuse_relu),
    .absorbs = BN_ABSORB_RELU,
    .relu_in_place = 1, /* its backward pass does not read its output */
    .act_out_slices = 1, /* the bias kernels write a fused ReLU's output at its stride */
    .relu_cpu = 1,
    .sum_cpu = 1,
    .fuse_next_gpu = BN_GPU(bn_conv2d_fuse_next),
    .describe_gpu = BN_GPU(bn_conv2d_gpu_describe),
    .bf16 = 1,
};

#ifndef BN_WITH_CUDA
/* Without CUDA there are no GPU plans to force. */
void bn_conv2d_gpu_force_own(int family)
{
    (void)family;
}

void bn_conv2d_gpu_force_graph(int on)
{
    (void)on;
}
#endif
