/* device_none.c - every device entry point in a build without CUDA: no devices, every
 * request is refused with a message that says how to get GPU support. Host-side helpers that the
 * CPU path also calls (free, descriptors) are harmless no-ops. */
#include "core/device.h"
#include "chooser.h"
#include "graph.h"

bn_status bn_no_cuda(void)
{
    return bn_error(BN_ERR_DEVICE, "this blobnet was built without CUDA (no GPU or no nvcc at build time, "
                                   "or CPU_ONLY=1); rebuild where both are, or with make CUDA=1, to use a GPU");
}

int bn_device_compiled(void) { return 0; }
const char *bn_device_build_info(void) { return "CPU only"; }
int bn_device_count(void) { return 0; }
void bn_device_preload(void) {}
void bn_device_code_used(char *buf, size_t cap)
{
    if (cap) buf[0] = '\0';
}
void bn_device_code_keep_for(const char *model) { (void)model; }
void bn_device_code_load_for(const char *model) { (void)model; }
void bn_device_code_load_begin(const char *list) { (void)list; }
int bn_device_code_load_end(void) { return 0; }

bn_status bn_ctx_open(int device, bn_ctx **out)
{
    (void)device;
    *out = NULL;
    return bn_no_cuda();
}

bn_ctx *bn_ctx_current(void) { return NULL; }
void bn_ctx_close(void) {}

bn_status bn_ctx_prioritize(bn_ctx *ctx, int on)
{
    (void)ctx;
    (void)on;
    return bn_no_cuda();
}

bn_status bn_ctx_stream_priorities(const bn_ctx *ctx, int *main_priority, int *side_priority)
{
    (void)ctx;
    *main_priority = *side_priority = 0;
    return bn_no_cuda();
}

bn_status bn_ctx_memory(bn_ctx *ctx, size_t *free_bytes, size_t *total_bytes)
{
    (void)ctx;
    *free_bytes = *total_bytes = 0;
    return bn_no_cuda();
}

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
    return bn_no_cuda();
}

bn_status bn_ctx_zero_beside(bn_ctx *ctx, void *ptr, size_t bytes)
{
    (void)ctx;
    (void)ptr;
    (void)bytes;
    return bn_no_cuda();
}

bn_status bn_ctx_open_lanes(bn_ctx *ctx, int count)
{
    (void)ctx;
    (void)count;
    return bn_no_cuda();
}

bn_status bn_ctx_set_lane(bn_ctx *ctx, int lane)
{
    (void)ctx;
    (void)lane;
    return bn_no_cuda();
}

void bn_ctx_leave_lanes(bn_ctx *ctx)
{
    (void)ctx;
}

bn_status bn_order_event_create(void **event)
{
    *event = NULL;
    return bn_no_cuda();
}

void bn_order_event_destroy(void *event)
{
    (void)event;
}

bn_status bn_ctx_record(bn_ctx *ctx, void *event)
{
    (void)ctx;
    (void)event;
    return bn_no_cuda();
}

bn_status bn_ctx_wait(bn_ctx *ctx, void *event)
{
    (void)ctx;
    (void)event;
    return bn_no_cuda();
}

bn_status bn_ctx_reserve_workspace(bn_ctx *ctx, size_t bytes)
{
    (void)ctx;
    (void)bytes;
    return bn_no_cuda();
}

bn_status bn_device_alloc(void **ptr, size_t bytes)
{
    (void)bytes;
    *ptr = NULL;
    return bn_no_cuda();
}

void bn_device_free(void *ptr) { (void)ptr; }
void bn_device_retire(void *ptr) { (void)ptr; }
void bn_device_graphs(int delta) { (void)delta; }

bn_status bn_device_zero(void *ptr, size_t bytes)
{
    (void)ptr;
    (void)bytes;
    return bn_no_cuda();
}

bn_status bn_device_h2d(void *dst, const void *src, size_t bytes)
{
    (void)dst, (void)src, (void)bytes;
    return bn_no_cuda();
}

bn_status bn_device_d2h(void *dst, const void *src, size_t bytes)
{
    (void)dst, (void)src, (void)bytes;
    return bn_no_cuda();
}

bn_status bn_device_h2d_queued(bn_upload_buf *u, void *dst, const void *src, size_t bytes)
{
    (void)u, (void)dst, (void)src, (void)bytes;
    return bn_no_cuda();
}

void bn_upload_buf_free(bn_upload_buf *u)
{
    (void)u;
}

bn_status bn_device_sync(void) { return bn_no_cuda(); }

bn_status bn_tensor_desc_set(void **desc, int n, int c, int h, int w, int bf16)
{
    (void)desc, (void)n, (void)c, (void)h, (void)w, (void)bf16;
    return bn_no_cuda();
}

void bn_tensor_desc_free(void *desc) { (void)desc; }

void bn_device_memory(size_t *now, size_t *peak)
{
    *now = *peak = 0;
}

bn_status bn_event_create(void **event)
{
    *event = NULL;
    return bn_no_cuda();
}

bn_status bn_event_record(void *event)
{
    (void)event;
    return bn_no_cuda();
}

bn_status bn_event_elapsed_ms(void *start, void *end, float *ms)
{
    (void)start, (void)end;
    *ms = 0.0f;
    return bn_no_cuda();
}

void bn_event_destroy(void *event) { (void)event; }

bn_status bn_stream_hold(void)
{
    return bn_no_cuda();
}

void bn_stream_release(void) {}

/* Without a GPU there is nothing to capture: the CPU path's NVTX ranges still appear. */
bn_status bn_profiler_start(void) { return BN_OK; }
bn_status bn_profiler_stop(void) { return BN_OK; }

bn_status bn_gpu_hash_words(const void *src, size_t n, uint64_t *hash, bn_ctx *ctx)
{
    (void)src, (void)n, (void)ctx;
    *hash = 0;
    return bn_no_cuda();
}

bn_status bn_gpu_add(float *dst, const float *src, size_t n, bn_ctx *ctx)
{
    (void)dst, (void)src, (void)n, (void)ctx;
    return bn_no_cuda();
}

bn_status bn_gpu_add_bf16(void *dst, const void *src, size_t n, bn_ctx *ctx)
{
    (void)dst, (void)src, (void)n, (void)ctx;
    return bn_no_cuda();
}

bn_status bn_gpu_f32_to_bf16(void *dst, const float *src, size_t n, bn_ctx *ctx)
{
    (void)dst, (void)src, (void)n, (void)ctx;
    return bn_no_cuda();
}

bn_status bn_gpu_bf16_to_f32(float *dst, const void *src, size_t n, bn_ctx *ctx)
{
    (void)dst, (void)src, (void)n, (void)ctx;
    return bn_no_cuda();
}

bn_status bn_gpu_add_bf16_to_f32(float *dst, const void *src, size_t n, bn_ctx *ctx)
{
    (void)dst, (void)src, (void)n, (void)ctx;
    return bn_no_cuda();
}

bn_status bn_gpu_fill(float *dst, float value, size_t n, bn_ctx *ctx)
{
    (void)dst, (void)value, (void)n, (void)ctx;
    return bn_no_cuda();
}

bn_status bn_step_graph_run(bn_step_graph *g, bn_ctx *ctx, bn_status (*body)(void *), void (*rewind)(void *),
                            void *arg, int *replayed)
{
    (void)g, (void)ctx, (void)rewind;
    *replayed = 0;
    return body(arg);
}

void bn_step_graph_free(bn_step_graph *g) { (void)g; }

bn_status bn_chooser_key(const bn_ctx *ctx, char *key, size_t cap, const char *fmt, ...)
{
    (void)ctx, (void)fmt;
    if (cap) key[0] = '\0';
    return bn_no_cuda();
}
