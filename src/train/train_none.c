/* train_none.c - the training code's device entry points in a build without CUDA (the
 * optimizer's and the loader's GPU halves): every call is refused with a message that says how
 * to get GPU support. */
#include "core/device.h"
#include "loader.h"
#include "optimizer.h"

bn_status bn_optimizer_schedule(bn_optimizer *o, bn_net *net, long first, long count)
{
    (void)o, (void)net, (void)first, (void)count;
    return bn_no_cuda();
}

bn_status bn_optimizer_schedule_ahead(bn_optimizer *o, long first, long count)
{
    (void)o, (void)first, (void)count;
    return bn_no_cuda();
}

bn_status bn_optimizer_step_gpu(bn_optimizer *o, bn_net *net, bn_step_rates r)
{
    (void)o, (void)net, (void)r;
    return bn_no_cuda();
}

bn_status bn_optimizer_update_range_gpu(bn_optimizer *o, bn_net *net, size_t lo, size_t hi, bn_step_rates r,
                                        void *stream)
{
    (void)o, (void)net, (void)lo, (void)hi, (void)r, (void)stream;
    return bn_no_cuda();
}

bn_status bn_loader_upload(bn_loader *ld)
{
    (void)ld;
    return bn_no_cuda();
}

void bn_loader_release_pixels(bn_loader *ld)
{
    (void)ld;
}

bn_status bn_loader_upload_order(bn_loader *ld)
{
    (void)ld;
    return bn_no_cuda();
}

bn_status bn_loader_fill_next_gpu(bn_loader *ld, bn_net *net, int n)
{
    (void)ld, (void)net, (void)n;
    return bn_no_cuda();
}

bn_status bn_loader_fill_gpu(bn_loader *ld, bn_net *net, int start, int n)
{
    (void)ld, (void)net, (void)start, (void)n;
    return bn_no_cuda();
}

bn_status bn_loader_fill_train_gpu(bn_loader *ld, bn_net *net, int n)
{
    (void)ld, (void)net, (void)n;
    return bn_no_cuda();
}

bn_status bn_loader_reserve_stage_gpu(bn_loader *ld, const bn_net *net, int n)
{
    (void)ld, (void)net, (void)n;
    return bn_no_cuda();
}

bn_status bn_loader_stage_gpu(bn_loader *ld, bn_net *net, int n)
{
    (void)ld, (void)net, (void)n;
    return bn_no_cuda();
}

bn_status bn_loader_take_gpu(bn_loader *ld, bn_net *net, int n)
{
    (void)ld, (void)net, (void)n;
    return bn_no_cuda();
}

void bn_loader_read_own_gpu(bn_loader *ld, bn_net *net)
{
    (void)ld, (void)net; /* a loader without a device never reads a stage */
}

bn_status bn_optimizer_range_args_gpu(bn_optimizer *o, bn_net *net, size_t lo, size_t hi, bn_step_rates r,
                                      bn_update_args *u)
{
    (void)o, (void)net, (void)lo, (void)hi, (void)r, (void)u;
    return bn_no_cuda();
}

bn_status bn_optimizer_begin_step_gpu(bn_optimizer *o, bn_net *net)
{
    (void)o, (void)net;
    return bn_no_cuda();
}
