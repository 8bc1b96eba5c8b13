/* activation.h - the private state of the five activation types, shared by activation.c
 * (parse, setup, CPU path) and activation.cu (GPU path), and their GPU entry points. */
#ifndef BN_ACTIVATION_H
#define BN_ACTIVATION_H

#include "layer.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum act_kind { ACT_RELU, ACT_SIGMOID, ACT_TANH, ACT_LEAKY, ACT_ELU } act_kind;

typedef struct act_priv {
    act_kind kind;
    float a;            /* leaky_relu: slope; elu: alpha */
    double per_example; /* elements of one example, from setup */
    void *act_desc;     /* cudnnActivationDescriptor_t, made on the first GPU pass (relu, sigmoid, tanh) */
} act_priv;

/* relu, sigmoid and tanh through cuDNN; leaky_relu and elu as kernels (activation.cu says why). */
bn_status bn_activation_forward_gpu(bn_layer *l, const bn_pass *p);
bn_status bn_activation_backward_gpu(bn_layer *l, const bn_pass *p);

/* Frees the activation descriptor and sets p->act_desc to NULL. */
void bn_activation_gpu_release(act_priv *p);

#ifdef __cplusplus
}
#endif
#endif
