/* layercheck.h - the check kit for a layer type, built in or from a plugin: does it keep the
 * layer contract (layer.h)? It builds a one-layer network, [input] then [TYPE] with the given
 * keys (a type of several inputs reads slices of the data, one per input, each of its own shape),
 * and runs these checks (`blobnet check-layer` prints them as a table):
 *
 *   shapes           setup gives a positive output shape and positive parameter shapes, the
 *                    same when the network is set up for 1 example and for `batch`
 *   writes           forward writes every output element and backward every input-gradient
 *                    element (both are filled with NaN first); parameter gradients stay finite
 *   gradient         analytic gradients of the input and every parameter against central
 *                    differences (gradcheck.h), on the CPU path; the detail prints the measured
 *                    rounding floor
 *   accumulates      a second backward without zeroing doubles the parameter gradients:
 *                    backward adds into them instead of overwriting; on the CPU and the device
 *   evaluation       the evaluation pass (train = 0) writes every output, repeats bit for bit,
 *                    leaves the buffers alone and gives each example an output that does not
 *                    depend on the rest of its batch. A layer with buffers must move them in a
 *                    training pass (alike on the CPU and the device), and after training passes
 *                    on one batch until they settle its evaluation output must come within
 *                    eval_tolerance of the training output: what the running statistics say. A
 *                    layer without buffers that is not stochastic gives the same in both modes;
 *                    when it does not, the detail names a parameter its training pass changed
 *                    (running statistics belong in buffers: bn_layer_add_buffer), or says whether
 *                    its training output changes with the step and seed (random numbers, which
 *                    --stochastic is for) or not (state that belongs in buffers).
 *                    On the device, from the CPU's buffers: writes all, repeats, agrees.
 *   determinism cpu  two identical forward+backward passes give bit-identical outputs, input
 *                    gradient, parameter gradients and metrics
 *   cpu vs gpu       the same pass on both paths agrees within device_tolerance (relative to
 *                    each blob's largest CPU value); skipped without a device
 *   determinism gpu  as on the CPU, on the device; skipped without one
 *
 * Every pass also checks guard zones after each blob the layer writes (output, input
 * gradients, parameter gradients): a write past one fails the check that ran the pass, naming
 * the blob and the side. Inputs lie in a fixed range whatever the shape (layercheck_kit.c:
 * bn_kit_feed), distinct values 2.5 * eps apart while they fit, all at least 1.25 * eps away
 * from zero. A loss layer gets labels in [0, outputs per example). The passes run at step 0, in
 * training mode except those of the evaluation check. */
#ifndef BN_LAYERCHECK_H
#define BN_LAYERCHECK_H

#include <stdint.h>

#include "core/device.h"
#include "core/layer.h"
#include "gradcheck.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum bn_check_id {
    BN_CHECK_SHAPES,
    BN_CHECK_WRITES,
    BN_CHECK_GRADIENT,
    BN_CHECK_ACCUMULATES,
    BN_CHECK_EVALUATION,
    BN_CHECK_DETERMINISM_CPU,
    BN_CHECK_DEVICES,
    BN_CHECK_DETERMINISM_GPU,
    BN_CHECK_COUNT
} bn_check_id;

typedef enum bn_check_outcome { BN_CHECK_SKIP, BN_CHECK_PASS, BN_CHECK_FAIL } bn_check_outcome;

typedef struct bn_check {
    const char *name;          /* "gradient", "cpu vs gpu", ... (static) */
    bn_check_outcome outcome;
    char detail[320];          /* what was measured, the first difference, or why it was skipped */
} bn_check;

typedef struct bn_layercheck_report {
    bn_check checks[BN_CHECK_COUNT];  /* indexed by bn_check_id */
    int passed, failed, skipped;
} bn_layercheck_report;

typedef struct bn_layercheck_opts {
    const char *type;          /* the registered layer type */
    const char *options;       /* the section's keys as "k=v k2=v2" (spaces or commas), or NULL */
    bn_shape input;            /* one example (of the first input) */
    int num_inputs;            /* inputs the layer reads: 0 for its type's least (1 for most) */
    bn_shape more_inputs[BN_MAX_INPUTS - 1]; /* one example of inputs 2, 3, ...; zero: as input */
    int batch;                 /* examples in the passes; the shapes check compares it with 1 */
    bn_ctx *ctx;               /* device for the GPU checks; NULL skips them */
    int stochastic;            /* the layer draws random numbers in training (dropout): compare
                                * the devices in evaluation mode, where it must not */
    double device_tolerance;   /* largest accepted |gpu - cpu| / max |cpu| per blob */
    double eval_tolerance;     /* largest accepted |evaluation - training| / max |training| once a
                                * layer's running statistics settled on one batch */
    uint64_t seed;             /* parameters, inputs, labels and the output gradient */
    bn_gradcheck_opts grad;    /* the gradient check's eps, tolerance and coordinates */
} bn_layercheck_opts;

/* Input 5x7x9, batch 3 (the small shape below), no options, no device, device tolerance 1e-4 (float32 sums taken in
 * another order, as cuBLAS and cuDNN do, stay near 1e-6; TF32 would be off by 1e-3),
 * evaluation tolerance 0.02 (a running variance kept unbiased, as batch normalization's is,
 * puts evaluation about 1 / (2 m) off training for m values per statistic; the statistics
 * settle on a batch of at least 64, so m >= 64), seed 1, and the gradient checker's defaults. */
bn_layercheck_opts bn_layercheck_defaults(void);

/* The shapes `check-layer --all-shapes` runs: a small one, where a wrong value stands out, and a
 * realistic one (about LeNet's second convolution's input, 20x12x12), where sums are long and
 * rounding grows. In each, channels, height and width are odd and differ from each other, the
 * longer side is the width in one and the height in the other, and no batch is a power of two:
 * a layer that steps by the height where it means the width, swaps channels and positions or
 * sums in powers of two reads or writes the wrong elements at either, where a square shape of a
 * power-of-two batch would let it pass. */
typedef struct bn_layercheck_shape {
    const char *name;  /* "small", "realistic" */
    bn_shape input;    /* of every input */
    int batch;
} bn_layercheck_shape;

#define BN_LAYERCHECK_SHAPES 2
extern const bn_layercheck_shape bn_layercheck_shapes[BN_LAYERCHECK_SHAPES];

/* Runs every check on o->type and fills *report (also when a check fails). Returns BN_OK
 * when the checks could run, whatever their outcome; a usage error for an unknown type, bad
 * options or an input the layer's setup refuses; another error when memory or the device
 * fails outside a check. */
bn_status bn_layercheck_run(const bn_layercheck_opts *o, bn_layercheck_report *report);

/* How many inputs o's layer is checked with: o->num_inputs, else the least its type takes. */
int bn_layercheck_inputs(const bn_layercheck_opts *o);

/* "pass", "FAIL" or "skip". */
const char *bn_check_outcome_name(bn_check_outcome c);

#ifdef __cplusplus
}
#endif
#endif
