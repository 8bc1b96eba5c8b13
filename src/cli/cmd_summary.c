/* cmd_summary.c - `blobnet summary MODEL`: the layer table with shapes, sizes, FLOPs and each
 * layer's inputs; with --dot the graph in Graphviz's dot language. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "core/net.h"
#include "core/plugin.h"

/* The names of what layer l reads, comma-separated ("input" for the data). */
static void input_names(const bn_net *net, const bn_layer *l, char *buf, size_t cap)
{
    size_t len = 0;
    buf[0] = '\0';
    for (int j = 0; j < l->num_inputs && len < cap; j++) {
        int src = l->sources[j];
        int w = snprintf(buf + len, cap - len, "%s%s", j ? "," : "", src < 0 ? "input" : net->layers[src]->name);
        if (w < 0) break;
        len += (size_t)w;
    }
}

static void print_table(const bn_net *net)
{
    bn_shape in = net->input_shape;
    printf("%-16s %-12s %-16s %12s %12s  %s\n", "layer", "type", "output", "params", "MFLOPs/img", "inputs");
    printf("%-16s %-12s %5dx%4dx%-5d %12s %12s\n", "input", "", in.c, in.h, in.w, "", "");
    double total_flops = 0;
    for (int i = 0; i < net->num_layers; i++) {
        const bn_layer *l = net->layers[i];
        double flops = l->ops->flops ? l->ops->flops(l) : 0.0;
        total_flops += flops;
        char inputs[512];
        input_names(net, l, inputs, sizeof inputs);
        printf("%-16s %-12s %5dx%4dx%-5d %12zu %12.3f  %s\n", l->name, l->ops->type, l->out->c, l->out->h, l->out->w,
               bn_layer_param_count(l), flops / 1e6, inputs);
    }
    printf("total: %d layers, %zu parameters (%.2f MiB), ", net->num_layers, net->num_params,
           net->num_params * 4.0 / (1 << 20));
    /* Buffers (running statistics) are saved with the weights but never learned. */
    if (net->num_buffer_floats) printf("%zu buffer values, ", net->num_buffer_floats);
    printf("%.3f MFLOPs forward per image\n", total_flops / 1e6);
}

/* Fill colours by the profiler's layer kinds, so the graph reads like the timeline. */
static const char *kind_colour(bn_nvtx_kind k)
{
    switch (k) {
    case BN_NVTX_LAYER_COMPUTE: return "#cfe2f3";
    case BN_NVTX_LAYER_POOL: return "#d9ead3";
    case BN_NVTX_LAYER_ACTIVATION: return "#fff2cc";
    case BN_NVTX_LAYER_LOSS: return "#f4cccc";
    default: return "#eeeeee";
    }
}

/* The graph in Graphviz's dot language: a box per layer with its type and output shape, an
 * edge per input. Layer names never hold quotes or backslashes (the parser refuses them). */
static void print_dot(const bn_net *net)
{
    bn_shape in = net->input_shape;
    printf("digraph \"%s\" {\n", net->source);
    printf("  node [shape=box, style=\"rounded,filled\", fontname=\"Helvetica\", fontsize=10];\n");
    printf("  edge [fontname=\"Helvetica\", fontsize=9];\n");
    printf("  \"input\" [label=\"input\\n%dx%dx%d\", fillcolor=\"#ffffff\"];\n", in.c, in.h, in.w);
    for (int i = 0; i < net->num_layers; i++) {
        const bn_layer *l = net->layers[i];
        printf("  \"%s\" [label=\"%s\\n%s %dx%dx%d\", fillcolor=\"%s\"];\n", l->name, l->name, l->ops->type,
               l->out->c, l->out->h, l->out->w, kind_colour(l->ops->kind));
        for (int j = 0; j < l->num_inputs; j++)
            printf("  \"%s\" -> \"%s\";\n", l->sources[j] < 0 ? "input" : net->layers[l->sources[j]]->name,
                   l->name);
    }
    printf("}\n");
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
    int dot = 0;
    for (int i = 2; i < argc && s == BN_OK; i++) {
        if (strcmp(argv[i], "--dot") == 0) {
            dot = 1;
            continue;
        }
        if (strcmp(argv[i], "--plugin") != 0)
            return bn_usage_error("summary", argv[i][0] == '-' ? "unknown option" : "expected exactly one MODEL");
        if (++i == argc) return bn_usage_error("summary", "option --plugin needs a value");
        s = bn_plugin_load(argv[i]);
    }
    bn_net *net = NULL;
    if (s == BN_OK) s = bn_net_from_file(argv[1], &net);
    if (s == BN_OK) net->relu_in_place = 1; /* the blobs of a long chain of ReLUs once, not each */
    if (s == BN_OK) s = bn_net_setup(net, 1, NULL, 0, net->train.seed);
    if (s == BN_OK) {
        if (dot) print_dot(net);
        else print_table(net);
    }
    bn_net_free(net);
    return s == BN_OK ? 0 : bn_fail(s);
}
