#include "checkpoint_meta.h"

#include <errno.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/optimizers/optimizers.h"

#define FORMAT_NAME "blobnet"
#define FORMAT_VERSION "2"
#define FORMAT_TEXT_HASH "1"   /* the version whose files carry a hash of the model file's text */
#define MAX_EPOCHS (1LL << 20) /* the most epochs a run can have ([train] epochs) */
#define MAX_EXAMPLES ((long long)INT_MAX) /* the most examples a training set can have */

/* ---- write ------------------------------------------------------------------------ */

static const char *number(bn_checkpoint_fields *m, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* A number in the next free slot of m->numbers. */
static const char *number(bn_checkpoint_fields *m, const char *fmt, ...)
{
    char *slot = m->numbers[m->count];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(slot, sizeof m->numbers[0], fmt, ap);
    va_end(ap);
    return slot;
}

static void field(bn_checkpoint_fields *m, const char *key, const char *value)
{
    m->list[m->count++] = (bn_safetensors_field){key, value};
}

/* The optimizer table's first, SGD, is not named: a file that names no optimizer holds SGD's
 * state, as files did before there was a choice. */
void bn_checkpoint_fields_build(bn_checkpoint_fields *m, const bn_net *net, const bn_optimizer *opt,
                                const bn_train_state *st)
{
    bn_train_state zero = {0};
    if (!st) st = &zero;
    m->count = 0;
    bn_settings_format(opt ? &opt->cfg : &net->train, &net->augment, m->settings);
    field(m, "format", FORMAT_NAME);
    field(m, "version", FORMAT_VERSION);
    field(m, "model", net->description);
    field(m, "model_file", net->source);
    field(m, "settings", m->settings);
    field(m, "seed", number(m, "%llu", st->seed));
    field(m, "epoch", number(m, "%d", st->epoch));
    field(m, "batch_in_epoch", number(m, "%d", st->batch_in_epoch));
    field(m, "step", number(m, "%ld", st->step));
    field(m, "iter", number(m, "%ld", opt ? opt->iter : 0L));
    /* 17 significant digits print every double so that strtod gives back the same bits. */
    field(m, "epoch_loss_sum", number(m, "%.17g", st->epoch_loss_sum));
    field(m, "epoch_correct", number(m, "%.17g", st->epoch_correct));
    field(m, "epoch_seen", number(m, "%ld", st->epoch_seen));
    field(m, "examples", number(m, "%d", st->examples));
    field(m, "has_momentum", opt ? "1" : "0");
    if (opt && opt->cfg.optimizer != 0) field(m, "optimizer", bn_optimizer_names[opt->cfg.optimizer]);
    m->input_norm = NULL;
    if (net->input_norm_auto) {
        /* "m0,m1,...;s0,s1,..." at 9 significant digits, which give every float back. */
        const int c = net->input_shape.c;
        size_t cap = (size_t)c * 2 * 18 + 2, used = 0;
        if ((m->input_norm = malloc(cap))) {
            for (int k = 0; k < 2 * c; k++) {
                float v = k < c ? net->input_mean[k] : net->input_std[k - c];
                used += (size_t)snprintf(m->input_norm + used, cap - used, "%s%.9g", k == 0 ? "" : k == c ? ";" : ",",
                                         (double)v);
            }
            field(m, "input_norm", m->input_norm);
        }
    }
}

void bn_checkpoint_fields_free(bn_checkpoint_fields *m)
{
    free(m->input_norm);
    m->input_norm = NULL;
}

bn_status bn_checkpoint_meta_input_norm(const bn_safetensors *f, const bn_net *net, double *mean, double *std)
{
    if (!net->input_norm_auto) return BN_OK;
    const char *text = bn_safetensors_meta(f, "input_norm");
    if (!text)
        return bn_error(BN_ERR_DATA, "%s keeps no input_norm: %s's [input] says auto, but the file does not say what "
                        "it stood for", f->path, net->source);
    const int c = net->input_shape.c;
    const char *p = text;
    for (int k = 0; k < 2 * c; k++) {
        char *end;
        double v = strtod(p, &end);
        char want = k == 2 * c - 1 ? '\0' : k == c - 1 ? ';' : ',';
        if (end == p || *end != want || !isfinite(v) || (k >= c && v <= 0))
            return bn_error(BN_ERR_DATA, "%s: input_norm is not %d means and %d stds (\"m,...;s,...\")", f->path, c, c);
        if (k < c) mean[k] = v;
        else std[k - c] = v;
        p = end + 1;
    }
    return BN_OK;
}

/* ---- read: single fields ------------------------------------------------------------ */

static const char *shown(const char *text, char *buf, size_t cap)
{
    return bn_safetensors_printable(text, strlen(text), buf, cap);
}

static bn_status meta_required(const bn_safetensors *f, const char *key, const char **out)
{
    if (!(*out = bn_safetensors_meta(f, key)))
        return bn_error(BN_ERR_DATA, "%s: __metadata__ lacks \"%s\"", f->path, key);
    return BN_OK;
}

static bn_status bad_field(const bn_safetensors *f, const char *key, const char *text, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;

/* "FILE: metadata KEY = "TEXT" <why>". */
static bn_status bad_field(const bn_safetensors *f, const char *key, const char *text, const char *fmt, ...)
{
    char why[256], buf[64];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    return bn_error(BN_ERR_DATA, "%s: metadata %s = \"%s\" %s", f->path, key, shown(text, buf, sizeof buf), why);
}

/* An integer in [lo, hi], written in full (no spaces, nothing after it); `why` says where the
 * bounds come from. */
static bn_status meta_integer(const bn_safetensors *f, const char *key, long long lo, long long hi, const char *why,
                              long long *out)
{
    const char *text;
    BN_TRY(meta_required(f, key, &text));
    char *end;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (!(text[0] == '-' || (text[0] >= '0' && text[0] <= '9')) || *end || (errno && errno != ERANGE))
        return bad_field(f, key, text, "is not an integer");
    if (errno == ERANGE || v < lo || v > hi) return bad_field(f, key, text, "is outside %lld..%lld (%s)", lo, hi, why);
    *out = v;
    return BN_OK;
}

/* A number in [lo, hi], as meta_integer. */
static bn_status meta_number(const bn_safetensors *f, const char *key, double lo, double hi, const char *why,
                             double *out)
{
    const char *text;
    BN_TRY(meta_required(f, key, &text));
    char *end;
    double v = strtod(text, &end);
    /* strtod would skip leading white space; a number written by save has none. */
    if (!text[0] || (unsigned char)text[0] <= ' ' || *end) return bad_field(f, key, text, "is not a number");
    if (!(v >= lo && v <= hi)) return bad_field(f, key, text, "is outside %.9g..%.9g (%s)", lo, hi, why);
    *out = v;
    return BN_OK;
}

/* ---- read: the model ------------------------------------------------------------------ */

/* The length of the line at s, without its newline. */
static size_t line_len(const char *s)
{
    return strcspn(s, "\n");
}

/* Names the first line where the saved description and the model's differ. */
static bn_status check_description(const bn_safetensors *f, const bn_net *net, const char *saved)
{
    const char *a = saved, *b = net->description;
    if (strcmp(a, b) == 0) return BN_OK;
    while (*a && *b && line_len(a) == line_len(b) && memcmp(a, b, line_len(a)) == 0) {
        a += line_len(a) + (a[line_len(a)] == '\n');
        b += line_len(b) + (b[line_len(b)] == '\n');
    }
    char was[160], now[160];
    bn_safetensors_printable(a, line_len(a), was, sizeof was);
    bn_safetensors_printable(b, line_len(b), now, sizeof now);
    return bn_error(BN_ERR_DATA, "%s was saved from a different model than %s: the checkpoint has `%s` where the model "
                    "has `%s` (checkpoints follow the layers, their inputs and keys; [train], [augment] and comments "
                    "may change)", f->path, net->source, *a ? was : "(no more layers)",
                    *b ? now : "(no more layers)");
}

/* 1 and *out set when s is exactly 16 hex digits, as format 1 writes a model hash. */
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

/* A format 1 file recorded only a hash of the model file's text: when the text has changed since,
 * the tensors' names and shapes are all that can tell whether the weights fit. */
static bn_status check_text_hash(const bn_safetensors *f, const bn_net *net, const char *text, int *changed)
{
    uint64_t h;
    if (!parse_hash(text, &h)) return bad_field(f, "model_hash", text, "is not 16 hex digits");
    *changed = h != net->text_hash;
    return BN_OK;
}

bn_status bn_checkpoint_meta_check_model(const bn_safetensors *f, const bn_net *net, int *text_changed)
{
    *text_changed = 0;
    const char *text = bn_safetensors_meta(f, "model");
    if (text) return check_description(f, net, text);
    if ((text = bn_safetensors_meta(f, "model_hash"))) return check_text_hash(f, net, text, text_changed);
    return BN_OK;
}

void bn_checkpoint_note_text_changed(const char *path, const bn_net *net)
{
    fprintf(stderr, "blobnet: note: %s was written by an earlier blobnet, which recorded the text of the model "
            "file rather than its layers; the text has changed since, and the file's tensors match %s by name and "
            "shape, so they are loaded\n", path, net->source);
}

/* ---- read: progress ------------------------------------------------------------------- */

/* The counters and sums, each within what the others and the model allow. */
static bn_status read_progress(const bn_safetensors *f, int recorded_examples, bn_checkpoint_meta *m)
{
    bn_train_state *st = &m->st;
    long long v, examples = MAX_EXAMPLES;
    BN_TRY(meta_integer(f, "seed", 0, INT_MAX, "the seeds a run can have", &v));
    st->seed = (unsigned long long)v;
    BN_TRY(meta_integer(f, "epoch", 0, MAX_EPOCHS, "the epochs a run can have", &v));
    st->epoch = (int)v;
    /* 0: a file saved without a training set, whose place is then bounded by the largest one. */
    if (recorded_examples) BN_TRY(meta_integer(f, "examples", 0, MAX_EXAMPLES, "the sizes a training set can have",
                                               &v));
    st->examples = recorded_examples ? (int)v : 0;
    if (st->examples) examples = st->examples;
    BN_TRY(meta_integer(f, "epoch_seen", 0, examples, "the examples of a training set", &v));
    st->epoch_seen = (long)v;
    long seen = st->epoch_seen;
    BN_TRY(meta_integer(f, "batch_in_epoch", seen > 0, seen,
                        "the epoch's steps: at least one once examples are seen, at most one an example", &v));
    st->batch_in_epoch = (int)v;
    /* An epoch's steps are counted in an int (batch_in_epoch). */
    long long first = st->epoch + (seen > 0);
    BN_TRY(meta_integer(f, "step", first, (st->epoch + 1LL) * INT_MAX,
                        "at least one step for each epoch begun, at most 2147483647 for each up to this one", &v));
    st->step = (long)v;
    const char *text;
    BN_TRY(meta_required(f, "has_momentum", &text));
    if (strcmp(text, "0") != 0 && strcmp(text, "1") != 0) return bad_field(f, "has_momentum", text, "is not 0 or 1");
    m->has_state = text[0] == '1';
    /* The optimizer takes one step a training step; a file of weights alone has no steps of its own. */
    BN_TRY(meta_integer(f, "iter", m->has_state ? st->step : 0, st->step,
                        m->has_state ? "the optimizer's steps are the run's" : "no more than the run's steps", &v));
    m->iter = (long)v;
    BN_TRY(meta_number(f, "epoch_correct", 0, (double)seen, "the examples of the epoch seen", &st->epoch_correct));
    if (st->epoch_correct != floor(st->epoch_correct))
        return bad_field(f, "epoch_correct", bn_safetensors_meta(f, "epoch_correct"), "is not a count of examples");
    /* The running sum lives in a float on the way, and a loss is never negative. */
    return meta_number(f, "epoch_loss_sum", 0, seen ? FLT_MAX : 0, "a sum of the epoch's losses, held in a float",
                       &st->epoch_loss_sum);
}

static bn_status read_optimizer(const bn_safetensors *f, bn_checkpoint_meta *m)
{
    m->optimizer = 0;
    const char *text = bn_safetensors_meta(f, "optimizer");
    if (!text) return BN_OK;
    m->optimizer = bn_optimizer_find(text);
    if (m->optimizer < 0) return bad_field(f, "optimizer", text, "is not an optimizer that blobnet knows");
    return BN_OK;
}

bn_status bn_checkpoint_meta_read(const bn_safetensors *f, const bn_net *net, bn_checkpoint_meta *m)
{
    memset(m, 0, sizeof *m);
    if (!f->meta)
        return bn_error(BN_ERR_DATA, "%s: no __metadata__; not a blobnet checkpoint (only weights can be "
                        "loaded from plain safetensors)", f->path);
    const char *text;
    char buf[64];
    BN_TRY(meta_required(f, "format", &text));
    if (strcmp(text, FORMAT_NAME) != 0)
        return bn_error(BN_ERR_DATA, "%s: format is \"%s\", not \"" FORMAT_NAME "\"", f->path, shown(text, buf, sizeof buf));
    BN_TRY(meta_required(f, "version", &text));
    int text_hash = strcmp(text, FORMAT_TEXT_HASH) == 0;
    if (!text_hash && strcmp(text, FORMAT_VERSION) != 0)
        return bn_error(BN_ERR_DATA, "%s: checkpoint version \"%s\" is not supported (this blobnet reads "
                        FORMAT_TEXT_HASH " and " FORMAT_VERSION ")", f->path, shown(text, buf, sizeof buf));
    if (text_hash) {
        BN_TRY(meta_required(f, "model_hash", &text));
        BN_TRY(check_text_hash(f, net, text, &m->text_changed));
    } else {
        BN_TRY(meta_required(f, "model", &text));
        BN_TRY(check_description(f, net, text));
        BN_TRY(meta_required(f, "settings", &m->settings));
        if (!bn_settings_valid(m->settings))
            return bad_field(f, "settings", m->settings, "is not a list of key=value settings");
    }
    BN_TRY(read_progress(f, !text_hash, m));
    return read_optimizer(f, m);
}

/* ---- resume ------------------------------------------------------------------------- */

static void add_change(bn_resume *r, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* Appends one change to r->changes, after a comma when it holds some already. */
static void add_change(bn_resume *r, const char *fmt, ...)
{
    size_t len = strlen(r->changes);
    if (len && len + 2 < sizeof r->changes) len += (size_t)snprintf(r->changes + len, sizeof r->changes - len, ", ");
    va_list ap;
    va_start(ap, fmt);
    if (len < sizeof r->changes) vsnprintf(r->changes + len, sizeof r->changes - len, fmt, ap);
    va_end(ap);
}

bn_status bn_checkpoint_meta_resume(const bn_safetensors *f, const bn_net *net, const bn_train_config *cfg,
                                    bn_checkpoint_meta *m, bn_resume *r)
{
    bn_train_state *st = &m->st;
    if (st->epoch_seen > r->examples)
        return bn_error(BN_ERR_USAGE, "%s was saved %ld examples into epoch %d, past the end of this run's training "
                        "set of %d examples", f->path, st->epoch_seen, st->epoch + 1, r->examples);
    /* The order of an epoch's examples is drawn from the seed for the training set's size: mid-epoch,
     * another of either would skip some examples and repeat others. */
    const char *instead = "so that some examples would be skipped and others seen twice; resume with";
    if (st->epoch_seen > 0 && st->examples && st->examples != r->examples)
        return bn_error(BN_ERR_USAGE, "%s was saved %ld examples into epoch %d of a training set of %d examples, and "
                        "this run's has %d: the rest of the epoch would come in another order, %s the same training "
                        "set (--train-limit %d) or from a checkpoint saved at the end of an epoch", f->path,
                        st->epoch_seen, st->epoch + 1, st->examples, r->examples, instead, st->examples);
    if (st->epoch_seen > 0 && st->seed != cfg->seed)
        return bn_error(BN_ERR_USAGE, "%s was saved %ld examples into epoch %d of a run with seed %llu, and this run's "
                        "seed is %llu: the rest of the epoch would come in another order, %s --seed %llu or from a "
                        "checkpoint saved at the end of an epoch", f->path, st->epoch_seen, st->epoch + 1, st->seed,
                        cfg->seed, instead, st->seed);
    r->changes[0] = '\0';
    if (m->settings) {
        char now[BN_SETTINGS_MAX];
        bn_settings_format(cfg, &net->augment, now);
        bn_settings_changes(m->settings, now, r->changes, sizeof r->changes);
    }
    if (st->seed != cfg->seed) add_change(r, "seed %llu -> %llu", st->seed, cfg->seed);
    if (st->examples && st->examples != r->examples)
        add_change(r, "training examples %d -> %d", st->examples, r->examples);
    st->seed = cfg->seed;
    return BN_OK;
}
