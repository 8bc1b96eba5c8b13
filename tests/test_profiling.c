/* Profiling: the NVTX ranges a training run opens, recorded by an injection library (the
 * path <layer>/forward is a range named after the layer holding one named "forward"), and
 * the `blobnet time` table. */
#include <stdlib.h>
#include <time.h>

#include "check/timing.h"
#include "core/device.h"
#include "core/registry.h"
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

/* A layer whose passes take the host a millisecond before one small launch each: on the GPU, a
 * zeroing of its output (forward) or input gradient (backward); on the CPU, the same zeros. */
static void host_millisecond(void)
{
    nanosleep(&(struct timespec){.tv_nsec = 1000000L}, NULL);
}

static bn_status slow_setup(bn_layer *l, bn_shape in, bn_shape *shape)
{
    (void)l;
    *shape = in;
    return BN_OK;
}

static bn_status slow_forward_cpu(bn_layer *l, const bn_pass *p)
{
    (void)p;
    BN_HOST_WR(y, l->out);
    memset(y, 0, bn_blob_count(l->out) * sizeof *y);
    return BN_OK;
}

static bn_status slow_backward_cpu(bn_layer *l, const bn_pass *p)
{
    (void)p;
    if (!l->in_grad) return BN_OK;
    BN_HOST_WR(dx, l->in_grad);
    memset(dx, 0, bn_blob_count(l->in_grad) * sizeof *dx);
    return BN_OK;
}

static bn_status slow_forward_gpu(bn_layer *l, const bn_pass *p)
{
    (void)p;
    host_millisecond();
    BN_DEV_WR(y, l->out);
    return bn_device_zero(y, bn_blob_count(l->out) * sizeof *y);
}

static bn_status slow_backward_gpu(bn_layer *l, const bn_pass *p)
{
    (void)p;
    host_millisecond();
    if (!l->in_grad) return BN_OK;
    BN_DEV_WR(dx, l->in_grad);
    return bn_device_zero(dx, bn_blob_count(l->in_grad) * sizeof *dx);
}

static const bn_layer_ops slow_host_ops = {
    .type = "test_slow_host",
    .help = "zeros, launched after a millisecond on the host; test only",
    .kind = BN_NVTX_LAYER_OTHER,
    .setup = slow_setup,
    .forward_cpu = slow_forward_cpu,
    .backward_cpu = slow_backward_cpu,
    .forward_gpu = slow_forward_gpu,
    .backward_gpu = slow_backward_gpu,
};

/* `blobnet time` on the GPU reads the device's time of each pass: a layer that launches a zeroing
 * of 1 KiB after a millisecond on the host must read well under that millisecond. */
BN_TEST(gpu_time_reads_the_device_not_the_host)
{
    if (bn_device_count() == 0) BN_SKIP_TEST("no CUDA device");
    if (!bn_find_layer(slow_host_ops.type)) CHECK_OK(bn_register_layer(&slow_host_ops));
    bn_net *net = NULL;
    CHECK_OK(bn_net_from_text("[input]\nchannels=1\nheight=4\nwidth=4\n[dense]\noutputs=16\n[test_slow_host]\n"
                              "[dense]\noutputs=3\n[softmax_ce]\n",
                              "slow-host", &net));
    bn_ctx *ctx = NULL;
    bn_status s = bn_ctx_open(0, &ctx);
    if (s == BN_OK) s = bn_net_setup(net, 16, ctx, 0, 7);
    bn_time_report r = {0};
    if (s == BN_OK) s = bn_time_net(net, NULL, 2, 4, &r);
    bn_net_free(net);
    CHECK_OK(s);
    const bn_layer_time slow = r.layers[1];
    const double step = r.step_ms;
    const int held = r.held;
    bn_time_report_free(&r);
    /* The first step uploads the batch and waits for it; it runs without the hold, so the hold
     * stays for the rest. */
    CHECK_MSG(held, "the steps ran without the hold");
    CHECK_MSG(slow.forward_ms > 0.0 && slow.forward_ms < 0.2, "forward %g ms", slow.forward_ms);
    CHECK_MSG(slow.backward_ms > 0.0 && slow.backward_ms < 0.2, "backward %g ms", slow.backward_ms);
    /* The step, timed around the whole, is the device's too: not the host's two milliseconds. */
    CHECK_MSG(step > 0.0 && step < 1.0, "step %g ms", step);
    return BN_PASS;
}
