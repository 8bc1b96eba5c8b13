/* test_gpu_layers.c - every built-in layer's GPU path against its CPU reference.
 *
 * Each case builds the same model twice (same seed, so the same weights), one on the CPU and
 * one on the device, feeds both the same fresh random inputs, labels, output gradient and
 * starting parameter gradients, runs forward and backward, and compares every output, every
 * intermediate and input gradient and every parameter gradient. Before the pass the device
 * copies of all outputs and gradients are poisoned with NaN, and the input rows past the
 * current batch are NaN on both sides, so an element the GPU forgets to write, or a row it
 * reads past the batch, fails the comparison. Parameter gradients start from the same random
 * values rather than zero: both paths must add to them.
 *
 * A difference is measured as max |gpu - cpu| over the blob divided by the blob's scale:
 * max |cpu|, or for a parameter gradient max |cpu - start|, what backward added (1 when that
 * is all zeros). A failure prints the seed; BLOBNET_TEST_SEED=<seed> replays it. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conv2d/conv2d.h"
#ifdef BN_WITH_CUDA
#include "conv2d/conv_rows.h"
#include "conv2d/conv_tensor.h"
#endif
#include "core/net.h"
#include "core/rng.h"
#include "layer_testing.h"
#include "softmax_ce.h"
#include "testing.h"
#include "train/numerics.h"

/* GEMM-based layers (dense, conv2d) in FP32: the two sides add up to a few hundred products per
 * element in different orders, and cuDNN may use Winograd or FFT transforms; that moves results
 * by a few 1e-6 of the blob's scale. TF32 tensor cores (10-bit mantissa) would be off by
 * about 1e-3, so this bound also catches a silent switch to TF32. */
#define TOL_GEMM 1e-4
/* TF32 products (a 10-bit fraction) put a blob about 1e-3 of its scale from the CPU's FP32 sums. */
#define TOL_TF32 1e-2
/* Elementwise layers, pooling and softmax: the same formula per element; CUDA's and libm's
 * exp/tanh differ by a few ulps (pooling itself matches bit for bit: test_gpu_pool.c). */
#define TOL_ELEMENTWISE 1e-5
/* Weight gradients summed over a batch of 257 behind average pooling: every one of the 16,448
 * products of a sum is non-zero and they cancel, so two FP32 summation orders (the CPU's GEMM
 * and blobnet's split sums) end further apart relative to the result (1.03e-4 seen once); still
 * well below the ~1e-3 of TF32 products. */
#define TOL_LONG_SUMS 4e-4
/* The loss sum is accumulated in double on both sides and rounded to float once. */
#define TOL_LOSS_SUM 1e-5

/* (capacity, batch) pairs: batch sizes 1, 3, 64, 257, and a last batch smaller than the blobs. */
static const int capacities[] = {1, 3, 64, 257, 64};
static const int batches[] = {1, 3, 64, 257, 37};
#define NUM_SIZES (int)(sizeof batches / sizeof batches[0])

typedef struct layer_case {
    const char *what;
    const char *text;   /* the model; without a loss layer the test sets the last output gradient */
    double tol;
    int classes;        /* with a loss layer: labels in [0, classes) */
    int zeros;          /* put exact zeros among the inputs (the kinks of relu-like layers) */
    int own_convs;      /* every conv2d pass that blobnet's kernels can run must have run on them */
    int autotuned_too;  /* run the comparisons a second time with an autotuning context (the
                           kernels chosen by timing, cuDNN's and cuBLASLt's among them) */
    int grad_in_forward; /* the loss layer writes its input gradient in the forward pass, as
                            in the trainer's step (bn_net_fuse_loss) */
    int exact_convs;    /* inputs and conv2d weights and biases on a coarse grid (grid_params), so
                           that every convolution's sums are exact in FP32 in any order */
} layer_case;

/* Writes the whole capacity of b's host copy (rows past the current batch included). */
static bn_status put(bn_blob *b, const float *v)
{
    float *h = bn_blob_host_wr(b);
    if (!h) return bn_last_status();
    memcpy(h, v, b->capacity * sizeof *h);
    return BN_OK;
}

/* Fills b's device copy with NaN (the whole capacity). */
static bn_status poison(bn_blob *b, bn_ctx *ctx)
{
    if (!b) return BN_OK;
    float *d = bn_blob_dev_wr(b);
    if (!d) return bn_last_status();
    return bn_gpu_fill(d, NAN, b->capacity, ctx);
}

static bn_status poison_net(bn_net *net, bn_ctx *ctx)
{
    BN_TRY(poison(net->input_grad, ctx));
    BN_TRY(poison(net->metrics, ctx));
    for (int i = 0; i < net->num_layers; i++) {
        BN_TRY(poison(net->layers[i]->out, ctx));
        BN_TRY(poison(net->layers[i]->out_grad, ctx));
    }
    return BN_OK;
}

/* A buffer of b's capacity: normal values times scale for the first `count`, then NaN. Freed
 * by the caller. */
static float *random_rows(const bn_blob *b, size_t count, bn_rng *r, double scale, int zeros)
{
    float *v = malloc(b->capacity * sizeof *v);
    if (!v) return NULL;
    for (size_t i = 0; i < b->capacity; i++) v[i] = i < count ? (float)(scale * bn_rng_normal(r)) : NAN;
    if (zeros)
        for (size_t i = 0; i < count; i += 7) v[i] = 0.0f;
    return v;
}

/* Writes the same random rows to both blobs; with kept, hands the values to the caller. */
static bn_status feed_blob(bn_blob *cpu, bn_blob *gpu, bn_rng *r, double scale, int zeros, float **kept)
{
    float *v = random_rows(cpu, bn_blob_count(cpu), r, scale, zeros);
    if (!v) return bn_error(BN_ERR_NOMEM, "test: out of host memory");
    bn_status s = put(cpu, v);
    if (s == BN_OK) s = put(gpu, v);
    if (kept && s == BN_OK) *kept = v;
    else free(v);
    return s;
}

/* A value of the coarse grid: an integer in [-2, 2] times `step`. */
static float grid_value(bn_rng *r, float step)
{
    return (float)((int)bn_rng_below(r, 5) - 2) * step;
}

/* For layer_case.exact_convs: the same inputs on both nets, integers in [-2, 2] (NaN past the
 * batch), and every conv2d layer's weights and biases such integers times a power of two near
 * 1 / sqrt(2 fan-in), which keeps the outputs' spread near the inputs' (and the loss away
 * from saturation). Each convolution's outputs then stay multiples of a power of two with few
 * enough significant bits for FP32 and for split TF32 products to hold them exactly, so the CPU
 * and every GPU kernel get the same bits whatever their order of summation, and a max pooling
 * after one takes the same cell of every window, ties included. With random FP32 data a
 * window's two largest outputs can lie closer than the kernels' rounding differences, and the
 * pooling then routes the gradient to another cell on the GPU. */
static bn_status grid_params(bn_net *cpu, bn_net *gpu, bn_rng *r)
{
    float *x = malloc(cpu->input->capacity * sizeof *x), *p = malloc(cpu->params->capacity * sizeof *p);
    const float *now = bn_blob_host_rd(cpu->params);
    bn_status s = x && p ? BN_OK : bn_error(BN_ERR_NOMEM, "test: out of host memory");
    if (s == BN_OK && !now) s = bn_last_status();
    if (s == BN_OK) {
        const size_t count = bn_blob_count(cpu->input);
        for (size_t i = 0; i < cpu->input->capacity; i++) x[i] = i < count ? grid_value(r, 1.0f) : NAN;
        memcpy(p, now, cpu->params->capacity * sizeof *p);
        for (int i = 0; i < cpu->num_layers; i++) {
            const bn_layer *l = cpu->layers[i];
            if (strcmp(l->ops->type, "conv2d") != 0) continue;
            const bn_blob *w = l->params[0].value; /* (filters, channels, k, k) */
            const double fan_in = (double)bn_blob_count(w) / w->n;
            const float step = (float)ldexp(1.0, -(int)lround(log2(sqrt(2.0 * fan_in))));
            for (int k = 0; k < l->num_params; k++) {
                const bn_blob *v = l->params[k].value;
                for (size_t e = 0; e < bn_blob_count(v); e++) p[v->offset + e] = grid_value(r, step);
            }
        }
        s = put(cpu->input, x);
    }
    if (s == BN_OK) s = put(gpu->input, x);
    if (s == BN_OK) s = put(cpu->params, p);
    if (s == BN_OK) s = put(gpu->params, p);
    free(x);
    free(p);
    return s;
}

/* Same inputs, labels, last output gradient and starting parameter gradients on both nets;
 * *start receives the latter (NULL without parameters), freed by the caller. */
static bn_status feed(bn_net *cpu, bn_net *gpu, const layer_case *lc, uint64_t seed, float **start)
{
    bn_rng r;
    bn_rng_seed(&r, seed, 7);
    *start = NULL;
    if (lc->exact_convs) BN_TRY(grid_params(cpu, gpu, &r));
    else BN_TRY(feed_blob(cpu->input, gpu->input, &r, 1.0, lc->zeros, NULL));
    if (lc->classes) {
        float *y = malloc(cpu->labels->capacity * sizeof *y);
        if (!y) return bn_error(BN_ERR_NOMEM, "test: out of host memory");
        /* Past the batch: a label no class has, which the GPU would turn into NaN. */
        for (size_t i = 0; i < cpu->labels->capacity; i++)
            y[i] = i < (size_t)cpu->batch ? (float)bn_rng_below(&r, (uint64_t)lc->classes) : -1.0f;
        bn_status s = put(cpu->labels, y);
        if (s == BN_OK) s = put(gpu->labels, y);
        free(y);
        BN_TRY(s);
    } else {
        BN_TRY(feed_blob(cpu->layers[cpu->num_layers - 1]->out_grad, gpu->layers[gpu->num_layers - 1]->out_grad, &r,
                         1.0, 0, NULL));
    }
    if (cpu->grads) BN_TRY(feed_blob(cpu->grads, gpu->grads, &r, 0.1, 0, start));
    return BN_OK;
}

/* 1 when every current element of b is NaN (the poison: nothing wrote it), else 0. */
static int all_nan(bn_blob *b)
{
    const float *v = bn_blob_host_rd(b);
    if (!v) return 0;
    for (size_t i = 0; i < bn_blob_count(b); i++)
        if (!isnan(v[i])) return 0;
    return 1;
}

static int compare_blob(const char *what, int n, bn_blob *gpu, bn_blob *cpu, const float *base, double tol,
                        uint64_t seed, double *worst)
{
    const float *g = bn_blob_host_rd(gpu);
    const float *c = bn_blob_host_rd(cpu);
    CHECK_MSG(g && c, "%s", bn_last_error());
    size_t at;
    double d = lt_rel_diff(g, c, base, bn_blob_count(cpu), &at);
    if (d > *worst) *worst = d;
    CHECK_MSG(d <= tol,
              "%s, batch %d: %s differs by %.3g of its scale (tolerance %g); element %zu: gpu %.9g, cpu %.9g; "
              "data seed %llu",
              what, n, cpu->name, d, tol, at, g[at], c[at], (unsigned long long)seed);
    return BN_PASS;
}

static int compare_nets(const layer_case *lc, bn_net *gpu, bn_net *cpu, const float *start, uint64_t seed,
                        double *worst)
{
    int n = cpu->batch;
    for (int i = 0; i < cpu->num_layers; i++) {
        bn_layer *lg = gpu->layers[i], *lcpu = cpu->layers[i];
        /* Where the next layer's forward pass is another's that may read past this output (a
         * max pooling done by the convolution before it), the output is the poison when that
         * kernel did so, and compared when it did not. */
        if (!bn_net_blob_unwritten(gpu, i, 0) || !all_nan(lg->out))
            CHECK(compare_blob(lc->what, n, lg->out, lcpu->out, NULL, lc->tol, seed, worst) == BN_PASS);
        /* Not where the next layer's backward pass is another's that reads past it (the same
         * pooling): nothing writes it on the device. */
        if (i + 1 < cpu->num_layers && !bn_net_blob_unwritten(gpu, i, 1))
            CHECK(compare_blob(lc->what, n, lg->out_grad, lcpu->out_grad, NULL, lc->tol, seed, worst) == BN_PASS);
        for (int k = 0; k < lcpu->num_params; k++) {
            bn_blob *grad = lcpu->params[k].grad;
            CHECK(compare_blob(lc->what, n, lg->params[k].grad, grad, start + grad->offset, lc->tol, seed, worst) ==
                  BN_PASS);
        }
    }
    CHECK(compare_blob(lc->what, n, gpu->input_grad, cpu->input_grad, NULL, lc->tol, seed, worst) == BN_PASS);
    if (lc->classes) {
        double gl, gc, cl, cc;
        CHECK_OK(bn_net_metrics(gpu, &gl, &gc));
        CHECK_OK(bn_net_metrics(cpu, &cl, &cc));
        CHECK_MSG(fabs(gl - cl) <= TOL_LOSS_SUM * fabs(cl), "%s, batch %d: loss sum %.9g on the GPU, %.9g on the CPU",
                  lc->what, n, gl, cl);
        CHECK_MSG(gc == cc, "%s, batch %d: %g correct on the GPU, %g on the CPU", lc->what, n, gc, cc);
    }
    return BN_PASS;
}

/* The conv2d kernel family the blobnet-engine cases force (BN_CONV_FAMILY_*). */
static int forced_family = BN_CONV_FAMILY_ANY;

/* Every conv2d layer's plan for batch n runs forward and backward-filter on blobnet's kernels
 * (of the forced family, when one is), and backward-data too where there is an input gradient
 * and the stride is 1. */
static int check_own_convs(const layer_case *lc, bn_net *net, int n)
{
#ifdef BN_WITH_CUDA
    for (int i = 0; i < net->num_layers; i++) {
        bn_layer *l = net->layers[i];
        if (strcmp(l->ops->type, "conv2d") != 0) continue;
        const conv_priv *c = l->priv;
        /* The forced family where it can run the pass (its plan says so), else any of blobnet's,
         * as the plan then times the others. */
        static const char *const names[] = {"blobnet", "blobnet direct", "blobnet igemm", "blobnet rows",
                                            "blobnet tensor", "blobnet argmax"};
        int can[3] = {1, 1, 1};
        if (forced_family == BN_CONV_FAMILY_ROWS) {
            bn_rows_plan rp;
            bn_rows_plan_make(&rp, &c->g, c->filters, n, 1);
            can[0] = rp.fwd_ok, can[1] = rp.data_ok, can[2] = rp.filter_ok;
        } else if (forced_family == BN_CONV_FAMILY_TENSOR) {
            bn_tensor_plan tp;
            bn_tensor_plan_make(&tp, &c->g, c->filters, n, 1, 0);
            can[0] = tp.fwd_ok, can[1] = tp.data_ok, can[2] = tp.filter_ok;
        }
        const char *pass_family[3];
        for (int k = 0; k < 3; k++) pass_family[k] = names[can[k] ? forced_family : 0];
        const char *family = names[forced_family];
        char buf[1024], head[32];
        bn_conv2d_gpu_describe(l, buf, sizeof buf);
        snprintf(head, sizeof head, "n=%d: ", n);
        char *plan = strstr(buf, head);
        CHECK_MSG(plan != NULL, "%s, layer %s: no plan for batch %d in \"%s\"", lc->what, l->name, n, buf);
        char *end = strchr(plan, ';');
        if (end) *end = '\0';
        char fwd[64], filter[64], data[64];
        snprintf(fwd, sizeof fwd, "fwd %s", pass_family[0]);
        snprintf(filter, sizeof filter, "bwd_filter %s", pass_family[2]);
        if (!l->in_grad) snprintf(data, sizeof data, "bwd_data -");
        else if (c->stride == 1) snprintf(data, sizeof data, "bwd_data %s", pass_family[1]);
        else snprintf(data, sizeof data, "bwd_data");
        CHECK_MSG(strstr(plan, fwd) && strstr(plan, filter) && strstr(plan, data),
                  "%s, layer %s: plan \"%s\" does not run %s's kernels where it should", lc->what, l->name, plan,
                  family);
    }
#else
    (void)lc, (void)net, (void)n;
#endif
    return BN_PASS;
}

static int compare_once(const layer_case *lc, int capacity, int n, uint64_t seed, bn_ctx *ctx, double *worst)
{
    bn_net *cpu, *gpu;
    CHECK_OK(bn_net_from_text(lc->text, lc->what, &cpu));
    CHECK_OK(bn_net_from_text(lc->text, lc->what, &gpu));
    CHECK_OK(bn_net_setup(cpu, capacity, NULL, 1, seed));
    CHECK_OK(bn_net_setup(gpu, capacity, ctx, 1, seed));
    CHECK_OK(bn_net_set_batch(cpu, n));
    CHECK_OK(bn_net_set_batch(gpu, n));
    float *start;
    CHECK_OK(poison_net(gpu, ctx));
    CHECK_OK(feed(cpu, gpu, lc, seed, &start)); /* after the poison: it sets the last output gradient */
    if (lc->grad_in_forward)
        CHECK_MSG(bn_net_fuse_loss(gpu, NULL, 1), "%s: no softmax_ce to fuse", lc->what);
    CHECK_OK(bn_net_forward(cpu, 1));
    CHECK_OK(bn_net_forward(gpu, 1));
    CHECK_OK(bn_net_backward(cpu));
    CHECK_OK(bn_net_backward(gpu));
    if (lc->grad_in_forward) bn_net_unfuse_loss(gpu);
    int r = compare_nets(lc, gpu, cpu, start, seed, worst);
    if (r == BN_PASS && lc->own_convs) r = check_own_convs(lc, gpu, n);
    free(start);
    bn_net_free(cpu);
    bn_net_free(gpu);
    return r;
}

/* compare_once at every size of capacities and batches in ctx as it is, the worst difference
 * printed, or how to rerun a failure. */
static int compare_sizes(const layer_case *lc, bn_ctx *ctx, uint64_t seed)
{
    double worst = 0.0;
    int r = BN_PASS;
    for (int k = 0; k < NUM_SIZES && r == BN_PASS; k++)
        r = compare_once(lc, capacities[k], batches[k], seed + (uint64_t)k, ctx, &worst);
    if (r != BN_PASS) printf("    %s: rerun with BLOBNET_TEST_SEED=%llu\n", lc->what, (unsigned long long)seed);
    else printf("    %s vs cpu: worst difference %.3g of scale (tolerance %g)\n", lc->what, worst, lc->tol);
    return r;
}

static int run_case(const layer_case *lc)
{
    if (bn_device_count() == 0) BN_SKIP_TEST("no CUDA device");
    bn_ctx *ctx;
    CHECK_OK(bn_ctx_open(0, &ctx));
    /* Batch size k draws its data from seed + k; BLOBNET_TEST_SEED sets seed. */
    uint64_t seed = lt_fresh_seed();
    for (int tune = 0; tune <= (lc->autotuned_too ? 1 : 0); tune++) {
        double worst = 0.0;
        ctx->autotune = tune;
        int r = BN_PASS;
        for (int k = 0; k < NUM_SIZES && r == BN_PASS; k++) {
            r = compare_once(lc, capacities[k], batches[k], seed + (uint64_t)k, ctx, &worst);
            if (r != BN_PASS)
                printf("    %s%s, batch %d: rerun with BLOBNET_TEST_SEED=%llu\n", lc->what,
                       tune ? " (autotuned)" : "", batches[k], (unsigned long long)seed);
        }
        ctx->autotune = 0;
        if (r != BN_PASS) return r;
        printf("    gpu vs cpu %s%s, batches 1, 3, 64, 257, 37 of 64: worst difference %.3g of scale (tolerance %g)\n",
               lc->what, tune ? " (autotuned)" : "", worst, lc->tol);
    }
    return BN_PASS;
}

BN_TEST(gpu_layer_dense_matches_cpu)
{
    static const layer_case lc = {"dense 3x5x7 -> 13 -> 6",
                                  "[input]\nchannels=3\nheight=5\nwidth=7\n[dense]\noutputs=13\n"
                                  "[dense]\noutputs=6\ninit=he\n",
                                  TOL_GEMM, 0, 0, 0, 1, 0, 0};
    return run_case(&lc);
}

/* Between two dense layers a ReLU's GPU passes run in the dense kernels' epilogues
 * (bn_layer_ops.fuse_gpu): every blob still matches the CPU, with the rule's kernels (the
 * few-outputs ones for 13 and 6 outputs, split-K for 17) and with the autotuned ones (cuBLASLt's
 * among them, followed by the ReLU layer's own pass). */
BN_TEST(gpu_layer_relu_fused_between_dense_layers_matches_cpu)
{
    static const layer_case lc = {"dense 13, relu, dense 17, relu, dense 6 (relus fused)",
                                  "[input]\nchannels=3\nheight=5\nwidth=7\n[dense]\noutputs=13\n[relu]\n"
                                  "[dense]\noutputs=17\ninit=he\n[relu]\n[dense]\noutputs=6\n",
                                  TOL_GEMM, 0, 0, 0, 1, 0, 0};
    if (bn_device_count() == 0) BN_SKIP_TEST("no CUDA device");
    bn_ctx *ctx;
    CHECK_OK(bn_ctx_open(0, &ctx));
    bn_net *net;
    CHECK_OK(bn_net_from_text(lc.text, lc.what, &net));
    bn_status s = bn_net_setup(net, 8, ctx, 1, 1);
    const int both = BN_FUSED_FORWARD | BN_FUSED_BACKWARD;
    const int f1 = s == BN_OK ? net->layers[1]->gpu_fused : -1, f3 = s == BN_OK ? net->layers[3]->gpu_fused : -1;
    const int others = s == BN_OK ? net->layers[0]->gpu_fused | net->layers[2]->gpu_fused | net->layers[4]->gpu_fused : -1;
    bn_net_free(net);
    CHECK_OK(s);
    CHECK_MSG(f1 == both && f3 == both && others == 0, "fused passes: relus %d and %d, dense layers %d (want %d, %d, 0)",
              f1, f3, others, both, both);
    return run_case(&lc);
}

BN_TEST(gpu_layer_conv2d_matches_cpu)
{
    /* 3x7x9 -> 5x4x5 (k3 s2 p1) -> 4x6x7 (k3 s1 p2) -> 2x3x3 (k4 s2 p1) */
    static const layer_case lc = {"conv2d 3x7x9 k3s2p1, k3s1p2, k4s2p1",
                                  "[input]\nchannels=3\nheight=7\nwidth=9\n"
                                  "[conv2d]\nfilters=5\nsize=3\nstride=2\npad=1\n"
                                  "[conv2d]\nfilters=4\nsize=3\nstride=1\npad=2\ninit=he\n"
                                  "[conv2d]\nfilters=2\nsize=4\nstride=2\npad=1\n",
                                  TOL_GEMM, 0, 0, 0, 1, 0, 0};
    return run_case(&lc);
}

BN_TEST(gpu_layer_conv2d_lenet_shapes_match_cpu)
{
    static const layer_case lc = {"conv2d 1x28x28 k5 x20, k5 x50 (LeNet)",
                                  "[input]\nchannels=1\nheight=28\nwidth=28\n"
                                  "[conv2d]\nfilters=20\nsize=5\n[conv2d]\nfilters=50\nsize=5\n",
                                  TOL_GEMM, 0, 0, 0, 1, 0, 0};
    return run_case(&lc);
}

/* engine = cudnn under --tf32 with cuDNN's graph-API engines forced wherever it has one
 * (conv_graph.h; the FP32-exact default keeps the legacy algorithms): timed, every pass of these
 * shapes runs on one ("graph eng" in the plan), and the results stay within TF32's tolerance of
 * the CPU's. Shapes: stride 2, padding 2, 3x3 padded at 32 filters, 1x1. */
BN_TEST(gpu_layer_conv2d_cudnn_graph_tf32_stays_near_cpu)
{
    if (bn_device_count() == 0) BN_SKIP_TEST("no CUDA device");
    static const layer_case cases[] = {
        {"cudnn graph conv2d 3x7x9 k3s2p1, k3s1p2 (tf32)",
         "[input]\nchannels=3\nheight=7\nwidth=9\n"
         "[conv2d]\nname=a\nfilters=5\nsize=3\nstride=2\npad=1\nengine=cudnn\n"
         "[conv2d]\nname=b\nfilters=4\nsize=3\nstride=1\npad=2\ninit=he\nengine=cudnn\n",
         TOL_TF32, 0, 0, 0, 0, 0, 0},
        {"cudnn graph conv2d 16x14x14 k3p1 x32, k1 x8 (tf32)",
         "[input]\nchannels=16\nheight=14\nwidth=14\n"
         "[conv2d]\nname=a\nfilters=32\nsize=3\npad=1\ninit=he\nengine=cudnn\n"
         "[conv2d]\nname=b\nfilters=8\nsize=1\nengine=cudnn\n",
         TOL_TF32, 0, 0, 0, 0, 0, 0},
    };
    bn_ctx *ctx;
    CHECK_OK(bn_ctx_open(0, &ctx));
    const uint64_t seed = lt_fresh_seed();
    const int was_autotune = ctx->autotune;
    ctx->tf32 = 1;
    ctx->autotune = 1;
    bn_conv2d_gpu_force_graph(1);
    int r = BN_PASS;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0] && r == BN_PASS; i++) r = compare_sizes(&cases[i], ctx, seed);
    /* The plans of the second case's layers. */
    char plans[2][512] = {"", ""};
    static const char *const names[2] = {"a", "b"};
    char *const into[2] = {plans[0], plans[1]};
    bn_status s = r == BN_PASS ? lt_conv_plans(cases[1].text, ctx, 16, 3, names, into, 2, sizeof plans[0]) : BN_OK;
    bn_conv2d_gpu_force_graph(0);
    ctx->tf32 = 0;
    ctx->autotune = was_autotune;
    if (r != BN_PASS) return r;
    CHECK_OK(s);
#ifdef BN_WITH_CUDA
    for (int k = 0; k < 2; k++) {
        printf("    layer %s: %s\n", k ? "b" : "a", plans[k]);
        CHECK_MSG(strstr(plans[k], "fwd graph eng") && strstr(plans[k], "bwd_filter graph eng") &&
                      (k == 0 || strstr(plans[k], "bwd_data graph eng")),
                  "layer %s's plan \"%s\" does not run every pass on a graph engine", k ? "b" : "a", plans[k]);
    }
#endif
    return BN_PASS;
}

/* ReLU layers fused into convolutions run by cuDNN and into batchnorm layers (fuse_gpu): a's
 * forward writes ra's output from cuDNN's bias kernel; bn writes rb's output, bn2 rc's input
 * gradient (rc's forward stays its own, after a tanh). A convolution leaves a ReLU's backward
 * pass to the ReLU (ra's and rb's here). Every blob still matches the CPU, on cuDNN's legacy
 * algorithms; then a convolution and ReLU pair under --tf32 on cuDNN's graph engines, forced, at
 * the shapes of gpu_layer_conv2d_cudnn_graph_tf32_stays_near_cpu, on the coarse grid of
 * grid_params: with random data, TF32 products move an output lying within ~1e-3 of zero to the
 * other side of it, the ReLU's mask then differs from the CPU's and passes or stops a whole
 * gradient (one such element in 400,000 failed this test by 0.43 of the gradient's scale); on
 * the grid both sides compute every output exactly. The tanh layers keep the biases
 * before a batchnorm out of rounding noise (see batchnorm_case), and a convolution between the
 * two batchnorms keeps bn's gradients from the cancellation of two normalizations in a row. */
BN_TEST(gpu_layer_relu_fused_into_conv2d_and_batchnorm_matches_cpu)
{
    if (bn_device_count() == 0) BN_SKIP_TEST("no CUDA device");
    static const layer_case cases[2] = {
        {"conv a, relu, conv b, tanh, batchnorm, relu, conv c, tanh, relu, batchnorm (relus fused)",
         "[input]\nchannels=4\nheight=6\nwidth=6\n"
         "[conv2d]\nname=a\nfilters=8\nsize=3\npad=1\nengine=cudnn\n[relu]\nname=ra\n"
         "[conv2d]\nname=b\nfilters=8\nsize=3\npad=1\nengine=cudnn\n[tanh]\n[batchnorm]\nname=bn\n"
         "[relu]\nname=rb\n[conv2d]\nname=c\nfilters=8\nsize=1\nengine=cudnn\n[tanh]\n[relu]\nname=rc\n"
         "[batchnorm]\nname=bn2\n",
         TOL_GEMM, 0, 0, 0, 0, 0, 0},
        {"conv 16x14x14 k3p1 x32, relu, k1 x8, relu under tf32, graph engines forced (relus fused)",
         "[input]\nchannels=16\nheight=14\nwidth=14\n"
         "[conv2d]\nname=a\nfilters=32\nsize=3\npad=1\ninit=he\nengine=cudnn\n[relu]\nname=ra\n"
         "[conv2d]\nname=b\nfilters=8\nsize=1\nengine=cudnn\n[relu]\nname=rb\n",
         TOL_TF32, 0, 0, 0, 0, 0, 1},
    };
    bn_ctx *ctx;
    CHECK_OK(bn_ctx_open(0, &ctx));
    bn_net *net;
    CHECK_OK(bn_net_from_text(cases[0].text, cases[0].what, &net));
    bn_status s = bn_net_setup(net, 8, ctx, 1, 1);
    static const char *const relus[3] = {"ra", "rb", "rc"};
    static const int want[3] = {BN_FUSED_FORWARD, BN_FUSED_FORWARD, BN_FUSED_BACKWARD};
    int fused[3] = {-1, -1, -1};
    for (int i = 0; i < 3 && s == BN_OK; i++) fused[i] = bn_net_find_layer(net, relus[i])->gpu_fused;
    bn_net_free(net);
    CHECK_OK(s);
    for (int i = 0; i < 3; i++)
        CHECK_MSG(fused[i] == want[i], "%s's fused passes: %d (want %d)", relus[i], fused[i], want[i]);
    const uint64_t seed = lt_fresh_seed();
    const int was_autotune = ctx->autotune;
    int r = BN_PASS;
    for (int way = 0; way < 2 && r == BN_PASS; way++) {
        ctx->tf32 = way;
        ctx->autotune = way;
        bn_conv2d_gpu_force_graph(way);
        r = compare_sizes(&cases[way], ctx, seed);
    }
    bn_conv2d_gpu_force_graph(0);
    ctx->tf32 = 0;
    ctx->autotune = was_autotune;
    return r;
}

/* engine = blobnet: the same comparisons for blobnet's own convolution kernels, on shapes that
 * take each of their launch forms: stride 2 (backward data then falls back to cuDNN), more
 * input channels than one shared-memory chunk holds, split reductions, a position tile per
 * block (large images), several images per block (tiny outputs), fewer than 5 filters. */
BN_TEST(gpu_layer_conv2d_blobnet_engine_matches_cpu)
{
    static const layer_case cases[] = {
        {"blobnet conv2d 3x7x9 k3s2p1, k3s1p2, k4s2p1",
         "[input]\nchannels=3\nheight=7\nwidth=9\n"
         "[conv2d]\nfilters=5\nsize=3\nstride=2\npad=1\nengine=blobnet\n"
         "[conv2d]\nfilters=4\nsize=3\nstride=1\npad=2\ninit=he\nengine=blobnet\n"
         "[conv2d]\nfilters=2\nsize=4\nstride=2\npad=1\nengine=blobnet\n",
         TOL_GEMM, 0, 0, 1, 0, 0, 0},
        {"blobnet conv2d 1x28x28 k5 x20, k5 x50 (LeNet)",
         "[input]\nchannels=1\nheight=28\nwidth=28\n"
         "[conv2d]\nfilters=20\nsize=5\nengine=blobnet\n[conv2d]\nfilters=50\nsize=5\nengine=blobnet\n",
         TOL_GEMM, 0, 0, 1, 0, 0, 0},
        {"blobnet conv2d 3x10x10 k1 x40, k3p1 x33, k5p2 x6 (chunked, split)",
         "[input]\nchannels=3\nheight=10\nwidth=10\n"
         "[conv2d]\nfilters=40\nsize=1\nengine=blobnet\n"
         "[conv2d]\nfilters=33\nsize=3\npad=1\nengine=blobnet\n"
         "[conv2d]\nfilters=6\nsize=5\npad=2\nengine=blobnet\n",
         TOL_GEMM, 0, 0, 1, 0, 0, 0},
        {"blobnet conv2d 2x40x36 k3p1 x5, k3 x3 (position tiles)",
         "[input]\nchannels=2\nheight=40\nwidth=36\n"
         "[conv2d]\nfilters=5\nsize=3\npad=1\nengine=blobnet\n[conv2d]\nfilters=3\nsize=3\nengine=blobnet\n",
         TOL_GEMM, 0, 0, 1, 0, 0, 0},
        {"blobnet conv2d 4x5x5 k3 x9, k2 x2 (images per block)",
         "[input]\nchannels=4\nheight=5\nwidth=5\n"
         "[conv2d]\nfilters=9\nsize=3\nengine=blobnet\n[conv2d]\nfilters=2\nsize=2\nengine=blobnet\n",
         TOL_GEMM, 0, 0, 1, 0, 0, 0},
    };
    if (bn_device_count() == 0) BN_SKIP_TEST("no CUDA device");
    /* Each case with the normal choice, then with each kernel family forced. */
    static const int families[] = {BN_CONV_FAMILY_ANY, BN_CONV_FAMILY_DIRECT, BN_CONV_FAMILY_IGEMM,
                                   BN_CONV_FAMILY_ROWS, BN_CONV_FAMILY_TENSOR};
    int r = BN_PASS;
    for (size_t f = 0; f < sizeof families / sizeof families[0] && r == BN_PASS; f++) {
        forced_family = families[f];
        bn_conv2d_gpu_force_own(forced_family);
        for (size_t i = 0; i < sizeof cases / sizeof cases[0] && r == BN_PASS; i++) r = run_case(&cases[i]);
    }
    forced_family = BN_CONV_FAMILY_ANY;
    bn_conv2d_gpu_force_own(BN_CONV_FAMILY_ANY);
    return r;
}

BN_TEST(gpu_layer_maxpool_matches_cpu)
{
    /* 4x7x9 -> 4x4x5 (3, stride 2, pad 1) -> 4x2x2 (2: floor drops the odd column) */
    static const layer_case lc = {"maxpool 4x7x9 s3 st2 p1, s2",
                                  "[input]\nchannels=4\nheight=7\nwidth=9\n"
                                  "[maxpool]\nsize=3\nstride=2\npad=1\n[maxpool]\nsize=2\n",
                                  TOL_ELEMENTWISE, 0, 0, 0, 0, 0, 0};
    return run_case(&lc);
}

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
    int r = run_case(&batchnorm_case);
    if (r == BN_PASS) r = run_case(&batchnorm_packed_case);
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
        CHECK_OK(feed(cpu, gpu, &batchnorm_case, seed + (uint64_t)step, &start));
        CHECK_OK(bn_net_forward(cpu, 1));
        CHECK_OK(bn_net_forward(gpu, 1));
    }
    CHECK_OK(bn_net_forward(cpu, 0));
    CHECK_OK(bn_net_forward(gpu, 0));
    free(start);
    bn_blob *pairs[][2] = {{cpu->buffers, gpu->buffers}, {bn_net_output(cpu), bn_net_output(gpu)},
                           {cpu->layers[2]->out, gpu->layers[2]->out}};
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

BN_TEST(gpu_layer_global_avgpool_matches_cpu)
{
    static const layer_case lc = {"avgpool global 5x7x3", "[input]\nchannels=5\nheight=7\nwidth=3\n[avgpool]\nglobal=1\n",
                                  TOL_ELEMENTWISE, 0, 0, 0, 0, 0, 0};
    return run_case(&lc);
}

BN_TEST(gpu_layer_avgpool_matches_cpu)
{
    static const layer_case lc = {"avgpool 4x7x9 s3 st2 p1, s2 p1",
                                  "[input]\nchannels=4\nheight=7\nwidth=9\n"
                                  "[avgpool]\nsize=3\nstride=2\npad=1\n[avgpool]\nsize=2\npad=1\n",
                                  TOL_ELEMENTWISE, 0, 0, 0, 0, 0, 0};
    return run_case(&lc);
}

BN_TEST(gpu_layer_activations_match_cpu)
{
    static const layer_case cases[] = {
        {"relu", "[input]\nchannels=3\nheight=5\nwidth=7\n[relu]\n", TOL_ELEMENTWISE, 0, 1, 0, 0, 0, 0},
        {"sigmoid", "[input]\nchannels=3\nheight=5\nwidth=7\n[sigmoid]\n", TOL_ELEMENTWISE, 0, 1, 0, 0, 0, 0},
        {"tanh", "[input]\nchannels=3\nheight=5\nwidth=7\n[tanh]\n", TOL_ELEMENTWISE, 0, 1, 0, 0, 0, 0},
        {"leaky_relu", "[input]\nchannels=3\nheight=5\nwidth=7\n[leaky_relu]\nslope=0.1\n", TOL_ELEMENTWISE, 0, 1, 0, 0, 0,
         0},
        {"elu", "[input]\nchannels=3\nheight=5\nwidth=7\n[elu]\nalpha=0.7\n", TOL_ELEMENTWISE, 0, 1, 0, 0, 0, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int r = run_case(&cases[i]);
        if (r != BN_PASS) return r;
    }
    return BN_PASS;
}

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
    int r = run_case(&direct);
    if (r == BN_PASS) r = run_case(&smoothed);
    return r == BN_PASS ? run_case(&after_dense) : r;
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
        int r = run_case(&cases[i]);
        if (r != BN_PASS) return r;
    }
    return BN_PASS;
}

static const layer_case stack_case = {"conv+maxpool+relu+avgpool+dense+tanh+dense+softmax_ce",
                                      "[input]\nchannels=2\nheight=11\nwidth=9\n"
                                      "[conv2d]\nfilters=6\nsize=3\npad=1\n[maxpool]\nsize=2\n[relu]\n"
                                      "[avgpool]\nsize=3\nstride=1\npad=1\n[dense]\noutputs=20\n[tanh]\n"
                                      "[dense]\noutputs=5\n[softmax_ce]\n",
                                      TOL_GEMM, 5, 0, 0, 0, 0, 0};

BN_TEST(gpu_layer_stack_matches_cpu)
{
    return run_case(&stack_case);
}

/* A graph: c1's output has two readers (so its pooling is not fused), c1b's one (fused), a
 * residual sum with coefficients, a channel join with a pooled view of the data, which is read
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
    CHECK(bn_net_find_layer(net, "c1")->num_grad_parts == 1 && net->num_input_grad_parts == 0);
    bn_net_free(net);
    return run_case(&graph_case);
}

/* Fails unless the two blobs' current elements are bit for bit the same. */
static int same_bits(bn_blob *a, bn_blob *b, uint64_t seed)
{
    const float *x = bn_blob_host_rd(a), *y = bn_blob_host_rd(b);
    CHECK_MSG(x && y, "%s", bn_last_error());
    CHECK_MSG(memcmp(x, y, bn_blob_count(a) * sizeof *x) == 0, "%s differs between two identical passes (seed %llu)",
              a->name, (unsigned long long)seed);
    return BN_PASS;
}

/* The gpu_fused bits of the last layer of a model set up on the device. */
static int fused_bits(const char *text, bn_ctx *ctx)
{
    bn_net *net;
    if (bn_net_from_text(text, "fusion probe", &net) != BN_OK) return -1;
    int bits = bn_net_setup(net, 4, ctx, 0, 1) == BN_OK ? net->layers[net->num_layers - 1]->gpu_fused : -1;
    bn_net_free(net);
    return bits;
}

/* Undoes every convolution-pooling fusion of a net set up on the device: the pooling then runs
 * its own backward pass and the convolution reads the full-size gradient. */
static void unfuse_pools(bn_net *net)
{
    for (int i = 0; i + 1 < net->num_layers; i++) {
        if (!(net->layers[i + 1]->gpu_fused & BN_FUSED_NO_IN_GRAD)) continue;
        ((conv_priv *)net->layers[i]->priv)->pool_after = NULL;
        net->layers[i + 1]->gpu_fused = 0;
    }
}

/* Whether layer l (a conv2d) runs its filter pass for batch n by the argmax kernel. */
static int by_argmax(const bn_layer *l, int n)
{
#ifndef BN_WITH_CUDA
    (void)l, (void)n;
    return 0; /* no GPU plans */
#else
    char buf[1024], want[64];
    bn_conv2d_gpu_describe(l, buf, sizeof buf);
    snprintf(want, sizeof want, "n=%d: ", n);
    const char *plan = strstr(buf, want);
    if (!plan) return 0;
    const char *end = strchr(plan, ';'), *at = strstr(plan, "bwd_filter blobnet argmax");
    return at && (!end || at < end);
#endif
}

/* One fused and one unfused net on the same data: every parameter gradient, and every output
 * and output gradient outside the fused pairs, bit for bit the same. `out`, for every
 * convolution a pooling reads (1: its forward kernel wrote the pooled output, so its own output
 * stays the poison; 0: it wrote its output, the same as the unfused net's; -1: either), and
 * `through`, per such convolution (1: its kernels read the pooled gradient, so its own output
 * gradient stays the poison; 0: the pooling's backward pass wrote it, the same as the unfused
 * net's; -1: either). A convolution whose fused filter pass is the argmax kernel (which needs
 * the pooling, so the unfused net cannot run it) sums other products in another order: its
 * parameter gradients must agree within TOL_GEMM of their scale instead. */
static int fused_vs_unfused(const layer_case *lc, int capacity, int n, int out, const int *through, bn_ctx *ctx)
{
    uint64_t seed = lt_fresh_seed();
    bn_net *a, *b;
    float *start;
    CHECK_OK(bn_net_from_text(lc->text, lc->what, &a));
    CHECK_OK(bn_net_from_text(lc->text, lc->what, &b));
    CHECK_OK(bn_net_setup(a, capacity, ctx, 0, seed));
    CHECK_OK(bn_net_setup(b, capacity, ctx, 0, seed));
    unfuse_pools(b);
    CHECK_OK(bn_net_set_batch(a, n));
    CHECK_OK(bn_net_set_batch(b, n));
    CHECK_OK(poison_net(a, ctx));
    CHECK_OK(poison_net(b, ctx));
    CHECK_OK(feed(a, b, lc, seed, &start));
    for (int pass = 0; pass < 2; pass++) {
        bn_net *net = pass ? b : a;
        CHECK_OK(bn_net_forward(net, 1));
        CHECK_OK(bn_net_backward(net));
    }
    for (int i = 0, conv = 0; i < a->num_layers; i++) {
        bn_layer *la = a->layers[i], *lb = b->layers[i];
        if (!bn_net_blob_unwritten(a, i, 0)) {
            CHECK(same_bits(la->out, lb->out, seed) == BN_PASS);
        } else {
            const int unwritten = all_nan(la->out);
            CHECK_MSG(out < 0 || unwritten == out, "%s, batch %d, layer %s: the output was %s, expected %s", lc->what,
                      n, la->name, unwritten ? "never written" : "written",
                      out ? "the pooled one written instead" : "written");
            if (!unwritten) CHECK(same_bits(la->out, lb->out, seed) == BN_PASS);
        }
        const int argmax = strcmp(la->ops->type, "conv2d") == 0 && by_argmax(la, n);
        for (int k = 0; k < la->num_params; k++) {
            if (!argmax) {
                CHECK(same_bits(la->params[k].grad, lb->params[k].grad, seed) == BN_PASS);
                continue;
            }
            /* compare_blob's message calls its two sides "gpu" and "cpu": here the fused and the
             * unfused net. */
            char what[256];
            snprintf(what, sizeof what, "%s, fused (\"gpu\") vs unfused (\"cpu\")", lc->what);
            double worst = 0.0;
            CHECK(compare_blob(what, n, la->params[k].grad, lb->params[k].grad, start + lb->params[k].grad->offset,
                               TOL_GEMM, seed, &worst) == BN_PASS);
        }
        if (i + 1 == a->num_layers) continue;
        if (!bn_net_blob_unwritten(a, i, 1)) {
            CHECK(same_bits(la->out_grad, lb->out_grad, seed) == BN_PASS);
            continue;
        }
        const int want = through[conv++], nan = all_nan(la->out_grad);
        CHECK_MSG(want < 0 || nan == want, "%s, batch %d, layer %s: the output gradient was %s, expected %s", lc->what,
                  n, la->name, nan ? "never written" : "written", want ? "the pooled one read through" : "written");
        if (!nan) CHECK(same_bits(la->out_grad, lb->out_grad, seed) == BN_PASS);
    }
    /* The blobs no kernel wrote still hold the poison, and the NaN search passes them over. */
    char where[256];
    CHECK_MSG(!bn_numerics_locate(a, where, sizeof where), "%s, batch %d: the NaN search blamed %s", lc->what, n,
              where);
    free(start);
    bn_net_free(a);
    bn_net_free(b);
    return BN_PASS;
}

/* A conv2d layer followed by a 2x2 max pooling at stride 2 does the pooling's passes on the
 * device (bn_conv2d_fuse_next): its forward kernel writes the pooled output and argmax mask from
 * its epilogue, or the pooling's own forward pass runs after it when that kernel cannot; its
 * filter and data kernels read the pooled gradient through the mask, or the pooling's own
 * backward pass (from the mask) runs first when the kernels chosen cannot. Either way every
 * result is the unfused net's bit for bit (the same sums, the same tie rule, the same expanded
 * gradient), with each kernel family and batch size, odd output sizes (a last row and column
 * no window covers) included; only the argmax filter pass, which the unfused net cannot run,
 * gives the weight gradients within rounding. The comparison with the CPU is
 * gpu_layer_stack_matches_cpu's and gpu_layer_conv_argmax_filter_matches_cpu's. */
BN_TEST(gpu_layer_conv_maxpool_fused_matches_unfused_bitwise)
{
    if (bn_device_count() == 0) BN_SKIP_TEST("no CUDA device");
    bn_ctx *ctx;
    CHECK_OK(bn_ctx_open(0, &ctx));
    static const char *const probes[] = {
        "[input]\nchannels=2\nheight=8\nwidth=8\n[conv2d]\nfilters=3\nsize=3\n[maxpool]\nsize=2\n",
        "[input]\nchannels=2\nheight=8\nwidth=8\n[conv2d]\nfilters=3\nsize=3\n[maxpool]\nsize=3\nstride=2\n",
        "[input]\nchannels=2\nheight=8\nwidth=8\n[conv2d]\nfilters=3\nsize=3\n[maxpool]\nsize=2\nstride=1\n",
        "[input]\nchannels=2\nheight=8\nwidth=8\n[conv2d]\nfilters=3\nsize=3\n[avgpool]\nsize=2\n",
        "[input]\nchannels=2\nheight=8\nwidth=8\n[conv2d]\nfilters=3\nsize=3\n[relu]\n[maxpool]\nsize=2\n",
    };
    const int want_bits[] = {BN_FUSED_FORWARD | BN_FUSED_NO_IN | BN_FUSED_BACKWARD | BN_FUSED_NO_IN_GRAD, 0, 0, 0, 0};
    for (size_t i = 0; i < sizeof probes / sizeof probes[0]; i++) {
        const int bits = fused_bits(probes[i], ctx);
        CHECK_MSG(bits == want_bits[i], "probe %zu: the pooling has fused bits %d, want %d", i, bits, want_bits[i]);
    }
    /* 3x13x11 -> 8x13x11 (odd: the last row and column get no gradient) -> 8x6x5 -> 12x4x3 ->
     * 12x2x1 -> 7 classes; and LeNet's first layer. */
    static const layer_case cases[] = {
        {"conv k3p1 x8, maxpool 2, conv k3 x12, maxpool 2, dense 7",
         "[input]\nchannels=3\nheight=13\nwidth=11\n"
         "[conv2d]\nfilters=8\nsize=3\npad=1\n[maxpool]\nsize=2\n"
         "[conv2d]\nfilters=12\nsize=3\ninit=he\n[maxpool]\nsize=2\n"
         "[dense]\noutputs=7\n[softmax_ce]\n",
         0, 7, 0, 0, 0, 0, 0},
        {"conv 1x28x28 k5 x20, maxpool 2, dense 10 (LeNet's first layer)",
         "[input]\nchannels=1\nheight=28\nwidth=28\n"
         "[conv2d]\nfilters=20\nsize=5\n[maxpool]\nsize=2\n[dense]\noutputs=10\n[softmax_ce]\n",
         0, 10, 0, 0, 0, 0, 0},
    };
    /* Per case and family, whether each convolution reads the pooled gradient: a first layer
     * (no input gradient: the filter pass alone) with the row tiles, the tensor cores and the
     * argmax filter pass; a second one (filter and data passes) with the tensor cores (both
     * passes can), not the row tiles (their data pass cannot); neither with the direct or
     * implicit-GEMM kernels. With the argmax family forced, the data pass is the rule's. */
    static const int families[] = {BN_CONV_FAMILY_ANY,  BN_CONV_FAMILY_DIRECT, BN_CONV_FAMILY_IGEMM,
                                   BN_CONV_FAMILY_ROWS, BN_CONV_FAMILY_TENSOR, BN_CONV_FAMILY_ARGMAX};
    static const int through[2][6][2] = {{{-1, -1}, {0, 0}, {0, 0}, {1, 0}, {1, 1}, {1, -1}},
                                         {{-1, -1}, {0, -1}, {0, -1}, {1, -1}, {1, -1}, {1, -1}}};
    /* Per family, whether the forward kernel writes the pooled output: the row tiles always
     * (whole images per block), the direct and implicit-GEMM kernels never, the tensor cores
     * where an image's shares start on even rows (not at batch 1 and 3 for the 13x11 output). */
    static const int out[6] = {-1, 0, 0, 1, -1, -1};
    /* The rule chooses for both nets: a timed choice (by default, for shapes the rule was not
     * measured on) is made per shape, and the fused net's convolutions differ from the unfused
     * one's by the pooling, so the two could take different kernels and sum in other orders. */
    ctx->deterministic = 1;
    int r = BN_PASS;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0] && r == BN_PASS; i++)
        for (size_t f = 0; f < sizeof families / sizeof families[0] && r == BN_PASS; f++) {
            bn_conv2d_gpu_force_own(families[f]);
            for (int k = 0; k < NUM_SIZES && r == BN_PASS; k++) {
                r = fused_vs_unfused(&cases[i], capacities[k], batches[k], out[f], through[i][f], ctx);
                if (r != BN_PASS) printf("    %s: family %d, batch %d failed\n", cases[i].what, families[f], batches[k]);
            }
        }
    bn_conv2d_gpu_force_own(BN_CONV_FAMILY_ANY);
    ctx->deterministic = 0;
    if (r == BN_PASS)
        printf("    fused and unfused bit for bit (argmax filter passes within %g): 2 nets, 6 kernel families, batches 1, "
               "3, 64, 257, 37 of 64\n",
               TOL_GEMM);
    return r;
}

/* The argmax filter pass (the weight gradient from the pooled windows' maxima alone), forced on
 * every convolution that a 2x2 max pooling reads, against the CPU: windows of 1 to 7 with and
 * without padding, odd outputs (a last row and column no window covers), one to many input
 * channels, and enough of them that blocks split the filters; every conv2d plan must say that
 * the argmax kernel ran. The convolutions' inputs and parameters are on a coarse grid
 * (layer_case.exact_convs), so that the poolings route every gradient as the CPU's do; the
 * gradients themselves are FP32 sums of random values. */
BN_TEST(gpu_layer_conv_argmax_filter_matches_cpu)
{
    static const layer_case cases[] = {
        {"conv 1x28x28 k5 x20, maxpool 2, conv k5 x50, maxpool 2, dense 10 (LeNet)",
         "[input]\nchannels=1\nheight=28\nwidth=28\n[conv2d]\nfilters=20\nsize=5\n[maxpool]\nsize=2\n"
         "[conv2d]\nfilters=50\nsize=5\n[maxpool]\nsize=2\n[dense]\noutputs=10\n[softmax_ce]\n",
         TOL_GEMM, 10, 0, 0, 0, 0, 1},
        {"conv 3x13x11 k3p1 x8, maxpool 2, conv k7p3 x5, maxpool 2, conv k1 x70, maxpool 2, dense 4",
         "[input]\nchannels=3\nheight=13\nwidth=11\n[conv2d]\nfilters=8\nsize=3\npad=1\n[maxpool]\nsize=2\n"
         "[conv2d]\nfilters=5\nsize=7\npad=3\n[maxpool]\nsize=2\n[conv2d]\nfilters=70\nsize=1\n[maxpool]\nsize=2\n"
         "[dense]\noutputs=4\n[softmax_ce]\n",
         TOL_GEMM, 4, 0, 0, 0, 0, 1},
        {"conv 10x9x9 k5p2 x30, maxpool 2, conv k4p2 x30, maxpool 2, dense 5",
         "[input]\nchannels=10\nheight=9\nwidth=9\n[conv2d]\nfilters=30\nsize=5\npad=2\n[maxpool]\nsize=2\n"
         "[conv2d]\nfilters=30\nsize=4\npad=2\n[maxpool]\nsize=2\n[dense]\noutputs=5\n[softmax_ce]\n",
         TOL_GEMM, 5, 0, 0, 0, 0, 1},
        {"conv 32x8x8 k7p3 x40, maxpool 2, dense 3 (blocks along the filters)",
         "[input]\nchannels=32\nheight=8\nwidth=8\n[conv2d]\nfilters=40\nsize=7\npad=3\n[maxpool]\nsize=2\n"
         "[dense]\noutputs=3\n[softmax_ce]\n",
         TOL_GEMM, 3, 0, 0, 0, 0, 1},
    };
    if (bn_device_count() == 0) BN_SKIP_TEST("no CUDA device");
    bn_conv2d_gpu_force_own(BN_CONV_FAMILY_ARGMAX);
    int r = BN_PASS;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0] && r == BN_PASS; i++) r = run_case(&cases[i]);
    /* The plans of the cases' nets are gone; check fresh ones'. */
    bn_ctx *ctx = NULL;
    if (r == BN_PASS && bn_ctx_open(0, &ctx) != BN_OK) {
        printf("    %s\n", bn_last_error());
        r = BN_FAIL;
    }
    for (size_t i = 0; i < sizeof cases / sizeof cases[0] && r == BN_PASS; i++) {
        bn_net *net = NULL;
        if (bn_net_from_text(cases[i].text, "argmax probe", &net) != BN_OK || bn_net_setup(net, 8, ctx, 1, 1) != BN_OK ||
            bn_net_set_batch(net, 8) != BN_OK || bn_net_forward(net, 1) != BN_OK || bn_net_backward(net) != BN_OK) {
            printf("    %s: %s\n", cases[i].what, bn_last_error());
            r = BN_FAIL;
        }
        for (int k = 0; net && k < net->num_layers && r == BN_PASS; k++)
            if (strcmp(net->layers[k]->ops->type, "conv2d") == 0 && !by_argmax(net->layers[k], 8)) {
                printf("    %s: layer %s did not run the argmax filter pass\n", cases[i].what, net->layers[k]->name);
                r = BN_FAIL;
            }
        bn_net_free(net);
    }
    bn_conv2d_gpu_force_own(BN_CONV_FAMILY_ANY);
    return r;
}

/* The FP32-accurate kernels stay within about 1e-6 of scale; a worst difference of more than
 * this says the TF32 products ran. */
#define TF32_SEEN 2e-5

/* With the tf32 option, blobnet's tensor-core kernels (the conv2d family, forced here, and the
 * tensor-core GEMM the rule gives the 64-output dense layer) take one TF32 product per multiply
 * instead of three: every blob stays
 * within TF32's error of the CPU, and the worst difference is beyond what the FP32-accurate
 * products reach, so the option took effect. Average pooling and tanh: a max-pool window's
 * near-ties, or a ReLU's input near 0, may fall the other way under TF32 rounding and route a
 * gradient elsewhere, which is no error; no loss layer, whose summed metrics the comparison holds
 * to FP32's error. */
BN_TEST(gpu_layer_tensor_kernels_tf32_stay_near_cpu)
{
    static const layer_case lc = {"conv 3x12x10 k5p2 x12, avgpool 2, conv k3p1 x40, tanh, dense 64, tanh, dense 10 "
                                  "(tf32)",
                                  "[input]\nchannels=3\nheight=12\nwidth=10\n"
                                  "[conv2d]\nfilters=12\nsize=5\npad=2\n[avgpool]\nsize=2\n"
                                  "[conv2d]\nfilters=40\nsize=3\npad=1\n[tanh]\n"
                                  "[dense]\noutputs=64\n[tanh]\n[dense]\noutputs=10\n",
                                  TOL_TF32, 0, 0, 1, 0, 0, 0};
    if (bn_device_count() == 0) BN_SKIP_TEST("no CUDA device");
    bn_ctx *ctx;
    CHECK_OK(bn_ctx_open(0, &ctx));
    uint64_t seed = lt_fresh_seed();
    forced_family = BN_CONV_FAMILY_TENSOR;
    bn_conv2d_gpu_force_own(BN_CONV_FAMILY_TENSOR);
    ctx->tf32 = 1;
    double worst = 0.0;
    int r = BN_PASS;
    for (int k = 0; k < NUM_SIZES && r == BN_PASS; k++) {
        r = compare_once(&lc, capacities[k], batches[k], seed + (uint64_t)k, ctx, &worst);
        if (r != BN_PASS) printf("    batch %d: rerun with BLOBNET_TEST_SEED=%llu\n", batches[k], (unsigned long long)seed);
    }
    ctx->tf32 = 0;
    forced_family = BN_CONV_FAMILY_ANY;
    bn_conv2d_gpu_force_own(BN_CONV_FAMILY_ANY);
    if (r != BN_PASS) return r;
    printf("    tf32 vs cpu, batches 1, 3, 64, 257, 37 of 64: worst difference %.3g of scale (tolerance %g)\n", worst,
           TOL_TF32);
    CHECK_MSG(worst > TF32_SEEN, "tf32: worst difference %.3g of scale, no more than FP32-accurate products give (%g)",
              worst, TF32_SEEN);
    return BN_PASS;
}

/* Runs the same forward and backward on two fresh GPU networks and compares every output and
 * gradient bit for bit. */
static int repeat_bitwise(const layer_case *lc, int batch, bn_ctx *ctx)
{
    uint64_t seed = lt_fresh_seed();
    bn_net *a, *b;
    float *start;
    CHECK_OK(bn_net_from_text(lc->text, lc->what, &a));
    CHECK_OK(bn_net_from_text(lc->text, lc->what, &b));
    CHECK_OK(bn_net_setup(a, batch, ctx, 1, seed));
    CHECK_OK(bn_net_setup(b, batch, ctx, 1, seed));
    CHECK_OK(feed(a, b, lc, seed, &start));
    free(start);
    for (int pass = 0; pass < 2; pass++) {
        bn_net *net = pass ? b : a;
        CHECK_OK(bn_net_forward(net, 1));
        CHECK_OK(bn_net_backward(net));
    }
    for (int i = 0; i < a->num_layers; i++) {
        CHECK(same_bits(a->layers[i]->out, b->layers[i]->out, seed) == BN_PASS);
        for (int k = 0; k < a->layers[i]->num_params; k++)
            CHECK(same_bits(a->layers[i]->params[k].grad, b->layers[i]->params[k].grad, seed) == BN_PASS);
    }
    CHECK(same_bits(a->input_grad, b->input_grad, seed) == BN_PASS);
    bn_net_free(a);
    bn_net_free(b);
    return BN_PASS;
}

static int deterministic_checks(bn_ctx *ctx)
{
    static const layer_case lenet_like = {"LeNet-like, deterministic",
                                          "[input]\nchannels=1\nheight=28\nwidth=28\n"
                                          "[conv2d]\nfilters=20\nsize=5\n[maxpool]\nsize=2\n"
                                          "[conv2d]\nfilters=50\nsize=5\n[maxpool]\nsize=2\n"
                                          "[dense]\noutputs=100\n[relu]\n[dense]\noutputs=10\n[softmax_ce]\n",
                                          TOL_GEMM, 10, 0, 0, 0, 0, 0};
    /* Against the CPU the stack pools by averages: behind two convolutions, two inputs of a
     * max-pool window can lie within rounding of each other, and then the CPU and the GPU may
     * pick different winners and route the gradient differently, which is no error. Max-pool
     * itself is compared on exact inputs (gpu_layer_maxpool_matches_cpu); the bitwise repeat
     * below keeps it. */
    static const layer_case lenet_avg = {"LeNet-like with average pooling, deterministic",
                                         "[input]\nchannels=1\nheight=28\nwidth=28\n"
                                         "[conv2d]\nfilters=20\nsize=5\n[avgpool]\nsize=2\n"
                                         "[conv2d]\nfilters=50\nsize=5\n[avgpool]\nsize=2\n"
                                         "[dense]\noutputs=100\n[relu]\n[dense]\noutputs=10\n[softmax_ce]\n",
                                         TOL_LONG_SUMS, 10, 0, 0, 0, 0, 0};
    CHECK(run_case(&stack_case) == BN_PASS);
    CHECK(run_case(&lenet_avg) == BN_PASS);
    CHECK(repeat_bitwise(&lenet_like, 257, ctx) == BN_PASS);
    return BN_PASS;
}

/* In a deterministic context the convolutions take cuDNN's heuristic choice among the
 * deterministic algorithms (no atomics): the results still match the CPU, and two runs of the
 * same pass give bit-identical outputs and gradients. */
BN_TEST(gpu_layer_deterministic_context_repeats_bitwise)
{
    if (bn_device_count() == 0) BN_SKIP_TEST("no CUDA device");
    bn_ctx *ctx;
    CHECK_OK(bn_ctx_open(0, &ctx));
    ctx->deterministic = 1;
    int r = deterministic_checks(ctx);
    ctx->deterministic = 0;
    return r;
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
    BN_TRY(put(cpu->input, x));
    BN_TRY(put(gpu->input, x));
    BN_TRY(put(cpu->labels, labels));
    BN_TRY(put(gpu->labels, labels));
    BN_TRY(poison(gpu->metrics, ctx));
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
    CHECK_OK(put(cpu->params, pv));
    CHECK_OK(put(gpu->params, pv));
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

/* ---- dropout: the GPU draws other masks than the CPU, so its structure is checked instead ---- */

#define DROPOUT_TEXT "[input]\nchannels=16\nheight=5\nwidth=7\n[dropout]\nrate=0.3\n"
#define DROPOUT_RATE 0.3

/* A GPU dropout net of `capacity` at batch n, fed inputs away from zero (so a dropped element
 * is exactly the zeros of the output) and a random output gradient. */
static bn_status dropout_net(int capacity, int n, uint64_t seed, bn_ctx *ctx, bn_net **out)
{
    bn_net *net;
    BN_TRY(bn_net_from_text(DROPOUT_TEXT, "dropout", &net));
    *out = net;
    BN_TRY(bn_net_setup(net, capacity, ctx, 1, seed));
    BN_TRY(bn_net_set_batch(net, n));
    BN_TRY(lt_fill_normal(net, seed, 1.0, 0.1));
    bn_rng r;
    bn_rng_seed(&r, seed, 5);
    bn_blob *g = net->layers[0]->out_grad;
    float *dy = bn_blob_host_wr(g);
    if (!dy) return bn_last_status();
    for (size_t i = 0; i < g->capacity; i++) dy[i] = (float)bn_rng_normal(&r);
    return BN_OK;
}

static int check_dropout_pass(bn_net *net, bn_ctx *ctx, int train, uint64_t seed, double *kept_fraction)
{
    bn_layer *l = net->layers[0];
    CHECK_OK(poison(l->out, ctx));
    CHECK_OK(poison(net->input_grad, ctx));
    net->pass.step = 5;
    CHECK_OK(bn_net_forward(net, train));
    CHECK_OK(bn_net_backward(net));
    size_t count = bn_blob_count(l->in);
    const float *x = bn_blob_host_rd(net->input), *y = bn_blob_host_rd(l->out);
    const float *dy = bn_blob_host_rd(l->out_grad), *dx = bn_blob_host_rd(net->input_grad);
    CHECK(x && y && dy && dx);
    const float scale = 1.0f / (1.0f - (float)DROPOUT_RATE);
    size_t kept = 0;
    for (size_t i = 0; i < count; i++) {
        if (!train) {
            CHECK_MSG(y[i] == x[i] && dx[i] == dy[i], "eval element %zu: y %g for x %g, dx %g for dy %g", i, y[i],
                      x[i], dx[i], dy[i]);
            continue;
        }
        if (y[i] == 0.0f) {
            CHECK_MSG(dx[i] == 0.0f, "dropped element %zu has gradient %g (seed %llu)", i, dx[i],
                      (unsigned long long)seed);
            continue;
        }
        kept++;
        CHECK_MSG(y[i] == x[i] * scale, "kept element %zu: y %.9g, x / (1 - rate) %.9g (seed %llu)", i, y[i],
                  x[i] * scale, (unsigned long long)seed);
        CHECK_MSG(dx[i] == dy[i] * scale, "kept element %zu: dx %.9g, dy / (1 - rate) %.9g (seed %llu)", i, dx[i],
                  dy[i] * scale, (unsigned long long)seed);
    }
    *kept_fraction = (double)kept / (double)count;
    return BN_PASS;
}

BN_TEST(gpu_layer_dropout_keeps_rate_and_scales)
{
    if (bn_device_count() == 0) BN_SKIP_TEST("no CUDA device");
    bn_ctx *ctx;
    CHECK_OK(bn_ctx_open(0, &ctx));
    uint64_t seed = lt_fresh_seed();
    for (int k = 0; k < NUM_SIZES; k++) {
        bn_net *net;
        CHECK_OK(dropout_net(capacities[k], batches[k], seed + (uint64_t)k, ctx, &net));
        double kept, unused;
        CHECK(check_dropout_pass(net, ctx, 1, seed, &kept) == BN_PASS);
        /* Five standard deviations of a binomial fraction over this many elements. */
        double count = (double)bn_blob_count(net->input);
        double bound = 5.0 * sqrt(DROPOUT_RATE * (1.0 - DROPOUT_RATE) / count);
        CHECK_MSG(fabs(kept - (1.0 - DROPOUT_RATE)) <= bound, "batch %d: kept %.4f of %g elements, expected %.2f +- %.4f",
                  batches[k], kept, count, 1.0 - DROPOUT_RATE, bound);
        if (batches[k] == 257) printf("    gpu dropout rate 0.3, batch 257: kept fraction %.4f\n", kept);
        CHECK(check_dropout_pass(net, ctx, 0, seed, &unused) == BN_PASS);
        bn_net_free(net);
    }
    return BN_PASS;
}

/* The output of one training forward at `step` (count floats into y). */
static bn_status dropout_output(bn_net *net, unsigned long long step, float *y, size_t count)
{
    net->pass.step = step;
    BN_TRY(bn_net_forward(net, 1));
    return lt_read(net->layers[0]->out, y, count);
}

static size_t mask_differences(const float *a, const float *b, size_t count)
{
    size_t d = 0;
    for (size_t i = 0; i < count; i++) d += (a[i] == 0.0f) != (b[i] == 0.0f);
    return d;
}

/* The mask depends on (seed, layer, step) alone: a repeated step, and a fresh network replaying
 * it after other draws, drop the same elements; another step or seed drops others. */
BN_TEST(gpu_layer_dropout_mask_repeats_per_step)
{
    if (bn_device_count() == 0) BN_SKIP_TEST("no CUDA device");
    bn_ctx *ctx;
    CHECK_OK(bn_ctx_open(0, &ctx));
    uint64_t seed = lt_fresh_seed();
    bn_net *a, *b, *c;
    CHECK_OK(dropout_net(64, 64, seed, ctx, &a));
    size_t count = bn_blob_count(a->input);
    float *y1 = malloc(count * sizeof *y1), *y2 = malloc(count * sizeof *y2);
    CHECK(y1 && y2);
    CHECK_OK(dropout_output(a, 7, y1, count));
    CHECK_OK(dropout_output(a, 8, y2, count));
    size_t other_step = mask_differences(y1, y2, count);
    CHECK_OK(dropout_output(a, 7, y2, count));
    CHECK_MSG(memcmp(y1, y2, count * sizeof *y1) == 0, "step 7 repeated gives another output (seed %llu)",
              (unsigned long long)seed);
    CHECK_OK(dropout_net(64, 64, seed, ctx, &b));
    CHECK_OK(dropout_output(b, 7, y2, count));
    CHECK_MSG(memcmp(y1, y2, count * sizeof *y1) == 0, "a fresh network replaying step 7 differs (seed %llu)",
              (unsigned long long)seed);
    CHECK_OK(dropout_net(64, 64, seed + 1, ctx, &c));
    CHECK_OK(dropout_output(c, 7, y2, count));
    size_t other_seed = mask_differences(y1, y2, count);
    /* Independent masks disagree on 2 * 0.3 * 0.7 = 42% of the elements. */
    CHECK_MSG(other_step > count / 4 && other_seed > count / 4,
              "masks of other steps or seeds differ in only %zu and %zu of %zu elements", other_step, other_seed,
              count);
    free(y1);
    free(y2);
    bn_net_free(a);
    bn_net_free(b);
    bn_net_free(c);
    return BN_PASS;
}
