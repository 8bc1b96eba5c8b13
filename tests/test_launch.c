/* test_launch.c - the launcher of a run on several GPUs: the supervision of its processes
 * (src/dist/supervise.c) with /bin/sh scripts as the children (one that fails stops the others
 * and is named with its code or signal; one that stops cleanly on a signal of its own leaves the
 * others to stop; a SIGINT to the supervisor reaches every child), and the
 * CLI's checks of --gpus, --device lists, --rank, --world and --rendezvous. */
#include "testing.h"
#include "file_testing.h"

#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/device.h"
#include "core/status.h"
#include "dist/dist.h"
#include "dist/supervise.h"

static char out[1 << 14];

static double seconds(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

static int exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

/* A group of two /bin/sh -c children running script[0] and script[1]. */
typedef struct sh_pair {
    char *args[2][4];
    char *const *argv[2];
    const char *name[2];
    bn_children c;
} sh_pair;

static void sh_pair_init(sh_pair *p, const char *script0, const char *script1, double grace_s)
{
    const char *scripts[2] = {script0, script1};
    for (int i = 0; i < 2; i++) {
        p->args[i][0] = "sh";
        p->args[i][1] = "-c";
        p->args[i][2] = (char *)scripts[i];
        p->args[i][3] = NULL;
        p->argv[i] = p->args[i];
    }
    p->name[0] = "child 0";
    p->name[1] = "child 1";
    p->c = (bn_children){.path = "/bin/sh", .argv = p->argv, .name = p->name,
                         .plural = "children", .n = 2, .grace_s = grace_s};
}

BN_TEST(supervise_all_exit_zero)
{
    sh_pair p;
    sh_pair_init(&p, "exit 0", "sleep 0.2; exit 0", 5);
    int code = -1;
    CHECK_OK(bn_supervise(&p.c, &code));
    CHECK_MSG(code == 0, "exit code %d", code);
    return BN_PASS;
}

BN_TEST(supervise_failing_child_stops_the_other)
{
    sh_pair p;
    sh_pair_init(&p, "sleep 0.2; exit 3", "exec sleep 30", 5);
    int code = -1;
    double start = seconds();
    CHECK_ERR(bn_supervise(&p.c, &code), BN_ERR_IO, "child 0 exited with code 3; the other children were stopped");
    CHECK_MSG(code == 3, "exit code %d, expected the failed child's 3", code);
    CHECK_MSG(seconds() - start < 4, "took %.1f s: the sleeping child was not stopped", seconds() - start);
    return BN_PASS;
}

/* The launcher blocks the signals it takes before CUDA makes its threads
 * (bn_supervise_take_signals); its children still start with them unblocked. Each child exits 0
 * only when its blocked-signal mask is empty. In a child of the test process, whose mask stays
 * as it was. */
BN_TEST(supervise_children_start_with_the_taken_signals_unblocked)
{
    static const char script[] = "[ \"$(awk '/^SigBlk/ {print $2}' /proc/self/status)\" = 0000000000000000 ]";
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        bn_supervise_take_signals();
        sh_pair p;
        sh_pair_init(&p, script, script, 5);
        int code = -1;
        _exit(bn_supervise(&p.c, &code) == BN_OK && code == 0 ? 0 : 10 + (code & 0x7f));
    }
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid);
    CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "a child started with signals blocked (status %d)",
              status);
    return BN_PASS;
}

BN_TEST(supervise_names_a_killed_child)
{
    sh_pair p;
    sh_pair_init(&p, "exec sleep 30", "sleep 0.2; kill -KILL $$", 5);
    int code = -1;
    double start = seconds();
    CHECK_ERR(bn_supervise(&p.c, &code), BN_ERR_IO, "child 1 was killed by signal 9");
    CHECK(strstr(bn_last_error(), "the other children were stopped"));
    CHECK_MSG(code == 128 + 9, "exit code %d, expected 137", code);
    CHECK_MSG(seconds() - start < 4, "took %.1f s", seconds() - start);
    return BN_PASS;
}

BN_TEST(supervise_kills_a_child_that_ignores_sigterm)
{
    sh_pair p;
    /* Child 1 ignores SIGTERM, and its sleep, in the background, does too; only SIGKILL after the
     * grace period ends it. */
    sh_pair_init(&p, "sleep 0.2; exit 1", "trap '' TERM; sleep 3", 1.0);
    int code = -1;
    double start = seconds();
    CHECK_ERR(bn_supervise(&p.c, &code), BN_ERR_IO, "child 0 exited with code 1");
    double took = seconds() - start;
    CHECK_MSG(took >= 1.1 && took < 4, "took %.2f s with a grace period of 1 s", took);
    CHECK(code == 1);
    return BN_PASS;
}

/* A child that stops cleanly on a signal sent to it alone (exit 130) is an interruption, not a
 * failure: the other is not sent SIGTERM (it would write the file) and may end on its own, as
 * ranks that agree on stopping do; one that does not is killed after stop_grace_s. */
BN_TEST(supervise_leaves_the_others_to_stop_after_a_clean_stop)
{
    char mark[512], script[1024];
    ft_path(mark, sizeof mark, "supervise-term-mark");
    remove(mark);
    snprintf(script, sizeof script, "trap 'touch %s; exit 143' TERM; sleep 0.6; exit 130", mark);
    sh_pair p;
    sh_pair_init(&p, script, "sleep 0.1; exit 130", 5);
    p.c.stop_grace_s = 5;
    int code = -1;
    CHECK_ERR(bn_supervise(&p.c, &code), BN_ERR_INTERRUPTED, "");
    CHECK_MSG(code == 130, "exit code %d, expected 130", code);
    CHECK_MSG(!exists(mark), "the other child was sent SIGTERM after a clean stop");

    sh_pair_init(&p, "trap '' TERM; sleep 5", "sleep 0.1; exit 130", 5);
    p.c.stop_grace_s = 0.5;
    double start = seconds();
    CHECK_ERR(bn_supervise(&p.c, &code), BN_ERR_INTERRUPTED, "");
    double took = seconds() - start;
    CHECK_MSG(took >= 0.5 && took < 3, "took %.2f s with 0.5 s to stop on its own", took);
    return BN_PASS;
}

BN_TEST(supervise_reports_a_program_that_cannot_run)
{
    char *argv0[] = {"x", NULL}, *argv1[] = {"x", NULL};
    char *const *argv[2] = {argv0, argv1};
    const char *name[2] = {"rank 0 (gpu 0)", "rank 1 (gpu 1)"};
    bn_children c = {.path = "/nonexistent/blobnet", .argv = argv, .name = name, .plural = "ranks", .n = 2,
                     .grace_s = 1};
    int code = -1;
    CHECK_ERR(bn_supervise(&c, &code), BN_ERR_IO, "exited with code 127");
    CHECK(code == 127);
    /* A child says why on the stream it inherited (the first to fail; the other may be stopped
     * before it says anything). */
    const char *said = bn_test_stderr();
    CHECK_MSG(strstr(said, "blobnet: error: rank 0 (gpu 0): cannot execute /nonexistent/blobnet") ||
                  strstr(said, "blobnet: error: rank 1 (gpu 1): cannot execute /nonexistent/blobnet"),
              "stderr: %s", said);
    return BN_PASS;
}

/* Runs the supervisor in a process of its own over two children that trap SIGINT, writing
 * DIR/got<i> and exiting 130, sends that process SIGINT once both are ready, and returns its exit
 * code: the supervisor's, or 99 when bn_supervise did not say BN_ERR_INTERRUPTED. */
static int interrupt_supervisor(const char *dir)
{
    char scripts[2][1400];
    for (int i = 0; i < 2; i++)
        snprintf(scripts[i], sizeof scripts[i],
                 "trap 'kill $! 2>/dev/null; echo %d > %s/got%d; exit 130' INT; sleep 20 & echo > %s/ready%d; wait",
                 i, dir, i, dir, i);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        /* A run started in the background by a non-interactive shell inherits SIGINT ignored, and a
         * shell that starts with a signal ignored may not trap it: the children would sleep on. */
        signal(SIGINT, SIG_DFL);
        sh_pair p;
        sh_pair_init(&p, scripts[0], scripts[1], 5);
        int code = -1;
        bn_status s = bn_supervise(&p.c, &code);
        _exit(s == BN_ERR_INTERRUPTED ? code : 99);
    }
    if (pid < 0) return -1;
    char ready[2][600];
    for (int i = 0; i < 2; i++) snprintf(ready[i], sizeof ready[i], "%s/ready%d", dir, i);
    for (int tries = 0; tries < 500 && !(exists(ready[0]) && exists(ready[1])); tries++)
        nanosleep(&(struct timespec){.tv_nsec = 10000000L}, NULL);
    kill(pid, SIGINT);
    int st;
    if (waitpid(pid, &st, 0) != pid) return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

BN_TEST(supervise_passes_sigint_to_every_child)
{
    char dir[512];
    snprintf(dir, sizeof dir, "%s/sigint", bn_test_tmpdir());
    CHECK(mkdir(dir, 0755) == 0);
    int code = interrupt_supervisor(dir);
    CHECK_MSG(code == 130, "the supervisor exited %d, expected 130 (99: not reported as an interruption)", code);
    for (int i = 0; i < 2; i++) {
        char got[600];
        snprintf(got, sizeof got, "%s/got%d", dir, i);
        CHECK_MSG(exists(got), "child %d never received SIGINT (%s is missing)", i, got);
    }
    return BN_PASS;
}

BN_TEST(launch_gpus_needs_nccl_and_devices)
{
    if (!bn_dist_compiled()) {
        char needle[256];
        snprintf(needle, sizeof needle, "--gpus 2: %s", bn_dist_missing());
        CHECK_CLI("train models/lenet.cfg --gpus 2", 1, needle);
        snprintf(needle, sizeof needle, "--device gpu:0,1: %s", bn_dist_missing());
        CHECK_CLI("train models/lenet.cfg --device gpu:0,1", 1, needle);
        CHECK_MSG(strchr(out, '\n') == out + strlen(out) - 1, "not one line:\n%s", out);
        return BN_PASS;
    }
    int count = bn_device_count();
    if (count >= 2) BN_SKIP_TEST("this machine has %d GPUs: tests/test_multigpu.c trains on them", count);
    char needle[128];
    snprintf(needle, sizeof needle, "--gpus 2: this machine has %d CUDA device", count);
    CHECK_CLI("train models/lenet.cfg --gpus 2", 1, needle);
    CHECK_CLI("train models/lenet.cfg --device gpu:0,3", 1, "--device gpu:0,3: there is no gpu");
    return BN_PASS;
}

BN_TEST(launch_cli_flag_errors)
{
    CHECK_CLI("train models/lenet.cfg --rank 1", 2, "--world and --rendezvous missing");
    CHECK_CLI("train models/lenet.cfg --rank 0 --world 2", 2, "--rendezvous missing");
    CHECK_CLI("train models/lenet.cfg --world 2 --rendezvous 127.0.0.1:1", 2, "--rank missing");
    CHECK_CLI("train models/lenet.cfg --rank 2 --world 2 --rendezvous 127.0.0.1:1", 2, "--rank: 2 is outside 0..1");
    CHECK_CLI("train models/lenet.cfg --world 0", 2, "--world: 0 is outside 1..64");
    CHECK_CLI("train models/lenet.cfg --gpus 0", 2, "--gpus: 0 is outside 1..64");
    CHECK_CLI("train models/lenet.cfg --gpus 2 --device gpu:0", 2, "--gpus 2: --device gpu:0 names one device");
    CHECK_CLI("train models/lenet.cfg --gpus 3 --device gpu:0,1", 2, "--gpus 3: --device gpu:0,1 names 2 GPUs");
    CHECK_CLI("train models/lenet.cfg --device gpu:0,0", 2, "--device gpu:0,0: gpu 0 is named twice");
    CHECK_CLI("train models/lenet.cfg --device gpu:0,x", 2, "--device: 'x' is not an integer");
    CHECK_CLI("train models/lenet.cfg --rank 0 --world 2 --rendezvous nohost", 2,
              "--rendezvous: 'nohost' is not HOST:PORT");
    CHECK_CLI("train models/lenet.cfg --rank 0 --world 2 --rendezvous h:70000", 2,
              "--rendezvous: 'h:70000' is not HOST:PORT");
    CHECK_CLI("train models/lenet.cfg --rank 0 --world 2 --gpus 3 --rendezvous h:1", 2,
              "--gpus 3 disagrees with --world 2");
    CHECK_CLI("train models/lenet.cfg --rank 1 --world 2 --rendezvous h:1 --device gpu:0,1", 2,
              "--device gpu:0,1: a rank trains on one GPU");
    CHECK_CLI("train models/lenet.cfg --rank 1 --world 2 --rendezvous h:1 --device cpu", 2,
              "--device cpu: a rank trains on one GPU");
    /* Each is one line. */
    CHECK_MSG(strchr(out, '\n') == out + strlen(out) - 1, "more than one line:\n%s", out);
    return BN_PASS;
}
