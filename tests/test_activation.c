/* test_activation.c - relu, sigmoid, tanh, leaky_relu and elu: hand values, the derivative
 * conventions at 0, saturation without NaNs, option errors and gradient checks; on the GPU
 * against the CPU, and a ReLU whose passes run in a neighbour's kernels (dense, conv2d,
 * batchnorm) against the CPU. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "conv2d/conv2d.h"
#include "core/net.h"
#include "gpu_testing.h"
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

/* An accuracy sweep of one activation's CPU pass (blobnet's own arithmetic, not libm's): 119,992
 * values spread evenly over [lo, hi] against want (in double), within tol units in the last place
 * of the exact value, and eight special values after them. */
typedef struct sweep_case {
    const char *section, *name;
    float lo, hi;
    double (*want)(double);
    double tol;
    float special[8];
} sweep_case;

/* Runs the sweep (a layer on 120,000 values, x's shape 1x300x400) and checks its spread values;
 * the special values' outputs into out. */
static int sweep(const sweep_case *c, float out[8])
{
    enum { N = 119992 };
    float *x = malloc((N + 8) * sizeof *x), *y = malloc((N + 8) * sizeof *y);
    CHECK(x && y);
    for (int i = 0; i < N; i++) x[i] = c->lo + (c->hi - c->lo) * (float)i / (N - 1);
    memcpy(x + N, c->special, sizeof c->special);
    char text[128];
    snprintf(text, sizeof text, "[input]\nchannels=1\nheight=300\nwidth=400\n%s", c->section);
    bn_net *net;
    CHECK_OK(lt_net(text, 1, 1, &net));
    CHECK_OK(lt_write(net->input, x, N + 8));
    CHECK_OK(bn_net_forward(net, 1));
    CHECK_OK(lt_read(bn_net_output(net), y, N + 8));
    bn_net_free(net);
    double worst = 0.0;
    int at = 0;
    for (int i = 0; i < N; i++) {
        const double w = c->want((double)x[i]);
        const float wf = (float)w;
        const double ulp = (double)nextafterf(fabsf(wf), INFINITY) - fabs((double)wf);
        const double err = fabs((double)y[i] - w) / ulp;
        if (err > worst) worst = err, at = i;
    }
    CHECK_MSG(worst <= c->tol, "%s(%.9g) = %.9g: %.2f units in the last place from %.9g", c->name, x[at], y[at],
              worst, c->want((double)x[at]));
    memcpy(out, y + N, 8 * sizeof *out);
    free(x);
    free(y);
    return BN_PASS;
}

/* tanh over [-12, 12] within 2.5 units (glibc's tanhf reaches 2.19 by the same measure), NaN
 * kept, zero's sign kept, and the limits exact. */
BN_TEST(activation_tanh_within_its_units_in_the_last_place)
{
    static const sweep_case c = {"[tanh]\n", "tanh", -12.0f, 12.0f, tanh, 2.5,
                                 {NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 1e-30f, 1e-40f, 9.0f}};
    float y[8];
    if (sweep(&c, y) != BN_PASS) return BN_FAIL;
    CHECK(isnan(y[0]) && y[1] == 1.0f && y[2] == -1.0f);
    CHECK(y[3] == 0.0f && !signbit(y[3]) && y[4] == 0.0f && signbit(y[4]));
    CHECK(y[5] == 1e-30f && y[6] == 1e-40f && y[7] == 1.0f);
    return BN_PASS;
}

static double elu_exact(double x)
{
    return x > 0.0 ? x : expm1(x);
}

/* ELU's e^x - 1 (alpha 1) over [-30, 0.5] within 2 units, the positive side x itself, NaN kept,
 * -0 kept, and -1 at minus infinity. */
BN_TEST(activation_elu_within_its_units_in_the_last_place)
{
    static const sweep_case c = {"[elu]\n", "elu", -30.0f, 0.5f, elu_exact, 2.0,
                                 {NAN, -INFINITY, -0.0f, 0.0f, -1e-40f, -1e-30f, -100.0f, 3.0f}};
    float y[8];
    if (sweep(&c, y) != BN_PASS) return BN_FAIL;
    CHECK(isnan(y[0]) && y[1] == -1.0f && y[2] == 0.0f && signbit(y[2]));
    CHECK(y[3] == 0.0f && !signbit(y[3]) && y[4] == -1e-40f && y[5] == -1e-30f);
    CHECK(y[6] == -1.0f && y[7] == 3.0f);
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

/* ---- the GPU against the CPU ---- */

BN_TEST(gpu_layer_activations_match_cpu)
{
    static const layer_case cases[] = {
        {"relu", "[input]\nchannels=3\nheight=5\nwidth=7\n[relu]\n", TOL_ELEMENTWISE, 0, 1, 0, 0, 0, 0},
        {"sigmoid", "[input]\nchannels=3\nheight=5\nwidth=7\n[sigmoid]\n", TOL_ELEMENTWISE, 0, 1, 0, 0, 0, 0},
        {"tanh", "[input]\nchannels=3\nheight=5\nwidth=7\n[tanh]\n", TOL_ELEMENTWISE, 0, 1, 0, 0, 0, 0},
        {"leaky_relu", "[input]\nchannels=3\nheight=5\nwidth=7\n[leaky_relu]\nslope=0.1\n", TOL_ELEMENTWISE, 0, 1, 0, 0, 0,
         0},
        {"elu", "[input]\nchannels=3\nheight=5\nwidth=7\n[elu]\nalpha=0.7\n", TOL_ELEMENTWISE, 0, 1, 0, 0, 0, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int r = gt_run_case(&cases[i]);
        if (r != BN_PASS) return r;
    }
    return BN_PASS;
}

/* ---- a ReLU fused into its neighbours on the GPU (core/fusion.c), against the CPU ---- */

/* Between two dense layers a ReLU's GPU passes run in the dense kernels' epilogues
 * (bn_layer_ops.fuse_gpu): every blob still matches the CPU, with the rule's kernels (the
 * few-outputs ones for 13 and 6 outputs, split-K for 17) and with the autotuned ones (cuBLASLt's
 * among them, followed by the ReLU layer's own pass). */
BN_TEST(gpu_layer_relu_fused_between_dense_layers_matches_cpu)
{
    static const layer_case lc = {"dense 13, relu, dense 17, relu, dense 6 (relus fused)",
                                  "[input]\nchannels=3\nheight=5\nwidth=7\n[dense]\noutputs=13\n[relu]\n"
                                  "[dense]\noutputs=17\ninit=he\n[relu]\n[dense]\noutputs=6\n",
                                  TOL_GEMM, 0, 0, 0, 1, 0, 0};
    if (bn_device_count() == 0) BN_SKIP_TEST("no CUDA device");
    bn_ctx *ctx;
    CHECK_OK(bn_ctx_open(0, &ctx));
    bn_net *net;
    CHECK_OK(bn_net_from_text(lc.text, lc.what, &net));
    bn_status s = bn_net_setup(net, 8, ctx, 1, 1);
    const int both = BN_FUSED_FORWARD | BN_FUSED_BACKWARD;
    const int f1 = s == BN_OK ? net->layers[1]->gpu_fused : -1, f3 = s == BN_OK ? net->layers[3]->gpu_fused : -1;
    const int others = s == BN_OK ? net->layers[0]->gpu_fused | net->layers[2]->gpu_fused | net->layers[4]->gpu_fused : -1;
    bn_net_free(net);
    CHECK_OK(s);
    CHECK_MSG(f1 == both && f3 == both && others == 0, "fused passes: relus %d and %d, dense layers %d (want %d, %d, 0)",
              f1, f3, others, both, both);
    return gt_run_case(&lc);
}

/* ReLU layers fused into convolutions run by cuDNN and into batchnorm layers (fuse_gpu): a's
 * forward writes ra's output from cuDNN's bias kernel; bn does both of rb's passes (and stores
 * rb's output, not its own), bn2 writes rc's input gradient (rc's forward stays its own, after a
 * tanh). Convolution b takes ra's backward pass, and as cuDNN's data pass cannot write it, runs
 * the ReLU's own pass after its data pass (the epilogues of blobnet's kernels that write it:
 * test_conv_relu.c). Every blob still
 * matches the CPU, on cuDNN's legacy algorithms; then a convolution and ReLU pair under --tf32 on
 * cuDNN's graph engines, forced, at the shapes of
 * gpu_layer_conv2d_cudnn_graph_tf32_stays_near_cpu, on the coarse grid of grid_params: with
 * random data, TF32 products move an output lying within ~1e-3 of zero to the other side of it,
 * the ReLU's mask then differs from the CPU's and passes or stops a whole gradient (one such
 * element in 400,000 failed this test by 0.43 of the gradient's scale); on the grid both sides
 * compute every output exactly. The tanh layers keep the biases before a batchnorm out of
 * rounding noise (see batchnorm_case), and a convolution between the two batchnorms keeps bn's
 * gradients from the cancellation of two normalizations in a row. */
BN_TEST(gpu_layer_relu_fused_into_conv2d_and_batchnorm_matches_cpu)
{
    if (bn_device_count() == 0) BN_SKIP_TEST("no CUDA device");
    static const layer_case cases[2] = {
        {"conv a, relu, conv b, tanh, batchnorm, relu, conv c, tanh, relu, batchnorm (relus fused)",
         "[input]\nchannels=4\nheight=6\nwidth=6\n"
         "[conv2d]\nname=a\nfilters=8\nsize=3\npad=1\nengine=cudnn\n[relu]\nname=ra\n"
         "[conv2d]\nname=b\nfilters=8\nsize=3\npad=1\nengine=cudnn\n[tanh]\n[batchnorm]\nname=bn\n"
         "[relu]\nname=rb\n[conv2d]\nname=c\nfilters=8\nsize=1\nengine=cudnn\n[tanh]\n[relu]\nname=rc\n"
         "[batchnorm]\nname=bn2\n",
         TOL_GEMM, 0, 0, 0, 0, 0, 0},
        {"conv 16x14x14 k3p1 x32, relu, k1 x8, relu under tf32, graph engines forced (relus fused)",
         "[input]\nchannels=16\nheight=14\nwidth=14\n"
         "[conv2d]\nname=a\nfilters=32\nsize=3\npad=1\ninit=he\nengine=cudnn\n[relu]\nname=ra\n"
         "[conv2d]\nname=b\nfilters=8\nsize=1\nengine=cudnn\n[relu]\nname=rb\n",
         TOL_TF32, 0, 0, 0, 0, 0, 1},
    };
    bn_ctx *ctx;
    CHECK_OK(bn_ctx_open(0, &ctx));
    bn_net *net;
    CHECK_OK(bn_net_from_text(cases[0].text, cases[0].what, &net));
    bn_status s = bn_net_setup(net, 8, ctx, 1, 1);
    static const char *const relus[3] = {"ra", "rb", "rc"};
    static const int want[3] = {BN_FUSED_FORWARD | BN_FUSED_BACKWARD,
                                BN_FUSED_FORWARD | BN_FUSED_BACKWARD | BN_FUSED_NO_IN | BN_FUSED_NO_IN_GRAD,
                                BN_FUSED_BACKWARD};
    int fused[3] = {-1, -1, -1};
    for (int i = 0; i < 3 && s == BN_OK; i++) fused[i] = bn_net_find_layer(net, relus[i])->gpu_fused;
    bn_net_free(net);
    CHECK_OK(s);
    for (int i = 0; i < 3; i++)
        CHECK_MSG(fused[i] == want[i], "%s's fused passes: %d (want %d)", relus[i], fused[i], want[i]);
    const uint64_t seed = lt_fresh_seed();
    const int was_autotune = ctx->autotune;
    int r = BN_PASS;
    for (int way = 0; way < 2 && r == BN_PASS; way++) {
        ctx->tf32 = way;
        ctx->autotune = way;
        bn_conv2d_gpu_force_graph(way);
        r = gt_compare_sizes(&cases[way], ctx, seed);
    }
    bn_conv2d_gpu_force_graph(0);
    ctx->tf32 = 0;
    ctx->autotune = was_autotune;
    return r;
}
