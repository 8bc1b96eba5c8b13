/* cmd_summary.c - `blobnet summary MODEL`: the layer table with shapes, sizes and FLOPs. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "core/net.h"
#include "core/plugin.h"

static size_t layer_params(const bn_layer *l)
{
    size_t n = 0;
    for (int k = 0; k < l->num_params; k++) n += bn_blob_count(l->params[k].value);
    return n;
}

static void print_table(const bn_net *net)
{
    bn_shape in = net->input_shape;
    printf("%-16s %-12s %-16s %12s %12s\n", "layer", "type", "output", "params", "MFLOPs/img");
    printf("%-16s %-12s %5dx%4dx%-5d %12s %12s\n", "input", "", in.c, in.h, in.w, "", "");
    double total_flops = 0;
    for (int i = 0; i < net->num_layers; i++) {
        const bn_layer *l = net->layers[i];
        double flops = l->ops->flops ? l->ops->flops(l) : 0.0;
        total_flops += flops;
        printf("%-16s %-12s %5dx%4dx%-5d %12zu %12.3f\n", l->name, l->ops->type, l->out->c, l->out->h, l->out->w,
               layer_params(l), flops / 1e6);
    }
    printf("total: %d layers, %zu parameters (%.2f MiB), %.3f MFLOPs forward per image\n", net->num_layers,
           net->num_params, net->num_params * 4.0 / (1 << 20), total_flops / 1e6);
}

int bn_cmd_summary(int argc, char **argv)
{
    if (argc == 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        bn_print_command_help("summary");
        return 0;
    }
    if (argc < 2) return bn_usage_error("summary", "expected exactly one MODEL");
    if (argv[1][0] == '-') return bn_usage_error("summary", "unknown option");
    bn_status s = BN_OK;
    for (int i = 2; i < argc && s == BN_OK; i += 2) {
        if (strcmp(argv[i], "--plugin") != 0)
            return bn_usage_error("summary", argv[i][0] == '-' ? "unknown option" : "expected exactly one MODEL");
        if (i + 1 == argc) return bn_usage_error("summary", "option --plugin needs a value");
        s = bn_plugin_load(argv[i + 1]);
    }
    bn_net *net = NULL;
    if (s == BN_OK) s = bn_net_from_file(argv[1], &net);
    if (s == BN_OK) s = bn_net_setup(net, 1, NULL, 0, net->train.seed);
    if (s == BN_OK) print_table(net);
    bn_net_free(net);
    return s == BN_OK ? 0 : bn_fail(s);
}
