/* code_modules.h - the library's GPU code modules, by name: the .cu files whose kernels the
 * passes launch, each of which the driver loads as one module. A layer type names those its
 * passes use (bn_layer_ops.gpu_code); a training run loads them on a thread of its own
 * (bn_device_code_load_begin) while the network is set up and the data uploaded. Each file
 * defines its anchor with BN_CODE_ANCHOR (code_anchor.cuh); a file added here without one fails
 * to link, and a name a layer type gives that is not here fails test_code_load. */
#ifndef BN_CODE_MODULES_H
#define BN_CODE_MODULES_H

#define BN_GPU_CODE_MODULES(X)                                                                       \
    X(loader_gpu) X(optimizer_gpu) X(kernels) X(compare) X(bf16) X(activation) X(add) X(batchnorm)    \
    X(dropout) X(pool) X(softmax_ce) X(dense) X(dense_plan) X(dense_gemm) X(dense_skinny) X(dense_bf16) \
    X(conv_direct) X(conv_rows) X(conv_tensor) X(conv_argmax) X(conv_bias) X(conv_halo) X(conv_igemm)  \
    X(conv_wino) X(conv_bf16_passes) X(conv_reference)

#endif
