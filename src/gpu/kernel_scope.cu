/* kernel_scope.cu - what a timed kernel choice depends on besides the layer's shape: the device
 * and the libraries loaded (kernel_cache.h), and the keys that begin with it (chooser.h). */
#include <stdarg.h>
#include <stdio.h>

#include <cublasLt.h>

#include "chooser.h"
#include "cuda_check.h"
#include "kernel_cache.h"

extern "C" bn_status bn_kernel_cache_scope(const bn_ctx *ctx, char *buf, size_t cap)
{
    int major = 0, minor = 0, sms = 0, runtime = 0, driver = 0;
    BN_CUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, ctx->device));
    BN_CUDA(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, ctx->device));
    BN_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, ctx->device));
    BN_CUDA(cudaRuntimeGetVersion(&runtime));
    BN_CUDA(cudaDriverGetVersion(&driver));
    int w = snprintf(buf, cap, "%s sm%d%d %dSM driver%d cuda%d cudnn%zu cublaslt%zu kernels%d", ctx->name, major, minor,
                     sms, driver, runtime, cudnnGetVersion(), cublasLtGetVersion(), BN_KERNEL_CACHE_VERSION);
    if (w < 0 || (size_t)w >= cap)
        return bn_error(BN_ERR_INTERNAL, "kernel cache: no room for the scope of %s", ctx->name);
    return BN_OK;
}

extern "C" bn_status bn_chooser_key(const bn_ctx *ctx, char *key, size_t cap, const char *fmt, ...)
{
    char scope[BN_KERNEL_KEY_MAX];
    BN_TRY(bn_kernel_cache_scope(ctx, scope, sizeof scope));
    va_list ap;
    va_start(ap, fmt);
    bn_status s = bn_chooser_vkey(scope, key, cap, fmt, ap);
    va_end(ap);
    return s;
}
