/* Profiling: the NVTX ranges a training run opens, recorded by an injection library (the
 * path <layer>/forward is a range named after the layer holding one named "forward"), and
 * the `blobnet time` table. */
#include <stdlib.h>

#include "testing.h"

static char out[1 << 16];

#define MAX_EVENTS 20000
#define MAX_NAME 96

typedef struct event {
    int push;
    char name[MAX_NAME];
} event;

static event events[MAX_EVENTS];

static int read_events(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    int n = 0;
    char line[256];
    while (n < MAX_EVENTS && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        if (strncmp(line, "push blobnet ", 13) == 0) {
            events[n].push = 1;
            snprintf(events[n].name, MAX_NAME, "%.95s", line + 13);
            n++;
        } else if (strcmp(line, "pop blobnet") == 0) {
            events[n].push = 0;
            events[n].name[0] = '\0';
            n++;
        }
    }
    fclose(f);
    return n;
}

static const char *const layers[] = {"conv1", "pool1", "conv2", "pool2", "ip1", "relu1", "ip2", "loss"};
#define NUM_LAYERS 8

/* LeNet on 200 images at batch 64: 4 steps (the last one partial), one epoch, one eval. */
BN_TEST(profiling_nvtx_ranges_of_a_cpu_training_run)
{
    const char *recorder = getenv("BLOBNET_NVTX_RECORDER");
    if (!recorder || !*recorder) BN_SKIP_TEST("built without NVTX headers or with NVTX=0");
    if (!bn_test_data_dir()) BN_SKIP_TEST("BLOBNET_TEST_DATA not set");
    char log[512], cmd[2048];
    snprintf(log, sizeof log, "%s/nvtx.log", bn_test_tmpdir());
    snprintf(cmd, sizeof cmd, "NVTX_INJECTION64_PATH=%s BN_NVTX_LOG=%s %s train models/lenet.cfg --device cpu "
             "--epochs 1 --train-limit 200 --quiet --data %s", recorder, log, bn_test_cli(), bn_test_data_dir());
    int rc = bn_test_run(cmd, out, sizeof out);
    CHECK_MSG(rc == 0, "exit %d: %s", rc, out);
    int n = read_events(log);
    CHECK_MSG(n > 0, "no ranges recorded in %s", log);

    const char *stack[16];
    int depth = 0, steps = 0, epochs = 0, evals = 0, updates = 0;
    int fwd[NUM_LAYERS] = {0}, bwd[NUM_LAYERS] = {0};
    for (int i = 0; i < n; i++) {
        if (!events[i].push) {
            CHECK_MSG(depth > 0, "pop without a push at event %d", i);
            depth--;
            continue;
        }
        const char *name = events[i].name;
        CHECK(depth < 16);
        const char *parent = depth ? stack[depth - 1] : "";
        stack[depth++] = name;
        if (strncmp(name, "step ", 5) == 0) {
            steps++;
            CHECK_MSG(atoi(name + 5) == steps, "step range '%s' out of order", name);
            CHECK_MSG(strcmp(parent, "epoch 1") == 0, "'%s' inside '%s'", name, parent);
        } else if (strcmp(name, "epoch 1") == 0) {
            epochs++;
        } else if (strcmp(name, "eval") == 0) {
            evals++;
        } else if (strcmp(name, "optimizer/update") == 0) {
            updates++;
            CHECK_MSG(strncmp(parent, "step ", 5) == 0, "update inside '%s'", parent);
        }
        /* A layer's range sits in a step or in eval and holds one "forward" or "backward". */
        const char *grandparent = depth >= 3 ? stack[depth - 3] : "";
        for (int k = 0; k < NUM_LAYERS; k++) {
            if (strcmp(name, layers[k]) == 0) {
                int in_step = strncmp(parent, "step ", 5) == 0, in_eval = strcmp(parent, "eval") == 0;
                CHECK_MSG(in_step || in_eval, "layer range '%s' inside '%s'", name, parent);
            }
            if (strcmp(parent, layers[k]) != 0 || strncmp(grandparent, "step ", 5) != 0) continue;
            CHECK_MSG(strcmp(name, "forward") == 0 || strcmp(name, "backward") == 0, "'%s' inside layer %s", name,
                      parent);
            fwd[k] += strcmp(name, "forward") == 0;
            bwd[k] += strcmp(name, "backward") == 0;
        }
    }
    CHECK_MSG(depth == 0, "%d ranges left open", depth);
    CHECK(steps == 4 && epochs == 1 && evals == 1 && updates == 4);
    for (int k = 0; k < NUM_LAYERS; k++)
        CHECK_MSG(fwd[k] == 4 && bwd[k] == 4, "%s: %d forward and %d backward ranges in 4 steps", layers[k],
                  fwd[k], bwd[k]);
    return BN_PASS;
}

BN_TEST(profiling_time_table_has_a_row_per_layer)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s time models/lenet.cfg --device cpu --batch 8 --iters 3", bn_test_cli());
    int rc = bn_test_run(cmd, out, sizeof out);
    CHECK_MSG(rc == 0, "exit %d: %s", rc, out);
    for (int k = 0; k < NUM_LAYERS; k++) {
        const char *row = strstr(out, layers[k]);
        CHECK_MSG(row != NULL, "no row for %s:\n%s", layers[k], out);
        char name[32], type[32];
        double f = -1, b = -1;
        CHECK_MSG(sscanf(row, "%31s %31s %lf %lf", name, type, &f, &b) == 4, "row: %.80s", row);
        CHECK_MSG(f >= 0 && b >= 0, "%s: forward %g, backward %g", name, f, b);
    }
    CHECK(strstr(out, "update") && strstr(out, "images/s"));
    snprintf(cmd, sizeof cmd, "%s time models/lenet.cfg --iters 0", bn_test_cli());
    CHECK(bn_test_run(cmd, out, sizeof out) == 2);
    CHECK(strstr(out, "--iters: 0 is outside") != NULL);
    return BN_PASS;
}
