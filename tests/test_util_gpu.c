/* test_util_gpu.c - a model's GPU pass against its CPU pass, for the GPU cases of the layer
 * tests (gpu_testing.h). */
#include "gpu_testing.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "batchnorm.h"
#include "conv2d/conv2d.h"
#ifdef BN_WITH_CUDA
#include "conv2d/conv_rows.h"
#include "conv2d/conv_tensor.h"
#endif
#include "core/rng.h"
#include "layer_testing.h"
#include "testing.h"

const int gt_capacities[GT_NUM_SIZES] = {1, 3, 64, 257, 64};
const int gt_batches[GT_NUM_SIZES] = {1, 3, 64, 257, 37};

/* Writes the whole capacity of b's host copy (rows past the current batch included). */
bn_status gt_put(bn_blob *b, const float *v)
{
    float *h = bn_blob_host_wr(b);
    if (!h) return bn_last_status();
    memcpy(h, v, b->capacity * sizeof *h);
    return BN_OK;
}

bn_status gt_put_both(bn_blob *cpu, bn_blob *gpu, float *v, float **kept)
{
    if (!v) return bn_error(BN_ERR_NOMEM, "test: out of host memory");
    bn_status s = gt_put(cpu, v);
    if (s == BN_OK) s = gt_put(gpu, v);
    if (kept && s == BN_OK) *kept = v;
    else free(v);
    return s;
}

/* Fills b's device copy with NaN (the whole capacity). */
bn_status gt_poison(bn_blob *b, bn_ctx *ctx)
{
    if (!b || bn_blob_is_slice(b)) return BN_OK; /* a slice's root (a join's output) is poisoned whole */
    float *d = bn_blob_dev_wr(b);
    if (!d) return bn_last_status();
    return bn_gpu_fill(d, NAN, b->capacity, ctx);
}

bn_status gt_poison_net(bn_net *net, bn_ctx *ctx)
{
    BN_TRY(gt_poison(net->input_grad, ctx));
    BN_TRY(gt_poison(net->metrics, ctx));
    for (int i = 0; i < net->num_layers; i++) {
        BN_TRY(gt_poison(net->layers[i]->out, ctx));
        BN_TRY(gt_poison(net->layers[i]->out_grad, ctx));
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
    return gt_put_both(cpu, gpu, random_rows(cpu, bn_blob_count(cpu), r, scale, zeros), kept);
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
        s = gt_put(cpu->input, x);
    }
    if (s == BN_OK) s = gt_put(gpu->input, x);
    if (s == BN_OK) s = gt_put(cpu->params, p);
    if (s == BN_OK) s = gt_put(gpu->params, p);
    free(x);
    free(p);
    return s;
}

/* Same inputs, labels, last output gradient and starting parameter gradients on both nets;
 * *start receives the latter (NULL without parameters), freed by the caller. */
bn_status gt_feed(bn_net *cpu, bn_net *gpu, const layer_case *lc, uint64_t seed, float **start)
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
        bn_status s = gt_put(cpu->labels, y);
        if (s == BN_OK) s = gt_put(gpu->labels, y);
        free(y);
        BN_TRY(s);
    } else {
        BN_TRY(feed_blob(cpu->layers[cpu->num_layers - 1]->out_grad, gpu->layers[gpu->num_layers - 1]->out_grad, &r,
                         1.0, 0, NULL));
    }
    if (cpu->grads) BN_TRY(feed_blob(cpu->grads, gpu->grads, &r, 0.1, 0, start));
    return BN_OK;
}

bn_status gt_step_alike(bn_net *a, bn_net *b, const layer_case *lc, uint64_t seed)
{
    float *start = NULL;
    BN_TRY(gt_feed(a, b, lc, seed, &start));
    free(start);
    for (int pass = 0; pass < 2; pass++) {
        bn_net *net = pass ? b : a;
        BN_TRY(bn_net_forward(net, 1));
        BN_TRY(bn_net_backward(net));
    }
    return BN_OK;
}

/* The bias of l with one value per output channel, or NULL. */
static bn_param *channel_bias(bn_layer *l)
{
    for (int k = 0; k < l->num_params; k++)
        if (l->params[k].is_bias && (int)bn_blob_count(l->params[k].value) == l->out->c) return &l->params[k];
    return NULL;
}

/* Tries on a shift of a channel's bias: 0, +2, -2, +4, -4, ... margins. */
#define KINK_SHIFTS 64

/* The first of the KINK_SHIFTS shifts that leaves every value of a channel (`planes` runs of `run`
 * values, `stride` apart) at least m from zero; 0 when none does. */
static double clear_shift(const float *v, int planes, size_t stride, size_t run, double m)
{
    for (int t = 0; t < KINK_SHIFTS; t++) {
        const double s = (t % 2 ? 1 : -1) * ((t + 1) / 2) * 2.0 * m;
        int clear = 1;
        for (int p = 0; p < planes && clear; p++)
            for (size_t i = 0; i < run && clear; i++) clear = fabs(v[p * stride + i] + s) >= m;
        if (clear) return s;
    }
    return 0.0;
}

bn_status gt_keep_off_kinks(bn_net *cpu, bn_net *gpu, double margin)
{
    for (int i = 0; i < cpu->num_layers; i++) {
        bn_layer *relu = cpu->layers[i];
        if (!(relu->ops->absorbable_as & BN_ABSORB_RELU) || relu->num_inputs != 1 || relu->sources[0] < 0) continue;
        bn_layer *producer = cpu->layers[relu->sources[0]];
        bn_param *bias = channel_bias(producer);
        if (!bias) continue;
        /* The shifts of the ReLUs above this one have moved what it reads. */
        BN_TRY(bn_net_forward(cpu, 1));
        const bn_blob *in = relu->in;
        const float *x = bn_blob_host_rd(relu->in);
        if (!x) return bn_last_status();
        const size_t count = bn_blob_count(in), hw = (size_t)in->h * in->w;
        double scale = 0.0;
        for (size_t e = 0; e < count; e++) scale = fmax(scale, fabs(x[e]));
        double *shift = malloc((size_t)in->c * sizeof *shift);
        if (!shift) return bn_error(BN_ERR_NOMEM, "test: out of host memory");
        for (int c = 0; c < in->c; c++)
            shift[c] = clear_shift(x + c * hw, in->n, (size_t)in->c * hw, hw, margin * scale);
        float *p = bn_blob_host_wr(cpu->params);
        if (p)
            for (int c = 0; c < in->c; c++) p[bias->value->offset + c] += (float)shift[c];
        free(shift);
        if (!p) return bn_last_status();
        BN_TRY(gt_put(gpu->params, p));
    }
    return BN_OK;
}

/* 1 when every current element of b is NaN (the poison: nothing wrote it), else 0. */
int gt_all_nan(bn_blob *b)
{
    const float *v = bn_blob_host_rd(b);
    if (!v) return 0;
    for (size_t i = 0; i < bn_blob_count(b); i++)
        if (!isnan(v[i])) return 0;
    return 1;
}

int gt_compare_blob(const char *what, int n, bn_blob *gpu, bn_blob *cpu, const float *base, double tol,
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

/* Layer i's output gradient where a ReLU reads its output: compared except at the elements whose
 * ReLU the two devices decided differently (an input within rounding of 0, positive on one and
 * not on the other: the gradient passes there on one device only, a difference of the kink, not
 * of either pass). */
static int compare_grad_off_kinks(const layer_case *lc, bn_net *gpu, bn_net *cpu, int i, uint64_t seed,
                                  double *worst)
{
    bn_layer *lg = gpu->layers[i], *lcpu = cpu->layers[i];
    const bn_layer *relu = bn_net_sole_consumer(cpu, lcpu);
    if (!relu || !(relu->ops->absorbable_as & BN_ABSORB_RELU) || relu->num_inputs != 1)
        return gt_compare_blob(lc->what, cpu->batch, lg->out_grad, lcpu->out_grad, NULL, lc->tol, seed, worst);
    int at = lcpu->reader; /* the ReLU's index: the output's one reader */
    const float *yg = bn_blob_host_rd(gpu->layers[at]->out), *yc = bn_blob_host_rd(cpu->layers[at]->out);
    const float *g = bn_blob_host_rd(lg->out_grad), *c = bn_blob_host_rd(lcpu->out_grad);
    CHECK_MSG(yg && yc && g && c, "%s", bn_last_error());
    size_t count = bn_blob_count(lcpu->out_grad);
    float *kept = malloc(count * sizeof *kept);
    CHECK_MSG(kept != NULL, "out of host memory");
    for (size_t e = 0; e < count; e++) {
        int flipped = (yg[e] > 0.0f) != (yc[e] > 0.0f);
        kept[e] = flipped ? c[e] : g[e];
    }
    size_t where;
    double d = lt_rel_diff(kept, c, NULL, count, &where);
    free(kept);
    if (d > *worst) *worst = d;
    CHECK_MSG(d <= lc->tol,
              "%s, batch %d: %s differs by %.3g of its scale (tolerance %g) off the ReLU's kinks; element %zu: "
              "gpu %.9g, cpu %.9g; data seed %llu",
              lc->what, cpu->batch, lcpu->out_grad->name, d, lc->tol, where, g[where], c[where],
              (unsigned long long)seed);
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
        if (!bn_net_blob_unwritten(gpu, i, 0) || !gt_all_nan(lg->out))
            CHECK(gt_compare_blob(lc->what, n, lg->out, lcpu->out, NULL, lc->tol, seed, worst) == BN_PASS);
        /* Not where the next layer's backward pass is another's that reads past it (the same
         * pooling): nothing writes it on the device. */
        if (i + 1 < cpu->num_layers && !bn_net_blob_unwritten(gpu, i, 1))
            CHECK(compare_grad_off_kinks(lc, gpu, cpu, i, seed, worst) == BN_PASS);
        for (int k = 0; k < lcpu->num_params; k++) {
            bn_blob *grad = lcpu->params[k].grad;
            CHECK(gt_compare_blob(lc->what, n, lg->params[k].grad, grad, start + grad->offset, lc->tol, seed, worst) ==
                  BN_PASS);
        }
    }
    CHECK(gt_compare_blob(lc->what, n, gpu->input_grad, cpu->input_grad, NULL, lc->tol, seed, worst) == BN_PASS);
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
int gt_forced_family = BN_CONV_FAMILY_ANY;

#ifdef BN_WITH_CUDA
/* The name a plan's description gives blobnet's kernels of family f (0: any of them). */
static void own_runner_name(int f, char *buf, size_t cap)
{
    if (f > 0) snprintf(buf, cap, "blobnet %s", bn_conv_families[f - 1]->name);
    else snprintf(buf, cap, "blobnet");
}
#endif

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
        int can[3] = {1, 1, 1};
        if (gt_forced_family == BN_CONV_FAMILY_ROWS) {
            bn_rows_plan rp;
            bn_rows_plan_make(&rp, &c->g, c->filters, n, 1);
            can[0] = rp.fwd_ok, can[1] = rp.data_ok, can[2] = rp.filter_ok;
        } else if (gt_forced_family == BN_CONV_FAMILY_TENSOR) {
            bn_tensor_plan tp;
            bn_tensor_plan_make(&tp, &c->g, c->filters, n, 1, 0);
            can[0] = tp.fwd_ok, can[1] = tp.data_ok, can[2] = tp.filter_ok;
        } else if (gt_forced_family == BN_CONV_FAMILY_HALO) {
            bn_halo_plan hp;
            bn_halo_plan_make(&hp, &c->g, c->filters, n, 1, 0);
            can[0] = hp.pass[0].ok, can[1] = hp.pass[1].ok, can[2] = hp.pass[2].ok;
        } else if (gt_forced_family == BN_CONV_FAMILY_WINO) {
            bn_wino_plan wp;
            bn_wino_plan_make(&wp, &c->g, c->filters, n, 1, 0);
            can[0] = wp.pass[0].ok, can[1] = wp.pass[1].ok, can[2] = wp.pass[2].ok;
        } else if (gt_forced_family == BN_CONV_FAMILY_FMA) {
            bn_fma_plan fp;
            bn_fma_plan_make(&fp, &c->g, c->filters, n, 1);
            can[0] = 0, can[1] = fp.data_ok, can[2] = 0;
        }
        /* Runner names as bn_conv2d_gpu_describe writes them: "blobnet", or "blobnet <family>". */
        char pass_family[3][48], family[48];
        for (int k = 0; k < 3; k++)
            own_runner_name(can[k] ? gt_forced_family : 0, pass_family[k], sizeof pass_family[k]);
        own_runner_name(gt_forced_family, family, sizeof family);
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

int gt_compare_batches(const layer_case *lc, int capacity, const int *ns, int count, uint64_t seed, bn_ctx *ctx,
                       double *worst)
{
    bn_net *cpu, *gpu;
    CHECK_OK(bn_net_from_text(lc->text, lc->what, &cpu));
    CHECK_OK(bn_net_from_text(lc->text, lc->what, &gpu));
    CHECK_OK(bn_net_setup(cpu, capacity, NULL, 1, seed));
    CHECK_OK(bn_net_setup(gpu, capacity, ctx, 1, seed));
    int r = BN_PASS;
    for (int j = 0; j < count && r == BN_PASS; j++) {
        const int n = ns[j];
        const uint64_t s = seed + (uint64_t)j;
        CHECK_OK(bn_net_set_batch(cpu, n));
        CHECK_OK(bn_net_set_batch(gpu, n));
        float *start;
        CHECK_OK(gt_poison_net(gpu, ctx));
        CHECK_OK(gt_feed(cpu, gpu, lc, s, &start)); /* after the poison: it sets the last output gradient */
        /* The forward outputs may differ by the tolerance: a ReLU input nearer zero than that may
         * lie on either side of it on the GPU. The grid's sums are exact on both sides. */
        if (!lc->exact_convs) CHECK_OK(gt_keep_off_kinks(cpu, gpu, lc->tol));
        if (lc->grad_in_forward)
            CHECK_MSG(bn_net_fuse_loss(gpu, NULL, 1), "%s: no softmax_ce to fuse", lc->what);
        /* The grid's sums are exact only through direct sums: the CPU's Winograd transforms would
         * round them (and a ReLU input the grid makes exactly 0 would come out a rounding away). */
        bn_conv2d_cpu_exact(lc->exact_convs);
        bn_status cpu_fwd = bn_net_forward(cpu, 1);
        CHECK_OK(bn_net_forward(gpu, 1));
        bn_status cpu_bwd = cpu_fwd == BN_OK ? bn_net_backward(cpu) : cpu_fwd;
        bn_conv2d_cpu_exact(0);
        CHECK_OK(cpu_fwd);
        CHECK_OK(cpu_bwd);
        CHECK_OK(bn_net_backward(gpu));
        if (lc->grad_in_forward) bn_net_unfuse_loss(gpu);
        r = compare_nets(lc, gpu, cpu, start, s, worst);
        if (r == BN_PASS && lc->own_convs) r = check_own_convs(lc, gpu, n);
        free(start);
    }
    bn_net_free(cpu);
    bn_net_free(gpu);
    return r;
}

int gt_compare_once(const layer_case *lc, int capacity, int n, uint64_t seed, bn_ctx *ctx, double *worst)
{
    return gt_compare_batches(lc, capacity, &n, 1, seed, ctx, worst);
}

/* gt_compare_once at every size of gt_capacities and gt_batches in ctx as it is, the worst difference
 * printed, or how to rerun a failure. */
int gt_compare_sizes(const layer_case *lc, bn_ctx *ctx, uint64_t seed)
{
    double worst = 0.0;
    int r = BN_PASS;
    for (int k = 0; k < GT_NUM_SIZES && r == BN_PASS; k++)
        r = gt_compare_once(lc, gt_capacities[k], gt_batches[k], seed + (uint64_t)k, ctx, &worst);
    if (r != BN_PASS) printf("    %s (seed %llu): rerun: %s\n", lc->what, (unsigned long long)seed, lt_replay());
    else printf("    %s vs cpu: worst difference %.3g of scale (tolerance %g)\n", lc->what, worst, lc->tol);
    return r;
}

int gt_run_case(const layer_case *lc)
{
    if (bn_device_count() == 0) BN_SKIP_TEST("no CUDA device");
    bn_ctx *ctx;
    CHECK_OK(bn_ctx_open(0, &ctx));
    /* Batch size k draws its data from seed + k (lt_fresh_seed: from the run's seed). */
    uint64_t seed = lt_fresh_seed();
    for (int tune = 0; tune <= (lc->autotuned_too ? 1 : 0); tune++) {
        double worst = 0.0;
        ctx->autotune = tune;
        int r = BN_PASS;
        for (int k = 0; k < GT_NUM_SIZES && r == BN_PASS; k++) {
            r = gt_compare_once(lc, gt_capacities[k], gt_batches[k], seed + (uint64_t)k, ctx, &worst);
            if (r != BN_PASS)
                printf("    %s%s, batch %d (seed %llu): rerun: %s\n", lc->what,
                       tune ? " (autotuned)" : "", gt_batches[k], (unsigned long long)seed, lt_replay());
        }
        ctx->autotune = 0;
        if (r != BN_PASS) return r;
        printf("    gpu vs cpu %s%s, batches 1, 3, 64, 257, 37 of 64: worst difference %.3g of scale (tolerance %g)\n",
               lc->what, tune ? " (autotuned)" : "", worst, lc->tol);
    }
    return BN_PASS;
}

int gt_same_bits_cases(gt_same_bits_case same_bits, int paths)
{
    bn_ctx *ctx;
    CHECK_OK(bn_ctx_open(0, &ctx));
    const int was_deterministic = ctx->deterministic, sizes[] = {8, 3};
    ctx->deterministic = 1;
    int r = BN_PASS;
    for (int bf16 = 0; bf16 <= 1 && r == BN_PASS; bf16++)
        for (int split = 0; split < paths && r == BN_PASS; split++)
            for (size_t k = 0; k < sizeof sizes / sizeof sizes[0] && r == BN_PASS; k++)
                if ((r = same_bits(ctx, bf16, sizes[k], split)) != BN_PASS)
                    printf("    %s%s at batch %d\n", bf16 ? "bf16" : "fp32",
                           paths == 1 ? "" : split ? ", two-kernel path," : ", one-kernel path,", sizes[k]);
    ctx->deterministic = was_deterministic;
    return r;
}

/* Fails unless the two blobs' current elements are bit for bit the same. */
int gt_same_bits(bn_blob *a, bn_blob *b, uint64_t seed)
{
    const float *x = bn_blob_host_rd(a), *y = bn_blob_host_rd(b);
    CHECK_MSG(x && y, "%s", bn_last_error());
    CHECK_MSG(memcmp(x, y, bn_blob_count(a) * sizeof *x) == 0, "%s differs between two identical passes (seed %llu)",
              a->name, (unsigned long long)seed);
    return BN_PASS;
}

bn_status gt_twin_nets(bn_ctx *ctx, const char *text, const char *name, int bf16, uint64_t seed, const char *b_switch,
                       bn_net **a, bn_net **b)
{
    BN_TRY(bn_net_from_text(text, name, a));
    BN_TRY(bn_net_from_text(text, name, b));
    const int was = ctx->bf16;
    ctx->bf16 = bf16;
    bn_status s = bn_net_setup(*a, 8, ctx, 0, seed);
    if (b_switch) setenv(b_switch, "1", 1);
    if (s == BN_OK) s = bn_net_setup(*b, 8, ctx, 0, seed);
    if (b_switch) unsetenv(b_switch);
    ctx->bf16 = was;
    return s;
}

int gt_nets_same_bits(bn_net *a, bn_net *b, uint64_t seed, int which)
{
    for (int i = 0; i < a->num_layers; i++) {
        bn_layer *la = a->layers[i], *lb = b->layers[i];
        for (int k = 0; k < la->num_params; k++)
            CHECK(gt_same_bits(la->params[k].grad, lb->params[k].grad, seed) == BN_PASS);
        if ((which & GT_BITS_OUTPUTS) && !bn_net_blob_unwritten(a, i, 0) && !bn_net_blob_unwritten(b, i, 0))
            CHECK(gt_same_bits(la->out, lb->out, seed) == BN_PASS);
        const int src = la->sources[0];
        if ((which & GT_BITS_IN_GRADS) && la->in_grad && !bn_net_blob_unwritten(a, src, 1) &&
            !bn_net_blob_unwritten(b, src, 1))
            CHECK(gt_same_bits(la->in_grad, lb->in_grad, seed) == BN_PASS);
        if ((which & GT_BITS_OUT_GRADS) && la->out_grad && !bn_net_blob_unwritten(a, i, 1) &&
            !bn_net_blob_unwritten(b, i, 1))
            CHECK(gt_same_bits(la->out_grad, lb->out_grad, seed) == BN_PASS);
    }
    return BN_PASS;
}

int gt_conv_runs(const bn_layer *l, int n, const char *pass, const char *runner)
{
#ifndef BN_WITH_CUDA
    (void)l, (void)n, (void)pass, (void)runner;
    return 0; /* no GPU plans */
#else
    char buf[1024], head[32], want[96];
    bn_conv2d_gpu_describe(l, buf, sizeof buf);
    snprintf(head, sizeof head, "n=%d: ", n);
    char *plan = strstr(buf, head);
    if (!plan) return 0;
    char *end = strchr(plan, ';');
    if (end) *end = '\0';
    snprintf(want, sizeof want, "%s %s", pass, runner);
    return strstr(plan, want) != NULL;
#endif
}

int gt_bn_relus_apart(bn_net *net)
{
    int n = 0;
    for (int i = 0; i < net->num_layers; i++) {
        bn_layer *l = net->layers[i];
        batchnorm_priv *b = strcmp(l->ops->type, "batchnorm") == 0 ? (batchnorm_priv *)l->priv : NULL;
        if (!b || !b->relu_back) continue;
        b->relu_back = 0;
        b->relu_after->gpu_fused &= ~(unsigned)(BN_FUSED_BACKWARD | BN_FUSED_NO_IN | BN_FUSED_NO_IN_GRAD);
        n++;
    }
    return n;
}
