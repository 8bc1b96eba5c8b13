/* dataset.c - the in-memory set's helpers: the size check every reader makes before it
 * allocates or decodes, allocation, the gather the CPU loader uses, the seeded shuffle,
 * statistics and the holdout split. */
#include "dataset.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/host_memory.h"

#define BN_DATASET_PAGE 4096

bn_status bn_dataset_check_size(const char *what, uint64_t count, int channels, int height, int width,
                                int bytes_per_value)
{
    /* Doubles hold the product without wrapping, whatever the header said. */
    double values = (double)count * channels * height * width;
    double bytes = values * bytes_per_value + (double)count * sizeof(uint16_t);
    if (values * bytes_per_value > (double)BN_DATASET_MAX_BYTES)
        return bn_error(BN_ERR_DATA, "%s: %llu examples of %dx%dx%d make %.0f bytes, past the limit of %llu",
                        what, (unsigned long long)count, channels, height, width, values * bytes_per_value,
                        (unsigned long long)BN_DATASET_MAX_BYTES);
    bn_host_memory mem;
    bn_host_memory_available(&mem);
    if (mem.bytes >= 0 && bytes > mem.bytes)
        return bn_error(BN_ERR_NOMEM, "%s: %llu examples of %dx%dx%d need %.1f MB in memory, more than %s", what,
                        (unsigned long long)count, channels, height, width, bytes / 1e6, mem.source);
    return BN_OK;
}

bn_status bn_dataset_alloc(bn_dataset *d, const char *what, int count, int channels, int height, int width,
                           int num_classes, int is_float)
{
    memset(d, 0, sizeof *d);
    if (count <= 0 || channels <= 0 || height <= 0 || width <= 0)
        return bn_error(BN_ERR_DATA, "%s: no examples (%d of %dx%dx%d)", what, count, channels, height, width);
    if (num_classes <= 0 || num_classes > BN_DATASET_MAX_CLASSES)
        return bn_error(BN_ERR_DATA, "%s: %d classes, outside 1..%d", what, num_classes, BN_DATASET_MAX_CLASSES);
    BN_TRY(bn_dataset_check_size(what, (uint64_t)count, channels, height, width, is_float ? 4 : 1));
    /* Whole pages of their own: a set streamed to the GPU is pinned by the page, and two sets
     * sharing a page could not both be. */
    size_t bytes = (size_t)count * channels * height * width * (is_float ? sizeof(float) : 1);
    size_t rounded = (bytes + BN_DATASET_PAGE - 1) / BN_DATASET_PAGE * BN_DATASET_PAGE;
    void *buf = NULL;
    if (posix_memalign(&buf, BN_DATASET_PAGE, rounded) == 0) memset(buf, 0, rounded);
    else buf = NULL;
    if (is_float) d->values = buf;
    else d->pixels = buf;
    d->labels = calloc((size_t)count, sizeof *d->labels);
    if (!d->labels || !(d->values || d->pixels)) {
        bn_dataset_free(d);
        return bn_error(BN_ERR_NOMEM, "%s: out of memory for %d examples of %dx%dx%d", what, count, channels,
                        height, width);
    }
    d->count = count;
    d->channels = channels;
    d->height = height;
    d->width = width;
    d->num_classes = num_classes;
    return BN_OK;
}

static void free_names(char **names, int n)
{
    if (!names) return;
    for (int i = 0; i < n; i++) free(names[i]);
    free(names);
}

void bn_dataset_free(bn_dataset *d)
{
    if (!d) return;
    free(d->pixels);
    free(d->values);
    free(d->labels);
    free_names(d->class_names, d->num_classes);
    memset(d, 0, sizeof *d);
}

bn_status bn_dataset_set_class_names(bn_dataset *d, char *const *names)
{
    char **copy = calloc((size_t)d->num_classes, sizeof *copy);
    if (!copy) return bn_error(BN_ERR_NOMEM, "out of memory for %d class names", d->num_classes);
    for (int i = 0; i < d->num_classes; i++) {
        copy[i] = strdup(names[i]);
        if (!copy[i]) {
            free_names(copy, i);
            return bn_error(BN_ERR_NOMEM, "out of memory for %d class names", d->num_classes);
        }
    }
    free_names(d->class_names, d->num_classes);
    d->class_names = copy;
    return BN_OK;
}

void bn_dataset_gather(const bn_dataset *d, const int *indices, int n, float *x, float *y)
{
    const size_t size = bn_dataset_example_size(d);
    for (int i = 0; i < n; i++) {
        float *dst = x + (size_t)i * size;
        for (size_t j = 0; j < size; j++) dst[j] = bn_dataset_value(d, (size_t)indices[i], j);
        y[i] = (float)d->labels[indices[i]];
    }
}

/* splitmix64 (Steele, Lea and Flood, 2014): small, full-period, and defined purely by 64-bit
 * integer arithmetic, so a seed yields the same stream on every machine and compiler. */
static uint64_t splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* A uniform value in [0, bound): draws below 2^64 mod bound are rejected, since a plain modulo
 * would favour the small results. */
static uint64_t uniform_below(uint64_t *state, uint64_t bound)
{
    const uint64_t threshold = -bound % bound;
    uint64_t r;
    do r = splitmix64(state);
    while (r < threshold);
    return r % bound;
}

void bn_dataset_shuffle(int *order, int count, unsigned long long seed)
{
    uint64_t state = (uint64_t)seed;
    for (int i = 0; i < count; i++) order[i] = i;
    for (int i = count - 1; i > 0; i--) {
        int j = (int)uniform_below(&state, (uint64_t)i + 1);
        int t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
}

void bn_dataset_stats(const bn_dataset *d, double *mean, double *std)
{
    const size_t plane = (size_t)d->height * (size_t)d->width;
    for (int c = 0; c < d->channels; c++) {
        /* Sums per example first keep the running totals' rounding small on large sets. */
        double sum = 0, sq = 0;
        for (int e = 0; e < d->count; e++) {
            double s1 = 0, s2 = 0;
            for (size_t j = 0; j < plane; j++) {
                double v = bn_dataset_value(d, (size_t)e, (size_t)c * plane + j);
                s1 += v;
                s2 += v * v;
            }
            sum += s1;
            sq += s2;
        }
        double n = (double)d->count * (double)plane;
        mean[c] = n > 0 ? sum / n : 0;
        double var = n > 0 ? sq / n - mean[c] * mean[c] : 0;
        std[c] = var > 0 ? sqrt(var) : 0;
    }
}

void bn_dataset_class_counts(const bn_dataset *d, long *counts)
{
    memset(counts, 0, (size_t)d->num_classes * sizeof *counts);
    for (int i = 0; i < d->count; i++) counts[d->labels[i]]++;
}

bn_status bn_dataset_pad_to(const bn_dataset *in, int channels, int height, int width, bn_dataset *out)
{
    memset(out, 0, sizeof *out);
    if (!in->pixels || height < in->height || width < in->width || (in->channels != 1 && in->channels != channels))
        return bn_error(BN_ERR_USAGE, "cannot pad %dx%dx%d %s examples to %dx%dx%d", in->channels, in->height,
                        in->width, in->pixels ? "8-bit" : "float", channels, height, width);
    BN_TRY(bn_dataset_alloc(out, "padded copy", in->count, channels, height, width, in->num_classes, 0));
    const int top = (height - in->height) / 2, left = (width - in->width) / 2;
    const size_t in_plane = (size_t)in->height * in->width, plane = (size_t)height * width;
    for (int e = 0; e < in->count; e++)
        for (int c = 0; c < channels; c++) {
            const unsigned char *src = in->pixels + ((size_t)e * in->channels + (in->channels == 1 ? 0 : c)) * in_plane;
            unsigned char *dst = out->pixels + ((size_t)e * channels + c) * plane;
            for (int r = 0; r < in->height; r++)
                memcpy(dst + (size_t)(top + r) * width + left, src + (size_t)r * in->width, (size_t)in->width);
        }
    memcpy(out->labels, in->labels, (size_t)in->count * sizeof *in->labels);
    bn_status s = in->class_names ? bn_dataset_set_class_names(out, in->class_names) : BN_OK;
    if (s != BN_OK) bn_dataset_free(out);
    return s;
}

bn_status bn_dataset_split_tail(bn_dataset *d, int n, bn_dataset *out)
{
    memset(out, 0, sizeof *out);
    if (n <= 0 || n >= d->count)
        return bn_error(BN_ERR_USAGE, "holdout = %d: keep 1..%d of the %d training examples", n, d->count - 1,
                        d->count);
    int keep = d->count - n;
    BN_TRY(bn_dataset_alloc(out, "holdout", n, d->channels, d->height, d->width, d->num_classes, d->values != NULL));
    size_t size = bn_dataset_example_size(d);
    if (d->values) memcpy(out->values, d->values + (size_t)keep * size, (size_t)n * size * sizeof *d->values);
    else memcpy(out->pixels, d->pixels + (size_t)keep * size, (size_t)n * size);
    memcpy(out->labels, d->labels + keep, (size_t)n * sizeof *d->labels);
    if (d->class_names) {
        bn_status s = bn_dataset_set_class_names(out, d->class_names);
        if (s != BN_OK) {
            bn_dataset_free(out);
            return s;
        }
    }
    /* The kept part keeps its buffers: the tail is simply no longer counted. */
    d->count = keep;
    return BN_OK;
}
