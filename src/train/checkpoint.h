/* checkpoint.h - weights, optimizer state and training progress in one safetensors file
 * (an 8-byte little-endian header length, a JSON header, raw little-endian float32), so
 * PyTorch and NumPy read the weights directly. Tensors: "<layer>.<param>" for weights,
 * "momentum.<layer>.<param>" for the optimizer; blobnet's own fields are strings in the
 * header's "__metadata__". Written atomically: temporary file, fsync, rename. */
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

/* Writes net's weights, opt's momentum (opt may be NULL) and st (may be NULL) to path,
 * atomically: the old file stays intact until the new one is complete. */
bn_status bn_checkpoint_save(const char *path, bn_net *net, const bn_sgd *opt, const bn_train_state *st);

/* Restores weights, momentum and state into a set-up net and its optimizer. Refuses a file
 * whose model hash, tensor names, shapes or dtypes differ from net's, naming the problem. */
bn_status bn_checkpoint_load(const char *path, bn_net *net, bn_sgd *opt, bn_train_state *st);

/* Restores only the weights (for testing and prediction); momentum entries are ignored,
 * and the model hash is checked when the file carries one. */
bn_status bn_checkpoint_load_weights(const char *path, bn_net *net);

#ifdef __cplusplus
}
#endif
#endif
