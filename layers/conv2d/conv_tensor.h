/* conv_tensor.h - blobnet's tensor-core convolution kernels (conv_tensor.cu), the conv2d layer's
 * fourth family of own kernels, all three passes as matrix products on the tensor cores with
 * FP32 accuracy: every operand is split into a TF32 value and a TF32 remainder, and three
 * products (remainder x value, value x remainder, value x value) are summed, which keeps about
 * the 24 bits of an FP32 product. A plan made with tf32 takes the value x value product alone
 * (TF32's 11 bits, three times fewer products).
 *
 * - forward: per image (two at once in a block when the batch has more than the device's
 *   multiprocessors, or a share of an image's positions when it has fewer), positions x output
 *   channels summed over input channels x taps; up to 64 output channels and 512 positions per
 *   image.
 * - backward data (stride 1, windows up to 7, at most 4096 positions of dy): per image and
 *   tap, positions of dy x 8 input channels summed over the filters, scattered into dx at the
 *   tap's shift; no zero border is multiplied.
 * - backward filter (up to 64 filters): filters x (input channels x taps, plus a bias column)
 *   summed over a span of images' positions, with partial sums per span that
 *   bn_direct_finish_filter adds.
 *
 * The forward pass can write a 2x2 max pooling's output instead of its own, and the data and
 * filter passes can read dy through that pooling (conv_pooled.h). Every sum
 * is taken in a fixed order (no atomics), so the results are deterministic. Shapes a pass
 * cannot run clear its ok flag. */
#ifndef BN_CONV_TENSOR_H
#define BN_CONV_TENSOR_H

#include <stddef.h>

#include "conv_pooled.h"
#include "core/status.h"
#include "im2col.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct bn_tensor_conv {
    int ci, hi, wi, pad, stride; /* input channels and size as stored, zero border, step */
    int co, ho, wo, k;           /* output channels and size, window */
    int ntiles;                  /* tiles of 8 output channels */
    int mgroups;                 /* groups of 32 positions (two tiles of 16) of an image */
    int mparts, mper;            /* blocks' shares of an image: mper groups each, one per warp */
    int ipi;                     /* images a block works on at once (whole images only) */
    int ksteps, splits;          /* 8-deep steps of the reduction; warps that share them */
    int slabs;                   /* the warps' sums an image keeps at once while they are added */
    int hp, wp;                  /* staged plane (wp a multiple of 4) */
    int threads, blocks;
    size_t a_off, tab_off, red_off; /* floats: staged planes (ipi images), offset tables, the warps' sums */
    size_t smem;                 /* bytes */
    int pools;                   /* can write a 2x2 max pooling's output: every share of an
                                    image starts on an even output row */
} bn_tensor_conv;

/* Launch shape of the backward-data kernel: blocks of k warps (warp ky: window row ky). */
typedef struct bn_tensor_data {
    bn_conv_geom g;              /* the forward layer's: dx is its input, dy its output */
    int filters;                 /* dy's channels */
    int ctiles;                  /* blocks along the input channels, 8 each */
    int kp, ws_row;              /* filters rounded up to 8; a filter's row of the weight tile */
    int mpasses, sa;             /* passes of 64 dy positions; staged dy row (a multiple of 64, + 8) */
    int th, tw, tps;             /* the warps' dx planes with their border, and their stride */
    int blocks;                  /* along the images */
    size_t a_off, p_off, smem;   /* floats: staged dy, the warps' planes; bytes */
} bn_tensor_data;

/* Launch shape of the backward-filter kernel. */
typedef struct bn_tensor_filter {
    bn_conv_geom g;
    int filters, mt;             /* filters, tiles of 16 of them (1..4) */
    int ntiles;                  /* tiles of 8 columns: c * k * k weights, then the bias */
    int nwarps, ksplit;          /* warps along the columns (4 tiles each), along the positions */
    int threads, groups;         /* per block; blocks along the columns */
    int span, spans;             /* images per block, blocks along the images */
    int kq, sa;                  /* positions rounded up to 8; staged dy row */
    int hp, wp;                  /* staged x plane */
    size_t x_off, q_off, smem;   /* floats: staged x planes, position offsets; bytes */
    size_t workspace;            /* bytes of partial sums */
} bn_tensor_filter;

typedef struct bn_tensor_plan {
    int n, filters;
    int products;                /* TF32 products per multiply: 3 (FP32 accuracy), 1 with tf32 */
    bn_conv_geom g;
    int fwd_ok, data_ok, filter_ok;
    bn_tensor_conv fwd;
    bn_tensor_data data;
    bn_tensor_filter filter;
    size_t workspace;            /* bytes of partial sums the filter pass needs */
    int beside_ok;               /* the two backward passes have shapes for running side by side, */
    bn_tensor_data data_beside;  /* each with half the blocks a multiprocessor holds of it, so */
    bn_tensor_filter filter_beside; /* that they share the multiprocessors (else copies of the above) */
} bn_tensor_plan;

/* Fills a plan for a batch of n; sms is the device's multiprocessor count; tf32 nonzero: one
 * TF32 product per multiply (TF32 accuracy, as cuDNN's and cuBLAS's tensor-core math under the
 * tf32 option) instead of three. Never fails: a pass these kernels cannot run has its ok flag
 * cleared. */
void bn_tensor_plan_make(bn_tensor_plan *p, const bn_conv_geom *g, int filters, int n, int sms, int tf32);

/* forward writes y (bias added), or with `pooled` not NULL the 2x2 max pooling's output and
 * mask instead (y is then not written; p->fwd.pools must hold); data writes dx, filter adds
 * into dw and db and uses workspace (plan->workspace bytes); shapes as in conv_direct.h. With
 * `beside`, the two backward passes run side by side, each on the plan's shape for that
 * (data_beside, filter_beside). */
bn_status bn_tensor_forward(const bn_tensor_plan *p, void *stream, const float *x, const float *w, const float *b,
                            float *y, const bn_pooled_out *pooled);
bn_status bn_tensor_backward_data(const bn_tensor_plan *p, void *stream, const float *dy,
                                  const bn_pooled_dy *pooled, const float *w, float *dx, int beside);
bn_status bn_tensor_backward_filter(const bn_tensor_plan *p, void *stream, const float *x, const float *dy,
                                    const bn_pooled_dy *pooled, float *dw, float *db, float *workspace, int beside);

/* Whether the data pass (pass 1) or the filter pass (pass 2) of the plan can read dy through a
 * 2x2 max pooling (the `pooled` argument above; conv_pooled.h): its two images' pooled
 * gradients and masks must fit in shared memory beside the plan's buffers. */
int bn_tensor_pooled_fits(const bn_tensor_plan *p, int pass);

#ifdef __cplusplus
}
#endif
#endif
