/* cmd_check_layer.c - `blobnet check-layer TYPE [options]`: the check kit (layercheck.h) on one
 * layer type, printed as a table; exit 1 when a check fails. */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "check/layercheck.h"
#include "cli.h"
#include "core/plugin.h"

enum { OPT_PLUGIN = 256, OPT_INPUT, OPT_INPUTS, OPT_OPTIONS, OPT_DEVICE, OPT_BATCH, OPT_STOCHASTIC, OPT_HELP };

static const struct option check_options[] = {
    {"plugin", required_argument, 0, OPT_PLUGIN},   {"input", required_argument, 0, OPT_INPUT},
    {"inputs", required_argument, 0, OPT_INPUTS},
    {"options", required_argument, 0, OPT_OPTIONS}, {"device", required_argument, 0, OPT_DEVICE},
    {"batch", required_argument, 0, OPT_BATCH},     {"stochastic", no_argument, 0, OPT_STOCHASTIC},
    {"help", no_argument, 0, OPT_HELP},             {0, 0, 0, 0},
};

typedef struct check_args {
    bn_layercheck_opts opts;
    const char *device;
} check_args;

/* "C,H,W" with three positive integers. */
static bn_status parse_shape(const char *text, bn_shape *out)
{
    char buf[64];
    if (snprintf(buf, sizeof buf, "%s", text) >= (int)sizeof buf)
        return bn_error(BN_ERR_USAGE, "--input: '%.20s...' is too long", text);
    long dims[3];
    char *rest = buf;
    for (int i = 0; i < 3; i++) {
        char *comma = strchr(rest, ',');
        if ((i < 2) != (comma != NULL))
            return bn_error(BN_ERR_USAGE, "--input: '%s' is not C,H,W (three integers)", text);
        if (comma) *comma = '\0';
        BN_TRY(bn_cli_int("--input", rest, 1, 1 << 16, &dims[i]));
        rest = comma + 1;
    }
    *out = (bn_shape){(int)dims[0], (int)dims[1], (int)dims[2]};
    return BN_OK;
}

/* Returns BN_OK, an error, or -1 after printing help. Plugins are loaded as they come. */
static int parse_args(int argc, char **argv, check_args *a)
{
    *a = (check_args){.opts = bn_layercheck_defaults(), .device = "auto"};
    opterr = 0;
    optind = 1;
    int opt, shapes = 0;
    long batch, inputs;
    while ((opt = getopt_long(argc, argv, ":", check_options, NULL)) != -1) {
        switch (opt) {
        case OPT_PLUGIN: BN_TRY(bn_plugin_load(optarg)); break;
        case OPT_INPUT:
            if (shapes == BN_MAX_INPUTS) return bn_error(BN_ERR_USAGE, "--input: at most %d shapes", BN_MAX_INPUTS);
            BN_TRY(parse_shape(optarg, shapes ? &a->opts.more_inputs[shapes - 1] : &a->opts.input));
            shapes++;
            break;
        case OPT_INPUTS:
            BN_TRY(bn_cli_int("--inputs", optarg, 1, BN_MAX_INPUTS, &inputs));
            a->opts.num_inputs = (int)inputs;
            break;
        case OPT_OPTIONS: a->opts.options = optarg; break;
        case OPT_DEVICE: a->device = optarg; break;
        case OPT_BATCH:
            BN_TRY(bn_cli_int("--batch", optarg, 1, 4096, &batch));
            a->opts.batch = (int)batch;
            break;
        case OPT_STOCHASTIC: a->opts.stochastic = 1; break;
        case OPT_HELP: return -1;
        default: return bn_cli_option_error(opt, optopt, argv[optind - 1]);
        }
    }
    if (optind >= argc)
        return bn_error(BN_ERR_USAGE, "check-layer: missing TYPE (see 'blobnet check-layer --help')");
    if (optind + 1 < argc) return bn_error(BN_ERR_USAGE, "check-layer: unexpected argument '%s'", argv[optind + 1]);
    a->opts.type = argv[optind];
    if (a->opts.num_inputs && shapes > a->opts.num_inputs)
        return bn_error(BN_ERR_USAGE, "check-layer: %d --input shapes for --inputs %d", shapes, a->opts.num_inputs);
    if (!a->opts.num_inputs && shapes > 1) a->opts.num_inputs = shapes;
    return BN_OK;
}

static void print_report(const check_args *a, const bn_layercheck_report *r)
{
    const bn_layercheck_opts *o = &a->opts;
    bn_shape in = o->input;
    printf("check-layer %s: input %dx%dx%d", o->type, in.c, in.h, in.w);
    for (int j = 1; j < bn_layercheck_inputs(o); j++) {
        bn_shape s = o->more_inputs[j - 1].c ? o->more_inputs[j - 1] : in;
        printf(" + %dx%dx%d", s.c, s.h, s.w);
    }
    printf(", batch %d, options \"%s\", device %s\n", o->batch, o->options ? o->options : "",
           o->ctx ? o->ctx->name : "cpu");
    printf("%-16s %-7s %s\n", "check", "result", "detail");
    for (int i = 0; i < BN_CHECK_COUNT; i++)
        printf("%-16s %-7s %s\n", r->checks[i].name, bn_check_outcome_name(r->checks[i].outcome),
               r->checks[i].detail);
    printf("%d passed, %d failed, %d skipped\n", r->passed, r->failed, r->skipped);
}

int bn_cmd_check_layer(int argc, char **argv)
{
    check_args a;
    int p = parse_args(argc, argv, &a);
    if (p < 0) {
        bn_print_command_help("check-layer");
        return 0;
    }
    if (p != BN_OK) return bn_fail((bn_status)p);
    bn_layercheck_report report;
    bn_status s = bn_cli_open_device(a.device, 1, &a.opts.ctx);
    if (s == BN_OK) s = bn_layercheck_run(&a.opts, &report);
    if (s == BN_OK) {
        print_report(&a, &report);
        fflush(stdout);
        if (report.failed)
            fprintf(stderr, "blobnet: error: check-layer %s: %d of %d checks failed\n", a.opts.type, report.failed,
                    BN_CHECK_COUNT - report.skipped);
    }
    bn_ctx_close();
    if (s != BN_OK) return bn_fail(s);
    return report.failed ? 1 : 0;
}
