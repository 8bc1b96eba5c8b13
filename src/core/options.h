/* options.h - the `key = value` lines of one model-file section, with typed readers.
 * Every reader marks its key used; after a layer has read what it knows, any key left
 * unused is reported as unknown. Errors name file:line. */
#ifndef BN_OPTIONS_H
#define BN_OPTIONS_H

#include <stddef.h>
#include <stdint.h>

#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct bn_option {
    char *key;
    char *value;
    int line;
    int used;
} bn_option;

typedef struct bn_options {
    const char *file;     /* where the section came from, for messages */
    char *section;        /* the section's name, e.g. "conv2d" */
    int line;             /* line of the [section] header */
    bn_option *items;
    int count;
} bn_options;

/* Integer option: `def` when the key is absent; an error unless lo <= value <= hi. */
bn_status bn_opt_int(bn_options *o, const char *key, int def, int lo, int hi, int *out);

/* Integer option that must be present. */
bn_status bn_opt_int_required(bn_options *o, const char *key, int lo, int hi, int *out);

/* Floating-point option (finite), `def` when absent; an error unless lo <= value <= hi. */
bn_status bn_opt_float(bn_options *o, const char *key, double def, double lo, double hi, double *out);

/* Reads all of text as a finite number: NULL with *out set, or why it is not one, to follow the text
 * in a message ("is not a finite number", "is too small to hold (it underflows to 0)", ...). */
const char *bn_parse_finite(const char *text, double *out);

/* Reads all of text as a size in bytes: a number of at least 0 (fractions allowed), with K, M or G
 * after it for thousands, millions or billions, at most 1e18 bytes in all. NULL with *out set, or
 * why it is not one, to follow the text in a message. */
const char *bn_parse_bytes(const char *text, uint64_t *out);

/* String option; *out points into the options (valid while they live); `def` when absent. */
bn_status bn_opt_str(bn_options *o, const char *key, const char *def, const char **out);

/* The index of name in the NULL-terminated list names, or -1. */
int bn_name_index(const char *const *names, const char *name);

/* names (NULL-terminated) joined by ", " into buf (cap bytes, cut short where it must be). */
void bn_names_join(const char *const *names, char *buf, size_t cap);

/* One of a NULL-terminated list of words; *out is its index, `def` when absent. */
bn_status bn_opt_choice(bn_options *o, const char *key, const char *const *choices, int def, int *out);

/* An error naming the first key that no reader used, or BN_OK. */
bn_status bn_options_check_unused(const bn_options *o);

/* Records a usage error located at the key's line (or the section's when absent). */
bn_status bn_opt_error(const bn_options *o, const char *key, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* Adds key = value at `line` (copied); used by the model-file parser and by tests. */
bn_status bn_options_add(bn_options *o, const char *key, const char *value, int line);

/* Parses "k=v k2=v2" (spaces or commas between pairs) into o, for CLI and test use; a piece
 * without '=' right after a comma continues the value before it ("coeff=1,-2" is one pair). */
bn_status bn_options_parse_inline(bn_options *o, const char *text);

/* Frees the keys and values (not the struct itself). */
void bn_options_clear(bn_options *o);

#ifdef __cplusplus
}
#endif
#endif
