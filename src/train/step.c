/* step.c - one training step's work (step.h). */
#include "step.h"

bn_status bn_step_accumulate_metrics(bn_net *net, bn_blob *acc)
{
    if (net->pass.ctx) {
        BN_DEV_WR(dst, acc);
        BN_DEV_RD(src, net->metrics);
        return bn_gpu_add(dst, src, 2, net->pass.ctx);
    }
    BN_HOST_WR(dst, acc);
    BN_HOST_RD(src, net->metrics);
    dst[0] += src[0];
    dst[1] += src[1];
    return BN_OK;
}

void bn_step_body_mark(bn_step_body *b)
{
    b->mark.ld = bn_loader_marked(b->ld);
    b->mark.iter = b->opt->iter;
    b->mark.held = b->opt->held;
    b->mark.pend_first = b->pend_first, b->mark.pend_last = b->pend_last;
    b->mark.queued = b->sched ? b->sched->queued : 0;
    b->mark.take_staged = b->take_staged, b->mark.stage_next = b->stage_next;
    b->mark.step = b->net->pass.step;
}

void bn_step_body_rewind(void *arg)
{
    bn_step_body *b = arg;
    bn_loader_rewind(b->ld, &b->mark.ld);
    b->opt->iter = b->mark.iter;
    b->opt->held = b->mark.held;
    b->pend_first = b->mark.pend_first, b->pend_last = b->mark.pend_last;
    if (b->sched) b->sched->queued = b->mark.queued;
    b->take_staged = b->mark.take_staged, b->stage_next = b->mark.stage_next;
    b->net->pass.step = b->mark.step;
}

/* The bucket: layers pend_first..pend_last, whose parameters and gradients are one contiguous
 * range [*lo, *hi) of the slabs (layers are carved in order), in elements. */
static void bucket_range(const bn_step_body *b, size_t *lo, size_t *hi)
{
    const bn_layer *first = b->net->layers[b->pend_first], *last = b->net->layers[b->pend_last];
    const bn_blob *end = last->params[last->num_params - 1].value;
    *lo = first->params[0].value->offset;
    *hi = end->offset + bn_blob_count(end);
}

/* Sums the bucket's gradients across the ranks in one all-reduce and queues its layers' updates
 * after it, in one launch (one a layer had left 12 launches, 33 us, at the end of resnet_fashion's
 * step on two GPUs), on the communication stream, holding up neither compute stream; where the
 * sum can apply the update itself (a bucket pushed through the peers' memory), no launch. */
static bn_status flush_bucket(bn_step_body *b)
{
    if (b->pend_last < 0) return BN_OK;
    size_t lo, hi;
    bucket_range(b, &lo, &hi);
    float *g = bn_blob_dev_wr(b->net->grads);
    if (!g) return bn_last_status();
    bn_update_args u;
    BN_TRY(bn_optimizer_update_args(b->opt, b->net, b->pend_first, b->pend_last, &u));
    int updated;
    BN_TRY(bn_dist_allreduce_update(b->dist, b->net->pass.ctx, g + lo, hi - lo, b->weight, &u, &updated));
    if (!updated)
        BN_TRY(bn_optimizer_update_layers_on(b->opt, b->net, b->pend_first, b->pend_last, b->dist->stream));
    b->pend_first = b->pend_last = -1;
    return BN_OK;
}

/* A layer's gradients join the bucket, which is summed once it holds bucket_bytes: one all-reduce
 * per layer costs each layer NCCL's latency, which small layers (biases, batchnorm) do not repay,
 * while one for the whole slab would wait for the end of the backward pass. */
static bn_status bucket_layer(bn_step_body *b, const bn_layer *l)
{
    if (b->pend_last < 0) b->pend_last = l->index;
    b->pend_first = l->index;
    size_t lo, hi;
    bucket_range(b, &lo, &hi);
    return (hi - lo) * sizeof(float) >= b->bucket_bytes ? flush_bucket(b) : BN_OK;
}

/* Called as each layer's backward pass is queued (the last layer first). On one GPU the layer's
 * update follows at once. On several, its gradients join the bucket (bucket_layer) or, where the
 * all-reduces run after the backward pass (dist_schedule.h), the queue that finish_buckets cuts
 * into the same buckets once the pass is queued. */
static bn_status update_layer(void *arg, bn_net *net, bn_layer *l)
{
    bn_step_body *b = arg;
    if (!b->dist) return bn_optimizer_update_layer(b->opt, net, l);
    if (!l->num_params) return BN_OK;
    bn_schedule *q = b->sched;
    if (!q || !q->after) return bucket_layer(b, l);
    if (q->queued >= q->capacity) return bn_error(BN_ERR_INTERNAL, "all-reduce queue full at layer %s", l->name);
    q->order[q->queued++] = l->index;
    return BN_OK;
}

/* The step's remaining all-reduces: the queued layers' buckets, then the last bucket. */
static bn_status finish_buckets(bn_step_body *b)
{
    bn_schedule *q = b->sched;
    for (int i = 0; q && i < q->queued; i++) BN_TRY(bucket_layer(b, b->net->layers[q->order[i]]));
    if (q) q->queued = 0;
    return flush_bucket(b);
}

/* The whole gradient slab summed across the ranks, before an update of all of it on the stream
 * (when no side stream updates layer by layer). */
static bn_status allreduce_all(bn_step_body *b)
{
    float *g = b->net->grads ? bn_blob_dev_wr(b->net->grads) : NULL;
    if (!g) return b->net->grads ? bn_last_status() : BN_OK;
    BN_TRY(bn_dist_allreduce_grads(b->dist, b->net->pass.ctx, g, bn_blob_count(b->net->grads), b->weight));
    return bn_dist_join_comm(b->dist, b->net->pass.ctx);
}

/* A rank whose share of a short last batch is empty: no examples, but it joins every all-reduce
 * with zero gradients and makes the same update as the others. */
static bn_status empty_share_step(bn_step_body *b)
{
    BN_TRY(bn_optimizer_begin_step(b->opt, b->net));
    BN_TRY(bn_net_zero_grad(b->net));
    if (b->net->pass.ctx->side_stream) {
        for (int i = b->net->num_layers - 1; i >= 0; i--) BN_TRY(update_layer(b, b->net, b->net->layers[i]));
        BN_TRY(finish_buckets(b));
        BN_TRY(bn_dist_join_comm(b->dist, b->net->pass.ctx));
        BN_TRY(bn_optimizer_end_layered_step(b->opt, b->net));
        return BN_OK;
    }
    BN_TRY(allreduce_all(b));
    return bn_optimizer_step(b->opt, b->net);
}

/* The next step's batch into the loader's stage (net->after_first). */
static bn_status stage_next_batch(void *arg)
{
    bn_step_body *b = arg;
    return bn_loader_stage(b->ld, b->net, b->n);
}

/* On the GPU the gradients are zeroed beside the forward pass and each layer's update runs
 * beside the backward passes of the layers below it, so that neither waits in line. */
static bn_status step_passes(bn_step_body *b, int fused)
{
    /* A captured backward pass runs branches beside each other; on several GPUs a bucket's
     * all-reduce then follows every lane its layers may have run on (dist/comm.cu). */
    b->net->backward_beside = 1;
    if (b->take_staged) BN_TRY(bn_loader_take(b->ld, b->net, b->n));
    else BN_TRY(bn_loader_fill_next(b->ld, b->net, b->n, 1));
    BN_TRY(bn_net_zero_grad_beside(b->net));
    BN_TRY(bn_optimizer_begin_step(b->opt, b->net));
    /* The next step's batch, gathered on the side stream beside this step's forward pass, queued
     * once the first layer's pass is: queued ahead of that pass, the gather ran first and held it
     * back (LeNet's first convolution started 2.8 us into the step). It still waits only for the
     * step's start, where the zeroing forked the side stream. */
    b->net->after_first = b->stage_next ? stage_next_batch : NULL;
    b->net->after_first_arg = b;
    bn_status s = bn_net_forward(b->net, 1);
    b->net->after_first = NULL;
    BN_TRY(s);
    if (b->net->pass.ctx && b->net->pass.ctx->side_stream) {
        BN_TRY(bn_net_backward_each(b->net, update_layer, b));
        if (b->dist) {
            BN_TRY(finish_buckets(b));
            BN_TRY(bn_dist_join_comm(b->dist, b->net->pass.ctx));
        }
        BN_TRY(bn_optimizer_end_layered_step(b->opt, b->net));
    } else {
        BN_TRY(bn_net_backward(b->net));
        if (b->dist) BN_TRY(allreduce_all(b));
        BN_TRY(bn_optimizer_step(b->opt, b->net));
    }
    return fused ? BN_OK : bn_step_accumulate_metrics(b->net, b->acc);
}

/* The loss layer's forward is the last pass of the forward and its backward the first of the
 * backward, so nothing comes between them to disturb a gradient written in the forward. */
bn_status bn_step_body_run(void *arg)
{
    bn_step_body *b = arg;
    if (b->n == 0) return empty_share_step(b);
    int fused = bn_net_fuse_loss(b->net, b->acc, 1);
    bn_status s = step_passes(b, fused);
    if (fused) bn_net_unfuse_loss(b->net);
    return s;
}

