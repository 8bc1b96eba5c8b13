/* test_util_layers.c - the helpers of layer_testing.h; it holds no tests itself. */
#include "layer_testing.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conv2d/conv2d.h"
#include "core/hash.h"
#include "core/rng.h"
#include "testing.h"

uint64_t lt_fresh_seed(void)
{
    static const char *test;
    static uint64_t calls;
    if (test != bn_test_name()) test = bn_test_name(), calls = 0;
    const uint64_t h = bn_fnv1a_text(BN_FNV1A_START, test);
    /* Mixed through the generator so that neighbouring calls give unrelated seeds. */
    bn_rng r;
    bn_rng_seed(&r, bn_test_seed() ^ h, ++calls);
    return bn_rng_next(&r) >> 11; /* small enough to print exactly */
}

const char *lt_replay(void)
{
    static char text[256];
    snprintf(text, sizeof text, "BLOBNET_TEST_SEED=%llu ./tests/run_tests %s", bn_test_seed(), bn_test_name());
    return text;
}

double lt_rel_diff(const float *g, const float *c, const float *base, size_t count, size_t *where)
{
    double worst = 0.0, scale = 0.0;
    *where = 0;
    for (size_t i = 0; i < count; i++) {
        if (!isfinite(g[i]) || !isfinite(c[i])) {
            *where = i;
            return INFINITY;
        }
        double d = fabs((double)g[i] - c[i]);
        if (d > worst) worst = d, *where = i;
        double added = fabs(c[i] - (base ? base[i] : 0.0f));
        if (added > scale) scale = added;
    }
    return worst / (scale > 0.0 ? scale : 1.0);
}

bn_status lt_net(const char *text, int batch, uint64_t seed, bn_net **out)
{
    bn_net *net;
    BN_TRY(bn_net_from_text(text, "test-model", &net));
    bn_status s = bn_net_setup(net, batch, NULL, 1, seed);
    if (s != BN_OK) {
        bn_net_free(net);
        return s;
    }
    *out = net;
    return BN_OK;
}

bn_status lt_fill_normal(bn_net *net, uint64_t seed, double scale, double gap)
{
    float *x = bn_blob_host_wr(net->input);
    if (!x) return bn_last_status();
    bn_rng r;
    bn_rng_seed(&r, seed, 101);
    for (size_t i = 0; i < bn_blob_count(net->input); i++) {
        double v = scale * bn_rng_normal(&r);
        if (fabs(v) < gap) v = v < 0 ? -gap : gap;
        x[i] = (float)v;
    }
    return BN_OK;
}

bn_status lt_fill_distinct(bn_net *net, uint64_t seed, double spacing)
{
    size_t n = bn_blob_count(net->input);
    float *x = bn_blob_host_wr(net->input);
    if (!x) return bn_last_status();
    bn_rng r;
    bn_rng_seed(&r, seed, 102);
    for (size_t i = 0; i < n; i++) x[i] = (float)(((double)i - 0.5 * (double)n) * spacing);
    for (size_t i = n; i > 1; i--) {
        size_t j = (size_t)bn_rng_below(&r, i);
        float t = x[i - 1];
        x[i - 1] = x[j];
        x[j] = t;
    }
    return BN_OK;
}

bn_status lt_fill_labels(bn_net *net, uint64_t seed, int classes)
{
    float *y = bn_blob_host_wr(net->labels);
    if (!y) return bn_last_status();
    bn_rng r;
    bn_rng_seed(&r, seed, 103);
    for (int i = 0; i < net->batch; i++) y[i] = (float)bn_rng_below(&r, (uint64_t)classes);
    return BN_OK;
}

bn_status lt_write(bn_blob *b, const float *v, size_t count)
{
    float *p = bn_blob_host_wr(b);
    if (!p) return bn_last_status();
    memcpy(p, v, count * sizeof *p);
    return BN_OK;
}

bn_status lt_read(bn_blob *b, float *v, size_t count)
{
    const float *p = bn_blob_host_rd(b);
    if (!p) return bn_last_status();
    memcpy(v, p, count * sizeof *v);
    return BN_OK;
}

int lt_gradcheck(bn_net *net, const char *what, uint64_t seed, double eps, double tol)
{
    bn_gradcheck_opts o = bn_gradcheck_defaults();
    if (eps > 0) o.eps = eps;
    o.tolerance = tol;
    o.max_coords_per_blob = 200;
    o.seed = seed;
    bn_gradcheck_result res;
    bn_status s = bn_gradcheck_net(net, &o, &res);
    printf("    gradcheck %s: %ld coords, worst rel err %.3g", what, res.checked, res.worst_rel_error);
    if (res.kinks_skipped) printf(" (%ld kinks skipped)", res.kinks_skipped);
    printf("\n");
    if (s == BN_OK) return BN_PASS;
    fprintf(stderr, "    gradcheck %s failed (seed %llu; rerun: %s): %s\n", what, (unsigned long long)seed,
            lt_replay(), bn_last_error());
    return BN_FAIL;
}

static bn_status prepare(bn_net *net, uint64_t seed, double gap, double spacing, int classes)
{
    BN_TRY(spacing > 0 ? lt_fill_distinct(net, seed, spacing) : lt_fill_normal(net, seed, 1.0, gap));
    return bn_net_loss_layer(net) ? lt_fill_labels(net, seed, classes) : BN_OK;
}

int lt_gradcheck_text(const char *text, const char *what, int batch, double gap, double spacing,
                      int classes, double tol)
{
    uint64_t seed = lt_fresh_seed();
    bn_net *net = NULL;
    bn_status s = lt_net(text, batch, seed, &net);
    if (s == BN_OK) s = prepare(net, seed, gap, spacing, classes);
    if (s != BN_OK) {
        fprintf(stderr, "    gradcheck %s: setup failed: %s\n", what, bn_last_error());
        bn_net_free(net);
        return BN_FAIL;
    }
    int r = lt_gradcheck(net, what, seed, 0, tol);
    bn_net_free(net);
    return r;
}

int lt_gradcheck_cases(const lt_gradcheck_case *cases, size_t count, double tol)
{
    for (size_t i = 0; i < count; i++)
        CHECK(lt_gradcheck_text(cases[i].text, cases[i].what, cases[i].batch, cases[i].gap, cases[i].spacing,
                                cases[i].classes, tol) == BN_PASS);
    return BN_PASS;
}

bn_status lt_setup_status(const char *text)
{
    bn_net *net;
    BN_TRY(bn_net_from_text(text, "test-model", &net));
    bn_status s = bn_net_setup(net, 1, NULL, 0, 1);
    bn_net_free(net);
    return s;
}

bn_status lt_out_shape(const char *text, int *c, int *h, int *w)
{
    bn_net *net;
    BN_TRY(lt_net(text, 1, 1, &net));
    bn_blob *o = bn_net_output(net);
    *c = o->c, *h = o->h, *w = o->w;
    bn_net_free(net);
    return BN_OK;
}

bn_status lt_train_steps(bn_net *net, bn_optimizer *opt, int first, int count, int classes, uint64_t input_seed,
                         uint64_t label_seed)
{
    for (int step = first; step < first + count; step++) {
        BN_TRY(lt_fill_normal(net, input_seed + (uint64_t)step, 1.0, 0));
        BN_TRY(lt_fill_labels(net, label_seed + (uint64_t)step, classes));
        BN_TRY(bn_net_zero_grad(net));
        BN_TRY(bn_net_forward(net, 1));
        BN_TRY(bn_net_backward(net));
        BN_TRY(bn_optimizer_step(opt, net));
    }
    return BN_OK;
}

/* The networks of one lt_bf16_vs_cpu comparison. */
typedef struct bf16_pair {
    bn_net *cpu, *gpu;
    double worst;
    char *what;
    size_t cap;
} bf16_pair;

/* Compares blob g (device side, read back as FP32) with c, keeping the worst in pair. */
static bn_status bf16_compare(bf16_pair *p, bn_blob *g, bn_blob *c, const char *name)
{
    if (!g || !c) return BN_OK;
    const float *gv = bn_blob_host_rd(g), *cv = gv ? bn_blob_host_rd(c) : NULL;
    if (!cv) return bn_last_status();
    size_t where;
    double d = lt_rel_diff(gv, cv, NULL, bn_blob_count(c), &where);
    if (d > p->worst || (isnan(d) && !isnan(p->worst))) {
        p->worst = d;
        snprintf(p->what, p->cap, "%s element %zu: bf16 gpu %g, fp32 cpu %g", name, where, gv[where], cv[where]);
    }
    return BN_OK;
}

/* Feeds both networks the same inputs and labels or last output gradient, runs the passes. */
static bn_status bf16_run(bf16_pair *p, int classes, int train, uint64_t seed)
{
    bn_net *nets[2] = {p->cpu, p->gpu};
    for (int i = 0; i < 2; i++) {
        BN_TRY(lt_fill_normal(nets[i], seed, 1.0, 0.0));
        if (classes > 0) BN_TRY(lt_fill_labels(nets[i], seed + 1, classes));
        bn_layer *last = nets[i]->layers[nets[i]->num_layers - 1];
        if (classes <= 0) {
            float *dy = bn_blob_host_wr(last->out_grad);
            if (!dy) return bn_last_status();
            bn_rng r;
            bn_rng_seed(&r, seed, 202);
            for (size_t e = 0; e < bn_blob_count(last->out_grad); e++) dy[e] = (float)bn_rng_normal(&r);
        }
        BN_TRY(bn_net_zero_grad(nets[i]));
        BN_TRY(bn_net_forward(nets[i], train));
        BN_TRY(bn_net_backward(nets[i]));
    }
    return BN_OK;
}

static bn_status bf16_compare_all(bf16_pair *p, int classes)
{
    for (int i = 0; i < p->cpu->num_layers; i++) {
        bn_layer *g = p->gpu->layers[i], *c = p->cpu->layers[i];
        char name[160];
        snprintf(name, sizeof name, "%s output", c->name);
        BN_TRY(bf16_compare(p, g->out, c->out, name));
        for (int k = 0; k < c->num_params; k++) {
            snprintf(name, sizeof name, "%s.%s gradient", c->name, c->params[k].name);
            BN_TRY(bf16_compare(p, g->params[k].grad, c->params[k].grad, name));
        }
    }
    BN_TRY(bf16_compare(p, p->gpu->input_grad, p->cpu->input_grad, "input gradient"));
    if (classes > 0) {
        double gl, gc, cl, cc;
        BN_TRY(bn_net_metrics(p->gpu, &gl, &gc));
        BN_TRY(bn_net_metrics(p->cpu, &cl, &cc));
        double d = fabs(gl - cl) / (fabs(cl) > 0 ? fabs(cl) : 1.0);
        if (!(d <= p->worst)) {
            p->worst = d;
            snprintf(p->what, p->cap, "loss sum: bf16 gpu %g, fp32 cpu %g", gl, cl);
        }
    }
    return BN_OK;
}

bn_status lt_bf16_vs_cpu(const char *text, int batch, int classes, int train, bn_ctx *ctx, uint64_t seed,
                         double *worst, char *what, size_t cap)
{
    bf16_pair p = {NULL, NULL, 0.0, what, cap};
    what[0] = '\0';
    BN_TRY(lt_net(text, batch, seed, &p.cpu));
    bn_status s = bn_net_from_text(text, "test-model", &p.gpu);
    if (s == BN_OK) {
        int was = ctx->bf16;
        ctx->bf16 = 1;
        s = bn_net_setup(p.gpu, batch, ctx, 1, seed);
        ctx->bf16 = was;
    }
    if (s == BN_OK) s = bf16_run(&p, classes, train, seed);
    if (s == BN_OK) s = bf16_compare_all(&p, classes);
    *worst = p.worst;
    bn_net_free(p.cpu);
    bn_net_free(p.gpu);
    return s;
}

bn_status lt_conv_plans(const char *text, bn_ctx *ctx, int batch, uint64_t seed, const char *const *names,
                        char *const *plans, int count, size_t cap)
{
    for (int i = 0; i < count; i++) plans[i][0] = '\0';
    bn_net *net = NULL;
    bn_status s = bn_net_from_text(text, "conv", &net);
    if (s == BN_OK) s = bn_net_setup(net, batch, ctx, 1, seed);
    if (s == BN_OK) s = bn_net_forward(net, 1);
    if (s == BN_OK) s = bn_net_backward(net);
#ifdef BN_WITH_CUDA /* the plans exist only in a CUDA build */
    for (int i = 0; i < count && s == BN_OK; i++) {
        const bn_layer *l = bn_net_find_layer(net, names[i]);
        if (l) bn_conv2d_gpu_describe(l, plans[i], cap);
    }
#else
    (void)names;
#endif
    bn_net_free(net);
    return s;
}
