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

/* A sum through the peers' memory asked for where NCCL's peer transport is switched off is one
 * line naming the variable and the reason, and a non-zero exit. */
BN_TEST(multigpu_peer_sum_asked_for_without_peer_access_says_why)
{
    SKIP_WITHOUT_TWO_GPUS();
    char args[4096];
    snprintf(args, sizeof args, LENET " " STEPS_50 " --gpus 2");
    int rc = train("BLOBNET_DIST_SUM=peers NCCL_P2P_DISABLE=1", args);
    CHECK_MSG(rc > 0 && rc < 128, "exited %d:\n%s", rc, out);
    CHECK_MSG(strstr(out, "BLOBNET_DIST_SUM=peers") && strstr(out, "NCCL_P2P_DISABLE"), "%s", out);
    return BN_PASS;
}
