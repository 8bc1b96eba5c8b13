/* adamw.h - torch.optim.AdamW: the weights decay apart from the gradient, w *= 1 - rate * decay,
 * then Adam's update (adam.h) with g as it is. */
#ifndef BN_OPTIMIZER_ADAMW_H
#define BN_OPTIMIZER_ADAMW_H

#include "adam.h"

enum { bn_adamw_state_count = bn_adam_state_count };

BN_UPDATE_RULE void bn_adamw_rule(float *w, float g, float *s, float rate, float decay, bn_step_rates r,
                                  bn_rule_consts k)
{
    bn_adam_family_rule(w, g, s, rate, decay, r, k, 1);
}

static const bn_optimizer_type bn_optimizer_adamw = {
    "adamw", "torch.optim.AdamW: weight_decay applied to the weights, apart from the gradient", bn_adam_keys, 3,
    {"exp_avg", "exp_avg_sq"}, bn_adamw_state_count, bn_adam_consts, bn_adam_per_step,
};

#endif
