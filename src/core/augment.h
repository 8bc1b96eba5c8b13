/* augment.h - data augmentation of training examples: the [augment] section of a model file,
 * which command-line flags then override, and the draws that say how each example moves.
 *
 * An example is translated by (dx, dy), each uniform over the integers of [-shift, shift]
 * (right and down are positive; pixels moved in from outside the image are 0 before the [input]
 * standardisation), then mirrored left-right when its flip draw says so. The draws are a pure
 * function of (run seed, step, position of the example in the batch), computed the same way on
 * the host and on the device, so that a resumed run, a replayed CUDA graph and the CPU and GPU
 * paths all move every example alike. Evaluation is never augmented. */
#ifndef BN_AUGMENT_H
#define BN_AUGMENT_H

#include <stdint.h>

#include "layer.h"
#include "options.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The draws below are compiled for the device too, where a .cu file includes this header. */
#ifdef __CUDACC__
#define BN_HOST_DEVICE __host__ __device__
#else
#define BN_HOST_DEVICE
#endif

/* All zero is the default: no augmentation. */
typedef struct bn_augment {
    int shift;   /* translate by up to this many pixels each way (at most half of height and width) */
    int flip;    /* 1: mirror left-right with probability 1/2 */
} bn_augment;

/* How one example moves: content shifted dx columns right and dy rows down, then mirrored when
 * flip is 1. */
typedef struct bn_augment_draw {
    int dx, dy, flip;
} bn_augment_draw;

/* The largest shift an input of this shape takes: half of its smaller side. */
int bn_augment_max_shift(bn_shape input);

/* Reads the keys of an [augment] section over the values already in cfg; the shift is checked
 * against the input's shape. Errors name file:line. */
bn_status bn_augment_parse(bn_options *o, bn_shape input, bn_augment *cfg);

/* Whether a configuration moves anything (with shift 0 and flip 0 a batch is left as it is). */
BN_HOST_DEVICE static inline int bn_augment_active(bn_augment a)
{
    return a.shift > 0 || a.flip;
}

/* splitmix64's increment and output mixing (Steele, Lea and Flood, 2014): a bijection of 64-bit
 * integers that spreads every input bit over the result, in integer arithmetic only, so the host
 * and the device compute the same bits. */
BN_HOST_DEVICE static inline uint64_t bn_augment_mix(uint64_t z)
{
    z += 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* The draw of the example at `position` in the batch of training step `step` of a run seeded
 * `seed`: a counter-based hash h = mix(mix(mix(seed) ^ step) ^ position), nothing carried from one
 * draw to the next. dx takes bits 0-23 of h and dy bits 24-47, each 24-bit field f scaled to
 * [-shift, shift] as (f * (2 * shift + 1) >> 24) - shift (uniform to within 2^-24 per value);
 * flip takes bit 63. */
BN_HOST_DEVICE static inline bn_augment_draw bn_augment_pick(bn_augment a, uint64_t seed, uint64_t step,
                                                             uint64_t position)
{
    uint64_t h = bn_augment_mix(bn_augment_mix(bn_augment_mix(seed) ^ step) ^ position);
    uint64_t span = 2 * (uint64_t)a.shift + 1;
    bn_augment_draw d;
    d.dx = (int)(((h & 0xffffff) * span) >> 24) - a.shift;
    d.dy = (int)((((h >> 24) & 0xffffff) * span) >> 24) - a.shift;
    d.flip = a.flip && (h >> 63);
    return d;
}

/* Where the pixel at row y, column x of a moved example comes from: row * width + column of the
 * same channel of the source image, or -1 when that lies outside it (the pixel is then 0). */
BN_HOST_DEVICE static inline int bn_augment_source(bn_augment_draw d, int height, int width, int y, int x)
{
    int sx = (d.flip ? width - 1 - x : x) - d.dx, sy = y - d.dy;
    return sx >= 0 && sx < width && sy >= 0 && sy < height ? sy * width + sx : -1;
}

#ifdef __cplusplus
}
#endif
#endif
