/* fuzz_image.c - libFuzzer target for the image paths of `blobnet predict` (src/io/image.c with
 * libpng and libjpeg under it, src/io/digit.c, src/io/image_fit.c, and a forward pass). Byte 0
 * chooses the path, the rest is the image file (PNG, PGM, PPM or JPEG):
 *   bit 1 clear: a digit, inverted when bit 0 is set, read as gray, checked as predict checks
 *                it and fitted into a 28x28 field;
 *   bit 1 set:   a picture, read as RGB (or as it is, bit 2), fitted with bn_image_fit into
 *                3x12x20 and into the 28x28 field.
 * The field is classified by a small network, whose class probabilities must be finite and
 * sum to 1. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "fuzz_common.h"
#include "io/digit.h"
#include "io/image_fit.h"
#include "train/evaluate.h"

#define SIDE 28
#define MODEL "[input]\nchannels=1\nheight=28\nwidth=28\nmean=0.1307\nstd=0.3081\n" \
              "[conv2d]\nfilters=2\nsize=5\nstride=3\n[relu]\n[dense]\noutputs=10\n[softmax_ce]\n"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static bn_net *net;

static void classify(unsigned char *field)
{
    uint16_t label = 0;
    bn_dataset one = {.channels = 1, .height = SIDE, .width = SIDE, .count = 1, .num_classes = 10,
                      .pixels = field, .labels = &label};
    float p[10];
    if (bn_evaluate_each(net, &one, p, NULL, NULL, NULL) != BN_OK) abort();
    double sum = 0;
    for (int c = 0; c < 10; c++) {
        if (!isfinite(p[c]) || p[c] < 0) abort();
        sum += p[c];
    }
    if (fabs(sum - 1) > 1e-4) abort();
}

static int shape_ok(const bn_image *img)
{
    return img->width > 0 && img->height > 0 && (long)img->width * img->height <= BN_IMAGE_MAX_PIXELS;
}

static void digit(const char *path, int invert)
{
    bn_image img;
    if (bn_image_read(path, invert ? 255 : 0, &img) != BN_OK) return;
    if (!shape_ok(&img) || img.channels != 1) abort();
    if (invert) bn_image_invert(&img);
    int background = bn_digit_background(&img), blank = bn_digit_blank(&img);
    if (background < 0 || background > 255 || (blank && background != img.pixels[0])) abort();
    unsigned char field[SIDE * SIDE];
    if (bn_digit_fit(&img, SIDE, field) == BN_OK) classify(field);
    bn_image_free(&img);
}

/* Fitting fails only for want of memory: every image that reads has a shape it can scale. */
static void picture(const char *path, int as_is)
{
    bn_image img;
    if (bn_image_read_color(path, as_is ? 0 : 3, &img) != BN_OK) return;
    if (!shape_ok(&img) || (img.channels != 3 && !(as_is && img.channels == 1))) abort();
    static unsigned char colour[3 * 12 * 20], field[SIDE * SIDE];
    bn_status s = bn_image_fit(&img, 3, 12, 20, colour);
    if (s == BN_OK) s = bn_image_fit(&img, 1, SIDE, SIDE, field);
    if (s != BN_OK && s != BN_ERR_NOMEM) abort();
    if (s == BN_OK) classify(field);
    bn_image_free(&img);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    if (!net && (bn_net_from_text(MODEL, "fuzz.cfg", &net) != BN_OK || bn_net_setup(net, 1, NULL, 0, 1) != BN_OK))
        abort();
    char path[600];
    fuzz_write(fuzz_path(path, sizeof path, "image"), data + 1, size - 1);
    if (data[0] & 2) picture(path, data[0] & 4);
    else digit(path, data[0] & 1);
    return 0;
}
