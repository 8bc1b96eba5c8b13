/* fuzz_model.c - libFuzzer target for the model-file parser and network setup
 * (src/core/modelfile.c, src/core/options.c, src/core/net.c and every layer's parse and setup).
 * An input is a model file. One that parses is set up at batch 1 under a 256 MB memory
 * limit; a small one then runs a training step, forward and backward, on zero input. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/net.h"

#define FUZZ_MAX_BYTES ((size_t)256 << 20)
/* Nets up to this many floats (activations and parameters) also run one step. */
#define FUZZ_STEP_FLOATS (1 << 20)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static size_t net_floats(bn_net *net)
{
    size_t n = bn_blob_count(net->input) + 2 * net->num_params;
    for (int i = 0; i < net->num_layers; i++) n += 2 * bn_blob_count(net->layers[i]->out);
    return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (!text) abort();
    memcpy(text, data, size);
    text[size] = '\0';
    bn_net *net;
    if (bn_net_from_text(text, "fuzz.cfg", &net) == BN_OK) {
        net->max_bytes = FUZZ_MAX_BYTES;
        if (bn_net_setup(net, 1, NULL, 0, 1) == BN_OK && net_floats(net) <= FUZZ_STEP_FLOATS) {
            if (bn_net_forward(net, 1) == BN_OK) bn_net_backward(net);
        }
        bn_net_free(net);
    }
    free(text);
    return 0;
}
