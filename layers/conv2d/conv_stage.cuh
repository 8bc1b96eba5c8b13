/* conv_stage.cuh - staging input planes in shared memory for blobnet's convolution kernels
 * (conv_rows.cu, conv_tensor.cu, conv_argmax.cu): each plane copied with its zero border, so that
 * the kernels read windows without bounds tests, a pooled gradient expanded, and the index
 * arithmetic their block-strided loops share. Device code only. */
#ifndef BN_CONV_STAGE_CUH
#define BN_CONV_STAGE_CUH

#include <cuda_pipeline.h>
#include <stdint.h>

#include "conv_pooled.h"

/* e / d and e % d for 0 <= e < 2^24 and d > 0, given inv = 1.0f / d: a float product and one
 * correction, far fewer instructions than an integer division by a value known only at run time. */
static __device__ __forceinline__ int div_small(int e, int d, float inv, int &rem)
{
    int q = __float2int_rz(__int2float_rn(e) * inv), r = e - q * d;
    if (r < 0) q--, r += d;
    else if (r >= d) q++, r -= d;
    rem = r;
    return q;
}

/* An index e = (a * nb + b) * nc + c kept as its digits (a, b, c) while it steps by a fixed amount
 * (a block's threads, blockDim.x): each step adds the step's digits with two carries, where
 * finding them anew from e would take two divisions and the address arithmetic after them. */
typedef struct bn_digits {
    int a, b, c;    /* e's digits */
    int sa, sb, sc; /* the step's */
    int nb, nc;
} bn_digits;

/* e's digits and the step's, for 0 <= e, step < 2^24. */
static __device__ __forceinline__ bn_digits digits_of(int e, int step, int nb, int nc)
{
    const float inv_c = 1.0f / nc, inv_b = 1.0f / nb;
    bn_digits d;
    d.nb = nb, d.nc = nc;
    d.a = div_small(div_small(e, nc, inv_c, d.c), nb, inv_b, d.b);
    d.sa = div_small(div_small(step, nc, inv_c, d.sc), nb, inv_b, d.sb);
    return d;
}

/* e += step: c < nc and b < nb before and after (each sum is below twice its radix). */
static __device__ __forceinline__ void digits_step(bn_digits &d)
{
    d.c += d.sc;
    const int carry_c = d.c >= d.nc;
    d.c -= carry_c ? d.nc : 0;
    d.b += d.sb + carry_c;
    const int carry_b = d.b >= d.nb;
    d.b -= carry_b ? d.nb : 0;
    d.a += d.sa + carry_b;
}

/* Copies `planes` consecutive hi x wi planes from src into shared memory as hp x wp planes, each
 * input value at (row + pad, column + pad), zeros everywhere else; planes from `valid` on are all
 * zeros (src is not read for them). vec: src is 16-byte aligned and wi and pad are multiples of
 * 4, so every 4-float piece of a staged row lies wholly inside the input or wholly outside. */
static __device__ void stage_planes(float *dst, const float *src, int planes, int valid, int hi, int wi, int pad,
                                    int hp, int wp, bool vec)
{
    const int wq = wp / 4, per_plane = hp * wq, total = planes * per_plane;
    for (int e = threadIdx.x; e < total; e += blockDim.x) {
        const int pl = e / per_plane, rem = e - pl * per_plane, yy = rem / wq, x0 = (rem - yy * wq) * 4;
        const int iy = yy - pad, ix = x0 - pad;
        float *d = dst + (pl * hp + yy) * wp + x0;
        const bool row_in = pl < valid && iy >= 0 && iy < hi;
        if (vec) {
            if (row_in && ix >= 0 && ix < wi)
                __pipeline_memcpy_async(d, src + ((size_t)pl * hi + iy) * wi + ix, 16);
            else
                *(float4 *)d = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            continue;
        }
#pragma unroll
        for (int q = 0; q < 4; q++) {
            if (row_in && ix + q >= 0 && ix + q < wi)
                __pipeline_memcpy_async(d + q, src + ((size_t)pl * hi + iy) * wi + ix + q, 4);
            else
                d[q] = 0.0f;
        }
    }
}

/* The two steps of expand_pooled, for its two ways of finding a pooled element's indices: element
 * e as four windows of a row (filter o, pooled row py, windows 4 qx .. 4 qx + 3), two 16-byte
 * pieces in each of its two rows; element e as one window (filter o, window (py, px)), each of its
 * rows one 8-byte store with `pairs`. They read expand_pooled's dst, dst_plane, dst_row, pdy, mask
 * (and pairs), and are undefined after it. Macros, so that each way compiles to the code it had
 * alone (inlined functions changed the code of 22 tensor-core and 12 row-tile kernels). */
#define BN_EXPAND_QUAD(e, o, py, qx)                                                                \
    const float4 v = ((const float4 *)pdy)[e];                                                      \
    const uint32_t m = ((const uint32_t *)mask)[e];                                                 \
    const float x[4] = {0.0f + v.x, 0.0f + v.y, 0.0f + v.z, 0.0f + v.w};                            \
    float top[8], bottom[8];                                                                        \
    _Pragma("unroll") for (int i = 0; i < 4; i++) {                                                 \
        const uint32_t c = (m >> (8 * i)) & 0xffu;                                                  \
        top[2 * i] = c == 0 ? x[i] : 0.0f, top[2 * i + 1] = c == 1 ? x[i] : 0.0f;                   \
        bottom[2 * i] = c == 2 ? x[i] : 0.0f, bottom[2 * i + 1] = c == 3 ? x[i] : 0.0f;             \
    }                                                                                               \
    float4 *d = (float4 *)(dst + (o) * dst_plane + 2 * (py) * dst_row + 8 * (qx));                  \
    d[0] = make_float4(top[0], top[1], top[2], top[3]);                                             \
    d[1] = make_float4(top[4], top[5], top[6], top[7]);                                             \
    d[dst_row / 4] = make_float4(bottom[0], bottom[1], bottom[2], bottom[3]);                       \
    d[dst_row / 4 + 1] = make_float4(bottom[4], bottom[5], bottom[6], bottom[7]);

#define BN_EXPAND_WINDOW(e, o, py, px)                                                              \
    const float v = 0.0f + pdy[e];                                                                  \
    const int m = mask[e];                                                                          \
    const float2 top = make_float2(m == 0 ? v : 0.0f, m == 1 ? v : 0.0f);                           \
    const float2 bottom = make_float2(m == 2 ? v : 0.0f, m == 3 ? v : 0.0f);                        \
    float *d = dst + (o) * dst_plane + 2 * (py) * dst_row + 2 * (px);                               \
    if (pairs) {                                                                                    \
        *(float2 *)d = top;                                                                         \
        *(float2 *)(d + dst_row) = bottom;                                                          \
    } else {                                                                                        \
        d[0] = top.x, d[1] = top.y;                                                                 \
        d[dst_row] = bottom.x, d[dst_row + 1] = bottom.y;                                           \
    }

/* Writes `filters` planes of a convolution's output gradient (oh x ow) from a 2x2 max pooling's
 * gradient and argmax mask (conv_pooled.h): plane o's cell (y, x) lands at
 * dst[o * dst_plane + y * dst_row + x]. A window's maximum cell gets 0.0f + dy (as the pooling
 * layer's backward pass writes it), its other cells and the cells of a last odd row or column
 * 0.0f. pdy and mask point at the first filter's pooled plane (global or shared memory). Each
 * row of a window is one 8-byte store where dst, dst_plane and dst_row allow it; with `quads`, a
 * thread takes four windows of a row at once where the addresses allow 16-byte pieces.
 *
 * DIGITS: the loops step their indices by digits (bn_digits) rather than dividing each anew.
 * That takes instructions off the tensor-core passes (version 68 of docs/performance.md), but
 * inlined into the row tiles' filter pass it cost registers even where no pooling is read:
 * rows_filter<8, 3> took 96 instead of 64, one block of 512 threads a multiprocessor instead of
 * the two its plan counts on, and narrow_chain's 16-channel layers ran slower (version 69). So the
 * row tiles divide: each family's kernels are the ones measured (the row tiles version 67's, the
 * tensor cores version 68's). */
template <bool DIGITS>
static __device__ void expand_pooled(float *dst, int dst_plane, int dst_row, const float *pdy,
                                     const unsigned char *mask, int filters, int oh, int ow, int ph, int pw,
                                     bool quads_ok)
{
    const int pp = ph * pw;
    /* Four windows of a row at a time where the pooled rows come in fours and every address
     * allows 16-byte loads and stores: a thread then finds its indices once for four windows and
     * stores 16-byte pieces. */
    const bool quads = quads_ok && pw % 4 == 0 && ((dst_plane | dst_row) & 3) == 0 && ((uintptr_t)dst & 15) == 0 &&
                       ((uintptr_t)pdy & 15) == 0 && ((uintptr_t)mask & 3) == 0;
    if constexpr (DIGITS) {
        if (quads) {
            const int qp = pp / 4, qw = pw / 4;
            bn_digits dg = digits_of(threadIdx.x, blockDim.x, ph, qw);
            for (int e = threadIdx.x; e < filters * qp; e += blockDim.x, digits_step(dg)) {
                const int o = dg.a, py = dg.b, qx = dg.c;
                BN_EXPAND_QUAD(e, o, py, qx)
            }
        }
        if (!quads) {
            const bool pairs = ((dst_plane | dst_row) & 1) == 0 && ((uintptr_t)dst & 7) == 0;
            bn_digits dg = digits_of(threadIdx.x, blockDim.x, ph, pw);
            for (int e = threadIdx.x; e < filters * pp; e += blockDim.x, digits_step(dg)) {
                const int o = dg.a, py = dg.b, px = dg.c;
                BN_EXPAND_WINDOW(e, o, py, px)
            }
        }
    } else {
        if (quads) {
            const int qp = pp / 4, qw = pw / 4;
            const float inv_qp = 1.0f / qp, inv_qw = 1.0f / qw;
            for (int e = threadIdx.x; e < filters * qp; e += blockDim.x) {
                int p, qx;
                const int o = div_small(e, qp, inv_qp, p), py = div_small(p, qw, inv_qw, qx);
                BN_EXPAND_QUAD(e, o, py, qx)
            }
        }
        /* One window a thread where the quads did not run: with them, e starts at the end and the
         * loop does nothing. Written so rather than as the digits' `if (!quads)` because this is
         * version 67's loop, whose code the row tiles keep (the comment above). */
        const float inv_pp = 1.0f / pp, inv_pw = 1.0f / pw;
        const bool pairs = ((dst_plane | dst_row) & 1) == 0 && ((uintptr_t)dst & 7) == 0;
        for (int e = quads ? filters * pp : threadIdx.x; e < filters * pp; e += blockDim.x) {
            int p, px;
            const int o = div_small(e, pp, inv_pp, p), py = div_small(p, pw, inv_pw, px);
            BN_EXPAND_WINDOW(e, o, py, px)
        }
    }
    if (oh == 2 * ph && ow == 2 * pw) return;
    /* The cells no window covers: column ow - 1 when ow is odd, row oh - 1 when oh is odd. */
    const int extra = oh + ow;
    const float inv_extra = 1.0f / extra;
    for (int e = threadIdx.x; e < filters * extra; e += blockDim.x) {
        int i;
        const int o = div_small(e, extra, inv_extra, i);
        if (i < oh) {
            if (ow != 2 * pw) dst[o * dst_plane + i * dst_row + ow - 1] = 0.0f;
        } else if (oh != 2 * ph) {
            dst[o * dst_plane + (oh - 1) * dst_row + i - oh] = 0.0f;
        }
    }
}

#undef BN_EXPAND_QUAD
#undef BN_EXPAND_WINDOW

/* Starts copying `count` consecutive pooled cells' gradients and mask bytes, from cell `first`
 * of pd on, into dst (pooled_stage_bytes(count), 16-byte aligned) with cp.async: 16-byte pieces
 * where source and size allow, else 4-byte ones, the mask byte by byte (at once) when not even
 * that. */
static __device__ void stage_pooled_cells(float *dst, const bn_pooled_dy &pd, size_t first, int count)
{
    const float *src = pd.dy + first;
    if ((((uintptr_t)src) & 15) == 0 && count % 4 == 0) {
        for (int e = threadIdx.x; e < count / 4; e += blockDim.x) __pipeline_memcpy_async(dst + 4 * e, src + 4 * e, 16);
    } else {
        for (int e = threadIdx.x; e < count; e += blockDim.x) __pipeline_memcpy_async(dst + e, src + e, 4);
    }
    unsigned char *mdst = (unsigned char *)(dst + count);
    const unsigned char *msrc = pd.mask + first;
    if (((((uintptr_t)msrc) | ((uintptr_t)mdst)) & 15) == 0 && count % 16 == 0) {
        for (int e = threadIdx.x; e < count / 16; e += blockDim.x)
            __pipeline_memcpy_async(mdst + 16 * e, msrc + 16 * e, 16);
    } else if (((((uintptr_t)msrc) | ((uintptr_t)mdst)) & 3) == 0 && count % 4 == 0) {
        for (int e = threadIdx.x; e < count / 4; e += blockDim.x) __pipeline_memcpy_async(mdst + 4 * e, msrc + 4 * e, 4);
    } else {
        for (int e = threadIdx.x; e < count; e += blockDim.x) mdst[e] = msrc[e];
    }
}

/* Starts copying image img's pooled gradient and mask (`count` = filters * ph * pw each) into
 * dst, as stage_pooled_cells. */
static __device__ void stage_pooled(float *dst, const bn_pooled_dy &pd, int img, int count)
{
    stage_pooled_cells(dst, pd, (size_t)img * count, count);
}

/* expand_pooled from what stage_pooled staged at `staged` (`filters` * ph * pw of each). */
static __device__ void expand_staged(float *dst, int dst_plane, int dst_row, const float *staged, int filters, int oh,
                                     int ow, int ph, int pw, bool quads_ok)
{
    const int count = filters * ph * pw;
    expand_pooled<true>(dst, dst_plane, dst_row, staged, (const unsigned char *)(staged + count), filters, oh, ow, ph,
                        pw, quads_ok);
}

#endif
