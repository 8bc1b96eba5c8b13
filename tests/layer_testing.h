/* layer_testing.h - helpers shared by the layer tests: small networks from model text,
 * seeded inputs (also ones kept away from kinks), blob access, and a gradient check that
 * prints one line per call:
 *     gradcheck <what>: <checked> coords, worst rel err <e>
 *
 * Inputs come from seeds derived from the run's (runner.c: BLOBNET_TEST_SEED or a fixed default),
 * so a run repeats; a failing check prints how to replay it (lt_replay), and `make test-seeds`
 * explores fresh seeds. */
#ifndef BN_LAYER_TESTING_H
#define BN_LAYER_TESTING_H

#include <stddef.h>
#include <stdint.h>

#include "check/gradcheck.h"
#include "core/net.h"
#include "train/optimizer.h"

/* A seed for this check: the n-th call of a test gives a seed of the run's seed, the test's name
 * and n, the same in every run with that seed whatever else runs. */
uint64_t lt_fresh_seed(void);

/* "BLOBNET_TEST_SEED=<the run's seed> ./tests/run_tests <test>", the command that replays the
 * running test's draws, for failure messages (static storage). */
const char *lt_replay(void);

/* How far g is from c, relative to what c added to base (zeros when base is NULL): max |g - c|
 * over max |c - base| (over 1 when c equals base); infinite when either holds a NaN or an
 * infinity. *where receives the element of the largest difference (or of the non-finite one). */
double lt_rel_diff(const float *g, const float *c, const float *base, size_t count, size_t *where);

/* Builds a network from text and sets it up on the CPU for `batch` examples with the
 * input gradient, parameters drawn from seed. */
bn_status lt_net(const char *text, int batch, uint64_t seed, bn_net **out);

/* The output shape (per example) of the network described by text. */
bn_status lt_out_shape(const char *text, int *c, int *h, int *w);

/* Fills net->input with normal values times scale; values with |x| < gap are pushed out to
 * +-gap (away from the kink of relu-like layers). */
bn_status lt_fill_normal(bn_net *net, uint64_t seed, double scale, double gap);

/* Fills net->input with distinct values `spacing` apart in random order, centred on 0, so
 * that no max-pooling window holds two values within a perturbation of each other. */
bn_status lt_fill_distinct(bn_net *net, uint64_t seed, double spacing);

/* Random class indices in [0, classes) for the current batch. */
bn_status lt_fill_labels(bn_net *net, uint64_t seed, int classes);

/* Copies count floats into (or out of) a blob's host copy. */
bn_status lt_write(bn_blob *b, const float *v, size_t count);
bn_status lt_read(bn_blob *b, float *v, size_t count);

/* Gradient check with the library defaults except eps (when > 0), tol and 200 coordinates
 * per blob; prints the per-check line, and the seed when it fails. BN_PASS or BN_FAIL. */
int lt_gradcheck(bn_net *net, const char *what, uint64_t seed, double eps, double tol);

/* Sets up text for batch, fills inputs (distinct when spacing > 0, else normal with gap) and,
 * with a loss layer, labels for `classes`; then lt_gradcheck. Frees the network. */
int lt_gradcheck_text(const char *text, const char *what, int batch, double gap, double spacing,
                      int classes, double tol);

/* One lt_gradcheck_text call's arguments, for a table of cases that differ in shapes or options. */
typedef struct lt_gradcheck_case {
    const char *text, *what;
    int batch;
    double gap, spacing;
    int classes;
} lt_gradcheck_case;

/* lt_gradcheck_text on each case with tol, in order: BN_PASS, or BN_FAIL at the first that fails. */
int lt_gradcheck_cases(const lt_gradcheck_case *cases, size_t count, double tol);

/* Training steps first .. first + count - 1 of net with opt: each on normal inputs drawn from
 * input_seed + step and labels in [0, classes) from label_seed + step. */
bn_status lt_train_steps(bn_net *net, bn_optimizer *opt, int first, int count, int classes, uint64_t input_seed,
                         uint64_t label_seed);

/* Runs text's network for `batch` examples twice from the same seed, in FP32 on the CPU and
 * under --precision bf16 on ctx's device (ctx->bf16 is set for the setup only), on the same
 * normal inputs and either labels in [0, classes) (classes > 0, a loss layer last) or the same
 * random last output gradient: one forward (training when train is set) and one backward pass.
 * *worst receives the largest lt_rel_diff, BF16 device against FP32 CPU, over every layer's
 * output, the input gradient, every parameter gradient and the loss sum; `what` names where. */
bn_status lt_bf16_vs_cpu(const char *text, int batch, int classes, int train, bn_ctx *ctx, uint64_t seed,
                         double *worst, char *what, size_t cap);

/* Sets text's network up on ctx for `batch` examples from seed, runs one training forward and
 * backward pass, and writes the kernel plan of each conv2d layer names[i] into plans[i] (cap
 * bytes; "" without CUDA or for a name the network lacks); the network is freed. Returns the
 * first failing status, plans then as far as they got. */
bn_status lt_conv_plans(const char *text, bn_ctx *ctx, int batch, uint64_t seed, const char *const *names,
                        char *const *plans, int count, size_t cap);

/* Builds text's network for one example and returns its setup status; the network is freed. */
bn_status lt_setup_status(const char *text);

#endif
