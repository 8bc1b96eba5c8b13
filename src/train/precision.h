/* precision.h - whether a network asked to train in BF16 (--precision bf16) trains faster in it
 * than in FP32 on this device.
 *
 * BF16 halves the bytes of every activation and doubles the tensor cores' rate, but it costs
 * conversions (FP32 master weights to their BF16 copy, BF16 activations to FP32 where a layer's
 * fastest kernel is FP32) and passes of their own where the FP32 path fuses (a 2x2 max pooling
 * into its convolution, a ReLU into a dense layer's epilogue, the dense head into softmax). On a
 * network of few, small layers those outweigh the gain, and a user who asks for BF16 expects it
 * never to cost time. So before training, the network is built twice, once in each precision,
 * and a few steps of each are timed as the trainer runs them (CUDA graph replays included); the
 * FP32 build is the one --precision fp32 runs with the same flags (TF32 products with --tf32,
 * FP32-exact without; TF32 was tried for it and lost on a residual net whose blobnet kernels beat
 * cuDNN's TF32 engines). BF16 is kept unless FP32 is faster by more than BN_PRECISION_TIE; the
 * verdict is kept in the kernel cache (gpu/kernel_cache.h) under the device's scope, a hash of
 * the network, its batch and --tf32, so later runs time nothing. A deterministic context keeps BF16 untimed (its runs must not depend
 * on a timing), and so does --precision bf16-strict. */
#ifndef BN_PRECISION_H
#define BN_PRECISION_H

#include <stddef.h>

#include "core/device.h"
#include "core/net.h"

#ifdef __cplusplus
extern "C" {
#endif

/* FP32 replaces BF16 only when its step is faster by more than this fraction. */
#define BN_PRECISION_TIE 0.02

/* Makes a fresh, not yet set-up copy of the network to be trained (from its model file, with
 * the run's overrides) into *net, for the timing (env: the caller's). */
typedef bn_status (*bn_net_maker)(void *env, bn_net **net);

/* What the choice found. */
typedef struct bn_precision_verdict {
    int bf16;             /* 1: train in BF16; 0: in FP32, as --precision fp32 would */
    int timed;            /* 1: timed in this run; 0: from the kernel cache */
    double bf16_ms, fp32_ms; /* a step in each (ms), when timed or cached with the verdict */
} bn_precision_verdict;

/* Under ctx->bf16 (and not deterministic): chooses the precision of the network make() builds at
 * `batch` examples a step, as the header says, and sets ctx->bf16 to it (ctx->tf32 is left as
 * the run asked). *out says what was chosen and why. Leaves ctx unchanged without bf16 or in a
 * deterministic context (out->bf16 then says whether bf16 was asked). */
bn_status bn_precision_choose(bn_ctx *ctx, bn_net_maker make, void *env, int batch, bn_precision_verdict *out);

/* The kernel cache's key of net's verdict at batch examples a step on ctx's device. */
bn_status bn_precision_key(const bn_ctx *ctx, const bn_net *net, int batch, char *key, size_t cap);

/* Whether FP32's step (fp32_ms) beats BF16's (bf16_ms) by more than BN_PRECISION_TIE. */
int bn_precision_fp32_wins(double bf16_ms, double fp32_ms);

/* Reads a verdict kept in the kernel cache ("bf16 <bf16 ms> <fp32 ms>" or "fp32 ..."): 1 when
 * choice is one, else 0. */
int bn_precision_parse(const char *choice, bn_precision_verdict *out);

#ifdef __cplusplus
}
#endif
#endif
