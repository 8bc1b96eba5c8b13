/* test_dense.c - the dense layer: hand-computed forward and backward, shapes and parameter
 * declarations, option errors, and gradient checks through the network. */
#include "layer_testing.h"
#include "layers.h"
#include "testing.h"

/* Central differences through a float32 forward agree to a few 1e-3 at worst (gradcheck.h
 * explains the choice of eps); a wrong gradient is off by far more. */
#define GRAD_TOL 1e-2

static const char *const small_model = "[input]\nchannels=1\nheight=1\nwidth=3\n"
                                       "[dense]\noutputs=2\n";

/* W = [[1, 2, 3], [-1, 0, 0.5]], b = [0.5, -1]; X = [[1, 1, 1], [2, 0, -2]]. */
static bn_status load_small(bn_net **net)
{
    static const float w[] = {1, 2, 3, -1, 0, 0.5f}, b[] = {0.5f, -1}, x[] = {1, 1, 1, 2, 0, -2};
    BN_TRY(lt_net(small_model, 2, 1, net));
    bn_layer *l = (*net)->layers[0];
    BN_TRY(lt_write(l->params[0].value, w, 6));
    BN_TRY(lt_write(l->params[1].value, b, 2));
    return lt_write((*net)->input, x, 6);
}

BN_TEST(dense_forward_matches_hand_values)
{
    bn_net *net;
    CHECK_OK(load_small(&net));
    CHECK_OK(bn_net_forward(net, 1));
    float y[4];
    CHECK_OK(lt_read(bn_net_output(net), y, 4));
    static const float expect[] = {6.5f, -1.5f, -3.5f, -4.0f};
    for (int i = 0; i < 4; i++) CHECK_NEAR(y[i], expect[i], 1e-6);
    bn_net_free(net);
    return BN_PASS;
}

/* dY = I: dW = dY^T X = X, db = [1, 1], dX = dY W = W; a second backward adds again. */
BN_TEST(dense_backward_matches_hand_values_and_accumulates)
{
    bn_net *net;
    CHECK_OK(load_small(&net));
    bn_layer *l = net->layers[0];
    CHECK_OK(bn_net_forward(net, 1));
    static const float dy[] = {1, 0, 0, 1};
    CHECK_OK(lt_write(l->out_grad, dy, 4));
    CHECK_OK(bn_net_zero_grad(net));
    CHECK_OK(bn_net_backward(net));
    CHECK_OK(bn_net_backward(net));
    float dw[6], db[2], dx[6];
    CHECK_OK(lt_read(l->params[0].grad, dw, 6));
    CHECK_OK(lt_read(l->params[1].grad, db, 2));
    CHECK_OK(lt_read(net->input_grad, dx, 6));
    static const float x[] = {1, 1, 1, 2, 0, -2}, w[] = {1, 2, 3, -1, 0, 0.5f};
    for (int i = 0; i < 6; i++) {
        CHECK_NEAR(dw[i], 2 * x[i], 1e-6);  /* added twice */
        CHECK_NEAR(dx[i], w[i], 1e-6);      /* written, not added */
    }
    CHECK_NEAR(db[0], 2, 1e-6);
    CHECK_NEAR(db[1], 2, 1e-6);
    bn_net_free(net);
    return BN_PASS;
}

BN_TEST(dense_flattens_and_declares_params)
{
    bn_net *net;
    CHECK_OK(lt_net("[input]\nchannels=2\nheight=3\nwidth=5\n[dense]\noutputs=7\n[dense]\noutputs=3\ninit=he\n",
                    2, 1, &net));
    bn_layer *l = net->layers[0];
    bn_blob *o = l->out;
    CHECK(o->c == 7 && o->h == 1 && o->w == 1);
    CHECK(l->num_params == 2);
    bn_param *w = &l->params[0], *b = &l->params[1];
    CHECK(w->value->n == 7 && w->value->c == 30 && w->value->h == 1 && w->value->w == 1);
    CHECK(w->fan_in == 30 && w->fan_out == 7 && w->init == BN_INIT_XAVIER && !w->is_bias);
    CHECK(bn_blob_count(b->value) == 7 && b->is_bias && b->init == BN_INIT_ZERO);
    CHECK(net->layers[1]->params[0].init == BN_INIT_HE);
    CHECK_NEAR(l->ops->flops(l), 2.0 * 30 * 7 + 7, 0);
    CHECK(l->ops->kind == BN_NVTX_LAYER_COMPUTE && strstr(l->ops->help, "outputs"));
    bn_net_free(net);
    return BN_PASS;
}

BN_TEST(dense_rejects_bad_options)
{
    const char *in = "[input]\nchannels=1\nheight=2\nwidth=2\n";
    char text[256];
    snprintf(text, sizeof text, "%s[dense]\ninit=he\n", in);
    CHECK_ERR(lt_setup_status(text), BN_ERR_USAGE, "missing required key 'outputs'");
    snprintf(text, sizeof text, "%s[dense]\noutputs=0\n", in);
    CHECK_ERR(lt_setup_status(text), BN_ERR_USAGE, "out of range");
    snprintf(text, sizeof text, "%s[dense]\noutputs=3\ninit=gauss\n", in);
    CHECK_ERR(lt_setup_status(text), BN_ERR_USAGE, "not one of");
    snprintf(text, sizeof text, "%s[dense]\noutputs=3\nsize=2\n", in);
    CHECK_ERR(lt_setup_status(text), BN_ERR_USAGE, "unknown key 'size'");
    return BN_PASS;
}

BN_TEST(dense_gradcheck)
{
    CHECK(lt_gradcheck_text("[input]\nchannels=2\nheight=3\nwidth=5\n[dense]\noutputs=4\n",
                            "dense 2x3x5->4 batch 3", 3, 0, 0, 0, GRAD_TOL) == BN_PASS);
    CHECK(lt_gradcheck_text("[input]\nchannels=1\nheight=1\nwidth=7\n[dense]\noutputs=5\ninit=he\n"
                            "[dense]\noutputs=3\n[softmax_ce]\n",
                            "dense 7->5->3 + softmax_ce batch 5", 5, 0, 0, 3, GRAD_TOL) == BN_PASS);
    return BN_PASS;
}

/* A last batch smaller than the capacity must use only its own rows: the rows past it hold
 * other examples' data, which would change both the loss and its gradient. */
BN_TEST(dense_gradcheck_partial_batch)
{
    uint64_t seed = lt_fresh_seed();
    bn_net *net;
    CHECK_OK(lt_net("[input]\nchannels=3\nheight=1\nwidth=3\n[dense]\noutputs=4\n[softmax_ce]\n", 6, seed, &net));
    CHECK_OK(lt_fill_normal(net, seed + 1, 1.0, 0));
    CHECK_OK(lt_fill_labels(net, seed + 1, 4));
    CHECK_OK(bn_net_set_batch(net, 3));
    CHECK_OK(lt_fill_normal(net, seed, 1.0, 0));
    CHECK_OK(lt_fill_labels(net, seed, 4));
    CHECK(lt_gradcheck(net, "dense 9->4 + softmax_ce batch 3 of 6", seed, 0, GRAD_TOL) == BN_PASS);
    float y[6 * 4];
    for (int i = 0; i < 24; i++) y[i] = 42.0f;
    CHECK_OK(bn_net_set_batch(net, 6));
    CHECK_OK(lt_write(net->layers[0]->out, y, 24));
    CHECK_OK(bn_net_set_batch(net, 3));
    CHECK_OK(bn_net_forward(net, 1));
    CHECK_OK(bn_net_set_batch(net, 6));
    CHECK_OK(lt_read(net->layers[0]->out, y, 24));
    for (int i = 12; i < 24; i++) CHECK_MSG(y[i] == 42.0f, "row %d was written", i / 4);
    bn_net_free(net);
    return BN_PASS;
}
