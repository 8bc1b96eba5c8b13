/* test_fusion.c - the network's fusion rules (src/core/fusion.c), on the host: which pairs are
 * offered to the layer types' fusion hooks, in which order, and the one-reader condition. The
 * fused kernels themselves are checked against the CPU in test_gpu_layers.c. */
#include "core/net.h"
#include "core/registry.h"
#include "testing.h"

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

static int take_relu(bn_layer *l, bn_layer *relu, int after)
{
    note(after ? "%s takes %s fwd; " : "%s takes %s bwd; ", l->name, relu->name);
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
    .fuse_gpu = take_relu, .fuse_next_gpu = take_next,
};

static bn_status fusion_net(const char *layers, bn_net **net)
{
    bn_status s = bn_register_layer(&fusetest_ops);
    if (s != BN_OK && !bn_find_layer("fusetest")) return s;
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
