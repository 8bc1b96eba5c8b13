/* batchrms.h - the batch-RMS example layer's private state, shared by batchrms.c (options,
 * shapes, CPU path, plugin entry point) and batchrms.cu (GPU path), and its GPU entry points. */
#ifndef BN_BATCHRMS_H
#define BN_BATCHRMS_H

#include "blobnet.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct batchrms_priv {
    double momentum;  /* weight of the newest batch in the running mean square */
    double eps;       /* added to the mean square before the square root */
    int channels;     /* from setup: one statistic and one gain per channel */
    int plane;        /* h * w of one channel */
    float *scale;     /* per channel, host: 1 / sqrt(mean square + eps) of the last training pass */
    float *dev;       /* device scratch, 2 x channels: the scale, then backward's correction */
} batchrms_priv;

/* The ops table, for a program that links the example in and registers it itself. */
extern const bn_layer_ops bn_batchrms_ops;

/* The passes as kernels on the context stream. */
bn_status bn_batchrms_forward_gpu(bn_layer *l, const bn_pass *p);
bn_status bn_batchrms_backward_gpu(bn_layer *l, const bn_pass *p);

#ifdef __cplusplus
}
#endif
#endif
