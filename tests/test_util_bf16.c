/* test_util_bf16.c - a model's BF16 GPU pass against its FP32 CPU pass, for the BF16 cases of the
 * layer tests (bf16_testing.h). */
#include "bf16_testing.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "gpu_testing.h"
#include "layer_testing.h"
#include "testing.h"

/* (capacity, batch) pairs: small, a full batch, and a last batch smaller than the blobs. */
static const int capacities[] = {3, 64, 64};

static const int batches[] = {3, 64, 37};
#define NUM_SIZES (int)(sizeof batches / sizeof batches[0])

/* Fills b's device copy with NaN through its host copy (a BF16 blob converts on the way). */
bn_status gt_bf16_poison(bn_blob *b)
{
    if (!b || bn_blob_is_slice(b)) return BN_OK; /* a slice's root (a join's output) is poisoned whole */
    float *h = bn_blob_host_wr(b);
    if (!h) return bn_last_status();
    for (size_t i = 0; i < b->capacity; i++) h[i] = NAN;
    const void *d = bn_blob_is_bf16(b) ? bn_blob_dev16_rd(b) : (const void *)bn_blob_dev_rd(b);
    return d ? BN_OK : bn_last_status();
}

/* A buffer of b's capacity: the current batch normal (times scale), or with `exact` multiples of
 * 1/16 in [-4, 4), which BF16 holds exactly; NaN past the batch. Freed by the caller. */
static float *rows(const bn_blob *b, bn_rng *r, double scale, int exact)
{
    float *v = malloc(b->capacity * sizeof *v);
    if (!v) return NULL;
    const size_t count = bn_blob_count(b);
    for (size_t i = 0; i < b->capacity; i++) {
        if (i >= count) v[i] = NAN;
        else if (exact) v[i] = (float)((int)bn_rng_below(r, 128) - 64) / 16.0f;
        else v[i] = (float)(scale * bn_rng_normal(r));
    }
    return v;
}

/* The same rows into both blobs; with kept, the caller gets them (and frees them). */
static bn_status feed_both(bn_blob *cpu, bn_blob *gpu, bn_rng *r, double scale, int exact, float **kept)
{
    return gt_put_both(cpu, gpu, rows(cpu, r, scale, exact), kept);
}

static int compare(const bf16_case *bc, const char *pass, int n, bn_blob *gpu, bn_blob *cpu, const float *base,
                   uint64_t seed, double *worst)
{
    const float *g = bn_blob_host_rd(gpu);
    const float *c = bn_blob_host_rd(cpu);
    CHECK_MSG(g && c, "%s", bn_last_error());
    size_t at = 0;
    double d = lt_rel_diff(g, c, base, bn_blob_count(cpu), &at);
    if (d > *worst) *worst = d;
    CHECK_MSG(d <= bc->tol,
              "%s (%s), batch %d: %s differs by %.3g of its scale (tolerance %g); element %zu: gpu bf16 %.9g, "
              "cpu fp32 %.9g; data seed %llu",
              bc->what, pass, n, cpu->name, d, bc->tol, at, g[at], c[at], (unsigned long long)seed);
    return BN_PASS;
}

/* Every output (and after backward every gradient and buffer) of the two nets. */
static int compare_nets(const bf16_case *bc, const char *pass, bn_net *gpu, bn_net *cpu, const float *grads0,
                        const float *bufs0, int backward, uint64_t seed, double *worst)
{
    const int n = cpu->batch;
    for (int i = 0; i < cpu->num_layers; i++) {
        bn_layer *lg = gpu->layers[i], *lc = cpu->layers[i];
        /* An output or gradient a fused neighbour leaves unwritten on the device (an add's sum
         * under the ReLU it runs) is not compared; as in test_util_gpu.c, one written anyway is. */
        if (!bn_net_blob_unwritten(gpu, i, 0) || !gt_all_nan(lg->out))
            CHECK(compare(bc, pass, n, lg->out, lc->out, NULL, seed, worst) == BN_PASS);
        if (!backward) continue;
        if (i + 1 < cpu->num_layers && !bn_net_blob_unwritten(gpu, i, 1))
            CHECK(compare(bc, pass, n, lg->out_grad, lc->out_grad, NULL, seed, worst) == BN_PASS);
        for (int k = 0; k < lc->num_params; k++) {
            bn_blob *grad = lc->params[k].grad;
            CHECK(compare(bc, pass, n, lg->params[k].grad, grad, grads0 + grad->offset, seed, worst) == BN_PASS);
        }
        for (int k = 0; k < lc->num_buffers; k++) {
            bn_blob *buf = lc->buffers[k].value;
            CHECK(compare(bc, pass, n, lg->buffers[k].value, buf, bufs0 + buf->offset, seed, worst) == BN_PASS);
        }
    }
    if (backward) CHECK(compare(bc, pass, n, gpu->input_grad, cpu->input_grad, NULL, seed, worst) == BN_PASS);
    return BN_PASS;
}

/* A copy of blob's host data (the whole capacity), or NULL for a NULL blob; freed by the caller. */
float *gt_snapshot(bn_blob *b)
{
    if (!b) return NULL;
    const float *h = bn_blob_host_rd(b);
    float *v = h ? malloc(b->capacity * sizeof *v) : NULL;
    if (v) memcpy(v, h, b->capacity * sizeof *v);
    return v;
}

static int compare_once(const bf16_case *bc, int capacity, int n, uint64_t seed, bn_ctx *ctx, double *worst)
{
    bn_net *cpu = NULL, *gpu = NULL;
    CHECK_OK(bn_net_from_text(bc->text, bc->what, &cpu));
    CHECK_OK(bn_net_from_text(bc->text, bc->what, &gpu));
    CHECK_OK(bn_net_setup(cpu, capacity, NULL, 1, seed));
    CHECK_OK(bn_net_setup(gpu, capacity, ctx, 1, seed));
    CHECK_MSG(bn_blob_is_bf16(gpu->input) && bn_blob_is_bf16(gpu->layers[0]->out),
              "%s: the net set up under bf16 does not hold its activations in BF16", bc->what);
    CHECK_OK(bn_net_set_batch(cpu, n));
    CHECK_OK(bn_net_set_batch(gpu, n));
    for (int i = 0; i < gpu->num_layers; i++) {
        CHECK_OK(gt_bf16_poison(gpu->layers[i]->out));
        CHECK_OK(gt_bf16_poison(gpu->layers[i]->out_grad));
    }
    CHECK_OK(gt_bf16_poison(gpu->input_grad));
    bn_rng r;
    bn_rng_seed(&r, seed, 11);
    float *grads0 = NULL;
    CHECK_MSG(cpu->layers[cpu->num_layers - 1]->out_grad,
              "%s: a bf16 case ends without a loss layer (the test sets the last output gradient)", bc->what);
    CHECK_OK(feed_both(cpu->input, gpu->input, &r, 1.0, bc->exact_input, NULL));
    CHECK_OK(feed_both(cpu->layers[cpu->num_layers - 1]->out_grad, gpu->layers[gpu->num_layers - 1]->out_grad, &r,
                       1.0, 0, NULL));
    if (cpu->grads) CHECK_OK(feed_both(cpu->grads, gpu->grads, &r, 0.1, 0, &grads0));
    float *bufs0 = gt_snapshot(cpu->buffers);
    CHECK_OK(bn_net_forward(cpu, 1));
    CHECK_OK(bn_net_forward(gpu, 1));
    CHECK_OK(bn_net_backward(cpu));
    CHECK_OK(bn_net_backward(gpu));
    int res = compare_nets(bc, "training", gpu, cpu, grads0, bufs0, 1, seed, worst);
    if (res == BN_PASS && bc->evaluate_too) {
        bn_status s = bn_net_forward(cpu, 0);
        if (s == BN_OK) s = bn_net_forward(gpu, 0);
        res = s == BN_OK ? compare_nets(bc, "evaluation", gpu, cpu, NULL, NULL, 0, seed, worst) : BN_FAIL;
        if (s != BN_OK) printf("    %s: %s\n", bc->what, bn_last_error());
    }
    free(grads0);
    free(bufs0);
    bn_net_free(cpu);
    bn_net_free(gpu);
    return res;
}

int gt_bf16_run_case_also_at(const bf16_case *bc, int large)
{
    if (bn_device_count() == 0) BN_SKIP_TEST("no CUDA device");
    bn_ctx *ctx;
    CHECK_OK(bn_ctx_open(0, &ctx));
    const uint64_t seed = lt_fresh_seed();
    const int was_deterministic = ctx->deterministic;
    int r = BN_PASS;
    for (int det = 0; det <= (bc->deterministic_too ? 1 : 0) && r == BN_PASS; det++) {
        double worst = 0.0;
        ctx->bf16 = 1;
        ctx->deterministic = det;
        for (int k = 0; k < NUM_SIZES + (large > 0) && r == BN_PASS; k++) {
            const int n = k < NUM_SIZES ? batches[k] : large;
            r = compare_once(bc, k < NUM_SIZES ? capacities[k] : n, n, seed + (uint64_t)k, ctx, &worst);
            if (r != BN_PASS)
                printf("    %s%s, batch %d (seed %llu): rerun: %s\n", bc->what, det ? " (deterministic)" : "", n,
                       (unsigned long long)seed, lt_replay());
        }
        ctx->bf16 = 0;
        ctx->deterministic = was_deterministic;
        if (r == BN_PASS)
            printf("    gpu bf16 vs cpu fp32 %s%s, batches 3, 64, 37 of 64%s: worst difference %.3g of scale "
                   "(tolerance %g)\n",
                   bc->what, det ? " (deterministic)" : "", large ? " and a larger one" : "", worst,
                   bc->tol);
    }
    return r;
}

int gt_bf16_run_case(const bf16_case *bc)
{
    return gt_bf16_run_case_also_at(bc, 0);
}

/* Each case in turn, stopping at the first that does not pass. */
int gt_bf16_run_cases(const bf16_case *cases, size_t count)
{
    int r = BN_PASS;
    for (size_t i = 0; i < count && r == BN_PASS; i++) r = gt_bf16_run_case(&cases[i]);
    return r;
}
