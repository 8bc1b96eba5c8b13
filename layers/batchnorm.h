/* batchnorm.h - the batchnorm layer's private state, shared by batchnorm.c (keys, shapes, CPU
 * path) and batchnorm.cu (GPU path), and its GPU entry points.
 *
 * Per channel c over the batch and the plane (after a dense layer, whose output is F x 1 x 1,
 * a channel is a feature): in training, with the batch's mean and biased variance,
 *     y = (x - mean) / sqrt(var + eps) * weight + bias,
 * and the running averages move towards the batch's: running = (1 - momentum) * running +
 * momentum * batch value, with the unbiased variance (PyTorch's convention, its `momentum` 0.1
 * and `eps` 1e-5 by default). In evaluation the running averages stand in for the batch's.
 * Sums are taken in double on both paths, so CPU and GPU agree to float rounding. */
#ifndef BN_BATCHNORM_H
#define BN_BATCHNORM_H

#include "core/layer.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct batchnorm_priv {
    double momentum, eps;
    int channels, plane;   /* from setup: C and H x W */
    int trained;           /* the last forward used the batch's statistics */
    float *mean, *inv_std; /* CPU: the last training forward's, per channel (for backward) */
    double *dev_sums;      /* GPU scratch: partial sums of every (channel, part), then per
                              channel mean and 1 / sqrt(var + eps); NULL until the first GPU pass */
    int dev_parts;         /* parts per channel the scratch was sized for */
    bn_layer *relu_after;  /* a ReLU layer whose GPU forward this layer's does (fuse_gpu) */
    int relu_back;         /* and its backward too: the layer's output is not stored, and its
                              backward reads the ReLU's output gradient, masked where the
                              output, recomputed from the input, is not above 0 */
    bn_layer *relu_before; /* a ReLU layer whose GPU backward this layer's does (fuse_gpu) */
    int dev_fused;         /* GPU: whether the one-kernel passes may run: 0 not yet asked, 1
                              yes, -1 no (the device has no clusters), -2 no (it refused one) */
    long fused_passes;     /* GPU passes that ran as one kernel, and as two (sums, then the */
    long split_passes;     /* elements): what the tests check of the choice */
} batchnorm_priv;

bn_status bn_batchnorm_forward_gpu(bn_layer *l, const bn_pass *p);
bn_status bn_batchnorm_backward_gpu(bn_layer *l, const bn_pass *p);

/* bn_layer_ops.fuse_gpu: the normalization writes a ReLU layer's output after it instead of its
 * own, and its backward pass does the ReLU's (after = 1), or the input gradient also a ReLU
 * layer's input gradient before it (after = 0). */
int bn_batchnorm_fuse_relu(bn_layer *l, bn_layer *relu, int after);

/* Frees the device scratch. */
void bn_batchnorm_gpu_release(batchnorm_priv *b);

#ifdef __cplusplus
}
#endif
#endif
