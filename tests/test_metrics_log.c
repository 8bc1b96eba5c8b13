/* test_metrics_log.c - the CSV metrics log: whole rows or none (a row the file cannot take is cut
 * off again and named in the error), a resumed run's appending after the header is checked, the
 * rows it trains again dropped, and no file but a regular one opened. */
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "file_testing.h"
#include "testing.h"
#include "train/metrics_log.h"

#define HEADER "epoch,step,lr,train_loss,train_acc,test_loss,test_acc,seconds,images_per_s,val_loss,val_acc\n"
#define ROW(step) "1," #step ",0.01,2.3,0.1,,,0.5,,,\n"

BN_TEST(metrics_log_create_writes_the_header_and_rows)
{
    char path[512], text[1024];
    bn_metrics_log log;
    CHECK(ft_write_text(ft_path(path, sizeof path, "create.csv"), "old contents\n") == 0);
    CHECK_OK(bn_metrics_log_create(&log, path));
    CHECK_OK(bn_metrics_log_row(&log, "1,%d,0.01,2.3,0.1,,,0.5,,,\n", 4));
    CHECK_OK(bn_metrics_log_close(&log));
    CHECK(log.fd == -1);
    CHECK_OK(bn_metrics_log_close(&log));
    CHECK(ft_read_text(path, text, sizeof text) == 0);
    CHECK_MSG(strcmp(text, HEADER ROW(4)) == 0, "%s", text);
    return BN_PASS;
}

/* A resumed run's log keeps every row up to its checkpoint's step and loses the rest, which it
 * writes again; an unfinished last line goes too. */
BN_TEST(metrics_log_resume_keeps_rows_up_to_the_checkpoint)
{
    char path[512], text[1024];
    bn_metrics_log log;
    long dropped;
    ft_path(path, sizeof path, "resume.csv");
    CHECK(ft_write_text(path, HEADER ROW(4) ROW(8) ROW(12) "1,16,0.0") == 0);
    CHECK_OK(bn_metrics_log_resume(&log, path, 8, &dropped));
    CHECK(dropped == 2);
    CHECK_OK(bn_metrics_log_row(&log, ROW(9)));
    CHECK_OK(bn_metrics_log_close(&log));
    CHECK(ft_read_text(path, text, sizeof text) == 0);
    CHECK_MSG(strcmp(text, HEADER ROW(4) ROW(8) ROW(9)) == 0, "%s", text);

    /* Nothing after the checkpoint: the log is left whole. */
    CHECK_OK(bn_metrics_log_resume(&log, path, 9, &dropped));
    CHECK(dropped == 0);
    CHECK_OK(bn_metrics_log_close(&log));
    CHECK(ft_read_text(path, text, sizeof text) == 0 && strcmp(text, HEADER ROW(4) ROW(8) ROW(9)) == 0);

    /* A log that is not there yet, or empty, is started. */
    ft_path(path, sizeof path, "resume-new.csv");
    CHECK_OK(bn_metrics_log_resume(&log, path, 8, &dropped));
    CHECK_OK(bn_metrics_log_close(&log));
    CHECK(ft_read_text(path, text, sizeof text) == 0 && strcmp(text, HEADER) == 0 && dropped == 0);
    return BN_PASS;
}

/* A log written before the holdout columns resumes as it was: its rows keep their nine fields. */
#define OLD_HEADER "epoch,step,lr,train_loss,train_acc,test_loss,test_acc,seconds,images_per_s\n"
BN_TEST(metrics_log_resumes_a_log_without_the_holdout_columns)
{
    char path[512], text[1024];
    bn_metrics_log log;
    long dropped;
    CHECK(ft_write_text(ft_path(path, sizeof path, "old.csv"), OLD_HEADER "1,4,0.01,2.3,0.1,,,0.5,\n") == 0);
    CHECK_OK(bn_metrics_log_resume(&log, path, 4, &dropped));
    CHECK(log.no_holdout_columns == 1 && dropped == 0);
    CHECK_OK(bn_metrics_log_close(&log));
    CHECK(ft_write_text(path, HEADER ROW(4)) == 0);
    CHECK_OK(bn_metrics_log_resume(&log, path, 4, &dropped));
    CHECK(log.no_holdout_columns == 0);
    CHECK_OK(bn_metrics_log_close(&log));
    CHECK(ft_read_text(path, text, sizeof text) == 0 && strcmp(text, HEADER ROW(4)) == 0);
    return BN_PASS;
}

/* A resumed run appends only to a metrics log, and leaves any other file as it was. */
BN_TEST(metrics_log_resume_refuses_another_file)
{
    static const struct {
        const char *text, *needle;
    } cases[] = {
        {"name,score\n1,2\n", "the first line is not a metrics log's header (epoch,step,"},
        {"epoch,step,lr\n", "the first line is not a metrics log's header"},
        {HEADER "1,4,0.01\nnot a row\n", "notarow.csv:3: not a row of a metrics log (epoch,step,...)"},
        {HEADER "1,-4,0.01\n", "notarow.csv:2: not a row"},
    };
    char path[512], text[1024];
    ft_path(path, sizeof path, "notarow.csv");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        bn_metrics_log log;
        long dropped;
        CHECK(ft_write_text(path, cases[i].text) == 0);
        CHECK_ERR(bn_metrics_log_resume(&log, path, 100, &dropped), BN_ERR_USAGE, cases[i].needle);
        CHECK(strstr(bn_last_error(), path) && log.fd == -1);
        CHECK(ft_read_text(path, text, sizeof text) == 0 && strcmp(text, cases[i].text) == 0);
    }
    return BN_PASS;
}

/* A directory or a FIFO (whose open would wait for a reader) is refused before it is opened. */
BN_TEST(metrics_log_refuses_files_that_are_not_regular)
{
    char fifo[512];
    bn_metrics_log log;
    long dropped;
    CHECK_ERR(bn_metrics_log_create(&log, bn_test_tmpdir()), BN_ERR_USAGE, "the metrics log must be a regular file, "
                                                                           "and this is a directory");
    CHECK(mkfifo(ft_path(fifo, sizeof fifo, "log.fifo"), 0600) == 0);
    CHECK_ERR(bn_metrics_log_create(&log, fifo), BN_ERR_USAGE, "log.fifo: the metrics log must be a regular file");
    CHECK_ERR(bn_metrics_log_resume(&log, fifo, 1, &dropped), BN_ERR_USAGE, "must be a regular file");
    CHECK_ERR(bn_metrics_log_create(&log, "/nonexistent-dir/log.csv"), BN_ERR_IO,
              "/nonexistent-dir/log.csv: cannot write the metrics log: No such file or directory");
    return BN_PASS;
}

/* In a child whose files may not grow past `limit` bytes (as on a full disk), writes rows until
 * one fails; reports through the exit code: 0 when the failure named the file and the reason and
 * the file then ended with the last whole row. */
static int fill_until_full(const char *path, rlim_t limit)
{
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        signal(SIGXFSZ, SIG_IGN);
        struct rlimit small = {limit, limit};
        bn_metrics_log log;
        if (setrlimit(RLIMIT_FSIZE, &small) != 0 || bn_metrics_log_create(&log, path) != BN_OK) _exit(2);
        bn_status s = BN_OK;
        int rows = 0;
        while (s == BN_OK && rows < 1000) s = bn_metrics_log_row(&log, "1,%d,0.01,2.345678,0.1,,,0.5,,,\n", ++rows);
        int named = s == BN_ERR_IO && strstr(bn_last_error(), path) && strstr(bn_last_error(), "File too large") &&
                    strstr(bn_last_error(), "cannot write a row of the metrics log");
        struct stat sb;
        int whole = fstat(log.fd, &sb) == 0 && sb.st_size == log.size && sb.st_size <= (off_t)limit;
        bn_metrics_log_close(&log);
        _exit(named && whole && rows > 1 ? 0 : 1);
    }
    int st;
    return waitpid(pid, &st, 0) == pid && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

BN_TEST(metrics_log_never_holds_half_a_row)
{
    char path[512], text[8192];
    ft_path(path, sizeof path, "full.csv");
    for (rlim_t limit = 300; limit < 340; limit += 7) {
        CHECK_MSG(fill_until_full(path, limit) == 0, "limit %d", (int)limit);
        CHECK(ft_read_text(path, text, sizeof text) == 0);
        size_t n = strlen(text);
        CHECK_MSG(n > strlen(HEADER) && text[n - 1] == '\n', "limit %d: the log ends in the middle of a row:\n%s",
                  (int)limit, text);
        int commas = 0;
        for (const char *p = text; *p; p++) commas += *p == ',';
        int lines = 0;
        for (const char *p = text; *p; p++) lines += *p == '\n';
        CHECK_MSG(commas == 10 * lines, "limit %d: a row lacks fields:\n%s", (int)limit, text);
    }
    return BN_PASS;
}
