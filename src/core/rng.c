#include "rng.h"

#include <math.h>

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

void bn_rng_seed(bn_rng *r, uint64_t seed, uint64_t stream)
{
    uint64_t x = seed ^ (stream * 0xd1b54a32d192ed03ULL);
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&x);
}

uint64_t bn_rng_next(bn_rng *r)
{
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

double bn_rng_uniform(bn_rng *r)
{
    return (double)(bn_rng_next(r) >> 11) * 0x1.0p-53;
}

double bn_rng_normal(bn_rng *r)
{
    double u1 = 1.0 - bn_rng_uniform(r); /* (0, 1]: log is finite */
    double u2 = bn_rng_uniform(r);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

uint64_t bn_rng_below(bn_rng *r, uint64_t n)
{
    uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t x;
    do x = bn_rng_next(r);
    while (x >= limit);
    return x % n;
}
