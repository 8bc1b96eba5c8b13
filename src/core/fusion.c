/* fusion.c - which layers' GPU passes run inside a neighbour's kernels, and which plain sums a
 * producer's CPU forward writes: every rule in one place.
 *
 * On a device two neighbouring layers often cost less as one kernel than as two: a launch and a
 * pass over the activations fewer. The network decides this once, when it is set up on a device,
 * by one pass over its producer-consumer pairs in layer order, trying the rules of the table
 * below on each pair in table order:
 *
 *   producer            consumer            what moves
 *   absorbs kind K      an activation of    the activation's forward, into the producer's
 *                         kind K            epilogue (and its backward where the hook says so)
 *   an activation of    absorbs kind K      the activation's backward, into the consumer's input
 *     kind K                                gradient
 *   any with            any                 passes of the consumer that the producer's kernels
 *     fuse_next_gpu                         take (dense -> softmax_ce: the dense head; conv2d ->
 *                                           2x2 maxpool: both of the pooling's passes)
 *
 * No rule names a layer type: an activation is a layer whose ops declare an elementwise kind
 * (absorbable_as, one of BN_ABSORB_ACTIVATIONS: the relu type's BN_ABSORB_RELU), and the layer
 * beside it is asked (fuse_gpu) only when its ops list that kind in absorbs (dense, conv2d,
 * batchnorm and add list the ReLU). fuse_next_gpu looks at what the next layer declares itself. The
 * hooks accept only the shapes and kernels they can serve; the rules here say which side may ask.
 *
 * A pair is considered only when the consumer is the producer's one reader and the producer its
 * one input (nothing fuses across a branch or a join): a fused pass may leave a blob or a
 * gradient unwritten (BN_FUSED_NO_IN, BN_FUSED_NO_IN_GRAD), which a second reader would see, and
 * a gradient fed by several readers must be summed before anyone masks it. No pass is taken over
 * twice: a layer whose pass is already done by another's kernels is not offered again.
 *
 * A channel join (joins_slices: concat) copies each input into its part of its output and its
 * output gradient back out, a pass over the joined activations each way. On a device an input
 * whose producer writes nothing else can write its part in place instead: once the rules above
 * are decided, bn_net_join_slices makes the producer's output and output gradient slices of the
 * join's (blob.h), and the join's passes skip it. Only where every kernel that reaches those
 * blobs honours a slice's stride: the producer's type says so of its passes (out_slices), of an
 * activation's passes done by the layer before it that layer's type (act_out_slices), and a
 * producer whose backward pass its consumer's kernels do keeps its own blobs. A join may itself be
 * an input of a later join, as in a dense block (each join the first input of the next, and read
 * by a batchnorm too): when its one other reader reads its input at the stride (in_slices), the
 * earlier join becomes a slice of the later one's output and gradient, so that a block's joins
 * share one buffer and none copies the one before it. The later join then writes the earlier
 * one's gradient (in place), and the other reader adds its own into it (nesting_partner). Joins
 * are taken last first, so that a nested join's inputs become slices of its slice.
 *
 * A blob read by two layers gets two gradients: the first reader writes the producer's output
 * gradient, the second a part of its own, and the network adds the part in before the producer's
 * backward pass, a pass over the gradient (three blobs' bytes) on the backward chain. Where the
 * kernels that read that output gradient load it element by element (an activation's, an add's,
 * a batchnorm's, also when the add or the batchnorm does the backward pass of the ReLU after it)
 * and declare it (sums_grad_part), they read both and add them as they load, the same float sum
 * rounded as a stored one (bn_net_fuse_grad_parts).
 *
 * During each step on a device the loss layer may fold more into its forward pass
 * (bn_net_fuse_loss): the metrics' running sums and its input gradient.
 *
 * On the CPU, a residual join costs a pass over three activations when it runs alone (read two,
 * write one), and its backward pass writes a gradient copy per input. A convolution whose output
 * only the join reads writes the join's sum from its own epilogue instead, and reads the join's
 * output gradient directly (bn_net_fuse_cpu_sums, decided for every network: the flags are read
 * by CPU passes only, and bn_net_blob_unwritten reports the convolution's output and gradient as
 * unwritten on both devices, so that comparisons between the two skip them alike). */
#include <stdlib.h>
#include <string.h>

#include "net.h"

/* A rule looks at producer p and its sole consumer c and fuses them when it applies. */
typedef void (*fusion_rule)(bn_layer *p, bn_layer *c);

/* Whether layer `taker` may be asked to do the passes of its neighbour `act`: act is an
 * elementwise activation of a kind that taker's fuse_gpu takes. */
static int may_take_activation(const bn_layer *taker, const bn_layer *act)
{
    return (act->ops->absorbable_as & BN_ABSORB_ACTIVATIONS & taker->ops->absorbs) && taker->ops->fuse_gpu;
}

/* The producer writes the activation's output from its epilogue (a dense layer), and may take
 * its backward pass too (an add, whose backward is elementwise: the hook's BN_FUSED_* bits). */
static void activation_forward_into_producer(bn_layer *p, bn_layer *c)
{
    if (!may_take_activation(p, c) || (c->gpu_fused & BN_FUSED_FORWARD)) return;
    const int taken = p->ops->fuse_gpu(p, c, 1);
    if (taken) c->gpu_fused |= taken | BN_FUSED_FORWARD;
}

/* The consumer writes the activation's input gradient: its own input gradient, passed through
 * the activation's derivative (a ReLU's: masked where its output is 0; a dense layer). */
static void activation_backward_into_consumer(bn_layer *p, bn_layer *c)
{
    if (may_take_activation(c, p) && !(p->gpu_fused & BN_FUSED_BACKWARD) && p->in_grad && c->in_grad == p->out_grad &&
        c->ops->fuse_gpu(c, p, 0))
        p->gpu_fused |= BN_FUSED_BACKWARD;
}

/* The producer's kernels do some of the consumer's passes (fuse_next_gpu: a dense layer of few
 * outputs runs softmax_ce's forward, a convolution both passes of a 2x2 max pooling). Neither
 * may have a pass done by another layer already. */
static void consumer_into_producer(bn_layer *p, bn_layer *c)
{
    if (p->ops->fuse_next_gpu && p->ops->forward_gpu && c->ops->forward_gpu && !p->gpu_fused && !c->gpu_fused)
        c->gpu_fused |= p->ops->fuse_next_gpu(p, c);
}

/* In this order on each pair: an activation taken by its producer is no longer free for the third. */
static const fusion_rule rules[] = {activation_forward_into_producer, activation_backward_into_consumer,
                                    consumer_into_producer};

bn_layer *bn_net_sole_consumer(const bn_net *net, const bn_layer *l)
{
    return l->num_readers == 1 ? net->layers[l->reader] : NULL;
}

void bn_net_fuse(bn_net *net)
{
    for (int i = 0; i < net->num_layers; i++) {
        bn_layer *c = net->layers[i];
        bn_layer *p = c->num_inputs == 1 && c->sources[0] >= 0 ? net->layers[c->sources[0]] : NULL;
        if (!p || bn_net_sole_consumer(net, p) != c) continue;
        for (size_t r = 0; r < sizeof rules / sizeof rules[0]; r++) rules[r](p, c);
    }
    bn_net_fuse_grad_parts(net);
}

/* The layer whose GPU backward pass reads l's output gradient: l's own, or where l's backward
 * pass is done by its producer's kernels (an activation whose producer took it, the only way a
 * layer with several readers can have its backward pass done by another) the producer's. */
static bn_layer *gradient_reader(const bn_net *net, bn_layer *l)
{
    if (!(l->gpu_fused & BN_FUSED_BACKWARD)) return l;
    if (l->num_inputs != 1 || l->sources[0] < 0) return NULL;
    bn_layer *p = net->layers[l->sources[0]];
    return bn_net_sole_consumer(net, p) == l ? p : NULL;
}

void bn_net_fuse_grad_parts(bn_net *net)
{
    for (int i = 0; i < net->num_layers; i++) {
        bn_layer *l = net->layers[i];
        if (l->num_grad_parts != 1 || !l->out_grad || l->grad_part_to_reader) continue;
        bn_layer *r = gradient_reader(net, l);
        if (!r || !r->ops->sums_grad_part || r->dy_part || (r != l && r->num_grad_parts)) continue;
        l->grad_part_to_reader = 1;
        r->dy_part = l->grad_parts[0];
    }
}

/* A plain sum's input produced last, when its producer may write the sum (sum_cpu) and the sum
 * is that producer's one reader, with no ReLU running in place over the producer's output. The
 * sum's other inputs are all written before that producer runs, so its forward can add them. */
void bn_net_fuse_cpu_sums(bn_net *net)
{
    for (int i = 0; i < net->num_layers; i++) {
        bn_layer *a = net->layers[i];
        if (a->num_inputs < 2 || !a->ops->cpu_sums_inputs || !a->ops->cpu_sums_inputs(a)) continue;
        int last = 0;
        for (int j = 1; j < a->num_inputs; j++)
            if (a->sources[j] > a->sources[last]) last = j;
        if (a->sources[last] < 0) continue;
        bn_layer *p = net->layers[a->sources[last]];
        if (!p->ops->sum_cpu || p->num_readers != 1 || bn_net_sole_consumer(net, p) != a || p->cpu_relu ||
            p->cpu_sum_into)
            continue;
        p->cpu_sum_into = a;
        a->cpu_summed_input = last + 1;
    }
}

int bn_net_fuse_loss(bn_net *net, bn_blob *acc, int grad)
{
    bn_layer *loss = bn_net_loss_layer(net);
    if (!net->pass.ctx || !loss || !loss->ops->fuse_loss_gpu) return 0;
    return loss->ops->fuse_loss_gpu(loss, &net->pass, acc, grad);
}

void bn_net_unfuse_loss(bn_net *net)
{
    bn_layer *loss = bn_net_loss_layer(net);
    if (net->pass.ctx && loss && loss->ops->fuse_loss_gpu) loss->ops->fuse_loss_gpu(loss, &net->pass, NULL, 0);
}

int bn_net_blob_unwritten(const bn_net *net, int i, int grad)
{
    if (i < 0 || i >= net->num_layers) return 0;
    /* A ReLU run in place ends its output gradient as its input gradient, and a layer whose
     * reader runs in place over it ends the step holding the reader's output. Where the
     * producer's CPU passes do the ReLU's (cpu_fused), the gradient stays the ReLU's, and the
     * producer's own (masked) one is never held. */
    const bn_layer *l = net->layers[i], *c = bn_net_sole_consumer(net, l);
    if (l->cpu_sum_into) return 1; /* its CPU forward wrote the sum it feeds instead */
    if (grad && l->grad_part_to_reader) return 1; /* the first reader's part only (bn_net_fuse_grad_parts) */
    if (grad && l->grad_shared) return 1; /* its first channels end as a nested join's summed gradient */
    if (grad && l->in_place) return !l->cpu_fused;
    if (grad && c && c->cpu_fused) return 1;
    if (!grad && c && c->in_place) return 1;
    return c && (c->gpu_fused & (grad ? BN_FUSED_NO_IN_GRAD : BN_FUSED_NO_IN)) != 0;
}

/* Whether input j of `join` may become a slice of the join's output (bn_net_join_slices). */
static int may_write_slice(const bn_net *net, const bn_layer *join, int j)
{
    const int src = join->sources[j];
    if (src < 0) return 0;
    const bn_layer *p = net->layers[src];
    if (!p->ops->out_slices || p->num_readers != 1 || p->in_place || p->num_grad_parts || !p->out_grad ||
        !join->out_grad || join->input_grads[j] != p->out_grad ||
        bn_blob_is_bf16(p->out) != bn_blob_is_bf16(join->out))
        return 0;
    /* An activation whose passes the layer before it does, where that layer's kernels reach the
     * activation's output, and its gradient where they do its backward pass, at a slice's stride. */
    if (p->gpu_fused & BN_FUSED_FORWARD)
        return p->num_inputs == 1 && p->sources[0] >= 0 && net->layers[p->sources[0]]->ops->act_out_slices;
    if (p->gpu_fused & BN_FUSED_BACKWARD) return 0; /* a consumer's kernels read its gradient packed */
    return 1;
}

/* The other reader of input j of `join` where that input is itself a channel join whose output
 * may become a slice of join's (a join nested in another: a dense block's joins, each the first
 * input of the next), else NULL. The nested join's output has exactly two readers: `join`, at
 * input j only, and one layer that reads it as its one input at its stride (in_slices) with passes
 * of its own. Its output gradient then is a slice of join's, written in place by join's (skipped)
 * backward copy, and the other reader adds its input gradient into it (adds_in_grad), rounded as
 * its part would have been: the same two floats added as when the join's copy was the part that
 * the network added, so the sums match the copies bit for bit. */
static bn_layer *nesting_partner(const bn_net *net, const bn_layer *join, int j)
{
    const int src = join->sources[j];
    if (src < 0) return NULL;
    const bn_layer *p = net->layers[src];
    if (!p->ops->joins_slices || p->num_readers != 2 || p->num_grad_parts != 1 || p->grad_part_to_reader ||
        p->in_place || p->gpu_fused || !p->out_grad || !join->out_grad ||
        bn_blob_is_bf16(p->out) != bn_blob_is_bf16(join->out))
        return NULL;
    for (int k = 0; k < join->num_inputs; k++)
        if (k != j && join->sources[k] == src) return NULL;
    bn_layer *other = NULL;
    for (int i = p->index + 1; i < net->num_layers; i++) {
        bn_layer *r = net->layers[i];
        if (r == join) continue;
        for (int k = 0; k < r->num_inputs; k++)
            if (r->sources[k] == src) {
                if (other) return NULL;
                other = r;
            }
    }
    /* Its passes must run on the device: a pass that falls back to the CPU reads and writes the
     * host copies, and a slice's is never written. */
    if (!other || !other->ops->in_slices || !other->ops->forward_gpu || !other->ops->backward_gpu ||
        other->num_inputs != 1 || other->gpu_fused || !other->in_grad)
        return NULL;
    /* One of the two holds the gradient, the other its one part. */
    bn_blob *part = p->grad_parts[0];
    const int ok = (join->input_grads[j] == p->out_grad && other->in_grad == part) ||
                   (join->input_grads[j] == part && other->in_grad == p->out_grad);
    return ok ? other : NULL;
}

/* Makes input j of `join`, a channel join read also by `other` (nesting_partner), a slice of
 * join's output and output gradient, at `channel`: join then writes that gradient in place, and
 * other's backward pass adds its input gradient into it instead of writing a part. */
static bn_status nest_join(bn_net *net, bn_layer *join, int j, bn_layer *other, int channel)
{
    bn_layer *p = net->layers[join->sources[j]];
    bn_blob *out = bn_blob_new_slice(p->out->name, join->out, channel, p->out->n, p->out->c);
    bn_blob *grad = out ? bn_blob_new_slice(p->out_grad->name, join->out_grad, channel, p->out->n, p->out->c) : NULL;
    if (!grad) {
        bn_blob_free(out);
        return bn_last_status();
    }
    bn_blob_free(p->out);
    bn_blob_free(p->out_grad);
    p->out = join->inputs[j] = other->inputs[0] = other->in = out;
    p->out_grad = join->input_grads[j] = other->input_grads[0] = other->in_grad = grad;
    other->adds_in_grad = 1;
    /* The gradient part, which neither reader writes now. */
    bn_blob_free(p->grad_parts[0]);
    p->grad_parts[0] = NULL;
    p->num_grad_parts = 0;
    join->grad_shared = 1;
    return BN_OK;
}

bn_status bn_net_join_slices(bn_net *net)
{
    /* BLOBNET_JOIN_COPIES=1: every join copies, as before slices (for comparisons). */
    const char *copies = getenv("BLOBNET_JOIN_COPIES");
    if (copies && copies[0] && strcmp(copies, "0") != 0) return BN_OK;
    /* Last join first: a join nested in a later one becomes its slice before its own inputs
     * become slices of it (slices of that slice: blob.h). */
    for (int i = net->num_layers - 1; i >= 0; i--) {
        bn_layer *join = net->layers[i];
        if (!join->ops->joins_slices) continue;
        int channel = 0;
        for (int j = 0; j < join->num_inputs; channel += join->input_shapes[j].c, j++) {
            bn_layer *other = nesting_partner(net, join, j);
            if (other) {
                BN_TRY(nest_join(net, join, j, other, channel));
                continue;
            }
            if (!may_write_slice(net, join, j)) continue;
            bn_layer *p = net->layers[join->sources[j]];
            bn_blob *out = bn_blob_new_slice(p->out->name, join->out, channel, p->out->n, p->out->c);
            bn_blob *grad = out ? bn_blob_new_slice(p->out_grad->name, join->out_grad, channel, p->out->n, p->out->c)
                                : NULL;
            if (!grad) {
                bn_blob_free(out);
                return bn_last_status();
            }
            bn_blob_free(p->out);
            bn_blob_free(p->out_grad);
            p->out = join->inputs[j] = out;
            p->out_grad = join->input_grads[j] = grad;
        }
        join->in = join->inputs[0];
        join->in_grad = join->input_grads[0];
    }
    return BN_OK;
}
