/* idx.h - MNIST-style datasets read from IDX files (raw or gzip-compressed), plus the small
 * helpers a training loop needs to walk them: a seeded shuffle and a gather into floats. */
#ifndef BN_IDX_H
#define BN_IDX_H

#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Number of classes of MNIST and Fashion-MNIST; labels at or above it are rejected rather than
 * widening the class count, so a corrupt label cannot silently change a model's output size. */
#define BN_IDX_NUM_CLASSES 10

typedef struct bn_dataset {
    int count;                     /* number of examples */
    int channels, height, width;   /* channels is 1 for IDX images */
    int num_classes;               /* always BN_IDX_NUM_CLASSES */
    unsigned char *pixels;         /* count*channels*height*width bytes, row-major, owned here */
    unsigned char *labels;         /* count bytes, each below num_classes, owned here */
} bn_dataset;

/* Loads an IDX image file (magic 0x00000803) and its label file (0x00000801), each raw or gzip,
 * keeping the first `limit` examples (all when limit <= 0). The whole of both files is checked
 * even when a limit applies. *out is overwritten (not freed) and owns the buffers on success;
 * on error it is left zeroed. */
bn_status bn_idx_load_pair(const char *images_path, const char *labels_path, int limit,
                           bn_dataset *out);

/* Loads the train (train != 0) or test split from DIR/{train,t10k}-{images-idx3,labels-idx1}-ubyte,
 * preferring the .gz name over the raw one; ownership as for bn_idx_load_pair. */
bn_status bn_dataset_load(const char *dir, int train, int limit, bn_dataset *out);

/* Frees the dataset's buffers and zeroes it; safe on a zeroed dataset and when called twice. */
void bn_dataset_free(bn_dataset *d);

/* Copies the examples at indices[0..n) (each in 0..count-1) into caller-owned x
 * (n*channels*height*width floats, pixel/255 in [0,1]) and y (n floats, the class index). */
void bn_dataset_gather(const bn_dataset *d, const int *indices, int n, float *x, float *y);

/* Fills caller-owned order[0..count) with a permutation of 0..count-1 determined by seed alone,
 * identical on every machine and compiler. */
void bn_dataset_shuffle(int *order, int count, unsigned long long seed);

#ifdef __cplusplus
}
#endif
#endif
