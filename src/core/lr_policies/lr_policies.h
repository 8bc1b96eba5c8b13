/* lr_policies.h - the table of learning-rate policies. A policy is one file of this folder,
 * defining bn_lr_policy_<name>, and one X(name) in BN_LR_POLICIES; the [train] section, help
 * texts and the optimizer's schedule all read the table, in this order. The first is the
 * default. */
#ifndef BN_LR_POLICIES_H
#define BN_LR_POLICIES_H

#include "core/train_config.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Expands X(name) once per policy. */
#define BN_LR_POLICIES(X) X(fixed) X(step) X(inv) X(cosine) X(onecycle) X(poly)

/* A policy: its name, its rate in one line (help texts), the [train] keys it reads besides lr,
 * and its rate at step iter of a run of max_iter steps (0 when the run's length is unknown, as in
 * `blobnet time`), before any warmup. */
typedef struct bn_lr_policy {
    const char *name;
    const char *formula;
    const bn_train_key *keys;
    int num_keys;
    double (*rate)(const bn_train_config *c, long iter, long max_iter);
} bn_lr_policy;

#define BN_LR_POLICY_DECLARE(name) extern const bn_lr_policy bn_lr_policy_##name;
BN_LR_POLICIES(BN_LR_POLICY_DECLARE)
#undef BN_LR_POLICY_DECLARE

/* The policies' names in table order, NULL-terminated. */
extern const char *const bn_lr_policy_names[];

/* How many policies the table holds, and the i-th (0 <= i < count); static storage. */
int bn_lr_policy_count(void);
const bn_lr_policy *bn_lr_policy_at(int i);

/* The index of the policy called name, or -1. */
int bn_lr_policy_find(const char *name);

#ifdef __cplusplus
}
#endif
#endif
