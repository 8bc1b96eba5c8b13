/* conv_fma.h - blobnet's data-pass kernel of FP32 multiply-adds in 8 x 8 register tiles
 * (conv_fma.cu), the conv2d layer's eighth family of own kernels, which runs the backward-data
 * pass alone.
 *
 * The input gradient is taken as a matrix product and a sum of shifted planes: for each image,
 * T[(c, ky, kx)][q] = sum over filters f of w[f][c][ky][kx] * dy[f][q], over dy's positions q
 * (no zero border is multiplied), then dx[c][y][x] = sum over the window's taps of T[(c, ky,
 * kx)][(y + pad - ky, x + pad - kx)]. A block of 8 warps takes a tile of 32 WR rows (cb input
 * channels' k x k taps) by 64 (8 / WR) positions (ib whole images), each thread 8 rows by 8
 * positions, so that every filter's step is four 16-byte shared loads for 64 multiply-adds.
 * The block stages its filters' weights and dy (through a fused 2x2 max pooling where one reads
 * the layer's output: conv_pooled.h) in chunks of filters, then keeps its tile in shared memory
 * and sums each dx cell's taps from it in a fixed order, so the result is deterministic and is
 * FP32's own products (not split into TF32 pieces). A fused ReLU's input gradient is written
 * beside dx (conv_relu.h). Stride 1, windows up to 7 wide, images of at most 512 dy positions;
 * other shapes clear ok. */
#ifndef BN_CONV_FMA_H
#define BN_CONV_FMA_H

#include <stddef.h>

#include "conv_pooled.h"
#include "conv_relu.h"
#include "core/status.h"
#include "im2col.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Launch shape of the data kernel. */
typedef struct bn_fma_data {
    int wr;           /* warps along the rows: 4, 2 or 1 (and 8 / wr along the positions) */
    int rm, pn;       /* the block's tile: 32 wr rows by 64 (8 / wr) positions */
    int cb, groups;   /* input channels a block (cb k k rows of the tile), blocks along them */
    int q, ib;        /* dy positions an image (oh ow), images a block (ib q <= pn) */
    int fc;           /* filters staged at once */
    int blocks;       /* blocks along the images */
    size_t smem;      /* bytes */
} bn_fma_data;

typedef struct bn_fma_plan {
    int n, filters;
    bn_conv_geom g;
    int data_ok;
    bn_fma_data data;
} bn_fma_plan;

/* Fills a plan for a batch of n; sms is the device's multiprocessor count. Never fails: a shape
 * the kernel cannot run has data_ok cleared. */
void bn_fma_plan_make(bn_fma_plan *p, const bn_conv_geom *g, int filters, int n, int sms);

/* The data pass on stream (a cudaStream_t): writes dx from dy (or, with `pooled` not NULL, from
 * the pooling's gradient and mask, dy then not read) and the weights, and a fused ReLU's input
 * gradient where relu->out is not NULL. */
bn_status bn_fma_backward_data(const bn_fma_plan *p, void *stream, const float *dy, const bn_pooled_dy *pooled,
                               const float *w, float *dx, const bn_conv_relu *relu);

#ifdef __cplusplus
}
#endif
#endif
