/* test_batchnorm.c - the batchnorm layer (layers/batchnorm.c) and layer buffers: gradients at
 * several shapes, the normalization and running averages against hand-worked values, the
 * evaluation pass, and buffers kept apart from parameters. */
#include <math.h>
#include <stdlib.h>

#include "core/net.h"
#include "layer_testing.h"
#include "testing.h"
#include "train/checkpoint.h"
#include "train/optimizer.h"

#define GRAD_TOL 1e-2

BN_TEST(batchnorm_gradcheck_at_several_shapes)
{
    static const struct {
        const char *what, *text;
        int batch, classes;
    } cases[] = {
        {"batchnorm 3x5x5 batch 4", "[input]\nchannels=3\nheight=5\nwidth=5\n[batchnorm]\n", 4, 0},
        {"batchnorm 1x1x1 features 6 batch 5", "[input]\nchannels=6\nheight=1\nwidth=1\n[batchnorm]\nmomentum=0.3\n", 5, 0},
        {"batchnorm 2x7x3 batch 2", "[input]\nchannels=2\nheight=7\nwidth=3\n[batchnorm]\neps=1e-3\n", 2, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        CHECK_MSG(lt_gradcheck_text(cases[i].text, cases[i].what, cases[i].batch, 0.0, 0.0, cases[i].classes,
                                    GRAD_TOL) == BN_PASS, "%s", cases[i].what);
    return BN_PASS;
}

/* Normalizing a dense layer's six outputs over a batch of six bends the loss sharply: at the
 * default step the central differences' truncation error reached 0.9e-2 in 25 runs; a step of
 * 1e-3 keeps it near 1e-3. */
#define NET_EPS 1e-3

BN_TEST(batchnorm_gradcheck_through_a_network)
{
    uint64_t seed = lt_fresh_seed();
    bn_net *net;
    CHECK_OK(lt_net("[input]\nchannels=2\nheight=6\nwidth=6\n[conv2d]\nfilters=4\nsize=3\n[batchnorm]\n[tanh]\n"
                    "[dense]\noutputs=5\n[batchnorm]\n[softmax_ce]\n", 6, seed, &net));
    CHECK_OK(lt_fill_normal(net, seed, 1.0, 0));
    CHECK_OK(lt_fill_labels(net, seed, 5));
    CHECK(lt_gradcheck(net, "conv, batchnorm, tanh, dense, batchnorm, softmax_ce", seed, NET_EPS, GRAD_TOL) == BN_PASS);
    bn_net_free(net);
    return BN_PASS;
}

/* Two channels, batch 2, plane 2: channel 0 holds 1, 2, 3, 4 and channel 1 holds 10 four times. */
static int small_net(bn_net **net, float *x)
{
    CHECK_OK(lt_net("[input]\nchannels=2\nheight=1\nwidth=2\n[batchnorm]\nname=bn\nmomentum=0.25\n", 2, 1, net));
    const float v[8] = {1, 2, 10, 10, 3, 4, 10, 10};
    memcpy(x, v, sizeof v);
    CHECK_OK(lt_write((*net)->input, x, 8));
    return BN_PASS;
}

BN_TEST(batchnorm_training_normalizes_and_moves_the_running_averages)
{
    bn_net *net;
    float x[8], y[8], rm[2], rv[2];
    CHECK(small_net(&net, x) == BN_PASS);
    bn_layer *l = net->layers[0];
    CHECK(l->num_params == 2 && l->num_buffers == 2 && net->num_params == 4 && net->num_buffer_floats == 4);
    CHECK_OK(bn_net_forward(net, 1));
    CHECK_OK(lt_read(l->out, y, 8));
    /* Channel 0: mean 2.5, biased variance 1.25; channel 1: variance 0, so y = 0. */
    double inv = 1.0 / sqrt(1.25 + 1e-5);
    const int ch0[4] = {0, 1, 4, 5};
    for (int k = 0; k < 4; k++) CHECK_NEAR(y[ch0[k]], (x[ch0[k]] - 2.5) * inv, 1e-6);
    CHECK(y[2] == 0.0f && y[3] == 0.0f && y[6] == 0.0f && y[7] == 0.0f);
    CHECK_OK(lt_read(l->buffers[0].value, rm, 2));
    CHECK_OK(lt_read(l->buffers[1].value, rv, 2));
    /* running = 0.75 * running + 0.25 * batch, with the unbiased variance (5/3 for channel 0). */
    CHECK_NEAR(rm[0], 0.25 * 2.5, 1e-7);
    CHECK_NEAR(rm[1], 0.25 * 10.0, 1e-7);
    CHECK_NEAR(rv[0], 0.75 + 0.25 * (5.0 / 3.0), 1e-7);
    CHECK_NEAR(rv[1], 0.75, 1e-7);
    bn_net_free(net);
    return BN_PASS;
}

BN_TEST(batchnorm_evaluation_uses_the_running_averages)
{
    bn_net *net;
    float x[8], y[8];
    CHECK(small_net(&net, x) == BN_PASS);
    bn_layer *l = net->layers[0];
    const float rm[2] = {1.0f, -2.0f}, rv[2] = {4.0f, 0.25f}, w[2] = {2.0f, 3.0f}, b[2] = {0.5f, -1.0f};
    CHECK_OK(lt_write(l->buffers[0].value, rm, 2));
    CHECK_OK(lt_write(l->buffers[1].value, rv, 2));
    CHECK_OK(lt_write(l->params[0].value, w, 2));
    CHECK_OK(lt_write(l->params[1].value, b, 2));
    CHECK_OK(bn_net_forward(net, 0));
    CHECK_OK(lt_read(l->out, y, 8));
    for (int i = 0; i < 8; i++) {
        int c = (i / 2) % 2;
        CHECK_NEAR(y[i], (x[i] - rm[c]) / sqrt(rv[c] + 1e-5) * w[c] + b[c], 1e-5);
    }
    /* Evaluation leaves the running averages alone. */
    float after[2];
    CHECK_OK(lt_read(l->buffers[1].value, after, 2));
    CHECK(after[0] == rv[0] && after[1] == rv[1]);
    bn_net_free(net);
    return BN_PASS;
}

BN_TEST(batchnorm_buffers_are_not_parameters)
{
    bn_net *net;
    CHECK_OK(lt_net("[input]\nchannels=3\nheight=2\nwidth=2\n[batchnorm]\nname=bn\n[dense]\noutputs=2\n[softmax_ce]\n",
                    4, 1, &net));
    bn_layer *l = net->layers[0];
    CHECK(strcmp(l->buffers[0].name, "running_mean") == 0 && strcmp(l->buffers[1].name, "running_var") == 0);
    CHECK(strcmp(l->buffers[0].value->name, "bn.running_mean") == 0);
    CHECK(net->num_params == 3 + 3 + 12 * 2 + 2 && net->num_buffer_floats == 6);
    float rv[3];
    CHECK_OK(lt_read(l->buffers[1].value, rv, 3));
    CHECK(rv[0] == 1.0f && rv[1] == 1.0f && rv[2] == 1.0f);
    /* The gradient check runs many training passes and gives the buffers back as they were. */
    CHECK_OK(lt_fill_normal(net, 3, 1.0, 0));
    CHECK_OK(lt_fill_labels(net, 3, 2));
    float before[6], after[6];
    CHECK_OK(lt_read(net->buffers, before, 6));
    CHECK(lt_gradcheck(net, "batchnorm, dense, softmax_ce", 3, 0.0, GRAD_TOL) == BN_PASS);
    CHECK_OK(lt_read(net->buffers, after, 6));
    CHECK(memcmp(before, after, sizeof before) == 0);
    bn_net_free(net);
    return BN_PASS;
}

/* Buffers go into checkpoints as "<layer>.<buffer>" and come back on a resume, so the resumed
 * run goes on bit for bit, and a weights-only load (test, predict) brings them too. */
BN_TEST(batchnorm_buffers_round_trip_through_checkpoints)
{
    static const char *text = "[input]\nchannels=2\nheight=4\nwidth=4\n[train]\noptimizer=adamw\nlr=0.01\n"
                              "[conv2d]\nname=c\nfilters=3\nsize=3\n[batchnorm]\nname=bn\n[relu]\n"
                              "[dense]\noutputs=4\n[softmax_ce]\n";
    char path[512];
    snprintf(path, sizeof path, "%s/bn.safetensors", bn_test_tmpdir());
    bn_net *a, *b;
    bn_optimizer *oa, *ob;
    CHECK_OK(lt_net(text, 5, 9, &a));
    CHECK_OK(lt_net(text, 5, 9, &b));
    CHECK_OK(bn_optimizer_create(a, &a->train, &oa));
    CHECK_OK(bn_optimizer_create(b, &b->train, &ob));
    CHECK_OK(lt_train_steps(a, oa, 0, 3, 4, 40, 50));
    bn_train_state st = {.seed = 9, .step = 3};
    CHECK_OK(bn_checkpoint_save(path, a, oa, &st));
    CHECK_OK(bn_checkpoint_load(path, b, ob, &st));
    float ra[6], rb[6];
    CHECK_OK(lt_read(a->buffers, ra, 6));
    CHECK_OK(lt_read(b->buffers, rb, 6));
    CHECK(memcmp(ra, rb, sizeof ra) == 0 && ra[3] != 1.0f);
    CHECK_OK(lt_train_steps(a, oa, 3, 2, 4, 40, 50));
    CHECK_OK(lt_train_steps(b, ob, 3, 2, 4, 40, 50));
    float wa[256], wb[256];
    CHECK(a->num_params <= 256);
    CHECK_OK(lt_read(a->params, wa, a->num_params));
    CHECK_OK(lt_read(b->params, wb, b->num_params));
    CHECK_OK(lt_read(a->buffers, ra, 6));
    CHECK_OK(lt_read(b->buffers, rb, 6));
    CHECK_MSG(memcmp(wa, wb, a->num_params * sizeof *wa) == 0 && memcmp(ra, rb, sizeof ra) == 0,
              "the resumed run went another way");
    /* The weights alone (test, predict) bring the running averages along too. */
    bn_net *c;
    CHECK_OK(lt_net(text, 5, 10, &c));
    CHECK_OK(bn_checkpoint_save(path, a, NULL, NULL));
    CHECK_OK(bn_checkpoint_load_weights(path, c));
    float rc[6];
    CHECK_OK(lt_read(c->buffers, rc, 6));
    CHECK(memcmp(ra, rc, sizeof ra) == 0);
    /* A model without the batchnorm cannot take the file. */
    bn_net *plain;
    CHECK_OK(lt_net("[input]\nchannels=2\nheight=4\nwidth=4\n[conv2d]\nname=c\nfilters=3\nsize=3\n[relu]\n"
                    "[dense]\noutputs=4\n[softmax_ce]\n", 5, 9, &plain));
    CHECK_ERR(bn_checkpoint_load_weights(path, plain), BN_ERR_DATA, "was saved from a different model than");
    bn_net_free(plain);
    bn_net_free(c);
    bn_optimizer_free(oa);
    bn_optimizer_free(ob);
    bn_net_free(a);
    bn_net_free(b);
    return BN_PASS;
}
