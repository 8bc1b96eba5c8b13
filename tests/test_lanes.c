/* test_lanes.c - a forward pass with its branches beside each other (src/core/net_lanes.c): the
 * lanes planned for an inception-style module and a residual block with a projection, and, on a
 * device, a captured forward pass that runs its branches on lanes and writes every layer's output
 * bit for bit as the same pass in one chain does. */
#include <stdlib.h>
#include <string.h>

#include "core/net.h"
#include "core/net_lanes.h"
#include "gpu/graph.h"
#include "gpu_testing.h"
#include "layer_testing.h"
#include "testing.h"

/* Three branches joined by a concat, then a residual block whose shortcut is a projection. */
static const char *const branches =
    "[input]\nchannels=3\nheight=8\nwidth=8\n"
    "[conv2d]\nname=stem\nfilters=8\nsize=3\npad=1\n"                  /* 0 */
    "[relu]\nname=stem_relu\n"                                          /* 1 */
    "[conv2d]\nname=b1\ninput=stem_relu\nfilters=4\nsize=1\n"           /* 2 */
    "[conv2d]\nname=b2r\ninput=stem_relu\nfilters=4\nsize=1\n"          /* 3 */
    "[relu]\nname=b2rr\n"                                               /* 4 */
    "[conv2d]\nname=b2\nfilters=6\nsize=3\npad=1\n"                     /* 5 */
    "[maxpool]\nname=b3p\ninput=stem_relu\nsize=3\nstride=1\npad=1\n"   /* 6 */
    "[conv2d]\nname=b3\nfilters=4\nsize=1\n"                            /* 7 */
    "[concat]\nname=join\ninput=b1, b2, b3\n"                           /* 8 */
    "[conv2d]\nname=c\nfilters=8\nsize=3\npad=1\n"                      /* 9 */
    "[conv2d]\nname=proj\ninput=join\nfilters=8\nsize=1\n"              /* 10 */
    "[add]\nname=sum\ninput=c, proj\n"                                  /* 11 */
    "[dense]\noutputs=3\n"                                              /* 12 */
    "[softmax_ce]\n";                                                   /* 13 */

/* Every layer but the dense one and the loss may run beside others; `arg` names one more that
 * may not. */
static int beside(const bn_layer *l, void *arg)
{
    if (arg && strcmp(l->name, (const char *)arg) == 0) return 0;
    return strcmp(l->ops->type, "dense") != 0 && !l->ops->is_loss;
}

static int same_lanes(const int *got, const int *want, int n, const char *what)
{
    for (int i = 0; i < n; i++)
        CHECK_MSG(got[i] == want[i], "%s: layer %d on lane %d, not %d", what, i, got[i], want[i]);
    return BN_PASS;
}

BN_TEST(lanes_each_branch_takes_a_lane_and_the_joins_wait_on_the_first)
{
    bn_net *net;
    CHECK_OK(bn_net_from_text(branches, "branches", &net));
    CHECK(net->num_layers == 14);
    int lane[14];
    /* The first reader of an output follows its producer; the others open lanes 1, 2, 3; a join
     * runs on its first input's lane. */
    static const int four[14] = {0, 0, 0, 1, 1, 1, 2, 2, 0, 0, 3, 0, 0, 0};
    CHECK(bn_net_plan_lanes(net, beside, NULL, 4, lane) == 4);
    CHECK(same_lanes(lane, four, 14, "four lanes") == BN_PASS);
    /* With three, the fourth branch takes lane 1 again. */
    static const int three[14] = {0, 0, 0, 1, 1, 1, 2, 2, 0, 0, 1, 0, 0, 0};
    CHECK(bn_net_plan_lanes(net, beside, NULL, 3, lane) == 3);
    CHECK(same_lanes(lane, three, 14, "three lanes") == BN_PASS);
    /* One lane: a chain. */
    static const int one[14] = {0};
    CHECK(bn_net_plan_lanes(net, beside, NULL, 1, lane) == 1);
    CHECK(same_lanes(lane, one, 14, "one lane") == BN_PASS);
    /* A layer that may not run beside others stays on lane 0, and its readers follow it there. */
    static const int held[14] = {0, 0, 0, 0, 0, 0, 1, 1, 0, 0, 2, 0, 0, 0};
    CHECK(bn_net_plan_lanes(net, beside, (void *)"b2r", 4, lane) == 3);
    CHECK(same_lanes(lane, held, 14, "b2r held on lane 0") == BN_PASS);
    bn_net_free(net);
    return BN_PASS;
}

static bn_status forward(void *net)
{
    return bn_net_forward((bn_net *)net, 0);
}

BN_TEST(gpu_captured_forward_on_lanes_matches_the_chain_bit_for_bit)
{
    if (bn_device_count() == 0) BN_SKIP_TEST("no CUDA device");
    bn_ctx *ctx;
    CHECK_OK(bn_ctx_open(0, &ctx));
    bn_net *net;
    CHECK_OK(bn_net_from_text(branches, "branches", &net));
    CHECK_OK(bn_net_setup(net, 16, ctx, 0, 7));
    const size_t in = bn_blob_count(net->input);
    float *x = malloc(in * sizeof *x), *labels = calloc(16, sizeof *labels);
    float **chain = calloc((size_t)net->num_layers, sizeof *chain);
    CHECK(x && labels && chain);
    for (size_t e = 0; e < in; e++) x[e] = (float)((e * 2654435761u) % 1000) / 500.0f - 1.0f;
    CHECK_OK(gt_put(net->input, x));
    CHECK_OK(gt_put(net->labels, labels));
    /* The eager pass, in one chain, makes every layer's plans, then the lanes and events. */
    CHECK_OK(bn_net_forward(net, 0));
    for (int i = 0; i < net->num_layers; i++) {
        const bn_blob *o = net->layers[i]->out;
        const float *v = bn_blob_host_rd(net->layers[i]->out);
        CHECK_MSG(v, "%s", bn_last_error());
        chain[i] = malloc(bn_blob_count(o) * sizeof(float));
        CHECK(chain[i]);
        memcpy(chain[i], v, bn_blob_count(o) * sizeof(float));
    }
    CHECK_MSG(ctx->num_lanes >= 3, "the eager pass made %d lanes for three branches", ctx->num_lanes);
    /* Captured (the pass runs on the lanes as it is captured, then the graph is launched), then
     * replayed over outputs poisoned with NaN. */
    bn_step_graph g = {0};
    int replayed = 0;
    CHECK_OK(bn_step_graph_run(&g, ctx, forward, net, &replayed));
    CHECK_MSG(g.exec && !g.failed, "the forward pass was not captured: %s", bn_last_error());
    CHECK_MSG(net->lanes_used >= 3, "the captured pass ran on %d lanes", net->lanes_used);
    CHECK_OK(gt_poison_net(net, ctx));
    CHECK_OK(bn_step_graph_run(&g, ctx, forward, net, &replayed));
    CHECK(replayed == 1);
    bn_net_mark_device_written(net);
    for (int i = 0; i < net->num_layers; i++) {
        const bn_blob *o = net->layers[i]->out;
        const float *v = bn_blob_host_rd(net->layers[i]->out);
        CHECK_MSG(v, "%s", bn_last_error());
        CHECK_MSG(memcmp(v, chain[i], bn_blob_count(o) * sizeof(float)) == 0,
                  "layer %s: the replayed pass on lanes wrote other values than the chain", net->layers[i]->name);
    }
    bn_step_graph_free(&g);
    for (int i = 0; i < net->num_layers; i++) free(chain[i]);
    free(chain);
    free(x);
    free(labels);
    bn_net_free(net);
    return BN_PASS;
}
