/* cpu_clones.h - the CPU path's hot loops compiled for more than the baseline x86-64.
 *
 * The tree is built for the baseline instruction set, so that one binary runs on any x86-64.
 * A function marked BN_CPU_CLONES is compiled three times, for AVX-512 (x86-64-v4), AVX2 with
 * FMA (x86-64-v3) and the baseline, and the dynamic loader binds its callers to the version the
 * CPU runs, once, when the program starts. Functions the clone calls and inlines (static
 * inline) are compiled within each version. Elsewhere (another compiler or architecture) the
 * mark is empty. */
#ifndef BN_CPU_CLONES_H
#define BN_CPU_CLONES_H
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__linux__)
#define BN_CPU_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define BN_CPU_CLONES
#endif
#endif
