/* test_dist_schedule.c - how a rank's steps are run: when its gradient all-reduces run
 * (train/dist_schedule.h; the timed choice's steps on any machine, and on two GPUs that running
 * them beside the backward pass, after it, or as timed trains the same bits), and which captured
 * graph a short last batch replays. */
#include "testing.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "file_testing.h"
#include "multigpu_testing.h"
#include "train/dist_schedule.h"

static char out[1 << 16];

BN_TEST(dist_schedule_reads_its_three_ways_and_names_a_wrong_one)
{
    static const char *const text[] = {NULL, "", "timed", "beside", "after"};
    static const int want[] = {BN_SCHEDULE_TIMED, BN_SCHEDULE_TIMED, BN_SCHEDULE_TIMED, BN_SCHEDULE_BESIDE,
                               BN_SCHEDULE_AFTER};
    for (int i = 0; i < 5; i++) {
        int mode = -1;
        CHECK(bn_schedule_parse(text[i], &mode) == BN_OK);
        CHECK_MSG(mode == want[i], "'%s' read as %d, want %d", text[i] ? text[i] : "(unset)", mode, want[i]);
        CHECK(strcmp(bn_schedule_name(mode), text[i] && *text[i] ? text[i] : "timed") == 0);
    }
    int mode;
    CHECK(bn_schedule_parse("Beside", &mode) == BN_ERR_USAGE);
    CHECK_MSG(strstr(bn_last_error(), "BLOBNET_DIST_SCHEDULE=Beside") && strstr(bn_last_error(), "timed, beside, after"),
              "%s", bn_last_error());
    return BN_PASS;
}

/* Steps until the schedule asks for `what`, at most `limit`; -1 when it never does. */
static int steps_until(bn_schedule *s, int what, int limit)
{
    for (int i = 1; i <= limit; i++)
        if (bn_schedule_advance(s, 1) == what) return i;
    return -1;
}

BN_TEST(dist_schedule_times_both_ways_on_full_steps_and_keeps_the_faster)
{
    bn_schedule s;
    CHECK(bn_schedule_open(&s, BN_SCHEDULE_TIMED, 7) == BN_OK);
    CHECK(!s.after && s.capacity == 7);
    /* The window opens after BN_SCHEDULE_SETTLE full steps and closes BN_SCHEDULE_STEPS later. */
    CHECK_MSG(steps_until(&s, BN_SCHEDULE_MARK, 50) == BN_SCHEDULE_SETTLE, "the window's start");
    /* A short batch, or a new epoch, opens it again. */
    CHECK(bn_schedule_advance(&s, 1) == BN_SCHEDULE_NOTHING);
    CHECK(bn_schedule_advance(&s, 0) == BN_SCHEDULE_NOTHING);
    CHECK(steps_until(&s, BN_SCHEDULE_MARK, 50) == BN_SCHEDULE_SETTLE);
    bn_schedule_epoch(&s);
    CHECK(steps_until(&s, BN_SCHEDULE_MARK, 50) == BN_SCHEDULE_SETTLE);
    CHECK_MSG(steps_until(&s, BN_SCHEDULE_MEASURE, 50) == BN_SCHEDULE_STEPS, "the window's end");
    /* Beside timed: the steps turn to after, and their graph is to be captured again. */
    CHECK(bn_schedule_took(&s, 1.25) == 1);
    CHECK(s.after && s.ms[0] == 1.25);
    CHECK(steps_until(&s, BN_SCHEDULE_MARK, 50) == BN_SCHEDULE_SETTLE);
    CHECK(steps_until(&s, BN_SCHEDULE_MEASURE, 50) == BN_SCHEDULE_STEPS);
    CHECK(bn_schedule_took(&s, 1.5) == 2);
    /* The ranks' sums decide: beside was faster here, so the way changes back. */
    bn_schedule t = s;
    CHECK(bn_schedule_decide(&t, 2.5, 3.0) == 1 && !t.after);
    CHECK(bn_schedule_decide(&s, 3.0, 2.5) == 0 && s.after);
    /* Decided: nothing more is timed. */
    CHECK(steps_until(&s, BN_SCHEDULE_MARK, 100) == -1 && steps_until(&t, BN_SCHEDULE_MEASURE, 100) == -1);
    CHECK(bn_schedule_took(&s, 9.0) == 0 && s.after);
    bn_schedule_close(&s);
    /* Asked for: one way throughout, never timed. */
    for (int mode = BN_SCHEDULE_BESIDE; mode <= BN_SCHEDULE_AFTER; mode++) {
        CHECK(bn_schedule_open(&s, mode, 3) == BN_OK);
        CHECK(s.after == (mode == BN_SCHEDULE_AFTER));
        CHECK(steps_until(&s, BN_SCHEDULE_MARK, 100) == -1);
        bn_schedule_close(&s);
    }
    CHECK(bn_schedule_open(&s, 7, 3) == BN_ERR_INTERNAL);
    return BN_PASS;
}

/* LeNet on 2 GPUs for 3 epochs of 47 steps, the last of 56 images (28 a rank, captured in the
 * second epoch and replayed in the third), with the all-reduces beside the backward pass, after it,
 * as the timed choice has it (which changes its way during the first epoch) and after it in eager
 * steps: the same weights and optimizer state, byte for byte. The timed run says what it chose. */
BN_TEST(multigpu_all_reduces_beside_or_after_the_backward_train_the_same_bits)
{
    SKIP_WITHOUT_TWO_GPUS();
    static const char *const ways[] = {"beside", "after", "timed", "after"};
    char path[4][512], cmd[8192];
    for (int i = 0; i < 4; i++) {
        ft_path(path[i], sizeof path[i], "schedule-%s%s.safetensors", ways[i], i == 3 ? "-eager" : "");
        snprintf(cmd, sizeof cmd,
                 "env BLOBNET_DIST_SCHEDULE=%s %s train models/lenet.cfg --batch 64 --seed 1 --train-limit 3000 "
                 "--epochs 3 --gpus 2 --save %s --data %s%s",
                 ways[i], bn_test_cli(), path[i], bn_test_data_dir(), i == 3 ? " --no-graph" : "");
        CHECK_MSG(bn_test_run(cmd, out, sizeof out) == 0, "%s:\n%s", ways[i], out);
        const char *said = strstr(out, "gradient all-reduces ");
        CHECK_MSG(i == 2 ? said != NULL : said == NULL, "%s: the choice %s said:\n%s", ways[i],
                  i == 2 ? "was not" : "was", out);
        if (said) printf("    %.*s\n", (int)strcspn(said, "\n"), said);
    }
    CHECK_MSG(mg_files_equal(path[0], path[1]), "after the backward pass trained other bits than beside it");
    CHECK_MSG(mg_files_equal(path[0], path[2]), "the timed choice trained other bits than beside the backward pass");
    CHECK_MSG(mg_files_equal(path[1], path[3]), "replayed steps trained other bits than eager ones");
    return BN_PASS;
}

/* A short last batch whose share on a rank is as large as that rank's share of a full batch (63 on
 * 2 GPUs: 31 and 32, a full batch's 32 and 32) replays a graph of its own, not the full batch's,
 * whose weight in the sum (32 of 64) and place are another's: replayed steps train the bits of
 * eager ones. */
BN_TEST(multigpu_short_batch_with_a_full_share_replays_its_own_graph)
{
    SKIP_WITHOUT_TWO_GPUS();
    char path[2][512], cmd[8192];
    for (int eager = 0; eager < 2; eager++) {
        ft_path(path[eager], sizeof path[eager], "short-share-%d.safetensors", eager);
        snprintf(cmd, sizeof cmd,
                 "%s train models/lenet.cfg --batch 64 --seed 1 --quiet --train-limit 3007 --epochs 3 --gpus 2 "
                 "--save %s --data %s%s",
                 bn_test_cli(), path[eager], bn_test_data_dir(), eager ? " --no-graph" : "");
        CHECK_MSG(bn_test_run(cmd, out, sizeof out) == 0, "%s:\n%s", eager ? "eager" : "replayed", out);
    }
    CHECK_MSG(mg_files_equal(path[0], path[1]), "replayed steps trained other bits than eager ones");
    return BN_PASS;
}
