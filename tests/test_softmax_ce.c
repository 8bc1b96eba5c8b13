/* test_softmax_ce.c - the loss layer: probabilities, loss and correct count against hand
 * values (large logits included), its gradient, bad labels, shapes and gradient checks. */
#include "layer_testing.h"
#include "layers.h"
#include "testing.h"

/* Central differences through a float32 forward agree to a few 1e-3 at worst (gradcheck.h
 * explains the choice of eps); a wrong gradient is off by far more. */
#define GRAD_TOL 1e-2

static const char *const three_classes = "[input]\nchannels=3\nheight=1\nwidth=1\n[softmax_ce]\n";

/* Loads logits and labels into a 3-class network of batch n. */
static bn_status load(bn_net **net, int n, const float *z, const float *labels)
{
    BN_TRY(lt_net(three_classes, n, 1, net));
    BN_TRY(lt_write((*net)->input, z, (size_t)n * 3));
    return lt_write((*net)->labels, labels, (size_t)n);
}

/* Example 0: logits (1, 2, 3), label 2: p = e^z / (e + e^2 + e^3) and loss -log p2.
 * Example 1: (1000, 0, -1000), label 1: p = (1, e^-1000, 0) and loss exactly 1000, finite.
 * Example 2: (5, 5, 1), label 1: the tie goes to class 0, so it is not counted correct. */
BN_TEST(softmax_ce_forward_matches_hand_values)
{
    static const float z[] = {1, 2, 3, 1000, 0, -1000, 5, 5, 1}, labels[] = {2, 1, 1};
    bn_net *net;
    CHECK_OK(load(&net, 3, z, labels));
    CHECK_OK(bn_net_forward(net, 0));
    float p[9];
    CHECK_OK(lt_read(bn_net_output(net), p, 9));
    static const double expect[] = {0.09003057, 0.24472847, 0.66524096, 1, 0, 0};
    for (int i = 0; i < 6; i++) CHECK_NEAR(p[i], expect[i], 1e-7);
    CHECK_NEAR(p[6], 0.49546264, 1e-7);
    double loss, correct;
    CHECK_OK(bn_net_metrics(net, &loss, &correct));
    double loss2 = 0.70226332; /* log(2 + e^-4): label 1 of (5, 5, 1) */
    CHECK_NEAR(loss, 0.40760596 + 1000 + loss2, 1e-4); /* a float sum near 1000 */
    CHECK(correct == 1);
    bn_net_free(net);
    return BN_PASS;
}

/* dL/dz = (p - onehot) / n, n the current batch (2 of a capacity of 3 here). */
BN_TEST(softmax_ce_gradient_is_p_minus_onehot_over_batch)
{
    static const float z[] = {1, 2, 3, 0, 0, 0, 7, 7, 7}, labels[] = {2, 0, 0};
    bn_net *net;
    CHECK_OK(load(&net, 3, z, labels));
    CHECK_OK(bn_net_set_batch(net, 2));
    CHECK_OK(bn_net_forward(net, 1));
    CHECK_OK(bn_net_backward(net));
    float dz[6];
    CHECK_OK(lt_read(net->input_grad, dz, 6));
    static const double expect[] = {0.09003057 / 2, 0.24472847 / 2, (0.66524096 - 1) / 2,
                                    (1.0 / 3 - 1) / 2, 1.0 / 6, 1.0 / 6};
    for (int i = 0; i < 6; i++) CHECK_NEAR(dz[i], expect[i], 1e-7);
    double loss, correct;
    CHECK_OK(bn_net_metrics(net, &loss, &correct));
    CHECK_NEAR(loss, 0.40760596 + 1.09861229, 1e-6); /* the third row is not in the batch */
    CHECK(correct == 2);                               /* (0, 0, 0) ties to class 0 */
    bn_net_free(net);
    return BN_PASS;
}

BN_TEST(softmax_ce_rejects_bad_labels)
{
    static const float z[] = {1, 2, 3, 1, 2, 3};
    static const struct {
        float label;
        const char *needle;
    } bad[] = {{3, "example 1 has label 3"}, {-1, "example 1 has label -1"},
               {1.5f, "example 1 has label 1.5"}, {NAN, "example 1 has label nan"}};
    for (int t = 0; t < 4; t++) {
        float labels[] = {0, bad[t].label};
        bn_net *net;
        CHECK_OK(load(&net, 2, z, labels));
        CHECK_ERR(bn_net_forward(net, 1), BN_ERR_DATA, bad[t].needle);
        bn_net_free(net);
    }
    return BN_PASS;
}

BN_TEST(softmax_ce_shapes_and_flags)
{
    bn_net *net;
    CHECK_OK(lt_net("[input]\nchannels=2\nheight=2\nwidth=3\n[softmax_ce]\n", 2, 1, &net));
    bn_layer *l = net->layers[0];
    CHECK(l->out->c == 12 && l->out->h == 1 && l->out->w == 1);
    CHECK(l->ops->is_loss && l->ops->kind == BN_NVTX_LAYER_LOSS && l->out_grad == NULL);
    CHECK(bn_net_loss_layer(net) == l && l->num_params == 0);
    bn_net_free(net);
    CHECK_ERR(lt_setup_status("[input]\nchannels=1\nheight=1\nwidth=1\n[softmax_ce]\n"), BN_ERR_USAGE,
              "needs at least 2 classes");
    CHECK_ERR(lt_setup_status("[input]\nchannels=3\nheight=1\nwidth=1\n[softmax_ce]\nclasses=3\n"), BN_ERR_USAGE,
              "unknown key 'classes'");
    return BN_PASS;
}

BN_TEST(softmax_ce_gradcheck)
{
    CHECK(lt_gradcheck_text("[input]\nchannels=2\nheight=2\nwidth=2\n[softmax_ce]\n",
                            "softmax_ce 8 classes batch 5", 5, 0, 0, 8, GRAD_TOL) == BN_PASS);
    CHECK(lt_gradcheck_text("[input]\nchannels=2\nheight=1\nwidth=1\n[softmax_ce]\n",
                            "softmax_ce 2 classes batch 3", 3, 0, 0, 2, GRAD_TOL) == BN_PASS);
    return BN_PASS;
}

/* Label smoothing s over K classes: the target (1 - s) onehot + s / K, so the loss is
 * lse - (1 - s) z[label] - s mean(z) and the gradient (p - target) / n. */
BN_TEST(softmax_ce_label_smoothing_matches_hand_values)
{
    static const float z[] = {1, 2, 3, 0.5f, -1, 2}, labels[] = {2, 0};
    bn_net *net;
    CHECK_OK(lt_net("[input]\nchannels=3\nheight=1\nwidth=1\n[softmax_ce]\nsmoothing=0.3\n", 2, 1, &net));
    CHECK_OK(lt_write(net->input, z, 6));
    CHECK_OK(lt_write(net->labels, labels, 2));
    CHECK_OK(bn_net_forward(net, 1));
    CHECK_OK(bn_net_backward(net));
    float m[2], dz[6];
    CHECK_OK(lt_read(net->metrics, m, 2));
    CHECK_OK(lt_read(net->input_grad, dz, 6));
    double want = 0.0;
    for (int i = 0; i < 2; i++) {
        const float *zi = z + 3 * i;
        double lse = log(exp(zi[0]) + exp(zi[1]) + exp(zi[2]));
        int label = (int)labels[i];
        want += lse - 0.7 * zi[label] - 0.3 * (zi[0] + zi[1] + zi[2]) / 3.0;
        for (int k = 0; k < 3; k++) {
            double target = (k == label ? 0.7 : 0.0) + 0.1;
            CHECK_NEAR(dz[3 * i + k], (exp(zi[k] - lse) - target) / 2.0, 1e-6);
        }
    }
    CHECK_NEAR(m[0], want, 1e-5);
    bn_net_free(net);
    CHECK(lt_gradcheck_text("[input]\nchannels=5\nheight=1\nwidth=1\n[softmax_ce]\nsmoothing=0.1\n",
                            "softmax_ce smoothing 0.1", 4, 0.0, 0.0, 5, GRAD_TOL) == BN_PASS);
    CHECK_ERR(lt_setup_status("[input]\nchannels=5\nheight=1\nwidth=1\n[softmax_ce]\nsmoothing=1\n"), BN_ERR_USAGE,
              "smoothing");
    return BN_PASS;
}
