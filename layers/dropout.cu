/* dropout.cu - inverted dropout on the GPU. cuRAND's Philox generator, reseeded before each
 * draw from (run seed, layer index, step) with its offset reset, fills the mask buffer with
 * uniforms; a kernel turns them in place into the mask (0 or 1 / (1 - rate)) and writes the
 * output. The draw depends on nothing else (not on earlier draws from the shared generator),
 * so a resumed or replayed step drops the same elements. Evaluation copies the input. */
#include "core/rng.h"
#include "dropout.h"
#include "gpu/cuda_check.h"

static __global__ void apply_mask(const float *__restrict__ x, float *__restrict__ mask, float *__restrict__ y,
                                  size_t n, float rate, float keep_scale)
{
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        /* cuRAND's uniforms lie in (0, 1]: u > rate keeps with probability 1 - rate. */
        float m = mask[i] > rate ? keep_scale : 0.0f;
        mask[i] = m;
        y[i] = x[i] * m;
    }
}

static __global__ void multiply(const float *__restrict__ a, const float *__restrict__ b, float *__restrict__ out,
                                size_t n)
{
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) out[i] = a[i] * b[i];
}

static int grid_for(size_t n)
{
    size_t b = (n + 255) / 256;
    return (int)(b < 1 ? 1 : b > 4096 ? 4096 : b);
}

extern "C" void bn_dropout_gpu_release(dropout_priv *d)
{
    bn_device_free(d->dev_mask);
    d->dev_mask = NULL;
}

/* The generator seed of this layer's draw at this step: the CPU path's stream choice, mixed
 * into one 64-bit value. */
static unsigned long long draw_seed(const bn_layer *l, const bn_pass *p)
{
    bn_rng r;
    bn_rng_seed(&r, p->seed, ((uint64_t)l->index << 40) ^ p->step);
    return bn_rng_next(&r);
}

extern "C" bn_status bn_dropout_forward_gpu(bn_layer *l, const bn_pass *p)
{
    dropout_priv *d = (dropout_priv *)l->priv;
    size_t count = bn_blob_count(l->in);
    cudaStream_t s = (cudaStream_t)p->ctx->stream;
    BN_DEV_RD(x, l->in);
    BN_DEV_WR(y, l->out);
    d->masked = 0;
    if (!p->train) {
        BN_CUDA(cudaMemcpyAsync(y, x, count * sizeof *y, cudaMemcpyDeviceToDevice, s));
        return BN_OK;
    }
    if (!d->dev_mask) BN_TRY(bn_device_alloc((void **)&d->dev_mask, l->in->capacity * sizeof(float)));
    curandGenerator_t gen = (curandGenerator_t)p->ctx->curand;
    BN_CURAND(curandSetPseudoRandomGeneratorSeed(gen, draw_seed(l, p)));
    /* A share of a global batch continues the whole batch's sequence where the share begins. */
    BN_CURAND(curandSetGeneratorOffset(gen, (unsigned long long)p->offset * (unsigned long long)d->per_example));
    BN_CURAND(curandGenerateUniform(gen, d->dev_mask, count));
    apply_mask<<<grid_for(count), 256, 0, s>>>(x, d->dev_mask, y, count, d->rate, 1.0f / (1.0f - d->rate));
    BN_CUDA_LAUNCH();
    d->masked = 1;
    return BN_OK;
}

/* Backward follows the forward that made the output: masked after training, else identity. */
extern "C" bn_status bn_dropout_backward_gpu(bn_layer *l, const bn_pass *p)
{
    const dropout_priv *d = (const dropout_priv *)l->priv;
    if (!l->in_grad) return BN_OK;
    size_t count = bn_blob_count(l->in);
    cudaStream_t s = (cudaStream_t)p->ctx->stream;
    BN_DEV_RD(dy, l->out_grad);
    BN_DEV_WR(dx, l->in_grad);
    if (!d->masked) {
        BN_CUDA(cudaMemcpyAsync(dx, dy, count * sizeof *dx, cudaMemcpyDeviceToDevice, s));
        return BN_OK;
    }
    multiply<<<grid_for(count), 256, 0, s>>>(dy, d->dev_mask, dx, count);
    BN_CUDA_LAUNCH();
    return BN_OK;
}
