/* cmd_data.c - `blobnet data`: what blobnet sees in a dataset, the first command to run on new
 * data: its format, counts, shape, classes with their counts, per-channel statistics and the
 * first problem found. With MODEL, the data is read as training would read it for that model. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "core/plugin.h"
#include "data_source.h"

enum { OPT_DATA = 256, OPT_DATASET, OPT_DATA_OPTION, OPT_PLUGIN, OPT_WRITE, OPT_HELP };

static const struct option data_options[] = {
    {"data", required_argument, 0, OPT_DATA},
    {"dataset", required_argument, 0, OPT_DATASET},
    {"data-option", required_argument, 0, OPT_DATA_OPTION},
    {"plugin", required_argument, 0, OPT_PLUGIN},
    {"write", required_argument, 0, OPT_WRITE},
    {"help", no_argument, 0, OPT_HELP},
    {0, 0, 0, 0},
};

typedef struct data_args {
    const char *model;   /* NULL: the data as stored */
    bn_data_flags data;
    const bn_data_format *write;  /* --write FORMAT:PATH: the format that writes the data out */
    const char *write_path;
} data_args;

/* --write FORMAT:PATH, FORMAT one with a writer in the table. */
static bn_status parse_write(const char *text, data_args *a)
{
    const char *colon = strchr(text, ':');
    char name[64];
    if (!colon || colon == text || !colon[1] || (size_t)(colon - text) >= sizeof name)
        return bn_error(BN_ERR_USAGE, "--write: '%s' is not FORMAT:PATH", text);
    snprintf(name, sizeof name, "%.*s", (int)(colon - text), text);
    BN_TRY(bn_data_format_find(name, "--write", &a->write));
    if (!a->write->save) {
        char list[256] = "";
        for (int i = 0; i < bn_data_format_count(); i++) {
            const bn_data_format *f = bn_data_format_at(i);
            size_t len = strlen(list);
            if (f->save) snprintf(list + len, sizeof list - len, "%s%s", len ? ", " : "", f->name);
        }
        return bn_error(BN_ERR_USAGE, "--write: blobnet reads %s but does not write it; it writes %s", name, list);
    }
    a->write_path = colon + 1;
    return BN_OK;
}

static int parse_args(int argc, char **argv, data_args *a)
{
    *a = (data_args){.data = {.holdout = -1}};
    opterr = 0;
    optind = 1;
    int opt;
    while ((opt = getopt_long(argc, argv, ":", data_options, NULL)) != -1) {
        switch (opt) {
        case OPT_DATA: a->data.path = optarg; break;
        case OPT_DATASET: a->data.dataset = optarg; break;
        case OPT_DATA_OPTION: BN_TRY(bn_data_flags_add_option(&a->data, optarg)); break;
        case OPT_PLUGIN: BN_TRY(bn_plugin_load(optarg)); break;
        case OPT_WRITE: BN_TRY(parse_write(optarg, a)); break;
        case OPT_HELP: return -1;
        default: return bn_cli_option_error(opt, optopt, argv[optind - 1]);
        }
    }
    if (argc - optind > 1) return bn_error(BN_ERR_USAGE, "data: unexpected argument '%s'", argv[optind + 1]);
    a->model = optind < argc ? argv[optind] : NULL;
    return BN_OK;
}

static const char *kind(const bn_dataset *d)
{
    return d->values ? "float32" : "uint8";
}

/* The classes with their examples in each split; names where the data has them. */
static bn_status print_classes(const bn_dataset *train, const bn_dataset *test, long *counts)
{
    long *test_counts = calloc((size_t)train->num_classes, sizeof *test_counts);
    if (!test_counts) return bn_error(BN_ERR_NOMEM, "out of memory counting classes");
    bn_dataset_class_counts(train, counts);
    bn_dataset_class_counts(test, test_counts);
    printf("classes: %d\n", train->num_classes);
    printf("  %5s  %-20s %10s %10s\n", "class", "name", "training", "test");
    for (int c = 0; c < train->num_classes; c++) {
        /* Many classes (EMNIST's, a large folder's) are cut after a screenful. */
        if (c == 40 && train->num_classes > 48) {
            printf("  ... %d more\n", train->num_classes - c);
            break;
        }
        printf("  %5d  %-20s %10ld %10ld\n", c, train->class_names ? train->class_names[c] : "", counts[c],
               test_counts[c]);
    }
    for (int c = 0; c < train->num_classes; c++)
        if (test_counts[c] && !counts[c]) counts[c] = -1; /* the test split has it, training lacks it */
    free(test_counts);
    return BN_OK;
}

/* The first thing about the data that would make training go wrong quietly, or NULL. */
static const char *first_problem(const bn_dataset *train, const long *counts, const double *std, char *buf,
                                 size_t cap)
{
    for (int c = 0; c < train->num_classes; c++) {
        if (counts[c] == -1) {
            snprintf(buf, cap, "class %d is in the test set but has no training examples", c);
            return buf;
        }
        if (counts[c] == 0) {
            snprintf(buf, cap, "class %d has no examples in either set (labels skip it)", c);
            return buf;
        }
    }
    for (int c = 0; c < train->channels; c++)
        if (std[c] == 0) {
            snprintf(buf, cap, "channel %d is the same value in every training example (std 0)", c);
            return buf;
        }
    return NULL;
}

static bn_status run(const data_args *a, bn_net **net, bn_data_source *src, bn_dataset *train, bn_dataset *test)
{
    if (a->model) BN_TRY(bn_net_from_file(a->model, net));
    BN_TRY(bn_data_source_resolve(&a->data, *net, src));
    bn_shape fit = *net ? (*net)->input_shape : (bn_shape){0, 0, 0};
    BN_TRY(bn_data_source_load(src, fit, 1, 0, 0, train));
    BN_TRY(bn_data_source_load(src, fit, 0, 0, 0, test));
    if (test->channels != train->channels || test->height != train->height || test->width != train->width)
        return bn_error(BN_ERR_DATA, "%s: the training examples are %dx%dx%d but the test examples %dx%dx%d",
                        src->path, train->channels, train->height, train->width, test->channels, test->height,
                        test->width);
    if (test->num_classes > train->num_classes) train->num_classes = test->num_classes;
    test->num_classes = train->num_classes;
    printf("format: %s (%s)\n", src->format->name, src->format->reads);
    printf("path: %s\n", src->path);
    printf("training set: %d examples of %dx%dx%d %s\n", train->count, train->channels, train->height, train->width,
           kind(train));
    printf("test set: %d examples\n", test->count);
    long *counts = calloc((size_t)train->num_classes, sizeof *counts);
    double *stats = malloc(2 * (size_t)train->channels * sizeof *stats);
    bn_status s = counts && stats ? print_classes(train, test, counts) : bn_error(BN_ERR_NOMEM, "out of memory");
    if (s == BN_OK) {
        bn_dataset_stats(train, stats, stats + train->channels);
        printf("per channel, as fed (pixels / 255): ");
        for (int c = 0; c < train->channels && c < 16; c++)
            printf("%smean %.4f std %.4f", c ? ", " : "", stats[c], stats[train->channels + c]);
        printf("%s\n", train->channels > 16 ? ", ..." : "");
        char why[256];
        const char *problem = first_problem(train, counts, stats + train->channels, why, sizeof why);
        printf("first problem: %s\n", problem ? problem : "none found");
    }
    if (s == BN_OK && *net) {
        bn_shape in = (*net)->input_shape;
        if (in.c != train->channels || in.h != train->height || in.w != train->width)
            printf("model: %s expects %dx%dx%d inputs: the data does not fit it\n", a->model, in.c, in.h, in.w);
        else
            printf("model: %s takes these %dx%dx%d inputs\n", a->model, in.c, in.h, in.w);
    }
    free(counts);
    free(stats);
    if (s == BN_OK && a->write) {
        BN_TRY(a->write->save(train, test, a->write_path));
        printf("wrote %d training and %d test examples to %s as %s\n", train->count, test->count, a->write_path,
               a->write->name);
    }
    return s;
}

int bn_cmd_data(int argc, char **argv)
{
    data_args a;
    int p = parse_args(argc, argv, &a);
    if (p < 0) {
        bn_print_command_help("data");
        return 0;
    }
    if (p != BN_OK) return bn_fail((bn_status)p);
    bn_net *net = NULL;
    bn_data_source src = {0};
    bn_dataset train = {0}, test = {0};
    bn_status s = run(&a, &net, &src, &train, &test);
    if (s == BN_OK && fflush(stdout) != 0) s = bn_error(BN_ERR_IO, "standard output: cannot write");
    bn_dataset_free(&train);
    bn_dataset_free(&test);
    bn_data_source_free(&src);
    bn_net_free(net);
    return s == BN_OK ? 0 : bn_fail(s);
}
