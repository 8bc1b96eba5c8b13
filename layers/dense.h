/* dense.h - the dense layer's private state, shared by dense.c (setup, CPU path) and
 * dense.cu (GPU path), and its GPU entry points. The GPU path keeps no state of its own. */
#ifndef BN_DENSE_H
#define BN_DENSE_H

#include "layer.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dense_priv {
    int outputs;
    int init;   /* index into dense.c's init_names */
    int inputs; /* from setup */
} dense_priv;

/* Y = X W^T + b and its gradients through cuBLAS on the context stream. */
bn_status bn_dense_forward_gpu(bn_layer *l, const bn_pass *p);
bn_status bn_dense_backward_gpu(bn_layer *l, const bn_pass *p);

#ifdef __cplusplus
}
#endif
#endif
