/* bf16.h - conversions between the FP32 and BF16 device arrays of --precision bf16, and the BF16
 * transposes between layouts (NCHW <-> NHWC), queued on the context's stream. Every float becomes
 * the nearest BF16, ties to even; a transpose moves values without rounding. */
#ifndef BN_GPU_BF16_H
#define BN_GPU_BF16_H

#include <stddef.h>

#include "core/device.h"
#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* dst[i] = bf16(src[i]) for i < n; dst holds n BF16 values. */
bn_status bn_gpu_f32_to_bf16(void *dst, const float *src, size_t n, bn_ctx *ctx);

/* dst[i] = float(src[i]) for i < n; src holds n BF16 values. */
bn_status bn_gpu_bf16_to_f32(float *dst, const void *src, size_t n, bn_ctx *ctx);

/* dst[i] += float(src[i]) for i < n: a library's BF16 result added into an FP32 gradient. */
bn_status bn_gpu_add_bf16_to_f32(float *dst, const void *src, size_t n, bn_ctx *ctx);

/* dst[b][j][i] = src[b][i][j]: each of `batch` row-major rows x cols BF16 matrices in src written
 * as its cols x rows transpose into dst (not overlapping src). NCHW -> NHWC is rows = C and
 * cols = H*W per image; NHWC -> NCHW is rows = H*W, cols = C; a KCRS filter to KRSC is batch = K,
 * rows = C, cols = R*S. Fails on more than 65535 matrices or more than 65535 * 64 rows. */
bn_status bn_gpu_bf16_transpose(void *dst, const void *src, int batch, int rows, int cols, bn_ctx *ctx);

/* dst[b][j][i] += float(src[b][i][j]): as bn_gpu_bf16_transpose, the transpose of BF16 src added
 * into FP32 dst; e.g. a KRSC filter gradient into a KCRS one (batch = K, rows = R*S, cols = C). */
bn_status bn_gpu_add_bf16_transposed_to_f32(float *dst, const void *src, int batch, int rows, int cols,
                                            bn_ctx *ctx);

#ifdef __cplusplus
}
#endif
#endif
