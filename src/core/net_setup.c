/* net_setup.c - a network made ready for a batch size: shapes walked from the input, the host
 * and device memory it needs checked before anything is allocated, every blob made, the
 * parameters, their gradients and the buffers carved out of slabs, and the initial values. */
#include "net.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device_ops.h"
#include "host_memory.h"
#include "rng.h"

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
    BN_TRY(bn_device_ops_current()->ctx_memory(ctx, &free_bytes, &total_bytes));
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
    /* Room for a part per reader but the first, made once: the readers were counted when the
     * inputs were resolved. */
    int readers = src < 0 ? net->num_input_readers : net->layers[src]->num_readers;
    if (!*parts && !(*parts = malloc((size_t)(readers - 1) * sizeof **parts)))
        return bn_error(BN_ERR_NOMEM, "out of host memory setting up %s", net->source);
    bn_blob **grown = *parts;
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

/* Whether layer l may run in place over the output of the layer it reads (bn_layer.in_place): l
 * is a ReLU, its input is a layer's output that nothing else reads, and that layer's backward
 * pass does not need its output as it was (bn_layer_ops.relu_in_place). Then the ReLU's output
 * and output gradient are that layer's blobs, which halves what a chain of ReLUs holds.
 *
 * Only on the CPU (ctx NULL). On a device the fusion rules (fusion.c) may hand the ReLU's passes
 * to its neighbours' kernels, which write the producer's output and the ReLU's as two blobs
 * (a dense or convolution epilogue, batchnorm's and add's kernels) and mask gradients reading the
 * ReLU's output: with one blob for both those kernels would read what they have just written.
 * The fusion is decided after the blobs exist, so the setup cannot yet know which ReLUs it takes;
 * a device also has the memory of these blobs to spare far more often than a long CPU chain. */
static int runs_in_place(const bn_net *net, const bn_layer *l, const bn_ctx *ctx)
{
    if (!net->relu_in_place || ctx || l->num_inputs != 1 || l->sources[0] < 0 || !(l->ops->absorbable_as & BN_ABSORB_RELU)) return 0;
    const bn_layer *p = net->layers[l->sources[0]];
    return p->num_readers == 1 && p->ops->relu_in_place && !p->ops->is_loss && p->out_grad;
}

static bn_status setup_layers(bn_net *net, int want_input_grad, bn_ctx *ctx, mem_budget *budget)
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
        l->cpu_relu = l->cpu_fused = 0; /* set again by the ReLU after it, below */
        l->cpu_sum_into = NULL, l->cpu_summed_input = 0; /* set again by bn_net_fuse_cpu_sums */
        l->in_place = runs_in_place(net, l, ctx) && out.c == in.c && out.h == in.h && out.w == in.w;
        s = add_bytes(net, (l->in_place ? 0 : blob_floats(net, out, !l->ops->is_loss)) + param_floats(l), l->name,
                      budget);
        for (int j = 0; j < l->num_inputs && s == BN_OK; j++) s = wire_input_grad(net, l, j, first_reader, budget);
        if (s != BN_OK) break;
        l->in = l->inputs[0];
        l->in_grad = l->input_grads[0];
        if (l->in_place) {
            bn_layer *producer = net->layers[l->sources[0]];
            l->out = l->in;
            l->out_grad = producer->out_grad;
            producer->cpu_relu = l->cpu_fused = producer->ops->relu_cpu;
        } else if (!(l->out = new_blob(l->name, ".out", net->capacity, out)) ||
                   (!l->ops->is_loss && !(l->out_grad = new_blob(l->name, ".grad", net->capacity, out)))) {
            s = bn_last_status();
        }
    }
    free(first_reader);
    if (s == BN_OK) bn_net_fuse_cpu_sums(net);
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
    return bn_net_each_blob(net, reserve_one, &r);
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
    BN_TRY(setup_layers(net, want_input_grad, ctx, &budget));
    if (ctx) BN_TRY(check_device_memory(net, ctx, budget.need));
    /* The activations and their gradients; the labels, made below, stay FP32. */
    if (bf16) BN_TRY(bn_net_each_batch_blob(net, set_bf16, NULL));
    BN_TRY(carve_params(net));
    if (bf16) BN_TRY(carve_params16(net));
    BN_TRY(carve_buffers(net));
    if (!(net->labels = bn_blob_new("labels", batch, 1, 1, 1))) return bn_last_status();
    if (!(net->metrics = bn_blob_new("metrics", 2, 1, 1, 1))) return bn_last_status();
    net->pass = (bn_pass){.seed = seed, .labels = net->labels, .metrics = net->metrics, .ctx = ctx};
    BN_TRY(reserve_all(net, bn_blob_reserve_host));
    if (ctx) BN_TRY(reserve_all(net, bn_blob_reserve_device));
    /* Under bf16 the blobs are BF16 by now, and each layer's hook refuses what its BF16 passes
     * cannot take (batchnorm's kernels take a ReLU in either precision). */
    if (ctx) bn_net_fuse(net);
    if (ctx) BN_TRY(bn_net_join_slices(net));
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
