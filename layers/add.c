/* add.c - the element-wise sum of two or more inputs of one shape (residual connections),
 * each optionally scaled by a coefficient. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "add.h"
#include "core/parallel.h"
#include "layers.h"

/* coeff = a, b, ...: finite numbers, one per input (checked against the inputs in setup). */
static bn_status parse_coeffs(bn_options *o, add_priv *a)
{
    const char *text;
    BN_TRY(bn_opt_str(o, "coeff", NULL, &text));
    if (!text) return BN_OK;
    const char *p = text;
    for (;;) {
        char *end;
        errno = 0;
        double v = strtod(p, &end);
        if (end == p || errno || !isfinite(v) || fabs(v) > 1e6)
            return bn_opt_error(o, "coeff", "'%s' is not a list of numbers (each within +-1e6) separated by commas",
                                text);
        if (a->num_coeffs == BN_MAX_INPUTS)
            return bn_opt_error(o, "coeff", "more than %d coefficients", BN_MAX_INPUTS);
        a->coeff[a->num_coeffs++] = (float)v;
        while (*end == ' ' || *end == '\t') end++;
        if (!*end) return BN_OK;
        if (*end != ',')
            return bn_opt_error(o, "coeff", "'%s' is not a list of numbers separated by commas", text);
        p = end + 1;
    }
}

static bn_status add_parse(bn_layer *l, bn_options *o)
{
    add_priv a = {0};
    BN_TRY(parse_coeffs(o, &a));
    add_priv *q = malloc(sizeof *q);
    if (!q) return bn_error(BN_ERR_NOMEM, "layer %s: out of host memory", l->name);
    *q = a;
    l->priv = q;
    return BN_OK;
}

static bn_status add_setup(bn_layer *l, bn_shape in, bn_shape *out)
{
    const add_priv *a = l->priv;
    if (a->num_coeffs && a->num_coeffs != l->num_inputs)
        return bn_layer_error(l, "coeff has %d values for %d inputs", a->num_coeffs, l->num_inputs);
    for (int j = 1; j < l->num_inputs; j++) {
        bn_shape s = l->input_shapes[j];
        if (s.c != in.c || s.h != in.h || s.w != in.w)
            return bn_layer_error(l, "input %d is %dx%dx%d but input 1 is %dx%dx%d: added inputs need one shape",
                                  j + 1, s.c, s.h, s.w, in.c, in.h, in.w);
    }
    *out = in;
    return BN_OK;
}

/* A pass's buffers, for the pool's ranges: out = sum of c_j * in_j (forward), or
 * out_j = c_j * in_0 for each input gradient (backward); with the ReLU after it done here
 * (bn_layer.cpu_relu), max(out, 0), and in_0 read where that output is positive only. */
typedef struct add_run {
    const add_priv *a;
    int inputs;
    const float *in[BN_MAX_INPUTS];
    float *out[BN_MAX_INPUTS];
    const float *relu_y; /* the output of a ReLU the forward pass did (bn_layer.cpu_relu), or NULL */
    int relu;
} add_run;

/* dx = c * (dy where y > 0, else 0), in the order of the ReLU's pass and then this layer's;
 * restrict, and the product after the select, so that the compiler vectorises it. */
static void masked_scale(float *restrict dx, const float *restrict dy, const float *restrict y, float c, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float v = y[i], d = dy[i];
        float kept = v > 0.0f ? d : 0.0f;
        dx[i] = c * kept;
    }
}

static void relu_over(float *restrict y, size_t n)
{
    for (size_t i = 0; i < n; i++) y[i] = y[i] > 0.0f ? y[i] : 0.0f;
}

static void forward_range(void *arg, size_t lo, size_t hi)
{
    const add_run *r = arg;
    float *y = r->out[0];
    for (int j = 0; j < r->inputs; j++) {
        const float *x = r->in[j];
        float c = bn_add_coeff(r->a, j);
        if (j == 0 && !r->a->num_coeffs) memcpy(y + lo, x + lo, (hi - lo) * sizeof *y);
        else if (j == 0) for (size_t i = lo; i < hi; i++) y[i] = c * x[i];
        else if (!r->a->num_coeffs) for (size_t i = lo; i < hi; i++) y[i] += x[i];
        else for (size_t i = lo; i < hi; i++) y[i] += c * x[i];
    }
    if (r->relu) relu_over(y + lo, hi - lo);
}

static bn_status add_forward(bn_layer *l, const bn_pass *p)
{
    if (l->cpu_summed_input) return BN_OK; /* the last input's producer wrote the sum */
    add_run r = {l->priv, l->num_inputs, {0}, {0}, NULL, l->cpu_relu};
    BN_HOST_WR(y, l->out);
    r.out[0] = y;
    for (int j = 0; j < l->num_inputs; j++) {
        BN_HOST_RD(x, l->inputs[j]);
        r.in[j] = x;
    }
    bn_parallel_ranges(bn_blob_count(l->out), 0, forward_range, &r);
    return BN_OK;
}

static void backward_range(void *arg, size_t lo, size_t hi)
{
    const add_run *r = arg;
    const float *dy = r->in[0];
    for (int j = 0; j < r->inputs; j++) {
        float *dx = r->out[j], c = bn_add_coeff(r->a, j);
        if (!dx) continue;
        if (r->relu_y) masked_scale(dx + lo, dy + lo, r->relu_y + lo, c, hi - lo);
        else if (!r->a->num_coeffs) memcpy(dx + lo, dy + lo, (hi - lo) * sizeof *dx);
        else for (size_t i = lo; i < hi; i++) dx[i] = c * dy[i];
    }
}

static bn_status add_backward(bn_layer *l, const bn_pass *p)
{
    add_run r = {l->priv, l->num_inputs, {0}, {0}, NULL, 0};
    BN_HOST_RD(dy, l->out_grad);
    r.in[0] = dy;
    if (l->cpu_relu && !(r.relu_y = bn_blob_host_rd(l->out))) return bn_last_status();
    for (int j = 0; j < l->num_inputs; j++) {
        /* the producer that wrote the sum reads this layer's output gradient itself */
        if (!l->input_grads[j] || j == l->cpu_summed_input - 1) continue;
        BN_HOST_WR(dx, l->input_grads[j]);
        r.out[j] = dx;
    }
    bn_parallel_ranges(bn_blob_count(l->out), 0, backward_range, &r);
    return BN_OK;
}

/* A multiply and an add per element and input past the first. */
static double add_flops(const bn_layer *l)
{
    const add_priv *a = l->priv;
    double per_example = (double)l->out->c * l->out->h * l->out->w;
    return per_example * (l->num_inputs - 1) * (a->num_coeffs ? 2 : 1);
}

/* A sum without coefficients (bn_layer_ops.cpu_sums_inputs). */
static int add_sums_inputs(const bn_layer *l)
{
    const add_priv *a = l->priv;
    return a->num_coeffs == 0;
}

const bn_layer_ops bn_add_ops = {
    .type = "add",
    .help = "element-wise sum of 2 to 8 inputs of one shape (input = a, b, ...); keys: coeff (a number per "
            "input, all 1 by default)",
    .kind = BN_NVTX_LAYER_OTHER,
    .graph_safe = 1,
    .beside = bn_layer_beside_always,
    .min_inputs = 2,
    .max_inputs = BN_MAX_INPUTS,
    .parse = add_parse,
    .setup = add_setup,
    .forward_cpu = add_forward,
    .backward_cpu = add_backward,
    .forward_gpu = BN_GPU(bn_add_forward_gpu),
    .backward_gpu = BN_GPU(bn_add_backward_gpu),
    .flops = add_flops,
    .fuse_gpu = BN_GPU(bn_add_fuse_relu),
    .absorbs = BN_ABSORB_RELU,
    .relu_in_place = 1, /* its backward pass does not read its output */
    .relu_cpu = 1,
    .cpu_sums_inputs = add_sums_inputs,
    .sums_grad_part = 1,
    .bf16 = 1,
};
