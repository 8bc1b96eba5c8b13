/* cmd_test.c - `blobnet test MODEL WEIGHTS [options]`. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "data_source.h"
#include "core/plugin.h"
#include "io/image.h"
#include "train/evaluate.h"
#include "train/trainer.h"

enum { OPT_DATA = 256, OPT_DATASET, OPT_DEVICE, OPT_THREADS, OPT_BATCH, OPT_PLUGIN, OPT_MISCLASSIFIED, OPT_PRECISION,
       OPT_DATA_OPTION, OPT_HELP };

static const struct option test_options[] = {
    {"data", required_argument, 0, OPT_DATA},   {"dataset", required_argument, 0, OPT_DATASET},
    {"device", required_argument, 0, OPT_DEVICE}, {"threads", required_argument, 0, OPT_THREADS}, {"batch", required_argument, 0, OPT_BATCH},
    {"plugin", required_argument, 0, OPT_PLUGIN}, {"misclassified", required_argument, 0, OPT_MISCLASSIFIED},
    {"precision", required_argument, 0, OPT_PRECISION}, {"data-option", required_argument, 0, OPT_DATA_OPTION},
    {"help", no_argument, 0, OPT_HELP},
    {0, 0, 0, 0},
};

typedef struct test_args {
    const char *model, *weights, *device, *misclassified;
    bn_data_flags data;
    long batch;
    int bf16;
} test_args;

static int parse_args(int argc, char **argv, test_args *a)
{
    *a = (test_args){.batch = 1000, .data = {.holdout = -1}};
    opterr = 0;
    optind = 1;
    int opt;
    while ((opt = getopt_long(argc, argv, ":", test_options, NULL)) != -1) {
        switch (opt) {
        case OPT_DATA: a->data.path = optarg; break;
        case OPT_DATASET: a->data.dataset = optarg; break;
        case OPT_DATA_OPTION: BN_TRY(bn_data_flags_add_option(&a->data, optarg)); break;
        case OPT_DEVICE: a->device = optarg; break;
        case OPT_THREADS: BN_TRY(bn_cli_threads(optarg)); break;
        case OPT_BATCH: BN_TRY(bn_cli_int("--batch", optarg, 1, 65536, &a->batch)); break;
        case OPT_PLUGIN: BN_TRY(bn_plugin_load(optarg)); break;
        case OPT_MISCLASSIFIED: a->misclassified = optarg; break;
        case OPT_PRECISION: BN_TRY(bn_cli_precision(optarg, &a->bf16)); break;
        case OPT_HELP: return -1;
        default: return bn_cli_option_error(opt, optopt, argv[optind - 1]);
        }
    }
    if (argc - optind != 2)
        return bn_error(BN_ERR_USAGE, "test: expected MODEL and WEIGHTS (see 'blobnet test --help')");
    a->model = argv[optind];
    a->weights = argv[optind + 1];
    return a->misclassified ? bn_cli_check_output_dir("--misclassified", a->misclassified) : BN_OK;
}

/* The confusion matrix (rows: true class, columns: predicted) with each class's accuracy. */
static bn_status print_confusion(const bn_dataset *test, const int *pred, int classes)
{
    long *m = calloc((size_t)classes * classes, sizeof *m);
    if (!m) return bn_error(BN_ERR_NOMEM, "out of memory for the confusion matrix");
    for (int i = 0; i < test->count; i++) m[(size_t)test->labels[i] * classes + pred[i]]++;
    printf("confusion matrix (rows: true class, columns: predicted class):\n  true");
    for (int c = 0; c < classes; c++) printf(" %6d", c);
    printf("   accuracy\n");
    for (int t = 0; t < classes; t++) {
        long total = 0;
        printf("  %4d", t);
        for (int c = 0; c < classes; c++) {
            printf(" %6ld", m[(size_t)t * classes + c]);
            total += m[(size_t)t * classes + c];
        }
        if (total) printf("   %7.2f%%\n", 100.0 * m[(size_t)t * classes + t] / total);
        else printf("         -\n");
    }
    free(m);
    return BN_OK;
}

/* Whether the test set's examples can be written as PNG images: 8-bit, gray or RGB. */
static bn_status check_writable_images(const bn_dataset *test)
{
    if (test->values || (test->channels != 1 && test->channels != 3))
        return bn_error(BN_ERR_USAGE, "--misclassified: the test examples are %s of %d channel%s; only 8-bit gray or "
                        "RGB examples are written as images", test->values ? "floats" : "bytes", test->channels,
                        test->channels == 1 ? "" : "s");
    return BN_OK;
}

/* Each misclassified image as DIR/<index>-true<label>-pred<class>.png (channel planes interleaved
 * into rgb, a caller's buffer of one example). */
static bn_status write_one(const char *path, const bn_dataset *test, int i, unsigned char *rgb)
{
    const size_t plane = (size_t)test->height * test->width, size = plane * test->channels;
    const unsigned char *src = test->pixels + (size_t)i * size;
    for (size_t p = 0; p < plane; p++)
        for (int c = 0; c < test->channels; c++) rgb[p * test->channels + c] = src[c * plane + p];
    return bn_image_write_png_color(path, rgb, test->channels, test->width, test->height);
}

static bn_status write_misclassified(const char *dir, const bn_dataset *test, const int *pred)
{
    if (mkdir(dir, 0777) != 0 && errno != EEXIST)
        return bn_error(BN_ERR_IO, "%s: cannot create the directory: %s", dir, strerror(errno));
    unsigned char *rgb = malloc(bn_dataset_example_size(test));
    if (!rgb) return bn_error(BN_ERR_NOMEM, "out of memory for an image");
    int written = 0;
    bn_status s = BN_OK;
    for (int i = 0; s == BN_OK && i < test->count; i++) {
        if (pred[i] == test->labels[i]) continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%05d-true%d-pred%d.png", dir, i, test->labels[i], pred[i]);
        s = write_one(path, test, i, rgb);
        written += s == BN_OK;
    }
    free(rgb);
    BN_TRY(s);
    printf("misclassified: %d images written to %s\n", written, dir);
    return BN_OK;
}

static bn_status run(const test_args *a, bn_net **net, bn_data_source *src, bn_dataset *test, int **pred)
{
    BN_TRY(bn_net_from_file(a->model, net));
    bn_ctx *ctx;
    BN_TRY(bn_data_source_resolve(&a->data, *net, src));
    /* The test set is read while the device's context is made, as train reads its data. */
    bn_cli_opening opening;
    BN_TRY(bn_cli_open_device_begin(a->device, 0, &opening));
    bn_cli_open_device_wait_driver(&opening);
    bn_status data = bn_data_source_load(src, (*net)->input_shape, 0, 0, 0, test);
    BN_TRY(bn_cli_open_device_end(&opening, &ctx));
    BN_TRY(bn_cli_apply_precision(a->bf16, ctx));
    BN_TRY(data);
    (*net)->relu_in_place = 1; /* on the CPU, ReLUs over their input where they may */
    BN_TRY(bn_net_setup(*net, (int)a->batch, ctx, 0, (*net)->train.seed));
    BN_TRY(bn_data_check_model(*net, test, src, "test"));
    if (a->misclassified) BN_TRY(check_writable_images(test));
    if (!bn_net_loss_layer(*net)) return bn_error(BN_ERR_USAGE, "%s: testing needs a loss layer at the end", a->model);
    BN_TRY(bn_checkpoint_load_weights(a->weights, *net));
    double loss, acc;
    if (!(*pred = malloc((size_t)test->count * sizeof **pred))) return bn_error(BN_ERR_NOMEM, "out of memory");
    BN_TRY(bn_evaluate_each(*net, test, NULL, *pred, &loss, &acc));
    long correct = (long)(acc * test->count + 0.5);
    printf("test loss: %.4f\n", loss);
    printf("test accuracy: %.2f%% (%ld/%d)\n", 100.0 * acc, correct, test->count);
    int outputs = bn_output_size(*net);
    BN_TRY(print_confusion(test, *pred, outputs > test->num_classes ? outputs : test->num_classes));
    if (a->misclassified) BN_TRY(write_misclassified(a->misclassified, test, *pred));
    return BN_OK;
}

int bn_cmd_test(int argc, char **argv)
{
    test_args a;
    int p = parse_args(argc, argv, &a);
    if (p < 0) {
        bn_print_command_help("test");
        return 0;
    }
    if (p != BN_OK) return bn_fail((bn_status)p);
    bn_net *net = NULL;
    bn_dataset test = {0};
    bn_data_source src = {0};
    int *pred = NULL;
    bn_status s = run(&a, &net, &src, &test, &pred);
    free(pred);
    bn_net_free(net);
    bn_dataset_free(&test);
    bn_data_source_free(&src);
    bn_ctx_close();
    return s == BN_OK ? 0 : bn_fail(s);
}
