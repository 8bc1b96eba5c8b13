/* dropout.h - the dropout layer's private state, shared by dropout.c (setup, CPU path) and
 * dropout.cu (GPU path), and its GPU entry points.
 *
 * The GPU draws its mask with cuRAND (Philox) seeded from (run seed, layer index, step), the
 * CPU with bn_rng from the same triple: each path repeats its own masks exactly (resume,
 * replay, gradient checks), but the two paths drop different elements. */
#ifndef BN_DROPOUT_H
#define BN_DROPOUT_H

#include <stddef.h>

#include "core/layer.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dropout_priv {
    float rate;
    float *mask;        /* CPU: 0 or 1 / (1 - rate) per element of the last training forward */
    size_t mask_cap;    /* elements mask holds */
    int masked;         /* the last forward (either path) applied the mask (training) */
    double per_example; /* elements of one example, from setup */
    float *dev_mask;    /* GPU: the same mask, input capacity floats; NULL until the first
                           GPU training forward */
} dropout_priv;

bn_status bn_dropout_forward_gpu(bn_layer *l, const bn_pass *p);
bn_status bn_dropout_backward_gpu(bn_layer *l, const bn_pass *p);

/* Frees the device mask and sets d->dev_mask to NULL. */
void bn_dropout_gpu_release(dropout_priv *d);

#ifdef __cplusplus
}
#endif
#endif
