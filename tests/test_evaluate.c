/* test_evaluate.c - per-example evaluation against bn_evaluate, and `blobnet test`'s
 * confusion matrix, per-class accuracy and --misclassified images on real MNIST. */
#include "idx.h"
#include "testing.h"

#include <dirent.h>
#include <stdlib.h>

#include "io/image.h"
#include "train/evaluate.h"
#include "train/trainer.h"

#define COUNT 10

static const char model[] = "[input]\nchannels=1\nheight=3\nwidth=3\nmean=0.5\nstd=0.5\n"
                            "[dense]\noutputs=4\n[softmax_ce]\n";

BN_TEST(evaluate_each_agrees_with_evaluate_and_keeps_every_output)
{
    unsigned char pixels[COUNT * 9];
    uint16_t labels[COUNT];
    for (int i = 0; i < COUNT * 9; i++) pixels[i] = (unsigned char)(i * 37 % 256);
    for (int i = 0; i < COUNT; i++) labels[i] = (uint16_t)(i % 4);
    bn_dataset d = {.count = COUNT, .channels = 1, .height = 3, .width = 3, .num_classes = 10,
                    .pixels = pixels, .labels = labels};
    bn_net *net;
    CHECK_OK(bn_net_from_text(model, "eval.cfg", &net));
    CHECK_OK(bn_net_setup(net, 4, NULL, 0, 7)); /* batches of 4, 4 and a partial 2 */
    CHECK(bn_output_size(net) == 4);
    double loss, acc, loss_each, acc_each;
    CHECK_OK(bn_evaluate(net, &d, &loss, &acc));
    float probs[COUNT * 4];
    int pred[COUNT];
    CHECK_OK(bn_evaluate_each(net, &d, probs, pred, &loss_each, &acc_each));
    CHECK(loss == loss_each && acc == acc_each);
    int correct = 0;
    for (int i = 0; i < COUNT; i++) {
        double sum = 0;
        for (int k = 0; k < 4; k++) sum += probs[i * 4 + k];
        CHECK_NEAR(sum, 1.0, 1e-6);
        CHECK(pred[i] == bn_argmax(probs + i * 4, 4));
        correct += pred[i] == labels[i];
    }
    CHECK_NEAR(acc, (double)correct / COUNT, 1e-7); /* a float division, as in bn_evaluate */
    /* The same outputs as one forward pass over each batch. */
    CHECK_OK(bn_net_set_batch(net, 2));
    float *x = bn_blob_host_wr(net->input), *y = bn_blob_host_wr(net->labels);
    for (int i = 0; i < 18; i++) x[i] = (pixels[8 * 9 + i] / 255.0f - 0.5f) / 0.5f;
    y[0] = y[1] = 0;
    CHECK_OK(bn_net_forward(net, 0));
    const float *out = bn_blob_host_rd(bn_net_output(net));
    for (int k = 0; k < 8; k++) CHECK_NEAR(out[k], probs[8 * 4 + k], 1e-6);
    CHECK_OK(bn_evaluate_each(net, &d, NULL, pred, NULL, NULL));
    bn_net_free(net);
    return BN_PASS;
}

BN_TEST(evaluate_argmax_takes_the_first_of_ties)
{
    const float v[] = {0.1f, 0.4f, 0.4f, 0.1f};
    CHECK(bn_argmax(v, 4) == 1);
    CHECK(bn_argmax(v, 1) == 0);
    const float w[] = {-3.0f, -1.0f, -2.0f};
    CHECK(bn_argmax(w, 3) == 1);
    return BN_PASS;
}

static char out[1 << 16];

/* The numbers of the confusion matrix's row for class t: m[0..9] and the row's accuracy. */
static int parse_row(const char *text, int t, long *m, double *acc)
{
    const char *p = strstr(text, "accuracy\n");
    if (!p) return 0;
    p += strlen("accuracy\n");
    for (int r = 0; r < t; r++) {
        p = strchr(p, '\n');
        if (!p) return 0;
        p++;
    }
    int row, used;
    if (sscanf(p, "%d%n", &row, &used) != 1 || row != t) return 0;
    p += used;
    for (int c = 0; c < 10; c++) {
        if (sscanf(p, "%ld%n", &m[c], &used) != 1) return 0;
        p += used;
    }
    return sscanf(p, "%lf%%", acc) == 1;
}

BN_TEST(evaluate_cli_test_prints_confusion_and_writes_misclassified)
{
    const char *data = bn_test_data_dir();
    if (!data) BN_SKIP_TEST("BLOBNET_TEST_DATA not set");
    char weights[512], dir[512], cmd[2048];
    snprintf(weights, sizeof weights, "%s/confusion.safetensors", bn_test_tmpdir());
    snprintf(dir, sizeof dir, "%s/misclassified", bn_test_tmpdir());
    snprintf(cmd, sizeof cmd, "%s train models/lenet.cfg --device cpu --data %s --epochs 1 --train-limit 1000 "
             "--quiet --save %s", bn_test_cli(), data, weights);
    CHECK_MSG(bn_test_run(cmd, out, sizeof out) == 0, "%s", out);
    snprintf(cmd, sizeof cmd, "%s test models/lenet.cfg %s --device cpu --data %s --misclassified %s", bn_test_cli(),
             weights, data, dir);
    CHECK_MSG(bn_test_run(cmd, out, sizeof out) == 0, "%s", out);
    const char *line = strstr(out, "test accuracy: ");
    CHECK_MSG(line, "%s", out);
    long correct = atol(strchr(line, '(') + 1);
    CHECK(correct > 5000 && correct < 10000);

    bn_dataset test;
    CHECK_OK(bn_dataset_load(data, 0, 0, &test));
    long per_class[10] = {0}, diagonal = 0, total = 0;
    for (int i = 0; i < test.count; i++) per_class[test.labels[i]]++;
    for (int t = 0; t < 10; t++) {
        long m[10], sum = 0;
        double acc;
        CHECK_MSG(parse_row(out, t, m, &acc), "no row %d in:\n%s", t, out);
        for (int c = 0; c < 10; c++) sum += m[c];
        CHECK_MSG(sum == per_class[t], "row %d sums to %ld, the test set has %ld", t, sum, per_class[t]);
        CHECK_NEAR(acc, 100.0 * m[t] / sum, 0.006);
        diagonal += m[t];
        total += sum;
    }
    CHECK(total == 10000 && diagonal == correct);

    /* Every misclassified image, named <index>-true<label>-pred<class>.png, holds its pixels. */
    DIR *dd = opendir(dir);
    CHECK(dd != NULL);
    long files = 0;
    struct dirent *e;
    int bad = 0;
    while ((e = readdir(dd)) != NULL) {
        int index, label, pred;
        if (e->d_name[0] == '.') continue;
        files++;
        if (sscanf(e->d_name, "%5d-true%d-pred%d.png", &index, &label, &pred) != 3 || index >= test.count ||
            label != test.labels[index] || pred == label || pred < 0 || pred > 9) {
            fprintf(stderr, "    bad file name %s\n", e->d_name);
            bad++;
            continue;
        }
        if (files % 50 != 1) continue; /* read back a sample */
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        bn_image img;
        CHECK_OK(bn_image_read(path, 0, &img));
        CHECK(img.width == 28 && img.height == 28);
        CHECK(memcmp(img.pixels, test.pixels + (size_t)index * 784, 784) == 0);
        bn_image_free(&img);
    }
    closedir(dd);
    bn_dataset_free(&test);
    CHECK(bad == 0);
    CHECK_MSG(files == 10000 - correct, "%ld files for %ld misclassified", files, 10000 - correct);
    char want[600];
    snprintf(want, sizeof want, "misclassified: %ld images written to %s", files, dir);
    CHECK_MSG(strstr(out, want), "no '%s' in:\n%s", want, out);
    return BN_PASS;
}
