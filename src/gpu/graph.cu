/* graph.cu - capture and replay of a training step (graph.h). */
#include <stdio.h>
#include <stdlib.h>

#include "cuda_check.h"
#include "graph.h"

/* Ends a capture that the body broke off and drops whatever was recorded. */
static void abandon_capture(cudaStream_t s)
{
    cudaGraph_t partial = NULL;
    cudaStreamEndCapture(s, &partial);
    if (partial) cudaGraphDestroy(partial);
    cudaGetLastError();
}

/* Whether the test hook (graph.h) fails this capture: BLOBNET_TEST_FAIL_CAPTURE=N, read once, fails
 * the Nth. */
static bool hook_fails_capture(void)
{
    static long left = -1;
    if (left < 0) {
        const char *v = getenv("BLOBNET_TEST_FAIL_CAPTURE");
        left = v ? strtol(v, NULL, 10) : 0;
        if (left < 0) left = 0;
    }
    return left > 0 && --left == 0;
}

/* With `prioritized` (bn_ctx_prioritize) the graph keeps the priority of the stream each kernel
 * was captured from, instead of running every node at the priority of the stream it is launched
 * into. */
static bn_status capture(bn_step_graph *g, cudaStream_t s, int prioritized, bn_status (*body)(void *), void *arg)
{
    BN_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    bn_status st = body(arg);
    if (st != BN_OK) {
        abandon_capture(s);
        return st;
    }
    cudaGraph_t graph;
    BN_CUDA(cudaStreamEndCapture(s, &graph));
    if (hook_fails_capture()) {
        cudaGraphDestroy(graph);
        return bn_error(BN_ERR_DEVICE, "BLOBNET_TEST_FAIL_CAPTURE refused the graph (a test hook)");
    }
    cudaGraphExec_t exec;
    cudaError_t e = cudaGraphInstantiate(&exec, graph, prioritized ? cudaGraphInstantiateFlagUseNodePriority : 0);
    cudaGraphDestroy(graph);
    if (e != cudaSuccess)
        return bn_error(BN_ERR_DEVICE, "%s:%d: cudaGraphInstantiate: %s", __FILE__, __LINE__, cudaGetErrorString(e));
    g->exec = exec;
    bn_device_graphs(1);
    return BN_OK;
}

extern "C" bn_status bn_step_graph_run(bn_step_graph *g, bn_ctx *ctx, bn_status (*body)(void *),
                                       void (*rewind)(void *), void *arg, int *replayed)
{
    cudaStream_t s = (cudaStream_t)ctx->stream;
    *replayed = 0;
    if (g->failed) return body(arg);
    if (g->exec && g->buffer_generation != ctx->buffer_generation) bn_step_graph_free(g);
    if (!g->exec) {
        g->buffer_generation = ctx->buffer_generation;
        const int pending = ctx->side_pending;
        ctx->capturing = 1;
        bn_status st = capture(g, s, ctx->prioritized, body, arg);
        ctx->capturing = 0;
        if (st != BN_OK) {
            g->failed = 1;
            if (!rewind) return st;
            /* The body's host-side effects have happened (all of them, or up to its error); its
             * device work has not, and neither has the side work it forked or the lanes it
             * entered. Undo the host side, and run the step eagerly now and from now on. */
            fprintf(stderr, "blobnet: warning: cannot capture a step as a CUDA graph (%s); running it kernel by "
                            "kernel\n", bn_last_error());
            bn_ctx_leave_lanes(ctx);
            ctx->side_pending = pending;
            rewind(arg);
            return body(arg);
        }
    } else {
        *replayed = 1;
    }
    BN_CUDA(cudaGraphLaunch((cudaGraphExec_t)g->exec, s));
    return BN_OK;
}

extern "C" void bn_step_graph_free(bn_step_graph *g)
{
    if (g->exec) {
        cudaGraphExecDestroy((cudaGraphExec_t)g->exec);
        bn_device_graphs(-1);
    }
    g->exec = NULL;
}
