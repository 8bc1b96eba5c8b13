/* softmax_ce.h - the softmax_ce loss layer's private state, shared by softmax_ce.c (setup,
 * CPU path) and softmax_ce.cu (GPU path), and its GPU entry points.
 *
 * On the GPU the loss and the correct count stay on the device (pass->metrics); a label that
 * is not a class index cannot raise an error there without a host round trip, so its row's
 * loss and gradient become NaN, which the trainer's finiteness check reports. */
#ifndef BN_SOFTMAX_CE_H
#define BN_SOFTMAX_CE_H

#include "layer.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct softmax_priv {
    int classes;     /* from setup */
    double *dev_rows; /* device: per-row loss then per-row correct flag, 2 x capacity rows,
                         then the count of blocks done (see softmax_ce.cu); NULL until the
                         first GPU forward */
} softmax_priv;

bn_status bn_softmax_ce_forward_gpu(bn_layer *l, const bn_pass *p);
bn_status bn_softmax_ce_backward_gpu(bn_layer *l, const bn_pass *p);

/* Frees the device scratch rows and sets p->dev_rows to NULL. */
void bn_softmax_ce_gpu_release(softmax_priv *p);

#ifdef __cplusplus
}
#endif
#endif
