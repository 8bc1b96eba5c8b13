/* pdl.cuh - programmatic dependent launch (sm_90 and later): a kernel launched with
 * bn_launch_early is scheduled as soon as the blocks of the kernel before it on the stream have
 * exited, and its blocks wait on the device for that kernel's writes to become visible, so
 * that its launch overlaps the previous kernel's completion instead of following it (in a
 * captured graph the two nodes are joined by a programmatic edge).
 *
 * The contract for a kernel launched that way: its first statement is bn_early_entry(), which
 * waits until the kernel before it has finished and its writes are visible. Nothing it reads or
 * writes is touched before that wait, so the results are those of an ordinary launch. Launched
 * the ordinary way, the wait returns at once. Every kernel of the library launches this way and
 * starts with the wait, but for a few reference and test kernels that tests/test_pdl.c names:
 * without it, resnet_fashion's step at 64 images had about 0.5 us between each kernel and the next
 * on its stream.
 *
 * No kernel signals its dependents early (griddepcontrol.launch_dependents): measured on an H100,
 * doing so at the start of every kernel took LeNet's batch 64 epoch from 103 to 100 ms but its
 * batch 256 epoch from 58 to 68 ms, the next kernel's waiting blocks holding multiprocessor
 * room that the side stream's kernels needed; with the signal left to the blocks' exit the
 * epochs were 96 and 56-60 ms. */
#ifndef BN_PDL_CUH
#define BN_PDL_CUH

#include <cuda_runtime.h>

/* Notes a library file's module at the first launch from that file (code_load.cu). */
extern "C" void bn_code_note(const char *module);
#ifdef BN_CODE_MODULE
/* This file's module (the Makefile names it): noted yet. */
static bool bn_code_noted __attribute__((unused));
#endif

static __device__ __forceinline__ void bn_early_entry()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

/* The attribute that makes a launch early (cudaLaunchKernelEx); for launches that carry others
 * too, such as a cluster's shape. */
static inline cudaLaunchAttribute bn_early_attribute()
{
    cudaLaunchAttribute a = {};
    a.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    a.val.programmaticStreamSerializationAllowed = 1;
    return a;
}

/* kern<<<grid, block, smem, s>>>(args...) with the programmatic-serialization attribute; the
 * kernel must start with bn_early_entry(). Errors are reported like those of <<<>>>
 * (cudaGetLastError) and returned. */
template <typename... Params, typename... Args>
static cudaError_t bn_launch_early(void (*kern)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t s,
                                   const Args &...args)
{
    cudaLaunchAttribute attr[1] = {bn_early_attribute()};
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = s;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
#ifdef BN_CODE_MODULE
    if (!__atomic_load_n(&bn_code_noted, __ATOMIC_RELAXED) &&
        !__atomic_exchange_n(&bn_code_noted, true, __ATOMIC_RELAXED))
        bn_code_note(BN_CODE_MODULE);
#endif
    return cudaLaunchKernelEx(&cfg, kern, args...);
}

#endif
