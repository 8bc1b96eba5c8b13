/* test_multigpu_peers.c - the gradients summed through the peers' memory (dist/peer_sum.h) on
 * two GPUs and on four where the machine has them: they train what NCCL's all-reduce trains, the
 * ranks stay bit-identical, and asking for that way where it cannot be taken is a one-line error.
 * They need NCCL, two devices and real MNIST ($BLOBNET_TEST_DATA), and skip with the reason
 * otherwise. */
#include "testing.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/device.h"
#include "file_testing.h"
#include "multigpu_testing.h"

static char out[1 << 16];

/* A training run through the CLI; its output lands in out. */
static int train(const char *env, const char *args)
{
    return mg_train(env, args, out, sizeof out);
}

/* The gradients summed through the peers' memory (BLOBNET_DIST_SUM=peers, an error where that way
 * cannot be set up, so a run that ends well took it) train what NCCL's all-reduce trains, up to the
 * order of the sums, and leave the ranks bit-identical. LeNet's slab is 431090 floats, so its
 * buckets start on and off 16-byte boundaries and both of the kernel's paths run.
 *
 * On two GPUs both ways add the same two halves (each scaled by 1/2, exactly), and 50 steps end at
 * the same bits (measured on two H200s). On four, NCCL's ring adds a share's four parts starting
 * at another rank than rank 0, and LeNet's first steps amplify that last bit as they amplify a
 * 1-GPU run's against a 2-GPU one (test_multigpu.c): 50 steps measured 5.4e-2 of ip1's largest
 * bias apart. Five steps keep the comparison to the sums: a sum that missed a rank's part or read a
 * stale one moves a weight by far more than WEIGHT_TOL there. */
static int peers_against_nccl(int gpus, const char *steps)
{
    char dir[512], env[700], first[600], last[600], peers[512], nccl[512], logp[512], logn[512], args[4096];
    ft_path(dir, sizeof dir, "peer-weights-%d", gpus);
    ft_path(peers, sizeof peers, "peers-%d.safetensors", gpus);
    ft_path(nccl, sizeof nccl, "nccl-%d.safetensors", gpus);
    ft_path(logp, sizeof logp, "peers-%d.csv", gpus);
    ft_path(logn, sizeof logn, "nccl-%d.csv", gpus);
    snprintf(first, sizeof first, "%s/rank0.safetensors", dir);
    snprintf(last, sizeof last, "%s/rank%d.safetensors", dir, gpus - 1);
    remove(logp);
    remove(logn);
    snprintf(args, sizeof args, "rm -rf '%s' && mkdir -p '%s'", dir, dir);
    CHECK(system(args) == 0);
    snprintf(env, sizeof env, "BLOBNET_DIST_SUM=peers BLOBNET_RANK_WEIGHTS=%s", dir);
    snprintf(args, sizeof args, LENET " %s --gpus %d --save %s --log %s", steps, gpus, peers, logp);
    CHECK_MSG(train(env, args) == 0, "%s", out);
    CHECK_MSG(mg_files_equal(first, last), "%d GPUs, peers: rank 0's and rank %d's final weights differ", gpus,
              gpus - 1);
    snprintf(args, sizeof args, LENET " %s --gpus %d --save %s --log %s", steps, gpus, nccl, logn);
    CHECK_MSG(train("BLOBNET_DIST_SUM=nccl", args) == 0, "%s", out);
    char what[64];
    snprintf(what, sizeof what, "%d GPUs, peers against NCCL", gpus);
    CHECK_PASS(mg_check_same_training(what, peers, nccl, logp, logn));
    return BN_PASS;
}

BN_TEST(multigpu_peer_sum_trains_what_nccl_trains)
{
    SKIP_WITHOUT_TWO_GPUS();
    CHECK_PASS(peers_against_nccl(2, STEPS_50));
    if (bn_device_count() >= 4) CHECK_PASS(peers_against_nccl(4, STEPS_5));
    return BN_PASS;
}

/* Fails unless LeNet on two GPUs for `steps`, with env, is refused: a non-zero exit below 128 whose
 * output names `needle` and, where not NULL, `also`. */
static int lenet_refused(const char *env, const char *steps, const char *needle, const char *also)
{
    char args[4096];
    snprintf(args, sizeof args, LENET " %s --gpus 2", steps);
    int rc = train(env, args);
    CHECK_MSG(rc > 0 && rc < 128, "exited %d:\n%s", rc, out);
    CHECK_MSG(strstr(out, needle) && (!also || strstr(out, also)), "%s", out);
    return BN_PASS;
}

/* A sum through the peers' memory asked for where NCCL's peer transport is switched off is one
 * line naming the variable and the reason, and a non-zero exit. */
BN_TEST(multigpu_peer_sum_asked_for_without_peer_access_says_why)
{
    SKIP_WITHOUT_TWO_GPUS();
    return lenet_refused("BLOBNET_DIST_SUM=peers NCCL_P2P_DISABLE=1", STEPS_50, "BLOBNET_DIST_SUM=peers",
                         "NCCL_P2P_DISABLE");
}

/* How many of the trace files in dir name `kernel`; -1 when they cannot be read. */
static int traces_naming(const char *dir, const char *kernel)
{
    char cmd[2048], got[64];
    snprintf(cmd, sizeof cmd, "cat '%s'/*.csv >/dev/null && grep -lE '%s' '%s'/*.csv | wc -l", dir, kernel, dir);
    if (bn_test_run(cmd, got, sizeof got) != 0) return -1;
    return atoi(got);
}

/* A small MLP whose first layer holds 5 x 785 = 3925 floats and its second 60: with a bucket a
 * layer, buckets of an odd count, the second starting at an odd offset. Its input and layers, and
 * its [train] section under SGD with momentum and under Adam. */
#define ODD_MLP_INPUT "[input]\nchannels = 1\nheight = 28\nwidth = 28\n"
#define ODD_MLP_LAYERS                                             \
    "[dense]\nname = fc1\noutputs = 5\n[relu]\nname = relu1\n" \
    "[dense]\nname = fc2\noutputs = 10\n[softmax_ce]\nname = loss\n"
static const char odd_mlp[] =
    ODD_MLP_INPUT "[train]\nbatch = 64\nlr = 0.05\nmomentum = 0.9\nseed = 1\n" ODD_MLP_LAYERS;

/* The same MLP trained by Adam with weight decay: two state slabs and per-step bias corrections in
 * the update that a pushed sum applies. */
static const char odd_mlp_adam[] = ODD_MLP_INPUT
    "[train]\nbatch = 64\noptimizer = adam\nlr = 0.002\nweight_decay = 1e-4\nlr_policy = cosine\nseed = 1\n"
    ODD_MLP_LAYERS;

/* Buckets pushed into the peers' landing areas (BLOBNET_DIST_PUSH) add the same numbers in the same
 * order as the two meetings do, and the update a pushed sum applies as it goes is the update
 * kernels' arithmetic: a model on `gpus` GPUs for 3 epochs of 47 steps (graphs replayed, the halves
 * of the landing area taken in turn) trains the same bits with no bucket pushed, as the default
 * has it, with every bucket pushed, and with every bucket pushed but its update a pass of its own
 * (BLOBNET_DIST_PUSH_UPDATE=0). With the kernel tracer built, the ranks' traces
 * show that each run summed the ways it was asked to (`pushed` and `met`: whether the default
 * pushes some buckets and meets others).
 *
 * Every run takes --deterministic, so that no kernel is timed: a shape the kernel cache lacks is
 * timed on each rank in the first run that meets it (the MLP's dense layers), and a close race can
 * pick other kernels than the cache then keeps for later runs, whose products differ in the last
 * bits. On four H200s just started, the MLP's first run (no bucket pushed) differed from each of
 * eight later ones, pushed or not; with the cache filled, met, pushed and NCCL runs agreed. */
static int pushed_against_met(int gpus, const char *what, const char *model, const char *env0, int pushed, int met)
{
    static const char *const limits[] = {"0", "", "1073741824", "1073741824 BLOBNET_DIST_PUSH_UPDATE=0"};
    const int pushes[] = {0, pushed, 1, 1}, meets[] = {1, met, 0, 0};
    const char *tracer = getenv("BLOBNET_KERNEL_TRACER");
    char path[4][512], dir[512], env[1400], args[2048];
    for (int i = 0; i < 4; i++) {
        ft_path(path[i], sizeof path[i], "push-%s-%d-%d.safetensors", what, gpus, i);
        ft_path(dir, sizeof dir, "push-trace-%s-%d-%d", what, gpus, i);
        snprintf(args, sizeof args, "rm -rf '%s' && mkdir -p '%s'", dir, dir);
        CHECK(system(args) == 0);
        int n = snprintf(env, sizeof env, "%s BLOBNET_DIST_SUM=peers BLOBNET_DIST_PUSH=%s", env0, limits[i]);
        if (tracer && *tracer)
            snprintf(env + n, sizeof env - (size_t)n, " CUDA_INJECTION64_PATH=%s BLOBNET_KERNEL_TRACE=%s/%%p.csv",
                     tracer, dir);
        snprintf(args, sizeof args, "%s --quiet --deterministic --train-limit 3000 --epochs 3 --gpus %d --save %s",
                 model, gpus, path[i]);
        CHECK_MSG(train(env, args) == 0, "%s, BLOBNET_DIST_PUSH=%s:\n%s", what, limits[i], out);
        if (!tracer || !*tracer) continue;
        int p = traces_naming(dir, "push_lines_kernel"), m = traces_naming(dir, "peer_sum_kernel");
        CHECK_MSG(p == (pushes[i] ? gpus : 0) && m == (meets[i] ? gpus : 0),
                  "%s, BLOBNET_DIST_PUSH=%s on %d GPUs: %d ranks' traces show pushed sums and %d met ones", what,
                  limits[i], gpus, p, m);
    }
    CHECK_MSG(mg_files_equal(path[0], path[1]), "%s on %d GPUs: the default's pushed buckets trained other bits", what,
              gpus);
    CHECK_MSG(mg_files_equal(path[0], path[2]), "%s on %d GPUs: every bucket pushed trained other bits", what, gpus);
    CHECK_MSG(mg_files_equal(path[0], path[3]),
              "%s on %d GPUs: every bucket pushed, updated by a pass of its own, trained other bits", what, gpus);
    return BN_PASS;
}

/* LeNet: the default pushes its last bucket (conv1 and conv2, 102 KB) and meets over ip1's 1.6 MB;
 * the MLP above, a bucket a layer: the default pushes both, and only with every bucket pushed or
 * none does it differ; the MLP again under Adam; LeNet again in BF16 (--precision bf16-strict). */
BN_TEST(multigpu_pushed_buckets_train_the_bits_of_met_ones)
{
    SKIP_WITHOUT_TWO_GPUS();
    static const char lenet[] = "models/lenet.cfg --batch 64 --seed 1";
    char mlp[512];
    ft_path(mlp, sizeof mlp, "odd_mlp.cfg");
    CHECK(ft_write_text(mlp, odd_mlp) == 0);
    CHECK_PASS(pushed_against_met(2, "lenet", lenet, "", 1, 1));
    CHECK_PASS(pushed_against_met(2, "mlp", mlp, "BLOBNET_DIST_BUCKET=0", 1, 0));
    ft_path(mlp, sizeof mlp, "odd_mlp_adam.cfg");
    CHECK(ft_write_text(mlp, odd_mlp_adam) == 0);
    CHECK_PASS(pushed_against_met(2, "mlp_adam", mlp, "BLOBNET_DIST_BUCKET=0", 1, 0));
    /* Under bf16 the update also writes each weight's BF16 copy, the pushed sum's too. */
    CHECK_PASS(pushed_against_met(2, "lenet_bf16", "models/lenet.cfg --batch 64 --seed 1 --precision bf16-strict", "",
                                  1, 1));
    if (bn_device_count() >= 4) CHECK_PASS(pushed_against_met(4, "lenet", lenet, "", 1, 1));
    return BN_PASS;
}

/* BLOBNET_DIST_PUSH that is not a size is one line naming it, and a non-zero exit. */
BN_TEST(multigpu_push_limit_that_is_not_a_size_says_so)
{
    SKIP_WITHOUT_TWO_GPUS();
    return lenet_refused("BLOBNET_DIST_PUSH=lots", STEPS_5, "BLOBNET_DIST_PUSH", NULL);
}

/* BLOBNET_DIST_PUSH_UPDATE other than 0 or 1 is one line naming it, and a non-zero exit. */
BN_TEST(multigpu_push_update_switch_that_is_not_0_or_1_says_so)
{
    SKIP_WITHOUT_TWO_GPUS();
    return lenet_refused("BLOBNET_DIST_PUSH_UPDATE=maybe", STEPS_5, "BLOBNET_DIST_PUSH_UPDATE", NULL);
}
