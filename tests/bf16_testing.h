/* bf16_testing.h - the BF16 cases of the layer tests (--precision bf16): a model's BF16 GPU pass
 * against its FP32 CPU pass. Defined in test_util_bf16.c.
 *
 * Each case builds a model twice from one seed (the same FP32 weights): on the CPU, and on the
 * device in a context with bf16 set, where every activation and activation gradient is BF16.
 * Both get the same inputs, last output gradient and starting parameter gradients through their
 * FP32 host copies (the device copy is their BF16 rounding); the device's outputs and gradients
 * are poisoned with NaN first, so an element the GPU forgets to write fails the comparison.
 * After a training forward and a backward pass every output, activation gradient, parameter
 * gradient and buffer is compared (lt_rel_diff: the largest difference over the blob's scale).
 *
 * Tolerances, from BF16's 8-bit significand: one rounding moves a value by at most
 * u = 2^-9 ~ 1.95e-3 of itself. Through one layer the inputs, the weights and the output are
 * each rounded once (products and sums stay FP32), so an element is off by about 3u of the
 * magnitudes it is made of: TOL_LAYER = 1e-2 (~5u) for a case of one layer, TOL_CHAIN = 3e-2 for
 * two or three layers in a row, each adding its 3u to what it reads. A parameter gradient is
 * FP32, but summed from BF16 activations and gradients (and conv2d's filter gradient is rounded
 * to BF16 once by cuDNN before it is added into the FP32 slab): 4u, within the same bounds.
 * Max pooling and concat on inputs that BF16 holds exactly (multiples of 1/16 below 4 in
 * magnitude) are exact forward and off by one rounding of the output gradient backward.
 * A wrong layout, a missed element or a pass that did not run is off by O(1). */
#ifndef BN_BF16_TESTING_H
#define BN_BF16_TESTING_H

#include <stddef.h>

#include "core/net.h"

#define TOL_LAYER 1e-2
#define TOL_CHAIN 3e-2

typedef struct bf16_case {
    const char *what;
    const char *text;  /* the model; the test sets the last output gradient */
    double tol;
    int exact_input;   /* inputs on a grid BF16 holds exactly (max pooling's ties and order kept) */
    int evaluate_too;  /* then an evaluation forward, compared too (batchnorm's running averages) */
    int deterministic_too; /* run the comparisons a second time in a deterministic context (conv2d:
                              cuDNN's heuristics choose instead of its timing) */
} bf16_case;

/* Fills b's device copy with NaN through its host copy (a BF16 blob converts on the way); nothing
 * for a slice, whose root is filled whole. */
bn_status gt_bf16_poison(bn_blob *b);

/* A copy of blob's host data (the whole capacity), or NULL for a NULL blob; freed by the caller. */
float *gt_snapshot(bn_blob *b);

/* bc at batches 3, 64 and 37 of 64 in a bf16 context on device 0 (and again deterministic with
 * bc->deterministic_too), against the CPU; skipped without a device. */
int gt_bf16_run_case(const bf16_case *bc);

/* The same, and then at batch `large` too (as its own capacity) where large > 0. */
int gt_bf16_run_case_also_at(const bf16_case *bc, int large);

/* Each case in turn, stopping at the first that does not pass. */
int gt_bf16_run_cases(const bf16_case *cases, size_t count);

#endif
