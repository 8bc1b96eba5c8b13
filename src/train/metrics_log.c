#include "metrics_log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

const char bn_metrics_csv_header[] =
    "epoch,step,lr,train_loss,train_acc,test_loss,test_acc,seconds,images_per_s,val_loss,val_acc";

/* The header of logs written before the holdout set: their rows end at images_per_s. */
static const size_t header_before_holdout = sizeof "epoch,step,lr,train_loss,train_acc,test_loss,test_acc,seconds,"
                                                   "images_per_s" - 1;

/* Opens path with flags once it is known to be a regular file or absent: a FIFO named by mistake
 * would block the open until a reader came. */
static bn_status open_regular(bn_metrics_log *log, const char *path, int flags)
{
    *log = (bn_metrics_log){.path = path, .fd = -1};
    struct stat sb;
    if (stat(path, &sb) == 0 && !S_ISREG(sb.st_mode))
        return bn_error(BN_ERR_USAGE, "%s: the metrics log must be a regular file, and this is %s", path,
                        S_ISDIR(sb.st_mode) ? "a directory" : "not one");
    log->fd = open(path, flags | O_APPEND | O_CLOEXEC, 0666);
    if (log->fd < 0) return bn_error(BN_ERR_IO, "%s: cannot write the metrics log: %s", path, strerror(errno));
    if (fstat(log->fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        bn_metrics_log_close(log);
        return bn_error(BN_ERR_USAGE, "%s: the metrics log must be a regular file", path);
    }
    log->size = (long long)sb.st_size;
    return BN_OK;
}

/* Writes n bytes whole or cuts the file back to its last whole line. */
static bn_status write_whole(bn_metrics_log *log, const char *line, size_t n)
{
    size_t done = 0;
    int err = 0;
    while (done < n && !err) {
        ssize_t w = write(log->fd, line + done, n - done);
        if (w > 0) done += (size_t)w;
        else if (w == 0) err = ENOSPC;
        else if (errno != EINTR) err = errno;
    }
    if (!err) {
        log->size += (long long)n;
        return BN_OK;
    }
    if (done && ftruncate(log->fd, (off_t)log->size) != 0)
        return bn_error(BN_ERR_IO, "%s: cannot write a row of the metrics log (%s), nor remove the part written: %s",
                        log->path, strerror(err), strerror(errno));
    return bn_error(BN_ERR_IO, "%s: cannot write a row of the metrics log: %s (the log ends with the last whole row)",
                    log->path, strerror(err));
}

bn_status bn_metrics_log_row(bn_metrics_log *log, const char *fmt, ...)
{
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof line)
        return bn_error(BN_ERR_INTERNAL, "%s: a row of the metrics log does not fit in %zu bytes", log->path,
                        sizeof line);
    return write_whole(log, line, (size_t)n);
}

static bn_status write_header(bn_metrics_log *log)
{
    return bn_metrics_log_row(log, "%s\n", bn_metrics_csv_header);
}

bn_status bn_metrics_log_create(bn_metrics_log *log, const char *path)
{
    BN_TRY(open_regular(log, path, O_WRONLY | O_CREAT | O_TRUNC));
    bn_status s = write_header(log);
    if (s != BN_OK) bn_metrics_log_close(log);
    return s;
}

/* The step of a row "epoch,step,...", or -1 when the line does not start like one. */
static long row_step(const char *line)
{
    char *end;
    strtol(line, &end, 10);
    if (end == line || *end != ',') return -1;
    const char *at = end + 1;
    long step = strtol(at, &end, 10);
    return end == at || *end != ',' || step < 0 ? -1 : step;
}

/* Reads the log from its start: checks the header (and notes one of before the holdout columns), finds *keep, the length of the part that
 * ends with the last whole row of a step up to `step`; *dropped counts the lines after it. */
static bn_status scan(bn_metrics_log *log, FILE *f, long step, long long *keep, long *dropped)
{
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    long long at = 0;
    long number = 0;
    bn_status s = BN_OK;
    *keep = -1;
    *dropped = 0;
    size_t header = strlen(bn_metrics_csv_header);
    while (s == BN_OK && (n = getline(&line, &cap, f)) > 0) {
        number++;
        int whole = line[n - 1] == '\n';
        if (number == 1) {
            if (whole && (size_t)n == header_before_holdout + 1 &&
                memcmp(line, bn_metrics_csv_header, header_before_holdout) == 0)
                log->no_holdout_columns = 1;
            else if (!whole || (size_t)n != header + 1 || memcmp(line, bn_metrics_csv_header, header) != 0)
                s = bn_error(BN_ERR_USAGE, "%s: the first line is not a metrics log's header (%s); a resumed run "
                             "appends to the log of the run it resumes: name that log or a new file", log->path,
                             bn_metrics_csv_header);
        } else if (*keep >= 0) {
            (*dropped)++;
        } else if (!whole) {
            *keep = at;
            (*dropped)++;
        } else {
            long row = row_step(line);
            if (row < 0) s = bn_error(BN_ERR_USAGE, "%s:%ld: not a row of a metrics log (epoch,step,...)", log->path,
                                      number);
            else if (row > step) *keep = at, (*dropped)++;
        }
        at += n;
    }
    if (s == BN_OK && ferror(f)) s = bn_error(BN_ERR_IO, "%s: cannot read the metrics log: %s", log->path,
                                              strerror(errno));
    if (*keep < 0) *keep = at;
    free(line);
    return s;
}

bn_status bn_metrics_log_resume(bn_metrics_log *log, const char *path, long step, long *dropped)
{
    *dropped = 0;
    BN_TRY(open_regular(log, path, O_RDWR | O_CREAT));
    if (log->size == 0) {
        bn_status s = write_header(log);
        if (s != BN_OK) bn_metrics_log_close(log);
        return s;
    }
    int copy = dup(log->fd);
    FILE *f = copy >= 0 ? fdopen(copy, "rb") : NULL;
    bn_status s = f ? BN_OK : bn_error(BN_ERR_IO, "%s: cannot read the metrics log: %s", path, strerror(errno));
    if (!f && copy >= 0) close(copy);
    long long keep = 0;
    if (s == BN_OK) s = scan(log, f, step, &keep, dropped);
    if (f) fclose(f);
    if (s == BN_OK && keep < log->size && ftruncate(log->fd, (off_t)keep) != 0)
        s = bn_error(BN_ERR_IO, "%s: cannot remove the rows after step %ld from the metrics log: %s", path, step,
                     strerror(errno));
    if (s == BN_OK) log->size = keep;
    if (s != BN_OK) bn_metrics_log_close(log);
    return s;
}

bn_status bn_metrics_log_close(bn_metrics_log *log)
{
    if (log->fd < 0) return BN_OK;
    int r = close(log->fd);
    log->fd = -1;
    if (r != 0) return bn_error(BN_ERR_IO, "%s: cannot finish the metrics log: %s", log->path, strerror(errno));
    return BN_OK;
}
