/* metrics_log.h - the CSV metrics log of a training run (`train --log FILE`): a header line, then
 * a row for every logged step and every epoch. Each row goes to the file in one write, and a row
 * the file cannot take whole (a full disk) is cut off again, so the log never holds half a row; a
 * resumed run appends to the log its first part wrote. */
#ifndef BN_METRICS_LOG_H
#define BN_METRICS_LOG_H

#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The header line of the log (without its newline). */
extern const char bn_metrics_csv_header[];

typedef struct bn_metrics_log {
    const char *path;   /* the caller's string, named in every message */
    int fd;             /* -1 once closed */
    long long size;     /* bytes of whole lines in the file: a failed row is cut back to this */
    int no_holdout_columns; /* a resumed log written before val_loss and val_acc: rows end at
                             * images_per_s */
} bn_metrics_log;

/* Starts the log of a fresh run at path: a regular file, created or emptied, holding the header.
 * On failure nothing is left open. */
bn_status bn_metrics_log_create(bn_metrics_log *log, const char *path);

/* Opens the log of a run resumed at step `step` for appending: a file that is missing or empty
 * gets the header; any other must start with it. Rows of steps after `step`, which the resumed
 * run trains again, and an unfinished last line are removed; *dropped counts them. */
bn_status bn_metrics_log_resume(bn_metrics_log *log, const char *path, long step, long *dropped);

/* Appends one line (printf-style, newline included) in one write; one that cannot be written
 * whole is removed and the error names the file and the reason. */
bn_status bn_metrics_log_row(bn_metrics_log *log, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* Closes the log; an error when the system reports that earlier writes failed. */
bn_status bn_metrics_log_close(bn_metrics_log *log);

#ifdef __cplusplus
}
#endif
#endif
