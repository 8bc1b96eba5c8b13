/* fuzz_checkpoint.c - libFuzzer target for the checkpoint loader (src/train/checkpoint.c, and
 * src/io/safetensors.c and the JSON reader under them). An input is a checkpoint file for
 * FUZZ_CHECKPOINT_MODEL; it is loaded for a resume (weights, momentum, state) and for weights
 * alone. A load that succeeds must leave only finite numbers in the net. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "fuzz_common.h"
#include "train/checkpoint.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static bn_net *net;
static bn_optimizer *opt;

static void all_finite(bn_blob *b)
{
    const float *v = bn_blob_host_rd(b);
    for (size_t i = 0; i < bn_blob_count(b); i++)
        if (!isfinite(v[i])) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!net) {
        if (bn_net_from_text(FUZZ_CHECKPOINT_MODEL, "fuzz.cfg", &net) != BN_OK ||
            bn_net_setup(net, 2, NULL, 0, 1) != BN_OK || bn_optimizer_create(net, &net->train, &opt) != BN_OK)
            abort();
    }
    char path[128];
    fuzz_write(fuzz_path(path, sizeof path, "checkpoint.safetensors"), data, size);
    bn_train_state st;
    if (bn_checkpoint_load(path, net, opt, &st) == BN_OK) {
        all_finite(net->params);
        all_finite(opt->state[0]);
    }
    if (bn_checkpoint_load_weights(path, net) == BN_OK) all_finite(net->params);
    return 0;
}
