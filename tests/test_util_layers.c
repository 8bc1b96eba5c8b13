/* test_util_layers.c - the helpers of layer_testing.h; it holds no tests itself. */
#include "layer_testing.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/rng.h"
#include "testing.h"

uint64_t lt_fresh_seed(void)
{
    const char *fixed = getenv("BLOBNET_TEST_SEED");
    if (fixed && *fixed) return strtoull(fixed, NULL, 10);
    static uint64_t calls;
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    /* Mixed through the generator so that close times give unrelated seeds. */
    bn_rng r;
    bn_rng_seed(&r, (uint64_t)t.tv_sec * 1000000007ULL ^ (uint64_t)t.tv_nsec, (uint64_t)getpid() + ++calls);
    return bn_rng_next(&r) >> 11; /* small enough to print and paste back exactly */
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
    fprintf(stderr, "    gradcheck %s failed (seed %llu; rerun with BLOBNET_TEST_SEED=%llu): %s\n",
            what, (unsigned long long)seed, (unsigned long long)seed, bn_last_error());
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
