/* checkpoint_meta.h - blobnet's fields in a checkpoint's "__metadata__" (checkpoint.h lists
 * them): written from a run's state, and read back with every field checked against the model
 * and against the others, each message naming the file and the field. For checkpoint.c. */
#ifndef BN_CHECKPOINT_META_H
#define BN_CHECKPOINT_META_H

#include "checkpoint.h"
#include "io/safetensors.h"
#include "settings.h"

#ifdef __cplusplus
extern "C" {
#endif

#define BN_CHECKPOINT_FIELDS 16

/* The fields of one checkpoint, with the storage of their values. */
typedef struct bn_checkpoint_fields {
    bn_safetensors_field list[BN_CHECKPOINT_FIELDS];
    size_t count;
    char numbers[BN_CHECKPOINT_FIELDS][32];
    char settings[BN_SETTINGS_MAX];
    char *input_norm;    /* the "input_norm" field's text when the model's mean or std is auto
                          * (owned: bn_checkpoint_fields_free) */
} bn_checkpoint_fields;

/* The fields for net, opt (may be NULL: weights only) and st (may be NULL: a fresh run). */
void bn_checkpoint_fields_build(bn_checkpoint_fields *m, const bn_net *net, const bn_optimizer *opt,
                                const bn_train_state *st);

/* Frees what bn_checkpoint_fields_build allocated. */
void bn_checkpoint_fields_free(bn_checkpoint_fields *m);

/* The per-channel mean and std a file keeps for a model whose [input] says auto (caller-owned
 * arrays of the input's channel count); nothing when the model has no auto. */
bn_status bn_checkpoint_meta_input_norm(const bn_safetensors *f, const bn_net *net, double *mean, double *std);

/* What the fields of a file say. */
typedef struct bn_checkpoint_meta {
    bn_train_state st;
    long iter;                    /* the optimizer's step count */
    int has_state;                /* "has_momentum": the file holds the optimizer's state */
    int optimizer;                /* whose state, an index into the optimizer table: "optimizer",
                                   * SGD's (the first) when absent */
    const char *settings;         /* the run's training settings; NULL in format 1 (owned by the file) */
    int text_changed;             /* format 1: the model file's text differs from the one saved */
} bn_checkpoint_meta;

/* Reads and checks every field a full load needs, the model first. */
bn_status bn_checkpoint_meta_read(const bn_safetensors *f, const bn_net *net, bn_checkpoint_meta *m);

/* Checks the model a file records against net, for a weights-only load: nothing when it records
 * none (plain safetensors); *text_changed as in bn_checkpoint_meta. */
bn_status bn_checkpoint_meta_check_model(const bn_safetensors *f, const bn_net *net, int *text_changed);

/* The checks and the report of a resume (checkpoint.h, bn_checkpoint_resume) with the settings of
 * cfg; m's seed becomes cfg's. */
bn_status bn_checkpoint_meta_resume(const bn_safetensors *f, const bn_net *net, const bn_train_config *cfg,
                                    bn_checkpoint_meta *m, bn_resume *r);

/* Says on stderr that a format 1 file was loaded though the model file's text changed. */
void bn_checkpoint_note_text_changed(const char *path, const bn_net *net);

#ifdef __cplusplus
}
#endif
#endif
