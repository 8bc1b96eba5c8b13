/* image_fit.c - scaling to cover and cropping the centre, in integers: each axis is a table of
 * taps (input index, weight) for the outputs the crop keeps, whose weights sum to the same
 * scale for every output; rows are combined first into exact 64-bit sums, then columns, and
 * each output is divided and rounded once. */
#include "image_fit.h"

#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A bilinear weight of 1: positions between pixels to 1/65536. */
#define BILINEAR_ONE ((uint64_t)1 << 16)

typedef struct axis {
    int *start;         /* output k's taps are [start[k], start[k + 1]) */
    int *index;         /* each tap's input pixel */
    uint64_t *weight;   /* each tap's weight */
    uint64_t scale;     /* what every output's weights sum to */
} axis;

static void axis_free(axis *a)
{
    free(a->start);
    free(a->index);
    free(a->weight);
}

/* The taps of outputs off .. off+n_out-1 of n_in pixels resampled to n_res (<= INT_MAX, so no
 * product below passes 2^63); 0, or -1 out of memory. */
static int axis_make(axis *a, long long n_in, long long n_res, long long off, int n_out)
{
    /* Area averaging: the window's outputs cover n_out * n_in/n_res input pixels, plus one at
     * each end, and neighbours share one pixel at most; bilinear: two taps an output. */
    size_t cap = n_res <= n_in ? (size_t)(n_out * n_in / n_res) + 2 * (size_t)n_out + 2 : 2 * (size_t)n_out;
    a->start = malloc(((size_t)n_out + 1) * sizeof *a->start);
    a->index = malloc(cap * sizeof *a->index);
    a->weight = malloc(cap * sizeof *a->weight);
    if (!a->start || !a->index || !a->weight) return -1;
    int t = 0;
    for (int k = 0; k < n_out; k++) {
        long long j = off + k;
        a->start[k] = t;
        if (n_res <= n_in) {
            /* In units of 1/n_res input pixels, output j covers [j*n_in, (j+1)*n_in) and input
             * i covers [i*n_res, (i+1)*n_res): the overlaps are the weights. */
            long long lo = j * n_in, hi = lo + n_in;
            for (long long i = lo / n_res; i * n_res < hi; i++) {
                long long from = lo > i * n_res ? lo : i * n_res, to = hi < (i + 1) * n_res ? hi : (i + 1) * n_res;
                a->index[t] = (int)i;
                a->weight[t++] = (uint64_t)(to - from);
            }
        } else {
            /* Output j's centre lies at input (j + 1/2) * n_in/n_res - 1/2: pos in units of
             * 1/(2*n_res) pixels, never below -1 pixel. */
            long long d = 2 * n_res, pos = (2 * j + 1) * n_in - n_res;
            long long i0 = pos < 0 ? 0 : pos / d, i1 = i0 + 1 < n_in ? i0 + 1 : n_in - 1;
            uint64_t f = pos < 0 ? 0 : ((uint64_t)(pos % d) * BILINEAR_ONE + (uint64_t)d / 2) / (uint64_t)d;
            if (f < BILINEAR_ONE) a->index[t] = (int)i0, a->weight[t++] = BILINEAR_ONE - f;
            if (f > 0) a->index[t] = (int)i1, a->weight[t++] = f;
        }
    }
    a->start[n_out] = t;
    a->scale = n_res <= n_in ? (uint64_t)n_in : BILINEAR_ONE;
    return 0;
}

/* in's pixels with `channels` interleaved: in's own, or a converted copy in *copy. */
static const unsigned char *with_channels(const bn_image *in, int channels, unsigned char **copy)
{
    int have = in->channels > 1 ? in->channels : 1;
    *copy = NULL;
    if (have == channels) return in->pixels;
    size_t count = (size_t)in->width * (size_t)in->height;
    unsigned char *out = malloc(count * (size_t)channels);
    if (!out) return NULL;
    const unsigned char *p = in->pixels;
    for (size_t i = 0; i < count; i++) {
        if (channels == 1) out[i] = bn_image_luminance(p[3 * i], p[3 * i + 1], p[3 * i + 2]);
        else out[3 * i] = out[3 * i + 1] = out[3 * i + 2] = p[i];
    }
    *copy = out;
    return out;
}

bn_status bn_image_fit(const bn_image *in, int channels, int height, int width, unsigned char *out_nchw)
{
    int have = in->channels > 1 ? in->channels : 1;
    if ((channels != 1 && channels != 3) || (have != 1 && have != 3) || height <= 0 || width <= 0 ||
        in->width <= 0 || in->height <= 0)
        return bn_error(BN_ERR_USAGE, "cannot fit a %dx%d image of %d channels into %dx%dx%d", in->width, in->height,
                        in->channels, channels, height, width);
    const long long h = in->height, w = in->width;
    long long rh, rw;
    /* The larger of the two scales takes its side to the target exactly; the other is rounded,
     * and stays at least the target's since it was at least that before rounding. */
    if ((long long)height * w >= (long long)width * h) {
        rh = height;
        rw = (2 * w * height + h) / (2 * h);
    } else {
        rw = width;
        rh = (2 * h * width + w) / (2 * w);
    }
    if (rh > INT_MAX || rw > INT_MAX)
        return bn_error(BN_ERR_DATA, "a %lldx%lld image is too thin to scale to cover %dx%d", w, h, width, height);
    unsigned char *copy;
    const unsigned char *src = with_channels(in, channels, &copy);
    axis ay = {0}, ax = {0};
    int ok = src && axis_make(&ay, h, rh, (rh - height) / 2, height) == 0 &&
             axis_make(&ax, w, rw, (rw - width) / 2, width) == 0;
    /* The columns the crop reads: the first tap of the first output to the last of the last. */
    int x_lo = ok ? ax.index[0] : 0, x_hi = ok ? ax.index[ax.start[width] - 1] : 0;
    uint64_t *rows = ok ? malloc(((size_t)(x_hi - x_lo) + 1) * sizeof *rows) : NULL;
    bn_status s = BN_OK;
    if (!rows) s = bn_error(BN_ERR_NOMEM, "out of memory fitting a %lldx%lld image into %dx%d", w, h, width, height);
    if (rows) {
        const uint64_t scale = ay.scale * ax.scale, half = scale / 2;
        const size_t span = (size_t)(x_hi - x_lo) + 1, stride = (size_t)channels;
        for (int c = 0; c < channels; c++)
            for (int k = 0; k < height; k++) {
                memset(rows, 0, span * sizeof *rows);
                for (int t = ay.start[k]; t < ay.start[k + 1]; t++) {
                    const unsigned char *row = src + ((size_t)ay.index[t] * (size_t)w + (size_t)x_lo) * stride + c;
                    const uint64_t wy = ay.weight[t];
                    for (size_t x = 0; x < span; x++) rows[x] += wy * row[x * stride];
                }
                unsigned char *o = out_nchw + ((size_t)c * height + k) * width;
                for (int m = 0; m < width; m++) {
                    uint64_t sum = 0;
                    for (int t = ax.start[m]; t < ax.start[m + 1]; t++) sum += ax.weight[t] * rows[ax.index[t] - x_lo];
                    o[m] = (unsigned char)((sum + half) / scale);
                }
            }
    }
    free(rows);
    axis_free(&ay);
    axis_free(&ax);
    free(copy);
    return s;
}

bn_status bn_image_fit_from(const char *path, const bn_image *in, int channels, int height, int width,
                            unsigned char *out_nchw)
{
    bn_status s = bn_image_fit(in, channels, height, width, out_nchw);
    if (s == BN_OK) return BN_OK;
    char why[512];
    snprintf(why, sizeof why, "%s", bn_last_error());
    return bn_error(s, "%s: %s", path, why);
}
