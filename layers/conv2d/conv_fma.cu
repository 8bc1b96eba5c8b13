/* conv_fma.cu - the conv2d layer's backward-data pass as FP32 multiply-adds in 8 x 8 register
 * tiles (see conv_fma.h). */
#include <cuda_pipeline.h>
#include <stddef.h>
#include <stdint.h>

#include "conv_family.h"
#include "conv_fma.h"
#include "conv_fma_limits.h"
#include "conv_stage.cuh"
#include "gpu/code_anchor.cuh"
#include "gpu/cuda_check.h"
#include "gpu/pdl.cuh"
#include "gpu/smem_opt_in.cuh"
#include "gpu/vec_ops.cuh"

typedef struct fma_args {
    bn_fma_data s;
    bn_conv_geom g;
    int n, filters;
    const float *dy;
    bn_pooled_dy pd;      /* pd.dy not NULL: dy read through the pooling */
    const float *w;
    float *dx;
    bn_conv_relu relu;
} fma_args;

/* Starts copying filters f0 .. f0 + fv - 1 of the block's weights (rows: its channels' taps, zero
 * past them) and dy (its images' positions, zero past them) into ws [fv][RM] and ds [fv][PN] with
 * cp.async, a warp a filter, its lanes along the row; or with a pooling, expands the pooled
 * gradient into ds at once. The caller waits for the copies (__pipeline_wait_prior). */
template <int RM, int PN>
static __device__ void stage_chunk(const fma_args &a, float *ws, float *ds, int c0, int rows, int img0, int iv, int f0,
                                   int fv)
{
    const bn_fma_data &s = a.s;
    const int kk = a.g.k * a.g.k, taps = a.g.c * kk, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int q = s.q, used = iv * q;
    for (int f = warp; f < fv; f += FMA_THREADS / 32) {
        const float *src = a.w + (size_t)(f0 + f) * taps + (size_t)c0 * kk;
        float *dst = ws + f * RM;
#pragma unroll
        for (int r = lane; r < RM; r += 32) {
            if (r < rows) __pipeline_memcpy_async(dst + r, src + r, 4);
            else dst[r] = 0.0f;
        }
        if (a.pd.dy) continue;
        float *drow = ds + f * PN;
        for (int il = 0; il < iv; il++) {
            const float *dsrc = a.dy + ((size_t)(img0 + il) * a.filters + f0 + f) * q;
            for (int e = lane; e < q; e += 32) __pipeline_memcpy_async(drow + il * q + e, dsrc + e, 4);
        }
        for (int e = used + lane; e < PN; e += 32) drow[e] = 0.0f;
    }
    __pipeline_commit();
    if (!a.pd.dy) return;
    const int pp = a.pd.ph * a.pd.pw;
    for (int il = 0; il < iv; il++) {
        const size_t first = ((size_t)(img0 + il) * a.filters + f0) * pp;
        expand_pooled<true>(ds + il * q, PN, a.g.ow, a.pd.dy + first, a.pd.mask + first, fv, a.g.oh, a.g.ow, a.pd.ph,
                            a.pd.pw, true);
    }
}

/* Writes dx (and a fused ReLU's input gradient) for the block's cells (image il, channel cl, y, x)
 * from its tile ts [RM][PN]: each cell's taps' products in window order, over the taps whose
 * position of dy lies in the plane (rows ky0 .. ky1 - 1, columns kx0 .. kx1 - 1 of the window).
 * Tap (ky, kx) reads the tile at row cl k k + ky k + kx, position il q + (y + pad - ky) ow + (x +
 * pad - kx): one step of PN - 1 floats a column of the window, k PN - ow a row. K: the window
 * as a constant (every tap unrolled), or 0 for any window. */
template <int K, int PN>
static __device__ void sum_taps(const fma_args &a, const float *ts, int c0, int cv, int img0, int iv)
{
    const bn_conv_geom &g = a.g;
    const int k = K ? K : g.k, kk = k * k, hw = g.h * g.w, cells = iv * cv * hw;
    const int col_step = PN - 1, row_step = k * PN - g.ow;
    const float inv_cv = 1.0f / cv;
    bn_digits dg = digits_of(threadIdx.x, FMA_THREADS, g.h, g.w);
    for (int e = threadIdx.x; e < cells; e += FMA_THREADS, digits_step(dg)) {
        int cl;
        const int il = div_small(dg.a, cv, inv_cv, cl), y = dg.b, x = dg.c;
        const int ky0 = max(0, y + g.pad - g.oh + 1), ky1 = min(k, y + g.pad + 1);
        const int kx0 = max(0, x + g.pad - g.ow + 1), kx1 = min(k, x + g.pad + 1);
        /* Tap (0, 0)'s place, outside the tile where that tap does not reach dy. */
        const int t0 = cl * kk * PN + il * a.s.q + (y + g.pad) * g.ow + (x + g.pad);
        float sum = 0.0f;
        if constexpr (K > 0) {
            /* The window's columns that reach dy, as bits. */
            const unsigned cols = ((1u << kx1) - 1u) & ~((1u << kx0) - 1u);
#pragma unroll
            for (int ky = 0; ky < K; ky++) {
                if (ky < ky0 || ky >= ky1) continue;
                const float *r = ts + t0 + ky * row_step;
#pragma unroll
                for (int kx = 0; kx < K; kx++)
                    if (cols & (1u << kx)) sum += r[kx * col_step];
            }
        } else {
            const float *t = ts + t0 + ky0 * row_step + kx0 * col_step;
            for (int ky = ky0; ky < ky1; ky++, t += row_step) {
                const float *u = t;
                for (int kx = kx0; kx < kx1; kx++, u += col_step) sum += *u;
            }
        }
        const size_t at = ((size_t)(img0 + il) * g.c + c0 + cl) * hw + y * g.w + x;
        a.dx[at] = sum;
        if (a.relu.out)
            a.relu.out[(size_t)(img0 + il) * a.relu.image + (size_t)(c0 + cl) * hw + y * g.w + x] =
                masked(sum, __ldg(a.relu.mask + at));
    }
}

/* Block (channel group, image group). Warp (wr, wc) of the WR x (8 / WR) takes rows 32 wr ..
 * 32 wr + 31 and positions 64 wc .. 64 wc + 63 of the tile; its lane (rg, pg) = (lane / 8, lane %
 * 8) the rows 4 rg .. + 3 and 16 + 4 rg .. + 3 of those, by the positions 4 pg .. + 3 and 32 + 4
 * pg .. + 3, so that each 16-byte load of a filter's weights is one of 4 addresses and each of
 * its dy one of 8 consecutive ones. */
template <int WR>
static __global__ void __launch_bounds__(FMA_THREADS, FMA_RESIDENT) fma_data(fma_args a)
{
    bn_early_entry(); /* pdl.cuh */
    constexpr int RM = FMA_WARP_ROWS * WR, PN = FMA_WARP_POSITIONS * (FMA_WARPS / WR);
    extern __shared__ float4 smem4[];
    float *sm = (float *)smem4;
    const bn_fma_data &s = a.s;
    const bn_conv_geom &g = a.g;
    const int kk = g.k * g.k;
    const int c0 = blockIdx.x * s.cb, cv = min(s.cb, g.c - c0), rows = cv * kk;
    const int img0 = blockIdx.y * s.ib, iv = min(s.ib, a.n - img0);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int r0 = (warp % WR) * FMA_WARP_ROWS + (lane >> 3) * 4;
    const int p0 = (warp / WR) * FMA_WARP_POSITIONS + (lane & 7) * 4;
    float *ws = sm, *ds = sm + s.fc * RM;

    float acc[8][8];
#pragma unroll
    for (int i = 0; i < 8; i++)
#pragma unroll
        for (int j = 0; j < 8; j++) acc[i][j] = 0.0f;

    for (int f0 = 0; f0 < a.filters; f0 += s.fc) {
        const int fv = min(s.fc, a.filters - f0);
        if (f0) __syncthreads();
        stage_chunk<RM, PN>(a, ws, ds, c0, rows, img0, iv, f0, fv);
        __pipeline_wait_prior(0);
        __syncthreads();
        const float *wp = ws + r0, *dp = ds + p0;
#pragma unroll 2
        for (int f = 0; f < fv; f++, wp += RM, dp += PN) {
            const float4 a0 = *(const float4 *)wp, a1 = *(const float4 *)(wp + 16);
            const float4 b0 = *(const float4 *)dp, b1 = *(const float4 *)(dp + 32);
            const float av[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
            const float bv[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
            for (int i = 0; i < 8; i++)
#pragma unroll
                for (int j = 0; j < 8; j++) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
        }
    }
    __syncthreads();

    /* The tile, [RM][PN], over the staged chunks. */
    float *ts = sm;
#pragma unroll
    for (int i = 0; i < 8; i++) {
        float *row = ts + (size_t)(r0 + (i < 4 ? i : 12 + i)) * PN + p0;
        *(float4 *)row = make_float4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]);
        *(float4 *)(row + 32) = make_float4(acc[i][4], acc[i][5], acc[i][6], acc[i][7]);
    }
    __syncthreads();

    switch (g.k) {
    case 1: sum_taps<1, PN>(a, ts, c0, cv, img0, iv); break;
    case 3: sum_taps<3, PN>(a, ts, c0, cv, img0, iv); break;
    case 5: sum_taps<5, PN>(a, ts, c0, cv, img0, iv); break;
    default: sum_taps<0, PN>(a, ts, c0, cv, img0, iv); break;
    }
}

template <int WR>
static bn_status launch(const fma_args &a, cudaStream_t st)
{
    static bool opted;
    BN_CUDA(bn_smem_opt_in(fma_data<WR>, &opted, FMA_SMEM_BYTES));
    bn_launch_early(fma_data<WR>, dim3(a.s.groups, a.s.blocks), dim3(FMA_THREADS), a.s.smem, st, a);
    BN_CUDA_LAUNCH();
    return BN_OK;
}

extern "C" bn_status bn_fma_backward_data(const bn_fma_plan *p, void *stream, const float *dy,
                                          const bn_pooled_dy *pooled, const float *w, float *dx,
                                          const bn_conv_relu *relu)
{
    if (!p->data_ok || p->data.smem > FMA_SMEM_BYTES)
        return bn_error(BN_ERR_INTERNAL, "fma data pass cannot run this shape");
    if (pooled && (pooled->ph != p->g.oh / 2 || pooled->pw != p->g.ow / 2))
        return bn_error(BN_ERR_INTERNAL, "fma data pass: the pooling's plane does not match the layer's output");
    fma_args a;
    a.s = p->data, a.g = p->g, a.n = p->n, a.filters = p->filters;
    a.dy = dy, a.w = w, a.dx = dx;
    if (pooled) {
        a.pd = *pooled;
    } else {
        a.pd.dy = NULL, a.pd.mask = NULL, a.pd.ph = a.pd.pw = 0;
    }
    if (relu && relu->out) {
        a.relu = *relu;
    } else {
        a.relu.out = NULL, a.relu.mask = NULL, a.relu.image = 0;
    }
    const cudaStream_t st = (cudaStream_t)stream;
    switch (p->data.wr) {
    case 4: return launch<4>(a, st);
    case 2: return launch<2>(a, st);
    case 1: return launch<1>(a, st);
    default: return bn_error(BN_ERR_INTERNAL, "fma data pass: no kernel for %d warps along the rows", p->data.wr);
    }
}

extern "C" bn_status bn_conv_run_fma(const bn_conv_family_plan *p, const bn_conv_shape *s, int pass, void *stream,
                                     const bn_conv_io *io)
{
    (void)s;
    if (pass != BN_CONV_DATA) return bn_error(BN_ERR_INTERNAL, "the fma kernel runs the backward-data pass only");
    return bn_fma_backward_data(&p->fma, stream, io->dy, io->pooled_dy, io->w, io->dx, &io->relu);
}

BN_CODE_ANCHOR(conv_fma, fma_data<4>) /* code_load.cu */
