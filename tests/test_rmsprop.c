/* test_rmsprop.c - the rmsprop optimizer (core/optimizers/rmsprop.h) against steps worked by
 * hand in double in the order of torch.optim.RMSprop, plain, with momentum, centered and with
 * weight decay; its keys read from [train] and refused when out of range or under another
 * optimizer; its three state slabs through a checkpoint and back; its settings line. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/optimizers/optimizers.h"
#include "layer_testing.h"
#include "testing.h"
#include "train/checkpoint.h"
#include "train/optimizer.h"
#include "train/settings.h"

/* A dense layer 2 -> 1 (weights [w0, w1], bias b at twice the rate and without decay) trained by
 * rmsprop with the [train] keys given. */
static bn_status rmsprop_net(const char *keys, bn_net **net, bn_optimizer **o)
{
    char text[512];
    snprintf(text, sizeof text, "[input]\nchannels=2\nheight=1\nwidth=1\n[train]\noptimizer=rmsprop\nlr=0.01\n"
             "bias_lr_mult=2\n%s[dense]\noutputs=1\n", keys);
    BN_TRY(bn_net_from_text(text, "rms.cfg", net));
    BN_TRY(bn_net_setup(*net, 1, NULL, 0, 1));
    return bn_optimizer_create(*net, &(*net)->train, o);
}

/* One element of torch.optim.RMSprop's single-tensor step, in double. */
static void rmsprop_by_hand(double *w, double g, double s[3], double lr, double wd, double alpha, double mom,
                            int centered)
{
    g += wd * *w;
    s[0] = alpha * s[0] + (1 - alpha) * g * g;
    double avg;
    if (centered) {
        s[2] = s[2] + (1 - alpha) * (g - s[2]);
        avg = sqrt(s[0] - s[2] * s[2]) + 1e-8;
    } else {
        avg = sqrt(s[0]) + 1e-8;
    }
    if (mom > 0) {
        s[1] = mom * s[1] + g / avg;
        *w -= lr * s[1];
    } else {
        *w -= lr * g / avg;
    }
}

static const float START[3] = {1.0f, -2.0f, 0.5f};
static const float GRADS[3][3] = {{0.5f, 1.0f, -1.0f}, {-0.3f, 0.8f, 0.2f}, {0.1f, -0.4f, -0.6f}};

/* Three steps with keys against rmsprop_by_hand; step1: the weights after the first step as
 * worked out on paper. */
static int three_steps(const char *keys, double wd, double alpha, double mom, int centered, const double step1[3])
{
    bn_net *net;
    bn_optimizer *o;
    CHECK_OK(rmsprop_net(keys, &net, &o));
    CHECK(o->num_state == 3 && strcmp(o->state[0]->name, "square_avg") == 0 &&
          strcmp(o->state[1]->name, "momentum_buffer") == 0 && strcmp(o->state[2]->name, "grad_avg") == 0);
    const double rate[3] = {0.01, 0.01, 0.02}, decay[3] = {wd, wd, 0.0};
    double w[3], s[3][3] = {{0}};
    CHECK_OK(lt_write(net->params, START, 3));
    for (int i = 0; i < 3; i++) w[i] = START[i];
    for (int t = 0; t < 3; t++) {
        CHECK_OK(lt_write(net->grads, GRADS[t], 3));
        CHECK_OK(bn_optimizer_step(o, net));
        for (int i = 0; i < 3; i++) rmsprop_by_hand(&w[i], GRADS[t][i], s[i], rate[i], decay[i], alpha, mom, centered);
        const float *p = bn_blob_host_rd(net->params);
        for (int i = 0; i < 3; i++) {
            if (t == 0) CHECK_MSG(fabs(p[i] - step1[i]) <= 1e-6, "%s step 1: w[%d] = %.9g, on paper %.9g", keys, i,
                                  p[i], step1[i]);
            CHECK_MSG(fabs(p[i] - w[i]) <= 1e-6, "%s step %d: w[%d] = %.9g, by hand %.9g", keys, t + 1, i, p[i], w[i]);
            for (int k = 0; k < 3; k++) {
                float got = bn_blob_host_rd(o->state[k])[i];
                CHECK_MSG(fabs(got - s[i][k]) <= 1e-5 * fabs(s[i][k]) + 1e-12, "%s step %d: %s[%d] = %.9g, by hand %.9g",
                          keys, t + 1, o->state[k]->name, i, got, s[i][k]);
            }
        }
    }
    bn_optimizer_free(o);
    bn_net_free(net);
    return BN_PASS;
}

/* Plain, the defaults but alpha: the first step moves each element by rate * g / (sqrt(1 - alpha)
 * * |g|) = rate / sqrt(0.1) against the sign of g; momentum and centered slabs stay 0. */
BN_TEST(rmsprop_plain_matches_hand_worked_steps)
{
    const double r = 0.01 / sqrt(0.1);
    const double step1[3] = {1.0 - r, -2.0 - r, 0.5 + 2 * r};
    return three_steps("alpha=0.9\nweight_decay=0\n", 0.0, 0.9, 0.0, 0, step1);
}

/* Momentum 0.5: the first step is the plain one (the buffer starts at 0). */
BN_TEST(rmsprop_momentum_matches_hand_worked_steps)
{
    const double r = 0.01 / sqrt(0.01);
    const double step1[3] = {1.0 - r, -2.0 - r, 0.5 + 2 * r};
    return three_steps("momentum=0.5\nweight_decay=0\n", 0.0, 0.99, 0.5, 0, step1);
}

/* Centered, alpha 0.9: after one step ga = 0.1 g and sq = 0.1 g^2, so avg = sqrt(0.09) |g| and
 * each element moves by rate / 0.3. */
BN_TEST(rmsprop_centered_matches_hand_worked_steps)
{
    const double r = 0.01 / 0.3;
    const double step1[3] = {1.0 - r, -2.0 - r, 0.5 + 2 * r};
    return three_steps("alpha=0.9\ncentered=1\nweight_decay=0\n", 0.0, 0.9, 0.0, 1, step1);
}

/* Weight decay 0.1 goes into the gradient (not into the bias); with centered and momentum on
 * too, every slab moves. The first step is still rate / sqrt(1 - alpha) against the sign of the
 * decayed gradient (0.6, 0.8 and -1). */
BN_TEST(rmsprop_weight_decay_with_momentum_and_centered)
{
    const double r = 0.01 / sqrt(0.1 - 0.01);
    const double step1[3] = {1.0 - r, -2.0 - r, 0.5 + 2 * r};
    return three_steps("alpha=0.9\nmomentum=0.9\ncentered=1\nweight_decay=0.1\n", 0.1, 0.9, 0.9, 1, step1);
}

/* Its keys are read with their ranges, a key of another optimizer is refused, each error one
 * line naming the place. */
BN_TEST(rmsprop_bad_keys_are_refused_with_one_line)
{
    bn_net *net = NULL;
    bn_optimizer *o = NULL;
    CHECK_ERR(rmsprop_net("alpha=1.5\n", &net, &o), BN_ERR_USAGE, "rms.cfg:9: [train] alpha = 1.5 is out of range [0, 1]");
    CHECK(!strchr(bn_last_error(), '\n'));
    CHECK_ERR(rmsprop_net("centered=2\n", &net, &o), BN_ERR_USAGE, "rms.cfg:9: [train] centered = 2 is out of range [0, 1]");
    CHECK_ERR(rmsprop_net("centered=yes\n", &net, &o), BN_ERR_USAGE, "[train] centered = 'yes' is not an integer");
    CHECK_ERR(rmsprop_net("beta1=0.9\n", &net, &o), BN_ERR_USAGE,
              "rms.cfg:9: [train] beta1 is a key of optimizer adam, adamw, not of optimizer = rmsprop");
    CHECK(!strchr(bn_last_error(), '\n'));
    CHECK(net == NULL && o == NULL);
    return BN_PASS;
}

/* The settings line: the fixed keys, momentum at rmsprop's default 0, then its own keys. */
BN_TEST(rmsprop_settings_line_adds_its_own_keys)
{
    bn_train_config c = bn_train_config_defaults();
    c.optimizer = bn_optimizer_find("rmsprop");
    CHECK_OK(bn_train_config_set(&c, "centered", 1));
    bn_augment aug = {0};
    char line[BN_SETTINGS_MAX];
    bn_settings_format(&c, &aug, line);
    const char *want = "batch=64 epochs=10 optimizer=rmsprop lr=0.01 momentum=0 weight_decay=0.0005 beta1=0.9 "
                       "beta2=0.999 eps=1e-08 lr_policy=fixed gamma=0.0001 power=0.75 stepsize=10000 lr_min=0 "
                       "pct_start=0.3 div_factor=25 final_div_factor=10000 warmup=0 bias_lr_mult=1 alpha=0.99 "
                       "centered=1 shift=0 flip=0 pad=zero cutout=0";
    CHECK_MSG(strcmp(line, want) == 0, "got %s", line);
    return BN_PASS;
}

/* Its three slabs go into a checkpoint under their names and come back bit for bit: the loaded
 * run's next step is the saved run's. */
BN_TEST(rmsprop_checkpoint_round_trip_keeps_its_state)
{
    bn_net *a, *b;
    bn_optimizer *oa, *ob;
    const char *keys = "momentum=0.9\ncentered=1\n";
    CHECK_OK(rmsprop_net(keys, &a, &oa));
    CHECK_OK(rmsprop_net(keys, &b, &ob));
    CHECK_OK(lt_write(a->params, START, 3));
    for (int t = 0; t < 2; t++) {
        CHECK_OK(lt_write(a->grads, GRADS[t], 3));
        CHECK_OK(bn_optimizer_step(oa, a));
    }
    for (int k = 0; k < 3; k++) CHECK(bn_blob_host_rd(oa->state[k])[0] != 0.0f);
    char path[512];
    snprintf(path, sizeof path, "%s/rmsprop.safetensors", bn_test_tmpdir());
    bn_train_state st = {.seed = 1, .epoch = 0, .step = 2};
    CHECK_OK(bn_checkpoint_save(path, a, oa, &st));
    FILE *f = fopen(path, "rb");
    CHECK(f != NULL);
    char header[4096] = "";
    size_t got = fread(header, 1, sizeof header - 1, f);
    fclose(f);
    header[got] = '\0';
    CHECK(strstr(header + 8, "\"square_avg.dense1.weight\"") && strstr(header + 8, "\"momentum_buffer.dense1.bias\"") &&
          strstr(header + 8, "\"grad_avg.dense1.weight\"") && strstr(header + 8, "\"optimizer\":\"rmsprop\""));
    bn_train_state back;
    CHECK_OK(bn_checkpoint_load(path, b, ob, &back));
    CHECK(ob->iter == 2 && back.step == 2);
    for (int k = 0; k < 3; k++)
        CHECK(memcmp(bn_blob_host_rd(oa->state[k]), bn_blob_host_rd(ob->state[k]), 3 * sizeof(float)) == 0);
    CHECK_OK(lt_write(a->grads, GRADS[2], 3));
    CHECK_OK(lt_write(b->grads, GRADS[2], 3));
    CHECK_OK(bn_optimizer_step(oa, a));
    CHECK_OK(bn_optimizer_step(ob, b));
    CHECK(memcmp(bn_blob_host_rd(a->params), bn_blob_host_rd(b->params), 3 * sizeof(float)) == 0);
    bn_optimizer_free(oa);
    bn_optimizer_free(ob);
    bn_net_free(a);
    bn_net_free(b);
    return BN_PASS;
}
