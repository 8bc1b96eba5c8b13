/* conv_pooled.h - a convolution and the 2x2 max pooling that reads its output, fused on a device
 * (conv2d.cu).
 *
 * Forward: the row-tiled and tensor-core kernels (conv_rows.h, conv_tensor.h) can write the
 * pooling's output and argmax mask from their epilogues, so the full-size output is never
 * written to memory nor read back.
 *
 * Backward: the convolution's output gradient given through the pooling, as the pooled gradient
 * and, per pooled cell, which cell of its window held the maximum. blobnet's filter and data
 * kernels that take one (conv_rows.h, conv_tensor.h) expand it while they stage dy, so the
 * full-size gradient (three zeros in every window) is never written to memory; the argmax
 * filter pass (conv_argmax.h) takes the products at the maxima alone. */
#ifndef BN_CONV_POOLED_H
#define BN_CONV_POOLED_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct bn_pooled_dy {
    const float *dy;            /* [n][filters][ph][pw]: the pooling layer's output gradient */
    const unsigned char *mask;  /* same layout: the window cell (2 * row + column) of the maximum */
    int ph, pw;                 /* pooled plane: floor(oh / 2) x floor(ow / 2); the cells of a
                                   last odd row or column belong to no window (gradient 0) */
} bn_pooled_dy;

/* Where a forward kernel writes the pooled output instead of the convolution's. Each window's
 * maximum is taken over the biased outputs in row-major order, the first on ties, as the
 * pooling's own kernel does, so the results are the same bits. */
typedef struct bn_pooled_out {
    float *y;                   /* [n][filters][ph][pw]: the pooling layer's output */
    unsigned char *mask;        /* same layout: the window cell (2 * row + column) of the maximum */
    int ph, pw;                 /* floor(oh / 2) x floor(ow / 2) */
} bn_pooled_out;

#ifdef __cplusplus
}
#endif

/* The plans (host) and the kernels (device) both size the staged cells with it. */
#ifdef __CUDACC__
#define BN_POOLED_HD __host__ __device__
#else
#define BN_POOLED_HD
#endif

/* Bytes of one image's pooled gradient and mask staged together by stage_pooled (conv_stage.cuh):
 * `count` floats, then `count` bytes, rounded up to 16 bytes. */
static BN_POOLED_HD inline size_t pooled_stage_bytes(int count)
{
    return ((size_t)count * 5 + 15) / 16 * 16;
}

#ifdef __CUDACC__
/* A 2x2 window's maximum, the first in row-major order on ties (pool.c's rule): a, b its top
 * row, c, d its bottom one; *cell gets 2 * row + column of the maximum. */
static __device__ __forceinline__ float bn_window_max2(float a, float b, float c, float d, int *cell)
{
    float top = a;
    int at = 0;
    if (b > top) top = b, at = 1;
    if (c > top) top = c, at = 2;
    if (d > top) top = d, at = 3;
    *cell = at;
    return top;
}
#endif
#endif
