/* blas_load.h - cuBLAS opened at run time (blas_load.cu): the program's cuBLAS calls go through
 * entry points of its own that load the library on first use. */
#ifndef BN_GPU_BLAS_LOAD_H
#define BN_GPU_BLAS_LOAD_H

#ifdef __cplusplus
extern "C" {
#endif

/* Loads cuBLAS and cuBLASLt now, once per process (later calls return at once): 1 when they
 * are there, 0 when not (every entry point then fails with CUBLAS_STATUS_NOT_INITIALIZED, and
 * cublasGetStatusString says what could not be loaded). Thread-safe. */
int bn_gpu_blas_load(void);

#ifdef __cplusplus
}
#endif

#endif
