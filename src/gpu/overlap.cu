/* overlap.cu - a parameter gradient on the side stream beside the input gradient (overlap.h). */
#include "cuda_check.h"
#include "overlap.h"

extern "C" bn_status bn_overlap_create(bn_overlap *o)
{
    cudaEvent_t fork = NULL, join = NULL;
    BN_CUDA(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
    o->fork = fork;
    BN_CUDA(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
    o->join = join;
    return BN_OK;
}

extern "C" void bn_overlap_destroy(bn_overlap *o)
{
    if (o->fork) cudaEventDestroy((cudaEvent_t)o->fork);
    if (o->join) cudaEventDestroy((cudaEvent_t)o->join);
    o->fork = o->join = NULL;
}

extern "C" bn_status bn_overlap_run(bn_ctx *ctx, const bn_overlap *o, int defer, bn_overlap_side side,
                                    bn_overlap_main main, void *env)
{
    cudaStream_t main_stream = (cudaStream_t)ctx->stream, side_stream = (cudaStream_t)ctx->side_stream;
    BN_CUDA(cudaEventRecord((cudaEvent_t)o->fork, main_stream));
    BN_CUDA(cudaStreamWaitEvent(side_stream, (cudaEvent_t)o->fork, 0));
    ctx->side_forks++;
    BN_TRY(side(env, side_stream));
    if (defer) {
        bn_ctx_defer_side(ctx);
        return main ? main(env) : BN_OK;
    }
    BN_CUDA(cudaEventRecord((cudaEvent_t)o->join, side_stream));
    if (main) BN_TRY(main(env));
    BN_CUDA(cudaStreamWaitEvent(main_stream, (cudaEvent_t)o->join, 0));
    return BN_OK;
}
