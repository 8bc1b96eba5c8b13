/* image_fit.h - fitting an image of any size and shape into a model's input: scaled until it
 * covers the input, then cropped to its centre. The folder dataset format and `blobnet predict`
 * (for models that are not MNIST's 28x28 gray) both fit their images with it, so a model sees
 * at prediction what it saw in training. */
#ifndef BN_IMAGE_FIT_H
#define BN_IMAGE_FIT_H

#include "image.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Fits in (gray or RGB, any size) into caller-owned out_nchw[channels*height*width], the
 * channels one plane after another (NCHW):
 *   1. channels (1 or 3): gray is replicated into RGB, RGB made gray by bn_image_luminance;
 *   2. scale by s = max(height/h, width/w), so that the image covers the target: one side
 *      becomes the target's exactly, the other round(side * s), at least the target's;
 *   3. crop the centre height x width (an odd margin leaves its extra pixel at the end).
 * Each axis is resampled on its own: where it shrinks, by area averaging (an output pixel is
 * the mean of the input it covers, pixels it covers in part weighted by their share); where
 * it grows, bilinearly (pixel centres aligned, edges repeated, positions to 1/65536 of a
 * pixel); where it keeps its size, 1:1, so an image already of the target's shape comes back
 * byte for byte. The weights are integers and each output is rounded once from their exact
 * sum: the same bytes on every machine. Errors (a usage error for bad shapes, BN_ERR_DATA
 * for an image too thin to scale, BN_ERR_NOMEM) do not name a file: the caller adds it. */
bn_status bn_image_fit(const bn_image *in, int channels, int height, int width, unsigned char *out_nchw);

/* bn_image_fit of the image read from path, an error naming path. */
bn_status bn_image_fit_from(const char *path, const bn_image *in, int channels, int height, int width,
                            unsigned char *out_nchw);

#ifdef __cplusplus
}
#endif
#endif
