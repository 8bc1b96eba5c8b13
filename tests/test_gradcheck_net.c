/* test_gradcheck_net.c - the gradient checker end to end: a small LeNet-like network through
 * the network API, a deliberately wrong layer that must fail, kink handling, and the
 * checker's own contract (values restored, coordinates counted, nothing to check). */
#include <stdlib.h>

#include "core/registry.h"
#include "layer_testing.h"
#include "testing.h"

/* Central differences through a float32 forward agree to a few 1e-3 at worst (gradcheck.h
 * explains the choice of eps); a wrong gradient is off by far more. */
#define GRAD_TOL 1e-2

/* A conv weight moves every relu and max behind it, so the whole network has far more kinks
 * per coordinate than any one layer: a smaller step keeps them rare (gradcheck.h). At 1e-3
 * about one run in a thousand met more than 5% kinks; at 5e-4 none in a thousand did. */
#define NET_EPS 5e-4

static const char *const lenet_like =
    "[input]\nchannels=1\nheight=8\nwidth=8\n"
    "[conv2d]\nfilters=3\nsize=3\n"
    "[maxpool]\nsize=2\n"
    "[relu]\n"
    "[dense]\noutputs=5\n"
    "[softmax_ce]\n";

BN_TEST(gradcheck_net_conv_pool_relu_dense_softmax)
{
    uint64_t seed = lt_fresh_seed();
    bn_net *net;
    CHECK_OK(lt_net(lenet_like, 3, seed, &net));
    CHECK_OK(lt_fill_normal(net, seed, 1.0, 0));
    CHECK_OK(lt_fill_labels(net, seed, 5));
    CHECK(lt_gradcheck(net, "conv-maxpool-relu-dense + softmax_ce batch 3", seed, NET_EPS, GRAD_TOL) == BN_PASS);
    bn_net_free(net);
    return BN_PASS;
}

/* A user layer y = 2x whose backward claims dx = 2 * factor * dy: with factor 1 it is right,
 * with any other factor the checker has to notice. */
typedef struct scale_priv {
    float factor;
} scale_priv;

static bn_status scale_parse(bn_layer *l, bn_options *o)
{
    double f;
    BN_TRY(bn_opt_float(o, "factor", 1.0, 0.0, 10.0, &f));
    scale_priv *p = malloc(sizeof *p);
    if (!p) return bn_error(BN_ERR_NOMEM, "out of memory");
    p->factor = (float)f;
    l->priv = p;
    return BN_OK;
}

static bn_status scale_setup(bn_layer *l, bn_shape in, bn_shape *out)
{
    *out = in;
    return BN_OK;
}

static bn_status scale_forward(bn_layer *l, const bn_pass *p)
{
    BN_HOST_RD(x, l->in);
    BN_HOST_WR(y, l->out);
    for (size_t i = 0; i < bn_blob_count(l->in); i++) y[i] = 2.0f * x[i];
    return BN_OK;
}

static bn_status scale_backward(bn_layer *l, const bn_pass *p)
{
    const scale_priv *s = l->priv;
    if (!l->in_grad) return BN_OK;
    BN_HOST_RD(dy, l->out_grad);
    BN_HOST_WR(dx, l->in_grad);
    for (size_t i = 0; i < bn_blob_count(l->in); i++) dx[i] = 2.0f * s->factor * dy[i];
    return BN_OK;
}

static const bn_layer_ops scale_ops = {
    .type = "test_scale",
    .help = "y = 2x with a backward off by `factor`; test only",
    .kind = BN_NVTX_LAYER_OTHER,
    .parse = scale_parse,
    .setup = scale_setup,
    .forward_cpu = scale_forward,
    .backward_cpu = scale_backward,
};

static bn_status check_scaled(const char *factor, bn_gradcheck_result *res, bn_status *verdict)
{
    if (!bn_find_layer("test_scale")) BN_TRY(bn_register_layer(&scale_ops));
    char text[256];
    snprintf(text, sizeof text, "[input]\nchannels=2\nheight=3\nwidth=3\n[dense]\noutputs=4\n"
                                "[test_scale]\nfactor=%s\n[softmax_ce]\n", factor);
    uint64_t seed = lt_fresh_seed();
    bn_net *net;
    BN_TRY(lt_net(text, 3, seed, &net));
    bn_status s = lt_fill_normal(net, seed, 1.0, 0);
    if (s == BN_OK) s = lt_fill_labels(net, seed, 4);
    if (s == BN_OK) {
        bn_gradcheck_opts o = bn_gradcheck_defaults();
        o.tolerance = GRAD_TOL;
        o.seed = seed;
        *verdict = bn_gradcheck_net(net, &o, res);
        printf("    gradcheck test_scale factor %s: %ld coords, worst rel err %.3g\n", factor,
               res->checked, res->worst_rel_error);
    }
    bn_net_free(net);
    return s;
}

/* The negative control: if a wrong backward passed, no other gradient check would mean a thing.
 * A 5% error is caught as surely as a factor of 1.5. */
BN_TEST(gradcheck_net_fails_on_a_wrong_backward)
{
    bn_gradcheck_result res;
    bn_status verdict = BN_OK;
    CHECK_OK(check_scaled("1", &res, &verdict));
    CHECK_MSG(verdict == BN_OK, "the correct layer failed: %s", bn_last_error());
    static const char *const wrong[] = {"1.5", "1.05", "0"};
    for (int i = 0; i < 3; i++) {
        bn_clear_error();
        CHECK_OK(check_scaled(wrong[i], &res, &verdict));
        CHECK_MSG(verdict == BN_ERR_NUMERIC, "factor %s passed", wrong[i]);
        CHECK_MSG(strstr(bn_last_error(), "gradient check failed at") != NULL, "%s", bn_last_error());
        CHECK(strstr(bn_last_error(), "analytic") && strstr(bn_last_error(), "numeric"));
        CHECK(res.worst_rel_error > GRAD_TOL && res.checked > 0 && res.worst_where[0]);
        /* Only what lies before the wrong layer can be wrong. */
        CHECK(strstr(res.worst_where, "input[") || strstr(res.worst_where, "dense1."));
    }
    return BN_PASS;
}

static bn_status relu_net(const float *x, int count, bn_net **net)
{
    char text[128];
    snprintf(text, sizeof text, "[input]\nchannels=1\nheight=1\nwidth=%d\n[relu]\n", count);
    BN_TRY(lt_net(text, 1, 1, net));
    return lt_write((*net)->input, x, (size_t)count);
}

/* Exactly at relu's kink the one-sided slopes differ: one such point among 40 is skipped and
 * counted; when every point is on the kink the check refuses to vouch for anything. */
BN_TEST(gradcheck_net_skips_kinks_within_limits)
{
    float x[40];
    for (int i = 0; i < 40; i++) x[i] = (i % 2 ? 1.0f : -1.0f) * (0.5f + 0.1f * i);
    x[17] = 0.0f;
    bn_net *net;
    CHECK_OK(relu_net(x, 40, &net));
    bn_gradcheck_opts o = bn_gradcheck_defaults();
    bn_gradcheck_result res;
    CHECK_OK(bn_gradcheck_net(net, &o, &res));
    CHECK(res.kinks_skipped == 1 && res.checked == 39);
    bn_net_free(net);

    for (int i = 0; i < 40; i++) x[i] = 0.0f;
    CHECK_OK(relu_net(x, 40, &net));
    CHECK_ERR(bn_gradcheck_net(net, &o, &res), BN_ERR_NUMERIC, "sit on kinks");
    /* The probes that measure the rounding floor sit on the kink too and raise it, so points
     * whose slope jump falls below that floor pass as rounding; the rest are skipped. */
    CHECK_MSG(res.kinks_skipped >= 20 && res.kinks_skipped + res.checked == 40, "%ld skipped, %ld checked",
              res.kinks_skipped, res.checked);
    bn_net_free(net);
    return BN_PASS;
}

static bn_status snapshot(bn_blob *b, float **out)
{
    size_t n = bn_blob_count(b);
    *out = malloc(n * sizeof **out);
    if (!*out) return bn_error(BN_ERR_NOMEM, "out of memory");
    return lt_read(b, *out, n);
}

/* Values come back bit for bit; the sample size is honoured; the defaults are as documented. */
BN_TEST(gradcheck_net_restores_values_and_counts_coords)
{
    bn_gradcheck_opts o = bn_gradcheck_defaults();
    CHECK(o.eps == 1e-2 && o.tolerance == 1e-2 && o.max_coords_per_blob == 100 && o.seed == 1);
    uint64_t seed = lt_fresh_seed();
    bn_net *net;
    CHECK_OK(lt_net(lenet_like, 2, seed, &net));
    CHECK_OK(lt_fill_normal(net, seed, 1.0, 0));
    CHECK_OK(lt_fill_labels(net, seed, 5));
    float *params, *input;
    CHECK_OK(snapshot(net->params, &params));
    CHECK_OK(snapshot(net->input, &input));
    o.max_coords_per_blob = 10;
    bn_gradcheck_result res;
    bn_status s = bn_gradcheck_net(net, &o, &res);
    CHECK_MSG(s == BN_OK || s == BN_ERR_NUMERIC, "%s", bn_last_error());
    /* input 128, conv weight 27 and bias 3, dense weight 135 and bias 5: 10 + 10 + 3 + 10 + 5 */
    CHECK_MSG(res.checked + res.kinks_skipped == 38, "%ld + %ld", res.checked, res.kinks_skipped);
    float *after;
    CHECK_OK(snapshot(net->params, &after));
    CHECK(memcmp(params, after, net->num_params * sizeof *after) == 0);
    free(after);
    CHECK_OK(snapshot(net->input, &after));
    CHECK(memcmp(input, after, bn_blob_count(net->input) * sizeof *after) == 0);
    free(after), free(params), free(input);
    bn_net_free(net);
    return BN_PASS;
}

BN_TEST(gradcheck_net_needs_something_to_check)
{
    bn_net *net;
    CHECK_OK(bn_net_from_text("[input]\nchannels=1\nheight=2\nwidth=2\n[relu]\n", "relu-only", &net));
    CHECK_OK(bn_net_setup(net, 1, NULL, 0, 1));
    bn_gradcheck_opts o = bn_gradcheck_defaults();
    bn_gradcheck_result res;
    CHECK_ERR(bn_gradcheck_net(net, &o, &res), BN_ERR_USAGE, "no parameters and no input gradient");
    o.eps = 0;
    CHECK_ERR(bn_gradcheck_net(net, &o, &res), BN_ERR_USAGE, "must be positive");
    bn_net_free(net);
    return BN_PASS;
}
