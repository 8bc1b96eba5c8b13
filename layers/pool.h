/* pool.h - the private state of maxpool and avgpool, shared by pool.c (setup, CPU path)
 * and pool.cu (GPU path, blobnet's own kernels), and their GPU entry points. */
#ifndef BN_POOL_H
#define BN_POOL_H

#include <stddef.h>

#include "core/layer.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pool_priv {
    int size, stride, pad;
    int global;           /* avgpool over each whole plane (global average pooling): one output
                             cell per channel; size, stride and pad unused */
    int c, h, w, oh, ow;  /* from setup */
    int *argmax;          /* maxpool on the CPU: input cell (within its plane) of each output cell */
    size_t argmax_cap;    /* elements argmax holds */
    unsigned char *dev_mask; /* maxpool on a device: per output cell, the window cell that held
                                the maximum (row * size + column from the window's unclipped
                                corner), written by the forward pass (the pooling's, or the
                                convolution's it is fused with: bn_conv2d_fuse_next) and read by
                                the backward pass instead of the input; made on the first forward
                                pass outside a graph capture, or at the fusion; NULL before, and
                                for windows of more than 256 cells */
} pool_priv;

/* The CPU path's results bit for bit: the same max tie rule and mean divisor, and backward
 * adding into each input cell in the CPU's order. Backward overwrites in_grad, without
 * atomics; the max pool's argmax is read from dev_mask when the layer has one, else
 * recomputed from the input. */
bn_status bn_maxpool_forward_gpu(bn_layer *l, const bn_pass *p);
bn_status bn_maxpool_backward_gpu(bn_layer *l, const bn_pass *p);
bn_status bn_avgpool_forward_gpu(bn_layer *l, const bn_pass *p);
bn_status bn_avgpool_backward_gpu(bn_layer *l, const bn_pass *p);

#ifdef __cplusplus
}
#endif
#endif
