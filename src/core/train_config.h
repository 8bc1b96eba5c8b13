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
    BN_LR_COSINE   /* lr = min + (base - min) * (1 + cos(pi * iter / max_iter)) / 2 */
} bn_lr_policy;

typedef struct bn_train_config {
    int batch;
    int epochs;
    double lr;
    double momentum;
    double weight_decay;
    bn_lr_policy lr_policy;
    double gamma;          /* step and inv */
    double power;          /* inv */
    int stepsize;          /* step: iterations between decays */
    double lr_min;         /* cosine: the floor it decays to over the whole run */
    double bias_lr_mult;   /* learning-rate multiplier of biases */
    unsigned long long seed;
} bn_train_config;

/* The defaults before any [train] key: batch 64, 10 epochs, SGD lr 0.01, momentum 0.9,
 * weight decay 5e-4, fixed policy, bias_lr_mult 1, seed 1. */
bn_train_config bn_train_config_defaults(void);

/* Reads the keys of a [train] section over the values already in cfg. */
bn_status bn_train_config_parse(bn_options *o, bn_train_config *cfg);

/* Names of the policies, in enum order, NULL-terminated. */
extern const char *const bn_lr_policy_names[];

#ifdef __cplusplus
}
#endif
#endif
