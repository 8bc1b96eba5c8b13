/* conv_argmax.cu - the conv2d layer's weight gradient through a 2x2 max pooling, from the
 * windows' maxima alone (see conv_argmax.h).
 *
 * dW[o][c][ky][kx] = sum over images and pooled cells p of g[o][p] * x[c][r + ky][s + kx], where
 * (r, s) is the cell of p's window that held the maximum (x with its zero border); db[o] = sum
 * of g[o][p]. Per image a block stages the input planes it needs twice (the second copy one
 * cell to the left) and its filters' pooled gradients and masks; a thread's step over a cell is a
 * gradient and a mask load, its window's rows in 8-byte loads and k * k multiply-adds. */
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

/* Starts copying image img's input planes into dst twice: plane c's cell (yy, xx) of the hp x wv
 * staged ones at dst[c * plane + yy * wp + xx] (x's value at (yy - pad, xx - pad), or zero), and
 * again one cell to the left, at dst[xb + c * plane + yy * wp + xx - 1]. */
static __device__ void stage_planes2(float *dst, const bn_argmax_plan &s, const float *x, int img)
{
    const bn_conv_geom &g = s.g;
    const float *src = x + (size_t)img * g.c * g.h * g.w;
    const int total = g.c * s.hp * s.wv;
    bn_digits dg = digits_of(threadIdx.x, blockDim.x, s.hp, s.wv);
    for (int e = threadIdx.x; e < total; e += blockDim.x, digits_step(dg)) {
        const int c = dg.a, yy = dg.b, xx = dg.c;
        const int iy = yy - g.pad, ix = xx - g.pad;
        float *d = dst + c * s.plane + yy * s.wp + xx, *left = d + s.xb - 1;
        if (iy >= 0 && iy < g.h && ix >= 0 && ix < g.w) {
            const float *v = src + ((size_t)c * g.h + iy) * g.w + ix;
            __pipeline_memcpy_async(d, v, 4);
            if (xx > 0) __pipeline_memcpy_async(left, v, 4);
        } else {
            *d = 0.0f;
            if (xx > 0) *left = 0.0f;
        }
    }
}

/* Starts copying image img's pooled gradients of filters o0 .. o0 + fv - 1 to gd[o * gp + p] and
 * their masks to md[o * mp + p] (o from 0). */
static __device__ void stage_cells(float *gd, unsigned char *md, const bn_argmax_plan &s, const bn_pooled_dy &pd,
                                   int img, int o0, int fv)
{
    const int pp = s.ph * s.pw;
    const size_t first = ((size_t)img * s.filters + o0) * pp;
    const float inv = 1.0f / pp;
    int p, dp;
    int o = div_small(threadIdx.x, pp, inv, p);
    const int dox = div_small(blockDim.x, pp, inv, dp);
    for (int e = threadIdx.x; e < fv * pp; e += blockDim.x) {
        __pipeline_memcpy_async(gd + o * s.gp + p, pd.dy + first + e, 4);
        p += dp, o += dox;
        if (p >= pp) p -= pp, o++;
    }
    const unsigned char *ms = pd.mask + first;
    if (s.mask_words && ((uintptr_t)ms & 3) == 0) {
        const int words = pp / 4;
        const float winv = 1.0f / words;
        int w, dw;
        o = div_small(threadIdx.x, words, winv, w);
        const int dow = div_small(blockDim.x, words, winv, dw);
        for (int e = threadIdx.x; e < fv * words; e += blockDim.x) {
            __pipeline_memcpy_async(md + o * s.mp + 4 * w, ms + 4 * e, 4);
            w += dw, o += dow;
            if (w >= words) w -= words, o++;
        }
    } else {
        o = div_small(threadIdx.x, pp, inv, p);
        for (int e = threadIdx.x; e < fv * pp; e += blockDim.x) {
            md[o * s.mp + p] = ms[e];
            p += dp, o += dox;
            if (p >= pp) p -= pp, o++;
        }
    }
}

/* One image's whole stage at dst (s.stage floats). */
static __device__ void stage_image(float *dst, const argmax_args &a, int img, int o0, int fv)
{
    stage_planes2(dst, a.s, a.x, img);
    float *gd = dst + a.s.xsize;
    stage_cells(gd, (unsigned char *)(gd + a.s.gsize), a.s, a.pd, img, o0, fv);
}

template <int K>
static __global__ void __launch_bounds__(MAX_THREADS) argmax_filter(argmax_args a)
{
    bn_early_entry(); /* pdl.cuh */
    extern __shared__ float4 smem4[];
    const bn_argmax_plan &s = a.s;
    const bn_conv_geom &g = s.g;
    constexpr int KK = K * K;
    const int pp = s.ph * s.pw, C = g.c, taps = C * KK;
    const int o0 = blockIdx.x * s.fb, fv = min(s.fb, s.filters - o0);
    float *buf = (float *)smem4; /* [2][stage]: planes, shifted planes, gradients, masks */
    const int tid = threadIdx.x, part = tid / s.items, it = tid - part * s.items;
    const int ol = it / C, c = it - ol * C;
    const bool live = part < s.parts && ol < fv;
    const int first = blockIdx.y * s.span, last = min(s.n, first + s.span);
    /* This thread's first cell (its group's number) as a row and column, and the step between its
     * cells (the groups) as rows and columns. */
    const int py0 = part / s.pw, px0 = part - py0 * s.pw, dpy = s.parts / s.pw, dpx = s.parts - dpy * s.pw;

    float acc[K][K], accb = 0.0f;
#pragma unroll
    for (int ky = 0; ky < K; ky++)
#pragma unroll
        for (int kx = 0; kx < K; kx++) acc[ky][kx] = 0.0f;

    stage_image(buf, a, first, o0, fv);
    __pipeline_commit();
    int b = 0;
    for (int img = first; img < last; img++, b ^= 1) {
        __syncthreads(); /* the other buffer is no longer read */
        if (img + 1 < last) stage_image(buf + (b ^ 1) * s.stage, a, img + 1, o0, fv);
        __pipeline_commit();
        __pipeline_wait_prior(1);
        __syncthreads();
        if (!live) continue;
        const float *xs = buf + b * s.stage + c * s.plane;
        const float *gs = buf + b * s.stage + s.xsize + ol * s.gp;
        const unsigned char *ms = (const unsigned char *)(buf + b * s.stage + s.xsize + s.gsize) + ol * s.mp;
        for (int p = part, py = py0, px = px0; p < pp; p += s.parts) {
            const float gv = gs[p];
            const int m = ms[p];
            /* The window's first cell, at an even place of the planes or (an odd one) of the
             * shifted copy. */
            const float *w = xs + (2 * py + (m >> 1)) * s.wp + 2 * px + (m & 1) * s.xb;
#pragma unroll
            for (int ky = 0; ky < K; ky++) {
                const float *r = w + ky * s.wp;
                float v[K];
#pragma unroll
                for (int j = 0; j + 1 < K; j += 2) {
                    const float2 q = *(const float2 *)(r + j);
                    v[j] = q.x, v[j + 1] = q.y;
                }
                if (K % 2) v[K - 1] = r[K - 1];
#pragma unroll
                for (int kx = 0; kx < K; kx++) acc[ky][kx] = fmaf(gv, v[kx], acc[ky][kx]);
            }
            accb += gv;
            px += dpx, py += dpy;
            if (px >= s.pw) px -= s.pw, py++;
        }
    }

    /* The groups' sums, [group][item][rs], where the stages were; then each of the block's
     * sums is added in group order by one thread. */
    float *red = buf;
    __syncthreads();
    if (live) {
        float *d = red + (size_t)(part * s.items + it) * s.rs;
#pragma unroll
        for (int ky = 0; ky < K; ky++)
#pragma unroll
            for (int kx = 0; kx < K; kx++) d[ky * K + kx] = acc[ky][kx];
        d[KK] = accb;
    }
    __syncthreads();
    float *out = a.part + (size_t)blockIdx.y * s.filters * (taps + 1);
    const int outs = fv * C * (KK + 1);
    for (int o = tid; o < outs; o += blockDim.x) {
        const int oi = o / (KK + 1), t = o - oi * (KK + 1), oo = oi / C, oc = oi - oo * C;
        if (t == KK && oc != 0) continue; /* the bias's sum: channel 0's */
        float v = 0.0f;
        for (int q = 0; q < s.parts; q++) v += red[(size_t)(q * s.items + oi) * s.rs + t];
        if (t < KK) out[(size_t)(o0 + oo) * taps + oc * KK + t] = v;
        else out[(size_t)s.filters * taps + o0 + oo] = v;
    }
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
