/* optimizer_gpu.cu - each optimizer's update as one kernel over the parameter slab, or over one
 * layer's run of it. Each element (or each four that share a segment) finds its multipliers in
 * the segment table (a handful of entries) and goes through its optimizer's rule, the one the
 * CPU loop calls (core/optimizers/). */
#include "core/optimizers/optimizers.h"
#include "gpu/bf16.cuh"
#include "gpu/code_anchor.cuh"
#include "gpu/cuda_check.h"
#include "gpu/param_update.cuh"
#include "gpu/pdl.cuh"
#include "optimizer.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Moves the schedule's cursor on to the step that starts (bn_optimizer_begin_step). */
static __global__ void cursor_step(int *cursor)
{
    bn_early_entry(); /* pdl.cuh */
    *cursor += 1;
}

/* One element's update from the gradient slab (gpu/param_update.cuh). */
template <bn_rule_fn Rule, int N, bool W16>
static __device__ __forceinline__ void update_one(const bn_update_args &u, bn_step_rates r, size_t i)
{
    bn_update_slot<N> v;
    bn_update_read<N>(u, i, &v);
    bn_update_write<Rule, N, W16>(u, r, i, u.g[i], v);
}

/* The update of elements [u.lo, u.hi) by Rule, which keeps N state slabs. Where the slabs start
 * 16-byte aligned (`fours`; element 4q then is too), a thread takes four neighbouring elements at a
 * time: where the four share a segment, their weights, gradients and state come in 16-byte loads
 * and the segment is found once for them; the ends of the range and fours that straddle two
 * segments go element by element. Each element's arithmetic is the rule's either way. */
template <bn_rule_fn Rule, int N, bool W16>
__global__ void update(bn_update_args u, int fours)
{
    bn_early_entry(); /* pdl.cuh */
    const int at = bn_update_cursor(u);
    const bn_step_rates r = bn_update_rates_at(u, at);
    const size_t lo = u.lo, hi = u.hi;
    const size_t stride = (size_t)gridDim.x * blockDim.x, first = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    const size_t q0 = (lo + 3) / 4, q1 = hi / 4; /* the whole fours inside [lo, hi) */
    if (!fours || q0 >= q1) {
        for (size_t i = lo + first; i < hi; i += stride) update_one<Rule, N, W16>(u, r, i);
    } else {
        /* The ends: fewer than four elements each, taken by the first threads. */
        if (first < 4 * q0 - lo) update_one<Rule, N, W16>(u, r, lo + first);
        if (first < hi - 4 * q1) update_one<Rule, N, W16>(u, r, 4 * q1 + first);
        for (size_t q = q0 + first; q < q1; q += stride) {
            const size_t i = 4 * q;
            const int seg = bn_update_seg(u, i);
            if (seg != bn_update_seg(u, i + 3)) {
                for (size_t e = i; e < i + 4; e++) update_one<Rule, N, W16>(u, r, e);
                continue;
            }
            float4 wv = *(const float4 *)(u.w + i), sv[N > 0 ? N : 1];
            const float4 gv = *(const float4 *)(u.g + i);
            for (int j = 0; j < N; j++) sv[j] = *(const float4 *)(u.state[j] + i);
            float lr_mult, decay_mult;
            bn_update_mults(u, seg, &lr_mult, &decay_mult);
            const float rate = r.lr * lr_mult, decay = u.wd * decay_mult;
            float *wp = &wv.x;
            const float *gp = &gv.x;
#pragma unroll
            for (int e = 0; e < 4; e++) {
                float si[N > 0 ? N : 1];
                for (int j = 0; j < N; j++) si[j] = (&sv[j].x)[e];
                Rule(&wp[e], gp[e], si, rate, decay, r, u.k);
                for (int j = 0; j < N; j++) (&sv[j].x)[e] = si[j];
            }
            for (int j = 0; j < N; j++) *(float4 *)(u.state[j] + i) = sv[j];
            *(float4 *)(u.w + i) = wv;
            if (W16)
#pragma unroll
                for (int e = 0; e < 4; e++) bn_st_bf16((__nv_bfloat16 *)u.w16 + i + e, wp[e]);
        }
    }
}

typedef void (*update_kernel)(bn_update_args, int);

/* Each optimizer's kernels, FP32 and with the BF16 weight copy, in the optimizer table's order. */
typedef struct optimizer_kernels {
    update_kernel fp32, w16;
} optimizer_kernels;

#define KERNELS(name) \
    {update<bn_##name##_rule, bn_##name##_state_count, false>, update<bn_##name##_rule, bn_##name##_state_count, true>},
static const optimizer_kernels kernels[] = {BN_OPTIMIZERS(KERNELS)};

static bn_status upload_segments(bn_optimizer *o)
{
    size_t bytes = (size_t)o->num_segments * sizeof *o->segments;
    BN_TRY(bn_device_alloc(&o->device_segments, bytes));
    return bn_device_h2d(o->device_segments, o->segments, bytes);
}

/* Queues the rates of steps first .. first+count-1 into the table (which holds them) and the
 * cursor's reset, on the context stream. */
static bn_status queue_schedule(bn_optimizer *o, long first, long count)
{
    bn_step_rates *rates = (bn_step_rates *)malloc((size_t)count * sizeof *rates);
    if (!rates) return bn_error(BN_ERR_NOMEM, "out of host memory for the learning-rate schedule");
    for (long i = 0; i < count; i++) rates[i] = bn_optimizer_rates(o, first + i);
    bn_status s = bn_device_h2d_queued(&o->schedule_up, o->dev_schedule, rates, (size_t)count * sizeof *rates);
    free(rates);
    /* The cursor: the run's first step moves it to 1 (bn_optimizer_begin_step). */
    if (s == BN_OK) s = bn_device_zero(o->dev_cursor, sizeof(int));
    if (s == BN_OK) o->schedule_first = first, o->schedule_len = count;
    return s;
}

extern "C" bn_status bn_optimizer_schedule(bn_optimizer *o, bn_net *net, long first, long count)
{
    /* Taken as it is where bn_optimizer_schedule_ahead queued this very run. */
    const int queued = o->schedule_ahead && o->schedule_first == first && o->schedule_len == count;
    o->schedule_ahead = 0;
    if (queued || count <= 0) return BN_OK;
    if (count > o->schedule_cap) {
        bn_device_free(o->dev_schedule);
        o->dev_schedule = NULL;
        o->schedule_cap = 0;
        BN_TRY(bn_device_alloc((void **)&o->dev_schedule, (size_t)count * sizeof *o->dev_schedule));
        o->schedule_cap = count;
        /* A step captured earlier reads the old table. */
        net->pass.ctx->buffer_generation++;
    }
    if (!o->dev_cursor) {
        BN_TRY(bn_device_alloc((void **)&o->dev_cursor, sizeof(int)));
        BN_TRY(bn_device_zero(o->dev_cursor, sizeof(int)));
    }
    return queue_schedule(o, first, count);
}

extern "C" bn_status bn_optimizer_schedule_ahead(bn_optimizer *o, long first, long count)
{
    o->schedule_ahead = 0;
    /* A table that would have to grow is left to the epoch's start: freeing the old one would
     * wait for the steps still queued. */
    if (count <= 0 || count > o->schedule_cap || !o->dev_cursor) return BN_OK;
    BN_TRY(queue_schedule(o, first, count));
    o->schedule_ahead = 1;
    return BN_OK;
}

#define UPDATE_THREADS 256

/* Whether the rates of step o->iter come from the device's schedule. */
static int scheduled(const bn_optimizer *o)
{
    return o->schedule_len && o->iter >= o->schedule_first && o->iter < o->schedule_first + o->schedule_len;
}

extern "C" bn_status bn_optimizer_begin_step_gpu(bn_optimizer *o, bn_net *net)
{
    if (!scheduled(o) || !o->dev_cursor) return BN_OK;
    bn_ctx *ctx = net->pass.ctx;
    cudaStream_t s = (cudaStream_t)ctx->stream;
    if (ctx->side_stream) {
        BN_TRY(bn_ctx_fork_side(ctx));
        s = (cudaStream_t)ctx->side_stream;
    }
    bn_launch_early(cursor_step, dim3(1), dim3(1), 0, s, o->dev_cursor);
    BN_CUDA_LAUNCH();
    return BN_OK;
}

/* The blocks of an update of `count` elements: a thread per four with `fours`, else per element. */
static int update_blocks(size_t count, int fours)
{
    const size_t want = ((fours ? (count + 3) / 4 : count) + UPDATE_THREADS - 1) / UPDATE_THREADS;
    return want < 1 ? 1 : want > 1024 ? 1024 : (int)want;
}

extern "C" bn_status bn_optimizer_range_args_gpu(bn_optimizer *o, bn_net *net, size_t lo, size_t hi, bn_step_rates r,
                                                 bn_update_args *u)
{
    if (!o->device_segments) BN_TRY(upload_segments(o));
    memset(u, 0, sizeof *u);
    BN_DEV_WR(w, net->params);
    BN_DEV_RD(g, net->grads);
    u->w = w, u->g = g;
    if (net->params16 && !(u->w16 = bn_blob_dev16_wr(net->params16))) return bn_last_status();
    int seg0 = 0;
    while (seg0 + 1 < o->num_segments && lo >= o->segments[seg0 + 1].offset) seg0++;
    u->segs = (const bn_param_segment *)o->device_segments + seg0;
    while (seg0 + u->nseg < o->num_segments && o->segments[seg0 + u->nseg].offset < hi) u->nseg++;
    if (u->nseg <= BN_UPDATE_NEAR_SEGS)
        for (int j = 0; j < u->nseg; j++) u->near[j] = o->segments[seg0 + j];
    u->lo = lo, u->hi = hi, u->r = r;
    u->schedule = scheduled(o) ? o->dev_schedule : NULL;
    u->cursor = o->dev_cursor;
    const bn_train_config *c = &o->cfg;
    for (int j = 0; j < o->num_state; j++)
        if (!(u->state[j] = bn_blob_dev_wr(o->state[j]))) return bn_last_status();
    u->k = bn_optimizer_type_at(c->optimizer)->consts(c);
    u->wd = (float)c->weight_decay;
    u->optimizer = c->optimizer;
    return BN_OK;
}

/* The update of elements [lo, hi) on stream s. */
static bn_status launch(bn_optimizer *o, bn_net *net, size_t lo, size_t hi, bn_step_rates r, cudaStream_t s)
{
    bn_update_args u;
    BN_TRY(bn_optimizer_range_args_gpu(o, net, lo, hi, r, &u));
    update_kernel kern = u.w16 ? kernels[u.optimizer].w16 : kernels[u.optimizer].fp32;
    int fours = ((uintptr_t)u.w & 15) == 0 && ((uintptr_t)u.g & 15) == 0;
    for (int j = 0; j < o->num_state; j++) fours = fours && ((uintptr_t)u.state[j] & 15) == 0;
    bn_launch_early(kern, update_blocks(hi - lo, fours), UPDATE_THREADS, 0, s, u, fours);
    BN_CUDA_LAUNCH();
    return BN_OK;
}

extern "C" bn_status bn_optimizer_step_gpu(bn_optimizer *o, bn_net *net, bn_step_rates r)
{
    return launch(o, net, 0, net->num_params, r, (cudaStream_t)net->pass.ctx->stream);
}

extern "C" bn_status bn_optimizer_update_range_gpu(bn_optimizer *o, bn_net *net, size_t lo, size_t hi,
                                                   bn_step_rates r, void *stream)
{
    if (stream) return launch(o, net, lo, hi, r, (cudaStream_t)stream);
    bn_ctx *ctx = net->pass.ctx;
    BN_TRY(bn_ctx_fork_side(ctx));
    return launch(o, net, lo, hi, r, (cudaStream_t)ctx->side_stream);
}

BN_CODE_ANCHOR(optimizer_gpu, kernels[0].fp32) /* code_load.cu */
