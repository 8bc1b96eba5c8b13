#include "optimizers.h"

#include <stddef.h>

#define NAME(name) #name,
const char *const bn_optimizer_names[] = {BN_OPTIMIZERS(NAME) NULL};

#define ENTRY(name) &bn_optimizer_##name,
static const bn_optimizer_type *const table[] = {BN_OPTIMIZERS(ENTRY)};

int bn_optimizer_type_count(void)
{
    return (int)(sizeof table / sizeof table[0]);
}

const bn_optimizer_type *bn_optimizer_type_at(int i)
{
    return table[i];
}

int bn_optimizer_find(const char *name)
{
    return bn_name_index(bn_optimizer_names, name);
}
