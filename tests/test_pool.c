/* test_pool.c - maxpool and avgpool: hand-computed cases with padding (padding never wins a
 * max, nor counts in a mean), ties, shape inference and its errors, and gradient checks; on the
 * GPU against the CPU, bit for bit over many geometries, the hand-computed cases again, and
 * BF16 against FP32. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bf16_testing.h"
#include "core/net.h"
#include "core/rng.h"
#include "gpu_testing.h"
#include "layer_testing.h"
#include "layers.h"
#include "testing.h"

/* Central differences through a float32 forward agree to a few 1e-3 at worst (gradcheck.h
 * explains the choice of eps); a wrong gradient is off by far more. */
#define GRAD_TOL 1e-2

/* Input spacing for maxpool checks: four times eps, so no perturbation changes a winner. */
#define MAX_SPACING 0.04

BN_TEST(pool_output_shapes)
{
    int c, h, w;
    CHECK_OK(lt_out_shape("[input]\nchannels=3\nheight=5\nwidth=5\n[maxpool]\nsize=2\nstride=2\n", &c, &h, &w));
    CHECK(c == 3 && h == 2 && w == 2); /* floor: the last row and column are dropped */
    CHECK_OK(lt_out_shape("[input]\nchannels=1\nheight=6\nwidth=9\n[avgpool]\nsize=3\n", &c, &h, &w));
    CHECK(c == 1 && h == 2 && w == 3); /* stride defaults to size */
    CHECK_OK(lt_out_shape("[input]\nchannels=2\nheight=5\nwidth=5\n[maxpool]\nsize=3\nstride=2\npad=1\n", &c, &h, &w));
    CHECK(c == 2 && h == 3 && w == 3);
    CHECK_OK(lt_out_shape("[input]\nchannels=1\nheight=4\nwidth=7\n[avgpool]\nsize=2\nstride=1\n", &c, &h, &w));
    CHECK(c == 1 && h == 3 && w == 6);
    return BN_PASS;
}

BN_TEST(pool_rejects_bad_shapes_and_options)
{
    const char *in3 = "[input]\nchannels=1\nheight=3\nwidth=3\n";
    char text[256];
    snprintf(text, sizeof text, "%s[maxpool]\nsize=2\npad=2\n", in3);
    CHECK_ERR(lt_setup_status(text), BN_ERR_USAGE, "pad = 2 must be smaller than size = 2");
    snprintf(text, sizeof text, "%s[avgpool]\nsize=3\npad=4\n", in3);
    CHECK_ERR(lt_setup_status(text), BN_ERR_USAGE, "must be smaller than size");
    snprintf(text, sizeof text, "%s[maxpool]\nsize=4\n", in3);
    CHECK_ERR(lt_setup_status(text), BN_ERR_USAGE, "window 4x4 is larger than the padded input 3x3");
    snprintf(text, sizeof text, "%s[avgpool]\nstride=2\n", in3);
    CHECK_ERR(lt_setup_status(text), BN_ERR_USAGE, "missing required key 'size'");
    snprintf(text, sizeof text, "%s[maxpool]\nsize=2\nstride=-1\n", in3);
    CHECK_ERR(lt_setup_status(text), BN_ERR_USAGE, "out of range");
    snprintf(text, sizeof text, "%s[avgpool]\nsize=2\nfilters=2\n", in3);
    CHECK_ERR(lt_setup_status(text), BN_ERR_USAGE, "unknown key 'filters'");
    return BN_PASS;
}

/* 3x3 input, all negative, size 2 stride 2 pad 1 gives four windows: {X00}, {X01, X02},
 * {X10, X20} and the lower-right 2x2. A padding zero would beat every max and drag every
 * mean towards zero. */
static const float neg3x3[] = {-5, -2, -3, -4, -1, -6, -7, -8, -9};
static const char *const pool3x3 = "[input]\nchannels=1\nheight=3\nwidth=3\n[%s]\nsize=2\nstride=2\npad=1\n";

static bn_status load_neg3x3(const char *type, bn_net **net)
{
    char text[256];
    snprintf(text, sizeof text, pool3x3, type);
    BN_TRY(lt_net(text, 1, 1, net));
    return lt_write((*net)->input, neg3x3, 9);
}

BN_TEST(maxpool_padding_never_wins_and_routes_gradient)
{
    bn_net *net;
    CHECK_OK(load_neg3x3("maxpool", &net));
    CHECK_OK(bn_net_forward(net, 1));
    float y[4], dx[9];
    CHECK_OK(lt_read(bn_net_output(net), y, 4));
    static const float expect[] = {-5, -2, -4, -1};
    for (int i = 0; i < 4; i++) CHECK_MSG(y[i] == expect[i], "y[%d] = %g, expected %g", i, y[i], expect[i]);
    static const float dy[] = {1, 2, 3, 4};
    CHECK_OK(lt_write(net->layers[0]->out_grad, dy, 4));
    CHECK_OK(bn_net_backward(net));
    CHECK_OK(lt_read(net->input_grad, dx, 9));
    static const float expect_dx[] = {1, 2, 0, 3, 4, 0, 0, 0, 0};
    for (int i = 0; i < 9; i++) CHECK_MSG(dx[i] == expect_dx[i], "dx[%d] = %g", i, dx[i]);
    bn_net_free(net);
    return BN_PASS;
}

BN_TEST(maxpool_ties_go_to_the_first_cell)
{
    bn_net *net;
    CHECK_OK(lt_net("[input]\nchannels=1\nheight=2\nwidth=3\n[maxpool]\nsize=2\nstride=1\n", 1, 1, &net));
    static const float x[] = {1, 3, 3, 3, 3, 0}, dy[] = {1, 10};
    CHECK_OK(lt_write(net->input, x, 6));
    CHECK_OK(bn_net_forward(net, 1));
    CHECK_OK(lt_write(net->layers[0]->out_grad, dy, 2));
    CHECK_OK(bn_net_backward(net));
    float dx[6];
    CHECK_OK(lt_read(net->input_grad, dx, 6));
    /* window 0 holds 3s at cells 1, 3, 4 -> cell 1; window 1 at cells 1, 2, 4 -> cell 1 */
    static const float expect_dx[] = {0, 11, 0, 0, 0, 0};
    for (int i = 0; i < 6; i++) CHECK_MSG(dx[i] == expect_dx[i], "dx[%d] = %g", i, dx[i]);
    bn_net_free(net);
    return BN_PASS;
}

/* Max pooling against the definition (the window clipped to the plane, padding never winning, ties
 * to the first cell in row-major order), on planes of odd height and width and values from four
 * levels, so that windows hold ties: 2x2 windows at stride 2 (a path of their own, with a last row
 * and column no window covers, whose gradient must be 0), and windows that overlap, with and
 * without padding, and on a plane smaller than a window. The input gradient starts as NaN so a
 * cell left unwritten shows. */
BN_TEST(maxpool_matches_the_definition_on_odd_planes_with_ties)
{
    static const struct { int size, stride, pad, h, w; } cases[] = {
        {2, 2, 0, 5, 7}, {3, 2, 0, 13, 11}, {3, 2, 1, 9, 14}, {3, 1, 1, 7, 9}, {5, 3, 2, 11, 10}, {3, 2, 1, 2, 2},
    };
    enum { N = 3, C = 2, MAXC = 14 * 14 };
    for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++) {
        const int k = cases[t].size, st = cases[t].stride, pd = cases[t].pad, H = cases[t].h, W = cases[t].w;
        const int OH = (H + 2 * pd - k) / st + 1, OW = (W + 2 * pd - k) / st + 1;
        char text[160];
        snprintf(text, sizeof text,
                 "[input]\nchannels=%d\nheight=%d\nwidth=%d\n[maxpool]\nsize=%d\nstride=%d\npad=%d\n", C, H, W, k,
                 st, pd);
        bn_net *net;
        CHECK_OK(lt_net(text, N, 1, &net));
        float x[N * C * MAXC], y[N * C * MAXC], dy[N * C * MAXC], dx[N * C * MAXC], want_dx[N * C * MAXC];
        bn_rng r;
        bn_rng_seed(&r, bn_test_seed(), 7 + t);
        for (int i = 0; i < N * C * H * W; i++) x[i] = (float)(int)(4.0 * bn_rng_uniform(&r)) - 1.5f;
        for (int i = 0; i < N * C * OH * OW; i++) dy[i] = (float)(i + 1);
        CHECK_OK(lt_write(net->input, x, N * C * H * W));
        CHECK_OK(bn_net_forward(net, 1));
        CHECK_OK(lt_read(bn_net_output(net), y, N * C * OH * OW));
        for (int i = 0; i < N * C * H * W; i++) dx[i] = NAN, want_dx[i] = 0.0f;
        CHECK_OK(lt_write(net->input_grad, dx, N * C * H * W));
        CHECK_OK(lt_write(net->layers[0]->out_grad, dy, N * C * OH * OW));
        CHECK_OK(bn_net_backward(net));
        CHECK_OK(lt_read(net->input_grad, dx, N * C * H * W));
        bn_net_free(net);
        for (int pl = 0; pl < N * C; pl++)
            for (int oy = 0; oy < OH; oy++)
                for (int ox = 0; ox < OW; ox++) {
                    int best = -1;
                    for (int ky = 0; ky < k; ky++)
                        for (int kx = 0; kx < k; kx++) {
                            const int iy = oy * st - pd + ky, ix = ox * st - pd + kx, at = iy * W + ix;
                            if (iy < 0 || iy >= H || ix < 0 || ix >= W) continue;
                            if (best < 0 || x[pl * H * W + at] > x[pl * H * W + best]) best = at;
                        }
                    const int q = (pl * OH + oy) * OW + ox;
                    CHECK_MSG(y[q] == x[pl * H * W + best], "%dx%d stride %d pad %d on %dx%d: y[%d] = %g, expected %g",
                              k, k, st, pd, H, W, q, y[q], x[pl * H * W + best]);
                    want_dx[pl * H * W + best] += dy[q];
                }
        for (int i = 0; i < N * C * H * W; i++)
            CHECK_MSG(dx[i] == want_dx[i], "%dx%d stride %d pad %d on %dx%d: dx[%d] = %g, expected %g", k, k, st, pd, H,
                      W, i, dx[i], want_dx[i]);
    }
    return BN_PASS;
}

/* Means over the cells inside the input only: -5, (-2 - 3) / 2, (-4 - 7) / 2 and
 * (-1 - 6 - 8 - 9) / 4; backward shares each gradient among those same cells. */
BN_TEST(avgpool_excludes_padding_from_the_count)
{
    bn_net *net;
    CHECK_OK(load_neg3x3("avgpool", &net));
    CHECK_OK(bn_net_forward(net, 1));
    float y[4], dx[9];
    CHECK_OK(lt_read(bn_net_output(net), y, 4));
    static const float expect[] = {-5, -2.5f, -5.5f, -6};
    for (int i = 0; i < 4; i++) CHECK_MSG(y[i] == expect[i], "y[%d] = %g, expected %g", i, y[i], expect[i]);
    static const float dy[] = {1, 2, 3, 4};
    CHECK_OK(lt_write(net->layers[0]->out_grad, dy, 4));
    CHECK_OK(bn_net_backward(net));
    CHECK_OK(lt_read(net->input_grad, dx, 9));
    static const float expect_dx[] = {1, 1, 1, 1.5f, 1, 1, 1.5f, 1, 1};
    for (int i = 0; i < 9; i++) CHECK_MSG(dx[i] == expect_dx[i], "dx[%d] = %g", i, dx[i]);
    bn_net_free(net);
    return BN_PASS;
}

BN_TEST(pool_help_kind_and_flops)
{
    bn_net *net;
    CHECK_OK(lt_net("[input]\nchannels=2\nheight=5\nwidth=5\n[maxpool]\nsize=3\nstride=2\npad=1\n[avgpool]\nsize=3\n",
                    1, 1, &net));
    for (int i = 0; i < 2; i++) {
        bn_layer *l = net->layers[i];
        CHECK(l->ops->kind == BN_NVTX_LAYER_POOL && strstr(l->ops->help, "stride"));
    }
    CHECK_NEAR(net->layers[0]->ops->flops(net->layers[0]), 2.0 * 3 * 3 * 9, 0);
    CHECK_NEAR(net->layers[1]->ops->flops(net->layers[1]), 2.0 * 1 * 1 * 9, 0);
    bn_net_free(net);
    return BN_PASS;
}

/* Max pooling on inputs MAX_SPACING apart, so that no perturbation changes a window's winner. */
BN_TEST(pool_gradcheck)
{
    static const lt_gradcheck_case cases[] = {
        {"[input]\nchannels=2\nheight=7\nwidth=7\n[maxpool]\nsize=3\nstride=2\npad=1\n",
         "maxpool 2x7x7 k3 s2 p1 batch 3", 3, 0, MAX_SPACING, 0},
        {"[input]\nchannels=3\nheight=5\nwidth=5\n[maxpool]\nsize=2\n", "maxpool 3x5x5 k2 s2 batch 2", 2, 0,
         MAX_SPACING, 0},
        {"[input]\nchannels=1\nheight=6\nwidth=5\n[maxpool]\nsize=2\nstride=1\n[softmax_ce]\n",
         "maxpool 1x6x5 k2 s1 + softmax_ce batch 4", 4, 0, MAX_SPACING, 20},
        {"[input]\nchannels=2\nheight=7\nwidth=7\n[avgpool]\nsize=3\nstride=2\npad=1\n",
         "avgpool 2x7x7 k3 s2 p1 batch 3", 3, 0, 0, 0},
        {"[input]\nchannels=1\nheight=5\nwidth=6\n[avgpool]\nsize=2\nstride=1\npad=1\n[softmax_ce]\n",
         "avgpool 1x5x6 k2 s1 p1 + softmax_ce batch 2", 2, 0, 0, 42},
    };
    return lt_gradcheck_cases(cases, sizeof cases / sizeof cases[0], GRAD_TOL);
}

BN_TEST(pool_global_average_is_the_mean_of_each_plane)
{
    bn_net *net;
    CHECK_OK(lt_net("[input]\nchannels=2\nheight=2\nwidth=3\n[avgpool]\nglobal=1\n", 1, 1, &net));
    CHECK(net->layers[0]->out->c == 2 && net->layers[0]->out->h == 1 && net->layers[0]->out->w == 1);
    const float x[12] = {1, 2, 3, 4, 5, 6, -1, -1, -1, -1, -1, 5}, dy[2] = {6, 12};
    float y[2], dx[12];
    CHECK_OK(lt_write(net->input, x, 12));
    CHECK_OK(bn_net_forward(net, 1));
    CHECK_OK(lt_read(net->layers[0]->out, y, 2));
    CHECK(y[0] == 3.5f && y[1] == 0.0f);
    CHECK_OK(lt_write(net->layers[0]->out_grad, dy, 2));
    CHECK_OK(bn_net_backward(net));
    CHECK_OK(lt_read(net->input_grad, dx, 12));
    for (int i = 0; i < 12; i++) CHECK(dx[i] == (i < 6 ? 1.0f : 2.0f));
    bn_net_free(net);
    CHECK(lt_gradcheck_text("[input]\nchannels=3\nheight=4\nwidth=5\n[avgpool]\nglobal=1\n", "avgpool global 3x4x5", 2,
                            0.0, 0.0, 0, GRAD_TOL) == BN_PASS);
    CHECK_ERR(lt_setup_status("[input]\nchannels=1\nheight=4\nwidth=4\n[avgpool]\nglobal=1\nsize=2\n"), BN_ERR_USAGE,
              "size does not go with global = 1");
    CHECK_ERR(lt_setup_status("[input]\nchannels=1\nheight=4\nwidth=4\n[maxpool]\nglobal=1\nsize=2\n"), BN_ERR_USAGE,
              "global");
    return BN_PASS;
}

/* ---- the GPU against the CPU ---- */

/* 4x7x9 -> 4x4x5 (3, stride 2, pad 1) -> 4x2x2 (2: floor drops the odd column) by maxima, and
 * by means, global and windowed. */
BN_TEST(gpu_layer_pools_match_cpu)
{
    static const layer_case cases[] = {
        {"maxpool 4x7x9 s3 st2 p1, s2",
         "[input]\nchannels=4\nheight=7\nwidth=9\n[maxpool]\nsize=3\nstride=2\npad=1\n[maxpool]\nsize=2\n",
         TOL_ELEMENTWISE, 0, 0, 0, 0, 0, 0},
        {"avgpool global 5x7x3", "[input]\nchannels=5\nheight=7\nwidth=3\n[avgpool]\nglobal=1\n", TOL_ELEMENTWISE, 0, 0,
         0, 0, 0, 0},
        {"avgpool 4x7x9 s3 st2 p1, s2 p1",
         "[input]\nchannels=4\nheight=7\nwidth=9\n[avgpool]\nsize=3\nstride=2\npad=1\n[avgpool]\nsize=2\npad=1\n",
         TOL_ELEMENTWISE, 0, 0, 0, 0, 0, 0},
    };
    int r = BN_PASS;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0] && r == BN_PASS; i++) r = gt_run_case(&cases[i]);
    return r;
}

/* ---- the GPU bit for bit ----
 * The GPU kernels follow the CPU reference exactly: the same window clipping, the first of
 * equal maxima, the same mean divisor and arithmetic, and each input gradient summed in the
 * CPU's order. So these cases compare with memcmp, not a tolerance, over geometries the cases
 * above do not reach: overlapping windows, stride larger than size, pads up
 * to size - 1, floor mode dropping cells, one-row inputs, and inputs of a few small integers so
 * that most windows hold equal maxima. Geometries with stride == size and pad 0 take the
 * kernels' non-overlapping path (size 2 with float2 rows when the width is even), with and
 * without rows and columns that floor mode leaves uncovered (their gradient must still be
 * written, as 0); the others take the general kernels. Before each pass the device output and
 * input gradient are poisoned with NaN (a cell left unwritten, or a gradient added to instead of
 * overwritten, fails) and rows past the current batch hold NaN on both sides (a read past the
 * batch fails). A failure prints the seed and the command that replays it. */

typedef struct geometry {
    int c, h, w;
    int size, stride, pad;
} geometry;

static const geometry geometries[] = {
    {20, 24, 24, 2, 2, 0}, /* LeNet's first pool */
    {50, 8, 8, 2, 2, 0},   /* and its second */
    {3, 7, 9, 3, 1, 1},    /* overlapping: every cell in up to nine windows */
    {2, 7, 9, 3, 2, 1},
    {2, 10, 11, 2, 3, 0},  /* stride > size: cells in the gaps get no gradient */
    {2, 10, 11, 2, 3, 1},
    {2, 8, 10, 3, 2, 0},   /* floor mode drops the last row */
    {1, 5, 6, 4, 1, 3},    /* pad = size - 1: corner windows hold one input cell */
    {3, 11, 13, 5, 2, 2},
    {2, 5, 5, 1, 2, 0},    /* size 1: a strided subsample */
    {3, 1, 9, 2, 1, 1},    /* one row, padded above and below */
    {2, 3, 4, 3, 3, 2},    /* windows mostly padding */
    /* Non-overlapping windows (stride == size, pad 0): the tiled path. */
    {3, 9, 11, 2, 2, 0},   /* a row and a column left uncovered, odd width: scalar rows */
    {2, 7, 10, 2, 2, 0},   /* a row left uncovered, even width: float2 rows */
    {2, 10, 7, 2, 2, 0},   /* a column left uncovered */
    {2, 2, 9, 2, 2, 0},    /* one row of windows */
    {2, 3, 8, 2, 2, 0},    /* one row of windows and one row uncovered */
    {3, 12, 12, 3, 3, 0},  /* size 3, exact tiling */
    {2, 11, 14, 3, 3, 0},  /* size 3, two rows and two columns uncovered */
    {2, 9, 9, 4, 4, 0},    /* size 4, one row and one column uncovered */
    {2, 5, 7, 5, 5, 0},    /* a single window per plane, two columns uncovered */
    {4, 6, 5, 1, 1, 0},    /* size 1: every cell its own window */
};

/* (capacity, batch): one example, a last batch smaller than the blobs, and an odd large one. */
#define NUM_GEOMETRIES (int)(sizeof geometries / sizeof geometries[0])

/* (capacity, batch): one example, a last batch smaller than the blobs, and an odd large one. */
static const int capacities[] = {1, 64, 257};

static const int batches[] = {1, 37, 257};
#define NUM_SIZES (int)(sizeof batches / sizeof batches[0])

static void model_text(char *text, size_t cap, const char *type, const geometry *g)
{
    snprintf(text, cap, "[input]\nchannels=%d\nheight=%d\nwidth=%d\n[%s]\nsize=%d\nstride=%d\npad=%d\n", g->c, g->h,
             g->w, type, g->size, g->stride, g->pad);
}

/* Fills b's device copy with NaN (the whole capacity). */
static bn_status poison(bn_blob *b, bn_ctx *ctx)
{
    float *d = bn_blob_dev_wr(b);
    if (!d) return bn_last_status();
    return bn_gpu_fill(d, NAN, b->capacity, ctx);
}

/* The same values into both blobs' host copies: the first bn_blob_count elements random
 * (small integers in [-2, 2] when ties, else normal), NaN past them. */
static bn_status feed(bn_blob *cpu, bn_blob *gpu, bn_rng *r, int ties)
{
    size_t count = bn_blob_count(cpu);
    float *a = bn_blob_host_wr(cpu), *b = bn_blob_host_wr(gpu);
    if (!a || !b) return bn_last_status();
    for (size_t i = 0; i < cpu->capacity; i++) {
        float v = NAN;
        if (i < count) v = ties ? (float)bn_rng_below(r, 5) - 2.0f : (float)bn_rng_normal(r);
        a[i] = b[i] = v;
    }
    return BN_OK;
}

/* Fails unless the current elements of the two blobs are the same bits. */
static int same_bits(const char *what, int n, bn_blob *gpu, bn_blob *cpu, uint64_t seed)
{
    const float *g = bn_blob_host_rd(gpu), *c = bn_blob_host_rd(cpu);
    CHECK_MSG(g && c, "%s", bn_last_error());
    size_t count = bn_blob_count(cpu);
    CHECK(bn_blob_count(gpu) == count);
    for (size_t i = 0; i < count; i++) {
        uint32_t gb, cb;
        memcpy(&gb, &g[i], sizeof gb);
        memcpy(&cb, &c[i], sizeof cb);
        CHECK_MSG(gb == cb, "%s, batch %d: %s element %zu: gpu %.9g (0x%08x), cpu %.9g (0x%08x); seed %llu "
                  "(rerun: %s)", what, n, cpu->name, i, g[i], (unsigned)gb, c[i], (unsigned)cb,
                  (unsigned long long)seed, lt_replay());
    }
    return BN_PASS;
}

static int compare_once(const char *type, const geometry *g, int capacity, int n, int ties, uint64_t seed,
                        bn_ctx *ctx)
{
    char text[256], what[160];
    model_text(text, sizeof text, type, g);
    snprintf(what, sizeof what, "%s %dx%dx%d size %d stride %d pad %d, %s inputs", type, g->c, g->h, g->w, g->size,
             g->stride, g->pad, ties ? "tied" : "normal");
    bn_net *cpu, *gpu;
    CHECK_OK(bn_net_from_text(text, what, &cpu));
    CHECK_OK(bn_net_from_text(text, what, &gpu));
    CHECK_OK(bn_net_setup(cpu, capacity, NULL, 1, seed));
    CHECK_OK(bn_net_setup(gpu, capacity, ctx, 1, seed));
    CHECK_OK(bn_net_set_batch(cpu, n));
    CHECK_OK(bn_net_set_batch(gpu, n));
    bn_layer *lc = cpu->layers[0], *lg = gpu->layers[0];
    CHECK_OK(poison(lg->out, ctx));
    CHECK_OK(poison(gpu->input_grad, ctx));
    bn_rng r;
    bn_rng_seed(&r, seed, 3);
    CHECK_OK(feed(lc->out_grad, lg->out_grad, &r, 0));
    /* Two steps on other inputs: the max pooling's argmax mask, kept from the first forward
     * pass, is written anew by the second. */
    for (int step = 0; step < 2; step++) {
        CHECK_OK(feed(cpu->input, gpu->input, &r, ties));
        CHECK_OK(bn_net_forward(cpu, 1));
        CHECK_OK(bn_net_forward(gpu, 1));
        CHECK_OK(bn_net_backward(cpu));
        CHECK_OK(bn_net_backward(gpu));
        CHECK(same_bits(what, n, lg->out, lc->out, seed) == BN_PASS);
        CHECK(same_bits(what, n, gpu->input_grad, cpu->input_grad, seed) == BN_PASS);
        /* A second backward over a gradient already there: overwritten, the same bits again. */
        CHECK_OK(bn_net_backward(gpu));
        CHECK(same_bits(what, n, gpu->input_grad, cpu->input_grad, seed) == BN_PASS);
    }
    bn_net_free(cpu);
    bn_net_free(gpu);
    return BN_PASS;
}

static int sweep(const char *type)
{
    if (bn_device_count() == 0) BN_SKIP_TEST("no CUDA device");
    bn_ctx *ctx;
    CHECK_OK(bn_ctx_open(0, &ctx));
    uint64_t seed = lt_fresh_seed();
    int compared = 0;
    for (int k = 0; k < NUM_GEOMETRIES; k++)
        for (int b = 0; b < NUM_SIZES; b++)
            for (int ties = 0; ties < 2; ties++) {
                uint64_t s = seed + (uint64_t)(k * NUM_SIZES + b) * 2 + (uint64_t)ties;
                CHECK(compare_once(type, &geometries[k], capacities[b], batches[b], ties, s, ctx) == BN_PASS);
                compared++;
            }
    printf("    gpu vs cpu %s: %d geometries x batches 1, 37 of 64, 257 x tied and normal inputs: "
           "outputs and input gradients bit for bit equal (%d passes)\n", type, NUM_GEOMETRIES, compared);
    return BN_PASS;
}

BN_TEST(gpu_pools_match_cpu_bitwise)
{
    static const char *const types[] = {"maxpool", "avgpool"};
    int r = BN_PASS;
    for (size_t i = 0; i < sizeof types / sizeof types[0] && r == BN_PASS; i++) r = sweep(types[i]);
    return r;
}

/* One example on the GPU: x in, dy as the output gradient; y and dx out. */
static int gpu_pass(bn_ctx *ctx, const char *text, const float *x, int nx, const float *dy, int ny, float *y,
                    float *dx)
{
    bn_net *net;
    CHECK_OK(bn_net_from_text(text, "gpu-pool", &net));
    CHECK_OK(bn_net_setup(net, 1, ctx, 1, 1));
    CHECK_OK(poison(net->layers[0]->out, ctx));
    CHECK_OK(poison(net->input_grad, ctx));
    CHECK_OK(lt_write(net->input, x, (size_t)nx));
    CHECK_OK(bn_net_forward(net, 1));
    CHECK_OK(lt_write(net->layers[0]->out_grad, dy, (size_t)ny));
    CHECK_OK(bn_net_backward(net));
    CHECK_OK(lt_read(net->layers[0]->out, y, (size_t)ny));
    CHECK_OK(lt_read(net->input_grad, dx, (size_t)nx));
    bn_net_free(net);
    return BN_PASS;
}

/* The hand-computed cases of test_pool.c, on the GPU. */
BN_TEST(gpu_maxpool_ties_and_padding_by_hand)
{
    if (bn_device_count() == 0) BN_SKIP_TEST("no CUDA device");
    bn_ctx *ctx;
    CHECK_OK(bn_ctx_open(0, &ctx));
    float y[4], dx[9];

    /* Windows of 3s: {1, 3, 3, 3} and {3, 3, 3, 0}; both send their gradient to cell 1. */
    static const float tie_x[] = {1, 3, 3, 3, 3, 0}, tie_dy[] = {1, 10}, tie_dx[] = {0, 11, 0, 0, 0, 0};
    CHECK(gpu_pass(ctx, "[input]\nchannels=1\nheight=2\nwidth=3\n[maxpool]\nsize=2\nstride=1\n", tie_x, 6, tie_dy, 2,
                   y, dx) == BN_PASS);
    CHECK_MSG(y[0] == 3 && y[1] == 3, "y = %g %g, expected 3 3", y[0], y[1]);
    for (int i = 0; i < 6; i++) CHECK_MSG(dx[i] == tie_dx[i], "ties: dx[%d] = %g, expected %g", i, dx[i], tie_dx[i]);

    /* A 2x2 window of four equal values: the top-left one takes the gradient. */
    static const float flat_x[] = {7, 7, 7, 7}, flat_dy[] = {5}, flat_dx[] = {5, 0, 0, 0};
    CHECK(gpu_pass(ctx, "[input]\nchannels=1\nheight=2\nwidth=2\n[maxpool]\nsize=2\n", flat_x, 4, flat_dy, 1, y, dx) ==
          BN_PASS);
    CHECK_MSG(y[0] == 7, "y = %g, expected 7", y[0]);
    for (int i = 0; i < 4; i++) CHECK_MSG(dx[i] == flat_dx[i], "flat: dx[%d] = %g, expected %g", i, dx[i], flat_dx[i]);

    /* All negative, size 2 stride 2 pad 1: a padding zero would win every max and pull every
     * mean towards zero. */
    static const char *const neg = "[input]\nchannels=1\nheight=3\nwidth=3\n[%s]\nsize=2\nstride=2\npad=1\n";
    static const float neg_x[] = {-5, -2, -3, -4, -1, -6, -7, -8, -9}, neg_dy[] = {1, 2, 3, 4};
    char text[160];
    snprintf(text, sizeof text, neg, "maxpool");
    CHECK(gpu_pass(ctx, text, neg_x, 9, neg_dy, 4, y, dx) == BN_PASS);
    static const float max_y[] = {-5, -2, -4, -1}, max_dx[] = {1, 2, 0, 3, 4, 0, 0, 0, 0};
    for (int i = 0; i < 4; i++) CHECK_MSG(y[i] == max_y[i], "maxpool: y[%d] = %g, expected %g", i, y[i], max_y[i]);
    for (int i = 0; i < 9; i++) CHECK_MSG(dx[i] == max_dx[i], "maxpool: dx[%d] = %g, expected %g", i, dx[i], max_dx[i]);
    snprintf(text, sizeof text, neg, "avgpool");
    CHECK(gpu_pass(ctx, text, neg_x, 9, neg_dy, 4, y, dx) == BN_PASS);
    static const float avg_y[] = {-5, -2.5f, -5.5f, -6}, avg_dx[] = {1, 1, 1, 1.5f, 1, 1, 1.5f, 1, 1};
    for (int i = 0; i < 4; i++) CHECK_MSG(y[i] == avg_y[i], "avgpool: y[%d] = %g, expected %g", i, y[i], avg_y[i]);
    for (int i = 0; i < 9; i++) CHECK_MSG(dx[i] == avg_dx[i], "avgpool: dx[%d] = %g, expected %g", i, dx[i], avg_dx[i]);
    return BN_PASS;
}

/* Without an input gradient backward has nothing to write and succeeds; forward still runs. */
BN_TEST(gpu_pool_backward_without_input_gradient)
{
    if (bn_device_count() == 0) BN_SKIP_TEST("no CUDA device");
    bn_ctx *ctx;
    CHECK_OK(bn_ctx_open(0, &ctx));
    static const char *const types[] = {"maxpool", "avgpool"};
    static const float x[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}, dy[] = {1, 1, 1, 1};
    static const float expect[2][4] = {{6, 8, 14, 16}, {3.5f, 5.5f, 11.5f, 13.5f}};
    for (int t = 0; t < 2; t++) {
        char text[160];
        snprintf(text, sizeof text, "[input]\nchannels=1\nheight=4\nwidth=4\n[%s]\nsize=2\n", types[t]);
        bn_net *net;
        CHECK_OK(bn_net_from_text(text, "gpu-pool", &net));
        CHECK_OK(bn_net_setup(net, 1, ctx, 0, 1));
        CHECK(net->input_grad == NULL && net->layers[0]->in_grad == NULL);
        CHECK_OK(lt_write(net->input, x, 16));
        CHECK_OK(bn_net_forward(net, 1));
        CHECK_OK(lt_write(net->layers[0]->out_grad, dy, 4));
        CHECK_OK(bn_net_backward(net));
        float y[4];
        CHECK_OK(lt_read(net->layers[0]->out, y, 4));
        for (int i = 0; i < 4; i++)
            CHECK_MSG(y[i] == expect[t][i], "%s: y[%d] = %g, expected %g", types[t], i, y[i], expect[t][i]);
        bn_net_free(net);
    }
    return BN_PASS;
}

/* ---- BF16 on the GPU against FP32 on the CPU ---- */

/* Max pooling by the general kernel (3x3 windows at stride 2, padded) and the tiled one (2x2,
 * stride 2) on inputs BF16 holds exactly; average pooling windowed and global. */
BN_TEST(gpu_bf16_pools_match_cpu)
{
    static const bf16_case cases[] = {
        {"bf16 maxpool 4x7x9 s3 st2 p1, s2",
         "[input]\nchannels=4\nheight=7\nwidth=9\n[maxpool]\nsize=3\nstride=2\npad=1\n[maxpool]\nsize=2\n",
         TOL_LAYER, 1, 0, 0},
        {"bf16 avgpool 4x7x9 s3 st2 p1, s2 p1",
         "[input]\nchannels=4\nheight=7\nwidth=9\n[avgpool]\nsize=3\nstride=2\npad=1\n[avgpool]\nsize=2\npad=1\n",
         TOL_CHAIN, 0, 0, 0},
        {"bf16 avgpool 3x8x6 s2", "[input]\nchannels=3\nheight=8\nwidth=6\n[avgpool]\nsize=2\n", TOL_LAYER, 0, 0, 0},
        {"bf16 avgpool global 5x7x3", "[input]\nchannels=5\nheight=7\nwidth=3\n[avgpool]\nglobal=1\n", TOL_LAYER, 0,
         0, 0},
    };
    return gt_bf16_run_cases(cases, sizeof cases / sizeof cases[0]);
}
