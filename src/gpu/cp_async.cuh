/* cp_async.cuh - asynchronous copies from global to shared memory (sm_80 and later) for the
 * kernels that stage their operands ahead of use (the dense layer's tensor-core GEMM, conv2d's
 * implicit GEMMs); completion by __pipeline_commit and __pipeline_wait_prior (cuda_pipeline.h). */
#ifndef BN_CP_ASYNC_CUH
#define BN_CP_ASYNC_CUH

#include <stdint.h>

/* Four bytes from global src to shared dst (a shared-space address) by cp.async, or four zero
 * bytes when !in (src is then not read, and need not be valid). */
static __device__ __forceinline__ void copy4(uint32_t dst, const float *src, bool in)
{
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(dst), "l"(src), "r"(in ? 4 : 0) : "memory");
}

/* W floats (W = 2 or 4; src and dst aligned to 4 W bytes) from global src to shared dst, of
 * which only `bytes` are read (the rest zeros). */
template <int W>
static __device__ __forceinline__ void copy_w(uint32_t dst, const float *src, int bytes)
{
    if (W == 4)
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(bytes) : "memory");
    else
        asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;" ::"r"(dst), "l"(src), "r"(bytes) : "memory");
}

#endif
