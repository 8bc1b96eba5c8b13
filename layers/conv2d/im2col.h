/* im2col.h - the column layout that turns a convolution into one matrix product.
 *
 * For one example of shape (c, h, w), the column matrix has c*k*k rows (channel-major,
 * then kernel row, then kernel column: the same order as a weight row W[f][c][ky][kx])
 * and oh*ow columns (output positions in row-major order). Cells that fall in the
 * padding are zeros. The GPU path may reuse this layout. */
#ifndef BN_IM2COL_H
#define BN_IM2COL_H

#include <stddef.h>

/* The geometry of a square-kernel window sliding over one example. */
typedef struct bn_conv_geom {
    int c, h, w;        /* input channels and spatial size */
    int k, stride, pad; /* kernel size, step, zero padding on every side */
    int oh, ow;         /* output spatial size (bn_window_out) */
} bn_conv_geom;

/* Floats in the column matrix of one example: c*k*k*oh*ow. */
size_t bn_col_count(const bn_conv_geom *g);

/* Copies the windows of x (c*h*w floats) into col: c*k*k rows of oh*ow cells, a row starting
 * every ld floats (ld >= oh*ow; ld > oh*ow leaves room for the columns of other examples). */
void bn_im2col(const bn_conv_geom *g, const float *x, float *col, size_t ld);

/* Adds every column cell back to the input cell it came from: x += col2im(col). Padding
 * cells are dropped. The inverse in the adjoint sense, which is what backward needs. */
void bn_col2im_add(const bn_conv_geom *g, const float *col, size_t ld, float *x);

#endif
