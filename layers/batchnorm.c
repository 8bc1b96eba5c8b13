/* batchnorm.c - batch normalization (Ioffe and Szegedy): keys, shapes and the CPU path. */
#include <math.h>
#include <stdlib.h>

#include "batchnorm.h"
#include "core/parallel.h"
#include "layers.h"

enum { P_WEIGHT, P_BIAS };
enum { B_MEAN, B_VAR };

static bn_status batchnorm_parse(bn_layer *l, bn_options *o)
{
    batchnorm_priv b = {0};
    BN_TRY(bn_opt_float(o, "momentum", 0.1, 0.0, 1.0, &b.momentum));
    BN_TRY(bn_opt_float(o, "eps", 1e-5, 1e-12, 1.0, &b.eps));
    batchnorm_priv *q = malloc(sizeof *q);
    if (!q) return bn_error(BN_ERR_NOMEM, "layer %s: out of host memory", l->name);
    *q = b;
    l->priv = q;
    return BN_OK;
}

static bn_status batchnorm_setup(bn_layer *l, bn_shape in, bn_shape *out)
{
    batchnorm_priv *b = l->priv;
    b->channels = in.c;
    b->plane = in.h * in.w;
    free(b->mean);
    free(b->inv_std);
    b->mean = malloc((size_t)in.c * sizeof *b->mean);
    b->inv_std = malloc((size_t)in.c * sizeof *b->inv_std);
    if (!b->mean || !b->inv_std) return bn_error(BN_ERR_NOMEM, "layer %s: out of host memory", l->name);
    if (bn_layer_add_param(l, "weight", 1, in.c, 1, 1, BN_INIT_CONSTANT, in.c, in.c) != P_WEIGHT ||
        bn_layer_add_param(l, "bias", 1, in.c, 1, 1, BN_INIT_ZERO, in.c, in.c) != P_BIAS ||
        bn_layer_add_buffer(l, "running_mean", 1, in.c, 1, 1, 0.0f) != B_MEAN ||
        bn_layer_add_buffer(l, "running_var", 1, in.c, 1, 1, 1.0f) != B_VAR)
        return bn_last_status();
    l->params[P_WEIGHT].init_value = 1.0f;
    bn_param_mark_bias(l, P_BIAS);
    *out = in;
    return BN_OK;
}

/* Element k of channel c, example n. */
#define AT(v, n, c) ((v) + ((size_t)(n) * b->channels + (size_t)(c)) * (size_t)b->plane)

/* A channel's sums run over LANES interleaved partial sums, added at the end in a fixed order:
 * independent adds that the compiler vectorises where one running sum would wait on each add
 * before it. The order depends on the plane's size alone. */
#define LANES 8
_Static_assert(LANES == 8, "lanes_total adds eight lanes");

static double lanes_total(const double *acc)
{
    double t[LANES / 2];
    for (int j = 0; j < LANES / 2; j++) t[j] = acc[j] + acc[j + LANES / 2];
    return (t[0] + t[2]) + (t[1] + t[3]);
}

/* acc[j] += v[k] for the plane's k = j (mod LANES). */
static void add_plane(double *restrict acc, const float *restrict v, int plane)
{
    int k = 0;
    for (; k + LANES <= plane; k += LANES)
        for (int j = 0; j < LANES; j++) acc[j] += v[k + j];
    for (; k < plane; k++) acc[k % LANES] += v[k];
}

/* acc[j] += (v[k] - m)^2, in the same lanes. */
static void add_squares(double *restrict acc, const float *restrict v, double m, int plane)
{
    int k = 0;
    for (; k + LANES <= plane; k += LANES)
        for (int j = 0; j < LANES; j++) {
            double d = v[k + j] - m;
            acc[j] += d * d;
        }
    for (; k < plane; k++) {
        double d = v[k] - m;
        acc[k % LANES] += d * d;
    }
}

/* y = x * scale + shift over one plane. */
static void scale_plane(float *restrict y, const float *restrict x, float scale, float shift, int plane)
{
    for (int k = 0; k < plane; k++) y[k] = x[k] * scale + shift;
}

/* A pass over channels, for the pool's ranges: each task owns whole channels, their sums, running
 * averages and parameter gradients, so nothing it adds depends on how channels were cut. */
typedef struct bn_run {
    batchnorm_priv *b;
    int n, train;
    const float *x, *w, *bias, *dy, *rm, *rv; /* rm, rv: the running averages as they stand */
    float *y, *rm_out, *rv_out, *dx, *dw, *db;
} bn_run;

static void forward_channels(void *arg, size_t lo, size_t hi)
{
    const bn_run *r = arg;
    batchnorm_priv *b = r->b;
    int n = r->n;
    size_t count = (size_t)n * b->plane;
    for (size_t c = lo; c < hi; c++) {
        float mean, inv_std;
        if (r->train) {
            double acc[LANES] = {0}, sq[LANES] = {0};
            for (int e = 0; e < n; e++) add_plane(acc, AT(r->x, e, c), b->plane);
            double m = lanes_total(acc) / (double)count;
            for (int e = 0; e < n; e++) add_squares(sq, AT(r->x, e, c), m, b->plane);
            double sum_sq = lanes_total(sq), var = sum_sq / (double)count;
            mean = (float)m;
            inv_std = (float)(1.0 / sqrt(var + b->eps));
            double unbiased = count > 1 ? sum_sq / (double)(count - 1) : var;
            r->rm_out[c] = (float)((1.0 - b->momentum) * r->rm[c] + b->momentum * m);
            r->rv_out[c] = (float)((1.0 - b->momentum) * r->rv[c] + b->momentum * unbiased);
            b->mean[c] = mean;
            b->inv_std[c] = inv_std;
        } else {
            mean = r->rm[c];
            inv_std = (float)(1.0 / sqrt((double)r->rv[c] + b->eps));
        }
        float scale = r->w[c] * inv_std, shift = r->bias[c] - mean * scale;
        for (int e = 0; e < n; e++) scale_plane(AT(r->y, e, c), AT(r->x, e, c), scale, shift, b->plane);
    }
}

/* Channels per task: about 16K elements, at least one channel. */
static size_t channel_grain(const batchnorm_priv *b, int n)
{
    size_t per = (size_t)n * b->plane;
    return per >= 16384 ? 1 : 16384 / per;
}

static bn_status batchnorm_forward(bn_layer *l, const bn_pass *p)
{
    batchnorm_priv *b = l->priv;
    BN_HOST_RD(x, l->in);
    BN_HOST_RD(w, l->params[P_WEIGHT].value);
    BN_HOST_RD(bias, l->params[P_BIAS].value);
    BN_HOST_WR(rm, l->buffers[B_MEAN].value);
    BN_HOST_WR(rv, l->buffers[B_VAR].value);
    BN_HOST_WR(y, l->out);
    b->trained = p->train;
    bn_run r = {b, l->in->n, p->train, x, w, bias, NULL, rm, rv, y, rm, rv, NULL, NULL, NULL};
    bn_parallel_ranges((size_t)b->channels, channel_grain(b, r.n), forward_channels, &r);
    return BN_OK;
}

/* acc_dy[j] += dy[k], acc_dy_xhat[j] += dy[k] * xhat[k], in the lanes of add_plane. */
static void add_grad_plane(double *restrict acc_dy, double *restrict acc_dy_xhat, const float *restrict dy,
                           const float *restrict x, float mean, float inv_std, int plane)
{
    int k = 0;
    for (; k + LANES <= plane; k += LANES)
        for (int j = 0; j < LANES; j++) {
            float g = dy[k + j], xhat = (x[k + j] - mean) * inv_std;
            acc_dy[j] += g;
            acc_dy_xhat[j] += (double)g * xhat;
        }
    for (; k < plane; k++) {
        float g = dy[k], xhat = (x[k] - mean) * inv_std;
        acc_dy[k % LANES] += g;
        acc_dy_xhat[k % LANES] += (double)g * xhat;
    }
}

/* dx = scale * (dy - mean_dy - xhat * mean_dy_xhat) over one plane. */
static void grad_plane(float *restrict dx, const float *restrict dy, const float *restrict x, float mean,
                       float inv_std, float scale, float mean_dy, float mean_dy_xhat, int plane)
{
    for (int k = 0; k < plane; k++) {
        float xhat = (x[k] - mean) * inv_std;
        dx[k] = scale * (dy[k] - mean_dy - xhat * mean_dy_xhat);
    }
}

static void backward_channels(void *arg, size_t lo, size_t hi)
{
    const bn_run *r = arg;
    const batchnorm_priv *b = r->b;
    int n = r->n;
    double count = (double)n * b->plane;
    for (size_t c = lo; c < hi; c++) {
        float mean = b->trained ? b->mean[c] : r->rm[c];
        float inv_std = b->trained ? b->inv_std[c] : (float)(1.0 / sqrt((double)r->rv[c] + b->eps));
        double acc_dy[LANES] = {0}, acc_dy_xhat[LANES] = {0};
        for (int e = 0; e < n; e++)
            add_grad_plane(acc_dy, acc_dy_xhat, AT(r->dy, e, c), AT(r->x, e, c), mean, inv_std, b->plane);
        double sum_dy = lanes_total(acc_dy), sum_dy_xhat = lanes_total(acc_dy_xhat);
        r->dw[c] += (float)sum_dy_xhat;
        r->db[c] += (float)sum_dy;
        if (!r->dx) continue;
        float scale = r->w[c] * inv_std;
        float mean_dy = b->trained ? (float)(sum_dy / count) : 0.0f;
        float mean_dy_xhat = b->trained ? (float)(sum_dy_xhat / count) : 0.0f;
        for (int e = 0; e < n; e++)
            grad_plane(AT(r->dx, e, c), AT(r->dy, e, c), AT(r->x, e, c), mean, inv_std, scale, mean_dy, mean_dy_xhat,
                       b->plane);
    }
}

/* After a training forward: the gradient through the batch's statistics; after an evaluation
 * forward: through the fixed running ones (a plain per-channel scale). */
static bn_status batchnorm_backward(bn_layer *l, const bn_pass *p)
{
    batchnorm_priv *b = l->priv;
    BN_HOST_RD(x, l->in);
    BN_HOST_RD(dy, l->out_grad);
    BN_HOST_RD(w, l->params[P_WEIGHT].value);
    BN_HOST_RD(rv, l->buffers[B_VAR].value);
    BN_HOST_RD(rm, l->buffers[B_MEAN].value);
    BN_HOST_WR(dw, l->params[P_WEIGHT].grad);
    BN_HOST_WR(db, l->params[P_BIAS].grad);
    float *dx = NULL;
    if (l->in_grad && !(dx = bn_blob_host_wr(l->in_grad))) return bn_last_status();
    bn_run r = {b, l->in->n, 0, x, w, NULL, dy, rm, rv, NULL, NULL, NULL, dx, dw, db};
    bn_parallel_ranges((size_t)b->channels, channel_grain(b, r.n), backward_channels, &r);
    return BN_OK;
}

/* Normalize, scale and shift: about 4 operations per element. */
static double batchnorm_flops(const bn_layer *l)
{
    const batchnorm_priv *b = l->priv;
    return 4.0 * b->channels * b->plane;
}

static void batchnorm_destroy(bn_layer *l)
{
    batchnorm_priv *b = l->priv;
    if (b) {
#ifdef BN_WITH_CUDA
        bn_batchnorm_gpu_release(b);
#endif
        free(b->mean);
        free(b->inv_std);
    }
    free(b);
    l->priv = NULL;
}

const bn_layer_ops bn_batchnorm_ops = {
    .type = "batchnorm",
    .help = "batch normalization per channel (per feature after a dense layer): batch statistics in "
            "training, running averages in evaluation, learnable weight and bias; keys: momentum (0.1), "
            "eps (1e-5)",
    .kind = BN_NVTX_LAYER_OTHER,
    .graph_safe = 1,
    .beside = bn_layer_beside_always,
    .parse = batchnorm_parse,
    .setup = batchnorm_setup,
    .forward_cpu = batchnorm_forward,
    .backward_cpu = batchnorm_backward,
    .forward_gpu = BN_GPU(bn_batchnorm_forward_gpu),
    .backward_gpu = BN_GPU(bn_batchnorm_backward_gpu),
    .fuse_gpu = BN_GPU(bn_batchnorm_fuse_relu),
    .absorbs = BN_ABSORB_RELU,
    .sums_grad_part = 1, /* its GPU backward pass adds a second reader's part as it loads dy */
    .relu_in_place = 1, /* its backward pass does not read its output */
    .act_out_slices = 1, /* normalize writes a fused ReLU's output at its stride */
    .in_slices = 1,      /* every GPU kernel reads x at its stride (bn_args.x_gap) */
    .flops = batchnorm_flops,
    .destroy = batchnorm_destroy,
    .bf16 = 1,
};
