/* conv_cudnn.cuh - what conv2d.cu, conv_bf16.cu and conv_graph.cu share about cuDNN's
 * convolutions: the most workspace one algorithm or engine may ask for, which of the legacy
 * API's algorithms sum products directly, and the algorithms' names for plans and logs. */
#ifndef BN_CONV_CUDNN_CUH
#define BN_CONV_CUDNN_CUH

#include <stddef.h>

#include <cudnn.h>

/* Faster algorithms or engines that want more workspace than this are skipped. */
#define BN_CONV_WORKSPACE_LIMIT ((size_t)256 << 20)

/* Whether a legacy algorithm sums products directly: no FFT or Winograd transform, whose own
 * rounding (1.4e-3 relative on LeNet's conv1 in FP32) comes on top of the inputs'. */
static inline bool bn_sums_directly(cudnnConvolutionFwdAlgo_t a)
{
    return a == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM || a == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM ||
           a == CUDNN_CONVOLUTION_FWD_ALGO_GEMM || a == CUDNN_CONVOLUTION_FWD_ALGO_DIRECT;
}

static inline bool bn_sums_directly(cudnnConvolutionBwdDataAlgo_t a)
{
    return a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_0 || a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_1;
}

static inline bool bn_sums_directly(cudnnConvolutionBwdFilterAlgo_t a)
{
    return a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0 || a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1 ||
           a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3;
}

/* A legacy algorithm's name, "?" for a value cuDNN did not have when this was written. */
static inline const char *bn_cudnn_algo_name(cudnnConvolutionFwdAlgo_t a)
{
    static const char *const names[] = {"implicit_gemm", "implicit_precomp_gemm", "gemm", "direct",
                                        "fft", "fft_tiling", "winograd", "winograd_nonfused"};
    return (int)a >= 0 && (size_t)a < sizeof names / sizeof names[0] ? names[a] : "?";
}

static inline const char *bn_cudnn_algo_name(cudnnConvolutionBwdDataAlgo_t a)
{
    static const char *const names[] = {"algo_0", "algo_1", "fft", "fft_tiling", "winograd", "winograd_nonfused"};
    return (int)a >= 0 && (size_t)a < sizeof names / sizeof names[0] ? names[a] : "?";
}

static inline const char *bn_cudnn_algo_name(cudnnConvolutionBwdFilterAlgo_t a)
{
    static const char *const names[] = {"algo_0", "algo_1", "fft", "algo_3", "winograd", "winograd_nonfused",
                                        "fft_tiling"};
    return (int)a >= 0 && (size_t)a < sizeof names / sizeof names[0] ? names[a] : "?";
}

#endif
