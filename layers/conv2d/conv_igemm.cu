/* conv_igemm.cu - the conv2d layer's implicit-GEMM kernels (see conv_igemm.h).
 *
 * Each pass is one matrix product C (M x N) = A (M x K) B (K x N) whose operands are read
 * straight from the layer's tensors, never written out as column matrices:
 *
 *   pass      M         N                        K (summed)               A          B
 *   forward   filters   images x out positions   channels x taps          w          x windows
 *   data      channels  images x in positions    filters x taps           w, by c    dy windows
 *   filter    filters   channels x taps          images x out positions   dy         x windows
 *
 * Every A element lies at A + row(m) + kA(k), every B element at B + col(j) + kB(k): one term
 * from the output index and one from the summed index. A block builds a table of the summed
 * index's terms (kA, kB, and the row/column shift of the window it reaches) in shared memory,
 * TABLE_MAX entries at a time, so that filling a stage costs a table read and an add per element
 * instead of integer divisions. A B element outside the input (padding, or for the data pass a
 * dy position off the edge) is a zero.
 *
 * A block of IG_WARPS warps computes a BM x BN tile of C over BK-deep stages of K that cp.async
 * brings into a ring of STAGES shared buffers (STAGES - 1 in flight while one is used). The
 * products run on the tensor cores, m16n8k8 with every operand split into a TF32 value and
 * remainder and three products summed (mma_tf32.cuh: FP32 accuracy), or the value product
 * alone in a tf32 context. Every thread's sums run over K in increasing order, so the results
 * do not depend on timing. Where a forward or data pass's tiles alone leave multiprocessors
 * idle, several blocks share a tile's K, and the last to finish adds their partial sums in a fixed
 * order (split_tile_sum, conv_tile_store.cuh) before the epilogue. The forward pass adds the
 * bias; the data pass writes dx; the filter pass cuts K into `splits` spans and writes each
 * span's tile of partial sums (and, from the blocks of the first column tile, the sum of dy per
 * filter for the bias gradient) to the workspace, for bn_direct_finish_filter (conv_direct.cu) to
 * add in span order. The forward and data passes also write a fused ReLU's output or input
 * gradient where one is given (conv_relu.h). */
#include <cuda_pipeline.h>
#include <stdint.h>

#include "conv_family.h"
#include "conv_igemm.h"
#include "conv_igemm_limits.h"
#include "conv_tile_store.cuh"
#include "gpu/code_anchor.cuh"
#include "gpu/cp_async.cuh"
#include "gpu/cuda_check.h"
#include "gpu/mma_tf32.cuh"
#include "gpu/pdl.cuh"
#include "gpu/smem_opt_in.cuh"

/* Stages in the shared-memory ring: STAGES - 1 are in flight while one is used. */
#define STAGES 3

enum { PASS_FWD, PASS_DATA, PASS_FILTER };

/* One summed index k: A offset (x), B offset (y), the window shift (z: y in the low 16 bits, x
 * in the high 16, both signed) and, for the forward and data passes, the tap's number among the
 * pass's window taps (w: its bit in a column's mask of the taps inside). */
typedef int4 k_entry;

/* A launch's parameters, kept within 128 bytes: at 136, nvcc read some fields through a pointer
 * into the parameter block instead of at fixed offsets (docs/performance.md, version 54). */
typedef struct ig_args {
    const float *a, *b;
    float *out;
    const float *bias;   /* forward: per filter, or NULL */
    float *relu_out;     /* forward, data: a fused ReLU's output or input gradient, or NULL */
    const float *relu_mask; /* data: the layer's input, which the ReLU before it wrote */
    long long relu_image;   /* floats from one image of relu_out to the next */
    int M, N, K;         /* the product (the data pass: its largest phase's N and K) */
    int span;            /* K per block (the filter pass's spans, a split pass's share), else K */
    int tab_len;         /* table entries a block holds at once: min(span, TABLE_MAX) */
    int n, c, h, w, f, k, stride, pad, oh, ow;
    int splits;          /* blocks along K: blockIdx.z = phase * splits + split */
    unsigned *counters;  /* forward, data: a split pass's arrivals, one a tile, then its partial
                            sums (conv_family.h) */
} ig_args;
static_assert(sizeof(ig_args) <= 128, "ig_args within 128 bytes");

static __device__ __forceinline__ int pack_yx(int y, int x) { return (y & 0xffff) | (x << 16); }
static __device__ __forceinline__ int unpack_y(int v) { return (int)(short)(v & 0xffff); }
static __device__ __forceinline__ int unpack_x(int v) { return v >> 16; }

/* The table entry of summed index k for pass P (ph: the data pass's phase); w is the tap's
 * number among the taps the pass's windows take (forward and data). */
template <int P>
static __device__ k_entry k_term(const ig_args &g, const ig_phase &ph, int k)
{
    const int kk = g.k * g.k;
    k_entry e;
    e.w = 0;
    if (P == PASS_FWD) { /* k = (channel, tap): A = w[m][k]; B = x[img][ch][iy][ix] */
        int ch = k / kk, tap = k - ch * kk, ky = tap / g.k, kx = tap - ky * g.k;
        e.x = k;
        e.y = ch * g.h * g.w + ky * g.w + kx;
        e.z = pack_yx(ky, kx);
        e.w = tap;
    } else if (P == PASS_DATA) { /* k = (filter, a, b): A = w[f][m][ky][kx]; B = dy[img][f][Y-a][X-b] */
        int tt = ph.ty * ph.tx, fi = k / tt, r = k - fi * tt, a = r / ph.tx, b = r - a * ph.tx;
        int ky = ph.py + g.stride * a, kx = ph.px + g.stride * b;
        e.x = fi * g.c * kk + ky * g.k + kx;
        e.y = fi * g.oh * g.ow - a * g.ow - b;
        e.z = pack_yx(-a, -b);
        e.w = r;
    } else { /* k = (image, out position): A = dy[img][m][pos]; B = x[img][ch][oy*s-pad+ky][ox*s-pad+kx] */
        int np = g.oh * g.ow, img = k / np, pos = k - img * np, oy = pos / g.ow, ox = pos - oy * g.ow;
        int y0 = oy * g.stride - g.pad, x0 = ox * g.stride - g.pad;
        e.x = img * g.f * np + pos;
        e.y = img * g.c * g.h * g.w + y0 * g.w + x0;
        e.z = pack_yx(y0, x0);
    }
    return e;
}

/* Column j's B offset and window origin (jy, jx); the B element of (k, j) is inside iff
 * 0 <= jy + y(k) < ly and 0 <= jx + x(k) < lx. */
template <int P>
static __device__ void col_term(const ig_args &g, const ig_phase &ph, int j, int &off, int &jy, int &jx)
{
    if (P == PASS_FWD) {
        int np = g.oh * g.ow, img = j / np, pos = j - img * np, oy = pos / g.ow, ox = pos - oy * g.ow;
        jy = oy * g.stride - g.pad, jx = ox * g.stride - g.pad;
        off = img * g.c * g.h * g.w + jy * g.w + jx;
    } else if (P == PASS_DATA) {
        int pc = ph.cy * ph.cx, img = j / pc, q = j - img * pc, yi = q / ph.cx, xi = q - yi * ph.cx;
        jy = (ph.y0 + yi * g.stride + g.pad - ph.py) / g.stride;
        jx = (ph.x0 + xi * g.stride + g.pad - ph.px) / g.stride;
        off = img * g.f * g.oh * g.ow + jy * g.ow + jx;
    } else {
        int kk = g.k * g.k, ch = j / kk, tap = j - ch * kk, ky = tap / g.k, kx = tap - ky * g.k;
        jy = ky, jx = kx;
        off = ch * g.h * g.w + ky * g.w + kx;
    }
}

/* Shared-memory layout of a stage: A kept row by row (A_LD floats a row of BK: the 16-byte rows
 * of an ldmatrix fall in different banks), B slice by slice (BN + 8 floats a row: the lanes' (t, g)
 * reads fall in different banks). */
#define A_LD (BK + 4)
static __host__ __device__ constexpr int b_ld(int bn) { return bn + 8; }

/* The kernel: a BM x BN tile of C per block of IG_WARPS warps, WM of them along M, each warp a
 * (BM / WM) x (BN / (IG_WARPS / WM)) tile of m16n8k8 products; PROD products per multiply (3:
 * FP32 accuracy, 1: TF32, mma_tf32.cuh). CHECK: B reads need the window bounds test (padding,
 * or any data pass). SPLIT: a forward or data pass whose tiles several blocks share (g.splits);
 * a kernel of its own, so that the unsplit passes keep the code they had without it. */
template <int P, int BM, int BN, int WM, int PROD, bool CHECK, bool SPLIT>
static __global__ void __launch_bounds__(IG_WARPS * 32, 2) igemm(ig_args g)
{
    bn_early_entry(); /* pdl.cuh */
    constexpr int NT = IG_WARPS * 32, WN = IG_WARPS / WM;
    constexpr int MT = BM / WM / 16, NTL = BN / WN / 8; /* m16 and n8 tiles per warp */
    constexpr int LA = BM * BK / NT, LB = BN * BK / NT; /* elements a thread copies per stage */
    constexpr int SB = b_ld(BN), A_SIZE = BM * A_LD, B_SIZE = BK * SB;
    static_assert(BM % (16 * WM) == 0 && BN % (8 * WN) == 0, "warp tiles of whole m16n8 products");
    static_assert(BM * BK % NT == 0 && BN * BK % NT == 0 && NT % BK == 0, "stages must split evenly");
    static_assert(BN <= NT && NT % BN == 0, "a thread copies B at one column");
    static_assert(NT >= BM, "a thread per row for the bias sums");

    extern __shared__ float4 smem4[];
    k_entry *tab = (k_entry *)smem4;
    float *As = (float *)(tab + g.tab_len); /* [STAGES][BM][A_LD] */
    float *Bs = As + STAGES * A_SIZE;       /* [STAGES][BK][SB] */

    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, gq = lane >> 2, tq = lane & 3;
    const int wm = warp % WM, wn = warp / WM;
    const int col0 = blockIdx.x * BN, row0 = blockIdx.y * BM;
    /* The data pass's phase, its columns and summed index; this block's span of it. */
    static_assert(!SPLIT || P != PASS_FILTER, "the filter pass's spans are partial sums of their own");
    const int zp = P != PASS_DATA ? 0 : SPLIT ? blockIdx.z / g.splits : blockIdx.z;
    const int zs = P != PASS_DATA ? blockIdx.z : SPLIT ? blockIdx.z - zp * g.splits : 0;
    const ig_phase ph = P == PASS_DATA ? ig_phase_of(zp, g.stride, g.pad, g.h, g.w, g.k)
                                          : ig_phase{0, 0, 0, 0, g.h, g.w, g.k, g.k};
    const int N = P == PASS_DATA ? g.n * ph.cy * ph.cx : g.N;
    const int K = P == PASS_DATA ? g.f * ph.ty * ph.tx : g.K;
    /* An unsplit data pass sums its phase's whole K (g.span is the largest phase's). */
    const int kb = zs * g.span, ke = P == PASS_DATA && !SPLIT ? K : min(K, kb + g.span);
    /* A split pass's blocks that share this tile: a phase of fewer taps than the largest has
     * fewer (and one where it has none: its dx is zeros). */
    const int sharing = SPLIT ? max(1, (K + g.span - 1) / g.span) : 1;
    if (col0 >= N || (SPLIT && zs >= sharing)) return;
    const int ly = P == PASS_DATA ? g.oh : g.h, lx = P == PASS_DATA ? g.ow : g.w;

    /* A: this thread's k offset in a stage and its LA rows. */
    const int ka = tid % BK;
    int arow[LA];
    const int a_stride = P == PASS_FWD ? g.K : P == PASS_DATA ? g.k * g.k : g.oh * g.ow;
#pragma unroll
    for (int i = 0; i < LA; i++) {
        const int m = row0 + tid / BK + i * (NT / BK);
        arow[i] = m < g.M ? m * a_stride : -1;
    }
    /* B: this thread's column (its offset may be negative: a window starting in the padding). */
    const int jcol = tid % BN, r0 = tid / BN;
    int boff = 0, bjy = 0, bjx = 0;
    const bool bval = col0 + jcol < N;
    if (bval) col_term<P>(g, ph, col0 + jcol, boff, bjy, bjx);
    /* Forward and data passes with at most 32 taps: which taps of this column's window are
     * inside, one bit each, so that a copy's bounds test is one bit's. */
    const int taps = ph.ty * ph.tx;
    const bool by_mask = CHECK && P != PASS_FILTER && taps <= 32;
    unsigned inside = 0;
    if (by_mask && bval)
        for (int tap = 0; tap < taps; tap++) {
            const int ty = tap / ph.tx, tx = tap - ty * ph.tx;
            const int iy = P == PASS_FWD ? bjy + ty : bjy - ty, ix = P == PASS_FWD ? bjx + tx : bjx - tx;
            if (iy >= 0 && iy < ly && ix >= 0 && ix < lx) inside |= 1u << tap;
        }
    const float *bcol = g.b + boff;

    float acc[MT][NTL][4] = {};
    /* The filter pass's first column tile also sums dy (its A) per filter, for the bias. */
    const bool bias_rows = P == PASS_FILTER && blockIdx.x == 0 && tid < BM;
    float bsum = 0.0f;
    const uint32_t a_base = (uint32_t)__cvta_generic_to_shared(As), b_base = (uint32_t)__cvta_generic_to_shared(Bs);

    /* The summed range in chunks of at most tab_len, each with its table. */
    for (int kc = kb; kc < ke; kc += g.tab_len) {
        const int clen = min(g.tab_len, ke - kc);
        __syncthreads(); /* every thread is done with the last chunk's table and stages */
        for (int t = tid; t < clen; t += NT) tab[t] = k_term<P>(g, ph, kc + t);
        __syncthreads();

        /* Stage s of the chunk into buffer buf. */
        auto stage = [&](int buf, int s) {
            const uint32_t as = a_base + 4 * (buf * A_SIZE + (tid / BK) * A_LD + ka);
            const uint32_t bs = b_base + 4 * (buf * B_SIZE + r0 * SB + jcol);
            const int kl = s * BK;
            const bool alive = kl + ka < clen;
            const float *ak = g.a + (alive ? tab[kl + ka].x : 0);
#pragma unroll
            for (int i = 0; i < LA; i++) {
                const bool live = alive && arow[i] >= 0;
                copy4(as + 4 * i * (NT / BK) * A_LD, live ? ak + arow[i] : g.a, live);
            }
#pragma unroll
            for (int i = 0; i < LB; i++) {
                const int r = r0 + i * (NT / BN);
                bool live = bval && kl + r < clen;
                const k_entry t = tab[live ? kl + r : 0];
                if (by_mask) {
                    live = live && ((inside >> t.w) & 1);
                } else if (CHECK) {
                    const int iy = bjy + unpack_y(t.z), ix = bjx + unpack_x(t.z);
                    live = live && iy >= 0 && iy < ly && ix >= 0 && ix < lx;
                }
                copy4(bs + 4 * i * (NT / BN) * SB, live ? bcol + t.y : g.b, live);
            }
        };

        const int stages = (clen + BK - 1) / BK;
#pragma unroll
        for (int s = 0; s < STAGES - 1; s++) {
            if (s < stages) stage(s, s);
            __pipeline_commit();
        }
        for (int s = 0; s < stages; s++) {
            /* Stage s has landed (at most STAGES - 2 later groups pending) and every thread is
             * done with stage s - 1, whose buffer the copies issued next reuse. */
            __pipeline_wait_prior(STAGES - 2);
            __syncthreads();
            if (s + STAGES - 1 < stages) stage((s + STAGES - 1) % STAGES, s + STAGES - 1);
            __pipeline_commit();
            const int buf = s % STAGES;
            const float *bs = Bs + buf * B_SIZE;
            const uint32_t a_at = a_base + 4 * buf * A_SIZE;
#pragma unroll
            for (int k8 = 0; k8 < BK; k8 += 8) {
                /* A's four values of each m16 tile in one ldmatrix: lanes 0-7 address rows 0-7
                 * at k8, 8-15 rows 8-15, 16-23 rows 0-7 at k8 + 4, 24-31 rows 8-15 there. */
                uint32_t ah[MT][4], al[MT][4];
#pragma unroll
                for (int mi = 0; mi < MT; mi++) {
                    const int row = wm * (BM / WM) + mi * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
                    uint32_t f[4];
                    ldmatrix_x4(f, a_at + 4 * (row * A_LD + k8 + (lane >> 4) * 4));
                    split_frag_a(__uint_as_float(f[0]), __uint_as_float(f[1]), __uint_as_float(f[2]),
                                 __uint_as_float(f[3]), ah[mi], al[mi]);
                }
#pragma unroll
                for (int ni = 0; ni < NTL; ni++) {
                    const float *q = bs + (k8 + tq) * SB + wn * (BN / WN) + ni * 8 + gq;
                    uint32_t bh0, bl0, bh1, bl1;
                    split_tf32(q[0], bh0, bl0);
                    split_tf32(q[4 * SB], bh1, bl1);
#pragma unroll
                    for (int mi = 0; mi < MT; mi++) {
                        if (PROD == 1) mma_tf32(acc[mi][ni], ah[mi], bh0, bh1);
                        else mma_split(acc[mi][ni], ah[mi], al[mi], bh0, bl0, bh1, bl1);
                    }
                }
            }
            if (bias_rows) {
                const float *as = As + buf * A_SIZE + tid * A_LD;
#pragma unroll
                for (int q = 0; q < BK; q++) bsum += as[q];
            }
        }
        __pipeline_wait_prior(0);
    }

    if (SPLIT && sharing > 1) {
        /* The tile's slots: g.splits of them, of which a phase of fewer taps fills `sharing`. */
        const unsigned tile = (zp * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
        float *part = (float *)(g.counters + BN_CONV_SPLIT_COUNTERS);
        if (!split_tile_sum<MT, NTL, NT>(acc, part, g.counters, tile, g.splits, sharing, zs, tid)) return;
    }

    /* The tile goes through shared memory, in the stages' buffers (free once every warp is done
     * with them), and is stored a row at a time (conv_tile_store.cuh). */
    constexpr int CP = tile_pitch(BN);
    static_assert(BM * CP <= STAGES * (A_SIZE + B_SIZE), "the tile fits in the stages' buffers");
    static_assert(BN % 32 == 0, "a warp stores whole rows of 32 columns");
    constexpr int CK = BN / 32; /* columns a lane stores in each row */
    float *ct = As;
    tile_to_shared<BM, BN, WM, WN, MT, NTL>(ct, acc, wm, wn, gq, tq);
    if (P == PASS_FILTER) {
        /* This span's partials: M x N for dw, then M for db. */
        float *out = g.out + (size_t)blockIdx.z * g.M * (g.N + 1);
        if (bias_rows && row0 + tid < g.M) out[(size_t)g.M * g.N + row0 + tid] = bsum;
        for (int r = warp; r < BM && row0 + r < g.M; r += IG_WARPS)
#pragma unroll
            for (int k = 0; k < CK; k++) {
                const int c = lane + 32 * k;
                if (col0 + c < N) out[(size_t)(row0 + r) * N + col0 + c] = ct[r * CP + c];
            }
        return;
    }
    /* Forward and data: C (m, j) is out[img][m][q] with j = (img, q), q a position of the
     * output (forward) or of the data pass's phase. */
    const int q_count = P == PASS_FWD ? g.oh * g.ow : g.h * g.w, pc = ph.cy * ph.cx;
    long long yoff[CK], roff[CK];
#pragma unroll
    for (int k = 0; k < CK; k++) {
        const int j = col0 + lane + 32 * k;
        int img = 0, q = 0;
        if (P == PASS_FWD) {
            img = j / q_count, q = j - img * q_count;
        } else {
            img = j / pc;
            const int r = j - img * pc, yi = r / ph.cx, xi = r - yi * ph.cx;
            q = (ph.y0 + yi * g.stride) * g.w + ph.x0 + xi * g.stride;
        }
        yoff[k] = j < N ? (long long)img * g.M * q_count + q : -1;
        roff[k] = (long long)img * g.relu_image + q;
    }
    store_tile_rows<BM, BN, IG_WARPS, CK, P == PASS_DATA>(ct, warp, lane, row0, g.M, q_count, yoff, roff,
                                                           P == PASS_FWD ? g.bias : nullptr, g.out, g.relu_out,
                                                           g.relu_mask);
}

/* Bytes of shared memory a launch takes: its table and the stages of its configuration. */
static size_t ig_smem(int cfg, int tab_len)
{
    return (size_t)tab_len * sizeof(k_entry) +
           (size_t)STAGES * (ig_tiles[cfg][0] * A_LD + BK * b_ld(ig_tiles[cfg][1])) * sizeof(float);
}

/* Launches one kernel; the first launch of each opts it in to the most shared memory any of its
 * launches takes (more than the 48 KiB a kernel gets without asking). */
template <int P, int BM, int BN, int WM, bool CHECK, bool SPLIT>
static cudaError_t launch_one(int products, const ig_args &a, dim3 grid, size_t smem, size_t most, cudaStream_t st)
{
    static bool opted[2];
    if (products == 1)
        return bn_launch_opted(igemm<P, BM, BN, WM, 1, CHECK, SPLIT>, &opted[0], most, grid, IG_WARPS * 32, smem,
                               st, a);
    return bn_launch_opted(igemm<P, BM, BN, WM, 3, CHECK, SPLIT>, &opted[1], most, grid, IG_WARPS * 32, smem, st,
                           a);
}

template <int P, bool CHECK, bool SPLIT>
static cudaError_t launch_cfg(int cfg, int products, const ig_args &a, dim3 grid, size_t smem, cudaStream_t st)
{
    const size_t most = ig_smem(cfg, TABLE_MAX);
    switch (cfg) {
    case 0: return launch_one<P, 128, 64, 2, CHECK, SPLIT>(products, a, grid, smem, most, st);
    case 1: return launch_one<P, 64, 128, 2, CHECK, SPLIT>(products, a, grid, smem, most, st);
    case 2: return launch_one<P, 64, 64, 2, CHECK, SPLIT>(products, a, grid, smem, most, st);
    case 3: return launch_one<P, 32, 128, 1, CHECK, SPLIT>(products, a, grid, smem, most, st);
    default: return launch_one<P, 32, 64, 1, CHECK, SPLIT>(products, a, grid, smem, most, st);
    }
}

/* A forward or data pass, its kernels by whether its tiles are split. */
template <int P, bool CHECK>
static cudaError_t launch_split(bool split, int cfg, int products, const ig_args &a, dim3 grid, size_t smem,
                                cudaStream_t st)
{
    return split ? launch_cfg<P, CHECK, true>(cfg, products, a, grid, smem, st)
                 : launch_cfg<P, CHECK, false>(cfg, products, a, grid, smem, st);
}

static bn_status ig_launch(int pass, const bn_igemm_plan *p, const bn_igemm_pass *ip, const bn_conv_geom *g,
                           int filters, int n, cudaStream_t st, const float *a, const float *b, const float *bias,
                           float *out, void *scratch, const bn_conv_relu *relu)
{
    if (!ip->ok) return bn_error(BN_ERR_INTERNAL, "implicit-GEMM convolution cannot run this shape");
    if (pass != PASS_FILTER && ip->splits > 1 && !scratch)
        return bn_error(BN_ERR_INTERNAL, "implicit-GEMM convolution: a split pass without scratch");
    ig_args x;
    x.a = a, x.b = b, x.out = out, x.bias = bias;
    x.relu_out = relu ? relu->out : NULL;
    x.relu_mask = relu ? relu->mask : NULL;
    x.relu_image = relu ? (long long)relu->image : 0;
    x.counters = (unsigned *)scratch;
    x.M = ip->M, x.N = ip->N, x.K = ip->K, x.span = ip->span, x.splits = ip->splits;
    x.tab_len = ip->span < TABLE_MAX ? ip->span : TABLE_MAX;
    x.n = n, x.c = g->c, x.h = g->h, x.w = g->w, x.f = filters, x.k = g->k, x.stride = g->stride, x.pad = g->pad;
    x.oh = g->oh, x.ow = g->ow;
    const int cfg = ip->cfg;
    const int bm = ig_tiles[cfg][0], bn = ig_tiles[cfg][1];
    dim3 grid((ip->N + bn - 1) / bn, (ip->M + bm - 1) / bm, ip->phases * ip->splits);
    const size_t smem = ig_smem(cfg, x.tab_len);
    const bool pad = g->pad != 0, split = ip->splits > 1;
    const int pr = p->products;
    cudaError_t e;
    if (pass == PASS_FWD)
        e = pad ? launch_split<PASS_FWD, true>(split, cfg, pr, x, grid, smem, st)
                : launch_split<PASS_FWD, false>(split, cfg, pr, x, grid, smem, st);
    else if (pass == PASS_DATA)
        e = launch_split<PASS_DATA, true>(split, cfg, pr, x, grid, smem, st);
    else
        e = pad ? launch_cfg<PASS_FILTER, true, false>(cfg, pr, x, grid, smem, st)
                : launch_cfg<PASS_FILTER, false, false>(cfg, pr, x, grid, smem, st);
    BN_CUDA(e);
    BN_CUDA_LAUNCH();
    return BN_OK;
}

extern "C" bn_status bn_igemm_forward(const bn_igemm_plan *p, const bn_conv_geom *g, int filters, int n, void *stream,
                                      const float *x, const float *w, const float *b, float *y, void *scratch,
                                      const bn_conv_relu *relu)
{
    return ig_launch(PASS_FWD, p, &p->pass[0], g, filters, n, (cudaStream_t)stream, w, x, b, y, scratch, relu);
}

extern "C" bn_status bn_igemm_backward_data(const bn_igemm_plan *p, const bn_conv_geom *g, int filters, int n,
                                            void *stream, const float *dy, const float *w, float *dx,
                                            void *scratch, const bn_conv_relu *relu)
{
    return ig_launch(PASS_DATA, p, &p->pass[1], g, filters, n, (cudaStream_t)stream, w, dy, NULL, dx, scratch,
                     relu);
}

extern "C" bn_status bn_igemm_backward_filter_parts(const bn_igemm_plan *p, const bn_conv_geom *g, int filters, int n,
                                                    void *stream, const float *x, const float *dy, float *parts)
{
    return ig_launch(PASS_FILTER, p, &p->pass[2], g, filters, n, (cudaStream_t)stream, dy, x, NULL, parts, NULL,
                     NULL);
}

extern "C" bn_status bn_conv_run_igemm(const bn_conv_family_plan *p, const bn_conv_shape *s, int pass, void *stream,
                                       const bn_conv_io *io)
{
    const bn_igemm_plan *ig = &p->igemm;
    if (pass == BN_CONV_FORWARD)
        return bn_igemm_forward(ig, &s->g, s->filters, s->n, stream, io->x, io->w, io->b, io->y, io->scratch,
                                &io->relu);
    if (pass == BN_CONV_DATA)
        return bn_igemm_backward_data(ig, &s->g, s->filters, s->n, stream, io->dy, io->w, io->dx, io->scratch,
                                      &io->relu);
    const bn_igemm_pass *f = &ig->pass[2];
    BN_TRY(bn_igemm_backward_filter_parts(ig, &s->g, s->filters, s->n, stream, io->x, io->dy, io->parts));
    return bn_direct_finish_filter(stream, io->parts, f->splits, f->M, f->N, io->dw, io->db);
}

BN_CODE_ANCHOR(conv_igemm, igemm<0, 128, 64, 2, 1, false, false>) /* code_load.cu */
