/* cosine.c - half a cosine from lr down to lr_min over the whole run; lr before the run's length
 * is known, lr_min past its end. */
#include <math.h>

#include "lr_policies.h"

#define PI 3.14159265358979323846

static const bn_train_key keys[] = {
    {"lr_min", 0.0, 0.0, 1e3, BN_KEY_REAL},
};

static double rate(const bn_train_config *c, long iter, long max_iter)
{
    double lr_min = bn_train_key_value(c, &keys[0]);
    double t = max_iter > 0 ? fmin((double)iter / (double)max_iter, 1.0) : 0.0;
    return lr_min + (c->lr - lr_min) * 0.5 * (1.0 + cos(PI * t));
}

const bn_lr_policy bn_lr_policy_cosine = {"cosine", "lr_min + (lr - lr_min) * (1 + cos(pi * s / T)) / 2", keys, 1,
                                          rate};
