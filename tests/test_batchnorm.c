/* test_batchnorm.c - the batchnorm layer (layers/batchnorm.c) and layer buffers: gradients at
 * several shapes, the normalization and running averages against hand-worked values, the
 * evaluation pass, and buffers kept apart from parameters; on the GPU against the CPU in
 * training and evaluation, and BF16 against FP32. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "batchnorm.h"
#include "bf16_testing.h"
#include "core/net.h"
#include "gpu_testing.h"
#include "layer_testing.h"
#include "testing.h"
#include "train/checkpoint.h"
#include "train/optimizer.h"

#define GRAD_TOL 1e-2

BN_TEST(batchnorm_gradcheck_at_several_shapes)
{
    static const struct {
        const char *what, *text;
        int batch, classes;
    } cases[] = {
        {"batchnorm 3x5x5 batch 4", "[input]\nchannels=3\nheight=5\nwidth=5\n[batchnorm]\n", 4, 0},
        {"batchnorm 1x1x1 features 6 batch 5", "[input]\nchannels=6\nheight=1\nwidth=1\n[batchnorm]\nmomentum=0.3\n", 5, 0},
        {"batchnorm 2x7x3 batch 2", "[input]\nchannels=2\nheight=7\nwidth=3\n[batchnorm]\neps=1e-3\n", 2, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        CHECK_MSG(lt_gradcheck_text(cases[i].text, cases[i].what, cases[i].batch, 0.0, 0.0, cases[i].classes,
                                    GRAD_TOL) == BN_PASS, "%s", cases[i].what);
    return BN_PASS;
}

/* Normalizing a dense layer's six outputs over a batch of six bends the loss sharply: at the
 * default step the central differences' truncation error reached 0.9e-2 in 25 runs; a step of
 * 1e-3 keeps it near 1e-3. */
#define NET_EPS 1e-3

BN_TEST(batchnorm_gradcheck_through_a_network)
{
    uint64_t seed = lt_fresh_seed();
    bn_net *net;
    CHECK_OK(lt_net("[input]\nchannels=2\nheight=6\nwidth=6\n[conv2d]\nfilters=4\nsize=3\n[batchnorm]\n[tanh]\n"
                    "[dense]\noutputs=5\n[batchnorm]\n[softmax_ce]\n", 6, seed, &net));
    CHECK_OK(lt_fill_normal(net, seed, 1.0, 0));
    CHECK_OK(lt_fill_labels(net, seed, 5));
    CHECK(lt_gradcheck(net, "conv, batchnorm, tanh, dense, batchnorm, softmax_ce", seed, NET_EPS, GRAD_TOL) == BN_PASS);
    bn_net_free(net);
    return BN_PASS;
}

/* Two channels, batch 2, plane 2: channel 0 holds 1, 2, 3, 4 and channel 1 holds 10 four times. */
static int small_net(bn_net **net, float *x)
{
    CHECK_OK(lt_net("[input]\nchannels=2\nheight=1\nwidth=2\n[batchnorm]\nname=bn\nmomentum=0.25\n", 2, 1, net));
    const float v[8] = {1, 2, 10, 10, 3, 4, 10, 10};
    memcpy(x, v, sizeof v);
    CHECK_OK(lt_write((*net)->input, x, 8));
    return BN_PASS;
}

BN_TEST(batchnorm_training_normalizes_and_moves_the_running_averages)
{
    bn_net *net;
    float x[8], y[8], rm[2], rv[2];
    CHECK(small_net(&net, x) == BN_PASS);
    bn_layer *l = net->layers[0];
    CHECK(l->num_params == 2 && l->num_buffers == 2 && net->num_params == 4 && net->num_buffer_floats == 4);
    CHECK_OK(bn_net_forward(net, 1));
    CHECK_OK(lt_read(l->out, y, 8));
    /* Channel 0: mean 2.5, biased variance 1.25; channel 1: variance 0, so y = 0. */
    double inv = 1.0 / sqrt(1.25 + 1e-5);
    const int ch0[4] = {0, 1, 4, 5};
    for (int k = 0; k < 4; k++) CHECK_NEAR(y[ch0[k]], (x[ch0[k]] - 2.5) * inv, 1e-6);
    CHECK(y[2] == 0.0f && y[3] == 0.0f && y[6] == 0.0f && y[7] == 0.0f);
    CHECK_OK(lt_read(l->buffers[0].value, rm, 2));
    CHECK_OK(lt_read(l->buffers[1].value, rv, 2));
    /* running = 0.75 * running + 0.25 * batch, with the unbiased variance (5/3 for channel 0). */
    CHECK_NEAR(rm[0], 0.25 * 2.5, 1e-7);
    CHECK_NEAR(rm[1], 0.25 * 10.0, 1e-7);
    CHECK_NEAR(rv[0], 0.75 + 0.25 * (5.0 / 3.0), 1e-7);
    CHECK_NEAR(rv[1], 0.75, 1e-7);
    bn_net_free(net);
    return BN_PASS;
}

BN_TEST(batchnorm_evaluation_uses_the_running_averages)
{
    bn_net *net;
    float x[8], y[8];
    CHECK(small_net(&net, x) == BN_PASS);
    bn_layer *l = net->layers[0];
    const float rm[2] = {1.0f, -2.0f}, rv[2] = {4.0f, 0.25f}, w[2] = {2.0f, 3.0f}, b[2] = {0.5f, -1.0f};
    CHECK_OK(lt_write(l->buffers[0].value, rm, 2));
    CHECK_OK(lt_write(l->buffers[1].value, rv, 2));
    CHECK_OK(lt_write(l->params[0].value, w, 2));
    CHECK_OK(lt_write(l->params[1].value, b, 2));
    CHECK_OK(bn_net_forward(net, 0));
    CHECK_OK(lt_read(l->out, y, 8));
    for (int i = 0; i < 8; i++) {
        int c = (i / 2) % 2;
        CHECK_NEAR(y[i], (x[i] - rm[c]) / sqrt(rv[c] + 1e-5) * w[c] + b[c], 1e-5);
    }
    /* Evaluation leaves the running averages alone. */
    float after[2];
    CHECK_OK(lt_read(l->buffers[1].value, after, 2));
    CHECK(after[0] == rv[0] && after[1] == rv[1]);
    bn_net_free(net);
    return BN_PASS;
}

BN_TEST(batchnorm_buffers_are_not_parameters)
{
    bn_net *net;
    CHECK_OK(lt_net("[input]\nchannels=3\nheight=2\nwidth=2\n[batchnorm]\nname=bn\n[dense]\noutputs=2\n[softmax_ce]\n",
                    4, 1, &net));
    bn_layer *l = net->layers[0];
    CHECK(strcmp(l->buffers[0].name, "running_mean") == 0 && strcmp(l->buffers[1].name, "running_var") == 0);
    CHECK(strcmp(l->buffers[0].value->name, "bn.running_mean") == 0);
    CHECK(net->num_params == 3 + 3 + 12 * 2 + 2 && net->num_buffer_floats == 6);
    float rv[3];
    CHECK_OK(lt_read(l->buffers[1].value, rv, 3));
    CHECK(rv[0] == 1.0f && rv[1] == 1.0f && rv[2] == 1.0f);
    /* The gradient check runs many training passes and gives the buffers back as they were. */
    CHECK_OK(lt_fill_normal(net, 3, 1.0, 0));
    CHECK_OK(lt_fill_labels(net, 3, 2));
    float before[6], after[6];
    CHECK_OK(lt_read(net->buffers, before, 6));
    CHECK(lt_gradcheck(net, "batchnorm, dense, softmax_ce", 3, 0.0, GRAD_TOL) == BN_PASS);
    CHECK_OK(lt_read(net->buffers, after, 6));
    CHECK(memcmp(before, after, sizeof before) == 0);
    bn_net_free(net);
    return BN_PASS;
}

/* Buffers go into checkpoints as "<layer>.<buffer>" and come back on a resume, so the resumed
 * run goes on bit for bit, and a weights-only load (test, predict) brings them too. */
BN_TEST(batchnorm_buffers_round_trip_through_checkpoints)
{
    static const char *text = "[input]\nchannels=2\nheight=4\nwidth=4\n[train]\noptimizer=adamw\nlr=0.01\n"
                              "[conv2d]\nname=c\nfilters=3\nsize=3\n[batchnorm]\nname=bn\n[relu]\n"
                              "[dense]\noutputs=4\n[softmax_ce]\n";
    char path[512];
    snprintf(path, sizeof path, "%s/bn.safetensors", bn_test_tmpdir());
    bn_net *a, *b;
    bn_optimizer *oa, *ob;
    CHECK_OK(lt_net(text, 5, 9, &a));
    CHECK_OK(lt_net(text, 5, 9, &b));
    CHECK_OK(bn_optimizer_create(a, &a->train, &oa));
    CHECK_OK(bn_optimizer_create(b, &b->train, &ob));
    CHECK_OK(lt_train_steps(a, oa, 0, 3, 4, 40, 50));
    bn_train_state st = {.seed = 9, .step = 3};
    CHECK_OK(bn_checkpoint_save(path, a, oa, &st));
    CHECK_OK(bn_checkpoint_load(path, b, ob, &st));
    float ra[6], rb[6];
    CHECK_OK(lt_read(a->buffers, ra, 6));
    CHECK_OK(lt_read(b->buffers, rb, 6));
    CHECK(memcmp(ra, rb, sizeof ra) == 0 && ra[3] != 1.0f);
    CHECK_OK(lt_train_steps(a, oa, 3, 2, 4, 40, 50));
    CHECK_OK(lt_train_steps(b, ob, 3, 2, 4, 40, 50));
    float wa[256], wb[256];
    CHECK(a->num_params <= 256);
    CHECK_OK(lt_read(a->params, wa, a->num_params));
    CHECK_OK(lt_read(b->params, wb, b->num_params));
    CHECK_OK(lt_read(a->buffers, ra, 6));
    CHECK_OK(lt_read(b->buffers, rb, 6));
    CHECK_MSG(memcmp(wa, wb, a->num_params * sizeof *wa) == 0 && memcmp(ra, rb, sizeof ra) == 0,
              "the resumed run went another way");
    /* The weights alone (test, predict) bring the running averages along too. */
    bn_net *c;
    CHECK_OK(lt_net(text, 5, 10, &c));
    CHECK_OK(bn_checkpoint_save(path, a, NULL, NULL));
    CHECK_OK(bn_checkpoint_load_weights(path, c));
    float rc[6];
    CHECK_OK(lt_read(c->buffers, rc, 6));
    CHECK(memcmp(ra, rc, sizeof ra) == 0);
    /* A model without the batchnorm cannot take the file. */
    bn_net *plain;
    CHECK_OK(lt_net("[input]\nchannels=2\nheight=4\nwidth=4\n[conv2d]\nname=c\nfilters=3\nsize=3\n[relu]\n"
                    "[dense]\noutputs=4\n[softmax_ce]\n", 5, 9, &plain));
    CHECK_ERR(bn_checkpoint_load_weights(path, plain), BN_ERR_DATA, "was saved from a different model than");
    bn_net_free(plain);
    bn_net_free(c);
    bn_optimizer_free(oa);
    bn_optimizer_free(ob);
    bn_net_free(a);
    bn_net_free(b);
    return BN_PASS;
}

/* ---- the GPU against the CPU ---- */

/* Batch normalization after a convolution and after a dense layer, in training (the batch's
 * statistics; run_case compares every blob and gradient) and in evaluation (the running averages
 * the training passes left, compared too). */
/* A tanh between each layer and its batchnorm: the normalization takes out the mean, so a bias
 * right before it gets a gradient of rounding noise only, which no tolerance can compare. */
static const layer_case batchnorm_case = {"conv 3x9x7 k3 x6, tanh, batchnorm, relu, dense 20, tanh, batchnorm, softmax_ce",
                                          "[input]\nchannels=3\nheight=9\nwidth=7\n"
                                          "[conv2d]\nfilters=6\nsize=3\npad=1\n[tanh]\n[batchnorm]\n[relu]\n"
                                          "[dense]\noutputs=20\n[tanh]\n[batchnorm]\nmomentum=0.3\n[softmax_ce]\n",
                                          TOL_GEMM, 7, 0, 0, 0, 0, 0};

/* Planes of 8x8 (and a dense layer's of 1): the per-element kernels' packs of 4 floats, and
 * their one-element path beside them; the case above has planes of 63. */
static const layer_case batchnorm_packed_case = {"conv 2x8x8 k3 pad 1 x5, tanh, batchnorm, dense 8, tanh, batchnorm, "
                                                 "softmax_ce",
                                                 "[input]\nchannels=2\nheight=8\nwidth=8\n"
                                                 "[conv2d]\nfilters=5\nsize=3\npad=1\n[tanh]\n[batchnorm]\n"
                                                 "[dense]\noutputs=8\n[tanh]\n[batchnorm]\n[softmax_ce]\n",
                                                 TOL_GEMM, 7, 0, 0, 0, 0, 0};

BN_TEST(gpu_layer_batchnorm_matches_cpu_in_training_and_evaluation)
{
    int r = gt_run_case(&batchnorm_case);
    if (r == BN_PASS) r = gt_run_case(&batchnorm_packed_case);
    if (r != BN_PASS) return r;
    bn_ctx *ctx;
    CHECK_OK(bn_ctx_open(0, &ctx));
    uint64_t seed = lt_fresh_seed();
    bn_net *cpu, *gpu;
    CHECK_OK(bn_net_from_text(batchnorm_case.text, "batchnorm", &cpu));
    CHECK_OK(bn_net_from_text(batchnorm_case.text, "batchnorm", &gpu));
    CHECK_OK(bn_net_setup(cpu, 64, NULL, 0, seed));
    CHECK_OK(bn_net_setup(gpu, 64, ctx, 0, seed));
    float *start = NULL;
    for (int step = 0; step < 3; step++) {
        free(start);
        CHECK_OK(gt_feed(cpu, gpu, &batchnorm_case, seed + (uint64_t)step, &start));
        CHECK_OK(bn_net_forward(cpu, 1));
        CHECK_OK(bn_net_forward(gpu, 1));
    }
    CHECK_OK(bn_net_forward(cpu, 0));
    CHECK_OK(bn_net_forward(gpu, 0));
    free(start);
    /* The first batchnorm's normalization through the ReLU after it (on a device the batchnorm
     * stores the ReLU's output only). */
    bn_blob *pairs[][2] = {{cpu->buffers, gpu->buffers}, {bn_net_output(cpu), bn_net_output(gpu)},
                           {cpu->layers[3]->out, gpu->layers[3]->out}};
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
        const float *a = bn_blob_host_rd(pairs[i][0]), *b = bn_blob_host_rd(pairs[i][1]);
        CHECK(a && b);
        size_t where;
        double d = lt_rel_diff(b, a, NULL, bn_blob_count(pairs[i][0]), &where);
        CHECK_MSG(d <= TOL_GEMM, "evaluation: %s differs by %.3g of scale at %zu (seed %llu)", pairs[i][0]->name, d,
                  where, (unsigned long long)seed);
    }
    bn_net_free(cpu);
    bn_net_free(gpu);
    return BN_PASS;
}

/* Which way both passes of a GPU net's batchnorm "bn" went at `batch` (one training forward and
 * backward on data drawn for the case, in ctx's precision): one kernel each where `fused` and the
 * device has clusters, else two each. Also that a layer "r" writes a slice of a join exactly
 * where the case's name says "joined". */
static int check_paths(bn_ctx *ctx, const layer_case *lc, int batch, uint64_t seed, int fused)
{
    bn_net *cpu, *gpu;
    CHECK_OK(bn_net_from_text(lc->text, lc->what, &cpu));
    CHECK_OK(bn_net_from_text(lc->text, lc->what, &gpu));
    bn_status s = bn_net_setup(cpu, batch, NULL, 0, seed);
    if (s == BN_OK) s = bn_net_setup(gpu, batch, ctx, 0, seed);
    float *start = NULL;
    if (s == BN_OK) s = gt_feed(cpu, gpu, lc, seed, &start);
    free(start);
    if (s == BN_OK) s = bn_net_forward(gpu, 1);
    if (s == BN_OK) s = bn_net_backward(gpu);
    const bn_layer *l = bn_net_find_layer(gpu, "bn");
    const batchnorm_priv *p = l ? (const batchnorm_priv *)l->priv : NULL;
    const long one = p ? p->fused_passes : -1, two = p ? p->split_passes : -1;
    const int clusters = p && p->dev_fused != -1; /* a device without clusters: two kernels always */
    const bn_layer *r = bn_net_find_layer(gpu, "r");
    const int sliced = r && bn_blob_is_slice(r->out);
    bn_net_free(cpu);
    bn_net_free(gpu);
    CHECK_OK(s);
    CHECK_MSG(sliced == (strstr(lc->what, "joined") != NULL), "%s: the ReLU's output is %sa slice", lc->what,
              sliced ? "" : "not ");
    const long want = fused && clusters ? 2 : 0;
    CHECK_MSG(one == want && two == 2 - want, "%s%s at batch %d: %ld passes in one kernel, %ld in two (want %ld, %ld)",
              lc->what, ctx->bf16 ? " (bf16)" : "", batch, one, two, want, 2 - want);
    return BN_PASS;
}

/* The GPU's two ways of a training pass: one kernel, where a cluster of blocks holds each
 * channel's values (batch x plane up to 8 x 256 x 32 in packs, 8 x 256 x 16 one value at a
 * time), or two (the partial sums, then the elements). Planes of 24x24 (packs of 4) and 17x17
 * (one value at a time), with a ReLU fused on each side, and one whose ReLU writes a slice of a
 * channel join: every size of gt_run_case against the CPU, then the way each pass went asserted
 * at batch 64 (one kernel) and 257 (two: 257 x 576 and 257 x 289 are past both limits). */
BN_TEST(gpu_batchnorm_one_kernel_and_two_kernel_passes_match_cpu)
{
    static const layer_case cases[] = {
        {"tanh, relu, batchnorm 3x24x24, relu", "[input]\nchannels=3\nheight=24\nwidth=24\n[tanh]\n[relu]\n"
         "[batchnorm]\nname=bn\nmomentum=0.3\n[relu]\n", TOL_GEMM, 0, 0, 0, 0, 0, 0},
        {"tanh, relu, batchnorm 2x17x17, relu", "[input]\nchannels=2\nheight=17\nwidth=17\n[tanh]\n[relu]\n"
         "[batchnorm]\nname=bn\n[relu]\n", TOL_GEMM, 0, 0, 0, 0, 0, 0},
        /* The ReLU's output a slice of a channel join's, its examples further apart than the
         * layer's own output's. */
        {"tanh, batchnorm 3x24x24, relu joined after a tanh of the input",
         "[input]\nchannels=3\nheight=24\nwidth=24\n[tanh]\n[batchnorm]\nname=bn\n[relu]\nname=r\n"
         "[tanh]\nname=u\ninput=input\n[concat]\nname=j\ninput=u, r\n", TOL_GEMM, 0, 0, 0, 0, 0, 0},
    };
    const int ncases = (int)(sizeof cases / sizeof cases[0]);
    for (int i = 0; i < ncases; i++) {
        int r = gt_run_case(&cases[i]);
        if (r != BN_PASS) return r;
    }
    bn_ctx *ctx;
    CHECK_OK(bn_ctx_open(0, &ctx));
    const uint64_t seed = lt_fresh_seed();
    static const int batches[2] = {64, 257};
    for (int i = 0; i < ncases; i++)
        for (int b = 0; b < 2; b++) CHECK(check_paths(ctx, &cases[i], batches[b], seed, b == 0) == BN_PASS);
    return BN_PASS;
}

/* ---- BF16 on the GPU against FP32 on the CPU ---- */

/* On the input directly, in training (the batch's statistics, the running averages moved) and
 * then in evaluation (the running averages). */
BN_TEST(gpu_bf16_batchnorm_matches_cpu)
{
    /* Planes of 20 take one element at a time, planes of 24 packs of 8 BF16 values. The input is
     * doubled first (an add of it twice): the running variance, which starts at 1, then moves by
     * O(1) towards the batch's 4, and its difference is judged against that move; on the input as
     * drawn (variance 1) the move is of the sampling noise's size, and BF16's rounding a visible
     * part of it. Eight channels, so that the scale of the bias gradient (the largest of the
     * channels' sums of dy) is not set by one sum that happens to be small. */
    static const bf16_case cases[] = {{"bf16 batchnorm 6x5x4", "[input]\nchannels=6\nheight=5\nwidth=4\n"
                                       "[add]\nname=twice\ninput=input, input\ncoeff=1.5, 0.5\n"
                                       "[batchnorm]\nmomentum=0.3\n",
                                       TOL_LAYER, 0, 1, 0},
                                      {"bf16 batchnorm 8x4x6", "[input]\nchannels=8\nheight=4\nwidth=6\n"
                                       "[add]\nname=twice\ninput=input, input\ncoeff=1.5, 0.5\n"
                                       "[batchnorm]\nmomentum=0.3\n",
                                       TOL_LAYER, 0, 1, 0},
                                      /* A ReLU before the layer, whose input gradient the
                                       * layer's kernel writes under bf16 as in FP32 (the
                                       * pooling of size 1 keeps the add from taking the ReLU).
                                       * One after it is checked against the layer's own BF16
                                       * output (test_fusion.c): against FP32 its kinks move. */
                                      {"bf16 batchnorm 8x4x6, relu before", "[input]\nchannels=8\nheight=4\n"
                                       "width=6\n[add]\nname=twice\ninput=input, input\ncoeff=1.5, 0.5\n"
                                       "[avgpool]\nsize=1\n[relu]\n[batchnorm]\nmomentum=0.3\n",
                                       TOL_LAYER, 0, 1, 0}};
    return gt_bf16_run_cases(cases, sizeof cases / sizeof cases[0]);
}

/* Both ways of a training pass under bf16 (packs of 8 values): 8x32x32 takes one kernel at batch
 * 64 (8,192 packs a channel, what a cluster's registers hold) and two at 257. Against the CPU at
 * 3, 64, 37 and 257, then the way each pass went asserted. Eight channels, as above, so that no
 * one small sum sets a gradient's scale. */
BN_TEST(gpu_bf16_batchnorm_one_kernel_and_two_kernel_passes_match_cpu)
{
    static const bf16_case bc = {"bf16 batchnorm 8x32x32", "[input]\nchannels=8\nheight=32\nwidth=32\n"
                                 "[add]\nname=twice\ninput=input, input\ncoeff=1.5, 0.5\n"
                                 "[batchnorm]\nname=bn\nmomentum=0.3\n",
                                 TOL_LAYER, 0, 1, 0};
    int r = gt_bf16_run_case_also_at(&bc, 257);
    if (r != BN_PASS) return r;
    bn_ctx *ctx;
    CHECK_OK(bn_ctx_open(0, &ctx));
    const uint64_t seed = lt_fresh_seed();
    const layer_case lc = {bc.what, bc.text, bc.tol, 0, 0, 0, 0, 0, 0};
    ctx->bf16 = 1;
    r = check_paths(ctx, &lc, 64, seed, 1);
    if (r == BN_PASS) r = check_paths(ctx, &lc, 257, seed, 0);
    ctx->bf16 = 0;
    return r;
}
