/* data_source.h - what a command trains or tests on: the --dataset, --data, --data-option and
 * --holdout flags over the model file's [data] section over the format's defaults, read through
 * the table of formats (datasets/dataset.h), and the checks that the data fits the model. */
#ifndef BN_DATA_SOURCE_H
#define BN_DATA_SOURCE_H

#include "core/net.h"
#include "dataset.h"

#define BN_CLI_MAX_DATA_OPTIONS 16

/* The data flags as given; NULL, 0 or -1 where not given. */
typedef struct bn_data_flags {
    const char *dataset;                               /* --dataset NAME */
    const char *path;                                  /* --data PATH */
    const char *options[BN_CLI_MAX_DATA_OPTIONS];      /* --data-option KEY=VALUE, in order */
    int num_options;
    long holdout;                                      /* --holdout N; -1 when not given */
} bn_data_flags;

/* Where a command's data comes from, once flags and [data] are merged. */
typedef struct bn_data_source {
    const bn_data_format *format;
    const char *path;      /* points into the flags, the model's [data] or the table */
    bn_options opts;       /* the format's keys: [data]'s, then --data-option's over them */
    int holdout;           /* the last N training examples held out for validation (0: none) */
} bn_data_source;

/* Adds one --data-option KEY=VALUE to flags (a usage error past BN_CLI_MAX_DATA_OPTIONS). */
bn_status bn_data_flags_add_option(bn_data_flags *flags, const char *text);

/* Merges flags over net's [data] section (net may be NULL) over the defaults (mnist; the path
 * $BLOBNET_DATA for mnist, else the format's default). *src is owned by the caller
 * (bn_data_source_free). */
bn_status bn_data_source_resolve(const bn_data_flags *flags, const bn_net *net, bn_data_source *src);

/* Reads one split (train 1, test 0) fitted to fit (all zero: as stored), keeping the first limit
 * examples of it (<= 0: all); a key of the format's that no reader used is refused. */
bn_status bn_data_source_load(bn_data_source *src, bn_shape fit, int train, int limit, int quiet, bn_dataset *out);

/* Loads the training and test splits for net (the first `limit` and `test_limit` examples of
 * each; 0: all), makes both hold the same class count (the larger), checks them against the
 * model (bn_data_check_model) and splits off the holdout (an empty set when none). The sets are
 * the caller's (bn_dataset_free) and zeroed on error. */
bn_status bn_data_source_load_all(bn_data_source *src, const bn_net *net, int limit, int test_limit, int quiet,
                                  bn_dataset *train, bn_dataset *test, bn_dataset *holdout);

/* The model's input against the data's example shape, and its outputs (the last layer's units)
 * against the data's classes: one line naming both on a mismatch. */
bn_status bn_data_check_model(const bn_net *net, const bn_dataset *d, const bn_data_source *src, const char *split);

/* Frees what resolve made. */
void bn_data_source_free(bn_data_source *src);

#endif
