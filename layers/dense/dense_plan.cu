/* dense_plan.cu - the dense layer's plans (dense_plan.h): for each of its three products, who
 * runs it and how that was chosen. The products and their column-major reading are dense.cu's.
 *
 * Each GEMM's algorithm is chosen once per (batch size, pointer alignment, TF32, how it is chosen)
 * and kept in a plan, through the chooser (gpu/chooser.h) as conv2d's plans are: by the fixed rule
 * blobnet's kernels are taken, so that every run makes the same choice, in a deterministic context
 * and for the shapes the rule was measured on (rule_measured: LeNet's); with ctx->autotune the
 * cuBLASLt heuristic results (up to eight) and own_gemm are timed on the context stream and the
 * fastest kept (the chooser's tie rule, rule_order); by default elsewhere the choice is the kernel
 * cache's (gpu/kernel_cache.h), timed as --autotune times it where the cache has none and kept
 * there. A timed pick is checked before it is taken: run against the rule's first candidate
 * (blobnet's own kernel, tested against the CPU) on the same operands, one whose product
 * disagrees is dropped and the next checked alike (agree_trial). Plans are made on the first
 * pass for a batch size, which the trainer runs eagerly; once made, a pass only enqueues work (no
 * allocation, synchronisation or timing), so it can be captured in a CUDA graph. A plan asked for while the stream is being captured takes the first
 * heuristic result without timing.
 *
 * A plan may grow the context's shared workspace up to WORKSPACE_LIMIT, whatever the batch size:
 * a graph captured before the workspace was replaced is captured again (graph.h). Only a plan
 * asked for during a capture, when nothing may be allocated, makes do with what is there.
 *
 * Besides cuBLASLt's algorithms, two families of blobnet's own kernels can run a product, each
 * in its own file with the comments on how it works: the split-K GEMMs own_gemm and own_gemm_tc
 * (dense_gemm.cu: FP32 FMA, or the TF32 tensor cores at FP32 accuracy), whose dW launch also
 * adds the bias gradient, so no bias_grad launch follows it; and, for a layer with at most
 * SKINNY_M outputs (LeNet's last), the few-outputs kernels of the forward and input-gradient
 * products (dense_skinny.cu). Both are deterministic. They join the timing, own_gemm in each of
 * its configurations (a cuBLASLt dW candidate is timed together with its bias_grad launch), and
 * run when fastest; the rule takes the few-outputs kernels wherever they fit and own_gemm
 * otherwise: the tensor-core kernel where the device has TF32 tensor cores, and the split by a
 * fixed rule from the shape and the SM count (one inner range for a plan made during capture,
 * which cannot allocate the counters). Their epilogues also take a fused ReLU
 * (bn_dense_fuse_relu).
 *
 * Without ctx->tf32 the compute type is CUBLAS_COMPUTE_32F (plain FP32, like the CPU); with it,
 * CUBLAS_COMPUTE_32F_FAST_TF32, and own_gemm_tc takes one TF32 product per multiply instead of
 * three (own_plan.one_product). Should cuBLASLt offer no algorithm for a product, that product
 * goes through cublasSgemm as before (the bias then seeded into Y first). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dense_bias.cuh"
#include "dense_plan.h"
#include "dense_skinny.h"
#include "gpu/chooser.h"
#include "gpu/code_anchor.cuh"
#include "gpu/compare.h"
#include "gpu/cuda_check.h"

/* The most workspace one algorithm may ask for (these products are small). */
#define WORKSPACE_LIMIT ((size_t)8 << 20)
/* Heuristic results asked for, how many of them are timed, and the launches timed per result. */
#define HEURISTIC_RESULTS 8
#define TIMED_RESULTS 8
#define TIMING_REPS 10
/* Set (not "0"), every timed candidate's milliseconds are printed as a product's choice is made. */
#define DENSE_VERBOSE "BLOBNET_DENSE_VERBOSE"

/* ---- plans ---- */

static void plan_free(dense_plan *p)
{
    if (!p) return;
    if (p->a) cublasLtMatrixLayoutDestroy(p->a);
    if (p->b) cublasLtMatrixLayoutDestroy(p->b);
    if (p->d) cublasLtMatrixLayoutDestroy(p->d);
    if (p->op) cublasLtMatmulDescDestroy(p->op);
    bn_dense_own_free(&p->ow);
    free(p);
}

extern "C" void bn_dense_gpu_release(dense_priv *dp)
{
    dense_gpu *g = dp->gpu;
    if (!g) return;
    for (int i = 0; i < g->num_plans; i++) plan_free(g->plans[i]);
    free(g->plans);
    if (g->lt) cublasLtDestroy(g->lt);
    bn_overlap_destroy(&g->side);
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

/* The candidates of a plan: `lt` cuBLASLt heuristic results, then `owns` own_gemm layouts, then
 * (skinny = 1) the few-outputs kernels. */
typedef struct candidates {
    const cublasLtMatmulHeuristicResult_t *r;
    int lt;
    const own_plan *own;
    int owns;
    int skinny;
    int k;        /* the layer's inputs (the few-outputs kernels take the shape) */
    int rule_own; /* the own_gemm configuration the rule takes for the product */
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
            bn_launch_early(bias_grad<float>, (m + BIAS_COLS - 1) / BIAS_COLS, threads, 0, (cudaStream_t)ctx->stream,
                            ga->b, n, m, db);
            *ok = cudaGetLastError() == cudaSuccess;
        }
        return BN_OK;
    }
    cudaGetLastError(); /* nothing left over from a failed cuBLASLt candidate */
    *ok = 1;
    if (i == c->lt + c->owns)
        return bn_dense_run_skinny(p->kind, (cudaStream_t)ctx->stream, ga->a, ga->b, d, ga->bias, n, c->k, m, NO_RELU);
    return bn_dense_run_own(&c->own[i - c->lt], p->kind, ctx, ga->b, ga->a, d, ga->bias,
                            p->kind == GEMM_DW ? db : NULL, NO_RELU);
}

/* The chooser's view of a plan's candidates while they are timed and checked: run_candidate's
 * arguments, with D (and the bias gradient) in scratch, so that no real output is touched, the
 * scratch's size, and the reference's outputs set aside by the first check (NULL before it). */
typedef struct trial {
    const dense_gpu *g;
    const dense_plan *p;
    const bn_ctx *ctx;
    const gemm_args *ga;
    const candidates *c;
    float *d, *db;
    int n, m;
    size_t bytes;
    float *ref;
} trial;

static bn_status run_trial(void *env, int i, int warm, int *ok)
{
    const trial *t = (const trial *)env;
    return run_candidate(t->g, t->p, t->ctx, t->ga, t->c, i, t->d, t->db, t->n, t->m, ok);
}

/* Candidate i once on zeroed scratch (a dW product with beta = 1 adds into it); *ok as for
 * run_candidate. */
static bn_status run_fresh(const trial *t, int i, int *ok)
{
    BN_CUDA(cudaMemsetAsync(t->d, 0, t->bytes, (cudaStream_t)t->ctx->stream));
    return run_candidate(t->g, t->p, t->ctx, t->ga, t->c, i, t->d, t->db, t->n, t->m, ok);
}

/* Whether candidate i's product agrees with the reference's (bn_chooser_agree): both run on the
 * layer's real operands, which a product reads linearly (no kinks for the two to fall on
 * different sides of), into zeroed scratch; D, and for dW the bias gradient, compared relative to
 * the reference's scale. FP32 products differ by the order of their sums (a few 1e-6 of the
 * scale), TF32 ones (--tf32) by about 1e-3, hence the bounds. A candidate that does not run here
 * disagrees. */
static bn_status agree_trial(void *env, int i, int reference, double *err, double *tol, int *agrees)
{
    trial *t = (trial *)env;
    cudaStream_t stream = (cudaStream_t)t->ctx->stream;
    *tol = t->p->tf32 ? 1e-2 : 1e-3;
    *err = INFINITY;
    *agrees = 0;
    int ok = 1;
    if (!t->ref) {
        BN_TRY(bn_device_alloc((void **)&t->ref, t->bytes));
        BN_TRY(run_fresh(t, reference, &ok));
        if (!ok) return bn_error(BN_ERR_DEVICE, "dense: the reference product did not run");
        BN_CUDA(cudaMemcpyAsync(t->ref, t->d, t->bytes, cudaMemcpyDeviceToDevice, stream));
    }
    BN_TRY(run_fresh(t, i, &ok));
    cudaGetLastError(); /* a candidate that failed to launch leaves no error for later checks */
    if (!ok) return BN_OK;
    const size_t outs = (size_t)(t->db - t->d);
    BN_TRY(bn_gpu_relative_error(t->d, t->ref, outs, t->ctx, err));
    if (t->p->kind == GEMM_DW) {
        double bias_err = 0.0;
        BN_TRY(bn_gpu_relative_error(t->db, t->ref + outs, (size_t)t->m, t->ctx, &bias_err));
        if (bias_err > *err) *err = bias_err;
    }
    *agrees = *err <= *tol;
    return BN_OK;
}

/* One untimed launch (it must run at all, and it warms caches and lazy loading), then the mean of
 * TIMING_REPS launches. */
static const bn_chooser_timing TIMING = {1, 1, TIMING_REPS};

/* The rule's order of the candidates into order (returns their count): the few-outputs kernels,
 * own_gemm in the rule's configuration, in the others, then cuBLASLt's results in the heuristics'
 * order. A tie (bn_chooser_pick) goes to the first, as in conv_choice.cu, so that runs of the
 * timing agree where candidates are that close, and to blobnet's kernels, whose two gradients
 * overlap on the side stream and which take a fused ReLU, which the timing of one product alone
 * does not see. */
static int rule_order(const candidates *c, int *order)
{
    int count = 0;
    if (c->skinny) order[count++] = c->lt + c->owns;
    order[count++] = c->lt + c->rule_own;
    for (int o = 0; o < c->owns; o++)
        if (o != c->rule_own) order[count++] = c->lt + o;
    for (int i = 0; i < c->lt; i++) order[count++] = i;
    return count;
}

/* Times the candidates on the context stream (scratch made and freed here) and returns the one
 * the tie rule picks in *best, or -1 when none ran. */
static bn_status fastest(const dense_gpu *g, const dense_plan *p, const bn_ctx *ctx, const gemm_args *ga,
                         size_t out_bytes, int n, int m, const candidates *c, int *best)
{
    *best = -1;
    void *scratch = NULL;
    size_t bytes = out_bytes + (size_t)m * sizeof(float);
    BN_TRY(bn_device_alloc(&scratch, bytes));
    trial t = {g, p, ctx, ga, c, (float *)scratch, (float *)scratch + out_bytes / sizeof(float), n, m, bytes, NULL};
    int order[HEURISTIC_RESULTS + OWN_CONFIGS + 1];
    const int count = c->lt + c->owns + c->skinny, ordered = rule_order(c, order);
    /* The candidates' names as the kernel cache keeps them (remember), for a dropped pick's note. */
    char text[HEURISTIC_RESULTS + OWN_CONFIGS + 1][16];
    const char *names[HEURISTIC_RESULTS + OWN_CONFIGS + 1];
    for (int i = 0; i < count; i++) {
        if (i < c->lt) snprintf(text[i], sizeof text[i], "lt %d", i);
        else if (i < c->lt + c->owns) snprintf(text[i], sizeof text[i], "own %d", i - c->lt);
        else snprintf(text[i], sizeof text[i], "skinny");
        names[i] = text[i];
    }
    const bn_candidates cands = {count, names, NULL, order, ordered, run_trial, &t, order[0], agree_trial, NULL};
    static const char *const kinds[] = {"fwd", "dw", "dx"};
    char label[96];
    snprintf(label, sizeof label, "dense %s n=%d k=%d m=%d", kinds[p->kind], n, c->k, m);
    const bn_chooser chooser = {TIMING, BN_CHOOSER_TIE, DENSE_VERBOSE, label};
    float ms[HEURISTIC_RESULTS + OWN_CONFIGS + 1];
    bn_status st = bn_device_zero(scratch, bytes);
    if (st == BN_OK) st = bn_chooser_timed(&chooser, &cands, ms, best);
    if (st == BN_OK) cudaGetLastError(); /* a candidate that failed to launch leaves no error for later checks */
    bn_device_free(t.ref);
    bn_device_free(scratch); /* after the last timed launch: cudaFree waits for the device */
    return st;
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

/* The layer shapes (inputs, outputs) at which the rule was measured against the timed choice,
 * in whole training steps: LeNet's ip1 and ip2 at batches 64 and 256 (docs/performance.md,
 * versions 14-24: by timing, cuBLASLt products for ip1 kept its two gradients from overlapping
 * on the side stream, which only blobnet's kernels do, and LeNet's epoch was the slower). */
static const struct {
    int inputs, outputs;
} rule_measured[] = {{800, 500}, {500, 10}};

/* How the products of a layer of k inputs and m outputs are chosen (bn_chooser_mode). */
static int choice_mode(const bn_ctx *ctx, int k, int m)
{
    int measured = 0;
    for (size_t i = 0; i < sizeof rule_measured / sizeof rule_measured[0]; i++)
        measured = measured || (rule_measured[i].inputs == k && rule_measured[i].outputs == m);
    return bn_chooser_mode(ctx, measured);
}

/* The own_gemm configuration the rule takes for product `kind` (batch n, k inputs, m outputs). */
static int own_rule(const dense_gpu *g, int kind, int n, int k, int m)
{
    return bn_dense_own_rule(kind, n, k, m, g->sms, g->tensor_ok);
}

/* own_gemm in configuration cfg for the plan's product, as the timing tries it. */
static own_plan own_candidate(const dense_gpu *g, const dense_plan *p, int k, int m, int cfg)
{
    own_plan o = bn_dense_own_layout(p->kind, p->n, k, m, cfg, g->sms, 0, 0);
    o.one_product = p->tf32;
    return o;
}

/* The kernel cache's key for the plan: the device's scope, the product and its operands'
 * alignments, which the heuristic results depend on. */
static bn_status cache_key(const bn_ctx *ctx, const dense_plan *p, int k, int m, char *key, size_t cap)
{
    static const char *const kinds[] = {"fwd", "dw", "dx"};
    return bn_chooser_key(ctx, key, cap, "dense %s n%d k%d m%d align%u,%u,%u,%u%s", kinds[p->kind], p->n, k, m,
                          p->align[OPND_A], p->align[OPND_B], p->align[OPND_D], p->align[OPND_BIAS],
                          p->tf32 ? " tf32" : "");
}

/* What reading a cached choice needs: the plan it goes into, the shape, whether the few-outputs
 * kernels fit, and the `got` heuristic results r. */
typedef struct cached_in {
    const dense_gpu *g;
    dense_plan *p;
    bn_ctx *ctx;
    int k, m;
    bool skinny;
    const cublasLtMatmulHeuristicResult_t *r;
    int got;
} cached_in;

/* A cached choice (bn_choice_reader): "skinny" (the few-outputs kernels), "own C" (own_gemm in
 * configuration C), "lt I" (the I-th heuristic result) or "sgemm" (no heuristic result), taken
 * where the plan can run it, stale where not. */
static bn_status read_choice(void *env, const char *choice, int *verdict)
{
    const cached_in *in = (const cached_in *)env;
    dense_plan *p = in->p;
    const int count = in->got < TIMED_RESULTS ? in->got : TIMED_RESULTS;
    const int owns = in->g->tensor_ok ? OWN_CONFIGS : OWN_TC64;
    int index = -1, used = 0;
    *verdict = BN_CHOICE_STALE;
    if (strcmp(choice, "skinny") == 0) {
        p->skinny = in->skinny;
        if (in->skinny) *verdict = BN_CHOICE_TAKEN;
        return BN_OK;
    }
    if (strcmp(choice, "sgemm") == 0) {
        if (in->got != 0) return BN_OK;
        *verdict = BN_CHOICE_TAKEN;
        return take_lt(p, in->ctx, in->r, 0, 0);
    }
    if (sscanf(choice, "own %d%n", &index, &used) == 1 && !choice[used]) {
        if (index < 0 || index >= owns) return BN_OK;
        p->ow = own_candidate(in->g, p, in->k, in->m, index);
        BN_TRY(bn_dense_own_alloc(&p->ow));
        p->own = 1;
        *verdict = BN_CHOICE_TAKEN;
        return BN_OK;
    }
    if (sscanf(choice, "lt %d%n", &index, &used) == 1 && !choice[used]) {
        if (index < 0 || index >= count) return BN_OK;
        *verdict = BN_CHOICE_TAKEN;
        return take_lt(p, in->ctx, in->r, in->got, index);
    }
    *verdict = BN_CHOICE_UNREADABLE;
    return BN_OK;
}

/* Keeps the timed choice (candidate `pick` of `count` cuBLASLt results, `owns` own_gemm
 * configurations and the few-outputs kernels; -1 when none ran) under key, as read_choice reads
 * it. */
static bn_status remember(const char *key, int pick, int count, int owns, int got)
{
    char choice[32];
    if (pick == count + owns) snprintf(choice, sizeof choice, "skinny");
    else if (pick >= count) snprintf(choice, sizeof choice, "own %d", pick - count);
    else if (pick >= 0) snprintf(choice, sizeof choice, "lt %d", pick);
    else if (got == 0) snprintf(choice, sizeof choice, "sgemm");
    else return BN_OK;
    return bn_chooser_keep(key, choice);
}

/* Chooses how a described plan runs (n = p->n, inputs k, outputs m):
 * - forced (bn_dense_gpu_force_own) or by the rule (p->mode): the few-outputs kernels where they
 *   fit (by the rule, or forced to OWN_SKINNY), else own_gemm, its configuration and inner
 *   ranges by a fixed rule (bn_dense_own_rule, bn_dense_own_layout) from the shape and the SM
 *   count, never by timing; a plan made during capture takes one inner range (it cannot
 *   allocate);
 * - during capture (not `measure`): the first usable heuristic result;
 * - from the kernel cache, when the plan's mode takes it and the cache has a choice;
 * - otherwise the fastest of the first TIMED_RESULTS cuBLASLt heuristic results (which fit
 *   `limit` bytes of workspace), own_gemm in each configuration and the few-outputs kernels
 *   where they fit, kept in the cache.
 * Reserves the workspace the chosen cuBLASLt algorithm needs. */
static bn_status choose(const dense_gpu *g, dense_plan *p, bn_ctx *ctx, const gemm_args *ga, int k, int m,
                        size_t out_bytes, size_t limit, int measure, int capturing)
{
    int n = p->n;
    const bool skinny = bn_dense_skinny_fits(p->kind, n, k, m), by_rule = p->mode == BN_CHOOSE_RULE;
    /* The few-outputs kernels when forced, and by the rule wherever they fit. */
    if (skinny && (p->forced_cfg == OWN_SKINNY || (p->forced_cfg < 0 && by_rule))) {
        p->skinny = 1;
        return BN_OK;
    }
    if (p->forced_cfg >= 0 || by_rule) {
        int cfg = p->forced_cfg == OWN_SKINNY ? OWN_FMA32
                  : p->forced_cfg >= 0       ? p->forced_cfg
                                             : own_rule(g, p->kind, n, k, m);
        if ((cfg == OWN_TC64 || cfg == OWN_TC32) && !g->tensor_ok) cfg = cfg == OWN_TC64 ? OWN_FMA64 : OWN_FMA32;
        p->ow = bn_dense_own_layout(p->kind, n, k, m, cfg, g->sms, p->forced_cfg >= 0 ? p->forced_splits : 0,
                                    capturing);
        p->ow.one_product = p->tf32;
        BN_TRY(bn_dense_own_alloc(&p->ow));
        p->own = 1;
        return BN_OK;
    }
    cublasLtMatmulHeuristicResult_t r[HEURISTIC_RESULTS];
    int got = 0;
    BN_TRY(heuristics(g, p, limit, r, &got));
    if (!measure) return take_lt(p, ctx, r, got, 0);
    char key[BN_KERNEL_KEY_MAX];
    BN_TRY(cache_key(ctx, p, k, m, key, sizeof key));
    if (p->mode == BN_CHOOSE_CACHED) {
        cached_in in = {g, p, ctx, k, m, skinny, r, got};
        int hit = 0;
        BN_TRY(bn_chooser_lookup(key, "a dense product", read_choice, &in, &hit));
        if (hit) return BN_OK;
    }
    int count = got < TIMED_RESULTS ? got : TIMED_RESULTS;
    size_t need = 0;
    for (int i = 0; i < count; i++)
        if (r[i].workspaceSize > need) need = r[i].workspaceSize;
    BN_TRY(bn_ctx_reserve_workspace(ctx, need));
    own_plan own[OWN_CONFIGS] = {};
    bn_status st = BN_OK;
    const int owns = g->tensor_ok ? OWN_CONFIGS : OWN_TC64;
    for (int c = 0; c < owns && st == BN_OK; c++) {
        own[c] = own_candidate(g, p, k, m, c);
        st = bn_dense_own_alloc(&own[c]);
    }
    candidates cand = {r, count, own, owns, skinny ? 1 : 0, k, own_rule(g, p->kind, n, k, m)};
    int pick = -1;
    if (st == BN_OK) st = fastest(g, p, ctx, ga, out_bytes, n, m, &cand, &pick);
    for (int c = 0; c < owns; c++)
        if (st != BN_OK || pick != count + c) bn_dense_own_free(&own[c]);
    BN_TRY(st);
    BN_TRY(remember(key, pick, count, owns, got));
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

/* Whether plan p serves the product now: forced_cfg and forced_splits are bn_dense_own_forced's,
 * mode the layer's choice_mode. */
static bool plan_fits(const dense_plan *p, int kind, int n, const bn_ctx *ctx, int mode, const unsigned *align,
                      int forced_cfg, int forced_splits)
{
    if (p->kind != kind || p->n != n || p->tf32 != (ctx->tf32 != 0) || p->mode != mode) return false;
    if (p->forced_cfg != forced_cfg || p->forced_splits != forced_splits) return false;
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

extern "C" bn_status bn_dense_prepare(bn_layer *l, bn_ctx *ctx, int kind, const gemm_args *ga, dense_gpu **gpu,
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
        bn_status e = bn_overlap_create(&dp->gpu->side);
        if (e != BN_OK) {
            bn_dense_gpu_release(dp);
            return e;
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
    int forced_cfg = -1, forced_splits = 0;
    bn_dense_own_forced(&forced_cfg, &forced_splits);
    const int mode = choice_mode(ctx, dp->inputs, dp->outputs);
    for (int i = 0; i < g->num_plans; i++)
        if (plan_fits(g->plans[i], kind, n, ctx, mode, align, forced_cfg, forced_splits)) {
            *plan = g->plans[i];
            return BN_OK;
        }
    dense_plan *p = (dense_plan *)calloc(1, sizeof *p);
    if (!p) return bn_error(BN_ERR_NOMEM, "layer %s: out of host memory", l->name);
    p->kind = kind;
    p->n = n;
    p->tf32 = ctx->tf32 != 0;
    p->mode = mode;
    p->forced_cfg = forced_cfg;
    p->forced_splits = forced_splits;
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

extern "C" bn_status bn_dense_gemm(bn_layer *l, bn_ctx *ctx, int kind, const gemm_args *ga, int *fused,
                                   int *relu_done)
{
    const dense_priv *dp = (const dense_priv *)l->priv;
    dense_gpu *g = NULL;
    dense_plan *p = NULL;
    if (fused) *fused = 0;
    BN_TRY(bn_dense_prepare(l, ctx, kind, ga, &g, &p));
    if (relu_done) *relu_done = p->skinny || p->own;
    int n = l->in->n, k = dp->inputs, m = dp->outputs;
    if (p->skinny)
        return bn_dense_run_skinny(kind, (cudaStream_t)ctx->stream, ga->a, ga->b, ga->d, ga->bias, n, k, m, ga->relu);
    if (p->own) {
        float *db = kind == GEMM_DW ? ga->db : NULL;
        BN_TRY(bn_dense_run_own(&p->ow, kind, ctx, ga->b, ga->a, ga->d, ga->bias, db, ga->relu));
        if (fused) *fused = db != NULL;
        return BN_OK;
    }
    if (!p->use_lt) {
        if (kind == GEMM_FWD) { /* seed the bias, then accumulate onto it */
            size_t total = (size_t)n * m;
            bn_launch_early(seed_bias<float>, grid_for(total), 256, 0, (cudaStream_t)ctx->stream, ga->d, ga->bias,
                            total, m);
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

extern "C" void bn_dense_gpu_describe(const bn_layer *l, char *buf, size_t cap)
{
    static const char *const products[] = {"fwd", "dW", "dX"};
    static const char *const owns[OWN_CONFIGS] = {"blobnet fma64", "blobnet fma32", "blobnet tc64", "blobnet tc32"};
    const dense_gpu *g = ((const dense_priv *)l->priv)->gpu;
    size_t len = 0;
    if (cap) buf[0] = '\0';
    for (int i = 0; g && i < g->num_plans && len < cap; i++) {
        const dense_plan *p = g->plans[i];
        const char *runner = p->skinny ? "blobnet skinny"
                             : p->own  ? owns[p->ow.cfg]
                             : p->use_lt ? "cublasLt"
                                         : "cublas sgemm";
        int w = snprintf(buf + len, cap - len, "%sn=%d %s: %s", i ? "; " : "", p->n, products[p->kind], runner);
        if (w < 0) break;
        len += (size_t)w;
    }
}

BN_CODE_ANCHOR(dense_plan, seed_bias<float>) /* code_load.cu */
