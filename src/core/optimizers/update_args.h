/* update_args.h - an optimizer's update of a run of the parameter slab, as a kernel on the device
 * takes it: the slabs, the segments' multipliers, the step's rates and the rule's constants. The
 * update kernels (train/optimizer_gpu.cu) run it alone; a kernel that sums a bucket's gradients
 * across the ranks can apply it to each sum as it makes it (dist/peer_sum.cu), so that no update
 * pass follows the sum. gpu/param_update.cuh holds the device side. */
#ifndef BN_UPDATE_ARGS_H
#define BN_UPDATE_ARGS_H

#include <stddef.h>

#include "optimizer_type.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A run of the slab sharing one pair of multipliers (one parameter, or several in a row). */
typedef struct bn_param_segment {
    size_t offset, count;
    float lr_mult, decay_mult;
} bn_param_segment;

/* The most segments an update carries in its own arguments (bn_update_args.near). */
#define BN_UPDATE_NEAR_SEGS 8

/* The update of slab elements [lo, hi) by the table's optimizer `optimizer` (device pointers). */
typedef struct bn_update_args {
    float *w;                              /* the parameters */
    void *w16;                             /* their BF16 copy under --precision bf16, else NULL */
    const float *g;                        /* the gradients (a kernel that makes them passes its own) */
    float *state[BN_OPTIMIZER_MAX_STATE];  /* the optimizer's state slabs */
    const bn_param_segment *segs;          /* the range's segments, from the one holding lo */
    int nseg;                              /* how many */
    bn_param_segment near[BN_UPDATE_NEAR_SEGS]; /* the same where nseg is at most BN_UPDATE_NEAR_SEGS: a
                                                  kernel finds an element's multipliers in its
                                                  arguments, without a chain of loads */
    size_t lo, hi;
    bn_step_rates r;                       /* the rates, where no schedule covers the step */
    const bn_step_rates *schedule;         /* the schedule's rates by step, or NULL */
    int *cursor;                           /* one past the schedule's index of this step: each
                                              training step moves it on before its first update
                                              (bn_optimizer_begin_step) */
    bn_rule_consts k;
    float wd;                              /* the weight decay before decay_mult */
    int optimizer;                         /* index into the table (core/optimizers/optimizers.h) */
} bn_update_args;

#ifdef __cplusplus
}
#endif
#endif
