/* image_jpeg.c - JPEG decoding with libjpeg-turbo. libjpeg's own error handler prints and exits:
 * here an error jumps back with the library's message instead, and so do the warnings that mean
 * the decoder made pixels up (a truncated file, corrupt entropy-coded data), so that a damaged
 * file is an error naming it rather than an image padded with gray. */
#include "image_jpeg.h"

#ifdef BN_NO_JPEG

bn_status bn_jpeg_read(FILE *f, const char *path, bn_image *out)
{
    (void)f, (void)out;
    return bn_error(BN_ERR_DATA, "%s: a JPEG image, but this blobnet was built without libjpeg (install "
                                 "libjpeg62-turbo-dev, then rebuild)", path);
}

#else

#include <setjmp.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>
#include <jerror.h>

/* A progressive file of many tiny scans takes minutes to decode: libjpeg-turbo's own tools stop
 * at 500 scans, and so does this reader. */
#define JPEG_MAX_SCANS 500

typedef struct jpeg_failure {
    struct jpeg_error_mgr mgr;   /* first: libjpeg's callbacks get a pointer to it */
    struct jpeg_progress_mgr progress;
    jmp_buf jump;
    char message[JMSG_LENGTH_MAX];
} jpeg_failure;

static void jpeg_on_error(j_common_ptr cinfo)
{
    jpeg_failure *f = (jpeg_failure *)cinfo->err;
    cinfo->err->format_message(cinfo, f->message);
    longjmp(f->jump, 1);
}

/* Level -1 is a warning, the rest tracing. The warnings below leave pixels the file does not
 * hold; the others (an unknown JFIF version, extra bytes between markers) leave the image whole. */
static void jpeg_on_message(j_common_ptr cinfo, int level)
{
    int code = cinfo->err->msg_code;
    if (level == -1 && (code == JWRN_JPEG_EOF || code == JWRN_HIT_MARKER || code == JWRN_MUST_RESYNC ||
                        code == JWRN_HUFF_BAD_CODE || code == JWRN_ARITH_BAD_CODE))
        jpeg_on_error(cinfo);
}

static void jpeg_on_progress(j_common_ptr cinfo)
{
    jpeg_failure *f = (jpeg_failure *)cinfo->err;
    if (((j_decompress_ptr)cinfo)->input_scan_number > JPEG_MAX_SCANS) {
        snprintf(f->message, sizeof f->message, "more than %d progressive scans", JPEG_MAX_SCANS);
        longjmp(f->jump, 1);
    }
}

/* CMYK to RGB in place (4 bytes a pixel become 3). Adobe's files, the usual source of CMYK
 * JPEGs, store every sample inverted (255 is no ink); others store ink as it is. */
static void cmyk_to_rgb(unsigned char *p, size_t count, int adobe)
{
    for (size_t i = 0; i < count; i++) {
        unsigned c = p[4 * i], m = p[4 * i + 1], y = p[4 * i + 2], k = p[4 * i + 3];
        if (!adobe) c = 255 - c, m = 255 - m, y = 255 - y, k = 255 - k;
        p[3 * i] = (unsigned char)((c * k + 127) / 255);
        p[3 * i + 1] = (unsigned char)((m * k + 127) / 255);
        p[3 * i + 2] = (unsigned char)((y * k + 127) / 255);
    }
}

bn_status bn_jpeg_read(FILE *file, const char *path, bn_image *out)
{
    struct jpeg_decompress_struct cinfo;
    jpeg_failure failure;
    memset(&cinfo, 0, sizeof cinfo);
    memset(&failure, 0, sizeof failure);
    cinfo.err = jpeg_std_error(&failure.mgr);
    failure.mgr.error_exit = jpeg_on_error;
    failure.mgr.emit_message = jpeg_on_message;
    failure.progress.progress_monitor = jpeg_on_progress;
    /* Set before the jump point, written after it: volatile so the error path sees them. */
    unsigned char *volatile pixels = NULL;
    volatile bn_status status = BN_OK;
    if (setjmp(failure.jump)) {
        if (status == BN_OK) status = bn_error(BN_ERR_DATA, "%s: bad JPEG: %s", path, failure.message);
        goto done;
    }
    jpeg_create_decompress(&cinfo);
    cinfo.progress = &failure.progress;
    rewind(file);
    jpeg_stdio_src(&cinfo, file);
    jpeg_read_header(&cinfo, TRUE);
    if ((status = bn_image_check_size(path, cinfo.image_width, cinfo.image_height)) != BN_OK) goto done;
    /* libjpeg converts YCbCr and RGB to RGB and YCCK to CMYK, but CMYK to nothing else. */
    int cmyk = cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK;
    cinfo.out_color_space = cinfo.jpeg_color_space == JCS_GRAYSCALE ? JCS_GRAYSCALE : cmyk ? JCS_CMYK : JCS_RGB;
    jpeg_start_decompress(&cinfo);
    size_t width = cinfo.output_width, row_bytes = width * (size_t)cinfo.output_components;
    pixels = malloc(row_bytes * cinfo.output_height);
    if (!pixels) {
        status = bn_error(BN_ERR_NOMEM, "%s: out of memory for a %zux%u image", path, width, cinfo.output_height);
        goto done;
    }
    while (cinfo.output_scanline < cinfo.output_height) {
        JSAMPROW row = pixels + (size_t)cinfo.output_scanline * row_bytes;
        jpeg_read_scanlines(&cinfo, &row, 1);
    }
    jpeg_finish_decompress(&cinfo);
    if (cmyk) cmyk_to_rgb(pixels, width * cinfo.output_height, cinfo.saw_Adobe_marker);
    *out = (bn_image){.width = (int)width, .height = (int)cinfo.output_height,
                      .channels = cinfo.output_components == 1 ? 1 : 3, .pixels = pixels};
    pixels = NULL;
done:
    free(pixels);
    jpeg_destroy_decompress(&cinfo);
    return status;
}

#endif
