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
#define MOMENTUM_PREFIX "momentum."
#define PREFIX_LEN (sizeof MOMENTUM_PREFIX - 1)

/* ---- the net's tensors ------------------------------------------------------------ */

/* One parameter as the checkpoint names and shapes it, and where it lives in the slab. */
typedef struct tensor_spec {
    char name[128];      /* "<layer>.<param>" */
    char momentum_name[PREFIX_LEN + 128]; /* "momentum.<layer>.<param>" */
    int rank;
    uint64_t dims[4];
    size_t offset;       /* elements into net->params (and into the momentum slab) */
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

/* Every parameter of the net in slab order; *out is the caller's to free. */
static bn_status list_params(bn_net *net, tensor_spec **out, size_t *count)
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
            snprintf(t->momentum_name, sizeof t->momentum_name, MOMENTUM_PREFIX "%s", t->name);
            t->rank = param_shape(p->value, t->dims);
            t->offset = p->value->offset;
            t->count = bn_blob_count(p->value);
        }
    }
    *out = specs;
    *count = total;
    return BN_OK;
}

static bn_status check_optimizer(const bn_net *net, const bn_sgd *opt)
{
    size_t have = opt->momentum ? bn_blob_count(opt->momentum) : 0;
    if (have != net->num_params)
        return bn_error(BN_ERR_INTERNAL, "%s: the optimizer holds %zu momentum values for %zu parameters",
                        net->source, have, net->num_params);
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

/* The metadata fields are the ones read_blobnet_meta reads back. */
static bn_status write_file(const char *path, const bn_net *net, const bn_sgd *opt, const bn_train_state *st,
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
    const bn_safetensors_field meta[] = {
        {"format", FORMAT_NAME}, {"version", FORMAT_VERSION}, {"model_hash", hash},
        {"model_file", net->source}, {"seed", seed}, {"epoch", epoch}, {"batch_in_epoch", batch},
        {"step", step}, {"iter", iter}, {"epoch_loss_sum", loss}, {"epoch_correct", correct},
        {"epoch_seen", seen}, {"has_momentum", opt ? "1" : "0"},
    };
    return bn_safetensors_save(path, meta, sizeof meta / sizeof *meta, tensors, count);
}

bn_status bn_checkpoint_save(const char *path, bn_net *net, const bn_sgd *opt, const bn_train_state *st)
{
    tensor_spec *specs;
    size_t n;
    BN_TRY(list_params(net, &specs, &n));
    const float *weights = NULL, *momentum = NULL;
    bn_status s = opt ? check_optimizer(net, opt) : BN_OK;
    if (s == BN_OK && net->num_params) {
        if (!(weights = bn_blob_host_rd(net->params))) s = bn_last_status();
        else if (opt && !(momentum = bn_blob_host_rd(opt->momentum))) s = bn_last_status();
    }
    /* The loader refuses NaN and infinity, so a file holding them could never be resumed:
     * refusing it here keeps the last good checkpoint in place instead. */
    for (size_t i = 0; s == BN_OK && i < n; i++) {
        s = refuse_non_finite(path, specs[i].name, &specs[i], weights);
        if (s == BN_OK && momentum) s = refuse_non_finite(path, specs[i].momentum_name, &specs[i], momentum);
    }
    bn_safetensors_tensor *tensors = NULL;
    if (s == BN_OK && !(tensors = calloc(2 * (n ? n : 1), sizeof *tensors)))
        s = bn_error(BN_ERR_NOMEM, "out of host memory saving checkpoint %s", path);
    if (s == BN_OK) {
        size_t k = 0;
        for (size_t i = 0; i < n; i++)
            tensors[k++] = (bn_safetensors_tensor){specs[i].name, specs[i].rank, specs[i].dims,
                                                   weights + specs[i].offset};
        for (size_t i = 0; opt && i < n; i++)
            tensors[k++] = (bn_safetensors_tensor){specs[i].momentum_name, specs[i].rank, specs[i].dims,
                                                   momentum + specs[i].offset};
        s = write_file(path, net, opt, st, tensors, k);
    }
    free(tensors);
    free(specs);
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

/* Which of the file's tensors holds each parameter's weights (and momentum, when wanted).
 * A tensor the net does not have is an error, except momentum entries when they are not
 * wanted by a weights-only load. */
static bn_status match_tensors(const bn_safetensors *f, const tensor_spec *specs, size_t n, int weights_only,
                               int want_momentum, bn_safetensors_entry *weights,
                               bn_safetensors_entry *momentum)
{
    int *seen_w = calloc(n ? n : 1, sizeof *seen_w), *seen_m = calloc(n ? n : 1, sizeof *seen_m);
    bn_status s = BN_OK;
    if (!seen_w || !seen_m) s = bn_error(BN_ERR_NOMEM, "out of host memory reading %s", f->path);
    for (size_t i = 0; i < f->num_tensors && s == BN_OK; i++) {
        bn_safetensors_entry e;
        if ((s = bn_safetensors_check_entry(f, i, &e)) != BN_OK) break;
        /* Weight names first: a layer may itself be called "momentum". */
        size_t j = 0;
        while (j < n && !name_is(&e, specs[j].name)) j++;
        int is_momentum = j == n && e.name_len > PREFIX_LEN &&
                          memcmp(e.name, MOMENTUM_PREFIX, PREFIX_LEN) == 0;
        if (is_momentum && weights_only) continue;
        if (is_momentum) {
            j = 0;
            while (j < n && !name_is(&e, specs[j].momentum_name)) j++;
        }
        if (j == n) {
            char name[160];
            s = bn_error(BN_ERR_DATA, "%s: tensor %s is not in the model", f->path,
                         bn_safetensors_printable(e.name, e.name_len, name, sizeof name));
        } else if (is_momentum) {
            momentum[j] = e;
            seen_m[j] = 1;
        } else {
            weights[j] = e;
            seen_w[j] = 1;
        }
    }
    for (size_t j = 0; j < n && s == BN_OK; j++) {
        if (!seen_w[j])
            s = bn_error(BN_ERR_DATA, "%s: parameter %s of the model is missing from the file", f->path,
                         specs[j].name);
        else if (want_momentum && !seen_m[j])
            s = bn_error(BN_ERR_DATA, "%s: momentum of %s (tensor %s) is missing from the file", f->path,
                         specs[j].name, specs[j].momentum_name);
        else if ((s = check_shape(f, &weights[j], &specs[j])) == BN_OK && want_momentum)
            s = check_shape(f, &momentum[j], &specs[j]);
    }
    free(seen_w);
    free(seen_m);
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
    int has_momentum;
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
    cs->has_momentum = text[0] == '1';
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
static bn_status load_open(const bn_safetensors *f, bn_net *net, bn_sgd *opt, const ckpt_state *cs)
{
    tensor_spec *specs;
    size_t n;
    BN_TRY(list_params(net, &specs, &n));
    int want_momentum = opt != NULL;
    bn_safetensors_entry *found = calloc(2 * (n ? n : 1), sizeof *found);
    size_t slab = net->num_params ? net->num_params : 1;
    float *weights = malloc(slab * sizeof *weights);
    float *momentum = want_momentum ? malloc(slab * sizeof *momentum) : NULL;
    bn_status s = BN_OK;
    if (!found || !weights || (want_momentum && !momentum))
        s = bn_error(BN_ERR_NOMEM, "out of host memory loading %s", f->path);
    if (s == BN_OK) s = match_tensors(f, specs, n, cs == NULL, want_momentum, found, found + n);
    if (s == BN_OK) s = stage_all(f, found, specs, n, weights);
    if (s == BN_OK && want_momentum) s = stage_all(f, found + n, specs, n, momentum);
    float *w = NULL, *m = NULL;
    if (s == BN_OK && net->num_params) {
        if (!(w = bn_blob_host_wr(net->params))) s = bn_last_status();
        else if (want_momentum && !(m = bn_blob_host_wr(opt->momentum))) s = bn_last_status();
    }
    if (s == BN_OK) {
        if (w) memcpy(w, weights, net->num_params * sizeof *w);
        if (m) memcpy(m, momentum, net->num_params * sizeof *m);
        if (opt) opt->iter = cs->iter;
    }
    free(found);
    free(weights);
    free(momentum);
    free(specs);
    return s;
}

bn_status bn_checkpoint_load(const char *path, bn_net *net, bn_sgd *opt, bn_train_state *st)
{
    if (opt) BN_TRY(check_optimizer(net, opt));
    bn_safetensors f;
    ckpt_state cs = {0};
    bn_status s = bn_safetensors_open(path, &f);
    if (s == BN_OK) s = read_blobnet_meta(&f, net, &cs);
    if (s == BN_OK && opt && !cs.has_momentum)
        s = bn_error(BN_ERR_DATA, "%s holds no optimizer momentum (has_momentum is 0), so training cannot "
                     "resume from it; load only its weights instead", path);
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
