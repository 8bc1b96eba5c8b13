/* batchnorm.cu - batch normalization on the GPU, deterministic, a training pass in one of two
 * ways. Where a channel's values fit in the registers of a cluster of up to 8 blocks (batch x
 * plane up to 65,536 in 16-byte packs, 32,768 one value at a time: small batches and late
 * stages), one kernel (fused_pass) reads them once, adds the cluster's sums in rank order and
 * writes the outputs. Elsewhere two: each channel's sums are taken in double by a fixed grid of
 * (part, channel) blocks, then added part by part in order by one thread of the channel's last
 * block to finish (gpu/last_arrival.cuh: no kernel of its own between the sums and the
 * per-element pass), which also moves the running averages or adds the parameter gradients,
 * then a per-element kernel. Both use the CPU path's float expressions with rounded operations
 * the compiler may not fuse, so the paths differ only by the order of the double sums. Every
 * kernel that touches the data reads and writes 16 bytes at a time where the plane allows, with
 * 32-bit index arithmetic where the blob allows: the 64-bit divisions of a per-element channel
 * index had held these passes to a third of the memory bandwidth.
 *
 * Scratch (dev_sums, sized for the batch capacity): 2 doubles per (channel, part), then 4 floats
 * per channel: mean, 1 / sqrt(var + eps), and in backward the means of dy and dy * xhat; then an
 * arrival counter per channel, zero between launches.
 *
 * A ReLU after the layer (bn_batchnorm_fuse_relu) has both its passes done here: the forward
 * pass stores the ReLU's output and not the layer's, and the backward pass reads the ReLU's output
 * gradient, kept where the layer's output, recomputed from x as the forward pass computed and
 * rounded it, is above 0 (relu_after_grad_n): the ReLU's own mask, without its pass.
 *
 * Under --precision bf16 the data (x, y, dy, dx) is BF16 and the same kernels read it (element
 * type T, gpu/typed.cuh); the sums, the statistics, the running averages, the parameters (their
 * FP32 master copy) and their gradients stay as in FP32, and each output element is rounded to
 * BF16 once. */
#include <math.h>

#include <cooperative_groups.h>

#include "batchnorm.h"
#include "gpu/add_into.cuh"
#include "gpu/code_anchor.cuh"
#include "gpu/cuda_check.h"
#include "gpu/grid_stride.h"
#include "gpu/bf16.cuh"
#include "gpu/last_arrival.cuh"
#include "gpu/pdl.cuh"
#include "gpu/typed.cuh"

namespace cg = cooperative_groups;

#define THREADS 256 /* the per-element kernels' blocks too, as bn_grid_stride_blocks counts them */
#define PART_ELEMENTS 4096
#define MAX_PARTS 128

enum { P_WEIGHT, P_BIAS };
enum { B_MEAN, B_VAR };

typedef struct bn_geometry {
    int channels, plane, parts;
    long count; /* elements per channel: batch x plane */
} bn_geometry;

static int parts_for(long count)
{
    long p = (count + PART_ELEMENTS - 1) / PART_ELEMENTS;
    return (int)(p < 1 ? 1 : p > MAX_PARTS ? MAX_PARTS : p);
}

/* Sums of a and b over a block of NT threads, thread 0 holding them after: each warp's by
 * shuffles, then the warps' in warp order by the first warp, in a fixed order either way. */
template <int NT> static __device__ void block_sum2(double *a, double *b)
{
    __shared__ double sa[NT / 32], sb[NT / 32];
    double x = *a, y = *b;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        x += __shfl_down_sync(0xffffffffu, x, o);
        y += __shfl_down_sync(0xffffffffu, y, o);
    }
    const int warp = (int)threadIdx.x / 32, lane = (int)threadIdx.x % 32;
    if (lane == 0) sa[warp] = x, sb[warp] = y;
    __syncthreads();
    if (warp == 0) {
        x = lane < NT / 32 ? sa[lane] : 0.0;
        y = lane < NT / 32 ? sb[lane] : 0.0;
#pragma unroll
        for (int o = NT / 64; o > 0; o >>= 1) {
            x += __shfl_down_sync(0xffffffffu, x, o);
            y += __shfl_down_sync(0xffffffffu, y, o);
        }
    }
    *a = x;
    *b = y;
}

/* The per-element arithmetic both kernel sets share, on N values. Forward sums: x and x * x;
 * backward sums: dy and dy * xhat (mean and inv_std the forward's). */
template <int N>
static __device__ __forceinline__ void add_sums(const float *xv, const float *gv, bool back, float mean,
                                                float inv_std, double *a, double *b)
{
#pragma unroll
    for (int k = 0; k < N; k++) {
        if (back) {
            *a += gv[k];
            *b += (double)gv[k] * __fmul_rn(__fsub_rn(xv[k], mean), inv_std);
        } else {
            const double v = xv[k];
            *a += v;
            *b += v * v;
        }
    }
}

/* A channel's normalization as y = x * scale + shift: scale = weight / std and shift = bias -
 * mean * scale, in rounded operations. Every pass takes them from here, so that a backward pass
 * that recomputes y (relu_after_grad_n) gets the bits the forward pass stored. */
static __device__ __forceinline__ float channel_scale(float w, float inv_std)
{
    return __fmul_rn(w, inv_std);
}

static __device__ __forceinline__ float channel_shift(float bias, float mean, float scale)
{
    return __fsub_rn(bias, __fmul_rn(mean, scale));
}

/* y = x * scale + shift (channel_scale, channel_shift). */
template <int N> static __device__ __forceinline__ void normalize_n(float *v, float scale, float shift)
{
#pragma unroll
    for (int k = 0; k < N; k++) v[k] = __fadd_rn(__fmul_rn(v[k], scale), shift);
}

/* dx from x and dy (gv, replaced), the channel's 4 statistics s and scale = weight / std. */
template <int N>
static __device__ __forceinline__ void input_grad_n(const float *xv, float *gv, const float *s, float scale)
{
#pragma unroll
    for (int k = 0; k < N; k++) {
        const float xhat = __fmul_rn(__fsub_rn(xv[k], s[0]), s[1]);
        gv[k] = __fmul_rn(scale, __fsub_rn(__fsub_rn(gv[k], s[2]), __fmul_rn(xhat, s[3])));
    }
}

/* Stores an input gradient's N values at dx + at, or (add) adds them into those there: each value
 * rounded to T first, as a stored gradient part would be, then the sum rounded once, so that the
 * result is the bits of the network's sum of that part (add_into.cuh). */
template <typename T, int N>
static __device__ __forceinline__ void store_dx_n(T *__restrict__ dx, size_t at, float *gv, bool add)
{
    if (add) {
        float old[N];
        bn_ld_n<T, N>(&dx[at], old);
#pragma unroll
        for (int k = 0; k < N; k++) gv[k] = __fadd_rn(old[k], bn_rounded(dx, gv[k]));
    }
    bn_st_n<T, N>(&dx[at], gv);
}

/* A fused ReLU's input gradient: dx where x, the ReLU's output, is above 0. */
template <int N> static __device__ __forceinline__ void relu_grad_n(const float *xv, float *gv)
{
#pragma unroll
    for (int k = 0; k < N; k++) gv[k] = xv[k] > 0.0f ? gv[k] : 0.0f;
}

/* The backward pass of a fused ReLU after the layer (bn_args.relu_back): the ReLU's output
 * gradient gv kept where the layer's output is above 0 (activation.c's rule), that output
 * recomputed from x with the forward pass's expression and rounded to the blobs' type T as the
 * forward pass stored it, so the mask is the one the ReLU's own pass would take. */
template <typename T, int N>
static __device__ __forceinline__ void relu_after_grad_n(const float *xv, float *gv, float scale, float shift)
{
#pragma unroll
    for (int k = 0; k < N; k++) {
        const float y = bn_rounded((const T *)nullptr, __fadd_rn(__fmul_rn(xv[k], scale), shift));
        gv[k] = y > 0.0f ? gv[k] : 0.0f;
    }
}

/* Channel c's statistics from its sums over the batch. Forward in training: the batch's mean and
 * 1 / sqrt(var + eps), put in st[0..1]; where `owner`, also in the channel's stats and the running
 * averages moved (the fused kernel's other blocks of the channel compute the same floats). */
static __device__ void channel_forward_stats(const bn_geometry &g, int c, double sum, double sq, float *st, bool owner,
                                             float *stats, float *rm, float *rv, double momentum, double eps)
{
    double n = (double)g.count, mean = sum / n, var = fmax(sq / n - mean * mean, 0.0);
    double unbiased = g.count > 1 ? var * n / (n - 1.0) : var;
    st[0] = (float)mean;
    st[1] = (float)(1.0 / sqrt(var + eps));
    if (!owner) return;
    stats[4 * c] = st[0];
    stats[4 * c + 1] = st[1];
    rm[c] = (float)((1.0 - momentum) * rm[c] + momentum * mean);
    rv[c] = (float)((1.0 - momentum) * rv[c] + momentum * unbiased);
}

/* Backward: the means of dy and dy * xhat that the input gradient subtracts (0 after an
 * evaluation forward, whose statistics are fixed), put in st[2..3]; where `owner`, also in the
 * channel's stats, and the parameter gradients added in. */
static __device__ void channel_backward_stats(const bn_geometry &g, int c, double sum_dy, double sum_dy_xhat,
                                              float *st, bool owner, float *stats, float *__restrict__ dw,
                                              float *__restrict__ db, int trained)
{
    st[2] = trained ? (float)(sum_dy / (double)g.count) : 0.0f;
    st[3] = trained ? (float)(sum_dy_xhat / (double)g.count) : 0.0f;
    if (!owner) return;
    dw[c] += (float)sum_dy_xhat;
    db[c] += (float)sum_dy;
    stats[4 * c + 2] = st[2];
    stats[4 * c + 3] = st[3];
}

/* What the last block of a channel does once every part's sums are in (statistics' kernel
 * arguments that partial_sums passes on). */
typedef struct bn_finish {
    unsigned *arrivals;  /* a counter per channel */
    float *stats;        /* 4 floats per channel */
    float *rm, *rv;      /* forward: the running averages */
    double momentum, eps;
    float *dw, *db;      /* backward: the parameter gradients */
    int trained;
} bn_finish;

/* What the backward pass of a fused ReLU after the layer needs to recompute the layer's output:
 * the parameters (bias NULL where there is no such ReLU). */
typedef struct bn_relu_back {
    const float *w, *bias;
} bn_relu_back;

/* Channel c's scale and shift, as the forward pass computed them from the same statistics. */
static __device__ __forceinline__ void relu_back_params(const bn_relu_back &r, const float *stats, int c,
                                                        float *scale, float *shift)
{
    *scale = channel_scale(r.w[c], stats[4 * c + 1]);
    *shift = channel_shift(r.bias[c], stats[4 * c], *scale);
}

/* The per-element kernels work on packs of N elements (N = 1, or bn_pack<T>::N: 16 bytes, where
 * every pointer is 16-byte aligned and the plane a multiple of N, so that a pack never spans two
 * planes; bn_ld_n and bn_st_n in gpu/bf16.cuh) and count packs in the index type I: unsigned
 * where the blob's packs fit in 31 bits (32-bit divisions, several times cheaper than 64-bit
 * ones), else size_t.
 *
 * Block (part, channel): sum x and sum x * x over its span of the channel's packs (forward), or
 * sum dy and sum dy * xhat (backward, stats holding each channel's mean and 1 / sqrt(var + eps)).
 * Pack q of the channel is at plane q / row (row: packs per plane), offset q % row in it. Then
 * the channel's last block to finish adds the parts (bn_finish). */
template <typename T, int N, typename I>
static __global__ void __launch_bounds__(THREADS)
    partial_sums(bn_geometry g, const T *__restrict__ x, size_t x_gap, const T *__restrict__ dy,
                 const T *__restrict__ dy_part, size_t dy_gap, const float *stats, bn_relu_back r,
                 double *__restrict__ sums, bn_finish f)
{
    bn_early_entry(); /* pdl.cuh */
    const int c = blockIdx.y, part = blockIdx.x;
    const I row = (I)(g.plane / N), packs = (I)(g.count / N), span = (packs + g.parts - 1) / g.parts;
    const I lo = part * span, hi = lo + span < packs ? lo + span : packs;
    double a = 0.0, b = 0.0;
    float mean = dy ? stats[4 * c] : 0.0f, inv_std = dy ? stats[4 * c + 1] : 0.0f;
    float r_scale, r_shift;
    if (r.bias) relu_back_params(r, stats, c, &r_scale, &r_shift);
    /* The thread's packs lo + threadIdx.x, then THREADS apart: example e, offset o in its plane,
     * divided out once and then stepped (de examples and dq packs a step, dq < row). */
    const I first = lo + threadIdx.x, de = (I)THREADS / row, dq = (I)THREADS - de * row;
    I e = first / row, o = first - e * row;
    const size_t estride = (size_t)g.channels * g.plane;
#pragma unroll 4
    for (I q = first; q < hi; q += THREADS) {
        const size_t i = (size_t)e * estride + (size_t)c * g.plane + (size_t)o * N, di = i + (size_t)e * dy_gap;
        const size_t xi = i + (size_t)e * x_gap;
        e += de;
        o += dq;
        if (o >= row) o -= row, e++;
        float xv[N], gv[N];
        bn_ld_n<T, N>(&x[xi], xv);
        if (dy) bn_ld_grad_n<T, N>(dy, dy_part, di, gv);
        if (dy && r.bias) relu_after_grad_n<T, N>(xv, gv, r_scale, r_shift);
        add_sums<N>(xv, gv, dy != NULL, mean, inv_std, &a, &b);
    }
    block_sum2<THREADS>(&a, &b);
    if (threadIdx.x == 0) {
        sums[2 * ((size_t)c * g.parts + part)] = a;
        sums[2 * ((size_t)c * g.parts + part) + 1] = b;
    }
    if (!bn_last_arrival(&f.arrivals[c], (unsigned)g.parts) || threadIdx.x != 0) return;
    a = b = 0.0;
    for (int p = 0; p < g.parts; p++) {
        a += sums[2 * ((size_t)c * g.parts + p)];
        b += sums[2 * ((size_t)c * g.parts + p) + 1];
    }
    float st[4];
    if (dy) channel_backward_stats(g, c, a, b, st, true, f.stats, f.dw, f.db, f.trained);
    else channel_forward_stats(g, c, a, b, st, true, f.stats, f.rm, f.rv, f.momentum, f.eps);
}

/* One thread per channel, in evaluation: the running averages' statistics. */
static __global__ void eval_stats(bn_geometry g, float *stats, const float *rm, const float *rv, double eps)
{
    bn_early_entry(); /* pdl.cuh */
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= g.channels) return;
    stats[4 * c] = rm[c];
    stats[4 * c + 1] = (float)(1.0 / sqrt((double)rv[c] + eps));
}

/* Pack i of the blob belongs to channel (i / row) % channels of example (i / row) / channels. A
 * fused ReLU after the layer (relu_y not NULL) gets its output from the same values, by the CPU's
 * rule (activation.c), its examples relu_gap elements further apart than y's (a slice of a
 * channel join's output, blob.h; 0 when packed). x's examples are x_gap elements further apart
 * than y's (a join's output nested in a later join's, fusion.c). */
template <typename T, int N, typename I>
static __global__ void normalize(bn_geometry g, I packs, const T *__restrict__ x, size_t x_gap, const float *stats,
                                 const float *__restrict__ w, const float *__restrict__ b, T *__restrict__ y,
                                 T *__restrict__ relu_y, size_t relu_gap)
{
    bn_early_entry(); /* pdl.cuh */
    const I row = (I)(g.plane / N), stride = (I)gridDim.x * blockDim.x;
    for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < packs; i += stride) {
        const I plane = i / row, e = plane / (I)g.channels;
        const int c = (int)(plane - e * (I)g.channels);
        const float scale = channel_scale(w[c], stats[4 * c + 1]);
        const float shift = channel_shift(b[c], stats[4 * c], scale);
        float v[N];
        bn_ld_n<T, N>(&x[(size_t)i * N + (size_t)e * x_gap], v);
        normalize_n<N>(v, scale, shift);
        bn_st_n_relu<T, N>(y, relu_y, (size_t)i * N, (size_t)i * N + (size_t)e * relu_gap, v);
    }
}

/* A fused ReLU before the layer (relu_dx not NULL) gets its input gradient too: dx where the
 * ReLU's output, this layer's input, is above 0, else 0 (activation.c's rule). dx's examples are
 * dx_gap elements further apart than a packed blob's, and with dx_add the gradient is added into
 * them (a nested join's gradient, bn_layer.adds_in_grad). */
template <typename T, int N, typename I>
static __global__ void input_grad(bn_geometry g, I packs, const T *__restrict__ x, size_t x_gap,
                                  const T *__restrict__ dy, const T *__restrict__ dy_part, size_t dy_gap,
                                  const float *stats, const float *__restrict__ w, bn_relu_back r,
                                  T *__restrict__ dx, size_t dx_gap, bool dx_add, T *__restrict__ relu_dx)
{
    bn_early_entry(); /* pdl.cuh */
    const I row = (I)(g.plane / N), stride = (I)gridDim.x * blockDim.x;
    for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < packs; i += stride) {
        const I plane = i / row, e = plane / (I)g.channels;
        const int c = (int)(plane - e * (I)g.channels);
        const float *s = stats + 4 * c;
        const float scale = channel_scale(w[c], s[1]);
        float xv[N], gv[N];
        bn_ld_n<T, N>(&x[(size_t)i * N + (size_t)e * x_gap], xv);
        bn_ld_grad_n<T, N>(dy, dy_part, (size_t)i * N + (size_t)e * dy_gap, gv);
        if (r.bias) relu_after_grad_n<T, N>(xv, gv, scale, channel_shift(r.bias[c], s[0], scale));
        input_grad_n<N>(xv, gv, s, scale);
        store_dx_n<T, N>(dx, (size_t)i * N + (size_t)e * dx_gap, gv, dx_add);
        if (!relu_dx) continue;
        relu_grad_n<N>(xv, gv);
        bn_st_n<T, N>(&relu_dx[(size_t)i * N], gv);
    }
}

extern "C" void bn_batchnorm_gpu_release(batchnorm_priv *b)
{
    bn_device_free(b->dev_sums);
    b->dev_sums = NULL;
}

/* The geometry of the current batch and the scratch, made for the blob's capacity once. */
static bn_status prepare(bn_layer *l, bn_geometry *g, float **stats)
{
    batchnorm_priv *b = (batchnorm_priv *)l->priv;
    *g = (bn_geometry){b->channels, b->plane, 0, (long)l->in->n * b->plane};
    g->parts = parts_for(g->count);
    if (!b->dev_sums) {
        long cap = (long)(l->in->capacity / ((size_t)b->channels * b->plane));
        b->dev_parts = parts_for(cap * b->plane);
        size_t bytes = 2 * sizeof(double) * (size_t)b->channels * b->dev_parts + 4 * sizeof(float) * b->channels;
        BN_TRY(bn_device_alloc((void **)&b->dev_sums, bytes + sizeof(unsigned) * b->channels));
        BN_TRY(bn_device_zero((char *)b->dev_sums + bytes, sizeof(unsigned) * b->channels));
    }
    *stats = (float *)(b->dev_sums + 2 * (size_t)b->channels * b->dev_parts);
    return BN_OK;
}

/* The per-channel arrival counters, after the statistics. */
static unsigned *arrivals_of(const batchnorm_priv *b, float *stats)
{
    return (unsigned *)(stats + 4 * (size_t)b->channels);
}

/* One pass's device pointers (dy and dx NULL in the forward pass, y in the backward one). */
template <typename T> struct bn_args {
    const T *x, *dy;
    const T *dy_part; /* backward: a second reader's part of dy, added as it is loaded (bn_pass.dy_part) */
    T *y, *dx;           /* y NULL where a fused ReLU after the layer does not read it (relu_back) */
    T *relu_y, *relu_dx; /* a fused ReLU's output or input gradient, or NULL */
    size_t relu_gap;     /* relu_y's examples this many elements further apart than y's */
    size_t dy_gap;       /* backward: dy's examples this many elements further apart than a packed
                          * blob's (the output gradient of a ReLU done here that is a slice of a
                          * join's) */
    size_t x_gap;        /* x's likewise (a join's output nested in a later join's: in_slices) */
    size_t dx_gap;       /* backward: dx's likewise, where it is that join's gradient */
    bool dx_add;         /* backward: dx is added into that gradient, not stored (adds_in_grad) */
    const float *w, *bias;
    float *rm, *rv, *dw, *db;
    bn_relu_back relu_back; /* backward: the ReLU after the layer's pass done here (bias not NULL), dy
                             * being its output gradient */
};

/* ---- one kernel a pass where a channel fits in a cluster's registers ---- */

/* Blocks of 256 threads: against 512, resnet_fashion's step at batch 64 took 1046 us against
 * 1082 (more blocks, spread over more multiprocessors, for the same values a thread). */
#define FUSED_THREADS 256
#define FUSED_MAX_RANKS 8 /* blocks a cluster: the portable limit */

/* A training forward (BACK false) or a backward pass in one launch, where each channel's values
 * fit in the registers of a cluster of blocks (grid: ranks x channels, one cluster a channel):
 * each thread loads its R packs of the channel (x, and dy in backward) once and adds their sums,
 * the blocks' sums are added in rank order through the cluster's shared memory (the same order
 * in every block, so every block finishes the same statistics), and each block then writes the
 * outputs of the values it holds. Against partial_sums and a per-element kernel: one read of the
 * data instead of two, and no kernel boundary, no global scratch and no arrival counter between
 * the sums and the outputs; at small batches those fixed costs were most of the layer's time.
 * Pack q of the channel is the thread's k-th where q = threadIdx.x + FUSED_THREADS * (rank +
 * ranks * k), its example and offset divided out once and then stepped (as in partial_sums).
 * XB (backward only): the pass may have extras (bn_args.relu_back, dy_part, dy_gap); SL: x, and in
 * backward dx, may be a nested join's slices (x_gap, dx_gap, dx_add). Without them those are
 * ignored: in the extras' kernel the slices' arithmetic cost mlp_bn's two backward passes 4.9 us a
 * step where no slice was given (version 93). Hopper's clusters (sm_90);
 * launch_fused runs it only where the device has them. */
template <typename T, int N, int R, bool BACK, bool XB, bool SL>
static __global__ void __launch_bounds__(FUSED_THREADS)
    fused_pass(bn_geometry g, bn_args<T> a, float *stats, bn_finish f)
{
    bn_early_entry(); /* pdl.cuh */
#if __CUDA_ARCH__ >= 900
    cg::cluster_group cluster = cg::this_cluster();
    const int c = blockIdx.y;
    const unsigned rank = cluster.block_rank(), ranks = cluster.num_blocks();
    const unsigned row = (unsigned)(g.plane / N), packs = (unsigned)(g.count / N);
    const size_t estride = (size_t)g.channels * g.plane, cbase = (size_t)c * g.plane;
    __shared__ double part[2];
    __shared__ float st[4];
    const float mean = BACK ? stats[4 * c] : 0.0f, inv_std = BACK ? stats[4 * c + 1] : 0.0f;
    /* Every load first, then the sums: loads and sums in one loop, each load behind the last
     * one's sums, had the packs' latencies one after another (stage one of resnet_fashion at
     * batch 64: 17.5 us a forward pass against 11 on two kernels). Packs past the channel are
     * zeros, which add nothing. */
    const unsigned first = threadIdx.x + FUSED_THREADS * rank, step = FUSED_THREADS * ranks;
    const unsigned de = step / row, dq = step - de * row, e0 = first / row, o0 = first - e0 * row;
    float xv[R][N], gv[R][BACK ? N : 1];
    unsigned e = e0, o = o0;
#pragma unroll
    for (int k = 0; k < R; k++) {
        const unsigned q = first + step * k;
        const size_t at = (size_t)e * estride + cbase + (size_t)o * N, dy_at = XB ? at + (size_t)e * a.dy_gap : at;
        const size_t x_at = SL ? at + (size_t)e * a.x_gap : at;
        e += de;
        o += dq;
        if (o >= row) o -= row, e++;
#pragma unroll
        for (int j = 0; j < N; j++) xv[k][j] = 0.0f;
        if (BACK) {
#pragma unroll
            for (int j = 0; j < N; j++) gv[k][j] = 0.0f;
        }
        if (q >= packs) continue;
        bn_ld_n<T, N>(&a.x[x_at], xv[k]);
        if (BACK) bn_ld_n<T, N>(&a.dy[dy_at], gv[k]);
    }
    /* A second reader's part (with a whole dy only, so at its packs' places), after every load of
     * dy: a test between the loads had the compiler wait on each before the next. */
    if (XB && a.dy_part) {
        e = e0;
        o = o0;
#pragma unroll
        for (int k = 0; k < R; k++) {
            const unsigned q = first + step * k;
            const size_t at = (size_t)e * estride + cbase + (size_t)o * N;
            e += de;
            o += dq;
            if (o >= row) o -= row, e++;
            if (q < packs) bn_add_part_n<T, N>(a.dy_part, at, gv[k]);
        }
    }
    if (XB && a.relu_back.bias) {
        float r_scale, r_shift;
        relu_back_params(a.relu_back, stats, c, &r_scale, &r_shift);
#pragma unroll
        for (int k = 0; k < R; k++) relu_after_grad_n<T, N>(xv[k], gv[k], r_scale, r_shift);
    }
    double s0 = 0.0, s1 = 0.0;
#pragma unroll
    for (int k = 0; k < R; k++) add_sums<N>(xv[k], gv[k], BACK, mean, inv_std, &s0, &s1);
    block_sum2<FUSED_THREADS>(&s0, &s1);
    if (threadIdx.x == 0) part[0] = s0, part[1] = s1;
    cluster.sync();
    if (threadIdx.x == 0) {
        double t0 = 0.0, t1 = 0.0;
        for (unsigned r = 0; r < ranks; r++) {
            const double *p = cluster.map_shared_rank(part, r);
            t0 += p[0];
            t1 += p[1];
        }
        if (BACK) {
            st[0] = mean;
            st[1] = inv_std;
            channel_backward_stats(g, c, t0, t1, st, rank == 0, f.stats, f.dw, f.db, f.trained);
        } else {
            channel_forward_stats(g, c, t0, t1, st, rank == 0, f.stats, f.rm, f.rv, f.momentum, f.eps);
        }
    }
    /* After this no block reads another's shared memory, so each may finish on its own. */
    cluster.sync();
    if (BACK && !a.dx) return;
    const float scale = channel_scale(a.w[c], st[1]);
    const float shift = BACK ? 0.0f : channel_shift(a.bias[c], st[0], scale);
    e = e0;
    o = o0;
#pragma unroll
    for (int k = 0; k < R; k++) {
        const unsigned q = first + step * k, ex = e;
        const size_t at = (size_t)e * estride + cbase + (size_t)o * N;
        e += de;
        o += dq;
        if (o >= row) o -= row, e++;
        if (q >= packs) continue;
        if (BACK) {
            input_grad_n<N>(xv[k], gv[k], st, scale);
            if (SL) store_dx_n<T, N>(a.dx, at + (size_t)ex * a.dx_gap, gv[k], a.dx_add);
            else bn_st_n<T, N>(&a.dx[at], gv[k]);
            if (!a.relu_dx) continue;
            relu_grad_n<N>(xv[k], gv[k]);
            bn_st_n<T, N>(&a.relu_dx[at], gv[k]);
        } else {
            normalize_n<N>(xv[k], scale, shift);
            bn_st_n_relu<T, N>(a.y, a.relu_y, at, at + (size_t)ex * a.relu_gap, xv[k]);
        }
    }
#endif
}

/* The fused pass's shape for a channel of `packs` packs of N: R packs a thread and the cluster's
 * blocks, the fewer of two sizes a thread (8 values, or 32 in packs and 16 one at a time, whose
 * index arithmetic is a division a value) that a cluster of at most 8 blocks can hold; false
 * where neither can (the two-kernel path then). */
static bool fused_shape(long packs, int N, int *r, int *ranks)
{
    const int sizes[2] = {8 / N, N == 1 ? 16 : 32 / N};
    for (int i = 0; i < 2; i++) {
        const long per_block = (long)FUSED_THREADS * sizes[i];
        const long need = (packs + per_block - 1) / per_block;
        if (need <= FUSED_MAX_RANKS) {
            *r = sizes[i];
            *ranks = (int)(need < 1 ? 1 : need);
            return true;
        }
    }
    return false;
}

template <typename T, int N, int R, bool BACK, bool XB, bool SL>
static cudaError_t launch_fused_as(int ranks, const bn_geometry &g, const bn_args<T> &a, float *stats,
                                   const bn_finish &f, cudaStream_t s)
{
    cudaLaunchAttribute attr[2];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = (unsigned)ranks;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    attr[1] = bn_early_attribute(); /* launched early, as bn_launch_early */
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)ranks, (unsigned)g.channels);
    cfg.blockDim = dim3(FUSED_THREADS);
    cfg.stream = s;
    cfg.attrs = attr;
    cfg.numAttrs = 2;
    return cudaLaunchKernelEx(&cfg, fused_pass<T, N, R, BACK, XB, SL>, g, a, stats, f);
}

/* The fused pass at R packs a thread, in the kernel that has the extras asked for and no others: the
 * slices' (sl) also have every backward extra, so that there are three kernels a direction, not four. */
template <typename T, int N, int R, bool BACK>
static cudaError_t launch_fused_kind(bool xb, bool sl, int ranks, const bn_geometry &g, const bn_args<T> &a,
                                     float *stats, const bn_finish &f, cudaStream_t s)
{
    if (sl) return launch_fused_as<T, N, R, BACK, BACK, true>(ranks, g, a, stats, f, s);
    if (xb) return launch_fused_as<T, N, R, BACK, BACK, false>(ranks, g, a, stats, f, s);
    return launch_fused_as<T, N, R, BACK, false, false>(ranks, g, a, stats, f, s);
}

/* Queues the fused pass where the device has clusters and the channel fits; false where the
 * two-kernel path is to run instead (a launch the device refused is remembered, and its error
 * cleared, so that the layer does not try again). */
template <typename T, int N, bool BACK>
static bool launch_fused(batchnorm_priv *b, const bn_pass *p, const bn_geometry &g, const bn_args<T> &a,
                         float *stats, const bn_finish &f, cudaStream_t s)
{
    int r, ranks;
    if (b->dev_fused == 0) {
        int yes = 0;
        b->dev_fused = cudaDeviceGetAttribute(&yes, cudaDevAttrClusterLaunch, p->ctx->device) == cudaSuccess && yes
                           ? 1 : -1;
        cudaGetLastError();
    }
    if (b->dev_fused < 0 || g.channels > 65535 || !fused_shape(g.count / N, N, &r, &ranks)) return false;
    cudaError_t e = cudaErrorInvalidValue;
    /* The extras (in backward a ReLU after it, a part, a sliced dy) and the nested join's slices
     * in kernels of their own: in the plain one the extras cost bf16's 4-pack pass 3 us of 17 even
     * where none was given. */
    const bool xb = BACK && (a.relu_back.bias || a.dy_part || a.dy_gap);
    const bool sl = a.x_gap || (BACK && (a.dx_gap || a.dx_add));
    if (r == 8 / N) e = launch_fused_kind<T, N, 8 / N, BACK>(xb, sl, ranks, g, a, stats, f, s);
    else e = launch_fused_kind<T, N, N == 1 ? 16 : 32 / N, BACK>(xb, sl, ranks, g, a, stats, f, s);
    if (e != cudaSuccess) {
        cudaGetLastError();
        b->dev_fused = -2;
        return false;
    }
    b->fused_passes++;
    return true;
}

template <typename T, int N, typename I>
static bn_status queue_forward(batchnorm_priv *b, const bn_pass *p, const bn_geometry &g, const bn_args<T> &a,
                               float *stats, int train, size_t total, cudaStream_t s)
{
    if (train) {
        const bn_finish f = {arrivals_of(b, stats), stats, a.rm, a.rv, b->momentum, b->eps, NULL, NULL, 0};
        if (launch_fused<T, N, false>(b, p, g, a, stats, f, s)) return BN_OK;
        b->split_passes++;
        bn_launch_early(partial_sums<T, N, I>, dim3(g.parts, g.channels), THREADS, 0, s, g, a.x, a.x_gap,
                        (const T *)NULL, (const T *)NULL, (size_t)0, (const float *)NULL, a.relu_back, b->dev_sums, f);
    } else {
        bn_launch_early(eval_stats, (g.channels + 127) / 128, 128, 0, s, g, stats, a.rm, a.rv, b->eps);
    }
    BN_CUDA_LAUNCH();
    bn_launch_early(normalize<T, N, I>, bn_grid_stride_blocks(total / N), THREADS, 0, s, g, (I)(total / N), a.x,
                    a.x_gap, stats, a.w, a.bias, a.y, a.relu_y, a.relu_gap);
    BN_CUDA_LAUNCH();
    return BN_OK;
}

template <typename T, int N, typename I>
static bn_status queue_backward(batchnorm_priv *b, const bn_pass *p, const bn_geometry &g, const bn_args<T> &a,
                                float *stats, size_t total, cudaStream_t s)
{
    const bn_finish f = {arrivals_of(b, stats), stats, NULL, NULL, 0.0, 0.0, a.dw, a.db, b->trained};
    if (launch_fused<T, N, true>(b, p, g, a, stats, f, s)) return BN_OK;
    b->split_passes++;
    bn_launch_early(partial_sums<T, N, I>, dim3(g.parts, g.channels), THREADS, 0, s, g, a.x, a.x_gap, a.dy, a.dy_part,
                    a.dy_gap, stats, a.relu_back, b->dev_sums, f);
    BN_CUDA_LAUNCH();
    if (!a.dx) return BN_OK;
    bn_launch_early(input_grad<T, N, I>, bn_grid_stride_blocks(total / N), THREADS, 0, s, g, (I)(total / N), a.x,
                    a.x_gap, a.dy, a.dy_part, a.dy_gap, stats, a.w, a.relu_back, a.dx, a.dx_gap, a.dx_add, a.relu_dx);
    BN_CUDA_LAUNCH();
    return BN_OK;
}

/* Whether the pass may take packs of bn_pack<T>::N (see partial_sums). */
template <typename T> static bool packed(const bn_geometry &g, const bn_args<T> &a)
{
    const void *p[7] = {a.x, a.dy, a.dy_part, a.y, a.dx, a.relu_y, a.relu_dx};
    bool ok = g.plane % bn_pack<T>::N == 0 && a.relu_gap % bn_pack<T>::N == 0 && a.dy_gap % bn_pack<T>::N == 0 &&
              a.x_gap % bn_pack<T>::N == 0 && a.dx_gap % bn_pack<T>::N == 0;
    for (int i = 0; i < 7; i++) ok = ok && (!p[i] || bn_aligned16(p[i]));
    return ok;
}

template <typename T> static bn_status forward_as(bn_layer *l, const bn_pass *p)
{
    batchnorm_priv *b = (batchnorm_priv *)l->priv;
    bn_geometry g;
    float *stats;
    BN_TRY(prepare(l, &g, &stats));
    cudaStream_t s = (cudaStream_t)p->ctx->stream;
    bn_args<T> a = {};
    /* x may be a join's output nested in a later join's (in_slices). */
    const size_t per = (size_t)l->out->c * l->out->h * l->out->w;
    size_t x_stride = 0;
    if (!(a.x = bn_typed_rows_rd<T>(l->in, &x_stride))) return bn_last_status();
    a.x_gap = x_stride - per;
    if (!(a.w = bn_blob_dev_rd(l->params[P_WEIGHT].value)) ||
        !(a.bias = bn_blob_dev_rd(l->params[P_BIAS].value)) || !(a.rm = bn_blob_dev_wr(l->buffers[B_MEAN].value)) ||
        !(a.rv = bn_blob_dev_wr(l->buffers[B_VAR].value)) || (!b->relu_back && !(a.y = bn_typed_wr<T>(l->out))))
        return bn_last_status();
    /* The ReLU's output may be a slice of a channel join's (act_out_slices). */
    size_t relu_stride = 0;
    if (b->relu_after && !(a.relu_y = bn_typed_rows_wr<T>(b->relu_after->out, &relu_stride)))
        return bn_last_status();
    a.relu_gap = a.relu_y ? relu_stride - per : 0;
    b->trained = p->train;
    const size_t total = bn_blob_count(l->out);
    const int N = bn_pack<T>::N;
    if (packed(g, a))
        return bn_index_fits_32(total) ? queue_forward<T, N, unsigned>(b, p, g, a, stats, p->train, total, s)
                             : queue_forward<T, N, size_t>(b, p, g, a, stats, p->train, total, s);
    return bn_index_fits_32(total) ? queue_forward<T, 1, unsigned>(b, p, g, a, stats, p->train, total, s)
                         : queue_forward<T, 1, size_t>(b, p, g, a, stats, p->train, total, s);
}

template <typename T> static bn_status backward_as(bn_layer *l, const bn_pass *p)
{
    batchnorm_priv *b = (batchnorm_priv *)l->priv;
    bn_geometry g;
    float *stats;
    BN_TRY(prepare(l, &g, &stats));
    cudaStream_t s = (cudaStream_t)p->ctx->stream;
    bn_args<T> a = {};
    /* With the ReLU after it done here, the gradient read is the ReLU's output gradient, which may
     * be a slice of a channel join's (act_out_slices); a second reader's part comes only with a
     * whole one. */
    size_t dy_stride = 0;
    const size_t per = (size_t)l->out->c * l->out->h * l->out->w;
    if (b->relu_back && !(a.relu_back.bias = bn_blob_dev_rd(l->params[P_BIAS].value))) return bn_last_status();
    a.relu_back.w = a.relu_back.bias ? bn_blob_dev_rd(l->params[P_WEIGHT].value) : NULL;
    if (!(a.dy = bn_typed_rows_rd<T>(b->relu_back ? b->relu_after->out_grad : l->out_grad, &dy_stride)))
        return bn_last_status();
    a.dy_gap = dy_stride - per;
    if (p->dy_part && (a.dy_gap || !(a.dy_part = bn_typed_rd<T>(p->dy_part))))
        return a.dy_gap ? bn_error(BN_ERR_INTERNAL, "%s: a gradient part given with a sliced gradient", l->name)
                        : bn_last_status();
    size_t x_stride = 0;
    if (!(a.x = bn_typed_rows_rd<T>(l->in, &x_stride))) return bn_last_status();
    a.x_gap = x_stride - per;
    if (!(a.w = bn_blob_dev_rd(l->params[P_WEIGHT].value)) || !(a.dw = bn_blob_dev_wr(l->params[P_WEIGHT].grad)) ||
        !(a.db = bn_blob_dev_wr(l->params[P_BIAS].grad)) ||
        (l->in_grad && b->relu_before && !(a.relu_dx = bn_typed_wr<T>(b->relu_before->in_grad))))
        return bn_last_status();
    /* The input gradient: stored, or added at its stride into a nested join's (adds_in_grad). */
    if (l->in_grad && l->adds_in_grad) {
        size_t dx_stride = 0;
        if (!(a.dx = bn_typed_rows_wr<T>(l->in_grad, &dx_stride))) return bn_last_status();
        a.dx_gap = dx_stride - per;
        a.dx_add = true;
    } else if (l->in_grad && !(a.dx = bn_typed_wr<T>(l->in_grad))) {
        return bn_last_status();
    }
    const size_t total = bn_blob_count(l->in);
    const int N = bn_pack<T>::N;
    if (packed(g, a))
        return bn_index_fits_32(total) ? queue_backward<T, N, unsigned>(b, p, g, a, stats, total, s)
                             : queue_backward<T, N, size_t>(b, p, g, a, stats, total, s);
    return bn_index_fits_32(total) ? queue_backward<T, 1, unsigned>(b, p, g, a, stats, total, s)
                         : queue_backward<T, 1, size_t>(b, p, g, a, stats, total, s);
}

extern "C" bn_status bn_batchnorm_forward_gpu(bn_layer *l, const bn_pass *p)
{
    if (bn_blob_is_bf16(l->out)) return forward_as<__nv_bfloat16>(l, p);
    return forward_as<float>(l, p);
}

extern "C" bn_status bn_batchnorm_backward_gpu(bn_layer *l, const bn_pass *p)
{
    if (bn_blob_is_bf16(l->out_grad)) return backward_as<__nv_bfloat16>(l, p);
    return backward_as<float>(l, p);
}

extern "C" int bn_batchnorm_fuse_relu(bn_layer *l, bn_layer *relu, int after)
{
    batchnorm_priv *b = (batchnorm_priv *)l->priv;
    if (!after) {
        b->relu_before = relu;
        return 1;
    }
    b->relu_after = relu;
    /* The backward pass too where both gradients are kept: the layer's output is then read by
     * nothing (its backward pass reads its input), so the forward pass stores the ReLU's only. */
    b->relu_back = relu->out_grad && l->out_grad;
    return b->relu_back ? BN_FUSED_FORWARD | BN_FUSED_NO_IN | BN_FUSED_BACKWARD | BN_FUSED_NO_IN_GRAD : 1;
}

BN_CODE_ANCHOR(batchnorm, eval_stats) /* code_load.cu */
