/* evaluate.h - evaluation that keeps every example's answer: the network's outputs and the
 * predicted classes, for confusion matrices, misclassified examples and predictions. */
#ifndef BN_EVALUATE_H
#define BN_EVALUATE_H

#include "core/net.h"
#include "dataset.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Values per example in net's output: the number of classes of a classifier. Needs setup. */
int bn_output_size(bn_net *net);

/* Runs net over data in order, in batches of its capacity, reading the outputs to the host
 * after every batch. Each may be NULL: outputs (caller-owned, count * bn_output_size) gets
 * every example's output (class probabilities for a softmax_ce network), pred (caller-owned,
 * count) the index of its largest output, loss and acc the mean loss and accuracy against
 * data's labels, summed as bn_evaluate sums them (these need a loss layer). */
bn_status bn_evaluate_each(bn_net *net, const bn_dataset *data, float *outputs, int *pred, double *loss,
                           double *acc);

/* The index of the largest of v[0..n), the first one on ties. */
int bn_argmax(const float *v, int n);

#ifdef __cplusplus
}
#endif
#endif
