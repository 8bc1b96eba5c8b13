/* conv_reference.cu - the reference convolution and the check of a graph-API plan against it
 * (conv_reference.h).
 *
 * One warp per output element: its lanes share the element's sum (C*R*S products for the
 * forward pass, K*R*S for the data pass, N*OH*OW for the filter pass), each summing every 32nd
 * product in double, then the warp adds the lanes' sums. The filter pass's long sums would leave
 * one thread per element with most of the device idle on a small filter. */
#include <stdint.h>
#include <stdlib.h>

#include <cuda_bf16.h>

#include "conv_reference.h"
#include "gpu/bf16.h"
#include "gpu/code_anchor.cuh"
#include "gpu/compare.h"
#include "gpu/cuda_check.h"

/* A tensor as the kernels read it: dims and strides in elements, BF16 or FP32. */
typedef struct view {
    int64_t d[4], s[4];
    int bf16;
} view;

static view view_of(const bn_cg_tensor *t)
{
    view v;
    for (int i = 0; i < 4; i++) {
        v.d[i] = t->dims[i];
        v.s[i] = t->strides[i];
    }
    v.bf16 = t->type == CUDNN_DATA_BFLOAT16;
    return v;
}

static __device__ __forceinline__ double load(const void *p, const view &v, int64_t a, int64_t b, int64_t c,
                                              int64_t e)
{
    const int64_t at = a * v.s[0] + b * v.s[1] + c * v.s[2] + e * v.s[3];
    return v.bf16 ? (double)__bfloat162float(((const __nv_bfloat16 *)p)[at]) : (double)((const float *)p)[at];
}

/* The four indices of packed element o of dims d (the last fastest). */
static __device__ __forceinline__ void unpack(int64_t o, const int64_t *d, int64_t *i)
{
    i[3] = o % d[3];
    o /= d[3];
    i[2] = o % d[2];
    o /= d[2];
    i[1] = o % d[1];
    i[0] = o / d[1];
}

/* Product j of output element i's sum (0 where it falls on the padding or between strides). */
static __device__ __forceinline__ double term(int pass, const view &xv, const view &wv, const view &yv,
                                              const void *x, const void *w, const void *y, int pad, int stride,
                                              const int64_t *i, int64_t j)
{
    if (pass == BN_CG_FORWARD) { /* y[n,k,oh,ow] += x[n,c,oh*stride-pad+r,ow*stride-pad+s] w[k,c,r,s] */
        const int64_t s = j % wv.d[3], r = j / wv.d[3] % wv.d[2], c = j / (wv.d[3] * wv.d[2]);
        const int64_t ih = i[2] * stride - pad + r, iw = i[3] * stride - pad + s;
        if (ih < 0 || ih >= xv.d[2] || iw < 0 || iw >= xv.d[3]) return 0.0;
        return load(x, xv, i[0], c, ih, iw) * load(w, wv, i[1], c, r, s);
    }
    if (pass == BN_CG_DATA) { /* dx[n,c,h,w] += dy[n,k,oh,ow] w[k,c,r,s] where h = oh*stride-pad+r */
        const int64_t s = j % wv.d[3], r = j / wv.d[3] % wv.d[2], k = j / (wv.d[3] * wv.d[2]);
        const int64_t th = i[2] + pad - r, tw = i[3] + pad - s;
        if (th < 0 || tw < 0 || th % stride || tw % stride) return 0.0;
        const int64_t oh = th / stride, ow = tw / stride;
        if (oh >= yv.d[2] || ow >= yv.d[3]) return 0.0;
        return load(y, yv, i[0], k, oh, ow) * load(w, wv, k, i[1], r, s);
    }
    /* dw[k,c,r,s] += x[n,c,oh*stride-pad+r,ow*stride-pad+s] dy[n,k,oh,ow] */
    const int64_t ow = j % yv.d[3], oh = j / yv.d[3] % yv.d[2], n = j / (yv.d[3] * yv.d[2]);
    const int64_t ih = oh * stride - pad + i[2], iw = ow * stride - pad + i[3];
    if (ih < 0 || ih >= xv.d[2] || iw < 0 || iw >= xv.d[3]) return 0.0;
    return load(x, xv, n, i[1], ih, iw) * load(y, yv, n, i[0], oh, ow);
}

__global__ void reference_kernel(int pass, view xv, view wv, view yv, const void *x, const void *w, const void *y,
                                 int pad, int stride, float *ref, int64_t count)
{
    const view &out = pass == BN_CG_FORWARD ? yv : pass == BN_CG_DATA ? xv : wv;
    const int64_t terms = pass == BN_CG_FORWARD ? wv.d[1] * wv.d[2] * wv.d[3]
                          : pass == BN_CG_DATA  ? wv.d[0] * wv.d[2] * wv.d[3]
                                                : yv.d[0] * yv.d[2] * yv.d[3];
    const int lane = threadIdx.x % 32;
    const int64_t warps = (int64_t)gridDim.x * (blockDim.x / 32);
    for (int64_t o = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32; o < count; o += warps) {
        int64_t i[4];
        unpack(o, out.d, i);
        double sum = 0.0;
        for (int64_t j = lane; j < terms; j += 32) sum += term(pass, xv, wv, yv, x, w, y, pad, stride, i, j);
        for (int step = 16; step > 0; step /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, step);
        if (lane == 0) ref[o] = (float)sum;
    }
}

/* dst (packed in t's dims order, FP32) = the tensor src of layout and type t. */
__global__ void gather_kernel(view t, const void *src, float *dst, int64_t count)
{
    for (int64_t o = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; o < count; o += (int64_t)gridDim.x * blockDim.x) {
        int64_t i[4];
        unpack(o, t.d, i);
        dst[o] = (float)load(src, t, i[0], i[1], i[2], i[3]);
    }
}

static int blocks_for(int64_t threads)
{
    const int64_t b = (threads + 255) / 256;
    return (int)(b < 1 ? 1 : b > 65536 ? 65536 : b);
}

/* The tensor the spec's pass writes. */
static const bn_cg_tensor *written(const bn_cg_spec *s)
{
    return s->pass == BN_CG_FORWARD ? &s->y : s->pass == BN_CG_DATA ? &s->x : &s->w;
}

extern "C" size_t bn_cg_written_count(const bn_cg_spec *spec)
{
    const int64_t *d = written(spec)->dims;
    return (size_t)(d[0] * d[1] * d[2] * d[3]);
}

extern "C" bn_status bn_cg_reference(bn_ctx *ctx, const bn_cg_spec *spec, const void *x, const void *w, const void *y,
                                     float *ref)
{
    const int64_t count = (int64_t)bn_cg_written_count(spec);
    reference_kernel<<<blocks_for(count * 32), 256, 0, (cudaStream_t)ctx->stream>>>(
        spec->pass, view_of(&spec->x), view_of(&spec->w), view_of(&spec->y), x, w, y, spec->pad, spec->stride, ref,
        count);
    BN_CUDA_LAUNCH();
    return BN_OK;
}

/* Both sides sum the same products of the same inputs; what differs is the order of the sums
 * and the precision of the products and of the output:
 * - FP32 throughout: sums in another order move a result by a few 1e-6 of the output's scale;
 *   1e-3 leaves room for that and still refuses the graph engine once seen 0.7% off on an FP32
 *   filter gradient (docs/performance.md, version 26, step 3);
 * - TF32 products (allow_down_convert): inputs rounded to a 10-bit fraction put a result about
 *   1e-3 of its scale off, a few times that at its worst element; 1e-2, as the layer tests allow
 *   (tests/gpu_testing.h, TOL_TF32);
 * - BF16 inputs or output: BF16 products are exact in FP32 sums, but a BF16 output keeps an 8-bit
 *   significand (up to 0.4% of its value off) and an engine may round partial sums too; 2e-2,
 *   still well below what sums kept in BF16 lose over hundreds of products. */
extern "C" double bn_cg_tolerance(const bn_cg_spec *spec)
{
    const bool bf16 = spec->x.type == CUDNN_DATA_BFLOAT16 || spec->w.type == CUDNN_DATA_BFLOAT16 ||
                      spec->y.type == CUDNN_DATA_BFLOAT16;
    return bf16 ? 2e-2 : spec->allow_down_convert ? 1e-2 : 1e-3;
}

extern "C" bn_status bn_cg_check_output(bn_ctx *ctx, const bn_cg_spec *spec, const float *ref, const void *out,
                                        double *err, double *tol, int *agrees)
{
    *agrees = 0;
    *tol = bn_cg_tolerance(spec);
    const int64_t count = (int64_t)bn_cg_written_count(spec);
    float *packed = NULL;
    BN_TRY(bn_device_alloc((void **)&packed, (size_t)count * sizeof(float)));
    gather_kernel<<<blocks_for(count), 256, 0, (cudaStream_t)ctx->stream>>>(view_of(written(spec)), out, packed,
                                                                              count);
    bn_status st = cudaGetLastError() == cudaSuccess
                       ? BN_OK
                       : bn_error(BN_ERR_DEVICE, "conv_reference: the output's gather did not launch");
    if (st == BN_OK) st = bn_gpu_relative_error(packed, ref, (size_t)count, ctx, err);
    bn_device_free(packed);
    if (st == BN_OK) *agrees = *err <= *tol;
    return st;
}

struct bn_cg_check {
    bn_ctx *ctx;
    bn_cg_spec spec;
    void *t[3];   /* x, w, y */
    size_t bytes[3];
    float *ref;
};

/* The bytes tensor t spans in memory: its last element's offset, plus one, times its element's size. */
static size_t span_bytes(const bn_cg_tensor *t)
{
    int64_t last = 0;
    for (int i = 0; i < 4; i++) last += (t->dims[i] - 1) * t->strides[i];
    return (size_t)(last + 1) * (t->type == CUDNN_DATA_BFLOAT16 ? 2 : 4);
}

/* Tensor t's whole span at dst filled with uniform values in [-1, 1) drawn from seed: BF16 ones
 * rounded from FP32 draws made in scratch. */
static bn_status fill(bn_ctx *ctx, const bn_cg_tensor *t, void *dst, size_t bytes, uint64_t seed)
{
    if (t->type != CUDNN_DATA_BFLOAT16) return bn_gpu_fill_uniform((float *)dst, bytes / 4, seed, ctx);
    float *draws = NULL;
    BN_TRY(bn_device_alloc((void **)&draws, bytes / 2 * sizeof(float)));
    bn_status st = bn_gpu_fill_uniform(draws, bytes / 2, seed, ctx);
    if (st == BN_OK) st = bn_gpu_f32_to_bf16(dst, draws, bytes / 2, ctx);
    /* cudaFree waits for the device, so the conversion has read the draws. */
    bn_device_free(draws);
    return st;
}

extern "C" void bn_cg_check_close(bn_cg_check **check)
{
    if (!*check) return;
    for (int i = 0; i < 3; i++) bn_device_free((*check)->t[i]);
    bn_device_free((*check)->ref);
    free(*check);
    *check = NULL;
}

extern "C" bn_status bn_cg_check_open(bn_ctx *ctx, const bn_cg_spec *spec, bn_cg_check **out)
{
    *out = NULL;
    bn_cg_check *c = (bn_cg_check *)calloc(1, sizeof *c);
    if (!c) return bn_error(BN_ERR_NOMEM, "conv_reference: out of host memory");
    c->ctx = ctx;
    c->spec = *spec;
    const bn_cg_tensor *t[3] = {&spec->x, &spec->w, &spec->y};
    /* Which of x, w and y the pass reads: all but the one it writes. */
    const int writes = spec->pass == BN_CG_FORWARD ? 2 : spec->pass == BN_CG_DATA ? 0 : 1;
    bn_status st = BN_OK;
    for (int i = 0; i < 3 && st == BN_OK; i++) {
        c->bytes[i] = span_bytes(t[i]);
        st = bn_device_alloc(&c->t[i], c->bytes[i]);
        if (st == BN_OK && i != writes) st = fill(ctx, t[i], c->t[i], c->bytes[i], 0x5eedc0de00ULL + (uint64_t)i);
    }
    if (st == BN_OK) st = bn_device_alloc((void **)&c->ref, bn_cg_written_count(spec) * sizeof(float));
    if (st == BN_OK) st = bn_cg_reference(ctx, spec, c->t[0], c->t[1], c->t[2], c->ref);
    if (st != BN_OK) {
        bn_cg_check_close(&c);
        return st;
    }
    *out = c;
    return BN_OK;
}

extern "C" bn_status bn_cg_check_plan(bn_cg_check *check, const bn_cg_plan *plan, double *err, double *tol,
                                      int *agrees)
{
    *agrees = 0;
    bn_ctx *ctx = check->ctx;
    const int writes = check->spec.pass == BN_CG_FORWARD ? 2 : check->spec.pass == BN_CG_DATA ? 0 : 1;
    BN_CUDA(cudaMemsetAsync(check->t[writes], 0, check->bytes[writes], (cudaStream_t)ctx->stream));
    BN_TRY(bn_cg_run(ctx, plan, check->t[0], check->t[1], check->t[2]));
    return bn_cg_check_output(ctx, &check->spec, check->ref, check->t[writes], err, tol, agrees);
}

BN_CODE_ANCHOR(conv_reference, gather_kernel) /* code_load.cu */
