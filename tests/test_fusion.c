/* test_fusion.c - the network's fusion rules (src/core/fusion.c), on the host: which pairs are
 * offered to the layer types' fusion hooks, in which order, the one-reader condition, and that an
 * activation is offered by the kind its ops declare (absorbable_as) to a neighbour that declares
 * it takes that kind (absorbs), never by its type's name. The fused kernels themselves are
 * checked against the CPU in the fusing layers' own tests (test_activation.c, test_conv2d.c);
 * the gradient parts added by their readers' kernels against the network's own sums here. */
#include <stdlib.h>

#include "core/net.h"
#include "bf16_testing.h"
#include "core/registry.h"
#include "gpu_testing.h"
#include "layer_testing.h"
#include "testing.h"
#ifdef BN_WITH_CUDA
#include "batchnorm.h"
#include "conv2d/conv_bf16.h"
#endif

/* What the hooks of the "fusetest" type were asked, in order. */
static char asked[512];

static void note(const char *fmt, const char *a, const char *b)
{
    size_t len = strlen(asked);
    snprintf(asked + len, sizeof asked - len, fmt, a, b);
}

static bn_status same_shape(bn_layer *l, bn_shape in, bn_shape *out)
{
    (void)l;
    *out = in;
    return BN_OK;
}

static bn_status nothing(bn_layer *l, const bn_pass *p)
{
    (void)l, (void)p;
    return BN_OK;
}

static int take_activation(bn_layer *l, bn_layer *act, int after)
{
    note(after ? "%s takes %s fwd; " : "%s takes %s bwd; ", l->name, act->name);
    return 1;
}

/* Takes the forward pass of any consumer whose name starts with "eat". */
static int take_next(bn_layer *l, bn_layer *next)
{
    note("%s offered %s; ", l->name, next->name);
    return strncmp(next->name, "eat", 3) == 0 ? BN_FUSED_FORWARD : 0;
}

static const bn_layer_ops fusetest_ops = {
    .type = "fusetest", .help = "test only: identity with fusion hooks", .setup = same_shape,
    .forward_cpu = nothing, .backward_cpu = nothing, .forward_gpu = nothing, .backward_gpu = nothing,
    .fuse_gpu = take_activation, .fuse_next_gpu = take_next, .absorbs = BN_ABSORB_RELU,
};

/* An identity that declares itself a ReLU to its neighbours: the kind, not the name, counts. */
static const bn_layer_ops actlike_ops = {
    .type = "actlike", .help = "test only: declared a ReLU", .setup = same_shape, .forward_cpu = nothing,
    .backward_cpu = nothing, .forward_gpu = nothing, .backward_gpu = nothing, .absorbable_as = BN_ABSORB_RELU,
};

/* The same without the declaration. */
static const bn_layer_ops plainact_ops = {
    .type = "plainact", .help = "test only: declares nothing", .setup = same_shape, .forward_cpu = nothing,
    .backward_cpu = nothing, .forward_gpu = nothing, .backward_gpu = nothing,
};

/* A type with an activation hook that lists no kind it takes. */
static const bn_layer_ops takesnone_ops = {
    .type = "takesnone", .help = "test only: fuse_gpu without absorbs", .setup = same_shape,
    .forward_cpu = nothing, .backward_cpu = nothing, .forward_gpu = nothing, .backward_gpu = nothing,
    .fuse_gpu = take_activation,
};

/* For the slice rule: an activation that reaches its blobs at a slice's stride, and a layer whose
 * kernels would write such an activation's output, and read its gradient, at that stride. */
static const bn_layer_ops sliceact_ops = {
    .type = "sliceact", .help = "test only: declared a ReLU, honours slices", .setup = same_shape,
    .forward_cpu = nothing, .backward_cpu = nothing, .forward_gpu = nothing, .backward_gpu = nothing,
    .absorbable_as = BN_ABSORB_RELU, .out_slices = 1,
};

static const bn_layer_ops slicetaker_ops = {
    .type = "slicetaker", .help = "test only: reaches an activation's blobs at their stride", .setup = same_shape,
    .forward_cpu = nothing, .backward_cpu = nothing, .forward_gpu = nothing, .backward_gpu = nothing,
    .act_out_slices = 1,
};

static bn_status fusion_net(const char *layers, bn_net **net)
{
    const bn_layer_ops *const types[] = {&fusetest_ops, &actlike_ops,   &plainact_ops,
                                         &takesnone_ops, &sliceact_ops, &slicetaker_ops};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        bn_status s = bn_register_layer(types[i]);
        if (s != BN_OK && bn_find_layer(types[i]->type) != types[i]) return s;
    }
    char text[1024];
    snprintf(text, sizeof text, "[input]\nchannels = 1\nheight = 2\nwidth = 2\n%s", layers);
    BN_TRY(bn_net_from_text(text, "fusion.cfg", net));
    return bn_net_setup(*net, 2, NULL, 1, 1);
}

BN_TEST(fusion_rules_offer_each_pair_once_in_layer_order)
{
    bn_net *net;
    CHECK_OK(fusion_net("[fusetest]\nname = a\n[relu]\nname = r\n[fusetest]\nname = b\n"
                        "[fusetest]\nname = eat\n[fusetest]\nname = c\n", &net));
    asked[0] = '\0';
    bn_net_fuse(net);
    /* r goes to its neighbours, so a is not offered r; eat's forward goes to b, so neither eat
     * nor b is offered again. */
    CHECK_MSG(strcmp(asked, "a takes r fwd; b takes r bwd; b offered eat; ") == 0, "asked: %s", asked);
    CHECK(net->layers[1]->gpu_fused == (BN_FUSED_FORWARD | BN_FUSED_BACKWARD));
    CHECK(net->layers[3]->gpu_fused == BN_FUSED_FORWARD);
    CHECK(net->layers[0]->gpu_fused == 0 && net->layers[2]->gpu_fused == 0 && net->layers[4]->gpu_fused == 0);
    bn_net_free(net);
    return BN_PASS;
}

BN_TEST(fusion_needs_a_sole_consumer)
{
    /* a feeds both branches, so neither may take over a's output; the add reads two layers, so
     * neither branch may take over the add. Only the pair after the join fuses. */
    bn_net *net;
    CHECK_OK(fusion_net("[fusetest]\nname = a\n[fusetest]\nname = eat\n[fusetest]\nname = eat2\ninput = a\n"
                        "[add]\nname = join\ninput = eat, eat2\n[fusetest]\nname = b\n[fusetest]\nname = eat3\n",
                        &net));
    CHECK(bn_net_sole_consumer(net, net->layers[0]) == NULL);
    CHECK(bn_net_sole_consumer(net, net->layers[1]) == net->layers[3]);
    CHECK(bn_net_sole_consumer(net, net->layers[5]) == NULL);
    asked[0] = '\0';
    bn_net_fuse(net);
    CHECK_MSG(strcmp(asked, "b offered eat3; ") == 0, "asked: %s", asked);
    CHECK(net->layers[1]->gpu_fused == 0 && net->layers[2]->gpu_fused == 0 && net->layers[3]->gpu_fused == 0);
    CHECK(net->layers[5]->gpu_fused == BN_FUSED_FORWARD);
    bn_net_free(net);
    return BN_PASS;
}

BN_TEST(fusion_of_the_loss_needs_a_device)
{
    bn_net *net;
    CHECK_OK(bn_net_from_text("[input]\nchannels = 1\nheight = 2\nwidth = 2\n[dense]\noutputs = 3\n[softmax_ce]\n",
                              "loss.cfg", &net));
    CHECK_OK(bn_net_setup(net, 2, NULL, 0, 1));
    CHECK(bn_net_fuse_loss(net, net->metrics, 1) == 0);
    bn_net_unfuse_loss(net);
    bn_net_free(net);
    return BN_PASS;
}

BN_TEST(fusion_offers_an_activation_by_its_declared_kind)
{
    /* actlike is no "relu" by name, but declares BN_ABSORB_RELU: its passes go to its neighbours
     * as a ReLU's would. */
    bn_net *net;
    CHECK_OK(fusion_net("[fusetest]\nname = a\n[actlike]\nname = r\n[fusetest]\nname = b\n", &net));
    asked[0] = '\0';
    bn_net_fuse(net);
    CHECK_MSG(strcmp(asked, "a takes r fwd; b takes r bwd; ") == 0, "asked: %s", asked);
    CHECK(net->layers[1]->gpu_fused == (BN_FUSED_FORWARD | BN_FUSED_BACKWARD));
    bn_net_free(net);
    return BN_PASS;
}

BN_TEST(fusion_leaves_a_layer_that_declares_no_kind_alone)
{
    /* plainact and the built-in sigmoid are elementwise too, but declare nothing: no neighbour's
     * activation hook is asked about them (the next-layer hook may see them, and declines). */
    const char *const middles[] = {"plainact", "sigmoid"};
    for (size_t i = 0; i < sizeof middles / sizeof middles[0]; i++) {
        char text[256];
        snprintf(text, sizeof text, "[fusetest]\nname = a\n[%s]\nname = m\n[fusetest]\nname = b\n", middles[i]);
        bn_net *net;
        CHECK_OK(fusion_net(text, &net));
        asked[0] = '\0';
        bn_net_fuse(net);
        CHECK_MSG(!strstr(asked, "takes"), "%s: asked: %s", middles[i], asked);
        CHECK(net->layers[0]->gpu_fused == 0 && net->layers[1]->gpu_fused == 0 && net->layers[2]->gpu_fused == 0);
        bn_net_free(net);
    }
    return BN_PASS;
}

BN_TEST(fusion_asks_only_a_layer_that_takes_the_kind)
{
    /* takesnone has an activation hook but lists no kind in absorbs: the ReLU beside it stays. */
    bn_net *net;
    CHECK_OK(fusion_net("[takesnone]\nname = a\n[relu]\nname = r\n[takesnone]\nname = b\n", &net));
    asked[0] = '\0';
    bn_net_fuse(net);
    CHECK_MSG(asked[0] == '\0', "asked: %s", asked);
    CHECK(net->layers[1]->gpu_fused == 0);
    bn_net_free(net);
    return BN_PASS;
}

/* An activation feeding a channel join becomes a slice of the join's output only where every pass
 * that reaches its blobs honours the stride: its own passes (out_slices), and where the layer
 * before it does its forward pass, or both (the passes' bits set by hand here as that layer's
 * hook would), that layer's (act_out_slices); a backward pass done by the consumer's kernels
 * alone keeps its blobs whole. */
BN_TEST(fusion_slices_an_activation_where_the_layer_doing_its_passes_honours_the_stride)
{
    static const struct {
        unsigned fused;
        const char *producer;
        int sliced;
    } cases[] = {
        {0, "fusetest", 1},
        {BN_FUSED_FORWARD, "slicetaker", 1},
        {BN_FUSED_FORWARD, "fusetest", 0},
        {BN_FUSED_FORWARD | BN_FUSED_BACKWARD, "slicetaker", 1},
        {BN_FUSED_FORWARD | BN_FUSED_BACKWARD, "fusetest", 0},
        {BN_FUSED_BACKWARD, "slicetaker", 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char text[512];
        snprintf(text, sizeof text,
                 "[%s]\nname = p\n[sliceact]\nname = a\n[plainact]\nname = u\ninput = input\n"
                 "[concat]\nname = j\ninput = a, u\n[dense]\nname = d\noutputs = 2\n[softmax_ce]\nname = loss\n",
                 cases[i].producer);
        bn_net *net;
        CHECK_OK(fusion_net(text, &net));
        bn_layer *a = bn_net_find_layer(net, "a");
        CHECK(a && !bn_blob_is_slice(a->out));
        a->gpu_fused = cases[i].fused;
        bn_status s = bn_net_join_slices(net);
        const int sliced = bn_blob_is_slice(a->out), grad = bn_blob_is_slice(a->out_grad);
        bn_net_free(net);
        CHECK_OK(s);
        CHECK_MSG(sliced == cases[i].sliced && grad == sliced,
                  "case %zu (passes %u done by a %s): the output is %sa slice, the gradient %sa slice", i,
                  cases[i].fused, cases[i].producer, sliced ? "" : "not ", grad ? "" : "not ");
    }
    return BN_PASS;
}

BN_TEST(fusion_kinds_of_the_built_in_types)
{
    /* What each built-in type declares; every type not listed declares nothing. These decide
     * which pairs fuse on a device: relu into or beside dense, conv2d, batchnorm and add, and a max
     * pooling into conv2d (whose fuse_next_gpu looks for BN_ABSORB_MAXPOOL). */
    static const struct {
        const char *type;
        unsigned absorbable_as, absorbs;
    } kinds[] = {
        {"relu", BN_ABSORB_RELU, 0},     {"maxpool", BN_ABSORB_MAXPOOL, 0}, {"dense", 0, BN_ABSORB_RELU},
        {"conv2d", 0, BN_ABSORB_RELU},   {"batchnorm", 0, BN_ABSORB_RELU}, {"add", 0, BN_ABSORB_RELU},
    };
    int listed = 0;
    for (int i = 0; i < bn_layer_type_count(); i++) {
        const bn_layer_ops *ops = bn_layer_type_at(i);
        if (ops == &fusetest_ops || ops == &actlike_ops || ops == &plainact_ops || ops == &takesnone_ops ||
            ops == &sliceact_ops || ops == &slicetaker_ops)
            continue;
        unsigned as = 0, takes = 0;
        for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++)
            if (strcmp(kinds[k].type, ops->type) == 0) as = kinds[k].absorbable_as, takes = kinds[k].absorbs, listed++;
        CHECK_MSG(ops->absorbable_as == as && ops->absorbs == takes, "%s declares %u and absorbs %u, not %u and %u",
                  ops->type, ops->absorbable_as, ops->absorbs, as, takes);
    }
    CHECK_MSG(listed == (int)(sizeof kinds / sizeof kinds[0]), "only %d of the listed types are registered", listed);
    return BN_PASS;
}

/* Under --precision bf16 the same rules run, and each built-in hook takes only what its BF16
 * passes can do: batchnorm takes both passes of the ReLU after it and the backward pass of the
 * one before it (its kernels are the same in either precision), conv2d the ReLU after it
 * (written by its bias kernel), while dense, whose BF16 products have no ReLU epilogue, takes
 * neither of its ReLUs nor the softmax head, and conv2d no 2x2 max pooling. In FP32 the same
 * network fuses all of them. */
BN_TEST(gpu_fusion_under_bf16_takes_what_the_bf16_passes_can)
{
    if (bn_device_count() == 0) BN_SKIP_TEST("no CUDA device");
    static const char text[] = "[input]\nchannels = 1\nheight = 12\nwidth = 12\n"
                               "[conv2d]\nname = c1\nfilters = 8\nsize = 3\npad = 1\n"
                               "[batchnorm]\nname = bn1\n[relu]\nname = r1\n"
                               "[conv2d]\nname = c2\nfilters = 8\nsize = 3\npad = 1\n"
                               "[maxpool]\nname = p2\nsize = 2\nstride = 2\n"
                               "[conv2d]\nname = c3\nfilters = 8\nsize = 3\npad = 1\n"
                               "[relu]\nname = r3\n[batchnorm]\nname = bn3\n"
                               "[dense]\nname = d1\noutputs = 16\n[relu]\nname = r4\n"
                               "[dense]\nname = d2\noutputs = 10\n[softmax_ce]\nname = loss\n";
    const unsigned both = BN_FUSED_FORWARD | BN_FUSED_BACKWARD;
    const struct {
        const char *name;
        unsigned fp32, bf16; /* its passes (BN_FUSED_FORWARD | BN_FUSED_BACKWARD) others do */
    } want[] = {
        {"r1", both, both},                         /* bn1's passes */
        {"p2", both, 0},                            /* c2's epilogues in FP32 */
        {"r3", both, both},                         /* c3's epilogue; bn3's input_grad */
        {"r4", both, 0},                            /* d1's epilogue and d2's dX product (FP32) */
        {"loss", BN_FUSED_FORWARD, 0},              /* the dense head (FP32) */
    };
    bn_ctx *ctx;
    CHECK_OK(bn_ctx_open(0, &ctx));
    for (int bf16 = 0; bf16 <= 1; bf16++) {
        bn_net *net;
        CHECK_OK(bn_net_from_text(text, "fusion_bf16.cfg", &net));
        ctx->bf16 = bf16;
        bn_status s = bn_net_setup(net, 4, ctx, 0, 1);
        ctx->bf16 = 0;
        if (s != BN_OK) bn_net_free(net);
        CHECK_OK(s);
        int ok = 1;
        for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
            const bn_layer *l = bn_net_find_layer(net, want[i].name);
            const unsigned expect = bf16 ? want[i].bf16 : want[i].fp32, got = l ? l->gpu_fused & both : 99u;
            if (got != expect) {
                printf("    %s: %s has passes %u done by others, expected %u\n", bf16 ? "bf16" : "fp32",
                       want[i].name, got, expect);
                ok = 0;
            }
        }
        bn_net_free(net);
        CHECK_MSG(ok, "%s: the fused passes differ from the hooks' rules", bf16 ? "bf16" : "fp32");
    }
    return BN_PASS;
}

#ifdef BN_WITH_CUDA
/* Under bf16, net (text: a producer, then a ReLU named r reading it) set up with the
 * producer's output in y and the ReLU's in ry after one forward pass: fails unless the ReLU's
 * forward pass was taken by the producer and its output is max(y, 0) bit for bit, with both
 * signs present. A batchnorm, which stores the ReLU's output only, is asked to store its own too
 * (gt_bn_relus_apart). */
static int relu_is_max_of_output(bn_ctx *ctx, const char *text, const char *producer, const char *what)
{
    bn_net *net = NULL;
    ctx->bf16 = 1;
    bn_status s = bn_net_from_text(text, what, &net);
    if (s == BN_OK) s = bn_net_setup(net, 5, ctx, 0, 7);
    ctx->bf16 = 0;
    bn_layer *p = s == BN_OK ? bn_net_find_layer(net, producer) : NULL, *relu = p ? bn_net_find_layer(net, "r") : NULL;
    if (s == BN_OK && (!p || !relu)) s = bn_error(BN_ERR_INTERNAL, "no layers %s and r", producer);
    if (s == BN_OK) gt_bn_relus_apart(net);
    if (s == BN_OK) s = lt_fill_normal(net, 11, 1.0, 0.0);
    if (s == BN_OK) s = bn_net_forward(net, 1);
    const size_t n = s == BN_OK ? bn_blob_count(p->out) : 0;
    float *y = malloc((n + 1) * sizeof *y), *ry = malloc((n + 1) * sizeof *ry);
    if (s == BN_OK && (!y || !ry)) s = bn_error(BN_ERR_NOMEM, "out of host memory");
    if (s == BN_OK) s = lt_read(p->out, y, n);
    if (s == BN_OK) s = lt_read(relu->out, ry, n);
    size_t bad = 0, positive = 0;
    for (size_t i = 0; s == BN_OK && i < n; i++) {
        const float want = y[i] > 0.0f ? y[i] : 0.0f;
        bad += memcmp(&want, &ry[i], sizeof want) != 0;
        positive += y[i] > 0.0f;
    }
    const int fused = relu ? relu->gpu_fused : 0;
    free(y);
    free(ry);
    bn_net_free(net);
    CHECK_MSG(s == BN_OK, "%s: %s", what, bn_last_error());
    CHECK_MSG(!bad && positive && positive < n && (fused & BN_FUSED_FORWARD),
              "%s: %zu of %zu outputs differ from max(y, 0) (%zu positive), fused %d", what, bad, n, positive, fused);
    return BN_PASS;
}
#endif

/* Under bf16 the ReLU after a convolution is written by the convolution's bias kernel where
 * cuDNN ran it (the NCHW and NHWC layouts) and by its own pass after blobnet's FP32 kernels on
 * FP32 copies, and the one after a batchnorm by its normalization: each time max(y, 0) of the
 * producer's BF16 output y, bit for bit. */
BN_TEST(gpu_bf16_fused_relus_are_the_max_of_their_producers_output)
{
    if (bn_device_count() == 0) BN_SKIP_TEST("no CUDA device");
#ifndef BN_WITH_CUDA
    return BN_PASS;
#else
    static const char conv[] = "[input]\nchannels=8\nheight=9\nwidth=7\n"
                               "[conv2d]\nname=c\nfilters=16\nsize=3\npad=1\ninit=he\n[relu]\nname=r\n";
    static const char bn[] = "[input]\nchannels=8\nheight=4\nwidth=6\n"
                             "[batchnorm]\nname=b\n[relu]\nname=r\n";
    static const int layouts[] = {BN_CONV_BF16_NCHW, BN_CONV_BF16_NHWC, BN_CONV_BF16_FP32};
    static const char *const names[] = {"conv2d then relu, nchw", "conv2d then relu, nhwc",
                                        "conv2d then relu, fp32 copies"};
    bn_ctx *ctx;
    CHECK_OK(bn_ctx_open(0, &ctx));
    int r = BN_PASS;
    for (size_t k = 0; k < sizeof layouts / sizeof *layouts && r == BN_PASS; k++) {
        bn_conv_bf16_force_layout(layouts[k]);
        r = relu_is_max_of_output(ctx, conv, "c", names[k]);
    }
    bn_conv_bf16_force_layout(BN_CONV_BF16_EITHER);
    if (r == BN_PASS) r = relu_is_max_of_output(ctx, bn, "b", "batchnorm then relu");
    return r;
#endif
}

/* ---- a second reader's gradient part, added by the kernels that read the gradient ---- */

/* A residual net in which three outputs have two readers: r0 (a ReLU whose backward pass its
 * batchnorm's kernels do on a device), o1 (a ReLU whose backward pass its add's kernels do on a
 * device) and d0 (a dense layer, whose type adds no part). */
static const char parts_text[] = "[input]\nchannels = 2\nheight = 6\nwidth = 6\n"
                                 "[conv2d]\nname = c0\nfilters = 4\nsize = 3\npad = 1\n"
                                 "[batchnorm]\nname = b0\n[relu]\nname = r0\n"
                                 "[conv2d]\nname = c1\nfilters = 4\nsize = 3\npad = 1\n"
                                 "[batchnorm]\nname = b1\n"
                                 "[add]\nname = s1\ninput = b1, r0\n[relu]\nname = o1\n"
                                 "[conv2d]\nname = c2\nfilters = 4\nsize = 3\npad = 1\n"
                                 "[add]\nname = s2\ninput = c2, o1\n"
                                 "[dense]\nname = d0\noutputs = 6\n"
                                 "[dense]\nname = d1\noutputs = 6\ninput = d0\n"
                                 "[add]\nname = s3\ninput = d1, d0\n"
                                 "[dense]\nname = d2\noutputs = 3\n[softmax_ce]\nname = loss\n";

BN_TEST(fusion_hands_a_second_readers_gradient_part_to_the_kernels_reading_the_gradient)
{
    bn_net *net;
    CHECK_OK(bn_net_from_text(parts_text, "parts.cfg", &net));
    CHECK_OK(bn_net_setup(net, 2, NULL, 0, 1));
    /* On the host nothing is fused until asked; the rules are the same as on a device. */
    bn_layer *r0 = bn_net_find_layer(net, "r0"), *o1 = bn_net_find_layer(net, "o1"), *s1 = bn_net_find_layer(net, "s1");
    bn_layer *d0 = bn_net_find_layer(net, "d0");
    CHECK(r0 && o1 && s1 && d0 && r0->num_grad_parts == 1 && o1->num_grad_parts == 1 && d0->num_grad_parts == 1);
    CHECK(!r0->grad_part_to_reader && !o1->grad_part_to_reader && !r0->dy_part && !s1->dy_part);
    const int o1_by_add = (o1->gpu_fused & BN_FUSED_BACKWARD) != 0;
    bn_net_fuse_grad_parts(net);
    CHECK(r0->grad_part_to_reader && r0->dy_part == r0->grad_parts[0]);
    CHECK(o1->grad_part_to_reader);
    /* o1's gradient is read by its own kernel, or by the add's where the add took its backward
     * pass (a device build's hook): the part goes to that reader. */
    CHECK(o1_by_add ? s1->dy_part == o1->grad_parts[0] && !o1->dy_part
                    : o1->dy_part == o1->grad_parts[0] && !s1->dy_part);
    CHECK_MSG(!d0->grad_part_to_reader && !d0->dy_part, "a dense layer's gradient parts are the network's to add");
    CHECK(bn_net_blob_unwritten(net, r0->index, 1) && bn_net_blob_unwritten(net, o1->index, 1));
    CHECK(!bn_net_blob_unwritten(net, d0->index, 1));
    bn_net_free(net);
    return BN_PASS;
}

#ifdef BN_WITH_CUDA
/* Gives every gradient part back to the network to add, as before bn_net_fuse_grad_parts. */
static void unfuse_parts(bn_net *net)
{
    for (int i = 0; i < net->num_layers; i++) {
        net->layers[i]->grad_part_to_reader = 0;
        net->layers[i]->dy_part = NULL;
    }
}

/* One training step of a and b, set up alike, their blobs poisoned first (NaN in FP32, through the
 * host copies under bf16) and fed alike from lc's data at seed: every parameter gradient, every
 * layer's input gradient that both nets hold whole and, with outputs, every output that both
 * write must be the same bits. */
static int step_same_bits(bn_ctx *ctx, bn_net *a, bn_net *b, const layer_case *lc, int bf16, uint64_t seed,
                          int outputs)
{
    for (int pass = 0; pass < 2; pass++) {
        bn_net *net = pass ? b : a;
        if (!bf16) CHECK_OK(gt_poison_net(net, ctx));
        for (int i = 0; bf16 && i < net->num_layers; i++) {
            CHECK_OK(gt_bf16_poison(net->layers[i]->out));
            CHECK_OK(gt_bf16_poison(net->layers[i]->out_grad));
        }
    }
    CHECK_OK(gt_step_alike(a, b, lc, seed));
    return gt_nets_same_bits(a, b, seed, GT_BITS_IN_GRADS | (outputs ? GT_BITS_OUTPUTS : 0));
}

/* One training step of parts_text on two nets, one with its parts added by the kernels that read
 * them and one with the network's sums, in precision bf16 or FP32: every parameter gradient, and
 * every layer's input gradient that both nets hold whole, must be the same bits. */
static int parts_same_bits(bn_ctx *ctx, int bf16, int n, int split)
{
    (void)split; /* the batchnorms take the way their channels fit */
    const layer_case lc = {.what = "gradient parts", .text = parts_text, .classes = 3};
    const uint64_t seed = lt_fresh_seed();
    bn_net *a, *b;
    CHECK_OK(gt_twin_nets(ctx, parts_text, "parts.cfg", bf16, seed, NULL, &a, &b));
    unfuse_parts(b);
    int summed = 0;
    for (int i = 0; i < a->num_layers; i++) summed += a->layers[i]->grad_part_to_reader;
    CHECK_MSG(summed == 2, "%s: %d outputs have their part added by a reader's kernels, expected 2 (r0, o1)",
              bf16 ? "bf16" : "fp32", summed);
    CHECK_OK(bn_net_set_batch(a, n));
    CHECK_OK(bn_net_set_batch(b, n));
    CHECK(step_same_bits(ctx, a, b, &lc, bf16, seed, 0) == BN_PASS);
    bn_net_free(a);
    bn_net_free(b);
    return BN_PASS;
}
#endif

BN_TEST(gpu_gradient_parts_added_by_their_readers_give_the_networks_sums_bits)
{
    if (bn_device_count() == 0) BN_SKIP_TEST("no CUDA device");
#ifdef BN_WITH_CUDA
    return gt_same_bits_cases(parts_same_bits, 1);
#else
    return BN_PASS;
#endif
}

/* ---- a batchnorm doing the backward pass of the ReLU after it ---- */

#ifdef BN_WITH_CUDA
/* The ReLUs r0 (two readers: its part goes to b0's kernels), r1 and r4 (one reader each; r4's a
 * channel join, of whose output r4's becomes a slice, so that b4 reads r4's gradient at the
 * join's stride) have their backward passes done by their batchnorms; b2 feeds an add, whose
 * kernels do o1's; b3's own output has two readers, so its part goes to b3's kernels. */
static const char bnrelu_text[] = "[input]\nchannels = 3\nheight = 6\nwidth = 6\n"
                                  "[conv2d]\nname = c0\nfilters = 4\nsize = 3\npad = 1\n"
                                  "[batchnorm]\nname = b0\n[relu]\nname = r0\n"
                                  "[conv2d]\nname = c1\nfilters = 4\nsize = 3\npad = 1\n"
                                  "[batchnorm]\nname = b1\n[relu]\nname = r1\n"
                                  "[conv2d]\nname = c2\nfilters = 4\nsize = 3\npad = 1\n"
                                  "[batchnorm]\nname = b2\n"
                                  "[add]\nname = s1\ninput = b2, r0\n[relu]\nname = o1\n"
                                  "[batchnorm]\nname = b3\n"
                                  "[conv2d]\nname = c3\nfilters = 4\nsize = 3\npad = 1\n"
                                  "[add]\nname = s2\ninput = c3, b3\n[relu]\nname = o2\n"
                                  "[batchnorm]\nname = b4\n[relu]\nname = r4\n"
                                  "[avgpool]\nname = u\nsize = 1\ninput = o2\n"
                                  "[concat]\nname = j\ninput = r4, u\n"
                                  "[dense]\nname = d\noutputs = 3\n[softmax_ce]\nname = loss\n";

/* Every batchnorm of net on its two-kernel path (split) or where its channel fits, its one;
 * returns the passes they have run so far on the one-kernel path, and on the other in *splits. */
static long bn_paths(bn_net *net, int split, long *splits)
{
    long fused = 0;
    *splits = 0;
    for (int i = 0; i < net->num_layers; i++) {
        if (strcmp(net->layers[i]->ops->type, "batchnorm") != 0) continue;
        batchnorm_priv *b = (batchnorm_priv *)net->layers[i]->priv;
        if (split >= 0) b->dev_fused = split ? -1 : 0;
        fused += b->fused_passes;
        *splits += b->split_passes;
    }
    return fused;
}

/* One training step of bnrelu_text on two nets: one as set up (the batchnorms doing their ReLUs'
 * backward passes and adding the parts they are handed), one with the ReLUs' own backward passes
 * and the network's sums of parts. Every parameter gradient, every input gradient and every
 * output that both nets hold must be the same bits. */
static int bnrelu_same_bits(bn_ctx *ctx, int bf16, int n, int split)
{
    const layer_case lc = {.what = "batchnorm's relus", .text = bnrelu_text, .classes = 3};
    const uint64_t seed = lt_fresh_seed();
    const char *what = bf16 ? "bf16" : "fp32";
    bn_net *a, *b;
    CHECK_OK(gt_twin_nets(ctx, bnrelu_text, "bnrelu.cfg", bf16, seed, NULL, &a, &b));
    const bn_layer *b0 = bn_net_find_layer(a, "b0"), *b3 = bn_net_find_layer(a, "b3");
    const bn_layer *r0 = bn_net_find_layer(a, "r0"), *r4 = bn_net_find_layer(a, "r4");
    CHECK(b0 && b3 && r0 && r4);
    CHECK_MSG(bn_blob_is_slice(r4->out) && bn_blob_is_slice(r4->out_grad), "%s: r4 is not a slice of j", what);
    CHECK_MSG(b0->dy_part == r0->grad_parts[0] && b3->dy_part == b3->grad_parts[0],
              "%s: the parts of r0 and b3 are not handed to b0 and b3", what);
    const int apart = gt_bn_relus_apart(b);
    unfuse_parts(b);
    CHECK_MSG(apart == 3, "%s: %d batchnorms do their relu's backward pass, expected 3 (b0, b1, b4)", what, apart);
    long splits0, splits;
    const long fused0 = bn_paths(a, split, &splits0);
    bn_paths(b, split, &splits);
    CHECK_OK(bn_net_set_batch(a, n));
    CHECK_OK(bn_net_set_batch(b, n));
    CHECK(step_same_bits(ctx, a, b, &lc, bf16, seed, 1) == BN_PASS);
    const long fused = bn_paths(a, -1, &splits) - fused0;
    splits -= splits0;
    CHECK_MSG(split ? fused == 0 && splits == 10 : splits == 0 && fused == 10,
              "%s: %ld one-kernel and %ld two-kernel batchnorm passes, expected 10 of the %s", what, fused, splits,
              split ? "second" : "first");
    bn_net_free(a);
    bn_net_free(b);
    return BN_PASS;
}
#endif

/* A batchnorm that does the backward pass of the ReLU after it masks the ReLU's output gradient
 * by its own output recomputed from its input, and stores only the ReLU's output: the same bits
 * as the ReLU's own pass over the stored output, in FP32 and bf16, on the one-kernel and the
 * two-kernel paths, with and without a second reader's part to add. */
BN_TEST(gpu_batchnorm_doing_its_relus_backward_pass_gives_the_relus_bits)
{
    if (bn_device_count() == 0) BN_SKIP_TEST("no CUDA device");
#ifdef BN_WITH_CUDA
    return gt_same_bits_cases(bnrelu_same_bits, 2);
#else
    return BN_PASS;
#endif
}
