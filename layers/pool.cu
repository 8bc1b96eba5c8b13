/* pool.cu - max and average pooling on the GPU through cuDNN. The pooling descriptor is
 * made on the first GPU pass, which also checks that cuDNN's output size (floor mode) is the
 * one setup computed. Max pooling uses CUDNN_POOLING_MAX_DETERMINISTIC; padding never wins
 * there either. Where a window holds two equal maxima the CPU sends the gradient to the first
 * in row-major order, and cuDNN makes its own choice. */
#include "cuda_check.h"
#include "pool.h"

extern "C" void bn_pool_gpu_release(pool_priv *p)
{
    if (p->pool_desc) cudnnDestroyPoolingDescriptor((cudnnPoolingDescriptor_t)p->pool_desc);
    p->pool_desc = NULL;
}

static bn_status configure(const bn_layer *l, const pool_priv *p, cudnnPoolingMode_t mode, cudnnPoolingDescriptor_t d)
{
    BN_CUDNN(cudnnSetPooling2dDescriptor(d, mode, CUDNN_NOT_PROPAGATE_NAN, p->size, p->size, p->pad, p->pad,
                                         p->stride, p->stride));
    BN_TENSOR_DESC(xd, l->in);
    int n, c, oh, ow;
    BN_CUDNN(cudnnGetPooling2dForwardOutputDim(d, xd, &n, &c, &oh, &ow));
    if (c != p->c || oh != p->oh || ow != p->ow)
        return bn_error(BN_ERR_INTERNAL, "layer %s: cuDNN pools %dx%dx%d to %dx%dx%d where blobnet has %dx%dx%d",
                        l->name, p->c, p->h, p->w, c, oh, ow, p->c, p->oh, p->ow);
    return BN_OK;
}

/* The pooling descriptor, made and checked on first use. */
static bn_status prepare(const bn_layer *l, pool_priv *p, cudnnPoolingMode_t mode, cudnnPoolingDescriptor_t *out)
{
    if (!p->pool_desc) {
        cudnnPoolingDescriptor_t d;
        BN_CUDNN(cudnnCreatePoolingDescriptor(&d));
        bn_status s = configure(l, p, mode, d);
        if (s != BN_OK) {
            cudnnDestroyPoolingDescriptor(d);
            return s;
        }
        p->pool_desc = d;
    }
    *out = (cudnnPoolingDescriptor_t)p->pool_desc;
    return BN_OK;
}

static bn_status pool_forward(bn_layer *l, const bn_pass *pass, cudnnPoolingMode_t mode)
{
    cudnnPoolingDescriptor_t d = NULL;
    BN_TRY(prepare(l, (pool_priv *)l->priv, mode, &d));
    BN_TENSOR_DESC(xd, l->in);
    BN_TENSOR_DESC(yd, l->out);
    BN_DEV_RD(x, l->in);
    BN_DEV_WR(y, l->out);
    const float one = 1.0f, zero = 0.0f;
    BN_CUDNN(cudnnPoolingForward((cudnnHandle_t)pass->ctx->cudnn, d, &one, xd, x, &zero, yd, y));
    return BN_OK;
}

static bn_status pool_backward(bn_layer *l, const bn_pass *pass, cudnnPoolingMode_t mode)
{
    if (!l->in_grad) return BN_OK;
    cudnnPoolingDescriptor_t d = NULL;
    BN_TRY(prepare(l, (pool_priv *)l->priv, mode, &d));
    BN_TENSOR_DESC(xd, l->in);
    BN_TENSOR_DESC(yd, l->out);
    BN_TENSOR_DESC(dyd, l->out_grad);
    BN_TENSOR_DESC(dxd, l->in_grad);
    BN_DEV_RD(x, l->in);
    BN_DEV_RD(y, l->out);
    BN_DEV_RD(dy, l->out_grad);
    BN_DEV_WR(dx, l->in_grad);
    const float one = 1.0f, zero = 0.0f;
    BN_CUDNN(cudnnPoolingBackward((cudnnHandle_t)pass->ctx->cudnn, d, &one, yd, y, dyd, dy, xd, x, &zero, dxd, dx));
    return BN_OK;
}

extern "C" bn_status bn_maxpool_forward_gpu(bn_layer *l, const bn_pass *p)
{
    return pool_forward(l, p, CUDNN_POOLING_MAX_DETERMINISTIC);
}

extern "C" bn_status bn_maxpool_backward_gpu(bn_layer *l, const bn_pass *p)
{
    return pool_backward(l, p, CUDNN_POOLING_MAX_DETERMINISTIC);
}

extern "C" bn_status bn_avgpool_forward_gpu(bn_layer *l, const bn_pass *p)
{
    return pool_forward(l, p, CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING);
}

extern "C" bn_status bn_avgpool_backward_gpu(bn_layer *l, const bn_pass *p)
{
    return pool_backward(l, p, CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING);
}
