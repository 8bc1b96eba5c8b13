#include "augment.h"

int bn_augment_max_shift(bn_shape input)
{
    return (input.h < input.w ? input.h : input.w) / 2;
}

bn_status bn_augment_parse(bn_options *o, bn_shape input, bn_augment *cfg)
{
    int max = bn_augment_max_shift(input);
    BN_TRY(bn_opt_int(o, "shift", cfg->shift, 0, 1 << 16, &cfg->shift));
    if (cfg->shift > max)
        return bn_opt_error(o, "shift", "shift = %d is more than half the input's %dx%d (at most %d)", cfg->shift,
                            input.h, input.w, max);
    return bn_opt_int(o, "flip", cfg->flip, 0, 1, &cfg->flip);
}
