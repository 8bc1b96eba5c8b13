/* peer_sum.cu - the gradient sum through the peers' memory (see peer_sum.h).
 *
 * Flag words, in every rank's own buffer, for block b of the sum kernel and rank q: START and END
 * (the generation q's block b has reached) and WEIGHT (q's scale for this sum, as float bits),
 * written by rank q into each rank's buffer. The generation is each block's count of sums, kept
 * in device memory so that a replayed graph counts on; every rank launches the same sums with the
 * same blocks, so their counts agree. A pushed bucket (push_lines_kernel) uses none of these: its
 * lines land in each rank's landing area, tagged by the count of pushed sums (turns). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/hash.h"
#include "gpu/cuda_check.h"
#include "gpu/param_update.cuh"
#include "gpu/pdl.cuh"
#include "peer_sum.h"

/* Blocks of a met sum at most, of a pushed one, and a block's threads. */
#define PS_BLOCKS 32
#define PS_PUSH_BLOCKS 128
#define PS_THREADS 512
/* float4 pieces of a rank's share per block, about (fewer blocks for small buckets). */
#define PS_PIECES_PER_BLOCK 2048
/* Lines (two floats each) of a pushed bucket per block, about. */
#define PS_LINES_PER_BLOCK 1024
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
    size_t push_max;                  /* floats a pushed bucket may hold: this rank's, then the ranks' least */
    float *stage;                     /* this rank's landing area for pushed buckets: two halves of a part
                                         for each rank, part_floats(push_max) floats a part */
    unsigned *turns;                  /* [0]: the pushed sums done, [1]: blocks done in the current one */
    float *peer_stage[BN_PEER_MAX];
    int mapped;                       /* the peers' memory is mapped */
};

typedef struct sum_args {
    float *buf[BN_PEER_MAX];          /* every rank's copy of the bucket (pushed: this rank's at [rank] only) */
    unsigned *flags[BN_PEER_MAX];     /* every rank's flag words */
    float *stage[BN_PEER_MAX];        /* pushed: every rank's landing area */
    unsigned *turns;
    size_t span;                      /* pushed: floats a rank's part of a landing area holds */
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

/* s + w x, for each lane of a float4 alike. */
static __device__ __forceinline__ float add_scaled(float w, float x, float s)
{
    return fmaf(w, x, s);
}

static __device__ __forceinline__ float4 add_scaled(float w, float4 x, float4 s)
{
    return make_float4(fmaf(w, x.x, s.x), fmaf(w, x.y, s.y), fmaf(w, x.z, s.z), fmaf(w, x.w, s.w));
}

/* Thread q (< world) of the block: meets rank q at START and reads q's weight into w[q]. Every
 * thread returns whether the whole block met its peers. */
static __device__ bool meet_start(const sum_args &a, unsigned gen, long long deadline, float *w)
{
    __shared__ int ok;
    if (threadIdx.x == 0) ok = 1;
    __syncthreads();
    if (threadIdx.x < a.world) {
        if (!meet(a, START, gen, deadline)) ok = 0;
        else w[threadIdx.x] = __uint_as_float(load_acquire(a.flags[a.rank] + flag_at(WEIGHT, blockIdx.x, threadIdx.x)));
    }
    __syncthreads();
    return ok != 0;
}

/* Elements [from, to) of the bucket (in T: float4 or float), summed over the ranks in rank order
 * from every rank's copy and written into every rank's copy. */
template <typename T>
static __device__ void sum_everywhere(const sum_args &a, const float *w, size_t from, size_t to)
{
    for (size_t i = from + threadIdx.x; i < to; i += blockDim.x) {
        T x[BN_PEER_MAX];
#pragma unroll
        for (int q = 0; q < BN_PEER_MAX; q++)
            if (q < a.world) x[q] = ((const T *)a.buf[q])[i];
        T s = T();
#pragma unroll
        for (int q = 0; q < BN_PEER_MAX; q++)
            if (q < a.world) s = add_scaled(w[q], x[q], s);
#pragma unroll
        for (int q = 0; q < BN_PEER_MAX; q++)
            if (q < a.world) ((T *)a.buf[q])[i] = s;
    }
}

static __global__ void __launch_bounds__(PS_THREADS) peer_sum_kernel(sum_args a)
{
    bn_early_entry(); /* pdl.cuh */
    __shared__ float w[BN_PEER_MAX];
    const int b = blockIdx.x;
    const unsigned gen = a.gens[b] + 1;
    const long long deadline = gpu_clock_ns() + a.timeout_ns;
    if (!meet_start(a, gen, deadline, w)) return;
    /* This rank's share of the bucket, in float4 pieces (or floats), and this block's part of it. */
    const size_t pieces = a.vec ? a.count / 4 : a.count;
    const size_t lo = pieces * a.rank / a.world, hi = pieces * (a.rank + 1) / a.world;
    const size_t from = lo + (hi - lo) * b / gridDim.x, to = lo + (hi - lo) * (b + 1) / gridDim.x;
    if (a.vec) sum_everywhere<float4>(a, w, from, to);
    else sum_everywhere<float>(a, w, from, to);
    /* The floats past the last whole piece go to the last rank's last block. */
    if (a.vec && a.rank == a.world - 1 && b == (int)gridDim.x - 1) sum_everywhere<float>(a, w, pieces * 4, a.count);
    /* Every thread's writes to the peers are visible before this block says it is done. */
    __threadfence_system();
    __syncthreads();
    /* A stall here leaves nothing to skip: meet has raised the flag the host reads. */
    if (threadIdx.x < a.world) meet(a, END, gen, deadline);
    __syncthreads();
    if (threadIdx.x == 0) a.gens[b] = gen;
}

/* A pushed bucket's landing part for rank `from` in rank q's area, in the half of this sum. */
static __device__ __forceinline__ float *landing(const sum_args &a, int q, size_t half, int from)
{
    return a.stage[q] + (half + (size_t)from) * a.span;
}

/* A line of a pushed bucket: two floats, each beside the sum's tag, stored in one 16-byte write of
 * two 8-byte words (the float's bits low, the tag high). PTX's memory model treats a vector access
 * as one access per element, each element an aligned scalar seen whole, so a float and its tag
 * must share an element: in words of 8 bytes a reader that finds the tag in both has both floats
 * (in four words of 4 bytes it could see a tag before its float). */
static __device__ __forceinline__ void put_line(float *at, float x0, float x1, unsigned tag)
{
    const unsigned long long lo = (unsigned long long)tag << 32 | __float_as_uint(x0);
    const unsigned long long hi = (unsigned long long)tag << 32 | __float_as_uint(x1);
    asm volatile("st.volatile.global.v2.u64 [%0], {%1, %2};" ::"l"(at), "l"(lo), "l"(hi) : "memory");
}

/* Waits for the line at `at` to carry tag; false after a stall (the deadline passed; the flag in
 * host memory set). */
static __device__ bool take_line(const sum_args &a, const float *at, unsigned tag, long long deadline, float *x0,
                                 float *x1)
{
    unsigned long long lo, hi;
    for (;;) {
        asm volatile("ld.volatile.global.v2.u64 {%0, %1}, [%2];" : "=l"(lo), "=l"(hi) : "l"(at) : "memory");
        if ((unsigned)(lo >> 32) == tag && (unsigned)(hi >> 32) == tag) break;
        if (gpu_clock_ns() > deadline) {
            *(volatile int *)a.stalled = 1;
            return false;
        }
    }
    *x0 = __uint_as_float((unsigned)lo), *x1 = __uint_as_float((unsigned)hi);
    return true;
}

/* Pairs of a thread whose update's reads a pushed sum issues at its start (PS_UPDATE_AHEAD a
 * thread: all of a bucket of up to 2 x PS_UPDATE_AHEAD x PS_THREADS floats a block). */
#define PS_UPDATE_AHEAD 2

/* Pair j of a pushed sum: the peers' lines awaited, the ranks' floats summed in rank order into
 * this rank's bucket, and with UPD the update applied to each sum from the slots read before
 * (gpu/param_update.cuh). False after a stall. */
template <bn_rule_fn Rule, int N, bool W16, bool UPD>
static __device__ __forceinline__ bool sum_pair(const sum_args &a, const bn_update_args &u, bn_step_rates r,
                                                const float *w, size_t half, unsigned tag, long long deadline,
                                                size_t j, bn_update_slot<N> &v0, bn_update_slot<N> &v1)
{
    float *mine = a.buf[a.rank];
    const bool two = 2 * j + 1 < a.count;
    float x0[BN_PEER_MAX], x1[BN_PEER_MAX];
#pragma unroll
    for (int q = 0; q < BN_PEER_MAX; q++) {
        if (q >= a.world) continue;
        if (q == a.rank) {
            x0[q] = mine[2 * j];
            x1[q] = two ? mine[2 * j + 1] : 0.0f;
        } else if (!take_line(a, landing(a, a.rank, half, q) + 4 * j, tag, deadline, &x0[q], &x1[q])) {
            return false;
        }
    }
    float s0 = 0.0f, s1 = 0.0f;
#pragma unroll
    for (int q = 0; q < BN_PEER_MAX; q++)
        if (q < a.world) s0 = fmaf(w[q], x0[q], s0), s1 = fmaf(w[q], x1[q], s1);
    mine[2 * j] = s0;
    if (two) mine[2 * j + 1] = s1;
    if (UPD) {
        bn_update_write<Rule, N, W16>(u, r, u.lo + 2 * j, s0, v0);
        if (two) bn_update_write<Rule, N, W16>(u, r, u.lo + 2 * j + 1, s1, v1);
    }
    return true;
}

/* The update's reads for pair j (its second float where the bucket has one). */
template <int N>
static __device__ __forceinline__ void read_pair(const sum_args &a, const bn_update_args &u, size_t j,
                                                 bn_update_slot<N> &v0, bn_update_slot<N> &v1)
{
    bn_update_read<N>(u, u.lo + 2 * j, &v0);
    if (2 * j + 1 < a.count) bn_update_read<N>(u, u.lo + 2 * j + 1, &v1);
}

/* A small bucket, pushed in tagged lines: block b writes its pairs of this rank's bucket, each with
 * the sum's tag, into every peer's landing part for this rank (its weight in the line after the
 * last pair), then reads the peers' lines for the same pairs from its own landing area as each
 * arrives and sums the ranks' floats in rank order into its bucket. No fence and no meeting: a
 * float and its tag arrive together (put_line). Every rank adds the same numbers in the same order
 * as peer_sum_kernel does, so the bits are the same either way.
 *
 * With UPD the kernel also applies update u (gpu/param_update.cuh) to each sum it makes, by Rule
 * with N state slabs (W16: the BF16 weight copy as well). The schedule's cursor and a thread's
 * first PS_UPDATE_AHEAD pairs' weights and state are loaded at the start, and nothing waits for
 * them until the lines are written (the multipliers come from the arguments where the bucket has
 * up to BN_UPDATE_NEAR_SEGS segments; with more, the reads follow the writes). The rank that
 * arrives last, which finds its peers' lines waiting, then adds the step's rates (one load), the
 * rule and the stores, where an update kernel after the sum waited for its loads one after
 * another. The arithmetic is the update kernels', so the bits are theirs.
 *
 * The tag is the count of pushed sums plus one (turns[0], counted by the last block to finish
 * each), the same on every rank. The landing area has two halves, which the pushed sums take in
 * turn: a rank pushing sum k+2 into a half has read every peer's lines of sum k+1, which each
 * pushed only once its sum k, the last to read that half, had ended. */
template <bn_rule_fn Rule, int N, bool W16, bool UPD>
static __global__ void __launch_bounds__(PS_THREADS) push_lines_kernel(sum_args a, bn_update_args u)
{
    bn_early_entry(); /* pdl.cuh */
    __shared__ float w[BN_PEER_MAX];
    const unsigned turn = *(volatile const unsigned *)a.turns;
    const unsigned tag = turn + 1;
    const size_t half = (size_t)(turn & 1u) * (size_t)a.world;
    const long long deadline = gpu_clock_ns() + a.timeout_ns;
    const size_t pairs = (a.count + 1) / 2;
    const size_t from = pairs * blockIdx.x / gridDim.x, to = pairs * (blockIdx.x + 1) / gridDim.x;
    const size_t first = from + threadIdx.x, stride = blockDim.x;
    float *mine = a.buf[a.rank];
    int at = 0;
    bn_update_slot<N> ahead[PS_UPDATE_AHEAD][2];
    /* A bucket of more segments than the arguments carry finds them by a chain of loads, which
     * would hold up the writes: its reads follow them. */
    const bool early = u.nseg <= BN_UPDATE_NEAR_SEGS;
    if (UPD) at = bn_update_cursor(u);
    if (UPD && early)
#pragma unroll
        for (int k = 0; k < PS_UPDATE_AHEAD; k++)
            if (first + k * stride < to) read_pair<N>(a, u, first + k * stride, ahead[k][0], ahead[k][1]);
    for (size_t j = first; j < to; j += stride) {
        const float x0 = mine[2 * j], x1 = 2 * j + 1 < a.count ? mine[2 * j + 1] : 0.0f;
#pragma unroll
        for (int q = 0; q < BN_PEER_MAX; q++)
            if (q < a.world && q != a.rank) put_line(landing(a, q, half, a.rank) + 4 * j, x0, x1, tag);
    }
    if (UPD && !early)
#pragma unroll
        for (int k = 0; k < PS_UPDATE_AHEAD; k++)
            if (first + k * stride < to) read_pair<N>(a, u, first + k * stride, ahead[k][0], ahead[k][1]);
    if (threadIdx.x < a.world) {
        const int q = threadIdx.x;
        if (blockIdx.x == 0 && q != a.rank) put_line(landing(a, q, half, a.rank) + 4 * pairs, a.weight, a.weight, tag);
        float x1;
        if (q == a.rank) w[q] = a.weight;
        else if (!take_line(a, landing(a, a.rank, half, q) + 4 * pairs, tag, deadline, &w[q], &x1)) w[q] = 0.0f;
    }
    __syncthreads();
    const bn_step_rates r = UPD ? bn_update_rates_at(u, at) : bn_step_rates{};
    bool ok = true;
#pragma unroll
    for (int k = 0; k < PS_UPDATE_AHEAD; k++) {
        const size_t j = first + k * stride;
        if (ok && j < to)
            ok = sum_pair<Rule, N, W16, UPD>(a, u, r, w, half, tag, deadline, j, ahead[k][0], ahead[k][1]);
    }
    for (size_t j = first + PS_UPDATE_AHEAD * stride; ok && j < to; j += stride) {
        bn_update_slot<N> v0, v1;
        if (UPD) read_pair<N>(a, u, j, v0, v1);
        ok = sum_pair<Rule, N, W16, UPD>(a, u, r, w, half, tag, deadline, j, v0, v1);
    }
    /* The last block to finish counts the sum. No fence first: nothing waits on the count but the
     * next pushed sum, which the stream starts after this one; the landing halves' reuse rests on
     * the lines each rank has read, not on the count. A fence here waited about 2.8 us a block (a
     * probe on four H200s) for the block's stores to the peers to be acknowledged. */
    __syncthreads();
    if (threadIdx.x == 0) {
        if (atomicAdd(a.turns + 1, 1u) == gridDim.x - 1) {
            a.turns[1] = 0;
            a.turns[0] = turn + 1;
        }
    }
}

typedef void (*push_kernel)(sum_args, bn_update_args);

/* The pushed sum without an update, and with each optimizer's (FP32 weights, and with the BF16
 * copy), in the optimizer table's order. */
static const push_kernel push_plain = push_lines_kernel<bn_sgd_rule, 0, false, false>;
#define PUSH_KERNELS(name)                                                                   \
    {push_lines_kernel<bn_##name##_rule, bn_##name##_state_count, false, true>,            \
     push_lines_kernel<bn_##name##_rule, bn_##name##_state_count, true, true>},
static const push_kernel push_updating[][2] = {BN_OPTIMIZERS(PUSH_KERNELS)};

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

/* Floats of a landing part for buckets of up to n floats: a 16-byte line for each two, and one for
 * the weight. */
static size_t part_floats(size_t n)
{
    return 2 * ((n + 1) / 2 * 2) + 4;
}

/* Floats a landing part holds where a rank may push push_bytes a sum to its world - 1 peers: at most
 * the slab's count, rounded up to a multiple of 4. */
static size_t push_span(size_t push_bytes, int world, size_t count)
{
    size_t n = push_bytes / sizeof(float) / (size_t)(world > 1 ? world - 1 : 1);
    if (n > count) n = count;
    return (n + 3) / 4 * 4;
}

extern "C" bn_status bn_peer_sum_local(bn_peer_sum **out, int rank, int world, int device, float *slab,
                                       size_t count, size_t push_bytes, double timeout_s, bn_peer_info *mine,
                                       const char **why)
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
    ps->push_max = push_span(push_bytes, world, count);
    BN_CUDA(cudaMalloc((void **)&ps->turns, 2 * sizeof(unsigned)));
    BN_CUDA(cudaMemset(ps->turns, 0, 2 * sizeof(unsigned)));
    /* Zeroed, as tag 0 is never a sum's: memory that an earlier landing area held could carry the
     * tags of the first sums and pass for a peer's lines. */
    const size_t stage_bytes = 2 * (size_t)world * part_floats(ps->push_max) * sizeof(float);
    if (ps->push_max) {
        BN_CUDA(cudaMalloc((void **)&ps->stage, stage_bytes));
        BN_CUDA(cudaMemset(ps->stage, 0, stage_bytes));
    }
    BN_CUDA(cudaHostAlloc((void **)&ps->stalled, sizeof *ps->stalled, cudaHostAllocMapped));
    *ps->stalled = 0;
    BN_CUDA(cudaHostGetDevicePointer((void **)&ps->stalled_dev, ps->stalled, 0));
    BN_CUDA(cudaDeviceSynchronize()); /* the zeros are in place before any peer can write */
    BN_CUDA(cudaIpcGetMemHandle(&mine->slab, slab));
    BN_CUDA(cudaIpcGetMemHandle(&mine->flags, ps->flags));
    if (ps->stage) BN_CUDA(cudaIpcGetMemHandle(&mine->stage, ps->stage));
    mine->push = ps->push_max;
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
    /* Every rank lays out its landing area by the least limit, which every rank's area can hold. */
    for (int q = 0; q < ps->world; q++)
        if (all[q].push < ps->push_max) ps->push_max = (size_t)all[q].push;
    for (int q = 0; q < ps->world; q++) {
        if (q == ps->rank) {
            ps->peer_slab[q] = ps->slab;
            ps->peer_flags[q] = ps->flags;
            ps->peer_stage[q] = ps->stage;
            continue;
        }
        void *p = NULL;
        BN_CUDA(cudaIpcOpenMemHandle(&p, all[q].slab, cudaIpcMemLazyEnablePeerAccess));
        ps->peer_slab[q] = (float *)p;
        ps->mapped = 1;
        BN_CUDA(cudaIpcOpenMemHandle(&p, all[q].flags, cudaIpcMemLazyEnablePeerAccess));
        ps->peer_flags[q] = (unsigned *)p;
        if (ps->push_max) {
            BN_CUDA(cudaIpcOpenMemHandle(&p, all[q].stage, cudaIpcMemLazyEnablePeerAccess));
            ps->peer_stage[q] = (float *)p;
        }
    }
    return BN_OK;
}

extern "C" int bn_peer_sum_covers(const bn_peer_sum *ps, const float *ptr, size_t count)
{
    return ps && ptr >= ps->slab && count <= ps->count && (size_t)(ptr - ps->slab) <= ps->count - count;
}

extern "C" bn_status bn_peer_sum_run(bn_peer_sum *ps, float *grads, size_t count, float weight,
                                     const bn_update_args *u, int *updated, cudaStream_t s)
{
    if (updated) *updated = 0;
    if (!count) return BN_OK;
    const size_t off = (size_t)(grads - ps->slab);
    sum_args a;
    memset(&a, 0, sizeof a);
    for (int q = 0; q < ps->world; q++) {
        a.buf[q] = ps->peer_slab[q] + off;
        a.flags[q] = ps->peer_flags[q];
        a.stage[q] = ps->peer_stage[q];
    }
    a.gens = ps->gens, a.stalled = ps->stalled_dev, a.timeout_ns = ps->timeout_ns, a.turns = ps->turns;
    a.count = count, a.weight = weight, a.rank = ps->rank, a.world = ps->world, a.span = part_floats(ps->push_max);
    /* The slabs start at allocations of the same layout, so one offset aligns every copy alike. */
    a.vec = off % 4 == 0;
    if (count <= ps->push_max) {
        size_t blocks = ((count + 1) / 2 + PS_LINES_PER_BLOCK - 1) / PS_LINES_PER_BLOCK;
        if (blocks > PS_PUSH_BLOCKS) blocks = PS_PUSH_BLOCKS;
        const int fold = u && updated;
        if (fold && (u->lo != off || u->hi != off + count))
            return bn_error(BN_ERR_INTERNAL, "a pushed sum of slab elements %zu..%zu given the update of %zu..%zu",
                            off, off + count, u->lo, u->hi);
        if (fold && (u->optimizer < 0 || u->optimizer >= (int)(sizeof push_updating / sizeof push_updating[0])))
            return bn_error(BN_ERR_INTERNAL, "a pushed sum given optimizer %d, outside the table", u->optimizer);
        bn_update_args none;
        memset(&none, 0, sizeof none);
        push_kernel kern = fold ? push_updating[u->optimizer][u->w16 != NULL] : push_plain;
        kern<<<(unsigned)blocks, PS_THREADS, 0, s>>>(a, fold ? *u : none);
        if (fold) *updated = 1;
    } else {
        const size_t share = (a.vec ? count / 4 : count) / ps->world + 1;
        size_t blocks = (share + PS_PIECES_PER_BLOCK - 1) / PS_PIECES_PER_BLOCK;
        if (blocks > PS_BLOCKS) blocks = PS_BLOCKS;
        peer_sum_kernel<<<(unsigned)blocks, PS_THREADS, 0, s>>>(a);
    }
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
            if (ps->peer_stage[q]) cudaIpcCloseMemHandle(ps->peer_stage[q]);
        }
        if (ps->flags) cudaFree(ps->flags);
        if (ps->stage) cudaFree(ps->stage);
        if (ps->turns) cudaFree(ps->turns);
        if (ps->gens) cudaFree(ps->gens);
        if (ps->stalled) cudaFreeHost(ps->stalled);
    }
    free(ps);
}
