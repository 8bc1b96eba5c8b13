/* test_conv_lanes.c - convolutions whose passes run on cuDNN take the lanes of a network of
 * branches (core/net_lanes.c) as those on blobnet's own kernels do, in FP32 on cuDNN and under
 * --precision bf16 (every pass on cuDNN): each lane binds cuDNN's handle to its stream and has
 * workspaces of its own, as large as the context's (bn_ctx_set_lane). The context's own are
 * back when the lanes are left. That the branches compute on lanes what they compute in a chain
 * is test_gpu_graph.c's (a captured run against an eager one, bit for bit). */
#include <stdio.h>
#include <string.h>

#include "core/device.h"
#include "core/net.h"
#include "gpu_testing.h"
#include "testing.h"

#ifdef BN_WITH_CUDA
/* Two branches from the input, each a convolution on cuDNN, joined by a concat. */
static const char model[] = "[input]\nchannels=3\nheight=12\nwidth=12\n"
                            "[conv2d]\nname=a\nfilters=8\nsize=3\npad=1\ninit=he\nengine=cudnn\n"
                            "[conv2d]\nname=b\ninput=input\nfilters=8\nsize=3\npad=1\ninit=he\nengine=cudnn\n"
                            "[concat]\nname=ab\ninput=a, b\n";

/* Whether an eager forward pass of the model (in bf16 where `bf16`, else FP32 on cuDNN) plans its
 * two branches on different lanes, with the lanes made. */
static int branches_apart(bn_ctx *ctx, int bf16)
{
    const int was_bf16 = ctx->bf16, was_deterministic = ctx->deterministic;
    ctx->bf16 = bf16;
    ctx->deterministic = 1;
    bn_net *net = NULL;
    int r = BN_FAIL;
    bn_status s = bn_net_from_text(model, "conv lanes", &net);
    if (s == BN_OK) s = bn_net_setup(net, 16, ctx, 1, 7);
    if (s == BN_OK) s = bn_net_set_batch(net, 16);
    if (s == BN_OK) s = bn_blob_zero(net->input);
    if (s == BN_OK) s = bn_net_forward(net, 1);
    if (s != BN_OK) {
        printf("    %s: %s\n", bf16 ? "bf16" : "FP32", bn_last_error());
    } else if (!net->lane) {
        printf("    %s: the network planned no lanes\n", bf16 ? "bf16" : "FP32");
    } else {
        printf("    %s: a on lane %d, b on lane %d, %d lanes made\n", bf16 ? "bf16" : "FP32", net->lane[0],
               net->lane[1], ctx->num_lanes);
        if (net->lane[0] != net->lane[1] && ctx->num_lanes >= 2) r = BN_PASS;
    }
    bn_net_free(net);
    ctx->bf16 = was_bf16;
    ctx->deterministic = was_deterministic;
    return r;
}
#endif

BN_TEST(gpu_conv2d_on_cudnn_runs_its_branches_on_lanes)
{
    if (bn_device_count() == 0) BN_SKIP_TEST("no CUDA device");
#ifdef BN_WITH_CUDA
    bn_ctx *ctx;
    CHECK_OK(bn_ctx_open(0, &ctx));
    CHECK(branches_apart(ctx, 0) == BN_PASS);
    CHECK(branches_apart(ctx, 1) == BN_PASS);
#endif
    return BN_PASS;
}

BN_TEST(gpu_lanes_have_workspaces_of_their_own_as_large_as_the_contexts)
{
    if (bn_device_count() == 0) BN_SKIP_TEST("no CUDA device");
#ifdef BN_WITH_CUDA
    bn_ctx *ctx;
    CHECK_OK(bn_ctx_open(0, &ctx));
    CHECK_OK(bn_ctx_reserve_workspace(ctx, 1 << 16));
    CHECK_OK(bn_ctx_reserve_side_workspace(ctx, 1 << 15));
    CHECK_OK(bn_ctx_open_lanes(ctx, 3));
    CHECK(ctx->num_lanes >= 3);
    /* Grown after the lanes were made: theirs grow too. */
    const size_t main_size = ctx->workspace_size + 4096, side_size = ctx->side_workspace_size + 4096;
    CHECK_OK(bn_ctx_reserve_workspace(ctx, main_size));
    CHECK_OK(bn_ctx_reserve_side_workspace(ctx, side_size));
    void *home = ctx->workspace, *home_side = ctx->side_workspace, *stream = ctx->stream;
    void *seen[3] = {home, NULL, NULL};
    for (int k = 1; k < 3; k++) {
        CHECK_OK(bn_ctx_set_lane(ctx, k));
        CHECK(ctx->stream == ctx->lanes[k] && ctx->side_stream == ctx->lane_sides[k]);
        CHECK(ctx->workspace && ctx->side_workspace);
        CHECK(ctx->workspace_size >= main_size && ctx->side_workspace_size >= side_size);
        CHECK(ctx->workspace != home && ctx->side_workspace != home_side && ctx->workspace != ctx->side_workspace);
        for (int j = 0; j < k; j++) CHECK(ctx->workspace != seen[j]);
        seen[k] = ctx->workspace;
    }
    /* Back to lane 1: the same buffers as before. */
    CHECK_OK(bn_ctx_set_lane(ctx, 1));
    CHECK(ctx->workspace == seen[1]);
    bn_ctx_leave_lanes(ctx);
    CHECK(ctx->stream == stream && ctx->workspace == home && ctx->side_workspace == home_side);
    CHECK(ctx->workspace_size >= main_size && ctx->side_workspace_size >= side_size);
#endif
    return BN_PASS;
}
