/* fixed.c - the base rate throughout. */
#include <stddef.h>

#include "lr_policies.h"

static double rate(const bn_train_config *c, long iter, long max_iter)
{
    (void)iter, (void)max_iter;
    return c->lr;
}

const bn_lr_policy bn_lr_policy_fixed = {"fixed", "lr", NULL, 0, rate};
