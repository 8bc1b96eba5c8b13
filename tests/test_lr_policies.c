/* test_lr_policies.c - the learning-rate policies of core/lr_policies/ against hand-worked
 * values at chosen steps, the warmup over them, and their table: every policy's keys are read
 * from [train], and a key of another policy is refused with a line naming whose it is. */
#include <math.h>
#include <string.h>

#include "core/lr_policies/lr_policies.h"
#include "core/net.h"
#include "testing.h"
#include "train/optimizer.h"

BN_TEST(lr_policies_match_formulas)
{
    bn_optimizer o = {0};
    o.cfg = bn_train_config_defaults();
    o.cfg.lr = 0.01;
    o.cfg.lr_policy = bn_lr_policy_find("fixed");
    CHECK_NEAR(bn_optimizer_lr(&o, 12345), 0.01, 1e-15);
    o.cfg.lr_policy = bn_lr_policy_find("inv"); /* Caffe's LeNet: 0.01 * (1 + 1e-4 * 1000)^-0.75 */
    CHECK_OK(bn_train_config_set(&o.cfg, "gamma", 1e-4));
    CHECK_OK(bn_train_config_set(&o.cfg, "power", 0.75));
    CHECK_NEAR(bn_optimizer_lr(&o, 0), 0.01, 1e-15);
    CHECK_NEAR(bn_optimizer_lr(&o, 1000), 0.0093101245, 1e-9);
    CHECK_NEAR(bn_optimizer_lr(&o, 10000), 0.0059460356, 1e-9);
    o.cfg.lr_policy = bn_lr_policy_find("step");
    CHECK_OK(bn_train_config_set(&o.cfg, "gamma", 0.1));
    CHECK_OK(bn_train_config_set(&o.cfg, "stepsize", 100));
    CHECK_NEAR(bn_optimizer_lr(&o, 99), 0.01, 1e-15);
    CHECK_NEAR(bn_optimizer_lr(&o, 100), 0.001, 1e-15);
    CHECK_NEAR(bn_optimizer_lr(&o, 250), 0.0001, 1e-15);
    o.cfg.lr_policy = bn_lr_policy_find("cosine");
    CHECK_OK(bn_train_config_set(&o.cfg, "lr_min", 0.001));
    o.max_iter = 1000;
    CHECK_NEAR(bn_optimizer_lr(&o, 0), 0.01, 1e-15);
    CHECK_NEAR(bn_optimizer_lr(&o, 500), 0.0055, 1e-12);
    CHECK_NEAR(bn_optimizer_lr(&o, 1000), 0.001, 1e-15);
    CHECK_NEAR(bn_optimizer_lr(&o, 2000), 0.001, 1e-15);
    return BN_PASS;
}

/* Warmup: step s < warmup takes policy(s) * (s + 1) / warmup, later steps the policy's rate. */
BN_TEST(lr_policies_warmup_scales_the_policy)
{
    bn_optimizer o = {0};
    o.cfg = bn_train_config_defaults();
    o.cfg.lr = 0.01;
    o.cfg.lr_policy = bn_lr_policy_find("inv");
    CHECK_OK(bn_train_config_set(&o.cfg, "gamma", 1e-4));
    CHECK_OK(bn_train_config_set(&o.cfg, "power", 0.75));
    o.cfg.warmup = 10;
    CHECK_NEAR(bn_optimizer_lr(&o, 0), 0.001, 1e-15);                            /* 0.01 * 1/10 */
    CHECK_NEAR(bn_optimizer_lr(&o, 4), 0.01 * pow(1.0004, -0.75) * 0.5, 1e-15); /* 5/10 */
    CHECK_NEAR(bn_optimizer_lr(&o, 9), 0.01 * pow(1.0009, -0.75), 1e-15);       /* 10/10 */
    CHECK_NEAR(bn_optimizer_lr(&o, 10), 0.01 * pow(1.001, -0.75), 1e-15);       /* the policy alone */
    CHECK_NEAR(bn_optimizer_lr(&o, 1000), 0.0093101245, 1e-9);
    o.cfg.lr_policy = bn_lr_policy_find("fixed");
    o.cfg.warmup = 4;
    CHECK_NEAR(bn_optimizer_lr(&o, 2), 0.0075, 1e-15);
    CHECK_NEAR(bn_optimizer_lr(&o, 3), 0.01, 1e-15);
    o.cfg.warmup = 0;
    CHECK_NEAR(bn_optimizer_lr(&o, 0), 0.01, 1e-15);
    return BN_PASS;
}

/* torch.optim.lr_scheduler.OneCycleLR(max_lr=0.1, total_steps=100) (pct_start 0.3, div_factor
 * 25, final_div_factor 1e4, cos): it starts at 0.1 / 25 = 0.004, reaches 0.1 at step
 * 0.3 * 100 - 1 = 29, is halfway down at step 29 + 70 / 2 = 64 and ends at 0.004 / 1e4 at step
 * 99. */
BN_TEST(lr_policies_onecycle_matches_pytorch)
{
    bn_optimizer o = {0};
    o.cfg = bn_train_config_defaults();
    o.cfg.lr = 0.1;
    o.cfg.lr_policy = bn_lr_policy_find("onecycle");
    o.max_iter = 100;
    const double pi = 3.14159265358979323846;
    CHECK_NEAR(bn_optimizer_lr(&o, 0), 0.004, 1e-15);
    CHECK_NEAR(bn_optimizer_lr(&o, 10), 0.1 + (0.004 - 0.1) / 2 * (cos(pi * 10 / 29) + 1), 1e-15);
    CHECK_NEAR(bn_optimizer_lr(&o, 29), 0.1, 1e-15);
    CHECK_NEAR(bn_optimizer_lr(&o, 30), 4e-7 + (0.1 - 4e-7) / 2 * (cos(pi / 70) + 1), 1e-15);
    CHECK_NEAR(bn_optimizer_lr(&o, 64), 0.0500002, 1e-15);
    CHECK_NEAR(bn_optimizer_lr(&o, 99), 4e-7, 1e-15);
    CHECK_NEAR(bn_optimizer_lr(&o, 150), 4e-7, 1e-15); /* past the run: its last rate */
    /* Other keys: from 0.1 / 10 up over the first half, down to 0.01 / 100. */
    CHECK_OK(bn_train_config_set(&o.cfg, "pct_start", 0.5));
    CHECK_OK(bn_train_config_set(&o.cfg, "div_factor", 10));
    CHECK_OK(bn_train_config_set(&o.cfg, "final_div_factor", 100));
    CHECK_NEAR(bn_optimizer_lr(&o, 0), 0.01, 1e-15);
    CHECK_NEAR(bn_optimizer_lr(&o, 49), 0.1, 1e-15);
    CHECK_NEAR(bn_optimizer_lr(&o, 99), 1e-4, 1e-15);
    /* A one-step first phase (pct_start * T = 1, where PyTorch would divide by zero) ends at lr. */
    o.max_iter = 10;
    CHECK_OK(bn_train_config_set(&o.cfg, "pct_start", 0.1));
    CHECK_NEAR(bn_optimizer_lr(&o, 0), 0.1, 1e-15);
    CHECK_NEAR(bn_optimizer_lr(&o, 1), 1e-4 + (0.1 - 1e-4) / 2 * (cos(pi / 9) + 1), 1e-15);
    /* The warmup scales it too. */
    o.cfg.warmup = 2;
    CHECK_NEAR(bn_optimizer_lr(&o, 0), 0.05, 1e-15);
    return BN_PASS;
}

/* The [train] section of a one-layer model with `keys` in it, built: 0 on success. */
static bn_status train_section(const char *keys, bn_net **out)
{
    char text[512];
    snprintf(text, sizeof text, "[input]\nchannels=1\nheight=2\nwidth=2\n[train]\n%s[dense]\noutputs=2\n", keys);
    return bn_net_from_text(text, "m.cfg", out);
}

/* Every entry's name is the one the name list gives, its keys' defaults lie in their ranges and
 * a model file can set each key; the rate a policy gives for that file is the one its entry
 * computes from the given values. */
BN_TEST(lr_policies_table_keys_are_read_from_the_model_file)
{
    CHECK(bn_lr_policy_count() >= 5 && strcmp(bn_lr_policy_at(0)->name, "fixed") == 0);
    for (int i = 0; i < bn_lr_policy_count(); i++) {
        const bn_lr_policy *p = bn_lr_policy_at(i);
        CHECK(strcmp(p->name, bn_lr_policy_names[i]) == 0 && bn_lr_policy_find(p->name) == i && p->formula);
        char keys[256];
        int used = snprintf(keys, sizeof keys, "lr_policy = %s\n", p->name);
        for (int k = 0; k < p->num_keys; k++) {
            const bn_train_key *key = &p->keys[k];
            CHECK_MSG(key->lo <= key->def && key->def <= key->hi, "%s: %s", p->name, key->name);
            /* a value inside the range that is not the default */
            double v = key->form == BN_KEY_INT ? key->lo + 1 : (key->def + key->lo) / 2;
            used += snprintf(keys + used, sizeof keys - (size_t)used, "%s = %.17g\n", key->name, v);
        }
        bn_net *net;
        CHECK_OK(train_section(keys, &net));
        CHECK(net->train.lr_policy == i && net->train.num_given == p->num_keys);
        for (int k = 0; k < p->num_keys; k++)
            CHECK_MSG(bn_train_key_value(&net->train, &p->keys[k]) != p->keys[k].def ||
                          p->keys[k].def == p->keys[k].lo,
                      "%s: %s kept its default", p->name, p->keys[k].name);
        bn_optimizer o = {0};
        o.cfg = net->train;
        o.max_iter = 100;
        CHECK(bn_optimizer_lr(&o, 7) == p->rate(&net->train, 7, 100));
        bn_net_free(net);
    }
    CHECK(bn_lr_policy_find("warp") == -1);
    return BN_PASS;
}

/* A key of another policy, an unknown key and an unknown policy are each one line naming the
 * place; the list of policies comes from the table. */
BN_TEST(lr_policies_bad_keys_are_refused_with_one_line)
{
    bn_net *net = NULL;
    CHECK_ERR(train_section("lr_policy = step\nlr_min = 0.1\n", &net), BN_ERR_USAGE,
              "m.cfg:7: [train] lr_min is a key of lr_policy cosine, not of lr_policy = step");
    CHECK(!strchr(bn_last_error(), '\n'));
    CHECK_ERR(train_section("power = 2\n", &net), BN_ERR_USAGE,
              "m.cfg:6: [train] power is a key of lr_policy inv");
    CHECK_ERR(train_section("lr_policy = step\nstepsize = 0\n", &net), BN_ERR_USAGE,
              "m.cfg:7: [train] stepsize = 0 is out of range [1, 2147483647]");
    CHECK_ERR(train_section("lr_policy = inv\npowr = 2\n", &net), BN_ERR_USAGE, "m.cfg:7: [train] unknown key 'powr'");
    char want[256] = "m.cfg:6: [train] lr_policy = 'warp' is not one of: ";
    for (int i = 0; bn_lr_policy_names[i]; i++)
        snprintf(want + strlen(want), sizeof want - strlen(want), "%s%s", i ? ", " : "", bn_lr_policy_names[i]);
    CHECK_ERR(train_section("lr_policy = warp\n", &net), BN_ERR_USAGE, want);
    CHECK(!strchr(bn_last_error(), '\n'));
    CHECK(net == NULL);
    return BN_PASS;
}
