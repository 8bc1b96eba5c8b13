/* activation.cu - the activations on the GPU: relu, sigmoid and tanh through cuDNN's
 * activation calls (descriptor made on the first GPU pass); leaky_relu, which cuDNN lacks, and
 * elu, whose cuDNN backward takes the linear branch at x = 0 where the CPU takes the
 * exponential one, as elementwise kernels with the CPU's formulas and kink conventions. */
#include "activation.h"
#include "cuda_check.h"

/* leaky_relu and elu: x for x > 0; slope * x, or alpha * (e^x - 1), otherwise. */
static __global__ void piecewise_forward(const float *__restrict__ x, float *__restrict__ y, size_t n, int elu,
                                         float a)
{
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        float v = x[i];
        y[i] = v > 0.0f ? v : elu ? a * expm1f(v) : a * v;
    }
}

/* dx = dy for x > 0; else slope * dy, or (for elu, a e^x = y + a) dy * (y + alpha). */
static __global__ void piecewise_backward(const float *__restrict__ x, const float *__restrict__ y,
                                          const float *__restrict__ dy, float *__restrict__ dx, size_t n, int elu,
                                          float a)
{
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        dx[i] = x[i] > 0.0f ? dy[i] : elu ? dy[i] * (y[i] + a) : a * dy[i];
}

static int grid_for(size_t n)
{
    size_t b = (n + 255) / 256;
    return (int)(b < 1 ? 1 : b > 4096 ? 4096 : b);
}

extern "C" void bn_activation_gpu_release(act_priv *p)
{
    if (p->act_desc) cudnnDestroyActivationDescriptor((cudnnActivationDescriptor_t)p->act_desc);
    p->act_desc = NULL;
}

static int by_kernel(act_kind k)
{
    return k == ACT_LEAKY || k == ACT_ELU;
}

static cudnnActivationMode_t mode_of(act_kind k)
{
    return k == ACT_SIGMOID ? CUDNN_ACTIVATION_SIGMOID : k == ACT_TANH ? CUDNN_ACTIVATION_TANH : CUDNN_ACTIVATION_RELU;
}

/* The cuDNN descriptor for relu, sigmoid and tanh, made on first use. */
static bn_status prepare(act_priv *p, cudnnActivationDescriptor_t *out)
{
    if (!p->act_desc) {
        cudnnActivationDescriptor_t d;
        BN_CUDNN(cudnnCreateActivationDescriptor(&d));
        cudnnStatus_t s = cudnnSetActivationDescriptor(d, mode_of(p->kind), CUDNN_NOT_PROPAGATE_NAN, 0.0);
        if (s != CUDNN_STATUS_SUCCESS) {
            cudnnDestroyActivationDescriptor(d);
            BN_CUDNN(s);
        }
        p->act_desc = d;
    }
    *out = (cudnnActivationDescriptor_t)p->act_desc;
    return BN_OK;
}

extern "C" bn_status bn_activation_forward_gpu(bn_layer *l, const bn_pass *pass)
{
    act_priv *p = (act_priv *)l->priv;
    size_t count = bn_blob_count(l->in);
    BN_DEV_RD(x, l->in);
    BN_DEV_WR(y, l->out);
    if (by_kernel(p->kind)) {
        piecewise_forward<<<grid_for(count), 256, 0, (cudaStream_t)pass->ctx->stream>>>(x, y, count,
                                                                                        p->kind == ACT_ELU, p->a);
        BN_CUDA_LAUNCH();
        return BN_OK;
    }
    cudnnActivationDescriptor_t d = NULL;
    BN_TRY(prepare(p, &d));
    BN_TENSOR_DESC(xd, l->in);
    BN_TENSOR_DESC(yd, l->out);
    const float one = 1.0f, zero = 0.0f;
    BN_CUDNN(cudnnActivationForward((cudnnHandle_t)pass->ctx->cudnn, d, &one, xd, x, &zero, yd, y));
    return BN_OK;
}

extern "C" bn_status bn_activation_backward_gpu(bn_layer *l, const bn_pass *pass)
{
    if (!l->in_grad) return BN_OK;
    act_priv *p = (act_priv *)l->priv;
    size_t count = bn_blob_count(l->in);
    BN_DEV_RD(x, l->in);
    BN_DEV_RD(y, l->out);
    BN_DEV_RD(dy, l->out_grad);
    BN_DEV_WR(dx, l->in_grad);
    if (by_kernel(p->kind)) {
        piecewise_backward<<<grid_for(count), 256, 0, (cudaStream_t)pass->ctx->stream>>>(
            x, y, dy, dx, count, p->kind == ACT_ELU, p->a);
        BN_CUDA_LAUNCH();
        return BN_OK;
    }
    cudnnActivationDescriptor_t d = NULL;
    BN_TRY(prepare(p, &d));
    BN_TENSOR_DESC(xd, l->in);
    BN_TENSOR_DESC(yd, l->out);
    BN_TENSOR_DESC(dyd, l->out_grad);
    BN_TENSOR_DESC(dxd, l->in_grad);
    const float one = 1.0f, zero = 0.0f;
    BN_CUDNN(cudnnActivationBackward((cudnnHandle_t)pass->ctx->cudnn, d, &one, yd, y, dyd, dy, xd, x, &zero, dxd,
                                     dx));
    return BN_OK;
}
