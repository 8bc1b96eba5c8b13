/* test_conv_relu.c - ReLU layers fused into the epilogues of blobnet's convolution kernels on the
 * GPU (conv_relu.h): a convolution's forward kernel writes the output of the ReLU after it, and
 * its data pass the input gradient of the ReLU before it. Bit for bit what the ReLU's own passes
 * write, with each kernel family forced (a family that takes no ReLU leaves the ReLU its own
 * passes), a ReLU whose output is a slice of a channel join's included; and against the CPU. */
#include <stdio.h>
#include <string.h>

#include "conv2d/conv2d.h"
#include "conv2d/conv_family.h"
#include "core/net.h"
#include "gpu_testing.h"
#include "layer_testing.h"
#include "layers.h"
#include "testing.h"

/* 3x10x10 -> a (3x3) -> ra -> a2 (3x3: the halo kernels' data pass behind ra) -> ra2 -> b (1x1)
 * -> rb -> c (3x3 at stride 2: 8x5x5) -> rc, read by d (3x3) -> rd and by e (1x1) -> re, joined
 * (rd's and re's outputs slices of the join's) -> dense 5. rc has two readers, so its backward
 * pass stays its own; rd and re feed the join, so theirs too. Its data and weights lie on the
 * coarse grid (exact_convs): at 257 images a ReLU's channel holds 25,700 inputs, too many for a
 * shift of its bias to clear them all of zero by the tolerance, and one that falls on the other
 * side of zero on the GPU sends another gradient to the layers before it (seed 3 did so). */
static const layer_case chain = {
    "conv k3p1 x16, relu, k3p1 x16, relu, k1 x12, relu, k3s2p1 x8, relu, concat of (k3p1 x8, relu) and "
    "(k1 x4, relu), dense 5",
    "[input]\nchannels=3\nheight=10\nwidth=10\n"
    "[conv2d]\nname=a\nfilters=16\nsize=3\npad=1\ninit=he\n[relu]\nname=ra\n"
    "[conv2d]\nname=a2\nfilters=16\nsize=3\npad=1\ninit=he\n[relu]\nname=ra2\n"
    "[conv2d]\nname=b\nfilters=12\nsize=1\ninit=he\n[relu]\nname=rb\n"
    "[conv2d]\nname=c\nfilters=8\nsize=3\nstride=2\npad=1\ninit=he\n[relu]\nname=rc\n"
    "[conv2d]\nname=d\nfilters=8\nsize=3\npad=1\ninit=he\ninput=rc\n[relu]\nname=rd\n"
    "[conv2d]\nname=e\nfilters=4\nsize=1\ninit=he\ninput=rc\n[relu]\nname=re\n"
    "[concat]\nname=j\ninput=rd, re\n[dense]\noutputs=5\n[softmax_ce]\n",
    TOL_GEMM, 5, 0, 0, 0, 0, 1};

/* Gives every ReLU's passes back to the ReLU: the convolutions write only their own outputs and
 * input gradients, as before the fusion (the join's slices stay as they were decided). */
static void relus_apart(bn_net *net)
{
    for (int i = 0; i < net->num_layers; i++) {
        bn_layer *l = net->layers[i];
        if (strcmp(l->ops->type, "relu") == 0) l->gpu_fused = 0;
        if (strcmp(l->ops->type, "conv2d") != 0) continue;
        conv_priv *c = (conv_priv *)l->priv;
        c->relu_after = c->relu_before = NULL;
    }
}

/* One fused and one unfused net, one training step on the same data: every output, output
 * gradient and parameter gradient bit for bit the same (a join's slices through the join's own
 * blobs), at batches 64, 37, 3 and 257 (more blocks than a wave of some passes). With family
 * `family` forced where it takes a ReLU, layer `conv` must have run its data pass (and its forward
 * pass, where the family has one) by `runner` at batch 64, so that every epilogue it has was
 * exercised. */
static int fused_vs_apart(int family, const char *runner, const char *conv, bn_ctx *ctx)
{
    static const int capacities[] = {64, 64, 8, 257}, batches[] = {64, 37, 3, 257};
    bn_conv2d_gpu_force_own(family);
    for (int k = 0; k < 4; k++) {
        const uint64_t seed = lt_fresh_seed();
        bn_net *a, *b;
        CHECK_OK(bn_net_from_text(chain.text, chain.what, &a));
        CHECK_OK(bn_net_from_text(chain.text, chain.what, &b));
        CHECK_OK(bn_net_setup(a, capacities[k], ctx, 0, seed));
        CHECK_OK(bn_net_setup(b, capacities[k], ctx, 0, seed));
        static const char *const relus[] = {"ra", "ra2", "rb", "rc", "rd", "re"};
        const unsigned both = BN_FUSED_FORWARD | BN_FUSED_BACKWARD;
        const unsigned want[] = {both, both, both, BN_FUSED_FORWARD, BN_FUSED_FORWARD, BN_FUSED_FORWARD};
        for (int i = 0; i < 6; i++) {
            const unsigned got = bn_net_find_layer(a, relus[i])->gpu_fused;
            CHECK_MSG(got == want[i], "%s's fused passes: %u (want %u)", relus[i], got, want[i]);
        }
        relus_apart(b);
        CHECK_OK(bn_net_set_batch(a, batches[k]));
        CHECK_OK(bn_net_set_batch(b, batches[k]));
        CHECK_OK(gt_poison_net(a, ctx));
        CHECK_OK(gt_poison_net(b, ctx));
        CHECK_OK(gt_step_alike(a, b, &chain, seed));
        for (int i = 0; i < a->num_layers; i++) {
            bn_layer *la = a->layers[i], *lb = b->layers[i];
            if (!bn_blob_is_slice(la->out)) CHECK(gt_same_bits(la->out, lb->out, seed) == BN_PASS);
            if (la->out_grad && !bn_blob_is_slice(la->out_grad) && i + 1 < a->num_layers)
                CHECK(gt_same_bits(la->out_grad, lb->out_grad, seed) == BN_PASS);
            for (int p = 0; p < la->num_params; p++)
                CHECK(gt_same_bits(la->params[p].grad, lb->params[p].grad, seed) == BN_PASS);
        }
        if (conv && batches[k] == 64) {
            const bn_layer *l = bn_net_find_layer(a, conv);
            const int forward = family < 1 || ((bn_conv_families[family - 1]->serves >> BN_CONV_FORWARD) & 1);
            CHECK_MSG((!forward || gt_conv_runs(l, 64, "fwd", runner)) && gt_conv_runs(l, 64, "bwd_data", runner),
                      "layer %s did not run its passes by %s", conv, runner);
        }
        bn_net_free(a);
        bn_net_free(b);
    }
    return BN_PASS;
}

/* Fused and apart, bit for bit: with the normal choice, and with the implicit-GEMM kernels (b's
 * passes), the halo kernels (a2's), the FP32 tiles (a2's data pass) and the direct kernels (a2's
 * passes: a ReLU after them in their forward epilogue, the one before them in its own pass)
 * forced. The rule chooses for both nets (a deterministic context), so that both sum in the same
 * order. */
BN_TEST(gpu_conv2d_relu_fused_matches_apart_bitwise)
{
    if (bn_device_count() == 0) BN_SKIP_TEST("no CUDA device");
    bn_ctx *ctx;
    CHECK_OK(bn_ctx_open(0, &ctx));
    static const struct {
        int family;
        const char *runner, *conv;
    } forced[] = {{BN_CONV_FAMILY_ANY, NULL, NULL},
                  {BN_CONV_FAMILY_IGEMM, "blobnet igemm", "b"},
                  {BN_CONV_FAMILY_HALO, "blobnet halo", "a2"},
                  {BN_CONV_FAMILY_FMA, "blobnet fma", "a2"},
                  {BN_CONV_FAMILY_DIRECT, "blobnet direct", "a2"}};
    ctx->deterministic = 1;
    int r = BN_PASS;
    for (size_t f = 0; f < sizeof forced / sizeof forced[0] && r == BN_PASS; f++) {
        r = fused_vs_apart(forced[f].family, forced[f].runner, forced[f].conv, ctx);
        if (r != BN_PASS) printf("    family %d failed\n", forced[f].family);
    }
    bn_conv2d_gpu_force_own(BN_CONV_FAMILY_ANY);
    ctx->deterministic = 0;
    return r;
}

/* The fused net against the CPU at every test size, with the normal choice and with the
 * implicit-GEMM, halo, FP32 tile and direct kernels forced. */
BN_TEST(gpu_layer_conv2d_relu_fused_matches_cpu)
{
    if (bn_device_count() == 0) BN_SKIP_TEST("no CUDA device");
    static const int families[] = {BN_CONV_FAMILY_ANY, BN_CONV_FAMILY_IGEMM, BN_CONV_FAMILY_HALO,
                                   BN_CONV_FAMILY_FMA, BN_CONV_FAMILY_DIRECT};
    int r = BN_PASS;
    for (size_t f = 0; f < sizeof families / sizeof families[0] && r == BN_PASS; f++) {
        gt_forced_family = families[f];
        bn_conv2d_gpu_force_own(families[f]);
        r = gt_run_case(&chain);
    }
    gt_forced_family = BN_CONV_FAMILY_ANY;
    bn_conv2d_gpu_force_own(BN_CONV_FAMILY_ANY);
    return r;
}
