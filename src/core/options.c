#include "options.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A key appears at most once in a section (bn_options_add refuses a second). */
static bn_option *find(bn_options *o, const char *key)
{
    for (int i = 0; i < o->count; i++)
        if (strcmp(o->items[i].key, key) == 0) {
            o->items[i].used = 1;
            return &o->items[i];
        }
    return NULL;
}

bn_status bn_opt_error(const bn_options *o, const char *key, const char *fmt, ...)
{
    int line = o->line;
    for (int i = 0; key && i < o->count; i++)
        if (strcmp(o->items[i].key, key) == 0) line = o->items[i].line;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return bn_error(BN_ERR_USAGE, "%s:%d: [%s] %s", o->file ? o->file : "<options>", line,
                    o->section ? o->section : "?", msg);
}

static bn_status parse_long(bn_options *o, const bn_option *it, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(it->value, &end, 10);
    if (end == it->value || *end != '\0' || errno == ERANGE)
        return bn_opt_error(o, it->key, "%s = '%s' is not an integer", it->key, it->value);
    if (v < lo || v > hi)
        return bn_opt_error(o, it->key, "%s = %ld is out of range [%ld, %ld]", it->key, v, lo, hi);
    *out = v;
    return BN_OK;
}

bn_status bn_opt_int(bn_options *o, const char *key, int def, int lo, int hi, int *out)
{
    bn_option *it = find(o, key);
    if (!it) {
        *out = def;
        return BN_OK;
    }
    long v = 0;
    BN_TRY(parse_long(o, it, lo, hi, &v));
    *out = (int)v;
    return BN_OK;
}

bn_status bn_opt_int_required(bn_options *o, const char *key, int lo, int hi, int *out)
{
    if (!find(o, key)) return bn_opt_error(o, NULL, "missing required key '%s'", key);
    return bn_opt_int(o, key, 0, lo, hi, out);
}

const char *bn_parse_finite(const char *text, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (end == text || *end) return "is not a finite number";
    /* strtod says ERANGE for a result past the largest double (it gives +-HUGE_VAL) and for one
     * past the smallest (it gives 0, or a subnormal, which holds the number and is kept). */
    if (errno == ERANGE && isinf(v))
        return v > 0 ? "is too large to hold (it overflows to infinity)"
                     : "is too large to hold (it overflows to -infinity)";
    if (errno == ERANGE && v == 0) return "is too small to hold (it underflows to 0)";
    if (!isfinite(v)) return "is not a finite number";
    *out = v;
    return NULL;
}

const char *bn_parse_bytes(const char *text, uint64_t *out)
{
    static const char not_size[] = "is not a size in bytes (a number, K, M or G after it)";
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (end == text || errno == ERANGE || !(v >= 0)) return not_size;
    double unit = 1;
    if (*end == 'K' || *end == 'k') unit = 1e3;
    else if (*end == 'M' || *end == 'm') unit = 1e6;
    else if (*end == 'G' || *end == 'g') unit = 1e9;
    if (unit != 1) end++;
    if (*end) return not_size;
    if (v * unit > 1e18) return "is more than 1e18 bytes";
    *out = (uint64_t)(v * unit);
    return NULL;
}

bn_status bn_opt_float(bn_options *o, const char *key, double def, double lo, double hi, double *out)
{
    bn_option *it = find(o, key);
    if (!it) {
        *out = def;
        return BN_OK;
    }
    double v;
    const char *why = bn_parse_finite(it->value, &v);
    if (why) return bn_opt_error(o, key, "%s = '%s' %s", key, it->value, why);
    if (v < lo || v > hi)
        return bn_opt_error(o, key, "%s = %g is out of range [%g, %g]", key, v, lo, hi);
    *out = v;
    return BN_OK;
}

bn_status bn_opt_str(bn_options *o, const char *key, const char *def, const char **out)
{
    bn_option *it = find(o, key);
    *out = it ? it->value : def;
    return BN_OK;
}

int bn_name_index(const char *const *names, const char *name)
{
    for (int i = 0; names[i]; i++)
        if (strcmp(names[i], name) == 0) return i;
    return -1;
}

void bn_names_join(const char *const *names, char *buf, size_t cap)
{
    buf[0] = '\0';
    for (int i = 0; names[i]; i++) {
        size_t len = strlen(buf);
        snprintf(buf + len, cap - len, "%s%s", i ? ", " : "", names[i]);
    }
}

bn_status bn_opt_choice(bn_options *o, const char *key, const char *const *choices, int def, int *out)
{
    bn_option *it = find(o, key);
    if (!it) {
        *out = def;
        return BN_OK;
    }
    if ((*out = bn_name_index(choices, it->value)) >= 0) return BN_OK;
    char list[256];
    bn_names_join(choices, list, sizeof list);
    return bn_opt_error(o, key, "%s = '%s' is not one of: %s", key, it->value, list);
}

bn_status bn_options_check_unused(const bn_options *o)
{
    for (int i = 0; i < o->count; i++)
        if (!o->items[i].used)
            return bn_error(BN_ERR_USAGE, "%s:%d: [%s] unknown key '%s'", o->file ? o->file : "<options>",
                            o->items[i].line, o->section ? o->section : "?", o->items[i].key);
    return BN_OK;
}

/* A key given twice is refused rather than one of its values silently dropped: both places
 * are named, file:line in a model file, the option itself in inline text (line 0). */
static bn_status refuse_repeat(const bn_options *o, const char *key, int line)
{
    for (int i = 0; i < o->count; i++) {
        const bn_option *first = &o->items[i];
        if (strcmp(first->key, key) != 0) continue;
        if (line <= 0) return bn_error(BN_ERR_USAGE, "option '%s' is given twice", key);
        const char *file = o->file ? o->file : "<options>";
        return bn_error(BN_ERR_USAGE, "%s:%d: [%s] key '%s' is given twice: also at %s:%d", file, line,
                        o->section ? o->section : "?", key, file, first->line);
    }
    return BN_OK;
}

bn_status bn_options_add(bn_options *o, const char *key, const char *value, int line)
{
    BN_TRY(refuse_repeat(o, key, line));
    bn_option *grown = realloc(o->items, (size_t)(o->count + 1) * sizeof *grown);
    if (!grown) return bn_error(BN_ERR_NOMEM, "out of host memory reading options");
    o->items = grown;
    bn_option *it = &o->items[o->count];
    it->key = strdup(key);
    it->value = strdup(value);
    it->line = line;
    it->used = 0;
    if (!it->key || !it->value) {
        free(it->key);
        free(it->value);
        return bn_error(BN_ERR_NOMEM, "out of host memory reading options");
    }
    o->count++;
    return BN_OK;
}

bn_status bn_options_parse_inline(bn_options *o, const char *text)
{
    const char *p = text;
    while (*p) {
        while (*p && (isspace((unsigned char)*p) || *p == ',')) p++;
        if (!*p) break;
        const char *start = p;
        while (*p && !isspace((unsigned char)*p) && *p != ',') p++;
        char pair[256];
        size_t len = (size_t)(p - start);
        if (len >= sizeof pair) return bn_error(BN_ERR_USAGE, "option '%.40s...' is too long", start);
        memcpy(pair, start, len);
        pair[len] = '\0';
        char *eq = strchr(pair, '=');
        if (!eq && o->count > 0 && start > text && start[-1] == ',') {
            /* "coeff=1,-2": a piece right after a comma without '=' continues a list value. */
            bn_option *last = &o->items[o->count - 1];
            size_t had = strlen(last->value);
            char *grown = realloc(last->value, had + len + 2);
            if (!grown) return bn_error(BN_ERR_NOMEM, "out of host memory reading options");
            grown[had] = ',';
            memcpy(grown + had + 1, pair, len + 1);
            last->value = grown;
            continue;
        }
        if (!eq || eq == pair || !eq[1])
            return bn_error(BN_ERR_USAGE, "option '%s' is not of the form key=value", pair);
        *eq = '\0';
        BN_TRY(bn_options_add(o, pair, eq + 1, 0));
    }
    return BN_OK;
}

void bn_options_clear(bn_options *o)
{
    for (int i = 0; i < o->count; i++) {
        free(o->items[i].key);
        free(o->items[i].value);
    }
    free(o->items);
    free(o->section);
    o->items = NULL;
    o->section = NULL;
    o->count = 0;
}
