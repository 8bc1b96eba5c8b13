/* softmax_ce.h - the softmax_ce loss layer's private state, shared by softmax_ce.c (setup,
 * CPU path) and softmax_ce.cu (GPU path), and its GPU entry points.
 *
 * On the GPU the loss and the correct count stay on the device (pass->metrics); a label that
 * is not a class index cannot raise an error there without a host round trip, so its row's
 * loss and gradient become NaN, which the trainer's finiteness check reports. */
#ifndef BN_SOFTMAX_CE_H
#define BN_SOFTMAX_CE_H

#include "core/layer.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct softmax_priv {
    int classes;     /* from setup */
    double smoothing; /* label smoothing s: the target is (1 - s) onehot + s / classes */
    double *cpu_rows; /* CPU: each row's loss and 1 where its prediction is right, then added in
                         row order; room for cpu_rows_cap rows */
    size_t cpu_rows_cap;
    double *dev_rows; /* device scratch: the forward kernel's per-block loss sums, then its
                         per-block correct counts (room for one block per row of capacity
                         each), then the count of blocks done (see softmax_ce.cu); NULL until
                         the first GPU forward */
    /* Set around one step by the loss fusion (bn_layer_ops.fuse_loss_gpu, asked through
     * bn_net_fuse_loss); read by the GPU path only. While acc is set, the forward also adds the
     * batch's [loss sum, correct count] into it in the launch that computes them, with the float
     * additions a separate add would make; with grad_in_forward a training forward writes the
     * input gradient beside the probabilities, with the values the backward would write. A
     * captured CUDA graph keeps both: the pointers are taken when the forward is queued. */
    bn_blob *acc;     /* when not NULL, the forward also adds [loss sum, correct] into it */
    int grad_in_forward; /* a training forward also writes in_grad */
    int grad_written; /* set by a GPU forward that wrote in_grad, cleared by the backward after
                         it, which then has nothing to do: both happen in the same step body,
                         so a captured step holds the same launches as an eager one */
    /* Set by a GPU forward that wrote in_grad: it left the sum over its blocks' metrics (the
     * kernel's last part, which the whole backward pass would otherwise wait for) to
     * bn_softmax_ce_finish_gpu, which the network calls at the end of the backward pass, and the
     * launch's block count. */
    int metrics_pending;
    unsigned pending_blocks;
} softmax_priv;

bn_status bn_softmax_ce_forward_gpu(bn_layer *l, const bn_pass *p);
bn_status bn_softmax_ce_backward_gpu(bn_layer *l, const bn_pass *p);

/* bn_layer_ops.finish_gpu: the sum over the blocks of the last forward's metrics into
 * pass->metrics (and the fusion's acc), where that forward left it; else nothing. */
bn_status bn_softmax_ce_finish_gpu(bn_layer *l, const bn_pass *p);

/* Frees the device scratch rows and sets p->dev_rows to NULL. */
void bn_softmax_ce_gpu_release(softmax_priv *p);

/* The dense head: on a device, a dense layer of at most BN_SOFTMAX_HEAD_MAX outputs whose output
 * only this loss reads can hand its forward pass to the loss (the net asks it through
 * bn_layer_ops.fuse_next_gpu). One kernel then computes, per example row, the logits
 * z = x W^T + b, the loss layer's whole forward pass and, when the loss writes its input
 * gradient in the forward (bn_net_fuse_loss with grad), the dense layer's input gradient
 * dx = dz W too, so that three launches become one. */
#define BN_SOFTMAX_HEAD_MAX 16

/* The dense layer's operands. */
typedef struct bn_softmax_head {
    const float *x, *w, *b; /* its input (n x k), weights (classes x k) and bias (classes) */
    int k;
    float *z;               /* its output, the loss layer's input: written */
    float *dx;              /* its input gradient (NULL: none) */
    float *relu_dx;         /* a ReLU fused before it: that layer's input gradient, dx where x > 0
                               and 0 elsewhere (NULL: none) */
} bn_softmax_head;

/* The target of class k of a row whose label is `label`: (1 - s) [k == label] + s / classes;
 * with s = 0 exactly 1 and 0. */
static inline float bn_softmax_target(const softmax_priv *p, int k, int label)
{
    float off = (float)(p->smoothing / p->classes);
    return k == label ? (float)(1.0 - p->smoothing) + off : off;
}

/* 1 when l is a softmax_ce layer of `classes` classes that a dense head can run. */
int bn_softmax_ce_head_fits(const bn_layer *l, int classes);
/* 1 when the forward of loss layer l on `pass` is to write its input gradient (and so a dense
 * head's dx): the loss fusion asked for it, the pass trains and the input takes a gradient. */
int bn_softmax_ce_grad_in_forward(const bn_layer *l, const bn_pass *pass);
/* The loss layer l's forward on the device with the dense layer before it (h) in one kernel.
 * With bn_softmax_ce_grad_in_forward, it writes dz, h->dx and h->relu_dx (those not NULL) as well
 * and the loss's backward that follows launches nothing; the dense layer's backward then must
 * not write dx again. */
bn_status bn_softmax_ce_head_gpu(bn_layer *l, const bn_pass *pass, const bn_softmax_head *h);

#ifdef __cplusplus
}
#endif
#endif
