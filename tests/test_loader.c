/* The batch loader: order, standardisation and partial batches on the CPU path. */
#include <stdlib.h>

#include "testing.h"
#include "train/loader.h"

static unsigned char pixels[5 * 4];
static unsigned char labels[5] = {3, 1, 4, 1, 5};

BN_TEST(loader_fills_standardised_batches_in_order)
{
    for (int i = 0; i < 20; i++) pixels[i] = (unsigned char)(i * 12);
    bn_dataset d = {.count = 5, .channels = 1, .height = 2, .width = 2, .num_classes = 10,
                    .pixels = pixels, .labels = labels};
    bn_net *net;
    CHECK_OK(bn_net_from_text("[input]\nchannels=1\nheight=2\nwidth=2\nmean=0.5\nstd=0.25\n[dense]\noutputs=2\n",
                              "l.cfg", &net));
    CHECK(net->input_mean == 0.5f && net->input_std == 0.25f);
    CHECK_OK(bn_net_setup(net, 3, NULL, 0, 1));
    bn_loader ld;
    CHECK_OK(bn_loader_init(&ld, &d, NULL));
    CHECK_OK(bn_loader_set_order(&ld, 0, 0));
    CHECK_OK(bn_loader_fill(&ld, net, 3, 2)); /* the partial last batch: examples 3 and 4 */
    CHECK(net->batch == 2 && net->input->n == 2);
    const float *x = bn_blob_host_rd(net->input), *y = bn_blob_host_rd(net->labels);
    for (int i = 0; i < 8; i++) CHECK_NEAR(x[i], ((12 + i) * 12 / 255.0 - 0.5) / 0.25, 1e-5);
    CHECK(y[0] == 1.0f && y[1] == 5.0f);
    CHECK_OK(bn_loader_set_order(&ld, 1, 42));
    int seen[5] = {0};
    for (int i = 0; i < 5; i++) seen[ld.order[i]]++;
    for (int i = 0; i < 5; i++) CHECK(seen[i] == 1);
    CHECK_ERR(bn_loader_fill(&ld, net, 4, 2), BN_ERR_INTERNAL, "outside the dataset");
    bn_loader_free(&ld);
    bn_net_free(net);
    return BN_PASS;
}
