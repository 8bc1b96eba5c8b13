/* test_softmax_ce.c - the loss layer: probabilities, loss and correct count against hand
 * values (large logits included), its gradient, bad labels, shapes and gradient checks; on the
 * GPU against the CPU, with label smoothing, as the dense head that also runs the dense layer
 * before it, and its loss and accuracy reductions at every batch size. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/net.h"
#include "core/rng.h"
#include "gpu_testing.h"
#include "layer_testing.h"
#include "layers.h"
#include "testing.h"

/* Central differences through a float32 forward agree to a few 1e-3 at worst (gradcheck.h
 * explains the choice of eps); a wrong gradient is off by far more. */
#define GRAD_TOL 1e-2

static const char *const three_classes = "[input]\nchannels=3\nheight=1\nwidth=1\n[softmax_ce]\n";

/* Loads logits and labels into a 3-class network of batch n. */
static bn_status load(bn_net **net, int n, const float *z, const float *labels)
{
    BN_TRY(lt_net(three_classes, n, 1, net));
    BN_TRY(lt_write((*net)->input, z, (size_t)n * 3));
    return lt_write((*net)->labels, labels, (size_t)n);
}

/* Example 0: logits (1, 2, 3), label 2: p = e^z / (e + e^2 + e^3) and loss -log p2.
 * Example 1: (1000, 0, -1000), label 1: p = (1, e^-1000, 0) and loss exactly 1000, finite.
 * Example 2: (5, 5, 1), label 1: the tie goes to class 0, so it is not counted correct. */
BN_TEST(softmax_ce_forward_matches_hand_values)
{
    static const float z[] = {1, 2, 3, 1000, 0, -1000, 5, 5, 1}, labels[] = {2, 1, 1};
    bn_net *net;
    CHECK_OK(load(&net, 3, z, labels));
    CHECK_OK(bn_net_forward(net, 0));
    float p[9];
    CHECK_OK(lt_read(bn_net_output(net), p, 9));
    static const double expect[] = {0.09003057, 0.24472847, 0.66524096, 1, 0, 0};
    for (int i = 0; i < 6; i++) CHECK_NEAR(p[i], expect[i], 1e-7);
    CHECK_NEAR(p[6], 0.49546264, 1e-7);
    double loss, correct;
    CHECK_OK(bn_net_metrics(net, &loss, &correct));
    double loss2 = 0.70226332; /* log(2 + e^-4): label 1 of (5, 5, 1) */
    CHECK_NEAR(loss, 0.40760596 + 1000 + loss2, 1e-4); /* a float sum near 1000 */
    CHECK(correct == 1);
    bn_net_free(net);
    return BN_PASS;
}

/* dL/dz = (p - onehot) / n, n the current batch (2 of a capacity of 3 here). */
BN_TEST(softmax_ce_gradient_is_p_minus_onehot_over_batch)
{
    static const float z[] = {1, 2, 3, 0, 0, 0, 7, 7, 7}, labels[] = {2, 0, 0};
    bn_net *net;
    CHECK_OK(load(&net, 3, z, labels));
    CHECK_OK(bn_net_set_batch(net, 2));
    CHECK_OK(bn_net_forward(net, 1));
    CHECK_OK(bn_net_backward(net));
    float dz[6];
    CHECK_OK(lt_read(net->input_grad, dz, 6));
    static const double expect[] = {0.09003057 / 2, 0.24472847 / 2, (0.66524096 - 1) / 2,
                                    (1.0 / 3 - 1) / 2, 1.0 / 6, 1.0 / 6};
    for (int i = 0; i < 6; i++) CHECK_NEAR(dz[i], expect[i], 1e-7);
    double loss, correct;
    CHECK_OK(bn_net_metrics(net, &loss, &correct));
    CHECK_NEAR(loss, 0.40760596 + 1.09861229, 1e-6); /* the third row is not in the batch */
    CHECK(correct == 2);                               /* (0, 0, 0) ties to class 0 */
    bn_net_free(net);
    return BN_PASS;
}

BN_TEST(softmax_ce_rejects_bad_labels)
{
    static const float z[] = {1, 2, 3, 1, 2, 3};
    static const struct {
        float label;
        const char *needle;
    } bad[] = {{3, "example 1 has label 3"}, {-1, "example 1 has label -1"},
               {1.5f, "example 1 has label 1.5"}, {NAN, "example 1 has label nan"}};
    for (int t = 0; t < 4; t++) {
        float labels[] = {0, bad[t].label};
        bn_net *net;
        CHECK_OK(load(&net, 2, z, labels));
        CHECK_ERR(bn_net_forward(net, 1), BN_ERR_DATA, bad[t].needle);
        bn_net_free(net);
    }
    return BN_PASS;
}

BN_TEST(softmax_ce_shapes_and_flags)
{
    bn_net *net;
    CHECK_OK(lt_net("[input]\nchannels=2\nheight=2\nwidth=3\n[softmax_ce]\n", 2, 1, &net));
    bn_layer *l = net->layers[0];
    CHECK(l->out->c == 12 && l->out->h == 1 && l->out->w == 1);
    CHECK(l->ops->is_loss && l->ops->kind == BN_NVTX_LAYER_LOSS && l->out_grad == NULL);
    CHECK(bn_net_loss_layer(net) == l && l->num_params == 0);
    bn_net_free(net);
    CHECK_ERR(lt_setup_status("[input]\nchannels=1\nheight=1\nwidth=1\n[softmax_ce]\n"), BN_ERR_USAGE,
              "needs at least 2 classes");
    CHECK_ERR(lt_setup_status("[input]\nchannels=3\nheight=1\nwidth=1\n[softmax_ce]\nclasses=3\n"), BN_ERR_USAGE,
              "unknown key 'classes'");
    return BN_PASS;
}

BN_TEST(softmax_ce_gradcheck)
{
    static const lt_gradcheck_case cases[] = {
        {"[input]\nchannels=2\nheight=2\nwidth=2\n[softmax_ce]\n", "softmax_ce 8 classes batch 5", 5, 0, 0, 8},
        {"[input]\nchannels=2\nheight=1\nwidth=1\n[softmax_ce]\n", "softmax_ce 2 classes batch 3", 3, 0, 0, 2},
    };
    return lt_gradcheck_cases(cases, sizeof cases / sizeof cases[0], GRAD_TOL);
}

/* Label smoothing s over K classes: the target (1 - s) onehot + s / K, so the loss is
 * lse - (1 - s) z[label] - s mean(z) and the gradient (p - target) / n. */
BN_TEST(softmax_ce_label_smoothing_matches_hand_values)
{
    static const float z[] = {1, 2, 3, 0.5f, -1, 2}, labels[] = {2, 0};
    bn_net *net;
    CHECK_OK(lt_net("[input]\nchannels=3\nheight=1\nwidth=1\n[softmax_ce]\nsmoothing=0.3\n", 2, 1, &net));
    CHECK_OK(lt_write(net->input, z, 6));
    CHECK_OK(lt_write(net->labels, labels, 2));
    CHECK_OK(bn_net_forward(net, 1));
    CHECK_OK(bn_net_backward(net));
    float m[2], dz[6];
    CHECK_OK(lt_read(net->metrics, m, 2));
    CHECK_OK(lt_read(net->input_grad, dz, 6));
    double want = 0.0;
    for (int i = 0; i < 2; i++) {
        const float *zi = z + 3 * i;
        double lse = log(exp(zi[0]) + exp(zi[1]) + exp(zi[2]));
        int label = (int)labels[i];
        want += lse - 0.7 * zi[label] - 0.3 * (zi[0] + zi[1] + zi[2]) / 3.0;
        for (int k = 0; k < 3; k++) {
            double target = (k == label ? 0.7 : 0.0) + 0.1;
            CHECK_NEAR(dz[3 * i + k], (exp(zi[k] - lse) - target) / 2.0, 1e-6);
        }
    }
    CHECK_NEAR(m[0], want, 1e-5);
    bn_net_free(net);
    CHECK(lt_gradcheck_text("[input]\nchannels=5\nheight=1\nwidth=1\n[softmax_ce]\nsmoothing=0.1\n",
                            "softmax_ce smoothing 0.1", 4, 0.0, 0.0, 5, GRAD_TOL) == BN_PASS);
    CHECK_ERR(lt_setup_status("[input]\nchannels=5\nheight=1\nwidth=1\n[softmax_ce]\nsmoothing=1\n"), BN_ERR_USAGE,
              "smoothing");
    return BN_PASS;
}

/* ---- the GPU against the CPU ---- */

BN_TEST(gpu_layer_softmax_ce_matches_cpu)
{
    static const layer_case direct = {"softmax_ce 10 classes", "[input]\nchannels=10\nheight=1\nwidth=1\n[softmax_ce]\n",
                                      TOL_ELEMENTWISE, 10, 0, 0, 0, 0, 0};
    static const layer_case after_dense = {"dense 2x3x1 -> 7 + softmax_ce",
                                           "[input]\nchannels=2\nheight=3\nwidth=1\n[dense]\noutputs=7\n[softmax_ce]\n",
                                           TOL_GEMM, 7, 0, 0, 0, 0, 0};
    static const layer_case smoothed = {"softmax_ce 40 classes, smoothing 0.2",
                                        "[input]\nchannels=40\nheight=1\nwidth=1\n[softmax_ce]\nsmoothing=0.2\n",
                                        TOL_ELEMENTWISE, 40, 0, 0, 0, 1, 0};
    int r = gt_run_case(&direct);
    if (r == BN_PASS) r = gt_run_case(&smoothed);
    return r == BN_PASS ? gt_run_case(&after_dense) : r;
}

/* A dense layer of at most 16 outputs before softmax_ce hands its forward pass to the loss
 * layer's kernel (the dense head, softmax_ce.h), which in the trainer's step also writes the
 * dense layer's input gradient (and a fused ReLU's): every blob still matches the CPU, with
 * rows of 1, 2 and 4 floats (13, 6 and 100 inputs), and with the gradient written in the forward
 * pass or by the backward passes. */
BN_TEST(gpu_layer_dense_head_matches_cpu)
{
    static const layer_case cases[] = {
        {"dense 6 -> 7, softmax_ce (head)", "[input]\nchannels=2\nheight=3\nwidth=1\n[dense]\noutputs=7\n[softmax_ce]\n",
         TOL_GEMM, 7, 0, 0, 0, 1, 0},
        {"dense 35 -> 13, relu, dense 3, softmax_ce (head, relu fused)",
         "[input]\nchannels=5\nheight=7\nwidth=1\n[dense]\noutputs=13\n[relu]\n[dense]\noutputs=3\n[softmax_ce]\n",
         TOL_GEMM, 3, 0, 0, 0, 1, 0},
        {"dense 64 -> 100, relu, dense 10, softmax_ce (head, relu fused)",
         "[input]\nchannels=4\nheight=4\nwidth=4\n[dense]\noutputs=100\n[relu]\n[dense]\noutputs=10\n[softmax_ce]\n",
         TOL_GEMM, 10, 0, 0, 0, 1, 0},
        {"dense 35 -> 13, relu, dense 5, softmax_ce smoothing 0.1 (head, relu fused)",
         "[input]\nchannels=5\nheight=7\nwidth=1\n[dense]\noutputs=13\n[relu]\n[dense]\noutputs=5\n"
         "[softmax_ce]\nsmoothing=0.1\n",
         TOL_GEMM, 5, 0, 0, 0, 1, 0},
        {"dense 64 -> 100, relu, dense 16, softmax_ce (head, gradient by the backward passes)",
         "[input]\nchannels=4\nheight=4\nwidth=4\n[dense]\noutputs=100\n[relu]\n[dense]\noutputs=16\n[softmax_ce]\n",
         TOL_GEMM, 16, 0, 0, 0, 0, 0},
    };
    if (bn_device_count() == 0) BN_SKIP_TEST("no CUDA device");
    bn_ctx *ctx;
    CHECK_OK(bn_ctx_open(0, &ctx));
    /* Which passes are fused: the loss's forward (the dense head) and the ReLU's two; a dense
     * layer of 17 outputs is no head. */
    static const char *const texts[] = {
        "[input]\nchannels=8\nheight=1\nwidth=1\n[dense]\noutputs=9\n[relu]\n[dense]\noutputs=16\n[softmax_ce]\n",
        "[input]\nchannels=8\nheight=1\nwidth=1\n[dense]\noutputs=9\n[relu]\n[dense]\noutputs=17\n[softmax_ce]\n"};
    for (int t = 0; t < 2; t++) {
        bn_net *net;
        CHECK_OK(bn_net_from_text(texts[t], "head", &net));
        bn_status st = bn_net_setup(net, 4, ctx, 1, 1);
        const int relu = st == BN_OK ? net->layers[1]->gpu_fused : -1, loss = st == BN_OK ? net->layers[3]->gpu_fused : -1;
        const int dense = st == BN_OK ? net->layers[0]->gpu_fused | net->layers[2]->gpu_fused : -1;
        bn_net_free(net);
        CHECK_OK(st);
        const int want_loss = t == 0 ? BN_FUSED_FORWARD : 0;
        CHECK_MSG(relu == (BN_FUSED_FORWARD | BN_FUSED_BACKWARD) && loss == want_loss && dense == 0,
                  "%s outputs: fused passes relu %d, softmax_ce %d, dense layers %d (want 3, %d, 0)",
                  t == 0 ? "16" : "17", relu, loss, dense, want_loss);
    }
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int r = gt_run_case(&cases[i]);
        if (r != BN_PASS) return r;
    }
    return BN_PASS;
}

/* Logits for rows [0, n): normal times 3; every fourth row gets two equal maxima, and its label
 * is one of the two, so the first-maximum rule decides whether it counts as correct. */
static void tie_logits(bn_rng *r, int n, int classes, float *z, float *labels)
{
    for (int i = 0; i < n; i++) {
        float *zi = z + (size_t)i * classes;
        float top = -INFINITY;
        for (int k = 0; k < classes; k++) {
            zi[k] = (float)(3.0 * bn_rng_normal(r));
            if (zi[k] > top) top = zi[k];
        }
        labels[i] = (float)bn_rng_below(r, (uint64_t)classes);
        if (i % 4 == 0) {
            int a = (int)bn_rng_below(r, (uint64_t)classes), b = (int)bn_rng_below(r, (uint64_t)classes);
            if (a == b) b = (a + 1) % classes;
            zi[a] = zi[b] = top + 1.0f;
            labels[i] = (float)(bn_rng_below(r, 2) ? a : b);
        }
    }
}

/* Batch n of inputs x and labels on both nets, then an evaluation pass on each, the GPU's
 * metrics poisoned before it. */
static bn_status eval_both(bn_net *cpu, bn_net *gpu, int n, const float *x, const float *labels, bn_ctx *ctx)
{
    BN_TRY(bn_net_set_batch(cpu, n));
    BN_TRY(bn_net_set_batch(gpu, n));
    BN_TRY(gt_put(cpu->input, x));
    BN_TRY(gt_put(gpu->input, x));
    BN_TRY(gt_put(cpu->labels, labels));
    BN_TRY(gt_put(gpu->labels, labels));
    BN_TRY(gt_poison(gpu->metrics, ctx));
    BN_TRY(bn_net_forward(cpu, 0));
    return bn_net_forward(gpu, 0);
}

static int metrics_sweep(int classes, int max_batch, bn_ctx *ctx, uint64_t seed, double *worst)
{
    char text[128];
    snprintf(text, sizeof text, "[input]\nchannels=%d\nheight=1\nwidth=1\n[softmax_ce]\n", classes);
    bn_net *cpu, *gpu;
    CHECK_OK(bn_net_from_text(text, "softmax-sweep", &cpu));
    CHECK_OK(bn_net_from_text(text, "softmax-sweep", &gpu));
    CHECK_OK(bn_net_setup(cpu, max_batch, NULL, 0, seed));
    CHECK_OK(bn_net_setup(gpu, max_batch, ctx, 0, seed));
    size_t cap = (size_t)max_batch * classes;
    float *z = malloc(cap * sizeof *z), *labels = malloc((size_t)max_batch * sizeof *labels);
    CHECK(z && labels);
    bn_rng r;
    bn_rng_seed(&r, seed, 11);
    for (int n = 1; n <= max_batch; n++) {
        for (size_t i = 0; i < cap; i++) z[i] = NAN;
        for (int i = 0; i < max_batch; i++) labels[i] = -1.0f;
        tie_logits(&r, n, classes, z, labels);
        CHECK_OK(eval_both(cpu, gpu, n, z, labels, ctx));
        double gl, gc, cl, cc;
        CHECK_OK(bn_net_metrics(gpu, &gl, &gc));
        CHECK_OK(bn_net_metrics(cpu, &cl, &cc));
        double d = fabs(gl - cl) / fabs(cl);
        if (d > *worst) *worst = d;
        CHECK_MSG(d <= TOL_LOSS_SUM, "%d classes, batch %d: loss sum %.9g on the GPU, %.9g on the CPU (seed %llu)",
                  classes, n, gl, cl, (unsigned long long)seed);
        CHECK_MSG(gc == cc, "%d classes, batch %d: %g correct on the GPU, %g on the CPU (seed %llu)", classes, n, gc,
                  cc, (unsigned long long)seed);
    }
    free(z);
    free(labels);
    bn_net_free(cpu);
    bn_net_free(gpu);
    return BN_PASS;
}

/* The loss and accuracy reductions for every batch size 1..300: not only powers of two, and
 * never reading past the batch (the rows past it hold NaN logits and invalid labels). */
BN_TEST(gpu_layer_softmax_ce_metrics_every_batch_size)
{
    if (bn_device_count() == 0) BN_SKIP_TEST("no CUDA device");
    bn_ctx *ctx;
    CHECK_OK(bn_ctx_open(0, &ctx));
    uint64_t seed = lt_fresh_seed();
    static const int classes[] = {10, 7, 1000};
    for (size_t i = 0; i < sizeof classes / sizeof classes[0]; i++) {
        double worst = 0.0;
        CHECK(metrics_sweep(classes[i], 300, ctx, seed + i, &worst) == BN_PASS);
        printf("    softmax_ce metrics, %d classes, batches 1..300: worst relative loss-sum difference %.3g, "
               "correct counts equal\n", classes[i], worst);
    }
    return BN_PASS;
}

/* The dense head's loss and accuracy for every batch size 1..300 on small integers (inputs in
 * -2..2, weights and biases in -3..3), so that the logits are exact on both sides and hold many
 * ties, which the first-maximum rule must break as the CPU does. */
BN_TEST(gpu_layer_dense_head_metrics_every_batch_size)
{
    if (bn_device_count() == 0) BN_SKIP_TEST("no CUDA device");
    bn_ctx *ctx;
    CHECK_OK(bn_ctx_open(0, &ctx));
    uint64_t seed = lt_fresh_seed();
    const int max_batch = 300, inputs = 12, classes = 10;
    const char *text = "[input]\nchannels=12\nheight=1\nwidth=1\n[dense]\noutputs=10\n[softmax_ce]\n";
    bn_net *cpu, *gpu;
    CHECK_OK(bn_net_from_text(text, "head-sweep", &cpu));
    CHECK_OK(bn_net_from_text(text, "head-sweep", &gpu));
    CHECK_OK(bn_net_setup(cpu, max_batch, NULL, 0, seed));
    CHECK_OK(bn_net_setup(gpu, max_batch, ctx, 0, seed));
    CHECK_MSG(gpu->layers[1]->gpu_fused == BN_FUSED_FORWARD, "softmax_ce's forward is not the dense head's");
    bn_rng r;
    bn_rng_seed(&r, seed, 13);
    size_t np = bn_blob_count(cpu->params);
    float *pv = malloc(np * sizeof *pv), *x = malloc((size_t)max_batch * inputs * sizeof *x),
          *labels = malloc((size_t)max_batch * sizeof *labels);
    CHECK(pv && x && labels);
    for (size_t i = 0; i < np; i++) pv[i] = (float)bn_rng_below(&r, 7) - 3.0f;
    CHECK_OK(gt_put(cpu->params, pv));
    CHECK_OK(gt_put(gpu->params, pv));
    int ties = 0;
    for (int n = 1; n <= max_batch; n++) {
        for (int i = 0; i < max_batch * inputs; i++) x[i] = i < n * inputs ? (float)bn_rng_below(&r, 5) - 2.0f : NAN;
        for (int i = 0; i < max_batch; i++) labels[i] = i < n ? (float)bn_rng_below(&r, (uint64_t)classes) : -1.0f;
        CHECK_OK(eval_both(cpu, gpu, n, x, labels, ctx));
        /* The logits are exact, so both sides hold the same bits. */
        const float *zc = bn_blob_host_rd(cpu->layers[0]->out), *zg = bn_blob_host_rd(gpu->layers[0]->out);
        CHECK(zc && zg);
        CHECK_MSG(memcmp(zc, zg, (size_t)n * classes * sizeof *zc) == 0, "batch %d: logits differ (seed %llu)", n,
                  (unsigned long long)seed);
        for (int i = 0; i < n; i++) {
            int top = 0;
            for (int k = 1; k < classes; k++)
                if (zc[i * classes + k] == zc[i * classes + top]) ties++;
                else if (zc[i * classes + k] > zc[i * classes + top]) top = k;
        }
        double gl, gc, cl, cc;
        CHECK_OK(bn_net_metrics(gpu, &gl, &gc));
        CHECK_OK(bn_net_metrics(cpu, &cl, &cc));
        CHECK_MSG(fabs(gl - cl) <= TOL_LOSS_SUM * fabs(cl),
                  "batch %d: loss sum %.9g on the GPU, %.9g on the CPU (seed %llu)", n, gl, cl,
                  (unsigned long long)seed);
        CHECK_MSG(gc == cc, "batch %d: %g correct on the GPU, %g on the CPU (seed %llu)", n, gc, cc,
                  (unsigned long long)seed);
    }
    CHECK_MSG(ties > 1000, "only %d ties at a row's running maximum: the data do not test the tie rule", ties);
    printf("    dense head metrics, batches 1..300: loss sums within %g, correct counts equal, %d ties met\n",
           TOL_LOSS_SUM, ties);
    free(pv);
    free(x);
    free(labels);
    bn_net_free(cpu);
    bn_net_free(gpu);
    return BN_PASS;
}

/* In a training step the loss's forward leaves the sum over its blocks' metrics to the end of the
 * backward pass, which would otherwise wait for it: after the forward the metrics are not yet
 * written, and after the backward they hold the bits an evaluation forward writes, added once
 * into the step's accumulator. Through the dense head (10 classes) and the plain kernel (20,
 * more than a head takes), over several blocks of each. */
BN_TEST(gpu_loss_metrics_left_to_the_end_of_the_backward_pass)
{
    if (bn_device_count() == 0) BN_SKIP_TEST("no CUDA device");
    bn_ctx *ctx;
    CHECK_OK(bn_ctx_open(0, &ctx));
    const uint64_t seed = lt_fresh_seed();
    const int n = 300, inputs = 12, classes[] = {10, 20};
    float *x = malloc((size_t)n * inputs * sizeof *x), *labels = malloc((size_t)n * sizeof *labels);
    CHECK(x && labels);
    for (int t = 0; t < 2; t++) {
        char text[160];
        snprintf(text, sizeof text, "[input]\nchannels=%d\nheight=1\nwidth=1\n[dense]\noutputs=%d\n[softmax_ce]\n",
                 inputs, classes[t]);
        bn_net *gpu;
        CHECK_OK(bn_net_from_text(text, "left-sum", &gpu));
        CHECK_OK(bn_net_setup(gpu, n, ctx, 0, seed));
        const int head = gpu->layers[1]->gpu_fused == BN_FUSED_FORWARD;
        CHECK_MSG(head == (t == 0), "%d classes: dense head %d", classes[t], head);
        bn_rng r;
        bn_rng_seed(&r, seed, 17 + (uint64_t)t);
        for (int i = 0; i < n * inputs; i++) x[i] = (float)bn_rng_normal(&r);
        for (int i = 0; i < n; i++) labels[i] = (float)bn_rng_below(&r, (uint64_t)classes[t]);
        CHECK_OK(gt_put(gpu->input, x));
        CHECK_OK(gt_put(gpu->labels, labels));
        /* An evaluation forward: its last block adds the sums. */
        CHECK_OK(bn_net_forward(gpu, 0));
        float want[2], got[2], acc_got[2];
        CHECK_OK(lt_read(gpu->metrics, want, 2));
        CHECK_MSG(isfinite(want[0]) && want[0] > 0.0f && want[1] >= 0.0f && want[1] <= n,
                  "%d classes: evaluation metrics %g, %g", classes[t], want[0], want[1]);
        bn_blob *acc = bn_blob_new("left-sum.acc", 2, 1, 1, 1);
        CHECK(acc != NULL);
        static const float zeros[2] = {0.0f, 0.0f};
        CHECK_OK(gt_put(acc, zeros));
        CHECK_OK(gt_poison(gpu->metrics, ctx));
        CHECK(bn_net_fuse_loss(gpu, acc, 1));
        CHECK_OK(bn_net_forward(gpu, 1));
        CHECK_OK(lt_read(gpu->metrics, got, 2));
        CHECK_MSG(isnan(got[0]) && isnan(got[1]), "%d classes: the training forward wrote the metrics (%g, %g)",
                  classes[t], got[0], got[1]);
        CHECK_OK(bn_net_backward(gpu));
        bn_net_unfuse_loss(gpu);
        CHECK_OK(lt_read(gpu->metrics, got, 2));
        CHECK_OK(lt_read(acc, acc_got, 2));
        CHECK_MSG(memcmp(got, want, sizeof got) == 0 && memcmp(acc_got, want, sizeof acc_got) == 0,
                  "%d classes: metrics %.9g, %g and accumulated %.9g, %g after the backward pass, want %.9g, %g",
                  classes[t], got[0], got[1], acc_got[0], acc_got[1], want[0], want[1]);
        printf("    %s, batch %d: loss sum %.9g, %g correct, after the backward pass as in evaluation\n",
               head ? "dense head" : "plain kernel", n, got[0], got[1]);
        bn_blob_free(acc);
        bn_net_free(gpu);
    }
    free(x);
    free(labels);
    return BN_PASS;
}
