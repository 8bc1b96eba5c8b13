/* test_resume.c - `train --resume` and the files a run writes, through the CLI: a checkpoint
 * follows the model's layers, not its file's text, and the settings changed since are listed
 * and used; the metrics log of a resumed run goes on from the first run's; where --save and
 * --log cannot write is said before training; a log that fills up ends the run with an error
 * and no half row. */
#include <stdlib.h>
#include <sys/stat.h>

#include "file_testing.h"
#include "testing.h"

static char out[1 << 16];

/* `blobnet train ARGS` on the CPU over 600 images of the small set: in batches of 50, 12 steps an
 * epoch. */
static int run_train(const char *args)
{
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "%s train %s --device cpu --batch 50 --train-limit 600 --data %s", bn_test_cli(), args,
             ft_small_mnist());
    return bn_test_run(cmd, out, sizeof out);
}

/* models/lenet.cfg with each `from` of edits replaced by its `to`, written to path. */
static int write_lenet_edited(const char *path, const char *const (*edits)[2], size_t n)
{
    static char text[8192], next[8192];
    if (ft_read_text("models/lenet.cfg", text, sizeof text) != 0) return -1;
    for (size_t i = 0; i < n; i++) {
        char *at = strstr(text, edits[i][0]);
        if (!at) return -1;
        snprintf(next, sizeof next, "%.*s%s%s", (int)(at - text), text, edits[i][1], at + strlen(edits[i][0]));
        memcpy(text, next, sizeof text);
    }
    return ft_write_text(path, text);
}

/* The log's lines with the two time columns (seconds, images_per_s) left out. */
static int log_without_times(const char *path, char *buf, size_t cap)
{
    static char text[1 << 15];
    if (ft_read_text(path, text, sizeof text) != 0) return -1;
    size_t n = 0;
    for (char *line = strtok(text, "\n"); line && n < cap; line = strtok(NULL, "\n")) {
        char *cut = line;
        for (int commas = 0; *cut && commas < 7; cut++) commas += *cut == ',';
        n += (size_t)snprintf(buf + n, cap - n, "%.*s\n", (int)(cut - line), line);
    }
    return 0;
}

/* The checkpoint follows the layers: comments and [train] may change, and the resumed run says
 * which settings changed and trains with the new ones; `test` takes the file too. Another layer
 * is refused, naming the line of the description that differs. */
BN_TEST(resume_follows_the_layers_not_the_model_file_text)
{
    CHECK(ft_small_mnist() != NULL);
    char model[512], edited[512], other[512], ck[512], log[512], args[4096], text[1 << 14];
    ft_path(model, sizeof model, "follow.cfg");
    ft_path(edited, sizeof edited, "follow-edited.cfg");
    ft_path(other, sizeof other, "follow-other.cfg");
    ft_path(ck, sizeof ck, "follow.safetensors");
    ft_path(log, sizeof log, "follow.csv");
    CHECK(write_lenet_edited(model, NULL, 0) == 0);
    static const char *const settings[][2] = {
        {"# LeNet", "# (edited: a comment, the epochs and the rate)\n# LeNet"}, {"epochs = 10", "epochs = 3"},
        {"lr = 0.01", "lr = 0.02"}, {"filters = 20\nsize = 5", "size = 5\nfilters = 20"}};
    CHECK(write_lenet_edited(edited, settings, 4) == 0);
    static const char *const layer[][2] = {{"filters = 50", "filters = 40"}};
    CHECK(write_lenet_edited(other, layer, 1) == 0);

    snprintf(args, sizeof args, "%s --epochs 1 --quiet --save %s", model, ck);
    CHECK_MSG(run_train(args) == 0, "%s", out);
    snprintf(args, sizeof args, "%s --quiet --resume %s --log %s --log-every 1", edited, ck, log);
    CHECK_MSG(run_train(args) == 0, "%s", out);
    snprintf(text, sizeof text, "blobnet: note: resuming %s with changed training settings: epochs 1 -> 3, lr 0.01 -> "
             "0.02\n", ck);
    CHECK_MSG(strstr(out, text), "%s", out);
    /* Steps 13 on, at the new rate: lenet's inv policy from 0.02, not from 0.01. */
    CHECK(ft_read_text(log, text, sizeof text) == 0);
    const char *row = strstr(text, "\n2,13,");
    CHECK_MSG(row && atof(row + strlen("\n2,13,")) > 0.019, "%s", text);
    CHECK_MSG(strstr(text, "\n3,36,"), "the run did not go on to epoch 3:\n%s", text);

    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s test %s %s --device cpu --data %s", bn_test_cli(), edited, ck, ft_small_mnist());
    CHECK_MSG(bn_test_run(cmd, out, sizeof out) == 0, "%s", out);
    snprintf(args, sizeof args, "%s --quiet --resume %s", other, ck);
    CHECK_MSG(run_train(args) == 1, "%s", out);
    snprintf(text, sizeof text, "blobnet: error: %s was saved from a different model than %s: the checkpoint has "
             "`conv2 conv2d <- pool1: filters=50 init=he size=5` where the model has `conv2 conv2d <- pool1: "
             "filters=40 init=he size=5`", ck, other);
    CHECK_MSG(strstr(out, text), "%s", out);
    snprintf(cmd, sizeof cmd, "%s test %s %s --device cpu --data %s", bn_test_cli(), other, ck, ft_small_mnist());
    CHECK_MSG(bn_test_run(cmd, out, sizeof out) == 1 && strstr(out, "was saved from a different model than"), "%s",
              out);
    return BN_PASS;
}

/* Two epochs in one run and in two give the same log: the resumed run appends to the first one's
 * after its header, and drops the rows of the steps it trains again (a run killed after its
 * checkpoint leaves some, the last perhaps unfinished). */
BN_TEST(resume_appends_to_the_log_of_the_run_it_resumes)
{
    CHECK(ft_small_mnist() != NULL);
    char full[512], half[512], ck[512], args[4096];
    static char want[1 << 14], got[1 << 14], text[1 << 14];
    ft_path(full, sizeof full, "append-full.csv");
    ft_path(half, sizeof half, "append-half.csv");
    ft_path(ck, sizeof ck, "append.safetensors");
    snprintf(args, sizeof args, "models/lenet.cfg --epochs 2 --quiet --log %s --log-every 4", full);
    CHECK_MSG(run_train(args) == 0, "%s", out);
    snprintf(args, sizeof args, "models/lenet.cfg --epochs 1 --quiet --log %s --log-every 4 --save %s", half, ck);
    CHECK_MSG(run_train(args) == 0, "%s", out);
    CHECK(ft_read_text(half, text, sizeof text) == 0);
    size_t n = strlen(text);
    snprintf(text + n, sizeof text - n, "2,16,0.00998,2.3,0.1,,,0.2,\n2,20,0.0099");
    CHECK(ft_write_text(half, text) == 0);
    snprintf(args, sizeof args, "models/lenet.cfg --epochs 2 --quiet --log %s --log-every 4 --resume %s", half, ck);
    CHECK_MSG(run_train(args) == 0, "%s", out);
    snprintf(text, sizeof text, "blobnet: note: %s: removed 2 lines after step 12, where the checkpoint was saved; "
             "this run writes them again\n", half);
    CHECK_MSG(strstr(out, text), "%s", out);
    CHECK(log_without_times(full, want, sizeof want) == 0 && log_without_times(half, got, sizeof got) == 0);
    CHECK_MSG(strcmp(want, got) == 0, "resumed log:\n%s\nuninterrupted:\n%s", got, want);
    CHECK(strstr(want, "\n2,24,"));

    /* A file that is not a metrics log is left alone. */
    CHECK(ft_write_text(half, "name,score\nada,3\n") == 0);
    CHECK_MSG(run_train(args) == 2, "%s", out);
    CHECK_MSG(strstr(out, "the first line is not a metrics log's header"), "%s", out);
    CHECK(ft_read_text(half, text, sizeof text) == 0 && strcmp(text, "name,score\nada,3\n") == 0);
    return BN_PASS;
}

/* text with each '@' replaced by the test directory. */
static void expand(const char *text, char *buf, size_t cap)
{
    size_t n = 0;
    for (const char *p = text; *p && n + 1 < cap; p++) {
        if (*p == '@') n += (size_t)snprintf(buf + n, cap - n, "%s", bn_test_tmpdir());
        else buf[n++] = *p;
    }
    buf[n < cap ? n : cap - 1] = '\0';
}

/* --save and --log naming a directory, a FIFO or a place no file can be made fail before the
 * data is read, in one line, with exit code 2. */
BN_TEST(resume_save_and_log_targets_are_checked_before_training)
{
    CHECK(ft_small_mnist() != NULL);
    char fifo[512], args[4096], needle[1024];
    ft_path(fifo, sizeof fifo, "save.fifo");
    CHECK(mkfifo(fifo, 0600) == 0);
    static const struct {
        const char *flag, *target, *needle;
    } cases[] = {
        {"--save", "@", "--save: @ is a directory, not a file that can be replaced"},
        {"--save", "@/save.fifo", "--save: @/save.fifo is not a regular file, not a file that can be replaced"},
        {"--save", "/proc/blobnet.safetensors", "--save: cannot create a file in directory /proc: "},
        {"--save", "''", "--save: an empty path names no file"},
        {"--log", "@", "--log: @ is a directory, not a file that can be written"},
        {"--log", "@/save.fifo", "--log: @/save.fifo is not a regular file, not a file that can be written"},
        {"--log", "@/nodir/log.csv", "--log: directory @/nodir does not exist"},
        {"--log", "/proc/blobnet.csv", "--log: cannot create /proc/blobnet.csv in directory /proc: "},
        {"--log", "''", "--log: an empty path names no file"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char target[600];
        expand(cases[i].target, target, sizeof target);
        expand(cases[i].needle, needle, sizeof needle);
        snprintf(args, sizeof args, "models/lenet.cfg --epochs 1 %s %s", cases[i].flag, target);
        int rc = run_train(args);
        CHECK_MSG(rc == 2, "case %zu: exit %d: %s", i, rc, out);
        CHECK_MSG(strncmp(out, "blobnet: error: ", 16) == 0 && strstr(out, needle), "case %zu: lacks '%s':\n%s", i,
                  needle, out);
        CHECK_MSG(strchr(out, '\n') == out + strlen(out) - 1, "case %zu: more than one line (training began?):\n%s", i,
                  out);
    }
    return BN_PASS;
}

/* A log that fills the disk (here: the file-size limit) ends the run with exit 1 and a message
 * naming the log; the log holds whole rows only. */
BN_TEST(resume_full_log_ends_the_run_with_whole_rows)
{
    CHECK(ft_small_mnist() != NULL);
    char log[512], cmd[4096], text[8192];
    ft_path(log, sizeof log, "full-disk.csv");
    snprintf(cmd, sizeof cmd, "trap '' XFSZ; ulimit -f 1; exec %s train models/lenet.cfg --device cpu --batch 50 "
             "--epochs 2 --train-limit 600 --quiet --data %s --log %s --log-every 1", bn_test_cli(), ft_small_mnist(), log);
    int rc = bn_test_run(cmd, out, sizeof out);
    CHECK_MSG(rc == 1, "exit %d: %s", rc, out);
    char needle[700];
    snprintf(needle, sizeof needle, "blobnet: error: %s: cannot write a row of the metrics log: File too large (the "
             "log ends with the last whole row)\n", log);
    CHECK_MSG(strstr(out, needle), "%s", out);
    CHECK(ft_read_text(log, text, sizeof text) == 0);
    size_t n = strlen(text);
    CHECK_MSG(n > 100 && text[n - 1] == '\n', "the log ends in the middle of a row:\n%s", text);
    int commas = 0, lines = 0;
    for (const char *p = text; *p; p++) commas += *p == ',', lines += *p == '\n';
    CHECK_MSG(commas == 10 * lines, "a row lacks fields:\n%s", text);
    return BN_PASS;
}
