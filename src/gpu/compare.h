/* compare.h - what checking a timed choice's pick against a reference needs on the device (the
 * chooser's agree functions, gpu/chooser.h): inputs drawn at random, with no kinks for the two
 * to fall on different sides of, and the largest difference of two results relative to the
 * reference's scale. Queued on the context's stream; the comparison waits for it. */
#ifndef BN_GPU_COMPARE_H
#define BN_GPU_COMPARE_H

#include <stddef.h>
#include <stdint.h>

#include "core/device.h"
#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* dst[i] uniform in [-1, 1) for i < n, a counter-based draw (core/counter_rng.h) of seed and i:
 * the same values on every run and device. */
bn_status bn_gpu_fill_uniform(float *dst, size_t n, uint64_t seed, const bn_ctx *ctx);

/* *err = max |out[i] - ref[i]| / max |ref[i]| over i < n (the scale taken as 1 where the
 * reference is all zeros), counting only the elements where ref is finite (the reference cannot
 * judge the others) and a non-finite out there as an infinite difference. Synchronises with the
 * stream to read the result. */
bn_status bn_gpu_relative_error(const float *out, const float *ref, size_t n, const bn_ctx *ctx, double *err);

#ifdef __cplusplus
}
#endif
#endif
