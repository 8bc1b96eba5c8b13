/* conv_first.cuh - the device side of conv_first.h: a data block's sums of the first layer's
 * weight gradient (conv_tensor.cu's tensor_data runs them). For .cu files only. */
#ifndef BN_CONV_FIRST_CUH
#define BN_CONV_FIRST_CUH

#include <cuda_pipeline.h>
#include <stdint.h>

#include "conv_first.h"
#include "conv_stage.cuh"

/* A data block's stage for one image at fs (bn_first_stage_floats): the pooled gradient
 * [8][pp], then the masks [8][pp] (bytes), then the input planes [c][hp][wv]. */
static __device__ __forceinline__ unsigned char *first_masks(float *fs, int pp)
{
    return (unsigned char *)(fs + 8 * pp);
}

static __device__ __forceinline__ float *first_planes(float *fs, int pp)
{
    return fs + 8 * pp + (2 * pp + 3) / 4 * 4;
}

/* A thread's part in the first layer's sums: one (filter cl of the block's 8, input channel c,
 * window row ky) of `items`, in group `part` of `parts`, which take the pooled cells in turn. */
typedef struct first_role {
    int items, parts, part, it, cl, c, ky;
    int py0, px0, dpy, dpx; /* the thread's first cell, and the step between its cells */
    bool live;              /* a thread of a group, for one of the layer's filters */
} first_role;

static __device__ first_role first_role_of(const bn_first_filter &f, int cvalid, int pw)
{
    first_role r;
    r.items = BN_FIRST_ITEMS(f.c, f.k);
    r.parts = blockDim.x / r.items;
    r.part = threadIdx.x / r.items, r.it = threadIdx.x - r.part * r.items;
    const int ck = f.c * f.k, rest = r.it % ck;
    r.cl = r.it / ck, r.c = rest / f.k, r.ky = rest - r.c * f.k;
    r.live = r.part < r.parts && r.cl < cvalid;
    r.py0 = r.part / pw, r.px0 = r.part - r.py0 * pw;
    r.dpy = r.parts / pw, r.dpx = r.parts - r.dpy * pw;
    return r;
}

/* Starts copying image img's input planes (zero border: the hp x wv that the windows reach) into
 * xs and its pooling's mask for the block's filters c0 .. c0 + cvalid - 1 into ms. */
static __device__ void first_stage(const bn_first_filter &f, int img, int filters, int c0, int cvalid, int pp, float *xs,
                                   unsigned char *ms)
{
    const float *src = f.x + (size_t)img * f.c * f.h * f.w;
    bn_digits dg = digits_of(threadIdx.x, blockDim.x, f.hp, f.wv);
    for (int e = threadIdx.x; e < f.c * f.hp * f.wv; e += blockDim.x, digits_step(dg)) {
        const int c = dg.a, iy = dg.b - f.pad, ix = dg.c - f.pad;
        if (iy >= 0 && iy < f.h && ix >= 0 && ix < f.w)
            __pipeline_memcpy_async(xs + e, src + ((size_t)c * f.h + iy) * f.w + ix, 4);
        else
            xs[e] = 0.0f;
    }
    const unsigned char *m = f.mask + ((size_t)img * filters + c0) * pp;
    const int bytes = cvalid * pp;
    if ((((uintptr_t)m | (uintptr_t)ms) & 3) == 0 && bytes % 4 == 0) {
        for (int e = threadIdx.x; e < bytes / 4; e += blockDim.x) __pipeline_memcpy_async(ms + 4 * e, m + 4 * e, 4);
    } else {
        for (int e = threadIdx.x; e < bytes; e += blockDim.x) ms[e] = m[e];
    }
}

/* Adds one image's products into acc (the thread's window row, k of up to 7) and accb (the
 * pooled gradient's sum): gs holds the block's pooled gradients [cl][pp], ms the masks, xs the
 * planes [c][hp][wv]. */
static __device__ void first_add(const bn_first_filter &f, const first_role &r, const float *gs,
                                 const unsigned char *ms, const float *xs, int pp, int pw, float (&acc)[7],
                                 float &accb)
{
    if (!r.live) return;
    const float *g = gs + r.cl * pp;
    const unsigned char *mk = ms + r.cl * pp;
    const float *xr = xs + (r.c * f.hp + r.ky) * f.wv;
    for (int p = r.part, py = r.py0, px = r.px0; p < pp; p += r.parts) {
        const float gv = g[p];
        const int m = mk[p];
        const float *w = xr + (2 * py + (m >> 1)) * f.wv + 2 * px + (m & 1);
#pragma unroll
        for (int kx = 0; kx < 7; kx++)
            if (kx < f.k) acc[kx] = fmaf(gv, w[kx], acc[kx]);
        accb += gv;
        px += r.dpx, py += r.dpy;
        if (px >= pw) px -= pw, py++;
    }
}

/* The block's sums over its images as span `span`'s partial sums for the filters c0 ..
 * c0 + cvalid - 1 (conv_first.h's layout), the groups' sums added in group order through red
 * (blockDim.x * 8 floats). Every thread of the block calls it. */
static __device__ void first_store(const bn_first_filter &f, const first_role &r, int filters, int c0, int cvalid,
                                   int span, const float (&acc)[7], float accb, float *red)
{
    __syncthreads(); /* the stages are no longer read */
    if (r.live) {
        float *d = red + (size_t)(r.part * r.items + r.it) * 8;
#pragma unroll
        for (int kx = 0; kx < 7; kx++) d[kx] = acc[kx];
        d[7] = accb;
    }
    __syncthreads();
    const int taps = f.c * f.k * f.k, ck = f.c * f.k;
    float *out = f.parts + (size_t)span * filters * (taps + 1);
    /* Output o: item it's tap kx (it * k + kx), then each filter's bias. */
    const int weights = cvalid * ck * f.k;
    for (int o = threadIdx.x; o < weights + cvalid; o += blockDim.x) {
        const bool bias = o >= weights;
        const int it = bias ? (o - weights) * ck : o / f.k, kx = bias ? 7 : o - it * f.k;
        float v = 0.0f;
        for (int q = 0; q < r.parts; q++) v += red[(size_t)(q * r.items + it) * 8 + kx];
        const int cl = it / ck;
        if (bias) out[(size_t)filters * taps + c0 + cl] = v;
        else out[(size_t)(c0 + cl) * taps + (it - cl * ck) * f.k + kx] = v;
    }
}

#endif
