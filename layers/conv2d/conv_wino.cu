/* conv_wino.cu - the conv2d layer's Winograd kernels for the GPU (see conv_wino.h).
 *
 * F(4x4, 3x3) over the six points 0, 1, -1, 2, -2 and infinity, as the CPU's conv_winograd.c:
 * a 4x4 output tile comes from the 6x6 input patch d at its corner (less the padding) as
 *
 *     y = A^T [ (G g G^T) . (B^T d B) ] A      (. the product of each of the 36 points)
 *
 * summed over the channels. A pass in its forward form (bn_wino_form) runs, per chunk of images:
 *   carry_in    V[xi][c][t] = (B^T d B)[xi] for channel c of tile t (zeros past the channels and
 *               tiles, so that the products may read whole 16-byte pieces);
 *   wg_gemm     M[xi] = U[xi] V[xi], U[xi][o][c] = (G g G^T)[xi] of output channel o's weights for c
 *               (carry_w, once a pass), for each of the 36 points;
 *   carry_out   y = A^T M A per tile and output channel, the bias added, a fused ReLU written.
 * The data pass at stride 1 is the forward form over dy padded by 2 - pad with each filter turned
 * half a circle and the channels' roles swapped (carry_w's `turned`). The filter pass carries dy's
 * tiles in by A dy A^T (carry_dy) beside the input's, takes dU[xi][o][c] = sum over t of
 * Dy[xi][o][t] V[xi][c][t] (the point's product with V read along its tiles), split along the
 * tiles where the points' tiles of filters x channels alone leave multiprocessors idle and summed
 * over the chunks in order, then dw += G^T dU G (finish_w) and db += the sum of dy (conv_bias.h).
 *
 * The products run on the tensor cores, m16n8k8 with both operands split into TF32 values and
 * remainders (mma_tf32.cuh: FP32 accuracy), or the value product alone in a tf32 context. Sums
 * run in a fixed order: the results do not depend on timing. */
#include <cuda_pipeline.h>
#include <stdint.h>

#include "conv_bias.h"
#include "conv_family.h"
#include "conv_wino.h"
#include "conv_wino_limits.h"
#include "gpu/code_anchor.cuh"
#include "gpu/cp_async.cuh"
#include "gpu/cuda_check.h"
#include "gpu/mma_tf32.cuh"
#include "gpu/pdl.cuh"
#include "gpu/smem_opt_in.cuh"
#include "gpu/vec_ops.cuh"

#define XI BN_WINO_POINTS
#define TL BN_WINO_TILE
/* Threads a block of the transforms and the products. */
#define WG_THREADS 256
/* Pipeline stages of the products. */
#define WG_STAGES 3

/* ---- the transforms along one axis ---- */

/* B^T d: the input's (6 -> 6). */
static __device__ __forceinline__ void bt6(const float *d, int s, float *o, int so)
{
    const float d0 = d[0], d1 = d[s], d2 = d[2 * s], d3 = d[3 * s], d4 = d[4 * s], d5 = d[5 * s];
    o[0] = 4.0f * d0 - 5.0f * d2 + d4;
    o[so] = (d3 + d4) - 4.0f * (d1 + d2);
    o[2 * so] = (d4 - d3) + 4.0f * (d1 - d2);
    o[3 * so] = (d4 - d2) + 2.0f * (d3 - d1);
    o[4 * so] = (d4 - d2) - 2.0f * (d3 - d1);
    o[5 * so] = 4.0f * d1 - 5.0f * d3 + d5;
}

/* A^T m: the output's (6 -> 4). */
static __device__ __forceinline__ void at6(const float *m, int s, float *o, int so)
{
    const float s12 = m[s] + m[2 * s], d12 = m[s] - m[2 * s], s34 = m[3 * s] + m[4 * s], d34 = m[3 * s] - m[4 * s];
    o[0] = m[0] + s12 + s34;
    o[so] = d12 + 2.0f * d34;
    o[2 * so] = s12 + 4.0f * s34;
    o[3 * so] = d12 + 8.0f * d34 + m[5 * s];
}

/* A y: the output gradient's (4 -> 6). */
static __device__ __forceinline__ void a6(const float *y, int s, float *o, int so)
{
    const float y0 = y[0], y1 = y[s], y2 = y[2 * s], y3 = y[3 * s];
    const float s02 = y0 + y2, s13 = y1 + y3, q02 = y0 + 4.0f * y2, q13 = 2.0f * y1 + 8.0f * y3;
    o[0] = y0;
    o[so] = s02 + s13;
    o[2 * so] = s02 - s13;
    o[3 * so] = q02 + q13;
    o[4 * so] = q02 - q13;
    o[5 * so] = y3;
}

/* G g: the weights' (3 -> 6), in double. */
static __device__ __forceinline__ void g6(const double *g, int s, double *o, int so)
{
    const double g0 = g[0], g1 = g[s], g2 = g[2 * s];
    o[0] = g0 / 4.0;
    o[so] = -(g0 + g1 + g2) / 6.0;
    o[2 * so] = -(g0 - g1 + g2) / 6.0;
    o[3 * so] = g0 / 24.0 + g1 / 12.0 + g2 / 6.0;
    o[4 * so] = g0 / 24.0 - g1 / 12.0 + g2 / 6.0;
    o[5 * so] = g2;
}

/* G^T s: the weight gradient's (6 -> 3), in double. */
static __device__ __forceinline__ void gt6(const double *s, int st, double *o, int so)
{
    const double s0 = s[0], s1 = s[st], s2 = s[2 * st], s3 = s[3 * st], s4 = s[4 * st], s5 = s[5 * st];
    o[0] = s0 / 4.0 - (s1 + s2) / 6.0 + (s3 + s4) / 24.0;
    o[so] = (s2 - s1) / 6.0 + (s3 - s4) / 12.0;
    o[2 * so] = (s3 + s4 - s1 - s2) / 6.0 + s5;
}

/* ---- carrying values in and out ---- */

/* The input's tiles, carried in: V[xi][c][t] (rows cip, cols apart) for the chunk's images from
 * img0 (tiles t < images th tw), zeros elsewhere. */
static __global__ void __launch_bounds__(WG_THREADS) carry_in(const float *x, bn_wino_form f, int img0, int images,
                                                              int cip, int cols, float *v)
{
    bn_early_entry(); /* pdl.cuh */
    const long long i = (long long)blockIdx.x * WG_THREADS + threadIdx.x;
    if (i >= (long long)cip * cols) return;
    const int c = (int)(i / cols), t = (int)(i - (long long)c * cols);
    const int tiles = f.th * f.tw;
    float d[36], e[36];
    if (c < f.ci && t < images * tiles) {
        const int img = img0 + t / tiles, tile = t % tiles;
        const int y0 = tile / f.tw * TL - f.pad, x0 = tile % f.tw * TL - f.pad;
        const float *plane = x + ((size_t)img * f.ci + c) * f.ih * f.iw;
#pragma unroll
        for (int r = 0; r < 6; r++)
#pragma unroll
            for (int q = 0; q < 6; q++) {
                const int yy = y0 + r, xx = x0 + q;
                d[r * 6 + q] = yy >= 0 && yy < f.ih && xx >= 0 && xx < f.iw ? plane[yy * f.iw + xx] : 0.0f;
            }
#pragma unroll
        for (int q = 0; q < 6; q++) bt6(d + q, 6, e + q, 6);  /* columns: B^T d */
#pragma unroll
        for (int r = 0; r < 6; r++) bt6(e + 6 * r, 1, d + 6 * r, 1); /* rows: (B^T d) B */
    } else {
#pragma unroll
        for (int k = 0; k < 36; k++) d[k] = 0.0f;
    }
    const size_t point = (size_t)cip * cols;
    float *out = v + (size_t)c * cols + t;
#pragma unroll
    for (int k = 0; k < 36; k++) out[k * point] = d[k];
}

/* The output gradient's tiles, carried in: Dy[xi][o][t] = (A dy A^T)[xi] (rows co, cols apart),
 * the cells past the output zeros; zeros for tiles past the chunk. */
static __global__ void __launch_bounds__(WG_THREADS) carry_dy(const float *dy, bn_wino_form f, int img0, int images,
                                                              int cols, float *out)
{
    bn_early_entry(); /* pdl.cuh */
    const long long i = (long long)blockIdx.x * WG_THREADS + threadIdx.x;
    if (i >= (long long)f.co * cols) return;
    const int o = (int)(i / cols), t = (int)(i - (long long)o * cols);
    const int tiles = f.th * f.tw;
    float d[36], e[36];
    if (t < images * tiles) {
        const int img = img0 + t / tiles, tile = t % tiles;
        const int y0 = tile / f.tw * TL, x0 = tile % f.tw * TL;
        const float *plane = dy + ((size_t)img * f.co + o) * f.oh * f.ow;
        float g[16];
#pragma unroll
        for (int r = 0; r < TL; r++)
#pragma unroll
            for (int q = 0; q < TL; q++) {
                const int yy = y0 + r, xx = x0 + q;
                g[r * TL + q] = yy < f.oh && xx < f.ow ? plane[yy * f.ow + xx] : 0.0f;
            }
#pragma unroll
        for (int q = 0; q < TL; q++) a6(g + q, TL, e + q, TL); /* columns: A g (6 x 4) */
#pragma unroll
        for (int r = 0; r < 6; r++) a6(e + TL * r, 1, d + 6 * r, 1); /* rows: (A g) A^T */
    } else {
#pragma unroll
        for (int k = 0; k < 36; k++) d[k] = 0.0f;
    }
    const size_t point = (size_t)f.co * cols;
    float *to = out + (size_t)o * cols + t;
#pragma unroll
    for (int k = 0; k < 36; k++) to[k * point] = d[k];
}

/* The weights carried in: U[xi][o][c] = (G g G^T)[xi] (rows rows, cip apart) for the form's
 * output channel o and summed channel c, zeros for c past the channels, split into its TF32 value
 * (u) and remainder (u_lo, mma_tf32.cuh) once here rather than by every warp that reads it.
 * w holds [filters][c][3][3]; the forward form's o is the filter and c the channel; `turned` (the
 * data pass): o is the channel, c the filter, and the window turned half a circle. */
static __global__ void __launch_bounds__(WG_THREADS) carry_w(const float *w, int rows, int sums, int cip, int turned,
                                                             float *u, float *u_lo)
{
    bn_early_entry(); /* pdl.cuh */
    const int i = blockIdx.x * WG_THREADS + threadIdx.x;
    if (i >= rows * cip) return;
    const int o = i / cip, c = i - o * cip;
    double out[36];
    if (c < sums) {
        const float *g = turned ? w + ((size_t)c * rows + o) * 9 : w + ((size_t)o * sums + c) * 9;
        double k[9], e[18];
        for (int t = 0; t < 9; t++) k[t] = g[turned ? 8 - t : t];
        for (int q = 0; q < 3; q++) g6(k + q, 3, e + q, 3); /* columns: G g (6 x 3) */
        for (int r = 0; r < 6; r++) g6(e + 3 * r, 1, out + 6 * r, 1); /* rows: (G g) G^T */
    } else {
        for (int t = 0; t < 36; t++) out[t] = 0.0;
    }
    const size_t point = (size_t)rows * cip;
    for (int t = 0; t < 36; t++) {
        uint32_t hi, lo;
        split_tf32((float)out[t], hi, lo);
        u[t * point + i] = __uint_as_float(hi);
        u_lo[t * point + i] = __uint_as_float(lo);
    }
}

/* The products carried out: y = A^T M A per output channel o and tile t of the chunk, the bias
 * added, cells past the output dropped; with relu_out, a fused ReLU's output (forward) or, with
 * relu_mask too, its input gradient (data). vec: rows of 16-byte pieces (ow a multiple of 4, the
 * buffers and relu_image aligned to them). */
static __global__ void __launch_bounds__(WG_THREADS) carry_out(const float *m, bn_wino_form f, int img0, int images,
                                                               int cols, const float *bias, float *y, float *relu_out,
                                                               const float *relu_mask, long long relu_image, int vec)
{
    bn_early_entry(); /* pdl.cuh */
    const int tiles = f.th * f.tw;
    const long long i = (long long)blockIdx.x * WG_THREADS + threadIdx.x;
    if (i >= (long long)f.co * images * tiles) return;
    const int o = (int)(i / (images * tiles)), t = (int)(i - (long long)o * images * tiles);
    const size_t point = (size_t)f.co * cols;
    const float *from = m + (size_t)o * cols + t;
    float s[36], e[24], r[16];
#pragma unroll
    for (int k = 0; k < 36; k++) s[k] = from[k * point];
#pragma unroll
    for (int q = 0; q < 6; q++) at6(s + q, 6, e + q, 6); /* columns: A^T M (4 x 6) */
#pragma unroll
    for (int k = 0; k < TL; k++) at6(e + 6 * k, 1, r + TL * k, 1); /* rows: (A^T M) A */
    const int img = img0 + t / tiles, tile = t % tiles;
    const int y0 = tile / f.tw * TL, x0 = tile % f.tw * TL;
    const float b = bias ? bias[o] : 0.0f;
    const size_t plane = (size_t)f.oh * f.ow, at = ((size_t)img * f.co + o) * plane;
    float *relu_at = relu_out ? relu_out + (size_t)img * relu_image + (size_t)o * plane : NULL;
#pragma unroll
    for (int a = 0; a < TL; a++) {
        const int yy = y0 + a;
        if (yy >= f.oh) continue;
        const size_t row = (size_t)yy * f.ow + x0;
        if (vec) { /* the row's four cells as one 16-byte piece: ow a multiple of 4, y aligned */
            const float4 v = make_float4(r[a * TL] + b, r[a * TL + 1] + b, r[a * TL + 2] + b, r[a * TL + 3] + b);
            *(float4 *)(y + at + row) = v;
            if (relu_at)
                *(float4 *)(relu_at + row) =
                    relu_mask ? masked(v, *(const float4 *)(relu_mask + at + row))
                              : make_float4(relu_of(v.x), relu_of(v.y), relu_of(v.z), relu_of(v.w));
            continue;
        }
#pragma unroll
        for (int q = 0; q < TL; q++) {
            if (x0 + q >= f.ow) continue;
            const float v = r[a * TL + q] + b;
            y[at + row + q] = v;
            if (relu_at) relu_at[row + q] = relu_mask ? masked(v, relu_mask[at + row + q]) : relu_of(v);
        }
    }
}

/* dw[o][c] += G^T dU G, dU at point xi for filter o and channel c at du + xi point + o so + c sc,
 * summed over the splits (slot floats apart) in order. */
static __global__ void __launch_bounds__(WG_THREADS) finish_w(const float *du, int splits, long long slot, int co,
                                                              int ci, int so, int sc, long long point, float *dw)
{
    bn_early_entry(); /* pdl.cuh */
    const int i = blockIdx.x * WG_THREADS + threadIdx.x;
    if (i >= co * ci) return;
    const int o = i / ci, c = i - o * ci;
    const size_t at = (size_t)o * so + (size_t)c * sc;
    double s[36], e[18], k[9];
#pragma unroll
    for (int t = 0; t < 36; t++) {
        double sum = 0.0;
        for (int p = 0; p < splits; p++) sum += du[p * slot + t * point + at];
        s[t] = sum;
    }
#pragma unroll
    for (int q = 0; q < 6; q++) gt6(s + q, 6, e + q, 6); /* columns: G^T dU (3 x 6) */
#pragma unroll
    for (int r = 0; r < 3; r++) gt6(e + 6 * r, 1, k + 3 * r, 1); /* rows: (G^T dU) G */
    float *to = dw + ((size_t)o * ci + c) * 9;
#pragma unroll
    for (int t = 0; t < 9; t++) to[t] += (float)k[t];
}

/* ---- the 36 points' products ---- */

/* C[xi] (m x n) = A[xi] (m x r) B[xi] (r x n) for the 36 points (blockIdx.z % 36) and the splits
 * of the summed index (blockIdx.z / 36: r_per of it each, into its own slot of C). A is kept row
 * by row (its rows lda apart); B row by row (ldb apart, n along a row) or, with BT, as its
 * transpose (n rows ldb apart, r along a row). r, lda, ldb and the points' strides are multiples
 * of 4 and the operands 16-byte aligned, so that every 16-byte piece is wholly in or out. */
typedef struct wg_gemm_args {
    const float *a, *b;
    const float *a_lo;  /* A's remainders where A comes split (a its TF32 values), else NULL */
    float *c;
    long long a_xi, b_xi, c_xi, c_split;
    int lda, ldb, ldc;
    int m, n, r, r_per;
    int accumulate; /* add into C (a later chunk's sums) instead of writing it */
} wg_gemm_args;

template <int BM, int BN, bool BT, bool PRE>
struct wg_smem {
    static constexpr int A_LD = WG_BK + 4;              /* A's rows: (g A_LD + t) % 32 distinct */
    static constexpr int B_LD = BT ? WG_BK + 4 : BN + 8; /* B: likewise, or (t B_LD + g) % 32 */
    static constexpr int A_TILE = BM * A_LD;
    static constexpr int A_FLOATS = (PRE ? 2 : 1) * A_TILE; /* with PRE, the remainders after */
    static constexpr int B_FLOATS = BT ? BN * B_LD : WG_BK * B_LD;
    static constexpr int STAGE = A_FLOATS + B_FLOATS;
    static constexpr size_t BYTES = (size_t)WG_STAGES * STAGE * sizeof(float);
};

/* Copies stage `kt`'s pieces of A and B into shared memory (zeros past the operands). */
template <int BM, int BN, bool BT, bool PRE>
static __device__ __forceinline__ void wg_stage(const wg_gemm_args &g, const float *a, const float *a_lo,
                                                const float *b, int m0, int n0, int k0, int r_end, float *sa,
                                                float *sb)
{
    typedef wg_smem<BM, BN, BT, PRE> S;
    const int tid = threadIdx.x;
    /* A: BM rows of WG_BK floats, 4 pieces a row. */
#pragma unroll
    for (int p = tid; p < BM * (WG_BK / 4); p += WG_THREADS) {
        const int row = p / (WG_BK / 4), col = p % (WG_BK / 4) * 4;
        const bool in = m0 + row < g.m && k0 + col < r_end;
        const size_t at = (size_t)(m0 + row) * g.lda + k0 + col;
        copy_w<4>((uint32_t)__cvta_generic_to_shared(sa + row * S::A_LD + col), in ? a + at : a, in ? 16 : 0);
        if (PRE)
            copy_w<4>((uint32_t)__cvta_generic_to_shared(sa + S::A_TILE + row * S::A_LD + col), in ? a_lo + at : a_lo,
                      in ? 16 : 0);
    }
    if (BT) {
#pragma unroll
        for (int p = tid; p < BN * (WG_BK / 4); p += WG_THREADS) {
            const int row = p / (WG_BK / 4), col = p % (WG_BK / 4) * 4;
            const bool in = n0 + row < g.n && k0 + col < r_end;
            const float *src = in ? b + (size_t)(n0 + row) * g.ldb + k0 + col : b;
            copy_w<4>((uint32_t)__cvta_generic_to_shared(sb + row * S::B_LD + col), src, in ? 16 : 0);
        }
    } else {
#pragma unroll
        for (int p = tid; p < WG_BK * (BN / 4); p += WG_THREADS) {
            const int row = p / (BN / 4), col = p % (BN / 4) * 4;
            const bool in = k0 + row < r_end && n0 + col < g.n;
            const float *src = in ? b + (size_t)(k0 + row) * g.ldb + n0 + col : b;
            copy_w<4>((uint32_t)__cvta_generic_to_shared(sb + row * S::B_LD + col), src, in ? 16 : 0);
        }
    }
}

/* Eight warps, 2 along the rows and 4 along the columns: a warp takes (BM / 2) x (BN / 4) of the
 * block's BM x BN, as BM / 32 m16 tiles by BN / 32 n8 tiles. P products per multiply
 * (mma_tf32.cuh). */
template <int BM, int BN, bool BT, bool PRE, int P>
static __global__ void __launch_bounds__(WG_THREADS) wg_gemm(wg_gemm_args g)
{
    bn_early_entry(); /* pdl.cuh */
    typedef wg_smem<BM, BN, BT, PRE> S;
    constexpr int MT = BM / 32, NTL = BN / 32;
    extern __shared__ __align__(16) float smem[];
    const int xi = blockIdx.z % XI, split = blockIdx.z / XI;
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    const int r_begin = split * g.r_per, r_end = min(g.r, r_begin + g.r_per);
    const float *a = g.a + xi * g.a_xi, *b = g.b + xi * g.b_xi;
    const float *a_lo = PRE ? g.a_lo + xi * g.a_xi : NULL;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, gq = lane / 4, tq = lane % 4;
    const int wm = warp / 4, wn = warp % 4;
    float acc[NTL][MT][4]; /* by column tile, so that mma_tiles_in_rounds takes one's row tiles */
#pragma unroll
    for (int j = 0; j < NTL; j++)
#pragma unroll
        for (int i = 0; i < MT; i++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[j][i][e] = 0.0f;
    const int steps = r_end > r_begin ? (r_end - r_begin + WG_BK - 1) / WG_BK : 0;
#pragma unroll
    for (int s = 0; s < WG_STAGES - 1; s++) {
        if (s < steps)
            wg_stage<BM, BN, BT, PRE>(g, a, a_lo, b, m0, n0, r_begin + s * WG_BK, r_end, smem + s * S::STAGE,
                             smem + s * S::STAGE + S::A_FLOATS);
        __pipeline_commit();
    }
    for (int kt = 0; kt < steps; kt++) {
        __pipeline_wait_prior(WG_STAGES - 2);
        __syncthreads(); /* stage kt is in, and every warp is done with the stage the next copy takes */
        const int next = kt + WG_STAGES - 1;
        if (next < steps) {
            float *st = smem + (next % WG_STAGES) * S::STAGE;
            wg_stage<BM, BN, BT, PRE>(g, a, a_lo, b, m0, n0, r_begin + next * WG_BK, r_end, st, st + S::A_FLOATS);
        }
        __pipeline_commit();
        const float *sa = smem + (kt % WG_STAGES) * S::STAGE, *sb = sa + S::A_FLOATS;
#pragma unroll
        for (int kk = 0; kk < WG_BK; kk += 8) {
            uint32_t ah[MT][4], al[MT][4];
#pragma unroll
            for (int i = 0; i < MT; i++) {
                if (PRE) {
                    /* Lanes 8j .. 8j + 7 name the rows of the fragment's 8 x 4 tile j (ldmatrix_x4). */
                    const int row = wm * (BM / 2) + i * 16 + (lane & 7) + 8 * ((lane >> 3) & 1);
                    const float *p = sa + row * S::A_LD + kk + 4 * (lane >> 4);
                    ldmatrix_x4(ah[i], (uint32_t)__cvta_generic_to_shared(p));
                    if (P == 3) ldmatrix_x4(al[i], (uint32_t)__cvta_generic_to_shared(p + S::A_TILE));
                } else {
                    const float *p = sa + (wm * (BM / 2) + i * 16 + gq) * S::A_LD + kk + tq;
                    split_frag_a(p[0], p[8 * S::A_LD], p[4], p[8 * S::A_LD + 4], ah[i], al[i]);
                }
            }
#pragma unroll
            for (int j = 0; j < NTL; j++) {
                const int col = wn * (BN / 4) + j * 8 + gq;
                const float b0 = BT ? sb[col * S::B_LD + kk + tq] : sb[(kk + tq) * S::B_LD + col];
                const float b1 = BT ? sb[col * S::B_LD + kk + tq + 4] : sb[(kk + tq + 4) * S::B_LD + col];
                uint32_t bh0, bl0, bh1, bl1;
                split_tf32(b0, bh0, bl0);
                split_tf32(b1, bh1, bl1);
                mma_tiles_in_rounds<P, MT>(acc[j], ah, al, bh0, bl0, bh1, bl1);
            }
        }
    }
    __pipeline_wait_prior(0);
    float *c = g.c + split * g.c_split + xi * g.c_xi;
#pragma unroll
    for (int i = 0; i < MT; i++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int row = m0 + wm * (BM / 2) + i * 16 + gq + 8 * h;
            if (row >= g.m) continue;
#pragma unroll
            for (int j = 0; j < NTL; j++) {
                const int col = n0 + wn * (BN / 4) + j * 8 + 2 * tq;
                if (col >= g.n) continue;
                float *to = c + (size_t)row * g.ldc + col;
                float2 v = make_float2(acc[j][i][2 * h], acc[j][i][2 * h + 1]);
                if (col + 1 < g.n) { /* ldc and the points' strides are even: 8-byte aligned */
                    if (g.accumulate) {
                        const float2 was = *(const float2 *)to;
                        v.x += was.x, v.y += was.y;
                    }
                    *(float2 *)to = v;
                } else {
                    *to = g.accumulate ? *to + v.x : v.x;
                }
            }
        }
}

template <int BM, int BN, bool BT, bool PRE>
static cudaError_t gemm_launch(int products, const wg_gemm_args &a, cudaStream_t st)
{
    static bool opted[2];
    typedef wg_smem<BM, BN, BT, PRE> S;
    const dim3 grid((a.n + BN - 1) / BN, (a.m + BM - 1) / BM, XI * ((a.r + a.r_per - 1) / a.r_per));
    if (products == 1)
        return bn_launch_opted(wg_gemm<BM, BN, BT, PRE, 1>, &opted[0], S::BYTES, grid, WG_THREADS, S::BYTES, st, a);
    return bn_launch_opted(wg_gemm<BM, BN, BT, PRE, 3>, &opted[1], S::BYTES, grid, WG_THREADS, S::BYTES, st, a);
}

/* The points' products of a in tile configuration cfg (conv_wino_limits.h): the forward form's,
 * A the split weights and B read along its rows, or the filter pass's, A split by the warps that
 * read it and B read as its transpose. */
static cudaError_t gemm(bool filter, int products, int cfg, const wg_gemm_args &a, cudaStream_t st)
{
    if (filter) switch (cfg) {
        case WG_WIDE: return gemm_launch<128, 128, true, false>(products, a, st);
        case WG_LONG: return gemm_launch<64, 256, true, false>(products, a, st);
        default: return gemm_launch<64, 128, true, false>(products, a, st);
        }
    switch (cfg) {
    case WG_WIDE: return gemm_launch<128, 128, false, true>(products, a, st);
    case WG_LONG: return gemm_launch<64, 256, false, true>(products, a, st);
    default: return gemm_launch<64, 128, false, true>(products, a, st);
    }
}

static bool aligned16(const void *p)
{
    return ((uintptr_t)p & 15) == 0;
}

static unsigned blocks_for(long long threads)
{
    return (unsigned)((threads + WG_THREADS - 1) / WG_THREADS);
}

/* ---- the passes ---- */

/* The forward form over the pass's chunks: x in, y out (see the file's comment); w read as
 * carry_w's `turned` says. */
static bn_status run_form(const bn_wino_plan *p, const bn_wino_pass *wp, int n, cudaStream_t st, const float *x,
                          const float *w, int turned, const float *bias, float *y, void *scratch,
                          const bn_conv_relu *relu)
{
    if (!wp->ok) return bn_error(BN_ERR_INTERNAL, "Winograd convolution cannot run this shape: %s", wp->why);
    if (!scratch) return bn_error(BN_ERR_INTERNAL, "Winograd convolution: a pass without scratch");
    const bn_wino_form f = wp->f;
    const int cip = wp->cip, cols = wp->cols, tiles = f.th * f.tw;
    /* Past the split counters every family keeps at the scratch's start (conv_family.h), which
     * another family's pass of the layer may need at zero. */
    float *u = (float *)((unsigned *)scratch + BN_CONV_SPLIT_COUNTERS);
    float *u_lo = u + wp->lo, *v = u + wp->in, *m = u + wp->out;
    const bool vec_relu =
        !relu || (aligned16(relu->out) && relu->image % 4 == 0 && (!relu->mask || aligned16(relu->mask)));
    const bool vec = f.ow % 4 == 0 && aligned16(y) && vec_relu;
    BN_CUDA(bn_launch_early(carry_w, dim3(blocks_for((long long)f.co * cip)), dim3(WG_THREADS), 0, st, w, f.co, f.ci,
                            cip, turned, u, u_lo));
    for (int img0 = 0; img0 < n; img0 += wp->images) {
        const int images = n - img0 < wp->images ? n - img0 : wp->images;
        BN_CUDA(bn_launch_early(carry_in, dim3(blocks_for((long long)cip * cols)), dim3(WG_THREADS), 0, st, x, f,
                                img0, images, cip, cols, v));
        wg_gemm_args a = {};
        a.a = u, a.a_lo = u_lo, a.b = v, a.c = m;
        a.a_xi = (long long)f.co * cip, a.b_xi = (long long)cip * cols, a.c_xi = (long long)f.co * cols;
        a.lda = cip, a.ldb = cols, a.ldc = cols;
        a.m = f.co, a.n = cols, a.r = cip, a.r_per = cip;
        BN_CUDA(gemm(false, p->products, wp->cfg, a, st));
        BN_CUDA(bn_launch_early(carry_out, dim3(blocks_for((long long)f.co * images * tiles)), dim3(WG_THREADS), 0, st,
                                (const float *)m, f, img0, images, cols, bias, y, relu ? relu->out : (float *)NULL,
                                relu ? relu->mask : (const float *)NULL, relu ? (long long)relu->image : 0LL, vec));
    }
    return BN_OK;
}

extern "C" bn_status bn_wino_forward(const bn_wino_plan *p, int n, void *stream, const float *x, const float *w,
                                     const float *b, float *y, void *scratch, const bn_conv_relu *relu)
{
    const bn_conv_relu *r = relu && relu->out ? relu : NULL;
    return run_form(p, &p->pass[0], n, (cudaStream_t)stream, x, w, 0, b, y, scratch, r);
}

extern "C" bn_status bn_wino_backward_data(const bn_wino_plan *p, int n, void *stream, const float *dy,
                                           const float *w, float *dx, void *scratch, const bn_conv_relu *relu)
{
    const bn_conv_relu *r = relu && relu->out ? relu : NULL;
    return run_form(p, &p->pass[1], n, (cudaStream_t)stream, dy, w, 1, NULL, dx, scratch, r);
}

extern "C" bn_status bn_wino_backward_filter(const bn_wino_plan *p, int n, void *stream, const float *x,
                                             const float *dy, float *dw, float *db, void *parts)
{
    const bn_wino_pass *wp = &p->pass[2];
    if (!wp->ok) return bn_error(BN_ERR_INTERNAL, "Winograd convolution cannot run this shape: %s", wp->why);
    if (!parts) return bn_error(BN_ERR_INTERNAL, "Winograd convolution: a filter pass without partial sums");
    cudaStream_t st = (cudaStream_t)stream;
    const bn_wino_form f = wp->f;
    const int cip = wp->cip, cols = wp->cols, ldc = wp->ldc;
    float *v = (float *)parts + wp->in, *dyt = (float *)parts + wp->dy, *du = (float *)parts + wp->out;
    for (int img0 = 0; img0 < n; img0 += wp->images) {
        const int images = n - img0 < wp->images ? n - img0 : wp->images;
        BN_CUDA(bn_launch_early(carry_in, dim3(blocks_for((long long)cip * cols)), dim3(WG_THREADS), 0, st, x, f,
                                img0, images, cip, cols, v));
        BN_CUDA(bn_launch_early(carry_dy, dim3(blocks_for((long long)f.co * cols)), dim3(WG_THREADS), 0, st, dy, f,
                                img0, images, cols, dyt));
        /* Rows the filters (dU[xi][o][c]) or, turned, the channels (dU[xi][c][o]). */
        const int rows = wp->turned ? f.ci : f.co, across = wp->turned ? f.co : f.ci;
        wg_gemm_args a = {};
        a.a = wp->turned ? v : dyt, a.b = wp->turned ? dyt : v, a.c = du;
        a.a_xi = (long long)rows * cols, a.b_xi = (long long)across * cols, a.c_xi = (long long)rows * ldc;
        a.c_split = wp->slot;
        a.lda = cols, a.ldb = cols, a.ldc = ldc;
        a.m = rows, a.n = across, a.r = cols, a.r_per = wp->per;
        a.accumulate = img0 > 0;
        BN_CUDA(gemm(true, p->products, wp->cfg, a, st));
    }
    const int so = wp->turned ? 1 : ldc, sc = wp->turned ? ldc : 1;
    BN_CUDA(bn_launch_early(finish_w, dim3(blocks_for((long long)f.co * f.ci)), dim3(WG_THREADS), 0, st,
                            (const float *)du, wp->splits, wp->slot, f.co, f.ci, so, sc, wp->slot / XI, dw));
    if (!db) return BN_OK;
    return bn_conv_bias_grad_f32_on(stream, db, dy, n, f.co, f.oh * f.ow, (float *)parts + wp->bias);
}

extern "C" bn_status bn_conv_run_wino(const bn_conv_family_plan *p, const bn_conv_shape *s, int pass, void *stream,
                                      const bn_conv_io *io)
{
    const bn_wino_plan *w = &p->wino;
    if (pass == BN_CONV_FORWARD)
        return bn_wino_forward(w, s->n, stream, io->x, io->w, io->b, io->y, io->scratch, &io->relu);
    if (pass == BN_CONV_DATA)
        return bn_wino_backward_data(w, s->n, stream, io->dy, io->w, io->dx, io->scratch, &io->relu);
    return bn_wino_backward_filter(w, s->n, stream, io->x, io->dy, io->dw, io->db, io->parts);
}

BN_CODE_ANCHOR(conv_wino, carry_w) /* code_load.cu */
