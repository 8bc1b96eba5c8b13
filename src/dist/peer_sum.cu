/* peer_sum.cu - the gradient sum through the peers' memory (see peer_sum.h).
 *
 * Flag words, in every rank's own buffer, for block b of the sum kernel and rank q: START and END
 * (the generation q's block b has reached) and WEIGHT (q's scale for this sum, as float bits),
 * written by rank q into each rank's buffer. The generation is each block's count of sums, kept
 * in device memory so that a replayed graph counts on; every rank launches the same sums with the
 * same blocks, so their counts agree. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/hash.h"
#include "gpu/cuda_check.h"
#include "gpu/pdl.cuh"
#include "peer_sum.h"

/* Blocks of a sum at most, and its threads a block. */
#define PS_BLOCKS 32
#define PS_THREADS 512
/* float4 pieces of a rank's share per block, about (fewer blocks for small buckets). */
#define PS_PIECES_PER_BLOCK 2048
enum { START, END, WEIGHT, KINDS };
#define FLAG_WORDS (KINDS * PS_BLOCKS * BN_PEER_MAX)

struct bn_peer_sum {
    int rank, world, device;
    float *slab;                      /* this rank's */
    size_t count;
    unsigned *flags;                  /* this rank's flag words (device) */
    unsigned *gens;                   /* this rank's generations, one a block (device) */
    int *stalled;                     /* pinned host memory the kernel can write: 1 after a stall */
    int *stalled_dev;                 /* its device address */
    long long timeout_ns;
    float *peer_slab[BN_PEER_MAX];    /* every rank's slab (this rank's own at [rank]) */
    unsigned *peer_flags[BN_PEER_MAX];
    int mapped;                       /* the peers' memory is mapped */
};

typedef struct sum_args {
    float *buf[BN_PEER_MAX];          /* every rank's copy of the bucket */
    unsigned *flags[BN_PEER_MAX];     /* every rank's flag words */
    unsigned *gens;
    int *stalled;
    long long timeout_ns;
    size_t count;
    float weight;
    int rank, world, vec;
} sum_args;

static __device__ __forceinline__ size_t flag_at(int kind, int block, int rank)
{
    return ((size_t)kind * PS_BLOCKS + block) * BN_PEER_MAX + rank;
}

static __device__ __forceinline__ long long gpu_clock_ns()
{
    long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

static __device__ __forceinline__ unsigned load_acquire(const unsigned *p)
{
    unsigned v;
    asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

static __device__ __forceinline__ void store_release(unsigned *p, unsigned v)
{
    asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

static __device__ __forceinline__ void store_relaxed(unsigned *p, unsigned v)
{
    asm volatile("st.relaxed.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

/* Thread q (< world) of the block: marks `kind` at gen in rank q's words, then waits for rank q's
 * mark in this rank's. False after a stall (the deadline passed; the flag in host memory set). */
static __device__ bool meet(const sum_args &a, int kind, unsigned gen, long long deadline)
{
    const int q = threadIdx.x, b = blockIdx.x;
    if (kind == START) store_relaxed(a.flags[q] + flag_at(WEIGHT, b, a.rank), __float_as_uint(a.weight));
    store_release(a.flags[q] + flag_at(kind, b, a.rank), gen);
    const unsigned *mark = a.flags[a.rank] + flag_at(kind, b, q);
    while ((int)(load_acquire(mark) - gen) < 0) {
        __nanosleep(64);
        if (gpu_clock_ns() > deadline) {
            *(volatile int *)a.stalled = 1;
            return false;
        }
    }
    return true;
}

static __global__ void __launch_bounds__(PS_THREADS) peer_sum_kernel(sum_args a)
{
    bn_early_entry(); /* pdl.cuh */
    __shared__ float w[BN_PEER_MAX];
    __shared__ int ok;
    const int b = blockIdx.x;
    const unsigned gen = a.gens[b] + 1;
    const long long deadline = gpu_clock_ns() + a.timeout_ns;
    if (threadIdx.x == 0) ok = 1;
    __syncthreads();
    if (threadIdx.x < a.world) {
        if (!meet(a, START, gen, deadline)) ok = 0;
        else w[threadIdx.x] = __uint_as_float(load_acquire(a.flags[a.rank] + flag_at(WEIGHT, b, threadIdx.x)));
    }
    __syncthreads();
    if (!ok) return;
    /* This rank's share of the bucket, in float4 pieces (or floats), and this block's part of it. */
    const size_t unit = a.vec ? 4 : 1, pieces = a.count / unit;
    const size_t lo = pieces * a.rank / a.world, hi = pieces * (a.rank + 1) / a.world;
    const size_t from = lo + (hi - lo) * b / gridDim.x, to = lo + (hi - lo) * (b + 1) / gridDim.x;
    float wq[BN_PEER_MAX];
#pragma unroll
    for (int q = 0; q < BN_PEER_MAX; q++) wq[q] = q < a.world ? w[q] : 0.0f;
    if (a.vec) {
        for (size_t i = from + threadIdx.x; i < to; i += blockDim.x) {
            float4 x[BN_PEER_MAX];
#pragma unroll
            for (int q = 0; q < BN_PEER_MAX; q++)
                if (q < a.world) x[q] = ((const float4 *)a.buf[q])[i];
            float4 s = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
            for (int q = 0; q < BN_PEER_MAX; q++)
                if (q < a.world) {
                    s.x = fmaf(wq[q], x[q].x, s.x);
                    s.y = fmaf(wq[q], x[q].y, s.y);
                    s.z = fmaf(wq[q], x[q].z, s.z);
                    s.w = fmaf(wq[q], x[q].w, s.w);
                }
#pragma unroll
            for (int q = 0; q < BN_PEER_MAX; q++)
                if (q < a.world) ((float4 *)a.buf[q])[i] = s;
        }
    }
    /* The floats past the last whole piece (all of them without pieces) go to the last rank's
     * last block, one a thread. */
    const size_t tail0 = a.vec ? pieces * 4 : from, tail1 = a.vec ? a.count : to;
    const bool mine = !a.vec || (a.rank == a.world - 1 && b == (int)gridDim.x - 1);
    if (mine)
        for (size_t i = tail0 + threadIdx.x; i < tail1; i += blockDim.x) {
            float x[BN_PEER_MAX];
#pragma unroll
            for (int q = 0; q < BN_PEER_MAX; q++)
                if (q < a.world) x[q] = a.buf[q][i];
            float s = 0.0f;
#pragma unroll
            for (int q = 0; q < BN_PEER_MAX; q++)
                if (q < a.world) s = fmaf(wq[q], x[q], s);
#pragma unroll
            for (int q = 0; q < BN_PEER_MAX; q++)
                if (q < a.world) a.buf[q][i] = s;
        }
    /* Every thread's writes to the peers are visible before this block says it is done. */
    __threadfence_system();
    __syncthreads();
    /* A stall here leaves nothing to skip: meet has raised the flag the host reads. */
    if (threadIdx.x < a.world) meet(a, END, gen, deadline);
    __syncthreads();
    if (threadIdx.x == 0) a.gens[b] = gen;
}

/* A hash of this machine: its host name, its boot id and NCCL_HOSTID (which a simulation of
 * several machines on one sets per "machine"). */
static uint64_t host_hash(void)
{
    char name[256] = "", boot[64] = "";
    if (gethostname(name, sizeof name) != 0) name[0] = '\0';
    name[sizeof name - 1] = '\0';
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (f) {
        if (!fgets(boot, (int)sizeof boot, f)) boot[0] = '\0';
        fclose(f);
    }
    uint64_t h = bn_fnv1a_text(bn_fnv1a_text(BN_FNV1A_START, name), boot);
    const char *id = getenv("NCCL_HOSTID");
    return id ? bn_fnv1a_text(bn_fnv1a_text(h, "|"), id) : h;
}

extern "C" bn_status bn_peer_sum_local(bn_peer_sum **out, int rank, int world, int device, float *slab,
                                       size_t count, double timeout_s, bn_peer_info *mine, const char **why)
{
    *out = NULL;
    memset(mine, 0, sizeof *mine);
    *why = NULL;
    const char *p2p = getenv("NCCL_P2P_DISABLE");
    if (world > BN_PEER_MAX) *why = "more ranks than the peer path serves";
    else if (p2p && *p2p && strcmp(p2p, "0") != 0) *why = "NCCL_P2P_DISABLE is set";
    mine->host = host_hash();
    BN_CUDA(cudaDeviceGetPCIBusId(mine->bus, (int)sizeof mine->bus, device));
    if (*why) return BN_OK;
    bn_peer_sum *ps = (bn_peer_sum *)calloc(1, sizeof *ps);
    if (!ps) return bn_error(BN_ERR_NOMEM, "rank %d: out of host memory for the peer sum", rank);
    ps->rank = rank, ps->world = world, ps->device = device, ps->slab = slab, ps->count = count;
    ps->timeout_ns = (long long)(timeout_s * 1e9);
    *out = ps;
    BN_CUDA(cudaMalloc((void **)&ps->flags, FLAG_WORDS * sizeof(unsigned)));
    BN_CUDA(cudaMalloc((void **)&ps->gens, PS_BLOCKS * sizeof(unsigned)));
    BN_CUDA(cudaMemset(ps->flags, 0, FLAG_WORDS * sizeof(unsigned)));
    BN_CUDA(cudaMemset(ps->gens, 0, PS_BLOCKS * sizeof(unsigned)));
    BN_CUDA(cudaHostAlloc((void **)&ps->stalled, sizeof *ps->stalled, cudaHostAllocMapped));
    *ps->stalled = 0;
    BN_CUDA(cudaHostGetDevicePointer((void **)&ps->stalled_dev, ps->stalled, 0));
    BN_CUDA(cudaDeviceSynchronize()); /* the zeros are in place before any peer can write */
    BN_CUDA(cudaIpcGetMemHandle(&mine->slab, slab));
    BN_CUDA(cudaIpcGetMemHandle(&mine->flags, ps->flags));
    mine->ok = 1;
    return BN_OK;
}

extern "C" bn_status bn_peer_sum_connect(bn_peer_sum *ps, const bn_peer_info *all)
{
    for (int q = 0; q < ps->world; q++) {
        if (!all[q].ok) return bn_error(BN_ERR_DEVICE, "rank %d cannot take part", q);
        if (all[q].host != all[ps->rank].host) return bn_error(BN_ERR_DEVICE, "rank %d is on another machine", q);
        if (q == ps->rank) continue;
        int dev = -1, can = 0;
        if (cudaDeviceGetByPCIBusId(&dev, all[q].bus) != cudaSuccess) {
            cudaGetLastError();
            return bn_error(BN_ERR_DEVICE, "rank %d's GPU (%s) is not visible here", q, all[q].bus);
        }
        BN_CUDA(cudaDeviceCanAccessPeer(&can, ps->device, dev));
        if (!can) return bn_error(BN_ERR_DEVICE, "this GPU cannot reach rank %d's (%s)", q, all[q].bus);
    }
    for (int q = 0; q < ps->world; q++) {
        if (q == ps->rank) {
            ps->peer_slab[q] = ps->slab;
            ps->peer_flags[q] = ps->flags;
            continue;
        }
        void *p = NULL;
        BN_CUDA(cudaIpcOpenMemHandle(&p, all[q].slab, cudaIpcMemLazyEnablePeerAccess));
        ps->peer_slab[q] = (float *)p;
        ps->mapped = 1;
        BN_CUDA(cudaIpcOpenMemHandle(&p, all[q].flags, cudaIpcMemLazyEnablePeerAccess));
        ps->peer_flags[q] = (unsigned *)p;
    }
    return BN_OK;
}

extern "C" int bn_peer_sum_covers(const bn_peer_sum *ps, const float *ptr, size_t count)
{
    return ps && ptr >= ps->slab && count <= ps->count && (size_t)(ptr - ps->slab) <= ps->count - count;
}

extern "C" bn_status bn_peer_sum_run(bn_peer_sum *ps, float *grads, size_t count, float weight, cudaStream_t s)
{
    if (!count) return BN_OK;
    const size_t off = (size_t)(grads - ps->slab);
    sum_args a;
    memset(&a, 0, sizeof a);
    for (int q = 0; q < ps->world; q++) {
        a.buf[q] = ps->peer_slab[q] + off;
        a.flags[q] = ps->peer_flags[q];
    }
    a.gens = ps->gens, a.stalled = ps->stalled_dev, a.timeout_ns = ps->timeout_ns;
    a.count = count, a.weight = weight, a.rank = ps->rank, a.world = ps->world;
    /* The slabs start at allocations of the same layout, so one offset aligns every copy alike. */
    a.vec = off % 4 == 0;
    const size_t per_rank = (a.vec ? count / 4 : count) / ps->world + 1;
    size_t blocks = (per_rank + PS_PIECES_PER_BLOCK - 1) / PS_PIECES_PER_BLOCK;
    if (blocks > PS_BLOCKS) blocks = PS_BLOCKS;
    peer_sum_kernel<<<(unsigned)blocks, PS_THREADS, 0, s>>>(a);
    BN_CUDA_LAUNCH();
    return BN_OK;
}

extern "C" int bn_peer_sum_stalled(const bn_peer_sum *ps)
{
    return ps && ps->stalled && *(volatile int *)ps->stalled;
}

extern "C" void bn_peer_sum_close(bn_peer_sum *ps, int aborting)
{
    if (!ps) return;
    if (!aborting) {
        for (int q = 0; q < ps->world; q++) {
            if (q == ps->rank) continue;
            if (ps->peer_slab[q]) cudaIpcCloseMemHandle(ps->peer_slab[q]);
            if (ps->peer_flags[q]) cudaIpcCloseMemHandle(ps->peer_flags[q]);
        }
        if (ps->flags) cudaFree(ps->flags);
        if (ps->gens) cudaFree(ps->gens);
        if (ps->stalled) cudaFreeHost(ps->stalled);
    }
    free(ps);
}
