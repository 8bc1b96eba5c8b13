/* conv_reference.h - a plain convolution on the device for any pass and tensors a bn_cg_spec
 * describes (conv_graph.h), and the check of a graph-API plan against it before a timed choice
 * takes the plan: a pick that computes something else is dropped (gpu/chooser.h,
 * bn_chooser_pick_checked).
 *
 * The reference reads every tensor through its dims, strides and type (FP32 or BF16), sums
 * in double, and pads and strides as the spec says (cross-correlation, as the layer computes).
 * It is plain rather than fast: it runs once per timed choice, at setup. */
#ifndef BN_CONV_REFERENCE_H
#define BN_CONV_REFERENCE_H

#include <stddef.h>

#include "conv_graph.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The elements of the tensor the spec's pass writes (the product of its dims). */
size_t bn_cg_written_count(const bn_cg_spec *spec);

/* ref (FP32, bn_cg_written_count elements, packed in the written tensor's dims order: N, C, H, W
 * or K, C, R, S) = the spec's pass of the two tensors it reads among x, w and y (as bn_cg_run
 * takes them); the tensor the pass writes is not read, so beta plays no part. Queued on ctx's
 * stream. */
bn_status bn_cg_reference(bn_ctx *ctx, const bn_cg_spec *spec, const void *x, const void *w, const void *y,
                          float *ref);

/* The largest difference the spec's output may have from the reference, relative to the
 * output's scale (the reasons beside its definition). */
double bn_cg_tolerance(const bn_cg_spec *spec);

/* Whether out, the tensor the spec's pass writes (in its layout and type), agrees with ref
 * (bn_cg_reference's result): *err its largest difference relative to the largest |ref|, *tol
 * bn_cg_tolerance(spec), *agrees 0 where err exceeds tol. Synchronises with ctx's stream. */
bn_status bn_cg_check_output(bn_ctx *ctx, const bn_cg_spec *spec, const float *ref, const void *out, double *err,
                             double *tol, int *agrees);

/* The check of plans for one spec: scratch tensors of the spec's sizes (never the caller's
 * buffers), the two the pass reads filled with fixed uniform random values in [-1, 1] (rounded to
 * BF16 where the tensor is BF16), and the reference's result on them, made once for every plan
 * checked. */
typedef struct bn_cg_check bn_cg_check;

/* Makes the check of spec's plans into *out (freed with bn_cg_check_close). */
bn_status bn_cg_check_open(bn_ctx *ctx, const bn_cg_spec *spec, bn_cg_check **out);

/* Runs plan (made for the spec) once on the check's tensors, its output zeroed first (so that a
 * spec with beta = 1 adds onto zeros), and compares it with the reference as bn_cg_check_output
 * does. Uses ctx's shared workspace, which the plan's making reserved. */
bn_status bn_cg_check_plan(bn_cg_check *check, const bn_cg_plan *plan, double *err, double *tol, int *agrees);

/* Frees *check and sets it to NULL; NULL is fine. */
void bn_cg_check_close(bn_cg_check **check);

#ifdef __cplusplus
}
#endif
#endif
