/* cpu_vector.h - the CPU path's vector code: vectors of 16 floats written with GCC's vector
 * extensions, and the hot functions compiled for more than the baseline x86-64.
 *
 * The tree is built for the baseline instruction set, so that one binary runs on any x86-64.
 * A function marked BN_CPU_CLONES is compiled three times, for AVX-512 (x86-64-v4), AVX2 with
 * FMA (x86-64-v3) and the baseline, and the dynamic loader binds its callers to the version the
 * CPU runs, once, when the program starts. The helpers below are always inlined, so they are
 * compiled within each version: a bn_vf is one AVX-512 register there, two AVX2 ones or four
 * SSE ones. Elsewhere (another compiler or architecture) the mark is empty.
 *
 * A file using them passes vectors only between inlined functions, so no call crosses an ABI
 * boundary with one: it is built with -Wno-psabi (the Makefile). */
#ifndef BN_CPU_VECTOR_H
#define BN_CPU_VECTOR_H

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__linux__)
#define BN_CPU_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define BN_CPU_CLONES
#endif

#define BN_VLANES 16
#define BN_VINLINE static inline __attribute__((always_inline))

typedef float bn_vf __attribute__((vector_size(64)));
typedef int bn_vi __attribute__((vector_size(64)));
/* Loads and stores through this type need no alignment beyond a float's. */
typedef float bn_vf_unaligned __attribute__((vector_size(64), aligned(4), may_alias));

BN_VINLINE bn_vf bn_vload(const float *p)
{
    return *(const bn_vf_unaligned *)p;
}

BN_VINLINE void bn_vstore(float *p, bn_vf v)
{
    *(bn_vf_unaligned *)p = v;
}

/* a in every lane: written as a shuffle of lane 0, which compiles to one broadcast (GCC builds an
 * initialiser of sixteen a's lane by lane). */
BN_VINLINE bn_vf bn_vsplat(float a)
{
    bn_vf v = {a};
    return __builtin_shufflevector(v, v, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
}

/* v where test > 0, else 0 (a NaN test gives 0): a ReLU's output, or a gradient through its mask. */
BN_VINLINE bn_vf bn_vwhere_positive(bn_vf test, bn_vf v)
{
    bn_vi keep = test > bn_vsplat(0.0f);
    return (bn_vf)((bn_vi)v & keep);
}
#endif
