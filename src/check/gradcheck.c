#include "gradcheck.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"

/* Streams of the seed: one for picking coordinates, one for the projection R. */
enum { STREAM_PICK = 1, STREAM_PROJ = 2 };

/* A skipped share above this means the check says too little to be trusted. */
#define MAX_KINK_SHARE 0.05

/* A failing point is looked at again with the step divided by this (see check_coord). */
#define REFINE 4.0

/* The rounding floor of a blob is measured at this many of its coordinates, with a step this
 * fraction of eps, and taken this many times the median noise (see set_floor). */
#define PROBES 9
#define PROBE_STEP 1e-3
#define FLOOR_MARGIN 8.0

typedef struct checker {
    bn_net *net;
    const bn_gradcheck_opts *o;
    bn_gradcheck_result *res;
    float *proj;        /* R for a network without a loss layer, else NULL */
    double j0;          /* J at the unperturbed point */
    double floor;       /* denominator floor of relative errors for the blob being checked */
    bn_rng pick;
} checker;

/* The differences at one coordinate. */
typedef struct diffs {
    double central, plus, minus;
} diffs;

bn_gradcheck_opts bn_gradcheck_defaults(void)
{
    return (bn_gradcheck_opts){.eps = 1e-2, .tolerance = 1e-2, .max_coords_per_blob = 100, .seed = 1};
}

/* J at the current values: one training-mode forward, reduced in double. */
static bn_status objective(checker *c, double *j)
{
    bn_net *net = c->net;
    BN_TRY(bn_net_forward(net, 1));
    if (!c->proj) {
        double loss, correct;
        BN_TRY(bn_net_metrics(net, &loss, &correct));
        *j = loss / net->batch;
    } else {
        bn_blob *out = bn_net_output(net);
        const float *y = bn_blob_host_rd(out);
        if (!y) return bn_last_status();
        double s = 0.0;
        for (size_t i = 0; i < bn_blob_count(out); i++) s += (double)y[i] * c->proj[i];
        *j = s;
    }
    if (!isfinite(*j)) return bn_error(BN_ERR_NUMERIC, "gradient check: the objective is %g", *j);
    return BN_OK;
}

static bn_status make_projection(checker *c)
{
    bn_blob *out = bn_net_output(c->net);
    size_t count = bn_blob_count(out);
    c->proj = malloc(count * sizeof *c->proj);
    if (!c->proj) return bn_error(BN_ERR_NOMEM, "gradient check: out of host memory");
    bn_rng r;
    bn_rng_seed(&r, c->o->seed, STREAM_PROJ);
    for (size_t i = 0; i < count; i++) c->proj[i] = (float)bn_rng_normal(&r);
    return BN_OK;
}

/* Forward, then backward from dJ/dout: the loss layer's own gradient, or R. */
static bn_status analytic_pass(checker *c)
{
    bn_net *net = c->net;
    BN_TRY(bn_net_zero_grad(net));
    BN_TRY(objective(c, &c->j0));
    if (c->proj) {
        bn_layer *last = net->layers[net->num_layers - 1];
        if (!last->out_grad) return bn_error(BN_ERR_INTERNAL, "gradient check: %s has no output gradient",
                                             last->name);
        float *g = bn_blob_host_wr(last->out_grad);
        if (!g) return bn_last_status();
        memcpy(g, c->proj, bn_blob_count(last->out_grad) * sizeof *g);
    }
    return bn_net_backward(net);
}

static bn_status set_value(bn_blob *b, size_t i, float v)
{
    float *p = bn_blob_host_wr(b);
    if (!p) return bn_last_status();
    p[i] = v;
    return BN_OK;
}

/* Central and one-sided differences at coordinate i of b, which is restored exactly. The
 * steps are the ones float32 actually took, not eps, so rounding of x +- eps costs nothing. */
static bn_status differences(checker *c, bn_blob *b, size_t i, double step, diffs *d)
{
    const float *p = bn_blob_host_rd(b);
    if (!p) return bn_last_status();
    float x0 = p[i];
    float xp = (float)(x0 + step), xm = (float)(x0 - step);
    double hp = (double)xp - x0, hm = x0 - (double)xm;
    if (!(hp > 0.0 && hm > 0.0))
        return bn_error(BN_ERR_NUMERIC, "gradient check: %s[%zu] = %g cannot be moved by %g",
                        b->name, i, (double)x0, step);
    double jp = 0.0, jm = 0.0;
    bn_status s = set_value(b, i, xp);
    if (s == BN_OK) s = objective(c, &jp);
    if (s == BN_OK) s = set_value(b, i, xm);
    if (s == BN_OK) s = objective(c, &jm);
    bn_status restored = set_value(b, i, x0);
    BN_TRY(s);
    BN_TRY(restored);
    d->central = (jp - jm) / (hp + hm);
    d->plus = (jp - c->j0) / hp;
    d->minus = (c->j0 - jm) / hm;
    return BN_OK;
}

static double rel_error(double a, double n, double lo)
{
    return fabs(a - n) / fmax(fabs(a) + fabs(n), lo);
}

/* Measures the rounding floor of one blob's coordinates: at PROBES of them, J moved by a
 * step so small (eps * PROBE_STEP) that its true curvature term is far below float32
 * rounding, the two one-sided slopes differ only by the rounding of the J values, scaled by
 * the step: |plus - minus| * step / 2 is the noise of one J. The analytic gradient plays no
 * part, so a wrong one cannot raise its own floor. A central difference at eps carries up to
 * that noise / eps; an error that small must pass, hence the floor noise / eps / tolerance,
 * times FLOOR_MARGIN for coordinates noisier than the median probe. Measured rather than
 * estimated from the network's size: a perturbation moves only the outputs that depend on
 * the coordinate, so the floor stays put as the batch or the image grows. */
static bn_status set_floor(checker *c, bn_blob *value, const size_t *idx, size_t m)
{
    double noise[PROBES];
    size_t n = m < PROBES ? m : PROBES;
    double step = c->o->eps * PROBE_STEP;
    for (size_t j = 0; j < n; j++) {
        diffs d;
        BN_TRY(differences(c, value, idx[j], step, &d));
        noise[j] = fabs(d.plus - d.minus) * step / 2;
    }
    /* The median: a probe that met a kink or a near-tie shows the slope's jump, not rounding. */
    for (size_t i = 1; i < n; i++)
        for (size_t j = i; j > 0 && noise[j - 1] > noise[j]; j--) {
            double t = noise[j];
            noise[j] = noise[j - 1];
            noise[j - 1] = t;
        }
    double median = n ? noise[n / 2] : 0.0;
    /* A loss layer's J comes from its float loss sum, which rounds to FLT_EPSILON of J even
     * when a probe's step is too small to move it by one unit. */
    double stored = c->proj ? 0.0 : FLT_EPSILON * fabs(c->j0);
    c->floor = fmax(BN_GRADCHECK_FLOOR, fmax(FLOOR_MARGIN * median, stored) / c->o->eps / c->o->tolerance);
    if (c->floor > c->res->floor) c->res->floor = c->floor;
    return BN_OK;
}

/* Whether a point that fails at both steps is explained by a kink. Near a smooth point the
 * central difference barely moves as the step shrinks, and the gap between the one-sided
 * slopes shrinks with it (it is step * J''), whether the analytic gradient is right or
 * wrong. A kink inside the step instead moves the central difference, and a kink right at
 * the point leaves a gap of the full slope jump at every step, which accounts for the whole
 * error. */
static int on_kink(const checker *c, double analytic, const diffs *d, const diffs *fine)
{
    double tol = c->o->tolerance, fine_floor = c->floor * REFINE;
    double gap = fabs(d->plus - d->minus), fine_gap = fabs(fine->plus - fine->minus);
    int moved = rel_error(fine->central, d->central, fine_floor) > tol;
    int at_point = fine_gap > gap / 2 && rel_error(fine->plus, fine->minus, fine_floor) > tol &&
                   fabs(analytic - d->central) <= gap;
    return moved || at_point;
}

static void note_worst(bn_gradcheck_result *res, const bn_blob *b, size_t i, double analytic,
                       double numeric, double rel)
{
    if (rel > res->worst_rel_error || !isfinite(rel)) {
        res->worst_rel_error = rel;
        snprintf(res->worst_where, sizeof res->worst_where, "%s[%zu]: analytic %.6g, numeric %.6g",
                 b->name, i, analytic, numeric);
    }
}

/* Compares one coordinate. A failure gets a second look with the step divided by REFINE:
 * agreement there means the larger step met curvature or a kink, not a wrong gradient (the
 * smaller step's rounding noise is REFINE times larger, and so is its floor). */
static bn_status check_coord(checker *c, bn_blob *value, bn_blob *grad, size_t i)
{
    const float *g = bn_blob_host_rd(grad);
    if (!g) return bn_last_status();
    double analytic = g[i], tol = c->o->tolerance;
    diffs d = {0, 0, 0}, fine = {0, 0, 0};
    BN_TRY(differences(c, value, i, c->o->eps, &d));
    double numeric = d.central, rel = rel_error(analytic, numeric, c->floor);
    if (rel > tol) {
        BN_TRY(differences(c, value, i, c->o->eps / REFINE, &fine));
        double fine_rel = rel_error(analytic, fine.central, c->floor * REFINE);
        if (fine_rel <= tol) {
            numeric = fine.central;
            rel = fine_rel;
        } else if (on_kink(c, analytic, &d, &fine)) {
            c->res->kinks_skipped++;
            return BN_OK;
        }
    }
    c->res->checked++;
    note_worst(c->res, value, i, analytic, numeric, rel);
    return BN_OK;
}

/* The first m of a random permutation of 0..count-1 (all of them when m >= count). */
static size_t *pick_coords(bn_rng *r, size_t count, size_t m)
{
    size_t *idx = malloc(count * sizeof *idx);
    if (!idx) return NULL;
    for (size_t i = 0; i < count; i++) idx[i] = i;
    for (size_t j = 0; j < m && j < count; j++) {
        size_t k = j + (size_t)bn_rng_below(r, count - j);
        size_t t = idx[j];
        idx[j] = idx[k];
        idx[k] = t;
    }
    return idx;
}

static bn_status check_blob(checker *c, bn_blob *value, bn_blob *grad)
{
    size_t count = bn_blob_count(value);
    size_t m = c->o->max_coords_per_blob > 0 ? (size_t)c->o->max_coords_per_blob : count;
    if (m > count) m = count;
    size_t *idx = pick_coords(&c->pick, count, m);
    if (!idx) return bn_error(BN_ERR_NOMEM, "gradient check: out of host memory");
    bn_status s = set_floor(c, value, idx, m);
    for (size_t j = 0; j < m && s == BN_OK; j++) s = check_coord(c, value, grad, idx[j]);
    free(idx);
    return s;
}

static bn_status check_all(checker *c)
{
    bn_net *net = c->net;
    if (net->input_grad) BN_TRY(check_blob(c, net->input, net->input_grad));
    for (int i = 0; i < net->num_layers; i++) {
        bn_layer *l = net->layers[i];
        for (int k = 0; k < l->num_params; k++)
            BN_TRY(check_blob(c, l->params[k].value, l->params[k].grad));
    }
    /* Leave outputs and metrics as the unperturbed point gives them. */
    double j;
    return objective(c, &j);
}

static bn_status verdict(const checker *c)
{
    const bn_gradcheck_result *res = c->res;
    long total = res->checked + res->kinks_skipped;
    if (total == 0)
        return bn_error(BN_ERR_USAGE, "gradient check: %s has no parameters and no input gradient",
                        c->net->source);
    /* A wrong gradient is the more useful report, so it comes before the kink count. */
    if (!(res->worst_rel_error <= c->o->tolerance))
        return bn_error(BN_ERR_NUMERIC, "gradient check failed at %s (relative error %.3g > "
                        "tolerance %.3g)", res->worst_where, res->worst_rel_error, c->o->tolerance);
    if (res->kinks_skipped > MAX_KINK_SHARE * total)
        return bn_error(BN_ERR_NUMERIC, "gradient check: %ld of %ld coordinates sit on kinks "
                        "(more than %.0f%%); move the inputs away from them",
                        res->kinks_skipped, total, 100 * MAX_KINK_SHARE);
    return BN_OK;
}

bn_status bn_gradcheck_net(bn_net *net, const bn_gradcheck_opts *o, bn_gradcheck_result *res)
{
    memset(res, 0, sizeof *res);
    if (!net->capacity) return bn_error(BN_ERR_USAGE, "gradient check: %s is not set up", net->source);
    if (!(o->eps > 0.0) || !(o->tolerance > 0.0))
        return bn_error(BN_ERR_USAGE, "gradient check: eps %g and tolerance %g must be positive",
                        o->eps, o->tolerance);
    checker c = {.net = net, .o = o, .res = res};
    bn_rng_seed(&c.pick, o->seed, STREAM_PICK);
    /* Every training pass moves running statistics; the check puts them back as it found them. */
    float *buffers = NULL;
    size_t nbuf = net->buffers ? bn_blob_count(net->buffers) : 0;
    const float *held = nbuf ? bn_blob_host_rd(net->buffers) : NULL;
    if (nbuf && (!held || !(buffers = malloc(nbuf * sizeof *buffers))))
        return held ? bn_error(BN_ERR_NOMEM, "gradient check: out of host memory") : bn_last_status();
    if (nbuf) memcpy(buffers, held, nbuf * sizeof *buffers);
    bn_status s = bn_net_loss_layer(net) ? BN_OK : make_projection(&c);
    if (s == BN_OK) s = analytic_pass(&c);
    if (s == BN_OK) s = check_all(&c);
    if (s == BN_OK) s = verdict(&c);
    if (nbuf) {
        float *back = bn_blob_host_wr(net->buffers);
        if (back) memcpy(back, buffers, nbuf * sizeof *back);
        else if (s == BN_OK) s = bn_last_status();
    }
    free(buffers);
    free(c.proj);
    return s;
}
