/* rng.h - a small deterministic random generator (splitmix64 seeding xoshiro256**):
 * the same seed gives the same numbers on every machine and on the CPU and GPU paths,
 * because all initial weights are drawn on the host. */
#ifndef BN_RNG_H
#define BN_RNG_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct bn_rng {
    uint64_t s[4];
} bn_rng;

/* Seeds the generator; distinct (seed, stream) pairs give independent sequences. */
void bn_rng_seed(bn_rng *r, uint64_t seed, uint64_t stream);

uint64_t bn_rng_next(bn_rng *r);

/* Uniform in [0, 1). */
double bn_rng_uniform(bn_rng *r);

/* Standard normal (Box-Muller). */
double bn_rng_normal(bn_rng *r);

/* Uniform integer in [0, n), without modulo bias. */
uint64_t bn_rng_below(bn_rng *r, uint64_t n);

#ifdef __cplusplus
}
#endif
#endif
