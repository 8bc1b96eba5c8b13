/* cpu_gemm.h - single-precision GEMM on the CPU pool (parallel.h): C = alpha op(A) op(B) +
 * beta C in row-major order, as cblas_sgemm, with C's rows (or, where C is at least twice as wide
 * as it is tall, its columns) cut into bands that the pool's threads multiply at once. The bands
 * depend on the shapes alone, so the result does not depend on the number of threads. */
#ifndef BN_CPU_GEMM_H
#define BN_CPU_GEMM_H

#ifdef __cplusplus
extern "C" {
#endif

/* trans_a, trans_b: 0 for the matrix as stored, 1 for its transpose. */
void bn_cpu_sgemm(int trans_a, int trans_b, int m, int n, int k, float alpha, const float *a, int lda, const float *b,
                  int ldb, float beta, float *c, int ldc);

#ifdef __cplusplus
}
#endif
#endif
