/* test_interrupt.c - training that is stopped: SIGTERM, SIGHUP and SIGINT finish the step, save
 * and exit 143, 129 or 130; a resume from a mid-epoch checkpoint ends bit for bit where an
 * uninterrupted run ends (per-step losses equal on the GPU with --deterministic), goes on from the
 * example where it stopped with another batch size, and refuses another training set or seed;
 * SIGKILL in the middle of a checkpoint write leaves the previous checkpoint intact and
 * resumable, and the next save removes the temporary file it left. */
#include "testing.h"

#include <dirent.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/device.h"
#include "file_testing.h"
#include "train/checkpoint.h"

static char out[1 << 16];

static void sleep_ms(long ms)
{
    nanosleep(&(struct timespec){.tv_sec = ms / 1000, .tv_nsec = ms % 1000 * 1000000L}, NULL);
}

/* The exit code, or 128 + the signal that killed it, as a shell reports them. */
static int wait_exit(pid_t pid)
{
    int st;
    if (waitpid(pid, &st, 0) != pid) return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* The number of files in the test directory whose names start with prefix. */
static int count_prefixed(const char *prefix)
{
    DIR *d = opendir(bn_test_tmpdir());
    if (!d) return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) n += strncmp(e->d_name, prefix, strlen(prefix)) == 0;
    closedir(d);
    return n;
}

/* Waits up to timeout_ms for a file named prefix* to appear; 1 when it did. */
static int wait_for_file(const char *prefix, long timeout_ms)
{
    for (long t = 0; t < timeout_ms; t += 2) {
        if (count_prefixed(prefix) > 0) return 1;
        sleep_ms(2);
    }
    return 0;
}

/* Waits up to timeout_ms for path to exist; 1 when it did. */
static int wait_for_path(const char *path, long timeout_ms)
{
    for (long t = 0; t < timeout_ms; t += 2) {
        if (access(path, F_OK) == 0) return 1;
        sleep_ms(2);
    }
    return 0;
}

static void remove_prefixed(const char *prefix)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "rm -f '%s'/%s*", bn_test_tmpdir(), prefix);
    if (system(cmd) != 0) fprintf(stderr, "    could not remove %s*\n", prefix);
}

static int files_equal(const char *a, const char *b)
{
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "cmp -s '%s' '%s'", a, b);
    return system(cmd) == 0;
}

static int run_train(const char *args)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s train %s --data %s", bn_test_cli(), args, ft_small_mnist());
    return bn_test_run(cmd, out, sizeof out);
}

/* 600 images in batches of 50: 12 steps an epoch, 24 in all. */
#define COMMON "models/lenet.cfg --train-limit 600 --batch 50 --epochs 2 --quiet"
/* Saves pause 300 ms before their rename, so that a signal can be sent while one is under way. */
#define PAUSE "BLOBNET_TEST_SAVE_PAUSE_MS=300"

/* Runs COMMON on device with --checkpoint-every 3 and --save part, stopped by signal sig during
 * the save after step 3 (more arguments in extra); checks the exit and the message. */
static int interrupt_at_step_3(const char *device, const char *part, const char *extra, int sig)
{
    char args[2048], log[512], text[4096], expected[600];
    ft_path(log, sizeof log, "interrupted.log");
    snprintf(args, sizeof args, COMMON " --device %s --checkpoint-every 3 --save %s %s", device, part, extra);
    pid_t pid = ft_start_train(PAUSE, args, ft_small_mnist(), log);
    CHECK(pid > 0);
    int saving = wait_for_file("part.safetensors.tmp.", 120000);
    kill(pid, sig);
    int rc = wait_exit(pid);
    CHECK(ft_read_text(log, text, sizeof text) == 0);
    CHECK_MSG(saving, "no checkpoint save began; log:\n%s", text);
    CHECK_MSG(rc == 128 + sig, "exit %d; log:\n%s", rc, text);
    snprintf(expected, sizeof expected, "blobnet: interrupted at step 3; checkpoint saved to %s\n", part);
    CHECK_MSG(strcmp(text, expected) == 0, "output:\n%s", text);
    /* The checkpoint is mid-epoch: epoch 0 done, 3 batches of epoch 1, with their running sums. */
    CHECK(ft_read_text(part, text, 1024) == 0);
    CHECK_MSG(strstr(text + 8, "\"epoch\":\"0\"") && strstr(text + 8, "\"batch_in_epoch\":\"3\"") &&
              strstr(text + 8, "\"step\":\"3\"") && strstr(text + 8, "\"epoch_seen\":\"150\""), "header: %s", text + 8);
    CHECK_MSG(!strstr(text + 8, "\"epoch_loss_sum\":\"0\""), "no running loss sum: %s", text + 8);
    CHECK(count_prefixed("part.safetensors.tmp.") == 0);
    return BN_PASS;
}

/* A metrics log (--log) as text to compare: per step "lr loss acc" (step rows, 1-based) and
 * per epoch "lr loss acc test_loss test_acc" (epoch rows, 1-based); the times are left out. */
typedef struct log_rows {
    char step[64][200], epoch[8][320];
    int steps, epochs;
} log_rows;

static int read_log(const char *path, log_rows *r)
{
    memset(r, 0, sizeof *r);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        int epoch;
        long step;
        char v[5][64];
        /* epoch,step,lr,train_loss,train_acc,test_loss,test_acc,...: step rows leave the test fields empty */
        int got = sscanf(line, "%d,%ld,%63[^,],%63[^,],%63[^,],%63[^,],%63[^,]", &epoch, &step, v[0], v[1], v[2], v[3],
                         v[4]);
        if (got == 5 && step >= 1 && step < 64) {
            snprintf(r->step[step], sizeof r->step[step], "%s %s %s", v[0], v[1], v[2]);
            if (step > r->steps) r->steps = (int)step;
        } else if (got == 7 && epoch >= 1 && epoch < 8) {
            snprintf(r->epoch[epoch], sizeof r->epoch[epoch], "%s %s %s %s %s", v[0], v[1], v[2], v[3], v[4]);
            if (epoch > r->epochs) r->epochs = epoch;
        }
    }
    fclose(f);
    return 0;
}

/* SIGTERM mid-epoch, then --resume: the final checkpoint (weights, momentum, counters) is the
 * uninterrupted run's byte for byte, and so are both epochs' lines in the metrics logs (the
 * first epoch's train loss and accuracy come from the running sums the checkpoint carried). */
BN_TEST(interrupt_sigterm_mid_epoch_then_resume_is_bit_exact_on_cpu)
{
    CHECK(ft_small_mnist() != NULL);
    char full[512], part[512], resumed[512], log_full[512], log_resumed[512], args[2048];
    ft_path(full, sizeof full, "full.safetensors");
    ft_path(part, sizeof part, "part.safetensors");
    ft_path(resumed, sizeof resumed, "resumed.safetensors");
    ft_path(log_full, sizeof log_full, "full.csv");
    ft_path(log_resumed, sizeof log_resumed, "resumed.csv");
    snprintf(args, sizeof args, COMMON " --device cpu --log %s --save %s", log_full, full);
    CHECK_MSG(run_train(args) == 0, "%s", out);
    int r = interrupt_at_step_3("cpu", part, "", SIGTERM);
    if (r != BN_PASS) return r;
    snprintf(args, sizeof args, COMMON " --device cpu --resume %s --log %s --save %s", part, log_resumed, resumed);
    CHECK_MSG(run_train(args) == 0, "%s", out);
    CHECK_MSG(files_equal(full, resumed), "the resumed run's checkpoint differs from the uninterrupted one");
    static log_rows want, got;
    CHECK(read_log(log_full, &want) == 0 && read_log(log_resumed, &got) == 0);
    CHECK_MSG(want.epochs == 2 && got.epochs == 2, "epochs logged: %d and %d", want.epochs, got.epochs);
    for (int e = 1; e <= 2; e++)
        CHECK_MSG(strcmp(want.epoch[e], got.epoch[e]) == 0, "epoch %d: resumed '%s', uninterrupted '%s'", e,
                  got.epoch[e], want.epoch[e]);
    return BN_PASS;
}

/* The same on the GPU with --deterministic: every step's loss and accuracy, as the logs print
 * them (9 significant digits), equal the uninterrupted run's. */
BN_TEST(interrupt_gpu_deterministic_resume_has_the_same_step_losses)
{
    if (bn_device_count() == 0) BN_SKIP_TEST("no CUDA device");
    CHECK(ft_small_mnist() != NULL);
    char full[512], part[512], log_full[512], log_a[512], log_b[512], args[2048], extra[600];
    ft_path(full, sizeof full, "gpu-full.safetensors");
    ft_path(part, sizeof part, "part.safetensors");
    ft_path(log_full, sizeof log_full, "gpu-full.csv");
    ft_path(log_a, sizeof log_a, "gpu-a.csv");
    ft_path(log_b, sizeof log_b, "gpu-b.csv");
    snprintf(args, sizeof args, COMMON " --device gpu --deterministic --log-every 1 --log %s --save %s", log_full, full);
    CHECK_MSG(run_train(args) == 0, "%s", out);
    snprintf(extra, sizeof extra, "--deterministic --log-every 1 --log %s", log_a);
    int r = interrupt_at_step_3("gpu", part, extra, SIGTERM);
    if (r != BN_PASS) return r;
    snprintf(args, sizeof args, COMMON " --device gpu --deterministic --log-every 1 --log %s --resume %s", log_b, part);
    CHECK_MSG(run_train(args) == 0, "%s", out);
    static log_rows want, a, b;
    CHECK(read_log(log_full, &want) == 0 && read_log(log_a, &a) == 0 && read_log(log_b, &b) == 0);
    CHECK_MSG(want.steps == 24 && a.steps == 3 && b.steps == 24, "steps logged: %d, %d, %d", want.steps, a.steps,
              b.steps);
    for (int s = 1; s <= 24; s++) {
        const char *got = s <= 3 ? a.step[s] : b.step[s];
        CHECK_MSG(strcmp(got, want.step[s]) == 0, "step %d: lr loss acc '%s', uninterrupted '%s'", s, got, want.step[s]);
    }
    printf("    24 steps, interrupted after step 3: every step's loss equal to the uninterrupted run's\n");
    return BN_PASS;
}

/* SIGHUP (a closed terminal or ssh session) stops training as SIGTERM does: the step finishes,
 * the checkpoint is saved, exit 129. */
BN_TEST(interrupt_sighup_saves_and_stops_like_sigterm)
{
    CHECK(ft_small_mnist() != NULL);
    char part[512];
    ft_path(part, sizeof part, "part.safetensors");
    CHECK(interrupt_at_step_3("cpu", part, "", SIGHUP) == BN_PASS);
    CHECK(ft_checkpoint_loads("models/lenet.cfg", part));
    return BN_PASS;
}

/* The epoch row of the metrics log at path for epoch e: its step, or -1. */
static long epoch_row_step(const char *path, int e)
{
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char line[512];
    long found = -1;
    while (fgets(line, sizeof line, f)) {
        int epoch;
        long step;
        char test_acc[64];
        if (sscanf(line, "%d,%ld,%*[^,],%*[^,],%*[^,],%*[^,],%63[^,]", &epoch, &step, test_acc) == 3 && epoch == e)
            found = step;
    }
    fclose(f);
    return found;
}

/* Stopped 150 examples (3 steps of 50) into epoch 1 of 600 examples, a run may go on in batches of
 * 30: the 450 examples left are 15 steps, so epoch 1 ends at step 18; counting the place in
 * batches would start at example 90 and repeat 60 (20 steps). Another training set or seed would
 * draw another order for the rest of the epoch: refused. At the end of an epoch both may change. */
BN_TEST(interrupt_resume_mid_epoch_goes_on_from_the_example)
{
    CHECK(ft_small_mnist() != NULL);
    char part[512], log[512], full[512], args[2048];
    ft_path(part, sizeof part, "part.safetensors");
    ft_path(log, sizeof log, "batch30.csv");
    ft_path(full, sizeof full, "epoch-end.safetensors");
    int r = interrupt_at_step_3("cpu", part, "", SIGTERM);
    if (r != BN_PASS) return r;
    snprintf(args, sizeof args, "models/lenet.cfg --train-limit 600 --batch 30 --epochs 1 --quiet --device cpu "
             "--resume %s --log %s", part, log);
    CHECK_MSG(run_train(args) == 0, "%s", out);
    CHECK_MSG(strstr(out, "changed training settings: batch 50 -> 30, epochs 2 -> 1"), "%s", out);
    long step = epoch_row_step(log, 1);
    CHECK_MSG(step == 18, "epoch 1 ended at step %ld, not 18", step);

    snprintf(args, sizeof args, "models/lenet.cfg --train-limit 500 --batch 50 --quiet --device cpu --resume %s", part);
    CHECK_MSG(run_train(args) == 2, "%s", out);
    CHECK_MSG(strstr(out, "was saved 150 examples into epoch 1 of a training set of 600 examples, and this run's has "
                          "500: the rest of the epoch would come in another order, so that some examples would be "
                          "skipped and others seen twice; resume with the same training set (--train-limit 600) or "
                          "from a checkpoint saved at the end of an epoch"), "%s", out);
    snprintf(args, sizeof args, "models/lenet.cfg --train-limit 600 --batch 50 --seed 7 --quiet --device cpu "
             "--resume %s", part);
    CHECK_MSG(run_train(args) == 2, "%s", out);
    CHECK_MSG(strstr(out, "of a run with seed 1, and this run's seed is 7") && strstr(out, "resume with --seed 1 "),
              "%s", out);

    snprintf(args, sizeof args, COMMON " --device cpu --epochs 1 --save %s", full);
    CHECK_MSG(run_train(args) == 0, "%s", out);
    snprintf(args, sizeof args, "models/lenet.cfg --train-limit 500 --batch 50 --epochs 2 --seed 7 --quiet "
             "--device cpu --resume %s", full);
    CHECK_MSG(run_train(args) == 0, "%s", out);
    CHECK_MSG(strstr(out, "changed training settings: epochs 1 -> 2, seed 1 -> 7, training examples 600 -> 500"),
              "%s", out);
    return BN_PASS;
}

/* SIGINT without --save: exit 130, saying that nothing was saved. */
BN_TEST(interrupt_sigint_without_save_says_nothing_was_saved)
{
    CHECK(ft_small_mnist() != NULL);
    char log[512], text[8192];
    ft_path(log, sizeof log, "sigint.log");
    /* The numerics table on stderr shows when training has begun. */
    pid_t pid = ft_start_train("", "models/lenet.cfg --device cpu --batch 10 --epochs 1 --quiet --debug-numerics 1",
                               ft_small_mnist(), log);
    CHECK(pid > 0);
    int began = 0;
    for (int t = 0; t < 60000 && !began; t += 5) {
        sleep_ms(5);
        began = ft_read_text(log, text, sizeof text) == 0 && strstr(text, "numerics after step 1") != NULL;
    }
    kill(pid, SIGINT);
    int rc = wait_exit(pid);
    CHECK(ft_read_text(log, text, sizeof text) == 0);
    CHECK_MSG(began, "training never began:\n%s", text);
    CHECK_MSG(rc == 130, "exit %d:\n%s", rc, text);
    const char *msg = strstr(text, "blobnet: interrupted at step ");
    CHECK_MSG(msg && strstr(msg, "; nothing was saved (no --save FILE)\n"), "%s", text);
    long step = atol(msg + strlen("blobnet: interrupted at step "));
    CHECK_MSG(step >= 1 && step < 100, "stopped at step %ld", step);
    return BN_PASS;
}

/* SIGKILL while a checkpoint is being written, between the write and the rename: the file at
 * --save is still the previous checkpoint, byte for byte, and a run resumes from it; the
 * temporary file is all that is left of the interrupted save, and the resumed run's first save
 * removes it. Then the same at random moments of a run that saves after every step. */
BN_TEST(interrupt_sigkill_during_checkpoint_write_keeps_the_previous_one)
{
    CHECK(ft_small_mnist() != NULL);
    char ck[512], copy[512], log[512], args[2048], text[4096];
    ft_path(ck, sizeof ck, "kill.safetensors");
    ft_path(copy, sizeof copy, "kill-copy.safetensors");
    ft_path(log, sizeof log, "kill.log");
    snprintf(args, sizeof args, "models/lenet.cfg --device cpu --train-limit 200 --batch 50 --epochs 1 --quiet "
             "--save %s", ck);
    CHECK_MSG(run_train(args) == 0, "%s", out);
    snprintf(args, sizeof args, "cp '%s' '%s'", ck, copy);
    CHECK(system(args) == 0);

    snprintf(args, sizeof args, "models/lenet.cfg --device cpu --train-limit 200 --batch 50 --epochs 2 --quiet "
             "--checkpoint-every 1 --resume %s --save %s", ck, ck);
    pid_t pid = ft_start_train("BLOBNET_TEST_SAVE_PAUSE_MS=10000", args, ft_small_mnist(), log);
    CHECK(pid > 0);
    int saving = wait_for_file("kill.safetensors.tmp.", 120000);
    kill(pid, SIGKILL);
    CHECK(wait_exit(pid) == 128 + SIGKILL);
    CHECK(ft_read_text(log, text, sizeof text) == 0);
    CHECK_MSG(saving, "no save began:\n%s", text);
    CHECK_MSG(files_equal(ck, copy), "the checkpoint changed");
    CHECK(count_prefixed("kill.safetensors.tmp.") == 1);
    snprintf(args, sizeof args, "models/lenet.cfg --device cpu --train-limit 200 --batch 50 --epochs 2 --quiet "
             "--resume %s --save %s", ck, ck);
    CHECK_MSG(run_train(args) == 0, "resume after the kill failed: %s", out);
    CHECK_MSG(count_prefixed("kill.safetensors.tmp.") == 0, "the next save left the killed one's temporary file");

    /* Random moments: after the first checkpoint exists, 0-300 ms into a run that writes one
     * after every step (most of its time goes to writing and syncing them). */
    srand(12345);
    char ck2[512];
    ft_path(ck2, sizeof ck2, "random.safetensors");
    int left_temp = 0;
    for (int i = 0; i < 6; i++) {
        remove(ck2);
        snprintf(args, sizeof args, "models/lenet.cfg --device cpu --train-limit 400 --batch 20 --epochs 2 --quiet "
                 "--checkpoint-every 1 --save %s", ck2);
        pid = ft_start_train("", args, ft_small_mnist(), log);
        CHECK(pid > 0);
        int exists = wait_for_path(ck2, 120000);
        sleep_ms(rand() % 300);
        kill(pid, SIGKILL);
        int rc = wait_exit(pid);
        CHECK_MSG(exists && rc == 128 + SIGKILL, "kill %d: exit %d", i, rc);
        CHECK_MSG(ft_checkpoint_loads("models/lenet.cfg", ck2), "kill %d: the checkpoint left behind is not resumable",
                  i);
        left_temp += count_prefixed("random.safetensors.tmp.");
        remove_prefixed("random.safetensors.tmp.");
    }
    printf("    kill between write and rename: previous checkpoint intact and resumed; 6 kills at random "
           "moments: every checkpoint resumable (%d inside a write)\n", left_temp);
    return BN_PASS;
}
