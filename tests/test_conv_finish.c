/* test_conv_finish.c - the filter passes' finishing sum (bn_direct_finish_filter, conv_direct.cu),
 * which every family with partial sums ends with: each span's partials added once into dw and
 * db on top of what they held, the same bits whether the partials are read 16 bytes at a time
 * or one float at a time, both for a small gradient with many spans (its own rows of threads,
 * LeNet's conv1 at 256) and for larger gradients or fewer spans. GPU; skipped without one. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "conv2d/conv_direct.h"
#include "core/device.h"
#include "testing.h"

#ifdef BN_WITH_CUDA
/* A value in [-1, 1) from a counter, the same on every machine. */
static float value_at(unsigned i)
{
    i = i * 2654435761u + 12345u;
    i ^= i >> 15;
    i *= 2246822519u;
    i ^= i >> 13;
    return (float)(i % 2000001u) / 1000000.0f - 1.0f;
}

/* Runs the finishing sum of `splits` spans of filters x (taps + 1) partials on the device, the
 * partials `offset` floats into their buffer (1: one float at a time), into dw and db that start
 * from known values; the results into dw_out and db_out. */
static int finish_on_device(int splits, int filters, int taps, int offset, float *dw_out, float *db_out)
{
    const size_t count = (size_t)filters * (taps + 1), pcount = (size_t)splits * count;
    float *parts = malloc((pcount + offset) * sizeof(float));
    CHECK(parts != NULL);
    for (size_t i = 0; i < pcount; i++) parts[offset + i] = value_at((unsigned)i);
    for (size_t i = 0; i < (size_t)filters * taps; i++) dw_out[i] = value_at((unsigned)(pcount + i));
    for (int i = 0; i < filters; i++) db_out[i] = value_at((unsigned)(2 * pcount + i));
    void *dparts = NULL, *ddw = NULL, *ddb = NULL;
    bn_ctx *ctx; /* the device's context, which its memory needs: run alone, no earlier test opened it */
    CHECK_OK(bn_ctx_open(0, &ctx));
    CHECK_OK(bn_device_alloc(&dparts, (pcount + offset) * sizeof(float)));
    CHECK_OK(bn_device_alloc(&ddw, (size_t)filters * taps * sizeof(float)));
    CHECK_OK(bn_device_alloc(&ddb, (size_t)filters * sizeof(float)));
    CHECK_OK(bn_device_h2d(dparts, parts, (pcount + offset) * sizeof(float)));
    CHECK_OK(bn_device_h2d(ddw, dw_out, (size_t)filters * taps * sizeof(float)));
    CHECK_OK(bn_device_h2d(ddb, db_out, (size_t)filters * sizeof(float)));
    CHECK_OK(bn_direct_finish_filter(NULL, (const float *)dparts + offset, splits, filters, taps, ddw, ddb));
    CHECK_OK(bn_device_sync());
    CHECK_OK(bn_device_d2h(dw_out, ddw, (size_t)filters * taps * sizeof(float)));
    CHECK_OK(bn_device_d2h(db_out, ddb, (size_t)filters * sizeof(float)));
    bn_device_free(dparts);
    bn_device_free(ddw);
    bn_device_free(ddb);
    free(parts);
    return BN_PASS;
}

/* Both alignments against a double-precision sum of the same partials, and against each other
 * bit for bit. */
static int finish_matches(int splits, int filters, int taps)
{
    const size_t count = (size_t)filters * (taps + 1), pcount = (size_t)splits * count;
    float *dw_wide = malloc((size_t)filters * taps * sizeof(float)), *db_wide = malloc((size_t)filters * sizeof(float));
    float *dw_one = malloc((size_t)filters * taps * sizeof(float)), *db_one = malloc((size_t)filters * sizeof(float));
    CHECK(dw_wide && db_wide && dw_one && db_one);
    if (finish_on_device(splits, filters, taps, 0, dw_wide, db_wide) != BN_PASS) return BN_FAIL;
    if (finish_on_device(splits, filters, taps, 1, dw_one, db_one) != BN_PASS) return BN_FAIL;
    double worst = 0.0;
    for (size_t i = 0; i < count; i++) {
        double want = value_at((unsigned)(i < (size_t)filters * taps ? pcount + i : 2 * pcount + i - filters * taps));
        for (int z = 0; z < splits; z++) want += value_at((unsigned)((size_t)z * count + i));
        const int is_w = i < (size_t)filters * taps;
        const float got = is_w ? dw_wide[i] : db_wide[i - (size_t)filters * taps];
        const float got_one = is_w ? dw_one[i] : db_one[i - (size_t)filters * taps];
        CHECK_MSG(memcmp(&got, &got_one, sizeof got) == 0, "element %zu of %zu: %.9g with 16-byte loads, %.9g without",
                  i, count, got, got_one);
        const double err = fabs(got - want);
        if (err > worst) worst = err;
    }
    /* Each sum adds `splits` values of magnitude below 1 in FP32: its rounding stays below
     * splits * 2^-24 * splits. */
    CHECK_MSG(worst <= (double)splits * splits * 6e-8 + 1e-6, "%d spans of %d x %d: error %.3g", splits, filters,
              taps + 1, worst);
    free(dw_wide), free(db_wide), free(dw_one), free(db_one);
    return BN_PASS;
}

/* finish_matches on each (spans, filters, taps) of cases. */
static int finish_all(const int (*cases)[3], int n)
{
    if (bn_device_count() == 0) BN_SKIP_TEST("no CUDA device");
    for (int i = 0; i < n; i++)
        if (finish_matches(cases[i][0], cases[i][1], cases[i][2]) != BN_PASS) return BN_FAIL;
    return BN_PASS;
}

/* LeNet's conv1 at batch 256 through the argmax family (256 spans of 20 x 26), spans that do not
 * fill the rows' last round, and the fewest spans that take the small gradient's rows. */
static const int small_cases[][3] = {{256, 20, 25}, {130, 8, 9}, {128, 3, 3}};
/* LeNet's conv2 (50 x 501, 33 spans), a gradient past the small one's size with many spans, and
 * a small one with too few spans for its rows (LeNet's conv1 at batch 64). */
static const int large_cases[][3] = {{33, 50, 500}, {130, 64, 288}, {64, 20, 25}};

#define FINISH_CASES(cases) return finish_all(cases, (int)(sizeof cases / sizeof cases[0]))
#else
#define FINISH_CASES(cases) BN_SKIP_TEST("a build without CUDA")
#endif

BN_TEST(conv_finish_adds_every_span_of_a_small_gradient_once)
{
    FINISH_CASES(small_cases);
}

BN_TEST(conv_finish_adds_every_span_of_a_large_gradient_once)
{
    FINISH_CASES(large_cases);
}
