/* checkpoint.h - weights, optimizer state and training progress in one safetensors file
 * (an 8-byte little-endian header length, a JSON header, raw little-endian float32), so
 * PyTorch and NumPy read the weights directly. Tensors: "<layer>.<param>" for weights and
 * "<state>.<layer>.<param>" for each of the optimizer's state slabs: "momentum" for SGD,
 * "exp_avg" and "exp_avg_sq" for Adam and AdamW. blobnet's own fields are strings in the
 * header's "__metadata__", among them "optimizer" (adam or adamw; absent for SGD, whose files
 * are as they were before there was a choice). Written atomically: temporary file, fsync,
 * rename. */
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
    int batch_in_epoch;        /* batches of the current epoch already trained */
    long step;                 /* optimizer steps taken in the whole run */
    double epoch_loss_sum;     /* running sums of the current epoch, for its summary line */
    double epoch_correct;
    long epoch_seen;
} bn_train_state;

/* Writes net's weights, opt's state (opt may be NULL) and st (may be NULL) to path,
 * atomically: the old file stays intact until the new one is complete. */
bn_status bn_checkpoint_save(const char *path, bn_net *net, const bn_optimizer *opt, const bn_train_state *st);

/* Restores weights, optimizer state and progress into a set-up net and its optimizer (opt may
 * be NULL: weights and progress only). Refuses a file whose model hash, optimizer, tensor
 * names, shapes or dtypes differ from net's and opt's, naming the problem. */
bn_status bn_checkpoint_load(const char *path, bn_net *net, bn_optimizer *opt, bn_train_state *st);

/* Restores only the weights (for testing and prediction); optimizer state is ignored,
 * and the model hash is checked when the file carries one. */
bn_status bn_checkpoint_load_weights(const char *path, bn_net *net);

#ifdef __cplusplus
}
#endif
#endif
