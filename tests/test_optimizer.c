/* SGD updates and learning-rate policies against hand-computed values. */
#include "testing.h"
#include "train/optimizer.h"

BN_TEST(optimizer_lr_policies_match_formulas)
{
    bn_sgd o = {0};
    o.cfg = bn_train_config_defaults();
    o.cfg.lr = 0.01;
    o.cfg.lr_policy = BN_LR_FIXED;
    CHECK_NEAR(bn_sgd_lr(&o, 12345), 0.01, 1e-15);
    o.cfg.lr_policy = BN_LR_INV; /* Caffe's LeNet: 0.01 * (1 + 1e-4 * 1000)^-0.75 */
    o.cfg.gamma = 1e-4;
    o.cfg.power = 0.75;
    CHECK_NEAR(bn_sgd_lr(&o, 0), 0.01, 1e-15);
    CHECK_NEAR(bn_sgd_lr(&o, 1000), 0.0093101245, 1e-9);
    CHECK_NEAR(bn_sgd_lr(&o, 10000), 0.0059460356, 1e-9);
    o.cfg.lr_policy = BN_LR_STEP;
    o.cfg.gamma = 0.1;
    o.cfg.stepsize = 100;
    CHECK_NEAR(bn_sgd_lr(&o, 99), 0.01, 1e-15);
    CHECK_NEAR(bn_sgd_lr(&o, 100), 0.001, 1e-15);
    CHECK_NEAR(bn_sgd_lr(&o, 250), 0.0001, 1e-15);
    o.cfg.lr_policy = BN_LR_COSINE;
    o.cfg.lr_min = 0.001;
    o.max_iter = 1000;
    CHECK_NEAR(bn_sgd_lr(&o, 0), 0.01, 1e-15);
    CHECK_NEAR(bn_sgd_lr(&o, 500), 0.0055, 1e-12);
    CHECK_NEAR(bn_sgd_lr(&o, 1000), 0.001, 1e-15);
    CHECK_NEAR(bn_sgd_lr(&o, 2000), 0.001, 1e-15);
    return BN_PASS;
}

/* A dense layer 2 -> 1: weight [w0, w1] (lr_mult 1, decay 1) and bias b (bias multipliers). */
BN_TEST(optimizer_momentum_decay_and_bias_multipliers)
{
    bn_net *net;
    CHECK_OK(bn_net_from_text("[input]\nchannels=2\nheight=1\nwidth=1\n[train]\nbias_lr_mult=2\n"
                              "[dense]\noutputs=1\n", "opt.cfg", &net));
    CHECK_OK(bn_net_setup(net, 1, NULL, 0, 1));
    bn_train_config cfg = bn_train_config_defaults();
    cfg.lr = 0.1;
    cfg.momentum = 0.9;
    cfg.weight_decay = 0.01;
    bn_sgd *o;
    CHECK_OK(bn_sgd_create(net, &cfg, &o));
    float *w = bn_blob_host_wr(net->params);
    w[0] = 1.0f, w[1] = -2.0f, w[2] = 0.5f;
    float *g = bn_blob_host_wr(net->grads);
    g[0] = 0.5f, g[1] = 1.0f, g[2] = -1.0f;
    CHECK_OK(bn_sgd_step(o, net));
    /* v = 0.1*(g + 0.01*w) for weights, v = 0.2*g for the bias (no decay); w -= v */
    const float *p = bn_blob_host_rd(net->params);
    CHECK_NEAR(p[0], 1.0 - 0.1 * (0.5 + 0.01), 1e-6);
    CHECK_NEAR(p[1], -2.0 - 0.1 * (1.0 - 0.02), 1e-6);
    CHECK_NEAR(p[2], 0.5 + 0.2, 1e-6);
    /* Second step with the same gradient: v2 = 0.9*v1 + lr*(g + wd*w1). */
    double v0 = 0.1 * (0.5 + 0.01), w0 = 1.0 - v0;
    double v0b = 0.9 * v0 + 0.1 * (0.5 + 0.01 * w0);
    CHECK_OK(bn_sgd_step(o, net));
    CHECK_NEAR(bn_blob_host_rd(net->params)[0], w0 - v0b, 1e-6);
    CHECK(o->iter == 2);
    CHECK(o->num_segments == 2);
    bn_sgd_free(o);
    bn_net_free(net);
    return BN_PASS;
}
