/* pool.h - the private state of maxpool and avgpool, shared by pool.c (setup, CPU path)
 * and pool.cu (GPU path through cuDNN), and their GPU entry points. */
#ifndef BN_POOL_H
#define BN_POOL_H

#include <stddef.h>

#include "layer.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pool_priv {
    int size, stride, pad;
    int c, h, w, oh, ow;  /* from setup */
    int *argmax;          /* maxpool on the CPU: input cell (within its plane) of each output cell */
    size_t argmax_cap;    /* elements argmax holds */
    void *pool_desc;      /* cudnnPoolingDescriptor_t, made on the first GPU pass */
} pool_priv;

/* Max pooling with CUDNN_POOLING_MAX_DETERMINISTIC; average pooling with
 * CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING, the CPU's divisor. */
bn_status bn_maxpool_forward_gpu(bn_layer *l, const bn_pass *p);
bn_status bn_maxpool_backward_gpu(bn_layer *l, const bn_pass *p);
bn_status bn_avgpool_forward_gpu(bn_layer *l, const bn_pass *p);
bn_status bn_avgpool_backward_gpu(bn_layer *l, const bn_pass *p);

/* Frees the pooling descriptor and sets p->pool_desc to NULL. */
void bn_pool_gpu_release(pool_priv *p);

#ifdef __cplusplus
}
#endif
#endif
