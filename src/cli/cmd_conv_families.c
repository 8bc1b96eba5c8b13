/* cmd_conv_families.c - `blobnet conv-families`: every kernel family of conv2d (and cuDNN) run
 * alone on one shape given by flags, each pass checked against the CPU reference and timed
 * (conv2d/conv_alone.h), as llm.c's dev/cuda runs one kernel at a time. */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "conv2d/conv_alone.h"

enum {
    OPT_BATCH = 256,
    OPT_CHANNELS,
    OPT_HEIGHT,
    OPT_WIDTH,
    OPT_FILTERS,
    OPT_SIZE,
    OPT_STRIDE,
    OPT_PAD,
    OPT_PASS,
    OPT_REPS,
    OPT_POOLED,
    OPT_TF32,
    OPT_BESIDE,
    OPT_DEVICE,
    OPT_SEED,
    OPT_HELP
};

static const struct option family_options[] = {
    {"batch", required_argument, 0, OPT_BATCH},   {"channels", required_argument, 0, OPT_CHANNELS},
    {"height", required_argument, 0, OPT_HEIGHT}, {"width", required_argument, 0, OPT_WIDTH},
    {"filters", required_argument, 0, OPT_FILTERS}, {"size", required_argument, 0, OPT_SIZE},
    {"stride", required_argument, 0, OPT_STRIDE}, {"pad", required_argument, 0, OPT_PAD},
    {"pass", required_argument, 0, OPT_PASS},     {"reps", required_argument, 0, OPT_REPS},
    {"pooled", no_argument, 0, OPT_POOLED},       {"tf32", no_argument, 0, OPT_TF32},
    {"beside", no_argument, 0, OPT_BESIDE},
    {"device", required_argument, 0, OPT_DEVICE}, {"seed", required_argument, 0, OPT_SEED},
    {"help", no_argument, 0, OPT_HELP},           {0, 0, 0, 0},
};

typedef struct family_args {
    long batch, channels, height, width, filters, size, stride, pad, reps, seed;
    int pass;        /* BN_CONV_*, or -1 for all three */
    int pooled, tf32, beside;
    const char *device;
} family_args;

/* --pass's value: a pass's name, or "all" (-1). */
static bn_status parse_pass(const char *text, int *pass)
{
    if (strcmp(text, "all") == 0) {
        *pass = -1;
        return BN_OK;
    }
    for (int p = 0; p < BN_CONV_PASSES; p++)
        if (strcmp(text, bn_conv_pass_name(p)) == 0) {
            *pass = p;
            return BN_OK;
        }
    return bn_error(BN_ERR_USAGE, "--pass: '%s' is none of forward, backward-data, backward-filter, all", text);
}

static int parse_args(int argc, char **argv, family_args *a)
{
    *a = (family_args){.batch = 8, .channels = 3, .height = 16, .width = 16, .filters = 16, .size = 3,
                       .stride = 1, .pad = 0, .reps = 20, .seed = 1, .pass = -1, .device = "gpu"};
    opterr = 0;
    optind = 1;
    int opt;
    while ((opt = getopt_long(argc, argv, ":", family_options, NULL)) != -1) {
        switch (opt) {
        case OPT_BATCH: BN_TRY(bn_cli_int("--batch", optarg, 1, 65536, &a->batch)); break;
        case OPT_CHANNELS: BN_TRY(bn_cli_int("--channels", optarg, 1, 4096, &a->channels)); break;
        case OPT_HEIGHT: BN_TRY(bn_cli_int("--height", optarg, 1, 4096, &a->height)); break;
        case OPT_WIDTH: BN_TRY(bn_cli_int("--width", optarg, 1, 4096, &a->width)); break;
        case OPT_FILTERS: BN_TRY(bn_cli_int("--filters", optarg, 1, 4096, &a->filters)); break;
        case OPT_SIZE: BN_TRY(bn_cli_int("--size", optarg, 1, 64, &a->size)); break;
        case OPT_STRIDE: BN_TRY(bn_cli_int("--stride", optarg, 1, 64, &a->stride)); break;
        case OPT_PAD: BN_TRY(bn_cli_int("--pad", optarg, 0, 63, &a->pad)); break;
        case OPT_PASS: BN_TRY(parse_pass(optarg, &a->pass)); break;
        case OPT_REPS: BN_TRY(bn_cli_int("--reps", optarg, 1, 100000, &a->reps)); break;
        case OPT_POOLED: a->pooled = 1; break;
        case OPT_BESIDE: a->beside = 1; break;
        case OPT_TF32: a->tf32 = 1; break;
        case OPT_DEVICE: a->device = optarg; break;
        case OPT_SEED: BN_TRY(bn_cli_int("--seed", optarg, 0, 2147483647L, &a->seed)); break;
        case OPT_HELP: return -1;
        default: return bn_cli_option_error(opt, optopt, argv[optind - 1]);
        }
    }
    if (optind < argc)
        return bn_error(BN_ERR_USAGE, "conv-families: unexpected argument '%s' (see 'blobnet conv-families --help')",
                        argv[optind]);
    /* The layer's own rules (conv2d.c): a window wholly in the padding sees no input. */
    if (a->pad >= a->size) return bn_error(BN_ERR_USAGE, "--pad: %ld must be smaller than --size %ld", a->pad, a->size);
    if (a->height + 2 * a->pad < a->size || a->width + 2 * a->pad < a->size)
        return bn_error(BN_ERR_USAGE, "--size: a %ldx%ld window is larger than the padded input %ldx%ld", a->size,
                        a->size, a->height + 2 * a->pad, a->width + 2 * a->pad);
    const long oh = (a->height + 2 * a->pad - a->size) / a->stride + 1;
    const long ow = (a->width + 2 * a->pad - a->size) / a->stride + 1;
    if (a->pooled && (oh < 2 || ow < 2))
        return bn_error(BN_ERR_USAGE, "--pooled: the %ldx%ld output has no 2x2 window to pool", oh, ow);
    return BN_OK;
}

/* The shape the flags describe, on ctx's device. */
static bn_status make_shape(const family_args *a, bn_ctx *ctx, bn_conv_shape *s)
{
    memset(s, 0, sizeof *s);
    bn_conv_geom *g = &s->g;
    g->c = (int)a->channels, g->h = (int)a->height, g->w = (int)a->width;
    g->k = (int)a->size, g->stride = (int)a->stride, g->pad = (int)a->pad;
    g->oh = (g->h + 2 * g->pad - g->k) / g->stride + 1;
    g->ow = (g->w + 2 * g->pad - g->k) / g->stride + 1;
    s->filters = (int)a->filters, s->n = (int)a->batch, s->tf32 = a->tf32, s->pooled = a->pooled;
    return bn_conv_alone_device_shape(ctx, s);
}

/* One line per runner for pass `pass`; *failed set when one is over its tolerance. */
static bn_status report_pass(bn_ctx *ctx, const family_args *a, const bn_conv_shape *s, int pass, int *failed)
{
    for (int runner = 0; runner <= BN_CONV_FAMILY_COUNT; runner++) {
        const char *name = runner == BN_CONV_ALONE_CUDNN ? "cudnn" : bn_conv_families[runner - 1]->name;
        bn_conv_alone_result r;
        BN_TRY(bn_conv_alone_run(ctx, runner, pass, s, a->beside, (uint64_t)a->seed, (int)a->reps, &r));
        if (!r.applies) {
            printf("%-16s %-8s no: %s\n", bn_conv_pass_name(pass), name, r.why);
            continue;
        }
        const int bad = !(r.max_error <= r.tolerance);
        *failed |= bad;
        char label[64];
        snprintf(label, sizeof label, "%s%s%s", name, r.algo[0] ? " " : "", r.algo);
        printf("%-16s %-8s yes %10.4f ms  max error %.2e (tolerance %.0e)%s\n", bn_conv_pass_name(pass), label,
               r.ms, r.max_error, r.tolerance, bad ? "  OVER" : "");
    }
    return BN_OK;
}

static bn_status run(const family_args *a, int *failed)
{
    bn_ctx *ctx = NULL;
    BN_TRY(bn_cli_open_device(a->device, 0, &ctx));
    if (!ctx) return bn_error(BN_ERR_DEVICE, "conv-families runs the kernels on a GPU; --device %s is none", a->device);
    ctx->tf32 = a->tf32;
    bn_conv_shape s;
    BN_TRY(make_shape(a, ctx, &s));
    printf("blobnet conv-families: batch %d, input %dx%dx%d, %d filters of %dx%d, stride %d, pad %d%s%s%s on %s; "
           "%ld calls each\n",
           s.n, s.g.c, s.g.h, s.g.w, s.filters, s.g.k, s.g.k, s.g.stride, s.g.pad, s.pooled ? ", pooled" : "",
           s.tf32 ? ", tf32" : "",
           a->beside ? ", backward passes in their shapes for side by side (where planned)" : "", ctx->name, a->reps);
    for (int pass = 0; pass < BN_CONV_PASSES; pass++)
        if (a->pass < 0 || a->pass == pass) BN_TRY(report_pass(ctx, a, &s, pass, failed));
    return BN_OK;
}

int bn_cmd_conv_families(int argc, char **argv)
{
    family_args a;
    int p = parse_args(argc, argv, &a);
    if (p < 0) {
        bn_print_command_help("conv-families");
        return 0;
    }
    if (p != BN_OK) return bn_fail((bn_status)p);
    int failed = 0;
    bn_status s = run(&a, &failed);
    bn_ctx_close();
    if (s != BN_OK) return bn_fail(s);
    if (failed) fprintf(stderr, "blobnet: error: a runner's error is over its tolerance (OVER above)\n");
    return failed ? 1 : 0;
}
