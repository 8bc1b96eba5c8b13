/* fusion.c - which layers' GPU passes run inside a neighbour's kernels: every rule in one place.
 *
 * On a device two neighbouring layers often cost less as one kernel than as two: a launch and a
 * pass over the activations fewer. The network decides this once, when it is set up on a device,
 * by one pass over its producer-consumer pairs in layer order, trying the rules of the table
 * below on each pair in table order:
 *
 *   producer            consumer            what moves
 *   any with fuse_gpu   relu                the ReLU's forward, into the producer's epilogue
 *   relu                any with fuse_gpu   the ReLU's backward, into the consumer's input gradient
 *   any with            any                 passes of the consumer that the producer's kernels
 *     fuse_next_gpu                         take (dense -> softmax_ce: the dense head; conv2d ->
 *                                           2x2 maxpool: both of the pooling's passes)
 * A layer type takes part through its ops (fuse_gpu,
 * fuse_next_gpu), which accept only the shapes and kernels they can serve; the rules here say
 * which side may ask.
 *
 * A pair is considered only when the consumer is the producer's one reader and the producer its
 * one input (nothing fuses across a branch or a join): a fused pass may leave a blob or a gradient unwritten (BN_FUSED_NO_IN,
 * BN_FUSED_NO_IN_GRAD), which a second reader would see, and a gradient fed by several readers
 * must be summed before anyone masks it. No pass is taken over twice: a layer whose pass is
 * already done by another's kernels is not offered again.
 *
 * During each step on a device the loss layer may fold more into its forward pass
 * (bn_net_fuse_loss): the metrics' running sums and its input gradient. */
#include "net.h"

#include <string.h>

/* A rule looks at producer p and its sole consumer c and fuses them when it applies. */
typedef void (*fusion_rule)(bn_layer *p, bn_layer *c);

static int is_relu(const bn_layer *l)
{
    return strcmp(l->ops->type, "relu") == 0;
}

/* The producer writes the ReLU's output from its epilogue (a dense layer). */
static void relu_forward_into_producer(bn_layer *p, bn_layer *c)
{
    if (is_relu(c) && !(c->gpu_fused & BN_FUSED_FORWARD) && p->ops->fuse_gpu && p->ops->fuse_gpu(p, c, 1))
        c->gpu_fused |= BN_FUSED_FORWARD;
}

/* The consumer writes the ReLU's input gradient: its own input gradient, masked where the
 * ReLU's output is 0 (a dense layer). */
static void relu_backward_into_consumer(bn_layer *p, bn_layer *c)
{
    if (is_relu(p) && !(p->gpu_fused & BN_FUSED_BACKWARD) && p->in_grad && c->in_grad == p->out_grad &&
        c->ops->fuse_gpu && c->ops->fuse_gpu(c, p, 0))
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

/* In this order on each pair: a ReLU taken by its producer is no longer free for the third. */
static const fusion_rule rules[] = {relu_forward_into_producer, relu_backward_into_consumer, consumer_into_producer};

/* The layer that writes blob b, or NULL for the network's input. */
static bn_layer *producer_of(const bn_net *net, const bn_blob *b)
{
    for (int i = 0; i < net->num_layers; i++)
        if (net->layers[i]->out == b) return net->layers[i];
    return NULL;
}

bn_layer *bn_net_sole_consumer(const bn_net *net, const bn_layer *l)
{
    bn_layer *found = NULL;
    for (int i = 0; i < net->num_layers; i++)
        for (int j = 0; j < net->layers[i]->num_inputs; j++) {
            if (net->layers[i]->inputs[j] != l->out) continue;
            if (found) return NULL;
            found = net->layers[i];
        }
    return found;
}

void bn_net_fuse(bn_net *net)
{
    for (int i = 0; i < net->num_layers; i++) {
        bn_layer *c = net->layers[i];
        bn_layer *p = c->num_inputs == 1 ? producer_of(net, c->in) : NULL;
        if (!p || bn_net_sole_consumer(net, p) != c) continue;
        for (size_t r = 0; r < sizeof rules / sizeof rules[0]; r++) rules[r](p, c);
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
    const bn_layer *c = bn_net_sole_consumer(net, net->layers[i]);
    return c && (c->gpu_fused & (grad ? BN_FUSED_NO_IN_GRAD : BN_FUSED_NO_IN)) != 0;
}
