/* cmd_predict.c - `blobnet predict MODEL WEIGHTS IMAGE... [options]`: the top classes of
 * each image (PNG, PGM, PPM or JPEG), fitted into the model's input as MNIST digits were for
 * a model of MNIST's shape, else as the folder dataset format fits its images. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "core/plugin.h"
#include "io/digit.h"
#include "io/image_fit.h"
#include "io/json.h"
#include "train/checkpoint.h"
#include "train/evaluate.h"

#define TOP_K 3

enum { OPT_INVERT = 256, OPT_JSON, OPT_DEVICE, OPT_THREADS, OPT_PLUGIN, OPT_HELP };

static const struct option predict_options[] = {
    {"invert", no_argument, 0, OPT_INVERT},       {"json", no_argument, 0, OPT_JSON},
    {"device", required_argument, 0, OPT_DEVICE}, {"threads", required_argument, 0, OPT_THREADS}, {"plugin", required_argument, 0, OPT_PLUGIN},
    {"help", no_argument, 0, OPT_HELP},           {0, 0, 0, 0},
};

typedef struct predict_args {
    const char *model, *weights, *device;
    char **images;
    int num_images, invert, json;
} predict_args;

/* Returns BN_OK, a usage error, or -1 after a request for help. */
static int parse_args(int argc, char **argv, predict_args *a)
{
    *a = (predict_args){0};
    opterr = 0;
    optind = 1;
    int opt;
    while ((opt = getopt_long(argc, argv, ":", predict_options, NULL)) != -1) {
        switch (opt) {
        case OPT_INVERT: a->invert = 1; break;
        case OPT_JSON: a->json = 1; break;
        case OPT_DEVICE: a->device = optarg; break;
        case OPT_THREADS: BN_TRY(bn_cli_threads(optarg)); break;
        case OPT_PLUGIN: BN_TRY(bn_plugin_load(optarg)); break;
        case OPT_HELP: return -1;
        default: return bn_cli_option_error(opt, optopt, argv[optind - 1]);
        }
    }
    if (argc - optind < 3)
        return bn_error(BN_ERR_USAGE, "predict: expected MODEL, WEIGHTS and at least one IMAGE "
                                      "(see 'blobnet predict --help')");
    a->model = argv[optind];
    a->weights = argv[optind + 1];
    a->images = argv + optind + 2;
    a->num_images = argc - optind - 2;
    return BN_OK;
}

/* The network with its weights, ready for batches of up to `batch` images. */
static bn_status load_model(const predict_args *a, int batch, bn_net **net)
{
    BN_TRY(bn_net_from_file(a->model, net));
    bn_shape s = (*net)->input_shape;
    if (s.c != 1 && s.c != 3)
        return bn_error(BN_ERR_USAGE, "%s: predict reads images into 1 or 3 channels, not an input of %dx%dx%d",
                        a->model, s.c, s.h, s.w);
    if (!bn_net_loss_layer(*net))
        return bn_error(BN_ERR_USAGE, "%s: predict needs class probabilities: a softmax_ce layer at the end", a->model);
    bn_ctx *ctx;
    BN_TRY(bn_cli_open_device(a->device, 0, &ctx));
    (*net)->relu_in_place = 1; /* on the CPU, ReLUs over their input where they may */
    BN_TRY(bn_net_setup(*net, batch, ctx, 0, (*net)->train.seed));
    return bn_checkpoint_load_weights(a->weights, *net);
}

/* The warnings an image that is not blank draws before it is fitted: too small to hold a
 * digit, or light on the side that should be dark. */
static void warn_about(const char *path, const bn_image *img, int invert)
{
    int longer = img->width > img->height ? img->width : img->height;
    if (longer < BN_DIGIT_MIN_SIDE)
        bn_cli_report("warning", "%s: the image is %dx%d pixels, too small to hold a digit (%d at least); the "
                                 "prediction is a guess", path, img->width, img->height, BN_DIGIT_MIN_SIDE);
    if (bn_digit_background(img) >= 128)
        bn_cli_report("warning", "%s: the background is light%s", path,
                      invert ? " after --invert: is the digit light on dark already?" : ": dark-on-light images need --invert");
}

/* MNIST's shape: its images are digits, fitted as MNIST's were (io/digit.h). */
static int is_digit_model(bn_shape s) { return s.c == 1 && s.h == 28 && s.w == 28; }

/* Reads, converts and fits one digit into out (side x side bytes). A blank image draws no
 * warning and no hint: its error says what it is, and inverting it would not help. */
static bn_status fit_digit(const char *path, int invert, int side, unsigned char *out)
{
    bn_image img;
    /* Transparent pixels become background: black for light-on-dark, white for --invert. */
    BN_TRY(bn_image_read(path, invert ? 255 : 0, &img));
    if (invert) bn_image_invert(&img);
    int blank = bn_digit_blank(&img);
    if (!blank) warn_about(path, &img, invert);
    bn_status s = bn_digit_fit(&img, side, out);
    bn_image_free(&img);
    if (s == BN_ERR_DATA) {
        char why[512];
        snprintf(why, sizeof why, "%s", bn_last_error());
        return bn_error(s, "%s: %s%s", path, why, invert || blank ? "" : " (dark-on-light images need --invert)");
    }
    return s;
}

/* Reads one image into the model's input shape s (out: C x H x W bytes): a digit for a model
 * of MNIST's shape, else the picture scaled to cover the input and cropped to its centre, as
 * the folder format makes its training images. */
static bn_status fit_image(const char *path, int invert, bn_shape s, unsigned char *out)
{
    if (is_digit_model(s)) return fit_digit(path, invert, s.h, out);
    bn_image img;
    BN_TRY(bn_image_read_color(path, s.c, &img));
    if (invert) bn_image_invert(&img);
    bn_status st = bn_image_fit_from(path, &img, s.c, s.h, s.w, out);
    bn_image_free(&img);
    return st;
}

/* Class indices of p[0..k) in order of falling probability (lower class first on ties). */
static int top_classes(const float *p, int k, int *top)
{
    int n = k < TOP_K ? k : TOP_K;
    for (int t = 0; t < n; t++) {
        int best = -1;
        for (int c = 0; c < k; c++) {
            int taken = 0;
            for (int u = 0; u < t; u++) taken |= top[u] == c;
            if (!taken && (best < 0 || p[c] > p[best])) best = c;
        }
        top[t] = best;
    }
    return n;
}

static void print_prediction(const char *path, const float *p, int k, int json)
{
    int top[TOP_K];
    int n = top_classes(p, k, top);
    if (json) {
        size_t len = bn_json_quote(NULL, 0, path);
        char *name = malloc(len + 1);
        if (name) bn_json_quote(name, len + 1, path);
        printf("{\"file\":%s,\"top\":[", name ? name : "null");
        free(name);
        for (int t = 0; t < n; t++) printf("%s{\"class\":%d,\"p\":%.6g}", t ? "," : "", top[t], p[top[t]]);
        printf("]}\n");
        return;
    }
    bn_cli_put_escaped(stdout, path);
    putchar(':');
    for (int t = 0; t < n; t++) printf("%s %d (%.2f%%)", t ? "," : "", top[t], 100.0 * p[top[t]]);
    printf("\n");
}

typedef struct predict_run {
    bn_net *net;
    bn_dataset batch;   /* the images that could be read, fitted, with dummy labels */
    int *read_ok;       /* per image given: 1 when it is in batch */
    float *probs;
} predict_run;

static bn_status run(const predict_args *a, predict_run *r, int *failures)
{
    BN_TRY(load_model(a, a->num_images < 256 ? a->num_images : 256, &r->net));
    bn_shape shape = r->net->input_shape;
    int n = a->num_images;
    size_t image_bytes = (size_t)shape.c * shape.h * shape.w;
    r->batch.pixels = malloc((size_t)n * image_bytes);
    r->batch.labels = calloc((size_t)n, sizeof *r->batch.labels);
    r->read_ok = calloc((size_t)n, sizeof *r->read_ok);
    if (!r->batch.pixels || !r->batch.labels || !r->read_ok) return bn_error(BN_ERR_NOMEM, "out of memory for images");
    r->batch = (bn_dataset){.channels = shape.c, .height = shape.h, .width = shape.w,
                            .num_classes = bn_output_size(r->net), .pixels = r->batch.pixels,
                            .labels = r->batch.labels};
    for (int i = 0; i < n; i++) {
        bn_status s = fit_image(a->images[i], a->invert, shape, r->batch.pixels + r->batch.count * image_bytes);
        if (s == BN_ERR_NOMEM || s == BN_ERR_INTERNAL) return s;
        if (s != BN_OK) {
            bn_cli_report("error", "%s", bn_last_error());
            ++*failures;
            continue;
        }
        r->read_ok[i] = 1;
        r->batch.count++;
    }
    if (r->batch.count == 0) return BN_OK;
    int k = bn_output_size(r->net);
    r->probs = malloc((size_t)r->batch.count * k * sizeof *r->probs);
    if (!r->probs) return bn_error(BN_ERR_NOMEM, "out of memory for predictions");
    BN_TRY(bn_evaluate_each(r->net, &r->batch, r->probs, NULL, NULL, NULL));
    for (int i = 0, j = 0; i < n; i++)
        if (r->read_ok[i]) print_prediction(a->images[i], r->probs + (size_t)j++ * k, k, a->json);
    return BN_OK;
}

int bn_cmd_predict(int argc, char **argv)
{
    predict_args a;
    int p = parse_args(argc, argv, &a);
    if (p < 0) {
        bn_print_command_help("predict");
        return 0;
    }
    if (p != BN_OK) return bn_fail((bn_status)p);
    predict_run r = {0};
    int failures = 0;
    bn_status s = run(&a, &r, &failures);
    bn_net_free(r.net);
    bn_dataset_free(&r.batch);
    free(r.read_ok);
    free(r.probs);
    bn_ctx_close();
    if (s != BN_OK) return bn_fail(s);
    return failures ? 1 : 0;
}
