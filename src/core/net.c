#include "net.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

static bn_status parse_input(bn_options *o, bn_net *net)
{
    bn_shape *in = &net->input_shape;
    double mean, std;
    BN_TRY(bn_opt_int_required(o, "channels", 1, 1 << 16, &in->c));
    BN_TRY(bn_opt_int_required(o, "height", 1, 1 << 16, &in->h));
    BN_TRY(bn_opt_int_required(o, "width", 1, 1 << 16, &in->w));
    BN_TRY(bn_opt_float(o, "mean", 0.0, -1e3, 1e3, &mean));
    BN_TRY(bn_opt_float(o, "std", 1.0, 1e-6, 1e3, &std));
    net->input_mean = (float)mean;
    net->input_std = (float)std;
    return bn_options_check_unused(o);
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

static bn_status add_layer(bn_net *net, bn_options *o, const bn_layer_ops *ops)
{
    bn_layer **grown = realloc(net->layers, (size_t)(net->num_layers + 1) * sizeof *grown);
    if (!grown) return bn_error(BN_ERR_NOMEM, "out of host memory building %s", net->source);
    net->layers = grown;
    bn_layer *l = calloc(1, sizeof *l);
    if (!l) return bn_error(BN_ERR_NOMEM, "out of host memory building %s", net->source);
    l->ops = ops;
    l->index = net->num_layers;
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
    for (int i = 0; i < l->index; i++)
        if (strcmp(net->layers[i]->name, l->name) == 0)
            return bn_opt_error(o, "name", "layer name '%s' is used twice", l->name);
    if (ops->parse) BN_TRY(ops->parse(l, o));
    return bn_options_check_unused(o);
}

static bn_status build(bn_net *net, bn_modelfile *m)
{
    int seen_input = 0, seen_train = 0;
    for (int i = 0; i < m->count; i++) {
        bn_options *o = &m->sections[i];
        if (strcmp(o->section, "input") == 0) {
            if (seen_input++) return bn_error(BN_ERR_USAGE, "%s:%d: second [input] section", o->file, o->line);
            BN_TRY(parse_input(o, net));
        } else if (strcmp(o->section, "train") == 0) {
            if (seen_train++) return bn_error(BN_ERR_USAGE, "%s:%d: second [train] section", o->file, o->line);
            BN_TRY(bn_train_config_parse(o, &net->train));
            BN_TRY(bn_options_check_unused(o));
        } else {
            const bn_layer_ops *ops = bn_find_layer(o->section);
            if (!ops) return unknown_section(o);
            BN_TRY(add_layer(net, o, ops));
        }
    }
    if (!seen_input)
        return bn_error(BN_ERR_USAGE, "%s: no [input] section (channels, height, width)", net->source);
    if (net->num_layers == 0) return bn_error(BN_ERR_USAGE, "%s: no layers", net->source);
    for (int i = 0; i + 1 < net->num_layers; i++)
        if (net->layers[i]->ops->is_loss)
            return bn_error(BN_ERR_USAGE, "%s: loss layer %s must be the last layer", net->source,
                            net->layers[i]->name);
    return BN_OK;
}

bn_status bn_net_from_text(const char *text, const char *name, bn_net **out)
{
    *out = NULL;
    bn_net *net = calloc(1, sizeof *net);
    if (!net) return bn_error(BN_ERR_NOMEM, "out of host memory building %s", name);
    snprintf(net->source, sizeof net->source, "%s", name);
    net->model_hash = fnv1a(text);
    net->train = bn_train_config_defaults();
    net->input_std = 1.0f;
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

/* Adds count floats (in doubles, which cannot overflow here) to *bytes and refuses the net once
 * they pass its limit, before the blobs exist: no allocation is ever attempted for them. */
static bn_status add_bytes(bn_net *net, double count, const char *what, double *bytes)
{
    *bytes += 4.0 * count;
    size_t limit = net->max_bytes ? net->max_bytes : BN_NET_MAX_BYTES;
    if (*bytes <= (double)limit) return BN_OK;
    return bn_error(BN_ERR_USAGE, "%s: at batch %d the network needs over %.3g GB of memory (at %s), more than "
                    "the limit of %.3g GB; use a smaller batch or smaller layers", net->source, net->capacity,
                    *bytes / 1e9, what, (double)limit / 1e9);
}

/* The floats of one example's blob of shape s, with its gradient when it has one. */
static double blob_floats(const bn_net *net, bn_shape s, int with_grad)
{
    return (double)s.c * s.h * s.w * net->capacity * (with_grad ? 2 : 1);
}

/* Parameters and their gradients, as declared by the layer's setup. */
static double param_floats(const bn_layer *l)
{
    double n = 0;
    for (int k = 0; k < l->num_params; k++) {
        const bn_blob *d = l->params[k].value;
        n += 2.0 * d->n * d->c * d->h * d->w;
    }
    return n;
}

static bn_status setup_layers(bn_net *net, int want_input_grad)
{
    bn_shape in = net->input_shape;
    double bytes = 0;
    BN_TRY(add_bytes(net, blob_floats(net, in, want_input_grad), "the input", &bytes));
    net->input = new_blob("input", "", net->capacity, in);
    if (!net->input) return bn_last_status();
    if (want_input_grad && !(net->input_grad = new_blob("input", ".grad", net->capacity, in)))
        return bn_last_status();
    bn_blob *prev_out = net->input, *prev_grad = net->input_grad;
    for (int i = 0; i < net->num_layers; i++) {
        bn_layer *l = net->layers[i];
        bn_shape out = {0, 0, 0};
        l->bias_lr_mult = (float)net->train.bias_lr_mult;
        BN_TRY(l->ops->setup(l, in, &out));
        if (out.c <= 0 || out.h <= 0 || out.w <= 0)
            return bn_layer_error(l, "input %dx%dx%d gives an empty output %dx%dx%d", in.c, in.h, in.w,
                                  out.c, out.h, out.w);
        BN_TRY(add_bytes(net, blob_floats(net, out, !l->ops->is_loss) + param_floats(l), l->name, &bytes));
        l->in = prev_out;
        l->in_grad = prev_grad;
        if (!(l->out = new_blob(l->name, ".out", net->capacity, out))) return bn_last_status();
        if (!l->ops->is_loss && !(l->out_grad = new_blob(l->name, ".grad", net->capacity, out)))
            return bn_last_status();
        prev_out = l->out;
        prev_grad = l->out_grad;
        in = out;
    }
    return BN_OK;
}

/* Moves every declared parameter into views of the two slabs, in layer order. */
static bn_status carve_params(bn_net *net)
{
    size_t total = 0;
    for (int i = 0; i < net->num_layers; i++)
        for (int k = 0; k < net->layers[i]->num_params; k++)
            total += bn_blob_count(net->layers[i]->params[k].value);
    net->num_params = total;
    if (total == 0) return BN_OK;
    if (total > (size_t)1 << 31) return bn_error(BN_ERR_USAGE, "%s: %zu parameters is too many", net->source, total);
    if (!(net->params = bn_blob_new("params", (int)total, 1, 1, 1))) return bn_last_status();
    if (!(net->grads = bn_blob_new("grads", (int)total, 1, 1, 1))) return bn_last_status();
    size_t offset = 0;
    for (int i = 0; i < net->num_layers; i++) {
        bn_layer *l = net->layers[i];
        for (int k = 0; k < l->num_params; k++) {
            bn_param *p = &l->params[k];
            bn_blob *d = p->value;
            char name[128];
            snprintf(name, sizeof name, "%s.%s", l->name, p->name);
            bn_blob *v = bn_blob_new_view(name, net->params, offset, d->n, d->c, d->h, d->w);
            snprintf(name, sizeof name, "%s.%s.grad", l->name, p->name);
            bn_blob *g = bn_blob_new_view(name, net->grads, offset, d->n, d->c, d->h, d->w);
            if (!v || !g) {
                bn_blob_free(v);
                bn_blob_free(g);
                return bn_last_status();
            }
            offset += bn_blob_count(d);
            bn_blob_free(d);
            p->value = v;
            p->grad = g;
        }
    }
    return BN_OK;
}

static bn_status reserve_all(bn_net *net, bn_status (*reserve)(bn_blob *))
{
    bn_blob *fixed[] = {net->input, net->input_grad, net->labels, net->metrics, net->params, net->grads};
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
        if (fixed[i]) BN_TRY(reserve(fixed[i]));
    for (int i = 0; i < net->num_layers; i++) {
        BN_TRY(reserve(net->layers[i]->out));
        if (net->layers[i]->out_grad) BN_TRY(reserve(net->layers[i]->out_grad));
    }
    return BN_OK;
}

bn_status bn_net_setup(bn_net *net, int batch, bn_ctx *ctx, int want_input_grad, uint64_t seed)
{
    if (net->capacity) return bn_error(BN_ERR_INTERNAL, "%s: network is already set up", net->source);
    if (batch <= 0) return bn_error(BN_ERR_USAGE, "batch size %d must be positive", batch);
    net->capacity = net->batch = batch;
    BN_TRY(setup_layers(net, want_input_grad));
    BN_TRY(carve_params(net));
    if (!(net->labels = bn_blob_new("labels", batch, 1, 1, 1))) return bn_last_status();
    if (!(net->metrics = bn_blob_new("metrics", 2, 1, 1, 1))) return bn_last_status();
    net->pass = (bn_pass){.seed = seed, .labels = net->labels, .metrics = net->metrics, .ctx = ctx};
    BN_TRY(reserve_all(net, bn_blob_reserve_host));
    if (ctx) BN_TRY(reserve_all(net, bn_blob_reserve_device));
    if (ctx) bn_net_fuse(net);
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
    }
    return BN_OK;
}

static bn_status reshape_batch(bn_blob *b, int n)
{
    return b ? bn_blob_reshape(b, n, b->c, b->h, b->w) : BN_OK;
}

bn_status bn_net_set_batch(bn_net *net, int n)
{
    if (n <= 0 || n > net->capacity)
        return bn_error(BN_ERR_INTERNAL, "%s: batch %d outside 1..%d", net->source, n, net->capacity);
    if (n == net->batch) return BN_OK;
    BN_TRY(reshape_batch(net->input, n));
    BN_TRY(reshape_batch(net->input_grad, n));
    BN_TRY(reshape_batch(net->labels, n));
    for (int i = 0; i < net->num_layers; i++) {
        BN_TRY(reshape_batch(net->layers[i]->out, n));
        BN_TRY(reshape_batch(net->layers[i]->out_grad, n));
    }
    net->batch = n;
    return BN_OK;
}

bn_status bn_net_forward(bn_net *net, int train)
{
    net->pass.train = train;
    for (int i = 0; i < net->num_layers; i++) BN_TRY(bn_layer_forward(net->layers[i], &net->pass));
    return BN_OK;
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
        s = bn_layer_backward(net->layers[i], &net->pass);
        if (s == BN_OK && done) s = done(arg, net, net->layers[i]);
    }
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
    }
    bn_blob_free(l->out);
    bn_blob_free(l->out_grad);
    free(l);
}

void bn_net_free(bn_net *net)
{
    if (!net) return;
    for (int i = 0; i < net->num_layers; i++) free_layer(net->layers[i]);
    free(net->layers);
    bn_blob *own[] = {net->input, net->input_grad, net->labels, net->metrics, net->params, net->grads};
    for (size_t i = 0; i < sizeof own / sizeof own[0]; i++) bn_blob_free(own[i]);
    free(net);
}

void bn_net_mark_device_written(bn_net *net)
{
    bn_blob *fixed[] = {net->input, net->input_grad, net->labels, net->metrics, net->params, net->grads};
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++) bn_blob_mark_device_written(fixed[i]);
    for (int i = 0; i < net->num_layers; i++) {
        bn_blob_mark_device_written(net->layers[i]->out);
        bn_blob_mark_device_written(net->layers[i]->out_grad);
    }
}

int bn_net_graph_safe(const bn_net *net)
{
    for (int i = 0; i < net->num_layers; i++) {
        const bn_layer_ops *ops = net->layers[i]->ops;
        if (!ops->graph_safe || !ops->forward_gpu || !ops->backward_gpu) return 0;
    }
    return 1;
}
