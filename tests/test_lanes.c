/* test_lanes.c - a network's passes with its branches beside each other (src/core/net_lanes.c):
 * the lanes planned for an inception-style module and a residual block with a projection, and,
 * on a device, a captured forward pass, and a captured step with its backward pass on lanes too,
 * that write every output and gradient bit for bit as the same passes in one chain do. */
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

/* A training step's passes without the update: the gradients zeroed, forward, backward. */
static bn_status step(void *arg)
{
    bn_net *net = arg;
    BN_TRY(bn_net_zero_grad(net));
    BN_TRY(bn_net_forward(net, 1));
    return bn_net_backward(net);
}

/* Copies of every blob the passes write: each layer's output and output gradient, the input
 * gradient and the parameter gradients. */
#define MAX_WRITTEN 64
typedef struct written {
    int count; /* the blobs listed; past MAX_WRITTEN only counted */
    bn_blob *blob[MAX_WRITTEN];
    float *copy[MAX_WRITTEN];
} written;

static void list(written *w, bn_blob *b)
{
    if (w->count < MAX_WRITTEN) w->blob[w->count] = b;
    w->count++;
}

static void list_blobs(bn_net *net, written *w)
{
    w->count = 0;
    for (int i = 0; i < net->num_layers; i++) {
        list(w, net->layers[i]->out);
        if (net->layers[i]->out_grad) list(w, net->layers[i]->out_grad);
    }
    list(w, net->input_grad);
    list(w, net->grads);
}

static int keep(bn_net *net, written *w)
{
    bn_net_mark_device_written(net);
    for (int k = 0; k < w->count; k++) {
        const float *v = bn_blob_host_rd(w->blob[k]);
        CHECK_MSG(v, "%s", bn_last_error());
        w->copy[k] = malloc(bn_blob_count(w->blob[k]) * sizeof(float));
        CHECK(w->copy[k]);
        memcpy(w->copy[k], v, bn_blob_count(w->blob[k]) * sizeof(float));
    }
    return BN_PASS;
}

static int same(bn_net *net, const written *w, const char *what)
{
    bn_net_mark_device_written(net);
    for (int k = 0; k < w->count; k++) {
        const float *v = bn_blob_host_rd(w->blob[k]);
        CHECK_MSG(v, "%s", bn_last_error());
        CHECK_MSG(memcmp(v, w->copy[k], bn_blob_count(w->blob[k]) * sizeof(float)) == 0,
                  "%s: %s differs between the pass on lanes and the chain", what, w->blob[k]->name);
    }
    return BN_PASS;
}

/* The net set up on the device with an input and labels; *ctx the context. */
static int branches_on_gpu(bn_ctx **ctx, bn_net **net)
{
    CHECK_OK(bn_ctx_open(0, ctx));
    CHECK_OK(bn_net_from_text(branches, "branches", net));
    CHECK_OK(bn_net_setup(*net, 16, *ctx, 1, 7));
    const size_t in = bn_blob_count((*net)->input);
    float *x = malloc(in * sizeof *x), labels[16];
    CHECK(x);
    for (size_t e = 0; e < in; e++) x[e] = (float)((e * 2654435761u) % 1000) / 500.0f - 1.0f;
    for (int e = 0; e < 16; e++) labels[e] = (float)(e % 3);
    CHECK_OK(gt_put((*net)->input, x));
    CHECK_OK(gt_put((*net)->labels, labels));
    free(x);
    return BN_PASS;
}

/* body run eagerly (one chain; it makes every layer's plans, then the lanes and events), then
 * captured (the passes run on the lanes as they are captured, and the graph is launched), then
 * replayed over outputs and gradients poisoned with NaN: every blob of w as the chain wrote it. */
static int chain_against_lanes(bn_ctx *ctx, bn_net *net, bn_status (*body)(void *), written *w, const char *what)
{
    CHECK_OK(body(net));
    CHECK(keep(net, w) == BN_PASS);
    CHECK_MSG(ctx->num_lanes >= 3, "the eager pass made %d lanes for three branches", ctx->num_lanes);
    bn_step_graph g = {0};
    int replayed = 0;
    CHECK_OK(bn_step_graph_run(&g, ctx, body, NULL, net, &replayed));
    CHECK_MSG(g.exec && !g.failed, "%s was not captured: %s", what, bn_last_error());
    CHECK_MSG(net->lanes_used >= 3, "the captured forward pass ran on %d lanes", net->lanes_used);
    CHECK_MSG(!net->backward_beside || net->backward_lanes_used >= 3, "the captured backward pass ran on %d lanes",
              net->backward_lanes_used);
    CHECK_OK(gt_poison_net(net, ctx));
    CHECK_OK(bn_step_graph_run(&g, ctx, body, NULL, net, &replayed));
    CHECK(replayed == 1);
    CHECK(same(net, w, what) == BN_PASS);
    bn_step_graph_free(&g);
    for (int k = 0; k < w->count; k++) free(w->copy[k]);
    return BN_PASS;
}

BN_TEST(gpu_captured_forward_on_lanes_matches_the_chain_bit_for_bit)
{
    if (bn_device_count() == 0) BN_SKIP_TEST("no CUDA device");
    bn_ctx *ctx;
    bn_net *net;
    CHECK(branches_on_gpu(&ctx, &net) == BN_PASS);
    written w = {0};
    for (int i = 0; i < net->num_layers; i++) list(&w, net->layers[i]->out);
    CHECK(w.count <= MAX_WRITTEN);
    CHECK(chain_against_lanes(ctx, net, forward, &w, "the forward pass") == BN_PASS);
    bn_net_free(net);
    return BN_PASS;
}

BN_TEST(gpu_captured_step_with_a_backward_on_lanes_matches_the_chain_bit_for_bit)
{
    if (bn_device_count() == 0) BN_SKIP_TEST("no CUDA device");
    bn_ctx *ctx;
    bn_net *net;
    CHECK(branches_on_gpu(&ctx, &net) == BN_PASS);
    net->backward_beside = 1;
    written w;
    list_blobs(net, &w);
    CHECK(w.count <= MAX_WRITTEN);
    CHECK(chain_against_lanes(ctx, net, step, &w, "the step") == BN_PASS);
    bn_net_free(net);
    return BN_PASS;
}
