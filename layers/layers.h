/* layers.h - the ops tables of the built-in layer types, one per file pair in layers/. */
#ifndef BN_LAYERS_H
#define BN_LAYERS_H

#include "core/layer.h"

extern const bn_layer_ops bn_dense_ops;
extern const bn_layer_ops bn_conv2d_ops;
extern const bn_layer_ops bn_maxpool_ops;
extern const bn_layer_ops bn_avgpool_ops;
extern const bn_layer_ops bn_relu_ops;
extern const bn_layer_ops bn_sigmoid_ops;
extern const bn_layer_ops bn_tanh_ops;
extern const bn_layer_ops bn_leaky_relu_ops;
extern const bn_layer_ops bn_elu_ops;
extern const bn_layer_ops bn_softmax_ce_ops;
extern const bn_layer_ops bn_dropout_ops;
extern const bn_layer_ops bn_add_ops;
extern const bn_layer_ops bn_concat_ops;
extern const bn_layer_ops bn_batchnorm_ops;

#endif
