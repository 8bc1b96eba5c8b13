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
} add_priv;

/* The coefficient of input j. */
static inline float bn_add_coeff(const add_priv *a, int j)
{
    return a->num_coeffs ? a->coeff[j] : 1.0f;
}

bn_status bn_add_forward_gpu(bn_layer *l, const bn_pass *p);
bn_status bn_add_backward_gpu(bn_layer *l, const bn_pass *p);

#ifdef __cplusplus
}
#endif
#endif
