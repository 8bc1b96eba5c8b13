#include "train_config.h"

#include <limits.h>
#include <stddef.h>

const char *const bn_lr_policy_names[] = {"fixed", "step", "inv", "cosine", NULL};

bn_train_config bn_train_config_defaults(void)
{
    bn_train_config c = {
        .batch = 64, .epochs = 10, .lr = 0.01, .momentum = 0.9, .weight_decay = 5e-4,
        .lr_policy = BN_LR_FIXED, .gamma = 1e-4, .power = 0.75, .stepsize = 10000,
        .lr_min = 0.0, .bias_lr_mult = 1.0, .seed = 1,
    };
    return c;
}

bn_status bn_train_config_parse(bn_options *o, bn_train_config *cfg)
{
    int policy = (int)cfg->lr_policy, seed = (int)cfg->seed;
    BN_TRY(bn_opt_int(o, "batch", cfg->batch, 1, 1 << 20, &cfg->batch));
    BN_TRY(bn_opt_int(o, "epochs", cfg->epochs, 0, 1 << 20, &cfg->epochs));
    BN_TRY(bn_opt_float(o, "lr", cfg->lr, 0.0, 1e3, &cfg->lr));
    BN_TRY(bn_opt_float(o, "momentum", cfg->momentum, 0.0, 1.0, &cfg->momentum));
    BN_TRY(bn_opt_float(o, "weight_decay", cfg->weight_decay, 0.0, 1.0, &cfg->weight_decay));
    BN_TRY(bn_opt_choice(o, "lr_policy", bn_lr_policy_names, policy, &policy));
    BN_TRY(bn_opt_float(o, "gamma", cfg->gamma, 0.0, 1e3, &cfg->gamma));
    BN_TRY(bn_opt_float(o, "power", cfg->power, 0.0, 1e3, &cfg->power));
    BN_TRY(bn_opt_int(o, "stepsize", cfg->stepsize, 1, INT_MAX, &cfg->stepsize));
    BN_TRY(bn_opt_float(o, "lr_min", cfg->lr_min, 0.0, 1e3, &cfg->lr_min));
    BN_TRY(bn_opt_float(o, "bias_lr_mult", cfg->bias_lr_mult, 0.0, 1e3, &cfg->bias_lr_mult));
    BN_TRY(bn_opt_int(o, "seed", seed, 0, INT_MAX, &seed));
    cfg->lr_policy = (bn_lr_policy)policy;
    cfg->seed = (unsigned long long)seed;
    return BN_OK;
}
