/* conv_direct.cu - the conv2d layer's own kernels (see conv_direct.h).
 *
 * Direct kernel. A block owns kt output channels of `images` whole images (or one tile of
 * positions of one image when an image has more positions than a block). It copies the
 * zero-padded input windows of a chunk of input channels into shared memory, and the chunk's
 * weights as [channel][tap][kt], so that every thread reads the same kt weights at once (a
 * broadcast) and its own PT input values, and does PT x kt multiply-adds per tap. Shared memory
 * is filled with asynchronous copies (every copy of a thread in flight at once: the fills are
 * bound by memory latency, not bandwidth), each thread one cell of every plane. When the
 * reduction (input channels x taps) is long, `split` groups of threads take the input channels
 * in turn and add their partial sums through shared memory at the end, in group order. The
 * backward-data pass is the same kernel over dy padded by k-1-pad, with every weight read
 * transposed (input and output channels swapped) and rotated by 180 degrees.
 *
 * Filter kernel. dW (filters x c*k*k) is the product of dY^T with the column matrix, summed
 * over every image and output position m. Blocks take a tile of filters x taps and a span of
 * m, stage 16 values of m at a time in shared memory (dy directly, the columns gathered from
 * x; two stages, the next one copied asynchronously while the current one is used), and each
 * thread keeps a 4x4 tile of sums. Each span writes its own partial matrix; the
 * finishing kernel adds the partials in span order into dw and sums dy per filter into db. */
#include <cuda_pipeline.h>
#include <limits.h>
#include <stdint.h>
#include <string.h>

#include "conv_direct.h"
#include "conv_direct_limits.h"
#include "conv_family.h"
#include "gpu/code_anchor.cuh"
#include "gpu/cuda_check.h"
#include "gpu/pdl.cuh"
#include "gpu/vec_ops.cuh"

typedef struct direct_args {
    bn_direct_shape s;
    int n;
    const float *in, *w, *bias;
    float *out;
    float *relu_out;       /* forward: a fused ReLU's output, max(y, 0), or NULL */
    long long relu_image;  /* floats from one image of relu_out to the next */
} direct_args;

static __host__ __device__ size_t round4(size_t v) { return (v + 3) & ~(size_t)3; }

/* KT output channels per thread; K the window size when known at compile time (its taps are
 * then unrolled), 0 for any. */
template <int KT, int K>
static __global__ void __launch_bounds__(512) direct_conv(direct_args a)
{
    bn_early_entry(); /* pdl.cuh */
    extern __shared__ float4 smem4[];
    float *smem = (float *)smem4;
    const bn_direct_shape &s = a.s;
    const int k = K ? K : s.k;
    const int kk = k * k, plane = s.hp * s.wp, npos = s.ho * s.wo;
    float *sx = smem;                                                   /* [image][chunk][hp][wp] */
    float *sw = smem + round4((size_t)s.images * s.chunk * plane);      /* [chunk][tap][KT] */
    const int t = threadIdx.x % s.threads, group = threadIdx.x / s.threads;
    const int o0 = blockIdx.x * KT, n0 = blockIdx.y * s.images;
    const int q0 = blockIdx.z * s.threads * PT;                         /* first position of this tile */
    const int limit = s.images * npos;

    int base[PT], img[PT], pos[PT];
    bool valid[PT];
#pragma unroll
    for (int j = 0; j < PT; j++) {
        int q = q0 + t + j * s.threads;
        img[j] = q / npos;
        pos[j] = q - img[j] * npos;
        valid[j] = q < limit && n0 + img[j] < a.n;
        int oy = pos[j] / s.wo, ox = pos[j] - oy * s.wo;
        base[j] = valid[j] ? (img[j] * s.chunk) * plane + oy * s.stride * s.wp + ox * s.stride : 0;
    }
    float acc[PT][KT];
#pragma unroll
    for (int j = 0; j < PT; j++)
#pragma unroll
        for (int i = 0; i < KT; i++) acc[j][i] = 0.0f;

    for (int c0 = 0; c0 < s.ci; c0 += s.chunk) {
        const int cc = min(s.chunk, s.ci - c0);
        __syncthreads(); /* the previous chunk is no longer read */
        /* The windows: the block's threads along a plane, the same cell of every (image,
         * channel) plane in turn. */
        for (int e = threadIdx.x; e < plane; e += blockDim.x) {
            const int yy = e / s.wp, xx = e - yy * s.wp, iy = yy - s.pad, ix = xx - s.pad;
            const bool inside = iy >= 0 && iy < s.hi && ix >= 0 && ix < s.wi;
            for (int im = 0; im < s.images; im++) {
                const int nn = n0 + im;
                const float *src = a.in + ((size_t)nn * s.ci + c0) * s.hi * s.wi + iy * s.wi + ix;
                float *dst = sx + im * s.chunk * plane + e;
                for (int c = 0; c < cc; c++) {
                    if (inside && nn < a.n)
                        __pipeline_memcpy_async(dst + c * plane, src + (size_t)c * s.hi * s.wi, sizeof(float));
                    else
                        dst[c * plane] = 0.0f;
                }
            }
        }
        /* Weights: consecutive threads copy consecutive taps of one output channel. */
        const int span = cc * kk;
        for (int j = 0; j < KT; j++) {
            const int o = o0 + j;
            for (int ct = threadIdx.x; ct < span; ct += blockDim.x) {
                float *dst = sw + ct * KT + j;
                if (o >= s.co) {
                    *dst = 0.0f;
                } else if (!s.flip) {
                    __pipeline_memcpy_async(dst, a.w + ((size_t)o * s.ci + c0) * kk + ct, sizeof(float));
                } else {
                    int c = ct / kk, tap = ct - c * kk;
                    __pipeline_memcpy_async(dst, a.w + ((size_t)(c0 + c) * s.co + o) * kk + (kk - 1 - tap),
                                            sizeof(float));
                }
            }
        }
        __pipeline_commit();
        __pipeline_wait_prior(0);
        __syncthreads();
        for (int c = group; c < cc; c += s.split) {
            const float *xc = sx + c * plane;
            const float4 *wc = (const float4 *)(sw + c * kk * KT);
#pragma unroll
            for (int ky = 0; ky < k; ky++) {
#pragma unroll
                for (int kx = 0; kx < k; kx++) {
                    float wr[KT];
#pragma unroll
                    for (int i = 0; i < KT / 4; i++) {
                        float4 v = wc[(ky * k + kx) * (KT / 4) + i];
                        wr[4 * i] = v.x;
                        wr[4 * i + 1] = v.y;
                        wr[4 * i + 2] = v.z;
                        wr[4 * i + 3] = v.w;
                    }
                    const int off = ky * s.wp + kx;
#pragma unroll
                    for (int j = 0; j < PT; j++) {
                        float xv = xc[base[j] + off];
#pragma unroll
                        for (int i = 0; i < KT; i++) acc[j][i] = fmaf(xv, wr[i], acc[j][i]);
                    }
                }
            }
        }
    }
    if (s.split > 1) {
        __syncthreads(); /* the windows and weights are done with: reuse them for the sums */
        float *red = smem; /* [group - 1][j][i][t] */
        if (group > 0)
#pragma unroll
            for (int j = 0; j < PT; j++)
#pragma unroll
                for (int i = 0; i < KT; i++) red[(((group - 1) * PT + j) * KT + i) * s.threads + t] = acc[j][i];
        __syncthreads();
        if (group == 0)
            for (int g = 1; g < s.split; g++)
#pragma unroll
                for (int j = 0; j < PT; j++)
#pragma unroll
                    for (int i = 0; i < KT; i++) acc[j][i] += red[(((g - 1) * PT + j) * KT + i) * s.threads + t];
    }
    if (group != 0) return;
#pragma unroll
    for (int j = 0; j < PT; j++) {
        if (!valid[j]) continue;
        float *y = a.out + ((size_t)(n0 + img[j]) * s.co) * npos + pos[j];
        float *r = a.relu_out ? a.relu_out + (size_t)(n0 + img[j]) * a.relu_image + pos[j] : NULL;
#pragma unroll
        for (int i = 0; i < KT; i++) {
            int o = o0 + i;
            if (o >= s.co) continue;
            const float v = acc[j][i] + (a.bias ? a.bias[o] : 0.0f);
            y[(size_t)o * npos] = v;
            if (r) r[(size_t)o * npos] = relu_of(v);
        }
    }
}

typedef struct col_args {
    bn_col_shape s;
    const float *dy, *w;
    float *dx;
    int n, c, h, wd, k, stride, pad, oh, ow, filters;
} col_args;

/* Backward data for image blockIdx.y and input channels [blockIdx.x * ct, + ct): the column
 * gradient dcol (ct*k*k rows x oh*ow) = W^T dy in shared memory, each thread 8 rows of one
 * position, then every dx cell of those channels gathers its column cells (col2im). */
static __global__ void __launch_bounds__(512) col_dgrad(col_args a)
{
    bn_early_entry(); /* pdl.cuh */
    extern __shared__ float4 smem4[];
    float *smem = (float *)smem4;
    const bn_col_shape &s = a.s;
    const int kk = a.k * a.k, npos = a.oh * a.ow, rows = s.rows, nn = blockIdx.y, c0 = blockIdx.x * s.ct;
    const int cc = min(s.ct, a.c - c0), live_rows = cc * kk;
    float *sdy = smem;                                  /* [filter][position] */
    float *sw = sdy + round4((size_t)a.filters * npos); /* [filter][row] */
    float *scol = sw + (size_t)a.filters * rows;        /* [row][position] */
    const float *dyn = a.dy + (size_t)nn * a.filters * npos;
    for (int e = threadIdx.x; e < a.filters * npos; e += blockDim.x) __pipeline_memcpy_async(sdy + e, dyn + e, sizeof(float));
    /* Row r = (channel - c0) * kk + tap of filter o is w[o][c0 + channel][tap]: contiguous in r. */
    for (int o = 0; o < a.filters; o++) {
        const float *wo = a.w + ((size_t)o * a.c + c0) * kk;
        for (int r = threadIdx.x; r < rows; r += blockDim.x) {
            if (r < live_rows) __pipeline_memcpy_async(sw + o * rows + r, wo + r, sizeof(float));
            else sw[o * rows + r] = 0.0f;
        }
    }
    __pipeline_commit();
    __pipeline_wait_prior(0);
    __syncthreads();
    const int items = rows / 8 * npos;
    for (int it = threadIdx.x; it < items; it += blockDim.x) {
        const int p = it % npos, r0 = it / npos * 8;
        float acc[8];
#pragma unroll
        for (int i = 0; i < 8; i++) acc[i] = 0.0f;
        for (int o = 0; o < a.filters; o++) {
            const float d = sdy[o * npos + p];
            const float4 w0 = *(const float4 *)(sw + o * rows + r0), w1 = *(const float4 *)(sw + o * rows + r0 + 4);
            acc[0] = fmaf(w0.x, d, acc[0]);
            acc[1] = fmaf(w0.y, d, acc[1]);
            acc[2] = fmaf(w0.z, d, acc[2]);
            acc[3] = fmaf(w0.w, d, acc[3]);
            acc[4] = fmaf(w1.x, d, acc[4]);
            acc[5] = fmaf(w1.y, d, acc[5]);
            acc[6] = fmaf(w1.z, d, acc[6]);
            acc[7] = fmaf(w1.w, d, acc[7]);
        }
#pragma unroll
        for (int i = 0; i < 8; i++) scol[(r0 + i) * npos + p] = acc[i];
    }
    __syncthreads();
    const int plane = a.h * a.wd;
    for (int e = threadIdx.x; e < cc * plane; e += blockDim.x) {
        const int ch = e / plane, q = e - ch * plane, y = q / a.wd, x = q - y * a.wd;
        float sum = 0.0f;
        /* Taps in increasing order: y + pad - ky falls, so the first negative one ends the loop;
         * with stride 1 every other tap lands on an output position or past the last one. */
        const bool unit = a.stride == 1;
        for (int ky = 0; ky < a.k; ky++) {
            int ty = y + a.pad - ky;
            if (ty < 0) break;
            if (!unit && ty % a.stride) continue;
            int oy = unit ? ty : ty / a.stride;
            if (oy >= a.oh) continue;
            const float *crow = scol + (ch * kk + ky * a.k) * npos + oy * a.ow;
            for (int kx = 0; kx < a.k; kx++) {
                int tx = x + a.pad - kx;
                if (tx < 0) break;
                if (!unit && tx % a.stride) continue;
                int ox = unit ? tx : tx / a.stride;
                if (ox < a.ow) sum += crow[kx * npos + ox];
            }
        }
        a.dx[((size_t)nn * a.c + c0 + ch) * plane + q] = sum;
    }
}

typedef struct wgrad_args {
    const float *x, *dy;
    float *part;
    int n, c, h, w, k, stride, pad, oh, ow, filters;
    int m_total, span;
} wgrad_args;

template <int T>
static __global__ void __launch_bounds__((T / 4) * (T / 4)) wgrad_tiles(wgrad_args a)
{
    bn_early_entry(); /* pdl.cuh */
    constexpr int NT = (T / 4) * (T / 4); /* threads */
    constexpr int PER = MT * T / NT;      /* tile cells a thread copies per stage */
    __shared__ __align__(16) float sa[2][MT][T + 4]; /* dy: [stage][m][filter] */
    __shared__ __align__(16) float sb[2][MT][T + 4]; /* columns: [stage][m][tap] */
    const int tid = threadIdx.x, tx = tid % (T / 4), ty = tid / (T / 4);
    const int kk = a.k * a.k, taps = a.c * kk, npos = a.oh * a.ow, plane = a.h * a.w;
    const int o0 = blockIdx.y * T, r0 = blockIdx.x * T;
    const int m_begin = blockIdx.z * a.span, m_end = min(m_begin + a.span, a.m_total);

    /* A thread always copies the same m offset (mm) and the same PER columns. */
    const int mm = tid % MT;
    int col[PER], ky[PER], kx[PER], xoff[PER];
#pragma unroll
    for (int i = 0; i < PER; i++) {
        col[i] = tid / MT + i * (NT / MT);
        int r = r0 + col[i];
        int ch = r / kk, tap = r - ch * kk;
        ky[i] = r < taps ? tap / a.k : -1000000; /* a tap past the end is never in bounds */
        kx[i] = tap - (tap / a.k) * a.k;
        xoff[i] = ch * plane + (ky[i] - a.pad) * a.w + kx[i] - a.pad;
    }
    auto stage = [&](int buf, int m0) {
        int m = m0 + mm;
        bool live = m < m_end;
        int im = live ? m / npos : 0, p = m - im * npos, oy = p / a.ow, ox = p - oy * a.ow;
        const float *dyp = a.dy + (size_t)im * a.filters * npos + p;
        const float *xp = a.x + (size_t)im * a.c * plane + oy * a.stride * a.w + ox * a.stride;
#pragma unroll
        for (int i = 0; i < PER; i++) {
            float *da = &sa[buf][mm][col[i]], *db = &sb[buf][mm][col[i]];
            if (live && o0 + col[i] < a.filters)
                __pipeline_memcpy_async(da, dyp + (size_t)(o0 + col[i]) * npos, sizeof(float));
            else
                *da = 0.0f;
            int iy = oy * a.stride + ky[i] - a.pad, ix = ox * a.stride + kx[i] - a.pad;
            if (live && iy >= 0 && iy < a.h && ix >= 0 && ix < a.w)
                __pipeline_memcpy_async(db, xp + xoff[i], sizeof(float));
            else
                *db = 0.0f;
        }
    };

    float acc[4][4];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) acc[i][j] = 0.0f;
    /* The first column of tap tiles also sums dy per filter, for the bias gradient. */
    const bool bias_sums = blockIdx.x == 0 && tid < T;
    float dsum = 0.0f;

    if (m_begin < m_end) stage(0, m_begin);
    __pipeline_commit();
    int buf = 0;
    for (int m0 = m_begin; m0 < m_end; m0 += MT, buf ^= 1) {
        if (m0 + MT < m_end) stage(buf ^ 1, m0 + MT);
        __pipeline_commit();
        __pipeline_wait_prior(1); /* this stage's copies have landed; the next may be in flight */
        __syncthreads();
#pragma unroll 4
        for (int q = 0; q < MT; q++) {
            float4 av = *(const float4 *)&sa[buf][q][ty * 4];
            float4 bv = *(const float4 *)&sb[buf][q][tx * 4];
            float ar[4] = {av.x, av.y, av.z, av.w}, br[4] = {bv.x, bv.y, bv.z, bv.w};
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 4; j++) acc[i][j] = fmaf(ar[i], br[j], acc[i][j]);
        }
        if (bias_sums)
            for (int q = 0; q < MT; q++) dsum += sa[buf][q][tid];
        __syncthreads(); /* done with buf before the next iteration's copies overwrite it */
    }
    /* This span's partials: filters x taps for dw, then filters for db. */
    float *out = a.part + (size_t)blockIdx.z * a.filters * (taps + 1);
    if (bias_sums && o0 + tid < a.filters) out[(size_t)a.filters * taps + o0 + tid] = dsum;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        int o = o0 + ty * 4 + i;
        if (o >= a.filters) continue;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            int r = r0 + tx * 4 + j;
            if (r < taps) out[(size_t)o * taps + r] = acc[i][j];
        }
    }
}

#define FINISH_THREADS 256
/* Rows of threads in a finishing block (each row adds every ROWS-th span of its columns):
 * FINISH_ROWS as a rule, 32 columns a block. A small gradient (fewer than FINISH_SMALL_BELOW
 * elements) makes too few such blocks to fill the GPU, and with many spans (FINISH_SMALL_SPANS
 * or more: 16 or more a thread at 8 rows) each thread adds a long run of them one after another;
 * there a block takes FINISH_ROWS_SMALL rows and 4 columns. LeNet's conv1 at 256 (520 elements,
 * 256 spans): 3.6 us in 5 blocks of 8 rows, 2.1 us in 33 of 64, on the step's last chain
 * (docs/performance.md, version 79). */
#define FINISH_ROWS 8
#define FINISH_ROWS_SMALL 64
#define FINISH_SMALL_BELOW 16384
#define FINISH_SMALL_SPANS 128

/* The sum of spans z = z0, z0 + ROWS, ... < splits of the partials at p (span z at p + z * count),
 * in that order, with up to four loads in flight. T is float, or float4 for four consecutive
 * elements. */
template <int ROWS, typename T>
static __device__ T finish_column(const T *p, int z0, int splits, size_t count)
{
    T s = T();
    const size_t step = count * ROWS;
    int z = z0;
    for (; z + 3 * ROWS < splits; z += 4 * ROWS) {
        const T v0 = p[(size_t)z * count], v1 = p[(size_t)z * count + step], v2 = p[(size_t)z * count + 2 * step],
                v3 = p[(size_t)z * count + 3 * step];
        s = add_v(s, v0);
        s = add_v(s, v1);
        s = add_v(s, v2);
        s = add_v(s, v3);
    }
    if (z + ROWS < splits) {
        const T v0 = p[(size_t)z * count], v1 = p[(size_t)z * count + step];
        s = add_v(s, v0);
        s = add_v(s, v1);
        z += 2 * ROWS;
    }
    if (z < splits) s = add_v(s, p[(size_t)z * count]);
    return s;
}

/* Element i < count of the partials, summed over the spans z < splits (part[z * count + i]), is
 * added to dw[i] below `split_at` and to db[i - split_at] from there. A block takes
 * FINISH_THREADS / ROWS consecutive columns of W elements (W = 4: 16-byte loads, where count is a
 * multiple of 4 and the partials are aligned); its ROWS rows of threads each add every ROWS-th
 * span (one row's loads are consecutive). With 8 rows, the first row then adds the rows' sums in
 * row order; with more, halves of the rows are added pairwise (row r + h into row r, h = ROWS / 2,
 * ROWS / 4, ... 1). Every element is summed in the same order for either W, and the result does
 * not depend on timing. */
template <int W, int ROWS>
static __global__ void __launch_bounds__(FINISH_THREADS)
    wgrad_finish(const float *__restrict__ part, int splits, int count, int split_at, float *__restrict__ dw,
                 float *__restrict__ db)
{
    bn_early_entry(); /* pdl.cuh */
    typedef typename vec_of<W>::t T;
    constexpr int COLS = FINISH_THREADS / ROWS;
    __shared__ T sums[ROWS][COLS];
    const int col = threadIdx.x % COLS, row = threadIdx.x / COLS;
    const int g = (blockIdx.x * COLS + col) * W;
    sums[row][col] = g < count ? finish_column<ROWS>((const T *)(part + g), row, splits, (size_t)count / W) : T();
    __syncthreads();
    T t;
    if constexpr (ROWS == FINISH_ROWS) {
        if (row != 0 || g >= count) return;
        t = sums[0][col];
#pragma unroll
        for (int r = 1; r < ROWS; r++) t = add_v(t, sums[r][col]);
    } else {
#pragma unroll
        for (int h = ROWS / 2; h >= 1; h /= 2) {
            if (row < h) sums[row][col] = add_v(sums[row][col], sums[row + h][col]);
            __syncthreads();
        }
        if (row != 0 || g >= count) return;
        t = sums[0][col];
    }
    const float *v = (const float *)&t;
#pragma unroll
    for (int e = 0; e < W; e++) {
        if (g + e < split_at) dw[g + e] += v[e];
        else db[g + e - split_at] += v[e];
    }
}

static bn_status launch_direct(const bn_direct_shape *s, int n, cudaStream_t stream, const float *in, const float *w,
                               const float *bias, float *out, const bn_conv_relu *relu)
{
    direct_args a = {*s, n, in, w, bias, out, relu ? relu->out : NULL, relu ? (long long)relu->image : 0};
    dim3 grid((s->co + s->kt - 1) / s->kt, (n + s->images - 1) / s->images, s->tiles);
    int threads = s->threads * s->split;
    /* LeNet's 5x5 and the common 3x3 windows get unrolled taps. */
    if (s->kt == 4) {
        if (s->k == 5) bn_launch_early(direct_conv<4, 5>, grid, threads, s->smem, stream, a);
        else if (s->k == 3) bn_launch_early(direct_conv<4, 3>, grid, threads, s->smem, stream, a);
        else bn_launch_early(direct_conv<4, 0>, grid, threads, s->smem, stream, a);
    } else {
        if (s->k == 5) bn_launch_early(direct_conv<8, 5>, grid, threads, s->smem, stream, a);
        else if (s->k == 3) bn_launch_early(direct_conv<8, 3>, grid, threads, s->smem, stream, a);
        else bn_launch_early(direct_conv<8, 0>, grid, threads, s->smem, stream, a);
    }
    BN_CUDA_LAUNCH();
    return BN_OK;
}

extern "C" bn_status bn_direct_forward(const bn_direct_plan *p, void *stream, const float *x, const float *w,
                                       const float *b, float *y, const bn_conv_relu *relu)
{
    if (!p->fwd_ok) return bn_error(BN_ERR_INTERNAL, "direct convolution cannot run this forward shape");
    return launch_direct(&p->fwd, p->n, (cudaStream_t)stream, x, w, b, y, relu && relu->out ? relu : NULL);
}

extern "C" bn_status bn_direct_backward_data(const bn_direct_plan *p, void *stream, const float *dy, const float *w,
                                             float *dx)
{
    if (!p->data_ok) return bn_error(BN_ERR_INTERNAL, "direct convolution cannot run this backward-data shape");
    if (!p->data_cols) return launch_direct(&p->data, p->n, (cudaStream_t)stream, dy, w, NULL, dx, NULL);
    const bn_conv_geom *g = &p->g;
    col_args a = {p->cols, dy, w, dx, p->n, g->c, g->h, g->w, g->k, g->stride, g->pad, g->oh, g->ow, p->filters};
    dim3 grid((g->c + p->cols.ct - 1) / p->cols.ct, p->n);
    bn_launch_early(col_dgrad, grid, p->cols.threads, p->cols.smem, (cudaStream_t)stream, a);
    BN_CUDA_LAUNCH();
    return BN_OK;
}

extern "C" bn_status bn_direct_backward_filter(const bn_direct_plan *p, void *stream, const float *x,
                                               const float *dy, float *dw, float *db, float *workspace)
{
    if (!p->filter_ok) return bn_error(BN_ERR_INTERNAL, "direct convolution cannot run this backward-filter shape");
    const bn_conv_geom *g = &p->g;
    const bn_wgrad_shape *f = &p->filter;
    cudaStream_t st = (cudaStream_t)stream;
    const int taps = g->c * g->k * g->k, npos = g->oh * g->ow;
    wgrad_args a = {x, dy, workspace, p->n, g->c, g->h, g->w, g->k, g->stride, g->pad, g->oh, g->ow, p->filters,
                    p->n * npos, (int)f->span};
    dim3 grid((taps + f->tile - 1) / f->tile, (p->filters + f->tile - 1) / f->tile, f->splits);
    if (f->tile == 64)
        bn_launch_early(wgrad_tiles<64>, grid, 256, 0, st, a);
    else
        bn_launch_early(wgrad_tiles<32>, grid, 64, 0, st, a);
    BN_CUDA_LAUNCH();
    return bn_direct_finish_filter(stream, workspace, f->splits, p->filters, taps, dw, db);
}

extern "C" bn_status bn_direct_finish_filter(void *stream, const float *parts, int splits, int filters, int taps,
                                             float *dw, float *db)
{
    const int count = filters * (taps + 1);
    const bool wide = count % 4 == 0 && ((uintptr_t)parts & 15) == 0; /* 16-byte loads */
    /* The rows by the gradient's size and spans alone, so that both widths sum alike. */
    const bool small = count < FINISH_SMALL_BELOW && splits >= FINISH_SMALL_SPANS;
    const int cols = FINISH_THREADS / (small ? FINISH_ROWS_SMALL : FINISH_ROWS);
    const int blocks = (count / (wide ? 4 : 1) + cols - 1) / cols;
    void (*kernel)(const float *, int, int, int, float *, float *) =
        small ? (wide ? wgrad_finish<4, FINISH_ROWS_SMALL> : wgrad_finish<1, FINISH_ROWS_SMALL>)
              : (wide ? wgrad_finish<4, FINISH_ROWS> : wgrad_finish<1, FINISH_ROWS>);
    bn_launch_early(kernel, dim3(blocks), dim3(FINISH_THREADS), 0, (cudaStream_t)stream, parts, splits, count,
                    filters * taps, dw, db);
    BN_CUDA_LAUNCH();
    return BN_OK;
}

extern "C" bn_status bn_conv_run_direct(const bn_conv_family_plan *p, const bn_conv_shape *s, int pass, void *stream,
                                        const bn_conv_io *io)
{
    const bn_direct_plan *d = &p->direct;
    if (pass == BN_CONV_FORWARD) return bn_direct_forward(d, stream, io->x, io->w, io->b, io->y, &io->relu);
    if (pass == BN_CONV_DATA) return bn_direct_backward_data(d, stream, io->dy, io->w, io->dx);
    return bn_direct_backward_filter(d, stream, io->x, io->dy, io->dw, io->db, io->parts);
}

BN_CODE_ANCHOR(conv_direct, direct_conv<4, 0>) /* code_load.cu */
