/* image_jpeg.h - the JPEG decoder behind bn_image_read (image.c): libjpeg-turbo, or in a build
 * without it (BN_NO_JPEG) an error that says so. */
#ifndef BN_IMAGE_JPEG_H
#define BN_IMAGE_JPEG_H

#include <stdio.h>

#include "image.h"

/* Decodes the JPEG file f, from its first byte, into *out as the file holds it: 1 channel for
 * a gray JPEG, 3 (RGB) for any other, CMYK and YCCK converted. Refuses an image past
 * BN_IMAGE_MAX_PIXELS from its header, before decoding. Errors start with path and give
 * libjpeg's reason; *out is untouched on error. */
bn_status bn_jpeg_read(FILE *f, const char *path, bn_image *out);

#endif
