/* Network setup: shapes, the parameter slab, initialisation and batch changes. */
#include "core/lr_policies/lr_policies.h"
#include "core/net.h"
#include "testing.h"

static bn_status load_lenet(bn_net **net)
{
    return bn_net_from_file("models/lenet.cfg", net);
}

BN_TEST(net_lenet_shapes_and_parameter_count)
{
    bn_net *net;
    CHECK_OK(load_lenet(&net));
    CHECK_OK(bn_net_setup(net, 4, NULL, 0, 1));
    CHECK(net->num_params == 431080);
    static const int shapes[][3] = {{20, 24, 24}, {20, 12, 12}, {50, 8, 8}, {50, 4, 4},
                                    {500, 1, 1},  {500, 1, 1},  {10, 1, 1}, {10, 1, 1}};
    CHECK(net->num_layers == 8);
    for (int i = 0; i < 8; i++) {
        bn_blob *o = net->layers[i]->out;
        CHECK_MSG(o->n == 4 && o->c == shapes[i][0] && o->h == shapes[i][1] && o->w == shapes[i][2],
                  "layer %d out %dx%dx%dx%d", i, o->n, o->c, o->h, o->w);
    }
    CHECK(strcmp(net->layers[0]->name, "conv1") == 0);
    CHECK(net->layers[0]->in_grad == NULL); /* the input needs no gradient */
    CHECK(net->layers[7]->out_grad == NULL); /* the loss layer has no output gradient */
    CHECK(net->train.lr_policy == bn_lr_policy_find("inv") && net->train.batch == 64);
    CHECK(net->train.bias_lr_mult == 2.0);
    bn_net_free(net);
    return BN_PASS;
}

BN_TEST(net_params_are_contiguous_views)
{
    bn_net *net;
    CHECK_OK(load_lenet(&net));
    CHECK_OK(bn_net_setup(net, 2, NULL, 0, 1));
    size_t expect = 0;
    for (int i = 0; i < net->num_layers; i++)
        for (int k = 0; k < net->layers[i]->num_params; k++) {
            bn_param *p = &net->layers[i]->params[k];
            CHECK(p->value->root == net->params && p->grad->root == net->grads);
            CHECK(p->value->offset == expect && p->grad->offset == expect);
            expect += bn_blob_count(p->value);
            CHECK(p->is_bias ? (p->lr_mult == 2.0f && p->decay_mult == 0.0f) : p->lr_mult == 1.0f);
        }
    CHECK(expect == net->num_params);
    CHECK(strcmp(net->layers[0]->params[0].value->name, "conv1.weight") == 0);
    bn_net_free(net);
    return BN_PASS;
}

BN_TEST(net_init_uses_fan_in_and_seed)
{
    bn_net *a, *b, *c;
    CHECK_OK(load_lenet(&a));
    CHECK_OK(load_lenet(&b));
    CHECK_OK(load_lenet(&c));
    CHECK_OK(bn_net_setup(a, 1, NULL, 0, 7));
    CHECK_OK(bn_net_setup(b, 1, NULL, 0, 7));
    CHECK_OK(bn_net_setup(c, 1, NULL, 0, 8));
    const float *pa = bn_blob_host_rd(a->params), *pb = bn_blob_host_rd(b->params), *pc = bn_blob_host_rd(c->params);
    CHECK(memcmp(pa, pb, a->num_params * sizeof(float)) == 0);
    CHECK(memcmp(pa, pc, a->num_params * sizeof(float)) != 0);
    /* Xavier on ip1 (fan_in 800, fan_out 500): uniform within +-sqrt(6/1300), variance limit^2/3. */
    bn_param *w = &a->layers[4]->params[0];
    const float *v = bn_blob_host_rd(w->value);
    double limit = sqrt(6.0 / 1300.0), sum2 = 0;
    size_t n = bn_blob_count(w->value);
    for (size_t i = 0; i < n; i++) {
        CHECK(fabs(v[i]) <= limit);
        sum2 += (double)v[i] * v[i];
    }
    CHECK_NEAR(sum2 / n, limit * limit / 3.0, 0.02 * limit * limit);
    const float *bias = bn_blob_host_rd(a->layers[4]->params[1].value);
    for (int i = 0; i < 500; i++) CHECK(bias[i] == 0.0f);
    bn_net_free(a);
    bn_net_free(b);
    bn_net_free(c);
    return BN_PASS;
}

BN_TEST(net_he_init_has_expected_variance)
{
    bn_net *net;
    CHECK_OK(bn_net_from_file("models/mlp.cfg", &net));
    CHECK_OK(bn_net_setup(net, 1, NULL, 0, 3));
    bn_param *w = &net->layers[0]->params[0];
    const float *v = bn_blob_host_rd(w->value);
    size_t n = bn_blob_count(w->value);
    double sum = 0, sum2 = 0;
    for (size_t i = 0; i < n; i++) sum += v[i], sum2 += (double)v[i] * v[i];
    CHECK_NEAR(sum / n, 0.0, 1e-3);
    CHECK_NEAR(sum2 / n, 2.0 / 784.0, 0.02 * 2.0 / 784.0);
    bn_net_free(net);
    return BN_PASS;
}

BN_TEST(net_set_batch_reshapes_every_blob)
{
    bn_net *net;
    CHECK_OK(load_lenet(&net));
    CHECK_OK(bn_net_setup(net, 8, NULL, 0, 1));
    CHECK_OK(bn_net_set_batch(net, 3));
    CHECK(net->input->n == 3 && net->labels->n == 3);
    for (int i = 0; i < net->num_layers; i++) CHECK(net->layers[i]->out->n == 3);
    CHECK_ERR(bn_net_set_batch(net, 9), BN_ERR_INTERNAL, "outside 1..8");
    float *x = bn_blob_host_wr(net->input);
    float *y = bn_blob_host_wr(net->labels);
    for (size_t i = 0; i < bn_blob_count(net->input); i++) x[i] = (float)(i % 7) / 7.0f;
    for (int i = 0; i < 3; i++) y[i] = (float)i;
    CHECK_OK(bn_net_forward(net, 1));
    double loss, correct;
    CHECK_OK(bn_net_metrics(net, &loss, &correct));
    CHECK(loss > 0 && isfinite(loss) && correct >= 0 && correct <= 3);
    bn_net_free(net);
    return BN_PASS;
}
