/* conv_direct.cu - the conv2d layer's own kernels (see conv_direct.h).
 *
 * Direct kernel. A block owns kt output channels of `images` whole images (or one tile of
 * positions of one image when an image has more positions than a block). It copies the
 * zero-padded input windows of a chunk of input channels into shared memory, and the chunk's
 * weights as [channel][tap][kt], so that every thread reads the same kt weights at once (a
 * broadcast) and its own PT input values, and does PT x kt multiply-adds per tap. When the
 * reduction (input channels x taps) is long, `split` groups of threads take the input channels
 * in turn and add their partial sums through shared memory at the end, in group order. The
 * backward-data pass is the same kernel over dy padded by k-1-pad, with every weight read
 * transposed (input and output channels swapped) and rotated by 180 degrees.
 *
 * Filter kernel. dW (filters x c*k*k) is the product of dY^T with the column matrix, summed
 * over every image and output position m. Blocks take a tile of filters x taps and a span of
 * m, stage 16 values of m at a time in shared memory (dy directly, the columns gathered from
 * x), and each thread keeps a 4x4 tile of sums. Each span writes its own partial matrix; the
 * finishing kernel adds the partials in span order into dw and sums dy per filter into db. */
#include <limits.h>
#include <string.h>

#include "conv_direct.h"
#include "cuda_check.h"

/* Shared memory a block may take without opting in: 48 KiB. */
#define SMEM_FLOATS (48 * 1024 / 4)
/* Output positions per thread in the direct kernel. */
#define PT 2
/* Values of m staged per step of the filter kernel. */
#define MT 16

typedef struct direct_args {
    bn_direct_shape s;
    int n;
    const float *in, *w, *bias;
    float *out;
} direct_args;

static __host__ __device__ size_t round4(size_t v) { return (v + 3) & ~(size_t)3; }

template <int KT>
static __global__ void __launch_bounds__(512) direct_conv(direct_args a)
{
    extern __shared__ float4 smem4[];
    float *smem = (float *)smem4;
    const bn_direct_shape &s = a.s;
    const int kk = s.k * s.k, plane = s.hp * s.wp, npos = s.ho * s.wo;
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
        const int xs = s.images * cc * plane;
        for (int e = threadIdx.x; e < xs; e += blockDim.x) {
            int xx = e % s.wp, r = e / s.wp;
            int yy = r % s.hp;
            r /= s.hp;
            int c = r % cc, im = r / cc, nn = n0 + im;
            int iy = yy - s.pad, ix = xx - s.pad;
            float v = 0.0f;
            if (nn < a.n && iy >= 0 && iy < s.hi && ix >= 0 && ix < s.wi)
                v = a.in[(((size_t)nn * s.ci + c0 + c) * s.hi + iy) * s.wi + ix];
            sx[(im * s.chunk + c) * plane + yy * s.wp + xx] = v;
        }
        /* Weights: consecutive threads read consecutive taps of one output channel. */
        const int span = cc * kk;
        for (int e = threadIdx.x; e < span * KT; e += blockDim.x) {
            int ct = e % span, j = e / span, o = o0 + j;
            float v = 0.0f;
            if (o < s.co) {
                if (!s.flip) {
                    v = a.w[((size_t)o * s.ci + c0) * kk + ct];
                } else {
                    int c = ct / kk, tap = ct - c * kk;
                    v = a.w[((size_t)(c0 + c) * s.co + o) * kk + (kk - 1 - tap)];
                }
            }
            sw[ct * KT + j] = v;
        }
        __syncthreads();
        for (int c = group; c < cc; c += s.split) {
            const float *xc = sx + c * plane;
            const float4 *wc = (const float4 *)(sw + c * kk * KT);
            for (int ky = 0; ky < s.k; ky++) {
                for (int kx = 0; kx < s.k; kx++) {
                    float wr[KT];
#pragma unroll
                    for (int i = 0; i < KT / 4; i++) {
                        float4 v = wc[(ky * s.k + kx) * (KT / 4) + i];
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
#pragma unroll
        for (int i = 0; i < KT; i++) {
            int o = o0 + i;
            if (o < s.co) y[(size_t)o * npos] = acc[j][i] + (a.bias ? a.bias[o] : 0.0f);
        }
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
    __shared__ __align__(16) float sa[MT][T + 4]; /* dy: [m][filter] */
    __shared__ __align__(16) float sb[MT][T + 4]; /* columns: [m][tap] */
    const int nthr = (T / 4) * (T / 4);
    const int tid = threadIdx.x, tx = tid % (T / 4), ty = tid / (T / 4);
    const int kk = a.k * a.k, taps = a.c * kk, npos = a.oh * a.ow;
    const int o0 = blockIdx.y * T, r0 = blockIdx.x * T;
    const int m_begin = blockIdx.z * a.span, m_end = min(m_begin + a.span, a.m_total);
    float acc[4][4];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) acc[i][j] = 0.0f;

    for (int m0 = m_begin; m0 < m_end; m0 += MT) {
        for (int e = tid; e < MT * T; e += nthr) {
            int mm = e % MT, col = e / MT, m = m0 + mm;
            float va = 0.0f, vb = 0.0f;
            if (m < m_end) {
                int im = m / npos, p = m - im * npos;
                int o = o0 + col;
                if (o < a.filters) va = a.dy[((size_t)im * a.filters + o) * npos + p];
                int r = r0 + col;
                if (r < taps) {
                    int ch = r / kk, tap = r - ch * kk, ky = tap / a.k, kx = tap - ky * a.k;
                    int oy = p / a.ow, ox = p - oy * a.ow;
                    int iy = oy * a.stride + ky - a.pad, ix = ox * a.stride + kx - a.pad;
                    if (iy >= 0 && iy < a.h && ix >= 0 && ix < a.w)
                        vb = a.x[(((size_t)im * a.c + ch) * a.h + iy) * a.w + ix];
                }
            }
            sa[mm][col] = va;
            sb[mm][col] = vb;
        }
        __syncthreads();
#pragma unroll 4
        for (int mm = 0; mm < MT; mm++) {
            float4 av = *(const float4 *)&sa[mm][ty * 4];
            float4 bv = *(const float4 *)&sb[mm][tx * 4];
            float ar[4] = {av.x, av.y, av.z, av.w}, br[4] = {bv.x, bv.y, bv.z, bv.w};
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 4; j++) acc[i][j] = fmaf(ar[i], br[j], acc[i][j]);
        }
        __syncthreads();
    }
    float *out = a.part + (size_t)blockIdx.z * a.filters * taps;
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

/* Blocks below dw_blocks: dw[i] += the partials of every span, in span order. The rest: one
 * filter each, db[o] += the sum of dy over every image and position, in a fixed order. */
static __global__ void __launch_bounds__(FINISH_THREADS)
    wgrad_finish(const float *__restrict__ part, int splits, int count, int dw_blocks, float *__restrict__ dw,
                 const float *__restrict__ dy, int n, int filters, int npos, float *__restrict__ db)
{
    if ((int)blockIdx.x < dw_blocks) {
        int i = blockIdx.x * FINISH_THREADS + threadIdx.x;
        if (i >= count) return;
        float s = 0.0f;
        for (int z = 0; z < splits; z++) s += part[(size_t)z * count + i];
        dw[i] += s;
        return;
    }
    __shared__ float red[FINISH_THREADS];
    const int o = blockIdx.x - dw_blocks, total = n * npos;
    float s = 0.0f;
    for (int i = threadIdx.x; i < total; i += FINISH_THREADS) {
        int im = i / npos, p = i - im * npos;
        s += dy[((size_t)im * filters + o) * npos + p];
    }
    red[threadIdx.x] = s;
    __syncthreads();
    for (int half = FINISH_THREADS / 2; half > 0; half /= 2) {
        if ((int)threadIdx.x < half) red[threadIdx.x] += red[threadIdx.x + half];
        __syncthreads();
    }
    if (threadIdx.x == 0) db[o] += red[0];
}

/* Fills a direct shape for a batch of n; 0 when the kernel cannot run it. */
static int direct_shape(bn_direct_shape *d, int ci, int hi, int wi, int co, int ho, int wo, int k, int stride, int pad,
                        int flip, int n)
{
    memset(d, 0, sizeof *d);
    d->ci = ci, d->hi = hi, d->wi = wi, d->co = co, d->ho = ho, d->wo = wo;
    d->k = k, d->stride = stride, d->pad = pad, d->flip = flip;
    const int kk = d->k * d->k, npos = d->ho * d->wo;
    d->kt = d->co <= 4 ? 4 : 8;
    int bt = (npos + PT - 1) / PT;
    bt = (bt + 31) / 32 * 32;
    if (bt > 256) bt = 256;
    if (npos > bt * PT) {
        d->tiles = (npos + bt * PT - 1) / (bt * PT);
        d->images = 1;
    } else {
        d->tiles = 1;
        d->images = bt * PT / npos;
        if (d->images > n) d->images = n;
        if (d->images < 1) d->images = 1;
    }
    d->hp = (d->ho - 1) * d->stride + d->k;
    d->wp = (d->wo - 1) * d->stride + d->k;
    const long long plane = (long long)d->hp * d->wp;
    const long long per_channel = d->images * plane + (long long)kk * d->kt;
    long long chunk = (SMEM_FLOATS - 4) / per_channel;
    if (chunk < 1) return 0;
    if (chunk > d->ci) chunk = d->ci;
    d->chunk = (int)chunk;
    int split = (d->ci * kk + 255) / 256;
    if (split > d->chunk) split = d->chunk;
    if (split > 512 / bt) split = 512 / bt;
    int red_room = 1 + SMEM_FLOATS / (PT * d->kt * bt);
    if (split > red_room) split = red_room;
    if (split < 1) split = 1;
    d->threads = bt;
    d->split = split;
    size_t main_floats = round4((size_t)d->images * d->chunk * plane) + (size_t)d->chunk * kk * d->kt;
    size_t red_floats = (size_t)(split - 1) * PT * d->kt * bt;
    d->smem = (main_floats > red_floats ? main_floats : red_floats) * sizeof(float);
    long long blocks_y = ((long long)n + d->images - 1) / d->images;
    return blocks_y <= 65535 && d->tiles <= 65535 && d->smem <= SMEM_FLOATS * sizeof(float);
}

extern "C" void bn_direct_plan_make(bn_direct_plan *p, const bn_conv_geom *g, int filters, int n, int sms)
{
    memset(p, 0, sizeof *p);
    p->n = n;
    p->filters = filters;
    p->g = *g;
    /* Every flat index below stays in an int. */
    long long in_size = (long long)n * g->c * g->h * g->w, out_size = (long long)n * filters * g->oh * g->ow;
    if (in_size >= INT_MAX || out_size >= INT_MAX || (long long)filters * g->c * g->k * g->k >= INT_MAX) return;

    p->fwd_ok = direct_shape(&p->fwd, g->c, g->h, g->w, filters, g->oh, g->ow, g->k, g->stride, g->pad, 0, n);
    /* The input gradient as a convolution of dy needs stride 1. */
    if (g->stride == 1)
        p->data_ok = direct_shape(&p->data, filters, g->oh, g->ow, g->c, g->h, g->w, g->k, 1, g->k - 1 - g->pad, 1, n);

    const int taps = g->c * g->k * g->k, m_total = (int)(n * g->oh * g->ow);
    bn_wgrad_shape *f = &p->filter;
    f->tile = filters > 32 && taps > 32 ? 64 : 32;
    long long tiles = (long long)((taps + f->tile - 1) / f->tile) * ((filters + f->tile - 1) / f->tile);
    long long want = (2LL * (sms > 0 ? sms : 100) + tiles - 1) / tiles;
    long long span = (m_total + want - 1) / want;
    if (span < 256) span = 256;
    span = (span + MT - 1) / MT * MT;
    long long splits = (m_total + span - 1) / span;
    if (splits > 65535 || (filters + f->tile - 1) / f->tile > 65535) return;
    f->span = span;
    f->splits = (int)splits;
    p->workspace = (size_t)splits * filters * taps * sizeof(float);
    p->filter_ok = 1;
}

static bn_status launch_direct(const bn_direct_shape *s, int n, cudaStream_t stream, const float *in, const float *w,
                               const float *bias, float *out)
{
    direct_args a = {*s, n, in, w, bias, out};
    dim3 grid((s->co + s->kt - 1) / s->kt, (n + s->images - 1) / s->images, s->tiles);
    int threads = s->threads * s->split;
    if (s->kt == 4)
        direct_conv<4><<<grid, threads, s->smem, stream>>>(a);
    else
        direct_conv<8><<<grid, threads, s->smem, stream>>>(a);
    BN_CUDA_LAUNCH();
    return BN_OK;
}

extern "C" bn_status bn_direct_forward(const bn_direct_plan *p, void *stream, const float *x, const float *w,
                                       const float *b, float *y)
{
    if (!p->fwd_ok) return bn_error(BN_ERR_INTERNAL, "direct convolution cannot run this forward shape");
    return launch_direct(&p->fwd, p->n, (cudaStream_t)stream, x, w, b, y);
}

extern "C" bn_status bn_direct_backward_data(const bn_direct_plan *p, void *stream, const float *dy, const float *w,
                                             float *dx)
{
    if (!p->data_ok) return bn_error(BN_ERR_INTERNAL, "direct convolution cannot run this backward-data shape");
    return launch_direct(&p->data, p->n, (cudaStream_t)stream, dy, w, NULL, dx);
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
        wgrad_tiles<64><<<grid, 256, 0, st>>>(a);
    else
        wgrad_tiles<32><<<grid, 64, 0, st>>>(a);
    BN_CUDA_LAUNCH();
    const int count = p->filters * taps, dw_blocks = (count + FINISH_THREADS - 1) / FINISH_THREADS;
    wgrad_finish<<<dw_blocks + p->filters, FINISH_THREADS, 0, st>>>(workspace, f->splits, count, dw_blocks, dw, dy,
                                                                     p->n, p->filters, npos, db);
    BN_CUDA_LAUNCH();
    return BN_OK;
}
