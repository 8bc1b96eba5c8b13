/* image.h - reading PNG, PGM/PPM and JPEG files into 8-bit gray or RGB, writing PNG. */
#ifndef BN_IMAGE_H
#define BN_IMAGE_H

#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Images larger than this many pixels are refused rather than allocated. */
#define BN_IMAGE_MAX_PIXELS (1L << 26)

/* Pixels are interleaved, as every decoder gives them: row by row, each pixel's channels side
 * by side (R, G, B), height*width*channels bytes. bn_image_fit turns them into planes (NCHW). */
typedef struct bn_image {
    int width, height;
    int channels;            /* 1 (gray) or 3 (RGB); 0, in an image filled by hand, counts as 1 */
    unsigned char *pixels;   /* owned by the image */
} bn_image;

/* Reads a PNG (any colour type and bit depth, interlaced or not), a PGM (P5 binary or P2
 * ASCII, maxval up to 65535), a PPM (P6 or P3, likewise) or a JPEG (baseline or progressive;
 * gray, YCbCr, RGB, CMYK or YCCK), told apart by the file's first bytes, as 8-bit gray:
 * colour becomes luminance (bn_image_luminance; for PNG, libpng's rgb_to_gray with the same
 * weights), deeper samples are scaled to 0..255, and transparent pixels are composited over
 * the gray level `background` (0 black .. 255 white). *out is owned by the caller
 * (bn_image_free) and zeroed on error; every error message starts with path. */
bn_status bn_image_read(const char *path, int background, bn_image *out);

/* The same with `channels` per pixel: 1 (gray, as bn_image_read), 3 (RGB: gray replicated),
 * or 0 (as the file is: 1 when it holds gray only, 3 when it holds colour, a palette
 * included). Transparent pixels are composited over black. */
bn_status bn_image_read_color(const char *path, int channels, bn_image *out);

/* The gray level of an RGB pixel: ITU-R BT.709 weights in 15-bit fixed point, truncated,
 * which is what libpng's rgb_to_gray computes for 8-bit samples with its default weights, so
 * every format and conversion gives the gray a PNG would. */
static inline unsigned char bn_image_luminance(unsigned r, unsigned g, unsigned b)
{
    return (unsigned char)((6968u * r + 23434u * g + 2366u * b) >> 15);
}

/* For decoders, from an image's header before anything is allocated: an error starting with
 * path for an empty image or one past BN_IMAGE_MAX_PIXELS. */
bn_status bn_image_check_size(const char *path, unsigned long width, unsigned long height);

/* Writes width*height 8-bit gray pixels (row-major) to path as a PNG file. */
bn_status bn_image_write_png(const char *path, const unsigned char *pixels, int width, int height);

/* Writes width*height pixels of `channels` (1 gray, 3 RGB) interleaved bytes to path as a PNG
 * file; a file that could not be written whole is removed. */
bn_status bn_image_write_png_color(const char *path, const unsigned char *pixels, int channels, int width,
                                   int height);

/* Turns a dark-on-light image into light-on-dark: every value v becomes 255 - v. */
void bn_image_invert(bn_image *img);

/* Frees the pixels and zeroes the image; safe on a zeroed image. */
void bn_image_free(bn_image *img);

#ifdef __cplusplus
}
#endif
#endif
