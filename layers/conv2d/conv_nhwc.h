/* conv_nhwc.h - FP32 copies between the layer's NCHW blobs and the NHWC tensors that cuDNN's
 * TF32 tensor-core engines run fastest on (conv2d.cu takes them under --tf32 for a pass where the
 * copies and the NHWC engine together were timed faster than every NCHW way), queued on the
 * context's stream. Each is one transpose of `batch` row-major matrices through shared memory:
 * NCHW -> NHWC is rows = C, cols = H*W per image; a KCRS filter to KRSC is batch = K, rows = C,
 * cols = R*S. */
#ifndef BN_CONV_NHWC_H
#define BN_CONV_NHWC_H

#include "core/device.h"
#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What a copy back to NCHW also does on the way (any member NULL for none): the layer's bias
 * added, bias[j] to dst[b][j][:]; a fused ReLU's output written from the result, relu_y =
 * max(dst, 0) by activation.c's rule; a fused ReLU's input gradient written from the result,
 * relu_dx = dst where mask (the ReLU's output, in dst's layout) is above 0, else 0. */
typedef struct bn_nhwc_extra {
    const float *bias;
    float *relu_y;
    const float *mask;
    float *relu_dx;
} bn_nhwc_extra;

/* dst[b][j][i] = src[b][i][j], with what extra asks (NULL for nothing): with rows = H*W and
 * cols = C, an NHWC result back to NCHW. */
bn_status bn_nhwc_transpose(float *dst, const float *src, int batch, int rows, int cols, const bn_nhwc_extra *extra,
                            bn_ctx *ctx);

/* dst[b][j][i] += src[b][i][j]: a KRSC filter gradient (rows = R*S, cols = C) added into the
 * layer's KCRS one. */
bn_status bn_nhwc_add_transposed(float *dst, const float *src, int batch, int rows, int cols, bn_ctx *ctx);

#ifdef __cplusplus
}
#endif
#endif
