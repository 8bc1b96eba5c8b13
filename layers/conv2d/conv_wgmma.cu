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

#define RAW_STAGES BN_WGMMA_RAW_STAGES
#define SPLIT_STAGES BN_WGMMA_SPLIT_STAGES
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

/* The named barriers between the two sides (0 is __syncthreads): the stagers' own, and per split
 * slice, "full" (its stagers have stored it) and "empty" (its products are done). */
#define BAR_STAGERS 1
#define BAR_FULL 2
#define BAR_EMPTY 4
#define STAGERS 256

static __device__ __forceinline__ void bar_sync(int id, int count)
{
    asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(count) : "memory");
}

static __device__ __forceinline__ void bar_arrive(int id, int count)
{
    asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(count) : "memory");
}

/* Starts a stager's copies of the filters' weights for slice `sl` into raw stage `st`: 16 bytes a copy
 * where every filter's row of weights allows it (vec), else 4; zeros past the filters and the
 * summed index. p: the stager's index. */
template <int NT>
static __device__ __forceinline__ void copy_weights(const wgmma_args &a, float *raw_b, int p, int sl, int st, bool vec)
{
    const bn_wgmma_plan &s = a.s;
    float *rb = raw_b + (size_t)st * NT * 8 * RAW_B_ROW;
    if (vec) {
        for (int e = p; e < NT * 8 * (BN_WGMMA_DEPTH / 4); e += STAGERS) {
            const int f = e / (BN_WGMMA_DEPTH / 4), kl = (e % (BN_WGMMA_DEPTH / 4)) * 4, k = sl * BN_WGMMA_DEPTH + kl;
            const bool in = f < s.co && k < s.K;
            __pipeline_memcpy_async(rb + f * RAW_B_ROW + kl, in ? a.w + (size_t)f * s.K + k : a.w, 16, in ? 0 : 16);
        }
        return;
    }
    const int kl = p & 31, k = sl * BN_WGMMA_DEPTH + kl;
#pragma unroll
    for (int j = 0; j < NT; j++) {
        const int f = (p >> 5) + 8 * j;
        const bool in = f < s.co && k < s.K;
        __pipeline_memcpy_async(rb + f * RAW_B_ROW + kl, in ? a.w + (size_t)f * s.K + k : a.w, 4, in ? 0 : 4);
    }
}

/* A stager's share of splitting slice `sl` into split slice `split`: warp pw (of 8) takes A's 4 k
 * at 4 pw of the slice for all 128 rows, read from the staged planes through the row and index
 * tables (zeros outside the image), and NT groups of B's 8 filters by 4 k from raw stage raw_b; lane
 * (g8, k4) one cell of each group. */
template <int NT, int P>
static __device__ __forceinline__ void split_slice(const float *planes, const int *rbase, const int *ry, const int *rx,
                                                   const int *koff, const int *ktap, int hi, int wi, int sl,
                                                   const float *raw_b, char *split, int pw, int lane)
{
    const int g8 = lane >> 2, k4 = lane & 3;
    char *a_hi = split, *a_lo = split + (BN_WGMMA_ROWS / 8) * CORE_ROWS;
    char *b_hi = split + 2 * (BN_WGMMA_ROWS / 8) * CORE_ROWS, *b_lo = b_hi + NT * CORE_ROWS;
    const int k = pw * 4 + k4, kg = sl * BN_WGMMA_DEPTH + k, tap = ktap[kg], ky = tap >> 16, kx = tap & 0xffff;
    const int ko = koff[kg];
#pragma unroll
    for (int i = 0; i < 16; i++) {
        const int row = i * 8 + g8;
        const bool in = (unsigned)(ry[row] + ky) < (unsigned)hi && (unsigned)(rx[row] + kx) < (unsigned)wi;
        float hv, lv;
        split_value(in ? planes[rbase[row] + ko] : 0.0f, hv, lv);
        const uint32_t at = core_at(row, k);
        *(float *)(a_hi + at) = hv;
        if (P == 3) *(float *)(a_lo + at) = lv;
    }
#pragma unroll
    for (int i = 0; i < NT; i++) {
        const int g = pw * NT + i, f = (g % NT) * 8 + g8, kb = (g / NT) * 4 + k4;
        float hv, lv;
        split_value(raw_b[f * RAW_B_ROW + kb], hv, lv);
        const uint32_t at = core_at(f, kb);
        *(float *)(b_hi + at) = hv;
        if (P == 3) *(float *)(b_lo + at) = lv;
    }
}

#endif

/* Warpgroups 0 and 1 issue the products for rows 0-63 and 64-127; warpgroups 2 and 3 stage: they
 * copy the slices three in flight, split each into the two split slices by turns, and mark it full;
 * the products' side marks a split slice empty once its products are done. */
template <int NT, int P> static __global__ void __launch_bounds__(BN_WGMMA_THREADS) wgmma_forward(wgmma_args a)
{
    bn_early_entry(); /* pdl.cuh */
#ifdef WGMMA_CODE
    extern __shared__ float4 smem4[];
    const bn_wgmma_plan &s = a.s;
    char *base = (char *)smem4;
    float *planes = (float *)base;
    float *raw_b = (float *)(base + s.raw_b_at);
    char *splits = base + s.split_at;
    const size_t split_bytes = bn_wgmma_split_bytes(NT);
    int *koff = (int *)(base + s.table_at);
    int *ktap = koff + s.slices * BN_WGMMA_DEPTH;
    int *rbase = ktap + s.slices * BN_WGMMA_DEPTH, *ry = rbase + BN_WGMMA_ROWS, *rx = ry + BN_WGMMA_ROWS;
    const int t = threadIdx.x, warp = t >> 5, lane = t & 31, g8 = lane >> 2, k4 = lane & 3;
    const int kk = s.k * s.k, npos = s.ho * s.wo, img_floats = s.ci * s.hi * s.wi;
    const long long rows = (long long)s.n * npos, m0 = (long long)blockIdx.x * BN_WGMMA_ROWS;
    const int img0 = (int)(m0 / npos), imgs = min(BN_WGMMA_ROWS / npos, s.n - img0);

    /* The tables: per k its offset in an image's planes and its tap (k past the end never lies
     * inside the image), per row its image's planes and the window's corner (rows past the batch
     * never inside). */
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
    for (int r = t; r < BN_WGMMA_ROWS; r += blockDim.x) {
        const int il = r / npos, pos = r - il * npos, oy = pos / s.wo, ox = pos - oy * s.wo;
        const bool live = il < imgs;
        ry[r] = live ? oy * s.stride - s.pad : -(1 << 20);
        rx[r] = ox * s.stride - s.pad;
        rbase[r] = live ? il * img_floats + ry[r] * s.wi + rx[r] : 0;
    }
    __syncthreads(); /* the tables are written */

    const bool stager = t >= BN_WGMMA_THREADS - STAGERS;
    const int p = t - (BN_WGMMA_THREADS - STAGERS);
    float acc[NT * 4];
#pragma unroll
    for (int i = 0; i < NT * 4; i++) acc[i] = 0.0f;

    if (stager) {
        /* The tile's images' planes, once; then the weights' slices, RAW_STAGES - 1 ahead. */
        const float *src = a.x + (size_t)img0 * img_floats;
        const int count = imgs * img_floats;
        if (((uintptr_t)src & 15) == 0 && count % 4 == 0) {
            for (int e = p; e < count / 4; e += STAGERS) __pipeline_memcpy_async(planes + 4 * e, src + 4 * e, 16);
        } else {
            for (int e = p; e < count; e += STAGERS) __pipeline_memcpy_async(planes + e, src + e, 4);
        }
        __pipeline_commit();
        const bool vec = s.K % 4 == 0 && ((uintptr_t)a.w & 15) == 0;
        for (int st = 0; st < RAW_STAGES - 1; st++) {
            if (st < s.slices) copy_weights<NT>(a, raw_b, p, st, st, vec);
            __pipeline_commit();
        }
        for (int sl = 0; sl < s.slices; sl++) {
            const int b = sl % SPLIT_STAGES, st = sl % RAW_STAGES;
            __pipeline_wait_prior(RAW_STAGES - 2);
            bar_sync(BAR_STAGERS, STAGERS); /* the planes and every copy of slice sl have landed */
            bar_sync(BAR_EMPTY + b, BN_WGMMA_THREADS); /* the products of the slice split there are done */
            split_slice<NT, P>(planes, rbase, ry, rx, koff, ktap, s.hi, s.wi, sl,
                               raw_b + (size_t)st * NT * 8 * RAW_B_ROW, splits + b * split_bytes, p >> 5, lane);
            asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
            bar_arrive(BAR_FULL + b, BN_WGMMA_THREADS);
            /* Raw stage (sl + 2) % 3 was split in the last round, by every stager before the barrier
             * above. */
            const int ahead = sl + RAW_STAGES - 1;
            if (ahead < s.slices) copy_weights<NT>(a, raw_b, p, ahead, ahead % RAW_STAGES, vec);
            __pipeline_commit();
        }
        __pipeline_wait_prior(0);
    } else {
        const int half = warp >> 2;
        for (int b = 0; b < SPLIT_STAGES; b++) bar_arrive(BAR_EMPTY + b, BN_WGMMA_THREADS);
        for (int sl = 0; sl < s.slices; sl++) {
            const int b = sl % SPLIT_STAGES;
            bar_sync(BAR_FULL + b, BN_WGMMA_THREADS);
            const uint32_t sa = (uint32_t)__cvta_generic_to_shared(splits + b * split_bytes);
            const uint32_t a_hi = sa + half * 8 * CORE_ROWS, a_lo = a_hi + (BN_WGMMA_ROWS / 8) * CORE_ROWS;
            const uint32_t b_hi = sa + 2 * (BN_WGMMA_ROWS / 8) * CORE_ROWS, b_lo = b_hi + NT * CORE_ROWS;
            asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#pragma unroll
            for (int q = 0; q < BN_WGMMA_DEPTH / 8; q++) {
                const uint32_t ko = q * 2 * CORE_K;
                if (P == 3) {
                    product<NT>(acc, operand(a_lo + ko), operand(b_hi + ko));
                    product<NT>(acc, operand(a_hi + ko), operand(b_lo + ko));
                }
                product<NT>(acc, operand(a_hi + ko), operand(b_hi + ko));
            }
            asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
            asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
            bar_arrive(BAR_EMPTY + b, BN_WGMMA_THREADS);
        }
    }
    /* The stagers' copies are all done and the products read no split slice: the raw slices take
     * the sums, [row][filter], warp w of the products' side holding rows 16 w + g8 (+ 8), columns
     * 8 j + 2 k4 (+ 1). */
    __syncthreads();
    constexpr int TROW = NT * 8 + TILE_ROW_PAD;
    float *tile = (float *)splits;
    if (!stager) {
#pragma unroll
        for (int j = 0; j < NT; j++)
#pragma unroll
            for (int q = 0; q < 4; q++)
                tile[(warp * 16 + g8 + 8 * (q >> 1)) * TROW + j * 8 + 2 * k4 + (q & 1)] = acc[j * 4 + q];
    }
    __syncthreads();
    if (a.po.y) {
        /* Whole windows: the tile is whole images, or whole pairs of rows of one image. */
        const int span = npos < BN_WGMMA_ROWS ? npos : BN_WGMMA_ROWS, imgs = BN_WGMMA_ROWS / span;
        const int row0 = (int)(m0 - (long long)img0 * npos) / s.wo;
        const int ph = a.po.ph, pw = a.po.pw, py0 = row0 / 2;
        int pys = span / s.wo / 2;
        if (pys > ph - py0) pys = ph - py0;
        const int per_img = s.co * pys * pw;
        for (int e = t; e < imgs * per_img; e += blockDim.x) {
            const int ii = e / per_img, rest = e - ii * per_img, f = rest / (pys * pw), cell = rest - f * pys * pw;
            const int py = cell / pw, px = cell - py * pw;
            if (img0 + ii >= s.n) break;
            const float bias = a.bias ? a.bias[f] : 0.0f;
            const float *c0 = tile + (ii * span + 2 * py * s.wo + 2 * px) * TROW + f;
            int at;
            const float top = bn_window_max2(c0[0] + bias, c0[TROW] + bias, c0[s.wo * TROW] + bias,
                                             c0[(s.wo + 1) * TROW] + bias, &at);
            const size_t o = ((size_t)(img0 + ii) * s.co + f) * ph * pw + (size_t)(py0 + py) * pw + px;
            a.po.y[o] = top;
            a.po.mask[o] = (unsigned char)at;
        }
        return;
    }
    /* Thread t writes row t % 128 of filters t / 128 + 4 i: a warp's stores run along positions. */
    const long long mo = m0 + (t & (BN_WGMMA_ROWS - 1));
    if (mo >= rows) return;
    const int io = (int)(mo / npos), po = (int)(mo - (long long)io * npos);
    for (int f = t / BN_WGMMA_ROWS; f < s.co; f += BN_WGMMA_THREADS / BN_WGMMA_ROWS)
        a.y[((size_t)io * s.co + f) * npos + po] = tile[(t & (BN_WGMMA_ROWS - 1)) * TROW + f] + (a.bias ? a.bias[f] : 0.0f);
#endif
}

template <int NT, int P> static bn_status launch(const wgmma_args &a, cudaStream_t st)
{
    static bool opted;
    /* Opted in once for the most a block may take, so that every plan's launch fits. */
    const size_t most = BN_WGMMA_SMEM_MAX;
    BN_CUDA(bn_launch_opted(wgmma_forward<NT, P>, &opted, most, dim3(a.s.tiles), dim3(BN_WGMMA_THREADS), a.s.smem, st, a));
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
