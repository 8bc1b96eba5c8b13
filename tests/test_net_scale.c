/* test_net_scale.c - networks of many layers: names checked, looked up and counted through the
 * name table (src/core/name_table.c) so that reading and setting up take time linear in the
 * layers; and ReLUs run in place over their input on the CPU (bn_layer.in_place) where the
 * graph allows, with the same gradients as ReLUs with blobs of their own. */
#include <stdlib.h>

#include "core/clock.h"
#include "core/name_table.h"
#include "core/net.h"
#include "testing.h"

#define INPUT "[input]\nchannels=1\nheight=2\nwidth=2\n"

BN_TEST(net_scale_name_table_stores_and_replaces)
{
    bn_name_table *t = bn_name_table_new();
    CHECK(t != NULL);
    char name[32];
    for (int i = 0; i < 1000; i++) {
        snprintf(name, sizeof name, "layer%d", i);
        CHECK(bn_name_table_set(t, name, i) == 0);
    }
    CHECK(bn_name_table_get(t, "layer0") == 0 && bn_name_table_get(t, "layer999") == 999);
    CHECK(bn_name_table_get(t, "layer1000") == -1 && bn_name_table_get(t, "") == -1);
    CHECK(bn_name_table_set(t, "layer7", 70) == 0 && bn_name_table_get(t, "layer7") == 70);
    CHECK(bn_name_table_get(NULL, "layer7") == -1);
    bn_name_table_free(t);
    return BN_PASS;
}

BN_TEST(net_scale_duplicate_names_are_refused_with_their_lines)
{
    bn_net *net = NULL;
    CHECK_ERR(bn_net_from_text(INPUT "[relu]\nname=a\n[relu]\n[relu]\nname=a\n", "dup.cfg", &net), BN_ERR_USAGE,
              "dup.cfg:9: [relu] layer name 'a' is used twice (also at line 5)");
    /* A default name counts the layers of its type before it: the third ReLU is relu3, the
     * name the first one took. */
    CHECK_ERR(bn_net_from_text(INPUT "[relu]\nname=relu3\n[relu]\n[relu]\n", "dup.cfg", &net), BN_ERR_USAGE,
              "layer name 'relu3' is used twice (also at line 5)");
    CHECK(net == NULL);
    return BN_PASS;
}

/* INPUT, n ReLUs, a dense layer that names the last of them, and the loss. */
static char *relu_chain(int n)
{
    size_t cap = 256 + (size_t)n * 8;
    char *text = malloc(cap);
    if (!text) return NULL;
    size_t len = (size_t)snprintf(text, cap, "%s", INPUT);
    for (int i = 0; i < n; i++) len += (size_t)snprintf(text + len, cap - len, "[relu]\n");
    snprintf(text + len, cap - len, "[dense]\ninput=relu%d\noutputs=2\n[softmax_ce]\n", n);
    return text;
}

BN_TEST(net_scale_twenty_thousand_layers_set_up_in_well_under_a_second)
{
    const int n = 20000;
    char *text = relu_chain(n);
    CHECK(text != NULL);
    double start = bn_clock_seconds();
    bn_net *net;
    bn_status s = bn_net_from_text(text, "chain.cfg", &net);
    free(text);
    CHECK_OK(s);
    net->relu_in_place = 1;
    CHECK_OK(bn_net_setup(net, 4, NULL, 0, 1));
    double seconds = bn_clock_seconds() - start;
    /* Each layer compared with every one before it took seconds here; a generous bound. Under
     * AddressSanitizer every access is checked and the same work takes several times as long, so
     * there the time is printed, not bounded. */
#if defined(__SANITIZE_ADDRESS__)
    printf("    %d layers read and set up in %.2f s (AddressSanitizer: not bounded)\n", n + 2, seconds);
#else
    CHECK_MSG(seconds < 2.0, "%d layers read and set up in %.2f s", n + 2, seconds);
#endif
    CHECK(net->num_layers == n + 2);
    CHECK(bn_net_find_layer(net, "relu20000") == net->layers[n - 1]);
    CHECK(bn_net_find_layer(net, "dense1") == net->layers[n] && bn_net_find_layer(net, "relu20001") == NULL);
    CHECK(net->layers[n]->sources[0] == n - 1);
    /* All but the first ReLU (which reads the data) run in place over it. */
    CHECK(!net->layers[0]->in_place && net->layers[1]->in_place && net->layers[n - 1]->in_place);
    CHECK(net->layers[n - 1]->out == net->layers[0]->out);
    bn_net_free(net);
    return BN_PASS;
}

/* dense d -> relu r -> dense e -> loss, where r may run in place over d's output. */
#define SHAREABLE INPUT "[dense]\nname=d\noutputs=3\n[relu]\nname=r\n[dense]\nname=e\noutputs=2\n[softmax_ce]\n"

static bn_status make(const char *text, int in_place, int want_input_grad, bn_net **net)
{
    BN_TRY(bn_net_from_text(text, "inplace.cfg", net));
    (*net)->relu_in_place = in_place;
    return bn_net_setup(*net, 2, NULL, want_input_grad, 5);
}

BN_TEST(net_scale_relu_shares_its_producers_blobs_only_where_allowed)
{
    bn_net *net;
    CHECK_OK(make(SHAREABLE, 1, 0, &net));
    bn_layer *d = bn_net_find_layer(net, "d"), *r = bn_net_find_layer(net, "r");
    CHECK(r->in_place && r->out == d->out && r->out_grad == d->out_grad && r->in == r->out);
    CHECK(r->in_grad == r->out_grad && !d->in_place);
    /* Its output after the step is the ReLU's, its gradient the dense layer's. */
    CHECK(bn_net_blob_unwritten(net, 0, 0) && !bn_net_blob_unwritten(net, 0, 1));
    CHECK(!bn_net_blob_unwritten(net, 1, 0) && bn_net_blob_unwritten(net, 1, 1));
    bn_net_free(net);

    /* Off unless asked for. */
    CHECK_OK(make(SHAREABLE, 0, 0, &net));
    CHECK(!net->layers[1]->in_place && net->layers[1]->out != net->layers[0]->out);
    bn_net_free(net);

    /* d has a second reader, which needs its output as it was. */
    CHECK_OK(make(INPUT "[dense]\nname=d\noutputs=3\n[relu]\nname=r\n[add]\ninput=r,d\n[dense]\noutputs=2\n"
                  "[softmax_ce]\n", 1, 0, &net));
    CHECK(!bn_net_find_layer(net, "r")->in_place);
    CHECK(bn_net_find_layer(net, "r")->out != bn_net_find_layer(net, "d")->out);
    bn_net_free(net);

    /* A sigmoid's backward pass reads its output; the data is not a layer's output. */
    CHECK_OK(make(INPUT "[relu]\nname=first\n[dense]\noutputs=3\n[sigmoid]\n[relu]\nname=r\n[dense]\noutputs=2\n"
                  "[softmax_ce]\n", 1, 0, &net));
    CHECK(!bn_net_find_layer(net, "first")->in_place && !bn_net_find_layer(net, "r")->in_place);
    bn_net_free(net);
    return BN_PASS;
}

/* One training pass of the net on fixed inputs and labels 0, 1. */
static int one_pass(bn_net *net)
{
    float *x = bn_blob_host_wr(net->input), *y = bn_blob_host_wr(net->labels);
    CHECK(x && y);
    for (int i = 0; i < 8; i++) x[i] = (float)((i * 5) % 7) / 7.0f - 0.4f;
    y[0] = 0, y[1] = 1;
    CHECK_OK(bn_net_zero_grad(net));
    CHECK_OK(bn_net_forward(net, 1));
    CHECK_OK(bn_net_backward(net));
    return BN_PASS;
}

static int same_floats(bn_blob *a, bn_blob *b)
{
    const float *va = bn_blob_host_rd(a), *vb = bn_blob_host_rd(b);
    CHECK(va && vb && bn_blob_count(a) == bn_blob_count(b));
    CHECK_MSG(memcmp(va, vb, bn_blob_count(a) * sizeof *va) == 0, "%s differs", a->name);
    return BN_PASS;
}

BN_TEST(net_scale_in_place_relus_give_the_same_gradients)
{
    /* A chain of ReLUs in place over a dense layer, and one after a convolution, which feeds
     * a second dense layer. */
    static const char text[] = INPUT "[conv2d]\nfilters=2\nsize=1\n[relu]\n[dense]\noutputs=4\n[relu]\n[relu]\n"
                                     "[relu]\n[dense]\noutputs=2\n[softmax_ce]\n";
    bn_net *shared, *own;
    CHECK_OK(make(text, 1, 1, &shared));
    CHECK_OK(make(text, 0, 1, &own));
    int in_place = 0;
    for (int i = 0; i < shared->num_layers; i++) in_place += shared->layers[i]->in_place;
    CHECK_MSG(in_place == 4, "%d ReLUs in place", in_place);
    CHECK(one_pass(shared) == BN_PASS && one_pass(own) == BN_PASS);
    CHECK(same_floats(shared->grads, own->grads) == BN_PASS);
    CHECK(same_floats(shared->input_grad, own->input_grad) == BN_PASS);
    CHECK(same_floats(shared->metrics, own->metrics) == BN_PASS);
    CHECK(same_floats(bn_net_output(shared), bn_net_output(own)) == BN_PASS);
    /* Each ReLU's output and the gradients that stay the layers' own match too. */
    for (int i = 0; i + 1 < shared->num_layers; i++) {
        if (!bn_net_blob_unwritten(shared, i, 0))
            CHECK(same_floats(shared->layers[i]->out, own->layers[i]->out) == BN_PASS);
        if (!bn_net_blob_unwritten(shared, i, 1))
            CHECK(same_floats(shared->layers[i]->out_grad, own->layers[i]->out_grad) == BN_PASS);
    }
    bn_net_free(shared);
    bn_net_free(own);
    return BN_PASS;
}

/* On the CPU a convolution and an add do the passes of the ReLU in place after them
 * (bn_layer.cpu_relu): the same bits as the ReLU's own passes, which run where nothing is in
 * place. The convolutions take both of conv2d's CPU methods: columns over 2 channels, the shifted
 * products over 8 at stride 1. */
/* One training pass of two networks of the same layers (batch 5, three classes) on the same
 * data: the same bits in the parameter and input gradients, the output, and every blob that both
 * write. */
static int same_training_pass(bn_net *a, bn_net *b)
{
    bn_net *nets[2] = {a, b};
    for (int k = 0; k < 2; k++) {
        float *x = bn_blob_host_wr(nets[k]->input), *y = bn_blob_host_wr(nets[k]->labels);
        CHECK(x && y);
        for (size_t i = 0; i < bn_blob_count(nets[k]->input); i++) x[i] = (float)((i * 7) % 11) / 5.0f - 1.0f;
        for (int i = 0; i < 5; i++) y[i] = (float)(i % 3);
        CHECK_OK(bn_net_zero_grad(nets[k]));
        CHECK_OK(bn_net_forward(nets[k], 1));
        CHECK_OK(bn_net_backward(nets[k]));
    }
    CHECK(same_floats(a->grads, b->grads) == BN_PASS);
    CHECK(same_floats(a->input_grad, b->input_grad) == BN_PASS);
    CHECK(same_floats(bn_net_output(a), bn_net_output(b)) == BN_PASS);
    for (int i = 0; i + 1 < a->num_layers; i++) {
        if (!bn_net_blob_unwritten(a, i, 0) && !bn_net_blob_unwritten(b, i, 0))
            CHECK_MSG(same_floats(a->layers[i]->out, b->layers[i]->out) == BN_PASS, "%s's output", a->layers[i]->name);
        if (!bn_net_blob_unwritten(a, i, 1) && !bn_net_blob_unwritten(b, i, 1))
            CHECK_MSG(same_floats(a->layers[i]->out_grad, b->layers[i]->out_grad) == BN_PASS, "%s's gradient",
                      a->layers[i]->name);
    }
    return BN_PASS;
}

BN_TEST(net_scale_relus_done_by_their_producers_give_the_same_bits)
{
    static const char text[] = "[input]\nchannels=2\nheight=9\nwidth=13\n"
                               "[conv2d]\nname=a\nfilters=8\nsize=3\npad=1\n[relu]\nname=ra\n"
                               "[conv2d]\nname=b\nfilters=8\nsize=3\npad=1\n[relu]\nname=rb\n"
                               "[conv2d]\nname=c\nfilters=8\nsize=3\npad=1\n"
                               "[add]\nname=s\ninput=c,ra\n[relu]\nname=rs\n"
                               "[dense]\noutputs=3\n[softmax_ce]\n";
    bn_net *fused, *own;
    CHECK_OK(bn_net_from_text(text, "fused.cfg", &fused));
    CHECK_OK(bn_net_from_text(text, "fused.cfg", &own));
    fused->relu_in_place = 1;
    CHECK_OK(bn_net_setup(fused, 5, NULL, 1, 9));
    CHECK_OK(bn_net_setup(own, 5, NULL, 1, 9));
    CHECK(bn_net_find_layer(fused, "a")->cpu_relu && bn_net_find_layer(fused, "ra")->cpu_fused);
    CHECK(bn_net_find_layer(fused, "s")->cpu_relu && bn_net_find_layer(fused, "rs")->cpu_fused);
    CHECK(!bn_net_find_layer(fused, "c")->cpu_relu && !bn_net_find_layer(own, "a")->cpu_relu);
    int r = same_training_pass(fused, own);
    bn_net_free(fused);
    bn_net_free(own);
    return r;
}

/* A convolution whose output only a plain sum reads writes that sum from its CPU forward and
 * reads its gradient (bn_layer.cpu_sum_into), on each of the CPU paths: a few-channel
 * convolution from the input, a Winograd 3x3 (with the sum's ReLU) and a 1x1 on the column
 * path. The same network with coefficients of 1 on its sums (which keeps every sum a pass of its
 * own) gives the same bits. */
BN_TEST(net_scale_sums_written_by_their_last_producer_give_the_same_bits)
{
    static const char body[] = "[input]\nchannels=2\nheight=9\nwidth=13\n"
                               "[conv2d]\nname=a\nfilters=8\nsize=3\npad=1\n[relu]\nname=ra\n"
                               "[conv2d]\nname=c1\ninput=input\nfilters=8\nsize=3\npad=1\n"
                               "[add]\nname=s1\ninput=ra,c1\n%s"
                               "[conv2d]\nname=c2\nfilters=8\nsize=3\npad=1\n"
                               "[add]\nname=s2\ninput=c2,s1\n%s[relu]\nname=rs2\n"
                               "[conv2d]\nname=c3\nfilters=8\nsize=1\n"
                               "[add]\nname=s3\ninput=rs2,c3\n%s"
                               "[dense]\noutputs=3\n[softmax_ce]\n";
    char plain[1024], weighted[1024];
    snprintf(plain, sizeof plain, body, "", "", "");
    snprintf(weighted, sizeof weighted, body, "coeff=1,1\n", "coeff=1,1\n", "coeff=1,1\n");
    bn_net *fused, *own;
    CHECK_OK(bn_net_from_text(plain, "plain.cfg", &fused));
    CHECK_OK(bn_net_from_text(weighted, "weighted.cfg", &own));
    fused->relu_in_place = own->relu_in_place = 1;
    CHECK_OK(bn_net_setup(fused, 5, NULL, 1, 9));
    CHECK_OK(bn_net_setup(own, 5, NULL, 1, 9));
    static const char *const producers[] = {"c1", "c2", "c3"}, *const sums[] = {"s1", "s2", "s3"};
    for (int k = 0; k < 3; k++) {
        const bn_layer *p = bn_net_find_layer(fused, producers[k]), *a = bn_net_find_layer(fused, sums[k]);
        CHECK_MSG(p->cpu_sum_into == a && a->cpu_summed_input > 0, "%s does not write %s", producers[k], sums[k]);
        CHECK(!bn_net_find_layer(own, producers[k])->cpu_sum_into && !bn_net_find_layer(own, sums[k])->cpu_summed_input);
    }
    CHECK(bn_net_find_layer(fused, "s2")->cpu_relu);
    int r = same_training_pass(fused, own);
    bn_net_free(fused);
    bn_net_free(own);
    return r;
}
