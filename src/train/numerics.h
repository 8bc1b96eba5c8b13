/* numerics.h - where NaN and infinity come from, and how large a network's numbers are: host
 * scans of every layer's blobs, made when training fails or every N steps on request, never as
 * part of a normal step. */
#ifndef BN_NUMERICS_H
#define BN_NUMERICS_H

#include <stdio.h>

#include "core/net.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Finds the first non-finite value of the last step, searched in the order in which one
 * spreads: parameters in layer order, then outputs in forward order, then output gradients
 * and parameter gradients in backward order. Writes where it is into buf (e.g. "layer conv1
 * (conv2d) output, element 17: NaN") and returns 1; returns 0 when every value is finite. */
int bn_numerics_locate(bn_net *net, char *buf, size_t cap);

/* Prints a table of each layer's mean absolute output, output gradient, parameter and
 * parameter gradient ("-" where a layer has none) after training step `step`. */
bn_status bn_numerics_print(bn_net *net, FILE *out, long step);

#ifdef __cplusplus
}
#endif
#endif
