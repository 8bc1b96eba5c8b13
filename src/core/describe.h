/* describe.h - the canonical description of a model: what its weights mean, in text that two
 * model files share exactly when they build the same computation. One line for the input
 * ("input 1x28x28 mean=0.1307 std=0.3081") and one per layer, in order:
 *     <name> <type> <- <inputs>: <key>=<value> ...
 * with every input named (the layer above when the file names none), the keys of the layer's
 * section other than name and input sorted, and numbers in one spelling. The [train] and
 * [augment] sections, comments, key order and spacing never appear in it. Checkpoints are tied
 * to this text. */
#ifndef BN_DESCRIBE_H
#define BN_DESCRIBE_H

#include <stddef.h>

#include "options.h"

#ifdef __cplusplus
extern "C" {
#endif

struct bn_net;

/* Builds net's description into a new string (*out, the caller frees it), from the net's
 * input and wired layers and sections[i], the model-file section of layer i. */
bn_status bn_describe_model(const struct bn_net *net, bn_options *const *sections, char **out);

/* Writes the shortest decimal spelling that reads back as v ("0.0005" for 5e-4), whole numbers
 * in full ("20" for 2e1), into buf (cap bytes; 32 always suffice). */
void bn_describe_number(double v, char *buf, size_t cap);

/* When the whole of text is one finite number, writes its shortest spelling into buf (cap
 * bytes) and returns 1; otherwise returns 0 (descriptions then keep the text as it is). */
int bn_describe_value(const char *text, char *buf, size_t cap);

#ifdef __cplusplus
}
#endif
#endif
