/* conv_rows.h - blobnet's row-tiled convolution kernels (conv_rows.cu), the conv2d layer's third
 * family of own kernels beside the direct (conv_direct.h) and implicit-GEMM (conv_igemm.h) ones.
 *
 * Every thread keeps a register tile: in the forward pass (and the backward-data pass, read as
 * the convolution of dy with the transposed, rotated weights) 4 neighbouring outputs of one row
 * for 4, 8 or 10 output channels, so that one row of input values loaded from shared memory
 * serves every tap of a window row and every channel of the tile; in the filter pass the k taps
 * of one window row of one input channel for the same channels, summed over a span of images.
 * Stride 1 only, odd windows up to 7, and images of at most 512 row pieces of 4 outputs; other
 * shapes clear the pass's ok flag. Deterministic (fixed summation order, no atomics) and
 * graph-capturable; the filter pass leaves partial sums that bn_direct_finish_filter adds up. */
#ifndef BN_CONV_ROWS_H
#define BN_CONV_ROWS_H

#include <stddef.h>

#include "conv_pooled.h"
#include "core/status.h"
#include "im2col.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Launch shape of the convolution kernel (forward, or backward data over dy). */
typedef struct bn_rows_conv {
    int ci, hi, wi, pad;  /* input channels and size as stored, zero border read around it */
    int co, ho, wo, k;    /* output channels and size, window */
    int flip;             /* 1: weights are the forward ones, read transposed and rotated */
    int ct, groups;       /* output channels per thread (4, 8 or 10), blocks along the channels */
    int segs, cells;      /* pieces of 4 outputs per row, pieces per image (segs * ho) */
    int images;           /* images per block */
    int split;            /* thread groups that take the input channels in turn */
    int chunk;            /* input channels staged in shared memory at once */
    int hp, wp;           /* staged plane: ho + k - 1 rows of wp floats (a multiple of 4) */
    int threads;          /* cells * images * split */
    size_t smem;          /* dynamic shared memory per block, bytes */
    size_t pool_smem;     /* the same with room for all of the block's outputs, for the pooled
                             epilogue; 0 when that does not fit */
} bn_rows_conv;

/* Launch shape of the filter kernel. */
typedef struct bn_rows_filter {
    int ct, groups;       /* output channels per block, blocks along them */
    int cb, cgroups;      /* input channels per block, blocks along them */
    int lanes;            /* threads (a power of two up to 32) sharing one channel and window row */
    int threads;          /* lanes * cb * k, rounded up to whole warps */
    int span, spans;      /* images per span, spans (each writes its own partial sums) */
    int chunk;            /* images staged in shared memory at once */
    int segs, hp, wp, dwp;/* pieces of 4 per row; staged x plane; staged dy row width */
    size_t smem;          /* bytes */
} bn_rows_filter;

typedef struct bn_rows_plan {
    int n, filters;
    bn_conv_geom g;
    int fwd_ok, data_ok, filter_ok;  /* which passes these kernels can run for this geometry */
    bn_rows_conv fwd, data;
    bn_rows_filter filter;
    size_t workspace;                /* bytes of partial sums the filter pass needs */
} bn_rows_plan;

/* The registers a thread of the filter kernel for tile width ct (4, 8 or 10) and window k (1, 3, 5
 * or 7) is planned with (their count decides how many blocks share a multiprocessor). */
int bn_rows_filter_planned_registers(int ct, int k);

/* The registers a thread of that filter kernel takes as compiled, into *regs (GPU builds only). */
bn_status bn_rows_filter_registers(int ct, int k, int *regs);

/* Fills a plan for a batch of n; sms is the device's multiprocessor count. Never fails: a pass
 * these kernels cannot run has its *_ok flag cleared. */
void bn_rows_plan_make(bn_rows_plan *p, const bn_conv_geom *g, int filters, int n, int sms);

/* The three passes on stream (a cudaStream_t), with the shapes and contracts of conv_direct.h:
 * forward writes y (bias added), or with `pooled` not NULL the 2x2 max pooling's output and
 * mask instead (conv_pooled.h; y is then not written, and bn_rows_pools must hold); data writes
 * dx; filter adds into dw and db and uses workspace (plan->workspace bytes), and reads dy
 * through a 2x2 max pooling when `pooled` is not NULL (dy is then not read). */
bn_status bn_rows_forward(const bn_rows_plan *p, void *stream, const float *x, const float *w, const float *b,
                          float *y, const bn_pooled_out *pooled);

/* Whether the plan's forward pass can write a 2x2 max pooling's output (its outputs fit in
 * shared memory beside the staged input). */
int bn_rows_pools(const bn_rows_plan *p);
bn_status bn_rows_backward_data(const bn_rows_plan *p, void *stream, const float *dy, const float *w, float *dx);
bn_status bn_rows_backward_filter(const bn_rows_plan *p, void *stream, const float *x, const float *dy,
                                  const bn_pooled_dy *pooled, float *dw, float *db, float *workspace);

#ifdef __cplusplus
}
#endif
#endif
