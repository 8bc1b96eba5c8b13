/* test_optimizer.c - the optimizers against hand-worked values: SGD, Adam and AdamW steps with
 * per-parameter multipliers; the table: every entry's CPU update is its own rule, its state
 * slabs are its names, its keys are read from [train] and a key of another optimizer is refused;
 * on a device, every entry's GPU updates (one kernel over the slab, and per layer on the side
 * stream reading rates from the device's schedule) against the CPU's. The learning-rate
 * policies are in test_lr_policies.c. */
#include <math.h>
#include <stdlib.h>

#include "core/device.h"
#include "core/optimizers/optimizers.h"
#include "layer_testing.h"
#include "testing.h"
#include "train/optimizer.h"

/* A dense layer 2 -> 1: weight [w0, w1] (lr_mult 1, decay 1) and bias b (bias multipliers). */
#define TINY "[input]\nchannels=2\nheight=1\nwidth=1\n[train]\nbias_lr_mult=2\n[dense]\noutputs=1\n"

BN_TEST(optimizer_momentum_decay_and_bias_multipliers)
{
    bn_net *net;
    CHECK_OK(bn_net_from_text(TINY, "opt.cfg", &net));
    CHECK_OK(bn_net_setup(net, 1, NULL, 0, 1));
    bn_train_config cfg = bn_train_config_defaults();
    cfg.lr = 0.1;
    CHECK_OK(bn_train_config_set(&cfg, "momentum", 0.9));
    cfg.weight_decay = 0.01;
    bn_optimizer *o;
    CHECK_OK(bn_optimizer_create(net, &cfg, &o));
    CHECK(o->num_state == 1 && strcmp(o->state[0]->name, "momentum") == 0);
    float *w = bn_blob_host_wr(net->params);
    w[0] = 1.0f, w[1] = -2.0f, w[2] = 0.5f;
    float *g = bn_blob_host_wr(net->grads);
    g[0] = 0.5f, g[1] = 1.0f, g[2] = -1.0f;
    CHECK_OK(bn_optimizer_step(o, net));
    /* v = 0.1*(g + 0.01*w) for weights, v = 0.2*g for the bias (no decay); w -= v */
    const float *p = bn_blob_host_rd(net->params);
    CHECK_NEAR(p[0], 1.0 - 0.1 * (0.5 + 0.01), 1e-6);
    CHECK_NEAR(p[1], -2.0 - 0.1 * (1.0 - 0.02), 1e-6);
    CHECK_NEAR(p[2], 0.5 + 0.2, 1e-6);
    /* Second step with the same gradient: v2 = 0.9*v1 + lr*(g + wd*w1). */
    double v0 = 0.1 * (0.5 + 0.01), w0 = 1.0 - v0;
    double v0b = 0.9 * v0 + 0.1 * (0.5 + 0.01 * w0);
    CHECK_OK(bn_optimizer_step(o, net));
    CHECK_NEAR(bn_blob_host_rd(net->params)[0], w0 - v0b, 1e-6);
    CHECK(o->iter == 2);
    CHECK(o->num_segments == 2);
    bn_optimizer_free(o);
    bn_net_free(net);
    return BN_PASS;
}

/* The update rules as written in the documentation, in double: one Adam (decoupled = 0) or
 * AdamW element at step t, betas 0.9 and 0.999, eps 1e-8. */
static void adam_by_hand(double *w, double g, double *m, double *v, double lr, double wd, int t, int decoupled)
{
    if (decoupled) *w *= 1.0 - lr * wd;
    else g += wd * *w;
    *m = 0.9 * *m + 0.1 * g;
    *v = 0.999 * *v + 0.001 * g * g;
    double mhat = *m / (1.0 - pow(0.9, t)), vhat = *v / (1.0 - pow(0.999, t));
    *w -= lr * mhat / (sqrt(vhat) + 1e-8);
}

/* Three steps of kind on TINY with a new gradient each step, against adam_by_hand: the bias
 * takes twice the rate and no decay. The first step is also worked out in full: Adam's first
 * step moves each element by its rate against the sign of its (decayed) gradient. */
static int adam_three_steps(const char *kind)
{
    bn_net *net;
    CHECK_OK(bn_net_from_text(TINY, "opt.cfg", &net));
    CHECK_OK(bn_net_setup(net, 1, NULL, 0, 1));
    bn_train_config cfg = bn_train_config_defaults();
    cfg.optimizer = bn_optimizer_find(kind);
    cfg.lr = 0.1;
    cfg.weight_decay = 0.1;
    const int decoupled = strcmp(kind, "adamw") == 0;
    bn_optimizer *o;
    CHECK_OK(bn_optimizer_create(net, &cfg, &o));
    CHECK(o->num_state == 2 && strcmp(o->state[0]->name, "exp_avg") == 0 &&
          strcmp(o->state[1]->name, "exp_avg_sq") == 0);
    const float start[3] = {1.0f, -2.0f, 0.5f};
    const float grads[3][3] = {{0.5f, 1.0f, -1.0f}, {-0.3f, 0.8f, 0.2f}, {0.1f, -0.4f, -0.6f}};
    const double rate[3] = {0.1, 0.1, 0.2}, decay[3] = {0.1, 0.1, 0.0};
    double w[3], m[3] = {0}, v[3] = {0};
    CHECK_OK(lt_write(net->params, start, 3));
    for (int i = 0; i < 3; i++) w[i] = start[i];
    for (int t = 1; t <= 3; t++) {
        CHECK_OK(lt_write(net->grads, grads[t - 1], 3));
        CHECK_OK(bn_optimizer_step(o, net));
        for (int i = 0; i < 3; i++) adam_by_hand(&w[i], grads[t - 1][i], &m[i], &v[i], rate[i], decay[i], t,
                                                 decoupled);
        const float *p = bn_blob_host_rd(net->params), *pm = bn_blob_host_rd(o->state[0]),
                    *pv = bn_blob_host_rd(o->state[1]);
        if (t == 1) {
            /* adam: g + 0.1 w = 0.6, 0.8 and -1 (bias, no decay); adamw: w * (1 - 0.01) first */
            double shrink = decoupled ? 0.99 : 1.0;
            CHECK_NEAR(p[0], 1.0 * shrink - 0.1, 1e-6);
            CHECK_NEAR(p[1], -2.0 * shrink - 0.1, 1e-6);
            CHECK_NEAR(p[2], 0.5 + 0.2, 1e-6);
        }
        for (int i = 0; i < 3; i++) {
            CHECK_MSG(fabs(p[i] - w[i]) <= 1e-6, "%s step %d: w[%d] = %.9g, by hand %.9g", kind,
                      t, i, p[i], w[i]);
            CHECK_MSG(fabs(pm[i] - m[i]) <= 1e-6 * fabs(m[i]), "step %d: m[%d] = %.9g, by hand %.9g", t, i, pm[i],
                      m[i]);
            CHECK_MSG(fabs(pv[i] - v[i]) <= 1e-6 * v[i], "step %d: v[%d] = %.9g, by hand %.9g", t, i, pv[i], v[i]);
        }
    }
    CHECK(o->iter == 3 && o->num_segments == 2);
    bn_optimizer_free(o);
    bn_net_free(net);
    return BN_PASS;
}

BN_TEST(optimizer_adam_matches_hand_worked_steps)
{
    return adam_three_steps("adam");
}

BN_TEST(optimizer_adamw_matches_hand_worked_steps)
{
    return adam_three_steps("adamw");
}

/* Step t = iter + 1's bias corrections, in the table a GPU schedule uploads. */
BN_TEST(optimizer_rates_carry_the_bias_corrections)
{
    bn_optimizer o = {0};
    o.cfg = bn_train_config_defaults();
    o.cfg.optimizer = bn_optimizer_find("adam");
    o.cfg.warmup = 4;
    bn_step_rates r = bn_optimizer_rates(&o, 0);
    CHECK(r.lr == (float)0.0025 && r.per_step[0] == (float)0.1 && r.per_step[1] == (float)sqrt(0.001));
    r = bn_optimizer_rates(&o, 2);
    CHECK(r.lr == (float)0.0075 && r.per_step[0] == (float)(1 - 0.729) &&
          r.per_step[1] == (float)sqrt(1 - pow(0.999, 3)));
    /* SGD needs nothing per step. */
    o.cfg.optimizer = bn_optimizer_find("sgd");
    r = bn_optimizer_rates(&o, 2);
    CHECK(r.lr == (float)0.0075 && r.per_step[0] == 0.0f && r.per_step[1] == 0.0f);
    return BN_PASS;
}

/* ---- the table ---- */

typedef void (*rule_fn)(float *w, float g, float *s, float rate, float decay, bn_step_rates r, bn_rule_consts k);
#define RULE(name) bn_##name##_rule,
static const rule_fn rules[] = {BN_OPTIMIZERS(RULE)};

/* Every entry of the table: its name is the name list's, its state slabs are created under its
 * names (with room in a checkpoint's tensor names), and two CPU steps give, bit for bit, what
 * its own rule gives element by element, with the entry's constants and per-step values. */
BN_TEST(optimizer_table_dispatches_each_entry_to_its_rule)
{
    CHECK(bn_optimizer_type_count() == (int)(sizeof rules / sizeof rules[0]));
    CHECK(strcmp(bn_optimizer_type_at(0)->name, "sgd") == 0 && bn_optimizer_find("lion") == -1);
    const float grads[2][3] = {{0.5f, 1.0f, -1.0f}, {-0.3f, 0.8f, 0.2f}};
    for (int i = 0; i < bn_optimizer_type_count(); i++) {
        const bn_optimizer_type *t = bn_optimizer_type_at(i);
        CHECK(strcmp(t->name, bn_optimizer_names[i]) == 0 && bn_optimizer_find(t->name) == i && t->rule);
        bn_net *net;
        CHECK_OK(bn_net_from_text(TINY, "opt.cfg", &net));
        CHECK_OK(bn_net_setup(net, 1, NULL, 0, 1));
        bn_train_config cfg = bn_train_config_defaults();
        cfg.optimizer = i;
        cfg.lr = 0.1;
        cfg.weight_decay = 0.01;
        bn_optimizer *o;
        CHECK_OK(bn_optimizer_create(net, &cfg, &o));
        CHECK(o->num_state == t->num_state && t->num_state <= BN_OPTIMIZER_MAX_STATE);
        for (int k = 0; k < t->num_state; k++)
            CHECK(strcmp(o->state[k]->name, t->state[k]) == 0 && strlen(t->state[k]) <= 15);
        float w[3] = {1.0f, -2.0f, 0.5f}, st[3][BN_OPTIMIZER_MAX_STATE] = {{0}};
        const float lr_mult[3] = {1.0f, 1.0f, 2.0f}, decay_mult[3] = {1.0f, 1.0f, 0.0f}, wd = (float)cfg.weight_decay;
        CHECK_OK(lt_write(net->params, w, 3));
        const bn_rule_consts k = t->consts(&cfg);
        for (int step = 0; step < 2; step++) {
            CHECK_OK(lt_write(net->grads, grads[step], 3));
            bn_step_rates r = bn_optimizer_rates(o, step);
            CHECK_OK(bn_optimizer_step(o, net));
            for (int e = 0; e < 3; e++)
                rules[i](&w[e], grads[step][e], st[e], r.lr * lr_mult[e], wd * decay_mult[e], r, k);
            const float *p = bn_blob_host_rd(net->params);
            for (int e = 0; e < 3; e++) {
                CHECK_MSG(p[e] == w[e], "%s step %d: w[%d] = %.9g, its rule gives %.9g", t->name, step, e, p[e], w[e]);
                for (int j = 0; j < t->num_state; j++) CHECK(bn_blob_host_rd(o->state[j])[e] == st[e][j]);
            }
        }
        bn_optimizer_free(o);
        bn_net_free(net);
    }
    return BN_PASS;
}

/* The [train] section of TINY's input and one dense layer with `keys`; *out on success. */
static bn_status train_section(const char *keys, bn_net **out)
{
    char text[512];
    snprintf(text, sizeof text, "[input]\nchannels=2\nheight=1\nwidth=1\n[train]\n%s[dense]\noutputs=1\n", keys);
    return bn_net_from_text(text, "m.cfg", out);
}

/* Each optimizer's keys are read when the model file names it, within their ranges. */
BN_TEST(optimizer_table_keys_are_read_from_the_model_file)
{
    for (int i = 0; i < bn_optimizer_type_count(); i++) {
        const bn_optimizer_type *t = bn_optimizer_type_at(i);
        char keys[256];
        int used = snprintf(keys, sizeof keys, "optimizer = %s\n", t->name);
        for (int k = 0; k < t->num_keys; k++) {
            const bn_train_key *key = &t->keys[k];
            CHECK_MSG(key->lo <= key->def && key->def <= key->hi, "%s: %s", t->name, key->name);
            double v = key->form == BN_KEY_INT ? key->hi : (key->lo + key->hi) / 4;
            used += snprintf(keys + used, sizeof keys - (size_t)used, "%s = %.17g\n", key->name, v);
        }
        bn_net *net;
        CHECK_OK(train_section(keys, &net));
        CHECK(net->train.optimizer == i && net->train.num_given == t->num_keys);
        for (int k = 0; k < t->num_keys; k++) {
            const bn_train_key *key = &t->keys[k];
            double v = key->form == BN_KEY_INT ? key->hi : (key->lo + key->hi) / 4;
            CHECK_MSG(bn_train_key_value(&net->train, key) == v, "%s: %s", t->name, key->name);
        }
        bn_net_free(net);
    }
    return BN_PASS;
}

/* A key of another optimizer, a value out of range and an unknown optimizer are each one line
 * naming the place; the list of optimizers comes from the table. */
BN_TEST(optimizer_bad_keys_are_refused_with_one_line)
{
    bn_net *net = NULL;
    CHECK_ERR(train_section("beta1 = 0.8\n", &net), BN_ERR_USAGE,
              "m.cfg:6: [train] beta1 is a key of optimizer adam, adamw, not of optimizer = sgd");
    CHECK(!strchr(bn_last_error(), '\n'));
    CHECK_ERR(train_section("optimizer = adam\nmomentum = 0.5\n", &net), BN_ERR_USAGE,
              "m.cfg:7: [train] momentum is a key of optimizer sgd");
    CHECK_ERR(train_section("optimizer = adam\nbeta2 = 1\n", &net), BN_ERR_USAGE,
              "m.cfg:7: [train] beta2 = 1 is out of range [0, 1)");
    char want[256] = "m.cfg:6: [train] optimizer = 'lion' is not one of: ";
    for (int i = 0; bn_optimizer_names[i]; i++)
        snprintf(want + strlen(want), sizeof want - strlen(want), "%s%s", i ? ", " : "", bn_optimizer_names[i]);
    CHECK_ERR(train_section("optimizer = lion\n", &net), BN_ERR_USAGE, want);
    CHECK(!strchr(bn_last_error(), '\n'));
    CHECK(net == NULL);
    return BN_PASS;
}

/* ---- on the device ---- */

/* Layers with and without parameters, biases at twice the rate and without decay. */
static const char *const GPU_MODEL = "[input]\nchannels=1\nheight=8\nwidth=8\n[train]\nbias_lr_mult=2\n"
                                     "[conv2d]\nfilters=3\nsize=3\n[relu]\n[dense]\noutputs=16\n[tanh]\n"
                                     "[dense]\noutputs=4\n[softmax_ce]\n";

/* The same FP32 rule on both sides, but nvcc fuses multiply-adds that the CPU rounds twice: an
 * update comes out an ulp of itself apart, which now and then moves the weight by an ulp of the
 * weight (below 6e-8 for weights below 1). With lr 0.1 the largest update of a step is 1e-3 or
 * more, so these differences stay far under 1e-3 of it, where a wrong rate or bias correction
 * is tens of percent off; the running state differs by a few ulps of itself. */
#define UPDATE_TOL 1e-3
#define STATE_TOL 1e-5

/* Five layers with parameters, ten segments of multipliers: more than an update carries in its
 * arguments (BN_UPDATE_NEAR_SEGS), so one over the slab finds them in the device's table. */
static const char *const GPU_MODEL_DEEP = "[input]\nchannels=1\nheight=8\nwidth=8\n[train]\nbias_lr_mult=2\n"
                                          "[conv2d]\nfilters=3\nsize=3\n[relu]\n[dense]\noutputs=16\n[tanh]\n"
                                          "[dense]\noutputs=12\n[tanh]\n[dense]\noutputs=8\n[tanh]\n"
                                          "[dense]\noutputs=4\n[softmax_ce]\n";

/* GPU_MODEL with a hidden layer of 108 x 640 + 640 weights: an update too large to be held. */
static const char *const GPU_MODEL_WIDE = "[input]\nchannels=1\nheight=8\nwidth=8\n[train]\nbias_lr_mult=2\n"
                                          "[conv2d]\nfilters=3\nsize=3\n[relu]\n[dense]\noutputs=640\n[tanh]\n"
                                          "[dense]\noutputs=4\n[softmax_ce]\n";

/* What layered_update saw in a step: the context's side forks after the last update, and how many
 * layers' updates were held for the next layer's. */
static unsigned forks_seen;
static int layers_held;

/* bn_optimizer_update_layer, checking its holding: a layer's update waits for the next layer's
 * exactly when its backward pass forked the side stream, the next layer's did not in an earlier
 * step, no update waits already, and it is under 65,536 elements. */
static bn_status layered_update(void *opt, bn_net *net, bn_layer *l)
{
    bn_optimizer *o = opt;
    const int beside = net->pass.ctx->side_forks != forks_seen, was_held = o->held;
    BN_TRY(bn_optimizer_update_layer(o, net, l));
    forks_seen = net->pass.ctx->side_forks;
    if (!l->num_params) return BN_OK;
    int next = -1;
    for (int j = 0; j < l->index; j++)
        if (net->layers[j]->num_params) next = j;
    const size_t count = bn_layer_param_count(l);
    const int want = beside && next >= 0 && o->layer_side[next] == BN_SIDE_NEVER && !was_held && count < 65536;
    if (o->held != want)
        return bn_error(BN_ERR_INTERNAL, "layer %s (%zu weights, %s the side stream): update %s", l->name, count,
                        beside ? "on" : "off", o->held ? "held" : "launched");
    layers_held += o->held;
    return BN_OK;
}

/* Whether a's slab is within tol of b's, relative to what b moved from base (NULL: from 0). */
static int slab_close(const char *what, int step, bn_blob *a, bn_blob *b, const float *base, double tol)
{
    size_t n = bn_blob_count(b), where;
    float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
    CHECK(x && y);
    CHECK_OK(lt_read(a, x, n));
    CHECK_OK(lt_read(b, y, n));
    double d = lt_rel_diff(x, y, base, n, &where);
    CHECK_MSG(d <= tol, "step %d: %s differs by %.3g relative (tolerance %g) at element %zu: gpu %.9g, cpu %.9g",
              step, what, d, tol, where, x[where], y[where]);
    free(x);
    free(y);
    return BN_PASS;
}

/* Three training steps of kind on the GPU against the CPU's update from the GPU's gradients.
 * layered: the update runs per layer on the side stream during the backward pass (a small one
 * held back for the next layer's), reading its rates from a schedule on the device (a warmup
 * makes each step's rate differ, so a cursor that did not move would show); otherwise one kernel
 * over the slab after it, taking its rates from the host. */
static int gpu_update_matches_cpu(int kind, int layered, const char *model)
{
    uint64_t seed = lt_fresh_seed();
    bn_ctx *ctx;
    CHECK_OK(bn_ctx_open(0, &ctx));
    bn_net *gpu, *cpu;
    CHECK_OK(bn_net_from_text(model, "gpu-opt", &gpu));
    CHECK_OK(bn_net_from_text(model, "gpu-opt", &cpu));
    CHECK_OK(bn_net_setup(gpu, 6, ctx, 0, seed));
    CHECK_OK(bn_net_setup(cpu, 6, NULL, 0, seed));
    bn_train_config cfg = gpu->train;
    cfg.optimizer = kind;
    cfg.lr = 0.1;
    cfg.weight_decay = 0.01;
    cfg.warmup = 3;
    bn_optimizer *go, *co;
    CHECK_OK(bn_optimizer_create(gpu, &cfg, &go));
    CHECK_OK(bn_optimizer_create(cpu, &cfg, &co));
    if (model == GPU_MODEL_DEEP)
        CHECK_MSG(go->num_segments > BN_UPDATE_NEAR_SEGS, "%d segments: the device's table is not read",
                  go->num_segments);
    size_t n = gpu->num_params;
    float *buf = malloc(n * sizeof *buf), *before = malloc(n * sizeof *before);
    CHECK(buf && before);
    CHECK_OK(lt_read(gpu->params, buf, n));
    CHECK_OK(lt_write(cpu->params, buf, n));
    CHECK_OK(lt_fill_normal(gpu, seed, 1.0, 0.0));
    CHECK_OK(lt_fill_labels(gpu, seed, 4));
    if (layered) CHECK_OK(bn_optimizer_schedule(go, gpu, 0, 3));
    for (int step = 1; step <= 3; step++) {
        CHECK_OK(lt_read(cpu->params, before, n));
        CHECK_OK(bn_net_zero_grad(gpu));
        CHECK_OK(bn_optimizer_begin_step(go, gpu));
        CHECK_OK(bn_net_forward(gpu, 1));
        if (layered) {
            forks_seen = go->forks_seen, layers_held = 0;
            CHECK_OK(bn_net_backward_each(gpu, layered_update, go));
            CHECK_MSG(!go->held, "step %d: an update still held after the first layer's", step);
            CHECK_OK(bn_optimizer_end_layered_step(go, gpu));
        } else {
            CHECK_OK(bn_net_backward(gpu));
            CHECK_OK(bn_optimizer_step(go, gpu));
        }
        CHECK_OK(lt_read(gpu->grads, buf, n));
        CHECK_OK(lt_write(cpu->grads, buf, n));
        CHECK_OK(bn_optimizer_step(co, cpu));
        CHECK(slab_close("the weights", step, gpu->params, cpu->params, before, UPDATE_TOL) == BN_PASS);
        for (int k = 0; k < co->num_state; k++)
            CHECK(slab_close(co->state[k]->name, step, go->state[k], co->state[k], NULL, STATE_TOL) == BN_PASS);
    }
    printf("    %s, %s: 3 steps agree with the CPU's\n", bn_optimizer_names[kind],
           !layered ? "one kernel over the slab"
           : layers_held ? "per layer on the side stream (one held for the next), scheduled rates"
                         : "per layer on the side stream (none held), scheduled rates");
    free(buf);
    free(before);
    bn_optimizer_free(go);
    bn_optimizer_free(co);
    bn_net_free(gpu);
    bn_net_free(cpu);
    return BN_PASS;
}

BN_TEST(gpu_optimizer_slab_updates_match_cpu)
{
    if (bn_device_count() == 0) BN_SKIP_TEST("no CUDA device");
    for (int kind = 0; kind < bn_optimizer_type_count(); kind++) {
        CHECK(gpu_update_matches_cpu(kind, 0, GPU_MODEL) == BN_PASS);
        CHECK(gpu_update_matches_cpu(kind, 0, GPU_MODEL_DEEP) == BN_PASS);
    }
    return BN_PASS;
}

BN_TEST(gpu_optimizer_layered_updates_match_cpu)
{
    if (bn_device_count() == 0) BN_SKIP_TEST("no CUDA device");
    for (int kind = 0; kind < bn_optimizer_type_count(); kind++)
        CHECK(gpu_update_matches_cpu(kind, 1, GPU_MODEL) == BN_PASS);
    CHECK(gpu_update_matches_cpu(0, 1, GPU_MODEL_WIDE) == BN_PASS);
    return BN_PASS;
}
