/* optimizers.h - the table of optimizers. An optimizer is one header of this folder
 * (optimizer_type.h says what it holds) and one X(name) in BN_OPTIMIZERS, with its include above
 * it; the [train] section, help texts, checkpoints, the CPU loop and the GPU kernels all read
 * the table, in this order. The first is the default. */
#ifndef BN_OPTIMIZERS_H
#define BN_OPTIMIZERS_H

#include "optimizer_type.h"

#include "adam.h"
#include "adamw.h"
#include "rmsprop.h"
#include "sgd.h"

/* Expands X(name) once per optimizer; name's header defines its entry bn_optimizer_<name>, its
 * rule bn_<name>_rule and the count of its state slabs, bn_<name>_state_count, a constant the
 * kernels are built for. */
#define BN_OPTIMIZERS(X) X(sgd) X(adam) X(adamw) X(rmsprop)

#ifdef __cplusplus
extern "C" {
#endif

/* The optimizers' names in table order, NULL-terminated. */
extern const char *const bn_optimizer_names[];

/* How many optimizers the table holds, and the i-th (0 <= i < count); static storage. */
int bn_optimizer_type_count(void);
const bn_optimizer_type *bn_optimizer_type_at(int i);

/* The index of the optimizer called name, or -1. */
int bn_optimizer_find(const char *name);

#ifdef __cplusplus
}
#endif
#endif
