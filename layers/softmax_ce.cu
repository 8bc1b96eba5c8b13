/* softmax_ce.cu - softmax + cross-entropy on the GPU, for any batch size and class count.
 *
 * Forward, one kernel: one warp per example row finds the row maximum and its first index (the
 * CPU's argmax), sums exp(z - max) in double, writes the probabilities and the row's loss
 * (logsumexp - z[label]) and correct flag to a scratch array. Every block then counts itself
 * in on a device counter; the block that arrives last (all rows are written by then) adds the
 * rows in a fixed order into metrics = [loss sum, correct count] and leaves the counter at
 * zero for the next launch. Which block is last varies, the order of the sums does not, so
 * the metrics are the same on every run; nothing past the current batch is read. The loss
 * stays on the device: the host reads it only when it asks (bn_net_metrics).
 * Backward: dz = (p - onehot(label)) / n, elementwise.
 *
 * For the trainer (bn_softmax_ce_fuse) the forward kernel can do two more things, saving a
 * launch each: the last block adds the metrics it has just written into an accumulator
 * (acc[i] += metrics[i], the float additions a separate add would make), and in a training
 * pass each warp writes its row's dz beside the probabilities, from the same float values and
 * with the same expression as the backward kernel, which then is not launched. */
#include <math.h>

#include "cuda_check.h"
#include "pdl.cuh"
#include "last_arrival.cuh"
#include "softmax_ce.h"

#define ROW_THREADS 256            /* 8 warps: 8 rows per block; also the final sum's threads */

/* The class index a label holds, or -1 when it is not an integer in [0, classes). */
static __device__ int label_of(float v, int classes)
{
    return v >= 0.0f && v < (float)classes && v == floorf(v) ? (int)v : -1;
}

/* The input gradient of one element: what softmax_grad writes, and what softmax_rows writes
 * when it is asked for it. */
static __device__ float grad_of(float p, int k, int label, float scale)
{
    return label >= 0 ? (p - (k == label)) * scale : NAN;
}

/* One row per warp as described above; `arrived` counts the blocks that are done (zero before
 * the launch, and again after it). With dz, also the rows' input gradients (scale = 1/n); with
 * acc, the last block also adds the metrics into acc[0..1]. */
static __global__ void softmax_rows(const float *__restrict__ z, const float *__restrict__ labels, int n,
                                    int classes, float *__restrict__ prob, float *__restrict__ dz, float scale,
                                    double *row_loss, double *row_correct, unsigned *arrived,
                                    float *__restrict__ metrics, float *__restrict__ acc)
{
    bn_early_entry(); /* pdl.cuh */
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row < n) { /* the same for the whole warp, so the shuffles below see every lane */
        const float *zi = z + (size_t)row * classes;
        float *pi = prob + (size_t)row * classes;

        /* Each lane scans its classes in increasing order and keeps its first maximum; merging
         * prefers the larger value, then the smaller index: the first maximum of the row. */
        float best = -INFINITY;
        int at = classes;
        for (int k = lane; k < classes; k += 32)
            if (at == classes || zi[k] > best) best = zi[k], at = k;
        for (int off = 16; off > 0; off >>= 1) {
            float ob = __shfl_xor_sync(0xffffffffu, best, off);
            int oa = __shfl_xor_sync(0xffffffffu, at, off);
            if (ob > best || (ob == best && oa < at)) best = ob, at = oa;
        }

        double sum = 0.0;
        for (int k = lane; k < classes; k += 32) sum += exp((double)zi[k] - best);
        for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
        double lse = best + log(sum);
        int label = label_of(labels[row], classes);
        if (dz) { /* the same for the whole launch */
            float *di = dz + (size_t)row * classes;
            for (int k = lane; k < classes; k += 32) {
                float p = (float)exp((double)zi[k] - lse);
                pi[k] = p;
                di[k] = grad_of(p, k, label, scale);
            }
        } else {
            for (int k = lane; k < classes; k += 32) pi[k] = (float)exp((double)zi[k] - lse);
        }

        if (lane == 0) {
            row_loss[row] = label >= 0 ? lse - zi[label] : (double)NAN;
            row_correct[row] = label >= 0 && at == label ? 1.0 : 0.0;
        }
    }

    if (!bn_last_arrival(arrived, gridDim.x)) return;

    /* The last block: metrics[0] = sum of row_loss[0..n), metrics[1] = sum of row_correct[0..n),
     * each thread over a fixed stride of rows, then a tree in shared memory. The rows of other
     * blocks are read through L2 (__ldcg), where their writes went. */
    __shared__ double loss[ROW_THREADS], correct[ROW_THREADS];
    double l = 0.0, c = 0.0;
    for (int i = threadIdx.x; i < n; i += ROW_THREADS) {
        l += __ldcg(row_loss + i);
        c += __ldcg(row_correct + i);
    }
    loss[threadIdx.x] = l;
    correct[threadIdx.x] = c;
    __syncthreads();
    for (int half = ROW_THREADS / 2; half > 0; half /= 2) {
        if (threadIdx.x < half) {
            loss[threadIdx.x] += loss[threadIdx.x + half];
            correct[threadIdx.x] += correct[threadIdx.x + half];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        float l_sum = (float)loss[0], c_sum = (float)correct[0];
        metrics[0] = l_sum;
        metrics[1] = c_sum;
        if (acc) {
            acc[0] += l_sum;
            acc[1] += c_sum;
        }
    }
}

static __global__ void softmax_grad(const float *__restrict__ prob, const float *__restrict__ labels, int n,
                                    int classes, float scale, float *__restrict__ dz)
{
    size_t total = (size_t)n * classes, stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
        int row = (int)(i / classes), k = (int)(i % classes);
        dz[i] = grad_of(prob[i], k, label_of(labels[row], classes), scale);
    }
}

extern "C" void bn_softmax_ce_gpu_release(softmax_priv *p)
{
    bn_device_free(p->dev_rows);
    p->dev_rows = NULL;
}

extern "C" bn_status bn_softmax_ce_forward_gpu(bn_layer *l, const bn_pass *pass)
{
    softmax_priv *sp = (softmax_priv *)l->priv;
    int n = l->in->n, classes = sp->classes;
    size_t rows = l->in->capacity / (size_t)classes;
    /* Scratch: per-row loss, per-row correct flag, then one double's room for the block counter,
     * zeroed once here; each launch leaves it at zero. */
    if (!sp->dev_rows) {
        BN_TRY(bn_device_alloc((void **)&sp->dev_rows, (2 * rows + 1) * sizeof(double)));
        bn_status st = bn_device_zero(sp->dev_rows + 2 * rows, sizeof(double));
        if (st != BN_OK) {
            bn_softmax_ce_gpu_release(sp);
            return st;
        }
    }
    unsigned *arrived = (unsigned *)(sp->dev_rows + 2 * rows);
    sp->grad_written = 0;
    BN_DEV_RD(z, l->in);
    BN_DEV_RD(labels, pass->labels);
    BN_DEV_WR(prob, l->out);
    BN_DEV_WR(metrics, pass->metrics);
    float *dz = NULL, *acc = NULL;
    if (sp->grad_in_forward && pass->train && l->in_grad && !(dz = bn_blob_dev_wr(l->in_grad)))
        return bn_last_status();
    if (sp->acc && !(acc = bn_blob_dev_wr(sp->acc))) return bn_last_status();
    cudaStream_t s = (cudaStream_t)pass->ctx->stream;
    int rows_per_block = ROW_THREADS / 32;
    bn_launch_early(softmax_rows, dim3((n + rows_per_block - 1) / rows_per_block), dim3(ROW_THREADS), 0, s, z, labels,
                    n, classes, prob, dz, 1.0f / (float)n, sp->dev_rows, sp->dev_rows + rows, arrived, metrics, acc);
    BN_CUDA_LAUNCH();
    sp->grad_written = dz != NULL;
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
    BN_DEV_RD(prob, l->out);
    BN_DEV_RD(labels, pass->labels);
    BN_DEV_WR(dz, l->in_grad);
    size_t total = (size_t)n * classes;
    size_t blocks = (total + 255) / 256;
    softmax_grad<<<(int)(blocks > 4096 ? 4096 : blocks), 256, 0, (cudaStream_t)pass->ctx->stream>>>(
        prob, labels, n, classes, 1.0f / (float)n, dz);
    BN_CUDA_LAUNCH();
    return BN_OK;
}
