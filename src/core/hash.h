/* hash.h - FNV-1a, the 64-bit hash the project uses wherever it needs one that is the same in
 * every process and on every machine: layer names in the name table, the kernel cache's key of a
 * network, the fingerprint ranks compare before training together, the seeds tests derive; and a
 * word-wise hash that the device computes too, for the parameters ranks compare after each epoch.
 * Not for anything an adversary chooses. */
#ifndef BN_HASH_H
#define BN_HASH_H

#include <stddef.h>
#include <stdint.h>

#include "counter_rng.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The hash of nothing: where a hash starts. */
#define BN_FNV1A_START 0xcbf29ce484222325ULL

/* h with n more bytes fed in. */
static inline uint64_t bn_fnv1a(uint64_t h, const void *data, size_t n)
{
    const unsigned char *p = (const unsigned char *)data;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ULL;
    return h;
}

/* h with the bytes of text (up to its terminating zero; none for NULL) fed in. */
static inline uint64_t bn_fnv1a_text(uint64_t h, const char *text)
{
    for (const unsigned char *p = (const unsigned char *)text; p && *p; p++) h = (h ^ *p) * 0x100000001b3ULL;
    return h;
}

/* A hash of n 32-bit words for comparing large arrays where FNV-1a's byte-by-byte chain is slow
 * (the ranks' comparison of vgg_fashion's 3.5 MB of parameters through a host copy took 6.4 ms):
 * the wrapping sum over i of splitmix64's mix (counter_rng.h) of (i, w[i]), so that the words can
 * be hashed in any order and in parallel (bn_gpu_hash_words gives the same value on the device),
 * and a word moved, changed or swapped with another changes it. */
BN_HOST_DEVICE static inline uint64_t bn_hash_word(uint64_t i, uint32_t w)
{
    return bn_counter_mix((i << 32 | w) + 0x9e3779b97f4a7c15ULL * i);
}

static inline uint64_t bn_hash_words(const uint32_t *w, size_t n)
{
    uint64_t h = 0;
    for (size_t i = 0; i < n; i++) h += bn_hash_word(i, w[i]);
    return h;
}

#ifdef __cplusplus
}
#endif
#endif
