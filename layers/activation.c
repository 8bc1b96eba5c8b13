/* activation.c - elementwise activations: relu, sigmoid, tanh, leaky_relu, elu. One set of
 * layer functions serves all five types; the type's kind and its one parameter (slope or
 * alpha) live in priv.
 *
 * Derivatives at the kink follow the usual conventions: relu'(0) = 0, leaky_relu'(0) =
 * slope, and elu takes its linear branch only for x > 0. Sigmoid and tanh take their
 * derivatives from the output, which is what backward has at hand without recomputing. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "activation.h"
#include "core/parallel.h"
#include "layers.h"

static bn_status make_priv(bn_layer *l, act_kind kind, double a)
{
    act_priv *p = calloc(1, sizeof *p);
    if (!p) return bn_error(BN_ERR_NOMEM, "layer %s: out of host memory", l->name);
    p->kind = kind;
    p->a = (float)a;
    l->priv = p;
    return BN_OK;
}

static bn_status parse_relu(bn_layer *l, bn_options *o) { return make_priv(l, ACT_RELU, 0.0); }
static bn_status parse_sigmoid(bn_layer *l, bn_options *o) { return make_priv(l, ACT_SIGMOID, 0.0); }
static bn_status parse_tanh(bn_layer *l, bn_options *o) { return make_priv(l, ACT_TANH, 0.0); }

static bn_status parse_leaky(bn_layer *l, bn_options *o)
{
    double slope;
    BN_TRY(bn_opt_float(o, "slope", 0.01, 0.0, 1.0, &slope));
    /* A slope of 1 is the identity: almost certainly a mistake in the model file. */
    if (slope >= 1.0) return bn_opt_error(o, "slope", "slope = %g must be below 1", slope);
    return make_priv(l, ACT_LEAKY, slope);
}

static bn_status parse_elu(bn_layer *l, bn_options *o)
{
    double alpha;
    BN_TRY(bn_opt_float(o, "alpha", 1.0, 0.0, 1e6, &alpha));
    if (alpha <= 0.0) return bn_opt_error(o, "alpha", "alpha = %g must be positive", alpha);
    return make_priv(l, ACT_ELU, alpha);
}

static bn_status act_setup(bn_layer *l, bn_shape in, bn_shape *out)
{
    act_priv *p = l->priv;
    p->per_example = (double)in.c * in.h * in.w;
    *out = in;
    return BN_OK;
}

/* exp of a non-positive argument only, so neither branch overflows. */
static float sigmoid(float x)
{
    if (x >= 0.0f) return 1.0f / (1.0f + expf(-x));
    float e = expf(x);
    return e / (1.0f + e);
}

static inline uint32_t bits_of(float v)
{
    uint32_t b;
    memcpy(&b, &v, sizeof b);
    return b;
}

static inline float float_of(uint32_t b)
{
    float v;
    memcpy(&v, &b, sizeof v);
    return v;
}

/* yes where cond, else no, chosen by their bits: both are worked out, and the loops that use it
 * become vector selects. Written as `cond ? yes : no`, a product on one side only may not run
 * speculatively (it could trap), so GCC branched on each value and mispredicted half of them: a
 * leaky ReLU took 2.3-2.8 ms a pass over dcgan_disc's 0.6-1.3M values at batch 100 on two threads,
 * against 0.16 ms for a ReLU (version 93). */
static inline float choose(int cond, float yes, float no)
{
    const uint32_t keep = -(uint32_t)(cond != 0);
    return float_of((bits_of(yes) & keep) | (bits_of(no) & ~keep));
}

static inline float where_positive(float test, float yes, float no)
{
    return choose(test > 0.0f, yes, no);
}

/* e^y for y in [-18, 0]: y = k ln 2 + r with |r| <= ln 2 / 2 (k rounded to nearest by adding and
 * taking away 1.5 * 2^23, ln 2 in two parts so that k ln 2 is exact), e^r by its series to r^6
 * (a relative error under 1e-8 there), times 2^k made from its bits. */
static inline float exp_to_zero(float y)
{
    const float k = (y * 1.44269504f + 12582912.0f) - 12582912.0f;
    const float r = (y - k * 0.693359375f) + k * 2.12194440e-4f;
    float p = 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    return p * float_of((uint32_t)((int32_t)k + 127) << 23);
}

/* e^x - 1 for x <= 0, within 1.7 units in the last place of the exact value: near 0 (above -0.7)
 * its series to x^11, which keeps the digits that e^x - 1 would cancel (zero's sign kept); below,
 * exp_to_zero(x) - 1; from -18 on, -1 (e^-18 - 1 rounds to it). */
static inline float expm1_to_zero(float x)
{
    const float c = choose(x > -18.0f, x, -18.0f);
    float p = 1.0f / 39916800.0f;
    p = p * c + 1.0f / 3628800.0f;
    p = p * c + 1.0f / 362880.0f;
    p = p * c + 1.0f / 40320.0f;
    p = p * c + 1.0f / 5040.0f;
    p = p * c + 1.0f / 720.0f;
    p = p * c + 1.0f / 120.0f;
    p = p * c + 1.0f / 24.0f;
    p = p * c + 1.0f / 6.0f;
    p = p * c + 0.5f;
    const float near = choose(c == 0.0f, c, c + c * c * p);
    return choose(c > -0.7f, near, exp_to_zero(c) - 1.0f);
}

/* tanh(x) within 2.2 units in the last place of the exact value (glibc's tanhf: 2.19), in
 * arithmetic GCC vectorises, where tanhf is a call a value: 3.1 ns a value against 25-33 on this
 * machine's cores. Below 0.625 an odd polynomial of degree 11 fitted to tanh's relative error
 * (4.6e-9 in double); above, (1 - t) / (1 + t) with t = e^(-2|x|); from 9 on, 1 (tanh(9) rounds
 * to 1). NaN stays NaN, and the sign of zero is kept. */
static inline float tanh_of(float x)
{
    const float a = fabsf(x), c = choose(a < 9.0f, a, 9.0f), s = c * c;
    float q = -0.0057189627550542355f;
    q = q * s + 0.020653124898672104f;
    q = q * s + -0.05374465882778168f;
    q = q * s + 0.13331513106822968f;
    q = q * s + -0.3333328664302826f;
    const float t = exp_to_zero(-2.0f * c);
    const float r = choose(c < 0.625f, c + c * s * q, (1.0f - t) / (1.0f + t));
    return choose(x == x, copysignf(r, x), x);
}

static void apply(const act_priv *p, const float *x, float *y, size_t count)
{
    float a = p->a;
    switch (p->kind) {
    case ACT_RELU: /* the value read once: a select the compiler vectorises, not a branch */
        for (size_t i = 0; i < count; i++) {
            float v = x[i];
            y[i] = v > 0.0f ? v : 0.0f;
        }
        break;
    case ACT_SIGMOID:
        for (size_t i = 0; i < count; i++) y[i] = sigmoid(x[i]);
        break;
    case ACT_TANH:
        for (size_t i = 0; i < count; i++) y[i] = tanh_of(x[i]);
        break;
    case ACT_LEAKY:
        for (size_t i = 0; i < count; i++) y[i] = where_positive(x[i], x[i], a * x[i]);
        break;
    case ACT_ELU: /* x where above 0 (or NaN), else a(e^x - 1): vectorised as tanh is (3.2 ns a value
                   * against a branch around expm1f's 11) */
        for (size_t i = 0; i < count; i++) {
            const float v = x[i];
            y[i] = choose((v > 0.0f) | (v != v), v, a * expm1_to_zero(choose(v > 0.0f, 0.0f, v)));
        }
        break;
    }
}

/* dx = dy * f'(x), with f' written in whichever of x and y = f(x) is cheaper. */
static void apply_grad(const act_priv *p, const float *x, const float *y, const float *dy,
                       float *dx, size_t count)
{
    float a = p->a;
    switch (p->kind) {
    case ACT_RELU: /* y > 0 exactly where x > 0, and y is what a ReLU run in place still has */
        for (size_t i = 0; i < count; i++) {
            float v = y[i], g = dy[i]; /* both read whatever the sign: a select, not a branch */
            dx[i] = v > 0.0f ? g : 0.0f;
        }
        break;
    case ACT_SIGMOID:
        for (size_t i = 0; i < count; i++) dx[i] = dy[i] * y[i] * (1.0f - y[i]);
        break;
    case ACT_TANH:
        for (size_t i = 0; i < count; i++) dx[i] = dy[i] * (1.0f - y[i] * y[i]);
        break;
    case ACT_LEAKY:
        for (size_t i = 0; i < count; i++) dx[i] = where_positive(x[i], dy[i], a * dy[i]);
        break;
    case ACT_ELU: /* for x <= 0, d/dx a(e^x - 1) = a e^x = y + a */
        for (size_t i = 0; i < count; i++) dx[i] = where_positive(x[i], dy[i], dy[i] * (y[i] + a));
        break;
    }
}

/* A pass's buffers, for the pool's ranges. */
typedef struct act_run {
    const act_priv *p;
    const float *x, *y, *dy;
    float *out;
} act_run;

static void forward_range(void *arg, size_t lo, size_t hi)
{
    const act_run *r = arg;
    apply(r->p, r->x + lo, r->out + lo, hi - lo);
}

static void backward_range(void *arg, size_t lo, size_t hi)
{
    const act_run *r = arg;
    apply_grad(r->p, r->x + lo, r->y + lo, r->dy + lo, r->out + lo, hi - lo);
}

static bn_status act_forward(bn_layer *l, const bn_pass *pass)
{
    BN_HOST_RD(x, l->in);
    BN_HOST_WR(y, l->out);
    act_run r = {l->priv, x, NULL, NULL, y};
    bn_parallel_ranges(bn_blob_count(l->in), 0, forward_range, &r);
    return BN_OK;
}

static bn_status act_backward(bn_layer *l, const bn_pass *pass)
{
    if (!l->in_grad) return BN_OK;
    BN_HOST_RD(x, l->in);
    BN_HOST_RD(y, l->out);
    BN_HOST_RD(dy, l->out_grad);
    BN_HOST_WR(dx, l->in_grad);
    act_run r = {l->priv, x, y, dy, dx};
    bn_parallel_ranges(bn_blob_count(l->in), 0, backward_range, &r);
    return BN_OK;
}

/* A rough count: one operation for the piecewise-linear types, a few for the others. */
static double act_flops(const bn_layer *l)
{
    const act_priv *p = l->priv;
    double per = p->kind == ACT_RELU || p->kind == ACT_LEAKY ? 1.0 : 4.0;
    return per * p->per_example;
}

static void act_destroy(bn_layer *l)
{
    free(l->priv);
    l->priv = NULL;
}

#define ACTIVATION_OPS(sym, name, parser, text, absorbable)       \
    const bn_layer_ops sym = {                                    \
        .type = name,                                             \
        .help = text,                                             \
        .kind = BN_NVTX_LAYER_ACTIVATION,                         \
        .graph_safe = 1,                                          \
        .beside = bn_layer_beside_always,                         \
        .parse = parser,                                          \
        .setup = act_setup,                                       \
        .forward_cpu = act_forward,                               \
        .backward_cpu = act_backward,                             \
        .forward_gpu = BN_GPU(bn_activation_forward_gpu),         \
        .backward_gpu = BN_GPU(bn_activation_backward_gpu),       \
        .flops = act_flops,                                       \
        .destroy = act_destroy,                                   \
        .bf16 = 1,                                                \
        .absorbable_as = absorbable,                              \
        .relu_in_place = absorbable == BN_ABSORB_RELU,            \
        .out_slices = 1,                                          \
        .sums_grad_part = 1,                                      \
    }

/* Only the ReLU is declared to its neighbours: their epilogues and masks compute no other kind.
 * A ReLU after a ReLU may run in place over its output: the first one's backward pass reads only
 * the sign of that output, which max(y, 0) keeps. */
ACTIVATION_OPS(bn_relu_ops, "relu", parse_relu, "max(x, 0) elementwise; no keys", BN_ABSORB_RELU);
ACTIVATION_OPS(bn_sigmoid_ops, "sigmoid", parse_sigmoid, "1 / (1 + exp(-x)) elementwise; no keys", 0);
ACTIVATION_OPS(bn_tanh_ops, "tanh", parse_tanh, "tanh(x) elementwise; no keys", 0);
ACTIVATION_OPS(bn_leaky_relu_ops, "leaky_relu", parse_leaky,
               "x for x > 0, slope * x otherwise; keys: slope (0.01, in [0, 1))", 0);
ACTIVATION_OPS(bn_elu_ops, "elu", parse_elu,
               "x for x > 0, alpha * (exp(x) - 1) otherwise; keys: alpha (1.0, > 0)", 0);
