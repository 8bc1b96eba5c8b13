/* test_add.c - the add layer (layers/add.c), a weighted sum of its inputs: on the GPU against
 * the CPU, in FP32 and in BF16. Its CPU path is checked in graphs (test_graph.c: a gradient check
 * through a residual sum, an output read three times, the errors of its keys), against the GPU
 * in test_graph.c's graph case, and by the check kit (test_layercheck.c). */
#include "bf16_testing.h"
#include "gpu_testing.h"
#include "testing.h"

/* ---- FP32 on the GPU against the CPU ---- */

/* The sums' kernels, and the sum of a gradient with several parts (core/device.h's add), take
 * 16-byte packs where the element count and the pointers allow: 75 values an example, so packs
 * at batch 64 and one value at a time at 1, 3 and 257. Poolings of size 1 pass the input on
 * exactly, so the sum before the ReLU is the same on both sides and its kinks cannot move. */
BN_TEST(gpu_add_matches_cpu_in_packs_and_one_at_a_time)
{
    static const layer_case lc = {"add of two poolings (coeff 1, -0.5), its ReLU taken over, add of that and the input",
                                  "[input]\nchannels=3\nheight=5\nwidth=5\n"
                                  "[maxpool]\nname=m\nsize=1\n"
                                  "[avgpool]\nname=a\ninput=input\nsize=1\n"
                                  "[add]\nname=s\ninput=m, a\ncoeff=1, -0.5\n"
                                  "[relu]\nname=r\n"
                                  "[add]\nname=u\ninput=r, input\n",
                                  TOL_ELEMENTWISE, 0, 0, 0, 0, 0, 0};
    return gt_run_case(&lc);
}

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
