/* device.cu - the CUDA device context and memory primitives behind device.h. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_profiler_api.h>

#include "core/device.h"
#include "core/device_ops.h"
#include "core/timeline.h"
#include "blas_load.h"
#include "cuda_check.h"
#include "pdl.cuh"

static bn_ctx the_ctx;
static int ctx_open;

/* Accounting of blobnet's own device memory: every bn_device_alloc and the cuDNN workspace.
 * A small open-addressing table maps each live pointer to its size. */
#define ALLOC_SLOTS 16384
static struct { void *ptr; size_t bytes; } allocs[ALLOC_SLOTS];
static size_t bytes_now, bytes_peak;

/* Buffers replaced while a step graph lived (bn_device_retire), and the graphs alive. */
static struct {
    void **ptr;
    int count, cap;
    int graphs;
} retired;

static void free_retired(void);
static bn_status grow_workspace(bn_ctx *ctx, void **ws, size_t *size, size_t bytes, const char *what);

static size_t slot_of(const void *p)
{
    return (size_t)(((uintptr_t)p >> 8) * 0x9e3779b97f4a7c15ULL % ALLOC_SLOTS);
}

static void account(size_t add, size_t sub)
{
    bytes_now = bytes_now + add - sub;
    if (bytes_now > bytes_peak) bytes_peak = bytes_now;
}

static void remember(void *p, size_t bytes)
{
    for (size_t i = slot_of(p), k = 0; k < ALLOC_SLOTS; k++, i = (i + 1) % ALLOC_SLOTS)
        if (!allocs[i].ptr) {
            allocs[i].ptr = p;
            allocs[i].bytes = bytes;
            break;
        }
    account(bytes, 0); /* a full table loses the pointer, never the count */
}

static void forget(void *p)
{
    for (size_t i = slot_of(p), k = 0; k < ALLOC_SLOTS && allocs[i].ptr; k++, i = (i + 1) % ALLOC_SLOTS)
        if (allocs[i].ptr == p) {
            account(0, allocs[i].bytes);
            /* Re-insert the rest of the probe run so that later lookups still find them. */
            allocs[i].ptr = NULL;
            for (size_t j = (i + 1) % ALLOC_SLOTS; allocs[j].ptr; j = (j + 1) % ALLOC_SLOTS) {
                void *q = allocs[j].ptr;
                size_t n = allocs[j].bytes;
                allocs[j].ptr = NULL;
                for (size_t m = slot_of(q);; m = (m + 1) % ALLOC_SLOTS)
                    if (!allocs[m].ptr) {
                        allocs[m].ptr = q;
                        allocs[m].bytes = n;
                        break;
                    }
            }
            return;
        }
}

extern "C" int bn_device_compiled(void) { return 1; }

extern "C" const char *bn_device_build_info(void)
{
    static char info[64];
    snprintf(info, sizeof info, "CUDA %d.%d, cuDNN %d.%d.%d", CUDART_VERSION / 1000, CUDART_VERSION % 1000 / 10,
             CUDNN_MAJOR, CUDNN_MINOR, CUDNN_PATCHLEVEL);
    return info;
}

extern "C" void bn_device_preload(void)
{
    bn_gpu_blas_load();
}

extern "C" int bn_device_count(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError(); /* clear the sticky "no driver" error */
        return 0;
    }
    return n;
}

static cudaStream_t stream(void)
{
    return ctx_open ? (cudaStream_t)the_ctx.stream : 0;
}

/* An event for ordering the two streams (no timing). */
static bn_status new_order_event(void **out)
{
    cudaEvent_t e;
    BN_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    *out = e;
    return BN_OK;
}

static bn_status open_handles(bn_ctx *c)
{
    cudaStream_t s;
    BN_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    c->stream = s;
    cudaStream_t side;
    BN_CUDA(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
    c->side_stream = side;
    BN_TRY(new_order_event(&c->side_done));
    BN_TRY(new_order_event(&c->side_fork));
    cublasHandle_t blas;
    BN_CUBLAS(cublasCreate(&blas));
    c->cublas = blas;
    BN_CUBLAS(cublasSetStream(blas, s));
    bn_timeline_mark("cuBLAS's handle");
    cudnnHandle_t dnn;
    BN_CUDNN(cudnnCreate(&dnn));
    c->cudnn = dnn;
    BN_CUDNN(cudnnSetStream(dnn, s));
    bn_timeline_mark("cuDNN's handle");
    return BN_OK;
}

/* Why gpu:device cannot be used, and what to do about it. */
static bn_status open_error(cudaError_t e, int device)
{
    cudaGetLastError(); /* leave no error behind for the next call to report */
    const char *hint;
    switch (e) {
    case cudaErrorDevicesUnavailable:
        hint = "it is busy (exclusive-process mode, held by another process) or unavailable; wait for it, pick "
               "another with --device gpu:N, or use --device cpu";
        break;
    case cudaErrorInsufficientDriver:
        hint = "the NVIDIA driver is older than the CUDA runtime blobnet was built with; update the driver or use "
               "--device cpu";
        break;
    case cudaErrorNoDevice: hint = "use --device cpu"; break;
    case cudaErrorMemoryAllocation:
        hint = "it has no memory left even for a context; free some or pick another with --device gpu:N";
        break;
    default: hint = "use --device cpu to run without it"; break;
    }
    return bn_error(BN_ERR_DEVICE, "cannot open gpu:%d: %s; %s", device, cudaGetErrorString(e), hint);
}

/* The device calls of the core's blobs and network (core/device_ops.h), installed when a
 * context opens; in the order of the struct's members, each named beside its entry. */
static const bn_device_ops cuda_ops = {
    bn_device_alloc,     /* alloc */
    bn_device_free,      /* free */
    bn_device_zero,      /* zero */
    bn_device_h2d,       /* h2d */
    bn_device_d2h,       /* d2h */
    bn_tensor_desc_set,  /* tensor_desc_set */
    bn_tensor_desc_free, /* tensor_desc_free */
    bn_ctx_memory,       /* ctx_memory */
    bn_ctx_join_side,    /* ctx_join_side */
    bn_ctx_zero_beside,  /* ctx_zero_beside */
    bn_gpu_add,          /* add */
    bn_gpu_add_bf16,     /* add_bf16 */
    bn_ctx_open_lanes,   /* ctx_open_lanes */
    bn_ctx_set_lane,     /* ctx_set_lane */
    bn_ctx_leave_lanes,  /* ctx_leave_lanes */
    bn_order_event_create,  /* order_event_create */
    bn_order_event_destroy, /* order_event_destroy */
    bn_ctx_record,       /* ctx_record */
    bn_ctx_wait,         /* ctx_wait */
};

extern "C" bn_status bn_ctx_open(int device, bn_ctx **out)
{
    *out = NULL;
    if (ctx_open) {
        if (the_ctx.device != device)
            return bn_error(BN_ERR_DEVICE, "a context on gpu:%d is already open; blobnet uses one device per process",
                            the_ctx.device);
        /* Opened on another thread (the CLI opens it beside the data's reading): the device is made
         * current on this one, where the runtime would otherwise take device 0. */
        cudaError_t e = cudaSetDevice(device);
        if (e != cudaSuccess) return open_error(e, device);
        *out = &the_ctx;
        return BN_OK;
    }
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    bn_timeline_mark("the CUDA driver initialised");
    /* Without any driver the runtime says the driver is too old: that is just "no GPU" here. */
    int driver = 0;
    if (e == cudaErrorInsufficientDriver && (cudaDriverGetVersion(&driver) != cudaSuccess || driver == 0))
        e = cudaErrorNoDevice, count = 0;
    if (e != cudaSuccess && e != cudaErrorNoDevice) return open_error(e, device);
    cudaGetLastError();
    if (count == 0)
        return bn_error(BN_ERR_DEVICE, "no CUDA device is available (no GPU, or no driver); use --device cpu");
    if (device < 0 || device >= count)
        return bn_error(BN_ERR_DEVICE, "gpu:%d does not exist; this machine has %d CUDA device%s (gpu:0..gpu:%d)",
                        device, count, count == 1 ? "" : "s", count - 1);
    /* cudaFree(0) creates the context now, where a busy or failing device says so plainly. */
    if ((e = cudaSetDevice(device)) != cudaSuccess || (e = cudaFree(0)) != cudaSuccess) return open_error(e, device);
    bn_timeline_mark("the device's context made");
    memset(&the_ctx, 0, sizeof the_ctx);
    the_ctx.device = device;
    the_ctx.num_lanes = 1;
    cudaDeviceProp prop;
    BN_CUDA(cudaGetDeviceProperties(&prop, device));
    snprintf(the_ctx.name, sizeof the_ctx.name, "%s", prop.name);
    bn_status s = open_handles(&the_ctx);
    ctx_open = 1; /* so that close releases whatever was created, on failure too */
    if (s != BN_OK) {
        bn_ctx_close();
        return s;
    }
    bn_device_ops_install(&cuda_ops);
    *out = &the_ctx;
    return BN_OK;
}

/* Destroys the lane streams (after the work queued on them) and their workspaces. */
static void close_lanes(bn_ctx *c)
{
    for (int k = 1; k < c->num_lanes; k++) {
        bn_device_retire(c->lane_ws[k].main);
        bn_device_retire(c->lane_ws[k].side);
        memset(&c->lane_ws[k], 0, sizeof c->lane_ws[k]);
        void **s[2] = {&c->lanes[k], &c->lane_sides[k]};
        for (int j = 0; j < 2; j++) {
            if (!*s[j]) continue;
            cudaStreamSynchronize((cudaStream_t)*s[j]);
            cudaStreamDestroy((cudaStream_t)*s[j]);
            *s[j] = NULL;
        }
        c->lane_pending[k] = 0;
    }
    c->num_lanes = 1;
}

extern "C" bn_status bn_ctx_open_lanes(bn_ctx *c, int count)
{
    if (count > BN_CTX_LANES) count = BN_CTX_LANES;
    if (c->num_lanes < 1) c->num_lanes = 1;
    if (count <= c->num_lanes) return BN_OK;
    if (c->capturing || c->home) return bn_error(BN_ERR_INTERNAL, "lane streams asked for inside a step");
    int priority = 0, side_priority = 0;
    BN_CUDA(cudaStreamGetPriority((cudaStream_t)c->stream, &priority));
    BN_CUDA(cudaStreamGetPriority((cudaStream_t)c->side_stream, &side_priority));
    while (c->num_lanes < count) {
        const int k = c->num_lanes;
        cudaStream_t s, side;
        BN_CUDA(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, priority));
        c->lanes[k] = s;
        c->num_lanes++; /* so that close_lanes releases it if the next fails */
        BN_CUDA(cudaStreamCreateWithPriority(&side, cudaStreamNonBlocking, side_priority));
        c->lane_sides[k] = side;
        c->lane_pending[k] = 0;
        bn_lane_workspaces *w = &c->lane_ws[k];
        BN_TRY(grow_workspace(c, &w->main, &w->main_size, c->workspace_size, "a lane's cuDNN workspace"));
        BN_TRY(grow_workspace(c, &w->side, &w->side_size, c->side_workspace_size, "a lane's side cuDNN workspace"));
    }
    return BN_OK;
}

extern "C" bn_status bn_ctx_set_lane(bn_ctx *c, int lane)
{
    if (lane < 0 || lane >= (c->num_lanes < 1 ? 1 : c->num_lanes))
        return bn_error(BN_ERR_INTERNAL, "lane %d of a context with %d", lane, c->num_lanes);
    if (!c->home) {
        c->home = c->stream;
        c->home_side = c->side_stream;
        c->lane_now = 0;
    }
    c->lane_pending[c->lane_now] = c->side_pending;
    bn_lane_workspaces *was = &c->lane_ws[c->lane_now], *now = &c->lane_ws[lane];
    was->main = c->workspace, was->main_size = c->workspace_size;
    was->side = c->side_workspace, was->side_size = c->side_workspace_size;
    c->workspace = now->main, c->workspace_size = now->main_size;
    c->side_workspace = now->side, c->side_workspace_size = now->side_size;
    c->stream = lane ? c->lanes[lane] : c->home;
    c->side_stream = lane ? c->lane_sides[lane] : c->home_side;
    c->side_pending = c->lane_pending[lane];
    c->lane_now = lane;
    BN_CUDNN(cudnnSetStream((cudnnHandle_t)c->cudnn, (cudaStream_t)c->stream));
    return BN_OK;
}

extern "C" void bn_ctx_leave_lanes(bn_ctx *c)
{
    if (!c->home) return;
    bn_ctx_set_lane(c, 0);
    for (int k = 1; k < c->num_lanes; k++) c->lane_pending[k] = 0;
    c->home = c->home_side = NULL;
}

extern "C" bn_status bn_order_event_create(void **event)
{
    *event = NULL;
    return new_order_event(event);
}

extern "C" void bn_order_event_destroy(void *event)
{
    if (event) cudaEventDestroy((cudaEvent_t)event);
}

extern "C" bn_status bn_ctx_record(bn_ctx *c, void *event)
{
    BN_CUDA(cudaEventRecord((cudaEvent_t)event, (cudaStream_t)c->stream));
    return BN_OK;
}

extern "C" bn_status bn_ctx_wait(bn_ctx *c, void *event)
{
    BN_CUDA(cudaStreamWaitEvent((cudaStream_t)c->stream, (cudaEvent_t)event, 0));
    return BN_OK;
}

extern "C" bn_status bn_ctx_prioritize(bn_ctx *c, int on)
{
    on = on != 0;
    if (c->prioritized == on) return BN_OK;
    int least = 0, greatest = 0;
    BN_CUDA(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    BN_CUDA(cudaDeviceSynchronize());
    cudaStream_t s = NULL, side = NULL;
    cudaError_t e = cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, on ? greatest : least);
    if (e == cudaSuccess) e = cudaStreamCreateWithPriority(&side, cudaStreamNonBlocking, least);
    if (e != cudaSuccess) {
        if (s) cudaStreamDestroy(s);
        cudaGetLastError();
        return bn_error(BN_ERR_DEVICE, "gpu:%d: cannot make streams of the device's priorities: %s", c->device,
                        cudaGetErrorString(e));
    }
    if (cublasSetStream((cublasHandle_t)c->cublas, s) != CUBLAS_STATUS_SUCCESS ||
        cudnnSetStream((cudnnHandle_t)c->cudnn, s) != CUDNN_STATUS_SUCCESS) {
        cublasSetStream((cublasHandle_t)c->cublas, (cudaStream_t)c->stream);
        cudnnSetStream((cudnnHandle_t)c->cudnn, (cudaStream_t)c->stream);
        cudaStreamDestroy(s);
        cudaStreamDestroy(side);
        return bn_error(BN_ERR_DEVICE, "gpu:%d: cuBLAS or cuDNN refused a stream of another priority", c->device);
    }
    cudaStreamDestroy((cudaStream_t)c->stream);
    cudaStreamDestroy((cudaStream_t)c->side_stream);
    c->stream = s;
    c->side_stream = side;
    c->prioritized = on;
    close_lanes(c); /* made again at the stream's new priority when next asked for */
    return BN_OK;
}

extern "C" bn_status bn_ctx_stream_priorities(const bn_ctx *c, int *main_priority, int *side_priority)
{
    BN_CUDA(cudaStreamGetPriority((cudaStream_t)c->stream, main_priority));
    BN_CUDA(cudaStreamGetPriority((cudaStream_t)c->side_stream, side_priority));
    return BN_OK;
}

extern "C" bn_ctx *bn_ctx_current(void)
{
    return ctx_open ? &the_ctx : NULL;
}

extern "C" void bn_ctx_close(void)
{
    if (!ctx_open) return;
    bn_device_code_load_end();
    bn_ctx *c = &the_ctx;
    if (c->stream) cudaStreamSynchronize((cudaStream_t)c->stream);
    if (c->cudnn) cudnnDestroy((cudnnHandle_t)c->cudnn);
    if (c->cublas) cublasDestroy((cublasHandle_t)c->cublas);
    bn_device_free(c->workspace);
    bn_device_free(c->side_workspace);
    /* Graphs still alive end with the context; so do the buffers they replay on. */
    retired.graphs = 0;
    free_retired();
    if (c->stream) cudaStreamDestroy((cudaStream_t)c->stream);
    if (c->side_stream) {
        cudaStreamSynchronize((cudaStream_t)c->side_stream);
        cudaStreamDestroy((cudaStream_t)c->side_stream);
    }
    close_lanes(c);
    if (c->side_done) cudaEventDestroy((cudaEvent_t)c->side_done);
    if (c->side_fork) cudaEventDestroy((cudaEvent_t)c->side_fork);
    memset(c, 0, sizeof *c);
    ctx_open = 0;
}

/* A failed cudaMalloc of bytes for `what`: short of memory, the message gives what the device
 * has free and what blobnet holds, and suggests a smaller batch. */
static bn_status alloc_error(cudaError_t e, size_t bytes, const char *what)
{
    cudaGetLastError();
    size_t free_bytes = 0, total_bytes = 0;
    if (e != cudaErrorMemoryAllocation || cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) {
        cudaGetLastError();
        return bn_error(BN_ERR_DEVICE, "cannot allocate %zu bytes for %s on gpu:%d: %s", bytes, what, the_ctx.device,
                        cudaGetErrorString(e));
    }
    const double mib = 1024.0 * 1024.0;
    return bn_error(BN_ERR_DEVICE,
                    "out of device memory on gpu:%d (%s): %s needs %zu bytes (%.1f MiB) but %.1f MiB of %.1f MiB "
                    "are free, %.1f MiB of them held by blobnet; use a smaller --batch or model",
                    the_ctx.device, the_ctx.name, what, bytes, bytes / mib, free_bytes / mib, total_bytes / mib,
                    bytes_now / mib);
}

extern "C" bn_status bn_ctx_memory(bn_ctx *ctx, size_t *free_bytes, size_t *total_bytes)
{
    (void)ctx; /* one device per process: its context is the current one */
    BN_CUDA(cudaMemGetInfo(free_bytes, total_bytes));
    return BN_OK;
}

extern "C" void bn_ctx_defer_side(bn_ctx *ctx)
{
    ctx->side_pending = 1;
}

extern "C" bn_status bn_ctx_join_side(bn_ctx *ctx)
{
    if (!ctx->side_pending) return BN_OK;
    ctx->side_pending = 0;
    BN_CUDA(cudaEventRecord((cudaEvent_t)ctx->side_done, (cudaStream_t)ctx->side_stream));
    BN_CUDA(cudaStreamWaitEvent((cudaStream_t)ctx->stream, (cudaEvent_t)ctx->side_done, 0));
    return BN_OK;
}

extern "C" bn_status bn_ctx_fork_side(bn_ctx *ctx)
{
    BN_CUDA(cudaEventRecord((cudaEvent_t)ctx->side_fork, (cudaStream_t)ctx->stream));
    BN_CUDA(cudaStreamWaitEvent((cudaStream_t)ctx->side_stream, (cudaEvent_t)ctx->side_fork, 0));
    ctx->side_pending = 1;
    ctx->side_forks++;
    return BN_OK;
}

extern "C" bn_status bn_ctx_zero_beside(bn_ctx *ctx, void *ptr, size_t bytes)
{
    BN_TRY(bn_ctx_fork_side(ctx));
    BN_CUDA(cudaMemsetAsync(ptr, 0, bytes, (cudaStream_t)ctx->side_stream));
    return BN_OK;
}

/* *ws (of *size bytes) grown to at least bytes, zeroed on ctx's stream. */
static bn_status grow_workspace(bn_ctx *ctx, void **ws, size_t *size, size_t bytes, const char *what)
{
    if (bytes <= *size) return BN_OK;
    /* A step graph captured before replays on the old workspace, kept while it lives. */
    bn_device_retire(*ws);
    *ws = NULL;
    *size = 0;
    cudaError_t e = cudaMalloc(ws, bytes);
    if (e != cudaSuccess) {
        *ws = NULL;
        return alloc_error(e, bytes, what);
    }
    *size = bytes;
    remember(*ws, bytes);
    /* Zeroed once, so that no algorithm can read uninitialised memory from it. */
    BN_CUDA(cudaMemsetAsync(*ws, 0, bytes, (cudaStream_t)ctx->stream));
    return BN_OK;
}

/* The workspaces of the lanes whose buffers the context does not hold now (every lane but the
 * one entered; slot 0 holds the context's own only while another is entered). */
static bn_status grow_lanes(bn_ctx *ctx, bool side, size_t bytes)
{
    for (int k = 0; k < ctx->num_lanes; k++) {
        if (k == ctx->lane_now) continue;
        bn_lane_workspaces *w = &ctx->lane_ws[k];
        if (side) BN_TRY(grow_workspace(ctx, &w->side, &w->side_size, bytes, "a lane's side cuDNN workspace"));
        else BN_TRY(grow_workspace(ctx, &w->main, &w->main_size, bytes, "a lane's cuDNN workspace"));
    }
    return BN_OK;
}

extern "C" bn_status bn_ctx_reserve_workspace(bn_ctx *ctx, size_t bytes)
{
    BN_TRY(grow_workspace(ctx, &ctx->workspace, &ctx->workspace_size, bytes, "the cuDNN workspace"));
    return grow_lanes(ctx, false, bytes);
}

extern "C" bn_status bn_ctx_reserve_side_workspace(bn_ctx *ctx, size_t bytes)
{
    BN_TRY(grow_workspace(ctx, &ctx->side_workspace, &ctx->side_workspace_size, bytes,
                          "the side stream's cuDNN workspace"));
    return grow_lanes(ctx, true, bytes);
}

/* Swaps the context's stream and workspace with its side stream's, and rebinds cuDNN to the
 * stream now current: the same call turns it there and back (bn_ctx_on_side). */
static bn_status side_turn(bn_ctx *ctx)
{
    void *s = ctx->stream, *w = ctx->workspace;
    const size_t size = ctx->workspace_size;
    ctx->stream = ctx->side_stream, ctx->side_stream = s;
    ctx->workspace = ctx->side_workspace, ctx->side_workspace = w;
    ctx->workspace_size = ctx->side_workspace_size, ctx->side_workspace_size = size;
    BN_CUDNN(cudnnSetStream((cudnnHandle_t)ctx->cudnn, (cudaStream_t)ctx->stream));
    return BN_OK;
}

extern "C" bn_status bn_ctx_on_side(bn_ctx *ctx, bn_status (*fn)(void *env), void *env)
{
    BN_TRY(side_turn(ctx));
    const bn_status s = fn(env);
    const bn_status back = side_turn(ctx);
    return s != BN_OK ? s : back;
}

extern "C" bn_status bn_device_alloc(void **ptr, size_t bytes)
{
    *ptr = NULL;
    if (!ctx_open) return bn_error(BN_ERR_DEVICE, "no device context is open (use --device gpu)");
    cudaError_t e = cudaMalloc(ptr, bytes);
    if (e != cudaSuccess) {
        *ptr = NULL;
        return alloc_error(e, bytes, "a buffer");
    }
    remember(*ptr, bytes);
    return BN_OK;
}

extern "C" void bn_device_free(void *ptr)
{
    if (!ptr) return;
    forget(ptr);
    cudaFree(ptr);
}

static void free_retired(void)
{
    for (int i = 0; i < retired.count; i++) bn_device_free(retired.ptr[i]);
    free(retired.ptr);
    retired.ptr = NULL;
    retired.count = retired.cap = 0;
}

/* Adds ptr to the retired buffers; 0 when the host has no memory to list it. */
static int keep_retired(void *ptr)
{
    if (retired.count == retired.cap) {
        const int cap = retired.cap ? 2 * retired.cap : 16;
        void **grown = (void **)realloc(retired.ptr, (size_t)cap * sizeof *grown);
        if (!grown) return 0;
        retired.ptr = grown, retired.cap = cap;
    }
    retired.ptr[retired.count++] = ptr;
    return 1;
}

extern "C" void bn_device_retire(void *ptr)
{
    if (!ptr) return;
    if (retired.graphs == 0) {
        bn_device_free(ptr); /* no graph replays on it */
        return;
    }
    if (keep_retired(ptr)) return;
    /* Not listed, it cannot outlive the graphs: freed now, they are captured again. */
    if (ctx_open) the_ctx.buffer_generation++;
    bn_device_free(ptr);
}

extern "C" void bn_device_graphs(int delta)
{
    retired.graphs += delta;
    if (retired.graphs <= 0) {
        retired.graphs = 0;
        free_retired();
    }
}

extern "C" bn_status bn_device_zero(void *ptr, size_t bytes)
{
    BN_CUDA(cudaMemsetAsync(ptr, 0, bytes, stream()));
    return BN_OK;
}

extern "C" bn_status bn_device_h2d(void *dst, const void *src, size_t bytes)
{
    /* Synchronous w.r.t. the host buffer: the caller may reuse it at once. */
    BN_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream()));
    BN_CUDA(cudaStreamSynchronize(stream()));
    return BN_OK;
}

extern "C" bn_status bn_device_h2d_queued(bn_upload_buf *u, void *dst, const void *src, size_t bytes)
{
    if (!bytes) return BN_OK;
    /* The last upload through u has read its pinned bytes before they are written again. */
    if (u->copied) BN_CUDA(cudaEventSynchronize((cudaEvent_t)u->copied));
    if (bytes > u->cap) {
        if (u->host) BN_CUDA(cudaFreeHost(u->host));
        u->host = NULL;
        u->cap = 0;
        BN_CUDA(cudaHostAlloc(&u->host, bytes, cudaHostAllocDefault));
        u->cap = bytes;
    }
    if (!u->copied) {
        cudaEvent_t e;
        BN_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
        u->copied = e;
    }
    memcpy(u->host, src, bytes);
    BN_CUDA(cudaMemcpyAsync(dst, u->host, bytes, cudaMemcpyHostToDevice, stream()));
    BN_CUDA(cudaEventRecord((cudaEvent_t)u->copied, stream()));
    return BN_OK;
}

extern "C" void bn_upload_buf_free(bn_upload_buf *u)
{
    if (!u) return;
    /* A copy still queued (behind work that may never end, on a rank whose peer is lost) may yet
     * read the pinned bytes: they are left to the process's end rather than waited for. */
    const bool pending = u->copied && cudaEventQuery((cudaEvent_t)u->copied) != cudaSuccess;
    if (u->copied) cudaEventDestroy((cudaEvent_t)u->copied);
    if (u->host && !pending) cudaFreeHost(u->host);
    u->host = NULL;
    u->cap = 0;
    u->copied = NULL;
}

extern "C" bn_status bn_device_d2h(void *dst, const void *src, size_t bytes)
{
    BN_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream()));
    BN_CUDA(cudaStreamSynchronize(stream()));
    return BN_OK;
}

extern "C" bn_status bn_device_sync(void)
{
    BN_CUDA(cudaStreamSynchronize(stream()));
    return BN_OK;
}

extern "C" bn_status bn_tensor_desc_set(void **desc, int n, int c, int h, int w, int bf16)
{
    if (!*desc) {
        cudnnTensorDescriptor_t d;
        BN_CUDNN(cudnnCreateTensorDescriptor(&d));
        *desc = d;
    }
    BN_CUDNN(cudnnSetTensor4dDescriptor((cudnnTensorDescriptor_t)*desc, CUDNN_TENSOR_NCHW,
                                        bf16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT, n, c, h, w));
    return BN_OK;
}

extern "C" void bn_tensor_desc_free(void *desc)
{
    if (desc) cudnnDestroyTensorDescriptor((cudnnTensorDescriptor_t)desc);
}

extern "C" void bn_device_memory(size_t *now, size_t *peak)
{
    *now = bytes_now;
    *peak = bytes_peak;
}

extern "C" bn_status bn_event_create(void **event)
{
    cudaEvent_t e;
    BN_CUDA(cudaEventCreate(&e));
    *event = e;
    return BN_OK;
}

extern "C" bn_status bn_event_record(void *event)
{
    BN_CUDA(cudaEventRecord((cudaEvent_t)event, stream()));
    return BN_OK;
}

extern "C" bn_status bn_event_elapsed_ms(void *start, void *end, float *ms)
{
    BN_CUDA(cudaEventSynchronize((cudaEvent_t)end));
    BN_CUDA(cudaEventElapsedTime(ms, (cudaEvent_t)start, (cudaEvent_t)end));
    return BN_OK;
}

extern "C" void bn_event_destroy(void *event)
{
    if (event) cudaEventDestroy((cudaEvent_t)event);
}

/* How long a hold waits for its release at most. */
#define HOLD_LIMIT_NS (BN_STREAM_HOLD_MS * 1000000ull)

/* The word a hold's kernel reads: pinned host memory the device reads, one per thread (made at
 * its first hold, kept for the process), and the number of the thread's last hold. A release
 * writes that number; a hold's kernel waits until the word reaches its own, so a late release
 * never holds a later kernel. */
static thread_local volatile unsigned *hold_word;
static thread_local unsigned hold_count;

__global__ void hold_kernel(const volatile unsigned *word, unsigned number, unsigned long long limit_ns)
{
    bn_early_entry();
#if __CUDA_ARCH__ >= 700
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do {
        if ((int)(*word - number) >= 0) return;
        __nanosleep(500);
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    } while (now - start < limit_ns);
#else
    (void)word, (void)number, (void)limit_ns; /* before Volta: no hold */
#endif
}

extern "C" bn_status bn_stream_hold(void)
{
    if (!hold_word) {
        void *p = NULL;
        BN_CUDA(cudaHostAlloc(&p, sizeof(unsigned), cudaHostAllocMapped | cudaHostAllocPortable));
        hold_word = (volatile unsigned *)p;
        *hold_word = hold_count;
    }
    unsigned *device_word = NULL;
    BN_CUDA(cudaHostGetDevicePointer((void **)&device_word, (void *)hold_word, 0));
    hold_kernel<<<1, 1, 0, stream()>>>(device_word, ++hold_count, HOLD_LIMIT_NS);
    BN_CUDA(cudaGetLastError());
    return BN_OK;
}

extern "C" void bn_stream_release(void)
{
    if (hold_word) *hold_word = hold_count;
}

extern "C" bn_status bn_profiler_start(void)
{
    BN_CUDA(cudaProfilerStart());
    return BN_OK;
}

extern "C" bn_status bn_profiler_stop(void)
{
    BN_CUDA(cudaProfilerStop());
    return BN_OK;
}
