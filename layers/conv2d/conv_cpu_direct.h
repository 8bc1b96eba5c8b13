/* conv_cpu_direct.h - the direct 3x3 stride-1 convolution of conv2d's CPU passes, on CPUs with
 * AVX-512 (conv_cpu_direct.c says how it works). */
#ifndef BN_CONV_CPU_DIRECT_H
#define BN_CONV_CPU_DIRECT_H

#include <stddef.h>

/* One example's product: y[f][oy][ox] = bias[f] + sum over c, ky, kx of
 * w[f * w_filter + c * w_channel + ky * 3 + kx] * x[c * in_channel + (oy + ky) * in_row + ox + kx],
 * for f < filters, oy < oh, ox < ow, with max(y, 0) where relu is set; y's planes are
 * out_filter floats apart and its rows ow. x is the padded input, every read inside it. */
typedef struct bn_direct3 {
    int channels, filters, oh, ow, relu;
    size_t in_channel, in_row;   /* x: floats from one channel to the next, one row to the next */
    size_t w_filter, w_channel;  /* w: floats from one filter to the next, one channel to the next */
    size_t out_filter;           /* y: floats from one filter's plane to the next */
} bn_direct3;

/* 1 where this CPU runs the kernel (AVX-512F), else 0: the callers take another method. */
int bn_conv_direct3_available(void);

/* The product above; bias may be NULL (zero). */
void bn_conv_direct3_run(const bn_direct3 *d, const float *x, const float *w, const float *bias, float *y);

#endif
