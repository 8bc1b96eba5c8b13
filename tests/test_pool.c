/* test_pool.c - maxpool and avgpool: hand-computed cases with padding (padding never wins a
 * max, nor counts in a mean), ties, shape inference and its errors, and gradient checks. */
#include "layer_testing.h"
#include "layers.h"
#include "testing.h"

/* Central differences through a float32 forward agree to a few 1e-3 at worst (gradcheck.h
 * explains the choice of eps); a wrong gradient is off by far more. */
#define GRAD_TOL 1e-2

/* Input spacing for maxpool checks: four times eps, so no perturbation changes a winner. */
#define MAX_SPACING 0.04

BN_TEST(pool_output_shapes)
{
    int c, h, w;
    CHECK_OK(lt_out_shape("[input]\nchannels=3\nheight=5\nwidth=5\n[maxpool]\nsize=2\nstride=2\n", &c, &h, &w));
    CHECK(c == 3 && h == 2 && w == 2); /* floor: the last row and column are dropped */
    CHECK_OK(lt_out_shape("[input]\nchannels=1\nheight=6\nwidth=9\n[avgpool]\nsize=3\n", &c, &h, &w));
    CHECK(c == 1 && h == 2 && w == 3); /* stride defaults to size */
    CHECK_OK(lt_out_shape("[input]\nchannels=2\nheight=5\nwidth=5\n[maxpool]\nsize=3\nstride=2\npad=1\n", &c, &h, &w));
    CHECK(c == 2 && h == 3 && w == 3);
    CHECK_OK(lt_out_shape("[input]\nchannels=1\nheight=4\nwidth=7\n[avgpool]\nsize=2\nstride=1\n", &c, &h, &w));
    CHECK(c == 1 && h == 3 && w == 6);
    return BN_PASS;
}

BN_TEST(pool_rejects_bad_shapes_and_options)
{
    const char *in3 = "[input]\nchannels=1\nheight=3\nwidth=3\n";
    char text[256];
    snprintf(text, sizeof text, "%s[maxpool]\nsize=2\npad=2\n", in3);
    CHECK_ERR(lt_setup_status(text), BN_ERR_USAGE, "pad = 2 must be smaller than size = 2");
    snprintf(text, sizeof text, "%s[avgpool]\nsize=3\npad=4\n", in3);
    CHECK_ERR(lt_setup_status(text), BN_ERR_USAGE, "must be smaller than size");
    snprintf(text, sizeof text, "%s[maxpool]\nsize=4\n", in3);
    CHECK_ERR(lt_setup_status(text), BN_ERR_USAGE, "window 4x4 is larger than the padded input 3x3");
    snprintf(text, sizeof text, "%s[avgpool]\nstride=2\n", in3);
    CHECK_ERR(lt_setup_status(text), BN_ERR_USAGE, "missing required key 'size'");
    snprintf(text, sizeof text, "%s[maxpool]\nsize=2\nstride=-1\n", in3);
    CHECK_ERR(lt_setup_status(text), BN_ERR_USAGE, "out of range");
    snprintf(text, sizeof text, "%s[avgpool]\nsize=2\nfilters=2\n", in3);
    CHECK_ERR(lt_setup_status(text), BN_ERR_USAGE, "unknown key 'filters'");
    return BN_PASS;
}

/* 3x3 input, all negative, size 2 stride 2 pad 1 gives four windows: {X00}, {X01, X02},
 * {X10, X20} and the lower-right 2x2. A padding zero would beat every max and drag every
 * mean towards zero. */
static const float neg3x3[] = {-5, -2, -3, -4, -1, -6, -7, -8, -9};
static const char *const pool3x3 = "[input]\nchannels=1\nheight=3\nwidth=3\n[%s]\nsize=2\nstride=2\npad=1\n";

static bn_status load_neg3x3(const char *type, bn_net **net)
{
    char text[256];
    snprintf(text, sizeof text, pool3x3, type);
    BN_TRY(lt_net(text, 1, 1, net));
    return lt_write((*net)->input, neg3x3, 9);
}

BN_TEST(maxpool_padding_never_wins_and_routes_gradient)
{
    bn_net *net;
    CHECK_OK(load_neg3x3("maxpool", &net));
    CHECK_OK(bn_net_forward(net, 1));
    float y[4], dx[9];
    CHECK_OK(lt_read(bn_net_output(net), y, 4));
    static const float expect[] = {-5, -2, -4, -1};
    for (int i = 0; i < 4; i++) CHECK_MSG(y[i] == expect[i], "y[%d] = %g, expected %g", i, y[i], expect[i]);
    static const float dy[] = {1, 2, 3, 4};
    CHECK_OK(lt_write(net->layers[0]->out_grad, dy, 4));
    CHECK_OK(bn_net_backward(net));
    CHECK_OK(lt_read(net->input_grad, dx, 9));
    static const float expect_dx[] = {1, 2, 0, 3, 4, 0, 0, 0, 0};
    for (int i = 0; i < 9; i++) CHECK_MSG(dx[i] == expect_dx[i], "dx[%d] = %g", i, dx[i]);
    bn_net_free(net);
    return BN_PASS;
}

BN_TEST(maxpool_ties_go_to_the_first_cell)
{
    bn_net *net;
    CHECK_OK(lt_net("[input]\nchannels=1\nheight=2\nwidth=3\n[maxpool]\nsize=2\nstride=1\n", 1, 1, &net));
    static const float x[] = {1, 3, 3, 3, 3, 0}, dy[] = {1, 10};
    CHECK_OK(lt_write(net->input, x, 6));
    CHECK_OK(bn_net_forward(net, 1));
    CHECK_OK(lt_write(net->layers[0]->out_grad, dy, 2));
    CHECK_OK(bn_net_backward(net));
    float dx[6];
    CHECK_OK(lt_read(net->input_grad, dx, 6));
    /* window 0 holds 3s at cells 1, 3, 4 -> cell 1; window 1 at cells 1, 2, 4 -> cell 1 */
    static const float expect_dx[] = {0, 11, 0, 0, 0, 0};
    for (int i = 0; i < 6; i++) CHECK_MSG(dx[i] == expect_dx[i], "dx[%d] = %g", i, dx[i]);
    bn_net_free(net);
    return BN_PASS;
}

/* Means over the cells inside the input only: -5, (-2 - 3) / 2, (-4 - 7) / 2 and
 * (-1 - 6 - 8 - 9) / 4; backward shares each gradient among those same cells. */
BN_TEST(avgpool_excludes_padding_from_the_count)
{
    bn_net *net;
    CHECK_OK(load_neg3x3("avgpool", &net));
    CHECK_OK(bn_net_forward(net, 1));
    float y[4], dx[9];
    CHECK_OK(lt_read(bn_net_output(net), y, 4));
    static const float expect[] = {-5, -2.5f, -5.5f, -6};
    for (int i = 0; i < 4; i++) CHECK_MSG(y[i] == expect[i], "y[%d] = %g, expected %g", i, y[i], expect[i]);
    static const float dy[] = {1, 2, 3, 4};
    CHECK_OK(lt_write(net->layers[0]->out_grad, dy, 4));
    CHECK_OK(bn_net_backward(net));
    CHECK_OK(lt_read(net->input_grad, dx, 9));
    static const float expect_dx[] = {1, 1, 1, 1.5f, 1, 1, 1.5f, 1, 1};
    for (int i = 0; i < 9; i++) CHECK_MSG(dx[i] == expect_dx[i], "dx[%d] = %g", i, dx[i]);
    bn_net_free(net);
    return BN_PASS;
}

BN_TEST(pool_help_kind_and_flops)
{
    bn_net *net;
    CHECK_OK(lt_net("[input]\nchannels=2\nheight=5\nwidth=5\n[maxpool]\nsize=3\nstride=2\npad=1\n[avgpool]\nsize=3\n",
                    1, 1, &net));
    for (int i = 0; i < 2; i++) {
        bn_layer *l = net->layers[i];
        CHECK(l->ops->kind == BN_NVTX_LAYER_POOL && strstr(l->ops->help, "stride"));
    }
    CHECK_NEAR(net->layers[0]->ops->flops(net->layers[0]), 2.0 * 3 * 3 * 9, 0);
    CHECK_NEAR(net->layers[1]->ops->flops(net->layers[1]), 2.0 * 1 * 1 * 9, 0);
    bn_net_free(net);
    return BN_PASS;
}

BN_TEST(maxpool_gradcheck)
{
    CHECK(lt_gradcheck_text("[input]\nchannels=2\nheight=7\nwidth=7\n[maxpool]\nsize=3\nstride=2\npad=1\n",
                            "maxpool 2x7x7 k3 s2 p1 batch 3", 3, 0, MAX_SPACING, 0, GRAD_TOL) == BN_PASS);
    CHECK(lt_gradcheck_text("[input]\nchannels=3\nheight=5\nwidth=5\n[maxpool]\nsize=2\n",
                            "maxpool 3x5x5 k2 s2 batch 2", 2, 0, MAX_SPACING, 0, GRAD_TOL) == BN_PASS);
    CHECK(lt_gradcheck_text("[input]\nchannels=1\nheight=6\nwidth=5\n[maxpool]\nsize=2\nstride=1\n[softmax_ce]\n",
                            "maxpool 1x6x5 k2 s1 + softmax_ce batch 4", 4, 0, MAX_SPACING, 20, GRAD_TOL) == BN_PASS);
    return BN_PASS;
}

BN_TEST(avgpool_gradcheck)
{
    CHECK(lt_gradcheck_text("[input]\nchannels=2\nheight=7\nwidth=7\n[avgpool]\nsize=3\nstride=2\npad=1\n",
                            "avgpool 2x7x7 k3 s2 p1 batch 3", 3, 0, 0, 0, GRAD_TOL) == BN_PASS);
    CHECK(lt_gradcheck_text("[input]\nchannels=1\nheight=5\nwidth=6\n[avgpool]\nsize=2\nstride=1\npad=1\n[softmax_ce]\n",
                            "avgpool 1x5x6 k2 s1 p1 + softmax_ce batch 2", 2, 0, 0, 42, GRAD_TOL) == BN_PASS);
    return BN_PASS;
}

BN_TEST(pool_global_average_is_the_mean_of_each_plane)
{
    bn_net *net;
    CHECK_OK(lt_net("[input]\nchannels=2\nheight=2\nwidth=3\n[avgpool]\nglobal=1\n", 1, 1, &net));
    CHECK(net->layers[0]->out->c == 2 && net->layers[0]->out->h == 1 && net->layers[0]->out->w == 1);
    const float x[12] = {1, 2, 3, 4, 5, 6, -1, -1, -1, -1, -1, 5}, dy[2] = {6, 12};
    float y[2], dx[12];
    CHECK_OK(lt_write(net->input, x, 12));
    CHECK_OK(bn_net_forward(net, 1));
    CHECK_OK(lt_read(net->layers[0]->out, y, 2));
    CHECK(y[0] == 3.5f && y[1] == 0.0f);
    CHECK_OK(lt_write(net->layers[0]->out_grad, dy, 2));
    CHECK_OK(bn_net_backward(net));
    CHECK_OK(lt_read(net->input_grad, dx, 12));
    for (int i = 0; i < 12; i++) CHECK(dx[i] == (i < 6 ? 1.0f : 2.0f));
    bn_net_free(net);
    CHECK(lt_gradcheck_text("[input]\nchannels=3\nheight=4\nwidth=5\n[avgpool]\nglobal=1\n", "avgpool global 3x4x5", 2,
                            0.0, 0.0, 0, GRAD_TOL) == BN_PASS);
    CHECK_ERR(lt_setup_status("[input]\nchannels=1\nheight=4\nwidth=4\n[avgpool]\nglobal=1\nsize=2\n"), BN_ERR_USAGE,
              "size does not go with global = 1");
    CHECK_ERR(lt_setup_status("[input]\nchannels=1\nheight=4\nwidth=4\n[maxpool]\nglobal=1\nsize=2\n"), BN_ERR_USAGE,
              "global");
    return BN_PASS;
}
