/* test_conv_families.c - conv2d's kernel families through their table (conv_family.h) and run
 * alone (conv_alone.h): the table's names and numbers, the rule's order its ranks give and the
 * ties a timed choice breaks by it, its applicability answers for shapes where they must be yes
 * or no (on the CPU: plans need no device), each family named and run alone on the shapes it
 * serves against the CPU's im2col-and-BLAS passes (GPU; skipped without one), the row tiles'
 * filter kernels against the registers their plan counts on (GPU), and `blobnet conv-families`'
 * flag errors through the CLI. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "conv2d/conv_alone.h"
#include "conv2d/conv_family.h"
#include "conv2d/conv_igemm_limits.h"
#include "conv2d/conv_rows.h"
#include "conv2d/conv_tensor.h"
#include "core/device.h"
#include "gpu/chooser.h"
#include "testing.h"

static char out[16384];

/* A shape: input channels, height, width, window, stride, pad, filters, batch, pooled. */
typedef struct shape_row {
    int c, h, w, k, stride, pad, filters, n, pooled;
} shape_row;

static bn_conv_shape shape_of(const shape_row *r, int sms)
{
    bn_conv_shape s;
    memset(&s, 0, sizeof s);
    s.g.c = r->c, s.g.h = r->h, s.g.w = r->w, s.g.k = r->k, s.g.stride = r->stride, s.g.pad = r->pad;
    s.g.oh = (r->h + 2 * r->pad - r->k) / r->stride + 1;
    s.g.ow = (r->w + 2 * r->pad - r->k) / r->stride + 1;
    s.filters = r->filters, s.n = r->n, s.sms = sms, s.pooled = r->pooled;
    return s;
}

/* Whether the family numbered f applies to pass `pass` of s; *why as the table says. */
static int applies(int f, int pass, const bn_conv_shape *s, const char **why)
{
    static bn_conv_family_plan plan;
    const bn_conv_family *fam = bn_conv_families[f - 1];
    fam->plan(&plan, s);
    return bn_conv_family_applies(fam, &plan, s, pass, why);
}

BN_TEST(conv_family_table_names_each_family_by_its_number)
{
    static const struct {
        const char *name;
        int number;
    } want[] = {{"direct", BN_CONV_FAMILY_DIRECT}, {"igemm", BN_CONV_FAMILY_IGEMM}, {"rows", BN_CONV_FAMILY_ROWS},
                {"tensor", BN_CONV_FAMILY_TENSOR}, {"argmax", BN_CONV_FAMILY_ARGMAX}, {"halo", BN_CONV_FAMILY_HALO},
                {"winograd", BN_CONV_FAMILY_WINO}, {"fma", BN_CONV_FAMILY_FMA}};
    CHECK(sizeof want / sizeof want[0] == BN_CONV_FAMILY_COUNT);
    for (int i = 0; i < BN_CONV_FAMILY_COUNT; i++) {
        CHECK_MSG(strcmp(bn_conv_families[want[i].number - 1]->name, want[i].name) == 0, "family %d is %s", i + 1,
                  bn_conv_families[want[i].number - 1]->name);
        CHECK(bn_conv_family_number(want[i].name) == want[i].number);
        CHECK(bn_conv_family_find(want[i].name) == bn_conv_families[want[i].number - 1]);
    }
    CHECK(bn_conv_family_number("cudnn") == 0);
    CHECK(bn_conv_family_find("fft") == NULL);
    CHECK(strcmp(bn_conv_pass_name(BN_CONV_DATA), "backward-data") == 0);
    return BN_PASS;
}

/* The rule's order of preference the table's ranks give, per pass (bn_conv_family_order): the
 * tensor cores first for the forward and data passes, the row tiles for the filter pass
 * (docs/performance.md). */
BN_TEST(conv_family_order_is_the_rules_order_of_preference)
{
    enum {
        D = BN_CONV_FAMILY_DIRECT,
        I = BN_CONV_FAMILY_IGEMM,
        R = BN_CONV_FAMILY_ROWS,
        T = BN_CONV_FAMILY_TENSOR,
        A = BN_CONV_FAMILY_ARGMAX,
        H = BN_CONV_FAMILY_HALO,
        W = BN_CONV_FAMILY_WINO,
        F = BN_CONV_FAMILY_FMA
    };
    static const int want[BN_CONV_PASSES][BN_CONV_FAMILY_COUNT] = {
        {T, R, D, I, A, H, W, F}, {T, R, D, I, A, H, W, F}, {R, I, T, D, A, H, W, F}};
    for (int pass = 0; pass < BN_CONV_PASSES; pass++) {
        int order[BN_CONV_FAMILY_COUNT];
        bn_conv_family_order(pass, order);
        for (int k = 0; k < BN_CONV_FAMILY_COUNT; k++)
            CHECK_MSG(order[k] == want[pass][k], "%s: place %d holds %s, not %s", bn_conv_pass_name(pass), k,
                      bn_conv_families[order[k] - 1]->name, bn_conv_families[want[pass][k] - 1]->name);
    }
    /* The implicit GEMM and the halo kernels are offered for every pass; argmax serves nothing
     * else, and the FP32 tiles the data pass alone. */
    CHECK(bn_conv_families[BN_CONV_FAMILY_IGEMM - 1]->offered ==
          (1u << BN_CONV_FORWARD | 1u << BN_CONV_DATA | 1u << BN_CONV_FILTER));
    CHECK(bn_conv_families[BN_CONV_FAMILY_ARGMAX - 1]->serves == 1u << BN_CONV_FILTER);
    CHECK(bn_conv_families[BN_CONV_FAMILY_FMA - 1]->serves == 1u << BN_CONV_DATA);
    CHECK(bn_conv_families[BN_CONV_FAMILY_FMA - 1]->offered == 1u << BN_CONV_DATA);
    CHECK(bn_conv_families[BN_CONV_FAMILY_HALO - 1]->offered ==
          (1u << BN_CONV_FORWARD | 1u << BN_CONV_DATA | 1u << BN_CONV_FILTER));
    CHECK(bn_conv_families[BN_CONV_FAMILY_WINO - 1]->offered ==
          (1u << BN_CONV_FORWARD | 1u << BN_CONV_DATA | 1u << BN_CONV_FILTER));
    return BN_PASS;
}

/* A timed choice's tie as conv_choice.cu asks the chooser for it: the families in the rule's order,
 * then cuDNN (runner 0), so that of the runners timed within 5% of the fastest the rule's first
 * is taken, and cuDNN only where no family is within. Milliseconds by runner: cuDNN, then the
 * families by number (direct, igemm, rows, tensor, argmax, halo, winograd, fma); INFINITY where not timed. */
BN_TEST(conv_family_order_breaks_a_timed_choices_ties)
{
    static const struct {
        int pass;
        float ms[BN_CONV_FAMILY_COUNT + 1];
        int want;
    } cases[] = {
        /* cuDNN fastest, the tensor cores within 5%: the tensor cores. */
        {BN_CONV_FORWARD, {1.00f, 1.50f, INFINITY, 1.20f, 1.04f, INFINITY, INFINITY, INFINITY, INFINITY},
         BN_CONV_FAMILY_TENSOR},
        /* The row tiles fastest, the tensor cores within 5%: whichever the pass's order puts first. */
        {BN_CONV_FORWARD, {INFINITY, INFINITY, INFINITY, 1.00f, 1.03f, INFINITY, INFINITY, INFINITY, INFINITY},
         BN_CONV_FAMILY_TENSOR},
        {BN_CONV_FILTER, {INFINITY, INFINITY, INFINITY, 1.03f, 1.00f, INFINITY, INFINITY, INFINITY, INFINITY},
         BN_CONV_FAMILY_ROWS},
        /* No family within 5% of cuDNN. */
        {BN_CONV_DATA, {1.00f, 1.06f, INFINITY, 1.10f, INFINITY, INFINITY, 1.07f, INFINITY, INFINITY}, 0},
        /* Nothing within 5% of the fastest family, though the order puts three before it. */
        {BN_CONV_FILTER, {2.00f, 1.00f, 1.20f, 1.10f, 1.30f, 1.50f, INFINITY, INFINITY, INFINITY},
         BN_CONV_FAMILY_DIRECT},
        /* The halo kernels fastest by more than 5%, though the order puts them last. */
        {BN_CONV_FORWARD, {1.00f, 1.20f, 1.10f, INFINITY, INFINITY, INFINITY, 0.90f, INFINITY, INFINITY},
         BN_CONV_FAMILY_HALO},
        /* ... and within 5% of the implicit GEMM, which the order puts before them. */
        {BN_CONV_DATA, {1.00f, 1.20f, 0.92f, INFINITY, INFINITY, INFINITY, 0.90f, INFINITY, INFINITY},
         BN_CONV_FAMILY_IGEMM},
        /* Winograd fastest by more than 5%; then within 5% of the halo kernels, which go first. */
        {BN_CONV_FORWARD, {1.00f, 1.20f, 1.10f, INFINITY, INFINITY, INFINITY, 0.90f, 0.80f, INFINITY},
         BN_CONV_FAMILY_WINO},
        {BN_CONV_FILTER, {1.00f, 1.20f, 1.10f, INFINITY, INFINITY, INFINITY, 0.82f, 0.80f, INFINITY},
         BN_CONV_FAMILY_HALO},
        /* The FP32 tiles fastest for a data pass by more than 5%, though the order puts them last;
         * within 5% of the tensor cores, the tensor cores. */
        {BN_CONV_DATA, {1.00f, INFINITY, INFINITY, 1.10f, 0.90f, INFINITY, INFINITY, INFINITY, 0.80f},
         BN_CONV_FAMILY_FMA},
        {BN_CONV_DATA, {1.00f, INFINITY, INFINITY, 1.10f, 0.82f, INFINITY, INFINITY, INFINITY, 0.80f},
         BN_CONV_FAMILY_TENSOR},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int order[BN_CONV_FAMILY_COUNT + 1];
        bn_conv_family_order(cases[i].pass, order);
        order[BN_CONV_FAMILY_COUNT] = 0;
        const bn_candidates c = {BN_CONV_FAMILY_COUNT + 1, NULL, NULL, order, BN_CONV_FAMILY_COUNT + 1,
                                 NULL, NULL, -1, NULL, NULL};
        const int got = bn_chooser_pick(&c, cases[i].ms, BN_CHOOSER_TIE);
        CHECK_MSG(got == cases[i].want, "case %zu (%s): runner %d, not %d", i, bn_conv_pass_name(cases[i].pass), got,
                  cases[i].want);
    }
    return BN_PASS;
}

/* LeNet's convolutions, each read by a 2x2 max pooling (the layers the rule was measured on), are
 * served by every family on every pass it has kernels for, but for conv1's 24x24 output, whose
 * 576 positions are more than the tensor cores' forward (512) and data kernels take, and for
 * the halo kernels, built for 3x3 windows. */
BN_TEST(conv_family_every_family_applies_to_lenets_layers)
{
    static const shape_row lenet[] = {{1, 28, 28, 5, 1, 0, 20, 64, 1}, {20, 12, 12, 5, 1, 0, 50, 256, 1}};
    for (size_t i = 0; i < sizeof lenet / sizeof lenet[0]; i++) {
        const bn_conv_shape s = shape_of(&lenet[i], 132);
        for (int f = 1; f <= BN_CONV_FAMILY_COUNT; f++)
            for (int pass = 0; pass < BN_CONV_PASSES; pass++) {
                const char *why = NULL;
                int served = (bn_conv_families[f - 1]->serves >> pass) & 1;
                if (i == 0 && f == BN_CONV_FAMILY_TENSOR && pass != BN_CONV_FILTER) served = 0;
                if (f == BN_CONV_FAMILY_HALO || f == BN_CONV_FAMILY_WINO) served = 0; /* 3x3 windows only */
                if (i == 0 && f == BN_CONV_FAMILY_FMA) served = 0; /* 576 positions of dy */
                CHECK_MSG(applies(f, pass, &s, &why) == served, "shape %zu, %s %s: %s", i,
                          bn_conv_families[f - 1]->name, bn_conv_pass_name(pass), why ? why : "applies");
                if (!((bn_conv_families[f - 1]->serves >> pass) & 1))
                    CHECK(strcmp(why, "no kernel for this pass") == 0);
            }
        /* The filter pass needs partial sums wherever a family runs it. */
        static bn_conv_family_plan plan;
        for (int f = 1; f <= BN_CONV_FAMILY_COUNT; f++) {
            if (f == BN_CONV_FAMILY_HALO || f == BN_CONV_FAMILY_WINO || f == BN_CONV_FAMILY_FMA) continue;
            bn_conv_families[f - 1]->plan(&plan, &s);
            CHECK_MSG(bn_conv_families[f - 1]->workspace(&plan) > 0, "%s", bn_conv_families[f - 1]->name);
        }
    }
    return BN_PASS;
}

/* Where the table must say no, and why. */
BN_TEST(conv_family_refusals_name_the_reason)
{
    static const struct {
        shape_row shape;
        int family, pass;
        const char *why;
    } cases[] = {
        /* Stride 2: the row tiles, the tensor cores' data pass, argmax. */
        {{3, 17, 13, 3, 2, 1, 8, 4, 1}, BN_CONV_FAMILY_ROWS, BN_CONV_FORWARD, "stride 1 only"},
        {{3, 17, 13, 3, 2, 1, 8, 4, 1}, BN_CONV_FAMILY_ROWS, BN_CONV_FILTER, "stride 1 only"},
        {{3, 17, 13, 3, 2, 1, 8, 4, 1}, BN_CONV_FAMILY_TENSOR, BN_CONV_DATA, "stride 1 only"},
        {{3, 17, 13, 3, 2, 1, 8, 4, 1}, BN_CONV_FAMILY_ARGMAX, BN_CONV_FILTER, "stride 1 only"},
        /* The row tiles take odd windows up to 7. */
        {{2, 20, 20, 9, 1, 0, 8, 4, 0}, BN_CONV_FAMILY_ROWS, BN_CONV_FORWARD, "windows of 1, 3, 5 or 7 only"},
        {{2, 20, 20, 4, 1, 0, 8, 4, 0}, BN_CONV_FAMILY_ROWS, BN_CONV_DATA, "windows of 1, 3, 5 or 7 only"},
        /* The tensor cores' forward and filter passes take up to 64 filters. */
        {{4, 10, 10, 3, 1, 1, 80, 4, 0}, BN_CONV_FAMILY_TENSOR, BN_CONV_FORWARD, "at most 64 filters"},
        {{4, 10, 10, 3, 1, 1, 80, 4, 0}, BN_CONV_FAMILY_TENSOR, BN_CONV_FILTER, "at most 64 filters"},
        /* The argmax kernel runs only through a fused pooling, and only the filter pass. */
        {{1, 28, 28, 5, 1, 0, 20, 64, 0}, BN_CONV_FAMILY_ARGMAX, BN_CONV_FILTER,
         "only through a fused 2x2 max pooling"},
        {{1, 28, 28, 5, 1, 0, 20, 64, 1}, BN_CONV_FAMILY_ARGMAX, BN_CONV_FORWARD, "no kernel for this pass"},
        {{1, 28, 28, 9, 1, 0, 20, 64, 1}, BN_CONV_FAMILY_ARGMAX, BN_CONV_FILTER, "windows up to 7 only"},
        /* The halo kernels: 3x3 windows, the data pass at stride 1 with padding
         * inside the window, and input rows that a block can stage. */
        {{20, 12, 12, 5, 1, 0, 50, 256, 0}, BN_CONV_FAMILY_HALO, BN_CONV_FORWARD, "windows of 3 only"},
        {{20, 12, 12, 5, 1, 0, 50, 256, 0}, BN_CONV_FAMILY_HALO, BN_CONV_FILTER, "windows of 3 only"},
        {{3, 17, 13, 3, 2, 1, 8, 4, 0}, BN_CONV_FAMILY_HALO, BN_CONV_DATA, "stride 1 only"},
        {{4, 10, 10, 3, 1, 3, 8, 4, 0}, BN_CONV_FAMILY_HALO, BN_CONV_DATA, "padding wider than the window"},
        {{4, 10, 700, 3, 1, 1, 8, 4, 0}, BN_CONV_FAMILY_HALO, BN_CONV_FORWARD, "input rows too wide to stage"},
        /* Winograd: 3x3 windows at stride 1, padding up to 2, and channels enough to gain. */
        {{64, 12, 12, 5, 1, 0, 64, 8, 0}, BN_CONV_FAMILY_WINO, BN_CONV_FORWARD, "windows of 3 only"},
        {{64, 17, 13, 3, 2, 1, 64, 4, 0}, BN_CONV_FAMILY_WINO, BN_CONV_FILTER, "stride 1 only"},
        {{64, 10, 10, 3, 1, 3, 64, 4, 0}, BN_CONV_FAMILY_WINO, BN_CONV_DATA, "padding wider than the window"},
        {{32, 10, 10, 3, 1, 1, 64, 4, 0}, BN_CONV_FAMILY_WINO, BN_CONV_FORWARD, "too few channels to gain"},
        {{64, 10, 10, 3, 1, 1, 47, 4, 0}, BN_CONV_FAMILY_WINO, BN_CONV_DATA, "too few channels to gain"},
        /* The FP32 tiles: the data pass alone, at stride 1, windows up to 7, images of up to 512
         * positions of dy. */
        {{20, 12, 12, 5, 1, 0, 50, 256, 1}, BN_CONV_FAMILY_FMA, BN_CONV_FILTER, "no kernel for this pass"},
        {{3, 17, 13, 3, 2, 1, 8, 4, 0}, BN_CONV_FAMILY_FMA, BN_CONV_DATA, "stride 1 only"},
        {{2, 20, 20, 9, 1, 0, 8, 4, 0}, BN_CONV_FAMILY_FMA, BN_CONV_DATA, "windows up to 7 only"},
        {{1, 28, 28, 5, 1, 0, 20, 64, 1}, BN_CONV_FAMILY_FMA, BN_CONV_DATA, "images of more than 512 positions"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const bn_conv_shape s = shape_of(&cases[i].shape, 132);
        const char *why = NULL;
        CHECK_MSG(!applies(cases[i].family, cases[i].pass, &s, &why), "case %zu: %s applies to %s", i,
                  bn_conv_families[cases[i].family - 1]->name, bn_conv_pass_name(cases[i].pass));
        CHECK_MSG(why && strcmp(why, cases[i].why) == 0, "case %zu: why is \"%s\", not \"%s\"", i, why ? why : "",
                  cases[i].why);
    }
    /* What still applies at stride 2: the direct kernels' forward and filter passes, and every
     * pass of the implicit GEMM (its data pass as stride x stride phases). */
    const bn_conv_shape s2 = shape_of(&cases[0].shape, 132);
    const char *why = NULL;
    CHECK(applies(BN_CONV_FAMILY_DIRECT, BN_CONV_FORWARD, &s2, &why));
    CHECK(applies(BN_CONV_FAMILY_DIRECT, BN_CONV_FILTER, &s2, &why));
    CHECK(applies(BN_CONV_FAMILY_TENSOR, BN_CONV_FORWARD, &s2, &why));
    for (int pass = 0; pass < BN_CONV_PASSES; pass++) CHECK(applies(BN_CONV_FAMILY_IGEMM, pass, &s2, &why));
    CHECK(applies(BN_CONV_FAMILY_HALO, BN_CONV_FORWARD, &s2, &why));
    CHECK(applies(BN_CONV_FAMILY_HALO, BN_CONV_FILTER, &s2, &why));
    /* A 3x3 layer of resnet_fashion's at batch 64: every halo pass. */
    const shape_row r = {64, 14, 14, 3, 1, 1, 64, 64, 0};
    const bn_conv_shape s3 = shape_of(&r, 132);
    for (int pass = 0; pass < BN_CONV_PASSES; pass++) CHECK(applies(BN_CONV_FAMILY_HALO, pass, &s3, &why));
    for (int pass = 0; pass < BN_CONV_PASSES; pass++) CHECK(applies(BN_CONV_FAMILY_WINO, pass, &s3, &why));
    return BN_PASS;
}

/* A family's plan for s keeps scratch exactly where its forward or data pass splits (split), and
 * its table entry answers the plan's bytes (scratch). */
static int scratch_agrees(const bn_conv_family *fam, const bn_conv_shape *s, size_t scratch, int split)
{
    if ((scratch > 0) != split) return 0;
    bn_conv_family_plan fp;
    fam->plan(&fp, s);
    return fam->scratch(&fp) == scratch;
}

/* Blocks of `tiles` tiles whose summed index of `units` steps is shared in pieces of `per`: the
 * count bn_conv_split_share is given (tiles, units). */
static long long shared_blocks(const void *pass, long long per)
{
    const long long *tu = (const long long *)pass;
    return tu[0] * ((tu[1] + per - 1) / per);
}

static long long share_of(long long tiles, long long units, long long min_per, int beside)
{
    const long long tu[2] = {tiles, units};
    return bn_conv_split_share(units, min_per, 132, beside, shared_blocks, tu);
}

/* The split rule both families take (conv_family.h): the share whose fullest multiprocessor sums
 * the least, ties to the fewest blocks alone and to the most beside another pass, within the
 * slots, pieces and least share it is given. */
BN_TEST(conv_split_share_reckons_the_fullest_multiprocessor)
{
    /* A wave of tiles or more: whole tiles. */
    CHECK(share_of(132, 8, 2, 1) == 8 && share_of(500, 8, 2, 0) == 8);
    /* 131 tiles of 4 steps: whole (a wave, 4 steps) or halves (two waves of 2) reckon the same. */
    CHECK(share_of(131, 4, 2, 0) == 4);
    CHECK(share_of(131, 4, 2, 1) == 2);
    /* 66 tiles of 8: halves (132 blocks, 4 steps) beat whole tiles (8); quarters (264 blocks, two
     * waves of 2) tie with halves. */
    CHECK(share_of(66, 8, 2, 0) == 4);
    CHECK(share_of(66, 8, 2, 1) == 2);
    /* 40 tiles of 64: thirds (120 blocks, 22 steps) and sixths (240, two waves of 11) tie; sevenths
     * would be 280 blocks, past two a multiprocessor. */
    CHECK_MSG(share_of(40, 64, 2, 0) == 22, "%lld", share_of(40, 64, 2, 0));
    CHECK_MSG(share_of(40, 64, 2, 1) == 11, "%lld", share_of(40, 64, 2, 1));
    /* 100 tiles of 64: halves (200 blocks, two waves of 32) tie with whole tiles; thirds would be
     * 300 blocks, past two a multiprocessor (and fifths, 500 of 13, would reckon less). */
    CHECK(share_of(100, 64, 2, 0) == 64);
    CHECK(share_of(100, 64, 2, 1) == 32);
    /* A share below the least is never taken: 5 steps in pieces of 4 or more stay whole. */
    CHECK(share_of(10, 5, 4, 1) == 5);
    /* At most BN_CONV_SPLIT_MAX pieces, however long the index. */
    CHECK(share_of(1, 1000, 1, 1) == (1000 + BN_CONV_SPLIT_MAX - 1) / BN_CONV_SPLIT_MAX);
    return BN_PASS;
}

/* The halo kernels' forward and data passes share a tile's chunks of channels among blocks where
 * the tiles alone leave multiprocessors without a block and sharing them leaves the fullest
 * multiprocessor less to sum (resnet_fashion's last stage at 64 images), or as much in a data
 * pass; not where they fill the GPU or there is one chunk to share. */
BN_TEST(conv_family_halo_splits_the_channels_where_the_tiles_are_few)
{
    static const struct {
        shape_row shape;
        int split[2]; /* splits expected in the forward and data passes */
    } cases[] = {
        {{128, 7, 7, 3, 1, 1, 128, 64, 0}, {1, 1}}, {{64, 14, 14, 3, 1, 1, 64, 32, 0}, {1, 1}},
        {{128, 7, 7, 3, 1, 1, 128, 256, 0}, {0, 0}}, {{64, 14, 14, 3, 1, 1, 64, 256, 0}, {0, 0}},
        /* 131 tiles at 64 images, split in two or not, reckon the same: the forward pass (alone)
         * takes whole tiles, the data pass (beside the filter pass) halves. */
        {{64, 14, 14, 3, 1, 1, 64, 64, 0}, {0, 1}},
        /* One input channel's chunk: the forward pass cannot share it; the data pass sums 16. */
        {{8, 7, 7, 3, 1, 1, 128, 64, 0}, {0, 1}},
        /* Stride 2 (no data pass here). */
        {{64, 14, 14, 3, 2, 1, 128, 64, 0}, {1, 0}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const shape_row *r = &cases[i].shape;
        const bn_conv_shape s = shape_of(r, 132);
        bn_halo_plan p;
        bn_halo_plan_make(&p, &s.g, s.filters, s.n, s.sms, 0);
        /* The data pass sums over the filters, the forward pass over the channels. */
        const int chunks[2] = {(r->c + 7) / 8, (r->filters + 7) / 8};
        for (int pass = 0; pass < (r->stride == 1 ? 2 : 1); pass++) {
            const bn_halo_pass *h = &p.pass[pass];
            CHECK_MSG(h->ok, "case %zu, pass %d: %s", i, pass, h->why);
            CHECK_MSG((h->splits > 1) == cases[i].split[pass], "case %zu, pass %d: %d splits", i, pass, h->splits);
            /* Every chunk taken once: splits of per chunks, the last one not empty. */
            CHECK_MSG(h->splits * h->per >= chunks[pass] && (h->splits - 1) * h->per < chunks[pass],
                      "case %zu, pass %d: %d splits of %d chunks for %d", i, pass, h->splits, h->per, chunks[pass]);
            CHECK(h->splits == 1 || h->per >= 2);
        }
        CHECK_MSG(scratch_agrees(&bn_conv_family_halo, &s, p.scratch, p.pass[0].splits > 1 || p.pass[1].splits > 1),
                  "case %zu: scratch %zu", i, p.scratch);
    }
    return BN_PASS;
}

/* The implicit GEMM's forward and data passes share a tile's summed index among blocks where the
 * tiles alone leave multiprocessors without a block (strided_fashion's 7x7 layers at 64 images),
 * in spans of whole BK-deep stages, IG_SPLIT_MIN indices or more (conv_igemm_limits.h); not where
 * the tiles fill the GPU, the index is too short to share or, in a forward pass, sharing it leaves
 * the fullest multiprocessor as much work. */
BN_TEST(conv_family_igemm_splits_the_summed_index_where_the_tiles_are_few)
{
    static const struct {
        shape_row shape;
        int split[2]; /* splits expected in the forward and data passes */
    } cases[] = {
        /* 1x1, 64 -> 128 at 7x7: the forward pass sums 64 (too few), the data pass 128. */
        {{64, 7, 7, 1, 1, 0, 128, 64, 0}, {0, 1}},
        /* The same at 128 images: 98 tiles of the data pass, which a split of 2 reckons the same
         * (two blocks of half the work on 64 multiprocessors); beside the filter pass it halves. */
        {{64, 7, 7, 1, 1, 0, 128, 128, 0}, {0, 1}},
        /* 3x3 at stride 2, 7x7 -> 4x4: both; at 128 images the data pass's phases fill the GPU. */
        {{128, 7, 7, 3, 2, 1, 128, 64, 0}, {1, 1}},
        {{128, 7, 7, 3, 2, 1, 128, 128, 0}, {1, 0}},
        /* 3x3 at 14x14, 256 images: the tiles fill the GPU. */
        {{64, 14, 14, 3, 1, 1, 64, 256, 0}, {0, 0}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const bn_conv_shape s = shape_of(&cases[i].shape, 132);
        bn_igemm_plan p;
        bn_igemm_plan_make(&p, &s.g, s.filters, s.n, s.sms, 0);
        for (int pass = 0; pass < 2; pass++) {
            const bn_igemm_pass *ip = &p.pass[pass];
            CHECK_MSG(ip->ok, "case %zu, pass %d", i, pass);
            CHECK_MSG((ip->splits > 1) == cases[i].split[pass], "case %zu, pass %d: %d splits", i, pass, ip->splits);
            /* Every summed index taken once: splits of span, the last one not empty. */
            CHECK_MSG((long long)ip->splits * ip->span >= ip->K && (long long)(ip->splits - 1) * ip->span < ip->K,
                      "case %zu, pass %d: %d splits of %d for %d", i, pass, ip->splits, ip->span, ip->K);
            CHECK(ip->splits == 1 ||
                  (ip->span >= IG_SPLIT_MIN && ip->span % BK == 0 && ip->splits <= BN_CONV_SPLIT_MAX));
        }
        /* The forward pass's blocks stay within BN_CONV_SPLIT_SLOTS a multiprocessor. */
        const int bm = ig_tiles[p.pass[0].cfg][0], bn = ig_tiles[p.pass[0].cfg][1];
        const long long tiles = (long long)((p.pass[0].M + bm - 1) / bm) * ((p.pass[0].N + bn - 1) / bn);
        CHECK_MSG(p.pass[0].splits == 1 || tiles * p.pass[0].splits <= BN_CONV_SPLIT_SLOTS * 132,
                  "case %zu: %lld tiles x %d", i, tiles, p.pass[0].splits);
        CHECK_MSG(scratch_agrees(&bn_conv_family_igemm, &s, p.scratch, p.pass[0].splits > 1 || p.pass[1].splits > 1),
                  "case %zu: scratch %zu", i, p.scratch);
    }
    return BN_PASS;
}

BN_TEST(conv_families_command_names_the_bad_flag)
{
    CHECK_CLI("conv-families --size 0", 2, "--size");
    CHECK_CLI("conv-families --batch many", 2, "--batch");
    CHECK_CLI("conv-families --pass sideways", 2, "--pass");
    CHECK_CLI("conv-families --size 3 --pad 3", 2, "--pad");
    CHECK_CLI("conv-families --height 2 --width 2 --size 5", 2, "--size");
    CHECK_CLI("conv-families --height 3 --width 9 --size 3 --pooled", 2, "--pooled");
    CHECK_CLI("conv-families --reps 0", 2, "--reps");
    CHECK_CLI("conv-families --frobnicate", 2, "unknown option");
    CHECK_CLI("conv-families extra", 2, "unexpected argument");
    /* Each error is one line. */
    CHECK_MSG(strchr(out, '\n') == strrchr(out, '\n'), "more than one line:\n%s", out);
    CHECK_CLI("conv-families --help", 0, "--pooled");
    return BN_PASS;
}

/* Without a GPU the command says so in one line and fails; with one it runs a small shape. */
BN_TEST(conv_families_command_needs_a_gpu)
{
    if (bn_device_count() == 0) {
        CHECK_CLI("conv-families", 1, "blobnet: error:");
        CHECK_MSG(strchr(out, '\n') == strrchr(out, '\n'), "more than one line:\n%s", out);
        return BN_PASS;
    }
    CHECK_CLI("conv-families --batch 3 --channels 2 --height 9 --width 7 --filters 5 --reps 2", 0, "direct");
    CHECK(strstr(out, "backward-filter  argmax   no: only through a fused 2x2 max pooling") != NULL);
    CHECK(strstr(out, "OVER") == NULL);
    return BN_PASS;
}

/* The shapes each family runs alone on: odd and non-square sizes, padding, stride 2, 1x1 windows,
 * LeNet's layers, and fused poolings for the argmax kernel. */
static const shape_row alone_shapes[] = {
    {1, 28, 28, 5, 1, 0, 20, 8, 1}, {20, 12, 12, 5, 1, 0, 50, 8, 1}, {3, 13, 9, 3, 1, 1, 8, 5, 0},
    {4, 11, 15, 3, 2, 1, 12, 3, 0}, {6, 9, 7, 1, 1, 0, 10, 2, 0},    {5, 10, 14, 5, 1, 2, 16, 4, 1},
    {3, 17, 13, 3, 2, 0, 7, 2, 0},  {2, 7, 11, 7, 1, 3, 9, 3, 1},
};

/* Wider layers, for the implicit GEMM's tile configurations: more than 64 and 128 rows (filters
 * or channels), a forward reduction (160 x 9) longer than one table of its summed index, and
 * its data pass's phases at strides 2, 3 and 4 (with padding, 1x1 windows, and a 2x3 input at
 * stride 4 whose phases include ones without rows and ones without taps). Their tiles are few,
 * so most forward and data passes here share a tile's summed index among blocks: the first two
 * in both passes, the third's data pass in phases of 3, 2 and 1 spans, and the last's (a 1x1
 * window at stride 2) in 4 spans where three phases have no taps. */
static const shape_row wide_shapes[] = {
    {160, 6, 5, 3, 1, 1, 130, 3, 0}, {40, 9, 9, 3, 1, 1, 72, 4, 0},   {96, 7, 7, 3, 2, 1, 48, 5, 0},
    {33, 5, 6, 1, 1, 0, 200, 6, 0},  {20, 11, 10, 5, 3, 2, 24, 3, 0}, {36, 9, 8, 1, 2, 0, 70, 4, 0},
    {12, 2, 3, 3, 4, 1, 16, 3, 0},   {40, 9, 9, 1, 2, 0, 256, 2, 0},
};

/* The row tiles' filter plan takes each kernel's registers from a table (two blocks of up to 512
 * threads a multiprocessor where their registers fit half the register file): a kernel compiled to
 * more than its entry runs the spans planned for two blocks in two waves, as rows_filter<8, 3> did
 * in version 68 (96 registers against 64; narrow_chain's 16-channel layers). */
BN_TEST(conv_rows_filter_kernels_fit_their_planned_registers)
{
    if (bn_device_count() == 0) BN_SKIP_TEST("no CUDA device");
#ifdef BN_WITH_CUDA
    bn_ctx *ctx = NULL;
    CHECK_OK(bn_ctx_open(0, &ctx));
    static const int cts[] = {4, 8, 10}, ks[] = {1, 3, 5, 7};
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 4; j++) {
            int regs = 0;
            CHECK_OK(bn_rows_filter_registers(cts[i], ks[j], &regs));
            const int planned = bn_rows_filter_planned_registers(cts[i], ks[j]);
            CHECK_MSG(regs > 0 && regs <= planned, "rows_filter<%d, %d>: %d registers, the plan's table says %d",
                      cts[i], ks[j], regs, planned);
        }
    return BN_PASS;
#else
    BN_SKIP_TEST("a build without CUDA");
#endif
}

/* Runs runner `runner` alone on every shape of `rows` and pass it applies to, checking each
 * against the CPU; fails unless it ran at least `least` passes. */
/* The passes of `runner` on each shape against the CPU, planned for the device's multiprocessors or,
 * where `sms` is not 0, for that many (a plan's choices for another device, run on this one); with
 * `beside`, the backward passes in the shapes for running side by side (bn_conv_shape.beside). */
static int run_alone_planned(const shape_row *rows, size_t count, int runner, int tf32, int least, int sms,
                             int beside)
{
    if (bn_device_count() == 0) BN_SKIP_TEST("no CUDA device");
    bn_ctx *ctx = NULL;
    CHECK_OK(bn_ctx_open(0, &ctx));
    int ran = 0;
    for (size_t i = 0; i < count; i++) {
        bn_conv_shape s = shape_of(&rows[i], 0);
        s.tf32 = tf32;
        CHECK_OK(bn_conv_alone_device_shape(ctx, &s));
        if (sms) s.sms = sms;
        for (int pass = 0; pass < BN_CONV_PASSES; pass++) {
            bn_conv_alone_result r;
            CHECK_OK(bn_conv_alone_run(ctx, runner, pass, &s, beside, 1000 + i, 2, &r));
            if (!r.applies) continue;
            ran++;
            CHECK_MSG(r.max_error <= r.tolerance, "runner %d, shape %zu, %s: error %.3g over %.0e", runner, i,
                      bn_conv_pass_name(pass), r.max_error, r.tolerance);
            CHECK(r.ms > 0.0f);
        }
    }
    CHECK_MSG(ran >= least, "runner %d ran %d passes, expected at least %d", runner, ran, least);
    return BN_PASS;
}

static int run_alone_on(const shape_row *rows, size_t count, int runner, int tf32, int least)
{
    return run_alone_planned(rows, count, runner, tf32, least, 0, 0);
}

static int run_alone(int runner, int tf32, int least)
{
    return run_alone_on(alone_shapes, sizeof alone_shapes / sizeof alone_shapes[0], runner, tf32, least);
}

BN_TEST(conv_family_direct_alone_matches_the_cpu)
{
    return run_alone(bn_conv_family_number("direct"), 0, 24);
}

BN_TEST(conv_family_igemm_alone_matches_the_cpu)
{
    return run_alone(bn_conv_family_number("igemm"), 0, 24);
}

BN_TEST(conv_family_igemm_alone_matches_the_cpu_on_wide_layers)
{
    return run_alone_on(wide_shapes, sizeof wide_shapes / sizeof wide_shapes[0], bn_conv_family_number("igemm"), 0,
                        21);
}

BN_TEST(conv_family_igemm_alone_with_tf32_is_within_tf32s_tolerance)
{
    return run_alone_on(wide_shapes, sizeof wide_shapes / sizeof wide_shapes[0], bn_conv_family_number("igemm"), 1,
                        21);
}

/* Shapes for the halo kernels: resnet_fashion's 3x3 layers (many blocks, blocks across images),
 * widths that are not multiples of 4 or 8 (weights copied 4 bytes at a time, a last chunk of
 * fewer channels), padding 2 (the data pass unpadded), stride 2, more than 128 filters, a single
 * input channel, and images smaller than a block. */
static const shape_row halo_shapes[] = {
    {32, 28, 28, 3, 1, 1, 32, 5, 0}, {64, 14, 14, 3, 1, 1, 64, 6, 0}, {128, 7, 7, 3, 1, 1, 128, 4, 0},
    {48, 12, 12, 3, 1, 1, 96, 3, 0}, {13, 9, 11, 3, 1, 2, 20, 3, 0},  {30, 16, 16, 3, 2, 1, 36, 4, 0},
    {8, 5, 40, 3, 1, 0, 200, 2, 0},  {1, 28, 28, 3, 1, 1, 32, 4, 0},  {16, 3, 3, 3, 1, 1, 24, 7, 0},
};

BN_TEST(conv_family_halo_alone_matches_the_cpu)
{
    const int halo = bn_conv_family_number("halo");
    int r = run_alone(halo, 0, 7);
    if (r == BN_PASS) r = run_alone_on(wide_shapes, sizeof wide_shapes / sizeof wide_shapes[0], halo, 0, 10);
    if (r == BN_PASS) r = run_alone_on(halo_shapes, sizeof halo_shapes / sizeof halo_shapes[0], halo, 0, 26);
    return r;
}

BN_TEST(conv_family_halo_alone_with_tf32_is_within_tf32s_tolerance)
{
    return run_alone_on(halo_shapes, sizeof halo_shapes / sizeof halo_shapes[0], bn_conv_family_number("halo"), 1, 26);
}

/* Shapes for the Winograd kernels (3x3 at stride 1, 48 channels and filters or more): cifar10_resnet's
 * l1 (64 -> 128 at 32x32: the filter pass's rows the channels), padding 0 and 2, outputs whose tiles
 * reach past them, fewer than 64 filters (the forward pass's tiles of 64 x 256), more than 256
 * filters of a 4x4 image. */
static const shape_row wino_shapes[] = {
    {64, 32, 32, 3, 1, 1, 128, 3, 0}, {48, 9, 11, 3, 1, 0, 72, 5, 0}, {72, 7, 6, 3, 1, 2, 50, 4, 0},
    {200, 4, 4, 3, 1, 1, 264, 6, 0},
};

BN_TEST(conv_family_winograd_alone_matches_the_cpu)
{
    const int wino = bn_conv_family_number("winograd");
    int r = run_alone_on(wino_shapes, sizeof wino_shapes / sizeof wino_shapes[0], wino, 0, 12);
    if (r == BN_PASS) r = run_alone_on(halo_shapes, sizeof halo_shapes / sizeof halo_shapes[0], wino, 0, 9);
    return r;
}

BN_TEST(conv_family_winograd_alone_with_tf32_is_within_tf32s_tolerance)
{
    return run_alone_on(wino_shapes, sizeof wino_shapes / sizeof wino_shapes[0], bn_conv_family_number("winograd"), 1,
                        12);
}

/* Shapes whose plans for 132 multiprocessors take the narrower tiles (hl_tiles' last three), each
 * in the forward and the data pass: 192 positions of 32 channels, 96 of 64 and 48 of 128 (160
 * filters: a last tile of 32), all split but the 128-channel layer at 176 images.
 * conv_family_halo_takes_the_width_that_fills_the_multiprocessors_evenly holds the plans to those
 * tiles. */
static const shape_row narrower_shapes[] = {
    {32, 28, 28, 3, 1, 1, 32, 12, 0}, {64, 14, 14, 3, 1, 1, 64, 12, 0}, {128, 7, 7, 3, 1, 1, 128, 176, 0},
    {48, 12, 12, 3, 1, 1, 96, 20, 0}, {160, 7, 7, 3, 1, 1, 160, 30, 0},
};

BN_TEST(conv_family_halo_narrower_tiles_match_the_cpu)
{
    const int halo = bn_conv_family_number("halo");
    const size_t count = sizeof narrower_shapes / sizeof narrower_shapes[0];
    int r = run_alone_planned(narrower_shapes, count, halo, 0, 15, 132, 0);
    if (r == BN_PASS) r = run_alone_planned(narrower_shapes, count, halo, 1, 15, 132, 0);
    return r;
}

/* Of the tiles of a pass's rows of channels, the plan takes the width whose blocks share the
 * multiprocessors most evenly (the fewest positions times chunks on the fullest one), the widest
 * of equals: resnet_fashion's 3x3 layers at 64 images take the narrower tiles, and at 256 images
 * (whole waves either way) the first stage keeps its 256 positions. */
BN_TEST(conv_family_halo_takes_the_width_that_fills_the_multiprocessors_evenly)
{
    static const struct {
        shape_row shape;
        int bn[2]; /* the forward and data passes' tile widths */
    } cases[] = {
        {{32, 28, 28, 3, 1, 1, 32, 64, 0}, {192, 192}}, {{64, 14, 14, 3, 1, 1, 64, 64, 0}, {96, 96}},
        {{128, 7, 7, 3, 1, 1, 128, 64, 0}, {96, 48}},   {{32, 28, 28, 3, 1, 1, 32, 256, 0}, {256, 256}},
        {{32, 28, 28, 3, 1, 1, 32, 12, 0}, {192, 192}}, {{64, 14, 14, 3, 1, 1, 64, 12, 0}, {96, 96}},
        {{128, 7, 7, 3, 1, 1, 128, 176, 0}, {48, 48}},  {{48, 12, 12, 3, 1, 1, 96, 20, 0}, {96, 96}},
        {{160, 7, 7, 3, 1, 1, 160, 30, 0}, {48, 48}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const bn_conv_shape s = shape_of(&cases[i].shape, 132);
        bn_halo_plan p;
        bn_halo_plan_make(&p, &s.g, s.filters, s.n, s.sms, 0);
        for (int pass = 0; pass < 2; pass++) {
            CHECK_MSG(p.pass[pass].ok, "case %zu, pass %d: %s", i, pass, p.pass[pass].why);
            const int bn = bn_halo_tile_width(p.pass[pass].cfg);
            CHECK_MSG(bn == cases[i].bn[pass], "case %zu, pass %d: tiles of %d positions, expected %d", i, pass, bn,
                      cases[i].bn[pass]);
        }
    }
    return BN_PASS;
}

BN_TEST(conv_family_rows_alone_matches_the_cpu)
{
    return run_alone(bn_conv_family_number("rows"), 0, 18);
}

BN_TEST(conv_family_tensor_alone_matches_the_cpu)
{
    return run_alone(bn_conv_family_number("tensor"), 0, 20);
}

/* The forward pass two images a block: planned for 2 multiprocessors, every shape of more than 2
 * images takes them in pairs (5 and 3 images leave a last block one image and a slot idle), LeNet's
 * conv2 through its pooling among them. */
BN_TEST(conv_family_tensor_two_images_a_block_match_the_cpu)
{
    return run_alone_planned(alone_shapes, sizeof alone_shapes / sizeof alone_shapes[0],
                             bn_conv_family_number("tensor"), 0, 20, 2, 0);
}

/* The two backward passes in the shapes planned for running side by side (half the blocks a
 * multiprocessor holds of each): the alone shapes planned for 2 multiprocessors, where those of
 * more than 3 images take them, and LeNet's conv2 at batch 256 planned for an H200's 132, each
 * against the CPU. */
BN_TEST(conv_family_tensor_backward_passes_planned_beside_match_the_cpu)
{
    static const shape_row lenet[] = {{20, 12, 12, 5, 1, 0, 50, 256, 1}};
    const int tensor = bn_conv_family_number("tensor");
    const int r = run_alone_planned(alone_shapes, sizeof alone_shapes / sizeof alone_shapes[0], tensor, 0, 20, 2, 1);
    return r != BN_PASS ? r : run_alone_planned(lenet, 1, tensor, 0, 3, 132, 1);
}

/* The backward passes' shapes beside each other: LeNet's conv2 on 132 multiprocessors at batch 256
 * takes half the data pass's blocks (44 of 88 a channel tile) and half the filter pass's spans (32
 * of 64, so less workspace); at 64 images a block of the halved data pass would take fewer than
 * two, and with one TF32 product a multiply they do not pay, so there are none in either, and the
 * shapes beside are the usual ones. */
BN_TEST(conv_tensor_backward_plans_halve_their_blocks_beside_each_other)
{
    const bn_conv_geom g = {20, 12, 12, 5, 1, 0, 8, 8};
    bn_tensor_plan p;
    bn_tensor_plan_make(&p, &g, 50, 256, 132, 0);
    CHECK(p.data_ok && p.filter_ok && p.beside_ok);
    CHECK_MSG(p.data.blocks == 88 && p.data_beside.blocks == 44, "data blocks %d, beside %d", p.data.blocks,
              p.data_beside.blocks);
    CHECK_MSG(p.filter.spans == 64 && p.filter_beside.spans == 32, "filter spans %d, beside %d", p.filter.spans,
              p.filter_beside.spans);
    CHECK(p.filter_beside.workspace < p.workspace && p.data_beside.smem == p.data.smem);
    bn_tensor_plan_make(&p, &g, 50, 64, 132, 0);
    CHECK(p.data_ok && p.filter_ok && !p.beside_ok);
    CHECK(p.data_beside.blocks == p.data.blocks && p.filter_beside.spans == p.filter.spans);
    bn_tensor_plan_make(&p, &g, 50, 256, 132, 1);
    CHECK(p.data_ok && p.filter_ok && !p.beside_ok && p.data_beside.blocks == p.data.blocks);
    return BN_PASS;
}

/* The forward plan's images a block and its rounds of adding the warps' sums: LeNet's conv2 on an
 * H200's 132 multiprocessors at batch 256 (two images a block, 4 splits each, added in 2 rounds of
 * 2 slabs) and at 64 (an image's halves on 128 blocks, 15 splits, 7 slabs), and a batch no larger
 * than the multiprocessors. */
BN_TEST(conv_tensor_forward_plan_pairs_images_past_the_multiprocessors)
{
    const bn_conv_geom g = {20, 12, 12, 5, 1, 0, 8, 8};
    bn_tensor_plan p;
    bn_tensor_plan_make(&p, &g, 50, 256, 132, 0);
    CHECK(p.fwd_ok && p.fwd.pools);
    CHECK_MSG(p.fwd.ipi == 2 && p.fwd.mparts == 1 && p.fwd.splits == 4 && p.fwd.slabs == 2,
              "ipi %d, mparts %d, splits %d, slabs %d", p.fwd.ipi, p.fwd.mparts, p.fwd.splits, p.fwd.slabs);
    CHECK(p.fwd.threads == 32 * 2 * p.fwd.mper * 4 && p.fwd.blocks == 128 && p.fwd.smem <= 200 * 1024);
    bn_tensor_plan_make(&p, &g, 50, 64, 132, 0);
    CHECK_MSG(p.fwd.ipi == 1 && p.fwd.mparts == 2 && p.fwd.splits == 15 && p.fwd.slabs == 7,
              "ipi %d, mparts %d, splits %d, slabs %d", p.fwd.ipi, p.fwd.mparts, p.fwd.splits, p.fwd.slabs);
    CHECK(p.fwd.blocks == 128);
    bn_tensor_plan_make(&p, &g, 50, 132, 132, 0);
    CHECK(p.fwd_ok && p.fwd.ipi == 1);
    return BN_PASS;
}

BN_TEST(conv_family_tensor_alone_with_tf32_is_within_tf32s_tolerance)
{
    return run_alone(bn_conv_family_number("tensor"), 1, 20);
}

BN_TEST(conv_family_argmax_alone_matches_the_cpu_through_a_pooling)
{
    return run_alone(bn_conv_family_number("argmax"), 0, 4);
}

/* Shapes for the FP32 tiles' data pass: LeNet's conv2 through its pooling at 256 images (two a
 * block), filters in three staged chunks (130) with a last channel group of fewer channels (7 of
 * 5 a block), 400 and 224 positions of dy (the tiles of 64 and 32 rows), a 1x1 window of 150
 * channels (128 a block), a 7x7 window through a pooling of odd planes, and 312 blocks of 5 images
 * (more than a wave of 264). */
static const shape_row fma_shapes[] = {
    {20, 12, 12, 5, 1, 0, 50, 256, 1}, {7, 9, 9, 5, 1, 2, 130, 3, 0}, {4, 20, 20, 3, 1, 1, 6, 2, 0},
    {150, 6, 6, 1, 1, 0, 40, 5, 0},    {3, 16, 14, 7, 1, 3, 5, 3, 1},   {16, 10, 10, 3, 1, 1, 16, 257, 0},
};

BN_TEST(conv_family_fma_alone_matches_the_cpu)
{
    const int fma = bn_conv_family_number("fma");
    const int r = run_alone(fma, 0, 5);
    return r != BN_PASS ? r : run_alone_on(fma_shapes, sizeof fma_shapes / sizeof fma_shapes[0], fma, 0, 6);
}

/* The FP32 tiles' plan: the tile shape of the fewest waves (then the most useful cells), the
 * channels a block by the window, the images a block by dy's positions, filters staged in chunks
 * that fit beside the tile's rows and positions in 64 KiB. */
BN_TEST(conv_fma_plan_takes_the_tile_of_the_fewest_waves)
{
    static const struct {
        bn_conv_geom g;
        int filters, n;
        int wr, cb, groups, ib, blocks, fc;
    } cases[] = {
        /* LeNet's conv2 at 256: 4 groups of 5 channels (125 of 128 rows) by 128 pairs of images. */
        {{20, 12, 12, 5, 1, 0, 8, 8}, 50, 256, 4, 5, 4, 2, 128, 50},
        /* 14x14 of dy (196 positions): only the tiles of 256 or 512 positions hold an image. */
        {{16, 16, 16, 3, 1, 0, 14, 14}, 32, 64, 2, 7, 3, 1, 64, 32},
        /* 20x20 (400): the tiles of 512 positions alone; 130 filters in chunks of 30. */
        {{4, 20, 20, 3, 1, 1, 20, 20}, 130, 8, 1, 3, 2, 1, 8, 30},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        bn_fma_plan p;
        bn_fma_plan_make(&p, &cases[i].g, cases[i].filters, cases[i].n, 132);
        const bn_fma_data *d = &p.data;
        CHECK_MSG(p.data_ok && d->wr == cases[i].wr && d->cb == cases[i].cb && d->groups == cases[i].groups &&
                      d->ib == cases[i].ib && d->blocks == cases[i].blocks && d->fc == cases[i].fc,
                  "case %zu: wr %d, cb %d, groups %d, ib %d, blocks %d, fc %d", i, d->wr, d->cb, d->groups, d->ib,
                  d->blocks, d->fc);
        CHECK(d->smem == 64 * 1024 && d->rm == 32 * d->wr && d->pn * d->wr == 512);
        CHECK((size_t)d->fc * (d->rm + d->pn) * sizeof(float) <= d->smem);
    }
    /* 24x24 of dy (576 positions) is past every tile. */
    const bn_conv_geom big = {1, 28, 28, 5, 1, 0, 24, 24};
    bn_fma_plan p;
    bn_fma_plan_make(&p, &big, 20, 64, 132);
    CHECK(!p.data_ok);
    return BN_PASS;
}

BN_TEST(conv_cudnn_alone_matches_the_cpu)
{
    return run_alone(BN_CONV_ALONE_CUDNN, 0, 24);
}
