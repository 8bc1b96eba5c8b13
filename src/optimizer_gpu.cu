/* optimizer_gpu.cu - the SGD update as one kernel over the whole parameter slab. Each
 * block row walks the segment table (a handful of entries) to find its multipliers. */
#include "cuda_check.h"
#include "optimizer.h"

__global__ void sgd_update(float *__restrict__ w, const float *__restrict__ g, float *__restrict__ v,
                           const bn_param_segment *__restrict__ segs, int nseg, size_t n, float lr,
                           float mom, float wd)
{
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        int s = 0;
        while (s + 1 < nseg && i >= segs[s + 1].offset) s++;
        float rate = lr * segs[s].lr_mult, decay = wd * segs[s].decay_mult;
        float vi = mom * v[i] + rate * (g[i] + decay * w[i]);
        v[i] = vi;
        w[i] -= vi;
    }
}

static bn_status upload_segments(bn_sgd *o)
{
    size_t bytes = (size_t)o->num_segments * sizeof *o->segments;
    BN_TRY(bn_device_alloc(&o->device_segments, bytes));
    return bn_device_h2d(o->device_segments, o->segments, bytes);
}

extern "C" bn_status bn_sgd_step_gpu(bn_sgd *o, bn_net *net, float lr)
{
    if (!o->device_segments) BN_TRY(upload_segments(o));
    BN_DEV_WR(w, net->params);
    BN_DEV_RD(g, net->grads);
    BN_DEV_WR(v, o->momentum);
    size_t n = net->num_params;
    int threads = 256;
    int blocks = (int)((n + threads - 1) / threads);
    if (blocks > 1024) blocks = 1024;
    cudaStream_t s = (cudaStream_t)net->pass.ctx->stream;
    sgd_update<<<blocks, threads, 0, s>>>(w, g, v, (const bn_param_segment *)o->device_segments, o->num_segments,
                                          n, lr, (float)o->cfg.momentum, (float)o->cfg.weight_decay);
    BN_CUDA_LAUNCH();
    return BN_OK;
}
