/* test_conv_wino.c - the GPU's Winograd convolution family (conv_wino.h) forced on 3x3 layers of
 * 48 channels or more, against the CPU at every test size: paddings 0, 1 and 2, outputs whose
 * tiles reach past them and rows of whole 16-byte pieces, a fused ReLU on both sides, several
 * chunks of images a pass, the filter pass split along the tiles, and more channels than the
 * CPU's own Winograd path takes (its direct sums are then the reference). */
#include <stdio.h>
#include <string.h>

#include "conv2d/conv2d.h"
#include "conv2d/conv_bias.h"
#include "conv2d/conv_family.h"
#include "core/device.h"
#include "gpu_testing.h"
#include "layer_testing.h"
#include "testing.h"

/* 48x6x5 -> a (pad 1, 56) -> relu -> b (pad 0, 52: 4x3) -> relu -> c (pad 2, 49: 6x5) -> dense 5:
 * b's and c's data passes write the ReLU's input gradient before them, a's and b's forward passes
 * the ReLU's output after them. Small images: the ReLUs' inputs of a channel (images x positions)
 * are few enough that a shift of its bias keeps them all off the kink by the tolerance
 * (gt_keep_off_kinks), where at 9x7 and 257 images some lay nearer, and the transforms' roundings
 * put them on the other side on one of the two. */
static const layer_case chain = {
    "conv 48x6x5 k3p1 x56, relu, k3 x52, relu, k3p2 x49, dense 5 (Winograd)",
    "[input]\nchannels=48\nheight=6\nwidth=5\n"
    "[conv2d]\nname=a\nfilters=56\nsize=3\npad=1\ninit=he\nengine=blobnet\n[relu]\n"
    "[conv2d]\nname=b\nfilters=52\nsize=3\ninit=he\nengine=blobnet\n[relu]\n"
    "[conv2d]\nname=c\nfilters=49\nsize=3\npad=2\ninit=he\nengine=blobnet\n"
    "[dense]\noutputs=5\n[softmax_ce]\n",
    TOL_GEMM, 5, 0, 1, 0, 0, 0};

/* 264 channels: past the CPU's Winograd path (256), so the CPU sums directly. */
static const layer_case wide = {
    "conv 264x6x5 k3p1 x48, relu, k3p1 x48 (Winograd against direct sums)",
    "[input]\nchannels=264\nheight=6\nwidth=5\n"
    "[conv2d]\nfilters=48\nsize=3\npad=1\nengine=blobnet\n[relu]\n"
    "[conv2d]\nfilters=48\nsize=3\npad=1\nengine=blobnet\n",
    TOL_GEMM, 0, 0, 1, 0, 0, 0};

/* 4x4 images: rows of whole 16-byte pieces, so that the products are carried out, and the ReLUs'
 * outputs and input gradients written, a row at a time. */
static const layer_case rows = {
    "conv 64x4x4 k3p1 x56, relu, k3p1 x48, relu, k3p1 x50 (Winograd, rows of 4)",
    "[input]\nchannels=64\nheight=4\nwidth=4\n"
    "[conv2d]\nfilters=56\nsize=3\npad=1\ninit=he\nengine=blobnet\n[relu]\n"
    "[conv2d]\nfilters=48\nsize=3\npad=1\ninit=he\nengine=blobnet\n[relu]\n"
    "[conv2d]\nfilters=50\nsize=3\npad=1\ninit=he\nengine=blobnet\n",
    TOL_GEMM, 0, 0, 1, 0, 0, 0};

static int forced_case(const layer_case *lc)
{
    gt_forced_family = BN_CONV_FAMILY_WINO;
    bn_conv2d_gpu_force_own(BN_CONV_FAMILY_WINO);
    const int r = gt_run_case(lc);
    gt_forced_family = BN_CONV_FAMILY_ANY;
    bn_conv2d_gpu_force_own(BN_CONV_FAMILY_ANY);
    return r;
}

BN_TEST(gpu_conv2d_winograd_matches_cpu)
{
    if (bn_device_count() == 0) BN_SKIP_TEST("no CUDA device");
    int r = forced_case(&chain);
    if (r == BN_PASS) r = forced_case(&wide);
    if (r == BN_PASS) r = forced_case(&rows);
    return r;
}

/* The same chain with each pass's chunks a few images (a's forward chunks: 3 images), so that
 * every pass runs chunk after chunk and the filter pass adds each chunk's sums to the last's. */
BN_TEST(gpu_conv2d_winograd_chunks_match_cpu)
{
    if (bn_device_count() == 0) BN_SKIP_TEST("no CUDA device");
    bn_wino_room(50000);
    bn_wino_plan p;
    const bn_conv_geom g = {48, 6, 5, 3, 1, 1, 6, 5};
    bn_wino_plan_make(&p, &g, 56, 257, 132, 0);
    int r = BN_PASS;
    if (p.pass[0].images != 3 || p.pass[1].images != 3 || p.pass[2].images != 3) {
        printf("    chunks of %d, %d and %d images, not 3\n", p.pass[0].images, p.pass[1].images,
               p.pass[2].images);
        r = BN_FAIL;
    }
    if (r == BN_PASS) r = forced_case(&chain);
    bn_wino_room(0);
    return r;
}

/* The plans themselves (no device): chunks within the room, the filter pass split along the tiles
 * only where a chunk's tiles allow pieces of WG_SPLIT_MIN, and the bytes they need. */
BN_TEST(conv_winograd_plans_chunk_and_split)
{
    bn_wino_plan p;
    /* cifar10_resnet's l1 at 512 images: 64 -> 128 channels of 32x32, 64 tiles an image. */
    const bn_conv_geom l1 = {64, 32, 32, 3, 1, 1, 32, 32};
    bn_wino_plan_make(&p, &l1, 128, 512, 132, 0);
    CHECK(p.products == 3);
    for (int i = 0; i < 3; i++) CHECK_MSG(p.pass[i].ok, "pass %d: %s", i, p.pass[i].why);
    const long long per_image = 36LL * 64 * (64 + 128);
    CHECK(p.pass[0].images == (int)(16LL * 1024 * 1024 / per_image));
    CHECK(p.pass[0].cols == p.pass[0].images * 64);
    /* Past the split counters that other families' passes of the layer keep at zero: the weights,
     * split in two, and the chunk's 16 Mi floats or fewer. */
    CHECK(p.scratch == BN_CONV_SPLIT_COUNTERS * sizeof(unsigned) +
                           (2 * 36ULL * 128 * 64 + 36ULL * p.pass[0].cols * (64 + 128)) * sizeof(float));
    CHECK(36ULL * p.pass[0].cols * (64 + 128) <= 16ULL * 1024 * 1024);
    /* The forward pass's products have 128 rows (tiles of 128 x 128), the data pass's 64 (64 x 256). */
    CHECK(p.pass[0].cfg == 0 && p.pass[1].cfg == 1);
    /* The filter pass: its rows the 64 channels (tiles of 64 x 128, none wasted, where 128 filters
     * by 64 channels would waste half of 128 x 128); 36 blocks a chunk without splits, 264 wanted:
     * 8 splits. */
    CHECK(p.pass[2].images == (int)(16LL * 1024 * 1024 / per_image));
    CHECK(p.pass[2].turned == 1 && p.pass[2].cfg == 2);
    CHECK(p.pass[2].splits == 8);
    /* A chunk of 2 images of 9 tiles: 18 tiles, no split; 96 filters of 48 channels, turned. */
    const bn_conv_geom small = {48, 12, 12, 3, 1, 1, 12, 12};
    bn_wino_plan_make(&p, &small, 96, 2, 132, 1);
    CHECK(p.products == 1 && p.pass[2].splits == 1 && p.pass[2].cols == 20);
    CHECK(p.pass[2].turned == 1 && p.pass[2].cfg == 2);
    /* The data pass's form: dy padded by 2 - pad, the channels' roles swapped. */
    const bn_conv_geom p0 = {56, 9, 7, 3, 1, 0, 7, 5};
    bn_wino_plan_make(&p, &p0, 50, 8, 132, 0);
    CHECK(p.pass[1].f.pad == 2 && p.pass[1].f.ci == 50 && p.pass[1].f.co == 56 && p.pass[1].f.oh == 9);
    CHECK(p.pass[1].f.th == 3 && p.pass[1].f.tw == 2 && p.pass[1].cip == 52);
    CHECK(p.pass[0].f.th == 2 && p.pass[0].f.tw == 2 && p.pass[0].cip == 56);
    /* An empty batch still has a chunk of columns (the filter pass's split shares divide them). */
    bn_wino_plan_make(&p, &l1, 128, 0, 132, 0);
    CHECK(p.pass[0].ok && p.pass[0].images == 1 && p.pass[2].cols == 64 && p.pass[2].splits == 1);
    /* One image past the room is a chunk of one; a batch whose input passes INT_MAX floats is
     * refused in every pass. */
    const bn_conv_geom big = {512, 256, 256, 3, 1, 1, 256, 256};
    bn_wino_plan_make(&p, &big, 512, 2, 132, 0);
    CHECK(p.pass[0].ok && p.pass[0].images == 1 && p.pass[0].cols == 64 * 64 && p.pass[2].images == 1);
    bn_wino_plan_make(&p, &big, 512, 64, 132, 0);
    for (int i = 0; i < 3; i++)
        CHECK_MSG(!p.pass[i].ok && strcmp(p.pass[i].why, "shape outside its kernels' limits") == 0, "pass %d: %s", i,
                  p.pass[i].why ? p.pass[i].why : "ok");
    return BN_PASS;
}

/* Whether a pass's buffers lie one after the other as conv_wino.h says, each 16-byte aligned. */
static int layout_holds(const bn_wino_pass *w, int filter)
{
    const long long points = 36, product_rows = w->turned ? w->f.ci : w->f.co;
    if (w->lo % 4 || w->in % 4 || w->dy % 4 || w->out % 4 || w->slot % 4 || w->bias % 4) return 0;
    if (!filter)
        return w->lo == points * w->f.co * w->cip && w->in == 2 * w->lo &&
               w->out == w->in + points * w->cip * w->cols && w->floats == w->out + points * w->f.co * w->cols;
    return w->in == 0 && w->dy == points * w->cip * w->cols && w->out == w->dy + points * w->f.co * w->cols &&
           w->slot == points * product_rows * w->ldc && w->bias == w->out + w->splits * w->slot &&
           w->floats == w->bias + (long long)w->f.co * BN_CONV_BIAS_PARTS;
}

/* The plan says where each pass's buffers lie and how many floats they take, which the kernels
 * read: the forward and data passes' in the scratch past the split counters, the filter pass's
 * in its partial sums, the largest pass sizing each; the filter pass's splits in whole stages
 * that cover its tiles once. */
BN_TEST(conv_winograd_plans_lay_out_their_buffers)
{
    static const struct {
        bn_conv_geom g;
        int filters, n;
    } cases[] = {
        {{64, 32, 32, 3, 1, 1, 32, 32}, 128, 512}, {{48, 12, 12, 3, 1, 1, 12, 12}, 96, 2},
        {{56, 9, 7, 3, 1, 0, 7, 5}, 50, 257},      {{512, 4, 4, 3, 1, 1, 4, 4}, 512, 512},
        {{72, 7, 6, 3, 1, 2, 8, 8}, 50, 3},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        bn_wino_plan p;
        bn_wino_plan_make(&p, &cases[i].g, cases[i].filters, cases[i].n, 132, 0);
        for (int k = 0; k < 3; k++) CHECK_MSG(layout_holds(&p.pass[k], k == 2), "case %zu, pass %d", i, k);
        const long long most = p.pass[0].floats > p.pass[1].floats ? p.pass[0].floats : p.pass[1].floats;
        CHECK(p.scratch == BN_CONV_SPLIT_COUNTERS * sizeof(unsigned) + (size_t)most * sizeof(float));
        CHECK(p.workspace == (size_t)p.pass[2].floats * sizeof(float));
        const bn_wino_pass *w = &p.pass[2];
        CHECK_MSG(w->per % 16 == 0 && (long long)w->splits * w->per >= w->cols &&
                      (long long)(w->splits - 1) * w->per < w->cols,
                  "case %zu: %d splits of %d tiles for %d", i, w->splits, w->per, w->cols);
        CHECK(w->ldc == (w->turned ? (w->f.co + 3) / 4 * 4 : w->cip));
    }
    return BN_PASS;
}
