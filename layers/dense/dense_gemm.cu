/* dense_gemm.cu - blobnet's own GEMM kernels for the dense layer's small products, beside
 * cuBLASLt's algorithms (dense_gemm.h), in two kinds: own_gemm (FP32 FMA, register-tiled) and the
 * TF32 tensor-core kernels with each operand split in two, so FP32 accuracy (mma_tf32.cuh):
 * own_gemm_tc, and own_gemm_tck for 32 x 32 tiles whose operands allow 8-byte copies. All have
 * the same outer structure: the output tiled over the whole GPU and, when there are few tiles,
 * the inner dimension split across blocks with the partial sums combined inside the same kernel
 * in a fixed order (per-tile counters the plan owns; no float atomics), so it is deterministic
 * and the fixed rule (bn_ctx_by_rule) can always take them.
 * The dW launch also adds the bias gradient, so no bias_grad launch follows it. Their plans
 * (tiles, inner ranges, counters and partial sums) and the rule are in dense_gemm_plan.cu;
 * dense_plan.cu decides when a product runs through one. */
#include <stdint.h>

#include <cuda_pipeline.h>

#include "dense.h"
#include "dense_gemm.h"
#include "gpu/code_anchor.cuh"
#include "gpu/cp_async.cuh"
#include "gpu/cuda_check.h"
#include "gpu/last_arrival.cuh"
#include "gpu/mma_tf32.cuh"
#include "gpu/pdl.cuh"
#include "gpu/vec_ops.cuh"

/* Partial sums a thread of the last block has in flight at once while it adds them up. */
#define OWN_TAIL_FLOATS 32

/* ---- own GEMM kernels ---- */
/* The three products as one row-major C (rows x cols) = sum over kk < inner of A(r, kk) B(kk, c):
 *
 *   FWD  rows n, cols m, inner k   A(r, kk) = X[r k + kk]    B(kk, c) = W[c k + kk]   C = Y = .. + b[c]
 *   DW   rows m, cols k, inner n   A(r, kk) = dY[kk m + r]   B(kk, c) = X[kk k + c]   C = dW += ..,
 *                                  and (optionally) db[r] += sum over kk of A(r, kk)
 *   DX   rows n, cols k, inner m   A(r, kk) = dY[r m + kk]   B(kk, c) = W[kk k + c]   C = dX = ..
 *
 * A block computes a BM x BN tile of C with (BM/TM)(BN/TN) threads, each holding TM x TN
 * outputs in registers (rows tr + i BM/TM, columns tc + j BN/TN: strided, so that shared-memory
 * reads and global stores of a warp are consecutive), over OWN_BK-deep slices of the inner
 * dimension staged in shared memory (the next slice is fetched into registers while the current
 * one is used). Global loads are scalar (the parameters may sit at any 4-byte offset of their
 * slab) and coalesced along whichever dimension is contiguous.
 *
 * With `splits` > 1 the inner dimension is cut into that many ranges (blockIdx.y): each block
 * writes its partial tile to its own slot of `part`, and the block that finishes a tile last
 * (bn_last_arrival on a per-tile counter, which it leaves at zero for the next launch) adds the
 * partials in split order 0, 1, .. (its own from registers, the same value), loading those of
 * several splits before adding them, and applies the epilogue. No float atomics: the result
 * does not depend on which block comes last, so it is the same run after run. */

typedef struct own_args {
    const float *a, *b;  /* operands A and B as above */
    float *c;            /* the output */
    const float *bias;   /* FWD: b[m] */
    float *db;           /* DW: the bias gradient, or NULL when it is not fused */
    int rows, cols, inner;
    int tiles_n;         /* column tiles */
    int splits, ktps;    /* inner ranges, and OWN_BK slices per range */
    float *part;         /* splits > 1: tiles x splits slots of BM BN + BM floats */
    unsigned *counters;  /* splits > 1: one per tile, zero between launches */
    relu_epi relu;       /* FWD, DX: a fused ReLU, or NULLs */
} own_args;

/* The end of an own_gemm block, whatever computed its E outputs acc[e] at tile positions
 * pos(e) (an int2: row, column within the tile), with bsum its rows' bias-gradient sums when
 * bias_rows: with splits, the partials' reduction in split order by the tile's last block; then
 * the epilogue. Partial e of thread tid is slot element e NT + tid. */
template <int KIND, int BM, int BN, int NT, int E, typename Pos>
static __device__ __forceinline__ void own_tail(const own_args &p, int tile, int split, int row0, int col0,
                                                float (&acc)[E], float bsum, bool bias_rows, Pos pos)
{
    const int tid = (int)threadIdx.x;
    /* The epilogue reads everything it needs (the bias, the dW and db it adds to, the ReLU's mask)
     * before its first store: the compiler cannot rule out that a store changes what a later read
     * gets, so it keeps such reads after the store, and each store would wait for the one read it
     * needs, one memory latency per output. Where a thread keeps at most 8 outputs (the 32 x 32
     * tiles of every kind), the reads come before the partials are stored and met too, so that the tile's
     * last block waits on the partials' reads alone, not on these after them (every split's block
     * reads them, only the last one uses them); with more, the registers they hold through the
     * products cost the other kernels blocks a multiprocessor. */
    constexpr bool early = E <= 8;
    const bool db_row = bias_rows && row0 + tid < p.rows;
    float db_old = 0.0f, add[E];
    auto read_epilogue = [&]() {
        db_old = db_row ? p.db[row0 + tid] : 0.0f;
#pragma unroll
        for (int e = 0; e < E; e++) {
            const int2 at = pos(e);
            const int r = row0 + at.x, c = col0 + at.y;
            add[e] = 0.0f;
            if (KIND == GEMM_FWD && c < p.cols) add[e] = p.bias[c];
            if (KIND == GEMM_DW && r < p.rows && c < p.cols) add[e] = p.c[(size_t)r * p.cols + c];
            if (KIND == GEMM_DX && p.relu.relu_dx && r < p.rows && c < p.cols)
                add[e] = p.relu.mask[(size_t)r * p.cols + c];
        }
    };
    if (early) read_epilogue();
    if (p.splits > 1) {
        constexpr size_t SLOT = (size_t)BM * BN + BM;
        float *mine = p.part + ((size_t)tile * p.splits + split) * SLOT;
#pragma unroll
        for (int e = 0; e < E; e++) mine[e * NT + tid] = acc[e];
        if (bias_rows) mine[BM * BN + tid] = bsum;
        if (!bn_last_arrival(&p.counters[tile], (unsigned)p.splits)) return;
        /* The partials are added in split order, but read G splits at a time: a group's loads
         * come, unconditionally, before the first of its additions, so they can be in flight
         * together and the group waits about one memory latency instead of G of them. A split
         * past the last reads the last one again and is not added; the block's own split is
         * read too, but added from registers. */
        constexpr int G = OWN_TAIL_FLOATS / E > 0 ? OWN_TAIL_FLOATS / E : 1;
        float sum[E];
#pragma unroll
        for (int e = 0; e < E; e++) sum[e] = 0.0f;
        float bias_total = 0.0f;
        for (int s0 = 0; s0 < p.splits; s0 += G) {
            float v[G][E], vb[G];
#pragma unroll
            for (int g = 0; g < G; g++) {
                const float *q = p.part + ((size_t)tile * p.splits + min(s0 + g, p.splits - 1)) * SLOT;
#pragma unroll
                for (int e = 0; e < E; e++) v[g][e] = __ldcg(q + e * NT + tid);
                vb[g] = bias_rows ? __ldcg(q + BM * BN + tid) : 0.0f;
            }
#pragma unroll
            for (int g = 0; g < G; g++) {
                const int s = s0 + g;
                if (s >= p.splits) break;
#pragma unroll
                for (int e = 0; e < E; e++) sum[e] += s == split ? acc[e] : v[g][e];
                if (bias_rows) bias_total += s == split ? bsum : vb[g];
            }
        }
#pragma unroll
        for (int e = 0; e < E; e++) acc[e] = sum[e];
        bsum = bias_total;
    }
    if (!early) read_epilogue();
#pragma unroll
    for (int e = 0; e < E; e++) {
        const int2 at = pos(e);
        const int r = row0 + at.x, c = col0 + at.y;
        if (r >= p.rows || c >= p.cols) continue;
        const size_t i = (size_t)r * p.cols + c;
        if (KIND == GEMM_FWD) {
            const float v = acc[e] + add[e];
            p.c[i] = v;
            if (p.relu.relu_y) p.relu.relu_y[i] = relu_of(v);
        } else if (KIND == GEMM_DW) {
            p.c[i] = add[e] + acc[e];
        } else {
            p.c[i] = acc[e];
            if (p.relu.relu_dx) p.relu.relu_dx[i] = masked(acc[e], add[e]);
        }
    }
    if (db_row) p.db[row0 + tid] = db_old + bsum;
}

/* Element e of a block's share of the slice [kt, kt + OWN_BK) of an operand m (ld floats from one
 * row or column to the next when INNER, from one inner offset to the next otherwise), the tile's
 * rows or columns from i0 of `count`: zero outside the matrix or past k1. */
template <bool INNER, int SIDE>
static __device__ __forceinline__ float fetch_element(const float *m, int ld, int e, int i0, int count, int kt, int k1)
{
    const int i = INNER ? e / OWN_BK : e % SIDE, kk = INNER ? e % OWN_BK : e / SIDE;
    const int gi = i0 + i, gk = kt + kk;
    float v = 0.0f;
    if (gi < count && gk < k1) v = INNER ? m[(size_t)gi * ld + gk] : m[(size_t)gk * ld + gi];
    return v;
}

/* The FP32 FMA kernel: see the comment above. */
template <int KIND, int BM, int BN, int TM, int TN>
__global__ void __launch_bounds__((BM / TM) * (BN / TN)) own_gemm(own_args p)
{
    bn_early_entry(); /* pdl.cuh */
    constexpr int RT = BM / TM, CT = BN / TN, NT = RT * CT;
    constexpr int LA = BM * OWN_BK / NT, LB = BN * OWN_BK / NT;
    static_assert(BM * OWN_BK % NT == 0 && BN * OWN_BK % NT == 0, "tile loads must divide evenly");
    static_assert(NT >= BM, "a thread per row for the bias sums");
    constexpr bool A_INNER = KIND != GEMM_DW; /* A contiguous along the inner dimension */
    constexpr bool B_INNER = KIND == GEMM_FWD;
    __shared__ float As[OWN_BK][BM + 1];
    __shared__ float Bs[OWN_BK][BN + 1];

    const int tid = (int)threadIdx.x;
    const int tile = (int)blockIdx.x, split = (int)blockIdx.y;
    const int row0 = (tile / p.tiles_n) * BM, col0 = (tile % p.tiles_n) * BN;
    const int k0 = split * p.ktps * OWN_BK;
    const int k1 = min(p.inner, k0 + p.ktps * OWN_BK);
    const int tr = tid / CT, tc = tid % CT;
    const int lda = A_INNER ? p.inner : p.rows, ldb = B_INNER ? p.inner : p.cols;
    const bool bias_rows = KIND == GEMM_DW && p.db != NULL && col0 == 0 && tid < BM;

    float acc[TM * TN];
#pragma unroll
    for (int e = 0; e < TM * TN; e++) acc[e] = 0.0f;
    float bsum = 0.0f;
    float ra[LA], rb[LB];

    /* Slice [kt, kt + OWN_BK) of A and B into registers, zero outside the matrices or the range. */
    auto fetch = [&](int kt) {
#pragma unroll
        for (int l = 0; l < LA; l++) ra[l] = fetch_element<A_INNER, BM>(p.a, lda, tid + l * NT, row0, p.rows, kt, k1);
#pragma unroll
        for (int l = 0; l < LB; l++) rb[l] = fetch_element<B_INNER, BN>(p.b, ldb, tid + l * NT, col0, p.cols, kt, k1);
    };

    if (k0 < k1) fetch(k0);
    for (int kt = k0; kt < k1; kt += OWN_BK) {
#pragma unroll
        for (int l = 0; l < LA; l++) {
            int e = tid + l * NT;
            if (A_INNER) As[e % OWN_BK][e / OWN_BK] = ra[l];
            else As[e / BM][e % BM] = ra[l];
        }
#pragma unroll
        for (int l = 0; l < LB; l++) {
            int e = tid + l * NT;
            if (B_INNER) Bs[e % OWN_BK][e / OWN_BK] = rb[l];
            else Bs[e / BN][e % BN] = rb[l];
        }
        __syncthreads();
        if (kt + OWN_BK < k1) fetch(kt + OWN_BK);
#pragma unroll
        for (int kk = 0; kk < OWN_BK; kk++) {
            float av[TM], bv[TN];
#pragma unroll
            for (int i = 0; i < TM; i++) av[i] = As[kk][tr + i * RT];
#pragma unroll
            for (int j = 0; j < TN; j++) bv[j] = Bs[kk][tc + j * CT];
#pragma unroll
            for (int i = 0; i < TM; i++)
#pragma unroll
                for (int j = 0; j < TN; j++) acc[i * TN + j] = fmaf(av[i], bv[j], acc[i * TN + j]);
        }
        if (bias_rows)
#pragma unroll
            for (int kk = 0; kk < OWN_BK; kk++) bsum += As[kk][tid];
        __syncthreads();
    }
    own_tail<KIND, BM, BN, NT>(p, tile, split, row0, col0, acc, bsum, bias_rows,
                               [&](int e) { return make_int2(tr + (e / TN) * RT, tc + (e % TN) * CT); });
}

/* The tensor-core kernel of the 64 x 64 tiles, and of the 32 x 32 ones where an operand's rows or
 * slices are not 8-byte aligned (own_gemm_tck takes the others; mma_tf32.cuh: split TF32, FP32
 * accuracy; P = 1, for a tf32 context, the value x value product alone, and `lo` stays zero): a
 * BM x BN tile of C per
 * block of four warps, each warp a (BM / 2) x (BN / 2) quarter (MT x NTL m16n8k8 products per
 * step of 8 along the inner dimension, independent of each other), over OWN_BK-deep slices that
 * cp.async brings into TC_STAGES shared buffers ahead of their use (zeros outside the matrices
 * or the range).
 *
 * Staging: an operand contiguous along the inner dimension is kept row by row (TC_LDI floats
 * apart), one contiguous along the rows or columns slice by slice (tile side + 8 floats apart).
 * Within a row, the inner offsets of each step of 8 are stored in the order 0 4 1 5 2 6 3 7,
 * and within a slice, the rows (columns) of each group of 16 in the order 0 8 1 9 .. 7 15: the
 * two values a thread takes for one fragment are then side by side, one 8-byte load, and with
 * those pitches a warp's loads meet no bank conflicts. Each thread's copies are worked out
 * once, so that a slice costs it a bounds test, a cp.async and an address step per element.
 * Split reduction and epilogue as own_gemm's. */
#define TC_WARPS 4
#define TC_STAGES 3
#define TC_LDI (OWN_BK + 8)

/* The tensor-core kernels' cp.async ring: `slices` slices of the inner dimension from k0, bk deep,
 * in STAGES shared buffers; stage(buf, k) starts the copies of the slice at k into buffer buf.
 * ring_start starts the first STAGES - 1 slices. ring_next, at slice it (in buffer buf), waits for
 * it to land and for every warp to be done with the buffer refilled next, then starts slice
 * it + STAGES - 1 there; ring_after gives the buffer of slice it + 1. The slice's products stay in
 * each kernel's own loop. */
template <int STAGES, typename Stage>
static __device__ __forceinline__ void ring_start(const Stage &stage, int slices, int k0, int bk)
{
#pragma unroll
    for (int s = 0; s < STAGES - 1; s++) {
        if (s < slices) stage(s, k0 + s * bk);
        __pipeline_commit();
    }
}

template <int STAGES, typename Stage>
static __device__ __forceinline__ void ring_next(const Stage &stage, int it, int buf, int slices, int k0, int bk)
{
    __pipeline_wait_prior(STAGES - 2);
    __syncthreads();
    const int next = it + STAGES - 1;
    if (next < slices) stage(buf == 0 ? STAGES - 1 : buf - 1, k0 + next * bk);
    __pipeline_commit();
}

template <int STAGES>
static __device__ __forceinline__ int ring_after(int buf)
{
    return buf == STAGES - 1 ? 0 : buf + 1;
}

/* Where a staged element lives (see above): `i` the row (column) within the tile, kk the inner
 * offset within the slice. */
template <bool INNER, int SIDE>
static __device__ __forceinline__ int tc_at(int i, int kk)
{
    return INNER ? i * TC_LDI + (kk & ~7) + ((kk & 3) << 1) + ((kk >> 2) & 1)
                 : kk * (SIDE + 8) + (i & ~15) + ((i & 7) << 1) + ((i >> 3) & 1);
}

/* What a thread copies of every slice of one operand, worked out once: L elements, each at a
 * fixed place of the buffer and inner offset kk, from an address that moves by a fixed step
 * per slice; a row or column past the matrix reads nothing (zeros). */
template <bool INNER, int SIDE>
struct tc_copies {
    static constexpr int NT = TC_WARPS * 32, L = SIDE * OWN_BK / NT;
    const float *src[L];
    uint32_t dst[L];
    int kk[L];
    bool ok[L];
    size_t step;

    /* Operand m (ld floats from one row or column to the next when INNER, from one inner offset
     * to the next otherwise), the tile from row or column i0 of `count`, the slices from inner
     * offset k0, into the buffer at `buf`. */
    __device__ __forceinline__ void plan(const float *m, int ld, int i0, int count, int k0, float *buf, int tid)
    {
#pragma unroll
        for (int l = 0; l < L; l++) {
            const int e = tid + l * NT;
            const int i = INNER ? e / OWN_BK : e % SIDE, k = INNER ? e % OWN_BK : e / SIDE;
            ok[l] = i0 + i < count;
            kk[l] = k;
            const size_t r = (size_t)(ok[l] ? i0 + i : 0), c = (size_t)(k0 + k);
            src[l] = m + (INNER ? r * ld + c : c * ld + r);
            dst[l] = (uint32_t)__cvta_generic_to_shared(&buf[tc_at<INNER, SIDE>(i, k)]);
        }
        step = INNER ? OWN_BK : (size_t)OWN_BK * ld;
    }

    /* The next slice, `rem` inner offsets of which are in range, `offset` bytes past buffer 0. */
    __device__ __forceinline__ void copy(uint32_t offset, int rem)
    {
#pragma unroll
        for (int l = 0; l < L; l++) {
            copy4(dst[l] + offset, src[l], ok[l] && kk[l] < rem);
            src[l] += step;
        }
    }
};

/* The natural layout (own_gemm_tck's), for operands whose rows (or slices) start on 8- or
 * 16-byte boundaries: an operand contiguous along the inner dimension kept row by row, BK + 4
 * floats apart (rows start 16-byte aligned, and the eight rows an ldmatrix reads fall in
 * different banks), one contiguous along the rows or columns slice by slice, side + 8 floats
 * apart. A thread's copies are W floats each (W = 2 or 4: one cp.async where the 4-byte layout
 * takes W), zeros past the matrix or the range; the fragments come by ldmatrix (inner) or 4-byte
 * loads (slices), without bank conflicts at those pitches. */
template <bool INNER, int SIDE, int BK>
static __device__ __forceinline__ int tcv_at(int i, int kk)
{
    return INNER ? i * (BK + 4) + kk : kk * (SIDE + 8) + i;
}

/* The copies of slices BK deep. */
template <bool INNER, int SIDE, int W, int BK>
struct tcv_copies {
    static constexpr int NT = TC_WARPS * 32, CH = SIDE * BK / W, L = (CH + NT - 1) / NT;
    static constexpr int PER = INNER ? BK / W : SIDE / W; /* chunks per row (inner) or per slice */
    const float *src[L];
    uint32_t dst[L];
    int kk[L];    /* the chunk's first inner offset within the slice */
    int bytes[L]; /* inner: W * 4 where the row is in the matrix, else 0; slices: what of the W columns is */
    size_t step;

    __device__ __forceinline__ void plan(const float *m, int ld, int i0, int count, int k0, float *buf, int tid)
    {
#pragma unroll
        for (int l = 0; l < L; l++) {
            const int e = tid + l * NT;
            const int i = INNER ? e / PER : (e % PER) * W, k = INNER ? (e % PER) * W : e / PER;
            const bool live = e < CH;
            int have = INNER ? (i0 + i < count ? W : 0) : count - (i0 + i);
            have = have < 0 ? 0 : have > W ? W : have;
            bytes[l] = live ? have * 4 : 0;
            kk[l] = live ? k : BK;
            const size_t r = (size_t)(bytes[l] ? i0 + i : 0), c = (size_t)(k0 + k);
            src[l] = m + (INNER ? r * ld + c : c * ld + r);
            dst[l] = (uint32_t)__cvta_generic_to_shared(&buf[tcv_at<INNER, SIDE, BK>(live ? i : 0, live ? k : 0)]);
        }
        step = INNER ? BK : (size_t)BK * ld;
    }

    /* The next slice, `rem` inner offsets of which are in range, `offset` bytes past buffer 0.
     * An inner chunk partly past the range reads what is in it (rem is not a multiple of W only
     * at the end of the inner dimension). */
    __device__ __forceinline__ void copy(uint32_t offset, int rem)
    {
#pragma unroll
        for (int l = 0; l < L; l++) {
            if (kk[l] < BK) {
                int n = bytes[l];
                if (INNER) n = min(n, max(rem - kk[l], 0) * 4);
                else if (kk[l] >= rem) n = 0;
                copy_w<W>(dst[l] + offset, src[l], n);
            }
            src[l] += step;
        }
    }
};

template <int KIND, int BM, int BN, int P>
__global__ void __launch_bounds__(TC_WARPS * 32) own_gemm_tc(own_args p)
{
    bn_early_entry(); /* pdl.cuh */
    constexpr int BK = OWN_BK, NT = TC_WARPS * 32;
    constexpr int MT = BM / 32, NTL = BN / 16; /* m16 and n8 products per warp */
    constexpr bool A_INNER = KIND != GEMM_DW, B_INNER = KIND == GEMM_FWD;
    constexpr int A_SIZE = A_INNER ? BM * TC_LDI : BK * (BM + 8);
    constexpr int B_SIZE = B_INNER ? BN * TC_LDI : BK * (BN + 8);
    static_assert(BM % 32 == 0 && BN % 16 == 0 && BM * BK % NT == 0 && BN * BK % NT == 0 && NT >= BM, "tile shape");
    __shared__ __align__(16) float sa[TC_STAGES][A_SIZE];
    __shared__ __align__(16) float sb[TC_STAGES][B_SIZE];

    const int tid = (int)threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane >> 2, t = lane & 3;
    const int wm = warp >> 1, wn = warp & 1;
    const int tile = (int)blockIdx.x, split = (int)blockIdx.y;
    const int row0 = (tile / p.tiles_n) * BM, col0 = (tile % p.tiles_n) * BN;
    const int k0 = split * p.ktps * BK;
    const int k1 = min(p.inner, k0 + p.ktps * BK);
    const int lda = A_INNER ? p.inner : p.rows, ldb = B_INNER ? p.inner : p.cols;
    const bool bias_rows = KIND == GEMM_DW && p.db != NULL && col0 == 0 && tid < BM;

    tc_copies<A_INNER, BM> ca;
    tc_copies<B_INNER, BN> cb;
    ca.plan(p.a, lda, row0, p.rows, k0, sa[0], tid);
    cb.plan(p.b, ldb, col0, p.cols, k0, sb[0], tid);
    /* The next slice (they are staged in order), inner offsets from kt, into buffer `buf`. */
    auto stage = [&](int buf, int kt) {
        ca.copy(buf * (A_SIZE * 4), k1 - kt);
        cb.copy(buf * (B_SIZE * 4), k1 - kt);
    };

    float acc[MT][NTL][4] = {}, lo[MT][NTL][4] = {}; /* value x value, and the remainder products */
    float bsum = 0.0f;
    const int slices = k1 > k0 ? (k1 - k0 + BK - 1) / BK : 0;
    ring_start<TC_STAGES>(stage, slices, k0, BK);
    int buf = 0;
    for (int it = 0; it < slices; it++) {
        ring_next<TC_STAGES>(stage, it, buf, slices, k0, BK);
        const float *A = sa[buf], *B = sb[buf];
#pragma unroll
        for (int kb = 0; kb < BK; kb += 8) {
            /* The fragments as pairs: A (g, t) and (g, t+4) or (g, t) and (g+8, t); B (t, g) and
             * (t+4, g), or the n tiles 2j and 2j+1 at (t, g). */
            uint32_t ah[MT][4], al[MT][4];
#pragma unroll
            for (int mi = 0; mi < MT; mi++) {
                const int r = wm * (BM / 2) + mi * 16 + g;
                float2 u, v;
                if (A_INNER) {
                    u = *(const float2 *)&A[tc_at<true, BM>(r, kb + t)];     /* a0 a2 */
                    v = *(const float2 *)&A[tc_at<true, BM>(r + 8, kb + t)]; /* a1 a3 */
                    split_frag_a(u.x, v.x, u.y, v.y, ah[mi], al[mi]);
                } else {
                    u = *(const float2 *)&A[tc_at<false, BM>(r, kb + t)];     /* a0 a1 */
                    v = *(const float2 *)&A[tc_at<false, BM>(r, kb + t + 4)]; /* a2 a3 */
                    split_frag_a(u.x, u.y, v.x, v.y, ah[mi], al[mi]);
                }
            }
            uint32_t bh[NTL][2], bl[NTL][2];
#pragma unroll
            for (int ni = 0; ni < NTL; ni++) {
                const int c = wn * (BN / 2) + ni * 8 + g;
                if (B_INNER) {
                    const float2 u = *(const float2 *)&B[tc_at<true, BN>(c, kb + t)]; /* b0 b1 */
                    split_tf32(u.x, bh[ni][0], bl[ni][0]);
                    split_tf32(u.y, bh[ni][1], bl[ni][1]);
                } else if (ni % 2 == 0) {
                    const float2 u = *(const float2 *)&B[tc_at<false, BN>(c, kb + t)];     /* b0 of ni, ni+1 */
                    const float2 v = *(const float2 *)&B[tc_at<false, BN>(c, kb + t + 4)]; /* b1 of ni, ni+1 */
                    split_tf32(u.x, bh[ni][0], bl[ni][0]);
                    split_tf32(v.x, bh[ni][1], bl[ni][1]);
                    split_tf32(u.y, bh[ni + 1][0], bl[ni + 1][0]);
                    split_tf32(v.y, bh[ni + 1][1], bl[ni + 1][1]);
                }
            }
#pragma unroll
            for (int ni = 0; ni < NTL; ni++)
#pragma unroll
                for (int mi = 0; mi < MT; mi++) {
                    if (P == 1) mma_tf32(acc[mi][ni], ah[mi], bh[ni][0], bh[ni][1]);
                    else mma_split_apart(acc[mi][ni], lo[mi][ni], ah[mi], al[mi], bh[ni][0], bl[ni][0], bh[ni][1],
                                         bl[ni][1]);
                }
        }
        if (bias_rows)
#pragma unroll
            for (int kk = 0; kk < BK; kk++)
                bsum += A[tc_at<A_INNER, BM>(tid, kk)];
        buf = ring_after<TC_STAGES>(buf);
    }
    constexpr int E = MT * NTL * 4;
    float flat[E];
#pragma unroll
    for (int e = 0; e < E; e++) flat[e] = acc[e / (NTL * 4)][(e / 4) % NTL][e % 4] + lo[e / (NTL * 4)][(e / 4) % NTL][e % 4];
    own_tail<KIND, BM, BN, NT>(p, tile, split, row0, col0, flat, bsum, bias_rows, [&](int e) {
        const int mi = e / (NTL * 4), ni = (e / 4) % NTL, q = e % 4;
        return make_int2(wm * (BM / 2) + mi * 16 + g + (q >> 1) * 8, wn * (BN / 2) + ni * 8 + 2 * t + (q & 1));
    });
}

/* The 32 x 32 tensor-core kernel in the natural layout (both operands' rows or slices 8- or
 * 16-byte aligned), its four warps sharing each slice rather than the tile: slices TCK_BK = 32
 * deep in TCK_STAGES buffers, warp w taking the step of 8 at 8 w of every slice for the whole
 * tile (2 x 4 m16n8k8 products), so that each A value it splits serves four products and each B
 * value two, where own_gemm_tc's quarters of 16 x 16 split every value for two and one (LeNet's
 * ip1 spent 12 instructions a tensor-core product there, most of them splitting and staging).
 * At the end the warps' sums meet in shared memory, added in warp order (the same bits every
 * launch), and each thread takes eight outputs of the tile, one row of 32 a warp, to own_tail.
 * The plan's ranges are whole slices of TCK_BK but at the inner dimension's end
 * (bn_dense_own_layout). */
#define TCK_BK 32
#define TCK_STAGES 4
#define TCK_PITCH 33 /* a warp's 32 x 32 sums in shared memory, row by row */

template <int KIND, int P, int WA, int WB>
__global__ void __launch_bounds__(TC_WARPS * 32) own_gemm_tck(own_args p)
{
    bn_early_entry(); /* pdl.cuh */
    constexpr int BM = 32, BN = 32, BK = TCK_BK, NT = TC_WARPS * 32;
    constexpr bool A_INNER = KIND != GEMM_DW, B_INNER = KIND == GEMM_FWD;
    constexpr int A_SIZE = A_INNER ? BM * (BK + 4) : BK * (BM + 8);
    constexpr int B_SIZE = B_INNER ? BN * (BK + 4) : BK * (BN + 8);
    static_assert(WA > 1 && WB > 1 && BK == 8 * TC_WARPS, "natural layout, a step of 8 a warp");
    static_assert(TC_WARPS * BM * TCK_PITCH <= TCK_STAGES * A_SIZE, "the warps' sums fit A's buffers");
    __shared__ __align__(16) float sa[TCK_STAGES][A_SIZE];
    __shared__ __align__(16) float sb[TCK_STAGES][B_SIZE];

    const int tid = (int)threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane >> 2, t = lane & 3;
    const int tile = (int)blockIdx.x, split = (int)blockIdx.y;
    const int row0 = (tile / p.tiles_n) * BM, col0 = (tile % p.tiles_n) * BN;
    const int k0 = split * p.ktps * OWN_BK;
    const int k1 = min(p.inner, k0 + p.ktps * OWN_BK);
    const int lda = A_INNER ? p.inner : p.rows, ldb = B_INNER ? p.inner : p.cols;
    const bool bias_rows = KIND == GEMM_DW && p.db != NULL && col0 == 0 && tid < BM;

    tcv_copies<A_INNER, BM, WA, BK> ca;
    tcv_copies<B_INNER, BN, WB, BK> cb;
    ca.plan(p.a, lda, row0, p.rows, k0, sa[0], tid);
    cb.plan(p.b, ldb, col0, p.cols, k0, sb[0], tid);
    auto stage = [&](int buf, int kt) {
        ca.copy(buf * (A_SIZE * 4), k1 - kt);
        cb.copy(buf * (B_SIZE * 4), k1 - kt);
    };

    float acc[2][4][4] = {}, lo[2][4][4] = {};
    float bsum = 0.0f;
    const int slices = k1 > k0 ? (k1 - k0 + BK - 1) / BK : 0;
    ring_start<TCK_STAGES>(stage, slices, k0, BK);
    const int kb = warp * 8;
    int buf = 0;
    for (int it = 0; it < slices; it++) {
        ring_next<TCK_STAGES>(stage, it, buf, slices, k0, BK);
        const float *A = sa[buf], *B = sb[buf];
        const uint32_t a_at = (uint32_t)__cvta_generic_to_shared(A), b_at = (uint32_t)__cvta_generic_to_shared(B);
        /* The fragments as own_gemm_tc's natural layout takes them, at this warp's step. */
        uint32_t ah[2][4], al[2][4];
#pragma unroll
        for (int mi = 0; mi < 2; mi++) {
            if constexpr (A_INNER) {
                const int row = mi * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
                uint32_t f[4];
                ldmatrix_x4(f, a_at + 4 * (row * (BK + 4) + kb + (lane >> 4) * 4));
                split_frag_a(__uint_as_float(f[0]), __uint_as_float(f[1]), __uint_as_float(f[2]),
                             __uint_as_float(f[3]), ah[mi], al[mi]);
            } else {
                const float *q = A + (kb + t) * (BM + 8) + mi * 16 + g;
                split_frag_a(q[0], q[8], q[4 * (BM + 8)], q[4 * (BM + 8) + 8], ah[mi], al[mi]);
            }
        }
        uint32_t bh[4][2], bl[4][2];
#pragma unroll
        for (int ni = 0; ni < 4; ni++) {
            if constexpr (B_INNER) {
                if (ni % 2 == 0) {
                    const int n = ni * 8 + (lane & 7) + (lane >> 4) * 8;
                    uint32_t f[4];
                    ldmatrix_x4(f, b_at + 4 * (n * (BK + 4) + kb + ((lane >> 3) & 1) * 4));
                    split_tf32(__uint_as_float(f[0]), bh[ni][0], bl[ni][0]);
                    split_tf32(__uint_as_float(f[1]), bh[ni][1], bl[ni][1]);
                    split_tf32(__uint_as_float(f[2]), bh[ni + 1][0], bl[ni + 1][0]);
                    split_tf32(__uint_as_float(f[3]), bh[ni + 1][1], bl[ni + 1][1]);
                }
            } else {
                const float *q = B + (kb + t) * (BN + 8) + ni * 8 + g;
                split_tf32(q[0], bh[ni][0], bl[ni][0]);
                split_tf32(q[4 * (BN + 8)], bh[ni][1], bl[ni][1]);
            }
        }
#pragma unroll
        for (int ni = 0; ni < 4; ni++)
#pragma unroll
            for (int mi = 0; mi < 2; mi++) {
                if (P == 1) mma_tf32(acc[mi][ni], ah[mi], bh[ni][0], bh[ni][1]);
                else mma_split_apart(acc[mi][ni], lo[mi][ni], ah[mi], al[mi], bh[ni][0], bl[ni][0], bh[ni][1],
                                     bl[ni][1]);
            }
        if (bias_rows)
#pragma unroll
            for (int kk = 0; kk < BK; kk++) bsum += A[tcv_at<A_INNER, BM, BK>(tid, kk)];
        buf = ring_after<TCK_STAGES>(buf);
    }

    /* The warps' sums into shared memory (A's buffers, once every copy has landed and every warp
     * is past its last slice), then each thread's eight outputs added over the warps in order. */
    __pipeline_wait_prior(0);
    __syncthreads();
    float *sums = &sa[0][0] + warp * (BM * TCK_PITCH);
#pragma unroll
    for (int mi = 0; mi < 2; mi++)
#pragma unroll
        for (int ni = 0; ni < 4; ni++)
#pragma unroll
            for (int q = 0; q < 4; q++)
                sums[(mi * 16 + g + (q >> 1) * 8) * TCK_PITCH + ni * 8 + 2 * t + (q & 1)] =
                    acc[mi][ni][q] + lo[mi][ni][q];
    __syncthreads();
    constexpr int E = BM * BN / NT;
    float flat[E];
    const float *all = &sa[0][0];
#pragma unroll
    for (int e = 0; e < E; e++) {
        const int at = (e * NT / BN + warp) * TCK_PITCH + lane;
        float v = all[at];
#pragma unroll
        for (int w = 1; w < TC_WARPS; w++) v += all[w * (BM * TCK_PITCH) + at];
        flat[e] = v;
    }
    own_tail<KIND, BM, BN, NT>(p, tile, split, row0, col0, flat, bsum, bias_rows,
                               [&](int e) { return make_int2(e * NT / BN + warp, lane); });
}

/* The widest copies (floats) an operand at m with pitch ld takes: 4 where every row or slice
 * starts 16-byte aligned, 2 where 8-byte, else 1 (the permuted layout). */
static int copy_width(const float *m, int ld)
{
    const uintptr_t at = (uintptr_t)m;
    if (at % 16 == 0 && ld % 4 == 0) return 4;
    if (at % 8 == 0 && ld % 2 == 0) return 2;
    return 1;
}

/* own_gemm_tck, the copy widths wa and wb (2 or 4). */
template <int K>
static bn_status run_natural(int one_product, int wa, int wb, dim3 grid, cudaStream_t s, const own_args &x)
{
    const dim3 block(TC_WARPS * 32);
#define NATURAL(WA, WB)                                                                    \
    if (wa == WA && wb == WB) {                                                            \
        if (one_product) bn_launch_early(own_gemm_tck<K, 1, WA, WB>, grid, block, 0, s, x); \
        else bn_launch_early(own_gemm_tck<K, 3, WA, WB>, grid, block, 0, s, x);          \
    }
    NATURAL(4, 4)
    else NATURAL(4, 2) else NATURAL(2, 4) else NATURAL(2, 2)
#undef NATURAL
    BN_CUDA_LAUNCH();
    return BN_OK;
}

/* One launch of own_gemm for the plan: A, B as own_gemm names them, C the output. */
extern "C" bn_status bn_dense_run_own_on(const own_plan *o, int kind, cudaStream_t s, const float *a, const float *b,
                                         float *c, const float *bias, float *db, relu_epi e)
{
    own_args x;
    x.relu = e;
    x.a = a;
    x.b = b;
    x.c = c;
    x.bias = bias;
    x.db = db;
    x.rows = o->rows;
    x.cols = o->cols;
    x.inner = o->inner;
    x.tiles_n = o->tiles_n;
    x.splits = o->splits;
    x.ktps = o->ktps;
    x.part = o->part;
    x.counters = o->counters;
    dim3 grid((unsigned)o->tiles, (unsigned)o->splits);
    const int wa = copy_width(a, kind != GEMM_DW ? o->inner : o->rows);
    const int wb = copy_width(b, kind == GEMM_FWD ? o->inner : o->cols);
    /* The cases follow own_cfg (dense_gemm_plan.cu). */
#define OWN_CASE(K, C, BM, BN, TM, TN)                                              \
    case K * OWN_CONFIGS + C:                                                      \
        bn_launch_early(own_gemm<K, BM, BN, TM, TN>, grid, dim3((BM / TM) * (BN / TN)), 0, s, x); \
        break;
#define TC_CASE(K, C, BM, BN)                                                                   \
    case K * OWN_CONFIGS + C:                                                                  \
        if (C == OWN_TC32 && wa > 1 && wb > 1) return run_natural<K>(o->one_product, wa, wb, grid, s, x); \
        if (o->one_product) bn_launch_early(own_gemm_tc<K, BM, BN, 1>, grid, dim3(TC_WARPS * 32), 0, s, x); \
        else bn_launch_early(own_gemm_tc<K, BM, BN, 3>, grid, dim3(TC_WARPS * 32), 0, s, x);          \
        break;
    switch (kind * OWN_CONFIGS + o->cfg) {
        OWN_CASE(GEMM_FWD, OWN_FMA64, 64, 64, 4, 4)
        OWN_CASE(GEMM_FWD, OWN_FMA32, 32, 32, 2, 2)
        OWN_CASE(GEMM_DW, OWN_FMA64, 64, 64, 4, 4)
        OWN_CASE(GEMM_DW, OWN_FMA32, 32, 32, 2, 2)
        OWN_CASE(GEMM_DX, OWN_FMA64, 64, 64, 4, 4)
        OWN_CASE(GEMM_DX, OWN_FMA32, 32, 32, 2, 2)
        TC_CASE(GEMM_FWD, OWN_TC64, 64, 64)
        TC_CASE(GEMM_FWD, OWN_TC32, 32, 32)
        TC_CASE(GEMM_DW, OWN_TC64, 64, 64)
        TC_CASE(GEMM_DW, OWN_TC32, 32, 32)
        TC_CASE(GEMM_DX, OWN_TC64, 64, 64)
        TC_CASE(GEMM_DX, OWN_TC32, 32, 32)
    default:
        return bn_error(BN_ERR_DEVICE, "dense: no kernel for product %d, configuration %d", kind, o->cfg);
    }
#undef OWN_CASE
#undef TC_CASE
    BN_CUDA_LAUNCH();
    return BN_OK;
}

extern "C" bn_status bn_dense_run_own(const own_plan *o, int kind, const bn_ctx *ctx, const float *a, const float *b,
                                      float *c, const float *bias, float *db, relu_epi e)
{
    return bn_dense_run_own_on(o, kind, (cudaStream_t)ctx->stream, a, b, c, bias, db, e);
}

BN_CODE_ANCHOR(dense_gemm, own_gemm_tc<0, 32, 32, 1>) /* code_load.cu */
