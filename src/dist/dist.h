/* dist.h - data-parallel training over several GPUs: one process per GPU ("rank"), the
 * gradients summed by NCCL during every step's backward pass.
 *
 * The pieces, each in its own file:
 *   shares.c      which examples of each global batch a rank trains.
 *   rendezvous.c  ranks find each other: rank 0 listens on HOST:PORT, every other rank connects
 *                 and receives NCCL's unique id; all ranks prove they run the same training
 *                 (a fingerprint) before any of them touches NCCL.
 *   launch.c      `blobnet train --gpus N` on one machine: starts N rank processes of this
 *                 program and keeps them together (supervise.h: signals passed on, the others
 *                 stopped when one dies).
 *   join.c        what a rank does before it trains: the rendezvous, then the communicator.
 *   comm.cu       the NCCL communicator of one rank and the collectives the trainer needs
 *                 (comm_none.c stands in for it in a build without NCCL or without CUDA).
 *
 * A build without nccl.h has bn_dist_compiled() == 0 and every entry point of comm returns an
 * error that says so; asking such a build for several GPUs is that one-line error. */
#ifndef BN_DIST_H
#define BN_DIST_H

#include <stddef.h>
#include <stdint.h>

#include "core/device.h"
#include "core/optimizers/update_args.h"
#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define BN_DIST_ID_BYTES 128   /* sizeof(ncclUniqueId) */
#define BN_DIST_MAX_RANKS 64
#define BN_DIST_BUCKET_BYTES (512u << 10) /* 512 KiB: the fastest of 0 (one all-reduce per layer),
                                             512 KiB, 2 and 8 MiB for LeNet, resnet_fashion and
                                             vgg_fashion on 2 H200s (docs/multi-gpu.md) */

#define BN_DIST_PUSH_BYTES (1u << 20)    /* 1 MiB a rank pushes a sum: buckets of up to 1 MiB on two
                                            GPUs, 341 KiB on four (docs/multi-gpu.md, version 62) */

/* One rank's view of the group. Owned by whoever called bn_dist_join (bn_dist_close). */
typedef struct bn_dist {
    int rank, world;           /* this process's rank, and how many ranks train together */
    int device;                /* the CUDA ordinal this rank uses */
    double timeout_s;          /* a collective or a rendezvous that makes no progress for this long
                                  ends the run with an error naming the ranks (never a hang) */
    size_t bucket_bytes;       /* the trainer sums gradients in all-reduces of at least this many
                                  bytes (whole layers, in the backward pass's order; 0: one per
                                  layer): BN_DIST_BUCKET_BYTES unless $BLOBNET_DIST_BUCKET says */
    int schedule;              /* when the buckets' all-reduces run: BN_SCHEDULE_TIMED (0), _BESIDE or
                                  _AFTER (train/dist_schedule.h), as $BLOBNET_DIST_SCHEDULE says */
    size_t push_bytes;         /* summed through the peers' memory, a bucket is pushed (dist/peer_sum.h)
                                  where its copies to the world - 1 peers come to at most this many
                                  bytes (0: none): BN_DIST_PUSH_BYTES unless $BLOBNET_DIST_PUSH says */
    int update_apart;          /* 1: a pushed bucket's update is left to its own launch after the sum
                                  (bn_dist_allreduce_update), as $BLOBNET_DIST_PUSH_UPDATE=0 asks */
    int sum_way;               /* how the gradients are summed: BN_DIST_SUM_AUTO (0), _PEERS or _NCCL, as
                                  $BLOBNET_DIST_SUM says (bn_dist_sum_parse) */
    int peer_sum;              /* set by bn_dist_attach_grads: 1 when the gradient slab is summed
                                  through the peers' memory (dist/peer_sum.h), 0 by NCCL */
    void *comm;                /* ncclComm_t */
    int failed;                /* a collective failed or passed the deadline (bn_dist_failed) */
    void *stream;              /* the communication stream (cudaStream_t), created by comm */
    void *state;               /* comm.cu's own: events, scratch, the reduction op */
} bn_dist;

/* 1 when this build can train on several GPUs (CUDA and NCCL were both found at build time). */
int bn_dist_compiled(void);

/* Why it cannot, when bn_dist_compiled() is 0: e.g. "this blobnet was built without NCCL
 * (nccl.h was not found at build time)". */
const char *bn_dist_missing(void);

/* ---- shares.c ---- */

/* Rank `rank`'s share of a global batch of n examples split among world ranks: positions
 * [*offset, *offset + *count) of the batch, offset = rank * n / world, so the shares are
 * contiguous, cover the batch in rank order and differ in size by at most one (empty when
 * n < world). */
void bn_dist_share(int n, int world, int rank, int *offset, int *count);

/* ---- rendezvous.c ---- */

/* Parses "HOST:PORT" (HOST a name or an IPv4 address, PORT 1-65535). */
bn_status bn_rendezvous_parse(const char *text, char *host, size_t host_len, int *port);

/* Meets the other ranks at host:port. Rank 0 listens there, takes world-1 connections, checks
 * that each names a distinct rank in 1..world-1, the same world and a fingerprint equal to its
 * own, then sends every rank the `id` bytes (rank 0's input). Every other rank connects
 * (retrying until timeout_s) and receives `id`. A mismatch is a usage error on every rank that
 * names both values; a rank that never comes is an error naming it after timeout_s. */
bn_status bn_rendezvous(const char *host, int port, int rank, int world, uint64_t fingerprint,
                        void *id, size_t id_len, double timeout_s);

/* ---- launch.c ---- */

/* Runs this program once per device: rank r gets `argv` (without argv[0]) followed by
 * "--rank r --world n --rendezvous 127.0.0.1:PORT --device gpu:devices[r]", with a free port.
 * Forwards SIGINT, SIGTERM and SIGHUP to every rank; when a rank ends with an error or a signal,
 * the others are sent SIGTERM (SIGKILL after a grace period) and the status names that rank,
 * its device and how it ended. *exit_code receives the code the CLI should exit with. */
bn_status bn_launch_ranks(int argc, char **argv, int n, const int *devices, int *exit_code);

/* ---- join.c ---- */

/* The rendezvous, then bn_dist_open: what a rank process does before it trains. */
bn_status bn_dist_join(bn_dist *d, const char *host, int port, uint64_t fingerprint, bn_ctx *ctx);

/* ---- comm.cu / comm_none.c ---- */

/* Makes a fresh NCCL unique id on rank 0 (id_len >= BN_DIST_ID_BYTES). */
bn_status bn_dist_unique_id(void *id, size_t id_len);

/* Joins the group as d->rank of d->world on ctx's device, from the id every rank received. */
bn_status bn_dist_open(bn_dist *d, const void *id, bn_ctx *ctx);


/* How the gradient slab is summed. AUTO: through the peers' memory where every rank is on one
 * machine and each GPU can reach the others' memory (and NCCL's peer transport is not switched off
 * by NCCL_P2P_DISABLE), else by NCCL; PEERS: that way or an error saying why not; NCCL: NCCL's
 * all-reduce always. */
enum { BN_DIST_SUM_AUTO, BN_DIST_SUM_PEERS, BN_DIST_SUM_NCCL };

/* Reads BLOBNET_DIST_SUM's value (NULL or empty: auto; "auto", "peers" or "nccl") into *way. */
bn_status bn_dist_sum_parse(const char *text, int *way);

/* Makes the gradient slab (count floats at slab, device memory of its own allocation) the one
 * bn_dist_allreduce_grads sums through the peers' memory, where d->sum_way and the machine allow:
 * a collective that every rank calls with its own slab of the same size before the first step;
 * d->peer_sum says whether it took. Called again with another slab, it sets that one up instead. */
bn_status bn_dist_attach_grads(bn_dist *d, bn_ctx *ctx, float *slab, size_t count);

/* Sums `count` gradients at grads (device) across ranks, in place, each rank's scaled by its
 * weight (its share n_r / n of the global batch, so the sum is the global mean): queued on the
 * communication stream d->stream after everything queued so far on ctx's stream and side stream,
 * so the backward pass goes on beside it; what reads the sum is queued on d->stream too, and
 * bn_dist_join_comm orders ctx's stream after all of it. Capturable in a CUDA graph. NVTX range
 * "allreduce". */
bn_status bn_dist_allreduce_grads(bn_dist *d, bn_ctx *ctx, float *grads, size_t count, double weight);

/* bn_dist_allreduce_grads, and the update u of the same elements (bn_optimizer_update_args) where
 * the sum can apply it to each sum as it makes it: a bucket pushed through the peers' memory
 * (unless d->update_apart), whose kernel reads the weights and state while it waits for
 * the peers' lines, so that no update launch follows it on the step's tail. *updated says whether
 * it did; where not, the caller queues the update after the sum as before. */
bn_status bn_dist_allreduce_update(bn_dist *d, bn_ctx *ctx, float *grads, size_t count, double weight,
                                   const bn_update_args *u, int *updated);

/* Makes ctx's stream wait for everything queued so far on the communication stream (the end of a
 * step's all-reduces and updates; in a graph capture, the join the capture needs). */
bn_status bn_dist_join_comm(bn_dist *d, bn_ctx *ctx);

/* Replaces `count` floats at data (device) by their mean across ranks, ordered on ctx's
 * stream, and waits for it (the buffer slab before an evaluation or a checkpoint). */
bn_status bn_dist_average(bn_dist *d, bn_ctx *ctx, float *data, size_t count);

/* Replaces values[0..n) (host, n <= BN_DIST_MAX_VALUES) by their sums across ranks. */
#define BN_DIST_MAX_VALUES 16
bn_status bn_dist_sum(bn_dist *d, bn_ctx *ctx, double *values, int n);

/* *max = the largest of every rank's value (values >= 0): a stop asked for anywhere, and by
 * which signal, so that every rank ends with the same code. Waits for the device to finish what
 * is queued. An agreement begun with bn_dist_max_begin and not ended is ended first, and its
 * result counts in *max. */
bn_status bn_dist_max(bn_dist *d, bn_ctx *ctx, int value, int *max);

/* The same agreement without the host wait: queues it on ctx's stream behind what is queued so
 * far and returns at once. One at a time: bn_dist_max_end (or bn_dist_max) ends it. Every rank
 * must begin and end its agreements at the same points, as with every collective. */
bn_status bn_dist_max_begin(bn_dist *d, bn_ctx *ctx, int value);

/* Waits, with the deadline, for the agreement bn_dist_max_begin queued (only for the device to
 * reach it, not to finish what was queued after it) and puts its result in *max; 0 when none
 * was begun. */
bn_status bn_dist_max_end(bn_dist *d, bn_ctx *ctx, int *max);

/* Compares every rank's hash of its parameters; a difference is an error naming the ranks
 * whose hashes differ from rank 0's and `step`. */
bn_status bn_dist_check_same(bn_dist *d, bn_ctx *ctx, uint64_t hash, long step);

/* Waits until ctx's stream has done everything queued on it, polling it and NCCL's error state;
 * past d->timeout_s without progress, aborts the communicator and says so, naming this rank. */
bn_status bn_dist_wait(bn_dist *d, bn_ctx *ctx);

/* The steps a rank's host may queue ahead of its device (bn_dist_pace). */
#define BN_DIST_PACE_STEPS 3

/* Called after each training step is queued: waits, with the deadline, until the device has done
 * the step BN_DIST_PACE_STEPS back. A host that queued steps without bound while a lost peer held
 * the device's collectives would fill the device's queue, and the next launch would then block
 * with no deadline (seen: four ranks of a residual network on NCCL's socket path, two of them
 * still waiting 50 s after a third was killed); with a few steps queued the device never idles. */
bn_status bn_dist_pace(bn_dist *d, bn_ctx *ctx);

/* Whether a collective of d failed or passed its deadline (the communicator is then aborted and
 * every later call on d refused). NCCL's abort can itself wait on a lost peer: it is given 10 s
 * on a thread of its own and then left running there, so the call that failed returns in bounded
 * time. Work queued on the device behind the collective may still never end if the abort did not
 * end it, so waiting on the device or freeing device memory may block: a process
 * that ends because of it should report first and end without them, leaving the driver to
 * reclaim the device. */
int bn_dist_failed(const bn_dist *d);

/* Leaves the group; after an error anywhere (or once d failed), aborts the communicator instead
 * of waiting on the other ranks. NULL or an unopened d is fine. */
void bn_dist_close(bn_dist *d, int aborting);

#ifdef __cplusplus
}
#endif
#endif
