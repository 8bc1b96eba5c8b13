#include "lr_policies.h"

#include <stddef.h>

#define NAME(name) #name,
const char *const bn_lr_policy_names[] = {BN_LR_POLICIES(NAME) NULL};

#define ENTRY(name) &bn_lr_policy_##name,
static const bn_lr_policy *const table[] = {BN_LR_POLICIES(ENTRY)};

int bn_lr_policy_count(void)
{
    return (int)(sizeof table / sizeof table[0]);
}

const bn_lr_policy *bn_lr_policy_at(int i)
{
    return table[i];
}

int bn_lr_policy_find(const char *name)
{
    return bn_name_index(bn_lr_policy_names, name);
}
