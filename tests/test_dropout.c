/* test_dropout.c - inverted dropout: scaling and keep rate in training, identity in
 * evaluation, a mask fixed by (seed, step), option errors and gradient checks; on the GPU the
 * same structure, the CPU's masks bit for bit (a share of a global batch too), and the step read
 * from device memory where the pass gives it. */
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

#define COUNT 10000

static bn_status load(const char *rate, bn_net **net)
{
    char text[128];
    snprintf(text, sizeof text, "[input]\nchannels=1\nheight=100\nwidth=100\n[dropout]\n%s", rate);
    BN_TRY(lt_net(text, 1, 1234, net));
    return lt_fill_normal(*net, 99, 1.0, 0.01); /* no zeros: a zero output means dropped */
}

/* Forward at the given step; y gets the output. */
static bn_status forward_at(bn_net *net, unsigned long long step, int train, float *y)
{
    net->pass.step = step;
    BN_TRY(bn_net_forward(net, train));
    return lt_read(bn_net_output(net), y, COUNT);
}

BN_TEST(dropout_eval_is_identity)
{
    bn_net *net;
    CHECK_OK(load("rate=0.5\n", &net));
    float *x = malloc(COUNT * sizeof *x), *y = malloc(COUNT * sizeof *y);
    CHECK(x && y);
    CHECK_OK(lt_read(net->input, x, COUNT));
    CHECK_OK(forward_at(net, 3, 0, y));
    CHECK(memcmp(x, y, COUNT * sizeof *x) == 0);
    CHECK_OK(lt_write(net->layers[0]->out_grad, x, COUNT));
    CHECK_OK(bn_net_backward(net));
    CHECK_OK(lt_read(net->input_grad, y, COUNT));
    CHECK(memcmp(x, y, COUNT * sizeof *x) == 0);
    free(x), free(y);
    bn_net_free(net);
    return BN_PASS;
}

/* rate 0.25: each output is 0 or x / 0.75; about 75% are kept (the binomial spread over
 * 10000 draws is 0.0043, so 0.025 is six deviations); the gradient uses the same mask. */
BN_TEST(dropout_train_scales_kept_and_masks_gradient)
{
    bn_net *net;
    CHECK_OK(load("rate=0.25\n", &net));
    float *x = malloc(COUNT * sizeof *x), *y = malloc(COUNT * sizeof *y), *dx = malloc(COUNT * sizeof *dx);
    CHECK(x && y && dx);
    CHECK_OK(lt_read(net->input, x, COUNT));
    CHECK_OK(forward_at(net, 7, 1, y));
    const float scale = 1.0f / 0.75f;
    int kept = 0;
    for (int i = 0; i < COUNT; i++) {
        CHECK_MSG(y[i] == 0.0f || y[i] == x[i] * scale, "y[%d] = %g for x = %g", i, y[i], x[i]);
        kept += y[i] != 0.0f;
    }
    CHECK_NEAR(kept / (double)COUNT, 0.75, 0.025);
    for (int i = 0; i < COUNT; i++) dx[i] = 2.0f;
    CHECK_OK(lt_write(net->layers[0]->out_grad, dx, COUNT));
    CHECK_OK(bn_net_backward(net));
    CHECK_OK(lt_read(net->input_grad, dx, COUNT));
    for (int i = 0; i < COUNT; i++)
        CHECK_MSG(dx[i] == (y[i] != 0.0f ? 2.0f * scale : 0.0f), "dx[%d] = %g", i, dx[i]);
    free(x), free(y), free(dx);
    bn_net_free(net);
    return BN_PASS;
}

static int count_differences(const float *a, const float *b)
{
    int d = 0;
    for (int i = 0; i < COUNT; i++) d += a[i] != b[i];
    return d;
}

/* The same (seed, step) draws the same mask; another step or seed draws another. */
BN_TEST(dropout_mask_follows_seed_and_step)
{
    bn_net *net;
    CHECK_OK(load("\n", &net));
    float *a = malloc(COUNT * sizeof *a), *b = malloc(COUNT * sizeof *b);
    CHECK(a && b);
    CHECK_OK(forward_at(net, 11, 1, a));
    CHECK_OK(forward_at(net, 12, 1, b));
    CHECK(count_differences(a, b) > COUNT / 4); /* half of the cells differ on average */
    CHECK_OK(forward_at(net, 11, 1, b));
    CHECK(count_differences(a, b) == 0);
    net->pass.seed++;
    CHECK_OK(forward_at(net, 11, 1, b));
    CHECK(count_differences(a, b) > COUNT / 4);
    free(a), free(b);
    bn_net_free(net);
    return BN_PASS;
}

BN_TEST(dropout_rate_zero_keeps_everything)
{
    bn_net *net;
    CHECK_OK(load("rate=0\n", &net));
    float *x = malloc(COUNT * sizeof *x), *y = malloc(COUNT * sizeof *y);
    CHECK(x && y);
    CHECK_OK(lt_read(net->input, x, COUNT));
    CHECK_OK(forward_at(net, 1, 1, y));
    CHECK(memcmp(x, y, COUNT * sizeof *x) == 0);
    free(x), free(y);
    bn_net_free(net);
    return BN_PASS;
}

BN_TEST(dropout_rejects_bad_options)
{
    const char *in = "[input]\nchannels=1\nheight=2\nwidth=2\n";
    char text[256];
    snprintf(text, sizeof text, "%s[dropout]\nrate=1\n", in);
    CHECK_ERR(lt_setup_status(text), BN_ERR_USAGE, "rate = 1 must be below 1");
    snprintf(text, sizeof text, "%s[dropout]\nrate=-0.1\n", in);
    CHECK_ERR(lt_setup_status(text), BN_ERR_USAGE, "out of range");
    snprintf(text, sizeof text, "%s[dropout]\nrate=half\n", in);
    CHECK_ERR(lt_setup_status(text), BN_ERR_USAGE, "not a finite number");
    bn_net *net;
    CHECK_OK(lt_net("[input]\nchannels=2\nheight=3\nwidth=3\n[dropout]\n", 1, 1, &net));
    bn_layer *l = net->layers[0];
    CHECK(l->out->c == 2 && l->out->h == 3 && l->out->w == 3 && l->num_params == 0);
    CHECK(strstr(l->ops->help, "rate") && l->ops->flops(l) == 18);
    bn_net_free(net);
    return BN_PASS;
}

/* The check's forward passes all run at one step, so they all see one mask. */
BN_TEST(dropout_gradcheck)
{
    static const lt_gradcheck_case cases[] = {
        {"[input]\nchannels=2\nheight=3\nwidth=5\n[dropout]\nrate=0.3\n", "dropout 2x3x5 rate 0.3 batch 3", 3, 0, 0, 0},
        {"[input]\nchannels=1\nheight=3\nwidth=3\n[dense]\noutputs=8\n[dropout]\n[dense]\noutputs=3\n[softmax_ce]\n",
         "dense-dropout-dense + softmax_ce batch 4", 4, 0, 0, 3},
    };
    return lt_gradcheck_cases(cases, sizeof cases / sizeof cases[0], GRAD_TOL);
}

/* ---- on the GPU ---- */

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
    CHECK_OK(gt_poison(l->out, ctx));
    CHECK_OK(gt_poison(net->input_grad, ctx));
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
    for (int k = 0; k < GT_NUM_SIZES; k++) {
        bn_net *net;
        CHECK_OK(dropout_net(gt_capacities[k], gt_batches[k], seed + (uint64_t)k, ctx, &net));
        double kept, unused;
        CHECK(check_dropout_pass(net, ctx, 1, seed, &kept) == BN_PASS);
        /* Five standard deviations of a binomial fraction over this many elements. */
        double count = (double)bn_blob_count(net->input);
        double bound = 5.0 * sqrt(DROPOUT_RATE * (1.0 - DROPOUT_RATE) / count);
        CHECK_MSG(fabs(kept - (1.0 - DROPOUT_RATE)) <= bound, "batch %d: kept %.4f of %g elements, expected %.2f +- %.4f",
                  gt_batches[k], kept, count, 1.0 - DROPOUT_RATE, bound);
        if (gt_batches[k] == 257) printf("    gpu dropout rate 0.3, batch 257: kept fraction %.4f\n", kept);
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

/* One training forward and backward of net at `step`, offset `offset`: its output and input
 * gradient into y and dx (count floats each). */
static bn_status pass_at(bn_net *net, unsigned long long step, int offset, float *y, float *dx, size_t count)
{
    net->pass.step = step;
    net->pass.offset = offset;
    BN_TRY(bn_net_forward(net, 1));
    BN_TRY(bn_net_backward(net));
    BN_TRY(lt_read(net->layers[0]->out, y, count));
    return lt_read(net->input_grad, dx, count);
}

/* The GPU drops the elements the CPU drops, bit for bit, at every batch size and for a share of a
 * global batch; with pass.dev_step set it takes the step from there, not from pass.step. */
BN_TEST(gpu_layer_dropout_matches_cpu_bitwise)
{
    if (bn_device_count() == 0) BN_SKIP_TEST("no CUDA device");
    bn_ctx *ctx;
    CHECK_OK(bn_ctx_open(0, &ctx));
    uint64_t seed = lt_fresh_seed();
    unsigned long long *dev_step = NULL;
    CHECK_OK(bn_device_alloc((void **)&dev_step, sizeof *dev_step));
    for (int k = 0; k < GT_NUM_SIZES; k++) {
        bn_net *gpu, *cpu;
        CHECK_OK(dropout_net(gt_capacities[k], gt_batches[k], seed + (uint64_t)k, ctx, &gpu));
        CHECK_OK(dropout_net(gt_capacities[k], gt_batches[k], seed + (uint64_t)k, NULL, &cpu));
        size_t count = bn_blob_count(gpu->input);
        float *y[2], *dx[2];
        for (int d = 0; d < 2; d++) {
            y[d] = malloc(count * sizeof(float));
            dx[d] = malloc(count * sizeof(float));
            CHECK(y[d] && dx[d]);
        }
        static const int offsets[] = {0, 3};
        for (int o = 0; o < 2; o++) {
            CHECK_OK(pass_at(cpu, 11, offsets[o], y[0], dx[0], count));
            CHECK_OK(pass_at(gpu, 11, offsets[o], y[1], dx[1], count));
            const size_t bytes = count * sizeof(float);
            CHECK_MSG(memcmp(y[0], y[1], bytes) == 0 && memcmp(dx[0], dx[1], bytes) == 0, "batch %d, offset %d: the GPU's dropout differs from the CPU's (seed %llu)",
                      gt_batches[k], offsets[o], (unsigned long long)seed);
        }
        /* Step 11 on the device, another on the host: the device's wins. */
        const unsigned long long eleven = 11;
        CHECK_OK(bn_device_h2d(dev_step, &eleven, sizeof eleven));
        gpu->pass.dev_step = dev_step;
        CHECK_OK(pass_at(gpu, 2, 0, y[1], dx[1], count));
        CHECK_OK(pass_at(cpu, 11, 0, y[0], dx[0], count));
        CHECK_MSG(memcmp(y[0], y[1], count * sizeof(float)) == 0, "batch %d: the pass did not take the device's step",
                  gt_batches[k]);
        for (int d = 0; d < 2; d++) free(y[d]), free(dx[d]);
        bn_net_free(gpu);
        bn_net_free(cpu);
    }
    bn_device_free(dev_step);
    return BN_PASS;
}
