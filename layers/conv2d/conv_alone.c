/* conv_alone.c - one runner of conv2d's passes alone on a shape, checked against the CPU
 * reference and timed (conv_alone.h). Host code over the device API of core/device.h and the
 * families' face; cuDNN's side is conv_alone_gpu.cu. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "conv2d.h"
#include "conv_alone.h"
#include "core/rng.h"

double bn_conv_alone_tolerance(const bn_conv_shape *s)
{
    return s->tf32 ? 1e-2 : 1e-4;
}

/* The host and device copies of every buffer a pass reads or writes. */
typedef struct buffers {
    size_t in, out, wts, pooled;           /* floats */
    size_t parts, scratch;                 /* bytes: the filter pass's partial sums (in 256-byte
                                              units), then the other passes' scratch */
    float *x, *w, *b, *dy, *pdy;           /* host inputs (pdy: the pooled gradient) */
    unsigned char *mask;                   /* host argmax mask of the pooled cells */
    float *y, *dx, *dw, *db;               /* host reference outputs */
    float *got;                            /* host copy of a device output */
    float *dev[8];                         /* x, w, b, dy, y/dx, dw, db, pooled dy and mask */
    void *parts_dev;                       /* the family's partial sums and scratch, zeroed */
} buffers;

/* The device buffers, by place in buffers.dev. */
enum { D_X, D_W, D_B, D_DY, D_OUT, D_DW, D_DB, D_POOLED };

static void fill(bn_rng *rng, float *v, size_t n)
{
    for (size_t i = 0; i < n; i++) v[i] = (float)(2.0 * bn_rng_uniform(rng) - 1.0);
}

static void free_buffers(buffers *m)
{
    free(m->x), free(m->w), free(m->b), free(m->dy), free(m->pdy), free(m->mask);
    free(m->y), free(m->dx), free(m->dw), free(m->db), free(m->got);
    for (int i = 0; i < 8; i++) bn_device_free(m->dev[i]);
    bn_device_free(m->parts_dev);
}

/* Random inputs, and for a pooled gradient (pooled) the full gradient it stands for: the pooled
 * value at each window's argmax, zero at its other cells and in a last odd row or column. */
static bn_status make_inputs(const bn_conv_shape *s, int pooled, uint64_t seed, buffers *m)
{
    const bn_conv_geom *g = &s->g;
    const int ph = g->oh / 2, pw = g->ow / 2;
    m->in = (size_t)s->n * g->c * g->h * g->w;
    m->out = (size_t)s->n * s->filters * g->oh * g->ow;
    m->wts = (size_t)s->filters * g->c * g->k * g->k;
    m->pooled = pooled ? (size_t)s->n * s->filters * ph * pw : 0;
    m->x = malloc(m->in * sizeof(float)), m->w = malloc(m->wts * sizeof(float));
    m->b = malloc((size_t)s->filters * sizeof(float)), m->dy = calloc(m->out, sizeof(float));
    m->y = malloc(m->out * sizeof(float)), m->dx = malloc(m->in * sizeof(float));
    m->dw = calloc(m->wts, sizeof(float)), m->db = calloc((size_t)s->filters, sizeof(float));
    size_t most = m->in > m->out ? m->in : m->out;
    m->got = malloc((most > m->wts ? most : m->wts) * sizeof(float));
    m->pdy = malloc((m->pooled + 1) * sizeof(float)), m->mask = malloc(m->pooled + 1);
    if (!m->x || !m->w || !m->b || !m->dy || !m->y || !m->dx || !m->dw || !m->db || !m->got || !m->pdy ||
        !m->mask)
        return bn_error(BN_ERR_NOMEM, "conv-families: out of host memory for %zu inputs", m->in);
    bn_rng rng;
    bn_rng_seed(&rng, seed, 7);
    fill(&rng, m->x, m->in);
    fill(&rng, m->w, m->wts);
    fill(&rng, m->b, (size_t)s->filters);
    if (!pooled) {
        fill(&rng, m->dy, m->out);
        return BN_OK;
    }
    fill(&rng, m->pdy, m->pooled);
    for (size_t i = 0; i < m->pooled; i++) {
        m->mask[i] = (unsigned char)bn_rng_below(&rng, 4);
        const size_t plane = i / ((size_t)ph * pw), cell = i % ((size_t)ph * pw);
        const int py = (int)(cell / pw), px = (int)(cell % pw);
        const int y = 2 * py + m->mask[i] / 2, x = 2 * px + m->mask[i] % 2;
        m->dy[plane * g->oh * g->ow + (size_t)y * g->ow + x] = m->pdy[i];
    }
    return BN_OK;
}

/* Copies the inputs to the device and gives the outputs room there. */
static bn_status to_device(const bn_conv_shape *s, buffers *m)
{
    const size_t sizes[8] = {m->in, m->wts, (size_t)s->filters, m->out, m->in > m->out ? m->in : m->out, m->wts,
                             (size_t)s->filters, m->pooled * 2 + 1};
    for (int i = 0; i < 8; i++) BN_TRY(bn_device_alloc((void **)&m->dev[i], sizes[i] * sizeof(float)));
    BN_TRY(bn_device_h2d(m->dev[D_X], m->x, m->in * sizeof(float)));
    BN_TRY(bn_device_h2d(m->dev[D_W], m->w, m->wts * sizeof(float)));
    BN_TRY(bn_device_h2d(m->dev[D_B], m->b, (size_t)s->filters * sizeof(float)));
    BN_TRY(bn_device_h2d(m->dev[D_DY], m->dy, m->out * sizeof(float)));
    BN_TRY(bn_device_zero(m->dev[D_DW], m->wts * sizeof(float)));
    BN_TRY(bn_device_zero(m->dev[D_DB], (size_t)s->filters * sizeof(float)));
    if (!m->pooled) return BN_OK;
    BN_TRY(bn_device_h2d(m->dev[D_POOLED], m->pdy, m->pooled * sizeof(float)));
    return bn_device_h2d(m->dev[D_POOLED] + m->pooled, m->mask, m->pooled);
}

/* max |got - want| / max |want| over n floats, got copied from the device. */
static bn_status relative_error(const float *dev, const float *want, size_t n, float *got, double *err)
{
    BN_TRY(bn_device_d2h(got, dev, n * sizeof(float)));
    double diff = 0.0, scale = 0.0;
    for (size_t i = 0; i < n; i++) {
        const double d = fabs((double)got[i] - want[i]);
        if (!(d <= diff)) diff = d; /* a NaN is the largest error */
        if (fabs(want[i]) > scale) scale = fabs(want[i]);
    }
    *err = diff / (scale > 0.0 ? scale : 1.0);
    return BN_OK;
}

/* One call of the runner on the device buffers. */
typedef struct runner {
    const bn_conv_family *f;
    bn_conv_family_plan plan;
    bn_conv_cudnn_alone *cudnn;
    const bn_conv_shape *s;
    int pass;
    int beside; /* a backward pass in its shape beside the other (bn_conv_io.beside) */
    bn_conv_io io;
} runner;

static bn_status run_once(runner *rn, bn_ctx *ctx)
{
    if (rn->f) return rn->f->run(&rn->plan, rn->s, rn->pass, ctx->stream, &rn->io);
    return bn_conv_cudnn_alone_run(rn->cudnn, ctx, &rn->io);
}

/* The runner's buffers for its pass. */
static void bind(runner *rn, const buffers *m, const bn_pooled_dy *pd)
{
    bn_conv_io *io = &rn->io;
    memset(io, 0, sizeof *io);
    io->x = m->dev[D_X], io->w = m->dev[D_W], io->b = m->dev[D_B], io->dy = m->dev[D_DY];
    io->y = io->dx = m->dev[D_OUT];
    io->dw = m->dev[D_DW], io->db = m->dev[D_DB], io->parts = m->parts_dev;
    io->scratch = m->scratch ? (char *)m->parts_dev + m->parts : NULL;
    io->beside = rn->beside && rn->pass != BN_CONV_FORWARD;
    if (m->pooled) io->pooled_dy = pd;
}

/* The pass once, compared with the CPU's. */
static bn_status check(runner *rn, bn_ctx *ctx, buffers *m, bn_conv_alone_result *r)
{
    const bn_conv_shape *s = rn->s;
    BN_TRY(run_once(rn, ctx));
    BN_TRY(bn_device_sync());
    if (rn->pass == BN_CONV_FORWARD) {
        BN_TRY(bn_conv2d_cpu_forward(&s->g, s->filters, s->n, m->x, m->w, m->b, m->y, 0));
        return relative_error(m->dev[D_OUT], m->y, m->out, m->got, &r->max_error);
    }
    BN_TRY(bn_conv2d_cpu_backward(&s->g, s->filters, s->n, m->x, m->w, m->dy, NULL, rn->pass == BN_CONV_DATA ? m->dx : NULL,
                                  m->dw, m->db));
    if (rn->pass == BN_CONV_DATA) return relative_error(m->dev[D_OUT], m->dx, m->in, m->got, &r->max_error);
    double dw_err = 0.0, db_err = 0.0;
    BN_TRY(relative_error(m->dev[D_DW], m->dw, m->wts, m->got, &dw_err));
    BN_TRY(relative_error(m->dev[D_DB], m->db, (size_t)s->filters, m->got, &db_err));
    r->max_error = dw_err > db_err ? dw_err : db_err;
    return BN_OK;
}

/* Milliseconds per call over reps calls after one warm-up call. */
static bn_status time_calls(runner *rn, bn_ctx *ctx, int reps, float *ms)
{
    void *start = NULL, *end = NULL;
    float t = 0.0f;
    bn_status st = run_once(rn, ctx);
    if (st == BN_OK) st = bn_event_create(&start);
    if (st == BN_OK) st = bn_event_create(&end);
    if (st == BN_OK) st = bn_event_record(start);
    for (int i = 0; i < reps && st == BN_OK; i++) st = run_once(rn, ctx);
    if (st == BN_OK) st = bn_event_record(end);
    if (st == BN_OK) st = bn_event_elapsed_ms(start, end, &t);
    if (start) bn_event_destroy(start);
    if (end) bn_event_destroy(end);
    *ms = t / (float)reps;
    return st;
}

/* Whether the runner applies, and its plan: r->applies and r->why. */
static bn_status prepare(bn_ctx *ctx, int runner_no, const bn_conv_shape *s, int pass, runner *rn,
                         bn_conv_alone_result *r)
{
    if (runner_no == BN_CONV_ALONE_CUDNN) {
        BN_TRY(bn_conv_cudnn_alone_make(ctx, s, pass, &rn->cudnn, &r->why, r->algo, sizeof r->algo));
        r->applies = rn->cudnn != NULL;
        return BN_OK;
    }
    if (runner_no < 1 || runner_no > BN_CONV_FAMILY_COUNT)
        return bn_error(BN_ERR_USAGE, "no kernel family number %d (1 to %d)", runner_no, BN_CONV_FAMILY_COUNT);
    rn->f = bn_conv_families[runner_no - 1];
    rn->f->plan(&rn->plan, s);
    r->applies = bn_conv_family_applies(rn->f, &rn->plan, s, pass, &r->why);
    if (r->applies && !rn->f->run) return bn_error(BN_ERR_DEVICE, "this blobnet was built without CUDA");
    return BN_OK;
}

bn_status bn_conv_alone_run(bn_ctx *ctx, int runner_no, int pass, const bn_conv_shape *s, int beside, uint64_t seed,
                            int reps, bn_conv_alone_result *r)
{
    memset(r, 0, sizeof *r);
    r->tolerance = bn_conv_alone_tolerance(s);
    if (pass < 0 || pass >= BN_CONV_PASSES) return bn_error(BN_ERR_USAGE, "no convolution pass number %d", pass);
    runner rn;
    memset(&rn, 0, sizeof rn);
    rn.s = s, rn.pass = pass, rn.beside = beside;
    buffers m;
    memset(&m, 0, sizeof m);
    bn_status st = prepare(ctx, runner_no, s, pass, &rn, r);
    if (st != BN_OK || !r->applies) {
        bn_conv_cudnn_alone_free(rn.cudnn);
        return st;
    }
    /* dy through a fused pooling where the family's filter pass needs one, and where the shape has
     * one and the family's data pass reads dy through it, as a network's backward pass runs it. */
    const int pooled = rn.f && ((rn.f->needs_pooled && pass == BN_CONV_FILTER) ||
                                (pass == BN_CONV_DATA && s->pooled && rn.f->reads_pooled &&
                                 rn.f->reads_pooled(&rn.plan, BN_CONV_DATA)));
    st = make_inputs(s, pooled, seed, &m);
    if (st == BN_OK) st = to_device(s, &m);
    m.parts = rn.f ? (rn.f->workspace(&rn.plan) + 255) / 256 * 256 : 0;
    m.scratch = rn.f && rn.f->scratch ? rn.f->scratch(&rn.plan) : 0;
    if (st == BN_OK && m.parts + m.scratch) st = bn_device_alloc(&m.parts_dev, m.parts + m.scratch);
    if (st == BN_OK && m.parts + m.scratch) st = bn_device_zero(m.parts_dev, m.parts + m.scratch);
    bn_pooled_dy pd = {m.dev[D_POOLED], (const unsigned char *)(m.dev[D_POOLED] + m.pooled), s->g.oh / 2,
                       s->g.ow / 2};
    bind(&rn, &m, &pd);
    if (st == BN_OK) st = check(&rn, ctx, &m, r);
    if (st == BN_OK && reps > 0) st = time_calls(&rn, ctx, reps, &r->ms);
    if (st == BN_OK) st = bn_device_sync();
    bn_conv_cudnn_alone_free(rn.cudnn);
    free_buffers(&m);
    return st;
}
