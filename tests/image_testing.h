/* image_testing.h - helpers shared by the tests of image files (test_image.c, test_folder.c,
 * test_predict.c): whole files written from bytes, and JPEG files written with libjpeg, which
 * blobnet itself only reads. */
#ifndef BN_IMAGE_TESTING_H
#define BN_IMAGE_TESTING_H

#include <stddef.h>

/* Writes n bytes to path, replacing it; 0, or -1 when it cannot. */
int it_write_bytes(const char *path, const void *bytes, size_t n);

/* Writes width x height pixels of `channels` interleaved samples (1 gray, 3 RGB, 4 CMYK
 * stored as Adobe's files store it, inverted: 255 is no ink) as a JPEG of the given quality,
 * progressive when asked; 0, or -1 when it cannot or the build has no libjpeg (BN_NO_JPEG). */
int it_write_jpeg(const char *path, const unsigned char *pixels, int channels, int width, int height, int quality,
                  int progressive);

#endif
