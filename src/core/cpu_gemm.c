/* cpu_gemm.c - bands of C's rows, or of its columns where it has far fewer rows, as tasks of the
 * CPU pool.
 *
 * Each band's cblas_sgemm packs the whole of the operand it shares with the other bands: op(B) for
 * bands of rows, op(A) for bands of columns. Bands of columns wherever C has at least twice as many
 * columns as rows (a dense layer's batch against its outputs or inputs) pack the smaller operand
 * that many times: mlp_wide's 2048 x 2048 product at batch 128 packed its 16 MB of weights once a
 * band, eight times a pass, and takes 6.5 ms forward instead of 10.7 on two cores. */
#include "cpu_gemm.h"

#include <cblas.h>

#include "parallel.h"

/* Bands below this many multiply-adds cost more to hand over than they save; past MAX_BANDS
 * more only add hand-overs on the machines this runs on. */
#define BAND_MIN_MACS (256 * 1024)
#define MAX_BANDS 16

typedef struct gemm_run {
    int trans_a, trans_b, m, n, k, lda, ldb, ldc, band, by_columns;
    float alpha, beta;
    const float *a, *b;
    float *c;
} gemm_run;

static void band_task(void *p, int task, int worker)
{
    const gemm_run *g = p;
    const CBLAS_TRANSPOSE ta = g->trans_a ? CblasTrans : CblasNoTrans, tb = g->trans_b ? CblasTrans : CblasNoTrans;
    if (g->by_columns) {
        int c0 = task * g->band, cols = g->n - c0 < g->band ? g->n - c0 : g->band;
        /* op(B)'s columns are B's columns, or its rows where B is transposed. */
        const float *b = g->trans_b ? g->b + (size_t)c0 * g->ldb : g->b + c0;
        cblas_sgemm(CblasRowMajor, ta, tb, g->m, cols, g->k, g->alpha, g->a, g->lda, b, g->ldb, g->beta, g->c + c0,
                    g->ldc);
        return;
    }
    int r0 = task * g->band, rows = g->m - r0 < g->band ? g->m - r0 : g->band;
    /* op(A)'s rows are A's rows, or its columns where A is transposed. */
    const float *a = g->trans_a ? g->a + r0 : g->a + (size_t)r0 * g->lda;
    cblas_sgemm(CblasRowMajor, ta, tb, rows, g->n, g->k, g->alpha, a, g->lda, g->b, g->ldb, g->beta,
                g->c + (size_t)r0 * g->ldc, g->ldc);
}

void bn_cpu_sgemm(int trans_a, int trans_b, int m, int n, int k, float alpha, const float *a, int lda, const float *b,
                  int ldb, float beta, float *c, int ldc)
{
    if (m <= 0 || n <= 0) return;
    double macs = (double)m * n * (k > 0 ? k : 1);
    const int by_columns = n >= 2 * m, span = by_columns ? n : m;
    int bands = (int)(macs / BAND_MIN_MACS);
    if (bands > MAX_BANDS) bands = MAX_BANDS;
    if (bands > span) bands = span;
    if (bands < 1) bands = 1;
    /* Bands of a multiple of 16 rows (or columns), the height of OpenBLAS's AVX-512 kernel, where
     * they allow. */
    int band = (span + bands - 1) / bands;
    if (span >= 32) band = (band + 15) / 16 * 16;
    gemm_run g = {trans_a, trans_b, m, n, k, lda, ldb, ldc, band, by_columns, alpha, beta, a, b, c};
    bn_parallel_run((span + band - 1) / band, band_task, &g);
}
