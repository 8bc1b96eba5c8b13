/* concat.c - two or more inputs of one height and width joined along the channels, in input
 * order (Inception's and U-Net's joins). */
#include <stdio.h>
#include <string.h>

#include "concat.h"
#include "core/parallel.h"
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

/* Whether input j is a slice of the output that its producer wrote in place (fusion.c): then
 * neither pass copies it. */
int bn_concat_in_place(const bn_layer *l, int j)
{
    return l->inputs[j]->root == l->out->root;
}

/* A pass's copies, for the pool's ranges of examples: for each input j, block[j] floats of every
 * example from src[j] to dst[j], their examples src_step[j] and dst_step[j] floats apart (one
 * side the input's or its gradient's, the other the output's or its gradient's, at the input's
 * channels). */
typedef struct concat_run {
    int inputs;
    size_t block[BN_MAX_INPUTS], src_step[BN_MAX_INPUTS], dst_step[BN_MAX_INPUTS];
    const float *src[BN_MAX_INPUTS];
    float *dst[BN_MAX_INPUTS]; /* NULL: an input without a gradient */
} concat_run;

static void copy_examples(void *arg, size_t lo, size_t hi)
{
    const concat_run *r = arg;
    for (int j = 0; j < r->inputs; j++) {
        if (!r->dst[j]) continue;
        for (size_t n = lo; n < hi; n++)
            memcpy(r->dst[j] + n * r->dst_step[j], r->src[j] + n * r->src_step[j], r->block[j] * sizeof(float));
    }
}

static bn_status concat_copy(bn_layer *l, int backward)
{
    size_t plane = (size_t)l->out->h * l->out->w, example = l->out->c * plane, offset = 0;
    concat_run r = {l->num_inputs, {0}, {0}, {0}, {0}, {0}};
    const float *dy = NULL;
    float *y = NULL;
    if (backward) {
        if (!(dy = bn_blob_host_rd(l->out_grad))) return bn_last_status();
    } else if (!(y = bn_blob_host_wr(l->out))) {
        return bn_last_status();
    }
    for (int j = 0; j < l->num_inputs; j++) {
        size_t block = (size_t)l->input_shapes[j].c * plane;
        r.block[j] = block;
        if (bn_concat_in_place(l, j)) {
            /* dst stays NULL: nothing to copy */
        } else if (backward && l->input_grads[j]) {
            BN_HOST_WR(dx, l->input_grads[j]);
            r.src[j] = dy + offset, r.src_step[j] = example;
            r.dst[j] = dx, r.dst_step[j] = block;
        } else if (!backward) {
            BN_HOST_RD(x, l->inputs[j]);
            r.src[j] = x, r.src_step[j] = block;
            r.dst[j] = y + offset, r.dst_step[j] = example;
        }
        offset += block;
    }
    /* Examples per task: about 16K floats. */
    bn_parallel_ranges((size_t)l->out->n, example >= 16384 ? 1 : 16384 / example, copy_examples, &r);
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

/* For `blobnet time`: which inputs their producers write in place, and which are copied. */
static void concat_describe(const bn_layer *l, char *buf, size_t cap)
{
    size_t len = 0;
    if (cap) buf[0] = '\0';
    for (int pass = 0; pass < 2; pass++) {
        int first = 1;
        for (int j = 0; j < l->num_inputs && len < cap; j++) {
            if (bn_concat_in_place(l, j) != (pass == 0)) continue;
            const char *name = l->inputs[j]->name, *dot = strrchr(name, '.');
            const char *lead = !first ? ", " : pass == 0 ? "in place: " : len ? "; copied: " : "copied: ";
            int w = snprintf(buf + len, cap - len, "%s%.*s", lead,
                             dot ? (int)(dot - name) : (int)strlen(name), name);
            if (w < 0) return;
            len += (size_t)w;
            first = 0;
        }
    }
}

const bn_layer_ops bn_concat_ops = {
    .type = "concat",
    .help = "joins 2 to 8 inputs of one height and width along the channels, in input order "
            "(input = a, b, ...); no keys",
    .kind = BN_NVTX_LAYER_OTHER,
    .graph_safe = 1,
    .beside = bn_layer_beside_always,
    .min_inputs = 2,
    .max_inputs = BN_MAX_INPUTS,
    .setup = concat_setup,
    .forward_cpu = concat_forward,
    .backward_cpu = concat_backward,
    .forward_gpu = BN_GPU(bn_concat_forward_gpu),
    .backward_gpu = BN_GPU(bn_concat_backward_gpu),
    .bf16 = 1,
    .relu_in_place = 1, /* its backward pass does not read its output */
    .joins_slices = 1,
    .describe_gpu = concat_describe,
};
