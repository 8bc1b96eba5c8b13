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
 * index's terms (kA, kB, and the row/column shift of the window it reaches) in shared memory
 * once, so that filling a stage costs a table read and an add per element instead of integer
 * divisions. A B element outside the input (padding, or for the data pass a dy position off the
 * edge) is a zero.
 *
 * A block computes a BM x BN tile of C over BK-deep stages of K staged in shared memory by
 * asynchronous copies (a ring of STAGES: the next STAGES - 1 are in flight while one is used,
 * which hides the latency of the copies even with one block per multiprocessor); each
 * thread keeps a TM x TN tile of sums, read from shared memory as float4s. The sums run over K
 * in increasing order in every thread, so the results do not depend on timing. The forward pass
 * adds the bias; the data pass writes dx; the filter pass cuts K into `splits` spans and writes
 * each span's tile of partial sums (and, from the blocks of the first column tile, the sum of dy
 * per filter for the bias gradient) to the workspace, for bn_direct_finish_filter
 * (conv_direct.cu) to add in span order. */
#include <cuda_pipeline.h>
#include <limits.h>
#include <string.h>

#include "conv_family.h"
#include "conv_igemm.h"
#include "conv_igemm_limits.h"
#include "gpu/cuda_check.h"
#include "gpu/smem_opt_in.cuh"

/* Stages in the shared-memory ring: STAGES - 1 are in flight while one is used. */
#define STAGES 4
/* Extra floats per shared-memory row of a stage: A rows are written along k by consecutive
 * threads, and the padding spreads those writes over the banks. */
#define ROW_PAD 4

enum { PASS_FWD, PASS_DATA, PASS_FILTER };

/* One summed index k: A offset, B offset, and the window shift (y in the low 16 bits, x in the
 * high 16, both signed). */
typedef int4 k_entry;

typedef struct ig_args {
    const float *a, *b;
    float *out;
    const float *bias;   /* forward: per filter, or NULL */
    int M, N, K;
    int span;            /* K per block (the filter pass's splits), else K */
    int n, c, h, w, f, k, stride, pad, oh, ow;
} ig_args;

static __device__ __forceinline__ int pack_yx(int y, int x) { return (y & 0xffff) | (x << 16); }
static __device__ __forceinline__ int unpack_y(int v) { return (int)(short)(v & 0xffff); }
static __device__ __forceinline__ int unpack_x(int v) { return v >> 16; }

/* The table entry of summed index k for pass P. */
template <int P>
static __device__ k_entry k_term(const ig_args &g, int k)
{
    const int kk = g.k * g.k;
    k_entry e;
    e.w = 0;
    if (P == PASS_FWD) { /* k = (channel, tap): A = w[m][k]; B = x[img][ch][iy][ix] */
        int ch = k / kk, tap = k - ch * kk, ky = tap / g.k, kx = tap - ky * g.k;
        e.x = k;
        e.y = ch * g.h * g.w + ky * g.w + kx;
        e.z = pack_yx(ky, kx);
    } else if (P == PASS_DATA) { /* k = (filter, tap): A = w[f][m][tap]; B = dy[img][f][y+pad-ky][x+pad-kx] */
        int fi = k / kk, tap = k - fi * kk, ky = tap / g.k, kx = tap - ky * g.k;
        e.x = fi * g.c * kk + tap;
        e.y = fi * g.oh * g.ow - ky * g.ow - kx;
        e.z = pack_yx(-ky, -kx);
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
static __device__ void col_term(const ig_args &g, int j, int &off, int &jy, int &jx)
{
    if (P == PASS_FWD) {
        int np = g.oh * g.ow, img = j / np, pos = j - img * np, oy = pos / g.ow, ox = pos - oy * g.ow;
        jy = oy * g.stride - g.pad, jx = ox * g.stride - g.pad;
        off = img * g.c * g.h * g.w + jy * g.w + jx;
    } else if (P == PASS_DATA) {
        int hw = g.h * g.w, img = j / hw, q = j - img * hw, y = q / g.w, x = q - y * g.w;
        jy = y + g.pad, jx = x + g.pad;
        off = img * g.f * g.oh * g.ow + jy * g.ow + jx;
    } else {
        int kk = g.k * g.k, ch = j / kk, tap = j - ch * kk, ky = tap / g.k, kx = tap - ky * g.k;
        jy = ky, jx = kx;
        off = ch * g.h * g.w + ky * g.w + kx;
    }
}

/* CHECK: B reads need the window bounds test (padding, or any data pass). */
template <int P, int BM, int BN, int TM, int TN, bool CHECK>
static __global__ void __launch_bounds__((BM / TM) * (BN / TN)) igemm(ig_args g)
{
    constexpr int CT = BN / TN, NT = (BM / TM) * CT;
    constexpr int LA = BM * BK / NT, LB = BN * BK / NT; /* elements a thread copies per stage */
    constexpr int JB = BN > NT ? BN / NT : 1;           /* distinct B columns a thread copies */
    static_assert(BM * BK % NT == 0 && BN * BK % NT == 0, "stages must split evenly");
    static_assert(NT % BK == 0, "a thread copies A at one k");
    static_assert(BN % NT == 0 || NT % BN == 0, "a thread copies B at fixed columns");
    static_assert(TM == 4 && TN == 4, "float4 reads of the thread tiles");
    constexpr int SA = BM + ROW_PAD, SB = BN + ROW_PAD;

    extern __shared__ float4 smem4[];
    k_entry *tab = (k_entry *)smem4;
    float *As = (float *)(tab + TABLE_MAX); /* [STAGES][BK][SA] */
    float *Bs = As + STAGES * BK * SA;      /* [STAGES][BK][SB] */

    const int tid = threadIdx.x, tc = tid % CT, tr = tid / CT;
    const int col0 = blockIdx.x * BN, row0 = blockIdx.y * BM;
    const int kb = blockIdx.z * g.span, ke = min(g.K, kb + g.span), klen = ke - kb;
    const int ly = P == PASS_DATA ? g.oh : g.h, lx = P == PASS_DATA ? g.ow : g.w;

    for (int t = tid; t < klen; t += NT) tab[t] = k_term<P>(g, kb + t);

    /* A: this thread's k offset in a stage and its LA rows. */
    const int ka = tid % BK;
    int arow[LA];
    const int a_stride = P == PASS_FWD ? g.K : P == PASS_DATA ? g.k * g.k : g.oh * g.ow;
#pragma unroll
    for (int i = 0; i < LA; i++) {
        int m = row0 + tid / BK + i * (NT / BK);
        arow[i] = m < g.M ? m * a_stride : -1;
    }
    /* B: this thread's JB columns (an offset may be negative: a window starting in the padding). */
    int boff[JB], bjy[JB], bjx[JB];
    bool bval[JB];
#pragma unroll
    for (int i = 0; i < JB; i++) {
        int j = col0 + (tid + i * NT) % BN;
        bval[i] = j < g.N;
        if (bval[i]) col_term<P>(g, j, boff[i], bjy[i], bjx[i]);
        else boff[i] = 0, bjy[i] = 0, bjx[i] = 0;
    }
    __syncthreads();

    auto stage = [&](int buf, int k0) {
        float *as = As + buf * BK * SA, *bs = Bs + buf * BK * SB;
        const int kl = k0 - kb;
#pragma unroll
        for (int i = 0; i < LA; i++) {
            const int m = tid / BK + i * (NT / BK);
            const bool live = arow[i] >= 0 && k0 + ka < ke;
            const float *src = live ? g.a + arow[i] + tab[kl + ka].x : g.a;
            __pipeline_memcpy_async(as + ka * SA + m, src, sizeof(float), live ? 0 : sizeof(float));
        }
#pragma unroll
        for (int i = 0; i < LB; i++) {
            const int e = tid + i * NT, j = e % BN, r = e / BN, c = i % JB;
            bool live = bval[c] && k0 + r < ke;
            const k_entry t = tab[live ? kl + r : 0];
            if (CHECK) {
                const int iy = bjy[c] + unpack_y(t.z), ix = bjx[c] + unpack_x(t.z);
                live = live && iy >= 0 && iy < ly && ix >= 0 && ix < lx;
            }
            const float *src = live ? g.b + boff[c] + t.y : g.b;
            __pipeline_memcpy_async(bs + r * SB + j, src, sizeof(float), live ? 0 : sizeof(float));
        }
    };

    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; i++)
#pragma unroll
        for (int j = 0; j < TN; j++) acc[i][j] = 0.0f;
    /* The filter pass's first column tile also sums dy (its A) per filter, for the bias. */
    const bool bias_rows = P == PASS_FILTER && blockIdx.x == 0 && tid < BM;
    float bsum = 0.0f;

    const int stages = (klen + BK - 1) / BK;
#pragma unroll
    for (int s = 0; s < STAGES - 1; s++) {
        if (s < stages) stage(s, kb + s * BK);
        __pipeline_commit();
    }
    for (int s = 0; s < stages; s++) {
        /* Stage s has landed (at most STAGES - 2 later groups pending) and every thread is done
         * with stage s - 1, whose slot the copies issued next reuse. */
        __pipeline_wait_prior(STAGES - 2);
        __syncthreads();
        if (s + STAGES - 1 < stages) stage((s + STAGES - 1) % STAGES, kb + (s + STAGES - 1) * BK);
        __pipeline_commit();
        const int buf = s % STAGES;
        const float *as = As + buf * BK * SA, *bs = Bs + buf * BK * SB;
#pragma unroll
        for (int q = 0; q < BK; q++) {
            const float4 av = *(const float4 *)(as + q * SA + tr * TM);
            const float4 bv = *(const float4 *)(bs + q * SB + tc * TN);
            const float ar[4] = {av.x, av.y, av.z, av.w}, br[4] = {bv.x, bv.y, bv.z, bv.w};
#pragma unroll
            for (int i = 0; i < TM; i++)
#pragma unroll
                for (int j = 0; j < TN; j++) acc[i][j] = fmaf(ar[i], br[j], acc[i][j]);
        }
        if (bias_rows)
#pragma unroll
            for (int q = 0; q < BK; q++) bsum += as[q * SA + tid];
    }

    if (P == PASS_FILTER) {
        /* This span's partials: M x N for dw, then M for db. */
        float *out = g.out + (size_t)blockIdx.z * g.M * (g.N + 1);
        if (bias_rows && row0 + tid < g.M) out[(size_t)g.M * g.N + row0 + tid] = bsum;
#pragma unroll
        for (int i = 0; i < TM; i++) {
            const int m = row0 + tr * TM + i;
            if (m >= g.M) continue;
#pragma unroll
            for (int j = 0; j < TN; j++) {
                const int col = col0 + tc * TN + j;
                if (col < g.N) out[(size_t)m * g.N + col] = acc[i][j];
            }
        }
        return;
    }
    /* Forward and data: C (m, j) is out[img][m][q] with j = (img, q). */
    const int q_count = P == PASS_FWD ? g.oh * g.ow : g.h * g.w;
#pragma unroll
    for (int j = 0; j < TN; j++) {
        const int col = col0 + tc * TN + j;
        if (col >= g.N) continue;
        const int img = col / q_count, q = col - img * q_count;
        float *o = g.out + (size_t)img * g.M * q_count + q;
#pragma unroll
        for (int i = 0; i < TM; i++) {
            const int m = row0 + tr * TM + i;
            if (m < g.M) o[(size_t)m * q_count] = acc[i][j] + (P == PASS_FWD && g.bias ? g.bias[m] : 0.0f);
        }
    }
}

static size_t ig_smem(int cfg)
{
    return TABLE_MAX * sizeof(k_entry) +
           (size_t)STAGES * BK * ((ig_tiles[cfg][0] + ROW_PAD) + (ig_tiles[cfg][1] + ROW_PAD)) * sizeof(float);
}

/* Launches one kernel; the first launch of each opts it in to the shared memory it takes
 * (more than the 48 KiB a kernel gets without asking). */
template <int P, int BM, int BN, bool CHECK>
static cudaError_t launch_one(const ig_args &a, dim3 grid, size_t smem, cudaStream_t st)
{
    static bool opted;
    cudaError_t e = bn_smem_opt_in(igemm<P, BM, BN, 4, 4, CHECK>, &opted, smem);
    if (e != cudaSuccess) return e;
    igemm<P, BM, BN, 4, 4, CHECK><<<grid, (BM / 4) * (BN / 4), smem, st>>>(a);
    return cudaSuccess;
}

template <int P, bool CHECK>
static cudaError_t launch_cfg(int cfg, const ig_args &a, dim3 grid, size_t smem, cudaStream_t st)
{
    switch (cfg) {
    case 0: return launch_one<P, 64, 64, CHECK>(a, grid, smem, st);
    case 1: return launch_one<P, 64, 32, CHECK>(a, grid, smem, st);
    case 2: return launch_one<P, 32, 64, CHECK>(a, grid, smem, st);
    default: return launch_one<P, 32, 32, CHECK>(a, grid, smem, st);
    }
}

static bn_status ig_launch(int pass, const bn_igemm_pass *ip, const bn_conv_geom *g, int filters, int n,
                           cudaStream_t st, const float *a, const float *b, const float *bias, float *out)
{
    if (!ip->ok) return bn_error(BN_ERR_INTERNAL, "implicit-GEMM convolution cannot run this shape");
    ig_args x;
    x.a = a, x.b = b, x.out = out, x.bias = bias;
    x.M = ip->M, x.N = ip->N, x.K = ip->K, x.span = ip->span;
    x.n = n, x.c = g->c, x.h = g->h, x.w = g->w, x.f = filters, x.k = g->k, x.stride = g->stride, x.pad = g->pad;
    x.oh = g->oh, x.ow = g->ow;
    const int bm = ig_tiles[ip->cfg][0], bn = ig_tiles[ip->cfg][1];
    dim3 grid((ip->N + bn - 1) / bn, (ip->M + bm - 1) / bm, ip->splits);
    const size_t smem = ig_smem(ip->cfg);
    const bool pad = g->pad != 0;
    cudaError_t e;
    if (pass == PASS_FWD)
        e = pad ? launch_cfg<PASS_FWD, true>(ip->cfg, x, grid, smem, st)
                : launch_cfg<PASS_FWD, false>(ip->cfg, x, grid, smem, st);
    else if (pass == PASS_DATA)
        e = launch_cfg<PASS_DATA, true>(ip->cfg, x, grid, smem, st);
    else
        e = pad ? launch_cfg<PASS_FILTER, true>(ip->cfg, x, grid, smem, st)
                : launch_cfg<PASS_FILTER, false>(ip->cfg, x, grid, smem, st);
    BN_CUDA(e);
    BN_CUDA_LAUNCH();
    return BN_OK;
}

extern "C" bn_status bn_igemm_forward(const bn_igemm_plan *p, const bn_conv_geom *g, int filters, int n, void *stream,
                                      const float *x, const float *w, const float *b, float *y)
{
    return ig_launch(PASS_FWD, &p->pass[0], g, filters, n, (cudaStream_t)stream, w, x, b, y);
}

extern "C" bn_status bn_igemm_backward_data(const bn_igemm_plan *p, const bn_conv_geom *g, int filters, int n,
                                            void *stream, const float *dy, const float *w, float *dx)
{
    return ig_launch(PASS_DATA, &p->pass[1], g, filters, n, (cudaStream_t)stream, w, dy, NULL, dx);
}

extern "C" bn_status bn_igemm_backward_filter_parts(const bn_igemm_plan *p, const bn_conv_geom *g, int filters, int n,
                                                    void *stream, const float *x, const float *dy, float *parts)
{
    return ig_launch(PASS_FILTER, &p->pass[2], g, filters, n, (cudaStream_t)stream, dy, x, NULL, parts);
}

extern "C" bn_status bn_conv_run_igemm(const bn_conv_family_plan *p, const bn_conv_shape *s, int pass, void *stream,
                                       const bn_conv_io *io)
{
    const bn_igemm_plan *ig = &p->igemm;
    if (pass == BN_CONV_FORWARD)
        return bn_igemm_forward(ig, &s->g, s->filters, s->n, stream, io->x, io->w, io->b, io->y);
    if (pass == BN_CONV_DATA)
        return bn_igemm_backward_data(ig, &s->g, s->filters, s->n, stream, io->dy, io->w, io->dx);
    const bn_igemm_pass *f = &ig->pass[2];
    BN_TRY(bn_igemm_backward_filter_parts(ig, &s->g, s->filters, s->n, stream, io->x, io->dy, io->parts));
    return bn_direct_finish_filter(stream, io->parts, f->splits, f->M, f->N, io->dw, io->db);
}
