/* hash.h - FNV-1a, the 64-bit hash the project uses wherever it needs one that is the same in
 * every process and on every machine: layer names in the name table, the kernel cache's key of a
 * network, the fingerprint ranks compare before training together, the parameters they compare
 * after it, the seeds tests derive. Not for anything an adversary chooses. */
#ifndef BN_HASH_H
#define BN_HASH_H

#include <stddef.h>
#include <stdint.h>

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

#ifdef __cplusplus
}
#endif
#endif
