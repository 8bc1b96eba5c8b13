/* conv_family.c - the table of blobnet's convolution kernel families (conv_family.h). */
#include <string.h>

#include "conv_family.h"

/* In the order of BN_CONV_FAMILY_*: the kernel cache names the families, but the order is also
 * the one in which a plan times them. */
const bn_conv_family *const bn_conv_families[BN_CONV_FAMILY_COUNT] = {
    &bn_conv_family_direct,
    &bn_conv_family_igemm,
    &bn_conv_family_rows,
    &bn_conv_family_tensor,
    &bn_conv_family_argmax,
    &bn_conv_family_halo,
    &bn_conv_family_wino,
    &bn_conv_family_fma,
};

const bn_conv_family *bn_conv_family_find(const char *name)
{
    const int f = bn_conv_family_number(name);
    return f ? bn_conv_families[f - 1] : NULL;
}

int bn_conv_family_number(const char *name)
{
    for (int f = 1; f <= BN_CONV_FAMILY_COUNT; f++)
        if (strcmp(bn_conv_families[f - 1]->name, name) == 0) return f;
    return 0;
}

int bn_conv_family_applies(const bn_conv_family *f, const bn_conv_family_plan *p, const bn_conv_shape *s, int pass,
                           const char **why)
{
    *why = NULL;
    if (!(f->serves & (1u << pass)))
        *why = "no kernel for this pass";
    else if (f->needs_pooled && !s->pooled)
        *why = "only through a fused 2x2 max pooling";
    else
        *why = f->refuses(p, s, pass);
    return *why == NULL;
}

void bn_conv_family_order(int pass, int order[BN_CONV_FAMILY_COUNT])
{
    for (int f = 1; f <= BN_CONV_FAMILY_COUNT; f++) order[bn_conv_families[f - 1]->rank[pass]] = f;
}

const char *bn_conv_pass_name(int pass)
{
    static const char *const names[BN_CONV_PASSES] = {"forward", "backward-data", "backward-filter"};
    return pass >= 0 && pass < BN_CONV_PASSES ? names[pass] : "?";
}

long long bn_conv_split_share(long long units, long long min_per, long long wave, int beside,
                              bn_conv_split_blocks blocks, const void *pass)
{
    const long long whole = blocks(pass, units);
    if (whole >= wave) return units;
    long long best = (whole + wave - 1) / wave * units, share = units;
    for (long long most = 2; most <= BN_CONV_SPLIT_MAX; most++) {
        const long long per = (units + most - 1) / most;
        if (per < min_per) break;
        if (per >= share) continue;
        const long long b = blocks(pass, per);
        if (b > BN_CONV_SPLIT_SLOTS * wave) break;
        const long long cost = (b + wave - 1) / wave * per;
        if (cost < best || (beside && cost == best)) best = cost, share = per;
    }
    return share;
}
