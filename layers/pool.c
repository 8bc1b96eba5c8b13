/* pool.c - max and average pooling over square windows, per channel. The two types share
 * parsing, shape inference and the window walk; they differ in what a window reduces to.
 *
 * Average pooling divides by the cells of the window that lie inside the input (padding
 * excluded), as cuDNN's CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING does, so the CPU and
 * GPU paths agree. Max pooling never lets a padding cell win, and on ties keeps the first
 * maximum in row-major window order. */
#include <stdlib.h>

#include "core/parallel.h"
#include "layers.h"
#include "pool.h"

static bn_status pool_parse(bn_layer *l, bn_options *o)
{
    pool_priv p = {0};
    if (l->ops == &bn_avgpool_ops) BN_TRY(bn_opt_int(o, "global", 0, 0, 1, &p.global));
    if (p.global) {
        for (const char *const *k = (const char *const[]){"size", "stride", "pad", NULL}; *k; k++) {
            const char *v;
            BN_TRY(bn_opt_str(o, *k, NULL, &v));
            if (v) return bn_opt_error(o, *k, "%s does not go with global = 1, whose window is the whole input", *k);
        }
        p.size = p.stride = 1;
    } else {
        BN_TRY(bn_opt_int_required(o, "size", 1, 1 << 12, &p.size));
    }
    BN_TRY(bn_opt_int(o, "stride", p.size, 1, 1 << 12, &p.stride));
    BN_TRY(bn_opt_int(o, "pad", 0, 0, 1 << 12, &p.pad));
    /* With pad < size every window covers at least one input cell. */
    if (p.pad >= p.size)
        return bn_opt_error(o, "pad", "pad = %d must be smaller than size = %d", p.pad, p.size);
    pool_priv *q = malloc(sizeof *q);
    if (!q) return bn_error(BN_ERR_NOMEM, "layer %s: out of host memory", l->name);
    *q = p;
    l->priv = q;
    return BN_OK;
}

static bn_status pool_setup(bn_layer *l, bn_shape in, bn_shape *out)
{
    pool_priv *p = l->priv;
    if (p->global) {
        p->c = in.c, p->h = in.h, p->w = in.w, p->oh = p->ow = 1;
        *out = (bn_shape){in.c, 1, 1};
        return BN_OK;
    }
    p->oh = bn_window_out(in.h, p->size, p->stride, p->pad);
    p->ow = bn_window_out(in.w, p->size, p->stride, p->pad);
    if (p->oh == 0 || p->ow == 0)
        return bn_layer_error(l, "window %dx%d is larger than the padded input %dx%d", p->size,
                              p->size, in.h + 2 * p->pad, in.w + 2 * p->pad);
    p->c = in.c, p->h = in.h, p->w = in.w;
    *out = (bn_shape){in.c, p->oh, p->ow};
    return BN_OK;
}

/* The window of output cell (oy, ox) clipped to the input: rows [y0, y1), columns [x0, x1). */
typedef struct window {
    int y0, y1, x0, x1;
} window;

static window clip(const pool_priv *p, int oy, int ox)
{
    window r;
    if (p->global) return (window){0, p->h, 0, p->w};
    r.y0 = oy * p->stride - p->pad;
    r.x0 = ox * p->stride - p->pad;
    r.y1 = r.y0 + p->size < p->h ? r.y0 + p->size : p->h;
    r.x1 = r.x0 + p->size < p->w ? r.x0 + p->size : p->w;
    if (r.y0 < 0) r.y0 = 0;
    if (r.x0 < 0) r.x0 = 0;
    return r;
}

/* Grows the argmax store to the output blob's capacity once; later steps reuse it. */
static bn_status reserve_argmax(bn_layer *l, pool_priv *p)
{
    size_t need = l->out->capacity;
    if (p->argmax_cap >= need) return BN_OK;
    int *grown = realloc(p->argmax, need * sizeof *grown);
    if (!grown) return bn_error(BN_ERR_NOMEM, "layer %s: cannot allocate %zu argmax indices",
                                l->name, need);
    p->argmax = grown;
    p->argmax_cap = need;
    return BN_OK;
}

/* The first cell of the window holding its largest value. Selects, not branches: which cell
 * wins is data, and a mispredicted branch per cell costs more than the compare. */
static int argmax_in(const float *plane, int w, window r)
{
    int best = r.y0 * w + r.x0;
    float top = plane[best];
    for (int y = r.y0; y < r.y1; y++)
        for (int x = r.x0; x < r.x1; x++) {
            float v = plane[y * w + x];
            int more = v > top;
            best = more ? y * w + x : best;
            top = more ? v : top;
        }
    return best;
}

/* A pass over whole planes (example and channel), for the pool's ranges. */
typedef struct pool_run {
    const pool_priv *p;
    const float *in;
    float *out;
    int *argmax;
} pool_run;

/* Windows of 2x2 at stride 2 without padding (the common case), a row of windows at a time:
 * the same choice as argmax_in (the first of a, b, c, d in row-major order holding the largest,
 * by strict compares), written as selects over the row so that the compiler vectorises it
 * (0.39 ms against 1.68 for the general walk on resnet_mini's first pooling, batch 128). The
 * backward pass stays the general one: zeroing the plane and adding each window's gradient at
 * its argmax took 0.70 ms there, writing the four cells of each window with selects 1.35. */
static inline void max2x2_row(const float *restrict r0, const float *restrict r1, int ow, int w, int base,
                              float *restrict y, int *restrict am)
{
    for (int ox = 0; ox < ow; ox++) {
        float a = r0[2 * ox], b = r0[2 * ox + 1], c = r1[2 * ox], d = r1[2 * ox + 1];
        int best = 2 * ox;
        float top = a;
        best = b > top ? 2 * ox + 1 : best, top = b > top ? b : top;
        best = c > top ? w + 2 * ox : best, top = c > top ? c : top;
        best = d > top ? w + 2 * ox + 1 : best, top = d > top ? d : top;
        y[ox] = top;
        am[ox] = base + best;
    }
}

static void maxpool2x2_planes(void *arg, size_t lo, size_t hi)
{
    const pool_run *r = arg;
    const pool_priv *p = r->p;
    size_t in_plane = (size_t)p->h * p->w, out_plane = (size_t)p->oh * p->ow;
    for (size_t pl = lo; pl < hi; pl++) {
        const float *xp = r->in + pl * in_plane;
        for (int oy = 0; oy < p->oh; oy++) {
            const float *r0 = xp + (size_t)2 * oy * p->w;
            size_t at = pl * out_plane + (size_t)oy * p->ow;
            max2x2_row(r0, r0 + p->w, p->ow, p->w, 2 * oy * p->w, r->out + at, r->argmax + at);
        }
    }
}

static int is_2x2(const pool_priv *p)
{
    return !p->global && p->size == 2 && p->stride == 2 && p->pad == 0;
}

static void maxpool_planes(void *arg, size_t lo, size_t hi)
{
    const pool_run *r = arg;
    const pool_priv *p = r->p;
    size_t in_plane = (size_t)p->h * p->w, out_plane = (size_t)p->oh * p->ow;
    for (size_t pl = lo; pl < hi; pl++) {
        const float *xp = r->in + pl * in_plane;
        int *am = r->argmax + pl * out_plane;
        float *y = r->out + pl * out_plane;
        for (int oy = 0; oy < p->oh; oy++)
            for (int ox = 0; ox < p->ow; ox++) {
                int best = argmax_in(xp, p->w, clip(p, oy, ox));
                *am++ = best;
                *y++ = xp[best];
            }
    }
}

static void maxpool_grad_planes(void *arg, size_t lo, size_t hi)
{
    const pool_run *r = arg;
    const pool_priv *p = r->p;
    size_t in_plane = (size_t)p->h * p->w, out_plane = (size_t)p->oh * p->ow;
    for (size_t pl = lo; pl < hi; pl++) {
        float *dxp = r->out + pl * in_plane;
        for (size_t j = 0; j < in_plane; j++) dxp[j] = 0.0f;
        const int *am = r->argmax + pl * out_plane;
        const float *dyp = r->in + pl * out_plane;
        for (size_t q = 0; q < out_plane; q++) dxp[am[q]] += dyp[q];
    }
}

/* Planes per task: about 16K cells of input. */
static size_t plane_grain(const pool_priv *p)
{
    size_t cells = (size_t)p->h * p->w;
    return cells >= 16384 ? 1 : 16384 / cells;
}

static bn_status maxpool_forward(bn_layer *l, const bn_pass *pass)
{
    pool_priv *p = l->priv;
    BN_TRY(reserve_argmax(l, p));
    BN_HOST_RD(x, l->in);
    BN_HOST_WR(y, l->out);
    pool_run r = {p, x, y, p->argmax};
    bn_parallel_ranges((size_t)l->in->n * p->c, plane_grain(p), is_2x2(p) ? maxpool2x2_planes : maxpool_planes, &r);
    return BN_OK;
}

static bn_status maxpool_backward(bn_layer *l, const bn_pass *pass)
{
    pool_priv *p = l->priv;
    if (!l->in_grad) return BN_OK;
    if (p->argmax_cap < bn_blob_count(l->out))
        return bn_error(BN_ERR_INTERNAL, "layer %s: backward before forward", l->name);
    BN_HOST_RD(dy, l->out_grad);
    BN_HOST_WR(dx, l->in_grad);
    pool_run r = {p, dy, dx, p->argmax};
    bn_parallel_ranges((size_t)l->in->n * p->c, plane_grain(p), maxpool_grad_planes, &r);
    return BN_OK;
}

static void avgpool_planes(void *arg, size_t lo, size_t hi)
{
    const pool_run *r = arg;
    const pool_priv *p = r->p;
    size_t in_plane = (size_t)p->h * p->w, out_plane = (size_t)p->oh * p->ow;
    for (size_t pl = lo; pl < hi; pl++) {
        const float *xp = r->in + pl * in_plane;
        float *y = r->out + pl * out_plane;
        for (int oy = 0; oy < p->oh; oy++)
            for (int ox = 0; ox < p->ow; ox++) {
                window w = clip(p, oy, ox);
                double s = 0.0;
                for (int yy = w.y0; yy < w.y1; yy++)
                    for (int xx = w.x0; xx < w.x1; xx++) s += xp[yy * p->w + xx];
                *y++ = (float)(s / ((w.y1 - w.y0) * (w.x1 - w.x0)));
            }
    }
}

/* row[j] += share for j < n; restrict, so that the compiler need not reload the share after each
 * store. */
static void add_share(float *restrict row, float share, int n)
{
    for (int j = 0; j < n; j++) row[j] += share;
}

static void avgpool_grad_planes(void *arg, size_t lo, size_t hi)
{
    const pool_run *r = arg;
    const pool_priv *p = r->p;
    size_t in_plane = (size_t)p->h * p->w, out_plane = (size_t)p->oh * p->ow;
    for (size_t pl = lo; pl < hi; pl++) {
        float *dxp = r->out + pl * in_plane;
        const float *dy = r->in + pl * out_plane;
        for (size_t j = 0; j < in_plane; j++) dxp[j] = 0.0f;
        for (int oy = 0; oy < p->oh; oy++)
            for (int ox = 0; ox < p->ow; ox++) {
                window w = clip(p, oy, ox);
                float share = *dy++ / (float)((w.y1 - w.y0) * (w.x1 - w.x0));
                for (int yy = w.y0; yy < w.y1; yy++) add_share(dxp + yy * p->w + w.x0, share, w.x1 - w.x0);
            }
    }
}

static bn_status avgpool_forward(bn_layer *l, const bn_pass *pass)
{
    const pool_priv *p = l->priv;
    BN_HOST_RD(x, l->in);
    BN_HOST_WR(y, l->out);
    pool_run r = {p, x, y, NULL};
    bn_parallel_ranges((size_t)l->in->n * p->c, plane_grain(p), avgpool_planes, &r);
    return BN_OK;
}

static bn_status avgpool_backward(bn_layer *l, const bn_pass *pass)
{
    const pool_priv *p = l->priv;
    if (!l->in_grad) return BN_OK;
    BN_HOST_RD(dy, l->out_grad);
    BN_HOST_WR(dx, l->in_grad);
    pool_run r = {p, dy, dx, NULL};
    bn_parallel_ranges((size_t)l->in->n * p->c, plane_grain(p), avgpool_grad_planes, &r);
    return BN_OK;
}

static double pool_flops(const bn_layer *l)
{
    const pool_priv *p = l->priv;
    if (p->global) return (double)p->c * p->h * p->w;
    return (double)p->c * p->oh * p->ow * p->size * p->size;
}

static void pool_destroy(bn_layer *l)
{
    pool_priv *p = l->priv;
    if (p) {
        free(p->argmax);
        bn_device_free(p->dev_mask);
    }
    free(p);
    l->priv = NULL;
}

const bn_layer_ops bn_maxpool_ops = {
    .type = "maxpool",
    .help = "maximum over square windows per channel (padding never wins); keys: size "
            "(required), stride (= size), pad (0, < size)",
    .kind = BN_NVTX_LAYER_POOL,
    .graph_safe = 1,
    .beside = bn_layer_beside_always,
    .parse = pool_parse,
    .setup = pool_setup,
    .forward_cpu = maxpool_forward,
    .backward_cpu = maxpool_backward,
    .forward_gpu = BN_GPU(bn_maxpool_forward_gpu),
    .backward_gpu = BN_GPU(bn_maxpool_backward_gpu),
    .flops = pool_flops,
    .destroy = pool_destroy,
    .bf16 = 1,
    .absorbable_as = BN_ABSORB_MAXPOOL,
};

const bn_layer_ops bn_avgpool_ops = {
    .type = "avgpool",
    .help = "mean over square windows per channel, counting only cells inside the input; "
            "keys: size (required), stride (= size), pad (0, < size); or global = 1: the mean of each "
            "whole channel (global average pooling), one output per channel",
    .kind = BN_NVTX_LAYER_POOL,
    .graph_safe = 1,
    .beside = bn_layer_beside_always,
    .parse = pool_parse,
    .setup = pool_setup,
    .forward_cpu = avgpool_forward,
    .backward_cpu = avgpool_backward,
    .forward_gpu = BN_GPU(bn_avgpool_forward_gpu),
    .backward_gpu = BN_GPU(bn_avgpool_backward_gpu),
    .flops = pool_flops,
    .destroy = pool_destroy,
    .bf16 = 1,
};
