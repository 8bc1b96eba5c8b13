/* conv_halo.cu - the conv2d layer's halo implicit-GEMM kernels (see conv_halo.h).
 *
 * A pass in the forward form (conv_halo_limits.h's hl_form) is one matrix product
 *
 *   C (m x N) = A (m x K) B (K x N),  N = images x output positions,  K = channels x taps,
 *
 * A the weights and B the input's windows. A block computes a BM x BN tile of C: BM output
 * channels of BN consecutive output positions. It walks the channels in chunks of HL_BC; for each
 * chunk it copies into shared memory, by cp.async,
 *   - the chunk's weights, row by row as they lie in memory (16-byte copies where the rows allow);
 *   - every input row its positions' windows reach, halo included: the padded images stacked,
 *     rows first .. first + rows - 1 of them (hl_rows), zeros where they are padding,
 * two chunks in flight: the next is copied while this one is multiplied. Each 8-deep step of the
 * product is one tap of the chunk's 8 channels: the A fragment comes from the weights' rows at
 * that tap, the B fragment from the staged rows at the position shifted by the tap. An input value
 * is thus copied once per block and read by every tap, where conv_igemm.cu copies it once per tap.
 *
 * The products run on the tensor cores, m16n8k8 with every operand split into a TF32 value and
 * remainder and three products summed (mma_tf32.cuh: FP32 accuracy), or the value product alone
 * in a tf32 context. Every thread's sums run over the channels and taps in a fixed order, so the
 * results do not depend on timing.
 *
 * The data pass at stride 1 is the forward form over dy: dx's channels are the rows of C, dy's
 * channels are summed, dy is padded by k - 1 - pad, and each tap (ky, kx) of the weights reads dy
 * at the turned tap (k - 1 - ky, k - 1 - kx); the weights of dx's channel c and dy's channel f lie
 * at w + f c_count k^2 + c k^2, which the copies take with other strides (hl_args.wm, wc).
 *
 * The forward and data passes also write a fused ReLU's output or input gradient where one is
 * given (conv_relu.h). */
#include <cuda_pipeline.h>
#include <stdint.h>

#include "conv_family.h"
#include "conv_halo.h"
#include "conv_halo_limits.h"
#include "conv_tile_store.cuh"
#include "gpu/code_anchor.cuh"
#include "gpu/cp_async.cuh"
#include "gpu/cuda_check.h"
#include "gpu/mma_tf32.cuh"
#include "gpu/pdl.cuh"
#include "gpu/smem_opt_in.cuh"
#include "gpu/vec_ops.cuh"

typedef struct hl_args {
    const float *x;      /* the form's input [n][ci][ih][iw] */
    const float *w;      /* weights: output channel m, input channel c, tap t at w + m wm + c wc + t */
    const float *bias;   /* per output channel, or NULL */
    float *y;            /* the form's output [n][m][oh][ow] */
    hl_form f;
    int N;               /* n oh ow */
    int pitch;           /* floats a staged channel takes */
    int wm, wc;
    int vec;             /* the weights' rows are whole 16-byte pieces, each in or out of a chunk */
    int per;             /* chunks of channels a block takes: blockIdx.z's share */
    float *part;         /* gridDim.z > 1: tiles x splits slots of BM BN floats (conv_halo_limits.h) */
    unsigned *counters;  /* gridDim.z > 1: one per tile, zero between launches */
    float *relu_out;     /* a fused ReLU's output (forward) or input gradient (data), or NULL */
    const float *relu_mask; /* data: the layer's input, which the ReLU before it wrote */
    long long relu_image;   /* floats from one image of relu_out to the next */
    int staged;          /* the output tile (BM rows of tile_pitch(BN) floats) fits in the shared memory */
} hl_args;

/* The kernel: a BM x BN tile of C per block of HL_WARPS warps, WM of them along the output
 * channels, each warp a (BM / WM) x (BN / (HL_WARPS / WM)) tile of m16n8k8 products; PROD
 * products per multiply (3: FP32 accuracy, 1: TF32). TURN: the data pass's turned taps. With
 * gridDim.z > 1 the tile's chunks of channels are shared among gridDim.z blocks, g.per each:
 * every block keeps its sums in its slot, and the tile's last block to finish adds the slots in
 * split order (its own from registers) before the epilogue, so the result does not depend on
 * which block finished last. */
template <int KS, int BM, int BN, int WM, int PROD, bool TURN>
static __global__ void __launch_bounds__(HL_WARPS * 32, 2) halo_gemm(hl_args g)
{
    bn_early_entry(); /* pdl.cuh */
    constexpr int NT = HL_WARPS * 32, WN = HL_WARPS / WM, KK = KS * KS;
    constexpr int MT = BM / WM / 16, NTL = BN / WN / 8;    /* m16 and n8 tiles per warp */
    constexpr int A_LD = HL_BC * KK + 4;                   /* a weight row: A_LD / 4 odd, so that the
                                                              lanes' (row, channel) reads miss each
                                                              other's banks */
    constexpr int PAIRS = (BM * KK + NT - 1) / NT;         /* (row, tap) pairs a thread copies */
    constexpr int VROW = HL_BC * KK / 4, VECS = (BM * VROW + NT - 1) / NT; /* 16-byte pieces */
    static_assert(HL_BC == 8, "an 8-deep step is one tap of the chunk's channels");
    static_assert(HL_BC * KK % 4 == 0, "a chunk's weight row is whole 16-byte pieces");
    static_assert(BM % (16 * WM) == 0 && BN % (8 * WN) == 0, "warp tiles of whole m16n8 products");

    extern __shared__ float4 smem4[];
    float *sm = (float *)smem4;
    const int a_size = BM * A_LD, st_size = a_size + HL_BC * g.pitch;

    const hl_form f = g.f;
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, gq = lane >> 2, tq = lane & 3;
    const int wm = warp % WM, wn = warp / WM;
    const int m0 = blockIdx.y * BM, j0 = blockIdx.x * BN, j1 = min(j0 + BN, g.N) - 1;
    const int np = f.oh * f.ow, ph = f.ih + 2 * f.pad, rw = f.iw + 2 * f.pad, chw = f.ih * f.iw;
    int first;
    const int plane = hl_rows(&f, KS, j0, j1, &first) * rw;

    /* The staged positions of a channel (e < plane, rows x rw): their offset in channel 0 of the
     * input, or -1 for padding; a table after the stages, made once. */
    int *hsrc = (int *)(sm + 2 * st_size);
    for (int e = tid; e < plane; e += NT) {
        const int r = e / rw, xx = e - r * rw;
        const int row = first + r, img = row / ph, iy = row - img * ph - f.pad, ix = xx - f.pad;
        hsrc[e] = img < f.n && iy >= 0 && iy < f.ih && ix >= 0 && ix < f.iw ? img * f.ci * chw + iy * f.iw + ix : -1;
    }
    __syncthreads();

    const uint32_t s_base = (uint32_t)__cvta_generic_to_shared(sm);
    /* Chunk c0's weights and staged rows into stage buf. Each copy's source is one 64-bit add
     * to a base of the chunk, and a valid address where nothing is read (zeros written). */
    auto load = [&](int buf, int c0) {
        const uint32_t as = s_base + 4 * buf * st_size, bs = as + 4 * a_size;
        const int nc = min(HL_BC, f.ci - c0); /* the chunk's channels */
        if (g.vec) {
            const float *wb = g.w + c0 * KK;
#pragma unroll
            for (int i = 0; i < VECS; i++) {
                const int v = tid + NT * i, r = v / VROW, q = v - r * VROW;
                if (v < BM * VROW) {
                    const bool live = m0 + r < f.m && 4 * q < nc * KK;
                    copy_w<4>(as + 4 * (r * A_LD + 4 * q), wb + (live ? (m0 + r) * g.wm + 4 * q : 0), live ? 16 : 0);
                }
            }
        } else {
            /* (row, tap) pairs p, each copied for the chunk's channels. */
            const float *wb = g.w + (size_t)c0 * g.wc;
#pragma unroll
            for (int i = 0; i < PAIRS; i++) {
                const int p = tid + NT * i, r = p / KK, t = p - r * KK;
                if (p >= BM * KK) break;
                const bool row_live = m0 + r < f.m;
                const float *src = wb + (row_live ? (m0 + r) * g.wm + t : 0);
#pragma unroll
                for (int c = 0; c < HL_BC; c++) {
                    const bool live = row_live && c < nc;
                    copy4(as + 4 * (r * A_LD + t + c * KK), src + (live ? c * g.wc : 0), live);
                }
            }
        }
        const float *xb = g.x + (size_t)c0 * chw;
        for (int e = tid; e < plane; e += NT) {
            const int src = hsrc[e];
            const float *p = xb + (src >= 0 ? src : 0);
#pragma unroll
            for (int c = 0; c < HL_BC; c++) {
                const bool live = src >= 0 && c < nc;
                copy4(bs + 4 * (c * g.pitch + e), p + (live ? c * chw : 0), live);
            }
        }
    };

    /* This lane's A rows (row gq of its warp's first m16 tile, channel tq) and its B columns: the
     * staged position of each n8 tile's column gq (the last one for columns past the end), at
     * channel tq. */
    const int a_lane = (wm * (BM / WM) + gq) * A_LD + tq * KK;
    int bpos[NTL];
#pragma unroll
    for (int ni = 0; ni < NTL; ni++) {
        const int j = min(j0 + wn * (BN / WN) + ni * 8 + gq, j1);
        const int img = j / np, q = j - img * np, oy = q / f.ow, ox = q - oy * f.ow;
        bpos[ni] = (img * ph + oy * f.stride - first) * rw + ox * f.stride + tq * g.pitch;
    }

    float acc[MT][NTL][4] = {};
    const int chunks = (f.ci + HL_BC - 1) / HL_BC;
    const int cb = blockIdx.z * g.per, ce = min(chunks, cb + g.per); /* this block's chunks */
    load(0, cb * HL_BC);
    __pipeline_commit();
    for (int ch = cb; ch < ce; ch++) {
        const int k = ch - cb;
        if (ch + 1 < ce) load((k + 1) & 1, (ch + 1) * HL_BC);
        __pipeline_commit();
        __pipeline_wait_prior(1); /* chunk ch has landed */
        __syncthreads();
        const float *As = sm + (k & 1) * st_size, *Bs = As + a_size;
        /* The window's rows one at a time (fewer registers), its taps along a row unrolled. */
#pragma unroll 1
        for (int ky = 0; ky < KS; ky++) {
#pragma unroll
            for (int kx = 0; kx < KS; kx++) {
                const int s = ky * KS + kx;
                const int shift = TURN ? (KS - 1 - ky) * rw + (KS - 1 - kx) : ky * rw + kx;
                uint32_t ah[MT][4], al[MT][4];
#pragma unroll
                for (int mi = 0; mi < MT; mi++) {
                    const float *a = As + a_lane + mi * 16 * A_LD + s;
                    split_frag_a(a[0], a[8 * A_LD], a[4 * KK], a[8 * A_LD + 4 * KK], ah[mi], al[mi]);
                }
#pragma unroll
                for (int ni = 0; ni < NTL; ni++) {
                    const float *b = Bs + bpos[ni] + shift;
                    uint32_t bh0, bl0, bh1, bl1;
                    split_tf32(b[0], bh0, bl0);
                    split_tf32(b[4 * g.pitch], bh1, bl1);
#pragma unroll
                    for (int mi = 0; mi < MT; mi++) {
                        if (PROD == 1) mma_tf32(acc[mi][ni], ah[mi], bh0, bh1);
                        else mma_split(acc[mi][ni], ah[mi], al[mi], bh0, bl0, bh1, bl1);
                    }
                }
            }
        }
        __syncthreads(); /* every warp is done with this stage before the next chunk's copies reuse it */
    }

    if (gridDim.z > 1) {
        const unsigned splits = gridDim.z, tile = blockIdx.y * gridDim.x + blockIdx.x;
        if (!split_tile_sum<MT, NTL, NT>(acc, g.part, g.counters, tile, splits, splits, blockIdx.z, tid)) return;
    }

    /* acc[mi][ni][e] is C at output channel m, position j. Where the tile fits in the stages'
     * buffers (g.staged), it goes through shared memory and is stored a row at a time
     * (conv_tile_store.cuh); else from the fragments, a warp's store reaching 8 channels at 4
     * positions each. */
    if (g.staged) {
        constexpr int CK = (BN + 31) / 32;
        tile_to_shared<BM, BN, WM, WN, MT, NTL>(sm, acc, wm, wn, gq, tq);
        /* A lane's positions are the same in every row: their places worked out once. */
        long long yoff[CK], roff[CK];
#pragma unroll
        for (int k = 0; k < CK; k++) {
            const int c = lane + 32 * k, j = j0 + c, img = j / np, q = j - img * np;
            yoff[k] = c < BN && j <= j1 ? (long long)img * f.m * np + q : -1;
            roff[k] = (long long)img * g.relu_image + q;
        }
        store_tile_rows<BM, BN, HL_WARPS, CK, TURN>(sm, warp, lane, m0, f.m, np, yoff, roff, g.bias, g.y, g.relu_out,
                                                    g.relu_mask);
        return;
    }
#pragma unroll
    for (int mi = 0; mi < MT; mi++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int m = m0 + wm * (BM / WM) + mi * 16 + gq + h * 8;
            if (m >= f.m) continue;
            const float bias = g.bias ? g.bias[m] : 0.0f;
#pragma unroll
            for (int ni = 0; ni < NTL; ni++)
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    const int j = j0 + wn * (BN / WN) + ni * 8 + 2 * tq + e;
                    if (j > j1) continue;
                    const int img = j / np, q = j - img * np;
                    const size_t at = ((size_t)img * f.m + m) * np + q;
                    const float v = acc[mi][ni][2 * h + e] + bias;
                    g.y[at] = v;
                    if (g.relu_out) {
                        float *r = g.relu_out + (size_t)img * g.relu_image + (size_t)m * np + q;
                        *r = TURN ? masked(v, g.relu_mask[at]) : relu_of(v);
                    }
                }
        }
}

/* The filter pass: C (filters x channels k^2) = dy (filters x positions) x windows (positions x
 * channels k^2), summed over a span of the positions (blockIdx.z). A block of WM x WN warps takes
 * 32 WM filters and 8 WN channels, each warp 32 filters x 8 channels x every tap; it walks its
 * span in chunks of HL_KP positions, staging each chunk's dy rows and the input rows (with their
 * halo) that its windows reach. Each 8-deep step is 8 positions: the A fragment from dy by
 * ldmatrix, the B fragments from the staged rows at the 8 positions shifted by each tap. */
typedef struct hf_args {
    const float *x, *dy;
    float *parts;        /* [splits][filters][channels k^2 + 1]: dw's sums, then db's */
    hl_form f;           /* m: the filters */
    int N;               /* n oh ow, the positions summed */
    int pitch, span;
    int vec;             /* dy's rows are whole 16-byte pieces (oh ow a multiple of 4, aligned) */
} hf_args;

template <int KS, int WM, int WN, int PROD>
static __global__ void __launch_bounds__(WM * WN * 32, 16 / (WM * WN)) halo_filter(hf_args g)
{
    bn_early_entry(); /* pdl.cuh */
    constexpr int NT = WM * WN * 32, KK = KS * KS, BM = 32 * WM, BC = 8 * WN, MT = 2;
    constexpr int A_LD = HL_KP + 4; /* A_LD / 4 odd: an ldmatrix's eight rows in other banks */
    extern __shared__ float4 smem4[];
    float *sm = (float *)smem4;
    const int a_size = BM * A_LD, st_size = a_size + BC * g.pitch + 2 * HL_KP;

    const hl_form f = g.f;
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, gq = lane >> 2, tq = lane & 3;
    const int wm = warp % WM, wn = warp / WM;
    const int m0 = blockIdx.y * BM, c0 = blockIdx.x * BC;
    const int kb = blockIdx.z * g.span, ke = min(g.N, kb + g.span);
    const int np = f.oh * f.ow, ph = f.ih + 2 * f.pad, rw = f.iw + 2 * f.pad, chw = f.ih * f.iw;
    const int chunks = (ke - kb + HL_KP - 1) / HL_KP;

    /* Chunk jc's tables in stage buf: each position's staged place (pos) and dy offset at filter
     * 0 (off; -1 past the span). */
    auto tables = [&](int buf, int jc) {
        int *pos = (int *)(sm + buf * st_size + a_size + BC * g.pitch), *off = pos + HL_KP;
        const int jl = min(jc + HL_KP, ke) - 1;
        int first;
        hl_rows(&f, KS, jc, jl, &first);
        for (int k = tid; k < HL_KP; k += NT) {
            const int j = min(jc + k, jl), img = j / np, q = j - img * np, oy = q / f.ow, ox = q - oy * f.ow;
            pos[k] = (img * ph + oy * f.stride - first) * rw + ox * f.stride;
            off[k] = jc + k <= jl ? img * f.m * np + q : -1;
        }
    };
    const uint32_t s_base = (uint32_t)__cvta_generic_to_shared(sm);
    /* Chunk jc's dy rows and staged input into stage buf (its tables made). */
    auto load = [&](int buf, int jc) {
        const uint32_t as = s_base + 4 * buf * st_size, bs = as + 4 * a_size;
        const int *off = (const int *)(sm + buf * st_size + a_size + BC * g.pitch) + HL_KP;
        const int jl = min(jc + HL_KP, ke) - 1;
        int first;
        const int plane = hl_rows(&f, KS, jc, jl, &first) * rw;
        if (g.vec) {
            for (int v = tid; v < BM * HL_KP / 4; v += NT) {
                const int r = v / (HL_KP / 4), k = (v - r * (HL_KP / 4)) * 4, o = off[k];
                const bool live = o >= 0 && m0 + r < f.m;
                copy_w<4>(as + 4 * (r * A_LD + k), g.dy + (live ? o + (m0 + r) * np : 0), live ? 16 : 0);
            }
        } else {
            for (int e = tid; e < BM * HL_KP; e += NT) {
                const int r = e / HL_KP, k = e - r * HL_KP, o = off[k];
                const bool live = o >= 0 && m0 + r < f.m;
                copy4(as + 4 * (r * A_LD + k), g.dy + (live ? o + (m0 + r) * np : 0), live);
            }
        }
        const int nc = min(BC, f.ci - c0); /* the tile's channels */
        const float *xb = g.x + (size_t)c0 * chw;
        for (int e = tid; e < plane; e += NT) {
            const int r = e / rw, xx = e - r * rw;
            const int row = first + r, img = row / ph, iy = row - img * ph - f.pad, ix = xx - f.pad;
            const int src =
                img < f.n && iy >= 0 && iy < f.ih && ix >= 0 && ix < f.iw ? img * f.ci * chw + iy * f.iw + ix : -1;
            const float *p = xb + (src >= 0 ? src : 0);
#pragma unroll
            for (int c = 0; c < BC; c++) {
                const bool live = src >= 0 && c < nc;
                copy4(bs + 4 * (c * g.pitch + e), p + (live ? c * chw : 0), live);
            }
        }
    };

    float acc[MT][KK][4] = {};
    const bool bias_rows = blockIdx.x == 0 && tid < BM;
    float bsum = 0.0f;
    const int b_lane = (wn * 8 + gq) * g.pitch;
    tables(0, kb);
    __syncthreads();
    load(0, kb);
    __pipeline_commit();
    for (int ch = 0; ch < chunks; ch++) {
        const int jn = kb + (ch + 1) * HL_KP;
        if (ch + 1 < chunks) tables((ch + 1) & 1, jn);
        __syncthreads(); /* the next chunk's tables are made */
        if (ch + 1 < chunks) load((ch + 1) & 1, jn);
        __pipeline_commit();
        __pipeline_wait_prior(1); /* chunk ch has landed */
        __syncthreads();
        const float *As = sm + (ch & 1) * st_size, *Bs = As + a_size;
        const int *pos = (const int *)(Bs + BC * g.pitch);
        const uint32_t a_at = s_base + 4 * (ch & 1) * st_size;
#pragma unroll 1
        for (int k8 = 0; k8 < HL_KP; k8 += 8) {
            uint32_t ah[MT][4], al[MT][4];
#pragma unroll
            for (int mi = 0; mi < MT; mi++) {
                const int row = wm * 32 + mi * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
                uint32_t fr[4];
                ldmatrix_x4(fr, a_at + 4 * (row * A_LD + k8 + (lane >> 4) * 4));
                split_frag_a(__uint_as_float(fr[0]), __uint_as_float(fr[1]), __uint_as_float(fr[2]),
                             __uint_as_float(fr[3]), ah[mi], al[mi]);
            }
            const float *b0p = Bs + b_lane + pos[k8 + tq], *b1p = Bs + b_lane + pos[k8 + tq + 4];
#pragma unroll
            for (int t = 0; t < KK; t++) {
                const int shift = (t / KS) * rw + t % KS;
                uint32_t bh0, bl0, bh1, bl1;
                split_tf32(b0p[shift], bh0, bl0);
                split_tf32(b1p[shift], bh1, bl1);
#pragma unroll
                for (int mi = 0; mi < MT; mi++) {
                    if (PROD == 1) mma_tf32(acc[mi][t], ah[mi], bh0, bh1);
                    else mma_split(acc[mi][t], ah[mi], al[mi], bh0, bl0, bh1, bl1);
                }
            }
        }
        if (bias_rows) {
            const float *a = As + tid * A_LD;
            for (int k = 0; k < HL_KP; k++) bsum += a[k];
        }
        __syncthreads(); /* every warp is done with this stage before the next chunk's tables and
                            copies reuse it */
    }

    /* This span's partials: filters x channels k^2 for dw, then filters for db. */
    const int taps = f.ci * KK;
    float *out = g.parts + (size_t)blockIdx.z * f.m * (taps + 1);
    if (bias_rows && m0 + tid < f.m) out[(size_t)f.m * taps + m0 + tid] = bsum;
#pragma unroll
    for (int mi = 0; mi < MT; mi++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int m = m0 + wm * 32 + mi * 16 + gq + (e >> 1) * 8, c = c0 + wn * 8 + 2 * tq + (e & 1);
            if (m >= f.m || c >= f.ci) continue;
#pragma unroll
            for (int t = 0; t < KK; t++) out[(size_t)m * taps + c * KK + t] = acc[mi][t][e];
        }
}

/* Launches one kernel; the first launch of each opts it in to the shared memory its launches
 * may take (more than the 48 KiB a kernel gets without asking). */
template <int BM, int BN, int WM, bool TURN>
static cudaError_t launch_one(int products, const hl_args &a, dim3 grid, size_t smem, cudaStream_t st)
{
    static bool opted[2];
    const int nt = HL_WARPS * 32;
    if (products == 1)
        return bn_launch_opted(halo_gemm<HL_KS, BM, BN, WM, 1, TURN>, &opted[0], HL_SMEM_MAX, grid, nt, smem, st, a);
    return bn_launch_opted(halo_gemm<HL_KS, BM, BN, WM, 3, TURN>, &opted[1], HL_SMEM_MAX, grid, nt, smem, st, a);
}

template <bool TURN>
static cudaError_t launch_cfg(int cfg, int products, const hl_args &a, dim3 grid, size_t smem, cudaStream_t st)
{
    switch (cfg) {
    case 0: return launch_one<128, 64, 4, TURN>(products, a, grid, smem, st);
    case 1: return launch_one<64, 128, 2, TURN>(products, a, grid, smem, st);
    case 2: return launch_one<64, 64, 2, TURN>(products, a, grid, smem, st);
    case 3: return launch_one<32, 256, 1, TURN>(products, a, grid, smem, st);
    case 4: return launch_one<32, 128, 1, TURN>(products, a, grid, smem, st);
    case 5: return launch_one<128, 48, 4, TURN>(products, a, grid, smem, st);
    case 6: return launch_one<64, 96, 2, TURN>(products, a, grid, smem, st);
    default: return launch_one<32, 192, 1, TURN>(products, a, grid, smem, st);
    }
}

static bn_status hl_launch(const bn_halo_plan *p, const bn_halo_pass *hp, const hl_form *f, bool turn, int wm,
                           int wc, cudaStream_t st, const float *x, const float *w, const float *bias, float *y,
                           void *scratch, const bn_conv_relu *relu)
{
    if (!hp->ok) return bn_error(BN_ERR_INTERNAL, "halo convolution cannot run this shape: %s", hp->why);
    if (hp->splits > 1 && !scratch) return bn_error(BN_ERR_INTERNAL, "halo convolution: a split pass without scratch");
    hl_args a;
    a.x = x, a.w = w, a.bias = bias, a.y = y, a.f = *f;
    a.relu_out = relu ? relu->out : NULL;
    a.relu_mask = relu ? relu->mask : NULL;
    a.relu_image = relu ? (long long)relu->image : 0;
    a.N = f->n * f->oh * f->ow;
    a.pitch = hp->pitch;
    a.wm = wm, a.wc = wc;
    /* Whole 16-byte pieces: the forward pass's rows (c k^2 floats) a multiple of 4 floats from a
     * 16-byte aligned start, so that a chunk's row starts aligned and its channels past the
     * last end on a piece's edge. */
    a.vec = !turn && f->ci % 4 == 0 && ((uintptr_t)w & 15) == 0;
    const int cfg = hp->cfg;
    const int bm = hl_tiles[cfg][0], bn = hl_tiles[cfg][1];
    dim3 grid((a.N + bn - 1) / bn, (f->m + bm - 1) / bm, hp->splits);
    a.per = hp->per;
    a.counters = (unsigned *)scratch;
    a.part = scratch ? (float *)((unsigned *)scratch + BN_CONV_SPLIT_COUNTERS) : NULL;
    const size_t smem = (size_t)hl_smem_floats(cfg, HL_KS, hp->pitch) * sizeof(float);
    a.staged = (long long)bm * tile_pitch(bn) <= hl_smem_floats(cfg, HL_KS, hp->pitch);
    cudaError_t e = turn ? launch_cfg<true>(cfg, p->products, a, grid, smem, st)
                         : launch_cfg<false>(cfg, p->products, a, grid, smem, st);
    BN_CUDA(e);
    BN_CUDA_LAUNCH();
    return BN_OK;
}

extern "C" bn_status bn_halo_forward(const bn_halo_plan *p, const bn_conv_geom *g, int filters, int n, void *stream,
                                     const float *x, const float *w, const float *b, float *y, void *scratch,
                                     const bn_conv_relu *relu)
{
    const hl_form f = {n, g->c, g->h, g->w, filters, g->oh, g->ow, g->stride, g->pad};
    const int kk = g->k * g->k;
    return hl_launch(p, &p->pass[0], &f, false, g->c * kk, kk, (cudaStream_t)stream, x, w, b, y, scratch, relu);
}

extern "C" bn_status bn_halo_backward_data(const bn_halo_plan *p, const bn_conv_geom *g, int filters, int n,
                                           void *stream, const float *dy, const float *w, float *dx,
                                           void *scratch, const bn_conv_relu *relu)
{
    const hl_form f = {n, filters, g->oh, g->ow, g->c, g->h, g->w, 1, g->k - 1 - g->pad};
    const int kk = g->k * g->k;
    return hl_launch(p, &p->pass[1], &f, true, kk, g->c * kk, (cudaStream_t)stream, dy, w, NULL, dx, scratch, relu);
}

/* The same for the filter kernel, of WM x WN warps. */
template <int WM, int WN>
static cudaError_t launch_filter(int products, const hf_args &a, dim3 grid, size_t smem, cudaStream_t st)
{
    static bool opted[2];
    const int nt = WM * WN * 32;
    if (products == 1)
        return bn_launch_opted(halo_filter<HL_KS, WM, WN, 1>, &opted[0], HL_SMEM_MAX, grid, nt, smem, st, a);
    return bn_launch_opted(halo_filter<HL_KS, WM, WN, 3>, &opted[1], HL_SMEM_MAX, grid, nt, smem, st, a);
}

extern "C" bn_status bn_halo_backward_filter_parts(const bn_halo_plan *p, const bn_conv_geom *g, int filters, int n,
                                                   void *stream, const float *x, const float *dy, float *parts)
{
    const bn_halo_pass *hp = &p->pass[2];
    if (!hp->ok) return bn_error(BN_ERR_INTERNAL, "halo convolution cannot run this shape: %s", hp->why);
    hf_args a;
    a.x = x, a.dy = dy, a.parts = parts;
    const hl_form form = {n, g->c, g->h, g->w, filters, g->oh, g->ow, g->stride, g->pad};
    a.f = form;
    a.N = n * g->oh * g->ow;
    a.pitch = hp->pitch, a.span = hp->span;
    a.vec = (g->oh * g->ow) % 4 == 0 && ((uintptr_t)dy & 15) == 0;
    const int cfg = hp->cfg, wm = hl_filter_tiles[cfg][0], wn = hl_filter_tiles[cfg][1];
    dim3 grid((g->c + 8 * wn - 1) / (8 * wn), (filters + 32 * wm - 1) / (32 * wm), hp->splits);
    const size_t smem = (size_t)hl_filter_smem_floats(cfg, hp->pitch) * sizeof(float);
    cudaError_t e;
    switch (cfg) {
    case 0: e = launch_filter<4, 2>(p->products, a, grid, smem, (cudaStream_t)stream); break;
    case 1: e = launch_filter<2, 4>(p->products, a, grid, smem, (cudaStream_t)stream); break;
    case 2: e = launch_filter<1, 4>(p->products, a, grid, smem, (cudaStream_t)stream); break;
    default: e = launch_filter<2, 2>(p->products, a, grid, smem, (cudaStream_t)stream); break;
    }
    BN_CUDA(e);
    BN_CUDA_LAUNCH();
    return BN_OK;
}

extern "C" bn_status bn_conv_run_halo(const bn_conv_family_plan *p, const bn_conv_shape *s, int pass, void *stream,
                                      const bn_conv_io *io)
{
    const bn_halo_plan *h = &p->halo;
    if (pass == BN_CONV_FORWARD)
        return bn_halo_forward(h, &s->g, s->filters, s->n, stream, io->x, io->w, io->b, io->y, io->scratch,
                               &io->relu);
    if (pass == BN_CONV_DATA)
        return bn_halo_backward_data(h, &s->g, s->filters, s->n, stream, io->dy, io->w, io->dx, io->scratch,
                                     &io->relu);
    const bn_halo_pass *fp = &h->pass[2];
    BN_TRY(bn_halo_backward_filter_parts(h, &s->g, s->filters, s->n, stream, io->x, io->dy, io->parts));
    return bn_direct_finish_filter(stream, io->parts, fp->splits, s->filters, s->g.c * s->g.k * s->g.k, io->dw, io->db);
}

BN_CODE_ANCHOR(conv_halo, halo_filter<3, 1, 4, 1>) /* code_load.cu */
