/* conv_cpu.c - conv2d's CPU passes: the batch cut into chunks of a few examples, run as tasks
 * of the CPU pool, each chunk multiplied by OpenBLAS in one of two ways.
 *
 * - Shifted products (stride 1, a window wider than one cell): the chunk's input is copied once
 *   into zero-padded planes, each channel's examples one after the other. For a tap (ky, kx) of
 *   the window, the cells it sees at every output position are that padded row read from
 *   offset ky * Wp + kx, where Wp is the padded width: the output is laid on a grid of the
 *   padded width and the taps' products are summed into it, k*k GEMMs over the input channels,
 *   with no column matrix at all. The grid's cells past a row's last output (and between two
 *   examples) are computed and dropped; the method is chosen where they are a minority.
 * - Columns (any stride): each example's windows copied into a column matrix (bn_im2col), the
 *   chunk's examples side by side, one GEMM over every tap at once.
 * - Pointwise (a 1x1 window at stride 1, no padding): an example's input is its own column matrix
 *   and its output the product's, so each example is one GEMM straight from x into y (and from dy
 *   into dx), with no copy.
 *
 * A chunk widens the products to about CHUNK_COLUMNS where an example's output is small (49
 * cells at 7x7) while its buffers stay within a core's cache. The chunks depend on the shapes
 * alone, so the weight gradient (each chunk's product kept apart, then summed in chunk order) is
 * the same for any number of threads. */
#include <cblas.h>
#include <string.h>

#include "conv2d.h"
#include "conv_few.h"
#include "conv_winograd.h"
#include "core/parallel.h"

/* Columns a chunk's product aims at, and the floats one of its buffers may hold (1 MiB). */
#define CHUNK_COLUMNS 1024
#define CHUNK_FLOATS (256 * 1024)
/* The floats the chunks' weight-gradient products may take together (64 MiB). */
#define PARTS_FLOATS (16 * 1024 * 1024)
/* The shifted products need this many input channels (fewer make each tap's GEMM a sliver)
 * and this share of the grid's cells to be outputs. */
#define SHIFTED_MIN_CHANNELS 8
#define SHIFTED_MIN_USEFUL 0.55

/* Each worker's buffers: the columns or padded input; the wide product or output-gradient grid;
 * the padded input gradient. */
enum { SLOT_IN, SLOT_WIDE, SLOT_DX };
/* Shared buffers: the chunks' weight-gradient products; the weights by tap; the chunks' bias
 * gradients (doubles). */
enum { SHARED_PARTS, SHARED_TAPS, SHARED_BIAS };

typedef struct conv_run {
    const bn_conv_geom *g;
    int filters, n, nb, chunks, shifted, relu;
    size_t taps, pos, in_size, out_size;
    size_t hp, wp, img, plane; /* shifted: padded height, width, an example's padded plane, a
                                  channel's row in the chunk's padded input */
    const float *x, *w, *b, *dy, *wt, *relu_y; /* relu_y: the output of a ReLU the forward did */
    const float *const *addends; /* blobs of y's shape the forward adds before the ReLU */
    int num_addends;
    float *y, *dx, *parts;
    double *bias_parts; /* per chunk and filter */
} conv_run;

/* A 1x1 window at stride 1 without padding: an example's input is its own column matrix. */
static int pointwise(const bn_conv_geom *g)
{
    return g->k == 1 && g->stride == 1 && g->pad == 0;
}

static void plan(conv_run *r, const bn_conv_geom *g, int filters, int n)
{
    r->g = g, r->filters = filters, r->n = n;
    r->taps = (size_t)g->c * g->k * g->k, r->pos = (size_t)g->oh * g->ow;
    r->in_size = (size_t)g->c * g->h * g->w, r->out_size = (size_t)filters * r->pos;
    r->hp = (size_t)g->h + 2 * g->pad, r->wp = (size_t)g->w + 2 * g->pad, r->img = r->hp * r->wp;
    r->shifted = g->stride == 1 && !pointwise(g) && g->c >= SHIFTED_MIN_CHANNELS &&
                 (double)r->pos >= SHIFTED_MIN_USEFUL * (double)r->img;
    /* Per example: the columns, or the larger of the padded input and the output grid. */
    size_t grid = r->img, wider = (size_t)(g->c > filters ? g->c : filters);
    size_t step = r->shifted ? grid : r->pos, per = r->shifted ? wider * grid : r->taps * r->pos;
    size_t nb = (CHUNK_COLUMNS + step - 1) / step;
    while (nb > 1 && nb * per > CHUNK_FLOATS) nb--;
    if (nb > (size_t)n) nb = n > 0 ? (size_t)n : 1;
    /* Very many chunks of a large filter bank: fewer, wider chunks keep their products in bounds. */
    size_t weights = (size_t)filters * r->taps;
    size_t most_chunks = PARTS_FLOATS / (weights ? weights : 1);
    if (most_chunks < 1) most_chunks = 1;
    if ((n + nb - 1) / nb > most_chunks) nb = (n + most_chunks - 1) / most_chunks;
    r->nb = (int)nb;
    r->chunks = (int)((n + nb - 1) / nb);
    /* Reads of the last tap run k - 1 cells past the last example's plane. */
    r->plane = (nb * r->img + (size_t)g->k + 15) / 16 * 16;
}

/* The chunk's examples [*i0, *i0 + *cnt) and its product's columns. */
static size_t chunk_span(const conv_run *r, int chunk, int *i0, int *cnt)
{
    *i0 = chunk * r->nb;
    *cnt = r->n - *i0 < r->nb ? r->n - *i0 : r->nb;
    if (r->shifted) return (size_t)(*cnt - 1) * r->img + (size_t)r->g->oh * r->wp;
    return (size_t)*cnt * r->pos;
}

/* The chunk's column matrix. */
static const float *columns(const conv_run *r, int i0, int cnt, size_t cols, int worker)
{
    float *col = bn_cpu_scratch(SLOT_IN, worker);
    for (int j = 0; j < cnt; j++) bn_im2col(r->g, r->x + (size_t)(i0 + j) * r->in_size, col + j * r->pos, cols);
    return col;
}

/* The chunk's input in zero-padded planes: channel c's examples one after the other. */
static const float *padded(const conv_run *r, int i0, int cnt, int worker)
{
    const bn_conv_geom *g = r->g;
    float *xp = bn_cpu_scratch(SLOT_IN, worker);
    memset(xp, 0, (size_t)g->c * r->plane * sizeof *xp);
    for (int c = 0; c < g->c; c++)
        for (int j = 0; j < cnt; j++) {
            const float *src = r->x + (size_t)(i0 + j) * r->in_size + (size_t)c * g->h * g->w;
            float *dst = xp + c * r->plane + j * r->img + g->pad * r->wp + g->pad;
            for (int iy = 0; iy < g->h; iy++) memcpy(dst + iy * r->wp, src + (size_t)iy * g->w, g->w * sizeof *dst);
        }
    return xp;
}

/* Tap t's offset into a padded row. */
static size_t tap_offset(const conv_run *r, int t)
{
    return (size_t)(t / r->g->k) * r->wp + (size_t)(t % r->g->k);
}

/* Rows of a few dozen floats, written with restrict so that the compiler vectorises them: the
 * bias added (and the ReLU), and a gradient read where the ReLU's output is positive. */
static void bias_row(float *restrict dst, const float *restrict src, float bias, int n, int relu)
{
    if (relu)
        for (int i = 0; i < n; i++) {
            float v = src[i] + bias;
            dst[i] = v > 0.0f ? v : 0.0f;
        }
    else
        for (int i = 0; i < n; i++) dst[i] = src[i] + bias;
}

static void bias_in_place(float *restrict v, float bias, int n, int relu)
{
    if (relu)
        for (int i = 0; i < n; i++) {
            float t = v[i] + bias;
            v[i] = t > 0.0f ? t : 0.0f;
        }
    else
        for (int i = 0; i < n; i++) v[i] += bias;
}

static void add_row(float *restrict dst, const float *restrict src, int n)
{
    for (int i = 0; i < n; i++) dst[i] += src[i];
}

static void relu_row(float *restrict dst, int n)
{
    for (int i = 0; i < n; i++) dst[i] = dst[i] > 0.0f ? dst[i] : 0.0f;
}

static void masked_row(float *restrict dst, const float *restrict src, const float *restrict y, int n)
{
    for (int i = 0; i < n; i++) {
        float v = y[i], d = src[i];
        dst[i] = v > 0.0f ? d : 0.0f;
    }
}

/* The product (filters x cols) into y with the bias (and the ReLU where r->relu): row f holds
 * filter f for every example of the chunk, at positions of stride `row` (ow for columns, wp for
 * the grid), `per` apart. */
static void spread(const conv_run *r, const float *wide, size_t cols, int i0, int cnt, size_t per, size_t row)
{
    const int oh = r->g->oh, ow = r->g->ow;
    for (int j = 0; j < cnt; j++) {
        size_t example = (size_t)(i0 + j) * r->out_size;
        float *yi = r->y + example;
        for (int f = 0; f < r->filters; f++)
            for (int oy = 0; oy < oh; oy++) {
                size_t at = f * r->pos + (size_t)oy * ow;
                if (!r->num_addends) {
                    bias_row(yi + at, wide + f * cols + j * per + oy * row, r->b[f], ow, r->relu);
                    continue;
                }
                bias_row(yi + at, wide + f * cols + j * per + oy * row, r->b[f], ow, 0);
                for (int a = 0; a < r->num_addends; a++) add_row(yi + at, r->addends[a] + example + at, ow);
                if (r->relu) relu_row(yi + at, ow);
            }
    }
}

/* A pointwise chunk, example by example: each example's input is its own column matrix and its
 * output the product's, so the product goes straight into y, and the bias, the addends and the
 * ReLU follow in place. */
static void forward_pointwise(const conv_run *r, int i0, int cnt)
{
    const int f_n = r->filters, c_n = r->g->c, pos = (int)r->pos;
    for (int j = 0; j < cnt; j++) {
        size_t example = (size_t)(i0 + j) * r->out_size;
        float *yi = r->y + example;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, f_n, pos, c_n, 1.0f, r->w, c_n,
                    r->x + (size_t)(i0 + j) * r->in_size, pos, 0.0f, yi, pos);
        for (int f = 0; f < f_n; f++) {
            float *row = yi + (size_t)f * pos;
            bias_in_place(row, r->b[f], pos, r->relu && !r->num_addends);
            if (!r->num_addends) continue;
            for (int a = 0; a < r->num_addends; a++) add_row(row, r->addends[a] + example + (size_t)f * pos, pos);
            if (r->relu) relu_row(row, pos);
        }
    }
}

static void forward_chunk(void *p, int chunk, int worker)
{
    const conv_run *r = p;
    int i0, cnt, f_n = r->filters, c_n = r->g->c;
    size_t cols = chunk_span(r, chunk, &i0, &cnt);
    if (pointwise(r->g)) {
        forward_pointwise(r, i0, cnt);
        return;
    }
    float *wide = bn_cpu_scratch(SLOT_WIDE, worker);
    if (r->shifted) {
        const float *xp = padded(r, i0, cnt, worker);
        int taps = r->g->k * r->g->k;
        for (int t = 0; t < taps; t++)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, f_n, (int)cols, c_n, 1.0f,
                        r->wt + (size_t)t * f_n * c_n, c_n, xp + tap_offset(r, t), (int)r->plane, t ? 1.0f : 0.0f,
                        wide, (int)cols);
        spread(r, wide, cols, i0, cnt, r->img, r->wp);
        return;
    }
    const float *col = columns(r, i0, cnt, cols, worker);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, f_n, (int)cols, (int)r->taps, 1.0f, r->w, (int)r->taps, col,
                (int)cols, 0.0f, wide, (int)cols);
    spread(r, wide, cols, i0, cnt, r->pos, (size_t)r->g->ow);
}

/* The sum of a plane: eight running sums the compiler keeps in one vector, added in double. */
static double plane_sum(const float *restrict v, size_t count)
{
    float lane[8] = {0};
    size_t q = 0;
    for (; q + 8 <= count; q += 8)
        for (int k = 0; k < 8; k++) lane[k] += v[q + k];
    double t = 0.0;
    for (int k = 0; k < 8; k++) t += lane[k];
    for (; q < count; q++) t += v[q];
    return t;
}

/* The chunk's bias gradient: the rows of its output-gradient matrix summed (the dropped cells of
 * the grid hold zeros). */
static void chunk_bias_sums(const conv_run *r, int chunk, const float *dyc, size_t cols)
{
    for (int f = 0; f < r->filters; f++)
        r->bias_parts[(size_t)chunk * r->filters + f] = plane_sum(dyc + f * cols, cols);
}

/* The output gradient of the chunk as one matrix of filters x cols: side by side (columns), or
 * on the grid with zeros in its dropped cells (shifted), which so add nothing to the sums; zero
 * too where a ReLU done by the forward pass gave 0. */
static const float *gradient_matrix(const conv_run *r, int i0, int cnt, size_t cols, int worker)
{
    const bn_conv_geom *g = r->g;
    const float *dyc = r->dy + (size_t)i0 * r->out_size;
    if (cnt == 1 && !r->shifted && !r->relu_y) return dyc;
    float *wide = bn_cpu_scratch(SLOT_WIDE, worker);
    if (r->shifted) memset(wide, 0, (size_t)r->filters * cols * sizeof *wide);
    size_t per = r->shifted ? r->img : r->pos, row = r->shifted ? r->wp : (size_t)g->ow;
    const int oh = g->oh, ow = g->ow;
    for (int j = 0; j < cnt; j++)
        for (int f = 0; f < r->filters; f++)
            for (int oy = 0; oy < oh; oy++) {
                size_t at = (size_t)j * r->out_size + f * r->pos + (size_t)oy * ow;
                float *dst = wide + f * cols + j * per + oy * row;
                if (r->relu_y) masked_row(dst, dyc + at, r->relu_y + (size_t)i0 * r->out_size + at, ow);
                else memcpy(dst, dyc + at, ow * sizeof *wide);
            }
    return wide;
}

static void backward_shifted(const conv_run *r, int chunk, int i0, int cnt, size_t cols, int worker)
{
    const bn_conv_geom *g = r->g;
    int f_n = r->filters, c_n = g->c, taps = g->k * g->k;
    const float *xp = padded(r, i0, cnt, worker), *dyg = gradient_matrix(r, i0, cnt, cols, worker);
    chunk_bias_sums(r, chunk, dyg, cols);
    /* Tap t's weight gradient (c x f) lands where the columns' product puts it: row c*taps + t. */
    float *part = r->parts + (size_t)chunk * f_n * r->taps;
    for (int t = 0; t < taps; t++)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, c_n, f_n, (int)cols, 1.0f, xp + tap_offset(r, t),
                    (int)r->plane, dyg, (int)cols, 0.0f, part + (size_t)t * f_n, taps * f_n);
    if (!r->dx) return;
    /* Each tap's input gradient added into the padded planes at the tap's offset. */
    float *dxp = bn_cpu_scratch(SLOT_DX, worker);
    memset(dxp, 0, (size_t)c_n * r->plane * sizeof *dxp);
    for (int t = 0; t < taps; t++)
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, c_n, (int)cols, f_n, 1.0f, r->wt + (size_t)t * f_n * c_n,
                    c_n, dyg, (int)cols, 1.0f, dxp + tap_offset(r, t), (int)r->plane);
    for (int j = 0; j < cnt; j++)
        for (int c = 0; c < c_n; c++) {
            const float *src = dxp + c * r->plane + j * r->img + g->pad * r->wp + g->pad;
            float *dst = r->dx + (size_t)(i0 + j) * r->in_size + (size_t)c * g->h * g->w;
            for (int iy = 0; iy < g->h; iy++) memcpy(dst + (size_t)iy * g->w, src + iy * r->wp, g->w * sizeof *dst);
        }
}

/* A pointwise chunk, example by example: the output gradient read in place (masked into the
 * worker's buffer where the forward did a ReLU), the weight gradient (channels x filters, as the
 * columns' product lays it out) summed over the chunk's examples in order, and the input gradient
 * written straight into dx. */
static void backward_pointwise(const conv_run *r, int chunk, int i0, int cnt, int worker)
{
    const int f_n = r->filters, c_n = r->g->c, pos = (int)r->pos;
    float *part = r->parts + (size_t)chunk * f_n * r->taps;
    double *bias = r->bias_parts + (size_t)chunk * f_n;
    for (int j = 0; j < cnt; j++) {
        const size_t example = (size_t)(i0 + j) * r->out_size;
        const float *dyj = r->dy + example;
        if (r->relu_y) {
            float *masked = bn_cpu_scratch(SLOT_WIDE, worker);
            for (int f = 0; f < f_n; f++)
                masked_row(masked + (size_t)f * pos, dyj + (size_t)f * pos, r->relu_y + example + (size_t)f * pos, pos);
            dyj = masked;
        }
        for (int f = 0; f < f_n; f++) bias[f] = (j ? bias[f] : 0.0) + plane_sum(dyj + (size_t)f * pos, (size_t)pos);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, c_n, f_n, pos, 1.0f, r->x + (size_t)(i0 + j) * r->in_size,
                    pos, dyj, pos, j ? 1.0f : 0.0f, part, f_n);
        if (r->dx)
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, c_n, pos, f_n, 1.0f, r->w, c_n, dyj, pos, 0.0f,
                        r->dx + (size_t)(i0 + j) * r->in_size, pos);
    }
}

static void backward_chunk(void *p, int chunk, int worker)
{
    const conv_run *r = p;
    int i0, cnt, f_n = r->filters;
    size_t cols = chunk_span(r, chunk, &i0, &cnt), pos = r->pos, taps = r->taps;
    if (r->shifted) {
        backward_shifted(r, chunk, i0, cnt, cols, worker);
        return;
    }
    if (pointwise(r->g)) {
        backward_pointwise(r, chunk, i0, cnt, worker);
        return;
    }
    const float *dyc = gradient_matrix(r, i0, cnt, cols, worker);
    chunk_bias_sums(r, chunk, dyc, cols);
    const float *col = columns(r, i0, cnt, cols, worker);
    /* The weight gradient transposed (taps x filters): OpenBLAS runs this product's shape about
     * 1.4 times as fast as filters x taps where there are few filters. */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)taps, f_n, (int)cols, 1.0f, col, (int)cols, dyc,
                (int)cols, 0.0f, r->parts + (size_t)chunk * f_n * taps, f_n);
    if (!r->dx) return;
    /* The gradient of the columns, into the worker's own column buffer (the columns are spent). */
    float *dcol = bn_cpu_scratch(SLOT_IN, worker);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)taps, (int)cols, f_n, 1.0f, r->w, (int)taps, dyc,
                (int)cols, 0.0f, dcol, (int)cols);
    for (int j = 0; j < cnt; j++) {
        float *dxi = r->dx + (size_t)(i0 + j) * r->in_size;
        memset(dxi, 0, r->in_size * sizeof *dxi);
        bn_col2im_add(r->g, dcol + j * pos, cols, dxi);
    }
}

/* A run's buffers: each worker's, and for the shifted products the weights by tap,
 * wt[t][f][c] = w[f][c][ky][kx]. */
static bn_status prepare(conv_run *r)
{
    const bn_conv_geom *g = r->g;
    size_t cols = r->shifted ? (size_t)r->nb * r->img : (size_t)r->nb * r->pos;
    size_t in = r->shifted ? (size_t)g->c * r->plane : r->taps * cols;
    BN_TRY(bn_cpu_scratch_reserve(SLOT_IN, in));
    BN_TRY(bn_cpu_scratch_reserve(SLOT_WIDE, (size_t)r->filters * cols));
    BN_TRY(bn_cpu_scratch_reserve(SLOT_DX, r->shifted && r->dx ? in : 1));
    if (!r->shifted) return BN_OK;
    float *wt = bn_cpu_shared_scratch(SHARED_TAPS, (size_t)r->filters * r->taps);
    if (!wt) return bn_last_status();
    int taps = g->k * g->k;
    for (int f = 0; f < r->filters; f++)
        for (int c = 0; c < g->c; c++)
            for (int t = 0; t < taps; t++)
                wt[((size_t)t * r->filters + f) * g->c + c] = r->w[((size_t)f * g->c + c) * taps + t];
    r->wt = wt;
    return BN_OK;
}

static int exact_only; /* bn_conv2d_cpu_exact */

void bn_conv2d_cpu_exact(int on)
{
    exact_only = on;
}

/* Whether a pass takes the Winograd path. */
static int winograd(const bn_conv_geom *g, int filters)
{
    return !exact_only && bn_winograd_fits(g, filters);
}

bn_status bn_conv2d_cpu_forward(const bn_conv_geom *g, int filters, int n, const float *x, const float *w,
                                const float *b, float *y, int relu)
{
    return bn_conv2d_cpu_forward_sum(g, filters, n, x, w, b, y, relu, NULL, 0);
}

bn_status bn_conv2d_cpu_forward_sum(const bn_conv_geom *g, int filters, int n, const float *x, const float *w,
                                    const float *b, float *y, int relu, const float *const *addends,
                                    int num_addends)
{
    conv_run r = {0};
    plan(&r, g, filters, n);
    r.x = x, r.w = w, r.b = b, r.y = y, r.relu = relu, r.addends = addends, r.num_addends = num_addends;
    if (n == 0) return BN_OK;
    bn_cpu_lock();
    bn_status st;
    if (winograd(g, filters)) st = bn_winograd_forward(g, filters, n, x, w, b, y, relu, addends, num_addends);
    else if (bn_conv_few_fits(g)) st = bn_conv_few_forward(g, filters, n, x, w, b, y, relu, addends, num_addends);
    else if ((st = prepare(&r)) == BN_OK) bn_parallel_run(r.chunks, forward_chunk, &r);
    bn_cpu_unlock();
    return st;
}

typedef struct sums {
    const conv_run *r;
    float *dw;
} sums;

/* The chunks' products (each taps x filters) added into the first's in chunk order, over [lo, hi)
 * of their own layout, which is read in order. Summed for dw's order instead, each value read was
 * a cache line of its own: a fifth of dcgan_disc's CPU step (version 93). */
static void sum_parts(void *p, size_t lo, size_t hi)
{
    const sums *s = p;
    const size_t weights = (size_t)s->r->filters * s->r->taps;
    float *restrict first = s->r->parts;
    for (int c = 1; c < s->r->chunks; c++) {
        const float *restrict part = s->r->parts + c * weights;
        for (size_t e = lo; e < hi; e++) first[e] += part[e];
    }
}

/* dw (filters x taps) += the summed products (taps x filters), filters [lo, hi) in blocks of 16:
 * each line of the sums read serves 16 rows of dw. */
static void add_transposed(void *p, size_t lo, size_t hi)
{
    const sums *s = p;
    const size_t filters = (size_t)s->r->filters, taps = s->r->taps;
    const float *sum = s->r->parts;
    for (size_t f0 = lo; f0 < hi; f0 += 16) {
        const size_t f1 = f0 + 16 < hi ? f0 + 16 : hi;
        for (size_t t = 0; t < taps; t++)
            for (size_t f = f0; f < f1; f++) s->dw[f * taps + t] += sum[t * filters + f];
    }
}

typedef struct bias_sums {
    const double *parts;
    int chunks, filters;
    float *db;
} bias_sums;

static void bias_range(void *p, size_t lo, size_t hi)
{
    const bias_sums *s = p;
    for (size_t f = lo; f < hi; f++) {
        double t = 0.0;
        for (int c = 0; c < s->chunks; c++) t += s->parts[(size_t)c * s->filters + f];
        s->db[f] += (float)t;
    }
}

void bn_conv2d_cpu_bias_grad(const double *parts, int chunks, int filters, float *db)
{
    bias_sums s = {parts, chunks, filters, db};
    bn_parallel_ranges((size_t)filters, 1, bias_range, &s);
}

bn_status bn_conv2d_cpu_backward(const bn_conv_geom *g, int filters, int n, const float *x, const float *w,
                                 const float *dy, const float *relu_y, float *dx, float *dw, float *db)
{
    conv_run r = {0};
    plan(&r, g, filters, n);
    r.x = x, r.w = w, r.dy = dy, r.dx = dx, r.relu_y = relu_y;
    if (n == 0) return BN_OK;
    bn_cpu_lock();
    if (winograd(g, filters)) {
        bn_status st = bn_winograd_backward(g, filters, n, x, w, dy, relu_y, dx, dw, db);
        bn_cpu_unlock();
        return st;
    }
    bn_status st = prepare(&r);
    size_t weights = (size_t)filters * r.taps;
    if (st == BN_OK && !(r.parts = bn_cpu_shared_scratch(SHARED_PARTS, weights * r.chunks))) st = bn_last_status();
    /* Doubles, in a buffer of floats twice their count (realloc's alignment serves either). */
    float *bias = st == BN_OK ? bn_cpu_shared_scratch(SHARED_BIAS, 2 * (size_t)filters * r.chunks) : NULL;
    if (st == BN_OK && !bias) st = bn_last_status();
    r.bias_parts = (double *)bias;
    if (st == BN_OK) {
        bn_parallel_run(r.chunks, backward_chunk, &r);
        sums s = {&r, dw};
        bn_parallel_ranges(weights, 4096, sum_parts, &s);
        bn_parallel_ranges((size_t)filters, 16, add_transposed, &s);
        bn_conv2d_cpu_bias_grad(r.bias_parts, r.chunks, filters, db);
    }
    bn_cpu_unlock();
    return st;
}
