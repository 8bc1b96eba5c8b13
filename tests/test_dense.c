/* test_dense.c - the dense layer: hand-computed forward and backward, shapes and parameter
 * declarations, option errors, and gradient checks through the network; on the GPU against the
 * CPU (a ReLU fused into its kernels: test_activation.c); at LeNet's shapes (800 -> 500 -> 10),
 * where the GEMMs are large enough for split-K algorithms, in each context and with the plans
 * kept per batch size; captured and replayed as a CUDA graph; and its own GEMM kernels forced in
 * each configuration. A failure on the GPU prints the seed and the command that replays it. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/net.h"
#include "core/rng.h"
#include "dense/dense.h"
#include "gpu/graph.h"
#include "gpu_testing.h"
#include "layer_testing.h"
#include "layers.h"
#include "testing.h"

/* Central differences through a float32 forward agree to a few 1e-3 at worst (gradcheck.h
 * explains the choice of eps); a wrong gradient is off by far more. */
#define GRAD_TOL 1e-2

static const char *const small_model = "[input]\nchannels=1\nheight=1\nwidth=3\n"
                                       "[dense]\noutputs=2\n";

/* W = [[1, 2, 3], [-1, 0, 0.5]], b = [0.5, -1]; X = [[1, 1, 1], [2, 0, -2]]. */
static bn_status load_small(bn_net **net)
{
    static const float w[] = {1, 2, 3, -1, 0, 0.5f}, b[] = {0.5f, -1}, x[] = {1, 1, 1, 2, 0, -2};
    BN_TRY(lt_net(small_model, 2, 1, net));
    bn_layer *l = (*net)->layers[0];
    BN_TRY(lt_write(l->params[0].value, w, 6));
    BN_TRY(lt_write(l->params[1].value, b, 2));
    return lt_write((*net)->input, x, 6);
}

BN_TEST(dense_forward_matches_hand_values)
{
    bn_net *net;
    CHECK_OK(load_small(&net));
    CHECK_OK(bn_net_forward(net, 1));
    float y[4];
    CHECK_OK(lt_read(bn_net_output(net), y, 4));
    static const float expect[] = {6.5f, -1.5f, -3.5f, -4.0f};
    for (int i = 0; i < 4; i++) CHECK_NEAR(y[i], expect[i], 1e-6);
    bn_net_free(net);
    return BN_PASS;
}

/* dY = I: dW = dY^T X = X, db = [1, 1], dX = dY W = W; a second backward adds again. */
BN_TEST(dense_backward_matches_hand_values_and_accumulates)
{
    bn_net *net;
    CHECK_OK(load_small(&net));
    bn_layer *l = net->layers[0];
    CHECK_OK(bn_net_forward(net, 1));
    static const float dy[] = {1, 0, 0, 1};
    CHECK_OK(lt_write(l->out_grad, dy, 4));
    CHECK_OK(bn_net_zero_grad(net));
    CHECK_OK(bn_net_backward(net));
    CHECK_OK(bn_net_backward(net));
    float dw[6], db[2], dx[6];
    CHECK_OK(lt_read(l->params[0].grad, dw, 6));
    CHECK_OK(lt_read(l->params[1].grad, db, 2));
    CHECK_OK(lt_read(net->input_grad, dx, 6));
    static const float x[] = {1, 1, 1, 2, 0, -2}, w[] = {1, 2, 3, -1, 0, 0.5f};
    for (int i = 0; i < 6; i++) {
        CHECK_NEAR(dw[i], 2 * x[i], 1e-6);  /* added twice */
        CHECK_NEAR(dx[i], w[i], 1e-6);      /* written, not added */
    }
    CHECK_NEAR(db[0], 2, 1e-6);
    CHECK_NEAR(db[1], 2, 1e-6);
    bn_net_free(net);
    return BN_PASS;
}

BN_TEST(dense_flattens_and_declares_params)
{
    bn_net *net;
    CHECK_OK(lt_net("[input]\nchannels=2\nheight=3\nwidth=5\n[dense]\noutputs=7\n[dense]\noutputs=3\ninit=he\n",
                    2, 1, &net));
    bn_layer *l = net->layers[0];
    bn_blob *o = l->out;
    CHECK(o->c == 7 && o->h == 1 && o->w == 1);
    CHECK(l->num_params == 2);
    bn_param *w = &l->params[0], *b = &l->params[1];
    CHECK(w->value->n == 7 && w->value->c == 30 && w->value->h == 1 && w->value->w == 1);
    CHECK(w->fan_in == 30 && w->fan_out == 7 && w->init == BN_INIT_XAVIER && !w->is_bias);
    CHECK(bn_blob_count(b->value) == 7 && b->is_bias && b->init == BN_INIT_ZERO);
    CHECK(net->layers[1]->params[0].init == BN_INIT_HE);
    CHECK_NEAR(l->ops->flops(l), 2.0 * 30 * 7 + 7, 0);
    CHECK(l->ops->kind == BN_NVTX_LAYER_COMPUTE && strstr(l->ops->help, "outputs"));
    bn_net_free(net);
    return BN_PASS;
}

BN_TEST(dense_rejects_bad_options)
{
    const char *in = "[input]\nchannels=1\nheight=2\nwidth=2\n";
    char text[256];
    snprintf(text, sizeof text, "%s[dense]\ninit=he\n", in);
    CHECK_ERR(lt_setup_status(text), BN_ERR_USAGE, "missing required key 'outputs'");
    snprintf(text, sizeof text, "%s[dense]\noutputs=0\n", in);
    CHECK_ERR(lt_setup_status(text), BN_ERR_USAGE, "out of range");
    snprintf(text, sizeof text, "%s[dense]\noutputs=3\ninit=gauss\n", in);
    CHECK_ERR(lt_setup_status(text), BN_ERR_USAGE, "not one of");
    snprintf(text, sizeof text, "%s[dense]\noutputs=3\nsize=2\n", in);
    CHECK_ERR(lt_setup_status(text), BN_ERR_USAGE, "unknown key 'size'");
    return BN_PASS;
}

BN_TEST(dense_gradcheck)
{
    static const lt_gradcheck_case cases[] = {
        {"[input]\nchannels=2\nheight=3\nwidth=5\n[dense]\noutputs=4\n", "dense 2x3x5->4 batch 3", 3, 0, 0, 0},
        {"[input]\nchannels=1\nheight=1\nwidth=7\n[dense]\noutputs=5\ninit=he\n[dense]\noutputs=3\n[softmax_ce]\n",
         "dense 7->5->3 + softmax_ce batch 5", 5, 0, 0, 3},
    };
    return lt_gradcheck_cases(cases, sizeof cases / sizeof cases[0], GRAD_TOL);
}

/* A last batch smaller than the capacity must use only its own rows: the rows past it hold
 * other examples' data, which would change both the loss and its gradient. */
BN_TEST(dense_gradcheck_partial_batch)
{
    uint64_t seed = lt_fresh_seed();
    bn_net *net;
    CHECK_OK(lt_net("[input]\nchannels=3\nheight=1\nwidth=3\n[dense]\noutputs=4\n[softmax_ce]\n", 6, seed, &net));
    CHECK_OK(lt_fill_normal(net, seed + 1, 1.0, 0));
    CHECK_OK(lt_fill_labels(net, seed + 1, 4));
    CHECK_OK(bn_net_set_batch(net, 3));
    CHECK_OK(lt_fill_normal(net, seed, 1.0, 0));
    CHECK_OK(lt_fill_labels(net, seed, 4));
    CHECK(lt_gradcheck(net, "dense 9->4 + softmax_ce batch 3 of 6", seed, 0, GRAD_TOL) == BN_PASS);
    float y[6 * 4];
    for (int i = 0; i < 24; i++) y[i] = 42.0f;
    CHECK_OK(bn_net_set_batch(net, 6));
    CHECK_OK(lt_write(net->layers[0]->out, y, 24));
    CHECK_OK(bn_net_set_batch(net, 3));
    CHECK_OK(bn_net_forward(net, 1));
    CHECK_OK(bn_net_set_batch(net, 6));
    CHECK_OK(lt_read(net->layers[0]->out, y, 24));
    for (int i = 12; i < 24; i++) CHECK_MSG(y[i] == 42.0f, "row %d was written", i / 4);
    bn_net_free(net);
    return BN_PASS;
}

/* ---- the GPU against the CPU ---- */

BN_TEST(gpu_layer_dense_matches_cpu)
{
    static const layer_case lc = {"dense 3x5x7 -> 13 -> 6",
                                  "[input]\nchannels=3\nheight=5\nwidth=7\n[dense]\noutputs=13\n"
                                  "[dense]\noutputs=6\ninit=he\n",
                                  TOL_GEMM, 0, 0, 0, 1, 0, 0};
    return gt_run_case(&lc);
}

/* ---- LeNet's shapes on the GPU ----
 * One pair of networks (CPU, GPU) runs several batch sizes in turn, so the GPU makes a plan per
 * batch size and reuses it when the size comes back; every output and gradient must match the
 * CPU each time. Parameter gradients start from random values (backward must add to them), the
 * device outputs and gradients are poisoned with NaN before each pass, and rows past the batch
 * hold NaN on both sides. */

#define DENSE_TEXT "[input]\nchannels=50\nheight=4\nwidth=4\n[dense]\noutputs=500\n[dense]\noutputs=10\ninit=he\n"
#define TRAIN_TEXT                                                                                       \
    "[input]\nchannels=50\nheight=4\nwidth=4\n[dense]\noutputs=500\n[relu]\n[dense]\noutputs=10\n" \
    "[softmax_ce]\n"
#define CAPACITY 64
#define CLASSES 10

/* FP32 on both sides: sums of 800 products in different orders (gpu_testing.h's TOL_GEMM). */
#define TOL_FP32 1e-4

static bn_status poison(bn_blob *b, bn_ctx *ctx)
{
    if (!b) return BN_OK;
    float *d = bn_blob_dev_wr(b);
    if (!d) return bn_last_status();
    return bn_gpu_fill(d, NAN, b->capacity, ctx);
}

/* The same values into both blobs' host copies: `count` normal values times scale, NaN past them. */
static bn_status feed_pair(bn_blob *cpu, bn_blob *gpu, size_t count, bn_rng *r, double scale)
{
    float *a = bn_blob_host_wr(cpu), *b = bn_blob_host_wr(gpu);
    if (!a || !b) return bn_last_status();
    for (size_t i = 0; i < cpu->capacity; i++) a[i] = b[i] = i < count ? (float)(scale * bn_rng_normal(r)) : NAN;
    return BN_OK;
}

static int close_enough(bn_blob *gpu, bn_blob *cpu, const float *base, double tol, int n, uint64_t seed,
                        double *worst)
{
    const float *g = bn_blob_host_rd(gpu), *c = bn_blob_host_rd(cpu);
    CHECK_MSG(g && c, "%s", bn_last_error());
    size_t at;
    double d = lt_rel_diff(g, c, base, bn_blob_count(cpu), &at);
    if (d > *worst) *worst = d;
    CHECK_MSG(d <= tol,
              "batch %d: %s differs by %.3g of its scale (tolerance %g); element %zu: gpu %.9g, cpu %.9g (seed %llu)",
              n, cpu->name, d, tol, at, g[at], c[at], (unsigned long long)seed);
    return BN_PASS;
}

/* One forward and `backwards` backward passes at batch n on both networks, from fresh inputs,
 * output gradient and starting parameter gradients (which every backward adds to); then every
 * blob compared. */
static int pass_and_compare(bn_net *cpu, bn_net *gpu, bn_ctx *ctx, int n, uint64_t seed, double tol, double *worst,
                            int backwards)
{
    CHECK_OK(bn_net_set_batch(cpu, n));
    CHECK_OK(bn_net_set_batch(gpu, n));
    CHECK_OK(poison(gpu->input_grad, ctx));
    for (int i = 0; i < gpu->num_layers; i++) {
        CHECK_OK(poison(gpu->layers[i]->out, ctx));
        CHECK_OK(poison(gpu->layers[i]->out_grad, ctx));
    }
    bn_rng r;
    bn_rng_seed(&r, seed, 3);
    bn_layer *last_cpu = cpu->layers[cpu->num_layers - 1], *last_gpu = gpu->layers[gpu->num_layers - 1];
    CHECK_OK(feed_pair(cpu->input, gpu->input, bn_blob_count(cpu->input), &r, 1.0));
    CHECK_OK(feed_pair(last_cpu->out_grad, last_gpu->out_grad, bn_blob_count(last_cpu->out_grad), &r, 1.0));
    CHECK_OK(feed_pair(cpu->grads, gpu->grads, cpu->grads->capacity, &r, 0.1));
    const float *given = bn_blob_host_rd(cpu->grads);
    float *start = malloc(cpu->grads->capacity * sizeof *start);
    CHECK(given && start);
    memcpy(start, given, cpu->grads->capacity * sizeof *start);
    CHECK_OK(bn_net_forward(cpu, 1));
    CHECK_OK(bn_net_forward(gpu, 1));
    for (int b = 0; b < backwards; b++) {
        CHECK_OK(bn_net_backward(cpu));
        CHECK_OK(bn_net_backward(gpu));
    }
    int r_ok = BN_PASS;
    for (int i = 0; i < cpu->num_layers && r_ok == BN_PASS; i++) {
        bn_layer *lc = cpu->layers[i], *lg = gpu->layers[i];
        r_ok = close_enough(lg->out, lc->out, NULL, tol, n, seed, worst);
        if (r_ok == BN_PASS && i + 1 < cpu->num_layers)
            r_ok = close_enough(lg->out_grad, lc->out_grad, NULL, tol, n, seed, worst);
        for (int k = 0; k < lc->num_params && r_ok == BN_PASS; k++)
            r_ok = close_enough(lg->params[k].grad, lc->params[k].grad, start + lc->params[k].grad->offset, tol, n,
                                seed, worst);
    }
    if (r_ok == BN_PASS) r_ok = close_enough(gpu->input_grad, cpu->input_grad, NULL, tol, n, seed, worst);
    free(start);
    return r_ok;
}

/* Passes at the given batch sizes on a CPU and a GPU network made from `text` (capacity
 * `capacity`), `backwards` backward passes each; everything compared with the CPU. */
static int net_batches_against_cpu(bn_ctx *ctx, const char *text, int capacity, const int *batches, int count,
                                   double tol, int backwards, const char *what)
{
    uint64_t seed = lt_fresh_seed();
    bn_net *cpu, *gpu;
    CHECK_OK(bn_net_from_text(text, "dense-test", &cpu));
    CHECK_OK(bn_net_from_text(text, "dense-test", &gpu));
    CHECK_OK(bn_net_setup(cpu, capacity, NULL, 1, seed));
    CHECK_OK(bn_net_setup(gpu, capacity, ctx, 1, seed));
    double worst = 0.0;
    for (int i = 0; i < count; i++)
        CHECK(pass_and_compare(cpu, gpu, ctx, batches[i], seed + (uint64_t)i, tol, &worst, backwards) == BN_PASS);
    printf("    gpu vs cpu, %s: worst difference %.3g of scale (tolerance %g)\n", what, worst, tol);
    bn_net_free(cpu);
    bn_net_free(gpu);
    return BN_PASS;
}

static int batches_against_cpu(bn_ctx *ctx, const int *batches, int count, double tol, const char *what)
{
    char full[160];
    snprintf(full, sizeof full, "dense 800 -> 500 -> 10, %s", what);
    return net_batches_against_cpu(ctx, DENSE_TEXT, CAPACITY, batches, count, tol, 1, full);
}

/* The contexts the LeNet shapes run in: as they are (batch sizes coming back to one network);
 * autotuned, where the products run on whichever of cuBLASLt's algorithms and blobnet's kernels
 * timed fastest; deterministic; and with TF32 allowed, where the results stay near the CPU's
 * (within TF32's precision): the rule takes blobnet's FP32 kernels, so the TF32 case is
 * autotuned too, and cuBLASLt's TF32 ones are timed. */
static const struct {
    int autotune, deterministic, tf32;
    int batches[5], count;
    double tol;
    const char *what;
} dense_contexts[] = {
    {0, 0, 0, {64, 37, 64, 1, 64}, 5, TOL_FP32, "batches 64, 37, 64, 1, 64 on one network"},
    {1, 0, 0, {64, 37, 64, 1}, 4, TOL_FP32, "autotuned, batches 64, 37, 64, 1"},
    {0, 1, 0, {64, 37, 64}, 3, TOL_FP32, "deterministic, batches 64, 37, 64"},
    {1, 0, 1, {64, 37}, 2, TOL_TF32, "tf32, batches 64, 37"},
};

BN_TEST(gpu_dense_lenet_shapes_match_cpu_in_each_context)
{
    if (bn_device_count() == 0) BN_SKIP_TEST("no CUDA device");
    bn_ctx *ctx;
    CHECK_OK(bn_ctx_open(0, &ctx));
    int r = BN_PASS;
    for (size_t i = 0; i < sizeof dense_contexts / sizeof dense_contexts[0] && r == BN_PASS; i++) {
        ctx->autotune = dense_contexts[i].autotune;
        ctx->deterministic = dense_contexts[i].deterministic;
        ctx->tf32 = dense_contexts[i].tf32;
        r = batches_against_cpu(ctx, dense_contexts[i].batches, dense_contexts[i].count, dense_contexts[i].tol,
                                dense_contexts[i].what);
        ctx->autotune = 0;
        ctx->deterministic = 0;
        ctx->tf32 = 0;
    }
    return r;
}

/* ---- graph capture ---- */

static bn_status train_body(void *arg)
{
    bn_net *net = arg;
    BN_TRY(bn_net_zero_grad(net));
    BN_TRY(bn_net_forward(net, 1));
    return bn_net_backward(net);
}

/* Every blob a training pass writes, in a fixed order; NULL entries are skipped. */
static int written_blobs(bn_net *net, bn_blob **out, int cap)
{
    int k = 0;
    for (int i = 0; i < net->num_layers && k + 2 <= cap; i++) {
        out[k++] = net->layers[i]->out;
        if (net->layers[i]->out_grad) out[k++] = net->layers[i]->out_grad;
    }
    if (k + 3 <= cap) {
        out[k++] = net->grads;
        out[k++] = net->input_grad;
        out[k++] = net->metrics;
    }
    return k;
}

/* Copies of the current elements of the blobs, concatenated; freed by the caller. */
static float *snapshot(bn_blob **blobs, int count)
{
    size_t total = 0;
    for (int i = 0; i < count; i++) total += bn_blob_count(blobs[i]);
    float *s = malloc(total * sizeof *s);
    if (!s) return NULL;
    size_t at = 0;
    for (int i = 0; i < count; i++) {
        const float *h = bn_blob_host_rd(blobs[i]);
        if (!h) {
            free(s);
            return NULL;
        }
        memcpy(s + at, h, bn_blob_count(blobs[i]) * sizeof *s);
        at += bn_blob_count(blobs[i]);
    }
    return s;
}

static int same_as(bn_blob **blobs, int count, const float *ref, const char *when, uint64_t seed)
{
    size_t at = 0;
    for (int i = 0; i < count; i++) {
        const float *h = bn_blob_host_rd(blobs[i]);
        CHECK_MSG(h, "%s", bn_last_error());
        size_t c = bn_blob_count(blobs[i]);
        CHECK_MSG(memcmp(h, ref + at, c * sizeof *h) == 0, "%s: %s differs from the eager pass (seed %llu)", when,
                  blobs[i]->name, (unsigned long long)seed);
        at += c;
    }
    return BN_PASS;
}

/* Eager warm-up, then a captured pass and replays, each equal to the eager pass bit for bit. */
static int graph_replay_matches_eager(bn_ctx *ctx, const char *what)
{
    uint64_t seed = lt_fresh_seed();
    bn_net *net;
    CHECK_OK(bn_net_from_text(TRAIN_TEXT, "dense-graph", &net));
    CHECK_OK(bn_net_setup(net, CAPACITY, ctx, 1, seed));
    bn_rng r;
    bn_rng_seed(&r, seed, 9);
    float *x = bn_blob_host_wr(net->input);
    CHECK(x);
    for (size_t i = 0; i < net->input->capacity; i++) x[i] = (float)bn_rng_normal(&r);
    float *labels = bn_blob_host_wr(net->labels);
    CHECK(labels);
    for (int i = 0; i < CAPACITY; i++) labels[i] = (float)bn_rng_below(&r, CLASSES);

    /* The first eager pass makes the plans (and times algorithms); the second is the reference. */
    CHECK_OK(train_body(net));
    CHECK_OK(train_body(net));
    bn_blob *blobs[32];
    int count = written_blobs(net, blobs, 32);
    float *ref = snapshot(blobs, count);
    CHECK_MSG(ref, "%s", bn_last_error());
    double loss_ref, correct_ref;
    CHECK_OK(bn_net_metrics(net, &loss_ref, &correct_ref));
    CHECK_MSG(isfinite(loss_ref) && loss_ref > 0.0, "eager loss sum %g", loss_ref);

    bn_step_graph graph = {0};
    for (int round = 0; round < 4; round++) {
        for (int i = 0; i < count; i++) CHECK_OK(poison(blobs[i], ctx));
        int replayed = -1;
        CHECK_OK(bn_step_graph_run(&graph, ctx, train_body, NULL, net, &replayed));
        CHECK_MSG(!graph.failed && graph.exec, "the training pass could not be captured");
        CHECK_MSG(replayed == (round > 0), "round %d: replayed %d", round, replayed);
        bn_net_mark_device_written(net);
        char when[48];
        if (round == 0) snprintf(when, sizeof when, "captured pass");
        else snprintf(when, sizeof when, "replay %d", round);
        CHECK(same_as(blobs, count, ref, when, seed) == BN_PASS);
        double loss, correct;
        CHECK_OK(bn_net_metrics(net, &loss, &correct));
        CHECK_MSG(loss == loss_ref && correct == correct_ref, "%s: metrics %.9g, %g; eager %.9g, %g", when, loss,
                  correct, loss_ref, correct_ref);
    }
    printf("    dense+relu+dense+softmax_ce at batch %d, %s: captured pass and 3 replays equal the eager pass bit "
           "for bit\n",
           CAPACITY, what);
    bn_step_graph_free(&graph);
    free(ref);
    bn_net_free(net);
    return BN_PASS;
}

BN_TEST(gpu_dense_graph_replay_matches_eager_pass)
{
    if (bn_device_count() == 0) BN_SKIP_TEST("no CUDA device");
    bn_ctx *ctx;
    CHECK_OK(bn_ctx_open(0, &ctx));
    ctx->autotune = 1;
    int r = graph_replay_matches_eager(ctx, "timed choice");
    ctx->autotune = 0;
    return r;
}

/* A data-parallel rank's context (bn_ctx_prioritize): the main stream above the side stream in
 * priority, a graph that keeps its kernels' priorities, and the same pass bit for bit; then the
 * streams back as a context opens them. */
BN_TEST(gpu_prioritized_streams_replay_the_eager_pass)
{
    if (bn_device_count() == 0) BN_SKIP_TEST("no CUDA device");
    bn_ctx *ctx;
    CHECK_OK(bn_ctx_open(0, &ctx));
    int main0, side0, main1, side1, main2, side2;
    CHECK_OK(bn_ctx_stream_priorities(ctx, &main0, &side0));
    CHECK_MSG(!ctx->prioritized && main0 == side0, "an opened context: streams of priority %d and %d", main0, side0);
    CHECK_OK(bn_ctx_prioritize(ctx, 1));
    bn_status s = bn_ctx_stream_priorities(ctx, &main1, &side1);
    int r = s == BN_OK && ctx->prioritized && main1 < side1 && side1 == side0
                ? graph_replay_matches_eager(ctx, "prioritised streams")
                : BN_FAIL;
    CHECK_OK(bn_ctx_prioritize(ctx, 0));
    CHECK_OK(s);
    CHECK_MSG(r != BN_FAIL || main1 < side1, "prioritised: the main stream at %d, the side stream at %d", main1, side1);
    CHECK_OK(bn_ctx_stream_priorities(ctx, &main2, &side2));
    CHECK_MSG(!ctx->prioritized && main2 == main0 && side2 == side0, "back: priorities %d and %d, not %d and %d",
              main2, side2, main0, side0);
    return r;
}

/* ---- the layer's own GEMM kernels, forced ---- */

/* The own kernels in each configuration with the shape's rule and with forced inner
 * ranges (split-K reduced in the kernel through per-tile counters), on shapes whose n, m and k
 * are no multiples of the tiles, with operands at 4-, 8- and 16-byte alignments (the tensor-core
 * kernels' three copy widths: 4-byte ones in own_gemm_tc, 8- and 16-byte ones in own_gemm_tck at
 * 32 x 32 tiles); two backward passes per step, so dW and db must have
 * accumulated twice (and the counters be back at zero between launches). */
BN_TEST(gpu_dense_own_kernels_match_cpu_on_odd_shapes_and_splits)
{
    if (bn_device_count() == 0) BN_SKIP_TEST("no CUDA device");
    bn_ctx *ctx;
    CHECK_OK(bn_ctx_open(0, &ctx));
    static const struct {
        const char *text;
        int capacity;
        int batches[3];
        const char *what;
    } nets[] = {
        {"[input]\nchannels=29\nheight=1\nwidth=1\n[dense]\noutputs=13\n", 37, {37, 5, 37}, "37x13x29"},
        {"[input]\nchannels=500\nheight=1\nwidth=1\n[dense]\noutputs=10\n", 4, {1, 4, 1}, "1x10x500"},
        {"[input]\nchannels=800\nheight=1\nwidth=1\n[dense]\noutputs=500\n", 257, {257, 64, 257}, "257x500x800"},
        {DENSE_TEXT, CAPACITY, {64, 37, 64}, "lenet 800 -> 500 -> 10"},
        /* The second layer's weights start 2210 floats into the slab (8-byte aligned, as LeNet's
         * ip1 does) and its rows are 34 long: the tensor-core kernel's 8-byte copies, beside 16-byte
         * ones for the other operand of each product. */
        {"[input]\nchannels=64\nheight=1\nwidth=1\n[dense]\noutputs=34\n[dense]\noutputs=48\n", 70, {70, 33, 70},
         "70x34x64 -> 48, 8-byte aligned rows"},
    };
    /* Configuration 4: the few-outputs kernels for the forward and input-gradient products of
     * layers with at most 16 outputs (here 13 and 10), the 32x32 FMA tiles elsewhere. */
    static const int forced[][2] = {{0, 0}, {1, 0}, {0, 3}, {1, 7}, {1, 32}, {2, 0},
                                    {2, 5}, {3, 0}, {3, 3}, {3, 32}, {4, 0}};
    static const char *const tiles[] = {"64x64", "32x32", "tensor-core 64x64", "tensor-core 32x32", "few-outputs"};
    int r = BN_PASS;
    for (size_t i = 0; i < sizeof nets / sizeof nets[0] && r == BN_PASS; i++)
        for (size_t f = 0; f < sizeof forced / sizeof forced[0] && r == BN_PASS; f++) {
            char what[160];
            snprintf(what, sizeof what, "own kernels %s, tiles %s, splits %d, backward twice", nets[i].what,
                     tiles[forced[f][0]], forced[f][1]);
            bn_dense_gpu_force_own(forced[f][0], forced[f][1]);
            r = net_batches_against_cpu(ctx, nets[i].text, nets[i].capacity, nets[i].batches, 3, TOL_FP32, 2, what);
        }
    bn_dense_gpu_force_own(-1, 0);
    return r;
}

/* The own kernels give the same bits launch after launch: one eager step twice (outputs and
 * gradients equal), then captured and replayed (the per-tile counters must reset in the graph). */
BN_TEST(gpu_dense_own_kernels_graph_replay_is_bit_exact)
{
    if (bn_device_count() == 0) BN_SKIP_TEST("no CUDA device");
    bn_ctx *ctx;
    CHECK_OK(bn_ctx_open(0, &ctx));
    static const int forced[][2] = {{1, 0}, {0, 5}, {1, 16}, {2, 0}, {2, 4}, {3, 7}, {4, 0}};
    static const char *const tiles[] = {"64x64", "32x32", "tensor-core 64x64", "tensor-core 32x32", "few-outputs"};
    int r = BN_PASS;
    for (size_t f = 0; f < sizeof forced / sizeof forced[0] && r == BN_PASS; f++) {
        char what[64];
        snprintf(what, sizeof what, "own kernels, tiles %s, splits %d", tiles[forced[f][0]], forced[f][1]);
        bn_dense_gpu_force_own(forced[f][0], forced[f][1]);
        r = graph_replay_matches_eager(ctx, what);
    }
    bn_dense_gpu_force_own(-1, 0);
    return r;
}

/* The tensor cores' 32x32 tiles split their inner dimension for about two blocks a multiprocessor,
 * at most 16 ranges, each at least 4 slices of 16 in a weight gradient and 12 in the forward and
 * input-gradient products (even counts: 32-deep copies): LeNet's ip1 and ip2 at 256, 128 and 64
 * images on 132 and 114 multiprocessors, and mlp_wide's 2048-wide layer. */
BN_TEST(dense_tensor_tiles_split_for_two_blocks_a_multiprocessor)
{
    int splits = 0;
    if (!bn_dense_gpu_tiling(0, 256, 800, 500, 132, &splits)) BN_SKIP_TEST("built without CUDA");
    static const struct {
        int kind, n, k, m, sms, splits;
    } cases[] = {
        {0, 256, 800, 500, 132, 3},   /* 8 x 16 tiles, 50 slices: ranges of 18 */
        {2, 256, 800, 500, 132, 2},   /* 8 x 25 tiles, 32 slices */
        {1, 256, 800, 500, 132, 1},   /* 16 x 25 */
        {0, 64, 800, 500, 132, 4},    /* 2 x 16 tiles: nine wanted, four of 12 slices (14, even) fit */
        {2, 64, 800, 500, 132, 2},    /* 2 x 25 tiles: six wanted, two of 16 slices */
        {0, 128, 800, 500, 132, 4},   /* 4 x 16: five wanted */
        {1, 256, 500, 10, 132, 4},    /* 1 x 16 tiles, 16 slices: ranges of 4 */
        {0, 256, 800, 500, 114, 2},   /* 228 blocks wanted */
        {0, 16, 40, 20, 132, 1},      /* one tile of 3 slices */
        {0, 128, 2048, 2048, 132, 2}, /* 4 x 64 tiles, 128 slices */
        {2, 4096, 800, 500, 132, 1},  /* 128 x 25 tiles */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        CHECK(bn_dense_gpu_tiling(cases[i].kind, cases[i].n, cases[i].k, cases[i].m, cases[i].sms, &splits));
        CHECK_MSG(splits == cases[i].splits, "product %d, %d x %d -> %d on %d multiprocessors: %d ranges, not %d",
                  cases[i].kind, cases[i].n, cases[i].k, cases[i].m, cases[i].sms, splits, cases[i].splits);
    }
    return BN_PASS;
}

/* A deterministic context takes the own kernels by a fixed rule: two networks built alike give
 * the same bits, and they match the CPU. */
BN_TEST(gpu_dense_deterministic_own_kernels_repeat_bit_for_bit)
{
    if (bn_device_count() == 0) BN_SKIP_TEST("no CUDA device");
    bn_ctx *ctx;
    CHECK_OK(bn_ctx_open(0, &ctx));
    ctx->deterministic = 1;
    uint64_t seed = lt_fresh_seed();
    float *first = NULL;
    int r = BN_PASS;
    for (int round = 0; round < 2 && r == BN_PASS; round++) {
        bn_net *net;
        CHECK_OK(bn_net_from_text(TRAIN_TEXT, "dense-det", &net));
        CHECK_OK(bn_net_setup(net, CAPACITY, ctx, 1, seed));
        bn_rng rg;
        bn_rng_seed(&rg, seed, 5);
        float *x = bn_blob_host_wr(net->input), *labels = bn_blob_host_wr(net->labels);
        CHECK(x && labels);
        for (size_t i = 0; i < net->input->capacity; i++) x[i] = (float)bn_rng_normal(&rg);
        for (int i = 0; i < CAPACITY; i++) labels[i] = (float)bn_rng_below(&rg, CLASSES);
        CHECK_OK(train_body(net));
        CHECK_OK(train_body(net));
        bn_blob *blobs[32];
        int count = written_blobs(net, blobs, 32);
        if (round == 0) {
            first = snapshot(blobs, count);
            CHECK_MSG(first, "%s", bn_last_error());
            const float *g = bn_blob_host_rd(net->grads);
            CHECK(g);
            int nonzero = 0;
            for (size_t i = 0; i < bn_blob_count(net->grads); i++) {
                CHECK_MSG(isfinite(g[i]), "gradient %zu is %g (seed %llu)", i, g[i], (unsigned long long)seed);
                nonzero += g[i] != 0.0f;
            }
            CHECK_MSG(nonzero > 0, "all gradients zero (seed %llu)", (unsigned long long)seed);
        } else {
            r = same_as(blobs, count, first, "second deterministic network", seed);
        }
        bn_net_free(net);
    }
    free(first);
    ctx->deterministic = 0;
    return r;
}
