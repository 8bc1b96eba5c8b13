/* test_util_images.c - the helpers of image_testing.h; it holds no tests itself. */
#include "image_testing.h"

#include <stdio.h>

#ifndef BN_NO_JPEG
#include <jpeglib.h>
#include <setjmp.h>
#endif

int it_write_bytes(const char *path, const void *bytes, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    int ok = fwrite(bytes, 1, n, f) == n;
    return fclose(f) == 0 && ok ? 0 : -1;
}

#ifdef BN_NO_JPEG

int it_write_jpeg(const char *path, const unsigned char *pixels, int channels, int width, int height, int quality,
                  int progressive)
{
    (void)path, (void)pixels, (void)channels, (void)width, (void)height, (void)quality, (void)progressive;
    return -1;
}

#else

typedef struct jpeg_escape {
    struct jpeg_error_mgr mgr;
    jmp_buf jump;
} jpeg_escape;

static void on_error(j_common_ptr cinfo) { longjmp(((jpeg_escape *)cinfo->err)->jump, 1); }

int it_write_jpeg(const char *path, const unsigned char *pixels, int channels, int width, int height, int quality,
                  int progressive)
{
    FILE *volatile f = fopen(path, "wb");
    if (!f) return -1;
    struct jpeg_compress_struct cinfo;
    jpeg_escape escape;
    cinfo.err = jpeg_std_error(&escape.mgr);
    escape.mgr.error_exit = on_error;
    if (setjmp(escape.jump)) {
        jpeg_destroy_compress(&cinfo);
        fclose(f);
        return -1;
    }
    jpeg_create_compress(&cinfo);
    jpeg_stdio_dest(&cinfo, f);
    cinfo.image_width = (JDIMENSION)width;
    cinfo.image_height = (JDIMENSION)height;
    cinfo.input_components = channels;
    cinfo.in_color_space = channels == 1 ? JCS_GRAYSCALE : channels == 3 ? JCS_RGB : JCS_CMYK;
    jpeg_set_defaults(&cinfo);
    jpeg_set_quality(&cinfo, quality, TRUE);
    if (progressive) jpeg_simple_progression(&cinfo);
    jpeg_start_compress(&cinfo, TRUE);
    while (cinfo.next_scanline < cinfo.image_height) {
        JSAMPROW row = (JSAMPROW)(pixels + (size_t)cinfo.next_scanline * width * channels);
        jpeg_write_scanlines(&cinfo, &row, 1);
    }
    jpeg_finish_compress(&cinfo);
    jpeg_destroy_compress(&cinfo);
    return fclose(f) == 0 ? 0 : -1;
}

#endif
