/* optimizer_gpu.cu - the SGD update as one kernel over the parameter slab, or over one layer's
 * run of it. Each element walks the segment table (a handful of entries) to find its
 * multipliers. */
#include "gpu/cuda_check.h"
#include "gpu/last_arrival.cuh"
#include "optimizer.h"

#include <stdlib.h>

/* Updates elements [lo, hi); segs (nseg entries) starts with the segment holding lo.
 * schedule/cursor, when set, give the rate of this update: schedule[*cursor]; with `advance`,
 * the last block then moves the cursor to the next step (cursor[1] counts the blocks done). */
__global__ void sgd_update(float *__restrict__ w, const float *__restrict__ g, float *__restrict__ v,
                           const bn_param_segment *__restrict__ segs, int nseg, size_t lo, size_t hi, float lr,
                           const float *__restrict__ schedule, int *cursor, int advance, float mom, float wd)
{
    int at = 0;
    if (schedule) at = *cursor, lr = schedule[at];
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = lo + (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < hi; i += stride) {
        int s = 0;
        while (s + 1 < nseg && i >= segs[s + 1].offset) s++;
        float rate = lr * segs[s].lr_mult, decay = wd * segs[s].decay_mult;
        float vi = mom * v[i] + rate * (g[i] + decay * w[i]);
        v[i] = vi;
        w[i] -= vi;
    }
    if (schedule && advance && bn_last_arrival((unsigned *)(cursor + 1), gridDim.x) && threadIdx.x == 0)
        *cursor = at + 1;
}

static bn_status upload_segments(bn_sgd *o)
{
    size_t bytes = (size_t)o->num_segments * sizeof *o->segments;
    BN_TRY(bn_device_alloc(&o->device_segments, bytes));
    return bn_device_h2d(o->device_segments, o->segments, bytes);
}

extern "C" bn_status bn_sgd_schedule(bn_sgd *o, long first, long count)
{
    if (count <= 0) return BN_OK;
    if (count > o->schedule_cap) {
        bn_device_free(o->dev_schedule);
        o->dev_schedule = NULL;
        o->schedule_cap = 0;
        BN_TRY(bn_device_alloc((void **)&o->dev_schedule, (size_t)count * sizeof(float)));
        o->schedule_cap = count;
    }
    /* The cursor and the count of update blocks done with it. */
    if (!o->dev_cursor) {
        BN_TRY(bn_device_alloc((void **)&o->dev_cursor, 2 * sizeof(int)));
        BN_TRY(bn_device_zero(o->dev_cursor, 2 * sizeof(int)));
    }
    float *rates = (float *)malloc((size_t)count * sizeof(float));
    if (!rates) return bn_error(BN_ERR_NOMEM, "out of host memory for the learning-rate schedule");
    for (long i = 0; i < count; i++) rates[i] = (float)bn_sgd_lr(o, first + i);
    int zero = 0;
    bn_status s = bn_device_h2d(o->dev_schedule, rates, (size_t)count * sizeof(float));
    if (s == BN_OK) s = bn_device_h2d(o->dev_cursor, &zero, sizeof zero);
    free(rates);
    if (s == BN_OK) o->schedule_first = first, o->schedule_len = count;
    return s;
}

/* The update of elements [lo, hi) on stream s; `advance`: this launch is the step's last. */
static bn_status launch(bn_sgd *o, bn_net *net, size_t lo, size_t hi, float lr, int advance, cudaStream_t s)
{
    if (!o->device_segments) BN_TRY(upload_segments(o));
    BN_DEV_WR(w, net->params);
    BN_DEV_RD(g, net->grads);
    BN_DEV_WR(v, o->momentum);
    int seg0 = 0;
    while (seg0 + 1 < o->num_segments && lo >= o->segments[seg0 + 1].offset) seg0++;
    int threads = 256;
    size_t want = (hi - lo + threads - 1) / threads;
    int blocks = want < 1 ? 1 : want > 1024 ? 1024 : (int)want;
    int scheduled = o->schedule_len && o->iter >= o->schedule_first && o->iter < o->schedule_first + o->schedule_len;
    sgd_update<<<blocks, threads, 0, s>>>(w, g, v, (const bn_param_segment *)o->device_segments + seg0,
                                          o->num_segments - seg0, lo, hi, lr,
                                          scheduled ? o->dev_schedule : NULL, o->dev_cursor, advance,
                                          (float)o->cfg.momentum, (float)o->cfg.weight_decay);
    BN_CUDA_LAUNCH();
    return BN_OK;
}

extern "C" bn_status bn_sgd_step_gpu(bn_sgd *o, bn_net *net, float lr)
{
    return launch(o, net, 0, net->num_params, lr, 1, (cudaStream_t)net->pass.ctx->stream);
}

extern "C" bn_status bn_sgd_update_layer_gpu(bn_sgd *o, bn_net *net, const bn_layer *l, float lr, int last)
{
    size_t lo = l->params[0].value->offset, hi = lo;
    for (int k = 0; k < l->num_params; k++) hi += bn_blob_count(l->params[k].value);
    bn_ctx *ctx = net->pass.ctx;
    BN_TRY(bn_ctx_fork_side(ctx));
    return launch(o, net, lo, hi, lr, last, (cudaStream_t)ctx->side_stream);
}
