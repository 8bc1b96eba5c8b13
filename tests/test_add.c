/* test_add.c - the add layer (layers/add.c), a weighted sum of its inputs: in BF16 on the GPU
 * against FP32 on the CPU. Its CPU path is checked in graphs (test_graph.c: a gradient check
 * through a residual sum, an output read three times, the errors of its keys), against the GPU
 * in test_graph.c's graph case, and by the check kit (test_layercheck.c). */
#include "bf16_testing.h"
#include "testing.h"

/* ---- BF16 on the GPU against FP32 on the CPU ---- */

/* add with and without coefficients over poolings of the input: a residual sum; the input read
 * by two layers, so its gradient is a sum of two parts. */
BN_TEST(gpu_bf16_add_matches_cpu)
{
    static const bf16_case cases[] = {
        {"bf16 add of two poolings (coeff 1, -0.5), add of two (plain)",
         "[input]\nchannels=3\nheight=6\nwidth=6\n"
         "[maxpool]\nname=m\nsize=2\n"
         "[avgpool]\nname=a\ninput=input\nsize=2\n"
         "[add]\nname=s\ninput=m, a\ncoeff=1, -0.5\n"
         "[add]\nname=t\ninput=s, m\n",
         TOL_CHAIN, 1, 0, 0},
        /* A ReLU after a sum runs in the sum's kernels (bn_add_fuse_relu) in BF16 as in FP32. */
        {"bf16 add of two poolings, its ReLU taken over, and a second add",
         "[input]\nchannels=3\nheight=6\nwidth=6\n"
         "[maxpool]\nname=m\nsize=2\n"
         "[avgpool]\nname=a\ninput=input\nsize=2\n"
         "[add]\nname=s\ninput=m, a\ncoeff=1, -0.5\n"
         "[relu]\nname=r\n"
         "[add]\nname=t\ninput=r, m\n",
         TOL_CHAIN, 1, 0, 0},
    };
    return gt_bf16_run_cases(cases, sizeof cases / sizeof cases[0]);
}
