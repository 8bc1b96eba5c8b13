/* dataset.h - a labelled image set in memory, whatever format it came from, and the table of
 * formats that read one. A format is a reader (datasets/NAME.c) plus one line in the table
 * (datasets/formats.c); the CLI's --dataset names, its help and the model file's [data] check
 * all come from the table. */
#ifndef BN_DATASET_H
#define BN_DATASET_H

#include <stdint.h>

#include "core/layer.h"
#include "core/options.h"
#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Labels are 16-bit: up to this many classes. */
#define BN_DATASET_MAX_CLASSES 65535

/* Every count, offset and example index stays an int: no set holds more bytes than this. */
#define BN_DATASET_MAX_BYTES ((uint64_t)INT32_MAX)

typedef struct bn_dataset {
    int count;                     /* number of examples */
    int channels, height, width;   /* one example, NCHW */
    int num_classes;               /* labels are below it */
    unsigned char *pixels;         /* count*C*H*W bytes, 0..255 (scaled by 1/255 when fed); owned
                                    * here; NULL when values holds the data */
    float *values;                 /* count*C*H*W floats, fed as they are, for formats that give
                                    * floats; owned here; NULL when pixels holds the data */
    uint16_t *labels;              /* count labels, each below num_classes; owned here */
    char **class_names;            /* num_classes names (a folder's subfolders), or NULL; owned */
} bn_dataset;

/* What a reader is asked for. */
typedef struct bn_data_request {
    const char *format;   /* the table's name of the format, for messages */
    const char *path;     /* the file or folder: --data, [data] path, or the format's default */
    bn_options *opts;     /* the format's keys ([data] or --data-option); a reader marks what it
                           * reads, and the caller reports any left unread */
    bn_shape fit;         /* the model's input, for formats that fit images to it (folder);
                           * all zero when no model is at hand (blobnet data) */
    int train;            /* 1: the training split, 0: the test split */
    int limit;            /* keep the first `limit` examples (<= 0: all); all are still checked */
    int quiet;            /* 1: no progress line */
} bn_data_request;

/* One line of the table. */
typedef struct bn_data_format {
    const char *name;          /* what --dataset and [data] format say */
    const char *reads;         /* what PATH names, for help: "a folder of IDX files" */
    const char *default_path;  /* where PATH defaults to; NULL when it must be given */
    const char *keys;          /* the format's keys for help ("label = fine|coarse"), or NULL */
    /* Reads one split into *out (zeroed on error; owned by the caller, bn_dataset_free). */
    bn_status (*load)(const bn_data_request *rq, bn_dataset *out);
    /* Writes both splits at path in this format, fitting the examples to what it holds where it
     * must (blobnet data --write); NULL when the format is only read. */
    bn_status (*save)(const bn_dataset *train, const bn_dataset *test, const char *path);
    /* Whether the set rq names decodes slowly enough to be kept in the data cache
     * (data_cache.h); NULL when it always does. */
    int (*cache_pays)(const bn_data_request *rq);
    int progress; /* 1: the reader prints a line unless quiet, and so does a copy from the cache */
} bn_data_format;

/* The table, in its order (for help). */
int bn_data_format_count(void);
const bn_data_format *bn_data_format_at(int i);

/* The format called name; a usage error naming `what` (the flag or file:line) and listing every
 * format otherwise. */
bn_status bn_data_format_find(const char *name, const char *what, const bn_data_format **out);

/* "mnist, fashion-mnist, idx, ..." into buf. */
void bn_data_format_list(char *buf, size_t cap);

/* Makes the folder path for a format's save: created if missing, and empty if it exists. */
bn_status bn_data_save_folder(const char *path);

/* Reads one split as rq says: from the data cache (data_cache.h) when it holds the decoded
 * set, else with the format's reader, then checks what was filled (shape, labels below the
 * classes) and keeps a decoded set in the cache. */
bn_status bn_data_load(const bn_data_format *f, const bn_data_request *rq, bn_dataset *out);

/* For readers: refuses a set of count examples of C x H x W (bytes_per_value each) whose size
 * passes BN_DATASET_MAX_BYTES or what the host may still take, naming `what`, before anything
 * is allocated or decoded. */
bn_status bn_dataset_check_size(const char *what, uint64_t count, int channels, int height, int width,
                                int bytes_per_value);

/* For readers: allocates d's pixels (or values with is_float) and labels for count examples of
 * the given shape, after bn_dataset_check_size; zero-filled. */
bn_status bn_dataset_alloc(bn_dataset *d, const char *what, int count, int channels, int height, int width,
                           int num_classes, int is_float);

/* Frees the dataset's buffers and zeroes it; safe on a zeroed dataset and when called twice. */
void bn_dataset_free(bn_dataset *d);

/* Elements of one example. */
static inline size_t bn_dataset_example_size(const bn_dataset *d)
{
    return (size_t)d->channels * (size_t)d->height * (size_t)d->width;
}

/* Copies the examples at indices[0..n) into caller-owned x (n*C*H*W floats: pixel/255, or the
 * values as they are) and y (n floats, the class index). */
void bn_dataset_gather(const bn_dataset *d, const int *indices, int n, float *x, float *y);

/* The value the loader feeds for element j of example e, before standardisation. */
static inline float bn_dataset_value(const bn_dataset *d, size_t e, size_t j)
{
    size_t at = e * bn_dataset_example_size(d) + j;
    /* A true division keeps 255 at exactly 1.0f, which a multiply by 1/255 does not promise. */
    return d->pixels ? (float)d->pixels[at] / 255.0f : d->values[at];
}

/* Fills caller-owned order[0..count) with a permutation of 0..count-1 determined by seed alone,
 * identical on every machine and compiler. */
void bn_dataset_shuffle(int *order, int count, unsigned long long seed);

/* Per-channel mean and standard deviation (population) of the values the loader feeds, over
 * every example: caller-owned mean[C] and std[C]. */
void bn_dataset_stats(const bn_dataset *d, double *mean, double *std);

/* Examples per class: caller-owned counts[num_classes]. */
void bn_dataset_class_counts(const bn_dataset *d, long *counts);

/* Moves the last n examples of *d (0 < n < d->count) into *out, a new set of the same shape and
 * classes (class names copied); d keeps the first count - n. */
bn_status bn_dataset_split_tail(bn_dataset *d, int n, bn_dataset *out);

/* A copy of in (8-bit pixels) made channels x height x width by centring each image on a zero
 * field at least as large as it (padding, never cropping) and repeating a single channel into
 * every channel; labels and class names copied. *out is the caller's (bn_dataset_free). */
bn_status bn_dataset_pad_to(const bn_dataset *in, int channels, int height, int width, bn_dataset *out);

/* Sets d's class names to a copy of names[0..num_classes). */
bn_status bn_dataset_set_class_names(bn_dataset *d, char *const *names);

#ifdef __cplusplus
}
#endif
#endif
