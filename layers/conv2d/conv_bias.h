/* conv_bias.h - a convolution's bias and its gradient where a library ran the convolution (cuDNN
 * leaves them to the caller; blobnet's own kernels fuse them), for FP32 and BF16 outputs in NCHW
 * order, queued on the context's stream. The gradient is summed in FP32 in a fixed order
 * (deterministic, no atomics): blocks of (part, filter) write partial sums, then one thread per
 * filter adds them in order. cuDNN's own calls for the two (cudnnAddTensor,
 * cudnnConvolutionBackwardBias) measured 14 and about 100 us on a 128x32x28x28 output on an
 * H200, where these take a few. */
#ifndef BN_CONV_BIAS_H
#define BN_CONV_BIAS_H

#include "core/device.h"
#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The partial sums bn_conv_bias_grad_* need: this many floats per filter. */
#define BN_CONV_BIAS_PARTS 64

/* y[e][k][p] += b[k] over n images of `filters` planes of `plane` values, where relu_y is not
 * NULL with a fused ReLU's output too (max(y, 0) by activation.c's rule, y's layout but its
 * images relu_stride elements apart: filters * plane, or more for a slice of a channel join's
 * output, blob.h): FP32 y, or BF16 y (and relu_y), rounded once. */
bn_status bn_conv_bias_add_f32(float *y, const float *b, int n, int filters, int plane, float *relu_y,
                               size_t relu_stride, bn_ctx *ctx);
bn_status bn_conv_bias_add_bf16(void *y, const float *b, int n, int filters, int plane, void *relu_y,
                                size_t relu_stride, bn_ctx *ctx);

/* db[k] += the sum of dy[e][k][p] over e < n, p < plane, with `parts` (filters *
 * BN_CONV_BIAS_PARTS floats of device scratch): FP32 or BF16 dy. */
bn_status bn_conv_bias_grad_f32(float *db, const float *dy, int n, int filters, int plane, float *parts,
                                bn_ctx *ctx);
bn_status bn_conv_bias_grad_bf16(float *db, const void *dy, int n, int filters, int plane, float *parts,
                                 bn_ctx *ctx);
/* bn_conv_bias_grad_f32 queued on `stream` (a cudaStream_t), for a kernel family's filter pass,
 * which is given a stream rather than the context (conv_family.h). */
bn_status bn_conv_bias_grad_f32_on(void *stream, float *db, const float *dy, int n, int filters, int plane,
                                   float *parts);

#ifdef __cplusplus
}
#endif
#endif
