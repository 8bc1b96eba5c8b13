/* inv.c - Caffe's "inv", which its LeNet trains with. */
#include <math.h>

#include "lr_policies.h"

enum { GAMMA, POWER };

static const bn_train_key keys[] = {
    {"gamma", 1e-4, 0.0, 1e3, BN_KEY_REAL},
    {"power", 0.75, 0.0, 1e3, BN_KEY_REAL},
};

static double rate(const bn_train_config *c, long iter, long max_iter)
{
    (void)max_iter;
    return c->lr * pow(1.0 + bn_train_key_value(c, &keys[GAMMA]) * (double)iter, -bn_train_key_value(c, &keys[POWER]));
}

const bn_lr_policy bn_lr_policy_inv = {"inv", "lr * (1 + gamma * s) ^ -power", keys, 2, rate};
