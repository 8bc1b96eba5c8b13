/* Replaying the training step as a CUDA graph changes nothing but speed: with deterministic
 * algorithms, a run with graphs and one without log the same per-step losses and end in
 * byte-identical checkpoints, for LeNet and for a network that is a graph, with SGD and with
 * Adam and AdamW, whose replayed updates read their rates and bias corrections from the device,
 * for LeNet with the PReLU plugin, whose type says it may be captured, for a net with
 * dropout, which reads its step on the device, and for nets whose captured forward pass runs
 * their branches beside each other, on blobnet's kernels and on cuDNN's (FP32 and bf16). A buffer that another batch size grows after the capture is
 * kept for the graphs, which are not captured again. Every built-in type may be captured (a
 * plugin's type that may not is named once: test_plugin.c). Groups of steps, whose steps gather
 * the next one's batch a step ahead, train the eager run's bits too, with draws. */
#include <stdlib.h>

#include "core/device.h"
#include "core/registry.h"
#include "testing.h"

static char out[1 << 16];

static int train(const char *model, const char *limit, const char *extra, const char *save, const char *log)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s train %s --device gpu --deterministic --epochs 2 --train-limit %s "
             "--quiet --data %s --save %s --log %s --log-every 1 %s", bn_test_cli(), model, limit, bn_test_data_dir(),
             save, log, extra);
    return bn_test_run(cmd, out, sizeof out);
}

/* The logs without their timing columns (seconds, images/s). */
static int same_losses(const char *a, const char *b)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "cmp -s <(cut -d, -f1-7 '%s') <(cut -d, -f1-7 '%s')", a, b);
    char wrapped[2300];
    snprintf(wrapped, sizeof wrapped, "bash -c \"%s\"", cmd);
    return system(wrapped) == 0;
}

/* `flags`: the optimizer and schedule of both runs. */
static int compare_runs(const char *model, const char *limit, const char *flags)
{
    char graph[512], eager[512], glog[512], elog[512], cmd[1200], no_graph[512];
    snprintf(graph, sizeof graph, "%s/graph-%s.safetensors", bn_test_tmpdir(), limit);
    snprintf(eager, sizeof eager, "%s/eager-%s.safetensors", bn_test_tmpdir(), limit);
    snprintf(glog, sizeof glog, "%s/graph-%s.csv", bn_test_tmpdir(), limit);
    snprintf(elog, sizeof elog, "%s/eager-%s.csv", bn_test_tmpdir(), limit);
    snprintf(no_graph, sizeof no_graph, "%s --no-graph", flags);
    CHECK_MSG(train(model, limit, flags, graph, glog) == 0, "%s", out);
    CHECK_MSG(strstr(out, "warning") == NULL && strstr(out, "note:") == NULL, "the graph was not used: %s", out);
    CHECK_MSG(train(model, limit, no_graph, eager, elog) == 0, "%s", out);
    CHECK_MSG(same_losses(glog, elog), "%s, %s images, '%s': graph and eager runs logged different losses", model,
              limit, flags);
    snprintf(cmd, sizeof cmd, "cmp -s '%s' '%s'", graph, eager);
    CHECK_MSG(system(cmd) == 0, "%s, %s images, '%s': graph and eager runs ended with different weights or optimizer "
              "state", model, limit, flags);
    return BN_PASS;
}

BN_TEST(gpu_graph_replay_matches_eager_steps)
{
    if (bn_device_count() == 0) BN_SKIP_TEST("no CUDA device");
    if (!bn_test_data_dir()) BN_SKIP_TEST("BLOBNET_TEST_DATA not set");
    /* 3,200 images are 50 full batches, every one replayed after the first two; 3,000 end each
     * epoch with a partial batch of 56, eager in the first epoch, captured in the second and
     * replayed in the third. */
    CHECK(compare_runs("models/lenet.cfg", "3200", "") == BN_PASS);
    CHECK(compare_runs("models/lenet.cfg", "3000", "--epochs 3") == BN_PASS);
    /* A graph network: outputs read twice and three times, add, concat. */
    CHECK(compare_runs("models/resnet_mini.cfg", "3000", "") == BN_PASS);
    /* Branches that the captured forward pass runs beside each other (net_lanes.c): four joined
     * by a concat, and residual blocks whose projection runs beside their convolutions (2,500
     * images: the short batch of 4 replayed in the third epoch on lanes too). */
    CHECK(compare_runs("models/inception_fashion.cfg", "3200", "") == BN_PASS);
    CHECK(compare_runs("models/resnet_fashion.cfg", "2500", "--epochs 3") == BN_PASS);
    return BN_PASS;
}

/* A module of two branches on cuDNN's passes joined by a concat, then a convolution on cuDNN and
 * the classifier: captured, the branches run on lanes of their own with cuDNN bound to each. */
static int write_cudnn_branches(char *path, size_t size)
{
    snprintf(path, size, "%s/cudnn_branches.cfg", bn_test_tmpdir());
    FILE *f = fopen(path, "w");
    if (!f) return 0;
    const int ok = fprintf(f, "[input]\nchannels=1\nheight=28\nwidth=28\nstd=255\n"
                              "[conv2d]\nname=a\nfilters=8\nsize=3\npad=1\nengine=cudnn\n[relu]\nname=ar\n"
                              "[conv2d]\nname=b\ninput=input\nfilters=8\nsize=5\npad=2\nengine=cudnn\n"
                              "[relu]\nname=br\n[concat]\nname=ab\ninput=ar, br\n[maxpool]\nsize=2\n"
                              "[conv2d]\nfilters=16\nsize=3\npad=1\nengine=cudnn\n[relu]\n[maxpool]\nsize=2\n"
                              "[dense]\noutputs=10\n[softmax_ce]\n[train]\nlr=0.01\nmomentum=0.9\n") > 0;
    return fclose(f) == 0 && ok;
}

/* Branches whose convolutions run on cuDNN (every one under bf16) take lanes too: the captured
 * run trains the eager run's bits, in FP32 on cuDNN's passes and under bf16, and for the
 * inception-style suite model under bf16 (its four branches a module on four lanes). */
BN_TEST(gpu_graph_replay_matches_eager_steps_with_cudnn_passes_on_lanes)
{
    if (bn_device_count() == 0) BN_SKIP_TEST("no CUDA device");
    if (!bn_test_data_dir()) BN_SKIP_TEST("BLOBNET_TEST_DATA not set");
    char model[512];
    CHECK(write_cudnn_branches(model, sizeof model));
    CHECK(compare_runs(model, "3000", "--epochs 3") == BN_PASS);
    CHECK(compare_runs(model, "3000", "--epochs 3 --precision bf16") == BN_PASS);
    CHECK(compare_runs("models/inception_fashion.cfg", "3200", "--precision bf16") == BN_PASS);
    return BN_PASS;
}

/* Two epochs of `model` on `limit` images (and 500 test images) with the timeline's marks, a
 * checkpoint every `save` steps and a logged row every `log`, into the tests' folder as `name`
 * (.safetensors and .csv, into path[0] and path[1]); `env`: variables for the command, `flags`:
 * more options. */
static int train_marked_every(const char *env, const char *model, const char *limit, const char *flags,
                              const char *name, char path[2][512], int save, int log)
{
    char cmd[4096];
    snprintf(path[0], 512, "%s/%s.safetensors", bn_test_tmpdir(), name);
    snprintf(path[1], 512, "%s/%s.csv", bn_test_tmpdir(), name);
    snprintf(cmd, sizeof cmd, "%s BLOBNET_TIMELINE=1 %s train %s --device gpu --deterministic --epochs 2 "
             "--train-limit %s --test-limit 500 --quiet --data %s --save %s --checkpoint-every %d --log %s "
             "--log-every %d %s", env, bn_test_cli(), model, limit, bn_test_data_dir(), path[0], save, path[1], log,
             flags);
    CHECK_MSG(bn_test_run(cmd, out, sizeof out) == 0, "%s:\n%s", cmd, out);
    return BN_PASS;
}

/* The same with a checkpoint every 11 steps and a row every 10: groups of eight fit between them
 * (bn_trainer_group_size). */
static int train_marked(const char *env, const char *model, const char *limit, const char *flags, const char *name,
                        char path[2][512])
{
    return train_marked_every(env, model, limit, flags, name, path, 11, 10);
}

/* Whether two runs of train_marked_every logged the same losses and ended with the same bytes. */
static int same_runs(char a[2][512], char b[2][512])
{
    char cmd[2200];
    snprintf(cmd, sizeof cmd, "cmp -s '%s' '%s'", a[0], b[0]);
    return same_losses(a[1], b[1]) && system(cmd) == 0;
}

/* A run of `model` on `limit` images in groups of steps against one without graphs (tag: the
 * files' names), a checkpoint every `save` steps and a row every `log`. */
static int compare_grouped_every(const char *model, const char *limit, const char *tag, int save, int log)
{
    char path[2][2][512], name[256];
    for (int g = 0; g < 2; g++) {
        snprintf(name, sizeof name, "group%d-%s", g, tag);
        CHECK(train_marked_every("", model, limit, g ? "--no-graph" : "", name, path[g], save, log) == BN_PASS);
        const int grouped = strstr(out, "a group of steps captured") != NULL;
        CHECK_MSG(grouped == !g, "%s: %s", model, g ? "an eager run replayed a group" : "no group replayed");
    }
    CHECK_MSG(same_runs(path[0], path[1]), "%s, %s images: grouped and eager runs logged other losses or ended with "
              "other weights or state", model, limit);
    return BN_PASS;
}

/* The same with a checkpoint every 11 steps and a row every 10. */
static int compare_grouped(const char *model, const char *limit, const char *tag)
{
    return compare_grouped_every(model, limit, tag, 11, 10);
}

/* A small LeNet with a dropout layer, and `augment` (an [augment] section, or "") after its
 * [input], written as `name` into the tests' folder; path gets its path. 1 when written. */
static int write_dropout_net(const char *name, const char *augment, char *path, size_t size)
{
    snprintf(path, size, "%s/%s", bn_test_tmpdir(), name);
    FILE *f = fopen(path, "w");
    if (!f) return 0;
    const int ok = fprintf(f, "[input]\nchannels=1\nheight=28\nwidth=28\nstd=255\n%s[conv2d]\nfilters=8\nsize=5\n"
                              "[relu]\n[maxpool]\nsize=2\n[dense]\noutputs=64\n[relu]\n[dropout]\nrate=0.4\n[dense]\n"
                              "outputs=10\n[softmax_ce]\n[train]\nlr=0.01\nmomentum=0.9\n", augment) > 0;
    return fclose(f) == 0 && ok;
}

/* Eight full steps replay as one graph where the host reads nothing between them (trainer.c's
 * group_steps): the groups train the eager run's bits, with a logged row every 10 steps and a
 * checkpoint every 11 (never inside a group: the steps around them run one graph each), a short
 * last batch, and a net of branches on lanes. */
BN_TEST(gpu_graph_groups_of_steps_match_eager_steps)
{
    if (bn_device_count() == 0) BN_SKIP_TEST("no CUDA device");
    if (!bn_test_data_dir()) BN_SKIP_TEST("BLOBNET_TEST_DATA not set");
    CHECK(compare_grouped("models/lenet.cfg", "3200", "lenet3200") == BN_PASS);
    CHECK(compare_grouped("models/lenet.cfg", "3000", "lenet3000") == BN_PASS);
    CHECK(compare_grouped("models/inception_fashion.cfg", "2600", "inception") == BN_PASS);
    return BN_PASS;
}

/* A run whose host reads every 6 or 7 steps replays groups of four (bn_trainer_group_size: no
 * group of eight fits between its reads), and they train the eager run's bits too. */
BN_TEST(gpu_graph_groups_of_four_where_the_host_reads_every_few_steps)
{
    if (bn_device_count() == 0) BN_SKIP_TEST("no CUDA device");
    if (!bn_test_data_dir()) BN_SKIP_TEST("BLOBNET_TEST_DATA not set");
    CHECK(compare_grouped_every("models/lenet.cfg", "3200", "lenet-few", 7, 6) == BN_PASS);
    return BN_PASS;
}

/* Each step of a group but the last gathers the next one's batch beside its forward pass
 * (trainer.c): the batches it takes are moved by the draws of their own steps, and a dropout
 * layer draws with the step of the batch it trains on, so the groups train the eager run's bits
 * with both. */
BN_TEST(gpu_graph_groups_stage_batches_drawn_for_their_steps)
{
    if (bn_device_count() == 0) BN_SKIP_TEST("no CUDA device");
    if (!bn_test_data_dir()) BN_SKIP_TEST("BLOBNET_TEST_DATA not set");
    char model[512];
    CHECK(write_dropout_net("lenet_drawn.cfg", "[augment]\nshift=2\nflip=1\ncutout=6\n", model, sizeof model));
    CHECK(compare_grouped(model, "3200", "drawn") == BN_PASS);
    return BN_PASS;
}

/* A capture the driver refuses (the test hook BLOBNET_TEST_FAIL_CAPTURE=N fails the process's Nth
 * after its body ran) is said once, and the steps it held run kernel by kernel with their host side
 * undone first, so the run trains the eager run's bits: the first capture (a single step's: no
 * graph from then on), the second (the first group's: single steps replay from then on) and the
 * third (the first evaluation batch's, at the end of epoch 1: that evaluation and the next run
 * without a graph, the training steps replay in groups). */
BN_TEST(gpu_graph_a_refused_capture_runs_its_steps_eagerly)
{
    if (bn_device_count() == 0) BN_SKIP_TEST("no CUDA device");
    if (!bn_test_data_dir()) BN_SKIP_TEST("BLOBNET_TEST_DATA not set");
    char eager[2][512], refused[2][512], env[64], name[64];
    CHECK(train_marked("", "models/lenet.cfg", "3200", "--no-graph", "refused-eager", eager) == BN_PASS);
    for (int n = 1; n <= 3; n++) {
        snprintf(env, sizeof env, "BLOBNET_TEST_FAIL_CAPTURE=%d", n);
        snprintf(name, sizeof name, "refused-%d", n);
        CHECK(train_marked(env, "models/lenet.cfg", "3200", "", name, refused) == BN_PASS);
        const char *said = strstr(out, "cannot capture a step as a CUDA graph");
        CHECK_MSG(said && strstr(said + 1, "cannot capture") == NULL, "capture %d: not said once:\n%s", n, out);
        CHECK_MSG(strstr(out, "refused the graph (a test hook)") != NULL, "capture %d: %s", n, out);
        const int grouped = strstr(out, "a group of steps captured") != NULL;
        CHECK_MSG(grouped == (n == 3), "capture %d: groups %s", n, grouped ? "captured" : "never captured");
        CHECK_MSG(same_runs(refused, eager), "capture %d refused: other losses or weights than the eager run's", n);
    }
    return BN_PASS;
}

/* Dropout draws with the step it reads on the device: a replayed step drops what the eager step
 * drops, so both runs log the same losses and end with the same weights. */
BN_TEST(gpu_graph_replay_matches_eager_steps_with_dropout)
{
    if (bn_device_count() == 0) BN_SKIP_TEST("no CUDA device");
    if (!bn_test_data_dir()) BN_SKIP_TEST("BLOBNET_TEST_DATA not set");
    char model[512];
    CHECK(write_dropout_net("lenet_dropout.cfg", "", model, sizeof model));
    CHECK(compare_runs(model, "3000", "") == BN_PASS);
    return BN_PASS;
}

/* Every built-in layer type with GPU passes may be captured: none takes a model off the graph. */
BN_TEST(graph_every_built_in_type_is_graph_safe)
{
    CHECK(bn_layer_builtin_count() >= 14);
    for (int i = 0; i < bn_layer_builtin_count(); i++) {
        const bn_layer_ops *ops = bn_layer_type_at(i);
        CHECK_MSG(ops->graph_safe, "layer type %s leaves graph_safe unset", ops->type);
    }
    return BN_PASS;
}

/* Adam's bias corrections change every step, so a replay that took the captured step's would
 * drift from the eager run at once; the warmup and the one-cycle schedule change the rate
 * every step too. The partial batch that ends each epoch of 3,000 images runs eagerly between
 * replays and must move the device's cursor like them. */
BN_TEST(gpu_graph_replay_matches_eager_steps_with_adam)
{
    if (bn_device_count() == 0) BN_SKIP_TEST("no CUDA device");
    if (!bn_test_data_dir()) BN_SKIP_TEST("BLOBNET_TEST_DATA not set");
    CHECK(compare_runs("models/lenet.cfg", "3000", "--optimizer adam --lr 0.001 --warmup 20") == BN_PASS);
    CHECK(compare_runs("models/lenet.cfg", "3200", "--optimizer adamw --lr 0.003 --lr-policy onecycle") == BN_PASS);
    CHECK(compare_runs("models/resnet_mini.cfg", "3000", "--optimizer adamw --lr 0.003 --lr-policy onecycle") ==
          BN_PASS);
    return BN_PASS;
}

BN_TEST(gpu_graph_replay_matches_eager_steps_with_a_plugin)
{
    if (bn_device_count() == 0) BN_SKIP_TEST("no CUDA device");
    if (!bn_test_data_dir()) BN_SKIP_TEST("BLOBNET_TEST_DATA not set");
    const char *dir = getenv("BLOBNET_PLUGINS");
    char flags[600];
    snprintf(flags, sizeof flags, "--plugin %s/prelu.so", dir && *dir ? dir : "build/plugins");
    CHECK(compare_runs("models/lenet_prelu.cfg", "3000", flags) == BN_PASS);
    /* A plugin with a buffer: the running mean squares are saved with the weights, so the
     * checkpoints compared hold them too. */
    snprintf(flags, sizeof flags, "--plugin %s/batchrms.so", dir && *dir ? dir : "build/plugins");
    CHECK(compare_runs("models/lenet_batchrms.cfg", "3000", flags) == BN_PASS);
    return BN_PASS;
}

/* A buffer that a larger one replaces while a step graph lives is kept until the last graph
 * goes (bn_device_retire): freed at once without a graph, held with one, freed with it. */
BN_TEST(gpu_device_retire_keeps_a_buffer_while_a_graph_lives)
{
    if (bn_device_count() == 0) BN_SKIP_TEST("no CUDA device");
    bn_ctx *ctx;
    CHECK_OK(bn_ctx_open(0, &ctx));
    const size_t mib = (size_t)1 << 20;
    size_t base, now, peak;
    bn_device_memory(&base, &peak);
    void *a, *b;
    CHECK_OK(bn_device_alloc(&a, mib));
    bn_device_retire(a);
    bn_device_memory(&now, &peak);
    CHECK_MSG(now == base, "without a graph a retired buffer is freed at once: %zu bytes held, %zu before", now, base);
    const unsigned generation = ctx->buffer_generation;
    bn_device_graphs(1);
    CHECK_OK(bn_device_alloc(&b, 2 * mib));
    bn_device_retire(b);
    bn_device_memory(&now, &peak);
    CHECK_MSG(now == base + 2 * mib, "with a graph a retired buffer is kept: %zu bytes held, %zu expected", now,
              base + 2 * mib);
    CHECK_MSG(ctx->buffer_generation == generation, "a retired buffer moved the buffer generation on");
    bn_device_graphs(-1);
    bn_device_memory(&now, &peak);
    CHECK_MSG(now == base, "the last graph's end frees the retired buffers: %zu bytes held, %zu before", now, base);
    return BN_PASS;
}

/* A batch of another size that grows a convolution's scratch or partial sums after the steps
 * were captured (LeNet at 256: the 16-image last batch of each epoch and of the test set needs
 * scratch that 256 does not) retires the old buffers instead of freeing them, so the graphs are
 * captured once and replay on them: the timeline shows one capture of a group of steps (on the
 * whole of MNIST the code before captured a second in epoch 2), in the default kernel choice and
 * in the deterministic one, and the deterministic run logs the eager run's losses and ends with
 * its checkpoint. */
BN_TEST(gpu_graph_is_captured_once_when_another_batch_size_grows_a_buffer)
{
    if (bn_device_count() == 0) BN_SKIP_TEST("no CUDA device");
    if (!bn_test_data_dir()) BN_SKIP_TEST("BLOBNET_TEST_DATA not set");
    static const char *const flags[] = {"", "--deterministic", "--deterministic --no-graph"};
    char path[3][2][512], cmd[4096];
    for (int r = 0; r < 3; r++) {
        snprintf(path[r][0], sizeof path[r][0], "%s/grow%d.safetensors", bn_test_tmpdir(), r);
        snprintf(path[r][1], sizeof path[r][1], "%s/grow%d.csv", bn_test_tmpdir(), r);
        snprintf(cmd, sizeof cmd, "BLOBNET_TIMELINE=1 %s train models/lenet.cfg --device gpu --epochs 3 --batch 256 "
                 "--train-limit 2832 --test-limit 272 --quiet --data %s --save %s --log %s --log-every 10 %s",
                 bn_test_cli(), bn_test_data_dir(), path[r][0], path[r][1], flags[r]);
        CHECK_MSG(bn_test_run(cmd, out, sizeof out) == 0, "%s:\n%s", cmd, out);
        int captures = 0;
        for (const char *p = out; (p = strstr(p, "a group of steps captured")) != NULL; p++) captures++;
        const int want = r < 2 ? 1 : 0;
        CHECK_MSG(captures == want, "'%s': %d captures of a group of steps, %d expected:\n%s", flags[r], captures, want,
                  out);
    }
    CHECK_MSG(same_losses(path[1][1], path[2][1]), "graphed and eager runs logged other losses");
    snprintf(cmd, sizeof cmd, "cmp -s '%s' '%s'", path[1][0], path[2][0]);
    CHECK_MSG(system(cmd) == 0, "graphed and eager runs ended with other weights or state");
    return BN_PASS;
}
