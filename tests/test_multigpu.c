/* test_multigpu.c - data-parallel training on two GPUs through the CLI (docs/multi-gpu.md): the
 * ranks stay bit-identical, two GPUs train what one GPU trains at the same global batch, replayed
 * steps with branches on lanes end where eager ones do, a
 * checkpoint moves between 2 and 1 GPUs both ways, a killed rank or a SIGINT ends the whole run,
 * the TCP rendezvous works for ranks started by hand (over NVLink and over NCCL's socket path, as
 * between machines: bit-identical, and ended by the deadline when a peer dies), and a machine or
 * build that cannot train
 * on several GPUs says so in one line. All but the last need NCCL, two devices and real MNIST
 * ($BLOBNET_TEST_DATA); they skip with the reason otherwise. */
#include "testing.h"

#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/device.h"
#include "core/net.h"
#include "dist/dist.h"
#include "file_testing.h"
#include "io/safetensors.h"
#include "multigpu_testing.h"
#include "train/checkpoint.h"
#include "train/optimizer.h"

static char out[1 << 16];

static void sleep_ms(long ms)
{
    nanosleep(&(struct timespec){.tv_sec = ms / 1000, .tv_nsec = ms % 1000 * 1000000L}, NULL);
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* A training run through the CLI; its output lands in out. */
static int train(const char *env, const char *args)
{
    return mg_train(env, args, out, sizeof out);
}

/* What wait_exit_within adds to a signal that ended a child: above every exit code, so that a
 * launcher that exits 137 (passing on a rank killed by signal 9) is not taken for one killed. */
#define BY_SIGNAL 1000

/* The exit code, or BY_SIGNAL + the signal, of child pid once it ends within timeout_s; -1 when it
 * is still running then (it is killed and reaped so that nothing is left behind). */
static int wait_exit_within(pid_t pid, double timeout_s)
{
    double end = now_s() + timeout_s;
    for (;;) {
        int st;
        pid_t got = waitpid(pid, &st, WNOHANG);
        if (got == pid) return WIFEXITED(st) ? WEXITSTATUS(st) : BY_SIGNAL + WTERMSIG(st);
        if (got < 0) return -2;
        if (now_s() > end) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            return -1;
        }
        sleep_ms(20);
    }
}

/* wait_exit_within, but a child still running at the timeout first has its threads' stacks
 * printed (gdb, where installed; else the kernel's wait channel), to show where it waits. */
static int wait_exit_or_show(pid_t pid, double timeout_s)
{
    double end = now_s() + timeout_s;
    int st;
    while (now_s() < end) {
        pid_t got = waitpid(pid, &st, WNOHANG);
        if (got == pid) return WIFEXITED(st) ? WEXITSTATUS(st) : BY_SIGNAL + WTERMSIG(st);
        if (got < 0) return -2;
        sleep_ms(20);
    }
    char cmd[256];
    snprintf(cmd, sizeof cmd, "(gdb -batch -p %d -ex 'thread apply all bt' 2>/dev/null || cat /proc/%d/wchan) "
             "| grep -E '^#|Thread|^[a-z_]+$' | head -60", (int)pid, (int)pid);
    printf("    pid %d is still running after %.0f s; where its threads wait:\n", (int)pid, timeout_s);
    fflush(stdout);
    if (system(cmd) != 0) printf("    (no stack could be read)\n");
    return wait_exit_within(pid, 0);
}

/* The lines of a text file, or -1 when it cannot be read. */
static int count_lines(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    int n = 0;
    for (int c; (c = fgetc(f)) != EOF;) n += c == '\n';
    fclose(f);
    return n;
}

/* Waits up to timeout_s until the metrics log at path has more than `lines` lines: training has
 * gone that many steps (with --log-every 1, after the header). 1 when it did. */
static int wait_for_steps(const char *path, int lines, double timeout_s)
{
    for (double end = now_s() + timeout_s; now_s() < end; sleep_ms(20))
        if (count_lines(path) > lines) return 1;
    return 0;
}

/* The pids of parent's children (at most cap), from /proc/<pid>/stat's ppid field: every task
 * is scanned, so that this works where the kernel has no /proc/<pid>/task/<tid>/children. */
static int children_of(pid_t parent, pid_t *kids, int cap)
{
    DIR *d = opendir("/proc");
    if (!d) return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) && n < cap;) {
        char *end;
        long pid = strtol(e->d_name, &end, 10);
        if (*end || pid <= 0) continue;
        char path[64], text[512];
        snprintf(path, sizeof path, "/proc/%ld/stat", pid);
        if (ft_read_text(path, text, sizeof text) != 0) continue;
        /* pid (comm) state ppid ...: comm may hold spaces and parentheses, so read after the last ')'. */
        const char *close = strrchr(text, ')');
        char state;
        long ppid;
        if (close && sscanf(close + 1, " %c %ld", &state, &ppid) == 2 && ppid == parent) kids[n++] = (pid_t)pid;
    }
    closedir(d);
    return n;
}

/* Waits up to timeout_s for parent to have `want` children; their count (at most cap). */
static int wait_for_children(pid_t parent, pid_t *kids, int cap, int want, double timeout_s)
{
    int n = 0;
    for (double end = now_s() + timeout_s; now_s() < end; sleep_ms(20))
        if ((n = children_of(parent, kids, cap)) >= want) break;
    return n;
}

/* 1 when process pid is gone (or a zombie nobody will reap, which holds no GPU) within timeout_s. */
static int gone_within(pid_t pid, double timeout_s)
{
    for (double end = now_s() + timeout_s; now_s() < end; sleep_ms(20)) {
        if (kill(pid, 0) != 0 && errno == ESRCH) return 1;
        char path[64], text[512];
        snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
        const char *close = ft_read_text(path, text, sizeof text) == 0 ? strrchr(text, ')') : NULL;
        if (close && close[1] == ' ' && close[2] == 'Z') return 1;
    }
    return 0;
}

/* A free TCP port on 127.0.0.1 (bound, read and closed: the rendezvous reuses it at once). */
static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    int port = -1;
    if (bind(fd, (struct sockaddr *)&a, sizeof a) == 0 && getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    close(fd);
    return port;
}

/* The initial weights of LeNet with seed 1, as every run here starts from them. */
static int initial_weights(const char *path)
{
    char args[4096];
    snprintf(args, sizeof args, LENET " --device gpu --epochs 0 --save %s", path);
    CHECK_MSG(train("", args) == 0, "%s", out);
    return BN_PASS;
}

/* ---- the tests ---- */

/* After 50 steps on 2 GPUs both ranks hold the same weights, bit for bit, and training moved them. */
BN_TEST(multigpu_ranks_are_bit_identical_after_50_steps)
{
    SKIP_WITHOUT_TWO_GPUS();
    char dir[512], env[600], r0[600], r1[600], init[512], args[4096];
    ft_path(dir, sizeof dir, "rank-weights");
    snprintf(env, sizeof env, "BLOBNET_RANK_WEIGHTS=%s", dir);
    snprintf(r0, sizeof r0, "%s/rank0.safetensors", dir);
    snprintf(r1, sizeof r1, "%s/rank1.safetensors", dir);
    ft_path(init, sizeof init, "init.safetensors");
    snprintf(args, sizeof args, "rm -rf '%s' && mkdir -p '%s'", dir, dir);
    CHECK(system(args) == 0);
    snprintf(args, sizeof args, LENET " " STEPS_50 " --gpus 2");
    CHECK_MSG(train(env, args) == 0, "%s", out);
    CHECK_MSG(access(r0, F_OK) == 0 && access(r1, F_OK) == 0, "BLOBNET_RANK_WEIGHTS wrote no %s or %s:\n%s", r0, r1,
              out);
    CHECK_MSG(mg_files_equal(r0, r1), "rank 0's and rank 1's final weights differ");
    mg_weight_diff d;
    CHECK(mg_diff_weights(r0, r1, &d) == 0);
    CHECK_MSG(d.worst == 0, "%s differs by %.3g of its largest weight", d.where, d.worst);
    CHECK_PASS(initial_weights(init));
    CHECK_PASS(mg_check_trained(r0, init));
    printf("    50 steps on 2 GPUs: %d parameter tensors equal bit for bit on both ranks, all trained\n", d.tensors);
    return BN_PASS;
}

/* 5 steps at global batch 64 on 2 GPUs (32 a rank) train what 5 steps at batch 64 on one GPU do,
 * up to the order of the sums. Not 50: the 1e-6 between a 2-GPU and a 1-GPU run grows in LeNet's
 * first steps (resume_across below), and whether it reaches 1e-4 by step 50 depends on the last
 * bits of the kernels' sums: it read 1.05e-6 in version 60 and 5.4e-2 once the tensor-core forward
 * pass added its warps' sums in rounds (version 61). A sum that missed a rank's part or read a
 * stale one moves a weight by far more than WEIGHT_TOL within 5 steps. */
BN_TEST(multigpu_two_gpus_train_what_one_gpu_trains)
{
    SKIP_WITHOUT_TWO_GPUS();
    char one[512], two[512], log1[512], log2[512], init[512], args[4096];
    ft_path(one, sizeof one, "one-gpu.safetensors");
    ft_path(two, sizeof two, "two-gpus.safetensors");
    ft_path(log1, sizeof log1, "one-gpu.csv");
    ft_path(log2, sizeof log2, "two-gpus.csv");
    ft_path(init, sizeof init, "init.safetensors");
    remove(log1);
    remove(log2);
    snprintf(args, sizeof args, LENET " " STEPS_5 " --device gpu --save %s --log %s", one, log1);
    CHECK_MSG(train("", args) == 0, "%s", out);
    snprintf(args, sizeof args, LENET " " STEPS_5 " --gpus 2 --save %s --log %s", two, log2);
    CHECK_MSG(train("", args) == 0, "%s", out);
    CHECK_PASS(mg_check_same_training("2 GPUs against 1, 5 steps", one, two, log1, log2));
    CHECK_PASS(initial_weights(init));
    CHECK_PASS(mg_check_trained(two, init));
    return BN_PASS;
}

/* On 2 GPUs, replayed steps that run a network's branches on lanes, each bucket's all-reduce after
 * every lane (dist/comm.cu), end at the weights and optimizer state of eager steps (a chain), byte
 * for byte: an all-reduce that left before a lane's gradients were written would sum stale ones.
 * A first run times the kernel choices into the cache, so that both runs read the same ones. */
BN_TEST(multigpu_branches_on_lanes_train_as_the_chain)
{
    SKIP_WITHOUT_TWO_GPUS();
    static const char *const models[] = {"models/inception_fashion.cfg", "models/resnet_fashion.cfg"};
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) {
        char path[2][512], args[4096];
        for (int eager = -1; eager < 2; eager++) {
            ft_path(path[eager > 0], sizeof path[0], "lanes-%zu-%d.safetensors", i, eager > 0);
            snprintf(args, sizeof args, "%s --batch 64 --seed 1 --quiet " STEPS_50 " --gpus 2 --save %s%s", models[i],
                     path[eager > 0], eager > 0 ? " --no-graph" : "");
            CHECK_MSG(train("", args) == 0, "%s", out);
            CHECK_MSG(eager > 0 || strstr(out, "note:") == NULL, "%s: the graph was not used: %s", models[i], out);
        }
        CHECK_MSG(mg_files_equal(path[0], path[1]), "%s: replayed and eager steps differ", models[i]);
    }
    return BN_PASS;
}

/* A run of 2 x 25 steps (1600 images an epoch) saved after its first epoch on `first` resumes for
 * its second epoch on 1 GPU and on 2 and ends at the same weights both ways, up to the order of
 * the sums. The reference is the same checkpoint resumed elsewhere, not a run that never stopped
 * on other GPUs: in these first steps at lr 0.01 LeNet amplifies the 1e-6 that separates a 2-GPU
 * epoch from a 1-GPU epoch to 6e-3 of a bias within 25 steps (measured on 2 H200s), while a resume
 * on one GPU is exact to the bit (tests/test_resume.c) and resumes from one file on 1 and 2 GPUs
 * agree to 2e-7. A resume that lost the optimizer's state or the place in the data would differ by
 * far more than WEIGHT_TOL. */
static int resume_across(const char *first, const char *tag)
{
    char part[512], on1[512], on2[512], args[4096], what[128];
    ft_path(part, sizeof part, "resume-part-%s.safetensors", tag);
    ft_path(on1, sizeof on1, "resume-on-1-%s.safetensors", tag);
    ft_path(on2, sizeof on2, "resume-on-2-%s.safetensors", tag);
    snprintf(args, sizeof args, LENET " --train-limit 1600 --epochs 1 %s --save %s", first, part);
    CHECK_MSG(train("", args) == 0, "%s", out);
    snprintf(args, sizeof args, LENET " --train-limit 1600 --epochs 2 --device gpu --resume %s --save %s", part, on1);
    CHECK_MSG(train("", args) == 0, "%s", out);
    snprintf(args, sizeof args, LENET " --train-limit 1600 --epochs 2 --gpus 2 --resume %s --save %s", part, on2);
    CHECK_MSG(train("", args) == 0, "%s", out);
    snprintf(what, sizeof what, "epoch 1 on %s, epoch 2 on 1 GPU against on 2 GPUs", first);
    return mg_check_same_training(what, on1, on2, NULL, NULL);
}

/* A checkpoint saved on 2 GPUs and one saved on 1 each resume on 1 GPU and on 2 and end at the
 * same weights both ways. */
BN_TEST(multigpu_checkpoint_moves_between_two_gpus_and_one)
{
    SKIP_WITHOUT_TWO_GPUS();
    CHECK_PASS(resume_across("--gpus 2", "from2"));
    CHECK_PASS(resume_across("--device gpu", "from1"));
    return BN_PASS;
}

/* SIGKILL to one rank in the middle of training: the launcher stops the other one and exits
 * non-zero within 30 s, naming the rank, its GPU and the signal; no rank is left running. */
BN_TEST(multigpu_killed_rank_ends_the_run_naming_it)
{
    SKIP_WITHOUT_TWO_GPUS();
    char log[512], csv[512], args[4096], text[8192];
    ft_path(log, sizeof log, "killed-rank.log");
    ft_path(csv, sizeof csv, "killed-rank.csv");
    remove(csv);
    snprintf(args, sizeof args, LENET " --epochs 20 --gpus 2 --log %s --log-every 1", csv);
    pid_t launcher = ft_start_train("", args, bn_test_data_dir(), log);
    CHECK(launcher > 0);
    pid_t ranks[8];
    int n = wait_for_children(launcher, ranks, 8, 2, 60);
    /* A header and 5 step rows: both ranks are inside training, past NCCL's set-up. */
    int training = n == 2 && wait_for_steps(csv, 6, 120);
    pid_t victim = n == 2 ? ranks[1] : 0, other = n == 2 ? ranks[0] : 0;
    if (victim > 0) kill(victim, SIGKILL);
    double killed_at = now_s();
    int rc = wait_exit_within(launcher, training ? 30 : 1);
    double took = now_s() - killed_at;
    int other_gone = other > 0 && gone_within(other, 5);
    CHECK(ft_read_text(log, text, sizeof text) == 0);
    CHECK_MSG(n == 2, "the launcher (pid %d) had %d children, not 2:\n%s", (int)launcher, n, text);
    CHECK_MSG(training, "training never logged 5 steps:\n%s", text);
    CHECK_MSG(rc > 0, "the launcher %s:\n%s", rc == -1 ? "was still running 30 s after the kill" : "exited 0", text);
    /* 137 is an exit code here: the launcher passes on how the rank ended, as a shell does. */
    CHECK_MSG(rc < BY_SIGNAL, "the launcher died of signal %d instead of exiting with an error:\n%s", rc - BY_SIGNAL,
              text);
    /* Which rank the kill hit depends on the order of the children; either is named the same way. */
    char want0[128], want1[128];
    snprintf(want0, sizeof want0, "rank 0 (gpu 0) was killed by signal 9");
    snprintf(want1, sizeof want1, "rank 1 (gpu 1) was killed by signal 9");
    CHECK_MSG(strstr(text, want0) || strstr(text, want1), "no message naming the killed rank:\n%s", text);
    CHECK_MSG(other_gone, "the other rank (pid %d) is still running after the launcher exited", (int)other);
    printf("    rank killed: the launcher exited %d after %.1f s; the other rank is gone\n", rc, took);
    return BN_PASS;
}

/* SIGINT during training to the launcher (to_rank < 0) or to one rank alone (as `kill -INT` of
 * that process would): every rank stops after the same step, rank 0 saves, the launcher exits 130
 * as one-GPU training does (tests/test_interrupt.c), no rank is left and the checkpoint loads. */
static int interrupt_run(int to_rank, const char *tag)
{
    char log[512], csv[512], ck[512], args[4096], text[8192];
    ft_path(log, sizeof log, "sigint-%s.log", tag);
    ft_path(csv, sizeof csv, "sigint-%s.csv", tag);
    ft_path(ck, sizeof ck, "sigint-%s.safetensors", tag);
    remove(csv);
    remove(ck);
    snprintf(args, sizeof args, LENET " --epochs 20 --gpus 2 --log %s --log-every 1 --save %s", csv, ck);
    pid_t launcher = ft_start_train("", args, bn_test_data_dir(), log);
    CHECK(launcher > 0);
    pid_t ranks[8];
    int n = wait_for_children(launcher, ranks, 8, 2, 60);
    int training = n == 2 && wait_for_steps(csv, 6, 120);
    /* The launcher's children in the order /proc lists them: find rank to_rank by its arguments. */
    pid_t target = launcher;
    for (int i = 0; to_rank >= 0 && i < n; i++) {
        char path[64], cmdline[4096], want[32];
        snprintf(path, sizeof path, "/proc/%d/cmdline", (int)ranks[i]);
        snprintf(want, sizeof want, "--rank%c%d", '\0', to_rank);
        FILE *f = fopen(path, "rb");
        size_t got = f ? fread(cmdline, 1, sizeof cmdline, f) : 0;
        if (f) fclose(f);
        for (size_t k = 0; k + 8 <= got; k++)
            if (memcmp(cmdline + k, want, 8) == 0) target = ranks[i];
    }
    CHECK_MSG(to_rank < 0 || target != launcher, "no child of the launcher is rank %d", to_rank);
    kill(target, SIGINT);
    int rc = wait_exit_within(launcher, 60);
    int gone = n == 2 && gone_within(ranks[0], 5) && gone_within(ranks[1], 5);
    CHECK(ft_read_text(log, text, sizeof text) == 0);
    CHECK_MSG(training, "training never logged 5 steps (%d children):\n%s", n, text);
    CHECK_MSG(rc == 130, "exit %d, expected 130:\n%s", rc, text);
    const char *msg = strstr(text, "blobnet: interrupted at step ");
    char saved[700];
    snprintf(saved, sizeof saved, "; checkpoint saved to %s\n", ck);
    CHECK_MSG(msg && strstr(msg, saved), "no 'interrupted at step N%s' line:\n%s", saved, text);
    long step = atol(msg + strlen("blobnet: interrupted at step "));
    CHECK_MSG(step >= 5, "stopped at step %ld, before the 5 steps logged", step);
    CHECK_MSG(gone, "a rank is still running after the launcher exited");
    CHECK_MSG(ft_checkpoint_loads("models/lenet.cfg", ck), "the checkpoint %s does not load", ck);
    printf("    SIGINT to %s: exit 130 after step %ld, the checkpoint loads\n", to_rank < 0 ? "the launcher" : "rank 1",
           step);
    return BN_PASS;
}

BN_TEST(multigpu_sigint_stops_all_ranks_and_saves)
{
    SKIP_WITHOUT_TWO_GPUS();
    return interrupt_run(-1, "launcher");
}

/* A signal that reaches one rank only stops the others too: the ranks agree on stopping. */
BN_TEST(multigpu_sigint_to_one_rank_stops_all_and_saves)
{
    SKIP_WITHOUT_TWO_GPUS();
    return interrupt_run(1, "rank1");
}

/* NCCL's environment that keeps its traffic off NVLink, PCIe peer copies and shared memory, so
 * that it takes the socket path it takes between machines (tools/multinode_sim.sh). */
#define SOCKET_PATH "NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_IB_DISABLE=1 NCCL_NVLS_ENABLE=0"

/* The deadline of ranks started by hand here (BLOBNET_DIST_TIMEOUT), and what a survivor may take
 * past it: NCCL's abort is given 10 s (comm.cu's ABORT_WAIT_S), and 10 s more cover the start of
 * the process's exit. */
#define DEADLINE_S 5
#define PAST_DEADLINE_S 20

/* Ranks started by hand have no launcher to stop the others when one dies: with `world` ranks
 * and the last killed in the middle of training, every other rank ends with an error naming it by
 * the deadline (BLOBNET_DIST_TIMEOUT) and NCCL's abort, instead of waiting on the collective for
 * ever. Rank 0 logs every step (a host wait each step); the ranks between log nothing, so their
 * hosts run ahead of their devices up to the stop agreement's distance, and must still end (their
 * clean-up once freed device memory behind kernels a lost peer held, and waited for ever). `env`
 * is NCCL's (or ""). */
static int peer_killed_ends_by_deadline(const char *env, const char *tag, int world)
{
    int port = free_port();
    CHECK_MSG(port > 0, "no free TCP port on 127.0.0.1");
    char logs[4][512], csv[512], args[4096], envs[1024], text[8192];
    ft_path(csv, sizeof csv, "deadline-%s.csv", tag);
    remove(csv);
    snprintf(envs, sizeof envs, "BLOBNET_DIST_TIMEOUT=%d %s", DEADLINE_S, env);
    pid_t pid[4];
    for (int r = 0; r < world; r++) {
        ft_path(logs[r], sizeof logs[r], "deadline-%s-rank%d.log", tag, r);
        snprintf(args, sizeof args,
                 LENET " --epochs 20 --rendezvous 127.0.0.1:%d --rank %d --world %d --device gpu:%d%s%s", port, r,
                 world, r, r == 0 ? " --log-every 1 --log " : "", r == 0 ? csv : "");
        pid[r] = ft_start_train(envs, args, bn_test_data_dir(), logs[r]);
        CHECK(pid[r] > 0);
    }
    int training = wait_for_steps(csv, 6, 120);
    kill(pid[world - 1], SIGKILL);
    double killed_at = now_s();
    int rc[4], failed = 0;
    double took[4];
    for (int r = 0; r < world - 1; r++) {
        rc[r] = wait_exit_or_show(pid[r], 60 - (now_s() - killed_at));
        took[r] = now_s() - killed_at;
    }
    wait_exit_within(pid[world - 1], 5);
    for (int r = 0; r < world - 1; r++) {
        CHECK(ft_read_text(logs[r], text, sizeof text) == 0);
        char name[16];
        snprintf(name, sizeof name, "rank %d: ", r);
        const char *line = strstr(text, name);
        const char *why = !training ? "training never logged 5 steps"
                          : rc[r] == -1 ? "was still running 60 s after the kill"
                          : rc[r] <= 0 || rc[r] >= BY_SIGNAL ? "did not exit with an error code"
                          : took[r] > DEADLINE_S + PAST_DEADLINE_S ? "ended past the deadline and NCCL's abort"
                          : !line ? "ended without an error naming it" : NULL;
        if (why) {
            printf("    %s: rank %d %s (exit %d after %.1f s; deadline %d s + %d s):\n%s\n", tag, r, why, rc[r],
                   took[r], DEADLINE_S, PAST_DEADLINE_S, text);
            failed = 1;
            continue;
        }
        printf("    %s: rank %d of %d killed, no launcher: rank %d exited %d after %.1f s: %.*s\n", tag, world - 1,
               world, r, rc[r], took[r], (int)strcspn(line, "\n"), line);
    }
    CHECK_MSG(!failed, "%s: a rank outlived its killed peer (above)", tag);
    return BN_PASS;
}

BN_TEST(multigpu_rank_without_its_peer_ends_at_the_deadline)
{
    SKIP_WITHOUT_TWO_GPUS();
    return peer_killed_ends_by_deadline("", "default", 2);
}

/* The same over NCCL's socket path, as between two machines: the peer's sockets close with it. */
BN_TEST(multigpu_socket_path_rank_without_its_peer_ends_by_the_deadline)
{
    SKIP_WITHOUT_TWO_GPUS();
    return peer_killed_ends_by_deadline(SOCKET_PATH, "socket", 2);
}

/* Four ranks on the socket path, the last one killed: ranks 1 and 2, which log nothing, end by
 * the deadline as rank 0 does. */
BN_TEST(multigpu_socket_path_four_ranks_end_by_the_deadline_when_one_is_killed)
{
    SKIP_WITHOUT_TWO_GPUS();
    if (bn_device_count() < 4) BN_SKIP_TEST("needs 4 GPUs, this machine has %d", bn_device_count());
    return peer_killed_ends_by_deadline(SOCKET_PATH, "socket4", 4);
}

/* Four ranks by hand on one machine, whose gradients are summed through each other's memory (the
 * default there), the last one killed: the others' sum kernels wait for it against the GPU's clock,
 * and every rank ends by the deadline as over NCCL. */
BN_TEST(multigpu_four_ranks_summing_through_peers_end_by_the_deadline_when_one_is_killed)
{
    SKIP_WITHOUT_TWO_GPUS();
    if (bn_device_count() < 4) BN_SKIP_TEST("needs 4 GPUs, this machine has %d", bn_device_count());
    return peer_killed_ends_by_deadline("BLOBNET_DIST_SUM=peers", "peers4", 4);
}

/* Fails unless NCCL's logs in dir (NCCL_DEBUG_FILE) show a channel over its socket transport and
 * none over peer copies or shared memory. */
static int check_socket_transport(const char *dir)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "grep -qs 'via NET/Socket' '%s'/nccl.*.log", dir);
    CHECK_MSG(system(cmd) == 0, "no channel 'via NET/Socket' in NCCL's logs %s/nccl.*.log", dir);
    snprintf(cmd, sizeof cmd, "grep -qsE 'via (P2P|SHM)' '%s'/nccl.*.log", dir);
    CHECK_MSG(system(cmd) != 0, "a channel via P2P or SHM in NCCL's logs %s/nccl.*.log despite " SOCKET_PATH, dir);
    return BN_PASS;
}

/* Two rank processes started by hand meet over the TCP rendezvous on 127.0.0.1, train 20 steps
 * and end with the same weights, bit for bit. `env` is NCCL's (or ""); with `socket`, NCCL's
 * logs must show its socket transport. */
static int by_hand_in_step(const char *env, const char *tag, int socket)
{
    int port = free_port();
    CHECK_MSG(port > 0, "no free TCP port on 127.0.0.1");
    char dir[512], envs[2048], logs[2][512], args[4096], text[2][4096], w[2][600], init[512];
    ft_path(dir, sizeof dir, "by-hand-%s", tag);
    snprintf(args, sizeof args, "rm -rf '%s' && mkdir -p '%s'", dir, dir);
    CHECK(system(args) == 0);
    snprintf(envs, sizeof envs, "BLOBNET_RANK_WEIGHTS=%s BLOBNET_DIST_TIMEOUT=60 %s", dir, env);
    if (socket)
        snprintf(envs + strlen(envs), sizeof envs - strlen(envs),
                 " NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET NCCL_DEBUG_FILE=%s/nccl.%%p.log", dir);
    pid_t pid[2];
    for (int r = 0; r < 2; r++) {
        ft_path(logs[r], sizeof logs[r], "by-hand-%s-rank%d.log", tag, r);
        snprintf(w[r], sizeof w[r], "%s/rank%d.safetensors", dir, r);
        /* 1280 images: 20 steps of 64. */
        snprintf(args, sizeof args, LENET " --train-limit 1280 --epochs 1 --rendezvous 127.0.0.1:%d --rank %d "
                 "--world 2 --device gpu:%d", port, r, r);
        pid[r] = ft_start_train(envs, args, bn_test_data_dir(), logs[r]);
        CHECK(pid[r] > 0);
    }
    int rc[2];
    for (int r = 0; r < 2; r++) rc[r] = wait_exit_within(pid[r], 180);
    for (int r = 0; r < 2; r++) {
        CHECK(ft_read_text(logs[r], text[r], sizeof text[r]) == 0);
        CHECK_MSG(rc[r] == 0, "rank %d exited %d:\n%s", r, rc[r], text[r]);
    }
    CHECK_MSG(access(w[0], F_OK) == 0 && access(w[1], F_OK) == 0, "BLOBNET_RANK_WEIGHTS wrote no %s or %s", w[0], w[1]);
    CHECK_MSG(mg_files_equal(w[0], w[1]), "the ranks' final weights differ");
    if (socket) CHECK_PASS(check_socket_transport(dir));
    ft_path(init, sizeof init, "init.safetensors");
    CHECK_PASS(initial_weights(init));
    CHECK_PASS(mg_check_trained(w[0], init));
    printf("    %s: rendezvous on 127.0.0.1:%d, 20 steps, both ranks' weights equal bit for bit\n", tag, port);
    return BN_PASS;
}

BN_TEST(multigpu_rendezvous_by_hand_trains_in_step)
{
    SKIP_WITHOUT_TWO_GPUS();
    return by_hand_in_step("", "default", 0);
}

/* Ranks started by hand whose NCCL traffic takes the socket path, as between two machines, stay
 * bit-identical too. */
BN_TEST(multigpu_socket_path_ranks_by_hand_train_in_step)
{
    SKIP_WITHOUT_TWO_GPUS();
    return by_hand_in_step(SOCKET_PATH, "socket", 1);
}

/* Asking for more GPUs than can be had is one line and a non-zero exit: without NCCL it names
 * what the build lacks; with NCCL, how many devices there are. Runs on every machine: it asks
 * for one GPU more than there are (at least 2). */
BN_TEST(multigpu_more_gpus_than_available_is_a_one_line_error)
{
    CHECK(ft_small_mnist() != NULL);
    int have = bn_device_count(), want = have + 1 > 2 ? have + 1 : 2;
    char args[256], cmd[2048];
    snprintf(args, sizeof args, "models/lenet.cfg --quiet --epochs 1 --gpus %d", want);
    snprintf(cmd, sizeof cmd, "%s train %s --data %s", bn_test_cli(), args, ft_small_mnist());
    int rc = bn_test_run(cmd, out, sizeof out);
    CHECK_MSG(rc > 0 && rc < 128, "'%s' exited %d:\n%s", args, rc, out);
    const char *nl = strchr(out, '\n');
    CHECK_MSG(nl && nl[1] == '\0', "not one line:\n%s", out);
    char want_text[512];
    if (!bn_dist_compiled()) {
        snprintf(want_text, sizeof want_text, "blobnet: error: --gpus %d: %s\n", want, bn_dist_missing());
        CHECK_MSG(strcmp(out, want_text) == 0, "got:\n%s\nexpected:\n%s", out, want_text);
        CHECK_MSG(strstr(bn_dist_missing(), "NCCL") || strstr(bn_dist_missing(), "CUDA"),
                  "the reason names neither NCCL nor CUDA: %s", bn_dist_missing());
    } else {
        snprintf(want_text, sizeof want_text, "blobnet: error: --gpus %d: ", want);
        CHECK_MSG(strncmp(out, want_text, strlen(want_text)) == 0, "got:\n%s", out);
        char count[32];
        snprintf(count, sizeof count, "%d", have);
        CHECK_MSG(strstr(out + strlen(want_text), count), "the message does not say there are %d:\n%s", have, out);
    }
    return BN_PASS;
}
