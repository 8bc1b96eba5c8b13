/* optimizer_type.h - what an optimizer is to blobnet: a name, the [train] keys it reads, the
 * state it keeps (slabs of the parameters' layout, saved by checkpoints under their names), the
 * constants its rule reads, what it needs that changes from step to step, and its rule for one
 * element, which the CPU loop (train/optimizer.c) and the GPU kernels (train/optimizer_gpu.cu)
 * both call, so that the two cannot drift apart. Each optimizer is one header of this folder,
 * listed in the table (optimizers.h). */
#ifndef BN_OPTIMIZER_TYPE_H
#define BN_OPTIMIZER_TYPE_H

#include <math.h>
#include <stddef.h>

#include "core/train_config.h"

#ifdef __CUDACC__
#define BN_UPDATE_RULE static __host__ __device__ __forceinline__
#else
#define BN_UPDATE_RULE static inline
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* The most state slabs an optimizer keeps, and the most constants its rule reads. */
#define BN_OPTIMIZER_MAX_STATE 3
#define BN_RULE_MAX_CONSTS 6

/* The constants of a rule, worked out once from the config on the host; each optimizer names
 * its own slots. */
typedef struct bn_rule_consts {
    float v[BN_RULE_MAX_CONSTS];
} bn_rule_consts;

/* What an update reads that changes from step to step: the rate before lr_mult, and the values
 * the optimizer's per_step works out for the step (Adam's bias corrections). On the GPU a table
 * of these, one per step, stays on the device, so that a captured step replays with the right
 * ones. */
typedef struct bn_step_rates {
    float lr;
    float per_step[2];
} bn_step_rates;

/* An optimizer's rule for one element: w its weight, g its gradient, s its values of the state
 * slabs in the entry's order; rate = lr * lr_mult and decay = weight_decay * decay_mult of the
 * element's segment. Updates w and s in place. */
typedef struct bn_optimizer_type {
    const char *name;
    const char *rule;                 /* the update in one line, for help texts */
    const bn_train_key *keys;         /* the [train] keys it reads, besides lr and weight_decay */
    int num_keys;
    const char *state[BN_OPTIMIZER_MAX_STATE]; /* the state slabs' names (PyTorch's where it has them) */
    int num_state;
    bn_rule_consts (*consts)(const bn_train_config *c);
    void (*per_step)(const bn_train_config *c, long iter, float out[2]); /* NULL: nothing per step */
} bn_optimizer_type;

#ifdef __cplusplus
}
#endif
#endif
