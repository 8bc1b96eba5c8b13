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
 * for average pooling it adds dy / count, the CPU's share. No argmax is stored for the
 * layer's own backward pass, so both passes are plain kernel launches on the context's stream
 * and can be captured in a CUDA graph. Only a max pooling fused with the convolution before it
 * (bn_conv2d_fuse_next) has its forward pass record each window's argmax cell in
 * pool_priv.dev_mask, allocated once when the pair is fused; its own backward pass then reads
 * the mask instead of x, which the convolution may have left unwritten (conv_pooled.h).
 *
 * Non-overlapping windows (stride == size, pad == 0: the windows tile the input, and floor
 * mode may leave fewer than size rows below and columns to the right that no window covers)
 * take a faster path in both directions: one thread per output window, consecutive threads on
 * consecutive windows of a row. No window is clipped and every covered input cell lies in
 * exactly one window, so backward finds the window's argmax once and writes its size x size
 * gradients directly: 0.0f + dy at the argmax and 0.0f elsewhere for max pooling, 0.0f + dy /
 * (size * size) everywhere for average pooling, the values the CPU gets by zeroing and adding
 * once (0.0f + v, not v, turns a -0.0f into +0.0f as the CPU does). The threads of the last
 * window column and row also zero the uncovered columns to their right and rows below, so
 * every input gradient element is written exactly once. Size 2 is unrolled, and reads x and
 * writes dx two floats at a time (float2) when the width is even and the pointers 8-byte
 * aligned. Every other geometry uses the general kernels above.
 *
 * Flat indices use 32-bit arithmetic when the element count allows it (the usual case, and
 * the cheaper one for the divisions that split an index into plane, row and column), 64-bit
 * otherwise. */
#include <limits.h>
#include <stdint.h>

#include "conv2d/conv_pooled.h"
#include "gpu/cuda_check.h"
#include "gpu/pdl.cuh"
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
    bn_early_entry(); /* pdl.cuh */
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

/* Two adjacent floats of a row, at p and p + 1: one 8-byte access when VEC (p 8-byte aligned). */
template <bool VEC>
static __device__ __forceinline__ float2 load2(const float *__restrict__ p)
{
    if constexpr (VEC)
        return *reinterpret_cast<const float2 *>(p);
    else
        return make_float2(p[0], p[1]);
}

template <bool VEC>
static __device__ __forceinline__ void store2(float *__restrict__ p, float a, float b)
{
    if constexpr (VEC)
        *reinterpret_cast<float2 *>(p) = make_float2(a, b);
    else
        p[0] = a, p[1] = b;
}

/* The non-overlapping case (stride == size, pad == 0): one thread per output window, n of them.
 * S is the window size when fixed at compile time (2), else 0 and g.size holds it; VEC (S == 2
 * only) moves rows of the window as float2. Forward writes `out` = y; backward writes `out` =
 * dx over the window and, for the last window column and row, the uncovered cells to the
 * right and below. */
template <pool_op OP, typename I, int S, bool VEC>
static __global__ void __launch_bounds__(THREADS)
    tiled_kernel(const float *__restrict__ x, const float *__restrict__ dy, float *__restrict__ out, I n, geom g,
                 unsigned char *__restrict__ mask)
{
    bn_early_entry(); /* pdl.cuh */
    static_assert(!VEC || S == 2, "float2 rows need size 2");
    const int s = S ? S : g.size;
    const I step = (I)gridDim.x * blockDim.x;
    for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {
        int ox = (int)(i % (I)g.ow);
        I t = i / (I)g.ow;
        int oy = (int)(t % (I)g.oh);
        size_t plane = (size_t)(t / (I)g.oh);
        /* Offset of the window's top-left cell within the planes of x and dx. */
        const size_t corner = plane * ((size_t)g.h * g.w) + (size_t)(oy * s) * g.w + (size_t)(ox * s);
        /* The window's argmax in row-major window order, first maximum on ties (max pooling;
         * backward takes it from the mask where the forward pass recorded one, and then reads
         * nothing from x), or its mean (average forward); average backward reads nothing from x. */
        int best = 0;
        float top = 0.0f;
        const bool recorded = OP == MAX_BACKWARD && mask;
        if (recorded) best = mask[i];
        if ((OP == MAX_FORWARD || OP == MAX_BACKWARD) && !recorded) {
            const float *xw = x + corner;
            if constexpr (S == 2) {
                float2 a = load2<VEC>(xw), b = load2<VEC>(xw + g.w);
                top = bn_window_max2(a.x, a.y, b.x, b.y, &best);
            } else {
                top = xw[0];
                for (int ky = 0; ky < s; ky++)
                    for (int kx = 0; kx < s; kx++) {
                        float v = xw[ky * g.w + kx];
                        if (v > top) top = v, best = ky * s + kx;
                    }
            }
        }
        if constexpr (OP == MAX_FORWARD) {
            out[i] = top;
            if (mask) mask[i] = (unsigned char)best;
        } else if constexpr (OP == AVG_FORWARD) {
            const float *xw = x + corner;
            double sum = 0.0;
            if constexpr (S == 2) {
                float2 a = load2<VEC>(xw), b = load2<VEC>(xw + g.w);
                sum += a.x, sum += a.y, sum += b.x, sum += b.y;
            } else {
                for (int ky = 0; ky < s; ky++)
                    for (int kx = 0; kx < s; kx++) sum += xw[ky * g.w + kx];
            }
            out[i] = (float)(sum / (s * s));
        } else {
            float *dxw = out + corner;
            const float d = dy[i];
            /* What the window's cells get: `on` at the argmax (every cell for average), `off` at
             * the others. */
            float on, off;
            if constexpr (OP == MAX_BACKWARD) {
                on = 0.0f + d, off = 0.0f;
            } else {
                on = 0.0f + d / (float)(s * s), off = on;
                best = 0;
            }
            if constexpr (S == 2) {
                store2<VEC>(dxw, best == 0 ? on : off, best == 1 ? on : off);
                store2<VEC>(dxw + g.w, best == 2 ? on : off, best == 3 ? on : off);
            } else {
                for (int ky = 0; ky < s; ky++)
                    for (int kx = 0; kx < s; kx++) dxw[ky * g.w + kx] = ky * s + kx == best ? on : off;
            }
            /* Cells no window covers: columns [ow * s, w) beside the last window column, rows
             * [oh * s, h) below the last window row, and their corner with the last window. */
            const bool right = ox == g.ow - 1, below = oy == g.oh - 1;
            if (right)
                for (int ky = 0; ky < s; ky++)
                    for (int xx = s; xx < g.w - ox * s; xx++) dxw[ky * g.w + xx] = 0.0f;
            if (below) {
                const int x_end = right ? g.w - ox * s : s;
                for (int yy = s; yy < g.h - oy * s; yy++)
                    for (int xx = 0; xx < x_end; xx++) dxw[yy * g.w + xx] = 0.0f;
            }
        }
    }
}

/* Grid for n threads: one per element up to MAX_BLOCKS blocks, a grid-stride loop past that. */
static unsigned grid_for(size_t n)
{
    size_t want = (n + THREADS - 1) / THREADS;
    return want < MAX_BLOCKS ? (unsigned)want : MAX_BLOCKS;
}

/* Queues OP on the pass's stream: the tiled kernel over the outputs when the windows do not
 * overlap, else the general kernel over n elements (outputs for forward, inputs for backward).
 * With a count <= INT_MAX the 32-bit kernel runs: its grid covers the count in one sweep and
 * i + step stays below 2^32. */
template <pool_op OP>
static bn_status launch(const bn_pass *pass, const pool_priv *p, size_t planes, const float *x, const float *dy,
                        float *out, unsigned char *mask = nullptr)
{
    const geom g = {p->h, p->w, p->oh, p->ow, p->size, p->stride, p->pad};
    const bool fwd = OP == MAX_FORWARD || OP == AVG_FORWARD;
    const size_t outputs = planes * p->oh * p->ow, n = fwd ? outputs : planes * p->h * p->w;
    if (n == 0) return BN_OK;
    cudaStream_t st = (cudaStream_t)pass->ctx->stream;
    if (p->stride == p->size && p->pad == 0) {
        const unsigned blocks = grid_for(outputs);
        const bool small = outputs <= (size_t)INT_MAX;
        if (p->size == 2) {
            /* float2 rows: the window corners sit at even offsets when w is even; x is read that
             * way (not by average backward, where it is null) and dx written that way. */
            const uintptr_t rows = (uintptr_t)x | (fwd ? 0 : (uintptr_t)out);
            const bool vec = p->w % 2 == 0 && rows % sizeof(float2) == 0;
            if (vec && small)
                bn_launch_early(tiled_kernel<OP, unsigned, 2, true>, blocks, THREADS, 0, st, x, dy, out,
                                (unsigned)outputs, g, mask);
            else if (vec)
                bn_launch_early(tiled_kernel<OP, size_t, 2, true>, blocks, THREADS, 0, st, x, dy, out, outputs, g, mask);
            else if (small)
                bn_launch_early(tiled_kernel<OP, unsigned, 2, false>, blocks, THREADS, 0, st, x, dy, out,
                                (unsigned)outputs, g, mask);
            else
                bn_launch_early(tiled_kernel<OP, size_t, 2, false>, blocks, THREADS, 0, st, x, dy, out, outputs, g, mask);
        } else if (small) {
            bn_launch_early(tiled_kernel<OP, unsigned, 0, false>, blocks, THREADS, 0, st, x, dy, out,
                            (unsigned)outputs, g, mask);
        } else {
            bn_launch_early(tiled_kernel<OP, size_t, 0, false>, blocks, THREADS, 0, st, x, dy, out, outputs, g, mask);
        }
    } else if (n <= (size_t)INT_MAX) {
        bn_launch_early(pool_kernel<OP, unsigned>, grid_for(n), THREADS, 0, st, x, dy, out, (unsigned)n, g);
    } else {
        bn_launch_early(pool_kernel<OP, size_t>, grid_for(n), THREADS, 0, st, x, dy, out, n, g);
    }
    BN_CUDA_LAUNCH();
    return BN_OK;
}

template <pool_op OP>
static bn_status pool_forward(bn_layer *l, const bn_pass *pass)
{
    const pool_priv *p = (const pool_priv *)l->priv;
    BN_DEV_RD(x, l->in);
    BN_DEV_WR(y, l->out);
    return launch<OP>(pass, p, (size_t)l->in->n * p->c, x, nullptr, y, p->dev_mask);
}

template <pool_op OP>
static bn_status pool_backward(bn_layer *l, const bn_pass *pass)
{
    if (!l->in_grad) return BN_OK;
    const pool_priv *p = (const pool_priv *)l->priv;
    const float *x = nullptr;
    if (OP == MAX_BACKWARD && !p->dev_mask) {
        BN_DEV_RD(xin, l->in);
        x = xin;
    }
    BN_DEV_RD(dy, l->out_grad);
    BN_DEV_WR(dx, l->in_grad);
    return launch<OP>(pass, p, (size_t)l->in->n * p->c, x, dy, dx, OP == MAX_BACKWARD ? p->dev_mask : nullptr);
}

extern "C" bn_status bn_maxpool_forward_gpu(bn_layer *l, const bn_pass *p)
{
    return pool_forward<MAX_FORWARD>(l, p);
}

extern "C" bn_status bn_maxpool_backward_gpu(bn_layer *l, const bn_pass *p)
{
    return pool_backward<MAX_BACKWARD>(l, p);
}

/* Global average pooling, bit for bit the CPU's: a thread per plane sums it in double in row-major
 * order and divides by its cells; backward a thread per input cell takes 0.0f + dy / cells. */
static __global__ void global_avg_forward(const float *__restrict__ x, float *__restrict__ y, size_t planes, int cells)
{
    for (size_t pl = (size_t)blockIdx.x * blockDim.x + threadIdx.x; pl < planes; pl += (size_t)gridDim.x * blockDim.x) {
        const float *xp = x + pl * cells;
        double s = 0.0;
        for (int i = 0; i < cells; i++) s += xp[i];
        y[pl] = (float)(s / cells);
    }
}

static __global__ void global_avg_backward(const float *__restrict__ dy, float *__restrict__ dx, size_t total,
                                           int cells)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x)
        dx[i] = 0.0f + dy[i / cells] / (float)cells;
}

extern "C" bn_status bn_avgpool_forward_gpu(bn_layer *l, const bn_pass *p)
{
    const pool_priv *pp = (const pool_priv *)l->priv;
    if (!pp->global) return pool_forward<AVG_FORWARD>(l, p);
    BN_DEV_RD(x, l->in);
    BN_DEV_WR(y, l->out);
    size_t planes = (size_t)l->in->n * pp->c;
    global_avg_forward<<<grid_for(planes), THREADS, 0, (cudaStream_t)p->ctx->stream>>>(x, y, planes, pp->h * pp->w);
    BN_CUDA_LAUNCH();
    return BN_OK;
}

extern "C" bn_status bn_avgpool_backward_gpu(bn_layer *l, const bn_pass *p)
{
    const pool_priv *pp = (const pool_priv *)l->priv;
    if (!pp->global) return pool_backward<AVG_BACKWARD>(l, p);
    if (!l->in_grad) return BN_OK;
    BN_DEV_RD(dy, l->out_grad);
    BN_DEV_WR(dx, l->in_grad);
    size_t total = bn_blob_count(l->in_grad);
    global_avg_backward<<<grid_for(total), THREADS, 0, (cudaStream_t)p->ctx->stream>>>(dy, dx, total, pp->h * pp->w);
    BN_CUDA_LAUNCH();
    return BN_OK;
}
