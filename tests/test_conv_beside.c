/* test_conv_beside.c - a convolution with an input gradient runs cuDNN's filter pass on the side
 * stream beside its data pass, on a workspace of its own (bn_ctx_on_side): under --precision
 * bf16 in each of cuDNN's two layouts (conv_bf16_passes.cu), and in FP32 and TF32 where the layer
 * runs on cuDNN (conv2d.cu). A backward pass forks the side stream once for each such layer, and
 * its gradients (the weights' and every layer's input gradient) are the same bits as those of the
 * same passes run one after the other on the stream, which a context without a side stream does.
 * A deterministic context makes both networks choose the same algorithms. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conv2d/conv_bf16.h"
#include "core/device.h"
#include "core/net.h"
#include "core/rng.h"
#include "gpu_testing.h"
#include "layer_testing.h"
#include "testing.h"

#ifdef BN_WITH_CUDA /* the BF16 passes exist only in a CUDA build */
/* 3x12x12 -> 8x12x12 -> 16x6x6 (stride 2) -> 4x6x6 (NHWC pads 3 and 4 channels to 8), the
 * network's input gradient asked for: each of the three has an input gradient. */
static const char model[] = "[input]\nchannels=3\nheight=12\nwidth=12\n"
                            "[conv2d]\nfilters=8\nsize=3\npad=1\ninit=he\n"
                            "[conv2d]\nfilters=16\nsize=3\nstride=2\npad=1\ninit=he\n"
                            "[conv2d]\nfilters=4\nsize=3\npad=1\ninit=he\n";
/* The same network on cuDNN's FP32 passes (its legacy algorithms, as a deterministic context
 * takes them). */
static const char model_cudnn[] = "[input]\nchannels=3\nheight=12\nwidth=12\n"
                                  "[conv2d]\nfilters=8\nsize=3\npad=1\ninit=he\nengine=cudnn\n"
                                  "[conv2d]\nfilters=16\nsize=3\nstride=2\npad=1\ninit=he\nengine=cudnn\n"
                                  "[conv2d]\nfilters=4\nsize=3\npad=1\ninit=he\nengine=cudnn\n";

#define BATCH 24

/* b's whole capacity filled with uniform values of [-1, 1) from r. */
static bn_status fill(bn_blob *b, bn_rng *r)
{
    float *v = malloc(b->capacity * sizeof *v);
    if (!v) return bn_error(BN_ERR_NOMEM, "test: out of host memory");
    for (size_t i = 0; i < b->capacity; i++) v[i] = (float)(2.0 * bn_rng_uniform(r) - 1.0);
    bn_status s = gt_put(b, v);
    free(v);
    return s;
}

/* Whether a and b's host copies hold the same bits over their whole capacity. */
static int same_bits(bn_blob *a, bn_blob *b)
{
    const float *x = bn_blob_host_rd(a), *y = bn_blob_host_rd(b);
    return x && y && a->capacity == b->capacity && memcmp(x, y, a->capacity * sizeof *x) == 0;
}

/* One network's (from text) forward and backward pass on ctx from the given input and output
 * gradient, with the side stream taken away for it where `inline_only`; *forks: the side stream's
 * forks it made. */
static int run_net(bn_ctx *ctx, const char *text, uint64_t seed, int inline_only, bn_net **out, unsigned *forks)
{
    bn_net *net = NULL;
    CHECK_OK(bn_net_from_text(text, "conv beside", &net));
    *out = net;
    CHECK_OK(bn_net_setup(net, BATCH, ctx, 1, seed));
    CHECK_OK(bn_net_set_batch(net, BATCH));
    bn_rng r;
    bn_rng_seed(&r, seed, 5);
    CHECK_OK(fill(net->input, &r));
    CHECK_OK(fill(net->layers[net->num_layers - 1]->out_grad, &r));
    CHECK_OK(bn_blob_zero(net->grads));
    void *side = ctx->side_stream;
    if (inline_only) ctx->side_stream = NULL;
    const unsigned before = ctx->side_forks;
    bn_status s = bn_net_forward(net, 1);
    if (s == BN_OK) s = bn_net_backward(net);
    *forks = ctx->side_forks - before;
    ctx->side_stream = side;
    CHECK_MSG(s == BN_OK, "%s", bn_last_error());
    return BN_PASS;
}

/* One case: the network's text, and how the context runs it (bf16, with a forced layout, or
 * FP32 with or without TF32). */
typedef struct beside_case {
    const char *name, *text;
    int bf16, layout, tf32;
} beside_case;

/* The case's network run beside and in line on ctx, in a deterministic context: 3 forks beside,
 * none in line, and the same bits in every gradient. The context's flags are restored after. */
static int compare_beside(bn_ctx *ctx, const beside_case *k)
{
    const int was_deterministic = ctx->deterministic, was_tf32 = ctx->tf32, was_bf16 = ctx->bf16;
    ctx->deterministic = 1;
    ctx->bf16 = k->bf16;
    ctx->tf32 = k->tf32;
    if (k->bf16) bn_conv_bf16_force_layout(k->layout);
    const uint64_t seed = lt_fresh_seed();
    bn_net *beside = NULL, *in_line = NULL;
    unsigned forks_beside = 0, forks_in_line = 0;
    int r = run_net(ctx, k->text, seed, 0, &beside, &forks_beside);
    if (r == BN_PASS) r = run_net(ctx, k->text, seed, 1, &in_line, &forks_in_line);
    if (r == BN_PASS) {
        printf("    %s: %u side forks beside, %u in line\n", k->name, forks_beside, forks_in_line);
        if (forks_beside != 3 || forks_in_line != 0) r = BN_FAIL;
        if (!same_bits(beside->grads, in_line->grads)) {
            printf("    %s: the weight gradients differ\n", k->name);
            r = BN_FAIL;
        }
        for (int i = 0; i < beside->num_layers; i++)
            if (beside->layers[i]->in_grad && !same_bits(beside->layers[i]->in_grad, in_line->layers[i]->in_grad)) {
                printf("    %s: layer %d's input gradient differs\n", k->name, i);
                r = BN_FAIL;
            }
    }
    bn_net_free(beside);
    bn_net_free(in_line);
    ctx->bf16 = was_bf16;
    ctx->tf32 = was_tf32;
    ctx->deterministic = was_deterministic;
    bn_conv_bf16_force_layout(BN_CONV_BF16_EITHER);
    return r;
}

/* Each of count cases on the process's context, until one fails. */
static int compare_cases(const beside_case *cases, int count)
{
    bn_ctx *ctx;
    CHECK_OK(bn_ctx_open(0, &ctx));
    CHECK(ctx->side_stream != NULL);
    int r = BN_PASS;
    for (int k = 0; k < count && r == BN_PASS; k++) r = compare_beside(ctx, &cases[k]);
    return r;
}

#endif

BN_TEST(gpu_bf16_conv2d_filter_pass_beside_the_data_pass_gives_the_same_bits)
{
    if (bn_device_count() == 0) BN_SKIP_TEST("no CUDA device");
#ifdef BN_WITH_CUDA
    static const beside_case cases[] = {{"NCHW", model, 1, BN_CONV_BF16_NCHW, 0},
                                        {"NHWC", model, 1, BN_CONV_BF16_NHWC, 0}};
    return compare_cases(cases, 2);
#else
    return BN_PASS;
#endif
}

BN_TEST(gpu_conv2d_cudnn_filter_pass_beside_the_data_pass_gives_the_same_bits)
{
    if (bn_device_count() == 0) BN_SKIP_TEST("no CUDA device");
#ifdef BN_WITH_CUDA
    static const beside_case cases[] = {{"FP32", model_cudnn, 0, BN_CONV_BF16_EITHER, 0},
                                        {"TF32", model_cudnn, 0, BN_CONV_BF16_EITHER, 1}};
    return compare_cases(cases, 2);
#else
    return BN_PASS;
#endif
}
