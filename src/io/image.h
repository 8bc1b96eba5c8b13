/* image.h - grayscale images: reading PNG and PGM files into 8-bit gray, writing PNG. */
#ifndef BN_IMAGE_H
#define BN_IMAGE_H

#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Images larger than this many pixels are refused rather than allocated. */
#define BN_IMAGE_MAX_PIXELS (1L << 26)

typedef struct bn_image {
    int width, height;
    unsigned char *pixels;   /* width*height gray values, row-major; owned by the image */
} bn_image;

/* Reads a PNG (any colour type and bit depth, interlaced or not) or a PGM (P5 binary or P2
 * ASCII, maxval up to 65535), told apart by the file's first bytes, as 8-bit gray: colour
 * becomes luminance, deeper samples are scaled to 0..255, and transparent pixels are
 * composited over the gray level `background` (0 black .. 255 white). *out is owned by the
 * caller (bn_image_free) and zeroed on error; every error message starts with path. */
bn_status bn_image_read(const char *path, int background, bn_image *out);

/* Writes width*height 8-bit gray pixels (row-major) to path as a PNG file. */
bn_status bn_image_write_png(const char *path, const unsigned char *pixels, int width, int height);

/* Turns a dark-on-light image into light-on-dark: every value v becomes 255 - v. */
void bn_image_invert(bn_image *img);

/* Frees the pixels and zeroes the image; safe on a zeroed image. */
void bn_image_free(bn_image *img);

#ifdef __cplusplus
}
#endif
#endif
