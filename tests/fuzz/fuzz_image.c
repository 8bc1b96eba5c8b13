/* fuzz_image.c - libFuzzer target for the image path of `blobnet predict` (src/io/image.c with
 * libpng under it, src/io/digit.c, and a forward pass): byte 0's lowest bit says --invert, the
 * rest is the image file, PNG or PGM. An image that reads is inverted when asked, checked as
 * predict checks it, fitted into a 28x28 field and classified by a small network; its class
 * probabilities must be finite and sum to 1. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "fuzz_common.h"
#include "io/digit.h"
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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    if (!net && (bn_net_from_text(MODEL, "fuzz.cfg", &net) != BN_OK || bn_net_setup(net, 1, NULL, 0, 1) != BN_OK))
        abort();
    int invert = data[0] & 1;
    char path[600];
    fuzz_write(fuzz_path(path, sizeof path, "image"), data + 1, size - 1);
    bn_image img;
    if (bn_image_read(path, invert ? 255 : 0, &img) != BN_OK) return 0;
    if (img.width <= 0 || img.height <= 0 || (long)img.width * img.height > BN_IMAGE_MAX_PIXELS) abort();
    if (invert) bn_image_invert(&img);
    int background = bn_digit_background(&img), blank = bn_digit_blank(&img);
    if (background < 0 || background > 255 || (blank && background != img.pixels[0])) abort();
    unsigned char field[SIDE * SIDE];
    if (bn_digit_fit(&img, SIDE, field) == BN_OK) classify(field);
    bn_image_free(&img);
    return 0;
}
