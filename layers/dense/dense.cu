/* dense.cu - the dense layer on the GPU. The three products go through cuBLASLt, which is
 * column-major: a row-major (r x c) matrix is, read column-major, its (c x r) transpose, so
 * Y = X W^T is computed as Y^T = W X^T, and so on:
 *
 *   forward   Y^T (m x n)  = op_T(W: k x m, ld k) * X^T (k x n, ld k)   + b   (bias epilogue)
 *   dW        dW^T (k x m) += X^T (k x n, ld k)  * op_T(dY: m x n, ld m)       (beta = 1)
 *   dX        dX^T (k x n) = W^T (k x m, ld k)   * dY^T (m x n, ld m)          (beta = 0)
 *
 * with n the batch, k the inputs and m the outputs. The forward bias is added by the GEMM's
 * BIAS epilogue: its vector has one entry per row of the column-major output, i.e. per output
 * unit, broadcast over the n columns (examples). The bias gradient is a column sum done by a
 * kernel in a fixed order, so it is deterministic, and it accumulates like dW.
 *
 * Each GEMM's algorithm is chosen once per (batch size, pointer alignment, TF32, rule or timing)
 * and kept in a plan, like conv2d.cu's: by the fixed rule (bn_ctx_by_rule: the default, and
 * always in a deterministic context) blobnet's kernels are taken, so that every run makes the
 * same choice; with ctx->autotune the cuBLASLt heuristic results (up to eight) and own_gemm are
 * timed on the context stream and the fastest kept. Plans are made on the first pass for a batch
 * size, which the trainer runs eagerly; once made, a pass only enqueues work (no allocation,
 * synchronisation or timing), so it can be captured in a CUDA graph. A plan asked for while
 * the stream is being captured takes the first heuristic result without timing.
 *
 * A plan may grow the context's shared workspace up to WORKSPACE_LIMIT, whatever the batch size:
 * a graph captured before the workspace was replaced is captured again (graph.h). Only a plan
 * asked for during a capture, when nothing may be allocated, makes do with what is there.
 *
 * Besides cuBLASLt's algorithms, the layer has its own GEMM kernels for these small products,
 * in two kinds: own_gemm (FP32 FMA, register-tiled) and own_gemm_tc (the TF32 tensor cores with
 * each operand split in two, so FP32 accuracy; mma_tf32.cuh), both with the same outer
 * structure: the output tiled over the whole GPU and, when there are
 * few tiles, the inner dimension split across blocks with the partial sums combined inside the
 * same kernel in a fixed order (per-tile counters the plan owns; no float atomics), so it is
 * deterministic. Its dW launch also adds the bias gradient, so no bias_grad launch follows it.
 * They join the timing in three configurations (a cuBLASLt dW candidate is timed together
 * with its bias_grad launch) and run when fastest; the rule takes them always, the tensor-core
 * kernel where the device has TF32 tensor cores, and the split by a fixed rule from the shape
 * and the SM count (one inner range for a plan made during capture, which cannot allocate the
 * counters).
 *
 * A layer with at most SKINNY_M outputs (LeNet's last) also has the few-outputs kernels for its
 * forward and input-gradient products: no tiles and no split reduction, a warp per example row
 * or a thread per group of inputs (skinny_fwd, skinny_dx). They join the timing too, and the
 * rule takes them wherever they fit (they are deterministic as well).
 *
 * Without ctx->tf32 the compute type is CUBLAS_COMPUTE_32F (plain FP32, like the CPU); with it,
 * CUBLAS_COMPUTE_32F_FAST_TF32, and own_gemm_tc takes one TF32 product per multiply instead of
 * three (own_plan.one_product). Should cuBLASLt offer no algorithm for a product, that product
 * goes through cublasSgemm as before (the bias then seeded into Y first). */
#include <stdint.h>
#include <stdlib.h>

#include <cublasLt.h>

#include <cuda_pipeline.h>

#include "gpu/cuda_check.h"
#include "gpu/pdl.cuh"
#include "gpu/last_arrival.cuh"
#include "gpu/mma_tf32.cuh"
#include "gpu/vec_ops.cuh"
#include "dense.h"
#include "softmax_ce.h"

enum { WEIGHT, BIAS };

/* The three products of the layer. */
enum { GEMM_FWD, GEMM_DW, GEMM_DX };

/* Column tile of the bias-gradient kernel: BIAS_COLS columns per block, BIAS_ROWS threads
 * walking down each column. */
#define BIAS_COLS 32
#define BIAS_ROWS 16

/* The most workspace one algorithm may ask for (these products are small). */
#define WORKSPACE_LIMIT ((size_t)8 << 20)
/* Heuristic results asked for, how many of them are timed, and the launches timed per result. */
#define HEURISTIC_RESULTS 8
#define TIMED_RESULTS 8
#define TIMING_REPS 10

/* Operand slots of a plan's pointer alignments. */
enum { OPND_A, OPND_B, OPND_D, OPND_BIAS, OPNDS };

/* The configurations of own_gemm, by their tiles {BM, BN}: OWN_FMA64 and OWN_FMA32, the FP32
 * FMA kernel (256 threads, 4 x 4 or 2 x 2 outputs each); OWN_TC64 and OWN_TC32, the tensor-core
 * kernel (128 threads). OWN_SKINNY, as a forced configuration: the few-outputs kernels where they
 * can run, else OWN_FMA32. */
enum { OWN_FMA64, OWN_FMA32, OWN_TC64, OWN_TC32, OWN_CONFIGS, OWN_SKINNY = OWN_CONFIGS };
static const int own_cfg[OWN_CONFIGS][2] = {{64, 64}, {32, 32}, {64, 64}, {32, 32}};
/* At most OWN_MAX_SPLITS inner ranges (OWN_RULE_SPLITS unless forced), at least OWN_MIN_SLICES
 * slices per range (unless forced), and at most OWN_PART_LIMIT bytes of partial sums per plan. */
#define OWN_MAX_SPLITS 32
#define OWN_RULE_SPLITS 16
#define OWN_MIN_SLICES 4
#define OWN_PART_LIMIT ((size_t)32 << 20)
/* Partial sums a thread of the last block has in flight at once while it adds them up. */
#define OWN_TAIL_FLOATS 32

/* How one product runs through own_gemm, and the counters and partial sums it owns. */
typedef struct own_plan {
    int cfg;                /* index into own_cfg */
    int rows, cols, inner;  /* the product as own_gemm sees it */
    int tiles_n, tiles;     /* column tiles, all tiles */
    int splits, ktps;       /* inner ranges, slices per range */
    unsigned *counters;     /* splits > 1: per-tile counters, zeroed at creation */
    float *part;            /* splits > 1: partial tiles */
    int one_product;        /* tensor cores: one TF32 product per multiply (tf32), not three */
} own_plan;

typedef struct dense_plan {
    int kind;                       /* GEMM_FWD, GEMM_DW or GEMM_DX */
    int n;                          /* batch size */
    int tf32, by_rule;              /* the context's TF32 flag and bn_ctx_by_rule when made */
    unsigned align[OPNDS];          /* pointer alignment (bytes) it was chosen for */
    int use_lt;                     /* 0: cuBLASLt offered nothing, use cublasSgemm */
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t a, b, d; /* C is D (same buffer, same layout) */
    cublasLtMatmulAlgo_t algo;
    size_t workspace;               /* bytes the algorithm needs */
    int forced_cfg, forced_splits;  /* bn_dense_gpu_force_own's setting it was made under */
    int own;                        /* 1: own_gemm runs the product (then use_lt is unused) */
    int skinny;                     /* 1: the few-outputs kernels run it (then own and use_lt are unused) */
    own_plan ow;
} dense_plan;

struct dense_gpu {
    cublasLtHandle_t lt;
    cudaEvent_t fork, join; /* dW on the side stream beside dX */
    dense_plan **plans;
    int num_plans;
    int sms;        /* the device's multiprocessors */
    int tensor_ok;  /* compute capability 8.0 or later: the TF32 tensor cores (OWN_TC64, OWN_TC32) */
};

/* y[i][o] = b[o] for every row i of the batch (the cublasSgemm fallback only). */
static __global__ void seed_bias(float *__restrict__ y, const float *__restrict__ b, size_t total, int m)
{
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) y[i] = b[i % m];
}

/* db[o] += sum over the n rows of dy[i][o]. Threads of a warp read consecutive columns (coalesced);
 * the BIAS_ROWS partial sums of a column are then added in a fixed order. */
static __global__ void bias_grad(const float *__restrict__ dy, int n, int m, float *__restrict__ db)
{
    __shared__ float part[BIAS_ROWS][BIAS_COLS + 1];
    int col = blockIdx.x * BIAS_COLS + threadIdx.x;
    float s = 0.0f;
    if (col < m)
        for (int i = threadIdx.y; i < n; i += BIAS_ROWS) s += dy[(size_t)i * m + col];
    part[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y == 0 && col < m) {
        float total = 0.0f;
        for (int r = 0; r < BIAS_ROWS; r++) total += part[r][threadIdx.x];
        db[col] += total;
    }
}

static int grid_for(size_t n)
{
    size_t b = (n + 255) / 256;
    return (int)(b < 1 ? 1 : b > 4096 ? 4096 : b);
}

/* ---- few outputs ---- */
/* Products of a layer with at most SKINNY_M outputs (a classifier's last layer), where a tiled
 * GEMM has almost nothing to tile and pays for a split reduction:
 *
 *   skinny_fwd: SKINNY_PARTS warps per example row i, each taking every SKINNY_PARTS-th piece
 *               of V inputs per lane and keeping one sum per output; each warp adds its lanes'
 *               sums by a fixed shuffle tree, then y[i][o] = the warps' sums in warp order + b[o].
 *   skinny_dx:  a thread per V consecutive inputs of a row: dx[i][c] = sum over o of
 *               dy[i][o] W[o][c], o in order.
 *
 * Both sum in a fixed order, so they are deterministic. */
#define SKINNY_M 16

/* Rows per block of skinny_fwd, and warps per row (each takes every SKINNY_PARTS-th piece of the
 * row's inputs). */
#define SKINNY_ROWS 2
#define SKINNY_PARTS 4

/* A fused ReLU (net fusion, bn_layer_ops.fuse_gpu) in a product's epilogue: FWD also writes
 * relu_y = max(Y, 0), the ReLU layer's output; DX also writes relu_dx = dX where mask (the
 * layer's input, which the ReLU wrote) is above 0 and 0 elsewhere, the ReLU layer's input
 * gradient. The CPU's rules (activation.c), so both give the same bits. */
typedef struct relu_epi {
    float *relu_y;
    const float *mask;
    float *relu_dx;
} relu_epi;

template <int M, int V>
static __global__ void __launch_bounds__(256) skinny_fwd(const float *__restrict__ x, const float *__restrict__ w,
                                                         const float *__restrict__ b, float *__restrict__ y, int n,
                                                         int k, float *__restrict__ relu_y)
{
    bn_early_entry(); /* pdl.cuh */
    typedef typename vec_of<V>::t vt;
    __shared__ float part[SKINNY_ROWS][SKINNY_PARTS][M];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int r = warp / SKINNY_PARTS, pt = warp % SKINNY_PARTS, row = blockIdx.x * SKINNY_ROWS + r;
    float acc[M];
#pragma unroll
    for (int o = 0; o < M; o++) acc[o] = 0.0f;
    if (row < n) {
        const vt *xr = (const vt *)(x + (size_t)row * k);
        const int kv = k / V;
#pragma unroll 2
        for (int i = pt * 32 + lane; i < kv; i += 32 * SKINNY_PARTS) {
            const vt xv = xr[i];
#pragma unroll
            for (int o = 0; o < M; o++) acc[o] = dot_v(xv, ((const vt *)(w + (size_t)o * k))[i], acc[o]);
        }
    }
#pragma unroll
    for (int o = 0; o < M; o++) {
        float v = acc[o];
#pragma unroll
        for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
        if (lane == 0) part[r][pt][o] = v;
    }
    __syncthreads();
    /* The warps' sums of a row in part order, then the bias. */
    if (threadIdx.x < SKINNY_ROWS * M) {
        const int rr = threadIdx.x / M, o = threadIdx.x - rr * M, orow = blockIdx.x * SKINNY_ROWS + rr;
        if (orow < n) {
            float sum = part[rr][0][o];
#pragma unroll
            for (int q = 1; q < SKINNY_PARTS; q++) sum += part[rr][q][o];
            const float v = sum + b[o];
            y[(size_t)orow * M + o] = v;
            if (relu_y) relu_y[(size_t)orow * M + o] = relu_of(v);
        }
    }
}

template <int M, int V>
static __global__ void __launch_bounds__(256) skinny_dx(const float *__restrict__ dy, const float *__restrict__ w,
                                                        float *__restrict__ dx, int n, int k,
                                                        const float *__restrict__ mask, float *__restrict__ relu_dx)
{
    bn_early_entry(); /* pdl.cuh */
    typedef typename vec_of<V>::t vt;
    const int groups = k / V;
    const long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (long long)n * groups) return;
    const int row = (int)(idx / groups), g = (int)(idx - (long long)row * groups);
    const float *d = dy + (size_t)row * M;
    vt acc = vt(); /* zeros */
#pragma unroll
    for (int o = 0; o < M; o++) axpy_v(d[o], ((const vt *)(w + (size_t)o * k))[g], acc);
    ((vt *)(dx + (size_t)row * k))[g] = acc;
    if (relu_dx) ((vt *)(relu_dx + (size_t)row * k))[g] = masked(acc, ((const vt *)(mask + (size_t)row * k))[g]);
}

template <int M, int V>
static void launch_skinny(int kind, cudaStream_t s, const float *a, const float *b, float *d, const float *bias, int n,
                          int k, relu_epi e)
{
    if (kind == GEMM_FWD) {
        const unsigned blocks = (unsigned)((n + SKINNY_ROWS - 1) / SKINNY_ROWS);
        bn_launch_early(skinny_fwd<M, V>, dim3(blocks), dim3(32 * SKINNY_ROWS * SKINNY_PARTS), 0, s, b, a, bias, d, n,
                        k, e.relu_y);
    } else {
        const long long threads = (long long)n * (k / V);
        bn_launch_early(skinny_dx<M, V>, dim3((unsigned)((threads + 255) / 256)), dim3(256), 0, s, b, a, d, n, k,
                        e.mask, e.relu_dx);
    }
}

template <int M>
static void launch_skinny_m(int kind, cudaStream_t s, int v, const float *a, const float *b, float *d,
                            const float *bias, int n, int k, relu_epi e)
{
    if (v == 4) launch_skinny<M, 4>(kind, s, a, b, d, bias, n, k, e);
    else if (v == 2) launch_skinny<M, 2>(kind, s, a, b, d, bias, n, k, e);
    else launch_skinny<M, 1>(kind, s, a, b, d, bias, n, k, e);
}

/* The forward (ga: W, X, Y, b) or input-gradient (ga: W, dY, dX) product by the kernels above,
 * one instance per output count (1 .. SKINNY_M), so that every loop over the outputs unrolls
 * and a lane's loads are all in flight at once, and per width of the loads the operands'
 * alignment allows (the parameters may sit at any 4-byte offset of their slab). */
static bn_status run_skinny(int kind, cudaStream_t s, const float *a, const float *b, float *d, const float *bias,
                            int n, int k, int m, relu_epi e)
{
    const uintptr_t all = (uintptr_t)a | (uintptr_t)b | (uintptr_t)d | (uintptr_t)e.mask | (uintptr_t)e.relu_dx;
    const int v = k % 4 == 0 && (all & 15) == 0 ? 4 : k % 2 == 0 && (all & 7) == 0 ? 2 : 1;
    switch (m) {
#define SKINNY_CASE(M)                                           \
    case M:                                                      \
        launch_skinny_m<M>(kind, s, v, a, b, d, bias, n, k, e);  \
        break;
        SKINNY_CASE(1) SKINNY_CASE(2) SKINNY_CASE(3) SKINNY_CASE(4) SKINNY_CASE(5) SKINNY_CASE(6)
        SKINNY_CASE(7) SKINNY_CASE(8) SKINNY_CASE(9) SKINNY_CASE(10) SKINNY_CASE(11) SKINNY_CASE(12)
        SKINNY_CASE(13) SKINNY_CASE(14) SKINNY_CASE(15) SKINNY_CASE(16)
#undef SKINNY_CASE
    default: return bn_error(BN_ERR_INTERNAL, "dense: no few-outputs kernel for %d outputs", m);
    }
    BN_CUDA_LAUNCH();
    return BN_OK;
}

/* Whether the few-outputs kernels can run a product. */
static bool skinny_fits(int kind, int n, int k, int m)
{
    /* skinny_dx's grid of n * k threads (at most one per input) stays within 2^31 blocks of 256. */
    return kind != GEMM_DW && m >= 1 && m <= SKINNY_M && k >= 1 && n >= 1 && (long long)n * k < (1LL << 39);
}

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
#define OWN_BK 16

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

    /* The epilogue reads everything it needs (the bias, or the dW and db it adds to) before its
     * first store: the compiler cannot rule out that a store changes what a later read gets, so
     * it keeps such reads after the store, and each store would wait for the one read it needs,
     * one memory latency per output. */
    const bool db_row = bias_rows && row0 + tid < p.rows;
    const float db_old = db_row ? p.db[row0 + tid] : 0.0f;
    float add[E];
#pragma unroll
    for (int e = 0; e < E; e++) {
        const int2 at = pos(e);
        const int r = row0 + at.x, c = col0 + at.y;
        add[e] = 0.0f;
        if (KIND == GEMM_FWD && c < p.cols) add[e] = p.bias[c];
        if (KIND == GEMM_DW && r < p.rows && c < p.cols) add[e] = p.c[(size_t)r * p.cols + c];
        if (KIND == GEMM_DX && p.relu.relu_dx && r < p.rows && c < p.cols) add[e] = p.relu.mask[(size_t)r * p.cols + c];
    }
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
        for (int l = 0; l < LA; l++) {
            int e = tid + l * NT;
            int r = A_INNER ? e / OWN_BK : e % BM, kk = A_INNER ? e % OWN_BK : e / BM;
            int gr = row0 + r, gk = kt + kk;
            ra[l] = 0.0f;
            if (gr < p.rows && gk < k1)
                ra[l] = A_INNER ? p.a[(size_t)gr * lda + gk] : p.a[(size_t)gk * lda + gr];
        }
#pragma unroll
        for (int l = 0; l < LB; l++) {
            int e = tid + l * NT;
            int c = B_INNER ? e / OWN_BK : e % BN, kk = B_INNER ? e % OWN_BK : e / BN;
            int gc = col0 + c, gk = kt + kk;
            rb[l] = 0.0f;
            if (gc < p.cols && gk < k1)
                rb[l] = B_INNER ? p.b[(size_t)gc * ldb + gk] : p.b[(size_t)gk * ldb + gc];
        }
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

/* The tensor-core kernel (mma_tf32.cuh: split TF32, FP32 accuracy; P = 1, for a tf32 context,
 * the value x value product alone, and `lo` stays zero): a BM x BN tile of C per
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

/* Four bytes from global src to shared dst (a shared-space address) by cp.async, or four zero
 * bytes when !in (src is then not read, and need not be valid). */
static __device__ __forceinline__ void copy4(uint32_t dst, const float *src, bool in)
{
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(dst), "l"(src), "r"(in ? 4 : 0) : "memory");
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

template <int KIND, int BM, int BN, int P>
__global__ void __launch_bounds__(TC_WARPS * 32) own_gemm_tc(own_args p)
{
    bn_early_entry(); /* pdl.cuh */
    constexpr int BK = OWN_BK, NT = TC_WARPS * 32;
    constexpr int MT = BM / 32, NTL = BN / 16; /* m16 and n8 products per warp */
    constexpr bool A_INNER = KIND != GEMM_DW, B_INNER = KIND == GEMM_FWD;
    constexpr int A_SIZE = A_INNER ? BM * TC_LDI : BK * (BM + 8), B_SIZE = B_INNER ? BN * TC_LDI : BK * (BN + 8);
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
#pragma unroll
    for (int s = 0; s < TC_STAGES - 1; s++) {
        if (s < slices) stage(s, k0 + s * BK);
        __pipeline_commit();
    }
    int buf = 0;
    for (int it = 0; it < slices; it++) {
        __pipeline_wait_prior(TC_STAGES - 2);
        __syncthreads(); /* slice it is in, and every warp is done with the buffer refilled next */
        const int next = it + TC_STAGES - 1;
        if (next < slices) stage(buf == 0 ? TC_STAGES - 1 : buf - 1, k0 + next * BK);
        __pipeline_commit();
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
            for (int kk = 0; kk < BK; kk++) bsum += A[tc_at<A_INNER, BM>(tid, kk)];
        buf = buf == TC_STAGES - 1 ? 0 : buf + 1;
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
/* ---- end of own GEMM kernels ---- */

/* ---- own GEMM plans ---- */



/* Forced by bn_dense_gpu_force_own: -1, or the configuration every new plan takes. */
static int force_cfg = -1, force_splits = 0;

extern "C" void bn_dense_gpu_force_own(int config, int splits)
{
    force_cfg = config >= 0 && config <= OWN_SKINNY ? config : -1;
    force_splits = splits > 0 ? splits : 0;
}

static void own_free(own_plan *o)
{
    bn_device_free(o->counters);
    bn_device_free(o->part);
    o->counters = NULL;
    o->part = NULL;
}

static size_t own_part_bytes(const own_plan *o)
{
    const int *c = own_cfg[o->cfg];
    return (size_t)o->tiles * o->splits * ((size_t)c[0] * c[1] + c[0]) * sizeof(float);
}

/* The tiling of the product for configuration cfg: inner ranges enough for about two blocks per
 * SM (for the tensor-core kernel too: on an H100, one, four or eight per SM, or ranges of two
 * slices, gave LeNet's epochs no gain or a loss), but none shorter than OWN_MIN_SLICES slices and at most OWN_RULE_SPLITS of them
 * (want_splits > 0 asks for that many instead); one range when `no_alloc` (a plan made during
 * capture cannot allocate counters). A block waits about one memory latency per slice of its
 * range, and the last block of a tile then about one per OWN_TAIL_FLOATS / (TM TN) of the
 * splits it adds up: more, shorter ranges shorten the first part but lengthen the second, so
 * both bounds keep the sum short. */
static own_plan own_layout(int kind, int n, int k, int m, int cfg, int sms, int want_splits, int no_alloc)
{
    own_plan o = {};
    o.cfg = cfg;
    o.rows = kind == GEMM_DW ? m : n;
    o.cols = kind == GEMM_FWD ? m : k;
    o.inner = kind == GEMM_FWD ? k : kind == GEMM_DW ? n : m;
    const int bm = own_cfg[cfg][0], bn = own_cfg[cfg][1];
    o.tiles_n = (o.cols + bn - 1) / bn;
    o.tiles = ((o.rows + bm - 1) / bm) * o.tiles_n;
    int slices = (o.inner + OWN_BK - 1) / OWN_BK;
    long s;
    if (want_splits > 0) s = want_splits;
    else {
        long target = 2L * (sms > 0 ? sms : 1);
        s = (target + o.tiles - 1) / o.tiles;
        if (s > slices / OWN_MIN_SLICES) s = slices / OWN_MIN_SLICES;
        if (s > OWN_RULE_SPLITS) s = OWN_RULE_SPLITS;
    }
    if (s > OWN_MAX_SPLITS) s = OWN_MAX_SPLITS;
    if (s > slices) s = slices;
    if (s < 1 || no_alloc) s = 1;
    o.splits = (int)s;
    while (o.splits > 1 && own_part_bytes(&o) > OWN_PART_LIMIT) o.splits--;
    /* Equal ranges, none empty. */
    o.ktps = (slices + o.splits - 1) / o.splits;
    o.splits = (slices + o.ktps - 1) / o.ktps;
    return o;
}

/* The configuration the rule takes: the tensor-core kernel's 32x32 tiles where the device has
 * them (measured on an H100 for LeNet's ip1 at batch 64 and 256, they beat the 64x64 tiles in
 * all three products: the larger tiles need more inner ranges to fill the GPU, and a longer
 * reduction after them); otherwise the large FMA tiles when they alone fill the GPU, the small
 * ones (with inner ranges) if not. */
static int own_rule(const dense_gpu *g, int kind, int n, int k, int m)
{
    if (g->tensor_ok) return OWN_TC32;
    own_plan big = own_layout(kind, n, k, m, OWN_FMA64, g->sms, 1, 1);
    return big.tiles >= g->sms ? OWN_FMA64 : OWN_FMA32;
}

/* Allocates and zeroes the counters and partial sums a layout with splits needs. */
static bn_status own_alloc(own_plan *o)
{
    if (o->splits <= 1) return BN_OK;
    BN_TRY(bn_device_alloc((void **)&o->counters, (size_t)o->tiles * sizeof(unsigned)));
    BN_TRY(bn_device_zero(o->counters, (size_t)o->tiles * sizeof(unsigned)));
    BN_TRY(bn_device_alloc((void **)&o->part, own_part_bytes(o)));
    return BN_OK;
}

/* One launch of own_gemm for the plan: A, B as own_gemm names them, C the output. */
static const relu_epi NO_RELU = {NULL, NULL, NULL};

static bn_status run_own_on(const own_plan *o, int kind, cudaStream_t s, const float *a, const float *b, float *c,
                            const float *bias, float *db, relu_epi e);

static bn_status run_own(const own_plan *o, int kind, const bn_ctx *ctx, const float *a, const float *b, float *c,
                         const float *bias, float *db, relu_epi e)
{
    return run_own_on(o, kind, (cudaStream_t)ctx->stream, a, b, c, bias, db, e);
}

static bn_status run_own_on(const own_plan *o, int kind, cudaStream_t s, const float *a, const float *b, float *c,
                            const float *bias, float *db, relu_epi e)
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
    /* The cases follow own_cfg. */
#define OWN_CASE(K, C, BM, BN, TM, TN)                                              \
    case K * OWN_CONFIGS + C:                                                      \
        bn_launch_early(own_gemm<K, BM, BN, TM, TN>, grid, dim3((BM / TM) * (BN / TN)), 0, s, x); \
        break;
#define TC_CASE(K, C, BM, BN)                                                                   \
    case K * OWN_CONFIGS + C:                                                                  \
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

/* ---- plans ---- */

static void plan_free(dense_plan *p)
{
    if (!p) return;
    if (p->a) cublasLtMatrixLayoutDestroy(p->a);
    if (p->b) cublasLtMatrixLayoutDestroy(p->b);
    if (p->d) cublasLtMatrixLayoutDestroy(p->d);
    if (p->op) cublasLtMatmulDescDestroy(p->op);
    own_free(&p->ow);
    free(p);
}

extern "C" void bn_dense_gpu_release(dense_priv *dp)
{
    dense_gpu *g = dp->gpu;
    if (!g) return;
    for (int i = 0; i < g->num_plans; i++) plan_free(g->plans[i]);
    free(g->plans);
    if (g->lt) cublasLtDestroy(g->lt);
    if (g->fork) cudaEventDestroy(g->fork);
    if (g->join) cudaEventDestroy(g->join);
    free(g);
    dp->gpu = NULL;
}

/* The largest power of two (at most 256) dividing the address; 256 for NULL. */
static unsigned align_of(const void *p)
{
    uintptr_t a = (uintptr_t)p;
    if (a == 0) return 256;
    uintptr_t low = a & (~a + 1);
    return low >= 256 ? 256u : (unsigned)low;
}

/* The stored (column-major) shape of a product's operands A, B and D (C is D), and the
 * transposes applied to A and B. Every operand is packed: its leading dimension is its rows. */
typedef struct gemm_shape {
    uint64_t rows[3], cols[3];
    cublasOperation_t ta, tb;
} gemm_shape;

static void set_operand(gemm_shape *s, int i, int rows, int cols)
{
    s->rows[i] = (uint64_t)rows;
    s->cols[i] = (uint64_t)cols;
}

static gemm_shape shape_of(int kind, int n, int k, int m)
{
    gemm_shape s;
    switch (kind) {
    case GEMM_FWD: /* Y^T (m x n) = op_T(W, stored k x m) * X^T (k x n) */
        set_operand(&s, 0, k, m);
        set_operand(&s, 1, k, n);
        set_operand(&s, 2, m, n);
        s.ta = CUBLAS_OP_T;
        s.tb = CUBLAS_OP_N;
        break;
    case GEMM_DW: /* dW^T (k x m) += X^T (k x n) * op_T(dY^T, stored m x n) */
        set_operand(&s, 0, k, n);
        set_operand(&s, 1, m, n);
        set_operand(&s, 2, k, m);
        s.ta = CUBLAS_OP_N;
        s.tb = CUBLAS_OP_T;
        break;
    default: /* GEMM_DX: dX^T (k x n) = W^T (stored k x m) * dY^T (m x n) */
        set_operand(&s, 0, k, m);
        set_operand(&s, 1, m, n);
        set_operand(&s, 2, k, n);
        s.ta = CUBLAS_OP_N;
        s.tb = CUBLAS_OP_N;
        break;
    }
    return s;
}

/* One launch of the plan's algorithm: D = alpha op(A) op(B) + beta D (+ bias, set in op). */
static cublasStatus_t run_lt(const dense_gpu *g, const dense_plan *p, const bn_ctx *ctx, const void *A,
                             const void *B, float beta, void *D, const cublasLtMatmulAlgo_t *algo)
{
    const float one = 1.0f;
    return cublasLtMatmul(g->lt, p->op, &one, A, p->a, B, p->b, &beta, D, p->d, D, p->d, algo, ctx->workspace,
                          ctx->workspace_size, (cudaStream_t)ctx->stream);
}

/* The operation and layout descriptors of a plan for its kind and batch size. */
static bn_status describe(dense_plan *p, int k, int m, const float *bias)
{
    gemm_shape s = shape_of(p->kind, p->n, k, m);
    BN_CUBLAS(cublasLtMatmulDescCreate(&p->op, p->tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F,
                                       CUDA_R_32F));
    BN_CUBLAS(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &s.ta, sizeof s.ta));
    BN_CUBLAS(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &s.tb, sizeof s.tb));
    if (p->kind == GEMM_FWD) {
        cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
        BN_CUBLAS(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
        /* The heuristics read the pointer's value for its alignment; each pass sets it again. */
        BN_CUBLAS(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    }
    BN_CUBLAS(cublasLtMatrixLayoutCreate(&p->a, CUDA_R_32F, s.rows[0], s.cols[0], (int64_t)s.rows[0]));
    BN_CUBLAS(cublasLtMatrixLayoutCreate(&p->b, CUDA_R_32F, s.rows[1], s.cols[1], (int64_t)s.rows[1]));
    BN_CUBLAS(cublasLtMatrixLayoutCreate(&p->d, CUDA_R_32F, s.rows[2], s.cols[2], (int64_t)s.rows[2]));
    return BN_OK;
}

/* Asks the heuristics for up to HEURISTIC_RESULTS algorithms that fit `limit` bytes of
 * workspace and the plan's pointer alignments; *got is 0 when cuBLASLt supports none. */
static bn_status heuristics(const dense_gpu *g, const dense_plan *p, size_t limit,
                            cublasLtMatmulHeuristicResult_t *r, int *got)
{
    *got = 0;
    cublasLtMatmulPreference_t pref;
    BN_CUBLAS(cublasLtMatmulPreferenceCreate(&pref));
    uint64_t ws = limit;
    uint32_t al[4] = {p->align[OPND_A], p->align[OPND_B], p->align[OPND_D], p->align[OPND_D]};
    cublasStatus_t s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                                            sizeof ws);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al[0], sizeof al[0]);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al[1], sizeof al[1]);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al[2], sizeof al[2]);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al[3], sizeof al[3]);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulAlgoGetHeuristic(g->lt, p->op, p->a, p->b, p->d, p->d, pref, HEURISTIC_RESULTS, r, got);
    cublasLtMatmulPreferenceDestroy(pref);
    if (s == CUBLAS_STATUS_NOT_SUPPORTED) { /* no algorithm for this configuration */
        *got = 0;
        return BN_OK;
    }
    BN_CUBLAS(s);
    /* Keep the usable results only, in the heuristics' order (fastest estimate first). */
    int kept = 0;
    for (int i = 0; i < *got; i++)
        if (r[i].state == CUBLAS_STATUS_SUCCESS && r[i].workspaceSize <= limit) r[kept++] = r[i];
    *got = kept;
    return BN_OK;
}

/* The operands of one product: A, B, D (also C), the bias (forward only), beta, and the bias
 * gradient (DW only: own_gemm adds to it when it runs the product). */
typedef struct gemm_args {
    const float *a, *b;
    float *d;
    const float *bias;
    float beta;
    float *db;
    relu_epi relu;  /* FWD, DX: a fused ReLU (zeros: none) */
} gemm_args;

/* The candidates of a plan: `lt` cuBLASLt heuristic results, then `owns` own_gemm layouts, then
 * (skinny = 1) the few-outputs kernels. */
typedef struct candidates {
    const cublasLtMatmulHeuristicResult_t *r;
    int lt;
    const own_plan *own;
    int owns;
    int skinny;
    int k;      /* the layer's inputs (the few-outputs kernels take the shape) */
} candidates;

/* One launch of candidate i with its output in d (and the bias gradient in db for DW: a
 * cuBLASLt candidate is followed by the bias_grad launch it would need, own_gemm fuses it);
 * *ok is 0 when a cuBLASLt candidate fails to run. */
static bn_status run_candidate(const dense_gpu *g, const dense_plan *p, const bn_ctx *ctx, const gemm_args *ga,
                               const candidates *c, int i, float *d, float *db, int n, int m, int *ok)
{
    if (i < c->lt) {
        *ok = run_lt(g, p, ctx, ga->a, ga->b, ga->beta, d, &c->r[i].algo) == CUBLAS_STATUS_SUCCESS;
        if (*ok && p->kind == GEMM_DW) {
            dim3 threads(BIAS_COLS, BIAS_ROWS);
            bias_grad<<<(m + BIAS_COLS - 1) / BIAS_COLS, threads, 0, (cudaStream_t)ctx->stream>>>(ga->b, n, m, db);
            *ok = cudaGetLastError() == cudaSuccess;
        }
        return BN_OK;
    }
    cudaGetLastError(); /* nothing left over from a failed cuBLASLt candidate */
    *ok = 1;
    if (i == c->lt + c->owns)
        return run_skinny(p->kind, (cudaStream_t)ctx->stream, ga->a, ga->b, d, ga->bias, n, c->k, m, NO_RELU);
    return run_own(&c->own[i - c->lt], p->kind, ctx, ga->b, ga->a, d, ga->bias, p->kind == GEMM_DW ? db : NULL,
                   NO_RELU);
}

/* Milliseconds per launch of each candidate (INFINITY for one that fails to run), timed on the
 * context stream with D in scratch, so that no real output is touched. */
static bn_status time_candidates(const dense_gpu *g, const dense_plan *p, const bn_ctx *ctx, const gemm_args *ga,
                                 const candidates *c, float *scratch, float *scratch_db, int n, int m,
                                 cudaEvent_t start, cudaEvent_t stop, float *ms)
{
    cudaStream_t s = (cudaStream_t)ctx->stream;
    for (int i = 0; i < c->lt + c->owns + c->skinny; i++) {
        ms[i] = INFINITY;
        /* One untimed launch: it must run at all, and it warms caches and lazy loading. */
        int ok = 0;
        BN_TRY(run_candidate(g, p, ctx, ga, c, i, scratch, scratch_db, n, m, &ok));
        if (!ok) continue;
        BN_CUDA(cudaEventRecord(start, s));
        for (int rep = 0; rep < TIMING_REPS && ok; rep++)
            BN_TRY(run_candidate(g, p, ctx, ga, c, i, scratch, scratch_db, n, m, &ok));
        BN_CUDA(cudaEventRecord(stop, s));
        BN_CUDA(cudaEventSynchronize(stop));
        float total = 0.0f;
        BN_CUDA(cudaEventElapsedTime(&total, start, stop));
        if (ok) ms[i] = total / TIMING_REPS;
    }
    cudaGetLastError(); /* a candidate that failed to launch leaves no error for later checks */
    return BN_OK;
}

/* Times the candidates (scratch and events made and freed here) and returns the fastest in
 * *best, or -1 when none ran. */
static bn_status fastest(const dense_gpu *g, const dense_plan *p, const bn_ctx *ctx, const gemm_args *ga,
                         size_t out_bytes, int n, int m, const candidates *c, int *best)
{
    *best = -1;
    void *scratch = NULL;
    size_t bytes = out_bytes + (size_t)m * sizeof(float);
    BN_TRY(bn_device_alloc(&scratch, bytes));
    void *start = NULL, *stop = NULL;
    float ms[HEURISTIC_RESULTS + OWN_CONFIGS + 1];
    bn_status st = bn_device_zero(scratch, bytes);
    if (st == BN_OK) st = bn_event_create(&start);
    if (st == BN_OK) st = bn_event_create(&stop);
    if (st == BN_OK)
        st = time_candidates(g, p, ctx, ga, c, (float *)scratch, (float *)scratch + out_bytes / sizeof(float), n, m,
                             (cudaEvent_t)start, (cudaEvent_t)stop, ms);
    bn_event_destroy(start);
    bn_event_destroy(stop);
    bn_device_free(scratch); /* after the last timed launch: cudaFree waits for the device */
    BN_TRY(st);
    for (int i = 0; i < c->lt + c->owns + c->skinny; i++)
        if (ms[i] < INFINITY && (*best < 0 || ms[i] < ms[*best])) *best = i;
    return BN_OK;
}

/* Takes cuBLASLt result `pick` of r (or the cublasSgemm fallback when there is none) and
 * reserves the workspace it needs. */
static bn_status take_lt(dense_plan *p, bn_ctx *ctx, const cublasLtMatmulHeuristicResult_t *r, int got, int pick)
{
    if (got == 0) {
        p->use_lt = 0;
        return BN_OK;
    }
    BN_TRY(bn_ctx_reserve_workspace(ctx, r[pick].workspaceSize));
    p->use_lt = 1;
    p->algo = r[pick].algo;
    p->workspace = r[pick].workspaceSize;
    return BN_OK;
}

/* Chooses how a described plan runs (n = p->n, inputs k, outputs m):
 * - forced (bn_dense_gpu_force_own) or by the rule (bn_ctx_by_rule): own_gemm, its configuration
 *   and inner ranges by a fixed rule (own_rule, own_layout) from the shape and the SM count,
 *   never by timing; a plan made during capture takes one inner range (it cannot allocate);
 * - otherwise, with `measure`: the fastest of the first TIMED_RESULTS cuBLASLt heuristic
 *   results (which fit `limit` bytes of workspace) and own_gemm in each configuration;
 * - otherwise (capture): the first usable heuristic result.
 * Reserves the workspace the chosen cuBLASLt algorithm needs. */
static bn_status choose(const dense_gpu *g, dense_plan *p, bn_ctx *ctx, const gemm_args *ga, int k, int m,
                        size_t out_bytes, size_t limit, int measure, int capturing)
{
    int n = p->n;
    const bool skinny = skinny_fits(p->kind, n, k, m);
    /* The few-outputs kernels when forced, and by the rule wherever they fit. */
    if (skinny && (p->forced_cfg == OWN_SKINNY || (p->forced_cfg < 0 && bn_ctx_by_rule(ctx)))) {
        p->skinny = 1;
        return BN_OK;
    }
    if (p->forced_cfg >= 0 || bn_ctx_by_rule(ctx)) {
        int cfg = p->forced_cfg == OWN_SKINNY ? OWN_FMA32 : p->forced_cfg >= 0 ? p->forced_cfg : own_rule(g, p->kind, n, k, m);
        if ((cfg == OWN_TC64 || cfg == OWN_TC32) && !g->tensor_ok) cfg = cfg == OWN_TC64 ? OWN_FMA64 : OWN_FMA32;
        p->ow = own_layout(p->kind, n, k, m, cfg, g->sms, p->forced_cfg >= 0 ? p->forced_splits : 0, capturing);
        p->ow.one_product = p->tf32;
        BN_TRY(own_alloc(&p->ow));
        p->own = 1;
        return BN_OK;
    }
    cublasLtMatmulHeuristicResult_t r[HEURISTIC_RESULTS];
    int got = 0;
    BN_TRY(heuristics(g, p, limit, r, &got));
    if (!measure) return take_lt(p, ctx, r, got, 0);
    int count = got < TIMED_RESULTS ? got : TIMED_RESULTS;
    size_t need = 0;
    for (int i = 0; i < count; i++)
        if (r[i].workspaceSize > need) need = r[i].workspaceSize;
    BN_TRY(bn_ctx_reserve_workspace(ctx, need));
    own_plan own[OWN_CONFIGS] = {};
    bn_status st = BN_OK;
    const int owns = g->tensor_ok ? OWN_CONFIGS : OWN_TC64;
    for (int c = 0; c < owns && st == BN_OK; c++) {
        own[c] = own_layout(p->kind, n, k, m, c, g->sms, 0, 0);
        own[c].one_product = p->tf32;
        st = own_alloc(&own[c]);
    }
    candidates cand = {r, count, own, owns, skinny ? 1 : 0, k};
    int pick = -1;
    if (st == BN_OK) st = fastest(g, p, ctx, ga, out_bytes, n, m, &cand, &pick);
    for (int c = 0; c < owns; c++)
        if (st != BN_OK || pick != count + c) own_free(&own[c]);
    BN_TRY(st);
    if (pick == count + owns) {
        p->skinny = 1;
        return BN_OK;
    }
    if (pick >= count) {
        p->ow = own[pick - count];
        p->own = 1;
        return BN_OK;
    }
    /* A cuBLASLt result, or none ran while timed: the first (the call reports why). */
    return take_lt(p, ctx, r, got, pick < 0 ? 0 : pick);
}

static bool plan_fits(const dense_plan *p, int kind, int n, const bn_ctx *ctx, const unsigned *align)
{
    if (p->kind != kind || p->n != n || p->tf32 != (ctx->tf32 != 0) || p->by_rule != (bn_ctx_by_rule(ctx) != 0))
        return false;
    if (p->forced_cfg != force_cfg || p->forced_splits != force_splits) return false;
    for (int i = 0; i < OPNDS; i++)
        if (align[i] < p->align[i]) return false;
    return true;
}

/* Makes a plan for the product: descriptors, then the algorithm. */
static bn_status make_plan(bn_layer *l, dense_gpu *g, bn_ctx *ctx, dense_plan *p, const gemm_args *ga)
{
    const dense_priv *dp = (const dense_priv *)l->priv;
    int k = dp->inputs, m = dp->outputs;
    BN_TRY(describe(p, k, m, ga->bias));
    cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
    BN_CUDA(cudaStreamIsCapturing((cudaStream_t)ctx->stream, &cap));
    int capturing = cap != cudaStreamCaptureStatusNone;
    /* Up to WORKSPACE_LIMIT (see the top of the file), the same for every batch size, so that
     * a choice does not depend on what other layers reserved. */
    size_t limit = WORKSPACE_LIMIT;
    if (capturing && ctx->workspace_size < limit) limit = ctx->workspace_size;
    gemm_shape s = shape_of(p->kind, p->n, k, m);
    size_t out_bytes = (size_t)s.rows[2] * s.cols[2] * sizeof(float);
    return choose(g, p, ctx, ga, k, m, out_bytes, limit, !capturing, capturing);
}

/* The GPU state and the plan for this product at the current batch size and pointers, made on
 * first use. */
static bn_status prepare(bn_layer *l, bn_ctx *ctx, int kind, const gemm_args *ga, dense_gpu **gpu,
                         dense_plan **plan)
{
    dense_priv *dp = (dense_priv *)l->priv;
    if (!dp->gpu) {
        dp->gpu = (dense_gpu *)calloc(1, sizeof *dp->gpu);
        if (!dp->gpu) return bn_error(BN_ERR_NOMEM, "layer %s: out of host memory", l->name);
        cublasLtHandle_t h = NULL;
        cublasStatus_t s = cublasLtCreate(&h);
        if (s != CUBLAS_STATUS_SUCCESS) {
            bn_dense_gpu_release(dp);
            BN_CUBLAS(s);
        }
        dp->gpu->lt = h;
        if (cudaEventCreateWithFlags(&dp->gpu->fork, cudaEventDisableTiming) != cudaSuccess ||
            cudaEventCreateWithFlags(&dp->gpu->join, cudaEventDisableTiming) != cudaSuccess) {
            bn_dense_gpu_release(dp);
            BN_CUDA(cudaGetLastError());
        }
        int sms = 0;
        if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, ctx->device) != cudaSuccess || sms < 1) {
            cudaGetLastError();
            sms = 1;
        }
        dp->gpu->sms = sms;
        int major = 0;
        if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, ctx->device) != cudaSuccess) {
            cudaGetLastError();
            major = 0;
        }
        dp->gpu->tensor_ok = major >= 8;
    }
    dense_gpu *g = dp->gpu;
    *gpu = g;
    int n = l->in->n;
    unsigned align[OPNDS] = {align_of(ga->a), align_of(ga->b), align_of(ga->d), align_of(ga->bias)};
    for (int i = 0; i < g->num_plans; i++)
        if (plan_fits(g->plans[i], kind, n, ctx, align)) {
            *plan = g->plans[i];
            return BN_OK;
        }
    dense_plan *p = (dense_plan *)calloc(1, sizeof *p);
    if (!p) return bn_error(BN_ERR_NOMEM, "layer %s: out of host memory", l->name);
    p->kind = kind;
    p->n = n;
    p->tf32 = ctx->tf32 != 0;
    p->by_rule = bn_ctx_by_rule(ctx) != 0;
    p->forced_cfg = force_cfg;
    p->forced_splits = force_splits;
    for (int i = 0; i < OPNDS; i++) p->align[i] = align[i];
    bn_status s = make_plan(l, g, ctx, p, ga);
    dense_plan **grown = s == BN_OK ? (dense_plan **)realloc(g->plans, (size_t)(g->num_plans + 1) * sizeof *grown)
                                    : NULL;
    if (s == BN_OK && !grown) s = bn_error(BN_ERR_NOMEM, "layer %s: out of host memory", l->name);
    if (s != BN_OK) {
        plan_free(p);
        return s;
    }
    g->plans = grown;
    g->plans[g->num_plans++] = p;
    *plan = p;
    return BN_OK;
}

/* ---- the cublasSgemm fallback ---- */

/* FP32 FMA unless the context allows TF32 tensor cores. The handle is shared, so the mode is
 * set before every use rather than once. */
static bn_status blas_for(const bn_ctx *ctx, cublasHandle_t *h)
{
    *h = (cublasHandle_t)ctx->cublas;
    BN_CUBLAS(cublasSetMathMode(*h, ctx->tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
    return BN_OK;
}

/* The product through cublasSgemm, with the operands as shape_of describes them. */
static bn_status run_sgemm(const bn_ctx *ctx, int kind, int n, int k, int m, const gemm_args *ga)
{
    cublasHandle_t h = NULL;
    BN_TRY(blas_for(ctx, &h));
    gemm_shape s = shape_of(kind, n, k, m);
    /* op(A) is (rows of D) x inner, op(B) inner x (cols of D) */
    int rows = (int)s.rows[2], cols = (int)s.cols[2];
    int inner = kind == GEMM_FWD ? k : kind == GEMM_DW ? n : m;
    const float one = 1.0f;
    BN_CUBLAS(cublasSgemm(h, s.ta, s.tb, rows, cols, inner, &one, ga->a, (int)s.rows[0], ga->b, (int)s.rows[1],
                          &ga->beta, ga->d, (int)s.rows[2]));
    return BN_OK;
}

/* Runs one product through its plan (or the fallback). *fused (DW, may be NULL) is set to 1
 * when the bias gradient ga->db was added too. A fused ReLU (ga->relu) goes into the epilogue of
 * blobnet's kernels; cuBLAS's have none, so *relu_done (may be NULL) says whether it ran. */
static bn_status gemm(bn_layer *l, bn_ctx *ctx, int kind, const gemm_args *ga, int *fused, int *relu_done)
{
    const dense_priv *dp = (const dense_priv *)l->priv;
    dense_gpu *g = NULL;
    dense_plan *p = NULL;
    if (fused) *fused = 0;
    BN_TRY(prepare(l, ctx, kind, ga, &g, &p));
    if (relu_done) *relu_done = p->skinny || p->own;
    int n = l->in->n, k = dp->inputs, m = dp->outputs;
    if (p->skinny)
        return run_skinny(kind, (cudaStream_t)ctx->stream, ga->a, ga->b, ga->d, ga->bias, n, k, m, ga->relu);
    if (p->own) {
        float *db = kind == GEMM_DW ? ga->db : NULL;
        BN_TRY(run_own(&p->ow, kind, ctx, ga->b, ga->a, ga->d, ga->bias, db, ga->relu));
        if (fused) *fused = db != NULL;
        return BN_OK;
    }
    if (!p->use_lt) {
        if (kind == GEMM_FWD) { /* seed the bias, then accumulate onto it */
            size_t total = (size_t)n * m;
            seed_bias<<<grid_for(total), 256, 0, (cudaStream_t)ctx->stream>>>(ga->d, ga->bias, total, m);
            BN_CUDA_LAUNCH();
            gemm_args acc = *ga;
            acc.beta = 1.0f;
            return run_sgemm(ctx, kind, n, k, m, &acc);
        }
        return run_sgemm(ctx, kind, n, k, m, ga);
    }
    if (kind == GEMM_FWD)
        BN_CUBLAS(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &ga->bias,
                                                 sizeof ga->bias));
    BN_CUBLAS(run_lt(g, p, ctx, ga->a, ga->b, ga->beta, ga->d, &p->algo));
    return BN_OK;
}

extern "C" bn_status bn_dense_forward_gpu(bn_layer *l, const bn_pass *p)
{
    BN_DEV_RD(x, l->in);
    BN_DEV_RD(w, l->params[WEIGHT].value);
    BN_DEV_RD(b, l->params[BIAS].value);
    BN_DEV_WR(y, l->out);
    dense_priv *dp = (dense_priv *)l->priv;
    if (dp->loss_after) { /* the loss layer's kernel computes Y (bn_dense_fuse_next) */
        bn_softmax_head h = {x, w, b, dp->inputs, y, NULL, NULL};
        const int grad = l->in_grad && bn_softmax_ce_grad_in_forward(dp->loss_after, p);
        if (grad && !(h.dx = bn_blob_dev_wr(l->in_grad))) return bn_last_status();
        if (grad && dp->relu_before && !(h.relu_dx = bn_blob_dev_wr(dp->relu_before->in_grad)))
            return bn_last_status();
        BN_TRY(bn_softmax_ce_head_gpu(dp->loss_after, p, &h));
        dp->dx_written = grad;
        return BN_OK;
    }
    /* Y^T = op_T(W) X^T + b, beta = 0: Y's old contents are not read. */
    gemm_args ga = {w, x, y, b, 0.0f, NULL, NO_RELU};
    const dense_priv *d = (const dense_priv *)l->priv;
    if (d->relu_after) {
        BN_DEV_WR(relu_y, d->relu_after->out);
        ga.relu.relu_y = relu_y;
    }
    int relu_done = 0;
    BN_TRY(gemm(l, p->ctx, GEMM_FWD, &ga, NULL, &relu_done));
    /* After a cuBLAS product the ReLU layer runs its own pass on what it wrote. */
    if (d->relu_after && !relu_done) return d->relu_after->ops->forward_gpu(d->relu_after, p);
    return BN_OK;
}

/* The input gradient by an own plan (own_gemm or the few-outputs kernels). */
static bn_status run_dx(const dense_plan *px, const bn_ctx *ctx, const gemm_args *gx, int n, int k, int m)
{
    if (px->skinny)
        return run_skinny(GEMM_DX, (cudaStream_t)ctx->stream, gx->a, gx->b, gx->d, NULL, n, k, m, gx->relu);
    return run_own(&px->ow, GEMM_DX, ctx, gx->b, gx->a, gx->d, gx->bias, NULL, gx->relu);
}

extern "C" bn_status bn_dense_backward_gpu(bn_layer *l, const bn_pass *p)
{
    dense_priv *d = (dense_priv *)l->priv;
    int n = l->in->n, m = d->outputs;
    /* The dense head wrote dX (and the fused ReLU's gradient) in this step's forward. */
    const int dx_done = d->dx_written;
    d->dx_written = 0;
    BN_DEV_RD(x, l->in);
    BN_DEV_RD(w, l->params[WEIGHT].value);
    BN_DEV_RD(dy, l->out_grad);
    BN_DEV_WR(dw, l->params[WEIGHT].grad);
    BN_DEV_WR(db, l->params[BIAS].grad);
    /* dW^T += X^T op_T(dY^T): beta = 1, the gradient accumulates. */
    gemm_args gw = {x, dy, dw, NULL, 1.0f, db, NO_RELU};
    /* dX^T = W^T dY^T: beta = 0, dX is overwritten; with a fused ReLU before this layer, the
     * ReLU's input gradient too (dX masked where the ReLU's output, this layer's input, is 0). */
    relu_epi rx = NO_RELU;
    if (d->relu_before && l->in_grad && !dx_done) {
        BN_DEV_WR(relu_dx, d->relu_before->in_grad);
        rx.mask = x;
        rx.relu_dx = relu_dx;
    }
    if (l->in_grad && p->ctx->side_stream) {
        /* When blobnet's kernels run both products (no shared workspace, their own partial
         * sums), dW and db go to the side stream beside dX and are joined back here, or by the
         * net at the end of its backward pass (bn_pass.defer_joins), so that they also run
         * beside the layers below. */
        BN_DEV_WR(dx, l->in_grad);
        gemm_args gx = {w, dy, dx, NULL, 0.0f, NULL, rx};
        dense_gpu *g = NULL;
        dense_plan *pw = NULL, *px = NULL;
        BN_TRY(prepare(l, p->ctx, GEMM_DW, &gw, &g, &pw));
        if (!dx_done) BN_TRY(prepare(l, p->ctx, GEMM_DX, &gx, &g, &px));
        if (pw->own && (dx_done || px->own || px->skinny)) {
            cudaStream_t main_stream = (cudaStream_t)p->ctx->stream, side = (cudaStream_t)p->ctx->side_stream;
            BN_CUDA(cudaEventRecord(g->fork, main_stream));
            BN_CUDA(cudaStreamWaitEvent(side, g->fork, 0));
            BN_TRY(run_own_on(&pw->ow, GEMM_DW, side, gw.b, gw.a, gw.d, gw.bias, db, NO_RELU));
            if (p->defer_joins) {
                bn_ctx_defer_side(p->ctx);
                return dx_done ? BN_OK : run_dx(px, p->ctx, &gx, n, d->inputs, m);
            }
            BN_CUDA(cudaEventRecord(g->join, side));
            if (!dx_done) BN_TRY(run_dx(px, p->ctx, &gx, n, d->inputs, m));
            BN_CUDA(cudaStreamWaitEvent(main_stream, g->join, 0));
            return BN_OK;
        }
    }
    int fused = 0;
    BN_TRY(gemm(l, p->ctx, GEMM_DW, &gw, &fused, NULL));
    if (!fused) { /* db += column sums of dY, unless own_gemm added them with dW */
        dim3 threads(BIAS_COLS, BIAS_ROWS);
        bias_grad<<<(m + BIAS_COLS - 1) / BIAS_COLS, threads, 0, (cudaStream_t)p->ctx->stream>>>(dy, n, m, db);
        BN_CUDA_LAUNCH();
    }
    if (l->in_grad && !dx_done) {
        BN_DEV_WR(dx, l->in_grad);
        gemm_args gx = {w, dy, dx, NULL, 0.0f, NULL, rx};
        int relu_done = 0;
        BN_TRY(gemm(l, p->ctx, GEMM_DX, &gx, NULL, &relu_done));
        /* After a cuBLAS product the ReLU layer runs its own pass on the gradient written. */
        if (d->relu_before && !relu_done) return d->relu_before->ops->backward_gpu(d->relu_before, p);
    }
    return BN_OK;
}

extern "C" int bn_dense_fuse_relu(bn_layer *l, bn_layer *relu, int after)
{
    dense_priv *d = (dense_priv *)l->priv;
    if (after) d->relu_after = relu;
    else d->relu_before = relu;
    return 1;
}

extern "C" int bn_dense_fuse_next(bn_layer *l, bn_layer *next)
{
    dense_priv *d = (dense_priv *)l->priv;
    if (d->relu_after || !bn_softmax_ce_head_fits(next, d->outputs)) return 0;
    d->loss_after = next;
    d->dx_written = 0;
    return BN_FUSED_FORWARD;
}
