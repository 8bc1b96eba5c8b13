/* conv_first.h - a convolution's filter pass done by the data pass of the convolution after it,
 * across the 2x2 max pooling between them (conv_pooled.h), where the first needs no input
 * gradient (a network's first layer: LeNet's conv1 under conv2; fusion.c's rule, the layers'
 * bn_conv2d_fuse_filter_before).
 *
 * The second layer's data pass writes its input gradient, which is the pooling's output gradient:
 * the pooled gradient g that the first layer's filter pass reads through the pooling (the argmax
 * kernel's, conv_argmax.h). A data block that has just summed it for its 8 channels of one image
 * holds, for the first layer's 8 filters of those channels, that image's g; it stages the image's
 * input planes and its pooling's mask, and adds
 *   dW[o][c][ky][kx] += g[o][p] * x[c][r + ky][s + kx],  db[o] += g[o][p]
 * over the pooled cells p, (r, s) the cell of p's window that held the maximum, in FP32
 * multiply-adds. Its sums over its images are one span's partial sums (the block's image column
 * is the span), which the first layer's backward pass adds up in span order
 * (bn_direct_finish_filter) instead of running a filter pass: one pass fewer on the step's last
 * chain, from data the block already holds. The tensor cores' data pass does it
 * (conv_tensor.cu). */
#ifndef BN_CONV_FIRST_H
#define BN_CONV_FIRST_H

#include <stddef.h>

typedef struct bn_first_filter {
    const float *x;            /* the first layer's input, [n][c][h][w] */
    const unsigned char *mask; /* its pooling's argmax mask, [n][filters][ph][pw]: the second
                                  layer's input planes */
    float *parts;              /* [spans][filters * c * k * k, then filters]: each span's sums */
    int c, h, w, k, pad;       /* the first layer's input and window (stride 1) */
    int hp, wv;                /* the input rows and columns a window at a maximum reaches */
    int spans;                 /* the data pass's blocks along the images */
} bn_first_filter;

/* Threads a data block needs for the first layer's sums: one per (filter of 8, input channel,
 * window row), at least once over. */
#define BN_FIRST_ITEMS(c, k) (8 * (c) * (k))

#ifdef __CUDACC__
#define BN_FIRST_HD __host__ __device__
#else
#define BN_FIRST_HD
#endif

/* Floats of one image's stage in a data block (conv_first.cuh): the pooled gradient of the 8
 * filters [8][pp], their masks (bytes, to a whole 16 bytes), the input planes [c][hp][wv]. */
static BN_FIRST_HD inline size_t bn_first_stage_floats(int pp, const bn_first_filter *f)
{
    return 8 * (size_t)pp + (2 * (size_t)pp + 3) / 4 * 4 + (size_t)f->c * f->hp * f->wv;
}

#endif
