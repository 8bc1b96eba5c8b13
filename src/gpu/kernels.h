/* kernels.h - small generic device operations shared by the framework (kernels.cu). */
#ifndef BN_KERNELS_H
#define BN_KERNELS_H

#include <stddef.h>

#include "core/device.h"

#ifdef __cplusplus
extern "C" {
#endif

/* dst[i] += src[i] for i < n, queued on ctx's stream. */
bn_status bn_gpu_add(float *dst, const float *src, size_t n, bn_ctx *ctx);

/* Sets n floats to value, queued on ctx's stream (poisoning outputs in tests, fills). */
bn_status bn_gpu_fill(float *dst, float value, size_t n, bn_ctx *ctx);

#ifdef __cplusplus
}
#endif
#endif
