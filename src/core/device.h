/* device.h - the CUDA device seen from C: the process's one device context, memory and
 * transfers. Built from device.cu with CUDA, or device_none.c without it, where every
 * call reports that this build has no GPU support. The functions are gpu/'s, for the layers and
 * the folders above the core; the core's own code reaches the device through device_ops.h. */
#ifndef BN_DEVICE_H
#define BN_DEVICE_H

#include <stddef.h>
#include <stdint.h>

#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Streams a context keeps for a network's independent branches (lane 0 is its stream). */
#define BN_CTX_LANES 4

/* A lane's workspaces for library passes: on its stream and on its side stream. */
typedef struct bn_lane_workspaces {
    void *main, *side;
    size_t main_size, side_size;
} bn_lane_workspaces;

/* The device context: one per process. Handles are opaque here so that C code needs no
 * CUDA headers; CUDA code casts them (cudaStream_t, cublasHandle_t, cudnnHandle_t). */
typedef struct bn_ctx {
    int device;            /* CUDA device ordinal */
    char name[256];        /* device name as the driver reports it */
    void *stream;          /* every launch and library call goes to this stream */
    void *side_stream;     /* a layer's independent work, forked from and joined back to stream
                              within the same pass, or at the end of the net's backward pass
                              (kernels only: the handles stay on stream) */
    void *side_done;       /* event for that late join */
    void *side_fork;       /* event for side work that follows what stream holds (bn_ctx_zero_beside) */
    int side_pending;      /* side_stream holds work that stream has not waited for */
    unsigned side_forks;   /* side work forked so far (bn_ctx_fork_side, bn_overlap_run): a change
                              tells that a pass put work on the side stream */
    void *cublas;          /* bound to stream */
    void *cudnn;           /* bound to stream */
    void *workspace;       /* cuDNN workspace arena shared by the layers on stream */
    size_t workspace_size;
    void *side_workspace;  /* the same for library passes on side_stream (bn_ctx_on_side) */
    size_t side_workspace_size;
    unsigned buffer_generation; /* counts replacements of device buffers whose contents steps
                                   carry (the optimizer's rate table, a user layer's buffers): a
                                   captured graph holds the old addresses and must be captured
                                   again; scratch is retired instead (bn_device_retire) */
    int deterministic;     /* restrict cuDNN to deterministic algorithms */
    int tf32;              /* allow TF32 tensor-core math */
    int autotune;          /* choose each layer's kernels by timing the candidates (cuDNN's and
                              cuBLASLt's included) instead of by the fixed rule; ignored in a
                              deterministic context */
    int bf16;              /* activations and products in BF16 (--precision bf16) */
    int prioritized;       /* stream runs at the device's greatest priority and side_stream at its
                              least, and the step's graphs keep each kernel's priority
                              (bn_ctx_prioritize: a rank of a data-parallel group) */
    void *lanes[BN_CTX_LANES]; /* lanes[1..num_lanes - 1]: streams at stream's priority, on which a
                              network's passes run branches beside each other while a step is
                              captured (core/net_lanes.c); lanes[0] is unused */
    void *lane_sides[BN_CTX_LANES]; /* each lane's own side stream, at side_stream's priority */
    int lane_pending[BN_CTX_LANES]; /* each lane's side_pending while another lane is entered */
    bn_lane_workspaces lane_ws[BN_CTX_LANES]; /* each lane's own two workspaces, as large as the
                              context's (lanes 1..; slot 0 keeps the context's own while a lane is
                              entered): a library pass on a lane uses them (bn_ctx_set_lane) */
    int num_lanes;         /* 1 + the lane streams made (bn_ctx_open_lanes) */
    int lane_now;          /* the lane entered (0: none, or the context's own streams) */
    void *home, *home_side; /* while the network runs a layer on a lane: the streams that `stream`
                              and `side_stream` stand for otherwise (bn_ctx_set_lane); NULL else */
    int capturing;         /* a step is being captured as a CUDA graph (graph.cu) */
} bn_ctx;

/* Whether layers choose their kernels by the fixed rule (blobnet's own kernels wherever they
 * apply, in a set order) rather than by timing: always unless the context asks for autotuning,
 * and always in a deterministic context, whose runs must pick the same kernels. */
static inline int bn_ctx_by_rule(const bn_ctx *ctx)
{
    return ctx->deterministic || !ctx->autotune;
}

#ifndef BN_WITH_CUDA
/* In a build without CUDA (gpu/device_none.c): the error every device entry point returns,
 * saying how to get GPU support. */
bn_status bn_no_cuda(void);
#endif

/* *hash = bn_hash_words (core/hash.h) of n 32-bit words at src on the device, computed on ctx's
 * stream and waited for. */
bn_status bn_gpu_hash_words(const void *src, size_t n, uint64_t *hash, bn_ctx *ctx);

/* dst[i] += src[i] for i < n, queued on ctx's stream. */
bn_status bn_gpu_add(float *dst, const float *src, size_t n, bn_ctx *ctx);

/* dst[i] += src[i] for i < n over BF16 arrays (the sum rounded to nearest even), queued on
 * ctx's stream: the network's sum of an output's gradients under --precision bf16. */
bn_status bn_gpu_add_bf16(void *dst, const void *src, size_t n, bn_ctx *ctx);

/* Sets n floats to value, queued on ctx's stream (poisoning outputs in tests, fills). */
bn_status bn_gpu_fill(float *dst, float value, size_t n, bn_ctx *ctx);

/* 1 when this build has CUDA support. */
int bn_device_compiled(void);

/* What the build was compiled against, for `blobnet --version`: "CUDA 13.0, cuDNN 9.10.2", or
 * "CPU only" in a build without CUDA. */
const char *bn_device_build_info(void);

/* Number of usable CUDA devices (0 without CUDA, a driver or a device). */
int bn_device_count(void);

/* Loads the device libraries that are opened at run time (cuBLAS) now, once per process, so
 * that a caller can pay for it while it waits anyway (the device opening on another thread);
 * without it the first use loads them. A no-op without CUDA. */
void bn_device_preload(void);

/* The library's GPU code, loaded ahead of a run's first step (gpu/code_load.cu). Each module
 * (the code of one of the library's .cu files) is noted at its first launch;
 * bn_device_code_used writes those noted so far, in that order, one character a module, into buf
 * (cap bytes). bn_device_code_keep_for keeps that list in the kernel cache under `model` (a text
 * that names the model and what decides its kernels); bn_device_code_load_for, in a later run,
 * loads the modules kept under it on a thread of its own, in that order, while the caller sets
 * the network up and uploads its data, and marks the timeline when done. bn_device_code_load_begin
 * loads a list of bn_device_code_used's form; bn_device_code_load_end waits for the load and
 * returns the number of modules it loaded (bn_ctx_close waits for it too). No-ops without CUDA
 * or an open context; the cache's errors are left to the layers' lookups. */
void bn_device_code_used(char *buf, size_t cap);
void bn_device_code_keep_for(const char *model);
void bn_device_code_load_for(const char *model);
void bn_device_code_load_begin(const char *list);
int bn_device_code_load_end(void);

/* Opens the process context on device ordinal `device`; a second call with the same
 * ordinal returns the same context. The context is owned by the library. */
bn_status bn_ctx_open(int device, bn_ctx **out);

/* The open context, or NULL when none is open. */
bn_ctx *bn_ctx_current(void);

/* Releases the context and its handles. */
void bn_ctx_close(void);

/* With `on`, gives the context's critical path scheduling priority over its side work: stream is
 * remade at the device's greatest stream priority (side_stream at its least), and the step's
 * graphs are instantiated to keep the priority each kernel was captured with; without, both
 * streams are remade at the least priority and graphs run at the priority they are launched at
 * (as the context opens). Waits for the device first; a graph captured before is not changed.
 * A data-parallel rank turns it on when it joins its group (bn_dist_open): there the weight
 * gradients on side_stream, no longer held back by the updates (which follow the all-reduces on
 * the communication stream), would otherwise take the SMs the input gradients on stream need. */
bn_status bn_ctx_prioritize(bn_ctx *ctx, int on);

/* The priorities of the context's two streams (lower numbers run first). */
bn_status bn_ctx_stream_priorities(const bn_ctx *ctx, int *main_priority, int *side_priority);

/* Marks side_stream as holding work that stream must wait for before the pass ends. */
void bn_ctx_defer_side(bn_ctx *ctx);

/* Makes stream wait for everything queued on side_stream so far, when anything is pending. */
bn_status bn_ctx_join_side(bn_ctx *ctx);

/* Makes side_stream wait for everything queued on stream so far, for side work that must come
 * after it but may run beside what stream does next. The side work is then pending: the next
 * bn_ctx_join_side orders stream after it. */
bn_status bn_ctx_fork_side(bn_ctx *ctx);

/* Zeroes bytes at ptr on side_stream after a bn_ctx_fork_side. */
bn_status bn_ctx_zero_beside(bn_ctx *ctx, void *ptr, size_t bytes);

/* Grows the side stream's workspace (side_workspace) to at least bytes, and every lane's side
 * workspace with it, as bn_ctx_reserve_workspace grows the stream's. */
bn_status bn_ctx_reserve_side_workspace(bn_ctx *ctx, size_t bytes);

/* Runs fn(env) with the context turned to its side stream: stream swapped with side_stream,
 * workspace with side_workspace, and the cuDNN handle rebound to the stream now current, so that a
 * pass written for the stream queues its kernels and its cuDNN calls on the side stream, with a
 * workspace of its own (cuBLAS's handle stays: such a pass makes no cuBLAS call). The context is
 * turned back whatever fn returns; fn's error comes first. Inside a lane (bn_ctx_set_lane) it
 * turns to that lane's side stream and side workspace. */
bn_status bn_ctx_on_side(bn_ctx *ctx, bn_status (*fn)(void *env), void *env);

/* Makes the context's lanes 1..count - 1 that are not made yet (count at most BN_CTX_LANES), at
 * the priority of its stream; never while a step is captured. */
bn_status bn_ctx_open_lanes(bn_ctx *ctx, int count);

/* Points ctx's stream and side stream at lane `lane`'s (< num_lanes; 0: the streams they stand
 * for otherwise), so that a layer's kernels, its side work and the device calls it makes go
 * there, with side_pending kept per lane; bn_ctx_leave_lanes points them back (the network has
 * joined every lane's side work by then). cuDNN's handle is bound to the lane's stream and the
 * workspaces are the lane's own, so a cuDNN pass on one lane never shares a workspace with a pass
 * on another: every lane's are as large as the context's (bn_ctx_reserve_workspace grows them
 * all). cuBLAS's handle stays on the context's stream: a layer that calls it stays off the lanes
 * (bn_layer_ops.beside). */
bn_status bn_ctx_set_lane(bn_ctx *ctx, int lane);
void bn_ctx_leave_lanes(bn_ctx *ctx);

/* An event that orders streams (no timing), recorded on ctx's stream as it is now, and a wait of
 * ctx's stream for the last recording of one. */
bn_status bn_order_event_create(void **event);
void bn_order_event_destroy(void *event);
bn_status bn_ctx_record(bn_ctx *ctx, void *event);
bn_status bn_ctx_wait(bn_ctx *ctx, void *event);

/* Grows the cuDNN workspace to at least bytes, and every lane's with it (never inside a step). */
bn_status bn_ctx_reserve_workspace(bn_ctx *ctx, size_t bytes);

/* The free and total memory of ctx's device, as the CUDA runtime reports them now. */
bn_status bn_ctx_memory(bn_ctx *ctx, size_t *free_bytes, size_t *total_bytes);

/* Device memory: allocation, release, and zero fill on the context stream. */
bn_status bn_device_alloc(void **ptr, size_t bytes);
void bn_device_free(void *ptr);
bn_status bn_device_zero(void *ptr, size_t bytes);

/* Releases a buffer (from bn_device_alloc) that a larger one replaces, whose contents no later
 * step needs (a pass's scratch, partial sums, the cuDNN workspace): at once where no step graph
 * lives, else once the last one is freed, so that a graph captured before the replacement still
 * replays on memory of its own and need not be captured again (no buffer_generation step). */
void bn_device_retire(void *ptr);

/* Step graphs (graph.h) count themselves in and out: when the last one goes, the retired
 * buffers are freed. */
void bn_device_graphs(int delta);

/* Copies on the context stream; d2h waits for the copy so the host data is usable. */
bn_status bn_device_h2d(void *dst, const void *src, size_t bytes);
bn_status bn_device_d2h(void *dst, const void *src, size_t bytes);

/* A pinned host buffer through which bn_device_h2d_queued queues uploads; zeroed: empty. */
typedef struct bn_upload_buf {
    void *host;   /* pinned, cap bytes */
    size_t cap;
    void *copied; /* cudaEvent_t after the last upload's copy, NULL before the first */
} bn_upload_buf;

/* Copies bytes of src into u's pinned buffer and queues their upload to dst on the context
 * stream, without waiting for it: the upload lands in stream order, after the work queued
 * before it. The host may reuse src at once. A second upload through u first waits for the
 * first one's copy (long done where uploads through one buffer are an epoch apart). */
bn_status bn_device_h2d_queued(bn_upload_buf *u, void *dst, const void *src, size_t bytes);
void bn_upload_buf_free(bn_upload_buf *u);

/* Waits until everything queued on the context stream has finished. */
bn_status bn_device_sync(void);

/* blobnet's own device memory (every bn_device_alloc and the cuDNN workspace), now and at
 * its peak; what cuBLAS and cuDNN allocate inside their handles is not included. */
void bn_device_memory(size_t *now, size_t *peak);

/* Timing events on the context stream: create, record now, milliseconds between two
 * recorded events (waits for the later one), destroy. */
bn_status bn_event_create(void **event);
bn_status bn_event_record(void *event);
bn_status bn_event_elapsed_ms(void *start, void *end, float *ms);
void bn_event_destroy(void *event);

/* A hold on the context stream: bn_stream_hold queues a kernel that waits until the thread's
 * bn_stream_release (or, should that not come, BN_STREAM_HOLD_MS), so that the work queued
 * behind it meanwhile runs back to back however slowly the host queues it. A timing taken
 * behind a hold measures the device's work, not the host's launches. Release a hold before
 * waiting for anything queued after it: a wait behind the hold lasts until it runs out. */
#define BN_STREAM_HOLD_MS 100
bn_status bn_stream_hold(void);
void bn_stream_release(void);

/* Work queued behind a hold, for a timing (src/gpu/held.c). bn_held_begin takes the hold where
 * `hold` is set and notes when the queueing began; bn_held_end releases it and returns 1 where
 * queueing took as long as the hold: something queued waited for the device, so it waited the hold
 * out and the timing is the host's. The caller then times that work again without a hold (the
 * chooser's rounds, `blobnet time`'s steps). */
typedef struct bn_held_span {
    int hold;
    double queued_from;
} bn_held_span;
bn_status bn_held_begin(bn_held_span *h, int hold);
int bn_held_end(bn_held_span *h);

/* Starts and stops profiler capture (cudaProfilerStart/Stop), for `nsys
 * --capture-range=cudaProfilerApi` and `ncu --profile-from-start off`. */
bn_status bn_profiler_start(void);
bn_status bn_profiler_stop(void);

/* (Re)describes a cuDNN NCHW tensor of floats (of BF16 with bf16 set) in *desc, creating it
 * when NULL. */
bn_status bn_tensor_desc_set(void **desc, int n, int c, int h, int w, int bf16);
void bn_tensor_desc_free(void *desc);

#ifdef __cplusplus
}
#endif
#endif
