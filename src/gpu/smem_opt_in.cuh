/* smem_opt_in.cuh - a kernel that takes more than the 48 KiB of dynamic shared memory a launch
 * gets without asking must be opted in once (cudaFuncSetAttribute) before its first launch.
 * Each launcher keeps one flag per kernel and calls this before every launch (or launches
 * through bn_launch_opted, which does both and launches early: its kernels start with
 * bn_early_entry(), pdl.cuh). Device code's host side only. */
#ifndef BN_SMEM_OPT_IN_CUH
#define BN_SMEM_OPT_IN_CUH

#include "pdl.cuh"

/* Opts `kernel` in to `bytes` of dynamic shared memory unless *opted says it already is. */
template <typename Kernel>
static cudaError_t bn_smem_opt_in(Kernel kernel, bool *opted, size_t bytes)
{
    if (*opted) return cudaSuccess;
    cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
    if (e == cudaSuccess) *opted = true;
    return e;
}

/* Opts `kernel` in as bn_smem_opt_in does, then launches it early (bn_launch_early, pdl.cuh) with
 * one argument struct: for the kernels that come in a template instance per tile and product
 * count, each with its flag. The kernel must start with bn_early_entry(). */
template <typename Kernel, typename Args>
static cudaError_t bn_launch_opted(Kernel kernel, bool *opted, size_t bytes, dim3 grid, dim3 block, size_t smem,
                                   cudaStream_t st, const Args &args)
{
    cudaError_t e = bn_smem_opt_in(kernel, opted, bytes);
    if (e != cudaSuccess) return e;
    return bn_launch_early(kernel, grid, block, smem, st, args);
}

#endif
