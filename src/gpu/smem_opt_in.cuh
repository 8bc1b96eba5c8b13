/* smem_opt_in.cuh - a kernel that takes more than the 48 KiB of dynamic shared memory a launch
 * gets without asking must be opted in once (cudaFuncSetAttribute) before its first launch.
 * Each launcher keeps one flag per kernel and calls this before every launch. Device code's
 * host side only. */
#ifndef BN_SMEM_OPT_IN_CUH
#define BN_SMEM_OPT_IN_CUH

/* Opts `kernel` in to `bytes` of dynamic shared memory unless *opted says it already is. */
template <typename Kernel>
static cudaError_t bn_smem_opt_in(Kernel kernel, bool *opted, size_t bytes)
{
    if (*opted) return cudaSuccess;
    cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
    if (e == cudaSuccess) *opted = true;
    return e;
}

#endif
