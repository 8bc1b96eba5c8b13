/* net_build.c - a network from a model file: its sections read, its layers created through the
 * registry and wired by name, and what it computes described for checkpoints. */
#include "net.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "describe.h"
#include "hash.h"
#include "modelfile.h"
#include "name_table.h"
#include "registry.h"

#define MAX_MODEL_BYTES (1 << 20)

/* [input]'s mean or std: `auto`, one number for every channel, or one per channel separated by
 * commas, each in [lo, hi]; out receives channels values. */
static bn_status parse_norm(bn_options *o, const char *key, double def, double lo, double hi, int channels,
                            float *out, int *is_auto)
{
    const char *text;
    BN_TRY(bn_opt_str(o, key, NULL, &text));
    *is_auto = text && strcmp(text, "auto") == 0;
    for (int c = 0; c < channels; c++) out[c] = (float)def;
    if (!text || *is_auto) return BN_OK;
    int n = 0;
    for (const char *p = text;; n++) {
        char *end;
        double v = strtod(p, &end);
        while (*end == ' ' || *end == '\t') end++;
        if (end == p || (*end != ',' && *end) || !isfinite(v))
            return bn_opt_error(o, key, "%s = %s: expected auto, one number, or one per channel separated by commas",
                                key, text);
        if (v < lo || v > hi) return bn_opt_error(o, key, "%s = %s: %g is outside %g..%g", key, text, v, lo, hi);
        if (n >= channels)
            return bn_opt_error(o, key, "%s = %s: more values than the %d channel%s", key, text, channels,
                                channels == 1 ? "" : "s");
        out[n] = (float)v;
        if (!*end) break;
        p = end + 1;
    }
    if (n == 0)
        for (int c = 1; c < channels; c++) out[c] = out[0];
    else if (n + 1 != channels)
        return bn_opt_error(o, key, "%s = %s: %d values for %d channels (give one, or one per channel)", key, text,
                            n + 1, channels);
    return BN_OK;
}

static bn_status parse_input(bn_options *o, bn_net *net)
{
    bn_shape *in = &net->input_shape;
    BN_TRY(bn_opt_int_required(o, "channels", 1, 1 << 16, &in->c));
    BN_TRY(bn_opt_int_required(o, "height", 1, 1 << 16, &in->h));
    BN_TRY(bn_opt_int_required(o, "width", 1, 1 << 16, &in->w));
    net->input_mean = malloc((size_t)in->c * sizeof *net->input_mean);
    net->input_std = malloc((size_t)in->c * sizeof *net->input_std);
    if (!net->input_mean || !net->input_std) return bn_error(BN_ERR_NOMEM, "out of host memory building %s", net->source);
    int mean_auto, std_auto;
    BN_TRY(parse_norm(o, "mean", 0.0, -1e3, 1e3, in->c, net->input_mean, &mean_auto));
    BN_TRY(parse_norm(o, "std", 1.0, 1e-6, 1e3, in->c, net->input_std, &std_auto));
    net->input_norm_auto = (mean_auto ? BN_NORM_AUTO_MEAN : 0) | (std_auto ? BN_NORM_AUTO_STD : 0);
    return bn_options_check_unused(o);
}

/* Keeps the [data] section's keys for the program: the core does not read data. */
static bn_status keep_data_section(const bn_options *o, bn_net *net)
{
    net->data.file = net->source;
    net->data.line = o->line;
    if (!(net->data.section = strdup("data"))) return bn_error(BN_ERR_NOMEM, "out of host memory building %s", net->source);
    for (int i = 0; i < o->count; i++) BN_TRY(bn_options_add(&net->data, o->items[i].key, o->items[i].value,
                                                            o->items[i].line));
    return BN_OK;
}

static bn_status unknown_section(const bn_options *o)
{
    char known[1024] = "";
    for (int i = 0; i < bn_layer_type_count(); i++) {
        size_t len = strlen(known);
        snprintf(known + len, sizeof known - len, "%s%s", i ? ", " : "", bn_layer_type_at(i)->type);
    }
    return bn_error(BN_ERR_USAGE, "%s:%d: unknown section [%s]; layer types are: %s; a layer type from a plugin "
                    "needs --plugin FILE", o->file, o->line, o->section, known);
}

static bn_status out_of_memory(const bn_net *net)
{
    return bn_error(BN_ERR_NOMEM, "out of host memory building %s", net->source);
}

/* Appends a layer for section o. type_counts holds how many layers of each type came before,
 * for the default names (relu1, relu2, ...); net->names every name so far, for the check that
 * a name is used once. Both are hash tables: a model of many layers reads in linear time. */
static bn_status add_layer(bn_net *net, bn_options *o, const bn_layer_ops *ops, const char **inputs,
                           int *capacity, bn_name_table *type_counts)
{
    if (net->num_layers == *capacity) {
        int cap = *capacity ? 2 * *capacity : 16;
        bn_layer **grown = realloc(net->layers, (size_t)cap * sizeof *grown);
        if (!grown) return out_of_memory(net);
        net->layers = grown;
        *capacity = cap;
    }
    bn_layer *l = calloc(1, sizeof *l);
    if (!l) return out_of_memory(net);
    l->ops = ops;
    l->index = net->num_layers;
    l->line = o->line;
    l->reader = -1;
    net->layers[net->num_layers++] = l;

    int same_type = bn_name_table_get(type_counts, ops->type);
    if (same_type < 0) same_type = 0;
    if (bn_name_table_set(type_counts, ops->type, same_type + 1) != 0) return out_of_memory(net);
    const char *name;
    BN_TRY(bn_opt_str(o, "name", NULL, &name));
    if (name) {
        if (!name[0] || strlen(name) >= sizeof l->name || strpbrk(name, " \t/.\"\\"))
            return bn_opt_error(o, "name", "name '%s' must be 1-63 characters without spaces, '/', '.', '\"' or '\\'",
                                name);
        snprintf(l->name, sizeof l->name, "%s", name);
    } else {
        snprintf(l->name, sizeof l->name, "%s%d", ops->type, same_type + 1);
    }
    if (strcmp(l->name, "input") == 0)
        return bn_opt_error(o, "name", "layer name 'input' is taken: it stands for the data in `input = ...`");
    int earlier = bn_name_table_get(net->names, l->name);
    if (earlier >= 0)
        return bn_opt_error(o, "name", "layer name '%s' is used twice (also at line %d)", l->name,
                            net->layers[earlier]->line);
    if (bn_name_table_set(net->names, l->name, l->index) != 0) return out_of_memory(net);
    BN_TRY(bn_opt_str(o, "input", NULL, inputs));
    if (ops->parse) BN_TRY(ops->parse(l, o));
    return bn_options_check_unused(o);
}

/* The layer index that `name` stands for in l's `input` key: -1 for the data, or an error. */
static bn_status find_source(const bn_net *net, const bn_layer *l, const bn_options *o, const char *name, int *src)
{
    if (strcmp(name, "input") == 0) {
        *src = -1;
        return BN_OK;
    }
    int i = bn_name_table_get(net->names, name);
    if (i < 0)
        return bn_opt_error(o, "input", "layer %s reads '%s', but no layer above it has that name ('input' is the "
                            "data)", l->name, name);
    if (i == l->index) return bn_opt_error(o, "input", "layer %s cannot read its own output", l->name);
    if (i > l->index)
        return bn_opt_error(o, "input", "layer %s reads '%s', which comes later (line %d): a layer reads only "
                            "the data and the layers above it", l->name, name, net->layers[i]->line);
    *src = i;
    return BN_OK;
}

/* Counts l's reading of source src (-1: the data) in the source's readers. */
static void count_reader(bn_net *net, const bn_layer *l, int src)
{
    if (src < 0) {
        net->num_input_readers++;
        return;
    }
    bn_layer *p = net->layers[src];
    if (p->num_readers++ == 0) p->reader = l->index;
}

/* Turns l's `input` key (a comma-separated list of names; without it, the layer above) into
 * l->sources and checks the count against what the type takes. */
static bn_status resolve_inputs(bn_net *net, bn_layer *l, const bn_options *o, const char *spec)
{
    int lo = l->ops->min_inputs > 0 ? l->ops->min_inputs : 1;
    int hi = l->ops->max_inputs > 0 ? l->ops->max_inputs : 1;
    l->num_inputs = 0;
    if (!spec) {
        l->sources[l->num_inputs++] = l->index - 1;
    } else {
        char buf[1024];
        if (strlen(spec) >= sizeof buf) return bn_opt_error(o, "input", "the list of inputs is too long");
        snprintf(buf, sizeof buf, "%s", spec);
        char *save = NULL;
        int pieces = 0;
        for (char *p = buf; *p; p++) pieces += *p == ',';
        for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
            while (*tok == ' ' || *tok == '\t') tok++;
            char *end = tok + strlen(tok);
            while (end > tok && (end[-1] == ' ' || end[-1] == '\t')) *--end = '\0';
            if (!*tok) break;
            if (l->num_inputs == BN_MAX_INPUTS)
                return bn_opt_error(o, "input", "layer %s reads more than %d inputs", l->name, BN_MAX_INPUTS);
            BN_TRY(find_source(net, l, o, tok, &l->sources[l->num_inputs]));
            l->num_inputs++;
        }
        if (l->num_inputs == 0 || l->num_inputs != pieces + 1)
            return bn_opt_error(o, "input", "'%s' is not a list of layer names separated by commas", spec);
    }
    if (l->num_inputs < lo || l->num_inputs > hi) {
        if (lo == hi && hi == 1)
            return bn_opt_error(o, "input", "layer %s (%s) takes one input, not %d", l->name, l->ops->type,
                                l->num_inputs);
        return bn_opt_error(o, "input", "layer %s (%s) takes %d to %d inputs, not %d", l->name, l->ops->type, lo, hi,
                            l->num_inputs);
    }
    for (int j = 0; j < l->num_inputs; j++) count_reader(net, l, l->sources[j]);
    return BN_OK;
}

/* Every layer but the last must feed another: an output nobody reads is a model file mistake
 * (a misspelt input), and its layer's backward pass would have no gradient to start from. */
static bn_status check_all_read(const bn_net *net)
{
    for (int i = 0; i + 1 < net->num_layers; i++) {
        const bn_layer *l = net->layers[i];
        if (!l->num_readers)
            return bn_error(BN_ERR_USAGE, "%s:%d: the output of layer %s is read by no layer (only the last "
                            "layer's may be left unread); name it in a later layer's `input`", net->source, l->line,
                            l->name);
    }
    return BN_OK;
}

static bn_status build_sections(bn_net *net, bn_modelfile *m, bn_options **layer_opts, const char **layer_inputs,
                                bn_name_table *type_counts)
{
    int seen_input = 0, seen_train = 0, seen_augment = 0, seen_data = 0, capacity = 0;
    for (int i = 0; i < m->count; i++) {
        bn_options *o = &m->sections[i];
        if (strcmp(o->section, "input") == 0) {
            if (seen_input++) return bn_error(BN_ERR_USAGE, "%s:%d: second [input] section", o->file, o->line);
            BN_TRY(parse_input(o, net));
        } else if (strcmp(o->section, "train") == 0) {
            if (seen_train++) return bn_error(BN_ERR_USAGE, "%s:%d: second [train] section", o->file, o->line);
            BN_TRY(bn_train_config_parse(o, &net->train));
            BN_TRY(bn_options_check_unused(o));
        } else if (strcmp(o->section, "data") == 0) {
            if (seen_data++) return bn_error(BN_ERR_USAGE, "%s:%d: second [data] section", o->file, o->line);
            BN_TRY(keep_data_section(o, net));
        } else if (strcmp(o->section, "augment") == 0) {
            if (seen_augment++) return bn_error(BN_ERR_USAGE, "%s:%d: second [augment] section", o->file, o->line);
            /* Its shift is limited by the input's size, which must be known by then. */
            if (!seen_input)
                return bn_error(BN_ERR_USAGE, "%s:%d: [augment] must come after [input]", o->file, o->line);
            BN_TRY(bn_augment_parse(o, net->input_shape, &net->augment));
            BN_TRY(bn_options_check_unused(o));
        } else {
            const bn_layer_ops *ops = bn_find_layer(o->section);
            if (!ops) return unknown_section(o);
            layer_opts[net->num_layers] = o;
            BN_TRY(add_layer(net, o, ops, &layer_inputs[net->num_layers], &capacity, type_counts));
        }
    }
    if (!seen_input)
        return bn_error(BN_ERR_USAGE, "%s: no [input] section (channels, height, width)", net->source);
    if (net->num_layers == 0) return bn_error(BN_ERR_USAGE, "%s: no layers", net->source);
    for (int i = 0; i < net->num_layers; i++) BN_TRY(resolve_inputs(net, net->layers[i], layer_opts[i], layer_inputs[i]));
    for (int i = 0; i + 1 < net->num_layers; i++)
        if (net->layers[i]->ops->is_loss)
            return bn_error(BN_ERR_USAGE, "%s: loss layer %s must be the last layer", net->source,
                            net->layers[i]->name);
    return check_all_read(net);
}

/* Creates the layers of every section, then wires each layer's inputs by name (a name may only
 * be resolved once the layers above it exist, and the messages say when it names one below),
 * and describes the result for checkpoints while the sections are at hand. */
static bn_status build(bn_net *net, bn_modelfile *m)
{
    bn_options **layer_opts = calloc((size_t)m->count + 1, sizeof *layer_opts);
    const char **layer_inputs = calloc((size_t)m->count + 1, sizeof *layer_inputs);
    bn_name_table *type_counts = bn_name_table_new();
    net->names = bn_name_table_new();
    bn_status s = layer_opts && layer_inputs && type_counts && net->names
                      ? build_sections(net, m, layer_opts, layer_inputs, type_counts)
                      : out_of_memory(net);
    if (s == BN_OK) s = bn_describe_model(net, layer_opts, &net->description);
    bn_name_table_free(type_counts);
    free(layer_opts);
    free((void *)layer_inputs);
    return s;
}

bn_status bn_net_from_text(const char *text, const char *name, bn_net **out)
{
    *out = NULL;
    bn_net *net = calloc(1, sizeof *net);
    if (!net) return bn_error(BN_ERR_NOMEM, "out of host memory building %s", name);
    snprintf(net->source, sizeof net->source, "%s", name);
    net->text_hash = bn_fnv1a_text(BN_FNV1A_START, text);
    net->train = bn_train_config_defaults();
    bn_modelfile m;
    bn_status s = bn_modelfile_parse(text, net->source, &m);
    if (s == BN_OK) {
        s = build(net, &m);
        bn_modelfile_free(&m);
    }
    if (s != BN_OK) {
        bn_net_free(net);
        return s;
    }
    *out = net;
    return BN_OK;
}

bn_status bn_net_from_file(const char *path, bn_net **out)
{
    char *text;
    BN_TRY(bn_read_text_file(path, MAX_MODEL_BYTES, &text));
    bn_status s = bn_net_from_text(text, path, out);
    free(text);
    return s;
}
