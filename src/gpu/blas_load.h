/* blas_load.h - cuBLAS opened at run time (blas_load.cu): the program's cuBLAS calls go through
 * entry points of its own that load the library on first use. */
#ifndef BN_GPU_BLAS_LOAD_H
#define BN_GPU_BLAS_LOAD_H

#ifdef __cplusplus
extern "C" {
#endif

/* Loads cuBLAS and cuBLASLt now, once per process (later calls return at once): 1 when they
 * are there, 0 when not (bn_gpu_blas_load_error says why). Thread-safe. */
int bn_gpu_blas_load(void);

/* Why the libraries could not be loaded; NULL when they were. */
const char *bn_gpu_blas_load_error(void);

#ifdef __cplusplus
}
#endif

#endif
