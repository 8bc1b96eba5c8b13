/* conv_tensor.cu - the conv2d layer's tensor-core kernels (see conv_tensor.h).
 *
 * One block stages all of the layer's weights in shared memory once, in their own layout, then
 * takes work items in turn, an item being an image or, when there are fewer images than
 * multiprocessors, a share of an image's positions: it stages the image's zero-padded input
 * planes (plus one plane of zeros) and computes out[position][channel] = sum over k = (input channel, tap) of
 * A[position][k] * B[k][channel] with mma.sync m16n8k8 TF32 products. Two tables give, per k,
 * the offset of A's element within the staged planes (for position 0) and of B's element within
 * the weights (for channel 0): A's element for position m is at row offset(m) + tableA[k], B's
 * for channel n at tableB[k] + n * stride, which covers the forward pass (B = W^T) and the
 * backward-data pass (B = W read transposed and rotated) alike. k past the reduction reads the
 * zero plane. Each warp owns two 16-position tiles and every channel tile, for every
 * splits-th step of 8 along k; the warps then add their sums into shared memory one split after
 * another, and the block writes the image's outputs with the bias.
 *
 * FP32 accuracy from TF32 products: x = hi + lo with hi = tf32(x) and lo = tf32(x - hi); a*b is
 * taken as lo_a*hi_b + hi_a*lo_b + hi_a*hi_b (the lo*lo term is below FP32's rounding). */
#include <cuda_pipeline.h>
#include <stdint.h>
#include <string.h>

#include "conv_stage.cuh"
#include "conv_tensor.h"
#include "cuda_check.h"
#include "smem_opt_in.cuh"

/* 16-position tiles per warp. */
#define MW 2
/* Shared memory a block may take (opted into once per kernel). */
#define TENSOR_SMEM (200 * 1024)
/* Warps per block at most. */
#define MAX_WARPS 16

typedef struct tensor_args {
    bn_tensor_conv s;
    int n;
    bool vec;
    const float *in, *w, *bias;
    float *out;
} tensor_args;

static __device__ __forceinline__ void split_tf32(float x, uint32_t &hi, uint32_t &lo)
{
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(hi) : "f"(x));
    const float rest = x - __uint_as_float(hi);
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(lo) : "f"(rest));
}

static __device__ __forceinline__ void mma_tf32(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

template <int NT>
static __global__ void __launch_bounds__(MAX_WARPS * 32) tensor_conv(tensor_args a)
{
    extern __shared__ float4 smem4[];
    float *smem = (float *)smem4;
    const bn_tensor_conv &s = a.s;
    const int kk = s.k * s.k, K = s.ci * kk, kpad = s.ksteps * 8;
    const int npos = s.ho * s.wo, plane = s.hp * s.wp, np = NT * 8;
    /* The weights as stored: (filters, channels, k, k) of the forward layer. */
    const int wcount = (s.flip ? s.ci * s.co : s.co * s.ci) * kk;
    float *sb = smem;
    float *sa = smem + s.a_off;                 /* [ci + 1][hp][wp], the last plane zeros */
    int *ta = (int *)(smem + s.tab_off);        /* [kpad] */
    int *tb = ta + kpad;                        /* [kpad] */
    float *red = smem + s.red_off;              /* [mper * 32][np] */
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, gid = lane >> 2, tig = lane & 3;
    const int wg = warp % s.mper, sp = warp / s.mper;

    /* Weights and tables, once per block. */
    if (((uintptr_t)a.w & 15) == 0) {
        for (int e = threadIdx.x; e < wcount / 4; e += blockDim.x) __pipeline_memcpy_async(sb + 4 * e, a.w + 4 * e, 16);
        for (int e = wcount / 4 * 4 + threadIdx.x; e < wcount; e += blockDim.x)
            __pipeline_memcpy_async(sb + e, a.w + e, 4);
    } else {
        for (int e = threadIdx.x; e < wcount; e += blockDim.x) __pipeline_memcpy_async(sb + e, a.w + e, 4);
    }
    for (int k = threadIdx.x; k < kpad; k += blockDim.x) {
        if (k < K) {
            const int c = k / kk, tap = k - c * kk, ky = tap / s.k, kx = tap - ky * s.k;
            ta[k] = c * plane + ky * s.wp + kx;
            tb[k] = s.flip ? c * s.co * kk + (kk - 1 - tap) : c * kk + tap;
        } else {
            ta[k] = s.ci * plane;
            tb[k] = 0;
        }
    }
    const int nstride = s.flip ? kk : s.ci * kk;
    int no[NT];
#pragma unroll
    for (int j = 0; j < NT; j++) no[j] = min(j * 8 + gid, s.co - 1) * nstride;

    /* Work items: (image, share of its positions). */
    for (int item = blockIdx.x; item < a.n * s.mparts; item += gridDim.x) {
        const int img = item / s.mparts, m0 = (item - img * s.mparts) * s.mper * 32;
        int mo[MW][2];
#pragma unroll
        for (int i = 0; i < MW; i++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int m = m0 + (wg * MW + i) * 16 + gid + 8 * h;
                const int oy = m / s.wo, ox = m - oy * s.wo;
                mo[i][h] = m < npos ? oy * s.stride * s.wp + ox * s.stride : 0;
            }
        __syncthreads(); /* the previous image's planes and sums are no longer read */
        stage_planes(sa, a.in + (size_t)img * s.ci * s.hi * s.wi, s.ci + 1, s.ci, s.hi, s.wi, s.pad, s.hp, s.wp,
                     a.vec);
        __pipeline_commit();
        __pipeline_wait_prior(0);
        __syncthreads();

        float acc[MW][NT][4];
#pragma unroll
        for (int i = 0; i < MW; i++)
#pragma unroll
            for (int j = 0; j < NT; j++)
#pragma unroll
                for (int q = 0; q < 4; q++) acc[i][j][q] = 0.0f;
        for (int step = sp; step < s.ksteps; step += s.splits) {
            const int k0 = step * 8;
            const int ka0 = ta[k0 + tig], ka1 = ta[k0 + tig + 4], kb0 = tb[k0 + tig], kb1 = tb[k0 + tig + 4];
            uint32_t ah[MW][4], al[MW][4];
#pragma unroll
            for (int i = 0; i < MW; i++) {
                split_tf32(sa[mo[i][0] + ka0], ah[i][0], al[i][0]);
                split_tf32(sa[mo[i][1] + ka0], ah[i][1], al[i][1]);
                split_tf32(sa[mo[i][0] + ka1], ah[i][2], al[i][2]);
                split_tf32(sa[mo[i][1] + ka1], ah[i][3], al[i][3]);
            }
#pragma unroll
            for (int j = 0; j < NT; j++) {
                uint32_t bh0, bl0, bh1, bl1;
                split_tf32(sb[kb0 + no[j]], bh0, bl0);
                split_tf32(sb[kb1 + no[j]], bh1, bl1);
#pragma unroll
                for (int i = 0; i < MW; i++) {
                    mma_tf32(acc[i][j], al[i], bh0, bh1);
                    mma_tf32(acc[i][j], ah[i], bl0, bl1);
                    mma_tf32(acc[i][j], ah[i], bh0, bh1);
                }
            }
        }
        /* The splits' sums into red, one split after another (split 0 stores). */
        for (int r = 0; r < s.splits; r++) {
            if (sp == r) {
#pragma unroll
                for (int i = 0; i < MW; i++)
#pragma unroll
                    for (int j = 0; j < NT; j++)
#pragma unroll
                        for (int q = 0; q < 4; q++) {
                            const int row = (wg * MW + i) * 16 + gid + 8 * (q >> 1), col = j * 8 + 2 * tig + (q & 1);
                            float *d = red + row * np + col;
                            *d = r == 0 ? acc[i][j][q] : *d + acc[i][j][q];
                        }
            }
            __syncthreads();
        }
        float *y = a.out + (size_t)img * s.co * npos;
        const int span = min(s.mper * 32, npos - m0);
        for (int e = threadIdx.x; e < s.co * span; e += blockDim.x) {
            const int o = e / span, m = e - o * span;
            y[(size_t)o * npos + m0 + m] = red[m * np + o] + (a.bias ? a.bias[o] : 0.0f);
        }
    }
}

static int round4i(int v)
{
    return (v + 3) & ~3;
}

/* Fills a shape; 0 when the kernel cannot run it. */
static int tensor_shape(bn_tensor_conv *d, int ci, int hi, int wi, int pad, int stride, int co, int ho, int wo, int k,
                        int flip, int n, int sms)
{
    memset(d, 0, sizeof *d);
    if (co < 1 || co > 64 || ci < 1 || ho < 1 || wo < 1 || k < 1 || stride < 1 || pad < 0 || n < 1) return 0;
    d->ci = ci, d->hi = hi, d->wi = wi, d->pad = pad, d->stride = stride;
    d->co = co, d->ho = ho, d->wo = wo, d->k = k, d->flip = flip;
    d->ntiles = (co + 7) / 8;
    const int npos = ho * wo, mtiles = (npos + 15) / 16;
    d->mgroups = (mtiles + MW - 1) / MW;
    if (d->mgroups > MAX_WARPS) return 0;
    /* An image's positions shared by several blocks while there are fewer images than
     * multiprocessors. */
    int mparts = (sms + n - 1) / n;
    if (mparts > d->mgroups) mparts = d->mgroups;
    if (mparts < 1) mparts = 1;
    d->mper = (d->mgroups + mparts - 1) / mparts;
    d->mparts = (d->mgroups + d->mper - 1) / d->mper;
    const long long K = (long long)ci * k * k;
    if (K > (1 << 20)) return 0;
    d->ksteps = (int)((K + 7) / 8);
    /* Warps along the reduction: as many as fit, each with at least 4 steps. */
    int splits = MAX_WARPS / d->mper;
    if (splits > d->ksteps / 4) splits = d->ksteps / 4;
    if (splits < 1) splits = 1;
    d->splits = splits;
    d->threads = 32 * d->mper * splits;
    d->hp = (ho - 1) * stride + k;
    d->wp = round4i((wo - 1) * stride + k);
    /* Shared memory: the weights, the planes, the two tables, the warps' sums (in floats). */
    const size_t wcount = (size_t)co * ci * k * k, plane = (size_t)d->hp * d->wp;
    if (wcount * sizeof(float) > TENSOR_SMEM || plane * (ci + 1) * sizeof(float) > TENSOR_SMEM) return 0;
    d->a_off = (wcount + 3) / 4 * 4;
    d->tab_off = d->a_off + (ci + 1) * plane;
    d->red_off = d->tab_off + (size_t)round4i(2 * d->ksteps * 8);
    d->smem = (d->red_off + (size_t)d->mper * 32 * d->ntiles * 8) * sizeof(float);
    if (d->smem > TENSOR_SMEM) return 0;
    const long long items = (long long)n * d->mparts;
    if (items > (1LL << 30)) return 0;
    d->blocks = (int)(items < sms ? items : sms);
    return 1;
}

extern "C" void bn_tensor_plan_make(bn_tensor_plan *p, const bn_conv_geom *g, int filters, int n, int sms)
{
    memset(p, 0, sizeof *p);
    p->n = n, p->filters = filters, p->g = *g;
    p->fwd_ok = tensor_shape(&p->fwd, g->c, g->h, g->w, g->pad, g->stride, filters, g->oh, g->ow, g->k, 0, n, sms);
    const int dpad = g->k - 1 - g->pad;
    p->data_ok = g->stride == 1 && dpad >= 0 &&
                 tensor_shape(&p->data, filters, g->oh, g->ow, dpad, 1, g->c, g->h, g->w, g->k, 1, n, sms);
}

template <int NT>
static bn_status launch_nt(const tensor_args &a, cudaStream_t st)
{
    static bool opted;
    BN_CUDA(bn_smem_opt_in(tensor_conv<NT>, &opted, TENSOR_SMEM));
    tensor_conv<NT><<<a.s.blocks, a.s.threads, a.s.smem, st>>>(a);
    BN_CUDA_LAUNCH();
    return BN_OK;
}

static bn_status run(const bn_tensor_conv *s, int n, cudaStream_t st, const float *in, const float *w,
                     const float *bias, float *out)
{
    tensor_args a = {*s, n, ((uintptr_t)in & 15) == 0 && s->wi % 4 == 0 && s->pad % 4 == 0, in, w, bias, out};
    switch (s->ntiles) {
    case 1: return launch_nt<1>(a, st);
    case 2: return launch_nt<2>(a, st);
    case 3: return launch_nt<3>(a, st);
    case 4: return launch_nt<4>(a, st);
    case 5: return launch_nt<5>(a, st);
    case 6: return launch_nt<6>(a, st);
    case 7: return launch_nt<7>(a, st);
    case 8: return launch_nt<8>(a, st);
    default: return bn_error(BN_ERR_INTERNAL, "tensor-core convolution: no kernel for %d channel tiles", s->ntiles);
    }
}

extern "C" bn_status bn_tensor_forward(const bn_tensor_plan *p, void *stream, const float *x, const float *w,
                                       const float *b, float *y)
{
    if (!p->fwd_ok) return bn_error(BN_ERR_INTERNAL, "tensor-core convolution cannot run this forward shape");
    return run(&p->fwd, p->n, (cudaStream_t)stream, x, w, b, y);
}

extern "C" bn_status bn_tensor_backward_data(const bn_tensor_plan *p, void *stream, const float *dy, const float *w,
                                             float *dx)
{
    if (!p->data_ok) return bn_error(BN_ERR_INTERNAL, "tensor-core convolution cannot run this backward-data shape");
    return run(&p->data, p->n, (cudaStream_t)stream, dy, w, NULL, dx);
}
