/* optimizer_gpu.cu - each optimizer's update as one kernel over the parameter slab, or over one
 * layer's run of it. Each element (or each four that share a segment) finds its multipliers in
 * the segment table (a handful of entries) and goes through its optimizer's rule, the one the
 * CPU loop calls (core/optimizers/). */
#include "core/optimizers/optimizers.h"
#include "gpu/bf16.cuh"
#include "gpu/cuda_check.h"
#include "gpu/last_arrival.cuh"
#include "gpu/pdl.cuh"
#include "optimizer.h"

#include <stdint.h>
#include <stdlib.h>

/* The segment (of segs, nseg entries in offset order, the first holding lo) that holds element
 * i: the last that starts at or before it, by bisection (a bucket's or the slab's update spans
 * a segment or more a layer). */
static __device__ __forceinline__ const bn_param_segment *segment_at(const bn_param_segment *segs, int nseg, size_t i)
{
    int a = 0, b = nseg - 1;
    while (a < b) {
        const int m = (a + b + 1) / 2;
        if (segs[m].offset <= i) a = m;
        else b = m - 1;
    }
    return &segs[a];
}

/* The step's rates: schedule[*cursor] while a schedule covers the step, else r. */
static __device__ __forceinline__ bn_step_rates step_rates(bn_step_rates r, const bn_step_rates *schedule,
                                                           const int *cursor, int *at)
{
    *at = 0;
    if (schedule) *at = *cursor, r = schedule[*at];
    return r;
}

/* With a schedule and `advance`, the last block to finish moves the cursor to the next step
 * (cursor[1] counts the blocks done). */
static __device__ __forceinline__ void finish_step(const bn_step_rates *schedule, int *cursor, int at, int advance)
{
    if (schedule && advance && bn_last_arrival((unsigned *)(cursor + 1), gridDim.x) && threadIdx.x == 0)
        *cursor = at + 1;
}

/* The updated weight written back; under --precision bf16 (W16 true) also its BF16 copy, which
 * the layers' products read, in the same pass. The FP32 kernels are those without it. */
template <bool W16>
static __device__ __forceinline__ void store_weight(float *w, __nv_bfloat16 *w16, size_t i, float wi)
{
    w[i] = wi;
    if (W16) bn_st_bf16(w16 + i, wi);
}

/* The state slabs of an update, passed by value. */
typedef struct state_slabs {
    float *s[BN_OPTIMIZER_MAX_STATE];
} state_slabs;

/* An optimizer's rule for one element (core/optimizers/optimizer_type.h). */
typedef void (*rule_fn)(float *w, float g, float *s, float rate, float decay, bn_step_rates r, bn_rule_consts k);

/* One element's update: its weight and state values read, passed through the rule, written back. */
template <rule_fn Rule, int N, bool W16>
static __device__ __forceinline__ void update_one(float *__restrict__ w, __nv_bfloat16 *__restrict__ w16,
                                                  const float *__restrict__ g, const state_slabs &st,
                                                  const bn_param_segment *seg, size_t i, bn_step_rates r,
                                                  bn_rule_consts k, float wd)
{
    float wi = w[i], si[N];
    for (int j = 0; j < N; j++) si[j] = st.s[j][i];
    Rule(&wi, g[i], si, r.lr * seg->lr_mult, wd * seg->decay_mult, r, k);
    for (int j = 0; j < N; j++) st.s[j][i] = si[j];
    store_weight<W16>(w, w16, i, wi);
}

/* The update of elements [lo, hi) by Rule, which keeps N state slabs. Where the slabs start
 * 16-byte aligned (`fours`; element 4q then is too), a thread takes four neighbouring elements at a
 * time: where the four share a segment, their weights, gradients and state come in 16-byte loads
 * and the segment is found once for them; the ends of the range and fours that straddle two
 * segments go element by element. Each element's arithmetic is the rule's either way. */
template <rule_fn Rule, int N, bool W16>
__global__ void update(float *__restrict__ w, __nv_bfloat16 *__restrict__ w16, const float *__restrict__ g,
                       state_slabs st, const bn_param_segment *__restrict__ segs, int nseg, size_t lo, size_t hi,
                       bn_step_rates r, const bn_step_rates *__restrict__ schedule, int *cursor, int advance,
                       bn_rule_consts k, float wd, int fours)
{
    bn_early_entry(); /* pdl.cuh */
    int at;
    r = step_rates(r, schedule, cursor, &at);
    const size_t stride = (size_t)gridDim.x * blockDim.x, first = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    const size_t q0 = (lo + 3) / 4, q1 = hi / 4; /* the whole fours inside [lo, hi) */
    if (!fours || q0 >= q1) {
        for (size_t i = lo + first; i < hi; i += stride)
            update_one<Rule, N, W16>(w, w16, g, st, segment_at(segs, nseg, i), i, r, k, wd);
    } else {
        /* The ends: fewer than four elements each, taken by the first threads. */
        if (first < 4 * q0 - lo) {
            const size_t i = lo + first;
            update_one<Rule, N, W16>(w, w16, g, st, segment_at(segs, nseg, i), i, r, k, wd);
        }
        if (first < hi - 4 * q1) {
            const size_t i = 4 * q1 + first;
            update_one<Rule, N, W16>(w, w16, g, st, segment_at(segs, nseg, i), i, r, k, wd);
        }
        for (size_t q = q0 + first; q < q1; q += stride) {
            const size_t i = 4 * q;
            const bn_param_segment *seg = segment_at(segs, nseg, i);
            if (seg != segment_at(segs, nseg, i + 3)) {
                for (size_t e = i; e < i + 4; e++)
                    update_one<Rule, N, W16>(w, w16, g, st, segment_at(segs, nseg, e), e, r, k, wd);
                continue;
            }
            float4 wv = *(const float4 *)(w + i), sv[N > 0 ? N : 1];
            const float4 gv = *(const float4 *)(g + i);
            for (int j = 0; j < N; j++) sv[j] = *(const float4 *)(st.s[j] + i);
            const float rate = r.lr * seg->lr_mult, decay = wd * seg->decay_mult;
            float *wp = &wv.x;
            const float *gp = &gv.x;
#pragma unroll
            for (int e = 0; e < 4; e++) {
                float si[N > 0 ? N : 1];
                for (int j = 0; j < N; j++) si[j] = (&sv[j].x)[e];
                Rule(&wp[e], gp[e], si, rate, decay, r, k);
                for (int j = 0; j < N; j++) (&sv[j].x)[e] = si[j];
            }
            for (int j = 0; j < N; j++) *(float4 *)(st.s[j] + i) = sv[j];
            *(float4 *)(w + i) = wv;
            if (W16)
#pragma unroll
                for (int e = 0; e < 4; e++) bn_st_bf16(w16 + i + e, wp[e]);
        }
    }
    finish_step(schedule, cursor, at, advance);
}

typedef void (*update_kernel)(float *, __nv_bfloat16 *, const float *, state_slabs, const bn_param_segment *, int,
                              size_t, size_t, bn_step_rates, const bn_step_rates *, int *, int, bn_rule_consts, float,
                              int);

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
    /* The cursor; the count of update blocks done with it beside it is left as it is. */
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
    /* The cursor and the count of update blocks done with it. */
    if (!o->dev_cursor) {
        BN_TRY(bn_device_alloc((void **)&o->dev_cursor, 2 * sizeof(int)));
        BN_TRY(bn_device_zero(o->dev_cursor, 2 * sizeof(int)));
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

/* The blocks of an update of `count` elements: a thread per four with `fours`, else per element. */
static int update_blocks(size_t count, int fours)
{
    const size_t want = ((fours ? (count + 3) / 4 : count) + UPDATE_THREADS - 1) / UPDATE_THREADS;
    return want < 1 ? 1 : want > 1024 ? 1024 : (int)want;
}

/* The update of elements [lo, hi) on stream s; `advance`: this launch is the step's last. */
static bn_status launch(bn_optimizer *o, bn_net *net, size_t lo, size_t hi, bn_step_rates r, int advance,
                        cudaStream_t s)
{
    if (!o->device_segments) BN_TRY(upload_segments(o));
    BN_DEV_WR(w, net->params);
    BN_DEV_RD(g, net->grads);
    __nv_bfloat16 *w16 = NULL;
    if (net->params16 && !(w16 = (__nv_bfloat16 *)bn_blob_dev16_wr(net->params16))) return bn_last_status();
    int seg0 = 0;
    while (seg0 + 1 < o->num_segments && lo >= o->segments[seg0 + 1].offset) seg0++;
    const bn_param_segment *segs = (const bn_param_segment *)o->device_segments + seg0;
    int nseg = o->num_segments - seg0;
    int scheduled = o->schedule_len && o->iter >= o->schedule_first && o->iter < o->schedule_first + o->schedule_len;
    const bn_step_rates *schedule = scheduled ? o->dev_schedule : NULL;
    const bn_train_config *c = &o->cfg;
    state_slabs st = {};
    for (int j = 0; j < o->num_state; j++)
        if (!(st.s[j] = bn_blob_dev_wr(o->state[j]))) return bn_last_status();
    const bn_rule_consts k = bn_optimizer_type_at(c->optimizer)->consts(c);
    update_kernel kern = w16 ? kernels[c->optimizer].w16 : kernels[c->optimizer].fp32;
    int fours = ((uintptr_t)w & 15) == 0 && ((uintptr_t)g & 15) == 0;
    for (int j = 0; j < o->num_state; j++) fours = fours && ((uintptr_t)st.s[j] & 15) == 0;
    bn_launch_early(kern, update_blocks(hi - lo, fours), UPDATE_THREADS, 0, s, w, w16, g, st, segs, nseg, lo, hi, r,
                    schedule, o->dev_cursor, advance, k, (float)c->weight_decay, fours);
    BN_CUDA_LAUNCH();
    return BN_OK;
}

extern "C" bn_status bn_optimizer_step_gpu(bn_optimizer *o, bn_net *net, bn_step_rates r)
{
    return launch(o, net, 0, net->num_params, r, 1, (cudaStream_t)net->pass.ctx->stream);
}

extern "C" bn_status bn_optimizer_update_range_gpu(bn_optimizer *o, bn_net *net, size_t lo, size_t hi,
                                                   bn_step_rates r, int last, void *stream)
{
    if (stream) return launch(o, net, lo, hi, r, last, (cudaStream_t)stream);
    bn_ctx *ctx = net->pass.ctx;
    BN_TRY(bn_ctx_fork_side(ctx));
    return launch(o, net, lo, hi, r, last, (cudaStream_t)ctx->side_stream);
}
