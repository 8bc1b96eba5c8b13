/* test_conv_first.c - a first convolution's filter pass done by the next convolution's data pass
 * across the 2x2 max pooling between them (conv_first.h): LeNet's convolutions by the rule's
 * kernels against the CPU at every batch size of the GPU tests, and the fusion seen to run (the
 * first layer's plan names the data pass it ran in) at batches where the tensor cores take the
 * second layer's data pass. GPU; skipped without one. */
#include <stdio.h>
#include <string.h>

#include "conv2d/conv2d.h"
#include "core/net.h"
#include "gpu_testing.h"
#include "layer_testing.h"
#include "testing.h"

#define LENET_TEXT                                                                                                     \
    "[input]\nchannels=1\nheight=28\nwidth=28\n[conv2d]\nname=conv1\nfilters=20\nsize=5\n[maxpool]\nsize=2\n"        \
    "[conv2d]\nname=conv2\nfilters=50\nsize=5\n[maxpool]\nsize=2\n[dense]\noutputs=10\n[softmax_ce]\n"

/* Whether conv1's filter pass ran in conv2's data pass at batch n, in a fresh net's step. */
static int fused_at(bn_ctx *ctx, int n, int *fused)
{
    bn_net *net = NULL;
    CHECK_OK(bn_net_from_text(LENET_TEXT, "lenet probe", &net));
    CHECK_OK(bn_net_setup(net, n, ctx, 1, 1));
    CHECK_OK(bn_net_set_batch(net, n));
    CHECK_OK(bn_net_forward(net, 1));
    CHECK_OK(bn_net_backward(net));
    *fused = gt_conv_runs(net->layers[0], n, "bwd_filter", "in conv2's data pass");
    /* conv2's own filter pass is its own. */
    CHECK_MSG(!gt_conv_runs(net->layers[2], n, "bwd_filter", "in "), "batch %d: conv2's filter pass was moved", n);
    bn_net_free(net);
    return BN_PASS;
}

BN_TEST(gpu_layer_conv_filter_in_next_data_pass_matches_cpu)
{
    static const layer_case lenet = {"LeNet: conv 1x28x28 k5 x20, maxpool 2, conv k5 x50, maxpool 2, dense 10",
                                     LENET_TEXT, TOL_GEMM, 10, 0, 0, 0, 0, 0};
    if (bn_device_count() == 0) BN_SKIP_TEST("no CUDA device");
    CHECK(gt_run_case(&lenet) == BN_PASS);
    bn_ctx *ctx;
    CHECK_OK(bn_ctx_open(0, &ctx));
    int at64 = 0, at256 = 0;
    CHECK(fused_at(ctx, 64, &at64) == BN_PASS);
    CHECK(fused_at(ctx, 256, &at256) == BN_PASS);
    CHECK_MSG(at64 && at256, "conv1's filter pass ran in conv2's data pass at batch 64: %s, 256: %s", at64 ? "yes" : "no",
              at256 ? "yes" : "no");
    /* A family forced (the tests' switch) keeps every pass the layer's own. */
    bn_conv2d_gpu_force_own(BN_CONV_FAMILY_TENSOR);
    int forced = 0;
    const int r = fused_at(ctx, 64, &forced);
    bn_conv2d_gpu_force_own(BN_CONV_FAMILY_ANY);
    CHECK(r == BN_PASS);
    CHECK_MSG(!forced, "with the tensor family forced, conv1's filter pass still ran in conv2's");
    printf("    LeNet against the CPU at batches 1, 3, 64, 257, 37 of 64; conv1's filter pass in conv2's data pass at "
           "64 and 256\n");
    return BN_PASS;
}
