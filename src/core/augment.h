/* augment.h - data augmentation of training examples: the [augment] section of a model file,
 * which command-line flags then override, and the draws that say how each example moves.
 *
 * An example is translated by (dx, dy), each uniform over the integers of [-shift, shift]
 * (right and down are positive), then mirrored left-right when its flip draw says so: what
 * torchvision's RandomCrop(size, padding=shift) and RandomHorizontalFlip do. Pixels moved in from
 * outside the image are 0 before the [input] standardisation (pad = zero), or the image reflected
 * at its edge without repeating the edge (pad = reflect, numpy's and torchvision's 'reflect':
 * column -1 shows column 1, column w shows w - 2). Then a cutout square of the moved example
 * (DeVries and Taylor, 2017) is set to 0 in every channel after the standardisation: the [input]
 * mean, as their zeros on normalised images are, and a value that adds nothing to the first
 * layer's weighted sums. The draws are a pure function of (run seed, step, position of the
 * example in the batch), computed the same way on the host and on the device, so that a resumed
 * run, a replayed CUDA graph and the CPU and GPU paths all move every example alike. Evaluation
 * is never augmented. */
#ifndef BN_AUGMENT_H
#define BN_AUGMENT_H

#include <stdint.h>

#include "counter_rng.h"
#include "layer.h"
#include "options.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What a shift moves in from outside the image. */
enum { BN_AUGMENT_PAD_ZERO, BN_AUGMENT_PAD_REFLECT };

/* The [augment] pad values, in that order, NULL-terminated. */
extern const char *const bn_augment_pad_names[];

/* All zero is the default: no augmentation. */
typedef struct bn_augment {
    int shift;   /* translate by up to this many pixels each way (at most half of height and width) */
    int flip;    /* 1: mirror left-right with probability 1/2 */
    int pad;     /* BN_AUGMENT_PAD_ZERO or BN_AUGMENT_PAD_REFLECT */
    int cutout;  /* side of the square set to 0 after standardisation (0: none; at most the
                  * smaller side of the input) */
} bn_augment;

/* How one example moves: content shifted dx columns right and dy rows down, sources outside the
 * image reflected back in when reflect is 1, then mirrored when flip is 1; then rows [top, bottom)
 * of columns [left, right) of the result cut out (an empty box without cutout). */
typedef struct bn_augment_draw {
    int dx, dy, flip;
    int reflect;
    int top, left, bottom, right;
} bn_augment_draw;

/* The largest shift an input of this shape takes: half of its smaller side, which keeps every
 * reflected source inside the image after one reflection. */
int bn_augment_max_shift(bn_shape input);

/* The largest cutout an input of this shape takes: its smaller side. */
int bn_augment_max_cutout(bn_shape input);

/* Reads the keys of an [augment] section over the values already in cfg; the shift and the
 * cutout are checked against the input's shape. Errors name file:line. */
bn_status bn_augment_parse(bn_options *o, bn_shape input, bn_augment *cfg);

/* Whether a configuration changes anything (with shift, flip and cutout 0 a batch is left as it
 * is, whatever the pad). */
BN_HOST_DEVICE static inline int bn_augment_active(bn_augment a)
{
    return a.shift > 0 || a.flip || a.cutout > 0;
}

/* A 24-bit field f scaled to an integer of [0, n): f * n >> 24 (uniform to within 2^-24 per
 * value). */
BN_HOST_DEVICE static inline int bn_augment_scale(uint64_t f, uint64_t n)
{
    return (int)(((f & 0xffffff) * n) >> 24);
}

/* The draw of the example at `position` in the batch of training step `step` of a run seeded
 * `seed`, for inputs height x width: a counter-based hash (counter_rng.h), h =
 * mix(mix(mix(seed) ^ step) ^ position), nothing carried from one draw to the next. dx takes bits 0-23 of h and dy bits
 * 24-47, each scaled to [0, 2 * shift + 1) and less shift; flip takes bit 63 (bits 48-62 are
 * unused). The cutout's centre comes from a second mix, g = mix(h): its row cy from bits 0-23 of
 * g scaled to [0, height), its column cx from bits 24-47 scaled to [0, width) (bits 48-63 are
 * unused). The square is rows cy - cutout / 2 .. cy - cutout / 2 + cutout - 1 and the same of
 * columns around cx, clipped to the image: for an even side the box of DeVries and Taylor's
 * code, for an odd one the square centred on (cy, cx). The second mix leaves dx, dy and flip as
 * they were before cutout existed, with it or without. */
BN_HOST_DEVICE static inline bn_augment_draw bn_augment_pick(bn_augment a, int height, int width, uint64_t seed,
                                                             uint64_t step, uint64_t position)
{
    uint64_t h = bn_counter_mix(bn_counter_mix(bn_counter_mix(seed) ^ step) ^ position);
    uint64_t span = 2 * (uint64_t)a.shift + 1;
    bn_augment_draw d;
    d.dx = bn_augment_scale(h, span) - a.shift;
    d.dy = bn_augment_scale(h >> 24, span) - a.shift;
    d.flip = a.flip && (h >> 63);
    d.reflect = a.pad == BN_AUGMENT_PAD_REFLECT;
    d.top = d.left = d.bottom = d.right = 0;
    if (a.cutout > 0) {
        uint64_t g = bn_counter_mix(h);
        int top = bn_augment_scale(g, (uint64_t)height) - a.cutout / 2;
        int left = bn_augment_scale(g >> 24, (uint64_t)width) - a.cutout / 2;
        d.top = top < 0 ? 0 : top;
        d.left = left < 0 ? 0 : left;
        d.bottom = top + a.cutout > height ? height : top + a.cutout;
        d.right = left + a.cutout > width ? width : left + a.cutout;
    }
    return d;
}

/* Coordinate i of a side of n, reflected at the edges without repeating them (-1 -> 1,
 * n -> n - 2): one reflection, enough for i in [-(n - 1), 2n - 2]. */
BN_HOST_DEVICE static inline int bn_augment_reflect(int i, int n)
{
    return i < 0 ? -i : i >= n ? 2 * (n - 1) - i : i;
}

/* Where the pixel at row y, column x of a moved example comes from: row * width + column of the
 * same channel of the source image, or -1 when that lies outside it (the pixel is then 0). */
BN_HOST_DEVICE static inline int bn_augment_source(bn_augment_draw d, int height, int width, int y, int x)
{
    int sx = (d.flip ? width - 1 - x : x) - d.dx, sy = y - d.dy;
    if (d.reflect) {
        sx = bn_augment_reflect(sx, width);
        sy = bn_augment_reflect(sy, height);
    }
    return sx >= 0 && sx < width && sy >= 0 && sy < height ? sy * width + sx : -1;
}

/* Whether the pixel at row y, column x of a moved example lies in its cutout (and is then 0
 * after the standardisation, in every channel). */
BN_HOST_DEVICE static inline int bn_augment_cut(bn_augment_draw d, int y, int x)
{
    return y >= d.top && y < d.bottom && x >= d.left && x < d.right;
}

#ifdef __cplusplus
}
#endif
#endif
