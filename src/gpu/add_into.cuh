/* add_into.cuh - dst += src over n elements of FP32 or BF16 (the sum taken in float, rounded to
 * the type once): the gradient sums of a blob with several readers (core/device.h's add and
 * add_bf16). In 16-byte packs where both pointers are aligned and n a multiple of the pack,
 * with 32-bit indices where they fit: one element at a time with 64-bit indices, a sum over
 * resnet_fashion's 6.4 MB gradients took 10-14 us, about three times its bytes' time. */
#ifndef BN_ADD_INTO_CUH
#define BN_ADD_INTO_CUH

#include "bf16.cuh"
#include "grid_stride.h"
#include "pdl.cuh"

template <typename T, int N, typename I>
static __global__ void bn_add_into_kernel(T *__restrict__ dst, const T *__restrict__ src, I packs)
{
    bn_early_entry(); /* pdl.cuh */
    for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < packs; i += (I)gridDim.x * blockDim.x) {
        float d[N], v[N];
        bn_ld_n<T, N>(&dst[(size_t)i * N], d);
        bn_ld_n<T, N>(&src[(size_t)i * N], v);
#pragma unroll
        for (int k = 0; k < N; k++) d[k] = __fadd_rn(d[k], v[k]);
        bn_st_n<T, N>(&dst[(size_t)i * N], d);
    }
}

/* g (an output gradient's N values) plus a second reader's part at part + at (the part that the
 * network left to the kernel reading the gradient: bn_pass.dy_part), the sum rounded to T as
 * bn_add_into_kernel would store it: the same values either way. */
template <typename T, int N>
static __device__ __forceinline__ void bn_add_part_n(const T *__restrict__ part, size_t at, float *g)
{
    float v[N];
    bn_ld_n<T, N>(&part[at], v);
#pragma unroll
    for (int k = 0; k < N; k++) g[k] = bn_rounded(part, __fadd_rn(g[k], v[k]));
}

/* An output gradient's N values at dy + at, plus those at part + at where part is not NULL
 * (bn_add_part_n). */
template <typename T, int N>
static __device__ __forceinline__ void bn_ld_grad_n(const T *__restrict__ dy, const T *__restrict__ part, size_t at,
                                                    float *g)
{
    bn_ld_n<T, N>(&dy[at], g);
    if (part) bn_add_part_n<T, N>(part, at, g);
}

/* Queues dst += src on s, launched early (pdl.cuh). */
template <typename T> static void bn_queue_add_into(T *dst, const T *src, size_t n, cudaStream_t s)
{
    const int P = bn_pack<T>::N;
    const bool pk = n % P == 0 && bn_aligned16(dst) && bn_aligned16(src);
    const size_t packs = pk ? n / P : n;
    if (pk && bn_index_fits_32(n))
        bn_launch_early(bn_add_into_kernel<T, P, unsigned>, bn_grid_stride_blocks(packs), 256, 0, s, dst, src,
                        (unsigned)packs);
    else if (pk)
        bn_launch_early(bn_add_into_kernel<T, P, size_t>, bn_grid_stride_blocks(packs), 256, 0, s, dst, src, packs);
    else if (bn_index_fits_32(n))
        bn_launch_early(bn_add_into_kernel<T, 1, unsigned>, bn_grid_stride_blocks(n), 256, 0, s, dst, src, (unsigned)n);
    else
        bn_launch_early(bn_add_into_kernel<T, 1, size_t>, bn_grid_stride_blocks(n), 256, 0, s, dst, src, n);
}

#endif
