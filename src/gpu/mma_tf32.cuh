/* mma_tf32.cuh - FP32-accurate products on the TF32 tensor cores (sm_80 and later), for the
 * conv2d layer's tensor-core kernels and the dense layer's tensor-core GEMM.
 *
 * x = hi + lo, hi being x rounded to TF32's 10 fraction bits (by adding half of the dropped part
 * and masking it off: two integer instructions, where the cvt.rna.tf32 conversion takes several)
 * and lo = x - hi, exact in FP32, of which the tensor cores read the TF32 part; a*b is taken as
 * lo_a*hi_b + hi_a*lo_b + hi_a*hi_b, with an error near 2^-22 of |a*b| (the lo*lo term and lo's
 * dropped bits).
 *
 * Fragments are those of mma.sync m16n8k8 (row.col), with g = lane / 4 and t = lane % 4:
 * A (16 x 8): a0 (g, t), a1 (g + 8, t), a2 (g, t + 4), a3 (g + 8, t + 4);
 * B (8 x 8):  b0 (t, g), b1 (t + 4, g);
 * C (16 x 8): c0 (g, 2t), c1 (g, 2t + 1), c2 (g + 8, 2t), c3 (g + 8, 2t + 1). */
#ifndef BN_MMA_TF32_CUH
#define BN_MMA_TF32_CUH

#include <stdint.h>

static __device__ __forceinline__ void split_tf32(float x, uint32_t &hi, uint32_t &lo)
{
    hi = (__float_as_uint(x) + 0x1000u) & 0xffffe000u;
    lo = __float_as_uint(x - __uint_as_float(hi));
}

/* An A fragment (a0 .. a3, in the order above) from its four values, split. */
static __device__ __forceinline__ void split_frag_a(float a0, float a1, float a2, float a3, uint32_t (&hi)[4],
                                                    uint32_t (&lo)[4])
{
    split_tf32(a0, hi[0], lo[0]);
    split_tf32(a1, hi[1], lo[1]);
    split_tf32(a2, hi[2], lo[2]);
    split_tf32(a3, hi[3], lo[3]);
}

/* Four 8 x 4 tiles of 32-bit values from shared memory, one address per lane (lanes 8j .. 8j + 7
 * name tile j's rows): register j holds, in lane g * 4 + t, row g and column t of tile j. For
 * an operand kept row by row, the four tiles of an A fragment (rows 0-7 and 8-15, columns 0-3
 * and 4-7) or two n tiles of B come in one instruction. */
static __device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

static __device__ __forceinline__ void mma_tf32(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* acc += a * b from their split parts: remainder x value, value x remainder, value x value. */
static __device__ __forceinline__ void mma_split(float (&acc)[4], const uint32_t (&ah)[4], const uint32_t (&al)[4],
                                                 uint32_t bh0, uint32_t bl0, uint32_t bh1, uint32_t bl1)
{
    mma_tf32(acc, al, bh0, bh1);
    mma_tf32(acc, ah, bl0, bl1);
    mma_tf32(acc, ah, bh0, bh1);
}

/* The same with the two remainder products in their own sum `lo` (acc + lo at the end), so
 * that a warp's chains of dependent products are shorter. */
static __device__ __forceinline__ void mma_split_apart(float (&acc)[4], float (&lo)[4], const uint32_t (&ah)[4],
                                                       const uint32_t (&al)[4], uint32_t bh0, uint32_t bl0,
                                                       uint32_t bh1, uint32_t bl1)
{
    mma_tf32(lo, al, bh0, bh1);
    mma_tf32(acc, ah, bh0, bh1);
    mma_tf32(lo, ah, bl0, bl1);
}

/* acc[i] += a[i] * b for the M row tiles i of one B fragment, with P products each: 3 as
 * mma_split (FP32 accuracy), or 1, the value x value product alone (TF32 accuracy, the `tf32`
 * option; the remainders are then never read, and the compiler drops their computation). */
template <int P, int M>
static __device__ __forceinline__ void mma_tiles(float (&acc)[M][4], const uint32_t (&ah)[M][4],
                                                 const uint32_t (&al)[M][4], uint32_t bh0, uint32_t bl0,
                                                 uint32_t bh1, uint32_t bl1)
{
#pragma unroll
    for (int i = 0; i < M; i++) {
        if (P == 1) mma_tf32(acc[i], ah[i], bh0, bh1);
        else mma_split(acc[i], ah[i], al[i], bh0, bl0, bh1, bl1);
    }
}

/* The same products as mma_tiles, each round of them (remainder x value, value x remainder,
 * value x value) taken for every row tile before the next, so that a sum's next product does not
 * wait on its last: each sum gets its products in mma_split's order. */
template <int P, int M>
static __device__ __forceinline__ void mma_tiles_in_rounds(float (&acc)[M][4], const uint32_t (&ah)[M][4],
                                                           const uint32_t (&al)[M][4], uint32_t bh0, uint32_t bl0,
                                                           uint32_t bh1, uint32_t bl1)
{
    if (P == 3) {
#pragma unroll
        for (int i = 0; i < M; i++) mma_tf32(acc[i], al[i], bh0, bh1);
#pragma unroll
        for (int i = 0; i < M; i++) mma_tf32(acc[i], ah[i], bl0, bl1);
    }
#pragma unroll
    for (int i = 0; i < M; i++) mma_tf32(acc[i], ah[i], bh0, bh1);
}

#endif
