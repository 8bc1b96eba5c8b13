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

/* A block: two warpgroups that issue the products, each for 64 rows (BN_WGMMA_ROWS in all), and two
 * that stage the slices for them. The depth of a slice of the summed index; the weights' raw slices
 * in flight (cp.async) and the split slices between the two sides. */
#define BN_WGMMA_ROWS 128
#define BN_WGMMA_THREADS 512
#define BN_WGMMA_DEPTH 32
#define BN_WGMMA_RAW_STAGES 3
#define BN_WGMMA_SPLIT_STAGES 2
/* The longest summed index (channels x taps) a plan takes: its tables' shared memory. */
#define BN_WGMMA_MAX_K 2048
/* The most shared memory a block takes (the device's limit). */
#define BN_WGMMA_SMEM_MAX (227 * 1024)
/* The weights' raw rows (floats), 4 past a multiple of 32, so that the split's reads of 8 filters by
 * 4 k fall in distinct banks. */
#define BN_WGMMA_RAW_B_ROW 36
/* The split slice's cores (8 rows by 4 k, 128 bytes): CORE_K bytes apart along k, 16 past 128 so
 * that a warp's stores of 8 rows by 4 k fall in distinct banks, and CORE_ROWS apart along rows. */
#define BN_WGMMA_CORE_K 144
#define BN_WGMMA_CORE_ROWS (8 * BN_WGMMA_CORE_K)

/* Bytes of one split slice for nt tiles of filters: A's values and remainders, B's values and
 * remainders. */
static BN_POOLED_HD inline size_t bn_wgmma_split_bytes(int nt)
{
    return (size_t)2 * (BN_WGMMA_ROWS / 8 + nt) * BN_WGMMA_CORE_ROWS;
}

typedef struct bn_wgmma_plan {
    const char *why;             /* NULL: the forward kernel runs this shape; else why not */
    int products;                /* TF32 products per multiply: 3, or 1 under tf32 */
    int ci, hi, wi, pad, stride; /* input channels and size, zero border, step */
    int co, ho, wo, k;           /* filters, output size, window */
    int n, ntiles;               /* batch; tiles of 8 filters (1..8) */
    int K, slices;               /* summed index (ci k k) and its slices */
    int tiles;                   /* blocks: 128-row tiles of the n ho wo rows, each whole images */
    size_t raw_b_at, split_at, table_at; /* bytes into shared memory: the weights' raw slices, the
                                    split slices, the tables (the tile's images' planes at 0) */
    int pools;                   /* each tile holds whole 2x2 windows: can write a pooling's output
              */
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
