/* update_rules.h - each optimizer's update of one element, shared by the CPU loop
 * (optimizer.c) and the GPU kernels (optimizer_gpu.cu) so that the two cannot drift apart.
 * rate = lr * lr_mult and decay = weight_decay * decay_mult of the element's segment. */
#ifndef BN_UPDATE_RULES_H
#define BN_UPDATE_RULES_H

#include <math.h>

#include "optimizer.h"

#ifdef __CUDACC__
#define BN_UPDATE_RULE static __host__ __device__ __forceinline__
#else
#define BN_UPDATE_RULE static inline
#endif

/* SGD with momentum, Caffe's order: the rate goes into the momentum. */
BN_UPDATE_RULE void bn_sgd_rule(float *w, float g, float *v, float rate, float decay, float momentum)
{
    *v = momentum * *v + rate * (g + decay * *w);
    *w -= *v;
}

/* The optimizer's constants Adam's rule reads. 1 - beta is worked out in double, as PyTorch
 * does: 1 - 0.999f in float would be 0.0009999871, 1.3e-5 off. */
typedef struct bn_adam_consts {
    float beta1, beta2, one_minus_beta1, one_minus_beta2, eps;
    int decoupled;              /* AdamW: decay the weights, not through the gradient */
} bn_adam_consts;

static inline bn_adam_consts bn_adam_consts_of(const bn_train_config *c)
{
    bn_adam_consts k = {(float)c->beta1, (float)c->beta2, (float)(1.0 - c->beta1), (float)(1.0 - c->beta2),
                        (float)c->eps, c->optimizer == BN_OPT_ADAMW};
    return k;
}

/* Adam and AdamW in the order of torch.optim's single-tensor code: the bias corrections
 * divide the step size and the root of v, w -= (rate / bias1) * m / (sqrt(v) / bias2 + eps),
 * which is rate * mhat / (sqrt(vhat) + eps). */
BN_UPDATE_RULE void bn_adam_rule(float *w, float g, float *m, float *v, float rate, float decay, bn_step_rates r,
                                 bn_adam_consts k)
{
    float wi = *w;
    if (k.decoupled) wi *= 1.0f - rate * decay;
    else g += decay * wi;
    float mi = k.beta1 * *m + k.one_minus_beta1 * g;
    float vi = k.beta2 * *v + k.one_minus_beta2 * g * g;
    *m = mi;
    *v = vi;
    *w = wi - rate / r.bias1 * mi / (sqrtf(vi) / r.bias2 + k.eps);
}

#endif
