/* batchnorm.cu - batch normalization on the GPU, deterministic: each channel's sums are taken in
 * double by a fixed grid of (part, channel) blocks, then added part by part in order by one
 * thread per channel, which also moves the running averages; the per-element passes use the
 * CPU path's float expressions with rounded operations the compiler may not fuse, so the two
 * paths differ only by the order of the double sums.
 *
 * Scratch (dev_sums, sized for the batch capacity): 2 doubles per (channel, part), then 4 floats
 * per channel: mean, 1 / sqrt(var + eps), and in backward the means of dy and dy * xhat.
 *
 * Under --precision bf16 the data (x, y, dy, dx) is BF16 and the same kernels read it (element
 * type T, gpu/typed.cuh); the sums, the statistics, the running averages, the parameters (their
 * FP32 master copy) and their gradients stay as in FP32, and each output element is rounded to
 * BF16 once. */
#include <math.h>

#include "batchnorm.h"
#include "gpu/cuda_check.h"
#include "gpu/bf16.cuh"
#include "gpu/typed.cuh"

#define THREADS 256
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

/* Sums of a and b over the block, thread 0 holding them after. */
static __device__ void block_sum2(double *a, double *b)
{
    __shared__ double sa[THREADS], sb[THREADS];
    sa[threadIdx.x] = *a;
    sb[threadIdx.x] = *b;
    __syncthreads();
    for (int s = THREADS / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) {
            sa[threadIdx.x] += sa[threadIdx.x + s];
            sb[threadIdx.x] += sb[threadIdx.x + s];
        }
        __syncthreads();
    }
    *a = sa[0];
    *b = sb[0];
}

/* The element offset of the m-th element of channel c. */
static __device__ size_t at(const bn_geometry g, int c, long m)
{
    long e = m / g.plane;
    return ((size_t)e * g.channels + c) * (size_t)g.plane + (size_t)(m - e * g.plane);
}

/* Block (part, channel): sum x and sum x * x over its span (forward), or sum dy and
 * sum dy * xhat (backward, stats holding each channel's mean and 1 / sqrt(var + eps)). */
template <typename T>
static __global__ void __launch_bounds__(THREADS)
    partial_sums(bn_geometry g, const T *__restrict__ x, const T *__restrict__ dy, const float *stats,
                 double *__restrict__ sums)
{
    int c = blockIdx.y, part = blockIdx.x;
    long span = (g.count + g.parts - 1) / g.parts, lo = part * span, hi = min(g.count, lo + span);
    double a = 0.0, b = 0.0;
    float mean = dy ? stats[4 * c] : 0.0f, inv_std = dy ? stats[4 * c + 1] : 0.0f;
    for (long m = lo + threadIdx.x; m < hi; m += THREADS) {
        size_t i = at(g, c, m);
        if (dy) {
            float grad = bn_ld(&dy[i]);
            a += grad;
            b += (double)grad * __fmul_rn(__fsub_rn(bn_ld(&x[i]), mean), inv_std);
        } else {
            double v = bn_ld(&x[i]);
            a += v;
            b += v * v;
        }
    }
    block_sum2(&a, &b);
    if (threadIdx.x == 0) {
        sums[2 * ((size_t)c * g.parts + part)] = a;
        sums[2 * ((size_t)c * g.parts + part) + 1] = b;
    }
}

/* One thread per channel. Forward in training: the batch's mean and 1 / sqrt(var + eps), and
 * the running averages moved; in evaluation: the running averages' (sums NULL). */
static __global__ void forward_stats(bn_geometry g, const double *__restrict__ sums, float *stats, float *rm, float *rv,
                                     double momentum, double eps)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= g.channels) return;
    if (!sums) {
        stats[4 * c] = rm[c];
        stats[4 * c + 1] = (float)(1.0 / sqrt((double)rv[c] + eps));
        return;
    }
    double sum = 0.0, sq = 0.0;
    for (int p = 0; p < g.parts; p++) {
        sum += sums[2 * ((size_t)c * g.parts + p)];
        sq += sums[2 * ((size_t)c * g.parts + p) + 1];
    }
    double n = (double)g.count, mean = sum / n, var = fmax(sq / n - mean * mean, 0.0);
    double unbiased = g.count > 1 ? var * n / (n - 1.0) : var;
    stats[4 * c] = (float)mean;
    stats[4 * c + 1] = (float)(1.0 / sqrt(var + eps));
    rm[c] = (float)((1.0 - momentum) * rm[c] + momentum * mean);
    rv[c] = (float)((1.0 - momentum) * rv[c] + momentum * unbiased);
}

/* One thread per channel: the parameter gradients added in, and the means of dy and dy * xhat
 * that the input gradient subtracts (0 after an evaluation forward, whose statistics are fixed). */
static __global__ void backward_stats(bn_geometry g, const double *__restrict__ sums, float *stats,
                                      float *__restrict__ dw, float *__restrict__ db, int trained)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= g.channels) return;
    double sum_dy = 0.0, sum_dy_xhat = 0.0;
    for (int p = 0; p < g.parts; p++) {
        sum_dy += sums[2 * ((size_t)c * g.parts + p)];
        sum_dy_xhat += sums[2 * ((size_t)c * g.parts + p) + 1];
    }
    dw[c] += (float)sum_dy_xhat;
    db[c] += (float)sum_dy;
    stats[4 * c + 2] = trained ? (float)(sum_dy / (double)g.count) : 0.0f;
    stats[4 * c + 3] = trained ? (float)(sum_dy_xhat / (double)g.count) : 0.0f;
}

template <typename T>
static __global__ void normalize(bn_geometry g, size_t total, const T *__restrict__ x, const float *stats,
                                 const float *__restrict__ w, const float *__restrict__ b, T *__restrict__ y)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        int c = (int)((i / (size_t)g.plane) % (size_t)g.channels);
        float scale = __fmul_rn(w[c], stats[4 * c + 1]);
        float shift = __fsub_rn(b[c], __fmul_rn(stats[4 * c], scale));
        bn_st(&y[i], __fadd_rn(__fmul_rn(bn_ld(&x[i]), scale), shift));
    }
}

template <typename T>
static __global__ void input_grad(bn_geometry g, size_t total, const T *__restrict__ x, const T *__restrict__ dy,
                                  const float *stats, const float *__restrict__ w, T *__restrict__ dx)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        int c = (int)((i / (size_t)g.plane) % (size_t)g.channels);
        const float *s = stats + 4 * c;
        float scale = __fmul_rn(w[c], s[1]);
        float xhat = __fmul_rn(__fsub_rn(bn_ld(&x[i]), s[0]), s[1]);
        bn_st(&dx[i], __fmul_rn(scale, __fsub_rn(__fsub_rn(bn_ld(&dy[i]), s[2]), __fmul_rn(xhat, s[3]))));
    }
}

static int grid_for(size_t n)
{
    size_t b = (n + THREADS - 1) / THREADS;
    return (int)(b < 1 ? 1 : b > 4096 ? 4096 : b);
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
        BN_TRY(bn_device_alloc((void **)&b->dev_sums, bytes));
    }
    *stats = (float *)(b->dev_sums + 2 * (size_t)b->channels * b->dev_parts);
    return BN_OK;
}

template <typename T> static bn_status forward_as(bn_layer *l, const bn_pass *p)
{
    batchnorm_priv *b = (batchnorm_priv *)l->priv;
    bn_geometry g;
    float *stats;
    BN_TRY(prepare(l, &g, &stats));
    cudaStream_t s = (cudaStream_t)p->ctx->stream;
    BN_TYPED_RD(T, x, l->in);
    BN_DEV_RD(w, l->params[P_WEIGHT].value);
    BN_DEV_RD(bias, l->params[P_BIAS].value);
    BN_DEV_WR(rm, l->buffers[B_MEAN].value);
    BN_DEV_WR(rv, l->buffers[B_VAR].value);
    BN_TYPED_WR(T, y, l->out);
    b->trained = p->train;
    if (p->train) {
        partial_sums<T><<<dim3(g.parts, g.channels), THREADS, 0, s>>>(g, x, NULL, NULL, b->dev_sums);
        BN_CUDA_LAUNCH();
    }
    forward_stats<<<(g.channels + 127) / 128, 128, 0, s>>>(g, p->train ? b->dev_sums : NULL, stats, rm, rv, b->momentum,
                                                            b->eps);
    BN_CUDA_LAUNCH();
    size_t total = bn_blob_count(l->out);
    normalize<T><<<grid_for(total), THREADS, 0, s>>>(g, total, x, stats, w, bias, y);
    BN_CUDA_LAUNCH();
    return BN_OK;
}

template <typename T> static bn_status backward_as(bn_layer *l, const bn_pass *p)
{
    batchnorm_priv *b = (batchnorm_priv *)l->priv;
    bn_geometry g;
    float *stats;
    BN_TRY(prepare(l, &g, &stats));
    cudaStream_t s = (cudaStream_t)p->ctx->stream;
    BN_TYPED_RD(T, x, l->in);
    BN_TYPED_RD(T, dy, l->out_grad);
    BN_DEV_RD(w, l->params[P_WEIGHT].value);
    BN_DEV_WR(dw, l->params[P_WEIGHT].grad);
    BN_DEV_WR(db, l->params[P_BIAS].grad);
    partial_sums<T><<<dim3(g.parts, g.channels), THREADS, 0, s>>>(g, x, dy, stats, b->dev_sums);
    BN_CUDA_LAUNCH();
    backward_stats<<<(g.channels + 127) / 128, 128, 0, s>>>(g, b->dev_sums, stats, dw, db, b->trained);
    BN_CUDA_LAUNCH();
    if (!l->in_grad) return BN_OK;
    BN_TYPED_WR(T, dx, l->in_grad);
    size_t total = bn_blob_count(l->in);
    input_grad<T><<<grid_for(total), THREADS, 0, s>>>(g, total, x, dy, stats, w, dx);
    BN_CUDA_LAUNCH();
    return BN_OK;
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
