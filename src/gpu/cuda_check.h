/* cuda_check.h - for .cu files: check every CUDA, cuBLAS and cuDNN call and turn a
 * failure into a bn_status whose message names file:line, the call and the library's own
 * error string. */
#ifndef BN_CUDA_CHECK_H
#define BN_CUDA_CHECK_H

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include "core/blob.h"
#include "core/status.h"

#define BN_CUDA(call)                                                                          \
    do {                                                                                       \
        cudaError_t bn_e_ = (call);                                                            \
        if (bn_e_ != cudaSuccess)                                                              \
            return bn_error(BN_ERR_DEVICE, "%s:%d: %s: %s", __FILE__, __LINE__, #call,         \
                            cudaGetErrorString(bn_e_));                                        \
    } while (0)

#define BN_CUBLAS(call)                                                                        \
    do {                                                                                       \
        cublasStatus_t bn_e_ = (call);                                                         \
        if (bn_e_ != CUBLAS_STATUS_SUCCESS)                                                    \
            return bn_error(BN_ERR_DEVICE, "%s:%d: %s: %s", __FILE__, __LINE__, #call,         \
                            cublasGetStatusString(bn_e_));                                     \
    } while (0)

#define BN_CUDNN(call)                                                                         \
    do {                                                                                       \
        cudnnStatus_t bn_e_ = (call);                                                          \
        if (bn_e_ != CUDNN_STATUS_SUCCESS)                                                     \
            return bn_error(BN_ERR_DEVICE, "%s:%d: %s: %s", __FILE__, __LINE__, #call,         \
                            cudnnGetErrorString(bn_e_));                                       \
    } while (0)

/* Declares var as the blob's cuDNN descriptor for its current shape, or returns the error. */
#define BN_TENSOR_DESC(var, blob)                                                        \
    cudnnTensorDescriptor_t var = (cudnnTensorDescriptor_t)bn_blob_tensor_desc(blob); \
    if (!var) return bn_last_status()

/* Checks the launch of the kernel just queued. */
#define BN_CUDA_LAUNCH() BN_CUDA(cudaGetLastError())

#endif
