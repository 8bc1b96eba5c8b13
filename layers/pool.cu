/* pool.cu - max and average pooling on the GPU with blobnet's own kernels, written to give the
 * CPU path's results bit for bit (pool.c holds the reference).
 *
 * Forward runs one thread per output cell: it clips its window to the input as pool.c does,
 * then takes the first maximum in row-major window order (a padding cell never competes), or
 * sums the window in double and divides by the number of cells inside the input.
 *
 * Backward is a gather with no atomics, so it is deterministic: one thread per input cell
 * walks the windows that cover it in output order (row by row, left to right), which is the
 * order in which the CPU adds into that cell, and overwrites the input gradient with the sum.
 * For max pooling the thread recomputes each covering window's argmax from the input with
 * the CPU's tie rule and takes the window's gradient only when that argmax is its own cell;
 * for average pooling it adds dy / count, the CPU's share. No argmax is stored, so nothing
 * is allocated: both passes are plain kernel launches on the context's stream and can be
 * captured in a CUDA graph.
 *
 * Flat indices use 32-bit arithmetic when the element count allows it (the usual case, and
 * the cheaper one for the divisions that split an index into plane, row and column), 64-bit
 * otherwise. */
#include <limits.h>

#include "cuda_check.h"
#include "pool.h"

#define THREADS 256
/* Enough blocks for one thread per element up to INT_MAX elements; a larger count loops. */
#define MAX_BLOCKS (1u << 23)

/* The layer's geometry, passed to the kernels by value. */
typedef struct geom {
    int h, w, oh, ow;  /* input and output plane sizes */
    int size, stride, pad;
} geom;

/* The window of output cell (oy, ox) clipped to the input: rows [y0, y1), columns [x0, x1). */
typedef struct window {
    int y0, y1, x0, x1;
} window;

static __device__ __forceinline__ window clip(const geom &g, int oy, int ox)
{
    window r;
    r.y0 = oy * g.stride - g.pad;
    r.x0 = ox * g.stride - g.pad;
    r.y1 = r.y0 + g.size < g.h ? r.y0 + g.size : g.h;
    r.x1 = r.x0 + g.size < g.w ? r.x0 + g.size : g.w;
    if (r.y0 < 0) r.y0 = 0;
    if (r.x0 < 0) r.x0 = 0;
    return r;
}

/* The first maximum of the clipped window in row-major order, as an index within the plane:
 * a later cell replaces the best only when strictly greater (pool.c: argmax_in). */
static __device__ __forceinline__ int argmax_in(const float *__restrict__ plane, int w, window r)
{
    int best = r.y0 * w + r.x0;
    float top = plane[best];
    for (int y = r.y0; y < r.y1; y++)
        for (int x = r.x0; x < r.x1; x++) {
            float v = plane[y * w + x];
            if (v > top) top = v, best = y * w + x;
        }
    return best;
}

/* The outputs along one axis whose windows cover input coordinate i: [*lo, *hi], empty when
 * *lo > *hi (a cell dropped by floor mode or in a gap where stride > size). Window o covers
 * padded coordinates [o * stride, o * stride + size). */
static __device__ __forceinline__ void covering(int i, const geom &g, int out, int *lo, int *hi)
{
    int p = i + g.pad;
    *lo = p < g.size ? 0 : (p - g.size) / g.stride + 1;
    int last = p / g.stride;
    *hi = last < out - 1 ? last : out - 1;
}

enum pool_op { MAX_FORWARD, MAX_BACKWARD, AVG_FORWARD, AVG_BACKWARD };

/* One thread per element of `out` (n elements: outputs for forward, inputs for backward).
 * x is the input, dy the output gradient (backward only). */
template <pool_op OP, typename I>
static __global__ void __launch_bounds__(THREADS)
    pool_kernel(const float *__restrict__ x, const float *__restrict__ dy, float *__restrict__ out, I n, geom g)
{
    const I step = (I)gridDim.x * blockDim.x;
    for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {
        if constexpr (OP == MAX_FORWARD || OP == AVG_FORWARD) {
            int ox = (int)(i % (I)g.ow);
            I t = i / (I)g.ow;
            int oy = (int)(t % (I)g.oh);
            const float *xp = x + (size_t)(t / (I)g.oh) * ((size_t)g.h * g.w);
            window r = clip(g, oy, ox);
            if constexpr (OP == MAX_FORWARD) {
                out[i] = xp[argmax_in(xp, g.w, r)];
            } else {
                double s = 0.0;
                for (int yy = r.y0; yy < r.y1; yy++)
                    for (int xx = r.x0; xx < r.x1; xx++) s += xp[yy * g.w + xx];
                out[i] = (float)(s / ((r.y1 - r.y0) * (r.x1 - r.x0)));
            }
        } else {
            int ix = (int)(i % (I)g.w);
            I t = i / (I)g.w;
            int iy = (int)(t % (I)g.h);
            size_t plane = (size_t)(t / (I)g.h);
            const float *dyp = dy + plane * ((size_t)g.oh * g.ow);
            int y_lo, y_hi, x_lo, x_hi;
            covering(iy, g, g.oh, &y_lo, &y_hi);
            covering(ix, g, g.ow, &x_lo, &x_hi);
            float acc = 0.0f;
            if constexpr (OP == MAX_BACKWARD) {
                const float *xp = x + plane * ((size_t)g.h * g.w);
                const int self = iy * g.w + ix;
                for (int oy = y_lo; oy <= y_hi; oy++)
                    for (int ox = x_lo; ox <= x_hi; ox++)
                        if (argmax_in(xp, g.w, clip(g, oy, ox)) == self) acc += dyp[oy * g.ow + ox];
            } else {
                for (int oy = y_lo; oy <= y_hi; oy++)
                    for (int ox = x_lo; ox <= x_hi; ox++) {
                        window r = clip(g, oy, ox);
                        acc += dyp[oy * g.ow + ox] / (float)((r.y1 - r.y0) * (r.x1 - r.x0));
                    }
            }
            out[i] = acc;
        }
    }
}

/* Queues OP over n elements on the pass's stream. With n <= INT_MAX the 32-bit kernel runs:
 * its grid covers n in one sweep and i + step stays below 2^32. */
template <pool_op OP>
static bn_status launch(const bn_pass *pass, const pool_priv *p, const float *x, const float *dy, float *out,
                        size_t n)
{
    if (n == 0) return BN_OK;
    geom g = {p->h, p->w, p->oh, p->ow, p->size, p->stride, p->pad};
    size_t want = (n + THREADS - 1) / THREADS;
    unsigned blocks = want < MAX_BLOCKS ? (unsigned)want : MAX_BLOCKS;
    cudaStream_t s = (cudaStream_t)pass->ctx->stream;
    if (n <= (size_t)INT_MAX)
        pool_kernel<OP, unsigned><<<blocks, THREADS, 0, s>>>(x, dy, out, (unsigned)n, g);
    else
        pool_kernel<OP, size_t><<<blocks, THREADS, 0, s>>>(x, dy, out, n, g);
    BN_CUDA_LAUNCH();
    return BN_OK;
}

template <pool_op OP>
static bn_status pool_forward(bn_layer *l, const bn_pass *pass)
{
    const pool_priv *p = (const pool_priv *)l->priv;
    BN_DEV_RD(x, l->in);
    BN_DEV_WR(y, l->out);
    return launch<OP>(pass, p, x, nullptr, y, (size_t)l->in->n * p->c * p->oh * p->ow);
}

template <pool_op OP>
static bn_status pool_backward(bn_layer *l, const bn_pass *pass)
{
    if (!l->in_grad) return BN_OK;
    const pool_priv *p = (const pool_priv *)l->priv;
    const float *x = nullptr;
    if constexpr (OP == MAX_BACKWARD) {
        BN_DEV_RD(xin, l->in);
        x = xin;
    }
    BN_DEV_RD(dy, l->out_grad);
    BN_DEV_WR(dx, l->in_grad);
    return launch<OP>(pass, p, x, dy, dx, (size_t)l->in->n * p->c * p->h * p->w);
}

extern "C" bn_status bn_maxpool_forward_gpu(bn_layer *l, const bn_pass *p)
{
    return pool_forward<MAX_FORWARD>(l, p);
}

extern "C" bn_status bn_maxpool_backward_gpu(bn_layer *l, const bn_pass *p)
{
    return pool_backward<MAX_BACKWARD>(l, p);
}

extern "C" bn_status bn_avgpool_forward_gpu(bn_layer *l, const bn_pass *p)
{
    return pool_forward<AVG_FORWARD>(l, p);
}

extern "C" bn_status bn_avgpool_backward_gpu(bn_layer *l, const bn_pass *p)
{
    return pool_backward<AVG_BACKWARD>(l, p);
}
