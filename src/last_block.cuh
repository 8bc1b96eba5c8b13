/* last_block.cuh - for kernels that end a step's bookkeeping themselves: tells the block
 * that finishes last which it is, so that it can advance a device counter every block has
 * read (a cursor) without a second, one-thread kernel. `done` is a device int that starts at
 * 0; the last block resets it for the next launch. Call from every thread of every block,
 * after the block's last read of what the last block will change. */
#ifndef BN_LAST_BLOCK_CUH
#define BN_LAST_BLOCK_CUH

static __device__ bool bn_last_block(int *done)
{
    __shared__ bool last;
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        last = atomicAdd(done, 1) == (int)gridDim.x - 1;
        if (last) *done = 0;
    }
    __syncthreads();
    return last;
}

#endif
