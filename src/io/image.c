#include "image.h"

#include <errno.h>
#include <png.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/regular_file.h"

static bn_status check_size(const char *path, unsigned long width, unsigned long height)
{
    if (width == 0 || height == 0) return bn_error(BN_ERR_DATA, "%s: the image is empty (%lux%lu)", path, width, height);
    if (width > (unsigned long)BN_IMAGE_MAX_PIXELS / height)
        return bn_error(BN_ERR_DATA, "%s: %lux%lu pixels is too large (at most %ld)", path, width, height,
                        BN_IMAGE_MAX_PIXELS);
    return BN_OK;
}

static bn_status new_image(const char *path, int width, int height, bn_image *out)
{
    out->pixels = malloc((size_t)width * (size_t)height);
    if (!out->pixels) return bn_error(BN_ERR_NOMEM, "%s: out of memory for a %dx%d image", path, width, height);
    out->width = width;
    out->height = height;
    return BN_OK;
}

/* ---- PNG ---- */

typedef struct png_failure {
    char message[200];
} png_failure;

static void png_on_error(png_structp png, png_const_charp message)
{
    png_failure *f = png_get_error_ptr(png);
    snprintf(f->message, sizeof f->message, "%s", message);
    png_longjmp(png, 1);
}

/* Warnings (odd colour profiles and the like) do not stop a read: they are dropped. */
static void png_on_warning(png_structp png, png_const_charp message) { (void)png, (void)message; }

/* Reads the rest of a PNG whose 8-byte signature was already consumed from f. */
static bn_status read_png(FILE *f, const char *path, int background, bn_image *out)
{
    png_failure failure = {{0}};
    png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &failure, png_on_error, png_on_warning);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    if (!info) {
        png_destroy_read_struct(&png, NULL, NULL);
        return bn_error(BN_ERR_NOMEM, "%s: out of memory for the PNG reader", path);
    }
    /* Set before the jump point, written after it: volatile so the error path sees them. */
    unsigned char *volatile rows = NULL;
    png_bytep *volatile row_ptrs = NULL;
    volatile bn_status status = BN_OK;
    if (setjmp(png_jmpbuf(png))) {
        if (status == BN_OK) status = bn_error(BN_ERR_DATA, "%s: bad PNG: %s", path, failure.message);
        goto done;
    }
    png_init_io(png, f);
    png_set_sig_bytes(png, 8);
    png_read_info(png, info);
    png_uint_32 width, height;
    int depth, color;
    png_get_IHDR(png, info, &width, &height, &depth, &color, NULL, NULL, NULL);
    if ((status = check_size(path, width, height)) != BN_OK) goto done;
    /* libpng's transforms do the conversions: everything becomes 8-bit gray, with alpha. */
    if (color == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
    if (color == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
    if (png_get_valid(png, info, PNG_INFO_tRNS)) png_set_tRNS_to_alpha(png);
    if (depth == 16) png_set_scale_16(png);
    if (color & PNG_COLOR_MASK_COLOR) png_set_rgb_to_gray_fixed(png, 1, -1, -1);
    png_set_interlace_handling(png);
    png_read_update_info(png, info);
    int channels = png_get_channels(png, info);
    size_t row_bytes = png_get_rowbytes(png, info);
    if ((channels != 1 && channels != 2) || row_bytes != (size_t)width * (size_t)channels) {
        status = bn_error(BN_ERR_INTERNAL, "%s: PNG conversion gave %d channels", path, channels);
        goto done;
    }
    rows = malloc(row_bytes * height);
    row_ptrs = malloc(height * sizeof *row_ptrs);
    if (!rows || !row_ptrs) {
        status = bn_error(BN_ERR_NOMEM, "%s: out of memory for a %ux%u image", path, (unsigned)width, (unsigned)height);
        goto done;
    }
    for (png_uint_32 y = 0; y < height; y++) row_ptrs[y] = rows + y * row_bytes;
    png_read_image(png, row_ptrs);
    png_read_end(png, NULL);
    if ((status = new_image(path, (int)width, (int)height, out)) != BN_OK) goto done;
    size_t count = (size_t)width * height;
    for (size_t i = 0; i < count; i++) {
        if (channels == 1) {
            out->pixels[i] = rows[i];
        } else {
            unsigned gray = rows[2 * i], alpha = rows[2 * i + 1];
            out->pixels[i] = (unsigned char)((gray * alpha + (unsigned)background * (255 - alpha) + 127) / 255);
        }
    }
done:
    free(rows);
    free(row_ptrs);
    png_destroy_read_struct(&png, &info, NULL);
    return status;
}

/* ---- PGM ---- */

typedef struct pgm_cursor {
    const unsigned char *p, *end;
} pgm_cursor;

static int is_space(int c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

/* Skips whitespace and '#' comments (to the end of their line). */
static void skip_blanks(pgm_cursor *c)
{
    while (c->p < c->end) {
        if (*c->p == '#') {
            while (c->p < c->end && *c->p != '\n') c->p++;
        } else if (is_space(*c->p)) {
            c->p++;
        } else {
            break;
        }
    }
}

/* A decimal number up to max; 0 when there is none or it is larger. */
static int read_number(pgm_cursor *c, unsigned long max, unsigned long *out)
{
    skip_blanks(c);
    if (c->p >= c->end || *c->p < '0' || *c->p > '9') return 0;
    unsigned long v = 0;
    while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
        v = v * 10 + (unsigned long)(*c->p++ - '0');
        if (v > max) return 0;
    }
    *out = v;
    return 1;
}

static bn_status parse_pgm(const unsigned char *data, size_t len, const char *path, bn_image *out)
{
    pgm_cursor c = {data + 2, data + len};
    int binary = data[1] == '5';
    unsigned long width, height, maxval;
    if (!read_number(&c, 1UL << 30, &width) || !read_number(&c, 1UL << 30, &height) ||
        !read_number(&c, 65535, &maxval) || maxval == 0)
        return bn_error(BN_ERR_DATA, "%s: bad PGM header (expected width, height and maxval 1..65535)", path);
    BN_TRY(check_size(path, width, height));
    size_t count = (size_t)width * height;
    if (binary) {
        /* Exactly one whitespace byte separates maxval from the raster. */
        if (c.p >= c.end || !is_space(*c.p))
            return bn_error(BN_ERR_DATA, "%s: bad PGM header (no whitespace after maxval)", path);
        c.p++;
        size_t bytes = count * (maxval > 255 ? 2 : 1);
        if ((size_t)(c.end - c.p) < bytes)
            return bn_error(BN_ERR_DATA, "%s: truncated PGM: %zu bytes of pixels, expected %zu", path,
                            (size_t)(c.end - c.p), bytes);
    }
    BN_TRY(new_image(path, (int)width, (int)height, out));
    for (size_t i = 0; i < count; i++) {
        unsigned long v;
        if (!binary) {
            if (!read_number(&c, 65535, &v)) {
                bn_image_free(out);
                return bn_error(BN_ERR_DATA, "%s: truncated or bad PGM: pixel %zu of %zu is not a number", path, i,
                                count);
            }
        } else if (maxval > 255) {
            v = (unsigned long)c.p[0] << 8 | c.p[1];
            c.p += 2;
        } else {
            v = *c.p++;
        }
        if (v > maxval) {
            bn_image_free(out);
            return bn_error(BN_ERR_DATA, "%s: PGM pixel %zu is %lu, above maxval %lu", path, i, v, maxval);
        }
        out->pixels[i] = (unsigned char)((v * 255 + maxval / 2) / maxval);
    }
    return BN_OK;
}

/* Reads all of f (whose first `have` bytes are already in head) into *data. */
static bn_status read_rest(FILE *f, const char *path, const unsigned char *head, size_t have, unsigned char **data,
                           size_t *len)
{
    size_t cap = 1 << 16, n = have;
    unsigned char *buf = malloc(cap);
    if (!buf) return bn_error(BN_ERR_NOMEM, "%s: out of memory", path);
    memcpy(buf, head, have);
    for (;;) {
        if (n == cap) {
            unsigned char *bigger = cap < (size_t)BN_IMAGE_MAX_PIXELS * 8 ? realloc(buf, cap * 2) : NULL;
            if (!bigger) {
                free(buf);
                return bn_error(BN_ERR_DATA, "%s: the file is too large for an image", path);
            }
            buf = bigger;
            cap *= 2;
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0) break;
    }
    if (ferror(f)) {
        free(buf);
        return bn_error(BN_ERR_IO, "%s: cannot read: %s", path, strerror(errno));
    }
    *data = buf;
    *len = n;
    return BN_OK;
}

bn_status bn_image_read(const char *path, int background, bn_image *out)
{
    memset(out, 0, sizeof *out);
    if (background < 0 || background > 255)
        return bn_error(BN_ERR_USAGE, "image background %d is outside 0..255", background);
    BN_TRY(bn_check_regular_file(path, BN_ERR_DATA));
    FILE *f = fopen(path, "rb");
    if (!f) return bn_error(BN_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    unsigned char head[8];
    size_t have = fread(head, 1, sizeof head, f);
    bn_status s;
    if (ferror(f)) {
        s = bn_error(BN_ERR_IO, "%s: cannot read: %s", path, strerror(errno));
    } else if (have == 0) {
        s = bn_error(BN_ERR_DATA, "%s: the file is empty", path);
    } else if (have == sizeof head && png_sig_cmp(head, 0, sizeof head) == 0) {
        s = read_png(f, path, background, out);
    } else if (have >= 3 && head[0] == 'P' && (head[1] == '5' || head[1] == '2') && is_space(head[2])) {
        unsigned char *data = NULL;
        size_t len = 0;
        s = read_rest(f, path, head, have, &data, &len);
        if (s == BN_OK) {
            s = parse_pgm(data, len, path, out);
            free(data);
        }
    } else {
        s = bn_error(BN_ERR_DATA, "%s: not a PNG or PGM (P2/P5) image", path);
    }
    fclose(f);
    return s;
}

/* A PNG that could not be written whole is removed, so that no reader takes a truncated image
 * for a result; only a regular file, which is what fopen made or emptied. */
static bn_status drop_partial(const char *path, bn_status s)
{
    struct stat st;
    if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) remove(path);
    return s;
}

bn_status bn_image_write_png(const char *path, const unsigned char *pixels, int width, int height)
{
    if (width <= 0 || height <= 0) return bn_error(BN_ERR_USAGE, "%s: cannot write a %dx%d image", path, width, height);
    FILE *f = fopen(path, "wb");
    if (!f) return bn_error(BN_ERR_IO, "%s: cannot write: %s", path, strerror(errno));
    png_failure failure = {{0}};
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, &failure, png_on_error, png_on_warning);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    if (!info) {
        png_destroy_write_struct(&png, NULL);
        fclose(f);
        return drop_partial(path, bn_error(BN_ERR_NOMEM, "%s: out of memory for the PNG writer", path));
    }
    if (setjmp(png_jmpbuf(png))) {
        png_destroy_write_struct(&png, &info);
        fclose(f);
        return drop_partial(path, bn_error(BN_ERR_IO, "%s: cannot write the PNG: %s", path, failure.message));
    }
    png_init_io(png, f);
    png_set_IHDR(png, info, (png_uint_32)width, (png_uint_32)height, 8, PNG_COLOR_TYPE_GRAY, PNG_INTERLACE_NONE,
                 PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    png_write_info(png, info);
    for (int y = 0; y < height; y++) png_write_row(png, pixels + (size_t)y * (size_t)width);
    png_write_end(png, NULL);
    png_destroy_write_struct(&png, &info);
    if (fclose(f) != 0)
        return drop_partial(path, bn_error(BN_ERR_IO, "%s: cannot finish writing: %s", path, strerror(errno)));
    return BN_OK;
}

void bn_image_invert(bn_image *img)
{
    size_t count = (size_t)img->width * (size_t)img->height;
    for (size_t i = 0; i < count; i++) img->pixels[i] = (unsigned char)(255 - img->pixels[i]);
}

void bn_image_free(bn_image *img)
{
    free(img->pixels);
    memset(img, 0, sizeof *img);
}
