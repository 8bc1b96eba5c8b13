/* cmd_time.c - `blobnet time MODEL`: per-layer forward and backward times, like `caffe time`. */
#include <getopt.h>
#include <stdio.h>

#include "check/timing.h"
#include "cli.h"
#include "core/optimizers/optimizers.h"
#include "core/plugin.h"

enum { OPT_BATCH = 256, OPT_ITERS, OPT_DEVICE, OPT_THREADS, OPT_TF32, OPT_AUTOTUNE, OPT_PLUGIN, OPT_PRECISION, OPT_HELP };

static const struct option time_options[] = {
    {"batch", required_argument, 0, OPT_BATCH}, {"iters", required_argument, 0, OPT_ITERS},
    {"device", required_argument, 0, OPT_DEVICE}, {"threads", required_argument, 0, OPT_THREADS}, {"tf32", no_argument, 0, OPT_TF32},
    {"autotune", no_argument, 0, OPT_AUTOTUNE}, {"plugin", required_argument, 0, OPT_PLUGIN},
    {"precision", required_argument, 0, OPT_PRECISION}, {"help", no_argument, 0, OPT_HELP},
    {0, 0, 0, 0},
};

typedef struct time_args {
    const char *model, *device;
    long batch, iters;
    int tf32, autotune, bf16;
} time_args;

static int parse_args(int argc, char **argv, time_args *a)
{
    *a = (time_args){.device = "auto", .batch = 0, .iters = 50};
    opterr = 0;
    optind = 1;
    int opt;
    while ((opt = getopt_long(argc, argv, ":", time_options, NULL)) != -1) {
        switch (opt) {
        case OPT_BATCH: BN_TRY(bn_cli_int("--batch", optarg, 1, 65536, &a->batch)); break;
        case OPT_ITERS: BN_TRY(bn_cli_int("--iters", optarg, 1, 1000000, &a->iters)); break;
        case OPT_DEVICE: a->device = optarg; break;
        case OPT_THREADS: BN_TRY(bn_cli_threads(optarg)); break;
        case OPT_TF32: a->tf32 = 1; break;
        case OPT_AUTOTUNE: a->autotune = 1; break;
        case OPT_PLUGIN: BN_TRY(bn_plugin_load(optarg)); break;
        case OPT_PRECISION: BN_TRY(bn_cli_precision(optarg, &a->bf16)); break;
        case OPT_HELP: return -1;
        default: return bn_cli_option_error(opt, optopt, argv[optind - 1]);
        }
    }
    if (argc - optind != 1) return bn_error(BN_ERR_USAGE, "time: expected one MODEL (see 'blobnet time --help')");
    a->model = argv[optind];
    return BN_OK;
}

static void print_report(const bn_net *net, const bn_time_report *r, const char *where)
{
    double fwd = 0, bwd = 0;
    for (int i = 0; i < r->num_layers; i++) fwd += r->layers[i].forward_ms, bwd += r->layers[i].backward_ms;
    const char *how = !net->pass.ctx ? "" : r->held ? " (device time: each step queued behind a hold)"
                                                    : " (a pass waits for the device: host launches included)";
    printf("blobnet time: %s on %s, batch %d, mean of %d iterations after warm-up%s\n", net->source, where, r->batch,
           r->iters, how);
    printf("%-16s %-12s %12s %12s %8s\n", "layer", "type", "forward ms", "backward ms", "share");
    for (int i = 0; i < r->num_layers; i++) {
        const bn_layer_time *t = &r->layers[i];
        printf("%-16s %-12s %12.4f %12.4f %7.1f%%\n", net->layers[i]->name, net->layers[i]->ops->type, t->forward_ms,
               t->backward_ms, 100.0 * (t->forward_ms + t->backward_ms) / r->step_ms);
    }
    printf("%-16s %-12s %12s %12.4f %7.1f%%\n", "update", bn_optimizer_names[net->train.optimizer], "", r->update_ms,
           100.0 * r->update_ms / r->step_ms);
    printf("%-16s %-12s %12.4f %12.4f\n", "layers", "", fwd, bwd);
    printf("step: %.4f ms (forward + backward + update, timed as a whole)  %.0f images/s\n", r->step_ms,
           r->batch / (r->step_ms / 1e3));
    /* Who runs each layer's GPU passes: blobnet's kernels or the library algorithm chosen. */
    for (int i = 0; i < net->num_layers && net->pass.ctx; i++) {
        const bn_layer *l = net->layers[i];
        char buf[512] = "";
        if (l->ops->describe_gpu) l->ops->describe_gpu(l, buf, sizeof buf);
        if (buf[0]) printf("%s kernels: %s\n", l->name, buf);
    }
}

static bn_status run(const time_args *a, bn_net **net, bn_optimizer **opt)
{
    BN_TRY(bn_net_from_file(a->model, net));
    bn_ctx *ctx;
    BN_TRY(bn_cli_open_device(a->device, 0, &ctx));
    if (ctx) ctx->tf32 = a->tf32, ctx->autotune = a->autotune;
    BN_TRY(bn_cli_apply_precision(a->bf16, ctx));
    int batch = a->batch ? (int)a->batch : (*net)->train.batch;
    (*net)->relu_in_place = 1; /* as train sets the network up */
    BN_TRY(bn_net_setup(*net, batch, ctx, 0, (*net)->train.seed));
    BN_TRY(bn_optimizer_create(*net, &(*net)->train, opt));
    bn_time_report r;
    BN_TRY(bn_time_net(*net, *opt, 5, (int)a->iters, &r));
    print_report(*net, &r, ctx ? ctx->name : "cpu");
    bn_time_report_free(&r);
    return BN_OK;
}

int bn_cmd_time(int argc, char **argv)
{
    time_args a;
    int p = parse_args(argc, argv, &a);
    if (p < 0) {
        bn_print_command_help("time");
        return 0;
    }
    if (p != BN_OK) return bn_fail((bn_status)p);
    bn_net *net = NULL;
    bn_optimizer *opt = NULL;
    bn_status s = run(&a, &net, &opt);
    bn_optimizer_free(opt);
    bn_net_free(net);
    bn_ctx_close();
    return s == BN_OK ? 0 : bn_fail(s);
}
