/* layercheck_kit.h - what the checks of the layer contract share (layercheck.c, the evaluation
 * check in layercheck_eval.c): the one-layer network the kit builds from its options, the inputs,
 * labels and output gradient it feeds, its passes with guard zones after every blob the layer
 * writes, and copies of a pass's results to compare. For src/check. */
#ifndef BN_LAYERCHECK_KIT_H
#define BN_LAYERCHECK_KIT_H

#include "core/net.h"
#include "layercheck.h"

/* One blob's values at the end of a pass. */
typedef struct bn_kit_part {
    char name[80];
    float *v;
    size_t n;
} bn_kit_part;

/* Output, input gradient, every parameter gradient and, for a loss layer, the metrics. */
typedef struct bn_kit_snapshot {
    bn_kit_part parts[3 + BN_MAX_PARAMS];
    int count;
} bn_kit_snapshot;

/* One run of the kit: its options, the report it fills and the networks its checks set up. */
typedef struct bn_kit {
    const bn_layercheck_opts *o;
    bn_layercheck_report *rep;
    char *text;        /* the one-layer model */
    bn_net *one;       /* set up for 1 example on the CPU */
    bn_net *cpu;       /* set up for o->batch on the CPU (by the shapes check) */
    bn_net *gpu;       /* the same on o->ctx (by the device check) */
    float *out_grad;   /* the output gradient fed to a layer that is not a loss */
} bn_kit;

/* The largest |b - a| of one blob relative to max |a|, and where it is. */
typedef struct bn_kit_gap {
    double rel;
    const bn_kit_part *where;
    size_t index;
    float a, b;
} bn_kit_gap;

/* Marks check c as r with a printf-style detail. */
void bn_kit_set(bn_check *c, bn_check_outcome r, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* The layer under test: the network's last layer. */
bn_layer *bn_kit_under(bn_net *net);

/* The one-layer model of o as model-file text (slices of the data for a type of several
 * inputs); *out is freed by the caller. */
bn_status bn_kit_model_text(const bn_layercheck_opts *o, char **out);

/* k's model set up for `batch` examples (and a spare one, the guard) on ctx (NULL: the CPU);
 * *out is NULL on failure, else freed by the caller. */
bn_status bn_kit_build(const bn_kit *k, int batch, bn_ctx *ctx, bn_net **out);

/* The kit's inputs (layercheck.h) and, for a loss layer, labels into net. */
bn_status bn_kit_feed(const bn_kit *k, bn_net *net);

/* Draws k->out_grad, the output gradient of a layer that is not a loss (k->cpu must be set up). */
bn_status bn_kit_make_out_grad(bn_kit *k);

/* Backward from the loss layer's own gradient, or from k->out_grad. */
bn_status bn_kit_backward(const bn_kit *k, bn_net *net);

/* Fills the guard after every blob the layer under test writes; call after zeroing gradients. */
bn_status bn_kit_arm_guards(bn_net *net);

/* An error naming the first guard element a pass changed, with the blob and the side. */
bn_status bn_kit_inspect_guards(const bn_kit *k, bn_net *net);

/* Fills b's current elements (host copy) with NaN; nothing for a NULL blob. */
bn_status bn_kit_poison(bn_blob *b);

/* Appends a copy of b's current elements to s under name. */
bn_status bn_kit_add_part(bn_kit_snapshot *s, const char *name, bn_blob *b);

/* Frees the copies in s. */
void bn_kit_drop(bn_kit_snapshot *s);

/* The output, input gradient, parameter gradients and (for a loss) metrics of net, copied. */
bn_status bn_kit_take(bn_net *net, bn_kit_snapshot *s);

/* One forward and backward in `train` mode with fresh inputs and armed guards, copied out. */
bn_status bn_kit_pass_snapshot(const bn_kit *k, bn_net *net, int train, bn_kit_snapshot *s);

/* Widens g to the largest |pb - pa| of the two parts relative to max |pa| (NaN wins). */
void bn_kit_widen(bn_kit_gap *g, const bn_kit_part *pa, const bn_kit_part *pb);

/* The number of NaN and infinite current elements of b (0 for a NULL blob); *s gets an error. */
size_t bn_kit_count_nonfinite(bn_blob *b, bn_status *s);

/* *random receives whether the layer under test draws random numbers in training: whether two
 * training passes of net (the CPU's) on the same inputs, parameters and buffers, at other steps
 * and seeds, give different outputs. A layer that computes a function of those alone gives the
 * same bits. Parameters and buffers are left as they were. */
bn_status bn_kit_draws_random(const bn_kit *k, bn_net *net, int *random);

/* The evaluation check (layercheck.h): returns an error the caller turns into a failure. */
bn_status bn_layercheck_evaluation(bn_kit *k, bn_check *c);

#endif
