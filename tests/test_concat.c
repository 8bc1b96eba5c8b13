/* test_concat.c - the concat layer (layers/concat.c), a join of its inputs along the channels:
 * where each input lands, and in BF16 on the GPU against FP32 on the CPU. Its gradients are
 * checked in test_graph.c (a gradient check through a channel join, the errors of its shapes),
 * against the GPU in test_graph.c's graph case, and by the check kit (test_layercheck.c). */
#include "bf16_testing.h"
#include "core/net.h"
#include "layer_testing.h"
#include "testing.h"

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
