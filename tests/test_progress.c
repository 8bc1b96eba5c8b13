/* test_progress.c - the live progress line: its contents, at most 10 redraws a second,
 * cleared at the end of an epoch; shown by `blobnet train` on a terminal and never in a pipe. */
#include "testing.h"

#include <stdlib.h>

#include "train/progress.h"

/* A step info half way through epoch 1 of 2: 320 of 640 images, 160 img/s. */
static bn_step_info half_way(bn_blob *sums)
{
    return (bn_step_info){.epoch = 1, .epochs = 2, .batch = 5, .batches = 10, .seen = 320, .count = 640,
                          .images = 320, .seconds = 2.0, .sums = sums};
}

static int count_of(const char *s, const char *needle)
{
    int n = 0;
    for (const char *p = strstr(s, needle); p; p = strstr(p + 1, needle)) n++;
    return n;
}

BN_TEST(progress_line_shows_counts_rate_metrics_and_eta)
{
    bn_step_info info = half_way(NULL);
    char line[256];
    bn_progress_format(line, sizeof line, 100, &info, 0.5, 0.75);
    CHECK_MSG(strstr(line, "epoch 1/2  50% ["), "%s", line);
    CHECK_MSG(strstr(line, "]  5/10     160 img/s  loss 0.5000  acc  75.00%  ETA 0:02"), "%s", line);
    CHECK_MSG(strlen(line) == 99, "%zu columns: %s", strlen(line), line); /* the bar fills the width */
    int cells = (int)(strchr(line, ']') - strchr(line, '[')) - 1;
    CHECK_MSG(count_of(line, "=") == cells / 2, "%d of %d cells filled: %s", count_of(line, "="), cells, line);
    /* Narrow terminals lose the bar, never the numbers. */
    bn_progress_format(line, sizeof line, 60, &info, 0.5, 0.75);
    CHECK_MSG(!strchr(line, '[') && strstr(line, "ETA 0:02"), "%s", line);
    /* Long epochs count hours; no rate yet means no ETA. */
    info.seen = 1;
    info.images = 1;
    info.seconds = 6.0;
    bn_progress_format(line, sizeof line, 100, &info, 0.5, 0.75);
    CHECK_MSG(strstr(line, "ETA 1:03:54"), "%s", line);
    info.seconds = 0;
    bn_progress_format(line, sizeof line, 100, &info, 0.5, 0.75);
    CHECK_MSG(strstr(line, "ETA -:--"), "%s", line);
    return BN_PASS;
}

BN_TEST(progress_redraws_at_most_ten_times_a_second_and_clears_at_epoch_end)
{
    bn_blob *sums = bn_blob_new("sums", 2, 1, 1, 1);
    CHECK(sums != NULL);
    float *s = bn_blob_host_wr(sums);
    s[0] = 160.0f; /* loss sum over 320 images: 0.5 */
    s[1] = 240.0f; /* correct: 75% */
    char *text = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&text, &len);
    CHECK(mem != NULL);
    bn_progress p;
    bn_progress_init(&p, mem);
    CHECK(p.width == 80); /* not a terminal */
    bn_step_info info = half_way(sums);
    /* Steps at these times draw at 0, 0.1 and 0.25 only. */
    const double times[] = {0.0, 0.05, 0.0999, 0.1, 0.15, 0.19, 0.25, 0.3};
    for (int i = 0; i < 8; i++) CHECK_OK(bn_progress_update(&p, BN_PROGRESS_STEP, &info, times[i]));
    CHECK(p.draws == 3 && p.shown);
    CHECK_OK(bn_progress_update(&p, BN_PROGRESS_EVAL, &info, 0.31)); /* drawn at once */
    CHECK_OK(bn_progress_update(&p, BN_PROGRESS_DONE, &info, 0.32));
    CHECK(p.draws == 4 && !p.shown);
    CHECK_OK(bn_progress_update(&p, BN_PROGRESS_STEP, &info, 0.33)); /* a new epoch draws at once */
    CHECK(p.draws == 5);
    bn_progress_clear(&p);
    bn_progress_clear(&p); /* nothing left to clear */
    fclose(mem);
    CHECK_MSG(count_of(text, "\r") == 7 && count_of(text, "\033[K") == 7, "%s", text);
    CHECK(strstr(text, "loss 0.5000  acc  75.00%") && strstr(text, "evaluating"));
    CHECK(!strchr(text, '\n'));
    size_t n = strlen(text);
    CHECK(n >= 4 && strcmp(text + n - 4, "\r\033[K") == 0);
    for (const char *line = strchr(text, '\r'); line; line = strchr(line + 1, '\r')) {
        const char *end = strstr(line, "\033[K");
        CHECK(end && end - line - 1 <= 79); /* cut to the width */
    }
    free(text);
    bn_blob_free(sums);
    return BN_PASS;
}

static char out[1 << 16];

/* Runs `blobnet train` for epochs of 640 images under a pseudo-terminal (script) or in a pipe. */
static int train_640(int on_terminal, int epochs, const char *extra)
{
    char inner[2048], cmd[4096];
    snprintf(inner, sizeof inner, "%s train models/lenet.cfg --device cpu --data %s --epochs %d --train-limit 640 %s",
             bn_test_cli(), bn_test_data_dir(), epochs, extra);
    if (on_terminal) snprintf(cmd, sizeof cmd, "script -qec '%s' /dev/null", inner);
    else snprintf(cmd, sizeof cmd, "%s", inner); /* popen's stdout is a pipe */
    return bn_test_run(cmd, out, sizeof out);
}

BN_TEST(progress_shown_on_a_terminal_only)
{
    if (!bn_test_data_dir()) BN_SKIP_TEST("BLOBNET_TEST_DATA not set");
    if (system("script -qec true /dev/null >/dev/null 2>&1") != 0) BN_SKIP_TEST("no util-linux script");
    CHECK_MSG(train_640(1, 2, "") == 0, "%s", out);
    /* The first step of each epoch draws at once; the epoch line replaces the live line. */
    CHECK_MSG(strstr(out, "\repoch 1/2  10% [") && strstr(out, "\repoch 2/2  10% ["), "no live line:\n%s", out);
    CHECK_MSG(strstr(out, "img/s  loss ") && strstr(out, "ETA "), "%s", out);
    CHECK_MSG(strstr(out, "\r\033[Kepoch 1/2  lr ") && strstr(out, "\r\033[Kepoch 2/2  lr "), "%s", out);
    CHECK(strstr(out, "final test accuracy: "));

    CHECK_MSG(train_640(0, 1, "") == 0, "%s", out);
    CHECK_MSG(!strchr(out, '\r') && !strchr(out, '\033'), "control characters in a pipe:\n%s", out);
    CHECK(strstr(out, "\nepoch 1/1  lr ") && strstr(out, "\nfinal test accuracy: ") && count_of(out, "\n") == 3);

    /* --quiet: only the final line, on a terminal too (which ends lines with \r\n). */
    CHECK_MSG(train_640(1, 1, "--quiet") == 0, "%s", out);
    CHECK_MSG(strncmp(out, "final test accuracy: ", 21) == 0 && count_of(out, "\n") == 1 &&
              count_of(out, "\r") == 1, "%s", out);
    return BN_PASS;
}
