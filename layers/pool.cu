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
 * For max pooling the thread takes a covering window's gradient only when the window's argmax,
 * with the CPU's tie rule, is its own cell; for average pooling it adds dy / count, the CPU's
 * share. The forward pass records each window's argmax as its cell in the window (ky * size +
 * kx, from the window's unclipped corner) in pool_priv.dev_mask, one byte per output, and the
 * backward pass compares against it: without the mask it recomputed every covering window's
 * argmax from x, size * size reads for each of up to size * size windows, which made a 3x3
 * stride-1 pooling's backward pass the largest of the small layers of an inception-style net
 * (70 us at batch 160, 7% of its step on an H200). The mask is allocated on the layer's first
 * forward pass outside a graph capture (the trainer's first step runs eagerly) and kept; a
 * pass captured before it exists recomputes. A max pooling fused with the convolution before
 * it (bn_conv2d_fuse_next) has the same mask written by the convolution's epilogue, allocated
 * when the pair is fused; its own backward pass reads it instead of x, which the convolution
 * may have left unwritten (conv_pooled.h). Both passes are plain launches on the context's
 * stream and can be captured in a CUDA graph.
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
 * otherwise.
 *
 * Under --precision bf16 the same kernels read and write BF16 (the element type T, gpu/typed.cuh):
 * a maximum is one of its window's values, exact in BF16; a mean is summed in double as in FP32
 * and rounded to BF16 once, and a gradient share likewise. The float2 rows are FP32's only. */
#include <limits.h>
#include <stdint.h>

#include "conv2d/conv_pooled.h"
#include "gpu/code_anchor.cuh"
#include "gpu/cuda_check.h"
#include "gpu/pdl.cuh"
#include "gpu/bf16.cuh"
#include "gpu/typed.cuh"
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
template <typename T>
static __device__ __forceinline__ int argmax_in(const T *__restrict__ plane, int w, window r)
{
    int best = r.y0 * w + r.x0;
    float top = bn_ld(&plane[best]);
    for (int y = r.y0; y < r.y1; y++)
        for (int x = r.x0; x < r.x1; x++) {
            float v = bn_ld(&plane[y * w + x]);
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
 * x is the input, dy the output gradient (backward only), all of element type T. */
template <pool_op OP, typename I, typename T>
static __global__ void __launch_bounds__(THREADS)
    pool_kernel(const T *__restrict__ x, const T *__restrict__ dy, T *__restrict__ out, I n, geom g,
                unsigned char *__restrict__ mask)
{
    bn_early_entry(); /* pdl.cuh */
    const I step = (I)gridDim.x * blockDim.x;
    for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {
        if constexpr (OP == MAX_FORWARD || OP == AVG_FORWARD) {
            int ox = (int)(i % (I)g.ow);
            I t = i / (I)g.ow;
            int oy = (int)(t % (I)g.oh);
            const T *xp = x + (size_t)(t / (I)g.oh) * ((size_t)g.h * g.w);
            window r = clip(g, oy, ox);
            if constexpr (OP == MAX_FORWARD) {
                const int best = argmax_in(xp, g.w, r);
                bn_st(&out[i], bn_ld(&xp[best]));
                if (mask) {
                    const int ky = best / g.w - (oy * g.stride - g.pad), kx = best % g.w - (ox * g.stride - g.pad);
                    mask[i] = (unsigned char)(ky * g.size + kx);
                }
            } else {
                double s = 0.0;
                for (int yy = r.y0; yy < r.y1; yy++)
                    for (int xx = r.x0; xx < r.x1; xx++) s += bn_ld(&xp[yy * g.w + xx]);
                bn_st(&out[i], (float)(s / ((r.y1 - r.y0) * (r.x1 - r.x0))));
            }
        } else {
            int ix = (int)(i % (I)g.w);
            I t = i / (I)g.w;
            int iy = (int)(t % (I)g.h);
            size_t plane = (size_t)(t / (I)g.h);
            const T *dyp = dy + plane * ((size_t)g.oh * g.ow);
            int y_lo, y_hi, x_lo, x_hi;
            covering(iy, g, g.oh, &y_lo, &y_hi);
            covering(ix, g, g.ow, &x_lo, &x_hi);
            float acc = 0.0f;
            if constexpr (OP == MAX_BACKWARD) {
                if (mask) {
                    /* Window (oy, ox)'s argmax as recorded: this cell's place in it, or not. */
                    const unsigned char *mp = mask + plane * ((size_t)g.oh * g.ow);
                    for (int oy = y_lo; oy <= y_hi; oy++) {
                        const int ky = iy - (oy * g.stride - g.pad);
                        for (int ox = x_lo; ox <= x_hi; ox++)
                            if (mp[oy * g.ow + ox] == ky * g.size + ix - (ox * g.stride - g.pad))
                                acc += bn_ld(&dyp[oy * g.ow + ox]);
                    }
                } else {
                    const T *xp = x + plane * ((size_t)g.h * g.w);
                    const int self = iy * g.w + ix;
                    for (int oy = y_lo; oy <= y_hi; oy++)
                        for (int ox = x_lo; ox <= x_hi; ox++)
                            if (argmax_in(xp, g.w, clip(g, oy, ox)) == self) acc += bn_ld(&dyp[oy * g.ow + ox]);
                }
            } else {
                for (int oy = y_lo; oy <= y_hi; oy++)
                    for (int ox = x_lo; ox <= x_hi; ox++) {
                        window r = clip(g, oy, ox);
                        acc += bn_ld(&dyp[oy * g.ow + ox]) / (float)((r.y1 - r.y0) * (r.x1 - r.x0));
                    }
            }
            bn_st(&out[i], acc);
        }
    }
}

/* Two adjacent elements of a row, at p and p + 1, as floats: one 8-byte access when VEC (FP32
 * only, p 8-byte aligned). */
template <bool VEC, typename T>
static __device__ __forceinline__ float2 load2(const T *__restrict__ p)
{
    if constexpr (VEC)
        return *reinterpret_cast<const float2 *>(p);
    else
        return make_float2(bn_ld(&p[0]), bn_ld(&p[1]));
}

template <bool VEC, typename T>
static __device__ __forceinline__ void store2(T *__restrict__ p, float a, float b)
{
    if constexpr (VEC)
        *reinterpret_cast<float2 *>(p) = make_float2(a, b);
    else
        bn_st(&p[0], a), bn_st(&p[1], b);
}

/* The non-overlapping case (stride == size, pad == 0): one thread per output window, n of them.
 * S is the window size when fixed at compile time (2), else 0 and g.size holds it; VEC (S == 2
 * only) moves rows of the window as float2. Forward writes `out` = y; backward writes `out` =
 * dx over the window and, for the last window column and row, the uncovered cells to the
 * right and below. */
template <pool_op OP, typename I, int S, bool VEC, typename T>
static __global__ void __launch_bounds__(THREADS)
    tiled_kernel(const T *__restrict__ x, const T *__restrict__ dy, T *__restrict__ out, I n, geom g,
                 unsigned char *__restrict__ mask)
{
    bn_early_entry(); /* pdl.cuh */
    static_assert(!VEC || S == 2, "float2 rows need size 2");
    static_assert(!VEC || sizeof(T) == sizeof(float), "float2 rows are FP32's");
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
            const T *xw = x + corner;
            if constexpr (S == 2) {
                float2 a = load2<VEC>(xw), b = load2<VEC>(xw + g.w);
                top = bn_window_max2(a.x, a.y, b.x, b.y, &best);
            } else {
                top = bn_ld(&xw[0]);
                for (int ky = 0; ky < s; ky++)
                    for (int kx = 0; kx < s; kx++) {
                        float v = bn_ld(&xw[ky * g.w + kx]);
                        if (v > top) top = v, best = ky * s + kx;
                    }
            }
        }
        if constexpr (OP == MAX_FORWARD) {
            bn_st(&out[i], top);
            if (mask) mask[i] = (unsigned char)best;
        } else if constexpr (OP == AVG_FORWARD) {
            const T *xw = x + corner;
            double sum = 0.0;
            if constexpr (S == 2) {
                float2 a = load2<VEC>(xw), b = load2<VEC>(xw + g.w);
                sum += a.x, sum += a.y, sum += b.x, sum += b.y;
            } else {
                for (int ky = 0; ky < s; ky++)
                    for (int kx = 0; kx < s; kx++) sum += bn_ld(&xw[ky * g.w + kx]);
            }
            bn_st(&out[i], (float)(sum / (s * s)));
        } else {
            T *dxw = out + corner;
            const float d = bn_ld(&dy[i]);
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
                    for (int kx = 0; kx < s; kx++) bn_st(&dxw[ky * g.w + kx], ky * s + kx == best ? on : off);
            }
            /* Cells no window covers: columns [ow * s, w) beside the last window column, rows
             * [oh * s, h) below the last window row, and their corner with the last window. */
            const bool right = ox == g.ow - 1, below = oy == g.oh - 1;
            if (right)
                for (int ky = 0; ky < s; ky++)
                    for (int xx = s; xx < g.w - ox * s; xx++) bn_st(&dxw[ky * g.w + xx], 0.0f);
            if (below) {
                const int x_end = right ? g.w - ox * s : s;
                for (int yy = s; yy < g.h - oy * s; yy++)
                    for (int xx = 0; xx < x_end; xx++) bn_st(&dxw[yy * g.w + xx], 0.0f);
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
template <pool_op OP, typename T>
static bn_status launch(const bn_pass *pass, const pool_priv *p, size_t planes, const T *x, const T *dy, T *out,
                        unsigned char *mask = nullptr)
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
            constexpr bool fp32 = sizeof(T) == sizeof(float);
            const bool vec = fp32 && p->w % 2 == 0 && rows % sizeof(float2) == 0;
            if (vec && small)
                bn_launch_early(tiled_kernel<OP, unsigned, 2, fp32, T>, blocks, THREADS, 0, st, x, dy, out,
                                (unsigned)outputs, g, mask);
            else if (vec)
                bn_launch_early(tiled_kernel<OP, size_t, 2, fp32, T>, blocks, THREADS, 0, st, x, dy, out, outputs, g,
                                mask);
            else if (small)
                bn_launch_early(tiled_kernel<OP, unsigned, 2, false, T>, blocks, THREADS, 0, st, x, dy, out,
                                (unsigned)outputs, g, mask);
            else
                bn_launch_early(tiled_kernel<OP, size_t, 2, false, T>, blocks, THREADS, 0, st, x, dy, out, outputs, g, mask);
        } else if (small) {
            bn_launch_early(tiled_kernel<OP, unsigned, 0, false, T>, blocks, THREADS, 0, st, x, dy, out,
                            (unsigned)outputs, g, mask);
        } else {
            bn_launch_early(tiled_kernel<OP, size_t, 0, false, T>, blocks, THREADS, 0, st, x, dy, out, outputs, g, mask);
        }
    } else if (n <= (size_t)INT_MAX) {
        bn_launch_early(pool_kernel<OP, unsigned, T>, grid_for(n), THREADS, 0, st, x, dy, out, (unsigned)n, g, mask);
    } else {
        bn_launch_early(pool_kernel<OP, size_t, T>, grid_for(n), THREADS, 0, st, x, dy, out, n, g, mask);
    }
    BN_CUDA_LAUNCH();
    return BN_OK;
}

/* A max pooling's argmax mask, one byte per output (the window's cells numbered below 256),
 * made on its first forward pass outside a graph capture (no allocation may happen inside one). */
static bn_status make_mask(bn_layer *l, const bn_pass *pass)
{
    pool_priv *p = (pool_priv *)l->priv;
    if (p->dev_mask || p->size * p->size > 256) return BN_OK;
    cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
    BN_CUDA(cudaStreamIsCapturing((cudaStream_t)pass->ctx->stream, &capturing));
    if (capturing != cudaStreamCaptureStatusNone) return BN_OK;
    return bn_device_alloc((void **)&p->dev_mask, l->out->capacity);
}

template <pool_op OP, typename T>
static bn_status pool_forward_as(bn_layer *l, const bn_pass *pass)
{
    if (OP == MAX_FORWARD) BN_TRY(make_mask(l, pass));
    const pool_priv *p = (const pool_priv *)l->priv;
    BN_TYPED_RD(T, x, l->in);
    BN_TYPED_WR(T, y, l->out);
    return launch<OP, T>(pass, p, (size_t)l->in->n * p->c, x, nullptr, y, p->dev_mask);
}

template <pool_op OP, typename T>
static bn_status pool_backward_as(bn_layer *l, const bn_pass *pass)
{
    if (!l->in_grad) return BN_OK;
    const pool_priv *p = (const pool_priv *)l->priv;
    const T *x = nullptr;
    if (OP == MAX_BACKWARD && !p->dev_mask) {
        BN_TYPED_RD(T, xin, l->in);
        x = xin;
    }
    BN_TYPED_RD(T, dy, l->out_grad);
    BN_TYPED_WR(T, dx, l->in_grad);
    return launch<OP, T>(pass, p, (size_t)l->in->n * p->c, x, dy, dx, OP == MAX_BACKWARD ? p->dev_mask : nullptr);
}

/* The pass in the precision the layer's blobs hold. */
template <pool_op OP>
static bn_status pool_forward(bn_layer *l, const bn_pass *pass)
{
    if (bn_blob_is_bf16(l->out)) return pool_forward_as<OP, __nv_bfloat16>(l, pass);
    return pool_forward_as<OP, float>(l, pass);
}

template <pool_op OP>
static bn_status pool_backward(bn_layer *l, const bn_pass *pass)
{
    if (l->in_grad && bn_blob_is_bf16(l->in_grad)) return pool_backward_as<OP, __nv_bfloat16>(l, pass);
    return pool_backward_as<OP, float>(l, pass);
}

extern "C" bn_status bn_maxpool_forward_gpu(bn_layer *l, const bn_pass *p)
{
    return pool_forward<MAX_FORWARD>(l, p);
}

extern "C" bn_status bn_maxpool_backward_gpu(bn_layer *l, const bn_pass *p)
{
    return pool_backward<MAX_BACKWARD>(l, p);
}

/* Global average pooling, bit for bit the CPU's in FP32: a thread per plane sums it in double in
 * row-major order and divides by its cells; backward a thread per input cell takes
 * 0.0f + dy / cells. */
template <typename T>
static __global__ void global_avg_forward(const T *__restrict__ x, T *__restrict__ y, size_t planes, int cells)
{
    bn_early_entry(); /* pdl.cuh */
    for (size_t pl = (size_t)blockIdx.x * blockDim.x + threadIdx.x; pl < planes; pl += (size_t)gridDim.x * blockDim.x) {
        const T *xp = x + pl * cells;
        double s = 0.0;
        for (int i = 0; i < cells; i++) s += bn_ld(&xp[i]);
        bn_st(&y[pl], (float)(s / cells));
    }
}

template <typename T>
static __global__ void global_avg_backward(const T *__restrict__ dy, T *__restrict__ dx, size_t total, int cells)
{
    bn_early_entry(); /* pdl.cuh */
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x)
        bn_st(&dx[i], 0.0f + bn_ld(&dy[i / cells]) / (float)cells);
}

template <typename T> static bn_status global_forward(bn_layer *l, const bn_pass *p)
{
    const pool_priv *pp = (const pool_priv *)l->priv;
    BN_TYPED_RD(T, x, l->in);
    BN_TYPED_WR(T, y, l->out);
    size_t planes = (size_t)l->in->n * pp->c;
    bn_launch_early(global_avg_forward<T>, grid_for(planes), THREADS, 0, (cudaStream_t)p->ctx->stream, x, y, planes,
                    pp->h * pp->w);
    BN_CUDA_LAUNCH();
    return BN_OK;
}

template <typename T> static bn_status global_backward(bn_layer *l, const bn_pass *p)
{
    const pool_priv *pp = (const pool_priv *)l->priv;
    BN_TYPED_RD(T, dy, l->out_grad);
    BN_TYPED_WR(T, dx, l->in_grad);
    size_t total = bn_blob_count(l->in_grad);
    bn_launch_early(global_avg_backward<T>, grid_for(total), THREADS, 0, (cudaStream_t)p->ctx->stream, dy, dx, total,
                    pp->h * pp->w);
    BN_CUDA_LAUNCH();
    return BN_OK;
}

extern "C" bn_status bn_avgpool_forward_gpu(bn_layer *l, const bn_pass *p)
{
    const pool_priv *pp = (const pool_priv *)l->priv;
    if (!pp->global) return pool_forward<AVG_FORWARD>(l, p);
    if (bn_blob_is_bf16(l->out)) return global_forward<__nv_bfloat16>(l, p);
    return global_forward<float>(l, p);
}

extern "C" bn_status bn_avgpool_backward_gpu(bn_layer *l, const bn_pass *p)
{
    const pool_priv *pp = (const pool_priv *)l->priv;
    if (!pp->global) return pool_backward<AVG_BACKWARD>(l, p);
    if (!l->in_grad) return BN_OK;
    if (bn_blob_is_bf16(l->in_grad)) return global_backward<__nv_bfloat16>(l, p);
    return global_backward<float>(l, p);
}

BN_CODE_ANCHOR(pool, global_avg_forward<float>) /* code_load.cu */
