/* poly.c - Caffe's "poly": lr * (1 - s / T) ^ power over the run's T = max_iter steps, reaching 0
 * at its end (past it, the rate stays there). Before the run's length is known (T = 0) the rate
 * is lr. */
#include <math.h>

#include "lr_policies.h"

/* Power 1, a straight line down, as PyTorch's PolynomialLR has it; Caffe has no default. */
static const bn_train_key keys[] = {
    {"power", 1.0, 0.0, 1e3, BN_KEY_REAL},
};

static double rate(const bn_train_config *c, long iter, long max_iter)
{
    double done = max_iter > 0 ? fmin((double)iter / (double)max_iter, 1.0) : 0.0;
    return c->lr * pow(1.0 - done, bn_train_key_value(c, &keys[0]));
}

const bn_lr_policy bn_lr_policy_poly = {"poly", "lr * (1 - s / T) ^ power", keys, 1, rate};
