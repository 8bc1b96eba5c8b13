/* conv_argmax.cu - the conv2d layer's weight gradient through a 2x2 max pooling, from the
 * windows' maxima alone (see conv_argmax.h).
 *
 * dW[o][c][ky][kx] = sum over images and pooled cells p of g[o][p] * x[c][r + ky][s + kx], where
 * (r, s) is the cell of p's window that held the maximum (x with its zero border); db[o] = sum
 * of g[o][p]. Per image a block stages the input planes it needs and its filters' pooled
 * gradients and masks, then turns every (filter, cell) into a pair (gradient, offset of the
 * window's first tap in a staged plane), so that a thread's step over a cell is one 8-byte
 * load, k loads of x and k multiply-adds. */
#include <cuda_pipeline.h>
#include <stdint.h>
#include <string.h>

#include "conv_argmax.h"
#include "conv_argmax_limits.h"
#include "conv_direct.h"
#include "conv_family.h"
#include "conv_stage.cuh"
#include "gpu/code_anchor.cuh"
#include "gpu/cuda_check.h"
#include "gpu/pdl.cuh"
#include "gpu/smem_opt_in.cuh"

typedef struct argmax_args {
    bn_argmax_plan s;
    bn_pooled_dy pd;
    const float *x;
    float *part;
} argmax_args;

/* Starts copying image img's input planes into dst: plane c's cell (yy, xx) of the hp x wv
 * staged ones at dst[c * plane + yy * wp + xx], x's value at (yy - pad, xx - pad) or zero. */
static __device__ void stage_x(float *dst, const bn_argmax_plan &s, const float *x, int img)
{
    const bn_conv_geom &g = s.g;
    const float *src = x + (size_t)img * g.c * g.h * g.w;
    const int total = g.c * s.hp * s.wv;
    bn_digits dg = digits_of(threadIdx.x, blockDim.x, s.hp, s.wv);
    for (int e = threadIdx.x; e < total; e += blockDim.x, digits_step(dg)) {
        const int c = dg.a, yy = dg.b, xx = dg.c;
        const int iy = yy - g.pad, ix = xx - g.pad;
        float *d = dst + c * s.plane + yy * s.wp + xx;
        if (iy >= 0 && iy < g.h && ix >= 0 && ix < g.w)
            __pipeline_memcpy_async(d, src + ((size_t)c * g.h + iy) * g.w + ix, 4);
        else
            *d = 0.0f;
    }
}

template <int K>
static __global__ void __launch_bounds__(MAX_THREADS) argmax_filter(argmax_args a)
{
    bn_early_entry(); /* pdl.cuh */
    extern __shared__ float4 smem4[];
    const bn_argmax_plan &s = a.s;
    const bn_conv_geom &g = s.g;
    const int pp = s.ph * s.pw, C = g.c, taps = C * K * K;
    const int o0 = blockIdx.x * s.fb, fv = min(s.fb, s.filters - o0);
    float *xb = (float *)smem4;                      /* [2][xsize]: the staged planes */
    float *pb = xb + 2 * s.xsize;                    /* [2][psize]: pooled gradients, then masks */
    float2 *pairs = (float2 *)(pb + 2 * s.psize);    /* [pp][fv]: (gradient, window offset) */
    const int tid = threadIdx.x, part = tid / s.items, it = tid - part * s.items;
    const int c = it % C, r = it / C, ky = r % K, ol = r / K;
    const bool live = part < s.parts && ol < fv;
    /* The bias gradient: thread (q, o) for q < parts adds filter o's cells q, q + parts, ... */
    const int bq = tid / s.fb, bo = tid - bq * s.fb;
    const bool bias = bq < s.parts && bo < fv;
    const int first = blockIdx.y * s.span, last = min(s.n, first + s.span);
    const int count = fv * pp;
    const float inv_fv = 1.0f / fv, inv_pw = 1.0f / s.pw;
    /* Where this thread's first pairs entry is, and how far each next one lies. */
    int ol0, px0, dol, dpx;
    const int p0 = div_small(tid, fv, inv_fv, ol0), py0 = div_small(p0, s.pw, inv_pw, px0);
    const int dp = div_small((int)blockDim.x, fv, inv_fv, dol), dpy = div_small(dp, s.pw, inv_pw, dpx);

    float acc[K], accb = 0.0f;
#pragma unroll
    for (int kx = 0; kx < K; kx++) acc[kx] = 0.0f;

    stage_x(xb, s, a.x, first);
    stage_pooled_cells(pb, a.pd, ((size_t)first * s.filters + o0) * pp, count);
    __pipeline_commit();
    int b = 0;
    for (int img = first; img < last; img++, b ^= 1) {
        __syncthreads(); /* the other buffers and the pairs are no longer read */
        if (img + 1 < last) {
            stage_x(xb + (b ^ 1) * s.xsize, s, a.x, img + 1);
            stage_pooled_cells(pb + (b ^ 1) * s.psize, a.pd, ((size_t)(img + 1) * s.filters + o0) * pp, count);
        }
        __pipeline_commit();
        __pipeline_wait_prior(1);
        __syncthreads();
        const float *pg = pb + b * s.psize;
        const unsigned char *pm = (const unsigned char *)(pg + count);
        /* Entry e = p * fv + ol, thread tid taking e = tid, tid + step, ...: its (ol, p, py, px)
         * advance by fixed amounts (worked out once, before the loop). */
        for (int e = tid, eo = ol0, p = p0, py = py0, px = px0; e < count; e += blockDim.x) {
            const int at = eo * pp + p, m = pm[at];
            pairs[e] = make_float2(pg[at], __int_as_float((2 * py + (m >> 1)) * s.wp + 2 * px + (m & 1)));
            eo += dol, p += dp, px += dpx, py += dpy;
            if (eo >= fv) eo -= fv, p++, px++;
            if (px >= s.pw) px -= s.pw, py++;
        }
        __syncthreads();
        if (bias)
            for (int p = bq; p < pp; p += s.parts) accb += pairs[p * fv + bo].x;
        if (!live) continue;
        const float *xr = xb + b * s.xsize + c * s.plane + ky * s.wp;
        for (int p = part; p < pp; p += s.parts) {
            const float2 v = pairs[p * fv + ol];
            const float *w = xr + __float_as_int(v.y);
#pragma unroll
            for (int kx = 0; kx < K; kx++) acc[kx] = fmaf(v.x, w[kx], acc[kx]);
        }
    }

    /* The groups' sums, added in group order by group 0 (where the planes were). */
    float *red = xb, *redb = xb + (size_t)s.parts * s.items * K;
    if (s.parts > 1) {
        __syncthreads();
        if (live) {
            float *d = red + (size_t)(part * s.items + it) * K;
#pragma unroll
            for (int kx = 0; kx < K; kx++) d[kx] = acc[kx];
        }
        if (bias) redb[bq * s.fb + bo] = accb;
        __syncthreads();
        if (part == 0 && live)
            for (int q = 1; q < s.parts; q++) {
                const float *d = red + (size_t)(q * s.items + it) * K;
#pragma unroll
                for (int kx = 0; kx < K; kx++) acc[kx] += d[kx];
            }
        if (bq == 0 && bias)
            for (int q = 1; q < s.parts; q++) accb += redb[q * s.fb + bo];
    }
    float *out = a.part + (size_t)blockIdx.y * s.filters * (taps + 1);
    if (bq == 0 && bias) out[(size_t)s.filters * taps + o0 + bo] = accb;
    if (part != 0 || !live) return;
#pragma unroll
    for (int kx = 0; kx < K; kx++) out[(size_t)(o0 + ol) * taps + (c * K + ky) * K + kx] = acc[kx];
}

template <int K>
static bn_status launch(const argmax_args &a, cudaStream_t st)
{
    static bool opted;
    BN_CUDA(bn_smem_opt_in(argmax_filter<K>, &opted, ARGMAX_SMEM));
    bn_launch_early(argmax_filter<K>, dim3(a.s.groups, a.s.spans), dim3(a.s.threads), a.s.smem, st, a);
    BN_CUDA_LAUNCH();
    return BN_OK;
}

extern "C" bn_status bn_argmax_backward_filter(const bn_argmax_plan *p, void *stream, const float *x,
                                               const bn_pooled_dy *pooled, float *dw, float *db, float *workspace)
{
    if (!p->ok || !pooled || pooled->ph != p->ph || pooled->pw != p->pw)
        return bn_error(BN_ERR_INTERNAL, "argmax weight gradient cannot run this shape");
    const argmax_args a = {*p, *pooled, x, workspace};
    const cudaStream_t st = (cudaStream_t)stream;
    bn_status s;
    switch (p->g.k) {
    case 1: s = launch<1>(a, st); break;
    case 2: s = launch<2>(a, st); break;
    case 3: s = launch<3>(a, st); break;
    case 4: s = launch<4>(a, st); break;
    case 5: s = launch<5>(a, st); break;
    case 6: s = launch<6>(a, st); break;
    case 7: s = launch<7>(a, st); break;
    default: return bn_error(BN_ERR_INTERNAL, "argmax weight gradient: no kernel for a %d-wide window", p->g.k);
    }
    if (s != BN_OK) return s;
    return bn_direct_finish_filter(stream, workspace, p->spans, p->filters, p->g.c * p->g.k * p->g.k, dw, db);
}

extern "C" bn_status bn_conv_run_argmax(const bn_conv_family_plan *p, const bn_conv_shape *s, int pass, void *stream,
                                        const bn_conv_io *io)
{
    if (pass != BN_CONV_FILTER)
        return bn_error(BN_ERR_INTERNAL, "the argmax kernel runs the backward-filter pass only");
    if (!io->pooled_dy)
        return bn_error(BN_ERR_INTERNAL, "the argmax backward-filter pass needs dy through a pooling");
    return bn_argmax_backward_filter(&p->argmax, stream, io->x, io->pooled_dy, io->dw, io->db, io->parts);
}

BN_CODE_ANCHOR(conv_argmax, argmax_filter<1>) /* code_load.cu */
