#include "checkpoint.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint_meta.h"
#include "core/optimizers/optimizers.h"
#include "io/safetensors.h"

#define STATE_NAME_MAX 16 /* room for a state slab's name and its dot: "momentum_buffer." is the longest */

/* ---- the net's tensors ------------------------------------------------------------ */

/* Buffers (running statistics) are saved flat, "<layer>.<buffer>" as 1-d [count], after the
 * weights and before any optimizer state: a batch normalization's [C], as PyTorch keeps it. */

/* One parameter as the checkpoint names and shapes it, and where it lives in the slab. */
typedef struct tensor_spec {
    char name[128];      /* "<layer>.<param>" */
    char state_name[BN_OPTIMIZER_MAX_STATE][STATE_NAME_MAX + 128]; /* "<state>.<layer>.<param>" */
    int rank;
    uint64_t dims[4];
    size_t offset;       /* elements into net->params (and into each state slab) */
    size_t count;
} tensor_spec;

/* The shape written for a parameter blob. Rule: c = h = w = 1 (biases and other per-output
 * vectors) is 1-d [n]; h = w = 1 (dense weights) is 2-d [n, c]; anything else (convolution
 * kernels) is 4-d [n, c, h, w]. These are the shapes PyTorch's Linear and Conv2d use, except
 * a 1x1 convolution's kernel, which comes out [n, c] and needs a reshape there. */
static int param_shape(const bn_blob *b, uint64_t dims[4])
{
    dims[0] = (uint64_t)b->n, dims[1] = (uint64_t)b->c, dims[2] = (uint64_t)b->h, dims[3] = (uint64_t)b->w;
    if (b->h == 1 && b->w == 1) return b->c == 1 ? 1 : 2;
    return 4;
}

/* Every parameter of the net in slab order, with the tensor names of the num_state state
 * slabs named in state; *out is the caller's to free. */
static bn_status list_params(bn_net *net, const char *const *state, int num_state, tensor_spec **out,
                             size_t *count)
{
    *out = NULL;
    *count = 0;
    if (net->capacity == 0)
        return bn_error(BN_ERR_INTERNAL, "%s: checkpoints need a network that is set up", net->source);
    size_t total = 0;
    for (int i = 0; i < net->num_layers; i++) total += (size_t)net->layers[i]->num_params;
    tensor_spec *specs = calloc(total ? total : 1, sizeof *specs);
    if (!specs) return bn_error(BN_ERR_NOMEM, "out of host memory listing %s's parameters", net->source);
    size_t k = 0;
    for (int i = 0; i < net->num_layers; i++) {
        const bn_layer *l = net->layers[i];
        for (int j = 0; j < l->num_params; j++, k++) {
            const bn_param *p = &l->params[j];
            tensor_spec *t = &specs[k];
            snprintf(t->name, sizeof t->name, "%s.%s", l->name, p->name);
            for (int s = 0; s < num_state; s++)
                snprintf(t->state_name[s], sizeof t->state_name[s], "%s.%s", state[s], t->name);
            t->rank = param_shape(p->value, t->dims);
            t->offset = p->value->offset;
            t->count = bn_blob_count(p->value);
        }
    }
    *out = specs;
    *count = total;
    return BN_OK;
}

/* Every buffer of the net in slab order (offsets into net->buffers); *out is the caller's. */
static bn_status list_buffers(bn_net *net, tensor_spec **out, size_t *count)
{
    size_t total = 0;
    for (int i = 0; i < net->num_layers; i++) total += (size_t)net->layers[i]->num_buffers;
    tensor_spec *specs = calloc(total ? total : 1, sizeof *specs);
    if (!specs) return bn_error(BN_ERR_NOMEM, "out of host memory listing %s's buffers", net->source);
    size_t k = 0;
    for (int i = 0; i < net->num_layers; i++)
        for (int j = 0; j < net->layers[i]->num_buffers; j++, k++) {
            const bn_buffer *b = &net->layers[i]->buffers[j];
            snprintf(specs[k].name, sizeof specs[k].name, "%s.%s", net->layers[i]->name, b->name);
            specs[k].rank = 1;
            specs[k].dims[0] = specs[k].count = bn_blob_count(b->value);
            specs[k].offset = b->value->offset;
        }
    *out = specs;
    *count = total;
    return BN_OK;
}

/* The optimizer holds one full slab per state name of its kind. */
static bn_status check_optimizer(const bn_net *net, const bn_optimizer *opt)
{
    const bn_optimizer_type *t = bn_optimizer_type_at(opt->cfg.optimizer);
    const char *const *names = t->state;
    for (int k = 0; k < t->num_state; k++) {
        size_t have = k < opt->num_state ? bn_blob_count(opt->state[k]) : 0;
        if (have != net->num_params)
            return bn_error(BN_ERR_INTERNAL, "%s: the optimizer holds %zu %s values for %zu parameters",
                            net->source, have, names[k], net->num_params);
    }
    return BN_OK;
}

/* "[500,784]" */
static void format_dims(const uint64_t *dims, int rank, char *buf, size_t cap)
{
    size_t n = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < rank && n < cap; i++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%llu", i ? "," : "", (unsigned long long)dims[i]);
    if (n < cap) snprintf(buf + n, cap - n, "]");
}

/* ---- save ------------------------------------------------------------------------- */

static bn_status refuse_non_finite(const char *path, const char *name, const tensor_spec *t,
                                   const float *slab)
{
    for (size_t i = 0; i < t->count; i++) {
        float v = slab[t->offset + i];
        if (!isfinite(v))
            return bn_error(BN_ERR_NUMERIC, "not saving checkpoint %s: %s holds %s at element %zu (the file "
                            "already there, if any, is left as it was)", path, name,
                            isnan(v) ? "NaN" : "infinity", i);
    }
    return BN_OK;
}

bn_status bn_checkpoint_save(const char *path, bn_net *net, const bn_optimizer *opt, const bn_train_state *st)
{
    const bn_optimizer_type *type = opt ? bn_optimizer_type_at(opt->cfg.optimizer) : NULL;
    const char *const *names = type ? type->state : NULL;
    int ns = type ? type->num_state : 0;
    tensor_spec *specs, *bspecs = NULL;
    size_t n, nb = 0;
    BN_TRY(list_params(net, names, ns, &specs, &n));
    const float *weights = NULL, *buffers = NULL, *state[BN_OPTIMIZER_MAX_STATE] = {NULL};
    bn_status s = opt ? check_optimizer(net, opt) : BN_OK;
    if (s == BN_OK) s = list_buffers(net, &bspecs, &nb);
    if (s == BN_OK && net->num_params) {
        if (!(weights = bn_blob_host_rd(net->params))) s = bn_last_status();
        for (int k = 0; k < ns && s == BN_OK; k++)
            if (!(state[k] = bn_blob_host_rd(opt->state[k]))) s = bn_last_status();
    }
    if (s == BN_OK && nb && !(buffers = bn_blob_host_rd(net->buffers))) s = bn_last_status();
    for (size_t i = 0; s == BN_OK && i < nb; i++) s = refuse_non_finite(path, bspecs[i].name, &bspecs[i], buffers);
    /* The loader refuses NaN and infinity, so a file holding them could never be resumed:
     * refusing it here keeps the last good checkpoint in place instead. */
    for (size_t i = 0; s == BN_OK && i < n; i++) {
        s = refuse_non_finite(path, specs[i].name, &specs[i], weights);
        for (int k = 0; k < ns && s == BN_OK; k++)
            s = refuse_non_finite(path, specs[i].state_name[k], &specs[i], state[k]);
    }
    bn_safetensors_tensor *tensors = NULL;
    if (s == BN_OK && !(tensors = calloc((size_t)(1 + ns) * n + nb + 1, sizeof *tensors)))
        s = bn_error(BN_ERR_NOMEM, "out of host memory saving checkpoint %s", path);
    if (s == BN_OK) {
        size_t k = 0;
        for (size_t i = 0; i < n; i++)
            tensors[k++] = (bn_safetensors_tensor){specs[i].name, specs[i].rank, specs[i].dims,
                                                   weights + specs[i].offset};
        for (size_t i = 0; i < nb; i++)
            tensors[k++] = (bn_safetensors_tensor){bspecs[i].name, 1, bspecs[i].dims, buffers + bspecs[i].offset};
        for (int j = 0; j < ns; j++)
            for (size_t i = 0; i < n; i++)
                tensors[k++] = (bn_safetensors_tensor){specs[i].state_name[j], specs[i].rank, specs[i].dims,
                                                       state[j] + specs[i].offset};
        bn_checkpoint_fields meta;
        bn_checkpoint_fields_build(&meta, net, opt, st);
        s = net->input_norm_auto && !meta.input_norm ? bn_error(BN_ERR_NOMEM, "out of host memory saving %s", path)
                                                     : bn_safetensors_save(path, meta.list, meta.count, tensors, k);
        bn_checkpoint_fields_free(&meta);
    }
    free(tensors);
    free(specs);
    free(bspecs);
    return s;
}

/* ---- load ------------------------------------------------------------------------- */

static int name_is(const bn_safetensors_entry *e, const char *name)
{
    size_t n = strlen(name);
    return e->name_len == n && memcmp(e->name, name, n) == 0;
}

static bn_status check_shape(const bn_safetensors *f, const bn_safetensors_entry *e, const tensor_spec *spec)
{
    if (bn_safetensors_shape_is(e, spec->dims, spec->rank)) return BN_OK;
    char name[160], got[96], want[96];
    bn_safetensors_shape_text(e, got, sizeof got);
    format_dims(spec->dims, spec->rank, want, sizeof want);
    return bn_error(BN_ERR_DATA, "%s: tensor %s has shape %s but the model expects %s", f->path,
                    bn_safetensors_printable(e->name, e->name_len, name, sizeof name), got, want);
}

/* Whether e is named as some optimizer's state tensor, "<state>.<...>". */
static int is_state_tensor(const bn_safetensors_entry *e)
{
    for (int i = 0; i < bn_optimizer_type_count(); i++) {
        const bn_optimizer_type *t = bn_optimizer_type_at(i);
        for (int k = 0; k < t->num_state; k++) {
            size_t len = strlen(t->state[k]);
            if (e->name_len > len + 1 && memcmp(e->name, t->state[k], len) == 0 && e->name[len] == '.') return 1;
        }
    }
    return 0;
}

/* The net's tensors as a load matches them: n parameters with ns state slabs, nb buffers. */
typedef struct tensor_lists {
    const tensor_spec *specs, *bspecs;
    size_t n, nb;
    const char *const *state;
    int ns;
} tensor_lists;

/* Where the tensor named as e goes: j for parameter j's weights, (1 + k) * n + j for its state
 * slab k (of ns), (1 + ns) * n + b for buffer b, past all of them when the net has no such
 * tensor. Weight names come first: a layer may itself be called "momentum". */
static size_t slot_of(const bn_safetensors_entry *e, const tensor_lists *t)
{
    for (size_t j = 0; j < t->n; j++)
        if (name_is(e, t->specs[j].name)) return j;
    size_t base = (size_t)(1 + t->ns) * t->n;
    for (size_t b = 0; b < t->nb; b++)
        if (name_is(e, t->bspecs[b].name)) return base + b;
    for (int k = 0; k < t->ns; k++)
        for (size_t j = 0; j < t->n; j++)
            if (name_is(e, t->specs[j].state_name[k])) return (size_t)(1 + k) * t->n + j;
    return base + t->nb;
}

/* Which of the file's tensors holds each parameter's weights and, in found's later runs of n,
 * its state in each of the ns slabs named in state (required when want_state). A tensor the net
 * does not have is an error, except any optimizer's state in a weights-only load. */
static bn_status match_tensors(const bn_safetensors *f, const tensor_lists *t, int weights_only, int want_state,
                               bn_safetensors_entry *found)
{
    const tensor_spec *specs = t->specs;
    const char *const *state = t->state;
    size_t n = t->n, base = (size_t)(1 + t->ns) * n, slots = base + t->nb;
    int ns = t->ns;
    int *seen = calloc(slots ? slots : 1, sizeof *seen);
    bn_status s = BN_OK;
    if (!seen) s = bn_error(BN_ERR_NOMEM, "out of host memory reading %s", f->path);
    for (size_t i = 0; i < f->num_tensors && s == BN_OK; i++) {
        bn_safetensors_entry e;
        if ((s = bn_safetensors_check_entry(f, i, &e)) != BN_OK) break;
        size_t at = slot_of(&e, t);
        if (at == slots && weights_only && is_state_tensor(&e)) continue;
        if (at == slots) {
            char name[160];
            s = bn_error(BN_ERR_DATA, "%s: tensor %s is not in the model", f->path,
                         bn_safetensors_printable(e.name, e.name_len, name, sizeof name));
        } else {
            found[at] = e;
            seen[at] = 1;
        }
    }
    for (size_t j = 0; j < n && s == BN_OK; j++) {
        if (!seen[j])
            s = bn_error(BN_ERR_DATA, "%s: parameter %s of the model is missing from the file", f->path,
                         specs[j].name);
        for (int k = 0; k < ns && want_state && s == BN_OK; k++)
            if (!seen[(size_t)(1 + k) * n + j])
                s = bn_error(BN_ERR_DATA, "%s: %s of %s (tensor %s) is missing from the file", f->path, state[k],
                             specs[j].name, specs[j].state_name[k]);
        if (s == BN_OK) s = check_shape(f, &found[j], &specs[j]);
        for (int k = 0; k < ns && want_state && s == BN_OK; k++)
            s = check_shape(f, &found[(size_t)(1 + k) * n + j], &specs[j]);
    }
    for (size_t b = 0; b < t->nb && s == BN_OK; b++) {
        if (!seen[base + b])
            s = bn_error(BN_ERR_DATA, "%s: buffer %s of the model is missing from the file", f->path, t->bspecs[b].name);
        else
            s = check_shape(f, &found[base + b], &t->bspecs[b]);
    }
    free(seen);
    return s;
}

static bn_status stage_all(const bn_safetensors *f, const bn_safetensors_entry *found,
                           const tensor_spec *specs, size_t n, float *dst)
{
    for (size_t j = 0; j < n; j++) BN_TRY(bn_safetensors_read_f32(f, &found[j], dst + specs[j].offset));
    return BN_OK;
}

/* Everything a load does once the file is open: check, stage into temporary buffers, and
 * only then copy into net and opt, so that a bad file leaves them untouched. cs is NULL
 * for a weights-only load. */
static bn_status load_open(const bn_safetensors *f, bn_net *net, bn_optimizer *opt, const bn_checkpoint_meta *cs)
{
    const bn_optimizer_type *type = cs ? bn_optimizer_type_at(cs->optimizer) : NULL;
    const char *const *names = type ? type->state : NULL;
    int ns = type ? type->num_state : 0;
    tensor_spec *specs, *bspecs = NULL;
    size_t n, nb = 0;
    BN_TRY(list_params(net, names, ns, &specs, &n));
    bn_status s = list_buffers(net, &bspecs, &nb);
    int want_state = opt != NULL;
    size_t slab = net->num_params ? net->num_params : 1, staged = want_state ? (size_t)(1 + ns) : 1;
    size_t nbuf = net->num_buffer_floats;
    bn_safetensors_entry *found = calloc((size_t)(1 + ns) * n + nb + 1, sizeof *found);
    float *buf = malloc((staged * slab + nbuf) * sizeof *buf); /* the weights, each state slab, the buffers */
    double *norm = malloc(2 * (size_t)net->input_shape.c * sizeof *norm); /* [input]'s auto mean and std */
    if (s == BN_OK && (!found || !buf || !norm)) s = bn_error(BN_ERR_NOMEM, "out of host memory loading %s", f->path);
    if (s == BN_OK) s = bn_checkpoint_meta_input_norm(f, net, norm, norm + net->input_shape.c);
    tensor_lists t = {specs, bspecs, n, nb, names, ns};
    if (s == BN_OK) s = match_tensors(f, &t, cs == NULL, want_state, found);
    for (size_t k = 0; k < staged && s == BN_OK; k++) s = stage_all(f, found + k * n, specs, n, buf + k * slab);
    if (s == BN_OK) s = stage_all(f, found + (size_t)(1 + ns) * n, bspecs, nb, buf + staged * slab);
    float *dst[1 + BN_OPTIMIZER_MAX_STATE] = {NULL}, *bdst = NULL;
    for (size_t k = 0; k < staged && s == BN_OK && net->num_params; k++)
        if (!(dst[k] = bn_blob_host_wr(k ? opt->state[k - 1] : net->params))) s = bn_last_status();
    if (s == BN_OK && nbuf && !(bdst = bn_blob_host_wr(net->buffers))) s = bn_last_status();
    if (s == BN_OK) {
        for (size_t k = 0; k < staged && net->num_params; k++)
            memcpy(dst[k], buf + k * slab, net->num_params * sizeof *buf);
        if (nbuf) memcpy(bdst, buf + staged * slab, nbuf * sizeof *buf);
        if (opt) opt->iter = cs->iter;
        if (net->input_norm_auto) s = bn_net_set_input_norm(net, norm, norm + net->input_shape.c);
    }
    /* The products under --precision bf16 read the BF16 copy of the weights just loaded. */
    if (s == BN_OK) s = bn_net_refresh_params16(net);
    free(found);
    free(buf);
    free(norm);
    free(specs);
    free(bspecs);
    return s;
}

/* A full load; with r, a resume's too. */
static bn_status load(const char *path, bn_net *net, bn_optimizer *opt, bn_train_state *st, bn_resume *r)
{
    if (opt) BN_TRY(check_optimizer(net, opt));
    bn_safetensors f;
    bn_checkpoint_meta m;
    bn_status s = bn_safetensors_open(path, &f);
    if (s == BN_OK) s = bn_checkpoint_meta_read(&f, net, &m);
    if (s == BN_OK && opt && !m.has_state)
        s = bn_error(BN_ERR_DATA, "%s holds no optimizer state (has_momentum is 0), so training cannot "
                     "resume from it; load only its weights instead", path);
    if (s == BN_OK && opt && m.optimizer != opt->cfg.optimizer)
        s = bn_error(BN_ERR_DATA, "%s holds the state of optimizer %s, but this run's optimizer is %s; resume "
                     "with the optimizer it was saved with", path, bn_optimizer_names[m.optimizer],
                     bn_optimizer_names[opt->cfg.optimizer]);
    if (s == BN_OK && r) s = bn_checkpoint_meta_resume(&f, net, opt ? &opt->cfg : &net->train, &m, r);
    if (s == BN_OK) s = load_open(&f, net, opt, &m);
    if (s == BN_OK && st) *st = m.st;
    if (s == BN_OK && m.text_changed) bn_checkpoint_note_text_changed(path, net);
    bn_safetensors_close(&f);
    return s;
}

bn_status bn_checkpoint_load(const char *path, bn_net *net, bn_optimizer *opt, bn_train_state *st)
{
    return load(path, net, opt, st, NULL);
}

bn_status bn_checkpoint_resume(const char *path, bn_net *net, bn_optimizer *opt, bn_train_state *st, bn_resume *r)
{
    return load(path, net, opt, st, r);
}

bn_status bn_checkpoint_load_weights(const char *path, bn_net *net)
{
    bn_safetensors f;
    int text_changed = 0;
    bn_status s = bn_safetensors_open(path, &f);
    if (s == BN_OK) s = bn_checkpoint_meta_check_model(&f, net, &text_changed);
    if (s == BN_OK) s = load_open(&f, net, NULL, NULL);
    if (s == BN_OK && text_changed) bn_checkpoint_note_text_changed(path, net);
    bn_safetensors_close(&f);
    return s;
}
