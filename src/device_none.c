/* device_none.c - every device entry point in a build without CUDA: no devices, every
 * request is refused with a message that says how to get GPU support. Host-side helpers that the
 * CPU path also calls (free, descriptors) are harmless no-ops. */
#include "device.h"
#include "kernels.h"
#include "loader.h"
#include "graph.h"
#include "optimizer.h"

static bn_status no_cuda(void)
{
    return bn_error(BN_ERR_DEVICE, "this blobnet was built without CUDA (CPU_ONLY=1 or no nvcc); "
                                   "rebuild with the CUDA toolkit to use a GPU");
}

int bn_device_compiled(void) { return 0; }
int bn_device_count(void) { return 0; }

bn_status bn_ctx_open(int device, bn_ctx **out)
{
    (void)device;
    *out = NULL;
    return no_cuda();
}

bn_ctx *bn_ctx_current(void) { return NULL; }
void bn_ctx_close(void) {}

void bn_ctx_defer_side(bn_ctx *ctx)
{
    (void)ctx;
}

bn_status bn_ctx_join_side(bn_ctx *ctx)
{
    (void)ctx;
    return BN_OK;
}

bn_status bn_ctx_fork_side(bn_ctx *ctx)
{
    (void)ctx;
    return no_cuda();
}

bn_status bn_ctx_zero_beside(bn_ctx *ctx, void *ptr, size_t bytes)
{
    (void)ctx;
    (void)ptr;
    (void)bytes;
    return no_cuda();
}

bn_status bn_ctx_reserve_workspace(bn_ctx *ctx, size_t bytes)
{
    (void)ctx;
    (void)bytes;
    return no_cuda();
}

bn_status bn_device_alloc(void **ptr, size_t bytes)
{
    (void)bytes;
    *ptr = NULL;
    return no_cuda();
}

void bn_device_free(void *ptr) { (void)ptr; }

bn_status bn_device_zero(void *ptr, size_t bytes)
{
    (void)ptr;
    (void)bytes;
    return no_cuda();
}

bn_status bn_device_h2d(void *dst, const void *src, size_t bytes)
{
    (void)dst, (void)src, (void)bytes;
    return no_cuda();
}

bn_status bn_device_d2h(void *dst, const void *src, size_t bytes)
{
    (void)dst, (void)src, (void)bytes;
    return no_cuda();
}

bn_status bn_device_sync(void) { return no_cuda(); }

bn_status bn_tensor_desc_set(void **desc, int n, int c, int h, int w)
{
    (void)desc, (void)n, (void)c, (void)h, (void)w;
    return no_cuda();
}

void bn_tensor_desc_free(void *desc) { (void)desc; }

void bn_device_memory(size_t *now, size_t *peak)
{
    *now = *peak = 0;
}

bn_status bn_event_create(void **event)
{
    *event = NULL;
    return no_cuda();
}

bn_status bn_event_record(void *event)
{
    (void)event;
    return no_cuda();
}

bn_status bn_event_elapsed_ms(void *start, void *end, float *ms)
{
    (void)start, (void)end;
    *ms = 0.0f;
    return no_cuda();
}

void bn_event_destroy(void *event) { (void)event; }

/* Without a GPU there is nothing to capture: the CPU path's NVTX ranges still appear. */
bn_status bn_profiler_start(void) { return BN_OK; }
bn_status bn_profiler_stop(void) { return BN_OK; }

bn_status bn_gpu_add(float *dst, const float *src, size_t n, bn_ctx *ctx)
{
    (void)dst, (void)src, (void)n, (void)ctx;
    return no_cuda();
}

bn_status bn_gpu_fill(float *dst, float value, size_t n, bn_ctx *ctx)
{
    (void)dst, (void)value, (void)n, (void)ctx;
    return no_cuda();
}

bn_status bn_sgd_schedule(bn_sgd *o, long first, long count)
{
    (void)o, (void)first, (void)count;
    return no_cuda();
}

bn_status bn_sgd_step_gpu(bn_sgd *o, bn_net *net, float lr)
{
    (void)o, (void)net, (void)lr;
    return no_cuda();
}

bn_status bn_sgd_update_layer_gpu(bn_sgd *o, bn_net *net, const bn_layer *l, float lr, int last)
{
    (void)o, (void)net, (void)l, (void)lr, (void)last;
    return no_cuda();
}

bn_status bn_loader_upload(bn_loader *ld)
{
    (void)ld;
    return no_cuda();
}

bn_status bn_loader_upload_order(bn_loader *ld)
{
    (void)ld;
    return no_cuda();
}

bn_status bn_loader_fill_next_gpu(bn_loader *ld, bn_net *net, int n)
{
    (void)ld, (void)net, (void)n;
    return no_cuda();
}

bn_status bn_loader_fill_gpu(bn_loader *ld, bn_net *net, int start, int n)
{
    (void)ld, (void)net, (void)start, (void)n;
    return no_cuda();
}

bn_status bn_step_graph_run(bn_step_graph *g, bn_ctx *ctx, bn_status (*body)(void *), void *arg, int *replayed)
{
    (void)g, (void)ctx;
    *replayed = 0;
    return body(arg);
}

void bn_step_graph_free(bn_step_graph *g) { (void)g; }
