/* test_poly.c - the poly learning-rate policy (core/lr_policies/poly.c): Caffe's
 * lr * (1 - s / T)^power at chosen steps, its power read from [train] with its own default, and
 * a key of another policy refused. */
#include <math.h>
#include <string.h>

#include "core/lr_policies/lr_policies.h"
#include "core/net.h"
#include "testing.h"
#include "train/optimizer.h"

BN_TEST(poly_rate_at_chosen_steps)
{
    bn_optimizer o = {0};
    o.cfg = bn_train_config_defaults();
    o.cfg.lr = 0.1;
    o.cfg.lr_policy = bn_lr_policy_find("poly");
    o.max_iter = 100;
    /* power 1 by default: a straight line from lr down to 0 at the run's end */
    CHECK_NEAR(bn_optimizer_lr(&o, 0), 0.1, 1e-15);
    CHECK_NEAR(bn_optimizer_lr(&o, 25), 0.075, 1e-15);
    CHECK_NEAR(bn_optimizer_lr(&o, 50), 0.05, 1e-15);
    CHECK_NEAR(bn_optimizer_lr(&o, 99), 0.001, 1e-15);
    CHECK(bn_optimizer_lr(&o, 100) == 0.0 && bn_optimizer_lr(&o, 150) == 0.0);
    CHECK_OK(bn_train_config_set(&o.cfg, "power", 2));
    CHECK_NEAR(bn_optimizer_lr(&o, 50), 0.025, 1e-15);     /* 0.1 * 0.5^2 */
    CHECK_NEAR(bn_optimizer_lr(&o, 90), 0.001, 1e-15);     /* 0.1 * 0.1^2 */
    CHECK_OK(bn_train_config_set(&o.cfg, "power", 0.5));
    CHECK_NEAR(bn_optimizer_lr(&o, 75), 0.05, 1e-15);      /* 0.1 * 0.25^0.5 */
    /* a run of unknown length (blobnet time) keeps lr; the warmup scales poly too */
    o.max_iter = 0;
    CHECK(bn_optimizer_lr(&o, 1000) == 0.1);
    o.max_iter = 100;
    o.cfg.warmup = 10;
    CHECK_NEAR(bn_optimizer_lr(&o, 4), 0.1 * sqrt(0.96) * 0.5, 1e-15);
    return BN_PASS;
}

/* [train] power is poly's (default 1, not inv's 0.75); inv's gamma is refused under poly. */
BN_TEST(poly_keys_from_the_model_file)
{
    const char *head = "[input]\nchannels=1\nheight=2\nwidth=2\n[train]\nlr_policy=poly\n";
    char text[256];
    bn_net *net;
    snprintf(text, sizeof text, "%s[dense]\noutputs=2\n", head);
    CHECK_OK(bn_net_from_text(text, "m.cfg", &net));
    CHECK(bn_train_value_named(&net->train, "power") == 1.0);
    bn_net_free(net);
    snprintf(text, sizeof text, "%spower=3\n[dense]\noutputs=2\n", head);
    CHECK_OK(bn_net_from_text(text, "m.cfg", &net));
    CHECK(bn_train_value_named(&net->train, "power") == 3.0);
    bn_net_free(net);
    net = NULL;
    snprintf(text, sizeof text, "%sgamma=0.1\n[dense]\noutputs=2\n", head);
    CHECK_ERR(bn_net_from_text(text, "m.cfg", &net), BN_ERR_USAGE,
              "m.cfg:7: [train] gamma is a key of lr_policy step, inv, not of lr_policy = poly");
    CHECK(!strchr(bn_last_error(), '\n') && net == NULL);
    return BN_PASS;
}
