#include "digit.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int median_pixel(const unsigned char *p, size_t count)
{
    size_t hist[256] = {0};
    for (size_t i = 0; i < count; i++) hist[p[i]]++;
    size_t below = 0;
    for (int v = 0; v < 256; v++) {
        below += hist[v];
        if (2 * below >= count) return v;
    }
    return 255;
}

int bn_digit_background(const bn_image *img)
{
    return median_pixel(img->pixels, (size_t)img->width * img->height);
}

int bn_digit_blank(const bn_image *img)
{
    size_t count = (size_t)img->width * img->height;
    for (size_t i = 1; i < count; i++)
        if (img->pixels[i] != img->pixels[0]) return 0;
    return 1;
}

/* Photos and scans: lifts the paper off to black, clears faint noise, stretches the ink. */
static void remove_background(unsigned char *p, size_t count, int background)
{
    int peak = 0;
    for (size_t i = 0; i < count; i++) {
        int v = p[i] > background ? p[i] - background : 0;
        p[i] = (unsigned char)v;
        if (v > peak) peak = v;
    }
    if (peak == 0) return;
    for (size_t i = 0; i < count; i++)
        p[i] = 8 * p[i] < peak ? 0 : (unsigned char)((p[i] * 255 + peak / 2) / peak);
}

/* Resamples n_in values (stride_in apart) to n_out by area averaging: output j is the mean
 * of the input over [j, j+1) * n_in/n_out, partly covered cells weighted by their share.
 * With n_in == n_out every output is exactly its input. */
static void resample_line(const float *in, int n_in, int stride_in, float *out, int n_out, int stride_out)
{
    double scale = (double)n_in / n_out;
    for (int j = 0; j < n_out; j++) {
        double a = j * scale, b = (j + 1) * scale, sum = 0;
        int last = (int)ceil(b) < n_in ? (int)ceil(b) : n_in;
        for (int i = (int)a; i < last; i++) {
            double covered = (b < i + 1 ? b : i + 1) - (a > i ? a : i);
            if (covered > 0) sum += in[(size_t)i * stride_in] * covered;
        }
        out[(size_t)j * stride_out] = (float)(sum / scale);
    }
}

/* Scales the w x h window at (x0, y0) of src (row stride `stride`) to nw x nh bytes in dst. */
static bn_status scale_area(const unsigned char *src, int stride, int x0, int y0, int w, int h, unsigned char *dst,
                            int nw, int nh)
{
    float *in = malloc((size_t)w * h * sizeof *in), *mid = malloc((size_t)nw * h * sizeof *mid),
          *fin = malloc((size_t)nw * nh * sizeof *fin);
    if (!in || !mid || !fin) {
        free(in), free(mid), free(fin);
        return bn_error(BN_ERR_NOMEM, "out of memory for a %dx%d digit", w, h);
    }
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) in[(size_t)y * w + x] = src[(size_t)(y0 + y) * stride + x0 + x];
    for (int y = 0; y < h; y++) resample_line(in + (size_t)y * w, w, 1, mid + (size_t)y * nw, nw, 1);
    for (int x = 0; x < nw; x++) resample_line(mid + x, h, nw, fin + x, nh, nw);
    for (size_t i = 0; i < (size_t)nw * nh; i++) {
        float v = fin[i] + 0.5f;
        dst[i] = (unsigned char)(v > 255.0f ? 255 : v);
    }
    free(in), free(mid), free(fin);
    return BN_OK;
}

/* The whole-pixel offset that puts centre of mass `com` of a patch of length n nearest
 * `centre` of a field of length side, keeping the patch inside the field. */
static int placement(double com, double centre, int n, int side)
{
    int at = (int)floor(centre - com + 0.5);
    if (at > side - n) at = side - n;
    return at < 0 ? 0 : at;
}

bn_status bn_digit_fit(const bn_image *img, int side, unsigned char *out)
{
    int box = (side * 20 + 14) / 28;
    if (side < 4 || box < 1) return bn_error(BN_ERR_USAGE, "a digit needs a field of at least 4x4, not %d", side);
    int w = img->width, h = img->height;
    size_t count = (size_t)w * h;
    unsigned char *ink = malloc(count), *patch = malloc((size_t)box * box);
    if (!ink || !patch) {
        free(ink), free(patch);
        return bn_error(BN_ERR_NOMEM, "out of memory for a %dx%d digit", w, h);
    }
    memcpy(ink, img->pixels, count);
    int background = median_pixel(ink, count);
    if (background > 0) remove_background(ink, count, background);
    int x0 = w, y0 = h, x1 = -1, y1 = -1;
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            if (ink[(size_t)y * w + x]) {
                if (x < x0) x0 = x;
                if (x > x1) x1 = x;
                if (y < y0) y0 = y;
                if (y > y1) y1 = y;
            }
    bn_status s = BN_OK;
    if (x1 < 0) {
        s = bn_digit_blank(img) ? bn_error(BN_ERR_DATA, "no digit: the image is blank (every pixel is %d)", img->pixels[0])
                                : bn_error(BN_ERR_DATA, "no digit: every pixel is background");
        goto done;
    }
    int cw = x1 - x0 + 1, ch = y1 - y0 + 1, longer = cw > ch ? cw : ch;
    int nw = (int)((double)cw * box / longer + 0.5), nh = (int)((double)ch * box / longer + 0.5);
    if (nw < 1) nw = 1;
    if (nh < 1) nh = 1;
    if ((s = scale_area(ink, w, x0, y0, cw, ch, patch, nw, nh)) != BN_OK) goto done;
    double mass = 0, my = 0, mx = 0;
    for (int y = 0; y < nh; y++)
        for (int x = 0; x < nw; x++) {
            double v = patch[y * nw + x];
            mass += v;
            my += v * y;
            mx += v * x;
        }
    if (mass == 0) {
        s = bn_error(BN_ERR_DATA, "no digit: the ink is too thin to survive scaling to %dx%d", nw, nh);
        goto done;
    }
    int oy = placement(my / mass, side / 2.0, nh, side), ox = placement(mx / mass, side / 2.0, nw, side);
    memset(out, 0, (size_t)side * side);
    for (int y = 0; y < nh; y++) memcpy(out + (size_t)(oy + y) * side + ox, patch + (size_t)y * nw, (size_t)nw);
done:
    free(ink);
    free(patch);
    return s;
}
