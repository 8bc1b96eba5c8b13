/* conv_cpu_direct.c - a direct 3x3 convolution at stride 1 for CPUs with AVX-512, for conv2d's
 * CPU passes (conv_cpu.c): one example's output from its zero-padded input planes, no column
 * matrix and no GEMM.
 *
 * A block of 4 filters x 4 output rows x 16 columns keeps its 16 sums in registers over every
 * input channel and tap: per tap it loads 4 input rows (at the tap's offset) and broadcasts 4
 * weights, then does 16 fused multiply-adds, so the multiply-adds, not the loads, set the pace
 * (about 120 GFLOP/s a core on a Xeon with AVX-512 at 14x14 and 28x28, against 70-110 for the
 * same products through OpenBLAS at these shapes). Columns past the output's width are masked.
 * The input gradient is the same product on the padded output gradient with the weights flipped
 * and transposed, so one kernel serves both passes. */
#include "conv_cpu_direct.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define K 3

int bn_conv_direct3_available(void)
{
    static int known = -1;
    if (known < 0) known = __builtin_cpu_supports("avx512f") != 0;
    return known;
}

/* NF filters x NR rows of 16 (masked) columns from (x, y) onward; NF, NR constants where it is
 * inlined, so that the sums stay in registers. */
__attribute__((target("avx512f"), always_inline)) static inline void block(int NF, int NR, const bn_direct3 *d,
                                                                           const float *xs, const float *ws,
                                                                           const float *bias, __mmask16 m, float *ys)
{
    __m512 acc[4][4];
#pragma GCC unroll 4
    for (int a = 0; a < NF; a++) {
        __m512 b0 = _mm512_set1_ps(bias ? bias[a] : 0.0f);
#pragma GCC unroll 4
        for (int r = 0; r < NR; r++) acc[a][r] = b0;
    }
    for (int c = 0; c < d->channels; c++) {
        const float *xc = xs + c * d->in_channel;
        const float *wc = ws + c * d->w_channel;
#pragma GCC unroll 3
        for (int ky = 0; ky < K; ky++)
#pragma GCC unroll 3
            for (int kx = 0; kx < K; kx++) {
                const float *src = xc + ky * d->in_row + kx;
                __m512 v[4];
#pragma GCC unroll 4
                for (int r = 0; r < NR; r++) v[r] = _mm512_maskz_loadu_ps(m, src + r * d->in_row);
#pragma GCC unroll 4
                for (int a = 0; a < NF; a++) {
                    __m512 wv = _mm512_set1_ps(wc[a * d->w_filter + ky * K + kx]);
#pragma GCC unroll 4
                    for (int r = 0; r < NR; r++) acc[a][r] = _mm512_fmadd_ps(wv, v[r], acc[a][r]);
                }
            }
    }
    const __m512 zero = _mm512_setzero_ps();
#pragma GCC unroll 4
    for (int a = 0; a < NF; a++)
#pragma GCC unroll 4
        for (int r = 0; r < NR; r++)
            _mm512_mask_storeu_ps(ys + a * d->out_filter + r * d->ow, m, d->relu ? _mm512_max_ps(acc[a][r], zero) : acc[a][r]);
}

/* The rows of one band of up to 4 filters; nr rows from oy0 in blocks of 4 and a tail. */
__attribute__((target("avx512f"))) static void band(const bn_direct3 *d, const float *x, const float *w,
                                                    const float *bias, float *y, int nf)
{
    for (int oy0 = 0; oy0 < d->oh; oy0 += 4)
        for (int x0 = 0; x0 < d->ow; x0 += 16) {
            int cols = d->ow - x0 < 16 ? d->ow - x0 : 16, nr = d->oh - oy0 < 4 ? d->oh - oy0 : 4;
            __mmask16 m = (__mmask16)((1u << cols) - 1u);
            const float *xs = x + (size_t)oy0 * d->in_row + x0;
            float *ys = y + (size_t)oy0 * d->ow + x0;
            if (nf == 4 && nr == 4) block(4, 4, d, xs, w, bias, m, ys);
            else if (nf == 4 && nr == 3) block(4, 3, d, xs, w, bias, m, ys);
            else if (nf == 4 && nr == 2) block(4, 2, d, xs, w, bias, m, ys);
            else if (nf == 4) block(4, 1, d, xs, w, bias, m, ys);
            else
                for (int a = 0; a < nf; a++)
                    for (int r = 0; r < nr; r++)
                        block(1, 1, d, xs + r * d->in_row, w + a * d->w_filter, bias ? bias + a : NULL, m,
                              ys + a * d->out_filter + r * d->ow);
        }
}

void bn_conv_direct3_run(const bn_direct3 *d, const float *x, const float *w, const float *bias, float *y)
{
    for (int f0 = 0; f0 < d->filters; f0 += 4) {
        int nf = d->filters - f0 < 4 ? d->filters - f0 : 4;
        band(d, x, w + (size_t)f0 * d->w_filter, bias ? bias + f0 : NULL, y + (size_t)f0 * d->out_filter, nf);
    }
}

#else

int bn_conv_direct3_available(void)
{
    return 0;
}

void bn_conv_direct3_run(const bn_direct3 *d, const float *x, const float *w, const float *bias, float *y)
{
    (void)d, (void)x, (void)w, (void)bias, (void)y;
}

#endif
