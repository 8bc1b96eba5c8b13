/* conv_argmax.h - blobnet's weight-gradient kernel for a convolution whose output only a 2x2 max
 * pooling at stride 2 reads (conv_pooled.h): the conv2d layer's fifth family of own kernels,
 * which runs the filter pass alone, and only through such a pooling.
 *
 * Through the pooling, the layer's output gradient is the pooled gradient at each window's
 * maximum and zero at the window's three other cells (and at a last odd row or column), so of
 * the products dy[o][q] * x[c][q + t] that make up dW[o][c][t] only one in four can be other
 * than zero. This kernel takes those alone: for every pooled cell it reads the argmax the
 * pooling's forward pass recorded and gathers the input window at the maximum, summing with
 * FP32 multiply-adds. The bias gradient is the sum of the pooled gradient.
 *
 * A block takes `fb` filters (all of them where fb * c * k threads fit one block) and a span of
 * images. Each thread owns one (filter, window row, input channel) and keeps the k sums of that
 * row's taps; `parts` groups of threads take the
 * pooled cells of an image in turn and add their sums in group order at the end. Per image the
 * block stages the input planes (zero border) and the filters' pooled gradients and masks,
 * the next image's while it sums the current one's. Each span writes its own partial sums,
 * which bn_direct_finish_filter adds in span order, so the result is deterministic. Stride 1,
 * windows up to 7; other shapes clear ok. */
#ifndef BN_CONV_ARGMAX_H
#define BN_CONV_ARGMAX_H

#include <stddef.h>

#include "conv_pooled.h"
#include "core/status.h"
#include "im2col.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct bn_argmax_plan {
    int ok;
    int n, filters;
    bn_conv_geom g;
    int ph, pw;          /* the pooled plane */
    int fb, groups;      /* filters per block, blocks along the filters */
    int items;           /* fb * c * k: the threads of one group */
    int parts;           /* groups of threads that take the pooled cells in turn */
    int threads;         /* items * parts, rounded up to whole warps */
    int span, spans;     /* images per block, blocks along the images */
    int hp, wv;          /* staged rows and columns of an input plane (those a window can reach) */
    int wp, plane;       /* their strides in shared memory, floats (chosen against bank conflicts) */
    size_t xsize, psize; /* floats: one image's staged planes; its staged pooled cells and masks */
    size_t smem;         /* bytes per block */
    size_t workspace;    /* bytes of partial sums */
} bn_argmax_plan;

/* Fills a plan for a batch of n; sms is the device's multiprocessor count. Never fails: a shape
 * the kernel cannot run clears ok. */
void bn_argmax_plan_make(bn_argmax_plan *p, const bn_conv_geom *g, int filters, int n, int sms);

/* The filter pass through the pooling on stream (a cudaStream_t): adds the weight gradient
 * into dw ([filters][c][k][k]) and the bias gradient into db, using workspace
 * (p->workspace bytes). */
bn_status bn_argmax_backward_filter(const bn_argmax_plan *p, void *stream, const float *x, const bn_pooled_dy *pooled,
                                    float *dw, float *db, float *workspace);

#ifdef __cplusplus
}
#endif
#endif
