/* data_source.c - the data a command reads: flags over [data] over the table's defaults. */
#include "data_source.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/evaluate.h"

/* The keys of [data] that are not the format's own. */
static int is_source_key(const char *key)
{
    return strcmp(key, "format") == 0 || strcmp(key, "path") == 0 || strcmp(key, "holdout") == 0;
}

bn_status bn_data_flags_add_option(bn_data_flags *flags, const char *text)
{
    if (flags->num_options == BN_CLI_MAX_DATA_OPTIONS)
        return bn_error(BN_ERR_USAGE, "--data-option: more than %d given", BN_CLI_MAX_DATA_OPTIONS);
    const char *eq = strchr(text, '=');
    if (!eq || eq == text)
        return bn_error(BN_ERR_USAGE, "--data-option: '%s' is not KEY=VALUE", text);
    flags->options[flags->num_options++] = text;
    return BN_OK;
}

/* The [data] key's value, or NULL; *line receives its line. */
static const char *data_key(const bn_options *data, const char *key, int *line)
{
    for (int i = 0; i < data->count; i++)
        if (strcmp(data->items[i].key, key) == 0) {
            *line = data->items[i].line;
            return data->items[i].value;
        }
    return NULL;
}

static bn_status resolve(const bn_data_flags *flags, const bn_net *net, bn_data_source *src)
{
    const bn_options *file = net ? &net->data : NULL;
    int line = 0;
    const char *file_format = file ? data_key(file, "format", &line) : NULL;
    const char *name = flags->dataset ? flags->dataset : file_format ? file_format : "mnist";
    char where[300];
    if (flags->dataset) snprintf(where, sizeof where, "--dataset");
    else snprintf(where, sizeof where, "%s:%d: [data] format", net ? net->source : "?", line);
    BN_TRY(bn_data_format_find(name, where, &src->format));
    /* A --dataset that names another format leaves [data]'s path and keys behind: they are the
     * other format's. */
    int file_applies = file && file->count && (!flags->dataset || !file_format || strcmp(file_format, name) == 0);
    const char *env = getenv("BLOBNET_DATA");
    const char *file_path = file_applies ? data_key(file, "path", &line) : NULL;
    if (flags->path) src->path = flags->path;
    else if (file_path) src->path = file_path;
    else if (strcmp(src->format->name, "mnist") == 0 && env && *env) src->path = env;
    else src->path = src->format->default_path;
    if (!src->path)
        return bn_error(BN_ERR_USAGE, "the %s format reads %s: name it with --data PATH or [data] path", name,
                        src->format->reads);
    src->opts.file = file_applies ? net->source : "--data-option";
    src->opts.line = file_applies ? file->line : 0;
    if (!(src->opts.section = strdup("data"))) return bn_error(BN_ERR_NOMEM, "out of memory");
    long holdout = 0;
    for (int i = 0; file_applies && i < file->count; i++) {
        const bn_option *it = &file->items[i];
        if (strcmp(it->key, "holdout") == 0) {
            char *end;
            holdout = strtol(it->value, &end, 10);
            if (end == it->value || *end || holdout < 0 || holdout > 2147483647L)
                return bn_error(BN_ERR_USAGE, "%s:%d: [data] holdout = '%s' is not a count of examples", net->source,
                                it->line, it->value);
        }
        if (!is_source_key(it->key)) {
            int overridden = 0;
            for (int k = 0; k < flags->num_options; k++)
                overridden |= strncmp(flags->options[k], it->key, strlen(it->key)) == 0 &&
                              flags->options[k][strlen(it->key)] == '=';
            if (!overridden) BN_TRY(bn_options_add(&src->opts, it->key, it->value, it->line));
        }
    }
    for (int k = 0; k < flags->num_options; k++) {
        const char *eq = strchr(flags->options[k], '=');
        char key[128];
        snprintf(key, sizeof key, "%.*s", (int)(eq - flags->options[k]), flags->options[k]);
        if (is_source_key(key))
            return bn_error(BN_ERR_USAGE, "--data-option %s: say it with --%s", flags->options[k],
                            strcmp(key, "format") == 0 ? "dataset" : strcmp(key, "path") == 0 ? "data" : key);
        BN_TRY(bn_options_add(&src->opts, key, eq + 1, 0));
    }
    if (flags->holdout >= 0) holdout = flags->holdout;
    src->holdout = (int)holdout;
    return BN_OK;
}

bn_status bn_data_source_resolve(const bn_data_flags *flags, const bn_net *net, bn_data_source *src)
{
    memset(src, 0, sizeof *src);
    bn_status s = resolve(flags, net, src);
    if (s != BN_OK) bn_data_source_free(src);
    return s;
}

bn_status bn_data_source_load(bn_data_source *src, bn_shape fit, int train, int limit, int quiet, bn_dataset *out)
{
    for (int i = 0; i < src->opts.count; i++) src->opts.items[i].used = 0;
    bn_data_request rq = {.format = src->format->name, .path = src->path, .opts = &src->opts, .fit = fit,
                          .train = train, .limit = limit, .quiet = quiet};
    BN_TRY(bn_data_load(src->format, &rq, out));
    bn_status s = bn_options_check_unused(&src->opts);
    if (s != BN_OK) {
        char why[1024];
        snprintf(why, sizeof why, "%s", bn_last_error());
        bn_dataset_free(out);
        char keys[256] = "";
        snprintf(keys, sizeof keys, "%s", src->format->keys ? src->format->keys : "none");
        return bn_error(s, "%s (the %s format's keys: %s)", why, src->format->name, keys);
    }
    return BN_OK;
}

/* The input shape the data must have; a usage error naming both otherwise. */
static bn_status check_shape(const bn_net *net, const bn_dataset *d, const bn_data_source *src, const char *split)
{
    bn_shape s = net->input_shape;
    if (s.c != d->channels || s.h != d->height || s.w != d->width)
        return bn_error(BN_ERR_USAGE, "%s expects %dx%dx%d inputs but the %s set of %s (%s) holds %dx%dx%d images",
                        net->source, s.c, s.h, s.w, split, src->path, src->format->name, d->channels, d->height,
                        d->width);
    return BN_OK;
}

static bn_status load_all(bn_data_source *src, const bn_net *net, int limit, int test_limit, int quiet,
                          bn_dataset *train, bn_dataset *test, bn_dataset *holdout)
{
    BN_TRY(bn_data_source_load(src, net->input_shape, 1, limit, quiet, train));
    BN_TRY(check_shape(net, train, src, "training"));
    BN_TRY(bn_data_source_load(src, net->input_shape, 0, test_limit, quiet, test));
    BN_TRY(check_shape(net, test, src, "test"));
    /* A split may lack the top classes (a subset): both take the larger count. */
    int classes = train->num_classes > test->num_classes ? train->num_classes : test->num_classes;
    train->num_classes = test->num_classes = classes;
    if (src->holdout > 0) BN_TRY(bn_dataset_split_tail(train, src->holdout, holdout));
    return BN_OK;
}

bn_status bn_data_source_load_all(bn_data_source *src, const bn_net *net, int limit, int test_limit, int quiet,
                                  bn_dataset *train, bn_dataset *test, bn_dataset *holdout)
{
    memset(holdout, 0, sizeof *holdout);
    bn_status s = load_all(src, net, limit, test_limit, quiet, train, test, holdout);
    if (s != BN_OK) {
        bn_dataset_free(train);
        bn_dataset_free(test);
        bn_dataset_free(holdout);
    }
    return s;
}

bn_status bn_data_check_model(const bn_net *net, const bn_dataset *d, const bn_data_source *src, const char *split)
{
    BN_TRY(check_shape(net, d, src, split));
    int outputs = bn_output_size((bn_net *)net);
    if (outputs < d->num_classes)
        return bn_error(BN_ERR_USAGE, "%s ends in %d outputs but the %s set of %s (%s) has %d classes; make the last "
                        "layer's units %d", net->source, outputs, split, src->path, src->format->name, d->num_classes,
                        d->num_classes);
    return BN_OK;
}

void bn_data_source_free(bn_data_source *src)
{
    bn_options_clear(&src->opts);
    memset(src, 0, sizeof *src);
}
