/* activation.h - the private state of the five activation types, shared by activation.c
 * (parse, setup, CPU path) and activation.cu (GPU path), and their GPU entry points. */
#ifndef BN_ACTIVATION_H
#define BN_ACTIVATION_H

#include "core/layer.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum act_kind { ACT_RELU, ACT_SIGMOID, ACT_TANH, ACT_LEAKY, ACT_ELU } act_kind;

typedef struct act_priv {
    act_kind kind;
    float a;            /* leaky_relu: slope; elu: alpha */
    double per_example; /* elements of one example, from setup */
} act_priv;

/* All five as elementwise kernels with the CPU path's formulas, on float blobs or (under
 * --precision bf16) BF16 ones, the arithmetic in float either way; no GPU state. */
bn_status bn_activation_forward_gpu(bn_layer *l, const bn_pass *p);
bn_status bn_activation_backward_gpu(bn_layer *l, const bn_pass *p);

#ifdef __cplusplus
}
#endif
#endif
