/* conv_alone.h - one runner of conv2d's passes, a kernel family of the table (conv_family.h) or
 * cuDNN, run alone on a shape: on random data, checked against the CPU reference (conv2d.c's
 * im2col and BLAS path, bn_conv2d_cpu_*) and timed with CUDA events. What `blobnet
 * conv-families` prints and the family tests assert on; a build without CUDA reports that it
 * has no device. */
#ifndef BN_CONV_ALONE_H
#define BN_CONV_ALONE_H

#include <stdint.h>

#include "conv_family.h"
#include "core/device.h"
#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The runner number of cuDNN beside the families' BN_CONV_FAMILY_* (1..BN_CONV_FAMILY_COUNT). */
enum { BN_CONV_ALONE_CUDNN = 0 };

typedef struct bn_conv_alone_result {
    int applies;       /* 0: the runner does not run this pass of this shape; why says so */
    const char *why;   /* static text */
    char algo[48];     /* cuDNN's algorithm, "" for a family */
    double max_error;  /* the largest |runner - CPU| over the pass's outputs, divided by the largest
                          |CPU| of that output (dw and db apart, the larger taken) */
    double tolerance;  /* bn_conv_alone_tolerance for the shape */
    float ms;          /* milliseconds per call: the mean of reps calls after one warm-up call */
} bn_conv_alone_result;

/* The largest max_error a runner may show on shape s: 1e-4 of the output's scale where every
 * product is an FP32 one, 1e-2 with s->tf32 (TF32 keeps 11 bits of each factor). */
double bn_conv_alone_tolerance(const bn_conv_shape *s);

/* Fills s->sms with ctx's multiprocessors (the families' launch shapes depend on them). */
bn_status bn_conv_alone_device_shape(bn_ctx *ctx, bn_conv_shape *s);

/* Runs pass `pass` (BN_CONV_*) of runner `runner` (a family's number, or BN_CONV_ALONE_CUDNN) on
 * shape s on ctx's device (a backward pass, with `beside`, in the launch shape its family gives it
 * where the layer's other backward pass runs beside it on the same family: bn_conv_io.beside):
 * inputs drawn uniformly from [-1, 1] from `seed` (a family whose filter pass reads dy only through
 * a fused pooling gets a random pooled gradient and argmax mask, the CPU the full gradient they
 * stand for), the pass run once on zeroed dw and db and compared with
 * the CPU's, then timed over `reps` calls (none when reps is 0). *r says whether it applies (a
 * family's answer from the table; cuDNN where it offers an algorithm this precision allows), the
 * error and the time. An error status only for what went wrong on the device or the host. */
bn_status bn_conv_alone_run(bn_ctx *ctx, int runner, int pass, const bn_conv_shape *s, int beside, uint64_t seed,
                            int reps, bn_conv_alone_result *r);

/* conv_alone_gpu.cu: cuDNN alone on one pass of shape s (NULL *out with a reason in *why where
 * it offers no algorithm this precision allows: FP32 sums, or any with s->tf32); the heuristics'
 * first such algorithm, what a plan in a deterministic context would weigh first. Freed by
 * bn_conv_cudnn_alone_free. */
typedef struct bn_conv_cudnn_alone bn_conv_cudnn_alone;
bn_status bn_conv_cudnn_alone_make(bn_ctx *ctx, const bn_conv_shape *s, int pass, bn_conv_cudnn_alone **out,
                                   const char **why, char *algo, size_t cap);
bn_status bn_conv_cudnn_alone_run(bn_conv_cudnn_alone *a, bn_ctx *ctx, const bn_conv_io *io);
void bn_conv_cudnn_alone_free(bn_conv_cudnn_alone *a);

#ifdef __cplusplus
}
#endif
#endif
