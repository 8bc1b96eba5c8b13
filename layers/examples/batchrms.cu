/* batchrms.cu - the batch-RMS example on the GPU. A channel's sums (of x * x forward, of
 * dy * x backward) take one block each: its threads walk the channel's elements in a fixed
 * pattern, in double, and combine in a fixed order, so two runs give the same bits. The
 * block's first thread then derives the channel's scale (and updates the running mean square)
 * or backward's correction, and an elementwise kernel applies them. The per-channel values live
 * in device scratch allocated in the first pass (docs/custom-layers.md, "Device scratch"). */
#include "batchrms.h"

enum { GAIN };
enum { RUNNING_MS };

#define THREADS 256
#define WARP 32

static int grid_for(size_t n)
{
    size_t b = (n + THREADS - 1) / THREADS;
    return (int)(b < 1 ? 1 : b > 4096 ? 4096 : b);
}

/* Sum over channel c of a * b, complete in thread 0: per-thread strides, then each warp
 * folds by shuffles and warp 0 folds the warps' totals. */
static __device__ double channel_dot(const float *__restrict__ a, const float *__restrict__ b, int n, int channels,
                                     int plane)
{
    __shared__ double warps[THREADS / WARP];
    int c = blockIdx.x;
    double s = 0.0;
    for (size_t j = threadIdx.x, m = (size_t)n * plane; j < m; j += THREADS) {
        size_t i = ((j / plane) * channels + c) * plane + j % plane;
        s += (double)a[i] * b[i];
    }
    for (int off = WARP / 2; off > 0; off /= 2) s += __shfl_down_sync(0xffffffffu, s, off);
    if (threadIdx.x % WARP == 0) warps[threadIdx.x / WARP] = s;
    __syncthreads();
    s = 0.0;
    if (threadIdx.x < WARP) {
        s = threadIdx.x < THREADS / WARP ? warps[threadIdx.x] : 0.0;
        for (int off = WARP / 2; off > 0; off /= 2) s += __shfl_down_sync(0xffffffffu, s, off);
    }
    return s;
}

/* Block c, training: scale[c] from the batch's mean square, which also moves running[c]. */
static __global__ void batch_scale_kernel(const float *__restrict__ x, float *__restrict__ running,
                                          float *__restrict__ scale, int n, int channels, int plane, double momentum,
                                          double eps)
{
    double sum = channel_dot(x, x, n, channels, plane);
    if (threadIdx.x != 0) return;
    int c = blockIdx.x;
    double ms = sum / ((double)n * plane);
    running[c] = (float)((1.0 - momentum) * running[c] + momentum * ms);
    scale[c] = (float)(1.0 / sqrt(ms + eps));
}

/* Evaluation: scale[c] from the running mean square. */
static __global__ void running_scale_kernel(const float *__restrict__ running, float *__restrict__ scale, int channels,
                                            double eps)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c < channels) scale[c] = (float)(1.0 / sqrt((double)running[c] + eps));
}

/* out = gain[c] * scale[c] * a - corr[c] * b (corr NULL: no second term). */
static __global__ void apply_kernel(const float *__restrict__ a, const float *__restrict__ b,
                                    const float *__restrict__ gain, const float *__restrict__ scale,
                                    const float *__restrict__ corr, float *__restrict__ out, size_t count, int channels,
                                    int plane)
{
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += stride) {
        int c = (int)((i / plane) % channels);
        float v = gain[c] * scale[c] * a[i];
        out[i] = corr ? v - corr[c] * b[i] : v;
    }
}

/* Block c: dgain[c] += scale * sum(dy * x); corr[c] = gain * scale^3 * sum(dy * x) / m. */
static __global__ void grad_stats_kernel(const float *__restrict__ x, const float *__restrict__ dy,
                                         const float *__restrict__ gain, const float *__restrict__ scale,
                                         float *__restrict__ dgain, float *__restrict__ corr, int n, int channels,
                                         int plane)
{
    double dot = channel_dot(dy, x, n, channels, plane);
    if (threadIdx.x != 0) return;
    int c = blockIdx.x;
    double s = scale[c];
    dgain[c] += (float)(s * dot);
    corr[c] = (float)(gain[c] * s * s * s * dot / ((double)n * plane));
}

/* The scale and correction arrays, allocated in the first pass (which is never captured). */
static bn_status scratch(batchrms_priv *b)
{
    return b->dev ? BN_OK : bn_device_alloc((void **)&b->dev, 2 * (size_t)b->channels * sizeof(float));
}

extern "C" bn_status bn_batchrms_forward_gpu(bn_layer *l, const bn_pass *pass)
{
    batchrms_priv *b = (batchrms_priv *)l->priv;
    BN_TRY(scratch(b));
    cudaStream_t stream = (cudaStream_t)pass->ctx->stream;
    size_t count = bn_blob_count(l->in);
    BN_DEV_RD(x, l->in);
    BN_DEV_RD(gain, l->params[GAIN].value);
    BN_DEV_WR(running, l->buffers[RUNNING_MS].value);
    BN_DEV_WR(y, l->out);
    if (pass->train)
        batch_scale_kernel<<<b->channels, THREADS, 0, stream>>>(x, running, b->dev, l->in->n, b->channels, b->plane,
                                                                b->momentum, b->eps);
    else
        running_scale_kernel<<<(b->channels + THREADS - 1) / THREADS, THREADS, 0, stream>>>(running, b->dev,
                                                                                          b->channels, b->eps);
    BN_CUDA_LAUNCH();
    apply_kernel<<<grid_for(count), THREADS, 0, stream>>>(x, NULL, gain, b->dev, NULL, y, count, b->channels, b->plane);
    BN_CUDA_LAUNCH();
    return BN_OK;
}

extern "C" bn_status bn_batchrms_backward_gpu(bn_layer *l, const bn_pass *pass)
{
    batchrms_priv *b = (batchrms_priv *)l->priv;
    cudaStream_t stream = (cudaStream_t)pass->ctx->stream;
    size_t count = bn_blob_count(l->in);
    float *scale = b->dev, *corr = b->dev + b->channels;
    BN_DEV_RD(x, l->in);
    BN_DEV_RD(dy, l->out_grad);
    BN_DEV_RD(gain, l->params[GAIN].value);
    BN_DEV_WR(dgain, l->params[GAIN].grad);
    grad_stats_kernel<<<b->channels, THREADS, 0, stream>>>(x, dy, gain, scale, dgain, corr, l->in->n, b->channels,
                                                           b->plane);
    BN_CUDA_LAUNCH();
    if (l->in_grad) {
        BN_DEV_WR(dx, l->in_grad);
        apply_kernel<<<grid_for(count), THREADS, 0, stream>>>(dy, x, gain, scale, corr, dx, count, b->channels,
                                                              b->plane);
        BN_CUDA_LAUNCH();
    }
    return BN_OK;
}
