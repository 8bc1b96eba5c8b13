/* prelu.h - the PReLU example layer's private state, shared by prelu.c (options, shapes, CPU
 * path, plugin entry point) and prelu.cu (GPU path), and its GPU entry points. */
#ifndef BN_PRELU_H
#define BN_PRELU_H

#include "blobnet.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct prelu_priv {
    float init_slope;  /* the slopes' starting value */
    int channels;      /* from setup: one slope per channel */
    int spatial;       /* h * w of one channel */
} prelu_priv;

/* The ops table, for a program that links the example in and registers it itself. */
extern const bn_layer_ops bn_prelu_ops;

/* y = x > 0 ? x : slope[c] * x and its gradients, as kernels on the context stream. */
bn_status bn_prelu_forward_gpu(bn_layer *l, const bn_pass *p);
bn_status bn_prelu_backward_gpu(bn_layer *l, const bn_pass *p);

#ifdef __cplusplus
}
#endif
#endif
