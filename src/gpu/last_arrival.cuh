/* last_arrival.cuh - which of several blocks finished last: the one that may then read what
 * all of them wrote (partial sums, per-row results) or change what all of them read (a cursor).
 * Kernels use it to finish a reduction in the same launch, in a fixed order, instead of a
 * second kernel, and without float atomics, so results do not depend on timing.
 *
 * `counter` is a device unsigned that is 0 between launches; `arrivals` blocks call this, each
 * from every one of its threads, after their last write the last block will read (and their
 * last read of what it will change). The block's barrier orders its threads' writes before its
 * first thread, which releases them at GPU scope (a fence, then the count: atomicInc, which
 * wraps the counter back to 0 on the last arrival); in the last block that thread then acquires
 * everything the other blocks released before the barrier lets its threads read. One fence per
 * block and arrival rather than one per thread: a sequentially consistent GPU-scope fence in
 * every thread showed under ncu as 0.4-0.8 cycles of membar stall per issued instruction in the
 * dense layer's split reduction. Returns true in every thread of the last block. */
#ifndef BN_LAST_ARRIVAL_CUH
#define BN_LAST_ARRIVAL_CUH

static __device__ __forceinline__ void bn_fence_acq_rel_gpu()
{
    asm volatile("fence.acq_rel.gpu;" ::: "memory");
}

static __device__ bool bn_last_arrival(unsigned *counter, unsigned arrivals)
{
    __shared__ bool last;
    __syncthreads();
    if (threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0) {
        bn_fence_acq_rel_gpu();
        last = atomicInc(counter, arrivals - 1) == arrivals - 1;
        if (last) bn_fence_acq_rel_gpu();
    }
    __syncthreads();
    return last;
}

#endif
