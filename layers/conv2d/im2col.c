#include "im2col.h"


size_t bn_col_count(const bn_conv_geom *g)
{
    return (size_t)g->c * g->k * g->k * (size_t)g->oh * g->ow;
}

/* The output columns [lo, hi) whose tap kx lands inside the input row; outside them the
 * tap sees padding. Computing the range once per row keeps the copy loop branch-free. */
static void inside_range(const bn_conv_geom *g, int kx, int *lo, int *hi)
{
    int first = g->pad - kx; /* ix = ox*stride - pad + kx >= 0 */
    *lo = first <= 0 ? 0 : (first + g->stride - 1) / g->stride;
    int last = g->w - 1 + g->pad - kx; /* ix <= w - 1 */
    *hi = last < 0 ? 0 : last / g->stride + 1;
    if (*hi > g->ow) *hi = g->ow;
    if (*lo > *hi) *lo = *hi;
}

/* Row copies of a few dozen floats: a loop the compiler vectorises costs less than a call. */
static void copy_cells(float *restrict dst, const float *restrict src, int n)
{
    for (int i = 0; i < n; i++) dst[i] = src[i];
}

static void add_cells(float *restrict dst, const float *restrict src, int n)
{
    for (int i = 0; i < n; i++) dst[i] += src[i];
}

/* One row of the column matrix is one (channel, ky, kx): the input cells that kernel tap
 * sees at every output position. Walking rows in weight order keeps both loops simple. */
void bn_im2col(const bn_conv_geom *g, const float *x, float *col, size_t ld)
{
    size_t plane = (size_t)g->h * g->w;
    for (int c = 0; c < g->c; c++)
        for (int ky = 0; ky < g->k; ky++)
            for (int kx = 0; kx < g->k; kx++) {
                const float *xc = x + c * plane;
                float *cell = col;
                col += ld;
                int lo, hi;
                inside_range(g, kx, &lo, &hi);
                for (int oy = 0; oy < g->oh; oy++, cell += g->ow) {
                    int iy = oy * g->stride - g->pad + ky;
                    if (iy < 0 || iy >= g->h) {
                        for (int ox = 0; ox < g->ow; ox++) cell[ox] = 0.0f;
                        continue;
                    }
                    const float *row = xc + (size_t)iy * g->w;
                    int shift = kx - g->pad;
                    for (int ox = 0; ox < lo; ox++) cell[ox] = 0.0f;
                    if (g->stride == 1)
                        copy_cells(cell + lo, row + lo + shift, hi - lo);
                    else
                        for (int ox = lo; ox < hi; ox++) cell[ox] = row[ox * g->stride + shift];
                    for (int ox = hi; ox < g->ow; ox++) cell[ox] = 0.0f;
                }
            }
}

void bn_col2im_add(const bn_conv_geom *g, const float *col, size_t ld, float *x)
{
    size_t plane = (size_t)g->h * g->w;
    for (int c = 0; c < g->c; c++)
        for (int ky = 0; ky < g->k; ky++)
            for (int kx = 0; kx < g->k; kx++) {
                float *xc = x + c * plane;
                const float *cell = col;
                col += ld;
                int lo, hi;
                inside_range(g, kx, &lo, &hi);
                for (int oy = 0; oy < g->oh; oy++, cell += g->ow) {
                    int iy = oy * g->stride - g->pad + ky;
                    if (iy < 0 || iy >= g->h) continue;
                    float *row = xc + (size_t)iy * g->w;
                    int shift = kx - g->pad;
                    if (g->stride == 1)
                        add_cells(row + lo + shift, cell + lo, hi - lo);
                    else
                        for (int ox = lo; ox < hi; ox++) row[ox * g->stride + shift] += cell[ox];
                }
            }
}
