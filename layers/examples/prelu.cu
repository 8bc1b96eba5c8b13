/* prelu.cu - the PReLU example on the GPU: an elementwise kernel for the forward pass and for
 * the input gradient, and a per-channel reduction for the slope gradient. The reduction gives
 * each channel one block whose threads walk the channel's elements in a fixed pattern and then
 * add their partial sums in a fixed tree: no atomics, so two runs give the same bits. */
#include "prelu.h"

enum { SLOPE };

#define THREADS 256

static int grid_for(size_t n)
{
    size_t b = (n + THREADS - 1) / THREADS;
    return (int)(b < 1 ? 1 : b > 4096 ? 4096 : b);
}

static __global__ void prelu_forward_kernel(const float *__restrict__ x, const float *__restrict__ slope,
                                            float *__restrict__ y, size_t n, int channels, int spatial)
{
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        float a = slope[(i / spatial) % channels];
        y[i] = x[i] > 0.0f ? x[i] : a * x[i];
    }
}

static __global__ void prelu_input_grad_kernel(const float *__restrict__ x, const float *__restrict__ dy,
                                               const float *__restrict__ slope, float *__restrict__ dx,
                                               size_t n, int channels, int spatial)
{
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        dx[i] = x[i] > 0.0f ? dy[i] : slope[(i / spatial) % channels] * dy[i];
}

/* Block c: dslope[c] += sum over examples and positions of x * dy where x <= 0, in double. */
static __global__ void prelu_slope_grad_kernel(const float *__restrict__ x, const float *__restrict__ dy,
                                               float *__restrict__ dslope, int n, int channels, int spatial)
{
    __shared__ double part[THREADS];
    int c = blockIdx.x;
    size_t per_channel = (size_t)n * spatial;
    double s = 0.0;
    for (size_t j = threadIdx.x; j < per_channel; j += THREADS) {
        size_t i = ((j / spatial) * channels + c) * spatial + j % spatial;
        if (x[i] <= 0.0f) s += (double)x[i] * dy[i];
    }
    part[threadIdx.x] = s;
    __syncthreads();
    for (int half = THREADS / 2; half > 0; half /= 2) {
        if (threadIdx.x < half) part[threadIdx.x] += part[threadIdx.x + half];
        __syncthreads();
    }
    if (threadIdx.x == 0) dslope[c] += (float)part[0];
}

extern "C" bn_status bn_prelu_forward_gpu(bn_layer *l, const bn_pass *pass)
{
    const prelu_priv *p = (const prelu_priv *)l->priv;
    size_t count = bn_blob_count(l->in);
    BN_DEV_RD(x, l->in);
    BN_DEV_RD(slope, l->params[SLOPE].value);
    BN_DEV_WR(y, l->out);
    cudaStream_t stream = (cudaStream_t)pass->ctx->stream;
    prelu_forward_kernel<<<grid_for(count), THREADS, 0, stream>>>(x, slope, y, count, p->channels, p->spatial);
    BN_CUDA_LAUNCH();
    return BN_OK;
}

extern "C" bn_status bn_prelu_backward_gpu(bn_layer *l, const bn_pass *pass)
{
    const prelu_priv *p = (const prelu_priv *)l->priv;
    size_t count = bn_blob_count(l->in);
    cudaStream_t stream = (cudaStream_t)pass->ctx->stream;
    BN_DEV_RD(x, l->in);
    BN_DEV_RD(dy, l->out_grad);
    BN_DEV_RD(slope, l->params[SLOPE].value);
    if (l->in_grad) {
        BN_DEV_WR(dx, l->in_grad);
        prelu_input_grad_kernel<<<grid_for(count), THREADS, 0, stream>>>(x, dy, slope, dx, count, p->channels,
                                                                         p->spatial);
        BN_CUDA_LAUNCH();
    }
    BN_DEV_WR(dslope, l->params[SLOPE].grad);
    prelu_slope_grad_kernel<<<p->channels, THREADS, 0, stream>>>(x, dy, dslope, l->in->n, p->channels, p->spatial);
    BN_CUDA_LAUNCH();
    return BN_OK;
}
