/* conv_cpu.c - conv2d's CPU passes: the batch cut into chunks of a few examples, each chunk's
 * columns side by side in one column matrix (bn_im2col with a row length of the chunk's
 * positions), one GEMM per chunk, the chunks run as tasks of the CPU pool.
 *
 * One example's positions make a thin product where the output is small (49 columns at 7x7);
 * a chunk widens it to about CHUNK_COLUMNS while its column matrix stays within a core's
 * cache. The chunk size depends on the shapes alone, so the weight gradient (each chunk's
 * product kept apart, then summed in chunk order) is the same for any number of threads. */
#include <cblas.h>
#include <string.h>

#include "conv2d.h"
#include "core/parallel.h"

/* Columns a chunk's product aims at, and the floats its column matrix may hold (1 MiB). */
#define CHUNK_COLUMNS 1024
#define CHUNK_COL_FLOATS (256 * 1024)
/* The floats the chunks' weight-gradient products may take together (64 MiB). */
#define PARTS_FLOATS (16 * 1024 * 1024)

enum { SLOT_COL, SLOT_WIDE };

typedef struct conv_run {
    const bn_conv_geom *g;
    int filters, n, nb, chunks;
    size_t taps, pos, in_size, out_size;
    const float *x, *w, *b, *dy;
    float *y, *dx, *parts;
} conv_run;

static void plan(conv_run *r, const bn_conv_geom *g, int filters, int n)
{
    r->g = g, r->filters = filters, r->n = n;
    r->taps = (size_t)g->c * g->k * g->k, r->pos = (size_t)g->oh * g->ow;
    r->in_size = (size_t)g->c * g->h * g->w, r->out_size = (size_t)filters * r->pos;
    size_t nb = (CHUNK_COLUMNS + r->pos - 1) / r->pos;
    while (nb > 1 && nb * r->taps * r->pos > CHUNK_COL_FLOATS) nb--;
    if (nb > (size_t)n) nb = n > 0 ? (size_t)n : 1;
    /* Very many chunks of a large filter bank: fewer, wider chunks keep their products in bounds. */
    size_t weights = (size_t)filters * r->taps;
    size_t most_chunks = PARTS_FLOATS / (weights ? weights : 1);
    if (most_chunks < 1) most_chunks = 1;
    if ((n + nb - 1) / nb > most_chunks) nb = (n + most_chunks - 1) / most_chunks;
    r->nb = (int)nb;
    r->chunks = (int)((n + nb - 1) / nb);
}

/* The chunk's examples [*i0, *i0 + *cnt) and its columns. */
static size_t chunk_span(const conv_run *r, int chunk, int *i0, int *cnt)
{
    *i0 = chunk * r->nb;
    *cnt = r->n - *i0 < r->nb ? r->n - *i0 : r->nb;
    return (size_t)*cnt * r->pos;
}

/* A 1x1 window at stride 1 without padding: an example's input is its own column matrix. */
static int pointwise(const bn_conv_geom *g)
{
    return g->k == 1 && g->stride == 1 && g->pad == 0;
}

/* The chunk's column matrix: the examples' input itself where one pointwise example is all. */
static const float *columns(const conv_run *r, int i0, int cnt, size_t cols, int worker)
{
    if (cnt == 1 && pointwise(r->g)) return r->x + (size_t)i0 * r->in_size;
    float *col = bn_cpu_scratch(SLOT_COL, worker);
    for (int j = 0; j < cnt; j++) bn_im2col(r->g, r->x + (size_t)(i0 + j) * r->in_size, col + j * r->pos, cols);
    return col;
}

static void forward_chunk(void *p, int chunk, int worker)
{
    const conv_run *r = p;
    int i0, cnt, f_n = r->filters;
    size_t cols = chunk_span(r, chunk, &i0, &cnt), pos = r->pos;
    const float *col = columns(r, i0, cnt, cols, worker);
    /* One example's product lands in its output; a chunk's in the wide buffer, whose row f holds
     * filter f for every example of the chunk. Either way the bias is added after the product. */
    float *wide = cnt == 1 ? r->y + (size_t)i0 * r->out_size : bn_cpu_scratch(SLOT_WIDE, worker);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, f_n, (int)cols, (int)r->taps, 1.0f, r->w, (int)r->taps, col,
                (int)cols, 0.0f, wide, (int)cols);
    for (int j = 0; j < cnt; j++) {
        float *yi = r->y + (size_t)(i0 + j) * r->out_size;
        for (int f = 0; f < f_n; f++) {
            const float *src = wide + f * cols + j * pos;
            float bias = r->b[f], *dst = yi + f * pos;
            for (size_t q = 0; q < pos; q++) dst[q] = src[q] + bias;
        }
    }
}

/* Scratch for a run's tasks: each worker's column matrix and wide product. */
static bn_status reserve(const conv_run *r, int need_wide)
{
    size_t cols = (size_t)r->nb * r->pos;
    BN_TRY(bn_cpu_scratch_reserve(SLOT_COL, r->taps * cols));
    size_t wide = (size_t)r->filters * cols;
    return bn_cpu_scratch_reserve(SLOT_WIDE, need_wide && r->nb > 1 ? wide : 1);
}

bn_status bn_conv2d_cpu_forward(const bn_conv_geom *g, int filters, int n, const float *x, const float *w,
                                const float *b, float *y)
{
    conv_run r = {0};
    plan(&r, g, filters, n);
    r.x = x, r.w = w, r.b = b, r.y = y;
    bn_cpu_lock();
    bn_status st = reserve(&r, 1);
    if (st == BN_OK) bn_parallel_run(r.chunks, forward_chunk, &r);
    bn_cpu_unlock();
    return st;
}

static void backward_chunk(void *p, int chunk, int worker)
{
    const conv_run *r = p;
    int i0, cnt, f_n = r->filters;
    size_t cols = chunk_span(r, chunk, &i0, &cnt), pos = r->pos, taps = r->taps;
    /* The chunk's output gradient as one matrix of filters x columns. */
    const float *dyc = r->dy + (size_t)i0 * r->out_size;
    if (cnt > 1) {
        float *wide = bn_cpu_scratch(SLOT_WIDE, worker);
        for (int j = 0; j < cnt; j++)
            for (int f = 0; f < f_n; f++)
                memcpy(wide + f * cols + j * pos, dyc + (size_t)j * r->out_size + f * pos, pos * sizeof *wide);
        dyc = wide;
    }
    const float *col = columns(r, i0, cnt, cols, worker);
    /* The weight gradient transposed (taps x filters): OpenBLAS runs this product's shape about
     * 1.4 times as fast as filters x taps where there are few filters. */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)taps, f_n, (int)cols, 1.0f, col, (int)cols, dyc,
                (int)cols, 0.0f, r->parts + (size_t)chunk * f_n * taps, f_n);
    if (!r->dx) return;
    /* The gradient of the columns, into the worker's own column buffer (the columns are spent). */
    float *dcol = bn_cpu_scratch(SLOT_COL, worker);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)taps, (int)cols, f_n, 1.0f, r->w, (int)taps, dyc,
                (int)cols, 0.0f, dcol, (int)cols);
    for (int j = 0; j < cnt; j++) {
        float *dxi = r->dx + (size_t)(i0 + j) * r->in_size;
        memset(dxi, 0, r->in_size * sizeof *dxi);
        bn_col2im_add(r->g, dcol + j * pos, cols, dxi);
    }
}

typedef struct sums {
    const conv_run *r;
    float *dw, *db;
} sums;

/* dw += the chunks' products (each taps x filters), added in chunk order. */
static void sum_parts(void *p, size_t lo, size_t hi)
{
    const sums *s = p;
    size_t filters = (size_t)s->r->filters, taps = s->r->taps, weights = filters * taps;
    for (size_t e = lo; e < hi; e++) {
        size_t at = (e % taps) * filters + e / taps;
        float t = 0.0f;
        for (int c = 0; c < s->r->chunks; c++) t += s->r->parts[c * weights + at];
        s->dw[e] += t;
    }
}

/* The sum of a plane: eight running sums the compiler keeps in one vector, added in double. */
static double plane_sum(const float *v, size_t count)
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

/* db[f] += filter f's output gradient summed over positions and examples. */
static void bias_grad(void *p, size_t lo, size_t hi)
{
    const sums *s = p;
    const conv_run *r = s->r;
    for (size_t f = lo; f < hi; f++) {
        double t = 0.0;
        for (int i = 0; i < r->n; i++) t += plane_sum(r->dy + (size_t)i * r->out_size + f * r->pos, r->pos);
        s->db[f] += (float)t;
    }
}

bn_status bn_conv2d_cpu_backward(const bn_conv_geom *g, int filters, int n, const float *x, const float *w,
                                 const float *dy, float *dx, float *dw, float *db)
{
    conv_run r = {0};
    plan(&r, g, filters, n);
    r.x = x, r.w = w, r.dy = dy, r.dx = dx;
    if (n == 0) return BN_OK;
    bn_cpu_lock();
    bn_status st = reserve(&r, 1);
    size_t weights = (size_t)filters * r.taps;
    if (st == BN_OK && !(r.parts = bn_cpu_shared_scratch(weights * r.chunks))) st = bn_last_status();
    if (st == BN_OK) {
        bn_parallel_run(r.chunks, backward_chunk, &r);
        sums s = {&r, dw, db};
        bn_parallel_ranges(weights, 4096, sum_parts, &s);
        bn_parallel_ranges((size_t)filters, 1, bias_grad, &s);
    }
    bn_cpu_unlock();
    return st;
}
