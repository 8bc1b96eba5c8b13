/* test_conv2d.c - the conv2d layer: a hand-computed strided, padded case, shape inference
 * and its errors, the im2col/col2im pair, and gradient checks through the network. */
#include <stdlib.h>

#include "conv2d/im2col.h"
#include "core/rng.h"
#include "layer_testing.h"
#include "layers.h"
#include "testing.h"

/* Central differences through a float32 forward agree to a few 1e-3 at worst (gradcheck.h
 * explains the choice of eps); a wrong gradient is off by far more. */
#define GRAD_TOL 1e-2

BN_TEST(conv2d_output_shapes)
{
    int c, h, w;
    CHECK_OK(lt_out_shape("[input]\nchannels=2\nheight=7\nwidth=7\n[conv2d]\nfilters=3\nsize=3\nstride=2\npad=1\n",
                       &c, &h, &w));
    CHECK(c == 3 && h == 4 && w == 4);
    /* floor: (6 - 3) / 2 + 1 = 2, the last column is never a window's start */
    CHECK_OK(lt_out_shape("[input]\nchannels=1\nheight=6\nwidth=9\n[conv2d]\nfilters=2\nsize=3\nstride=2\n",
                       &c, &h, &w));
    CHECK(c == 2 && h == 2 && w == 4);
    CHECK_OK(lt_out_shape("[input]\nchannels=1\nheight=5\nwidth=5\n[conv2d]\nfilters=1\nsize=5\n", &c, &h, &w));
    CHECK(c == 1 && h == 1 && w == 1);
    CHECK_OK(lt_out_shape("[input]\nchannels=1\nheight=3\nwidth=3\n[conv2d]\nfilters=4\nsize=5\npad=1\n", &c, &h, &w));
    CHECK(c == 4 && h == 1 && w == 1);
    return BN_PASS;
}

BN_TEST(conv2d_declares_params_and_flops)
{
    bn_net *net;
    CHECK_OK(lt_net("[input]\nchannels=2\nheight=7\nwidth=7\n[conv2d]\nfilters=3\nsize=3\nstride=2\npad=1\ninit=he\n",
                    1, 1, &net));
    bn_layer *l = net->layers[0];
    bn_param *w = &l->params[0], *b = &l->params[1];
    CHECK(l->num_params == 2);
    CHECK(w->value->n == 3 && w->value->c == 2 && w->value->h == 3 && w->value->w == 3);
    CHECK(w->fan_in == 18 && w->fan_out == 27 && w->init == BN_INIT_HE && !w->is_bias);
    CHECK(bn_blob_count(b->value) == 3 && b->is_bias && b->init == BN_INIT_ZERO);
    CHECK_NEAR(l->ops->flops(l), 16.0 * 3 * (2 * 18 + 1), 0);
    bn_net_free(net);
    return BN_PASS;
}

BN_TEST(conv2d_rejects_bad_shapes_and_options)
{
    const char *in3 = "[input]\nchannels=1\nheight=3\nwidth=3\n";
    char text[256];
    snprintf(text, sizeof text, "%s[conv2d]\nfilters=2\nsize=5\n", in3);
    CHECK_ERR(lt_setup_status(text), BN_ERR_USAGE, "kernel 5x5 is larger than the padded input 3x3");
    snprintf(text, sizeof text, "%s[conv2d]\nfilters=2\nsize=3\npad=3\n", in3);
    CHECK_ERR(lt_setup_status(text), BN_ERR_USAGE, "pad = 3 must be smaller than size = 3");
    snprintf(text, sizeof text, "%s[conv2d]\nsize=3\n", in3);
    CHECK_ERR(lt_setup_status(text), BN_ERR_USAGE, "missing required key 'filters'");
    snprintf(text, sizeof text, "%s[conv2d]\nfilters=2\n", in3);
    CHECK_ERR(lt_setup_status(text), BN_ERR_USAGE, "missing required key 'size'");
    snprintf(text, sizeof text, "%s[conv2d]\nfilters=2\nsize=3\nstride=0\n", in3);
    CHECK_ERR(lt_setup_status(text), BN_ERR_USAGE, "stride = 0 is out of range");
    snprintf(text, sizeof text, "%s[conv2d]\nfilters=2\nsize=three\n", in3);
    CHECK_ERR(lt_setup_status(text), BN_ERR_USAGE, "is not an integer");
    return BN_PASS;
}

/* Input 4x4 holding 1..16, kernel [[1, 2, 0], [0, 0, 0], [0, 0, -1]] (not symmetric, so a
 * flipped kernel would show), bias 0.5, stride 2, pad 1: output (oy, ox) is centred on input
 * (2oy, 2ox) and equals X[y-1][x-1] + 2 X[y-1][x] - X[y+1][x+1] + 0.5 with zeros outside.
 * The second example is -X, which checks the per-example offsets. */
BN_TEST(conv2d_forward_matches_hand_values)
{
    bn_net *net;
    CHECK_OK(lt_net("[input]\nchannels=1\nheight=4\nwidth=4\n[conv2d]\nfilters=1\nsize=3\nstride=2\npad=1\n",
                    2, 1, &net));
    float x[32], k[9] = {1, 2, 0, 0, 0, 0, 0, 0, -1}, b = 0.5f, y[8];
    for (int i = 0; i < 16; i++) x[i] = (float)(i + 1), x[16 + i] = -(float)(i + 1);
    CHECK_OK(lt_write(net->input, x, 32));
    CHECK_OK(lt_write(net->layers[0]->params[0].value, k, 9));
    CHECK_OK(lt_write(net->layers[0]->params[1].value, &b, 1));
    CHECK_OK(bn_net_forward(net, 0));
    CHECK_OK(lt_read(bn_net_output(net), y, 8));
    static const float expect[] = {-5.5f, -7.5f, -3.5f, 4.5f, 6.5f, 8.5f, 4.5f, -3.5f};
    for (int i = 0; i < 8; i++) CHECK_MSG(y[i] == expect[i], "y[%d] = %g, expected %g", i, y[i], expect[i]);
    bn_net_free(net);
    return BN_PASS;
}

/* col2im_add is the adjoint of im2col: <im2col(x), c> = <x, col2im(c)> for any x and c,
 * which is exactly what the input gradient relies on. */
BN_TEST(conv2d_col2im_is_adjoint_of_im2col)
{
    bn_conv_geom g = {2, 5, 6, 3, 2, 1, 0, 0};
    g.oh = bn_window_out(g.h, g.k, g.stride, g.pad);
    g.ow = bn_window_out(g.w, g.k, g.stride, g.pad);
    size_t nx = (size_t)g.c * g.h * g.w, nc = bn_col_count(&g);
    CHECK(nc == (size_t)2 * 9 * 3 * 3);
    float *x = malloc(nx * sizeof *x), *back = calloc(nx, sizeof *back);
    float *col = malloc(nc * sizeof *col), *c = malloc(nc * sizeof *c);
    CHECK(x && back && col && c);
    bn_rng r;
    bn_rng_seed(&r, lt_fresh_seed(), 1);
    for (size_t i = 0; i < nx; i++) x[i] = (float)bn_rng_normal(&r);
    for (size_t i = 0; i < nc; i++) c[i] = (float)bn_rng_normal(&r);
    bn_im2col(&g, x, col);
    bn_col2im_add(&g, c, back);
    double lhs = 0, rhs = 0;
    for (size_t i = 0; i < nc; i++) lhs += (double)col[i] * c[i];
    for (size_t i = 0; i < nx; i++) rhs += (double)x[i] * back[i];
    /* Row 0 is tap (c 0, ky 0, kx 0): at output (0, 0) it sits in the padding. */
    CHECK(col[0] == 0.0f && col[4] == x[1 * g.w + 1]);
    free(x), free(back), free(col), free(c);
    CHECK_NEAR(lhs, rhs, 1e-4 * (fabs(lhs) + 1));
    return BN_PASS;
}

BN_TEST(conv2d_gradcheck)
{
    CHECK(lt_gradcheck_text("[input]\nchannels=2\nheight=7\nwidth=7\n[conv2d]\nfilters=3\nsize=3\nstride=2\npad=1\n",
                            "conv2d 2x7x7 k3 s2 p1 batch 3", 3, 0, 0, 0, GRAD_TOL) == BN_PASS);
    CHECK(lt_gradcheck_text("[input]\nchannels=3\nheight=5\nwidth=6\n[conv2d]\nfilters=2\nsize=2\ninit=he\n",
                            "conv2d 3x5x6 k2 s1 batch 2", 2, 0, 0, 0, GRAD_TOL) == BN_PASS);
    CHECK(lt_gradcheck_text("[input]\nchannels=1\nheight=9\nwidth=9\n[conv2d]\nfilters=2\nsize=5\nstride=3\npad=2\n"
                            "[conv2d]\nfilters=3\nsize=3\n[softmax_ce]\n",
                            "conv2d k5 s3 p2 -> conv2d k3 + softmax_ce batch 4", 4, 0, 0, 3, GRAD_TOL) == BN_PASS);
    return BN_PASS;
}

/* The rows past a partial batch hold other data; neither pass may touch them. */
BN_TEST(conv2d_gradcheck_partial_batch)
{
    uint64_t seed = lt_fresh_seed();
    bn_net *net;
    CHECK_OK(lt_net("[input]\nchannels=2\nheight=5\nwidth=5\n[conv2d]\nfilters=2\nsize=3\npad=1\n", 5, seed, &net));
    CHECK_OK(lt_fill_normal(net, seed + 1, 1.0, 0));
    CHECK_OK(bn_net_set_batch(net, 2));
    CHECK_OK(lt_fill_normal(net, seed, 1.0, 0));
    CHECK(lt_gradcheck(net, "conv2d 2x5x5 k3 p1 batch 2 of 5", seed, 0, GRAD_TOL) == BN_PASS);
    bn_net_free(net);
    return BN_PASS;
}
