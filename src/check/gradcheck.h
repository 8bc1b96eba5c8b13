/* gradcheck.h - compares a network's analytic gradients with central differences.
 *
 * The objective J is the mean loss (metrics[0] / batch) when the last layer is a loss
 * layer; otherwise J = sum_i out_i * R_i with R a fixed random tensor from the seed, which
 * backward receives as the output gradient. Every parameter and, when the network was set
 * up with want_input_grad, the input are checked at a random subset of coordinates.
 *
 * Why eps is 1e-2 by default: the forward pass runs in float32, so J carries rounding of
 * about 1e-7 relative (the loss sum is even stored as a float). A central difference
 * divides that noise by 2 eps: at eps = 1e-2 it stays near 1e-5 absolute, while the
 * truncation error (eps^2 / 6 * J''') is of the same small order for inputs and weights of
 * scale ~1. A smaller eps drowns in rounding, a larger one in curvature and kinks.
 *
 * A coordinate that fails the tolerance gets a second look with a fourfold smaller step:
 * agreement there means the first step met curvature (truncation error eps^2 / 6 * J''') or
 * a kink, and the coordinate passes with the second comparison. When both fail, kinks (relu
 * at 0, a max whose winner changes) are told from wrong gradients: near a smooth point the
 * central difference stays put as the step shrinks and the gap between the one-sided
 * differences (J+ - J0)/h and (J0 - J-)/h shrinks with it (it is h * J''), right gradient or
 * wrong; a kink inside the step moves the central difference instead, and a kink at the
 * point leaves the same gap (the slope's jump) at both steps, a gap that accounts for the
 * whole error. Such coordinates are skipped and counted, and the check fails when they
 * are more than 5% of all. Networks with many kinks per coordinate (a convolution's weight moves every relu
 * and max behind it) want a smaller eps, e.g. 5e-4, which makes kinks rarer and the
 * rounding floor below higher. */
#ifndef BN_GRADCHECK_H
#define BN_GRADCHECK_H

#include <stdint.h>

#include "core/net.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct bn_gradcheck_opts {
    double eps;               /* perturbation of each coordinate (see above) */
    double tolerance;         /* largest relative error accepted */
    int max_coords_per_blob;  /* coordinates sampled per blob; all when <= 0 or the blob is smaller */
    uint64_t seed;            /* picks the coordinates and the projection R */
} bn_gradcheck_opts;

typedef struct bn_gradcheck_result {
    long checked;             /* coordinates compared */
    long kinks_skipped;       /* coordinates skipped as sitting on a kink */
    double worst_rel_error;   /* largest relative error among those compared */
    double floor;             /* the largest denominator floor of the blobs checked */
    char worst_where[128];    /* "blob[index]: analytic a, numeric n" of the worst one */
} bn_gradcheck_result;

/* Relative errors are |a - n| / max(|a| + |n|, floor): gradients below the floor are in
 * effect compared in absolute terms, where float32 rounding would otherwise make their
 * relative error meaningless. The floor is BN_GRADCHECK_FLOOR or, when larger, the rounding
 * noise of a central difference divided by the tolerance, measured per blob: at a few of its
 * coordinates J is moved by a step far too small for curvature to show, and the gap between
 * the one-sided slopes is rounding alone (gradcheck.c: set_floor). The perturbed coordinate
 * moves only the outputs that depend on it, so the floor does not grow with the batch or the
 * image, and a wrong gradient cannot hide below it. */
#define BN_GRADCHECK_FLOOR 1e-3

/* eps 1e-2, tolerance 1e-2, 100 coordinates per blob, seed 1. */
bn_gradcheck_opts bn_gradcheck_defaults(void);

/* Compares analytic gradients of the network input (needs setup with want_input_grad) and
 * every parameter against central differences. Runs training-mode passes at the network's
 * current batch, labels and step; parameter, input and buffer values are restored exactly, and the
 * gradient slab holds the analytic gradients afterwards. res is filled even on failure.
 * BN_ERR_NUMERIC when the worst relative error exceeds the tolerance (the message names the
 * blob, index, analytic and numeric values), when J is not finite, or when more than 5% of
 * the coordinates sit on kinks. */
bn_status bn_gradcheck_net(bn_net *net, const bn_gradcheck_opts *o, bn_gradcheck_result *res);

#ifdef __cplusplus
}
#endif
#endif
