/* softmax_ce.cu - softmax + cross-entropy on the GPU, for any batch size and class count.
 *
 * Forward, one kernel: one warp per example row finds the row maximum and its first index (the
 * CPU's argmax), sums exp(z - max) in double, writes the probabilities and the row's loss
 * (logsumexp - z[label]) and correct flag. A block adds its rows' losses and flags in row order
 * and writes the two sums to a scratch array; every block then counts itself in on a device
 * counter, and the block that arrives last (all blocks' sums are written by then) adds the
 * blocks' sums in block order into metrics = [loss sum, correct count] and leaves the counter
 * at zero for the next launch. Which block is last varies, the order of the sums does not, so
 * the metrics are the same on every run; nothing past the current batch is read. The loss
 * stays on the device: the host reads it only when it asks (bn_net_metrics).
 * A training forward that writes the input gradient (the loss fusion below) stops at the blocks'
 * sums: the last block's count-in and sum took LeNet's head 6.1 -> 4.7 us, and every pass of the
 * backward waits for the loss kernel to end. One warp (metrics_sum) adds the same sums in the
 * same order once the backward pass is queued (bn_layer_ops.finish_gpu), where the step's last
 * update runs beside it, so the metrics hold the same bits as before.
 * Backward: dz = (p - target) / n, elementwise, the target onehot(label) or, with label smoothing
 * s, (1 - s) onehot(label) + s / classes (bn_softmax_target's floats); the loss then subtracts
 * (1 - s) z[label] + s mean(z) from the log-sum-exp instead of z[label].
 *
 * For the step (the loss fusion, bn_net_fuse_loss) the forward kernel can do two more things, saving a
 * launch each: the last block adds the metrics it has just written into an accumulator
 * (acc[i] += metrics[i], the float additions a separate add would make), and in a training
 * pass each warp writes its row's dz beside the probabilities, from the same float values and
 * with the same expression as the backward kernel, which then is not launched.
 *
 * The dense head (softmax_ce.h) is the same kernel with the dense layer before it in front and
 * behind: the warps of a row take pieces of its inputs, V floats per lane, and keep one sum per
 * class, which a shuffle tree adds up per warp and the row's first warp adds in warp order
 * (z[o] = the sum + b[o]); the row is then the loss's as above, and with the gradient the warps
 * go on to dx[c] = sum over o of dz[o] W[o][c], o in order from 0.0f, the expression and order
 * of the dense layer's few-outputs kernel (dense_skinny.cu, skinny_dx), and the fused ReLU's
 * mask.
 *
 * Under --precision bf16 the logits, probabilities and input gradient are BF16 on the device
 * (T = __nv_bfloat16 in softmax_rows and softmax_grad): each logit is widened once, every sum
 * and the loss are computed as in FP32, and the probabilities and gradients are rounded once
 * when stored. The metrics stay FP32. The dense head is FP32 only (the net's fusion rules, which
 * make it, are not applied under bf16). */
#include <math.h>
#include <stdint.h>

#include "gpu/bf16.cuh"
#include "gpu/code_anchor.cuh"
#include "gpu/cuda_check.h"
#include "gpu/last_arrival.cuh"
#include "gpu/pdl.cuh"
#include "gpu/vec_ops.cuh"
#include "softmax_ce.h"

#define ROW_THREADS 256            /* 8 warps: 8 rows per block */
#define HEAD_ROWS 2                /* the dense head: rows per block, */
#define HEAD_PARTS 4               /* and warps per row */

/* The class index a label holds, or -1 when it is not an integer in [0, classes). */
static __device__ int label_of(float v, int classes)
{
    return v >= 0.0f && v < (float)classes && v == floorf(v) ? (int)v : -1;
}

/* The targets of a row: `on` at the label, `off` elsewhere (1 and 0 without smoothing). */
typedef struct targets {
    float on, off;
    double smoothing;
} targets;

static targets targets_of(const softmax_priv *sp)
{
    return targets{bn_softmax_target(sp, 0, 0), bn_softmax_target(sp, 1, 0), sp->smoothing};
}

/* The input gradient of one element: what softmax_grad writes, and what softmax_rows writes
 * when it is asked for it. */
static __device__ float grad_of(float p, int k, int label, float scale, targets t)
{
    return label >= 0 ? (p - (k == label ? t.on : t.off)) * scale : NAN;
}

/* A row's loss from its log-sum-exp, z[label] and, with smoothing, the sum of its z. */
static __device__ double row_loss(double lse, float zlabel, double zsum, int classes, targets t)
{
    if (t.smoothing > 0.0) return lse - (1.0 - t.smoothing) * zlabel - t.smoothing * zsum / classes;
    return lse - zlabel;
}

/* The sum of a warp's row (lane j holding classes j, j + 32, ...), to every lane, in double;
 * 0 without smoothing, which does not need it. */
template <typename Z>
static __device__ double row_sum(Z zat, int classes, int lane, targets t)
{
    double sum = 0.0;
    if (t.smoothing > 0.0)
        for (int k = lane; k < classes; k += 32) sum += zat(k);
    for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
    return sum;
}

/* A warp's row, lane j holding classes j, j + 32, ... (zat(k) gives z[k] for those): the first
 * maximum's index in *first (each lane scans its classes in increasing order and keeps its first
 * maximum; merging prefers the larger value, then the smaller index) and the log-sum-exp,
 * summed in double, returned to every lane. */
template <typename Z>
static __device__ double row_lse(Z zat, int classes, int lane, int *first)
{
    float best = -INFINITY;
    int at = classes;
    for (int k = lane; k < classes; k += 32) {
        const float v = zat(k);
        if (at == classes || v > best) best = v, at = k;
    }
    for (int off = 16; off > 0; off >>= 1) {
        float ob = __shfl_xor_sync(0xffffffffu, best, off);
        int oa = __shfl_xor_sync(0xffffffffu, at, off);
        if (ob > best || (ob == best && oa < at)) best = ob, at = oa;
    }
    double sum = 0.0;
    for (int k = lane; k < classes; k += 32) sum += exp((double)zat(k) - best);
    for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
    *first = at;
    return best + log(sum);
}

/* The row's probabilities into pi and, with di, its input gradients; returns the gradient of
 * the lane's last class (its only one when classes <= 32). */
template <typename Z, typename T>
static __device__ float row_write(Z zat, int classes, int lane, double lse, int label, float scale, targets t,
                                  T *pi, T *di)
{
    float g = 0.0f;
    for (int k = lane; k < classes; k += 32) {
        const float p = (float)exp((double)zat(k) - lse);
        bn_st(pi + k, p);
        if (di) {
            g = grad_of(p, k, label, scale, t);
            bn_st(di + k, g);
        }
    }
    return g;
}

/* The blocks' sums in block order into metrics and, when not NULL, acc: `lane` of one warp over
 * every 32nd block (the sums read through L2 with __ldcg, where their writes went), then a
 * shuffle tree; lane 0 writes. */
static __device__ void add_block_sums(const double *part_loss, const double *part_correct, unsigned blocks, int lane,
                                      float *__restrict__ metrics, float *__restrict__ acc)
{
    double l = 0.0, c = 0.0;
    for (unsigned i = lane; i < blocks; i += 32) {
        l += __ldcg(part_loss + i);
        c += __ldcg(part_correct + i);
    }
    for (int off = 16; off > 0; off >>= 1) {
        l += __shfl_xor_sync(0xffffffffu, l, off);
        c += __shfl_xor_sync(0xffffffffu, c, off);
    }
    if (lane == 0) {
        const float l_sum = (float)l, c_sum = (float)c;
        metrics[0] = l_sum;
        metrics[1] = c_sum;
        if (acc) {
            acc[0] += l_sum;
            acc[1] += c_sum;
        }
    }
}

/* The metrics, once every warp of every block has its row's loss and correct flag in lane 0
 * (0 for a warp past the batch): the block's sums in warp order to part_loss[block] and
 * part_correct[block]; then, with `arrived`, the last block to arrive adds the blocks' sums
 * (add_block_sums). Without it the kernel leaves that to metrics_sum, launched once the step's
 * backward pass is queued (bn_softmax_ce_finish_gpu). */
static __device__ void finish_metrics(double loss, double correct, double *part_loss, double *part_correct,
                                      unsigned *arrived, float *__restrict__ metrics, float *__restrict__ acc)
{
    __shared__ double wl[32], wc[32];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
    if (lane == 0) wl[warp] = loss, wc[warp] = correct;
    __syncthreads();
    if (threadIdx.x == 0) {
        double l = 0.0, c = 0.0;
        for (int i = 0; i < warps; i++) l += wl[i], c += wc[i];
        part_loss[blockIdx.x] = l;
        part_correct[blockIdx.x] = c;
    }
    if (!arrived || !bn_last_arrival(arrived, gridDim.x) || warp != 0) return;
    add_block_sums(part_loss, part_correct, gridDim.x, lane, metrics, acc);
}

/* The sum over a forward's blocks that finish_metrics left (one warp). */
static __global__ void metrics_sum(const double *part_loss, const double *part_correct, unsigned blocks,
                                   float *__restrict__ metrics, float *__restrict__ acc)
{
    bn_early_entry(); /* pdl.cuh */
    add_block_sums(part_loss, part_correct, blocks, (int)threadIdx.x, metrics, acc);
}

/* One row per warp as described above; `arrived` counts the blocks that are done (zero before
 * the launch, and again after it; NULL: the sum over the blocks is left to metrics_sum). With dz,
 * also the rows' input gradients (scale = 1/n); with acc, the sum also adds the metrics into
 * acc[0..1]. */
template <typename T>
static __global__ void softmax_rows(const T *__restrict__ z, const float *__restrict__ labels, int n, int classes,
                                    T *__restrict__ prob, T *__restrict__ dz, float scale, targets t,
                                    double *part_loss, double *part_correct, unsigned *arrived,
                                    float *__restrict__ metrics, float *__restrict__ acc)
{
    bn_early_entry(); /* pdl.cuh */
    const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    double loss = 0.0, correct = 0.0;
    if (row < n) { /* the same for the whole warp, so the shuffles see every lane */
        const T *zi = z + (size_t)row * classes;
        auto zat = [zi](int k) { return bn_ld(zi + k); };
        int at;
        const double lse = row_lse(zat, classes, lane, &at);
        const int label = label_of(labels[row], classes);
        row_write(zat, classes, lane, lse, label, scale, t, prob + (size_t)row * classes,
                  dz ? dz + (size_t)row * classes : NULL);
        const double zsum = row_sum(zat, classes, lane, t);
        if (lane == 0) {
            loss = label >= 0 ? row_loss(lse, zat(label), zsum, classes, t) : (double)NAN;
            correct = label >= 0 && at == label ? 1.0 : 0.0;
        }
    }
    finish_metrics(loss, correct, part_loss, part_correct, arrived, metrics, acc);
}

/* The dense head's operands and outputs (dz, dx and relu_dx NULL when not written). */
typedef struct head_args {
    const float *x, *w, *b, *labels;
    int n, k;
    float *z, *prob, *dz, *dx, *relu_dx;
    float scale;
    targets t;
    double *part_loss, *part_correct;
    unsigned *arrived;
    float *metrics, *acc;
} head_args;

/* The dense head for M classes: HEAD_ROWS rows per block, HEAD_PARTS warps per row, each warp
 * over every HEAD_PARTS-th piece of 32 V-float groups of the row's inputs; the first warp of a row
 * adds the warps' sums in warp order and runs the loss's row; then every warp takes its pieces
 * of dx. */
template <int M, int V>
static __global__ void __launch_bounds__(HEAD_ROWS * HEAD_PARTS * 32) head_rows(head_args a)
{
    bn_early_entry(); /* pdl.cuh */
    typedef typename vec_of<V>::t vt;
    __shared__ float part[HEAD_ROWS][HEAD_PARTS][M], grad[HEAD_ROWS][M];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int r = warp / HEAD_PARTS, pt = warp % HEAD_PARTS, row = blockIdx.x * HEAD_ROWS + r;
    const bool live = row < a.n; /* the same for the whole warp, so the shuffles see every lane */
    const int kv = a.k / V;
    const vt *xr = (const vt *)(a.x + (size_t)row * a.k), *wv = (const vt *)a.w;
    float s[M];
#pragma unroll
    for (int o = 0; o < M; o++) s[o] = 0.0f;
    if (live) {
#pragma unroll 2
        for (int i = pt * 32 + lane; i < kv; i += 32 * HEAD_PARTS) {
            const vt xv = xr[i];
#pragma unroll
            for (int o = 0; o < M; o++) s[o] = dot_v(xv, wv[(size_t)o * kv + i], s[o]);
        }
    }
#pragma unroll
    for (int o = 0; o < M; o++) {
        float v = s[o];
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
        if (lane == 0) part[r][pt][o] = v;
    }
    __syncthreads();
    double loss = 0.0, correct = 0.0;
    if (live && pt == 0) {
        float zl = 0.0f; /* lane o < M: z[o] */
        if (lane < M) {
            zl = part[r][0][lane];
#pragma unroll
            for (int q = 1; q < HEAD_PARTS; q++) zl += part[r][q][lane];
            zl += a.b[lane];
            a.z[(size_t)row * M + lane] = zl;
        }
        auto zat = [zl](int) { return zl; };
        int at;
        const double lse = row_lse(zat, M, lane, &at);
        const int label = label_of(a.labels[row], M);
        const float g = row_write(zat, M, lane, lse, label, a.scale, a.t, a.prob + (size_t)row * M,
                                  a.dz ? a.dz + (size_t)row * M : NULL);
        if (lane < M) grad[r][lane] = g;
        const float zlab = __shfl_sync(0xffffffffu, zl, label >= 0 ? label : 0);
        const double zsum = row_sum([zl, lane](int) { return lane < M ? zl : 0.0f; }, 32, lane, a.t);
        if (lane == 0) {
            loss = label >= 0 ? row_loss(lse, zlab, zsum, M, a.t) : (double)NAN;
            correct = label >= 0 && at == label ? 1.0 : 0.0;
        }
    }
    if (a.dx) { /* the same for the whole launch */
        __syncthreads();
        if (live) {
            float d[M];
#pragma unroll
            for (int o = 0; o < M; o++) d[o] = grad[r][o];
            vt *dxr = (vt *)(a.dx + (size_t)row * a.k);
            vt *rxr = a.relu_dx ? (vt *)(a.relu_dx + (size_t)row * a.k) : NULL;
#pragma unroll 2
            for (int i = pt * 32 + lane; i < kv; i += 32 * HEAD_PARTS) {
                vt acc = vt(); /* zeros */
#pragma unroll
                for (int o = 0; o < M; o++) axpy_v(d[o], wv[(size_t)o * kv + i], acc);
                dxr[i] = acc;
                if (rxr) rxr[i] = masked(acc, xr[i]);
            }
        }
    }
    finish_metrics(loss, correct, a.part_loss, a.part_correct, a.arrived, a.metrics, a.acc);
}

template <typename T>
static __global__ void softmax_grad(const T *__restrict__ prob, const float *__restrict__ labels, int n, int classes,
                                    float scale, targets t, T *__restrict__ dz)
{
    bn_early_entry(); /* pdl.cuh */
    size_t total = (size_t)n * classes, stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
        int row = (int)(i / classes), k = (int)(i % classes);
        bn_st(dz + i, grad_of(bn_ld(prob + i), k, label_of(labels[row], classes), scale, t));
    }
}

extern "C" void bn_softmax_ce_gpu_release(softmax_priv *p)
{
    bn_device_free(p->dev_rows);
    p->dev_rows = NULL;
}

/* What both forward kernels are given besides the dense head's operands. */
typedef struct fwd_common {
    const float *labels;
    void *prob, *dz;                  /* float, or BF16 under --precision bf16; dz NULL when not written */
    float *metrics, *acc;             /* acc: NULL when not written */
    double *part_loss, *part_correct;
    unsigned *arrived;
} fwd_common;

/* The blob's device data for writing, whichever type it holds. */
static void *dev_wr_any(bn_blob *b)
{
    return bn_blob_is_bf16(b) ? bn_blob_dev16_wr(b) : (void *)bn_blob_dev_wr(b);
}

/* The scratch (made on the first GPU forward: per-block loss sums, per-block correct counts,
 * one row's room each, then one double's room for the block counter, zeroed once here; each
 * launch leaves it at zero) and the pointers of a forward pass. Clears grad_written. */
static bn_status fwd_setup(bn_layer *l, const bn_pass *pass, fwd_common *c)
{
    softmax_priv *sp = (softmax_priv *)l->priv;
    size_t rows = l->in->capacity / (size_t)sp->classes;
    if (!sp->dev_rows) {
        BN_TRY(bn_device_alloc((void **)&sp->dev_rows, (2 * rows + 1) * sizeof(double)));
        bn_status st = bn_device_zero(sp->dev_rows + 2 * rows, sizeof(double));
        if (st != BN_OK) {
            bn_softmax_ce_gpu_release(sp);
            return st;
        }
    }
    sp->grad_written = 0;
    c->part_loss = sp->dev_rows;
    c->part_correct = sp->dev_rows + rows;
    c->arrived = (unsigned *)(sp->dev_rows + 2 * rows);
    if (!(c->labels = bn_blob_dev_rd(pass->labels)) || !(c->prob = dev_wr_any(l->out)) ||
        !(c->metrics = bn_blob_dev_wr(pass->metrics)))
        return bn_last_status();
    c->dz = c->acc = NULL;
    if (bn_softmax_ce_grad_in_forward(l, pass) && !(c->dz = dev_wr_any(l->in_grad))) return bn_last_status();
    if (sp->acc && !(c->acc = bn_blob_dev_wr(sp->acc))) return bn_last_status();
    /* A training forward that writes the gradient leaves the sum over its blocks to the end of
     * the backward pass, which the step runs next (bn_softmax_ce_finish_gpu). */
    sp->metrics_pending = 0;
    if (c->dz) c->arrived = NULL;
    return BN_OK;
}

/* Notes the sum over `blocks` that a forward launched with c left for bn_softmax_ce_finish_gpu. */
static void leave_sum(softmax_priv *sp, const fwd_common &c, unsigned blocks)
{
    if (c.arrived) return;
    sp->metrics_pending = 1;
    sp->pending_blocks = blocks;
}

extern "C" bn_status bn_softmax_ce_finish_gpu(bn_layer *l, const bn_pass *pass)
{
    softmax_priv *sp = (softmax_priv *)l->priv;
    if (!sp->metrics_pending) return BN_OK;
    sp->metrics_pending = 0;
    /* Taken for writing again here, so that a host read after the forward (which found nothing
     * written yet) does not leave the blobs' host copies standing as the current ones. */
    float *metrics = bn_blob_dev_wr(pass->metrics), *acc = NULL;
    if (!metrics || (sp->acc && !(acc = bn_blob_dev_wr(sp->acc)))) return bn_last_status();
    const size_t rows = l->in->capacity / (size_t)sp->classes;
    bn_launch_early(metrics_sum, dim3(1), dim3(32), 0, (cudaStream_t)pass->ctx->stream, sp->dev_rows,
                    sp->dev_rows + rows, sp->pending_blocks, metrics, acc);
    BN_CUDA_LAUNCH();
    return BN_OK;
}

extern "C" bn_status bn_softmax_ce_forward_gpu(bn_layer *l, const bn_pass *pass)
{
    softmax_priv *sp = (softmax_priv *)l->priv;
    int n = l->in->n, classes = sp->classes;
    fwd_common c;
    BN_TRY(fwd_setup(l, pass, &c));
    cudaStream_t s = (cudaStream_t)pass->ctx->stream;
    int rows_per_block = ROW_THREADS / 32;
    const dim3 blocks((n + rows_per_block - 1) / rows_per_block);
    if (bn_blob_is_bf16(l->in)) {
        typedef __nv_bfloat16 T;
        BN_DEV16_RD(z, l->in);
        bn_launch_early(softmax_rows<T>, blocks, dim3(ROW_THREADS), 0, s, z, c.labels, n, classes, (T *)c.prob,
                        (T *)c.dz, 1.0f / (float)n, targets_of(sp), c.part_loss, c.part_correct, c.arrived,
                        c.metrics, c.acc);
    } else {
        BN_DEV_RD(z, l->in);
        bn_launch_early(softmax_rows<float>, blocks, dim3(ROW_THREADS), 0, s, z, c.labels, n, classes,
                        (float *)c.prob, (float *)c.dz, 1.0f / (float)n, targets_of(sp), c.part_loss,
                        c.part_correct, c.arrived, c.metrics, c.acc);
    }
    BN_CUDA_LAUNCH();
    leave_sum(sp, c, blocks.x);
    sp->grad_written = c.dz != NULL;
    return BN_OK;
}

template <int M>
static void launch_head(int v, const head_args &a, cudaStream_t s)
{
    const dim3 blocks((unsigned)((a.n + HEAD_ROWS - 1) / HEAD_ROWS)), threads(HEAD_ROWS * HEAD_PARTS * 32);
    if (v == 4) bn_launch_early(head_rows<M, 4>, blocks, threads, 0, s, a);
    else if (v == 2) bn_launch_early(head_rows<M, 2>, blocks, threads, 0, s, a);
    else bn_launch_early(head_rows<M, 1>, blocks, threads, 0, s, a);
}

extern "C" bn_status bn_softmax_ce_head_gpu(bn_layer *l, const bn_pass *pass, const bn_softmax_head *h)
{
    softmax_priv *sp = (softmax_priv *)l->priv;
    const int n = l->in->n, classes = sp->classes;
    if (classes < 1 || classes > BN_SOFTMAX_HEAD_MAX)
        return bn_error(BN_ERR_INTERNAL, "layer %s: a dense head takes at most %d classes, not %d", l->name,
                        BN_SOFTMAX_HEAD_MAX, classes);
    if (bn_blob_is_bf16(l->out))
        return bn_error(BN_ERR_INTERNAL, "layer %s: the dense head runs in FP32 only, not under --precision bf16",
                        l->name);
    fwd_common c;
    BN_TRY(fwd_setup(l, pass, &c));
    head_args a = {h->x, h->w, h->b, c.labels, n, h->k, h->z, (float *)c.prob, (float *)c.dz, c.dz ? h->dx : NULL,
                   c.dz ? h->relu_dx : NULL, 1.0f / (float)n, targets_of(sp), c.part_loss, c.part_correct,
                   c.arrived, c.metrics, c.acc};
    /* The widest loads every row allows (the parameters may sit at any 4-byte offset of their
     * slab). */
    const uintptr_t all = (uintptr_t)a.x | (uintptr_t)a.w | (uintptr_t)a.dx | (uintptr_t)a.relu_dx;
    const int v = h->k % 4 == 0 && (all & 15) == 0 ? 4 : h->k % 2 == 0 && (all & 7) == 0 ? 2 : 1;
    cudaStream_t s = (cudaStream_t)pass->ctx->stream;
    switch (classes) {
#define HEAD_CASE(M)                  \
    case M:                           \
        launch_head<M>(v, a, s);      \
        break;
        HEAD_CASE(1) HEAD_CASE(2) HEAD_CASE(3) HEAD_CASE(4) HEAD_CASE(5) HEAD_CASE(6) HEAD_CASE(7) HEAD_CASE(8)
        HEAD_CASE(9) HEAD_CASE(10) HEAD_CASE(11) HEAD_CASE(12) HEAD_CASE(13) HEAD_CASE(14) HEAD_CASE(15)
        HEAD_CASE(16)
#undef HEAD_CASE
    }
    BN_CUDA_LAUNCH();
    leave_sum(sp, c, (unsigned)((n + HEAD_ROWS - 1) / HEAD_ROWS));
    sp->grad_written = c.dz != NULL;
    return BN_OK;
}

extern "C" bn_status bn_softmax_ce_backward_gpu(bn_layer *l, const bn_pass *pass)
{
    softmax_priv *sp = (softmax_priv *)l->priv;
    if (sp->grad_written) { /* the forward before it wrote dz already, as this would */
        sp->grad_written = 0;
        return BN_OK;
    }
    if (!l->in_grad) return BN_OK;
    int n = l->in->n, classes = sp->classes;
    BN_DEV_RD(labels, pass->labels);
    size_t total = (size_t)n * classes;
    size_t blocks = (total + 255) / 256;
    const int grid = (int)(blocks > 4096 ? 4096 : blocks);
    cudaStream_t s = (cudaStream_t)pass->ctx->stream;
    if (bn_blob_is_bf16(l->out)) {
        BN_DEV16_RD(prob, l->out);
        BN_DEV16_WR(dz, l->in_grad);
        bn_launch_early(softmax_grad<__nv_bfloat16>, grid, 256, 0, s, prob, labels, n, classes, 1.0f / (float)n,
                        targets_of(sp), dz);
    } else {
        BN_DEV_RD(prob, l->out);
        BN_DEV_WR(dz, l->in_grad);
        bn_launch_early(softmax_grad<float>, grid, 256, 0, s, prob, labels, n, classes, 1.0f / (float)n,
                        targets_of(sp), dz);
    }
    BN_CUDA_LAUNCH();
    return BN_OK;
}

BN_CODE_ANCHOR(softmax_ce, softmax_grad<float>) /* code_load.cu */
