/* graph.h - replaying a training step as a CUDA graph. The first call captures the step's
 * device work (the body runs once, enqueuing on the context stream, and its host-side
 * effects happen once); later calls launch the captured graph, which costs one launch
 * instead of one per kernel. Whatever varies between steps must therefore live on the
 * device: the loader's cursor and the optimizer's learning-rate schedule do. */
#ifndef BN_GRAPH_H
#define BN_GRAPH_H

#include "core/device.h"
#include "core/net.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct bn_step_graph {
    void *exec;        /* cudaGraphExec_t once captured */
    int failed;        /* capture was refused: run eagerly from now on */
    unsigned buffer_generation; /* the context's buffer_generation when captured */
} bn_step_graph;

/* Runs body(arg) as a captured graph: captures on the first call, replays afterwards.
 * *replayed is 1 when the body did not run (the caller repeats its host-side effects).
 * A capture that fails (an error of the body's while it is captured, or the driver's at the
 * capture's end) leaves the graph marked failed; its device work never ran, but its host side did,
 * so rewind(arg) undoes that, a warning on stderr says so, and the body runs eagerly, as it does at
 * every later call (with rewind NULL, the capture's error is returned instead). A graph whose
 * capture saw a workspace the context has since replaced (a larger one, for another batch size)
 * is captured again.
 *
 * A test hook: with BLOBNET_TEST_FAIL_CAPTURE=N in the environment, the process's Nth capture
 * fails after its body ran, as one whose graph the driver refuses does. */
bn_status bn_step_graph_run(bn_step_graph *g, bn_ctx *ctx, bn_status (*body)(void *), void (*rewind)(void *),
                            void *arg, int *replayed);

void bn_step_graph_free(bn_step_graph *g);

#ifdef __cplusplus
}
#endif
#endif
