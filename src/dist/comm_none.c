/* comm_none.c - the communicator in a build without CUDA or without NCCL: every entry point
 * refuses with bn_dist_missing()'s reason, so asking for several GPUs is a one-line error. */
#include "dist.h"

int bn_dist_compiled(void)
{
    return 0;
}

const char *bn_dist_missing(void)
{
#ifdef BN_WITH_CUDA
    return "this blobnet was built without NCCL (nccl.h was not found at build time)";
#else
    return "this blobnet was built without CUDA and NCCL (no GPU or no nvcc at build time, or CPU_ONLY=1)";
#endif
}

static bn_status missing(void)
{
    return bn_error(BN_ERR_USAGE, "%s", bn_dist_missing());
}

bn_status bn_dist_unique_id(void *id, size_t id_len)
{
    return missing();
}

bn_status bn_dist_open(bn_dist *d, const void *id, bn_ctx *ctx)
{
    return missing();
}

bn_status bn_dist_attach_grads(bn_dist *d, bn_ctx *ctx, float *slab, size_t count)
{
    return missing();
}

bn_status bn_dist_allreduce_grads(bn_dist *d, bn_ctx *ctx, float *grads, size_t count, double weight)
{
    return missing();
}

bn_status bn_dist_allreduce_update(bn_dist *d, bn_ctx *ctx, float *grads, size_t count, double weight,
                                   const bn_update_args *u, int *updated)
{
    *updated = 0;
    return missing();
}

bn_status bn_dist_join_comm(bn_dist *d, bn_ctx *ctx)
{
    return missing();
}

bn_status bn_dist_average(bn_dist *d, bn_ctx *ctx, float *data, size_t count)
{
    return missing();
}

bn_status bn_dist_sum(bn_dist *d, bn_ctx *ctx, double *values, int n)
{
    return missing();
}

bn_status bn_dist_max(bn_dist *d, bn_ctx *ctx, int value, int *max)
{
    return missing();
}

bn_status bn_dist_max_begin(bn_dist *d, bn_ctx *ctx, int value)
{
    return missing();
}

bn_status bn_dist_max_end(bn_dist *d, bn_ctx *ctx, int *max)
{
    return missing();
}

bn_status bn_dist_check_same(bn_dist *d, bn_ctx *ctx, uint64_t hash, long step)
{
    return missing();
}

bn_status bn_dist_wait(bn_dist *d, bn_ctx *ctx)
{
    return missing();
}

bn_status bn_dist_pace(bn_dist *d, bn_ctx *ctx)
{
    return missing();
}

int bn_dist_failed(const bn_dist *d)
{
    return 0;
}

void bn_dist_close(bn_dist *d, int aborting) {}
