#include "augment.h"

const char *const bn_augment_pad_names[] = {"zero", "reflect", NULL};

int bn_augment_max_shift(bn_shape input)
{
    return (input.h < input.w ? input.h : input.w) / 2;
}

int bn_augment_max_cutout(bn_shape input)
{
    return input.h < input.w ? input.h : input.w;
}

bn_status bn_augment_parse(bn_options *o, bn_shape input, bn_augment *cfg)
{
    const int max_shift = bn_augment_max_shift(input), max_cutout = bn_augment_max_cutout(input);
    BN_TRY(bn_opt_int(o, "shift", cfg->shift, 0, 1 << 16, &cfg->shift));
    /* The limit also keeps a reflected source inside the image after one reflection. */
    if (cfg->shift > max_shift)
        return bn_opt_error(o, "shift", "shift = %d is more than half the input's %dx%d (at most %d)", cfg->shift,
                            input.h, input.w, max_shift);
    BN_TRY(bn_opt_int(o, "flip", cfg->flip, 0, 1, &cfg->flip));
    BN_TRY(bn_opt_choice(o, "pad", bn_augment_pad_names, cfg->pad, &cfg->pad));
    BN_TRY(bn_opt_int(o, "cutout", cfg->cutout, 0, 1 << 16, &cfg->cutout));
    if (cfg->cutout > max_cutout)
        return bn_opt_error(o, "cutout", "cutout = %d is more than the smaller side of the input's %dx%d (at most %d)",
                            cfg->cutout, input.h, input.w, max_cutout);
    return BN_OK;
}
