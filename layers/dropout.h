/* dropout.h - the dropout layer's private state, shared by dropout.c (setup, CPU path) and
 * dropout.cu (GPU path), its GPU entry points, and the draw both paths make.
 *
 * Whether an element is kept is a counter-based hash (core/counter_rng.h) of (run seed, layer
 * index, step, the element's place in the global batch): the CPU and the GPU drop the same
 * elements, a resumed, replayed or repeated step drops the same ones again, and the GPU reads the
 * step from device memory (bn_pass.dev_step), so that a training step captured in a CUDA graph
 * draws a fresh mask at each replay. */
#ifndef BN_DROPOUT_H
#define BN_DROPOUT_H

#include <stddef.h>
#include <stdint.h>

#include "core/counter_rng.h"
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

/* The key of a layer's draws at a step: mix(mix(mix(seed) ^ layer) ^ step). */
BN_HOST_DEVICE static inline uint64_t bn_dropout_key(uint64_t seed, int layer, uint64_t step)
{
    return bn_counter_mix(bn_counter_mix(bn_counter_mix(seed) ^ (uint64_t)layer) ^ step);
}

/* Whether the element at `place` of the global batch (offset * per_example + its index) is kept:
 * the top 24 bits of mix(key ^ place) as a uniform u in [0, 1), kept when u >= rate, so with
 * probability 1 - rate (to within 2^-24). */
BN_HOST_DEVICE static inline int bn_dropout_keeps(uint64_t key, uint64_t place, float rate)
{
    return bn_counter_uniform(bn_counter_mix(key ^ place)) >= rate;
}

bn_status bn_dropout_forward_gpu(bn_layer *l, const bn_pass *p);
bn_status bn_dropout_backward_gpu(bn_layer *l, const bn_pass *p);

/* Frees the device mask and sets d->dev_mask to NULL. */
void bn_dropout_gpu_release(dropout_priv *d);

#ifdef __cplusplus
}
#endif
#endif
