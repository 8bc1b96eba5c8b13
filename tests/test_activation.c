/* test_activation.c - relu, sigmoid, tanh, leaky_relu and elu: hand values, the derivative
 * conventions at 0, saturation without NaNs, option errors and gradient checks. */
#include "layer_testing.h"
#include "layers.h"
#include "testing.h"

/* Central differences through a float32 forward agree to a few 1e-3 at worst (gradcheck.h
 * explains the choice of eps); a wrong gradient is off by far more. */
#define GRAD_TOL 1e-2

/* Inputs of the piecewise types stay this far from 0, ten times eps, so no perturbation
 * crosses the kink. */
#define KINK_GAP 0.1

static const float xs[] = {-2, -0.5f, 0, 0.5f, 2};

/* Runs one [section] over xs; y gets the outputs, dx the input gradient for dy = 1. */
static bn_status run_one(const char *section, float *y, float *dx)
{
    char text[256];
    snprintf(text, sizeof text, "[input]\nchannels=1\nheight=1\nwidth=5\n%s", section);
    bn_net *net;
    BN_TRY(lt_net(text, 1, 1, &net));
    static const float ones[] = {1, 1, 1, 1, 1};
    bn_status s = lt_write(net->input, xs, 5);
    if (s == BN_OK) s = bn_net_forward(net, 1);
    if (s == BN_OK) s = lt_read(bn_net_output(net), y, 5);
    if (s == BN_OK) s = lt_write(net->layers[0]->out_grad, ones, 5);
    if (s == BN_OK) s = bn_net_backward(net);
    if (s == BN_OK) s = lt_read(net->input_grad, dx, 5);
    bn_net_free(net);
    return s;
}

struct expected {
    const char *section;
    float y[5], dy[5]; /* outputs and derivatives at xs */
};

/* Values from the formulas by hand (sigmoid(2) = 1 / (1 + e^-2), ...), to 7 digits. At 0:
 * relu' = 0, leaky' = slope, elu' = alpha (the x <= 0 branch). */
static const struct expected table[] = {
    {"[relu]\n", {0, 0, 0, 0.5f, 2}, {0, 0, 0, 1, 1}},
    {"[leaky_relu]\nslope=0.1\n", {-0.2f, -0.05f, 0, 0.5f, 2}, {0.1f, 0.1f, 0.1f, 1, 1}},
    {"[leaky_relu]\n", {-0.02f, -0.005f, 0, 0.5f, 2}, {0.01f, 0.01f, 0.01f, 1, 1}},
    {"[sigmoid]\n", {0.1192029f, 0.3775407f, 0.5f, 0.6224593f, 0.8807971f},
     {0.1049936f, 0.2350037f, 0.25f, 0.2350037f, 0.1049936f}},
    {"[tanh]\n", {-0.9640276f, -0.4621172f, 0, 0.4621172f, 0.9640276f},
     {0.0706508f, 0.7864477f, 1, 0.7864477f, 0.0706508f}},
    {"[elu]\n", {-0.8646647f, -0.3934693f, 0, 0.5f, 2}, {0.1353353f, 0.6065307f, 1, 1, 1}},
    {"[elu]\nalpha=2\n", {-1.7293294f, -0.7869387f, 0, 0.5f, 2}, {0.2706706f, 1.2130613f, 2, 1, 1}},
};

BN_TEST(activation_values_and_derivatives)
{
    for (size_t t = 0; t < sizeof table / sizeof table[0]; t++) {
        float y[5], dx[5];
        CHECK_OK(run_one(table[t].section, y, dx));
        for (int i = 0; i < 5; i++) {
            CHECK_MSG(fabs(y[i] - table[t].y[i]) <= 1e-6, "%s f(%g) = %.8g, expected %.8g",
                      table[t].section, xs[i], y[i], table[t].y[i]);
            CHECK_MSG(fabs(dx[i] - table[t].dy[i]) <= 1e-6, "%s f'(%g) = %.8g, expected %.8g",
                      table[t].section, xs[i], dx[i], table[t].dy[i]);
        }
    }
    return BN_PASS;
}

/* Large inputs saturate to exact limits instead of overflowing into NaN. */
BN_TEST(activation_saturates_without_nan)
{
    static const char *const sections[] = {"[sigmoid]\n", "[tanh]\n", "[elu]\n"};
    static const float big[] = {-1000, -100, 0, 100, 1000};
    for (int t = 0; t < 3; t++) {
        char text[128];
        snprintf(text, sizeof text, "[input]\nchannels=5\nheight=1\nwidth=1\n%s", sections[t]);
        bn_net *net;
        CHECK_OK(lt_net(text, 1, 1, &net));
        CHECK_OK(lt_write(net->input, big, 5));
        CHECK_OK(bn_net_forward(net, 1));
        float y[5];
        CHECK_OK(lt_read(bn_net_output(net), y, 5));
        for (int i = 0; i < 5; i++) CHECK_MSG(isfinite(y[i]), "%s f(%g) = %g", sections[t], big[i], y[i]);
        bn_net_free(net);
        if (t == 0) CHECK(y[0] == 0.0f && y[4] == 1.0f);
        if (t == 1) CHECK(y[0] == -1.0f && y[4] == 1.0f);
        if (t == 2) CHECK(y[0] == -1.0f && y[4] == 1000.0f);
    }
    return BN_PASS;
}

BN_TEST(activation_rejects_bad_options)
{
    const char *in = "[input]\nchannels=1\nheight=2\nwidth=2\n";
    char text[256];
    snprintf(text, sizeof text, "%s[leaky_relu]\nslope=1\n", in);
    CHECK_ERR(lt_setup_status(text), BN_ERR_USAGE, "slope = 1 must be below 1");
    snprintf(text, sizeof text, "%s[leaky_relu]\nslope=-0.1\n", in);
    CHECK_ERR(lt_setup_status(text), BN_ERR_USAGE, "out of range");
    snprintf(text, sizeof text, "%s[elu]\nalpha=0\n", in);
    CHECK_ERR(lt_setup_status(text), BN_ERR_USAGE, "alpha = 0 must be positive");
    snprintf(text, sizeof text, "%s[elu]\nalpha=big\n", in);
    CHECK_ERR(lt_setup_status(text), BN_ERR_USAGE, "not a finite number");
    snprintf(text, sizeof text, "%s[relu]\nslope=0.1\n", in);
    CHECK_ERR(lt_setup_status(text), BN_ERR_USAGE, "unknown key 'slope'");
    return BN_PASS;
}

BN_TEST(activation_shape_kind_and_help)
{
    static const char *const types[] = {"relu", "sigmoid", "tanh", "leaky_relu", "elu"};
    for (int t = 0; t < 5; t++) {
        char text[128];
        snprintf(text, sizeof text, "[input]\nchannels=2\nheight=3\nwidth=5\n[%s]\n", types[t]);
        bn_net *net;
        CHECK_OK(lt_net(text, 2, 1, &net));
        bn_layer *l = net->layers[0];
        CHECK(l->out->n == 2 && l->out->c == 2 && l->out->h == 3 && l->out->w == 5);
        CHECK(l->num_params == 0 && l->ops->kind == BN_NVTX_LAYER_ACTIVATION);
        CHECK(l->ops->help && l->ops->help[0] && l->ops->flops(l) >= 30);
        bn_net_free(net);
    }
    return BN_PASS;
}

BN_TEST(activation_gradcheck)
{
    static const struct {
        const char *section, *what;
        double gap;
    } cases[] = {
        {"[relu]\n", "relu 2x5x3 batch 3", KINK_GAP},
        {"[leaky_relu]\nslope=0.2\n", "leaky_relu 2x5x3 batch 3", KINK_GAP},
        {"[elu]\nalpha=0.7\n", "elu 2x5x3 batch 3", KINK_GAP},
        {"[sigmoid]\n", "sigmoid 2x5x3 batch 3", 0},
        {"[tanh]\n", "tanh 2x5x3 batch 3", 0},
    };
    for (int t = 0; t < 5; t++) {
        char text[128];
        snprintf(text, sizeof text, "[input]\nchannels=2\nheight=5\nwidth=3\n%s", cases[t].section);
        CHECK(lt_gradcheck_text(text, cases[t].what, 3, cases[t].gap, 0, 0, GRAD_TOL) == BN_PASS);
    }
    CHECK(lt_gradcheck_text("[input]\nchannels=1\nheight=3\nwidth=3\n[dense]\noutputs=6\n[tanh]\n[dense]\noutputs=6\n"
                            "[sigmoid]\n[dense]\noutputs=4\n[softmax_ce]\n",
                            "dense-tanh-dense-sigmoid-dense + softmax_ce batch 4", 4, 0, 0, 4, GRAD_TOL) == BN_PASS);
    return BN_PASS;
}
