/* last_arrival.cuh - which of several blocks finished last: the one that may then read what
 * all of them wrote (partial sums, per-row results) or change what all of them read (a cursor).
 * Kernels use it to finish a reduction in the same launch, in a fixed order, instead of a
 * second kernel, and without float atomics, so results do not depend on timing.
 *
 * `counter` is a device unsigned that is 0 between launches; `arrivals` blocks call this, each
 * from every one of its threads, after their last write the last block will read (and their
 * last read of what it will change). Each thread fences its writes, the block counts itself in
 * with atomicInc, which wraps the counter back to 0 on the last arrival, and the last block
 * fences again before it reads. Returns true in every thread of the last block. */
#ifndef BN_LAST_ARRIVAL_CUH
#define BN_LAST_ARRIVAL_CUH

static __device__ bool bn_last_arrival(unsigned *counter, unsigned arrivals)
{
    __shared__ bool last;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0)
        last = atomicInc(counter, arrivals - 1) == arrivals - 1;
    __syncthreads();
    if (last) __threadfence();
    return last;
}

#endif
