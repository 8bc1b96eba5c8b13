/* test_bf16_models.c - the suite's VGG-style and residual models set up under --precision bf16
 * and trained for a few steps on the GPU, against the same models in FP32 on the device. The
 * BF16 passes of each layer against FP32 are in its test_<layer>.c; test_bf16.c holds the
 * precision's blobs, setup, errors, trainings and checkpoints. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "bf16_testing.h"
#include "core/net.h"
#include "layer_testing.h"
#include "testing.h"
#include "train/optimizer.h"

/* Loss sum and parameter gradient of one forward and backward pass of the model file's network
 * at batch n on inputs and labels from seed, in the context's precision. The gradient slab is
 * copied into *grads (freed by the caller). */
static bn_status model_pass(const char *path, bn_ctx *ctx, int n, uint64_t seed, double *loss, float **grads,
                            bn_net **out)
{
    bn_net *net = NULL;
    BN_TRY(bn_net_from_file(path, &net));
    bn_status s = bn_net_setup(net, n, ctx, 0, 1);
    if (s == BN_OK) s = lt_fill_normal(net, seed, 1.0, 0.0);
    if (s == BN_OK) s = lt_fill_labels(net, seed + 1, 10);
    if (s == BN_OK) s = bn_net_zero_grad(net);
    if (s == BN_OK) s = bn_net_forward(net, 1);
    if (s == BN_OK) s = bn_net_backward(net);
    double correct = 0.0;
    if (s == BN_OK) s = bn_net_metrics(net, loss, &correct);
    if (s == BN_OK && !(*grads = gt_snapshot(net->grads))) s = bn_error(BN_ERR_NOMEM, "test: out of host memory");
    if (s != BN_OK) {
        bn_net_free(net);
        return s;
    }
    *out = net;
    return BN_OK;
}

/* Sets a suite model up under bf16 and compares one step's loss and parameter gradient with the
 * same model in FP32 on the device (same weights, data and labels). Ten or more layers of BF16
 * roundings, each about 3u, lie between the input and a first layer's gradient: the gradient is
 * held to 0.1 of its scale and the loss to 2e-2 of itself, which a layer that is wrong (O(1))
 * cannot meet. Then five optimizer steps on that batch under bf16 (the update writes the FP32
 * master and its BF16 copy) must lower its loss. */
static int model_runs_under_bf16(const char *path)
{
    if (bn_device_count() == 0) BN_SKIP_TEST("no CUDA device");
    bn_ctx *ctx;
    CHECK_OK(bn_ctx_open(0, &ctx));
    const int n = 32;
    const uint64_t seed = lt_fresh_seed();
    double loss32 = 0.0, loss16 = 0.0;
    float *g32 = NULL, *g16 = NULL;
    bn_net *net32 = NULL, *net16 = NULL;
    ctx->bf16 = 0;
    bn_status s = model_pass(path, ctx, n, seed, &loss32, &g32, &net32);
    ctx->bf16 = 1;
    if (s == BN_OK) s = model_pass(path, ctx, n, seed, &loss16, &g16, &net16);
    double d = s == BN_OK ? lt_rel_diff(g16, g32, NULL, net32->grads->capacity, &(size_t){0}) : 0.0;
    bn_optimizer *opt = NULL;
    double first = loss16, last = loss16, correct;
    if (s == BN_OK) s = bn_optimizer_create(net16, &net16->train, &opt);
    for (int step = 0; step < 5 && s == BN_OK; step++) {
        s = bn_optimizer_step(opt, net16);
        if (s == BN_OK) s = bn_net_zero_grad(net16);
        if (s == BN_OK) s = bn_net_forward(net16, 1);
        if (s == BN_OK) s = bn_net_backward(net16);
        if (s == BN_OK) s = bn_net_metrics(net16, &last, &correct);
    }
    ctx->bf16 = 0;
    if (opt) bn_optimizer_free(opt);
    bn_net_free(net32);
    bn_net_free(net16);
    free(g32);
    free(g16);
    CHECK_OK(s);
    printf("    %s at batch %d, bf16 against fp32 on the device: loss sum %.6g against %.6g, parameter gradient "
           "off by %.3g of its scale; 5 bf16 steps took the batch's loss sum from %.6g to %.6g\n",
           path, n, loss16, loss32, d, first, last);
    CHECK_MSG(isfinite(loss16) && fabs(loss16 - loss32) <= 2e-2 * fabs(loss32),
              "%s: loss sum %.9g under bf16, %.9g in fp32 (seed %llu)", path, loss16, loss32,
              (unsigned long long)seed);
    CHECK_MSG(d <= 0.1, "%s: the bf16 parameter gradient differs from fp32's by %.3g of its scale (seed %llu)", path,
              d, (unsigned long long)seed);
    CHECK_MSG(isfinite(last) && last < first, "%s: 5 bf16 steps on one batch took its loss sum from %.9g to %.9g",
              path, first, last);
    return BN_PASS;
}

/* The suite's VGG-style and residual models, each in turn. */
BN_TEST(gpu_bf16_suite_models_run)
{
    static const char *const models[] = {"models/vgg_fashion.cfg", "models/resnet_mini.cfg"};
    int r = BN_PASS;
    for (size_t i = 0; i < sizeof models / sizeof models[0] && r == BN_PASS; i++) r = model_runs_under_bf16(models[i]);
    return r;
}
