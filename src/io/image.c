/* image.c - PNG and PGM/PPM decoding, the reads that turn any decoder's samples into gray or
 * RGB, and the PNG writer. Every decoder gives its samples as the file holds them (1 to 4
 * channels, alpha last); one conversion makes what the caller asked for. */
#include "image.h"

#include <errno.h>
#include <png.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/regular_file.h"
#include "image_jpeg.h"

bn_status bn_image_check_size(const char *path, unsigned long width, unsigned long height)
{
    if (width == 0 || height == 0) return bn_error(BN_ERR_DATA, "%s: the image is empty (%lux%lu)", path, width, height);
    if (width > (unsigned long)BN_IMAGE_MAX_PIXELS / height)
        return bn_error(BN_ERR_DATA, "%s: %lux%lu pixels is too large (at most %ld)", path, width, height,
                        BN_IMAGE_MAX_PIXELS);
    return BN_OK;
}

static bn_status new_image(const char *path, int width, int height, int channels, bn_image *out)
{
    out->pixels = malloc((size_t)width * (size_t)height * (size_t)channels);
    if (!out->pixels) return bn_error(BN_ERR_NOMEM, "%s: out of memory for a %dx%d image", path, width, height);
    out->width = width;
    out->height = height;
    out->channels = channels;
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

/* Reads the rest of a PNG whose 8-byte signature was already consumed from f, at 8 bits a
 * sample: with to_gray, colour made gray by libpng (1 or 2 channels); else as the file holds
 * it, a palette expanded to RGB (1 to 4 channels). */
static bn_status read_png(FILE *f, const char *path, int to_gray, bn_image *out)
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
    if ((status = bn_image_check_size(path, width, height)) != BN_OK) goto done;
    /* libpng's transforms do the conversions: everything becomes 8 bits a sample, with alpha. */
    if (color == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
    if (color == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
    if (png_get_valid(png, info, PNG_INFO_tRNS)) png_set_tRNS_to_alpha(png);
    if (depth == 16) png_set_scale_16(png);
    if (to_gray && (color & PNG_COLOR_MASK_COLOR)) png_set_rgb_to_gray_fixed(png, 1, -1, -1);
    png_set_interlace_handling(png);
    png_read_update_info(png, info);
    int channels = png_get_channels(png, info);
    size_t row_bytes = png_get_rowbytes(png, info);
    if (channels < 1 || channels > (to_gray ? 2 : 4) || row_bytes != (size_t)width * (size_t)channels) {
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
    *out = (bn_image){.width = (int)width, .height = (int)height, .channels = channels, .pixels = rows};
    rows = NULL;
done:
    free(rows);
    free(row_ptrs);
    png_destroy_read_struct(&png, &info, NULL);
    return status;
}

/* ---- PGM and PPM ---- */

typedef struct pnm_cursor {
    const unsigned char *p, *end;
} pnm_cursor;

static int is_space(int c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

/* Skips whitespace and '#' comments (to the end of their line). */
static void skip_blanks(pnm_cursor *c)
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
static int read_number(pnm_cursor *c, unsigned long max, unsigned long *out)
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

/* Whether the first bytes are a PGM's or a PPM's magic: P2 or P5 (gray), P3 or P6 (RGB). */
static int is_pnm(const unsigned char *head, size_t have)
{
    return have >= 3 && head[0] == 'P' && head[1] && strchr("2356", head[1]) && is_space(head[2]);
}

static bn_status parse_pnm(const unsigned char *data, size_t len, const char *path, bn_image *out)
{
    pnm_cursor c = {data + 2, data + len};
    int binary = data[1] == '5' || data[1] == '6', samples = data[1] == '3' || data[1] == '6' ? 3 : 1;
    const char *kind = samples == 1 ? "PGM" : "PPM", *unit = samples == 1 ? "pixel" : "sample";
    unsigned long width, height, maxval;
    if (!read_number(&c, 1UL << 30, &width) || !read_number(&c, 1UL << 30, &height) ||
        !read_number(&c, 65535, &maxval) || maxval == 0)
        return bn_error(BN_ERR_DATA, "%s: bad %s header (expected width, height and maxval 1..65535)", path, kind);
    BN_TRY(bn_image_check_size(path, width, height));
    size_t count = (size_t)width * height * samples;
    if (binary) {
        /* Exactly one whitespace byte separates maxval from the raster. */
        if (c.p >= c.end || !is_space(*c.p))
            return bn_error(BN_ERR_DATA, "%s: bad %s header (no whitespace after maxval)", path, kind);
        c.p++;
        size_t bytes = count * (maxval > 255 ? 2 : 1);
        if ((size_t)(c.end - c.p) < bytes)
            return bn_error(BN_ERR_DATA, "%s: truncated %s: %zu bytes of pixels, expected %zu", path, kind,
                            (size_t)(c.end - c.p), bytes);
    }
    BN_TRY(new_image(path, (int)width, (int)height, samples, out));
    for (size_t i = 0; i < count; i++) {
        unsigned long v;
        if (!binary) {
            if (!read_number(&c, 65535, &v)) {
                bn_image_free(out);
                return bn_error(BN_ERR_DATA, "%s: truncated or bad %s: %s %zu of %zu is not a number", path, kind,
                                unit, i, count);
            }
        } else if (maxval > 255) {
            v = (unsigned long)c.p[0] << 8 | c.p[1];
            c.p += 2;
        } else {
            v = *c.p++;
        }
        if (v > maxval) {
            bn_image_free(out);
            return bn_error(BN_ERR_DATA, "%s: %s %s %zu is %lu, above maxval %lu", path, kind, unit, i, v, maxval);
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

/* raw (1 to 4 channels as a decoder gave them, alpha last) with `channels` (0: gray or RGB as
 * raw holds, without alpha) into *out, transparent pixels composited over `background`. Colour
 * made gray is made gray before compositing, as libpng does it. raw is emptied. */
static bn_status convert(const char *path, bn_image *raw, int channels, int background, bn_image *out)
{
    const int in = raw->channels, alpha = in == 2 || in == 4, colour = in >= 3;
    const int want = channels ? channels : colour ? 3 : 1;
    if (!alpha && in == want) {
        *out = *raw;
        *raw = (bn_image){0};
        return BN_OK;
    }
    bn_status s = new_image(path, raw->width, raw->height, want, out);
    const size_t count = (size_t)raw->width * (size_t)raw->height;
    const unsigned char *p = raw->pixels;
    unsigned char *q = out->pixels;
    for (size_t i = 0; s == BN_OK && i < count; i++, p += in, q += want) {
        unsigned v[3] = {p[0], p[colour], p[2 * colour]};
        if (want == 1 && colour) v[0] = bn_image_luminance(v[0], v[1], v[2]);
        for (int k = 0; k < want; k++) {
            unsigned a = alpha ? p[in - 1] : 255;
            q[k] = (unsigned char)((v[k] * a + (unsigned)background * (255 - a) + 127) / 255);
        }
    }
    bn_image_free(raw);
    return s;
}

static int is_jpeg(const unsigned char *head, size_t have)
{
    return have >= 3 && head[0] == 0xff && head[1] == 0xd8 && head[2] == 0xff;
}

static bn_status read_image(const char *path, int channels, int background, bn_image *out)
{
    memset(out, 0, sizeof *out);
    BN_TRY(bn_check_regular_file(path, BN_ERR_DATA));
    FILE *f = fopen(path, "rb");
    if (!f) return bn_error(BN_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    unsigned char head[8];
    size_t have = fread(head, 1, sizeof head, f);
    bn_image raw = {0};
    bn_status s;
    if (ferror(f)) {
        s = bn_error(BN_ERR_IO, "%s: cannot read: %s", path, strerror(errno));
    } else if (have == 0) {
        s = bn_error(BN_ERR_DATA, "%s: the file is empty", path);
    } else if (have == sizeof head && png_sig_cmp(head, 0, sizeof head) == 0) {
        s = read_png(f, path, channels == 1, &raw);
    } else if (is_pnm(head, have)) {
        unsigned char *data = NULL;
        size_t len = 0;
        s = read_rest(f, path, head, have, &data, &len);
        if (s == BN_OK) {
            s = parse_pnm(data, len, path, &raw);
            free(data);
        }
    } else if (is_jpeg(head, have)) {
        s = bn_jpeg_read(f, path, &raw);
    } else {
        s = bn_error(BN_ERR_DATA, "%s: not a PNG or PGM/PPM (P2, P3, P5, P6) or JPEG image", path);
    }
    fclose(f);
    return s == BN_OK ? convert(path, &raw, channels, background, out) : s;
}

bn_status bn_image_read(const char *path, int background, bn_image *out)
{
    memset(out, 0, sizeof *out);
    if (background < 0 || background > 255)
        return bn_error(BN_ERR_USAGE, "image background %d is outside 0..255", background);
    return read_image(path, 1, background, out);
}

bn_status bn_image_read_color(const char *path, int channels, bn_image *out)
{
    memset(out, 0, sizeof *out);
    if (channels != 0 && channels != 1 && channels != 3)
        return bn_error(BN_ERR_USAGE, "%s: an image is read with 1 or 3 channels (or 0: as it is), not %d", path,
                        channels);
    return read_image(path, channels, 0, out);
}

/* A PNG that could not be written whole is removed, so that no reader takes a truncated image
 * for a result; only a regular file, which is what fopen made or emptied. */
static bn_status drop_partial(const char *path, bn_status s)
{
    struct stat st;
    if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) remove(path);
    return s;
}

bn_status bn_image_write_png_color(const char *path, const unsigned char *pixels, int channels, int width,
                                   int height)
{
    if (width <= 0 || height <= 0) return bn_error(BN_ERR_USAGE, "%s: cannot write a %dx%d image", path, width, height);
    if (channels != 1 && channels != 3)
        return bn_error(BN_ERR_USAGE, "%s: cannot write an image of %d channels (1 or 3)", path, channels);
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
    png_set_IHDR(png, info, (png_uint_32)width, (png_uint_32)height, 8,
                 channels == 3 ? PNG_COLOR_TYPE_RGB : PNG_COLOR_TYPE_GRAY, PNG_INTERLACE_NONE,
                 PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    png_write_info(png, info);
    size_t row_bytes = (size_t)width * (size_t)channels;
    for (int y = 0; y < height; y++) png_write_row(png, pixels + (size_t)y * row_bytes);
    png_write_end(png, NULL);
    png_destroy_write_struct(&png, &info);
    if (fclose(f) != 0)
        return drop_partial(path, bn_error(BN_ERR_IO, "%s: cannot finish writing: %s", path, strerror(errno)));
    return BN_OK;
}

bn_status bn_image_write_png(const char *path, const unsigned char *pixels, int width, int height)
{
    return bn_image_write_png_color(path, pixels, 1, width, height);
}

void bn_image_invert(bn_image *img)
{
    size_t count = (size_t)img->width * (size_t)img->height * (size_t)(img->channels > 1 ? img->channels : 1);
    for (size_t i = 0; i < count; i++) img->pixels[i] = (unsigned char)(255 - img->pixels[i]);
}

void bn_image_free(bn_image *img)
{
    free(img->pixels);
    memset(img, 0, sizeof *img);
}
