/* conv_alone_none.c - stands in for conv_alone_gpu.cu in a build without CUDA: no device. */
#include "conv_alone.h"

bn_status bn_conv_alone_device_shape(bn_ctx *ctx, bn_conv_shape *s)
{
    (void)ctx, (void)s;
    return bn_no_cuda();
}

bn_status bn_conv_cudnn_alone_make(bn_ctx *ctx, const bn_conv_shape *s, int pass, bn_conv_cudnn_alone **out,
                                   const char **why, char *algo, size_t cap)
{
    (void)ctx, (void)s, (void)pass, (void)why, (void)algo, (void)cap;
    *out = NULL;
    return bn_no_cuda();
}

bn_status bn_conv_cudnn_alone_run(bn_conv_cudnn_alone *a, bn_ctx *ctx, const bn_conv_io *io)
{
    (void)a, (void)ctx, (void)io;
    return bn_no_cuda();
}

void bn_conv_cudnn_alone_free(bn_conv_cudnn_alone *a)
{
    (void)a;
}
