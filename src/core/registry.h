/* registry.h - the one table of layer types. Built-in types are listed in registry.c;
 * a user's type is added at run time with bn_register_layer. */
#ifndef BN_REGISTRY_H
#define BN_REGISTRY_H

#include "layer.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Adds a layer type; the ops table must outlive the process's use of it. A name already
 * registered, or an ops table missing its type name or CPU functions, is refused. */
bn_status bn_register_layer(const bn_layer_ops *ops);

/* The ops of the named type, or NULL. */
const bn_layer_ops *bn_find_layer(const char *type);

/* Number of registered types and the i-th one, for listings. */
int bn_layer_type_count(void);
const bn_layer_ops *bn_layer_type_at(int i);

/* Number of built-in types: bn_layer_type_at(0 .. count - 1); registered ones follow them. */
int bn_layer_builtin_count(void);

#ifdef __cplusplus
}
#endif
#endif
