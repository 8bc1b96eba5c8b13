/* conv_winograd.h - conv2d's CPU passes for 3x3 and 5x5 windows at stride 1 by Winograd's
 * minimal filtering F(4x4, 3x3) and F(2x2, 5x5): each 6x6 patch of the input and each filter are
 * carried into a 6x6 domain where the convolution is an elementwise product, summed over the
 * input channels as 36 small matrix products, then carried back as a 4x4 (3x3 windows) or 2x2
 * (5x5 windows) tile of output. That is 36 products per 16 outputs where the direct convolution
 * takes 144 (a quarter), or per 4 outputs where it takes 100 (about a third), for the cost of the
 * transforms.
 *
 * The backward pass runs in the same domain: the output gradient carried in, the weight
 * gradient as 36 products against the input's transform (kept apart per task of consecutive
 * chunks of examples, as the shapes alone set them, and summed in task order, so the result does
 * not depend on the thread count), the input gradient as 36 products against the transformed
 * weights, carried back and its overlapping 6x6 tiles added up.
 *
 * The rounding differs from the direct convolution's by a few units in the fifth significant
 * digit at these widths (the transforms' constants 1/6, 1/24 and the sums of up to 36 terms). */
#ifndef BN_CONV_WINOGRAD_H
#define BN_CONV_WINOGRAD_H
#include "core/status.h"
#include "im2col.h"

/* Whether conv2d's CPU passes take this path for the geometry: 3x3 or 5x5 windows at stride 1,
 * at least 8 input channels and 8 filters (fewer leave the vectors of 16 channels mostly empty),
 * at most 256 of either (the per-chunk weight gradients stay within bounds), and outputs at
 * least half of whose tiles' cells are used. */
int bn_winograd_fits(const bn_conv_geom *g, int filters);

/* As bn_conv2d_cpu_forward_sum and bn_conv2d_cpu_backward (conv2d.h), for geometries that fit.
 * Called under bn_cpu_lock. */
bn_status bn_winograd_forward(const bn_conv_geom *g, int filters, int n, const float *x, const float *w,
                              const float *b, float *y, int relu, const float *const *addends, int num_addends);
bn_status bn_winograd_backward(const bn_conv_geom *g, int filters, int n, const float *x, const float *w,
                               const float *dy, const float *relu_y, float *dx, float *dw, float *db);
#endif
