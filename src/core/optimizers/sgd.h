/* sgd.h - SGD with momentum and L2 weight decay, in Caffe's order: the rate goes into the
 * momentum, v = momentum * v + rate * (g + decay * w); w -= v. */
#ifndef BN_OPTIMIZER_SGD_H
#define BN_OPTIMIZER_SGD_H

#include "optimizer_type.h"

enum { BN_SGD_MOMENTUM };
enum { bn_sgd_state_count = 1 };

static const bn_train_key bn_sgd_keys[] = {
    {"momentum", 0.9, 0.0, 1.0, BN_KEY_REAL},
};

static inline bn_rule_consts bn_sgd_consts(const bn_train_config *c)
{
    bn_rule_consts k = {{(float)bn_train_key_value(c, &bn_sgd_keys[BN_SGD_MOMENTUM])}};
    return k;
}

BN_UPDATE_RULE void bn_sgd_rule(float *w, float g, float *s, float rate, float decay, bn_step_rates r,
                                bn_rule_consts k)
{
    s[0] = k.v[BN_SGD_MOMENTUM] * s[0] + rate * (g + decay * *w);
    *w -= s[0];
}

static const bn_optimizer_type bn_optimizer_sgd = {
    "sgd", "v = momentum * v + lr * (g + weight_decay * w); w -= v (Caffe's)", bn_sgd_keys, 1, {"momentum"}, bn_sgd_state_count,
    bn_sgd_consts, NULL,
};

#endif
