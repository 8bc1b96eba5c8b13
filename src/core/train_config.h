/* train_config.h - the training settings: the [train] section of a model file, which
 * command-line flags then override. */
#ifndef BN_TRAIN_CONFIG_H
#define BN_TRAIN_CONFIG_H

#include "options.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum bn_lr_policy {
    BN_LR_FIXED,   /* lr = base */
    BN_LR_STEP,    /* lr = base * gamma ^ floor(iter / stepsize) */
    BN_LR_INV,     /* lr = base * (1 + gamma * iter) ^ -power  (Caffe's LeNet) */
    BN_LR_COSINE,  /* lr = min + (base - min) * (1 + cos(pi * iter / max_iter)) / 2 */
    BN_LR_ONECYCLE /* PyTorch's OneCycleLR with cosine annealing (optimizer.c spells it out) */
} bn_lr_policy;

typedef enum bn_optimizer_kind {
    BN_OPT_SGD,    /* momentum and L2 decay, Caffe's rule */
    BN_OPT_ADAM,   /* torch.optim.Adam: L2 decay added to the gradient */
    BN_OPT_ADAMW   /* torch.optim.AdamW: decay applied to the weights, apart from the gradient */
} bn_optimizer_kind;

typedef struct bn_train_config {
    int batch;
    int epochs;
    bn_optimizer_kind optimizer;
    double lr;
    double momentum;       /* sgd */
    double weight_decay;
    double beta1, beta2;   /* adam, adamw: decay rates of the gradient's running mean and square */
    double eps;            /* adam, adamw: added to the root of the running square */
    bn_lr_policy lr_policy;
    double gamma;          /* step and inv */
    double power;          /* inv */
    int stepsize;          /* step: iterations between decays */
    double lr_min;         /* cosine: the floor it decays to over the whole run */
    double pct_start;      /* onecycle: the share of the run spent rising to lr */
    double div_factor;     /* onecycle: lr / div_factor is the starting rate */
    double final_div_factor; /* onecycle: the starting rate / final_div_factor is the last */
    int warmup;            /* the first warmup steps scale the policy's rate by (step + 1) / warmup */
    double bias_lr_mult;   /* learning-rate multiplier of biases */
    unsigned long long seed;
} bn_train_config;

/* The defaults before any [train] key: batch 64, 10 epochs, SGD lr 0.01, momentum 0.9,
 * weight decay 5e-4, Adam's betas 0.9 and 0.999 and eps 1e-8, fixed policy, no warmup,
 * onecycle's pct_start 0.3, div_factor 25 and final_div_factor 1e4 (PyTorch's defaults),
 * bias_lr_mult 1, seed 1. */
bn_train_config bn_train_config_defaults(void);

/* Reads the keys of a [train] section over the values already in cfg. */
bn_status bn_train_config_parse(bn_options *o, bn_train_config *cfg);

/* Names of the policies and of the optimizers, in enum order, NULL-terminated. */
extern const char *const bn_lr_policy_names[];
extern const char *const bn_optimizer_names[];

#ifdef __cplusplus
}
#endif
#endif
