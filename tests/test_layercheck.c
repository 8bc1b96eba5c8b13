/* test_layercheck.c - the check kit: the built-in layers pass it, and test-only layer types
 * that each break one rule of the layer contract are caught by the check for that rule. */
#include "check/layercheck.h"
#include "core/registry.h"
#include "testing.h"

/* ---- test-only layer types: y = 2x, or y = w * x with one learnable scalar ---- */

static bn_status same_setup(bn_layer *l, bn_shape in, bn_shape *out)
{
    *out = in;
    return BN_OK;
}

static bn_status times(bn_layer *l, float k, size_t count)
{
    BN_HOST_RD(x, l->in);
    BN_HOST_WR(y, l->out);
    for (size_t i = 0; i < count; i++) y[i] = k * x[i];
    return BN_OK;
}

static bn_status double_forward(bn_layer *l, const bn_pass *p)
{
    return times(l, 2.0f, bn_blob_count(l->out));
}

/* Forgets the second half of the output. */
static bn_status half_forward(bn_layer *l, const bn_pass *p)
{
    return times(l, 2.0f, bn_blob_count(l->out) / 2);
}

/* A different result on every other call, like a reduction whose order changes. */
static bn_status noisy_forward(bn_layer *l, const bn_pass *p)
{
    static unsigned calls;
    return times(l, (calls++ & 1) ? 2.0f : 2.0f + 1e-6f, bn_blob_count(l->out));
}

/* A "GPU" path one percent off: it runs on the host, which is all the comparison needs. */
static bn_status off_forward(bn_layer *l, const bn_pass *p)
{
    return times(l, 2.02f, bn_blob_count(l->out));
}

static bn_status input_grad_times(bn_layer *l, float k)
{
    if (!l->in_grad) return BN_OK;
    BN_HOST_RD(dy, l->out_grad);
    BN_HOST_WR(dx, l->in_grad);
    for (size_t i = 0; i < bn_blob_count(l->in); i++) dx[i] = k * dy[i];
    return BN_OK;
}

static bn_status double_backward(bn_layer *l, const bn_pass *p)
{
    return input_grad_times(l, 2.0f);
}

/* The derivative of 2x is not 3. */
static bn_status wrong_backward(bn_layer *l, const bn_pass *p)
{
    return input_grad_times(l, 3.0f);
}

/* Output one channel wider on every call: setup depends on something besides the input. */
static bn_status growing_setup(bn_layer *l, bn_shape in, bn_shape *out)
{
    static int calls;
    *out = (bn_shape){in.c + calls++, in.h, in.w};
    return BN_OK;
}

static bn_status scale_setup(bn_layer *l, bn_shape in, bn_shape *out)
{
    if (bn_layer_add_param(l, "w", 1, 1, 1, 1, BN_INIT_CONSTANT, 1, 1) != 0) return bn_last_status();
    l->params[0].init_value = 1.5f;
    *out = in;
    return BN_OK;
}

static bn_status scale_forward(bn_layer *l, const bn_pass *p)
{
    BN_HOST_RD(w, l->params[0].value);
    return times(l, w[0], bn_blob_count(l->out));
}

/* dx = w dy and dw = sum x dy, which is added to the gradient or, wrongly, overwrites it. */
static bn_status scale_backward(bn_layer *l, int add)
{
    BN_HOST_RD(w, l->params[0].value);
    BN_TRY(input_grad_times(l, w[0]));
    BN_HOST_RD(x, l->in);
    BN_HOST_RD(dy, l->out_grad);
    BN_HOST_WR(dw, l->params[0].grad);
    double s = 0.0;
    for (size_t i = 0; i < bn_blob_count(l->in); i++) s += (double)x[i] * dy[i];
    dw[0] = (add ? dw[0] : 0.0f) + (float)s;
    return BN_OK;
}

static bn_status scale_backward_adds(bn_layer *l, const bn_pass *p)
{
    return scale_backward(l, 1);
}

static bn_status scale_backward_overwrites(bn_layer *l, const bn_pass *p)
{
    return scale_backward(l, 0);
}

/* The sign of the input gradient flipped. */
static bn_status flipped_backward(bn_layer *l, const bn_pass *p)
{
    return input_grad_times(l, -2.0f);
}

/* dw ten percent too large: one derivative term slightly off. */
static bn_status scale_backward_off(bn_layer *l, const bn_pass *p)
{
    BN_TRY(scale_backward(l, 1));
    BN_HOST_RD(x, l->in);
    BN_HOST_RD(dy, l->out_grad);
    BN_HOST_WR(dw, l->params[0].grad);
    double s = 0.0;
    for (size_t i = 0; i < bn_blob_count(l->in); i++) s += (double)x[i] * dy[i];
    dw[0] += 0.1f * (float)s;
    return BN_OK;
}

/* Writes the element after the output's last one (the spare row of the kit's network). */
static bn_status past_end_forward(bn_layer *l, const bn_pass *p)
{
    BN_TRY(double_forward(l, p));
    float *y = bn_blob_host_wr(l->out);
    if (!y) return bn_last_status();
    y[bn_blob_count(l->out)] = 0.0f;
    return BN_OK;
}

#define TEST_OPS(sym, name, setup_fn, fwd, bwd)                                                          \
    static const bn_layer_ops sym = {.type = name, .help = "test only", .setup = setup_fn, .forward_cpu = fwd, \
                                     .backward_cpu = bwd}

TEST_OPS(good_ops, "lc_test_double", same_setup, double_forward, double_backward);
TEST_OPS(wrong_backward_ops, "lc_test_wrong_backward", same_setup, double_forward, wrong_backward);
TEST_OPS(half_forward_ops, "lc_test_half_forward", same_setup, half_forward, double_backward);
TEST_OPS(noisy_ops, "lc_test_noisy", same_setup, noisy_forward, double_backward);
TEST_OPS(growing_ops, "lc_test_growing", growing_setup, double_forward, double_backward);
TEST_OPS(scale_ops, "lc_test_scale", scale_setup, scale_forward, scale_backward_adds);
TEST_OPS(overwrite_ops, "lc_test_overwrites", scale_setup, scale_forward, scale_backward_overwrites);
TEST_OPS(flipped_ops, "lc_test_flipped", same_setup, double_forward, flipped_backward);
TEST_OPS(scale_off_ops, "lc_test_scale_off", scale_setup, scale_forward, scale_backward_off);
TEST_OPS(past_end_ops, "lc_test_past_end", same_setup, past_end_forward, double_backward);

/* The faults on the "GPU" path only (host functions stand in for it, as in wrong_gpu_ops). */
static const bn_layer_ops overwrite_gpu_ops = {
    .type = "lc_test_overwrites_gpu", .help = "test only", .setup = scale_setup, .forward_cpu = scale_forward,
    .backward_cpu = scale_backward_adds, .forward_gpu = scale_forward, .backward_gpu = scale_backward_overwrites,
};
static const bn_layer_ops past_end_gpu_ops = {
    .type = "lc_test_past_end_gpu", .help = "test only", .setup = same_setup, .forward_cpu = double_forward,
    .backward_cpu = double_backward, .forward_gpu = past_end_forward, .backward_gpu = double_backward,
};

static const bn_layer_ops wrong_gpu_ops = {
    .type = "lc_test_wrong_gpu", .help = "test only", .setup = same_setup, .forward_cpu = double_forward,
    .backward_cpu = double_backward, .forward_gpu = off_forward, .backward_gpu = double_backward,
};

/* Registers ops unless an earlier test did. */
static bn_status ensure(const bn_layer_ops *ops)
{
    return bn_find_layer(ops->type) == ops ? BN_OK : bn_register_layer(ops);
}

static bn_status run_kit_as(const char *type, const char *options, int stochastic, bn_ctx *ctx,
                            bn_layercheck_report *r)
{
    bn_layercheck_opts o = bn_layercheck_defaults();
    o.type = type;
    o.options = options;
    o.input = (bn_shape){2, 3, 4};
    o.ctx = ctx;
    o.stochastic = stochastic;
    return bn_layercheck_run(&o, r);
}

static bn_status run_kit(const char *type, const char *options, bn_ctx *ctx, bn_layercheck_report *r)
{
    return run_kit_as(type, options, 0, ctx, r);
}

static void print_report(const char *type, const bn_layercheck_report *r)
{
    for (int i = 0; i < BN_CHECK_COUNT; i++)
        fprintf(stderr, "    %s: %-16s %s %s\n", type, r->checks[i].name, bn_check_outcome_name(r->checks[i].outcome),
                r->checks[i].detail);
}

/* The outcome of check id, printing the whole report when it is not the expected one. */
#define CHECK_OUTCOME(type, r, id, want)                                                      \
    do {                                                                                     \
        if ((r).checks[id].outcome != (want)) print_report(type, &(r));                      \
        CHECK_MSG((r).checks[id].outcome == (want), "%s: check '%s' is %s", type,            \
                  (r).checks[id].name, bn_check_outcome_name((r).checks[id].outcome));       \
    } while (0)

static const bn_check_id cpu_checks[] = {BN_CHECK_SHAPES, BN_CHECK_WRITES, BN_CHECK_GRADIENT, BN_CHECK_EVALUATION,
                                         BN_CHECK_DETERMINISM_CPU};

BN_TEST(layercheck_builtin_types_pass_on_cpu)
{
    static const struct {
        const char *type, *options;
        int has_params;
    } cases[] = {
        {"dense", "outputs=5", 1}, {"conv2d", "filters=3 size=3 pad=1", 1}, {"maxpool", "size=2", 0},
        {"avgpool", "size=3 stride=2 pad=1", 0}, {"relu", NULL, 0}, {"sigmoid", NULL, 0}, {"tanh", NULL, 0},
        {"leaky_relu", "slope=0.1", 0}, {"elu", NULL, 0}, {"dropout", "rate=0.3", 0}, {"softmax_ce", NULL, 0},
        {"add", "coeff=1,-0.5", 0}, {"concat", NULL, 0}, {"batchnorm", NULL, 1}, {"avgpool", "global=1", 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        bn_layercheck_report r;
        CHECK_OK(run_kit_as(cases[i].type, cases[i].options, strcmp(cases[i].type, "dropout") == 0, NULL, &r));
        for (size_t k = 0; k < sizeof cpu_checks / sizeof cpu_checks[0]; k++)
            CHECK_OUTCOME(cases[i].type, r, cpu_checks[k], BN_CHECK_PASS);
        CHECK_OUTCOME(cases[i].type, r, BN_CHECK_ACCUMULATES, cases[i].has_params ? BN_CHECK_PASS : BN_CHECK_SKIP);
        CHECK_OUTCOME(cases[i].type, r, BN_CHECK_DEVICES, BN_CHECK_SKIP);
        CHECK_OUTCOME(cases[i].type, r, BN_CHECK_DETERMINISM_GPU, BN_CHECK_SKIP);
        CHECK(r.failed == 0 && r.passed + r.skipped == BN_CHECK_COUNT);
    }
    return BN_PASS;
}

BN_TEST(layercheck_correct_test_layers_pass)
{
    CHECK_OK(ensure(&good_ops));
    CHECK_OK(ensure(&scale_ops));
    bn_layercheck_report r;
    CHECK_OK(run_kit("lc_test_double", NULL, NULL, &r));
    CHECK(r.failed == 0 && r.passed == 5);
    CHECK(strstr(r.checks[BN_CHECK_SHAPES].detail, "2x3x4 -> 2x3x4 at batch 1 and 3; no parameters") != NULL);
    CHECK(strstr(r.checks[BN_CHECK_WRITES].detail, "all 72 outputs and 72 input-gradient elements") != NULL);
    CHECK_OK(run_kit("lc_test_scale", NULL, NULL, &r));
    CHECK(r.failed == 0 && r.passed == 6);
    CHECK(strstr(r.checks[BN_CHECK_SHAPES].detail, "w 1x1x1x1") != NULL);
    return BN_PASS;
}

BN_TEST(layercheck_catches_a_wrong_backward)
{
    CHECK_OK(ensure(&wrong_backward_ops));
    bn_layercheck_report r;
    CHECK_OK(run_kit("lc_test_wrong_backward", NULL, NULL, &r));
    CHECK_OUTCOME("wrong backward", r, BN_CHECK_GRADIENT, BN_CHECK_FAIL);
    /* dJ/dx is 2 R but the layer says 3 R: a relative error of 1 / 5. */
    CHECK_MSG(strstr(r.checks[BN_CHECK_GRADIENT].detail, "gradient check failed at input[") != NULL, "%s",
              r.checks[BN_CHECK_GRADIENT].detail);
    CHECK_MSG(strstr(r.checks[BN_CHECK_GRADIENT].detail, "relative error 0.2 >") != NULL, "%s",
              r.checks[BN_CHECK_GRADIENT].detail);
    CHECK_OUTCOME("wrong backward", r, BN_CHECK_SHAPES, BN_CHECK_PASS);
    CHECK_OUTCOME("wrong backward", r, BN_CHECK_WRITES, BN_CHECK_PASS);
    CHECK(r.failed == 1);
    return BN_PASS;
}

BN_TEST(layercheck_catches_an_unwritten_output)
{
    CHECK_OK(ensure(&half_forward_ops));
    bn_layercheck_report r;
    CHECK_OK(run_kit("lc_test_half_forward", NULL, NULL, &r));
    CHECK_OUTCOME("half forward", r, BN_CHECK_WRITES, BN_CHECK_FAIL);
    CHECK_MSG(strstr(r.checks[BN_CHECK_WRITES].detail, "36 of 72 outputs, 0 of 72 input-gradient") != NULL, "%s",
              r.checks[BN_CHECK_WRITES].detail);
    return BN_PASS;
}

BN_TEST(layercheck_catches_an_overwritten_parameter_gradient)
{
    CHECK_OK(ensure(&overwrite_ops));
    bn_layercheck_report r;
    CHECK_OK(run_kit("lc_test_overwrites", NULL, NULL, &r));
    /* One backward from zero gives the right gradient; only the second one shows the fault. */
    CHECK_OUTCOME("overwrites", r, BN_CHECK_GRADIENT, BN_CHECK_PASS);
    CHECK_OUTCOME("overwrites", r, BN_CHECK_ACCUMULATES, BN_CHECK_FAIL);
    CHECK_MSG(strstr(r.checks[BN_CHECK_ACCUMULATES].detail, "w gradient[0] at") != NULL, "%s",
              r.checks[BN_CHECK_ACCUMULATES].detail);
    CHECK(r.failed == 1);
    return BN_PASS;
}

/* The input shape and batch of a small LeNet layer, where the inputs used to be spaced so widely
 * that the rounding floor hid a flipped sign. */
static bn_status run_kit_lenet(const char *type, bn_ctx *ctx, bn_layercheck_report *r)
{
    bn_layercheck_opts o = bn_layercheck_defaults();
    o.type = type;
    o.input = (bn_shape){20, 12, 12};
    o.batch = 4;
    o.ctx = ctx;
    return bn_layercheck_run(&o, r);
}

BN_TEST(layercheck_catches_a_flipped_sign_at_a_realistic_shape)
{
    CHECK_OK(ensure(&flipped_ops));
    CHECK_OK(ensure(&good_ops));
    bn_layercheck_report r;
    CHECK_OK(run_kit_lenet("lc_test_double", NULL, &r));
    CHECK_OUTCOME("double", r, BN_CHECK_GRADIENT, BN_CHECK_PASS);
    CHECK_MSG(strstr(r.checks[BN_CHECK_GRADIENT].detail, "rounding floor") != NULL, "%s",
              r.checks[BN_CHECK_GRADIENT].detail);
    CHECK_OK(run_kit_lenet("lc_test_flipped", NULL, &r));
    CHECK_OUTCOME("flipped", r, BN_CHECK_GRADIENT, BN_CHECK_FAIL);
    CHECK_MSG(strstr(r.checks[BN_CHECK_GRADIENT].detail, "gradient check failed at input[") != NULL &&
              strstr(r.checks[BN_CHECK_GRADIENT].detail, "relative error 1 >") != NULL, "%s",
              r.checks[BN_CHECK_GRADIENT].detail);
    return BN_PASS;
}

BN_TEST(layercheck_catches_a_ten_percent_error_in_one_term)
{
    CHECK_OK(ensure(&scale_off_ops));
    bn_layercheck_report r;
    CHECK_OK(run_kit_lenet("lc_test_scale_off", NULL, &r));
    CHECK_OUTCOME("scale off", r, BN_CHECK_GRADIENT, BN_CHECK_FAIL);
    /* 1.1 g against g: 0.1 / 2.1. */
    CHECK_MSG(strstr(r.checks[BN_CHECK_GRADIENT].detail, "w[0]") != NULL &&
              strstr(r.checks[BN_CHECK_GRADIENT].detail, "relative error 0.0476") != NULL, "%s",
              r.checks[BN_CHECK_GRADIENT].detail);
    return BN_PASS;
}

BN_TEST(layercheck_catches_a_write_past_the_output)
{
    CHECK_OK(ensure(&past_end_ops));
    bn_layercheck_report r;
    CHECK_OK(run_kit("lc_test_past_end", NULL, NULL, &r));
    CHECK_OUTCOME("past end", r, BN_CHECK_WRITES, BN_CHECK_FAIL);
    CHECK_MSG(strstr(r.checks[BN_CHECK_WRITES].detail, "wrote past the end of lc_test_past_end1.out on the cpu: "
                                                        "element 1 after its last (of 72)") != NULL, "%s",
              r.checks[BN_CHECK_WRITES].detail);
    CHECK_OUTCOME("past end", r, BN_CHECK_DETERMINISM_CPU, BN_CHECK_FAIL);
    return BN_PASS;
}

BN_TEST(layercheck_gpu_catches_a_write_past_the_output)
{
    if (bn_device_count() == 0) BN_SKIP_TEST("no CUDA device");
    CHECK_OK(ensure(&past_end_gpu_ops));
    bn_ctx *ctx;
    CHECK_OK(bn_ctx_open(0, &ctx));
    bn_layercheck_report r;
    CHECK_OK(run_kit(past_end_gpu_ops.type, NULL, ctx, &r));
    CHECK_OUTCOME("past end gpu", r, BN_CHECK_WRITES, BN_CHECK_PASS);
    CHECK_OUTCOME("past end gpu", r, BN_CHECK_DEVICES, BN_CHECK_FAIL);
    CHECK_MSG(strstr(r.checks[BN_CHECK_DEVICES].detail, "wrote past the end of lc_test_past_end_gpu1.out on the "
                                                         "gpu") != NULL, "%s", r.checks[BN_CHECK_DEVICES].detail);
    return BN_PASS;
}

BN_TEST(layercheck_gpu_catches_an_overwritten_parameter_gradient)
{
    if (bn_device_count() == 0) BN_SKIP_TEST("no CUDA device");
    CHECK_OK(ensure(&overwrite_gpu_ops));
    bn_ctx *ctx;
    CHECK_OK(bn_ctx_open(0, &ctx));
    bn_layercheck_report r;
    CHECK_OK(run_kit(overwrite_gpu_ops.type, NULL, ctx, &r));
    CHECK_OUTCOME("overwrites gpu", r, BN_CHECK_ACCUMULATES, BN_CHECK_FAIL);
    CHECK_MSG(strstr(r.checks[BN_CHECK_ACCUMULATES].detail, "on the gpu a second backward left w gradient[0]") != NULL,
              "%s", r.checks[BN_CHECK_ACCUMULATES].detail);
    return BN_PASS;
}

BN_TEST(layercheck_catches_nondeterminism)
{
    CHECK_OK(ensure(&noisy_ops));
    bn_layercheck_report r;
    CHECK_OK(run_kit("lc_test_noisy", NULL, NULL, &r));
    CHECK_OUTCOME("noisy", r, BN_CHECK_DETERMINISM_CPU, BN_CHECK_FAIL);
    CHECK_MSG(strstr(r.checks[BN_CHECK_DETERMINISM_CPU].detail, "output[") != NULL, "%s",
              r.checks[BN_CHECK_DETERMINISM_CPU].detail);
    return BN_PASS;
}

BN_TEST(layercheck_catches_a_setup_that_changes)
{
    CHECK_OK(ensure(&growing_ops));
    bn_layercheck_report r;
    CHECK_OK(run_kit("lc_test_growing", NULL, NULL, &r));
    CHECK_OUTCOME("growing", r, BN_CHECK_SHAPES, BN_CHECK_FAIL);
    CHECK_MSG(strstr(r.checks[BN_CHECK_SHAPES].detail, "setup depends on the batch") != NULL, "%s",
              r.checks[BN_CHECK_SHAPES].detail);
    /* Nothing else runs on a network whose shapes are not the layer's. */
    CHECK(r.failed == 1 && r.skipped == BN_CHECK_COUNT - 1);
    CHECK(strstr(r.checks[BN_CHECK_GRADIENT].detail, "not run") != NULL);
    return BN_PASS;
}

/* A two-input layer y = 2 x1 + x2 whose backward sends each input the other's gradient. */
static bn_status pair_setup(bn_layer *l, bn_shape in, bn_shape *out)
{
    *out = in;
    return BN_OK;
}

static bn_status pair_forward(bn_layer *l, const bn_pass *p)
{
    BN_HOST_RD(a, l->inputs[0]);
    BN_HOST_RD(b, l->inputs[1]);
    BN_HOST_WR(y, l->out);
    for (size_t i = 0; i < bn_blob_count(l->out); i++) y[i] = 2 * a[i] + b[i];
    return BN_OK;
}

static bn_status pair_backward_swapped(bn_layer *l, const bn_pass *p)
{
    BN_HOST_RD(dy, l->out_grad);
    for (int j = 0; j < 2; j++) {
        if (!l->input_grads[j]) continue;
        BN_HOST_WR(dx, l->input_grads[j]);
        for (size_t i = 0; i < bn_blob_count(l->out); i++) dx[i] = (j == 0 ? 1.0f : 2.0f) * dy[i];
    }
    return BN_OK;
}

static const bn_layer_ops pair_swapped_ops = {
    .type = "lc_test_pair_swapped", .help = "test only", .min_inputs = 2, .max_inputs = 2, .setup = pair_setup,
    .forward_cpu = pair_forward, .backward_cpu = pair_backward_swapped,
};

BN_TEST(layercheck_takes_several_inputs_of_their_own_shapes)
{
    bn_layercheck_opts o = bn_layercheck_defaults();
    o.type = "concat";
    o.num_inputs = 3;
    o.input = (bn_shape){2, 3, 4};
    o.more_inputs[0] = (bn_shape){1, 3, 4};
    o.more_inputs[1] = (bn_shape){3, 3, 4};
    bn_layercheck_report r;
    CHECK_OK(bn_layercheck_run(&o, &r));
    CHECK_OUTCOME("concat", r, BN_CHECK_GRADIENT, BN_CHECK_PASS);
    CHECK_MSG(strstr(r.checks[BN_CHECK_SHAPES].detail, "2x3x4 + 1x3x4 + 3x3x4 -> 6x3x4"), "%s",
              r.checks[BN_CHECK_SHAPES].detail);
    CHECK(r.failed == 0);
    o.type = "relu";
    CHECK_ERR(bn_layercheck_run(&o, &r), BN_ERR_USAGE, "relu takes one input, not 3");
    return BN_PASS;
}

BN_TEST(layercheck_catches_gradients_sent_to_the_wrong_input)
{
    CHECK_OK(ensure(&pair_swapped_ops));
    bn_layercheck_report r;
    CHECK_OK(run_kit(pair_swapped_ops.type, NULL, NULL, &r));
    CHECK_OUTCOME(pair_swapped_ops.type, r, BN_CHECK_SHAPES, BN_CHECK_PASS);
    CHECK_OUTCOME(pair_swapped_ops.type, r, BN_CHECK_GRADIENT, BN_CHECK_FAIL);
    return BN_PASS;
}

BN_TEST(layercheck_usage_errors)
{
    bn_layercheck_report r;
    CHECK_ERR(run_kit("no_such_type", NULL, NULL, &r), BN_ERR_USAGE, "unknown layer type 'no_such_type'");
    /* The option is named, not a line of the model text the kit writes. */
    CHECK_ERR(run_kit("dense", NULL, NULL, &r), BN_ERR_USAGE,
              "check-layer: --options: [dense] missing required key 'outputs'");
    CHECK_ERR(run_kit("dense", "outputs=abc", NULL, &r), BN_ERR_USAGE, "check-layer: --options: [dense] outputs = 'abc'");
    CHECK_ERR(run_kit("dense", "outputs", NULL, &r), BN_ERR_USAGE, "not of the form key=value");
    CHECK_ERR(run_kit("dense", "outputs=2 colour=red", NULL, &r), BN_ERR_USAGE, "unknown key 'colour'");
    CHECK_ERR(run_kit("conv2d", "filters=2 size=5", NULL, &r), BN_ERR_USAGE, "larger than the padded input");
    bn_layercheck_opts o = bn_layercheck_defaults();
    o.type = "relu";
    o.batch = 0;
    CHECK_ERR(bn_layercheck_run(&o, &r), BN_ERR_USAGE, "batch 0 is not positive");
    return BN_PASS;
}

BN_TEST(layercheck_gpu_matches_cpu_for_builtins)
{
    if (bn_device_count() == 0) BN_SKIP_TEST("no CUDA device");
    bn_ctx *ctx;
    CHECK_OK(bn_ctx_open(0, &ctx));
    static const struct {
        const char *type, *options;
    } cases[] = {
        {"dense", "outputs=5"}, {"conv2d", "filters=3 size=3 pad=1"}, {"maxpool", "size=2"},
        {"avgpool", "size=3 pad=1"}, {"relu", NULL}, {"tanh", NULL}, {"leaky_relu", NULL}, {"softmax_ce", NULL},
        {"add", "coeff=1,-0.5"}, {"concat", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        bn_layercheck_report r;
        CHECK_OK(run_kit(cases[i].type, cases[i].options, ctx, &r));
        CHECK_OUTCOME(cases[i].type, r, BN_CHECK_DEVICES, BN_CHECK_PASS);
        CHECK_OUTCOME(cases[i].type, r, BN_CHECK_DETERMINISM_GPU, BN_CHECK_PASS);
        CHECK(r.failed == 0);
    }
    return BN_PASS;
}

/* Dropout's GPU draws the CPU's masks (a counter-based hash of seed, layer, step and element),
 * so the devices agree in training even without --stochastic; only the evaluation check, whose
 * training output is not the evaluation's, needs the flag. With it every check passes. */
BN_TEST(layercheck_gpu_dropout_agrees_in_training)
{
    if (bn_device_count() == 0) BN_SKIP_TEST("no CUDA device");
    bn_ctx *ctx;
    CHECK_OK(bn_ctx_open(0, &ctx));
    bn_layercheck_report r;
    CHECK_OK(run_kit("dropout", "rate=0.3", ctx, &r));
    CHECK_OUTCOME("dropout", r, BN_CHECK_DEVICES, BN_CHECK_PASS);
    CHECK_OUTCOME("dropout", r, BN_CHECK_DETERMINISM_GPU, BN_CHECK_PASS);
    CHECK_OUTCOME("dropout", r, BN_CHECK_EVALUATION, BN_CHECK_FAIL);
    CHECK(r.failed == 1);
    bn_layercheck_opts o = bn_layercheck_defaults();
    o.type = "dropout";
    o.options = "rate=0.3";
    o.ctx = ctx;
    o.stochastic = 1;
    CHECK_OK(bn_layercheck_run(&o, &r));
    CHECK_OUTCOME("dropout", r, BN_CHECK_DEVICES, BN_CHECK_PASS);
    CHECK(r.failed == 0);
    return BN_PASS;
}

BN_TEST(layercheck_gpu_catches_a_wrong_gpu_path)
{
    if (bn_device_count() == 0) BN_SKIP_TEST("no CUDA device");
    CHECK_OK(ensure(&wrong_gpu_ops));
    bn_ctx *ctx;
    CHECK_OK(bn_ctx_open(0, &ctx));
    bn_layercheck_report r;
    CHECK_OK(run_kit("lc_test_wrong_gpu", NULL, ctx, &r));
    CHECK_OUTCOME("wrong gpu", r, BN_CHECK_DEVICES, BN_CHECK_FAIL);
    /* 2.02 x against 2 x: one percent of the blob's largest value at its largest element. */
    CHECK_MSG(strstr(r.checks[BN_CHECK_DEVICES].detail, "difference 0.01 of the blob's scale") != NULL, "%s",
              r.checks[BN_CHECK_DEVICES].detail);
    /* The forward is wrong in evaluation too, and the evaluation check compares it. */
    CHECK_OUTCOME("wrong gpu", r, BN_CHECK_EVALUATION, BN_CHECK_FAIL);
    CHECK_MSG(strstr(r.checks[BN_CHECK_EVALUATION].detail, "evaluation output[") &&
              strstr(r.checks[BN_CHECK_EVALUATION].detail, "difference 0.01 of the blob's scale"), "%s",
              r.checks[BN_CHECK_EVALUATION].detail);
    CHECK(r.failed == 2);
    return BN_PASS;
}

/* ---- evaluation differing from training: where the evaluation check's hint points ---- */

/* Batch normalization without scale and shift, y = (x - mean) / sqrt(var + NORM_EPS) per
 * channel, with the batch's statistics in training and running ones in evaluation. Correct, but
 * it keeps the running mean and variance as parameters of lr_mult 0 instead of buffers. */
#define NORM_EPS 1e-5

static bn_status norm_setup(bn_layer *l, bn_shape in, bn_shape *out)
{
    static const char *const names[2] = {"running_mean", "running_var"};
    for (int i = 0; i < 2; i++) {
        if (bn_layer_add_param(l, names[i], 1, in.c, 1, 1, BN_INIT_CONSTANT, 1, 1) != i) return bn_last_status();
        l->params[i].init_value = (float)i;
        l->params[i].lr_mult = l->params[i].decay_mult = 0.0f;
    }
    *out = in;
    return BN_OK;
}

/* The mean of a[i] * b[i] (b NULL: of a[i]) over channel c of every example of shape. */
static double channel_mean(const bn_blob *shape, const float *a, const float *b, int c)
{
    size_t plane = (size_t)shape->h * shape->w;
    double sum = 0.0;
    for (int e = 0; e < shape->n; e++)
        for (size_t i = ((size_t)e * shape->c + c) * plane, end = i + plane; i < end; i++)
            sum += a[i] * (b ? b[i] : 1.0);
    return sum / ((double)shape->n * plane);
}

static void batch_stats(const bn_blob *in, const float *x, int c, double *mean, double *var)
{
    *mean = channel_mean(in, x, NULL, c);
    *var = channel_mean(in, x, x, c) - *mean * *mean;
}

static bn_status norm_forward(bn_layer *l, const bn_pass *p)
{
    BN_HOST_RD(x, l->in);
    BN_HOST_WR(running_mean, l->params[0].value);
    BN_HOST_WR(running_var, l->params[1].value);
    BN_HOST_WR(y, l->out);
    size_t plane = (size_t)l->in->h * l->in->w;
    double m = (double)l->in->n * plane;
    for (int c = 0; c < l->in->c; c++) {
        double mean = running_mean[c], var = running_var[c];
        if (p->train) {
            batch_stats(l->in, x, c, &mean, &var);
            running_mean[c] = (float)(0.9 * running_mean[c] + 0.1 * mean);
            running_var[c] = (float)(0.9 * running_var[c] + 0.1 * var * m / (m - 1.0));
        }
        double inv = 1.0 / sqrt(var + NORM_EPS);
        for (int e = 0; e < l->in->n; e++)
            for (size_t i = ((size_t)e * l->in->c + c) * plane, end = i + plane; i < end; i++)
                y[i] = (float)((x[i] - mean) * inv);
    }
    return BN_OK;
}

/* dx = (dy - mean(dy) - xhat mean(dy xhat)) / sqrt(var + eps), xhat the output; the running
 * statistics get no gradient. */
static bn_status norm_backward(bn_layer *l, const bn_pass *p)
{
    if (!l->in_grad) return BN_OK;
    BN_HOST_RD(x, l->in);
    BN_HOST_RD(dy, l->out_grad);
    BN_HOST_WR(dx, l->in_grad);
    size_t plane = (size_t)l->in->h * l->in->w;
    for (int c = 0; c < l->in->c; c++) {
        double mean, var;
        batch_stats(l->in, x, c, &mean, &var);
        double inv = 1.0 / sqrt(var + NORM_EPS), mdy = channel_mean(l->in, dy, NULL, c);
        double mdy_xhat = inv * (channel_mean(l->in, dy, x, c) - mean * mdy);
        for (int e = 0; e < l->in->n; e++)
            for (size_t i = ((size_t)e * l->in->c + c) * plane, end = i + plane; i < end; i++)
                dx[i] = (float)(inv * (dy[i] - mdy - (x[i] - mean) * inv * mdy_xhat));
    }
    return BN_OK;
}

/* Evaluation computes x instead of 2x: a plain bug, no state and no randomness. */
static bn_status eval_wrong_forward(bn_layer *l, const bn_pass *p)
{
    return times(l, p->train ? 2.0f : 1.0f, bn_blob_count(l->out));
}

TEST_OPS(norm_ops, "lc_test_norm_in_params", norm_setup, norm_forward, norm_backward);
TEST_OPS(eval_wrong_ops, "lc_test_eval_wrong", same_setup, eval_wrong_forward, double_backward);

/* The kit on type fails the evaluation check alone, with a message that holds want and not unwanted. */
static int check_eval_hint(const char *type, const char *options, const char *want, const char *unwanted)
{
    bn_layercheck_report r;
    CHECK_OK(run_kit(type, options, NULL, &r));
    const char *d = r.checks[BN_CHECK_EVALUATION].detail;
    CHECK_OUTCOME(type, r, BN_CHECK_EVALUATION, BN_CHECK_FAIL);
    CHECK_MSG(strstr(d, want) != NULL && strstr(d, unwanted) == NULL, "%s: %s", type, d);
    CHECK_MSG(r.failed == 1, "%s: %d checks failed", type, r.failed);
    return BN_PASS;
}

BN_TEST(layercheck_running_statistics_in_a_parameter_point_to_buffers)
{
    CHECK_OK(ensure(&norm_ops));
    CHECK_OK(ensure(&eval_wrong_ops));
    int r = check_eval_hint(norm_ops.type, NULL, "a training pass changed parameter running_mean[0]: running "
                            "statistics belong in buffers (bn_layer_add_buffer), not parameters", "--stochastic");
    if (r == BN_PASS)
        r = check_eval_hint(eval_wrong_ops.type, NULL, "it draws no random numbers (its training output is the same "
                            "at any step and seed): state evaluation reads, such as running statistics, belongs in "
                            "buffers (bn_layer_add_buffer)", "--stochastic");
    /* Dropout draws other masks at another step: there the flag is what it needs. */
    if (r == BN_PASS)
        r = check_eval_hint("dropout", "rate=0.3", "its training output changes with the step and seed: a layer that "
                            "draws random numbers is checked with --stochastic", "bn_layer_add_buffer");
    return r;
}

/* ---- the command line ---- */

static char out[1 << 15];

static int cli(const char *args)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s check-layer %s", bn_test_cli(), args);
    return bn_test_run(cmd, out, sizeof out);
}

BN_TEST(layercheck_cli_table_and_exit_codes)
{
    int rc = cli("leaky_relu --options slope=0.2 --input 4,3,3 --batch 2 --device cpu");
    CHECK_MSG(rc == 0, "exit %d:\n%s", rc, out);
    CHECK(strstr(out, "check-layer leaky_relu: input 4x3x3, batch 2, options \"slope=0.2\", device cpu\n") != NULL);
    CHECK(strstr(out, "check            result  detail\n") != NULL);
    CHECK(strstr(out, "shapes           pass    4x3x3 -> 4x3x3 at batch 1 and 2; no parameters\n") != NULL);
    CHECK(strstr(out, "gradient         pass    72 coordinates") != NULL);
    CHECK(strstr(out, "accumulates      skip    no parameters\n") != NULL);
    CHECK(strstr(out, "evaluation       pass    writes all 72 outputs, repeats bit for bit, leaves the buffers, examples "
                      "independent; no buffers: the same as training\n") != NULL);
    CHECK_MSG(strstr(out, "5 passed, 0 failed, 3 skipped\n") != NULL, "%s", out);

    rc = cli("no_such_type");
    CHECK(rc == 2 && strcmp(out, "blobnet: error: check-layer: unknown layer type 'no_such_type' (a plugin's "
                                 "types are known once it is loaded)\n") == 0);
    rc = cli("dense --options outputs=abc --device cpu");
    CHECK_MSG(rc == 2 && strstr(out, "blobnet: error: check-layer: --options: [dense] outputs = 'abc' is not an "
                                     "integer") == out, "%s", out);
    rc = cli("dense --input 3,4 --options outputs=2");
    CHECK(rc == 2 && strstr(out, "blobnet: error: --input: '3,4' is not C,H,W (three integers)") == out);
    rc = cli("dense --input 3,0,4 --options outputs=2");
    CHECK(rc == 2 && strstr(out, "--input: 0 is outside 1..65536") != NULL);
    rc = cli("relu --batch 0");
    CHECK(rc == 2 && strstr(out, "--batch: 0 is outside 1..4096") != NULL);
    rc = cli("relu --device tpu");
    CHECK(rc == 2 && strstr(out, "--device: 'tpu' is not one of") != NULL);
    rc = cli("");
    CHECK(rc == 2 && strstr(out, "check-layer: missing TYPE") != NULL);
    rc = cli("--help");
    CHECK(rc == 0 && strstr(out, "usage: blobnet check-layer TYPE [options]") == out);
    return BN_PASS;
}
