/* step.c - Caffe's "step": the rate falls by gamma every stepsize steps. */
#include <math.h>

#include "lr_policies.h"

enum { GAMMA, STEPSIZE };

static const bn_train_key keys[] = {
    {"gamma", 1e-4, 0.0, 1e3, BN_KEY_REAL},
    {"stepsize", 10000, 1, 2147483647.0, BN_KEY_INT},
};

static double rate(const bn_train_config *c, long iter, long max_iter)
{
    (void)max_iter;
    long stepsize = (long)bn_train_key_value(c, &keys[STEPSIZE]);
    return c->lr * pow(bn_train_key_value(c, &keys[GAMMA]), (double)(iter / stepsize));
}

const bn_lr_policy bn_lr_policy_step = {"step", "lr * gamma ^ floor(s / stepsize)", keys, 2, rate};
