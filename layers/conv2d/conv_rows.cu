/* conv_rows.cu - the conv2d layer's row-tiled kernels (see conv_rows.h).
 *
 * Convolution kernel. A block owns ct output channels of `images` whole images. It stages the
 * zero-padded input planes of a chunk of input channels in shared memory (16-byte copies where
 * rows and border are multiples of 4 floats) and the chunk's weights as [channel][tap][ct].
 * A thread owns 4 neighbouring outputs of one row: for every window row it loads the 4 + k - 1
 * input values that its outputs' windows cover once, then for each of the k taps of that row
 * the ct weights (the same for every thread of a warp: a broadcast), and does 4 x ct
 * multiply-adds per tap. With `split` thread groups the input channels are dealt out in turn
 * and the groups' sums are added in group order through shared memory at the end. For a 2x2
 * max pooling after the layer (conv_pooled.h) every output of the block goes to shared memory
 * that way, biased, and the block writes each window's maximum and its cell instead.
 *
 * Filter kernel. dW[o][c][ky][kx] = sum over images and outputs (y, x) of
 * dy[o][y][x] * xpad[c][y + ky][x + kx]. A thread owns one input channel c and window row ky
 * for ct filters, keeping ct x k sums; for each piece of 4 outputs (y, x..x+3) it loads the
 * 4 + k - 1 values of xpad's row y + ky and, per filter, the 4 dy values (a broadcast), and does
 * 4 x k multiply-adds per filter. `lanes` neighbouring threads share (c, ky) and take the pieces
 * of a span of images in turn; their sums are combined by a fixed shuffle tree and written as
 * the span's partial sums, which bn_direct_finish_filter adds in span order. The bias gradient
 * (the sum of dy per filter) rides along in the thread of channel 0, window row 0. Through a
 * max pooling (conv_pooled.h) the staged dy planes are expanded from the pooled gradient and
 * its argmax mask instead of copied. */
#include <cuda_pipeline.h>
#include <stdint.h>
#include <string.h>

#include "conv_direct.h"
#include "conv_family.h"
#include "conv_rows.h"
#include "conv_rows_limits.h"
#include "conv_stage.cuh"
#include "gpu/code_anchor.cuh"
#include "gpu/cuda_check.h"
#include "gpu/pdl.cuh"
#include "gpu/smem_opt_in.cuh"

static __host__ __device__ int round4i(int v)
{
    return (v + 3) & ~3;
}

/* n consecutive floats from shared memory (16-byte aligned when n is a multiple of 4, else
 * 8-byte aligned and n even). */
template <int N>
static __device__ __forceinline__ void load_vec(float (&v)[N], const float *p)
{
    if constexpr (N % 4 == 0) {
#pragma unroll
        for (int i = 0; i < N / 4; i++) {
            const float4 q = ((const float4 *)p)[i];
            v[4 * i] = q.x, v[4 * i + 1] = q.y, v[4 * i + 2] = q.z, v[4 * i + 3] = q.w;
        }
    } else {
        static_assert(N % 2 == 0, "tiles are 4, 8 or 10 wide");
#pragma unroll
        for (int i = 0; i < N / 2; i++) {
            const float2 q = ((const float2 *)p)[i];
            v[2 * i] = q.x, v[2 * i + 1] = q.y;
        }
    }
}

typedef struct conv_args {
    bn_rows_conv s;
    int n;
    bool vec;
    const float *in, *w, *bias;
    float *out;
    bn_pooled_out po; /* po.y set: the 2x2 max pooling's output and mask instead of out */
} conv_args;

/* The pooled epilogue: the block's outputs, biased, lie in shared memory as
 * [channel][image][cell][PX]; writes each 2x2 window's maximum and its cell. */
template <int CT>
static __device__ void pool_outputs(const conv_args &a, const float *outs, int o0, int n0, int live)
{
    const bn_rows_conv &s = a.s;
    const int pcells = a.po.ph * a.po.pw, per = s.cells * s.images, row = s.segs * PX;
    for (int e = threadIdx.x; e < s.images * pcells; e += blockDim.x) {
        const int im = e / pcells, pc = e - im * pcells, py = pc / a.po.pw, px = pc - py * a.po.pw;
        if (im >= live) continue;
        /* The window's top-left output: row 2 py, column 2 px, of one row piece (PX is even). */
        const float *q = outs + (size_t)(im * s.cells + 2 * py * s.segs) * PX + 2 * px;
        const size_t at = ((size_t)(n0 + im) * s.co + o0) * pcells + pc;
#pragma unroll
        for (int j = 0; j < CT; j++) {
            if (o0 + j >= s.co) break;
            const float *w = q + (size_t)j * per * PX;
            int cell;
            a.po.y[at + (size_t)j * pcells] = bn_window_max2(w[0], w[1], w[row], w[row + 1], &cell);
            a.po.mask[at + (size_t)j * pcells] = (unsigned char)cell;
        }
    }
}

template <int CT, int K>
static __global__ void __launch_bounds__(512) rows_conv(conv_args a)
{
    bn_early_entry(); /* pdl.cuh */
    extern __shared__ float4 smem4[];
    float *smem = (float *)smem4;
    const bn_rows_conv &s = a.s;
    constexpr int KK = K * K, RW = (PX + K - 1 + 3) / 4 * 4;
    const int plane = s.hp * s.wp, per = s.cells * s.images;
    float *sx = smem;                                         /* [image][chunk][hp][wp] */
    float *sw = smem + round4i(s.images * s.chunk * plane);   /* [chunk][tap][CT] */
    const int t = threadIdx.x % per, grp = threadIdx.x / per;
    const int im = t / s.cells, cell = t - im * s.cells;
    const int oy = cell / s.segs, ox = (cell - oy * s.segs) * PX;
    const int o0 = blockIdx.x * CT, n0 = blockIdx.y * s.images;
    const int live = min(s.images, a.n - n0);

    float acc[CT][PX];
#pragma unroll
    for (int j = 0; j < CT; j++)
#pragma unroll
        for (int p = 0; p < PX; p++) acc[j][p] = 0.0f;

    for (int c0 = 0; c0 < s.ci; c0 += s.chunk) {
        const int cc = min(s.chunk, s.ci - c0);
        __syncthreads(); /* the previous chunk is no longer read */
        for (int i = 0; i < s.images; i++)
            stage_planes(sx + i * s.chunk * plane, a.in + ((size_t)(n0 + i) * s.ci + c0) * s.hi * s.wi, cc,
                         i < live ? cc : 0, s.hi, s.wi, s.pad, s.hp, s.wp, a.vec);
        /* Weights: consecutive threads copy consecutive taps of one output channel. */
        const int span = cc * KK;
        for (int j = 0; j < CT; j++) {
            const int o = o0 + j;
            for (int e = threadIdx.x; e < span; e += blockDim.x) {
                float *d = sw + e * CT + j;
                if (o >= s.co) {
                    *d = 0.0f;
                } else if (!s.flip) {
                    __pipeline_memcpy_async(d, a.w + ((size_t)o * s.ci + c0) * KK + e, 4);
                } else {
                    const int c = e / KK, tap = e - c * KK;
                    __pipeline_memcpy_async(d, a.w + ((size_t)(c0 + c) * s.co + o) * KK + (KK - 1 - tap), 4);
                }
            }
        }
        __pipeline_commit();
        __pipeline_wait_prior(0);
        __syncthreads();
        for (int c = grp; c < cc; c += s.split) {
            const float *xr = sx + (im * s.chunk + c) * plane + oy * s.wp + ox;
            const float *wc = sw + c * KK * CT;
#pragma unroll
            for (int ky = 0; ky < K; ky++) {
                float r[RW];
                load_vec<RW>(r, xr + ky * s.wp);
#pragma unroll
                for (int kx = 0; kx < K; kx++) {
                    float wv[CT];
                    load_vec<CT>(wv, wc + (ky * K + kx) * CT);
#pragma unroll
                    for (int j = 0; j < CT; j++)
#pragma unroll
                        for (int p = 0; p < PX; p++) acc[j][p] = fmaf(r[p + kx], wv[j], acc[j][p]);
                }
            }
        }
    }

    const int npos = s.ho * s.wo;
    if (a.po.y) {
        /* Every output, biased, to shared memory as [channel][thread][PX] (the groups' sums
         * added in group order as below, in group 0's place), then the windows' maxima. */
        const int outs = CT * per * PX;
        __syncthreads(); /* the staged planes are no longer read */
#pragma unroll
        for (int j = 0; j < CT; j++) {
            const float b = a.bias && o0 + j < s.co ? a.bias[o0 + j] : 0.0f;
            float *d = smem + (size_t)grp * outs + (j * per + t) * PX;
            if (s.split == 1)
                *(float4 *)d = make_float4(acc[j][0] + b, acc[j][1] + b, acc[j][2] + b, acc[j][3] + b);
            else
                *(float4 *)d = make_float4(acc[j][0], acc[j][1], acc[j][2], acc[j][3]);
        }
        __syncthreads();
        if (s.split > 1) {
            for (int e = threadIdx.x; e < outs; e += blockDim.x) {
                const int o = o0 + e / (PX * per);
                float v = smem[e];
                for (int g = 1; g < s.split; g++) v += smem[(size_t)g * outs + e];
                smem[e] = v + (a.bias && o < s.co ? a.bias[o] : 0.0f);
            }
            __syncthreads();
        }
        pool_outputs<CT>(a, smem, o0, n0, live);
        return;
    }
    if (s.split == 1) {
        if (im >= live) return;
        const int x_end = min(PX, s.wo - ox);
#pragma unroll
        for (int j = 0; j < CT; j++) {
            const int o = o0 + j;
            if (o >= s.co) break;
            const float b = a.bias ? a.bias[o] : 0.0f;
            float *y = a.out + ((size_t)(n0 + im) * s.co + o) * npos + oy * s.wo + ox;
#pragma unroll
            for (int p = 0; p < PX; p++)
                if (p < x_end) y[p] = acc[j][p] + b;
        }
        return;
    }
    /* Every group's sums to shared memory as [group][channel][thread][4]; then all threads add
     * them up, group by group, and write consecutive outputs. */
    __syncthreads();
    const int outs = CT * per * PX;
#pragma unroll
    for (int j = 0; j < CT; j++)
        *(float4 *)(smem + (size_t)grp * outs + (j * per + t) * PX) =
            make_float4(acc[j][0], acc[j][1], acc[j][2], acc[j][3]);
    __syncthreads();
    for (int e = threadIdx.x; e < outs; e += blockDim.x) {
        const int p = e % PX, tt = (e / PX) % per, j = e / (PX * per);
        const int ei = tt / s.cells, ec = tt - ei * s.cells, ey = ec / s.segs, ex = (ec - ey * s.segs) * PX + p;
        const int o = o0 + j;
        if (ei >= live || o >= s.co || ex >= s.wo) continue;
        float v = smem[e];
        for (int g = 1; g < s.split; g++) v += smem[(size_t)g * outs + e];
        a.out[((size_t)(n0 + ei) * s.co + o) * npos + ey * s.wo + ex] = v + (a.bias ? a.bias[o] : 0.0f);
    }
}

typedef struct filter_args {
    bn_rows_filter s;
    int n, ci, hi, wi, pad, co, ho, wo;
    bool vec_x, vec_dy;
    bn_pooled_dy pd;  /* pd.dy set: dy given through a max pooling */
    const float *x, *dy;
    float *part;
} filter_args;

template <int CT, int K>
static __global__ void __launch_bounds__(512) rows_filter(filter_args a)
{
    bn_early_entry(); /* pdl.cuh */
    extern __shared__ float4 smem4[];
    float *smem = (float *)smem4;
    const bn_rows_filter &s = a.s;
    constexpr int KK = K * K, RW = (PX + K - 1 + 3) / 4 * 4;
    const int xplane = s.hp * s.wp, dplane = a.ho * s.dwp;
    float *sx = smem;                                        /* [image][cb][hp][wp] */
    float *sd = smem + s.chunk * s.cb * xplane;              /* [image][CT][ho][dwp] */
    const int r = threadIdx.x % s.lanes, ck = threadIdx.x / s.lanes;
    const int cl = ck / K, ky = ck - cl * K;
    const int o0 = blockIdx.x * CT, z = blockIdx.y, c0 = blockIdx.z * s.cb;
    const int cc = min(s.cb, a.ci - c0);
    const bool live = cl < cc;
    const int i_begin = z * s.span, i_end = min(i_begin + s.span, a.n);
    const int pieces = a.ho * s.segs;

    float acc[CT][K], accb[CT];
#pragma unroll
    for (int j = 0; j < CT; j++) {
        accb[j] = 0.0f;
#pragma unroll
        for (int kx = 0; kx < K; kx++) acc[j][kx] = 0.0f;
    }
    /* Through a pooling, dy's planes are expanded into the staged ones cell by cell; the filters
     * past the layer's and the columns past ow stay the zeros written here. */
    if (a.pd.dy)
        for (int e = threadIdx.x; e < s.chunk * CT * dplane; e += blockDim.x) sd[e] = 0.0f;
    const int pp = a.pd.ph * a.pd.pw;

    for (int i0 = i_begin; i0 < i_end; i0 += s.chunk) {
        const int ni = min(s.chunk, i_end - i0);
        __syncthreads(); /* the previous images are no longer read */
        for (int i = 0; i < ni; i++) {
            stage_planes(sx + i * s.cb * xplane, a.x + ((size_t)(i0 + i) * a.ci + c0) * a.hi * a.wi, cc, cc, a.hi,
                         a.wi, a.pad, s.hp, s.wp, a.vec_x);
            if (a.pd.dy) {
                const size_t at = ((size_t)(i0 + i) * a.co + o0) * pp;
                /* One window a thread: four a thread were measured in the tensor-core passes only. By
                 * divisions, not digits: the digits took this kernel's registers past its plan's
                 * table (conv_stage.cuh's expand_pooled). */
                expand_pooled<false>(sd + i * CT * dplane, dplane, s.dwp, a.pd.dy + at, a.pd.mask + at,
                                     min(CT, a.co - o0), a.ho, a.wo, a.pd.ph, a.pd.pw, false);
            } else {
                stage_planes(sd + i * CT * dplane, a.dy + ((size_t)(i0 + i) * a.co + o0) * a.ho * a.wo, CT,
                             min(CT, a.co - o0), a.ho, a.wo, 0, a.ho, s.dwp, a.vec_dy);
            }
        }
        __pipeline_commit();
        __pipeline_wait_prior(0);
        __syncthreads();
        if (!live) continue;
        for (int st = r; st < ni * pieces; st += s.lanes) {
            const int i = st / pieces, rem = st - i * pieces, y = rem / s.segs, x0 = (rem - y * s.segs) * PX;
            float xv[RW];
            load_vec<RW>(xv, sx + ((i * s.cb + cl) * s.hp + y + ky) * s.wp + x0);
            const float *d = sd + (i * CT * a.ho + y) * s.dwp + x0;
#pragma unroll
            for (int j = 0; j < CT; j++) {
                const float4 dv = *(const float4 *)(d + j * dplane);
#pragma unroll
                for (int kx = 0; kx < K; kx++) {
                    float v = acc[j][kx];
                    v = fmaf(dv.x, xv[kx], v);
                    v = fmaf(dv.y, xv[kx + 1], v);
                    v = fmaf(dv.z, xv[kx + 2], v);
                    v = fmaf(dv.w, xv[kx + 3], v);
                    acc[j][kx] = v;
                }
                if (ck == 0) accb[j] += (dv.x + dv.y) + (dv.z + dv.w);
            }
        }
    }
    /* The lanes' sums, combined by a fixed tree into lane 0 of each group of lanes. */
    for (int off = s.lanes / 2; off > 0; off /= 2) {
#pragma unroll
        for (int j = 0; j < CT; j++) {
#pragma unroll
            for (int kx = 0; kx < K; kx++) acc[j][kx] += __shfl_down_sync(0xffffffffu, acc[j][kx], off, s.lanes);
            accb[j] += __shfl_down_sync(0xffffffffu, accb[j], off, s.lanes);
        }
    }
    if (r != 0 || !live) return;
    const int taps = a.ci * KK;
    float *part = a.part + (size_t)z * a.co * (taps + 1);
#pragma unroll
    for (int j = 0; j < CT; j++) {
        const int o = o0 + j;
        if (o >= a.co) break;
#pragma unroll
        for (int kx = 0; kx < K; kx++) part[(size_t)o * taps + (c0 + cl) * KK + ky * K + kx] = acc[j][kx];
        if (ck == 0 && blockIdx.z == 0) part[(size_t)a.co * taps + o] = accb[j];
    }
}

/* One launch of kernel `kern`, opted into SMEM_LIMIT bytes of shared memory on first use. */
template <typename Args>
static bn_status launch(void (*kern)(Args), bool *opted, dim3 grid, int threads, size_t smem, cudaStream_t st,
                        const Args &a)
{
    BN_CUDA(bn_smem_opt_in(kern, opted, SMEM_LIMIT));
    bn_launch_early(kern, grid, dim3(threads), smem, st, a);
    BN_CUDA_LAUNCH();
    return BN_OK;
}

template <int CT, int K>
static bn_status launch_conv(dim3 grid, int threads, size_t smem, cudaStream_t st, const conv_args &a)
{
    static bool opted;
    return launch(rows_conv<CT, K>, &opted, grid, threads, smem, st, a);
}

template <int CT, int K>
static bn_status launch_filter(dim3 grid, int threads, size_t smem, cudaStream_t st, const filter_args &a)
{
    static bool opted;
    return launch(rows_filter<CT, K>, &opted, grid, threads, smem, st, a);
}

/* Calls F<ct, k>(args...) for the plan's tile width and window. */
#define ROWS_DISPATCH(F, ct, k, ...)                                                                                \
    switch ((ct) * 8 + (k)) {                                                                                        \
    case 4 * 8 + 1: return F<4, 1>(__VA_ARGS__);                                                                     \
    case 4 * 8 + 3: return F<4, 3>(__VA_ARGS__);                                                                     \
    case 4 * 8 + 5: return F<4, 5>(__VA_ARGS__);                                                                     \
    case 4 * 8 + 7: return F<4, 7>(__VA_ARGS__);                                                                     \
    case 8 * 8 + 1: return F<8, 1>(__VA_ARGS__);                                                                     \
    case 8 * 8 + 3: return F<8, 3>(__VA_ARGS__);                                                                     \
    case 8 * 8 + 5: return F<8, 5>(__VA_ARGS__);                                                                     \
    case 8 * 8 + 7: return F<8, 7>(__VA_ARGS__);                                                                     \
    case 10 * 8 + 1: return F<10, 1>(__VA_ARGS__);                                                                   \
    case 10 * 8 + 3: return F<10, 3>(__VA_ARGS__);                                                                   \
    case 10 * 8 + 5: return F<10, 5>(__VA_ARGS__);                                                                   \
    case 10 * 8 + 7: return F<10, 7>(__VA_ARGS__);                                                                   \
    default: return bn_error(BN_ERR_INTERNAL, "row-tiled convolution: no kernel for %d channels, window %d", ct, k); \
    }

template <int CT, int K>
static bn_status filter_registers(int *regs)
{
    cudaFuncAttributes at;
    BN_CUDA(cudaFuncGetAttributes(&at, rows_filter<CT, K>));
    *regs = at.numRegs;
    return BN_OK;
}

extern "C" bn_status bn_rows_filter_registers(int ct, int k, int *regs)
{
    *regs = 0;
    ROWS_DISPATCH(filter_registers, ct, k, regs);
}

static bool aligned16(const void *p)
{
    return ((uintptr_t)p & 15) == 0;
}

static bn_status run_conv(const bn_rows_conv *s, int n, cudaStream_t st, const float *in, const float *w,
                          const float *bias, float *out, const bn_pooled_out *po)
{
    conv_args a = {*s, n, aligned16(in) && s->wi % 4 == 0 && s->pad % 4 == 0, in, w, bias, out, {}};
    if (po) a.po = *po;
    dim3 grid(s->groups, (n + s->images - 1) / s->images);
    ROWS_DISPATCH(launch_conv, s->ct, s->k, grid, s->threads, po ? s->pool_smem : s->smem, st, a)
}

extern "C" bn_status bn_rows_forward(const bn_rows_plan *p, void *stream, const float *x, const float *w,
                                     const float *b, float *y, const bn_pooled_out *pooled)
{
    if (!p->fwd_ok) return bn_error(BN_ERR_INTERNAL, "row-tiled convolution cannot run this forward shape");
    if (pooled && !bn_rows_pools(p))
        return bn_error(BN_ERR_INTERNAL, "row-tiled convolution cannot write this forward shape's pooled output");
    return run_conv(&p->fwd, p->n, (cudaStream_t)stream, x, w, b, y, pooled);
}

extern "C" bn_status bn_rows_backward_data(const bn_rows_plan *p, void *stream, const float *dy, const float *w,
                                           float *dx)
{
    if (!p->data_ok) return bn_error(BN_ERR_INTERNAL, "row-tiled convolution cannot run this backward-data shape");
    return run_conv(&p->data, p->n, (cudaStream_t)stream, dy, w, NULL, dx, NULL);
}

static bn_status run_filter(const bn_rows_plan *p, cudaStream_t st, const float *x, const float *dy,
                            const bn_pooled_dy *pooled, float *parts)
{
    const bn_rows_filter *f = &p->filter;
    const bn_conv_geom *g = &p->g;
    filter_args a;
    a.s = *f;
    a.n = p->n, a.ci = g->c, a.hi = g->h, a.wi = g->w, a.pad = g->pad, a.co = p->filters, a.ho = g->oh, a.wo = g->ow;
    a.vec_x = aligned16(x) && g->w % 4 == 0 && g->pad % 4 == 0;
    a.vec_dy = aligned16(dy) && g->ow % 4 == 0;
    a.x = x, a.dy = dy, a.part = parts;
    if (pooled) a.pd = *pooled;
    else memset(&a.pd, 0, sizeof a.pd);
    dim3 grid(f->groups, f->spans, f->cgroups);
    ROWS_DISPATCH(launch_filter, f->ct, g->k, grid, f->threads, f->smem, st, a)
}

extern "C" bn_status bn_rows_backward_filter(const bn_rows_plan *p, void *stream, const float *x, const float *dy,
                                             const bn_pooled_dy *pooled, float *dw, float *db, float *workspace)
{
    if (!p->filter_ok) return bn_error(BN_ERR_INTERNAL, "row-tiled convolution cannot run this backward-filter shape");
    BN_TRY(run_filter(p, (cudaStream_t)stream, x, dy, pooled, workspace));
    return bn_direct_finish_filter(stream, workspace, p->filter.spans, p->filters, p->g.c * p->g.k * p->g.k, dw, db);
}

extern "C" bn_status bn_conv_run_rows(const bn_conv_family_plan *p, const bn_conv_shape *s, int pass, void *stream,
                                      const bn_conv_io *io)
{
    const bn_rows_plan *r = &p->rows;
    if (pass == BN_CONV_FORWARD) return bn_rows_forward(r, stream, io->x, io->w, io->b, io->y, io->pooled_out);
    if (pass == BN_CONV_DATA) return bn_rows_backward_data(r, stream, io->dy, io->w, io->dx);
    return bn_rows_backward_filter(r, stream, io->x, io->dy, io->pooled_dy, io->dw, io->db, io->parts);
}

BN_CODE_ANCHOR(conv_rows, rows_filter<10, 5>) /* code_load.cu */
