/* cpu_gemm.c - bands of C's rows as tasks of the CPU pool. */
#include "cpu_gemm.h"

#include <cblas.h>

#include "parallel.h"

/* Bands below this many multiply-adds cost more to hand over than they save; past MAX_BANDS
 * more only add hand-overs on the machines this runs on. */
#define BAND_MIN_MACS (256 * 1024)
#define MAX_BANDS 16

typedef struct gemm_run {
    int trans_a, trans_b, m, n, k, lda, ldb, ldc, band;
    float alpha, beta;
    const float *a, *b;
    float *c;
} gemm_run;

static void band_task(void *p, int task, int worker)
{
    const gemm_run *g = p;
    int r0 = task * g->band, rows = g->m - r0 < g->band ? g->m - r0 : g->band;
    /* op(A)'s rows are A's rows, or its columns where A is transposed. */
    const float *a = g->trans_a ? g->a + r0 : g->a + (size_t)r0 * g->lda;
    cblas_sgemm(CblasRowMajor, g->trans_a ? CblasTrans : CblasNoTrans, g->trans_b ? CblasTrans : CblasNoTrans, rows,
                g->n, g->k, g->alpha, a, g->lda, g->b, g->ldb, g->beta, g->c + (size_t)r0 * g->ldc, g->ldc);
}

void bn_cpu_sgemm(int trans_a, int trans_b, int m, int n, int k, float alpha, const float *a, int lda, const float *b,
                  int ldb, float beta, float *c, int ldc)
{
    if (m <= 0 || n <= 0) return;
    double macs = (double)m * n * (k > 0 ? k : 1);
    int bands = (int)(macs / BAND_MIN_MACS);
    if (bands > MAX_BANDS) bands = MAX_BANDS;
    if (bands > m) bands = m;
    if (bands < 1) bands = 1;
    /* Bands of a multiple of 16 rows, the height of OpenBLAS's AVX-512 kernel, where rows allow. */
    int band = (m + bands - 1) / bands;
    if (m >= 32) band = (band + 15) / 16 * 16;
    gemm_run g = {trans_a, trans_b, m, n, k, lda, ldb, ldc, band, alpha, beta, a, b, c};
    bn_parallel_run((m + band - 1) / band, band_task, &g);
}
