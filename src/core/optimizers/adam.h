/* adam.h - torch.optim.Adam: L2 decay added to the gradient, g += decay * w; then
 * m = b1 * m + (1 - b1) * g; v = b2 * v + (1 - b2) * g * g;
 * w -= rate * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps), t = iter + 1 the step's number.
 * adamw.h shares its arithmetic. */
#ifndef BN_OPTIMIZER_ADAM_H
#define BN_OPTIMIZER_ADAM_H

#include "optimizer_type.h"

enum { BN_ADAM_BETA1, BN_ADAM_BETA2, BN_ADAM_EPS };
enum { bn_adam_state_count = 2 };
enum { BN_ADAM_K_BETA1, BN_ADAM_K_BETA2, BN_ADAM_K_ONE_MINUS_BETA1, BN_ADAM_K_ONE_MINUS_BETA2, BN_ADAM_K_EPS };

static const bn_train_key bn_adam_keys[] = {
    {"beta1", 0.9, 0.0, 1.0, BN_KEY_BELOW_HI},
    {"beta2", 0.999, 0.0, 1.0, BN_KEY_BELOW_HI},
    {"eps", 1e-8, 0.0, 1.0, BN_KEY_REAL},
};

/* 1 - beta is worked out in double, as PyTorch does: 1 - 0.999f in float would be 0.0009999871,
 * 1.3e-5 off. */
static inline bn_rule_consts bn_adam_consts(const bn_train_config *c)
{
    double b1 = bn_train_key_value(c, &bn_adam_keys[BN_ADAM_BETA1]);
    double b2 = bn_train_key_value(c, &bn_adam_keys[BN_ADAM_BETA2]);
    bn_rule_consts k = {{(float)b1, (float)b2, (float)(1.0 - b1), (float)(1.0 - b2),
                         (float)bn_train_key_value(c, &bn_adam_keys[BN_ADAM_EPS])}};
    return k;
}

/* The bias corrections of step t = iter + 1: 1 - beta1^t and sqrt(1 - beta2^t). */
static inline void bn_adam_per_step(const bn_train_config *c, long iter, float out[2])
{
    double t = (double)iter + 1.0;
    out[0] = (float)(1.0 - pow(bn_train_key_value(c, &bn_adam_keys[BN_ADAM_BETA1]), t));
    out[1] = (float)sqrt(1.0 - pow(bn_train_key_value(c, &bn_adam_keys[BN_ADAM_BETA2]), t));
}

/* Adam, or AdamW when decoupled, in the order of torch.optim's single-tensor code: the bias
 * corrections divide the step size and the root of v, w -= (rate / bias1) * m / (sqrt(v) / bias2
 * + eps), which is rate * mhat / (sqrt(vhat) + eps). */
BN_UPDATE_RULE void bn_adam_family_rule(float *w, float g, float *s, float rate, float decay, bn_step_rates r,
                                        bn_rule_consts k, int decoupled)
{
    float wi = *w;
    if (decoupled) wi *= 1.0f - rate * decay;
    else g += decay * wi;
    float mi = k.v[BN_ADAM_K_BETA1] * s[0] + k.v[BN_ADAM_K_ONE_MINUS_BETA1] * g;
    float vi = k.v[BN_ADAM_K_BETA2] * s[1] + k.v[BN_ADAM_K_ONE_MINUS_BETA2] * g * g;
    s[0] = mi;
    s[1] = vi;
    *w = wi - rate / r.per_step[0] * mi / (sqrtf(vi) / r.per_step[1] + k.v[BN_ADAM_K_EPS]);
}

BN_UPDATE_RULE void bn_adam_rule(float *w, float g, float *s, float rate, float decay, bn_step_rates r,
                                 bn_rule_consts k)
{
    bn_adam_family_rule(w, g, s, rate, decay, r, k, 0);
}

static const bn_optimizer_type bn_optimizer_adam = {
    "adam", "torch.optim.Adam: weight_decay added to the gradient", bn_adam_keys, 3, {"exp_avg", "exp_avg_sq"}, bn_adam_state_count,
    bn_adam_consts, bn_adam_per_step,
};

#endif
