/* checkpoint.h - weights, optimizer state and training progress in one safetensors file
 * (an 8-byte little-endian header length, a JSON header, raw little-endian float32), so
 * PyTorch and NumPy read the weights directly. Tensors: "<layer>.<param>" for weights and
 * "<state>.<layer>.<param>" for each of the optimizer's state slabs: "momentum" for SGD,
 * "exp_avg" and "exp_avg_sq" for Adam and AdamW. blobnet's own fields are strings in the
 * header's "__metadata__", among them "optimizer" (adam or adamw; absent for SGD), "model" (the
 * model's description, core/describe.h: what the weights mean, which a load must match) and
 * "settings" (the run's training settings, settings.h). Format 1 files, written before there
 * was a description, carry "model_hash", a hash of the model file's text, instead; they still
 * load. Written atomically: temporary file, fsync, rename. */
#ifndef BN_CHECKPOINT_H
#define BN_CHECKPOINT_H

#include "core/net.h"
#include "optimizer.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Where training stands; everything random in a run derives from seed and these counters,
 * so restoring them continues the run exactly. */
typedef struct bn_train_state {
    unsigned long long seed;
    int epoch;                 /* epochs completed */
    int batch_in_epoch;        /* steps of the current epoch already taken */
    long step;                 /* optimizer steps taken in the whole run */
    double epoch_loss_sum;     /* running sums of the current epoch, for its summary line */
    double epoch_correct;
    long epoch_seen;           /* examples of the current epoch already trained: where it goes on */
    int examples;              /* the training set the epoch runs over (its order is drawn for this
                                * many); 0 when unknown */
} bn_train_state;

/* Writes net's weights, opt's state (opt may be NULL) and st (may be NULL) to path,
 * atomically: the old file stays intact until the new one is complete. */
bn_status bn_checkpoint_save(const char *path, bn_net *net, const bn_optimizer *opt, const bn_train_state *st);

/* Restores weights, optimizer state and progress into a set-up net and its optimizer (opt may
 * be NULL: weights and progress only). Refuses a file whose model, optimizer, tensor names,
 * shapes or dtypes differ from net's and opt's, or whose progress is out of range or
 * inconsistent, naming the file and the field; a bad file leaves net and opt untouched. */
bn_status bn_checkpoint_load(const char *path, bn_net *net, bn_optimizer *opt, bn_train_state *st);

/* What a resumed run is checked against, and what it is told. */
typedef struct bn_resume {
    int examples;              /* in: this run's training set size */
    char changes[1024];        /* out: the training settings changed since the checkpoint, as
                                * "epochs 10 -> 20, lr 0.01 -> 0.005"; "" when none */
} bn_resume;

/* bn_checkpoint_load for a run that goes on from path with opt->cfg's settings (every changed
 * one is listed in r->changes and used) on a training set of r->examples. Refuses, before
 * touching net and opt, a place in an epoch that this run cannot continue from: past its
 * training set, or mid-epoch with another training set size or seed (either would draw another
 * order of examples, so that some were skipped and others seen twice). */
bn_status bn_checkpoint_resume(const char *path, bn_net *net, bn_optimizer *opt, bn_train_state *st, bn_resume *r);

/* Restores only the weights (for testing and prediction); optimizer state is ignored, and the
 * model is checked when the file records it. */
bn_status bn_checkpoint_load_weights(const char *path, bn_net *net);

#ifdef __cplusplus
}
#endif
#endif
