/* conv_direct.h - blobnet's own convolution kernels for small images (the "blobnet" engine of
 * the conv2d layer), as an alternative to cuDNN's exact FP32 algorithms, which spend most of a
 * LeNet step on launch overhead, split reductions and a slow bias gradient at these sizes.
 *
 * Three passes, each deterministic (fixed summation order, no atomics) and graph-capturable:
 *   forward           y = conv(x, w) + b, bias fused;
 *   backward data     dx = col2im(W^T dy) per image, the column matrix kept in shared memory
 *                     (when an image's dy fits there), else the transposed convolution of dy
 *                     read as a convolution (stride 1 only);
 *   backward filter   dw += dy (x) x and db += sum of dy, as one split reduction over the batch
 *                     into workspace partials, then one kernel that adds the partials in order.
 * A plan holds the launch shape for one batch size; making one needs no device work. */
#ifndef BN_CONV_DIRECT_H
#define BN_CONV_DIRECT_H

#include <stddef.h>

#include "conv_relu.h"
#include "core/status.h"
#include "im2col.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Launch shape of the direct kernel (forward, or backward data read as a convolution). */
typedef struct bn_direct_shape {
    int ci, hi, wi;      /* input channels and size as read (dy for backward data) */
    int co, ho, wo;      /* output channels and size */
    int k, stride, pad;  /* window, step, zero border around the input */
    int flip;            /* 1: weights are the forward ones, read transposed and rotated */
    int hp, wp;          /* padded input region kept in shared memory */
    int kt, images, chunk, threads, split, tiles;
    size_t smem;         /* dynamic shared memory per block, bytes */
} bn_direct_shape;

/* Launch shape of the backward-data pass through shared column matrices. */
typedef struct bn_col_shape {
    int ct;              /* input channels per block */
    int rows;            /* ct * k * k column rows, rounded up to a multiple of 8 */
    int threads;
    size_t smem;         /* bytes */
} bn_col_shape;

/* Launch shape of the weight-gradient reduction. */
typedef struct bn_wgrad_shape {
    int tile;            /* 32 or 64: output channels x taps per block */
    int splits;          /* blocks along the batch-and-position axis */
    long long span;      /* positions (image x output pixel) per split */
} bn_wgrad_shape;

typedef struct bn_direct_plan {
    int n, filters;
    bn_conv_geom g;
    int fwd_ok, data_ok, filter_ok;  /* which passes these kernels can run for this geometry */
    int data_cols;                   /* backward data through column matrices (else direct) */
    bn_direct_shape fwd, data;
    bn_col_shape cols;
    bn_wgrad_shape filter;
    size_t workspace;                /* bytes of partial sums the filter pass needs */
} bn_direct_plan;

/* Fills a plan for a batch of n; sms is the device's multiprocessor count. Never fails: a
 * pass these kernels cannot run has its *_ok flag cleared. */
void bn_direct_plan_make(bn_direct_plan *p, const bn_conv_geom *g, int filters, int n, int sms);

/* The three passes on stream (a cudaStream_t). x (n,c,h,w), w (filters,c,k,k), b (filters),
 * y and dy (n,filters,oh,ow). forward writes y, and a fused ReLU's output where relu is not NULL
 * and relu->out is set (conv_relu.h); data writes dx; filter adds into dw and db and uses
 * workspace (plan->workspace bytes). */
bn_status bn_direct_forward(const bn_direct_plan *p, void *stream, const float *x, const float *w,
                            const float *b, float *y, const bn_conv_relu *relu);
bn_status bn_direct_backward_data(const bn_direct_plan *p, void *stream, const float *dy, const float *w,
                                  float *dx);
bn_status bn_direct_backward_filter(const bn_direct_plan *p, void *stream, const float *x, const float *dy,
                                    float *dw, float *db, float *workspace);

/* Adds the filter pass's partial sums (splits spans of filters * (taps + 1) floats: dw's, then
 * db's) into dw and db, each element's in a fixed order that depends on the gradient's size and
 * the spans only (conv_direct.cu), so that the result does not depend on timing or alignment. */
bn_status bn_direct_finish_filter(void *stream, const float *parts, int splits, int filters, int taps, float *dw,
                                  float *db);

#ifdef __cplusplus
}
#endif
#endif
