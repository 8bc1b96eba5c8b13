/* peer_sum.h - the gradient slab summed across the ranks of one machine through each other's
 * memory (CUDA IPC over NVLink or PCIe), in place of NCCL's ring, for comm.cu.
 *
 * NCCL's ring takes 2(N-1) steps, each a hand-over between two GPUs, so a sum of a few MB (a
 * small model's whole gradient) costs its latency many times over. Here every rank maps every
 * other rank's slab once, and one kernel sums a bucket: its blocks meet their peers (a start flag
 * each way), rank r sums the r-th share of the bucket over all ranks, in rank order, and writes
 * the sum into every rank's slab, then the blocks meet again (an end flag each way) so that no
 * rank reads or overwrites a slab before every peer is done with it. Each element is summed by one
 * rank and copied to all, so the ranks hold the same bits; the order (rank 0 first) is fixed, so
 * runs repeat.
 *
 * A small bucket is pushed instead: every rank writes its whole bucket into a landing area in every
 * peer's memory, in 16-byte lines of two floats each beside the sum's tag, and each rank adds the
 * ranks' copies from its own memory as their lines arrive, in the same order and so to the same
 * bits: no meeting and no fence, a float and its tag landing together. A rank sends N-1 copies of
 * the bucket, each twice its size with the tags, where the two meetings send about twice its size
 * in all; a small bucket's sum is all latency, which is what pushing saves. A bucket is pushed
 * where its N-1 copies come to at most BLOBNET_DIST_PUSH bytes (bn_dist.push_bytes), the tags not
 * counted.
 *
 * A rank whose peer never arrives stops waiting at the deadline (the flags are read against the
 * GPU's clock) and raises a flag in host memory that comm.cu's waits read; the sum is then
 * unfinished and the run ends with an error naming the stall. */
#ifndef BN_PEER_SUM_H
#define BN_PEER_SUM_H

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#include "core/optimizers/update_args.h"
#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The most ranks the peer path serves (a machine's GPUs); larger groups use NCCL. */
#define BN_PEER_MAX 8

/* What a rank tells the others, through one all-gather. */
typedef struct bn_peer_info {
    cudaIpcMemHandle_t slab, flags; /* its gradient slab and its flag words */
    cudaIpcMemHandle_t stage;       /* its landing area for pushed buckets (where push > 0) */
    uint64_t push;                  /* floats a pushed bucket may hold on its side; 0: it pushes none */
    char bus[32];                   /* its GPU's PCI bus id */
    uint64_t host;                  /* its machine: a hash of the host name, boot id and NCCL_HOSTID */
    int32_t ok;                     /* 1: it can take part (its reason otherwise in its own error) */
    int32_t pad;
} bn_peer_info;

typedef struct bn_peer_sum bn_peer_sum;

/* This rank's part: the flag words (zeroed) and the handles of the slab (count floats at slab,
 * the start of a cudaMalloc allocation), of the flags and of a landing area for buckets of up to
 * push_bytes (0: none), in *mine. mine->ok is 0 with *why saying why where this rank cannot take
 * part (the environment asks for NCCL, NCCL's peer transport is switched off, a group larger than
 * BN_PEER_MAX). */
bn_status bn_peer_sum_local(bn_peer_sum **out, int rank, int world, int device, float *slab, size_t count,
                            size_t push_bytes, double timeout_s, bn_peer_info *mine, const char **why);

/* With every rank's info: checks that all can take part, on one machine, with each GPU able to
 * reach the others' memory, and maps the peers' slabs and flags. An error (with the reason) when
 * they cannot; the caller agrees with the other ranks before using it. */
bn_status bn_peer_sum_connect(bn_peer_sum *ps, const bn_peer_info *all);

/* Sums count floats at grads (inside this rank's slab) across the ranks, in place, each rank's
 * scaled by its weight, on stream s. Every rank queues the same sums in the same order. Where the
 * bucket is pushed and u (or NULL) is given, the kernel also applies update u, which must cover
 * the same elements, to each sum as it makes it, and sets *updated; u's weights and state are read
 * while the peers' lines are awaited. */
bn_status bn_peer_sum_run(bn_peer_sum *ps, float *grads, size_t count, float weight, const bn_update_args *u,
                          int *updated, cudaStream_t s);

/* Whether a sum stopped waiting for a peer at the deadline. */
int bn_peer_sum_stalled(const bn_peer_sum *ps);

/* Whether ptr .. ptr + count lies in the slab. */
int bn_peer_sum_covers(const bn_peer_sum *ps, const float *ptr, size_t count);

/* Unmaps and frees; after a failure (aborting) the peers' mappings are left to the process's end,
 * as a kernel may still read them. NULL is fine. */
void bn_peer_sum_close(bn_peer_sum *ps, int aborting);

#ifdef __cplusplus
}
#endif
#endif
