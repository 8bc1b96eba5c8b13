#include "train_config.h"

#include <limits.h>
#include <stddef.h>

const char *const bn_lr_policy_names[] = {"fixed", "step", "inv", "cosine", "onecycle", NULL};
const char *const bn_optimizer_names[] = {"sgd", "adam", "adamw", NULL};

bn_train_config bn_train_config_defaults(void)
{
    bn_train_config c = {
        .batch = 64, .epochs = 10, .optimizer = BN_OPT_SGD, .lr = 0.01, .momentum = 0.9, .weight_decay = 5e-4,
        .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .lr_policy = BN_LR_FIXED, .gamma = 1e-4, .power = 0.75,
        .stepsize = 10000, .lr_min = 0.0, .pct_start = 0.3, .div_factor = 25.0, .final_div_factor = 1e4,
        .warmup = 0, .bias_lr_mult = 1.0, .seed = 1,
    };
    return c;
}

/* A beta in [0, 1): Adam divides by 1 - beta^t, which a beta of 1 makes 0. */
static bn_status beta(bn_options *o, const char *key, double def, double *out)
{
    BN_TRY(bn_opt_float(o, key, def, 0.0, 1.0, out));
    if (*out == 1.0) return bn_opt_error(o, key, "%s = 1 is out of range [0, 1)", key);
    return BN_OK;
}

bn_status bn_train_config_parse(bn_options *o, bn_train_config *cfg)
{
    int policy = (int)cfg->lr_policy, optimizer = (int)cfg->optimizer, seed = (int)cfg->seed;
    BN_TRY(bn_opt_int(o, "batch", cfg->batch, 1, 1 << 20, &cfg->batch));
    BN_TRY(bn_opt_int(o, "epochs", cfg->epochs, 0, 1 << 20, &cfg->epochs));
    BN_TRY(bn_opt_choice(o, "optimizer", bn_optimizer_names, optimizer, &optimizer));
    BN_TRY(bn_opt_float(o, "lr", cfg->lr, 0.0, 1e3, &cfg->lr));
    BN_TRY(bn_opt_float(o, "momentum", cfg->momentum, 0.0, 1.0, &cfg->momentum));
    BN_TRY(bn_opt_float(o, "weight_decay", cfg->weight_decay, 0.0, 1.0, &cfg->weight_decay));
    BN_TRY(beta(o, "beta1", cfg->beta1, &cfg->beta1));
    BN_TRY(beta(o, "beta2", cfg->beta2, &cfg->beta2));
    BN_TRY(bn_opt_float(o, "eps", cfg->eps, 0.0, 1.0, &cfg->eps));
    BN_TRY(bn_opt_choice(o, "lr_policy", bn_lr_policy_names, policy, &policy));
    BN_TRY(bn_opt_float(o, "gamma", cfg->gamma, 0.0, 1e3, &cfg->gamma));
    BN_TRY(bn_opt_float(o, "power", cfg->power, 0.0, 1e3, &cfg->power));
    BN_TRY(bn_opt_int(o, "stepsize", cfg->stepsize, 1, INT_MAX, &cfg->stepsize));
    BN_TRY(bn_opt_float(o, "lr_min", cfg->lr_min, 0.0, 1e3, &cfg->lr_min));
    BN_TRY(bn_opt_float(o, "pct_start", cfg->pct_start, 0.0, 1.0, &cfg->pct_start));
    BN_TRY(bn_opt_float(o, "div_factor", cfg->div_factor, 1.0, 1e9, &cfg->div_factor));
    BN_TRY(bn_opt_float(o, "final_div_factor", cfg->final_div_factor, 1.0, 1e12, &cfg->final_div_factor));
    BN_TRY(bn_opt_int(o, "warmup", cfg->warmup, 0, INT_MAX, &cfg->warmup));
    BN_TRY(bn_opt_float(o, "bias_lr_mult", cfg->bias_lr_mult, 0.0, 1e3, &cfg->bias_lr_mult));
    BN_TRY(bn_opt_int(o, "seed", seed, 0, INT_MAX, &seed));
    cfg->optimizer = (bn_optimizer_kind)optimizer;
    cfg->lr_policy = (bn_lr_policy)policy;
    cfg->seed = (unsigned long long)seed;
    return BN_OK;
}
