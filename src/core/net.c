#include "net.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "describe.h"
#include "host_memory.h"
#include "modelfile.h"
#include "registry.h"
#include "rng.h"

#define MAX_MODEL_BYTES (1 << 20)

static uint64_t fnv1a(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3ULL;
    return h;
}

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

bn_status bn_net_set_input_norm(bn_net *net, const double *mean, const double *std)
{
    const int c = net->input_shape.c;
    for (int k = 0; k < c; k++) {
        if (mean) net->input_mean[k] = (float)mean[k];
        if (std) net->input_std[k] = std[k] > 0 ? (float)std[k] : 1.0f;
    }
    if (!net->input_norm) return BN_OK;
    float *norm = bn_blob_host_wr(net->input_norm);
    if (!norm) return bn_last_status();
    memcpy(norm, net->input_mean, (size_t)c * sizeof *norm);
    memcpy(norm + c, net->input_std, (size_t)c * sizeof *norm);
    return BN_OK;
}

static bn_status unknown_section(const bn_options *o)
{
    char known[1024] = "";
    for (int i = 0; i < bn_layer_type_count(); i++) {
        size_t len = strlen(known);
        snprintf(known + len, sizeof known - len, "%s%s", i ? ", " : "", bn_layer_type_at(i)->type);
    }
    return bn_error(BN_ERR_USAGE, "%s:%d: unknown section [%s]; layer types are: %s", o->file, o->line,
                    o->section, known);
}

static bn_status add_layer(bn_net *net, bn_options *o, const bn_layer_ops *ops, const char **inputs)
{
    bn_layer **grown = realloc(net->layers, (size_t)(net->num_layers + 1) * sizeof *grown);
    if (!grown) return bn_error(BN_ERR_NOMEM, "out of host memory building %s", net->source);
    net->layers = grown;
    bn_layer *l = calloc(1, sizeof *l);
    if (!l) return bn_error(BN_ERR_NOMEM, "out of host memory building %s", net->source);
    l->ops = ops;
    l->index = net->num_layers;
    l->line = o->line;
    net->layers[net->num_layers++] = l;

    int same_type = 0;
    for (int i = 0; i < l->index; i++) same_type += net->layers[i]->ops == ops;
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
    for (int i = 0; i < l->index; i++)
        if (strcmp(net->layers[i]->name, l->name) == 0)
            return bn_opt_error(o, "name", "layer name '%s' is used twice (also at line %d)", l->name,
                                net->layers[i]->line);
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
    for (int i = 0; i < net->num_layers; i++) {
        if (strcmp(net->layers[i]->name, name) != 0) continue;
        if (i == l->index) return bn_opt_error(o, "input", "layer %s cannot read its own output", l->name);
        if (i > l->index)
            return bn_opt_error(o, "input", "layer %s reads '%s', which comes later (line %d): a layer reads only "
                                "the data and the layers above it", l->name, name, net->layers[i]->line);
        *src = i;
        return BN_OK;
    }
    return bn_opt_error(o, "input", "layer %s reads '%s', but no layer above it has that name ('input' is the data)",
                        l->name, name);
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
    return BN_OK;
}

/* Every layer but the last must feed another: an output nobody reads is a model file mistake
 * (a misspelt input), and its layer's backward pass would have no gradient to start from. */
static bn_status check_all_read(const bn_net *net)
{
    for (int i = 0; i + 1 < net->num_layers; i++) {
        const bn_layer *l = net->layers[i];
        int read = 0;
        for (int k = i + 1; k < net->num_layers && !read; k++)
            for (int j = 0; j < net->layers[k]->num_inputs; j++) read |= net->layers[k]->sources[j] == i;
        if (!read)
            return bn_error(BN_ERR_USAGE, "%s:%d: the output of layer %s is read by no layer (only the last "
                            "layer's may be left unread); name it in a later layer's `input`", net->source, l->line,
                            l->name);
    }
    return BN_OK;
}

static bn_status build_sections(bn_net *net, bn_modelfile *m, bn_options **layer_opts, const char **layer_inputs)
{
    int seen_input = 0, seen_train = 0, seen_augment = 0, seen_data = 0;
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
            BN_TRY(add_layer(net, o, ops, &layer_inputs[net->num_layers]));
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
    bn_status s = layer_opts && layer_inputs ? build_sections(net, m, layer_opts, layer_inputs)
                                             : bn_error(BN_ERR_NOMEM, "out of host memory building %s", net->source);
    if (s == BN_OK) s = bn_describe_model(net, layer_opts, &net->description);
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
    net->text_hash = fnv1a(text);
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

static bn_blob *new_blob(const char *layer, const char *what, int n, bn_shape s)
{
    char name[96];
    snprintf(name, sizeof name, "%s%s", layer, what);
    return bn_blob_new(name, n, s.c, s.h, s.w);
}

/* The host memory setup may take, and what it has counted so far (in doubles, which cannot
 * overflow here). */
typedef struct mem_budget {
    double need, limit;       /* bytes; a negative limit is unknown and refuses nothing */
    char limit_text[340];     /* what the limit is, for the message */
} mem_budget;

static void budget_start(const bn_net *net, mem_budget *b)
{
    b->need = 0;
    if (net->max_bytes) {
        b->limit = (double)net->max_bytes;
        snprintf(b->limit_text, sizeof b->limit_text, "the limit of %.3g GB set for it", b->limit / 1e9);
        return;
    }
    bn_host_memory host;
    bn_host_memory_available(&host);
    b->limit = host.bytes;
    snprintf(b->limit_text, sizeof b->limit_text, "%s", host.source);
}

/* Adds count floats to the need and refuses the net once it passes the limit, before the blobs
 * exist: no allocation is ever attempted for them. */
static bn_status add_bytes(bn_net *net, double count, const char *what, mem_budget *b)
{
    b->need += 4.0 * count;
    if (b->limit < 0 || b->need <= b->limit) return BN_OK;
    return bn_error(BN_ERR_USAGE, "%s: at batch %d the network needs over %.3g GB of host memory (at %s), more than "
                    "%s; use a smaller batch or smaller layers", net->source, net->capacity, b->need / 1e9, what,
                    b->limit_text);
}

/* The same blobs live on the device: refuses a net the device's free memory cannot hold. */
static bn_status check_device_memory(const bn_net *net, bn_ctx *ctx, double need)
{
    size_t free_bytes, total_bytes;
    BN_TRY(bn_ctx_memory(ctx, &free_bytes, &total_bytes));
    if (need <= (double)free_bytes) return BN_OK;
    return bn_error(BN_ERR_USAGE, "%s: at batch %d the network needs %.3g GB of device memory, more than the %.3g GB "
                    "free on gpu:%d (%s, %.3g GB in all); use a smaller batch or smaller layers", net->source,
                    net->capacity, need / 1e9, free_bytes / 1e9, ctx->device, ctx->name, total_bytes / 1e9);
}

/* The floats of one example's blob of shape s, with its gradient when it has one. */
static double blob_floats(const bn_net *net, bn_shape s, int with_grad)
{
    return (double)s.c * s.h * s.w * net->capacity * (with_grad ? 2 : 1);
}

/* Parameters and their gradients, and buffers, as declared by the layer's setup. */
static double param_floats(const bn_layer *l)
{
    double n = 0;
    for (int k = 0; k < l->num_params; k++) {
        const bn_blob *d = l->params[k].value;
        n += 2.0 * d->n * d->c * d->h * d->w;
    }
    for (int k = 0; k < l->num_buffers; k++) n += (double)bn_blob_count(l->buffers[k].value);
    return n;
}

/* Records a setup error again with the layer's place in the model file in front. */
static bn_status at_layer_line(const bn_net *net, const bn_layer *l, bn_status s)
{
    char why[512];
    snprintf(why, sizeof why, "%s", bn_last_error());
    return bn_error(s, "%s:%d: %s", net->source, l->line, why);
}

/* Where the gradient of input j of layer l goes: the producer's own gradient blob for the first
 * reader of its output (in layer order), a part of its own for every later one, which the
 * network adds in before the producer's backward pass (add_grad_parts). */
static bn_status wire_input_grad(bn_net *net, bn_layer *l, int j, int *first_reader, mem_budget *budget)
{
    int src = l->sources[j];
    bn_blob *grad = src < 0 ? net->input_grad : net->layers[src]->out_grad;
    if (!grad) return BN_OK;
    int *first = &first_reader[src + 1];
    if (*first < 0) {
        *first = l->index;
        l->input_grads[j] = grad;
        return BN_OK;
    }
    bn_blob ***parts = src < 0 ? &net->input_grad_parts : &net->layers[src]->grad_parts;
    int *count = src < 0 ? &net->num_input_grad_parts : &net->layers[src]->num_grad_parts;
    BN_TRY(add_bytes(net, (double)bn_blob_count(grad), l->name, budget));
    bn_blob **grown = realloc(*parts, (size_t)(*count + 1) * sizeof *grown);
    if (!grown) return bn_error(BN_ERR_NOMEM, "out of host memory setting up %s", net->source);
    *parts = grown;
    char what[24];
    snprintf(what, sizeof what, ".grad.%d", *count + 1);
    bn_blob *part;
    if (!(part = new_blob(src < 0 ? "input" : net->layers[src]->name, what, net->capacity,
                          (bn_shape){grad->c, grad->h, grad->w})))
        return bn_last_status();
    grown[(*count)++] = part;
    l->input_grads[j] = part;
    return BN_OK;
}

static bn_status setup_layers(bn_net *net, int want_input_grad, mem_budget *budget)
{
    bn_shape data = net->input_shape;
    BN_TRY(add_bytes(net, blob_floats(net, data, want_input_grad), "the input", budget));
    net->input = new_blob("input", "", net->capacity, data);
    if (!net->input) return bn_last_status();
    if (!(net->input_norm = bn_blob_new("input.norm", 2 * data.c, 1, 1, 1))) return bn_last_status();
    BN_TRY(bn_net_set_input_norm(net, NULL, NULL));
    if (want_input_grad && !(net->input_grad = new_blob("input", ".grad", net->capacity, data)))
        return bn_last_status();
    int *first_reader = malloc(((size_t)net->num_layers + 1) * sizeof *first_reader);
    if (!first_reader) return bn_error(BN_ERR_NOMEM, "out of host memory setting up %s", net->source);
    for (int i = 0; i <= net->num_layers; i++) first_reader[i] = -1;
    bn_status s = BN_OK;
    for (int i = 0; i < net->num_layers && s == BN_OK; i++) {
        bn_layer *l = net->layers[i];
        for (int j = 0; j < l->num_inputs; j++) {
            int src = l->sources[j];
            l->inputs[j] = src < 0 ? net->input : net->layers[src]->out;
            l->input_shapes[j] = (bn_shape){l->inputs[j]->c, l->inputs[j]->h, l->inputs[j]->w};
        }
        bn_shape in = l->input_shapes[0], out = {0, 0, 0};
        l->bias_lr_mult = (float)net->train.bias_lr_mult;
        if ((s = l->ops->setup(l, in, &out)) != BN_OK) {
            s = at_layer_line(net, l, s);
            break;
        }
        if (out.c <= 0 || out.h <= 0 || out.w <= 0) {
            s = at_layer_line(net, l, bn_layer_error(l, "input %dx%dx%d gives an empty output %dx%dx%d", in.c, in.h,
                                                     in.w, out.c, out.h, out.w));
            break;
        }
        s = add_bytes(net, blob_floats(net, out, !l->ops->is_loss) + param_floats(l), l->name, budget);
        for (int j = 0; j < l->num_inputs && s == BN_OK; j++) s = wire_input_grad(net, l, j, first_reader, budget);
        if (s != BN_OK) break;
        l->in = l->inputs[0];
        l->in_grad = l->input_grads[0];
        if (!(l->out = new_blob(l->name, ".out", net->capacity, out)) ||
            (!l->ops->is_loss && !(l->out_grad = new_blob(l->name, ".grad", net->capacity, out))))
            s = bn_last_status();
    }
    free(first_reader);
    return s;
}

/* Moves every declared parameter into views of the two slabs, in layer order. */
static bn_status carve_params(bn_net *net)
{
    size_t total = 0, guards = 0;
    for (int i = 0; i < net->num_layers; i++)
        for (int k = 0; k < net->layers[i]->num_params; k++) {
            total += bn_blob_count(net->layers[i]->params[k].value);
            guards += net->grad_guard;
        }
    net->num_params = total;
    if (total == 0) return BN_OK;
    if (total > (size_t)1 << 31) return bn_error(BN_ERR_USAGE, "%s: %zu parameters is too many", net->source, total);
    if (!(net->params = bn_blob_new("params", (int)total, 1, 1, 1))) return bn_last_status();
    if (!(net->grads = bn_blob_new("grads", (int)(total + guards), 1, 1, 1))) return bn_last_status();
    size_t offset = 0, grad_offset = 0;
    for (int i = 0; i < net->num_layers; i++) {
        bn_layer *l = net->layers[i];
        for (int k = 0; k < l->num_params; k++) {
            bn_param *p = &l->params[k];
            bn_blob *d = p->value;
            char name[128];
            snprintf(name, sizeof name, "%s.%s", l->name, p->name);
            bn_blob *v = bn_blob_new_view(name, net->params, offset, d->n, d->c, d->h, d->w);
            snprintf(name, sizeof name, "%s.%s.grad", l->name, p->name);
            bn_blob *g = bn_blob_new_view(name, net->grads, grad_offset, d->n, d->c, d->h, d->w);
            if (!v || !g) {
                bn_blob_free(v);
                bn_blob_free(g);
                return bn_last_status();
            }
            offset += bn_blob_count(d);
            grad_offset += bn_blob_count(d) + net->grad_guard;
            bn_blob_free(d);
            p->value = v;
            p->grad = g;
        }
    }
    return BN_OK;
}

/* Under --precision bf16: the BF16 copy of the parameter slab and a view of it per parameter. */
static bn_status carve_params16(bn_net *net)
{
    if (!net->params) return BN_OK;
    if (!(net->params16 = bn_blob_new("params16", (int)net->num_params, 1, 1, 1))) return bn_last_status();
    BN_TRY(bn_blob_set_bf16(net->params16));
    for (int i = 0; i < net->num_layers; i++) {
        bn_layer *l = net->layers[i];
        for (int k = 0; k < l->num_params; k++) {
            bn_param *p = &l->params[k];
            const bn_blob *v = p->value;
            char name[128];
            snprintf(name, sizeof name, "%s.%s.bf16", l->name, p->name);
            if (!(p->value16 = bn_blob_new_view(name, net->params16, v->offset, v->n, v->c, v->h, v->w)))
                return bn_last_status();
        }
    }
    return BN_OK;
}

/* Moves every declared buffer into a view of the buffer slab, in layer order. */
static bn_status carve_buffers(bn_net *net)
{
    size_t total = 0;
    for (int i = 0; i < net->num_layers; i++)
        for (int k = 0; k < net->layers[i]->num_buffers; k++)
            total += bn_blob_count(net->layers[i]->buffers[k].value);
    net->num_buffer_floats = total;
    if (total == 0) return BN_OK;
    if (total > (size_t)1 << 31) return bn_error(BN_ERR_USAGE, "%s: %zu buffer values is too many", net->source, total);
    if (!(net->buffers = bn_blob_new("buffers", (int)total, 1, 1, 1))) return bn_last_status();
    size_t offset = 0;
    for (int i = 0; i < net->num_layers; i++) {
        bn_layer *l = net->layers[i];
        for (int k = 0; k < l->num_buffers; k++) {
            bn_blob *d = l->buffers[k].value;
            char name[128];
            snprintf(name, sizeof name, "%s.%s", l->name, l->buffers[k].name);
            bn_blob *v = bn_blob_new_view(name, net->buffers, offset, d->n, d->c, d->h, d->w);
            if (!v) return bn_last_status();
            offset += bn_blob_count(d);
            bn_blob_free(d);
            l->buffers[k].value = v;
        }
    }
    return BN_OK;
}

typedef bn_status (*blob_fn)(bn_blob *b, void *arg);

static bn_status each_of(bn_blob **blobs, int n, blob_fn fn, void *arg)
{
    for (int i = 0; i < n; i++)
        if (blobs[i]) BN_TRY(fn(blobs[i], arg));
    return BN_OK;
}

/* Calls fn on every blob of the net that holds a row per example: the input, labels, each
 * layer's output and output gradient, and the gradient parts of outputs read several times. */
static bn_status each_batch_blob(bn_net *net, blob_fn fn, void *arg)
{
    bn_blob *fixed[] = {net->input, net->input_grad, net->labels};
    BN_TRY(each_of(fixed, 3, fn, arg));
    BN_TRY(each_of(net->input_grad_parts, net->num_input_grad_parts, fn, arg));
    for (int i = 0; i < net->num_layers; i++) {
        bn_layer *l = net->layers[i];
        bn_blob *own[] = {l->out, l->out_grad};
        BN_TRY(each_of(own, 2, fn, arg));
        BN_TRY(each_of(l->grad_parts, l->num_grad_parts, fn, arg));
    }
    return BN_OK;
}

/* The same over every blob, the slabs and metrics too. */
static bn_status each_blob(bn_net *net, blob_fn fn, void *arg)
{
    bn_blob *fixed[] = {net->metrics, net->params, net->grads, net->buffers, net->params16};
    BN_TRY(each_of(fixed, 5, fn, arg));
    return each_batch_blob(net, fn, arg);
}

typedef struct reserve_arg {
    bn_status (*reserve)(bn_blob *);
} reserve_arg;

static bn_status reserve_one(bn_blob *b, void *arg)
{
    return ((reserve_arg *)arg)->reserve(b);
}

static bn_status reserve_all(bn_net *net, bn_status (*reserve)(bn_blob *))
{
    reserve_arg r = {reserve};
    return each_blob(net, reserve_one, &r);
}

/* Under --precision bf16 every layer must have BF16 GPU passes: refused before anything is
 * allocated, naming the first that does not. */
static bn_status check_bf16_types(const bn_net *net)
{
    for (int i = 0; i < net->num_layers; i++) {
        const bn_layer *l = net->layers[i];
        if (!l->ops->bf16)
            return bn_error(BN_ERR_USAGE, "%s:%d: layer %s (%s) has no BF16 GPU pass; train it with --precision fp32",
                            net->source, l->line, l->name, l->ops->type);
    }
    return BN_OK;
}

static bn_status set_bf16(bn_blob *b, void *arg)
{
    (void)arg;
    return bn_blob_set_bf16(b);
}

bn_status bn_net_setup(bn_net *net, int batch, bn_ctx *ctx, int want_input_grad, uint64_t seed)
{
    int bf16 = ctx && ctx->bf16;
    if (net->capacity) return bn_error(BN_ERR_INTERNAL, "%s: network is already set up", net->source);
    if (batch <= 0) return bn_error(BN_ERR_USAGE, "batch size %d must be positive", batch);
    if (bf16) BN_TRY(check_bf16_types(net));
    net->capacity = net->batch = batch;
    mem_budget budget;
    budget_start(net, &budget);
    BN_TRY(setup_layers(net, want_input_grad, &budget));
    if (ctx) BN_TRY(check_device_memory(net, ctx, budget.need));
    /* The activations and their gradients; the labels, made below, stay FP32. */
    if (bf16) BN_TRY(each_batch_blob(net, set_bf16, NULL));
    BN_TRY(carve_params(net));
    if (bf16) BN_TRY(carve_params16(net));
    BN_TRY(carve_buffers(net));
    if (!(net->labels = bn_blob_new("labels", batch, 1, 1, 1))) return bn_last_status();
    if (!(net->metrics = bn_blob_new("metrics", 2, 1, 1, 1))) return bn_last_status();
    net->pass = (bn_pass){.seed = seed, .labels = net->labels, .metrics = net->metrics, .ctx = ctx};
    BN_TRY(reserve_all(net, bn_blob_reserve_host));
    if (ctx) BN_TRY(reserve_all(net, bn_blob_reserve_device));
    /* The fusion rules' kernels are FP32 only. */
    if (ctx && !bf16) bn_net_fuse(net);
    BN_TRY(bn_net_init_params(net, seed));
    return net->grads ? bn_blob_zero(net->grads) : BN_OK;
}

static void fill_param(bn_param *p, float *v, size_t count, bn_rng *r)
{
    switch (p->init) {
    case BN_INIT_ZERO:
        for (size_t i = 0; i < count; i++) v[i] = 0.0f;
        break;
    case BN_INIT_CONSTANT:
        for (size_t i = 0; i < count; i++) v[i] = p->init_value;
        break;
    case BN_INIT_HE: {
        double std = sqrt(2.0 / (p->fan_in > 0 ? p->fan_in : 1));
        for (size_t i = 0; i < count; i++) v[i] = (float)(std * bn_rng_normal(r));
        break;
    }
    case BN_INIT_XAVIER: {
        int fans = p->fan_in + p->fan_out;
        double limit = sqrt(6.0 / (fans > 0 ? fans : 1));
        for (size_t i = 0; i < count; i++) v[i] = (float)(limit * (2.0 * bn_rng_uniform(r) - 1.0));
        break;
    }
    }
}

bn_status bn_net_init_params(bn_net *net, uint64_t seed)
{
    uint64_t stream = 0;
    for (int i = 0; i < net->num_layers; i++) {
        bn_layer *l = net->layers[i];
        for (int k = 0; k < l->num_params; k++) {
            bn_param *p = &l->params[k];
            /* One stream per parameter: adding a layer leaves the others' values alone. */
            bn_rng r;
            bn_rng_seed(&r, seed, ++stream);
            float *v = bn_blob_host_wr(p->value);
            if (!v) return bn_last_status();
            fill_param(p, v, bn_blob_count(p->value), &r);
        }
        for (int k = 0; k < l->num_buffers; k++) {
            bn_buffer *b = &l->buffers[k];
            float *v = bn_blob_host_wr(b->value);
            if (!v) return bn_last_status();
            for (size_t e = 0; e < bn_blob_count(b->value); e++) v[e] = b->init_value;
        }
    }
    return bn_net_refresh_params16(net);
}

bn_status bn_net_refresh_params16(bn_net *net)
{
    if (!net->params16) return BN_OK;
    const float *master = bn_blob_host_rd(net->params);
    if (!master) return bn_last_status();
    float *copy = bn_blob_host_wr(net->params16);
    if (!copy) return bn_last_status();
    memcpy(copy, master, net->num_params * sizeof *copy);
    /* Rounded and sent now, so that no step meets a transfer (a captured one could not). */
    return bn_blob_dev16_rd(net->params16) ? BN_OK : bn_last_status();
}

static bn_status reshape_batch(bn_blob *b, void *n)
{
    return bn_blob_reshape(b, *(int *)n, b->c, b->h, b->w);
}

bn_status bn_net_set_batch(bn_net *net, int n)
{
    if (n <= 0 || n > net->capacity)
        return bn_error(BN_ERR_INTERNAL, "%s: batch %d outside 1..%d", net->source, n, net->capacity);
    if (n == net->batch) return BN_OK;
    BN_TRY(each_batch_blob(net, reshape_batch, &n));
    net->batch = n;
    return BN_OK;
}

bn_status bn_net_forward(bn_net *net, int train)
{
    net->pass.train = train;
    for (int i = 0; i < net->num_layers; i++) BN_TRY(bn_layer_forward(net->layers[i], &net->pass));
    return BN_OK;
}

/* Adds the gradients that the second and later readers of an output wrote into the gradient
 * its first reader wrote, in reader order: the same float additions on the CPU and the GPU. */
static bn_status add_grad_parts(bn_net *net, bn_blob *grad, bn_blob **parts, int n)
{
    if (!grad || n == 0) return BN_OK;
    size_t count = bn_blob_count(grad);
    bn_ctx *ctx = net->pass.ctx;
    for (int k = 0; k < n; k++) {
        if (ctx && bn_blob_is_bf16(grad)) {
            void *dst = bn_blob_dev16_wr(grad);
            const void *src = dst ? bn_blob_dev16_rd(parts[k]) : NULL;
            if (!src) return bn_last_status();
            BN_TRY(bn_gpu_add_bf16(dst, src, count, ctx));
        } else if (ctx) {
            BN_DEV_WR(dst, grad);
            BN_DEV_RD(src, parts[k]);
            BN_TRY(bn_gpu_add(dst, src, count, ctx));
        } else {
            BN_HOST_WR(dst, grad);
            BN_HOST_RD(src, parts[k]);
            for (size_t e = 0; e < count; e++) dst[e] += src[e];
        }
    }
    return BN_OK;
}

bn_status bn_net_backward_layer(bn_net *net, int i)
{
    bn_layer *l = net->layers[i];
    if (l->num_grad_parts) {
        bn_nvtx_push(l->name, l->ops->kind);
        bn_nvtx_push("gradient sum", l->ops->kind);
        bn_status s = add_grad_parts(net, l->out_grad, l->grad_parts, l->num_grad_parts);
        bn_nvtx_pop();
        bn_nvtx_pop();
        BN_TRY(s);
    }
    return bn_layer_backward(l, &net->pass);
}

bn_status bn_net_backward(bn_net *net)
{
    return bn_net_backward_each(net, NULL, NULL);
}

bn_status bn_net_backward_each(bn_net *net, bn_status (*done)(void *arg, bn_net *net, bn_layer *l), void *arg)
{
    bn_ctx *ctx = net->pass.ctx;
    bn_status s = BN_OK;
    /* Side work queued before the backward pass (bn_net_zero_grad_beside) ends before any layer
     * adds into the gradients. */
    if (ctx) BN_TRY(bn_ctx_join_side(ctx));
    net->pass.defer_joins = ctx != NULL;
    for (int i = net->num_layers - 1; i >= 0 && s == BN_OK; i--) {
        s = bn_net_backward_layer(net, i);
        if (s == BN_OK && done) s = done(arg, net, net->layers[i]);
    }
    if (s == BN_OK) s = add_grad_parts(net, net->input_grad, net->input_grad_parts, net->num_input_grad_parts);
    net->pass.defer_joins = 0;
    /* Work the layers left on the side stream (weight gradients) ends here, before anything
     * reads the gradients. */
    if (ctx) {
        bn_status j = bn_ctx_join_side(ctx);
        if (s == BN_OK) s = j;
    }
    return s;
}

bn_status bn_net_zero_grad(bn_net *net)
{
    return net->grads ? bn_blob_zero(net->grads) : BN_OK;
}

bn_status bn_net_zero_grad_beside(bn_net *net)
{
    bn_ctx *ctx = net->pass.ctx;
    if (!net->grads || !ctx || !ctx->side_stream) return bn_net_zero_grad(net);
    float *d = bn_blob_dev_wr(net->grads);
    if (!d) return bn_last_status();
    return bn_ctx_zero_beside(ctx, d, bn_blob_count(net->grads) * sizeof(float));
}

bn_status bn_net_metrics(bn_net *net, double *loss_sum, double *correct)
{
    const float *m = bn_blob_host_rd(net->metrics);
    if (!m) return bn_last_status();
    *loss_sum = m[0];
    *correct = m[1];
    return BN_OK;
}

bn_blob *bn_net_output(bn_net *net)
{
    return net->layers[net->num_layers - 1]->out;
}

bn_layer *bn_net_loss_layer(bn_net *net)
{
    bn_layer *last = net->layers[net->num_layers - 1];
    return last->ops->is_loss ? last : NULL;
}

bn_layer *bn_net_find_layer(bn_net *net, const char *name)
{
    for (int i = 0; i < net->num_layers; i++)
        if (strcmp(net->layers[i]->name, name) == 0) return net->layers[i];
    return NULL;
}

static void free_layer(bn_layer *l)
{
    if (l->ops->destroy) l->ops->destroy(l);
    else free(l->priv);
    for (int k = 0; k < l->num_params; k++) {
        bn_blob_free(l->params[k].value);
        bn_blob_free(l->params[k].grad);
        bn_blob_free(l->params[k].value16);
    }
    for (int k = 0; k < l->num_buffers; k++) bn_blob_free(l->buffers[k].value);
    bn_blob_free(l->out);
    bn_blob_free(l->out_grad);
    for (int k = 0; k < l->num_grad_parts; k++) bn_blob_free(l->grad_parts[k]);
    free(l->grad_parts);
    free(l);
}

void bn_net_free(bn_net *net)
{
    if (!net) return;
    for (int i = 0; i < net->num_layers; i++) free_layer(net->layers[i]);
    free(net->layers);
    bn_blob *own[] = {net->input,  net->input_grad, net->labels,  net->metrics,
                      net->params, net->grads,      net->buffers, net->params16, net->input_norm};
    for (size_t i = 0; i < sizeof own / sizeof own[0]; i++) bn_blob_free(own[i]);
    for (int k = 0; k < net->num_input_grad_parts; k++) bn_blob_free(net->input_grad_parts[k]);
    free(net->input_grad_parts);
    free(net->description);
    free(net->input_mean);
    free(net->input_std);
    bn_options_clear(&net->data);
    free(net);
}

static bn_status mark_written(bn_blob *b, void *arg)
{
    (void)arg;
    bn_blob_mark_device_written(b);
    return BN_OK;
}

void bn_net_mark_device_written(bn_net *net)
{
    each_blob(net, mark_written, NULL);
}

const bn_layer *bn_net_graph_blocker(const bn_net *net)
{
    for (int i = 0; i < net->num_layers; i++) {
        const bn_layer_ops *ops = net->layers[i]->ops;
        if (!ops->graph_safe || !ops->forward_gpu || !ops->backward_gpu) return net->layers[i];
    }
    return NULL;
}

int bn_net_graph_safe(const bn_net *net)
{
    return bn_net_graph_blocker(net) == NULL;
}
