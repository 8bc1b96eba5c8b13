/* cmd_check_layer.c - `blobnet check-layer TYPE [options]`: the check kit (layercheck.h) on one
 * layer type, printed as a table; exit 1 when a check fails. */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "check/layercheck.h"
#include "cli.h"
#include "core/plugin.h"

enum {
    OPT_PLUGIN = 256, OPT_INPUT, OPT_INPUTS, OPT_OPTIONS, OPT_DEVICE, OPT_BATCH, OPT_ALL_SHAPES, OPT_STOCHASTIC,
    OPT_EVAL_TOLERANCE, OPT_HELP
};

static const struct option check_options[] = {
    {"plugin", required_argument, 0, OPT_PLUGIN},   {"input", required_argument, 0, OPT_INPUT},
    {"inputs", required_argument, 0, OPT_INPUTS},
    {"options", required_argument, 0, OPT_OPTIONS}, {"device", required_argument, 0, OPT_DEVICE},
    {"batch", required_argument, 0, OPT_BATCH},     {"stochastic", no_argument, 0, OPT_STOCHASTIC},
    {"all-shapes", no_argument, 0, OPT_ALL_SHAPES}, {"eval-tolerance", required_argument, 0, OPT_EVAL_TOLERANCE},
    {"help", no_argument, 0, OPT_HELP},             {0, 0, 0, 0},
};

typedef struct check_args {
    bn_layercheck_opts opts;
    const char *device;
    int all_shapes;
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
    int opt, shapes = 0, batch_given = 0;
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
            batch_given = 1;
            break;
        case OPT_ALL_SHAPES: a->all_shapes = 1; break;
        case OPT_STOCHASTIC: a->opts.stochastic = 1; break;
        case OPT_EVAL_TOLERANCE: BN_TRY(bn_cli_float("--eval-tolerance", optarg, 1e-9, 1.0, &a->opts.eval_tolerance)); break;
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
    if (a->all_shapes && (shapes || batch_given))
        return bn_error(BN_ERR_USAGE, "check-layer: --all-shapes picks the shapes and batches; leave out %s",
                        shapes ? "--input" : "--batch");
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

/* The checks at one shape, printed; *failed receives the names of the failed checks. */
static bn_status check_at(check_args *a, const char *shape_name, bn_layercheck_report *r, char *failed, size_t cap)
{
    BN_TRY(bn_layercheck_run(&a->opts, r));
    if (shape_name) printf("%s shape: ", shape_name);
    print_report(a, r);
    size_t len = 0;
    for (int i = 0; i < BN_CHECK_COUNT && len < cap; i++)
        if (r->checks[i].outcome == BN_CHECK_FAIL)
            len += (size_t)snprintf(failed + len, cap - len, "%s%s", len ? ", " : "", r->checks[i].name);
    return BN_OK;
}

/* Each of bn_layercheck_shapes in turn (every input of that shape), then the totals; the error
 * names the shapes where checks failed and which. */
static bn_status check_all_shapes(check_args *a, int *failed_total, char *why, size_t cap)
{
    int passed = 0, failed = 0, skipped = 0, run = 0;
    size_t len = 0;
    for (int s = 0; s < BN_LAYERCHECK_SHAPES; s++) {
        const bn_layercheck_shape *sh = &bn_layercheck_shapes[s];
        a->opts.input = sh->input;
        a->opts.batch = sh->batch;
        bn_layercheck_report r;
        char names[160] = "";
        if (s) printf("\n");
        BN_TRY(check_at(a, sh->name, &r, names, sizeof names));
        passed += r.passed;
        failed += r.failed;
        skipped += r.skipped;
        run += BN_CHECK_COUNT - r.skipped;
        if (r.failed && len < cap)
            len += (size_t)snprintf(why + len, cap - len, "%s%s at the %s shape (%dx%dx%d, batch %d)", len ? "; " : "",
                                    names, sh->name, sh->input.c, sh->input.h, sh->input.w, sh->batch);
    }
    printf("\nall shapes: %d passed, %d failed, %d skipped\n", passed, failed, skipped);
    if (failed) {
        char total[48];
        snprintf(total, sizeof total, "%d of %d checks failed: ", failed, run);
        size_t at = strlen(total);
        if (at + len < cap) {
            memmove(why + at, why, len + 1);
            memcpy(why, total, at);
        }
    }
    *failed_total = failed;
    return BN_OK;
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
    int failed = 0;
    char why[512] = "";
    bn_status s = bn_cli_open_device(a.device, 1, &a.opts.ctx);
    if (s == BN_OK && a.all_shapes) {
        s = check_all_shapes(&a, &failed, why, sizeof why);
    } else if (s == BN_OK) {
        bn_layercheck_report r;
        char names[160] = "";
        s = check_at(&a, NULL, &r, names, sizeof names);
        failed = r.failed;
        snprintf(why, sizeof why, "%d of %d checks failed: %s", r.failed, BN_CHECK_COUNT - r.skipped, names);
    }
    fflush(stdout);
    if (s == BN_OK && failed) fprintf(stderr, "blobnet: error: check-layer %s: %s\n", a.opts.type, why);
    bn_ctx_close();
    if (s != BN_OK) return bn_fail(s);
    return failed ? 1 : 0;
}
