/* concat.h - the concat layer's GPU entry points (concat.cu); concat.c holds its keys, shapes
 * and CPU path. The output holds the inputs' channels one input after the other, per example. */
#ifndef BN_CONCAT_H
#define BN_CONCAT_H

#include "core/layer.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Whether input j is a slice of the output, written in place by its producer (fusion.c). */
int bn_concat_in_place(const bn_layer *l, int j);

bn_status bn_concat_forward_gpu(bn_layer *l, const bn_pass *p);
bn_status bn_concat_backward_gpu(bn_layer *l, const bn_pass *p);

#ifdef __cplusplus
}
#endif
#endif
