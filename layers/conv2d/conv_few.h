/* conv_few.h - conv2d's CPU forward pass where the input has few channels (a network's first
 * layer on gray or colour images): stride 1, windows up to 3x3, fewer than 8 input channels.
 *
 * With so few channels the products the other paths hand to OpenBLAS have an inner dimension
 * of 1 to 7 times the window (9 for a gray 3x3), too short for its kernels, and the column
 * matrix copies the input k*k times. Here each output row is computed directly, 16 cells at a
 * time: the C * k * k shifted rows of input a block of cells reads are loaded once and every
 * filter's weighted sum of them is formed in registers (0.33 ms against 0.53 for resnet_mini's
 * stem at batch 128). Larger windows with many filters (LeNet's 5x5 over 20) stay faster on
 * the column path (0.40 against 0.67 ms), as do the backward passes, whose weight gradient
 * here would load every block's rows once per filter (1.36 against 0.90 ms on the stem). */
#ifndef BN_CONV_FEW_H
#define BN_CONV_FEW_H
#include "core/status.h"
#include "im2col.h"

/* Whether the forward pass fits: stride 1, 1 to 7 input channels, a window of at most 3x3. */
int bn_conv_few_fits(const bn_conv_geom *g);

/* As bn_conv2d_cpu_forward_sum (conv2d.h). Called under bn_cpu_lock. */
bn_status bn_conv_few_forward(const bn_conv_geom *g, int filters, int n, const float *x, const float *w,
                              const float *b, float *y, int relu, const float *const *addends, int num_addends);
#endif
