/* test_image_fit.c - bn_image_fit: the shape it keeps byte for byte, hand-worked values for
 * shrinking, enlarging and cropping, flat colours that survive any scale, agreement with a
 * floating-point reference on odd ratios, and the channel conversions. */
#include "testing.h"

#include <stdlib.h>

#include "io/image_fit.h"

static unsigned next_byte(unsigned *state) { return (*state = *state * 1103515245u + 12345u) >> 16 & 255; }

BN_TEST(image_fit_keeps_an_image_of_the_target_shape_byte_for_byte)
{
    enum { W = 7, H = 5 };
    unsigned char px[W * H * 3], out[W * H * 3];
    unsigned state = 7;
    for (int i = 0; i < W * H * 3; i++) px[i] = (unsigned char)next_byte(&state);
    bn_image img = {.width = W, .height = H, .channels = 3, .pixels = px};
    CHECK_OK(bn_image_fit(&img, 3, H, W, out));
    /* Interleaved in, planes out. */
    for (int c = 0; c < 3; c++)
        for (int p = 0; p < W * H; p++) CHECK(out[c * W * H + p] == px[3 * p + c]);
    return BN_PASS;
}

BN_TEST(image_fit_hand_worked_shrink_enlarge_and_crop)
{
    /* 4 wide, 2 high into 1x1: scaled by 1/2 to 2x1, the left 2x2 block averaged:
     * (10 + 20 + 30 + 41) / 4 = 25.25. */
    unsigned char wide[] = {10, 20, 200, 200, 30, 41, 200, 200}, out[16];
    bn_image img = {.width = 4, .height = 2, .channels = 1, .pixels = wide};
    CHECK_OK(bn_image_fit(&img, 1, 1, 1, out));
    CHECK_MSG(out[0] == 25, "%d", out[0]);
    /* 2 wide, 6 high into 2x2: no scaling, rows 2 and 3 are the centre. */
    unsigned char tall[12];
    for (int i = 0; i < 12; i++) tall[i] = (unsigned char)(i * 10);
    img = (bn_image){.width = 2, .height = 6, .channels = 1, .pixels = tall};
    CHECK_OK(bn_image_fit(&img, 1, 2, 2, out));
    CHECK(out[0] == 40 && out[1] == 50 && out[2] == 60 && out[3] == 70);
    /* Black and white side by side into 4x4: scaled by 4 to 8x4 and the middle 4 columns kept,
     * whose centres fall 1/8, 3/8, 5/8 and 7/8 of the way from the black pixel to the white:
     * 31.9, 95.6, 159.4, 223.1, the same on every row. */
    unsigned char pair[] = {0, 255};
    img = (bn_image){.width = 2, .height = 1, .channels = 1, .pixels = pair};
    CHECK_OK(bn_image_fit(&img, 1, 4, 4, out));
    const unsigned char ramp[] = {32, 96, 159, 223};
    for (int i = 0; i < 16; i++) CHECK_MSG(out[i] == ramp[i % 4], "pixel %d: %d", i, out[i]);
    /* 3 wide, 2 high into 2x2: the scale is max(2/2, 2/3) = 1, nothing is resampled, and the
     * crop keeps columns 0 and 1 (the odd column of margin goes at the end). */
    unsigned char three[] = {1, 2, 3, 4, 5, 6};
    img = (bn_image){.width = 3, .height = 2, .channels = 1, .pixels = three};
    CHECK_OK(bn_image_fit(&img, 1, 2, 2, out));
    CHECK(out[0] == 1 && out[1] == 2 && out[2] == 4 && out[3] == 5);
    return BN_PASS;
}

BN_TEST(image_fit_keeps_a_flat_colour_at_any_scale)
{
    static const int shapes[][4] = {{1, 1, 32, 32}, {640, 480, 32, 32}, {3, 97, 28, 28}, {97, 3, 5, 9},
                                    {33, 17, 64, 48}, {1000, 1, 8, 8}, {13, 13, 13, 14}};
    static unsigned char px[640 * 480 * 3], out[64 * 64 * 3];
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int w = shapes[s][0], h = shapes[s][1], th = shapes[s][2], tw = shapes[s][3];
        for (int i = 0; i < w * h; i++) px[3 * i] = 3, px[3 * i + 1] = 128, px[3 * i + 2] = 255;
        bn_image img = {.width = w, .height = h, .channels = 3, .pixels = px};
        CHECK_OK(bn_image_fit(&img, 3, th, tw, out));
        for (int i = 0; i < th * tw; i++)
            CHECK_MSG(out[i] == 3 && out[th * tw + i] == 128 && out[2 * th * tw + i] == 255,
                      "%dx%d into %dx%d: pixel %d is %d,%d,%d", w, h, tw, th, i, out[i], out[th * tw + i],
                      out[2 * th * tw + i]);
    }
    return BN_PASS;
}

/* The reference in doubles: each axis's weights from the same definitions (the area an output
 * covers; the centre's position between two pixels). */
static void reference_weights(int n_in, long n_res, long off, int n_out, double *wt /* n_out x n_in */)
{
    for (int k = 0; k < n_out; k++) {
        double *row = wt + (size_t)k * n_in, j = (double)(off + k);
        for (int i = 0; i < n_in; i++) row[i] = 0;
        if (n_res <= n_in) {
            double lo = j * n_in / n_res, hi = (j + 1) * n_in / n_res;
            for (int i = 0; i < n_in; i++) {
                double a = lo > i ? lo : i, b = hi < i + 1 ? hi : i + 1;
                if (b > a) row[i] = (b - a) / (hi - lo);
            }
        } else {
            double x = (j + 0.5) * n_in / n_res - 0.5;
            if (x < 0) x = 0;
            int i0 = (int)x, i1 = i0 + 1 < n_in ? i0 + 1 : n_in - 1;
            row[i0] += 1 - (x - i0);
            row[i1] += x - i0;
        }
    }
}

BN_TEST(image_fit_agrees_with_a_floating_point_reference)
{
    static const int shapes[][4] = {{37, 23, 7, 10}, {23, 37, 10, 7}, {5, 3, 17, 29}, {300, 41, 16, 16},
                                    {9, 11, 20, 20}};
    static unsigned char px[300 * 41], out[32 * 32];
    static double wy[32 * 300], wx[32 * 300];
    unsigned state = 99;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int w = shapes[s][0], h = shapes[s][1], th = shapes[s][2], tw = shapes[s][3];
        for (int i = 0; i < w * h; i++) px[i] = (unsigned char)next_byte(&state);
        bn_image img = {.width = w, .height = h, .channels = 1, .pixels = px};
        CHECK_OK(bn_image_fit(&img, 1, th, tw, out));
        long rh, rw;
        if ((long)th * w >= (long)tw * h) rh = th, rw = (2L * w * th + h) / (2L * h);
        else rw = tw, rh = (2L * h * tw + w) / (2L * w);
        reference_weights(h, rh, (rh - th) / 2, th, wy);
        reference_weights(w, rw, (rw - tw) / 2, tw, wx);
        for (int y = 0; y < th; y++)
            for (int x = 0; x < tw; x++) {
                double v = 0;
                for (int i = 0; i < h; i++)
                    for (int k = 0; k < w; k++) v += wy[y * h + i] * wx[x * w + k] * px[i * w + k];
                /* Rounded once from the exact sum: within half a level, plus what positions to
                 * 1/65536 of a pixel can move a bilinear output (255/131072). */
                CHECK_MSG(fabs(out[y * tw + x] - v) <= 0.5 + 0.002, "%dx%d into %dx%d: (%d,%d) is %d, reference %.4f",
                          w, h, tw, th, x, y, out[y * tw + x], v);
            }
    }
    return BN_PASS;
}

BN_TEST(image_fit_converts_gray_and_colour)
{
    unsigned char gray[] = {0, 100, 200, 255}, rgb[] = {255, 0, 0, 0, 255, 0, 0, 0, 255, 10, 20, 30}, out[12];
    bn_image img = {.width = 2, .height = 2, .channels = 1, .pixels = gray};
    CHECK_OK(bn_image_fit(&img, 3, 2, 2, out));
    for (int c = 0; c < 3; c++) CHECK(memcmp(out + 4 * c, gray, 4) == 0);
    img = (bn_image){.width = 2, .height = 2, .channels = 3, .pixels = rgb};
    CHECK_OK(bn_image_fit(&img, 1, 2, 2, out));
    for (int i = 0; i < 4; i++) CHECK(out[i] == bn_image_luminance(rgb[3 * i], rgb[3 * i + 1], rgb[3 * i + 2]));
    CHECK_ERR(bn_image_fit(&img, 2, 2, 2, out), BN_ERR_USAGE, "into 2x2x2");
    CHECK_ERR(bn_image_fit(&img, 1, 0, 2, out), BN_ERR_USAGE, "cannot fit");
    return BN_PASS;
}
