/* bf16.h - conversions between the FP32 and BF16 device arrays of --precision bf16, queued on
 * the context's stream. Every float becomes the nearest BF16, ties to even. */
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

#ifdef __cplusplus
}
#endif
#endif
