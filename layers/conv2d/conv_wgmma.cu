/* conv_wgmma.cu - the convolution forward pass on Hopper's warpgroup products (conv_wgmma.h).
 *
 * A block is one warpgroup (128 threads) and one tile of 64 output rows (image, position) by every
 * filter. Shared memory holds:
 * - four slices of raw copies in flight: A, the tile's inputs for 32 of the summed index, as
 *   [k][row] (rows of RAW_A_ROW floats), and B, the filters' weights, as [filter][k] (rows of
 *   RAW_B_ROW floats); the strides keep the copies' and the split's accesses in distinct banks;
 * - the slice being multiplied, split into TF32 values and remainders, in the layout the products
 *   read without swizzling: 8 x 4 cores (8 rows of 16 bytes, 128 bytes together), CORE_K bytes
 *   apart along k and CORE_ROWS bytes apart along the rows, so that a warp's stores of 8 rows by 4
 *   k fall in 32 distinct banks;
 * - the summed index's table: per k, the input's offset from the row's first cell, and its tap.
 *
 * The slices' copies are gathered with cp.async (zeros where the window leaves the image or the
 * index passes its end), four in flight; each slice is split once its copies have landed, then its
 * products are issued as one group (m64nNk8: per 8 of the index, remainder x value, value x
 * remainder, value x value into the same sums) and waited for before the next split, while the
 * later slices' copies land. The sums are then staged through shared memory for the epilogue. */
#include <cuda_pipeline.h>
#include <stdint.h>

#include "conv_family.h"
#include "conv_wgmma.h"
#include "gpu/code_anchor.cuh"
#include "gpu/cuda_check.h"
#include "gpu/pdl.cuh"
#include "gpu/smem_opt_in.cuh"

#define B_STAGES BN_WGMMA_B_STAGES
/* The epilogue's rows of sums: the filters, plus one. */
#define TILE_ROW_PAD 1

typedef struct wgmma_args {
    bn_wgmma_plan s;
    const float *x, *w, *bias;
    float *y;
    bn_pooled_out po; /* po.y set: the pooling's output and mask instead of y */
} wgmma_args;

extern "C" int bn_wgmma_built(void)
{
#ifdef BN_WGMMA_SM90A
    return 1;
#else
    return 0;
#endif
}

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define WGMMA_CODE 1
#endif

#ifdef WGMMA_CODE
/* A shared-memory operand's descriptor, without swizzling: cores of 8 rows by 16 bytes, `lead` bytes
 * apart along the summed index and `stride` bytes apart along the rows. */
static __device__ __forceinline__ uint64_t operand(uint32_t addr, uint32_t lead, uint32_t stride)
{
    return (uint64_t)((addr & 0x3FFFF) >> 4) | ((uint64_t)(lead >> 4) << 16) | ((uint64_t)(stride >> 4) << 32);
}

static __device__ __forceinline__ void split_value(float x, float &hi, float &lo)
{
    const uint32_t h = (__float_as_uint(x) + 0x1000u) & 0xffffe000u;
    hi = __uint_as_float(h);
    lo = x - hi;
}

/* d += A * B over 8 of the summed index, both from shared memory: m64 n(8 NT) k8. */
template <int NT> static __device__ __forceinline__ void product(float (&d)[NT * 4], uint64_t a, uint64_t b);

#include "conv_wgmma_products.cuh"

/* The named barriers (0 is __syncthreads): the stagers' own; between the two sides, the planes
 * split, and per stage of split weights "full" (the stagers stored a tap's) and "empty" (its
 * products are done). */
#define BAR_STAGERS 1
#define BAR_PLANES 2
#define BAR_FULL 3
#define BAR_EMPTY (BAR_FULL + B_STAGES)
#define STAGERS 256

static __device__ __forceinline__ void bar_sync(int id, int count)
{
    asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(count) : "memory");
}

static __device__ __forceinline__ void bar_arrive(int id, int count)
{
    asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(count) : "memory");
}
#endif

/* Warpgroups 0 and 1 issue the products of the block's two tiles (8x8 output positions each: one
 * core a row of 8 positions); warpgroups 2 and 3 stage: they copy the tiles' input windows and every
 * weight once, split the windows into planes of 4 channels innermost ([group][y][x][4], values then
 * remainders), and split each tap's weights ([group][filter][4]) into a ring of B_STAGES. A tap's
 * operand of a tile is a descriptor into its planes at the tap's shift: cores one group's plane
 * apart along the summed index and one window row apart along the positions. */
template <int NT, int P, int GP>
static __global__ void __launch_bounds__(BN_WGMMA_THREADS) wgmma_forward(wgmma_args a)
{
    bn_early_entry(); /* pdl.cuh */
#ifdef WGMMA_CODE
    extern __shared__ float4 smem4[];
    const bn_wgmma_plan &s = a.s;
    char *base = (char *)smem4;
    const int t = threadIdx.x, warp = t >> 5, lane = t & 31, g8 = lane >> 2, k4 = lane & 3;
    const int kk = s.k * s.k, win = s.win, G2 = s.groups, cells = win * win;
    const uint32_t GA = cells * 16, GB = NT * 8 * 16;
    const size_t plane_bytes = (size_t)G2 * GA;           /* one copy (values or remainders) of a tile */
    const size_t bstage = (size_t)2 * G2 * GB;            /* a tap's weights, values then remainders */
    char *planes = base;                                  /* [tile][copy][group][y][x][4] */
    char *bring = base + s.b_at;                          /* [stage][copy][group][filter][4] */
    float *raw_w = (float *)(base + s.w_at);              /* the weights as stored */
    float *raw_x = (float *)(base + s.x_at);              /* [tile][channel][y][x] of the windows */
    const int tby = (s.ho + 7) / 8, tbx = (s.wo + 7) / 8, per_img = tby * tbx;
    int img[2], oy0[2], ox0[2];
    bool tv[2];
#pragma unroll
    for (int c = 0; c < 2; c++) {
        const int tl = 2 * blockIdx.x + c;
        tv[c] = tl < s.tiles;
        const int tt = tv[c] ? tl : 0, rem = tt % per_img;
        img[c] = tt / per_img, oy0[c] = rem / tbx * 8, ox0[c] = rem % tbx * 8;
    }
    const bool stager = t >= BN_WGMMA_THREADS - STAGERS;
    float acc[NT * 4];
#pragma unroll
    for (int i = 0; i < NT * 4; i++) acc[i] = 0.0f;

    if (stager) {
        const int p = t - (BN_WGMMA_THREADS - STAGERS);
        /* Every weight, and both windows (zeros outside the image and past the channels). */
        const int wcount = s.co * s.ci * kk;
        if (((uintptr_t)a.w & 15) == 0 && wcount % 4 == 0) {
            for (int e = p; e < wcount / 4; e += STAGERS) __pipeline_memcpy_async(raw_w + 4 * e, a.w + 4 * e, 16);
        } else {
            for (int e = p; e < wcount; e += STAGERS) __pipeline_memcpy_async(raw_w + e, a.w + e, 4);
        }
        const int xcount = 2 * s.ci * cells;
        for (int e = p; e < xcount; e += STAGERS) {
            const int c = e / (s.ci * cells), r = e - c * s.ci * cells, ch = r / cells, cell = r - ch * cells;
            const int wy = cell / win, wx = cell - wy * win;
            const int iy = oy0[c] - s.pad + wy, ix = ox0[c] - s.pad + wx;
            const bool in = tv[c] && (unsigned)iy < (unsigned)s.hi && (unsigned)ix < (unsigned)s.wi;
            const float *src = in ? a.x + (((size_t)img[c] * s.ci + ch) * s.hi + iy) * s.wi + ix : a.x;
            __pipeline_memcpy_async(raw_x + e, src, 4, in ? 0 : 4);
        }
        __pipeline_commit();
        __pipeline_wait_prior(0);
        bar_sync(BAR_STAGERS, STAGERS); /* every copy has landed */
        /* The planes: values and remainders of both windows, channel groups of 4 innermost. */
        const int pcount = 2 * G2 * 4 * cells;
        for (int e = p; e < pcount; e += STAGERS) {
            const int c = e / (G2 * 4 * cells), r = e - c * G2 * 4 * cells, cell = r / (G2 * 4), ch = r - cell * G2 * 4;
            const float v = ch < s.ci ? raw_x[(c * s.ci + ch) * cells + cell] : 0.0f;
            float hv, lv;
            split_value(v, hv, lv);
            char *at = planes + (size_t)c * 2 * plane_bytes + (ch >> 2) * GA + cell * 16 + (ch & 3) * 4;
            *(float *)at = hv;
            if (P == 3) *(float *)(at + plane_bytes) = lv;
        }
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        bar_arrive(BAR_PLANES, BN_WGMMA_THREADS);
        /* Each tap's weights: [group][filter][4], values then remainders. */
        for (int tap = 0; tap < kk; tap++) {
            const int b = tap % B_STAGES;
            bar_sync(BAR_EMPTY + b, BN_WGMMA_THREADS);
            char *bs = bring + (size_t)b * bstage;
            for (int e = p; e < G2 * 4 * NT * 8; e += STAGERS) {
                const int f = e / (G2 * 4), ch = e - f * G2 * 4;
                const float v = f < s.co && ch < s.ci ? raw_w[(f * s.ci + ch) * kk + tap] : 0.0f;
                float hv, lv;
                split_value(v, hv, lv);
                char *at = bs + (ch >> 2) * GB + f * 16 + (ch & 3) * 4;
                *(float *)at = hv;
                if (P == 3) *(float *)(at + (size_t)G2 * GB) = lv;
            }
            asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
            bar_arrive(BAR_FULL + b, BN_WGMMA_THREADS);
        }
    } else {
        const int c = warp >> 2;
        for (int b = 0; b < B_STAGES; b++) bar_arrive(BAR_EMPTY + b, BN_WGMMA_THREADS);
        bar_sync(BAR_PLANES, BN_WGMMA_THREADS);
        const uint32_t a_hi = (uint32_t)__cvta_generic_to_shared(planes + (size_t)c * 2 * plane_bytes);
        const uint32_t a_lo = a_hi + (uint32_t)plane_bytes;
        for (int tap = 0; tap < kk; tap++) {
            const int b = tap % B_STAGES, ky = tap / s.k, kx = tap - ky * s.k;
            bar_sync(BAR_FULL + b, BN_WGMMA_THREADS);
            const uint32_t b_hi = (uint32_t)__cvta_generic_to_shared(bring + (size_t)b * bstage);
            const uint32_t b_lo = b_hi + (uint32_t)G2 * GB;
            const uint32_t shift = (ky * win + kx) * 16;
            asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#pragma unroll
            for (int q = 0; q < GP; q++) {
                const uint32_t ao = 2 * q * GA + shift, bo = 2 * q * GB;
                if (P == 3) {
                    product<NT>(acc, operand(a_lo + ao, GA, win * 16), operand(b_hi + bo, GB, 128));
                    product<NT>(acc, operand(a_hi + ao, GA, win * 16), operand(b_lo + bo, GB, 128));
                }
                product<NT>(acc, operand(a_hi + ao, GA, win * 16), operand(b_hi + bo, GB, 128));
            }
            asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
            asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
            bar_arrive(BAR_EMPTY + b, BN_WGMMA_THREADS);
        }
    }
    /* The sums, [tile row][filter] where the planes were: warp w of the products' side holds rows
     * 16 w + g8 (+ 8), columns 8 j + 2 k4 (+ 1); a tile's row r is position (r / 8, r % 8). */
    __syncthreads();
    constexpr int TROW = NT * 8 + TILE_ROW_PAD;
    float *tile = (float *)base;
    if (!stager) {
#pragma unroll
        for (int j = 0; j < NT; j++)
#pragma unroll
            for (int q = 0; q < 4; q++)
                tile[(warp * 16 + g8 + 8 * (q >> 1)) * TROW + j * 8 + 2 * k4 + (q & 1)] = acc[j * 4 + q];
    }
    __syncthreads();
    if (a.po.y) {
        const int ph = a.po.ph, pw = a.po.pw;
        for (int e = t; e < 2 * s.co * 16; e += blockDim.x) {
            const int c = e / (s.co * 16), r = e - c * s.co * 16, f = r / 16, w = r - f * 16, wy = w / 4, wx = w - wy * 4;
            const int py = oy0[c] / 2 + wy, px = ox0[c] / 2 + wx;
            if (!tv[c] || py >= ph || px >= pw) continue;
            const float bias = a.bias ? a.bias[f] : 0.0f;
            const float *c0 = tile + (c * 64 + 2 * wy * 8 + 2 * wx) * TROW + f;
            int at;
            const float top =
                bn_window_max2(c0[0] + bias, c0[TROW] + bias, c0[8 * TROW] + bias, c0[9 * TROW] + bias, &at);
            const size_t o = (((size_t)img[c] * s.co + f) * ph + py) * pw + px;
            a.po.y[o] = top;
            a.po.mask[o] = (unsigned char)at;
        }
        return;
    }
    for (int e = t; e < 2 * s.co * 64; e += blockDim.x) {
        const int c = e / (s.co * 64), r = e - c * s.co * 64, f = r / 64, pos = r - f * 64;
        const int oy = oy0[c] + pos / 8, ox = ox0[c] + pos % 8;
        if (!tv[c] || oy >= s.ho || ox >= s.wo) continue;
        a.y[(((size_t)img[c] * s.co + f) * s.ho + oy) * s.wo + ox] =
            tile[(c * 64 + pos) * TROW + f] + (a.bias ? a.bias[f] : 0.0f);
    }
#endif
}

template <int NT, int P, int GP> static bn_status launch(const wgmma_args &a, cudaStream_t st)
{
    static bool opted;
    /* Opted in once for the most a block may take, so that every plan's launch fits. */
    const size_t most = BN_WGMMA_SMEM_MAX;
    BN_CUDA(bn_launch_opted(wgmma_forward<NT, P, GP>, &opted, most, dim3(a.s.blocks), dim3(BN_WGMMA_THREADS),
                            a.s.smem, st, a));
    BN_CUDA_LAUNCH();
    return BN_OK;
}

/* The kernel for the plan's pairs of channel groups (each tap's steps of 8, unrolled). */
template <int NT, int P> static bn_status launch_gp(const wgmma_args &a, cudaStream_t st)
{
    switch (a.s.groups / 2) {
    case 1: return launch<NT, P, 1>(a, st);
    case 2: return launch<NT, P, 2>(a, st);
    case 3: return launch<NT, P, 3>(a, st);
    case 4: return launch<NT, P, 4>(a, st);
    default: return bn_error(BN_ERR_INTERNAL, "wgmma convolution: no kernel for %d channel groups", a.s.groups);
    }
}

template <int P> static bn_status forward_p(const wgmma_args &a, cudaStream_t st)
{
    switch (a.s.ntiles) {
    case 1: return launch_gp<1, P>(a, st);
    case 2: return launch_gp<2, P>(a, st);
    case 3: return launch_gp<3, P>(a, st);
    case 4: return launch_gp<4, P>(a, st);
    case 5: return launch_gp<5, P>(a, st);
    case 6: return launch_gp<6, P>(a, st);
    case 7: return launch_gp<7, P>(a, st);
    case 8: return launch_gp<8, P>(a, st);
    default: return bn_error(BN_ERR_INTERNAL, "wgmma convolution: no kernel for %d filter tiles", a.s.ntiles);
    }
}

extern "C" bn_status bn_wgmma_forward(const bn_wgmma_plan *p, void *stream, const float *x, const float *w,
                                      const float *b, float *y, const bn_pooled_out *pooled)
{
    if (p->why) return bn_error(BN_ERR_INTERNAL, "wgmma convolution cannot run this shape: %s", p->why);
    if (pooled && !p->pools)
        return bn_error(BN_ERR_INTERNAL, "wgmma convolution cannot write this shape's pooled output");
    wgmma_args a = {*p, x, w, b, y, {}};
    if (pooled) a.po = *pooled;
    return p->products == 1 ? forward_p<1>(a, (cudaStream_t)stream) : forward_p<3>(a, (cudaStream_t)stream);
}

extern "C" bn_status bn_conv_run_wgmma(const bn_conv_family_plan *p, const bn_conv_shape *s, int pass, void *stream,
                                       const bn_conv_io *io)
{
    (void)s;
    if (pass != BN_CONV_FORWARD) return bn_error(BN_ERR_INTERNAL, "wgmma convolution: forward pass only");
    return bn_wgmma_forward(&p->wgmma, stream, io->x, io->w, io->b, io->y, io->pooled_out);
}

BN_CODE_ANCHOR(conv_wgmma, wgmma_forward<1, 1, 1>) /* code_load.cu */
