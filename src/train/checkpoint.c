#include "checkpoint.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/safetensors.h"

#define FORMAT_NAME "blobnet"
#define FORMAT_VERSION "1"
#define STATE_NAME_MAX 16 /* room for a state slab's name and its dot: "exp_avg_sq." is the longest */

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
    const char *names[BN_OPTIMIZER_MAX_STATE];
    int n = bn_optimizer_state_names(opt->cfg.optimizer, names);
    for (int k = 0; k < n; k++) {
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

/* The metadata fields are the ones read_blobnet_meta reads back. An SGD optimizer is not
 * named: its files stay byte for byte what they were before there was a choice, and a file
 * that names no optimizer holds SGD's state. */
static bn_status write_file(const char *path, const bn_net *net, const bn_optimizer *opt, const bn_train_state *st,
                            const bn_safetensors_tensor *tensors, size_t count)
{
    bn_train_state zero = {0};
    if (!st) st = &zero;
    char hash[32], seed[32], epoch[32], batch[32], step[32], iter[32], loss[32], correct[32], seen[32];
    snprintf(hash, sizeof hash, "%016llx", (unsigned long long)net->model_hash);
    snprintf(seed, sizeof seed, "%llu", st->seed);
    snprintf(epoch, sizeof epoch, "%d", st->epoch);
    snprintf(batch, sizeof batch, "%d", st->batch_in_epoch);
    snprintf(step, sizeof step, "%ld", st->step);
    snprintf(iter, sizeof iter, "%ld", opt ? opt->iter : 0L);
    /* 17 significant digits print every double so that strtod gives back the same bits. */
    snprintf(loss, sizeof loss, "%.17g", st->epoch_loss_sum);
    snprintf(correct, sizeof correct, "%.17g", st->epoch_correct);
    snprintf(seen, sizeof seen, "%ld", st->epoch_seen);
    bn_optimizer_kind kind = opt ? opt->cfg.optimizer : BN_OPT_SGD;
    const bn_safetensors_field meta[] = {
        {"format", FORMAT_NAME}, {"version", FORMAT_VERSION}, {"model_hash", hash},
        {"model_file", net->source}, {"seed", seed}, {"epoch", epoch}, {"batch_in_epoch", batch},
        {"step", step}, {"iter", iter}, {"epoch_loss_sum", loss}, {"epoch_correct", correct},
        {"epoch_seen", seen}, {"has_momentum", opt ? "1" : "0"}, {"optimizer", bn_optimizer_names[kind]},
    };
    size_t fields = sizeof meta / sizeof *meta - (kind == BN_OPT_SGD);
    return bn_safetensors_save(path, meta, fields, tensors, count);
}

bn_status bn_checkpoint_save(const char *path, bn_net *net, const bn_optimizer *opt, const bn_train_state *st)
{
    const char *names[BN_OPTIMIZER_MAX_STATE];
    int ns = opt ? bn_optimizer_state_names(opt->cfg.optimizer, names) : 0;
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
        s = write_file(path, net, opt, st, tensors, k);
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
    for (int kind = 0; bn_optimizer_names[kind]; kind++) {
        const char *names[BN_OPTIMIZER_MAX_STATE];
        int n = bn_optimizer_state_names((bn_optimizer_kind)kind, names);
        for (int k = 0; k < n; k++) {
            size_t len = strlen(names[k]);
            if (e->name_len > len + 1 && memcmp(e->name, names[k], len) == 0 && e->name[len] == '.') return 1;
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

static bn_status meta_required(const bn_safetensors *f, const char *key, const char **out)
{
    if (!(*out = bn_safetensors_meta(f, key)))
        return bn_error(BN_ERR_DATA, "%s: __metadata__ lacks \"%s\"", f->path, key);
    return BN_OK;
}

static bn_status bad_number(const bn_safetensors *f, const char *key, const char *text, const char *kind)
{
    char buf[64];
    return bn_error(BN_ERR_DATA, "%s: metadata %s = \"%s\" is not %s", f->path, key,
                    bn_safetensors_printable(text, strlen(text), buf, sizeof buf), kind);
}

/* An integer in [min, max], written in full (no spaces, no trailing characters). */
static bn_status meta_integer(const bn_safetensors *f, const char *key, long long min, long long max,
                              long long *out)
{
    const char *text;
    BN_TRY(meta_required(f, key, &text));
    char *end;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (!(text[0] == '-' || (text[0] >= '0' && text[0] <= '9')) || *end || errno || v < min || v > max)
        return bad_number(f, key, text, "an integer in range");
    *out = v;
    return BN_OK;
}

static bn_status meta_unsigned(const bn_safetensors *f, const char *key, unsigned long long *out)
{
    const char *text;
    BN_TRY(meta_required(f, key, &text));
    char *end;
    errno = 0;
    unsigned long long v = strtoull(text, &end, 10);
    if (!(text[0] >= '0' && text[0] <= '9') || *end || errno)
        return bad_number(f, key, text, "an unsigned 64-bit integer");
    *out = v;
    return BN_OK;
}

static bn_status meta_double(const bn_safetensors *f, const char *key, double *out)
{
    const char *text;
    BN_TRY(meta_required(f, key, &text));
    char *end;
    double v = strtod(text, &end);
    /* strtod would skip leading white space; a number written by save has none. */
    if (!text[0] || text[0] == ' ' || (unsigned char)text[0] < 0x20 || *end)
        return bad_number(f, key, text, "a number");
    *out = v;
    return BN_OK;
}

/* 1 and *out set when s is exactly 16 hex digits, as save writes a model hash. */
static int parse_hash(const char *s, uint64_t *out)
{
    if (strlen(s) != 16) return 0;
    uint64_t h = 0;
    for (int i = 0; i < 16; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9' ? c - '0'
              : c >= 'a' && c <= 'f' ? c - 'a' + 10
              : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return 0;
        h = h << 4 | (uint64_t)d;
    }
    *out = h;
    return 1;
}

static bn_status check_hash(const bn_safetensors *f, const bn_net *net, const char *text)
{
    char buf[64];
    uint64_t h;
    if (!parse_hash(text, &h))
        return bn_error(BN_ERR_DATA, "%s: model_hash \"%s\" is not 16 hex digits", f->path,
                        bn_safetensors_printable(text, strlen(text), buf, sizeof buf));
    if (h != net->model_hash)
        return bn_error(BN_ERR_DATA,
                        "%s was saved from a different model file (hash %016llx, this model %016llx)",
                        f->path, (unsigned long long)h, (unsigned long long)net->model_hash);
    return BN_OK;
}

/* Training progress as the metadata records it. */
typedef struct ckpt_state {
    bn_train_state st;
    long iter;
    int has_state;                /* "has_momentum": the file holds the optimizer's state */
    bn_optimizer_kind optimizer;  /* whose state: "optimizer", SGD's when absent */
} ckpt_state;

/* The full blobnet metadata that bn_checkpoint_load needs: format, version, hash, state. */
static bn_status read_blobnet_meta(const bn_safetensors *f, const bn_net *net, ckpt_state *cs)
{
    if (!f->meta)
        return bn_error(BN_ERR_DATA, "%s: no __metadata__; not a blobnet checkpoint (only weights can be "
                        "loaded from plain safetensors)", f->path);
    const char *text;
    char buf[64];
    BN_TRY(meta_required(f, "format", &text));
    if (strcmp(text, FORMAT_NAME) != 0)
        return bn_error(BN_ERR_DATA, "%s: format is \"%s\", not \"" FORMAT_NAME "\"", f->path,
                        bn_safetensors_printable(text, strlen(text), buf, sizeof buf));
    BN_TRY(meta_required(f, "version", &text));
    if (strcmp(text, FORMAT_VERSION) != 0)
        return bn_error(BN_ERR_DATA, "%s: checkpoint version \"%s\" is not supported (this blobnet reads "
                        FORMAT_VERSION ")", f->path,
                        bn_safetensors_printable(text, strlen(text), buf, sizeof buf));
    BN_TRY(meta_required(f, "model_hash", &text));
    BN_TRY(check_hash(f, net, text));
    long long v;
    BN_TRY(meta_unsigned(f, "seed", &cs->st.seed));
    BN_TRY(meta_integer(f, "epoch", INT_MIN, INT_MAX, &v));
    cs->st.epoch = (int)v;
    BN_TRY(meta_integer(f, "batch_in_epoch", INT_MIN, INT_MAX, &v));
    cs->st.batch_in_epoch = (int)v;
    BN_TRY(meta_integer(f, "step", LONG_MIN, LONG_MAX, &v));
    cs->st.step = (long)v;
    BN_TRY(meta_integer(f, "iter", LONG_MIN, LONG_MAX, &v));
    cs->iter = (long)v;
    BN_TRY(meta_double(f, "epoch_loss_sum", &cs->st.epoch_loss_sum));
    BN_TRY(meta_double(f, "epoch_correct", &cs->st.epoch_correct));
    BN_TRY(meta_integer(f, "epoch_seen", LONG_MIN, LONG_MAX, &v));
    cs->st.epoch_seen = (long)v;
    BN_TRY(meta_required(f, "has_momentum", &text));
    if (strcmp(text, "0") != 0 && strcmp(text, "1") != 0)
        return bn_error(BN_ERR_DATA, "%s: has_momentum is \"%s\", not \"0\" or \"1\"", f->path,
                        bn_safetensors_printable(text, strlen(text), buf, sizeof buf));
    cs->has_state = text[0] == '1';
    cs->optimizer = BN_OPT_SGD;
    if (!(text = bn_safetensors_meta(f, "optimizer"))) return BN_OK;
    int k = 0;
    while (bn_optimizer_names[k] && strcmp(bn_optimizer_names[k], text) != 0) k++;
    if (!bn_optimizer_names[k])
        return bn_error(BN_ERR_DATA, "%s: optimizer \"%s\" is not one that blobnet knows", f->path,
                        bn_safetensors_printable(text, strlen(text), buf, sizeof buf));
    cs->optimizer = (bn_optimizer_kind)k;
    return BN_OK;
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
static bn_status load_open(const bn_safetensors *f, bn_net *net, bn_optimizer *opt, const ckpt_state *cs)
{
    const char *names[BN_OPTIMIZER_MAX_STATE];
    int ns = cs ? bn_optimizer_state_names(cs->optimizer, names) : 0;
    tensor_spec *specs, *bspecs = NULL;
    size_t n, nb = 0;
    BN_TRY(list_params(net, names, ns, &specs, &n));
    bn_status s = list_buffers(net, &bspecs, &nb);
    int want_state = opt != NULL;
    size_t slab = net->num_params ? net->num_params : 1, staged = want_state ? (size_t)(1 + ns) : 1;
    size_t nbuf = net->num_buffer_floats;
    bn_safetensors_entry *found = calloc((size_t)(1 + ns) * n + nb + 1, sizeof *found);
    float *buf = malloc((staged * slab + nbuf) * sizeof *buf); /* the weights, each state slab, the buffers */
    if (s == BN_OK && (!found || !buf)) s = bn_error(BN_ERR_NOMEM, "out of host memory loading %s", f->path);
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
    }
    free(found);
    free(buf);
    free(specs);
    free(bspecs);
    return s;
}

bn_status bn_checkpoint_load(const char *path, bn_net *net, bn_optimizer *opt, bn_train_state *st)
{
    if (opt) BN_TRY(check_optimizer(net, opt));
    bn_safetensors f;
    ckpt_state cs = {0};
    bn_status s = bn_safetensors_open(path, &f);
    if (s == BN_OK) s = read_blobnet_meta(&f, net, &cs);
    if (s == BN_OK && opt && !cs.has_state)
        s = bn_error(BN_ERR_DATA, "%s holds no optimizer state (has_momentum is 0), so training cannot "
                     "resume from it; load only its weights instead", path);
    if (s == BN_OK && opt && cs.optimizer != opt->cfg.optimizer)
        s = bn_error(BN_ERR_DATA, "%s holds the state of optimizer %s, but this run's optimizer is %s; resume "
                     "with the optimizer it was saved with", path, bn_optimizer_names[cs.optimizer],
                     bn_optimizer_names[opt->cfg.optimizer]);
    if (s == BN_OK) s = load_open(&f, net, opt, &cs);
    if (s == BN_OK && st) *st = cs.st;
    bn_safetensors_close(&f);
    return s;
}

bn_status bn_checkpoint_load_weights(const char *path, bn_net *net)
{
    bn_safetensors f;
    bn_status s = bn_safetensors_open(path, &f);
    const char *hash = s == BN_OK ? bn_safetensors_meta(&f, "model_hash") : NULL;
    if (hash) s = check_hash(&f, net, hash);
    if (s == BN_OK) s = load_open(&f, net, NULL, NULL);
    bn_safetensors_close(&f);
    return s;
}
