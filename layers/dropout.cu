/* dropout.cu - inverted dropout on the GPU. One kernel draws each element's keep (dropout.h's
 * counter-based draw, the CPU path's bits), writes the mask (0 or 1 / (1 - rate)) for the
 * backward pass and the output. It reads the step from device memory where the trainer gives it
 * (bn_pass.dev_step), so the pass holds no host state that changes from step to step and a step
 * captured in a CUDA graph draws afresh at each replay. Evaluation copies the input. */
#include "dropout.h"
#include "gpu/bf16.cuh"
#include "gpu/code_anchor.cuh"
#include "gpu/cuda_check.h"
#include "gpu/grid_stride.h"
#include "gpu/pdl.cuh"

/* T is the blobs' element type on the device: float, or __nv_bfloat16 under --precision bf16;
 * the mask stays float. `first` is the place of element 0 in the global batch. */
template <typename T>
static __global__ void draw_and_apply(const T *__restrict__ x, float *__restrict__ mask, T *__restrict__ y, size_t n,
                                      float rate, float keep_scale, unsigned long long seed, int layer,
                                      const unsigned long long *__restrict__ dev_step, unsigned long long step,
                                      unsigned long long first)
{
    bn_early_entry(); /* pdl.cuh */
    const uint64_t key = bn_dropout_key(seed, layer, dev_step ? *dev_step : step);
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        float m = bn_dropout_keeps(key, first + i, rate) ? keep_scale : 0.0f;
        mask[i] = m;
        bn_st(y + i, bn_ld(x + i) * m);
    }
}

template <typename T>
static __global__ void multiply(const T *__restrict__ a, const float *__restrict__ b, T *__restrict__ out, size_t n)
{
    bn_early_entry(); /* pdl.cuh */
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        bn_st(out + i, bn_ld(a + i) * b[i]);
}

extern "C" void bn_dropout_gpu_release(dropout_priv *d)
{
    bn_device_free(d->dev_mask);
    d->dev_mask = NULL;
}

template <typename T>
static bn_status forward_on(bn_layer *l, const bn_pass *p, const T *x, T *y)
{
    dropout_priv *d = (dropout_priv *)l->priv;
    size_t count = bn_blob_count(l->in);
    cudaStream_t s = (cudaStream_t)p->ctx->stream;
    d->masked = 0;
    if (!p->train) {
        BN_CUDA(cudaMemcpyAsync(y, x, count * sizeof *y, cudaMemcpyDeviceToDevice, s));
        return BN_OK;
    }
    if (!d->dev_mask) BN_TRY(bn_device_alloc((void **)&d->dev_mask, l->in->capacity * sizeof(float)));
    /* A share of a global batch takes the whole batch's draws where the share begins. */
    const unsigned long long first = (unsigned long long)p->offset * (unsigned long long)d->per_example;
    bn_launch_early(draw_and_apply<T>, bn_grid_stride_blocks(count), 256, 0, s, x, d->dev_mask, y, count, d->rate,
                    1.0f / (1.0f - d->rate), p->seed, l->index, p->dev_step, p->step, first);
    BN_CUDA_LAUNCH();
    d->masked = 1;
    return BN_OK;
}

extern "C" bn_status bn_dropout_forward_gpu(bn_layer *l, const bn_pass *p)
{
    if (bn_blob_is_bf16(l->out)) {
        BN_DEV16_RD(x, l->in);
        BN_DEV16_WR(y, l->out);
        return forward_on(l, p, x, y);
    }
    BN_DEV_RD(x, l->in);
    BN_DEV_WR(y, l->out);
    return forward_on(l, p, x, y);
}

/* Backward follows the forward that made the output: masked after training, else identity. */
template <typename T>
static bn_status backward_on(bn_layer *l, const bn_pass *p, const T *dy, T *dx)
{
    const dropout_priv *d = (const dropout_priv *)l->priv;
    size_t count = bn_blob_count(l->in);
    cudaStream_t s = (cudaStream_t)p->ctx->stream;
    if (!d->masked) {
        BN_CUDA(cudaMemcpyAsync(dx, dy, count * sizeof *dx, cudaMemcpyDeviceToDevice, s));
        return BN_OK;
    }
    bn_launch_early(multiply<T>, bn_grid_stride_blocks(count), 256, 0, s, dy, d->dev_mask, dx, count);
    BN_CUDA_LAUNCH();
    return BN_OK;
}

extern "C" bn_status bn_dropout_backward_gpu(bn_layer *l, const bn_pass *p)
{
    if (!l->in_grad) return BN_OK;
    if (bn_blob_is_bf16(l->out)) {
        BN_DEV16_RD(dy, l->out_grad);
        BN_DEV16_WR(dx, l->in_grad);
        return backward_on(l, p, dy, dx);
    }
    BN_DEV_RD(dy, l->out_grad);
    BN_DEV_WR(dx, l->in_grad);
    return backward_on(l, p, dy, dx);
}

BN_CODE_ANCHOR(dropout, multiply<float>) /* code_load.cu */
