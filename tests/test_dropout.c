/* test_dropout.c - inverted dropout: scaling and keep rate in training, identity in
 * evaluation, a mask fixed by (seed, step), option errors and gradient checks. */
#include <stdlib.h>

#include "layer_testing.h"
#include "layers.h"
#include "testing.h"

/* Central differences through a float32 forward agree to a few 1e-3 at worst (gradcheck.h
 * explains the choice of eps); a wrong gradient is off by far more. */
#define GRAD_TOL 1e-2

#define COUNT 10000

static bn_status load(const char *rate, bn_net **net)
{
    char text[128];
    snprintf(text, sizeof text, "[input]\nchannels=1\nheight=100\nwidth=100\n[dropout]\n%s", rate);
    BN_TRY(lt_net(text, 1, 1234, net));
    return lt_fill_normal(*net, 99, 1.0, 0.01); /* no zeros: a zero output means dropped */
}

/* Forward at the given step; y gets the output. */
static bn_status forward_at(bn_net *net, unsigned long long step, int train, float *y)
{
    net->pass.step = step;
    BN_TRY(bn_net_forward(net, train));
    return lt_read(bn_net_output(net), y, COUNT);
}

BN_TEST(dropout_eval_is_identity)
{
    bn_net *net;
    CHECK_OK(load("rate=0.5\n", &net));
    float *x = malloc(COUNT * sizeof *x), *y = malloc(COUNT * sizeof *y);
    CHECK(x && y);
    CHECK_OK(lt_read(net->input, x, COUNT));
    CHECK_OK(forward_at(net, 3, 0, y));
    CHECK(memcmp(x, y, COUNT * sizeof *x) == 0);
    CHECK_OK(lt_write(net->layers[0]->out_grad, x, COUNT));
    CHECK_OK(bn_net_backward(net));
    CHECK_OK(lt_read(net->input_grad, y, COUNT));
    CHECK(memcmp(x, y, COUNT * sizeof *x) == 0);
    free(x), free(y);
    bn_net_free(net);
    return BN_PASS;
}

/* rate 0.25: each output is 0 or x / 0.75; about 75% are kept (the binomial spread over
 * 10000 draws is 0.0043, so 0.025 is six deviations); the gradient uses the same mask. */
BN_TEST(dropout_train_scales_kept_and_masks_gradient)
{
    bn_net *net;
    CHECK_OK(load("rate=0.25\n", &net));
    float *x = malloc(COUNT * sizeof *x), *y = malloc(COUNT * sizeof *y), *dx = malloc(COUNT * sizeof *dx);
    CHECK(x && y && dx);
    CHECK_OK(lt_read(net->input, x, COUNT));
    CHECK_OK(forward_at(net, 7, 1, y));
    const float scale = 1.0f / 0.75f;
    int kept = 0;
    for (int i = 0; i < COUNT; i++) {
        CHECK_MSG(y[i] == 0.0f || y[i] == x[i] * scale, "y[%d] = %g for x = %g", i, y[i], x[i]);
        kept += y[i] != 0.0f;
    }
    CHECK_NEAR(kept / (double)COUNT, 0.75, 0.025);
    for (int i = 0; i < COUNT; i++) dx[i] = 2.0f;
    CHECK_OK(lt_write(net->layers[0]->out_grad, dx, COUNT));
    CHECK_OK(bn_net_backward(net));
    CHECK_OK(lt_read(net->input_grad, dx, COUNT));
    for (int i = 0; i < COUNT; i++)
        CHECK_MSG(dx[i] == (y[i] != 0.0f ? 2.0f * scale : 0.0f), "dx[%d] = %g", i, dx[i]);
    free(x), free(y), free(dx);
    bn_net_free(net);
    return BN_PASS;
}

static int count_differences(const float *a, const float *b)
{
    int d = 0;
    for (int i = 0; i < COUNT; i++) d += a[i] != b[i];
    return d;
}

/* The same (seed, step) draws the same mask; another step or seed draws another. */
BN_TEST(dropout_mask_follows_seed_and_step)
{
    bn_net *net;
    CHECK_OK(load("\n", &net));
    float *a = malloc(COUNT * sizeof *a), *b = malloc(COUNT * sizeof *b);
    CHECK(a && b);
    CHECK_OK(forward_at(net, 11, 1, a));
    CHECK_OK(forward_at(net, 12, 1, b));
    CHECK(count_differences(a, b) > COUNT / 4); /* half of the cells differ on average */
    CHECK_OK(forward_at(net, 11, 1, b));
    CHECK(count_differences(a, b) == 0);
    net->pass.seed++;
    CHECK_OK(forward_at(net, 11, 1, b));
    CHECK(count_differences(a, b) > COUNT / 4);
    free(a), free(b);
    bn_net_free(net);
    return BN_PASS;
}

BN_TEST(dropout_rate_zero_keeps_everything)
{
    bn_net *net;
    CHECK_OK(load("rate=0\n", &net));
    float *x = malloc(COUNT * sizeof *x), *y = malloc(COUNT * sizeof *y);
    CHECK(x && y);
    CHECK_OK(lt_read(net->input, x, COUNT));
    CHECK_OK(forward_at(net, 1, 1, y));
    CHECK(memcmp(x, y, COUNT * sizeof *x) == 0);
    free(x), free(y);
    bn_net_free(net);
    return BN_PASS;
}

BN_TEST(dropout_rejects_bad_options)
{
    const char *in = "[input]\nchannels=1\nheight=2\nwidth=2\n";
    char text[256];
    snprintf(text, sizeof text, "%s[dropout]\nrate=1\n", in);
    CHECK_ERR(lt_setup_status(text), BN_ERR_USAGE, "rate = 1 must be below 1");
    snprintf(text, sizeof text, "%s[dropout]\nrate=-0.1\n", in);
    CHECK_ERR(lt_setup_status(text), BN_ERR_USAGE, "out of range");
    snprintf(text, sizeof text, "%s[dropout]\nrate=half\n", in);
    CHECK_ERR(lt_setup_status(text), BN_ERR_USAGE, "not a finite number");
    bn_net *net;
    CHECK_OK(lt_net("[input]\nchannels=2\nheight=3\nwidth=3\n[dropout]\n", 1, 1, &net));
    bn_layer *l = net->layers[0];
    CHECK(l->out->c == 2 && l->out->h == 3 && l->out->w == 3 && l->num_params == 0);
    CHECK(strstr(l->ops->help, "rate") && l->ops->flops(l) == 18);
    bn_net_free(net);
    return BN_PASS;
}

/* The check's forward passes all run at one step, so they all see one mask. */
BN_TEST(dropout_gradcheck)
{
    CHECK(lt_gradcheck_text("[input]\nchannels=2\nheight=3\nwidth=5\n[dropout]\nrate=0.3\n",
                            "dropout 2x3x5 rate 0.3 batch 3", 3, 0, 0, 0, GRAD_TOL) == BN_PASS);
    CHECK(lt_gradcheck_text("[input]\nchannels=1\nheight=3\nwidth=3\n[dense]\noutputs=8\n[dropout]\n"
                            "[dense]\noutputs=3\n[softmax_ce]\n",
                            "dense-dropout-dense + softmax_ce batch 4", 4, 0, 0, 3, GRAD_TOL) == BN_PASS);
    return BN_PASS;
}
