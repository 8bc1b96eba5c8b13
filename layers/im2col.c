#include "im2col.h"

size_t bn_col_count(const bn_conv_geom *g)
{
    return (size_t)g->c * g->k * g->k * (size_t)g->oh * g->ow;
}

/* One row of the column matrix is one (channel, ky, kx): the input cells that kernel tap
 * sees at every output position. Walking rows in weight order keeps both loops simple. */
void bn_im2col(const bn_conv_geom *g, const float *x, float *col)
{
    size_t plane = (size_t)g->h * g->w;
    for (int c = 0; c < g->c; c++)
        for (int ky = 0; ky < g->k; ky++)
            for (int kx = 0; kx < g->k; kx++) {
                const float *xc = x + c * plane;
                for (int oy = 0; oy < g->oh; oy++) {
                    int iy = oy * g->stride - g->pad + ky;
                    for (int ox = 0; ox < g->ow; ox++) {
                        int ix = ox * g->stride - g->pad + kx;
                        int inside = iy >= 0 && iy < g->h && ix >= 0 && ix < g->w;
                        *col++ = inside ? xc[(size_t)iy * g->w + ix] : 0.0f;
                    }
                }
            }
}

void bn_col2im_add(const bn_conv_geom *g, const float *col, float *x)
{
    size_t plane = (size_t)g->h * g->w;
    for (int c = 0; c < g->c; c++)
        for (int ky = 0; ky < g->k; ky++)
            for (int kx = 0; kx < g->k; kx++) {
                float *xc = x + c * plane;
                for (int oy = 0; oy < g->oh; oy++) {
                    int iy = oy * g->stride - g->pad + ky;
                    for (int ox = 0; ox < g->ow; ox++, col++) {
                        int ix = ox * g->stride - g->pad + kx;
                        if (iy >= 0 && iy < g->h && ix >= 0 && ix < g->w)
                            xc[(size_t)iy * g->w + ix] += *col;
                    }
                }
            }
}
