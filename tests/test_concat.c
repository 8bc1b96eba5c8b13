/* test_concat.c - the concat layer (layers/concat.c), a join of its inputs along the channels:
 * where each input lands, and in BF16 on the GPU against FP32 on the CPU; on a device, which
 * producers write their part of its output in place (slices, fusion.c), those networks against
 * the CPU, their ReLU slices under bf16 bit for bit, the bias kernel's strided ReLU output, and
 * joins nested in joins (dense blocks) sharing one buffer.
 * Its gradients are checked in test_graph.c (a gradient check through a channel join, the errors of its shapes),
 * against the GPU in test_graph.c's graph case, and by the check kit (test_layercheck.c). */
#include <stdlib.h>
#include <string.h>

#include "bf16_testing.h"
#include "core/device.h"
#include "core/net.h"
#include "gpu_testing.h"
#include "layer_testing.h"
#include "testing.h"
#ifdef BN_WITH_CUDA
#include "batchnorm.h"
#include "conv2d/conv_bf16.h"
#include "conv2d/conv_bias.h"

/* The bf16 convolution paths the joins are checked through: cuDNN's NCHW and NHWC engines, and
 * blobnet's FP32 kernels on copies. */
static const int bf16_layouts[] = {BN_CONV_BF16_NCHW, BN_CONV_BF16_NHWC, BN_CONV_BF16_FP32};
#define NUM_BF16_LAYOUTS ((int)(sizeof bf16_layouts / sizeof *bf16_layouts))
#endif

BN_TEST(graph_concat_places_inputs_along_the_channels)
{
    bn_net *net;
    CHECK_OK(lt_net("[input]\nchannels=1\nheight=1\nwidth=2\n"
                    "[tanh]\nname=t\n"
                    "[concat]\ninput=input, t, input\n", 2, 1, &net));
    bn_layer *cat = net->layers[1];
    CHECK(cat->out->c == 3 && cat->out->h == 1 && cat->out->w == 2);
    float x[4] = {0.5f, -1.0f, 2.0f, 0.25f}, y[12];
    CHECK_OK(lt_write(net->input, x, 4));
    CHECK_OK(bn_net_forward(net, 1));
    CHECK_OK(lt_read(cat->out, y, 12));
    for (int n = 0; n < 2; n++)
        for (int k = 0; k < 2; k++) {
            CHECK(y[n * 6 + k] == x[n * 2 + k] && y[n * 6 + 4 + k] == x[n * 2 + k]);
            CHECK_NEAR(y[n * 6 + 2 + k], tanhf(x[n * 2 + k]), 1e-7);
        }
    bn_net_free(net);
    return BN_PASS;
}

/* ---- BF16 on the GPU against FP32 on the CPU ---- */

/* concat over max poolings of the input: a channel join; the input read by three layers, so its
 * gradient is a sum of three parts. */
BN_TEST(gpu_bf16_concat_matches_cpu)
{
    static const bf16_case cases[] = {
        {"bf16 concat of three max poolings of the input",
         "[input]\nchannels=3\nheight=6\nwidth=6\n"
         "[maxpool]\nname=m\nsize=2\n"
         "[maxpool]\nname=q\ninput=input\nsize=3\nstride=2\npad=1\n"
         "[maxpool]\nname=r\ninput=input\nsize=2\nstride=2\n"
         "[concat]\nname=j\ninput=m, q, r\n",
         TOL_LAYER, 1, 0, 0},
    };
    return gt_bf16_run_cases(cases, sizeof cases / sizeof cases[0]);
}

/* ---- producers that write their part of the join in place (fusion.c, bn_net_join_slices) ---- */

/* Five branches joined: a convolution's fused ReLU, a convolution's sigmoid (its own passes,
 * whose backward reads its output), a `pool` pooling (max in BRANCHES; it cannot write a slice:
 * copied), a convolution's ReLU again, and `fifth`: in BRANCHES a ReLU written by a batchnorm's
 * normalization (of the data, so that no convolution's bias before it has a gradient of zero, all
 * rounding); then a convolution reads the join, and a dense head (a softmax loss after it where
 * LOSS follows). 7x7 runs the slices' passes one value at a time, 8x8 in 16-byte packs. */
#define BRANCHES_OF(hw, act, pool, fifth)                                                          \
    "[input]\nchannels=3\nheight=" hw "\nwidth=" hw "\n"                                           \
    "[conv2d]\nname=a\nfilters=4\nsize=1\n[" act "]\nname=ar\n"                                  \
    "[conv2d]\nname=b\ninput=input\nfilters=5\nsize=3\npad=1\n[sigmoid]\nname=bs\n"               \
    "[" pool "]\nname=p\ninput=input\nsize=3\nstride=1\npad=1\n"                                  \
    "[conv2d]\nname=c\ninput=input\nfilters=3\nsize=3\npad=1\n[" act "]\nname=cr\n" fifth         \
    "[concat]\nname=j\ninput=ar, bs, p, cr, er\n"                                                 \
    "[conv2d]\nname=d\nfilters=4\nsize=3\npad=1\n[" act "]\nname=dr\n"                            \
    "[avgpool]\nname=g\nglobal=1\n[dense]\nname=fc\noutputs=5\n"
/* The fifth branch: `act` after a batchnorm of the data, or `act` of the data itself. */
#define NORMED(act) "[batchnorm]\nname=en\ninput=input\n[" act "]\nname=er\n"
#define DIRECT(act) "[" act "]\nname=er\ninput=input\n"
#define BRANCHES(hw) BRANCHES_OF(hw, "relu", "maxpool", NORMED("relu"))

#define LOSS "[softmax_ce]\nname=loss\n"
static const char *const branches[] = {BRANCHES("7") LOSS, BRANCHES("8") LOSS};

/* gt_run_case on each of `count` cases, up to the first failure. */
static int run_cases(const layer_case *cases, size_t count)
{
    int r = BN_PASS;
    for (size_t k = 0; k < count && r == BN_PASS; k++) r = gt_run_case(&cases[k]);
    return r;
}

/* On the CPU every input keeps blobs of its own; on a device ar, bs, cr and er become slices of
 * the join's output and output gradient at their channels, p does not, and the join's passes
 * move only p's block. */
BN_TEST(concat_inputs_become_slices_only_on_a_device)
{
    bn_net *net;
    CHECK_OK(lt_net(branches[0], 2, 1, &net));
    const bn_layer *cat = bn_net_find_layer(net, "j");
    for (int k = 0; k < 5; k++) CHECK(!bn_blob_is_slice(cat->inputs[k]));
    char cpu_said[128];
    cat->ops->describe_gpu(cat, cpu_said, sizeof cpu_said);
    CHECK_MSG(strcmp(cpu_said, "copied: ar, bs, p, cr, er") == 0, "on the CPU: \"%s\"", cpu_said);
    bn_net_free(net);
    if (bn_device_count() == 0) BN_SKIP_TEST("no CUDA device (the CPU half passed)");
    bn_ctx *ctx;
    CHECK_OK(bn_ctx_open(0, &ctx));
    CHECK_OK(bn_net_from_text(branches[0], "branches.cfg", &net));
    CHECK_OK(bn_net_setup(net, 3, ctx, 0, 1));
    const bn_layer *j = bn_net_find_layer(net, "j");
    static const char *const names[] = {"ar", "bs", "p", "cr", "er"};
    static const int channel[] = {0, 4, 9, 12, 15}, sliced[] = {1, 1, 0, 1, 1};
    for (int k = 0; k < 5; k++) {
        const bn_layer *l = bn_net_find_layer(net, names[k]);
        const int is = bn_blob_is_slice(l->out);
        CHECK_MSG(is == sliced[k], "%s's output is %sa slice", names[k], is ? "" : "not ");
        CHECK(j->inputs[k] == l->out && j->input_grads[k] == l->out_grad);
        if (!is) continue;
        CHECK(l->out->root == j->out && l->out_grad->root == j->out_grad && bn_blob_is_slice(l->out_grad));
        CHECK(l->out->offset == (size_t)channel[k] * 49 && l->out->example_stride == 18 * 49);
        CHECK(l->out_grad->offset == l->out->offset && l->out_grad->example_stride == 18 * 49);
    }
    char said[128];
    j->ops->describe_gpu(j, said, sizeof said);
    CHECK_MSG(strcmp(said, "in place: ar, bs, cr, er; copied: p") == 0, "blobnet time would say \"%s\"", said);
    bn_net_free(net);
    return BN_PASS;
}

/* The same networks' every output, gradient and parameter gradient on the GPU against the CPU,
 * in FP32 (the slices read back through their gather), with the kernels picked by rule and by
 * timing. */
BN_TEST(gpu_concat_of_slices_matches_cpu)
{
    static const layer_case cases[] = {
        {"branches joined in place, 7x7", BRANCHES("7") LOSS, TOL_GEMM, 5, 0, 0, 1, 1, 0},
        {"branches joined in place, 8x8", BRANCHES("8") LOSS, TOL_GEMM, 5, 0, 0, 1, 1, 0},
    };
    return run_cases(cases, sizeof cases / sizeof cases[0]);
}

/* Under bf16 against the CPU in FP32, with cuDNN's NCHW and NHWC engines and blobnet's FP32
 * kernels on copies. Every activation after a product is tanh here (the joined branches' and the
 * one after the join's reader), the copied branch an average pooling, and the fifth branch tanh
 * of the data itself: a product rounded to BF16 near zero may land on the other side of a ReLU's
 * kink than the CPU's, two inputs of a max pooling's window within BF16's rounding of each other
 * may swap which is the maximum, and a batchnorm's scale gradient is a sum over every position
 * whose terms cancel, so that a few roundings of its dy move it by far more than the tolerance
 * of its scale (test_bf16.c). The ReLUs' slices under bf16, batchnorm's among them, are checked
 * bit for bit below. */
BN_TEST(gpu_bf16_concat_of_slices_matches_cpu)
{
    if (bn_device_count() == 0) BN_SKIP_TEST("no CUDA device");
    static const bf16_case cases[] = {
        {"bf16 branches joined in place, 7x7", BRANCHES_OF("7", "tanh", "avgpool", DIRECT("tanh")), TOL_CHAIN, 0, 0, 1},
        {"bf16 branches joined in place, 8x8", BRANCHES_OF("8", "tanh", "avgpool", DIRECT("tanh")), TOL_CHAIN, 0, 0, 1},
    };
#ifdef BN_WITH_CUDA
    int r = BN_PASS;
    for (int k = 0; k < NUM_BF16_LAYOUTS && r == BN_PASS; k++) {
        bn_conv_bf16_force_layout(bf16_layouts[k]);
        r = gt_bf16_run_cases(cases, sizeof cases / sizeof cases[0]);
    }
    bn_conv_bf16_force_layout(BN_CONV_BF16_EITHER);
    return r;
#else
    return gt_bf16_run_cases(cases, sizeof cases / sizeof cases[0]);
#endif
}

/* ---- joins nested in joins: a dense block (fusion.c, nesting_partner) ---- */

/* Two dense blocks: in the first, j1 joins the stem (read by n1 too, so it is copied) and c1; j2
 * joins j1 and c2, j3 joins j2 and c3, each join but the last also read by a batchnorm; an average
 * pooling and a second block whose first join k1 joins the pooling and d1. The convolutions'
 * outputs (no out_slices) and the pooling's are copied, into the nested joins' parts at the outer
 * join's stride. On a device j1 and j2 become slices of j3's output, k1 of k2's. The last joins
 * are read without a batchnorm, so that the convolutions' biases have gradients that are not
 * all rounding (a batchnorm after them cancels theirs). */
#define DENSE_OF(hw)                                                                               \
    "[input]\nchannels=3\nheight=" hw "\nwidth=" hw "\n"                                           \
    "[conv2d]\nname=stem\nfilters=4\nsize=3\npad=1\n"                                              \
    "[batchnorm]\nname=n1\ninput=stem\n[relu]\nname=r1\n[conv2d]\nname=c1\nfilters=2\nsize=3\npad=1\n" \
    "[concat]\nname=j1\ninput=stem, c1\n"                                                          \
    "[batchnorm]\nname=n2\ninput=j1\n[relu]\nname=r2\n[conv2d]\nname=c2\nfilters=2\nsize=3\npad=1\n" \
    "[concat]\nname=j2\ninput=j1, c2\n"                                                            \
    "[batchnorm]\nname=n3\ninput=j2\n[relu]\nname=r3\n[conv2d]\nname=c3\nfilters=2\nsize=3\npad=1\n" \
    "[concat]\nname=j3\ninput=j2, c3\n"                                                            \
    "[avgpool]\nname=p\nsize=2\n"                                                                \
    "[batchnorm]\nname=m1\ninput=p\n[relu]\nname=mr1\n[conv2d]\nname=d1\nfilters=2\nsize=3\npad=1\n" \
    "[concat]\nname=k1\ninput=p, d1\n"                                                             \
    "[batchnorm]\nname=m2\ninput=k1\n[relu]\nname=mr2\n[conv2d]\nname=d2\nfilters=2\nsize=3\npad=1\n" \
    "[concat]\nname=k2\ninput=k1, d2\n"                                                            \
    "[tanh]\nname=fr\n[avgpool]\nname=g\nglobal=1\n[dense]\nname=fc\noutputs=3\n"

/* Where a layer's output should lie on a device: a slice of `root`'s output at `channel`, or its
 * own blob (root NULL). */
typedef struct nested_place {
    const char *layer, *root;
    int channel;
} nested_place;

/* On a device the dense blocks' joins share one buffer each: j1 and j2 are the first 6 and 8 of
 * j3's 10 channels, k1 the first 12 of k2's 14, every other layer's output a blob of its own; j1's
 * reader n2 reads it at j3's stride and adds its input gradient into j1's, which j2's holds. */
BN_TEST(gpu_joins_of_joins_share_one_buffer)
{
    if (bn_device_count() == 0) BN_SKIP_TEST("no CUDA device");
    bn_ctx *ctx;
    CHECK_OK(bn_ctx_open(0, &ctx));
    bn_net *net;
    CHECK_OK(bn_net_from_text(DENSE_OF("6") LOSS, "dense.cfg", &net));
    CHECK_OK(bn_net_setup(net, 3, ctx, 0, 1));
    static const nested_place places[] = {
        {"stem", NULL, 0}, {"c1", NULL, 0}, {"j1", "j3", 0}, {"c2", NULL, 0}, {"j2", "j3", 0}, {"c3", NULL, 0},
        {"j3", NULL, 0},   {"p", NULL, 0},  {"d1", NULL, 0}, {"k1", "k2", 0}, {"d2", NULL, 0},  {"k2", NULL, 0},
    };
    for (size_t k = 0; k < sizeof places / sizeof *places; k++) {
        const bn_layer *l = bn_net_find_layer(net, places[k].layer);
        CHECK(l != NULL);
        if (!places[k].root) {
            CHECK_MSG(!bn_blob_is_slice(l->out) && l->out->root == l->out, "%s's output is not its own",
                      places[k].layer);
            continue;
        }
        const bn_layer *r = bn_net_find_layer(net, places[k].root);
        CHECK_MSG(l->out->root == r->out && l->out_grad->root == r->out_grad && bn_blob_is_slice(l->out),
                  "%s is not a slice of %s", places[k].layer, places[k].root);
        const size_t plane = (size_t)r->out->h * r->out->w; /* 36, or 9 after the pooling */
        CHECK_MSG(l->out->offset == (size_t)places[k].channel * plane &&
                      l->out->example_stride == (size_t)r->out->c * plane && l->out_grad->offset == l->out->offset,
                  "%s lies at element %zu of %s's examples of %zu", places[k].layer, l->out->offset, places[k].root,
                  l->out->example_stride);
    }
    const bn_layer *j1 = bn_net_find_layer(net, "j1"), *j2 = bn_net_find_layer(net, "j2");
    const bn_layer *j3 = bn_net_find_layer(net, "j3"), *n2 = bn_net_find_layer(net, "n2");
    const bn_layer *k1 = bn_net_find_layer(net, "k1"), *k2 = bn_net_find_layer(net, "k2");
    CHECK(n2->in == j1->out && n2->in_grad == j1->out_grad && j2->input_grads[0] == j1->out_grad);
    CHECK(n2->adds_in_grad && j1->num_grad_parts == 0 && bn_net_find_layer(net, "m2")->adds_in_grad);
    CHECK(j2->grad_shared && j3->grad_shared && k2->grad_shared && !j1->grad_shared && !k1->grad_shared);
    char said[128];
    k1->ops->describe_gpu(k1, said, sizeof said);
    CHECK_MSG(strcmp(said, "copied: p, d1") == 0, "k1: \"%s\"", said);
    j3->ops->describe_gpu(j3, said, sizeof said);
    CHECK_MSG(strcmp(said, "in place: j2; copied: c3") == 0, "j3: \"%s\"", said);
    bn_net_free(net);
    return BN_PASS;
}

/* The dense blocks' every output, gradient and parameter gradient on the GPU against the CPU (where
 * every join copies), planes of 7 and 8 (one value at a time, and packs). */
BN_TEST(gpu_joins_of_joins_match_cpu)
{
    static const layer_case cases[] = {
        {"dense blocks, 7x7", DENSE_OF("7") LOSS, TOL_GEMM, 3, 0, 0, 1, 1, 0},
        {"dense blocks, 8x8", DENSE_OF("8") LOSS, TOL_GEMM, 3, 0, 0, 1, 1, 0},
    };
    return run_cases(cases, sizeof cases / sizeof cases[0]);
}

#ifdef BN_WITH_CUDA
/* One training step of the 8x8 dense blocks at batch n, FP32 or bf16, on two nets set up alike
 * from one seed, one with its joins nested and one copying every join (BLOBNET_JOIN_COPIES=1),
 * the batchnorms on their one-kernel path or (split) on their two-kernel one: every parameter
 * gradient, every output and every output gradient that both nets hold must be the same bits. */
static int nested_same_bits(bn_ctx *ctx, int bf16, int n, int split)
{
    const layer_case lc = {.what = "dense blocks", .text = DENSE_OF("8") LOSS, .classes = 3};
    const uint64_t seed = lt_fresh_seed();
    const char *what = bf16 ? "bf16" : "fp32";
    bn_net *a = NULL, *b = NULL;
    CHECK_OK(gt_twin_nets(ctx, lc.text, "dense.cfg", bf16, seed, "BLOBNET_JOIN_COPIES", &a, &b));
    CHECK_MSG(bn_blob_is_slice(bn_net_find_layer(a, "j1")->out) && !bn_blob_is_slice(bn_net_find_layer(b, "j1")->out),
              "%s: j1 is not nested in one net and copied in the other", what);
    for (int pass = 0; pass < 2; pass++) {
        bn_net *net = pass ? b : a;
        for (int i = 0; i < net->num_layers; i++)
            if (strcmp(net->layers[i]->ops->type, "batchnorm") == 0)
                ((batchnorm_priv *)net->layers[i]->priv)->dev_fused = split ? -1 : 0;
        CHECK_OK(bn_net_set_batch(net, n));
        if (!bf16) CHECK_OK(gt_poison_net(net, ctx));
    }
    CHECK_OK(gt_step_alike(a, b, &lc, seed));
    CHECK(gt_nets_same_bits(a, b, seed, GT_BITS_OUTPUTS | GT_BITS_OUT_GRADS) == BN_PASS);
    bn_net_free(a);
    bn_net_free(b);
    return BN_PASS;
}
#endif

/* Nested joins give the copies' bits: the same floats added (a batchnorm's input gradient, rounded
 * as its part would be, into the later join's gradient slice, instead of the join's copied part
 * into the batchnorm's gradient), in FP32 and bf16, on both batchnorm paths, at batches 8 and 3,
 * in a deterministic context (both nets then take the same kernels). */
BN_TEST(gpu_joins_of_joins_give_the_copies_bits)
{
    if (bn_device_count() == 0) BN_SKIP_TEST("no CUDA device");
#ifdef BN_WITH_CUDA
    return gt_same_bits_cases(nested_same_bits, 2);
#else
    return BN_PASS;
#endif
}

#ifdef BN_WITH_CUDA
/* Under bf16, after a training forward and backward of the ReLU branches (labels all 0, so the loss
 * sends a gradient back through every branch): each ReLU slice (read
 * back through its gather) is max(y, 0) of its producer's BF16 output y bit for bit, and its input
 * gradient is its slice of the join's gradient where y > 0 and 0 elsewhere; 1 when so. */
static int relu_slices_exact(bn_net *net, char *why, size_t cap)
{
    static const char *const relus[] = {"ar", "cr", "er"};
    for (size_t k = 0; k < sizeof relus / sizeof *relus; k++) {
        bn_layer *r = bn_net_find_layer(net, relus[k]);
        if (!r || !bn_blob_is_slice(r->out)) {
            snprintf(why, cap, "%s is not a slice", relus[k]);
            return 0;
        }
        const size_t n = bn_blob_count(r->out);
        float *y = malloc(n * sizeof *y), *out = malloc(n * sizeof *out), *dy = malloc(n * sizeof *dy),
              *dx = malloc(n * sizeof *dx);
        bn_status s = y && out && dy && dx ? BN_OK : bn_error(BN_ERR_NOMEM, "out of host memory");
        if (s == BN_OK) s = lt_read(r->in, y, n);
        if (s == BN_OK) s = lt_read(r->out, out, n);
        if (s == BN_OK) s = lt_read(r->out_grad, dy, n);
        if (s == BN_OK) s = lt_read(r->in_grad, dx, n);
        size_t bad = 0, positive = 0;
        for (size_t i = 0; s == BN_OK && i < n; i++) {
            const float want = y[i] > 0.0f ? y[i] : 0.0f, grad = y[i] > 0.0f ? dy[i] : 0.0f;
            bad += memcmp(&want, &out[i], sizeof want) != 0 || memcmp(&grad, &dx[i], sizeof grad) != 0;
            positive += y[i] > 0.0f;
        }
        free(y), free(out), free(dy), free(dx);
        if (s != BN_OK || bad || !positive || positive == n) {
            snprintf(why, cap, "%s: %zu of %zu values wrong, %zu positive%s%s", relus[k], bad, n, positive,
                     s != BN_OK ? ": " : "", s != BN_OK ? bn_last_error() : "");
            return 0;
        }
    }
    return 1;
}
#endif

/* Under bf16 the ReLU slices are written by the bias kernel after cuDNN's NCHW and NHWC engines,
 * by their own pass after blobnet's FP32 kernels on copies, and by batchnorm's normalization:
 * bit for bit what the packed blobs held (relu_slices_exact), at both plane sizes. */
BN_TEST(gpu_bf16_relu_slices_are_exact)
{
    if (bn_device_count() == 0) BN_SKIP_TEST("no CUDA device");
#ifdef BN_WITH_CUDA
    bn_ctx *ctx;
    CHECK_OK(bn_ctx_open(0, &ctx));
    int ok = 1;
    char why[256] = "";
    for (int k = 0; k < NUM_BF16_LAYOUTS && ok; k++)
        for (int b = 0; b < 2 && ok; b++) {
            bn_conv_bf16_force_layout(bf16_layouts[k]);
            bn_net *net = NULL;
            ctx->bf16 = 1;
            bn_status s = bn_net_from_text(b ? BRANCHES("8") LOSS : BRANCHES("7") LOSS, "branches_bf16.cfg", &net);
            if (s == BN_OK) s = bn_net_setup(net, 6, ctx, 0, 3);
            ctx->bf16 = 0;
            if (s == BN_OK) gt_bn_relus_apart(net); /* the batchnorm's own output is read below */
            if (s == BN_OK) s = lt_fill_normal(net, 5 + (uint64_t)b, 1.0, 0.0);
            if (s == BN_OK) s = bn_net_forward(net, 1);
            if (s == BN_OK) s = bn_net_backward(net);
            if (s != BN_OK) snprintf(why, sizeof why, "%s", bn_last_error());
            ok = s == BN_OK && relu_slices_exact(net, why, sizeof why);
            if (!ok) printf("    layout %d, plane %s: %s\n", bf16_layouts[k], b ? "8x8" : "7x7", why);
            bn_net_free(net);
        }
    bn_conv_bf16_force_layout(BN_CONV_BF16_EITHER);
    CHECK_MSG(ok, "a ReLU slice under bf16 differs from its packed rule");
#endif
    return BN_PASS;
}

/* The bias kernel's fused ReLU output at a stride larger than its images (a slice two channels
 * into a join of filters + 3): every value of the slice max(y + b, 0), every other value of the
 * join untouched, y itself y + b; FP32 and BF16, planes of 6 (one value at a time) and 8 (packs). */
BN_TEST(gpu_conv_bias_writes_a_relu_slice_at_its_stride)
{
    if (bn_device_count() == 0) BN_SKIP_TEST("no CUDA device");
#ifdef BN_WITH_CUDA
    bn_ctx *ctx;
    CHECK_OK(bn_ctx_open(0, &ctx));
    const int n = 3, filters = 4, wide = filters + 3;
    for (int bf16 = 0; bf16 <= 1; bf16++)
        for (int plane = 6; plane <= 8; plane += 2) {
            bn_blob *y = bn_blob_new("y", n, filters, 1, plane), *b = bn_blob_new("b", filters, 1, 1, 1);
            bn_blob *join = bn_blob_new("join", n, wide, 1, plane);
            CHECK(y && b && join);
            if (bf16) {
                CHECK_OK(bn_blob_set_bf16(y));
                CHECK_OK(bn_blob_set_bf16(join));
            }
            bn_blob *slice = bn_blob_new_slice("relu", join, 2, n, filters);
            CHECK(slice != NULL);
            float *hy = bn_blob_host_wr(y), *hb = bn_blob_host_wr(b), *hj = bn_blob_host_wr(join);
            /* Multiples of 1/4 in [-4, 4): exact in BF16, and so are their sums with the bias. */
            for (size_t i = 0; i < bn_blob_count(y); i++) hy[i] = (float)((int)((i * 37) % 32) - 16) / 4.0f;
            for (int k = 0; k < filters; k++) hb[k] = 0.25f * (float)(k - 2);
            for (size_t i = 0; i < bn_blob_count(join); i++) hj[i] = 99.0f;
            size_t stride = 0;
            void *dy = bf16 ? bn_blob_dev16_wr(y) : (void *)bn_blob_dev_wr(y);
            const float *db = bn_blob_dev_rd(b);
            void *dr = bn_blob_dev_rows_wr(slice, &stride);
            CHECK(dy && db && dr && stride == (size_t)wide * plane);
            CHECK_OK(bf16 ? bn_conv_bias_add_bf16(dy, db, n, filters, plane, dr, stride, ctx)
                          : bn_conv_bias_add_f32((float *)dy, db, n, filters, plane, (float *)dr, stride, ctx));
            float want[3 * 4 * 8];
            for (size_t i = 0; i < bn_blob_count(y); i++) want[i] = hy[i] + hb[(i / plane) % filters];
            const float *gy = bn_blob_host_rd(y), *gj = bn_blob_host_rd(join);
            CHECK(gy && gj);
            int bad = 0;
            for (int e = 0; e < n; e++)
                for (int c = 0; c < wide; c++)
                    for (int q = 0; q < plane; q++) {
                        const float got = gj[((size_t)e * wide + c) * plane + q];
                        const int in = c >= 2 && c < 2 + filters;
                        const float v = in ? want[((size_t)e * filters + c - 2) * plane + q] : 0.0f;
                        bad += in ? got != (v > 0.0f ? v : 0.0f) : got != 99.0f;
                    }
            for (size_t i = 0; i < bn_blob_count(y); i++) bad += gy[i] != want[i];
            CHECK_MSG(!bad, "%s, plane %d: %d values wrong", bf16 ? "bf16" : "fp32", plane, bad);
            bn_blob_free(slice);
            bn_blob_free(join);
            bn_blob_free(b);
            bn_blob_free(y);
        }
    return BN_PASS;
#else
    return BN_PASS;
#endif
}
