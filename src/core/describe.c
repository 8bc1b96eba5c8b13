#include "describe.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "net.h"

void bn_describe_number(double v, char *buf, size_t cap)
{
    /* Whole numbers as they are written ("20", not "2e+01"), up to where doubles stop being exact. */
    if (v == floor(v) && fabs(v) < 1e15) {
        snprintf(buf, cap, "%.0f", v);
        return;
    }
    for (int digits = 1; digits <= 17; digits++) {
        snprintf(buf, cap, "%.*g", digits, v);
        if (strtod(buf, NULL) == v) return;
    }
}

/* The same for a float: the shortest spelling that reads back as the same float. */
static void describe_float(float v, char *buf, size_t cap)
{
    for (int digits = 1; digits <= 9; digits++) {
        snprintf(buf, cap, "%.*g", digits, (double)v);
        if (strtof(buf, NULL) == v) return;
    }
}

int bn_describe_value(const char *text, char *buf, size_t cap)
{
    char *end;
    double v = strtod(text, &end);
    /* strtod skips leading spaces and reads "inf" and "nan": neither is a number a key holds. */
    if (end == text || *end || text[0] == ' ' || !isfinite(v)) return 0;
    bn_describe_number(v, buf, cap);
    return 1;
}

/* A growing string; `failed` latches an allocation failure. */
typedef struct desc_buf {
    char *s;
    size_t len, cap;
    int failed;
} desc_buf;

static void append(desc_buf *b, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

static void append(desc_buf *b, const char *fmt, ...)
{
    if (b->failed) return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || b->len + (size_t)n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (n >= 0 && cap < b->len + (size_t)n + 1) cap *= 2;
        char *s = n < 0 ? NULL : realloc(b->s, cap);
        if (!s) {
            b->failed = 1;
            return;
        }
        b->s = s;
        b->cap = cap;
    }
    va_start(ap, fmt);
    vsnprintf(b->s + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

static int by_key(const void *a, const void *b)
{
    return strcmp((*(const bn_option *const *)a)->key, (*(const bn_option *const *)b)->key);
}

/* ": key=value ..." for the section's keys but name and input, sorted by key. */
static bn_status append_keys(desc_buf *b, const bn_options *o)
{
    const bn_option **keys = malloc((size_t)(o->count ? o->count : 1) * sizeof *keys);
    if (!keys) return bn_error(BN_ERR_NOMEM, "out of host memory describing %s", o->file);
    int n = 0;
    for (int i = 0; i < o->count; i++)
        if (strcmp(o->items[i].key, "name") != 0 && strcmp(o->items[i].key, "input") != 0) keys[n++] = &o->items[i];
    qsort(keys, (size_t)n, sizeof *keys, by_key);
    for (int i = 0; i < n; i++) {
        char number[32];
        const char *value = bn_describe_value(keys[i]->value, number, sizeof number) ? number : keys[i]->value;
        append(b, "%s%s=%s", i ? " " : ": ", keys[i]->key, value);
    }
    free(keys);
    return BN_OK;
}

/* [input]'s mean or std as the description has it: "auto" (the values come from the data, and a
 * checkpoint keeps them apart), one value when every channel has it (as a file of one value has
 * always been described), else one per channel. Kept as floats: their spelling is the float's,
 * not the file's. */
static void describe_norm(desc_buf *b, const float *v, int channels, int is_auto)
{
    if (is_auto) {
        append(b, "auto");
        return;
    }
    int same = 1;
    for (int c = 1; c < channels; c++) same &= v[c] == v[0];
    for (int c = 0; c < (same ? 1 : channels); c++) {
        char text[32];
        describe_float(v[c], text, sizeof text);
        append(b, "%s%s", c ? "," : "", text);
    }
}

bn_status bn_describe_model(const bn_net *net, bn_options *const *sections, char **out)
{
    *out = NULL;
    desc_buf b = {0};
    append(&b, "input %dx%dx%d mean=", net->input_shape.c, net->input_shape.h, net->input_shape.w);
    describe_norm(&b, net->input_mean, net->input_shape.c, net->input_norm_auto & BN_NORM_AUTO_MEAN);
    append(&b, " std=");
    describe_norm(&b, net->input_std, net->input_shape.c, net->input_norm_auto & BN_NORM_AUTO_STD);
    append(&b, "\n");
    bn_status s = BN_OK;
    for (int i = 0; i < net->num_layers && s == BN_OK; i++) {
        const bn_layer *l = net->layers[i];
        append(&b, "%s %s <- ", l->name, l->ops->type);
        for (int j = 0; j < l->num_inputs; j++) {
            int src = l->sources[j];
            append(&b, "%s%s", j ? "," : "", src < 0 ? "input" : net->layers[src]->name);
        }
        s = append_keys(&b, sections[i]);
        append(&b, "\n");
    }
    if (s == BN_OK && b.failed) s = bn_error(BN_ERR_NOMEM, "out of host memory describing %s", net->source);
    if (s != BN_OK) {
        free(b.s);
        return s;
    }
    *out = b.s;
    return BN_OK;
}
