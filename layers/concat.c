/* concat.c - two or more inputs of one height and width joined along the channels, in input
 * order (Inception's and U-Net's joins). */
#include <string.h>

#include "concat.h"
#include "layers.h"

static bn_status concat_setup(bn_layer *l, bn_shape in, bn_shape *out)
{
    int channels = 0;
    for (int j = 0; j < l->num_inputs; j++) {
        bn_shape s = l->input_shapes[j];
        if (s.h != in.h || s.w != in.w)
            return bn_layer_error(l, "input %d is %dx%dx%d but input 1 is %dx%dx%d: joined inputs need one height "
                                  "and width", j + 1, s.c, s.h, s.w, in.c, in.h, in.w);
        channels += s.c;
    }
    *out = (bn_shape){channels, in.h, in.w};
    return BN_OK;
}

/* Copies, per example, each input's block of channels to or from its place in the output. */
static bn_status concat_copy(bn_layer *l, int backward)
{
    size_t plane = (size_t)l->out->h * l->out->w, example = l->out->c * plane, offset = 0;
    const float *dy = NULL;
    float *y = NULL;
    if (backward) {
        if (!(dy = bn_blob_host_rd(l->out_grad))) return bn_last_status();
    } else if (!(y = bn_blob_host_wr(l->out))) {
        return bn_last_status();
    }
    for (int j = 0; j < l->num_inputs; j++) {
        size_t block = (size_t)l->input_shapes[j].c * plane;
        if (backward && l->input_grads[j]) {
            BN_HOST_WR(dx, l->input_grads[j]);
            for (int n = 0; n < l->out->n; n++) memcpy(dx + n * block, dy + n * example + offset, block * sizeof *dx);
        } else if (!backward) {
            BN_HOST_RD(x, l->inputs[j]);
            for (int n = 0; n < l->out->n; n++) memcpy(y + n * example + offset, x + n * block, block * sizeof *y);
        }
        offset += block;
    }
    return BN_OK;
}

static bn_status concat_forward(bn_layer *l, const bn_pass *p)
{
    return concat_copy(l, 0);
}

static bn_status concat_backward(bn_layer *l, const bn_pass *p)
{
    return concat_copy(l, 1);
}

const bn_layer_ops bn_concat_ops = {
    .type = "concat",
    .help = "joins 2 to 8 inputs of one height and width along the channels, in input order "
            "(input = a, b, ...); no keys",
    .kind = BN_NVTX_LAYER_OTHER,
    .graph_safe = 1,
    .min_inputs = 2,
    .max_inputs = BN_MAX_INPUTS,
    .setup = concat_setup,
    .forward_cpu = concat_forward,
    .backward_cpu = concat_backward,
    .forward_gpu = BN_GPU(bn_concat_forward_gpu),
    .backward_gpu = BN_GPU(bn_concat_backward_gpu),
    .bf16 = 1,
    .relu_in_place = 1, /* its backward pass does not read its output */
};
