/* counter_rng.h - counter-based random draws: a draw is a hash of (seed, what draws, step,
 * element), with nothing carried from one draw to the next, so the host and the device compute
 * the same numbers, in any order, and a step captured in a CUDA graph draws afresh at each replay
 * by reading its step from device memory. The hash is splitmix64's finalizer. */
#ifndef BN_COUNTER_RNG_H
#define BN_COUNTER_RNG_H

#include <stdint.h>

/* The draws below are compiled for the device too, where a .cu file includes this header. */
#ifndef BN_HOST_DEVICE
#ifdef __CUDACC__
#define BN_HOST_DEVICE __host__ __device__
#else
#define BN_HOST_DEVICE
#endif
#endif

/* splitmix64's increment and output mixing (Steele, Lea and Flood, 2014): a bijection of 64-bit
 * integers that spreads every input bit over the result, in integer arithmetic only. */
BN_HOST_DEVICE static inline uint64_t bn_counter_mix(uint64_t z)
{
    z += 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* The top 24 bits of h as a float uniform in [0, 1), exactly representable. */
BN_HOST_DEVICE static inline float bn_counter_uniform(uint64_t h)
{
    return (float)(h >> 40) * (1.0f / 16777216.0f);
}

#endif
