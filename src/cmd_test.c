/* cmd_test.c - `blobnet test MODEL WEIGHTS [options]`. */
#include <getopt.h>
#include <stdio.h>

#include "cli.h"
#include "trainer.h"

enum { OPT_DATA = 256, OPT_DATASET, OPT_DEVICE, OPT_BATCH, OPT_HELP };

static const struct option test_options[] = {
    {"data", required_argument, 0, OPT_DATA},   {"dataset", required_argument, 0, OPT_DATASET},
    {"device", required_argument, 0, OPT_DEVICE}, {"batch", required_argument, 0, OPT_BATCH},
    {"help", no_argument, 0, OPT_HELP},         {0, 0, 0, 0},
};

typedef struct test_args {
    const char *model, *weights, *data, *dataset, *device;
    long batch;
} test_args;

static int parse_args(int argc, char **argv, test_args *a)
{
    *a = (test_args){.dataset = "mnist", .device = "auto", .batch = 1000};
    opterr = 0;
    optind = 1;
    int opt;
    while ((opt = getopt_long(argc, argv, ":", test_options, NULL)) != -1) {
        switch (opt) {
        case OPT_DATA: a->data = optarg; break;
        case OPT_DATASET: a->dataset = optarg; break;
        case OPT_DEVICE: a->device = optarg; break;
        case OPT_BATCH: BN_TRY(bn_cli_int("--batch", optarg, 1, 65536, &a->batch)); break;
        case OPT_HELP: return -1;
        default: return bn_cli_option_error(opt, optopt, argv[optind - 1]);
        }
    }
    if (argc - optind != 2)
        return bn_error(BN_ERR_USAGE, "test: expected MODEL and WEIGHTS (see 'blobnet test --help')");
    a->model = argv[optind];
    a->weights = argv[optind + 1];
    return BN_OK;
}

static bn_status run(const test_args *a, bn_net **net, bn_dataset *test)
{
    BN_TRY(bn_net_from_file(a->model, net));
    const char *dir;
    bn_ctx *ctx;
    BN_TRY(bn_cli_data_dir(a->data, a->dataset, &dir));
    BN_TRY(bn_cli_open_device(a->device, 0, &ctx));
    BN_TRY(bn_dataset_load(dir, 0, 0, test));
    bn_shape s = (*net)->input_shape;
    if (s.c != test->channels || s.h != test->height || s.w != test->width)
        return bn_error(BN_ERR_USAGE, "%s expects %dx%dx%d inputs but %s holds %dx%dx%d images", a->model, s.c, s.h,
                        s.w, dir, test->channels, test->height, test->width);
    BN_TRY(bn_net_setup(*net, (int)a->batch, ctx, 0, (*net)->train.seed));
    if (!bn_net_loss_layer(*net)) return bn_error(BN_ERR_USAGE, "%s: testing needs a loss layer at the end", a->model);
    BN_TRY(bn_checkpoint_load_weights(a->weights, *net));
    double loss, acc;
    BN_TRY(bn_evaluate(*net, test, &loss, &acc));
    long correct = (long)(acc * test->count + 0.5);
    printf("test loss: %.4f\n", loss);
    printf("test accuracy: %.2f%% (%ld/%d)\n", 100.0 * acc, correct, test->count);
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
    bn_status s = run(&a, &net, &test);
    bn_net_free(net);
    bn_dataset_free(&test);
    bn_ctx_close();
    return s == BN_OK ? 0 : bn_fail(s);
}
