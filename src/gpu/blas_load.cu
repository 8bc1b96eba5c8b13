/* blas_load.cu - cuBLAS and cuBLASLt opened at run time, not when the program starts.
 *
 * Linked the usual way, the two libraries cost a process about 80-100 ms before main on an
 * H200's host (loading their 600 MB: an empty program linked with cuBLASLt alone starts in
 * 97 ms), paid by every command, those that never touch a GPU too. Here the program defines the
 * cuBLAS entry points it calls; each forwards to the library's own, looked up once with
 * dlopen/dlsym. bn_gpu_blas_load() does that on purpose where the wait is hidden (the CLI calls
 * it on a thread of its own while the device's context is made); the first call of any entry
 * point does it otherwise. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

#include <cublasLt.h>
#include <cublas_v2.h>

#include "blas_load.h"

#define BN_STR2(x) #x
#define BN_STR(x) BN_STR2(x)

/* The entry points blobnet calls: name, return type, parameters, arguments. */
#define BN_BLAS_ENTRIES(X)                                                                                      \
    X(cublasCreate_v2, cublasStatus_t, (cublasHandle_t * h), (h))                                              \
    X(cublasDestroy_v2, cublasStatus_t, (cublasHandle_t h), (h))                                               \
    X(cublasSetStream_v2, cublasStatus_t, (cublasHandle_t h, cudaStream_t s), (h, s))                          \
    X(cublasSetMathMode, cublasStatus_t, (cublasHandle_t h, cublasMath_t mode), (h, mode))                     \
    X(cublasSgemm_v2, cublasStatus_t,                                                                          \
      (cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const float *alpha,  \
       const float *a, int lda, const float *b, int ldb, const float *beta, float *c, int ldc),                 \
      (h, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc))                                               \
    X(cublasGemmEx, cublasStatus_t,                                                                            \
      (cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const void *alpha,   \
       const void *a, cudaDataType at, int lda, const void *b, cudaDataType bt, int ldb, const void *beta,       \
       void *c, cudaDataType ct, int ldc, cublasComputeType_t compute, cublasGemmAlgo_t algo),                  \
      (h, ta, tb, m, n, k, alpha, a, at, lda, b, bt, ldb, beta, c, ct, ldc, compute, algo))                    \
    X(cublasLtCreate, cublasStatus_t, (cublasLtHandle_t * h), (h))                                             \
    X(cublasLtDestroy, cublasStatus_t, (cublasLtHandle_t h), (h))                                              \
    X(cublasLtMatmul, cublasStatus_t,                                                                          \
      (cublasLtHandle_t h, cublasLtMatmulDesc_t desc, const void *alpha, const void *a,                        \
       cublasLtMatrixLayout_t ad, const void *b, cublasLtMatrixLayout_t bd, const void *beta, const void *c,     \
       cublasLtMatrixLayout_t cd, void *d, cublasLtMatrixLayout_t dd, const cublasLtMatmulAlgo_t *algo,          \
       void *work, size_t work_bytes, cudaStream_t s),                                                          \
      (h, desc, alpha, a, ad, b, bd, beta, c, cd, d, dd, algo, work, work_bytes, s))                           \
    X(cublasLtMatrixLayoutCreate, cublasStatus_t,                                                              \
      (cublasLtMatrixLayout_t * l, cudaDataType t, uint64_t rows, uint64_t cols, int64_t ld),                  \
      (l, t, rows, cols, ld))                                                                                   \
    X(cublasLtMatrixLayoutDestroy, cublasStatus_t, (cublasLtMatrixLayout_t l), (l))                            \
    X(cublasLtMatmulDescCreate, cublasStatus_t,                                                                \
      (cublasLtMatmulDesc_t * d, cublasComputeType_t compute, cudaDataType_t scale), (d, compute, scale))      \
    X(cublasLtMatmulDescDestroy, cublasStatus_t, (cublasLtMatmulDesc_t d), (d))                                \
    X(cublasLtMatmulDescSetAttribute, cublasStatus_t,                                                          \
      (cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr, const void *buf, size_t bytes),            \
      (d, attr, buf, bytes))                                                                                    \
    X(cublasLtMatmulPreferenceCreate, cublasStatus_t, (cublasLtMatmulPreference_t * p), (p))                   \
    X(cublasLtMatmulPreferenceDestroy, cublasStatus_t, (cublasLtMatmulPreference_t p), (p))                    \
    X(cublasLtMatmulPreferenceSetAttribute, cublasStatus_t,                                                    \
      (cublasLtMatmulPreference_t p, cublasLtMatmulPreferenceAttributes_t attr, const void *buf, size_t bytes), \
      (p, attr, buf, bytes))                                                                                    \
    X(cublasLtMatmulAlgoGetHeuristic, cublasStatus_t,                                                          \
      (cublasLtHandle_t h, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t ad, cublasLtMatrixLayout_t bd,    \
       cublasLtMatrixLayout_t cd, cublasLtMatrixLayout_t dd, cublasLtMatmulPreference_t pref, int requested,    \
       cublasLtMatmulHeuristicResult_t results[], int *returned),                                               \
      (h, desc, ad, bd, cd, dd, pref, requested, results, returned))                                           \
    X(cublasLtGetVersion, size_t, (void), ())                                                                  \
    X(cublasGetStatusString, const char *, (cublasStatus_t s), (s))

#define BN_BLAS_POINTER(name, ret, params, args) static ret(*p_##name) params;
BN_BLAS_ENTRIES(BN_BLAS_POINTER)

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int loaded;
static char why[512];

static void *open_library(const char *name)
{
    void *h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        snprintf(why, sizeof why, "cannot load %s: %s", name, e ? e : "unknown error");
    }
    return h;
}

/* Looks a symbol up in cuBLAS first, then cuBLASLt (cuBLAS loads cuBLASLt as its own
 * dependency; the second handle names it for dlsym). */
static int find(void *blas, void *lt, const char *name, void **out)
{
    *out = dlsym(blas, name);
    if (!*out) *out = dlsym(lt, name);
    if (!*out) snprintf(why, sizeof why, "cuBLAS has no symbol %s", name);
    return *out != NULL;
}

static void load_once(void)
{
    void *blas = open_library("libcublas.so." BN_STR(CUBLAS_VER_MAJOR));
    void *lt = blas ? open_library("libcublasLt.so." BN_STR(CUBLAS_VER_MAJOR)) : NULL;
    if (!lt) return;
    int ok = 1;
#define BN_BLAS_FIND(name, ret, params, args) ok = ok && find(blas, lt, #name, (void **)&p_##name);
    BN_BLAS_ENTRIES(BN_BLAS_FIND)
    loaded = ok;
}

extern "C" int bn_gpu_blas_load(void)
{
    pthread_once(&once, load_once);
    return loaded;
}

/* The entry points: each loads the libraries on first use. Without them every call fails with
 * CUBLAS_STATUS_NOT_INITIALIZED, and the status string names what could not be loaded. */
template <typename T> static T failed();
template <> cublasStatus_t failed<cublasStatus_t>() { return CUBLAS_STATUS_NOT_INITIALIZED; }
template <> size_t failed<size_t>() { return 0; }
template <> const char *failed<const char *>() { return why; }

#define BN_BLAS_STUB(name, ret, params, args)             \
    extern "C" ret CUBLASWINAPI name params                \
    {                                                      \
        if (!bn_gpu_blas_load()) return failed<ret>();     \
        return p_##name args;                              \
    }
BN_BLAS_ENTRIES(BN_BLAS_STUB)
