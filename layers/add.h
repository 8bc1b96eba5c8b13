/* add.h - the add layer's private state, shared by add.c (keys, shapes, CPU path) and add.cu
 * (GPU path), and its GPU entry points.
 *
 * y = sum over inputs of coeff[j] * x[j], added in input order; with every coefficient 1 (the
 * default) y = x[0] + x[1] + ... without a multiply. Both paths compute each element with the
 * same rounded operations in the same order, so the CPU and the GPU agree bit for bit. */
#ifndef BN_ADD_H
#define BN_ADD_H

#include "core/layer.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct add_priv {
    int num_coeffs;              /* 0: every coefficient is 1 */
    float coeff[BN_MAX_INPUTS];  /* per input, in input order */
    bn_layer *relu_after;        /* on a device: the ReLU after the layer whose passes the layer's
                                    kernels do (bn_add_fuse_relu), or NULL */
} add_priv;

/* The coefficient of input j. */
static inline float bn_add_coeff(const add_priv *a, int j)
{
    return a->num_coeffs ? a->coeff[j] : 1.0f;
}

bn_status bn_add_forward_gpu(bn_layer *l, const bn_pass *p);
bn_status bn_add_backward_gpu(bn_layer *l, const bn_pass *p);

/* Takes both passes of the ReLU that alone reads the layer's output (after = 1): the forward
 * kernel writes the ReLU's output instead of the sum (which nothing else reads), and the
 * backward kernel reads the ReLU's output gradient, masked where its output is 0, so that
 * neither the sum nor its gradient is written on the device. Returns those BN_FUSED_* bits. */
int bn_add_fuse_relu(bn_layer *l, bn_layer *relu, int after);

#ifdef __cplusplus
}
#endif
#endif
