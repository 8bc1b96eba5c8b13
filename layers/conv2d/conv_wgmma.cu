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

#define STAGES BN_WGMMA_STAGES
#define RAW_A_ROW BN_WGMMA_RAW_A_ROW
#define RAW_B_ROW BN_WGMMA_RAW_B_ROW
#define CORE_K BN_WGMMA_CORE_K
#define CORE_ROWS BN_WGMMA_CORE_ROWS
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
/* The split layout's byte offset of (row, k) within one operand. */
static __device__ __forceinline__ uint32_t core_at(int row, int k)
{
    return (row >> 3) * CORE_ROWS + (k >> 2) * CORE_K + (row & 7) * 16 + (k & 3) * 4;
}

/* A shared-memory operand's descriptor: no swizzling, cores CORE_K apart along k (the leading
 * offset) and CORE_ROWS apart along the rows (the stride offset). */
static __device__ __forceinline__ uint64_t operand(uint32_t addr)
{
    return (uint64_t)((addr & 0x3FFFF) >> 4) | ((uint64_t)(CORE_K >> 4) << 16) | ((uint64_t)(CORE_ROWS >> 4) << 32);
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
#endif

/* Starts the copies of slice `sl` into stage `st`. Thread t gathers rows (t & 63) of A at the
 * slice's k of its parity, and 2 NT of B's cells: column k = t & 31 of filters t / 32 + 4 j. */
template <int NT>
static __device__ __forceinline__ void copy_slice(const wgmma_args &a, float *raw_a, float *raw_b, const int *koff,
                                                  const int *ktap, int sl, int st, const float *xrow, int iy0, int ix0,
                                                  bool live)
{
    const bn_wgmma_plan &s = a.s;
    const int t = threadIdx.x, r = t & 63, par = t >> 6;
    float *ra = raw_a + (size_t)st * BN_WGMMA_DEPTH * RAW_A_ROW;
#pragma unroll
    for (int j = 0; j < BN_WGMMA_DEPTH / 2; j++) {
        const int kl = par + 2 * j, k = sl * BN_WGMMA_DEPTH + kl;
        const int tap = ktap[k], ky = tap >> 16, kx = tap & 0xffff;
        const bool in = live && (unsigned)(iy0 + ky) < (unsigned)s.hi && (unsigned)(ix0 + kx) < (unsigned)s.wi;
        __pipeline_memcpy_async(ra + kl * RAW_A_ROW + r, in ? xrow + koff[k] : a.x, 4, in ? 0 : 4);
    }
    float *rb = raw_b + (size_t)st * NT * 8 * RAW_B_ROW;
    const int kl = t & 31, k = sl * BN_WGMMA_DEPTH + kl;
#pragma unroll
    for (int j = 0; j < 2 * NT; j++) {
        const int f = (t >> 5) + 4 * j;
        const bool in = f < s.co && k < s.K;
        __pipeline_memcpy_async(rb + f * RAW_B_ROW + kl, in ? a.w + (size_t)f * s.K + k : a.w, 4, in ? 0 : 4);
    }
}

template <int NT, int P> static __global__ void __launch_bounds__(128) wgmma_forward(wgmma_args a)
{
    bn_early_entry(); /* pdl.cuh */
#ifdef WGMMA_CODE
    extern __shared__ float4 smem4[];
    const bn_wgmma_plan &s = a.s;
    char *base = (char *)smem4;
    float *raw_a = (float *)base;
    float *raw_b = (float *)(base + bn_wgmma_raw_b_at());
    char *split = base + bn_wgmma_split_at(NT);
    char *a_hi = split, *a_lo = split + 8 * CORE_ROWS;
    char *b_hi = split + 16 * CORE_ROWS, *b_lo = b_hi + NT * CORE_ROWS;
    int *koff = (int *)(base + bn_wgmma_table_at(NT));
    int *ktap = koff + s.slices * BN_WGMMA_DEPTH;
    const int t = threadIdx.x, warp = t >> 5, lane = t & 31;
    const int kk = s.k * s.k, npos = s.ho * s.wo;
    const long long rows = (long long)s.n * npos, m0 = (long long)blockIdx.x * BN_WGMMA_ROWS;

    /* The summed index's table: k past the end never lies inside the image. */
    for (int k = t; k < s.slices * BN_WGMMA_DEPTH; k += blockDim.x) {
        if (k < s.K) {
            const int c = k / kk, tap = k - c * kk, ky = tap / s.k, kx = tap - ky * s.k;
            koff[k] = (c * s.hi + ky) * s.wi + kx;
            ktap[k] = ky << 16 | kx;
        } else {
            koff[k] = 0;
            ktap[k] = 0x7fff << 16;
        }
    }
    /* This thread's row of A: its image's planes and the window's corner. */
    const long long m = m0 + (t & 63);
    const bool live = m < rows;
    const int img = live ? (int)(m / npos) : 0, pos = live ? (int)(m - (long long)img * npos) : 0;
    const int oy = pos / s.wo, ox = pos - oy * s.wo;
    const int iy0 = oy * s.stride - s.pad, ix0 = ox * s.stride - s.pad;
    const float *xrow = a.x + (size_t)img * s.ci * s.hi * s.wi + (long long)iy0 * s.wi + ix0;
    __syncthreads(); /* the table is written */

    for (int st = 0; st < STAGES - 1; st++) {
        if (st < s.slices) copy_slice<NT>(a, raw_a, raw_b, koff, ktap, st, st, xrow, iy0, ix0, live);
        __pipeline_commit();
    }
    float acc[NT * 4];
#pragma unroll
    for (int i = 0; i < NT * 4; i++) acc[i] = 0.0f;
    const uint32_t sa_hi = (uint32_t)__cvta_generic_to_shared(a_hi), sa_lo = (uint32_t)__cvta_generic_to_shared(a_lo);
    const uint32_t sb_hi = (uint32_t)__cvta_generic_to_shared(b_hi), sb_lo = (uint32_t)__cvta_generic_to_shared(b_lo);
    const int g8 = lane >> 2, k4 = lane & 3;
    for (int sl = 0; sl < s.slices; sl++) {
        const int ahead = sl + STAGES - 1;
        if (ahead < s.slices) copy_slice<NT>(a, raw_a, raw_b, koff, ktap, ahead, ahead % STAGES, xrow, iy0, ix0, live);
        __pipeline_commit();
        __pipeline_wait_prior(STAGES - 1);
        __syncthreads(); /* every copy of slice sl has landed; the last products are
                        done */
        /* The split: a warp takes 8 rows by 4 k at a time, lane (g8, k4). */
        const float *ra = raw_a + (size_t)(sl % STAGES) * BN_WGMMA_DEPTH * RAW_A_ROW;
#pragma unroll
        for (int i = 0; i < 16; i++) {
            const int g = warp * 16 + i, row = (g & 7) * 8 + g8, k = (g >> 3) * 4 + k4;
            float hi, lo;
            split_value(ra[k * RAW_A_ROW + row], hi, lo);
            const uint32_t at = core_at(row, k);
            *(float *)(a_hi + at) = hi;
            if (P == 3) *(float *)(a_lo + at) = lo;
        }
        const float *rb = raw_b + (size_t)(sl % STAGES) * NT * 8 * RAW_B_ROW;
#pragma unroll
        for (int i = 0; i < 2 * NT; i++) {
            const int g = warp * 2 * NT + i, f = (g % NT) * 8 + g8, k = (g / NT) * 4 + k4;
            float hi, lo;
            split_value(rb[f * RAW_B_ROW + k], hi, lo);
            const uint32_t at = core_at(f, k);
            *(float *)(b_hi + at) = hi;
            if (P == 3) *(float *)(b_lo + at) = lo;
        }
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        __syncthreads();
        asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#pragma unroll
        for (int q = 0; q < BN_WGMMA_DEPTH / 8; q++) {
            const uint32_t ko = q * 2 * CORE_K;
            if (P == 3) {
                product<NT>(acc, operand(sa_lo + ko), operand(sb_hi + ko));
                product<NT>(acc, operand(sa_hi + ko), operand(sb_lo + ko));
            }
            product<NT>(acc, operand(sa_hi + ko), operand(sb_hi + ko));
        }
        asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
        asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
    }
    __pipeline_wait_prior(0);
    __syncthreads(); /* the raw slices are free for the sums */
    /* The sums into [row][filter]: warp w holds rows 16 w + g8 (+ 8), columns 8 j + 2 k4 (+ 1). */
    constexpr int TROW = NT * 8 + TILE_ROW_PAD;
    float *tile = raw_a;
#pragma unroll
    for (int j = 0; j < NT; j++)
#pragma unroll
        for (int q = 0; q < 4; q++)
            tile[(warp * 16 + g8 + 8 * (q >> 1)) * TROW + j * 8 + 2 * k4 + (q & 1)] = acc[j * 4 + q];
    __syncthreads();
    if (a.po.y) {
        /* Whole windows: the tile is whole images, or whole pairs of rows of one image. */
        const int span = npos < BN_WGMMA_ROWS ? npos : BN_WGMMA_ROWS, imgs = BN_WGMMA_ROWS / span;
        const int img0 = (int)(m0 / npos), row0 = (int)(m0 - (long long)img0 * npos) / s.wo;
        const int ph = a.po.ph, pw = a.po.pw, py0 = row0 / 2;
        int pys = span / s.wo / 2;
        if (pys > ph - py0) pys = ph - py0;
        const int per_img = s.co * pys * pw;
        for (int e = t; e < imgs * per_img; e += blockDim.x) {
            const int ii = e / per_img, rest = e - ii * per_img, f = rest / (pys * pw), cell = rest - f * pys * pw;
            const int py = cell / pw, px = cell - py * pw;
            if (img0 + ii >= s.n) break;
            const float b = a.bias ? a.bias[f] : 0.0f;
            const float *c0 = tile + (ii * span + 2 * py * s.wo + 2 * px) * TROW + f;
            int at;
            const float top =
                bn_window_max2(c0[0] + b, c0[TROW] + b, c0[s.wo * TROW] + b, c0[(s.wo + 1) * TROW] + b, &at);
            const size_t o = ((size_t)(img0 + ii) * s.co + f) * ph * pw + (size_t)(py0 + py) * pw + px;
            a.po.y[o] = top;
            a.po.mask[o] = (unsigned char)at;
        }
        return;
    }
    /* Thread t writes row t & 63 of filters t / 64 + 2 i: a warp's stores run along positions. */
    if (!live) return;
    for (int f = t >> 6; f < s.co; f += 2)
        a.y[((size_t)img * s.co + f) * npos + pos] = tile[(t & 63) * TROW + f] + (a.bias ? a.bias[f] : 0.0f);
#endif
}

template <int NT, int P> static bn_status launch(const wgmma_args &a, cudaStream_t st)
{
    static bool opted;
    /* Opted in once for the longest summed index a plan takes, so that every plan's launch fits. */
    const size_t most = bn_wgmma_smem_bytes(NT, BN_WGMMA_MAX_K / BN_WGMMA_DEPTH);
    BN_CUDA(bn_launch_opted(wgmma_forward<NT, P>, &opted, most, dim3(a.s.tiles), dim3(128), a.s.smem, st, a));
    BN_CUDA_LAUNCH();
    return BN_OK;
}

template <int P> static bn_status forward_p(const wgmma_args &a, cudaStream_t st)
{
    switch (a.s.ntiles) {
    case 1: return launch<1, P>(a, st);
    case 2: return launch<2, P>(a, st);
    case 3: return launch<3, P>(a, st);
    case 4: return launch<4, P>(a, st);
    case 5: return launch<5, P>(a, st);
    case 6: return launch<6, P>(a, st);
    case 7: return launch<7, P>(a, st);
    case 8: return launch<8, P>(a, st);
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

BN_CODE_ANCHOR(conv_wgmma, wgmma_forward<1, 1>) /* code_load.cu */
