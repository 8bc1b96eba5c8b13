/* test_gpu_bf16.c - the BF16 transposes of src/gpu/bf16.cu (NCHW <-> NHWC, KCRS <-> KRSC) and the
 * transposing add into FP32, against the transpose done on the host.
 *
 * Values are small integers, which BF16 holds exactly, so every comparison is exact: a
 * transpose only moves values. The shapes cover one tile and several, rows and columns that
 * are and are not multiples of the 64-element tile, odd and even lengths (the kernel moves
 * pairs of neighbours only where a row length is even), and buffers one element off alignment
 * (pairs then moved one by one). The destination has a sentinel past its end: a write outside
 * the transpose fails the test. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/device.h"
#include "gpu/bf16.h"
#include "testing.h"

#ifdef BN_WITH_CUDA /* the transposes exist only in a CUDA build */
typedef struct shape {
    int batch, rows, cols;
} shape;

static const shape shapes[] = {
    {3, 5, 7},     /* smaller than a tile, both odd */
    {2, 64, 196},  /* NCHW -> NHWC at 64 channels of 14x14 */
    {4, 196, 64},  /* and back */
    {3, 49, 32},   /* NHWC -> NCHW of 7x7, rows odd */
    {1, 130, 67},  /* three tiles down, two across, with ragged edges */
    {64, 9, 32},   /* a KRSC 3x3 filter gradient of 64 filters, 32 channels */
};
#define NUM_SHAPES (int)(sizeof shapes / sizeof shapes[0])
#define SENTINEL -1000.0f

/* The value at (b, i, j) of the source: an integer in [-125, 125], exact in BF16. */
static float source_value(const shape *s, int b, int i, int j)
{
    return (float)((((long)b * s->rows + i) * s->cols + j) % 251 - 125);
}

/* count floats from host into a fresh BF16 device buffer, `skew` elements past its start (*base:
 * the allocation, freed by the caller). */
static bn_status upload_bf16(const float *host, size_t count, int skew, bn_ctx *ctx, void **base, void **at)
{
    float *f = NULL;
    *base = NULL;
    BN_TRY(bn_device_alloc((void **)&f, count * sizeof *f));
    bn_status st = bn_device_h2d(f, host, count * sizeof *f);
    if (st == BN_OK) st = bn_device_alloc(base, (count + 1) * 2);
    if (st == BN_OK) st = bn_gpu_f32_to_bf16((char *)*base + 2 * skew, f, count, ctx);
    if (st == BN_OK) st = bn_device_sync();
    bn_device_free(f);
    *at = (char *)*base + 2 * skew;
    return st;
}

/* count BF16 values at dev back to host floats. */
static bn_status download_bf16(const void *dev, size_t count, bn_ctx *ctx, float *host)
{
    float *f = NULL;
    BN_TRY(bn_device_alloc((void **)&f, count * sizeof *f));
    bn_status st = bn_gpu_bf16_to_f32(f, dev, count, ctx);
    if (st == BN_OK) st = bn_device_d2h(host, f, count * sizeof *f);
    bn_device_free(f);
    return st;
}

static float *source_of(const shape *s)
{
    const size_t count = (size_t)s->batch * s->rows * s->cols;
    float *v = malloc(count * sizeof *v);
    if (!v) return NULL;
    for (int b = 0; b < s->batch; b++)
        for (int i = 0; i < s->rows; i++)
            for (int j = 0; j < s->cols; j++) v[((size_t)b * s->rows + i) * s->cols + j] = source_value(s, b, i, j);
    return v;
}

/* got (count + 1 values) holds base + the transpose of the source, then the sentinel. */
static int check_transpose(const char *what, const shape *s, int skew, const float *got, float base)
{
    for (int b = 0; b < s->batch; b++)
        for (int j = 0; j < s->cols; j++)
            for (int i = 0; i < s->rows; i++) {
                const float want = base + source_value(s, b, i, j);
                const float g = got[((size_t)b * s->cols + j) * s->rows + i];
                CHECK_MSG(g == want,
                          "%s of %d matrices of %d x %d (buffers %d element(s) off alignment): out[%d][%d][%d] = %g, "
                          "want in[%d][%d][%d] = %g",
                          what, s->batch, s->rows, s->cols, skew, b, j, i, g, b, i, j, want);
            }
    const size_t count = (size_t)s->batch * s->rows * s->cols;
    CHECK_MSG(got[count] == SENTINEL, "%s of %d matrices of %d x %d: the element past the end was overwritten (%g)",
              what, s->batch, s->rows, s->cols, got[count]);
    return BN_PASS;
}

static int transpose_case(const shape *s, int skew, bn_ctx *ctx)
{
    const size_t count = (size_t)s->batch * s->rows * s->cols;
    float *in = source_of(s), *out = malloc((count + 1) * sizeof *out);
    CHECK_MSG(in && out, "test: out of host memory");
    for (size_t k = 0; k <= count; k++) out[k] = SENTINEL;
    void *src_base = NULL, *src = NULL, *dst_base = NULL, *dst = NULL;
    bn_status st = upload_bf16(in, count, skew, ctx, &src_base, &src);
    if (st == BN_OK) st = upload_bf16(out, count + 1, skew, ctx, &dst_base, &dst);
    if (st == BN_OK) st = bn_gpu_bf16_transpose(dst, src, s->batch, s->rows, s->cols, ctx);
    if (st == BN_OK) st = download_bf16(dst, count + 1, ctx, out);
    bn_device_free(src_base);
    bn_device_free(dst_base);
    int r = st == BN_OK ? check_transpose("bn_gpu_bf16_transpose", s, skew, out, 0.0f) : BN_FAIL;
    if (st != BN_OK) printf("    %s\n", bn_last_error());
    free(in);
    free(out);
    return r;
}

static int add_case(const shape *s, int skew, bn_ctx *ctx)
{
    const size_t count = (size_t)s->batch * s->rows * s->cols;
    float *in = source_of(s), *out = malloc((count + 1) * sizeof *out);
    CHECK_MSG(in && out, "test: out of host memory");
    for (size_t k = 0; k < count; k++) out[k] = 0.5f;
    out[count] = SENTINEL;
    void *src_base = NULL, *src = NULL;
    float *dst_base = NULL;
    bn_status st = upload_bf16(in, count, skew, ctx, &src_base, &src);
    if (st == BN_OK) st = bn_device_alloc((void **)&dst_base, (count + 2) * sizeof *out);
    if (st == BN_OK) st = bn_device_h2d(dst_base + skew, out, (count + 1) * sizeof *out);
    if (st == BN_OK) st = bn_gpu_add_bf16_transposed_to_f32(dst_base + skew, src, s->batch, s->rows, s->cols, ctx);
    if (st == BN_OK) st = bn_device_d2h(out, dst_base + skew, (count + 1) * sizeof *out);
    bn_device_free(src_base);
    bn_device_free(dst_base);
    int r = st == BN_OK ? check_transpose("bn_gpu_add_bf16_transposed_to_f32", s, skew, out, 0.5f) : BN_FAIL;
    if (st != BN_OK) printf("    %s\n", bn_last_error());
    free(in);
    free(out);
    return r;
}

#endif

BN_TEST(gpu_bf16_transpose_moves_every_element)
{
    if (bn_device_count() == 0) BN_SKIP_TEST("no CUDA device");
#ifdef BN_WITH_CUDA
    bn_ctx *ctx;
    CHECK_OK(bn_ctx_open(0, &ctx));
    for (int k = 0; k < NUM_SHAPES; k++)
        for (int skew = 0; skew <= 1; skew++) CHECK(transpose_case(&shapes[k], skew, ctx) == BN_PASS);
#endif
    return BN_PASS;
}

BN_TEST(gpu_bf16_transposed_add_into_fp32)
{
    if (bn_device_count() == 0) BN_SKIP_TEST("no CUDA device");
#ifdef BN_WITH_CUDA
    bn_ctx *ctx;
    CHECK_OK(bn_ctx_open(0, &ctx));
    for (int k = 0; k < NUM_SHAPES; k++)
        for (int skew = 0; skew <= 1; skew++) CHECK(add_case(&shapes[k], skew, ctx) == BN_PASS);
#endif
    return BN_PASS;
}

/* Sizes the kernel's grid cannot hold are refused with an error naming them, not launched. */
BN_TEST(gpu_bf16_transpose_refuses_too_many_matrices)
{
    if (bn_device_count() == 0) BN_SKIP_TEST("no CUDA device");
#ifdef BN_WITH_CUDA
    bn_ctx *ctx;
    CHECK_OK(bn_ctx_open(0, &ctx));
    bn_status st = bn_gpu_bf16_transpose(NULL, NULL, 70000, 2, 2, ctx);
    CHECK_MSG(st != BN_OK && strstr(bn_last_error(), "70000"),
              "a transpose of 70000 matrices gave status %d, \"%s\"; want an error naming 70000", st,
              st != BN_OK ? bn_last_error() : "");
#endif
    return BN_PASS;
}
