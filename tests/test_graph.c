/* test_graph.c - networks that are graphs (src/core/net.c): `input = a, b` in the model file,
 * outputs read by several layers with their gradients summed by the network, the add and
 * concat layers (layers/add.c, layers/concat.c) in a graph, every error the graph adds, and a
 * graph on the GPU against the CPU. */
#include <stdlib.h>

#include "core/net.h"
#include "gpu_testing.h"
#include "layer_testing.h"
#include "testing.h"
#include "train/optimizer.h"

#define GRAD_TOL 1e-2

/* A residual sum and a channel join on a tiny image: the data is read by three layers. */
static const char *const residual_concat =
    "[input]\nchannels=2\nheight=4\nwidth=4\n"
    "[conv2d]\nname=a\nfilters=2\nsize=3\npad=1\n"
    "[tanh]\nname=at\n"
    "[add]\nname=sum\ninput=at, input\ncoeff=1, 0.5\n"
    "[conv2d]\nname=b\ninput=input\nfilters=3\nsize=1\n"
    "[concat]\nname=join\ninput=sum, b, input\n"
    "[dense]\noutputs=4\n"
    "[softmax_ce]\n";

BN_TEST(graph_gradcheck_through_residual_sum_and_concat)
{
    CHECK(lt_gradcheck_text(residual_concat, "residual sum + concat, data read three times", 3, 0.0, 0.0, 4,
                            GRAD_TOL) == BN_PASS);
    return BN_PASS;
}

BN_TEST(graph_output_read_three_times_gets_the_sum_of_three_gradients)
{
    /* y = x + 2x + 3x through three readers of one layer's output: dL/dx = 6 dL/dy. */
    bn_net *net;
    CHECK_OK(lt_net("[input]\nchannels=1\nheight=1\nwidth=3\n"
                    "[tanh]\nname=t\n"
                    "[add]\nname=s\ninput=t, t, t\ncoeff=1, 2, 3\n", 2, 1, &net));
    CHECK(net->layers[0]->num_grad_parts == 2);
    CHECK(net->layers[1]->num_inputs == 3 && net->layers[1]->input_grads[0] == net->layers[0]->out_grad);
    float x[6] = {0.1f, -0.2f, 0.3f, 0.4f, -0.5f, 0.6f}, dy[6] = {1, 2, 3, 4, 5, 6}, out[6], dx[6];
    CHECK_OK(lt_write(net->input, x, 6));
    CHECK_OK(bn_net_forward(net, 1));
    CHECK_OK(lt_read(bn_net_output(net), out, 6));
    for (int i = 0; i < 6; i++) CHECK_NEAR(out[i], 6 * tanhf(x[i]), 1e-6);
    CHECK_OK(lt_write(net->layers[1]->out_grad, dy, 6));
    CHECK_OK(bn_net_backward(net));
    CHECK_OK(lt_read(net->input_grad, dx, 6));
    for (int i = 0; i < 6; i++) {
        double t = tanh(x[i]);
        CHECK_NEAR(dx[i], 6 * dy[i] * (1 - t * t), 1e-5);
    }
    bn_net_free(net);
    return BN_PASS;
}

BN_TEST(graph_without_input_keys_is_the_chain_it_always_was)
{
    bn_net *net;
    CHECK_OK(bn_net_from_text("[input]\nchannels=1\nheight=4\nwidth=4\n[conv2d]\nfilters=2\nsize=3\n[relu]\n"
                              "[dense]\noutputs=3\n[softmax_ce]\n", "chain.cfg", &net));
    for (int i = 0; i < net->num_layers; i++) CHECK(net->layers[i]->num_inputs == 1 && net->layers[i]->sources[0] == i - 1);
    CHECK_OK(bn_net_setup(net, 2, NULL, 0, 1));
    for (int i = 1; i < net->num_layers; i++) {
        CHECK(net->layers[i]->in == net->layers[i - 1]->out && net->layers[i]->in_grad == net->layers[i - 1]->out_grad);
        CHECK(net->layers[i - 1]->num_grad_parts == 0);
    }
    CHECK(net->layers[0]->in == net->input && net->layers[0]->in_grad == NULL);
    bn_net_free(net);
    return BN_PASS;
}

/* Each mistake of a graph model file, with what its message must say. */
static const struct {
    const char *what, *layers, *needle;
} graph_errors[] = {
    {"unknown input", "[relu]\nname=r\ninput=nothere\n", "g.cfg:7: [relu] layer r reads 'nothere', but no layer above"},
    {"later input", "[relu]\nname=r\ninput=s\n[relu]\nname=s\ninput=r\n", "reads 's', which comes later (line 8)"},
    {"own output", "[relu]\nname=r\ninput=r\n", "layer r cannot read its own output"},
    {"two inputs to a one-input type", "[relu]\nname=r\n[relu]\nname=s\ninput=r, input\n",
     "g.cfg:9: [relu] layer s (relu) takes one input, not 2"},
    {"one input to add", "[add]\nname=s\ninput=input\n", "layer s (add) takes 2 to 8 inputs, not 1"},
    {"empty name in the list", "[relu]\nname=r\n[add]\ninput=r,,input\n", "is not a list of layer names"},
    {"add of two shapes", "[conv2d]\nname=c\nfilters=2\nsize=1\n[add]\ninput=c, input\n",
     "g.cfg:9: layer add1 (add): input 2 is 1x4x4 but input 1 is 2x4x4"},
    {"concat of two sizes", "[maxpool]\nname=p\nsize=2\n[concat]\ninput=p, input\n",
     "g.cfg:8: layer concat1 (concat): input 2 is 1x4x4 but input 1 is 1x2x2"},
    {"coeff count", "[relu]\nname=r\n[add]\ninput=r, input\ncoeff=1, 2, 3\n", "coeff has 3 values for 2 inputs"},
    {"coeff not numbers", "[relu]\nname=r\n[add]\ninput=r, input\ncoeff=1, x\n", "is not a list of numbers"},
    {"unread output", "[relu]\nname=r\n[relu]\nname=s\ninput=input\n",
     "g.cfg:5: the output of layer r is read by no layer"},
    {"duplicate name", "[relu]\nname=r\n[relu]\nname=r\n", "layer name 'r' is used twice (also at line 5)"},
    {"layer named input", "[relu]\nname=input\n", "layer name 'input' is taken"},
};

BN_TEST(graph_errors_name_the_file_line_and_the_problem)
{
    for (size_t i = 0; i < sizeof graph_errors / sizeof graph_errors[0]; i++) {
        char text[1024];
        snprintf(text, sizeof text, "[input]\nchannels=1\nheight=4\nwidth=4\n%s", graph_errors[i].layers);
        bn_net *net = NULL;
        bn_clear_error();
        bn_status s = bn_net_from_text(text, "g.cfg", &net);
        if (s == BN_OK) {
            s = bn_net_setup(net, 1, NULL, 0, 1);
            bn_net_free(net);
        }
        CHECK_MSG(s == BN_ERR_USAGE, "%s: status %d (%s)", graph_errors[i].what, (int)s, bn_last_error());
        CHECK_MSG(strstr(bn_last_error(), graph_errors[i].needle) != NULL, "%s: \"%s\" lacks \"%s\"",
                  graph_errors[i].what, bn_last_error(), graph_errors[i].needle);
    }
    return BN_PASS;
}

/* Three SGD steps of net on fixed data; the parameter slab afterwards into w. */
static int train_three_steps(const char *text, float *w, size_t cap, size_t *count)
{
    bn_net *net;
    bn_optimizer *opt;
    CHECK_OK(lt_net(text, 4, 7, &net));
    CHECK_OK(bn_optimizer_create(net, &net->train, &opt));
    CHECK_OK(lt_train_steps(net, opt, 0, 3, 3, 100, 200));
    *count = net->num_params;
    CHECK(*count <= cap);
    CHECK_OK(lt_read(net->params, w, *count));
    bn_optimizer_free(opt);
    bn_net_free(net);
    return BN_PASS;
}

BN_TEST(graph_explicit_chain_trains_bit_for_bit_like_the_implicit_one)
{
    static const char *implicit = "[input]\nchannels=1\nheight=6\nwidth=6\n"
                                  "[conv2d]\nname=c\nfilters=2\nsize=3\n[maxpool]\nname=p\nsize=2\n"
                                  "[dense]\nname=d\noutputs=5\n[relu]\nname=r\n[dense]\nname=o\noutputs=3\n"
                                  "[softmax_ce]\nname=loss\n";
    static const char *explicit_inputs = "[input]\nchannels=1\nheight=6\nwidth=6\n"
                                         "[conv2d]\nname=c\ninput=input\nfilters=2\nsize=3\n"
                                         "[maxpool]\nname=p\ninput=c\nsize=2\n"
                                         "[dense]\nname=d\ninput=p\noutputs=5\n[relu]\nname=r\ninput=d\n"
                                         "[dense]\nname=o\ninput=r\noutputs=3\n[softmax_ce]\nname=loss\ninput=o\n";
    float a[256], b[256];
    size_t na, nb;
    CHECK(train_three_steps(implicit, a, 256, &na) == BN_PASS);
    CHECK(train_three_steps(explicit_inputs, b, 256, &nb) == BN_PASS);
    CHECK(na == nb && na > 50);
    CHECK_MSG(memcmp(a, b, na * sizeof *a) == 0, "the weights differ after three steps");
    return BN_PASS;
}

/* ---- the GPU against the CPU ---- */

/* A graph: c1's output has two readers (so its pooling is not fused), c1b's one (fused), a
 * residual sum with coefficients and the ReLU it takes over, a channel join with a pooled view of the data, which is read
 * by three layers, and a dense head with a fused ReLU. */
static const layer_case graph_case = {"graph: conv read twice, fused and unfused poolings, add, concat, dense head",
                                      "[input]\nchannels=2\nheight=8\nwidth=8\n"
                                      "[conv2d]\nname=c1\nfilters=4\nsize=3\npad=1\n"
                                      "[maxpool]\nname=p1\nsize=2\n"
                                      "[conv2d]\nname=c1b\ninput=c1\nfilters=4\nsize=1\n"
                                      "[maxpool]\nname=p2\nsize=2\n"
                                      "[add]\nname=s\ninput=p1, p2\ncoeff=1, -0.5\n"
                                      "[relu]\nname=r\n"
                                      "[avgpool]\nname=a\ninput=input\nsize=2\n"
                                      "[conv2d]\nname=c0\ninput=input\nfilters=2\nsize=2\nstride=2\n"
                                      "[concat]\nname=j\ninput=r, a, c0\n"
                                      "[dense]\nname=d1\noutputs=12\n[relu]\n"
                                      "[dense]\nname=d2\noutputs=5\n[softmax_ce]\n",
                                      TOL_GEMM, 5, 0, 0, 0, 1, 0};

BN_TEST(gpu_layer_graph_matches_cpu)
{
    if (bn_device_count() == 0) BN_SKIP_TEST("no CUDA device");
    bn_ctx *ctx;
    CHECK_OK(bn_ctx_open(0, &ctx));
    bn_net *net;
    CHECK_OK(bn_net_from_text(graph_case.text, graph_case.what, &net));
    CHECK_OK(bn_net_setup(net, 4, ctx, 0, 1));
    /* Nothing fuses across a branch: p1 shares c1's output with c1b; p2 is c1b's sole reader. */
    CHECK_MSG(bn_net_find_layer(net, "p1")->gpu_fused == 0, "p1 was fused into c1, which has two readers");
    CHECK_MSG(bn_net_find_layer(net, "p2")->gpu_fused & BN_FUSED_BACKWARD, "p2 was not fused into c1b");
    /* The residual sum takes both passes of the ReLU after it, and writes neither its own output
     * nor its output gradient; the comparison below checks what the two compute. */
    const int both = BN_FUSED_FORWARD | BN_FUSED_BACKWARD | BN_FUSED_NO_IN | BN_FUSED_NO_IN_GRAD;
    CHECK_MSG(bn_net_find_layer(net, "r")->gpu_fused == both, "r's passes were not taken by s: %d",
              bn_net_find_layer(net, "r")->gpu_fused);
    CHECK(bn_net_find_layer(net, "c1")->num_grad_parts == 1 && net->num_input_grad_parts == 0);
    bn_net_free(net);
    return gt_run_case(&graph_case);
}
