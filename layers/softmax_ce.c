/* softmax_ce.c - softmax followed by cross-entropy against integer labels, the loss layer.
 * Outputs the class probabilities; writes the batch's loss sum and correct count to the
 * pass's metrics. The loss is computed as logsumexp(z) - z[label] after subtracting the
 * row maximum, so neither exp overflows nor log sees a zero. With label smoothing s it is the
 * cross-entropy against the target (1 - s) onehot + s / K (PyTorch's label_smoothing):
 * logsumexp(z) - (1 - s) z[label] - s mean(z). */
#include <math.h>
#include <stdlib.h>

#include "core/parallel.h"
#include "layers.h"
#include "softmax_ce.h"

static bn_status softmax_parse(bn_layer *l, bn_options *o)
{
    double smoothing;
    BN_TRY(bn_opt_float(o, "smoothing", 0.0, 0.0, 0.999, &smoothing));
    softmax_priv *p = calloc(1, sizeof *p);
    if (!p) return bn_error(BN_ERR_NOMEM, "layer %s: out of host memory", l->name);
    p->smoothing = smoothing;
    l->priv = p;
    return BN_OK;
}

static bn_status softmax_setup(bn_layer *l, bn_shape in, bn_shape *out)
{
    softmax_priv *p = l->priv;
    long classes = (long)in.c * in.h * in.w;
    if (classes < 2)
        return bn_layer_error(l, "needs at least 2 classes, but its input %dx%dx%d has %ld",
                              in.c, in.h, in.w, classes);
    if (classes > (1L << 24)) /* labels are floats: larger indices are not exact */
        return bn_layer_error(l, "has %ld classes; at most %ld are supported", classes, 1L << 24);
    p->classes = (int)classes;
    *out = (bn_shape){p->classes, 1, 1};
    return BN_OK;
}

/* The class index held in a label, or an error naming the example. */
static bn_status read_label(const bn_layer *l, const float *labels, int i, int classes, int *out)
{
    float v = labels[i];
    if (!(v >= 0.0f && v < (float)classes) || v != floorf(v))
        return bn_error(BN_ERR_DATA, "layer %s: example %d has label %g, not a class index in "
                        "[0, %d)", l->name, i, (double)v, classes);
    *out = (int)v;
    return BN_OK;
}

/* Writes one example's probabilities to p; returns log(sum(exp(z))). */
static double softmax_row(const float *z, int classes, float *p)
{
    float zmax = z[0];
    for (int k = 1; k < classes; k++) if (z[k] > zmax) zmax = z[k];
    double sum = 0.0;
    for (int k = 0; k < classes; k++) sum += exp((double)z[k] - zmax);
    double lse = zmax + log(sum);
    for (int k = 0; k < classes; k++) p[k] = (float)exp((double)z[k] - lse);
    return lse;
}

static int first_argmax(const float *z, int classes)
{
    int best = 0;
    for (int k = 1; k < classes; k++) if (z[k] > z[best]) best = k;
    return best;
}

/* Every row's label, checked before the rows' tasks run, which cannot return an error. */
static bn_status check_labels(const bn_layer *l, const float *labels, int n, int classes)
{
    for (int i = 0; i < n; i++) {
        int label;
        BN_TRY(read_label(l, labels, i, classes, &label));
    }
    return BN_OK;
}

/* A pass over rows, for the pool's ranges. */
typedef struct softmax_run {
    const softmax_priv *sp;
    const float *in, *labels; /* the logits (forward) or probabilities (backward); checked labels */
    float *out;               /* the probabilities (forward) or the input gradient (backward) */
    double *rows;             /* forward: per row, its loss and whether its prediction is right */
    float scale;              /* backward: 1 / n */
} softmax_run;

static void forward_rows(void *arg, size_t lo, size_t hi)
{
    const softmax_run *r = arg;
    const softmax_priv *sp = r->sp;
    int classes = sp->classes;
    for (size_t i = lo; i < hi; i++) {
        int label = (int)r->labels[i];
        const float *zi = r->in + i * classes;
        double lse = softmax_row(zi, classes, r->out + i * classes), loss;
        if (sp->smoothing > 0.0) {
            double sum = 0.0;
            for (int k = 0; k < classes; k++) sum += zi[k];
            loss = lse - (1.0 - sp->smoothing) * zi[label] - sp->smoothing * sum / classes;
        } else {
            loss = lse - zi[label];
        }
        r->rows[2 * i] = loss;
        r->rows[2 * i + 1] = first_argmax(zi, classes) == label;
    }
}

/* Rows per task of the forward pass: about 1024 classes, some 20 us of exponentials; LeNet's 640
 * at batch 64 took longer cut in three. */
static size_t forward_grain(int classes)
{
    return classes >= 1024 ? 1 : 1024 / (size_t)classes;
}

static bn_status softmax_forward(bn_layer *l, const bn_pass *pass)
{
    softmax_priv *sp = l->priv;
    int n = l->in->n, classes = sp->classes;
    BN_HOST_RD(z, l->in);
    BN_HOST_RD(labels, pass->labels);
    BN_HOST_WR(prob, l->out);
    BN_TRY(check_labels(l, labels, n, classes));
    if (sp->cpu_rows_cap < (size_t)n) {
        double *grown = realloc(sp->cpu_rows, 2 * (size_t)n * sizeof *grown);
        if (!grown) return bn_error(BN_ERR_NOMEM, "layer %s: out of host memory for %d rows' losses", l->name, n);
        sp->cpu_rows = grown;
        sp->cpu_rows_cap = (size_t)n;
    }
    softmax_run r = {sp, z, labels, prob, sp->cpu_rows, 0.0f};
    bn_parallel_ranges((size_t)n, forward_grain(classes), forward_rows, &r);
    /* Added here, in row order, so that the sums do not depend on how the rows were cut. */
    double loss = 0.0, correct = 0.0;
    for (int i = 0; i < n; i++) {
        loss += sp->cpu_rows[2 * i];
        correct += sp->cpu_rows[2 * i + 1];
    }
    BN_HOST_WR(metrics, pass->metrics);
    metrics[0] = (float)loss;
    metrics[1] = (float)correct;
    return BN_OK;
}

static void backward_rows(void *arg, size_t lo, size_t hi)
{
    const softmax_run *r = arg;
    const softmax_priv *sp = r->sp;
    int classes = sp->classes;
    for (size_t i = lo; i < hi; i++) {
        int label = (int)r->labels[i];
        const float *pi = r->in + i * classes;
        float *di = r->out + i * classes;
        for (int k = 0; k < classes; k++) di[k] = (pi[k] - bn_softmax_target(sp, k, label)) * r->scale;
    }
}

static bn_status softmax_backward(bn_layer *l, const bn_pass *pass)
{
    const softmax_priv *sp = l->priv;
    if (!l->in_grad) return BN_OK;
    int n = l->in->n, classes = sp->classes;
    BN_HOST_RD(prob, l->out);
    BN_HOST_RD(labels, pass->labels);
    BN_HOST_WR(dz, l->in_grad);
    BN_TRY(check_labels(l, labels, n, classes));
    softmax_run r = {sp, prob, labels, dz, NULL, 1.0f / (float)n};
    bn_parallel_ranges((size_t)n, (size_t)(classes >= 16384 ? 1 : 16384 / classes), backward_rows, &r);
    return BN_OK;
}

/* bn_layer_ops.fuse_loss_gpu: the GPU forward reads these (softmax_ce.cu). */
static int softmax_fuse_loss(bn_layer *l, const bn_pass *pass, bn_blob *acc, int grad)
{
    if (!pass->ctx || !l->ops->forward_gpu) return 0;
    softmax_priv *p = l->priv;
    p->acc = acc;
    p->grad_in_forward = grad;
    p->grad_written = 0;
    /* A sum still left here belongs to a step whose backward pass was never queued (it failed
     * before): nothing reads that step's metrics. */
    p->metrics_pending = 0;
    return 1;
}

int bn_softmax_ce_head_fits(const bn_layer *l, int classes)
{
    if (!l || l->ops != &bn_softmax_ce_ops || !l->ops->forward_gpu) return 0;
    const softmax_priv *p = l->priv;
    return p->classes == classes && classes >= 1 && classes <= BN_SOFTMAX_HEAD_MAX;
}

int bn_softmax_ce_grad_in_forward(const bn_layer *l, const bn_pass *pass)
{
    const softmax_priv *p = l->priv;
    return p->grad_in_forward && pass->train && l->in_grad != NULL;
}

static double softmax_flops(const bn_layer *l)
{
    const softmax_priv *p = l->priv;
    return 4.0 * p->classes;
}

static void softmax_destroy(bn_layer *l)
{
    softmax_priv *p = l->priv;
#ifdef BN_WITH_CUDA
    if (p) bn_softmax_ce_gpu_release(p);
#endif
    if (p) free(p->cpu_rows);
    free(p);
    l->priv = NULL;
}

const bn_layer_ops bn_softmax_ce_ops = {
    .type = "softmax_ce",
    .help = "softmax over the flattened input and mean cross-entropy against the labels (the "
            "loss layer); keys: smoothing (0; label smoothing, the target (1 - s) onehot + s / classes)",
    .is_loss = 1,
    .kind = BN_NVTX_LAYER_LOSS,
    .graph_safe = 1,
    .parse = softmax_parse,
    .setup = softmax_setup,
    .forward_cpu = softmax_forward,
    .backward_cpu = softmax_backward,
    .forward_gpu = BN_GPU(bn_softmax_ce_forward_gpu),
    .backward_gpu = BN_GPU(bn_softmax_ce_backward_gpu),
    .finish_gpu = BN_GPU(bn_softmax_ce_finish_gpu),
    .flops = softmax_flops,
    .destroy = softmax_destroy,
    .bf16 = 1,
    .fuse_loss_gpu = softmax_fuse_loss,
};
