/* test_digit.c - MNIST-style fitting: crop, scale, centre of mass, background removal, and
 * identity on MNIST's own digits. */
#include "testing.h"

#include <stdlib.h>

#include "idx.h"
#include "io/digit.h"

#define SIDE 28

/* A w x h black image with a filled rectangle of value v at (x0, y0), size rw x rh. */
static bn_image rect_image(int w, int h, int x0, int y0, int rw, int rh, int bg, int v)
{
    bn_image img = {.width = w, .height = h, .pixels = malloc((size_t)w * h)};
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            int inside = x >= x0 && x < x0 + rw && y >= y0 && y < y0 + rh;
            img.pixels[y * w + x] = (unsigned char)(inside ? v : bg);
        }
    return img;
}

/* out is exactly a rectangle of 255 at rows r0..r0+rh, columns c0..c0+cw, black elsewhere. */
static int check_rect(const unsigned char *out, int r0, int c0, int rh, int cw)
{
    for (int y = 0; y < SIDE; y++)
        for (int x = 0; x < SIDE; x++) {
            int inside = y >= r0 && y < r0 + rh && x >= c0 && x < c0 + cw;
            CHECK_MSG(out[y * SIDE + x] == (inside ? 255 : 0), "pixel (%d,%d) is %d", y, x, out[y * SIDE + x]);
        }
    return BN_PASS;
}

BN_TEST(digit_fit_scales_the_longer_side_to_20_and_centres_the_mass)
{
    unsigned char out[SIDE * SIDE];
    /* 100 wide, 50 tall at (37, 81) of 300x200: scaled by 1/5 to 20x10. The mass centre of a
     * uniform 20x10 patch is (row 4.5, column 9.5), so it lands at row round(14 - 4.5) = 10
     * (halves round up) and column round(14 - 9.5) = 5. */
    bn_image img = rect_image(300, 200, 37, 81, 100, 50, 0, 255);
    CHECK_OK(bn_digit_fit(&img, SIDE, out));
    bn_image_free(&img);
    if (check_rect(out, 10, 5, 10, 20) != BN_PASS) return BN_FAIL;
    /* A small 5x5 square is scaled up to 20x20, at round(14 - 9.5) = 5 both ways. */
    img = rect_image(9, 9, 2, 3, 5, 5, 0, 255);
    CHECK_OK(bn_digit_fit(&img, SIDE, out));
    bn_image_free(&img);
    if (check_rect(out, 5, 5, 20, 20) != BN_PASS) return BN_FAIL;
    /* A thin line 200 x 10 keeps its aspect ratio: 20 x 1. */
    img = rect_image(400, 40, 100, 15, 200, 10, 0, 255);
    CHECK_OK(bn_digit_fit(&img, SIDE, out));
    bn_image_free(&img);
    return check_rect(out, 14, 5, 1, 20);
}

BN_TEST(digit_fit_area_averages_when_shrinking)
{
    /* A 40x40 one-pixel checkerboard (on black) is halved: each output pixel averages two white and two
     * black pixels, 127.5, rounded to 128; the two corners lit to span the bounding box make
     * three of four white there, 191.25 -> 191. */
    bn_image img = rect_image(100, 100, 0, 0, 0, 0, 0, 0);
    for (int y = 0; y < 40; y++)
        for (int x = 0; x < 40; x++) img.pixels[(30 + y) * 100 + 30 + x] = (unsigned char)((x + y) % 2 ? 255 : 0);
    img.pixels[30 * 100 + 30] = 255;
    img.pixels[69 * 100 + 69] = 255;
    unsigned char out[SIDE * SIDE];
    CHECK_OK(bn_digit_fit(&img, SIDE, out));
    bn_image_free(&img);
    int mid = 0, corner = 0, black = 0;
    for (int i = 0; i < SIDE * SIDE; i++) {
        mid += out[i] == 128;
        corner += out[i] == 191;
        black += out[i] == 0;
    }
    CHECK_MSG(mid == 398 && corner == 2 && black == SIDE * SIDE - 400, "%d at 128, %d at 191, %d black", mid, corner,
              black);
    return BN_PASS;
}

BN_TEST(digit_fit_removes_a_paper_background)
{
    unsigned char clean[SIDE * SIDE], photo[SIDE * SIDE];
    bn_image img = rect_image(120, 90, 20, 10, 40, 60, 0, 255);
    CHECK_OK(bn_digit_fit(&img, SIDE, clean));
    bn_image_free(&img);
    /* The same digit on gray paper (55, as inverted light paper is), with specks of noise
     * below 1/8 of the ink's height above the paper. */
    img = rect_image(120, 90, 20, 10, 40, 60, 55, 255);
    img.pixels[5 * 120 + 100] = 70;
    img.pixels[80 * 120 + 3] = 75;
    CHECK_OK(bn_digit_fit(&img, SIDE, photo));
    bn_image_free(&img);
    CHECK(memcmp(clean, photo, sizeof clean) == 0);
    /* A dim digit is stretched to full brightness. */
    img = rect_image(120, 90, 20, 10, 40, 60, 30, 130);
    CHECK_OK(bn_digit_fit(&img, SIDE, photo));
    bn_image_free(&img);
    CHECK(memcmp(clean, photo, sizeof clean) == 0);
    return BN_PASS;
}

BN_TEST(digit_fit_refuses_blank_images)
{
    unsigned char out[SIDE * SIDE];
    bn_image img = rect_image(30, 30, 0, 0, 0, 0, 0, 0);
    CHECK_ERR(bn_digit_fit(&img, SIDE, out), BN_ERR_DATA, "no digit");
    /* All white: a dark-on-light image that was not inverted has no ink above the paper. */
    memset(img.pixels, 255, 900);
    CHECK_ERR(bn_digit_fit(&img, SIDE, out), BN_ERR_DATA, "no digit");
    bn_image_free(&img);
    return BN_PASS;
}

/* MNIST's digits are what the fitting makes: all but 4 of the 10,000 test digits come back
 * byte for byte (3 have a bounding box shorter than 20, one centres differently). */
BN_TEST(digit_fit_is_identity_on_mnist_test_digits)
{
    if (!bn_test_data_dir()) BN_SKIP_TEST("BLOBNET_TEST_DATA not set");
    bn_dataset d;
    CHECK_OK(bn_dataset_load(bn_test_data_dir(), 0, 0, &d));
    int same = 0;
    unsigned char out[SIDE * SIDE];
    for (int i = 0; i < d.count; i++) {
        bn_image img = {.width = SIDE, .height = SIDE, .pixels = d.pixels + (size_t)i * SIDE * SIDE};
        CHECK_OK(bn_digit_fit(&img, SIDE, out));
        same += memcmp(out, img.pixels, sizeof out) == 0;
    }
    bn_dataset_free(&d);
    printf("    %d of 10000 MNIST test digits are unchanged by the fitting\n", same);
    CHECK_MSG(same == 9996, "%d unchanged", same);
    return BN_PASS;
}
