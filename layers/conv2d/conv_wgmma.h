/* conv_wgmma.h - blobnet's convolution forward pass on Hopper's warpgroup products (wgmma, sm_90a;
 * conv_wgmma.cu), the conv2d layer's eighth family of own kernels, FP32-accurate as the tensor-core
 * family is (conv_tensor.h): every operand split into a TF32 value and remainder and three products
 * summed, or the value product alone under tf32.
 *
 * The pass is one implicit matrix product: rows are the batch's output positions (image by image),
 * columns the filters (up to 64), and the summed index input channels x taps. A block of one
 * warpgroup takes 64 rows and every column. Its copies gather the rows' inputs and the filters'
 * weights 32 of the summed index at a time, four such slices in flight (cp.async, zeros outside the
 * image), and for each slice the block splits the values into the layout the warpgroup's products
 * read from shared memory, then issues them (m64nNk8, N the filters rounded up to 8) while the next
 * slices land. The epilogue adds the bias and writes the output or, where each block's rows are
 * whole 2x2 windows, the max pooling's output and mask (conv_pooled.h). Sums are taken in a fixed
 * order, so results repeat bit for bit.
 *
 * The kernels exist where the build compiles this file for sm_90a (the Makefile does when its
 * architectures include 90) and run on devices of compute capability 9.0 only. */
#ifndef BN_CONV_WGMMA_H
#define BN_CONV_WGMMA_H

#include <stddef.h>

#include "conv_pooled.h"
#include "core/status.h"
#include "im2col.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A block: two warpgroups that issue the products, each for a tile of 8x8 output positions, and two
 * that stage for them; the stages of split weights (a tap's each) between the two sides. */
#define BN_WGMMA_THREADS 512
#define BN_WGMMA_B_STAGES 3
/* The most shared memory a block takes (the device's limit). */
#define BN_WGMMA_SMEM_MAX (227 * 1024)

typedef struct bn_wgmma_plan {
    const char *why;             /* NULL: the forward kernel runs this shape; else why not */
    int products;                /* TF32 products per multiply: 3, or 1 under tf32 */
    int ci, hi, wi, pad;         /* input channels and size, zero border (stride 1) */
    int co, ho, wo, k;           /* filters, output size, window */
    int n, ntiles;               /* batch; tiles of 8 filters (1..8) */
    int groups, win;             /* channel groups of 4 (even), a tile's input window (8 + k - 1) */
    int tiles, blocks;           /* 8x8 output tiles of the batch; blocks of two */
    int pools;                   /* can write a 2x2 max pooling's output */
    size_t b_at, w_at, x_at;     /* bytes into shared memory: the split weights' stages, the raw
                                    weights, the raw windows (the split planes, then the sums, at 0) */
    size_t smem;                 /* bytes of dynamic shared memory a block takes */
} bn_wgmma_plan;

/* Fills a plan for a batch of n on a device of compute capability cc (major * 10 + minor; 0:
 * unknown); tf32 nonzero: one TF32 product per multiply. No device work. */
void bn_wgmma_plan_make(bn_wgmma_plan *p, const bn_conv_geom *g, int filters, int n, int cc, int tf32);

/* Whether this build holds the kernels (conv_wgmma.cu compiled for sm_90a); 0 without CUDA. */
int bn_wgmma_built(void);

/* y = the convolution of x by w plus b (b may be NULL), or with `pooled` the 2x2 max pooling's
 * output and mask instead (p->pools must hold); NCHW, weights [filters][c][k][k]. */
bn_status bn_wgmma_forward(const bn_wgmma_plan *p, void *stream, const float *x, const float *w, const float *b,
                           float *y, const bn_pooled_out *pooled);

#ifdef __cplusplus
}
#endif
#endif
