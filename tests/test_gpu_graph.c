/* Replaying the training step as a CUDA graph changes nothing but speed: with deterministic
 * algorithms, a run with graphs and one without end in byte-identical checkpoints. */
#include <stdlib.h>

#include "device.h"
#include "testing.h"

static char out[1 << 16];

static int train(const char *extra, const char *save)
{
    char cmd[4096];
    /* 3,000 images at batch 64: 46 full steps and a partial one per epoch, which runs eagerly. */
    snprintf(cmd, sizeof cmd, "%s train models/lenet.cfg --device gpu --deterministic --epochs 2 --train-limit 3000 "
             "--quiet --data %s --save %s %s", bn_test_cli(), bn_test_data_dir(), save, extra);
    return bn_test_run(cmd, out, sizeof out);
}

BN_TEST(gpu_graph_replay_matches_eager_steps)
{
    if (bn_device_count() == 0) BN_SKIP_TEST("no CUDA device");
    if (!bn_test_data_dir()) BN_SKIP_TEST("BLOBNET_TEST_DATA not set");
    char graph[512], eager[512], cmd[1200];
    snprintf(graph, sizeof graph, "%s/graph.safetensors", bn_test_tmpdir());
    snprintf(eager, sizeof eager, "%s/eager.safetensors", bn_test_tmpdir());
    CHECK_MSG(train("", graph) == 0, "%s", out);
    CHECK_MSG(strstr(out, "warning") == NULL, "the graph was not used: %s", out);
    CHECK_MSG(train("--no-graph", eager) == 0, "%s", out);
    snprintf(cmd, sizeof cmd, "cmp -s '%s' '%s'", graph, eager);
    CHECK_MSG(system(cmd) == 0, "graph and eager runs ended with different weights or momentum");
    return BN_PASS;
}
