/* comm.cu - one rank's NCCL communicator and the collectives the trainer needs.
 *
 * The communicator is non-blocking (ncclConfig_t.blocking = 0), so that no NCCL call can hang
 * the host: a call that answers ncclInProgress is polled with ncclCommGetAsyncError until it
 * settles or d->timeout_s passes, and every host wait on the device polls the stream and NCCL's
 * error state the same way. Past the deadline the communicator is aborted (which also releases
 * the kernels stuck waiting on a dead peer; NCCL's clean-up gets ABORT_WAIT_S on a thread of its
 * own, as it can wait on the lost peer too) and the error names this rank.
 *
 * Gradients are summed on a communication stream of the rank's own, forked from the compute
 * streams by an event and joined back to the stream by another at the step's end, so the
 * all-reduce (and update) of one layer runs beside the backward pass of the layers below it,
 * inside a captured CUDA graph as well. NVLink multicast
 * (NCCL_NVLS_ENABLE) is left as the environment sets it.
 *
 * Between the GPUs of one machine the gradient slab is summed through the peers' memory instead
 * (peer_sum.h), where every rank can map every other's (bn_dist_attach_grads): NCCL's ring costs a
 * small model's few MB of gradients its latency 2(N-1) times over.
 *
 * The stop agreement between steps can also be queued and read later (bn_dist_max_begin and
 * _end): its value travels through pinned host memory and an event says when it is back, so
 * that the host never waits for the device to run dry to learn it. */
#include <nccl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/clock.h"
#include "core/nvtx.h"
#include "dist.h"
#include "gpu/cuda_check.h"
#include "peer_sum.h"

#define DEFAULT_TIMEOUT_S 120.0
/* How long a host wait sleeps between two polls: short beside a step, long beside a spin. The
 * first SPIN_S of a wait poll without sleeping, as the waits for small collectives at an epoch's
 * end (tens of microseconds) would otherwise each end a sleep late. */
static const struct timespec poll_pause = {0, 50000};
#define SPIN_S 200e-6
#define MAX_WEIGHTS 8

/* comm.cu's own part of a bn_dist (d->state). */
typedef struct comm_state {
    cudaEvent_t ready;       /* the compute work a collective follows */
    cudaEvent_t done;        /* the collective, for the compute work that follows it */
    void *scratch;           /* device: BN_DIST_MAX_VALUES doubles or BN_DIST_MAX_RANKS hashes */
    cudaEvent_t agreed;      /* the end of the stop agreement bn_dist_max_begin queued */
    int32_t *stop_host;      /* pinned host memory: [0] this rank's stop value, [1] the agreed one */
    double *values_host;     /* pinned host memory: BN_DIST_MAX_VALUES doubles summed (bn_dist_sum) */
    int32_t *stop_dev;       /* device: the stop value being agreed on */
    int stop_pending;        /* an agreement was begun and not ended */
    /* The pace of the host (bn_dist_pace): an event after each of the last BN_DIST_PACE_STEPS
     * steps, the next to use and how many were recorded. */
    cudaEvent_t paced[BN_DIST_PACE_STEPS];
    int pace_next, pace_used;
    /* Pre-multiplied sums, one per weight seen: a captured graph keeps using the op it was
     * captured with, so none is destroyed before the communicator. */
    double weights[MAX_WEIGHTS];
    ncclRedOp_t ops[MAX_WEIGHTS];
    int num_ops;
    bn_peer_sum *peers;      /* the gradient slab summed through the peers' memory; NULL: by NCCL */
} comm_state;

static double timeout_of(const bn_dist *d)
{
    return d->timeout_s > 0 ? d->timeout_s : DEFAULT_TIMEOUT_S;
}

/* How long abort_comm waits for ncclCommAbort. Its clean-up can wait on a peer that is gone
 * (seen on 2 H100s: rank 0 blocked in it for over a minute after rank 1 was killed), so it runs
 * on a thread of its own and is left behind, still running, past this. */
#define ABORT_WAIT_S 10.0

/* One ncclCommAbort on its own thread; whichever of the thread and the waiter is last to let go
 * frees it. */
typedef struct abort_job {
    ncclComm_t comm;
    pthread_mutex_t lock;
    pthread_cond_t done_cv;
    int done, left_behind;
} abort_job;

static void *abort_thread(void *arg)
{
    abort_job *j = (abort_job *)arg;
    ncclCommAbort(j->comm);
    pthread_mutex_lock(&j->lock);
    j->done = 1;
    const int left = j->left_behind;
    pthread_cond_signal(&j->done_cv);
    pthread_mutex_unlock(&j->lock);
    if (left) free(j);
    return NULL;
}

/* Runs ncclCommAbort(comm) and waits up to ABORT_WAIT_S for it, then leaves it running (where
 * no thread can be started, the communicator is simply dropped). */
static void abort_within(ncclComm_t comm)
{
    abort_job *j = (abort_job *)calloc(1, sizeof *j);
    if (!j) return;
    j->comm = comm;
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_mutex_init(&j->lock, NULL);
    pthread_cond_init(&j->done_cv, &attr);
    pthread_condattr_destroy(&attr);
    pthread_t t;
    if (pthread_create(&t, NULL, abort_thread, j) != 0) {
        free(j);
        return;
    }
    pthread_detach(t);
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += (time_t)ABORT_WAIT_S;
    pthread_mutex_lock(&j->lock);
    while (!j->done && pthread_cond_timedwait(&j->done_cv, &j->lock, &until) == 0) {}
    const int done = j->done;
    if (!done) j->left_behind = 1;
    pthread_mutex_unlock(&j->lock);
    if (done) {
        pthread_cond_destroy(&j->done_cv);
        pthread_mutex_destroy(&j->lock);
        free(j);
    }
}

/* Aborts the communicator (no wait on the other ranks, and at most ABORT_WAIT_S on NCCL's
 * clean-up) and forgets it. */
static void abort_comm(bn_dist *d)
{
    if (!d->comm) return;
    abort_within((ncclComm_t)d->comm);
    d->comm = NULL;
}

/* A failed collective aborts the communicator at once, which is meant to end its kernels still
 * waiting on a lost peer, so that the device work queued behind them can finish; d is marked
 * failed (bn_dist_failed) for whoever ends the process. */
static bn_status nccl_failed(bn_dist *d, ncclResult_t r, const char *file, int line, const char *call)
{
    const char *detail = ncclGetLastError((ncclComm_t)d->comm);
    bn_status s = bn_error(BN_ERR_DEVICE, "rank %d: %s:%d: %s: %s%s%s", d->rank, file, line, call,
                           ncclGetErrorString(r), detail && detail[0] ? ": " : "", detail ? detail : "");
    d->failed = 1;
    abort_comm(d);
    return s;
}

static bn_status no_progress(bn_dist *d, const char *what)
{
    bn_status s = bn_error(BN_ERR_DEVICE, "rank %d: no progress from the other ranks for %g s (%s)", d->rank,
                           timeout_of(d), what);
    d->failed = 1;
    abort_comm(d);
    return s;
}

/* Turns an NCCL result into a status: ncclInProgress (a non-blocking communicator still at
 * work) is polled until it settles, with the deadline. */
static bn_status settle(bn_dist *d, ncclResult_t r, const char *file, int line, const char *call)
{
    double start = bn_clock_seconds();
    while (r == ncclInProgress) {
        if (bn_clock_seconds() - start > timeout_of(d)) return no_progress(d, call);
        ncclResult_t q = ncclCommGetAsyncError((ncclComm_t)d->comm, &r);
        if (q != ncclSuccess) return nccl_failed(d, q, file, line, "ncclCommGetAsyncError");
        if (r == ncclInProgress) nanosleep(&poll_pause, NULL);
    }
    return r == ncclSuccess ? BN_OK : nccl_failed(d, r, file, line, call);
}

#define BN_NCCL(d, call)                                                                      \
    do {                                                                                      \
        ncclResult_t bn_r_ = (call);                                                          \
        if (bn_r_ != ncclSuccess) BN_TRY(settle((d), bn_r_, __FILE__, __LINE__, #call));      \
    } while (0)

/* Waits until the device has done everything queued on s or, when `done` is set, everything before
 * that event, watching NCCL's error state; `what` names the wait. */
static bn_status wait_for(bn_dist *d, cudaStream_t s, cudaEvent_t done, const char *what)
{
    double start = bn_clock_seconds();
    for (;;) {
        cudaError_t e = done ? cudaEventQuery(done) : cudaStreamQuery(s);
        if (e == cudaSuccess) return BN_OK;
        if (e != cudaErrorNotReady)
            return bn_error(BN_ERR_DEVICE, "rank %d: %s:%d: %s (%s): %s", d->rank, __FILE__, __LINE__,
                            done ? "cudaEventQuery" : "cudaStreamQuery", what, cudaGetErrorString(e));
        const comm_state *st = (const comm_state *)d->state;
        if (st && bn_peer_sum_stalled(st->peers)) return no_progress(d, "summing the gradients with the peers");
        ncclResult_t async;
        ncclResult_t q = ncclCommGetAsyncError((ncclComm_t)d->comm, &async);
        if (q != ncclSuccess) return nccl_failed(d, q, __FILE__, __LINE__, "ncclCommGetAsyncError");
        if (async != ncclSuccess && async != ncclInProgress) return nccl_failed(d, async, __FILE__, __LINE__, what);
        const double waited = bn_clock_seconds() - start;
        if (waited > timeout_of(d)) return no_progress(d, what);
        if (waited > SPIN_S) nanosleep(&poll_pause, NULL);
    }
}

static bn_status wait_stream(bn_dist *d, cudaStream_t s, const char *what)
{
    return wait_for(d, s, NULL, what);
}

static bn_status not_open(const bn_dist *d)
{
    return bn_error(BN_ERR_INTERNAL, "rank %d: the communicator is not open (closed, or failed after an error)",
                    d ? d->rank : -1);
}

#define BN_NEED_OPEN(d)                                             \
    do {                                                            \
        if (!(d) || !(d)->comm || (d)->failed) return not_open(d);  \
    } while (0)

extern "C" int bn_dist_compiled(void)
{
    return 1;
}

extern "C" const char *bn_dist_missing(void)
{
    return "";
}

extern "C" bn_status bn_dist_unique_id(void *id, size_t id_len)
{
    if (id_len < sizeof(ncclUniqueId))
        return bn_error(BN_ERR_INTERNAL, "an NCCL unique id needs %zu bytes, not %zu", sizeof(ncclUniqueId), id_len);
    ncclUniqueId u;
    ncclResult_t r = ncclGetUniqueId(&u);
    if (r != ncclSuccess) {
        const char *detail = ncclGetLastError(NULL);
        return bn_error(BN_ERR_DEVICE, "%s:%d: ncclGetUniqueId: %s%s%s", __FILE__, __LINE__, ncclGetErrorString(r),
                        detail && detail[0] ? ": " : "", detail ? detail : "");
    }
    memcpy(id, &u, sizeof u);
    return BN_OK;
}

/* The streams, events and scratch of an opened bn_dist; released by release_state. */
static bn_status make_state(bn_dist *d)
{
    comm_state *st = (comm_state *)calloc(1, sizeof *st);
    if (!st) return bn_error(BN_ERR_NOMEM, "rank %d: out of host memory for the communicator", d->rank);
    d->state = st;
    /* At the device's greatest priority, as the compute stream (bn_ctx_prioritize): the
     * all-reduces and the updates after them start as soon as their gradients are ready. */
    int least = 0, greatest = 0;
    BN_CUDA(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    cudaStream_t s;
    BN_CUDA(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, greatest));
    d->stream = s;
    BN_CUDA(cudaEventCreateWithFlags(&st->ready, cudaEventDisableTiming));
    BN_CUDA(cudaEventCreateWithFlags(&st->done, cudaEventDisableTiming));
    BN_CUDA(cudaEventCreateWithFlags(&st->agreed, cudaEventDisableTiming));
    for (int i = 0; i < BN_DIST_PACE_STEPS; i++)
        BN_CUDA(cudaEventCreateWithFlags(&st->paced[i], cudaEventDisableTiming));
    BN_CUDA(cudaHostAlloc((void **)&st->stop_host, 2 * sizeof *st->stop_host, cudaHostAllocDefault));
    BN_CUDA(cudaHostAlloc((void **)&st->values_host, BN_DIST_MAX_VALUES * sizeof *st->values_host,
                          cudaHostAllocDefault));
    BN_TRY(bn_device_alloc((void **)&st->stop_dev, sizeof *st->stop_dev));
    size_t bytes = BN_DIST_MAX_RANKS * sizeof(uint64_t);
    if (bytes < BN_DIST_MAX_VALUES * sizeof(double)) bytes = BN_DIST_MAX_VALUES * sizeof(double);
    return bn_device_alloc(&st->scratch, bytes);
}

static void release_state(bn_dist *d)
{
    comm_state *st = (comm_state *)d->state;
    if (st) {
        if (st->ready) cudaEventDestroy(st->ready);
        if (st->done) cudaEventDestroy(st->done);
        if (st->agreed) cudaEventDestroy(st->agreed);
        for (int i = 0; i < BN_DIST_PACE_STEPS; i++)
            if (st->paced[i]) cudaEventDestroy(st->paced[i]);
        if (st->stop_host) cudaFreeHost(st->stop_host);
        if (st->values_host) cudaFreeHost(st->values_host);
        bn_device_free(st->stop_dev);
        bn_device_free(st->scratch);
        free(st);
    }
    if (d->stream) cudaStreamDestroy((cudaStream_t)d->stream);
    d->state = NULL;
    d->stream = NULL;
}

extern "C" bn_status bn_dist_open(bn_dist *d, const void *id, bn_ctx *ctx)
{
    if (d->world < 1 || d->world > BN_DIST_MAX_RANKS || d->rank < 0 || d->rank >= d->world)
        return bn_error(BN_ERR_USAGE, "rank %d of %d: a rank lies in 0..world-1 and world in 1..%d", d->rank, d->world,
                        BN_DIST_MAX_RANKS);
    if (!ctx) return bn_error(BN_ERR_USAGE, "rank %d: training on several GPUs needs a GPU context", d->rank);
    d->device = ctx->device;
    BN_CUDA(cudaSetDevice(ctx->device));
    if (d->world > 1) BN_TRY(bn_ctx_prioritize(ctx, 1));
    bn_status s = make_state(d);
    if (s != BN_OK) {
        release_state(d);
        return s;
    }
    ncclUniqueId u;
    memcpy(&u, id, sizeof u);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclComm_t comm = NULL;
    ncclResult_t r = ncclCommInitRankConfig(&comm, d->world, u, d->rank, &config);
    d->comm = comm;
    if (r != ncclSuccess && r != ncclInProgress) {
        /* d->comm may be unset: the message cannot ask the communicator for details. */
        s = bn_error(BN_ERR_DEVICE, "rank %d: %s:%d: ncclCommInitRankConfig: %s", d->rank, __FILE__, __LINE__,
                     ncclGetErrorString(r));
        if (d->comm) abort_comm(d);
    } else if (!d->comm) {
        s = bn_error(BN_ERR_DEVICE, "rank %d: %s:%d: ncclCommInitRankConfig returned no communicator", d->rank,
                     __FILE__, __LINE__);
    } else {
        s = settle(d, r, __FILE__, __LINE__, "ncclCommInitRankConfig (joining the other ranks)");
    }
    if (s != BN_OK) release_state(d);
    return s;
}

/* The pre-multiplied sum that scales each contribution by weight, made once per weight. */
static bn_status weighted_sum(bn_dist *d, double weight, ncclRedOp_t *op)
{
    comm_state *st = (comm_state *)d->state;
    for (int i = 0; i < st->num_ops; i++)
        if (st->weights[i] == weight) {
            *op = st->ops[i];
            return BN_OK;
        }
    if (st->num_ops == MAX_WEIGHTS)
        return bn_error(BN_ERR_INTERNAL, "rank %d: more than %d gradient weights in one run", d->rank, MAX_WEIGHTS);
    float scalar = (float)weight;
    BN_NCCL(d, ncclRedOpCreatePreMulSum(&st->ops[st->num_ops], &scalar, ncclFloat32, ncclScalarHostImmediate,
                                        (ncclComm_t)d->comm));
    st->weights[st->num_ops] = weight;
    *op = st->ops[st->num_ops++];
    return BN_OK;
}

/* Makes the communication stream follow what `after` holds now. */
static bn_status fork_comm(bn_dist *d, cudaStream_t after)
{
    comm_state *st = (comm_state *)d->state;
    BN_CUDA(cudaEventRecord(st->ready, after));
    BN_CUDA(cudaStreamWaitEvent((cudaStream_t)d->stream, st->ready, 0));
    return BN_OK;
}

/* Makes `then` follow what the communication stream holds now. */
static bn_status join_comm(bn_dist *d, cudaStream_t then)
{
    comm_state *st = (comm_state *)d->state;
    BN_CUDA(cudaEventRecord(st->done, (cudaStream_t)d->stream));
    BN_CUDA(cudaStreamWaitEvent(then, st->done, 0));
    return BN_OK;
}

/* Makes the communication stream follow what `after` holds now, where `after` takes part in the
 * step being captured (a lane the network has not entered in this capture holds nothing of it). */
static bn_status fork_comm_captured(bn_dist *d, const bn_ctx *ctx, void *after)
{
    if (!after) return BN_OK;
    if (ctx->capturing) {
        cudaStreamCaptureStatus status;
        BN_CUDA(cudaStreamIsCapturing((cudaStream_t)after, &status));
        if (status != cudaStreamCaptureStatusActive) return BN_OK;
    }
    return fork_comm(d, (cudaStream_t)after);
}

/* While a captured backward pass runs the network's branches on lanes (core/net_lanes.c), a
 * bucket's layers may have run on any of them: the sum follows every lane's stream, and the side
 * stream of each lane whose side work is not joined yet. */
static bn_status fork_comm_lanes(bn_dist *d, const bn_ctx *ctx)
{
    for (int k = 0; k < ctx->num_lanes; k++) {
        const bool here = k == ctx->lane_now;
        void *stream = here ? ctx->stream : k ? ctx->lanes[k] : ctx->home;
        void *side = here ? ctx->side_stream : k ? ctx->lane_sides[k] : ctx->home_side;
        const int pending = here ? ctx->side_pending : ctx->lane_pending[k];
        BN_TRY(fork_comm_captured(d, ctx, stream));
        if (pending) BN_TRY(fork_comm_captured(d, ctx, side));
    }
    return BN_OK;
}

/* The sum of count gradients at grads; u (or NULL) the update a pushed sum may apply, *updated
 * (or NULL) set where it did. */
static bn_status allreduce_grads(bn_dist *d, bn_ctx *ctx, float *grads, size_t count, double weight,
                                 const bn_update_args *u, int *updated)
{
    ncclRedOp_t op = ncclSum;
    BN_TRY(weighted_sum(d, weight, &op));
    /* The layer's weight gradients may still be in flight on the side stream and its other work
     * on the stream: the sum follows both, and holds up neither. */
    if (ctx->home) {
        BN_TRY(fork_comm_lanes(d, ctx));
    } else {
        BN_TRY(fork_comm(d, (cudaStream_t)ctx->stream));
        if (ctx->side_stream) BN_TRY(fork_comm(d, (cudaStream_t)ctx->side_stream));
    }
    comm_state *st = (comm_state *)d->state;
    if (bn_peer_sum_covers(st->peers, grads, count))
        return bn_peer_sum_run(st->peers, grads, count, (float)weight, u, updated, (cudaStream_t)d->stream);
    BN_NCCL(d, ncclAllReduce(grads, grads, count, ncclFloat32, op, (ncclComm_t)d->comm, (cudaStream_t)d->stream));
    return BN_OK;
}

/* Every rank's `one` bytes at mine (host), gathered in rank order into all (host, world x one
 * bytes) through dev (device, as many), with the deadline on every wait. */
static bn_status gather_host(bn_dist *d, bn_ctx *ctx, const void *mine, size_t one, void *dev, void *all,
                             const char *what)
{
    cudaStream_t s = (cudaStream_t)ctx->stream;
    char *at = (char *)dev;
    BN_TRY(wait_stream(d, s, what));
    BN_CUDA(cudaMemcpyAsync(at + one * (size_t)d->rank, mine, one, cudaMemcpyHostToDevice, s));
    BN_TRY(fork_comm(d, s));
    BN_NCCL(d, ncclAllGather(at + one * (size_t)d->rank, at, one, ncclChar, (ncclComm_t)d->comm,
                             (cudaStream_t)d->stream));
    BN_TRY(join_comm(d, s));
    /* A copy into pageable memory waits for the stream without a deadline: wait with one first. */
    BN_TRY(wait_stream(d, s, what));
    BN_CUDA(cudaMemcpyAsync(all, dev, one * (size_t)d->world, cudaMemcpyDeviceToHost, s));
    return wait_stream(d, s, what);
}

/* Every rank's info, gathered into all[0..world). */
static bn_status gather_infos(bn_dist *d, bn_ctx *ctx, const bn_peer_info *mine, bn_peer_info *all)
{
    void *dev = NULL;
    BN_TRY(bn_device_alloc(&dev, sizeof *mine * (size_t)d->world));
    bn_status r = gather_host(d, ctx, mine, sizeof *mine, dev, all, "gathering the peers' memory handles");
    bn_device_free(dev);
    return r;
}

extern "C" bn_status bn_dist_attach_grads(bn_dist *d, bn_ctx *ctx, float *slab, size_t count)
{
    BN_NEED_OPEN(d);
    comm_state *st = (comm_state *)d->state;
    if (st->peers) {
        BN_TRY(wait_stream(d, (cudaStream_t)ctx->stream, "setting up the gradient sum"));
        BN_TRY(wait_stream(d, (cudaStream_t)d->stream, "setting up the gradient sum"));
        bn_peer_sum_close(st->peers, 0);
        st->peers = NULL;
    }
    d->peer_sum = 0;
    if (d->world < 2 || !slab || !count) return BN_OK;
    /* Every rank takes part in the gathering and the agreement, whatever it can do itself. */
    bn_peer_info mine, *all = (bn_peer_info *)calloc((size_t)d->world, sizeof *all);
    if (!all) return bn_error(BN_ERR_NOMEM, "rank %d: out of host memory for the peers' info", d->rank);
    bn_peer_sum *ps = NULL;
    const char *why = NULL;
    char reason[256] = "";
    bn_status s = BN_OK;
    if (d->sum_way == BN_DIST_SUM_NCCL) {
        memset(&mine, 0, sizeof mine);
        why = "BLOBNET_DIST_SUM=nccl";
    } else if (bn_peer_sum_local(&ps, d->rank, d->world, d->device, slab, count, d->push_bytes, d->timeout_s, &mine,
                                  &why) != BN_OK) {
        snprintf(reason, sizeof reason, "%s", bn_last_error());
        mine.ok = 0;
    }
    if (why) snprintf(reason, sizeof reason, "%s", why);
    s = gather_infos(d, ctx, &mine, all);
    int bad = 0;
    if (s == BN_OK) {
        for (int q = 0; q < d->world && !reason[0]; q++)
            if (!all[q].ok) snprintf(reason, sizeof reason, "rank %d cannot take part", q);
        if (!reason[0] && bn_peer_sum_connect(ps, all) != BN_OK) snprintf(reason, sizeof reason, "%s", bn_last_error());
        /* A refused IPC call leaves CUDA's last error set, which a later launch check would take
         * for its own. */
        if (reason[0]) cudaGetLastError();
        s = bn_dist_max(d, ctx, reason[0] ? 1 : 0, &bad);
    }
    free(all);
    if (s == BN_OK && !bad) {
        st->peers = ps;
        d->peer_sum = 1;
        return BN_OK;
    }
    bn_peer_sum_close(ps, 0);
    BN_TRY(s);
    if (d->sum_way == BN_DIST_SUM_PEERS)
        return bn_error(BN_ERR_USAGE, "rank %d: BLOBNET_DIST_SUM=peers: the gradients cannot be summed through the "
                        "peers' memory (%s)", d->rank, reason[0] ? reason : "another rank cannot take part");
    return BN_OK;
}

extern "C" bn_status bn_dist_allreduce_grads(bn_dist *d, bn_ctx *ctx, float *grads, size_t count, double weight)
{
    BN_NEED_OPEN(d);
    bn_nvtx_push("allreduce", BN_NVTX_COMM);
    bn_status s = allreduce_grads(d, ctx, grads, count, weight, NULL, NULL);
    bn_nvtx_pop();
    return s;
}

extern "C" bn_status bn_dist_allreduce_update(bn_dist *d, bn_ctx *ctx, float *grads, size_t count, double weight,
                                              const bn_update_args *u, int *updated)
{
    *updated = 0;
    BN_NEED_OPEN(d);
    bn_nvtx_push("allreduce", BN_NVTX_COMM);
    bn_status s = allreduce_grads(d, ctx, grads, count, weight, d->update_apart ? NULL : u, updated);
    bn_nvtx_pop();
    return s;
}

extern "C" bn_status bn_dist_join_comm(bn_dist *d, bn_ctx *ctx)
{
    BN_NEED_OPEN(d);
    return join_comm(d, (cudaStream_t)ctx->stream);
}

extern "C" bn_status bn_dist_wait(bn_dist *d, bn_ctx *ctx)
{
    BN_NEED_OPEN(d);
    return wait_stream(d, (cudaStream_t)ctx->stream, "waiting for the step's collectives");
}

extern "C" bn_status bn_dist_pace(bn_dist *d, bn_ctx *ctx)
{
    BN_NEED_OPEN(d);
    comm_state *st = (comm_state *)d->state;
    cudaEvent_t *slot = &st->paced[st->pace_next];
    /* The slot's event marks the step BN_DIST_PACE_STEPS back: wait for it before it is recorded
     * again. */
    if (st->pace_used == BN_DIST_PACE_STEPS)
        BN_TRY(wait_for(d, (cudaStream_t)ctx->stream, *slot, "pacing the steps"));
    BN_CUDA(cudaEventRecord(*slot, (cudaStream_t)ctx->stream));
    st->pace_next = (st->pace_next + 1) % BN_DIST_PACE_STEPS;
    if (st->pace_used < BN_DIST_PACE_STEPS) st->pace_used++;
    return BN_OK;
}

/* An in-place all-reduce of device data ordered on ctx's stream, waited for with the deadline. */
static bn_status allreduce_on_stream(bn_dist *d, bn_ctx *ctx, void *data, size_t count, ncclDataType_t type,
                                     ncclRedOp_t op, const char *what)
{
    cudaStream_t s = (cudaStream_t)ctx->stream;
    BN_TRY(fork_comm(d, s));
    BN_NCCL(d, ncclAllReduce(data, data, count, type, op, (ncclComm_t)d->comm, (cudaStream_t)d->stream));
    BN_TRY(join_comm(d, s));
    return wait_stream(d, s, what);
}

extern "C" bn_status bn_dist_average(bn_dist *d, bn_ctx *ctx, float *data, size_t count)
{
    BN_NEED_OPEN(d);
    if (!count) return BN_OK;
    return allreduce_on_stream(d, ctx, data, count, ncclFloat32, ncclAvg, "averaging the buffers");
}

extern "C" bn_status bn_dist_sum(bn_dist *d, bn_ctx *ctx, double *values, int n)
{
    BN_NEED_OPEN(d);
    if (n < 1 || n > BN_DIST_MAX_VALUES)
        return bn_error(BN_ERR_INTERNAL, "rank %d: summing %d values (1..%d)", d->rank, n, BN_DIST_MAX_VALUES);
    comm_state *st = (comm_state *)d->state;
    cudaStream_t s = (cudaStream_t)ctx->stream;
    size_t bytes = (size_t)n * sizeof *values;
    /* Through pinned memory, so that nothing waits before the sum's one wait; the last sum's
     * copy out of values_host was waited for. */
    memcpy(st->values_host, values, bytes);
    BN_CUDA(cudaMemcpyAsync(st->scratch, st->values_host, bytes, cudaMemcpyHostToDevice, s));
    BN_TRY(fork_comm(d, s));
    BN_NCCL(d, ncclAllReduce(st->scratch, st->scratch, (size_t)n, ncclFloat64, ncclSum, (ncclComm_t)d->comm,
                             (cudaStream_t)d->stream));
    BN_TRY(join_comm(d, s));
    BN_CUDA(cudaMemcpyAsync(st->values_host, st->scratch, bytes, cudaMemcpyDeviceToHost, s));
    BN_TRY(wait_stream(d, s, "summing the metrics"));
    memcpy(values, st->values_host, bytes);
    return BN_OK;
}

extern "C" bn_status bn_dist_max_begin(bn_dist *d, bn_ctx *ctx, int value)
{
    BN_NEED_OPEN(d);
    comm_state *st = (comm_state *)d->state;
    if (st->stop_pending)
        return bn_error(BN_ERR_INTERNAL, "rank %d: a stop agreement was begun before the last one ended", d->rank);
    cudaStream_t s = (cudaStream_t)ctx->stream;
    /* The last agreement has ended, so no copy still reads stop_host[0]. */
    st->stop_host[0] = value;
    BN_CUDA(cudaMemcpyAsync(st->stop_dev, st->stop_host, sizeof *st->stop_dev, cudaMemcpyHostToDevice, s));
    BN_TRY(fork_comm(d, s));
    BN_NCCL(d, ncclAllReduce(st->stop_dev, st->stop_dev, 1, ncclInt32, ncclMax, (ncclComm_t)d->comm,
                             (cudaStream_t)d->stream));
    BN_TRY(join_comm(d, s));
    BN_CUDA(cudaMemcpyAsync(st->stop_host + 1, st->stop_dev, sizeof *st->stop_dev, cudaMemcpyDeviceToHost, s));
    BN_CUDA(cudaEventRecord(st->agreed, s));
    st->stop_pending = 1;
    return BN_OK;
}

extern "C" bn_status bn_dist_max_end(bn_dist *d, bn_ctx *ctx, int *max)
{
    BN_NEED_OPEN(d);
    comm_state *st = (comm_state *)d->state;
    *max = 0;
    if (!st->stop_pending) return BN_OK;
    BN_TRY(wait_for(d, (cudaStream_t)ctx->stream, st->agreed, "agreeing on a stop"));
    st->stop_pending = 0;
    *max = st->stop_host[1];
    return BN_OK;
}

extern "C" bn_status bn_dist_max(bn_dist *d, bn_ctx *ctx, int value, int *max)
{
    BN_NEED_OPEN(d);
    int earlier = 0;
    BN_TRY(bn_dist_max_end(d, ctx, &earlier));
    /* The queued agreement's path (pinned memory, one wait at its end), read at once. */
    BN_TRY(bn_dist_max_begin(d, ctx, value));
    int most = 0;
    BN_TRY(bn_dist_max_end(d, ctx, &most));
    *max = most > earlier ? most : earlier;
    return BN_OK;
}

extern "C" bn_status bn_dist_check_same(bn_dist *d, bn_ctx *ctx, uint64_t hash, long step)
{
    BN_NEED_OPEN(d);
    comm_state *st = (comm_state *)d->state;
    uint64_t hashes[BN_DIST_MAX_RANKS];
    BN_TRY(gather_host(d, ctx, &hash, sizeof hash, st->scratch, hashes, "comparing the parameters"));
    char ranks[256] = "";
    size_t used = 0;
    int first = 0;
    for (int r = 1; r < d->world && used < sizeof ranks - 16; r++)
        if (hashes[r] != hashes[0]) {
            if (!first) first = r;
            used += (size_t)snprintf(ranks + used, sizeof ranks - used, " %d", r);
        }
    if (!first) return BN_OK;
    return bn_error(BN_ERR_INTERNAL, "rank %d: after step %ld the parameters of rank(s)%s differ from rank 0's "
                    "(rank %d's hash %016llx, rank 0's %016llx): the ranks no longer train the same model", d->rank,
                    step, ranks, first, (unsigned long long)hashes[first], (unsigned long long)hashes[0]);
}

extern "C" int bn_dist_failed(const bn_dist *d)
{
    return d && d->failed;
}

extern "C" void bn_dist_close(bn_dist *d, int aborting)
{
    if (!d) return;
    comm_state *st = (comm_state *)d->state;
    if (d->comm && !aborting && !d->failed) {
        ncclComm_t comm = (ncclComm_t)d->comm;
        for (int i = 0; st && i < st->num_ops; i++)
            if (settle(d, ncclRedOpDestroy(st->ops[i], comm), __FILE__, __LINE__, "ncclRedOpDestroy") != BN_OK) break;
        /* Finalize waits for the other ranks' last operations; a failed or late one aborts. */
        if (d->comm && settle(d, ncclCommFinalize(comm), __FILE__, __LINE__, "ncclCommFinalize") == BN_OK)
            ncclCommDestroy(comm);
        d->comm = NULL;
    }
    abort_comm(d);
    if (st) bn_peer_sum_close(st->peers, aborting || d->failed);
    if (st) st->peers = NULL;
    release_state(d);
}
