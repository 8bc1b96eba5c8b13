#include "registry.h"

#include <string.h>

#include "layers.h"

/* The built-in layer types: adding one is one line here plus its file pair in layers/. */
static const bn_layer_ops *const builtin[] = {
    &bn_dense_ops,   &bn_conv2d_ops,     &bn_maxpool_ops, &bn_avgpool_ops,
    &bn_relu_ops,    &bn_sigmoid_ops,    &bn_tanh_ops,    &bn_leaky_relu_ops,
    &bn_elu_ops,     &bn_softmax_ce_ops, &bn_dropout_ops, &bn_add_ops,
    &bn_concat_ops,  &bn_batchnorm_ops,
};

#define BUILTIN_COUNT ((int)(sizeof builtin / sizeof builtin[0]))
#define MAX_TYPES 256

static const bn_layer_ops *user_types[MAX_TYPES];
static int user_count;

const bn_layer_ops *bn_find_layer(const char *type)
{
    for (int i = 0; i < bn_layer_type_count(); i++)
        if (strcmp(bn_layer_type_at(i)->type, type) == 0) return bn_layer_type_at(i);
    return NULL;
}

bn_status bn_register_layer(const bn_layer_ops *ops)
{
    if (!ops || !ops->type || !ops->type[0])
        return bn_error(BN_ERR_USAGE, "cannot register a layer type without a name");
    if (!ops->setup || !ops->forward_cpu || !ops->backward_cpu)
        return bn_error(BN_ERR_USAGE, "layer type '%s' needs setup, forward_cpu and backward_cpu",
                        ops->type);
    if (bn_find_layer(ops->type))
        return bn_error(BN_ERR_USAGE, "layer type '%s' is already registered", ops->type);
    if (user_count == MAX_TYPES)
        return bn_error(BN_ERR_USAGE, "cannot register '%s': the registry holds %d user types at most",
                        ops->type, MAX_TYPES);
    user_types[user_count++] = ops;
    return BN_OK;
}

int bn_layer_builtin_count(void)
{
    return BUILTIN_COUNT;
}

int bn_layer_type_count(void)
{
    return BUILTIN_COUNT + user_count;
}

const bn_layer_ops *bn_layer_type_at(int i)
{
    if (i < 0 || i >= bn_layer_type_count()) return NULL;
    return i < BUILTIN_COUNT ? builtin[i] : user_types[i - BUILTIN_COUNT];
}
