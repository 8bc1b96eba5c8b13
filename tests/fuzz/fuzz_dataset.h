/* fuzz_dataset.h - what the dataset readers' targets do with a set that loaded: walk it as the
 * trainer does (the seeded shuffle, then every example gathered once), so that a count, shape or
 * label that disagrees with the buffers shows. */
#ifndef BN_FUZZ_DATASET_H
#define BN_FUZZ_DATASET_H

#include <stdlib.h>

#include "dataset.h"

static inline void fuzz_walk_dataset(const bn_dataset *d)
{
    size_t example = bn_dataset_example_size(d);
    int *order = malloc((size_t)d->count * sizeof *order);
    float *x = malloc(example * sizeof *x), y;
    if (!order || !x) abort();
    bn_dataset_shuffle(order, d->count, 42);
    for (int i = 0; i < d->count; i++) {
        bn_dataset_gather(d, &order[i], 1, x, &y);
        if (y < 0 || y >= d->num_classes) abort();
    }
    for (int i = 0; d->class_names && i < d->num_classes; i++)
        if (!d->class_names[i] || !d->class_names[i][0]) abort();
    free(order);
    free(x);
}

#endif
