/* rmsprop.h - torch.optim.RMSprop, in the order of its single-tensor code: g += decay * w;
 * sq = alpha * sq + (1 - alpha) * g * g; centered: ga = lerp(ga, g, 1 - alpha),
 * avg = sqrt(sq - ga * ga) + eps, else avg = sqrt(sq) + eps; with momentum > 0,
 * buf = momentum * buf + g / avg and w -= rate * buf, else w -= rate * g / avg. Its three slabs
 * are kept whatever the keys, so that every rmsprop checkpoint holds the same tensors. */
#ifndef BN_OPTIMIZER_RMSPROP_H
#define BN_OPTIMIZER_RMSPROP_H

#include "optimizer_type.h"

enum { BN_RMSPROP_ALPHA, BN_RMSPROP_EPS, BN_RMSPROP_MOMENTUM, BN_RMSPROP_CENTERED };
enum { bn_rmsprop_state_count = 3 };
enum { BN_RMSPROP_K_ALPHA, BN_RMSPROP_K_ONE_MINUS_ALPHA, BN_RMSPROP_K_EPS, BN_RMSPROP_K_MOMENTUM,
       BN_RMSPROP_K_CENTERED };

static const bn_train_key bn_rmsprop_keys[] = {
    {"alpha", 0.99, 0.0, 1.0, BN_KEY_REAL},
    {"eps", 1e-8, 0.0, 1.0, BN_KEY_REAL},
    {"momentum", 0.0, 0.0, 1.0, BN_KEY_REAL},
    {"centered", 0.0, 0.0, 1.0, BN_KEY_INT},
};

/* 1 - alpha in double, as PyTorch works out its scalars. */
static inline bn_rule_consts bn_rmsprop_consts(const bn_train_config *c)
{
    double alpha = bn_train_key_value(c, &bn_rmsprop_keys[BN_RMSPROP_ALPHA]);
    bn_rule_consts k = {{(float)alpha, (float)(1.0 - alpha), (float)bn_train_key_value(c, &bn_rmsprop_keys[BN_RMSPROP_EPS]),
                         (float)bn_train_key_value(c, &bn_rmsprop_keys[BN_RMSPROP_MOMENTUM]),
                         (float)bn_train_key_value(c, &bn_rmsprop_keys[BN_RMSPROP_CENTERED])}};
    return k;
}

/* s: the running square, the momentum buffer, the running mean of the gradient. The mean moves
 * as torch.lerp does, from whichever end is nearer the weight. */
BN_UPDATE_RULE void bn_rmsprop_rule(float *w, float g, float *s, float rate, float decay, bn_step_rates r,
                                    bn_rule_consts k)
{
    g += decay * *w;
    float sq = k.v[BN_RMSPROP_K_ALPHA] * s[0];
    sq = sq + k.v[BN_RMSPROP_K_ONE_MINUS_ALPHA] * g * g;
    s[0] = sq;
    float avg;
    if (k.v[BN_RMSPROP_K_CENTERED] != 0.0f) {
        float t = k.v[BN_RMSPROP_K_ONE_MINUS_ALPHA], ga = s[2];
        ga = t < 0.5f ? ga + t * (g - ga) : g - (g - ga) * (1.0f - t);
        s[2] = ga;
        avg = sqrtf(sq - ga * ga) + k.v[BN_RMSPROP_K_EPS];
    } else {
        avg = sqrtf(sq) + k.v[BN_RMSPROP_K_EPS];
    }
    if (k.v[BN_RMSPROP_K_MOMENTUM] > 0.0f) {
        float buf = k.v[BN_RMSPROP_K_MOMENTUM] * s[1];
        s[1] = buf + g / avg;
        *w -= rate * s[1];
    } else {
        *w -= rate * g / avg;
    }
}

static const bn_optimizer_type bn_optimizer_rmsprop = {
    "rmsprop", "torch.optim.RMSprop: weight_decay added to the gradient", bn_rmsprop_keys, 4,
    {"square_avg", "momentum_buffer", "grad_avg"}, bn_rmsprop_state_count, bn_rmsprop_consts, NULL,
};

#endif
