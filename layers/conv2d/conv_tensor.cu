/* conv_tensor.cu - the conv2d layer's tensor-core kernels (see conv_tensor.h), all on mma.sync
 * m16n8k8 TF32 products.
 *
 * Forward: one block stages all of the layer's weights in shared memory once, then takes work
 * items in turn, an item being an image, two images at once when there are more images than
 * multiprocessors (one staging and one adding of sums for both), or, when there are fewer, a
 * share of an image's positions: it stages the images' zero-padded input planes (plus one plane
 * of zeros each) and computes out[position][channel] = sum over k = (input channel, tap) of
 * A[position][k] * B[k][channel]. Two tables give, per k, the byte offset of A's element within
 * the staged planes (for position 0) and of B's element within the weights (for channel 0; B is
 * read along k directly but in the last, partial step). k past the reduction reads the zero
 * plane. Each warp owns two 16-position tiles of one image and every
 * channel tile, for every splits-th step of 8 along k; the warps then add their sums in rounds
 * through shared memory (the upper half of the splits into the lower, as many at once as the
 * memory holds: about log2(splits) rounds, in a fixed order), and the block writes the images'
 * outputs with the bias, or, for a 2x2 max pooling after the layer (conv_pooled.h), each
 * window's maximum and its cell.
 *
 * Backward data, by scattering rather than by convolving the zero-padded dy: for each tap t,
 * P_t[q][c] = sum over filters o of dy[o][q] * w[o][c][t] is a product with no zeros in it, and
 * P_t[q][c] belongs to dx[c] at q shifted by t. A block takes 8 input channels and images in
 * turn; warp ky computes the taps of window row ky and adds them, tap after tap, into its own
 * copy of the 8 zero-bordered dx planes; the block then adds the warps' copies in warp order.
 *
 * Backward filter: dw[o][(c, t)] = sum over images and positions q of dy[o][q] * x[c][q
 * shifted by t], one product per block over its span of images (K = positions), the bias
 * gradient as one more column of B that reads a plane of ones. A block takes 4 * warps column
 * tiles and stages, of each image's x, only the input planes those columns read; warps that share
 * columns take alternate steps along the positions and add their sums in warp order; each span of
 * images writes its own partial sums, which bn_direct_finish_filter adds in span order.
 *
 * Through a max pooling (conv_pooled.h), the data and filter passes stage each image's pooled
 * gradient and argmax mask (two images' worth after the plan's shared memory) and expand them
 * into the dy buffer once they have landed.
 *
 * FP32 accuracy from the TF32 products by splitting each operand (mma_tf32.cuh); a plan made for
 * a tf32 context takes the value x value product alone (TF32 accuracy, the P = 1 kernels). */
#include <cuda_pipeline.h>
#include <stdint.h>
#include <string.h>

#include "conv_direct.h"
#include "conv_family.h"
#include "conv_stage.cuh"
#include "conv_tensor.h"
#include "conv_tensor_limits.h"
#include "gpu/code_anchor.cuh"
#include "gpu/cuda_check.h"
#include "gpu/mma_tf32.cuh"
#include "gpu/pdl.cuh"
#include "gpu/smem_opt_in.cuh"

typedef struct tensor_args {
    bn_tensor_conv s;
    int n;
    bool vec;
    const float *in, *w, *bias;
    float *out;
    bn_pooled_out po; /* po.y set: the 2x2 max pooling's output and mask instead of out */
} tensor_args;

/* A warp's sums (acc: its MW row tiles by NT channel tiles) stored into r, a slab of its image
 * slot's positions by np channels, or added from it (add). */
template <int NT>
static __device__ __forceinline__ void move_sums(float (&acc)[NT][MW][4], float *r, int wg, int np, bool add)
{
    const int gid = (threadIdx.x % 32) >> 2, tig = threadIdx.x & 3;
#pragma unroll
    for (int i = 0; i < MW; i++)
#pragma unroll
        for (int j = 0; j < NT; j++)
#pragma unroll
            for (int q = 0; q < 4; q++) {
                float &cell = r[((wg * MW + i) * 16 + gid + 8 * (q >> 1)) * np + j * 8 + 2 * tig + (q & 1)];
                if (add) acc[j][i][q] += cell;
                else cell = acc[j][i][q];
            }
}

/* Adds the splits' sums of one image slot (the warps that share its positions) into slab 0 of
 * `red`: in rounds, the top m splits store into m slabs, the m below them add those into their
 * own, until split 0 holds the total and stores it (slabs: at least 1). Every warp of the block
 * takes part in the barriers. */
template <int NT>
static __device__ void add_splits(float (&acc)[NT][MW][4], float *red, int slab, int splits, int slabs, int sp,
                                  int wg, int np, bool mine)
{
    int active = splits;
    while (true) {
        const int m = active > 1 ? min(slabs, active / 2) : 1;
        const int top = active - m, low = active > 1 ? active - 2 * m : -1;
        if (mine && sp >= top && sp < active) move_sums<NT>(acc, red + (size_t)(sp - top) * slab, wg, np, false);
        __syncthreads();
        if (active == 1) return;
        if (mine && sp >= low && sp < top) move_sums<NT>(acc, red + (size_t)(sp - low) * slab, wg, np, true);
        __syncthreads();
        active = top;
    }
}

template <int NT, int P>
static __global__ void __launch_bounds__(MAX_WARPS * 32) tensor_conv(tensor_args a)
{
    bn_early_entry(); /* pdl.cuh */
    extern __shared__ float4 smem4[];
    float *smem = (float *)smem4;
    const bn_tensor_conv &s = a.s;
    const int kk = s.k * s.k, K = s.ci * kk, kpad = s.ksteps * 8;
    const int npos = s.ho * s.wo, plane = s.hp * s.wp, np = NT * 8, img_floats = (s.ci + 1) * plane;
    const int slab = s.mper * 32 * np;
    /* The weights as stored: (filters, channels, k, k). */
    const int wcount = s.co * s.ci * kk;
    float *sb = smem;
    float *sa = smem + s.a_off;                 /* [ipi][ci + 1][hp][wp], each image's last plane zeros */
    int *ta = (int *)(smem + s.tab_off);        /* [kpad] */
    int *tb = ta + kpad;                        /* [kpad] */
    float *red = smem + s.red_off;              /* [ipi][slabs][mper * 32][np] */
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, gid = lane >> 2, tig = lane & 3;
    const int per_img = s.mper * s.splits, slot = warp / per_img, wr = warp - slot * per_img;
    const int wg = wr % s.mper, sp = wr / s.mper;

    /* Weights and tables, once per block. */
    if (((uintptr_t)a.w & 15) == 0) {
        for (int e = threadIdx.x; e < wcount / 4; e += blockDim.x) __pipeline_memcpy_async(sb + 4 * e, a.w + 4 * e, 16);
        for (int e = wcount / 4 * 4 + threadIdx.x; e < wcount; e += blockDim.x)
            __pipeline_memcpy_async(sb + e, a.w + e, 4);
    } else {
        for (int e = threadIdx.x; e < wcount; e += blockDim.x) __pipeline_memcpy_async(sb + e, a.w + e, 4);
    }
    /* The tables in bytes, so that an element's address is one addition. */
    for (int k = threadIdx.x; k < kpad; k += blockDim.x) {
        if (k < K) {
            const int c = k / kk, tap = k - c * kk, ky = tap / s.k, kx = tap - ky * s.k;
            ta[k] = 4 * (c * plane + ky * s.wp + kx);
            tb[k] = 4 * k;
        } else {
            ta[k] = 4 * s.ci * plane;
            tb[k] = 0;
        }
    }
    /* Each channel tile's weights for this lane (its filter, at its step offset tig): along k
     * they lie in a row, so a whole step's two values are one address apart by 4 floats; the
     * last, partial step reads through tb (k past the reduction: the filter's first weight,
     * against A's zeros). */
    const float *bw[NT];
#pragma unroll
    for (int j = 0; j < NT; j++) bw[j] = sb + min(j * 8 + gid, s.co - 1) * K;
    const int full = K / 8;
    const float *mine_a = sa + (size_t)slot * img_floats;
    float *mine_red = red + (size_t)slot * s.slabs * slab;

    /* Work items: (ipi images, share of their positions). */
    const int groups = (a.n + s.ipi - 1) / s.ipi;
    for (int item = blockIdx.x; item < groups * s.mparts; item += gridDim.x) {
        const int grp = item / s.mparts, img0 = grp * s.ipi, m0 = (item - grp * s.mparts) * s.mper * 32;
        const int nimg = min(s.ipi, a.n - img0);
        const bool live = slot < nimg;
        const char *ma[MW][2]; /* where this lane's positions start in the image's planes */
#pragma unroll
        for (int i = 0; i < MW; i++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int m = m0 + (wg * MW + i) * 16 + gid + 8 * h;
                const int oy = m / s.wo, ox = m - oy * s.wo;
                ma[i][h] = (const char *)(mine_a + (m < npos ? oy * s.stride * s.wp + ox * s.stride : 0));
            }
        __syncthreads(); /* the previous item's planes and sums are no longer read */
        for (int im = 0; im < nimg; im++)
            stage_planes(sa + (size_t)im * img_floats, a.in + (size_t)(img0 + im) * s.ci * s.hi * s.wi, s.ci + 1,
                         s.ci, s.hi, s.wi, s.pad, s.hp, s.wp, a.vec);
        __pipeline_commit();
        __pipeline_wait_prior(0);
        __syncthreads();

        float acc[NT][MW][4];
#pragma unroll
        for (int j = 0; j < NT; j++)
#pragma unroll
            for (int i = 0; i < MW; i++)
#pragma unroll
                for (int q = 0; q < 4; q++) acc[j][i][q] = 0.0f;
        /* One step of 8 along k; `tail`: the last, partial one. */
        auto step_at = [&](int step, bool tail) {
            const int k0 = step * 8;
            const int ka0 = ta[k0 + tig], ka1 = ta[k0 + tig + 4];
            uint32_t ah[MW][4], al[MW][4];
#pragma unroll
            for (int i = 0; i < MW; i++) {
                split_frag_a(*(const float *)(ma[i][0] + ka0), *(const float *)(ma[i][1] + ka0),
                             *(const float *)(ma[i][0] + ka1), *(const float *)(ma[i][1] + ka1), ah[i], al[i]);
            }
            const int kb0 = tail ? tb[k0 + tig] : 4 * (k0 + tig), kb1 = tail ? tb[k0 + tig + 4] : kb0 + 16;
#pragma unroll
            for (int j = 0; j < NT; j++) {
                uint32_t bh0, bl0, bh1, bl1;
                split_tf32(*(const float *)((const char *)bw[j] + kb0), bh0, bl0);
                split_tf32(*(const float *)((const char *)bw[j] + kb1), bh1, bl1);
                mma_tiles<P>(acc[j], ah, al, bh0, bl0, bh1, bl1);
            }
        };
        int step = live ? sp : s.ksteps;
        for (; step < full; step += s.splits) step_at(step, false);
        if (step < s.ksteps) step_at(step, true);
        /* Every image's splits added into its first slab. */
        add_splits<NT>(acc, mine_red, slab, s.splits, s.slabs, sp, wg, np, live);
        const int span = min(s.mper * 32, npos - m0);
        if (a.po.y) {
            /* The windows whose rows lie in this share (it starts on an even row: s.pools). */
            const int pw = a.po.pw, pcells = a.po.ph * pw, py0 = m0 / (2 * s.wo);
            const int prows = min(a.po.ph - py0, span / s.wo / 2), count = prows * pw;
            const int per_img = s.co * count;
            const float inv_img = 1.0f / per_img, inv_count = 1.0f / count, inv_pw = 1.0f / pw;
            for (int e = threadIdx.x; e < nimg * per_img; e += blockDim.x) {
                int oc, c, px;
                const int im = div_small(e, per_img, inv_img, oc), o = div_small(oc, count, inv_count, c);
                const int py = div_small(c, pw, inv_pw, px);
                const size_t base = (size_t)(img0 + im) * s.co * pcells + (size_t)py0 * pw;
                const float b = a.bias ? a.bias[o] : 0.0f;
                /* The window's top-left. */
                const float *r = red + (size_t)im * s.slabs * slab + (2 * py * s.wo + 2 * px) * np + o;
                int cell;
                const float top = bn_window_max2(r[0] + b, r[np] + b, r[s.wo * np] + b, r[(s.wo + 1) * np] + b, &cell);
                a.po.y[base + (size_t)o * pcells + c] = top;
                a.po.mask[base + (size_t)o * pcells + c] = (unsigned char)cell;
            }
            continue;
        }
        const int per_img = s.co * span;
        const float inv_img = 1.0f / per_img, inv_span = 1.0f / span;
        for (int e = threadIdx.x; e < nimg * per_img; e += blockDim.x) {
            int om, m;
            const int im = div_small(e, per_img, inv_img, om), o = div_small(om, span, inv_span, m);
            float *y = a.out + (size_t)(img0 + im) * s.co * npos;
            y[(size_t)o * npos + m0 + m] = red[(size_t)im * s.slabs * slab + m * np + o] + (a.bias ? a.bias[o] : 0.0f);
        }
    }
}

/* ---- Backward data ---- */

typedef struct data_args {
    bn_tensor_data s;
    int n;
    bn_pooled_dy pd; /* pd.dy set: dy given through a max pooling, staged after the plan's shared memory */
    const float *dy, *w;
    float *dx;
} data_args;

/* Starts copying `rows` rows of `count` floats, src + r * src_step to dst + r * dst_step (shared
 * memory), with cp.async: 16-byte pieces where every row start is 16-byte aligned and count is a
 * multiple of 4, else 4-byte ones. */
static __device__ void copy_rows_async(float *dst, int dst_step, const float *src, int src_step, int rows, int count)
{
    const bool vec = count % 4 == 0 && dst_step % 4 == 0 && src_step % 4 == 0 && ((uintptr_t)src & 15) == 0 &&
                     ((uintptr_t)dst & 15) == 0;
    const int piece = vec ? 4 : 1, per_row = count / piece;
    const float inv = 1.0f / per_row;
    for (int e = threadIdx.x; e < rows * per_row; e += blockDim.x) {
        int i;
        const int r = div_small(e, per_row, inv, i);
        i *= piece;
        __pipeline_memcpy_async(dst + (size_t)r * dst_step + i, src + (size_t)r * src_step + i, 4 * piece);
    }
}

/* Where those buffers start (launch_smem): the first 16-byte boundary after `smem` bytes. */
static __device__ float *pooled_raw(float *base, size_t smem)
{
    return base + (smem / sizeof(float) + 3) / 4 * 4;
}

/* Starts staging image img's dy: its rows (npos floats each, into rows of `row` floats), or
 * through the pooling (pd.dy set) its pooled gradient and mask into raw. */
static __device__ void stage_dy(const bn_pooled_dy &pd, const float *dy, int img, int filters, int npos, float *rows,
                                int row, float *raw, int pcount)
{
    if (pd.dy) stage_pooled(raw, pd, img, pcount);
    else copy_rows_async(rows, row, dy + (size_t)img * filters * npos, npos, filters, npos);
}

template <int KW, int P>
static __global__ void __launch_bounds__(KW * 32) tensor_data(data_args a)
{
    bn_early_entry(); /* pdl.cuh */
    extern __shared__ float4 smem4[];
    const bn_tensor_data &s = a.s;
    const bn_conv_geom &g = s.g;
    constexpr int KK = KW * KW;
    float *ws = (float *)smem4;             /* [kp][ws_row]: w[o][c0 + cl][t] at o * ws_row + cl * KK + t */
    float *abuf = ws + s.a_off;             /* [2][kp][sa]: two images' dy[o][q], zeros past f and npos */
    float *priv = ws + s.p_off;             /* [KW][8][tps]: each warp's zero-bordered dx planes */
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, gid = lane >> 2, tig = lane & 3;
    const int c0 = blockIdx.y * 8, cvalid = min(8, g.c - c0), npos = g.oh * g.ow, mtot = s.mpasses * 64;
    const size_t abytes = (size_t)s.kp * s.sa;

    /* The weight tile, once per block, as stored: per filter the 8 channels' taps are one run.
     * Zeros for the filters past f (dy's rows there are zeros too, and 0 * garbage could be NaN)
     * and for the channels past the layer's. */
    copy_rows_async(ws, s.ws_row, a.w + (size_t)c0 * KK, g.c * KK, s.filters, cvalid * KK);
    for (int e = threadIdx.x; e < (s.kp - s.filters) * s.ws_row; e += blockDim.x) ws[s.filters * s.ws_row + e] = 0.0f;
    for (int o = warp; o < s.filters; o += KW)
        for (int i = cvalid * KK + lane; i < 8 * KK; i += 32) ws[o * s.ws_row + i] = 0.0f;
    /* Zeros where dy has no rows or positions, in both buffers (the copies never write there). */
    for (int b = 0; b < 2; b++) {
        float *ab = abuf + b * abytes;
        for (int e = threadIdx.x; e < (s.kp - s.filters) * s.sa; e += blockDim.x) ab[s.filters * s.sa + e] = 0.0f;
        if (npos < mtot)
            for (int o = warp; o < s.filters; o += KW)
                for (int q = npos + lane; q < mtot; q += 32) ab[o * s.sa + q] = 0.0f;
    }
    /* Through a pooling: two buffers of pooled gradients and masks after the plan's memory, each
     * expanded into its dy buffer once it has landed. */
    const int pcount = s.filters * a.pd.ph * a.pd.pw;
    float *raw = pooled_raw(ws, s.smem);
    const size_t rbytes = pooled_stage_bytes(pcount) / sizeof(float);
    if (blockIdx.x < a.n) stage_dy(a.pd, a.dy, blockIdx.x, s.filters, npos, abuf, s.sa, raw, pcount);
    __pipeline_commit();

    int b = 0;
    for (int img = blockIdx.x; img < a.n; img += gridDim.x, b ^= 1) {
        __syncthreads(); /* the other buffer and the warps' planes are no longer read */
        const int next = img + gridDim.x;
        if (next < a.n)
            stage_dy(a.pd, a.dy, next, s.filters, npos, abuf + (b ^ 1) * abytes, s.sa,
                     raw + (b ^ 1) * rbytes, pcount);
        __pipeline_commit();
        __pipeline_wait_prior(1);
        __syncthreads();
        if (a.pd.dy) {
            expand_staged(abuf + b * abytes, s.sa, g.ow, raw + b * rbytes, s.filters, g.oh, g.ow, a.pd.ph, a.pd.pw,
                          true);
            __syncthreads();
        }

        const int ky = warp;
        const float *av = abuf + b * abytes;
        float *mine = priv + (size_t)warp * 8 * s.tps;
        for (int e = lane; e < 2 * s.tps; e += 32) ((float4 *)mine)[e] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        __syncwarp();
        for (int mp = 0; mp < s.mpasses; mp++) {
            float acc[KW][4][4];
#pragma unroll
            for (int kx = 0; kx < KW; kx++)
#pragma unroll
                for (int m = 0; m < 4; m++)
#pragma unroll
                    for (int q = 0; q < 4; q++) acc[kx][m][q] = 0.0f;
            for (int k0 = 0; k0 < s.kp; k0 += 8) {
                uint32_t ah[4][4], al[4][4];
#pragma unroll
                for (int m = 0; m < 4; m++) {
                    const int r = mp * 64 + m * 16 + gid, i0 = (k0 + tig) * s.sa + r, i1 = i0 + 4 * s.sa;
                    split_frag_a(av[i0], av[i0 + 8], av[i1], av[i1 + 8], ah[m], al[m]);
                }
#pragma unroll
                for (int kx = 0; kx < KW; kx++) {
                    const float *wt = ws + (k0 + tig) * s.ws_row + gid * KK + ky * KW + kx;
                    uint32_t bh0, bl0, bh1, bl1;
                    split_tf32(wt[0], bh0, bl0);
                    split_tf32(wt[4 * s.ws_row], bh1, bl1);
                    mma_tiles<P>(acc[kx], ah, al, bh0, bl0, bh1, bl1);
                }
            }
            /* Each tap's sums into this warp's planes at the tap's shift; one tap's targets are
             * all different, so a tap's 16 cells are read, then written, together; the next tap's
             * may meet them, so the lanes agree between taps. A position past npos adds into the
             * cells past the plane (tps leaves k of them), and a channel past the layer's into a
             * plane of its own: neither is read, so no lane tests where it adds. */
            float *at[4][4]; /* sum q of row tile m: its plane at the tap shift 0 */
#pragma unroll
            for (int m = 0; m < 4; m++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const int q = mp * 64 + m * 16 + gid + 8 * h, qy = q / g.ow;
                    at[m][2 * h] = mine + 2 * tig * s.tps + (q < npos ? (qy + ky) * s.tw + q - qy * g.ow : s.th * s.tw);
                    at[m][2 * h + 1] = at[m][2 * h] + s.tps;
                }
#pragma unroll
            for (int kx = 0; kx < KW; kx++) {
                float v[4][4];
#pragma unroll
                for (int m = 0; m < 4; m++)
#pragma unroll
                    for (int q = 0; q < 4; q++) v[m][q] = at[m][q][kx];
#pragma unroll
                for (int m = 0; m < 4; m++)
#pragma unroll
                    for (int q = 0; q < 4; q++) at[m][q][kx] = v[m][q] + acc[kx][m][q];
                __syncwarp();
            }
        }
        __syncthreads();
        /* dx = the warps' planes added in warp order, without their border. */
        float *dx = a.dx + ((size_t)img * g.c + c0) * g.h * g.w;
        const int hw = g.h * g.w;
        /* Four cells of a row at a time where rows come in fours and 16-byte pieces line up. */
        const bool quads = g.w % 4 == 0 && g.pad % 4 == 0 && s.tw % 4 == 0 && s.tps % 4 == 0 &&
                           ((uintptr_t)dx & 15) == 0 && ((uintptr_t)priv & 15) == 0;
        if (quads) {
            const int hw4 = hw / 4;
            bn_digits dg = digits_of(threadIdx.x, blockDim.x, g.h, g.w / 4);
            for (int e = threadIdx.x; e < cvalid * hw4; e += blockDim.x, digits_step(dg)) {
                const int cl = dg.a, iy = dg.b, ix = dg.c;
                const float4 *src = (const float4 *)(priv + cl * s.tps + (iy + g.pad) * s.tw + 4 * ix + g.pad);
                float4 sum = src[0];
#pragma unroll
                for (int w = 1; w < KW; w++) {
                    const float4 v = src[(size_t)w * 2 * s.tps];
                    sum.x += v.x, sum.y += v.y, sum.z += v.z, sum.w += v.w;
                }
                ((float4 *)dx)[e] = sum;
            }
            continue;
        }
        bn_digits dg = digits_of(threadIdx.x, blockDim.x, g.h, g.w);
        for (int e = threadIdx.x; e < cvalid * hw; e += blockDim.x, digits_step(dg)) {
            const int cl = dg.a, iy = dg.b, ix = dg.c;
            const float *src = priv + cl * s.tps + (iy + g.pad) * s.tw + ix + g.pad;
            float sum = src[0];
#pragma unroll
            for (int w = 1; w < KW; w++) sum += src[(size_t)w * 8 * s.tps];
            dx[e] = sum;
        }
    }
}

/* ---- Backward filter ---- */

typedef struct filter_args {
    bn_tensor_filter s;
    int n;
    bn_pooled_dy pd; /* pd.dy set: dy given through a max pooling, staged after the plan's shared memory */
    const float *x, *dy;
    float *parts;
} filter_args;

/* Starts copying image img's dy (rows of npos, or through the pooling into raw) and x's planes
 * [c_lo, c_hi) (into the zero-bordered planes) into the given buffers. */
static __device__ void filter_stage(const bn_tensor_filter &s, const filter_args &a, int c_lo, int c_hi, int img,
                                    float *dbuf, float *xbuf, float *raw)
{
    const bn_conv_geom &g = s.g;
    const int npos = g.oh * g.ow;
    stage_dy(a.pd, a.dy, img, s.filters, npos, dbuf, s.sa, raw, s.filters * a.pd.ph * a.pd.pw);
    const float *x = a.x + (size_t)img * g.c * g.h * g.w;
    const int rows = min(g.h, s.hp - g.pad), cols = min(g.w, s.wp - g.pad);
    const bool vec = cols % 4 == 0 && g.w % 4 == 0 && g.pad % 4 == 0 && ((uintptr_t)x & 15) == 0;
    const int piece = vec ? 4 : 1, per_row = cols / piece, total = (c_hi - c_lo) * rows * per_row;
    if (total <= 0) return;
    bn_digits d = digits_of(threadIdx.x, blockDim.x, rows, per_row);
    for (int e = threadIdx.x; e < total; e += blockDim.x, digits_step(d)) {
        const int c = c_lo + d.a, iy = d.b, i = d.c * piece;
        __pipeline_memcpy_async(xbuf + (c * s.hp + iy + g.pad) * s.wp + g.pad + i,
                                x + ((size_t)c * g.h + iy) * g.w + i, 4 * piece);
    }
}

template <int MT, int P>
static __global__ void __launch_bounds__(256) tensor_filter(filter_args a)
{
    bn_early_entry(); /* pdl.cuh */
    extern __shared__ float4 smem4[];
    const bn_tensor_filter &s = a.s;
    const bn_conv_geom &g = s.g;
    const int filters = s.filters, rows = MT * 16, kk = g.k * g.k, ckk = g.c * kk, npos = g.oh * g.ow;
    const int plane = s.hp * s.wp;
    const size_t dsize = (size_t)rows * s.sa, xsize = (size_t)(g.c + 1) * plane;
    float *dbuf = (float *)smem4;                    /* [2][rows][sa]: dy[o][q], zeros past filters and npos */
    float *xbuf = (float *)smem4 + s.x_off;          /* [2][c + 1][hp][wp]: x with its zero border, then ones */
    int *qo = (int *)((float *)smem4 + s.q_off);     /* [kq]: position q's offset in a plane */
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, gid = lane >> 2, tig = lane & 3;
    const int nw = warp % s.nwarps, ks = warp / s.nwarps;
    const int tile0 = (blockIdx.x * s.nwarps + nw) * NTW;
    /* The input channels the block's columns read: only their planes are staged. */
    const int bcols = s.nwarps * NTW * 8, col_lo = blockIdx.x * bcols;
    const int c_lo = min(col_lo / kk, g.c), c_hi = max(c_lo, min(g.c, (col_lo + bcols - 1) / kk + 1));

    /* Both buffers: zeros, and the plane of ones; the copies write only x's and dy's cells. */
    for (int e = threadIdx.x; e < (int)(2 * dsize); e += blockDim.x) dbuf[e] = 0.0f;
    for (int b = 0; b < 2; b++)
        for (int e = threadIdx.x; e < (int)xsize; e += blockDim.x) xbuf[b * xsize + e] = e >= g.c * plane ? 1.0f : 0.0f;
    const float inv_ow = 1.0f / g.ow;
    for (int q = threadIdx.x; q < s.kq; q += blockDim.x) {
        int qx;
        const int qy = div_small(q, g.ow, inv_ow, qx);
        qo[q] = q < npos ? qy * g.stride * s.wp + qx * g.stride : 0;
    }
    /* This lane's column offsets: weight (c, t) reads plane c at the tap's shift; the bias column
     * and the columns past it read the ones. */
    int tb[NTW];
#pragma unroll
    for (int j = 0; j < NTW; j++) {
        const int col = (tile0 + j) * 8 + gid;
        if (col < ckk) {
            const int c = col / kk, t = col - c * kk, ky = t / g.k;
            tb[j] = c * plane + ky * s.wp + t - ky * g.k;
        } else {
            tb[j] = g.c * plane;
        }
    }
    float acc[NTW][MT][4];
#pragma unroll
    for (int j = 0; j < NTW; j++)
#pragma unroll
        for (int m = 0; m < MT; m++)
#pragma unroll
            for (int q = 0; q < 4; q++) acc[j][m][q] = 0.0f;

    const int first = blockIdx.y * s.span, last = min(a.n, first + s.span);
    const int pcount = filters * a.pd.ph * a.pd.pw;
    float *raw = pooled_raw((float *)smem4, s.smem);
    const size_t rsize = pooled_stage_bytes(pcount) / sizeof(float);
    __syncthreads(); /* the zeros are written before any copy lands beside them */
    filter_stage(s, a, c_lo, c_hi, first, dbuf, xbuf, raw);
    __pipeline_commit();
    int b = 0;
    for (int img = first; img < last; img++, b ^= 1) {
        __syncthreads(); /* the other buffers are no longer read */
        if (img + 1 < last)
            filter_stage(s, a, c_lo, c_hi, img + 1, dbuf + (b ^ 1) * dsize, xbuf + (b ^ 1) * xsize,
                         raw + (b ^ 1) * rsize);
        __pipeline_commit();
        __pipeline_wait_prior(1);
        __syncthreads();
        if (a.pd.dy) {
            /* Four windows a thread at one product a multiply only: at three, LeNet's conv2 filter
             * pass at 256 took 48 us alone instead of 36 that way (its 64 spans, H200), where at
             * one LeNet's --tf32 epochs were 4% faster. */
            expand_staged(dbuf + b * dsize, s.sa, g.ow, raw + b * rsize, filters, g.oh, g.ow, a.pd.ph, a.pd.pw, P == 1);
            __syncthreads();
        }
        const float *dv = dbuf + b * dsize, *xv = xbuf + b * xsize;
        for (int k0 = ks * 8; k0 < s.kq; k0 += s.ksplit * 8) {
            uint32_t ah[MT][4], al[MT][4];
#pragma unroll
            for (int m = 0; m < MT; m++) {
                const int i0 = (m * 16 + gid) * s.sa + k0 + tig, i1 = i0 + 8 * s.sa;
                split_frag_a(dv[i0], dv[i1], dv[i0 + 4], dv[i1 + 4], ah[m], al[m]);
            }
            const int q0 = qo[k0 + tig], q1 = qo[k0 + tig + 4];
#pragma unroll
            for (int j = 0; j < NTW; j++) {
                uint32_t bh0, bl0, bh1, bl1;
                split_tf32(xv[q0 + tb[j]], bh0, bl0);
                split_tf32(xv[q1 + tb[j]], bh1, bl1);
                mma_tiles<P>(acc[j], ah, al, bh0, bl0, bh1, bl1);
            }
        }
    }
    /* The warps that share columns add their sums in warp order (where the buffers were),
     * then the block writes its span's partial sums: dw's [filters][c * k * k], then db's. */
    float *red = dbuf + (size_t)nw * rows * RED_ROW;
    if (s.ksplit > 1) {
        for (int r = 0; r < s.ksplit; r++) {
            __syncthreads();
            if (ks == r) {
#pragma unroll
                for (int m = 0; m < MT; m++)
#pragma unroll
                    for (int j = 0; j < NTW; j++)
#pragma unroll
                        for (int q = 0; q < 4; q++) {
                            float *d = red + (m * 16 + gid + 8 * (q >> 1)) * RED_ROW + j * 8 + 2 * tig + (q & 1);
                            *d = r == 0 ? acc[j][m][q] : *d + acc[j][m][q];
                        }
            }
        }
        __syncthreads();
        if (ks != 0) return;
#pragma unroll
        for (int m = 0; m < MT; m++)
#pragma unroll
            for (int j = 0; j < NTW; j++)
#pragma unroll
                for (int q = 0; q < 4; q++)
                    acc[j][m][q] = red[(m * 16 + gid + 8 * (q >> 1)) * RED_ROW + j * 8 + 2 * tig + (q & 1)];
    }
    float *part = a.parts + (size_t)blockIdx.y * filters * (ckk + 1);
#pragma unroll
    for (int m = 0; m < MT; m++)
#pragma unroll
        for (int j = 0; j < NTW; j++)
#pragma unroll
            for (int q = 0; q < 4; q++) {
                const int o = m * 16 + gid + 8 * (q >> 1), col = (tile0 + j) * 8 + 2 * tig + (q & 1);
                if (o >= filters || col > ckk) continue;
                part[col < ckk ? (size_t)o * ckk + col : (size_t)filters * ckk + o] = acc[j][m][q];
            }
}

/* F<P>(args...) for the plan's TF32 products per multiply. */
#define BY_PRODUCTS(p, F, ...) ((p)->products == 1 ? F<1>(__VA_ARGS__) : F<3>(__VA_ARGS__))

template <int NT, int P>
static bn_status launch_nt(const tensor_args &a, cudaStream_t st)
{
    static bool opted;
    BN_CUDA(bn_smem_opt_in(tensor_conv<NT, P>, &opted, TENSOR_SMEM));
    bn_launch_early(tensor_conv<NT, P>, dim3(a.s.blocks), dim3(a.s.threads), a.s.smem, st, a);
    BN_CUDA_LAUNCH();
    return BN_OK;
}

template <int P>
static bn_status forward_p(const tensor_args &a, cudaStream_t st)
{
    switch (a.s.ntiles) {
    case 1: return launch_nt<1, P>(a, st);
    case 2: return launch_nt<2, P>(a, st);
    case 3: return launch_nt<3, P>(a, st);
    case 4: return launch_nt<4, P>(a, st);
    case 5: return launch_nt<5, P>(a, st);
    case 6: return launch_nt<6, P>(a, st);
    case 7: return launch_nt<7, P>(a, st);
    case 8: return launch_nt<8, P>(a, st);
    default: return bn_error(BN_ERR_INTERNAL, "tensor-core convolution: no kernel for %d channel tiles", a.s.ntiles);
    }
}

extern "C" bn_status bn_tensor_forward(const bn_tensor_plan *p, void *stream, const float *x, const float *w,
                                       const float *b, float *y, const bn_pooled_out *pooled)
{
    if (!p->fwd_ok) return bn_error(BN_ERR_INTERNAL, "tensor-core convolution cannot run this forward shape");
    const bn_tensor_conv *s = &p->fwd;
    if (pooled && !s->pools)
        return bn_error(BN_ERR_INTERNAL, "tensor-core convolution cannot write this forward shape's pooled output");
    tensor_args a = {*s, p->n, ((uintptr_t)x & 15) == 0 && s->wi % 4 == 0 && s->pad % 4 == 0, x, w, b, y, {}};
    if (pooled) a.po = *pooled;
    return BY_PRODUCTS(p, forward_p, a, (cudaStream_t)stream);
}

template <int KW, int P>
static bn_status launch_data(const data_args &a, cudaStream_t st)
{
    static bool opted;
    BN_CUDA(bn_smem_opt_in(tensor_data<KW, P>, &opted, TENSOR_SMEM));
    const size_t smem = launch_smem(a.s.smem, &a.s.g, a.s.filters, a.pd.dy != nullptr);
    bn_launch_early(tensor_data<KW, P>, dim3(a.s.blocks, a.s.ctiles), dim3(KW * 32), smem, st, a);
    BN_CUDA_LAUNCH();
    return BN_OK;
}

template <int P>
static bn_status data_p(const data_args &a, cudaStream_t st)
{
    switch (a.s.g.k) {
    case 1: return launch_data<1, P>(a, st);
    case 2: return launch_data<2, P>(a, st);
    case 3: return launch_data<3, P>(a, st);
    case 4: return launch_data<4, P>(a, st);
    case 5: return launch_data<5, P>(a, st);
    case 6: return launch_data<6, P>(a, st);
    case 7: return launch_data<7, P>(a, st);
    default: return bn_error(BN_ERR_INTERNAL, "tensor-core convolution: no data kernel for %dx%d windows", a.s.g.k,
                             a.s.g.k);
    }
}

extern "C" bn_status bn_tensor_backward_data(const bn_tensor_plan *p, void *stream, const float *dy,
                                             const bn_pooled_dy *pooled, const float *w, float *dx, int beside)
{
    if (!p->data_ok) return bn_error(BN_ERR_INTERNAL, "tensor-core convolution cannot run this backward-data shape");
    if (pooled && !bn_tensor_pooled_fits(p, 1))
        return bn_error(BN_ERR_INTERNAL, "tensor-core convolution cannot read this dy through a pooling");
    data_args a = {beside ? p->data_beside : p->data, p->n, {}, dy, w, dx};
    if (pooled) a.pd = *pooled;
    return BY_PRODUCTS(p, data_p, a, (cudaStream_t)stream);
}

template <int MT, int P>
static bn_status launch_filter(const filter_args &a, cudaStream_t st)
{
    static bool opted;
    BN_CUDA(bn_smem_opt_in(tensor_filter<MT, P>, &opted, TENSOR_SMEM));
    const size_t smem = launch_smem(a.s.smem, &a.s.g, a.s.filters, a.pd.dy != nullptr);
    bn_launch_early(tensor_filter<MT, P>, dim3(a.s.groups, a.s.spans), dim3(a.s.threads), smem, st, a);
    BN_CUDA_LAUNCH();
    return BN_OK;
}

template <int P>
static bn_status filter_p(const filter_args &a, cudaStream_t st)
{
    switch (a.s.mt) {
    case 1: return launch_filter<1, P>(a, st);
    case 2: return launch_filter<2, P>(a, st);
    case 3: return launch_filter<3, P>(a, st);
    case 4: return launch_filter<4, P>(a, st);
    default: return bn_error(BN_ERR_INTERNAL, "tensor-core convolution: no filter kernel for %d filter tiles", a.s.mt);
    }
}

extern "C" bn_status bn_tensor_backward_filter(const bn_tensor_plan *p, void *stream, const float *x, const float *dy,
                                               const bn_pooled_dy *pooled, float *dw, float *db, float *workspace,
                                               int beside)
{
    if (!p->filter_ok) return bn_error(BN_ERR_INTERNAL, "tensor-core convolution cannot run this filter shape");
    if (pooled && !bn_tensor_pooled_fits(p, 2))
        return bn_error(BN_ERR_INTERNAL, "tensor-core convolution cannot read this dy through a pooling");
    const bn_tensor_filter &shape = beside ? p->filter_beside : p->filter;
    filter_args a = {shape, p->n, {}, x, dy, workspace};
    if (pooled) a.pd = *pooled;
    const bn_status s = BY_PRODUCTS(p, filter_p, a, (cudaStream_t)stream);
    if (s != BN_OK) return s;
    const bn_conv_geom *g = &p->g;
    return bn_direct_finish_filter(stream, workspace, shape.spans, p->filters, g->c * g->k * g->k, dw, db);
}

extern "C" bn_status bn_conv_run_tensor(const bn_conv_family_plan *p, const bn_conv_shape *s, int pass, void *stream,
                                        const bn_conv_io *io)
{
    const bn_tensor_plan *t = &p->tensor;
    if (pass == BN_CONV_FORWARD) return bn_tensor_forward(t, stream, io->x, io->w, io->b, io->y, io->pooled_out);
    if (pass == BN_CONV_DATA)
        return bn_tensor_backward_data(t, stream, io->dy, io->pooled_dy, io->w, io->dx, io->beside);
    return bn_tensor_backward_filter(t, stream, io->x, io->dy, io->pooled_dy, io->dw, io->db, io->parts, io->beside);
}

BN_CODE_ANCHOR(conv_tensor, tensor_conv<1, 1>) /* code_load.cu */
