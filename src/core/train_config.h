/* train_config.h - the training settings: the [train] section of a model file, which
 * command-line flags then override. The optimizer and the learning-rate policy are chosen by
 * name from their tables (optimizers/optimizers.h, lr_policies/lr_policies.h); the keys that
 * belong to one of them are declared in its entry and kept here as values given by name. */
#ifndef BN_TRAIN_CONFIG_H
#define BN_TRAIN_CONFIG_H

#include "options.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A [train] key of an optimizer or a policy: the default it takes when not given, and the
 * values it accepts, lo <= value <= hi (value < hi with BN_KEY_BELOW_HI). */
typedef enum bn_key_form {
    BN_KEY_REAL,      /* a finite number */
    BN_KEY_INT,       /* a whole number */
    BN_KEY_BELOW_HI   /* a finite number short of hi: Adam divides by 1 - beta^t */
} bn_key_form;

typedef struct bn_train_key {
    const char *name;
    double def, lo, hi;
    bn_key_form form;
} bn_train_key;

/* The most optimizer and policy keys one run can be given. */
#define BN_TRAIN_MAX_GIVEN 32

/* A key given in [train] or by a flag; key points to storage that outlives the config. */
typedef struct bn_given_key {
    const char *key;
    double value;
} bn_given_key;

typedef struct bn_train_config {
    int batch;
    int epochs;
    int optimizer;         /* index into the optimizer table */
    double lr;
    double weight_decay;   /* every optimizer's: L2 through the gradient, or decoupled (adamw) */
    int lr_policy;         /* index into the policy table */
    int warmup;            /* the first warmup steps scale the policy's rate by (step + 1) / warmup */
    double bias_lr_mult;   /* learning-rate multiplier of biases */
    unsigned long long seed;
    bn_given_key given[BN_TRAIN_MAX_GIVEN]; /* the optimizer's and the policy's keys that were given */
    int num_given;
} bn_train_config;

/* The defaults before any [train] key: batch 64, 10 epochs, the first optimizer of the table
 * (sgd) with lr 0.01 and weight decay 5e-4, the first policy (fixed), no warmup, bias_lr_mult 1,
 * seed 1; every optimizer and policy key at its entry's default. */
bn_train_config bn_train_config_defaults(void);

/* Reads the keys of a [train] section over the values already in cfg. A key that belongs to an
 * optimizer or policy other than the section's is an error naming whose key it is. */
bn_status bn_train_config_parse(bn_options *o, bn_train_config *cfg);

/* The value of an optimizer's or a policy's key: the one given by its name, else key->def. */
double bn_train_key_value(const bn_train_config *c, const bn_train_key *key);

/* The value of the key called name as the settings line records it: the one given, else the
 * default of the chosen optimizer or policy when it reads the key, else that of the first entry
 * of the tables that does; 0 for a name no entry reads. */
double bn_train_value_named(const bn_train_config *c, const char *name);

/* Gives key (which must outlive c) the value, over any given before; an error when the config
 * holds BN_TRAIN_MAX_GIVEN keys already. */
bn_status bn_train_config_set(bn_train_config *c, const char *key, double value);

#ifdef __cplusplus
}
#endif
#endif
