/* conv_tensor.h - blobnet's tensor-core convolution kernels (conv_tensor.cu), the conv2d layer's
 * fourth family of own kernels: the forward pass, and the backward-data pass read as the
 * convolution of dy with the transposed, rotated weights, each as one matrix product per image
 * (positions x output channels, summed over input channels x taps) on the tensor cores with
 * FP32 accuracy: every operand is split into a TF32 value and a TF32 remainder, and three
 * products (remainder x value, value x remainder, value x value) are summed, which keeps about
 * the 24 bits of an FP32 product. A block keeps the layer's weights in shared memory and takes
 * images (or shares of an image's positions) in turn; its warps share the reduction and add their sums in a fixed order, so the
 * results are deterministic. Up to 64 output channels and 512 positions per image; other shapes
 * clear the pass's ok flag. No weight-gradient pass. */
#ifndef BN_CONV_TENSOR_H
#define BN_CONV_TENSOR_H

#include <stddef.h>

#include "im2col.h"
#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct bn_tensor_conv {
    int ci, hi, wi, pad, stride; /* input channels and size as stored, zero border, step */
    int co, ho, wo, k;           /* output channels and size, window */
    int flip;                    /* 1: weights are the forward ones, read transposed and rotated */
    int ntiles;                  /* tiles of 8 output channels */
    int mgroups;                 /* groups of 32 positions (two tiles of 16) of an image */
    int mparts, mper;            /* blocks' shares of an image: mper groups each, one per warp */
    int ksteps, splits;          /* 8-deep steps of the reduction; warps that share them */
    int hp, wp;                  /* staged plane (wp a multiple of 4) */
    int threads, blocks;
    size_t a_off, tab_off, red_off; /* floats: staged planes, offset tables, the warps' sums */
    size_t smem;                 /* bytes */
} bn_tensor_conv;

typedef struct bn_tensor_plan {
    int n, filters;
    bn_conv_geom g;
    int fwd_ok, data_ok;
    bn_tensor_conv fwd, data;
} bn_tensor_plan;

/* Fills a plan for a batch of n; sms is the device's multiprocessor count. Never fails: a pass
 * these kernels cannot run has its ok flag cleared. */
void bn_tensor_plan_make(bn_tensor_plan *p, const bn_conv_geom *g, int filters, int n, int sms);

/* forward writes y (bias added), data writes dx; shapes as in conv_direct.h. */
bn_status bn_tensor_forward(const bn_tensor_plan *p, void *stream, const float *x, const float *w, const float *b,
                            float *y);
bn_status bn_tensor_backward_data(const bn_tensor_plan *p, void *stream, const float *dy, const float *w,
                                  float *dx);

#ifdef __cplusplus
}
#endif
#endif
